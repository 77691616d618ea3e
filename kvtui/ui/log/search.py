"""The log view's search (``/``, ``\\``, ``n``, ``N``): ``LogSearch``, owned by ``LogView``
(``view.finder``), walks the lines in memory, then the spool (in the view's ``log-search`` worker),
and a gap of lines the follower did not read (a server up for days) on the host, whose matches it
shows as a view of their own (``ViewMode.HOST``). The query and the direction are the view's
(``search_query``, ``search_forward``: the status line shows them); the results are said in the
view's ``message``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kvtui.engines.events import LineStyle
from kvtui.longrun import gap_count
from kvtui.ui.log.model import HOST_PAGE, HostResults, TextQuery, ViewMode, short, with_note, wrap_note
from kvtui.updates import GapMark, GapSearchError, HostMatch, LogLine, make_line

if TYPE_CHECKING:
    from kvtui.ui.log.view import LogView

HOST_CONTEXT = 2  # lines of context each side of a match found on the host
HOST_SEQ_BASE = -(1 << 40)  # the rows of a host search's results: never a spool seq
# what ``e``/``E`` look for in a gap on the host (the lines the console would colour as errors)
HOST_ERROR_PATTERN = r"Traceback|ERROR|CRITICAL|FATAL|[Ee]xception|out of memory|CUDA error|NCCL error"


class LogSearch:
    """The search of one ``LogView``: it moves the view's cursor and shows its results in it."""

    def __init__(self, view: LogView) -> None:
        self.view = view
        self.host_results: HostResults | None = None  # the results shown in ViewMode.HOST

    def repeat_search(self, same: bool = True) -> None:
        """``n`` (``same``) goes on in the search's direction, ``N`` the other way."""
        self.find(self.view.search_forward if same else not self.view.search_forward)

    def find(self, forward: bool = True, *, note: str = "", wrapped: bool = False) -> None:
        """Go to the next match after the cursor (``forward``, newer) or before it (older; with no
        cursor, from the top / bottom of the screen); beyond the lines in memory the spool is
        searched, and a gap of lines the follower did not read (a server up for days) is searched
        on the host where the search crosses it (``note``: what an earlier step of the same search
        found there, for the message). Past the end (start) of the log it goes on once from the
        start (end): ``wrapped``."""
        query = self.view.search_query
        if query is None:
            return
        if self.view.mode is ViewMode.HOST and self.host_results is not None:
            self.find_in_host(forward)
            return
        found, note = self._scan(query, self._search_range(forward), forward, note, wrapped)
        if found:
            return
        view = self.view.shown_rows
        if self.view.source is None:
            if wrapped:
                self.view.message = with_note(f"no match for /{short(query.text)}", note)
                self.view.post_status()
            else:
                self._find_from_edge(query, forward, note)
            return
        edge = (view[-1].seq + 1) if forward and view else (view[0].seq - 1 if view else 0)
        if not forward and edge < 0:
            if wrapped:
                self.view.message = with_note(self._no_match(query.text), note)
                self.view.post_status()
            else:
                self._find_from_edge(query, forward, note)
            return
        self._search_spool(query, edge, forward, note, wrapped)

    def _find_from_edge(self, query: TextQuery, forward: bool, note: str) -> None:
        """The search passed the log's end (start): on from its start (end), once."""
        if self.view.source is not None:
            self._search_spool(query, 0 if forward else max(0, len(self.view.source) - 1), forward, note, wrapped=True)
            return
        n = len(self.view.shown_rows)
        found, note = self._scan(query, range(0, n) if forward else range(n - 1, -1, -1), forward, note, True)
        if not found:
            self.view.message = with_note(f"no match for /{short(query.text)}", note)
            self.view.post_status()

    def _scan(self, query: TextQuery, rng: range, forward: bool, note: str, wrapped: bool) -> tuple[bool, str]:
        """Walk the view's lines ``rng`` for the search: True when it went to a match, or on to
        the host's search of a gap of lines not read; and the note (a gap it could not search)."""
        pattern = query.compiled()
        view = self.view.shown_rows
        for i in rng:
            line = view[i]
            if line.style == "gap":
                gap = self.gap_at(line.seq)
                if gap is not None:
                    unable = self.gap_unsearchable(gap)
                    if unable is None:
                        self.search_gap(query.text, query.ignore_case, gap, forward, note=note, wrapped=wrapped)
                        return True, note
                    note = unable
                continue
            if self.view.line_filter is not None and not self.view.line_filter.matches(line):
                continue
            if pattern.search(line.text):
                self.view.set_cursor(line.seq)
                self.view.message = with_note(f"match on line {line.seq + 1:,}", wrap_note(note, wrapped, forward))
                self.view.post_status()
                return True, note
        return False, note

    def _search_range(self, forward: bool) -> range:
        """The indices of the view a search walks: after (before) the cursor, else from the top
        (bottom) of the screen on."""
        n = len(self.view.shown_rows)
        here = self.view.index_of(self.view.cursor) if self.view.cursor is not None else None
        if here is not None:
            return range(here + 1, n) if forward else range(here - 1, -1, -1)
        shown = self.view.screen_indices()
        if shown is None:
            return range(0)
        return range(shown[0], n) if forward else range(shown[1], -1, -1)

    def _no_match(self, text: str) -> str:
        """"no match in the whole log" — only when every line was searched: a gap the host could
        not search leaves "in the lines read"."""
        unread = self._unsearched_gaps()
        if unread:
            return f"no match in the lines read for /{short(text)}"
        return f"no match in the whole log for /{short(text)}"

    def _unsearched_gaps(self) -> bool:
        host = self.view.host_log
        return host is not None and bool(host.gaps) and host.gap_search_unavailable() is not None

    def gap_at(self, seq: int) -> GapMark | None:
        host = self.view.host_log
        if host is None:
            return None
        return next((g for g in host.gaps if g.seq == seq), None)

    def gap_unsearchable(self, gap: GapMark) -> str | None:
        """Why the host cannot search ``gap`` (None: it can) — said, never taken for "no match"."""
        host = self.view.host_log
        reason = host.gap_search_unavailable() if host is not None else "no host"
        if reason is None:
            return None
        return f"{gap_count(gap.gap.lines)} not searched: the host cannot search its unread lines ({reason})"

    def _gap_between(self, start_seq: int, hit_seq: int | None, forward: bool) -> GapMark | None:
        """The first gap a search from ``start_seq`` meets before its spool hit (or the end)."""
        host = self.view.host_log
        if host is None:
            return None
        if forward:
            return next((g for g in host.gaps if g.seq >= start_seq and (hit_seq is None or g.seq < hit_seq)), None)
        return next((g for g in reversed(host.gaps) if g.seq <= start_seq and (hit_seq is None or g.seq > hit_seq)),
                    None)

    def _search_spool(self, query: TextQuery, start_seq: int, forward: bool, note: str = "",
                      wrapped: bool = False) -> None:
        self._work(self._spool_search(query, start_seq, forward, note, wrapped))

    def _work(self, job: Coroutine[Any, Any, None]) -> None:
        """Run ``job`` as the view's search worker (a newer one cancels it: one search at a time)."""
        self.view.run_worker(job, group="log-search", exclusive=True, exit_on_error=False)

    async def _spool_search(self, query: TextQuery, start_seq: int, forward: bool, note: str = "",
                            wrapped: bool = False) -> None:
        source = self.view.source
        if source is None:
            return
        pattern, regex = query.spool_args()
        rank = self.view.line_filter.rank if self.view.line_filter is not None else None
        self.view.message = f"searching the spool for /{short(query.text)}…"
        self.view.post_status()
        hits = await asyncio.to_thread(
            source.search, pattern, regex=regex, rank=rank, start_seq=start_seq, reverse=not forward, limit=1
        )
        gap = self._gap_between(start_seq, hits[0].seq if hits else None, forward)
        if gap is not None:
            unable = self.gap_unsearchable(gap)
            if unable is None:
                await self._gap_search(query.text, query.ignore_case, gap, forward, note=note, wrapped=wrapped)
                return
            note = unable
        if not hits:
            if not wrapped:
                self._find_from_edge(query, forward, note)
                return
            self.view.message = with_note(self._no_match(query.text), note)
            self.view.post_status()
            return
        where = "match on line" if self.view.index_of(hits[0].seq) is not None else "found in the spool: line"
        await self.jump_via_source(hits[0].seq)
        self.view.message = with_note(f"{where} {hits[0].seq + 1:,} (/{short(query.text)})",
                                       wrap_note(note, wrapped, forward))
        self.view.post_status()

    # ---- a gap of lines not read, searched on the host ------------------------------------------

    def search_gap(self, text: str, ignore_case: bool, gap: GapMark, forward: bool, *, note: str = "",
                   errors: bool = False, wrapped: bool = False) -> None:
        """Search ``gap`` on the host in the view's search worker."""
        self._work(self._gap_search(text, ignore_case, gap, forward, note=note, errors=errors, wrapped=wrapped))

    async def _gap_search(self, text: str, ignore_case: bool, gap: GapMark, forward: bool, *, note: str = "",
                          errors: bool = False, after: HostMatch | None = None, wrapped: bool = False) -> None:
        """Search ``gap`` on the host (``HostLog.search_gap``; a worker: the loop stays free) and
        show what it brings back (``ViewMode.HOST``); nothing there: the search goes on past it."""
        host = self.view.host_log
        if host is None:
            return
        what = "errors" if errors else f"/{short(text)}"
        self.view.message = f"searching {gap_count(gap.gap.lines)} on the host for {what}…"
        self.view.post_status()
        try:
            hits = await host.search_gap(gap, HOST_ERROR_PATTERN if errors else text, regex=errors,
                                         ignore_case=ignore_case and not errors, context=HOST_CONTEXT,
                                         limit=HOST_PAGE, newest=not forward, after=after)
        except GapSearchError as exc:
            hits = []
            note = f"{gap_count(gap.gap.lines)} not searched: the host could not search them ({exc})"
        else:
            if not hits:
                searched = "the rest of the " if after is not None else ""
                note = f"none in {searched}{gap_count(gap.gap.lines)} searched on the host"
        if hits:
            self._show_host(HostResults(gap, text, errors, hits, [], more=len(hits) >= HOST_PAGE, wrapped=wrapped),
                            forward)
            return
        # nothing there: on from the gap's row, in the lines read
        await self.jump_via_source(gap.seq)
        if errors:
            self.view.next_error(forward, note=note)
        else:
            self.find(forward, note=note, wrapped=wrapped)

    def _show_host(self, res: HostResults, forward: bool) -> None:
        """The matches a host search brought back, with their context, as a view of their own:
        a header row, then each match under the number of its line in the gap."""
        seq = HOST_SEQ_BASE
        rows: list[LogLine] = []

        def add(text: str, style: LineStyle = "", ts: datetime | None = None) -> int:
            nonlocal seq
            rows.append(make_line(seq, text, ts, None, -1, style))
            seq += 1
            return seq - 1

        n = len(res.hits)
        one = n == 1 and not res.more
        what = ("error line" if one else "error lines") if res.errors else (
            f"{'match' if one else 'matches'} for /{short(res.query)}")
        add(f"from the host — {n:,}{'+' if res.more else ''} {what} in the {gap_count(res.gap.gap.lines)} not read",
            "marker")
        for hit in res.hits:
            where = f"line {hit.line_no:,} of the gap" if hit.line_no is not None else "in the gap"
            add(f"{where}", "marker")
            for t in hit.before:
                add(t)
            res.match_seqs.append(add(hit.text, "error" if res.errors else "", hit.ts))
            for t in hit.after:
                add(t)
        tail = "n: more from the host" if res.more else "n / N go on in the lines read · G: back to the log"
        add(f"end of the host's {what} — {tail}", "marker")
        self.host_results = res
        self.view.follow = False
        self.view.show_rows(rows, ViewMode.HOST)
        self.view.set_cursor(res.match_seqs[0] if forward else res.match_seqs[-1])
        self._host_message(res.match_seqs.index(self.view.cursor) if self.view.cursor in res.match_seqs else 0)

    def _host_message(self, k: int) -> None:
        res = self.host_results
        if res is None:
            return
        hit = res.hits[k]
        where = f" (line {hit.line_no:,} of the gap)" if hit.line_no is not None else ""
        more = "+" if res.more else ""
        self.view.message = f"from the host: match {k + 1:,} of {len(res.hits):,}{more}{where}"
        self.view.post_status()

    def find_in_host(self, forward: bool) -> None:
        """``n``/``N`` among a host search's matches; past the last (first) one, on: the host's
        next page, or the lines read after (before) the gap."""
        res = self.host_results
        assert res is not None
        seqs = res.match_seqs
        k = seqs.index(self.view.cursor) if self.view.cursor in seqs else (-1 if forward else len(seqs))
        k += 1 if forward else -1
        if 0 <= k < len(seqs):
            self.view.set_cursor(seqs[k])
            self._host_message(k)
            return
        self._leave_host_and_go_on(res, forward)

    def _leave_host_and_go_on(self, res: HostResults, forward: bool) -> None:
        self._work(self._go_on_past_host(res, forward))

    async def _go_on_past_host(self, res: HostResults, forward: bool) -> None:
        if forward and res.more:
            await self._gap_search(res.query, res.query == res.query.lower(), res.gap, True, errors=res.errors,
                                   after=res.hits[-1], wrapped=res.wrapped)
            return
        self.leave_host()
        await self.jump_via_source(res.gap.seq)
        if res.errors:
            self.view.next_error(forward, note="past the host's matches")
        else:
            self.find(forward, note="past the host's matches", wrapped=res.wrapped)

    def leave_host(self) -> None:
        self.host_results = None
        self.view.show_rows(self.view.live_rows, ViewMode.LIVE)
        self.view.cursor = None

    async def jump_via_source(self, seq: int) -> None:
        if self.view.index_of(seq) is None and self.view.source is not None:
            source = self.view.source
            half = self.view.window // 2
            start = max(0, seq - half)
            lines = await asyncio.to_thread(source.read, start, self.view.window)
            if self.view.line_filter is not None:
                lines = [ln for ln in lines if self.view.line_filter.matches(ln)]
            self.view.follow = False
            self.view.show_rows(lines, ViewMode.HISTORY)
        self.view.set_cursor(seq)
