"""The simulated engines behind the demo host: model presets and the SGLang / vLLM boot simulations.

A boot is a **pure function** of its inputs (the unit's argv and environment, the preset, the
GPU, the seed, the boot number, the start time and the speed): :func:`simulate_boot` returns a
:class:`BootScript` — every line the engine prints with its time, the per-GPU memory the server
holds over time, and how the boot ends (ready, or the process exits). ``kvtui.hosts.demo`` turns
scripts into a systemd-style journal with cursors.

The figures follow the engine's own sizing (``engines.md`` §2, written here independently: this
module must never import ``kvtui.kvcalc``, which is tested against it):

* P = free memory after distributed init (min over ranks), A = free after the weights (min);
* rest = A − P·(1 − f); tokens = floor(int(rest·2^30) / cell), capped, page-aligned;
  tokens ≤ 0 → ``Not enough memory. Please try to increase --mem-fraction-static.``;
* each rank allocates ``N + page`` rows of ``cell`` bytes; the request table
  ``max_running_requests × (context_len + 4) × 4`` bytes, CUDA graphs and a draft model come out of
  the P·(1 − f) headroom; a capture that needs more than is free dies with the CUDA OOM text.

Log lines use SGLang 0.5.x format strings (0.5.10 or 0.5.14 capture lines, by preset).

``vllm serve …`` in the unit runs the vLLM 0.11 (V1 engine) simulation instead (engines.md §3):
``kv = total·u − (weights + activation peak + non-torch)``, blocks of ``block_size·cell`` bytes,
with the engine's own failures: free memory below ``u·total`` at start (a stale process),
``No available memory for the cache blocks``, and ``To serve at least one request …``.
"""

from __future__ import annotations

import bisect
import math
import random
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvtui.demo_presets import DEMO_GPU_COUNT

GIB = 1 << 30
MIB = 1 << 20


# ---------------------------------------------------------------------------------------------
# Hardware and models
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The simulated card (all GPUs of a demo host are alike)."""

    name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    total_mib: int = 97887
    count: int = DEMO_GPU_COUNT
    idle_mib: int = 1
    idle_w: float = 34.0
    max_w: float = 600.0

    @property
    def total_gib(self) -> float:
        return self.total_mib / 1024.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What the simulation needs to know about a model (per the engine's own formulas)."""

    path: str
    arch: str  # the class name SGLang prints in `Load weight end … type=`
    layers: int
    attention: str  # "mla" | "gqa"
    max_context: int
    weights_gib: float  # all ranks together (divided by TP)
    shards: int
    load_seconds: float  # simulated seconds for the whole checkpoint
    kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    dtype: str = "bfloat16"
    quant: str | None = None
    replicated_gib: float = 0.0  # per rank, not divided by TP (embeddings of a draft, …)
    # CUDA-graph memory: the first (largest) graph allocates the shared pool (per captured bs of
    # the largest batch), every graph adds a fixed part and a part per batch row.
    graph_pool_per_bs_gib: float = 0.008
    graph_per_graph_gib: float = 0.04
    graph_per_bs_gib: float = 0.0025
    capture_seconds_per_graph: float = 2.2
    decode_tok_s: float = 40.0  # per request at low batch
    # vLLM's memory profile: activation peak at 8192 batched tokens, and CUDA graphs (per rank)
    vllm_peak_gib: float = 2.2
    vllm_graph_gib: float = 0.9

    def cell_bytes(self, tp: int, kv_bytes: int) -> int:
        """Bytes per token per rank (engines.md §2.3)."""
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.layers * kv_bytes
        heads = max(1, self.kv_heads // tp)
        return heads * (self.head_dim + self.v_head_dim) * self.layers * kv_bytes


KIMI_K26 = ModelSpec(
    path="/models/Kimi-K2.6",
    arch="DeepseekV3ForCausalLM",
    layers=61,
    attention="mla",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    max_context=262144,
    weights_gib=543.17924,  # seed 0: a 192,406-token pool at 0.85 (under a 200,000 context)
    shards=64,
    load_seconds=236.0,
    quant="compressed-tensors",
    graph_pool_per_bs_gib=0.0085,
    graph_per_graph_gib=0.04,
    graph_per_bs_gib=0.0025,
    capture_seconds_per_graph=3.1,
    decode_tok_s=38.0,
)

LLAMA_70B = ModelSpec(
    path="/models/Llama-3.1-70B-Instruct",
    arch="LlamaForCausalLM",
    layers=80,
    attention="gqa",
    kv_heads=8,
    head_dim=128,
    v_head_dim=128,
    max_context=131072,
    weights_gib=131.42,
    shards=30,
    load_seconds=150.0,
    graph_pool_per_bs_gib=0.0012,
    graph_per_graph_gib=0.012,
    graph_per_bs_gib=0.0002,
    capture_seconds_per_graph=0.9,
    decode_tok_s=32.0,
)

QWEN3_32B = ModelSpec(
    path="/models/Qwen3-32B",
    arch="Qwen3ForCausalLM",
    layers=64,
    attention="gqa",
    kv_heads=8,
    head_dim=128,
    v_head_dim=128,
    max_context=40960,
    weights_gib=61.03,
    shards=17,
    load_seconds=70.0,
    graph_pool_per_bs_gib=0.004,
    graph_per_graph_gib=0.02,
    graph_per_bs_gib=0.0009,
    capture_seconds_per_graph=1.1,
    decode_tok_s=55.0,
)

QWEN3_32B_EAGLE3 = ModelSpec(
    path="/models/Qwen3-32B-EAGLE3",
    arch="LlamaForCausalLMEagle3",
    layers=1,
    attention="gqa",
    kv_heads=8,
    head_dim=128,
    v_head_dim=128,
    max_context=40960,
    weights_gib=0.78,
    replicated_gib=0.31,
    shards=1,
    load_seconds=3.0,
    graph_pool_per_bs_gib=0.0015,
    graph_per_graph_gib=0.01,
    graph_per_bs_gib=0.0002,
    capture_seconds_per_graph=0.5,
)

MODELS: dict[str, ModelSpec] = {m.path: m for m in (KIMI_K26, LLAMA_70B, QWEN3_32B, QWEN3_32B_EAGLE3)}


@dataclass(frozen=True, slots=True)
class Preset:
    """A demo deployment: the unit the demo host starts with."""

    key: str
    description: str  # the unit's Description=
    unit_name: str
    model: ModelSpec
    flags: tuple[str, ...]  # one flag (with its value) per ExecStart continuation line
    gpus: tuple[int, ...]  # CUDA_VISIBLE_DEVICES
    version: str = "0.5.14"  # which SGLang 0.5.x format strings to print
    engine: str = "sglang"
    exe: str = "/opt/sglang/venv/bin/python"
    module: str = "sglang.launch_server"
    workdir: str = "/opt/sglang"
    restart_sec: int = 10
    launch: str = ""  # the command before the flags (default: "EXE -m MODULE")
    environment: tuple[str, ...] = ("SGLANG_LOG_MS=1",)

    def unit_text(self, gpus: Sequence[int] | None = None) -> str:
        # the configured GPUs become CUDA_VISIBLE_DEVICES when there are as many as the preset uses
        use = gpus if gpus and len(gpus) == len(self.gpus) else self.gpus
        visible = ",".join(str(g) for g in use)
        cont = " \\\n    ".join([self.launch or f"{self.exe} -m {self.module}", *self.flags])
        return (
            "[Unit]\n"
            f"Description={self.description}\n"
            "After=network-online.target\n"
            "Wants=network-online.target\n"
            "\n"
            "[Service]\n"
            "Type=simple\n"
            "User=root\n"
            f"WorkingDirectory={self.workdir}\n"
            f"Environment=CUDA_VISIBLE_DEVICES={visible}\n"
            + "".join(f"Environment={e}\n" for e in self.environment)
            + f"ExecStart={cont}\n"
            "Restart=on-failure\n"
            f"RestartSec={self.restart_sec}\n"
            "TimeoutStartSec=900\n"
            "\n"
            "[Install]\n"
            "WantedBy=multi-user.target\n"
        )


PRESETS: dict[str, Preset] = {
    p.key: p
    for p in (
        Preset(
            key="kimi-k2.6",
            description="SGLang server (Kimi K2.6, TP8)",
            unit_name="sglang-k26.service",
            model=KIMI_K26,
            flags=(
                "--model-path /models/Kimi-K2.6",
                "--served-model-name kimi-k2.6",
                "--tp 8",
                "--trust-remote-code",
                "--context-length 200000",
                "--mem-fraction-static 0.85",
                "--max-running-requests 64",
                "--cuda-graph-max-bs 64",
                "--host 0.0.0.0 --port 30000",
            ),
            gpus=(0, 1, 2, 3, 4, 5, 6, 7),
        ),
        Preset(
            key="llama-70b",
            description="SGLang server (Llama 3.1 70B, TP4)",
            unit_name="sglang-llama70b.service",
            model=LLAMA_70B,
            flags=(
                "--model-path /models/Llama-3.1-70B-Instruct",
                "--tp 4",
                "--mem-fraction-static 0.88",
                "--context-length 131072",
                "--host 0.0.0.0 --port 30000",
            ),
            gpus=(0, 1, 2, 3),
            version="0.5.10",
        ),
        Preset(
            key="qwen3-32b-eagle3",
            description="SGLang server (Qwen3 32B + EAGLE3 draft, TP2)",
            unit_name="sglang-qwen3-eagle.service",
            model=QWEN3_32B,
            flags=(
                "--model-path /models/Qwen3-32B",
                "--tp 2",
                "--speculative-algorithm EAGLE3",
                "--speculative-draft-model-path /models/Qwen3-32B-EAGLE3",
                "--speculative-num-steps 3",
                "--speculative-eagle-topk 1",
                "--speculative-num-draft-tokens 4",
                "--mem-fraction-static 0.85",
                "--max-running-requests 128",
                "--cuda-graph-max-bs 64",
                "--host 0.0.0.0 --port 30000",
            ),
            gpus=(0, 1),
        ),
        Preset(
            key="vllm-llama-70b",
            description="vLLM server (Llama 3.1 70B, TP4)",
            unit_name="vllm-llama70b.service",
            model=LLAMA_70B,
            engine="vllm",
            exe="/opt/vllm/venv/bin/vllm",
            module="",
            launch="/opt/vllm/venv/bin/vllm serve /models/Llama-3.1-70B-Instruct",
            workdir="/opt/vllm",
            environment=(),
            flags=(
                "--tensor-parallel-size 4",
                "--gpu-memory-utilization 0.90",
                "--max-model-len 131072",
                "--host 0.0.0.0 --port 8000",
            ),
            gpus=(0, 1, 2, 3),
            version="0.11.0",
        ),
    )
}
# the names (and their engines) live in the pure ``kvtui.demo_presets`` that configuration checks
# against; a test keeps PRESETS equal to them


# ---------------------------------------------------------------------------------------------
# What a simulation returns
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimLine:
    t: float  # absolute wall-clock seconds
    text: str
    pid: int
    ident: str


@dataclass(frozen=True, slots=True)
class ForeignProcess:
    """A stale process of someone else holding memory on one GPU (the classic restart OOM)."""

    gpu: int
    mib: float
    pid: int = 41877
    name: str = "python3"


@dataclass(frozen=True, slots=True)
class ServingFacts:
    tokens: int
    max_running_requests: int
    context_len: int
    decode_tok_s: float
    tp_pid: int
    engine: str = "sglang"
    tag: str = ""  # SGLang: the rank tag (" TP0"); vLLM: the process tag ("APIServer")
    ms: bool = False  # SGLang's SGLANG_LOG_MS
    interval_s: float = 5.0  # simulated seconds between serving lines


@dataclass(slots=True)
class BootScript:
    """One boot, fully determined. Times are absolute wall-clock seconds."""

    start: float
    lines: list[SimLine]
    outcome: str  # "ready" | "failed"
    end_t: float  # the ready line's time, or the time the main process exits
    exit_code: str = ""  # systemd "code=" of the main process when failed: "killed" | "exited"
    exit_status: str = ""  # systemd "status=": "9/KILL", "2/INVALIDARGUMENT", "1/FAILURE"
    result: str = ""  # systemd "Failed with result '…'": "signal" | "exit-code"
    main_pid: int = 0
    rank_pids: dict[int, int] = field(default_factory=dict)  # physical GPU -> scheduler pid
    aux_pids: tuple[int, ...] = ()  # detokenizer etc. (no GPU memory)
    exe: str = ""
    # physical GPU -> keyframes (t, MiB held by the server on it); piecewise linear
    mem: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    util: list[tuple[float, float]] = field(default_factory=list)  # keyframes (t, util %) while booting
    serving: ServingFacts | None = None
    speed: float = 1.0

    @property
    def duration(self) -> float:
        return self.end_t - self.start

    def mem_at(self, gpu: int, t: float) -> float:
        frames = self.mem.get(gpu)
        if not frames or t < frames[0][0]:
            return 0.0
        return _interp(frames, t)

    def util_at(self, t: float) -> float:
        if not self.util or t < self.util[0][0]:
            return 0.0
        return _interp(self.util, t)


def _interp(frames: Sequence[tuple[float, float]], t: float) -> float:
    i = bisect.bisect_right(frames, t, key=lambda f: f[0])
    if i >= len(frames):
        return frames[-1][1]
    if i == 0:
        return frames[0][1]
    t0, v0 = frames[i - 1]
    t1, v1 = frames[i]
    if t1 <= t0:
        return v1
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


@dataclass(frozen=True, slots=True)
class BootInput:
    argv: tuple[str, ...]  # the ExecStart argv (executable first)
    env: Mapping[str, str]
    preset: Preset
    gpu: GpuSpec
    seed: int
    boot_no: int
    start: float
    speed: float
    foreign: ForeignProcess | None = None


# ---------------------------------------------------------------------------------------------
# Small formatting helpers (torch, tqdm, Python repr)
# ---------------------------------------------------------------------------------------------


def torch_size(nbytes: float) -> str:
    """``c10::CachingAllocator::format_size``."""
    if nbytes <= 1024:
        return f"{int(nbytes)} bytes"
    if nbytes <= MIB:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= GIB:
        return f"{nbytes / MIB:.2f} MiB"
    return f"{nbytes / GIB:.2f} GiB"


def tqdm_interval(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_rate(n: int, elapsed: float) -> str:
    if n <= 0 or elapsed <= 0:
        return "?it/s"
    rate = n / elapsed
    return f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"


def tqdm_remaining(n: int, total: int, elapsed: float) -> str:
    if n <= 0 or elapsed <= 0:
        return "?"
    return tqdm_interval((total - n) * elapsed / n)


_BAR_CHARS = " ▏▎▍▌▋▊▉█"


def tqdm_bar(frac: float, width: int = 10) -> str:
    nsyms = len(_BAR_CHARS) - 1
    full, part = divmod(int(frac * width * nsyms), nsyms)
    out = _BAR_CHARS[-1] * full
    if full < width:
        out += _BAR_CHARS[part] + _BAR_CHARS[0] * (width - full - 1)
    return out


def _shard_bar(desc: str, k: int, total: int, elapsed: float) -> str:
    """The weight loaders' bar format: ``{desc}: {percentage:3.0f}% Completed | {n}/{total} [...]``."""
    return (
        f"{desc}: {100.0 * k / total:3.0f}% Completed | {k}/{total} "
        f"[{tqdm_interval(elapsed)}<{tqdm_remaining(k, total, elapsed)}, {tqdm_rate(k, elapsed)}]"
    )


def _capture_bar(desc: str, k: int, total: int, elapsed: float) -> str:
    """tqdm's default bar: ``{desc}: {percentage:3.0f}%|{bar}| {n}/{total} [...]`` (no desc: just the bar)."""
    head = f"{desc}: " if desc else ""
    if k == 0:
        return f"{head}  0%|{tqdm_bar(0.0)}| 0/{total} [00:00<?, ?it/s]"
    return (
        f"{head}{100.0 * k / total:3.0f}%|{tqdm_bar(k / total)}| {k}/{total} "
        f"[{tqdm_interval(elapsed)}<{tqdm_remaining(k, total, elapsed)}, {tqdm_rate(k, elapsed)}]"
    )


def systemd_timespan(seconds: float) -> str:
    """systemd's ``format_timespan`` at millisecond accuracy (``Consumed … CPU time``)."""
    ms = round(seconds * 1000)
    parts: list[str] = []
    for unit, size in (("h", 3600_000), ("min", 60_000)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    if ms or not parts:
        sec, milli = divmod(ms, 1000)
        parts.append(f"{sec}.{milli:03d}s".replace(".000s", "s") if milli else f"{sec}s")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# Argument parsing (the engine's own argparse, simplified: same errors, same abbreviations)
# ---------------------------------------------------------------------------------------------

_BOOL = "bool"
# dest name -> (type, default). Order = the order of ServerArgs fields in the engine's dump.
SGLANG_ARGS: dict[str, tuple[str, object]] = {
    "model_path": ("str", None),
    "tokenizer_path": ("str", None),
    "tokenizer_mode": ("str", "auto"),
    "skip_tokenizer_init": (_BOOL, False),
    "load_format": ("str", "auto"),
    "trust_remote_code": (_BOOL, False),
    "context_length": ("int", None),
    "is_embedding": (_BOOL, False),
    "revision": ("str", None),
    "host": ("str", "127.0.0.1"),
    "port": ("int", 30000),
    "skip_server_warmup": (_BOOL, False),
    "dtype": ("str", "auto"),
    "quantization": ("str", None),
    "kv_cache_dtype": ("str", "auto"),
    "mem_fraction_static": ("float", None),
    "max_running_requests": ("int", None),
    "max_queued_requests": ("int", None),
    "max_total_tokens": ("int", None),
    "chunked_prefill_size": ("int", None),
    "max_prefill_tokens": ("int", 16384),
    "schedule_policy": ("str", "fcfs"),
    "schedule_conservativeness": ("float", 1.0),
    "page_size": ("int", None),
    "device": ("str", "cuda"),
    "tp_size": ("int", 1),
    "pp_size": ("int", 1),
    "stream_interval": ("int", 1),
    "random_seed": ("int", None),
    "watchdog_timeout": ("float", 300.0),
    "log_level": ("str", "info"),
    "log_requests": (_BOOL, False),
    "api_key": ("str", None),
    "served_model_name": ("str", None),
    "reasoning_parser": ("str", None),
    "tool_call_parser": ("str", None),
    "dp_size": ("int", 1),
    "load_balance_method": ("str", "round_robin"),
    "attention_backend": ("str", None),
    "speculative_algorithm": ("str", None),
    "speculative_draft_model_path": ("str", None),
    "speculative_num_steps": ("int", None),
    "speculative_eagle_topk": ("int", None),
    "speculative_num_draft_tokens": ("int", None),
    "ep_size": ("int", 1),
    "enable_dp_attention": (_BOOL, False),
    "disable_radix_cache": (_BOOL, False),
    "cuda_graph_max_bs": ("int", None),
    "disable_cuda_graph": (_BOOL, False),
    "enable_torch_compile": (_BOOL, False),
    "enable_mixed_chunk": (_BOOL, False),
    "enable_metrics": (_BOOL, False),
}
_ALIASES: dict[str, str] = {
    "tp": "tp_size",
    "tensor_parallel_size": "tp_size",
    "dp": "dp_size",
    "data_parallel_size": "dp_size",
    "pp": "pp_size",
    "pipeline_parallel_size": "pp_size",
    "ep": "ep_size",
    "expert_parallel_size": "ep_size",
    "model": "model_path",
}
_OPTION_NAMES: dict[str, str] = {"--" + k.replace("_", "-"): k for k in SGLANG_ARGS} | {
    "--" + k.replace("_", "-"): v for k, v in _ALIASES.items()
}


class ArgError(Exception):
    """argparse's complaint: printed to stderr, exit status 2."""


def parse_sglang_args(args: Sequence[str]) -> dict[str, object]:
    """The engine's argparse: ``--k v`` / ``--k=v``, unique-prefix abbreviations, typed values."""
    values = _parse_options(args, SGLANG_ARGS, _OPTION_NAMES)
    if "model_path" not in values:
        raise ArgError("the following arguments are required: --model-path")
    return values


def _parse_options(
    args: Sequence[str], table: Mapping[str, tuple[str, object]], option_names: Mapping[str, str]
) -> dict[str, object]:
    values: dict[str, object] = {}
    unknown: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("--") or tok == "--":
            unknown.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        dest = option_names.get(name)
        if dest is None:
            matches = sorted({d for opt, d in option_names.items() if opt.startswith(name)})
            if len(matches) > 1:
                opts = ", ".join(sorted(o for o, d in option_names.items() if o.startswith(name)))
                raise ArgError(f"ambiguous option: {name} could match {opts}")
            if not matches:
                unknown.append(tok)
                if not eq and i < len(args) and not args[i].startswith("--"):
                    unknown.append(args[i])
                    i += 1
                continue
            dest = matches[0]
        kind = table[dest][0]
        opt = "--" + dest.replace("_", "-")
        if kind == _BOOL:
            if eq:
                raise ArgError(f"argument {opt}: ignored explicit argument {inline!r}")
            values[dest] = True
            continue
        if eq:
            raw = inline
        else:
            if i >= len(args) or (args[i].startswith("--") and len(args[i]) > 2):
                raise ArgError(f"argument {opt}: expected one argument")
            raw = args[i]
            i += 1
        try:
            values[dest] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
        except ValueError:
            raise ArgError(f"argument {opt}: invalid {kind} value: {raw!r}") from None
    if unknown:
        raise ArgError("unrecognized arguments: " + " ".join(unknown))
    return values


# ---------------------------------------------------------------------------------------------
# The SGLang boot
# ---------------------------------------------------------------------------------------------

CAPTURE_FAILED_HELP = (
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
    "3. disable torch compile by not using --enable-torch-compile",
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
)


def default_capture_bs(max_bs: int) -> list[int]:
    """SGLang's batch sizes to capture, ascending, up to ``max_bs``."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 1025, 16)]
    return [b for b in sizes if b <= max_bs]


def _kv_dtype(arg: object, model_dtype: str) -> tuple[str, int]:
    text = str(arg or "auto")
    if text.startswith("fp8_e5m2"):
        return "torch.float8_e5m2", 1
    if text.startswith("fp8"):
        return "torch.float8_e4m3fn", 1
    if text in ("float16", "half"):
        return "torch.float16", 2
    return f"torch.{model_dtype}", 2


def _site_packages(exe: str) -> str:
    base = exe.rsplit("/bin/", 1)[0] if "/bin/" in exe else "/usr"
    if base in ("/usr", "/usr/local"):
        return "/usr/local/lib/python3.12/dist-packages"
    return f"{base}/lib/python3.12/site-packages"


@dataclass(slots=True)
class _TqdmRun:
    """One tqdm bar on a process's stderr. tqdm writes ``\\r`` + the bar at every redraw and a
    newline only when the bar closes; journald cuts a stream into records at newlines, so the
    whole run is **one** record (``\\r``-joined redraws) that appears when the bar closes — or
    earlier, when another process writes to the same stream meanwhile (journald ends the
    pending line: ``_LINE_BREAK=pid-change``), or when the stream ends (``eof``). A line the
    same process logs meanwhile is glued to the pending redraws (one record)."""

    pid: int
    prefix: str  # what the process's stream wrapper puts at the start of a line (vLLM: "(Worker pid=N) ")
    draws: list[tuple[float, int, str]] = field(default_factory=list)  # (t, seq, bar text)
    closed: tuple[float, int] | None = None  # (t, seq) of the newline


class _Sim:
    """Collects lines and memory keyframes on the simulated time axis (seconds after start)."""

    def __init__(self, inp: BootInput, ms: bool) -> None:
        self.inp = inp
        self.ms = ms
        self.lines: list[tuple[float, int, SimLine]] = []
        self.runs: list[_TqdmRun] = []
        self.mem: dict[int, list[tuple[float, float]]] = {}
        self.util: list[tuple[float, float]] = [(inp.start, 0.0)]
        self.ident = inp.argv[0].rsplit("/", 1)[-1] if inp.argv else "python"
        self._seq = 0

    def at(self, sim_t: float) -> float:
        return self.inp.start + sim_t / self.inp.speed

    def real(self, sim_seconds: float) -> float:
        return sim_seconds / self.inp.speed

    def stamp(self, t: float, tag: str = "") -> str:
        lt = time.localtime(t)
        text = time.strftime("%Y-%m-%d %H:%M:%S", lt)
        if self.ms:
            text += f".{round((t % 1.0) * 1000) % 1000:03d}"
        return f"[{text}{tag}]"

    def emit(self, sim_t: float, text: str, pid: int, *, tag: str | None = "", raw: bool = False) -> None:
        t = self.at(sim_t)
        line = text if raw else f"{self.stamp(t, tag or '')} {text}"
        self._seq += 1
        self.lines.append((t, self._seq, SimLine(t, line, pid, self.ident)))

    def mem_frame(self, gpu: int, sim_t: float, mib: float) -> None:
        """Memory reaches ``mib`` at ``sim_t``, ramping linearly from the previous frame."""
        self.mem.setdefault(gpu, []).append((self.at(sim_t), mib))

    def mem_step(self, gpu: int, sim_t: float, mib: float) -> None:
        """Memory jumps to ``mib`` at ``sim_t`` (it held its previous value until then)."""
        frames = self.mem.setdefault(gpu, [])
        t = self.at(sim_t)
        if frames:
            frames.append((t, frames[-1][1]))
        frames.append((t, mib))

    def util_frame(self, sim_t: float, util: float) -> None:
        self.util.append((self.at(sim_t), util))

    def tqdm(self, pid: int, prefix: str = "") -> _TqdmRun:
        """Open a tqdm bar written by ``pid`` (see ``_TqdmRun``); draw it with ``draw``."""
        run = _TqdmRun(pid, prefix)
        self.runs.append(run)
        return run

    def draw(self, run: _TqdmRun, sim_t: float, text: str) -> None:
        """A redraw of ``run`` at ``sim_t`` (``\\r`` + ``text`` on the process's stderr)."""
        assert run.closed is None, "a closed tqdm bar is not redrawn"
        self._seq += 1
        run.draws.append((self.at(sim_t), self._seq, text))

    def close(self, run: _TqdmRun, sim_t: float, text: str | None = None) -> None:
        """tqdm's ``close()``: a last redraw (``text``, default the last one) and the newline."""
        if text is None and run.draws:
            text = run.draws[-1][2]
        if text is not None:
            self.draw(run, sim_t, text)
        self._seq += 1
        run.closed = (self.at(sim_t), self._seq)

    def sorted_lines(self, eof: float | None = None) -> list[SimLine]:
        """Every journal record in order. ``eof``: when the stream ends (the process tree died):
        a bar still open then becomes a record of its own (``_LINE_BREAK=eof``)."""
        entries = sorted(self.lines, key=lambda x: (x[0], x[1]))
        if not self.runs:
            return [line for _, _, line in entries]
        glued: set[int] = set()  # seq of lines glued to a pending bar (they are in its record)
        extra: list[tuple[float, float, SimLine]] = []
        for run in self.runs:
            if not run.draws:
                continue
            pending: list[str] = []
            di = 0
            first = run.draws[0][:2]
            end = run.closed
            if end is None:
                last_t = run.draws[-1][0] if eof is None else max(eof, run.draws[-1][0])
                end = (last_t, self._seq + 1)

            def record(t: float, order: float, text: str, run: _TqdmRun = run) -> None:
                extra.append((t, order, SimLine(t, run.prefix + text, run.pid, self.ident)))

            for t, seq, line in entries:
                if (t, seq) <= first:
                    continue
                if (t, seq) > end:
                    break
                while di < len(run.draws) and run.draws[di][:2] < (t, seq):
                    pending.append("\r" + run.draws[di][2])
                    di += 1
                if not pending:
                    continue
                if line.pid == run.pid:
                    body = line.text[len(run.prefix):] if line.text.startswith(run.prefix) else line.text
                    glued.add(seq)
                    record(t, seq, "".join(pending) + body)
                else:
                    record(t, seq - 0.5, "".join(pending))  # pid-change: the pending line ends first
                pending = []
            pending += ["\r" + d[2] for d in run.draws[di:]]
            if pending:
                record(end[0], end[1], "".join(pending))
        merged = [(t, float(seq), line) for t, seq, line in entries if seq not in glued] + extra
        return [line for _, _, line in sorted(merged, key=lambda x: (x[0], x[1]))]


def simulate_boot(inp: BootInput) -> BootScript:
    """The whole boot for these inputs (see the module docstring). The ExecStart decides the
    engine, as on a real host: ``vllm serve …`` is vLLM, anything else is tried as SGLang."""
    argv = inp.argv
    if len(argv) >= 2 and argv[0].rsplit("/", 1)[-1] == "vllm" and argv[1] == "serve":
        return _VllmBoot(inp).run()
    return _SglangBoot(inp).run()


class _SglangBoot:
    def __init__(self, inp: BootInput) -> None:
        self.inp = inp
        ms = inp.env.get("SGLANG_LOG_MS", "0").strip().lower() in ("1", "true", "yes")
        self.sim = _Sim(inp, ms)
        rng = random.Random(f"pids:{inp.seed}:{inp.boot_no}")
        self.main_pid = rng.randrange(2000, 60000)
        self.exe = inp.argv[0] if inp.argv else "python"
        self.site = _site_packages(self.exe)
        self.jit = random.Random(f"timing:{inp.seed}:{shlex.join(inp.argv)}")
        self.rank_pids: dict[int, int] = {}
        self.aux_pids: tuple[int, ...] = ()

    # -- helpers ------------------------------------------------------------------------------

    def _fail(self, sim_t: float, *, code: str, status: str, result: str) -> BootScript:
        for gpu in list(self.sim.mem):
            self.sim.mem_frame(gpu, sim_t, self.sim.mem[gpu][-1][1])
            self.sim.mem_frame(gpu, sim_t, 0.0)
        self.sim.util_frame(sim_t, 0.0)
        return BootScript(
            start=self.inp.start,
            lines=self.sim.sorted_lines(eof=self.sim.at(sim_t)),
            outcome="failed",
            end_t=self.sim.at(sim_t),
            exit_code=code,
            exit_status=status,
            result=result,
            main_pid=self.main_pid,
            rank_pids=self.rank_pids,
            aux_pids=self.aux_pids,
            exe=self.exe,
            mem=self.sim.mem,
            util=self.sim.util,
            speed=self.inp.speed,
        )

    def _traceback(self, frames: Sequence[tuple[str, int, str, str]]) -> list[str]:
        out = ["Traceback (most recent call last):"]
        for path, lineno, func, code in frames:
            out.append(f'  File "{self.site}/sglang/{path}", line {lineno}, in {func}')
            out.append(f"    {code}")
        return out

    def _scheduler_frames(self) -> list[tuple[str, int, str, str]]:
        return [
            ("srt/managers/scheduler.py", 3061, "run_scheduler_process", "scheduler = Scheduler("),
            ("srt/managers/scheduler.py", 362, "__init__", "self.init_model_worker()"),
            ("srt/managers/scheduler.py", 518, "init_model_worker", "self.init_tp_model_worker()"),
            (
                "srt/managers/scheduler.py",
                476,
                "init_tp_model_worker",
                "self.tp_worker = TpModelWorker(**worker_kwargs)",
            ),
            ("srt/managers/tp_worker.py", 247, "__init__", "self._init_model_runner()"),
            ("srt/managers/tp_worker.py", 330, "_init_model_runner", "self._model_runner = ModelRunner("),
            ("srt/model_executor/model_runner.py", 412, "__init__", "self.initialize(pre_model_load_memory)"),
        ]

    def _die(self, sim_t: float, rank_tag: str, pid: int, lines: Sequence[str]) -> BootScript:
        """A scheduler raised: its traceback, the main process's SIGQUIT, the process tree killed."""
        first, *rest = lines
        self.sim.emit(sim_t, f"Scheduler hit an exception: {first}", pid, tag=rank_tag)
        for i, text in enumerate(rest):
            self.sim.emit(sim_t + 0.0001 * (i + 1), text, pid, raw=True)
        t = sim_t + 0.35
        self.sim.emit(t, "Received sigquit from a child process. It usually means the child failed.", self.main_pid)
        return self._fail(t + 0.25, code="killed", status="9/KILL", result="signal")

    # -- the boot -------------------------------------------------------------------------------

    def run(self) -> BootScript:
        inp, sim, jit = self.inp, self.sim, self.jit
        preset, gpu = inp.preset, inp.gpu
        new_fmt = preset.version >= "0.5.14"
        argv = list(inp.argv)
        # python -m sglang.launch_server ARGS
        if len(argv) < 3 or argv[1] != "-m" or argv[2] not in ("sglang.launch_server", "sglang.srt.server"):
            text = f"{self.exe}: No module named {argv[2] if len(argv) > 2 else 'sglang'}"
            sim.emit(0.3, text, self.main_pid, raw=True)
            return self._fail(0.35, code="exited", status="1/FAILURE", result="exit-code")
        try:
            args = parse_sglang_args(argv[3:])
        except ArgError as exc:
            sim.emit(
                1.6,
                "usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH] [...]",
                self.main_pid,
                raw=True,
            )
            sim.emit(1.6001, f"launch_server.py: error: {exc}", self.main_pid, raw=True)
            return self._fail(1.65, code="exited", status="2/INVALIDARGUMENT", result="exit-code")

        model_path = str(args["model_path"])
        model = MODELS.get(model_path.rstrip("/"), preset.model)
        tp = _arg_int(args, "tp_size", 1)
        visible = _visible_gpus(inp.env, gpu.count)
        spec = args.get("speculative_algorithm")
        draft: ModelSpec | None = None
        if spec:
            draft_path = str(args.get("speculative_draft_model_path") or "")
            draft = MODELS.get(draft_path.rstrip("/")) or QWEN3_32B_EAGLE3

        # ---- resolved server args (ServerArgs.__post_init__) -------------------------------
        chunk = _arg_int(args, "chunked_prefill_size", 8192)
        max_bs = _arg_int(args, "cuda_graph_max_bs", 256 if tp < 4 else 512)
        if "mem_fraction_static" in args:
            frac = _arg_float(args, "mem_fraction_static", 0.0)
        else:
            reserved = 512 + max(chunk, 2048) * 1.5 + max_bs * 2 + tp / 8 * 1024
            if gpu.total_mib > 60 * 1024:
                reserved = max(reserved, 10240)
            if spec:
                reserved += 4096
            frac = round((gpu.total_mib - reserved) / gpu.total_mib, 3)
        page = max(1, _arg_int(args, "page_size", 1))
        kv_torch, kv_bytes = _kv_dtype(args.get("kv_cache_dtype"), model.dtype)
        rseed = args.get("random_seed")
        if rseed is None:
            rseed = random.Random(f"rseed:{inp.seed}:{inp.boot_no}").randrange(1, 2**30)
        resolved: dict[str, object] = dict(args)
        resolved.update(
            tokenizer_path=args.get("tokenizer_path") or model_path,
            served_model_name=args.get("served_model_name") or model_path,
            mem_fraction_static=frac,
            chunked_prefill_size=chunk,
            cuda_graph_max_bs=max_bs,
            page_size=page,
            random_seed=rseed,
        )
        if spec:
            resolved.setdefault("speculative_num_steps", 3)
            resolved.setdefault("speculative_eagle_topk", 1)
            resolved.setdefault("speculative_num_draft_tokens", 4)
        dump = ", ".join(f"{k}={resolved.get(k, d)!r}" for k, (_, d) in SGLANG_ARGS.items())
        t = 3.6 + jit.uniform(0.0, 0.8)
        sim.emit(t, f"server_args=ServerArgs({dump})", self.main_pid)

        if tp > len(visible) or tp < 1:
            tb = [
                *self._traceback(self._scheduler_frames()[:1]),
                "RuntimeError: CUDA error: invalid device ordinal",
                "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                "below might be incorrect.",
                "",
            ]
            return self._die(t + 2.0, " TP0" if tp > 1 else "", self.main_pid + 2, tb)

        ranks = list(range(tp))
        phys = {r: visible[r] for r in ranks}
        self.rank_pids = {phys[r]: self.main_pid + 2 + r for r in ranks}
        self.aux_pids = (self.main_pid + 2 + tp,)
        tag = {r: (f" TP{r}" if tp > 1 else "") for r in ranks}
        pid = {r: self.main_pid + 2 + r for r in ranks}
        hw = random.Random(f"hw:{inp.seed}")  # the same cards every boot: per-GPU constants
        ctx_gib = {g: 0.86 + 0.04 * hw.random() for g in range(gpu.count)}
        for r in ranks:
            sim.mem_frame(phys[r], 0.0, 0.0)

        # ---- P1 distributed init ------------------------------------------------------------
        t0 = t + 3.2 + jit.uniform(0.0, 0.6)
        free0: dict[int, float] = {}
        p_r: dict[int, float] = {}
        for r in ranks:
            g = phys[r]
            foreign = inp.foreign.mib / 1024.0 if inp.foreign and inp.foreign.gpu == g else 0.0
            free0[r] = gpu.total_gib - gpu.idle_mib / 1024.0 - foreign
            p_r[r] = free0[r] - ctx_gib[g]
            sim.emit(t0 + 0.03 * r, "Init torch distributed begin.", pid[r], tag=tag[r])
            sim.mem_frame(g, t0 + 0.03 * r, 0.0)
        t1 = t0 + 3.3
        big_p = min(p_r.values())
        for r in ranks:
            el = 3.2 + 0.4 * jit.random()
            sim.emit(
                t1 + 0.04 * r,
                f"Init torch distributed ends. elapsed={self.sim.real(el):.2f} s, mem usage={ctx_gib[phys[r]]:.2f} GB",
                pid[r],
                tag=tag[r],
            )
            sim.mem_frame(phys[r], t1 + 0.04 * r, ctx_gib[phys[r]] * 1024)
            if tp > 1 and big_p < p_r[r] * 0.9:
                sim.emit(
                    t1 + 0.04 * r + 0.001,
                    "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                    f"min_per_gpu_memory={big_p}, local_gpu_memory={p_r[r]}, "
                    f"local_gpu_memory * 0.9={p_r[r] * 0.9}",
                    pid[r],
                    tag=tag[r],
                )
        sim.util_frame(t1, 2.0)

        # ---- P2 weights -------------------------------------------------------------------
        t2 = t1 + 0.5
        w_r = model.weights_gib / tp + model.replicated_gib
        for r in ranks:
            sim.emit(t2 + 0.03 * r, f"Load weight begin. avail mem={p_r[r]:.2f} GB", pid[r], tag=tag[r])
        for r in ranks:
            sim.mem_frame(phys[r], t2 + 0.4, ctx_gib[phys[r]] * 1024)
        load_s = model.load_seconds * (8 / max(tp, 1)) ** 0.35
        t_load_end = self._shards(t2 + 0.4, load_s, model.shards, ranks, phys, ctx_gib, w_r, pid[0])
        a_r = {r: p_r[r] - w_r for r in ranks}
        quant = f"quant={model.quant}, " if model.quant else ""
        for r in ranks:
            sim.emit(
                t_load_end + 0.05 * r,
                f"Load weight end. elapsed={self.sim.real(t_load_end - t2):.2f} s, type={model.arch}, "
                f"{quant}avail mem={a_r[r]:.2f} GB, mem usage={w_r:.2f} GB.",
                pid[r],
                tag=tag[r],
            )
        big_a = min(a_r.values())

        # ---- P3 KV pool -------------------------------------------------------------------
        context_len = _arg_int(args, "context_length", model.max_context)
        cell = model.cell_bytes(tp, kv_bytes)
        sizing_cell = float(cell)
        if draft is not None and new_fmt:
            sizing_cell = cell * (1 + draft.layers / model.layers)
        rest = big_a - big_p * (1 - frac)
        tokens = int(int(rest * GIB) // sizing_cell) if rest > 0 else math.floor(rest * GIB / sizing_cell)
        cap = _arg_int(args, "max_total_tokens", 0) if "max_total_tokens" in args else None
        t3 = t_load_end + 0.05 * tp + 0.3
        if cap is not None and tokens > 0:
            if cap > tokens:
                for r in ranks:
                    sim.emit(
                        t3 + 0.01 * r,
                        f"max_total_tokens={cap} is larger than the profiled value {tokens}. "
                        "Use the profiled value instead.",
                        pid[r],
                        tag=tag[r],
                    )
            tokens = min(tokens, cap)
        tokens = tokens // page * page
        sim.emit(t3 + 0.05, f"Using KV cache dtype: {kv_torch}", pid[0], tag=tag[0])
        if tokens <= 0:
            tb = [
                *self._traceback(
                    [
                        *self._scheduler_frames(),
                        ("srt/model_executor/model_runner.py", 611, "initialize", "self.init_memory_pool("),
                        (
                            "srt/model_executor/model_runner_kv_cache_mixin.py",
                            402,
                            "init_memory_pool",
                            "self.max_total_num_tokens = self.profile_max_num_token(total_gpu_memory)",
                        ),
                        ("srt/model_executor/pool_configurator.py", 118, "calculate_pool_sizes", "raise RuntimeError("),
                    ]
                ),
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={frac}",
                "",
            ]
            return self._die(t3 + 0.3, tag[0], pid[0], tb)

        if "max_running_requests" in args:
            mrr = _arg_int(args, "max_running_requests", 1)
        else:
            mrr = min(max(int(tokens / context_len * 512), 2048), 4096)
        mrr = max(1, min(mrr, max(tokens // 2, 1)))
        draft_tokens = _arg_int(resolved, "speculative_num_draft_tokens", 0) if spec else 0
        req_table_gib = (mrr + 1) * (context_len + 4 + draft_tokens) * 4 / GIB
        kv_gib = (tokens + page) * cell / GIB
        misc_gib = 16 / 1024
        avail = {r: a_r[r] - kv_gib - req_table_gib - misc_gib for r in ranks}
        t4 = t3 + 0.4
        short = min(ranks, key=lambda r: avail[r])
        if avail[short] < 0:  # the pools do not fit in what the weights left: torch cannot allocate them
            return self._pool_oom(t4, short, model, tokens, page, cell, req_table_gib, a_r, phys, tag, pid)
        for r in ranks:
            sim.emit(t4 + 0.02 * r, self._kv_line(model, tokens, page, cell, kv_torch, tp, new_fmt), pid[r], tag=tag[r])
            sim.mem_step(phys[r], t4 + 0.02 * r, (free0[r] - (a_r[r] - kv_gib)) * 1024)
        t5 = t4 + 0.5
        for r in ranks:
            sim.emit(t5 + 0.02 * r, f"Memory pool end. avail mem={avail[r]:.2f} GB", pid[r], tag=tag[r])
            sim.mem_step(phys[r], t5 + 0.02 * r, (free0[r] - avail[r]) * 1024)

        # ---- P4 CUDA graphs ----------------------------------------------------------------
        t_cap = t5 + 1.5 + 0.02 * tp
        capture_bs = [b for b in default_capture_bs(max_bs) if b <= mrr]
        disabled = bool(args.get("disable_cuda_graph"))
        if not disabled and capture_bs:
            role = "verify" if spec else "decode"
            ntok = draft_tokens if spec else 1
            res = self._capture(
                t_cap, "target", role, ntok, model, capture_bs, ranks, phys, free0, avail, tag, pid, new_fmt
            )
            if isinstance(res, BootScript):
                return res
            t_cap = res
        # ---- the draft model (EAGLE): its own load, pool and capture ------------------------
        if draft is not None:
            t_d = t_cap + 0.8
            wd = draft.weights_gib / tp + draft.replicated_gib
            for r in ranks:
                sim.emit(t_d + 0.02 * r, f"Load weight begin. avail mem={avail[r]:.2f} GB", pid[r], tag=tag[r])
            base = {r: free0[r] - avail[r] for r in ranks}
            t_de = self._shards(t_d + 0.3, draft.load_seconds, draft.shards, ranks, phys, None, wd, pid[0], base)
            for r in ranks:
                avail[r] -= wd
                sim.emit(
                    t_de + 0.02 * r,
                    f"Load weight end. elapsed={self.sim.real(t_de - t_d):.2f} s, type={draft.arch}, "
                    f"avail mem={avail[r]:.2f} GB, mem usage={wd:.2f} GB.",
                    pid[r],
                    tag=tag[r],
                )
            dcell = draft.cell_bytes(tp, kv_bytes)
            dkv_gib = (tokens + page) * dcell / GIB
            t_dk = t_de + 0.3 + 0.02 * tp
            for r in ranks:
                avail[r] -= dkv_gib
                sim.emit(
                    t_dk + 0.02 * r,
                    self._kv_line(draft, tokens, page, dcell, kv_torch, tp, new_fmt),
                    pid[r],
                    tag=tag[r],
                )
                sim.mem_step(phys[r], t_dk + 0.02 * r, (free0[r] - avail[r]) * 1024)
            t_dp = t_dk + 0.2 + 0.02 * tp
            for r in ranks:
                sim.emit(t_dp + 0.02 * r, f"Memory pool end. avail mem={avail[r]:.2f} GB", pid[r], tag=tag[r])
            t_cap = t_dp + 0.5 + 0.02 * tp
            if not disabled and capture_bs:
                res = self._capture(
                    t_cap, "draft", "decode", 1, draft, capture_bs, ranks, phys, free0, avail, tag, pid, new_fmt
                )
                if isinstance(res, BootScript):
                    return res
                t_cap = res

        # ---- P5 summary, P6 HTTP, P7 ready --------------------------------------------------
        t6 = t_cap + 0.6
        sim.util_frame(t6, 0.0)
        max_prefill = _arg_int(args, "max_prefill_tokens", 16384)
        sim.emit(
            t6,
            f"max_total_num_tokens={tokens}, chunked_prefill_size={chunk}, max_prefill_tokens={max_prefill}, "
            f"max_running_requests={mrr}, context_len={context_len}, available_gpu_mem={avail[0]:.2f} GB",
            pid[0],
            tag=tag[0],
        )
        host = str(args.get("host") or "127.0.0.1")
        port = _arg_int(args, "port", 30000)
        t7 = t6 + 1.1
        m = self.main_pid
        sim.emit(t7, f"INFO:     Started server process [{m}]", m)
        sim.emit(t7 + 0.001, "INFO:     Waiting for application startup.", m)
        sim.emit(t7 + 0.002, "INFO:     Application startup complete.", m)
        sim.emit(t7 + 0.003, f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", m)
        t8 = t7 + 1.0
        if not args.get("skip_server_warmup"):
            cport = 40000 + jit.randrange(20000)
            sim.emit(t8, f'INFO:     127.0.0.1:{cport} - "GET /get_model_info HTTP/1.1" 200 OK', m)
            sim.emit(
                t8 + 0.3,
                "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0,",
                pid[0],
                tag=tag[0],
            )
            sim.util_frame(t8 + 0.3, 15.0)
            sim.emit(t8 + 1.0, f'INFO:     127.0.0.1:{cport + 14} - "POST /generate HTTP/1.1" 200 OK', m)
            sim.util_frame(t8 + 1.05, 0.0)
            t8 += 1.1
        sim.emit(t8, "The server is fired up and ready to roll!", m)
        for r in ranks:
            sim.mem_frame(phys[r], t8, (free0[r] - avail[r]) * 1024)
        return BootScript(
            start=inp.start,
            lines=sim.sorted_lines(),
            outcome="ready",
            end_t=sim.at(t8),
            main_pid=m,
            rank_pids=self.rank_pids,
            aux_pids=self.aux_pids,
            exe=self.exe,
            mem=sim.mem,
            util=sim.util,
            serving=ServingFacts(tokens, mrr, context_len, model.decode_tok_s, pid[0], "sglang", tag[0], sim.ms),
            speed=inp.speed,
        )

    # -- pieces ---------------------------------------------------------------------------------

    def _kv_line(self, model: ModelSpec, tokens: int, page: int, cell: int, dtype: str, tp: int, new_fmt: bool) -> str:
        rows = tokens + page
        dt = f"dtype: {dtype}, " if new_fmt else ""
        if model.attention == "mla":
            return f"KV Cache is allocated. {dt}#tokens: {tokens}, KV size: {rows * cell / GIB:.2f} GB"
        heads = max(1, model.kv_heads // tp)
        kv_bytes = cell // (heads * (model.head_dim + model.v_head_dim) * model.layers)
        k = rows * heads * model.head_dim * model.layers * kv_bytes / GIB
        v = rows * heads * model.v_head_dim * model.layers * kv_bytes / GIB
        return f"KV Cache is allocated. {dt}#tokens: {tokens}, K size: {k:.2f} GB, V size: {v:.2f} GB"

    def _shards(
        self,
        t: float,
        seconds: float,
        shards: int,
        ranks: Sequence[int],
        phys: Mapping[int, int],
        ctx_gib: Mapping[int, float] | None,
        w_r: float,
        pid0: int,
        base_gib: Mapping[int, float] | None = None,
    ) -> float:
        """tqdm shard progress (TP0's process, no prefix) with memory ramping on every rank."""
        sim, jit = self.sim, self.jit
        weights = [0.7 + 0.6 * jit.random() for _ in range(shards)]
        scale = seconds / sum(weights)
        desc = "Loading safetensors checkpoint shards"
        # the loader's bar format ends with "\\n": every redraw is a record of its own ("\\r" first);
        # close() redraws the final state and writes one more newline (an empty record)
        sim.emit(t, f"\r{desc}:   0% Completed | 0/{shards} [00:00<?, ?it/s]", pid0, raw=True)
        done_t = t
        for k in range(1, shards + 1):
            done_t += weights[k - 1] * scale
            el = sim.real(done_t - t)
            sim.emit(done_t, "\r" + _shard_bar(desc, k, shards, el), pid0, raw=True)
            for r in ranks:
                base = ctx_gib[phys[r]] if ctx_gib is not None else (base_gib or {}).get(r, 0.0)
                sim.mem_frame(phys[r], done_t, (base + w_r * k / shards) * 1024)
        close_t = done_t + 0.01
        sim.emit(close_t, "\r" + _shard_bar(desc, shards, shards, sim.real(close_t - t)), pid0, raw=True)
        sim.emit(close_t, "", pid0, raw=True)
        sim.util_frame(t, 4.0)
        sim.util_frame(done_t, 4.0)
        return done_t + 0.3

    def _capture(
        self,
        t: float,
        who: str,
        role: str,
        ntok: int,
        model: ModelSpec,
        capture_bs: Sequence[int],
        ranks: Sequence[int],
        phys: Mapping[int, int],
        free0: Mapping[int, float],
        avail: dict[int, float],
        tag: Mapping[int, str],
        pid: Mapping[int, int],
        new_fmt: bool,
    ) -> float | BootScript:
        sim, inp = self.sim, self.inp
        bs_list = ", ".join(str(b) for b in capture_bs)
        word = "cuda graph" if who == "target" else "draft cuda graph"
        begin_avail = dict(avail)
        for r in ranks:
            if new_fmt:
                text = (
                    f"Capture {who} {role} CUDA graph begin. backend=full, num_tokens_per_bs={ntok}, "
                    f"bs=[{bs_list}], avail mem={avail[r]:.2f} GB"
                )
            else:
                text = f"Capture {word} begin. This can take up to several minutes. avail mem={avail[r]:.2f} GB"
            sim.emit(t + 0.01 * r, text, pid[r], tag=tag[r])
        if not new_fmt and who == "target":
            sim.emit(t + 0.005, f"Capture cuda graph bs [{bs_list}]", pid[0], tag=tag[0])
        sim.util_frame(t, 35.0)
        order = sorted(capture_bs, reverse=True)
        total = len(order)
        desc_t = t + 0.05 + 0.01 * len(ranks)
        start_t = desc_t
        used = dict.fromkeys(ranks, 0.0)
        # TP0's tqdm over the batch sizes: the bar, then per size set_description (before the
        # capture) and the update (after it); all of it one journal record (see ``_TqdmRun``)
        bar = sim.tqdm(pid[0])
        sim.draw(bar, desc_t, _capture_bar("", 0, total, 0.0))
        desc = ""
        for k, bs in enumerate(order):
            el = sim.real(desc_t - start_t)
            desc = f"Capturing batches (bs={bs} avail_mem={avail[0]:.2f} GB)"
            sim.draw(bar, desc_t, _capture_bar(desc, k, total, el))
            need = model.graph_per_graph_gib + model.graph_per_bs_gib * bs
            if k == 0:
                need += model.graph_pool_per_bs_gib * bs
            # the rank with the least free memory fails first
            short = [r for r in ranks if avail[r] - need < 0.02]
            if short:
                r = min(short, key=lambda x: (avail[x], x))
                oom_t = desc_t + 0.4
                if r == 0:  # TP0's own exception leaves the loop: tqdm closes before the traceback
                    sim.close(bar, oom_t, _capture_bar(desc, k, total, sim.real(oom_t - start_t)))
                # another rank's traceback ends TP0's pending bar line (journald: pid-change)
                return self._capture_oom(oom_t, r, need, model, phys, free0, avail, used, tag, pid)
            dur = model.capture_seconds_per_graph * (0.55 + 0.45 * bs / order[0]) * (0.9 + 0.2 * self.jit.random())
            desc_t += dur
            for r in ranks:
                avail[r] -= need
                used[r] += need
                sim.mem_step(phys[r], desc_t, (free0[r] - avail[r]) * 1024)
            sim.draw(bar, desc_t, _capture_bar(desc, k + 1, total, sim.real(desc_t - start_t)))
        sim.close(bar, desc_t + 0.001, _capture_bar(desc, total, total, sim.real(desc_t + 0.001 - start_t)))
        t_end = desc_t + 0.2
        for r in ranks:
            mem_use = begin_avail[r] - avail[r]
            if new_fmt:
                text = (
                    f"Capture {who} {role} CUDA graph end. elapsed={sim.real(t_end - t):.2f} s, "
                    f"mem usage={mem_use:.2f} GB, avail mem={avail[r]:.2f} GB."
                )
            else:
                text = (
                    f"Capture {word} end. Time elapsed: {sim.real(t_end - t):.2f} s. "
                    f"mem usage={mem_use:.2f} GB. avail mem={avail[r]:.2f} GB."
                )
            sim.emit(t_end + 0.02 * r, text, pid[r], tag=tag[r])
        sim.util_frame(t_end, 0.0)
        _ = inp
        return t_end + 0.02 * len(ranks)

    def _torch_oom(self, r: int, need_gib: float, free_gib: float, phys: Mapping[int, int], private_gib: float) -> str:
        """torch's CUDA out-of-memory text for rank ``r`` asking for ``need_gib`` with ``free_gib`` free."""
        inp = self.inp
        g = phys[r]
        total = inp.gpu.total_gib
        free = max(free_gib, 0.0)
        foreign_gib = inp.foreign.mib / 1024.0 if inp.foreign and inp.foreign.gpu == g else 0.0
        own = total - free - foreign_gib - inp.gpu.idle_mib / 1024.0
        reserved_unalloc = 0.12 + 0.2 * self.jit.random()
        allocated = max(own - 0.55 - reserved_unalloc, 0.0)
        local = phys[r] if "CUDA_VISIBLE_DEVICES" not in inp.env else r
        procs = ""
        if inp.foreign is not None and foreign_gib:
            procs = f"Process {inp.foreign.pid} has {torch_size(foreign_gib * GIB)} memory in use. "
        return (
            f"CUDA out of memory. Tried to allocate {torch_size(need_gib * GIB)}. GPU {local} has a total capacity of "
            f"{torch_size(total * GIB)} of which {torch_size(free * GIB)} is free. {procs}Including non-PyTorch "
            f"memory, this process has {torch_size(own * GIB)} memory in use. Of the allocated memory "
            f"{torch_size(allocated * GIB)} is allocated by PyTorch, with {torch_size(private_gib * GIB)} "
            f"allocated in private pools (e.g., CUDA Graphs), and {torch_size(reserved_unalloc * GIB)} is reserved "
            "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )

    def _pool_oom(
        self,
        t: float,
        r: int,
        model: ModelSpec,
        tokens: int,
        page: int,
        cell: int,
        req_table_gib: float,
        a_r: Mapping[int, float],
        phys: Mapping[int, int],
        tag: Mapping[int, str],
        pid: Mapping[int, int],
    ) -> BootScript:
        """The request table, then the KV buffers, layer by layer, do not fit: torch's OOM in
        ``init_memory_pool`` (the engine sized the pool from a budget the allocations outgrow)."""
        frames = [
            *self._scheduler_frames(),
            ("srt/model_executor/model_runner.py", 611, "initialize", "self.init_memory_pool("),
        ]
        if a_r[r] < req_table_gib:
            need, free = req_table_gib, a_r[r]
            frames += [
                ("srt/model_executor/model_runner_kv_cache_mixin.py", 455, "init_memory_pool",
                 "self.req_to_token_pool = ReqToTokenPool("),
                ("srt/mem_cache/memory_pool.py", 98, "__init__", "self.req_to_token = torch.zeros("),
            ]
        else:
            buffers = model.layers * (1 if model.attention == "mla" else 2)  # K and V per layer (MLA: one)
            need = (tokens + page) * cell / buffers / GIB
            left = a_r[r] - req_table_gib
            free = left - need * math.floor(left / need) if need > 0 else left
            pool = "MLATokenToKVPool" if model.attention == "mla" else "MHATokenToKVPool"
            frames += [
                ("srt/model_executor/model_runner_kv_cache_mixin.py", 502, "init_memory_pool",
                 f"self.token_to_kv_pool = {pool}("),
                ("srt/mem_cache/memory_pool.py", 640, "__init__", "self._create_buffers()"),
                ("srt/mem_cache/memory_pool.py", 671, "_create_buffers", "torch.zeros("),
            ]
        oom = self._torch_oom(r, need, free, phys, 0.0)
        tb = [*self._traceback(frames), f"torch.OutOfMemoryError: {oom}", ""]
        return self._die(t, tag[r], pid[r], tb)

    def _capture_oom(
        self,
        t: float,
        r: int,
        need: float,
        model: ModelSpec,
        phys: Mapping[int, int],
        free0: Mapping[int, float],
        avail: Mapping[int, float],
        used_graphs: Mapping[int, float],
        tag: Mapping[int, str],
        pid: Mapping[int, int],
    ) -> BootScript:
        oom = self._torch_oom(r, need, avail[r], phys, used_graphs[r])
        inner = self._traceback(
            [
                ("srt/model_executor/cuda_graph_runner.py", 391, "__init__", "self.capture()"),
                ("srt/model_executor/cuda_graph_runner.py", 503, "capture", ") = self.capture_one_batch_size("),
                ("srt/model_executor/cuda_graph_runner.py", 654, "capture_one_batch_size", "run_once()"),
                (
                    "srt/model_executor/cuda_graph_runner.py",
                    641,
                    "run_once",
                    "logits_output_or_pp_proxy_tensors = forward(",
                ),
            ]
        )
        outer = self._traceback(
            [
                *self._scheduler_frames(),
                ("srt/model_executor/model_runner.py", 640, "initialize", "self.init_device_graphs()"),
                (
                    "srt/model_executor/model_runner.py",
                    1875,
                    "init_device_graphs",
                    "self.graph_runner = graph_runners[self.device](self)",
                ),
                ("srt/model_executor/cuda_graph_runner.py", 393, "__init__", "raise Exception("),
            ]
        )
        tb = [
            *inner,
            f"torch.OutOfMemoryError: {oom}",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            *outer,
            f"Exception: Capture cuda graph failed: {oom}",
            *CAPTURE_FAILED_HELP,
            "",
        ]
        _ = model, free0
        return self._die(t, tag[r], pid[r], tb)


# ---------------------------------------------------------------------------------------------
# The vLLM (0.11, V1 engine) boot
# ---------------------------------------------------------------------------------------------

VLLM_VERSION = "0.11.0"
# dest -> (type, default), in the order vLLM prints its non-default args
VLLM_ARGS: dict[str, tuple[str, object]] = {
    "model_tag": ("str", None),
    "host": ("str", None),
    "port": ("int", 8000),
    "model": ("str", None),
    "trust_remote_code": (_BOOL, False),
    "dtype": ("str", "auto"),
    "seed": ("int", 0),
    "max_model_len": ("int", None),
    "quantization": ("str", None),
    "enforce_eager": (_BOOL, False),
    "served_model_name": ("str", None),
    "pipeline_parallel_size": ("int", 1),
    "tensor_parallel_size": ("int", 1),
    "data_parallel_size": ("int", 1),
    "block_size": ("int", None),
    "gpu_memory_utilization": ("float", 0.9),
    "swap_space": ("float", 4.0),
    "kv_cache_dtype": ("str", "auto"),
    "enable_prefix_caching": (_BOOL, None),
    "max_num_batched_tokens": ("int", None),
    "max_num_seqs": ("int", None),
    "enable_chunked_prefill": (_BOOL, None),
    "disable_log_requests": (_BOOL, False),
}
_VLLM_SHORT = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-dp": "data_parallel_size"}


def parse_vllm_args(args: Sequence[str]) -> dict[str, object]:
    """``vllm serve [model_tag] [options]`` (FlexibleArgumentParser: ``--max_model_len`` works too)."""
    values: dict[str, object] = {}
    rest = list(args)
    if rest and not rest[0].startswith("-"):
        values["model_tag"] = rest.pop(0)
    norm: list[str] = []
    for tok in rest:
        if tok in _VLLM_SHORT:
            norm.append("--" + _VLLM_SHORT[tok].replace("_", "-"))
        elif tok.startswith("--"):
            name, eq, val = tok.partition("=")
            norm.append(name.replace("_", "-") + eq + val)
        else:
            norm.append(tok)
    names = {"--" + k.replace("_", "-"): k for k in VLLM_ARGS if k != "model_tag"}
    parsed = _parse_options(norm, VLLM_ARGS, names)
    values.update(parsed)
    if "model_tag" in values:
        values.setdefault("model", values["model_tag"])
    values.setdefault("model", "Qwen/Qwen3-0.6B")  # vLLM's own default model
    return values


def _vllm_site(exe: str) -> str:
    return _site_packages(exe) + "/vllm"


class _VllmBoot:
    def __init__(self, inp: BootInput) -> None:
        self.inp = inp
        self.sim = _Sim(inp, ms=False)
        rng = random.Random(f"pids:{inp.seed}:{inp.boot_no}")
        self.main_pid = rng.randrange(2000, 60000)
        self.core_pid = self.main_pid + 79
        self.exe = inp.argv[0]
        self.jit = random.Random(f"timing:{inp.seed}:{shlex.join(inp.argv)}")
        self.rank_pids: dict[int, int] = {}

    def log(self, sim_t: float, proc: str, pid: int, fileinfo: str, msg: str, level: str = "INFO") -> None:
        t = self.sim.at(sim_t)
        self.sim.emit(sim_t, f"({proc} pid={pid}) {level} {_vllm_stamp(t)} [{fileinfo}] {msg}", pid, raw=True)

    def raw(self, sim_t: float, proc: str, pid: int, text: str) -> None:
        self.sim.emit(sim_t, f"({proc} pid={pid}) {text}", pid, raw=True)

    def _script(self, outcome: str, sim_t: float, **kw: object) -> BootScript:
        return BootScript(
            start=self.inp.start,
            lines=self.sim.sorted_lines(eof=self.sim.at(sim_t) if outcome == "failed" else None),
            outcome=outcome,
            end_t=self.sim.at(sim_t),
            main_pid=self.main_pid,
            rank_pids=self.rank_pids,
            aux_pids=(self.core_pid,),
            exe=self.exe,
            mem=self.sim.mem,
            util=self.sim.util,
            speed=self.inp.speed,
            **kw,  # type: ignore[arg-type]
        )

    def _fail(self, sim_t: float, proc: str, pid: int, fileinfo: str, exc_lines: Sequence[str]) -> BootScript:
        """An exception in a worker or the engine core: its ERROR traceback, the engine core's
        failure, the API server's RuntimeError, exit status 1."""
        site = _vllm_site(self.exe)
        frames = [
            (f"{site}/v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
            (f"{site}/v1/engine/core.py", 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
        ]
        tb = ["Traceback (most recent call last):"]
        for path, line, func, code in frames:
            tb += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
        if proc.startswith("Worker"):
            self.log(sim_t, proc, pid, "multiproc_executor.py:597", "WorkerProc failed to start.", "ERROR")
            for i, text in enumerate(["Traceback (most recent call last):", *exc_lines]):
                self.log(sim_t + 0.0001 * (i + 1), proc, pid, "multiproc_executor.py:597", text, "ERROR")
            core_exc = [
                "Exception: WorkerProc initialization failed due to an exception in a background process. "
                "See stack trace for root cause."
            ]
            sim_t += 0.5
        else:
            core_exc = list(exc_lines)
        core = self.core_pid
        self.log(sim_t, "EngineCore_DP0", core, "core.py:708", "EngineCore failed to start.", "ERROR")
        for i, text in enumerate([*tb, *core_exc]):
            self.log(sim_t + 0.0001 * (i + 1), "EngineCore_DP0", core, "core.py:708", text, "ERROR")
        t = sim_t + 0.6
        m = self.main_pid
        api = [
            "Traceback (most recent call last):",
            f'  File "{self.exe}", line 10, in <module>',
            "    sys.exit(main())",
            "             ^^^^^^",
            f'  File "{site}/v1/engine/utils.py", line 853, in wait_for_engine_startup',
            "    raise RuntimeError(",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]
        for i, text in enumerate(api):
            self.raw(t + 0.0001 * i, "APIServer", m, text)
        end = t + 1.2
        for gpu in list(self.sim.mem):
            self.sim.mem_step(gpu, end, 0.0)
        self.sim.util_frame(end, 0.0)
        return self._script("failed", end, exit_code="exited", exit_status="1/FAILURE", result="exit-code")

    def run(self) -> BootScript:
        inp, sim, jit = self.inp, self.sim, self.jit
        m = self.main_pid
        try:
            args = parse_vllm_args(inp.argv[2:])
        except ArgError as exc:
            self.raw(2.0, "APIServer", m, "usage: vllm serve [model_tag] [options]")
            self.raw(2.0001, "APIServer", m, f"vllm serve: error: {exc}")
            return self._script("failed", 2.1, exit_code="exited", exit_status="2/INVALIDARGUMENT", result="exit-code")
        model_path = str(args["model"])
        model = MODELS.get(model_path.rstrip("/"), inp.preset.model)
        tp = _arg_int(args, "tensor_parallel_size", 1)
        u = _arg_float(args, "gpu_memory_utilization", 0.9)
        max_len = _arg_int(args, "max_model_len", model.max_context)
        block = _arg_int(args, "block_size", 16)
        max_seqs = _arg_int(args, "max_num_seqs", 256)
        batched = _arg_int(args, "max_num_batched_tokens", 8192)
        eager = bool(args.get("enforce_eager"))
        _, kv_bytes = _kv_dtype(args.get("kv_cache_dtype"), model.dtype)
        gpu = inp.gpu
        visible = _visible_gpus(inp.env, gpu.count)

        t = 2.4 + jit.uniform(0, 0.6)
        self.log(t, "APIServer", m, "api_server.py:1839", f"vLLM API server version {VLLM_VERSION}")
        ordered = {k: args[k] for k in VLLM_ARGS if k in args}
        self.log(t + 0.01, "APIServer", m, "utils.py:233", f"non-default args: {ordered!r}")
        if not 0 < u <= 1:
            for i, text in enumerate(
                [
                    "Traceback (most recent call last):",
                    f'  File "{self.exe}", line 10, in <module>',
                    "    sys.exit(main())",
                    "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig",
                    "gpu_memory_utilization",
                    f"  Input should be {'less than or equal to 1' if u > 1 else 'greater than 0'} "
                    f"[type={'less_than_equal' if u > 1 else 'greater_than'}, input_value={u}, input_type=float]",
                ]
            ):
                self.raw(t + 1.0 + 0.0001 * i, "APIServer", m, text)
            return self._script("failed", t + 1.2, exit_code="exited", exit_status="1/FAILURE", result="exit-code")
        t += 5.5 + jit.uniform(0, 1.0)
        self.log(t, "APIServer", m, "model.py:547", f"Resolved architecture: {model.arch}")
        self.log(t + 0.01, "APIServer", m, "model.py:1510", f"Using max model len {max_len}")
        self.log(
            t + 0.4,
            "APIServer",
            m,
            "scheduler.py:205",
            f"Chunked prefill is enabled with max_num_batched_tokens={batched}.",
        )
        t += 7.0
        core = self.core_pid
        self.log(t, "EngineCore_DP0", core, "core.py:644", "Waiting for init message from front-end.")
        self.log(
            t + 0.05,
            "EngineCore_DP0",
            core,
            "core.py:77",
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model={model_path!r}, "
            "speculative_config=None, "
            f"tokenizer={model_path!r}, skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
            f"trust_remote_code={bool(args.get('trust_remote_code'))}, dtype=torch.{model.dtype}, "
            f"max_seq_len={max_len}, "
            f"download_dir=None, load_format=auto, tensor_parallel_size={tp}, pipeline_parallel_size=1, "
            f"data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager={eager}, "
            f"kv_cache_dtype={args.get('kv_cache_dtype') or 'auto'}, device_config=cuda, seed=0, "
            f"served_model_name={args.get('served_model_name') or model_path}, enable_prefix_caching=True, "
            "chunked_prefill_enabled=True, pooler_config=None",
        )
        if tp < 1 or tp > len(visible):
            return self._fail(
                t + 1.0,
                "EngineCore_DP0",
                core,
                "core.py:708",
                [
                    "ValueError: World size "
                    f"({tp}) is larger than the number of available GPUs ({len(visible)}) in this node."
                ],
            )
        ranks = list(range(tp))
        phys = {r: visible[r] for r in ranks}
        wpid = {r: m + 150 + r for r in ranks}
        self.rank_pids = {phys[r]: wpid[r] for r in ranks}
        wname = {r: f"Worker_TP{r}" if tp > 1 else "EngineCore_DP0" for r in ranks}
        hw = random.Random(f"hw:{inp.seed}")
        ctx_gib = {g: 0.50 + 0.04 * hw.random() for g in range(gpu.count)}
        total = gpu.total_gib
        requested = total * u
        t += 8.0 + 0.5 * tp
        free0: dict[int, float] = {}
        for r in ranks:
            g = phys[r]
            foreign = inp.foreign.mib / 1024.0 if inp.foreign and inp.foreign.gpu == g else 0.0
            free0[r] = total - gpu.idle_mib / 1024.0 - foreign
            sim.mem_frame(g, 0.0, 0.0)
            sim.mem_frame(g, t - 1.0, 0.0)
            sim.mem_frame(g, t + 0.05 * r, ctx_gib[g] * 1024)
            if tp > 1:
                self.log(
                    t + 0.05 * r,
                    wname[r],
                    wpid[r],
                    "parallel_state.py:1208",
                    f"rank {r} in world size {tp} is assigned as DP rank 0, PP rank 0, TP rank {r}, EP rank {r}",
                )
        # the worker's start-up check against memory held by others
        short = [r for r in ranks if free0[r] - ctx_gib[phys[r]] < requested]
        if short:
            r = short[0]
            free = free0[r] - ctx_gib[phys[r]]
            local = r if "CUDA_VISIBLE_DEVICES" in inp.env else phys[r]
            exc_lines = [
                f'  File "{_vllm_site(self.exe)}/v1/worker/gpu_worker.py", line 196, in init_device',
                "    raise ValueError(",
                f"ValueError: Free memory on device cuda:{local} ({free:.2f}/{total:.2f} GiB) on startup is less than "
                f"desired GPU memory utilization ({u}, {requested:.2f} GiB). Decrease GPU memory utilization or "
                "reduce GPU memory used by other processes.",
            ]
            return self._fail(t + 0.3, wname[r], wpid[r], "gpu_worker.py:196", exc_lines)
        t += 0.6
        for r in ranks:
            self.log(
                t + 0.02 * r, wname[r], wpid[r], "gpu_model_runner.py:2602", f"Starting to load model {model_path}..."
            )
        self.log(t + 0.4, wname[0], wpid[0], "cuda.py:366", "Using Flash Attention backend on V1 engine.")
        # weights
        w_r = model.weights_gib / tp + model.replicated_gib
        load_s = model.load_seconds * (8 / max(tp, 1)) ** 0.35
        desc = "Loading safetensors checkpoint shards"
        t_l = t + 0.8
        # the bar format ends with "\\n": one record per redraw, after the stream's line prefix
        self.raw(t_l, wname[0], wpid[0], f"\r{desc}:   0% Completed | 0/{model.shards} [00:00<?, ?it/s]")
        for r in ranks:
            sim.mem_frame(phys[r], t_l, ctx_gib[phys[r]] * 1024)
        weights = [0.7 + 0.6 * jit.random() for _ in range(model.shards)]
        scale = load_s / sum(weights)
        done = t_l
        for k in range(1, model.shards + 1):
            done += weights[k - 1] * scale
            el = sim.real(done - t_l)
            if k % max(1, model.shards // 8) == 0 or k == model.shards:
                self.raw(done, wname[0], wpid[0], "\r" + _shard_bar(desc, k, model.shards, el))
            for r in ranks:
                sim.mem_frame(phys[r], done, (ctx_gib[phys[r]] + w_r * k / model.shards) * 1024)
        # close(): the final state redrawn, then one more newline (a record holding only the prefix)
        self.raw(done, wname[0], wpid[0], "\r" + _shard_bar(desc, model.shards, model.shards, sim.real(done - t_l)))
        self.raw(done, wname[0], wpid[0], "")
        sim.util_frame(t_l, 3.0)
        for r in ranks:
            self.log(
                done + 0.05 * r,
                wname[r],
                wpid[r],
                "default_loader.py:267",
                f"Loading weights took {sim.real(done - t_l) + 0.02 * r:.2f} seconds",
            )
            self.log(
                done + 0.3 + 0.05 * r,
                wname[r],
                wpid[r],
                "gpu_model_runner.py:2653",
                f"Model loading took {w_r:.4f} GiB and {sim.real(done - t) + 0.3 + 0.05 * r:.6f} seconds",
            )
        t = done + 0.5 + 0.05 * tp
        # torch.compile + the memory profile
        compile_s = 0.0
        if not eager:
            h = random.Random(f"cache:{inp.seed}:{model_path}").getrandbits(24)
            dyn = 10.0 + 6.0 * jit.random()
            compile_s = dyn + 12.0 + 6.0 * jit.random()
            self.log(
                t + 0.1,
                wname[0],
                wpid[0],
                "backends.py:548",
                f"Using cache directory: /root/.cache/vllm/torch_compile_cache/{h:06x}/rank_0_0/backbone "
                "for vLLM's torch.compile",
            )
            self.log(
                t + dyn, wname[0], wpid[0], "backends.py:559", f"Dynamo bytecode transform time: {sim.real(dyn):.2f} s"
            )
            self.log(
                t + compile_s,
                wname[0],
                wpid[0],
                "monitor.py:34",
                f"torch.compile takes {sim.real(compile_s):.2f} s in total",
            )
            sim.util_frame(t, 60.0)
        peak = model.vllm_peak_gib * batched / 8192
        non_torch = 0.35 + (0.25 if tp > 1 else 0.0)
        t_prof = t + compile_s + 1.0
        for r in ranks:
            base = ctx_gib[phys[r]] + w_r
            sim.mem_frame(phys[r], t_prof - 0.8, base * 1024)
            sim.mem_frame(phys[r], t_prof - 0.4, (base + peak + non_torch) * 1024)
            sim.mem_step(phys[r], t_prof, (base + non_torch) * 1024)
        kv = requested - (w_r + peak + non_torch)
        for r in ranks:
            self.log(
                t_prof + 0.3 + 0.02 * r,
                wname[r],
                wpid[r],
                "gpu_worker.py:298",
                f"Available KV cache memory: {kv:.2f} GiB",
            )
        t = t_prof + 0.4 + 0.02 * tp
        cell = model.cell_bytes(tp, kv_bytes)  # bytes per token per rank, all layers
        site = _vllm_site(self.exe)
        if kv <= 0:
            return self._fail(
                t + 0.2,
                "EngineCore_DP0",
                core,
                "core.py:708",
                [
                    f'  File "{site}/v1/core/kv_cache_utils.py", line 686, in check_enough_kv_cache_memory',
                    "    raise ValueError(",
                    "ValueError: No available memory for the cache blocks. Try increasing "
                    "`gpu_memory_utilization` when initializing the engine.",
                ],
            )
        kv_bytes_avail = int(kv * GIB)
        need = max_len * cell
        if need > kv_bytes_avail:
            est = kv_bytes_avail // cell // block * block
            return self._fail(
                t + 0.2,
                "EngineCore_DP0",
                core,
                "core.py:708",
                [
                    f'  File "{site}/v1/core/kv_cache_utils.py", line 704, in check_enough_kv_cache_memory',
                    "    raise ValueError(",
                    f"ValueError: To serve at least one request with the models's max seq len ({max_len}), "
                    f"({need / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                    f"({kv:.2f} GiB). Based on the available memory, the estimated maximum model length is {est}. "
                    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                    "engine.",
                ],
            )
        num_blocks = kv_bytes_avail // (block * cell)
        tokens = num_blocks * block
        self.log(t + 0.3, "EngineCore_DP0", core, "kv_cache_utils.py:1087", f"GPU KV cache size: {tokens:,} tokens")
        self.log(
            t + 0.31,
            "EngineCore_DP0",
            core,
            "kv_cache_utils.py:1091",
            f"Maximum concurrency for {max_len:,} tokens per request: {tokens / max_len:.2f}x",
        )
        kv_alloc = num_blocks * block * cell / GIB
        for r in ranks:
            sim.mem_step(phys[r], t + 0.4, (ctx_gib[phys[r]] + w_r + non_torch + kv_alloc) * 1024)
        t += 0.8
        if not eager:
            used = ctx_gib[phys[0]] + w_r + non_torch + kv_alloc
            free = free0[0] - used
            g_need = model.vllm_graph_gib
            pw = [b for b in [1, 2, 4, *range(8, 513, 8)] if b <= batched]
            fw = [b for b in [1, 2, 4, *range(8, 257, 8)] if b <= max_seqs]
            g_s = 0.09 * len(pw) + 0.06 * len(fw)
            sim.util_frame(t, 45.0)
            # worker 0's tqdm bars (one journal record each, see ``_TqdmRun``): PIECEWISE, then FULL
            pdesc = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"
            piece = sim.tqdm(wpid[0], f"({wname[0]} pid={wpid[0]}) ")
            sim.draw(piece, t, _capture_bar(pdesc, 0, len(pw), 0.0))
            if free < g_need:
                k_fail = int(len(pw) * max(free, 0.0) / g_need)
                step = g_s * 0.5 / max(k_fail, 1)
                for k in range(1, k_fail + 1):
                    sim.draw(piece, t + step * k, _capture_bar(pdesc, k, len(pw), sim.real(step * k)))
                # the exception leaves the loop: tqdm's close() redraws and ends the line first
                fail_t = t + g_s * 0.5 + 0.2
                sim.close(piece, fail_t - 0.001, _capture_bar(pdesc, k_fail, len(pw), sim.real(g_s * 0.5 + 0.2)))
                oom = (
                    f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {torch_size(g_need / 4 * GIB)}. "
                    f"GPU {0 if 'CUDA_VISIBLE_DEVICES' in inp.env else phys[0]} has a total capacity of "
                    f"{torch_size(total * GIB)} of which {torch_size(max(free, 0.0) * GIB)} is free. "
                    "Including non-PyTorch "
                    f"memory, this process has {torch_size(used * GIB)} memory in use."
                )
                exc_lines = [
                    f'  File "{site}/v1/worker/gpu_model_runner.py", line 3442, in capture_model',
                    "    self._capture_cudagraphs(",
                    oom,
                ]
                return self._fail(t + g_s * 0.5 + 0.2, wname[0], wpid[0], "gpu_model_runner.py:3442", exc_lines)
            p_s = g_s * 0.6
            for k in range(1, len(pw) + 1):
                sim.draw(piece, t + p_s * k / len(pw), _capture_bar(pdesc, k, len(pw), sim.real(p_s * k / len(pw))))
            sim.close(piece, t + p_s + 0.001)
            fdesc = "Capturing CUDA graphs (decode, FULL)"
            full = sim.tqdm(wpid[0], f"({wname[0]} pid={wpid[0]}) ")
            f0 = t + p_s + 0.002
            f_s = g_s - p_s - 0.002
            sim.draw(full, f0, _capture_bar(fdesc, 0, len(fw), 0.0))
            for k in range(1, len(fw) + 1):
                sim.draw(full, f0 + f_s * k / len(fw), _capture_bar(fdesc, k, len(fw), sim.real(f_s * k / len(fw))))
            sim.close(full, t + g_s)
            for r in ranks:
                sim.mem_step(phys[r], t + g_s, (ctx_gib[phys[r]] + w_r + non_torch + kv_alloc + g_need) * 1024)
                self.log(
                    t + g_s + 0.1 + 0.02 * r,
                    wname[r],
                    wpid[r],
                    "gpu_model_runner.py:3480",
                    f"Graph capturing finished in {max(1, round(sim.real(g_s)))} secs, took {g_need:.2f} GiB",
                )
            t += g_s + 0.2 + 0.02 * tp
        sim.util_frame(t, 0.0)
        init_s = sim.real(t - (t_prof - compile_s - 1.0) + 1.0)
        self.log(
            t + 0.1,
            "EngineCore_DP0",
            core,
            "core.py:210",
            f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} seconds",
        )
        t += 1.8
        host = str(args.get("host") or "0.0.0.0")
        port = _arg_int(args, "port", 8000)
        self.log(t, "APIServer", m, "api_server.py:1634", "Supported_tasks: ['generate']")
        self.log(t + 0.01, "APIServer", m, "api_server.py:1912", f"Starting vLLM API server 0 on http://{host}:{port}")
        self.log(t + 0.02, "APIServer", m, "launcher.py:34", "Available routes are:")
        for i, (route, meth) in enumerate(
            [("/health", "GET"), ("/v1/models", "GET"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST")]
        ):
            self.log(t + 0.02 + 0.001 * i, "APIServer", m, "launcher.py:42", f"Route: {route}, Methods: {meth}")
        self.raw(t + 0.1, "APIServer", m, f"INFO:     Started server process [{m}]")
        self.raw(t + 0.101, "APIServer", m, "INFO:     Waiting for application startup.")
        self.raw(t + 0.102, "APIServer", m, "INFO:     Application startup complete.")
        return self._script(
            "ready",
            t + 0.102,
            serving=ServingFacts(
                tokens, max_seqs, max_len, model.decode_tok_s, m, "vllm", "APIServer", False, VLLM_SERVING_INTERVAL_S
            ),
        )


def _arg_int(args: Mapping[str, object], key: str, default: int) -> int:
    v = args.get(key)
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, int | float):
        return int(v)
    try:
        return int(str(v))
    except ValueError:
        return default


def _arg_float(args: Mapping[str, object], key: str, default: float) -> float:
    v = args.get(key)
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, int | float):
        return float(v)
    try:
        return float(str(v))
    except ValueError:
        return default


def _visible_gpus(env: Mapping[str, str], count: int) -> list[int]:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(count))
    out: list[int] = []
    for part in raw.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= count:
            break  # CUDA stops at the first invalid entry
        out.append(int(part))
    return out


# ---------------------------------------------------------------------------------------------
# Serving (after ready): one record per tick, a pure function of (seed, boot, tick)
# ---------------------------------------------------------------------------------------------

SERVING_INTERVAL_S = 5.0  # simulated seconds between SGLang serving lines
VLLM_SERVING_INTERVAL_S = 10.0  # vLLM logs its stats every 10 s
MIN_SERVING_INTERVAL = 0.1  # real seconds, whatever the speed


def serving_interval(speed: float, sim_interval: float = SERVING_INTERVAL_S) -> float:
    return max(sim_interval / speed, MIN_SERVING_INTERVAL)


def serving_load(seed: int, boot_no: int, sim_t: float) -> float:
    """Offered load in [0, 1] at ``sim_t`` simulated seconds after ready: smooth, seeded."""
    rng = random.Random(f"load:{seed}:{boot_no}")
    p1, p2, p3 = (rng.uniform(0, 2 * math.pi) for _ in range(3))
    x = 0.5 + 0.28 * math.sin(2 * math.pi * sim_t / 900 + p1) + 0.14 * math.sin(2 * math.pi * sim_t / 130 + p2)
    x += 0.06 * math.sin(2 * math.pi * sim_t / 23 + p3)
    ramp = min(1.0, sim_t / 60.0)  # traffic arrives after ready
    return max(0.0, min(1.0, x * ramp))


@dataclass(frozen=True, slots=True)
class ServingTick:
    text: str
    pid: int
    load: float


def serving_tick(facts: ServingFacts, seed: int, boot_no: int, j: int, t: float, sim_t: float) -> ServingTick:
    """Serving line ``j`` of a boot, printed at ``t``, ``sim_t`` simulated seconds after ready."""
    load = serving_load(seed, boot_no, sim_t)
    rng = random.Random(f"tick:{seed}:{boot_no}:{j}")
    running = round(load * facts.max_running_requests * 0.9)
    # the pool fills with the running requests' contexts (plus the prefix cache), never quite full
    usage = min(0.96, max(0.0, 0.04 + 0.86 * load + rng.uniform(-0.03, 0.03))) if running else 0.0
    used = int(usage * facts.tokens)
    queue = max(0, int((load - 0.85) * facts.max_running_requests * 2)) if load > 0.85 else 0
    per_req = facts.decode_tok_s * (1.0 - 0.45 * min(1.0, running / max(facts.max_running_requests, 1)))
    gen = running * per_req * (0.92 + 0.16 * rng.random())
    if facts.engine == "vllm":
        prompt = gen * (0.3 + 1.2 * rng.random()) if running else 0.0
        text = (
            f"({facts.tag} pid={facts.tp_pid}) INFO {_vllm_stamp(t)} [loggers.py:127] Engine 000: "
            f"Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
            f"Running: {running} reqs, Waiting: {queue} reqs, GPU KV cache usage: {100 * usage:.1f}%, "
            f"Prefix cache hit rate: {100 * (0.2 + 0.5 * rng.random()) if running else 0.0:.1f}%"
        )
        return ServingTick(text, facts.tp_pid, load)
    stamp = _sglang_stamp(t, facts.tag, facts.ms)
    if running and rng.random() < 0.15:
        new_seq = 1 + rng.randrange(4)
        new_tok = new_seq * (200 + rng.randrange(6000))
        cached = int(new_tok * rng.random() * 0.6)
        text = (
            f"Prefill batch. #new-seq: {new_seq}, #new-token: {new_tok}, #cached-token: {cached}, "
            f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue},"
        )
        return ServingTick(f"{stamp} {text}", facts.tp_pid, load)
    text = (
        f"Decode batch. #running-req: {running}, #token: {used}, token usage: {usage:.2f}, cuda graph: True, "
        f"gen throughput (token/s): {gen:.2f}, #queue-req: {queue},"
    )
    return ServingTick(f"{stamp} {text}", facts.tp_pid, load)


def _sglang_stamp(t: float, tag: str, ms: bool) -> str:
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    if ms:
        text += f".{round((t % 1.0) * 1000) % 1000:03d}"
    return f"[{text}{tag}]"


def _vllm_stamp(t: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(t))
