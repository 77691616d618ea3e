"""The log panel: the log view (``kvtui.ui.log.view``) with its status line (follow state,
mode, messages, the "N new lines" badge) and the find bar for ``/`` search and ``&`` filter."""

from __future__ import annotations

from typing import ClassVar

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Input, Static

from kvtui.ui.keys import refocus_key, run_own_binding
from kvtui.ui.log.model import LogSource, ViewMode
from kvtui.ui.log.view import LogView
from kvtui.ui.message import WidgetMessage


class FindInput(Input, inherit_bindings=False):
    """The find bar's field. Enter and Esc act as the key is taken (not after it bubbled up): the
    keys typed after them in one burst (``/weight`` Enter ``n``) already wait in this field's queue
    and must meet the log, not the field; a key that comes after focus left is handed back to the
    app (see ``kvtui.ui.keys``). Enter belongs to the bar (its footer key says what it does)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        b for b in Input.BINDINGS if not (isinstance(b, Binding) and b.key == "enter")
    ]

    async def _on_key(self, event: events.Key) -> None:
        if refocus_key(self, event):
            return
        # the field's own keys (ctrl+a, ctrl+k…) and the bar's (Enter, Esc) act now, in the order
        # typed: as bindings they would run after the characters typed behind them
        if await run_own_binding(self, event):
            return
        bar = self.parent
        if isinstance(bar, FindBar) and await run_own_binding(bar, event):
            return
        await super()._on_key(event)


class FindBar(Horizontal):
    """The one-line input for ``/`` search and ``&`` filter, under the log: while it is open it
    takes the status line's row (the two were both docked at the bottom, the status line drawn
    over what was typed)."""

    DEFAULT_CSS = """
    FindBar {
        dock: bottom;
        height: 1;
        display: none;
        background: $panel;
        &.-open { display: block; }
        #find-label { width: auto; padding: 0 0 0 1; color: $accent; text-style: bold; }
        Input {
            border: none;
            height: 1;
            padding: 0 1;
            width: 1fr;
            background: $panel;
            &:focus { border: none; background: $panel; }
        }
    }
    """

    class Submitted(WidgetMessage["FindBar"]):
        def __init__(self, bar: FindBar, kind: str, value: str) -> None:
            super().__init__(bar)
            self.kind = kind
            self.value = value

    class Closed(WidgetMessage["FindBar"]):
        pass

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Cancel", id="find.close"),
        Binding("enter", "submit_search", "Search", id="find.search"),
        Binding("enter", "submit_filter", "Filter", id="find.filter"),
    ]

    kind: str = "search"
    forward: bool = True  # a search: ``/`` forward, ``\\`` backwards

    def compose(self) -> ComposeResult:
        yield Static("/", id="find-label")
        yield FindInput(id="find-input", select_on_focus=True)

    @property
    def is_open(self) -> bool:
        return self.has_class("-open")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The footer names what Enter does: search for ``/``, filter for ``&``."""
        if action == "submit_search":
            return self.kind == "search"
        if action == "submit_filter":
            return self.kind == "filter"
        return True

    def open(self, kind: str, value: str = "", *, forward: bool = True) -> None:
        self.kind = kind
        self.forward = forward
        label = ("/" if forward else "\\") if kind == "search" else "&"
        self.query_one("#find-label", Static).update(Content(label))
        field = self.query_one("#find-input", Input)
        field.placeholder = (
            f"search the whole log {'after' if forward else 'before'} the cursor (smart case) — Enter to find, "
            f"n/N {'next/previous' if forward else 'previous/next'}"
            if kind == "search"
            else "filter: adds text, !text hides, a|b regex, TP3 rank — '-' drops the last, empty clears all"
        )
        field.value = value
        self.add_class("-open")
        self._set_open(True)
        self.screen.set_focus(field)  # now: the keys typed right after / go into the field
        self.screen.refresh_bindings()

    def _set_open(self, is_open: bool) -> None:
        """Open, the bar takes the status line's row (the status line is hidden meanwhile)."""
        panel = self.parent
        if isinstance(panel, Widget):
            panel.set_class(is_open, "-finding")
            for status in panel.query_children(LogStatus):
                status.display = not is_open

    def action_close(self) -> None:
        self.remove_class("-open")
        self._set_open(False)
        self.post_message(self.Closed(self))

    def action_submit_search(self) -> None:
        self.submit(self.query_one("#find-input", Input).value)

    def action_submit_filter(self) -> None:
        self.submit(self.query_one("#find-input", Input).value)

    def submit(self, value: str) -> None:
        self.remove_class("-open")
        self._set_open(False)
        panel = self.parent
        if isinstance(panel, LogPanel):
            panel.find_now(self.kind, value)  # now, not through a message: see FindInput
        else:
            self.post_message(self.Submitted(self, self.kind, value))


class LogStatus(Widget):
    """Follow state, mode and messages on the left; the "N new lines" badge on the right: one
    row, drawn by one widget (issue 23: a host pane in few widgets; this was three)."""

    DEFAULT_CSS = """
    LogStatus {
        dock: bottom;
        height: 1;
        background: $surface;
        color: $text-muted;
        & > .log-status--badge { background: $accent; color: $text; text-style: bold; }
    }
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"log-status--badge"}

    def __init__(self) -> None:
        super().__init__()
        self.state = Content("")  # the left part: follow state, message, mode, filters…
        self.badge = ""  # "↓ 12 new lines (f)"; empty while none wait
        self._key: tuple[str, str] | None = None

    def show(self, view: LogView) -> None:
        parts: list[Content] = []
        if view.offline is not None:  # not "● following" a host that is not reached
            parts.append(Content.styled(f"{view.offline} · new lines when it is", "$warning bold"))
            if not view.follow:
                parts.append(Content.styled("⏸ paused", "$warning"))
        elif view.recorded:  # a bundle: the recording's end, nothing follows
            parts.append(Content.styled("■ recorded · nothing new follows" if view.follow else "■ recorded",
                                        "$accent"))
        elif view.follow:
            parts.append(Content.styled("● following", "$success"))
        else:
            parts.append(Content.styled("⏸ paused", "$warning"))
        if view.message:  # what just happened first: the toggles after it are what a cut loses
            parts.append(Content.styled(view.message, "$foreground italic"))
        if view.mode is ViewMode.HISTORY:
            parts.append(Content.styled("history from the spool", "$accent"))
        elif view.mode is ViewMode.HOST:
            parts.append(Content.styled("lines from the host (not read before; G: back)", "$accent"))
        if view.line_filter is not None:  # the filters as chips, and what they hide
            chips = [Content.styled(f"[{flt.chip}]", "$warning" if flt.negate else "$accent bold")
                     for flt in view.line_filter.filters]
            parts.append(Content(" ").join([*chips, Content(f"{view.filter_hidden:,} hidden")]))
        if view.search_query is not None:
            parts.append(Content(f"search {'/' if view.search_forward else chr(92)}{view.search_query.text}"))
        if not view.collapse_progress:
            parts.append(Content("every redraw"))
        if view.wrap:
            parts.append(Content("wrap"))
        if view.timestamps:
            parts.append(Content("timestamps"))
        state = Content(" · ").join(parts)
        badge = ""
        if view.pending > 0:
            noun = "line" if view.pending == 1 else "lines"
            badge = f"↓ {view.pending:,} new {noun} (f)"
        # one row (CSS): a new state is a repaint, not a layout pass of the screen
        key = (state.markup, badge)
        if key != self._key:
            self._key = key
            self.state, self.badge = state, badge
            self.refresh()

    def render(self) -> Content:
        width = self.size.width
        badge = (Content.styled(f" {self.badge} ", self.get_visual_style("log-status--badge"))
                 if self.badge else Content(""))
        room = max(0, width - badge.cell_length - 2)  # a cell either side of the state
        state = self.state.truncate(room, ellipsis=True)
        return Content.assemble(" ", state, " " * max(1, width - 1 - state.cell_length - badge.cell_length), badge)


class LogPanel(Vertical):
    """The log with its status line and find bar."""

    DEFAULT_CSS = """
    LogPanel {
        height: 1fr;
    }
    """

    def __init__(
        self, *, window: int = 5000, source: LogSource | None = None, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._window = window
        self._source = source

    def compose(self) -> ComposeResult:
        yield FindBar()
        yield LogStatus()
        yield LogView(window=self._window, source=self._source)

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def on_mount(self) -> None:
        self.query_one(LogStatus).show(self.view)

    @on(LogView.StatusChanged)
    def _status(self, event: LogView.StatusChanged) -> None:
        event.stop()
        self.query_one(LogStatus).show(event.control)

    def open_find(self, kind: str, *, forward: bool = True) -> None:
        view = self.view
        current = ""
        if kind == "search" and view.search_query is not None:
            current = view.search_query.text
        self.query_one(FindBar).open(kind, current, forward=forward)

    def find_now(self, kind: str, value: str) -> None:
        """The find bar's Enter: focus back on the log (now) and search or filter."""
        view = self.view
        self.screen.set_focus(view)
        self.screen.refresh_bindings()
        if kind == "search":
            view.set_search(value, forward=self.query_one(FindBar).forward)
        else:
            view.set_filter(value)

    @on(FindBar.Submitted)
    def _find(self, event: FindBar.Submitted) -> None:
        event.stop()
        self.find_now(event.kind, event.value)

    @on(FindBar.Closed)
    def _find_closed(self, event: FindBar.Closed) -> None:
        event.stop()
        self.screen.set_focus(self.view)
        self.screen.refresh_bindings()
