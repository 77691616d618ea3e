"""The simulated demo host (kvtui/sim/) and the backend factory.

The figures are checked with this file's own arithmetic from engines.md §2 (never kvcalc).
A manual clock makes most tests instant; one test runs a real boot at high speed.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from kvtui.boot import BootMetrics, BootStatus, BootTracker, Failure, PhaseSpan
from kvtui.engines import parse
from kvtui.hosts.backend import HostBackend, LogStart, aclose_iter
from kvtui.sim.backend import DemoBackend
from kvtui.sim.presets import PRESETS
from kvtui.sim.sglang import default_capture_bs
from kvtui.sim.state import DemoError
from kvtui.sim.unit import parse_timespan, parse_unit

GIB = 1 << 30
T0 = 1_780_000_000.0  # a fixed start time


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(tmp_path: Path, clock: Clock, name: str = "demo", **kw: object) -> DemoBackend:
    kw.setdefault("speed", 1.0)
    b = DemoBackend(name, clock=clock, state_dir=tmp_path / "demo" / name, **kw)  # type: ignore[arg-type]
    b.current_boot()  # creates the state (the first boot starts at the clock's now)
    return b


def texts(backend: DemoBackend, **kw: object) -> list[str]:
    return [r.text for r in backend.read_lines(limit=100_000, **kw)]  # type: ignore[arg-type]


def set_flag(backend: DemoBackend, flag: str, value: str) -> None:
    unit = backend.read_unit()
    new, n = re.subn(rf"--{flag} \S+", f"--{flag} {value}", unit)
    assert n == 1
    backend.write_unit(new)
    backend.daemon_reload()


def until(backend: DemoBackend, clock: Clock, pattern: str, limit: float = 3600.0, step: float = 5.0) -> list[str]:
    """Advance the clock until a line matching ``pattern`` appears; return the boot's lines."""
    end = clock.t + limit
    while clock.t < end:
        lines = texts(backend)
        if any(re.search(pattern, t) for t in lines):
            return lines
        clock.t += step
    raise AssertionError(f"no line matching {pattern!r} within {limit} s")


# ---------------------------------------------------------------------------------------------
# Figures: engines.md §2 with this test's own arithmetic
# ---------------------------------------------------------------------------------------------


def _floats(lines: list[str], pattern: str) -> list[float]:
    return [float(m.group(1)) for t in lines if (m := re.search(pattern, t))]


def check_sizing(lines: list[str], *, cell: int, page: int = 1, draft_ratio: float = 0.0, mla: bool) -> int:
    args = next(t for t in lines if "server_args=ServerArgs(" in t)
    f = float(re.search(r"mem_fraction_static=([\d.]+)", args).group(1))  # type: ignore[union-attr]
    begin = _floats(lines, r"Load weight begin\. avail mem=([\d.]+) GB")
    end = _floats(lines, r"Load weight end\..* avail mem=([\d.]+) GB")
    n_ranks = len({m.group(1) for t in lines if (m := re.search(r" (TP\d+)\] Load weight begin", t))}) or 1
    p, a = min(begin[:n_ranks]), min(end[:n_ranks])  # the target's lines (a draft's come later)
    kv_lines = [t for t in lines if "KV Cache is allocated" in t]
    n = int(re.search(r"#tokens: (\d+)", kv_lines[0]).group(1))  # type: ignore[union-attr]
    assert n % page == 0
    sizing = cell * (1 + draft_ratio)
    expected = math.floor((a - p * (1 - f)) * GIB / sizing) // page * page
    slack = (0.005 + 0.005 * (1 - f)) * GIB / sizing + page  # printed figures are rounded to 0.01
    assert abs(expected - n) <= slack, (expected, n, slack)
    # the pool holds N + page rows of `cell` bytes
    if mla:
        kv = float(re.search(r"KV size: ([\d.]+) GB", kv_lines[0]).group(1))  # type: ignore[union-attr]
    else:
        k = float(re.search(r"K size: ([\d.]+) GB", kv_lines[0]).group(1))  # type: ignore[union-attr]
        v = float(re.search(r"V size: ([\d.]+) GB", kv_lines[0]).group(1))  # type: ignore[union-attr]
        kv = k + v
    assert kv == pytest.approx((n + page) * cell / GIB, abs=0.011)
    # every rank got the same pool
    assert {re.search(r"#tokens: (\d+)", t).group(1) for t in kv_lines} == {str(n)}  # type: ignore[union-attr]
    return n


def test_kimi_boot_reaches_ready_with_the_engines_figures(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    lines = until(b, clock, r"The server is fired up and ready to roll!")
    # P1 … P7 in the SGLang 0.5.14 formats, per-rank prefixes, tqdm without a prefix
    assert lines[0] == "Started SGLang server (Kimi K2.6, TP8)."
    order = [
        "server_args=ServerArgs(",
        "Init torch distributed ends. elapsed=",
        "Load weight begin. avail mem=",
        "Loading safetensors checkpoint shards: 100% Completed | 64/64",
        "Load weight end. elapsed=",
        "Using KV cache dtype: torch.bfloat16",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: ",
        "Memory pool end. avail mem=",
        "Capture target decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs=[1, 2, 4, 8, 12, 16, 24, 32, "
        "40, 48, 56, 64], avail mem=",
        "Capturing batches (bs=64 avail_mem=",
        "Capture target decode CUDA graph end. elapsed=",
        "max_total_num_tokens=",
        "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        '"POST /generate HTTP/1.1" 200 OK',
        "The server is fired up and ready to roll!",
    ]
    pos = [next(i for i, t in enumerate(lines) if s in t) for s in order]
    assert pos == sorted(pos)
    assert all(re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} TP[0-7]\] ", t) for t in lines if "Init torch" in t)
    assert len([t for t in lines if "Memory pool end" in t]) == 8
    # tqdm as a real journal holds it: each weight-shard redraw its own record ("\r" first, the
    # bar format ends with a newline; close() redraws once more and adds an empty line) ...
    shard_recs = [t for t in lines if "Loading safetensors checkpoint shards" in t]
    assert len(shard_recs) == 64 + 2
    assert all(t.startswith("\r") and t.count("\r") == 1 for t in shard_recs)
    assert shard_recs[-1][1:].startswith("Loading safetensors checkpoint shards: 100% Completed | 64/64 [")
    assert lines[lines.index("") - 1] == shard_recs[-1]
    # ... and the capture loop's bar ONE record of \r-joined redraws (the newline comes at close)
    cap_recs = [t for t in lines if "Capturing batches" in t]
    assert len(cap_recs) == 1
    redraws = cap_recs[0].split("\r")
    assert redraws[0] == ""
    assert redraws[1] == "  0%|          | 0/12 [00:00<?, ?it/s]"
    assert all(t.startswith("Capturing batches (bs=") for t in redraws[2:])
    assert redraws[-1].startswith("Capturing batches (bs=1 avail_mem=")
    assert "100%|██████████| 12/12 [" in redraws[-1]
    n = check_sizing(lines, cell=(512 + 64) * 61 * 2, mla=True)
    assert n == 192_406  # the brief's story: a pool smaller than the 200,000-token context
    summary = next(t for t in lines if "max_total_num_tokens=" in t)
    assert f"max_total_num_tokens={n}, " in summary
    assert "max_running_requests=64, context_len=200000" in summary
    # the request table comes out of the headroom: 65 × 200,004 × 4 B ≈ 52 MB, not GB
    a0 = _floats(lines, r"TP0\] Load weight end\..* avail mem=([\d.]+) GB")[0]
    pool_end0 = _floats(lines, r"TP0\] Memory pool end\. avail mem=([\d.]+) GB")[0]
    kv0 = _floats(lines, r"TP0\] KV Cache is allocated.*KV size: ([\d.]+) GB")[0]
    req_table = 65 * 200_004 * 4 / GIB
    assert pool_end0 == pytest.approx(a0 - kv0 - req_table - 16 / 1024, abs=0.02)
    # capture: the trail falls while graphs are captured; usage = begin avail - end avail
    trail = _floats(redraws, r"Capturing batches \(bs=\d+ avail_mem=([\d.]+) GB\)")
    assert trail == sorted(trail, reverse=True)
    assert len(trail) == 12 * 2 + 1  # per size: set_description, update; then close()'s refresh
    sizes = [int(m.group(1)) for t in redraws if (m := re.search(r"\(bs=(\d+) ", t))]
    assert list(dict.fromkeys(sizes)) == sorted(default_capture_bs(64), reverse=True)
    # the record is journald's when the bar closed: after the last graph, before the "end" lines
    recs = b.read_lines(limit=100_000)
    cap = next(r for r in recs if "Capturing batches" in r.text)
    end_rec = next(r for r in recs if "TP0] Capture target decode CUDA graph end" in r.text)
    begin_rec = next(r for r in recs if "TP7] Capture target decode CUDA graph begin" in r.text)
    assert cap.ts is not None
    assert end_rec.ts is not None
    assert begin_rec.ts is not None
    assert 0 < (end_rec.ts - cap.ts).total_seconds() < 0.5 < (cap.ts - begin_rec.ts).total_seconds()
    cap_end = next(t for t in lines if "TP0] Capture target decode CUDA graph end" in t)
    usage = float(re.search(r"mem usage=([\d.]+) GB", cap_end).group(1))  # type: ignore[union-attr]
    after = float(re.search(r"avail mem=([\d.]+) GB", cap_end).group(1))  # type: ignore[union-attr]
    assert usage == pytest.approx(pool_end0 - after, abs=0.011)
    assert f"available_gpu_mem={after:.2f} GB" in summary


def test_llama_tp4_gqa_old_capture_format_and_idle_gpus(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, model="llama-70b")
    lines = until(b, clock, r"fired up and ready")
    assert any(
        t.endswith("] Capture cuda graph bs [" + ", ".join(map(str, default_capture_bs(512))) + "]") for t in lines
    )
    assert any("Capture cuda graph end. Time elapsed: " in t for t in lines)
    assert not any("dtype: torch" in t for t in lines if "KV Cache is allocated" in t)  # 0.5.10 format
    check_sizing(lines, cell=(8 // 4) * (128 + 128) * 80 * 2, mla=False)
    summary = next(t for t in lines if "max_total_num_tokens=" in t)
    n = int(re.search(r"max_total_num_tokens=(\d+)", summary).group(1))  # type: ignore[union-attr]
    mrr = int(re.search(r"max_running_requests=(\d+)", summary).group(1))  # type: ignore[union-attr]
    assert mrr == min(max(int(n / 131072 * 512), 2048), 4096)  # the engine's default
    samples = b.samples_at(clock.t)
    assert [s.index for s in samples] == list(range(8))
    assert all(s.used_mib > 60_000 for s in samples[:4])
    assert all(s.used_mib < 10 and not s.processes for s in samples[4:])


def test_eagle_draft_repeats_load_pool_and_capture(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, model="qwen3-32b-eagle3")
    lines = until(b, clock, r"fired up and ready")
    assert len([t for t in lines if "Load weight end" in t]) == 4  # target + draft on 2 ranks
    assert len([t for t in lines if "type=LlamaForCausalLMEagle3" in t]) == 2
    kv = [t for t in lines if "KV Cache is allocated" in t]
    assert len(kv) == 4
    assert len({re.search(r"#tokens: (\d+)", t).group(1) for t in kv}) == 1  # type: ignore[union-attr]
    assert any("Capture target verify CUDA graph begin. backend=full, num_tokens_per_bs=4" in t for t in lines)
    assert any("Capture draft decode CUDA graph end." in t for t in lines)
    # 0.5.14: the target's cell is inflated by draft_layers/target_layers when sizing
    check_sizing(lines, cell=(8 // 2) * 256 * 64 * 2, draft_ratio=1 / 64, mla=False)
    draft_kv = kv[2]
    n = int(re.search(r"#tokens: (\d+)", draft_kv).group(1))  # type: ignore[union-attr]
    k = float(re.search(r"K size: ([\d.]+) GB", draft_kv).group(1))  # type: ignore[union-attr]
    assert k == pytest.approx((n + 1) * 4 * 128 * 1 * 2 / GIB, abs=0.006)


def test_vllm_variant_boot_and_sizing(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, engine="vllm")
    assert b.model_key == "vllm-llama-70b"
    lines = until(b, clock, r"Application startup complete\.")
    assert lines[0] == "Started vLLM server (Llama 3.1 70B, TP4)."
    assert re.fullmatch(
        r"\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[api_server\.py:1839\] vLLM API server version 0\.11\.0",
        lines[1],
    )
    assert "'tensor_parallel_size': 4, 'gpu_memory_utilization': 0.9}" in lines[2]
    # engines.md §3.3 (0.11): kv = total·u − non-KV; blocks of 16 tokens × cell bytes
    weights = _floats(lines, r"Model loading took ([\d.]+) GiB")
    assert len(weights) == 4
    assert weights[0] == pytest.approx(131.42 / 4, abs=1e-3)
    kv = _floats(lines, r"Available KV cache memory: ([\d.]+) GiB")[0]
    assert kv + weights[0] < 97887 / 1024 * 0.9  # the budget is a fraction of the device total
    tokens = int(next(t for t in lines if "GPU KV cache size" in t).split("size: ")[1].split(" ")[0].replace(",", ""))
    cell = (8 // 4) * (128 + 128) * 80 * 2
    assert tokens % 16 == 0
    assert tokens == pytest.approx(kv * GIB / cell, abs=0.005 * GIB / cell + 16)
    conc = _floats(lines, r"Maximum concurrency for 131,072 tokens per request: ([\d.]+)x")[0]
    assert conc == pytest.approx(tokens / 131072, abs=0.006)
    assert any("Capturing CUDA graphs (decode, FULL): 100%" in t for t in lines)
    assert len([t for t in lines if "Graph capturing finished in" in t]) == 4
    clock.t += 60
    serving = [t for t in texts(b) if "Engine 000: Avg prompt throughput" in t]
    assert serving
    assert re.search(r"GPU KV cache usage: [\d.]+%, Prefix cache hit rate: [\d.]+%$", serving[-1])
    samples = b.samples_at(clock.t)
    assert all(s.used_mib / 1024 > 80 for s in samples[:4])  # ≈ 0.9 × 95.6 GiB (minus the profile's peak)
    assert all(s.used_mib < 10 for s in samples[4:])


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("0.35", "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"),
        ("0.40", "ValueError: To serve at least one request with the models's max seq len (131072), (10.00 GiB KV"),
        (
            "busy",
            "ValueError: Free memory on device cuda:2 (75.05/95.59 GiB) on startup is less than desired GPU "
            "memory utilization (0.9, 86.03 GiB).",
        ),
    ],
)
def test_vllm_variant_failures(tmp_path: Path, setup: str, expected: str) -> None:
    clock = Clock()
    b = make(tmp_path, clock, engine="vllm")
    if setup == "busy":
        b.set_foreign_process(gpu=2, mib=20480)
    else:
        set_flag(b, "gpu-memory-utilization", setup)
    b.restart()
    clock.t += 1
    lines = until(b, clock, r"Failed with result 'exit-code'")
    assert any(expected in t for t in lines)
    assert any(
        t.endswith("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
        for t in lines
    )
    assert "vllm-llama70b.service: Main process exited, code=exited, status=1/FAILURE" in lines


# ---------------------------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------------------------


def test_too_high_fraction_dies_in_capture_with_the_oom_text(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    set_flag(b, "mem-fraction-static", "0.99")
    b.restart()
    clock.t += 10
    lines = until(b, clock, r"Failed with result")
    boot = lines[lines.index(next(t for t in lines if t.startswith("Started "))) :]
    assert any("Capture target decode CUDA graph begin" in t for t in boot)
    i = next(i for i, t in enumerate(boot) if "Scheduler hit an exception: Traceback (most recent call last):" in t)
    assert re.match(r"\[[\d\- :.]+ TP\d\] Scheduler hit an exception", boot[i])
    tail = boot[i:]
    assert any(t.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ") for t in tail)
    cap = next(t for t in tail if t.startswith("Exception: Capture cuda graph failed: CUDA out of memory."))
    assert re.search(r"Tried to allocate [\d.]+ (GiB|MiB)\. GPU \d has a total capacity of 95\.59 GiB of which", cap)
    assert "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)" in tail
    assert any("Received sigquit from a child process. It usually means the child failed." in t for t in tail)
    assert "sglang-k26.service: Main process exited, code=killed, status=9/KILL" in tail
    assert "sglang-k26.service: Failed with result 'signal'." in tail
    assert not any("fired up and ready" in t for t in boot)
    # the OOM came while the capture was running: TP0's bar did not finish; its pending line is
    # one record that journald ended just before the failing rank's traceback (pid-change), or
    # that TP0's own exception closed
    caps = [t for t in boot if "Capturing batches" in t]
    assert len(caps) == 1
    assert boot.index(caps[0]) == i - 1
    redraws = [p for p in caps[0].split("\r") if p]
    assert redraws[1].startswith("Capturing batches (bs=64 avail_mem=")
    assert not any("100%|" in t for t in redraws)
    # GPU memory is released when the process tree dies
    assert b.server_pids_at(clock.t) == set()
    assert all(s.used_mib < 10 for s in b.samples_at(clock.t))


def test_a_capture_that_leaves_too_little_dies_at_the_warm_up_request(tmp_path: Path) -> None:
    """0.976 on the Kimi preset: every graph is captured, but less than first_forward_gib (0.5 GiB)
    is left; the warm-up request's first forward dies with a CUDA OOM from the scheduler's event
    loop, before "fired up", and the tracker calls it oom_runtime in http_up (not graph capture).
    0.975 leaves enough and is ready: the simulation's edge that the tune's margin stays below."""
    clock = Clock()
    b = make(tmp_path, clock)
    set_flag(b, "mem-fraction-static", "0.976")
    b.restart()
    clock.t += 10
    lines = until(b, clock, r"Failed with result")
    boot = lines[lines.index(next(t for t in lines if t.startswith("Started "))) :]
    end = next(t for t in boot if "Capture target decode CUDA graph end." in t)
    left = float(re.findall(r"avail mem=([\d.]+) GB", end)[0])
    assert left < 0.5
    i = next(i for i, t in enumerate(boot) if "Scheduler hit an exception: Traceback" in t)
    assert "Prefill batch. #new-seq: 1, #new-token: 7" in boot[i - 1] or any(
        "Prefill batch. #new-seq: 1" in t for t in boot[i - 3 : i])
    tail = boot[i:]
    assert any("in event_loop_overlap" in t for t in tail)
    assert any(t.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ") for t in tail)
    assert any("SIGQUIT received. signum=None, frame=None. It usually means one child failed." in t for t in tail)
    assert not any("fired up and ready" in t for t in boot)
    tracker = BootTracker()
    for parsed in parse.parse_bytes("\n".join(boot).encode()):
        tracker.feed(parsed)
    dead = tracker.boots[-1]
    assert dead.status is BootStatus.FAILED
    assert dead.failure is not None
    assert dead.failure.kind.value == "oom_runtime"
    assert dead.failure.phase.value == "http_up"
    # worded by the phase it came in: the warm-up request, not "while serving"
    assert "out of GPU memory at the warm-up request" in dead.failure.hint
    assert "while serving" not in dead.failure.hint
    assert dead.metrics.max_total_num_tokens is not None  # the pool was sized: the calculator can use it


def test_too_low_fraction_fails_with_not_enough_memory(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    set_flag(b, "mem-fraction-static", "0.70")
    b.restart()
    clock.t += 10
    lines = until(b, clock, r"Failed with result")
    assert any(
        t == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.7"
        for t in lines
    )
    boot = lines[lines.index([t for t in lines if t.startswith("Started ")][-1]) :]
    assert not any("KV Cache is allocated" in t for t in boot)
    assert not any("Capture" in t for t in boot)
    assert any("Received sigquit" in t for t in boot)


def test_unknown_flag_is_refused_by_argparse(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    b.write_unit(b.read_unit().replace("--tp 8", "--tp 8 --mem-fraction 0.9 --no-such-flag 3"))
    b.daemon_reload()
    b.restart()
    clock.t += 5
    lines = texts(b)
    # --mem-fraction is a unique abbreviation (argparse accepts it); --no-such-flag is not an option
    assert "launch_server.py: error: unrecognized arguments: --no-such-flag 3" in lines
    assert "sglang-k26.service: Main process exited, code=exited, status=2/INVALIDARGUMENT" in lines
    assert "sglang-k26.service: Failed with result 'exit-code'." in lines
    assert b.unit_status() == "activating (auto-restart)"


def test_restart_on_failure_chain_then_a_reload_fixes_it(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, speed=10.0)
    set_flag(b, "mem-fraction-static", "0.70")
    b.restart()
    clock.t += 1
    first = b.current_boot()
    assert first == 1
    clock.t += 600
    later = b.current_boot()
    assert later is not None
    assert later > first + 5
    lines = texts(b, after_cursor=b.cursor(first, 0))
    counters = [int(m.group(1)) for t in lines if (m := re.search(r"restart counter is at (\d+)\.", t))]
    assert counters[:3] == [1, 2, 3]
    assert lines.count("Stopped SGLang server (Kimi K2.6, TP8).") >= 5
    # a daemon-reload with a good fraction: the next automatic restart uses it and gets ready
    set_flag(b, "mem-fraction-static", "0.85")
    clock.t += 120
    lines = texts(b)
    assert any("mem_fraction_static=0.85" in t for t in lines)
    assert any("fired up and ready" in t for t in lines)
    assert b.unit_status() == "active (running)"


def test_restart_during_a_restart_chain_stops_the_running_boot_at_once(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, speed=10.0)
    set_flag(b, "mem-fraction-static", "0.99")
    b.restart()
    clock.t += 1
    while b.current_boot() != 2:  # boot 1 dies in capture, boot 2 is the automatic restart
        clock.t += 1.0
    clock.t += 3  # the second boot of the chain is loading its weights
    assert b.unit_status() == "active (running)"
    set_flag(b, "mem-fraction-static", "0.85")  # a reload during the chain …
    b.restart()  # … and an explicit restart: the running boot stops now, the new one starts
    stopped_at = clock.t
    clock.t += 2
    lines = texts(b, after_cursor=b.cursor(1, 0))
    i = lines.index("Stopping SGLang server (Kimi K2.6, TP8)...")
    assert lines[i + 4] == "Started SGLang server (Kimi K2.6, TP8)."
    assert sum("Capture cuda graph failed" in t for t in lines) == 1  # only the first boot got that far
    recs = b.read_lines(after_cursor=b.cursor(1, 0), limit=100_000)
    started = [r for r in recs if r.text.startswith("Started ")][-1]
    assert started.ts is not None
    assert started.ts.timestamp() - stopped_at == pytest.approx(0.17, abs=0.01)
    clock.t += 60
    assert any("mem_fraction_static=0.85" in t for t in texts(b))
    assert any("fired up and ready" in t for t in texts(b))


def test_readonly_host_refuses_changes(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, readonly=True)
    with pytest.raises(DemoError, match="readonly"):
        b.write_unit("x")
    with pytest.raises(DemoError, match="readonly"):
        b.restart()


# ---------------------------------------------------------------------------------------------
# State, restarts, cursors, determinism
# ---------------------------------------------------------------------------------------------


def test_state_persists_across_instances(tmp_path: Path) -> None:
    clock = Clock()
    one = make(tmp_path, clock)
    assert one.unit_path == tmp_path / "demo" / "demo" / "sglang-k26.service"
    assert one.unit_path.read_text() == one.read_unit()
    set_flag(one, "mem-fraction-static", "0.88")
    clock.t += 5
    one.restart()
    clock.t += 30
    two = DemoBackend("demo", clock=clock, state_dir=tmp_path / "demo" / "demo")
    assert "--mem-fraction-static 0.88" in two.read_unit()
    assert two.current_boot() == one.current_boot() == 1
    assert "0.88" in two.effective_execstart()
    assert texts(two) == texts(one)
    assert any("mem_fraction_static=0.88" in t for t in texts(two))
    # and a change by the second is seen by the first (which re-reads the state)
    two.restart()
    clock.t += 10
    assert one.current_boot() == 2


def test_edit_without_reload_is_not_used(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    b.write_unit(b.read_unit().replace("--mem-fraction-static 0.85", "--mem-fraction-static 0.9"))
    assert b.needs_reload()
    assert "--mem-fraction-static 0.85" in b.effective_execstart()
    b.restart()
    clock.t += 30
    assert any("mem_fraction_static=0.85" in t for t in texts(b))
    b.daemon_reload()
    assert not b.needs_reload()
    es = b.effective_execstart()
    assert es.startswith("ExecStart={ path=/opt/sglang/venv/bin/python ; argv[]=/opt/sglang/venv/bin/python -m ")
    assert "--mem-fraction-static 0.9 " in es
    assert re.search(r"; pid=\d+ ; code=\(null\) ; status=0/0 }$", es)


def test_restart_writes_systemd_lines_and_starts_a_new_boot(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    until(b, clock, "fired up and ready")
    clock.t += 30
    old_pids = b.server_pids_at(clock.t)
    assert len(old_pids) == 10  # main + 8 schedulers + detokenizer
    first = b.current_boot()
    b.restart()
    assert b.unit_status() == "deactivating (stop-sigterm)"
    clock.t += 10
    assert b.current_boot() == (first or 0) + 1
    all_lines = texts(b, after_cursor=b.cursor(0, 0))
    i = all_lines.index("Stopping SGLang server (Kimi K2.6, TP8)...")
    assert all_lines[i + 1 : i + 4] == [
        "sglang-k26.service: Deactivated successfully.",
        "Stopped SGLang server (Kimi K2.6, TP8).",
        all_lines[i + 3],
    ]
    assert re.fullmatch(r"sglang-k26\.service: Consumed (\d+min )?[\d.]+s CPU time\.", all_lines[i + 3])
    assert all_lines[i + 4] == "Started SGLang server (Kimi K2.6, TP8)."
    assert "server_args=ServerArgs(" in all_lines[i + 5]
    # the new boot has new PIDs; CURRENT_BOOT starts at its Started line
    assert texts(b)[0] == "Started SGLang server (Kimi K2.6, TP8)."
    assert b.server_pids_at(clock.t).isdisjoint(old_pids)
    b.stop()
    clock.t += 5
    assert b.server_pids_at(clock.t) == set()
    assert b.unit_status() == "inactive (dead)"


def test_cursors_resume_without_loss_or_repetition(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, speed=4.0)
    got: list[tuple[str | None, str]] = []
    cursor: str | None = None
    for step in range(120):
        clock.t += 1.7
        if step == 40:
            b.restart()
        if step == 80:
            set_flag(b, "mem-fraction-static", "0.99")
            b.restart()
        batch = b.read_lines(after_cursor=cursor, limit=37) if cursor else b.read_lines(limit=37)
        got += [(r.cursor, r.text) for r in batch]
        if batch:
            cursor = batch[-1].cursor
    full = [(r.cursor, r.text) for r in b.read_lines(after_cursor=b.cursor(0, 0), limit=100_000)]
    full = [(b.cursor(0, 0), "Started SGLang server (Kimi K2.6, TP8)."), *full]
    assert len({c for c, _ in got}) == len(got)  # no repetition
    assert got == full[: len(got)]  # no loss, same order
    assert len(got) > 400
    assert sum(1 for _, t in got if t.startswith("Started ")) == 3
    times = [r.ts for r in b.read_lines(after_cursor=b.cursor(0, 0), limit=100_000)]
    assert times == sorted(times)  # type: ignore[type-var]


def test_determinism_same_seed_flags_start(tmp_path: Path) -> None:
    def run(seed: int, where: str) -> list[str]:
        clock = Clock()
        b = make(tmp_path / where, clock, seed=seed, speed=20.0)
        clock.t += 200
        return texts(b)

    a, b_, c = run(3, "a"), run(3, "b"), run(4, "c")
    assert a == b_
    assert len(a) > 300
    assert a != c
    # different seeds: different per-rank jitter, same shape
    assert [t[:12] for t in a if "Load weight" in t] == [t[:12] for t in c if "Load weight" in t]


# ---------------------------------------------------------------------------------------------
# GPUs and processes
# ---------------------------------------------------------------------------------------------


def test_gpu_memory_follows_the_phases(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, gpus=[0, 3])
    script = b.boot_script()
    assert script is not None
    start = script.start
    idle = b.samples_at(start + 1)
    assert [s.index for s in idle] == [0, 3]
    assert all(s.used_mib <= 1 for s in idle)
    lines = script.lines

    def t_of(s: str) -> float:
        return next(ln.t for ln in lines if s in ln.text)

    mid_load = (t_of("Load weight begin") + t_of("Load weight end")) / 2
    after_load = t_of("TP0] Load weight end") + 0.01
    after_pool = t_of("TP7] Memory pool end") + 0.01
    ready = script.end_t + 1
    used = [b.samples_at(t)[0].used_mib / 1024 for t in (mid_load, after_load, after_pool, ready)]
    assert 20 < used[0] < 60  # weights ramping
    assert 67 < used[1] < 70  # ≈ 67.9 GiB of weights + context
    assert used[2] - used[1] == pytest.approx(12.59 + 0.05 + 0.016, abs=0.05)  # the pool jump
    assert used[3] - used[2] == pytest.approx(1.79, abs=0.05)  # CUDA graphs
    s = b.samples_at(ready)[0]
    assert s.total_mib == 97887
    assert s.name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert s.uuid
    assert s.uuid.startswith("GPU-")
    assert s.processes[0].pid in script.rank_pids.values()
    assert s.processes[0].used_mib == pytest.approx(s.used_mib - 1, abs=1)


async def test_gpu_stream_processes_and_foreign(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    await b.start()
    stream = b.gpu_stream(interval_s=0.0)
    first = await anext(stream)
    assert len(first) == 8
    await aclose_iter(stream)
    seeded = b.set_foreign_process()
    assert seeded is not None
    assert seeded == make(tmp_path / "other", Clock()).set_foreign_process()  # from the seed
    fp = b.set_foreign_process(gpu=3, mib=20480, pid=41877)
    assert fp is not None
    samples = b.samples_at(clock.t)
    assert samples[3].used_mib >= 20480
    procs = await b.gpu_processes()
    assert 41877 in {p.pid for p in procs}
    assert 41877 not in await b.server_pids()
    # the next boot feels the stale process: P is the minimum over ranks, and the ranks say so
    b.restart()
    clock.t += 5
    lines = until(b, clock, r"Load weight end", step=2.0)
    assert any("The memory capacity is unbalanced. Some GPUs may be occupied by other processes." in t for t in lines)
    begin = _floats(lines, r"TP3\] Load weight begin\. avail mem=([\d.]+) GB")
    assert begin[-1] == pytest.approx(94.7 - 20.0, abs=0.1)
    b.set_foreign_process(False)
    assert all(p.pid != 41877 for p in await b.gpu_processes())
    await b.close()


async def test_run_status_and_protocol(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    assert isinstance(b, HostBackend)
    res = await b.run("nvidia-smi")
    assert res.exit_status == 127
    assert "demo host runs no shell commands" in res.stderr
    await b.start()
    assert b.status().state == "connected"
    await b.close()
    assert b.status().state == "closed"


# ---------------------------------------------------------------------------------------------
# follow_log (async, real clock)
# ---------------------------------------------------------------------------------------------


async def test_follow_log_real_boot_at_high_speed_reaches_ready(tmp_path: Path) -> None:
    """The real clock: a whole boot in about a second of wall time, and no line handed out
    before the clock reaches it (what is checked does not depend on the machine's speed)."""
    b = DemoBackend("fast", speed=600.0, state_dir=tmp_path / "fast", poll_interval=0.02)
    await b.start()
    seen: list[str] = []
    early: list[str] = []

    async def follow() -> None:
        async for batch in b.follow_log():
            now = time.time()
            early.extend(r.text for r in batch if r.ts is not None and r.ts.timestamp() > now)
            seen.extend(r.text for r in batch)
            assert all(r.source == "demo" and r.cursor for r in batch)
            if any("fired up and ready" in r.text for r in batch):
                return

    await asyncio.wait_for(follow(), timeout=120)  # a hang guard; the boot itself is ~1 s of wall time
    script = b.boot_script()
    assert script is not None
    assert script.duration < 2.0  # 600x: a Kimi boot of minutes in about a second
    assert early == []
    assert seen[0] == "Started SGLang server (Kimi K2.6, TP8)."
    assert sum("Loading safetensors" in t for t in seen) == 64 + 2  # 0 %, each shard, close()'s redraw
    assert sum("Capturing batches" in t for t in seen) == 1  # one record of \r-joined redraws
    await b.close()


async def test_follow_next_boot_only_yields_new_lines(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, poll_interval=0.001)
    clock.t += 400
    it = b.follow_log(LogStart.NEXT_BOOT)
    task = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0.02)
    assert not task.done()  # nothing new yet
    b.restart()
    clock.t += 3
    batch = await asyncio.wait_for(task, 30)  # a hang guard
    assert batch[0].text == "Stopping SGLang server (Kimi K2.6, TP8)..."
    assert "Started SGLang server (Kimi K2.6, TP8)." in [r.text for r in batch]
    await b.close()
    await aclose_iter(it)


def test_current_boot_backlog_is_bounded(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    clock.t += 3 * 24 * 3600  # three days of serving
    lines = b.read_lines(limit=100_000)
    assert lines[0].text.startswith("Started ")
    assert sum("Decode batch" in r.text or "Prefill batch" in r.text for r in lines) <= 1000 + 2
    assert any("fired up and ready" in r.text for r in lines)


# ---------------------------------------------------------------------------------------------
# Units, presets, factory
# ---------------------------------------------------------------------------------------------


def test_parse_unit() -> None:
    text = (
        "[Unit]\nDescription=My server\n[Service]\n"
        'Environment=A=1 "B=two words"\nEnvironment=CUDA_VISIBLE_DEVICES=4,5\n'
        "ExecStart=/bin/false\nExecStart=\n"
        "ExecStart=/usr/bin/python3 -m sglang.launch_server \\\n"
        "  # a comment inside the continuation\n"
        "  --model-path '/models/with space' \\\n  --tp 2\n"
        "Restart=on-failure\nRestartSec=1min 30s\n"
    )
    u = parse_unit(text)
    assert u.error is None
    assert u.description == "My server"
    assert u.argv == (
        "/usr/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/with space",
        "--tp",
        "2",
    )
    assert u.env == {"A": "1", "B": "two words", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert (u.restart, u.restart_sec) == ("on-failure", 90.0)
    assert parse_unit("[Service]\nType=simple\n").error is not None
    assert parse_unit("[Service]\nExecStart=/a\nExecStart=/b\n").error is not None
    assert parse_timespan("500ms") == 0.5
    assert parse_timespan("10") == 10.0
    assert parse_timespan("soon") is None


def test_bad_unit_refuses_restart(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock)
    b.write_unit("[Service]\nType=simple\n")
    b.daemon_reload()
    with pytest.raises(DemoError, match="bad unit file setting"):
        b.restart()


def test_presets_and_bad_config(tmp_path: Path) -> None:
    assert set(PRESETS) == {"kimi-k2.6", "llama-70b", "qwen3-32b-eagle3", "vllm-llama-70b", "deepseek-r1-2node"}
    clock = Clock()
    assert make(tmp_path, clock, name="x", model="LLAMA").model_key == "llama-70b"
    with pytest.raises(DemoError, match=r"not a demo preset; expected one of \(a name or a unique prefix\): kimi"):
        DemoBackend("y", model="gpt-5", state_dir=tmp_path / "y")
    with pytest.raises(DemoError, match="do not exist"):
        DemoBackend("z", gpus=[9], state_dir=tmp_path / "z")
    with pytest.raises(DemoError, match=r"demo host 'w': demo_model 'kimi' is the sglang preset kimi-k2\.6 but "
                       r"demo_engine is 'vllm'; expected a vllm preset: vllm-llama-70b \(vllm\)"):
        DemoBackend("w", engine="vllm", model="kimi", state_dir=tmp_path / "w")
    with pytest.raises(DemoError, match="demo_engine 'trt' is not simulated; expected one of: sglang, vllm"):
        DemoBackend("v", engine="trt", state_dir=tmp_path / "v")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("model", ["kimi", "KIMI-K2.6", "llama", "llama-70b-tp4", "qwen", "vllm", "vllm-llama-70b",
                                   "gpt-5", "k", None])
def test_a_hosts_file_that_loads_is_a_demo_host_that_starts(tmp_path: Path, engine: str, model: str | None) -> None:
    """config (pure core) and the demo host resolve demo_model / demo_engine alike."""
    from kvtui.config import ConfigError, parse_config

    body = f'[hosts.d]\ndemo = true\ndemo_engine = "{engine}"\n' + (f'demo_model = "{model}"\n' if model is not None
                                                                     else "")
    try:
        host = parse_config(body, tmp_path / "hosts.toml").host("d")
    except ConfigError as exc:
        problems = exc.problems
        with pytest.raises(DemoError):
            DemoBackend("d", engine=engine, model=model, state_dir=tmp_path / "d")
        assert [p.key for p in problems] == ["demo_model"]
        return
    b = DemoBackend("d", host, state_dir=tmp_path / "d")
    assert PRESETS[b.model_key].engine == engine


def test_factory_builds_each_kind_lazily(tmp_path: Path) -> None:
    from kvtui.config import HostConfig
    from kvtui.hosts.factory import make_backend
    from kvtui.hosts.local import LocalBackend
    from kvtui.hosts.ssh import SshBackend

    clock = Clock()
    demo = make_backend("demo-b", HostConfig(demo=True, demo_speed=10.0, demo_seed=7), clock=clock)
    assert isinstance(demo, DemoBackend)
    assert (demo.speed, demo.seed, demo.clock) == (10.0, 7, clock)
    assert demo.state_dir == tmp_path / "state" / "kvtui" / "demo" / "demo-b"
    local = make_backend("here", HostConfig(local=True, log_file="/tmp/x.log"))
    assert isinstance(local, LocalBackend)
    ssh = make_backend("far", HostConfig(ssh="root@gpu-a", unit="sglang.service"))
    assert isinstance(ssh, SshBackend)
    assert isinstance(demo, HostBackend)


# ---------------------------------------------------------------------------------------------
# The journal's tqdm records through the real parser and tracker
# ---------------------------------------------------------------------------------------------


class _Seen(NamedTuple):
    t: float
    status: BootStatus
    spans: list[PhaseSpan]
    failure: Failure | None
    metrics: BootMetrics

    def span(self, phase: str) -> PhaseSpan | None:
        return next((s for s in self.spans if s.name.value == phase and s.model.value == "target"), None)


def _track(b: DemoBackend, clock: Clock, until_t: float, step: float) -> list[_Seen]:
    """Follow the journal with cursors like the monitor, feeding the real LineParser and
    BootTracker; the current boot after each poll."""
    from dataclasses import replace

    from kvtui.engines.parse import LineParser

    parser, tracker = LineParser(), BootTracker()
    cursor: str | None = None
    seen: list[_Seen] = []
    while clock.t < until_t:
        batch = b.read_lines(after_cursor=cursor, limit=100_000) if cursor else b.read_lines(limit=100_000)
        for rec in batch:
            for p in parser.feed(rec):
                tracker.feed(p)
            cursor = rec.cursor
        boot = tracker.current
        if boot is not None:
            seen.append(_Seen(clock.t, boot.status, [replace(s) for s in boot.phases], boot.failure, boot.metrics))
        clock.t += step
    return seen


def test_parser_and_tracker_follow_the_journals_progress_records(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, speed=5.0)
    script = b.boot_script()
    assert script is not None
    seen = _track(b, clock, script.end_t + 1, 0.25)
    last = seen[-1]
    assert last.status is BootStatus.READY
    assert last.failure is None
    assert last.metrics.max_total_num_tokens == 192_406
    # weights: one record per shard, so the span's progress climbs while loading
    loads = [(s.progress_done, s.progress_total) for st in seen if (s := st.span("load_weights"))]
    done = sorted({d for d, _ in loads if d is not None})
    assert len(done) > 20
    assert done[-1] == 64
    assert {t for _, t in loads if t is not None} == {64}
    # capture: the bar is one record at its close, so progress jumps from nothing to 12/12 —
    # exactly what a real journal lets a follower see
    caps = [(s.progress_done, s.progress_total) for st in seen if (s := st.span("graph_capture"))]
    assert (None, None) in caps
    assert caps[-1] == (12, 12)
    assert {c for c in caps if c != (None, None)} == {(12, 12)}


def test_tracker_sees_a_capture_oom_after_the_partial_bar(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, speed=5.0)
    set_flag(b, "mem-fraction-static", "0.99")
    b.restart()
    clock.t += 1
    script = b.boot_script()
    assert script is not None
    assert script.outcome == "failed"
    seen = _track(b, clock, script.end_t + 1, 0.5)
    last = seen[-1]
    assert last.status is BootStatus.FAILED
    assert last.failure is not None
    assert last.failure.kind.value == "oom_graph_capture"
    assert last.failure.phase is not None
    assert last.failure.phase.value == "graph_capture"
    cap = last.span("graph_capture")
    assert cap is not None
    assert cap.progress_total == 12
    assert cap.progress_done is not None
    assert cap.progress_done < 12


def test_vllm_capture_bars_are_single_records_the_tracker_follows(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, engine="vllm", speed=5.0)
    script = b.boot_script()
    assert script is not None
    seen = _track(b, clock, script.end_t + 1, 0.5)
    lines = texts(b)
    for desc, n in (("(mixed prefill-decode, PIECEWISE)", 67), ("(decode, FULL)", 35)):
        recs = [t for t in lines if f"Capturing CUDA graphs {desc}" in t]
        assert len(recs) == 1
        assert re.match(r"\(Worker_TP0 pid=\d+\) \r", recs[0])
        parts = recs[0].split("\r")[1:]
        assert len(parts) == n + 2
        assert parts[-1] == parts[-2]
        assert f"100%|██████████| {n}/{n} [" in parts[-1]
    loads = [t for t in lines if "Loading safetensors" in t]
    assert all(re.match(r"\(Worker_TP0 pid=\d+\) \rLoading safetensors", t) for t in loads)
    empty = [i for i, t in enumerate(lines) if re.fullmatch(r"\(Worker_TP0 pid=\d+\) ", t)]  # close()'s newline
    assert len(empty) == 1
    assert lines[empty[0] - 1] == lines[empty[0] - 2] == loads[-1]
    last = seen[-1]
    assert last.status is BootStatus.READY
    cap = last.span("graph_capture")
    assert cap is not None
    assert cap.progress_done == cap.progress_total
    tokens = int(next(t for t in lines if "GPU KV cache size" in t).split("size: ")[1].split(" ")[0].replace(",", ""))
    assert last.metrics.max_total_num_tokens == tokens
    assert last.metrics.graph_mem_gib == pytest.approx(0.9)


def test_a_bar_interrupted_by_another_process_is_cut_there() -> None:
    """journald's pid-change line break, a line of the same process glued, and end of stream."""
    from kvtui.sim.presets import GpuSpec
    from kvtui.sim.script import BootInput, _Sim

    inp = BootInput(argv=("/x",), env={}, preset=PRESETS["kimi-k2.6"], gpu=GpuSpec(), seed=0, boot_no=0,
                    start=100.0, speed=1.0)
    sim = _Sim(inp, ms=False)
    bar = sim.tqdm(7)
    sim.draw(bar, 1.0, "a 1/4")
    sim.draw(bar, 2.0, "a 2/4")
    sim.emit(2.5, "other process", 8, raw=True)  # ends the pending line
    sim.draw(bar, 3.0, "a 3/4")
    sim.emit(3.5, "same process", 7, raw=True)  # glued to the pending redraws
    sim.draw(bar, 4.0, "a 4/4")
    lines = sim.sorted_lines(eof=109.0)
    assert [(ln.t, ln.text, ln.pid) for ln in lines] == [
        (102.5, "\ra 1/4\ra 2/4", 7),
        (102.5, "other process", 8),
        (103.5, "\ra 3/4same process", 7),
        (109.0, "\ra 4/4", 7),  # never closed: the stream's end flushes it
    ]
    closed = _Sim(inp, ms=False)
    run = closed.tqdm(7, "(W pid=7) ")
    closed.draw(run, 1.0, "b 0/2")
    closed.draw(run, 2.0, "b 2/2")
    closed.close(run, 2.5)
    assert [(ln.t, ln.text) for ln in closed.sorted_lines()] == [(102.5, "(W pid=7) \rb 0/2\rb 2/2\rb 2/2")]


# ---------------------------------------------------------------------------------------------
# Two processes always agree (bug: a cancelled restart epoch resurfacing)
# ---------------------------------------------------------------------------------------------


def _view_of(b: DemoBackend, now: float, since: int) -> tuple[object, ...]:
    lines = [(r.cursor, r.text) for r in b.read_lines(after_cursor=b.cursor(since, 0), limit=100_000)]
    return (b.unit_status(), b.current_boot(), b.server_pids_at(now), b.effective_execstart(), lines)


def test_fix_during_a_pending_auto_restart_then_restart_is_seen_alike_by_a_fresh_process(tmp_path: Path) -> None:
    """Two failed boots, an automatic restart pending; write_unit + daemon_reload (which queues
    the automatic restart with the new unit) + restart (which cancels it and starts now): the
    cancelled start must never become a boot, in this process or in a fresh one."""
    clock = Clock()
    state = tmp_path / "demo" / "demo"
    b = make(tmp_path, clock, speed=400.0)
    set_flag(b, "mem-fraction-static", "0.99")
    b.restart()
    while not (b.current_boot() == 2 and b.unit_status() == "activating (auto-restart)"):
        clock.t += 0.005
        assert clock.t < T0 + 60
    set_flag(b, "mem-fraction-static", "0.85")  # queues the automatic restart with the fix ...
    b.restart()  # ... which this restart replaces: the new boot starts now
    assert b.current_boot() == 3
    assert b.unit_status() == "active (running)"
    assert texts(b)[0] == "Started SGLang server (Kimi K2.6, TP8)."  # this process caches the view now
    for _ in range(40):  # past the cancelled start (0.025 s away) and on to ready
        clock.t += 0.05
        fresh = DemoBackend("demo", clock=clock, speed=400.0, state_dir=state)
        assert _view_of(fresh, clock.t, 2) == _view_of(b, clock.t, 2)
        assert fresh.unit_status() == b.unit_status() == "active (running)"
    lines = texts(b)
    assert lines[0] == "Started SGLang server (Kimi K2.6, TP8)."
    assert not any(t.startswith(("Stopping", "Stopped")) for t in lines)
    assert any("mem_fraction_static=0.85" in t for t in lines)
    assert any("fired up and ready" in t for t in lines)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_any_sequence_of_operations_reads_the_same_from_a_fresh_process(tmp_path: Path, seed: int) -> None:
    """A seeded random walk of restarts, stops, edits with and without reload and clock steps
    (speed 400, so boots fail, auto-restart and get ready within the walk): after every step a
    fresh backend on the same state agrees with the long-lived one, and the journal's times
    never go backwards."""
    import random

    rng = random.Random(seed)
    clock = Clock()
    state = tmp_path / "demo" / "demo"
    b = make(tmp_path, clock, speed=400.0)
    for _step in range(30):
        op = rng.choice(["tick", "tick", "tick", "restart", "stop", "edit", "edit+restart", "restart_sec"])
        if op == "tick":
            clock.t += rng.choice([0.004, 0.02, 0.08, 0.3, 0.9])
        elif op == "restart":
            b.restart()
        elif op == "stop":
            b.stop()
        else:
            unit = b.read_unit()
            if op == "restart_sec":
                unit = re.sub(r"RestartSec=\S+", f"RestartSec={rng.choice([1, 5, 10, 30])}", unit)
            else:
                frac = rng.choice(["0.70", "0.85", "0.88", "0.99"])
                unit = re.sub(r"--mem-fraction-static \S+", f"--mem-fraction-static {frac}", unit)
            b.write_unit(unit)
            b.daemon_reload()
            if op == "edit+restart":
                b.restart()
        b.unit_status()  # the long-lived instance computes (and caches) views now
        cur = b.current_boot() or 0
        fresh = DemoBackend("demo", clock=clock, speed=400.0, state_dir=state)
        since = max(0, cur - 2)
        mine, theirs = _view_of(b, clock.t, since), _view_of(fresh, clock.t, since)
        assert mine == theirs, (op, _step)
        times = [r.ts for r in b.read_lines(after_cursor=b.cursor(since, 0), limit=100_000)]
        assert times == sorted(times)  # type: ignore[type-var]


# ---------------------------------------------------------------------------------------------
# close() is prompt
# ---------------------------------------------------------------------------------------------


async def test_close_ends_a_sleeping_gpu_stream_and_log_follower_at_once(tmp_path: Path) -> None:
    clock = Clock()
    b = make(tmp_path, clock, poll_interval=3600.0)
    await b.start()
    gpus = b.gpu_stream(interval_s=3600.0)
    assert len(await anext(gpus)) == 8
    logs = b.follow_log()
    assert await anext(logs)  # the boot's first lines; then it sleeps a poll interval
    next_gpu = asyncio.ensure_future(anext(gpus))
    next_log = asyncio.ensure_future(anext(logs))
    await asyncio.sleep(0)
    assert not next_gpu.done()
    assert not next_log.done()
    await b.close()
    done, _ = await asyncio.wait({next_gpu, next_log}, timeout=10)  # an hour without the fix
    assert done == {next_gpu, next_log}
    for fut in (next_gpu, next_log):
        assert isinstance(fut.exception(), StopAsyncIteration)
    # a restarted backend streams again (a fresh wake-up event)
    await b.start()
    again = b.gpu_stream(interval_s=3600.0)
    assert len(await anext(again)) == 8
    await b.close()
    assert await anext(again, None) is None  # closed: the stream ends
