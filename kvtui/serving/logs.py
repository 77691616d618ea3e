"""The log-line fallback: serving lines as the engine grammars parse them → ``ServingSample``s.

For a server without metrics (SGLang without ``--enable-metrics``) or when ``/metrics`` cannot be
reached: vLLM's periodic stats (``Engine 000: Avg prompt throughput: …, Running: 4 reqs, Waiting:
22 reqs, CPU KV cache usage: 100.0%``, every ``VLLM_LOG_STATS_INTERVAL`` s while busy) and SGLang's
``Decode batch`` / ``Prefill batch`` lines give ``Serving`` events; SGLang's retraction warnings,
its decode OOM and the length refusals give ``KvPressure`` events. ``LogFold`` adds the pressure
events up into cumulative totals (as the metrics' counters are), so a ``ServingWindow`` treats
both sources alike. Pure core.

What the logs cannot give: TTFT and queue-time histograms, and vLLM's preemptions (0.32 resets
its interval count before it checks it, so the stats line never carries ``Preemptions:``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from kvtui.engines.events import Engine, KvPressure, LogEvent, ParsedLine, PressureKind, Serving
from kvtui.serving.sample import ServingSample


class LogFold:
    """Feeds of parsed lines → a sample at each line that carries a serving figure or a pressure
    event; the gauges are the latest serving line's, the totals count since the fold began."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._last: Serving | None = None
        self._totals: dict[PressureKind, int] = dict.fromkeys(PressureKind, 0)
        self._seen: set[PressureKind] = set()

    def feed(self, events: Iterable[LogEvent], at: float) -> ServingSample | None:
        """One line's events, read at ``at`` (the line's time in seconds); the sample, or None
        when the line carries nothing of the kind."""
        hit = False
        for ev in events:
            if isinstance(ev, Serving):
                self._last = ev if self._last is None else _merged(self._last, ev)
                hit = True
            elif isinstance(ev, KvPressure):
                self._totals[ev.kind] += ev.count
                self._seen.add(ev.kind)
                hit = True
        return self._sample(at) if hit else None

    def feed_line(self, line: ParsedLine, at: float | None = None) -> ServingSample | None:
        """A parsed line; ``at`` defaults to the line's own timestamp (None without one)."""
        if at is None:
            if line.ts is None:
                self.feed(line.events, 0.0)  # counted, but no sample: there is no time to place it
                return None
            at = line.ts.timestamp()
        return self.feed(line.events, at)

    def _total(self, kind: PressureKind) -> float | None:
        return float(self._totals[kind]) if kind in self._seen else None

    def _sample(self, at: float) -> ServingSample:
        sv = self._last
        sglang = self.engine is Engine.SGLANG
        return ServingSample(
            engine=self.engine,
            at=at,
            source="log",
            kv_usage=sv.token_usage if sv is not None else None,
            running=sv.running_reqs if sv is not None else None,
            waiting=sv.queue_reqs if sv is not None else None,
            # a counter that starts at 0: SGLang's retractions, vLLM's preemptions when printed
            retractions_total=float(self._totals[PressureKind.RETRACTED]) if sglang else None,
            preemptions_total=None if sglang else self._total(PressureKind.PREEMPTED),
            # SGLang prints both (counted from 0); kvtui reads neither from vLLM's log
            decode_ooms_total=float(self._totals[PressureKind.DECODE_OOM]) if sglang else None,
            length_refused_total=float(self._totals[PressureKind.LENGTH_REFUSED]) if sglang else None,
            dialect=f"{self.engine.value}-log",
        )


def _merged(old: Serving, new: Serving) -> Serving:
    """The newer line's figures over the older's: a line that prints only the usage (vLLM's
    per-iteration line) keeps the running / waiting counts of the last full stats line."""
    return Serving(
        token_usage=new.token_usage if new.token_usage is not None else old.token_usage,
        running_reqs=new.running_reqs if new.running_reqs is not None else old.running_reqs,
        queue_reqs=new.queue_reqs if new.queue_reqs is not None else old.queue_reqs,
        gen_throughput=new.gen_throughput if new.gen_throughput is not None else old.gen_throughput,
        tokens=new.tokens if new.tokens is not None else old.tokens,
    )


def samples_from_lines(lines: Iterable[ParsedLine], engine: Engine, *, limit: int = 10_000) -> list[ServingSample]:
    """A saved log's parsed lines → its last ``limit`` samples, in order (lines without a
    timestamp are skipped; the totals still count every line)."""
    fold = LogFold(engine)
    out: deque[ServingSample] = deque(maxlen=limit)
    for line in lines:
        s = fold.feed_line(line)
        if s is not None:
            out.append(s)
    return list(out)
