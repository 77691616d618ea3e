"""The boot panel: phase timeline, key figures, live KV usage, failure banner and stall notice.

Each widget renders only what it is given (a ``Boot``, the current time); none parses text.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import ClassVar

from textual.content import Content
from textual.geometry import Size
from textual.reactive import reactive
from textual.widget import Widget

from kvtui import longrun
from kvtui.boot import Boot, BootStatus, Failure, PhaseSpan
from kvtui.boot.stall import Stall
from kvtui.engines.events import PHASE_ORDER, Fact, Model, Phase
from kvtui.history.eta import BootEta
from kvtui.history.eta import clock as eta_clock
from kvtui.ui import formatting as fmt
from kvtui.ui.widgets.banner import Banner, Notice

_FINAL_TARGET = {Phase.READY}


def _span_seconds(span: PhaseSpan, now: datetime | None, live: bool) -> float | None:
    if span.seconds is not None and span.end is not None:
        return span.seconds
    if span.end is not None:
        return fmt.seconds_between(span.start, span.end)
    if live:
        return fmt.seconds_between(span.start, now)
    return span.seconds


def _progress(span: PhaseSpan, room: int = 30) -> Content:
    """``━━━━━━━━━━ 24/64 shards`` in ``room`` cells (the bar shrinks, then goes)."""
    if span.progress_total:
        done = span.progress_done or 0
        unit = fmt.PROGRESS_UNITS.get(span.name, "")
        label = f"{done}/{span.progress_total}"
        if room - len(label) - len(unit) - 2 >= 6:
            label += f" {unit}"
        width = min(16, room - len(label) - 1)
        if width < 4:
            return Content.styled(label, "$text-muted")
        filled, empty = fmt.bar(done / span.progress_total, width)
        return Content.assemble(
            ("━" * filled, "$" + fmt.PHASE_VARIABLE.get(span.name, "phase-load")),
            ("━" * empty, "$foreground 15%"),
            (f" {label}", "$text-muted"),
        )
    if span.progress_done is not None:
        unit = fmt.PROGRESS_UNITS.get(span.name, "")
        return Content.styled(f"{span.progress_done}{' ' + unit if unit else ''}", "$text-muted")
    return Content("")


class BootRows(Widget):
    """A panel of a boot's rows, told the boot often (every batch, every second): it repaints only
    a change, and lays itself out again only when its number of rows changed (``_repaint``)."""

    DEFAULT_CSS = """
    BootRows {
        height: auto;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._boot: Boot | None = None
        self._rows_shown = -1

    def _repaint(self, rows: int) -> None:
        self.refresh(layout=rows != self._rows_shown)
        self._rows_shown = rows


def _engine_own(boot: Boot, span: PhaseSpan) -> Content:
    """The engine's own duration of a phase beside kvtui's (SGLang's ``Engine startup timings``),
    when it printed one."""
    own = boot.engine_seconds(span)
    return Content("") if own is None else Content.styled(f" · engine {fmt.duration(own)}", "$text-muted italic")


class PhaseTimeline(BootRows):
    """Every phase of the boot in order: done ✔ with its time, the current one ticking, the rest
    pending; a draft model's phases nested under the target's."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._now: datetime | None = None
        self._eta: BootEta | None = None
        self._shown: tuple[str, ...] | None = None
        self.offline: str | None = None  # the host is not reached
        self.compact = False  # a short terminal: two lines (the current phase, the phases done)

    def set_offline(self, offline: str | None) -> None:
        if offline != self.offline:
            self.offline = offline
            self.show(self._boot, self._now)

    def set_compact(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self._shown = None
            self.show(self._boot, self._now)

    def show(self, boot: Boot | None, now: datetime | None, eta: BootEta | None = None) -> None:
        """``eta``: the running boot's ETA from the history (the current phase shows
        ``0:41 / ~1:05``); None: no history to base one on, nothing is made up."""
        self._boot = boot
        self._now = now
        self._eta = eta
        shown = tuple(row.markup for row in self._rows())
        if shown == self._shown:  # told the state every second: repaint only a change
            return
        self._shown = shown
        self._repaint(len(shown))

    def _row_count(self) -> int:
        return sum(1 for _ in self._rows())

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, self._row_count())

    def _rows(self) -> Iterable[Content]:
        boot = self._boot
        if boot is None:
            if self.offline is not None:
                yield Content.styled(f"no log yet: {self.offline}", "$warning italic")
            else:
                yield Content.styled("waiting for the server's log…", "$text-muted italic")
            return
        if boot.start_missing is not None:
            yield from self._start_missing_rows(boot)
            return
        if self.compact:
            yield from self._compact_rows(boot)
            return
        target = [s for s in boot.phases if s.model is Model.TARGET]
        draft = [s for s in boot.phases if s.model is Model.DRAFT]
        reached = {s.name for s in target}
        failed = boot.status is BootStatus.FAILED
        stopped = boot.status is BootStatus.STOPPED
        current = target[-1] if target else None
        live = boot.status is BootStatus.STARTING
        room = max(0, (self.size.width or 80) - 2 - 26)
        for span in target:
            is_current = span is current and span.end is None and span.name not in _FINAL_TARGET
            var = "$" + fmt.PHASE_VARIABLE[span.name]
            if span is current and failed:
                icon, icon_style, name_style = "✖", "$phase-failed bold", "$phase-failed bold"
            elif span is current and stopped and span.end is None:
                icon, icon_style, name_style = "■", "$text-muted", "$text-muted"
            elif is_current:
                icon, icon_style, name_style = "▶", f"{var} bold", f"{var} bold"
            else:
                icon, icon_style, name_style = "✔", var, "$foreground"
            seconds = _span_seconds(span, self._now, live and is_current)
            time_text = "" if span.name in _FINAL_TARGET else fmt.duration(seconds)
            eta = self._eta
            if is_current and eta is not None and eta.current is not None and eta.phase == span.name.value:
                expected = eta.expected if eta.expected is not None else eta.current.median  # at the boot's pace
                time_text = f"{eta_clock(seconds or 0.0)} / ~{eta_clock(expected)}"
            own = _engine_own(boot, span)
            # the room the row leaves: an ETA ("0:01 / ~0:06") is wider than a time, and the
            # shard counter was cut ("7…") at 120x36 (issue 22 #14)
            row_room = max(0, room - max(0, len(time_text) - 8) - own.cell_length)
            yield Content.assemble(
                (f"{icon} ", icon_style),
                (f"{fmt.phase_label(span.name):<14}", name_style),
                (f"{time_text:>8}", "$foreground bold" if is_current else "$text-muted"),
                "  ",
                _progress(span, row_room),
                own,
            )
            for d in draft:
                if d.name == span.name:
                    d_seconds = _span_seconds(d, self._now, live and d.end is None)
                    yield Content.assemble(
                        ("  ↳ ", "$text-muted"),
                        (f"draft {fmt.phase_label(d.name):<12}", "$text-muted"),
                        (f"{fmt.duration(d_seconds):>6}", "$text-muted"),
                        "  ",
                        _progress(d, room),
                        _engine_own(boot, d),
                    )
        if boot.skipped_lines or boot.skipped_where:
            said = longrun.skipped(boot) or ""
            yield Content.styled(f"⋯ {said} (/ searches them on the host)", "$text-muted italic")
        if failed or stopped:
            return
        for phase in PHASE_ORDER:
            if phase in reached or (phase is Phase.COMPILE and boot.phase is not None):
                continue
            if current is not None and PHASE_ORDER.index(phase) < PHASE_ORDER.index(current.name):
                continue
            yield Content.assemble(("· ", "$text-disabled"), (fmt.phase_label(phase), "$text-disabled"))

    def _start_missing_rows(self, boot: Boot) -> Iterable[Content]:
        """A server up since before the log kvtui could read: it serves; its phases are not in
        the log (never "not started"); where its flags and pool figure came from."""
        head = "serving" if boot.status is BootStatus.READY else boot.status.value
        style = "$phase-ready bold" if boot.status is BootStatus.READY else "$text-muted bold"
        yield Content.styled(f"✔ {head} — its start is not in the log", style)
        reason = (boot.start_missing or "").strip()
        if reason:
            yield Content.styled(f"  ({reason})", "$text-muted")
        if self.compact:
            return
        yield Content.styled("  phases: not in the log", "$text-muted italic")
        for line in (longrun.flags_source(boot), longrun.skipped(boot)):
            if line:
                yield Content.styled(f"  {line}", "$text-muted")
        est = boot.live.pool_tokens_est
        if est is not None:
            err = boot.live.pool_tokens_err
            yield Content.styled(f"  pool ~{est:,} tokens (estimated{f' ±{err:,}' if err else ''})", "$text-muted")

    def _compact_rows(self, boot: Boot) -> Iterable[Content]:
        """The boot in two lines: where it is now, then the phases it went through."""
        target = [s for s in boot.phases if s.model is Model.TARGET]
        current = target[-1] if target else None
        live = boot.status is BootStatus.STARTING
        room = max(0, (self.size.width or 80) - 2 - 26)
        if boot.status is BootStatus.FAILED:
            where = f" in {fmt.phase_label(current.name)}" if current is not None else ""
            yield Content.styled(f"✖ failed{where}", "$phase-failed bold")
        elif boot.status is BootStatus.STOPPED:
            yield Content.styled("■ stopped", "$text-muted bold")
        elif boot.status is BootStatus.READY:
            yield Content.styled("✔ ready", "$phase-ready bold")
        elif current is not None:
            var = "$" + fmt.PHASE_VARIABLE[current.name]
            seconds = _span_seconds(current, self._now, live)
            yield Content.assemble(
                ("▶ ", f"{var} bold"), (f"{fmt.phase_label(current.name):<14}", f"{var} bold"),
                (f"{fmt.duration(seconds):>8}", "$foreground bold"), "  ", _progress(current, room),
            )
        done = [s for s in target if s is not current or not live]
        parts = [
            f"{fmt.phase_label(s.name)} {fmt.duration(_span_seconds(s, self._now, False))}"
            for s in done if s.name not in _FINAL_TARGET
        ]
        if parts:
            yield Content.assemble(("✔ ", "$text-muted"), (" · ".join(parts), "$text-muted"))

    def render(self) -> Content:
        return Content("\n").join(list(self._rows()))

    def copy_text(self) -> str:
        """The phases as the panel shows them in full (``Y`` copies them), as plain text."""
        compact, self.compact = self.compact, False
        try:
            return "\n".join(row.plain.rstrip() for row in self._rows())
        finally:
            self.compact = compact


class BootFigures(BootRows):
    """The boot's key figures: pool tokens, KV GiB per rank, memory left, graph memory, context."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._shown: list[tuple[str, str]] | None = None
        self.repaints = 0  # refreshes asked for, for tests and the curious
        self.compact = False  # a short terminal: the key figures as a few wrapped lines

    def set_compact(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self.refresh(layout=True)

    def show(self, boot: Boot | None) -> None:
        """Told the boot on every batch (a serving line every few seconds): repaint only when a
        figure changed."""
        self._boot = boot
        figures = self.figures()
        if figures == self._shown:
            return
        self._shown = figures
        self.repaints += 1
        self._repaint(len(figures))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.compact:
            return max(1, len(self._compact_lines(width)))
        return max(1, len(self.figures()))

    def _compact_lines(self, width: int) -> list[Content]:
        boot = self._boot
        if boot is None:
            return [Content.styled("no figures yet", "$text-muted italic")]
        m = boot.metrics
        kv = "—" if m.max_total_num_tokens is None else f"{fmt.tokens(m.max_total_num_tokens)} tok"
        if m.max_total_num_tokens is None and boot.live.pool_tokens_est is not None:
            kv = f"~{fmt.tokens(boot.live.pool_tokens_est)} tok"  # from serving lines: the start is not in the log
        ctx = m.context_len
        if ctx is None and boot.flags_from == "process":  # the running process's own flag
            raw = boot.flags.get("context_length", boot.flags.get("max_model_len"))
            ctx = raw if isinstance(raw, int) else None
        items = [
            ("KV ", kv),
            ("free ", fmt.gib(m.avail_after_pool_gib)),
            ("ctx ", fmt.tokens(ctx)),
        ]
        if m.kv_cache_gib is not None:
            items.insert(1, ("", f"{fmt.gib(m.kv_cache_gib)}/rank"))
        if boot.nodes:  # vLLM over Ray: how many nodes, which TP ranks each holds
            nodes = fmt.ray_nodes(boot.nodes_json())
            items.append(("Ray ", f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}"))
            items += [(f"{fmt.tp_ranks(n.tp_ranks)} ", n.name) for n in nodes]
        lines: list[Content] = []
        line = Content("")
        for label, value in items:  # whole items per line ("12.59 GiB/rank" is never split)
            item = Content.assemble((label, "$text-muted"), (value, "$foreground bold"))
            if line.cell_length and line.cell_length + 3 + item.cell_length > width:
                lines.append(line)
                line = Content("")
            line = Content.assemble(line, (" · ", "$text-muted"), item) if line.cell_length else item
        lines.append(line)
        return lines

    def figures(self) -> list[tuple[str, str]]:
        boot = self._boot
        if boot is None:
            return []
        m = boot.metrics
        kv = fmt.tokens(m.max_total_num_tokens)
        if m.max_total_num_tokens is None and boot.live.pool_tokens_est is not None:
            kv = f"~{fmt.tokens(boot.live.pool_tokens_est)}"  # from serving lines: the start is not in the log
        rows = [
            ("KV tokens", kv),
        ]
        blocks = boot.facts.get(Fact.KV_BLOCKS)
        if boot.pool_from and blocks and m.max_total_num_tokens:  # vLLM V0: blocks × block size (replay says whence)
            rows.append((" GPU blocks × size", f"{int(blocks):,} × {m.max_total_num_tokens // int(blocks)}"))
        rows += [
            ("KV / rank", fmt.gib(m.kv_cache_gib)),
            ("weights / rank", fmt.gib(m.weights_gib)),
            ("free after pool", fmt.gib(m.avail_after_pool_gib)),
            ("graph memory", fmt.gib(m.graph_mem_gib)),
            ("context", fmt.tokens(m.context_len)),
            ("max running", fmt.tokens(m.max_running_requests)),
        ]
        if m.max_concurrency is not None:
            rows.append(("max concurrency", f"{fmt.capacity(m.max_concurrency)}×"))
        if boot.nodes:  # vLLM over Ray: how many nodes (by ip), which TP ranks each holds
            nodes = fmt.ray_nodes(boot.nodes_json())
            rows.append(("Ray nodes", str(len(nodes))))
            rows += [(f" {fmt.tp_ranks(n.tp_ranks)} on", n.name) for n in nodes]
        unknown = sum(u.count for u in boot.unrecognised)
        if unknown:  # quiet: lines a new engine build may print that no rule knows (U lists them)
            rows.append((f"? {unknown} unrecognised startup line{'s' if unknown != 1 else ''}", "U"))
        return rows

    def copy_text(self) -> str:
        """The figures the panel shows (``Y`` copies them), a ``label: value`` line each."""
        return "\n".join(f"{label.strip()}: {value}" for label, value in self.figures())

    def render(self) -> Content:
        width = max(1, self.size.width - 2) if self.size.width else 30
        if self.compact:
            return Content("\n").join(self._compact_lines(width))
        rows = self.figures()
        if not rows:
            return Content.styled("no figures yet", "$text-muted italic")
        lines: list[Content] = []
        for label, value in rows:
            if len(label) + len(value) + 1 > width:  # the figure whole, its label gives way
                label = label[: max(0, width - len(value) - 2)] + "…"
            pad = max(1, width - len(label) - len(value))
            if label.startswith("? "):
                lines.append(Content.styled(label + " " * pad + value, "$text-muted italic"))
                continue
            value_style = "$text-disabled" if value == "—" else "$foreground bold"
            lines.append(Content.assemble((label, "$text-muted"), " " * pad, (value, value_style)))
        return Content("\n").join(lines)


_SPARK = " ▁▂▃▄▅▆▇█"


def _usage_style(value: float) -> str:
    return "$error" if value >= 0.95 else "$warning" if value >= 0.8 else "$phase-ready"


def spark_columns(data: Sequence[float], width: int, height: int) -> list[list[str]]:
    """KV-pool usage over time on a fixed 0–100 % scale (Textual's ``Sparkline`` scales to the
    data's own maximum: 10 % drew full height, in the colour of a full pool): the glyphs of each
    column, top row first, one column per reading, the newest on the right."""
    levels = height * 8
    cols: list[list[str]] = []
    for value in data[-width:] if width > 0 else []:
        filled = round(min(1.0, max(0.0, value)) * levels)
        if value > 0 and filled == 0:
            filled = 1  # a pool in use is never drawn empty
        cols.append([_SPARK[min(8, max(0, filled - (height - 1 - row) * 8))] for row in range(height)])
    return cols


class KvUsage(Widget):
    """After ready: the live KV-pool usage gauge (``KV usage ██████░░░░  42.0%``), its sparkline
    (two rows, gone on a short terminal: ``set_compact``) and the serving load, drawn as one
    widget (issue 23: a host pane in few widgets; these were four)."""

    DEFAULT_CSS = """
    KvUsage {
        height: auto;
        padding: 0 1;
        display: none;
        &.-serving { display: block; }
        & > .kv-usage--load { color: $text-muted; }
    }
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"kv-usage--load"}  # the load's row

    SPARK_ROWS = 2

    history: deque[float]

    def __init__(self, *, history: int = 120, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.history = deque(maxlen=history)
        self.usage: float | None = None  # the gauge's figure
        self.load = ""  # ``running 12 · queued 0 · 1,234 tok/s``
        self.compact = False
        self._bucket: int | None = None
        self._drawn: tuple[object, ...] | None = None

    def set_compact(self, compact: bool) -> None:
        """A short terminal: the gauge and the load, no sparkline."""
        if compact != self.compact:
            self.compact = compact
            self.refresh(layout=True)

    def show(self, boot: Boot | None, now: float | None = None) -> None:
        """``now`` (clock seconds) buckets the sparkline: one point per second of the host's
        time, the newest value in that second winning (independent of how updates batch)."""
        serving = boot is not None and boot.status is BootStatus.READY and boot.live.token_usage is not None
        self.set_class(serving, "-serving")
        if boot is None or not serving:
            return
        usage = boot.live.token_usage
        assert usage is not None
        bucket = int(now) if now is not None else None
        if self.history and bucket is not None and bucket == self._bucket:
            self.history[-1] = usage
        elif bucket is not None or usage != self.usage or not self.history:
            self.history.append(usage)
        self._bucket = bucket
        self.usage = usage
        live = boot.live
        parts = [
            f"running {live.running_reqs}" if live.running_reqs is not None else None,
            f"queued {live.queue_reqs}" if live.queue_reqs is not None else None,
            f"{live.gen_throughput:,.0f} tok/s" if live.gen_throughput is not None else None,
        ]
        self.load = " · ".join(p for p in parts if p)
        # a fixed number of rows: a new figure needs a repaint, never a layout pass
        drawn = (usage, self.load, tuple(self.history))
        if drawn != self._drawn:
            self._drawn = drawn
            self.refresh()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 2 if self.compact else 2 + self.SPARK_ROWS

    def gauge(self, width: int) -> Content:
        """The gauge's row, ``width`` cells."""
        usage = self.usage
        if usage is None:
            return Content("")
        label = "KV usage "
        pct = f" {fmt.percent(usage):>6}"
        filled, empty = fmt.bar(usage, max(4, width - len(label) - len(pct)))
        return Content.assemble(
            (label, "$text-muted"),
            ("█" * filled, _usage_style(usage)),
            ("█" * empty, "$foreground 12%"),
            (pct, "$foreground bold"),
        )

    def spark(self, width: int, height: int) -> list[Content]:
        """The sparkline's rows, each reading coloured as the gauge is (warning from 80 %,
        error from 95 %)."""
        data = list(self.history)
        cols = spark_columns(data, width, height)
        pad = width - len(cols)
        rows: list[Content] = []
        for row in range(height):
            parts: list[tuple[str, str] | str] = [" " * pad]
            for value, col in zip(data[-len(cols):] if cols else [], cols, strict=True):
                parts.append((col[row], _usage_style(value)))
            rows.append(Content.assemble(*parts))
        return rows

    def render(self) -> Content:
        width = self.size.width or 40
        rows = [self.gauge(width)]
        if not self.compact:
            rows.extend(self.spark(width, self.SPARK_ROWS))
        rows.append(Content.styled(self.load[:width], self.get_visual_style("kv-usage--load")))
        return Content("\n").join(rows)


class FailureBanner(Banner):
    """The diagnosis of a failed boot and the hint that points the right way.

    While an automatic restart (``Restart=on-failure``) boots again, the previous boot's failure
    stays up, marked as the previous one: in a restart loop it is the only place it shows."""

    DEFAULT_CSS = """
    FailureBanner {
        display: none;
        height: auto;
        padding: 0 1;
        background: $error-muted;
        border-left: thick $error;
        &.-failed { display: block; }
        &.-previous { background: $error-muted 50%; border-left: thick $error 50%; }
    }
    """

    previous: bool = False

    def show(self, boot: Boot | None, previous: Boot | None = None, changed: Sequence[str] = (),
             orphans: str | None = None) -> None:
        """``previous``: the boot before ``boot`` (shown when it failed and ``boot`` is starting);
        ``changed``: what changed since the last good boot of the same model (the history);
        ``orphans``: a gpu_busy failure's orphaned engine processes and the command to end them."""
        failure = boot.failure if boot is not None and boot.status is BootStatus.FAILED else None
        self.previous = False
        if (
            failure is None
            and boot is not None
            and boot.status is BootStatus.STARTING
            and previous is not None
            and previous.status is BootStatus.FAILED
        ):
            failure = previous.failure
            self.previous = failure is not None
        self.set_class(failure is not None, "-failed")
        self.set_class(self.previous, "-previous")
        if failure is None:
            self.head = None
            self.set(None, lambda: "")
            return
        shown = failure
        lines = tuple(changed) if not self.previous else ()
        failed = previous if self.previous else boot
        fraction = failed.flags.get("mem_fraction_static") if failed is not None else None
        at = str(fraction) if fraction is not None and shown.kind.value.startswith("oom") else None
        self.set(
            (shown.kind, shown.phase, shown.message, shown.hint, self.previous, lines, at, orphans),
            lambda: self._content(shown, self.previous, lines, at, orphans),
        )

    def _content(self, failure: Failure, previous: bool = False, changed: Sequence[str] = (),
                 fraction: str | None = None, orphans: str | None = None) -> Content:
        """``fraction``: the failed boot's --mem-fraction-static, said on the first line of an
        out-of-memory failure (the one line shown until ``b``)."""
        where = f" in {fmt.phase_label(failure.phase)}" if failure.phase is not None else ""
        title = fmt.failure_title(failure.kind, failure.phase)
        if fraction is not None:
            title += f" at {fraction}"
        # collapsed, the banner's one line: the failure's title says the phase ("out of memory in
        # CUDA-graph capture at 0.93"), the rest is the expanded banner's
        said = "" if failure.phase is None or fmt.phase_label(failure.phase) in title else where
        self.head = Content.assemble(
            (f"✖ {'PREVIOUS ' if previous else ''}BOOT FAILED{said}: ", "$error bold"), (title, "$foreground bold"),
        )
        message = " ".join(failure.message.split())
        if len(message) > 240:  # two lines or so: the log holds the rest
            message = message[:239] + "…"
        parts: list[Content] = [
            Content.assemble(
                ("✖ PREVIOUS BOOT FAILED" if previous else "✖ BOOT FAILED", "$error bold"),
                (where, "$error bold"),
                ("  ·  ", "$text-muted"),
                (title, "$foreground bold"),
                (f"  [{failure.kind.value}]", "$text-muted"),
            )
        ]
        if message:
            parts.append(Content.styled(message, "$foreground"))
        if failure.hint:
            parts.append(Content.assemble(("Hint: ", "$warning bold"), (failure.hint, "$foreground")))
        if orphans:
            parts.append(Content.assemble(("Orphans: ", "$warning bold"), (orphans, "$foreground")))
        if previous:
            parts.append(Content.styled("restarted automatically; the new boot is starting", "$text-muted italic"))
        if changed:
            parts.append(Content.styled("Since the last good boot:", "$text-muted bold"))
            parts.extend(Content.styled(f"  {line}", "$foreground") for line in changed)
        return Content("\n").join(parts)


class StallNotice(Notice):
    """"possibly hung in <phase> for Ns": no log line and no GPU-memory change for a while: one
    sentence, whose end (the likely cause) matters."""

    DEFAULT_CSS = """
    StallNotice {
        background: $warning-muted;
        border-left: thick $warning;
        &.-stalled { display: block; }
    }
    """

    SHOWN = "-stalled"

    stalled_for: reactive[float | None] = reactive(None)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._phase: Phase | None = None

    def show(self, phase: Phase | None, seconds: float | None, stall: Stall | None = None) -> None:
        """``stall``: what the engine kept printing meanwhile (``kvtui.boot.stall``), when it did."""
        self._phase = phase
        self.stalled_for = seconds
        if seconds is None:
            self.show_when(None)
            return
        printed = stall.printed() if stall is not None else None
        if printed is not None and stall is not None and stall.kind is not None:
            cause = stall.kind.cause
            self.show_when(
                (phase, fmt.duration(seconds), printed, cause),
                lambda: Content.assemble(
                    ("⏸ stuck", "$warning bold"),
                    (f" in {fmt.phase_label(phase)} for {fmt.duration(seconds)}", "$foreground bold"),
                    (f"  —  {printed}, nothing else: {cause}", "$text-muted"),
                ),
            )
            return
        self.show_when(
            (phase, fmt.duration(seconds)),
            lambda: Content.assemble(
                ("⏸ possibly hung", "$warning bold"),
                (f" in {fmt.phase_label(phase)} for {fmt.duration(seconds)}", "$foreground bold"),
                ("  —  no log line and no GPU-memory change since", "$text-muted"),
            ),
        )


class ProbeLine(Notice):
    """The readiness probe of the boot shown (``kvtui.hosts.probe``): asking, answered in N ms, or
    not serving with the HTTP error. Hidden while there is nothing to say."""

    def show(self, state: str | None, ok: bool | None = None) -> None:
        """``state``: the line (None: hidden); ``ok``: answered (True), not serving (False),
        still asking (None)."""
        mark, style = {True: ("✔ ", "$success bold"), False: ("✘ ", "$error bold"), None: ("… ", "$text-muted")}[ok]
        self.show_when(None if state is None else (state, ok), lambda: Content.assemble(
            (mark, style), (state or "", "$foreground" if ok is not None else "$text-muted italic")))
