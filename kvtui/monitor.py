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
