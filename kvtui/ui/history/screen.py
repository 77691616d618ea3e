"""The console's history view (``H``; ``d`` opens it on the current boot's diff): the host's
remembered boots (``kvtui.history``), newest first. ``space`` marks a boot, ``d`` shows what
changed between the marked boot (else the last ready boot of the same model) and the boot under
the cursor, ``l`` shows the end of a past boot's log from the spool, ``esc`` closes.

The boots are read off the event loop (a worker thread); the view never writes the history."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from kvtui.history import HistoryError, ledger, open_store
from kvtui.history import diff as hdiff
from kvtui.history import record as rec
from kvtui.history.record import spool_segment
from kvtui.ui import formatting as fmt
from kvtui.ui.widgets.table import ListTable

LOG_TAIL_LINES = 200  # a past boot's log: its last lines (the spool file holds them all)


def tail_text(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` display lines of a spool file (the text column of each)."""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - 256 * 1024))
        data = fh.read().decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(row.split("\t", 5)[-1] for row in data)


class HistoryScreen(ModalScreen[None]):
    """See the module doc."""

    DEFAULT_CSS = """
    HistoryScreen { align: center middle; }
    HistoryScreen > #history-dialog {
        width: 95%; height: 90%; border: thick $primary; background: $surface; padding: 0 1;
    }
    HistoryScreen #history-table { height: 1fr; min-height: 5; }
    HistoryScreen #history-detail-scroll { height: 2fr; border-top: solid $primary; }
    HistoryScreen .history-footer { color: $text-muted; height: 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="history.close"),
        Binding("space", "mark", "Mark", id="history.mark"),
        Binding("d", "diff", "Diff", id="history.diff"),
        Binding("l", "log", "Log", id="history.log"),
    ]

    def __init__(self, host: str, *, diff_newest: bool = False) -> None:
        super().__init__()
        self.host = host
        self.diff_newest = diff_newest
        self.rows: list[Any] = []  # StoredBoot, newest first
        self.marked: Hashable | None = None  # the marked row's key (``_key``)
        self.detail_text = ""
        self.problem: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="history-dialog"):
            yield Static(Content.styled(f"{self.host}: boots remembered", "bold"), id="history-title")
            # the list moves like the log (issue 22 #10): j/k a row, g/G the first / last
            yield ListTable(id="history-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="history-detail-scroll"):
                yield Static("reading the history…", id="history-detail")
            yield Static("space mark · d what changed (marked, else last good) · l log · esc close",
                         classes="history-footer")

    def on_mount(self) -> None:
        self.load()

    @work(exclusive=True, group="history-load", exit_on_error=False)
    async def load(self) -> None:
        def read() -> tuple[list[Any], str | None]:
            with open_store(readonly=True) as store:
                try:
                    rows = store.boots(self.host, limit=500)
                    # a newer kvtui's documents are not read: said under the table
                    return rows, "\n".join(m for m in (store.problem, *store.refused) if m) or None
                except HistoryError as exc:
                    return [], str(exc)

        self.rows, self.problem = await asyncio.to_thread(read)
        self._fill()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        self._add_columns(table, "id", "started", "outcome", "fraction", "tokens", "to ready", "failure / restart")
        for r in self.rows:
            d = r.document
            fail = d.failure
            note = f"{fail.kind} in {fail.phase}" if fail is not None and fail.kind else ""
            e = ledger.entry(d, r.id)
            if e is not None:
                pred = f"predicted {fmt.tokens(e.predicted_tokens)} {e.verdict}"
                if e.error_pct is not None:
                    pred += f" ({e.error_pct:+.2f} %)"
                note = f"{note}; {pred}" if note else pred
            if nodes := rec.nodes_note(d):  # a vLLM boot over Ray: its nodes and their TP ranks
                note = f"{note}; {nodes}" if note else nodes
            frac = d.fraction
            table.add_row("*" if r.id == self.marked else "", f"#{r.id}",
                          (d.started_at or "")[:19].replace("T", " "), d.status,
                          f"{frac:g}" if frac is not None else "—", fmt.tokens(d.tokens),
                          fmt.duration(d.seconds) if d.status == "ready" else "—", note,
                          key=str(r.id))
        if not self.rows:
            self._show(self.problem or f"no boot of {self.host} in the history yet")
            return
        entries = [x for r in self.rows if (x := ledger.entry(r.document, r.id)) is not None]
        self._show(ledger.summarize(entries).text() + ("\n" + self.problem if self.problem else ""))
        if self.diff_newest:
            self.diff_newest = False
            self.action_diff()

    def _show(self, text: str) -> None:
        self.detail_text = text
        self.query_one("#history-detail", Static).update(Content(text))

    def _current(self) -> Any | None:
        table = self.query_one(DataTable)
        if not self.rows:
            return None
        i = min(max(table.cursor_row, 0), len(self.rows) - 1)
        return self.rows[i]

    @staticmethod
    def _add_columns(table: DataTable[Any], *labels: str) -> None:
        """The mark column ("*" on the marked row), then ``labels``. The mark column's width is
        fixed: every cell is empty when the rows are added, and an auto width would stay 0 and
        hide the mark that ``action_mark`` sets later."""
        table.add_column("", width=1)
        table.add_columns(*labels)

    @staticmethod
    def _key(row: Any) -> Hashable:
        """A row's identity (its table row key is ``str`` of it): a stored boot's id."""
        return row.id  # type: ignore[no-any-return]

    def action_mark(self) -> None:
        cur = self._current()
        if cur is None:
            return
        self.marked = None if self.marked == self._key(cur) else self._key(cur)
        table = self.query_one(DataTable)
        for r in self.rows:
            table.update_cell(str(self._key(r)), table.ordered_columns[0].key,
                              "*" if self._key(r) == self.marked else "")

    def _marked(self, cur: Any) -> Any:
        """The row marked (space) to diff ``cur`` against; None when none is, or ``cur`` is."""
        if self.marked == self._key(cur):
            return None
        return next((r for r in self.rows if self._key(r) == self.marked), None)

    def action_diff(self) -> None:
        cur = self._current()
        if cur is None:
            return
        base = self._marked(cur)
        if base is None:
            got = hdiff.last_good([(r.id, r.document) for r in self.rows], cur.document, before=cur.id)
            if got is None:
                self._show(f"#{cur.id}: no ready boot of the same model before it; mark one with space")
                return
            base = next(r for r in self.rows if r.id == got[0])
        self._show("\n".join(hdiff.render(hdiff.diff(base.document, cur.document, base_id=base.id, boot_id=cur.id))))

    def action_log(self) -> None:
        cur = self._current()
        if cur is None:
            return
        path = spool_segment(cur.document.spool)
        if path is None:
            self._show(f"#{cur.id}: its log is not in the spool (recorded by a command that keeps none, "
                       "or pruned since)")
            return
        try:
            text = tail_text(path)
        except OSError as exc:
            self._show(f"{path}: cannot read: {exc.strerror or exc}")
            return
        self._show(f"{path} (last {LOG_TAIL_LINES} lines)\n{text}")

    def action_close(self) -> None:
        self.dismiss(None)

