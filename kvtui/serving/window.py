"""``ServingWindow``: the last few minutes of ``ServingSample``s, bounded in time and in count,
and what they add up to — counter increases and rates (resets handled as Prometheus' ``increase``
does: a counter that falls started again from 0), peak KV usage, the most requests running and
waiting, and latency quantiles from the histograms' bucket deltas over the window. Pure core.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from kvtui.serving.sample import Histogram, ServingSample

DEFAULT_SPAN_S = 300.0  # 5 min
MAX_SAMPLES = 2048  # a scrape every 2 s for an hour, or the log's lines of a busy 5 min

Counter = Callable[[ServingSample], float | None]

COUNTERS: dict[str, Counter] = {
    "preemptions": lambda s: s.preemptions_total,
    "retractions": lambda s: s.retractions_total,
    "decode_ooms": lambda s: s.decode_ooms_total,
    "length_refused": lambda s: s.length_refused_total,
    "requests": lambda s: s.requests_total,
}


@dataclass(frozen=True, slots=True)
class ServingFigures:
    """What a window adds up to, for a timeline, a ``--json`` stream and a boot's history record
    (None: the source does not report it, or too few samples). Rates per minute of the window;
    ``*_per_1k`` per 1000 requests finished in it."""

    seconds: float
    samples: int
    kv_usage: float | None
    peak_kv_usage: float | None
    running: int | None
    waiting: int | None
    preemptions_per_min: float | None
    retractions_per_min: float | None
    preemptions_per_1k: float | None
    retractions_per_1k: float | None
    ttft_p50: float | None
    ttft_p95: float | None
    queue_p95: float | None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _held_back(s: ServingSample) -> bool:
    """Requests wait for capacity: vLLM's ``waiting_by_reason{reason="capacity"}`` when it has one
    (its ``waiting`` also counts requests deferred for LoRA or KV-transfer reasons), else ``waiting``."""
    waiting = s.waiting_capacity if s.waiting_capacity is not None else s.waiting
    return (waiting or 0) > 0


class ServingWindow:
    """A ring of samples spanning at most ``span_s`` seconds (the newest sample's clock) and at
    most ``max_samples`` samples. A sample older than the newest one (a clock that went back, a
    replayed log) starts the window over."""

    def __init__(self, span_s: float = DEFAULT_SPAN_S, max_samples: int = MAX_SAMPLES) -> None:
        if span_s <= 0 or max_samples < 2:
            raise ValueError("a window needs a positive span and room for two samples")
        self.span_s = span_s
        self._ring: deque[ServingSample] = deque(maxlen=max_samples)

    def add(self, sample: ServingSample) -> None:
        if self._ring and sample.at < self._ring[-1].at:
            self._ring.clear()
        self._ring.append(sample)
        edge = sample.at - self.span_s
        while len(self._ring) > 1 and self._ring[0].at < edge:
            self._ring.popleft()

    def extend(self, samples: Iterable[ServingSample]) -> None:
        for s in samples:
            self.add(s)

    def clear(self) -> None:
        self._ring.clear()

    @property
    def samples(self) -> tuple[ServingSample, ...]:
        return tuple(self._ring)

    @property
    def latest(self) -> ServingSample | None:
        return self._ring[-1] if self._ring else None

    def __len__(self) -> int:
        return len(self._ring)

    @property
    def seconds(self) -> float:
        """The time the samples cover (0 with fewer than two)."""
        return self._ring[-1].at - self._ring[0].at if len(self._ring) > 1 else 0.0

    # ---- counters -------------------------------------------------------------------------
    def increase(self, counter: str | Counter) -> float | None:
        """How much a cumulative counter grew over the window: the sum of its steps between the
        samples that carry it, a fall counted as a reset (the new value is what it grew since).
        None when no sample carries it; 0.0 with one."""
        get = COUNTERS[counter] if isinstance(counter, str) else counter
        prev: float | None = None
        seen = False
        total = 0.0
        for s in self._ring:
            v = get(s)
            if v is None:
                continue
            if prev is not None:
                total += v - prev if v >= prev else v
            prev, seen = v, True
        return total if seen else None

    def per_minute(self, counter: str | Counter) -> float | None:
        """``increase`` per minute of the window; None without a counter or a span."""
        inc = self.increase(counter)
        secs = self.seconds
        return inc * 60.0 / secs if inc is not None and secs > 0 else None

    def per_1k_requests(self, counter: str | Counter) -> float | None:
        """``increase`` per 1000 requests finished in the window; None without finished requests."""
        inc, reqs = self.increase(counter), self.increase("requests")
        return inc * 1000.0 / reqs if inc is not None and reqs else None

    # ---- gauges ---------------------------------------------------------------------------
    def _gauge_max(self, get: Callable[[ServingSample], float | int | None]) -> float | None:
        vals = [v for s in self._ring if (v := get(s)) is not None]
        return float(max(vals)) if vals else None

    def peak_kv_usage(self) -> float | None:
        return self._gauge_max(lambda s: s.kv_usage)

    def max_running(self) -> int | None:
        v = self._gauge_max(lambda s: s.running)
        return int(v) if v is not None else None

    def max_waiting(self) -> int | None:
        v = self._gauge_max(lambda s: s.waiting)
        return int(v) if v is not None else None

    def usage_when_waiting(self) -> float | None:
        """The fullest pool seen while requests waited for capacity (None when none waited)."""
        return self._gauge_max(lambda s: s.kv_usage if _held_back(s) else None)

    def running_when_waiting(self) -> int | None:
        """The most requests running while others waited for capacity (None when none waited)."""
        v = self._gauge_max(lambda s: s.running if _held_back(s) else None)
        return int(v) if v is not None else None

    # ---- histograms -----------------------------------------------------------------------
    def histogram(self, get: Callable[[ServingSample], Histogram | None]) -> Histogram | None:
        """The observations made within the window: each step's bucket deltas added (a reset
        step contributes what the new series holds). None with fewer than two samples carrying it."""
        prev: Histogram | None = None
        out: Histogram | None = None
        for s in self._ring:
            h = get(s)
            if h is None:
                continue
            if prev is not None:
                d = h.since(prev)
                out = d if out is None else out.plus(d)
            prev = h
        return out

    def ttft(self, q: float) -> float | None:
        h = self.histogram(lambda s: s.ttft)
        return h.quantile(q) if h is not None else None

    def queue_time(self, q: float) -> float | None:
        h = self.histogram(lambda s: s.queue_time)
        return h.quantile(q) if h is not None else None

    # ---- all of it ------------------------------------------------------------------------
    def figures(self) -> ServingFigures:
        latest = self.latest
        return ServingFigures(
            seconds=self.seconds,
            samples=len(self),
            kv_usage=latest.kv_usage if latest is not None else None,
            peak_kv_usage=self.peak_kv_usage(),
            running=latest.running if latest is not None else None,
            waiting=latest.waiting if latest is not None else None,
            preemptions_per_min=self.per_minute("preemptions"),
            retractions_per_min=self.per_minute("retractions"),
            preemptions_per_1k=self.per_1k_requests("preemptions"),
            retractions_per_1k=self.per_1k_requests("retractions"),
            ttft_p50=self.ttft(0.5),
            ttft_p95=self.ttft(0.95),
            queue_p95=self.queue_time(0.95),
        )
