"""One reading of a serving server's load and KV pool (``ServingSample``), and the histogram type
its latencies come in (``Histogram``). Pure core.

Counters (``preemptions_total``, ``retractions_total``, …) are cumulative since the server started,
as Prometheus counters are; the log fallback (``kvtui.serving.logs``) adds up its lines into the
same kind of totals, so a ``ServingWindow`` computes rates the same way from either source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from kvtui.engines.events import Engine

Source = Literal["metrics", "log"]


@dataclass(frozen=True, slots=True)
class Histogram:
    """A Prometheus histogram as exposed: ``buckets`` are (upper bound, cumulative count), bounds
    ascending, the last one ``inf``; ``count`` and ``total`` (``_count``, ``_sum``)."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    total: float

    def since(self, older: Histogram | None) -> Histogram:
        """The observations made after ``older`` (bucket by bucket). A reset — the count fell, or
        the bounds changed (a new boot) — gives ``self`` whole: everything since the reset."""
        if older is None:
            return self
        if older.count > self.count or [b for b, _ in older.buckets] != [b for b, _ in self.buckets]:
            return self
        if any(o > n for (_, o), (_, n) in zip(older.buckets, self.buckets, strict=True)):
            return self
        return Histogram(
            tuple((b, n - o) for (b, n), (_, o) in zip(self.buckets, older.buckets, strict=True)),
            self.count - older.count,
            max(0.0, self.total - older.total),
        )

    def plus(self, other: Histogram) -> Histogram:
        """Two engines' histograms of the same metric added (data-parallel engines, same bounds);
        ``self`` when the bounds differ."""
        if [b for b, _ in other.buckets] != [b for b, _ in self.buckets]:
            return self
        return Histogram(
            tuple((b, n + o) for (b, n), (_, o) in zip(self.buckets, other.buckets, strict=True)),
            self.count + other.count,
            self.total + other.total,
        )

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) as Prometheus' ``histogram_quantile`` estimates it: linear
        within the bucket that holds the rank, the lowest bucket starting at 0, and the largest
        finite bound when the rank falls in the ``+Inf`` bucket. None without observations."""
        if not self.buckets or self.count <= 0 or not 0.0 <= q <= 1.0:
            return None
        rank = q * self.buckets[-1][1]
        lower, below = 0.0, 0.0
        for bound, cum in self.buckets:
            if cum >= rank and cum > 0:
                if math.isinf(bound):
                    return lower  # the largest finite bound: the rank lies beyond it
                if bound <= 0:
                    return bound
                in_bucket = cum - below
                return lower + (bound - lower) * ((rank - below) / in_bucket if in_bucket > 0 else 1.0)
            lower, below = bound, cum
        return lower


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """The KV pool as the engine describes it. vLLM ``vllm:cache_config_info`` labels:
    ``num_gpu_blocks`` (blocks, also on CPU), ``block_size`` (tokens per block),
    ``kv_cache_size_tokens``, ``kv_cache_max_concurrency`` (requests of max-model-len the pool
    holds); SGLang ``sglang:max_total_num_tokens`` (0.5+) → ``kv_cache_size_tokens``."""

    num_blocks: int | None = None
    block_size: int | None = None
    kv_cache_size_tokens: int | None = None
    max_concurrency: float | None = None

    @property
    def pool_tokens(self) -> int | None:
        """The pool in tokens: the engine's own figure, else blocks × block size."""
        if self.kv_cache_size_tokens is not None:
            return self.kv_cache_size_tokens
        if self.num_blocks is not None and self.block_size is not None:
            return self.num_blocks * self.block_size
        return None


@dataclass(frozen=True, slots=True)
class ServingSample:
    """One reading. ``at``: seconds on the caller's clock (monotonic or epoch: one clock per window).

    ``kv_usage``           the pool's used fraction, 0..1 (vLLM ``kv_cache_usage_perc`` is a
                           fraction despite its name; SGLang ``token_usage``);
    ``running``/``waiting`` requests in the batch / queued (vLLM: waiting includes deferred);
    ``waiting_capacity``   vLLM ≥ 0.32: the waiting requests held back for want of capacity;
    ``preemptions_total``  vLLM: requests preempted (their KV freed, recomputed later);
    ``retractions_total``  SGLang: requests retracted from a full pool (0.5: a counter; 0.4: a
                           gauge holding the running total; logs: the sum of ``#retracted_reqs``);
    ``decode_ooms_total``  SGLang `Decode out of memory. Try to lower your batch size.` lines;
    ``length_refused_total`` requests refused or truncated for the context length (logs only);
    ``requests_total``     finished requests (vLLM ``request_success_total``; SGLang
                           ``num_requests_total``), for rates per 1k requests;
    ``ttft``/``queue_time`` cumulative latency histograms (seconds);
    ``queue_time_avg``     SGLang 0.4 ``avg_request_queue_latency`` (a gauge, no histogram);
    ``dialect``            which names the reading came in (``vllm``, ``sglang-0.5``, ``sglang-0.4``,
                           ``vllm-log``, ``sglang-log``): version differences, for the evidence."""

    engine: Engine
    at: float
    source: Source
    kv_usage: float | None = None
    running: int | None = None
    waiting: int | None = None
    waiting_capacity: int | None = None
    preemptions_total: float | None = None
    retractions_total: float | None = None
    decode_ooms_total: float | None = None
    length_refused_total: float | None = None
    requests_total: float | None = None
    ttft: Histogram | None = None
    queue_time: Histogram | None = None
    queue_time_avg: float | None = None
    cache: CacheInfo | None = None
    dialect: str = ""
