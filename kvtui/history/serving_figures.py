"""The serving figures of a boot's life in the history (issue 24; pure: no I/O; the writing:
``kvtui.history.serving``).

A watcher of a ready server (``kvtui watch``, the console's serving panel) keeps a
``ServingTally``: it takes every ``ServingSample`` its ``ServingWindow`` took (``follow``) and adds
up, over the whole time it watched — not the window's last five minutes — the counters' increases
between consecutive samples (preemptions, retractions, finished requests, …: a fall counts as a
reset, as Prometheus' ``increase``), the seconds between them, the latency histograms' bucket
deltas (TTFT, queue time), and the peaks (KV usage, tokens held = usage × pool, running, waiting).
A change of source (``/metrics`` ↔ the log) or a clock that went back is a gap: nothing is counted
across it. Counts and seconds are kept, never averages: rates are computed from the sums.

``kvtui.history.serving.record_serving(store, host, boot, tally)`` writes it into the boot's document as its
``serving`` section (the boot's document itself with it, so a boot the history lacks is stored):

    "serving": {"version": 1,
                "sessions": {SESSION: part, ...},   # one per watcher (process), bounded
                ...summary}                         # the boot's figures (``summary``)

A part is one watcher's sums (``ServingTally.part``); the summary merges them: watchers whose
watched times overlap saw the same requests, so of each group of overlapping parts only the one
that watched longest counts; groups that do not overlap add up. Peaks are the maximum of all.
``merge_serving`` combines two documents' sections (the store's read-merge-write: two writers
never lose each other's part). A document without the section (an older kvtui's, a boot nobody
watched) reads as having no serving figures.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Final

from pydantic import JsonValue

from kvtui.history.doc import BootDoc, ServingDoc
from kvtui.serving.sample import Histogram, ServingSample
from kvtui.serving.window import COUNTERS, ServingWindow

SERVING_VERSION: Final = 1
MAX_SESSIONS: Final = 16  # watchers' parts kept per boot (those that watched longest)
RECORD_EVERY_S: Final = 30.0  # how often a watcher writes its tally (and once at its end)
OBSERVED_MARGIN: Final = 0.20  # ``tune --goal tokens=observed``: the observed peak demand + 20 %


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _hist_json(h: Histogram | None) -> dict[str, JsonValue] | None:
    if h is None:
        return None
    return {"le": [None if math.isinf(b) else b for b, _ in h.buckets], "n": [c for _, c in h.buckets],
            "count": h.count, "sum": h.total}


def _hist_of(raw: object) -> Histogram | None:
    if not isinstance(raw, dict):
        return None
    le, n = raw.get("le"), raw.get("n")
    count, total = _num(raw.get("count")), _num(raw.get("sum"))
    if not isinstance(le, list) or not isinstance(n, list) or len(le) != len(n) or count is None or total is None:
        return None
    buckets: list[tuple[float, float]] = []
    for b, c in zip(le, n, strict=True):
        fb = math.inf if b is None else _num(b)
        fc = _num(c)
        if fb is None or fc is None:
            return None
        buckets.append((fb, fc))
    return Histogram(tuple(buckets), count, total)


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def new_session() -> str:
    """A watcher's name in a boot's ``sessions``: unique per process and start."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


class ServingTally:
    """One watcher's sums over the samples of one boot (see the module doc). Bounded: a few
    numbers and two histograms, however long it watches."""

    def __init__(self, session: str | None = None) -> None:
        self.session = session or new_session()
        self.engine: str | None = None
        self.sources: set[str] = set()
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.seconds = 0.0
        self.samples = 0
        self.counts: dict[str, float | None] = dict.fromkeys(COUNTERS)
        self.ttft: Histogram | None = None
        self.queue_time: Histogram | None = None
        self.peak_kv_usage: float | None = None
        self.peak_tokens: int | None = None
        self.pool_tokens: int | None = None
        self.max_running: int | None = None
        self.max_waiting: int | None = None
        self._prev: ServingSample | None = None

    def add(self, s: ServingSample, *, pool_tokens: int | None = None) -> None:
        """One sample; ``pool_tokens``: the pool's size when the sample does not say it (the log's
        samples: the boot's ``max_total_num_tokens``)."""
        prev = self._prev
        self._prev = s
        self.samples += 1
        self.engine = s.engine.value
        self.sources.add(s.source)
        self.first_at = s.at if self.first_at is None else min(self.first_at, s.at)
        self.last_at = s.at if self.last_at is None else max(self.last_at, s.at)
        pool = s.cache.pool_tokens if s.cache is not None and s.cache.pool_tokens is not None else pool_tokens
        if pool is not None:
            self.pool_tokens = pool
        if s.kv_usage is not None:
            self.peak_kv_usage = _max(self.peak_kv_usage, s.kv_usage)
            if pool is not None:
                held = round(s.kv_usage * pool)
                self.peak_tokens = held if self.peak_tokens is None else max(self.peak_tokens, held)
        if s.running is not None:
            self.max_running = s.running if self.max_running is None else max(self.max_running, s.running)
        if s.waiting is not None:
            self.max_waiting = s.waiting if self.max_waiting is None else max(self.max_waiting, s.waiting)
        if prev is None or prev.source != s.source or s.at < prev.at:
            return  # a gap: nothing counted across it
        self.seconds += s.at - prev.at
        for name, get in COUNTERS.items():
            v, p = get(s), get(prev)
            if v is None:
                continue
            step = 0.0 if p is None else (v - p if v >= p else v)
            self.counts[name] = (self.counts[name] or 0.0) + step
        for attr in ("ttft", "queue_time"):
            h, ph = getattr(s, attr), getattr(prev, attr)
            if h is None or ph is None:
                continue
            d = h.since(ph)
            acc: Histogram | None = getattr(self, attr)
            setattr(self, attr, d if acc is None else acc.plus(d))

    def follow(self, window: ServingWindow, *, pool_tokens: int | None = None) -> int:
        """Take the samples of ``window`` this tally has not taken yet (newer than the last one
        taken; all of them after a change of source: the window started over); how many."""
        taken = 0
        prev = self._prev
        for s in window.samples:
            if prev is not None and s.source == prev.source and s.at <= prev.at:
                continue
            self.add(s, pool_tokens=pool_tokens)
            prev = s
            taken += 1
        return taken

    def part(self) -> dict[str, JsonValue]:
        """This watcher's sums as stored (one entry of ``sessions``)."""
        return {
            "engine": self.engine,
            "sources": list[JsonValue](sorted(self.sources)),
            "first_at": self.first_at,
            "last_at": self.last_at,
            "seconds": round(self.seconds, 3),
            "samples": self.samples,
            "counts": {k: v for k, v in self.counts.items() if v is not None},
            "ttft": _hist_json(self.ttft),
            "queue_time": _hist_json(self.queue_time),
            "peak_kv_usage": self.peak_kv_usage,
            "peak_tokens": self.peak_tokens,
            "pool_tokens": self.pool_tokens,
            "max_running": self.max_running,
            "max_waiting": self.max_waiting,
        }

    def section(self) -> dict[str, JsonValue]:
        """A document's ``serving`` section holding only this watcher's part."""
        return build_section({self.session: self.part()})


# -- sections --------------------------------------------------------------------------------------


def _parts(section: object) -> dict[str, dict[str, JsonValue]]:
    if isinstance(section, ServingDoc):
        return {str(k): dict(v) for k, v in section.sessions.items()}
    if not isinstance(section, dict):
        return {}
    sessions = section.get("sessions")
    if not isinstance(sessions, dict):
        return {}
    return {str(k): v for k, v in sessions.items() if isinstance(v, dict)}


def _f(part: Mapping[str, JsonValue], key: str) -> float:
    return _num(part.get(key)) or 0.0


def _strs(v: JsonValue | None) -> list[str]:
    return [s for s in v if isinstance(s, str)] if isinstance(v, list) else []


def _rate(n: float | None, per: float | None, scale: float) -> float | None:
    return n * scale / per if n is not None and per else None


def summary(parts: Mapping[str, Mapping[str, JsonValue]]) -> dict[str, JsonValue]:
    """The boot's figures from its watchers' parts (see the module doc)."""
    ordered = sorted(parts.values(), key=lambda p: (_f(p, "first_at"), _f(p, "last_at")))
    chosen: list[Mapping[str, JsonValue]] = []
    group: list[Mapping[str, JsonValue]] = []
    end = -math.inf
    for p in ordered:
        if group and _f(p, "first_at") >= end:  # after the whole group: another stretch of time
            chosen.append(max(group, key=lambda q: (_f(q, "seconds"), _f(q, "samples"))))
            group, end = [], -math.inf
        group.append(p)
        end = max(end, _f(p, "last_at"))
    if group:
        chosen.append(max(group, key=lambda q: (_f(q, "seconds"), _f(q, "samples"))))
    counts: dict[str, float | None] = dict.fromkeys(COUNTERS)
    hists: dict[str, Histogram | None] = {"ttft": None, "queue_time": None}
    seconds = 0.0
    for p in chosen:
        seconds += _f(p, "seconds")
        pc = p.get("counts")
        if isinstance(pc, dict):
            for name in COUNTERS:
                v = _num(pc.get(name))
                if v is not None:
                    counts[name] = (counts[name] or 0.0) + v
        for name in hists:
            h = _hist_of(p.get(name))
            if h is not None:
                acc = hists[name]
                hists[name] = h if acc is None else acc.plus(h)

    def peak(key: str) -> float | None:
        vals = [v for p in parts.values() if (v := _num(p.get(key))) is not None]
        return max(vals) if vals else None

    def edge(key: str, pick: Callable[[list[float]], float]) -> float | None:
        vals = [v for p in parts.values() if (v := _num(p.get(key))) is not None]
        return pick(vals) if vals else None

    peak_tokens, pool, running, waiting = peak("peak_tokens"), peak("pool_tokens"), peak("max_running"), \
        peak("max_waiting")
    reqs = counts["requests"]
    ttft, queue = hists["ttft"], hists["queue_time"]
    engines = sorted({str(p["engine"]) for p in parts.values() if p.get("engine")})
    sources = list[JsonValue](sorted({s for p in parts.values() for s in _strs(p.get("sources"))}))
    engine: JsonValue = engines[0] if len(engines) == 1 else (list[JsonValue](engines) or None)
    return {
        "engine": engine,
        "sources": sources,
        "first_at": edge("first_at", min),
        "last_at": edge("last_at", max),
        "seconds": round(seconds, 3),
        "samples": sum(int(_f(p, "samples")) for p in parts.values()),
        "watchers": len(parts),
        "peak_kv_usage": peak("peak_kv_usage"),
        "peak_tokens": int(peak_tokens) if peak_tokens is not None else None,
        "pool_tokens": int(pool) if pool is not None else None,
        "max_running": int(running) if running is not None else None,
        "max_waiting": int(waiting) if waiting is not None else None,
        "preemptions": counts["preemptions"],
        "retractions": counts["retractions"],
        "decode_ooms": counts["decode_ooms"],
        "length_refused": counts["length_refused"],
        "requests": reqs,
        "preemptions_per_1k": _rate(counts["preemptions"], reqs, 1000.0),
        "retractions_per_1k": _rate(counts["retractions"], reqs, 1000.0),
        "preemptions_per_min": _rate(counts["preemptions"], seconds, 60.0),
        "retractions_per_min": _rate(counts["retractions"], seconds, 60.0),
        "ttft_p50": ttft.quantile(0.5) if ttft is not None else None,
        "ttft_p95": ttft.quantile(0.95) if ttft is not None else None,
        "queue_p95": queue.quantile(0.95) if queue is not None else None,
    }


def build_section(parts: Mapping[str, Mapping[str, JsonValue]]) -> dict[str, JsonValue]:
    """A ``serving`` section of these parts (bounded: the ``MAX_SESSIONS`` that watched longest)."""
    kept = dict(sorted(parts.items(), key=lambda kv: (_f(kv[1], "seconds"), _f(kv[1], "samples")),
                       reverse=True)[:MAX_SESSIONS])
    return {"version": SERVING_VERSION, **summary(kept), "sessions": {k: dict(v) for k, v in kept.items()}}


def merge_serving(old: ServingDoc | Mapping[str, object] | None,
                  new: ServingDoc | Mapping[str, object] | None) -> dict[str, JsonValue] | None:
    """Two documents' sections of one boot: every watcher's part (of one watcher, the part that
    took more samples: its newer write), the summary computed again; None when neither has one."""
    a, b = _parts(old), _parts(new)
    if not a and not b:
        return None
    parts = dict(a)
    for k, v in b.items():
        if k not in parts or _f(v, "samples") >= _f(parts[k], "samples"):
            parts[k] = v
    return build_section(parts)


def section_of(doc: BootDoc | Mapping[str, object]) -> dict[str, JsonValue] | None:
    """The document's ``serving`` section as JSON when it has figures (None: nobody watched it
    serve, or an older kvtui's document); ``BootDoc.serving_figures`` is the typed one."""
    s = BootDoc.of(doc).serving_figures
    return s.to_json() if s is not None else None


def observed_tokens(doc: BootDoc | Mapping[str, object], margin: float = OBSERVED_MARGIN) -> tuple[int, int] | None:
    """``tune --goal tokens=observed``: (the observed peak demand, the goal: that + ``margin``,
    rounded up); None when the document has no peak demand."""
    s = BootDoc.of(doc).serving_figures
    peak = _num(s.peak_tokens) if s is not None else None
    if peak is None or peak <= 0:
        return None
    return int(peak), math.ceil(peak * (1.0 + margin))


def iso(ts: object) -> str | None:
    """An epoch time of the section as local ISO text (for people)."""
    f = _num(ts)
    if f is None:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(f))


# -- text ------------------------------------------------------------------------------------------


def _shown(show: Callable[[float], str]) -> Callable[[object], str]:
    """A figure's text: ``show`` of its number, or ``?`` where the section has none."""

    def text(v: object) -> str:
        f = _num(v)
        return "?" if f is None else show(f)

    return text


_pct_text = _shown(lambda f: f"{f * 100:.0f} %")
_secs_text = _shown(lambda f: f"{f:.2f} s" if f < 1 else f"{f:.1f} s")
_count_text = _shown(lambda f: f"{f:,.0f}")
_per1k_text = _shown(lambda f: "0" if f == 0 else f"{f:,.{1 if f < 10 else 0}f}")


def pressure_key(section: ServingDoc) -> str:
    """``preemptions`` (vLLM) or ``retractions`` (SGLang): the counter the section has."""
    if _num(section.preemptions) is None and _num(section.retractions) is not None:
        return "retractions"
    return "preemptions"


# (label, section key, formatter): the rows of ``history --diff``'s serving table, in order
ROWS: Final = (
    ("preemptions per 1k requests", "preemptions_per_1k", _per1k_text),
    ("retractions per 1k requests", "retractions_per_1k", _per1k_text),
    ("TTFT p95", "ttft_p95", _secs_text),
    ("queue time p95", "queue_p95", _secs_text),
    ("peak KV usage", "peak_kv_usage", _pct_text),
    ("peak tokens held", "peak_tokens", _count_text),
    ("preemptions", "preemptions", _count_text),
    ("retractions", "retractions", _count_text),
    ("requests finished", "requests", _count_text),
    ("watched", "seconds", _shown(lambda f: f"{f:.0f} s")),
)
# the one-line comparison: the incident's figures
HEADLINE: Final = ("preemptions_per_1k", "retractions_per_1k", "ttft_p95", "peak_kv_usage")


def _figure(section: ServingDoc | None, key: str) -> object:
    return getattr(section, key, None) if section is not None else None


def rows(a: ServingDoc | None, b: ServingDoc | None) -> list[tuple[str, str, str]]:
    """(label, base, boot) for each figure either section has."""
    out: list[tuple[str, str, str]] = []
    for label, key, text in ROWS:
        x, y = _figure(a, key), _figure(b, key)
        if _num(x) is None and _num(y) is None:
            continue
        out.append((label, text(x) if a is not None else "—", text(y) if b is not None else "—"))
    return out


def headline(a: ServingDoc | None, b: ServingDoc | None) -> str:
    """``preemptions per 1k requests 137 → 0, TTFT p95 4.6 s → 0.40 s, peak KV usage 100 % → 61 %``."""
    labels = {key: (label, text) for label, key, text in ROWS}
    parts = []
    for key in HEADLINE:
        x, y = _figure(a, key), _figure(b, key)
        if _num(x) is None and _num(y) is None:
            continue
        label, text = labels[key]
        parts.append(f"{label} {text(x) if a is not None else '—'} → {text(y) if b is not None else '—'}")
    return ", ".join(parts)


def compact(section: ServingDoc | None) -> str:
    """The history list's serving cell: ``KV 100% 137/1k p95 4.6s`` (preemptions or retractions
    per 1k requests, TTFT p95); ``""`` when nobody watched the boot serve."""
    if section is None:
        return ""
    parts = []
    peak = _num(section.peak_kv_usage)
    if peak is not None:
        parts.append(f"KV {peak * 100:.0f}%")
    key = pressure_key(section)
    per1k = _num(section.preemptions_per_1k if key == "preemptions" else section.retractions_per_1k)
    if per1k is not None:
        parts.append(f"{_per1k_text(per1k)}/1k {'preempt' if key == 'preemptions' else 'retract'}")
    p95 = _num(section.ttft_p95)
    if p95 is not None:
        parts.append(f"p95 {_secs_text(p95).replace(' ', '')}")
    return " ".join(parts) or f"{_count_text(section.samples)} samples"
