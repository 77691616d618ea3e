"""The console's pane for a ``[deployments.NAME]`` (issue 15): ``kvtui connect NAME`` opens it in
``KvtuiApp`` (``kvtui.ui.deployment_screen`` holds its keys).

Read through ``kvtui.monitor.deployment.DeploymentMonitor`` (one HostMonitor per node, the merged
boot). Top to bottom:

* the deployment's state, then one line per node: its connection, how far its boot got, and its
  unit's (or pod's) state as the node's host says (probed every ``PROBE_EVERY_S``);
* the GPUs grouped by node, the nodes side by side (16 bars for 2 × 8) — or, ``g``, the GPU
  memory over time (``GpuHistoryPlot``, the host console's plot, with the boot's phase bands) of
  the node the log's filter shows (its busiest GPU, as on a host), or of all nodes (the sum of
  every GPU's memory) — and the calculator
  calibrated from the merged boot (P = min over every rank of every node) — a column on the right,
  opened zoomed on a narrow terminal (``c``);
* the merged boot's timeline and figures;
* the hang diagnosis — the log's evidence plus each node's unit state and NCCL_*/GLOO_*
  environment, as ``kvtui wait NAME`` gives it — the findings (flags that differ between
  nodes, …) and which node set each figure;
* the progress of a change of every node (``changes``: the host console's ``ChangeController``);
* the merged log, each line with its node's column; ``#`` cycles a filter (all nodes, node 0, …);
  ``/`` searches the lines it keeps (``LOG_KEEP``, smart case, the host console's find bar and
  ``TextQuery``; ``n``/``N`` the next/previous match, within the node filter).

Log lines are batched: the monitors' sink only queues them; a timer (``REFRESH_S``) writes what came.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import RichLog, Static

from kvtui.boot.deployment import FIGURE_LABELS, DeploymentBoot, NodeObservation, node_state
from kvtui.config import DEFAULT_STALL_SECONDS
from kvtui.fmt import duration as fmt_duration
from kvtui.gpu import GpuProcess
from kvtui.hosts.backend import BackendError
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode, NodeStalls, probe_nodes
from kvtui.ui.calc.panel import CalculatorPanel
from kvtui.ui.changes.action import ActionBanner
from kvtui.ui.changes.controller import ChangeController, ChangeNode
from kvtui.ui.gpu.widgets import GpuBars, GpuHistoryPlot, ProcessTable, boot_origin, phase_bands
from kvtui.ui.log.model import TextQuery
from kvtui.ui.log.panel import FindBar
from kvtui.ui.widgets.boot import BootFigures, PhaseTimeline
from kvtui.updates import GpuUpdate, LogBatch, MonitorUpdate

if TYPE_CHECKING:
    from kvtui.boot import Boot

REFRESH_S = 0.25  # how often queued log lines and the merged boot reach the screen
LOG_KEEP = 5000  # merged log lines kept for re-filtering (bounded)
PROBE_EVERY_S = 15.0  # how often each node's unit/pod state and environment are asked for
PROCESSES_EVERY_S = 2.0  # how often the shown node's GPU processes are asked for while ``p`` shows them
STALL_EVERY_S = 1.0  # how often the nodes' stall detectors are asked (a silent node sends nothing)


class CalcColumn(Vertical):
    """The calculator's panel (``c`` opens it zoomed where the layout leaves it out)."""

    ALLOW_MAXIMIZE = True


class DeploymentPane(Vertical):
    """The deployment's one pane (see the module docstring)."""

    SCOPED_CSS = False  # the screen's size classes (-narrow, -short) reach these rules
    DEFAULT_CSS = """
    DeploymentPane { height: 1fr; }
    DeploymentPane #dep-nodes { height: auto; padding: 0 1; }
    DeploymentPane #dep-top { height: auto; }
    DeploymentPane #dep-gpus { width: 1fr; height: auto; }
    DeploymentPane .dep-node { width: 1fr; height: auto; }
    DeploymentPane .node-head { padding: 0 1; text-style: bold; height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    DeploymentPane #dep-plots { display: none; width: 1fr; height: 9; }
    DeploymentPane.-plot #dep-plots { display: block; }
    DeploymentPane.-plot #dep-gpus { display: none; }
    DeploymentPane #dep-plots GpuHistoryPlot { display: none; min-height: 4; }
    DeploymentPane #dep-plots GpuHistoryPlot.-shown { display: block; }
    DeploymentPane #dep-procs { display: none; width: 1fr; height: 10; }
    DeploymentPane.-procs #dep-procs { display: block; }
    DeploymentPane.-procs #dep-gpus { display: none; }
    DeploymentPane.-procs #dep-plots { display: none; }
    DeploymentPane #dep-calc { width: 46; height: auto; max-height: 14; border: round $panel-lighten-2;
                               border-title-color: $text-muted; }
    DeploymentPane #dep-boot { height: auto; }
    DeploymentPane #dep-boot > * { width: 1fr; }
    DeploymentPane #dep-notes { height: auto; max-height: 8; padding: 0 1; }
    DeploymentPane #dep-stall { display: none; height: auto; max-height: 4; padding: 0 1;
                                background: $warning-muted; border-left: thick $warning; }
    DeploymentPane #dep-stall.-stalled { display: block; }
    DeploymentPane #dep-log-head { height: 1; padding: 0 1; background: $boost; }
    DeploymentPane #dep-log { height: 1fr; min-height: 3; }
    DeploymentPane FindBar { dock: none; }
    Screen.-narrow DeploymentPane #dep-calc { display: none; }
    Screen.-narrow DeploymentPane #dep-calc.-maximized { display: block; }
    Screen.-short DeploymentPane #dep-notes { max-height: 3; }
    Screen.-short DeploymentPane #dep-stall { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, dm: DeploymentMonitor, *, clock: Callable[[], float] = time.time,
                 graph_margin_gib: float | None = None, readonly: bool = False,
                 stall_seconds: float = DEFAULT_STALL_SECONDS) -> None:
        super().__init__(id="deployment")
        self.dm = dm
        self.clock = clock
        self.graph_margin_gib = graph_margin_gib
        self.readonly = readonly
        self.filter: int | None = None  # a node's position, or None: every node
        self.lines: deque[_Line] = deque(maxlen=LOG_KEEP)
        self._pending: list[_Line] = []
        self._gpus: dict[int, GpuUpdate] = {}
        self._dirty = True
        self.applied = 0  # refreshes that found something new (tests)
        self.probed: dict[int, NodeObservation] = {}  # by node rank: the last probe's answers
        self.probes = 0  # probes finished (tests)
        self.changes = ChangeController(self, self, dm.name, hang_s=dm.bound_s)  # a / u / R / O / ctrl+x on every node
        self._calibrated: tuple[object, ...] | None = None
        self.shown: deque[_Line] = deque(maxlen=LOG_KEEP)  # the lines the log shows, in its order
        self.search: TextQuery | None = None  # ``/``: the merged log's search
        self.match: _Line | None = None  # the match ``n``/``N`` went to (one of ``shown``)
        self.search_note = ""  # what the last search step found ("match 2 of 5", "no older match …")
        self.stalls = NodeStalls()  # per node: no progress for a while ([ui] stall_seconds)
        self.stall_seconds = stall_seconds
        self.stall_text = ""  # what the stall notice says (empty: hidden)
        self.compact = False  # a short terminal (``set_compact``)
        self.polled_processes = 0  # process tables filled from the node's host (tests)

    def compose(self) -> ComposeResult:
        yield Static(id="dep-nodes")
        with Horizontal(id="dep-top"):
            with Horizontal(id="dep-gpus"):
                for n in self.dm.nodes:
                    with Vertical(classes="dep-node"):
                        yield Static(id=f"node-head-{n.index}", classes="node-head")
                        yield GpuBars(id=f"gpus-{n.index}")
            with Vertical(id="dep-plots"):
                yield Static(id="dep-plot-head", classes="node-head")
                yield GpuHistoryPlot(id="plot-all")
                for n in self.dm.nodes:
                    yield GpuHistoryPlot(id=f"plot-{n.index}")
            with Vertical(id="dep-procs"):
                yield Static(id="dep-procs-head", classes="node-head")
                yield ProcessTable(id="dep-proc-table", classes="-shown")
            with CalcColumn(id="dep-calc") as calc:
                calc.border_title = "Calculator · all ranks"
                yield CalculatorPanel(graph_margin_gib=self.graph_margin_gib)
        with Horizontal(id="dep-boot"):
            yield PhaseTimeline(id="dep-timeline")
            yield BootFigures(id="dep-figures")
        yield ActionBanner()
        yield Static(id="dep-stall")
        yield Static(id="dep-notes")
        yield Static(id="dep-log-head")
        yield RichLog(id="dep-log", max_lines=LOG_KEEP, wrap=False, markup=False)
        yield FindBar()

    def on_mount(self) -> None:
        self.set_interval(REFRESH_S, self.refresh_now)
        self.set_interval(PROBE_EVERY_S, self.probe)
        self.set_interval(STALL_EVERY_S, self.check_stalls)
        self.refresh_now()
        self._show_plot()
        self.call_after_refresh(self.probe)

    @property
    def busy(self) -> str | None:
        """The change running on every node ("an apply", …), else None."""
        return self.changes.busy

    @property
    def boot(self) -> Boot | None:
        return self.dm.dep.boot if self.dm.dep is not None else None

    def change_nodes(self) -> list[ChangeNode]:
        """Every node of a change (``ChangeSite``), node 0 first, with its known boots."""
        return [ChangeNode(n.name, n.host, n.monitor.backend, list(n.monitor.tracker.boots)) for n in self.dm.nodes]

    @property
    def calculator(self) -> CalculatorPanel:
        return self.query_one(CalculatorPanel)

    @property
    def action_banner(self) -> ActionBanner:
        return self.query_one(ActionBanner)

    def set_compact(self, compact: bool) -> None:
        """A short terminal: the timeline and the figures say it in a few lines (and the stall
        notice of several silent nodes in one)."""
        was, self.compact = self.compact, compact
        self.query_one(PhaseTimeline).set_compact(compact)
        self.query_one(BootFigures).set_compact(compact)
        if was != compact and self.stall_text:
            self.stall_text = ""  # redrawn in the new form
            self.check_stalls()

    # -- from the monitors ------------------------------------------------------------------------

    def on_updates(self, node: DeploymentNode, updates: Sequence[MonitorUpdate], dep: DeploymentBoot | None) -> None:
        """The deployment monitor's sink: queue, the timer draws."""
        self.stalls.feed(node.name, updates, self.clock())
        for u in updates:
            if isinstance(u, LogBatch):
                self._pending.extend(_Line(_stamp(ln.ts), node.index, ln.seq, ln.text, ln.style) for ln in u.lines)
            elif isinstance(u, GpuUpdate):
                self._gpus[node.index] = u
                self._plot_point(node, u)
        self._dirty = True

    def _plot_point(self, node: DeploymentNode, u: GpuUpdate) -> None:
        """The node's plot (its busiest GPU) and, once every node has a fresh reading, the sum of
        every node's GPUs (the history is data: kept while the plots are hidden)."""
        if not self.is_mounted:
            return
        self.query_one(f"#plot-{node.index}", GpuHistoryPlot).add(u.samples)
        fresh = [s for s in u.samples if not s.stale]
        if not fresh or len(self._gpus) < len(self.dm.nodes):
            return
        every = [s for g in self._gpus.values() for s in g.samples]
        if any(s.stale for s in every):
            return
        self.query_one("#plot-all", GpuHistoryPlot).add_point(
            max(s.ts for s in fresh), sum(s.used_gib for s in every), sum(s.total_gib for s in every))

    @property
    def plot_shown(self) -> bool:
        return self.has_class("-plot")

    def toggle_plot(self) -> bool:
        """``g``: the GPU bars, or the plot of what the log's node filter shows."""
        if self.processes_shown:
            self.toggle_processes()
        self.set_class(not self.plot_shown, "-plot")
        self._show_plot()
        return self.plot_shown

    # -- the GPU processes of a node (``p``) ------------------------------------------------------

    @property
    def processes_shown(self) -> bool:
        return self.has_class("-procs")

    def processes_node(self) -> DeploymentNode:
        """The node whose processes ``p`` shows: the node the log's filter shows, else node 0."""
        return self.dm.nodes[self.filter if self.filter is not None else 0]

    def toggle_processes(self) -> bool:
        """``p``: in place of the bars (or the plot), the host console's process table — per-process
        GPU memory on the shown node's GPUs, the server's own processes marked — of the node the
        log's filter shows (all nodes shown: node 0; ``#`` picks another), asked every
        ``PROCESSES_EVERY_S`` while shown."""
        shown = not self.processes_shown
        if shown and self.plot_shown:
            self.set_class(False, "-plot")
            self._show_plot()
        self.set_class(shown, "-procs")
        if shown:
            self._processes_shown_node()
        else:
            self.workers.cancel_group(self, "dep-processes")
        return shown

    def _processes_shown_node(self) -> None:
        node = self.processes_node()
        other = "" if self.filter is not None else " · #: another node"
        self.query_one("#dep-procs-head", Static).update(
            Text(f"GPU processes · {self.node_label(node.index)}{other} · p: bars"))
        self.query_one(ProcessTable).show(self._known_processes(node), set())
        self.poll_processes()

    def _known_processes(self, node: DeploymentNode) -> list[GpuProcess]:
        """The processes the node's last GPU reading listed (shown before the first poll answers)."""
        g = self._gpus.get(node.index)
        out: list[GpuProcess] = []
        for s in g.samples if g is not None else ():
            out.extend(p if p.gpu_index is not None else GpuProcess(p.pid, p.used_mib, s.index, p.gpu_uuid, p.name)
                       for p in s.processes)
        return out

    @work(exclusive=True, group="dep-processes", exit_on_error=False, description="deployment GPU processes")
    async def poll_processes(self) -> None:
        while self.processes_shown:
            node = self.processes_node()
            backend = node.monitor.backend
            try:
                processes = await backend.gpu_processes()
                pids = await backend.server_pids()
            except (BackendError, OSError) as exc:
                self.notify(str(exc), title=f"GPU processes · {node.name}", severity="warning")
                return
            if node is not self.processes_node() or not self.processes_shown:
                continue  # the filter moved on meanwhile: ask the node shown now
            g = self._gpus.get(node.index)
            gpus = {s.index for s in g.samples} if g is not None else set()
            self.query_one(ProcessTable).show(
                [p for p in processes if p.gpu_index is None or not gpus or p.gpu_index in gpus], pids)
            self.polled_processes += 1
            await asyncio.sleep(PROCESSES_EVERY_S)

    def shown_plot(self) -> GpuHistoryPlot:
        """The plot of the node the filter shows, or of all nodes."""
        return self.query_one("#plot-all" if self.filter is None else f"#plot-{self.filter}", GpuHistoryPlot)

    def _show_plot(self) -> None:
        shown = self.shown_plot()
        for plot in self.query(GpuHistoryPlot):
            plot.set_class(plot is shown, "-shown")
        if self.filter is None:
            count = sum(len(g.samples) for g in self._gpus.values())
            which = f"all nodes · the sum of their {count} GPUs" if count else "all nodes · their GPUs' sum"
        else:
            which = f"{self.node_label(self.filter)} · its busiest GPU"
        self.query_one("#dep-plot-head", Static).update(Text(f"GPU memory · {which} · g: bars"))
        if self.plot_shown:
            self._plot_bands()
            self.call_after_refresh(shown.redraw_if_needed)

    def _plot_bands(self) -> None:
        """The merged boot's phases on the sum's plot, each node's own on its plot."""
        dep = self.dm.dep
        if dep is None:
            return
        merged = dep.boot if any(nb.boot for nb in dep.nodes) else None
        self.query_one("#plot-all", GpuHistoryPlot).set_bands(phase_bands([merged] if merged else []),
                                                               boot_origin(merged))
        for nb in dep.nodes:
            node = next((n for n in self.dm.nodes if n.name == nb.name), None)
            if node is not None:
                self.query_one(f"#plot-{node.index}", GpuHistoryPlot).set_bands(
                    phase_bands([nb.boot] if nb.boot else []), boot_origin(nb.boot))

    def check_stalls(self) -> str:
        """The stall notice: each node still starting that made no progress (a line that is not a
        known wait line, its GPU memory moving) for ``stall_seconds`` — ``node 1 (r1-b): no progress
        for 4m 00s — it keeps printing '…' (4×, nothing else): …``; hidden when none is. Returns
        what it says."""
        dep = self.dm.dep
        stalled = [] if dep is None else [(nb, st) for nb, st in self.stalls.stalls(dep, self.clock(),
                                                                                    self.stall_seconds)
                                          if st is not None]
        text = "\n".join(f"{nb.label()}: {st.progress_text()}" for nb, st in stalled)
        if text != self.stall_text and self.is_mounted:
            self.stall_text = text
            notice = self.query_one("#dep-stall", Static)
            notice.set_class(bool(text), "-stalled")
            out = Text()
            if self.compact and len(stalled) > 1 and all(st.kind is None for _, st in stalled):
                # a short terminal, every node silent: one line
                out.append("⏸ no progress: ", style="bold")
                out.append(", ".join(f"{nb.label()} {fmt_duration(st.seconds)}" for nb, st in stalled))
                out.append(f" — {stalled[0][1].seen()}")
            for i, (nb, st) in enumerate(stalled if not out else ()):
                if i:
                    out.append("\n")
                out.append("⏸ ", style="bold")
                out.append(f"{nb.label()}", style="bold")
                out.append(f": {st.progress_text()}")
            notice.update(out)
        return text

    @property
    def up_to_date(self) -> bool:
        return not self._pending and not self._dirty

    # -- the nodes' own state (their units or pods) -----------------------------------------------

    @work(exclusive=True, group="dep-probe", exit_on_error=False, description="deployment probe")
    async def probe(self) -> None:
        """Each node's unit (or pod) state and environment, asked of its host (``probe_nodes``,
        as ``kvtui wait NAME`` does): shown per node and used by the hang diagnosis."""
        dep = self.dm.merged()
        self.probed = await probe_nodes(self.dm.nodes, dep)
        self.probes += 1
        self._dirty = True

    # -- drawing ----------------------------------------------------------------------------------

    def node_label(self, index: int) -> str:
        node = self.dm.nodes[index]
        return f"node {self.dm.node_rank(node)} · {node.name}"

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock()).astimezone()

    def refresh_now(self) -> None:
        """Draw what came since the last refresh (the timer calls it; tests may too)."""
        if not self._dirty and not self._pending:
            return
        self._dirty = False
        self.applied += 1
        dep = self.dm.merged()
        now = self.now()
        self.query_one("#dep-nodes", Static).update(self._nodes_text(dep))
        for n in self.dm.nodes:
            self.query_one(f"#node-head-{n.index}", Static).update(self._node_head(n))
            g = self._gpus.get(n.index)
            if g is not None:
                self.query_one(f"#gpus-{n.index}", GpuBars).show(g.samples, g.foreign)
        boot = dep.boot if any(nb.boot for nb in dep.nodes) else None
        self.query_one(PhaseTimeline).show(boot, now)
        self.query_one(BootFigures).show(boot)
        self._calibrate(boot)
        if self.plot_shown:
            self._plot_bands()
        self.query_one("#dep-notes", Static).update(self._notes(dep, now))
        self.query_one("#dep-log-head", Static).update(self._log_head())
        if self._pending:
            fresh, self._pending = sorted(self._pending), []  # the nodes' lines of one refresh in time order
            self.lines.extend(fresh)
            log = self.query_one(RichLog)
            for line in fresh:
                if self.filter is None or line.node == self.filter:
                    self._write(log, line)

    def _calibrate(self, boot: Boot | None) -> None:
        """The calculator follows the merged boot: its figures are the minimum over every rank of
        every node (free memory) and the maximum (graph memory), as ``calc --host NAME``."""
        if boot is None:
            return
        key = (boot.engine, boot.status, repr(boot.metrics))  # the merged boot is rebuilt each time
        if key == self._calibrated:
            return
        self._calibrated = key
        self.calculator.set_boot(boot, [boot])

    def _nodes_text(self, dep: DeploymentBoot) -> Text:
        t = Text()
        t.append(f"{self.dm.name}", style="bold")
        t.append(f" · deployment of {len(self.dm.nodes)} nodes · {dep.boot.status.value}")
        ranks = len(dep.boot.ranks)
        if ranks:
            t.append(f" · {ranks} ranks")
        if self.readonly:
            t.append(" · readonly", style="yellow")
        for n in self.dm.nodes:
            t.append("\n")
            t.append_text(self._node_line(n, dep))
        return t

    def _conn(self, node: DeploymentNode) -> str:
        st = node.status
        return st.state.value if st is not None else "connecting"

    def _node_line(self, node: DeploymentNode, dep: DeploymentBoot) -> Text:
        """``node 1 · r1-b · connected · up (…) · unit active``."""
        nb = next((b for b in dep.nodes if b.name == node.name), None)
        where = "no boot yet" if nb is None or (nb.boot is None and nb.earlier is None) else node_state(dep, nb)
        conn = self._conn(node)
        t = Text(f"{self.node_label(node.index)} · ")
        t.append(conn, style="green" if conn == "connected" else "yellow")
        t.append(f" · {where}")
        unit = self._unit_text(node)
        if unit:
            t.append(f" · {unit}", style="dim")
        return t

    def _unit_text(self, node: DeploymentNode) -> str:
        """What the node's host says of its server: ``unit active``, ``pod Pending: …``, or for a
        simulated host ``simulated``; empty before the first probe answered."""
        if node.host.demo:
            return "simulated unit"
        obs = self.probed.get(self.dm.node_rank(node))
        if obs is None or obs.unit_state is None:
            return ""
        return f"{obs.what} {obs.unit_state}"

    def _node_head(self, node: DeploymentNode) -> Text:
        conn = self._conn(node)
        t = Text(f"{self.node_label(node.index)} · ")
        t.append(conn, style="green" if conn == "connected" else "yellow")
        pod = self._pod_text(node)
        if pod:
            t.append(f" · {pod}", style="dim" if pod.endswith(": Running, ready") else "yellow")
        return t

    @staticmethod
    def _pod_text(node: DeploymentNode) -> str:
        """A kube node's pod state as its backend last read it (every few seconds, with the
        log): ``pod r1-0-1: Running, not ready (readiness probe)``, ``pod r1-0-1: CrashLoopBackOff,
        3 restarts, last: OOMKilled …`` (empty for other hosts, or before the first read)."""
        st = node.status
        if node.host.kind != "kube" or st is None or not st.detail or not st.detail.startswith("pod "):
            return ""
        text = st.detail.split("; ", 1)[0]
        return text if len(text) <= 200 else text[:199] + "…"  # the head ellipsizes at its width

    def _notes(self, dep: DeploymentBoot, now: datetime) -> Text:
        t = Text()
        pending = self.dm.backlog_pending()  # no hang while one is: ``DeploymentMonitor.hang``'s rule
        hang = self.dm.hang(self.probed or None, now=now)
        if pending:
            t.append("reading the log so far of " + ", ".join(self.node_label(n.index) for n in pending)
                     + ": no hang is named before every node's is read\n", style="dim")
        for note in self.dm.backlog_notes():
            t.append(f"note: {note}\n", style="dim")
        if hang is not None:
            t.append("hang: ", style="bold red")
            t.append(hang.summary + "\n")
            for c in hang.causes:
                t.append(f"  - {c}\n")
        for f in dep.findings:
            t.append("finding: ", style="bold yellow")
            t.append(f"{f}\n")
        by_node: dict[int, list[str]] = {}
        for key, label in FIGURE_LABELS:
            who = dep.setter(key)
            if dep.boot.facts.get(key) is not None and who is not None:
                by_node.setdefault(who.node_rank, []).append(label)
        if len(by_node) == 1:
            (rank,) = by_node
            t.append(f"set by: every figure by node {rank} (the tightest of all ranks)\n", style="dim")
        elif by_node:
            t.append("set by: " + " · ".join(f"node {r}: {', '.join(labels)}" for r, labels in sorted(by_node.items()))
                     + "\n", style="dim")
        if dep.failed_node is not None:
            t.append(f"failed first on {dep.node(dep.failed_node).label()}\n", style="bold red")
        if not dep.findings and hang is None:
            t.append("no findings: the nodes agree on their flags and rendezvous", style="dim")
        t.rstrip()
        return t

    def _log_head(self) -> Text:
        which = "all nodes" if self.filter is None else self.node_label(self.filter)
        t = Text(f"log · {which}")
        if self.search is None:
            t.append(" · #: node filter · /: search", style="dim")
            return t
        t.append(f" · /{_short(self.search.text)}", style="bold")
        if self.search_note:
            t.append(f" {self.search_note}")
        t.append(" · n/N: next/previous · #: node filter", style="dim")
        return t

    def _log_line(self, line: _Line) -> Text:
        index, text, style = line.node, line.text, line.style
        col = f"n{self.dm.node_rank(self.dm.nodes[index])} "
        colour = {"error": "red", "warning": "yellow", "phase": "cyan", "marker": "bold"}.get(style, "")
        out = Text(col, style="bold magenta" if index % 2 else "bold blue")
        body = Text(text, style=colour)
        if self.search is not None:
            body.highlight_regex(self.search.compiled(), style="reverse")
        out.append_text(body)
        return out

    def _write(self, log: RichLog, line: _Line) -> None:
        self.shown.append(line)  # bounded as the log is (LOG_KEEP): the oldest go from both
        log.write(self._log_line(line))

    def cycle_filter(self) -> None:
        """All nodes → node 0 → node 1 → … → all nodes; the log is rewritten from what is kept
        (a search stays: its matches are those of the lines shown)."""
        n = len(self.dm.nodes)
        self.filter = 0 if self.filter is None else (None if self.filter + 1 >= n else self.filter + 1)
        self.rewrite_log()
        if self.search is not None:
            self.search_note = self._count_note()
        self.query_one("#dep-log-head", Static).update(self._log_head())
        self._show_plot()  # the plot follows the filter
        if self.processes_shown:
            self._processes_shown_node()  # and so does the process table

    def rewrite_log(self) -> None:
        """The log rewritten from the lines kept, in time order (the nodes' batches arrive in any
        order; within a refresh they are sorted, across refreshes only here)."""
        log = self.query_one(RichLog)
        log.clear()
        log.auto_scroll = self.search is None  # a search stays where its match is
        self.shown.clear()
        for line in sorted(self.lines):
            if self.filter is None or line.node == self.filter:
                self._write(log, line)
        if self.match is not None and self._index(self.match) is None:
            self.match = None  # filtered out
        if self.match is not None:
            self._show_match()

    # -- search (``/``, ``n``, ``N``) ---------------------------------------------------------------

    def open_search(self) -> None:
        self.query_one(FindBar).open("search", self.search.text if self.search is not None else "")

    @on(FindBar.Submitted)
    def _find_submitted(self, event: FindBar.Submitted) -> None:
        event.stop()
        self.screen.set_focus(self.query_one(RichLog))
        self.set_search(event.value)

    @on(FindBar.Closed)
    def _find_closed(self, event: FindBar.Closed) -> None:
        event.stop()
        self.screen.set_focus(self.query_one(RichLog))
        self.screen.refresh_bindings()

    def set_search(self, text: str) -> None:
        """Search the lines shown (empty: no search; the log follows its newest lines again); the
        newest match is gone to."""
        self.search = TextQuery(text) if text else None
        self.match = None
        self.search_note = ""
        self.rewrite_log()  # the matches highlighted
        log = self.query_one(RichLog)
        if self.search is None:
            log.auto_scroll = True
            log.scroll_end(animate=False)
        else:
            self.find(forward=False)
        self.query_one("#dep-log-head", Static).update(self._log_head())
        self.screen.refresh_bindings()

    def _index(self, line: _Line) -> int | None:
        return next((i for i, x in enumerate(self.shown) if x is line), None)

    def _count_note(self) -> str:
        """``match 2 of 5`` (the current match), ``5 matches``, or ``no match`` (on the node shown)."""
        if self.search is None:
            return ""
        pattern = self.search.compiled()
        hits = [i for i, x in enumerate(self.shown) if pattern.search(x.text)]
        total = len(hits)
        cur = self._index(self.match) if self.match is not None else None
        if cur is not None and cur in hits:
            return f"match {hits.index(cur) + 1} of {total}"
        if not total:
            return "no match" + ("" if self.filter is None else f" on {self.node_label(self.filter)}")
        return f"{total} matches" if total != 1 else "1 match"

    def find(self, forward: bool) -> bool:
        """Go to the next (``n``, newer) or previous (``N``, older) match among the lines shown
        (from the bottom when there is no current match); False when there is none."""
        if self.search is None:
            return False
        pattern = self.search.compiled()
        lines = list(self.shown)
        cur = self._index(self.match) if self.match is not None else None
        if cur is None:  # from the bottom: nothing newer
            rng = range(0) if forward else range(len(lines) - 1, -1, -1)
        else:
            rng = range(cur + 1, len(lines)) if forward else range(cur - 1, -1, -1)
        hits = [i for i, x in enumerate(lines) if pattern.search(x.text)]
        for i in rng:
            if pattern.search(lines[i].text):
                self.match = lines[i]
                self.search_note = f"match {hits.index(i) + 1} of {len(hits)}"
                self._show_match()
                self.query_one("#dep-log-head", Static).update(self._log_head())
                return True
        if not hits:
            self.search_note = self._count_note()
        else:
            self.search_note = f"no {'newer' if forward else 'older'} match ({len(hits)} in all)"
        self.query_one("#dep-log-head", Static).update(self._log_head())
        return False

    def _show_match(self) -> None:
        """The current match in the middle of the log; the log stops following meanwhile."""
        idx = self._index(self.match) if self.match is not None else None
        if idx is None:
            return
        log = self.query_one(RichLog)
        log.auto_scroll = False

        def scroll() -> None:
            log.scroll_to(y=max(0, idx - log.scrollable_content_region.height // 2), animate=False, immediate=True)
        scroll()
        self.call_after_refresh(scroll)  # once a rewritten log has its new size


class _Line(NamedTuple):
    """A merged-log line: ordered by its stamp, then node, then its place in the node's log."""

    ts: float
    node: int
    seq: int
    text: str
    style: str


def _short(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _stamp(ts: datetime | None) -> float:
    return ts.timestamp() if ts is not None else 0.0


__all__ = ["LOG_KEEP", "REFRESH_S", "DeploymentPane"]
