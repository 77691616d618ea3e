"""The deployment console (issue 15): ``kvtui connect NAME`` on a ``[deployments.NAME]`` opens one
pane — GPU bars grouped by node (16 for the two-node demo), the merged boot's timeline, figures,
findings and hang diagnosis, a merged log with a node column and a node filter, each node's
connection state. Driven with Pilot over the two-node demo preset (real demo backends and monitors),
and one snapshot at 160×48 with the clock fixed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_demo_2node import _hosts
from test_ui_helpers import FakeClock
from textual.pilot import Pilot
from textual.widgets import RichLog, Static

from kvtui.boot import BootStatus
from kvtui.config import parse_config
from kvtui.hosts.demo import DemoBackend
from kvtui.hosts.factory import make_backend
from kvtui.ui.deployment_pane import DeploymentApp, deployment_app
from kvtui.ui.widgets.gpu import GpuBars

SIZE = (160, 48)
SnapCompare = Any


def _app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, stall: int | None = None, hang: float = 180,
         speed: float = 500, clock: FakeClock | None = None) -> DeploymentApp:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cfg = parse_config(_hosts(speed=speed, stall=stall, hang=hang), tmp_path / "hosts.toml")
    if clock is not None:  # the units start at the clock's time (the boot then runs as the clock moves)
        for name in ("r1-a", "r1-b"):
            DemoBackend(name, cfg.host(name), clock=clock).read_unit()
    return deployment_app(cfg, "r1", make_backend, clock=clock)


def _text(app: DeploymentApp, sel: str) -> str:
    return str(app.query_one(sel, Static).render())


def _log(app: DeploymentApp) -> list[str]:
    return [s.text for s in app.query_one(RichLog).lines]


async def _until(pilot: Pilot[Any], pred: Any, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError("condition not met")
        await pilot.pause(0.05)


async def test_the_pane_groups_16_gpus_by_node_and_merges_the_boot_and_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.pane
        await _until(pilot, lambda: app.dm.dep is not None and app.dm.dep.boot.status is BootStatus.READY
                     and all(len(b.samples) == 8 for b in app.query(GpuBars)))
        await _until(pilot, lambda: "up (" in _text(app, "#node-head-1"))
        bars = list(app.query(GpuBars))
        assert len(bars) == 2
        assert sum(len(b.samples) for b in bars) == 16
        assert _text(app, "#node-head-0").startswith("node 0 · r1-a · connected · ready")
        assert _text(app, "#node-head-1").startswith(
            "node 1 · r1-b · connected · up (its ranks serve through node 0 (r1-a))")
        assert "r1 · deployment of 2 nodes · ready · 16 ranks" in _text(app, "#dep-nodes")
        assert "set by: free before weights by node" in _text(app, "#dep-notes")
        lines = _log(app)
        assert any(t.startswith("n0 ") and "fired up and ready" in t for t in lines)
        assert any(t.startswith("n1 ") and " TP15]" in t for t in lines)
        # the node filter: node 0 only, node 1 only, every node again
        await pilot.press("n")
        await pilot.pause()
        assert "log · node 0 · r1-a" in _text(app, "#dep-log-head")
        assert all(t.startswith("n0 ") for t in _log(app))
        await pilot.press("n")
        await pilot.pause()
        only1 = _log(app)
        assert only1
        assert all(t.startswith("n1 ") for t in only1)
        assert not any("fired up" in t for t in only1)
        await pilot.press("n")
        await pilot.pause()
        assert "log · all nodes" in _text(app, "#dep-log-head")
        assert {t[:3] for t in _log(app)} == {"n0 ", "n1 "}
        assert pane.filter is None


async def test_a_stalled_node_is_named_in_the_pane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path, monkeypatch, stall=1, hang=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: "hang:" in _text(app, "#dep-notes"))
        notes = _text(app, "#dep-notes")
        assert "hang: node 1 (r1-b) has not started distributed init" in notes
        assert "node 0 (r1-a) waiting" in notes
        assert "starting at init" in _text(app, "#node-head-0")
        assert "starting at launch" in _text(app, "#node-head-1")


def test_connect_on_a_deployment_opens_the_deployment_console(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtui.commands import connect

    seen: list[str] = []
    monkeypatch.setattr(DeploymentApp, "run", lambda self, *a, **k: seen.append(self.dm.name) or 0)
    (tmp_path / "hosts.toml").write_text(_hosts())
    import argparse

    ns = argparse.Namespace(hosts=str(tmp_path / "hosts.toml"), host=["r1"], readonly=False)
    assert connect.run(ns) == 0
    assert seen == ["r1"]


@pytest.mark.slow
def test_snapshot_two_node_demo_deployment(snap_compare: SnapCompare, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    app = _app(tmp_path, monkeypatch, speed=100, clock=clock)
    clock.advance(30.0)  # both halves ready by then (30 s at ×100)

    async def run_before(pilot: Pilot[Any]) -> None:
        pane = app.pane

        def settled() -> bool:
            for n in app.dm.nodes:
                b = n.monitor.backend
                assert isinstance(b, DemoBackend)
                if b.read_lines(after_cursor=n.monitor.spool.last_cursor, limit=1) or n.monitor.pending:
                    return False
            return len(pane._gpus) == 2 and app.dm.dep is not None \
                and app.dm.dep.boot.status is BootStatus.READY
        await _until(pilot, settled, timeout=60)
        pane._dirty = True
        pane.refresh_now()
        pane.rewrite_log()  # the nodes' lines in time order, whatever order their batches came in
        await pilot.pause()
        log = app.query_one(RichLog)
        await _until(pilot, lambda: len(log.lines) == len(pane.lines))  # written once it has its size
        log.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
