"""A ``[deployments.NAME]`` of several nodes in the console: a group of node panes (issue 23).

``kvtui connect NAME`` opens one ``HostPane`` per node (a tab each, in node-rank order: each node
has the whole host console — its log, GPUs, probe, serving row); ``DeploymentGroup`` ties them:

* ``DeploymentStrip``, on each node pane under its header: the merged boot's state per node
  (``node 0 · r1-a: ready · node 1 · r1-b: waiting …``) and the deployment's notes — a node whose
  backlog is still read, the hang diagnosis (with what a probe of each node's unit found, every
  ``PROBE_EVERY_S``), the findings (flags that differ between nodes), the node that failed first.
  It reads a ``DeploymentMonitor`` over the panes' own ``HostMonitor``s, never started: the panes
  feed it their updates (``feed``), it is drawn on the screen's 1 s tick and ``REFRESH_S`` after a
  node's log or boot changed;
* one ``ChangeController`` for the group (every node pane's ``changes``): ``a``/``R``/``u``/``O``/
  ``ctrl+x`` on any node pane act on every node as one; its ``ChangeSite`` is ``GroupSite``.

A deployment of one node is its host's pane alone (no group, no strip).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from kvtui.boot import BootStatus
from kvtui.boot.deployment import node_state
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode, probe_nodes
from kvtui.ui import formatting as fmt
from kvtui.ui.changes.controller import ChangeController, ChangeNode
from kvtui.ui.screens import ConfirmScreen
from kvtui.ui.widgets.banner import expand_key
from kvtui.updates import BootState, ConnUpdate, LogBatch, MonitorUpdate

if TYPE_CHECKING:
    from kvtui.boot import Boot
    from kvtui.boot.deployment import NodeObservation
    from kvtui.ui.calc.panel import CalculatorPanel
    from kvtui.ui.changes.action import ActionBanner, Severity
    from kvtui.ui.host_pane import HostPane

REFRESH_S = 0.25  # how soon after a node's log or boot changed the strips are drawn
PROBE_EVERY_S = 15.0  # how often each node's unit/pod state and environment are asked for


STRIP_ROWS = 6  # the strip's rows unless expanded (``b``): its CSS max-height


class DeploymentStrip(Static):
    """A deployment's state on one of its node panes (see the module docstring). Its text is
    ``full``; it takes at most ``STRIP_ROWS`` rows at the terminal's width — a longer text (a
    hang with its causes, wrapped at 80 columns) shows its first rows and "… N more lines
    b: details" (the rows past the sixth were cut without a word: the NCCL cause of a hang at
    80×24); ``b`` (the banners in full) shows it all, up to ``EXPANDED_ROWS``."""

    EXPANDED_ROWS = 16
    DEFAULT_CSS = """
    DeploymentStrip { height: auto; max-height: 6; padding: 0 1; background: $boost; }
    DeploymentStrip.-expanded { max-height: 16; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.full = Text()  # every line (what ``b`` shows)
        self.expanded = False
        self._shown_for: tuple[Text, int, bool] | None = None  # what was drawn: the text, width, expanded

    def show(self, text: Text) -> None:
        """The deployment's state (redrawn only when it, the width or ``expanded`` changed)."""
        self.full = text
        self._draw()

    def set_expanded(self, expanded: bool) -> None:
        self.expanded = expanded
        self.set_class(expanded, "-expanded")
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        width = self.content_region.width if self.is_mounted else 0
        key = (self.full, width, self.expanded)
        if key == self._shown_for:
            return
        self._shown_for = key
        self.update(self.shown_text(width))

    def shown_text(self, width: int) -> Text:
        """``full`` as it fits ``width`` columns (every row when expanded)."""
        rows = self.EXPANDED_ROWS if self.expanded else STRIP_ROWS
        if width <= 0 or not self.is_attached:
            return self.full
        lines = self.full.wrap(self.app.console, width)
        if len(lines) <= rows:
            return self.full
        kept = list(lines)[:rows - 1]
        more = len(lines) - len(kept)
        out = Text("\n").join(kept)
        out.append(f"\n… {more} more line{'s' if more > 1 else ''}", style="dim")
        if not self.expanded:
            out.append(f"  {expand_key(self)}: details", style="dim")
        return out


def notes(dm: DeploymentMonitor, probed: dict[int, NodeObservation] | None, now: datetime) -> Text:
    """The deployment's notes: the nodes whose backlog is still read (``DeploymentMonitor.hang``
    names no hang before every node's is: the wait's rule), the backlogs given up on, the hang, the findings, the node
    that failed first."""
    t = Text()
    dep = dm.merged()
    pending = dm.backlog_pending()
    if pending:
        t.append("reading the log so far of " + ", ".join(_label(dm, n) for n in pending)
                 + ": no hang is named before every node's is read\n", style="dim")
    for note in dm.backlog_notes():
        t.append(f"note: {note}\n", style="dim")
    hang = dm.hang(probed or None, now=now)  # None while a backlog is read
    if hang is not None:
        t.append("hang: ", style="bold red")
        t.append(hang.summary + "\n")
        for c in hang.causes:
            t.append(f"  - {c}\n")
    for f in dep.findings:
        t.append("finding: ", style="bold yellow")
        t.append(f"{f}\n")
    if dep.failed_node is not None:
        t.append(f"failed first on {dep.node(dep.failed_node).label()}\n", style="bold red")
    if dep.boot.status is not BootStatus.READY:
        for node in dm.nodes:  # a node that failed and started again (its unit's Restart=, or a restart)
            said = _failed_before(node)
            if said is not None:
                t.append(f"node {dm.node_rank(node)} ({node.name}): its previous boot failed ({said})\n",
                         style="bold red")
    t.rstrip()
    return t


def _failed_before(node: DeploymentNode) -> str | None:
    """Why and when a node's boot before its newest one failed, when the newest still starts: a
    node that failed and was started again by its unit (``Restart=on-failure``) makes a start of
    its own, the others "not in this start" — the failure is no longer in the merged boot, and
    was said on no other node's tab."""
    boots = node.monitor.tracker.boots
    if len(boots) < 2 or boots[-1].status is not BootStatus.STARTING or boots[-2].status is not BootStatus.FAILED:
        return None
    prev = boots[-2]
    why = fmt.failure_short(prev.failure.kind, prev.failure.phase) if prev.failure is not None else "unknown"
    return why + (f", {prev.ended_at.astimezone():%H:%M:%S}" if prev.ended_at is not None else "")


def _label(dm: DeploymentMonitor, node: DeploymentNode) -> str:
    return f"node {dm.node_rank(node)} · {node.name}"


class GroupBanner:
    """The ``ChangeBanner`` of a change of every node: each node pane's action banner, as one."""

    def __init__(self, group: DeploymentGroup) -> None:
        self.group = group

    @property
    def banners(self) -> list[ActionBanner]:
        return [p.action_banner for p in self.group.panes if p.is_attached]

    def start(self, title: str, first: str | None = None) -> None:
        for b in self.banners:
            b.start(title, first)

    def progress(self, line: str) -> None:
        for b in self.banners:
            b.progress(line)

    def stop(self) -> None:
        for b in self.banners:
            b.stop()

    def finish(self, severity: Severity, headline: str, detail: Sequence[str] = ()) -> None:
        for b in self.banners:
            b.finish(severity, headline, detail)

    def hide(self) -> None:
        for b in self.banners:
            b.hide()


class GroupSite:
    """The group as a ``ChangeSite``: every node pane's node (node-rank order), the merged boot,
    the calculator of the node pane on screen (calibrated from the merged boot), every node
    pane's action banner."""

    def __init__(self, group: DeploymentGroup) -> None:
        self.group = group
        self.readonly = any(p.readonly for p in group.panes)
        self.clock = group.panes[0].clock
        self._banner = GroupBanner(group)

    @property
    def boot(self) -> Boot | None:
        return self.group.merged_boot or self.group.panes[0].boot

    @property
    def calculator(self) -> CalculatorPanel:
        return self.group.shown_pane.calculator

    @property
    def action_banner(self) -> GroupBanner:
        return self._banner

    def change_nodes(self) -> list[ChangeNode]:
        nodes = [p.change_nodes() for p in self.group.panes]
        return [] if any(not n for n in nodes) else [n for ns in nodes for n in ns]


class DeploymentGroup:
    """A deployment's node panes as one (see the module docstring). Made before the panes are
    mounted: it sets each pane's ``group`` and ``changes``."""

    def __init__(self, name: str, panes: Sequence[HostPane], *, hang_s: float = 180.0) -> None:
        self.name = name
        self.panes = list(panes)  # node-rank order
        self.hang_s = hang_s
        self.dm: DeploymentMonitor | None = None  # once every pane has its monitor
        self.merged_boot: Boot | None = None  # the merged boot the calculators are calibrated from
        self._calibrated: tuple[object, ...] | None = None
        self._pane_calibrated: dict[str, tuple[object, ...]] = {}  # per node pane: the key it was set from
        self.probed: dict[int, NodeObservation] = {}  # by node rank: the last probe's answers
        self.probes = 0  # probes finished (tests)
        self._probed_at: float | None = None
        self._dirty = True
        self._scheduled = False
        self.refreshes = 0  # strips drawn (tests)
        self.site = GroupSite(self)
        self.changes = ChangeController(self.panes[0], self.site, name, hang_s=hang_s)
        for pane in self.panes:
            pane.group = self
            pane.changes = self.changes

    @property
    def shown_pane(self) -> HostPane:
        """The node pane on screen (else node 0's)."""
        return next((p for p in self.panes if p.shown), self.panes[0])

    def node_names(self) -> list[str]:
        return [p.host_name for p in self.panes]

    def ask_restart(self) -> None:
        """``R`` on a node pane: every node restarts, node 0 first (asks first)."""
        body = (f"Restart every node of {self.name} ({', '.join(self.node_names())})?\n\n"
                "Node 0 restarts first (it hosts the rendezvous), the others right after; the merged boot "
                "is followed until it is ready or failed.")

        def done(answer: bool | None) -> None:
            if answer:
                self.changes.start_restart()

        self.panes[0].app.push_screen(ConfirmScreen(f"Restart {self.name}", body), done)

    def up_through(self, pane: HostPane) -> str | None:
        """Node 0's label (``node 0 (r1-a)``) when the pane's boot is a node's other than node 0 in
        a merged boot that is ready: such a node prints nothing after its CUDA graph capture (its
        ranks serve through node 0), its own boot stays "starting" — its pane says "✔ up", not a
        phase clock that never stops, nor a stall notice. Else None."""
        dep = self.dm.dep if self.dm is not None else None
        if dep is None or dep.boot.status is not BootStatus.READY or pane.boot is None:
            return None
        nb = next((b for b in dep.nodes if b.name == pane.host_name), None)
        if nb is None or nb is dep.head or nb.boot is not pane.boot or pane.boot.status is not BootStatus.STARTING:
            return None
        return dep.head.label()

    def next_pane(self, pane: HostPane) -> HostPane:
        """``#``: the next node's pane (round the end)."""
        return self.panes[(self.panes.index(pane) + 1) % len(self.panes)]

    # ---- from the panes ---------------------------------------------------------------------

    def _monitor(self) -> DeploymentMonitor | None:
        if self.dm is None and all(p.monitor is not None for p in self.panes):
            nodes = [DeploymentNode(p.host_name, p.spec.config, p.monitor) for p in self.panes
                     if p.monitor is not None]
            self.dm = DeploymentMonitor(self.name, nodes, bound_s=self.hang_s)
            self.dm.begin()  # where each node's backlog ends
        return self.dm

    def feed(self, pane: HostPane, updates: Sequence[MonitorUpdate]) -> None:
        """A node pane's monitor batch (``HostPane.apply_updates``): what the deployment tracks of it."""
        dm = self._monitor()
        if dm is None:
            return
        dm.take(dm.nodes[self.panes.index(pane)], updates)
        if any(isinstance(u, LogBatch | BootState | ConnUpdate) for u in updates):
            self._dirty = True
            if not self._scheduled and self.panes[0].is_attached:
                self._scheduled = True
                self.panes[0].set_timer(REFRESH_S, self.refresh)

    # ---- drawing ----------------------------------------------------------------------------

    def tick(self) -> None:
        """The screen's 1 s tick: the strips (the hang's clock moves), a probe when due."""
        self._dirty = True
        self.refresh()
        now = time.monotonic()
        if self.dm is not None and (self._probed_at is None or now - self._probed_at >= PROBE_EVERY_S):
            self._probed_at = now
            self.panes[0].run_worker(self._probe(self.dm), group="dep-probe", exclusive=True, exit_on_error=False,
                                     description="deployment probe")

    async def _probe(self, dm: DeploymentMonitor) -> None:
        """Each node's unit (or pod) state and environment (``probe_nodes``, as ``kvtui wait NAME``):
        the hang diagnosis uses them."""
        self.probed = await probe_nodes(dm.nodes, dm.merged())
        self.probes += 1
        self._dirty = True

    def refresh(self) -> None:
        self._scheduled = False
        if not self._dirty:
            return
        self._dirty = False
        self.refreshes += 1
        dm = self.dm
        pane0 = self.panes[0]
        now = datetime.fromtimestamp(pane0.clock()).astimezone()
        head, body = self.texts(now) if dm is not None else (
            Text(f"{self.name} · deployment of {len(self.panes)} nodes · connecting"), Text())
        for pane in self.panes:
            strip = pane.deployment_strip
            if strip is None:
                continue
            t = head.copy()
            t.append("\n")
            t.append_text(self._nodes_line(pane))
            if body.plain:
                t.append("\n")
                t.append_text(body)
            strip.show(t)
        self._calibrate()

    def texts(self, now: datetime) -> tuple[Text, Text]:
        """The strip's head line and its notes."""
        assert self.dm is not None
        dm = self.dm
        dep = dm.merged()
        head = Text(self.name, style="bold")
        head.append(f" · deployment of {len(dm.nodes)} nodes · {dep.boot.status.value}")
        if dep.boot.ranks:
            head.append(f" · {len(dep.boot.ranks)} ranks")
        head.append(" · #: next node", style="dim")
        return head, notes(dm, self.probed, now)

    def _nodes_line(self, pane: HostPane) -> Text:
        """Each node's state in the merged boot, the pane's own in bold."""
        t = Text()
        dm = self.dm
        dep = dm.dep if dm is not None else None
        for i, p in enumerate(self.panes):
            if i:
                t.append(" · ", style="dim")
            node = dm.nodes[i] if dm is not None else None
            label = _label(dm, node) if dm is not None and node is not None else f"node {i} · {p.host_name}"
            nb = None if dep is None else next((b for b in dep.nodes if b.name == p.host_name), None)
            where = ("no boot yet" if dep is None or nb is None or (nb.boot is None and nb.earlier is None)
                     else node_state(dep, nb, fmt.phase_label))  # the phase in the tab's words
            if p.offline is not None:
                where = f"{p.offline.lstrip('◌○✖ ')} · {where}"
            t.append(f"{label}: ", style="bold" if p is pane else "")
            t.append(where, style="bold" if p is pane else "dim")
        return t

    def _calibrate(self) -> None:
        """The calculators follow the merged boot: its figures are the minimum over every rank of
        every node (free memory) and the maximum (graph memory), as ``calc --host NAME``; the pane
        on screen now, the others when shown (``HostPane.calibration``)."""
        dep = self.dm.dep if self.dm is not None else None
        if dep is None or not any(nb.boot for nb in dep.nodes):
            return
        boot = dep.boot
        key = (boot.engine, boot.status, repr(boot.metrics))  # the merged boot is rebuilt each time
        if key != self._calibrated:
            self._calibrated = key
            self.merged_boot = boot
        pane = self.shown_pane
        if pane.is_attached and self._pane_calibrated.get(pane.host_name) != key and self.merged_boot is not None:
            self._pane_calibrated[pane.host_name] = key
            pane.calculator.set_boot(self.merged_boot, [self.merged_boot])


__all__ = ["PROBE_EVERY_S", "REFRESH_S", "STRIP_ROWS", "DeploymentGroup", "DeploymentStrip", "GroupSite", "notes"]
