"""``kvtui tune NAME`` on a deployment (issue 23: tune through the one change controller): the
two-node demo (``deepseek-r1-2node``, as tests/test_demo_2node.py configures it). Each step edits
every node's unit, restarts every node and follows the merged boot; the planner learns from node
0's boot; a tune whose last step is not ready rolls every node back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtui.audit import read_entries
from kvtui.cli import main
from kvtui.config import parse_config
from kvtui.flags import get_flag
from kvtui.history import open_store
from kvtui.sim.backend import DemoBackend

HOSTS = ('[hosts.r1-a]\ndemo = true\ndemo_model = "deepseek-r1-2node"\ndemo_speed = 500\n{probe}'
         '[hosts.r1-b]\ndemo = true\ndemo_model = "deepseek-r1-2node"\ndemo_node = 1\ndemo_speed = 500\n'
         '[deployments.r1]\nnodes = ["r1-a", "r1-b"]\n')


def _hosts(tmp_path: Path, probe: str = "") -> Path:
    p = tmp_path / "hosts.toml"
    p.write_text(HOSTS.format(probe=probe))
    return p


def _fractions(hosts: Path) -> list[object]:
    cfg = parse_config(hosts.read_text(), hosts)
    return [get_flag(DemoBackend(n, cfg.host(n)).read_unit(), "unit", "mem-fraction-static") for n in ("r1-a", "r1-b")]


def _restarts(host: str) -> list[dict[str, Any]]:
    with open_store(readonly=True) as store:
        return [r.doc["restart"] for r in store.boots(host, limit=50) if r.doc.get("restart")]


def test_tune_on_a_deployment_edits_and_restarts_every_node(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    hosts = _hosts(tmp_path)
    assert _fractions(hosts) == ["0.88", "0.88"]
    code = main(["--hosts", str(hosts), "tune", "r1", "--goal", "max-tokens", "--yes", "--json", "--max-boots", "2",
                 "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err  # met, or the budget of 2 boots spent: either way on a ready configuration
    result = json.loads(out[out.index("{"):])
    assert result["host"] == "r1"
    steps = result["steps"]
    assert len(steps) == 2
    assert [s["outcome"] for s in steps] == ["ready", "ready"]
    assert all(s["probe"].startswith("answered a 1-token request in ") for s in steps)  # node 0's server
    assert all(s["actual_tokens"] for s in steps)  # node 0's boot taught the planner
    final = f"{steps[-1]['fraction']:g}"
    assert result["final"] == f"{steps[-1]['fraction']:.3f}"
    assert _fractions(hosts) == [final, final]  # every node's unit carries the last step
    assert "the deployment is ready on all 2 nodes" in err
    for node in ("r1-a", "r1-b"):  # each step's boot recorded under each node, with its edit
        edits = [r["edit"] for r in _restarts(node)]
        assert edits[0] == [f"--set mem-fraction-static={final}"]
        assert len(edits) == 2
    tune = read_entries()[-1]
    assert (tune["action"], tune["host"]) == ("tune", "r1")


def test_a_deployment_tune_whose_last_step_fails_rolls_every_node_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = _hosts(tmp_path, probe='probe_model = "no-such-model"\n')  # node 0's server answers 404
    code = main(["--hosts", str(hosts), "tune", "r1", "--goal", "max-tokens", "--yes", "--json", "--max-boots", "2",
                 "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 1, err
    result = json.loads(out[out.index("{"):])
    assert [(s["outcome"], s["failure"]) for s in result["steps"]] == [("failed", "not_serving")] * 2
    assert "rolling back to the last ready configuration" in err
    assert "r1-a restored from " in err
    assert "r1-b restored from " in err
    assert _fractions(hosts) == ["0.88", "0.88"]  # the configuration before the tune, on every node
    assert result["rolled_back"].endswith("ended failed")  # the same wrong model name gets no answer
