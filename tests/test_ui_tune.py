"""The console's tune (``O``) and the readiness probe in the boot panel (issue 14): the real app on
a demo host (its unit file and state on disk, its in-process HTTP server), the real monitor,
calculator and guarded service, one injected clock, keys pressed with Pilot."""

from __future__ import annotations

from typing import Any

from test_ui_helpers import FakeClock, demo_app, plain, run_clock, start_demo, wait_for

from kvtui.audit import read_entries
from kvtui.boot import BootStatus
from kvtui.config import HostConfig
from kvtui.engines.events import FailureKind
from kvtui.flags import get_flag
from kvtui.sim.backend import DemoBackend
from kvtui.ui.app import KvtuiApp, MainScreen
from kvtui.ui.host_pane import HostPane
from kvtui.ui.screens import ConfirmScreen, TuneScreen
from kvtui.ui.widgets.boot import FailureBanner, ProbeLine

SPEED = 40.0
SIZE = (130, 40)


def _fraction() -> object:
    return get_flag(DemoBackend("demo", HostConfig(demo=True, demo_speed=SPEED)).read_unit(), "unit",
                    "mem-fraction-static")


def _pane(app: KvtuiApp) -> HostPane:
    pane = app.main_screen.active_pane
    assert pane is not None
    return pane


def _probed(pane: HostPane) -> bool:
    idx = pane.boot_index
    return idx is not None and pane.probes.get(idx) is not None


async def _ready(pilot: Any, app: KvtuiApp, clock: FakeClock) -> HostPane:
    pane = _pane(app)
    await run_clock(pilot, app, clock, until=lambda: pane.boot is not None and pane.boot.status is BootStatus.READY,
                    limit=60)
    return pane


async def _open_tune(pilot: Any, app: KvtuiApp) -> None:
    """``O``: the tune dialog, its goal field focused."""
    await pilot.press("O")
    await wait_for(pilot, lambda: isinstance(app.screen, TuneScreen) and app.screen.focused is not None
                   and app.screen.focused.id == "tune-goal")


def _demo_console() -> tuple[FakeClock, KvtuiApp]:
    """The console on a demo host whose first boot started 12 s ago (the test's clock)."""
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(12.0)
    return clock, demo_app(clock, speed=SPEED)


async def test_a_boot_that_does_not_answer_is_failed_not_serving_with_the_banner() -> None:
    # as `kvtui wait` marks it: the log says ready, the server does not answer (the demo's server
    # answers 404 for a model it does not serve) -> the boot is failed, not_serving, and says so
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED, host_options={"probe_model": "no-such-model"})
    app.probe_ready = True
    async with app.run_test(size=SIZE) as pilot:
        pane = _pane(app)
        await run_clock(pilot, app, clock, until=lambda: _probed(pane), limit=60)
        await wait_for(pilot, lambda: "ready, but not answering" in plain(pane.query_one(FailureBanner)))
        boot = pane.boot
        assert boot is not None
        assert boot.status is BootStatus.FAILED
        assert boot.failure is not None
        assert boot.failure.kind is FailureKind.NOT_SERVING
        assert "/v1/completions: HTTP 404" in boot.failure.message
        assert pane.monitor is not None
        assert pane.monitor.tracker.boots[-1] is boot
        assert plain(pane.query_one(ProbeLine)).startswith("✘ not serving: /v1/completions: HTTP 404")


async def test_the_boot_panel_shows_the_probe_and_O_tunes_to_the_margin_edge() -> None:
    clock, app = _demo_console()
    app.probe_ready = True  # as `kvtui connect` sets it
    async with app.run_test(size=SIZE) as pilot:
        pane = await _ready(pilot, app, clock)
        await wait_for(pilot, lambda: _probed(pane), timeout=20)
        line = plain(pane.query_one(ProbeLine))
        assert line.startswith("✔ answered a 1-token request in "), line
        assert line.endswith(" ms")

        # O: the dialog, enter: the plan to confirm (nothing changes before y)
        await _open_tune(pilot, app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=20)
        body = str(app.screen.body)  # type: ignore[attr-defined]
        assert "goal max-tokens" in body
        assert "first candidate: 0.950" in body
        assert "rolls back to the last ready configuration" in body
        assert _fraction() == "0.85"
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        assert pane.busy == "a tune"
        await run_clock(pilot, app, clock, until=lambda: pane.changes.last_tune is not None and pane.busy is None,
                        limit=300)
        result = pane.changes.last_tune
        assert result is not None
        assert result.met, result.reason
        assert [s.outcome for s in result.steps] == ["ready", "ready"]
        assert all(s.probe is not None and s.probe.startswith("answered a 1-token") for s in result.steps)
        assert _fraction() == "0.969"
        banner = plain(pane.action_banner)
        assert "demo: tune: goal met; running 0.969" in banner
        assert read_entries()[-1]["action"] == "tune"


async def test_esc_stops_a_running_tune_after_its_step() -> None:
    clock, app = _demo_console()
    async with app.run_test(size=SIZE) as pilot:
        pane = await _ready(pilot, app, clock)
        await _open_tune(pilot, app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=20)
        await pilot.press("y")
        await wait_for(pilot, lambda: pane.busy == "a tune" and pane.changes.tune_stop is not None)
        await pilot.press("escape")
        assert pane.changes.tune_stop is not None
        assert pane.changes.tune_stop.is_set()
        await run_clock(pilot, app, clock, until=lambda: pane.changes.last_tune is not None and pane.busy is None,
                        limit=300)
        result = pane.changes.last_tune
        assert result is not None
        assert result.interrupted
        assert [s.outcome for s in result.steps] == ["ready"]
        assert _fraction() == "0.95"
        assert "tune: stopped" in plain(pane.action_banner)


async def test_a_bad_goal_is_explained_in_the_dialog() -> None:
    clock, app = _demo_console()
    async with app.run_test(size=SIZE) as pilot:
        pane = await _ready(pilot, app, clock)
        await _open_tune(pilot, app)
        await pilot.press("ctrl+a", "ctrl+k", *"biggest", "enter")
        await pilot.pause()
        assert isinstance(app.screen, TuneScreen)
        assert "expected max-tokens, context=N or tokens=N" in plain(app.screen.query_one("#tune-error"))
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        assert pane.busy is None
        assert _fraction() == "0.85"
