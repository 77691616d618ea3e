"""``kvtui watch NAME`` and ``kvtui wait NAME --serving`` on a ``[deployments.NAME]`` (issue 24): the
``/metrics`` of the node that serves HTTP (node 0, the head), else the log's serving lines of the
nodes; the JSON is ``kvtui watch HOST --json``'s plus ``"deployment"``, its ``host`` the node the
sample came from. On the two-node demo (``deepseek-r1-2node``): node 0 (r1-a) serves HTTP and prints
the ``Decode batch`` lines; node 1 (r1-b) prints nothing after its graph capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_demo_2node import _hosts
from test_serving_watch import FIELDS

from kvtui.cli import main
from kvtui.sim.backend import DemoBackend


@pytest.fixture
def hosts(tmp_path: Path) -> str:
    path = tmp_path / "hosts.toml"
    path.write_text(_hosts(speed=500))
    return str(path)


def test_watch_a_deployment_reads_node_0s_metrics(hosts: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["watch", "r1", "--hosts", hosts, "--json", "--count", "3", "--interval", "0.3", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert len(docs) == 3
    for d in docs:
        assert d.keys() >= FIELDS | {"deployment"}
        assert d["deployment"] == "r1"
        assert d["host"] == "r1-a"  # node 0: the one that serves HTTP
        assert d["source"] == "metrics"
        assert d["engine"] == "sglang"
        assert d["metrics_error"] is None
        assert d["pool_tokens"] == 660_181  # node 0's pool, as its boot printed it
        assert 0.0 <= d["kv_usage"] <= 1.0
    assert [d["samples"] for d in docs] == [1, 2, 3]
    assert "r1 (2 nodes: r1-a, r1-b): waiting for a ready server" in err
    assert "kvtui watch: r1: reading the server's /metrics of r1-a" in err
    assert "is a deployment" not in err
    # the figures go into node 0's history record (the node that serves)
    assert "serving figures recorded in the history (boot #1; kvtui history r1-a --diff)" in err


def test_watch_a_deployment_falls_back_to_the_nodes_logs(hosts: str, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DemoBackend, "serve_metrics", False)  # SGLang without --enable-metrics
    code = main(["watch", "r1", "--hosts", hosts, "--json", "--count", "2", "--interval", "0.3", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert len(docs) == 2
    for d in docs:
        assert d["deployment"] == "r1"
        assert d["source"] == "log"
        assert d["dialect"] == "sglang-log"
        assert d["host"] == "r1-a"  # node 1 prints no serving line: node 0's log stands in
        assert "GET http://127.0.0.1:30000/metrics on r1-a answered 404" in d["metrics_error"]
        assert d["running"] is not None
        assert d["pool_tokens"] == 660_181  # node 0's boot's pool (its serving lines print the usage only)
    assert "reading the log's serving lines of r1-a instead" in err
    # the human lines
    code = main(["watch", "r1", "--hosts", hosts, "--count", "1", "--interval", "0.3", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.split()[1] == "log"
    assert "KV " in out


def test_wait_serving_on_a_deployment(hosts: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["wait", "r1", "--hosts", hosts, "--serving", "--json", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "ready"
    assert [n["name"] for n in doc["nodes"]] == ["r1-a", "r1-b"]  # the deployment's wait, as without --serving
    serving = doc["serving"]
    assert serving["deployment"] == "r1"
    assert serving["host"] == "r1-a"
    assert serving["source"] == "metrics"
    assert serving["samples"] == 1
    assert serving["pool_tokens"] == 660_181
    assert "ready on all 2 nodes" in err
    assert "kvtui wait: r1: reading a first serving sample" in err
    assert "kvtui wait: r1: serving: " in err
    assert "not for a deployment" not in err
    # human output: the merged boot on stdout, the sample on stderr; the log when metrics are off
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DemoBackend, "serve_metrics", False)
        code = main(["wait", "r1", "--hosts", hosts, "--serving", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "READY · 16 ranks" in out
    assert "answered 404" in err
    assert "from the log's serving lines of r1-a" in err
    assert " log " in err.split("serving: ", 1)[1]


def test_wait_serving_on_a_deployment_that_never_gets_ready_times_out(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(_hosts(speed=500, stall=1))  # node 1 never reaches distributed init
    code = main(["wait", "r1", "--hosts", str(path), "--serving", "--json", "--timeout", "3"])
    out, err = capsys.readouterr()
    assert code == 5, err
    assert "reading a first serving sample" not in err
    doc = json.loads(out)
    assert "serving" not in doc


# -- which node's log stands in ---------------------------------------------------------------------


class _Monitor:
    """What a ``ServingReader`` and the deployment monitor read of a node's ``HostMonitor``: no boot
    yet (the merged boot names no port, so no /metrics is asked for)."""

    def __init__(self, name: str) -> None:
        from types import SimpleNamespace

        self.name = name
        self.on_parsed: object = None
        self.tracker = SimpleNamespace(boots=[])
        self.reader = SimpleNamespace(engine=None)
        self.backend = object()


async def test_the_log_of_the_first_node_that_prints_serving_lines_stands_in_and_stays() -> None:
    from typing import cast

    from kvtui.config import HostConfig
    from kvtui.engines.events import Engine
    from kvtui.monitor import HostMonitor
    from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode
    from kvtui.serving.sample import ServingSample
    from kvtui.serving_live import DeploymentServingReader

    nodes = [DeploymentNode(n, HostConfig(demo=True), cast(HostMonitor, _Monitor(n))) for n in ("n0", "n1", "n2")]
    reader = DeploymentServingReader(DeploymentMonitor("d", nodes))

    def line(node: str, at: float, retracted: float) -> None:
        s = ServingSample(engine=Engine.SGLANG, at=at, source="log", kv_usage=0.97, running=8, waiting=3,
                          retractions_total=retracted, dialect="sglang-log")
        reader.readers[node]._pending.append(s)

    assert await reader.read_current() is None  # nothing in any log yet
    assert reader.metrics_error == "the boot's arguments name no port: its /metrics cannot be found"
    line("n1", 10.0, 0.0)  # node 0 prints no serving line (its scheduler's rank is on node 1)
    line("n1", 20.0, 4.0)
    got = await reader.read_current()
    assert got is not None
    assert got.at == 20.0
    assert reader.node == "n1"
    assert reader.source == "log"
    line("n0", 30.0, 99.0)  # another node's counters are not mixed in: n1's log stays the one read
    line("n1", 30.0, 6.0)
    got = await reader.read_current()
    assert got is not None
    assert got.retractions_total == 6.0
    assert reader.node == "n1"
    assert reader.window.increase("retractions") == 6.0
