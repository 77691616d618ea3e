"""The log panel: bounded window, follow/pause with a new-lines badge, search and filter reaching
the whole spool (a real ``kvtui.spool.Spool`` on disk), error jumps, marks, wrap, timestamps."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ui_helpers import Harness, log_lines, wait_for

from kvtui.logfilter import LineFilter
from kvtui.monitor import LogLine
from kvtui.spool import Spool
from kvtui.ui.log.model import TextQuery, ViewMode
from kvtui.ui.log.panel import LogPanel, LogStatus
from kvtui.ui.log.view import LogView


def make_spool(tmp_path: Path, count: int) -> tuple[Spool, list[LogLine]]:
    spool = Spool.create(tmp_path / "state", "demo")
    lines = []
    for ln in log_lines(count):
        lines.append(spool.append(ln.text, boot=0, ts=ln.ts, rank=ln.rank, style=ln.style))
    spool.flush()
    return spool, lines


def following(view: LogView) -> bool:
    return view.follow  # a call, so the type checker does not narrow a reactive across awaits


def mode(view: LogView) -> ViewMode:
    return view.mode


def badge_text(panel: LogPanel) -> str:
    return panel.query_one(LogStatus).badge


def test_rank_and_text_filters_parse() -> None:
    assert LineFilter.parse("") is None
    assert LineFilter.parse("  ") is None
    for rank in ("TP3", "tp3", "DP0 TP1", "Worker_TP2", "EngineCore_DP0"):
        flt = LineFilter.parse(rank)
        assert flt is not None
        assert flt.rank == rank
    text = LineFilter.parse("out of memory")
    assert text is not None
    assert text.rank is None
    assert TextQuery("oom").ignore_case
    assert not TextQuery("OOM").ignore_case


async def test_window_is_bounded_and_follow_keeps_the_newest_line_in_view() -> None:
    panel = LogPanel(window=500)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        for start in range(0, 3000, 100):
            view.append(log_lines(100, start=start))
        await pilot.pause()
        assert len(view.lines) == 500
        assert view.lines[0].seq == 2500
        assert following(view)
        assert view.scroll_y == view.max_scroll_y
        assert view.pending == 0
        assert badge_text(panel) == ""


async def test_scrolling_up_pauses_and_counts_new_lines_then_f_resumes() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(200))
        await pilot.pause()
        view.focus()
        await pilot.press("pageup")
        await pilot.pause()
        assert not following(view)
        top = view.scroll_y
        view.append(log_lines(37, start=200))
        await pilot.pause()
        assert view.pending == 37
        assert view.scroll_y == top  # the view did not jump
        assert "↓ 37 new lines (f)" in badge_text(panel)
        view.toggle_follow()
        await pilot.pause()
        assert following(view)
        assert view.pending == 0
        assert view.scroll_y == view.max_scroll_y
        assert badge_text(panel) == ""


async def test_scrolling_back_to_the_bottom_resumes_following() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(200))
        await pilot.pause()
        view.focus()
        await pilot.press("up", "up")
        assert not following(view)
        await pilot.press("end")
        await pilot.pause()
        assert following(view)


async def test_error_jumps_and_marks() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(400))  # errors at 50, 150, 250, 350
        await pilot.pause()
        assert view.next_error(forward=False)
        assert view.cursor == 350
        assert not following(view)
        assert view.next_error(forward=False)
        assert view.cursor == 250
        assert view.next_error(forward=True)
        assert view.cursor == 350
        assert not view.next_error(forward=True)
        assert "no next error" in view.message
        # the cursor line is on screen
        row = view.lines.index(next(ln for ln in view.lines if ln.seq == 350))
        assert view.scroll_y <= row < view.scroll_y + view.scrollable_content_region.height
        assert view.toggle_mark() == 350
        assert 350 in view.marks
        assert view.toggle_mark() == 350
        assert 350 not in view.marks


async def test_filter_by_rank_in_memory_and_new_lines_keep_being_filtered() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(160))
        view.set_filter("TP3")
        await pilot.pause()
        assert mode(view) is ViewMode.FILTER
        assert {ln.rank for ln in view.lines} == {"TP3"}
        assert len(view.lines) == 20
        view.append(log_lines(16, start=160))
        assert len(view.lines) == 22
        view.set_filter("")
        assert mode(view) is ViewMode.LIVE
        assert len(view.lines) == 176


async def test_search_and_filter_reach_lines_no_longer_in_memory(tmp_path: Path) -> None:
    spool, lines = make_spool(tmp_path, 5000)
    panel = LogPanel(window=200, source=spool)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(lines)
        await pilot.pause()
        assert view.lines[0].seq == 4800  # only the tail is in memory
        # a line only the spool still has
        view.set_search("tick 1234")
        await wait_for(pilot, lambda: view.cursor == 1234)
        assert mode(view) is ViewMode.HISTORY
        assert "found in the spool" in view.message
        assert any(ln.seq == 1234 for ln in view.lines)
        # new lines while reading history: counted, the view stays put
        more = [spool.append(ln.text, boot=0, ts=ln.ts, rank=ln.rank, style=ln.style)
                for ln in log_lines(5, start=5000)]
        view.append(more)
        assert view.pending == 5
        assert view.cursor == 1234
        # f returns to the live tail
        view.toggle_follow()
        await pilot.pause()
        assert mode(view) is ViewMode.LIVE
        assert view.lines[-1].seq == 5004
        # filter by rank over the whole spool: every TP5 line of 5005, the newest window of them
        view.set_filter("TP5")
        await wait_for(pilot, lambda: "in the whole log" in view.message)
        assert {ln.rank for ln in view.lines} == {"TP5"}
        assert len(view.lines) == 200
        assert view.lines[-1].seq == 5005 - 1 - ((5004 - 5) % 8)
        # a text filter with smart case, from the spool (& adds to the set: clear it first)
        view.set_filter("")
        view.set_filter("runtimeerror")
        await wait_for(pilot, lambda: "in the whole log" in view.message)
        assert len(view.lines) == 50  # errors at seq % 100 == 50
        assert all("RuntimeError" in ln.text for ln in view.lines)
    spool.close()


async def test_search_n_and_N_walk_matches_newer_and_older(tmp_path: Path) -> None:
    spool, lines = make_spool(tmp_path, 1000)
    panel = LogPanel(window=300, source=spool)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(lines)
        await pilot.pause()
        # backwards (\): the first match before the bottom of the screen; n goes on backwards
        view.set_search("RuntimeError", forward=False)  # case-sensitive (has capitals); errors at ..50
        await wait_for(pilot, lambda: view.cursor == 950)
        view.finder.repeat_search()
        await wait_for(pilot, lambda: view.cursor == 850)
        view.finder.repeat_search()
        await wait_for(pilot, lambda: view.cursor == 750)
        view.finder.repeat_search()  # 650 is older than the window: read back from the spool
        await wait_for(pilot, lambda: view.cursor == 650)
        assert mode(view) is ViewMode.HISTORY
        view.finder.repeat_search(same=False)  # N: the other way
        await wait_for(pilot, lambda: view.cursor == 750)
        view.set_search("no such text anywhere")
        await wait_for(pilot, lambda: "no match in the whole log" in view.message)
    spool.close()


async def test_search_highlights_matches_on_screen() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 12)) as pilot:
        view = panel.view
        view.append(log_lines(60))
        await pilot.pause()
        before = view.render_line(0)
        view.set_search("scheduler")
        await pilot.pause()
        match_style = view.get_component_rich_style("logview--match", partial=True)
        styled = [seg for y in range(view.size.height) for seg in view.render_line(y) if seg.text == "scheduler"]
        assert styled
        assert all(seg.style is not None and seg.style.bgcolor == match_style.bgcolor for seg in styled)
        assert before.text != ""


async def test_wrap_and_timestamps_change_the_rows() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(40, 20)) as pilot:
        view = panel.view
        view.append(log_lines(30))
        await pilot.pause()
        assert view.virtual_size.height == 30
        view.wrap = True
        await pilot.pause()
        assert view.virtual_size.height > 30  # long lines take several rows
        assert view.virtual_size.width <= view.size.width
        texts = "".join(view.render_line(y).text for y in range(view.size.height))
        assert "scheduler tick 29" in texts.replace(" ", "").replace("schedulertick", "scheduler tick ")
        view.wrap = False
        view.timestamps = True
        await pilot.pause()
        view.scroll_to(y=0, animate=False, immediate=True)
        assert view.render_line(0).text.startswith(" 12:00:00.000 ")


@pytest.mark.parametrize("kind", ["search", "filter"])
async def test_find_bar_opens_submits_and_escape_closes(kind: str) -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(160))
        await pilot.pause()
        panel.open_find(kind)
        await pilot.pause()
        await pilot.press(*"TP3", "enter")
        await pilot.pause()
        if kind == "search":
            assert view.search_query is not None
            assert view.search_query.text == "TP3"
            assert view.cursor is not None
        else:
            assert view.line_filter is not None
            assert view.line_filter.rank == "TP3"
        assert view.has_focus
        panel.open_find(kind)
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert view.has_focus
        assert isinstance(view, LogView)


async def test_row_styles_are_kept_across_repaints_and_follow_a_theme_change() -> None:
    panel = LogPanel(window=500)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(50))
        await pilot.pause()
        styles = view._styles()
        view.append(log_lines(10, start=50))  # a batch: refresh() clears Textual's own style cache
        await pilot.pause()
        assert view._styles() is styles
        before = styles["error"]
        pilot.app.theme = "textual-light" if pilot.app.theme != "textual-light" else "textual-dark"
        await pilot.pause()
        after = view._styles()
        assert after is not styles
        assert after["error"] == view.get_component_rich_style("logview--error", partial=True)
        assert after["error"] != before
