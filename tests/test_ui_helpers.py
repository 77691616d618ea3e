"""Shared helpers for the UI tests (real data objects, a small harness app), and their own tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widget import Widget

from kvtui.boot import Boot, BootMetrics, BootStatus, Failure, LiveMetrics, PhaseSpan
from kvtui.engines.events import Engine, FailureKind, Model, Phase
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.monitor import LogLine, MonitorOptions
from kvtui.ui.themes import DEFAULT_THEME, load_themes, theme_variable_defaults

T0 = datetime(2026, 5, 1, 12, 0, 0)


class Harness(App[None]):
    """Mounts a few widgets under kvtui's themes (their CSS needs kvtui's variables)."""

    def __init__(self, *widgets: Widget, theme: str = DEFAULT_THEME) -> None:
        super().__init__()
        self._widgets = widgets
        for t in load_themes().themes:
            self.register_theme(t)
        self.theme = theme

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return theme_variable_defaults(self.current_theme)

    def compose(self) -> ComposeResult:
        yield from self._widgets


def span(
    phase: Phase,
    start_s: float,
    end_s: float | None = None,
    *,
    model: Model = Model.TARGET,
    done: int | None = None,
    total: int | None = None,
) -> PhaseSpan:
    start = T0 + timedelta(seconds=start_s)
    end = T0 + timedelta(seconds=end_s) if end_s is not None else None
    return PhaseSpan(
        name=phase,
        model=model,
        start=start,
        end=end,
        seconds=(end_s - start_s) if end_s is not None else None,
        progress_done=done,
        progress_total=total,
    )


def loading_boot() -> Boot:
    """An SGLang boot 40 s into loading its weights (24 of 64 shards)."""
    return Boot(
        engine=Engine.SGLANG,
        version_hint="0.5.10",
        status=BootStatus.STARTING,
        phase=Phase.LOAD_WEIGHTS,
        phases=[
            span(Phase.LAUNCH, 0, 2.5),
            span(Phase.INIT, 2.5, 9.0),
            span(Phase.LOAD_WEIGHTS, 9.0, done=24, total=64),
        ],
        flags={"mem_fraction_static": 0.85, "tp_size": 8, "context_length": 200000},
        ranks=[f"TP{i}" for i in range(8)],
        started_at=T0,
    )


def ready_boot(usage: float = 0.42) -> Boot:
    boot = Boot(
        engine=Engine.SGLANG,
        version_hint="0.5.10",
        status=BootStatus.READY,
        phase=Phase.READY,
        phases=[
            span(Phase.LAUNCH, 0, 2.5),
            span(Phase.INIT, 2.5, 9.0),
            span(Phase.LOAD_WEIGHTS, 9.0, 71.0, done=64, total=64),
            span(Phase.KV_ALLOCATE, 71.0, 74.0),
            span(Phase.GRAPH_CAPTURE, 74.0, 112.0, done=36, total=36),
            span(Phase.HTTP_UP, 112.0, 114.0),
            span(Phase.READY, 114.0, 114.0),
        ],
        metrics=BootMetrics(
            max_total_num_tokens=1_234_567,
            kv_cache_gib=61.4,
            weights_gib=72.1,
            avail_after_pool_gib=4.12,
            graph_mem_gib=1.23,
            context_len=200_000,
            max_running_requests=1024,
        ),
        live=LiveMetrics(token_usage=usage, running_reqs=12, queue_reqs=0, gen_throughput=1534.2),
        started_at=T0,
    )
    return boot


def failed_boot() -> Boot:
    return Boot(
        engine=Engine.SGLANG,
        status=BootStatus.FAILED,
        phase=Phase.GRAPH_CAPTURE,
        phases=[
            span(Phase.LAUNCH, 0, 2.5),
            span(Phase.INIT, 2.5, 9.0),
            span(Phase.LOAD_WEIGHTS, 9.0, 71.0, done=64, total=64),
            span(Phase.KV_ALLOCATE, 71.0, 74.0),
            span(Phase.GRAPH_CAPTURE, 74.0, done=12, total=36),
        ],
        failure=Failure(
            kind=FailureKind.OOM_GRAPH_CAPTURE,
            phase=Phase.GRAPH_CAPTURE,
            message="Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
            hint="lower --mem-fraction-static (e.g. 0.80) or --cuda-graph-max-bs",
        ),
        started_at=T0,
        ended_at=T0 + timedelta(seconds=90),
    )


def gpu_samples(used_gib: float = 80.0, *, n: int = 8, ts: float = 1000.0, stale: bool = False) -> list[GpuSample]:
    return [
        GpuSample(
            index=i,
            used_mib=used_gib * 1024,
            total_mib=97_887.0,
            util=97.0,
            ts=ts,
            name="NVIDIA H100",
            stale=stale,
        )
        for i in range(n)
    ]


def foreign_process(gpu: int = 3, gib: float = 6.0) -> GpuProcess:
    return GpuProcess(pid=4411, used_mib=gib * 1024, gpu_index=gpu, name="python3")


def log_lines(count: int, *, start: int = 0, boot: int = 0) -> list[LogLine]:
    """Realistic SGLang-ish lines with ranks, a few phase lines and errors at known seqs."""
    out: list[LogLine] = []
    for seq in range(start, start + count):
        rank = f"TP{seq % 8}"
        style = ""
        text = f"[2026-05-01 12:00:{seq % 60:02d} {rank}] scheduler tick {seq}"
        if seq % 100 == 50:
            style = "error"
            text = f"[2026-05-01 12:00:{seq % 60:02d} {rank}] RuntimeError: boom {seq}"
        elif seq % 100 == 10:
            style = "phase"
            text = f"[2026-05-01 12:00:{seq % 60:02d} {rank}] Load weight begin. avail mem=94.10 GB"
        out.append(
            LogLine(seq=seq, text=text, ts=T0 + timedelta(seconds=seq / 10), rank=rank, boot=boot, style=style)
        )
    return out


def plain(widget: Widget) -> str:
    """The text a widget renders (no styles)."""
    rendered = widget.render()
    return getattr(rendered, "plain", str(rendered))


async def wait_for(pilot: Pilot[Any], predicate: Callable[[], bool], *, timeout: float = 60.0,
                   step: float = 0.02) -> None:
    """Pause the test until ``predicate()`` holds (or fail after ``timeout`` seconds)."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await pilot.pause(step)


async def run_all(steps: Iterable[Callable[[], Awaitable[None]]]) -> None:
    for step in steps:
        await step()


def test_fixture_boots_are_consistent() -> None:
    assert loading_boot().phases[-1].end is None
    assert ready_boot().status is BootStatus.READY
    failed = failed_boot()
    assert failed.failure is not None
    assert failed.failure.phase is failed.phase
    lines = log_lines(200)
    assert [ln.seq for ln in lines if ln.style == "error"] == [50, 150]


# --------------------------------------------------------------------------------------------
# Whole-app helpers: demo hosts on an injected clock
# --------------------------------------------------------------------------------------------

T_START = 1_777_000_000.0  # 2026-04-24 03:06:40 UTC: every demo boot below starts here


class FakeClock:
    """The one clock of a test: the demo host, the monitor and the console all read it."""

    def __init__(self, t: float = T_START) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def demo_backend(name: str, host: Any, clock: FakeClock) -> Any:
    from kvtui.sim.backend import DemoBackend

    return DemoBackend(name, host, clock=clock, poll_interval=0.05)


def demo_app(
    clock: FakeClock,
    *,
    hosts: Sequence[str] = ("demo",),
    speed: float = 10.0,
    readonly: bool = False,
    theme: str | None = None,
    config: Any = None,
    host_options: Mapping[str, Any] | None = None,
) -> Any:
    """The real console on demo hosts whose clock is ``clock`` (fast monitor intervals)."""
    from kvtui.config import HostConfig
    from kvtui.ui.app import KvtuiApp
    from kvtui.ui.host_pane import HostSpec

    specs = [HostSpec(n, HostConfig(demo=True, demo_speed=speed, **(host_options or {}))) for n in hosts]
    app = KvtuiApp(
        specs,
        backend_factory=lambda name, host: demo_backend(name, host, clock),
        config=config,
        readonly=readonly,
        clock=clock,
        theme=theme,
        monitor_options=MonitorOptions(gpu_interval=0.1, flush_interval=0.05),
    )
    app.animation_level = "none"
    return app


def start_demo(name: str, clock: FakeClock, speed: float = 10.0) -> None:
    """Start the demo host's server now (its first boot begins at ``clock``'s time), so a test
    can move the clock on and open the console on a boot that is already under way or ready."""
    from kvtui.config import HostConfig
    from kvtui.sim.backend import DemoBackend

    DemoBackend(name, HostConfig(demo=True, demo_speed=speed), clock=clock).read_unit()


def set_demo_fraction(name: str, fraction: float, clock: FakeClock, speed: float = 10.0) -> None:
    """Edit the demo host's unit (as `kvtui apply` would) and restart it now."""
    import re

    from kvtui.config import HostConfig
    from kvtui.sim.backend import DemoBackend

    backend = DemoBackend(name, HostConfig(demo=True, demo_speed=speed), clock=clock)
    unit = backend.read_unit()
    edited, n = re.subn(r"--mem-fraction-static[ =][0-9.]+", f"--mem-fraction-static {fraction}", unit)
    assert n == 1, "the demo unit carries --mem-fraction-static once"
    backend.write_unit(edited)
    backend.daemon_reload()
    backend.restart()


SETTLE_TIMEOUT = 60.0  # real seconds: generous (a loaded CI machine is slow), never what is shown


def numbered(pane: Any) -> bool:
    """The pane's boot has its number in the history (``boot #N``, written off the loop), or will
    have none (no history, a boot the history does not keep or cannot key)."""
    from kvtui.history import recordable

    monitor, boot, idx = pane.monitor, pane.boot, pane.boot_index
    hist = monitor.history if monitor is not None else None
    if hist is None or boot is None or idx is None or hist.problem is not None:
        return True
    if boot.started_at is None or not recordable(boot):
        return True
    return bool(monitor.boot_number(idx) is not None)


def caught_up(pane: Any, now: float) -> bool:
    """The pane shows everything its demo host produced up to ``now``: the host has no line after
    the monitor's last cursor, the monitor has nothing left to publish, the pane applied every
    batch, and the GPU plot has the reading at ``now``."""
    from kvtui.sim.backend import DemoBackend

    monitor, backend = pane.monitor, pane.backend
    if monitor is None or not isinstance(backend, DemoBackend):
        return False
    if backend.read_lines(after_cursor=monitor.spool.last_cursor, limit=1):
        return False  # a line at or before now the monitor has not taken in yet
    if not pane.up_to_date:
        return False  # taken in, not yet published or not yet applied
    if not numbered(pane):
        return False  # the boot's number in the history (its name in the header) is on its way
    points = pane.gpu_plot.points
    return bool(points) and points[-1][0] >= now


async def settle(pilot: Pilot[Any], app: Any, *, timeout: float = SETTLE_TIMEOUT) -> None:
    """Wait (real time, as long as it takes) until every pane is caught up with the clock: on a
    frozen clock the screen is then a function of the clock, however the monitor's real-time
    batching and throttling fell (a pane that looked quiet for a moment may not have read the
    newest lines yet: waiting for quiet is a race)."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not all(caught_up(p, app.clock()) for p in app.main_screen.panes):
        if loop.time() > deadline:
            state = [(p.host_name, p.monitor is not None and p.up_to_date, p.lines_received)
                     for p in app.main_screen.panes]
            raise AssertionError(f"the console did not catch up with the clock in {timeout:.0f} s: {state}")
        await pilot.pause(0.01)
    await pilot.pause()  # what the last batch set off (summaries, refreshes)


async def run_clock(
    pilot: Pilot[Any],
    app: Any,
    clock: FakeClock,
    *,
    until: Callable[[], bool] | None = None,
    seconds: float | None = None,
    step: float = 1.0,
    limit: float = 600.0,
) -> None:
    """Move the shared clock forward ``step`` at a time, letting the console catch up after each
    step, until ``until()`` holds or ``seconds`` have passed."""
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
        app.main_screen.active_pane.tick()


# --------------------------------------------------------------------------------------------
# Keys in a burst, and the screen read back as text
# --------------------------------------------------------------------------------------------


def _key_event(key: str) -> Any:
    """The event ``Pilot.press`` would send for ``key`` (``"c"``, ``"ctrl+a"``, ``"."``)."""
    import unicodedata

    from textual import events
    from textual.app import _character_to_key, _get_unicode_name_from_key  # type: ignore[attr-defined]
    from textual.keys import REPLACED_KEYS

    if len(key) == 1 and not key.isalnum():
        key = _character_to_key(key)
    original = REPLACED_KEYS.get(key, key)
    try:
        char: str | None = unicodedata.lookup(_get_unicode_name_from_key(original))
    except KeyError:
        char = key if len(key) == 1 else None
    return events.Key(key, char)


async def burst(pilot: Pilot[Any], *keys: str) -> None:
    """Send ``keys`` the way a paste or a fast typist does: all of them queued before the app
    handles the first (``Pilot.press`` waits for the app to go idle after each key)."""
    app = pilot.app
    driver = app._driver
    assert driver is not None
    for key in keys:
        event = _key_event(key)
        event.set_sender(app)
        driver.send_message(event)
    await pilot.pause()
    await pilot.pause()


def screen_text(app: App[Any]) -> str:
    """What the terminal shows now, as plain text (one line per row)."""
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()
