"""The two-node demo preset ``deepseek-r1-2node`` (issue 15): two simulated hosts, each printing its
node's half of a TP16 SGLang boot (``--nnodes 2``), and ``demo_stall_node`` (the node that never
reaches distributed init). Facts written from the preset before running: node 0 holds TP0-TP7, serves
HTTP and prints ready; node 1 holds TP8-TP15 and prints nothing after its capture; with node 1
stalled, node 1 prints only its arguments and node 0's ranks begin distributed init and wait."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvtui.cli import main
from kvtui.config import ConfigError, parse_config
from kvtui.hosts.demo import DemoBackend
from kvtui.hosts.demo_models import PRESETS


def _hosts(speed: float = 500, stall: int | None = None, hang: float = 180) -> str:
    st = f"demo_stall_node = {stall}\n" if stall is not None else ""
    return (f'[hosts.r1-a]\ndemo = true\ndemo_model = "deepseek-r1-2node"\ndemo_speed = {speed}\n{st}'
            f'[hosts.r1-b]\ndemo = true\ndemo_model = "deepseek-r1-2node"\ndemo_node = 1\ndemo_speed = {speed}\n{st}'
            f'[deployments.r1]\nnodes = ["r1-a", "r1-b"]\nhang_seconds = {hang}\n')


class Clock:
    def __init__(self) -> None:
        self.t = 1_780_000_000.0

    def __call__(self) -> float:
        return self.t


def _nodes(tmp_path: Path, stall: int | None = None) -> tuple[DemoBackend, DemoBackend, Clock]:
    cfg = parse_config(_hosts(stall=stall), tmp_path / "hosts.toml")
    clock = Clock()
    a, b = (DemoBackend(n, cfg.host(n), clock=clock, state_dir=tmp_path / n) for n in ("r1-a", "r1-b"))
    a.read_lines(), b.read_lines()  # the units start now (the state is made on the first read)
    return a, b, clock


def _text(b: DemoBackend) -> str:
    return "\n".join(r.text for r in b.read_lines(limit=100_000))


def test_each_host_prints_its_nodes_half_of_the_tp16_boot(tmp_path: Path) -> None:
    a, b, clock = _nodes(tmp_path)
    assert "--node-rank 0" in a.unit_path.read_text()
    assert "--node-rank 1" in b.unit_path.read_text()
    clock.t += 3600
    t0, t1 = _text(a), _text(b)
    ranks0 = set(re.findall(r" TP(\d+)\]", t0))
    ranks1 = set(re.findall(r" TP(\d+)\]", t1))
    assert ranks0 == {str(r) for r in range(8)}
    assert ranks1 == {str(r) for r in range(8, 16)}
    assert "nnodes=2, node_rank=0, dist_init_addr='10.0.0.1:5000'" in t0
    assert "nnodes=2, node_rank=1" in t1
    assert "fired up and ready" in t0
    assert "fired up and ready" not in t1
    assert "Uvicorn running" not in t1
    assert "Decode batch" not in t1
    assert t1.count("Capture cuda graph end") == 8
    # the single-host presets dump no multi-node arguments
    assert "nnodes" not in "\n".join(PRESETS["kimi-k2.6"].flags)


def test_the_stalled_node_prints_its_arguments_only_and_the_other_waits_at_init(tmp_path: Path) -> None:
    a, b, clock = _nodes(tmp_path, stall=1)
    clock.t += 3600
    t0, t1 = _text(a), _text(b)
    assert "server_args=ServerArgs(" in t1
    assert "Init torch distributed" not in t1
    assert t0.count("Init torch distributed begin.") == 8
    assert "Init torch distributed ends" not in t0
    assert "Load weight begin" not in t0
    assert a.samples_at(clock.t)[0].used_mib > 500  # node 0's ranks hold their CUDA contexts while waiting


def test_wait_on_the_two_node_demo_is_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "hosts.toml").write_text(_hosts())
    assert main(["--hosts", str(tmp_path / "hosts.toml"), "wait", "r1", "--timeout", "60"]) == 0
    cap = capsys.readouterr()
    assert "r1: ready on all 2 nodes" in cap.err
    assert "READY · 16 ranks (TP0 … TP15)" in cap.out


def test_wait_on_the_stalled_two_node_demo_names_the_node_and_exits_5(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "hosts.toml").write_text(_hosts(stall=1, hang=1))
    assert main(["--hosts", str(tmp_path / "hosts.toml"), "wait", "r1", "--timeout", "4"]) == 5
    cap = capsys.readouterr()
    both = cap.out + cap.err
    assert "hang: node 1 (r1-b) has not started distributed init" in both
    assert "node 0 (r1-a) waiting" in both


@pytest.mark.parametrize(("extra", "expected"), [
    ('[hosts.x]\ndemo = true\ndemo_node = 1\n',
     "demo_node = 1: only for a multi-node demo_model (deepseek-r1-2node); kimi-k2.6 runs on one host"),
    ('[hosts.x]\ndemo = true\ndemo_model = "deepseek-r1-2node"\ndemo_stall_node = 2\n',
     "demo_stall_node = 2: expected a node of deepseek-r1-2node: 0-1"),
    ('[hosts.x]\nssh = "root@a.example"\nunit = "s"\ndemo_stall_node = 1\n', "demo_stall_node"),
])
def test_the_node_keys_are_checked(tmp_path: Path, extra: str, expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(extra, tmp_path / "hosts.toml")
    assert expected in str(exc.value)


def test_a_demo_deployment_whose_nodes_disagree_is_refused(tmp_path: Path) -> None:
    text = _hosts(stall=1).replace("demo_node = 1\n", "").replace("demo_stall_node = 1\n", "", 1)
    with pytest.raises(ConfigError) as exc:
        parse_config(text, tmp_path / "hosts.toml")
    msg = str(exc.value)
    assert "'r1-b' is node 1 here but its demo_node is 0: expected demo_node = 1 on [hosts.r1-b]" in msg
    assert "disagree on demo_stall_node (r1-a None, r1-b 1)" in msg


def test_node_1_restarted_after_its_capture_is_read_on_into_its_next_boot(tmp_path: Path) -> None:
    """Node 1 serves no lines after its capture; stopped there (a restart of the deployment), its
    view was as long as the serving lines it never printed and a reader stopped at its end for good:
    the node's next boot was never read (the console's monitor and the restart follower missed it)."""
    _a, b, clock = _nodes(tmp_path)
    clock.t += 3600  # long after node 1's capture: its boot is "up", printing nothing
    first = b.read_lines(limit=100_000)
    assert first
    assert "Capture cuda graph end" in first[-1].text
    b.restart()
    clock.t += 3600
    after = b.read_lines(after_cursor=first[-1].cursor, limit=100_000)
    texts = [r.text for r in after]
    assert any(t.startswith("Stopping ") for t in texts)  # the old boot's stop …
    assert sum("server_args=ServerArgs(" in t for t in texts) == 1  # … and the next boot, read on
    assert texts[-1].startswith("[")
    assert "Capture cuda graph end" in texts[-1]
