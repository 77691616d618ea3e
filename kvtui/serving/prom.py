"""``/metrics`` text → ``ServingSample``: vLLM's ``vllm:*`` and SGLang's ``sglang:*`` names, read
with ``prometheus_client``'s maintained text-format parser. Pure core (the caller fetches the text).

Series are combined per engine: vLLM labels each data-parallel engine (``engine="0"``, …), SGLang
each scheduler (``tp_rank``, ``dp_rank``; the TP ranks of one DP rank report the same batch when
``--enable-metrics-for-all-schedulers``). Counts are summed over the engines / DP ranks (the
largest series within one), the KV usage is the fullest pool's. The names, by version:
docs/serving-metrics.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from kvtui.engines.events import Engine
from kvtui.serving.sample import CacheInfo, Histogram, ServingSample

# the most text read from one scrape: a vLLM server with LoRA or many engines prints ~100 KiB
MAX_METRICS_CHARS = 4 * 1024 * 1024
_PREFIXES = ("vllm:", "sglang:")


class MetricsError(ValueError):
    """The text is not Prometheus' text format (or names neither engine)."""


Series = list[tuple[dict[str, str], float]]


@dataclass(slots=True)
class _Scrape:
    """The engine's samples by sample name (``…_total``, ``…_bucket`` as exposed)."""

    by_name: dict[str, Series] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.by_name

    def series(self, name: str, **match: str) -> Series:
        got = self.by_name.get(name, [])
        if not match:
            return got
        return [(lb, v) for lb, v in got if all(lb.get(k) == want for k, want in match.items())]

    def total(self, name: str, group: str, **match: str) -> float | None:
        """Summed over the groups (``engine`` / ``dp_rank``), the largest within one; None when absent."""
        s = self.series(name, **match)
        if not s:
            return None
        best: dict[str, float] = {}
        for lb, v in s:
            if math.isnan(v):
                continue
            g = lb.get(group, "")
            best[g] = max(best.get(g, v), v)
        return sum(best.values()) if best else None

    def peak(self, name: str) -> float | None:
        vals = [v for _, v in self.series(name) if not math.isnan(v)]
        return max(vals) if vals else None

    def histogram(self, base: str, group: str) -> Histogram | None:
        """``base_bucket`` / ``_count`` / ``_sum`` → one histogram, the groups added."""
        per: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
        for lb, v in self.series(base + "_bucket"):
            le = lb.get("le")
            if le is None:
                continue
            key = tuple(sorted((k, x) for k, x in lb.items() if k != "le"))
            per.setdefault(key, {})[float(le)] = v
        if not per:
            return None
        counts = {tuple(sorted(lb.items())): v for lb, v in self.series(base + "_count")}
        sums = {tuple(sorted(lb.items())): v for lb, v in self.series(base + "_sum")}
        chosen: dict[str, Histogram] = {}
        for key, bk in per.items():
            buckets = tuple(sorted(bk.items()))
            if not math.isinf(buckets[-1][0]):
                continue  # no +Inf bucket: not a histogram as exposed
            h = Histogram(buckets, counts.get(key, buckets[-1][1]), sums.get(key, 0.0))
            g = dict(key).get(group, "")
            if g not in chosen or h.count > chosen[g].count:
                chosen[g] = h
        out: Histogram | None = None
        for h in chosen.values():
            out = h if out is None else out.plus(h)
        return out


def _read(text: str) -> _Scrape:
    if len(text) > MAX_METRICS_CHARS:
        cut = text.rfind("\n", 0, MAX_METRICS_CHARS)
        text = text[: cut + 1 if cut >= 0 else MAX_METRICS_CHARS]
    scrape = _Scrape()
    try:
        for family in text_string_to_metric_families(text):
            if not family.name.startswith(_PREFIXES):
                continue
            for s in family.samples:
                scrape.by_name.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    except (ValueError, IndexError, KeyError, TypeError) as e:  # the parser's errors on a malformed line
        raise MetricsError(f"not Prometheus text: {e}") from e
    return scrape


def _int(v: float | None) -> int | None:
    return int(v) if v is not None and math.isfinite(v) else None


def _label_num(labels: Mapping[str, str], key: str) -> float | None:
    raw = labels.get(key)
    if raw is None:
        return None
    try:
        v = float(raw)
    except ValueError:  # `None` (not known yet)
        return None
    return v if math.isfinite(v) else None


def engine_of(names: Iterable[str]) -> Engine | None:
    """Which engine's names a scrape holds."""
    for n in names:
        if n.startswith("vllm:"):
            return Engine.VLLM
        if n.startswith("sglang:"):
            return Engine.SGLANG
    return None


def parse_metrics(text: str, at: float) -> ServingSample | None:
    """A ``/metrics`` scrape read at ``at`` → a sample; None when it names neither engine (metrics
    of a server without ``vllm:`` / ``sglang:`` series: SGLang without ``--enable-metrics``
    exposes nothing of its own). Raises ``MetricsError`` on text that is not the text format."""
    scrape = _read(text)
    engine = engine_of(scrape.by_name)
    if engine is Engine.VLLM:
        return _vllm(scrape, at)
    if engine is Engine.SGLANG:
        return _sglang(scrape, at)
    return None


def _vllm(m: _Scrape, at: float) -> ServingSample:
    g = "engine"
    usage = m.peak("vllm:kv_cache_usage_perc")
    if usage is None:  # the name before vLLM 0.10 (V0 and early V1); not checked against a wheel here
        usage = m.peak("vllm:gpu_cache_usage_perc")
    cache = None
    info = m.series("vllm:cache_config_info")
    if info:
        lb = info[0][0]
        cache = CacheInfo(
            num_blocks=_int(_label_num(lb, "num_gpu_blocks")),
            block_size=_int(_label_num(lb, "block_size")),
            kv_cache_size_tokens=_int(_label_num(lb, "kv_cache_size_tokens")),
            max_concurrency=_label_num(lb, "kv_cache_max_concurrency"),
        )
    return ServingSample(
        engine=Engine.VLLM,
        at=at,
        source="metrics",
        kv_usage=usage,
        running=_int(m.total("vllm:num_requests_running", g)),
        waiting=_int(m.total("vllm:num_requests_waiting", g)),
        waiting_capacity=_int(m.total("vllm:num_requests_waiting_by_reason", g, reason="capacity")),
        preemptions_total=m.total("vllm:num_preemptions_total", g),
        requests_total=_request_success(m),
        ttft=m.histogram("vllm:time_to_first_token_seconds", g),
        queue_time=m.histogram("vllm:request_queue_time_seconds", g),
        cache=cache,
        dialect="vllm",
    )


def _request_success(m: _Scrape) -> float | None:
    """``vllm:request_success_total`` over its ``finished_reason`` series and engines."""
    s = m.series("vllm:request_success_total")
    return sum(v for _, v in s if not math.isnan(v)) if s else None


def _sglang(m: _Scrape, at: float) -> ServingSample:
    g = "dp_rank"
    if m.has("sglang:num_retracted_requests_total"):  # 0.5: a counter
        retracted = m.total("sglang:num_retracted_requests_total", g)
        dialect = "sglang-0.5"
    elif m.has("sglang:total_retracted_reqs"):  # 0.4: a gauge the scheduler sets to its running total
        retracted = m.total("sglang:total_retracted_reqs", g)
        dialect = "sglang-0.4"
    else:
        retracted, dialect = None, "sglang"
    pool = m.total("sglang:max_total_num_tokens", g)  # 0.5+
    if dialect == "sglang" and pool is not None:
        dialect = "sglang-0.5"
    return ServingSample(
        engine=Engine.SGLANG,
        at=at,
        source="metrics",
        kv_usage=m.peak("sglang:token_usage"),
        running=_int(m.total("sglang:num_running_reqs", g)),
        waiting=_int(m.total("sglang:num_queue_reqs", g)),
        retractions_total=retracted,
        requests_total=m.total("sglang:num_requests_total", g),
        ttft=m.histogram("sglang:time_to_first_token_seconds", g),
        queue_time=m.histogram("sglang:queue_time_seconds", g),
        queue_time_avg=m.peak("sglang:avg_request_queue_latency"),
        cache=CacheInfo(kv_cache_size_tokens=_int(pool)) if pool is not None else None,
        dialect=dialect,
    )
