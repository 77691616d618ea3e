"""kvtui.serving (issue 24, the core): /metrics and log lines → samples, the window, the diagnosis.

Fixtures (tests/fixtures/serving): ``*.metrics`` written by make_fixtures.py with the engines' own
metric definitions (SGLang 0.5.10 / 0.4.10, vLLM 0.32 with two DP engines), the real vLLM CPU
captures ``vllm-cpu-0.32-burst.*`` (tests/engine/capture_serving.py), and SGLang log lines written
from the wheels' format strings.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvtui.engines.events import Engine, KvPressure, PressureKind, Serving
from kvtui.engines.parse import parse_bytes
from kvtui.serving.diagnose import Limit, diagnose, pool_knobs
from kvtui.serving.logs import LogFold, samples_from_lines
from kvtui.serving.prom import MetricsError, parse_metrics
from kvtui.serving.sample import CacheInfo, Histogram, ServingSample
from kvtui.serving.window import ServingWindow

FIX = Path(__file__).parent / "fixtures" / "serving"
INF = math.inf


def _text(name: str) -> str:
    return (FIX / name).read_text()


# ---- /metrics -------------------------------------------------------------------------------
def test_vllm_metrics_two_engines_are_added_up() -> None:
    s = parse_metrics(_text("vllm-0.32-dp2.metrics"), at=100.0)
    assert s is not None
    assert s.engine is Engine.VLLM
    assert s.source == "metrics"
    assert s.dialect == "vllm"
    assert s.kv_usage == pytest.approx(1.0)  # the fuller of the two pools
    assert (s.running, s.waiting, s.waiting_capacity) == (32, 51, 49)
    assert s.preemptions_total == 137
    assert s.requests_total == 1000  # both finished_reason series, both engines
    assert s.ttft is not None
    assert s.ttft.count == 200
    assert s.queue_time is not None
    assert s.queue_time.count == 200
    assert s.cache == CacheInfo(num_blocks=12000, block_size=16, kv_cache_size_tokens=192000, max_concurrency=1.46)
    assert s.cache.pool_tokens == 192000


def test_sglang_05_metrics() -> None:
    s = parse_metrics(_text("sglang-0.5.10.metrics"), at=5.0)
    assert s is not None
    assert s.engine is Engine.SGLANG
    assert s.dialect == "sglang-0.5"
    assert s.kv_usage == pytest.approx(0.99)
    assert (s.running, s.waiting) == (78, 39)  # two DP ranks
    assert s.retractions_total == 137
    assert s.preemptions_total is None
    assert s.requests_total == 100
    assert s.cache is not None
    assert s.cache.pool_tokens == 2 * 192_406
    assert s.ttft is not None
    assert s.ttft.count == 100
    assert s.queue_time is not None
    assert s.queue_time.count == 7


def test_sglang_04_metrics_total_is_a_gauge_and_queue_time_an_average() -> None:
    s = parse_metrics(_text("sglang-0.4.10.metrics"), at=5.0)
    assert s is not None
    assert s.dialect == "sglang-0.4"
    assert s.retractions_total == 137
    assert s.queue_time is None
    assert s.queue_time_avg == pytest.approx(2.5)
    assert s.cache is None
    assert (s.running, s.waiting, s.kv_usage) == (64, 9, pytest.approx(0.97))


def test_metrics_without_engine_names_and_garbage() -> None:
    plain = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"
    assert parse_metrics(plain, at=0.0) is None  # SGLang without --enable-metrics: nothing of its own
    with pytest.raises(MetricsError):
        parse_metrics('vllm:kv_cache_usage_perc{engine="0" 0.5\n', at=0.0)


def test_metrics_text_is_bounded() -> None:
    from kvtui.serving import prom

    big = _text("vllm-0.32-dp2.metrics") + "# padding\n" * (prom.MAX_METRICS_CHARS // 10)
    s = parse_metrics(big, at=0.0)
    assert s is not None
    assert s.preemptions_total == 137


# ---- histograms -----------------------------------------------------------------------------
def _h(counts: list[float], bounds: tuple[float, ...] = (0.1, 0.5, 1.0, INF), total: float = 0.0) -> Histogram:
    return Histogram(tuple(zip(bounds, counts, strict=True)), counts[-1], total)


def test_histogram_quantiles_interpolate_like_prometheus() -> None:
    h = _h([50, 90, 100, 100])
    assert h.quantile(0.5) == pytest.approx(0.1)
    assert h.quantile(0.7) == pytest.approx(0.1 + 0.4 * (20 / 40))
    assert h.quantile(0.95) == pytest.approx(0.5 + 0.5 * (5 / 10))
    assert _h([0, 0, 0, 10]).quantile(0.5) == pytest.approx(1.0)  # beyond the last bound: the last bound
    assert _h([0, 0, 0, 0]).quantile(0.5) is None


def test_histogram_since_is_the_bucket_delta_and_a_reset_restarts() -> None:
    old, new = _h([10, 10, 10, 10], total=0.5), _h([10, 10, 30, 30], total=20.5)
    d = new.since(old)
    assert d.count == 20
    assert d.buckets[2] == (1.0, 20)
    assert d.total == pytest.approx(20.0)
    assert d.quantile(0.5) == pytest.approx(0.75)
    restarted = _h([1, 1, 2, 2])
    assert restarted.since(new) is restarted


# ---- the window -----------------------------------------------------------------------------
def _s(at: float, *, usage: float | None = None, running: int | None = None, waiting: int | None = None,
       pre: float | None = None, ret: float | None = None, reqs: float | None = None,
       ttft: Histogram | None = None, engine: Engine = Engine.VLLM, refused: float | None = None) -> ServingSample:
    return ServingSample(engine=engine, at=at, source="metrics", kv_usage=usage, running=running, waiting=waiting,
                         preemptions_total=pre, retractions_total=ret, requests_total=reqs, ttft=ttft,
                         length_refused_total=refused)


def test_window_rates_peaks_and_bounds() -> None:
    w = ServingWindow(span_s=300.0, max_samples=50)
    for i in range(0, 601, 10):  # 10 min of samples: the window keeps the last 5
        w.add(_s(float(i), usage=min(1.0, i / 400), running=4, waiting=i // 100, pre=float(i // 10), reqs=float(i)))
    assert w.seconds == pytest.approx(300.0)
    assert len(w) == 31
    assert w.increase("preemptions") == pytest.approx(30.0)
    assert w.per_minute("preemptions") == pytest.approx(6.0)
    assert w.per_1k_requests("preemptions") == pytest.approx(100.0)
    assert w.peak_kv_usage() == pytest.approx(1.0)
    assert w.max_waiting() == 6
    assert w.increase("retractions") is None
    small = ServingWindow(span_s=1e9, max_samples=8)
    small.extend(_s(float(i)) for i in range(100))
    assert len(small) == 8


def test_window_counter_reset_counts_what_the_new_series_holds() -> None:
    w = ServingWindow()
    for at, pre in [(0, 100.0), (10, 120.0), (20, 3.0), (30, 10.0)]:  # the server restarted after 10 s
        w.add(_s(float(at), pre=pre))
    assert w.increase("preemptions") == pytest.approx(20 + 3 + 7)


def test_window_skips_samples_without_the_counter_and_starts_over_when_time_goes_back() -> None:
    w = ServingWindow()
    w.extend([_s(0.0, pre=1.0), _s(5.0), _s(10.0, pre=4.0)])
    assert w.increase("preemptions") == pytest.approx(3.0)
    w.add(_s(1.0, pre=50.0))  # a replay from the start
    assert len(w) == 1
    assert w.increase("preemptions") == 0.0


def test_window_ttft_p95_from_bucket_deltas() -> None:
    w = ServingWindow()
    w.add(_s(0.0, ttft=_h([1000, 1000, 1000, 1000])))  # a fast past, before the window's requests
    w.add(_s(30.0, ttft=_h([1000, 1000, 1010, 1010])))
    w.add(_s(60.0, ttft=_h([1000, 1000, 1020, 1020])))
    assert w.ttft(0.5) == pytest.approx(0.75)
    assert w.ttft(0.95) == pytest.approx(0.975)
    one = ServingWindow()
    one.add(_s(0.0, ttft=_h([1, 1, 1, 1])))
    assert one.ttft(0.95) is None  # one scrape: no observations within a window


def test_window_rejects_a_bad_shape() -> None:
    with pytest.raises(ValueError, match="positive span"):
        ServingWindow(span_s=0)


# ---- the log fallback -----------------------------------------------------------------------
SGLANG_LOG = b"""\
[2026-12-07 10:00:00 TP0] Prefill batch, #new-seq: 3, #new-token: 4096, #cached-token: 0, token usage: 0.90, \
#running-req: 30, #queue-req: 12, cuda graph: False, input throughput (token/s): 8000.12
[2026-12-07 10:00:10 TP0] Decode batch, #running-req: 32, #token: 190000, token usage: 0.99, cuda graph: True, \
gen throughput (token/s): 1500.50, #queue-req: 14
[2026-12-07 10:00:11 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 1536, \
#new_token_ratio: 0.7000 -> 0.5500
[2026-12-07 10:00:40 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 2048, \
#new_token_ratio: 0.5500 -> 0.4000
[2026-12-07 10:01:10 TP0] Decode batch, #running-req: 29, #token: 191000, token usage: 1.00, cuda graph: True, \
gen throughput (token/s): 1400.00, #queue-req: 17
"""
SGLANG_03_LOG = b"""\
[2026-12-07 10:00:00 TP0] Decode batch. #running-req: 12, #token: 9000, token usage: 0.98, gen throughput (token/s): \
300.00, #queue-req: 4
[2026-12-07 10:00:05 TP0] Decode out of memory happened. #retracted_reqs: 4, #new_token_ratio: 0.4000 -> 0.3000
"""


def test_sglang_retraction_lines_are_events() -> None:
    lines = list(parse_bytes(SGLANG_LOG + SGLANG_03_LOG, Engine.SGLANG))
    pressure = [ev for ln in lines for ev in ln.events if isinstance(ev, KvPressure)]
    assert pressure == [
        KvPressure(PressureKind.RETRACTED, 2, "new_token_ratio 0.7000 -> 0.5500"),
        KvPressure(PressureKind.RETRACTED, 3, "new_token_ratio 0.5500 -> 0.4000"),
        KvPressure(PressureKind.RETRACTED, 4, "new_token_ratio 0.4000 -> 0.3000"),
    ]


def test_sglang_decode_oom_and_length_refusal_are_events() -> None:
    log = (b"[2026-12-07 10:00:00 TP0] Decode out of memory. Try to lower your batch size.\n"
           b"[2026-12-07 10:00:01] The input (2100 tokens) is longer than the model's context length (2048 tokens).\n"
           b"[2026-12-07 10:00:02] Requested token count (900 input + 1500 new) exceeds the model's context length "
           b"(2048 tokens). Truncating max_new_tokens.\n")
    kinds = [ev.kind for ln in parse_bytes(log, Engine.SGLANG) for ev in ln.events if isinstance(ev, KvPressure)]
    assert kinds == [PressureKind.DECODE_OOM, PressureKind.LENGTH_REFUSED, PressureKind.LENGTH_REFUSED]


def test_vllm_stats_line_on_the_cpu_build_and_with_preemptions() -> None:
    log = (b"(APIServer pid=1) INFO 12-07 10:00:00 [loggers.py:271] Engine 000: Avg prompt throughput: 73.6 tokens/s, "
           b"Avg generation throughput: 1628.0 tokens/s, Running: 4 reqs, Waiting: 22 reqs, CPU KV cache usage: "
           b"100.0%, Prefix cache hit rate: 51.6%\n"
           b"(APIServer pid=1) INFO 12-07 10:00:10 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
           b"Avg generation throughput: 900.0 tokens/s, Running: 16 reqs, Waiting: 3 reqs, Preemptions: 5, "
           b"GPU KV cache usage: 97.5%\n")
    evs = [ln.events for ln in parse_bytes(log, Engine.VLLM)]
    assert evs[0] == (Serving(token_usage=1.0, running_reqs=4, queue_reqs=22, gen_throughput=1628.0),)
    assert evs[1] == (Serving(token_usage=0.975, running_reqs=16, queue_reqs=3, gen_throughput=900.0),
                      KvPressure(PressureKind.PREEMPTED, 5))


def test_log_fold_makes_cumulative_samples() -> None:
    samples = samples_from_lines(parse_bytes(SGLANG_LOG, Engine.SGLANG), Engine.SGLANG)
    assert [s.retractions_total for s in samples] == [0, 0, 2, 5, 5]
    assert [s.waiting for s in samples] == [12, 14, 14, 14, 17]
    assert samples[-1].kv_usage == pytest.approx(1.0)
    assert samples[-1].dialect == "sglang-log"
    assert samples[-1].at - samples[0].at == pytest.approx(70.0)
    fold = LogFold(Engine.VLLM)
    assert fold.feed((), at=0.0) is None
    s = fold.feed((Serving(token_usage=0.5, running_reqs=1, queue_reqs=0),), at=1.0)
    assert s is not None
    assert s.preemptions_total is None


def test_log_samples_diagnose_pool_full_on_sglang() -> None:
    w = ServingWindow()
    w.extend(samples_from_lines(parse_bytes(SGLANG_LOG, Engine.SGLANG), Engine.SGLANG))
    d = diagnose(w)
    assert d.limit is Limit.POOL
    assert d.evidence.retractions == 5
    assert d.evidence.source == "log"
    assert d.line() == "pool full: 5 retractions in 70 s at 100 % usage, 17 waiting — raise --mem-fraction-static"


# ---- the diagnosis --------------------------------------------------------------------------
def _pressure_window(engine: Engine = Engine.VLLM) -> ServingWindow:
    w = ServingWindow()
    for i in range(31):  # 5 min, a scrape every 10 s, the pool full and 137 preemptions
        w.add(_s(10.0 * i, usage=1.0 if i > 2 else 0.6, running=4, waiting=22 if i > 2 else 0,
                 pre=float(min(137, i * 5)), ret=None, reqs=float(3 * i), engine=engine))
    return w


def test_diagnose_pool_full_vllm_gpu() -> None:
    d = diagnose(_pressure_window())
    assert d.limit is Limit.POOL
    assert d.also == ()
    assert d.line() == "pool full: 137 preemptions in 5 min at 100 % usage, 22 waiting — raise --gpu-memory-utilization"
    text = "\n".join(d.detail())
    assert "preemptions: 137 (27.4/min)" in text
    assert "knob: raise --gpu-memory-utilization" in text


def test_diagnose_pool_knob_per_engine_and_device() -> None:
    assert [k.name for k in diagnose(_pressure_window(), device="cpu").knobs] == [
        "VLLM_CPU_KVCACHE_SPACE", "--kv-cache-memory-bytes"]
    assert diagnose(_pressure_window(), device="cpu", flags={"kv-cache-memory-bytes"}).knobs[0].name == (
        "--kv-cache-memory-bytes")
    assert pool_knobs(Engine.VLLM, "gpu", {"kv-cache-memory-bytes"})[0].name == "--kv-cache-memory-bytes"
    assert pool_knobs(Engine.SGLANG)[0].name == "--mem-fraction-static"
    assert pool_knobs(Engine.SGLANG, flags={"max-total-tokens"})[0].name == "--max-total-tokens"


def test_diagnose_full_pool_without_preemptions_is_not_pool_full() -> None:
    w = ServingWindow()
    w.extend(_s(10.0 * i, usage=0.97, running=8, waiting=3, pre=5.0) for i in range(10))
    assert diagnose(w).limit is Limit.NONE  # full and busy, but nothing pushed out


def test_diagnose_preemptions_are_a_full_pool_whatever_usage_was_sampled() -> None:
    w = ServingWindow()  # samples seconds apart catch 84 % at most while 70 requests were preempted
    w.extend(_s(3.0 * i, usage=0.84 if i % 2 else 0.4, running=4, waiting=20, pre=float(10 * i)) for i in range(8))
    d = diagnose(w)
    assert d.limit is Limit.POOL
    assert d.line().startswith("pool full: 70 preemptions in 21 s at 84 % usage, 20 waiting")


def test_diagnose_running_cap() -> None:
    w = ServingWindow()
    w.extend(_s(10.0 * i, usage=0.35, running=16, waiting=40, pre=0.0) for i in range(10))
    d = diagnose(w, running_cap=16)
    assert d.limit is Limit.RUNNING_CAP
    assert d.knobs[0].name == "--max-num-seqs"
    assert d.line().startswith("running cap: 16 running (the cap) with 40 waiting in 90 s, KV usage only 35 %")
    assert diagnose(w).limit is Limit.NONE  # the cap unknown: not named
    assert diagnose(w, running_cap=32).limit is Limit.NONE
    sg = ServingWindow()
    sg.extend(_s(10.0 * i, usage=0.35, running=16, waiting=40, engine=Engine.SGLANG) for i in range(10))
    assert diagnose(sg, running_cap=16).knobs[0].name == "--max-running-requests"


def test_diagnose_context_length_and_several_limits() -> None:
    w = _pressure_window(Engine.SGLANG)
    w.add(_s(310.0, usage=1.0, waiting=22, pre=137.0, refused=0.0, engine=Engine.SGLANG))
    w.add(_s(320.0, usage=1.0, waiting=22, pre=137.0, refused=4.0, engine=Engine.SGLANG))
    d = diagnose(w)
    assert d.limit is Limit.POOL
    assert d.also == (Limit.CONTEXT_LENGTH,)
    only = ServingWindow()
    only.extend([_s(0.0, usage=0.2, refused=0.0), _s(60.0, usage=0.2, refused=3.0)])
    d2 = diagnose(only)
    assert d2.limit is Limit.CONTEXT_LENGTH
    assert d2.knobs[0].name == "--max-model-len"
    assert d2.line() == "context length: 3 requests refused or truncated for length in 60 s — raise --max-model-len"


def test_diagnose_none_and_empty() -> None:
    w = ServingWindow()
    w.extend(_s(10.0 * i, usage=0.4, running=3, waiting=0, pre=0.0) for i in range(13))
    d = diagnose(w)
    assert d.limit is Limit.NONE
    assert d.knobs == ()
    assert d.line() == "no KV pressure in 2 min: peak usage 40 %, 0 preemptions"
    e = diagnose(ServingWindow())
    assert e.limit is Limit.NONE
    assert e.engine is Engine.UNKNOWN
    assert e.evidence.samples == 0


def test_metrics_fixtures_through_a_window() -> None:
    """Two scrapes of the same server (the second 60 s later, 12 more preemptions): rates from the
    counters' difference."""
    first = parse_metrics(_text("vllm-0.32-dp2.metrics"), at=0.0)
    assert first is not None
    assert first.preemptions_total is not None
    w = ServingWindow()
    w.add(first)
    w.add(ServingSample(**{**{f: getattr(first, f) for f in first.__dataclass_fields__},
                           "at": 60.0, "preemptions_total": first.preemptions_total + 12}))
    assert w.per_minute("preemptions") == pytest.approx(12.0)
    d = diagnose(w)
    assert d.limit is Limit.POOL
    assert d.evidence.pool_tokens == 192000


# ---- the real vLLM CPU capture (tests/engine/capture_serving.py: 20 blocks of 128 tokens, 24
# concurrent requests of 160 + 400 tokens, scrapes once a second) -----------------------------
def test_real_vllm_cpu_metrics_under_pressure() -> None:
    burst = parse_metrics(_text("vllm-cpu-0.32-burst.metrics"), at=0.0)
    after = parse_metrics(_text("vllm-cpu-0.32-burst-after.metrics"), at=10.0)
    assert burst is not None
    assert after is not None
    assert (burst.running, burst.waiting, burst.waiting_capacity) == (5, 16, 16)
    assert burst.kv_usage == pytest.approx(18 / 19)  # 20 blocks, one kept aside: 94.7 % is as full as it gets
    assert (burst.preemptions_total, after.preemptions_total) == (6, 25)
    assert after.requests_total == 24
    assert after.cache == CacheInfo(num_blocks=20, block_size=128, kv_cache_size_tokens=2560, max_concurrency=2.5)
    w = ServingWindow()
    w.extend([burst, after])
    d = diagnose(w, device="cpu", flags={"kv-cache-memory-bytes"})
    assert d.limit is Limit.POOL
    assert d.line() == "pool full: 19 preemptions in 10 s at 95 % usage, 16 waiting — raise --kv-cache-memory-bytes"
    p50, p95 = d.evidence.ttft_p50, d.evidence.ttft_p95
    assert p50 is not None
    assert p95 is not None
    assert p95 > p50 > 0


def test_real_vllm_cpu_log_shows_the_full_pool_but_no_preemptions() -> None:
    from datetime import datetime

    lines = list(parse_bytes((FIX / "vllm-cpu-0.32-burst.log").read_bytes(), Engine.VLLM,
                             clock=lambda: datetime(2026, 12, 7, 15, 0)))
    assert not [ev for ln in lines for ev in ln.events if isinstance(ev, KvPressure)]  # 0.32 never prints them
    samples = samples_from_lines(lines, Engine.VLLM)
    assert [(s.kv_usage, s.running, s.waiting) for s in samples[:2]] == [(pytest.approx(0.947), 6, 12),
                                                                         (pytest.approx(1.0), 5, 3)]
    w = ServingWindow()
    w.extend(samples)
    d = diagnose(w, device="cpu")
    assert d.limit is Limit.POOL
    assert d.line() == ("pool full: preemptions not counted (the log has none) in 6 s at 100 % usage, 12 waiting "
                        "— raise VLLM_CPU_KVCACHE_SPACE")
    assert "decode out-of-memory" not in "\n".join(d.detail())


def test_diagnosis_takes_the_calculators_answer_and_says_itself_as_json() -> None:
    import json

    w = _pressure_window()
    w.add(ServingSample(engine=Engine.VLLM, at=310.0, source="metrics", kv_usage=1.0, waiting=22,
                        preemptions_total=137.0, cache=CacheInfo(num_blocks=12000, block_size=16)))
    d = diagnose(w)
    assert d.evidence.pool_tokens == 192000
    assert d.evidence.peak_tokens == 192000
    answer = "at gpu-memory-utilization 0.95 the pool grows from 192,000 to ~230,000 tokens (+20 %)"
    # the window moved on by 10 s: its first sample (5 preemptions) is the baseline now
    assert d.line(answer) == f"pool full: 132 preemptions in 5 min at 100 % usage, 22 waiting; {answer}"
    got = json.loads(json.dumps(d.to_json()))
    assert got["limit"] == "pool full"
    assert got["knobs"][0]["name"] == "--gpu-memory-utilization"
    assert got["evidence"]["preemptions"] == 132
    assert got["evidence"]["peak_tokens"] == 192000
    assert "KV usage: peak 100 % of 192,000 tokens (192,000 held)" in d.detail()


# ---- SGLang serving logs by version (tests/fixtures/serving/sglang-*-serving-retract.log) --------
@pytest.mark.parametrize(("name", "retracted", "ooms", "refused", "waiting"), [
    ("sglang-0.5.10-serving-retract.log", 10, 0, 1, 40),
    ("sglang-0.4.10-serving-retract.log", 4, 1, 0, 10),
    ("sglang-0.3.6-serving-retract.log", 3, 0, 0, 9),
])
@pytest.mark.parametrize("all_lines", [True, False])
def test_sglang_serving_logs_by_version(name: str, retracted: int, ooms: int, refused: int, waiting: int,
                                        all_lines: bool) -> None:
    """Every pressure line counts whether or not the prefilter coalesces the serving lines between."""
    samples = samples_from_lines(parse_bytes((FIX / name).read_bytes(), Engine.SGLANG, all_lines=all_lines),
                                 Engine.SGLANG)
    last = samples[-1]
    assert last.retractions_total == retracted
    assert last.decode_ooms_total == ooms
    assert last.length_refused_total == refused
    w = ServingWindow(span_s=600.0)
    w.extend(samples)
    assert w.max_waiting() == waiting
    d = diagnose(w)
    assert d.limit is Limit.POOL
    assert d.knobs[0].name == "--mem-fraction-static"
    assert d.also == ((Limit.CONTEXT_LENGTH,) if refused else ())


def test_real_vllm_cpu_same_burst_with_a_larger_pool() -> None:
    """The same burst on 128 blocks (``--kv-cache-memory-bytes 16777216``): no preemption, and
    what holds requests back now is ``--max-num-seqs 16`` (16 running, 8 waiting, the pool 38 %)."""
    before = parse_metrics(_text("vllm-cpu-0.32-burst-after.metrics"), at=0.0)
    during = parse_metrics(_text("vllm-cpu-0.32-roomy.metrics"), at=0.0)
    after = parse_metrics(_text("vllm-cpu-0.32-roomy-after.metrics"), at=10.0)
    assert before is not None
    assert during is not None
    assert after is not None
    assert after.cache is not None
    assert after.cache.num_blocks == 128
    assert (during.running, during.waiting, after.preemptions_total, after.requests_total) == (16, 8, 0, 24)
    w = ServingWindow()
    w.extend([during, after])
    assert w.increase("preemptions") == 0
    assert diagnose(w).limit is Limit.NONE  # the cap unknown
    d = diagnose(w, running_cap=16, device="cpu", flags={"kv-cache-memory-bytes"})
    assert d.limit is Limit.RUNNING_CAP
    assert d.line() == ("running cap: 16 running (the cap) with 8 waiting in 10 s, KV usage only 38 % "
                        "— raise --max-num-seqs")
    # TTFT over the whole run (the cumulative histograms): the median falls, from 1.64 s to 0.41 s
    assert before.ttft is not None
    assert after.ttft is not None
    assert before.ttft.quantile(0.5) == pytest.approx(1.643, abs=0.01)
    assert after.ttft.quantile(0.5) == pytest.approx(0.409, abs=0.01)


def test_waiting_for_capacity_only_counts_as_held_back() -> None:
    """vLLM's ``waiting`` also counts requests deferred (LoRA, KV transfer): a full pool with only
    deferred requests waiting is not the pool holding them back."""
    w = ServingWindow()
    for i in range(5):
        w.add(ServingSample(engine=Engine.VLLM, at=10.0 * i, source="metrics", kv_usage=0.99, running=8,
                            waiting=3, waiting_capacity=0, preemptions_total=float(i)))
    assert diagnose(w).limit is Limit.NONE
    w.add(ServingSample(engine=Engine.VLLM, at=50.0, source="metrics", kv_usage=0.99, running=8, waiting=3,
                        waiting_capacity=2, preemptions_total=6.0))
    assert diagnose(w).limit is Limit.POOL


def test_log_fold_keeps_the_counts_over_a_usage_only_line() -> None:
    fold = LogFold(Engine.VLLM)
    fold.feed((Serving(token_usage=0.9, running_reqs=6, queue_reqs=12, gen_throughput=10.0),), at=0.0)
    s = fold.feed((Serving(token_usage=1.0),), at=1.0)  # `Engine 000: Iteration(…) … KV cache usage: 100.0%`
    assert s is not None
    assert (s.kv_usage, s.running, s.waiting) == (1.0, 6, 12)


def test_window_figures_of_the_real_burst() -> None:
    import json

    w = ServingWindow()
    for name, at in (("vllm-cpu-0.32-burst.metrics", 0.0), ("vllm-cpu-0.32-burst-after.metrics", 10.0)):
        s = parse_metrics(_text(name), at=at)
        assert s is not None
        w.add(s)
    f = w.figures()
    assert (f.samples, f.kv_usage, f.running, f.waiting) == (2, 0.0, 0, 0)
    assert f.peak_kv_usage == pytest.approx(18 / 19)
    assert f.preemptions_per_min == pytest.approx(19 * 6)
    assert f.preemptions_per_1k == pytest.approx(19 / 21 * 1000)
    assert f.retractions_per_min is None
    assert f.ttft_p95 is not None
    assert json.loads(json.dumps(f.to_json()))["preemptions_per_min"] == pytest.approx(114.0)
