"""The deployment console's history view (``H``; ``d`` opens it on the newest start's diff): the
deployment's remembered starts (``kvtui.history.deployment``: each node's stored boots grouped by
start), newest first, one row per start with its nodes. ``space`` marks a start, ``d`` shows what
changed node by node between the marked start (else the last ready start before it, else the one
just before) and the start under the cursor, ``l`` the end of each node's log of that start,
``esc`` closes. The host console's ``HistoryScreen`` with other rows; it never writes the history."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from textual import work
from textual.widgets import DataTable, Static

from kvtui.history import HistoryError, open_store
from kvtui.history.deployment import (
    ROW_HEADER,
    DeploymentStart,
    deployment_starts,
    previous_good,
    render_diff,
    start_row,
)
from kvtui.history.record import spool_segment
from kvtui.ui.history.screen import HistoryScreen, tail_text

NODE_LOG_LINES = 60  # ``l``: the last lines of each node's log of the start


class DeploymentHistoryScreen(HistoryScreen):
    """See the module doc."""

    def __init__(self, name: str, nodes: Sequence[str], *, diff_newest: bool = False) -> None:
        super().__init__(name, diff_newest=diff_newest)
        self.nodes = list(nodes)
        self.starts: list[DeploymentStart] = []  # the rows (``self.rows``), typed

    def on_mount(self) -> None:
        self.query_one("#history-title", Static).update(
            f"{self.host}: starts remembered ({len(self.nodes)} nodes: {', '.join(self.nodes)})")
        super().on_mount()

    @work(exclusive=True, group="history-load", exit_on_error=False)
    async def load(self) -> None:
        def read() -> tuple[list[DeploymentStart], str | None]:
            with open_store(readonly=True) as store:
                try:
                    per_node = [store.boots(n, limit=200) for n in self.nodes]
                except HistoryError as exc:
                    return [], str(exc)
                return deployment_starts(self.nodes, per_node), store.problem

        self.starts, self.problem = await asyncio.to_thread(read)
        self.rows = list(self.starts)
        self._fill()

    def _fill(self) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        self._add_columns(table, *ROW_HEADER)
        for s in self.starts:
            table.add_row("*" if s.key == self.marked else "", *start_row(s), key=s.key)
        if not self.starts:
            self._show(self.problem or f"no boot of {self.host}'s nodes ({', '.join(self.nodes)}) in the history yet")
            return
        ready = sum(1 for s in self.starts if s.status.value == "ready")
        self._show(f"{len(self.starts)} start{'s' if len(self.starts) != 1 else ''} of {self.host} remembered, "
                   f"{ready} ready; d: what changed, node by node" + ("\n" + self.problem if self.problem else ""))
        if self.diff_newest:
            self.diff_newest = False
            self.action_diff()

    @staticmethod
    def _key(row: DeploymentStart) -> str:
        return row.key

    def _start(self) -> DeploymentStart | None:
        cur: DeploymentStart | None = self._current()
        return cur

    def action_diff(self) -> None:
        cur = self._start()
        if cur is None:
            return
        base: DeploymentStart | None = self._marked(cur)
        if base is None:
            base = previous_good(self.starts, cur)
            if base is None:
                self._show(f"start {cur.ids}: no start of {self.host} before it; mark one with space")
                return
        self._show("\n".join(render_diff(base, cur)))

    def action_log(self) -> None:
        cur = self._start()
        if cur is None:
            return
        out: list[str] = []
        for i, (name, m) in enumerate(zip(cur.nodes, cur.members, strict=True)):
            out.append(f"== node {i} ({name}) ==")
            path = spool_segment(m.document.spool) if m is not None else None
            if m is None:
                out.append("  no boot of this start")
            elif path is None:
                out.append(f"  #{m.id}: its log is not in the spool (pruned since)")
            else:
                try:
                    out.append(f"{path} (last {NODE_LOG_LINES} lines)\n{tail_text(path, NODE_LOG_LINES)}")
                except OSError as exc:
                    out.append(f"  {path}: cannot read: {exc.strerror or exc}")
        self._show("\n".join(out))


__all__ = ["DeploymentHistoryScreen"]
