"""Issue 23, item 1: one ``wait``. ``kvtui wait NAME`` builds the nodes' monitors once and runs one
loop (``kvtui.commands.wait.follow``) over a ``DeploymentMonitor`` for a host (a deployment of one
node) and for a ``[deployments.NAME]``; ``wait --serving`` on a deployment reads its first serving
sample through the wait's own node monitors (no second set opened after the wait)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from one_node_support import HOSTS
from test_demo_2node import _hosts

from kvtui.cli import main
from kvtui.monitor import HostMonitor
from kvtui.monitor.deployment import DeploymentMonitor
from kvtui.sim.backend import DemoBackend


def test_a_host_and_a_deployment_wait_through_the_same_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(HOSTS)
    started: list[tuple[str, list[str]]] = []
    start = DeploymentMonitor.start

    def seen(self: DeploymentMonitor, sink: Callable[..., None]) -> Any:
        started.append((self.name, [n.name for n in self.nodes]))
        return start(self, sink)

    monkeypatch.setattr(DeploymentMonitor, "start", seen)
    assert main(["--hosts", str(path), "wait", "solo", "--timeout", "60"]) == 0
    out, err = capsys.readouterr()
    assert "kvtui wait: solo: boot " in err, err
    assert " is ready" in err, err
    assert out.startswith("Boot ")  # the host's own boot, as before
    assert main(["--hosts", str(path), "wait", "dep1", "--timeout", "60"]) == 0
    out, err = capsys.readouterr()
    assert "kvtui wait: dep1: boot " in err, err  # one decider: a deployment of one node waits as a host
    assert " is ready" in err, err
    assert out.startswith("Boot ")
    assert started == [("solo", ["solo"]), ("dep1", ["one"])]  # a host: a deployment of one node


def test_wait_serving_on_a_deployment_opens_its_nodes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(_hosts(speed=500))
    opened: list[str] = []
    init = HostMonitor.__init__

    def counted(self: HostMonitor, name: str, *a: Any, **kw: Any) -> None:
        opened.append(name)
        init(self, name, *a, **kw)

    monkeypatch.setattr(HostMonitor, "__init__", counted)
    code = main(["wait", "r1", "--hosts", str(path), "--serving", "--json", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["serving"]["samples"] == 1
    assert doc["serving"]["deployment"] == "r1"
    assert opened == ["r1-a", "r1-b"]  # the wait's monitors read the sample too


def _volatile(doc: Any) -> Any:
    """The boot's JSON without what differs between two runs of one scenario: times, durations,
    its boot key, its history number."""
    if isinstance(doc, dict):
        return {k: _volatile(v) for k, v in doc.items()
                if k not in ("boot", "boot_key", "started_at", "ended_at", "start", "end", "seconds", "first_line",
                             "last_line")}
    if isinstance(doc, list):
        return [_volatile(v) for v in doc]
    return doc


def test_a_host_and_a_one_node_deployment_give_the_same_json(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """One decider for every N: ``wait dep1 --json`` (a deployment of one node) prints the same boot
    object as ``wait solo --json`` (a host): its number and key in the history, the probe, no
    per-node part (main printed the merged boot's ``nodes``/``figure_nodes`` and no number)."""
    path = tmp_path / "hosts.toml"
    path.write_text(HOSTS)
    docs = []
    for name in ("solo", "dep1"):
        assert main(["--hosts", str(path), "wait", name, "--json", "--timeout", "60"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    host, one = docs
    assert list(one) == list(host)
    assert isinstance(one["boot"], int)  # numbered by the history
    assert isinstance(host["boot"], int)
    assert "nodes" not in one
    assert one.pop("probe")["ok"]  # ready proved by the probe on both
    assert host.pop("probe")["ok"]
    assert _volatile(one) == _volatile(host)


def test_a_deployment_whose_node_0_does_not_serve_fails_as_a_host_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One ready proof for every N: once the merged boot is ready, node 0's server (the one serving
    HTTP; the probe settings of node 0's host) is asked for one token. Here it does not serve the
    model asked for (404): the wait ends as a host's does, exit 1, kind ``not_serving``, on node 0
    (main took the log's word for a deployment: exit 0, no probe)."""
    path = tmp_path / "hosts.toml"
    path.write_text(_hosts(speed=500).replace("[hosts.r1-a]\n", '[hosts.r1-a]\nprobe_model = "no-such-model"\n', 1))
    code = main(["--hosts", str(path), "wait", "r1", "--json", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "kvtui wait: r1: the log says ready; asking node 0's server (r1-a) on port " in err
    assert "kvtui wait: r1: failed on node 0 (r1-a) in ready: not_serving: " in err
    assert "ready on all 2 nodes" not in err
    doc = json.loads(out)
    assert doc["status"] == "failed"
    assert doc["failure"]["kind"] == "not_serving"
    assert doc["failed_node"] == 0
    assert doc["nodes"][0]["status"] == "failed"
    assert doc["probe"]["ok"] is False
    # the same 404 on a host: the same exit code
    path.write_text(HOSTS.replace("[hosts.solo]\n", '[hosts.solo]\nprobe_model = "no-such-model"\n', 1))
    assert main(["--hosts", str(path), "wait", "solo", "--timeout", "60"]) == code
    capsys.readouterr()


def _keys(doc: Any) -> Any:
    """``doc``'s keys, nested (the load moves the figures, and whether some are known yet)."""
    return {k: _keys(v) for k, v in doc.items()} if isinstance(doc, dict) else None


@pytest.mark.parametrize("metrics", [True, False])
def test_a_host_and_a_one_node_deployment_give_the_same_serving_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], metrics: bool) -> None:
    """One reader for ``wait --serving`` at every N (``DeploymentServingReader``; one node: its
    ``ServingReader``): a host and a one-node deployment give the same sample apart from names,
    from /metrics and from the log's serving lines; two nodes' is the same object with its
    ``deployment``, after the same probe."""
    monkeypatch.setattr(DemoBackend, "serve_metrics", metrics)
    path = tmp_path / "hosts.toml"
    path.write_text(HOSTS)
    docs, errs = [], []
    for name in ("solo", "dep1"):
        assert main(["--hosts", str(path), "wait", name, "--serving", "--json", "--timeout", "60"]) == 0
        out, err = capsys.readouterr()
        docs.append(json.loads(out)["serving"])
        errs.append(err)
    host, one = docs
    assert "deployment" not in one
    assert host["source"] == one["source"] == ("metrics" if metrics else "log")
    assert host["host"] == "solo"
    assert one["host"] == "dep1"  # the name the wait was given, as a host's
    assert _keys(one) == _keys(host)
    stable = ("source", "engine", "dialect", "pool_tokens", "metrics_error", "samples")
    assert ({k: str(one[k]).replace(" on one ", " on NODE ") for k in stable}
            == {k: str(host[k]).replace(" on solo ", " on NODE ") for k in stable})
    assert one["diagnosis"]["limit"] == host["diagnosis"]["limit"]
    for name, err in zip(("solo", "dep1"), errs, strict=True):
        assert f"kvtui wait: {name}: reading a first serving sample" in err
        assert f"kvtui wait: {name}: serving: " in err
    if metrics:  # several nodes: proved by node 0's probe, then the same sample, with its deployment and node
        path.write_text(_hosts(speed=500))
        assert main(["--hosts", str(path), "wait", "r1", "--serving", "--json", "--timeout", "120"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["probe"]["ok"]  # (main: a deployment's ready was the log's word)
        two = doc["serving"]
        assert (two.pop("deployment"), two["host"]) == ("r1", "r1-a")
        assert _keys(two) == _keys(host)
