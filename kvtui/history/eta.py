"""Phase ETAs from past boots (pure): for a boot that is starting, how long its current and
remaining phases usually take on this host with this model and the flags that matter to each
phase, as the median and spread of the stored boots — and whether the current phase is slower
than usual (past ``SLOW_FACTOR`` × its median). Without matching history there is no ETA, and
the text says so: no made-up numbers.

Which past boots count for a phase (besides host and model): weights, KV and the rest need the
same TP size; graph capture the same batch-size list (else the same capture flags).

A boot that runs at another pace than the stored ones (the demo host switched to real time with
``D`` after boots recorded at ×8; a slower disk; a host whose GPUs are shared) is not given their
medians as they are (issue 22 #5: ``load weights 0:14 / ~0:30 … ready in ~0:19`` while shards took
3.4 s each): its pace is the median ratio of its finished phases' seconds to their medians, and
past ``PACE_BAND`` × (either way) the medians of the current and later phases are scaled by it; a
current phase that counts its progress (``12/61 shards``) is projected from its own rate when that
is off the (scaled) median by more than ``PACE_BAND`` ×. "Slower than usual" still compares with
the stored boots as they were."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from kvtui import fmt
from kvtui.boot import Boot, BootStatus, PhaseSpan
from kvtui.engines.events import Model, Phase
from kvtui.history.doc import BootDoc, model_tp, num
from kvtui.history.store import HistoryError, open_store

Doc = BootDoc | Mapping[str, object]  # a stored document, or its JSON (``BootDoc.of``)

if TYPE_CHECKING:
    from kvtui.boot.stall import Stall

SLOW_FACTOR: Final = 3.0
# a boot whose pace (its finished phases' seconds ÷ their medians) is past this × either way gets
# medians scaled by its pace; its current phase's own rate (progress) counts past it too
PACE_BAND: Final = 2.0
PACE_MIN_MEDIAN_S: Final = 1.0  # a phase with a shorter median says nothing of the pace (1 s log stamps)
RATE_MIN_DONE: Final = 2  # a phase's own rate once it counted this many steps (shards)
CAPTURE_FLAGS: Final = ("cuda_graph_max_bs", "cuda_graph_bs", "disable_cuda_graph", "max_running_requests",
                        "enforce_eager", "max_num_seqs", "compilation_config")
PHASE_ORDER: Final = [p.value for p in Phase]


@dataclass(frozen=True, slots=True)
class PhaseEstimate:
    phase: str
    median: float
    low: float
    high: float
    boots: int


@dataclass(frozen=True, slots=True)
class BootEta:
    """The estimate for one running boot (``None`` fields: not known)."""

    phase: str | None  # the current phase
    elapsed: float | None  # seconds in it
    current: PhaseEstimate | None
    remaining: float | None  # seconds until ready (the current phase's rest + the later medians)
    boots: int  # past boots the estimate comes from (the most any phase used)
    note: str  # why there is no estimate, when there is none
    pace: float | None = None  # the medians were scaled by this (the boot's own pace; None: as stored)
    expected: float | None = None  # the current phase's expected seconds (``current.median``, scaled / projected)
    by_rate: bool = False  # ``expected`` is projected from the phase's own progress rate

    @property
    def slow(self) -> float | None:
        """How many times the median the current phase has taken, when past ``SLOW_FACTOR``."""
        c = self.current
        if c is None or self.elapsed is None or c.median <= 0:
            return None
        ratio = self.elapsed / c.median
        return ratio if ratio > SLOW_FACTOR else None

    def text(self) -> str:
        """``graph capture 0:41 / ~1:05, ready in ~2:10 (median of 6 boots)``; or why there is none."""
        if self.phase is None:
            return self.note
        if self.current is None and self.remaining is None:
            return self.note
        parts: list[str] = []
        if self.current is not None and self.elapsed is not None:
            expected = self.expected if self.expected is not None else self.current.median
            parts.append(f"{fmt.phase_label(self.phase)} {clock(self.elapsed)} / ~{clock(expected)}")
        if self.remaining is not None:
            parts.append(f"ready in ~{clock(self.remaining)}")
        basis = f"median of {self.boots} boot{'s' if self.boots != 1 else ''}"
        if self.pace is not None:
            basis += f" × {self.pace:.1f}, this boot's pace"
        if self.by_rate:
            basis += f"; {fmt.phase_label(self.phase)} at its own rate"
        text = ", ".join(parts) + f" ({basis})"
        slow = self.slow
        if slow is not None and self.current is not None:
            text += f"; {slow_text(slow, self.current.boots)}"
        return text


def slow_text(ratio: float, boots: int) -> str:
    return f"slower than usual: {ratio:.1f}× the median of {boots} boot{'s' if boots != 1 else ''}"


def slow_reason(eta: BootEta | None, silent: float | Stall | None = None) -> str | None:
    """Why the running boot is slower than usual, when it is: its phase past ``SLOW_FACTOR`` × the
    median, or the stall detector's stall (``silent``: a ``kvtui.boot.stall.Stall``, or the seconds
    without progress) in a phase whose past boots are known, worded by what the detector saw —
    ``slower than usual: silent for 5:00 in graph capture, which takes ~1:05 (median of 6 boots)``
    when no line and no GPU-memory change came, ``slower than usual: no progress for 5:00 in
    init (only wait lines: 'No available shared memory broadcast block' 5×), which takes ~0:40
    (median of 6 boots)`` when the engine printed only its wait lines. None: nothing to say (no
    history)."""
    if eta is None or eta.current is None:
        return None
    c = eta.current
    ratio = eta.slow
    if ratio is not None:
        return slow_text(ratio, c.boots)
    if silent is None:
        return None
    boots = f"median of {c.boots} boot{'s' if c.boots != 1 else ''}"
    usual = f"which takes ~{clock(c.median)} ({boots})"
    if isinstance(silent, (int, float)):
        return f"slower than usual: silent for {clock(silent)} in {fmt.phase_label(eta.phase)}, {usual}"
    phase = fmt.phase_label(eta.phase)
    if silent.kind is None or silent.repeats <= 0:
        return f"slower than usual: silent for {clock(silent.seconds)} in {phase}, {usual}"
    return f"slower than usual: no progress for {clock(silent.seconds)} in {phase} ({silent.seen()}), {usual}"


def heartbeat_eta(history: Sequence[Doc], host: str,
                  now: Callable[[], float]) -> Callable[[Boot], str | None]:
    """For ``kvtui apply --restart``'s follower (``kvtui.hosts.service``, which imports no
    history): the new boot -> its ETA text for the heartbeat, None without one (the line before
    the restart already said there is no history)."""
    def eta_of(boot: Boot) -> str | None:
        if not history:
            return None
        got = estimate(boot, history, datetime.fromtimestamp(now(), tz=UTC), host=host)
        return got.text() if got.current is not None or got.remaining is not None else None

    return eta_of


def clock(seconds: float) -> str:
    """``0:41``, ``12:05``, ``1:02:03``."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _capture_key(flags: Mapping[str, object], capture_bs: Sequence[object]) -> object:
    if capture_bs:
        return ("bs", tuple(capture_bs))
    return ("flags", tuple(str(flags.get(k)) for k in CAPTURE_FLAGS))


def _target_seconds(doc: BootDoc) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in doc.phases:
        if p.model != "target":
            continue
        s = num(p.seconds)
        if s is not None and p.end is not None:
            out[p.name] = s
    return out


def _align(now: datetime, ref: datetime) -> datetime:
    """``now`` comparable with ``ref``: a naive time is local time (the log's own stamps)."""
    if (now.tzinfo is None) == (ref.tzinfo is None):
        return now
    if now.tzinfo is None:
        return now.astimezone()
    return now.astimezone().replace(tzinfo=None)


def past_boots(host: str, limit: int = 200) -> list[BootDoc]:
    """The host's stored boots (documents, newest first) for ``estimate``; empty when the history
    cannot be read (a reader of the history: opens it read-only, never raises)."""
    with open_store(readonly=True) as store:
        try:
            return [r.document for r in store.boots(host, limit=limit)]
        except HistoryError:
            return []


def estimate(current: Boot, history: Sequence[Doc], now: datetime, *, host: str = "") -> BootEta:
    """The ETA of ``current`` from ``history`` (stored documents of this host: see the module doc)."""
    where = f" on {host}" if host else ""
    if current.status is not BootStatus.STARTING:
        return BootEta(None, None, None, None, 0, f"the boot is {current.status.value}")
    model, tp = model_tp(current.flags)
    if model is None:
        return BootEta(None, None, None, None, 0, "no ETA yet: the boot has not said its model")
    cap = _capture_key(current.flags, current.capture_bs)
    start_time = current.started_at
    docs = [BootDoc.of(d) for d in history]
    past = [d for d in docs if d.model == model and d.status == "ready"
            and d.started_at != (start_time.isoformat() if start_time else None)]
    if not past:
        return BootEta(None, None, None, None, 0, f"no ETA: no earlier ready boot of {model}{where} in the history")
    same_tp = [d for d in past if d.tp == tp]

    def for_phase(name: str) -> PhaseEstimate | None:
        pool = same_tp
        if name == Phase.GRAPH_CAPTURE.value:  # the batch lists when both have one, else the capture flags
            pool = [d for d in same_tp
                    if _capture_key(d.flags, d.capture_bs if current.capture_bs else ())
                    == cap]
        values = [s for d in pool if (s := _target_seconds(d).get(name)) is not None]
        if not values:
            return None
        return PhaseEstimate(name, statistics.median(values), min(values), max(values), len(values))

    targets = [s for s in current.phases if s.model is Model.TARGET]
    span = targets[-1] if targets else None
    phase = span.name.value if span is not None else None
    elapsed = None
    if span is not None and span.start is not None:
        try:
            elapsed = max(0.0, (_align(now, span.start) - span.start).total_seconds())
        except (TypeError, ValueError, OverflowError):
            elapsed = None
    cur = for_phase(phase) if phase is not None else None
    # the phases a ready boot of this model went through after the current one
    later = [p for p in PHASE_ORDER if phase is None or PHASE_ORDER.index(p) > PHASE_ORDER.index(phase)]
    later = [p for p in later if p != Phase.READY.value]
    ests = [e for p in later if (e := for_phase(p)) is not None]
    pace = _pace(targets[:-1], for_phase)
    scale = pace if pace is not None else 1.0
    expected = cur.median * scale if cur is not None else None
    by_rate = False
    rate = _by_rate(span, elapsed)
    if rate is not None and cur is not None and expected is not None and (
            pace is not None or not 1 / PACE_BAND <= rate / max(expected, 1e-9) <= PACE_BAND):
        expected, by_rate = rate, True
    remaining: float | None = None
    if cur is not None or ests:
        rest = max(0.0, expected - (elapsed or 0.0)) if expected is not None else 0.0
        remaining = rest + sum(e.median * scale for e in ests)
    n = max([e.boots for e in ests] + ([cur.boots] if cur is not None else []), default=0)
    if n == 0:
        return BootEta(phase, elapsed, None, None, 0,
                       f"no ETA: no earlier ready boot of {model} with TP {tp}{where} in the history")
    return BootEta(phase, elapsed, cur, remaining, n, "", pace, expected, by_rate)


def _pace(done: Sequence[PhaseSpan], for_phase: Callable[[str], PhaseEstimate | None]) -> float | None:
    """The boot's pace against the stored boots: the median of its finished target phases' seconds
    ÷ their medians (phases whose median is under ``PACE_MIN_MEDIAN_S`` say nothing); None while
    it is within ``PACE_BAND`` × either way (the medians are used as they are) or not known."""
    ratios: list[float] = []
    for s in done:
        if s.end is None or s.seconds is None:
            continue
        e = for_phase(s.name.value)
        if e is not None and e.median >= PACE_MIN_MEDIAN_S:
            ratios.append(max(s.seconds, 0.0) / e.median)
    if not ratios:
        return None
    pace = statistics.median(ratios)
    return pace if pace > PACE_BAND or pace < 1 / PACE_BAND else None


def _by_rate(span: PhaseSpan | None, elapsed: float | None) -> float | None:
    """The current phase's whole length projected from its own progress (``12/61 shards`` after
    ``elapsed`` s); None without enough progress to tell."""
    if span is None or elapsed is None or elapsed <= 0:
        return None
    done, total = span.progress_done, span.progress_total
    if done is None or total is None or done < RATE_MIN_DONE or total <= done:
        return None
    return elapsed * total / done


def expected_text(history: Sequence[Doc], flags: Mapping[str, object], *, host: str = "") -> str:
    """Before a restart: how long a boot of this model and TP usually takes on this host to be
    ready (median and spread of the stored ready boots), or why that is not known."""
    model, tp = model_tp(flags)
    where = f" on {host}" if host else ""
    if model is None:
        return "no ETA: the server's model is not known"
    times = [s for d in map(BootDoc.of, history) if d.status == "ready" and d.model == model and d.tp == tp
             if (s := d.seconds) is not None]
    if not times:
        return f"no ETA: no earlier ready boot of {model} with TP {tp}{where} in the history"
    n = len(times)
    return (f"a boot of {model}{where} is usually ready in ~{clock(statistics.median(times))} "
            f"({clock(min(times))}–{clock(max(times))}, median of {n} boot{'s' if n != 1 else ''})")
