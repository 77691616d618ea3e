"""Boots: one server start each, built from parsed lines by ``BootTracker``.

Pure core: no textual, no asyncssh, no I/O.

CONTRACT (other modules rely on these names; change them only together with their users):
- ``Boot`` fields below, ``Boot.to_json()`` (the ``kvtui replay --json`` boot object),
- ``BootTracker.feed(parsed) -> BootUpdate``, ``BootTracker.boots``, ``BootTracker.current``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from kvtui.engines.events import Engine, FailureKind, Model, ParsedLine, Phase


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
    # per-rank target figures, e.g. rank_facts["TP3"]["avail_before_load_gib"]
    rank_facts: dict[str, dict[str, float]] = field(default_factory=dict)
    # CUDA-graph capture trail: (bs, avail_gib) from tqdm `Capturing batches (bs=… avail_mem=…)`
    capture_trail: list[tuple[int, float]] = field(default_factory=list)
    capture_bs: list[int] = field(default_factory=list)  # the `Capture cuda graph bs [...]` list
    # where the boot sits in its source: first and last line numbers (0-based, in feed order)
    first_line: int = 0
    last_line: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def to_json(self) -> dict[str, object]:
        """The boot object of ``kvtui replay --json`` (see the engine-core issue for the shape)."""
        raise NotImplementedError  # implemented with BootTracker


@dataclass(slots=True)
class BootUpdate:
    """What one ``feed`` changed, for live views: cheap to build, cheap to ignore."""

    new_boot: bool = False  # a new boot started on this line (a restart marker for the log)
    phase_changed: bool = False
    metrics_changed: bool = False
    failed: bool = False
    ready: bool = False
    serving: bool = False


class BootTracker:
    """Turns parsed lines into boots; splits restarts; classifies failures by text and phase."""

    def __init__(self, engine_hint: Engine | None = None) -> None:
        self.boots: list[Boot] = []
        self.engine_hint = engine_hint

    @property
    def current(self) -> Boot | None:
        return self.boots[-1] if self.boots else None

    def feed(self, parsed: ParsedLine) -> BootUpdate:
        raise NotImplementedError
