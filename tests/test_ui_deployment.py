"""The deployment console (issue 15): ``kvtui connect NAME`` on a ``[deployments.NAME]`` opens
``KvtuiApp`` with the deployment's one pane (``DeploymentScreen``) — GPU bars grouped by node (16
for the two-node demo), each node's connection, boot and unit state, the merged boot's timeline,
figures, findings and hang diagnosis (with what the nodes' hosts say of their units), a merged log
with a node column and a node filter, the calculator over every rank of every node, and the change
keys acting on every node as one (apply, restart, rollback). Driven with Pilot over the two-node
demo preset (real demo backends and monitors); snapshots at 120×36 and 80×24 with the clock fixed."""

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
from textual.widgets import RichLog, Static

from kvtui.boot import BootStatus
from kvtui.boot.deployment import NodeObservation
from kvtui.config import parse_config
from kvtui.flags import get_flag
from kvtui.hosts.factory import make_backend
from kvtui.sim.backend import DemoBackend
from kvtui.ui.app import KvtuiApp
from kvtui.ui.deployment_screen import DeploymentScreen, DeploymentSpec
from kvtui.ui.gpu.widgets import GpuBars, GpuHistoryPlot
from kvtui.ui.screens import ConfirmScreen

SIZE = (120, 36)
SnapCompare = Any


def _app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, stall: int | None = None, hang: float = 180,
         speed: float = 500, clock: FakeClock | None = None, probe_ready: bool = False, extra: str = "") -> KvtuiApp:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cfg = parse_config(_hosts(speed=speed, stall=stall, hang=hang) + extra, tmp_path / "hosts.toml")
    if clock is not None:  # the units start at the clock's time (the boot then runs as the clock moves)
        for name in ("r1-a", "r1-b"):
            DemoBackend(name, cfg.host(name), clock=clock).read_unit()
    dep = cfg.deployment("r1")
    assert dep is not None
    spec = DeploymentSpec("r1", cfg.node_hosts("r1"), dep.hang_seconds)
    return KvtuiApp([], backend_factory=make_backend, config=cfg, deployment=spec, clock=clock or time.time,
                    probe_ready=probe_ready)


def _screen(app: KvtuiApp) -> DeploymentScreen:
    screen = app.screen_stack[0]
    assert isinstance(screen, DeploymentScreen)
    return screen


def _text(app: KvtuiApp, sel: str) -> str:
    return str(_screen(app).query_one(sel, Static).render())


def _log(app: KvtuiApp) -> list[str]:
    return [s.text for s in _screen(app).query_one(RichLog).lines]


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
    dm = _screen(app).dm
    return dm.dep is not None and dm.dep.boot.status is BootStatus.READY


async def test_the_pane_groups_16_gpus_by_node_and_merges_the_boot_and_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a frozen clock: the boot is over and no serving line comes after it (on a real clock at ×500
    # a loaded machine's wait let serving lines push "fired up" out of the bounded log)
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        pane = screen.pane
        await _until(pilot, lambda: _ready(app) and all(len(b.samples) == 8 for b in screen.query(GpuBars)),
                     timeout=60)
        await _until(pilot, lambda: "up (" in _text(app, "#dep-nodes"))
        bars = list(screen.query(GpuBars))
        assert len(bars) == 2
        assert sum(len(b.samples) for b in bars) == 16
        assert _text(app, "#node-head-0") == "node 0 · r1-a · connected"
        assert _text(app, "#node-head-1") == "node 1 · r1-b · connected"
        nodes = _text(app, "#dep-nodes").splitlines()
        assert nodes[0] == "r1 · deployment of 2 nodes · ready · 16 ranks"
        assert nodes[1] == "node 0 · r1-a · connected · ready · simulated unit"
        assert nodes[2] == "node 1 · r1-b · connected · up (its ranks serve through node 0 (r1-a)) · simulated unit"
        assert "set by: " in _text(app, "#dep-notes")
        # the merged log keeps both nodes' lines (they reach it in the pane's batches)
        await _until(pilot, lambda: any(ln.node == 0 and "fired up and ready" in ln.text for ln in pane.lines))
        await _until(pilot, lambda: any(ln.node == 1 and " TP15]" in ln.text for ln in pane.lines))
        # the calculator is calibrated from the merged boot (every rank of every node)
        await _until(pilot, lambda: pane.calculator.result is not None)
        assert pane.calculator.engine is not None
        # the node filter: node 0 only, node 1 only, every node again
        await pilot.press("number_sign")
        await pilot.pause()
        assert "log · node 0 · r1-a" in _text(app, "#dep-log-head")
        assert all(t.startswith("n0 ") for t in _log(app))
        await pilot.press("number_sign")
        await pilot.pause()
        only1 = _log(app)
        assert only1
        assert all(t.startswith("n1 ") for t in only1)
        assert not any("fired up" in t for t in only1)
        await pilot.press("number_sign")
        await pilot.pause()
        assert "log · all nodes" in _text(app, "#dep-log-head")
        assert {t[:3] for t in _log(app)} == {"n0 ", "n1 "}
        assert pane.filter is None
        # node 1's log ends at its graph capture (its ranks serve through node 0): up, never "stalled"
        clock.advance(600.0)
        assert pane.check_stalls() == ""


async def test_search_the_merged_log_with_slash_n_and_n_within_the_node_filter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        pane = screen.pane
        await _until(pilot, lambda: _ready(app), timeout=60)
        await _until(pilot, lambda: any(ln.node == 0 and "fired up and ready" in ln.text for ln in pane.lines)
                     and any(ln.node == 1 and "Capture cuda graph end" in ln.text for ln in pane.lines))
        await pilot.press("n")  # nothing to repeat yet
        assert pane.search is None
        # one match: node 0's ready line (smart case: lower case finds "fired up")
        await pilot.press("slash", *"fired up", "enter")
        await _until(pilot, lambda: pane.search is not None)
        assert pane.match is not None
        assert pane.match.node == 0
        assert "fired up and ready" in pane.match.text
        assert "/fired up match 1 of 1" in _text(app, "#dep-log-head")
        assert screen.focused is screen.query_one(RichLog)  # the keys after Enter reach the log
        await pilot.press("N")
        assert "no older match (1 in all)" in _text(app, "#dep-log-head")
        # many matches on both nodes: N walks back through them, n forward again
        caps = [ln for ln in pane.shown if "Capture cuda graph end" in ln.text]
        assert {ln.node for ln in caps} == {0, 1}
        await pilot.press("slash", *"Capture cuda graph end", "enter")
        await _until(pilot, lambda: pane.match is not None and "Capture cuda graph end" in pane.match.text)
        assert pane.match is caps[-1]  # the newest first
        assert f"match {len(caps)} of {len(caps)}" in _text(app, "#dep-log-head")
        await pilot.press("N", "N")
        assert pane.match is caps[-3]
        await pilot.press("n")
        assert pane.match is caps[-2]
        log = screen.query_one(RichLog)
        assert not log.auto_scroll  # it stays at the match while lines come
        # the node filter keeps the search: only node 1's lines, and its matches
        await pilot.press("number_sign", "number_sign")
        assert pane.filter == 1
        assert pane.search is not None
        assert all(ln.node == 1 for ln in pane.shown)
        await pilot.press("N")
        assert pane.match is not None
        assert pane.match.node == 1
        caps1 = [ln for ln in pane.shown if "Capture cuda graph end" in ln.text]
        assert f"of {len(caps1)}" in _text(app, "#dep-log-head")
        await pilot.press("slash", *"fired up", "enter")
        await _until(pilot, lambda: pane.search is not None and pane.search.text == "fired up")
        assert pane.match is None
        assert "no match on node 1 · r1-b" in _text(app, "#dep-log-head")
        # an empty search clears it: the log follows again
        await pilot.press("slash", "ctrl+u", "enter")
        await _until(pilot, lambda: pane.search is None)
        assert log.auto_scroll
        assert "/fired" not in _text(app, "#dep-log-head")


async def test_g_shows_the_gpu_plot_of_all_nodes_or_of_the_node_the_filter_shows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        pane = screen.pane
        plots = {p.id: p for p in screen.query(GpuHistoryPlot)}
        assert set(plots) == {"plot-all", "plot-0", "plot-1"}
        await _until(pilot, lambda: _ready(app), timeout=60)

        def moving() -> bool:  # the clock moves on while the plots collect (a reading per time)
            clock.advance(0.5)
            return all(len(p.points) >= 2 for p in plots.values())
        # the history is kept while the plots are hidden
        await _until(pilot, moving, timeout=60)
        assert not pane.plot_shown
        assert all(not p.display or not p.is_on_screen for p in plots.values())
        # all nodes: the sum of the 16 GPUs' memory, with the merged boot's phase bands
        await pilot.press("g")
        assert pane.plot_shown
        assert pane.shown_plot() is plots["plot-all"]
        assert not screen.query_one("#dep-gpus").display
        assert _text(app, "#dep-plot-head") == "GPU memory · all nodes · the sum of their 16 GPUs · g: bars"
        gpus = [s for n in (0, 1) for s in pane._gpus[n].samples]
        assert len(gpus) == 16
        assert plots["plot-all"].total_gib == pytest.approx(sum(s.total_gib for s in gpus))
        assert plots["plot-all"].points[-1][1] > max(s.used_gib for s in gpus) * 8  # a sum, not one GPU
        await _until(pilot, lambda: plots["plot-all"].bands != () and plots["plot-all"].redraws >= 1)
        # the node filter picks the node: its busiest GPU, as on a host
        await pilot.press("number_sign")
        assert pane.shown_plot() is plots["plot-0"]
        assert _text(app, "#dep-plot-head") == "GPU memory · node 0 · r1-a · its busiest GPU · g: bars"
        node0 = pane._gpus[0].samples
        assert plots["plot-0"].total_gib == pytest.approx(max(s.total_gib for s in node0))
        assert plots["plot-0"].points[-1][1] <= plots["plot-0"].total_gib
        await _until(pilot, lambda: plots["plot-0"].redraws >= 1)
        assert plots["plot-0"].is_on_screen
        assert not plots["plot-all"].display
        await pilot.press("number_sign")
        assert pane.shown_plot() is plots["plot-1"]
        # g again: the bars
        await pilot.press("g")
        assert not pane.plot_shown
        assert screen.query_one("#dep-gpus").display


async def test_a_stalled_node_is_named_with_what_its_host_says(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch, stall=1, hang=0.5)
    async with app.run_test(size=SIZE) as pilot:
        pane = _screen(app).pane
        await _until(pilot, lambda: "hang:" in _text(app, "#dep-notes"))
        notes = _text(app, "#dep-notes")
        assert "hang: node 1 (r1-b) has not started distributed init" in notes
        assert "node 0 (r1-a) waiting" in notes
        nodes = _text(app, "#dep-nodes")
        assert "node 0 · r1-a · connected · starting at init" in nodes
        assert "node 1 · r1-b · connected · starting at launch" in nodes
        # what the probe of the nodes' hosts found goes into the diagnosis (as wait's does): a
        # demo host has no unit to ask, so the answers of an SSH host are given here
        await _until(pilot, lambda: pane.probes >= 1)
        pane.probed = {1: NodeObservation(unit_active=False, unit_state="inactive", env={"NCCL_SOCKET_IFNAME": "eth1"}),
                       0: NodeObservation(unit_active=True, unit_state="active", env={"NCCL_SOCKET_IFNAME": "eth0"})}
        pane._dirty = True
        pane.refresh_now()
        notes = _text(app, "#dep-notes")
        assert "node 1 (r1-b): its unit is not running (inactive)" in notes
        assert "NCCL_SOCKET_IFNAME" in notes


async def test_the_stall_notice_names_each_node_that_made_no_progress(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Per node, the console's stall detector (``[ui] stall_seconds``): node 1 never arrives (it
    printed its arguments only), node 0 waits silently at distributed init; once the clock passed
    the threshold the notice names both, worded by what each saw (silent here: the demo's SGLang
    prints no wait line; a node printing wait lines: test_deployment_monitor)."""
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, stall=1, speed=100, clock=clock, extra="[ui]\nstall_seconds = 60\n")
    clock.advance(5.0)
    async with app.run_test(size=SIZE) as pilot:
        pane = _screen(app).pane
        notice = pane.query_one("#dep-stall", Static)
        # every line the nodes will print has reached the pane (not only their monitors' trackers)
        await _until(pilot, lambda: any(ln.node == 0 and "Init torch distributed begin" in ln.text for ln in pane.lines)
                     and any(ln.node == 1 and "server_args=" in ln.text for ln in pane.lines))
        assert pane.check_stalls() == ""
        assert not notice.display
        clock.advance(30.0)  # below the threshold: still nothing
        assert pane.check_stalls() == ""
        clock.advance(210.0)
        await _until(pilot, lambda: pane.stall_text.count("\n") == 1 and notice.display)
        lines = _text(app, "#dep-stall").splitlines()
        assert len(lines) == 2
        assert lines[0].startswith("⏸ node 0 (r1-a): no progress for 4m")  # 240 s since its last line
        assert lines[1].startswith("⏸ node 1 (r1-b): no progress for 4m")
        assert all(ln.endswith("— no log line and no GPU-memory change") for ln in lines)
        # a short terminal: every node silent, one line
        await pilot.resize_terminal(80, 24)
        await _until(pilot, lambda: pane.compact and len(_text(app, "#dep-stall").splitlines()) == 1)
        line = _text(app, "#dep-stall")
        assert line.startswith("⏸ no progress: node 0 (r1-a) 4m")
        assert ", node 1 (r1-b) 4m" in line
        assert line.endswith("— no log line and no GPU-memory change")


async def _apply_fraction(pilot: Pilot[Any], app: KvtuiApp, fraction: float) -> None:
    """``c``, the fraction typed in, ``a``, ``y``: the apply on every node, ended ready (exit 0)."""
    screen = _screen(app)
    pane = screen.pane
    await pilot.press("c", *str(fraction), "enter", "escape")
    await _until(pilot, lambda: pane.calculator.result is not None
                 and pane.calculator.result["edits"] == {"mem_fraction_static": fraction})
    await pilot.press("a")
    await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("y")
    await _until(pilot, lambda: pane.busy is None and screen.pane.changes.last_code is not None, timeout=60)
    assert screen.pane.changes.last_code == 0, pane.action_banner.detail


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
        screen = _screen(app)
        pane = screen.pane
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
        await _until(pilot, lambda: app.screen is screen)
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


async def test_p_shows_the_gpu_processes_of_the_node_the_log_shows(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``p`` (remapped here to ``P`` through ``[keymap]``: binding id ``processes``, as on the host
    console) swaps the bars for the host console's process table of the node the log's filter shows
    (all nodes: node 0); ``#`` moves it to node 1; ``g`` and ``p`` swap back."""
    from kvtui.ui.gpu.widgets import ProcessTable

    app = _app(tmp_path, monkeypatch, extra='[keymap]\nprocesses = "P"\n')
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        pane = screen.pane
        await _until(pilot, lambda: _ready(app) and all(len(b.samples) == 8 for b in screen.query(GpuBars)))
        table = pane.query_one(ProcessTable)
        asked: list[str] = []  # which node's host was asked for its processes (its real answer kept)
        for n in screen.dm.nodes:
            real = n.monitor.backend.gpu_processes

            async def spy(real: Any = real, name: str = n.name) -> Any:
                asked.append(name)
                return await real()
            monkeypatch.setattr(n.monitor.backend, "gpu_processes", spy)
        await pilot.press("P")
        assert pane.processes_shown
        assert not screen.query_one("#dep-gpus").display
        assert screen.query_one("#dep-procs").display
        assert _text(app, "#dep-procs-head") == "GPU processes · node 0 · r1-a · #: another node · p: bars"

        def rows() -> list[tuple[str, ...]]:
            return [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]

        await _until(pilot, lambda: pane.polled_processes >= 1 and table.row_count >= 8)
        node0 = rows()
        assert {r[0] for r in node0} == {str(i) for i in range(8)}  # node 0's eight GPUs
        assert all(r[3] == "server" for r in node0)  # the demo's GPUs hold only its server's ranks
        assert set(asked) == {"r1-a"}
        polled = pane.polled_processes
        await pilot.press("number_sign")  # the log shows node 0 alone
        assert _text(app, "#dep-procs-head") == "GPU processes · node 0 · r1-a · p: bars"
        await pilot.press("number_sign")  # the log shows node 1: so does the table
        assert _text(app, "#dep-procs-head") == "GPU processes · node 1 · r1-b · p: bars"
        asked.clear()
        polled = pane.polled_processes
        await _until(pilot, lambda: pane.polled_processes > polled and table.row_count >= 8)
        assert set(asked) == {"r1-b"}  # node 1's host answers now (the demo's nodes reuse their PIDs)
        assert {r[0] for r in rows()} == {str(i) for i in range(8)}
        await pilot.press("g")  # the plot replaces the table
        assert pane.plot_shown
        assert not pane.processes_shown
        await pilot.press("P")  # the table replaces the plot
        assert pane.processes_shown
        assert not pane.plot_shown
        await pilot.press("P")  # the bars again
        assert not pane.processes_shown
        assert screen.query_one("#dep-gpus").display


async def test_apply_restart_and_rollback_act_on_every_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        pane = screen.pane
        await _until(pilot, lambda: _ready(app) and pane.calculator.result is not None)
        assert all(get_flag(u, "unit", "mem-fraction-static") == "0.88" for u in _units(tmp_path))
        # a: the calculator's edit, planned on both nodes, one confirmation, both written, both restarted
        await _apply_fraction(pilot, app, 0.85)
        assert pane.action_banner.headline == "apply on r1: ready on every node"
        assert all(get_flag(u, "unit", "mem-fraction-static") == "0.85" for u in _units(tmp_path))
        assert "every node's own argument dump carries the edits" in pane.action_banner.detail
        await _until(pilot, lambda: _ready(app) and all(
            nb.boot is not None and nb.boot.flags.get("mem_fraction_static") == 0.85 for nb in screen.dm.dep.nodes))
        assert not screen.dm.dep.findings  # both nodes run the new flags: no difference between them
        # R: every node restarted, the merged boot followed to ready
        screen.pane.changes.last_code = None
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and screen.pane.changes.last_code is not None, timeout=60)
        assert screen.pane.changes.last_code == 0, pane.action_banner.detail
        assert pane.action_banner.headline == "restart on r1: ready on every node"
        # u: every node's newest backup back, restarted
        screen.pane.changes.last_code = None
        await pilot.press("u")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and screen.pane.changes.last_code is not None, timeout=60)
        assert screen.pane.changes.last_code == 0, pane.action_banner.detail
        assert all(get_flag(u, "unit", "mem-fraction-static") == "0.88" for u in _units(tmp_path))


def _dep_workers(app: KvtuiApp) -> list[Any]:
    return [w for w in app.workers if w.group == "service" and w.is_running]


def _boots(app: KvtuiApp) -> list[int]:
    return [len(n.monitor.tracker.boots) for n in _screen(app).dm.nodes]


async def test_ctrl_x_stops_following_a_restart_once_every_node_is_restarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()  # frozen: the new boots wait until the clock moves, the follow stays
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        pane = screen.pane
        await _until(pilot, lambda: _ready(app), timeout=60)
        assert not screen.check_action("cancel_change", ())  # offered only while a change runs
        before = _boots(app)
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: screen.pane.changes.stage == "follow", timeout=60)
        assert screen.check_action("cancel_change", ())
        assert "ctrl+x: cancel" in pane.action_banner.build().plain
        await pilot.press("ctrl+x")
        assert pane.busy is None
        assert pane.action_banner.headline == "restart of r1: no longer followed"
        assert "every node's restart was issued and goes on" in pane.action_banner.detail[0]
        await _until(pilot, lambda: not _dep_workers(app))
        assert pane.busy is None  # the cancelled worker's end did not take the deployment back
        assert screen.pane.changes.last_code is None
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
        screen = _screen(app)
        pane = screen.pane
        await _until(pilot, lambda: _ready(app), timeout=60)
        before = _boots(app)
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, entered.is_set)
        await pilot.press("ctrl+x")
        assert screen.pane.changes.stage == "restart"
        assert pane.busy == "a restart"  # node 1's restart is still issued: not left half restarted
        assert "cancel asked" in " ".join(pane.action_banner.lines)
        release.set()
        await _until(pilot, lambda: pane.busy is None and not _dep_workers(app), timeout=60)
        assert pane.action_banner.headline == "restart of r1: no longer followed"
        assert screen.pane.changes.last_code is None
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
        screen = _screen(app)
        pane = screen.pane
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
        assert screen.pane.changes.stage == "write"
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
        screen = _screen(app)
        await _until(pilot, lambda: _ready(app), timeout=60)
        cfg = parse_config(_hosts(speed=100, hang=60), tmp_path / "hosts.toml")
        DemoBackend("r1-a", cfg.host("r1-a"), clock=clock).restart()  # as `systemctl restart` on node 0
        clock.advance(120.0)  # node 0's new boot waits at init for two minutes (the bound is one)
        await _until(pilot, lambda: "hang:" in _text(app, "#dep-notes"), timeout=60)
        notes = _text(app, "#dep-notes")
        assert "hang: node 1 (r1-b) has not started this boot (its newest boot, started " in notes
        assert "node 0 (r1-a) waiting 2m" in notes
        assert "node 0 (r1-a) has not started" not in notes
        nodes = _text(app, "#dep-nodes")
        assert "node 0 · r1-a · connected · starting at init" in nodes
        assert "node 1 · r1-b · connected · not in this start (its boot is of an earlier one: not restarted)" in nodes
        dep = screen.dm.dep
        assert dep is not None
        assert dep.nodes[1].boot is None
        assert dep.nodes[1].earlier is not None


async def test_a_restart_ready_on_every_node_asks_node_0_for_one_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch, probe_ready=True)  # as `kvtui connect` runs it
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        pane = screen.pane
        await _until(pilot, lambda: _ready(app), timeout=60)
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: pane.busy is None and screen.pane.changes.last_code is not None, timeout=60)
        assert screen.pane.changes.last_code == 0, pane.action_banner.detail
        assert pane.action_banner.headline == "restart on r1: ready on every node"
        said = [ln for ln in pane.action_banner.detail if "1-token" in ln]
        assert said
        assert said[-1].startswith("node 0 (r1-a): answered a 1-token request in ")  # node 0's own server


def test_connect_on_a_deployment_opens_the_console_with_its_pane(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtui.commands import connect

    seen: list[str] = []

    def fake_run(self: KvtuiApp, *a: object, **k: object) -> int:
        assert self.deployment is not None
        seen.append(self.deployment.name)
        seen.extend(n for n, _ in self.deployment.nodes)
        return 0

    monkeypatch.setattr(KvtuiApp, "run", fake_run)
    (tmp_path / "hosts.toml").write_text(_hosts())
    ns = argparse.Namespace(hosts=str(tmp_path / "hosts.toml"), host=["r1"], readonly=False)
    assert connect.run(ns) == 0
    assert seen == ["r1", "r1-a", "r1-b"]


@pytest.mark.slow
@pytest.mark.parametrize("size", [(120, 36), (80, 24)], ids=["120x36", "80x24"])
def test_snapshot_two_node_demo_deployment(snap_compare: SnapCompare, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]) -> None:
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)  # both halves ready by then (30 s at ×100)

    async def run_before(pilot: Pilot[Any]) -> None:
        screen = _screen(app)
        pane = screen.pane

        def settled() -> bool:
            for n in screen.dm.nodes:
                b = n.monitor.backend
                assert isinstance(b, DemoBackend)
                if b.read_lines(after_cursor=n.monitor.spool.last_cursor, limit=1) or n.monitor.pending:
                    return False
            # every node's backlog read (the fake clock stamps the lines before the monitors' start:
            # read once each node's stream is quiet 1.5 s): the notes no longer say "reading …"
            return (len(pane._gpus) == 2 and _ready(app) and pane.calculator.result is not None
                    and not screen.dm.backlog_pending())
        await _until(pilot, settled, timeout=60)
        pane._dirty = True
        pane.refresh_now()
        pane.rewrite_log()  # the nodes' lines in time order, whatever order their batches came in
        await pilot.pause()
        log = screen.query_one(RichLog)
        await _until(pilot, lambda: len(log.lines) == len(pane.lines))  # written once it has its size
        log.scroll_end(animate=False, immediate=True)
        screen.refresh_bindings()  # the footer offers "explain" now that there is a prediction
        await pilot.pause()
        await pilot.pause()
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=size, run_before=run_before)
