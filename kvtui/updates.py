"""What the monitor publishes to its views: ``LogLine`` (a line for display, also what the spool
reads back) and the typed updates (``LogBatch``, ``BootState``, ``GpuUpdate``, ``ConnUpdate``).

CONTRACT shared by ``kvtui.monitor`` (the producer), ``kvtui.spool`` (stores and reads back
``LogLine``s), ``kvtui/ui`` and ``kvtui/commands/wait.py`` (the readers). Below the monitor and the
spool: it imports only the core's types and the backend's connection status.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from kvtui.boot import Boot
from kvtui.engines.events import LineStyle, LogGap
from kvtui.fastnew import fast_new
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


_TEXT_BAD: Final = str.maketrans({"\n": " ", "\r": " "})


@dataclass(frozen=True, slots=True)
class LineRun:
    """Consecutive lines of one boot that went to the spool without being parsed, as columns:
    seqs ``first`` .. ``first + len - 1``. ``line(k)`` builds the ``LogLine`` the parser would have
    shown (a line break inside a text shown as a space); a view builds only the rows it draws."""

    first: int
    boot: int
    texts: Sequence[str]
    ts: Sequence[datetime | None]
    ranks: Sequence[str | None]
    styles: Sequence[LineStyle | None]

    def __len__(self) -> int:
        return len(self.texts)

    def line(self, k: int) -> LogLine:
        text = self.texts[k]
        if "\n" in text or "\r" in text:
            text = text.translate(_TEXT_BAD)
        return make_line(self.first + k, text, self.ts[k], self.ranks[k], self.boot, self.styles[k] or "")

    def tail(self, n: int) -> LineRun:
        """The newest ``n`` lines (``n`` < ``len``)."""
        a = len(self.texts) - n
        return LineRun(self.first + a, self.boot, self.texts[a:], self.ts[a:], self.ranks[a:], self.styles[a:])


LinePart = LogLine | LineRun


class LogBatch:
    """The lines since the last flush, oldest first, as ``parts``: ``LogLine``s (parsed lines,
    boot markers) and ``LineRun``s (columns of lines spooled without parsing). ``lines`` builds
    every ``LogLine`` once (on first use); a reader that needs only the count, the seq range or
    some rows builds nothing (at ~50k lines/s a ``LogLine`` per line was ~20 % of the ingest)."""

    __slots__ = ("_lines", "_n", "parts")

    def __init__(self, parts: Sequence[LinePart]) -> None:
        self.parts: tuple[LinePart, ...] = tuple(parts)
        self._n = sum(1 if isinstance(p, LogLine) else len(p.texts) for p in self.parts)
        self._lines: tuple[LogLine, ...] | None = None

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"LogBatch({self._n} lines, seq {self.first_seq}..{self.last_seq})"

    @property
    def lines(self) -> tuple[LogLine, ...]:
        if self._lines is None:
            self._lines = tuple(expand(self.parts))
        return self._lines

    @property
    def first_seq(self) -> int | None:
        if not self.parts:
            return None
        p = self.parts[0]
        return p.seq if isinstance(p, LogLine) else p.first

    @property
    def last_seq(self) -> int | None:
        if not self.parts:
            return None
        p = self.parts[-1]
        return p.seq if isinstance(p, LogLine) else p.first + len(p.texts) - 1


def expand(parts: Iterable[LinePart]) -> list[LogLine]:
    """Every line of ``parts``, oldest first."""
    out: list[LogLine] = []
    for p in parts:
        if isinstance(p, LogLine):
            out.append(p)
        else:
            out.extend(map(p.line, range(len(p.texts))))
    return out


def columns(parts: Iterable[LinePart]) -> Iterator[tuple[Sequence[str], Sequence[datetime | None]]]:
    """The texts and times of ``parts``, one pair of columns per part, oldest first, without
    building a ``LogLine`` per line (what the stall detector reads)."""
    for p in parts:
        if isinstance(p, LogLine):
            yield (p.text,), (p.ts,)
        else:
            yield p.texts, p.ts


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


@dataclass(frozen=True, slots=True)
class GapMark:
    """A gap of lines the follower did not read (a server up for days): ``seq`` its marker row's
    index in the spool, ``gap`` what the record says (how many lines, their range on the host)."""

    seq: int
    gap: LogGap


@dataclass(frozen=True, slots=True)
class HostMatch:
    """A line a search of a gap found on the host (``HostMonitor.search_gap``): never in the
    spool. ``line_no`` its 1-based line number in the gap when known; ``before`` / ``after`` its
    context, oldest first; ``cursor`` where the source has one (a later page starts after it)."""

    text: str
    ts: datetime | None
    line_no: int | None = None
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    cursor: str | None = None


class GapSearchError(Exception):
    """The host cannot search a gap's lines (no ``search_log``, the range is gone, a tool is
    missing): the text says why, for the operator."""

# ``LogLine(...)`` without the frozen dataclass's per-field ``object.__setattr__`` (the hot path
# builds one per line)
make_line: Callable[[int, str, datetime | None, str | None, int, LineStyle], LogLine] = fast_new(LogLine)
