"""Phase labels, colours and time helpers shared by the widgets (no textual imports: cheap to test).

Numbers, sizes and durations come from ``kvtui.fmt`` (re-exported here), the formatting module
the CLI uses too: one rounding rule for every view."""

from __future__ import annotations

from datetime import datetime

from kvtui import fmt
from kvtui.engines.events import FailureKind, Phase

PHASE_LABELS = fmt.PHASE_LABELS  # one naming of the phases for the CLI and the widgets

# The CSS variable of each phase's colour (see kvtui/ui/themes.py).
PHASE_VARIABLE: dict[Phase, str] = {
    Phase.LAUNCH: "phase-launch",
    Phase.INIT: "phase-init",
    Phase.LOAD_WEIGHTS: "phase-load",
    Phase.COMPILE: "phase-compile",
    Phase.KV_ALLOCATE: "phase-kv",
    Phase.GRAPH_CAPTURE: "phase-graph",
    Phase.HTTP_UP: "phase-http",
    Phase.READY: "phase-ready",
}

# What the engine counts while a phase makes progress (kvtui.fmt: the CLI's heartbeat says the same).
PROGRESS_UNITS = fmt.PROGRESS_UNITS

FAILURE_TITLES: dict[FailureKind, str] = {
    FailureKind.OOM_WEIGHTS: "out of memory loading weights",
    FailureKind.OOM_KV_ALLOCATE: "KV pool does not fit",
    FailureKind.KV_TOO_SMALL: "KV pool smaller than the context",
    FailureKind.OOM_GRAPH_CAPTURE: "out of memory in CUDA-graph capture",
    FailureKind.OOM_RUNTIME: "out of memory while serving",
    FailureKind.GPU_BUSY: "GPU memory held by other processes",
    FailureKind.NCCL: "NCCL / distributed error",
    FailureKind.BAD_ARGS: "the server refused its arguments",
    FailureKind.CRASH: "server crashed",
    FailureKind.NOT_SERVING: "ready, but not answering",
    FailureKind.UNKNOWN: "failed",
}



# The failure in a few words, where a line holds one state among others (the header, the fleet
# line, a host's row): the kind as a person reads it ("oom_graph_capture" was the code itself),
# at most 18 cells so "✖ failed: …" fits a host row's 28-cell column.
FAILURE_SHORT: dict[FailureKind, str] = {
    FailureKind.OOM_WEIGHTS: "OOM in weights",
    FailureKind.OOM_KV_ALLOCATE: "KV pool too big",
    FailureKind.KV_TOO_SMALL: "KV pool < context",
    FailureKind.OOM_GRAPH_CAPTURE: "OOM graph capture",
    FailureKind.OOM_RUNTIME: "OOM while serving",
    FailureKind.GPU_BUSY: "GPUs busy",
    FailureKind.NCCL: "NCCL error",
    FailureKind.BAD_ARGS: "bad arguments",
    FailureKind.CRASH: "crashed",
    FailureKind.NOT_SERVING: "not answering",
    FailureKind.UNKNOWN: "unknown",
}


def failure_short(kind: FailureKind, phase: Phase | None) -> str:
    """``FAILURE_SHORT``; an out-of-memory after the pools were sized and before ready is the
    warm-up request's (as ``failure_title`` words it)."""
    if kind is FailureKind.OOM_RUNTIME and phase is not None and phase is not Phase.READY:
        return "OOM at warm-up"
    return FAILURE_SHORT.get(kind, "unknown")


def failure_title(kind: FailureKind, phase: Phase | None) -> str:
    """The failure banner's title: ``FAILURE_TITLES``, with an out-of-memory after the pools were
    sized worded by when it came (the warm-up request before ready is not "while serving")."""
    if kind is FailureKind.OOM_RUNTIME and phase is not None and phase is not Phase.READY:
        return "out of memory at the warm-up request"
    return FAILURE_TITLES.get(kind, "failed")


VERDICT_VARIABLE: dict[str, str] = {
    "ok": "verdict-ok",
    "tight": "verdict-tight",
    "oom_risk": "verdict-oom-risk",
    "no_fit": "verdict-no-fit",
}


phase_label = fmt.phase_label


# Numbers, sizes and durations: kvtui.fmt, the one formatting module of every view (CLI too).
duration = fmt.duration
tokens = fmt.tokens
signed_tokens = fmt.signed_tokens
gib = fmt.gib
signed_gib = fmt.signed_gib
percent = fmt.percent
fraction = fmt.fraction
safe_max = fmt.safe_max
safe_min = fmt.safe_min
ray_nodes = fmt.ray_nodes
tp_ranks = fmt.tp_ranks
ray_node_lines = fmt.ray_node_lines
ray_nodes_compact = fmt.ray_nodes_compact
capacity = fmt.capacity


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from ``start`` to ``end`` (naive datetimes are local time, like the log's)."""
    if start is None or end is None:
        return None
    if (start.tzinfo is None) != (end.tzinfo is None):
        start = start.astimezone() if start.tzinfo is None else start
        end = end.astimezone() if end.tzinfo is None else end
    return (end - start).total_seconds()


def epoch(moment: datetime) -> float:
    """Wall-clock seconds of ``moment`` (naive = local time)."""
    return moment.timestamp()


def bar(fraction_done: float, width: int) -> tuple[int, int]:
    """Cells (filled, empty) of a ``width``-cell bar at ``fraction_done`` (clamped to 0..1)."""
    if width <= 0:
        return 0, 0
    done = min(width, max(0, round(min(1.0, max(0.0, fraction_done)) * width)))
    return done, width - done
