"""Calibrating an SGLang boot: the sizing identity and the known explanations when it fails."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine, FailureKind
from kvtui.knobs import fraction_flag
from kvtui.kvcalc.arith import _as_int, _frac, _snap_cell, floor_page
from kvtui.kvcalc.boots import (
    _CAPACITY_RE,
    _boot_fraction,
    _boot_tokens,
    _fact,
    _from_text,
    _looks_mla,
    _min_rank_fact,
    _never_sized,
    _page_of,
    _pool_end_of,
)
from kvtui.kvcalc.defaults import _dtype_bytes, _model_dtype_bytes
from kvtui.kvcalc.graphs import _estimated_graph, _graph_model_sglang
from kvtui.kvcalc.model import _AVAIL_SLACK, _PRINT_EPS, GIB, CalcError, IdentityCheck, MemoryModel, _Cal

_SGLANG_VLM_RESERVES_GIB = (100 / 1024, (100 + 1024) / 1024)  # mm reservation (≈0.5.18+)


def _interval_tokens(
    rest_lo: float, rest_hi: float, cell_lo: float, cell_hi: float, page: int, cap: int | None
) -> tuple[int, int]:
    lo = floor_page(max(0.0, rest_lo) * GIB / cell_hi, page) if cell_hi > 0 else 0
    hi = floor_page(max(0.0, rest_hi) * GIB / cell_lo, page) if cell_lo > 0 else 0
    if cap is not None:
        lo, hi = min(lo, floor_page(cap, page)), min(hi, floor_page(cap, page))
    return lo, hi


def _calibrate_sglang(boot: Boot, *, gpu_mem_gib: float | None, others: Sequence[Boot]) -> MemoryModel:
    c = _Cal()
    flags = boot.flags
    m, facts, dfacts = boot.metrics, boot.facts, boot.draft_facts
    f = _boot_fraction(boot)
    if f is None:
        raise CalcError(
            "the boot's argument dump (server_args=…) has no mem_fraction_static: cannot place it on the fraction line",
            "input",
        )
    n = _boot_tokens(boot)
    if n is None:
        raise _never_sized(boot)
    page, page_note = _page_of(boot, n)
    if page_note:
        c.reasons.append(page_note)
    cap = _as_int(flags.get("max_total_tokens"))
    spec = flags.get("speculative_algorithm") not in (None, "None", "", "NONE") or bool(dfacts)
    kv_dtype = str(flags.get("kv_cache_dtype") or "auto")
    model_bytes = _model_dtype_bytes(flags)
    tp = _as_int(flags.get("tp_size")) or 1

    # --- P, A ---------------------------------------------------------------------------------
    p = _fact(boot, "avail_before_load_gib", m.avail_before_load_gib)
    if p is None:
        p = _min_rank_fact(boot, "avail_before_load_gib")
    a_target = _fact(boot, "avail_after_load_gib", m.avail_after_load_gib)
    if a_target is None:
        a_target = _min_rank_fact(boot, "avail_after_load_gib")
    weights = _fact(boot, "weights_gib", m.weights_gib)
    a_draft = dfacts.get("avail_after_load_gib")
    a_candidates: list[tuple[float, str]] = []
    if a_target is not None:
        a_candidates.append((a_target, "target"))
    if a_draft is not None and (a_target is None or a_draft < a_target):
        a_candidates.append((a_draft, "draft"))

    # --- cells --------------------------------------------------------------------------------
    bpft = facts.get("dsv4_bytes_per_full_token")
    kv_gib = m.kv_cache_gib if m.kv_cache_gib is not None else facts.get("kv_cache_gib")
    swa_gib = facts.get("swa_kv_gib")
    if swa_gib is not None and (kv_gib is None or swa_gib > kv_gib):
        kv_gib = swa_gib
    is_dsv4 = bpft is not None
    if is_dsv4:
        assert bpft is not None
        cell_lo, cell_hi = bpft - _PRINT_EPS, bpft + _PRINT_EPS
        cell = round(bpft)
        c.explain.append(f"cell = {bpft:,.2f} B per full token (the engine's `DSV4 memory calculation` line)")
    elif kv_gib is not None and kv_gib > 0:
        rows = n + page
        eps = 2 * _PRINT_EPS  # K + V are two rounded figures
        cell_lo, cell_hi = (kv_gib - eps) * GIB / rows, (kv_gib + eps) * GIB / rows
        cell = _snap_cell(cell_lo, cell_hi)
        direct = kv_gib * GIB / rows
        c.explain.append(
            f"cell = {kv_gib:.2f} GiB × 2^30 / ({n:,} + {page}) ≈ {direct:,.0f} B"
            + (
                f"; the printed GiB are rounded (±{eps:.2f}), so the cell lies in {math.ceil(cell_lo):,}–"
                f"{math.floor(cell_hi):,} B: {cell:,} B per token per rank (the round value in that range)"
                if cell != round(direct)
                else " per token per rank"
            )
            + " (all the layers this rank holds; the pool line is per rank, not per layer)"
        )
    elif m.cell_bytes:
        cell = int(m.cell_bytes)
        cell_lo, cell_hi = cell * 0.9995, cell * 1.0005
    else:
        raise CalcError(
            "the boot printed #tokens but no pool size (`KV Cache is allocated … K size/V size` or `KV size`): "
            "cannot tell the bytes per token",
            "input",
        )
    # draft pool cell (separate pool, carved from the headroom)
    draft_cell = 0
    draft_kv = dfacts.get("kv_cache_gib")
    draft_n = dfacts.get("kv_tokens") or n
    if draft_kv is not None and draft_kv > 0 and draft_n:
        draft_cell = _snap_cell(
            (draft_kv - 2 * _PRINT_EPS) * GIB / (draft_n + page), (draft_kv + 2 * _PRINT_EPS) * GIB / (draft_n + page)
        )

    # --- identity -----------------------------------------------------------------------------
    identity = IdentityCheck(ok=False, hypothesis="unchecked")
    sizer = cell
    bias = 0.0
    a_used = a_target
    rest: float | None = None
    tokens_raw = float(n)

    def rest_bounds(a_val: float, p_val: float) -> tuple[float, float, float]:
        d = _PRINT_EPS + _AVAIL_SLACK
        mid = a_val - p_val * (1 - f)
        return (a_val - d) - (p_val + d) * (1 - f), (a_val + d) - (p_val - d) * (1 - f), mid

    if p is not None and a_candidates:
        matched = False
        tried: list[str] = []
        for a_val, a_src in a_candidates:
            r_lo, r_hi, r_mid = rest_bounds(a_val, p)
            # name, sizer_lo, sizer_hi, sizer, bias, exact allocated cell (0 = keep)
            hyps: list[tuple[str, float, float, float, float, int]] = []
            if is_dsv4:
                hyps.append(("dsv4", cell_lo, cell_hi, float(bpft or cell), 0.0, 0))
            else:
                hyps.append(("standard", cell_lo, cell_hi, float(cell), 0.0, 0))
                if draft_cell:
                    hyps.append(
                        (
                            "draft-in-cell",
                            cell_lo + draft_cell - 1,
                            cell_hi + draft_cell + 1,
                            float(cell + draft_cell),
                            0.0,
                            0,
                        )
                    )
                for per_alloc in (788, 656):
                    layers = round(cell / per_alloc)
                    if layers >= 1 and cell_lo - 1 <= layers * per_alloc <= cell_hi + 1:
                        sz = 708.0 * layers
                        hyps.append((f"dsa-fp8-sizing:{layers}:{per_alloc}", sz, sz, sz, 0.0, layers * per_alloc))
                for r in _SGLANG_VLM_RESERVES_GIB:
                    hyps.append((f"mm-reserve:{r:.3f}", cell_lo, cell_hi, float(cell), r, 0))
            for name, s_lo, s_hi, s_mid, b, exact in hyps:
                lo, hi = _interval_tokens(r_lo - b, r_hi - b, s_lo, s_hi, page, cap)
                tried.append(f"{name} with A={a_val:.2f} ({a_src}): {lo:,}–{hi:,}")
                if lo <= n <= hi:
                    identity = IdentityCheck(True, name, lo, hi, r_mid, a_val)
                    sizer = round(s_mid)
                    bias = b
                    if exact:
                        cell = exact
                    a_used = a_val
                    rest = r_mid
                    matched = True
                    break
            if matched:
                break
        if not matched and is_dsv4:
            avail = facts.get("dsv4_available_gib")
            a_val, a_src = a_candidates[0]
            r_lo, r_hi, r_mid = rest_bounds(a_val, p)
            if avail is not None:
                lo, hi = _interval_tokens(avail - _PRINT_EPS, avail + _PRINT_EPS, cell_lo, cell_hi, page, cap)
                if lo <= n <= hi and avail < r_mid:
                    bias = r_mid - avail
                    identity = IdentityCheck(True, "dsv4-bias", lo, hi, r_mid, a_val)
                    sizer, rest, a_used, matched = round(float(bpft or cell)), r_mid, a_val, True
        if not matched:
            a_val, a_src = a_candidates[0]
            r_lo, r_hi, r_mid = rest_bounds(a_val, p)
            lo, hi = _interval_tokens(r_lo, r_hi, cell_lo, cell_hi, page, cap)
            rest, a_used = r_mid, a_val
            empirical = r_mid * GIB / n if r_mid > 0 else float(cell)
            sizer = max(1, round(empirical))
            identity = IdentityCheck(False, "unexplained", lo, hi, r_mid, a_val)
            c.low(
                f"the log's figures do not follow the sizing formula: rest = {r_mid:.2f} GiB with the allocated cell "
                f"{cell:,} B gives {lo:,}–{hi:,} tokens, the engine made {n:,}; no known quirk explains it "
                f"(memory taken by another process, an env override, an unknown version quirk?): "
                f"using the empirical sizing cell {sizer:,} B"
            )
        name = identity.hypothesis
        if identity.ok:
            if name == "draft-in-cell":
                c.reasons.append(
                    f"sizing cell {sizer:,} B ≠ allocated cell {cell:,} B: the speculative target sizes with the "
                    f"draft's KV share ({draft_cell:,} B/token) included (EAGLE/STANDALONE ≥0.5.14, DFlash)"
                )
            elif name.startswith("dsa-fp8-sizing"):
                _, layers_s, per_s = name.split(":")
                c.explain.append(
                    f"allocated cell = {per_s} × {layers_s} layers = {cell:,} B (DSA fp8 layout: "
                    f"{'656 + 132' if per_s == '788' else '656'} B per layer); sizing cell = 708 × {layers_s} = "
                    f"{sizer:,} B"
                )
                c.reasons.append(
                    f"sizing cell {sizer:,} B ≠ allocated cell {cell:,} B: DSA with fp8 KV before SGLang 0.5.17 "
                    f"sized with (576+132)·{layers_s} B but allocates {per_s}·{layers_s}; the pool is "
                    f"{(cell / sizer - 1) * 100:.1f}% bigger than budgeted and the excess comes out of the headroom"
                )
                name = "dsa-fp8-sizing"
            elif name.startswith("mm-reserve"):
                c.reasons.append(
                    f"a multimodal reservation of {bias:.2f} GiB is taken before sizing (VLM, SGLang ≥0.5.18)"
                )
            elif name == "dsv4-bias":
                c.reasons.append(
                    f"DeepSeek-V4 fixed bias of {bias:.2f} GiB taken before dividing (c128 state per request slot)"
                )
            if a_used is not None and a_target is not None and a_used != a_target:
                c.reasons.append(
                    f"A = {a_used:.2f} GiB is the draft model's `Load weight end` avail: the draft's weights were "
                    "loaded before sizing (SGLang ≥0.5.18)"
                )
            identity = replace(identity, hypothesis=name)
        assert rest is not None
        raw = (rest - bias) * GIB / sizer
        if cap is not None and n >= floor_page(cap, page) and raw > n + page:
            tokens_raw = raw
            c.reasons.append(f"the pool is capped by max_total_tokens={cap:,} (the budget would give {int(raw):,})")
        else:
            tokens_raw = min(max(raw, float(n)), float(n + page - 1)) if identity.ok else float(n) + (page - 1) / 2
        ok_mark = "✓" if identity.ok else "✗"
        c.explain.insert(
            0,
            f"rest = A − P·(1 − f) = {a_used:.2f} − {p:.2f} × (1 − {_frac(f)}) = {rest:.2f} GiB"
            + (f" − {bias:.2f} GiB bias" if bias else ""),
        )
        c.explain.insert(
            0,
            f"P = {p:.2f} GiB free before the weights (min over ranks), A = {a_used:.2f} GiB after them, "
            f"f = {_frac(f)}",
        )
        c.explain.append(
            f"check: floor_page({rest - bias:.2f} GiB × 2^30 / {sizer:,} B, page {page}) = "
            f"{identity.expected_lo:,}–{identity.expected_hi:,} tokens (printed-GiB rounding); the engine made {n:,} "
            f"{ok_mark}"
        )
    else:
        missing = []
        if p is None:
            missing.append("`Load weight begin … avail mem` (P)")
        if not a_candidates:
            missing.append("`Load weight end … avail mem` (A)")
        c.reasons.append(f"the identity cannot be checked: the log lacks {' and '.join(missing)}")
        if p is None and a_target is not None and f < 1:
            budget = n * cell / GIB
            p = (a_target - budget) / (1 - f)
            c.reasons.append(f"P derived from the pool instead: (A − N·cell)/(1 − f) ≈ {p:.2f} GiB (less precise)")
            c.confidence = "low"
        elif p is None and not others:
            c.low("without P (free memory before the weights) the tokens per unit of fraction are unknown")

    slope: float | None = p
    basis = "calibrated"
    # --- two-point ----------------------------------------------------------------------------
    best: tuple[float, Boot, int] | None = None
    for o in others:
        fo, no = _boot_fraction(o), _boot_tokens(o)
        if fo is None or no is None or abs(fo - f) < 1e-6:
            continue
        if best is None or abs(fo - f) > abs(best[0] - f):
            best = (fo, o, no)
    if best is not None:
        fo, o, no = best
        slope_tokens = (n - no) / (f - fo)
        measured = slope_tokens * sizer / GIB
        if slope_tokens > 0:
            if slope is not None and abs(measured - slope) > 0.02 * slope:
                c.reasons.append(
                    f"the two boots' slope ({slope_tokens:,.0f} tokens per 1.0 of fraction) differs from P/cell by "
                    f"{abs(measured / slope - 1) * 100:.1f}%: using the measured one"
                )
            slope = measured
            basis = "two-point"
            c.explain.append(
                f"two-point: {no:,} tokens at f={_frac(fo)} and {n:,} at f={_frac(f)} → "
                f"{slope_tokens * 0.01:,.0f} tokens per +0.01 (slope {measured:.2f} GiB per 1.0 of fraction)"
            )

    # --- pool end, graphs, requests --------------------------------------------------------------
    pool_ends = [
        x
        for x in (m.avail_after_pool_gib, facts.get("avail_after_pool_gib"), dfacts.get("avail_after_pool_gib"))
        if x is not None
    ]
    pool_end = min(pool_ends) if pool_ends else None
    if pool_end is None and a_used is not None:
        pool_end = (
            a_used - (n + page) * cell / GIB - (draft_n + page) * draft_cell / GIB
            if draft_cell
            else a_used - (n + page) * cell / GIB
        )
        c.reasons.append("no `Memory pool end` line: memory after the pool estimated as A − pool")
    target_ends = [x for x in (m.avail_after_pool_gib, facts.get("avail_after_pool_gib")) if x is not None]
    target_end = min(target_ends) if target_ends else (pool_end if not draft_cell else None)
    graph = _graph_model_sglang(boot, pool_end, c)
    cgmb = _as_int(flags.get("cuda_graph_max_bs"))
    if graph is None:
        why = (
            "capture has not finished yet" if boot.status is BootStatus.STARTING else "the log shows no capture memory"
        )
        graph = _estimated_graph(cgmb or (max(boot.capture_bs) if boot.capture_bs else None), c, why)
    # a sibling boot that finished capture measures the need better than an OOM estimate
    if graph.source in ("capture-oom", "estimated"):
        for o in others:
            if o.status is BootStatus.READY:
                og = _graph_model_sglang(o, _pool_end_of(o), _Cal())
                if og is not None and og.source == "observed" and og.bs:
                    graph = replace(og, source="other-boot", note=f"capture need measured on a sibling boot: {og.note}")
                    c.reasons.append(
                        "capture need taken from a sibling boot of the same deployment that finished capture"
                    )
                    break
    mrr_flag = _as_int(flags.get("max_running_requests"))
    mrr_eff = _as_int(m.max_running_requests) or _as_int(facts.get("max_running_requests"))
    ctx = _as_int(m.context_len) or _as_int(facts.get("context_len")) or _as_int(flags.get("context_length"))
    chunk = _as_int(facts.get("chunked_prefill_size")) or _as_int(flags.get("chunked_prefill_size"))
    total_gpu = (
        gpu_mem_gib or facts.get("gpu_total_gib") or facts.get("oom_capacity_gib") or _from_text(boot, _CAPACITY_RE)
    )
    tp_scales = not (is_dsv4 or kv_dtype.startswith("fp8_ds") or _looks_mla(flags, cell, tp))
    if boot.status is BootStatus.READY:
        hint = "ready"
    elif boot.failure is not None:
        hint = boot.failure.kind.value
    else:
        hint = boot.status.value
    if boot.failure is not None and boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE:
        c.reasons.append(f"this boot died in CUDA-graph capture at {fraction_flag(boot.engine)}={_frac(f)}")

    return MemoryModel(
        engine=Engine.SGLANG,
        basis=basis,
        confidence=c.confidence,
        fraction=f,
        tokens=n,
        tokens_raw=tokens_raw,
        page_size=page,
        cell_bytes=cell,
        sizing_cell_bytes=sizer,
        slope_gib=slope,
        pre_load_gib=p,
        after_load_gib=a_used,
        weights_gib=weights,
        bias_gib=bias,
        max_total_tokens=cap,
        kv_cache_gib=kv_gib,
        avail_after_pool_gib=pool_end,
        target_pool_end_gib=target_end,
        graph=graph,
        graph_mem_gib=m.graph_mem_gib if m.graph_mem_gib is not None else facts.get("graph_mem_gib"),
        max_running_requests=mrr_flag,
        running_requests=mrr_eff,
        context_len=ctx,
        chunked_prefill_size=chunk,
        cuda_graph_max_bs=cgmb,
        kv_cache_dtype=kv_dtype,
        kv_elem_bytes=_dtype_bytes(kv_dtype, model_bytes),
        model_elem_bytes=model_bytes,
        tp=tp,
        tp_scales_cell=tp_scales,
        draft_cell_bytes=draft_cell,
        gpu_mem_gib=total_gpu,
        speculative=spec,
        disable_cuda_graph=flags.get("disable_cuda_graph") is True,
        version_hint=boot.version_hint,
        identity=identity,
        observed_verdict_hint=hint,
        reasons=tuple(c.reasons),
        explain=tuple(c.explain),
        flags=dict(flags),
    )
