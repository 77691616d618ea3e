"""The console's adapter of the stall detector (``kvtui.boot.stall``, pure core): the host pane
feeds it the monitor's log batches and GPU updates and asks it once a second."""

from __future__ import annotations

from collections.abc import Iterable

from kvtui.boot.stall import GPU_CHANGE_MIB, Stall
from kvtui.boot.stall import StallDetector as CoreStallDetector
from kvtui.gpu import GpuSample
from kvtui.updates import LinePart, columns

__all__ = ["GPU_CHANGE_MIB", "Stall", "StallDetector"]


class StallDetector(CoreStallDetector):
    """``kvtui.boot.stall.StallDetector`` fed with the monitor's ``LinePart``s."""

    def log_parts(self, parts: Iterable[LinePart], now: float) -> None:
        self.feed(list(columns(parts)), now)

    def gpu_activity(self, samples: Iterable[GpuSample], now: float) -> None:
        self.gpu(samples, now)
