"""vLLM grammar: a fixture per version / line shape / failure line, the real vLLM samples at
event level, timestamps, rank tags, argument dumps, and property tests."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.engines.events import (
    METRIC_NAMES,
    PHASE_RANK,
    BootBoundary,
    CaptureSizes,
    Engine,
    FailureKind,
    FailureText,
    Flags,
    Metric,
    ParsedLine,
    Phase,
    PhaseMark,
    Progress,
    Serving,
    VersionHint,
    Warning_,
)
from kvtui.engines.text import split_physical
from kvtui.engines.vllm import VLLM_HINTS, VllmGrammar, parse_arg_dict, parse_kv_args

FIX = Path(__file__).parent / "fixtures"
VF = FIX / "vllm"
NOW = datetime(2026, 12, 31, 12, 0, 0)  # clock for year-less stamps: every fixture is in 2026


def clock() -> datetime:
    return NOW


# --------------------------------------------------------------------------------------------
# A small reducer over the events (what BootTracker does, minus boots), to check files whole
# --------------------------------------------------------------------------------------------
_PHASE_KIND = {
    Phase.LOAD_WEIGHTS: FailureKind.OOM_WEIGHTS,
    Phase.COMPILE: FailureKind.OOM_KV_ALLOCATE,
    Phase.KV_ALLOCATE: FailureKind.OOM_KV_ALLOCATE,
    Phase.GRAPH_CAPTURE: FailureKind.OOM_GRAPH_CAPTURE,
    Phase.HTTP_UP: FailureKind.OOM_RUNTIME,
    Phase.READY: FailureKind.OOM_RUNTIME,
}


@dataclass
class Summary:
    lines: list[ParsedLine] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)  # in order of first start
    ends: list[PhaseMark] = field(default_factory=list)
    metrics: dict[str, list[tuple[str | None, float]]] = field(default_factory=dict)
    flags: dict[str, object] = field(default_factory=dict)
    versions: list[str] = field(default_factory=list)
    boundaries: int = 0
    failures: list[tuple[FailureText, Phase | None]] = field(default_factory=list)
    serving: list[Serving] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)
    ranks: dict[str, set[int | None]] = field(default_factory=dict)

    @property
    def last_phase(self) -> Phase | None:
        return max(self.phases, key=lambda p: PHASE_RANK[p]) if self.phases else None

    def last(self, name: str) -> float | None:
        v = self.metrics.get(name)
        return v[-1][1] if v else None

    def first(self, name: str) -> float | None:
        v = self.metrics.get(name)
        return v[0][1] if v else None

    def max(self, name: str) -> float | None:
        v = self.metrics.get(name)
        return max(x for _, x in v) if v else None

    def best_failure(self) -> tuple[FailureText, Phase | None] | None:
        best: tuple[FailureText, Phase | None] | None = None
        for f, ph in self.failures:
            if best is None or f.specificity > best[0].specificity:
                best = (f, ph)
        return best

    def failure_kind(self) -> FailureKind | None:
        b = self.best_failure()
        if b is None:
            return None
        f, ph = b
        if f.kind is not None:
            return f.kind
        return _PHASE_KIND.get(ph, FailureKind.CRASH) if ph is not None else FailureKind.UNKNOWN

    @property
    def fatal(self) -> bool:
        return any(f.fatal for f, _ in self.failures)


def summarize(lines: list[str], grammar: VllmGrammar | None = None) -> Summary:
    g = grammar or VllmGrammar(clock=clock)
    s = Summary()
    for text in lines:
        p = g.parse(text)
        s.lines.append(p)
        if p.rank is not None:
            s.ranks.setdefault(p.rank, set()).add(p.tp)
        for e in p.events:
            if isinstance(e, PhaseMark):
                if e.end:
                    s.ends.append(e)
                elif e.phase not in s.phases:
                    s.phases.append(e.phase)
            elif isinstance(e, Metric):
                assert e.name in METRIC_NAMES, e.name
                s.metrics.setdefault(e.name, []).append((p.rank, e.value))
            elif isinstance(e, Flags):
                s.flags.update(e.values)
            elif isinstance(e, VersionHint):
                s.versions.append(e.version)
            elif isinstance(e, BootBoundary):
                s.boundaries += 1
            elif isinstance(e, FailureText):
                s.failures.append((e, s.last_phase))
            elif isinstance(e, Serving):
                s.serving.append(e)
            elif isinstance(e, Progress):
                s.progress.append(e)
    return s


def load(path: Path) -> list[str]:
    return split_physical(path.read_bytes().decode("utf-8", "replace"))


ALL_PHASES = list(Phase)


# --------------------------------------------------------------------------------------------
# Line anatomy
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "rank", "tp", "level", "text"),
    [
        ("(APIServer pid=2211) INFO 08-21 10:02:03 [api_server.py:1839] vLLM API server version 0.11.0",
         "APIServer", None, "INFO", "vLLM API server version 0.11.0"),
        ("(Worker_TP2 pid=7) WARNING 08-21 10:02:03 [x.py:1] careful", "Worker_TP2", 2, "WARNING", "careful"),
        ("(Worker_DP1_PP0_TP3_EP7 pid=8) DEBUG 08-21 10:02:03 [x.py:1] d", "Worker_DP1_PP0_TP3_EP7", 3, "DEBUG", "d"),
        ("(EngineCore_DP0 pid=2290) ERROR 08-21 10:02:03 [core.py:1] boom", "EngineCore_DP0", None, "ERROR", "boom"),
        ("(EngineCore pid=1) INFO 08-21 10:02:03 [core.py:1] x", "EngineCore", None, "INFO", "x"),
        ("(EngineCore_0 pid=1159) INFO 08-21 10:02:03 [core.py:1] x", "EngineCore_0", None, "INFO", "x"),
        ("(VllmWorker rank=3 pid=9) INFO 08-21 10:02:03 [x.py:1] y", "VllmWorker rank=3", 3, "INFO", "y"),
        ("(VllmWorkerProcess pid=1064416) INFO 03-19 06:27:22 utils.py:1008] Found nccl from library libnccl.so.2",
         "VllmWorkerProcess pid=1064416", None, "INFO", "Found nccl from library libnccl.so.2"),
        ("(EngineCore_0 pid=1159) (RayWorkerWrapper pid=345, ip=10.0.0.7) INFO 09-10 23:27:29 [a.py:1] z",
         "RayWorkerWrapper pid=345 ip=10.0.0.7", None, "INFO", "z"),
        ("(EngineCore_0 pid=1159) (pid=1273) INFO 09-10 23:27:05 [a.py:1] z", "RayWorkerWrapper pid=1273", None,
         "INFO", "z"),
        ("\x1b[1;36m(APIServer pid=1009)\x1b[0;0m INFO 09-10 23:26:12 [api_server.py:1805] hi", "APIServer", None,
         "INFO", "hi"),
        ("(APIServer pid=4100) INFO:     Application startup complete.", "APIServer", None, "INFO",
         "Application startup complete."),
        ("INFO:     Started server process [1063854]", None, None, "INFO", "Started server process [1063854]"),
        ("INFO 03-19 06:27:09 api_server.py:528] vLLM API server version 0.6.3.post1", None, None, "INFO",
         "vLLM API server version 0.6.3.post1"),
        ("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03,  1.62s/it]", None, None, None,
         "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03,  1.62s/it]"),
        ("  File \"/x/core.py\", line 3, in f", None, None, None, "  File \"/x/core.py\", line 3, in f"),
        ("(EngineCore pid=4054) ERROR 05-02 13:35:28 [core.py:1108] EngineCore failed to start.\r", "EngineCore", None,
         "ERROR", "EngineCore failed to start."),
        ("(Worker pid=1) INFO 09-10 23:48:31 [m.py:1] torch.compile takes 15.39 s in total\x1b[32m [repeated 3x "
         "across cluster]\x1b[0m", "Worker pid=1", None, "INFO", "torch.compile takes 15.39 s in total"),
    ],
)
def test_line_anatomy(line: str, rank: str | None, tp: int | None, level: str | None, text: str) -> None:
    p = VllmGrammar(clock=clock).parse(line)
    assert (p.rank, p.tp, p.level, p.text) == (rank, tp, level, text)


def test_stamp_year_comes_from_the_clock_and_never_lies_in_the_future() -> None:
    g = VllmGrammar(clock=lambda: datetime(2026, 3, 1, 8, 0, 0))
    assert g.parse("INFO 02-28 23:59:59 [a.py:1] x").ts == datetime(2026, 2, 28, 23, 59, 59)
    assert g.parse("INFO 03-02 07:00:00 [a.py:1] x").ts == datetime(2026, 3, 2, 7, 0, 0)  # within a day: clock skew
    # a December log replayed in March is last year's, not a future date
    assert g.parse("INFO 12-31 23:59:58 [a.py:1] x").ts == datetime(2025, 12, 31, 23, 59, 58)
    # Feb 29 only exists in leap years: the latest leap year not in the future is not tried; the
    # stamp is unusable in 2025/2026/2027 -> falls back to the wrapper's (here: none)
    assert g.parse("INFO 02-29 10:00:00 [a.py:1] x").ts is None
    # lines without a stamp carry the wrapper's ts (None here)
    assert g.parse("INFO:     Application startup complete.").ts is None


def test_stamp_year_from_a_naive_wrapper_even_across_new_year() -> None:
    g = VllmGrammar(clock=lambda: datetime(2030, 6, 1))
    wrap = datetime(2027, 1, 1, 0, 0, 2)  # journalctl short: naive local time
    assert g.parse("INFO 12-31 23:59:59 [a.py:1] x", wrap).ts == datetime(2026, 12, 31, 23, 59, 59)
    assert g.parse("INFO 01-01 00:00:01 [a.py:1] x", wrap).ts == datetime(2027, 1, 1, 0, 0, 1)


@pytest.mark.parametrize("offset_h", [0, 2, -5, 5.5])
def test_stamp_from_an_aware_wrapper_infers_the_engine_offset(offset_h: float) -> None:
    # journald json gives UTC; the engine logs its local wall clock (here UTC+offset_h)
    g = VllmGrammar(clock=lambda: datetime(2030, 6, 1))
    utc_instant = datetime(2026, 8, 21, 10, 2, 3, 512000, tzinfo=UTC)
    local = (utc_instant + timedelta(hours=offset_h)).replace(tzinfo=None)
    line = f"(APIServer pid=1) INFO {local:%m-%d %H:%M:%S} [a.py:1] x"
    ts = g.parse(line, utc_instant).ts
    assert ts is not None
    assert ts.tzinfo is not None
    assert ts.utcoffset() == timedelta(0)  # expressed in the wrapper's zone
    assert ts == utc_instant.replace(microsecond=0)
    # the same with a wrapper in another zone (short-iso +01:00): same instant, that zone
    wrap2 = utc_instant.astimezone(timezone(timedelta(hours=1)))
    ts2 = g.parse(line, wrap2).ts
    assert ts2 == utc_instant.replace(microsecond=0)
    assert ts2 is not None
    assert ts2.utcoffset() == timedelta(hours=1)


def test_stamp_that_contradicts_the_wrapper_yields_the_wrapper() -> None:
    g = VllmGrammar(clock=clock)
    wrap = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    # an old log cat'ed into the journal: the engine stamp is weeks away from the wrapper
    assert g.parse("INFO 03-04 09:12:00 [a.py:1] x", wrap).ts == wrap
    # 20 minutes off is no time-zone offset either
    assert g.parse("INFO 05-01 12:20:00 [a.py:1] x", wrap).ts == wrap


def test_sniff() -> None:
    g = VllmGrammar()
    yes = [
        "(APIServer pid=2211) INFO 08-21 10:02:03 [api_server.py:1839] vLLM API server version 0.11.0",
        "\x1b[1;36m(EngineCore_DP0 pid=2290)\x1b[0;0m INFO 08-21 10:02:19 [core.py:644] Waiting",
        "(Worker_TP0 pid=2350) Loading safetensors checkpoint shards:   0% Completed | 0/4",
        "(VllmWorker rank=3 pid=77) INFO 04-02 09:00:15 [a.py:1] x",
        "(RayWorkerWrapper pid=345, ip=10.0.0.7) INFO 09-10 23:27:29 [a.py:1] z",
        "INFO 08-21 10:02:03 [utils.py:233] non-default args: {}",
        "WARNING 03-19 06:27:15 arg_utils.py:1019] [DEPRECATED] Block manager v1 has been removed",
    ]
    no = [
        "[2026-03-04 09:12:06 TP0] Init torch distributed begin.",
        "[2026-05-30 22:08:10] INFO:     Application startup complete.",
        "INFO:     Application startup complete.",
        "Capturing batches (bs=1 avail_mem=38.07 GB): 100%|████| 52/52",
        # vLLM's platform probe also prints inside other engines (SGLang imports vllm kernels)
        "INFO 01-23 10:00:00 [__init__.py:190] Automatically detected platform cuda.",
        "",
        "(garbage",
    ]
    assert all(g.sniff(x) for x in yes)
    assert not any(g.sniff(x) for x in no)


# --------------------------------------------------------------------------------------------
# Versions and line shapes
# --------------------------------------------------------------------------------------------
def test_0_11_two_line_form_shared_sample() -> None:
    s = summarize(load(FIX / "vllm-0.11-llama8b-tp2-ready.log"))
    assert s.phases == ALL_PHASES
    assert s.versions == ["0.11.0", "0.11.0"]
    assert s.boundaries == 2  # the banner and the argument dump (same boot: both in launch)
    assert s.flags["gpu_memory_utilization"] == 0.9
    assert s.flags["tensor_parallel_size"] == 2
    assert s.flags["max_model_len"] == 131072
    assert s.flags["model"] == "/models/Meta-Llama-3.1-8B-Instruct"
    assert s.flags["dtype"] == "torch.bfloat16"  # from the engine config (not in non-default args)
    assert s.last("max_total_num_tokens") == 1_005_472
    assert s.last("context_len") == 131072
    assert s.last("max_concurrency") == 7.67
    assert s.metrics["kv_cache_gib"] == [("Worker_TP0", 61.37), ("Worker_TP1", 61.37)]
    assert s.metrics["weights_gib"] == [("Worker_TP0", 7.5123), ("Worker_TP1", 7.5123)]
    assert s.max("graph_mem_gib") == 0.62
    assert s.last("compile_seconds") == 26.87
    assert s.last("init_engine_seconds") == 39.87
    assert s.metrics["load_seconds"] == [("Worker_TP0", 6.31), ("Worker_TP1", 6.44)]
    ends = {(e.phase, e.seconds) for e in s.ends}
    assert (Phase.LOAD_WEIGHTS, 7.904122) in ends
    assert (Phase.GRAPH_CAPTURE, 9.0) in ends
    shards = [p for p in s.progress if p.phase is Phase.LOAD_WEIGHTS]
    assert [(p.done, p.total) for p in shards] == [(0, 4), (2, 4), (4, 4)]
    caps = [p for p in s.progress if p.phase is Phase.GRAPH_CAPTURE]
    assert [(p.done, p.total, p.label) for p in caps][-1] == (35, 35, "decode, FULL")
    assert s.ranks == {"APIServer": {None}, "EngineCore_DP0": {None}, "Worker_TP0": {0}, "Worker_TP1": {1}}
    assert not s.failures
    ready = s.lines[-1]
    assert ready.events == (PhaseMark(Phase.READY),)
    assert ready.prefixed  # uvicorn's own level prefix
    assert not next(p for p in s.lines if "checkpoint shards" in p.text).prefixed  # a tqdm bar
    assert ready.engine is Engine.VLLM
    assert s.lines[0].ts == datetime(2026, 8, 21, 10, 2, 3)


def test_0_33_one_line_form() -> None:
    s = summarize(load(VF / "vllm-0.33-qwen3-32b-tp4-ready.log"))
    assert s.phases == ALL_PHASES
    assert s.versions[0] == "0.33.0"
    assert s.last("max_total_num_tokens") == 909_312
    assert s.last("max_concurrency") == 27.75
    assert s.last("context_len") == 32768
    assert s.max("graph_mem_gib") == 1.06
    assert s.last("graph_mem_estimate_gib") == 1.12
    assert min(v for _, v in s.metrics["kv_cache_gib"]) == 55.47
    assert s.last("weights_gib") == 15.27
    assert s.last("compile_seconds") == 22.31
    assert s.last("init_engine_seconds") == 70.12
    assert s.flags["gpu_memory_utilization"] == 0.92
    assert s.flags["max_num_seqs"] == 128
    # a non-literal value in the config dump stays text; the literal ones are Python values
    assert s.flags["enable_prefix_caching"] is True
    assert s.flags["max_model_len"] == 32768
    caps = [e for p in s.lines for e in p.events if isinstance(e, CaptureSizes)]
    assert caps == [CaptureSizes((1, 2, 4, 8))]
    assert s.max("graph_mem_gib") == 1.06  # the "CUDA graph pool memory" line does not count it twice
    assert [x for r, x in s.metrics["graph_mem_gib"] if r == "Worker_TP0"] == [1.04]
    assert s.serving == [
        Serving(token_usage=pytest.approx(0.234), running_reqs=12, queue_reqs=3, gen_throughput=412.7),
        Serving(token_usage=pytest.approx(0.041), running_reqs=2, queue_reqs=0, gen_throughput=88.1),
    ]
    assert not s.failures


def test_cpu_backend() -> None:
    s = summarize(load(VF / "vllm-0.11-cpu-qwen3-0.6b-ready.log"))
    assert s.last("max_total_num_tokens") == 29_120
    assert s.last("max_concurrency") == 3.55
    assert s.last_phase is Phase.READY
    assert Phase.GRAPH_CAPTURE not in s.phases  # enforce_eager: no capture phase invented
    assert s.flags["enforce_eager"] is True
    # the platform probe line has no tag and no event, but is still read as a vLLM line
    assert s.lines[0].engine is Engine.VLLM
    assert s.lines[0].events == ()


def test_ansi_coloured_ray_tags() -> None:
    s = summarize(load(VF / "vllm-0.10-ansi-ray-pp2-tp2-ready.log"))
    assert s.phases == ALL_PHASES
    assert all("\x1b" not in p.text for p in s.lines)
    assert s.ranks["RayWorkerWrapper pid=812"] == {None, 0}  # TP index learned from "is assigned as"
    assert s.ranks["RayWorkerWrapper pid=455 ip=127.0.0.1"] == {1}
    assert s.metrics["kv_cache_gib"] == [("RayWorkerWrapper pid=812", 33.71),
                                         ("RayWorkerWrapper pid=455 ip=127.0.0.1", 33.69)]
    assert s.last("compile_seconds") == 19.74  # "[repeated 3x across cluster]" stripped
    assert s.max("graph_mem_gib") == 1.41
    assert s.last("max_total_num_tokens") == 441_520
    assert s.flags["pipeline_parallel_size"] == 2
    assert s.serving[-1].token_usage == pytest.approx(0.112)
    # the untagged tqdm line after a tagged blank line
    assert any(p.phase is Phase.GRAPH_CAPTURE and p.done == 27 for p in s.progress)


def test_v0_0_6_memory_profiling_results_and_v0_serving() -> None:
    s = summarize(load(VF / "vllm-0.6.4-v0-llama8b-ready.log"))
    assert s.phases == [Phase.LAUNCH, Phase.LOAD_WEIGHTS, Phase.KV_ALLOCATE, Phase.GRAPH_CAPTURE, Phase.HTTP_UP,
                        Phase.READY]
    assert s.versions == ["0.6.4.post1", "0.6.4.post1"]
    assert s.last("kv_cache_gib") == 50.41
    assert s.last("gpu_total_gib") == 79.15
    assert s.last("weights_gib") == 14.9888
    assert s.last("kv_blocks") == 25809
    assert s.last("graph_mem_gib") == 0.53
    assert "max_total_num_tokens" not in s.metrics  # V0 prints blocks, not tokens
    assert s.flags["gpu_memory_utilization"] == 0.85
    assert s.flags["max_model_len"] == 16384
    assert s.flags["config_format"] == "<ConfigFormat.AUTO: 'auto'>"
    assert s.serving == [Serving(token_usage=pytest.approx(0.079), running_reqs=5, queue_reqs=2, gen_throughput=96.4)]


def test_v1_0_8_multiline_profiling_and_vllmworker_tags() -> None:
    s = summarize(load(VF / "vllm-0.8-v1-profiling-multiline.log"))
    assert s.last("kv_cache_gib") == 62.23
    assert s.last("gpu_total_gib") == 79.19
    assert s.flags["gpu_memory_utilization"] == 0.9
    assert s.ranks["VllmWorker rank=0"] == {0}
    assert s.ranks["VllmWorker rank=1"] == {1}
    assert s.last("max_total_num_tokens") == 2_330_464
    assert s.last_phase is Phase.READY
    assert s.serving[-1] == Serving(token_usage=pytest.approx(0.002), running_reqs=1, queue_reqs=0,
                                    gen_throughput=35.5)


# --------------------------------------------------------------------------------------------
# Failure lines (engines.md §3.2)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "kind", "phase", "needle", "metrics"),
    [
        ("fail-0.11-gpu-busy.log", FailureKind.GPU_BUSY, Phase.INIT, "Free memory on device (21.3/79.19 GiB)",
         {"gpu_free_gib": 21.3, "gpu_total_gib": 79.19}),
        ("fail-0.11-kv-too-small.log", FailureKind.KV_TOO_SMALL, Phase.KV_ALLOCATE, "models's max seq len (131072)",
         {"kv_needed_gib": 16.0, "estimated_max_len": 93296, "context_len": 131072, "kv_cache_gib": 11.39}),
        ("fail-0.33-no-kv-memory.log", FailureKind.OOM_KV_ALLOCATE, Phase.KV_ALLOCATE,
         "No available memory for the cache blocks", {"kv_cache_gib": -0.63}),
        ("fail-0.2x-memory-profiling.log", FailureKind.GPU_BUSY, Phase.COMPILE, "Error in memory profiling", {}),
        ("fail-0.12-sampler-warmup-oom.log", FailureKind.OOM_GRAPH_CAPTURE, Phase.GRAPH_CAPTURE,
         "CUDA out of memory",
         {"oom_tried_gib": 446 / 1024, "oom_capacity_gib": 14.57, "oom_free_gib": 412.75 / 1024}),
        ("fail-0.11-capture-oom.log", FailureKind.OOM_GRAPH_CAPTURE, Phase.GRAPH_CAPTURE,
         "Tried to allocate 1.50 GiB", {"oom_tried_gib": 1.5, "oom_free_gib": 1.02, "oom_capacity_gib": 79.19}),
        ("fail-0.6-v0-maxlen.log", FailureKind.KV_TOO_SMALL, Phase.KV_ALLOCATE,
         "ValueError: The model's max seq len (131072)", {"estimated_max_len": 45872, "context_len": 131072}),
        ("fail-0.11-nccl.log", FailureKind.NCCL, Phase.INIT, "DistBackendError: NCCL error in", {}),
        ("fail-0.11-engine-died-after-ready.log", FailureKind.OOM_RUNTIME, Phase.READY,
         "Tried to allocate 2.00 GiB", {"oom_tried_gib": 2.0}),
    ],
)
def test_failure_fixture(name: str, kind: FailureKind, phase: Phase, needle: str, metrics: dict[str, float]) -> None:
    s = summarize(load(VF / name))
    best = s.best_failure()
    assert best is not None
    assert best[0].specificity == 3
    assert needle in best[0].text
    assert s.failure_kind() is kind
    assert best[1] is phase
    assert s.fatal  # every fixture ends with the engine dead
    for k, v in metrics.items():
        assert s.last(k) == pytest.approx(v), k


def test_failure_texts_carry_vllm_hints() -> None:
    s = summarize(load(VF / "fail-0.11-kv-too-small.log"))
    best = s.best_failure()
    assert best is not None
    assert best[0].hint is not None
    assert "--max-model-len" in best[0].hint
    assert "93296" in best[0].hint
    busy = summarize(load(VF / "fail-0.11-gpu-busy.log")).best_failure()
    assert busy is not None
    assert busy[0].hint == VLLM_HINTS[FailureKind.GPU_BUSY]
    sampler = [f for f, _ in summarize(load(VF / "fail-0.12-sampler-warmup-oom.log")).failures
               if "warming up sampler" in f.text]
    assert sampler
    assert sampler[0].kind is None
    assert sampler[0].hint
    assert "--max-num-seqs" in sampler[0].hint
    # every kind the tracker may decide by phase has a vLLM hint naming vLLM's own flags
    for k in (FailureKind.OOM_WEIGHTS, FailureKind.OOM_GRAPH_CAPTURE, FailureKind.OOM_KV_ALLOCATE):
        assert "--gpu-memory-utilization" in VLLM_HINTS[k] or "--tensor-parallel-size" in VLLM_HINTS[k]


def test_wrappers_rank_below_the_cause() -> None:
    g = VllmGrammar(clock=clock)
    for line in ("(EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1] EngineCore failed to start.",
                 "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
                 "Exception: WorkerProc initialization failed due to an exception in a background process. See "
                 "stack trace for root cause.",
                 "(APIServer pid=9) ERROR 04-18 09:05:05 [c.py:1] Engine core proc EngineCore_DP0 died unexpectedly, "
                 "shutting down client."):
        (f,) = g.parse(line).events
        assert isinstance(f, FailureText)
        assert f.fatal
        assert f.specificity == 0
        assert f.kind is None
    # an unknown exception is a crash, below known causes; benign ERROR lines are not failures
    (f,) = g.parse("KeyError: 'rope_type'").events
    assert isinstance(f, FailureText)
    assert f.kind is FailureKind.CRASH
    assert f.specificity == 2
    assert g.parse("(APIServer pid=1) ERROR 09-10 23:26:29 [config.py:130] Error retrieving safetensors: 'x' is not "
                   "a safetensors repo., retrying 1 of 2").events == ()
    assert g.parse("(Worker pid=1) INFO 03-19 06:35:51 model_runner.py:1399] CUDA graphs can take additional 1~3 "
                   "GiB memory per GPU. If you are running out of memory, consider decreasing").events == ()
    assert g.parse("(APIServer pid=1) WARNING 01-01 00:00:00 [a.py:1] ValueError: only a warning").events == ()
    # NCCL's own warnings are notable, not failures; its errors are
    (w,) = g.parse("gpu-a:2350:2410 [0] NCCL WARN Failed to open libibverbs.so[.1]").events
    assert w == Warning_("gpu-a:2350:2410 [0] NCCL WARN Failed to open libibverbs.so[.1]", kind=FailureKind.NCCL)
    (f,) = g.parse("[rank3]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: "
                   "WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.").events
    assert isinstance(f, FailureText)
    assert f.kind is FailureKind.NCCL


# --------------------------------------------------------------------------------------------
# The real vLLM boots (tests/fixtures/real): figures, failure texts and phases at event level
# --------------------------------------------------------------------------------------------
REAL = json.loads((FIX / "real" / "expected.json").read_text())
REAL_VLLM = sorted(k for k, v in REAL.items() if v["engine"] == "vllm")


def test_all_seven_real_vllm_samples_are_covered() -> None:
    assert [k[:2] for k in REAL_VLLM] == ["04", "06", "09", "12", "13", "20", "21"]


@pytest.mark.parametrize("name", REAL_VLLM)
def test_real_vllm_sample(name: str) -> None:
    exp = REAL[name]
    s = summarize(load(FIX / "real" / name))
    assert s.last_phase is Phase(exp["last_phase"])
    if exp["failure_kind"] is None:
        assert s.best_failure() is None
        assert exp["status"] == "ready"
        assert Phase.READY in s.phases
    else:
        assert s.failure_kind() is FailureKind(exp["failure_kind"])
        assert s.fatal
    assert s.last("max_total_num_tokens") == exp["max_total_num_tokens"]
    assert s.first("kv_cache_gib") == exp["kv_cache_gib"]
    assert (s.max("graph_mem_gib") if exp["graph_mem_gib"] is not None else None) == exp["graph_mem_gib"]
    assert s.flags.get("gpu_memory_utilization") == exp["mem_fraction"]
    assert s.last("context_len") == exp["context_len"]
    # every vLLM sample is recognised as vLLM on its first tagged/stamped line
    assert any(VllmGrammar().sniff(line) for line in load(FIX / "real" / name)[:10])


def test_real_13_capture_oom_happens_in_the_capture_phase() -> None:
    s = summarize(load(FIX / "real" / "13-vllm-qwen3-4b-tp1-graph-capture-oom.log"))
    caps = [p for p in s.progress if p.phase is Phase.GRAPH_CAPTURE]
    assert caps[-1].done == 72
    assert caps[-1].total == 102
    best = s.best_failure()
    assert best is not None
    assert best[0].text == "torch.AcceleratorError: CUDA error: out of memory"
    assert best[0].kind is None
    assert best[1] is Phase.GRAPH_CAPTURE


def test_real_04_kv_too_small_message_and_figures() -> None:
    s = summarize(load(FIX / "real" / "04-vllm-laguna-int4-tp1-maxlen-kv-too-small.log"))
    best = s.best_failure()
    assert best is not None
    assert best[0].text.startswith("ValueError: To serve at least one request")
    assert s.last("kv_needed_gib") == 18.35
    assert s.last("estimated_max_len") == 121840
    assert s.versions[0] == "0.25.1"  # from the ASCII logo
    assert s.last("weights_gib") == 95.46


def test_real_20_gpu_busy_per_worker() -> None:
    s = summarize(load(FIX / "real" / "20-vllm-qwen35-122b-tp4-gpu-busy.log"))
    free = s.metrics["gpu_free_gib"]
    assert sorted(v for _, v in free) == [53.76, 54.11, 54.34, 54.49]
    assert len({r for r, _ in free}) == 4  # one per worker process
    assert s.ranks["Worker pid=60651"] == {None, 0}


def test_real_21_fragment_weights_oom() -> None:
    s = summarize(load(FIX / "real" / "21-vllm-v1-oom-loading-weights-fragment.log"))
    assert s.phases == [Phase.LOAD_WEIGHTS]
    assert s.last("oom_capacity_gib") == 93.09
    assert s.last("oom_free_gib") == pytest.approx(739.81 / 1024)


def test_real_09_v0_flags_and_context() -> None:
    s = summarize(load(FIX / "real" / "09-vllm-qwen25-32b-tp4-v0-ready.log"))
    assert s.flags["tensor_parallel_size"] == 4
    assert s.flags["max_model_len"] == 32768
    assert s.last("kv_blocks") == 2987
    assert {p.rank for p in s.lines if p.rank} == {f"VllmWorkerProcess pid={n}" for n in (1064414, 1064415,
                                                                                           1064416)}


# --------------------------------------------------------------------------------------------
# State across lines and boots
# --------------------------------------------------------------------------------------------
def test_reset_forgets_learned_ranks_and_seen_flags() -> None:
    g = VllmGrammar(clock=clock)
    g.parse("(Worker pid=5) INFO 01-01 00:00:00 [p.py:1] rank 2 in world size 4 is assigned as DP rank 0, PP rank 0, "
            "TP rank 2, EP rank 2")
    assert g.parse("(Worker pid=5) INFO 01-01 00:00:01 [a.py:1] x").tp == 2
    g.reset()
    assert g.parse("(Worker pid=5) INFO 01-01 00:00:01 [a.py:1] x").tp is None


def test_a_second_boot_in_one_log_starts_fresh() -> None:
    lines = load(FIX / "vllm-0.11-llama8b-tp2-ready.log")
    g = VllmGrammar(clock=clock)
    first = summarize(lines, g)
    second = summarize(lines, g)  # the same boot again, e.g. after a restart in one file
    assert first.flags == second.flags
    assert first.phases == second.phases == ALL_PHASES
    # the engine-config dump re-emits its keys in the new boot (the seen-flags were forgotten)
    cfg = [e for p in second.lines for e in p.events if isinstance(e, Flags) and "dtype" in e.values]
    assert cfg


def test_partial_flags_never_override_the_argument_dump() -> None:
    g = VllmGrammar(clock=clock)
    g.parse("INFO 01-01 00:00:00 [a.py:1] non-default args: {'gpu_memory_utilization': 0.8}")
    ev = g.parse("ERROR 01-01 00:00:05 [a.py:1] ValueError: Free memory on device (1.0/80.0 GiB) on startup is less "
                 "than desired GPU memory utilization (0.8, 64.0 GiB).").events
    assert not any(isinstance(e, Flags) for e in ev)


def test_argument_dump_parsers() -> None:
    d = parse_arg_dict("{'model': 'x', 'tp': 2, 'u': 0.9, 'mode': <CompilationMode.VLLM_COMPILE: 3>, "
                       "'spec': {'n': 1, 'm': 'y'}, 'l': [1, 2], 'flag': True, 'none': None}")
    assert d == {"model": "x", "tp": 2, "u": 0.9, "mode": "<CompilationMode.VLLM_COMPILE: 3>",
                 "spec": {"n": 1, "m": "y"}, "l": [1, 2], "flag": True, "none": None}
    cut = parse_arg_dict("{'model': 'x', 'max_model_len': 4096, 'speculative_config': {'model': 'd', 'num")
    assert cut["model"] == "x"
    assert cut["max_model_len"] == 4096
    kv = parse_kv_args("Namespace(host=None, port=8000, allowed_origins=['*'], dtype='auto', x=torch.bfloat16, "
                       "cfg=SpeculativeConfig(method='eagle', n=3), gpu_memory_utilization=0.9)")
    assert kv == {"host": None, "port": 8000, "allowed_origins": ["*"], "dtype": "auto", "x": "torch.bfloat16",
                  "cfg": "SpeculativeConfig(method='eagle', n=3)", "gpu_memory_utilization": 0.9}
    assert parse_arg_dict("") == {}
    assert parse_kv_args("garbage without pairs") == {}


def test_serving_lines_old_and_new() -> None:
    g = VllmGrammar(clock=clock)
    (sv,) = g.parse("(APIServer pid=1) INFO 01-01 00:00:00 [loggers.py:1] Engine 000: Avg prompt throughput: 5.0 "
                    "tokens/s, Avg generation throughput: 1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV "
                    "cache usage: 100.0%, Prefix cache hit rate: 0.0%").events
    assert sv == Serving(token_usage=1.0, running_reqs=1, queue_reqs=0, gen_throughput=1.5)
    (sv,) = g.parse("Engine 001: GPU KV cache usage: 3.5%").events
    assert sv == Serving(token_usage=pytest.approx(0.035))


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_any_text_parses_without_raising(text: str) -> None:
    g = VllmGrammar(clock=clock)
    p = g.parse(text)
    assert isinstance(p, ParsedLine)
    g.sniff(text)
    # prefixes of real lines, cut anywhere
    line = "(Worker_TP0 pid=2350) INFO 08-21 10:03:11 [gpu_worker.py:298] Available KV cache memory: 61.37 GiB"
    g.parse(line[: len(text) % (len(line) + 1)] + text)


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False))
def test_rank_interleaving_does_not_change_per_rank_figures(rnd: random.Random) -> None:
    lines = load(VF / "vllm-0.33-qwen3-32b-tp4-ready.log")
    base = summarize(lines)
    tagged = [x for x in lines if x.startswith("(Worker_TP")]
    other = [x for x in lines if not x.startswith("(Worker_TP")]
    rnd.shuffle(tagged)
    shuffled = summarize(other + tagged)

    def per_rank(s: Summary) -> dict[tuple[str, str | None], list[float]]:
        out: dict[tuple[str, str | None], list[float]] = {}
        for name, vals in s.metrics.items():
            for rank, v in vals:
                out.setdefault((name, rank), []).append(v)
        return {k: sorted(v) for k, v in out.items()}

    assert per_rank(base) == per_rank(shuffled)
    assert set(base.phases) == set(shuffled.phases)


def test_every_emitted_metric_name_is_in_the_vocabulary() -> None:
    files = [*VF.glob("*.log"), FIX / "vllm-0.11-llama8b-tp2-ready.log",
             *(FIX / "real" / n for n in REAL_VLLM)]
    for f in files:
        summarize(load(f))  # summarize asserts each name is in METRIC_NAMES
