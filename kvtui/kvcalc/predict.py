"""``predict(model, edits)``: the prediction for edited flags, and the fractions that are safe."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from kvtui import fmt
from kvtui.engines.events import Engine
from kvtui.knobs import Memory, fraction_flag
from kvtui.kvcalc.arith import GIB, _frac
from kvtui.kvcalc.defaults import _sglang_tier, default_mem_fraction
from kvtui.kvcalc.model import (
    DEFAULT_GRAPH_MARGIN_GIB,
    Basis,
    CalcError,
    Confidence,
    MemoryModel,
    Verdict,
    activation_allowance_gib,
)
from kvtui.kvcalc.verdict import _Eval, _evaluate, _Settings
from kvtui.kvcalc.whatif import CPU_KV_SPACE, WhatIf, _parse_value, what_if_from_mapping


@dataclass(frozen=True, slots=True)
class HistoryCalibration:
    """What a prediction was calibrated with beyond its boot's own log (``kvtui.changes``: the
    history's boots of the deployment): how many boots in all, how many of them remembered, and
    the pool fractions those ran with. ``note`` is its text (a line of ``Prediction.reasons``)."""

    boots: int
    stored: int
    fractions: tuple[float, ...] = ()

    def note(self) -> str:
        shown = ", ".join(f"{f:g}" for f in self.fractions[:8]) + ("…" if len(self.fractions) > 8 else "")
        return (f"calibrated with {self.boots} boots of this deployment: {self.stored} from the history"
                + (f" (fractions {shown})" if shown else ""))


@dataclass(frozen=True, slots=True)
class Prediction:
    model: MemoryModel
    edits: WhatIf
    fraction: float
    tokens: int
    kv_cache_gib: float | None
    avail_after_pool_gib: float | None
    graph_need_gib: float | None
    graph_headroom_gib: float | None
    req_to_token_gib: float | None
    full_context_requests: float | None
    tokens_per_0_01: int | None
    min_fraction_for_full_context: float | None
    max_safe_fraction: float | None
    verdict: Verdict
    confidence: Confidence
    reasons: list[str]
    explain: list[str]
    context_len: int | None = None
    running_requests: int | None = None
    full_context: int = 1
    margin_gib: float = DEFAULT_GRAPH_MARGIN_GIB
    activation_gib: float = 0.0
    # the history's boots that calibrated it too (None: the log's own boots only)
    calibrated: HistoryCalibration | None = None

    def to_json(self) -> dict[str, object]:
        """The ``kvtui calc --json`` object (figures rounded once, limits toward the safe side)."""
        mdl = self.model
        ff = fraction_flag(mdl.engine)
        page_key = mdl.page_flag

        def r(x: float | None, d: int = 3) -> float | None:
            return None if x is None else fmt.round_near(x, d)

        def down(x: float | None) -> float | None:  # a capacity or a largest safe value: never overstated
            return None if x is None else fmt.round_down(x, 3)

        def up(x: float | None) -> float | None:  # a smallest value needed: never understated
            return None if x is None else fmt.round_up(x, 3)

        calibration: dict[str, object] = {  # what the model stands on: the explain lines' method and boot count
            "method": str(mdl.basis),
            "boots": 0 if mdl.basis in (Basis.CONFIG, Basis.CONFIG_ESTIMATE) else mdl.calibration_boots,
            # the pool-sizing environment the boot ran with; null when none of it is set
            "env": dict(mdl.pool_env) if any(v is not None for v in mdl.pool_env.values()) else None,
        }
        if mdl.anchor_tokens is not None:  # config+estimate: the pool it is placed at (serving lines)
            calibration["estimated_pool"] = {"tokens": mdl.anchor_tokens, "error": mdl.anchor_err}
        return {
            "engine": mdl.engine.value,
            "basis": str(mdl.basis),
            "confidence": str(self.confidence),
            "calibration": calibration,
            "observed": {
                ff: r(mdl.fraction),
                "max_total_num_tokens": mdl.tokens,
                "avail_after_pool_gib": r(mdl.avail_after_pool_gib),
                "graph_mem_gib": r(mdl.graph_mem_gib),
                "cell_bytes": mdl.cell_bytes,
                "sizing_cell_bytes": mdl.sizing_cell_bytes,
                page_key: mdl.page_size,
            },
            "edits": self.edits.to_json(),
            "predicted": {
                "max_total_num_tokens": self.tokens,
                "kv_cache_gib": r(self.kv_cache_gib),
                "avail_after_pool_gib": r(self.avail_after_pool_gib),
                "graph_headroom_gib": r(self.graph_headroom_gib),
                "req_to_token_gib": r(self.req_to_token_gib, 4),
                "full_context_requests": down(self.full_context_requests),
                "tokens_per_0_01": self.tokens_per_0_01,
            },
            "min_mem_fraction_for_full_context": up(self.min_fraction_for_full_context),
            "max_safe_fraction": down(self.max_safe_fraction),
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "explain": list(self.explain),
        }


def _resolve_fraction(model: MemoryModel, edits: WhatIf, notes: list[str]) -> float:
    """The fraction edited, or the engine's default when unset (SGLang's depends on the card)."""
    eng = model.engine
    present, val = edits.get(Memory.FRACTION)
    f = model.fraction
    if present:
        if val is None:
            if eng is Engine.VLLM:
                f = 0.9
            else:
                if model.gpu_mem_gib is None:
                    raise CalcError(
                        f"--unset {fraction_flag(eng)}: SGLang's default depends on the GPU's memory; "
                        "pass --gpu-mem-gib"
                    )
                f = default_mem_fraction(
                    model.gpu_mem_gib,
                    model.tp,
                    chunk=model.chunked_prefill_size,
                    max_bs=model.cuda_graph_max_bs,
                    speculative=model.speculative,
                )
                notes.append(f"{fraction_flag(eng)} unset: SGLang's default for this card is {_frac(f)}")
        else:
            f = float(val)  # type: ignore[arg-type]
    return f


def _resolve(model: MemoryModel, edits: WhatIf, notes: list[str], lows: list[str]) -> _Settings:
    """The settings an edit gives: each modelled flag edited, unset (the engine's default), or the boot's."""
    eng = model.engine
    f = _resolve_fraction(model, edits, notes)
    ctx = model.context_len
    p_ctx, v_ctx = edits.get(Memory.CONTEXT)
    if p_ctx:
        if v_ctx is None:
            lows.append("context length unset: the model's default context is not in the log; keeping the current one")
        else:
            ctx = int(v_ctx)  # type: ignore[call-overload]
    p_mrr, v_mrr = edits.get(Memory.MAX_REQUESTS)
    mrr_explicit = model.max_running_requests
    mrr_unset = False
    if p_mrr:
        if v_mrr is None:
            mrr_explicit, mrr_unset = None, True
        else:
            mrr_explicit = int(v_mrr)  # type: ignore[call-overload]
    p_gbs, v_gbs = edits.get(Memory.GRAPH_BS)
    gbs = model.cuda_graph_max_bs
    if p_gbs:
        gbs = None if v_gbs is None else int(v_gbs)  # type: ignore[call-overload]
        if v_gbs is None and model.gpu_mem_gib is not None:
            gbs = _sglang_tier(model.gpu_mem_gib, model.tp)[1]
    p_dt, v_dt = edits.get(Memory.KV_DTYPE)
    kv_dtype = model.kv_cache_dtype if not p_dt else ("auto" if v_dt is None else str(v_dt))
    p_pg, v_pg = edits.get(Memory.PAGE)
    page = model.page_size if not p_pg else (1 if v_pg is None else int(v_pg))  # type: ignore[call-overload]
    if eng is Engine.VLLM and p_pg and v_pg is None:
        page = 16
    p_cap, v_cap = edits.get(Memory.TOKEN_CAP)
    cap = model.max_total_tokens
    if p_cap:
        cap = None if v_cap is None else int(v_cap) * (page if eng is Engine.VLLM else 1)  # type: ignore[call-overload]
    p_ch, v_ch = edits.get(Memory.CHUNK)
    chunk = model.chunked_prefill_size
    if p_ch:
        chunk = None if v_ch is None else int(v_ch)  # type: ignore[call-overload]
    p_tp, v_tp = edits.get(Memory.TP)
    tp = model.tp
    if p_tp:
        tp = 1 if v_tp is None else int(v_tp)  # type: ignore[call-overload]
    return _Settings(f, ctx, mrr_explicit, mrr_unset, gbs, p_gbs, kv_dtype, page, cap, chunk, tp,
                     _resolve_cpu_kv_space(model, edits, lows))


def _resolve_cpu_kv_space(model: MemoryModel, edits: WhatIf, lows: list[str]) -> float | None:
    """vLLM's CPU pool edited with ``VLLM_CPU_KVCACHE_SPACE`` (None: not edited, or not a CPU boot)."""
    present, value = edits.get(Memory.CPU_KV_SPACE) if model.engine is Engine.VLLM else (False, None)
    if present and model.cpu_mem_gib is None:
        lows.append("VLLM_CPU_KVCACHE_SPACE sizes only vLLM's CPU backend, and this boot did not run on it: "
                    "its effect is not included")
        return None
    if present and value is None:
        _parse_value(model.engine, CPU_KV_SPACE, None)  # says why it cannot be predicted
    return float(value) if present and value is not None else None  # type: ignore[arg-type]


def grid_search(lo: int, hi: int, good: Callable[[int], bool]) -> int | None:
    """Largest i in [lo, hi] with good(i), assuming good is True then False as i rises (a bisection:
    about log2(hi - lo) calls of ``good``). The tune planner searches its fraction grid with it too."""
    if lo > hi or not good(lo):
        return None
    if good(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if good(mid):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, slots=True)
class _Search:
    """What moving the fraction does: tokens per +0.01, the smallest fraction that holds the
    full-context requests wanted, the largest whose verdict is ``ok``."""

    tokens_per_0_01: int | None = None
    min_fraction_for_full_context: float | None = None
    max_safe_fraction: float | None = None


def _search_fractions(model: MemoryModel, s: _Settings, ev: _Eval, full_context: int, margin: float) -> _Search:
    if model.slope_gib is None:
        return _Search()

    def at(i: int) -> _Eval:
        return _evaluate(model, replace(s, fraction=i / 1000), full_context, margin, [], with_explain=False)

    tokens_per = round(model.slope_gib * 0.01 * GIB / ev.cell_s) if ev.cell_s else None
    top = 1000 if model.engine is Engine.VLLM else 999
    min_fc = None
    if s.context_len:
        need_tokens = full_context * s.context_len
        below = grid_search(1, top, lambda i: at(i).tokens < need_tokens)
        if below is None:
            min_fc = 0.001
        elif below < top:
            min_fc = (below + 1) / 1000
    max_safe = None
    hi_ok = grid_search(1, top, lambda i: not at(i).over_top)
    if hi_ok is not None and at(hi_ok).verdict is Verdict.OK:
        max_safe = hi_ok / 1000
    return _Search(tokens_per, min_fc, max_safe)


def predict(
    model: MemoryModel,
    edits: WhatIf | Mapping[str, object] | None = None,
    *,
    full_context: int = 1,
    graph_margin_gib: float = DEFAULT_GRAPH_MARGIN_GIB,
) -> Prediction:
    """Predict the pool and the verdict for ``edits`` (engine flag names or aliases)."""
    if edits is None:
        edits = WhatIf(model.engine, {})
    elif not isinstance(edits, WhatIf):
        edits = what_if_from_mapping(model.engine, edits)
    if full_context < 1:
        raise CalcError(f"--full-context {full_context}: expected a whole number ≥ 1")
    if graph_margin_gib < 0:
        raise CalcError(f"graph_margin_gib {graph_margin_gib}: expected GiB ≥ 0")
    lows: list[str] = []
    notes: list[str] = []
    s = _resolve(model, edits, notes, lows)
    for name in edits.unmodelled:
        lows.append(f"{name} is not modelled by the calculator: its effect on memory is not included")
    ev = _evaluate(model, s, full_context, graph_margin_gib, lows)
    found = _search_fractions(model, s, ev, full_context, graph_margin_gib)
    ff = fraction_flag(model.engine)
    reasons = notes + list(model.reasons) + ev.reasons + lows
    explain = list(model.explain) + ev.explain
    if found.tokens_per_0_01 is not None:
        explain.append(f"tokens per +0.01 of {ff} = {found.tokens_per_0_01:,}")
    if found.max_safe_fraction is not None:
        explain.append(f"max safe {ff} (verdict ok) = {fmt.safe_max(found.max_safe_fraction)}")
    elif model.slope_gib is not None:
        reasons.append(f"no {ff} gives an ok verdict with these flags")
    if found.min_fraction_for_full_context is not None:
        explain.append(
            f"min {ff} for {full_context} full-context request"
            f"{'s' if full_context != 1 else ''} = {fmt.safe_min(found.min_fraction_for_full_context)}"
        )
    return Prediction(
        model=model,
        edits=edits,
        fraction=s.fraction,
        tokens=ev.tokens,
        kv_cache_gib=ev.kv_gib,
        avail_after_pool_gib=ev.pool_end,
        graph_need_gib=ev.need,
        graph_headroom_gib=ev.headroom,
        req_to_token_gib=ev.req_gib if model.engine is Engine.SGLANG else None,
        full_context_requests=ev.full_ctx,
        tokens_per_0_01=found.tokens_per_0_01,
        min_fraction_for_full_context=found.min_fraction_for_full_context,
        max_safe_fraction=found.max_safe_fraction,
        verdict=ev.verdict,
        confidence=Confidence.LOW if (model.confidence == Confidence.LOW or lows) else Confidence.HIGH,
        reasons=reasons,
        explain=explain,
        context_len=s.context_len,
        running_requests=ev.mrr,
        full_context=full_context,
        margin_gib=graph_margin_gib,
        activation_gib=activation_allowance_gib(s.chunk),
    )
