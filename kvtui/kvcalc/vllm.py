"""Calibrating a vLLM boot (engines.md §3.3, §6.6).

``kv(u') = kv(u) + total·(u' − u)``: the budget is a share of the device's *total* memory, so the
slope is the device total (given, printed in an OOM, or measured by two boots at different
utilizations), and the bytes per token come from ``Available KV cache memory`` and ``GPU KV cache
size`` (or, when the boot refused to start, from the KV the error says one request needs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvtui.boot import Boot
from kvtui.engines.events import Engine, Fact, FailureKind
from kvtui.knobs import CPU_KV_SPACE_KNOB, pool_env
from kvtui.kvcalc.arith import (
    _PRINT_EPS,
    GIB,
    _as_float,
    _as_int,
    _frac,
    _snap_cell,
    _version_tuple,
    fit_line,
    floor_page,
)
from kvtui.kvcalc.boots import _TRIED_RE, _boot_tokens, _from_text, _never_sized, boot_model
from kvtui.kvcalc.model import Basis, CalcError, GraphModel, GraphSource, IdentityCheck, MemoryModel, Notes, Sizing


def _kv_gib(boot: Boot) -> float | None:
    m = boot.metrics
    return m.kv_cache_gib if m.kv_cache_gib is not None else boot.facts.get(Fact.KV_CACHE_GIB)


@dataclass(frozen=True, slots=True)
class _Refused:
    """A start vLLM refused (``To serve at least one request with the model's max seq len …``):
    a request's KV = ``bpt`` bytes per token of its length + ``fixed_gib`` that does not grow with
    it, the two figures of the error solved together (``_refused``)."""

    tokens: int
    bpt: int
    fixed_gib: float


def _refused(boot: Boot, kv: float, ctx: int | None, block: int, c: Notes) -> _Refused | None:
    """The pool of a start vLLM refused, from the error's two figures: ``needed`` GiB for one
    request of ``ctx`` tokens, and the longest request the available ``kv`` holds (vLLM's own
    binary search over ``max_memory_usage_bytes``: ``estimated maximum model length is M``). A
    request's KV is not ``needed/ctx`` per token when some layers' blocks do not grow with its
    length (sliding-window layers hold a window, a draft model its own blocks): ``needed/ctx`` then
    overstates what ``kv`` holds (issue 21: 124,560 tokens where vLLM says 121,840). The two points
    (M, kv) and (ctx, needed) give the per-token cost and the fixed part; the pool at this setting
    is M. Without M (older builds, or 0): ``needed/ctx`` per token. None: no error figures."""
    needed = boot.facts.get(Fact.KV_NEEDED_GIB)
    if needed is None or not ctx:
        return None
    m = _as_int(boot.facts.get(Fact.ESTIMATED_MAX_LEN))
    if m is not None and 0 < m < ctx and needed > kv:
        bpt = round((needed - kv) * GIB / (ctx - m))
        fixed = kv - m * bpt / GIB
        if bpt > 0 and fixed >= -_PRINT_EPS:
            fixed = max(fixed, 0.0)
            c.reasons.append(
                f"no `GPU KV cache size` line: the pool from the error, as vLLM sized it (estimated maximum model "
                f"length {m:,} in {kv:.2f} GiB; {needed:.2f} GiB for {ctx:,} tokens)"
            )
            c.explain.append(
                f"a request's KV = {bpt:,} B per token + {fixed:.2f} GiB that does not grow with its length "
                f"(sliding-window layers, a draft's blocks): ({needed:.2f} − {kv:.2f}) GiB × 2^30 / ({ctx:,} − {m:,}) "
                f"tokens; pool = (kv − {fixed:.2f} GiB) / {bpt:,} B = {m:,} tokens, vLLM's own estimate "
                f"(not {kv:.2f} / ({needed:.2f} / {ctx:,}) = {floor_page(kv * ctx / needed, block):,})"
            )
            return _Refused(m, bpt, fixed)
    bpt_f = needed * GIB / ctx
    c.reasons.append(
        f"no `GPU KV cache size` line: bytes per token from the error ({needed:.2f} GiB needed for {ctx:,} tokens)"
    )
    n = floor_page(kv * GIB / bpt_f, block)
    if m is not None and 0 < m < n:  # never more than the engine says the memory holds
        c.explain.append(f"{kv:.2f} GiB / ({needed:.2f} GiB / {ctx:,}) = {n:,} tokens, capped at vLLM's estimated "
                         f"maximum model length {m:,}")
        n = m
    return _Refused(n, 0, 0.0)


def _tokens(boot: Boot, kv: float, ctx: int | None, block: int, c: Notes) -> tuple[int, _Refused | None]:
    """The pool's tokens: printed, or from the error of a refused start (``_refused``)."""
    n = _boot_tokens(boot)
    if n is not None:
        return n, None
    refused = _refused(boot, kv, ctx, block, c)
    if refused is None:
        raise _never_sized(boot)
    return refused.tokens, refused


def _fixed_pool(boot: Boot) -> str | None:
    """What fixed this boot's pool in GiB, so that no utilization moves it (None: the budget did)."""
    if boot.flags.get("kv_cache_memory_bytes") is not None:
        return "--kv-cache-memory-bytes"
    space = pool_env(Engine.VLLM, boot.flags, boot.facts).get(CPU_KV_SPACE_KNOB.written(Engine.VLLM))
    return None if space is None else f"{CPU_KV_SPACE_KNOB.written(Engine.VLLM)}={space}"


def _two_point(
    boot: Boot, kv: float, u: float, total: float | None, others: Sequence[Boot], c: Notes
) -> tuple[float | None, float | None, Basis, int]:
    """(device total, slope, basis, boots used): boots of one setup at other utilizations
    measure the device total (GiB of KV per 1.0 of utilization): two boots give a two-point slope,
    three or more a least-squares line through all of them (the history's boots: ``others``).
    A pool whose size was given (the CPU backend's ``VLLM_CPU_KVCACHE_SPACE``,
    ``--kv-cache-memory-bytes``) does not follow the utilization: no slope from it."""
    fixed = _fixed_pool(boot)
    if fixed is not None:
        n = sum(1 for o in others if _kv_gib(o) is not None)
        if n:
            c.explain.append(f"the pool was given ({fixed}): other utilizations do not move it, no slope from "
                             f"{n} other boot{'s' if n != 1 else ''}")
        return total, total, Basis.CALIBRATED, 1
    points = [(u, kv)]
    for o in others:
        ko = _kv_gib(o)
        if ko is None or _fixed_pool(o) is not None:
            continue
        points.append((_as_float(o.flags.get("gpu_memory_utilization")) or 0.9, ko))
    fitted = fit_line(points)
    if fitted is None:
        return total, total, Basis.CALIBRATED, 1
    measured = fitted.slope
    if fitted.residual is None:
        (_, _), (uo, ko) = points
        line = (f"two-point: {ko:.2f} GiB KV at u={_frac(uo)} and {kv:.2f} GiB at u={_frac(u)} → "
                f"{measured:.2f} GiB per 1.0 of utilization (the device total)")
        basis = Basis.TWO_POINT
    else:
        line = (f"least-squares over {len(points)} boots (u = {fitted.shown}): {measured:.2f} GiB per 1.0 of "
                f"utilization (the device total), largest residual {fitted.residual:.2f} GiB")
        basis = Basis.LEAST_SQUARES
    if measured <= 0:
        return total, total, Basis.CALIBRATED, 1
    if total is not None and abs(measured - total) > 0.02 * total:
        c.reasons.append(
            f"the boots imply {measured:.2f} GiB per 1.0 of utilization, not the device's {total:.2f} GiB: "
            "using the measured slope"
        )
    c.explain.append(line)
    return (measured if total is None else total), measured, basis, len(points)


def _graph(boot: Boot, u: float, total: float | None, graph_mem: float | None, c: Notes) -> GraphModel | None:
    """What capture needs: reported, or (a death in capture) more than what lies outside the budget."""
    if graph_mem is not None:
        return GraphModel(need_gib=graph_mem, source=GraphSource.OBSERVED, note=f"graphs took {graph_mem:.2f} GiB")
    if boot.failure is not None and boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE:
        if total is None:
            return None
        tried = boot.facts.get(Fact.OOM_TRIED_GIB) or _from_text(boot, _TRIED_RE) or 0.5
        need = tried + total * (1 - u)
        c.explain.append(
            f"capture died at u={_frac(u)}: it needs more than total × (1 − u) = {need - tried:.2f} GiB, plus the "
            f"{tried:.2f} GiB it tried to allocate → ≈ {need:.2f} GiB"
        )
        return GraphModel(
            need_gib=need,
            source=GraphSource.CAPTURE_OOM,
            note=f"capture died: it needed more than the {need - tried:.2f} GiB outside the budget",
        )
    c.reasons.append("the log shows no CUDA-graph memory: capture need assumed 0.50 GiB")
    return GraphModel(need_gib=0.5, source=GraphSource.ESTIMATED, note="graph memory not printed")


def _calibrate_vllm(boot: Boot, *, gpu_mem_gib: float | None, others: Sequence[Boot]) -> MemoryModel:
    c = Notes()
    flags, m, facts = boot.flags, boot.metrics, boot.facts
    u = _as_float(flags.get("gpu_memory_utilization"))
    if u is None:
        u = 0.9
        c.reasons.append("gpu_memory_utilization not in the non-default args: vLLM's default 0.9")
    kv = _kv_gib(boot)
    block = _as_int(flags.get("block_size")) or 16
    ctx = _as_int(m.context_len) or _as_int(facts.get(Fact.CONTEXT_LEN)) or _as_int(flags.get("max_model_len"))
    if kv is None:
        raise _never_sized(boot)
    if kv <= 0:
        raise CalcError(
            f"this boot had no memory for the KV cache (Available KV cache memory: {kv:.2f} GiB): the weights and "
            "activations already exceed the budget; raise gpu_memory_utilization or use --model for an estimate",
            "input",
        )
    n, refused = _tokens(boot, kv, ctx, block, c)
    # newer builds report max_concurrency·max_model_len, which is not block-aligned
    block_eff = 1 if n % block != 0 else block
    fixed = 0.0
    if refused is not None and refused.bpt:
        bpt, fixed = refused.bpt, refused.fixed_gib
        tokens_raw = float(n)  # the engine's own figure at this setting
    else:
        bpt = _snap_cell((kv - _PRINT_EPS) * GIB / (n + block_eff), (kv + _PRINT_EPS) * GIB / max(1, n))
        tokens_raw = min(max(kv * GIB / bpt, float(n)), float(n + block_eff - 1))
        c.explain.append(f"bytes per token = {kv:.2f} GiB × 2^30 / {n:,} tokens ≈ {bpt:,} B per rank (block {block})")
    total = gpu_mem_gib or facts.get(Fact.GPU_TOTAL_GIB) or facts.get(Fact.OOM_CAPACITY_GIB)
    total, slope, basis, used = _two_point(boot, kv, u, total, others, c)
    if total is None:
        c.reasons.append(
            "device total unknown (pass --gpu-mem-gib): other utilizations and the graph headroom cannot be sized"
        )
    c.explain.insert(
        0, f"kv(u) = {kv:.2f} GiB at u = {_frac(u)}" + (f"; device total {total:.2f} GiB" if total else "")
    )
    graph_mem = m.graph_mem_gib if m.graph_mem_gib is not None else facts.get(Fact.GRAPH_MEM_GIB)
    graph = _graph(boot, u, total, graph_mem, c)
    vt = _version_tuple(boot.version_hint)
    base = boot_model(boot, c, Sizing(basis, u, n, tokens_raw, block_eff, bpt, bpt, slope))
    return replace(
        base,
        weights_gib=m.weights_gib if m.weights_gib is not None else facts.get(Fact.WEIGHTS_GIB),
        max_total_tokens=(_as_int(flags.get("num_gpu_blocks_override")) or 0) * block or None,
        kv_cache_gib=kv,
        bias_gib=fixed,  # a request's KV that does not grow with its length (outside tokens × bpt)
        avail_after_pool_gib=total * (1 - u) if total else None,
        graph=graph,
        max_running_requests=_as_int(flags.get("max_num_seqs")),
        running_requests=_as_int(flags.get("max_num_seqs")),
        chunked_prefill_size=_as_int(flags.get("max_num_batched_tokens")),
        tp_scales_cell=True,
        gpu_mem_gib=total,
        free_at_start_gib=facts.get(Fact.GPU_FREE_GIB),
        graphs_in_budget=vt is not None and vt >= (0, 21),
        identity=IdentityCheck(True, "vllm"),
        cpu_mem_gib=facts.get(Fact.CPU_MEM_TOTAL_GIB),
        calibration_boots=used,
    )
