"""The shared vocabulary of the pure core: records off the wire, and what a line means.

Flow: ``LogRecord`` (one line as it came off the wire, wrapper stripped) -> an engine grammar
(``kvtui.engines.sglang`` / ``kvtui.engines.vllm``) -> ``ParsedLine`` carrying ``LogEvent``s ->
``kvtui.boot.BootTracker`` -> ``Boot``.

Nothing here imports textual, asyncssh or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum


class Engine(StrEnum):
    SGLANG = "sglang"
    VLLM = "vllm"
    UNKNOWN = "unknown"


class Phase(StrEnum):
    """Boot phases, in order. Only those reached are reported."""

    LAUNCH = "launch"
    INIT = "init"
    LOAD_WEIGHTS = "load_weights"
    COMPILE = "compile"
    KV_ALLOCATE = "kv_allocate"
    GRAPH_CAPTURE = "graph_capture"
    HTTP_UP = "http_up"
    READY = "ready"


PHASE_ORDER: tuple[Phase, ...] = tuple(Phase)
PHASE_RANK: dict[Phase, int] = {p: i for i, p in enumerate(PHASE_ORDER)}


class Model(StrEnum):
    """Which model a phase or figure belongs to: the served model or a speculative draft."""

    TARGET = "target"
    DRAFT = "draft"


class FailureKind(StrEnum):
    OOM_WEIGHTS = "oom_weights"
    OOM_KV_ALLOCATE = "oom_kv_allocate"
    KV_TOO_SMALL = "kv_too_small"
    OOM_GRAPH_CAPTURE = "oom_graph_capture"
    OOM_RUNTIME = "oom_runtime"
    GPU_BUSY = "gpu_busy"
    NCCL = "nccl"
    BAD_ARGS = "bad_args"  # the server refused its command line (argparse: unknown flag, bad value)
    CRASH = "crash"
    UNKNOWN = "unknown"


# ---------------------------------------------------------------------------------------------
# Records: one line off the wire
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log line as it came off the wire, with its transport wrapper removed.

    ``text``   the engine's own output line (ANSI not yet stripped is allowed; parsers strip it).
    ``ts``     the wrapper's timestamp (journald / docker --timestamps), aware when the source
               carries an offset, else naive local time; None when the wrapper has none.
    ``cursor`` a resume token: journald ``__CURSOR``, or ``"<byte offset>"`` for files.
    ``source`` "journal" | "file" | "docker" | "raw" | "demo".
    ``ident``  syslog identifier (``systemd`` for the service manager's own lines), else None.
    """

    text: str
    ts: datetime | None = None
    cursor: str | None = None
    source: str = "raw"
    pid: int | None = None
    ident: str | None = None


# ---------------------------------------------------------------------------------------------
# Events: what a line means
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PhaseMark:
    """A phase begins (``end=False``) or ends (``end=True``) on this line.

    ``seconds`` is the duration the engine printed itself (``elapsed=…``), when it did.
    ``inferred`` marks a phase read from indirect evidence (a traceback frame's function, a failure
    text that only one phase prints): the tracker uses it only while the boot has no phase line of
    its own past launch (a fragment pasted without its start), and it never makes a boot ready.
    """

    phase: Phase
    model: Model = Model.TARGET
    end: bool = False
    seconds: float | None = None
    inferred: bool = False


# Metric names a grammar may emit (per line, per rank; BootTracker aggregates).
# GiB figures are in GiB (SGLang prints "GB" but means GiB).
METRIC_NAMES: frozenset[str] = frozenset(
    {
        "avail_before_load_gib",  # SGLang `Load weight begin. avail mem=` (rank-local P)
        "init_mem_usage_gib",  # SGLang `Init torch distributed ends. mem usage=` / `Memory baseline taken`
        "avail_after_load_gib",  # SGLang `Load weight end … avail mem=` (rank-local A)
        "weights_gib",  # SGLang `Load weight end … mem usage=`; vLLM `Model loading took X GiB`
        "kv_tokens",  # SGLang `KV Cache is allocated. #tokens:` (per pool line)
        "kv_cache_gib",  # K+V (MHA) or KV size (MLA) of that pool line; vLLM `Available KV cache memory`
        "swa_kv_gib",  # SGLang `SWAKVPool mem usage:`
        "swa_tokens",  # SGLang sliding-window pool tokens (swa_layer_tokens / swa size)
        "full_tokens",  # SGLang sliding-window pool full_layer_tokens
        "avail_after_pool_gib",  # SGLang `Memory pool end. avail mem=`
        "graph_begin_avail_gib",  # SGLang `Capture … begin … avail mem=`
        "graph_mem_gib",  # SGLang `Capture … end … mem usage=`; vLLM `Graph capturing finished … took X GiB`
        "avail_after_graph_gib",  # SGLang `Capture … end … avail mem=`
        "capture_bs_max",  # largest batch size in the capture list
        "capture_bs_count",  # number of batch sizes in the capture list
        "capture_avail_gib",  # tqdm `Capturing batches (bs=… avail_mem=X GB)` (the trail)
        "capture_bs",  # the bs of that tqdm line
        "max_total_num_tokens",  # SGLang scheduler summary; vLLM `GPU KV cache size: N tokens`
        "chunked_prefill_size",
        "max_prefill_tokens",
        "max_running_requests",
        "context_len",  # SGLang summary `context_len=`; vLLM max model len
        "available_gpu_mem_gib",  # SGLang summary `available_gpu_mem=`
        "max_concurrency",  # vLLM `Maximum concurrency for N tokens per request: X x`
        "gpu_total_gib",  # device total when a line prints it (vLLM free-memory error, torch OOM)
        "gpu_free_gib",  # device free at start when printed (vLLM `Free memory on device (X/Y GiB)`)
        "cpu_mem_total_gib",  # vLLM CPU backend: the NUMA node's memory (`Explicitly set (X/TOTAL) GiB for KV cache`)
        "dsv4_bytes_per_full_token",  # `DSV4 memory calculation: bytes_per_full_token=`
        "dsv4_available_gib",  # `DSV4 memory calculation: … available_bytes=X GB`
        "dsv4_full_token",  # `DSV4 memory calculation: … full_token=`
        "oom_tried_gib",  # torch OOM `Tried to allocate X GiB`
        "oom_free_gib",  # torch OOM `of which X GiB is free`
        "oom_capacity_gib",  # torch OOM `total capacity of X GiB`
        "kv_needed_gib",  # vLLM `(X GiB KV cache is needed`
        "estimated_max_len",  # vLLM `estimated maximum model length is M`
        "compile_seconds",  # vLLM `torch.compile takes X s in total`
        "load_seconds",  # weights load seconds when printed
        "init_engine_seconds",  # vLLM `init engine … took X seconds`
        "graph_mem_estimate_gib",  # vLLM `Estimated CUDA graph memory: X GiB total` (≥0.21 profiling)
        "graph_pool_actual_gib",  # vLLM `CUDA graph pool memory: X GiB (actual), Y GiB (estimated)` (≥0.21)
        "kv_cache_memory_hint_gib",  # vLLM `… Replace gpu_memory_utilization config with --kv-cache-memory=N (X GiB) …`
        "hicache_host_gib",  # SGLang `Allocating X GB host memory for hierarchical KV cache.` (HiCache; X is 1e9 B)
        "kv_blocks",  # vLLM KV block count (V0 `# GPU blocks: N`, `num_gpu_blocks is: N`)
        "mamba_cache_gib",  # SGLang `Mamba Cache is allocated. … conv_state size + ssm_state size`
        "mamba_cache_size",  # SGLang `Mamba Cache is allocated. max_mamba_cache_size: N`
        "dsv4_c128_state_fixed_gib",  # `DSV4 memory calculation: … c128_state_fixed=X GB`
        "dsv4_swa_fixed_gib",  # `DSV4 memory calculation: … swa_fixed=X GB`
        "dsv4_c128_state_fixed_overhead_gib",  # `… c128_state_fixed_overhead=X GB`
        "dsv4_hisparse_fixed_overhead_gib",  # `… hisparse_fixed_overhead=X GB`
    }
)


@dataclass(frozen=True, slots=True)
class Metric:
    """A figure printed on this line. ``name`` is one of ``METRIC_NAMES``."""

    name: str
    value: float
    model: Model = Model.TARGET


@dataclass(frozen=True, slots=True)
class Flags:
    """The engine's own dump of its arguments (SGLang ``server_args=…``, vLLM ``non-default args``).

    Keys are the engine's names with ``_``; values are parsed Python literals where possible
    (``0.85``, ``64``, ``None``, ``True``, ``'auto'``), else the raw string.
    """

    values: dict[str, object]


@dataclass(frozen=True, slots=True)
class FailureText:
    """Evidence of a failure on this line.

    ``kind``  set when the text alone decides the kind (``Not enough memory`` -> oom_kv_allocate,
              vLLM ``To serve at least one request`` -> kv_too_small, NCCL errors -> nccl …);
              None when the phase decides (a CUDA OOM is oom_weights / oom_graph_capture / … by
              the phase it happened in).
    ``fatal`` True when this line by itself means the boot is dead (``Received sigquit``,
              ``EngineCore failed to start``, ``scheduler died during initialization``);
              False for evidence (the exception text, ``Capture cuda graph failed``, a torch OOM).
    ``specificity`` higher = a better ``failure.message`` (exception text 3, failed-capture /
              error summary 2, traceback frame 1, dead-process wrapper 0).
    ``hint``  an engine-specific hint when the grammar knows better than the generic one.
    """

    text: str
    kind: FailureKind | None = None
    fatal: bool = False
    specificity: int = 1
    hint: str | None = None


@dataclass(frozen=True, slots=True)
class Warning_:
    """A notable non-fatal line (rank imbalance warning, max_total_tokens ignored, …)."""

    text: str
    kind: FailureKind | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """Progress inside a phase (weight shards, capture batches): ``done`` of ``total``."""

    phase: Phase
    done: int
    total: int | None
    model: Model = Model.TARGET
    label: str = ""


class BoundaryKind(StrEnum):
    STARTED = "started"  # systemd `Started …` / a new server-args line / a new vLLM banner
    STOPPING = "stopping"  # systemd `Stopping …` / `Stopped …` / `Deactivated successfully`
    RESTART_SCHEDULED = "restart_scheduled"  # systemd `Scheduled restart job` (after a failure)
    PROCESS_EXITED = "process_exited"  # systemd `Main process exited, code=…` / `Failed with result`


@dataclass(frozen=True, slots=True)
class BootBoundary:
    """A line that starts or ends a boot. ``new_args`` marks an engine argument dump, which
    starts a new boot only when the current one already got past launch."""

    kind: BoundaryKind
    new_args: bool = False


@dataclass(frozen=True, slots=True)
class Serving:
    """A serving line after ready: live KV usage (0..1) and load."""

    token_usage: float | None = None
    running_reqs: int | None = None
    queue_reqs: int | None = None
    gen_throughput: float | None = None


@dataclass(frozen=True, slots=True)
class VersionHint:
    version: str


@dataclass(frozen=True, slots=True)
class CaptureSizes:
    """The CUDA-graph batch sizes a capture runs (SGLang `Capture cuda graph bs [1, 2, 4, …]`)."""

    sizes: tuple[int, ...]
    model: Model = Model.TARGET


@dataclass(frozen=True, slots=True)
class ServerExit:
    """The server process is gone, as the host backend saw it (not a line the engine printed:
    ``kvtui.liveness`` makes and reads the record). ``pid`` when known; ``detail`` an exit status
    when known; ``at_start``: it was already gone when following began."""

    pid: int | None = None
    detail: str = ""
    at_start: bool = False


LogEvent = (
    PhaseMark
    | Metric
    | Flags
    | FailureText
    | Warning_
    | Progress
    | BootBoundary
    | Serving
    | VersionHint
    | CaptureSizes
    | ServerExit
)


@dataclass(slots=True)
class ParsedLine:
    """One line after an engine grammar read it.

    ``ts``     the engine's own timestamp when it printed one, else the record's wrapper ts.
    ``rank``   the per-rank tag normalised: ``"TP3"``, ``"DP0 TP1"``, ``"PP1 TP3"``, ``"TP0 EP0"``
               (SGLang order kept as printed), ``"Worker_TP2"``, ``"EngineCore_DP0"``,
               ``"APIServer"`` (vLLM process tags). None for the main process / untagged lines.
    ``tp``     the TP index when the rank has one, else None.
    ``text``   the message with ANSI and the engine prefix removed.
    ``level``  "INFO" / "WARNING" / "ERROR" / … when printed.
    ``engine`` the engine whose grammar recognised this line, None when neither did.
    """

    text: str
    ts: datetime | None = None
    rank: str | None = None
    tp: int | None = None
    level: str | None = None
    engine: Engine | None = None
    events: tuple[LogEvent, ...] = field(default_factory=tuple)
    record: LogRecord | None = None
    # True when the engine printed its own log prefix on this line (timestamp / level); False for
    # continuation lines (traceback frames, tqdm bars, third-party output without a prefix).
    prefixed: bool = False
    # True when a grammar knows the line and that it carries nothing kvtui needs (an import notice,
    # a route listing): not an "unrecognised startup line" though it has no events.
    known: bool = False
