"""Boot-log generator for the calculator's tests: an independent simulation of the engines' sizing.

From a (model, GPU, flags) description it writes SGLang 0.5.x and vLLM 0.11 boot logs whose numbers
follow the engines' own formulas (``/work/shared/reference/engines.md`` §2, §3.3), and returns the
truth next to the text (the exact P, A, cells, N, what capture needed, how the boot ended).

It must NOT import ``kvtui.kvcalc``: the calculator is tested against this, not against itself.

    .venv/bin/python tests/boots_gen.py        # re-make tests/fixtures/kvcalc/*.log and truth.json
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from kvtui.boot import Boot, BootMetrics, BootStatus, Failure
from kvtui.engines.events import Engine, FailureKind, Phase

GIB = float(1 << 30)
OUT_DIR = Path(__file__).parent / "fixtures" / "kvcalc"


# ---------------------------------------------------------------------------------------------
# Descriptions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    name: str
    arch: str
    kind: str = "mha"  # mha | mla | dsa | dsv4
    layers: int = 80
    kv_heads: int = 8
    head_dim: int = 128
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 448  # dsv4
    index_head_dim: int = 128  # dsa / dsv4
    compress_ratios: tuple[int, ...] = ()  # dsv4: one entry per layer (0 = none, 4, 128)
    window: int = 128  # dsv4 swa page
    weights_gib: float = 130.0  # all ranks together (MLA/MoE models shard too)
    draft_layers: int = 0  # EAGLE/MTP draft (same per-layer KV as the target)
    draft_weights_gib: float = 0.0  # per rank
    graph_per_graph_gib: float = 0.02  # CUDA graph cost per captured batch size: a + b·bs
    graph_per_bs_gib: float = 0.0006
    vocab: int = 128256


@dataclass(frozen=True)
class GpuSpec:
    name: str
    total_gib: float


@dataclass(frozen=True)
class SglangFlags:
    mem_fraction_static: float = 0.85
    tp_size: int = 4
    page_size: int | None = 1
    context_length: int = 131072
    max_running_requests: int | None = None
    cuda_graph_max_bs: int | None = 160
    chunked_prefill_size: int = 8192
    kv_cache_dtype: str = "auto"
    max_total_tokens: int | None = None
    speculative_algorithm: str | None = None
    disable_cuda_graph: bool = False


@dataclass(frozen=True)
class VllmFlags:
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 2
    max_model_len: int = 131072
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    kv_cache_dtype: str = "auto"


@dataclass
class Truth:
    """What the simulated engine really did (exact, unrounded)."""

    engine: str
    fraction: float
    status: str  # ready | oom_graph_capture | oom_kv_allocate | kv_too_small | no_kv_memory
    tokens: int
    p_gib: float = 0.0
    a_gib: float = 0.0
    rest_gib: float = 0.0
    cell_alloc: int = 0
    cell_sizer: int = 0
    draft_cell: int = 0
    page: int = 1
    pool_end_gib: float = 0.0
    graph_need_gib: float = 0.0
    graph_mem_gib: float = 0.0
    req_gib: float = 0.0
    running_requests: int = 0
    kv_gib: float = 0.0
    total_gib: float = 0.0
    bytes_per_token: int = 0
    capture_bs: list[int] = field(default_factory=list)
    # what the log shows, as a log reader would aggregate it (min over ranks for avail figures, max
    # for graph memory, TP0 for sizes); used to build ``Boot`` objects without the log parser
    printed: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Models and GPUs used by the fixtures
# ---------------------------------------------------------------------------------------------

H100 = GpuSpec("H100 80GB HBM3", 79.19)
H200 = GpuSpec("H200", 139.81)
B200 = GpuSpec("B200", 178.36)

LLAMA70B = ModelSpec(
    "Llama-3.1-70B-Instruct",
    "LlamaForCausalLM",
    "mha",
    layers=80,
    kv_heads=8,
    head_dim=128,
    weights_gib=131.4,
    graph_per_graph_gib=0.03,
    graph_per_bs_gib=0.0005,
)
LLAMA8B = ModelSpec(
    "Meta-Llama-3.1-8B-Instruct",
    "LlamaForCausalLM",
    "mha",
    layers=32,
    kv_heads=8,
    head_dim=128,
    weights_gib=14.96,
    graph_per_graph_gib=0.01,
    graph_per_bs_gib=0.0002,
)
QWEN72B = ModelSpec(
    "Qwen2.5-72B-Instruct",
    "Qwen2ForCausalLM",
    "mha",
    layers=80,
    kv_heads=8,
    head_dim=128,
    weights_gib=135.5,
    graph_per_graph_gib=0.05,
    graph_per_bs_gib=0.0006,
    vocab=152064,
)
DSV3 = ModelSpec(
    "DeepSeek-V3",
    "DeepseekV3ForCausalLM",
    "mla",
    layers=61,
    weights_gib=642.0,
    graph_per_graph_gib=0.06,
    graph_per_bs_gib=0.0012,
    vocab=129280,
)
KIMI = ModelSpec(
    "Kimi-K2-Instruct",
    "DeepseekV3ForCausalLM",
    "mla",
    layers=61,
    weights_gib=594.0,
    graph_per_graph_gib=0.07,
    graph_per_bs_gib=0.0015,
    vocab=163840,
)
DSV32 = ModelSpec(
    "DeepSeek-V3.2-Exp",
    "DeepseekV32ForCausalLM",
    "dsa",
    layers=61,
    weights_gib=642.0,
    graph_per_graph_gib=0.06,
    graph_per_bs_gib=0.0012,
    vocab=129280,
)
DSV4 = ModelSpec(
    "DeepSeek-V4-Flash",
    "DeepseekV4ForCausalLM",
    "dsv4",
    layers=43,
    compress_ratios=tuple([0, 0] + [4, 128] * 20 + [4]),
    weights_gib=150.0,
    graph_per_graph_gib=0.05,
    graph_per_bs_gib=0.001,
    vocab=129280,
)
LLAMA70B_EAGLE = replace(LLAMA70B, name="Llama-3.1-70B-Instruct", draft_layers=1, draft_weights_gib=1.6)


# ---------------------------------------------------------------------------------------------
# Engine formulas (written from engines.md, independently of kvtui.kvcalc)
# ---------------------------------------------------------------------------------------------


def kv_bytes_per_elem(dtype: str) -> int:
    return 1 if dtype.startswith("fp8") else 2


def sglang_cells(model: ModelSpec, flags: SglangFlags, version: tuple[int, ...]) -> tuple[int, int, int, float]:
    """(allocated cell, sizing cell, draft cell, dsv4 bytes_per_full_token) per rank, in bytes."""
    kvb = kv_bytes_per_elem(flags.kv_cache_dtype)
    draft = 0
    bpft = 0.0
    if model.kind == "mha":
        heads = max(1, model.kv_heads // flags.tp_size)
        per_layer = heads * model.head_dim * 2 * kvb
        alloc = per_layer * model.layers
        sizer = alloc
        if model.draft_layers:
            draft = per_layer * model.draft_layers
            if version >= (0, 5, 14):  # EAGLE targets inflate the sizing cell by (1 + d/L)
                sizer = int(alloc * (1 + model.draft_layers / model.layers))
    elif model.kind == "mla":
        alloc = (model.kv_lora_rank + model.qk_rope_head_dim) * model.layers * kvb
        sizer = alloc
    elif model.kind == "dsa":
        indexer = model.index_head_dim + model.index_head_dim // 128 * 4  # 132
        if kvb == 1:
            mla = model.kv_lora_rank + model.kv_lora_rank // 128 * 4 + model.qk_rope_head_dim * 2  # 656
        else:
            mla = (model.kv_lora_rank + model.qk_rope_head_dim) * kvb
        alloc = (mla + indexer) * model.layers
        if kvb == 1 and version < (0, 5, 17):  # the sizing bug: 576 + 132 per layer
            sizer = (model.kv_lora_rank + model.qk_rope_head_dim + indexer) * model.layers
        else:
            sizer = alloc
    elif model.kind == "dsv4":
        kv = model.qk_nope_head_dim + 2 * model.qk_rope_head_dim + 8
        idx = model.index_head_dim + model.index_head_dim // 128 * 4
        attn_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
        n4 = sum(1 for r in model.compress_ratios if r == 4)
        n128 = sum(1 for r in model.compress_ratios if r == 128)
        n_all = len(model.compress_ratios)
        ratio = 0.1
        ring4, ring128 = 8, 128
        c4_state, c128_state, c4_idx_state = 2 * 2 * attn_dim * 4, 2 * attn_dim * 4, 2 * 2 * model.index_head_dim * 4
        bpft = (
            ratio * kv * n_all
            + kv * n4 / 4
            + kv * n128 / 128
            + idx * n4 / 4
            + ratio * (ring4 / model.window) * c4_state * n4
            + ratio * (ring128 / model.window) * c128_state * n128
            + ratio * (ring4 / model.window) * c4_idx_state * n4
        )
        alloc = sizer = round(bpft)
    else:
        raise ValueError(model.kind)
    return alloc, sizer, draft, bpft


def sglang_capture_bs(max_bs: int, mrr: int) -> list[int]:
    base = [1, 2, 4, 8, 12, 16, *list(range(24, 257, 8)), *list(range(272, 513, 16))]
    return [b for b in base if b <= max_bs and b <= mrr]


def default_mrr(tokens: int, ctx: int) -> int:
    return max(1, min(min(max(int(tokens / ctx * 512), 2048), 4096), tokens // 2))


# ---------------------------------------------------------------------------------------------
# SGLang log writer
# ---------------------------------------------------------------------------------------------


class _Clock:
    def __init__(self, start: datetime) -> None:
        self.t = start

    def tick(self, seconds: float) -> datetime:
        self.t += timedelta(seconds=seconds)
        return self.t

    def stamp(self) -> str:
        return self.t.strftime("%Y-%m-%d %H:%M:%S")


def _g(x: float) -> str:
    return f"{x:.2f}"


def sglang_boot(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: SglangFlags,
    *,
    version: tuple[int, ...] = (0, 5, 10),
    seed: int = 0,
    start: datetime | None = None,
    hidden_reserve_gib: float = 0.0,
    capture_transient_gib: float = 0.6,
) -> tuple[list[str], Truth]:
    """One SGLang boot: its log lines and the truth."""
    rng = random.Random(seed)
    clock = _Clock(start or datetime(2026, 5, 1, 10, 0, 0))
    tp = flags.tp_size
    ranks = [f"TP{i}" if tp > 1 else "" for i in range(tp)]
    lines: list[str] = []
    facts: dict[str, float] = {}
    dfacts: dict[str, float] = {}
    trail: list[tuple[int, float]] = []
    printed: dict[str, object] = {
        "facts": facts,
        "draft_facts": dfacts,
        "trail": trail,
        "capture_bs": [],
        "status": "ready",
        "failure": None,
        "engine": "sglang",
        "version": ".".join(str(v) for v in version),
    }

    def log(rank: str, text: str, dt: float = 0.0) -> None:
        clock.tick(dt)
        tag = f" {rank}" if rank else ""
        lines.append(f"[{clock.stamp()}{tag}] {text}")

    def rnd(x: float) -> float:
        return float(_g(x))

    def raw(text: str) -> None:
        lines.append(text)

    page = flags.page_size or (256 if model.kind == "dsv4" else 64 if model.kind == "dsa" else 1)
    new_capture = version >= (0, 5, 14)
    args = (
        f"server_args=ServerArgs(model_path='/models/{model.name}', tokenizer_path='/models/{model.name}', "
        f"tokenizer_mode='auto', load_format='auto', trust_remote_code=True, dtype='auto', "
        f"kv_cache_dtype='{flags.kv_cache_dtype}', host='0.0.0.0', port=30000, "
        f"mem_fraction_static={flags.mem_fraction_static}, max_running_requests={flags.max_running_requests}, "
        f"max_total_tokens={flags.max_total_tokens}, chunked_prefill_size={flags.chunked_prefill_size}, "
        f"max_prefill_tokens=16384, schedule_policy='fcfs', tp_size={tp}, pp_size=1, "
        f"page_size={flags.page_size}, context_length={flags.context_length}, "
        f"cuda_graph_max_bs={flags.cuda_graph_max_bs}, disable_cuda_graph={flags.disable_cuda_graph}, "
        f"speculative_algorithm={flags.speculative_algorithm!r}, enable_metrics=False, log_level='info')"
    )
    log("", args)
    printed["flags"] = {
        "model_path": f"/models/{model.name}",
        "kv_cache_dtype": flags.kv_cache_dtype,
        "dtype": "auto",
        "mem_fraction_static": flags.mem_fraction_static,
        "max_running_requests": flags.max_running_requests,
        "max_total_tokens": flags.max_total_tokens,
        "chunked_prefill_size": flags.chunked_prefill_size,
        "max_prefill_tokens": 16384,
        "tp_size": tp,
        "pp_size": 1,
        "page_size": flags.page_size,
        "context_length": flags.context_length,
        "cuda_graph_max_bs": flags.cuda_graph_max_bs,
        "disable_cuda_graph": flags.disable_cuda_graph,
        "speculative_algorithm": flags.speculative_algorithm,
    }
    init_usage = 0.5 + 0.125 * tp
    p_rank = [gpu.total_gib - init_usage - rng.uniform(0.0, 0.04) - 0.02 * i for i in range(tp)]
    for r in ranks:
        log(r, "Init torch distributed begin.", 0.2)
    for r in ranks:
        log(
            r, f"Init torch distributed ends. elapsed={rng.uniform(2.5, 4.0):.2f} s, mem usage={_g(init_usage)} GB", 0.3
        )
    for r, p in zip(ranks, p_rank, strict=True):
        log(r, f"Load weight begin. avail mem={_g(p)} GB", 0.1)
    w = model.weights_gib / tp
    shards = 30
    for i in range(0, shards + 1, 5):
        clock.tick(8.0)
        raw(
            f"Loading safetensors checkpoint shards: {int(i / shards * 100):3d}% Completed | {i}/{shards} "
            f"[00:{i:02d}<00:00, 6.0s/it]"
        )
    a_rank = [p - w for p in p_rank]
    facts["avail_before_load_gib"] = min(rnd(x) for x in p_rank)
    facts["avail_after_load_gib"] = min(rnd(x) for x in a_rank)
    facts["weights_gib"] = rnd(w)
    for r, a in zip(ranks, a_rank, strict=True):
        log(
            r,
            f"Load weight end. elapsed=240.00 s, type={model.arch}, dtype=torch.bfloat16, avail mem={_g(a)} GB, "
            f"mem usage={_g(w)} GB.",
            0.1,
        )
    p_min, a_min = min(p_rank), min(a_rank)
    f = flags.mem_fraction_static
    rest = a_min - p_min * (1 - f) - hidden_reserve_gib
    alloc, sizer, draft_cell, bpft = sglang_cells(model, flags, version)
    kvb = kv_bytes_per_elem(flags.kv_cache_dtype)
    dt_name = "torch.float8_e4m3fn" if kvb == 1 else "torch.bfloat16"
    log(ranks[0], f"Using KV cache dtype: {dt_name}")
    tokens = int(int(rest * GIB) / bpft) if model.kind == "dsv4" else int(rest * GIB) // sizer
    if flags.max_total_tokens is not None:
        tokens = min(tokens, flags.max_total_tokens)
    tokens = tokens // page * page
    truth = Truth(
        "sglang",
        f,
        "ready",
        tokens,
        p_gib=p_min,
        a_gib=a_min,
        rest_gib=rest,
        cell_alloc=alloc,
        cell_sizer=sizer,
        draft_cell=draft_cell,
        page=page,
    )
    if tokens <= 0:
        log(ranks[0], "Scheduler hit an exception: Traceback (most recent call last):", 0.1)
        raw(
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/pool_configurator.py", '
            "line 61, in __post_init__"
        )
        raw(
            f"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={f}"
        )
        log("", "Received sigquit from a child process. It usually means the child failed.", 0.1)
        truth.status = "oom_kv_allocate"
        printed["status"] = "failed"
        printed["failure"] = (
            "oom_kv_allocate",
            "kv_allocate",
            "RuntimeError: Not enough memory. Please try to "
            f"increase --mem-fraction-static. Current value: mem_fraction_static={f}",
        )
        truth.printed = printed
        return lines, truth
    if model.kind == "dsv4":
        swa = int(tokens * 0.1) // page * page
        for r in ranks:
            log(
                r,
                f"DSV4 memory calculation: bytes_per_full_token={bpft:.2f}, available_bytes={_g(rest)} GB, "
                f"full_token={tokens}",
                0.05,
            )
        facts["dsv4_bytes_per_full_token"] = round(bpft, 2)
        facts["dsv4_available_gib"] = rnd(rest)
        facts["dsv4_full_token"] = tokens
        facts["kv_tokens"] = tokens
        log(
            ranks[0],
            f"DSV4 pool sizes: full={tokens}, swa={swa}, c4={tokens // 4}, c128={tokens // 128}, "
            f"c4_state={swa // model.window * 8}, c128_state={swa // model.window * 128}",
        )
    else:
        kv_bytes = (tokens + page) * alloc
        for r in ranks:
            if model.kind == "mha":
                half = kv_bytes / 2 / GIB
                text = f"#tokens: {tokens}, K size: {_g(half)} GB, V size: {_g(half)} GB"
                facts["kv_cache_gib"] = round(2 * rnd(half), 2)
            else:
                text = f"#tokens: {tokens}, KV size: {_g(kv_bytes / GIB)} GB"
                facts["kv_cache_gib"] = rnd(kv_bytes / GIB)
            facts["kv_tokens"] = tokens
            prefix = f"dtype: {dt_name}, " if version >= (0, 5, 13) else ""
            log(r, f"KV Cache is allocated. {prefix}{text}", 0.05)
    ctx = flags.context_length
    mrr = flags.max_running_requests or default_mrr(tokens, ctx)
    req = mrr * (ctx + 4) * 4 / GIB
    kv_gib = ((tokens + page) * alloc if model.kind != "dsv4" else tokens * bpft) / GIB
    misc = 0.01
    pool_end_rank = [a - kv_gib - req - misc for a in a_rank]
    for r, pe in zip(ranks, pool_end_rank, strict=True):
        log(r, f"Memory pool end. avail mem={_g(pe)} GB", 0.05)
    facts["avail_after_pool_gib"] = min(rnd(x) for x in pool_end_rank)
    cur = list(pool_end_rank)
    if model.draft_layers:
        dw = model.draft_weights_gib
        for i, r in enumerate(ranks):
            log(r, f"Load weight begin. avail mem={_g(cur[i])} GB", 0.1)
        dfacts["avail_before_load_gib"] = min(rnd(x) for x in cur)
        cur = [x - dw for x in cur]
        dfacts["avail_after_load_gib"] = min(rnd(x) for x in cur)
        dfacts["weights_gib"] = rnd(dw)
        for i, r in enumerate(ranks):
            log(
                r,
                f"Load weight end. elapsed=5.00 s, type=LlamaForCausalLMEagle, dtype=torch.bfloat16, "
                f"avail mem={_g(cur[i])} GB, mem usage={_g(dw)} GB.",
                0.1,
            )
        draft_kv = (tokens + page) * draft_cell
        for r in ranks:
            half = draft_kv / 2 / GIB
            prefix = f"dtype: {dt_name}, " if version >= (0, 5, 13) else ""
            log(
                r,
                f"KV Cache is allocated. {prefix}#tokens: {tokens}, K size: {_g(half)} GB, V size: {_g(half)} GB",
                0.05,
            )
            dfacts["kv_tokens"] = tokens
            dfacts["kv_cache_gib"] = round(2 * rnd(half), 2)
        cur = [x - draft_kv / GIB for x in cur]
        for i, r in enumerate(ranks):
            log(r, f"Memory pool end. avail mem={_g(cur[i])} GB", 0.05)
        dfacts["avail_after_pool_gib"] = min(rnd(x) for x in cur)
    pool_end = min(cur)
    truth.pool_end_gib = pool_end
    truth.req_gib = req
    truth.running_requests = mrr
    truth.kv_gib = kv_gib
    if flags.disable_cuda_graph:
        bs_list: list[int] = []
    else:
        bs_list = sglang_capture_bs(flags.cuda_graph_max_bs or 160, mrr)
    truth.capture_bs = bs_list
    printed["capture_bs"] = list(bs_list)
    workspace = 0.05
    graph_cost = sum(model.graph_per_graph_gib + model.graph_per_bs_gib * b for b in bs_list)
    draft_graph = 0.3 * graph_cost if model.draft_layers else 0.0
    truth.graph_need_gib = workspace + graph_cost + draft_graph
    if bs_list:
        begin = min(cur) - workspace
        cur0 = cur[0] - workspace
        if new_capture:
            log(
                ranks[0],
                f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_bs=1, "
                f"bs={bs_list}, avail mem={_g(cur0)} GB",
                0.5,
            )
        else:
            log(
                ranks[0], f"Capture cuda graph begin. This can take up to several minutes. avail mem={_g(cur0)} GB", 0.5
            )
            log(ranks[0], f"Capture cuda graph bs {bs_list}")
        facts["graph_begin_avail_gib"] = rnd(cur0)
        avail = begin  # the tightest rank decides
        shown = cur0
        total_n = len(bs_list)
        for k, b in enumerate(sorted(bs_list, reverse=True), start=1):
            raw(
                f"Capturing batches (bs={b} avail_mem={_g(shown)} GB): {int(k / total_n * 100):3d}%|"
                f"          | {k}/{total_n} [00:{k:02d}<00:00,  1.10it/s]"
            )
            trail.append((b, rnd(shown)))
            cost = model.graph_per_graph_gib + model.graph_per_bs_gib * b
            if avail < cost + capture_transient_gib:
                clock.tick(k * 0.9)
                free_mib = max(0.0, avail - 0.02) * 1024
                log(ranks[0], "Scheduler hit an exception: Traceback (most recent call last):")
                raw(
                    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", '
                    "line 391, in __init__"
                )
                raw("    self.capture()")
                exc = (
                    f"Exception: Capture cuda graph failed: torch.OutOfMemoryError: CUDA out of memory. Tried to "
                    f"allocate {cost + capture_transient_gib:.2f} GiB. GPU 0 has a total capacity of "
                    f"{gpu.total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch memory, "
                    f"this process has {gpu.total_gib - avail:.2f} GiB memory in use. If reserved but unallocated "
                    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                    "fragmentation."
                )
                raw(exc)
                raw("Possible solutions:")
                raw("1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)")
                raw("2. set --cuda-graph-max-bs to a smaller value (e.g., 16)")
                raw("3. disable torch compile by not using --enable-torch-compile")
                raw("4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)")
                raw("Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose")
                log("", "Received sigquit from a child process. It usually means the child failed.", 0.1)
                truth.status = "oom_graph_capture"
                printed["status"] = "failed"
                facts["oom_tried_gib"] = float(f"{cost + capture_transient_gib:.2f}")
                facts["oom_free_gib"] = float(f"{free_mib:.2f}") / 1024
                facts["oom_capacity_gib"] = float(f"{gpu.total_gib:.2f}")
                printed["failure"] = ("oom_graph_capture", "graph_capture", exc)
                truth.printed = printed
                return lines, truth
            avail -= cost
            shown -= cost
        clock.tick(total_n * 0.9)
        used = workspace + graph_cost
        if new_capture:
            log(
                ranks[0],
                f"Capture target decode CUDA graph end. elapsed={total_n * 0.9:.2f} s, "
                f"mem usage={_g(graph_cost)} GB, avail mem={_g(shown)} GB.",
            )
        else:
            log(
                ranks[0],
                f"Capture cuda graph end. Time elapsed: {total_n * 0.9:.2f} s. mem usage={_g(graph_cost)} GB. "
                f"avail mem={_g(shown)} GB.",
            )
        truth.graph_mem_gib = graph_cost
        facts["graph_mem_gib"] = rnd(graph_cost)
        facts["avail_after_graph_gib"] = rnd(shown)
        if model.draft_layers:
            if new_capture:
                log(
                    ranks[0],
                    f"Capture draft decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs={bs_list}, "
                    f"avail mem={_g(shown)} GB",
                    0.2,
                )
                shown -= draft_graph
                dfacts["graph_mem_gib"] = rnd(draft_graph)
                dfacts["avail_after_graph_gib"] = rnd(shown)
                log(
                    ranks[0],
                    f"Capture draft decode CUDA graph end. elapsed=2.00 s, mem usage={_g(draft_graph)} GB, "
                    f"avail mem={_g(shown)} GB.",
                    2.0,
                )
            else:
                log(
                    ranks[0],
                    f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={_g(shown)} GB",
                    0.2,
                )
                shown -= draft_graph
                dfacts["graph_mem_gib"] = rnd(draft_graph)
                dfacts["avail_after_graph_gib"] = rnd(shown)
                log(
                    ranks[0],
                    f"Capture draft cuda graph end. Time elapsed: 2.00 s. mem usage={_g(draft_graph)} GB. "
                    f"avail mem={_g(shown)} GB.",
                    2.0,
                )
        after = pool_end - used - draft_graph
    else:
        after = pool_end
    summary_avail = after + (cur[0] - min(cur))
    log(
        ranks[0],
        f"max_total_num_tokens={tokens}, chunked_prefill_size={flags.chunked_prefill_size}, "
        f"max_prefill_tokens=16384, max_running_requests={mrr}, context_len={ctx}, "
        f"available_gpu_mem={_g(summary_avail)} GB",
        0.5,
    )
    facts.update(
        max_total_num_tokens=tokens,
        chunked_prefill_size=flags.chunked_prefill_size,
        max_running_requests=mrr,
        context_len=ctx,
        available_gpu_mem_gib=rnd(summary_avail),
    )
    log("", "INFO:     Started server process [4242]", 0.5)
    log("", "INFO:     Waiting for application startup.")
    log("", "INFO:     Application startup complete.")
    log("", "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    log("", 'INFO:     127.0.0.1:51234 - "GET /model_info HTTP/1.1" 200 OK', 1.0)
    log("", "The server is fired up and ready to roll!", 1.0)
    for i in range(3):
        log(
            ranks[0],
            f"Decode batch. #running-req: {i + 1}, #token: {(i + 1) * 300}, token usage: "
            f"{(i + 1) * 300 / tokens:.2f}, cuda graph: True, gen throughput (token/s): 41.{i}, #queue-req: 0",
            2.0,
        )
    truth.printed = printed
    return lines, truth


# ---------------------------------------------------------------------------------------------
# vLLM log writer (0.11, V1 engine)
# ---------------------------------------------------------------------------------------------


def vllm_boot(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    *,
    seed: int = 0,
    start: datetime | None = None,
) -> tuple[list[str], Truth]:
    rng = random.Random(seed)
    clock = _Clock(start or datetime(2026, 8, 21, 10, 0, 0))
    tp = flags.tensor_parallel_size
    lines: list[str] = []

    def log(proc: str, text: str, dt: float = 0.0, src: str = "gpu_worker.py:298") -> None:
        clock.tick(dt)
        lines.append(f"({proc}) INFO {clock.t.strftime('%m-%d %H:%M:%S')} [{src}] {text}")

    facts: dict[str, float] = {}
    printed: dict[str, object] = {
        "facts": facts,
        "draft_facts": {},
        "trail": [],
        "capture_bs": [],
        "status": "ready",
        "failure": None,
        "engine": "vllm",
        "version": "0.11.0",
        "flags": {
            "model": f"/models/{model.name}",
            "tensor_parallel_size": tp,
            "gpu_memory_utilization": flags.gpu_memory_utilization,
            "max_model_len": flags.max_model_len,
            "max_num_seqs": flags.max_num_seqs,
        },
    }
    api, core = "APIServer pid=2211", "EngineCore_DP0 pid=2290"
    workers = [f"Worker_TP{i} pid={2350 + i}" for i in range(tp)]
    log(api, "vLLM API server version 0.11.0", 0, "api_server.py:1839")
    log(
        api,
        f"non-default args: {{'model': '/models/{model.name}', 'tensor_parallel_size': {tp}, "
        f"'gpu_memory_utilization': {flags.gpu_memory_utilization}, 'max_model_len': {flags.max_model_len}, "
        f"'max_num_seqs': {flags.max_num_seqs}, 'port': 8000}}",
        0.1,
        "utils.py:233",
    )
    log(api, f"Using max model len {flags.max_model_len}", 8, "model.py:1510")
    for wk in workers:
        log(wk, f"Starting to load model /models/{model.name}...", 10, "gpu_model_runner.py:2602")
    weights = model.weights_gib / tp
    for wk in workers:
        log(
            wk,
            f"Model loading took {weights:.4f} GiB and {rng.uniform(7, 9):.6f} seconds",
            8,
            "gpu_model_runner.py:2653",
        )
    log(workers[0], "torch.compile takes 26.87 s in total", 20, "monitor.py:34")
    u = flags.gpu_memory_utilization
    act = 0.00012 * flags.max_num_batched_tokens + 0.2  # torch peak of the profile run
    non_torch = 0.35 + 0.05 * tp
    kv = gpu.total_gib * u - weights - act - non_torch
    kvb = kv_bytes_per_elem(flags.kv_cache_dtype)
    bpt = max(1, model.kv_heads // tp) * model.head_dim * 2 * kvb * model.layers
    truth = Truth("vllm", u, "ready", 0, kv_gib=kv, total_gib=gpu.total_gib, bytes_per_token=bpt, page=flags.block_size)
    for wk in workers:
        log(wk, f"Available KV cache memory: {kv:.2f} GiB", 1)
    facts.update(weights_gib=float(f"{weights:.4f}"), kv_cache_gib=float(f"{kv:.2f}"), context_len=flags.max_model_len)
    truth.printed = printed
    if kv <= 0:
        lines.append(f"({core}) ERROR {clock.t.strftime('%m-%d %H:%M:%S')} [core.py:708] EngineCore failed to start.")
        lines.append(
            f"({core}) ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
        truth.status = "no_kv_memory"
        printed["status"] = "failed"
        printed["failure"] = ("oom_kv_allocate", "kv_allocate", lines[-1].split(") ", 1)[1])
        return lines, truth
    block_bytes = bpt * flags.block_size
    blocks = int(kv * GIB) // block_bytes
    tokens = blocks * flags.block_size
    truth.tokens = tokens
    if tokens < flags.max_model_len:
        need = flags.max_model_len * bpt / GIB
        lines.append(f"({core}) ERROR {clock.t.strftime('%m-%d %H:%M:%S')} [core.py:708] EngineCore failed to start.")
        lines.append(
            f"({core}) ValueError: To serve at least one request with the models's max seq len "
            f"({flags.max_model_len}), ({need:.2f} GiB KV cache is needed, which is larger than the available "
            f"KV cache memory ({kv:.2f} GiB). Based on the available memory, the estimated maximum model "
            f"length is {tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
        )
        truth.status = "kv_too_small"
        printed["status"] = "failed"
        printed["failure"] = ("kv_too_small", "kv_allocate", lines[-1].split(") ", 1)[1])
        facts.update(kv_needed_gib=float(f"{need:.2f}"), estimated_max_len=tokens)
        return lines, truth
    log(core, f"GPU KV cache size: {tokens:,} tokens", 1, "kv_cache_utils.py:1087")
    facts.update(max_total_num_tokens=tokens, max_concurrency=float(f"{tokens / flags.max_model_len:.2f}"))
    log(
        core,
        f"Maximum concurrency for {flags.max_model_len:,} tokens per request: {tokens / flags.max_model_len:.2f}x",
        0,
        "kv_cache_utils.py:1091",
    )
    graph = 0.25 + 0.0015 * min(flags.max_num_seqs, 512)
    truth.graph_mem_gib = truth.graph_need_gib = graph
    outside = gpu.total_gib * (1 - u) - non_torch * 0.2
    if outside < graph + 0.3:
        lines.append(
            f"({workers[0]}) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  49%|████▉     | "
            "33/67 [00:03<00:03, 10.22it/s]"
        )
        lines.append(f"({core}) ERROR {clock.t.strftime('%m-%d %H:%M:%S')} [core.py:708] EngineCore failed to start.")
        lines.append(
            f"({core}) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 0.50 GiB. GPU 0 has a "
            f"total capacity of {gpu.total_gib:.2f} GiB of which 12.00 MiB is free."
        )
        truth.status = "oom_graph_capture"
        printed["status"] = "failed"
        printed["failure"] = ("oom_graph_capture", "graph_capture", lines[-1].split(") ", 1)[1])
        facts.update(oom_tried_gib=0.5, oom_capacity_gib=float(f"{gpu.total_gib:.2f}"))
        return lines, truth
    lines.append(
        f"({workers[0]}) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| "
        "67/67 [00:06<00:00, 10.41it/s]"
    )
    for wk in workers:
        log(wk, f"Graph capturing finished in 9 secs, took {graph:.2f} GiB", 9, "gpu_model_runner.py:3480")
    facts["graph_mem_gib"] = float(f"{graph:.2f}")
    log(core, "init engine (profile, create kv cache, warmup model) took 39.87 seconds", 0.1, "core.py:210")
    log(api, "Starting vLLM API server 0 on http://0.0.0.0:8000", 2, "api_server.py:1912")
    lines.append(f"({api}) INFO:     Started server process [2211]")
    lines.append(f"({api}) INFO:     Waiting for application startup.")
    lines.append(f"({api}) INFO:     Application startup complete.")
    return lines, truth


# ---------------------------------------------------------------------------------------------
# Boot objects from what a log shows (for tests that do not go through the log parser)
# ---------------------------------------------------------------------------------------------


def make_boot(truth: Truth) -> Boot:
    """A ``Boot`` holding the figures this boot's log prints, aggregated the way the tracker does."""
    pr = truth.printed
    facts = dict(pr["facts"])
    metric_names = {f.name for f in fields(BootMetrics)}
    metrics = BootMetrics(**{k: (int(v) if k in _INT_METRICS else v) for k, v in facts.items() if k in metric_names})
    if metrics.max_total_num_tokens is None and "kv_tokens" in facts:
        metrics.max_total_num_tokens = int(facts["kv_tokens"])
    kv, n = facts.get("kv_cache_gib"), metrics.max_total_num_tokens
    if kv and n and truth.engine == "sglang" and "dsv4_bytes_per_full_token" not in facts:
        metrics.cell_bytes = round(kv * GIB / (n + truth.page))
    failure = None
    failed: Any = pr["failure"]
    if failed is not None:
        kind, phase, msg = failed
        failure = Failure(FailureKind(kind), Phase(phase), str(msg))
    status = BootStatus.READY if pr["status"] == "ready" else BootStatus.FAILED
    return Boot(
        engine=Engine(truth.engine),
        version_hint=str(pr.get("version")),
        status=status,
        phase=Phase.READY if status is BootStatus.READY else (failure.phase if failure else None),
        failure=failure,
        flags=dict(pr["flags"]),
        metrics=metrics,
        facts=facts,
        draft_facts=dict(pr["draft_facts"]),
        capture_trail=list(pr["trail"]),
        capture_bs=list(pr["capture_bs"]),
    )


_INT_METRICS = {"max_total_num_tokens", "cell_bytes", "context_len", "max_running_requests"}


# ---------------------------------------------------------------------------------------------
# The fixture set
# ---------------------------------------------------------------------------------------------


@dataclass
class Fixture:
    name: str
    lines: list[str]
    truths: list[Truth]
    meta: dict[str, object] = field(default_factory=dict)


def _later(base: datetime, minutes: int) -> datetime:
    return base + timedelta(minutes=minutes)


def build_fixtures() -> list[Fixture]:
    t0 = datetime(2026, 5, 1, 10, 0, 0)
    out: list[Fixture] = []

    def one(name: str, model: ModelSpec, gpu: GpuSpec, flags: SglangFlags, **kw: Any) -> None:
        lines, truth = sglang_boot(model, gpu, flags, start=t0, **kw)
        out.append(
            Fixture(
                name,
                lines,
                [truth],
                {
                    "model": model.name,
                    "gpu": gpu.name,
                    "flags": asdict(flags),
                    **{k: v for k, v in kw.items() if k != "start"},
                },
            )
        )

    def pair(name: str, model: ModelSpec, gpu: GpuSpec, flags: SglangFlags, f2: float, **kw: Any) -> None:
        l1, t1 = sglang_boot(model, gpu, flags, start=t0, **kw)
        l2, t2 = sglang_boot(model, gpu, replace(flags, mem_fraction_static=f2), start=_later(t0, 30), **kw)
        out.append(
            Fixture(
                name,
                l1 + l2,
                [t1, t2],
                {
                    "model": model.name,
                    "gpu": gpu.name,
                    "flags": asdict(flags),
                    "fractions": [flags.mem_fraction_static, f2],
                },
            )
        )

    gqa = SglangFlags(mem_fraction_static=0.85, tp_size=4, context_length=131072, cuda_graph_max_bs=160)
    one("sglang-gqa70b-tp4.log", LLAMA70B, H100, gqa, seed=1)
    one(
        "sglang-mla-dsv3-tp8.log",
        DSV3,
        H200,
        SglangFlags(
            mem_fraction_static=0.88, tp_size=8, context_length=163840, max_running_requests=128, cuda_graph_max_bs=128
        ),
        seed=2,
        version=(0, 5, 14),
    )
    one(
        "sglang-dsa-fp8-tp8.log",
        DSV32,
        B200,
        SglangFlags(
            mem_fraction_static=0.85,
            tp_size=8,
            page_size=64,
            context_length=163840,
            kv_cache_dtype="fp8_e4m3",
            cuda_graph_max_bs=256,
        ),
        seed=3,
        version=(0, 5, 14),
    )
    one(
        "sglang-eagle-tp4.log",
        LLAMA70B_EAGLE,
        H100,
        SglangFlags(
            mem_fraction_static=0.8,
            tp_size=4,
            context_length=65536,
            max_running_requests=64,
            cuda_graph_max_bs=64,
            speculative_algorithm="EAGLE",
        ),
        seed=4,
        version=(0, 5, 14),
    )
    one(
        "sglang-eagle-0.5.10-tp4.log",
        LLAMA70B_EAGLE,
        H100,
        SglangFlags(
            mem_fraction_static=0.8,
            tp_size=4,
            context_length=65536,
            max_running_requests=64,
            cuda_graph_max_bs=64,
            speculative_algorithm="EAGLE",
        ),
        seed=5,
        version=(0, 5, 10),
    )
    one(
        "sglang-dsv4-tp4.log",
        DSV4,
        B200,
        SglangFlags(
            mem_fraction_static=0.8,
            tp_size=4,
            page_size=256,
            context_length=524288,
            max_running_requests=64,
            cuda_graph_max_bs=32,
        ),
        seed=6,
        version=(0, 5, 14),
    )
    one("sglang-unexplained-tp4.log", LLAMA70B, H100, gqa, seed=7, hidden_reserve_gib=2.5)
    one("sglang-capped-tp4.log", LLAMA70B, H100, replace(gqa, max_total_tokens=200000), seed=8)
    one(
        "sglang-capture-oom-tp2.log",
        QWEN72B,
        H100,
        SglangFlags(mem_fraction_static=0.98, tp_size=2, context_length=32768, cuda_graph_max_bs=160),
        seed=9,
    )
    one("sglang-not-enough-memory-tp4.log", LLAMA70B, H100, replace(gqa, mem_fraction_static=0.15), seed=10)
    pair("sglang-pair-gqa70b-tp4.log", LLAMA70B, H100, gqa, 0.90, seed=11)
    pair(
        "sglang-pair-mla-kimi-tp8.log",
        KIMI,
        H200,
        SglangFlags(
            mem_fraction_static=0.85, tp_size=8, context_length=200000, max_running_requests=64, cuda_graph_max_bs=64
        ),
        0.80,
        seed=12,
    )
    # a pair where the higher fraction dies in capture after sizing its pool
    pair(
        "sglang-pair-qwen72b-capture-oom.log",
        QWEN72B,
        H100,
        SglangFlags(mem_fraction_static=0.93, tp_size=2, context_length=32768, cuda_graph_max_bs=160),
        0.98,
        seed=13,
    )
    # vLLM
    vf = VllmFlags(gpu_memory_utilization=0.85, tensor_parallel_size=2, max_model_len=131072)
    l1, t1 = vllm_boot(LLAMA8B, H100, vf, start=datetime(2026, 8, 21, 10, 0, 0))
    l2, t2 = vllm_boot(LLAMA8B, H100, replace(vf, gpu_memory_utilization=0.92), start=datetime(2026, 8, 21, 11, 0, 0))
    out.append(
        Fixture(
            "vllm-pair-llama8b-tp2.log",
            l1 + l2,
            [t1, t2],
            {"model": LLAMA8B.name, "gpu": H100.name, "fractions": [0.85, 0.92]},
        )
    )
    l3, t3 = vllm_boot(LLAMA8B, H100, replace(vf, gpu_memory_utilization=0.9))
    out.append(Fixture("vllm-llama8b-tp2.log", l3, [t3], {"model": LLAMA8B.name, "gpu": H100.name}))
    return out


def truth_table(fixtures: list[Fixture]) -> dict[str, object]:
    def slim(t: Truth) -> dict[str, object]:
        d = asdict(t)
        d.pop("printed")
        return d

    return {fx.name: {"boots": [slim(t) for t in fx.truths], "meta": fx.meta} for fx in fixtures}


def write_fixtures(out_dir: Path = OUT_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    fixtures = build_fixtures()
    paths = []
    for fx in fixtures:
        path = out_dir / fx.name
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(fx.lines) + "\n", encoding="utf-8")
        tmp.replace(path)
        paths.append(path)
    truth = out_dir / "truth.json"
    tmp = truth.with_suffix(".tmp")
    tmp.write_text(json.dumps(truth_table(fixtures), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(truth)
    return paths


if __name__ == "__main__":
    for p in write_fixtures(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT_DIR):
        print(p)
