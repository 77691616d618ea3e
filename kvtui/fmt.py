"""How kvtui writes a number, a size or a duration: the one formatting module (pure core).

Every view (``replay``, ``calc``, ``wait``, ``apply``, the calculator's ``explain``, the console
through ``kvtui.ui.formatting``) formats a figure with these functions, so the same quantity reads
the same everywhere. The rounding rule, one for all:

* a figure is rounded **once**, from its exact value, at the precision it is shown with (never a
  rounded figure rounded again: 1.9749 is ``1.97``, not 1.975 then ``1.98``);
* measured and predicted figures (GiB, tokens, percentages, durations) go to the **nearest**
  value at that precision (``4.25`` s → ``4.2s``, ``59.7`` s → ``1m 00s``);
* a **limit** goes toward the safe side: the largest safe value and a capacity (how many
  full-context requests fit) are rounded **down**, the smallest value needed is rounded **up**
  (a "largest safe fraction 0.96" must never name a fraction that is itself not safe).

``—`` stands for an unknown value (None) everywhere.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from typing import TYPE_CHECKING

from kvtui.engines.events import Model, Phase

if TYPE_CHECKING:
    from kvtui.boot import Boot

UNKNOWN = "—"

# ---------------------------------------------------------------------------------------------
# Rounding
# ---------------------------------------------------------------------------------------------


def _decimal(x: float) -> Decimal:
    # repr() is the shortest string that reads back as x: 0.959 stays 0.959 (not 0.95899999…)
    return Decimal(repr(float(x)))


def _directed(x: float, digits: int, rounding: str) -> float:
    if not math.isfinite(x):
        return x
    try:
        q = _decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=rounding)
    except InvalidOperation:  # a value too large for the precision: nothing left to round
        return x
    return float(q)


def round_down(x: float, digits: int) -> float:
    """``x`` rounded toward −∞ at ``digits`` decimals (0.959 → 0.95 at 2, 0.959 at 3)."""
    return _directed(x, digits, ROUND_FLOOR)


def round_up(x: float, digits: int) -> float:
    """``x`` rounded toward +∞ at ``digits`` decimals (0.5581 → 0.559 at 3)."""
    return _directed(x, digits, ROUND_CEILING)


def round_near(x: float, digits: int) -> float:
    """``x`` rounded to the nearest value at ``digits`` decimals (what the ``:.Nf`` formats show)."""
    return float(f"{x:.{digits}f}") if math.isfinite(x) else x


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def number(value: float | None, digits: int = 2) -> str:
    """``1,234.57``: nearest, with thousands separators."""
    return UNKNOWN if value is None else f"{value:,.{digits}f}"


def tokens(value: float | None) -> str:
    """A whole count (tokens, requests, bytes): ``432,078``."""
    return UNKNOWN if value is None else f"{int(value):,}"


def signed_tokens(value: float | None) -> str:
    """A change in a count: ``+144,800``, ``-2,048``."""
    return UNKNOWN if value is None else f"{int(value):+,}"


def gib(value: float | None, digits: int = 2) -> str:
    """``10.83 GiB`` (nearest)."""
    return UNKNOWN if value is None else f"{value:,.{digits}f} GiB"


def gib_number(value: float | None, digits: int = 2) -> str:
    """The number of a GiB figure without its unit (``10.83``), for formulas."""
    return UNKNOWN if value is None else f"{value:,.{digits}f}"


def signed_gib(value: float | None, digits: int = 2) -> str:
    """``+2.31 GiB`` / ``-0.32 GiB`` (nearest)."""
    return UNKNOWN if value is None else f"{value:+,.{digits}f} GiB"


def mib(value_gib: float | None, digits: int = 1) -> str:
    """A GiB figure in MiB: ``1,024.0 MiB``."""
    return UNKNOWN if value_gib is None else f"{value_gib * 1024:,.{digits}f} MiB"


def percent(value: float | None, digits: int = 1) -> str:
    """A 0..1 fraction as a percentage: ``4.2%``."""
    return UNKNOWN if value is None else f"{value * 100:.{digits}f}%"


def _strip_fraction(text: str) -> str:
    """``0.850`` → ``0.85``; at least two decimals stay (``0.800`` → ``0.80``)."""
    while text.endswith("0") and len(text.partition(".")[2]) > 2:
        text = text[:-1]
    return text


def fraction(value: float | None) -> str:
    """A memory fraction with 2 or 3 decimals: ``0.85``, ``0.875`` (nearest at 3)."""
    return UNKNOWN if value is None else _strip_fraction(f"{value:.3f}")


def safe_max(value: float | None, digits: int = 3) -> str:
    """The largest safe value of a fraction, rounded **down** at the precision shown."""
    return UNKNOWN if value is None else _strip_fraction(f"{round_down(value, digits):.{digits}f}")


def safe_min(value: float | None, digits: int = 3) -> str:
    """The smallest value a fraction needs, rounded **up** at the precision shown."""
    return UNKNOWN if value is None else _strip_fraction(f"{round_up(value, digits):.{digits}f}")


def capacity(value: float | None, digits: int = 2) -> str:
    """How many of something fit (full-context requests): rounded **down** (``1.9749`` → ``1.97``)."""
    if value is None:
        return UNKNOWN
    return f"{round_down(value, digits):,.{digits}f}"


# ---------------------------------------------------------------------------------------------
# Time
# ---------------------------------------------------------------------------------------------


def duration(seconds: float | None) -> str:
    """An elapsed time: ``4.2s``, ``12s``, ``3m 05s``, ``1h 02m`` (nearest at the precision shown);
    ``—`` when unknown."""
    if seconds is None or math.isnan(seconds):
        return UNKNOWN
    seconds = max(0.0, seconds)
    if math.isinf(seconds):
        return "∞"
    if seconds < 9.95:
        return f"{seconds:.1f}s"
    if seconds < 59.5:
        return f"{round(seconds)}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours}h {minutes:02d}m"


def stamp(seconds: float) -> str:
    """The elapsed-time column of ``kvtui wait``'s progress lines: ``[  12.3s]``."""
    return f"[{max(0.0, seconds):6.1f}s]"



# ---------------------------------------------------------------------------------------------
# Where a boot is
# ---------------------------------------------------------------------------------------------

HEARTBEAT_S = 9.0
"""A command that waits on a boot (``wait``, ``apply --restart``) prints where it is after this long
without output: a CI log is never silent for more than 10 s."""

# What the engine counts while a phase makes progress.
PROGRESS_UNITS: dict[Phase, str] = {
    Phase.LOAD_WEIGHTS: "shards",
    Phase.GRAPH_CAPTURE: "batches",
    Phase.COMPILE: "shapes",
}


# How a phase is named to a person (the CLI's progress and heartbeat lines, every widget); the
# phase's value (``load_weights``) stays the vocabulary of JSON and the history.
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


def phase_label(phase: Phase | str | None) -> str:
    """``load_weights`` -> ``load weights``; ``—`` for none."""
    if phase is None:
        return "—"
    try:
        return PHASE_LABELS[Phase(phase)]
    except ValueError:
        return str(phase)


def boot_progress(boot: Boot) -> str:
    """The phase a boot is in and its progress: ``load weights 12/61 shards``,
    ``graph capture 20/36 batches (draft)``; ``starting`` before its first phase (a heartbeat)."""
    if not boot.phases:
        return boot.status.value
    span = boot.phases[-1]
    text = phase_label(span.name) + (" (draft)" if span.model is Model.DRAFT else "")
    if span.progress_total:
        unit = PROGRESS_UNITS.get(span.name, "steps")
        text += f" {span.progress_done or 0}/{span.progress_total} {unit}"
    return text


# -- Ray nodes (vLLM's Ray executor): ``Boot.nodes_json()`` / the ``nodes`` of replay --json and the history


_PID_RE = re.compile(r"\bpid=(\d+)")


@dataclass(frozen=True, slots=True)
class RayNode:
    """One Ray node of a boot: its ip (None: the driver's own node), its worker processes' pids
    (in the order first seen) and the TP ranks they said they hold."""

    ip: str | None
    pids: tuple[str, ...]
    tp_ranks: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.ip or "driver"


def ray_nodes(nodes: object) -> list[RayNode]:
    """The ``nodes`` list (``[{"ip", "processes", "tp_ranks"}]``, as ``replay --json`` writes it and
    the history stores it) read back; anything malformed is left out."""
    out: list[RayNode] = []
    if not isinstance(nodes, list):
        return out
    for n in nodes:
        if not isinstance(n, dict):
            continue
        ip = n.get("ip")
        procs = n.get("processes") if isinstance(n.get("processes"), list) else []
        pids = tuple(m.group(1) if (m := _PID_RE.search(str(p))) else str(p) for p in procs or ())
        said = n.get("tp_ranks") or ()
        ranks = tuple(sorted({r for r in said if isinstance(r, int) and not isinstance(r, bool)}))
        out.append(RayNode(str(ip) if isinstance(ip, str) and ip else None, pids, ranks))
    return out


def tp_ranks(ranks: tuple[int, ...] | list[int]) -> str:
    """``TP0``, ``TP0,2``, ``TP0–3`` (a run of three or more); ``no TP`` when none was said."""
    if not ranks:
        return "no TP"
    rs = sorted(set(ranks))
    if len(rs) >= 3 and rs[-1] - rs[0] == len(rs) - 1:
        return f"TP{rs[0]}–{rs[-1]}"
    return "TP" + ",".join(str(r) for r in rs)


def ray_node_lines(nodes: object) -> list[str]:
    """One line per Ray node: where it is, its TP ranks, its workers (the driver's node first)."""
    lines = []
    for n in ray_nodes(nodes):
        where = "driver's node" if n.ip is None else n.ip
        workers = f"{len(n.pids)} worker{'s' if len(n.pids) != 1 else ''}"
        if n.pids:
            shown = ", ".join(n.pids[:6]) + ("…" if len(n.pids) > 6 else "")
            workers += f" (pid{'s' if len(n.pids) != 1 else ''} {shown})"
        lines.append(f"{where:<15} {tp_ranks(n.tp_ranks):<8} {workers}")
    return lines


def ray_nodes_compact(nodes: object) -> str:
    """``2 nodes: TP0 driver · TP1 127.0.0.1`` (``""`` without Ray nodes)."""
    ns = ray_nodes(nodes)
    if not ns:
        return ""
    parts = " · ".join(f"{tp_ranks(n.tp_ranks)} {n.name}" for n in ns)
    return f"{len(ns)} node{'s' if len(ns) != 1 else ''}: {parts}"



# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: cut with ``…`` where it is longer."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (white space folded), at most ``limit`` characters (a message quoted in a report)."""
    return cut(" ".join(text.split()), limit)
