"""Snapshots of the console (pytest-textual-snapshot) on demo hosts, with the clock and the seed
fixed: every value on screen (times, memory, tokens, log lines, the GPU plot, the KV sparkline) is
a function of them.

The clock only moves between ``settle``s (test_ui_helpers): after each step the test waits until every pane holds
all its host produced up to the clock's now (the demo host has no line after the monitor's last
cursor, the monitor has nothing left to publish, the pane applied every batch, the GPU plot has
the reading at now). How fast the machine is, or how the monitor's real-time batching and
throttling fell, then changes when the screen is ready, never what it shows.

Review changes with the HTML report pytest prints, then accept them with ``--snapshot-update``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from test_ui_helpers import (
    FakeClock,
    Harness,
    demo_app,
    gpu_samples,
    screen_text,
    set_demo_fraction,
    settle,
    start_demo,
    wait_for,
)
from textual.pilot import Pilot

from kvtui.boot import BootStatus
from kvtui.config import Config, HistoryConfig
from kvtui.engines.events import Phase
from kvtui.ui.app import KvtuiApp
from kvtui.ui.gpu.widgets import GpuHistoryPlot, PhaseBand
from kvtui.ui.serving.widgets import KvTimeline

SIZE = (130, 38)
SnapCompare = Callable[..., bool]


async def _run_clock(
    pilot: Pilot[Any],
    app: KvtuiApp,
    clock: FakeClock,
    *,
    seconds: float | None = None,
    until: Callable[[], bool] | None = None,
    step: float = 1.0,
    limit: float = 120.0,
) -> None:
    """Move the clock ``step`` at a time, settling after each step, until ``until()`` holds or
    ``seconds`` have passed."""
    await settle(pilot, app)
    start = clock.t
    while True:
        if until is not None and until():
            return
        if seconds is not None and clock.t - start >= seconds - 1e-9:
            return
        if clock.t - start > limit:
            raise AssertionError("condition not met before the clock limit")
        clock.advance(step)
        await settle(pilot, app)
        for pane in app.main_screen.panes:
            pane.tick()


async def _finish(pilot: Pilot[Any], app: KvtuiApp) -> None:
    """Everything drawn for the clock's now (the plot redraws on a 1 s timer otherwise)."""
    await settle(pilot, app)
    for pane in app.main_screen.panes:
        pane.tick()
        pane.gpu_plot.redraw_if_needed()
    app.main_screen.refresh_bindings()
    await pilot.pause()
    await pilot.pause()
    await _screen_settled(pilot, app)


async def _screen_settled(pilot: Pilot[Any], app: KvtuiApp, *, timeout: float = 30.0) -> None:
    """Wait until the picture stops changing: two screenshots a pause apart are the same. On a
    frozen clock every state has settled here; what may still be on its way is Textual's own work
    (a layout after a widget changed size, a recompose, a repaint after a refresh), which a loaded
    machine makes later, never different. Fails, naming the rows, if it keeps changing."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    before = app.export_screenshot()
    while True:
        await pilot.pause()
        now = app.export_screenshot()
        if now == before:
            return
        if loop.time() > deadline:
            from conftest import snapshot_text_diff

            raise AssertionError(f"the screen kept changing for {timeout:.0f} s:\n{snapshot_text_diff(before, now)}")
        before = now


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
            await _run_clock(pilot, app, clock, seconds=coarse, step=1.0)
        await _run_clock(pilot, app, clock, until=lambda: until(app), step=step, limit=120)
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
        await _run_clock(pilot, app, clock, seconds=18.0, step=1.0)  # ready after ~7 s, then serving
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
        await _run_clock(pilot, app, clock, until=failed, step=0.25, limit=30)
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
        await _run_clock(pilot, app, clock, seconds=6.0, step=1.0)
        await _finish(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# Two hosts' first boots are numbered in the order their recorders write them (the history's row
# ids are one sequence for every host): a race between the hosts. Snapshots of two hosts whose
# numbers would depend on it record nothing, and the header says "boot N of this log".
_UNRECORDED = Config(history=HistoryConfig(record=False))


@pytest.mark.slow
def test_snapshot_two_demo_hosts(snap_compare: SnapCompare) -> None:
    clock = FakeClock()
    start_demo("demo-a", clock, 40.0)
    clock.advance(4.0)
    start_demo("demo-b", clock, 40.0)  # the second host is 4 s behind: still loading
    app = demo_app(clock, speed=40.0, hosts=("demo-a", "demo-b"), config=_UNRECORDED)

    async def run_before(pilot: Pilot[Any]) -> None:
        await _run_clock(pilot, app, clock, seconds=3.0, step=1.0)
        await _finish(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# ---------------------------------------------------------------------------------------------
# During an incident, at every size (issue 22 #13, #14): two hosts, the first's boot failed in graph
# capture (its banner one line, b: details), the second ready. The log keeps half the height, the
# fleet summary is one line, the footer shows the keys that fit whole.
# ---------------------------------------------------------------------------------------------

INCIDENT_SIZES = [(80, 24), (120, 36), (160, 48)]


@pytest.mark.slow
@pytest.mark.parametrize("size", INCIDENT_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_incident(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    clock = FakeClock()
    start_demo("demo-b", clock, 40.0)
    set_demo_fraction("demo-a", 0.99, clock, speed=40.0)
    clock.advance(5.0)
    app = demo_app(clock, speed=40.0, hosts=("demo-a", "demo-b"), config=_UNRECORDED)

    def failed() -> bool:
        a, b = app.main_screen.panes
        return (a.boot is not None and a.boot.status is BootStatus.FAILED
                and b.boot is not None and b.boot.status is BootStatus.READY)

    async def run_before(pilot: Pilot[Any]) -> None:
        await _run_clock(pilot, app, clock, until=failed, step=0.25, limit=60)
        await _finish(pilot, app)
        pane = app.main_screen.active_pane
        assert pane is not None
        assert "BOOT FAILED" in screen_text(app)
        assert pane.log_view.region.height * 2 >= pane.region.height

    assert snap_compare(app, terminal_size=size, run_before=run_before)


# A rollback in progress, at the four sizes (issue 22's walk; docs/incident-WxH.svg are these
# pictures): two hosts; on demo-a a forced apply of 0.99 died in graph capture and the automatic
# rollback's boot is loading its weights — the failure banner and the change's banner one line each,
# the fleet summary one line, the log at least half the pane.
# ---------------------------------------------------------------------------------------------

WALK_SIZES = [(80, 24), (120, 36), (160, 48), (240, 64)]


@pytest.mark.slow
@pytest.mark.parametrize("size", WALK_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_rollback_in_progress(
    snap_compare: SnapCompare, monkeypatch: pytest.MonkeyPatch, pinned_state: Path, size: tuple[int, int]
) -> None:
    import shutil

    from kvtui.ui.screens import ApplyScreen

    shutil.rmtree(pinned_state / "kvtui", ignore_errors=True)
    monkeypatch.setenv("XDG_STATE_HOME", str(pinned_state))
    clock = FakeClock()
    start_demo("demo-a", clock, 40.0)
    start_demo("demo-b", clock, 40.0)
    clock.advance(12.0)
    app = demo_app(clock, speed=40.0, hosts=("demo-a", "demo-b"))

    async def run_before(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: app.main_screen.active_pane is not None)
        pane = app.main_screen.active_pane
        assert pane is not None
        await _run_clock(pilot, app, clock, until=lambda: pane.boot is not None
                         and pane.boot.status is BootStatus.READY and pane.calculator.result is not None,
                         step=0.25, limit=60)
        await pilot.press("c", *"0.99", "enter", "escape")
        await wait_for(pilot, lambda: pane.calculator.result is not None
                       and pane.calculator.result["edits"] == {"mem_fraction_static": 0.99})
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen))
        await pilot.press("F", "y")

        def rolling_back() -> bool:
            boots = pane.boots
            return (len(boots) >= 3 and boots[-2].status is BootStatus.FAILED and pane.boot is boots[-1]
                    and boots[-1].status is BootStatus.STARTING and bool(boots[-1].phases)
                    and (boots[-1].phases[-1].progress_done or 0) >= 8)

        await _run_clock(pilot, app, clock, until=rolling_back, step=0.25, limit=120)
        await wait_for(pilot, lambda: pane.busy is not None and pane.action_banner.shown)
        app.clear_notifications()
        await _finish(pilot, app)
        assert "PREVIOUS BOOT FAILED" in screen_text(app)
        assert pane.log_view.region.height * 2 >= pane.region.height

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_docs_incident_screenshots_are_the_snapshots() -> None:
    """docs/incident-WxH.svg are the rollback-in-progress snapshots (KVTUI_UPDATE_SCREENSHOT=1)."""
    shots = Path(__file__).parent / "__snapshots__" / "test_ui_snapshots"
    for w, h in WALK_SIZES:
        snapshot = shots / f"test_snapshot_rollback_in_progress[{w}x{h}].svg"
        doc = DOCS / f"incident-{w}x{h}.svg"
        if os.environ.get("KVTUI_UPDATE_SCREENSHOT") == "1":
            doc.write_text(snapshot.read_text(encoding="utf-8"), encoding="utf-8")
        assert doc.read_text(encoding="utf-8") == snapshot.read_text(encoding="utf-8"), doc.name


# The apply dialog shows the demo host's file paths, which live under XDG_STATE_HOME: pinned for
# that snapshot so the picture does not depend on pytest's temporary directory. The directory is
# the machine's, not the run's: a lock keeps two runs at once (test workers, other checkouts) from
# sharing the demo host's unit file.
PINNED_STATE = Path("/tmp/kvtui-snapshots/state")


@pytest.fixture
def pinned_state() -> Iterator[Path]:
    import fcntl

    PINNED_STATE.mkdir(parents=True, exist_ok=True)
    with (PINNED_STATE.parent / "lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield PINNED_STATE


@pytest.mark.slow
def test_snapshot_apply_confirm_dialog(
    snap_compare: SnapCompare, monkeypatch: pytest.MonkeyPatch, pinned_state: Path
) -> None:
    """`a` after a safe edit: the flag change, the prediction, the coloured diff, what runs, and
    the automatic-rollback toggle (on: the running boot is ready)."""
    import shutil

    from kvtui.ui.screens import ApplyScreen

    shutil.rmtree(pinned_state / "kvtui", ignore_errors=True)  # the demo's files, and the history another run left
    monkeypatch.setenv("XDG_STATE_HOME", str(pinned_state))
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


# ---------------------------------------------------------------------------------------------
# Every terminal size (issue 10): the same session at 80x24, 120x36, 160x48 and 240x64; the
# calculator shows 200000 (context-length) whole at each — at 80x24 in its zoomed view (c).
# docs/console-WxH.svg are these pictures (the README's walk-through).
# ---------------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[1] / "docs"
SIZES = [(80, 24), (120, 36), (160, 48), (240, 64)]


def _ready_session(keys: tuple[str, ...] = (), expect: str = "200000"
                   ) -> tuple[KvtuiApp, Callable[[Pilot[Any]], Awaitable[None]]]:
    """A demo boot followed from launch to ready, then a few seconds of serving; ``keys`` last.
    ``expect``: a figure the screen must show whole."""
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    app = demo_app(clock, speed=40.0)

    async def run_before(pilot: Pilot[Any]) -> None:
        await _run_clock(pilot, app, clock, seconds=16.0, step=1.0)
        await _finish(pilot, app)
        if keys:
            await pilot.press(*keys)
            await _finish(pilot, app)
        assert expect in screen_text(app)  # whole (context-length was cut to 20000 with a scrollbar)

    return app, run_before


@pytest.mark.slow
def test_snapshot_80x24(snap_compare: SnapCompare) -> None:
    """The log full width; boot and figures in summary lines (context 200,000); a GPU line; the
    header's boot state."""
    app, run_before = _ready_session(expect="ctx 200,000")
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@pytest.mark.slow
def test_snapshot_80x24_calculator(snap_compare: SnapCompare) -> None:
    """``c`` at 80x24: the calculator zoomed to the whole screen, its first flag being edited."""
    app, run_before = _ready_session(("c",))
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@pytest.mark.slow
def test_snapshot_80x24_log_cursor(snap_compare: SnapCompare) -> None:
    """The log's cursor line (issue 22 #6): k makes it on the last line on screen, m marks it (▌ in
    the gutter, "marked line N (1 mark)"), k k move the cursor (▸, its background) two lines up;
    the lines cut at the panel's edge end in ›."""
    app, run_before = _ready_session(("k", "m", "k", "k"), expect="(1 mark)")
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES[1:], ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_at_size(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, run_before = _ready_session()
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_docs_console_screenshots_are_the_snapshots() -> None:
    """docs/console-WxH.svg are the snapshots above (refresh with KVTUI_UPDATE_SCREENSHOT=1)."""
    shots = Path(__file__).parent / "__snapshots__" / "test_ui_snapshots"
    pairs = [(shots / "test_snapshot_80x24.svg", DOCS / "console-80x24.svg")]
    pairs += [(shots / f"test_snapshot_at_size[{w}x{h}].svg", DOCS / f"console-{w}x{h}.svg") for w, h in SIZES[1:]]
    for snapshot, doc in pairs:
        if os.environ.get("KVTUI_UPDATE_SCREENSHOT") == "1":
            doc.write_text(snapshot.read_text(encoding="utf-8"), encoding="utf-8")
        assert doc.read_text(encoding="utf-8") == snapshot.read_text(encoding="utf-8"), doc.name


def test_every_stored_snapshot_belongs_to_a_test() -> None:
    """Each file in __snapshots__/test_ui_snapshots is the picture of a snapshot test of this
    module (syrupy reports unused snapshots only in a run on one process: the suite runs on
    pytest-xdist workers, where it does not)."""
    import inspect
    import sys

    module = sys.modules[__name__]
    expected: set[str] = set()
    for name, func in inspect.getmembers(module, inspect.isfunction):
        if not name.startswith("test_") or "snap_compare" not in inspect.signature(func).parameters:
            continue
        params = [m for m in getattr(func, "pytestmark", []) if m.name == "parametrize"]
        if not params:
            expected.add(name)
        for mark in params:
            ids = mark.kwargs["ids"]
            expected.update(f"{name}[{ids(value)}]" for value in mark.args[1])
    assert len(expected) >= 10
    stored = {p.stem for p in (Path(__file__).parent / "__snapshots__" / "test_ui_snapshots").iterdir()}
    assert stored == expected


README_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "screenshot.svg"
README_SIZE = (150, 44)


async def _readme_session() -> str:
    """A real demo session: the boot followed from launch to ready, then a few seconds of serving."""
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    app: KvtuiApp = demo_app(clock, speed=40.0)
    async with app.run_test(size=README_SIZE) as pilot:
        await _run_clock(pilot, app, clock, seconds=16.0, step=1.0)
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


# ---------------------------------------------------------------------------------------------
# The GPU plot's figure is a function of its data, size and theme (not of when its timer fired)
# ---------------------------------------------------------------------------------------------


async def test_gpu_plot_figure_does_not_depend_on_redraw_timing() -> None:
    """Two plots given the same readings and bands show the same figure, whatever their redraw
    ticks saw: ``a`` is drawn once at the end; ``b`` on many ticks along the way, the bands
    arriving late, and once while it was narrower (a figure filled at a tick and painted at
    another size must not keep that tick's sampling).

    The ticks are the test's own ``redraw_if_needed`` calls: the plots' 1 s timers are paused (on
    a loaded machine a timer tick between the resize and the test's redraw had painted the
    narrow figure first, and ``redraw_if_needed`` then had nothing left to do)."""
    bands = [PhaseBand(1000.0, Phase.LOAD_WEIGHTS), PhaseBand(1120.0, Phase.KV_ALLOCATE)]
    readings = [gpu_samples(5.0 + 0.3 * t, ts=1000.0 + t) for t in range(200)]  # more than the cells
    a, b = GpuHistoryPlot(id="a"), GpuHistoryPlot(id="b")
    async with Harness(a, b).run_test(size=(70, 24)) as pilot:
        await pilot.pause()
        for plot in (a, b):
            assert plot.redraw_timer is not None
            plot.redraw_timer.pause()
        for samples in readings:
            a.add(samples)
        a.set_bands(bands, 1000.0)
        assert a.redraw_if_needed() is True
        for i, samples in enumerate(readings):
            b.add(samples)
            if i == 150:
                b.set_bands(bands, 1000.0)
            if i % 37 == 0:
                b.redraw_if_needed()
                await pilot.pause()
        b.styles.width = 30
        await pilot.pause()
        assert b.redraw_if_needed() is True  # the last readings, drawn while narrow
        await pilot.pause()
        b.styles.width = "1fr"  # back to a's size: a repaint, no new data
        await pilot.pause()
        assert b.redraw_if_needed() is False
        assert a.size == b.size
        fig_a, fig_b = a.render(), b.render()
        assert isinstance(fig_a, Text)
        assert isinstance(fig_b, Text)
        assert fig_a.plain == fig_b.plain
        assert fig_a.spans == fig_b.spans
        assert "collecting" not in fig_a.plain
        assert len({span.style for span in fig_a.spans}) >= 3  # two phase colours and the ticks


async def _metrics_sampled(pilot: Pilot[Any], app: KvtuiApp, pane: Any) -> None:
    """The serving row read from ``/metrics``, as on a quiet machine. The demo's ``/metrics`` answers
    over loopback on the console's own event loop: under load (a CI run beside other work) its first
    scrape can run out of ``METRICS_TIMEOUT_S`` while the loop still takes in two hours of log, and
    the row then reads the log — the designed fallback, not this picture. Then the sample is taken
    again from a clean start (the log's point off the KV timeline; ``/metrics`` clears the window)."""
    serving = pane.serving
    for _ in range(3):
        if serving.reader is None or serving.reader.source != "log" or pane.boot is None:
            return
        pane.query_one(KvTimeline).clear()
        await serving.sample(pane.boot, app.clock())
        await _finish(pilot, app)


@pytest.mark.slow
def test_snapshot_a_server_up_for_days_120x36(snap_compare: SnapCompare) -> None:
    """A demo server up for 2 hours (issue 21): the startup part, the gap row ('N serving lines not
    read (1 h 15 m) — / searches them on the host') with the cursor on it, the tail."""
    clock = FakeClock()
    app = demo_app(clock, hosts=("demo-days",), speed=2.0, host_options={"demo_uptime_h": 2.0})

    async def run_before(pilot: Pilot[Any]) -> None:
        pane = app.main_screen.active_pane
        assert pane is not None
        await wait_for(pilot, lambda: pane.monitor is not None and bool(pane.monitor.gaps))
        await _finish(pilot, app)
        await _metrics_sampled(pilot, app, pane)
        gap = next(ln for ln in pane.log_view.lines if ln.style == "gap")
        pane.log_view.set_cursor(gap.seq)
        await _finish(pilot, app)

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)
