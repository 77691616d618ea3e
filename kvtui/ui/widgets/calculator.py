"""The calculator panel: the calibrated memory model of the current boot, editable flags, and
the prediction (tokens, headroom, verdict, max safe fraction) updating as you type.

It renders and computes only from what it is given (a ``Boot`` and its sibling boots); the
calculator itself (``kvtui.kvcalc``) is pure and fast, so it runs on the event loop, debounced.
It is imported when the first boot reaches the panel, not while the console paints its first
frame.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.geometry import Size
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input, Label, Static

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine
from kvtui.ui import formatting as fmt

if TYPE_CHECKING:
    from kvtui import kvcalc

DEBOUNCE_S = 0.25


def _flag_label(flag: str) -> str:
    return flag.replace("_", "-")


def _as_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _num(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class FlagField(Horizontal):
    """One editable flag: its name and an input holding the boot's value."""

    DEFAULT_CSS = """
    FlagField {
        height: 1;
        Label { width: 22; color: $text-muted; padding: 0 1 0 0; }
        Input {
            width: 1fr;
            height: 1;
            border: none;
            padding: 0 1;
            background: $boost;
            &:focus { background: $primary 20%; border: none; }
            &.-edited { color: $accent; text-style: bold; }
            &.-invalid { color: $error; text-style: bold; }
        }
    }
    """

    def __init__(self, flag: str, observed: str, *, first: bool = False) -> None:
        super().__init__(classes="-first" if first else None)
        self.flag = flag
        self.observed = observed
        # made here, not in compose, so the panel can read and set it before it is mounted
        self.input = Input(
            value=observed,
            placeholder="unset",
            select_on_focus=True,
            id=f"flag-{flag.replace('_', '-')}",
        )

    def compose(self) -> ComposeResult:
        yield Label(_flag_label(self.flag))
        yield self.input

    @property
    def edited(self) -> bool:
        return self.input.value.strip() != self.observed

    def reset(self, observed: str) -> None:
        """A new boot: take its value unless the user edited this field."""
        was_edited = self.edited
        self.observed = observed
        if not was_edited:
            self.input.value = observed
        self.input.set_class(self.edited, "-edited")


ResultRow = tuple[Content, Content]  # label, value


class ResultRows(Widget):
    """The prediction as ``label … value`` rows spread over the width the widget has when it is
    painted, or a message (an error). Rows padded to the width at the time of the computation
    would keep a width the panel may no longer have (its scrollbar comes and goes with the height
    of the panels above it): what shows would depend on when the prediction was made."""

    DEFAULT_CSS = """
    ResultRows {
        height: auto;
        &.-rows { text-wrap: nowrap; text-overflow: clip; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: tuple[ResultRow, ...] | None = None
        self.message: Content = Content("")

    def show_rows(self, rows: Sequence[ResultRow]) -> None:
        self.rows = tuple(rows)
        self.add_class("-rows")
        self.refresh(layout=True)

    def show_message(self, message: Content) -> None:
        self.rows = None
        self.message = message
        self.remove_class("-rows")
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.rows is not None:
            return len(self.rows)
        return super().get_content_height(container, viewport, width)

    def render(self) -> Content:
        if self.rows is None:
            return self.message
        width = max(20, (self.size.width or 36) - 2)
        return Content("\n").join(
            Content.assemble(label, " " * max(1, width - label.cell_length - value.cell_length), value)
            for label, value in self.rows
        )


class CalculatorPanel(Vertical):
    """Edit the flags the calculator knows; see what the next boot would do."""

    DEFAULT_CSS = """
    CalculatorPanel {
        height: auto;
        padding: 0 1;
        #calc-basis { color: $text-muted; height: 1; }
        #calc-fields { height: auto; }
        #calc-result { height: auto; margin-top: 1; }
        #calc-reasons { height: auto; color: $text-muted; }
        #calc-keys { height: 1; color: $text-muted; margin-top: 1; }
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Leave field", show=False, id="calc.leave"),
        Binding("up", "field(-1)", "Previous field", show=False, id="calc.up"),
        Binding("down", "field(1)", "Next field", show=False, id="calc.down"),
    ]

    class Computed(Message):
        """A new prediction (or an error) is on screen."""

        def __init__(self, panel: CalculatorPanel) -> None:
            super().__init__()
            self.panel = panel

        @property
        def control(self) -> CalculatorPanel:
            return self.panel

    class Left(Message):
        """The user left the calculator with Esc."""

    def __init__(self, *, graph_margin_gib: float | None = None, id: str | None = None) -> None:
        super().__init__(id=id)
        self.graph_margin_gib = graph_margin_gib
        self.engine: Engine | None = None
        self.boot: Boot | None = None
        self.model: kvcalc.MemoryModel | None = None
        self.prediction: kvcalc.Prediction | None = None
        self.result: dict[str, Any] | None = None
        self.error: str | None = None
        self.computations = 0
        self._signature: tuple[object, ...] | None = None
        self._debounce: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(Content.styled("waiting for the boot to size its KV pool…", "$text-muted italic"), id="calc-basis")
        yield Vertical(id="calc-fields")
        yield ResultRows(id="calc-result")
        yield Static(id="calc-reasons")
        yield Static(
            Content.assemble(("c", "$accent bold"), " edit  ", ("⏎", "$accent bold"), " recompute  ",
                             ("x", "$accent bold"), " explain"),
            id="calc-keys",
        )

    # ---- data in ---------------------------------------------------------------------------

    @property
    def fields(self) -> list[FlagField]:
        return list(self.query(FlagField))

    def set_boot(self, boot: Boot | None, boots: Sequence[Boot] = ()) -> None:
        """Recalibrate when the boot's figures changed; keeps the user's edits."""
        from kvtui import kvcalc

        if boot is None:
            return
        m = boot.metrics
        signature = (
            id(boot), boot.status, boot.engine, m.max_total_num_tokens, m.avail_after_pool_gib, m.graph_mem_gib,
            m.kv_cache_gib, boot.failure.kind if boot.failure else None, len(boot.capture_trail), len(boots),
            len(boot.flags),
        )
        if signature == self._signature:
            return
        self._signature = signature
        self.boot = boot
        others = [b for b in boots if b is not boot]
        try:
            self.model = kvcalc.calibrate(boot, others=others)
        except kvcalc.CalcError as exc:
            self.model = None
            self.error = str(exc)
        else:
            self.error = None
        engine = boot.engine if boot.engine is not Engine.UNKNOWN else None
        if engine is not None and engine != self.engine:
            self.engine = engine
            self._build_fields(boot)
        elif engine is not None:
            for f in self.fields:
                f.reset(self._observed(boot, f.flag))
        self.recompute()

    def _observed(self, boot: Boot, flag: str) -> str:
        from kvtui import kvcalc

        if flag in boot.flags:
            return _as_text(boot.flags[flag])
        if self.result is not None:
            observed = self.result.get("observed")
            if isinstance(observed, dict) and flag in observed:
                return _as_text(observed[flag])
        if self.model is not None:
            try:
                observed = kvcalc.predict(self.model, {}, graph_margin_gib=self.margin_gib).to_json().get("observed")
            except kvcalc.CalcError:
                observed = None
            if isinstance(observed, dict) and flag in observed:
                return _as_text(observed[flag])
        return ""

    def _build_fields(self, boot: Boot) -> None:
        from kvtui import kvcalc

        container = self.query_one("#calc-fields", Vertical)
        container.remove_children()
        assert self.engine is not None
        flags = kvcalc.EDITABLE_FLAGS.get(self.engine, ())
        fraction = kvcalc.fraction_flag(self.engine)
        ordered = [fraction, *[f for f in flags if f != fraction]]
        container.mount_all(
            FlagField(flag, self._observed(boot, flag), first=i == 0) for i, flag in enumerate(ordered)
        )

    @property
    def margin_gib(self) -> float:
        from kvtui import kvcalc

        return kvcalc.DEFAULT_GRAPH_MARGIN_GIB if self.graph_margin_gib is None else self.graph_margin_gib

    # ---- editing ---------------------------------------------------------------------------

    def focus_first(self) -> bool:
        fields = self.fields
        if not fields:
            return False
        fields[0].input.focus()
        return True

    def action_leave(self) -> None:
        self.post_message(self.Left())

    def action_field(self, step: int) -> None:
        inputs = [f.input for f in self.fields]
        focused = self.screen.focused
        if focused in inputs:
            assert isinstance(focused, Input)
            inputs[(inputs.index(focused) + step) % len(inputs)].focus()

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        for f in self.fields:
            f.input.set_class(f.edited, "-edited")
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(DEBOUNCE_S, self.recompute, name="calc-debounce")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self._debounce is not None:
            self._debounce.stop()
        self.recompute()

    def edits(self) -> tuple[list[str], list[str]]:
        sets: list[str] = []
        unsets: list[str] = []
        for f in self.fields:
            if not f.edited:
                continue
            value = f.input.value.strip()
            if value:
                sets.append(f"{f.flag}={value}")
            else:
                unsets.append(f.flag)
        return sets, unsets

    def recompute(self) -> None:
        """Predict for the current edits and show it."""
        from kvtui import kvcalc

        self.computations += 1
        for f in self.fields:
            f.input.remove_class("-invalid")
        if self.model is None or self.engine is None:
            self.prediction = None
            self.result = None
            self._render_result()
            return
        sets, unsets = self.edits()
        try:
            edits = kvcalc.parse_edits(self.engine, sets, unsets)
            self.prediction = kvcalc.predict(self.model, edits, graph_margin_gib=self.margin_gib)
        except kvcalc.CalcError as exc:
            self.prediction = None
            self.result = None
            self.error = str(exc)
            for f in self.fields:
                if f.edited and f.flag.replace("_", "-") in str(exc).replace("_", "-"):
                    f.input.add_class("-invalid")
        else:
            self.error = None
            self.result = self.prediction.to_json()
        self._render_result()
        self.post_message(self.Computed(self))

    # ---- rendering ---------------------------------------------------------------------------

    def explain_lines(self) -> list[str]:
        if self.prediction is None:
            return [self.error or "no prediction yet: the boot has not sized its KV pool"]
        return [*self.prediction.explain]

    def reason_lines(self) -> list[str]:
        return [] if self.prediction is None else [*self.prediction.reasons]

    @property
    def verdict(self) -> str | None:
        return None if self.result is None else str(self.result.get("verdict"))

    def _render_result(self) -> None:
        basis = self.query_one("#calc-basis", Static)
        result = self.query_one("#calc-result", ResultRows)
        reasons = self.query_one("#calc-reasons", Static)
        data = self.result
        if data is None:
            if self.error and self.model is None:
                basis.update(Content.styled(self._waiting_text(), "$text-muted italic"))
                result.show_message(Content(""))
            else:
                result.show_message(Content.styled(self.error or "", "$error"))
            reasons.update("")
            return
        confidence = str(data.get("confidence", ""))
        basis.update(
            Content.assemble(
                ("model: ", "$text-muted"),
                (str(data.get("basis", "")), "$foreground"),
                (" · confidence ", "$text-muted"),
                (confidence, "$warning bold" if confidence == "low" else "$foreground"),
            )
        )
        predicted = data.get("predicted") or {}
        observed = data.get("observed") or {}
        assert isinstance(predicted, dict)
        assert isinstance(observed, dict)
        tokens_now = _num(observed, "max_total_num_tokens")
        tokens_new = _num(predicted, "max_total_num_tokens")
        delta = ""
        if tokens_now is not None and tokens_new is not None and tokens_new != tokens_now:
            delta = f" ({tokens_new - tokens_now:+,.0f})"
        p = self.prediction  # figures are formatted from the exact values (kvtui.fmt), not the rounded JSON
        assert p is not None
        rows: list[tuple[str, str, str]] = [
            ("KV tokens", fmt.tokens(tokens_new) + delta, "$foreground bold"),
            ("KV / rank", fmt.gib(p.kv_cache_gib), "$foreground"),
            ("free after pool", fmt.gib(p.avail_after_pool_gib), "$foreground"),
        ]
        headroom = p.graph_headroom_gib
        rows.append(
            ("graph headroom", fmt.signed_gib(headroom), "$error bold" if headroom is not None and headroom < 0
             else "$foreground")
        )
        rows.append(("full-context reqs", fmt.capacity(p.full_context_requests), "$foreground"))
        per = _num(predicted, "tokens_per_0_01")
        if per is not None:
            rows.append(("tokens per +0.01", f"{per:+,.0f}", "$text-muted"))
        # the verdict and the largest safe fraction first: they are what a short panel must show
        verdict = str(data.get("verdict", ""))
        var = fmt.VERDICT_VARIABLE.get(verdict, "text-muted")
        badge = Content.styled(f" {verdict.upper().replace('_', ' ')} ", f"bold $background on ${var}")
        lines: list[ResultRow] = [(Content.styled("verdict", "$text-muted"), badge)]
        rows.insert(0, ("max safe fraction", fmt.safe_max(p.max_safe_fraction), "$accent bold"))
        lines.extend(
            (Content.styled(label, "$text-muted"), Content.styled(value, style)) for label, value, style in rows
        )
        result.show_rows(lines)  # spread over the width the rows have when painted
        reason_list = self.reason_lines()[:3]
        reasons.update(Content("\n").join([Content.styled(f"• {r}", "$text-muted") for r in reason_list]))

    def _waiting_text(self) -> str:
        boot = self.boot
        if boot is not None and boot.status is BootStatus.FAILED and self.error:
            return f"cannot calibrate: {self.error}"
        return "waiting for the boot to size its KV pool…"
