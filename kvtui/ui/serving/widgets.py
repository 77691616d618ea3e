"""The console's serving view (issue 24): while a host's boot is ready, its pane samples the
server (``kvtui.serving_live.ServingReader``: ``/metrics``, else the log's serving lines) and shows

* ``ServingRow``      a row in the boot panel's ready state, under the KV gauge and its load row:
                      preemptions / retractions per minute, waiting, TTFT p95, queue-time p95, the
                      window's peak KV usage and where the figures come from;
* ``ServingBanner``   the KV-pressure diagnosis when a limit bites, one line collapsed, with the
                      calculator's answer (``suggest``): "pool full: … at mem-fraction-static 0.92
                      (largest safe 0.959) the pool grows from … to ~… tokens (+53 %)"; ``K``
                      takes that edit to the apply dialog;
* ``KvTimeline``      the KV usage as a one-row timeline in the GPU panel, under GPU memory
                      (a bounded ring of samples).

``suggest`` sizes the diagnosis' knob with the console calculator's own path — its calibrated
model, ``kvcalc.parse_what_if`` + ``kvcalc.predict`` with its graph margin — and runs off the event
loop (the pane calls it in a thread).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.content import Content

from kvtui import fmt
from kvtui.engines.events import Engine
from kvtui.lazy import lazy_module
from kvtui.serving.diagnose import Diagnosis, Limit
from kvtui.serving.window import ServingFigures
from kvtui.ui.perf import QuietStatic
from kvtui.ui.widgets.banner import Banner

if TYPE_CHECKING:  # the calculator is imported when a pool is full, not before the console's first frame
    from kvtui import kvcalc
else:
    kvcalc = lazy_module("kvtui.kvcalc")  # lazy: after the console's first frame (test_ui_startup): +47 ms CPU

DEMAND_MARGIN = 1.25  # the suggested pool holds the observed peak demand with this margin
TIMELINE_POINTS = 240  # KvTimeline's ring: 20 min at the pane's 5 s sampling
MAX_CPU_STEPS = 256  # VLLM_CPU_KVCACHE_SPACE candidates tried, 1 GiB apart
SPARK = "▁▂▃▄▅▆▇█"
APPLY_KEY = "K"  # the screen's binding (kvtui.ui.bindings MAIN_BINDINGS, id "serving.apply")


@dataclass(frozen=True, slots=True)
class Suggestion:
    """The calculator's answer to a "pool full" diagnosis: ``flag`` as the calculator names it
    (``mem_fraction_static``, ``gpu_memory_utilization``, ``vllm_cpu_kvcache_space``) set to
    ``value`` (None: no increase is safe); ``answer`` the phrase for ``Diagnosis.line``."""

    flag: str
    value: str | None
    answer: str
    base_tokens: int | None = None
    tokens: int | None = None
    safe: str | None = None
    short: str = ""  # the answer in the banner's one collapsed line

    @property
    def headline(self) -> str:
        return self.short or self.answer

    @property
    def edit(self) -> str | None:
        """``mem_fraction_static=0.92`` (``kvtui calc --set``'s form), None without a value."""
        return None if self.value is None else f"{self.flag}={self.value}"


def _predict(model: kvcalc.MemoryModel, flag: str, value: str | None, margin: float) -> kvcalc.Prediction:
    """As the calculator panel predicts: its edits parsed, then ``kvcalc.predict``."""
    edits = kvcalc.parse_what_if(model.engine, [f"{flag}={value}"] if value is not None else [], [])
    return kvcalc.predict(model, edits, graph_margin_gib=margin)


def _grows(base: int, tokens: int) -> str:
    pct = (tokens / base - 1.0) * 100.0 if base > 0 else 0.0
    return f"the pool grows from {base:,} to ~{tokens:,} tokens ({pct:+.0f} %)"


def _arrow(base: int, tokens: int) -> str:
    pct = (tokens / base - 1.0) * 100.0 if base > 0 else 0.0
    return f"{base:,} → ~{tokens:,} tokens ({pct:+.0f} %)"


def _cannot(engine: Engine, why: str) -> str:
    cap = "max-running-requests" if engine is Engine.SGLANG else "max-num-seqs"
    return f"the pool cannot grow safely on these GPUs ({why}): lower {cap} / context, or add GPUs"


def suggest(diag: Diagnosis, model: kvcalc.MemoryModel | None, margin_gib: float) -> Suggestion | None:
    """The edit that answers ``diag`` when the pool is full (None otherwise, or when the calculator
    has no model or cannot size the knob). The memory fraction: the largest safe one rounded down
    to 0.01, or the smallest that holds the observed peak demand (``Evidence.peak_tokens``) ×
    ``DEMAND_MARGIN``, whichever is smaller, and an increase; on vLLM's CPU backend
    ``VLLM_CPU_KVCACHE_SPACE`` in whole GiB the same way (the largest the calculator calls safe)."""
    if diag.limit is not Limit.POOL or model is None or not diag.knobs:
        return None
    peak = diag.evidence.peak_tokens
    target = None if peak is None else math.ceil(peak * DEMAND_MARGIN)
    try:
        base = _predict(model, "", None, margin_gib)
        name = diag.knobs[0].name
        if name == "VLLM_CPU_KVCACHE_SPACE":
            return _suggest_cpu(model, base, target, margin_gib)
        if name not in ("--mem-fraction-static", "--gpu-memory-utilization"):
            return None
        return _suggest_fraction(model, base, target, margin_gib)
    except kvcalc.CalcError:
        return None


def _suggest_fraction(model: kvcalc.MemoryModel, base: kvcalc.Prediction, target: int | None,
                      margin: float) -> Suggestion:
    flag = kvcalc.fraction_flag(model.engine)
    label = flag.replace("_", "-")
    safe = fmt.safe_max(base.max_safe_fraction)
    if base.max_safe_fraction is None:
        return Suggestion(flag, None, _cannot(model.engine, "the calculator finds no safe fraction"),
                          base.tokens, None, None)
    current = fmt.round_near(model.fraction, 3)
    largest = fmt.round_down(base.max_safe_fraction, 2)
    first = math.floor(current * 100 + 1e-6) + 1  # the first 0.01 step above the running fraction
    chosen: tuple[str, kvcalc.Prediction] | None = None
    for k in range(first, round(largest * 100) + 1):
        value = f"{k / 100:.2f}"
        pred = _predict(model, flag, value, margin)
        chosen = (value, pred)
        if target is not None and pred.tokens >= target:
            break
    if chosen is None or chosen[1].tokens <= base.tokens:
        return Suggestion(flag, None, _cannot(model.engine, f"{label} {fmt.round_near(current, 3):g}, "
                                                            f"largest safe {safe}"), base.tokens, None, safe)
    value, pred = chosen
    answer = f"at {label} {value} (largest safe {safe}) {_grows(base.tokens, pred.tokens)}"
    short = f"{label} {value} (largest safe {safe}): {_arrow(base.tokens, pred.tokens)}, {APPLY_KEY} applies"
    return Suggestion(flag, value, answer, base.tokens, pred.tokens, safe, short)


def _suggest_cpu(model: kvcalc.MemoryModel, base: kvcalc.Prediction, target: int | None,
                 margin: float) -> Suggestion | None:
    flag = kvcalc.whatif.CPU_KV_SPACE
    try:
        current = float(str(model.pool_env.get("VLLM_CPU_KVCACHE_SPACE")))
    except ValueError:
        return None
    chosen: tuple[str, kvcalc.Prediction] | None = None
    for k in range(math.floor(current) + 1, math.floor(current) + 1 + MAX_CPU_STEPS):
        value = str(k)
        pred = _predict(model, flag, value, margin)
        if pred.verdict is not kvcalc.Verdict.OK:
            break
        chosen = (value, pred)
        if target is not None and pred.tokens >= target:
            break
    if chosen is None or chosen[1].tokens <= base.tokens:
        return Suggestion(flag, None, _cannot(model.engine, f"VLLM_CPU_KVCACHE_SPACE {current:g} GiB"),
                          base.tokens, None, None)
    value, pred = chosen
    return Suggestion(flag, value, f"at VLLM_CPU_KVCACHE_SPACE={value} GiB {_grows(base.tokens, pred.tokens)}",
                      base.tokens, pred.tokens, None,
                      f"VLLM_CPU_KVCACHE_SPACE={value}: {_arrow(base.tokens, pred.tokens)}, {APPLY_KEY} applies")


# ---- widgets ------------------------------------------------------------------------------------


def _secs(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.1f} s"


def _rate(v: float | None) -> str:
    return "—" if v is None else (f"{v:,.0f}" if v >= 10 else f"{v:.1f}")


def serving_text(figures: ServingFigures, engine: Engine, source: str, *, with_usage: bool) -> str:
    """The row: ``/metrics: waiting 3 · retractions 2.4/min · TTFT p95 410 ms · queue p95 120 ms``
    (``with_usage``: KV usage and running first and the window's peak usage last, when no serving
    line feeds the KV gauge above it)."""
    f = figures
    parts: list[str] = []
    if with_usage:
        if f.kv_usage is not None:
            parts.append(f"KV {f.kv_usage * 100:.1f}%")
        if f.running is not None:
            parts.append(f"running {f.running}")
    if f.waiting is not None:
        parts.append(f"waiting {f.waiting}")
    if engine is Engine.SGLANG:
        parts.append(f"retractions {_rate(f.retractions_per_min)}/min")
    else:
        parts.append(f"preemptions {_rate(f.preemptions_per_min)}/min")
    parts.append(f"TTFT p95 {_secs(f.ttft_p95)}")
    parts.append(f"queue p95 {_secs(f.queue_p95)}")
    if with_usage and f.peak_kv_usage is not None:  # else the gauge above shows the usage
        parts.append(f"peak KV {f.peak_kv_usage * 100:.0f}%")
    return f"{source}: " + " · ".join(parts)


class ServingRow(QuietStatic):
    """The serving figures of the window (``ServingFigures``) under the KV gauge (wrapped; one
    row on a short terminal: its CSS names the screen's class, hence not scoped)."""

    SCOPED_CSS = False

    DEFAULT_CSS = """
    ServingRow {
        display: none;
        height: auto;
        padding: 0 1;
        color: $text-muted;
        &.-shown { display: block; }
    }
    MainScreen.-short ServingRow {  /* a short terminal: one row, cut with … (the log keeps its rows) */
        height: 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    text = ""

    def show(self, text: str | None) -> None:
        self.set_class(text is not None, "-shown")
        self.text = text or ""
        self.set(text, lambda: text or "")


class ServingBanner(Banner):
    """The diagnosis when a limit bites, with the calculator's answer, above the panels as the
    other banners (one line collapsed; ``b`` shows the evidence); hidden while nothing bites."""

    DEFAULT_CSS = """
    ServingBanner {
        display: none;
        height: auto;
        max-height: 14;
        padding: 0 1;
        background: $warning-muted;
        border-left: thick $warning;
        &.-shown { display: block; }
    }
    """

    line = ""

    def show(self, diag: Diagnosis | None, suggestion: Suggestion | None) -> None:
        shown = diag is not None and diag.limit is not Limit.NONE
        self.set_class(shown, "-shown")
        if diag is None or not shown:
            self.line = ""
            self.set(None, lambda: "")
            return
        answer = suggestion.answer if suggestion is not None else None
        self.line = diag.line(answer=answer)
        lines = [self.line, *diag.detail()[1:]]
        if suggestion is not None and suggestion.edit is not None:
            lines.append(f"{APPLY_KEY}: set {suggestion.flag.replace('_', '-')} to {suggestion.value} in the "
                         "calculator and open the apply dialog")
        full = "\n".join(lines)
        head = diag.line(answer=suggestion.headline) if suggestion is not None else self.line
        self.head = Content(head)
        self.set((full, head), lambda: Content(full))


class KvTimeline(QuietStatic):
    """The KV usage over the serving samples, one row (``KV ▁▂▅▇█ 96%``) under the GPU plot."""

    DEFAULT_CSS = """
    KvTimeline {
        display: none;
        height: 1;
        padding: 0 1;
        text-wrap: nowrap;
        &.-shown { display: block; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.points: deque[float] = deque(maxlen=TIMELINE_POINTS)

    def clear(self) -> None:
        self.points.clear()
        self.set_class(False, "-shown")

    def add(self, usage: float | None) -> None:
        if usage is not None:
            self.points.append(max(0.0, min(1.0, usage)))

    def draw(self) -> None:
        self.set_class(bool(self.points), "-shown")
        if not self.points:
            return
        width = max(4, (self.content_region.width or 40) - 9)
        pts = list(self.points)[-width:]
        spark = "".join(SPARK[min(len(SPARK) - 1, int(p * len(SPARK)))] for p in pts)
        last = pts[-1]
        style = "$error" if last >= 0.95 else "$warning" if last >= 0.8 else "$success"
        key = (spark, last)
        self.set(key, lambda: Content.assemble(("KV ", "$text-muted"), (spark, style), f" {last * 100:.0f}%"),
                 layout=False)
