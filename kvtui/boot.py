"""Boots: one server start each, built from parsed lines by ``BootTracker``.

Pure core: no textual, no asyncssh, no I/O.

CONTRACT (other modules rely on these names; change them only together with their users):
- ``Boot`` fields below, ``Boot.to_json()`` (the ``kvtui replay --json`` boot object),
- ``BootTracker.feed(parsed) -> BootUpdate``, ``BootTracker.boots``, ``BootTracker.current``,
  ``BootTracker.finish()`` (end of input: a boot that ends on an exception is failed).

How the tracker reads a log:
- **Boots** split at systemd ``Started …`` / ``Stopping …`` / ``Scheduled restart job`` lines,
  at an engine argument dump (SGLang ``server_args=…``, a vLLM banner) once the current boot is
  past launch, and at an argument dump after a finished boot. A boot cut short by a stop is
  ``stopped``; one replaced without a stop is ``failed`` when it ended on an exception, else
  ``stopped``.
- **Phases** are spans over all ranks: start = the first rank's start line, end = the last
  rank's end line (order-independent: min/max of timestamps). A later phase's start closes the
  earlier open ones. A failure or stop closes the running phase; the current phase of a live
  (or ready) boot keeps ``end = None``.
- **Failures** collect evidence (``FailureText``) with the phase each line arrived in. A fatal
  line (``Received sigquit``, ``scheduler died``, a failed systemd exit, vLLM ``EngineCore failed
  to start``) fails the boot; ``finish()`` also fails a boot whose log ends on an exception.
  The kind comes from the text when the text decides it (``Not enough memory`` ->
  ``oom_kv_allocate``, vLLM ``To serve at least one request`` -> ``kv_too_small``, NCCL errors),
  else from the phase (a CUDA OOM in capture -> ``oom_graph_capture``, in weight loading ->
  ``oom_weights``, after ready -> ``oom_runtime``), else ``crash``; ``unknown`` when nothing but
  a process exit was seen.
- **Figures** (target model only in ``metrics``/``facts``; the draft's in ``draft_facts``): avail
  and free figures are the minimum over ranks, graph memory the maximum over ranks of each rank's
  summed captures, sizes and counts the TP0 (lowest rank) value. ``kv_cache_gib`` is one rank's
  target pool (K+V, MLA ``KV size``, or the hybrid ``SWAKVPool`` total) and ``cell_bytes`` that
  pool's bytes / (``#tokens`` + page).
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final

from kvtui import fmt
from kvtui.engines.events import (
    PHASE_RANK,
    BootBoundary,
    BoundaryKind,
    CaptureSizes,
    Engine,
    FailureKind,
    FailureText,
    Flags,
    Metric,
    Model,
    ParsedLine,
    Phase,
    PhaseMark,
    Progress,
    ServerExit,
    Serving,
    VersionHint,
    Warning_,
)
from kvtui.engines.unknown import UnrecognisedShape, looks_like_startup, shape_of
from kvtui.knobs import lookup


class BootStatus(StrEnum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(slots=True)
class PhaseSpan:
    name: Phase
    model: Model = Model.TARGET
    start: datetime | None = None
    end: datetime | None = None
    seconds: float | None = None
    progress_done: int | None = None
    progress_total: int | None = None


@dataclass(slots=True)
class Failure:
    kind: FailureKind
    phase: Phase | None
    message: str
    traceback: list[str] = field(default_factory=list)
    hint: str = ""


@dataclass(slots=True)
class BootMetrics:
    """The figures of ``replay --json`` ``metrics`` (None = not seen). Target model only.

    Avail figures are the minimum over ranks; ``graph_mem_gib`` the maximum;
    ``kv_cache_gib`` one rank's target pool (K+V, or MLA KV size; vLLM: available KV memory);
    ``cell_bytes`` = logged pool bytes / (#tokens + page) for the target pool.
    """

    max_total_num_tokens: int | None = None
    kv_cache_gib: float | None = None
    cell_bytes: int | None = None
    avail_before_load_gib: float | None = None
    avail_after_load_gib: float | None = None
    weights_gib: float | None = None
    avail_after_pool_gib: float | None = None
    graph_mem_gib: float | None = None
    available_gpu_mem_gib: float | None = None
    context_len: int | None = None
    max_running_requests: int | None = None
    max_concurrency: float | None = None
    token_usage: float | None = None


@dataclass(slots=True)
class LiveMetrics:
    """Serving figures after ready (latest values)."""

    token_usage: float | None = None
    running_reqs: int | None = None
    queue_reqs: int | None = None
    gen_throughput: float | None = None


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def _json_safe(value: object, depth: int = 0) -> object:
    """A flag value as JSON can carry it (tuples -> lists, sets -> sorted lists, others -> str)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth > 8:
        return repr(value)
    if isinstance(value, list | tuple):
        return [_json_safe(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [_json_safe(v, depth + 1) for v in value]
        try:
            return sorted(items)  # type: ignore[type-var]
        except TypeError:
            return items
    if isinstance(value, dict):
        return {str(k): _json_safe(v, depth + 1) for k, v in value.items()}
    return repr(value)


@dataclass(slots=True)
class Boot:
    engine: Engine = Engine.UNKNOWN
    version_hint: str | None = None
    status: BootStatus = BootStatus.STARTING
    phase: Phase | None = None  # last *target* phase reached
    phases: list[PhaseSpan] = field(default_factory=list)
    failure: Failure | None = None
    flags: dict[str, object] = field(default_factory=dict)
    metrics: BootMetrics = field(default_factory=BootMetrics)
    live: LiveMetrics = field(default_factory=LiveMetrics)
    ranks: list[str] = field(default_factory=list)
    # --- figures the calculator needs beyond the JSON ones (target model unless named) -------
    # every target Metric seen, aggregated: avail*/free figures -> min over ranks,
    # graph/mem-usage/oom figures -> max, counts and sizes -> the TP0 (or first) value.
    facts: dict[str, float] = field(default_factory=dict)
    # the same for the draft model (speculative decoding), never mixed into ``facts``
    draft_facts: dict[str, float] = field(default_factory=dict)
    # per-rank target figures, e.g. rank_facts["TP3"]["avail_before_load_gib"] ("main": no rank tag)
    rank_facts: dict[str, dict[str, float]] = field(default_factory=dict)
    # CUDA-graph capture trail: (bs, avail_gib) from tqdm `Capturing batches (bs=… avail_mem=…)`
    capture_trail: list[tuple[int, float]] = field(default_factory=list)
    capture_bs: list[int] = field(default_factory=list)  # the `Capture cuda graph bs [...]` list
    # where the boot sits in its source: first and last line numbers (0-based, in feed order)
    first_line: int = 0
    last_line: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # notable non-fatal lines (rank imbalance, token cap ignored, …), bounded
    warnings: list[str] = field(default_factory=list)
    # lines that look like startup information but that no rule recognised, by shape (bounded)
    unrecognised: list[UnrecognisedShape] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The boot object of ``kvtui replay --json`` (see the engine-core issue for the shape)."""
        m = self.metrics
        failure: dict[str, object] | None = None
        if self.failure is not None:
            f = self.failure
            failure = {
                "kind": f.kind.value,
                "phase": f.phase.value if f.phase is not None else None,
                "message": f.message,
                "traceback": list(f.traceback),
                "hint": f.hint,
            }
        return {
            "engine": self.engine.value,
            "version_hint": self.version_hint,
            "status": self.status.value,
            "phase": self.phase.value if self.phase is not None else None,
            "phases": [
                {
                    "name": s.name.value,
                    "model": s.model.value,
                    "start": _iso(s.start),
                    "end": _iso(s.end),
                    "seconds": s.seconds if s.end is not None else None,
                }
                for s in self.phases
            ],
            "failure": failure,
            "flags": {str(k): _json_safe(v) for k, v in self.flags.items()},
            "metrics": {
                "max_total_num_tokens": m.max_total_num_tokens,
                "kv_cache_gib": m.kv_cache_gib,
                "cell_bytes": m.cell_bytes,
                "avail_before_load_gib": m.avail_before_load_gib,
                "avail_after_load_gib": m.avail_after_load_gib,
                "weights_gib": m.weights_gib,
                "avail_after_pool_gib": m.avail_after_pool_gib,
                "graph_mem_gib": m.graph_mem_gib,
                "available_gpu_mem_gib": m.available_gpu_mem_gib,
                "context_len": m.context_len,
                "max_running_requests": m.max_running_requests,
                "max_concurrency": m.max_concurrency,
                "token_usage": m.token_usage,
            },
            "ranks": list(self.ranks),
        }


@dataclass(slots=True)
class BootUpdate:
    """What one ``feed`` changed, for live views: cheap to build, cheap to ignore."""

    new_boot: bool = False  # a new boot started on this line (a restart marker for the log)
    phase_changed: bool = False
    metrics_changed: bool = False
    failed: bool = False
    ready: bool = False
    serving: bool = False


# ---------------------------------------------------------------------------------------------
# Aggregation rules
# ---------------------------------------------------------------------------------------------

MAX_TRACEBACK_LINES: Final = 40
MAX_TRACEBACK_LINE_CHARS: Final = 2000
MAX_EVIDENCE: Final = 64
MAX_TRAIL: Final = 4096
MAX_WARNINGS: Final = 32
MAX_UNRECOGNISED: Final = 256  # shapes of unrecognised startup lines kept per boot
MAX_RANKS: Final = 1024
_RECENT_LINES: Final = 64
_TB_HEADER: Final = "Traceback (most recent call last)"

_MIN_METRICS: Final = frozenset(
    {
        "avail_before_load_gib",
        "avail_after_load_gib",
        "avail_after_pool_gib",
        "graph_begin_avail_gib",
        "avail_after_graph_gib",
        "capture_avail_gib",
        "available_gpu_mem_gib",
        "gpu_free_gib",
        "oom_free_gib",
        "dsv4_available_gib",
    }
)
_MAX_METRICS: Final = frozenset(
    {
        "weights_gib",
        "init_mem_usage_gib",
        "oom_tried_gib",
        "oom_capacity_gib",
        "kv_needed_gib",
        "gpu_total_gib",
        "compile_seconds",
        "load_seconds",
        "init_engine_seconds",
        "mamba_cache_gib",
        "graph_pool_actual_gib",
        "hicache_host_gib",
    }
)
_POOL_METRICS: Final = frozenset({"kv_cache_gib", "kv_tokens", "swa_kv_gib", "graph_mem_gib"})

# target figures that feed ``BootMetrics`` (others only update ``facts``)
_METRICS_INPUTS: Final = frozenset(
    {
        "max_total_num_tokens",
        "full_tokens",
        "kv_tokens",
        "swa_kv_gib",
        "kv_cache_gib",
        "dsv4_bytes_per_full_token",
        "avail_before_load_gib",
        "avail_after_load_gib",
        "weights_gib",
        "avail_after_pool_gib",
        "graph_mem_gib",
        "available_gpu_mem_gib",
        "context_len",
        "max_running_requests",
        "max_concurrency",
    }
)
_RANK_TAG_RE = re.compile(r"([A-Za-z_]*?)(\d+)")
_DEFAULT_OOM_PHASE_KIND: Final = {
    Phase.LOAD_WEIGHTS: FailureKind.OOM_WEIGHTS,
    Phase.COMPILE: FailureKind.OOM_KV_ALLOCATE,
    Phase.KV_ALLOCATE: FailureKind.OOM_KV_ALLOCATE,
    Phase.GRAPH_CAPTURE: FailureKind.OOM_GRAPH_CAPTURE,
    Phase.HTTP_UP: FailureKind.OOM_RUNTIME,
    Phase.READY: FailureKind.OOM_RUNTIME,
}


def rank_sort_key(rank: str | None) -> tuple[int, ...]:
    """Natural order of rank tags: the main process first, then ``DP0 TP0`` < ``DP0 TP1`` < …"""
    if rank is None or rank == "main":
        return (-1,)
    nums = [int(n) for _, n in _RANK_TAG_RE.findall(rank)]
    return (len(nums), *nums) if nums else (1 << 30,)


def fact_rule(name: str) -> str:
    """How a figure is aggregated over ranks (and over nodes): ``min`` (free memory), ``max``
    (graph memory, weights, …) or ``lowest`` (sizes and counts: the lowest rank's value)."""
    if name in _MIN_METRICS:
        return "min"
    if name in _MAX_METRICS or name == "graph_mem_gib":
        return "max"
    return "lowest"


def refresh_metrics(boot: Boot) -> None:
    """``boot.metrics`` from ``boot.facts`` (and flags, live figures): the tracker calls it after
    each figure; a merge of several boots (``kvtui.nodes``) calls it on the merged facts."""
    f = boot.facts
    m = boot.metrics

    def as_int(name: str) -> int | None:
        v = f.get(name)
        return int(v) if v is not None else None

    tokens = as_int("max_total_num_tokens")
    pool_tokens = f.get("full_tokens")
    if pool_tokens is None:
        pool_tokens = f.get("kv_tokens")
    if tokens is None and pool_tokens is not None and pool_tokens > 0:
        tokens = int(pool_tokens)
    m.max_total_num_tokens = tokens
    kv = f.get("swa_kv_gib")
    if kv is None:
        kv = f.get("kv_cache_gib")
    m.kv_cache_gib = round(kv, 4) if kv is not None else None
    m.cell_bytes = None
    n = pool_tokens if pool_tokens is not None and pool_tokens > 0 else tokens
    if kv is not None and n is not None and n > 0 and kv > 0:
        if boot.engine is Engine.VLLM:
            m.cell_bytes = round(kv * (1 << 30) / n)
        else:
            page = boot.flags.get("page_size")
            pg = page if isinstance(page, int) and not isinstance(page, bool) and page > 0 else 1
            m.cell_bytes = round(kv * (1 << 30) / (n + pg))
    elif f.get("dsv4_bytes_per_full_token") is not None:
        m.cell_bytes = round(f["dsv4_bytes_per_full_token"])
    m.avail_before_load_gib = f.get("avail_before_load_gib")
    m.avail_after_load_gib = f.get("avail_after_load_gib")
    m.weights_gib = f.get("weights_gib")
    m.avail_after_pool_gib = f.get("avail_after_pool_gib")
    m.graph_mem_gib = round(f["graph_mem_gib"], 4) if "graph_mem_gib" in f else None
    m.available_gpu_mem_gib = f.get("available_gpu_mem_gib")
    m.context_len = as_int("context_len")
    m.max_running_requests = as_int("max_running_requests")
    mc = f.get("max_concurrency")
    if mc is None and tokens is not None and m.context_len and boot.engine is not Engine.VLLM:
        mc = fmt.round_down(tokens / m.context_len, 2)  # a capacity: rounded down, as calc shows it
    m.max_concurrency = mc
    m.token_usage = boot.live.token_usage


def _is_oom(text: str) -> bool:
    return "OutOfMemoryError" in text or "CUDA out of memory" in text or "CUDA error: out of memory" in text


def _fmt(v: object) -> str:
    return "?" if v is None else str(v)


def hint_for(kind: FailureKind, engine: Engine, flags: dict[str, object], facts: dict[str, float]) -> str:
    """A one-line hint in the right direction for a failure kind, with the boot's own numbers."""
    vllm = engine is Engine.VLLM
    if vllm:
        util = flags.get("gpu_memory_utilization")
        frac = f"--gpu-memory-utilization (now {util})" if util is not None else "--gpu-memory-utilization"
    else:
        mfs = flags.get("mem_fraction_static")
        frac = f"--mem-fraction-static (now {mfs})" if mfs is not None else "--mem-fraction-static"
    if kind is FailureKind.OOM_GRAPH_CAPTURE:
        if vllm:
            return (
                f"CUDA-graph capture ran out of GPU memory: lower {frac}, capture fewer sizes "
                "(--max-num-seqs / --cuda-graph-sizes), or run with --enforce-eager"
            )
        # in the boot's own release's spelling (SGLang 0.5.23: --cuda-graph-max-bs-decode)
        graph_bs = lookup(Engine.SGLANG, "cuda-graph-max-bs")
        assert graph_bs is not None
        bs_flag = graph_bs.written(Engine.SGLANG, flags)
        got = graph_bs.in_dump(Engine.SGLANG, flags)
        bs = None if got is None else got[1]
        bs_txt = f"--{bs_flag} (now {bs})" if bs is not None else f"--{bs_flag}"
        return (
            f"CUDA-graph capture ran out of GPU memory: lower {frac} to leave more headroom, "
            f"or lower {bs_txt} / --max-running-requests so fewer graphs are captured"
        )
    if kind is FailureKind.OOM_KV_ALLOCATE:
        if vllm:
            return (
                f"no GPU memory left for the KV cache: raise {frac}, lower --max-model-len / "
                "--max-num-batched-tokens, or use more GPUs (--tensor-parallel-size)"
            )
        return (
            f"the KV pool does not fit in the static budget left after the weights: raise {frac}, "
            "or use more GPUs (--tp) / a quantized checkpoint"
        )
    if kind is FailureKind.KV_TOO_SMALL:
        est = facts.get("estimated_max_len")
        if vllm:
            cap = f" to at most {int(est)}" if est is not None else ""
            return f"the KV cache cannot hold one full-length request: lower --max-model-len{cap}, or raise {frac}"
        return f"the KV pool cannot hold one full-context request: lower --context-length, or raise {frac}"
    if kind is FailureKind.OOM_WEIGHTS:
        return (
            "the weights do not fit in free GPU memory: use more GPUs (tensor parallelism), a quantized "
            "checkpoint, or free the GPUs (other processes may hold memory)"
        )
    if kind is FailureKind.OOM_RUNTIME:
        if vllm:
            return f"out of GPU memory while serving: lower {frac} or --max-num-batched-tokens / --max-num-seqs"
        return (
            f"out of GPU memory while serving: lower {frac} (more headroom for activations) or "
            "--chunked-prefill-size / --max-running-requests"
        )
    if kind is FailureKind.GPU_BUSY:
        return (
            "GPU memory is held by other processes at start: free the GPUs (a stale server? `nvidia-smi` "
            "lists the PIDs) before starting"
        )
    if kind is FailureKind.NCCL:
        return (
            "multi-GPU communication (NCCL) failed: rerun with NCCL_DEBUG=INFO, check that every GPU is "
            "healthy and visible, the P2P/NVLink/IB settings, and whether another rank died first"
        )
    if kind is FailureKind.BAD_ARGS:
        return (
            "the server refused its command-line arguments: fix the flag the error names in the unit or "
            "launch script (its usage line lists the accepted flags), or restore the previous flags with "
            "`kvtui rollback HOST`"
        )
    if kind is FailureKind.CRASH:
        return "a server process died: the message is the exception it died with; the traceback shows where"
    if kind is FailureKind.NOT_SERVING:
        return (
            "the log says ready but the server does not answer a 1-token request: check the port and "
            "--host it listens on, the served model name (probe_model), and the server's log after ready"
        )
    return "the server exited without a recognised error: read the last lines of the log"


# ---------------------------------------------------------------------------------------------
# The tracker
# ---------------------------------------------------------------------------------------------


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
        self.draft_ranks: dict[str, dict[str, float]] = {}  # per-rank draft pools / graphs
        self.pending_bs: int | None = None  # the bs of a tqdm `Capturing batches (bs=…)` line
        self.follow: list[str] = []  # continuation lines after the best evidence
        self.follow_open = False
        self.fact_src: dict[tuple[Model, str], tuple[int, ...]] = {}
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
    def feed(self, parsed: ParsedLine) -> BootUpdate:
        """Account one parsed line to the current boot (starting or ending boots as needed)."""
        self._line += 1
        ev0 = parsed.events[0] if parsed.events else None
        if type(ev0) is ServerExit:  # the backend saw the server process gone (kvtui.liveness)
            return self._server_exit(ev0, parsed.ts, parsed)
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
            return BootUpdate(serving=True)
        if not events:
            if boot is not None:
                boot.last_line = self._line
                w = self._w
                if w.follow_open:
                    self._follow(parsed)
            if (boot is None or boot.status is BootStatus.STARTING) and parsed.prefixed and not parsed.known:
                self._unrecognised(boot, parsed.text)
            self._recent.append(parsed.text)
            return BootUpdate()
        upd = BootUpdate()
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
    def _server_exit(self, ev: ServerExit, ts: datetime | None, parsed: ParsedLine) -> BootUpdate:
        """The backend saw the server process gone. A starting boot is failed: by the evidence
        it left (as at the end of input), else kind ``crash`` — or ``bad_args`` when its last
        lines are an argparse refusal — with "the server process exited" and the last lines as
        context. A ready boot with no error since is stopped (its end is all that is known). A
        process that exited before any boot line is a boot of its own, failed; one that was
        already gone when following began ends only a boot that is still open."""
        upd = BootUpdate()
        ts = self._exit_ts(ts)
        boot = self.current
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
                boot.status = BootStatus.STOPPED
                self._close_open(boot, ts)
                if boot.ended_at is None:
                    boot.ended_at = ts
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

    def _exit_ts(self, ts: datetime | None) -> datetime | None:
        """The exit's time, naive or aware like the log's own (they are compared)."""
        last = self._last_ts
        if ts is None or last is None:
            return ts or last
        if (ts.tzinfo is None) != (last.tzinfo is None):
            ts = ts.astimezone().replace(tzinfo=None) if last.tzinfo is None else ts.astimezone()
        return max(ts, last)

    # ---- boots --------------------------------------------------------------------------------
    def _new_boot(self, ts: datetime | None, upd: BootUpdate) -> Boot:
        boot = Boot(engine=self.engine_hint or Engine.UNKNOWN, first_line=self._line, last_line=self._line)
        boot.started_at = ts
        self.boots.append(boot)
        self._idle_lines = 0
        if self.max_boots is not None and len(self.boots) > self.max_boots:
            del self.boots[: len(self.boots) - self.max_boots]
        self._w = _Work()
        upd.new_boot = True
        return boot

    def _end_replaced(self, boot: Boot, ts: datetime | None) -> None:
        """The boot is replaced by a new one (the next start says this one is over)."""
        if boot.status is BootStatus.STARTING:
            if any(e.ft.specificity >= 2 for e in self._w.evidence):
                self._fail(boot, ts)
            else:
                boot.status = BootStatus.STOPPED
                self._close_open(boot, ts)
        if boot.ended_at is None:
            boot.ended_at = ts

    def _boundary(self, ev: BootBoundary, ts: datetime | None, upd: BootUpdate, failed_exit: bool) -> Boot | None:
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
            if not ev.new_args:
                self._phase(boot, PhaseMark(Phase.LAUNCH), ts, upd)
            return boot
        if boot is None:
            return None
        if kind is BoundaryKind.STOPPING:
            self._w.stopped_by_operator = True
            self._w.follow_open = False
            if boot.status is BootStatus.STARTING:
                boot.status = BootStatus.STOPPED
                self._close_open(boot, ts)
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
                boot.status = BootStatus.STOPPED
                self._close_open(boot, ts)
                upd.phase_changed = True
            if boot.ended_at is None:
                boot.ended_at = ts
        return boot

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

    def _phase(self, boot: Boot, ev: PhaseMark, ts: datetime | None, upd: BootUpdate, timed: bool = True) -> None:
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

    def _progress(self, boot: Boot, ev: Progress, ts: datetime | None, upd: BootUpdate, timed: bool) -> None:
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
            if name == "capture_bs":
                self._w.pending_bs = int(v)
            elif name == "capture_avail_gib" and self._w.pending_bs is not None:
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
    def _rank_dict(store: dict[str, dict[str, float]], rk: str) -> dict[str, float] | None:
        rf = store.get(rk)
        if rf is None:
            if len(store) >= MAX_RANKS:
                return None
            rf = store[rk] = {}
        return rf

    def _lowest_rank_fact(self, facts: dict[str, float], model: Model, name: str, v: float, rank: str | None) -> None:
        """Sizes and counts: the lowest rank's (TP0's) latest value, whatever the line order."""
        key = rank_sort_key(rank)
        src = self._w.fact_src.get((model, name))
        if src is None or key <= src:
            facts[name] = v
            self._w.fact_src[(model, name)] = key

    def _pool_metric(self, boot: Boot, facts: dict[str, float], name: str, v: float, model: Model, rk: str) -> None:
        """Per-rank pools: K+V lines add up (hybrid pools), tokens take the largest pool, graph
        captures add up. The boot's figure: the lowest rank's pool; the max over ranks of graphs."""
        store = boot.rank_facts if model is Model.TARGET else self._w.draft_ranks
        sums = self._rank_dict(store, rk)
        if sums is None:
            return
        if name == "kv_tokens":
            old = sums.get(name)
            sums[name] = v if old is None else max(old, v)
        elif name == "kv_cache_gib" and boot.engine is Engine.VLLM:
            sums[name] = v  # vLLM prints its KV budget once per worker (and may repeat it)
        else:
            sums[name] = round(sums.get(name, 0.0) + v, 6)
        if name == "graph_mem_gib":
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
        if boot.version_hint is None or _vkey(version) > _vkey(boot.version_hint):
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
        self, boot: Boot, ft: FailureText, ts: datetime | None, parsed: ParsedLine, upd: BootUpdate
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
            hint = hint_for(kind, boot.engine, boot.flags, boot.facts)
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


EXIT_CONTEXT_LINES: Final = 12
_ARGPARSE_ERROR_RE: Final = re.compile(r"^(?:\S+(?: \S+)?): error: (?:argument |unrecognized arguments|the following "
                                      r"arguments are required|ambiguous option|invalid choice)")
_EXIT_HINT: Final = (
    "the server process exited without an error the engine printed: the last lines are above; a "
    "kill -9, the kernel's OOM killer (dmesg -T | grep -i oom) or a crash in native code leaves no message"
)


def exit_diagnosis(recent: list[str], text: str) -> tuple[FailureKind, str, str]:
    """(kind, message, hint) for a server process gone with no recognised failure (``text``: the
    exit record's): ``bad_args`` when its last lines are an argparse refusal (``PROG: error:
    argument …``), else ``crash`` with "the server process exited (pid …)"."""
    what = text.removeprefix("kvtui: ").replace(" is not running", " exited", 1)
    for line in reversed(recent[-EXIT_CONTEXT_LINES:]):
        if _ARGPARSE_ERROR_RE.match(line.strip()):
            hint = ("the server refused its command line (" + line.strip() + "): fix that flag in the unit or "
                    "launch script, or restore the previous flags with `kvtui rollback HOST`")
            return FailureKind.BAD_ARGS, line.strip(), hint
    return FailureKind.CRASH, what, _EXIT_HINT


def _vkey(v: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in v.lstrip(">=~").split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        out.append(int(digits) if digits else 0)
    return tuple(out)
