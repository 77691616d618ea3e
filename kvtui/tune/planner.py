"""The tune loop's pure half: goals, bounds, the next candidate from the calculator, and when to
stop. No I/O: the driver (``kvtui.tune.driver``) applies each candidate through the guarded
service, follows the boot and hands the boots back here.

Rules (the README's "Tuning" section says the same to the operator):

* the first candidate for ``max-tokens`` is the calculator's ``max_safe_fraction`` (verdict ok:
  graph margin plus the activation allowance) rounded down to ``step``; once a boot of the tune
  is ready, the next is the largest fraction (0.001 grid) whose predicted graph headroom is at
  least the graph margin (verdict not ``oom_risk``): "the largest pool that boots with the graph
  margin"; the tune stops when that is no larger than the best ready boot;
* ``context=N [--requests K]`` / ``tokens=N``: the pool must hold ``K·N`` / ``N`` tokens; the
  candidate is the smallest fraction that does (rounded up to ``step``) with a verdict that is not
  ``oom_risk``; when no fraction does, and the operator named ``--also max-running-requests`` /
  ``cuda-graph-max-bs``, those are halved (never below K) until one does; the tune stops at the
  first ready boot whose real pool holds the goal;
* a boot that died in graph capture bounds the fraction below it, and the calculator is
  recalibrated from that boot alone (its capture trail: the batch sizes it got through, avail
  memory at death), so the step down is what the trail says; a pool that did not fit
  (``oom_kv_allocate``, ``kv_too_small``) bounds it above, at least one ``step`` up;
* never outside ``[floor, ceiling]``; never a candidate the calculator says ``oom_risk``/``no_fit``;
  never the same settings twice.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kvtui import fmt, kvcalc
from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine, FailureKind
from kvtui.knobs import Memory, dash_name, fraction_flag, memory_name, memory_value

GoalKind = Literal["max-tokens", "context", "tokens"]
EXTRA_KNOBS: Mapping[str, Memory] = {
    "max-running-requests": Memory.MAX_REQUESTS,
    "max-num-seqs": Memory.MAX_REQUESTS,
    "cuda-graph-max-bs": Memory.GRAPH_BS,
}
ALSO_ALIASES: Mapping[str, str] = {
    "max-num-seqs": "max-running-requests",
    "cuda-graph-max-bs-decode": "cuda-graph-max-bs",  # SGLang 0.5.23's spelling (written as the engine takes it)
}


def also_name(raw: str) -> str | None:
    """The ``--also`` knob a name means (``max-num-seqs`` / ``cuda-graph-max-bs-decode`` are the
    same knobs), None when it is not one the tune moves."""
    k = raw.strip().lstrip("-").replace("_", "-")
    k = ALSO_ALIASES.get(k, k)
    return k if k in EXTRA_KNOBS else None
GRID = 1000  # fractions are proposed on a 0.001 grid


class TuneError(ValueError):
    """A goal or option kvtui cannot use; ``str()`` names it and says what is expected."""


@dataclass(frozen=True, slots=True)
class Goal:
    kind: GoalKind
    n: int | None = None
    requests: int = 1

    @property
    def tokens_needed(self) -> int | None:
        if self.kind == "max-tokens" or self.n is None:
            return None
        return self.n * (self.requests if self.kind == "context" else 1)

    def met_by(self, tokens: int | None) -> bool:
        need = self.tokens_needed
        return tokens is not None and (need is None or tokens >= need)

    def describe(self) -> str:
        if self.kind == "max-tokens":
            return "max-tokens (the largest pool that boots with the graph margin)"
        if self.kind == "context":
            reqs = f"{self.requests} request{'s' if self.requests != 1 else ''}"
            return f"context={self.n:,} × {reqs} (a pool of at least {self.tokens_needed:,} tokens)"
        return f"tokens={self.n:,} (a pool of at least {self.n:,} tokens)"

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "n": self.n, "requests": self.requests, "tokens_needed": self.tokens_needed}


_GOAL_RE = re.compile(r"(context|tokens)\s*=\s*([0-9][0-9_,]*)")


def parse_goal(text: str, requests: int | None = None) -> Goal:
    """``max-tokens`` | ``context=N`` | ``tokens=N`` (``--requests K`` only with ``context``)."""
    t = text.strip().lower()
    if requests is not None and requests < 1:
        raise TuneError(f"--requests {requests}: expected a whole number ≥ 1")
    if t in ("max-tokens", "max_tokens"):
        if requests is not None:
            raise TuneError("--requests goes with --goal context=N (max-tokens takes the largest pool)")
        return Goal("max-tokens")
    m = _GOAL_RE.fullmatch(t)
    if m is None:
        raise TuneError(f"--goal {text!r}: expected max-tokens, context=N or tokens=N (N a whole number of tokens)")
    n = int(m.group(2).replace("_", "").replace(",", ""))
    if n < 1:
        raise TuneError(f"--goal {text!r}: N must be at least 1")
    if m.group(1) == "tokens":
        if requests is not None:
            raise TuneError("--requests goes with --goal context=N, not tokens=N")
        return Goal("tokens", n)
    return Goal("context", n, requests or 1)


@dataclass(frozen=True, slots=True)
class Bounds:
    floor: float = 0.5
    ceiling: float = 0.99
    step: float = 0.01
    max_boots: int = 6

    def check(self) -> None:
        if not 0 < self.floor < self.ceiling <= 1.0:
            raise TuneError(f"--floor {self.floor:g} / --ceiling {self.ceiling:g}: expected 0 < floor < ceiling ≤ 1")
        if not 0.001 <= self.step <= 0.2:
            raise TuneError(f"--step {self.step:g}: expected a fraction between 0.001 and 0.2")
        if self.max_boots < 1:
            raise TuneError(f"--max-boots {self.max_boots}: expected a whole number ≥ 1")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One setting to boot: the fraction and the extra knobs (engine flag names, dashed)."""

    fraction: float
    extra: tuple[tuple[str, int], ...] = ()
    predicted_tokens: int | None = None
    verdict: str | None = None
    headroom_gib: float | None = None
    why: str = ""

    def edits(self, engine: Engine) -> list[tuple[str, str]]:
        """(flag, value) pairs to write, the fraction first."""
        return [(dash_name(fraction_flag(engine)), f"{self.fraction:.3f}".rstrip("0").rstrip(".")),
                *((k, str(v)) for k, v in self.extra)]

    def key(self) -> tuple[float, tuple[tuple[str, int], ...]]:
        return round(self.fraction, 3), self.extra

    def label(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.extra)
        return f"{self.fraction:.3f}{extra}"


@dataclass(slots=True)
class Tried:
    """A candidate the tune booted, and how it ended."""

    candidate: Candidate
    outcome: str  # ready | failed | timeout | not_in_effect | error | refused | interrupted
    boot: Boot | None = None
    failure: str | None = None

    @property
    def ready(self) -> bool:
        return self.outcome == "ready"

    @property
    def tokens(self) -> int | None:
        return None if self.boot is None else self.boot.metrics.max_total_num_tokens


@dataclass(frozen=True, slots=True)
class Stop:
    """The tune ends: ``met`` says whether the goal is met by the best ready boot."""

    met: bool
    reason: str


@dataclass(slots=True)
class Planner:
    """Decides the next candidate from the boots seen so far (the host's, then the tune's)."""

    engine: Engine
    goal: Goal
    bounds: Bounds
    also: tuple[str, ...] = ()  # extra knobs the operator named (dashed engine names)
    margin_gib: float = kvcalc.DEFAULT_GRAPH_MARGIN_GIB
    start: Mapping[str, object] = field(default_factory=dict)  # the running boot's flags (underscored)
    start_ready: bool = False
    start_tokens: int | None = None
    lo: float = 0.0
    hi: float = 1.0
    # the history's boots of the chosen boot's deployment (``changes.stored_siblings``): more
    # calibration points, as ``calc --host`` and the console's calculator use them; injected
    # (the planner reads nothing itself), None: none
    stored: Callable[[Boot, Sequence[Boot]], Sequence[Boot]] | None = None

    def __post_init__(self) -> None:
        self.lo, self.hi = self.bounds.floor, self.bounds.ceiling

    # -- what the boots say ---------------------------------------------------------------

    def learn(self, tried: Tried) -> None:
        """Narrow the bounds by how a boot ended."""
        f = tried.candidate.fraction
        kind = tried.boot.failure.kind if tried.boot is not None and tried.boot.failure is not None else None
        if kind in (FailureKind.OOM_GRAPH_CAPTURE, FailureKind.OOM_RUNTIME):
            self.hi = min(self.hi, round(f - 0.001, 3))
        elif kind in (FailureKind.OOM_KV_ALLOCATE, FailureKind.KV_TOO_SMALL):
            self.lo = max(self.lo, round(f + self.bounds.step, 3))
        elif tried.ready and not self.goal.met_by(tried.tokens) and self.goal.kind != "max-tokens":
            self.lo = max(self.lo, round(f + 0.001, 3))

    def model(self, boots: Sequence[Boot]) -> kvcalc.MemoryModel:
        """The calculator's model: from the last boot that sized its pool; a boot that died in
        graph capture alone (its capture trail), else with its same-deployment siblings."""
        chosen, others = kvcalc.select_boot(boots)
        died = chosen.failure is not None and chosen.failure.kind is FailureKind.OOM_GRAPH_CAPTURE
        if died:
            return kvcalc.calibrate(chosen, others=())
        stored = list(self.stored(chosen, boots)) if self.stored is not None else []
        return kvcalc.calibrate(chosen, others=[*others, *stored])

    # -- the next candidate ----------------------------------------------------------------

    def next(self, boots: Sequence[Boot], tried: Sequence[Tried]) -> Candidate | Stop:
        best = self.best(tried)
        if len([t for t in tried if t.outcome not in ("refused",)]) >= self.bounds.max_boots:
            return self._out_of_boots(best)
        if self.lo > self.hi:
            return self._stop_at(best, f"no fraction is left between {self.lo:.3f} and {self.hi:.3f} "
                                       "(the boots bound it from both sides)")
        try:
            model = self.model(boots)
        except kvcalc.CalcError as exc:
            return Stop(False, f"the calculator cannot calibrate from the host's boots: {exc}")
        seen = {t.candidate.key() for t in tried}
        got = self._propose(model, best, tried)
        if isinstance(got, Stop):
            return got
        if got.key() in seen:
            return self._stop_at(best, f"the calculator proposes {got.label()} again, which was already booted")
        return got

    def best(self, tried: Sequence[Tried]) -> Tried | None:
        ready = [t for t in tried if t.ready]
        if not ready:
            return None
        if self.goal.kind == "max-tokens":
            return max(ready, key=lambda t: (t.tokens or 0, t.candidate.fraction))
        meeting = [t for t in ready if self.goal.met_by(t.tokens)]
        return meeting[-1] if meeting else ready[-1]

    def _out_of_boots(self, best: Tried | None) -> Stop:
        n = self.bounds.max_boots
        return self._stop_at(best, f"the boot budget is spent ({n} boot{'s' if n != 1 else ''}, --max-boots)")

    def _stop_at(self, best: Tried | None, why: str) -> Stop:
        if best is not None and self.goal.met_by(best.tokens) and self.goal.kind != "max-tokens":
            return Stop(True, why)
        return Stop(False, why)

    def _predict(self, model: kvcalc.MemoryModel, f: float, extra: Mapping[str, int]) -> kvcalc.Prediction:
        mapping: dict[str, object] = {fraction_flag(self.engine): f}
        for name, v in extra.items():
            role = EXTRA_KNOBS[name]
            dest = memory_name(self.engine, role)
            if dest is not None:
                mapping[dest] = v
        return kvcalc.predict(model, mapping, graph_margin_gib=self.margin_gib)

    def _fits(self, p: kvcalc.Prediction) -> bool:
        return p.verdict not in (kvcalc.Verdict.OOM_RISK, kvcalc.Verdict.NO_FIT)

    def _keeps_margin(self, p: kvcalc.Prediction) -> bool:
        """The graph headroom keeps the margin (falls as the fraction rises: the search's test)."""
        return p.graph_headroom_gib is None or p.graph_headroom_gib >= self.margin_gib

    def _grid(self) -> tuple[int, int]:
        return math.ceil(self.lo * GRID - 1e-9), math.floor(self.hi * GRID + 1e-9)

    def _largest_fitting(self, model: kvcalc.MemoryModel, extra: Mapping[str, int]) -> int | None:
        lo, hi = self._grid()
        if lo > hi:
            return None
        top = _largest(lo, hi, lambda i: self._keeps_margin(self._predict(model, i / GRID, extra)))
        return top if top is not None and self._fits(self._predict(model, top / GRID, extra)) else None

    def _candidate(self, model: kvcalc.MemoryModel, i: int, extra: Mapping[str, int], why: str) -> Candidate:
        p = self._predict(model, i / GRID, extra)
        return Candidate(i / GRID, tuple(sorted(extra.items())), p.tokens, str(p.verdict), p.graph_headroom_gib, why)

    def _propose(self, model: kvcalc.MemoryModel, best: Tried | None, tried: Sequence[Tried]) -> Candidate | Stop:
        if self.goal.kind == "max-tokens":
            return self._propose_max(model, best, tried)
        return self._propose_need(model, best, tried)

    def _propose_max(self, model: kvcalc.MemoryModel, best: Tried | None, tried: Sequence[Tried]) -> Candidate | Stop:
        extra = dict(best.candidate.extra) if best is not None else {}
        top = self._largest_fitting(model, extra)
        if top is None:
            return Stop(False, f"no fraction in [{self.lo:.3f}, {self.hi:.3f}] keeps the graph margin "
                               f"({self.margin_gib:g} GiB) by the calculator")
        best_f = best.candidate.fraction if best is not None else None
        if best_f is None and self.start_ready and not any(t.boot is not None for t in tried):
            start_f = _as_float(self.start.get(fraction_flag(self.engine)))
            if start_f is not None and top <= round(start_f * GRID):
                return Stop(False, f"the running boot's {start_f:g} is already the largest fraction that keeps "
                                   "the graph margin")
        if best_f is not None and top <= round(best_f * GRID):
            return Stop(True, f"{best_f:.3f} is the largest fraction that keeps the graph margin "
                              f"({self.margin_gib:g} GiB) by the calculator calibrated on the boots so far")
        if not any(t.boot is not None for t in tried):  # the first boot: the safe maximum, rounded down
            p = self._predict(model, top / GRID, extra)
            safe = p.max_safe_fraction
            if safe is not None:
                step_i = max(1, round(self.bounds.step * GRID))
                first = min(top, math.floor(safe * GRID + 1e-9) // step_i * step_i)
                lo, _ = self._grid()
                if first >= lo:
                    return self._candidate(model, first, extra,
                                           f"the calculator's largest safe fraction {fmt.safe_max(safe)} (verdict ok), "
                                           f"rounded down to the step {self.bounds.step:g}")
        died = model.graph is not None and model.graph.source is kvcalc.GraphSource.CAPTURE_OOM
        if died:  # what the dead boot's capture trail says caps the fraction from now on
            self.hi = min(self.hi, top / GRID)
        why = ("the largest fraction whose graph headroom keeps the margin "
               f"({self.margin_gib:g} GiB)" + (" by the failed capture's trail" if died else ""))
        return self._candidate(model, top, extra, why)

    def _extras(self, current: Mapping[str, int]) -> list[dict[str, int]]:
        """The extra-knob settings to try, the current one first, then halved (never below K)."""
        out = [dict(current)]
        if not self.also:
            return out
        floor_v = max(1, self.goal.requests)
        cur = dict(current)
        while True:
            nxt = {}
            for name in self.also:
                v = cur.get(name)
                if v is None:
                    continue
                nxt[name] = max(floor_v, v // 2)
            if not nxt or nxt == cur:
                return out
            cur = {**cur, **nxt}
            out.append(dict(cur))

    def _current_extras(self, best: Tried | None) -> dict[str, int]:
        if best is not None and best.candidate.extra:
            return dict(best.candidate.extra)
        out: dict[str, int] = {}
        for name in self.also:
            # under whichever key the boot's release dumps it (SGLang 0.5.23: cuda_graph_max_bs_decode)
            v = memory_value(self.engine, EXTRA_KNOBS[name], self.start)
            iv = _as_int(v)
            if iv is not None:
                out[name] = iv
        return out

    def _holds(self, model: kvcalc.MemoryModel, extra: Mapping[str, int], need: int) -> Callable[[int], bool]:
        return lambda i: self._predict(model, i / GRID, extra).tokens >= need

    def _propose_need(self, model: kvcalc.MemoryModel, best: Tried | None, tried: Sequence[Tried]) -> Candidate | Stop:
        need = self.goal.tokens_needed
        assert need is not None
        if best is not None and self.goal.met_by(best.tokens):
            return Stop(True, f"the boot at {best.candidate.label()} is ready with {best.tokens:,} tokens ≥ {need:,}")
        if not tried and self.start_ready and self.goal.met_by(self.start_tokens):
            return Stop(True, f"the running boot already holds {self.start_tokens:,} tokens ≥ {need:,}; nothing to do")
        lo, hi = self._grid()
        step_i = max(1, round(self.bounds.step * GRID))
        for extra in self._extras(self._current_extras(best)):
            first = _smallest(lo, hi, self._holds(model, extra, need))
            if first is None:
                continue
            if not self._fits(self._predict(model, first / GRID, extra)):
                continue
            up = -(-first // step_i) * step_i  # rounded up to the step, when that still fits
            pick = up if up <= hi and self._fits(self._predict(model, up / GRID, extra)) else first
            moved = "" if extra == self._current_extras(best) else " with " + ", ".join(
                f"{k}={v}" for k, v in extra.items())
            return self._candidate(model, pick, extra,
                                   f"the smallest fraction whose pool holds {need:,} tokens{moved}, "
                                   f"rounded up to the step {self.bounds.step:g}")
        knobs = " and ".join(f"--also {k}" for k in EXTRA_KNOBS if k not in self.also and k != "max-num-seqs")
        hint = f"; {knobs} may free memory for the pool" if not self.also else ""
        return self._stop_at(best, f"no fraction in [{self.lo:.3f}, {self.hi:.3f}] gives a pool of {need:,} tokens "
                                   f"that keeps the graph margin by the calculator{hint}")


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """Largest i in [lo, hi] with ok(i) (true, then false, as i rises): the calculator's own search."""
    return kvcalc.grid_search(lo, hi, ok)


def _smallest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """Smallest i in [lo, hi] with ok(i) (false, then true, as i rises): one past the largest i
    that is not ok, by the calculator's search."""
    if lo > hi or not ok(hi):
        return None
    below = kvcalc.grid_search(lo, hi, lambda i: not ok(i))
    return lo if below is None else below + 1


def _as_float(v: object) -> float | None:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _as_int(v: object) -> int | None:
    f = _as_float(v)
    return None if f is None or f != int(f) else int(f)


def boot_seconds(boot: Boot | None) -> float | None:
    """The boot's length as its log shows it: first phase start to last phase end (or its own
    start/end stamps), None when the log carries no times."""
    if boot is None:
        return None
    starts = [p.start for p in boot.phases if p.start is not None]
    ends = [p.end or p.start for p in boot.phases if (p.end or p.start) is not None]
    a = boot.started_at or (min(starts) if starts else None)
    b = boot.ended_at or (max(e for e in ends if e is not None) if ends else None)
    if a is None or b is None:
        return None
    return max(0.0, (b - a).total_seconds())


def ready(boot: Boot | None) -> bool:
    return boot is not None and boot.status is BootStatus.READY
