"""The log's cursor line (issue 22 #6, #9): j/k/arrows and the mouse move a visible cursor, ``m``
marks it (drawn in the gutter, said in the status line), ``y``/``Y`` copy; ``/`` finds the first
match after the cursor, a backwards search the first before it; long lines show that they are
cut; ``t`` does not repeat the engine's own timestamp. Each test fails on the code before."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from test_ui_helpers import T0, FakeClock, Harness, demo_app, log_lines, screen_text, settle, start_demo, wait_for

from kvtui.boot import BootStatus
from kvtui.monitor import LogLine
from kvtui.spool import Spool
from kvtui.ui.log.model import without_own_stamp
from kvtui.ui.log.panel import LogPanel
from kvtui.ui.log.view import LogView
from kvtui.ui.screens import HelpScreen
from kvtui.ui.widgets.boot import PhaseTimeline


def following(view: LogView) -> bool:
    return view.follow


def cursor(view: LogView) -> int | None:
    return view.cursor


def on_screen(view: LogView) -> list[int]:
    """The seqs of the lines on screen (no wrap: a row a line)."""
    top = int(view.scroll_y)
    height = view.scrollable_content_region.height
    return [ln.seq for ln in list(view.lines)[top : top + height]]


async def test_k_makes_a_cursor_on_the_last_line_on_screen_and_moves_it_without_scrolling() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(300))
        await pilot.pause()
        view.focus()
        await pilot.pause()
        assert cursor(view) is None  # following: no cursor
        bottom = view.scroll_y
        shown = on_screen(view)
        await pilot.press("k")
        assert cursor(view) == shown[-1] == 299  # made on the last line on screen
        assert not following(view)
        assert view.scroll_y == bottom  # nothing scrolled
        await pilot.press("k", "up", "k")
        assert cursor(view) == 296
        assert view.scroll_y == bottom
        await pilot.press("j", "down")
        assert cursor(view) == 298
        # up past the top of the screen: it scrolls a line at a time
        for _ in range(len(shown) - 2):
            await pilot.press("k")
        assert cursor(view) == shown[0]
        assert view.scroll_y == bottom
        await pilot.press("k")
        assert cursor(view) == shown[0] - 1
        assert view.scroll_y == bottom - 1
        assert on_screen(view)[0] == cursor(view)
        await pilot.pause()
        # the cursor line is drawn: its gutter and its background
        row = on_screen(view).index(shown[0] - 1)
        strip = view.render_line(row)
        assert strip.text.startswith("▸")
        cursor_bg = view.get_component_rich_style("logview--cursor", partial=True).bgcolor
        assert any(seg.style is not None and seg.style.bgcolor == cursor_bg for seg in strip)
        # a scroll leaves the cursor off screen: the next press starts from the screen's edge
        await pilot.press("pageup", "pageup")
        await pilot.pause()
        shown = on_screen(view)
        await pilot.press("k")
        assert cursor(view) == shown[-1]
        await pilot.press("g")  # the first line, the cursor along
        assert cursor(view) == 0
        assert view.scroll_y == 0
        # G follows again and drops it
        await pilot.press("G")
        assert following(view)
        assert cursor(view) is None


async def test_j_while_paused_without_a_cursor_starts_at_the_top_of_the_screen() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(300))
        await pilot.pause()
        view.focus()
        await pilot.press("pageup")
        await pilot.pause()
        assert not following(view)
        top = on_screen(view)[0]
        await pilot.press("j")
        assert cursor(view) == top


async def test_a_click_puts_the_cursor_on_the_clicked_line() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(300))
        await pilot.pause()
        shown = on_screen(view)
        assert await pilot.click(LogView, offset=(10, 3))
        await pilot.pause()
        assert cursor(view) == shown[3]
        assert not following(view)
        assert on_screen(view) == shown  # nothing moved


async def test_m_marks_the_cursor_line_in_the_gutter_and_says_so() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(300))
        await pilot.pause()
        view.focus()
        await pilot.press("k", "k")
        assert cursor(view) == 298
        assert view.toggle_mark() == 298
        assert view.message == "marked line 299 (1 mark)"
        await pilot.press("k", "k")
        view.toggle_mark()
        assert view.message == "marked line 297 (2 marks)"
        await pilot.pause()
        rows = on_screen(view)
        assert view.render_line(rows.index(298)).text.startswith("▌")
        assert view.render_line(rows.index(296)).text.startswith("▌")  # the cursor's own mark
        assert view.render_line(rows.index(297)).text.startswith(" ")
        await wait_for(pilot, lambda: "marked line 297 (2 marks)" in screen_text(pilot.app))
        view.toggle_mark()
        assert view.message == "unmarked line 297"
        assert view.marks == {298}
        # ' goes to the mark and moves the cursor there
        await pilot.press("apostrophe")
        assert cursor(view) == 298
        # following, m marks the last line on screen (the newest) and says which
        await pilot.press("G")
        assert view.toggle_mark() == 299
        assert view.message == "marked line 300, the last on screen (2 marks)"
        assert following(view)


def make_spool(tmp_path: Path, count: int) -> tuple[Spool, list[LogLine]]:
    spool = Spool.create(tmp_path / "state", "demo")
    lines = [spool.append(ln.text, boot=0, ts=ln.ts, rank=ln.rank, style=ln.style) for ln in log_lines(count)]
    spool.flush()
    return spool, lines


async def test_slash_finds_the_first_match_after_the_cursor_and_n_goes_on_through_the_spool(tmp_path: Path) -> None:
    spool, lines = make_spool(tmp_path, 1000)
    panel = LogPanel(window=300, source=spool)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(lines)
        await pilot.pause()
        view.set_cursor(800)
        view.set_search("RuntimeError")  # errors at ..50
        await wait_for(pilot, lambda: cursor(view) == 850)  # after the cursor, not the newest (950)
        assert view.message == "match on line 851"
        view.finder.repeat_search()  # n: on in the search's direction
        await wait_for(pilot, lambda: cursor(view) == 950)
        view.finder.repeat_search()  # past the end: on from the log's start, read back from the spool
        await wait_for(pilot, lambda: cursor(view) == 50)
        assert "found in the spool: line 51" in view.message
        assert "past the end, on from the top" in view.message
        view.finder.repeat_search()
        await wait_for(pilot, lambda: cursor(view) == 150)
        view.finder.repeat_search(same=False)  # N: the other way
        await wait_for(pilot, lambda: cursor(view) == 50)
        view.finder.repeat_search(same=False)  # past the top: on from the end
        await wait_for(pilot, lambda: cursor(view) == 950)
        assert "past the top, on from the end" in view.message
    spool.close()


async def test_slash_without_a_cursor_searches_from_the_top_of_the_screen_and_backslash_backwards() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(300))
        await pilot.pause()
        view.focus()
        await pilot.press("pageup")  # paused, no cursor
        await pilot.pause()
        shown = on_screen(view)
        view.set_search("tick")
        assert cursor(view) == shown[0]  # the top line on screen is the first after the top
        assert view.scroll_y == int(view.scroll_y)
        await pilot.press("pagedown", "G")
        # the find bar opened backwards (\): Enter finds the first match before the bottom
        panel.open_find("search", forward=False)
        await pilot.pause()
        await pilot.press(*"boom", "enter")
        await wait_for(pilot, lambda: cursor(view) == 250)
        assert view.search_forward is False
        await wait_for(pilot, lambda: "search \\boom" in screen_text(pilot.app))
        view.finder.repeat_search()  # n: on backwards
        assert cursor(view) == 150
        view.finder.repeat_search(same=False)  # N
        assert cursor(view) == 250
        panel.open_find("search")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert view.search_forward
        assert cursor(view) == 50  # after 250: nothing; on from the top (no spool: the lines in memory)
        assert "past the end, on from the top" in view.message
        view.set_search("no such text")
        assert view.message == "no match for /no such text"


async def test_the_console_keys_backslash_y_Y_and_the_help_lists_them() -> None:
    """The real console: ``\\`` searches backwards, ``y`` copies the cursor line (or the newest
    line, said so), ``Y`` the boot panel's summary; ``?`` lists the new keys."""
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    clock.advance(12.0)
    app = demo_app(clock, speed=40.0)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = app.main_screen.active_pane
        assert pane is not None
        await wait_for(pilot, lambda: pane.boot is not None and pane.boot.status is BootStatus.READY)
        await settle(pilot, app)
        view: LogView = pane.log_view
        newest = view.lines[-1]
        await pilot.press("y")  # no cursor: the newest line, and it says so
        assert app.clipboard == newest.text
        assert view.message.startswith(f"copied the newest line ({newest.seq + 1:,}; no cursor)")
        await pilot.press("backslash", *"weight", "enter")
        await wait_for(pilot, lambda: cursor(view) is not None)
        first = cursor(view)
        assert first is not None
        assert view.search_forward is False
        line = next(ln for ln in view.lines if ln.seq == first)
        assert "weight" in line.text.lower()
        await pilot.press("y")
        assert app.clipboard == line.text
        assert view.message.startswith(f"copied line {first + 1:,}: ")
        await pilot.press("n")  # on backwards: an older line
        await wait_for(pilot, lambda: (cursor(view) or first) < first)
        await pilot.press("Y")
        copied = app.clipboard
        assert copied.startswith("demo · boot 1 · ready\n")
        assert "KV tokens: " in copied
        assert pane.query_one(PhaseTimeline).copy_text().splitlines()[0] in copied
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        rows = {bid: key for key, _, bid in app.screen.rows}
        assert rows["search.backward"] == "\\"
        assert rows["copy.line"] == "y"
        assert rows["copy.boot"] == "Y"


async def test_a_line_cut_at_the_panel_edge_shows_a_marker_until_scrolled_to_its_end() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(40, 12)) as pilot:
        view = panel.view
        short = LogLine(seq=20, text="short line", ts=None, rank=None, boot=0, style="")
        view.append([*log_lines(20), short])  # "[2026-05-01 12:00:00 TP0] scheduler tick 0": 42+ cells
        await pilot.pause()
        width = view.scrollable_content_region.width
        rows = [view.render_line(y) for y in range(view.scrollable_content_region.height)]
        long_rows, last = rows[:-1], rows[-1]
        assert last.text.rstrip() == " short line"  # a line that fits: no marker
        assert all(r.text.endswith("›") and r.cell_length == width for r in long_rows)
        marker = view.get_component_rich_style("logview--marker", partial=True)
        assert all(list(r)[-1].style is not None and list(r)[-1].style.color == marker.color for r in long_rows)
        view.focus()
        await pilot.press("right")  # → scrolls right: the lines go on under the marker
        await pilot.pause()
        assert view.scroll_x > 0
        assert view.render_line(0).text.endswith("›")
        view.scroll_to(x=view.max_scroll_x, animate=False, immediate=True)  # to the lines' end
        await pilot.pause()
        tail = view.render_line(0).text
        assert "›" not in tail
        top = view.lines[int(view.scroll_y)]
        assert tail.rstrip().endswith(f"scheduler tick {top.seq}")


async def test_wrap_indents_continuation_rows_with_and_without_timestamps() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(40, 12)) as pilot:
        view = panel.view
        long = "[2026-05-01 12:00:00 TP0] " + "the scheduler runs a decode batch " * 2  # 94 cells
        view.append([LogLine(seq=i, text=long, ts=T0, rank="TP0", boot=0, style="") for i in range(2)])
        view.wrap = True
        await pilot.pause()
        view.scroll_to(y=0, animate=False, immediate=True)
        rows = [view.render_line(y).text for y in range(3)]
        # continuation rows start two cells right of the line's text (past the gutter: cell 1)
        assert all(r.startswith("   ") for r in rows[1:])
        assert (rows[0][1:] + rows[1][3:] + rows[2][3:]).rstrip() == long.rstrip()
        assert view.virtual_size.height == 6  # each line: 95 cells in 40, then 37 a row
        view.timestamps = True
        await pilot.pause()
        view.scroll_to(y=0, animate=False, immediate=True)
        rows = [view.render_line(y).text for y in range(3)]
        assert rows[0].startswith(" 12:00:00.000 [TP0] the scheduler")  # the engine's stamp not repeated
        # past the gutter and the time column (cell 14), two more
        assert all(r.startswith(" " * 16) for r in rows[1:])
        assert (rows[0][14:] + rows[1][16:] + rows[2][16:]).rstrip() == without_own_stamp(long).rstrip()
        assert view.virtual_size.height == 6
        assert view.render_line(6).text.strip() == ""


def test_the_engines_own_timestamp_is_taken_off_the_text() -> None:
    cases = {
        "[2025-06-01 12:00:00 TP0] Load weight begin.": "[TP0] Load weight begin.",
        "[2025-06-01 12:00:00.123 DP0 TP1] x": "[DP0 TP1] x",
        "[2025-06-01 12:00:00] The server is fired up and ready to roll!": "The server is fired up and ready to roll!",
        "INFO 06-01 12:00:00 [loader.py:12] Loading weights": "INFO [loader.py:12] Loading weights",
        "(EngineCore_DP0 pid=7) WARNING 06-01 12:00:00 [core.py:9] x": "(EngineCore_DP0 pid=7) WARNING [core.py:9] x",
    }
    for text, shown in cases.items():
        assert without_own_stamp(text) == shown, text
    unstamped = ["Capturing batches (bs=1 avail_mem=38.07 GB): 100%|████| 52/52",
                 "[rank0]: Traceback (most recent call last):", "INFO:     Application startup complete.", ""]
    for text in unstamped:
        assert without_own_stamp(text) == text


async def test_t_shows_the_time_once_for_sglang_and_vllm_lines() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 12)) as pilot:
        view = panel.view
        ts = datetime(2025, 6, 1, 12, 0, 0, 250000)
        texts = ["[2025-06-01 12:00:00 TP0] Load weight begin. avail mem=94.10 GB",
                 "INFO 06-01 12:00:00 [loader.py:12] Loading weights took 3.20 s",
                 "Capturing batches (bs=1): 100%|████| 52/52"]
        view.append([LogLine(seq=i, text=t, ts=ts, rank=None, boot=0, style="") for i, t in enumerate(texts)])
        await pilot.pause()
        assert view.render_line(0).text.startswith(" [2025-06-01 12:00:00 TP0] Load")  # untouched without t
        view.timestamps = True
        await pilot.pause()
        rows = [view.render_line(y).text.rstrip() for y in range(3)]
        assert rows == [" 12:00:00.250 [TP0] Load weight begin. avail mem=94.10 GB",
                        " 12:00:00.250 INFO [loader.py:12] Loading weights took 3.20 s",
                        " 12:00:00.250 Capturing batches (bs=1): 100%|████| 52/52"]
