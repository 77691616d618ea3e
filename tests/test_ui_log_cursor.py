"""The log's cursor line (issue 22 #6, #9): j/k/arrows and the mouse move a visible cursor, ``m``
marks it (drawn in the gutter, said in the status line), ``y``/``Y`` copy; ``/`` finds the first
match after the cursor, a backwards search the first before it; long lines show that they are
cut; ``t`` does not repeat the engine's own timestamp. Each test fails on the code before."""

from __future__ import annotations

from test_ui_helpers import Harness, log_lines, screen_text, wait_for

from kvtui.ui.widgets.log_panel import LogPanel
from kvtui.ui.widgets.log_view import LogView


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
