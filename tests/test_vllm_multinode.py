"""vLLM across processes and nodes: the shared-memory broadcast wait line (a hang, or a long
compile on some worker) and Ray workers attributed to nodes by their ``ip=``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from kvtui.boot import BootTracker
from kvtui.engines.events import Fact, Metric, Warning_
from kvtui.engines.parse import parse_bytes
from kvtui.engines.vllm import VllmGrammar

NOW = datetime(2026, 12, 31, 12, 0, 0)

# vLLM ≥ 0.10 (shm_broadcast.py LONG_WAIT_TIME_LOG_MSG, logged at INFO every
# VLLM_RINGBUFFER_WARNING_INTERVAL s while one acquire waits)
SHM_NEW = (
    "({who}) INFO 02-02 13:2{m}:32 [shm_broadcast.py:542] No available shared memory broadcast block found in "
    "{n} seconds. This typically happens when some processes are hanging or doing some time-consuming work "
    "(e.g. compilation, weight/kv cache quantization)."
)
# vLLM 0.6-0.7 (logged at WARNING, the same wording as SGLang's copy of the ring buffer)
SHM_OLD = "({who}) WARNING 02-02 13:2{m}:32 [shm_broadcast.py:305] No available block found in {n} second. "
HEAD = (
    "(EngineCore_DP0 pid=214) INFO 02-02 13:19:01 [core.py:74] Initializing a V1 LLM engine (v0.11.0) with "
    "config: model='m'"
)


def _waits(lines: list[str]) -> list[float]:
    g = VllmGrammar(clock=lambda: NOW)
    out: list[float] = []
    for ln in lines:
        for e in g.parse(ln).events:
            if isinstance(e, Metric) and e.name is Fact.SHM_WAIT_SECONDS:
                out.append(e.value)
    return out


def test_the_shm_wait_of_one_process_grows_with_each_repeat_in_a_row() -> None:
    core = "EngineCore_DP0 pid=214"
    lines = [SHM_NEW.format(who=core, m=k, n=60) for k in range(3)]
    g = VllmGrammar(clock=lambda: NOW)
    parsed = [g.parse(ln) for ln in lines]
    assert [[type(e) for e in p.events] for p in parsed] == [[Warning_, Metric], [Metric], [Metric]]
    assert _waits(lines) == [60.0, 120.0, 180.0]
    assert all(p.rank == "EngineCore_DP0" and p.engine is not None for p in parsed)


def test_another_line_of_the_same_process_ends_its_wait_and_other_processes_do_not() -> None:
    core, worker = "EngineCore_DP0 pid=214", "Worker_TP0 pid=271"
    other = f"({worker}) INFO 02-02 13:20:40 [backends.py:1] Compiling a graph for dynamic shape takes 65.20 s"
    own = f"({core}) INFO 02-02 13:21:40 [core.py:1] something else"
    lines = [SHM_NEW.format(who=core, m=0, n=60), other, SHM_NEW.format(who=core, m=1, n=60), own,
             SHM_NEW.format(who=core, m=2, n=60)]
    assert _waits(lines) == [60.0, 120.0, 60.0]


def test_the_old_wording_and_another_interval_are_read() -> None:
    core = "EngineCore pid=9"
    assert _waits([SHM_OLD.format(who=core, m=k, n=30) for k in range(2)]) == [30.0, 60.0]


def test_the_boot_keeps_the_longest_wait_over_processes_and_one_warning_per_wait() -> None:
    core, worker = "EngineCore_DP0 pid=214", "Worker_TP1 pid=272"
    lines = [HEAD, SHM_NEW.format(who=worker, m=0, n=60)] + [SHM_NEW.format(who=core, m=k, n=60) for k in range(3)]
    t = BootTracker()
    for p in parse_bytes("\n".join(lines).encode(), clock=lambda: NOW):
        t.feed(p)
    boot = t.boots[-1]
    assert boot.facts[Fact.SHM_WAIT_SECONDS] == 180.0
    assert boot.rank_facts["Worker_TP1"][Fact.SHM_WAIT_SECONDS] == 60.0
    assert len([w for w in boot.warnings if "shared memory broadcast" in w]) == 2
    assert not boot.unrecognised


REAL = Path(__file__).parent / "fixtures" / "real"


def _boot_json(name: str) -> dict[str, object]:
    t = BootTracker()
    for p in parse_bytes((REAL / name).read_bytes(), clock=lambda: NOW):
        t.feed(p)
    t.finish()
    assert len(t.boots) == 1
    return t.boots[0].to_json()


def test_ray_workers_of_the_gpt_oss_tp4_log_are_put_on_their_nodes() -> None:
    # Written from reading the log: Ray tags the driver node's worker without an ip
    # (`(RayWorkerWrapper pid=1273)`, TP rank 0 by its `rank 0 in world size 4 is assigned as … TP rank 0`
    # line) and the others with theirs (`(RayWorkerWrapper pid=345, ip=127.0.0.1)`, TP rank 1; pid=343,
    # first seen on line 70, whose rank line Ray folded into `[repeated 3x across cluster]`); the fourth
    # worker never shows its own tag (deduplicated). This test cluster runs its raylets on one machine,
    # so every other node has the ip 127.0.0.1.
    got = _boot_json("06-vllm-gptoss120b-tp4-ray-multinode-ready.log")
    assert got["status"] == "ready"
    assert got["nodes"] == [
        {"ip": None, "processes": ["RayWorkerWrapper pid=1273"], "tp_ranks": [0]},
        {
            "ip": "127.0.0.1",
            "processes": ["RayWorkerWrapper pid=345 ip=127.0.0.1", "RayWorkerWrapper pid=343 ip=127.0.0.1"],
            "tp_ranks": [1],
        },
    ]


def test_the_wrapped_two_node_capture_has_one_worker_per_node() -> None:
    got = _boot_json("30-vllm-qwen2-7b-tp2-ray-2node-wrapped-ready.log")
    assert got["nodes"] == [
        {"ip": None, "processes": ["RayWorkerWrapper pid=1384"], "tp_ranks": [0]},
        {"ip": "127.0.0.1", "processes": ["RayWorkerWrapper pid=374 ip=127.0.0.1"], "tp_ranks": [1]},
    ]


def test_a_log_without_ray_workers_has_no_nodes_key() -> None:
    assert "nodes" not in _boot_json("32-vllm-0.20.0-gemma4-26b-a4b-ready.log")


def test_a_worker_is_announced_once_per_boot() -> None:
    from kvtui.engines.events import WorkerNode

    g = VllmGrammar(clock=lambda: NOW)
    line = "(EngineCore_0 pid=1) (RayWorkerWrapper pid=7, ip=10.1.2.3) INFO 09-10 23:27:29 [x.py:1] hello"
    seen = [e for _ in range(3) for e in g.parse(line).events if isinstance(e, WorkerNode)]
    assert seen == [WorkerNode("10.1.2.3", "RayWorkerWrapper pid=7 ip=10.1.2.3")]
    g.reset()  # a new boot
    assert [e for e in g.parse(line).events if isinstance(e, WorkerNode)] == seen
