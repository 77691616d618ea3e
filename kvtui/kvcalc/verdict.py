"""Evaluating one setting: tokens, pools, headroom against capture, and the verdict."""

from __future__ import annotations

from dataclasses import dataclass

from kvtui import fmt
from kvtui.engines.events import Engine, FailureKind
from kvtui.knobs import fraction_flag
from kvtui.kvcalc.arith import GIB, _frac, floor_page
from kvtui.kvcalc.defaults import _dtype_bytes, _req_table_gib, default_running_requests, extend_capture_bs
from kvtui.kvcalc.model import DEFAULT_CHUNK, Basis, CalcError, MemoryModel, Verdict, activation_allowance_gib


@dataclass(slots=True)
class _Settings:
    fraction: float
    context_len: int | None
    mrr_explicit: int | None
    mrr_unset: bool
    graph_max_bs: int | None
    graph_bs_edited: bool
    kv_dtype: str
    page: int
    cap: int | None
    chunk: int | None
    tp: int
    kv_space_gib: float | None = None  # vLLM CPU: the pool is VLLM_CPU_KVCACHE_SPACE GiB


@dataclass(slots=True)
class _Eval:
    """One setting evaluated: the pool, the requests, what is left for capture, the verdict."""

    tokens: int
    budget_gib: float
    kv_gib: float
    pool_end: float | None
    need: float | None
    headroom: float | None
    req_gib: float
    mrr: int | None
    full_ctx: float | None
    verdict: Verdict
    reasons: list[str]
    explain: list[str]
    cell_s: float
    cell_a: float
    over_top: bool = False  # too little headroom (or, vLLM, more than was free at start): rises with f


def _cell_ratio(model: MemoryModel, s: _Settings, lows: list[str]) -> float:
    ratio = 1.0
    if s.kv_dtype != model.kv_cache_dtype:
        new_b = _dtype_bytes(s.kv_dtype, model.model_elem_bytes)
        old_b = model.kv_elem_bytes
        ratio *= new_b / old_b
        identity = model.identity.hypothesis if model.identity else ""
        if (
            identity == "dsa-fp8-sizing"
            or model.kv_cache_dtype.startswith("fp8_ds")
            or s.kv_dtype.startswith("fp4")
            or model.kv_cache_dtype.startswith("fp4")
        ):
            lows.append(
                f"kv_cache_dtype {model.kv_cache_dtype} → {s.kv_dtype}: this cell layout does not scale with the "
                "element size exactly (scales, DSA indexer); estimate"
            )
    if s.tp != model.tp:
        if model.tp_scales_cell:
            ratio *= model.tp / s.tp
        lows.append(
            f"TP {model.tp} → {s.tp}: weights per rank and KV heads per rank are rescaled by the TP ratio "
            "(replicated KV heads, NCCL buffers and P are not modelled); estimate"
        )
    return ratio


@dataclass(frozen=True, slots=True)
class _Budget:
    """The pool a setting gets: its budget (GiB per rank) and tokens, and what moved it."""

    tokens: int
    budget: float
    kv_gib: float
    cell_s: float  # the sizing cell at this setting
    cell_a: float  # the allocated cell
    draft: float  # the draft pool's cell
    d_weights: float  # weights freed per rank by a larger TP


def _pool_budget(model: MemoryModel, s: _Settings, lows: list[str], explain: list[str] | None) -> _Budget:
    """``N(f) = floor_page((budget(f₀) + slope·(f − f₀) + weights freed − activations) / cell)``."""
    eng = model.engine
    ratio = _cell_ratio(model, s, lows)
    cell_s = model.sizing_cell_bytes * ratio
    cell_a = model.cell_bytes * ratio
    d_weights = 0.0
    if s.tp != model.tp and model.weights_gib:
        d_weights = model.weights_gib * (1 - model.tp / s.tp)  # freed per rank when TP grows
    df = s.fraction - model.fraction
    if abs(df) > 1e-12 and model.slope_gib is None:
        raise CalcError(
            f"cannot predict {fraction_flag(eng)}={_frac(s.fraction)}: "
            + (
                "the device's total memory is unknown (pass --gpu-mem-gib)"
                if eng is Engine.VLLM
                else "the log lacks `Load weight begin … avail mem` (P) and no second boot gives the slope"
            )
        )
    slope = model.slope_gib or 0.0
    budget0 = model.tokens_raw * model.sizing_cell_bytes / GIB
    d_act = 0.0
    if eng is Engine.VLLM and s.chunk != model.chunked_prefill_size:
        # vLLM profiles the activation peak of a max_num_batched_tokens batch inside its budget
        d_act = activation_allowance_gib(s.chunk) - activation_allowance_gib(model.chunked_prefill_size)
        if explain is not None:
            lows.append(
                f"max_num_batched_tokens {model.chunked_prefill_size or 'default'} → {s.chunk or 'default'}: the "
                f"profiled activation peak changes by ≈ {d_act:+.2f} GiB (estimate)"
            )
    budget = budget0 + slope * df + d_weights - d_act
    if s.kv_space_gib is not None:  # vLLM CPU: the pool is what VLLM_CPU_KVCACHE_SPACE says
        budget = s.kv_space_gib
        if explain is not None:
            explain.append(f"CPU KV pool = VLLM_CPU_KVCACHE_SPACE = {s.kv_space_gib:g} GiB (the fraction does not "
                           f"size it); the observed boot's {budget0:.2f} GiB held {model.tokens:,} tokens")
    raw = budget * GIB / cell_s if cell_s > 0 else 0.0
    capped = s.cap is not None and raw > s.cap
    tokens = floor_page(min(raw, float(s.cap)) if s.cap is not None else raw, s.page)
    tokens = max(tokens, 0) if budget > 0 else 0
    if explain is not None and s.kv_space_gib is not None:
        explain.append(f"N = floor_page({budget:.2f} GiB × 2^30 / {cell_s:,.0f} B, page {s.page}) = {tokens:,} tokens")
    elif explain is not None:
        sym = "P" if eng is Engine.SGLANG else "total"
        if model.basis in (Basis.TWO_POINT, Basis.LEAST_SQUARES):
            sym = "slope"
        move = (
            f" + {sym} {slope:.2f} × ({_frac(s.fraction)} − {_frac(model.fraction)})"
            if model.slope_gib is not None
            else ""
        )
        explain.append(
            f"N({_frac(s.fraction)}) = floor_page(({budget0:.2f} GiB{move}"
            + (f" + {d_weights:.2f} GiB weights freed" if d_weights else "")
            + (f" − {d_act:.2f} GiB activations" if d_act else "")
            + f") × 2^30 / {cell_s:,.0f} B, page {s.page}) = {tokens:,} tokens"
            + (f" (capped at {s.cap:,})" if capped else "")
        )
    kv_gib = (tokens + (s.page if eng is Engine.SGLANG else 0)) * cell_a / GIB if tokens > 0 else 0.0
    if eng is Engine.VLLM:  # the budget in tokens' KV, plus what does not grow with a request's length
        kv_gib = max(budget + model.bias_gib, 0.0)
    return _Budget(tokens, budget, kv_gib, cell_s, cell_a, model.draft_cell_bytes * ratio, d_weights)


def _running_requests(model: MemoryModel, s: _Settings, tokens: int) -> int | None:
    """The request slots at this setting: the explicit flag, the boot's own when nothing that sets
    them changed, else SGLang's default for the new pool."""
    if s.mrr_explicit is not None:
        return s.mrr_explicit
    ctx = s.context_len
    if not s.mrr_unset and model.running_requests is not None and tokens == model.tokens and ctx == model.context_len:
        return model.running_requests
    if model.engine is Engine.SGLANG:
        return default_running_requests(tokens, ctx)
    return model.running_requests


def _capture_bs(model: MemoryModel, s: _Settings, mrr: int | None, reasons: list[str]) -> list[int] | None:
    """The batch sizes capture takes: the observed ones up to ``cuda_graph_max_bs`` and the request
    slots, extrapolated above the observed top when the flag is raised."""
    if model.graph is None or not model.graph.bs:
        return None
    limit = min(x for x in (s.graph_max_bs, mrr, 1 << 30) if x)
    base = list(model.graph.bs)
    if s.graph_bs_edited and s.graph_max_bs and s.graph_max_bs > max(base) and limit > max(base):
        reasons.append(f"graph memory for batch sizes above {max(base)} is extrapolated from the observed ones")
        return extend_capture_bs(base, limit)
    return [b for b in base if b <= limit]


@dataclass(frozen=True, slots=True)
class _AfterPools:
    pool_end: float | None = None  # free after every pool: what capture starts with
    target_end: float | None = None  # SGLang: free right after the target's KV pool and request table
    pools_gib: tuple[float, float] | None = None  # SGLang: (target KV, req_to_token) allocated, GiB


def _after_pools(
    model: MemoryModel, s: _Settings, b: _Budget, req_gib: float, explain: list[str] | None
) -> _AfterPools:
    """SGLang: the observed free memory after the pools, moved by what the pools grow; vLLM: what
    lies outside the budget."""
    if model.engine is not Engine.SGLANG:
        total = model.gpu_mem_gib
        if total is None:
            return _AfterPools()
        pool_end = total * (1 - s.fraction)
        if explain is not None:
            explain.append(
                f"outside vLLM's budget = total × (1 − u) = {total:.2f} × {1 - s.fraction:.3f} = {pool_end:.2f} GiB"
            )
        return _AfterPools(pool_end)
    if model.avail_after_pool_gib is None:
        return _AfterPools()
    obs_alloc = (model.tokens + model.page_size) * model.cell_bytes / GIB
    obs_draft = (model.tokens + model.page_size) * model.draft_cell_bytes / GIB
    obs_req = _req_table_gib(
        model.running_requests or default_running_requests(model.tokens, model.context_len),
        model.context_len,
        model.req_extra_tokens,
    )
    new_alloc = (b.tokens + s.page) * b.cell_a / GIB if b.tokens > 0 else 0.0
    new_draft = (b.tokens + s.page) * b.draft / GIB if b.tokens > 0 else 0.0
    pool_end = (
        model.avail_after_pool_gib - (new_alloc - obs_alloc) - (new_draft - obs_draft) - (req_gib - obs_req)
        + b.d_weights
    )
    target_end = None
    if model.target_pool_end_gib is not None:
        target_end = model.target_pool_end_gib - (new_alloc - obs_alloc) - (req_gib - obs_req) + b.d_weights
    if explain is not None:
        explain.append(
            f"after the pools = {model.avail_after_pool_gib:.2f} − (KV {new_alloc:.2f} − {obs_alloc:.2f})"
            + (f" − (draft KV {new_draft:.2f} − {obs_draft:.2f})" if model.draft_cell_bytes else "")
            + f" − (req_to_token {req_gib:.2f} − {obs_req:.2f})"
            + (f" + {b.d_weights:.2f} weights freed" if b.d_weights else "")
            + f" = {pool_end:.2f} GiB"
        )
    return _AfterPools(pool_end, target_end, (new_alloc, req_gib))


def _pool_lines(model: MemoryModel, s: _Settings, ev: _Eval) -> list[str]:
    """The explain lines of the pool, the request table and the full-context requests."""
    sglang, tokens, ctx = model.engine is Engine.SGLANG, ev.tokens, s.context_len
    lines = [
        f"KV pool = ({tokens:,} + {s.page}) × {ev.cell_a:,.0f} B = {ev.kv_gib:.2f} GiB per rank"
        if sglang and tokens > 0
        else f"KV pool = {ev.kv_gib:.2f} GiB per rank"
    ]
    if sglang and ev.mrr and ctx:
        lines.append(
            f"req_to_token = {ev.mrr:,} requests × ({ctx:,} + {model.req_extra_tokens}) × 4 B = {ev.req_gib:.3f} GiB "
            f"({ev.req_gib * 1024:,.1f} MiB)"
        )
    if ev.full_ctx is not None:
        lines.append(f"full-context requests = {tokens:,} / {ctx:,} = {fmt.capacity(ev.full_ctx)}")
    return lines


def _evaluate(
    model: MemoryModel, s: _Settings, k: int, margin: float, lows: list[str], *, with_explain: bool = True
) -> _Eval:
    """The pool, the requests and the memory left for capture at one setting, and the verdict.
    ``with_explain=False`` (the searches over the fraction) skips the explain lines and the lows."""
    explain: list[str] | None = [] if with_explain else None
    b = _pool_budget(model, s, lows if with_explain else [], explain)
    mrr = _running_requests(model, s, b.tokens)
    ctx = s.context_len
    req_gib = _req_table_gib(mrr, ctx, model.req_extra_tokens) if model.engine is Engine.SGLANG else 0.0
    reasons: list[str] = []
    graph_bs = _capture_bs(model, s, mrr, reasons)
    need: float | None = None
    if model.graph is not None:
        need = 0.0 if model.disable_cuda_graph else model.graph.need_for(graph_bs)
    after = _after_pools(model, s, b, req_gib, explain)
    act = activation_allowance_gib(s.chunk)
    headroom: float | None = None
    if after.pool_end is not None and need is not None:
        headroom = after.pool_end if model.engine is Engine.VLLM and model.graphs_in_budget else after.pool_end - need
        if explain is not None:
            explain.append(
                f"graph headroom = {after.pool_end:.2f} − capture need {need:.2f}"
                + (f" ({len(graph_bs)} batch sizes up to {max(graph_bs)})" if graph_bs else "")
                + f" = {headroom:.2f} GiB (oom_risk below {margin:.2f}, tight below {margin + act:.2f}: "
                f"margin + activations for a {s.chunk or DEFAULT_CHUNK:,}-token chunk)"
            )
    ev = _Eval(b.tokens, b.budget, b.kv_gib, after.pool_end, need, headroom, req_gib, mrr,
               b.tokens / ctx if ctx else None, Verdict.OK, reasons, [], b.cell_s, b.cell_a)
    if explain is not None:
        ev.explain = [*explain, *_pool_lines(model, s, ev)]
    ev.verdict = _no_fit(model, s, ev, after) or _fit_verdict(model, s, ev, k, margin, act)
    ev.over_top = (headroom is not None and headroom < margin + act) or _over_free_at_start(model, s)
    return ev


def _over_free_at_start(model: MemoryModel, s: _Settings) -> bool:
    """vLLM refuses to start when it wants more than was free when the worker started."""
    return (
        model.engine is Engine.VLLM
        and model.free_at_start_gib is not None
        and model.gpu_mem_gib is not None
        and model.gpu_mem_gib * s.fraction > model.free_at_start_gib
    )


def _no_fit(model: MemoryModel, s: _Settings, ev: _Eval, after: _AfterPools) -> Verdict | None:
    """``no_fit`` with its reason: the engine would refuse to start or die sizing its pools."""
    sglang, fname, ctx = model.engine is Engine.SGLANG, fraction_flag(model.engine), s.context_len
    if ev.budget_gib <= 0 or ev.tokens <= 0:
        ev.reasons.append(
            f"the pool budget is {ev.budget_gib:.2f} GiB at {fname}={_frac(s.fraction)}: SGLang stops with "
            "`Not enough memory. Please try to increase --mem-fraction-static.`"
            if sglang
            else f"no memory left for the KV cache at {fname}={_frac(s.fraction)} ({ev.budget_gib:.2f} GiB): vLLM "
            "stops with `No available memory for the cache blocks`"
        )
    elif s.kv_space_gib is not None and model.cpu_mem_gib is not None and s.kv_space_gib > model.cpu_mem_gib:
        ev.reasons.append(
            f"VLLM_CPU_KVCACHE_SPACE={s.kv_space_gib:g} GiB is more than the node's {model.cpu_mem_gib:.2f} GiB: vLLM "
            "refuses to start (`Available memory on node … is less than requested memory for kv`)"
        )
    elif sglang and after.target_end is not None and after.target_end < 0:
        ev.reasons.append(_no_room_for_pools(model, s, after.target_end, after.pools_gib, ev.mrr, ctx))
    elif model.engine is Engine.VLLM and ctx and ev.tokens < ctx:
        ev.reasons.append(
            f"one full-context request ({ctx:,} tokens) does not fit in {ev.tokens:,} tokens: vLLM refuses "
            "to start (`To serve at least one request with the model's max seq len …`)"
        )
    elif _over_free_at_start(model, s):
        assert model.gpu_mem_gib is not None
        ev.reasons.append(
            f"vLLM wants {model.gpu_mem_gib * s.fraction:.2f} GiB but only {model.free_at_start_gib:.2f} GiB "
            "was free at start (`Free memory on device … is less than desired`)"
        )
    else:
        return None
    return Verdict.NO_FIT


def _fit_verdict(model: MemoryModel, s: _Settings, ev: _Eval, k: int, margin: float, act: float) -> Verdict:
    """A setting that starts: ``oom_risk`` when capture would not fit (or died here before),
    ``tight`` with little room left or fewer full-context requests than wanted, else ``ok``."""
    headroom, need, pool_end, full_ctx = ev.headroom, ev.need, ev.pool_end, ev.full_ctx
    verdict = Verdict.OK
    if headroom is not None and headroom < 0:
        verdict = Verdict.OOM_RISK
        ev.reasons.append(
            f"CUDA-graph capture needs ≈ {fmt.gib(need)} but only {fmt.gib(pool_end)} is free after the pools: "
            "likely death in CUDA-graph capture"
        )
    elif headroom is not None and headroom < margin:
        verdict = Verdict.OOM_RISK
        ev.reasons.append(
            f"only {fmt.gib(headroom)} would be left after capture (needs ≈ {fmt.gib(need)} from "
            f"{fmt.gib(pool_end)}) — below the {fmt.gib(margin)} margin: likely death in CUDA-graph capture"
        )
    elif headroom is not None and headroom < margin + act:
        verdict = Verdict.TIGHT
        ev.reasons.append(
            f"{headroom:.2f} GiB left after capture: it should boot, but with less than the "
            f"{margin + act:.2f} GiB wanted for the margin and a prefill chunk's activations"
        )
    if full_ctx is not None and full_ctx < k:
        if verdict is Verdict.OK:
            verdict = Verdict.TIGHT
        ev.reasons.append(
            f"{ev.tokens:,} tokens hold {fmt.capacity(full_ctx)} full-context requests of {s.context_len:,} tokens, "
            f"fewer than the {k} wanted"
            + (" (a single one does not fit: it boots, but such a request cannot run)" if full_ctx < 1 else "")
        )
    if (
        headroom is None
        and model.observed_verdict_hint == FailureKind.OOM_GRAPH_CAPTURE.value
        and s.fraction >= model.fraction - 1e-9
    ):
        verdict = Verdict.OOM_RISK
        fname = fraction_flag(model.engine)
        ev.reasons.append(
            f"the boot died in CUDA-graph capture at {fname}={_frac(model.fraction)} and the headroom cannot be "
            f"sized here: at {_frac(s.fraction)} it would die again"
        )
    if headroom is None and model.engine is Engine.VLLM and model.gpu_mem_gib is None and s.kv_space_gib is None:
        ev.reasons.append("graph headroom not checked: the device total is unknown (pass --gpu-mem-gib)")
    return verdict


def _no_room_for_pools(
    model: MemoryModel,
    s: _Settings,
    pool_end: float,
    pools_gib: tuple[float, float] | None,
    mrr: int | None,
    ctx: int | None,
) -> str:
    """Why an SGLang setting whose pools outgrow the memory left after the weights cannot boot."""
    fname = fraction_flag(model.engine)
    kv, req = pools_gib if pools_gib is not None else (None, None)
    parts = []
    if kv is not None:
        parts.append(f"the KV pool {fmt.gib(kv)}")
    if req is not None:
        table = f"the request table (req_to_token) {fmt.gib(req)}"
        if mrr and ctx:
            table += f" for {mrr:,} requests × {ctx + model.req_extra_tokens:,} tokens"
        parts.append(table)
    what = " and ".join(parts) if parts else "the pools"
    text = (
        f"the pools need {fmt.gib(-pool_end)} more than the weights leave free at {fname}="
        f"{fmt.fraction(s.fraction)}: {what} cannot all be allocated, so SGLang dies with CUDA out of memory "
        "while allocating them (kv_allocate), before the server starts"
    )
    if req is not None and kv is not None and req > -pool_end and req >= 0.5 * kv:
        text += "; the request table is what outgrows the GPU: lower context-length or max-running-requests"
    elif s.fraction > model.fraction:
        text += f"; lower {fname}"
    given_ctx = model.flags.get("context_length") if model.engine is Engine.SGLANG else None
    if ctx and model.context_len and ctx > model.context_len and given_ctx is None:
        text += (
            f"; and context-length {ctx:,} exceeds the model's own {model.context_len:,}, which SGLang refuses at "
            "start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
    return text
