"""The console's tables move like the log (issue 22 #10): ``j``/``k`` a row, ``g``/``G`` the first
/ last, as well as the arrows and home/end every ``DataTable`` has. ``ListTable`` is the one
place these keys are bound (the history lists, the GPU processes); ``refill`` replaces the rows
and keeps the cursor on the row it was on (by key), so a table refilled by a poll does not throw
the cursor back to the first row between ``j`` and the key that acts on the row."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar, TypeVar

from textual.binding import Binding, BindingType
from textual.widgets import DataTable

CellT = TypeVar("CellT")

LIST_BINDINGS: list[BindingType] = [
    Binding("j", "cursor_down", "Down", show=False),
    Binding("k", "cursor_up", "Up", show=False),
    Binding("g", "scroll_top", "First", show=False),
    Binding("G", "scroll_bottom", "Last", show=False),
]


class ListTable(DataTable[CellT]):
    """A row-cursor ``DataTable`` with the log's movement keys (see the module doc)."""

    BINDINGS: ClassVar[list[BindingType]] = LIST_BINDINGS

    def refill(self, rows: Iterable[tuple[str, Sequence[CellT]]]) -> None:
        """Replace the rows (``(key, cells)`` each); the cursor stays on the row with the key it
        was on (else at the same position, within the new rows)."""
        at_row = self.cursor_row
        at_key: str | None = None
        if self.row_count and 0 <= at_row < self.row_count:
            at_key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        self.clear()
        keys: dict[str, int] = {}
        for key, cells in rows:
            if key in keys:  # a duplicate key would raise: the first row keeps it
                continue
            keys[key] = len(keys)
            self.add_row(*cells, key=key)
        if not keys:
            return
        row = keys[at_key] if at_key in keys else min(max(at_row, 0), len(keys) - 1)
        self.move_cursor(row=row, animate=False)
