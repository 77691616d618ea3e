"""The log view's ``&`` filters applied beyond the lines in memory: the newest lines of the whole
spool a filter set passes, and its texts searched in the gaps of lines not read (on the host)."""

from __future__ import annotations

import asyncio

from kvtui.logfilter import FilterSet, LineFilter
from kvtui.ui.log.model import HOST_PAGE, HostLog, LogSource, read_back, short
from kvtui.updates import GapSearchError, LogLine

READ_BACK_LIMIT = 500_000  # lines a filter set the spool cannot search in one pass reads back at most


def next_filters(current: FilterSet, text: str) -> tuple[FilterSet | None, str]:
    """The filter set after ``&`` typed ``text`` on ``current`` (a text adds a filter, ``-`` drops
    the newest, empty text clears them all) and what the status line says of it; None and why
    when nothing changes."""
    text = text.strip()
    if not text:
        return FilterSet(), ("filters cleared" if len(current) > 1 else "filter cleared")
    if text == "-":
        if not current:
            return None, "no filter to drop (& adds one)"
        return current.without_last(), f"dropped &{short(current.filters[-1].raw)}"
    flt = LineFilter.parse(text)
    if flt is None:
        return None, "&! needs a text or a rank after it"
    if flt in current.filters:
        return None, f"already filtered: &{short(flt.raw)}"
    fs = current.added(flt)
    return fs, "; ".join(fs.notes)


async def spool_filter_hits(source: LogSource, fs: FilterSet, window: int) -> tuple[list[LogLine], int]:
    """The newest ``window`` lines of ``source`` that ``fs`` passes: one spool search when the set
    is one text or rank, or its texts make one expression (negation and regex included); a set with
    ranks and more is read back and tested (at most READ_BACK_LIMIT lines). And the first seq read
    (0: the whole log; -1: ``window`` found before that). Raises what the spool raises for an
    expression it refuses."""
    first = fs.filters[0]
    pattern: str | None
    if fs.rank is not None:
        pattern, regex, rank = "", False, fs.rank
    elif len(fs) == 1 and not first.negate and not first.regex and first.rank is None:
        pattern, regex, rank = first.text, False, None  # the spool's plain search: smart case too
    else:
        pattern, regex, rank = fs.spool_regex(), True, None
    if pattern is not None:
        hits = await asyncio.to_thread(
            source.search, pattern, regex=regex, rank=rank, start_seq=-1, reverse=True, limit=window
        )
        return hits, (0 if len(hits) < window else -1)
    return await asyncio.to_thread(read_back, source, fs, window, READ_BACK_LIMIT)


def gaps_unsearchable(host: HostLog, fs: FilterSet) -> str | None:
    """Why the host's gaps are not searched for ``fs`` (None: they are)."""
    reason = host.gap_search_unavailable()
    if reason is None and not fs.has_rank and fs.ins:
        return None
    return (f"the host cannot search its unread lines ({reason})" if reason
            else "a rank is not searched there" if fs.has_rank
            else "a filter that only hides lines is not searched there")


async def search_gaps(host: HostLog, fs: FilterSet, unread: int) -> str:
    """``fs``'s positive texts searched in each of the host's gaps (the hiding ones applied to what
    comes back): what was found in the ``unread`` lines, as the filter's message says it."""
    found, failed = 0, ""
    for gap in host.gaps:
        seen: set[tuple[int | None, str]] = set()
        for flt in fs.ins:
            try:
                got = await host.search_gap(gap, flt.text, regex=flt.regex, ignore_case=flt.ignore_case,
                                            limit=HOST_PAGE, newest=True)
            except GapSearchError as exc:
                failed = str(exc)
                continue
            seen.update((h.line_no, h.text) for h in got if fs.matches_text(h.text, None))
        found += len(seen)
    if failed:
        return f"{unread:,} lines not read: the host could not search them ({failed})"
    plus = "+" if found >= HOST_PAGE else ""
    single = fs.ins[0] if len(fs) == 1 and not fs.ins[0].regex else None
    how = f"on the host: /{short(single.text)} shows them" if single is not None else "on the host"
    return f"{found:,}{plus} more in the {unread:,} lines not read ({how})"
