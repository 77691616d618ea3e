"""A vLLM boot over Ray shows its nodes everywhere: the text replay's "Nodes" section, the
console's boot figures (node count and which node holds each TP rank, compact at 80×24), and the
history (``kvtui history`` and the history screen read the stored ``nodes`` back).

Facts from reading the real logs (grep of `TP rank` and the `RayWorkerWrapper pid=…, ip=…`
prefixes, before kvtui ran on them): 06 (gpt-oss-120b TP4, vLLM 0.10.1.1): `RayWorkerWrapper
pid=1273` (no ip: the driver's node) is TP rank 0, `pid=345, ip=127.0.0.1` is TP rank 1, and
`pid=343, ip=127.0.0.1` prints no rank line; 30 (Qwen2-7B TP2): pid 1384 (driver's node) TP0,
pid 374 at 127.0.0.1 TP1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from history_support import FIXTURES_DIR, boots_of
from test_ui_helpers import FakeClock, plain, wait_for
from textual.widgets import DataTable

from kvtui import fmt
from kvtui.boot import BootStatus
from kvtui.cli import main
from kvtui.config import Config, HostConfig
from kvtui.history import boot_from_doc, open_store
from kvtui.history import record as rec
from kvtui.monitor import MonitorOptions
from kvtui.ui.app import KvtuiApp
from kvtui.ui.history.screen import HistoryScreen
from kvtui.ui.host_pane import HostSpec
from kvtui.ui.widgets.boot import BootFigures

LOG06 = FIXTURES_DIR / "real" / "06-vllm-gptoss120b-tp4-ray-multinode-ready.log"
LOG30 = FIXTURES_DIR / "real" / "30-vllm-qwen2-7b-tp2-ray-2node-wrapped-ready.log"
HOSTS = '[hosts.ray]\nlocal = true\nlog_file = "/var/log/vllm.log"\n'


def test_the_text_replay_has_a_nodes_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(LOG06)]) == 0
    out = capsys.readouterr().out
    assert "  Nodes (Ray workers by node ip: 2; the driver's node untagged)\n" in out
    assert "    driver's node   TP0      1 worker (pid 1273)\n" in out
    assert "    127.0.0.1       TP1      2 workers (pids 345, 343)\n" in out
    assert main(["replay", str(LOG30)]) == 0
    out = capsys.readouterr().out
    assert "    driver's node   TP0      1 worker (pid 1384)\n" in out
    assert "    127.0.0.1       TP1      1 worker (pid 374)\n" in out
    # a boot without Ray has no such section
    assert main(["replay", str(FIXTURES_DIR / "real" / "vllm-cpu-0.32-ready.log")]) == 0
    assert "Nodes (" not in capsys.readouterr().out


def test_tp_ranks_and_the_compact_line() -> None:
    assert fmt.tp_ranks([]) == "no TP"
    assert fmt.tp_ranks([3, 1, 2, 0]) == "TP0–3"
    assert fmt.tp_ranks([0, 2]) == "TP0,2"
    nodes = [{"ip": None, "processes": ["W pid=1"], "tp_ranks": [0, 1, 2, 3]},
             {"ip": "10.0.0.2", "processes": ["W pid=2 ip=10.0.0.2"], "tp_ranks": [4, 5, 6, 7]}, "junk"]
    assert fmt.ray_nodes_compact(nodes) == "2 nodes: TP0–3 driver · TP4–7 10.0.0.2"
    assert fmt.ray_nodes_compact(None) == ""


def test_the_history_reads_a_ray_boots_nodes_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert main(["--hosts", str(hosts), "replay", str(LOG06), "--record", "ray"]) == 0
    capsys.readouterr()
    assert main(["--hosts", str(hosts), "history", "ray"]) == 0
    out = capsys.readouterr().out
    assert "2 nodes: TP0 driver · TP1 127.0.0.1" in out
    assert main(["--hosts", str(hosts), "history", "ray", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["boots"][0]
    assert doc["nodes"][1]["processes"] == ["RayWorkerWrapper pid=345 ip=127.0.0.1",
                                           "RayWorkerWrapper pid=343 ip=127.0.0.1"]
    assert doc["ray_workers"][1] == ["127.0.0.1", [["RayWorkerWrapper pid=345 ip=127.0.0.1", 1],
                                                   ["RayWorkerWrapper pid=343 ip=127.0.0.1", None]]]
    live = boots_of(LOG06.read_text().splitlines())[0]
    with open_store(readonly=True) as store:
        stored = store.boots("ray")[0].doc
    back = boot_from_doc(stored)
    assert back.nodes == live.nodes
    assert back.nodes_json() == live.nodes_json()
    # a document stored before ``ray_workers``: each node's ranks go to its first workers
    older = {k: v for k, v in stored.items() if k != "ray_workers"}
    assert rec.ray_workers(older) == {"": {"RayWorkerWrapper pid=1273": 0},
                                      "127.0.0.1": {"RayWorkerWrapper pid=345 ip=127.0.0.1": 1,
                                                    "RayWorkerWrapper pid=343 ip=127.0.0.1": None}}
    assert rec.nodes_note(older) == "2 nodes: TP0 driver · TP1 127.0.0.1"
    assert rec.nodes_note({"nodes": None}) == ""


async def test_the_console_shows_the_nodes_at_80x24(tmp_path: Path) -> None:
    """A local host following the real Ray log: the boot figures (compact at 80×24) name the node
    count and the node of each TP rank."""
    log = tmp_path / "vllm.log"
    log.write_bytes(LOG06.read_bytes())
    clock = FakeClock()
    from kvtui.hosts.factory import make_backend

    app = KvtuiApp([HostSpec("ray", HostConfig(local=True, log_file=str(log)))],
                   backend_factory=lambda name, host: make_backend(name, host, clock=clock),
                   config=Config(), clock=clock,
                   monitor_options=MonitorOptions(gpu_interval=0.05, flush_interval=0.05))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.main_screen.active_pane
        assert pane is not None
        await wait_for(pilot, lambda: pane.boot is not None and pane.boot.status is BootStatus.READY
                       and len(pane.boot.nodes) == 2, timeout=30)
        figures = pane.query_one(BootFigures)
        await wait_for(pilot, lambda: "TP1" in plain(figures), timeout=10)
        text = plain(figures)
        assert figures.compact, text  # 24 rows: the figures are the compact lines
        assert "Ray 2 nodes" in text
        assert "TP0 driver" in text
        assert "TP1 127.0.0.1" in text
        assert all(len(line) <= figures.size.width for line in text.splitlines())

        # the console recorded the boot: its history view names the nodes beside it (H)
        def stored() -> int:
            with open_store(readonly=True) as store:
                return store.count("ray")

        await wait_for(pilot, lambda: stored() == 1, timeout=20)
        await pilot.press("H")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen) and bool(app.screen.rows), timeout=20)
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 1, timeout=10)
        assert str(table.get_row_at(0)[-1]) == "2 nodes: TP0 driver · TP1 127.0.0.1"


def test_the_diff_names_changed_ray_nodes() -> None:
    from kvtui.history import diff as hdiff

    boot = rec.boot_doc("ray", boots_of(LOG06.read_text().splitlines())[0])
    moved = dict(boot, nodes=[{"ip": None, "processes": ["W pid=1"], "tp_ranks": [0, 1]},
                              {"ip": "10.0.0.3", "processes": ["W pid=2 ip=10.0.0.3"], "tp_ranks": [2, 3]}])
    d = hdiff.diff(boot, moved)
    assert ("Ray nodes: 2 nodes: TP0 driver · TP1 127.0.0.1 → 2 nodes: TP0,1 driver · TP2,3 10.0.0.3"
            in hdiff.render(d))
    assert hdiff.diff(boot, boot).nodes is None
