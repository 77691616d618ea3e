"""One boot across nodes (issue 15, steps 2-3): the merge, the findings, the hang diagnosis.

The fixtures come from ``tests/nodes_gen.py`` (the engines' format strings with chosen numbers);
the facts below were written from its table before kvtui read the files."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from kvtui.boot import Boot, BootStatus
from kvtui.boot.deployment import (
    DeploymentBoot,
    NodeObservation,
    current_start,
    diagnose_hang,
    merge_boots,
    merge_logs,
    node_state,
    pair_boots,
    same_start,
)
from kvtui.commands.replay import analyse_path
from kvtui.engines.events import Engine, Phase

NODES = Path(__file__).parent / "fixtures" / "nodes"
NOW_CLOCK = lambda: datetime(2026, 11, 21)  # noqa: E731 - the year of vLLM's year-less stamps


def _boots(name: str) -> list[Boot]:
    boots, _ = analyse_path(str(NODES / name), clock=NOW_CLOCK)
    return boots


def _t(hms: str) -> datetime:
    h, m, s = (int(x) for x in hms.split(":"))
    return datetime(2026, 11, 20, h, m, s)


def _dep(a: str, b: str, names: tuple[str, str] = ("h20-a", "h20-b")) -> DeploymentBoot:
    deps = merge_logs([(names[0], _boots(a)), (names[1], _boots(b))])
    assert len(deps) == 1
    return deps[0]


def _span_end(dep: DeploymentBoot, phase: Phase) -> datetime | None:
    return next(s.end for s in dep.boot.phases if s.name is phase)


def _naive(dt: datetime | None) -> datetime | None:
    return dt.replace(tzinfo=None) if dt is not None else None


def test_sglang_tp16_over_two_nodes_is_one_ready_boot() -> None:
    dep = _dep("sglang-tp16-node0.log", "sglang-tp16-node1.log")
    b = dep.boot
    assert b.engine is Engine.SGLANG
    assert b.status is BootStatus.READY
    assert [r for r in b.ranks if r.startswith("TP")] == [f"TP{i}" for i in range(16)]
    assert [(n.name, n.node_rank, n.nnodes, n.dist_init_addr) for n in dep.nodes] == [
        ("h20-a", 0, 2, "10.0.0.1:5000"), ("h20-b", 1, 2, "10.0.0.1:5000")]
    assert dep.findings == []
    # a phase of the whole: from the first node's start to the last node's end
    init = next(s for s in b.phases if s.name is Phase.INIT)
    assert (_naive(init.start), _naive(init.end)) == (_t("10:00:20"), _t("10:01:07"))
    assert _naive(_span_end(dep, Phase.LOAD_WEIGHTS)) == _t("10:06:10")
    assert _naive(_span_end(dep, Phase.GRAPH_CAPTURE)) == _t("10:07:42")
    ready = next(s for s in b.phases if s.name is Phase.READY)
    assert _naive(ready.start) == _t("10:08:00")
    # per node: node 0 finished its weights at 10:05:30, node 1 at 10:06:10
    lw0 = dep.node(0).span(Phase.LOAD_WEIGHTS)
    lw1 = dep.node(1).span(Phase.LOAD_WEIGHTS)
    assert lw0 is not None
    assert lw1 is not None
    assert (_naive(lw0.end), _naive(lw1.end)) == (_t("10:05:30"), _t("10:06:10"))
    # figures as today, with the node that set them
    m = b.metrics
    assert m.avail_before_load_gib == pytest.approx(93.41)
    assert dep.setter("avail_before_load_gib") is dep.node(1)
    assert m.avail_after_pool_gib == pytest.approx(7.95)
    assert dep.setter("avail_after_pool_gib") is dep.node(0)
    assert m.graph_mem_gib == pytest.approx(2.31)
    assert dep.setter("graph_mem_gib") is dep.node(1)
    assert m.max_total_num_tokens == 263104
    assert dep.setter("max_total_num_tokens") is dep.node(0)


def test_a_flag_that_differs_between_nodes_is_a_finding() -> None:
    dep = _dep("sglang-tp16-node0.log", "sglang-tp16-node1-mf085.log")
    assert dep.findings == ["node 1 (h20-b) runs --mem-fraction-static 0.85, node 0 (h20-a) 0.88"]


def test_a_different_rendezvous_is_a_finding() -> None:
    dep = _dep("sglang-tp16-node0.log", "sglang-tp16-node1-addr.log")
    assert dep.findings == ["node 1 (h20-b) runs --dist-init-addr 10.0.0.9:5000, node 0 (h20-a) 10.0.0.1:5000: "
                            "the nodes do not meet at one rendezvous"]


def test_node_rank_comes_from_the_flags_not_the_listed_order() -> None:
    deps = merge_logs([("h20-b", _boots("sglang-tp16-node1.log")), ("h20-a", _boots("sglang-tp16-node0.log"))])
    dep = deps[0]
    assert [(n.name, n.node_rank, n.position) for n in dep.nodes] == [("h20-a", 0, 1), ("h20-b", 1, 0)]
    assert dep.boot.status is BootStatus.READY
    assert any("h20-b is listed as node 0 but runs --node-rank 1" in f for f in dep.findings)


def test_vllm_tp16_over_two_nodes() -> None:
    dep = _dep("vllm-tp16-node0.log", "vllm-tp16-node1.log")
    b = dep.boot
    assert b.engine is Engine.VLLM
    assert b.status is BootStatus.READY
    assert [r for r in b.ranks if r.startswith("Worker_TP")] == [f"Worker_TP{i}" for i in range(16)]
    assert [(n.node_rank, n.nnodes, n.dist_init_addr) for n in dep.nodes] == [
        (0, 2, "10.0.0.1:29500"), (1, 2, "10.0.0.1:29500")]
    assert dep.findings == []  # --headless on node 1 differs by design
    assert b.metrics.graph_mem_gib == pytest.approx(1.52)
    assert dep.setter("graph_mem_gib") is dep.node(0)
    assert b.metrics.max_total_num_tokens == 2401664


def test_the_whole_is_not_past_a_phase_a_node_has_not_ended() -> None:
    b0 = _boots("sglang-tp16-stall-node0.log")
    b1 = _boots("sglang-tp16-stall-node1.log")
    dep = merge_boots([("h20-a", b0[-1]), ("h20-b", b1[-1])])
    assert dep.boot.status is BootStatus.STARTING
    assert dep.boot.phase is Phase.LAUNCH  # node 1 is still at launch
    init = next(s for s in dep.boot.phases if s.name is Phase.INIT)
    assert init.end is None


def test_hang_names_the_node_that_never_arrived() -> None:
    b0 = _boots("sglang-tp16-stall-node0.log")
    b1 = _boots("sglang-tp16-stall-node1.log")
    dep = merge_boots([("h20-a", b0[-1]), ("h20-b", b1[-1])])
    tz = dep.boot.phases[0].start.tzinfo if dep.boot.phases[0].start else None
    assert diagnose_hang(dep, _t("10:02:00").replace(tzinfo=tz), 180) is None  # within the bound
    hang = diagnose_hang(dep, _t("10:03:30").replace(tzinfo=tz), 180, {
        1: NodeObservation(unit_active=False, unit_state="inactive (dead)", last_line_at=_t("10:00:05"),
                           env={"NCCL_SOCKET_IFNAME": "ib0"}),
        0: NodeObservation(unit_active=True, last_line_at=_t("10:00:20"), env={"NCCL_SOCKET_IFNAME": "eth0"}),
    })
    assert hang is not None
    assert hang.lagging == (1,)
    assert hang.summary == ("node 1 (h20-b) has not started distributed init (it is at launch); "
                            "node 0 (h20-a) waiting 3m 10s at NCCL init (distributed init)")
    assert hang.causes == (
        "node 1 (h20-b): its unit is not running (inactive (dead))",
        "node 1 (h20-b): its log has been silent for 3m 25s",
        "NCCL_SOCKET_IFNAME differs between the nodes' units: node 0 (h20-a) eth0, node 1 (h20-b) ib0",
    )


def test_a_node_without_any_boot_is_named() -> None:
    b0 = _boots("sglang-tp16-stall-node0.log")
    dep = merge_boots([("h20-a", b0[-1]), ("h20-b", None)])
    tz = dep.boot.phases[0].start.tzinfo if dep.boot.phases[0].start else None
    hang = diagnose_hang(dep, _t("10:10:00").replace(tzinfo=tz), 180)
    assert hang is not None
    assert hang.summary.startswith("node 1 (h20-b) has not started (no boot in its log); node 0 (h20-a) waiting")
    assert "nothing kvtui can see explains it" in hang.causes[0]
    # a node kvtui has not read yet (still connecting) is not said to have no boot in its log
    unread = {1: NodeObservation(unread="reconnecting: connection refused")}
    hang = diagnose_hang(dep, _t("10:10:00").replace(tzinfo=tz), 180, unread)
    assert hang is not None
    assert hang.summary.startswith("node 1 (h20-b) has no boot kvtui could read (its log is not read yet: "
                                   "reconnecting: connection refused); node 0 (h20-a) waiting")


def test_pairing_by_start_time_keeps_a_missing_restart_apart() -> None:
    a = _boots("sglang-tp16-node0.log")[0]
    b = _boots("sglang-tp16-node1.log")[0]
    late = Boot(started_at=_t("12:00:00").replace(tzinfo=a.started_at.tzinfo if a.started_at else None))
    groups = pair_boots([[a, late], [b]])
    assert groups == [[a, b], [late, None]]


def test_replay_takes_several_nodes_logs(capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.cli import main

    code = main(["replay", str(NODES / "sglang-tp16-node0.log"), str(NODES / "sglang-tp16-node1-mf085.log")])
    out = capsys.readouterr().out
    assert code == 0
    assert "Boot 1 of 1 · 2 nodes · sglang (version not printed) · READY · 16 ranks (TP0 … TP15)" in out
    assert "load_weights        10:05:30    10:06:10" in out
    assert "free before weights  93.41 GiB set by node 1 (sglang-tp16-node1-mf085.log)" in out
    assert ("! node 1 (sglang-tp16-node1-mf085.log) runs --mem-fraction-static 0.85, "
            "node 0 (sglang-tp16-node0.log) 0.88") in out


def test_replay_json_of_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from kvtui.cli import main

    assert main(["replay", "--json", str(NODES / "vllm-tp16-node0.log"), str(NODES / "vllm-tp16-node1.log")]) == 0
    doc = json.loads(capsys.readouterr().out)
    boot = doc["boots"][0]
    assert doc["nodes"] == ["vllm-tp16-node0.log", "vllm-tp16-node1.log"]
    assert boot["status"] == "ready"
    assert [n["node_rank"] for n in boot["nodes"]] == [0, 1]
    assert boot["figure_nodes"]["graph_mem_gib"] == 0
    assert boot["findings"] == []


def test_replay_nodes_unreadable_input_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.cli import main

    assert main(["replay", str(NODES / "sglang-tp16-node0.log"), str(tmp_path / "missing.log")]) == 3
    assert "missing.log: no such file" in capsys.readouterr().err


def test_the_whole_is_not_ready_before_every_node_shows_the_heads_last_phase() -> None:
    head = _boots("sglang-tp16-node0.log")[-1]
    stalled = _boots("sglang-tp16-stall-node1.log")[-1]
    assert merge_boots([("h20-a", head), ("h20-b", None)]).boot.status is BootStatus.STARTING
    assert merge_boots([("h20-a", head), ("h20-b", stalled)]).boot.status is BootStatus.STARTING


def test_a_stopped_node_is_named_at_once() -> None:
    b0 = _boots("sglang-tp16-stall-node0.log")[-1]
    b1 = _boots("sglang-tp16-stall-node1.log")[-1]
    b1.status = BootStatus.STOPPED
    dep = merge_boots([("h20-a", b0), ("h20-b", b1)])
    tz = b0.started_at.tzinfo if b0.started_at else None
    hang = diagnose_hang(dep, _t("10:00:30").replace(tzinfo=tz), 180)  # well within the bound
    assert hang is not None
    assert hang.summary == ("node 1 (h20-b) stopped at launch; "
                            "node 0 (h20-a) waiting 10s at NCCL init (distributed init)")


def test_unit_environment_command_and_parse() -> None:
    from kvtui.hosts import shellcmd as C

    assert C.unit_environment("sglang r1.service") == "systemctl show -p Environment --value 'sglang r1.service'"
    assert C.unit_environment("s.service", sudo=True) == "sudo -n systemctl show -p Environment --value s.service"
    assert C.parse_environment('NCCL_SOCKET_IFNAME=eth0 "NCCL_DEBUG=INFO x" GLOO_SOCKET_IFNAME=eth0\n') == {
        "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO x", "GLOO_SOCKET_IFNAME": "eth0"}


def test_calc_host_accepts_a_deployment(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two local hosts following the nodes' log files: calc calibrates from the merged boot."""
    from kvtui.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for name in ("sglang-tp16-node0.log", "sglang-tp16-node1.log"):
        (tmp_path / name).write_bytes((NODES / name).read_bytes())
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(f'[hosts.a]\nlocal = true\nlog_file = "{tmp_path}/sglang-tp16-node0.log"\n'
                     f'[hosts.b]\nlocal = true\nlog_file = "{tmp_path}/sglang-tp16-node1.log"\n'
                     '[deployments.r1]\nnodes = ["a", "b"]\n')
    code = main(["--hosts", str(hosts), "calc", "--host", "r1", "--set", "mem-fraction-static=0.86"])
    out = capsys.readouterr().out
    assert code == 0
    assert "boot 1 of this log from host r1" in out  # a deployment: its nodes are stored one by one
    assert "P = 93.41 GiB free before the weights (min over ranks), A = 52.21 GiB after them, f = 0.88" in out


def test_equal_length_rank_lines_are_not_a_wrapped_capture(tmp_path: Path) -> None:
    lines = ["[2026-11-20 10:00:00] server_args=ServerArgs(tp_size=16)"]
    lines += [f"[2026-11-20 10:00:20 TP{i}] Init torch distributed begin." for i in range(8)]
    path = tmp_path / "compose.log"
    path.write_text("".join(f"sglang-1  | {ln}\n" for ln in lines))
    boots = _boots_at(path)
    assert boots[-1].ranks == [f"TP{i}" for i in range(8)]


def _boots_at(path: Path) -> list[Boot]:
    boots, _ = analyse_path(str(path), clock=NOW_CLOCK)
    return boots


def _shifted(boot: Boot, delta: timedelta) -> Boot:
    """A copy of ``boot`` whose every stamp is ``delta`` later (the same boot, started again later)."""
    b = copy.deepcopy(boot)
    b.started_at = b.started_at + delta if b.started_at else None
    b.ended_at = b.ended_at + delta if b.ended_at else None
    for s in b.phases:
        s.start = s.start + delta if s.start else None
        s.end = s.end + delta if s.end else None
    return b


def test_a_node_restarted_alone_is_not_merged_with_the_others_older_boot() -> None:
    """Node 0 restarted alone an hour after the deployment's ready boot: node 1's boot met node 0's
    old boot at its rendezvous (10:01:07) long before node 0's new boot began, so it is not part of
    the new start: node 1 is the one that has not started (it used to be node 0, named as not
    reaching node 1's CUDA graph capture)."""
    old1 = _boots("sglang-tp16-node1.log")[-1]
    new0 = _shifted(_boots("sglang-tp16-stall-node0.log")[-1], timedelta(hours=1))  # waits at init from 11:00:20
    assert not same_start(new0, old1)
    kept, earlier = current_start([new0, old1])
    assert kept == [new0, None]
    assert earlier == [None, old1]
    dep = merge_boots([("h20-a", kept[0]), ("h20-b", kept[1])], earlier)
    assert [(n.name, n.node_rank) for n in dep.nodes] == [("h20-a", 0), ("h20-b", 1)]
    assert node_state(dep, dep.nodes[1]) == "not in this start (its boot is of an earlier one: not restarted)"
    tz = new0.started_at.tzinfo if new0.started_at else None
    hang = diagnose_hang(dep, _t("11:03:30").replace(tzinfo=tz), 180)
    assert hang is not None
    assert hang.lagging == (1,)
    assert hang.summary == ("node 1 (h20-b) has not started this boot (its newest boot, started 10:00:05, is of an "
                            "earlier start: the node was not restarted with the others); node 0 (h20-a) waiting "
                            "3m 10s at NCCL init (distributed init)")
    # without the pairing, node 1's old boot (at its graphs) made node 0 the lagging one
    naive = diagnose_hang(merge_boots([("h20-a", new0), ("h20-b", old1)]), _t("11:03:30").replace(tzinfo=tz), 180)
    assert naive is not None
    assert naive.lagging == (0,)
    # replay pairs the same way: node 0's second boot finds no boot of node 1 to pair with
    old0 = _boots("sglang-tp16-node0.log")[-1]
    late = _shifted(old0, timedelta(minutes=9))  # within PAIR_WINDOW of node 1's boot, but after its rendezvous
    assert pair_boots([[old0, late], [old1]]) == [[old0, old1], [late, None]]
    assert pair_boots([[late], [old1]]) == [[late, None]]


def test_nodes_restarted_one_after_the_other_are_one_start() -> None:
    """Node 1 restarted a few seconds before node 0 (both before either met the other): one start."""
    b0 = _boots("sglang-tp16-node0.log")[-1]  # starts 10:00:00
    b1 = _shifted(_boots("sglang-tp16-node1.log")[-1], timedelta(seconds=-30))  # 09:59:35, met at 10:00:37
    assert same_start(b0, b1)
    kept, earlier = current_start([b0, b1])
    assert kept == [b0, b1]
    assert earlier == [None, None]
    assert current_start([b0, None]) == ([b0, None], [None, None])


# -- replay of logs that are not one deployment's nodes (issue 21) ------------------------------

REAL = Path(__file__).parent / "fixtures" / "real"


def test_logs_of_one_deployment_are_not_apart() -> None:
    from kvtui.boot.deployment import apart

    for a, b in (("sglang-tp16-node0.log", "sglang-tp16-node1.log"),
                 ("sglang-tp16-node0.log", "sglang-tp16-node1-mf085.log"),  # a flag differs: a finding
                 ("vllm-tp16-node0.log", "vllm-tp16-node1.log"),
                 ("sglang-tp16-stall-node0.log", "sglang-tp16-stall-node1.log")):
        assert apart([(a, _boots(a)), (b, _boots(b))]) == [], (a, b)
    assert apart([("a", _boots("sglang-tp16-node0.log")), ("b", [])]) == []  # a node whose log holds no boot


def test_logs_that_disagree_are_apart() -> None:
    from kvtui.boot.deployment import apart

    n0, n1 = _boots("sglang-tp16-node0.log"), _boots("sglang-tp16-node1.log")
    assert apart([("a", n0), ("b", _boots("sglang-tp16-node1-addr.log"))]) == [
        "they meet at different rendezvous (a 10.0.0.1:5000, b 10.0.0.9:5000)"]
    assert apart([("a", n0), ("a2", n0)]) == ["a and a2 both run --node-rank 0"]
    other = copy.deepcopy(n1)
    other[0].flags["model_path"] = "/models/Qwen3-235B"
    other[0].flags["nnodes"] = 4
    assert apart([("a", n0), ("b", other)]) == [
        "they run different --nnodes (a 2, b 4)", "they serve different models (a DeepSeek-R1, b Qwen3-235B)"]
    assert apart([("a", n0), ("b", [_shifted(n1[0], timedelta(hours=2))])]) == [
        "no boot of b is of one start with a boot of a (they do not overlap in time)"]
    assert apart([("a", n0), ("b", _boots("vllm-tp16-node1.log"))]) == [
        "no boot of b is of one start with a boot of a (they do not overlap in time)"]
    three = apart([("a", n0), ("b", n1), ("c", [_shifted(n1[0], timedelta(seconds=1))])])
    assert "3 logs of one start, but they run --nnodes 2" in three
    # servers on one node: SGLang's dump says --nnodes 1; a vLLM dump names no other node
    single = _boots_real("01-sglang-llama32-3b-tp1-hicache-ready.log")
    vllm = _boots_real("13-vllm-qwen3-4b-tp1-graph-capture-oom.log")
    assert apart([("s", single), ("v", vllm)]) == ["s is a server on one node (--nnodes 1)",
                                                   "v is a server on one node (its arguments name no other node)"]
    assert apart([("s", single), ("empty", [])]) == ["s is a server on one node (--nnodes 1)"]


def _boots_real(name: str) -> list[Boot]:
    boots, _ = analyse_path(str(REAL / name), clock=NOW_CLOCK)
    return boots


def test_replay_of_unrelated_logs_reports_each_on_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    """Two unrelated boots were merged as the nodes of one deployment (`2 nodes … FAILED in
    kv_allocate`, a launch of thousands of hours): each log is now reported as `replay LOG` would,
    after the reasons, and the exit code is the worst of them."""
    import json

    from kvtui.cli import main

    good = str(REAL / "01-sglang-llama32-3b-tp1-hicache-ready.log")
    failed = str(REAL / "23-sglang-gemma4-26b-a4b-tp1-not-enough-memory.log")
    assert main(["replay", good, failed]) == 1
    out = capsys.readouterr().out
    assert out.startswith("2 logs, not the nodes of one deployment: each log on its own\n"
                          "  - 01-sglang-llama32-3b-tp1-hicache-ready.log is a server on one node (--nnodes 1)\n")
    assert "nodes (" not in out
    assert main(["replay", good]) == 0
    alone_good = capsys.readouterr().out
    assert main(["replay", failed]) == 1
    alone_failed = capsys.readouterr().out
    assert out.endswith("\n" + alone_good + "\n" + alone_failed)
    assert "Boot 1 of 1 in this log · sglang (version not printed) · READY" in alone_good
    # --json: each file's document as replay --json prints it
    assert main(["replay", "--json", good, failed]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["sources"], doc["deployment"], len(doc["apart"])) == ([good, failed], False, 2)
    for i, path in enumerate((good, failed)):
        main(["replay", "--json", path])
        assert doc["files"][i] == json.loads(capsys.readouterr().out)
    # two good boots: each ready (was: one merged start, STARTING), exit 0
    assert main(["replay", good, str(REAL / "17-sglang-llama31-8b-tp1-docs-2025-01-ready.log")]) == 0
    out = capsys.readouterr().out
    assert out.count("· READY ·") == 2
    assert "STARTING" not in out
