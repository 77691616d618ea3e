"""The stall detector: no progress for a while in a phase that is not final.

Progress is a log line that is not a known wait or heartbeat line, or a GPU-memory change. A
line an engine repeats while nothing advances is not progress: vLLM's (and SGLang's copy of)
``No available shared memory broadcast block found in 60 seconds`` every 60 s from a process whose
peer never answers (a rank of another node that has not joined, a hung worker), vLLM's Ray
placement-group wait, Ray's autoscaler's unschedulable-resources warning, torch's c10d client
failing to reach the rendezvous, the API server waiting for its engine core, and health-probe
access lines. ``StallDetector`` counts them, so its stall says what the engine keeps printing:
``stuck: vLLM has printed 'No available shared memory broadcast block' 4× in 4m 00s — a rank has
not joined (multi-node) or is hung``.

Pure core (lines + times in, "stalled since / why" out): the console's host pane and
``kvtui wait`` feed it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from kvtui import fmt
from kvtui.boot.model import Boot, BootStatus
from kvtui.engines.events import Engine, Phase
from kvtui.gpu import GpuSample

# Memory moves by a few MiB all the time on a live GPU; below this it is not progress.
GPU_CHANGE_MIB: Final = 64.0


@dataclass(frozen=True, slots=True)
class WaitLine:
    """A kind of line an engine repeats while nothing advances."""

    key: str
    quote: str  # what the stall message quotes
    cause: str  # what it usually means
    who: str | None = None  # who prints it when not the boot's engine ("Ray")


SHM_BROADCAST: Final = WaitLine(
    "shm_broadcast", "No available shared memory broadcast block",
    "a rank has not joined (multi-node) or is hung")
PLACEMENT_GROUP: Final = WaitLine(
    "placement_group", "Waiting for creating a placement group",
    "Ray has not got the GPUs it asked for: a node has not joined the Ray cluster (`ray status`)", "vLLM")
RAY_UNSCHEDULABLE: Final = WaitLine(
    "ray_unschedulable", "The following resource request cannot be scheduled right now",
    "a node has not joined the Ray cluster, or its GPUs are taken (`ray status`)", "Ray")
C10D_CONNECT: Final = WaitLine(
    "c10d_connect", "The client socket has failed to connect to",
    "this node cannot reach the rendezvous (--dist-init-addr / MASTER_ADDR): node 0 not up, a firewall, "
    "or a wrong address", "torch")
ENGINE_CORE: Final = WaitLine(
    "engine_core", "Waiting for … core engine proc(s) to start",
    "the API server waits for its engine core, which has not finished starting (its own lines say where)")
HEALTH_PROBE: Final = WaitLine(
    "health_probe", "GET /health",
    "only the health probe is answered: the engine is not advancing")

# (a needle every such line holds — a cheap `in` before the pattern —, the pattern, the kind).
# vLLM shm_broadcast.py LONG_WAIT_TIME_LOG_MSG (≥ 0.10, INFO) and the 0.6-0.9 / SGLang wording
# `No available block found in 60 second.`; vLLM executor/ray_utils.py `Waiting for creating a
# placement group of specs for %d seconds.` (backing off 10, 20, 40 s …); Ray's autoscaler
# `Warning: The following resource request cannot be scheduled right now: {'GPU': 1.0}`; torch
# c10d's TCPStore client `The client socket has failed to connect to [h]:p (errno: …)`; vLLM v1
# engine/utils.py `Waiting for %d local, %d remote core engine proc(s) to start.` (DEBUG in 0.32,
# INFO in some releases); uvicorn access lines of health/metrics probes.
_RULES: Final[tuple[tuple[str, re.Pattern[str], WaitLine], ...]] = (
    ("No available ", re.compile(r"No available (?:shared memory broadcast )?block found in \d+ seconds?"),
     SHM_BROADCAST),
    ("placement group", re.compile(r"Waiting for creating a placement group"), PLACEMENT_GROUP),
    ("cannot be scheduled", re.compile(r"resource request cannot be scheduled right now"), RAY_UNSCHEDULABLE),
    ("failed to connect", re.compile(r"\[c10d\].*client socket has failed to connect"), C10D_CONNECT),
    ("core engine proc", re.compile(r"Waiting for \d+ local, \d+ remote core engine proc\(s\) to (?:start|connect)"),
     ENGINE_CORE),
    ("HTTP/", re.compile(r'"(?:GET|HEAD) /(?:health|health_generate|metrics|ping)(?:\?[^" ]*)? HTTP/[\d.]+" \d{3}'),
     HEALTH_PROBE),
)


def wait_line(text: str) -> WaitLine | None:
    """The kind of wait/heartbeat line ``text`` is (any wrapper prefix kept), else None."""
    for needle, pattern, kind in _RULES:
        if needle in text and pattern.search(text) is not None:
            return kind
    return None


ENGINE_NAMES: Final = {Engine.VLLM: "vLLM", Engine.SGLANG: "SGLang"}


@dataclass(frozen=True, slots=True)
class Stall:
    """No progress for ``seconds`` in ``phase``; ``repeats`` lines of ``kind`` came since (the
    most repeated wait line; None: the log said nothing at all)."""

    seconds: float
    phase: Phase | None
    kind: WaitLine | None = None
    repeats: int = 0
    engine: Engine = Engine.UNKNOWN

    def printed(self) -> str | None:
        """``vLLM has printed 'No available shared memory broadcast block' 4×`` (None: silent)."""
        if self.kind is None or self.repeats <= 0:
            return None
        who = self.kind.who or ENGINE_NAMES.get(self.engine, "the server")
        return f"{who} has printed '{self.kind.quote}' {self.repeats}×"

    def text(self) -> str:
        """``stuck: vLLM has printed 'No available shared memory broadcast block' 4× in 4m 00s — a
        rank has not joined (multi-node) or is hung``, or ``no log line and no GPU-memory change
        for 2m 10s`` when the log was silent."""
        took = fmt.duration(self.seconds)
        printed = self.printed()
        if printed is None or self.kind is None:
            return f"no log line and no GPU-memory change for {took}"
        return f"stuck: {printed} in {took} — {self.kind.cause}"

    def seen(self) -> str:
        """What came meanwhile, in a few words: ``only wait lines: 'No available shared memory
        broadcast block' 4×``, or ``no log line and no GPU-memory change`` (silent)."""
        if self.kind is None or self.repeats <= 0:
            return "no log line and no GPU-memory change"
        return f"only wait lines: '{self.kind.quote}' {self.repeats}×"

    def progress_text(self) -> str:
        """The stall of one node of a deployment, by what it saw: ``no progress for 4m 00s — it
        keeps printing 'No available shared memory broadcast block' (4×, nothing else): a rank has
        not joined (multi-node) or is hung``, or ``no progress for 4m 00s — no log line and no
        GPU-memory change``."""
        took = fmt.duration(self.seconds)
        if self.kind is None or self.repeats <= 0:
            return f"no progress for {took} — no log line and no GPU-memory change"
        who = self.kind.who or "it"
        return (f"no progress for {took} — {who} keeps printing '{self.kind.quote}' ({self.repeats}×, nothing "
                f"else): {self.kind.cause}")


def _span(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from ``start`` to ``end``, two of a log's own times; None when either is missing or
    one has a zone and the other not (a wrapper's stamp beside an engine's naive one)."""
    if start is None or end is None or (start.tzinfo is None) != (end.tzinfo is None):
        return None
    try:
        return (end - start).total_seconds()
    except (TypeError, OverflowError):
        return None


class StallDetector:
    """Fed log lines (``lines``) and GPU samples (``gpu``) as they arrive, with the time ``now``
    of the caller's clock; ``check(boot, now)`` returns how long the boot has made no progress,
    once that reaches ``threshold`` seconds in a phase that is not final, else None (``stall``:
    the same with what the engine kept printing). ``threshold`` <= 0 turns it off.

    The time without progress is the caller's clock since the last progress arrived, or — when a
    backlog of wait lines arrives at once (a console opened on a server stuck for an hour) — the
    log's own times from the last progress line to the newest wait line, whichever is longer (both
    of one clock each: a host's skew does not enter)."""

    def __init__(self, threshold: float, *, gpu_change_mib: float = GPU_CHANGE_MIB) -> None:
        self.threshold = threshold
        self.gpu_change_mib = gpu_change_mib
        self._last_progress: float | None = None  # caller's clock
        self._progress_ts: datetime | None = None  # the last progress line's own time
        self._wait_ts: datetime | None = None  # the newest wait line's own time since then
        self._repeats: dict[WaitLine, int] = {}
        self._gpu_used: dict[int, float] = {}

    # -- feeding -------------------------------------------------------------------------------

    def lines(self, texts: Sequence[str], ts: Sequence[datetime | None] | None, now: float) -> None:
        """Lines in arrival order (``ts``: their own times, or None)."""
        self.feed(((texts, ts),), now)

    def feed(self, chunks: Sequence[tuple[Sequence[str], Sequence[datetime | None] | None]], now: float) -> None:
        """Chunks of lines (texts and their own times) in arrival order, as one batch. Scanned from
        the newest line back to the last progress line: a busy boot costs one check per batch."""
        waits: list[tuple[WaitLine, datetime | None]] = []
        progress = False
        progress_ts: datetime | None = None
        for texts, ts in reversed(chunks):
            for k in range(len(texts) - 1, -1, -1):
                kind = wait_line(texts[k])
                if kind is None:
                    progress = True
                    progress_ts = ts[k] if ts is not None else None
                    break
                waits.append((kind, ts[k] if ts is not None else None))
            if progress:
                break
        if progress:  # the wait lines before it do not count
            self._last_progress = now
            self._repeats.clear()
            self._progress_ts = progress_ts
            self._wait_ts = None
        elif not waits:
            return
        elif self._last_progress is None:
            self._last_progress = now  # the first lines seen start the clock
        for kind, _ in waits:
            self._repeats[kind] = self._repeats.get(kind, 0) + 1
        newest = next((t for _, t in waits if t is not None), None)
        if newest is not None:
            later = _span(self._wait_ts, newest)
            if self._wait_ts is None or (later is not None and later > 0):
                self._wait_ts = newest

    def line(self, text: str, ts: datetime | None, now: float) -> None:
        self.lines((text,), (ts,), now)

    def gpu(self, samples: Iterable[GpuSample], now: float) -> None:
        """A GPU's memory moving by ``gpu_change_mib`` or more is progress; the first samples
        start the clock when no line has."""
        changed = False
        for s in samples:
            if s.stale:
                continue
            before = self._gpu_used.get(s.index)
            if before is None or abs(s.used_mib - before) >= self.gpu_change_mib:
                self._gpu_used[s.index] = s.used_mib
                changed = before is not None or changed
        if changed or self._last_progress is None:
            self._progress(now)

    def reset(self, now: float) -> None:
        """A new boot: its clock starts now, with nothing repeated yet."""
        self._progress(now)

    def _progress(self, now: float) -> None:
        self._last_progress = now
        self._repeats.clear()
        self._progress_ts = self._wait_ts = None

    # -- asking --------------------------------------------------------------------------------

    def quiet(self, now: float) -> float | None:
        """Seconds without progress (None: nothing seen yet)."""
        if self._last_progress is None:
            return None
        quiet = now - self._last_progress
        span = _span(self._progress_ts, self._wait_ts)
        if span is not None:
            quiet = max(quiet, span)
        return quiet

    def repeated(self) -> tuple[WaitLine, int] | None:
        """The wait line repeated most since the last progress, and how often."""
        if not self._repeats:
            return None
        kind = max(self._repeats, key=lambda w: self._repeats[w])
        return kind, self._repeats[kind]

    def stall(self, boot: Boot | None, now: float, threshold: float | None = None) -> Stall | None:
        """The stall of a boot still starting, once no progress came for ``threshold`` (default:
        the detector's) seconds; else None."""
        limit = self.threshold if threshold is None else threshold
        if limit <= 0 or boot is None:
            return None
        if boot.status is not BootStatus.STARTING or boot.phase is Phase.READY:
            return None
        quiet = self.quiet(now)
        if quiet is None or quiet < limit:
            return None
        got = self.repeated()
        kind, n = got if got is not None else (None, 0)
        return Stall(quiet, boot.phase, kind, n, boot.engine)

    def check(self, boot: Boot | None, now: float) -> float | None:
        stall = self.stall(boot, now)
        return None if stall is None else stall.seconds
