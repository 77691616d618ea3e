"""A server up for days: the gaps of lines the follower did not read (their marker rows' seqs,
oldest first, bounded), and their search on the host (``SearchableLog``: only the matches and
their context come back)."""

from __future__ import annotations

from typing import Final

from kvtui.engines.events import LogGap, ParsedLine
from kvtui.engines.text import strip_ansi
from kvtui.hosts.backend import BackendError, SearchableLog
from kvtui.longrun import narrow_after
from kvtui.updates import GapMark, GapSearchError, HostMatch

MAX_GAPS: Final = 64  # gaps of unread lines a monitor keeps (a server up for days has one or two)


def searchable(backend: object) -> SearchableLog | None:
    """The backend when it can search a gap on the host (``SearchableLog``; looked up on the
    object, not with ``isinstance``: a protocol check is cached per class)."""
    return backend if callable(getattr(backend, "search_log", None)) else None  # type: ignore[return-value]


class Gaps:
    """The gaps of one monitor (``marks``) and their search on ``backend`` (``kind``: the host's
    kind, for the reason a host cannot search)."""

    def __init__(self, backend: object, kind: str) -> None:
        self.backend = backend
        self.kind = kind
        self.marks: list[GapMark] = []

    def add(self, mark: GapMark) -> None:
        self.marks.append(mark)
        del self.marks[:-MAX_GAPS]

    def note(self, seq: int, parsed: ParsedLine) -> None:
        """A line styled ``gap`` was spooled at ``seq``: its gap is kept."""
        ev = parsed.events[0] if parsed.events else None
        if isinstance(ev, LogGap):
            self.add(GapMark(seq, ev))

    def unavailable(self) -> str | None:
        """Why the host cannot search the lines its follower did not read (None: it can)."""
        if searchable(self.backend) is not None:
            return None
        return f"a {self.kind} host has no search of its log"

    async def search(
        self, gap: GapMark, pattern: str, *, regex: bool = False, ignore_case: bool = True, context: int = 2,
        limit: int = 200, newest: bool = False, after: HostMatch | None = None,
    ) -> list[HostMatch]:
        """See ``HostMonitor.search_gap``."""
        backend = searchable(self.backend)
        if backend is None:
            raise GapSearchError(self.unavailable() or "no search")
        where = gap.gap.where
        if after is not None:
            narrowed = narrow_after(where, after.cursor, after.ts)
            if narrowed is None:
                return []
            where = narrowed
        try:
            found = await backend.search_log(pattern, where, regex=regex, ignore_case=ignore_case, context=context,
                                             limit=limit, newest=newest)
        except BackendError as exc:
            raise GapSearchError(str(exc) or type(exc).__name__) from exc
        base = after.line_no if after is not None and after.line_no is not None else 0
        return [
            HostMatch(
                text=strip_ansi(m.record.text) if "\x1b" in m.record.text else m.record.text,
                ts=m.record.ts,
                line_no=(base + m.line_no) if m.line_no is not None else None,
                before=tuple(r.text for r in m.context_before),
                after=tuple(r.text for r in m.context_after),
                cursor=m.record.cursor,
            )
            for m in found
        ]


__all__ = ["MAX_GAPS", "Gaps", "searchable"]
