"""The fleet screen's table (issue 26): one line per serving instance, VIRTUAL — only the lines on
screen are rendered (the line API of ``ScrollView``), so 1,000 instances cost what 40 do per key.
The header line stays put; ``j``/``k`` (arrows), ``g``/``G`` (home/end), page up/down move the
cursor; ``enter`` posts ``FleetTable.Selected`` with the row under it. ``set_rows`` replaces the
rows and keeps the cursor on the instance it was on. A ``stale`` table (Prometheus could not be
read) draws every row muted and its state as ``stale``: nothing on it reads as healthy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kvtui import fmt
from kvtui.fleet.rows import FleetRow, row_cells

# (title, width, right-aligned, the sort keys (kvtui.fleet.rows.SORT_KEYS) it shows); the last
# column (state / trouble) takes the rest of the width
COLUMNS: list[tuple[str, int, bool, tuple[str, ...]]] = [
    ("HOST", 14, False, ("host",)), ("ENGINE", 11, False, ("engine", "version")), ("MODEL", 12, False, ("model",)),
    ("GPU", 3, True, ("gpus",)), ("MEM GiB", 7, True, ("mem",)), ("UTIL", 4, True, ("util",)),
    ("TEMP", 4, True, ("temp",)), ("KV/PEAK", 8, True, ("kv", "kv-peak")), ("RUN/Q", 7, True, ("running", "queued")),
    ("PRE/m", 5, True, ("preemptions",)), ("TTFT95", 6, True, ("ttft",)), ("UP", 4, True, ("uptime",)),
]
LAST_TITLE = "STATE / TROUBLE"
LAST_SORTS = ("state",)


def _line(cells: Sequence[str]) -> str:
    parts = [(fmt.cut(c, w).rjust(w) if right else fmt.cut(c, w).ljust(w))
             for c, (_, w, right, _s) in zip(cells, COLUMNS, strict=True)]
    return " ".join(parts) + " "


FIXED_WIDTH = sum(w for _, w, _, _ in COLUMNS) + len(COLUMNS)


class FleetTable(ScrollView, can_focus=True):
    """See the module doc."""

    DEFAULT_CSS = """
    FleetTable { height: 1fr; scrollbar-size-vertical: 1; }
    FleetTable > .fleet-table--header { text-style: bold; color: $text-muted; }
    FleetTable > .fleet-table--cursor { background: $block-cursor-background; color: $block-cursor-foreground; }
    FleetTable > .fleet-table--trouble { color: $error; text-style: bold; }
    FleetTable > .fleet-table--stale { color: $text-disabled; }
    FleetTable > .fleet-table--state { color: $text-muted; }
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "fleet-table--header", "fleet-table--cursor", "fleet-table--trouble", "fleet-table--stale",
        "fleet-table--state",
    }

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "move(1)", "Down", show=False),
        Binding("k,up", "move(-1)", "Up", show=False),
        Binding("g,home", "first", "First", show=False),
        Binding("G,end", "last", "Last", show=False),
        Binding("pagedown,ctrl+f", "page(1)", "Page down", show=False),
        Binding("pageup,ctrl+b", "page(-1)", "Page up", show=False),
        Binding("enter", "select", "Drill in", id="fleet.open"),
    ]

    class Selected(Message):
        """Enter on a row."""

        def __init__(self, row: FleetRow) -> None:
            super().__init__()
            self.row = row

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[FleetRow] = []
        self.cursor = 0
        self.stale: str | None = None  # the state cell of every row when stale ("stale 17:31:05")
        self.sort_key = "host"
        self.reverse = False
        self._text: dict[int, tuple[str, str]] = {}  # row index -> (fixed cells, state / trouble)

    # ---- data ------------------------------------------------------------------------------

    def set_rows(self, rows: Sequence[FleetRow], *, stale: str | None = None) -> None:
        """Replace the rows; the cursor stays on the instance it was on (else the same position)."""
        was = self.current
        self.rows = list(rows)
        self.stale = stale
        self._text.clear()
        at = self.cursor
        if was is not None:
            key = (was.job, was.instance)
            at = next((i for i, r in enumerate(self.rows) if (r.job, r.instance) == key), at)
        self.cursor = min(max(at, 0), max(len(self.rows) - 1, 0))
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rows) + 1)
        self._keep_cursor_visible()
        self.refresh()

    def set_sort(self, key: str, reverse: bool) -> None:
        """What the header marks (the rows come sorted)."""
        self.sort_key, self.reverse = key, reverse
        self.refresh_line(0)

    @property
    def current(self) -> FleetRow | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    # ---- movement --------------------------------------------------------------------------

    def _page(self) -> int:
        return max(1, self.size.height - 1)

    def _keep_cursor_visible(self) -> None:
        top = int(self.scroll_y)
        body = self._page()
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + body:
            self.scroll_to(y=self.cursor - body + 1, animate=False, immediate=True)

    def _move_to(self, row: int) -> None:
        row = min(max(row, 0), max(len(self.rows) - 1, 0))
        if row == self.cursor:
            return
        old, self.cursor = self.cursor, row
        top = int(self.scroll_y)
        self._keep_cursor_visible()
        if int(self.scroll_y) == top:  # no scroll: only the two lines change
            self.refresh_line(old - top + 1)
            self.refresh_line(row - top + 1)
        else:
            self.refresh()

    def refresh_line(self, y: int) -> None:
        if 0 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def action_move(self, step: int) -> None:
        self._move_to(self.cursor + step)

    def action_first(self) -> None:
        self._move_to(0)

    def action_last(self) -> None:
        self._move_to(len(self.rows) - 1)

    def action_page(self, step: int) -> None:
        self._move_to(self.cursor + step * self._page())

    def action_select(self) -> None:
        row = self.current
        if row is not None:
            self.post_message(self.Selected(row))

    def on_click(self, event: events.Click) -> None:
        """A click puts the cursor on that row; a double click drills in, as ``enter``."""
        if event.y < 1:
            return
        row = int(self.scroll_y) + event.y - 1
        if 0 <= row < len(self.rows):
            self._move_to(row)
            if event.chain >= 2:
                self.action_select()

    def on_resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rows) + 1)
        self._keep_cursor_visible()

    # ---- rendering -------------------------------------------------------------------------

    def _header(self, width: int) -> Strip:
        titles: list[str] = []
        for title, _w, _r, sorts in COLUMNS:
            titles.append(self._marked(title, sorts))
        text = _line(titles) + self._marked(LAST_TITLE, LAST_SORTS)
        style = self.get_component_rich_style("fleet-table--header")
        return Strip([Segment(fmt.cut(text, width), style)]).extend_cell_length(width, style)

    def _marked(self, title: str, sorts: tuple[str, ...]) -> str:
        if self.sort_key not in sorts:
            return title
        arrow = "▲" if self.reverse else "▼"
        return f"{title}{arrow}"  # (the status line names the key: RUN/Q sorts by running or queued)

    def _row_text(self, i: int) -> tuple[str, str]:
        got = self._text.get(i)
        if got is None:
            r = self.rows[i]
            if self.stale is not None:  # as last read: nothing shown as healthy
                last = f"{self.stale}: {'; '.join(r.trouble)}" if r.trouble else self.stale
            else:
                last = "; ".join(r.trouble) if r.trouble else r.state
            got = self._text[i] = (_line(row_cells(r)), last)
        return got

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            return self._header(width)
        i = int(self.scroll_y) + y - 1
        if not 0 <= i < len(self.rows):
            return Strip.blank(width, self.rich_style)
        fixed, last = self._row_text(i)
        base = self.rich_style
        if self.stale is not None:
            main = last_style = base + self.get_component_rich_style("fleet-table--stale")
        else:
            main = base
            last_style = base + self.get_component_rich_style(
                "fleet-table--trouble" if self.rows[i].trouble else "fleet-table--state")
        if i == self.cursor:
            cursor = self.get_component_rich_style("fleet-table--cursor")
            main, last_style = main + cursor, last_style + Style(bgcolor=cursor.bgcolor)
        fixed = fmt.cut(fixed, width)
        rest = max(width - len(fixed), 0)
        segments = [Segment(fixed, main)]
        if rest:
            segments.append(Segment(fmt.cut(last, rest), last_style))
        return Strip(segments).extend_cell_length(width, main)
