"""A model of a deployment that has not booted yet, from its ``config.json``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from kvtui.engines.events import Engine
from kvtui.knobs import Memory
from kvtui.kvcalc.arith import GIB, MIB_PER_GIB, _as_int, _frac, floor_page
from kvtui.kvcalc.defaults import (
    _dtype_bytes,
    _req_table_gib,
    _sglang_tier,
    default_mem_fraction,
    default_running_requests,
    extend_capture_bs,
)
from kvtui.kvcalc.model import (
    Basis,
    CalcError,
    GraphModel,
    GraphSource,
    IdentityCheck,
    MemoryModel,
    Notes,
    Sizing,
    activation_allowance_gib,
)
from kvtui.kvcalc.whatif import WhatIf, what_if_from_mapping


def _cfg_int(cfg: Mapping[str, object], *keys: str) -> int | None:
    for k in keys:
        v = _as_int(cfg.get(k))
        if v is not None:
            return v
    return None


def _config_cell(
    cfg: Mapping[str, object], *, tp: int, kv_bytes: float
) -> tuple[int, str, bool]:
    """(cell bytes per token per rank, what kind, scales with tp) from a HF ``config.json``."""
    layers = _cfg_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    if not layers or layers < 1:
        raise CalcError("config.json: num_hidden_layers missing (expected a whole number ≥ 1)", "input")
    kv_lora = _cfg_int(cfg, "kv_lora_rank")
    if kv_lora:
        rope = _cfg_int(cfg, "qk_rope_head_dim") or 64
        index_dim = _cfg_int(cfg, "index_head_dim")
        if index_dim:
            indexer = index_dim + index_dim // 128 * 4
            per = (kv_lora + kv_lora // 128 * 4 + rope * 2) if kv_bytes == 1 else (kv_lora + rope) * kv_bytes
            return round((per + indexer) * layers), "dsa", False
        return round((kv_lora + rope) * layers * kv_bytes), "mla", False
    heads = _cfg_int(cfg, "num_attention_heads", "n_head")
    kv_heads = _cfg_int(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    hidden = _cfg_int(cfg, "hidden_size", "n_embd", "d_model")
    head_dim = _cfg_int(cfg, "head_dim") or (hidden // heads if hidden and heads else None)
    if not kv_heads or not head_dim:
        raise CalcError(
            "config.json: cannot tell the KV geometry (expected num_key_value_heads/num_attention_heads and "
            "head_dim or hidden_size, or kv_lora_rank for MLA)",
            "input",
        )
    v_head = _cfg_int(cfg, "v_head_dim") or head_dim
    heads_rank = max(1, kv_heads // tp)
    per_layer = heads_rank * (head_dim + v_head) * kv_bytes
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        n_swa = sum(1 for t in layer_types if "sliding" in str(t))
        n_full = len(layer_types) - n_swa
        if n_swa and n_full:
            return round(per_layer * n_full + 0.8 * per_layer * n_swa), "swa", True
    return round(per_layer * layers), "mha", True


def estimate_weights_gib(cfg: Mapping[str, object]) -> float | None:
    """Total weight bytes (GiB, all ranks) from a config: embeddings, attention, MLP/MoE."""
    hidden = _cfg_int(cfg, "hidden_size", "n_embd", "d_model")
    layers = _cfg_int(cfg, "num_hidden_layers", "n_layer")
    vocab = _cfg_int(cfg, "vocab_size")
    if not hidden or not layers or not vocab:
        return None
    heads = _cfg_int(cfg, "num_attention_heads") or 1
    kv_heads = _cfg_int(cfg, "num_key_value_heads") or heads
    head_dim = _cfg_int(cfg, "head_dim") or hidden // heads
    inter = _cfg_int(cfg, "intermediate_size") or 4 * hidden
    attn = hidden * head_dim * (heads * 2 + kv_heads * 2)
    experts = _cfg_int(cfg, "n_routed_experts", "num_local_experts", "num_experts")
    if experts:
        moe_inter = _cfg_int(cfg, "moe_intermediate_size") or inter
        shared = _cfg_int(cfg, "n_shared_experts") or 0
        dense_layers = _cfg_int(cfg, "first_k_dense_replace") or 0
        mlp = (layers - dense_layers) * 3 * hidden * moe_inter * (experts + shared) + dense_layers * 3 * hidden * inter
    else:
        mlp = layers * 3 * hidden * inter
    params = attn * layers + mlp + vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    bytes_per = 2.0
    q = cfg.get("quantization_config")
    if isinstance(q, Mapping):
        bits = _as_int(q.get("bits")) or _as_int(q.get("weight_bits"))
        method = str(q.get("quant_method") or "").lower()
        if bits:
            bytes_per = bits / 8
        elif "fp8" in method or "fp8" in str(q.get("fmt") or ""):
            bytes_per = 1.0
        elif "fp4" in method or "mxfp4" in method:
            bytes_per = 0.55
    elif str(cfg.get("torch_dtype") or "").lower() in ("float32",):
        bytes_per = 4.0
    return params * bytes_per / GIB


@dataclass(frozen=True, slots=True)
class _Planned:
    """A deployment described by its ``config.json`` and the flags it will run with."""

    engine: Engine
    given: WhatIf
    gpu_mem_gib: float
    tp: int
    weights_gib: float  # per rank
    kv_dtype: str
    model_bytes: float
    kv_bytes: float
    cell: int
    tp_scales: bool
    page: int
    ctx: int | None
    chunk: int
    max_bs: int
    p: float  # free before the weights (estimated)
    a: float  # free after them
    # the running server's pool estimated from its serving lines (tokens, ± tokens): the model is
    # placed there (weights and overhead solved from it) instead of at estimated weights
    anchor: tuple[int, int | None] | None = None


def _given_int(given: WhatIf, role: Memory) -> int | None:
    _present, value = given.get(role)
    return int(value) if isinstance(value, int) else None


def _plan(
    config: Mapping[str, object], gpu_mem_gib: float, tp: int, weights_gib: float | None, engine: Engine,
    given: WhatIf, c: Notes, anchor: tuple[int, int | None] | None = None,
) -> _Planned:
    cfg: Mapping[str, object] = config
    tc = config.get("text_config")
    if isinstance(tc, Mapping) and ("num_hidden_layers" in tc or "hidden_size" in tc):
        cfg = tc
    kvd_present, kvd = given.get(Memory.KV_DTYPE)
    kv_dtype = str(kvd) if kvd_present and kvd else "auto"
    model_bytes = 4.0 if str(cfg.get("torch_dtype") or cfg.get("dtype") or "").lower() == "float32" else 2.0
    kv_bytes = _dtype_bytes(kv_dtype, model_bytes)
    page_v, ctx_v, chunk_v, gbs_v = (_given_int(given, r) for r in (Memory.PAGE, Memory.CONTEXT, Memory.CHUNK,
                                                                      Memory.GRAPH_BS))
    cell, kind, tp_scales = _config_cell(cfg, tp=tp, kv_bytes=kv_bytes)
    if kind in ("dsa",):
        page = page_v if page_v is not None else 64
    else:
        page = page_v if page_v is not None else (16 if engine is Engine.VLLM else 1)
    tier_chunk, tier_bs = _sglang_tier(gpu_mem_gib, tp)
    chunk = chunk_v if chunk_v is not None else (8192 if engine is Engine.VLLM else tier_chunk)
    init_overhead = 0.5 + 0.125 * tp
    p = gpu_mem_gib - init_overhead
    if anchor is not None:  # the weights are solved from the observed pool (``_anchor_*``)
        c.explain.append(
            f"P ≈ {gpu_mem_gib:.2f} GiB − {init_overhead:.2f} GiB (CUDA context, NCCL, TP {tp}) = {p:.2f} GiB"
        )
        c.explain.append(f"cell = {cell:,} B per token per rank ({kind}, KV {kv_bytes:g} B per element, TP {tp})")
        ctx = ctx_v if ctx_v is not None else _cfg_int(cfg, "max_position_embeddings")
        max_bs = gbs_v if gbs_v is not None else tier_bs
        return _Planned(engine, given, gpu_mem_gib, tp, 0.0, kv_dtype, model_bytes, kv_bytes, cell, tp_scales,
                        page, ctx, chunk, max_bs, p, p, anchor)
    if weights_gib is None:
        total_w = estimate_weights_gib(cfg)
        if total_w is None:
            raise CalcError(
                "config.json: cannot estimate the weights (hidden_size, num_hidden_layers, vocab_size); "
                "pass --weights-gib",
                "input",
            )
        weights_gib = total_w / tp
        c.reasons.append(f"weights estimated from the config: {weights_gib:.2f} GiB per rank (pass --weights-gib)")
    elif weights_gib < 0:
        raise CalcError(f"--weights-gib {weights_gib}: expected GiB per rank ≥ 0")
    a = p - weights_gib
    c.explain.append(
        f"P ≈ {gpu_mem_gib:.2f} GiB − {init_overhead:.2f} GiB (CUDA context, NCCL, TP {tp}) = {p:.2f} GiB; "
        f"A = P − weights {weights_gib:.2f} = {a:.2f} GiB"
    )
    c.explain.append(f"cell = {cell:,} B per token per rank ({kind}, KV {kv_bytes:g} B per element, TP {tp})")
    ctx = ctx_v if ctx_v is not None else _cfg_int(cfg, "max_position_embeddings")
    max_bs = gbs_v if gbs_v is not None else tier_bs
    return _Planned(engine, given, gpu_mem_gib, tp, weights_gib, kv_dtype, model_bytes, kv_bytes, cell, tp_scales,
                    page, ctx, chunk, max_bs, p, a)


def _reserve_graph(max_bs: int, workspace_gib: float) -> GraphModel:
    """The engine's own graph reserve: a workspace plus 2 MiB per batch size up to ``max_bs``."""
    graph_bs = extend_capture_bs([], max_bs)
    need = workspace_gib + max_bs * 2 / MIB_PER_GIB
    return GraphModel(
        need_gib=need,
        bs=tuple(graph_bs),
        per_graph_gib=0.0,
        per_bs_gib=(need - workspace_gib) / max(1, sum(graph_bs)),
        fixed_gib=workspace_gib,
        source=GraphSource.ESTIMATED,
    )


def _config_model(d: _Planned, c: Notes, sizing: Sizing, *, kv_cache_gib: float, graph: GraphModel) -> MemoryModel:
    """The fields a config-based model of either engine has the same way."""
    return replace(
        sizing.model(d.engine, c, d.given.values),
        weights_gib=d.weights_gib,
        kv_cache_gib=kv_cache_gib,
        graph=graph,
        context_len=d.ctx,
        chunked_prefill_size=d.chunk,
        cuda_graph_max_bs=d.max_bs,
        kv_cache_dtype=d.kv_dtype,
        kv_elem_bytes=d.kv_bytes,
        model_elem_bytes=d.model_bytes,
        tp=d.tp,
        tp_scales_cell=d.tp_scales,
        gpu_mem_gib=d.gpu_mem_gib,
        identity=IdentityCheck(False, "unchecked"),
    )


def _config_vllm(d: _Planned, c: Notes) -> MemoryModel:
    """vLLM: the budget is total·u minus the weights, the activations and the non-torch memory."""
    fr_present, fr = d.given.get(Memory.FRACTION)
    u = float(fr) if fr_present and isinstance(fr, float) else 0.9
    act = activation_allowance_gib(d.chunk)
    if d.anchor is not None:
        d = _anchor_vllm(d, c, u, act)
    kv = d.gpu_mem_gib * u - d.weights_gib - act - 0.5
    raw = float(d.anchor[0]) if d.anchor is not None else max(0.0, kv) * GIB / d.cell
    n = floor_page(raw, d.page)
    c.explain.append(
        f"kv = total·u − weights − activations − non-torch = {d.gpu_mem_gib:.2f} × {_frac(u)} − {d.weights_gib:.2f} − "
        f"{act:.2f} − 0.50 = {kv:.2f} GiB → {n:,} tokens"
    )
    cap, mrr = _given_int(d.given, Memory.TOKEN_CAP), _given_int(d.given, Memory.MAX_REQUESTS)
    tokens_raw = max(raw, 0.0) if kv > 0 else kv * GIB / d.cell
    sizing = Sizing(_basis(d), u, max(n, 0), tokens_raw, d.page, d.cell, d.cell, d.gpu_mem_gib)
    base = _config_model(d, c, sizing, kv_cache_gib=kv, graph=_reserve_graph(d.max_bs, 0.3))
    return replace(
        base,
        max_total_tokens=cap * d.page if cap is not None else None,
        avail_after_pool_gib=d.gpu_mem_gib * (1 - u),
        max_running_requests=mrr,
        running_requests=mrr if mrr is not None else 256,
    )


def _config_sglang(d: _Planned, c: Notes) -> MemoryModel:
    """SGLang: ``rest = A − P·(1 − f)`` with P and A estimated from the card and the weights."""
    fr_present, fr = d.given.get(Memory.FRACTION)
    if fr_present and isinstance(fr, float):
        f = fr
    else:
        f = default_mem_fraction(d.gpu_mem_gib, d.tp, chunk=d.chunk, max_bs=d.max_bs)
        c.reasons.append(
            f"mem_fraction_static not given: SGLang's default for a {d.gpu_mem_gib:.0f} GiB card is {_frac(f)}"
        )
    if d.anchor is not None:
        d = _anchor_sglang(d, c, f)
    rest = d.a - d.p * (1 - f)
    raw = float(d.anchor[0]) if d.anchor is not None else rest * GIB / d.cell
    cap = _given_int(d.given, Memory.TOKEN_CAP)
    n = floor_page(min(raw, cap) if cap else raw, d.page)
    c.explain.append(
        f"rest = A − P·(1 − f) = {d.a:.2f} − {d.p:.2f} × (1 − {_frac(f)}) = {rest:.2f} GiB → {max(n, 0):,} tokens"
    )
    mrr = _given_int(d.given, Memory.MAX_REQUESTS)
    mrr_eff = mrr or default_running_requests(max(n, 0), d.ctx)
    pool_end = d.a - max(0, n + d.page) * d.cell / GIB - _req_table_gib(mrr_eff, d.ctx)
    graph = _reserve_graph(d.max_bs, 0.5)
    c.reasons.append(
        f"capture need assumed {graph.need_gib:.2f} GiB (SGLang's own reserve: 2 MiB per batch size up to {d.max_bs})"
    )
    sizing = Sizing(_basis(d), f, max(n, 0), raw, d.page, d.cell, d.cell, d.p)
    base = _config_model(d, c, sizing, kv_cache_gib=max(0, n + d.page) * d.cell / GIB, graph=graph)
    return replace(
        base,
        pre_load_gib=d.p,
        after_load_gib=d.a,
        max_total_tokens=cap,
        avail_after_pool_gib=pool_end,
        target_pool_end_gib=pool_end,
        max_running_requests=mrr,
        running_requests=mrr_eff,
    )


def _basis(d: _Planned) -> Basis:
    return Basis.CONFIG if d.anchor is None else Basis.CONFIG_ESTIMATE


def _pm(err: int | None) -> str:
    return f" ±{err:,}" if err is not None else ""


def _anchor_sglang(d: _Planned, c: Notes, f: float) -> _Planned:
    """Place the model at the observed pool: ``A = N·cell + P·(1 − f)``, so that the pool at the
    running fraction is the estimate, and a what-if moves from it by ``P·Δf / cell``."""
    assert d.anchor is not None
    tokens, err = d.anchor
    rest = tokens * d.cell / GIB
    a = rest + d.p * (1 - f)
    weights = d.p - a
    c.explain.append(
        f"anchor: the pool estimated from serving lines {tokens:,}{_pm(err)} tokens at {_frac(f)} → "
        f"rest = {tokens:,} × {d.cell:,} B = {rest:.2f} GiB"
    )
    c.explain.append(
        f"A = rest + P·(1 − f) = {rest:.2f} + {d.p:.2f} × (1 − {_frac(f)}) = {a:.2f} GiB; weights and overhead "
        f"= P − A = {weights:.2f} GiB per rank (solved, not estimated)"
    )
    _check_anchor(d, weights, tokens)
    return replace(d, a=a, weights_gib=max(weights, 0.0))


def _anchor_vllm(d: _Planned, c: Notes, u: float, act: float) -> _Planned:
    """vLLM: ``weights + non-torch = total·u − activations − N·cell`` at the running ``u``."""
    assert d.anchor is not None
    tokens, err = d.anchor
    kv = tokens * d.cell / GIB
    weights = d.gpu_mem_gib * u - act - 0.5 - kv
    c.explain.append(
        f"anchor: the pool estimated from serving lines {tokens:,}{_pm(err)} tokens at {_frac(u)} → "
        f"kv = {tokens:,} × {d.cell:,} B = {kv:.2f} GiB; weights = total·u − activations − non-torch − kv = "
        f"{d.gpu_mem_gib:.2f} × {_frac(u)} − {act:.2f} − 0.50 − {kv:.2f} = {weights:.2f} GiB per rank (solved)"
    )
    _check_anchor(d, weights, tokens)
    return replace(d, weights_gib=max(weights, 0.0))


def _check_anchor(d: _Planned, weights: float, tokens: int) -> None:
    cap = _given_int(d.given, Memory.TOKEN_CAP)
    if cap is not None and tokens >= cap * (d.page if d.engine is Engine.VLLM else 1) * 0.99:
        raise CalcError(
            f"the estimated pool ({tokens:,} tokens) is the flags' token cap: it says nothing of the memory "
            "behind it, so a what-if cannot be placed from it",
            "input",
        )
    if weights < 0:
        raise CalcError(
            f"the estimated pool ({tokens:,} tokens × {d.cell:,} B) is more than a {d.gpu_mem_gib:.1f} GiB card "
            "could hold with no weights at all: this config.json's KV cell does not match the running server",
            "input",
        )


def from_config(
    config: Mapping[str, object],
    *,
    gpu_mem_gib: float,
    tp: int,
    weights_gib: float | None = None,
    engine: Engine = Engine.SGLANG,
    flags: Mapping[str, object] | None = None,
    observed_tokens: int | None = None,
    observed_err: int | None = None,
) -> MemoryModel:
    """A model of a deployment from its ``config.json``.

    ``weights_gib``: per rank (estimated from the config when None, which lowers confidence).
    ``flags``: the engine flags it runs (or will run) with (engine names or aliases).
    ``observed_tokens`` (± ``observed_err``): a running server's pool, estimated from its serving
    lines (its start is not in the log): the model is placed there — its predicted pool at the
    running fraction is the estimate; the weights and overhead are solved from it, not estimated
    (``weights_gib`` is then ignored) — and a what-if moves from that point by the config's cost
    per token (basis ``config+estimate``)."""
    if gpu_mem_gib is None or not gpu_mem_gib > 0:
        raise CalcError(f"--gpu-mem-gib {gpu_mem_gib}: expected the GPU's memory in GiB, e.g. 79.2 for an 80 GB card")
    if tp < 1:
        raise CalcError(f"--tp {tp}: expected a whole number ≥ 1")
    if engine is Engine.UNKNOWN:
        engine = Engine.SGLANG
    given = what_if_from_mapping(engine, flags or {})
    c = Notes()
    anchor: tuple[int, int | None] | None = None
    if observed_tokens is not None:
        if observed_tokens <= 0:
            raise CalcError(f"observed pool {observed_tokens}: expected tokens > 0", "input")
        anchor = (observed_tokens, observed_err)
        c.low(f"config + estimated pool ({observed_tokens:,}{_pm(observed_err)} tokens, from serving lines): "
              "weights and overhead are solved from it; P (free memory after init) and graph memory are estimates")
    else:
        c.low("no boot observed yet: P (free memory after init), weights and graph memory are estimates")
    d = _plan(config, gpu_mem_gib, tp, weights_gib, engine, given, c, anchor)
    model = _config_vllm(d, c) if engine is Engine.VLLM else _config_sglang(d, c)
    if anchor is not None:
        model = replace(model, anchor_tokens=observed_tokens, anchor_err=observed_err)
    return model
