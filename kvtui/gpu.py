"""GPU memory samples: parse ``nvidia-smi --query-gpu/--query-compute-apps`` CSV and NVML readings.

Pure core: no I/O here; backends feed text or NVML values in.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_mib: float
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    name: str = ""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one GPU. ``ts`` is wall-clock seconds (time.time()) of the reading."""

    index: int
    used_mib: float
    total_mib: float
    util: float | None = None
    ts: float = 0.0
    uuid: str | None = None
    name: str = ""
    temperature_c: float | None = None
    power_w: float | None = None
    processes: tuple[GpuProcess, ...] = field(default_factory=tuple)
    stale: bool = False

    @property
    def used_gib(self) -> float:
        return self.used_mib / 1024.0

    @property
    def total_gib(self) -> float:
        return self.total_mib / 1024.0
