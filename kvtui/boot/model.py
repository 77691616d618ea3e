"""What a boot is: ``Boot`` (one server start: engine, status, phases, failure, flags, figures)
and its parts (``PhaseSpan``, ``Failure``, ``BootMetrics``, ``LiveMetrics``), ``BootStatus``,
``BootDelta`` (what one line changed, for live views), and ``Boot.to_json()`` (the boot object of
``kvtui replay --json``).

Pure core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final

from kvtui.engines.events import Engine, Fact, FailureKind, Model, Phase
from kvtui.engines.unknown import UnrecognisedShape


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
    # the pool's size estimated from serving lines (SGLang Decode `#token: N, token usage: U` ->
    # N / U, from the line with the highest usage: the least rounding error) when the boot's own
    # pool line is not in the log (its start rotated away); ± ``pool_tokens_err`` tokens
    pool_tokens_est: int | None = None
    pool_tokens_err: int | None = None


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


# the phases whose duration SGLang's `Engine startup timings (s)` line prints, and its names
ENGINE_PHASE_FACTS: Final[dict[Phase, Fact]] = {
    Phase.LOAD_WEIGHTS: Fact.ENGINE_LOAD_WEIGHT_SECONDS,
    Phase.KV_ALLOCATE: Fact.ENGINE_KV_ALLOCATION_SECONDS,
    Phase.GRAPH_CAPTURE: Fact.ENGINE_CUDA_GRAPH_SECONDS,
}
ENGINE_TIMING_NAMES: Final = (
    ("load_weight", Fact.ENGINE_LOAD_WEIGHT_SECONDS),
    ("kv_cache_allocation", Fact.ENGINE_KV_ALLOCATION_SECONDS),
    ("cuda_graph", Fact.ENGINE_CUDA_GRAPH_SECONDS),
    ("scheduler_e2e", Fact.ENGINE_SCHEDULER_SECONDS),
    ("tokenizer_e2e", Fact.ENGINE_STARTUP_SECONDS),
)


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
    facts: dict[Fact, float] = field(default_factory=dict)
    # the same for the draft model (speculative decoding), never mixed into ``facts``
    draft_facts: dict[Fact, float] = field(default_factory=dict)
    # per-rank target figures, e.g. rank_facts["TP3"]["avail_before_load_gib"] ("main": no rank tag)
    rank_facts: dict[str, dict[Fact, float]] = field(default_factory=dict)
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
    # Ray workers by node (vLLM's Ray executor): the ip Ray tags a worker's lines with ("" for the
    # driver's own node, whose workers it tags without one) -> {worker rank label: its TP rank
    # once a line says it}, in the order first seen (bounded)
    nodes: dict[str, dict[str, int | None]] = field(default_factory=dict)
    # --- a server up for days (kvtui.engines.source_records) ------------------------------------
    # why the boot's start is not in the log ("rotated before …"), when it is not: the boot is
    # serving, and what is known comes from the process and the serving lines
    start_missing: str | None = None
    # where ``flags`` came from: "log" (the engine's own dump) or "process" (/proc/PID/cmdline)
    flags_from: str = "log"
    process_pid: int | None = None  # the process whose command line gave the flags (flags_from "process")
    # serving lines the follower did not read (between the startup part and the recent tail)
    skipped_lines: int = 0
    skipped_where: list[str] = field(default_factory=list)  # each gap's source range (bounded)
    # how ``metrics.max_total_num_tokens`` was derived when no line printed the pool's tokens (vLLM
    # V0: ``# GPU blocks: N`` × the block size, and where the block size came from); None: printed
    pool_from: str | None = None

    def engine_seconds(self, span: PhaseSpan) -> float | None:
        """The engine's own duration of this phase, when it printed one (SGLang's ``Engine startup
        timings (s)``: ``load_weight`` — the target's and the draft's —, ``kv_cache_allocation``,
        the ``cuda_graph`` kinds; the draft's graphs for a draft span); None otherwise."""
        fact = ENGINE_PHASE_FACTS.get(span.name)
        if fact is None:
            return None
        facts = self.draft_facts if span.model is Model.DRAFT else self.facts
        if span.model is Model.DRAFT and fact is not Fact.ENGINE_CUDA_GRAPH_SECONDS:
            return None  # the engine prints one load_weight (target + draft) and one kv_cache_allocation
        return facts.get(fact)

    def engine_timings(self) -> dict[str, float]:
        """The engine's own startup timings by its names (``replay --json``'s ``engine_timings``,
        the history's): empty when it printed none."""
        out = {name: self.facts[f] for name, f in ENGINE_TIMING_NAMES if f in self.facts}
        draft = self.draft_facts.get(Fact.ENGINE_CUDA_GRAPH_SECONDS)
        if draft is not None:
            out["draft_cuda_graph"] = draft
        return out

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
                    **({"engine_seconds": e} if (e := self.engine_seconds(s)) is not None else {}),
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
            **({"pool_from": self.pool_from} if self.pool_from else {}),
            **({"engine_timings": timings} if (timings := self.engine_timings()) else {}),
            **({"nodes": self.nodes_json()} if self.nodes else {}),
            **self._long_run_json(),
        }

    def _long_run_json(self) -> dict[str, object]:
        """The keys of a boot kvtui did not read whole (present only then: a boot read from its
        start is unchanged)."""
        out: dict[str, object] = {}
        if self.start_missing is not None:
            out["start_missing"] = self.start_missing
        if self.flags_from != "log":
            out["flags_from"] = self.flags_from
        if self.skipped_lines:
            out["skipped_lines"] = self.skipped_lines
        if self.live.pool_tokens_est is not None:
            out["pool_tokens_estimated"] = {"tokens": self.live.pool_tokens_est, "error": self.live.pool_tokens_err,
                                            "from": "serving lines (#token / token usage)"}
        return out

    def nodes_json(self) -> list[dict[str, object]]:
        """``nodes`` of ``replay --json`` (present only when Ray workers were seen): the driver's
        node first (``"ip": null``), then the others as first seen."""
        order = sorted(self.nodes, key=lambda ip: ip != "")
        return [
            {
                "ip": ip or None,
                "processes": list(self.nodes[ip]),
                "tp_ranks": sorted({tp for tp in self.nodes[ip].values() if tp is not None}),
            }
            for ip in order
        ]


@dataclass(slots=True)
class BootDelta:
    """What one ``feed`` changed, for live views: cheap to build, cheap to ignore."""

    new_boot: bool = False  # a new boot started on this line (a restart marker for the log)
    phase_changed: bool = False
    metrics_changed: bool = False
    failed: bool = False
    ready: bool = False
    serving: bool = False
