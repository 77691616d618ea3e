"""A server up for days in the console (issue 21): the demo host started ``demo_uptime_h`` hours
before the console opened — its follower reads the boot's start, a gap record, the newest
serving lines — and a variant whose start is gone from the log (``demo_start_missing``). Every
view says what it read and what it did not; a search reaches the unread lines on the host."""

from __future__ import annotations

from typing import Any

from test_ui_helpers import FakeClock, demo_app, screen_text, settle, wait_for

from kvtui.boot import BootStatus
from kvtui.ui.app import KvtuiApp
from kvtui.ui.host_pane import HostPane
from kvtui.ui.log.model import ViewMode
from kvtui.ui.log.view import LogView
from kvtui.ui.screens import ApplyScreen

SPEED = 2.0  # one serving line every 2.5 s: 2 h up = ~2,800 serving lines, ~1,800 of them in the gap
UPTIME = {"demo_uptime_h": 2.0}
MISSING = {"demo_uptime_h": 2.0, "demo_start_missing": True}


def _pane(app: KvtuiApp) -> HostPane:
    pane = app.main_screen.active_pane
    assert pane is not None
    return pane


async def _open(pilot: Any, app: KvtuiApp) -> HostPane:
    pane = _pane(app)
    await wait_for(pilot, lambda: pane.boot is not None and pane.boot.status is BootStatus.READY
                   and pane.monitor is not None and bool(pane.monitor.gaps or pane.boot.start_missing))
    await settle(pilot, app)
    return pane


def _gap_text(pane: HostPane) -> str:
    assert pane.monitor is not None
    backend: Any = pane.backend
    gap = pane.monitor.gaps[0].gap
    # a line only in the gap: the 100th serving line the follower did not read
    from kvtui.engines.source_records import gap_range

    after = gap_range(gap.where)["after"]
    g, i = backend._parse_cursor(after)
    tl = backend._timeline()
    line = tl.line(tl.view(g, backend.clock()), i + 100)
    return str(line.text)


async def test_the_gap_is_a_marker_row_never_a_plain_log_line() -> None:
    """Fails on the old code: the demo dropped the serving bulk without a record, and a gap
    record was a plain log line ('kvtui: 1880 lines not read [...]')."""
    clock = FakeClock()
    app = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=UPTIME)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = await _open(pilot, app)
        view = pane.log_view
        gaps = [ln for ln in view.lines if ln.style == "gap"]
        assert len(gaps) == 1
        assert pane.monitor is not None
        n = pane.monitor.gaps[0].gap.lines
        assert n is not None
        assert n > 1500
        view.set_cursor(gaps[0].seq)  # bring the row on screen
        await pilot.pause()
        text = screen_text(app)
        assert f"{n:,} serving lines not read (1 h 1" in text
        assert "— / searches them on the host" in text
        assert "lines not read [" not in text  # the raw record is never drawn


async def test_slash_finds_a_line_only_in_the_gap_on_the_host_and_n_continues() -> None:
    """Fails on the old code: the search said 'no older match in the whole log' without searching
    the lines the follower did not read."""
    clock = FakeClock()
    app = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=UPTIME)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = await _open(pilot, app)
        view: LogView = pane.log_view
        wanted = _gap_text(pane)
        stamp = wanted[1:19]  # "YYYY-MM-DD HH:MM:S": the four lines of the gap in those ten seconds
        view.set_search(stamp)
        await wait_for(pilot, lambda: view.mode is ViewMode.HOST)
        assert view.message.startswith("from the host: match ")
        current = next(ln for ln in view.lines if ln.seq == view.cursor)
        assert stamp in current.text
        # the status line is repainted after the switch: wait for the frame that shows it (a loaded
        # CI read the screen between the two)
        await wait_for(pilot, lambda: "lines from the host" in screen_text(app))
        text = screen_text(app)
        assert "from the host — " in text
        assert "lines from the host" in text  # the status line says where these rows came from
        first = view.cursor  # / went forward (on from the log's start): the gap's first match
        await pilot.press("n")
        await pilot.pause()
        assert view.cursor != first
        assert view.mode is ViewMode.HOST
        assert view.message.startswith("from the host: match ")
        await pilot.press("N")
        await pilot.pause()
        assert view.cursor == first


async def test_slash_for_a_startup_line_searches_the_gap_then_finds_it_in_the_spool() -> None:
    """Fails on the old code: no gap was searched (and none was said)."""
    clock = FakeClock()
    app = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=UPTIME)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = await _open(pilot, app)
        view = pane.log_view
        view.set_search("Load weight begin", forward=False)  # backwards from the newest lines: across the gap
        await wait_for(pilot, lambda: view.message.startswith("match on line"))
        assert pane.monitor is not None
        assert f"none in {pane.monitor.gaps[0].gap.lines:,} serving lines searched on the host" in view.message
        current = next(ln for ln in view.lines if ln.seq == view.cursor)
        assert "Load weight begin" in current.text


async def test_a_host_that_cannot_search_never_says_no_match_in_the_whole_log(monkeypatch: Any) -> None:
    """Fails on the old code: 'no older match in the whole log' for lines never searched."""
    from kvtui.sim.backend import DemoBackend

    monkeypatch.delattr(DemoBackend, "search_log")
    clock = FakeClock()
    app = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=UPTIME)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = await _open(pilot, app)
        view = pane.log_view
        view.set_search("no such line anywhere")
        try:
            await wait_for(pilot, lambda: "no match in the lines read" in view.message, timeout=10)
        except AssertionError:
            raise AssertionError(view.message + repr(view.mode) + repr(view.cursor) + repr(len(view.lines))) from None
        assert "whole log" not in view.message
        assert "the host cannot search its unread lines (a demo host has no search of its log)" in view.message


async def test_a_start_missing_boot_serves_in_the_boot_panel_and_header_never_booting() -> None:
    """Fails on the old code: the header said '✔ ready' with every phase '· not started' below it
    and 'ready after —' (and a follower without these records showed 'booting 4473h')."""
    clock = FakeClock()
    app = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=MISSING)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await _open(pilot, app)
        pane.tick()
        await pilot.pause()
        text = screen_text(app)
        assert "✔ serving — its start is not in the log" in text
        assert "(rotated before " in text
        assert "phases: not in the log" in text
        assert "flags from the running process (pid " in text
        assert "boot #1  ✔ serving" in text
        assert "serving · its start is not in the log" in text  # the boot panel's subtitle
        assert "booting" not in text
        assert "· launch" not in text
        assert "ready after" not in text


async def test_the_calculator_answers_for_a_start_missing_boot_from_the_history() -> None:
    """Fails on the old code: 'waiting for the boot to size its KV pool…' with flags unset on a
    server that serves. The first console reads the boot from its start (the history stores it);
    the second finds the start gone and calibrates on that stored boot of the same flags."""
    clock = FakeClock()
    first = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=UPTIME)
    async with first.run_test(size=(120, 36)) as pilot:
        pane = await _open(pilot, first)
        await wait_for(pilot, lambda: pane.calculator.result is not None)
    app = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=MISSING)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await _open(pilot, app)
        calc = pane.calculator
        await wait_for(pilot, lambda: calc.basis_looked_up and calc.result is not None)
        assert calc.stored_basis is not None
        await pilot.pause()
        basis = calc._basis.plain  # what the panel shows above its fields
        assert "waiting for the boot" not in screen_text(app)
        assert "calibrated on a stored boot of these flags (history)" in basis
        assert "flags from the running process (pid " in basis
        assert calc.prediction is not None
        assert calc.prediction.tokens > 100_000


async def test_without_history_the_calculator_answers_from_the_config_and_the_estimated_pool() -> None:
    """Issue 21: no stored boot of these flags — the model's config.json read on the host, placed
    at the pool the serving lines give, answers the what-if. Fails on the old code: 'pool ~191,448
    tokens (estimated …); no stored boot of this host with these flags to calibrate a what-if from'."""
    clock = FakeClock()
    app = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=MISSING)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await _open(pilot, app)
        calc = pane.calculator
        await wait_for(pilot, lambda: calc.serving_config is not None and calc.prediction is not None)
        await pilot.pause()
        basis = calc._basis.plain
        text = screen_text(app)
        assert "no stored boot" not in basis
        assert "waiting for the boot" not in text
        assert basis.startswith("model: config+estimate · confidence low")
        assert "config /models/Kimi-K2.6/config.json + estimated pool (±" in basis
        assert "flags from the running process (pid " in basis
        assert calc.verdict in ("ok", "tight")
        est = pane.boot.live.pool_tokens_est if pane.boot is not None else None
        assert calc.prediction is not None
        assert calc.prediction.tokens == est  # the fields as the process runs: the estimate itself
        assert calc.focus_field(0)  # mem_fraction_static 0.85 → 0.88: the what-if moves from there
        await pilot.press("0", ".", "8", "8", "enter")
        await wait_for(pilot, lambda: calc.prediction is not None and calc.prediction.fraction == 0.88)
        assert est is not None
        assert calc.prediction.tokens > est + 30_000
        assert calc.verdict is not None
        # the apply dialog predicts as the panel does (the log has no pool line to calibrate from)
        await pilot.press("escape", "a")
        await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen), timeout=10)
        plan = app.screen.plan  # type: ignore[attr-defined]
        assert plan.prediction is not None, plan.prediction_note
        assert str(plan.prediction.model.basis) == "config+estimate"
        assert plan.prediction.tokens == calc.prediction.tokens
        await pilot.press("escape")


async def test_a_config_that_cannot_be_read_says_why_in_one_line_never_waiting(monkeypatch: Any) -> None:
    """Without history and without the model's config.json, the panel says the estimated pool and
    why there is no what-if (the path tried). Fails on the old code: 'waiting for the boot…'."""
    from kvtui.hosts.backend import CommandResult
    from kvtui.sim.backend import DemoBackend

    async def no_config(self: DemoBackend, command: str, **kw: Any) -> CommandResult:
        return CommandResult(command, 3, "kvtui-tried /models/Kimi-K2.6/config.json\n", "")

    monkeypatch.setattr(DemoBackend, "run", no_config)
    clock = FakeClock()
    app = demo_app(clock, hosts=("demo-days",), speed=SPEED, host_options=MISSING)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await _open(pilot, app)
        calc = pane.calculator
        await wait_for(pilot, lambda: calc.serving_config is not None)
        await pilot.pause()
        basis = calc._basis.plain
        assert "waiting for the boot" not in screen_text(app)
        assert basis.startswith("pool ~")
        assert "(estimated from serving lines ±" in basis
        assert "no stored boot of this host with these flags, and no config-based what-if: /models/Kimi-K2.6: " \
               "no config.json at /models/Kimi-K2.6/config.json" in basis
        assert calc.error is not None
        assert "\n" not in calc.error  # one line
