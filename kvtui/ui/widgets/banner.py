"""``Banner``: a notice above the panels (a failed boot, a change in progress or its outcome)
that takes ONE line unless expanded (issue 22 #13: at 120x36 with two hosts the banners left the
log five lines). Collapsed, it shows its first line — the most important fact — cut to the width,
with the key that expands it; expanded (``b``, the screen's), every line."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import ClassVar

from textual.content import Content
from textual.events import Resize
from textual.visual import VisualType
from textual.widget import Widget

from kvtui.ui.perf import QuietStatic

EXPAND_KEY = "b"  # the screen's binding (kvtui.ui.bindings MAIN_BINDINGS, id "banners")


def expand_key(widget: Widget) -> str:
    """The key that expands the banners: ``b``, or what hosts.toml's [keymap] made of it."""
    try:
        keymap = getattr(getattr(widget.app, "config", None), "keymap", None)
    except Exception:  # not attached to an app (yet)
        return EXPAND_KEY
    key = keymap.get("banners", EXPAND_KEY) if isinstance(keymap, dict) else EXPAND_KEY
    return str(key).split(",")[0] or EXPAND_KEY


def one_line(full: Content, width: int, hint: str, head: Content | None = None, short_hint: str = "") -> Content:
    """``head`` (default: ``full``'s first line) cut to ``width`` cells, ending with ``hint`` when
    ``full`` has more to show (or the line was cut). A head that fits beside ``short_hint`` (the
    key alone) but not beside ``hint`` keeps its end: at 80 columns the failure's fraction ("… at
    0.99") is the fact, not the word "details"."""
    lines = full.split("\n")
    more = len(lines) > 1 or (head is not None and head.plain != full.plain)
    if head is None:
        head = lines[0] if lines else Content("")
    if width <= 0:
        return head
    tail = Content.styled(f"  {hint}", "$text-muted")
    if not more and head.cell_length <= width:
        return head
    room = width - tail.cell_length
    if short_hint and head.cell_length > room:
        short = Content.styled(f"  {short_hint}", "$text-muted")
        if head.cell_length <= width - short.cell_length:
            tail, room = short, width - short.cell_length
    if room < 12:  # too narrow for both: the fact wins
        return head.truncate(width, ellipsis=True)
    if head.cell_length > room:
        head = head.truncate(room, ellipsis=True)
    return Content.assemble(head, " " * max(0, room - head.cell_length), tail)


class Notice(QuietStatic):
    """A notice shown only while it has something to say (``show_when``), every line of it (not
    a one-line ``Banner``: what it says to the end is the point). A subclass gives it its tone
    (a coloured bar at its left, e.g. ``background: $warning-muted; border-left: thick $warning``)."""

    DEFAULT_CSS = """
    Notice {
        display: none;
        height: auto;
        padding: 0 1;
        &.-shown { display: block; }
    }
    """

    SHOWN: ClassVar[str] = "-shown"  # the class that shows it

    def show_when(self, key: Hashable | None, build: Callable[[], VisualType] = str) -> None:
        """Show ``build()`` (rebuilt only when ``key`` changed); ``key`` None: hidden, emptied."""
        self.set_class(key is not None, self.SHOWN)
        self.set(key, build if key is not None else str)


class Banner(QuietStatic):
    """A ``QuietStatic`` whose content is shown on one line unless ``expanded``. It starts
    expanded (a screen without ``b``, the deployment console's, shows it all); the host console
    collapses its banners (``HostPane.set_banners_expanded``)."""

    HINT = "details"  # after the key: "b: details"

    def __init__(self, content: VisualType = "", *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(content, id=id, classes=classes)
        self.expanded = True
        self.full: Content = Content("")  # every line (what ``b`` shows)
        self.head: Content | None = None  # the one line collapsed (None: the first of ``full``)

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        self.full = content if isinstance(content, Content) else Content(str(content))
        super().update(self._shown(), layout=layout)

    def _shown(self) -> Content:
        if self.expanded:
            return self.full
        width = self.content_region.width if self.is_mounted else 0
        key = expand_key(self)
        return one_line(self.full, width, f"{key}: {self.HINT}", self.head, short_hint=key)

    def set_expanded(self, expanded: bool) -> None:
        if expanded == self.expanded:
            return
        self.expanded = expanded
        self.set_class(expanded, "-expanded")
        super().update(self._shown())

    def on_resize(self, event: Resize) -> None:
        if not self.expanded:
            super().update(self._shown())
