"""How a boot's figures are aggregated: over ranks (and over the nodes of a deployment,
``kvtui.nodes``) each figure takes the minimum (free memory), the maximum (graph memory, weights,
durations) or the lowest rank's value (sizes and counts) — ``fact_rule``; ``refresh_metrics``
derives ``Boot.metrics`` (the ``replay --json`` figures) from ``Boot.facts``; ``rank_sort_key`` is
the natural order of rank tags.

Pure core.
"""

from __future__ import annotations

import re
from typing import Final

from kvtui import fmt
from kvtui.boot.model import Boot
from kvtui.engines.events import Engine

_MIN_METRICS: Final = frozenset(
    {
        "avail_before_load_gib",
        "avail_after_load_gib",
        "avail_after_pool_gib",
        "graph_begin_avail_gib",
        "avail_after_graph_gib",
        "capture_avail_gib",
        "available_gpu_mem_gib",
        "gpu_free_gib",
        "oom_free_gib",
        "dsv4_available_gib",
    }
)
_MAX_METRICS: Final = frozenset(
    {
        "weights_gib",
        "init_mem_usage_gib",
        "oom_tried_gib",
        "oom_capacity_gib",
        "kv_needed_gib",
        "gpu_total_gib",
        "compile_seconds",
        "load_seconds",
        "init_engine_seconds",
        "mamba_cache_gib",
        "graph_pool_actual_gib",
        "hicache_host_gib",
    }
)
_POOL_METRICS: Final = frozenset({"kv_cache_gib", "kv_tokens", "swa_kv_gib", "graph_mem_gib"})

# target figures that feed ``BootMetrics`` (others only update ``facts``)
_METRICS_INPUTS: Final = frozenset(
    {
        "max_total_num_tokens",
        "full_tokens",
        "kv_tokens",
        "swa_kv_gib",
        "kv_cache_gib",
        "dsv4_bytes_per_full_token",
        "avail_before_load_gib",
        "avail_after_load_gib",
        "weights_gib",
        "avail_after_pool_gib",
        "graph_mem_gib",
        "available_gpu_mem_gib",
        "context_len",
        "max_running_requests",
        "max_concurrency",
    }
)
_RANK_TAG_RE = re.compile(r"([A-Za-z_]*?)(\d+)")


def rank_sort_key(rank: str | None) -> tuple[int, ...]:
    """Natural order of rank tags: the main process first, then ``DP0 TP0`` < ``DP0 TP1`` < …"""
    if rank is None or rank == "main":
        return (-1,)
    nums = [int(n) for _, n in _RANK_TAG_RE.findall(rank)]
    return (len(nums), *nums) if nums else (1 << 30,)


def fact_rule(name: str) -> str:
    """How a figure is aggregated over ranks (and over nodes): ``min`` (free memory), ``max``
    (graph memory, weights, …) or ``lowest`` (sizes and counts: the lowest rank's value)."""
    if name in _MIN_METRICS:
        return "min"
    if name in _MAX_METRICS or name == "graph_mem_gib":
        return "max"
    return "lowest"


def refresh_metrics(boot: Boot) -> None:
    """``boot.metrics`` from ``boot.facts`` (and flags, live figures): the tracker calls it after
    each figure; a merge of several boots (``kvtui.nodes``) calls it on the merged facts."""
    f = boot.facts
    m = boot.metrics

    def as_int(name: str) -> int | None:
        v = f.get(name)
        return int(v) if v is not None else None

    tokens = as_int("max_total_num_tokens")
    pool_tokens = f.get("full_tokens")
    if pool_tokens is None:
        pool_tokens = f.get("kv_tokens")
    if tokens is None and pool_tokens is not None and pool_tokens > 0:
        tokens = int(pool_tokens)
    m.max_total_num_tokens = tokens
    kv = f.get("swa_kv_gib")
    if kv is None:
        kv = f.get("kv_cache_gib")
    m.kv_cache_gib = round(kv, 4) if kv is not None else None
    m.cell_bytes = None
    n = pool_tokens if pool_tokens is not None and pool_tokens > 0 else tokens
    if kv is not None and n is not None and n > 0 and kv > 0:
        if boot.engine is Engine.VLLM:
            m.cell_bytes = round(kv * (1 << 30) / n)
        else:
            page = boot.flags.get("page_size")
            pg = page if isinstance(page, int) and not isinstance(page, bool) and page > 0 else 1
            m.cell_bytes = round(kv * (1 << 30) / (n + pg))
    elif f.get("dsv4_bytes_per_full_token") is not None:
        m.cell_bytes = round(f["dsv4_bytes_per_full_token"])
    m.avail_before_load_gib = f.get("avail_before_load_gib")
    m.avail_after_load_gib = f.get("avail_after_load_gib")
    m.weights_gib = f.get("weights_gib")
    m.avail_after_pool_gib = f.get("avail_after_pool_gib")
    m.graph_mem_gib = round(f["graph_mem_gib"], 4) if "graph_mem_gib" in f else None
    m.available_gpu_mem_gib = f.get("available_gpu_mem_gib")
    m.context_len = as_int("context_len")
    m.max_running_requests = as_int("max_running_requests")
    mc = f.get("max_concurrency")
    if mc is None and tokens is not None and m.context_len and boot.engine is not Engine.VLLM:
        mc = fmt.round_down(tokens / m.context_len, 2)  # a capacity: rounded down, as calc shows it
    m.max_concurrency = mc
    m.token_usage = boot.live.token_usage
