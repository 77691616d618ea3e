"""``BootTracker``: parsed lines -> boots (see the package docstring for how it reads a log).

``feed`` dispatches each line's events: boundaries (``_boundary``: a new boot, a stop, a restart),
phase marks (``_phase``: spans over all ranks), figures (``_metric``, ``_pool_metric``: per rank,
aggregated by ``kvtui.boot.facts``), serving lines, versions and failure evidence (``_failure_text``;
``_build_failure`` picks the message and the kind when the boot fails). ``_Work`` holds the
current boot's aggregation state.

Pure core.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from kvtui.boot.facts import _MAX_METRICS, _METRICS_INPUTS, _MIN_METRICS, _POOL_METRICS, rank_sort_key, refresh_metrics
from kvtui.boot.hints import _DEFAULT_OOM_PHASE_KIND, EXIT_CONTEXT_LINES, _is_oom, exit_diagnosis, hint_for
from kvtui.boot.model import Boot, BootDelta, BootStatus, Failure, PhaseSpan
from kvtui.engines.events import (
    PHASE_RANK,
    BootBoundary,
    BoundaryKind,
    CaptureSizes,
    Engine,
    Fact,
    FailureKind,
    FailureText,
    Flags,
    LogEvent,
    LogGap,
    Metric,
    Model,
    ParsedLine,
    Phase,
    PhaseMark,
    Progress,
    RunningCommand,
    ServerExit,
    Serving,
    StartMissing,
    VersionHint,
    Warning_,
    WorkerNode,
)
from kvtui.engines.text import version_key
from kvtui.engines.unknown import UnrecognisedShape, looks_like_startup, shape_of
from kvtui.flags.cmdline import parse_argv
from kvtui.flags.errors import FlagError
from kvtui.knobs import dest_name

# the bounds of what one boot keeps
MAX_TRACEBACK_LINES: Final = 40
MAX_TRACEBACK_LINE_CHARS: Final = 2000
MAX_EVIDENCE: Final = 64
MAX_TRAIL: Final = 4096
MAX_WARNINGS: Final = 32
MAX_UNRECOGNISED: Final = 256  # shapes of unrecognised startup lines kept per boot
MAX_RANKS: Final = 1024
_RECENT_LINES: Final = 64
_TB_HEADER: Final = "Traceback (most recent call last)"
# failure kinds that say their phase themselves
_KIND_PHASE: Final = {FailureKind.BAD_ARGS: Phase.LAUNCH, FailureKind.KV_TOO_SMALL: Phase.KV_ALLOCATE}


@dataclass(slots=True)
class _Evidence:
    ft: FailureText
    phase: Phase | None
    ts: datetime | None
    before: list[str]
    engine: bool  # the line came from the engine (not a systemd exit line)


class _Work:
    """Aggregation state of the current boot (discarded when the next boot starts)."""

    __slots__ = (
        "activity",
        "best",
        "best_line",
        "closed_at",
        "closed_by",
        "draft_ranks",
        "evidence",
        "explicit_end",
        "fact_src",
        "follow",
        "follow_open",
        "node_of",
        "pending_bs",
        "printed",
        "rank_set",
        "real_phase",
        "serving",
        "shapes",
        "spans",
        "stopped_by_operator",
        "version_explicit",
    )

    def __init__(self) -> None:
        self.spans: dict[tuple[Phase, Model], PhaseSpan] = {}
        self.printed: dict[tuple[Phase, Model], float] = {}
        # how each span ended: its last explicit end line, the span whose start cut it short, or
        # the time of the stop / failure that ended it (see ``BootTracker._settle``)
        self.explicit_end: dict[tuple[Phase, Model], datetime] = {}
        self.closed_by: dict[tuple[Phase, Model], tuple[Phase, Model]] = {}
        self.closed_at: dict[tuple[Phase, Model], datetime | None] = {}
        self.activity: Phase | None = None  # the phase of the latest start line (any model)
        self.evidence: list[_Evidence] = []
        self.best: _Evidence | None = None  # the evidence whose text is failure.message
        self.best_line = -1  # the line number of ``best``
        self.draft_ranks: dict[str, dict[Fact, float]] = {}  # per-rank draft pools / graphs
        self.pending_bs: int | None = None  # the bs of a tqdm `Capturing batches (bs=…)` line
        self.follow: list[str] = []  # continuation lines after the best evidence
        self.follow_open = False
        self.node_of: dict[str, str] = {}  # a Ray worker's rank label -> its node's ip ("" driver's)
        self.fact_src: dict[tuple[Model, Fact], tuple[int, ...]] = {}
        self.serving: dict[str, Serving] = {}
        self.rank_set: set[str] = set()
        self.real_phase = False  # a phase line of the engine's own past launch was seen
        self.shapes: dict[str, UnrecognisedShape] = {}  # the boot's unrecognised lines by shape
        self.stopped_by_operator = False
        self.version_explicit = False


class BootTracker:
    """Turns parsed lines into boots; splits restarts; classifies failures by text and phase.

    ``max_boots`` bounds the boots kept (the oldest are dropped; None keeps all, for replay).
    """

    def __init__(
        self,
        engine_hint: Engine | None = None,
        *,
        max_boots: int | None = 1000,
    ) -> None:
        self.boots: list[Boot] = []
        self.engine_hint = engine_hint
        self.max_boots = max_boots
        self._line = -1
        self._last_ts: datetime | None = None
        self._recent: deque[str] = deque(maxlen=_RECENT_LINES)
        self._w = _Work()
        # inferred phase marks (traceback frames) seen before any boot: a fragment's failure that
        # follows them starts a boot in the phase they say
        self._pending: deque[tuple[PhaseMark, datetime | None]] = deque(maxlen=_RECENT_LINES)
        # unrecognised startup lines before any boot (each boot keeps its own)
        self.unrecognised: list[UnrecognisedShape] = []
        self._shapes: dict[str, UnrecognisedShape] = {}
        self._idle_lines = 0  # lines since the last boot ended (or since the start, before any)
        self._idle_ts: datetime | None = None  # the time of the first of them

    @property
    def current(self) -> Boot | None:
        return self.boots[-1] if self.boots else None

    # -----------------------------------------------------------------------------------------
    def feed(self, parsed: ParsedLine) -> BootDelta:
        """Account one parsed line to the current boot (starting or ending boots as needed)."""
        self._line += 1
        ev0 = parsed.events[0] if parsed.events else None
        if type(ev0) is ServerExit:  # the backend saw the server process gone (kvtui.liveness)
            return self._server_exit(ev0, parsed.ts, parsed)
        if type(ev0) is LogGap or type(ev0) is StartMissing or type(ev0) is RunningCommand:
            return self._source_said(ev0, parsed)  # kvtui.engines.source_records
        ts = parsed.ts
        if ts is not None and self._last_ts is not None and (ts.tzinfo is None) is not (self._last_ts.tzinfo is None):
            ts = None  # a clock of the other kind (a collector's zoned stamp among naive engine stamps)
        timed = ts is not None
        if timed:
            self._last_ts = ts
        else:
            ts = self._last_ts
        events = parsed.events
        boot = self.boots[-1] if self.boots else None
        if boot is None or boot.status is BootStatus.FAILED or boot.status is BootStatus.STOPPED:
            if not self._idle_lines:
                self._idle_ts = ts
            self._idle_lines += 1  # a line while no boot is open (kvtui.liveness needs them)
        if boot is not None and len(events) == 1 and type(events[0]) is Serving:
            # the hot path of a serving boot: one serving line
            boot.last_line = self._line
            self._serving(boot, events[0], parsed.rank)
            if self._w.follow_open:
                self._follow(parsed)
            self._recent.append(parsed.text)
            return BootDelta(serving=True)
        if events and type(events[-1]) is WorkerNode:  # the first line of a Ray worker (vLLM)
            events = self._workers(boot, events)
        if parsed.tp is not None and self._w.node_of and boot is not None:
            ip = self._w.node_of.get(parsed.rank or "")
            if ip is not None and parsed.rank is not None:
                boot.nodes[ip][parsed.rank] = parsed.tp
        if not events:
            if boot is not None:
                boot.last_line = self._line
                w = self._w
                if w.follow_open:
                    self._follow(parsed)
            if (boot is None or boot.status is BootStatus.STARTING) and parsed.prefixed and not parsed.known:
                self._unrecognised(boot, parsed.text)
            self._recent.append(parsed.text)
            return BootDelta()
        upd = BootDelta()
        for ev in events:
            if isinstance(ev, BootBoundary):
                boot = self._boundary(ev, ts, upd, any(isinstance(e, FailureText) for e in events))
        if boot is None:
            if parsed.engine is None:
                self._recent.append(parsed.text)
                return upd
            if all(type(e) is PhaseMark and e.inferred for e in events):
                self._pending.extend((e, ts) for e in events if isinstance(e, PhaseMark))
                self._recent.append(parsed.text)
                return upd
            if all(type(e) is Serving for e in events):
                # a serving line with no start before it: a server up since before the log
                # begins (a fragment, a rotated log) serves; it never "starts" here
                boot = self._serving_boot(ts, upd, "the log begins while it serves")
            else:
                boot = self._new_boot(ts, upd)
            if self._pending:
                pending = list(self._pending)
                self._pending.clear()
                if any(isinstance(e, FailureText) for e in events) and not any(
                    isinstance(e, BootBoundary | Flags) for e in events
                ):
                    for mark, mts in pending:  # a fragment: its stack says where it failed
                        self._phase(boot, mark, mts, upd, mts is not None)
        w = self._w
        boot.last_line = self._line
        if parsed.engine is not None and boot.engine is Engine.UNKNOWN:
            boot.engine = parsed.engine
        rank = parsed.rank
        if rank is not None and parsed.engine is not None and rank not in w.rank_set and len(w.rank_set) < MAX_RANKS:
            w.rank_set.add(rank)
            boot.ranks = sorted(w.rank_set, key=lambda r: (rank_sort_key(r), r))
        metrics_touched = False
        for ev in events:
            if isinstance(ev, Metric):
                self._metric(boot, ev, rank)
                if ev.model is Model.TARGET and ev.name in _METRICS_INPUTS:
                    metrics_touched = True
            elif isinstance(ev, PhaseMark):
                self._phase(boot, ev, ts, upd, timed)
            elif isinstance(ev, Serving):
                self._serving(boot, ev, rank)
                upd.serving = True
            elif isinstance(ev, Progress):
                self._progress(boot, ev, ts, upd, timed)
            elif isinstance(ev, FailureText):
                self._failure_text(boot, ev, ts, parsed, upd)
            elif isinstance(ev, Flags):
                boot.flags.update(ev.values)
                metrics_touched = True
            elif isinstance(ev, CaptureSizes):
                if ev.model is Model.TARGET and not boot.capture_bs:
                    boot.capture_bs = list(ev.sizes)[:MAX_TRAIL]
            elif isinstance(ev, Warning_):
                if len(boot.warnings) < MAX_WARNINGS:
                    boot.warnings.append(ev.text[:MAX_TRACEBACK_LINE_CHARS])
            elif isinstance(ev, VersionHint):
                self._version(boot, ev.version)
        if metrics_touched:
            self._refresh_metrics(boot)
            upd.metrics_changed = True
        if w.follow_open and w.best_line != self._line:
            self._follow(parsed)
        self._recent.append(parsed.text)
        return upd

    def _workers(self, boot: Boot | None, events: tuple[LogEvent, ...]) -> tuple[LogEvent, ...]:
        """Put the line's newly seen Ray workers on their nodes (none before a boot); the line's
        other events."""
        rest: list[LogEvent] = []
        for e in events:
            if type(e) is not WorkerNode:
                rest.append(e)
                continue
            if boot is None:
                continue
            ip = e.ip or ""
            if ip not in boot.nodes and len(boot.nodes) >= MAX_RANKS:
                continue
            procs = boot.nodes.setdefault(ip, {})
            if e.process not in procs and len(procs) < MAX_RANKS:
                procs[e.process] = None
                self._w.node_of[e.process] = ip
        return tuple(rest)

    def _unrecognised(self, boot: Boot | None, text: str) -> None:
        """A line no rule recognised: kept by shape when it looks like startup information (the
        lines before any boot go to the tracker's own list)."""
        if not looks_like_startup(text):
            return
        shape = shape_of(text)
        index = self._shapes if boot is None else self._w.shapes
        store = self.unrecognised if boot is None else boot.unrecognised
        known = index.get(shape)
        if known is not None:
            known.count += 1
        elif len(store) < MAX_UNRECOGNISED:
            known = index[shape] = UnrecognisedShape(shape, 1, self._line, text[:MAX_TRACEBACK_LINE_CHARS])
            store.append(known)

    def all_unrecognised(self) -> list[UnrecognisedShape]:
        """Every boot's unrecognised startup lines and those before any boot, one entry per shape."""
        merged: dict[str, UnrecognisedShape] = {}
        for item in [*self.unrecognised, *(u for b in self.boots for u in b.unrecognised)]:
            have = merged.get(item.shape)
            if have is None:
                merged[item.shape] = UnrecognisedShape(item.shape, item.count, item.first_line, item.text)
            else:
                have.count += item.count
                have.first_line = min(have.first_line, item.first_line)
        return sorted(merged.values(), key=lambda u: u.first_line)

    def finish(self) -> None:
        """End of input: a boot whose log ends on an exception (no fatal line yet) is failed."""
        boot = self.current
        if boot is None or boot.status is not BootStatus.STARTING:
            return
        if any(e.ft.specificity >= 2 for e in self._w.evidence):
            self._fail(boot, self._w.evidence[-1].ts or self._last_ts)

    # ---- the server process is gone (kvtui.liveness) ----------------------------------------
    def _server_exit(self, ev: ServerExit, ts: datetime | None, parsed: ParsedLine) -> BootDelta:
        """The backend saw the server process gone. A starting boot is failed: by the evidence
        it left (as at the end of input), else kind ``crash`` — or ``bad_args`` when its last
        lines are an argparse refusal — with "the server process exited" and the last lines as
        context. A ready boot with no error since is stopped (its end is all that is known). A
        process that exited before any boot line is a boot of its own, failed; one that was
        already gone when following began ends only a boot that is still open."""
        upd = BootDelta()
        ts = self._exit_ts(ts)
        boot = self.current
        if ev.stopped:
            return self._stopped_from_outside(boot, ts, upd)
        context = list(self._recent)[-EXIT_CONTEXT_LINES:]
        if boot is None or boot.status in (BootStatus.FAILED, BootStatus.STOPPED):
            idle = self._idle_lines  # the lines before this record that no boot took
            if ev.at_start or (boot is not None and idle <= 0):
                return upd
            # lines no boot line began (a traceback at import, a refused command line), or none
            context = context[-idle:] if idle > 0 else []
            start = self._idle_ts if idle > 0 else ts
            boot = self._new_boot(start, upd)
            self._phase(boot, PhaseMark(Phase.LAUNCH), start, upd)
        boot.last_line = self._line
        w = self._w
        if w.stopped_by_operator:
            return upd
        serious = any(e.ft.specificity >= 2 for e in w.evidence)
        if boot.status is BootStatus.READY:
            if not serious:
                self._stop(boot, ts)
                upd.phase_changed = True
                return upd
        elif not serious:
            kind, message, hint = exit_diagnosis(context, parsed.text)
            ft = FailureText(message, kind, fatal=True, specificity=2, hint=hint)
            evidence = _Evidence(ft, w.activity, ts, [c[:MAX_TRACEBACK_LINE_CHARS] for c in context], True)
            if len(w.evidence) >= MAX_EVIDENCE:
                w.evidence.pop(0)
            w.evidence.append(evidence)
            w.best = evidence
            w.best_line = self._line
            w.follow = []
            w.follow_open = False
        self._fail(boot, ts)
        upd.failed = True
        return upd

    def _stopped_from_outside(self, boot: Boot | None, ts: datetime | None, upd: BootDelta) -> BootDelta:
        """The server was stopped, not crashed (a kube pod deleted: SIGTERM, its shutdown, exit 0):
        an open boot is stopped (failed only by the evidence it left before); lines no boot took
        (the old server's shutdown seen by a next-boot follower) make no boot."""
        if boot is None or boot.status in (BootStatus.FAILED, BootStatus.STOPPED):
            return upd
        boot.last_line = self._line
        if boot.status is BootStatus.STARTING and any(e.ft.specificity >= 2 for e in self._w.evidence):
            self._fail(boot, ts)
            upd.failed = True
            return upd
        self._stop(boot, ts)
        upd.phase_changed = True
        return upd

    def _exit_ts(self, ts: datetime | None) -> datetime | None:
        """The exit's time, naive or aware like the log's own (they are compared)."""
        last = self._last_ts
        if ts is None or last is None:
            return ts or last
        if (ts.tzinfo is None) != (last.tzinfo is None):
            ts = ts.astimezone().replace(tzinfo=None) if last.tzinfo is None else ts.astimezone()
        return max(ts, last)

    # ---- boots --------------------------------------------------------------------------------
    def _new_boot(self, ts: datetime | None, upd: BootDelta) -> Boot:
        boot = Boot(engine=self.engine_hint or Engine.UNKNOWN, first_line=self._line, last_line=self._line)
        boot.started_at = ts
        self.boots.append(boot)
        self._idle_lines = 0
        if self.max_boots is not None and len(self.boots) > self.max_boots:
            del self.boots[: len(self.boots) - self.max_boots]
        self._w = _Work()
        upd.new_boot = True
        return boot

    # ---- a server up for days (kvtui.engines.source_records) --------------------------------
    def _serving_boot(self, ts: datetime | None, upd: BootDelta, reason: str) -> Boot:
        """A boot whose start is not in the log: it serves (status ready, no phase lines)."""
        boot = self._new_boot(None, upd)
        boot.status = BootStatus.READY
        boot.phase = Phase.READY  # serving: a failure now is a serving one (oom_runtime, …)
        boot.start_missing = reason
        upd.phase_changed = True
        return boot

    def _source_said(self, ev: LogEvent, parsed: ParsedLine) -> BootDelta:
        """What the follower said about the log itself: lines it skipped (``LogGap``), a start it
        could not find (``StartMissing``), the running process's command line (``RunningCommand``)."""
        upd = BootDelta()
        boot = self.current
        if isinstance(ev, LogGap):
            if boot is not None:
                boot.last_line = self._line
                boot.skipped_lines += ev.lines or 0
                if len(boot.skipped_where) < 16:
                    boot.skipped_where.append(ev.where)
                upd.metrics_changed = True
            return upd
        open_boot = boot is not None and boot.status in (BootStatus.STARTING, BootStatus.READY)
        if isinstance(ev, StartMissing):
            if open_boot and boot is not None and (boot.phases or boot.flags or boot.start_missing is not None):
                return upd  # a start was read after all, or this is said twice
            if boot is not None and boot.status is BootStatus.STARTING and not boot.phases:
                boot.status = BootStatus.READY  # only serving lines so far
                boot.phase = Phase.READY
                boot.start_missing = ev.reason or "not in the log"
                upd.phase_changed = True
                return upd
            self._serving_boot(None, upd, ev.reason or "not in the log")
            return upd
        assert isinstance(ev, RunningCommand)
        if boot is None or not open_boot:
            boot = self._serving_boot(None, upd, "not in the log")
        boot.last_line = self._line
        if boot.flags and boot.flags_from == "log":
            return upd  # the engine's own dump says more than the command line
        try:
            cmd = parse_argv(ev.argv)
        except FlagError:
            return upd
        if boot.engine is Engine.UNKNOWN:
            boot.engine = cmd.engine
        flags: dict[str, object] = {}
        for name, value in cmd.values().items():
            flags[dest_name(cmd.engine, name)] = _literal(value)
        model = cmd.model
        if model is not None:
            flags.setdefault("model_path" if cmd.engine is Engine.SGLANG else "model", model)
        boot.flags = flags
        boot.flags_from = "process"
        boot.process_pid = ev.pid
        upd.metrics_changed = True
        return upd

    def _end_replaced(self, boot: Boot, ts: datetime | None) -> None:
        """The boot is replaced by a new one (the next start says this one is over)."""
        if boot.status is BootStatus.STARTING:
            if any(e.ft.specificity >= 2 for e in self._w.evidence):
                self._fail(boot, ts)
            else:
                self._stop(boot, ts)
        if boot.ended_at is None:
            boot.ended_at = ts

    def _boundary(self, ev: BootBoundary, ts: datetime | None, upd: BootDelta, failed_exit: bool) -> Boot | None:
        boot = self.current
        kind = ev.kind
        if kind is BoundaryKind.STARTED:
            if boot is None:
                boot = self._new_boot(ts, upd)
            elif ev.new_args:
                past_launch = boot.phase is not None and PHASE_RANK[boot.phase] > PHASE_RANK[Phase.LAUNCH]
                if (
                    boot.status is not BootStatus.STARTING
                    or past_launch
                    or self._w.stopped_by_operator
                    or (boot.flags and (boot.phases or boot.failure))
                ):
                    self._end_replaced(boot, ts)
                    boot = self._new_boot(ts, upd)
            else:
                if boot.phases or boot.flags or boot.failure or boot.status is not BootStatus.STARTING:
                    self._end_replaced(boot, ts)
                    boot = self._new_boot(ts, upd)
            if not boot.phases and ts is not None and boot.started_at is not None:
                # a boot opened by stray timed lines (a follower that starts at the log's end reads
                # the old server's last traceback first) starts here, as for a reader of the whole
                # boot: its key in the history (a boot opened by untimed lines keeps none: keyed by
                # its first line's place)
                boot.started_at = ts
            if not ev.new_args:
                self._phase(boot, PhaseMark(Phase.LAUNCH), ts, upd)
            return boot
        if boot is None:
            return None
        if kind is BoundaryKind.STOPPING:
            self._w.stopped_by_operator = True
            self._w.follow_open = False
            if boot.status is BootStatus.STARTING:
                self._stop(boot, ts)
                upd.phase_changed = True  # its running phase ended: live views must show "stopped"
            if boot.ended_at is None:
                boot.ended_at = ts
        elif kind is BoundaryKind.RESTART_SCHEDULED:
            if boot.status is BootStatus.STARTING and not self._w.stopped_by_operator:
                self._fail(boot, ts)
                upd.failed = True
        elif kind is BoundaryKind.PROCESS_EXITED:
            if boot.status is BootStatus.STARTING and not failed_exit and not self._w.evidence:
                # a clean exit; a failed exit carries a FailureText on the same line
                self._stop(boot, ts)
                upd.phase_changed = True
            if boot.ended_at is None:
                boot.ended_at = ts
        return boot

    def _stop(self, boot: Boot, ts: datetime | None) -> None:
        """The boot is over without a failure: stopped, its running phases ended at ``ts``, and
        its end ``ts`` unless one was seen before."""
        boot.status = BootStatus.STOPPED
        self._close_open(boot, ts)
        if boot.ended_at is None:
            boot.ended_at = ts

    # ---- phases -------------------------------------------------------------------------------
    def _close_open(self, boot: Boot, ts: datetime | None) -> None:
        """A stop or a failure ends every running phase at ``ts``."""
        w = self._w
        for key, s in w.spans.items():
            if s.end is None and key not in w.explicit_end:
                w.closed_at[key] = ts
                w.closed_by.pop(key, None)
                self._settle(key)

    def _settle(self, key: tuple[Phase, Model]) -> None:
        """A span's end: its last explicit end line, else when it was cut short (the start of a
        later phase, a stop, a failure), else still running. Independent of the line order."""
        w = self._w
        s = w.spans[key]
        end = w.explicit_end.get(key)
        closed = end is not None
        if end is None:
            closer = w.closed_by.get(key)
            if closer is not None:
                end = w.spans[closer].start
                closed = True
            elif key in w.closed_at:
                end = w.closed_at[key]
                closed = True
        if closed:
            if end is None or (s.start is not None and end < s.start):
                end = s.start  # no time on the closing line, or a stamp before the start
            s.end = end
        else:
            s.end = None
        self._set_seconds(s)

    def _set_seconds(self, s: PhaseSpan) -> None:
        """Wall time over all ranks; a rank's own printed ``elapsed=`` is a lower bound that also
        fixes the 1-second resolution of SGLang's stamps."""
        printed = self._w.printed.get((s.name, s.model))
        if s.end is None:
            s.seconds = None
        elif s.start is not None:
            wall = max((s.end - s.start).total_seconds(), 0.0)
            s.seconds = round(max(wall, printed) if printed is not None else wall, 3)
        else:
            s.seconds = printed

    def _phase(self, boot: Boot, ev: PhaseMark, ts: datetime | None, upd: BootDelta, timed: bool = True) -> None:
        """``timed`` is False when the line had no time of its own (tqdm bars, traceback frames):
        ``ts`` is then the previous line's, good enough to open a phase but never to move one."""
        w = self._w
        if boot.status is not BootStatus.STARTING:
            # a fragment whose first line was a fatal wrapper: its stack still says where it failed
            if (
                ev.inferred
                and boot.status is BootStatus.FAILED
                and not w.real_phase
                and not ev.end
                and (boot.phase is None or PHASE_RANK[ev.phase] > PHASE_RANK[boot.phase])
            ):
                w.activity = boot.phase = ev.phase
            return  # late lines of a finished boot do not move its phases
        if ev.inferred:
            if w.real_phase or ev.end:
                return  # the engine's own phase lines say where the boot is
            if ev.model is Model.TARGET and boot.phase is not None and PHASE_RANK[ev.phase] <= PHASE_RANK[boot.phase]:
                return  # an outer frame's phase after an inner one's: no step back
        elif ev.phase is not Phase.LAUNCH:
            w.real_phase = True
        key = (ev.phase, ev.model)
        span = w.spans.get(key)
        if ev.seconds is not None:
            prev = w.printed.get(key)
            if prev is None or ev.seconds > prev:
                w.printed[key] = ev.seconds
        if ev.end:
            if span is None:
                if ev.inferred or any(s.name is not Phase.LAUNCH for s in boot.phases):
                    return
                # a fragment's first phase line closes a phase it never saw open: it was in it
                self._phase(boot, PhaseMark(ev.phase, ev.model), ts, upd, timed)
                span = w.spans.get(key)
                if span is None:
                    return
            if ts is not None:
                old = w.explicit_end.get(key)
                if old is None or ts > old:
                    w.explicit_end[key] = ts
            elif key not in w.explicit_end and span.end is None:
                w.closed_at[key] = None  # ended, but the line has no time
            self._settle(key)
            upd.phase_changed = True
            return
        rank_new = PHASE_RANK[ev.phase]
        if span is None:
            span = PhaseSpan(ev.phase, ev.model, start=ts)
            for k, s in w.spans.items():
                if (
                    s.end is None
                    and k not in w.explicit_end
                    and (
                        PHASE_RANK[s.name] < rank_new
                        or (ev.model is Model.TARGET and rank_new >= PHASE_RANK[Phase.HTTP_UP])
                    )
                ):
                    w.closed_by[k] = key
                    w.closed_at.pop(k, None)
            boot.phases.append(span)
            w.spans[key] = span
            for k, closer in list(w.closed_by.items()):
                if closer == key:
                    self._settle(k)
            if not (ev.model is Model.TARGET and boot.phase is not None and rank_new < PHASE_RANK[boot.phase]):
                # a target phase earlier than the one reached (another process's late line) does
                # not move the boot back: a failure now still belongs to the phase reached
                w.activity = ev.phase
            if ev.model is Model.TARGET and (boot.phase is None or rank_new > PHASE_RANK[boot.phase]):
                boot.phase = ev.phase
            upd.phase_changed = True
            if ev.phase is Phase.READY and not ev.inferred:
                boot.status = BootStatus.READY
                upd.ready = True
            return
        if not timed:
            return
        if ts is not None and (span.start is None or ts < span.start):
            span.start = ts
            self._settle(key)
            for k, closer in w.closed_by.items():
                if closer == key:
                    self._settle(k)  # the spans it cut short end earlier too
        if span.end is not None:
            # a repeated start (a second capture, another rank): reopen only the latest phase
            latest = max((PHASE_RANK[s.name] for s in boot.phases if s.model is ev.model), default=-1)
            if rank_new >= latest and (ts is None or span.end is None or ts >= span.end):
                w.explicit_end.pop(key, None)
                w.closed_by.pop(key, None)
                w.closed_at.pop(key, None)
                span.end = None
                span.seconds = None
                w.activity = ev.phase
                upd.phase_changed = True

    def _progress(self, boot: Boot, ev: Progress, ts: datetime | None, upd: BootDelta, timed: bool) -> None:
        span = self._w.spans.get((ev.phase, ev.model))
        if span is None:
            if boot.status is not BootStatus.STARTING:
                return
            self._phase(boot, PhaseMark(ev.phase, ev.model), ts, upd, timed)
            span = self._w.spans.get((ev.phase, ev.model))
            if span is None:
                return
        span.progress_done = ev.done
        span.progress_total = ev.total
        upd.phase_changed = True

    # ---- figures ------------------------------------------------------------------------------
    def _metric(self, boot: Boot, ev: Metric, rank: str | None) -> None:
        name, v, model = ev.name, ev.value, ev.model
        if not math.isfinite(v):
            return
        rk = rank or "main"
        facts = boot.facts if model is Model.TARGET else boot.draft_facts
        if model is Model.TARGET:
            if name == Fact.CAPTURE_BS:
                self._w.pending_bs = int(v)
            elif name == Fact.CAPTURE_AVAIL_GIB and self._w.pending_bs is not None:
                entry = (self._w.pending_bs, v)
                self._w.pending_bs = None
                trail = boot.capture_trail
                if (not trail or trail[-1] != entry) and len(trail) < MAX_TRAIL:
                    trail.append(entry)
        if name in _POOL_METRICS:
            self._pool_metric(boot, facts, name, v, model, rk)
            return
        if model is Model.TARGET:
            rf = self._rank_dict(boot.rank_facts, rk)
            if rf is not None:
                old = rf.get(name)
                if old is None or (name not in _MIN_METRICS and name not in _MAX_METRICS):
                    rf[name] = v
                elif name in _MIN_METRICS:
                    rf[name] = min(old, v)
                else:
                    rf[name] = max(old, v)
        if name in _MIN_METRICS:
            old = facts.get(name)
            facts[name] = v if old is None else min(old, v)
        elif name in _MAX_METRICS:
            old = facts.get(name)
            facts[name] = v if old is None else max(old, v)
        else:
            self._lowest_rank_fact(facts, model, name, v, rank)

    @staticmethod
    def _rank_dict(store: dict[str, dict[Fact, float]], rk: str) -> dict[Fact, float] | None:
        rf = store.get(rk)
        if rf is None:
            if len(store) >= MAX_RANKS:
                return None
            rf = store[rk] = {}
        return rf

    def _lowest_rank_fact(self, facts: dict[Fact, float], model: Model, name: Fact, v: float, rank: str | None) -> None:
        """Sizes and counts: the lowest rank's (TP0's) latest value, whatever the line order."""
        key = rank_sort_key(rank)
        src = self._w.fact_src.get((model, name))
        if src is None or key <= src:
            facts[name] = v
            self._w.fact_src[(model, name)] = key

    def _pool_metric(self, boot: Boot, facts: dict[Fact, float], name: Fact, v: float, model: Model, rk: str) -> None:
        """Per-rank pools: K+V lines add up (hybrid pools), tokens take the largest pool, graph
        captures add up. The boot's figure: the lowest rank's pool; the max over ranks of graphs."""
        store = boot.rank_facts if model is Model.TARGET else self._w.draft_ranks
        sums = self._rank_dict(store, rk)
        if sums is None:
            return
        if name == Fact.KV_TOKENS:
            old = sums.get(name)
            sums[name] = v if old is None else max(old, v)
        elif name == Fact.KV_CACHE_GIB and boot.engine is Engine.VLLM:
            sums[name] = v  # vLLM prints its KV budget once per worker (and may repeat it)
        else:
            sums[name] = round(sums.get(name, 0.0) + v, 6)
        if name == Fact.GRAPH_MEM_GIB:
            facts[name] = max(r[name] for r in store.values() if name in r)
        else:
            self._lowest_rank_fact(facts, model, name, sums[name], None if rk == "main" else rk)

    def _serving(self, boot: Boot, ev: Serving, rank: str | None) -> None:
        w = self._w
        rk = rank or "main"
        if rk not in w.serving and len(w.serving) >= MAX_RANKS:
            return
        w.serving[rk] = ev
        live = boot.live
        if ev.tokens is not None and boot.start_missing is not None:
            self._estimate_pool(boot, ev)
        if len(w.serving) == 1:
            live.token_usage = ev.token_usage
            live.running_reqs = ev.running_reqs
            live.queue_reqs = ev.queue_reqs
            live.gen_throughput = round(ev.gen_throughput, 3) if ev.gen_throughput is not None else None
            boot.metrics.token_usage = live.token_usage
            return
        vals = w.serving.values()
        tu = [s.token_usage for s in vals if s.token_usage is not None]
        live.token_usage = max(tu) if tu else None
        rr = [s.running_reqs for s in vals if s.running_reqs is not None]
        live.running_reqs = sum(rr) if rr else None
        qr = [s.queue_reqs for s in vals if s.queue_reqs is not None]
        live.queue_reqs = sum(qr) if qr else None
        gt = [s.gen_throughput for s in vals if s.gen_throughput is not None]
        live.gen_throughput = round(sum(gt), 3) if gt else None
        boot.metrics.token_usage = live.token_usage

    @staticmethod
    def _estimate_pool(boot: Boot, ev: Serving) -> None:
        """The pool from a Decode line (``#token: N, token usage: U``, U printed to 2 decimals):
        N / U, kept from the line with the highest usage (the smallest relative rounding error)."""
        u, n = ev.token_usage, ev.tokens
        if u is None or n is None or u < 0.05 or n <= 0:
            return
        live = boot.live
        err = round(n / u - n / (u + 0.005))
        if live.pool_tokens_err is not None and live.pool_tokens_err <= err:
            return
        live.pool_tokens_est = round(n / u)
        live.pool_tokens_err = err

    def _version(self, boot: Boot, version: str) -> None:
        w = self._w
        inferred = version.startswith(">=")
        if not inferred:
            if not w.version_explicit:
                boot.version_hint = version
                w.version_explicit = True
            return
        if w.version_explicit:
            return
        if boot.version_hint is None or version_key(version) > version_key(boot.version_hint):
            boot.version_hint = version

    def _refresh_metrics(self, boot: Boot) -> None:
        refresh_metrics(boot)

    # ---- failures -----------------------------------------------------------------------------
    def _before_context(self) -> list[str]:
        recent = self._recent
        for i in range(len(recent) - 1, -1, -1):
            if _TB_HEADER in recent[i]:
                return [s[:MAX_TRACEBACK_LINE_CHARS] for s in list(recent)[i:]]
        return []

    def _failure_text(
        self, boot: Boot, ft: FailureText, ts: datetime | None, parsed: ParsedLine, upd: BootDelta
    ) -> None:
        w = self._w
        if w.stopped_by_operator or boot.status is BootStatus.STOPPED:
            return
        if len(w.evidence) < MAX_EVIDENCE:
            before = self._before_context() if ft.specificity >= 2 else []
            ev = _Evidence(ft, w.activity, ts, before, parsed.engine is not None)
            w.evidence.append(ev)
            if w.best is None or ft.specificity > w.best.ft.specificity:
                w.best = ev
                w.best_line = self._line
                w.follow = []
                w.follow_open = True
        if ft.fatal and boot.status in (BootStatus.STARTING, BootStatus.READY):
            self._fail(boot, ts)
            upd.failed = True
        elif boot.status is BootStatus.FAILED:
            self._build_failure(boot)

    def _follow(self, parsed: ParsedLine) -> None:
        w = self._w
        if parsed.prefixed or len(w.follow) >= MAX_TRACEBACK_LINES:
            w.follow_open = False
            return
        w.follow.append(parsed.text[:MAX_TRACEBACK_LINE_CHARS])
        if self.current is not None and self.current.status is BootStatus.FAILED:
            self._build_failure(self.current)

    def _fail(self, boot: Boot, ts: datetime | None) -> None:
        boot.status = BootStatus.FAILED
        self._close_open(boot, ts)
        boot.ended_at = ts
        self._build_failure(boot)

    def _build_failure(self, boot: Boot) -> None:
        w = self._w
        evidence = w.evidence
        decider: _Evidence | None = None
        kind = FailureKind.UNKNOWN
        fragment_oom = False
        torch_oom = False  # the kind came from a CUDA out-of-memory in a phase, not the engine's own words
        for e in evidence:  # 1. the text decides
            k = e.ft.kind
            if k is not None and k not in (FailureKind.NCCL, FailureKind.CRASH, FailureKind.UNKNOWN):
                decider, kind = e, k
                break
        if decider is None:  # 2. a CUDA OOM: the phase decides
            for e in evidence:
                if _is_oom(e.ft.text):
                    decider = e
                    by_phase = _DEFAULT_OOM_PHASE_KIND.get(e.phase) if e.phase is not None else None
                    if by_phase is None and "weight" in e.ft.text.lower():
                        by_phase = FailureKind.OOM_WEIGHTS
                    elif by_phase is None and boot.start_missing is not None:
                        by_phase = FailureKind.OOM_RUNTIME  # it served (its start is not in the log)
                    elif by_phase is None and not boot.phases:
                        # a fragment (the traceback's end, nothing of its boot): in which phase the
                        # memory ran out is not in the excerpt
                        by_phase = FailureKind.UNKNOWN
                        fragment_oom = True
                    elif by_phase is None:
                        by_phase = FailureKind.GPU_BUSY  # before any weights: memory was already taken
                    kind = by_phase
                    torch_oom = True
                    break
        if decider is None:  # 3. NCCL
            for e in evidence:
                if e.ft.kind is FailureKind.NCCL:
                    decider, kind = e, FailureKind.NCCL
                    break
        best = w.best
        if decider is None:
            # 4. the engine said something died: a crash; only a process exit: unknown
            decider = best
            if any(e.engine for e in evidence):
                kind = FailureKind.CRASH
        msg_ev = decider if decider is not None and decider.ft.specificity >= 2 else best
        if best is not None and msg_ev is not None and best.ft.specificity > msg_ev.ft.specificity + 1:
            msg_ev = best
        phase = decider.phase if decider is not None else w.activity
        if phase is None:
            phase = boot.phase
        # a refusal says where it happened, whatever phase line came last (or none did): the
        # arguments are checked at launch, the pool's size against the context once it is sized
        phase = _KIND_PHASE.get(kind, phase)
        # The line that decided the kind gives the hint. Another line's hint (systemd's SIGKILL
        # note after SGLang killed its own process tree) only speaks when nothing more specific did.
        hint = decider.ft.hint if decider is not None else None
        if hint is None and kind in (FailureKind.CRASH, FailureKind.UNKNOWN):
            hint = next((e.ft.hint for e in evidence if e.ft.hint), None)
        if hint is None and fragment_oom:
            hint = (
                "out of GPU memory, but the excerpt does not show in which phase (its start is missing): "
                "include the lines before the traceback to tell weights, KV pool, graph capture or serving apart"
            )
        if hint is None and torch_oom and kind is FailureKind.OOM_KV_ALLOCATE and boot.engine is not Engine.VLLM:
            # not "Not enough memory" (a budget too small: raise the fraction) but torch failing to
            # allocate the pools the engine sized: they outgrew what the weights left, so the other way
            mfs = boot.flags.get("mem_fraction_static")
            now = f" (now {mfs})" if mfs is not None else ""
            hint = (f"allocating the KV pool and the request table ran out of GPU memory: lower "
                    f"--mem-fraction-static{now}, or --context-length / --max-running-requests")
        if hint is None:
            said = None
            if decider is not None:  # the refusal's own words, with the lines that continue it
                said = "\n".join([decider.ft.text, *(w.follow if decider is best else ())])
            hint = hint_for(kind, boot.engine, boot.flags, boot.facts, phase=phase, served=bool(w.serving),
                            message=said)
            if kind is not FailureKind.GPU_BUSY and any(
                "unbalanced" in s or "occupied by other processes" in s for s in boot.warnings
            ):
                hint += " (the GPUs were unbalanced at start: other processes may hold memory)"
        message = msg_ev.ft.text if msg_ev is not None else "the server exited"
        if kind in (FailureKind.CRASH, FailureKind.UNKNOWN) and "root cause above" in message.lower():
            # vLLM's wrapper (`Engine core initialization failed. See root cause above.`) with the
            # engine's own error not in the log read (an excerpt cut below it)
            hint = (
                "this is the wrapper of the engine's own error, which is printed above these lines "
                "(\"see root cause above\"): include the lines before it to get the cause and its hint"
            )
        tb: list[str] = []
        if msg_ev is not None:
            before = msg_ev.before
            if before and before[-1] == message:
                before = before[:-1]
            tb = [*before, message[:MAX_TRACEBACK_LINE_CHARS]]
            if msg_ev is best:
                tb.extend(w.follow)
            if len(tb) > MAX_TRACEBACK_LINES:
                tb = tb[-MAX_TRACEBACK_LINES:]
        boot.failure = Failure(kind=kind, phase=phase, message=message, traceback=tb, hint=hint)


def _literal(value: str | bool) -> object:
    """A command-line value as the engine's dump would carry it (``0.88`` -> 0.88, ``8`` -> 8)."""
    if isinstance(value, bool):
        return value
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    if value in ("None", "none"):
        return None
    return value
