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
from typing import Literal, get_args

# How a line is shown (the log view's colour; ``LogLine.style``): "error" > "phase" > "warning" >
# "progress" > "serving" from the line's events, "marker" for the line kvtui puts where a new boot
# starts, "gap" for kvtui's own record of lines it did not read (a ``LogGap``: drawn as a marker
# row, its text kept raw so a replay reads the gap back), "" for a plain line. The spool stores it
# as this text.
LineStyle = Literal["", "phase", "error", "warning", "progress", "serving", "marker", "gap"]
_LINE_STYLES: dict[str, LineStyle] = {s: s for s in get_args(LineStyle)}


def line_style_of(text: str) -> LineStyle:
    """The style named by ``text`` (as the spool stores it); "" for a name that is none."""
    return _LINE_STYLES.get(text, "")


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
    # the server refused its arguments: argparse (unknown flag, bad value), or its argument / config
    # checks (SGLang ServerArgs, vLLM EngineArgs and config classes: values that do not go together)
    BAD_ARGS = "bad_args"
    CRASH = "crash"
    NOT_SERVING = "not_serving"  # the log says ready, but the server does not answer a 1-token request
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


class Fact(StrEnum):
    """The name of a figure a grammar may emit (``Metric.name``; per line, per rank) and the key of
    ``Boot.facts`` / ``draft_facts`` / ``rank_facts`` (``BootTracker`` aggregates them). A member is
    equal to its string (stored history and ``--json`` output carry the plain names). GiB figures
    are in GiB (SGLang prints "GB" but means GiB)."""

    AVAIL_BEFORE_LOAD_GIB = "avail_before_load_gib"  # SGLang `Load weight begin. avail mem=` (rank-local P)
    # SGLang `Init torch distributed ends. mem usage=` / `Memory baseline taken`
    INIT_MEM_USAGE_GIB = "init_mem_usage_gib"
    AVAIL_AFTER_LOAD_GIB = "avail_after_load_gib"  # SGLang `Load weight end … avail mem=` (rank-local A)
    WEIGHTS_GIB = "weights_gib"  # SGLang `Load weight end … mem usage=`; vLLM `Model loading took X GiB`
    KV_TOKENS = "kv_tokens"  # SGLang `KV Cache is allocated. #tokens:` (per pool line)
    KV_CACHE_GIB = "kv_cache_gib"  # K+V (MHA) or KV size (MLA) of that pool line; vLLM `Available KV cache memory`
    SWA_KV_GIB = "swa_kv_gib"  # SGLang `SWAKVPool mem usage:`
    SWA_TOKENS = "swa_tokens"  # SGLang sliding-window pool tokens (swa_layer_tokens / swa size)
    FULL_TOKENS = "full_tokens"  # SGLang sliding-window pool full_layer_tokens
    AVAIL_AFTER_POOL_GIB = "avail_after_pool_gib"  # SGLang `Memory pool end. avail mem=`
    GRAPH_BEGIN_AVAIL_GIB = "graph_begin_avail_gib"  # SGLang `Capture … begin … avail mem=`
    GRAPH_MEM_GIB = "graph_mem_gib"  # SGLang `Capture … end … mem usage=`; vLLM `Graph capturing finished … took X GiB`
    AVAIL_AFTER_GRAPH_GIB = "avail_after_graph_gib"  # SGLang `Capture … end … avail mem=`
    CAPTURE_BS_MAX = "capture_bs_max"  # largest batch size in the capture list
    CAPTURE_BS_COUNT = "capture_bs_count"  # number of batch sizes in the capture list
    CAPTURE_AVAIL_GIB = "capture_avail_gib"  # tqdm `Capturing batches (bs=… avail_mem=X GB)` (the trail)
    CAPTURE_BS = "capture_bs"  # the bs of that tqdm line
    MAX_TOTAL_NUM_TOKENS = "max_total_num_tokens"  # SGLang scheduler summary; vLLM `GPU KV cache size: N tokens`
    CHUNKED_PREFILL_SIZE = "chunked_prefill_size"
    MAX_PREFILL_TOKENS = "max_prefill_tokens"
    MAX_RUNNING_REQUESTS = "max_running_requests"
    CONTEXT_LEN = "context_len"  # SGLang summary `context_len=`; vLLM max model len
    AVAILABLE_GPU_MEM_GIB = "available_gpu_mem_gib"  # SGLang summary `available_gpu_mem=`
    MAX_CONCURRENCY = "max_concurrency"  # vLLM `Maximum concurrency for N tokens per request: X x`
    GPU_TOTAL_GIB = "gpu_total_gib"  # device total when a line prints it (vLLM free-memory error, torch OOM)
    GPU_FREE_GIB = "gpu_free_gib"  # device free at start when printed (vLLM `Free memory on device (X/Y GiB)`)
    # vLLM CPU backend: the NUMA node's memory (`Explicitly set (X/TOTAL) GiB for KV cache`)
    CPU_MEM_TOTAL_GIB = "cpu_mem_total_gib"
    # vLLM CPU backend: the pool size the operator set (`Explicitly set (X/…)`: VLLM_CPU_KVCACHE_SPACE or
    # --kv-cache-memory-bytes; absent when vLLM sized it itself: `Auto set …`)
    CPU_KV_SPACE_GIB = "cpu_kv_space_gib"
    DSV4_BYTES_PER_FULL_TOKEN = "dsv4_bytes_per_full_token"  # `DSV4 memory calculation: bytes_per_full_token=`
    DSV4_AVAILABLE_GIB = "dsv4_available_gib"  # `DSV4 memory calculation: … available_bytes=X GB`
    DSV4_FULL_TOKEN = "dsv4_full_token"  # `DSV4 memory calculation: … full_token=`
    OOM_TRIED_GIB = "oom_tried_gib"  # torch OOM `Tried to allocate X GiB`
    OOM_FREE_GIB = "oom_free_gib"  # torch OOM `of which X GiB is free`
    OOM_CAPACITY_GIB = "oom_capacity_gib"  # torch OOM `total capacity of X GiB`
    KV_NEEDED_GIB = "kv_needed_gib"  # vLLM `(X GiB KV cache is needed`
    ESTIMATED_MAX_LEN = "estimated_max_len"  # vLLM `estimated maximum model length is M`
    COMPILE_SECONDS = "compile_seconds"  # vLLM `torch.compile takes X s in total`
    LOAD_SECONDS = "load_seconds"  # weights load seconds when printed
    INIT_ENGINE_SECONDS = "init_engine_seconds"  # vLLM `init engine … took X seconds`
    # vLLM `Estimated CUDA graph memory: X GiB total` (≥0.21 profiling)
    GRAPH_MEM_ESTIMATE_GIB = "graph_mem_estimate_gib"
    # vLLM `CUDA graph pool memory: X GiB (actual), Y GiB (estimated)` (≥0.21)
    GRAPH_POOL_ACTUAL_GIB = "graph_pool_actual_gib"
    # vLLM `… Replace gpu_memory_utilization config with --kv-cache-memory=N (X GiB) …`
    KV_CACHE_MEMORY_HINT_GIB = "kv_cache_memory_hint_gib"
    # SGLang `Allocating X GB host memory for hierarchical KV cache.` (HiCache; X is 1e9 B)
    HICACHE_HOST_GIB = "hicache_host_gib"
    KV_BLOCKS = "kv_blocks"  # vLLM KV block count (V0 `# GPU blocks: N`, `num_gpu_blocks is: N`)
    MAMBA_CACHE_GIB = "mamba_cache_gib"  # SGLang `Mamba Cache is allocated. … conv_state size + ssm_state size`
    MAMBA_CACHE_SIZE = "mamba_cache_size"  # SGLang `Mamba Cache is allocated. max_mamba_cache_size: N`
    DSV4_C128_STATE_FIXED_GIB = "dsv4_c128_state_fixed_gib"  # `DSV4 memory calculation: … c128_state_fixed=X GB`
    DSV4_SWA_FIXED_GIB = "dsv4_swa_fixed_gib"  # `DSV4 memory calculation: … swa_fixed=X GB`
    DSV4_C128_STATE_FIXED_OVERHEAD_GIB = "dsv4_c128_state_fixed_overhead_gib"  # `… c128_state_fixed_overhead=X GB`
    DSV4_HISPARSE_FIXED_OVERHEAD_GIB = "dsv4_hisparse_fixed_overhead_gib"
    # vLLM: how long one process has waited on the shared-memory broadcast between the engine core
    # and its workers (`No available shared memory broadcast block found in N seconds`, repeated
    # every N s while the wait lasts): the repeats of one process in a row times N
    SHM_WAIT_SECONDS = "shm_wait_seconds"  # `… hisparse_fixed_overhead=X GB`
    # SGLang's own phase durations (≥ 0.5.17, the main process once every scheduler is ready):
    # `Engine startup timings (s): load_weight=…, kv_cache_allocation=…, scheduler_e2e=…,
    # cuda_graph={prefill=…, decode=…, target_verify=…, draft_prefill=…, draft_decode=…,
    # draft_extend=…}, tokenizer_e2e=…` — each the slowest scheduler rank's
    ENGINE_LOAD_WEIGHT_SECONDS = "engine_load_weight_seconds"  # load_weight (the target's + the draft's)
    ENGINE_KV_ALLOCATION_SECONDS = "engine_kv_allocation_seconds"  # kv_cache_allocation
    # cuda_graph: prefill + decode + target_verify (the draft's draft_* sum: the draft's figure)
    ENGINE_CUDA_GRAPH_SECONDS = "engine_cuda_graph_seconds"
    ENGINE_SCHEDULER_SECONDS = "engine_scheduler_seconds"  # scheduler_e2e: a scheduler's start to ready
    ENGINE_STARTUP_SECONDS = "engine_startup_seconds"  # tokenizer_e2e: the engine's launch to every scheduler ready


# every figure name (kept for the tests and readers that check a name is known)
METRIC_NAMES: frozenset[str] = frozenset(Fact)


@dataclass(frozen=True, slots=True)
class Metric:
    """A figure printed on this line."""

    name: Fact
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
    tokens: int | None = None  # SGLang Decode `#token: N` (tokens held in the pool)


class PressureKind(StrEnum):
    """What a serving line says about the KV pool under load (``KvPressure``)."""

    RETRACTED = "retracted"  # SGLang `KV cache pool is full. Retract requests.` (<0.4: `Decode out of memory happened`)
    PREEMPTED = "preempted"  # vLLM periodic stats `Preemptions: N` (0.32 never prints it: reset before the check)
    DECODE_OOM = "decode_oom"  # SGLang `Decode out of memory. Try to lower your batch size.` (a hard failure)
    LENGTH_REFUSED = "length_refused"  # a request refused (or truncated) for the context length


@dataclass(frozen=True, slots=True)
class KvPressure:
    """A serving line that reports KV pressure: ``count`` requests (retracted, preempted, refused)
    in this line, ``detail`` the rest of its figures as printed (``new_token_ratio 0.70 -> 0.55``).
    ``kvtui.serving.logs`` folds these into cumulative totals (docs/serving-metrics.md)."""

    kind: PressureKind
    count: int = 1
    detail: str = ""


@dataclass(frozen=True, slots=True)
class VersionHint:
    version: str


@dataclass(frozen=True, slots=True)
class CaptureSizes:
    """The CUDA-graph batch sizes a capture runs (SGLang `Capture cuda graph bs [1, 2, 4, …]`)."""

    sizes: tuple[int, ...]
    model: Model = Model.TARGET


@dataclass(frozen=True, slots=True)
class WorkerNode:
    """A Ray worker process seen for the first time in this boot, and its node: ``ip`` as Ray tags
    the worker's lines (``(RayWorkerWrapper pid=345, ip=10.0.0.2)``), None for a worker on the
    driver's own node (Ray tags those without an ip). ``process`` is the worker's rank label."""

    ip: str | None
    process: str


@dataclass(frozen=True, slots=True)
class ServerExit:
    """The server process is gone, as the host backend saw it (not a line the engine printed:
    ``kvtui.engines.exit_record`` makes and reads the record). ``pid`` when known; ``detail`` an exit status
    when known; ``at_start``: it was already gone when following began; ``stopped``: it was stopped
    from outside (a kube pod deleted), not a crash."""

    pid: int | None = None
    detail: str = ""
    at_start: bool = False
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class LogGap:
    """Lines of the log kvtui did not read: the serving bulk of a server up for hours or days,
    between the boot's startup part (read whole) and the recent tail (not an engine line:
    ``kvtui.engines.source_records`` makes and reads the record).

    ``lines``  how many lines lie in the gap (None: not counted);
    ``where``  the source's own range, for a search on the host: ``bytes=A-B`` (a file's byte
               offsets, ``A`` inclusive, ``B`` exclusive; ``path=`` names a rotated sibling),
               ``after=CURSOR before=CURSOR`` (journald), ``since=TS until=TS`` (docker, kube);
    ``first_ts`` / ``last_ts`` the span's first and last line times when known."""

    lines: int | None = None
    where: str = ""
    first_ts: datetime | None = None
    last_ts: datetime | None = None


@dataclass(frozen=True, slots=True)
class StartMissing:
    """The current server's start is not in the log kvtui can read (rotated away, truncated, the
    journal vacuumed): what is known is that it serves. ``reason`` says why, for the operator
    (``rotated before 2026-06-02 14:33``)."""

    reason: str


@dataclass(frozen=True, slots=True)
class RunningCommand:
    """The running server's command line as the host's process table has it
    (``/proc/PID/cmdline``): its flags when the log no longer holds the engine's own dump."""

    argv: tuple[str, ...]
    pid: int | None = None


LogEvent = (
    PhaseMark
    | Metric
    | Flags
    | FailureText
    | Warning_
    | Progress
    | BootBoundary
    | Serving
    | KvPressure
    | VersionHint
    | CaptureSizes
    | ServerExit
    | WorkerNode
    | LogGap
    | StartMissing
    | RunningCommand
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
