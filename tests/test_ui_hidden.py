"""A host whose tab is hidden keeps its data but touches no widget; shown again it looks exactly as
if it had been on screen all along (the log view's ``hold``, the pane's ``set_shown``)."""

from __future__ import annotations

from typing import Any

import pytest
from test_ui_helpers import FakeClock, Harness, demo_app, log_lines, plain, run_clock, settle, start_demo
from textual.widget import Widget

from kvtui.boot import BootStatus
from kvtui.ui.gpu.widgets import GpuBars
from kvtui.ui.host_pane import HostPane
from kvtui.ui.log.panel import LogPanel
from kvtui.ui.log.view import LogView
from kvtui.ui.widgets.boot import BootFigures, FailureBanner, KvUsage, PhaseTimeline, StallNotice
from kvtui.ui.widgets.host import FleetSummary

SPEED = 40.0
SIZE = (160, 48)  # wide enough for the GPU plot (kvtui.tcss: not laid out below 160 columns)


def screen_text(view: LogView) -> list[str]:
    return [view.render_line(y).text for y in range(view.size.height)]


def view_state(view: LogView) -> tuple[Any, ...]:
    return (
        [ln.seq for ln in view.lines],
        view.virtual_size,
        view.scroll_y,
        view.max_scroll_y,
        view.pending,
        view.follow,
        view.mode,
        screen_text(view),
    )


# ---- LogView.hold: the same outcome as taking each batch on screen -------------------------------


@pytest.mark.parametrize("wrap", [False, True])
async def test_a_held_view_following_catches_up_like_one_that_never_was(wrap: bool) -> None:
    a, b = LogPanel(window=300, id="a"), LogPanel(window=300, id="b")
    async with Harness(a, b).run_test(size=(60, 40)) as pilot:
        va, vb = a.view, b.view
        va.wrap = vb.wrap = wrap
        for v in (va, vb):
            v.append(log_lines(120))
        await pilot.pause()
        assert view_state(va) == view_state(vb)
        rows_before = vb.virtual_size
        vb.hold(True)
        assert vb.held
        for start in range(120, 1000, 40):  # past the window: the oldest lines are trimmed
            batch = log_lines(40, start=start)
            va.append(batch)
            vb.append(batch)
            await pilot.pause()
        assert [ln.seq for ln in vb.lines] == [ln.seq for ln in va.lines]  # the data is kept
        assert vb.virtual_size == rows_before  # but no rows were built for it
        vb.hold(False)
        await pilot.pause()
        await pilot.pause()
        assert view_state(va) == view_state(vb)
        assert va.lines[0].seq == 700
        if not wrap:
            assert any("scheduler tick 999" in row for row in screen_text(vb))


async def test_a_held_paused_view_counts_new_lines_and_keeps_its_place() -> None:
    a, b = LogPanel(window=1000, id="a"), LogPanel(window=1000, id="b")
    async with Harness(a, b).run_test(size=(80, 40)) as pilot:
        va, vb = a.view, b.view
        for v in (va, vb):
            v.append(log_lines(200))
        await pilot.pause()
        for v in (va, vb):
            v.follow = False
            v.scroll_to(y=50, animate=False, immediate=True)
        await pilot.pause()
        vb.hold(True)
        for start in (200, 237, 300):
            batch = log_lines(37 if start == 200 else 63 if start == 237 else 10, start=start)
            va.append(batch)
            vb.append(batch)
        await pilot.pause()
        assert vb.pending == 0  # counted, not yet shown
        vb.hold(False)
        await pilot.pause()
        assert va.pending == vb.pending == 110
        assert vb.scroll_y == 50  # did not jump
        assert view_state(va) == view_state(vb)


async def test_a_held_filtered_view_keeps_filtering() -> None:
    a, b = LogPanel(window=1000, id="a"), LogPanel(window=1000, id="b")
    async with Harness(a, b).run_test(size=(80, 40)) as pilot:
        va, vb = a.view, b.view
        for v in (va, vb):
            v.append(log_lines(100))
            v.set_filter("TP3")
        await pilot.pause()
        vb.hold(True)
        batch = log_lines(80, start=100)
        va.append(batch)
        vb.append(batch)
        vb.hold(False)
        await pilot.pause()
        assert all(ln.rank == "TP3" for ln in vb.lines)
        assert len(vb.lines) == sum(1 for seq in range(180) if seq % 8 == 3)
        assert view_state(va) == view_state(vb)


# ---- a hidden host pane -------------------------------------------------------------------------


def rendered(pane: HostPane) -> dict[str, str]:
    widgets: list[type[Widget]] = [BootFigures, PhaseTimeline, FailureBanner, StallNotice, GpuBars]
    out = {w.__name__: plain(pane.query_one(w)) for w in widgets}
    kv = pane.query_one(KvUsage)
    out["kv"] = repr((kv.has_class("-serving"), list(kv.history), plain(kv)))
    out["log"] = "\n".join(screen_text(pane.log_view))
    out["log_rows"] = str(pane.log_view.virtual_size)
    out["boot_subtitle"] = str(pane.query_one("#boot-panel").border_subtitle)
    out["gpu_subtitle"] = str(pane.query_one("#gpu-panel").border_subtitle)
    out["calc"] = "" if pane.calculator.result is None else repr(pane.calculator.result)
    return out


async def test_a_hidden_host_keeps_its_data_and_shows_it_all_when_its_tab_opens() -> None:
    """Two demo hosts with the same seed boot identically: ``demo-b`` is hidden the whole boot,
    then shown; its widgets must show what ``demo-a``'s (on screen all along) show."""
    clock = FakeClock()
    for name in ("demo-a", "demo-b"):
        start_demo(name, clock, SPEED)
    app = demo_app(clock, speed=SPEED, hosts=("demo-a", "demo-b"))
    async with app.run_test(size=SIZE) as pilot:
        a, b = app.main_screen.panes
        assert a.shown
        assert not b.shown
        ready_lines = 0

        def both_ready() -> bool:
            return all(p.boot is not None and p.boot.status is BootStatus.READY for p in (a, b))

        await run_clock(pilot, app, clock, until=both_ready, limit=60)
        await run_clock(pilot, app, clock, seconds=3.0)
        await settle(pilot, app)
        # hidden, b took everything in: lines, the boot, the GPU history, the KV usage
        assert b.lines_received == a.lines_received > 0
        assert [ln.text for ln in b.log_view.lines] == [ln.text for ln in a.log_view.lines]
        assert b.boot is not None
        assert b.boot.status is BootStatus.READY
        assert b.gpu_plot.points == a.gpu_plot.points
        assert b.log_view.held
        ready_lines = b.lines_received
        # ... but it rendered none of it
        assert plain(b.query_one(BootFigures)) != plain(a.query_one(BootFigures))
        assert b.gpu_plot.redraws == 0
        # the fleet summary's row for it stays live
        assert "demo-b ✔ ready" in plain(app.main_screen.query_one(FleetSummary))  # one line for all
        await pilot.press("b")  # a line per host
        await pilot.pause()
        rows = plain(app.main_screen.query_one(FleetSummary)).splitlines()
        assert "demo-b" in rows[1]
        assert "✔ ready" in rows[1]
        await pilot.press("b")

        a.gpu_plot.redraw_if_needed()
        await pilot.pause()
        on_screen = rendered(a)  # a hidden widget has no size: what a showed, at the same clock
        app.action_switch_host("demo-b")
        await pilot.pause()
        await pilot.pause()
        assert b.shown
        assert not a.shown
        assert not b.log_view.held
        b.gpu_plot.redraw_if_needed()
        await pilot.pause()
        assert rendered(b) == on_screen
        assert b.log_view.scroll_y == b.log_view.max_scroll_y  # following, at the newest line
        assert b.gpu_plot.redraws >= 1
        assert b.lines_received == ready_lines
