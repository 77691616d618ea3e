"""Issue 23: a host is a deployment of one node. The same scenario (``apply --set … --restart``,
the new boot ready, ``wait`` on it, then ``rollback --restart``) runs on a demo host and on a ``[deployments.NAME]``
of one demo node, through the one change controller (``kvtui.changes``) and the one ``apply``
command; the results are compared: the exit codes, the file edited (before, after the apply, after
the rollback) and the history's records of the restarts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from one_node_support import HOSTS

from kvtui.audit import read_entries
from kvtui.cli import main
from kvtui.config import parse_config
from kvtui.flags import get_flag
from kvtui.history import open_store
from kvtui.sim.backend import DemoBackend

# what a restart's record says about the change (the backup's and the file's paths differ by host)
KEYS = ("action", "edit", "outcome", "exit", "rolled_back", "forced")


def _unit(hosts: Path, host: str) -> str:
    cfg = parse_config(hosts.read_text(), hosts)
    return DemoBackend(host, cfg.host(host)).read_unit()


def _records(host: str) -> list[dict[str, Any]]:
    """The host's stored boots, newest first: status, the restart part's KEYS, the fraction."""
    with open_store(readonly=True) as store:
        rows = store.boots(host, limit=50)
    out: list[dict[str, Any]] = []
    for row in rows:
        r = row.doc.get("restart") or {}
        out.append({"status": row.doc.get("status"), **{k: r.get(k) for k in KEYS},
                    "has_backup": bool(r.get("backup")), "file": Path(str(r.get("file"))).name if r else None})
    return out


def _scenario(hosts: Path, name: str, node: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    run = ["--hosts", str(hosts)]
    before = _unit(hosts, node)
    applied = main([*run, "apply", name, "--set", "mem-fraction-static=0.84", "--restart", "--yes",
                    "--timeout", "60"])
    err = capsys.readouterr().err
    assert "not in the history" not in err
    after = _unit(hosts, node)
    waited = main([*run, "wait", name, "--timeout", "60"])  # the new boot, as `wait` sees it
    capsys.readouterr()
    rolled = main([*run, "rollback", name, "--restart", "--yes", "--timeout", "60"])
    capsys.readouterr()
    back = _unit(hosts, node)
    return {
        "codes": (applied, waited, rolled),
        "fraction": [get_flag(t, "unit", "mem-fraction-static") for t in (before, after, back)],
        "restored": back == before,
        "diff": [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b],
        "records": _records(node),
    }


def test_the_same_change_on_a_host_and_on_a_one_node_deployment_ends_the_same(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    cfg = parse_config(HOSTS, hosts)
    dep = cfg.deployment("dep1")
    assert dep is not None  # a deployment of one node is a valid inventory
    assert dep.nodes == ["one"]

    host = _scenario(hosts, "solo", "solo", capsys)
    one = _scenario(hosts, "dep1", "one", capsys)

    assert host["codes"] == (0, 0, 0)
    assert host["fraction"] == ["0.85", "0.84", "0.85"]
    assert host["restored"]
    assert host["diff"] == [("    --mem-fraction-static 0.85 \\", "    --mem-fraction-static 0.84 \\")]
    recs = host["records"]
    assert [r["action"] for r in recs[:2]] == ["rollback", "apply"]
    assert recs[1]["edit"] == ["--set mem-fraction-static=0.84"]
    assert all(r["status"] == "ready" and r["outcome"] == "ready" and r["exit"] == 0 for r in recs[:2])
    # the one-node deployment: the same codes, the same file edited the same way, the same records
    assert one == host


def _tune(hosts: Path, name: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, dict[str, Any], str]:
    """``kvtui tune NAME`` of one boot: the exit code, the plan's first line, the result, the audited host."""
    code = main(["--hosts", str(hosts), "tune", name, "--goal", "max-tokens", "--yes", "--json", "--max-boots", "1",
                 "--timeout", "60"])
    out = capsys.readouterr().out
    plan, _, js = out.partition("{")
    return code, plan.splitlines()[0], json.loads("{" + js), str(read_entries()[-1]["host"])


def test_a_one_node_deployment_tunes_as_its_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``kvtui tune dep1`` (one node, ``one``) is ``kvtui tune one``: the run's name — its plan's,
    its result's, its audit entry's, the history it reads — is the host's, as ``kvtui tune solo``'s is."""
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    code, head, result, audited = _tune(hosts, "solo", capsys)
    assert code in (0, 1)  # met, or its budget of one boot spent
    assert (head.split(":")[0], result["host"], audited) == ("kvtui tune solo", "solo", "solo")
    one = _tune(hosts, "dep1", capsys)
    assert (one[0], one[1].split(":")[0], one[2]["host"], one[3]) == (code, "kvtui tune one", "one", "one")
    assert [s["outcome"] for s in one[2]["steps"]] == [s["outcome"] for s in result["steps"]]
