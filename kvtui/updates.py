"""What the monitor publishes to its views: ``LogLine`` (a line for display, also what the spool
reads back) and the typed updates (``LogBatch``, ``BootState``, ``GpuUpdate``, ``ConnUpdate``).

CONTRACT shared by ``kvtui.monitor`` (the producer), ``kvtui.spool`` (stores and reads back
``LogLine``s), ``kvtui/ui`` and ``kvtui/commands/wait.py`` (the readers). Below the monitor and the
spool: it imports only the core's types and the backend's connection status.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kvtui.boot import Boot
from kvtui.engines.events import LineStyle
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
    style: LineStyle = ""  # see ``LineStyle``


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

_new = object.__new__
_set_seq = LogLine.__dict__["seq"].__set__
_set_text = LogLine.__dict__["text"].__set__
_set_ts = LogLine.__dict__["ts"].__set__
_set_rank = LogLine.__dict__["rank"].__set__
_set_boot = LogLine.__dict__["boot"].__set__
_set_style = LogLine.__dict__["style"].__set__


def make_line(seq: int, text: str, ts: datetime | None, rank: str | None, boot: int, style: LineStyle) -> LogLine:
    """``LogLine(...)`` without the frozen dataclass's per-field ``object.__setattr__`` (the hot
    path builds one per line)."""
    line: LogLine = _new(LogLine)
    _set_seq(line, seq)
    _set_text(line, text)
    _set_ts(line, ts)
    _set_rank(line, rank)
    _set_boot(line, boot)
    _set_style(line, style)
    return line
