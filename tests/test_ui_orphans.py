"""The console's GPU process table names orphaned engine processes of a previous boot (issue 24):
``p`` on the demo host with a simulated orphan (an EngineCore left by a killed API server)."""

from __future__ import annotations

from test_ui_helpers import FakeClock, demo_app, screen_text, settle, start_demo, wait_for

from kvtui.gpu import GpuProcess
from kvtui.sim.backend import DemoBackend
from kvtui.ui.gpu.widgets import ProcessTable

SPEED = 40.0
SIZE = (130, 38)


async def test_p_marks_an_orphan_with_the_command_to_end_it() -> None:
    clock = FakeClock()
    start_demo("demo", clock, speed=SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.main_screen.active_pane
        assert pane is not None
        await settle(pilot, app)
        backend = pane.backend
        assert isinstance(backend, DemoBackend)
        backend.orphans = [GpuProcess(31337, 30_000.0, 2, None, "VLLM::EngineCore")]
        await pilot.press("p")
        table = pane.query_one(ProcessTable)
        await wait_for(pilot, lambda: any(table.get_row_at(i)[1] == "31337" for i in range(table.row_count)))
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        orphan = next(r for r in rows if r[1] == "31337")
        assert orphan[0] == "2"
        assert str(orphan[3]) == "ORPHAN"
        assert "orphan of the previous boot" in str(orphan[4])
        assert "kill 31337" in str(orphan[4])
        assert "kill -9 31337" in str(orphan[4])
        assert any(str(r[3]) == "server" for r in rows)  # the server's own processes stay unmarked


async def test_a_gpu_busy_failure_names_the_orphan_holding_the_memory() -> None:
    from kvtui.config import HostConfig
    from kvtui.engines.events import FailureKind
    from kvtui.ui.widgets.boot import FailureBanner

    clock = FakeClock()
    backend = DemoBackend("demo", HostConfig(demo=True, demo_speed=SPEED, demo_engine="vllm"), clock=clock)
    backend.read_unit()
    backend.set_foreign_process(mib=20480, pid=4243, name="VLLM::EngineCore")  # the previous boot's, under init
    backend.restart()
    clock.advance(60.0)
    app = demo_app(clock, speed=SPEED, host_options={"demo_engine": "vllm"})
    async with app.run_test(size=SIZE) as pilot:
        pane = app.main_screen.active_pane
        assert pane is not None
        await settle(pilot, app)
        assert pane.query_one(FailureBanner) is not None
        await wait_for(pilot, lambda: pane.boot is not None and pane.boot.failure is not None)
        assert pane.boot is not None
        assert pane.boot.failure is not None
        assert pane.boot.failure.kind is FailureKind.GPU_BUSY
        await wait_for(pilot, lambda: pane._orphans_hint is not None)
        hint = pane._orphans_hint
        assert hint is not None
        assert "PID 4243 (VLLM::EngineCore, 20,480 MiB of GPU" in hint
        assert "kill 4243; sleep 10; kill -9 4243" in hint
        await pilot.press("b")  # the banner unfolded: its every line
        await wait_for(pilot, lambda: "Orphans: orphaned engine processes" in screen_text(app))
        assert "kill 4243" in screen_text(app)


async def test_r_over_an_orphan_is_refused_naming_it() -> None:
    from kvtui.audit import read_entries
    from kvtui.ui.screens import ConfirmScreen

    clock = FakeClock()
    start_demo("demo", clock, speed=SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.main_screen.active_pane
        assert pane is not None
        await settle(pilot, app)
        backend = pane.backend
        assert isinstance(backend, DemoBackend)
        backend.orphans = [GpuProcess(31337, 30_000.0, 2, None, "sglang::scheduler_TP2")]
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: pane.busy is None and bool(read_entries())
                       and read_entries()[-1]["action"] == "restart")
        entry = read_entries()[-1]
        assert entry["outcome"] == "refused"
        await wait_for(pilot, lambda: "demo: refused" in screen_text(app))
        await pilot.press("b")  # the banner's details: the refusal, with the PIDs and the command
        await wait_for(pilot, lambda: "PID 31337 (sglang::scheduler_TP2" in screen_text(app))
        assert "kill 31337" in screen_text(app)
        assert pane.boot_index == 0  # no new boot


async def test_a_cpu_host_s_orphans_get_rows_of_their_own_with_their_ram() -> None:
    from textual.app import App, ComposeResult

    from kvtui.engines.orphans import Orphan

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield ProcessTable(classes="-shown")

    app = One()
    async with app.run_test(size=(160, 20)) as pilot:
        table = app.query_one(ProcessTable)
        table.show([], set(), [Orphan(8410, 1, "VLLM::EngineCore", "vllm", rss_mib=588.0),
                               Orphan(11037, 8410, "VLLM::Worker", "vllm", rss_mib=2176.0)])
        await pilot.pause()
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        assert [(r[0], r[1], r[2], str(r[3])) for r in rows] == [
            ("-", "8410", "588", "ORPHAN"), ("-", "11037", "2,176", "ORPHAN")]
        assert "VLLM::Worker: orphan of the previous boot — end it: kill 11037" in str(rows[1][4])
