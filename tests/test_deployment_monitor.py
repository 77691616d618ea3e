"""``DeploymentMonitor`` (issue 15, the monitor layer): one HostMonitor per node, the merged boot
published after the batches that change it, per-node connection state and the hang diagnosis;
driven over the two-node demo preset (real demo backends, real monitors)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from test_demo_2node import _hosts

from kvtui.boot import BootStatus
from kvtui.boot.deployment import DeploymentBoot
from kvtui.config import parse_config
from kvtui.hosts.backend import ConnState, LogStart
from kvtui.hosts.factory import make_backend
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode
from kvtui.updates import MonitorUpdate


def _dm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, stall: int | None = None,
        hang: float = 180) -> DeploymentMonitor:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cfg = parse_config(_hosts(stall=stall, hang=hang), tmp_path / "hosts.toml")
    nodes = []
    for name, host in cfg.node_hosts("r1"):
        mon = HostMonitor(name, make_backend(name, host), host=host,
                          options=MonitorOptions(start=LogStart.CURRENT_BOOT, gpu_interval=0.2, log_window=1000))
        nodes.append(DeploymentNode(name, host, mon))
    dep = cfg.deployment("r1")
    assert dep is not None
    return DeploymentMonitor("r1", nodes, bound_s=dep.hang_seconds)


async def test_the_merged_boot_is_published_until_ready_with_each_nodes_updates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dm = _dm(tmp_path, monkeypatch)
    seen: dict[str, int] = {"r1-a": 0, "r1-b": 0}
    merged: list[DeploymentBoot] = []
    ready = asyncio.Event()

    def sink(node: DeploymentNode, updates: Sequence[MonitorUpdate], dep: DeploymentBoot | None) -> None:
        seen[node.name] += len(updates)
        if dep is not None:
            merged.append(dep)
            if dep.boot.status is BootStatus.READY:
                ready.set()

    tasks = dm.start(sink)
    assert len(tasks) == 2
    try:
        async with asyncio.timeout(30):
            await ready.wait()
        states = [n.status.state if n.status is not None else None for n in dm.nodes]
    finally:
        await dm.close()
    assert states == [ConnState.CONNECTED, ConnState.CONNECTED]
    assert seen["r1-a"] > 0
    assert seen["r1-b"] > 0
    last = merged[-1]
    assert [n.name for n in last.nodes] == ["r1-a", "r1-b"]
    assert [n.node_rank for n in last.nodes] == [0, 1]
    assert len(last.boot.ranks) == 16
    assert dm.dep is not None
    assert dm.dep.boot.status is BootStatus.READY
    assert [dm.node_rank(n) for n in dm.nodes] == [0, 1]
    assert all(n.last_line_at is not None for n in dm.nodes)
    assert all(t.done() for t in tasks)


async def test_a_stalled_node_is_named_by_the_monitors_hang_diagnosis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dm = _dm(tmp_path, monkeypatch, stall=1, hang=0.5)
    hung = asyncio.Event()

    def sink(node: DeploymentNode, updates: Sequence[MonitorUpdate], dep: DeploymentBoot | None) -> None:
        if dm.hang() is not None:
            hung.set()

    dm.start(sink)
    try:
        async with asyncio.timeout(30):
            await hung.wait()  # the node monitors' GPU readings keep coming: each is a moment to ask
        hang = dm.hang()
    finally:
        await dm.close()
    assert hang is not None
    assert hang.lagging == (1,)
    assert hang.summary.startswith("node 1 (r1-b) has not started distributed init")


def test_node_stalls_name_each_stalled_node_by_what_it_printed() -> None:
    """``NodeStalls`` (the console's deployment pane and ``wait NAME`` share it): one detector per
    node; a node that prints only vLLM's shm-broadcast wait line is stalled and says so, a node
    whose log moves on is not, a node's new boot restarts its clock."""
    from datetime import datetime

    from kvtui.boot import Boot
    from kvtui.boot.deployment import merge_boots
    from kvtui.engines.events import Engine, Phase
    from kvtui.monitor.deployment import NodeStalls
    from kvtui.updates import BootState, LogBatch, LogLine

    shm = ("(Worker_TP0 pid=9) INFO 03-10 14:0{k}:28 [shm_broadcast.py:542] No available shared memory broadcast "
           "block found in 60 seconds. This typically happens when some processes are hanging.")
    t0 = datetime(2026, 3, 10, 14, 0, 0)
    a = Boot(engine=Engine.VLLM, status=BootStatus.STARTING, phase=Phase.INIT, started_at=t0)
    b = Boot(engine=Engine.VLLM, status=BootStatus.STARTING, phase=Phase.LOAD_WEIGHTS, started_at=t0)
    dep = merge_boots([("h-a", a), ("h-b", b)])

    def line(text: str, seq: int) -> LogBatch:
        return LogBatch([LogLine(seq, text, None, None, 0)])

    stalls = NodeStalls()
    stalls.feed("h-a", [BootState(0, a, new_boot=True), line("Starting vLLM", 0)], 0.0)
    stalls.feed("h-b", [BootState(0, b, new_boot=True), line("Starting vLLM", 0)], 0.0)
    for k in range(1, 5):  # node 0 waits a minute at a time; node 1 loads
        stalls.feed("h-a", [line(shm.format(k=k), k)], 60.0 * k)
        stalls.feed("h-b", [line(f"Loading safetensors checkpoint shards: {k * 20}% Completed", k)], 60.0 * k)
    got = {nb.name: st for nb, st in stalls.stalls(dep, 240.0, 120.0)}
    assert got["h-b"] is None
    st = got["h-a"]
    assert st is not None
    assert st.progress_text() == ("no progress for 4m 00s — it keeps printing 'No available shared memory broadcast "
                                  "block' (4×, nothing else): a rank has not joined (multi-node) or is hung")
    assert all(st is None for _, st in stalls.stalls(dep, 240.0, 300.0))  # not yet past this threshold
    a.status = BootStatus.READY  # once the deployment is ready, a node still "starting" is up, not stalled
    assert merge_boots([("h-a", a), ("h-b", b)]).boot.status is BootStatus.READY
    assert all(st is None for _, st in stalls.stalls(merge_boots([("h-a", a), ("h-b", b)]), 240.0, 120.0))
    a.status = BootStatus.STARTING
    stalls.feed("h-a", [BootState(1, a, new_boot=True)], 250.0)  # a new boot: its clock starts
    assert dict((nb.name, st) for nb, st in stalls.stalls(dep, 260.0, 120.0))["h-a"] is None
