"""The live console end to end: the real app, real monitors and real demo hosts on one injected
clock, driven with Pilot (keys as a user presses them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from test_ui_helpers import (
    FakeClock,
    demo_app,
    plain,
    run_clock,
    set_demo_fraction,
    settle,
    start_demo,
    wait_for,
)
from textual.command import CommandList
from textual.widget import Widget

from kvtui.audit import read_entries
from kvtui.boot import BootStatus
from kvtui.config import Config, HostConfig, UiConfig
from kvtui.engines.events import FailureKind, Phase
from kvtui.monitor import MonitorOptions
from kvtui.ui.app import KvtuiApp, MainScreen
from kvtui.ui.calc.panel import CalculatorPanel
from kvtui.ui.gpu.widgets import ProcessTable
from kvtui.ui.host_pane import HostPane, HostSpec
from kvtui.ui.log.model import ViewMode
from kvtui.ui.log.panel import FindBar, LogStatus
from kvtui.ui.log.view import LogView
from kvtui.ui.palette import main_screen_commands
from kvtui.ui.screens import ConfirmScreen, ExplainScreen, HelpScreen
from kvtui.ui.widgets.boot import FailureBanner, PhaseTimeline, StallNotice
from kvtui.ui.widgets.host import FleetSummary, HostBar

SPEED = 40.0
SIZE = (130, 38)
READY_AFTER = 12.0  # clock seconds: a demo boot at SPEED is ready (and serving) by then


def ready_demo(*hosts: str) -> FakeClock:
    """A clock at which each demo host's first boot is ready (started READY_AFTER seconds ago)."""
    clock = FakeClock()
    for name in hosts or ("demo",):
        start_demo(name, clock, SPEED)
    clock.advance(READY_AFTER)
    return clock


def pane_of(app: KvtuiApp) -> HostPane:
    pane = app.main_screen.active_pane
    assert pane is not None
    return pane


def following(view: LogView) -> bool:
    return view.follow  # a call: the type checker must not narrow a value that changes under it


def cursor_of(view: LogView) -> int | None:
    return view.cursor


def result_of(calc: CalculatorPanel) -> dict[str, Any] | None:
    return calc.result


def focused_of(app: KvtuiApp) -> Widget | None:
    return app.focused


def status_of(pane: HostPane) -> BootStatus | None:
    return pane.boot.status if pane.boot is not None else None


async def test_a_boot_is_followed_to_ready() -> None:
    clock = FakeClock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        seen: set[Phase] = set()

        def ready() -> bool:
            if pane.boot is not None and pane.boot.phase is not None:
                seen.add(pane.boot.phase)
            boot = pane.boot
            return boot is not None and boot.status is BootStatus.READY and boot.live.token_usage is not None

        await run_clock(pilot, app, clock, until=ready, limit=60)
        # the console saw the boot go through its phases, in order, to ready
        assert {Phase.LOAD_WEIGHTS, Phase.READY} <= seen
        lines = plain(pane.query_one(PhaseTimeline)).splitlines()
        assert [ln[:2] for ln in lines if ln.startswith(("✔", "▶", "·", "✖"))] == ["✔ "] * len(
            [ln for ln in lines if ln.startswith(("✔", "▶", "·", "✖"))]
        )
        assert any("64/64 shards" in ln for ln in lines)
        assert "✔ ready" in pane.query_one(HostBar).right().plain
        assert "connected" in pane.query_one(HostBar).left().plain
        # key figures and the live KV gauge
        assert pane.boot is not None
        assert pane.boot.metrics.max_total_num_tokens is not None
        assert f"{pane.boot.metrics.max_total_num_tokens:,}" in plain(pane.query_one("BootFigures"))
        assert pane.query_one("KvUsage").has_class("-serving")
        assert "KV usage" in str(pane.query_one("KvUsage").render())
        # GPU bars for the 8 server GPUs and a plot with history
        assert len(plain(pane.query_one("GpuBars")).splitlines()) == 8
        assert len(pane.gpu_plot.points) >= 5
        # the log followed the whole time and holds phase lines
        view = pane.log_view
        assert following(view)
        assert any(ln.style == "phase" for ln in view.lines)
        assert view.scroll_y == view.max_scroll_y


async def test_a_too_high_fraction_shows_the_capture_oom_banner_with_its_hint() -> None:
    clock = FakeClock()
    set_demo_fraction("demo", 0.99, clock, speed=SPEED)
    clock.advance(5.0)  # still loading: the failure comes within the next seconds
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.FAILED, step=0.25, limit=60)
        assert pane.boot is not None
        assert pane.boot.failure is not None
        assert pane.boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE
        banner = pane.query_one(FailureBanner)
        assert banner.has_class("-failed")
        assert banner.region.height == 1  # one line; b shows it all (issue 22 #13)
        assert "BOOT FAILED: out of memory in CUDA-graph capture at 0.99" in str(banner.render())
        await pilot.press("b")
        await wait_for(pilot, lambda: banner.region.height >= 3)
        text = str(banner.render())
        assert "BOOT FAILED in graph capture" in text
        assert "[oom_graph_capture]" in text
        assert "Hint:" in text
        assert pane.boot.failure.hint
        assert pane.boot.failure.hint in text
        assert plain(pane.query_one(PhaseTimeline)).splitlines()[-1].startswith("✖ graph capture")
        # the header says the failure as a person reads it, not its code (the walk of issue 22)
        assert "✖ failed: OOM graph capture" in pane.query_one(HostBar).right().plain
        # the calculator, calibrated on the failed boot, says this fraction is an OOM risk
        await wait_for(pilot, lambda: pane.calculator.verdict is not None)
        assert pane.calculator.verdict == "oom_risk"
        assert pane.calculator.fields[0].flag == "mem_fraction_static"
        assert pane.calculator.fields[0].value == "0.99"
        # `e` jumps to the error lines (backwards from the bottom with E first)
        await pilot.press("E")
        view = pane.log_view
        assert view.cursor is not None
        assert next(ln for ln in view.lines if ln.seq == view.cursor).style == "error"


async def test_search_filter_follow_and_error_keys() -> None:
    clock = ready_demo()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
        view = pane.log_view
        # / search: Enter finds the first match after the top of the screen (past the end: on from
        # the log's start), n goes on to newer ones, N back to older
        await pilot.press("slash")
        assert pane.query_one(FindBar).has_class("-open")
        await pilot.press(*"weight", "enter")
        await wait_for(pilot, lambda: view.cursor is not None)
        first = view.cursor
        assert first is not None
        assert "weight" in next(ln for ln in view.lines if ln.seq == first).text.lower()
        assert not following(view)
        await pilot.press("n")
        await wait_for(pilot, lambda: view.cursor is not None and view.cursor > first)
        newer = view.cursor
        await pilot.press("N")
        await wait_for(pilot, lambda: view.cursor is not None and view.cursor < (newer or 0))
        # f: follow again, the view jumps to the newest line
        await pilot.press("f")
        await pilot.pause()
        assert following(view)
        assert cursor_of(view) is None
        # & filter by rank: only TP3 lines
        await pilot.press("ampersand", *"TP3", "enter")
        await wait_for(pilot, lambda: "in the whole log" in view.message)
        assert view.mode is ViewMode.FILTER
        assert view.lines
        assert {ln.rank for ln in view.lines} == {"TP3"}
        # new lines keep being filtered while following
        before = len(view.lines)
        await run_clock(pilot, app, clock, seconds=2.0)
        assert {ln.rank for ln in view.lines} == {"TP3"}
        assert len(view.lines) >= before
        # empty filter clears
        await pilot.press("ampersand", "backspace", "enter")  # the old filter is selected: delete it
        await pilot.pause()
        assert view.line_filter is None
        assert {ln.rank for ln in view.lines} != {"TP3"}
        # t and w toggle timestamps and wrap; m marks the newest line
        await pilot.press("t", "w", "m")
        assert view.timestamps
        assert view.wrap
        assert view.marks == {view.lines[-1].seq}
        # scrolling up pauses and counts new lines in the badge
        view.focus()
        await pilot.press("pageup")
        assert not following(view)
        await run_clock(pilot, app, clock, seconds=2.0)
        assert view.pending > 0
        assert f"{view.pending:,} new line" in pane.query_one(LogStatus).badge


async def test_calculator_keys_and_the_prediction_updates_as_you_type() -> None:
    clock = ready_demo()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
        calc = pane.calculator
        await wait_for(pilot, lambda: calc.result is not None)
        assert calc.result is not None
        base_tokens = calc.result["predicted"]["max_total_num_tokens"]
        base = calc.computations
        # c focuses the fraction field with its value selected: typing replaces it
        await pilot.press("c")
        first = calc.fields[0]
        assert focused_of(app) is calc
        assert calc.editing == 0
        assert first.value == "0.85"
        await pilot.press(*"0.99")
        assert first.value == "0.99"
        await wait_for(pilot, lambda: calc.computations > base and calc.result is not None
                       and calc.result["edits"] == {"mem_fraction_static": 0.99})
        assert calc.result is not None
        tokens = calc.result["predicted"]["max_total_num_tokens"]
        assert tokens > base_tokens
        assert calc.result["edits"] == {"mem_fraction_static": 0.99}
        assert calc.verdict == "oom_risk"
        assert first.edited
        # Enter recomputes at once
        count = calc.computations
        await pilot.press("enter")
        assert calc.computations == count + 1
        # a bad value is a clear message naming the field, not a crash; the prediction keeps the last valid value
        await pilot.press("home", "ctrl+k", *"1.5", "enter")
        assert calc.error is not None
        assert "mem-fraction-static" in calc.error
        result = result_of(calc)
        assert result is not None
        assert result["edits"] == {"mem_fraction_static": 0.99}
        await pilot.press("home", "ctrl+k", *"0.80", "enter")
        assert calc.verdict is not None
        # x explains (from anywhere): the formula with the numbers put in
        await pilot.press("escape")
        assert focused_of(app) is pane.log_view
        await pilot.press("x")
        assert isinstance(app.screen, ExplainScreen)
        assert app.screen.lines == calc.explain_lines()
        assert any(re.search(r"\d", line) for line in app.screen.lines)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        # tab cycles the panels: GPU -> log -> calculator -> GPU (the panel, not a field: Enter or c edits)
        await pilot.press("tab")
        assert focused_of(app) is calc
        assert calc.editing is None
        await pilot.press("tab")
        assert focused_of(app) is pane.query_one("#gpu-panel")
        await pilot.press("tab")
        assert focused_of(app) is pane.log_view


async def test_restart_asks_first_and_marks_the_log() -> None:
    clock = ready_demo()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")  # cancel: nothing happens
        assert isinstance(app.screen, MainScreen)
        await pilot.press("R")
        await pilot.press("y")
        await pilot.pause()
        await run_clock(pilot, app, clock, until=lambda: (pane.boot_index or 0) >= 1, limit=30)
        assert any(ln.style == "marker" for ln in pane.log_view.lines)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
        assert pane.boot_index == 1
        assert f"boot #{pane.monitor.boot_number(1)}" in pane.query_one(HostBar).right().plain
        # the log kept following through the restart (the shorter boot panel made the view taller)
        assert following(pane.log_view)
        assert pane.log_view.pending == 0
        # through the service layer: audited like every change kvtui makes to a host, once the
        # new boot it follows (R follows it, as an apply does) is ready
        await run_clock(pilot, app, clock, until=lambda: pane.busy is None, step=0.5, limit=60)
        entry = read_entries()[-1]
        assert (entry["action"], entry["how"], entry["outcome"], entry["host"]) == (
            "restart", "demo", "ready", "demo")


async def test_readonly_hides_every_action_that_changes_a_host() -> None:
    clock = FakeClock()
    app = demo_app(clock, speed=SPEED, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.main_screen
        for action in ("restart", "apply", "rollback", "tune"):
            assert screen.check_action(action, ()) is False
        assert "readonly" in pane_of(app).query_one(HostBar).left().plain
        await pilot.press("R")
        assert isinstance(app.screen, MainScreen)  # no dialog
        await pilot.pause()  # but not silent either (issue 22 #4)
        assert any("is readonly: kvtui never edits or restarts it" in str(n.message) for n in app._notifications)
        titles = [t for t, _, _ in main_screen_commands(screen)]
        assert not any(t.startswith("server:") for t in titles)
        footer_keys = {b.binding.id for b in screen.active_bindings.values() if b.enabled}
        assert "restart" not in footer_keys


async def test_keymap_remaps_and_help_lists_every_key() -> None:
    clock = FakeClock()
    config = Config(keymap={"search": "ctrl+f", "sarch": "x"})
    app = demo_app(clock, speed=SPEED, config=config)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert any("unknown binding id 'sarch'" in p for p in app.startup_problems)
        await pilot.press("ctrl+f")
        assert pane_of(app).query_one(FindBar).has_class("-open")
        await pilot.press("escape")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        rows = {bid: key for key, _, bid in app.screen.rows}
        assert rows["search"] == "^f"
        for bid in ("help", "quit", "filter", "follow", "search.next", "error.next", "timestamps", "wrap", "mark",
                    "calculator", "explain", "processes", "restart", "panel.next"):
            assert bid in rows, bid
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_two_hosts_open_in_tabs_with_a_fleet_summary() -> None:
    clock = ready_demo("demo-a", "demo-b")
    app = demo_app(clock, speed=SPEED, hosts=("demo-a", "demo-b"))
    async with app.run_test(size=SIZE) as pilot:
        panes = app.main_screen.panes
        assert [p.host_name for p in panes] == ["demo-a", "demo-b"]
        await run_clock(pilot, app, clock, until=lambda: all(status_of(p) is BootStatus.READY for p in panes),
                        limit=60)
        fleet = app.main_screen.query_one(FleetSummary)
        # one line for both hosts (issue 22 #13); b: a line each
        line = plain(fleet)
        assert "\n" not in line
        assert line.startswith("▸ demo-a ✔ ready")
        assert "demo-b ✔ ready" in line
        await pilot.press("b")
        await wait_for(pilot, lambda: fleet.region.height == 2)
        rows = plain(fleet).splitlines()
        assert len(rows) == 2
        assert rows[0].startswith("▸ demo-a")
        assert all("✔ ready" in r and "tokens" in r and "connected" in r for r in rows)
        assert pane_of(app).host_name == "demo-a"
        titles = [t for t, _, _ in main_screen_commands(app.main_screen)]
        assert "host: switch to demo-b" in titles
        app.action_switch_host("demo-b")
        await pilot.pause()
        assert pane_of(app).host_name == "demo-b"
        assert plain(fleet).splitlines()[1].startswith("▸ demo-b")
        await pilot.press("slash")  # keys act on the visible host
        assert panes[1].query_one(FindBar).has_class("-open")
        assert not panes[0].query_one(FindBar).has_class("-open")


async def test_theme_switch_recolours_log_and_plot() -> None:
    clock = FakeClock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await run_clock(pilot, app, clock, seconds=3.0)
        view = pane.log_view
        dark_error = view.get_component_rich_style("logview--error", partial=True).color
        dark_phase_rgb = pane.gpu_plot._phase_colour(Phase.LOAD_WEIGHTS)
        app.theme = "kvtui-light"
        await pilot.pause()
        await pilot.pause()
        light_error = view.get_component_rich_style("logview--error", partial=True).color
        assert dark_error != light_error
        assert pane.gpu_plot._phase_colour(Phase.LOAD_WEIGHTS) != dark_phase_rgb
        assert pane.gpu_plot._phase_colour(Phase.LOAD_WEIGHTS) == (0x1F, 0x6F, 0xEB)
        titles = [t for t, _, _ in main_screen_commands(app.main_screen)]
        assert {"theme: kvtui-dark", "theme: kvtui-light", "theme: kvtui-contrast"} <= set(titles)


async def test_a_broken_or_unknown_theme_falls_back_to_the_default(tmp_path: Path) -> None:
    themes = tmp_path / "config" / "kvtui" / "themes"
    themes.mkdir(parents=True)
    (themes / "mine.toml").write_text('name = "mine"\nprimary = "nope"\n')
    clock = FakeClock()
    app = demo_app(clock, speed=SPEED, config=Config(ui=UiConfig(theme="mine")))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == "kvtui-dark"
        assert any("mine.toml" in p and "not a colour" in p for p in app.startup_problems)
        assert any("theme 'mine' is not available" in p for p in app.startup_problems)


async def test_stall_detector_on_a_real_log_file_that_stops(tmp_path: Path, fixtures: Path) -> None:
    """A local host following a log file that stops mid-load: after [ui] stall_seconds of no line
    and no GPU-memory change the console says it may be hung."""
    log = tmp_path / "server.log"
    source = (fixtures / "real" / "17-sglang-llama31-8b-tp1-docs-2025-01-ready.log").read_text().splitlines()
    cut = next(i for i, ln in enumerate(source) if "Load weight begin" in ln) + 1
    log.write_text("\n".join(source[:cut]) + "\n")
    clock = FakeClock()
    from kvtui.hosts.factory import make_backend

    config = Config(ui=UiConfig(stall_seconds=120))
    spec = HostSpec("box", HostConfig(local=True, log_file=str(log)))
    app = KvtuiApp(
        [spec],
        backend_factory=lambda name, host: make_backend(name, host, clock=clock),
        config=config,
        clock=clock,
        monitor_options=MonitorOptions(gpu_interval=0.05, flush_interval=0.05),
    )
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await wait_for(pilot, lambda: pane.boot is not None and pane.boot.phase is Phase.LOAD_WEIGHTS)
        notice = pane.query_one(StallNotice)
        clock.advance(60)
        pane.tick()
        assert not notice.has_class("-stalled")
        clock.advance(75)
        pane.tick()
        await pilot.pause()
        assert notice.has_class("-stalled")
        assert "possibly hung in load weights for 2m 15s" in str(notice.render())
        # a new line ends the suspicion
        with log.open("a") as fh:
            fh.write(source[cut] + "\n")
        await wait_for(pilot, lambda: not notice.has_class("-stalled") or pane.lines_received > cut, timeout=10)
        pane.tick()
        assert not notice.has_class("-stalled")


async def test_restart_on_a_local_host_runs_its_stop_and_start_commands(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    record = tmp_path / "calls.txt"
    host = HostConfig(
        local=True,
        log_file=str(log),
        stop_command=f"echo stop >> {record}",
        start_command=f"echo start >> {record}",
    )
    clock = FakeClock()
    from kvtui.hosts.factory import make_backend

    app = KvtuiApp(
        [HostSpec("box", host)],
        backend_factory=lambda name, cfg: make_backend(name, cfg, clock=clock),
        clock=clock,
        monitor_options=MonitorOptions(gpu_interval=0.05, flush_interval=0.05),
    )
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await wait_for(pilot, lambda: pane.backend is not None)
        assert app.main_screen.check_action("restart", ()) is True
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: record.exists() and record.read_text().count("\n") >= 2, timeout=10)
        assert record.read_text().split() == ["stop", "start"]
        assert pane.busy == "a restart"  # R follows the new boot (none comes here): ctrl+x stops following
        await pilot.press("ctrl+x")
        assert pane.action_banner.headline == "restart of box: no longer followed"
        # one host: "the restart", not a deployment's "every node's restart"
        assert pane.action_banner.detail[0].startswith("the restart was issued and goes on")
        await wait_for(pilot, lambda: bool(read_entries()) and read_entries()[-1]["action"] == "restart")
        entry = read_entries()[-1]
        assert (entry["action"], entry["how"], entry["detail"][-1]) == ("restart", "commands", "interrupted")
        # started detached, its output appended to the host's log file (which the console follows)
        assert entry["commands"] == [f"sh -c 'echo stop >> {record}'", f"nohup setsid sh -c 'echo start >> {record}' "
                                     f"</dev/null >>{log} 2>&1 & echo $!"]


async def test_restart_is_disabled_where_kvtui_cannot_restart(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    clock = FakeClock()
    from kvtui.hosts.factory import make_backend

    app = KvtuiApp(
        [HostSpec("box", HostConfig(local=True, log_file=str(log)))],
        backend_factory=lambda name, cfg: make_backend(name, cfg, clock=clock),
        clock=clock,
    )
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await wait_for(pilot, lambda: pane.backend is not None)
        assert app.main_screen.check_action("restart", ()) is None  # shown, disabled
        await pilot.press("R")
        assert isinstance(app.screen, MainScreen)


async def test_per_process_memory_and_the_foreign_process_warning() -> None:
    clock = ready_demo()
    from kvtui.sim.backend import DemoBackend

    stale = DemoBackend("demo", HostConfig(demo=True, demo_speed=SPEED), clock=clock).set_foreign_process(
        gpu=3, mib=18432, pid=4242, name="python3"
    )
    assert stale is not None
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await settle(pilot, app)
        # the warning names the GPU, the memory and the PID that is not the server's
        warning = pane.query_one("ForeignWarning")
        await wait_for(pilot, lambda: warning.has_class("-shown"))
        text = str(warning.render())
        assert "GPU 3: 18.0 GiB, PID 4242 python3" in text
        # p shows per-process memory instead of the plot; the stranger is marked
        plot_shown = displayed(pane.gpu_plot)  # 130 columns: the layout has no room for the plot
        await pilot.press("p")
        table = pane.query_one(ProcessTable)
        assert table.has_class("-shown")
        assert not pane.gpu_plot.display
        await wait_for(pilot, lambda: table.row_count > 1)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        stranger = [r for r in rows if r[1] == "4242"]
        assert len(stranger) == 1
        assert stranger[0][0] == "3"
        assert "OTHER" in str(stranger[0][3])
        assert any("server" in str(r[3]) for r in rows)
        await pilot.press("p")
        await pilot.pause()
        assert displayed(pane.gpu_plot) == plot_shown  # back as the size has it (issue 22 #14)
        assert not table.has_class("-shown")


def displayed(widget: Widget) -> bool:
    return bool(widget.display)


def _palette_hits(app: KvtuiApp) -> int:
    lists = app.screen.query(CommandList)
    return lists.first().option_count if lists else 0


async def test_the_command_palette_runs_console_actions_and_switches_theme() -> None:
    clock = ready_demo()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+p")
        await pilot.press(*"kvtui-light")
        await wait_for(pilot, lambda: _palette_hits(app) > 0)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.theme == "kvtui-light")
        await pilot.press("ctrl+p")
        await pilot.press(*"log: wrap")
        await wait_for(pilot, lambda: _palette_hits(app) > 0)
        await pilot.press("enter")
        await wait_for(pilot, lambda: pane_of(app).log_view.wrap)
