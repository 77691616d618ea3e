"""``DeploymentScreen``: ``KvtuiApp``'s screen for ``kvtui connect NAME`` on a ``[deployments.NAME]``
(issue 15) — the deployment's pane (``kvtui.ui.deployment_pane``) and its keys.

The change keys act on every node as one, through the pane's ``ChangeController``
(``kvtui.ui.changes.controller``, the host console's too; ``kvtui.changes``'s steps, what ``kvtui
apply NAME`` / ``kvtui rollback NAME`` run): ``a`` applies the calculator's edits (planned on every node at
once; a refusal anywhere refuses the whole; one confirmation; written and verified node by node, a
failure restoring the nodes already written; node 0 restarted first; the merged boot followed and
every node's argument dump checked); ``R`` restarts every node the same way; ``u`` restores every
node's newest backup; ``ctrl+x`` cancels the running change (all or nothing: asked while the
nodes' files are written, the write in progress ends and every node written is restored; asked
while the restarts are issued, they all are, then the following stops); ``O`` tunes every node
(``kvtui tune NAME``'s loop). A deployment of one node is changed as a host. ``F`` opens the fleet
screen as the host console's does. The calculator (``c``)
is calibrated from the merged boot: P = min over all ranks of all nodes. Its binding ids are
``KvtuiApp``'s (``[keymap]``), plus ``node.filter``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Input

from kvtui.config import DEFAULT_STALL_SECONDS
from kvtui.hosts.backend import LogStart
from kvtui.monitor import MonitorOptions
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode, node_monitor
from kvtui.ui.bindings import shared_bindings
from kvtui.ui.calc.panel import CalculatorPanel
from kvtui.ui.deployment_pane import LOG_KEEP, DeploymentPane
from kvtui.ui.history.deployment import DeploymentHistoryScreen
from kvtui.ui.perf import KeysFooter
from kvtui.ui.screens import ConfirmScreen, ExplainScreen, HelpScreen

if TYPE_CHECKING:
    from kvtui.config import CalcConfig, HistoryConfig, HostConfig
    from kvtui.hosts.backend import HostBackend

BackendFactory = Callable[..., "HostBackend"]

# The host console's bindings (kvtui.ui.bindings, same keys and ids) with the deployment's tooltips,
# plus its own two; the list's order is the footer's and the help screen's.
DEPLOYMENT_BINDINGS: list[BindingType] = shared_bindings([
    "help", "quit", "change.cancel", "search", "search.next", "search.previous",
    Binding("number_sign", "node_filter", "Node filter", id="node.filter",
            tooltip="the log of all nodes, node 0, node 1, … (a search stays)"),
    Binding("g", "gpu_plot", "GPU plot", show=False, id="gpu.plot",
            tooltip="GPU memory over time of the node the log shows (all nodes: their sum), or the bars"),
    "processes", "calculator", "explain", "apply", "restart", "rollback", "tune", "history", "diff", "fleet",
    "escape", "theme.next",
], tooltips={
    "change.cancel": "cancel the running apply/rollback/restart (once every node's restart is issued: stop "
                     "following it)",
    "search": "search the merged log (smart case)",
    "processes": "per-process GPU memory on the node the log shows (all nodes: node 0), or the bars",
    "calculator": "edit flags, see the next boot's KV pool (every rank of every node)",
    "apply": "apply the calculator's edits on every node and restart (asks first)",
    "restart": "restart every node, node 0 first (asks first)",
    "rollback": "restore every node's newest backup and restart (asks first)",
    "tune": "tune every node as one: each step edits and restarts every node (asks first)",
    "history": "the deployment's remembered starts, one row per start with its nodes; pick two to diff",
    "diff": "what changed, node by node, since the last good start of the deployment",
}, hidden=frozenset({"processes"}))
CHANGES = frozenset({"apply", "restart", "rollback", "tune"})


@dataclass(frozen=True, slots=True)
class DeploymentSpec:
    """A deployment to open: its name, its nodes (in node-rank order) and its hang bound."""

    name: str
    nodes: Sequence[tuple[str, HostConfig]]
    hang_seconds: float = 180.0


class DeploymentScreen(Screen[None]):
    """The deployment's console (see the module docstring)."""

    BINDINGS: ClassVar[list[BindingType]] = DEPLOYMENT_BINDINGS
    AUTO_FOCUS = "#dep-log"  # the log, not the calculator (the first focusable widget)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-medium"), (160, "-wide"), (220, "-xwide")]  # noqa: RUF012
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]  # noqa: RUF012
    NARROW_BELOW = 110
    SHORT_BELOW = 30

    def __init__(self, spec: DeploymentSpec, *, backend_factory: BackendFactory, clock: Callable[[], float],
                 calc: CalcConfig, readonly: bool = False, pass_clock: bool = False,
                 history: HistoryConfig | None = None) -> None:
        """``pass_clock``: the backends are made with the console's clock (tests freeze it);
        ``history``: ``[history]`` (each node's boots are recorded under its host name, as the host
        console records its host's, unless ``record = false``)."""
        super().__init__(id="deployment-screen")

        self.spec = spec
        self.clock = clock
        self.calc_config = calc
        self.readonly = readonly or any(h.readonly for _, h in spec.nodes)
        dnodes = []
        for node_name, host in spec.nodes:
            backend = (backend_factory(node_name, host, clock=clock) if pass_clock
                       else backend_factory(node_name, host))
            monitor = node_monitor(node_name, backend, host, history,
                                   MonitorOptions(start=LogStart.CURRENT_BOOT, log_window=LOG_KEEP, clock=clock))
            dnodes.append(DeploymentNode(node_name, host, monitor))
        self.dm = DeploymentMonitor(spec.name, dnodes, bound_s=spec.hang_seconds)

    @property
    def pane(self) -> DeploymentPane:
        return self.query_one(DeploymentPane)

    def compose(self) -> ComposeResult:
        ui = getattr(getattr(self.app, "config", None), "ui", None)
        yield DeploymentPane(self.dm, clock=self.clock, graph_margin_gib=self.calc_config.graph_margin_gib,
                             readonly=self.readonly,
                             stall_seconds=getattr(ui, "stall_seconds", DEFAULT_STALL_SECONDS))
        yield KeysFooter()

    def on_mount(self) -> None:
        self.dm.start(self.pane.on_updates)
        self.pane.set_compact(self.size.height < self.SHORT_BELOW)

    def on_resize(self) -> None:
        if self.is_mounted:
            self.pane.set_compact(self.size.height < self.SHORT_BELOW)

    async def on_unmount(self) -> None:
        await self.dm.close()

    # ---- keys -----------------------------------------------------------------------------------

    def typing(self) -> bool:
        focused = self.focused
        return isinstance(focused, Input) or (isinstance(focused, CalculatorPanel) and focused.editing is not None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.app.screen is self and self.typing() and action in ("calculator", "node_filter", "apply", "restart",
                                                                     "rollback", "explain", "quit", "help",
                                                                     "next_theme", "search", "find", "gpu_plot",
                                                                     "history", "processes", "tune", "fleet"):
            return False  # typed into the flag being edited
        if action in CHANGES and self.readonly:
            return False
        if action == "cancel_change":
            return self.is_mounted and self.pane.busy is not None  # offered (in the footer too) while one runs
        if action == "explain" and self.is_mounted and self.pane.calculator.prediction is None:
            return None
        return True

    def key_rows(self) -> list[tuple[str, str, str]]:
        """(key, description, id) of every binding, with the user's remaps applied."""
        rows: list[tuple[str, str, str]] = []
        seen: set[str] = set()
        order = {b.id: i for i, b in enumerate(DEPLOYMENT_BINDINGS) if isinstance(b, Binding)}
        for key, active in self.active_bindings.items():
            b = active.binding
            if b.id is None or b.id in seen or b.id not in order:
                continue
            seen.add(b.id)
            rows.append((self.app.get_key_display(b) or key, b.description, b.id))
        rows.sort(key=lambda r: order.get(r[2], 999))
        return rows

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.key_rows(), title=f"Keys · deployment {self.spec.name}"))

    def action_quit(self) -> None:
        busy = self.pane.busy
        if busy is None:
            self.app.exit()
            return
        body = (f"{busy[0].upper()}{busy[1:]} of {self.spec.name} is still running.\n\n"
                "Quitting stops following it: what was written stays and a restart already issued goes on.")

        def done(answer: bool | None) -> None:
            if answer:
                self.app.exit()

        self.app.push_screen(ConfirmScreen("Quit while a change is running?", body, confirm_label="Quit"), done)

    def action_node_filter(self) -> None:
        self.pane.cycle_filter()

    def action_gpu_plot(self) -> None:
        self.pane.toggle_plot()

    def action_processes(self) -> None:
        self.pane.toggle_processes()

    def action_search(self) -> None:
        self.pane.open_search()

    def action_find(self, forward: bool) -> None:
        if self.pane.search is None:
            self.notify("nothing to repeat: search with / first", severity="warning", timeout=3)
            return
        self.pane.find(forward)

    def action_history(self, diff: bool = False) -> None:
        """``H``: the deployment's remembered starts (each node's stored boots grouped by start);
        ``d``: opened on the newest start's diff, node by node, against the last good one."""
        self.app.push_screen(DeploymentHistoryScreen(self.spec.name, [n.name for n in self.dm.nodes],
                                                     diff_newest=diff))

    def action_next_theme(self) -> None:
        app = self.app
        names = [n for n in getattr(app, "kvtui_themes", []) if n in app.available_themes]
        if names:
            app.theme = names[(names.index(app.theme) + 1) % len(names)] if app.theme in names else names[0]

    def action_calculator(self) -> None:
        calc = self.pane.calculator
        if not calc.fields:
            self.notify("the calculator needs a boot that sized its KV pool", severity="warning", timeout=4)
            return
        column = self.pane.query_one("#dep-calc")
        if self.size.width < self.NARROW_BELOW and self.maximized is not column:
            self.maximize(column, container=False)
        calc.focus_first()

    def action_explain(self) -> None:
        calc = self.pane.calculator
        self.app.push_screen(ExplainScreen(calc.explain_lines(), calc.reason_lines(), calc.verdict))

    def action_escape(self) -> None:
        if self.maximized is not None:
            self.minimize()
        self.set_focus(None)
        if self.pane.changes.stop_tune():
            return  # a tune stops after the step in progress
        if self.pane.action_banner.shown:
            self.pane.action_banner.hide()  # a running change goes on; its outcome shows it again

    @on(CalculatorPanel.Computed)
    def _computed(self, event: CalculatorPanel.Computed) -> None:
        event.stop()
        self.refresh_bindings()  # "explain" is enabled once there is a prediction

    @on(CalculatorPanel.EditingChanged)
    def _editing_changed(self, event: CalculatorPanel.EditingChanged) -> None:
        event.stop()
        self.refresh_bindings()  # the footer shows the editing keys while a flag is edited

    @on(CalculatorPanel.Left)
    def _left_calculator(self, event: CalculatorPanel.Left) -> None:
        event.stop()
        if self.maximized is not None:
            self.minimize()
        self.set_focus(None)

    # ---- the change keys: the pane's ChangeController (kvtui.ui.changes.controller) -----------

    def action_cancel_change(self) -> None:
        self.pane.changes.cancel_change()

    def action_apply(self) -> None:
        self.pane.changes.start_apply()

    def action_rollback(self) -> None:
        self.pane.changes.start_rollback()

    def action_tune(self) -> None:
        self.pane.changes.start_tune()

    def action_fleet(self) -> None:
        """``F``: the fleet screen (``kvtui.ui.fleet.screen``), as the host console's ``F``."""
        show = getattr(self.app, "show_fleet", None)
        if show is not None:
            show()

    def action_restart(self) -> None:
        if self.readonly:
            return
        nodes = ", ".join(n.name for n in self.dm.nodes)
        body = (f"Restart every node of {self.spec.name} ({nodes})?\n\n"
                "Node 0 restarts first (it hosts the rendezvous), the others right after; the merged boot "
                "is followed until it is ready or failed.")

        def done(answer: bool | None) -> None:
            if answer:
                self.pane.changes.start_restart()

        self.app.push_screen(ConfirmScreen(f"Restart {self.spec.name}", body), done)


__all__ = ["DEPLOYMENT_BINDINGS", "DeploymentScreen", "DeploymentSpec"]
