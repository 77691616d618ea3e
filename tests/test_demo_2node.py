"""The two-node demo preset ``deepseek-r1-2node`` (issue 15): two simulated hosts, each printing its
node's half of a TP16 SGLang boot (``--nnodes 2``), and ``demo_stall_node`` (the node that never
reaches distributed init). Facts written from the preset before running: node 0 holds TP0-TP7, serves
HTTP and prints ready; node 1 holds TP8-TP15 and prints nothing after its capture; with node 1
stalled, node 1 prints only its arguments and node 0's ranks begin distributed init and wait."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvtui.cli import main
from kvtui.config import ConfigError, parse_config
from kvtui.sim.backend import DemoBackend
from kvtui.sim.presets import PRESETS


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
    a, b, clock = _nodes(tmp_path)
    clock.t += 3600  # long after node 1's capture: its boot is "up", printing nothing
    first = b.read_lines(limit=100_000)
    assert first
    assert "Capture cuda graph end" in first[-1].text
    a.restart()  # the deployment restarts: node 0 first, node 1 right after
    b.restart()
    clock.t += 3600
    after = b.read_lines(after_cursor=first[-1].cursor, limit=100_000)
    texts = [r.text for r in after]
    assert any(t.startswith("Stopping ") for t in texts)  # the old boot's stop …
    assert sum("server_args=ServerArgs(" in t for t in texts) == 1  # … and the next boot, read on
    assert texts[-1].startswith("[")
    assert "Capture cuda graph end" in texts[-1]


def test_node_0_waits_at_distributed_init_until_node_1_arrives(tmp_path: Path) -> None:
    """Node 0 alone gets no further than "Init torch distributed begin." (its ranks holding their
    contexts); once node 1 starts, both end distributed init together, after node 1's ranks began
    it, and go on to their graphs."""
    cfg = parse_config(_hosts(), tmp_path / "hosts.toml")
    clock = Clock()
    a = DemoBackend("r1-a", cfg.host("r1-a"), clock=clock, state_dir=tmp_path / "r1-a")
    a.read_lines()  # node 0's unit starts now; node 1 has not started
    clock.t += 600
    t0 = _text(a)
    assert t0.count("Init torch distributed begin.") == 8
    assert "Init torch distributed ends" not in t0
    assert a.samples_at(clock.t)[0].used_mib > 500  # waiting, its contexts held
    b = DemoBackend("r1-b", cfg.host("r1-b"), clock=clock, state_dir=tmp_path / "r1-b")
    b.read_lines()  # node 1 starts 600 s after node 0
    clock.t += 3600
    t0, t1 = _text(a), _text(b)
    assert "fired up and ready" in t0
    assert t1.count("Capture cuda graph end") == 8
    begin1 = min(_stamp(ln) for ln in t1.splitlines() if "Init torch distributed begin." in ln)
    ends0 = [_stamp(ln) for ln in t0.splitlines() if "Init torch distributed ends" in ln]
    ends1 = [_stamp(ln) for ln in t1.splitlines() if "Init torch distributed ends" in ln]
    assert len(ends0) == 8
    assert len(ends1) == 8
    assert min(ends0) > begin1  # node 0 ended its init only once node 1's ranks had begun theirs
    assert abs(min(ends0) - min(ends1)) < 1.0  # together


def test_each_node_has_its_own_cards_so_a_figure_can_be_set_by_node_1(tmp_path: Path) -> None:
    from kvtui.boot import BootTracker
    from kvtui.boot.deployment import merge_boots
    from kvtui.engines.parse import LineParser

    def boot(x: DemoBackend) -> Any:
        parser, tracker = LineParser(None), BootTracker(None)
        for rec in x.read_lines(limit=100_000):
            for ev in parser.feed(rec):
                tracker.feed(ev)
        return tracker.boots[-1]

    setters = {}
    for seed in (0, 7):  # seed 0: node 0 has the tightest card; seed 7: node 1 has
        d = tmp_path / str(seed)
        text = _hosts().replace("demo_speed = 500\n", f"demo_speed = 500\ndemo_seed = {seed}\n")
        cfg = parse_config(text, d / "hosts.toml")
        clock = Clock()
        a, b = (DemoBackend(n, cfg.host(n), clock=clock, state_dir=d / n) for n in ("r1-a", "r1-b"))
        a.read_lines(), b.read_lines()
        clock.t += 3600
        dep = merge_boots([("r1-a", boot(a)), ("r1-b", boot(b))])
        who = dep.setter("avail_before_load_gib")
        assert who is not None
        setters[seed] = who.node_rank
        # the two nodes' cards differ: their contexts (and so the free memory they start from) differ
        ctx = [sorted(re.findall(r"mem usage=(\d+\.\d+) GB", _text(x)))[:8] for x in (a, b)]
        assert ctx[0] != ctx[1]
    assert setters == {0: 0, 7: 1}  # the free memory every rank can count on is set by node 1 with seed 7


def _stamp(line: str) -> float:
    from datetime import datetime

    m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)", line)
    assert m is not None, line
    return datetime.fromisoformat(m.group(1)).timestamp()
