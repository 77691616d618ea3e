"""What CUDA-graph capture needs, from a boot's capture trail or its death in capture."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from kvtui.boot import Boot
from kvtui.engines.events import Fact, FailureKind
from kvtui.kvcalc.arith import MIB_PER_GIB
from kvtui.kvcalc.boots import _FREE_RE, _TRIED_RE, _from_text
from kvtui.kvcalc.defaults import extend_capture_bs
from kvtui.kvcalc.model import GraphModel, GraphSource, Notes


def _fit_graph_costs(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares ``cost = a + b·bs`` with a, b ≥ 0; None when under-determined."""
    pts = [(float(b), c) for b, c in points if c >= 0]
    if len(pts) < 3 or len({b for b, _ in pts}) < 2:
        return None
    n = len(pts)
    sx = sum(b for b, _ in pts)
    sy = sum(c for _, c in pts)
    sxx = sum(b * b for b, _ in pts)
    sxy = sum(b * c for b, c in pts)
    den = n * sxx - sx * sx
    if den <= 0:
        return None
    b = (n * sxy - sx * sy) / den
    a = (sy - b * sx) / n
    if b < 0:
        return max(0.0, sy / n), 0.0
    if a < 0:
        return 0.0, max(0.0, sxy / sxx)
    return a, b


def _split_total(total: float, bs: Sequence[int]) -> tuple[float, float]:
    """Without a trail: half of the graph memory per graph, half in proportion to bs."""
    if not bs:
        return 0.0, 0.0
    return total / (2 * len(bs)), total / (2 * max(1, sum(bs)))


@dataclass(frozen=True, slots=True)
class _Capture:
    """What a boot printed about its CUDA-graph capture."""

    bs: list[int]  # the batch sizes it captures
    trail: list[tuple[int, float]]  # (bs, avail before capturing it), as tqdm printed them
    begin: float | None  # avail when capture began
    graph_mem: float | None  # the target's graphs, as reported
    draft_graph: float | None  # the draft model's graphs
    afters: list[float]  # avail after the graphs (every line that says it)
    fit: tuple[float, float] | None  # per-graph and per-batch-size cost from the trail


def _read_capture(boot: Boot) -> _Capture:
    trail = list(boot.capture_trail)
    bs_list = sorted(set(boot.capture_bs)) or sorted({b for b, _ in trail})
    facts, dfacts, m = boot.facts, boot.draft_facts, boot.metrics
    graph_mem = m.graph_mem_gib if m.graph_mem_gib is not None else facts.get(Fact.GRAPH_MEM_GIB)
    afters = [
        x
        for x in (
            facts.get(Fact.AVAIL_AFTER_GRAPH_GIB),
            m.available_gpu_mem_gib,
            facts.get(Fact.AVAILABLE_GPU_MEM_GIB),
            dfacts.get(Fact.AVAIL_AFTER_GRAPH_GIB),
        )
        if x is not None
    ]
    # per-graph costs from the trail (tqdm prints avail *before* each batch size)
    points: list[tuple[int, float]] = []
    for (b0, a0), (_b1, a1) in itertools.pairwise(trail):
        points.append((b0, a0 - a1))
    end_avail = facts.get(Fact.AVAIL_AFTER_GRAPH_GIB)
    if trail and end_avail is not None and not _died_in_capture(boot):
        points.append((trail[-1][0], trail[-1][1] - end_avail))
    return _Capture(bs_list, trail, facts.get(Fact.GRAPH_BEGIN_AVAIL_GIB), graph_mem, dfacts.get(Fact.GRAPH_MEM_GIB),
                    afters, _fit_graph_costs(points))


def _died_in_capture(boot: Boot) -> bool:
    return boot.failure is not None and boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE


def _graph_model_sglang(boot: Boot, pool_end: float | None, c: Notes) -> GraphModel | None:
    """Capture need from a boot: measured when capture finished, estimated when it died in it."""
    if boot.flags.get("disable_cuda_graph") is True:
        return GraphModel(need_gib=0.0, source=GraphSource.DISABLED, note="CUDA graphs disabled (--disable-cuda-graph)")
    cap = _read_capture(boot)
    if _died_in_capture(boot):
        return _capture_oom_graph(boot, cap, pool_end, c)
    if pool_end is not None and cap.afters:
        return _observed_graph(cap, pool_end, c)
    if cap.graph_mem is not None:
        a, b = _split_total(cap.graph_mem, cap.bs)
        need = cap.graph_mem + (cap.draft_graph or 0.0)
        return GraphModel(
            need_gib=need,
            bs=tuple(cap.bs),
            per_graph_gib=a,
            per_bs_gib=b,
            fixed_gib=need - cap.graph_mem,
            source=GraphSource.OBSERVED,
        )
    return None


def _capture_oom_graph(boot: Boot, cap: _Capture, pool_end: float | None, c: Notes) -> GraphModel:
    """The boot died in capture: what it had used, plus what it asked for, plus the batch sizes
    it had not reached yet."""
    facts, trail, bs_list = boot.facts, cap.trail, cap.bs
    start = pool_end if pool_end is not None else cap.begin
    tried = facts.get(Fact.OOM_TRIED_GIB) or _from_text(boot, _TRIED_RE)
    free = facts.get(Fact.OOM_FREE_GIB)
    if free is None:
        free = _from_text(boot, _FREE_RE)
    if free is None and trail:
        free = trail[-1][1]
    if start is None or free is None:
        c.low("the boot died in CUDA-graph capture but printed no avail figures to size what capture needed")
        return GraphModel(need_gib=max(cap.graph_mem or 0.0, 1.0) * 2, bs=tuple(bs_list),
                          source=GraphSource.CAPTURE_OOM)
    used = max(0.0, start - free)
    if cap.fit is None and bs_list:
        a, b = _split_total(used, [bb for bb, _ in trail] or bs_list)
    elif cap.fit is None:
        a, b = 0.0, 0.0
    else:
        a, b = cap.fit
    failing_bs = trail[-1][0] if trail else None
    remaining = [bb for bb in bs_list if failing_bs is not None and bb < failing_bs]
    rest_cost = sum(a + b * bb for bb in remaining)
    need = used + (tried or 0.0) + rest_cost
    total_cost = sum(a + b * bb for bb in bs_list)
    note = (
        f"capture died: it had used {used:.2f} GiB (from {start:.2f} down to {free:.2f} GiB free)"
        + (f" when it tried to allocate {tried:.2f} GiB" if tried else "")
        + (f" at bs={failing_bs}" if failing_bs is not None else "")
        + (f"; the {len(remaining)} smaller batch sizes left need ≈ {rest_cost:.2f} GiB more" if remaining else "")
        + f" → capture needs ≈ {need:.2f} GiB"
    )
    c.explain.append(note)
    return _spread(need, bs_list, (a, b), total_cost, GraphSource.CAPTURE_OOM, note)


def _observed_graph(cap: _Capture, pool_end: float, c: Notes) -> GraphModel:
    """The boot finished capture: the need is what the pools left minus what the graphs left (at
    least what the engine reported), spread over the batch sizes by the trail's costs."""
    graph_mem, draft_graph, bs_list = cap.graph_mem, cap.draft_graph, cap.bs
    need = max(0.0, pool_end - min(cap.afters))
    reported = (graph_mem or 0.0) + (draft_graph or 0.0)
    need = max(need, reported)
    total_graph = graph_mem if graph_mem is not None else need
    a, b = _split_total(total_graph, bs_list) if cap.fit is None else cap.fit
    cost_obs = sum(a + b * bb for bb in bs_list)
    if bs_list and cost_obs > 0 and graph_mem:
        scale = graph_mem / cost_obs  # fitted costs re-scaled to the reported total
        a, b, cost_obs = a * scale, b * scale, graph_mem
    note = (
        f"capture needed {need:.2f} GiB: {pool_end:.2f} GiB free after the pools → {min(cap.afters):.2f} GiB "
        f"after the graphs"
        + (f" (graphs {graph_mem:.2f} GiB" if graph_mem is not None else "")
        + (f" + draft graphs {draft_graph:.2f} GiB)" if draft_graph else (")" if graph_mem is not None else ""))
    )
    c.explain.append(note)
    return _spread(need, bs_list, (a, b), cost_obs, GraphSource.OBSERVED, note)


def _spread(
    need: float, bs: Sequence[int], costs: tuple[float, float], cost: float, source: GraphSource, note: str
) -> GraphModel:
    """A capture need as a per-graph and a per-batch-size cost (``cost`` at ``bs``), the rest fixed."""
    per_graph, per_bs = costs
    return GraphModel(need_gib=need, bs=tuple(bs), per_graph_gib=per_graph, per_bs_gib=per_bs,
                      fixed_gib=max(0.0, need - cost), source=source, note=note)


def _estimated_graph(max_bs: int | None, c: Notes, why: str) -> GraphModel:
    """SGLang's own reserve for graphs (``cuda_graph_max_bs × 2 MiB``) plus a workspace, as a
    stand-in when the log does not show what capture took."""
    mbs = max_bs or 160
    bs = extend_capture_bs([], mbs)
    need = 0.5 + mbs * 2 / MIB_PER_GIB
    a, b = _split_total(need - 0.5, bs)
    c.reasons.append(
        f"{why}: capture need assumed {need:.2f} GiB (0.5 GiB workspace + 2 MiB per batch size up to {mbs})"
    )
    return GraphModel(need_gib=need, bs=tuple(bs), per_graph_gib=a, per_bs_gib=b, fixed_gib=0.5,
                      source=GraphSource.ESTIMATED)
