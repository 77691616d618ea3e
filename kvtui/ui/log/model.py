"""What the log view reads and shows, as plain data and pure functions: its sources' protocols
(``LogSource``: the spool itself; ``HostLog``: the gaps of a long-running server, searched on the host),
the view's modes, the text query of a search or filter, a host search's results, and the line-text
helpers (the engine's own timestamp, the gutter, wrapped rows, status notes)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeAlias

from kvtui.logfilter import FilterSet
from kvtui.spool import Spool
from kvtui.ui.log.window import LineWindow
from kvtui.updates import GapMark, HostMatch, LogLine

READ_BACK_CHUNK = 20_000
HOST_PAGE = 200  # matches a search of a gap brings back from the host at a time


# The complete log of a host: its spool (read, search, len), the one kind of source there is; its
# methods' signatures are the spool's own, not restated here.
LogSource: TypeAlias = Spool


class HostLog(Protocol):
    """The lines a host's follower did not read (a server up for days): the gaps (their marker
    rows in the spool) and a search of them on the host (``kvtui.monitor.HostMonitor``)."""

    @property
    def gaps(self) -> list[GapMark]: ...

    def gap_search_unavailable(self) -> str | None: ...

    async def search_gap(
        self, gap: GapMark, pattern: str, *, regex: bool = False, ignore_case: bool = True, context: int = 2,
        limit: int = 200, newest: bool = False, after: HostMatch | None = None,
    ) -> list[HostMatch]: ...


@dataclass(slots=True)
class HostResults:
    """What a search of a gap brought back, shown in ``ViewMode.HOST``: the rows of each match
    (``match_seqs``, in order), and whether the host may hold more after the last one."""

    gap: GapMark
    query: str
    errors: bool  # ``e``/``E``: error lines, not the search
    hits: list[HostMatch]
    match_seqs: list[int]
    more: bool
    wrapped: bool = False  # the search that found them went on past the log's end (start)


def with_note(message: str, note: str) -> str:
    return f"{message} ({note})" if note else message


def wrap_note(note: str, wrapped: bool, forward: bool) -> str:
    """A search's note, with where it went on from when it passed the log's end (start)."""
    if not wrapped:
        return note
    went = "past the end, on from the top" if forward else "past the top, on from the end"
    return f"{went}; {note}" if note else went


def wrapped_rows(length: int, width: int, indent: int) -> int:
    """Rows a line of ``length`` cells takes wrapped at ``width``, its continuation rows indented
    by ``indent``."""
    if length <= width:
        return 1
    return 1 + math.ceil((length - width) / max(1, width - indent))


# the engine's own timestamp at a line's start: SGLang ``[2025-06-01 12:00:00 TP0] …`` (``[… ]`` when
# it has no rank), vLLM ``INFO 06-01 12:00:00 [file.py:12] …`` (``(EngineCore_DP0 pid=7) INFO …`` in V1)
_SGLANG_STAMP = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(\] ?| )")
_VLLM_STAMP = re.compile(
    r"((?:\([^()]{1,80}\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
)


def without_own_stamp(text: str) -> str:
    """``text`` without the engine's own timestamp at its start (``t`` shows the line's time in a
    column of its own: the engine's stamp when it printed one): ``[TP0] …``, ``INFO [file.py:12] …``.
    Two anchored matches, only while timestamps are shown."""
    first = text[:1]
    if first == "[":
        m = _SGLANG_STAMP.match(text)
        if m is not None:
            return text[m.end():] if m.group(1).startswith("]") else "[" + text[m.end():]
    elif first and first in "(DIWEC":
        m = _VLLM_STAMP.match(text)
        if m is not None:
            return m.group(1) + text[m.end():]
    return text


def gutter_mark(marked: bool, cursor: bool) -> str:
    """The cell left of a line: ``▌`` a mark (``m``), ``▸`` the cursor line (not marked)."""
    return "▌" if marked else ("▸" if cursor else " ")


def short(text: str, width: int = 24) -> str:
    """A search or filter text inside a status message: cut with … so the message's key words
    (what happened) are never what a narrow status line loses."""
    return text if len(text) <= width else text[: width - 1] + "…"


# --------------------------------------------------------------------------------------------
# Matching (pure)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TextQuery:
    """A search or text filter: plain text, case-insensitive unless it has an upper-case letter
    (smart case)."""

    text: str

    @property
    def ignore_case(self) -> bool:
        return self.text == self.text.lower()

    def compiled(self) -> re.Pattern[str]:
        return re.compile(re.escape(self.text), re.IGNORECASE if self.ignore_case else 0)

    def spool_args(self) -> tuple[str, bool]:
        """(pattern, regex) for ``LogSource.search`` (a plain pattern there is smart case too)."""
        return self.text, False


class ViewMode(StrEnum):
    LIVE = "live"  # the newest lines, in memory
    HISTORY = "history"  # a window read back from the spool around a search hit
    FILTER = "filter"  # only lines that pass the & filter (from the whole spool)
    HOST = "host"  # lines a search found on the host, in a gap the follower did not read


def read_back(source: LogSource, fs: FilterSet, want: int, limit: int) -> tuple[list[LogLine], int]:
    """The newest ``want`` lines of ``source`` that ``fs`` passes, newest first, reading back at
    most ``limit`` lines; and the first seq read (0: the whole log; -1: ``want`` found before
    that). Runs in a thread."""
    pos = len(source)
    out: list[LogLine] = []
    read = 0
    while pos > 0 and len(out) < want and read < limit:
        start = max(0, pos - READ_BACK_CHUNK)
        lines = source.read(start, pos - start)
        read += len(lines)
        pos = start
        out.extend(reversed([ln for ln in lines if fs.matches(ln)]))
    return out[:want], (-1 if len(out) >= want else pos)


def longest(view: LineWindow | list[LogLine], last: int) -> int:
    """The longest text among the newest ``last`` lines of ``view`` (a window builds no line)."""
    if isinstance(view, LineWindow):
        return view.text_lengths(last)
    return max((len(line.text) for line in view[-last:]), default=0)
