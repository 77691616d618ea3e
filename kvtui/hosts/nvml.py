"""NVML, the local backend's GPU reading: the calls kvtui needs behind one object (``pynvml``
imported lazily, an optional dependency), each optional field read as None where the driver lacks
it, and a process's name from /proc."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from kvtui.gpu import GpuProcess, GpuSample, process_from_nvml, sample_from_nvml

NO_GPU_PREFIX: Final = "no NVIDIA GPU or driver on this machine"


class Nvml:
    """The NVML calls kvtui needs, behind one object (``pynvml`` imported lazily). ``module`` lets
    a caller pass another implementation of the same functions (tests on machines without GPUs).
    """

    def __init__(self, module: Any | None = None) -> None:
        self._mod = module
        self.error: str | None = None
        self._ok = False

    def init(self) -> bool:
        if self._ok:
            return True
        try:
            if self._mod is None:
                import pynvml  # lazy: an optional dependency (NVML), absent on a machine without it

                self._mod = pynvml
            self._mod.nvmlInit()
            count = int(self._mod.nvmlDeviceGetCount())
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound / DriverNotLoaded / …
            self.error = f"{NO_GPU_PREFIX} (NVML: {nvml_text(exc)})"
            return False
        if count == 0:
            self.error = f"{NO_GPU_PREFIX} (NVML found no devices)"
            with contextlib.suppress(Exception):
                self._mod.nvmlShutdown()
            return False
        self._ok = True
        self.error = None
        return True

    def shutdown(self) -> None:
        if self._ok and self._mod is not None:
            self._ok = False
            with contextlib.suppress(Exception):
                self._mod.nvmlShutdown()

    def _indices(self, wanted: Sequence[int] | None) -> list[int]:
        assert self._mod is not None
        count = int(self._mod.nvmlDeviceGetCount())
        return [i for i in range(count) if wanted is None or i in wanted]

    def sample(self, wanted: Sequence[int] | None, ts: float, *, processes: bool = True) -> list[GpuSample]:
        nv = self._mod
        assert nv is not None
        out: list[GpuSample] = []
        for i in self._indices(wanted):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            uuid = _opt_str(nv, "nvmlDeviceGetUUID", h)
            util_raw = _opt(nv, "nvmlDeviceGetUtilizationRates", h)
            procs = self._procs(h, i, uuid) if processes else []
            out.append(
                sample_from_nvml(
                    i,
                    mem.used,
                    mem.total,
                    ts,
                    util_gpu=_float_or_none(getattr(util_raw, "gpu", None)),
                    uuid=uuid,
                    name=_opt_str(nv, "nvmlDeviceGetName", h) or "",
                    temperature_c=_opt_float(nv, "nvmlDeviceGetTemperature", h, 0),  # NVML_TEMPERATURE_GPU
                    power_mw=_opt_float(nv, "nvmlDeviceGetPowerUsage", h),
                    power_limit_mw=_opt_float(nv, "nvmlDeviceGetEnforcedPowerLimit", h),
                    throttle_mask=_throttle_mask(nv, h),
                    processes=procs,
                )
            )
        return out

    def _procs(self, handle: Any, index: int, uuid: str | None) -> list[GpuProcess]:
        nv = self._mod
        assert nv is not None
        try:
            infos = nv.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception:
            return []
        out = []
        for p in infos:
            used = getattr(p, "usedGpuMemory", None)
            pid = int(p.pid)
            out.append(
                process_from_nvml(
                    pid, used if isinstance(used, int) else None, gpu_index=index, gpu_uuid=uuid, name=_proc_name(pid)
                )
            )
        return out

    def processes(self, wanted: Sequence[int] | None) -> list[GpuProcess]:
        nv = self._mod
        assert nv is not None
        out: list[GpuProcess] = []
        for i in self._indices(wanted):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            out.extend(self._procs(h, i, _opt_str(nv, "nvmlDeviceGetUUID", h)))
        return out


def _s(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _opt(mod: Any, fn: str, *args: Any) -> Any:
    """An optional NVML reading: None when the device (or this pynvml) does not support it."""
    try:
        return getattr(mod, fn)(*args)
    except Exception:
        return None


def _opt_str(mod: Any, fn: str, *args: Any) -> str | None:
    v = _opt(mod, fn, *args)
    return None if v is None else _s(v)


def _opt_float(mod: Any, fn: str, *args: Any) -> float | None:
    return _float_or_none(_opt(mod, fn, *args))


def _throttle_mask(mod: Any, handle: Any) -> int | None:
    """The clocks event (throttle) reasons: ``nvmlDeviceGetCurrentClocksEventReasons`` (driver
    535+), else the older ``…ThrottleReasons``; None when neither answers."""
    for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        if hasattr(mod, fn):
            v = _opt(mod, fn, handle)
            if isinstance(v, int):
                return v
    return None


def _float_or_none(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def nvml_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _proc_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
