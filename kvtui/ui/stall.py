"""The stall detector: no log line and no GPU-memory change for a while in a non-final phase.

Pure logic (no textual): the host pane feeds it activity and asks it once a second.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Phase
from kvtui.gpu import GpuSample

# Memory moves by a few MiB all the time on a live GPU; below this it is not progress.
GPU_CHANGE_MIB = 64.0


class StallDetector:
    """``check(boot, now)`` returns how long the boot has shown no sign of life, once that
    reaches ``threshold`` seconds in a phase that is not final; else None. ``threshold`` <= 0
    turns it off."""

    def __init__(self, threshold: float, *, gpu_change_mib: float = GPU_CHANGE_MIB) -> None:
        self.threshold = threshold
        self.gpu_change_mib = gpu_change_mib
        self._last_activity: float | None = None
        self._gpu_used: dict[int, float] = {}

    def log_activity(self, now: float) -> None:
        self._last_activity = now

    def gpu_activity(self, samples: Iterable[GpuSample], now: float) -> None:
        changed = False
        for s in samples:
            if s.stale:
                continue
            before = self._gpu_used.get(s.index)
            if before is None or abs(s.used_mib - before) >= self.gpu_change_mib:
                self._gpu_used[s.index] = s.used_mib
                changed = before is not None or changed
        if changed or self._last_activity is None:
            self._last_activity = now

    def reset(self, now: float) -> None:
        self._last_activity = now

    def check(self, boot: Boot | None, now: float) -> float | None:
        if self.threshold <= 0 or boot is None or self._last_activity is None:
            return None
        if boot.status is not BootStatus.STARTING or boot.phase is Phase.READY:
            return None
        quiet = now - self._last_activity
        return quiet if quiet >= self.threshold else None
