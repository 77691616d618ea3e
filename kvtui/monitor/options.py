"""What a monitor is told: its ``MonitorOptions`` (typed, documented, checked when made), the host
it reads (``MonitorHost``) and where its updates go (``Sink``)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from kvtui.engines.events import Engine
from kvtui.hosts.backend import LogStart
from kvtui.updates import MonitorUpdate

MIN_FLUSH_INTERVAL: Final = 0.05  # log lines reach a view at most every 50 ms


class MonitorHost(Protocol):
    """What the monitor reads from a ``kvtui.config.HostConfig`` (structural)."""

    @property
    def server_engine(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def source_label(self) -> str: ...


Sink = Callable[[Sequence[MonitorUpdate]], None]


def engine_hint_for(host: MonitorHost | None) -> Engine | None:
    """The engine a host declares (``engine``; demo hosts: ``demo_engine``); None = detect."""
    if host is None:
        return None
    try:
        engine = Engine(host.server_engine)
    except ValueError:
        return None
    return None if engine is Engine.UNKNOWN else engine


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorOptions:
    """How a ``HostMonitor`` runs (every field has the console's default; ``dataclasses.replace``
    makes a variant). Made with a value no monitor can run with, it raises ``ValueError`` naming
    the field.

    - ``log_window``: display lines kept in memory (the window, ``recent``) and at most in one
      ``LogBatch``; every line is in the spool anyway. At least 1.
    - ``gpu_history``: GPU samples kept per GPU (``HostMonitor.gpu_history``). At least 1.
    - ``flush_interval``: seconds between two batches to the sink (> 0; below 50 ms counts as 50 ms).
    - ``serving_interval``: a boot whose only change is its live serving figures is published at
      most this often (seconds, ≥ 0).
    - ``gpu_interval``: seconds between two GPU readings (> 0).
    - ``pids_interval``: seconds between two readings of the server's PIDs (> 0; a new boot reads
      them at once).
    - ``start``: where the log is followed from (``LogStart``); ``began``: ``time.monotonic()``
      when the caller began following (``start=NEXT_BOOT``; None: when the monitor was made).
    - ``resume``: continue the newest spool set of this host and source instead of a new one.
    - ``retry_start``: retry a first connection that fails (False: one-shot commands give up).
    - ``live_prefilter``: lines that cannot change a boot are spooled and shown without being
      parsed (False: every line is parsed; the spool, boots and view are the same).
    - ``owns_backend``: ``close()`` closes the backend too.
    - ``state_dir``: where the spool lives (None: ``kvtui.config.state_dir()``).
    - ``clock``: wall-clock seconds for GPU samples without a time of their own.
    """

    log_window: int = 5000
    gpu_history: int = 3600
    flush_interval: float = 0.05
    serving_interval: float = 0.25
    gpu_interval: float = 1.0
    pids_interval: float = 10.0
    start: LogStart = LogStart.CURRENT_BOOT
    began: float | None = None
    resume: bool = False
    retry_start: bool = True
    live_prefilter: bool = True
    owns_backend: bool = True
    state_dir: Path | None = None
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        for name in ("log_window", "gpu_history"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MonitorOptions.{name} must be a whole number of lines/samples >= 1, not {value!r}")
        for name, least in (("flush_interval", None), ("gpu_interval", None), ("pids_interval", None),
                            ("serving_interval", 0.0)):
            value = getattr(self, name)
            ok = (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
                  and (value > 0 if least is None else value >= least))
            if not ok:
                want = "> 0" if least is None else ">= 0"
                raise ValueError(f"MonitorOptions.{name} must be a finite number of seconds {want}, not {value!r}")
        if not isinstance(self.start, LogStart):
            raise ValueError(f"MonitorOptions.start must be a LogStart, not {self.start!r}")

    @property
    def flush_every(self) -> float:
        """``flush_interval`` as the monitor uses it: at least ``MIN_FLUSH_INTERVAL``."""
        return max(MIN_FLUSH_INTERVAL, self.flush_interval)


DEFAULT_OPTIONS: Final = MonitorOptions()

__all__ = ["DEFAULT_OPTIONS", "MIN_FLUSH_INTERVAL", "MonitorHost", "MonitorOptions", "Sink", "engine_hint_for"]
