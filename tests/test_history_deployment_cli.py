"""A deployment's boots are recorded by every reader and ``kvtui history NAME`` takes a deployment
(issues 13/15): ``kvtui wait NAME`` and ``kvtui apply NAME --restart`` record each node's boot
under its host name (as the deployment console does); ``history NAME`` lists the deployment's
starts (one row per start, its nodes' states), ``--json``, ``--diff`` node by node. On the real
two-node demo (``deepseek-r1-2node``: node 0 prints ready, node 1 prints nothing after its capture,
so node 1 of a ready start is "up")."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_demo_2node import _hosts

from kvtui.cli import main
from kvtui.history import BootRecorder, open_store
from kvtui.monitor.deployment import DeploymentNode, unwritten


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(_hosts())
    return path


def _kvtui(hosts: Path, *argv: str) -> int:
    return main(["--hosts", str(hosts), *argv])


def _boots(host: str) -> list[Any]:
    with open_store(readonly=True) as store:
        return store.boots(host, limit=50)


def test_wait_records_both_nodes_and_history_lists_the_start(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _kvtui(hosts, "wait", "r1", "--timeout", "60") == 0
    capsys.readouterr()
    a, b = _boots("r1-a"), _boots("r1-b")
    assert [r.doc["status"] for r in a] == ["ready"]
    assert len(b) == 1  # node 1's boot: its log ends at its capture (its ranks serve through node 0)
    assert b[0].doc["status"] == "starting"

    assert _kvtui(hosts, "history", "r1") == 0
    out, _err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["start", "boots", "started", "outcome", "nodes", "tokens", "to", "ready", "fraction"]
    assert len(lines) == 2, out
    row = lines[1]
    assert row.startswith(f"1      #{a[0].id} · #{b[0].id}")
    assert "ready" in row
    assert "n0 ready · n1 up" in row
    assert row.rstrip().endswith("0.88")

    assert _kvtui(hosts, "history", "r1", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["deployment"] == "r1"
    assert doc["nodes"] == ["r1-a", "r1-b"]
    [start] = doc["starts"]
    assert start["status"] == "ready"
    assert start["nodes_text"] == "n0 ready · n1 up"
    assert [bt["id"] for bt in start["boots"]] == [a[0].id, b[0].id]
    assert [bt["host"] for bt in start["boots"]] == ["r1-a", "r1-b"]

    # one start only: nothing to compare it with (said, exit 3)
    assert _kvtui(hosts, "history", "r1", "--diff") == 3
    assert "is the oldest remembered: nothing to compare it with" in capsys.readouterr().err


def test_record_false_keeps_the_wait_out_of_the_history(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts.write_text(_hosts() + "[history]\nrecord = false\n")
    assert _kvtui(hosts, "wait", "r1", "--timeout", "60") == 0
    assert _boots("r1-a") == []
    assert _boots("r1-b") == []
    capsys.readouterr()
    assert _kvtui(hosts, "history", "r1") == 0
    assert "no boot of r1's nodes (r1-a, r1-b) in the history" in capsys.readouterr().err


def test_apply_restart_records_each_node_and_diff_is_node_by_node(
        hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _kvtui(hosts, "wait", "r1", "--timeout", "60") == 0
    assert _kvtui(hosts, "apply", "r1", "--set", "mem-fraction-static=0.84", "--restart", "--yes",
                  "--timeout", "60") == 0
    err = capsys.readouterr().err
    assert "not in the history" not in err
    a, b = _boots("r1-a"), _boots("r1-b")
    assert len(a) == 2
    assert len(b) == 2
    for newest in (a[0], b[0]):  # the change is on each node's boot: the edit and the outcome
        r = newest.doc["restart"]
        assert r["action"] == "apply"
        assert r["edit"] == ["--set mem-fraction-static=0.84"]
        assert r["outcome"] == "ready"
        assert r["exit"] == 0
    assert a[0].doc["status"] == "ready"

    assert _kvtui(hosts, "history", "r1") == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["1", "2"]
    assert f"#{a[0].id} · #{b[0].id}" in rows[0]
    assert rows[0].rstrip().endswith("0.84")
    assert f"#{a[1].id} · #{b[1].id}" in rows[1]
    assert rows[1].rstrip().endswith("0.88")

    assert _kvtui(hosts, "history", "r1", "--diff") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"start #{a[0].id} · #{b[0].id} compared with start #{a[1].id} · #{b[1].id} "
                          "(ready ← ready)")
    n0, n1 = out.index("== node 0 (r1-a) =="), out.index("== node 1 (r1-b) ==")
    assert n0 < n1
    assert "mem_fraction_static: 0.88 → 0.84" in out[n0:n1]
    assert "mem_fraction_static: 0.88 → 0.84" in out[n1:]

    assert _kvtui(hosts, "history", "r1", "--diff", "2", "1", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["start"] == f"#{a[1].id} · #{b[1].id}"
    assert doc["base"] == f"#{a[0].id} · #{b[0].id}"
    assert [n["node"] for n in doc["nodes"]] == ["r1-a", "r1-b"]
    assert all(n["diff"] is not None for n in doc["nodes"])

    assert _kvtui(hosts, "history", "r1", "--diff", "3") == 3
    assert "r1 has no start 3: a deployment's starts are numbered 1 (the newest) to 2" in capsys.readouterr().err


def test_a_boot_the_recorder_could_not_write_is_said(tmp_path: Path) -> None:
    rec = BootRecorder("r1-b", tmp_path / "h.sqlite3")
    rec.unwritten = 2
    rec.problem = "history: h.sqlite3 stayed locked by another kvtui"
    node = DeploymentNode("r1-b", SimpleNamespace(), SimpleNamespace(history=rec))  # type: ignore[arg-type]
    clean = DeploymentNode("r1-a", SimpleNamespace(), SimpleNamespace(history=None))  # type: ignore[arg-type]
    assert unwritten([clean, node]) == [
        "r1-b: 2 boots not written to the history (history: h.sqlite3 stayed locked by another kvtui)"]
