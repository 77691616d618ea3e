"""A deployment in the console (issue 15, issue 23): ``kvtui connect NAME`` on a
``[deployments.NAME]`` opens one ``HostPane`` per node (a tab each, node-rank order: each node's
whole console — its 8 GPUs, its log with search, its processes), grouped (``kvtui.ui.deployment``):
a strip on each node pane says the merged boot's state per node and the deployment's notes (hang
diagnosis with what the nodes' hosts say of their units, findings), ``#`` goes to the next node,
``H``/``d`` open the deployment's history, and the change keys act on every node as one (apply,
restart, rollback, ctrl+x). Driven with Pilot over the two-node demo preset (real demo backends and
monitors); snapshots at 120×36 and 80×24 with the clock fixed."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from test_demo_2node import _hosts
from test_ui_helpers import FakeClock
from textual.pilot import Pilot

from kvtui.boot import BootStatus
from kvtui.boot.deployment import NodeObservation
from kvtui.commands.connect import expand_names
from kvtui.config import parse_config
from kvtui.flags import get_flag
from kvtui.hosts.factory import make_backend
from kvtui.sim.backend import DemoBackend
from kvtui.ui.app import KvtuiApp
from kvtui.ui.deployment import DeploymentGroup, DeploymentStrip
from kvtui.ui.gpu.widgets import GpuBars
from kvtui.ui.host_pane import HostPane, HostSpec
from kvtui.ui.screens import ConfirmScreen
from kvtui.ui.widgets.boot import StallNotice

SIZE = (120, 36)
SnapCompare = Any
OTHER = "[hosts.other]\ndemo = true\ndemo_speed = 500\n"


def _app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, stall: int | None = None, hang: float = 180,
         speed: float = 500, clock: FakeClock | None = None, probe_ready: bool = False, extra: str = "",
         names: tuple[str, ...] = ("r1",)) -> KvtuiApp:
    """The console of ``kvtui connect NAMES…`` (``r1``: the two-node demo deployment)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cfg = parse_config(_hosts(speed=speed, stall=stall, hang=hang) + OTHER + extra, tmp_path / "hosts.toml")
    if clock is not None:  # the units start at the clock's time (the boot then runs as the clock moves)
        for name in ("r1-a", "r1-b"):
            DemoBackend(name, cfg.host(name), clock=clock).read_unit()

    def factory(name: str, host: Any) -> Any:
        return make_backend(name, host, clock=clock) if clock is not None else make_backend(name, host)

    specs = [HostSpec(n, cfg.host(n)) for n in expand_names(cfg, list(names))]
    return KvtuiApp(specs, backend_factory=factory, config=cfg, clock=clock or time.time, probe_ready=probe_ready,
                    deployments=[n for n in names if cfg.deployment(n) is not None])


def _node(app: KvtuiApp, rank: int) -> HostPane:
    return app.main_screen.panes[rank]


def _group(app: KvtuiApp) -> DeploymentGroup:
    group = _node(app, 0).group
    assert group is not None
    return group


def _strip(app: KvtuiApp, rank: int = 0) -> str:
    return _node(app, rank).query_one(DeploymentStrip).full.plain  # every line (what b shows)


def _units(tmp_path: Path) -> list[str]:
    return [(tmp_path / "state" / "kvtui" / "demo" / n / "sglang-r1.service").read_text() for n in ("r1-a", "r1-b")]


async def _until(pilot: Pilot[Any], pred: Any, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError("condition not met")
        await pilot.pause(0.05)


def _ready(app: KvtuiApp) -> bool:
    dm = _group(app).dm
    return dm is not None and dm.dep is not None and dm.dep.boot.status is BootStatus.READY


async def test_each_node_has_its_console_and_the_strip_says_the_merged_boot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two node tabs in node-rank order (and a plain host beside them, without a strip): each node
    pane shows its own 8 GPUs; the strip on both says the merged boot, node by node; ``#`` goes to
    the next node's tab (round the end); the calculator is calibrated from the merged boot."""
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock, names=("r1", "other"))
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        main = app.main_screen
        assert main.host_names == ["r1-a", "r1-b", "other"]
        a, b, other = main.panes
        assert a.group is b.group is _group(app)
        assert other.group is None
        assert not other.query(DeploymentStrip)  # a plain host: no strip
        assert a.changes is b.changes is _group(app).changes  # one controller for every node
        assert other.changes is not a.changes
        await _until(pilot, lambda: _ready(app) and "up (" in _strip(app), timeout=60)
        assert len(a.query_one(GpuBars).samples) == 8
        lines = _strip(app).splitlines()
        assert lines[0] == "r1 · deployment of 2 nodes · ready · 16 ranks · #: next node"
        assert lines[1] == ("node 0 · r1-a: ready · node 1 · r1-b: up (its ranks serve through node 0 (r1-a))")
        await _until(pilot, lambda: a.calculator.result is not None and _group(app).merged_boot is not None)
        assert _group(app).site.boot is _group(app).merged_boot
        assert a.calculator.engine is not None
        # #: node 1's console (its own 8 GPUs), then node 0's again; not offered on a plain host
        await pilot.press("number_sign")
        await _until(pilot, lambda: main.active_pane is b)
        await _until(pilot, lambda: len(b.query_one(GpuBars).samples) == 8 and "up (" in _strip(app, 1))
        assert _strip(app, 1).splitlines()[1] == lines[1]
        assert b.calculator.engine is not None  # calibrated when shown
        await pilot.press("number_sign")
        await _until(pilot, lambda: main.active_pane is a)
        await pilot.press("3")
        await _until(pilot, lambda: main.active_pane is other)
        assert main.check_action("next_node", ()) is False
        await pilot.press("number_sign")
        await pilot.pause()
        assert main.active_pane is other


async def test_search_on_a_node_s_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``/`` on node 1's console searches node 1's log (node 0's ready line is not in it)."""
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: _ready(app), timeout=60)
        b = _node(app, 1)
        await pilot.press("number_sign")
        await _until(pilot, lambda: app.main_screen.active_pane is b
                     and any("Capture cuda graph end" in ln.text for ln in b.log_view.lines))
        view = b.log_view
        await pilot.press("slash", *"Capture cuda graph end", "enter")
        await _until(pilot, lambda: view.cursor is not None)
        line = next(ln for ln in view.lines if ln.seq == view.cursor)
        assert "Capture cuda graph end" in line.text
        assert " TP15]" in line.text or "TP" in line.text  # node 1's ranks
        assert not any("fired up and ready" in ln.text for ln in view.lines)  # node 0's line, not node 1's


async def test_a_stalled_node_is_named_with_what_its_host_says(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch, stall=1, hang=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: "hang:" in _strip(app))
        strip = _strip(app)
        assert "hang: node 1 (r1-b) has not started distributed init" in strip
        assert "node 0 (r1-a) waiting" in strip
        assert "node 0 · r1-a: starting at init" in strip
        assert "node 1 · r1-b: starting at launch" in strip
        # what the probe of the nodes' hosts found goes into the diagnosis (as wait's does): a
        # demo host has no unit to ask, so the answers of an SSH host are given here
        group = _group(app)
        await _until(pilot, lambda: group.probes >= 1)
        group.probed = {1: NodeObservation(unit_active=False, unit_state="inactive",
                                           env={"NCCL_SOCKET_IFNAME": "eth1"}),
                        0: NodeObservation(unit_active=True, unit_state="active", env={"NCCL_SOCKET_IFNAME": "eth0"})}
        group._dirty = True
        group.refresh()
        strip = _strip(app)
        assert "node 1 (r1-b): its unit is not running (inactive)" in strip
        assert "NCCL_SOCKET_IFNAME" in strip


async def test_each_node_s_stall_notice_names_its_lack_of_progress(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Per node, its console's own stall detector (``[ui] stall_seconds``): node 1 never arrives (it
    printed its arguments only), node 0 waits silently at distributed init; once the clock passed
    the threshold each node's console says it made no progress."""
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, stall=1, speed=100, clock=clock, extra="[ui]\nstall_seconds = 60\n")
    clock.advance(5.0)
    async with app.run_test(size=SIZE) as pilot:
        a, b = _node(app, 0), _node(app, 1)
        await _until(pilot, lambda: any("Init torch distributed begin" in ln.text for ln in a.log_view.lines)
                     and any("server_args=" in ln.text for ln in b.log_view.lines))
        assert all(p.stall.stall(p.boot, clock()) is None for p in (a, b))
        clock.advance(240.0)
        await _until(pilot, lambda: all(p.boot is not None and p.stall.stall(p.boot, clock()) is not None
                                        for p in (a, b)))
        await _until(pilot, lambda: a.query_one(StallNotice).display)
        await pilot.press("number_sign")
        await _until(pilot, lambda: b.query_one(StallNotice).display)


async def _apply_fraction(pilot: Pilot[Any], app: KvtuiApp, fraction: float) -> None:
    """``c``, the fraction typed in, ``a``, ``y``: the apply on every node, ended ready (exit 0)."""
    pane = app.main_screen.active_pane
    assert pane is not None
    await pilot.press("c", *str(fraction), "enter", "escape")
    await _until(pilot, lambda: pane.calculator.result is not None
                 and pane.calculator.result["edits"] == {"mem_fraction_static": fraction})
    await pilot.press("a")
    await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("y")
    await _until(pilot, lambda: pane.busy is None and pane.changes.last_code is not None, timeout=60)
    assert pane.changes.last_code == 0, pane.action_banner.detail


def _stored(names: tuple[str, ...] = ("r1-a", "r1-b")) -> dict[str, list[str]]:
    """Each node's stored boots' statuses (the history the console records), newest first."""
    from kvtui.history import open_store

    with open_store(readonly=True) as store:
        return {n: [b.status for b in store.boots(n)] for n in names}


async def test_history_and_diff_show_the_deployment_s_starts_node_by_node(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The console records each node's boots (under its host name, as the host console does);
    ``d`` opens the deployment's history on the newest start's diff against the last good start,
    node by node; ``H`` lists one row per start with its nodes."""
    from textual.widgets import DataTable

    from kvtui.ui.history.deployment import DeploymentHistoryScreen

    app = _app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        pane = _node(app, 0)
        await _until(pilot, lambda: _ready(app) and pane.calculator.result is not None)
        await _apply_fraction(pilot, app, 0.85)
        # both starts of both nodes are in the history (node 0 ready twice; node 1 prints nothing
        # after its capture: its own boot stays "starting", the start is ready through node 0)
        await _until(pilot, lambda: (got := _stored())["r1-a"] == ["ready", "ready"] and len(got["r1-b"]) == 2)
        await pilot.press("d")
        await _until(pilot, lambda: isinstance(app.screen, DeploymentHistoryScreen)
                     and "compared with" in app.screen.detail_text)
        hist = app.screen
        assert isinstance(hist, DeploymentHistoryScreen)
        assert [s.status.value for s in hist.starts] == ["ready", "ready"]
        assert [s.nodes_text() for s in hist.starts] == ["n0 ready · n1 up",
                                                         "n0 ready · n1 up, stopped"]
        text = hist.detail_text
        assert text.startswith(f"start {hist.starts[0].ids} compared with start {hist.starts[1].ids} (ready ← ready)")
        assert "== node 0 (r1-a) ==" in text
        assert "== node 1 (r1-b) ==" in text
        assert text.count("changed  mem_fraction_static: 0.88 → 0.85") == 2
        table = hist.query_one(DataTable)
        assert table.row_count == 2
        assert table.get_row_at(0)[4] == "n0 ready · n1 up"
        # l: each node's log of the start under the cursor (from its spool)
        await pilot.press("l")
        assert "== node 1 (r1-b) ==" in hist.detail_text
        assert "(last 60 lines)" in hist.detail_text
        await pilot.press("escape")
        await _until(pilot, lambda: app.screen is app.main_screen)
        # H: the list; the older start's diff has nothing before it
        await pilot.press("H")
        await _until(pilot, lambda: isinstance(app.screen, DeploymentHistoryScreen) and app.screen.starts)
        hist = app.screen
        assert isinstance(hist, DeploymentHistoryScreen)
        assert "2 starts of r1 remembered, 2 ready" in hist.detail_text
        await pilot.press("down", "d")
        assert "no start of r1 before it" in hist.detail_text
        # space marks the older start (the row's first cell), d on the newer compares with it
        await pilot.press("space")
        table = hist.query_one(DataTable)
        assert hist.marked == hist.starts[1].key
        assert [table.get_row_at(i)[0] for i in range(2)] == ["", "*"]
        await pilot.pause()
        assert table.render_line(2).text.split()[:2] == ["*", hist.starts[1].ids.split()[0]]  # drawn, not only stored
        await pilot.press("up", "d")
        assert hist.detail_text.startswith(f"start {hist.starts[0].ids} compared with start {hist.starts[1].ids}")
        await pilot.press("down", "space")
        assert hist.marked is None
        assert [table.get_row_at(i)[0] for i in range(2)] == ["", ""]


async def test_p_shows_the_gpu_processes_of_the_node_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``p`` on node 1's console: the process table of node 1's host, its 8 GPUs (node 0's host is
    not asked)."""
    from kvtui.ui.gpu.widgets import ProcessTable

    app = _app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        a, b = _node(app, 0), _node(app, 1)
        await _until(pilot, lambda: _ready(app) and all(len(p.samples) == 8 for p in (a, b)))
        asked: list[str] = []  # which node's host was asked for its processes (its real answer kept)
        for p in (a, b):
            assert p.backend is not None
            real = p.backend.gpu_processes

            async def spy(real: Any = real, name: str = p.host_name) -> Any:
                asked.append(name)
                return await real()
            monkeypatch.setattr(p.backend, "gpu_processes", spy)
        await pilot.press("number_sign")
        await _until(pilot, lambda: app.main_screen.active_pane is b)
        await pilot.press("p")
        table = b.query_one(ProcessTable)

        def rows() -> list[tuple[str, ...]]:
            return [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]

        await _until(pilot, lambda: b._show_processes, timeout=10)
        await _until(pilot, lambda: bool(asked) and table.row_count >= 8)
        assert {r[0] for r in rows()} == {str(i) for i in range(8)}  # node 1's eight GPUs
        assert all(r[3] == "server" for r in rows())  # the demo's GPUs hold only its server's ranks
        assert set(asked) == {"r1-b"}
        await pilot.press("p")  # the bars again
        assert not b._show_processes


async def test_apply_restart_and_rollback_act_on_every_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        pane = _node(app, 0)
        await _until(pilot, lambda: _ready(app) and pane.calculator.result is not None)
        assert all(get_flag(u, "unit", "mem-fraction-static") == "0.88" for u in _units(tmp_path))
        # a: the calculator's edit, planned on both nodes, one confirmation, both written, both restarted
        await _apply_fraction(pilot, app, 0.85)
        assert pane.action_banner.headline == "apply on r1: ready on every node"
        assert _node(app, 1).action_banner.headline == pane.action_banner.headline  # on node 1's console too
        assert all(get_flag(u, "unit", "mem-fraction-static") == "0.85" for u in _units(tmp_path))
        assert "every node's own argument dump carries the edits" in pane.action_banner.detail
        dm = _group(app).dm
        assert dm is not None
        await _until(pilot, lambda: _ready(app) and dm.dep is not None and all(
            nb.boot is not None and nb.boot.flags.get("mem_fraction_static") == 0.85 for nb in dm.dep.nodes))
        assert dm.dep is not None
        assert not dm.dep.findings  # both nodes run the new flags: no difference between them
        # R: every node restarted, the merged boot followed to ready
        pane.changes.last_code = None
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and pane.changes.last_code is not None, timeout=60)
        assert pane.changes.last_code == 0, pane.action_banner.detail
        assert pane.action_banner.headline == "restart on r1: ready on every node"
        # u: every node's newest backup back, restarted
        pane.changes.last_code = None
        await pilot.press("u")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and pane.changes.last_code is not None, timeout=60)
        assert pane.changes.last_code == 0, pane.action_banner.detail
        assert all(get_flag(u, "unit", "mem-fraction-static") == "0.88" for u in _units(tmp_path))


def _dep_workers(app: KvtuiApp) -> list[Any]:
    return [w for w in app.workers if w.group == "service" and w.is_running]


def _boots(app: KvtuiApp) -> list[int]:
    return [len(n.monitor.tracker.boots) for n in _group(app).dm.nodes]


async def test_ctrl_x_stops_following_a_restart_once_every_node_is_restarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()  # frozen: the new boots wait until the clock moves, the follow stays
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        pane = _node(app, 0)
        await _until(pilot, lambda: _ready(app), timeout=60)
        assert not app.main_screen.check_action("cancel_change", ())  # offered only while a change runs
        before = _boots(app)
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: pane.changes.stage == "follow", timeout=60)
        assert app.main_screen.check_action("cancel_change", ())
        assert "ctrl+x: cancel" in pane.action_banner.build().plain
        await pilot.press("ctrl+x")
        assert pane.busy is None
        assert pane.action_banner.headline == "restart of r1: no longer followed"
        assert "every node's restart was issued and goes on" in pane.action_banner.detail[0]
        await _until(pilot, lambda: not _dep_workers(app))
        assert pane.busy is None  # the cancelled worker's end did not take the deployment back
        assert pane.changes.last_code is None
        # the restarts were issued on both nodes and go on: both new boots come, and get ready
        clock.advance(60.0)
        await _until(pilot, lambda: all(n > b for n, b in zip(_boots(app), before, strict=True)), timeout=60)
        await _until(pilot, lambda: _ready(app), timeout=60)


async def test_ctrl_x_while_the_restarts_are_issued_waits_for_all_of_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtui.sim.ops import DemoOps

    entered, release = asyncio.Event(), asyncio.Event()
    real_issue = DemoOps.issue_restart

    async def gated_issue(self: DemoOps, call: Any) -> None:
        if self.backend.name == "r1-b":  # node 1's restart waits: ctrl+x comes after node 0's
            entered.set()
            await release.wait()
        await real_issue(self, call)

    monkeypatch.setattr(DemoOps, "issue_restart", gated_issue)
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        pane = _node(app, 0)
        await _until(pilot, lambda: _ready(app), timeout=60)
        before = _boots(app)
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, entered.is_set)
        await pilot.press("ctrl+x")
        assert pane.changes.stage == "restart"
        assert pane.busy == "a restart"  # node 1's restart is still issued: not left half restarted
        assert "cancel asked" in " ".join(pane.action_banner.lines)
        release.set()
        await _until(pilot, lambda: pane.busy is None and not _dep_workers(app), timeout=60)
        assert pane.action_banner.headline == "restart of r1: no longer followed"
        assert pane.changes.last_code is None
        clock.advance(60.0)  # both nodes were restarted: both new boots come
        await _until(pilot, lambda: all(n > b for n, b in zip(_boots(app), before, strict=True)), timeout=60)


async def test_ctrl_x_while_the_nodes_files_are_written_restores_every_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtui.sim.ops import DemoOps

    entered, release = asyncio.Event(), asyncio.Event()
    real_write = DemoOps.write

    async def gated_write(self: DemoOps, run: Any, saved: str) -> None:
        if self.backend.name == "r1-b":  # node 1's write waits: ctrl+x comes while it runs
            entered.set()
            await release.wait()
        await real_write(self, run, saved)

    monkeypatch.setattr(DemoOps, "write", gated_write)
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        pane = _node(app, 0)
        await _until(pilot, lambda: _ready(app) and pane.calculator.result is not None, timeout=60)
        before = _boots(app)
        await pilot.press("c", *"0.85", "enter", "escape")
        await _until(pilot, lambda: pane.calculator.result is not None
                     and pane.calculator.result["edits"] == {"mem_fraction_static": 0.85})
        await pilot.press("a")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, entered.is_set)
        assert get_flag(_units(tmp_path)[0], "unit", "mem-fraction-static") == "0.85"  # node 0 written
        await pilot.press("ctrl+x")
        assert pane.changes.stage == "write"
        assert pane.busy == "an apply"  # the write in progress ends first (all or nothing)
        assert "cancel asked" in " ".join(pane.action_banner.lines)
        release.set()
        await _until(pilot, lambda: pane.busy is None and not _dep_workers(app), timeout=60)
        assert pane.action_banner.headline == "apply on r1 cancelled: nothing was restarted"
        assert all(get_flag(u, "unit", "mem-fraction-static") == "0.88" for u in _units(tmp_path))
        assert any("r1-a restored from" in d for d in pane.action_banner.detail)
        assert any("r1-b restored from" in d for d in pane.action_banner.detail)
        assert _boots(app) == before  # nothing restarted


async def test_node_0_restarted_alone_names_node_1_as_not_in_this_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 0's unit restarted outside kvtui (node 1's left running): node 0's new boot waits at
    distributed init for a node 1 that never comes; node 1's boot met node 0's old one long before,
    so it is not merged with node 0's new boot — the hang names node 1 (it used to name node 0, as
    not reaching the CUDA graph capture node 1's old boot had reached)."""
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock, hang=60)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: _ready(app), timeout=60)
        cfg = parse_config(_hosts(speed=100, hang=60), tmp_path / "hosts.toml")
        DemoBackend("r1-a", cfg.host("r1-a"), clock=clock).restart()  # as `systemctl restart` on node 0
        clock.advance(120.0)  # node 0's new boot waits at init for two minutes (the bound is one)
        await _until(pilot, lambda: "hang:" in _strip(app), timeout=60)
        notes = _strip(app)
        assert "hang: node 1 (r1-b) has not started this boot (its newest boot, started " in notes
        assert "node 0 (r1-a) waiting 2m" in notes
        assert "node 0 (r1-a) has not started" not in notes
        nodes = _strip(app)
        assert "node 0 · r1-a: starting at init" in nodes
        assert "node 1 · r1-b: not in this start (its boot is of an earlier one: not restarted)" in nodes
        dep = _group(app).dm.dep
        assert dep is not None
        assert dep.nodes[1].boot is None
        assert dep.nodes[1].earlier is not None


async def test_a_restart_ready_on_every_node_asks_node_0_for_one_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch, probe_ready=True)  # as `kvtui connect` runs it
    async with app.run_test(size=SIZE) as pilot:
        pane = _node(app, 0)
        await _until(pilot, lambda: _ready(app), timeout=60)
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and pane.changes.last_code is not None, timeout=60)
        assert pane.changes.last_code == 0, pane.action_banner.detail
        assert pane.action_banner.headline == "restart on r1: ready on every node"
        said = [ln for ln in pane.action_banner.detail if "1-token" in ln]
        assert said
        assert said[-1].startswith("r1-a: ✔ answered a 1-token request in ")  # node 0's own server, as an apply's


def test_connect_on_a_deployment_opens_a_pane_per_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtui.commands import connect

    seen: list[tuple[list[str], list[str]]] = []

    def fake_run(self: KvtuiApp, *a: object, **k: object) -> int:
        seen.append(([s.name for s in self.specs], list(self.deployments)))
        return 0

    monkeypatch.setattr(KvtuiApp, "run", fake_run)
    (tmp_path / "hosts.toml").write_text(_hosts() + OTHER)
    for names in (["r1"], ["other", "r1"]):
        ns = argparse.Namespace(hosts=str(tmp_path / "hosts.toml"), host=names, readonly=False)
        assert connect.run(ns) == 0
    assert seen == [(["r1-a", "r1-b"], ["r1"]), (["other", "r1-a", "r1-b"], ["r1"])]


@pytest.mark.slow
@pytest.mark.parametrize("size", [(120, 36), (80, 24)], ids=["120x36", "80x24"])
def test_snapshot_two_node_demo_deployment(snap_compare: SnapCompare, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]) -> None:
    """Node 0's console of the two-node demo: the node tabs, the deployment's strip under its header."""
    from test_ui_helpers import settle

    clock = FakeClock()
    # two nodes' first boots would be numbered in the order their recorders write them (one row-id
    # sequence for every host: a race, as test_ui_snapshots' two hosts): nothing recorded, the
    # header says "boot N of this log"
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock, extra="\n[history]\nrecord = false\n")
    clock.advance(30.0)  # both halves ready by then (30 s at ×100)

    async def run_before(pilot: Pilot[Any]) -> None:
        await _until(pilot, lambda: len(app.main_screen.panes) == 2)
        a = _node(app, 0)

        def settled() -> bool:
            # every node's backlog read (the fake clock stamps the lines before the monitors' start:
            # read once each node's stream is quiet 1.5 s): the strip no longer says "reading …"
            dm = _group(app).dm
            return (_ready(app) and a.calculator.result is not None and dm is not None
                    and not dm.backlog_pending())
        await _until(pilot, settled, timeout=60)
        await settle(pilot, app)
        group = _group(app)
        group._dirty = True
        group.refresh()
        app.main_screen.refresh_bindings()  # the footer offers "explain" now that there is a prediction
        await pilot.pause()
        await pilot.pause()
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=size, run_before=run_before)


async def test_node_1_serving_through_node_0_says_up_not_a_phase_clock_nor_a_stall(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 1 prints nothing after its CUDA graph capture (its ranks serve through node 0): once the
    deployment is ready its tab, header and boot panel say "up" — they said "▶ graph capture 2m 19s"
    for ever, and after ``stall_seconds`` its console said "possibly hung in graph capture" while
    the deployment served (seen in tmux at 120×36)."""
    from kvtui.ui.widgets.host import FleetSummary, HostBar

    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock, extra="[ui]\nstall_seconds = 60\n")
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        a, b = _node(app, 0), _node(app, 1)
        await _until(pilot, lambda: _ready(app) and "up (" in _strip(app))
        fleet = app.main_screen.query_one(FleetSummary)
        await _until(pilot, lambda: "r1-b ✔ up" in fleet.one_line(200).plain)
        assert "r1-a ✔ ready" in fleet.one_line(200).plain
        assert b.boot is not None
        assert b.boot.status is BootStatus.STARTING  # its own boot never says ready
        clock.advance(300.0)  # past the stall threshold: no line from node 1 since its capture
        await pilot.press("number_sign")
        await _until(pilot, lambda: app.main_screen.active_pane is b)
        await _until(pilot, lambda: b.query_one(HostBar).right().plain.endswith("✔ up"))
        await _until(pilot, lambda: b.query_one("#boot-panel").border_subtitle
                     == "up · its ranks serve through node 0 (r1-a)")
        assert b.stall.stall(b.boot, clock()) is not None  # its detector sees no progress ...
        ticks: list[float] = []
        real = b.tick_row
        monkeypatch.setattr(b, "tick_row", lambda: (ticks.append(clock()), real())[1])
        await _until(pilot, lambda: len(ticks) >= 2)  # ... and the screen's ticks since the clock moved
        assert not b.query_one(StallNotice).display  # say nothing of it
        assert a.up_through() is None  # node 0's own boot is ready


async def test_a_long_hang_diagnosis_at_80x24_says_how_many_lines_b_shows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80×24 a hang with its causes wraps past the strip's six rows: the rows past the sixth were
    cut without a word (the NCCL cause did not show, seen in tmux); the strip now ends with how many
    lines are left and the key that shows them, ``b`` shows every line (and again, six rows)."""
    app = _app(tmp_path, monkeypatch, stall=1, hang=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        a = _node(app, 0)
        strip = a.query_one(DeploymentStrip)
        group = _group(app)
        await _until(pilot, lambda: "hang:" in _strip(app) and group.probes >= 1)
        group.probed = {1: NodeObservation(unit_active=False, unit_state="inactive",
                                           env={"NCCL_SOCKET_IFNAME": "eth1"}),
                        0: NodeObservation(unit_active=True, unit_state="active", env={"NCCL_SOCKET_IFNAME": "eth0"})}
        group._dirty = True
        group.refresh()
        assert "NCCL_SOCKET_IFNAME differs" in _strip(app)
        await _until(pilot, lambda: "more line" in str(strip.render()) and strip.region.height == 6)
        shown = str(strip.render()).splitlines()
        assert len(shown) == 6
        assert shown[0].startswith("r1 · deployment of 2 nodes · starting")
        assert shown[-1].startswith("… ")
        assert shown[-1].endswith(" more lines  b: details")
        assert "NCCL_SOCKET_IFNAME" not in str(strip.render())
        assert a.log_view.region.height >= 4  # the log keeps its rows
        await pilot.press("b")
        await _until(pilot, lambda: "NCCL_SOCKET_IFNAME" in str(strip.render()) and strip.region.height > 6)
        assert "more line" not in str(strip.render())
        await pilot.press("b")
        await _until(pilot, lambda: "b: details" in str(strip.render()) and strip.region.height == 6)


async def test_a_node_that_failed_and_restarted_alone_is_still_named_on_every_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``R`` with a stale process holding 60 GiB of node 1's GPU 3: node 1's boot fails (its
    failure banner on its tab), its unit restarts it by itself (``Restart=on-failure``) and the
    newest start is node 1's alone — node 0's strip said only "node 0: not in this start · node 1:
    starting" a second after the failure, nothing of it (seen in tmux). The strip keeps naming the
    node whose previous boot failed, and why, until the deployment is ready again."""
    from kvtui.ui.widgets.boot import FailureBanner

    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        a, b = _node(app, 0), _node(app, 1)
        await _until(pilot, lambda: _ready(app), timeout=60)
        cfg = parse_config(_hosts(speed=100), tmp_path / "hosts.toml")
        DemoBackend("r1-b", cfg.host("r1-b"), clock=clock).set_foreign_process(gpu=3, mib=62000)
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: a.changes.stage == "follow", timeout=60)
        clock.advance(60.0)  # node 1's new boot fails at its KV pool, and its unit starts it again

        def failed_and_restarted() -> bool:
            boots = b.monitor.tracker.boots if b.monitor is not None else []
            return (len(boots) >= 3 and boots[-1].status is BootStatus.STARTING
                    and boots[-2].status is BootStatus.FAILED)
        await _until(pilot, failed_and_restarted, timeout=60)
        await _until(pilot, lambda: "node 1 · r1-b: starting" in _strip(app)
                     and "node 0 · r1-a: not in this start" in _strip(app))
        await _until(pilot, lambda: "node 1 (r1-b): its previous boot failed (KV pool too big, " in _strip(app))
        assert "node 1 (r1-b): its previous boot failed (KV pool too big, " in _strip(app, 1)
        await pilot.press("number_sign")
        await _until(pilot, lambda: b.query_one(FailureBanner).display)  # node 1's own: its failed boot


async def test_the_strip_names_a_node_s_phase_as_its_tab_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """During the weights' load the tab line said "▶ load weights 4.5s" and the strip under it
    "starting at load_weights" (the phase's code; at 80 columns it wrapped alone onto a row)."""
    from kvtui.ui.widgets.host import FleetSummary

    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(1.0)  # both nodes loading their weights (launch and init take ~0.1 s at ×100)
    async with app.run_test(size=SIZE) as pilot:
        fleet = app.main_screen.query_one(FleetSummary)
        await _until(pilot, lambda: "node 1 · r1-b: starting at" in _strip(app)
                     and "r1-b ▶ load weights" in fleet.one_line(200).plain)
        assert _strip(app).splitlines()[1] == ("node 0 · r1-a: starting at load weights · "
                                               "node 1 · r1-b: starting at load weights")
