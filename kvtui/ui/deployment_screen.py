"""``DeploymentScreen``: ``KvtuiApp``'s screen for ``kvtui connect NAME`` on a ``[deployments.NAME]``
(issue 15) — the deployment's pane (``kvtui.ui.deployment_pane``) and its keys.

The change keys act on every node as one, through ``kvtui.changes`` (what ``kvtui apply
NAME`` / ``kvtui rollback NAME`` run): ``a`` applies the calculator's edits (planned on every node at
once; a refusal anywhere refuses the whole; one confirmation; written and verified node by node, a
failure restoring the nodes already written; node 0 restarted first; the merged boot followed and
every node's argument dump checked); ``R`` restarts every node the same way; ``u`` restores every
node's newest backup; ``ctrl+x`` cancels the running change (all or nothing: asked while the
nodes' files are written, the write in progress ends and every node written is restored; asked
while the restarts are issued, they all are, then the following stops). The calculator (``c``)
is calibrated from the merged boot: P = min over all ranks of all nodes. Its binding ids are
``KvtuiApp``'s (``[keymap]``), plus ``node.filter``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Input

from kvtui.config import DEFAULT_STALL_SECONDS
from kvtui.exits import EXIT_FAILED
from kvtui.hosts import service
from kvtui.hosts.backend import LogStart
from kvtui.monitor import MonitorOptions
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode, node_monitor
from kvtui.ui.calc.panel import CalculatorPanel
from kvtui.ui.changes.controller import calculator_edits
from kvtui.ui.deployment_pane import LOG_KEEP, DeploymentPane
from kvtui.ui.history.deployment import DeploymentHistoryScreen
from kvtui.ui.perf import KeysFooter
from kvtui.ui.screens import ConfirmScreen, ExplainScreen, HelpScreen, NoticeScreen

if TYPE_CHECKING:
    from kvtui import flags as fl
    from kvtui.boot.deployment import DeploymentBoot
    from kvtui.changes import NodeSide
    from kvtui.config import CalcConfig, HistoryConfig, HostConfig
    from kvtui.hosts.backend import HostBackend
    from kvtui.ui.changes.action import Severity

BackendFactory = Callable[..., "HostBackend"]
CHANGE_TIMEOUT_S = 1800.0  # how long a change follows the nodes' new boots

DEPLOYMENT_BINDINGS: list[BindingType] = [
    Binding("question_mark", "help", "Help", id="help", tooltip="every key, with its id for [keymap]"),
    Binding("q", "quit", "Quit", id="quit"),
    Binding("ctrl+x", "cancel_change", "Cancel change", id="change.cancel",
            tooltip="cancel the running apply/rollback/restart (once every node's restart is issued: stop "
                    "following it)"),
    Binding("slash", "search", "Search", id="search", tooltip="search the merged log (smart case)", priority=True),
    Binding("n", "find(True)", "Next match", show=False, id="search.next"),
    Binding("N", "find(False)", "Previous match", show=False, id="search.previous"),
    Binding("number_sign", "node_filter", "Node filter", id="node.filter",
            tooltip="the log of all nodes, node 0, node 1, … (a search stays)"),
    Binding("g", "gpu_plot", "GPU plot", show=False, id="gpu.plot",
            tooltip="GPU memory over time of the node the log shows (all nodes: their sum), or the bars"),
    Binding("p", "processes", "Processes", show=False, id="processes",
            tooltip="per-process GPU memory on the node the log shows (all nodes: node 0), or the bars"),
    Binding("c", "calculator", "Calculator", id="calculator", priority=True,
            tooltip="edit flags, see the next boot's KV pool (every rank of every node)"),
    Binding("x", "explain", "Explain", id="explain", tooltip="how the prediction is computed"),
    Binding("a", "apply", "Apply", id="apply",
            tooltip="apply the calculator's edits on every node and restart (asks first)"),
    Binding("R", "restart", "Restart", id="restart", tooltip="restart every node, node 0 first (asks first)"),
    Binding("u", "rollback", "Rollback", show=False, id="rollback",
            tooltip="restore every node's newest backup and restart (asks first)"),
    Binding("H", "history", "History", show=False, id="history",
            tooltip="the deployment's remembered starts, one row per start with its nodes; pick two to diff"),
    Binding("d", "history(True)", "What changed", show=False, id="diff",
            tooltip="what changed, node by node, since the last good start of the deployment"),
    Binding("escape", "escape", "Leave field", show=False, id="escape"),
    Binding("T", "next_theme", "Next theme", show=False, id="theme.next", tooltip="cycle kvtui's colour themes"),
]
CHANGES = frozenset({"apply", "restart", "rollback"})


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
        self.last_code: int | None = None  # the last change's exit code (tests)
        self._change_gen = 0  # the running change's number (a cancelled worker's end frees nothing)
        # where the running change is: "plan" (nothing written), "write" (the nodes' files),
        # "position" (written or restart only, no restart issued), "restart" (issuing), "follow"
        self.stage = ""
        self._cancel_asked = False  # ctrl+x during "write" or "restart": acted on when that step ends

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
                                                                     "history", "processes"):
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

    # ---- the change keys ------------------------------------------------------------------------

    def _begin(self, what: str) -> int | None:
        """Mark ``what`` as running: its number (its worker hands it to ``_end``), or None."""
        pane = self.pane
        if self.readonly:
            return None
        if pane.busy is not None:
            self.notify(f"{pane.busy} of {self.spec.name} is running: wait for it to end, or cancel it (ctrl+x)",
                        severity="warning", timeout=4)
            return None
        pane.busy = what
        self._change_gen += 1
        self.stage = "plan"
        self._cancel_asked = False
        self.refresh_bindings()
        return self._change_gen

    def _end(self, gen: int) -> None:
        if gen == self._change_gen:
            self.pane.busy = None
            self.stage = ""
            self.refresh_bindings()

    def action_cancel_change(self) -> None:
        self.cancel_change()

    def cancel_change(self) -> str | None:
        """``ctrl+x``: cancel the running change — at once while nothing is written (planning) or
        once everything is (before the restarts, or after every restart was issued: the following
        stops, the nodes' new boots go on); asked while the files are written or the restarts
        issued, it is acted on when that step ends (all or nothing). What the banner says, or None
        when nothing runs."""
        pane = self.pane
        if pane.busy is None:
            return None
        if self.stage in ("write", "restart"):
            self._cancel_asked = True
            line = ("cancel asked: the write in progress ends, then every node written is restored"
                    if self.stage == "write" else
                    "cancel asked: every node's restart is issued first (a deployment is not left half "
                    "restarted), then the following stops")
            pane.action_banner.progress(line)
            self.notify(line, title=f"{self.spec.name}: cancelling", timeout=5)
            return line
        return self._cancel_now()

    def _cancel_now(self) -> str:
        pane = self.pane
        what = (pane.busy or "a change").removeprefix("an ").removeprefix("a ")
        name = self.spec.name
        if self.stage == "follow":
            headline = f"{what} of {name}: no longer followed"
            detail = ["every node's restart was issued and goes on; the node lines and the log show the new boot"]
        elif self.stage == "position" and what != "restart":
            headline = f"{what} on {name} cancelled before the restart"
            files = "the backups are restored" if what == "rollback" else "the new flags are written"
            detail = [f"{files} and verified on every node but not running: R restarts into them"
                      + (", u rolls them back" if what == "apply" else "")]
        else:
            headline = f"{what} on {name} cancelled"
            detail = ["nothing was written or restarted on any node"]
        self._change_gen += 1  # the cancelled worker's end no longer frees the deployment: it is free now
        pane.busy = None
        self.stage = ""
        self._cancel_asked = False
        self.workers.cancel_group(self, "dep-change")
        pane.action_banner.finish("warning", headline, detail)
        self.refresh_bindings()
        return headline

    def _stage(self, stage: str) -> None:
        """The running change reached ``stage`` (a cancel asked during the step before acts now)."""
        self.stage = stage
        if stage == "follow" and self._cancel_asked:
            self._cancel_now()

    def _sides(self) -> list[NodeSide]:
        from kvtui.changes import NodeSide  # lazy: imports kvcalc (test_ui_startup)

        return [NodeSide(n.name, n.host, n.monitor.backend, boots=list(n.monitor.tracker.boots))
                for n in self.dm.nodes]

    def action_apply(self) -> None:
        edits = calculator_edits(self.pane.calculator)
        if isinstance(edits, str):
            self.notify(edits, severity="warning", timeout=5)
            return
        gen = self._begin("an apply")
        if gen is not None:
            self._change_worker("apply", edits, gen)

    def action_rollback(self) -> None:
        gen = self._begin("a rollback")
        if gen is not None:
            self._change_worker("rollback", [], gen)

    def action_restart(self) -> None:
        if self.readonly:
            return
        nodes = ", ".join(n.name for n in self.dm.nodes)
        body = (f"Restart every node of {self.spec.name} ({nodes})?\n\n"
                "Node 0 restarts first (it hosts the rendezvous), the others right after; the merged boot "
                "is followed until it is ready or failed.")

        def done(answer: bool | None) -> None:
            gen = self._begin("a restart") if answer else None
            if gen is not None:
                self._change_worker("restart", [], gen)

        self.app.push_screen(ConfirmScreen(f"Restart {self.spec.name}", body), done)

    async def _probe_head(self, dep: DeploymentBoot, sides: Sequence[NodeSide], say: Callable[[str], None]) -> bool:
        """The merged boot is ready: ask node 0's server for one token when the console probes
        (``changes.probe_head``, as ``kvtui apply NAME --restart`` does); False when it
        does not answer (its boot is then ``not_serving``)."""
        from kvtui import changes as dc  # lazy: imports kvcalc (test_ui_startup)

        if not getattr(self.app, "probe_ready", False):
            return True
        res = await dc.probe_head(dep, sides, say)
        return res is None or res.ok

    @work(group="dep-change", exit_on_error=False, description="deployment change")
    async def _change_worker(self, verb: str, edits: list[fl.Edit], gen: int) -> None:
        from kvtui import changes as dc  # lazy: imports kvcalc (test_ui_startup)
        pane = self.pane
        banner = pane.action_banner
        name = self.spec.name
        sides = self._sides()
        said: list[str] = []

        def say(line: str) -> None:
            said.append(line)
            banner.progress(line)
        try:
            if verb != "restart":
                banner.start(f"{verb} on {name} ({len(sides)} nodes)", "reading every node's flags…")
                errors = await dc.plan_nodes(sides, edits, verb=verb, timeout=CHANGE_TIMEOUT_S,
                                             graph_margin_gib=self.calc_config.graph_margin_gib, clock=self.clock)
                if errors:
                    banner.stop()
                    text = "\n".join(f"{n.name}: {exc}" for n, exc in errors)
                    await self.app.push_screen_wait(NoticeScreen(f"Cannot {verb} on {name}", text))
                    return
                refused = [n for n in sides if n.plan is not None and n.plan.refused]
                if refused:
                    for n in refused:
                        assert n.plan is not None
                        await service.execute(n.plan, n.backend, clock=self.clock)  # audits the refusal
                    reasons = [f"{n.name}: {r.reason}" for n in refused if n.plan for r in n.plan.blocking]
                    banner.finish("failed", f"{verb} on {name}: refused as a whole: nothing was written on any node",
                                  reasons)
                    return
                if not any(n.plan is not None and n.plan.changed for n in sides):
                    banner.stop()
                    self.notify("every node's file already says this; nothing to do", title=f"{name}: {verb}")
                    return
                banner.hide()
                body = "\n".join(f"== node {i}: {n.name} ==\n{service.render_plan(n.plan)}"
                                 for i, n in enumerate(sides) if n.plan is not None)
                body += ("\nthen: restart every node (node 0 first, the others right after) and follow the merged "
                         "boot until it is ready or failed")
                if not await self.app.push_screen_wait(ConfirmScreen(f"{verb.capitalize()} on all {len(sides)} "
                                                                     f"nodes of {name}", body, verb.capitalize())):
                    self.notify("nothing was changed", title=f"{name}: {verb} cancelled", timeout=4)
                    return
                banner.start(f"{verb} on {name} ({len(sides)} nodes)")
                self.stage = "write"
                wrote = await dc.write_nodes(sides, say, verb=verb, clock=self.clock)
                if wrote.code is not None:
                    self.last_code = wrote.code
                    banner.finish("failed", f"{verb} on {name}: not done", wrote.messages)
                    return
                if self._cancel_asked:  # ctrl+x while the files were written: all of them restored
                    restored = await dc.restore(wrote.written, self.clock, say)
                    banner.finish("warning", f"{verb} on {name} cancelled: nothing was restarted",
                                  restored or ["no node's file had to be written"])
                    return
                say(f"{name}: " + ("the backups are restored" if verb == "rollback" else "the new flags are written")
                    + " and verified on every node")
            else:
                banner.start(f"restart of {name} ({len(sides)} nodes)")
            self.stage = "position"
            code, dep = await dc.restart_and_follow(sides, self.spec.hang_seconds, CHANGE_TIMEOUT_S, self.clock,
                                                    say, edits, stage=self._stage)
            silent = code == 0 and dep is not None and not await self._probe_head(dep, sides, say)
            if silent:
                code = EXIT_FAILED
            self.last_code = code
            severity: Severity = "ok" if code == 0 else ("warning" if code == 5 else "failed")
            head = (dc.NOT_ANSWERING if silent else
                    {0: "ready on every node", 1: "the new boot failed", 5: "timed out"}.get(code, f"exit {code}"))
            banner.finish(severity, f"{verb} on {name}: {head}", outcome_lines(said))
        finally:
            await dc.close_followers(sides)
            self._end(gen)


OUTCOME_WORDS = ("ready on all", "failed", "hang:", "edit not in effect", "argument dump", "timed out", "refused",
                 "1-token", "not serving", "not probed")


def outcome_lines(said: Sequence[str], n: int = 4) -> list[str]:
    """What a change's outcome shows under its headline: the lines that say how it ended (the
    failure, the hang, the dump check), else the last ones."""
    key = [ln for ln in said if any(w in ln for w in OUTCOME_WORDS)]
    return (key or list(said))[-n:]


__all__ = ["DEPLOYMENT_BINDINGS", "DeploymentScreen", "DeploymentSpec"]
