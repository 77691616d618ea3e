"""The calculator panel: the calibrated memory model of the current boot, editable flags, and
the prediction (tokens, headroom, verdict, max safe fraction) updating as you type.

One widget draws the whole panel — the basis line, a row per flag, the prediction, the reasons —
and edits the flag under its cursor itself (a one-line editor: the row's value is the text being
edited). It used to be ~30 widgets (a ``Label`` and an ``Input`` per flag): mounting them made a
host's first display slow, an ``Input`` narrower than its value showed a silently cut figure
(``20000`` for 200000), and keys typed in a burst right after ``c`` went to the widget that had
focus before the ``Input`` got it. Here a value is drawn whole, or visibly elided with ``…``
(while editing, the window follows the cursor); keys reach the editor in the order they were
typed (a key that arrives after focus moved on is handed to the widget that has it now).

It renders and computes only from what it is given (a ``Boot`` and its sibling boots); the
calculator itself (``kvtui.kvcalc``) is pure and fast, so it runs on the event loop, debounced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget

from kvtui import longrun
from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine
from kvtui.knobs import MEMORY_ROLES, Memory
from kvtui.lazy import lazy_module
from kvtui.ui import formatting as fmt
from kvtui.ui.keys import refocus_key, run_own_binding
from kvtui.ui.message import WidgetMessage

if TYPE_CHECKING:
    from kvtui import kvcalc
    from kvtui.changes import ServingConfig
else:
    kvcalc = lazy_module("kvtui.kvcalc")  # lazy: after the console's first frame (test_ui_startup): +47 ms CPU

DEBOUNCE_S = 0.25
MIN_VALUE_CELLS = 8  # a flag's value keeps at least this many cells (its label is elided first)
MAX_REASONS = 3
ELLIPSIS = "…"
# What a numeric field takes (issue 22 #11): the characters of a number (a fraction, a whole
# number, 1e5, 8,192, -1, 85% so the calculator can say it wants 0.85) and the words that unset
# a flag. Any other letter is not typed: ``c`` (the calculator's key) selects the value again, so
# ``0.90c0.95`` is 0.95; the others leave a hint naming what the field takes.
NUMBER_CHARS = frozenset("0123456789.,_-+eE%")
UNSET_WORDS = ("unset", "none", "null", "default")


def is_numeric_flag(flag: str) -> bool:
    """Whether the calculator reads ``flag``'s value as a number (every modelled flag but the KV
    cache's dtype; a flag it does not model keeps any text)."""
    role = MEMORY_ROLES.get(flag)
    return role is not None and role is not Memory.KV_DTYPE


def numeric_accepts(text: str) -> bool:
    """Whether a numeric field may hold ``text`` (typed or pasted): number characters only, or
    the start of one of the words that unset a flag (``unset``, ``none``, ``null``, ``default``)."""
    if all(ch in NUMBER_CHARS for ch in text):
        return True
    word = text.strip().lower()
    return bool(word) and any(w.startswith(word) for w in UNSET_WORDS)


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


def elide(text: str, width: int) -> str:
    """``text`` whole if it fits ``width`` cells, else cut with a visible ``…``."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS


def edit_window(value: str, cursor: int, width: int) -> tuple[str, int, int]:
    """The part of ``value`` an editor ``width`` cells wide shows with the cursor at ``cursor``
    (the cursor may sit after the last character, which takes a cell): ``(text, start, cursor
    column)``. A cut side shows ``…`` in place of its outermost character."""
    if width <= 1:
        return "", 0, 0
    if len(value) + 1 <= width:
        return value, 0, cursor
    # the window holds `width` cells of value + cursor cell, the cursor inside it
    start = max(0, min(cursor - width + 2, len(value) + 1 - width))
    start = min(start, cursor)
    text = value[start : start + width]
    shown = list(text)
    if start > 0 and shown:
        shown[0] = ELLIPSIS
    if start + width < len(value) and shown:
        shown[-1] = ELLIPSIS
    return "".join(shown), start, cursor - start


@dataclass(slots=True)
class FlagField:
    """One editable flag: the boot's value (``observed``) and the text in its row (``value``)."""

    flag: str
    observed: str
    value: str
    invalid: bool = False
    valid: str = ""  # the value the prediction was last computed from (Esc restores it)
    numeric: bool = False  # takes a number or an unset word (``numeric_accepts``), not any text

    def __post_init__(self) -> None:
        self.valid = self.value
        self.numeric = is_numeric_flag(self.flag)

    @property
    def label(self) -> str:
        return _flag_label(self.flag)

    @property
    def edited(self) -> bool:
        return self.value.strip() != self.observed

    def reset(self, observed: str) -> None:
        """A new boot: take its value unless the user edited this field."""
        was_edited = self.edited
        self.observed = observed
        if not was_edited:
            self.value = self.valid = observed

    def accepts(self, text: str) -> bool:
        """Whether the field may hold ``text``: any text in a text field; in a numeric one,
        number characters or the start of an unset word."""
        return not self.numeric or numeric_accepts(text)

    @property
    def takes(self) -> str:
        """What the field takes, for a hint."""
        return "a number, or unset" if self.numeric else "text"


ResultRow = tuple[Content, Content]  # label, value


def _edit_args(fields: Iterable[tuple[str, str, str]]) -> tuple[list[str], list[str]]:
    """``(flag, observed, value)`` of each field → the ``--set`` / ``--unset`` of those edited."""
    sets: list[str] = []
    unsets: list[str] = []
    for flag, observed, raw in fields:
        value = raw.strip()
        if value == observed:
            continue
        if value:
            sets.append(f"{flag}={value}")
        else:
            unsets.append(flag)
    return sets, unsets


def _field_error(field: FlagField, message: str) -> str:
    """``kvcalc``'s message about one field's value, said of the field: its name as the panel
    shows it, the value, what it takes, and what the prediction keeps."""
    value = field.value.strip()
    for prefix in (f"--set {field.flag}={value}: ", f"--unset {field.flag}: "):
        if message.startswith(prefix):
            message = message[len(prefix):]
            break
    kept = field.valid.strip() or "unset"
    return f"{field.label} {value or 'unset'}: {message}; the prediction keeps {kept}"


class CalculatorPanel(Widget, can_focus=True):
    """Edit the flags the calculator knows; see what the next boot would do.

    ``c`` edits the first flag (``editing``), its whole value selected so typing replaces it;
    ``tab`` only focuses the panel (its one-letter keys stay the console's: ``z`` zooms), where
    ↑/↓ pick a flag and Enter (or ``c``) edits it. In a field: printable keys, paste, ←/→, home/end
    (ctrl+a / ctrl+e), backspace/delete, ctrl+k / ctrl+u / ctrl+w; a numeric field takes a number
    or an unset word only (``c`` selects its value again, other letters leave a hint). Enter
    commits (the prediction updates now) and selects the value; ↑/↓ move between flags; Esc
    restores the last valid value and leaves; ctrl+r sets every flag back to the running boot's.
    An invalid value is named with what the field takes; the prediction keeps the last valid one."""

    DEFAULT_CSS = """
    CalculatorPanel {
        height: auto;
        padding: 0 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "submit", "Use value", id="calc.enter", tooltip="recompute the prediction now"),
        Binding("enter", "edit", "Edit flag", id="calc.edit", tooltip="edit the flag the panel points at"),
        Binding("escape", "leave", "Leave field", id="calc.leave"),
        Binding("up", "field(-1)", "Previous field", show=False, id="calc.up"),
        Binding("down", "field(1)", "Next field", show=False, id="calc.down"),
        # in a numeric field, where "c" cannot be typed: select the value again (0.90c0.95 is 0.95)
        Binding("c", "select", "Select value", show=False, id="calc.select"),
        Binding("ctrl+r", "reset", "Reset flags", show=False, id="calc.reset",
                tooltip="every flag back to the running boot's"),
    ]

    class Computed(WidgetMessage["CalculatorPanel"]):
        """A new prediction (or an error) is on screen."""

        @property
        def panel(self) -> CalculatorPanel:
            return self.control

    class Left(Message):
        """The user left the calculator with Esc."""

    class EditingChanged(Message):
        """The panel started or stopped editing (the footer's keys change)."""

    def __init__(self, *, graph_margin_gib: float | None = None, id: str | None = None) -> None:
        super().__init__(id=id)
        self.graph_margin_gib = graph_margin_gib
        self.engine: Engine | None = None
        self.boot: Boot | None = None
        self.model: kvcalc.MemoryModel | None = None
        self.prediction: kvcalc.Prediction | None = None
        self.error: str | None = None
        self.computations = 0
        self.fields: list[FlagField] = []
        self.editing: int | None = None  # the flag being edited (while focused)
        self.cursor = 0
        self.selected = False  # the whole value is selected: typing replaces it
        self.hint: str | None = None  # why the last key was not typed (a numeric field)
        self._last_edited = 0
        self._signature: tuple[object, ...] | None = None
        self._debounce: Timer | None = None
        # what the prediction shows (built by ``_render_result``, drawn by ``render``)
        self._basis: Content = Content.styled("waiting for the boot to size its KV pool…", "$text-muted italic")
        self._rows: tuple[ResultRow, ...] = ()
        self._message: Content = Content("")
        self._reasons: tuple[str, ...] = ()
        self._field_lines: dict[int, int] = {}  # field index -> line of the panel (at the last layout)
        self.leave_to: Callable[[], Widget | None] | None = None  # where Esc sends focus
        # a boot whose start is not in the log (a server up for days): the stored boot of the same
        # host and flags it calibrates from (``kvtui.changes.serving_basis``; None: none found),
        # and whether the history was asked yet; the GPU memory from the GPU source
        self.stored_basis: tuple[Boot, list[Boot]] | None = None
        self.basis_looked_up = False
        self.gpu_mem_gib: float | None = None
        # without a stored boot: the model's config.json read on the host, anchored at the pool
        # estimated from serving lines (``kvtui.changes.serving_config``; None: not read yet)
        self.serving_config: ServingConfig | None = None

    # ---- data in ---------------------------------------------------------------------------

    def set_boot(self, boot: Boot | None, boots: Sequence[Boot] = ()) -> None:
        """Recalibrate when the boot's figures changed; keeps the user's edits."""
        if boot is None:
            return
        m = boot.metrics
        signature = (
            id(boot), boot.status, boot.engine, m.max_total_num_tokens, m.avail_after_pool_gib, m.graph_mem_gib,
            m.kv_cache_gib, boot.failure.kind if boot.failure else None, len(boot.capture_trail), len(boots),
            len(boot.flags), boot.live.pool_tokens_est, boot.live.pool_tokens_err, self.gpu_mem_gib,
        )
        if signature == self._signature:
            return
        self._signature = signature
        self.boot = boot
        others = [b for b in boots if b is not boot]
        try:
            if boot.start_missing is not None and not kvcalc.sized_pool(boot):
                self.model = self._serving_model(boot)
            else:
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

    def set_stored_basis(self, basis: tuple[Boot, list[Boot]] | None) -> None:
        """What the history holds for a boot whose start is not in the log (see ``stored_basis``)."""
        self.stored_basis = basis
        self.basis_looked_up = True
        self._signature = None
        if self.boot is not None:
            self.set_boot(self.boot)

    def set_serving_config(self, config: ServingConfig) -> None:
        """The model's config.json as read on the host (or why not): the what-if of a boot whose
        start is not in the log when the history holds no boot of its flags."""
        self.serving_config = config
        self._signature = None
        if self.boot is not None:
            self.set_boot(self.boot)

    def _serving_model(self, boot: Boot) -> kvcalc.MemoryModel:
        """The model of a serving boot whose start is not in the log: calibrated on the stored
        boot of the same host and flags (the history), else its config.json anchored at the pool
        estimated from serving lines; the GPU memory from the GPU source."""
        if self.stored_basis is None:
            pool = longrun.estimated_pool(boot) or "pool not printed yet"
            if not self.basis_looked_up:
                why = "looking in the history for a boot of these flags…"
            elif self.serving_config is None:
                why = "no stored boot of these flags; reading the model's config.json on the host…"
            else:
                try:
                    return self.serving_config.model(boot, self.gpu_mem_gib)
                except kvcalc.CalcError as exc:
                    why = f"no stored boot of this host with these flags, and no config-based what-if: {exc}"
            raise kvcalc.CalcError(f"{pool}; {why}", "input")
        chosen, others = self.stored_basis
        return kvcalc.calibrate(chosen, gpu_mem_gib=self.gpu_mem_gib, others=others)

    @property
    def result(self) -> dict[str, object] | None:
        """The prediction as ``kvtui calc --json`` writes it (None without one)."""
        return None if self.prediction is None else self.prediction.to_json()

    def _observed(self, boot: Boot, flag: str) -> str:
        """A field's value: the boot's own flag, else what the model has (the fraction, the page)."""
        if flag in boot.flags:
            return _as_text(boot.flags[flag])
        for model in (None if self.prediction is None else self.prediction.model, self.model):
            observed = {} if model is None else model.observed_flags()
            if flag in observed:
                return _as_text(observed[flag])
        return ""

    def _build_fields(self, boot: Boot) -> None:
        assert self.engine is not None
        flags = kvcalc.EDITABLE_FLAGS.get(self.engine, ())
        fraction = kvcalc.fraction_flag(self.engine)
        ordered = [fraction, *[f for f in flags if f != fraction]]
        self.fields = []
        for flag in ordered:
            observed = self._observed(boot, flag)
            self.fields.append(FlagField(flag, observed, observed))
        if self.editing is not None:
            self._start_edit(min(self.editing, len(self.fields) - 1) if self.fields else None)
        self.refresh(layout=True)

    @property
    def margin_gib(self) -> float:
        return kvcalc.DEFAULT_GRAPH_MARGIN_GIB if self.graph_margin_gib is None else self.graph_margin_gib

    # ---- focus and editing -----------------------------------------------------------------------

    def focus_first(self) -> bool:
        """``c``: focus the panel on its first flag (on the flag it points at when the panel has
        focus already), the whole value selected (typing replaces it). The focus moves now, not
        after the keys already on their way: a fast typist's next keys (``c`` then ``0.9``) land
        in the field."""
        if not self.fields:
            return False
        index = self.current if self.screen.focused is self and self.editing is None else 0
        self.screen.set_focus(self)
        self._start_edit(index)
        return True

    def focus_panel(self) -> bool:
        """``tab``: focus the panel without editing a flag (Enter or ``c`` edits the one it
        points at; the console's one-letter keys still work)."""
        if not self.fields:
            return False
        self.screen.set_focus(self)
        if self.editing is not None:
            self._start_edit(None)
        self._scroll_to_field(self.current)
        return True

    @property
    def current(self) -> int:
        """The flag the panel points at: the one being edited, else the last one edited."""
        if self.editing is not None:
            return self.editing
        return min(self._last_edited, len(self.fields) - 1) if self.fields else 0

    def focus_field(self, index: int) -> bool:
        if not 0 <= index < len(self.fields):
            return False
        self.screen.set_focus(self)
        self._start_edit(index)
        return True

    def _start_edit(self, index: int | None) -> None:
        was = self.editing
        self.editing = index
        self.hint = None
        if index is not None:
            self._last_edited = index
            self.cursor = len(self.fields[index].value)
            self.selected = True
            self._scroll_to_field(index)
        self.refresh(layout=True)
        if (was is None) != (index is None):
            self.post_message(self.EditingChanged())

    def _scroll_to_field(self, index: int) -> None:
        """Scroll the field into view now, and again once the panel is laid out (a panel opened
        zoomed at 80x24 is laid out after the key; its lines may wrap differently there). The
        first field scrolls to the top: the model line above it shows too."""
        self._scroll_now(index)
        self.call_after_refresh(self._scroll_now, index)

    def _scroll_now(self, index: int) -> None:
        parent = self.parent
        if not isinstance(parent, Widget) or not self.is_attached or self.current != index:
            return
        if index == 0:
            parent.scroll_to(y=0, animate=False, immediate=True)
            return
        if self.size.width:
            self.lines(self.size.width)  # where each field is at the width the panel has now
        line = self._field_lines.get(index)
        if line is None:
            return
        top = self.styles.padding.top + self.styles.margin.top
        parent.scroll_to_region(Region(0, top + line, max(1, self.size.width), 1), animate=False, immediate=True)

    def on_focus(self, event: events.Focus) -> None:
        self.refresh()  # the flag the panel points at is drawn while it has focus

    def on_blur(self, event: events.Blur) -> None:
        if self.editing is not None:
            self._start_edit(None)
        self.refresh()

    @property
    def editing_field(self) -> FlagField | None:
        return None if self.editing is None or self.editing >= len(self.fields) else self.fields[self.editing]

    def action_leave(self) -> None:
        """Esc: a field whose value is not valid gets its last valid value back (the one the
        prediction shows); focus goes back (now: the keys typed after Esc are the console's)."""
        if self._debounce is not None:
            self._debounce.stop()
        if any(f.value != f.valid for f in self.fields):
            self.recompute()  # a value typed within the debounce is checked now
        restored = False
        for f in self.fields:
            if f.invalid:
                f.value, restored = f.valid, True
        if restored:
            self.recompute()
        target = self.leave_to() if self.leave_to is not None else None
        if target is not None and target.is_attached:
            self.screen.set_focus(target)
        self.post_message(self.Left())

    def action_submit(self) -> None:
        """Enter in a field: commit the value (the prediction updates now) and select it, so
        typing replaces it."""
        if self.editing is None:
            self.action_edit()
            return
        if self._debounce is not None:
            self._debounce.stop()
        self.recompute()
        self.action_select()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Enter commits a value while a flag is edited, and edits one on the panel without."""
        if action in ("submit", "select"):
            return self.editing is not None
        if action == "edit":
            return self.editing is None
        return True

    def action_edit(self) -> None:
        """Enter on the panel without a field (``tab``): edit the flag it points at."""
        if self.fields and self.editing is None:
            self._start_edit(self.current)

    def action_select(self) -> None:
        """Select the whole value of the field being edited (typing replaces it)."""
        field = self.editing_field
        if field is None:
            return
        self.selected = True
        self.cursor = len(field.value)
        self.hint = None
        self.refresh()

    def action_reset(self) -> None:
        """ctrl+r: every flag back to the running boot's (the values the calculator started
        with), and the prediction with them."""
        if not self.fields:
            return
        edited = sum(1 for f in self.fields if f.edited or f.value != f.observed)
        for f in self.fields:
            f.value = f.valid = f.observed
        if self._debounce is not None:
            self._debounce.stop()
        self.recompute()
        if self.editing is not None:
            self.action_select()
        what = f"{edited} edit{'s' if edited != 1 else ''} dropped" if edited else "nothing was edited"
        self.notify(f"calculator: every flag is the running boot's again ({what})", timeout=4)

    def action_field(self, step: int) -> None:
        """↑/↓: the previous / next flag (edited when a flag is being edited; on the panel
        without a field, only pointed at)."""
        if not self.fields:
            return
        index = (self.current + step) % len(self.fields)
        if self.editing is None:
            self._last_edited = index
            self.refresh()
            self._scroll_to_field(index)
            return
        self._start_edit(index)

    async def _on_key(self, event: events.Key) -> None:
        if refocus_key(self, event):
            return
        field = self.editing_field
        character = event.character
        if (field is not None and character is not None and len(character) == 1 and character.isprintable()
                and event.key not in ("enter", "tab", "escape")):
            event.stop()
            event.prevent_default()
            if self._accepts(field, character):
                self._insert(field, character)
                self._edited()
            elif not await run_own_binding(self, event):  # c: the value selected again
                self.hint = f"{field.label} takes {field.takes}: {character!r} is not typed"
                self.refresh(layout=True)
            return
        if field is not None and self._edit_key(field, event.key, event.character):
            event.stop()
            event.prevent_default()
            self._edited()
            return
        await run_own_binding(self, event)  # esc, enter, ↑/↓ now: the keys after them meet their effect

    def _accepts(self, field: FlagField, text: str) -> bool:
        """Whether ``text`` may be typed (or pasted) into ``field`` at the cursor: any text in a
        text field; in a numeric one, number characters, or letters that spell an unset word."""
        if not field.numeric or all(ch in NUMBER_CHARS for ch in text):
            return True
        result = text if self.selected else field.value[: self.cursor] + text + field.value[self.cursor :]
        return field.accepts(result)

    def check_consume_key(self, key: str, character: str | None) -> bool:
        """While a flag is edited, printable keys are typed into it (the screen's one-letter
        keys are not run, nor shown in the footer)."""
        return self.editing is not None and character is not None and character.isprintable()

    def _on_paste(self, event: events.Paste) -> None:
        field = self.editing_field
        if field is None or not event.text:
            return
        event.stop()
        event.prevent_default()
        text = event.text.splitlines()[0] if event.text.splitlines() else ""
        if not self._accepts(field, text.strip()):
            self.hint = f"{field.label} takes {field.takes}: {text.strip()!r} is not pasted"
            self.refresh(layout=True)
            return
        self._insert(field, text.strip() if field.numeric else text)
        self._edited()

    def _insert(self, field: FlagField, text: str) -> None:
        if self.selected:
            field.value, self.cursor = text, len(text)
        else:
            field.value = field.value[: self.cursor] + text + field.value[self.cursor :]
            self.cursor += len(text)
        self.selected = False

    def _edit_key(self, field: FlagField, key: str, character: str | None) -> bool:
        """Apply one editing key (not a printable one) to ``field``; False when it is not an
        editing key."""
        value = field.value
        if key in ("backspace", "ctrl+h"):
            if self.selected:
                field.value, self.cursor = "", 0
            elif self.cursor > 0:
                field.value = value[: self.cursor - 1] + value[self.cursor :]
                self.cursor -= 1
        elif key == "delete":
            if self.selected:
                field.value, self.cursor = "", 0
            else:
                field.value = value[: self.cursor] + value[self.cursor + 1 :]
        elif key == "left":
            self.cursor = 0 if self.selected else max(0, self.cursor - 1)
        elif key == "right":
            self.cursor = len(value) if self.selected else min(len(value), self.cursor + 1)
        elif key in ("home", "ctrl+a"):
            self.cursor = 0
        elif key in ("end", "ctrl+e"):
            self.cursor = len(value)
        elif key == "ctrl+k":
            field.value = value[: self.cursor]
        elif key == "ctrl+u":
            field.value, self.cursor = value[self.cursor :], 0
        elif key == "ctrl+w":
            head = value[: self.cursor].rstrip()
            cut = max(head.rfind(c) for c in " ,=") + 1 if head else 0
            field.value, self.cursor = value[:cut] + value[self.cursor :], cut
        else:
            return False
        self.selected = False
        return True

    def _edited(self) -> None:
        """The value under the cursor changed (or the cursor moved): repaint, recompute soon."""
        if self.hint is not None:
            self.hint = None
            self.refresh(layout=True)
        self.refresh()
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(DEBOUNCE_S, self.recompute, name="calc-debounce")

    def on_click(self, event: events.Click) -> None:
        line = event.y - self.styles.padding.top
        for index, at in self._field_lines.items():
            if at == line:
                self.focus_field(index)
                return

    # ---- the prediction ---------------------------------------------------------------------

    def edits(self) -> tuple[list[str], list[str]]:
        """The fields' values as typed (apply validates them again) as ``--set`` / ``--unset``."""
        return _edit_args((f.flag, f.observed, f.value) for f in self.fields)

    def recompute(self) -> None:
        """Predict for the current edits and show it. Each edited field is checked on its own: an
        invalid one is flagged, named in ``error`` with what it takes, and the prediction is made
        with its last valid value (a combination the model refuses keeps the last prediction)."""
        self.computations += 1
        for f in self.fields:
            f.invalid = False
        if self.model is None or self.engine is None:
            self.prediction = None
            self._render_result()
            return
        errors: list[str] = []
        for f in self.fields:
            if not f.edited:
                continue
            try:
                kvcalc.parse_what_if(self.engine, *_edit_args([(f.flag, f.observed, f.value)]))
            except kvcalc.CalcError as exc:
                f.invalid = True
                errors.append(_field_error(f, str(exc)))
        sets, unsets = _edit_args((f.flag, f.observed, f.valid if f.invalid else f.value) for f in self.fields)
        try:
            edits = kvcalc.parse_what_if(self.engine, sets, unsets)
            prediction = kvcalc.predict(self.model, edits, graph_margin_gib=self.margin_gib)
        except kvcalc.CalcError as exc:
            if self.prediction is not None and self.prediction.model is not self.model:
                self.prediction = None  # the last one was of another boot's model
            for f in self.fields:
                if f.edited and f.flag.replace("_", "-") in str(exc).replace("_", "-"):
                    f.invalid = True
            kept = "" if self.prediction is None else " (the prediction shown is the last valid one)"
            errors.append(f"{exc}{kept}")
        else:
            self.prediction = prediction
            for f in self.fields:
                if not f.invalid:
                    f.valid = f.value
        self.error = "; ".join(errors) if errors else None
        self._render_result()
        self.post_message(self.Computed(self))

    def explain_lines(self) -> list[str]:
        if self.prediction is None:
            return [self.error or "no prediction yet: the boot has not sized its KV pool"]
        return [*self.prediction.explain]

    def reason_lines(self) -> list[str]:
        return [] if self.prediction is None else [*self.prediction.reasons]

    @property
    def verdict(self) -> str | None:
        return None if self.prediction is None else self.prediction.verdict.value

    def _render_result(self) -> None:
        """Build what the prediction shows; ``render`` lays it out at the width it has then."""
        p = self.prediction
        self._rows = ()
        self._reasons = ()
        if p is None:
            if self.error and self.model is None:
                self._basis = Content.styled(self._waiting_text(), "$text-muted italic")
                self._message = Content("")
            else:
                self._message = Content.styled(self.error or "", "$error")
            self.refresh(layout=True)
            return
        # an invalid field: said above the prediction, which is the last valid value's
        self._message = Content.styled(self.error, "$error") if self.error else Content("")
        self._basis = Content.assemble(
            ("model: ", "$text-muted"),
            (str(p.model.basis), "$foreground"),
            (" · confidence ", "$text-muted"),
            (str(p.confidence), "$warning bold" if p.confidence == "low" else "$foreground"),
        )
        boot = self.boot
        if boot is not None and boot.start_missing is not None and (self.stored_basis is not None
                                                                    or self.serving_config is not None):
            on = ("calibrated on a stored boot of these flags (history)" if self.stored_basis is not None
                  else self.serving_config.said(p.model) if self.serving_config is not None else "")
            said = [longrun.flags_source(boot), on]
            self._basis = Content.assemble(self._basis, ("\n" + "; ".join(x for x in said if x), "$text-muted"))
        delta = f" ({fmt.signed_tokens(p.tokens - p.model.tokens)})" if p.tokens != p.model.tokens else ""
        # figures are formatted from the exact values (kvtui.fmt), not the rounded JSON; the verdict
        # and the largest safe fraction first: they are what a short panel must show
        rows: list[tuple[str, str, str]] = [
            ("max safe fraction", fmt.safe_max(p.max_safe_fraction), "$accent bold"),
            ("KV tokens", fmt.tokens(p.tokens) + delta, "$foreground bold"),
            ("KV / rank", fmt.gib(p.kv_cache_gib), "$foreground"),
            ("free after pool", fmt.gib(p.avail_after_pool_gib), "$foreground"),
        ]
        headroom = p.graph_headroom_gib
        rows.append(
            ("graph headroom", fmt.signed_gib(headroom), "$error bold" if headroom is not None and headroom < 0
             else "$foreground")
        )
        rows.append(("full-context reqs", fmt.capacity(p.full_context_requests), "$foreground"))
        if p.tokens_per_0_01 is not None:
            rows.append(("tokens per +0.01", fmt.signed_tokens(p.tokens_per_0_01), "$text-muted"))
        verdict = p.verdict.value
        var = fmt.VERDICT_VARIABLE.get(verdict, "text-muted")
        badge = Content.styled(f" {verdict.upper().replace('_', ' ')} ", f"bold $background on ${var}")
        lines: list[ResultRow] = [(Content.styled("verdict", "$text-muted"), badge)]
        lines.extend(
            (Content.styled(label, "$text-muted"), Content.styled(value, style)) for label, value, style in rows
        )
        self._rows = tuple(lines)
        self._reasons = tuple(self.reason_lines()[:MAX_REASONS])
        self.refresh(layout=True)

    def _waiting_text(self) -> str:
        boot = self.boot
        if boot is not None and boot.status is BootStatus.FAILED and self.error:
            return f"cannot calibrate: {self.error}"
        if boot is not None and boot.start_missing is not None:  # it serves: never "waiting for the boot"
            return self.error or longrun.serving_state(boot) or "serving"
        return "waiting for the boot to size its KV pool…"

    # ---- drawing ------------------------------------------------------------------------------

    @property
    def result_rows(self) -> tuple[ResultRow, ...]:
        return self._rows

    def _label_width(self, width: int) -> int:
        longest = max((len(f.label) for f in self.fields), default=0) + 1
        return max(1, min(longest, width - MIN_VALUE_CELLS))

    def _field_line(self, index: int, field: FlagField, width: int) -> Content:
        label_w = self._label_width(width)
        value_w = max(1, width - label_w)
        label = Content.styled(elide(field.label, label_w - 1).ljust(label_w), "$text-muted")
        if field.invalid:
            style = "$error bold"
        elif field.edited:
            style = "$accent bold"
        else:
            style = "$foreground"
        if index != self.editing:
            text = field.value if field.value else "unset"
            if not field.value:
                style = "$text-disabled italic" if not field.edited else "$accent italic"
            shown = elide(text, value_w)
            if self.editing is None and index == self.current and self.has_focus:
                # the panel has focus without a field (tab): the flag Enter / c would edit
                return Content.assemble(label, (shown, f"{style} underline"),
                                        (" " * (value_w - len(shown)), "on $primary 10%"))
            return Content.assemble(label, (shown, style), " " * (value_w - len(shown)))
        # the row being edited: a highlighted field with the cursor (the selection when all of it is)
        base = "on $primary 25%"
        if self.selected and field.value:
            shown = elide(field.value, value_w)
            return Content.assemble(label, (shown, f"{style} reverse"), (" " * (value_w - len(shown)), base))
        text, _start, col = edit_window(field.value, self.cursor, value_w)
        text = text.ljust(value_w)
        return Content.assemble(
            label,
            (text[:col], f"{style} {base}"),
            (text[col : col + 1] or " ", f"{style} reverse"),
            (text[col + 1 :], f"{style} {base}"),
        )

    def _result_line(self, label: Content, value: Content, width: int) -> Content:
        room = width - value.cell_length - 1
        if label.cell_length > room:
            label = label.truncate(max(0, room), ellipsis=True)
        return Content.assemble(label, " " * max(1, width - label.cell_length - value.cell_length), value)

    def _keys_line(self) -> Content:
        if self.editing is not None:
            return Content.assemble(("⏎", "$accent bold"), " use  ", ("esc", "$accent bold"), " leave  ",
                                    ("↑↓", "$accent bold"), " field")
        if self.has_focus:
            return Content.assemble(("⏎", "$accent bold"), " edit  ", ("↑↓", "$accent bold"), " field  ",
                                    ("^r", "$accent bold"), " reset")
        return Content.assemble(("c", "$accent bold"), " edit  ", ("⏎", "$accent bold"), " recompute  ",
                                ("x", "$accent bold"), " explain")

    def lines(self, width: int) -> list[Content]:
        """The panel's lines at ``width`` cells (also records which line holds which flag)."""
        width = max(10, width)
        out: list[Content] = list(self._basis.wrap(width)) if self._basis else []
        self._field_lines = {}
        for i, field in enumerate(self.fields):
            self._field_lines[i] = len(out)
            out.append(self._field_line(i, field, width))
        if self.hint:
            out.extend(Content.styled(self.hint, "$warning").wrap(width))
        out.append(Content(""))
        if self._rows and self._message:
            out.extend(self._message.wrap(width))
        if self._rows:
            out.extend(self._result_line(label, value, width) for label, value in self._rows)
        elif self._message:
            out.extend(self._message.wrap(width))
        for reason in self._reasons:
            out.extend(Content.styled(f"• {reason}", "$text-muted").wrap(width))
        out.append(Content(""))
        out.extend(self._keys_line().wrap(width))
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines(width))

    def render(self) -> Content:
        return Content("\n").join(self.lines(self.size.width or 36))

    def plain_lines(self) -> list[str]:
        """What the panel shows, as text (tests, the tmux check)."""
        return [line.plain for line in self.lines(self.size.width or 36)]
