"""Snapshots of the console (pytest-textual-snapshot) on demo hosts, with the clock and the seed
fixed: every value on screen (times, memory, tokens, log lines) is a function of them.

Review changes with the HTML report pytest prints, then accept them with ``--snapshot-update``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from test_ui_helpers import FakeClock, demo_app, run_clock, set_demo_fraction, settle, start_demo, wait_for
from textual.pilot import Pilot

from kvtui.boot import BootStatus
from kvtui.engines.events import Phase
from kvtui.ui.app import KvtuiApp

SIZE = (130, 38)
SnapCompare = Callable[..., bool]


async def _finish(pilot: Pilot[Any], app: KvtuiApp) -> None:
    """Everything drawn for the clock's now (the plot redraws on a 1 s timer otherwise)."""
    await settle(pilot, app)
    for pane in app.main_screen.panes:
        pane.tick()
        pane.gpu_plot.redraw_if_needed()
    app.main_screen.refresh_bindings()
    await pilot.pause()
    await pilot.pause()


def _booting(
    speed: float, until: Callable[[KvtuiApp], bool], step: float, *, coarse: float = 0.0
) -> tuple[KvtuiApp, Callable[[Pilot[Any]], Awaitable[None]]]:
    """Follow a boot from its start: ``coarse`` clock seconds in 1 s steps, then ``step`` until
    ``until(app)``."""
    clock = FakeClock()
    start_demo("demo", clock, speed)
    app = demo_app(clock, speed=speed)

    async def run_before(pilot: Pilot[Any]) -> None:
        if coarse:
            await run_clock(pilot, app, clock, seconds=coarse, step=1.0)
        await run_clock(pilot, app, clock, until=lambda: until(app), step=step, limit=120)
        await _finish(pilot, app)

    return app, run_before


def _phase(app: KvtuiApp) -> Phase | None:
    pane = app.main_screen.active_pane
    return pane.boot.phase if pane is not None and pane.boot is not None else None


def _progress(app: KvtuiApp) -> int:
    pane = app.main_screen.active_pane
    if pane is None or pane.boot is None or not pane.boot.phases:
        return 0
    return pane.boot.phases[-1].progress_done or 0


@pytest.mark.slow
def test_snapshot_loading_weights(snap_compare: SnapCompare) -> None:
    app, run_before = _booting(40.0, lambda a: _phase(a) is Phase.LOAD_WEIGHTS and _progress(a) >= 30, 1.0)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.slow
def test_snapshot_graph_capture(snap_compare: SnapCompare) -> None:
    app, run_before = _booting(
        40.0, lambda a: _phase(a) is Phase.GRAPH_CAPTURE and _progress(a) >= 4, 0.1, coarse=6.0
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.slow
def test_snapshot_ready_with_kv_usage(snap_compare: SnapCompare) -> None:
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    app = demo_app(clock, speed=40.0)

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_clock(pilot, app, clock, seconds=18.0, step=1.0)  # ready after ~7 s, then serving
        await _finish(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.slow
def test_snapshot_failed_with_banner(snap_compare: SnapCompare) -> None:
    clock = FakeClock()
    set_demo_fraction("demo", 0.99, clock, speed=40.0)
    clock.advance(5.0)
    app = demo_app(clock, speed=40.0)

    def failed() -> bool:
        pane = app.main_screen.active_pane
        return pane is not None and pane.boot is not None and pane.boot.status is BootStatus.FAILED

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_clock(pilot, app, clock, until=failed, step=0.25, limit=30)
        await _finish(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.slow
def test_snapshot_calculator_oom_risk(snap_compare: SnapCompare) -> None:
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    clock.advance(12.0)
    app = demo_app(clock, speed=40.0)

    async def run_before(pilot: Pilot[Any]) -> None:
        await _finish(pilot, app)
        await pilot.press("c", *"0.99", "enter", "escape")  # edit the fraction, leave the field
        await _finish(pilot, app)
        pane = app.main_screen.active_pane
        assert pane is not None
        assert pane.calculator.verdict == "oom_risk"

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.slow
def test_snapshot_light_theme(snap_compare: SnapCompare) -> None:
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    clock.advance(10.0)
    app = demo_app(clock, speed=40.0, theme="kvtui-light")

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_clock(pilot, app, clock, seconds=6.0, step=1.0)
        await _finish(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.slow
def test_snapshot_two_demo_hosts(snap_compare: SnapCompare) -> None:
    clock = FakeClock()
    start_demo("demo-a", clock, 40.0)
    clock.advance(4.0)
    start_demo("demo-b", clock, 40.0)  # the second host is 4 s behind: still loading
    app = demo_app(clock, speed=40.0, hosts=("demo-a", "demo-b"))

    async def run_before(pilot: Pilot[Any]) -> None:
        await run_clock(pilot, app, clock, seconds=3.0, step=1.0)
        await _finish(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# The apply dialog shows the demo host's file paths, which live under XDG_STATE_HOME: pinned for
# that snapshot so the picture does not depend on pytest's temporary directory.
PINNED_STATE = Path("/tmp/kvtui-snapshots/state")


@pytest.mark.slow
def test_snapshot_apply_confirm_dialog(snap_compare: SnapCompare, monkeypatch: pytest.MonkeyPatch) -> None:
    """`a` after a safe edit: the flag change, the prediction, the coloured diff, what runs, and
    the automatic-rollback toggle (on: the running boot is ready)."""
    import shutil

    from kvtui.ui.screens import ApplyScreen

    shutil.rmtree(PINNED_STATE / "kvtui" / "demo" / "demo", ignore_errors=True)
    monkeypatch.setenv("XDG_STATE_HOME", str(PINNED_STATE))
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    clock.advance(12.0)
    app = demo_app(clock, speed=40.0)

    async def run_before(pilot: Pilot[Any]) -> None:
        await _finish(pilot, app)
        await pilot.press("c", *"0.88", "enter", "escape")
        await _finish(pilot, app)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen))
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


README_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "screenshot.svg"
README_SIZE = (150, 44)


async def _readme_session() -> str:
    """A real demo session: the boot followed from launch to ready, then a few seconds of serving."""
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    app: KvtuiApp = demo_app(clock, speed=40.0)
    async with app.run_test(size=README_SIZE) as pilot:
        await run_clock(pilot, app, clock, seconds=16.0, step=1.0)
        await _finish(pilot, app)
        svg: str = app.export_screenshot(title="kvtui connect demo")
        return svg


@pytest.mark.slow
async def test_readme_screenshot_is_a_real_demo_session() -> None:
    """docs/screenshot.svg is what the console renders for this session (regenerate it with
    KVTUI_UPDATE_SCREENSHOT=1)."""
    svg = await _readme_session()
    if os.environ.get("KVTUI_UPDATE_SCREENSHOT") == "1":
        README_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        README_SCREENSHOT.write_text(svg, encoding="utf-8")
    assert README_SCREENSHOT.read_text(encoding="utf-8") == svg
