"""Calibrating an SGLang boot: the sizing identity, and the known explanations when it fails.

One boot fixes P (free before the weights), A (free after them), f, N and the allocated cell
(``KV size / (N + page)``); the identity ``floor_page((A − P·(1 − f) − bias)·2^30 / sizer) == N``
is checked within the rounding of the printed GiB figures (engines.md §4). When the plain reading
(``standard``) does not give N, the sizing cell the engine really divided by is searched among
the known explanations, each a ``Hypothesis``, tried in order:

* ``draft-in-cell``: EAGLE/STANDALONE (≥0.5.14) and DFlash targets size with the draft's KV share;
* ``dsa-fp8-sizing``: DSA with fp8 KV before 0.5.17 sized with 708 B/layer but allocates 656/788;
* ``mm-reserve``: VLMs (≥0.5.18) take a multimodal reservation before sizing;
* ``dsv4`` / ``dsv4-bias``: DeepSeek-V4 prints its own bytes per full token and a fixed bias;

each with A read after the target's weights, then after the draft's (newer builds load the
draft's weights before sizing). A ``--max-total-tokens`` cap is part of every reading. If none
explains the numbers, the model says ``confidence: low`` and uses the empirical cell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine, Fact, FailureKind
from kvtui.knobs import Memory, fraction_flag, memory_value
from kvtui.kvcalc.arith import _AVAIL_SLACK, _PRINT_EPS, GIB, _as_int, _frac, _snap_cell, fit_line, floor_page
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
    boot_model,
)
from kvtui.kvcalc.graphs import _estimated_graph, _graph_model_sglang
from kvtui.kvcalc.model import Basis, CalcError, GraphModel, GraphSource, IdentityCheck, MemoryModel, Notes, Sizing

_SGLANG_VLM_RESERVES_GIB = (100 / 1024, (100 + 1024) / 1024)  # mm reservation (≈0.5.18+)


def _interval_tokens(
    rest_lo: float, rest_hi: float, cell_lo: float, cell_hi: float, page: int, cap: int | None
) -> tuple[int, int]:
    lo = floor_page(max(0.0, rest_lo) * GIB / cell_hi, page) if cell_hi > 0 else 0
    hi = floor_page(max(0.0, rest_hi) * GIB / cell_lo, page) if cell_lo > 0 else 0
    if cap is not None:
        lo, hi = min(lo, floor_page(cap, page)), min(hi, floor_page(cap, page))
    return lo, hi


# ---------------------------------------------------------------------------------------------
# What the boot printed
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pool:
    """What an SGLang boot printed about its KV pool (engines.md §2.1, §4)."""

    f: float  # mem_fraction_static
    n: int  # the tokens it made
    page: int
    cap: int | None  # --max-total-tokens
    p: float | None  # P: free before the weights (min over ranks)
    a_target: float | None  # A: free after the target's weights
    a_candidates: tuple[tuple[float, str], ...]  # (A, whose weights) the engine may have sized from
    cell: int  # bytes per token per rank the pool allocated
    cell_lo: float  # … within the rounding of the printed GiB
    cell_hi: float
    bpft: float | None  # DeepSeek-V4's own bytes per full token
    dsv4_available: float | None  # DeepSeek-V4's own budget after its bias
    kv_gib: float | None  # the pool's printed size
    draft_cell: int  # the draft model's pool (a separate pool, carved from the headroom)
    draft_n: float

    @property
    def is_dsv4(self) -> bool:
        return self.bpft is not None


def _avails(boot: Boot) -> tuple[float | None, float | None, tuple[tuple[float, str], ...]]:
    """P, the target's A, and the A's the engine may have sized from (the draft's when lower)."""
    m = boot.metrics
    p = _fact(boot, Fact.AVAIL_BEFORE_LOAD_GIB, m.avail_before_load_gib)
    if p is None:
        p = _min_rank_fact(boot, Fact.AVAIL_BEFORE_LOAD_GIB)
    a_target = _fact(boot, Fact.AVAIL_AFTER_LOAD_GIB, m.avail_after_load_gib)
    if a_target is None:
        a_target = _min_rank_fact(boot, Fact.AVAIL_AFTER_LOAD_GIB)
    a_draft = boot.draft_facts.get(Fact.AVAIL_AFTER_LOAD_GIB)
    candidates: list[tuple[float, str]] = []
    if a_target is not None:
        candidates.append((a_target, "target"))
    if a_draft is not None and (a_target is None or a_draft < a_target):
        candidates.append((a_draft, "draft"))
    return p, a_target, tuple(candidates)


def _cell(boot: Boot, n: int, page: int, c: Notes) -> tuple[int, float, float, float | None]:
    """The allocated cell, the interval the printed rounding leaves it, and the pool's GiB."""
    m, facts = boot.metrics, boot.facts
    bpft = facts.get(Fact.DSV4_BYTES_PER_FULL_TOKEN)
    kv_gib = m.kv_cache_gib if m.kv_cache_gib is not None else facts.get(Fact.KV_CACHE_GIB)
    swa_gib = facts.get(Fact.SWA_KV_GIB)
    if swa_gib is not None and (kv_gib is None or swa_gib > kv_gib):
        kv_gib = swa_gib
    if bpft is not None:
        c.explain.append(f"cell = {bpft:,.2f} B per full token (the engine's `DSV4 memory calculation` line)")
        return round(bpft), bpft - _PRINT_EPS, bpft + _PRINT_EPS, kv_gib
    if kv_gib is not None and kv_gib > 0:
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
        return cell, cell_lo, cell_hi, kv_gib
    if m.cell_bytes:
        cell = int(m.cell_bytes)
        return cell, cell * 0.9995, cell * 1.0005, kv_gib
    raise CalcError(
        "the boot printed #tokens but no pool size (`KV Cache is allocated … K size/V size` or `KV size`): "
        "cannot tell the bytes per token",
        "input",
    )


def _read_pool(boot: Boot, f: float, n: int, page: int, c: Notes) -> _Pool:
    p, a_target, a_candidates = _avails(boot)
    cell, cell_lo, cell_hi, kv_gib = _cell(boot, n, page, c)
    draft_cell = 0
    draft_kv = boot.draft_facts.get(Fact.KV_CACHE_GIB)
    draft_n = boot.draft_facts.get(Fact.KV_TOKENS) or n
    if draft_kv is not None and draft_kv > 0 and draft_n:
        draft_cell = _snap_cell(
            (draft_kv - 2 * _PRINT_EPS) * GIB / (draft_n + page), (draft_kv + 2 * _PRINT_EPS) * GIB / (draft_n + page)
        )
    return _Pool(
        f, n, page, _as_int(boot.flags.get("max_total_tokens")), p, a_target, a_candidates, cell, cell_lo, cell_hi,
        boot.facts.get(Fact.DSV4_BYTES_PER_FULL_TOKEN), boot.facts.get(Fact.DSV4_AVAILABLE_GIB), kv_gib, draft_cell,
        draft_n,
    )


# ---------------------------------------------------------------------------------------------
# The hypotheses
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """One reading of how the engine sized its pool: the cell it divided the budget by (an
    interval, from the printed rounding), a bias it took first, the cell it really allocated when
    the reading fixes it, and what the reading says when it explains the boot."""

    name: str  # what the identity check records
    sizer_lo: float
    sizer_hi: float
    sizer: float
    bias_gib: float = 0.0
    alloc_cell: int = 0  # 0: the measured cell
    explain: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


def _standard(o: _Pool) -> Iterator[Hypothesis]:
    yield Hypothesis("standard", o.cell_lo, o.cell_hi, float(o.cell))


def _draft_share(o: _Pool) -> Iterator[Hypothesis]:
    """A speculative target sizes with the draft's KV share in its cell."""
    if not o.draft_cell:
        return
    sizer = o.cell + o.draft_cell
    yield Hypothesis(
        "draft-in-cell", o.cell_lo + o.draft_cell - 1, o.cell_hi + o.draft_cell + 1, float(sizer),
        reasons=(
            f"sizing cell {sizer:,} B ≠ allocated cell {o.cell:,} B: the speculative target sizes with the "
            f"draft's KV share ({o.draft_cell:,} B/token) included (EAGLE/STANDALONE ≥0.5.14, DFlash)",
        ),
    )


def _dsa_fp8_sizing(o: _Pool) -> Iterator[Hypothesis]:
    """DSA with fp8 KV before 0.5.17: sized with (576+132)·L, allocated 656·L or (656+132)·L."""
    for per in (788, 656):
        layers = round(o.cell / per)
        if not (layers >= 1 and o.cell_lo - 1 <= layers * per <= o.cell_hi + 1):
            continue
        cell, sizer = layers * per, 708 * layers
        yield Hypothesis(
            "dsa-fp8-sizing", float(sizer), float(sizer), float(sizer), alloc_cell=cell,
            explain=(
                f"allocated cell = {per} × {layers} layers = {cell:,} B (DSA fp8 layout: "
                f"{'656 + 132' if per == 788 else '656'} B per layer); sizing cell = 708 × {layers} = {sizer:,} B",
            ),
            reasons=(
                f"sizing cell {sizer:,} B ≠ allocated cell {cell:,} B: DSA with fp8 KV before SGLang 0.5.17 "
                f"sized with (576+132)·{layers} B but allocates {per}·{layers}; the pool is "
                f"{(cell / sizer - 1) * 100:.1f}% bigger than budgeted and the excess comes out of the headroom",
            ),
        )


def _multimodal_reserve(o: _Pool) -> Iterator[Hypothesis]:
    """A VLM takes a reservation before sizing (``SGLANG_VLM_CACHE_SIZE_MB``, + the feature cache)."""
    for r in _SGLANG_VLM_RESERVES_GIB:
        yield Hypothesis(
            f"mm-reserve:{r:.3f}", o.cell_lo, o.cell_hi, float(o.cell), bias_gib=r,
            reasons=(f"a multimodal reservation of {r:.2f} GiB is taken before sizing (VLM, SGLang ≥0.5.18)",),
        )


def _dsv4(o: _Pool) -> Iterator[Hypothesis]:
    """DeepSeek-V4 divides by the bytes per full token it prints."""
    yield Hypothesis("dsv4", o.cell_lo, o.cell_hi, float(o.bpft or o.cell))


_HYPOTHESES: tuple[Callable[[_Pool], Iterator[Hypothesis]], ...] = (
    _standard,
    _draft_share,
    _dsa_fp8_sizing,
    _multimodal_reserve,
)


# ---------------------------------------------------------------------------------------------
# The identity
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Fit:
    """The reading that explains the boot (or the best that can be said without one)."""

    identity: IdentityCheck
    sizer: int
    bias: float
    cell: int
    a_used: float | None
    rest: float | None
    tokens_raw: float
    p: float | None


def _rest_bounds(o: _Pool, a: float, p: float) -> tuple[float, float, float]:
    """``rest = A − P·(1 − f)``: its interval under the printed rounding, and its middle."""
    d = _PRINT_EPS + _AVAIL_SLACK
    mid = a - p * (1 - o.f)
    return (a - d) - (p + d) * (1 - o.f), (a + d) - (p - d) * (1 - o.f), mid


def _match(o: _Pool, a: float, p: float, h: Hypothesis) -> tuple[Hypothesis, IdentityCheck] | None:
    r_lo, r_hi, r_mid = _rest_bounds(o, a, p)
    lo, hi = _interval_tokens(r_lo - h.bias_gib, r_hi - h.bias_gib, h.sizer_lo, h.sizer_hi, o.page, o.cap)
    if lo <= o.n <= hi:
        return h, IdentityCheck(True, h.name, lo, hi, r_mid, a)
    return None


def _dsv4_bias(o: _Pool, p: float) -> tuple[Hypothesis, IdentityCheck] | None:
    """DeepSeek-V4 ≥0.5.15 takes a fixed bias (the c128 state per request slot) before dividing:
    its printed budget is what it divided."""
    a = o.a_candidates[0][0]
    _lo, _hi, r_mid = _rest_bounds(o, a, p)
    avail = o.dsv4_available
    if avail is None:
        return None
    lo, hi = _interval_tokens(avail - _PRINT_EPS, avail + _PRINT_EPS, o.cell_lo, o.cell_hi, o.page, o.cap)
    if not (lo <= o.n <= hi and avail < r_mid):
        return None
    bias = r_mid - avail
    h = Hypothesis(
        "dsv4-bias", o.cell_lo, o.cell_hi, float(o.bpft or o.cell), bias_gib=bias,
        reasons=(f"DeepSeek-V4 fixed bias of {bias:.2f} GiB taken before dividing (c128 state per request slot)",),
    )
    return h, IdentityCheck(True, "dsv4-bias", lo, hi, r_mid, a)


def _explained(o: _Pool, p: float) -> tuple[Hypothesis, IdentityCheck] | None:
    """The first hypothesis that gives the boot's N, with A after the target's weights first."""
    generators = (_dsv4,) if o.is_dsv4 else _HYPOTHESES
    for a, _whose in o.a_candidates:
        for generate in generators:
            for h in generate(o):
                found = _match(o, a, p, h)
                if found is not None:
                    return found
    return _dsv4_bias(o, p) if o.is_dsv4 else None


def _fit(o: _Pool, others: Sequence[Boot], c: Notes) -> _Fit:
    """Check the identity (or say why it cannot be checked) and place the boot on the fraction line."""
    if o.p is None or not o.a_candidates:
        return _unchecked(o, others, c)
    p = o.p
    found = _explained(o, p)
    if found is None:
        a = o.a_candidates[0][0]
        r_lo, r_hi, r_mid = _rest_bounds(o, a, p)
        lo, hi = _interval_tokens(r_lo, r_hi, o.cell_lo, o.cell_hi, o.page, o.cap)
        sizer = max(1, round(r_mid * GIB / o.n if r_mid > 0 else float(o.cell)))
        identity = IdentityCheck(False, "unexplained", lo, hi, r_mid, a)
        c.low(
            f"the log's figures do not follow the sizing formula: rest = {r_mid:.2f} GiB with the allocated cell "
            f"{o.cell:,} B gives {lo:,}–{hi:,} tokens, the engine made {o.n:,}; no known quirk explains it "
            f"(memory taken by another process, an env override, an unknown version quirk?): "
            f"using the empirical sizing cell {sizer:,} B"
        )
        fit = _Fit(identity, sizer, 0.0, o.cell, a, r_mid, 0.0, p)
    else:
        h, identity = found
        c.explain.extend(h.explain)
        c.reasons.extend(h.reasons)
        a_used = identity.after_load_gib
        if a_used is not None and o.a_target is not None and a_used != o.a_target:
            c.reasons.append(
                f"A = {a_used:.2f} GiB is the draft model's `Load weight end` avail: the draft's weights were "
                "loaded before sizing (SGLang ≥0.5.18)"
            )
        fit = _Fit(identity, round(h.sizer), h.bias_gib, h.alloc_cell or o.cell, a_used, identity.rest_gib, 0.0, p)
    return replace(fit, tokens_raw=_tokens_raw(o, fit, c))


def _tokens_raw(o: _Pool, fit: _Fit, c: Notes) -> float:
    """Where the boot sits between N and N + page (the unrounded budget), and the check lines."""
    assert fit.rest is not None
    assert fit.a_used is not None
    assert fit.p is not None
    ok = fit.identity.ok
    raw = (fit.rest - fit.bias) * GIB / fit.sizer
    if o.cap is not None and o.n >= floor_page(o.cap, o.page) and raw > o.n + o.page:
        tokens_raw = raw
        c.reasons.append(f"the pool is capped by max_total_tokens={o.cap:,} (the budget would give {int(raw):,})")
    else:
        tokens_raw = min(max(raw, float(o.n)), float(o.n + o.page - 1)) if ok else float(o.n) + (o.page - 1) / 2
    c.explain.insert(
        0,
        f"rest = A − P·(1 − f) = {fit.a_used:.2f} − {fit.p:.2f} × (1 − {_frac(o.f)}) = {fit.rest:.2f} GiB"
        + (f" − {fit.bias:.2f} GiB bias" if fit.bias else ""),
    )
    c.explain.insert(
        0,
        f"P = {fit.p:.2f} GiB free before the weights (min over ranks), A = {fit.a_used:.2f} GiB after them, "
        f"f = {_frac(o.f)}",
    )
    c.explain.append(
        f"check: floor_page({fit.rest - fit.bias:.2f} GiB × 2^30 / {fit.sizer:,} B, page {o.page}) = "
        f"{fit.identity.expected_lo:,}–{fit.identity.expected_hi:,} tokens (printed-GiB rounding); the engine made "
        f"{o.n:,} {'✓' if ok else '✗'}"
    )
    return tokens_raw


def _unchecked(o: _Pool, others: Sequence[Boot], c: Notes) -> _Fit:
    """The log lacks P or A: say so; derive P from the pool when A is known."""
    missing = []
    if o.p is None:
        missing.append("`Load weight begin … avail mem` (P)")
    if not o.a_candidates:
        missing.append("`Load weight end … avail mem` (A)")
    c.reasons.append(f"the identity cannot be checked: the log lacks {' and '.join(missing)}")
    p = o.p
    if p is None and o.a_target is not None and o.f < 1:
        budget = o.n * o.cell / GIB
        p = (o.a_target - budget) / (1 - o.f)
        c.low(f"P derived from the pool instead: (A − N·cell)/(1 − f) ≈ {p:.2f} GiB (less precise)")
    elif p is None and not others:
        c.low("without P (free memory before the weights) the tokens per unit of fraction are unknown")
    return _Fit(IdentityCheck(ok=False, hypothesis="unchecked"), o.cell, 0.0, o.cell, o.a_target, None, float(o.n), p)


# ---------------------------------------------------------------------------------------------
# Slope, pool end, capture
# ---------------------------------------------------------------------------------------------


def _two_point(
    o: _Pool, sizer: int, p: float | None, others: Sequence[Boot], c: Notes
) -> tuple[float | None, Basis, int]:
    """The slope measured by the sibling boots on the fraction line: two boots (this one and one
    sibling) give a two-point slope; three or more a least-squares line through all of them (a
    boot's pool is rounded down to a page and its free memory varies a little from boot to boot:
    one far sibling carries all of that noise, a fit over every boot averages it). Returns (slope
    GiB per 1.0 of fraction, basis, boots used)."""
    f, n = o.f, o.n
    points = [(f, float(n))]
    for other in others:
        fo, no = _boot_fraction(other), _boot_tokens(other)
        if fo is not None and no is not None:
            points.append((fo, float(no)))
    fitted = fit_line(points)
    if fitted is None:
        return p, Basis.CALIBRATED, 1
    slope_tokens = fitted.slope
    if fitted.residual is None:
        fo, no = points[1][0], int(points[1][1])
        line = (f"two-point: {no:,} tokens at f={_frac(fo)} and {n:,} at f={_frac(f)} → "
                f"{slope_tokens * 0.01:,.0f} tokens per +0.01")
        basis = Basis.TWO_POINT
    else:
        line = (f"least-squares over {len(points)} boots (f = {fitted.shown}): {slope_tokens * 0.01:,.0f} tokens "
                f"per +0.01, largest residual {fitted.residual:,.0f} tokens")
        basis = Basis.LEAST_SQUARES
    measured = slope_tokens * sizer / GIB
    if slope_tokens <= 0:
        return p, Basis.CALIBRATED, 1
    if p is not None and abs(measured - p) > 0.02 * p:
        c.reasons.append(
            f"the boots' slope ({slope_tokens:,.0f} tokens per 1.0 of fraction) differs from P/cell by "
            f"{abs(measured / p - 1) * 100:.1f}%: using the measured one"
        )
    c.explain.append(f"{line} (slope {measured:.2f} GiB per 1.0 of fraction)")
    return measured, basis, len(points)


def _pool_ends(boot: Boot, o: _Pool, fit: _Fit, c: Notes) -> tuple[float | None, float | None]:
    """Free memory after every pool (what capture starts with), and right after the target's own."""
    m, facts = boot.metrics, boot.facts
    pool_end = _pool_end_of(boot)
    if pool_end is None and fit.a_used is not None:
        pool_end = fit.a_used - (o.n + o.page) * fit.cell / GIB
        if o.draft_cell:
            pool_end -= (o.draft_n + o.page) * o.draft_cell / GIB
        c.reasons.append("no `Memory pool end` line: memory after the pool estimated as A − pool")
    target_ends = [x for x in (m.avail_after_pool_gib, facts.get(Fact.AVAIL_AFTER_POOL_GIB)) if x is not None]
    target_end = min(target_ends) if target_ends else (pool_end if not o.draft_cell else None)
    return pool_end, target_end


def _graph(boot: Boot, pool_end: float | None, others: Sequence[Boot], c: Notes) -> GraphModel:
    """What capture needs: measured, estimated from a death in capture, or SGLang's own reserve;
    a sibling boot that finished capture measures it better than an estimate."""
    graph = _graph_model_sglang(boot, pool_end, c)
    if graph is None:
        why = (
            "capture has not finished yet" if boot.status is BootStatus.STARTING else "the log shows no capture memory"
        )
        cgmb = _as_int(memory_value(Engine.SGLANG, Memory.GRAPH_BS, boot.flags))
        graph = _estimated_graph(cgmb or (max(boot.capture_bs) if boot.capture_bs else None), c, why)
    if graph.source not in (GraphSource.CAPTURE_OOM, GraphSource.ESTIMATED):
        return graph
    for other in others:
        if other.status is not BootStatus.READY:
            continue
        og = _graph_model_sglang(other, _pool_end_of(other), Notes())
        if og is not None and og.source == GraphSource.OBSERVED and og.bs:
            c.reasons.append("capture need taken from a sibling boot of the same deployment that finished capture")
            note = f"capture need measured on a sibling boot: {og.note}"
            return replace(og, source=GraphSource.OTHER_BOOT, note=note)
    return graph


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


def _calibrate_sglang(boot: Boot, *, gpu_mem_gib: float | None, others: Sequence[Boot]) -> MemoryModel:
    c = Notes()
    flags, m, facts = boot.flags, boot.metrics, boot.facts
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
    o = _read_pool(boot, f, n, page, c)
    fit = _fit(o, others, c)
    slope, basis, used = _two_point(o, fit.sizer, fit.p, others, c)
    pool_end, target_end = _pool_ends(boot, o, fit, c)
    graph = _graph(boot, pool_end, others, c)
    if boot.failure is not None and boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE:
        c.reasons.append(f"this boot died in CUDA-graph capture at {fraction_flag(boot.engine)}={_frac(f)}")
    base = boot_model(boot, c, Sizing(basis, f, n, fit.tokens_raw, page, fit.cell, fit.sizer, slope))
    kv_dtype, tp = base.kv_cache_dtype, base.tp
    return replace(
        base,
        pre_load_gib=fit.p,
        after_load_gib=fit.a_used,
        weights_gib=_fact(boot, Fact.WEIGHTS_GIB, m.weights_gib),
        bias_gib=fit.bias,
        max_total_tokens=o.cap,
        kv_cache_gib=o.kv_gib,
        avail_after_pool_gib=pool_end,
        target_pool_end_gib=target_end,
        graph=graph,
        max_running_requests=_as_int(flags.get("max_running_requests")),
        running_requests=_as_int(m.max_running_requests) or _as_int(facts.get(Fact.MAX_RUNNING_REQUESTS)),
        chunked_prefill_size=(
            _as_int(facts.get(Fact.CHUNKED_PREFILL_SIZE)) or _as_int(flags.get("chunked_prefill_size"))
        ),
        tp_scales_cell=not (o.is_dsv4 or kv_dtype.startswith("fp8_ds") or _looks_mla(flags, fit.cell, tp)),
        draft_cell_bytes=o.draft_cell,
        gpu_mem_gib=(
            gpu_mem_gib
            or facts.get(Fact.GPU_TOTAL_GIB)
            or facts.get(Fact.OOM_CAPACITY_GIB)
            or _from_text(boot, _CAPACITY_RE)
        ),
        speculative=flags.get("speculative_algorithm") not in (None, "None", "", "NONE") or bool(boot.draft_facts),
        disable_cuda_graph=flags.get("disable_cuda_graph") is True,
        identity=fit.identity,
        calibration_boots=used,
    )
