"""Calibrating a vLLM boot."""

from __future__ import annotations

from collections.abc import Sequence

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine, FailureKind
from kvtui.kvcalc.arith import _as_float, _as_int, _frac, _snap_cell, _version_tuple, floor_page
from kvtui.kvcalc.boots import _TRIED_RE, _boot_tokens, _from_text, _never_sized
from kvtui.kvcalc.defaults import _dtype_bytes, _model_dtype_bytes
from kvtui.kvcalc.model import _PRINT_EPS, GIB, CalcError, GraphModel, IdentityCheck, MemoryModel, _Cal


def _calibrate_vllm(boot: Boot, *, gpu_mem_gib: float | None, others: Sequence[Boot]) -> MemoryModel:
    c = _Cal()
    flags, m, facts = boot.flags, boot.metrics, boot.facts
    u = _as_float(flags.get("gpu_memory_utilization"))
    if u is None:
        u = 0.9
        c.reasons.append("gpu_memory_utilization not in the non-default args: vLLM's default 0.9")
    kv = m.kv_cache_gib if m.kv_cache_gib is not None else facts.get("kv_cache_gib")
    n = _boot_tokens(boot)
    block = _as_int(flags.get("block_size")) or 16
    ctx = _as_int(m.context_len) or _as_int(facts.get("context_len")) or _as_int(flags.get("max_model_len"))
    if kv is None:
        raise _never_sized(boot)
    if kv <= 0:
        raise CalcError(
            f"this boot had no memory for the KV cache (Available KV cache memory: {kv:.2f} GiB): the weights and "
            "activations already exceed the budget; raise gpu_memory_utilization or use --model for an estimate",
            "input",
        )
    if n is None:
        needed = facts.get("kv_needed_gib")
        if needed is None or not ctx:
            raise _never_sized(boot)
        bpt_f = needed * GIB / ctx
        n_raw = kv * GIB / bpt_f
        n = floor_page(n_raw, block)
        c.reasons.append(
            f"no `GPU KV cache size` line: bytes per token from the error ({needed:.2f} GiB needed for {ctx:,} tokens)"
        )
    # newer builds report max_concurrency·max_model_len, which is not block-aligned
    block_eff = 1 if n % block != 0 else block
    lo = (kv - _PRINT_EPS) * GIB / (n + block_eff)
    hi = (kv + _PRINT_EPS) * GIB / max(1, n)
    bpt = _snap_cell(lo, hi)
    raw = kv * GIB / bpt
    tokens_raw = min(max(raw, float(n)), float(n + block_eff - 1))
    total = gpu_mem_gib or facts.get("gpu_total_gib") or facts.get("oom_capacity_gib")
    basis = "calibrated"
    c.explain.append(f"bytes per token = {kv:.2f} GiB × 2^30 / {n:,} tokens ≈ {bpt:,} B per rank (block {block})")
    # two-point: the device total from two utilizations
    best: tuple[float, float] | None = None
    for o in others:
        uo = _as_float(o.flags.get("gpu_memory_utilization")) or 0.9
        ko = o.metrics.kv_cache_gib if o.metrics.kv_cache_gib is not None else o.facts.get("kv_cache_gib")
        if ko is None or abs(uo - u) < 1e-6:
            continue
        if best is None or abs(uo - u) > abs(best[0] - u):
            best = (uo, ko)
    if best is not None:
        uo, ko = best
        measured = (kv - ko) / (u - uo)
        if measured > 0:
            if total is not None and abs(measured - total) > 0.02 * total:
                c.reasons.append(
                    f"the two boots imply {measured:.2f} GiB per 1.0 of utilization, not the device's {total:.2f} GiB: "
                    "using the measured slope"
                )
            c.explain.append(
                f"two-point: {ko:.2f} GiB KV at u={_frac(uo)} and {kv:.2f} GiB at u={_frac(u)} → "
                f"{measured:.2f} GiB per 1.0 of utilization (the device total)"
            )
            if total is None:
                total = measured
            basis = "two-point"
            slope: float | None = measured
        else:
            slope = total
    else:
        slope = total
    if total is None:
        c.reasons.append(
            "device total unknown (pass --gpu-mem-gib): other utilizations and the graph headroom cannot be sized"
        )
    c.explain.insert(
        0, f"kv(u) = {kv:.2f} GiB at u = {_frac(u)}" + (f"; device total {total:.2f} GiB" if total else "")
    )
    graph_mem = m.graph_mem_gib if m.graph_mem_gib is not None else facts.get("graph_mem_gib")
    graph: GraphModel | None = None
    if graph_mem is not None:
        graph = GraphModel(need_gib=graph_mem, source="observed", note=f"graphs took {graph_mem:.2f} GiB")
    elif boot.failure is not None and boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE:
        if total is not None:
            tried = facts.get("oom_tried_gib") or _from_text(boot, _TRIED_RE) or 0.5
            need = tried + total * (1 - u)
            graph = GraphModel(
                need_gib=need,
                source="capture-oom",
                note=f"capture died: it needed more than the {need - tried:.2f} GiB outside the budget",
            )
            c.explain.append(
                f"capture died at u={_frac(u)}: it needs more than total × (1 − u) = {need - tried:.2f} GiB, plus the "
                f"{tried:.2f} GiB it tried to allocate → ≈ {need:.2f} GiB"
            )
    else:
        graph = GraphModel(need_gib=0.5, source="estimated", note="graph memory not printed")
        c.reasons.append("the log shows no CUDA-graph memory: capture need assumed 0.50 GiB")
    vt = _version_tuple(boot.version_hint)
    in_budget = vt is not None and vt >= (0, 21)
    weights = m.weights_gib if m.weights_gib is not None else facts.get("weights_gib")
    kv_dtype = str(flags.get("kv_cache_dtype") or "auto")
    hint = (
        "ready" if boot.status is BootStatus.READY else (boot.failure.kind.value if boot.failure else boot.status.value)
    )
    return MemoryModel(
        engine=Engine.VLLM,
        basis=basis,
        confidence=c.confidence,
        fraction=u,
        tokens=n,
        tokens_raw=tokens_raw,
        page_size=block_eff,
        cell_bytes=bpt,
        sizing_cell_bytes=bpt,
        slope_gib=slope,
        weights_gib=weights,
        max_total_tokens=(_as_int(flags.get("num_gpu_blocks_override")) or 0) * block or None,
        kv_cache_gib=kv,
        avail_after_pool_gib=total * (1 - u) if total else None,
        graph=graph,
        graph_mem_gib=graph_mem,
        max_running_requests=_as_int(flags.get("max_num_seqs")),
        running_requests=_as_int(flags.get("max_num_seqs")),
        context_len=ctx,
        chunked_prefill_size=_as_int(flags.get("max_num_batched_tokens")),
        cuda_graph_max_bs=_as_int(flags.get("max_cudagraph_capture_size")),
        kv_cache_dtype=kv_dtype,
        kv_elem_bytes=_dtype_bytes(kv_dtype, _model_dtype_bytes(flags)),
        model_elem_bytes=_model_dtype_bytes(flags),
        tp=_as_int(flags.get("tensor_parallel_size")) or 1,
        tp_scales_cell=True,
        gpu_mem_gib=total,
        free_at_start_gib=facts.get("gpu_free_gib"),
        graphs_in_budget=in_budget,
        version_hint=boot.version_hint,
        identity=IdentityCheck(True, "vllm"),
        observed_verdict_hint=hint,
        reasons=tuple(c.reasons),
        explain=tuple(c.explain),
        flags=dict(flags),
    )
