"""HostMonitor: runs one host's streams -> parser -> BootTracker; GPU history; connection state.

Publishes typed, batched updates for any view (the TUI, ``kvtui wait``).
Not part of the pure core (it drives a ``HostBackend``), but imports no textual.

CONTRACT shared with ``kvtui/ui`` and ``kvtui/commands/wait.py`` — the update types below.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kvtui.boot import Boot
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.hosts.backend import ConnStatus


@dataclass(frozen=True, slots=True)
class LogLine:
    """A line for display. ``seq`` is its index in the host's spool (0-based, all boots)."""

    seq: int
    text: str  # ANSI stripped; the engine's own prefix kept (it is what operators grep for)
    ts: datetime | None
    rank: str | None
    boot: int  # index into the tracker's boots
    # "phase" | "error" | "warning" | "progress" | "serving" | "marker" (a new boot starts) | ""
    style: str = ""


@dataclass(frozen=True, slots=True)
class LogBatch:
    lines: tuple[LogLine, ...]


@dataclass(frozen=True, slots=True)
class BootState:
    """The current boot changed (phase, figures, failure, ready, serving). ``boot`` is live
    state owned by the monitor: read it on the event loop, do not mutate it."""

    index: int
    boot: Boot
    new_boot: bool = False


@dataclass(frozen=True, slots=True)
class GpuUpdate:
    samples: tuple[GpuSample, ...]
    # processes holding memory on the server's GPUs that are not the server's (stale / foreign)
    foreign: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class ConnUpdate:
    status: ConnStatus


MonitorUpdate = LogBatch | BootState | GpuUpdate | ConnUpdate


# ---------------------------------------------------------------------------------------------
# The monitor itself (implementation lands with the hosts issue). Signature is the contract.
# ---------------------------------------------------------------------------------------------
#
# class HostMonitor:
#     def __init__(self, name: str, backend: HostBackend, *, host: HostConfig | None = None,
#                  state_dir: Path | None = None, log_window: int = 5000,
#                  gpu_history: int = 3600, flush_interval: float = 0.05,
#                  gpu_interval: float = 1.0, start: LogStart = LogStart.CURRENT_BOOT,
#                  clock: Callable[[], float] = time.time) -> None
#     async def run(self, sink: Callable[[Sequence[MonitorUpdate]], None]) -> None
#         """Run until cancelled; ``sink`` gets batches at most every ``flush_interval``."""
#     tracker: BootTracker            # .boots, .current
#     status: ConnStatus
#     latest_gpus: tuple[GpuSample, ...]
#     def gpu_history(self, index: int) -> Sequence[tuple[float, float]]   # (ts, used_mib), bounded
#     spool: Spool                    # the complete log on disk; search/filter read it back
#         def read(self, start_seq: int, count: int) -> list[LogLine]
#         def search(self, pattern: str, *, regex: bool = False, rank: str | None = None,
#                    start_seq: int = 0, reverse: bool = False, limit: int = 1000) -> list[LogLine]
#         def __len__(self) -> int
#     async def close(self) -> None
