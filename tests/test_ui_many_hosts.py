"""Many hosts in one console (issue 7, benchmark 7): full garbage collections paced away from
keystrokes (``GcPacer``), one 1 s timer for every pane, and a fleet summary that repaints once
for a whole second's rows and never for a row that is not on screen."""

from __future__ import annotations

import gc
import time
from dataclasses import replace

from test_ui_helpers import (
    FakeClock,
    Harness,
    demo_app,
    failed_boot,
    loading_boot,
    log_lines,
    plain,
    ready_boot,
    run_clock,
    wait_for,
)

from kvtui.boot import BootStatus
from kvtui.hosts.backend import ConnState, ConnStatus
from kvtui.ui import formatting as fmt
from kvtui.ui.app import PACE_HIDDEN_FROM, GcPacer
from kvtui.ui.host_pane import HIDDEN_FLUSH_INTERVAL, HIDDEN_SERVING_INTERVAL
from kvtui.ui.log.panel import LogPanel
from kvtui.ui.log.view import MAX_DISPLAY_CHARS
from kvtui.ui.widgets.host import FleetRow, FleetSummary

# ---- GcPacer ------------------------------------------------------------------------------------


class Counts:
    """A stand-in for ``gc.get_count`` / ``gc.collect`` that records the collections asked for."""

    def __init__(self) -> None:
        self.gen2 = 0  # generation-1 collections since the last full one
        self.collected: list[int] = []

    def get_count(self) -> tuple[int, int, int]:
        return (0, 0, self.gen2)

    def collect(self, generation: int) -> int:
        self.collected.append(generation)
        self.gen2 = 0
        return 0


def pacer(clock: FakeClock, counts: Counts) -> GcPacer:
    p = GcPacer(clock=clock, quiet=1.0, min_interval=10.0, max_interval=60.0, collect=counts.collect,
                get_count=counts.get_count)
    p.start(freeze=False)
    return p


def test_gc_pacer_takes_full_collections_off_pythons_schedule_and_gives_them_back() -> None:
    before = gc.get_threshold()
    p = GcPacer()
    p.start()
    try:
        assert p.started is True
        assert gc.get_threshold()[:2] == before[:2]
        assert gc.get_threshold()[2] > 1_000_000  # Python no longer starts a full collection
        assert gc.get_freeze_count() > 0  # what existed at start-up left the scans
    finally:
        p.stop()
    stopped = not p.started
    assert stopped
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0  # back in the oldest generation
    p.stop()  # twice is harmless
    assert gc.get_threshold() == before


def test_gc_pacer_collects_when_due_and_nobody_is_typing() -> None:
    clock, counts = FakeClock(0.0), Counts()
    p = pacer(clock, counts)
    try:
        clock.advance(30)
        assert not p.tick()  # not due: too few generation-1 collections since the last full one
        counts.gen2 = 10
        assert p.tick()
        assert counts.collected == [2]
        counts.gen2 = 10
        clock.advance(5)
        assert not p.tick()  # due, but the last one was 5 s ago (min_interval 10 s)
        clock.advance(5)
        assert p.tick()
        assert p.collections == 2
    finally:
        p.stop()


def test_gc_pacer_waits_for_a_quiet_moment_but_not_forever() -> None:
    clock, counts = FakeClock(0.0), Counts()
    p = pacer(clock, counts)
    try:
        counts.gen2 = 50
        for _ in range(49):  # someone types every half second for ~25 s
            clock.advance(0.5)
            p.input_seen()
            assert not p.tick()
        clock.advance(1.0)  # a second without a key
        assert p.tick()
        counts.gen2 = 50
        ran_at = clock.t
        forced_at = None
        while clock.t - ran_at < 70:  # typing without a pause: max_interval (60 s) wins
            clock.advance(0.5)
            p.input_seen()
            if p.tick():
                forced_at = clock.t - ran_at
                break
        assert forced_at == 60.0
        assert counts.collected == [2, 2]
    finally:
        p.stop()


def test_gc_pacer_freezes_survivors_and_now_and_then_thaws_everything_first() -> None:
    clock, counts = FakeClock(0.0), Counts()
    calls: list[str] = []
    p = GcPacer(clock=clock, quiet=1.0, min_interval=10.0, max_interval=60.0, thorough=600.0,
                collect=counts.collect, get_count=counts.get_count,
                freeze=lambda: calls.append("freeze"), unfreeze=lambda: calls.append("unfreeze"))
    p.start()
    assert calls == ["freeze"]  # start-up objects out of the scans (after a collection)
    assert counts.collected == [2]
    calls.clear()
    counts.gen2 = 10
    clock.advance(30)
    assert p.tick()
    assert calls == ["freeze"]  # what survived is frozen; nothing thawed
    calls.clear()
    # typing without a pause past max_interval: a forced collection, never the thorough one
    clock.advance(700)
    counts.gen2 = 10
    p.input_seen()
    assert p.tick()
    assert calls == ["freeze"]
    assert p.thorough_collections == 0
    calls.clear()
    # the next quiet moment after ``thorough`` seconds: thaw, collect, freeze again
    clock.advance(30)
    counts.gen2 = 10
    assert p.tick()
    assert calls == ["unfreeze", "freeze"]
    assert p.thorough_collections == 1
    assert p.collections == 3
    calls.clear()
    clock.advance(30)
    counts.gen2 = 10
    assert p.tick()
    assert calls == ["freeze"]  # the next thorough one is 600 s away
    p.stop()
    assert calls == ["freeze", "unfreeze"]


def test_gc_pacer_does_nothing_before_start() -> None:
    clock, counts = FakeClock(0.0), Counts()
    p = GcPacer(clock=clock, collect=counts.collect, get_count=counts.get_count)
    counts.gen2 = 100
    clock.advance(100)
    assert not p.tick()
    assert counts.collected == []


def test_gc_pacer_holds_every_collection_until_released_or_for_a_bounded_time() -> None:
    clock, counts = FakeClock(0.0), Counts()
    calls: list[str] = []
    p = GcPacer(clock=clock, hold_limit=1.0, collect=counts.collect, get_count=counts.get_count,
                disable=lambda: calls.append("disable"), enable=lambda: calls.append("enable"))
    assert not p.hold()  # not started: Python's own schedule, untouched
    assert calls == []
    p.start(freeze=False)
    assert p.hold()
    assert p.hold()  # a second key before the frame: still one hold
    assert p.held
    assert calls == ["disable"]
    p.release()
    assert calls == ["disable", "enable"]
    assert not p.held
    p.release()  # twice is harmless
    assert p.hold()
    clock.advance(0.5)
    p.tick()
    assert p.held  # the frame may still come
    clock.advance(0.6)
    p.tick()
    assert not p.held  # it did not: collections again after hold_limit
    assert p.hold()
    p.stop()  # stopping gives collections back too
    assert calls == ["disable", "enable", "disable", "enable", "disable", "enable"]
    assert p.holds == 3


async def test_a_key_and_a_host_switch_hold_collections_until_their_frame_is_drawn() -> None:
    clock = FakeClock()
    app = demo_app(clock, hosts=("a", "b"))
    async with app.run_test(size=(130, 38)) as pilot:
        await wait_for(pilot, lambda: all(p.monitor is not None for p in app.main_screen.panes))
        app.gc_pacer.start(freeze=False)  # as kvtui connect does (without freezing the test process)
        try:
            await pilot.press("t")
            assert app.gc_pacer.holds >= 1  # the key (Pilot may send more than one event for it)
            await pilot.pause()
            assert not app.gc_pacer.held
            assert gc.isenabled()
            holds = app.gc_pacer.holds
            app.action_switch_host("b")
            assert app.gc_pacer.held  # from the switch to its frame
            assert not gc.isenabled()
            await pilot.pause()
            assert not app.gc_pacer.held
            assert gc.isenabled()
            assert app.gc_pacer.holds == holds + 1
        finally:
            app.gc_pacer.stop()
    assert gc.isenabled()


# ---- FleetSummary -------------------------------------------------------------------------------


def names(n: int) -> list[str]:
    return [f"gpu-{i:02d}" for i in range(n)]


def connected() -> ConnStatus:
    return ConnStatus(ConnState.CONNECTED)


async def test_fleet_summary_repaints_only_for_rows_on_screen() -> None:
    hosts = names(12)
    fleet = FleetSummary(hosts)
    async with Harness(fleet).run_test(size=(120, 20)) as pilot:
        await pilot.pause()
        assert fleet.size.height == 8  # max-height: 7 hosts' lines and the others' sum
        assert fleet.visible_rows() == 7
        rows = plain(fleet).splitlines()
        assert len(rows) == 8
        assert rows[0].startswith("▸ gpu-00")
        assert rows[7] == "  +5 more: · 5 other"
        before = fleet.repaints
        # rows 8-12 are not on screen: their new state shows only in the sum (one repaint) ...
        fleet.update_rows([FleetRow(n, connected(), ready_boot(), None) for n in hosts[7:]])
        assert fleet.repaints == before + 1
        assert fleet.rows["gpu-11"].boot is not None  # ... and the row is kept
        await pilot.pause()
        assert plain(fleet).splitlines()[7] == "  +5 more: ✔ 5 ready"
        # ... and a figure that moves on them (KV usage) repaints nothing
        fleet.update_rows([FleetRow(n, connected(), ready_boot(0.9), None) for n in hosts[7:]])
        assert fleet.repaints == before + 1
        # a second's rows for every host: one repaint
        fleet.update_rows([FleetRow(n, connected(), ready_boot(0.5), None) for n in hosts])
        assert fleet.repaints == before + 2
        await pilot.pause()
        rows = plain(fleet).splitlines()
        assert all("✔ ready" in r and "50.0%" in r for r in rows[:7])
        # the same rows again: nothing to repaint
        fleet.update_rows([FleetRow(n, connected(), ready_boot(0.5), None) for n in hosts])
        assert fleet.repaints == before + 2
        # a figure that moves on a shown row: a repaint
        fleet.update_row(FleetRow("gpu-03", connected(), ready_boot(0.6), None))
        assert fleet.repaints == before + 3
        await pilot.pause()
        assert "60.0%" in plain(fleet).splitlines()[3]


async def test_fleet_summary_window_holds_the_active_host_and_sums_up_the_others() -> None:
    hosts = names(12)
    fleet = FleetSummary(hosts)
    async with Harness(fleet).run_test(size=(120, 20)) as pilot:
        fleet.update_rows([FleetRow(n, connected(), ready_boot(), None) for n in hosts])
        fleet.update_row(FleetRow("gpu-10", connected(), failed_boot(), None))
        fleet.update_row(FleetRow("gpu-09", ConnStatus(ConnState.RECONNECTING, retry_in=3), None, None))
        fleet.update_row(FleetRow("gpu-08", connected(), loading_boot(), 12.0))
        await pilot.pause()
        rows = plain(fleet).splitlines()
        assert [r[2:8] for r in rows[:7]] == hosts[:7]
        assert rows[7] == "  +5 more: ✖ 1 failed · ◌ 1 unreachable · ▶ 1 booting · ✔ 2 ready"
        # the failed host out of view: its sum opens the first host that needs a look
        assert "switch_host('gpu-09')" in str(fleet.render().spans)
        # the active host out of the window: the window moves just enough to hold it
        fleet.set_active("gpu-10")
        await pilot.pause()
        rows = plain(fleet).splitlines()
        assert [r[2:8] for r in rows[:7]] == hosts[4:11]
        assert rows[6].startswith("▸ gpu-10")
        assert "✖ failed" in rows[6]
        assert rows[7] == "  +5 more: ✔ 5 ready"
        # back to a host in the window: it stays where it is
        fleet.set_active("gpu-05")
        await pilot.pause()
        assert [r[2:8] for r in plain(fleet).splitlines()[:7]] == hosts[4:11]
        fleet.set_active("gpu-00")
        await pilot.pause()
        assert [r[2:8] for r in plain(fleet).splitlines()[:7]] == hosts[:7]


async def test_fleet_summary_rows_read_as_before_and_follow_the_active_host() -> None:
    hosts = names(3)
    fleet = FleetSummary(hosts)
    async with Harness(fleet).run_test(size=(120, 20)) as pilot:
        boot = loading_boot()
        fleet.update_rows([
            FleetRow("gpu-00", connected(), boot, 42.0),
            FleetRow("gpu-01", ConnStatus(ConnState.RECONNECTING, retry_in=4.2), None, None),
            FleetRow("gpu-02", connected(), ready_boot(0.42), None, readonly=True),
        ])
        await pilot.pause()
        rows = plain(fleet).splitlines()
        assert rows[0].startswith("▸ gpu-00  ● connected")
        assert "▶ load weights 42s" in rows[0]
        assert "◌ reconnecting i…" in rows[1]  # cut to its column
        assert "no boot yet" in rows[1]
        assert "✔ ready" in rows[2]
        assert f"tokens {fmt.tokens(1_234_567):>10}" in rows[2]
        assert rows[2].rstrip().endswith("readonly")
        fleet.set_active("gpu-02")
        await pilot.pause()
        rows = plain(fleet).splitlines()
        assert rows[0].startswith("  gpu-00")
        assert rows[2].startswith("▸ gpu-02")
        # a click on a row opens its host
        assert "switch_host('gpu-01')" in str(fleet.render().spans)


# ---- the console: one timer, one repaint a second ---------------------------------------------


async def test_one_timer_ticks_every_pane_and_the_summary_repaints_once() -> None:
    clock = FakeClock()
    hosts = ("demo-a", "demo-b", "demo-c")
    app = demo_app(clock, speed=40.0, hosts=hosts)
    async with app.run_test(size=(130, 38)) as pilot:
        screen = app.main_screen
        panes = screen.panes
        await run_clock(pilot, app, clock, until=lambda: all(
            p.boot is not None and p.boot.status is BootStatus.READY for p in panes), limit=60)
        # no pane runs a timer of its own: the screen's one ticks them all
        assert all(not [t for t in p._timers if t.name == "host-tick"] for p in panes)
        assert [t.name for t in screen._timers].count("host-tick") == 1
        fleet = screen.query_one(FleetSummary)
        screen.action_banners()  # a line per host (b)
        await pilot.pause()
        # every row's state changes at once (as a second of serving moves every KV figure)
        for p in panes:
            assert p.boot is not None
            p.boot = replace(p.boot, live=replace(p.boot.live, token_usage=0.777))
        before = fleet.repaints
        screen.tick()
        assert fleet.repaints == before + 1
        rows = plain(fleet).splitlines()  # what it paints now (before another batch comes in)
        assert len(rows) == 3
        assert all(fmt.percent(0.777) in r for r in rows), rows
        screen.tick()  # nothing new: no repaint
        assert fleet.repaints == before + 1


# ---- a key in a storm: the log view's own work ------------------------------------------------


async def test_timestamps_toggle_measures_the_widest_line_of_the_window() -> None:
    panel = LogPanel(window=300)
    async with Harness(panel).run_test(size=(80, 30)) as pilot:
        view = panel.view
        lines = log_lines(200)
        long = replace(lines[120], text="x" * (MAX_DISPLAY_CHARS + 500))  # cut for display
        medium = replace(lines[121], text="y" * 150)
        view.append([*lines[:120], long, medium, *lines[122:]])
        await pilot.pause()
        widest = MAX_DISPLAY_CHARS
        assert view.virtual_size.width == 1 + widest + 1
        view.timestamps = True
        await pilot.pause()
        assert view.virtual_size.width == 1 + 13 + widest + 1
        view.timestamps = False
        await pilot.pause()
        assert view.virtual_size.width == 1 + widest + 1
        # the long line leaves the window: the next toggle measures what is left
        view.append(log_lines(300, start=200))
        view.timestamps = True
        await pilot.pause()
        assert view.virtual_size.width == 1 + 13 + max(len(ln.text) for ln in view.lines) + 1


# ---- hidden hosts prepared in the background -----------------------------------------------------


async def test_hidden_hosts_calculators_are_built_in_the_background_not_on_first_show() -> None:
    clock = FakeClock()
    app = demo_app(clock, speed=40.0, hosts=("demo-a", "demo-b", "demo-c"))
    async with app.run_test(size=(130, 38)) as pilot:
        screen = app.main_screen
        a, b, c = screen.panes
        await run_clock(pilot, app, clock, until=lambda: all(
            p.boot is not None and p.boot.status is BootStatus.READY for p in (a, b, c)), limit=60)
        await wait_for(pilot, lambda: not b.needs_warm_up and not c.needs_warm_up)
        assert not b.shown
        assert b.boot is not None
        assert b.calculator.engine is b.boot.engine
        assert b.calculator.fields  # built while hidden
        builds: list[object] = []
        build = b.calculator._build_fields

        def counting(boot: object) -> None:
            builds.append(boot)
            build(boot)  # type: ignore[arg-type,unused-ignore]

        b.calculator._build_fields = counting  # type: ignore[method-assign,assignment,unused-ignore]
        app.action_switch_host("demo-b")
        await pilot.pause()
        await pilot.pause()
        assert b.shown
        assert builds == []  # shown: brought up to date, nothing mounted in the key's way
        assert [f.flag for f in b.calculator.fields] == [f.flag for f in a.calculator.fields]

        # no background work while someone types
        c.calculator.engine = None
        assert c.needs_warm_up
        app.last_input = time.monotonic()
        assert not screen.warm_up()
        assert c.calculator.engine is None
        app.last_input = time.monotonic() - 5.0
        assert screen.warm_up()
        assert not c.needs_warm_up
        assert not screen.warm_up()  # nothing left to prepare


async def test_many_hosts_hidden_monitors_hand_over_batches_less_often() -> None:
    clock = FakeClock()
    hosts = tuple(f"demo-{i}" for i in range(PACE_HIDDEN_FROM))
    app = demo_app(clock, speed=40.0, hosts=hosts)
    async with app.run_test(size=(130, 38)) as pilot:
        screen = app.main_screen
        panes = screen.panes
        await wait_for(pilot, lambda: all(p.monitor is not None for p in panes))

        def paces() -> list[tuple[float, float]]:
            return [(p.monitor.flush_interval, p.monitor.serving_interval) for p in panes if p.monitor is not None]

        base = (0.05, 0.25)  # demo_app's flush interval, the monitor's default serving interval
        hidden = (HIDDEN_FLUSH_INTERVAL, HIDDEN_SERVING_INTERVAL)
        assert paces() == [base] + [hidden] * (len(hosts) - 1)
        app.action_switch_host("demo-2")
        await pilot.pause()
        assert paces() == [hidden, hidden, base, hidden, hidden][: len(hosts)]


async def test_a_few_hosts_are_not_paced() -> None:
    clock = FakeClock()
    app = demo_app(clock, speed=40.0, hosts=("demo-a", "demo-b"))
    async with app.run_test(size=(130, 38)) as pilot:
        panes = app.main_screen.panes
        await wait_for(pilot, lambda: all(p.monitor is not None for p in panes))
        paces = [(p.monitor.flush_interval, p.monitor.serving_interval) for p in panes if p.monitor]
        assert paces == [(0.05, 0.25)] * 2
