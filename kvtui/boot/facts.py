"""How a boot's figures are aggregated: over ranks (and over the nodes of a deployment,
``kvtui.boot.deployment``) each figure takes the minimum (free memory), the maximum (graph memory, weights,
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
from kvtui.engines.events import Engine, Fact

_MIN_METRICS: Final[frozenset[Fact]] = frozenset(
    {
        Fact.AVAIL_BEFORE_LOAD_GIB,
        Fact.AVAIL_AFTER_LOAD_GIB,
        Fact.AVAIL_AFTER_POOL_GIB,
        Fact.GRAPH_BEGIN_AVAIL_GIB,
        Fact.AVAIL_AFTER_GRAPH_GIB,
        Fact.CAPTURE_AVAIL_GIB,
        Fact.AVAILABLE_GPU_MEM_GIB,
        Fact.GPU_FREE_GIB,
        Fact.OOM_FREE_GIB,
        Fact.DSV4_AVAILABLE_GIB,
    }
)
_MAX_METRICS: Final[frozenset[Fact]] = frozenset(
    {
        Fact.WEIGHTS_GIB,
        Fact.INIT_MEM_USAGE_GIB,
        Fact.OOM_TRIED_GIB,
        Fact.OOM_CAPACITY_GIB,
        Fact.KV_NEEDED_GIB,
        Fact.GPU_TOTAL_GIB,
        Fact.COMPILE_SECONDS,
        Fact.LOAD_SECONDS,
        Fact.INIT_ENGINE_SECONDS,
        Fact.MAMBA_CACHE_GIB,
        Fact.GRAPH_POOL_ACTUAL_GIB,
        Fact.HICACHE_HOST_GIB,
        Fact.SHM_WAIT_SECONDS,
        Fact.ENGINE_LOAD_WEIGHT_SECONDS,
        Fact.ENGINE_KV_ALLOCATION_SECONDS,
        Fact.ENGINE_CUDA_GRAPH_SECONDS,
        Fact.ENGINE_SCHEDULER_SECONDS,
        Fact.ENGINE_STARTUP_SECONDS,
    }
)
_POOL_METRICS: Final[frozenset[Fact]] = frozenset(
    {Fact.KV_CACHE_GIB, Fact.KV_TOKENS, Fact.SWA_KV_GIB, Fact.GRAPH_MEM_GIB}
)

# target figures that feed ``BootMetrics`` (others only update ``facts``)
_METRICS_INPUTS: Final[frozenset[Fact]] = frozenset(
    {
        Fact.MAX_TOTAL_NUM_TOKENS,
        Fact.FULL_TOKENS,
        Fact.KV_TOKENS,
        Fact.SWA_KV_GIB,
        Fact.KV_CACHE_GIB,
        Fact.DSV4_BYTES_PER_FULL_TOKEN,
        Fact.AVAIL_BEFORE_LOAD_GIB,
        Fact.AVAIL_AFTER_LOAD_GIB,
        Fact.WEIGHTS_GIB,
        Fact.AVAIL_AFTER_POOL_GIB,
        Fact.GRAPH_MEM_GIB,
        Fact.AVAILABLE_GPU_MEM_GIB,
        Fact.CONTEXT_LEN,
        Fact.MAX_RUNNING_REQUESTS,
        Fact.MAX_CONCURRENCY,
    }
)
_RANK_TAG_RE = re.compile(r"([A-Za-z_]*?)(\d+)")


def rank_sort_key(rank: str | None) -> tuple[int, ...]:
    """Natural order of rank tags: the main process first, then ``DP0 TP0`` < ``DP0 TP1`` < …"""
    if rank is None or rank == "main":
        return (-1,)
    nums = [int(n) for _, n in _RANK_TAG_RE.findall(rank)]
    return (len(nums), *nums) if nums else (1 << 30,)


def fact_rule(name: Fact) -> str:
    """How a figure is aggregated over ranks (and over nodes): ``min`` (free memory), ``max``
    (graph memory, weights, …) or ``lowest`` (sizes and counts: the lowest rank's value)."""
    if name in _MIN_METRICS:
        return "min"
    if name in _MAX_METRICS or name == Fact.GRAPH_MEM_GIB:
        return "max"
    return "lowest"


# vLLM V0's block size on CUDA when the flags do not say (``EngineArgs.block_size = 16`` in 0.5-0.6.x;
# from 0.7 ``None``, which the CUDA platform sets to 16); TPU, HPU and Neuron differ
VLLM_V0_CUDA_BLOCK_SIZE: Final = 16


def _v0_pool(boot: Boot) -> tuple[int | None, str | None]:
    """A vLLM V0 boot prints its pool only as ``# GPU blocks: N`` (the executor's
    ``determine_num_available_blocks``): the pool holds N × block size tokens. The block size is the
    flags' ``block_size`` (the argument dump), else vLLM's CUDA default. (tokens, how) or (None, None)."""
    blocks = boot.facts.get(Fact.KV_BLOCKS)
    if blocks is None or blocks <= 0:
        return None, None
    flag = boot.flags.get("block_size")
    if isinstance(flag, int) and not isinstance(flag, bool) and flag > 0:
        block, src = flag, "the flags' block_size"
    else:
        block = VLLM_V0_CUDA_BLOCK_SIZE
        src = f"block_size not in the flags: vLLM's CUDA default {block}"
    n = int(blocks)
    return n * block, f"{n:,} GPU blocks × {block} tokens per block ({src})"


def refresh_metrics(boot: Boot) -> None:
    """``boot.metrics`` from ``boot.facts`` (and flags, live figures): the tracker calls it after
    each figure; a merge of several boots (``kvtui.boot.deployment``) calls it on the merged facts."""
    f = boot.facts
    m = boot.metrics

    def as_int(name: Fact) -> int | None:
        v = f.get(name)
        return int(v) if v is not None else None

    tokens = as_int(Fact.MAX_TOTAL_NUM_TOKENS)
    pool_tokens = f.get(Fact.FULL_TOKENS)
    if pool_tokens is None:
        pool_tokens = f.get(Fact.KV_TOKENS)
    if tokens is None and pool_tokens is not None and pool_tokens > 0:
        tokens = int(pool_tokens)
    boot.pool_from = None
    if tokens is None and boot.engine is Engine.VLLM:
        tokens, boot.pool_from = _v0_pool(boot)
    m.max_total_num_tokens = tokens
    kv = f.get(Fact.SWA_KV_GIB)
    if kv is None:
        kv = f.get(Fact.KV_CACHE_GIB)
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
    elif f.get(Fact.DSV4_BYTES_PER_FULL_TOKEN) is not None:
        m.cell_bytes = round(f[Fact.DSV4_BYTES_PER_FULL_TOKEN])
    m.avail_before_load_gib = f.get(Fact.AVAIL_BEFORE_LOAD_GIB)
    m.avail_after_load_gib = f.get(Fact.AVAIL_AFTER_LOAD_GIB)
    m.weights_gib = f.get(Fact.WEIGHTS_GIB)
    m.avail_after_pool_gib = f.get(Fact.AVAIL_AFTER_POOL_GIB)
    m.graph_mem_gib = round(f[Fact.GRAPH_MEM_GIB], 4) if Fact.GRAPH_MEM_GIB in f else None
    m.available_gpu_mem_gib = f.get(Fact.AVAILABLE_GPU_MEM_GIB)
    m.context_len = as_int(Fact.CONTEXT_LEN)
    m.max_running_requests = as_int(Fact.MAX_RUNNING_REQUESTS)
    mc = f.get(Fact.MAX_CONCURRENCY)
    if mc is None and tokens is not None and m.context_len and boot.engine is not Engine.VLLM:
        mc = fmt.round_down(tokens / m.context_len, 2)  # a capacity: rounded down, as calc shows it
    m.max_concurrency = mc
    m.token_usage = boot.live.token_usage
