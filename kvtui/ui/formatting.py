"""Number, time and phase formatting shared by the widgets (no textual imports: cheap to test)."""

from __future__ import annotations

import math
from datetime import datetime

from kvtui.engines.events import FailureKind, Phase

PHASE_LABELS: dict[Phase, str] = {
    Phase.LAUNCH: "launch",
    Phase.INIT: "init",
    Phase.LOAD_WEIGHTS: "load weights",
    Phase.COMPILE: "compile",
    Phase.KV_ALLOCATE: "KV allocate",
    Phase.GRAPH_CAPTURE: "graph capture",
    Phase.HTTP_UP: "HTTP up",
    Phase.READY: "ready",
}

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

# What the engine counts while a phase makes progress.
PROGRESS_UNITS: dict[Phase, str] = {
    Phase.LOAD_WEIGHTS: "shards",
    Phase.GRAPH_CAPTURE: "batches",
    Phase.COMPILE: "shapes",
}

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
    FailureKind.UNKNOWN: "failed",
}

VERDICT_VARIABLE: dict[str, str] = {
    "ok": "verdict-ok",
    "tight": "verdict-tight",
    "oom_risk": "verdict-oom-risk",
    "no_fit": "verdict-no-fit",
}


def phase_label(phase: Phase | str | None) -> str:
    if phase is None:
        return "—"
    try:
        return PHASE_LABELS[Phase(phase)]
    except ValueError:
        return str(phase)


def duration(seconds: float | None) -> str:
    """``4.2s``, ``12s``, ``3m 05s``, ``1h 02m``; ``—`` when unknown."""
    if seconds is None or math.isnan(seconds):
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{int(seconds)}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def tokens(value: float | None) -> str:
    return "—" if value is None else f"{int(value):,}"


def gib(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f} GiB"


def signed_gib(value: float | None) -> str:
    return "—" if value is None else f"{value:+,.2f} GiB"


def percent(value: float | None) -> str:
    """``value`` is a 0..1 fraction."""
    return "—" if value is None else f"{value * 100:.1f}%"


def fraction(value: float | None) -> str:
    """A memory fraction with 2 or 3 decimals: ``0.85``, ``0.875``."""
    if value is None:
        return "—"
    text = f"{value:.3f}"
    return text[:-1] if text.endswith("0") else text


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
