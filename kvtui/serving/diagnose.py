"""KV-pressure diagnosis over a ``ServingWindow``: which limit bites, the evidence, the knob.

* ``pool full``       — the KV pool: the engine preempts (vLLM) or retracts (SGLang) requests while
                        others wait for capacity (whatever usage the samples caught); where
                        the source does not count them (vLLM's log), usage ≥ 95 % (``full_usage``)
                        while requests wait; or SGLang's decode ran out of memory;
* ``running cap``     — ``--max-running-requests`` (SGLang) / ``--max-num-seqs`` (vLLM): as many
                        requests run as the cap allows while others wait, with the pool far from full;
* ``context length``  — requests refused (or truncated) for the context length;
* ``none``            — none of these in the window.

The knob is named, never sized: ``Diagnosis.knobs`` says which setting to raise; the calculator
(``kvtui.kvcalc``: the next layer joins a diagnosis with a ``Prediction``) answers to what value and
what the pool becomes. Pure core.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Literal

from kvtui.engines.events import Engine
from kvtui.serving.sample import CacheInfo
from kvtui.serving.window import ServingWindow

FULL_USAGE = 0.95  # the pool counts as full from here
LOW_USAGE = 0.80  # below this the pool is not what holds requests back

Device = Literal["gpu", "cpu"]


class Limit(StrEnum):
    POOL = "pool full"
    RUNNING_CAP = "running cap"
    CONTEXT_LENGTH = "context length"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Knob:
    """A setting to turn: ``name`` as written (``--mem-fraction-static``, ``VLLM_CPU_KVCACHE_SPACE``),
    ``scope`` a flag or an environment variable, ``direction`` which way, ``why`` one phrase."""

    name: str
    scope: Literal["flag", "env"]
    direction: Literal["raise", "lower"]
    why: str


@dataclass(frozen=True, slots=True)
class Evidence:
    """The window's figures a diagnosis rests on (None: the source does not report it)."""

    seconds: float
    samples: int
    source: str
    peak_kv_usage: float | None
    max_running: int | None
    max_waiting: int | None
    preemptions: float | None
    retractions: float | None
    decode_ooms: float | None
    length_refused: float | None
    requests: float | None
    ttft_p50: float | None
    ttft_p95: float | None
    queue_p95: float | None
    running_cap: int | None
    pool_tokens: int | None

    @property
    def peak_tokens(self) -> int | None:
        """The most tokens the pool held (peak usage × pool size): the observed demand, what
        ``tune --goal tokens=observed`` sizes from (a floor when the pool was full)."""
        if self.peak_kv_usage is None or self.pool_tokens is None:
            return None
        return round(self.peak_kv_usage * self.pool_tokens)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    engine: Engine
    limit: Limit
    evidence: Evidence
    knobs: tuple[Knob, ...] = ()
    also: tuple[Limit, ...] = ()  # other limits that bite in the same window

    def line(self, answer: str | None = None) -> str:
        """One line: ``pool full: 137 preemptions in 5 min at 100 % usage, 22 waiting — raise
        --gpu-memory-utilization``. ``answer``: the calculator's sizing of the first knob (the
        caller's: ``at mem-fraction-static 0.92 the pool grows from … to …``), said instead of
        the bare knob."""
        e = self.evidence
        win = _span(e.seconds)
        usage = _pct(e.peak_kv_usage)
        if self.limit is Limit.POOL:
            what = _pressure_count(self.engine, e)
            head = f"pool full: {what} in {win} at {usage} usage, {e.max_waiting or 0} waiting"
        elif self.limit is Limit.RUNNING_CAP:
            head = (f"running cap: {e.max_running} running (the cap) with {e.max_waiting or 0} waiting "
                    f"in {win}, KV usage only {usage}")
        elif self.limit is Limit.CONTEXT_LENGTH:
            head = f"context length: {_n(e.length_refused)} requests refused or truncated for length in {win}"
        else:
            head = f"no KV pressure in {win}: peak usage {usage}, {_pressure_count(self.engine, e)}"
        if answer:
            head += f"; {answer}"
        elif self.knobs:
            k = self.knobs[0]
            head += f" — {k.direction} {k.name}"
        return head

    def to_json(self) -> dict[str, object]:
        """The diagnosis for scripts (``kvtui watch --json``): plain values only."""
        return {
            "engine": self.engine.value,
            "limit": self.limit.value,
            "line": self.line(),
            "also": [lim.value for lim in self.also],
            "knobs": [{"name": k.name, "scope": k.scope, "direction": k.direction, "why": k.why} for k in self.knobs],
            "evidence": {**asdict(self.evidence), "peak_tokens": self.evidence.peak_tokens},
        }

    def detail(self) -> list[str]:
        """The evidence and the knobs, a line each."""
        e = self.evidence
        out = [self.line(), f"window: {_span(e.seconds)}, {e.samples} samples from the {e.source}"]
        out.append(f"KV usage: peak {_pct(e.peak_kv_usage)}"
                   + (f" of {e.pool_tokens:,} tokens ({e.peak_tokens:,} held)"
                      if e.pool_tokens is not None and e.peak_tokens is not None else ""))
        out.append(f"requests: up to {_n(e.max_running)} running"
                   + (f" (cap {e.running_cap})" if e.running_cap is not None else "")
                   + f", up to {_n(e.max_waiting)} waiting"
                   + (f", {_n(e.requests)} finished" if e.requests is not None else ""))
        for label, v in (("preemptions", e.preemptions), ("retractions", e.retractions),
                         ("decode out-of-memory", e.decode_ooms), ("refused for length", e.length_refused)):
            if v is not None:
                rate = f" ({v * 60.0 / e.seconds:.1f}/min)" if e.seconds > 0 and v else ""
                out.append(f"{label}: {_n(v)}{rate}")
        if e.ttft_p95 is not None:
            out.append(f"TTFT: p50 {_secs(e.ttft_p50)}, p95 {_secs(e.ttft_p95)}")
        if e.queue_p95 is not None:
            out.append(f"queue time: p95 {_secs(e.queue_p95)}")
        out.extend(f"also: {lim.value}" for lim in self.also)
        out.extend(f"knob: {k.direction} {k.name} — {k.why}" for k in self.knobs)
        return out


def _n(v: float | int | None) -> str:
    return "?" if v is None else f"{v:,.0f}"


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v * 100:.0f} %"


def _secs(v: float | None) -> str:
    if v is None:
        return "?"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def _span(secs: float) -> str:
    return f"{secs / 60:.0f} min" if secs >= 120 else f"{secs:.0f} s"


def _pressure_count(engine: Engine, e: Evidence) -> str:
    if engine is Engine.SGLANG:
        s = f"{_n(e.retractions or 0)} retractions"
        return s + (f", {_n(e.decode_ooms)} decode OOM" if e.decode_ooms else "")
    if e.preemptions is None:
        return "preemptions not counted (the log has none)"
    return f"{_n(e.preemptions)} preemptions"


# ---- the knobs (named here, sized by the calculator) -----------------------------------------
def pool_knobs(engine: Engine, device: Device = "gpu", flags: Collection[str] = ()) -> tuple[Knob, ...]:
    """The settings that make the KV pool larger, the one to turn first first. ``flags``: the
    boot's flag names (dashes, no ``--``), to name the one that sizes the pool when it is given
    (``kv-cache-memory-bytes`` overrides the fraction on vLLM; ``max-total-tokens`` caps SGLang's)."""
    why = "a larger KV pool"
    if engine is Engine.SGLANG:
        out = [Knob("--mem-fraction-static", "flag", "raise", why)]
        if "max-total-tokens" in flags:
            out.insert(0, Knob("--max-total-tokens", "flag", "raise", "it caps the pool below what memory allows"))
        return tuple(out)
    if device == "cpu":
        env = Knob("VLLM_CPU_KVCACHE_SPACE", "env", "raise", why + " (GiB of host memory)")
        flag = Knob("--kv-cache-memory-bytes", "flag", "raise", why + " (overrides VLLM_CPU_KVCACHE_SPACE)")
        return (flag, env) if "kv-cache-memory-bytes" in flags else (env, flag)
    gmu = Knob("--gpu-memory-utilization", "flag", "raise", why)
    if "kv-cache-memory-bytes" in flags:
        return (Knob("--kv-cache-memory-bytes", "flag", "raise", why + " (it overrides --gpu-memory-utilization)"), gmu)
    return (gmu,)


def cap_knob(engine: Engine) -> Knob:
    name = "--max-running-requests" if engine is Engine.SGLANG else "--max-num-seqs"
    return Knob(name, "flag", "raise", "more requests in the batch: the pool has room")


def length_knob(engine: Engine) -> Knob:
    name = "--context-length" if engine is Engine.SGLANG else "--max-model-len"
    return Knob(name, "flag", "raise", "longer requests (up to the model's own limit; each takes more pool)")


# ---- the diagnosis --------------------------------------------------------------------------
def full_usage(cache: CacheInfo | None) -> float:
    """The usage from which the pool counts as full: ``FULL_USAGE``, or two blocks short of all on a
    small pool (vLLM keeps one block aside: 20 blocks read 94.7 % at most in ``/metrics``)."""
    if cache is not None and cache.num_blocks:
        return min(FULL_USAGE, 1.0 - 2.0 / cache.num_blocks)
    return FULL_USAGE


def evidence_of(window: ServingWindow, running_cap: int | None = None) -> Evidence:
    latest = window.latest
    sources = sorted({s.source for s in window.samples})
    return Evidence(
        seconds=window.seconds,
        samples=len(window),
        source=" and ".join("metrics" if s == "metrics" else "log" for s in sources) or "nothing",
        peak_kv_usage=window.peak_kv_usage(),
        max_running=window.max_running(),
        max_waiting=window.max_waiting(),
        preemptions=window.increase("preemptions"),
        retractions=window.increase("retractions"),
        decode_ooms=window.increase("decode_ooms"),
        length_refused=window.increase("length_refused"),
        requests=window.increase("requests"),
        ttft_p50=window.ttft(0.5),
        ttft_p95=window.ttft(0.95),
        queue_p95=window.queue_time(0.95),
        running_cap=running_cap,
        pool_tokens=latest.cache.pool_tokens if latest is not None and latest.cache is not None else None,
    )


def diagnose(
    window: ServingWindow,
    *,
    running_cap: int | None = None,
    device: Device = "gpu",
    flags: Collection[str] = (),
) -> Diagnosis:
    """The limit that bites in ``window`` (see the module's doc), the first of pool > running cap >
    context length; the others that also bite in ``also``. ``running_cap``: the boot's
    ``max-running-requests`` / ``max-num-seqs`` when known (no metric carries it); ``device`` and
    ``flags`` pick the pool's knob (``pool_knobs``)."""
    latest = window.latest
    engine = latest.engine if latest is not None else Engine.UNKNOWN
    e = evidence_of(window, running_cap)
    bites: list[Limit] = []
    usage_waiting = window.usage_when_waiting()
    pushed_out = (e.preemptions or 0) + (e.retractions or 0)
    # vLLM's log never counts preemptions (0.32): there the full pool with a queue is the evidence
    pushed_known = e.preemptions is not None or e.retractions is not None
    full = usage_waiting is not None and usage_waiting >= full_usage(latest.cache if latest is not None else None)
    # a preemption (vLLM: a running request's next block could not be allocated) or a retraction
    # (SGLang: decode memory ran short) while requests wait for capacity is the pool running out,
    # whatever usage the samples caught (seconds apart: the real vLLM's loop test read 84 % at 70
    # preemptions); where the source does not count them, a full pool with a queue is the evidence
    waited = usage_waiting is not None
    if (pushed_out > 0 and waited) or (full and not pushed_known) or (e.decode_ooms or 0) > 0:
        bites.append(Limit.POOL)
    running_waiting = window.running_when_waiting()
    if (running_cap is not None and running_waiting is not None and running_waiting >= running_cap
            and (e.peak_kv_usage is None or e.peak_kv_usage < LOW_USAGE)):
        bites.append(Limit.RUNNING_CAP)
    if (e.length_refused or 0) > 0:
        bites.append(Limit.CONTEXT_LENGTH)
    limit = bites[0] if bites else Limit.NONE
    knobs: tuple[Knob, ...] = ()
    if limit is Limit.POOL:
        knobs = pool_knobs(engine, device, flags)
    elif limit is Limit.RUNNING_CAP:
        knobs = (cap_knob(engine),)
    elif limit is Limit.CONTEXT_LENGTH:
        knobs = (length_knob(engine),)
    return Diagnosis(engine, limit, e, knobs, tuple(bites[1:]))
