"""The fleet's rows: PromQL (one query per column per refresh, aggregated by instance or by GPU host,
never one query per host), the join of serving instances to their host's DCGM GPUs, and the typed
``FleetRow`` with its trouble reasons (rows in trouble sort first).

Metric names (README "The fleet"; docs/serving-metrics.md for the engines, dcgm-exporter's
``etc/default-counters.csv`` for DCGM):

- vLLM: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``
  (older ``vllm:gpu_cache_usage_perc``), ``vllm:num_preemptions_total``,
  ``vllm:time_to_first_token_seconds_bucket``; labels ``model_name``, ``engine`` (one per DP engine).
- SGLang (``--enable-metrics``): ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:token_usage``, ``sglang:num_retracted_requests_total`` (0.5) / ``sglang:total_retracted_reqs``
  (0.4, a gauge holding the total), ``sglang:time_to_first_token_seconds_bucket``; labels
  ``model_name``, ``tp_rank``, ``dp_rank`` (the TP ranks of one DP rank report the same batch: max
  within a DP rank, sum over them).
- the KV pool: ``vllm:cache_config_info`` (labels ``num_gpu_blocks``, ``block_size``),
  ``sglang:max_total_num_tokens``.
- every scrape target: ``up``, ``process_start_time_seconds`` (restarts: ``changes(...[1h])``).
- DCGM: ``DCGM_FI_DEV_FB_USED``, ``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_GPU_UTIL`` (%),
  ``DCGM_FI_DEV_GPU_TEMP`` (C), ``DCGM_FI_DEV_XID_ERRORS`` (the last XID seen; 0 none); label ``Hostname``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kvtui.fleet.client import PromClient, Sample

Engine = Literal["vllm", "sglang"]

WINDOW = "5m"  # rates: preemptions per minute, TTFT p95
KV_FULL = 0.95  # KV usage at or above this with a queue is trouble
RESTARTING = 2  # this many process restarts in the last hour is trouble ("restarting")
STARTING_S = 120.0  # an instance up for less than this is "starting"

_KV = "vllm:kv_cache_usage_perc|vllm:gpu_cache_usage_perc|sglang:token_usage"
_RUNNING = "vllm:num_requests_running|sglang:num_running_reqs"
_QUEUED = "vllm:num_requests_waiting|sglang:num_queue_reqs"
_PREEMPT = "vllm:num_preemptions_total|sglang:num_retracted_requests_total|sglang:total_retracted_reqs"
_TTFT = "vllm:time_to_first_token_seconds_bucket|sglang:time_to_first_token_seconds_bucket"
_BY = "job, instance"


def _over(fn: str, names: str, window: str) -> str:
    """``fn(a[w]) or fn(b[w]) …``: a range function per name, since ``fn({__name__=~"a|b"}[w])`` drops
    the names and fails when two of them share their other labels."""
    return " or ".join(f"{fn}({n}[{window}])" for n in names.split("|"))


def _per_dp(names: str) -> str:
    """Requests of one instance: the largest series within a DP rank / vLLM engine, summed over them."""
    return f'sum by ({_BY}) (max by ({_BY}, dp_rank, engine) ({{__name__=~"{names}"}}))'


# One PromQL expression per column; each answers for the whole fleet at once.
QUERIES: dict[str, str] = {
    "up": "up",
    "vllm": 'count by (job, instance, model_name) (last_over_time(vllm:num_requests_running[1h]))',
    "sglang": 'count by (job, instance, model_name) (last_over_time(sglang:num_running_reqs[1h]))',
    "version": 'count by (job, instance, version) ({__name__=~"(vllm|sglang):.*info", version!=""})',
    "uptime": "time() - process_start_time_seconds",
    "restarts": "changes(process_start_time_seconds[1h])",
    "kv": f'max by ({_BY}) ({{__name__=~"{_KV}"}})',
    "kv_peak": f'max by ({_BY}) ({_over("max_over_time", _KV, "1h")})',
    # the pool in tokens: vLLM says it in labels (per engine: num_gpu_blocks x block_size, read here),
    # SGLang as a gauge per scheduler (the TP ranks of one DP rank hold the same pool)
    "kv_pool": f"count by ({_BY}, engine, num_gpu_blocks, block_size) (vllm:cache_config_info) or "
               f"sum by ({_BY}) (max by ({_BY}, dp_rank) (sglang:max_total_num_tokens))",
    "running": _per_dp(_RUNNING),
    "queued": _per_dp(_QUEUED),
    "preempt": f'60 * sum by ({_BY}) (max by ({_BY}, dp_rank, engine) ({_over("rate", _PREEMPT, WINDOW)}))',
    "ttft_p95": f'histogram_quantile(0.95, sum by ({_BY}, le) ({_over("rate", _TTFT, WINDOW)}))',
    "gpus": "count by (Hostname, instance) (DCGM_FI_DEV_FB_USED)",
    "mem_used": "max by (Hostname, instance) (DCGM_FI_DEV_FB_USED)",
    "mem_total": "max by (Hostname, instance) (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
    "util": "avg by (Hostname, instance) (DCGM_FI_DEV_GPU_UTIL)",
    "temp": "max by (Hostname, instance) (DCGM_FI_DEV_GPU_TEMP)",
    # only the hosts with an XID in the hour: an answer of a few rows, not one per host (bench 10)
    "xid": "max by (Hostname, instance) (max_over_time(DCGM_FI_DEV_XID_ERRORS[1h])) > 0",
}

SUMMARY_QUERIES: dict[str, str] = {
    "dcgm_gpus": "count(DCGM_FI_DEV_FB_USED)",
    "vllm": "count(count by (job, instance) (last_over_time(vllm:num_requests_running[1h])))",
    "sglang": "count(count by (job, instance) (last_over_time(sglang:num_running_reqs[1h])))",
    "targets": "count(up)",
}


@dataclass(frozen=True)
class FleetRow:
    """One serving instance (a scrape target with engine metrics in the last hour) and its host's GPUs.
    ``None``: not known (the metric is absent, or NaN: e.g. TTFT with no request in the window)."""

    host: str
    instance: str
    job: str
    engine: Engine
    version: str
    model: str
    state: str  # "up", "down", "restarted N× in 1 h", "starting"
    up: bool
    restarts_1h: int
    gpus: int | None = None
    mem_used_max_mib: float | None = None
    mem_total_mib: float | None = None
    util_pct: float | None = None
    temp_max_c: float | None = None
    xid: int | None = None
    kv_usage: float | None = None
    kv_peak_1h: float | None = None
    kv_pool_tokens: int | None = None  # the KV pool (every DP engine's), as the engine reports it
    running: float | None = None
    queued: float | None = None
    preemptions_per_min: float | None = None
    ttft_p95_s: float | None = None
    uptime_s: float | None = None
    trouble: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def host_of(instance: str) -> str:
    """``10.0.0.5:8000`` -> ``10.0.0.5``; ``[fe80::1]:8000`` -> ``fe80::1``; ``node-a`` -> ``node-a``."""
    m = re.match(r"^\[([^\]]+)\](?::\d+)?$", instance)
    if m:
        return m.group(1)
    if instance.count(":") == 1:
        return instance.rsplit(":", 1)[0]
    return instance


def _num(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) or math.isinf(v) else v


def fetch_columns(client: PromClient, queries: dict[str, str] | None = None,
                  workers: int = 6) -> dict[str, list[Sample]]:
    """Run every column's query (concurrently, a few at a time); any failure raises ``PromError``."""
    qs = QUERIES if queries is None else queries
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvtui-prom")
    try:
        futures = {name: pool.submit(client.query, expr) for name, expr in qs.items()}
        return {name: fut.result() for name, fut in futures.items()}
    finally:  # on the first failure: do not wait for the rest (an unreachable server times out each)
        pool.shutdown(wait=False, cancel_futures=True)


def _pools(samples: list[Sample]) -> dict[tuple[str, str], int]:
    """The ``kv_pool`` column: vLLM's ``cache_config_info`` labels (blocks x block size, summed over
    its engines) or SGLang's summed ``max_total_num_tokens``; a label that is not a number is skipped."""
    out: dict[tuple[str, str], int] = {}
    for s in samples:
        key = (s.labels.get("job", ""), s.labels.get("instance", ""))
        if "num_gpu_blocks" in s.labels or "block_size" in s.labels:
            try:
                tokens = int(s.labels.get("num_gpu_blocks", "")) * int(s.labels.get("block_size", ""))
            except ValueError:
                continue
        else:
            value = _num(s.value)
            if value is None:
                continue
            tokens = int(value)
        out[key] = out.get(key, 0) + tokens
    return out


def trouble_of(row: FleetRow) -> list[str]:
    out: list[str] = []
    if not row.up:
        out.append("down")
    if row.restarts_1h >= RESTARTING:
        out.append(f"restarting ({row.restarts_1h}× in 1 h)")
    if row.xid:
        out.append(f"XID {row.xid}")
    if row.kv_usage is not None and row.kv_usage >= KV_FULL and (row.queued or 0) > 0:
        out.append(f"KV {row.kv_usage * 100:.0f}% with {row.queued:g} queued")
    if row.preemptions_per_min is not None and row.preemptions_per_min > 0:
        word = "retracting" if row.engine == "sglang" else "preempting"
        out.append(f"{word} {row.preemptions_per_min:.1f}/min")
    return out


def build_rows(cols: dict[str, list[Sample]]) -> list[FleetRow]:
    """Join the columns into one row per serving instance, trouble first then by host."""

    def by_target(name: str) -> dict[tuple[str, str], float]:
        return {(s.labels.get("job", ""), s.labels.get("instance", "")): s.value for s in cols.get(name, [])}

    engines: dict[tuple[str, str], tuple[Engine, str]] = {}
    engine_names: tuple[Engine, ...] = ("sglang", "vllm")
    for eng in engine_names:
        for s in cols.get(eng, []):
            key = (s.labels.get("job", ""), s.labels.get("instance", ""))
            engines[key] = (eng, s.labels.get("model_name", "") or "?")
    versions: dict[tuple[str, str], str] = {}
    for s in cols.get("version", []):
        versions[(s.labels.get("job", ""), s.labels.get("instance", ""))] = s.labels.get("version", "")
    up, uptime, restarts = by_target("up"), by_target("uptime"), by_target("restarts")
    kv, kv_peak, running, queued = by_target("kv"), by_target("kv_peak"), by_target("running"), by_target("queued")
    preempt, ttft = by_target("preempt"), by_target("ttft_p95")
    pools = _pools(cols.get("kv_pool", []))

    gpu: dict[str, dict[str, float]] = {}  # host (Hostname, and the exporter's address) -> column -> value
    for col in ("gpus", "mem_used", "mem_total", "util", "temp", "xid"):
        for s in cols.get(col, []):
            for h in {s.labels.get("Hostname", ""), host_of(s.labels.get("instance", ""))} - {""}:
                gpu.setdefault(h, {})[col] = s.value

    rows: list[FleetRow] = []
    for key, (engine, model) in engines.items():
        job, inst = key
        host = host_of(inst)
        is_up = up.get(key, 0.0) == 1.0
        n_restarts = int(_num(restarts.get(key)) or 0)
        up_s = _num(uptime.get(key)) if is_up else None
        if not is_up:
            state = "down"
        elif n_restarts:
            state = f"restarted {n_restarts}× in 1 h"
        elif up_s is not None and up_s < STARTING_S:
            state = "starting"
        else:
            state = "up"
        g = gpu.get(host, {})
        gcount = _num(g.get("gpus"))
        xid = _num(g.get("xid"))
        row = FleetRow(
            host=host, instance=inst, job=job, engine=engine, version=versions.get(key) or "unknown", model=model,
            state=state, up=is_up, restarts_1h=n_restarts,
            gpus=int(gcount) if gcount is not None else None,
            mem_used_max_mib=_num(g.get("mem_used")), mem_total_mib=_num(g.get("mem_total")),
            util_pct=_num(g.get("util")), temp_max_c=_num(g.get("temp")), xid=int(xid) if xid else None,
            kv_usage=_num(kv.get(key)) if is_up else None, kv_peak_1h=_num(kv_peak.get(key)),
            kv_pool_tokens=pools.get(key),
            running=_num(running.get(key)) if is_up else None, queued=_num(queued.get(key)) if is_up else None,
            preemptions_per_min=_num(preempt.get(key)) if is_up else None,
            ttft_p95_s=_num(ttft.get(key)), uptime_s=up_s,
        )
        rows.append(FleetRow(**{**row.__dict__, "trouble": trouble_of(row)}))
    return sort_rows(rows)


def _text_key(attr: str) -> Callable[[FleetRow], Any]:
    return lambda r: str(getattr(r, attr)).lower()


def _num_key(attr: str) -> Callable[[FleetRow], Any]:
    # larger first; unknown last
    return lambda r: (getattr(r, attr) is None, -(getattr(r, attr) or 0.0))


SORT_KEYS: dict[str, Callable[[FleetRow], Any]] = {
    "host": lambda r: (r.host, r.instance),
    "engine": _text_key("engine"),
    "version": _text_key("version"),
    "model": _text_key("model"),
    "state": _text_key("state"),
    "gpus": _num_key("gpus"),
    "mem": _num_key("mem_used_max_mib"),
    "util": _num_key("util_pct"),
    "temp": _num_key("temp_max_c"),
    "kv": _num_key("kv_usage"),
    "kv-peak": _num_key("kv_peak_1h"),
    "running": _num_key("running"),
    "queued": _num_key("queued"),
    "preemptions": _num_key("preemptions_per_min"),
    "ttft": _num_key("ttft_p95_s"),
    "uptime": _num_key("uptime_s"),
}


SEVERITY = ("down", "restarting", "XID", "KV", "preempting", "retracting")  # trouble_of's order


def severity(row: FleetRow) -> int:
    """The rank of the row's worst reason (0: down); ``len(SEVERITY)`` when it is not in trouble."""
    ranks = [i for reason in row.trouble for i, word in enumerate(SEVERITY) if reason.startswith(word)]
    return min(ranks, default=len(SEVERITY))


def sort_rows(rows: Iterable[FleetRow], by: str = "host") -> list[FleetRow]:
    """Rows in trouble first (the worst reason first: down, restarting, XID, KV full, preempting; then
    the most reasons), then by ``by`` (text ascending, numbers largest first), then by host."""
    key = SORT_KEYS[by]
    ordered = sorted(rows, key=lambda r: (r.host, r.instance))
    return sorted(ordered, key=lambda r: (severity(r), -len(r.trouble), key(r)))


def filter_rows(rows: Iterable[FleetRow], text: str) -> list[FleetRow]:
    """Rows where ``text`` (case-insensitive) appears in host, instance, engine, version, model, state
    or a trouble reason."""
    t = text.lower()
    return [r for r in rows if any(t in str(v).lower() for v in
                                   (r.host, r.instance, r.engine, r.version, r.model, r.state, *r.trouble))]


def fetch_fleet(client: PromClient) -> list[FleetRow]:
    """One refresh: every column's query, joined. Raises ``PromError`` when any could not be read."""
    return build_rows(fetch_columns(client))


# Columns that change slowly (which instances serve which model, versions, restarts and XIDs in the
# hour, each host's GPU count and total memory, the KV pool): a screen refreshing every few seconds asks them every
# SLOW_EVERY_S only. Measured (bench 10, 1,000 instances x 8 GPUs): ~40 % of Prometheus's CPU per
# refresh, mostly the GPU count and total memory (two of the six DCGM columns over 8,000 series).
SLOW_COLUMNS = frozenset({"vllm", "sglang", "version", "restarts", "gpus", "mem_total", "xid", "kv_pool"})
SLOW_EVERY_S = 60.0


class FleetPoller:
    """Refreshes for a screen that re-reads the fleet every few seconds: every column on the first
    call and when the slow ones are ``slow_every_s`` old, else only the others (``up``, KV, requests,
    rates, GPU memory used / util / temperature, uptime) joined with the slow columns kept from
    before. So a new instance, a restart counted in the hour or an XID shows within ``slow_every_s``
    (a restart's new uptime and ``up`` at once). One call at a time (the console runs one read at a
    time); the client is given per call (a rotated token file is re-read)."""

    def __init__(self, slow_every_s: float = SLOW_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.slow_every_s = slow_every_s
        self.clock = clock
        self._slow: dict[str, list[Sample]] | None = None
        self._slow_at = 0.0

    def columns(self, client: PromClient) -> dict[str, list[Sample]]:
        now = self.clock()
        if self._slow is None or now - self._slow_at >= self.slow_every_s:
            cols = fetch_columns(client)
            self._slow = {k: v for k, v in cols.items() if k in SLOW_COLUMNS}
            self._slow_at = now
            return cols
        fast = fetch_columns(client, {k: v for k, v in QUERIES.items() if k not in SLOW_COLUMNS})
        return {**self._slow, **fast}

    def fetch(self, client: PromClient) -> list[FleetRow]:
        """One refresh (``PromError`` when a query fails; the slow columns kept are not dropped then)."""
        return build_rows(self.columns(client))


@dataclass(frozen=True)
class FleetSummary:
    dcgm_gpus: int
    vllm: int
    sglang: int
    targets: int
    seconds: float


def fetch_summary(client: PromClient) -> FleetSummary:
    """What ``kvtui hosts --check`` says of the Prometheus: DCGM GPUs, vLLM and SGLang instances."""
    t0 = time.monotonic()
    cols = fetch_columns(client, SUMMARY_QUERIES)

    def one(name: str) -> int:
        return int(cols[name][0].value) if cols[name] else 0

    return FleetSummary(one("dcgm_gpus"), one("vllm"), one("sglang"), one("targets"), time.monotonic() - t0)


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172800:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


def row_cells(r: FleetRow) -> list[str]:
    """One row's cells as ``kvtui fleet`` and the console's fleet table both show them."""
    mem = "-"
    if r.mem_used_max_mib is not None and r.mem_total_mib is not None:
        mem = f"{r.mem_used_max_mib / 1024:.0f}/{r.mem_total_mib / 1024:.0f}"
    kv = "-"
    if r.kv_usage is not None or r.kv_peak_1h is not None:
        now = _f(None if r.kv_usage is None else r.kv_usage * 100, ".0f")
        kv = f"{now}/{_f(None if r.kv_peak_1h is None else r.kv_peak_1h * 100, '.0f')}%"
    rq = "-" if r.running is None and r.queued is None else f"{_f(r.running, '.0f')}/{_f(r.queued, '.0f')}"
    ttft = "-"
    if r.ttft_p95_s is not None:
        ttft = f"{r.ttft_p95_s * 1000:.0f}ms" if r.ttft_p95_s < 1 else f"{r.ttft_p95_s:.1f}s"
    engine = r.engine if r.version == "unknown" else f"{r.engine} {r.version}"
    return [r.host, engine, r.model.rsplit("/", 1)[-1], _f(None if r.gpus is None else float(r.gpus), ".0f"), mem,
            _f(r.util_pct, ".0f"), _f(r.temp_max_c, ".0f"), kv, rq, _f(r.preemptions_per_min, ".1f"), ttft,
            _duration(r.uptime_s)]
