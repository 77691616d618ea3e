"""``kvtui connect NAME`` on a ``[deployments.NAME]``: one pane for the whole deployment (issue 15).

Read through ``kvtui.deployment_monitor.DeploymentMonitor`` (one HostMonitor per node, the merged
boot). The pane shows, top to bottom:

* each node's connection state and how far its boot got (``node 0 · r1-a · connected · ready``);
* the GPUs grouped by node (a header per node, its bars under it: 16 bars for a 2 × 8 deployment);
* the merged boot's timeline and figures, its findings (flags that differ between nodes, …) and the
  hang diagnosis (a node that trails the phase the others reached past ``hang_seconds``);
* the merged log, each line with its node's column; ``n`` cycles a filter (all nodes, node 0, node 1, …).

Log lines are batched: the monitors' sink only queues them; a timer (``REFRESH_S``) writes what came.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, RichLog, Static

from kvtui.deployment_monitor import DeploymentMonitor, DeploymentNode
from kvtui.hosts.backend import LogStart
from kvtui.nodes import FIGURE_LABELS, DeploymentBoot, node_state
from kvtui.ui.widgets.boot import BootFigures, PhaseTimeline
from kvtui.ui.widgets.gpu import GpuBars
from kvtui.updates import GpuUpdate, LogBatch, MonitorUpdate

if TYPE_CHECKING:
    from kvtui.config import Config, HostConfig
    from kvtui.hosts.backend import HostBackend

REFRESH_S = 0.25  # how often queued log lines and the merged boot reach the screen
LOG_KEEP = 5000  # merged log lines kept for re-filtering (bounded)

BackendFactory = Callable[..., "HostBackend"]


class DeploymentPane(Vertical):
    """The deployment's one pane (see the module docstring)."""

    DEFAULT_CSS = """
    DeploymentPane { height: 1fr; }
    DeploymentPane #dep-nodes { height: auto; padding: 0 1; }
    DeploymentPane #dep-top { height: auto; max-height: 24; }
    DeploymentPane #dep-gpus { width: 1fr; height: auto; }
    DeploymentPane #dep-boot { width: 1fr; height: auto; }
    DeploymentPane .node-head { padding: 0 1; text-style: bold; }
    DeploymentPane #dep-notes { height: auto; padding: 0 1; }
    DeploymentPane #dep-log-head { height: 1; padding: 0 1; background: $boost; }
    DeploymentPane #dep-log { height: 1fr; }
    """

    def __init__(self, dm: DeploymentMonitor, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(id="deployment")
        self.dm = dm
        self.clock = clock
        self.filter: int | None = None  # a node's position, or None: every node
        self.lines: deque[_Line] = deque(maxlen=LOG_KEEP)
        self._pending: list[_Line] = []
        self._gpus: dict[int, GpuUpdate] = {}
        self._dirty = True
        self.applied = 0  # refreshes that found something new (tests)

    def compose(self) -> ComposeResult:
        yield Static(id="dep-nodes")
        with Horizontal(id="dep-top"):
            with VerticalScroll(id="dep-gpus"):
                for n in self.dm.nodes:
                    yield Static(id=f"node-head-{n.index}", classes="node-head")
                    yield GpuBars(id=f"gpus-{n.index}")
            with Vertical(id="dep-boot"):
                yield PhaseTimeline(id="dep-timeline")
                yield BootFigures(id="dep-figures")
        yield Static(id="dep-notes")
        yield Static(id="dep-log-head")
        yield RichLog(id="dep-log", max_lines=LOG_KEEP, wrap=False, markup=False)

    def on_mount(self) -> None:
        self.set_interval(REFRESH_S, self.refresh_now)
        self.refresh_now()

    # -- from the monitors ------------------------------------------------------------------------

    def on_updates(self, node: DeploymentNode, updates: Sequence[MonitorUpdate], dep: DeploymentBoot | None) -> None:
        """The deployment monitor's sink: queue, the timer draws."""
        for u in updates:
            if isinstance(u, LogBatch):
                self._pending.extend(_Line(_stamp(ln.ts), node.index, ln.seq, ln.text, ln.style) for ln in u.lines)
            elif isinstance(u, GpuUpdate):
                self._gpus[node.index] = u
        self._dirty = True

    @property
    def up_to_date(self) -> bool:
        return not self._pending and not self._dirty

    # -- drawing ----------------------------------------------------------------------------------

    def node_label(self, index: int) -> str:
        node = self.dm.nodes[index]
        return f"node {self.dm.node_rank(node)} · {node.name}"

    def refresh_now(self) -> None:
        """Draw what came since the last refresh (the timer calls it; tests may too)."""
        if not self._dirty and not self._pending:
            return
        self._dirty = False
        self.applied += 1
        dep = self.dm.merged()
        now = datetime.fromtimestamp(self.clock()).astimezone()
        self.query_one("#dep-nodes", Static).update(self._nodes_text(dep))
        for n in self.dm.nodes:
            self.query_one(f"#node-head-{n.index}", Static).update(self._node_head(n, dep))
            g = self._gpus.get(n.index)
            if g is not None:
                self.query_one(f"#gpus-{n.index}", GpuBars).show(g.samples, g.foreign)
        self.query_one(PhaseTimeline).show(dep.boot if any(nb.boot for nb in dep.nodes) else None, now)
        self.query_one(BootFigures).show(dep.boot if any(nb.boot for nb in dep.nodes) else None)
        self.query_one("#dep-notes", Static).update(self._notes(dep, now))
        self.query_one("#dep-log-head", Static).update(self._log_head())
        if self._pending:
            fresh, self._pending = sorted(self._pending), []  # the nodes' lines of one refresh in time order
            self.lines.extend(fresh)
            log = self.query_one(RichLog)
            for line in fresh:
                if self.filter is None or line.node == self.filter:
                    log.write(self._log_line(line))

    def _nodes_text(self, dep: DeploymentBoot) -> Text:
        t = Text()
        t.append(f"{self.dm.name}", style="bold")
        t.append(f" · deployment of {len(self.dm.nodes)} nodes · {dep.boot.status.value}")
        ranks = len(dep.boot.ranks)
        if ranks:
            t.append(f" · {ranks} ranks")
        return t

    def _node_head(self, node: DeploymentNode, dep: DeploymentBoot) -> Text:
        st = node.status
        conn = st.state.value if st is not None else "connecting"
        nb = next((b for b in dep.nodes if b.name == node.name), None)
        where = "no boot yet" if nb is None or nb.boot is None else node_state(dep, nb)
        t = Text(f"{self.node_label(node.index)} · ")
        t.append(conn, style="green" if conn == "connected" else "yellow")
        t.append(f" · {where}")
        return t

    def _notes(self, dep: DeploymentBoot, now: datetime) -> Text:
        t = Text()
        hang = self.dm.hang(now=datetime.now().astimezone())
        if hang is not None:
            t.append("hang: ", style="bold red")
            t.append(hang.summary + "\n")
            for c in hang.causes:
                t.append(f"  - {c}\n")
        for f in dep.findings:
            t.append("finding: ", style="bold yellow")
            t.append(f"{f}\n")
        set_by = []
        for key, label in FIGURE_LABELS:
            who = dep.setter(key)
            if dep.boot.facts.get(key) is not None and who is not None:
                set_by.append(f"{label} by node {who.node_rank}")
        if set_by:
            t.append("set by: " + ", ".join(set_by) + "\n", style="dim")
        if dep.failed_node is not None:
            t.append(f"failed first on {dep.node(dep.failed_node).label()}\n", style="bold red")
        if not dep.findings and hang is None:
            t.append("no findings: the nodes agree on their flags and rendezvous", style="dim")
        t.rstrip()
        return t

    def _log_head(self) -> Text:
        which = "all nodes" if self.filter is None else self.node_label(self.filter)
        return Text(f"log · {which} · n: next node filter")

    def _log_line(self, line: _Line) -> Text:
        index, text, style = line.node, line.text, line.style
        col = f"n{self.dm.node_rank(self.dm.nodes[index])} "
        colour = {"error": "red", "warning": "yellow", "phase": "cyan", "marker": "bold"}.get(style, "")
        out = Text(col, style="bold magenta" if index % 2 else "bold blue")
        out.append(text, style=colour)
        return out

    def cycle_filter(self) -> None:
        """All nodes → node 0 → node 1 → … → all nodes; the log is rewritten from what is kept."""
        n = len(self.dm.nodes)
        self.filter = 0 if self.filter is None else (None if self.filter + 1 >= n else self.filter + 1)
        self.rewrite_log()
        self.query_one("#dep-log-head", Static).update(self._log_head())


    def rewrite_log(self) -> None:
        """The log rewritten from the lines kept, in time order (the nodes' batches arrive in any
        order; within a refresh they are sorted, across refreshes only here)."""
        log = self.query_one(RichLog)
        log.clear()
        for line in sorted(self.lines):
            if self.filter is None or line.node == self.filter:
                log.write(self._log_line(line))


class _Line(NamedTuple):
    """A merged-log line: ordered by its stamp, then node, then its place in the node's log."""

    ts: float
    node: int
    seq: int
    text: str
    style: str


def _stamp(ts: datetime | None) -> float:
    return ts.timestamp() if ts is not None else 0.0


class DeploymentApp(App[int]):
    """The console for one deployment: its pane, ``n`` (node filter) and ``q``."""

    TITLE = "kvtui"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "node_filter", "node filter"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, name: str, nodes: Sequence[tuple[str, HostConfig]], *, backend_factory: BackendFactory,
                 hang_seconds: float, clock: Callable[[], float] | None = None) -> None:
        super().__init__()
        from kvtui.monitor import HostMonitor

        self.clock = clock or time.time
        dnodes = []
        for node_name, host in nodes:
            backend = backend_factory(node_name, host, clock=clock) if clock else backend_factory(node_name, host)
            monitor = HostMonitor(node_name, backend, host=host, start=LogStart.CURRENT_BOOT, log_window=LOG_KEEP,
                                  clock=self.clock)
            dnodes.append(DeploymentNode(node_name, host, monitor))
        self.dm = DeploymentMonitor(name, dnodes, bound_s=hang_seconds)
        self.sub_title = f"{name} ({len(dnodes)} nodes)"

    @property
    def pane(self) -> DeploymentPane:
        return self.query_one(DeploymentPane)

    def compose(self) -> ComposeResult:
        yield DeploymentPane(self.dm, clock=self.clock)
        yield Footer()

    def on_mount(self) -> None:
        self.dm.start(self.pane.on_updates)

    async def on_unmount(self) -> None:
        await self.dm.close()

    def action_node_filter(self) -> None:
        self.pane.cycle_filter()


def deployment_app(config: Config, name: str, backend_factory: BackendFactory,
                   clock: Callable[[], float] | None = None) -> DeploymentApp:
    """The console for ``[deployments.NAME]``."""
    dep = config.deployment(name)
    assert dep is not None
    return DeploymentApp(name, config.node_hosts(name), backend_factory=backend_factory,
                         hang_seconds=dep.hang_seconds, clock=clock)


__all__ = ["DeploymentApp", "DeploymentPane", "deployment_app"]
