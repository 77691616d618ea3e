"""The changing actions of a console (``a`` apply, ``u`` rollback, ``R`` restart, ``D`` demo speed,
``O`` tune, ``ctrl+x`` cancel) over N ≥ 1 nodes: ``ChangeController``, owned by the pane it changes
(``HostPane.changes``: one node; ``DeploymentGroup.changes``: a deployment's node panes), which gives
it what it needs as a ``ChangeSite``. It plans through ``kvtui.changes`` / ``kvtui.tune``, confirms
in a dialog, runs the change in a ``service`` worker of the pane and shows its progress and outcome
in the pane's action banner. An apply or a rollback of any N >= 1 nodes takes one path
(``_change_worker``: every node planned, confirmed — one node in the apply dialog with its diff,
prediction and automatic rollback, several in one confirmation of every diff —, then
``service.execute_nodes``, as ``kvtui apply NAME`` does: written, restarted, the merged boot
followed and probed, every node rolled back on failure, each node's boot recorded). ``R`` of
N >= 1 nodes is ``service.execute_nodes`` of restart plans (node 0 first, the merged boot
followed to ready or failed in the banner). Tune is ``kvtui.tune``'s loop either way
(``TuneRun.nodes`` for several)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from textual.notifications import SeverityLevel

from kvtui import flags
from kvtui.boot import Boot, BootStatus
from kvtui.config import DEMO_DEFAULT_SPEED
from kvtui.hosts import service
from kvtui.hosts.backend import BackendError
from kvtui.lazy import lazy_module
from kvtui.sim.backend import DemoBackend
from kvtui.ui.changes.action import Severity
from kvtui.ui.screens import ApplyScreen, ConfirmScreen, NoticeScreen, TuneScreen

if TYPE_CHECKING:
    from textual.widget import Widget

    from kvtui import changes, kvcalc
    from kvtui.changes import NodeSide
    from kvtui.config import HistoryConfig, HostConfig
    from kvtui.flags import Edit
    from kvtui.hosts.backend import HostBackend
    from kvtui.hosts.service import ApplyOutcome, Calculator, RestartPlan
    from kvtui.tune import driver
    from kvtui.tune import planner as tp
    from kvtui.tune.driver import TuneResult
    from kvtui.ui.calc.panel import CalculatorPanel
    from kvtui.ui.changes.action import ChangeBanner
else:
    changes = lazy_module("kvtui.changes")  # lazy: imports kvcalc (test_ui_startup): +65 ms CPU
    kvcalc = lazy_module("kvtui.kvcalc")  # lazy: after the console's first frame (test_ui_startup): +47 ms CPU
    driver = lazy_module("kvtui.tune.driver")  # lazy: imports kvcalc (test_ui_startup): +79 ms CPU
    tp = lazy_module("kvtui.tune.planner")  # lazy: imports kvcalc (test_ui_startup): +79 ms CPU


def demo_target(speed: float) -> str:
    """What the header says a demo host is: its speed (``demo ×8``; ``demo ×1 real time``)."""
    return f"demo ×{speed:g}" + (" real time" if speed == 1 else "")


def calculator_edits(calc: CalculatorPanel) -> list[Edit] | str:
    """The flags the user changed in the calculator, as edits of the server's flags file (every
    node's, for a deployment; validated as the calculator validates them), or why there is nothing
    to apply. The host console's ``a`` and the deployment console's ``a`` both use it."""
    sets, unsets = calc.edits()
    if not sets and not unsets:
        return "no edits to apply: change a flag in the calculator first (c)"
    engine = calc.engine
    if engine is None:
        return "the calculator has no boot to work from yet"
    try:
        edits = kvcalc.parse_what_if(engine, sets, unsets)
    except kvcalc.CalcError as exc:
        return f"the calculator's edit is not valid: {exc}"
    return flags.edits_from_mapping(dict(edits.values))


class ChangeNode(NamedTuple):
    """A node a change acts on, as its pane knows it."""

    name: str
    host: HostConfig
    backend: HostBackend
    boots: list[Boot]  # its known boots (predictions, tune)


class ChangeSite(Protocol):
    """What a ``ChangeController`` needs of the pane it changes (``HostPane``: one node;
    ``ui.deployment.GroupSite``: its nodes, node 0 first)."""

    readonly: bool
    clock: Callable[[], float]

    @property
    def boot(self) -> Boot | None: ...  # the running boot (a deployment's: merged)

    @property
    def calculator(self) -> CalculatorPanel: ...

    @property
    def action_banner(self) -> ChangeBanner: ...

    def change_nodes(self) -> list[ChangeNode]:  # node 0 first; [] until connected
        ...


class ChangeController:
    """Apply, rollback, restart, demo speed and tune on a site's N ≥ 1 nodes (one at a time:
    ``busy``); its workers run on ``pane`` (group ``service``)."""

    def __init__(self, pane: Widget, site: ChangeSite, name: str, *, hang_s: float = 180.0,
                 on_demo_speed: Callable[[float], None] | None = None) -> None:
        self.pane = pane  # where the workers run and the toasts show
        self.site = site
        self.name = name  # the host's or the deployment's (banners, toasts)
        self.hang_s = hang_s  # a deployment's hang_seconds (following several nodes)
        self.on_demo_speed = on_demo_speed  # ``D`` changed a demo host's speed: the pane shows it
        self.busy: str | None = None  # the changing action running ("an apply", …)
        self.tune_stop: asyncio.Event | None = None  # set: the running tune stops after its step
        self.last_tune: TuneResult | None = None
        self._busy_gen = 0  # bumped by each change begun or cancelled (see ``_end``)
        self.restart_issued = False  # the running change reached its restart step (every node's)
        self._written = False  # the running change wrote the flags file(s)
        self.last_outcome: ApplyOutcome | None = None
        self.last_code: int | None = None  # the last change's exit code (tests)
        # where a change of several nodes is: "plan", "write" (the nodes' files), "position",
        # "restart" (issuing), "follow"; a ctrl+x during "write" or "restart" acts when it ends
        self.stage = ""
        self._cancel_asked = False

    def rollback_default(self) -> tuple[bool, str]:
        """The automatic-rollback toggle's default, and why: on when the running boot is ready
        (the current flags are known to work, so going back restores service), off otherwise
        (going back would restart into flags that have not produced a ready boot)."""
        boot = self.site.boot
        if boot is not None and boot.status is BootStatus.READY:
            return True, ("on by default: the running boot is ready with the current flags, so going back to "
                          "them restores service")
        state = "no boot seen" if boot is None else f"the current boot is {boot.status.value}"
        return False, (f"off by default: {state}, so the current flags are not known to work (going back "
                       "would restart into them)")

    def _begin(self, what: str) -> tuple[int, list[NodeSide]] | None:
        """Mark ``what`` as running: its number (its worker hands it to ``_end``) and the nodes,
        or None when another change runs, the site is readonly or not reached."""
        if self.site.readonly:
            return None
        if self.busy is not None:
            self.pane.notify(f"{self.busy} in progress on {self.name}: wait for it to end, or cancel it (ctrl+x)",
                             severity="warning", timeout=4)
            return None
        sides = self._sides()
        if not sides:
            self.pane.notify(f"{self.name} is not connected yet", severity="warning", timeout=4)
            return None
        self.busy = what
        self._busy_gen += 1
        self.restart_issued = self._written = self._cancel_asked = False
        self.stage = "plan" if len(sides) > 1 else ""
        self._keys_changed()
        return self._busy_gen, sides

    def _end(self, gen: int) -> None:
        """A worker is done: it no longer holds the site (unless it was cancelled and another
        change began since)."""
        if gen == self._busy_gen:
            self.busy = None
            self.stage = ""
            self._keys_changed()  # the footer's ^x Cancel change goes with it

    def _keys_changed(self) -> None:
        """The footer's keys depend on ``busy``: ask the screen to check them again."""
        if self.pane.is_attached:
            self.pane.screen.refresh_bindings()

    # progress lines that say the server is being restarted (kvtui.hosts.service's wording)
    RESTART_STEP = ("restarting the unit", "systemctl restart", "stopping the server", "starting the server")

    def _progress(self, line: str) -> None:
        if line.startswith(self.RESTART_STEP):
            self.restart_issued = True
        if "the previous version is saved as" in line:
            self._written = True
        self.site.action_banner.progress(line)

    def cancel_change(self) -> str | None:
        """``ctrl+x``: stop the running change — before its restart step it is cancelled (what was
        written is said); after it, kvtui stops following (the new boot goes on and the log shows
        it). Of several nodes, all or nothing: asked while their files are written or their
        restarts issued, it acts when that step ends (the nodes written are restored; every restart
        is issued, then the following stops). What the banner says, or None when nothing runs."""
        if self.busy is None:
            return None
        if self.stage in ("write", "restart"):
            self._cancel_asked = True
            several = len(self.site.change_nodes()) > 1
            if self.stage == "write":
                line = ("cancel asked: the write in progress ends, then "
                        + ("every node written is restored" if several else "the file is restored"))
            else:
                line = ("cancel asked: " + ("every node's restart is issued first (a deployment is not left half "
                                            "restarted)" if several else "the restart is issued first")
                        + ", then the following stops")
            self.site.action_banner.progress(line)
            self.pane.notify(line, title=f"{self.name}: cancelling", timeout=5)
            return line
        return self._cancel_now()

    def _cancel_now(self) -> str:
        what = (self.busy or "a change").removeprefix("an ").removeprefix("a ")
        if self.restart_issued:
            headline = f"{what} of {self.name}: no longer followed"
            detail = [("every node's restart was issued" if len(self.site.change_nodes()) > 1
                       else "the restart was issued") + " and goes on; the log and the boot panel show the new boot"]
        elif self._written and what != "restart":
            headline = f"{what} on {self.name} cancelled before the restart"
            detail = [("the backups are restored" if what == "rollback" else "the new flags are written")
                      + " and verified on every node but not running: R restarts into them"
                      + (", u rolls them back" if what == "apply" else "")]
        else:
            headline = f"{what} on {self.name} cancelled"
            detail = ["nothing was restarted; a file being written was written whole or left as it was (atomically)"]
        self._busy_gen += 1  # the cancelled worker's end no longer frees the site: it is free now
        self.busy = None
        self.stage = ""
        self._cancel_asked = False
        self.pane.workers.cancel_group(self.pane, "service")
        self.site.action_banner.finish("warning", headline, detail)
        self._keys_changed()
        return headline

    def _stage(self, stage: str) -> None:
        """A change of several nodes reached ``stage`` (a cancel asked during the step before acts now)."""
        if not self.stage:  # one node: a cancel acts at once, whatever the step
            return
        self.stage = stage
        if stage == "follow":
            self.restart_issued = True
            if self._cancel_asked:
                self._cancel_now()

    def _sides(self) -> list[NodeSide]:

        return [changes.NodeSide(n.name, n.host, n.backend, boots=n.boots) for n in self.site.change_nodes()]

    def _run(self, work: Callable[[int, list[NodeSide]], Awaitable[None]], what: str) -> None:
        """Begin ``what`` and run ``work(gen, sides)`` (a coroutine) in a ``service`` worker."""
        begun = self._begin(what)
        if begun is not None:
            self.pane.run_worker(work(*begun), name=what, group="service",
                                 description=what.split()[-1], exit_on_error=False)

    def _calculator_for_apply(self) -> Calculator:
        """What predicts the apply's flags: the calculator's own model for a serving boot whose start
        is not in the log (the history's boot of its flags, or its config.json at the estimated
        pool: the log has no pool line to calibrate from), else ``changes.calculate``."""

        boot, model = self.site.boot, self.site.calculator.model
        if boot is not None and boot.start_missing is not None and model is not None and not kvcalc.sized_pool(boot):
            return changes.calculate_on(model, boot)
        return changes.calculate

    def start_apply(self) -> None:
        """``a``: plan the calculator's edits, confirm, apply and restart (every node)."""
        if self.site.readonly:
            return
        edits = calculator_edits(self.site.calculator)
        if isinstance(edits, str):
            self.pane.notify(edits, severity="warning", timeout=5)
            return
        self._run(lambda gen, sides: self._change_worker("apply", edits, gen, sides), "an apply")

    def start_rollback(self) -> None:
        """``u``: restore the newest backup of the flags file (every node's), confirm, restart."""
        self._run(lambda gen, sides: self._change_worker("rollback", [], gen, sides), "a rollback")

    def toggle_demo_speed(self) -> None:
        """``D``: a demo host's simulation restarts in real time (×1), or at its configured speed
        again (the default speed when real time is what is configured)."""
        sides = self._sides()
        side = sides[0] if len(sides) == 1 else None
        if side is None or self.site.readonly or self.on_demo_speed is None:
            return
        backend, cfg = side.backend, side.host
        if not isinstance(backend, DemoBackend) or not cfg.demo:
            return
        if self.busy is not None:
            self.pane.notify(f"{self.busy} in progress on {self.name}: the speed can change after it",
                             severity="warning", timeout=4)
            return
        configured = cfg.demo_speed
        backend.speed = 1.0 if backend.speed != 1 else (configured if configured != 1 else DEMO_DEFAULT_SPEED)
        self.on_demo_speed(backend.speed)
        plan = service.plan_restart(side.name, cfg, backend)
        if plan.refused:
            self.pane.notify(plan.refusals[0].reason, title="demo speed", severity="warning", timeout=8)
            return
        self.pane.notify(f"{self.name}: the simulation restarts at ×{backend.speed:g}"
                         + (" (real time)" if backend.speed == 1 else ""), title="demo speed", timeout=4)
        self.start_restart(plan)

    def start_restart(self, plan: RestartPlan | None = None) -> None:
        """``R`` (after its confirm): every node restarted as one (``service.execute_nodes`` of
        restart plans: node 0 first, the merged new boot followed to ready or failed, node 0 asked
        for a token); ``plan``: node 0's, made by the caller (``D``'s is not followed)."""
        self._run(lambda gen, sides: self._restart_worker(plan, gen, sides), "a restart")

    async def _change_worker(self, verb: str, edits: list[Edit], gen: int, sides: list[NodeSide]) -> None:
        """An apply or rollback of the site's N >= 1 nodes as one, all or nothing: every node's change
        planned, confirmed (``_confirm``), carried out by ``service.execute_nodes`` (the files
        written, every node restarted, the merged boot followed and probed, every node rolled back
        on failure when asked), each node's boot recorded in the history."""
        banner, clock, many = self.site.action_banner, self.site.clock, len(sides) > 1
        title = f"{verb} on {self.name}" + (f" ({len(sides)} nodes)" if many else "")
        said: list[str] = []
        say = self._sayer(said)
        try:
            banner.start(title, "reading every node's flags…" if many else "reading the server's flags…"
                         if verb == "apply" else "looking for kvtui's backups…")
            if not await self._plan(verb, edits, sides) or not await self._confirm(verb, sides):
                return
            banner.start(title)
            outs = await service.execute_nodes(
                [service.Node(n.plan, n.backend, say(f"{n.name}: " if many else "")) for n in sides if n.plan],
                clock=clock, hang_s=self.hang_s, stage=self._stage, proceed=self._proceed, say=say(""))
            self.last_outcome, self.last_code = outs[0], outs[0].code
            for n, out in zip(sides, outs, strict=True):  # the history keeps each node's edit, prediction, outcome
                if n.plan is not None and n.plan.restart and out.boot is not None:
                    await asyncio.to_thread(changes.record_restart, n.plan, out, self._history())
            plan = sides[0].plan
            assert plan is not None
            if outs[0].status == "cancelled":
                banner.finish("warning", f"{verb} on {self.name} cancelled: nothing was restarted",
                              outs[0].messages[-len(sides):])
            else:  # several nodes: the whole's headline and the lines that say how it ended
                self._show_outcome(f"{verb} on {self.name}: {nodes_headline(outs[0])}" if many else
                                   service.outcome_headline(outs[0], plan.action, plan.name), outs[0], verb,
                                   outcome_lines(said) if many else None)
        finally:
            self._end(gen)

    def _sayer(self, said: list[str]) -> Callable[[str], Callable[[str], None]]:
        """Progress lines with a prefix (several nodes' carry their node's name), kept in ``said``."""
        def say(prefix: str) -> Callable[[str], None]:
            def line(msg: str) -> None:
                said.append(prefix + msg)
                self._progress(said[-1])
            return line
        return say

    async def _plan(self, verb: str, edits: list[Edit], sides: list[NodeSide]) -> bool:
        """Plan every node's change (``n.plan``, with its restart); False (said) when one cannot be."""
        margin, clock = self.site.calculator.graph_margin_gib, self.site.clock

        async def plan(n: NodeSide) -> service.ApplyPlan:
            if verb == "apply":
                return await changes.plan_apply(n.name, n.host, n.backend, edits, restart=True, boots=n.boots,
                                                graph_margin_gib=margin, clock=clock,
                                                calculator=self._calculator_for_apply())
            return await changes.plan_rollback(n.name, n.host, n.backend, restart=True, boots=n.boots,
                                               graph_margin_gib=margin, clock=clock)
        planned = await asyncio.gather(*(plan(n) for n in sides), return_exceptions=True)
        errors = [(n, p) for n, p in zip(sides, planned, strict=True) if isinstance(p, BaseException)]
        if errors:
            self.site.action_banner.stop()
            title = f"Cannot apply on {self.name}" if verb == "apply" else f"Cannot roll back {self.name}"
            text = "\n".join(f"{n.name}: {exc}" if len(sides) > 1 else str(exc) for n, exc in errors)
            await self.pane.app.push_screen_wait(NoticeScreen(title, text))
            return False
        for n, p in zip(sides, planned, strict=True):
            n.plan = None if isinstance(p, BaseException) else p
        return True

    async def _confirm(self, verb: str, sides: list[NodeSide]) -> bool:
        """One node: the apply dialog (its diff, its prediction; force and the automatic rollback to
        choose); several: a refusal on any refuses the whole, else one confirmation of every
        node's diff (the automatic rollback as ``rollback_default`` says). False: not confirmed."""
        banner, app, plans = self.site.action_banner, self.pane.app, [n.plan for n in sides if n.plan is not None]
        on, why = self.rollback_default() if verb == "apply" else (False, "")
        if len(sides) == 1:
            banner.hide()
            decision = await app.push_screen_wait(ApplyScreen(plans[0], rollback_default=on, rollback_why=why))
            if decision is not None and verb == "apply":
                plans[0].force = decision.force
                plans[0].rollback_on_failure = decision.rollback_on_failure
            ok = decision is not None
        else:
            refused = [n for n in sides if n.plan is not None and n.plan.refused]
            if refused:
                for n in refused:
                    assert n.plan is not None
                    await service.execute(n.plan, n.backend, clock=self.site.clock)  # audits the refusal
                reasons = [f"{n.name}: {r.reason}" for n in refused if n.plan for r in n.plan.blocking]
                banner.finish("failed", f"{verb} on {self.name}: refused as a whole: nothing was written on any node",
                              reasons)
                return False
            if not any(p.changed for p in plans):
                banner.stop()
                self.pane.notify("every node's file already says this; nothing to do", title=f"{self.name}: {verb}")
                return False
            banner.hide()
            body = "\n".join(f"== node {i}: {n.name} ==\n{service.render_plan(n.plan)}"
                             for i, n in enumerate(sides) if n.plan is not None)
            body += ("\nthen: restart every node (node 0 first, the others right after) and follow the merged "
                     "boot until it is ready or failed")
            if verb == "apply":
                body += f"; if it fails, every node is rolled back (automatic rollback {why})"
                for p in plans:
                    p.rollback_on_failure = on
            title = f"{verb.capitalize()} on all {len(sides)} nodes of {self.name}"
            ok = await app.push_screen_wait(ConfirmScreen(title, body, verb.capitalize()))
        if not ok:
            banner.stop()
            self.pane.notify("nothing was changed", title=f"{self.name}: {verb} cancelled", timeout=4)
        return bool(ok)

    def _proceed(self) -> bool:
        """Every node's file is written: False when ctrl+x was asked meanwhile (they are restored)."""
        if self.stage:
            self.stage = "position"
            self._written = True
        return not self._cancel_asked

    def _history(self) -> HistoryConfig | None:
        return getattr(getattr(self.pane.app, "config", None), "history", None)

    def _show_outcome(self, headline: str, outcome: ApplyOutcome, verb: str, lines: list[str] | None = None) -> None:
        """The banner and the toast of a change's end (``lines``: the banner's, else the outcome's)."""
        if outcome.code == 0:
            severity: Severity = "ok"
        elif outcome.status == "timeout" or outcome.rolled_back:
            severity = "warning"
        else:
            severity = "failed"
        detail = list(outcome.reality)
        if outcome.backup_path:
            detail.append(f"backup: {outcome.backup_path}")  # whole, wrapped (the banner wraps)
        if severity != "ok":
            why = [m for m in outcome.messages if m.startswith(("the new boot failed", "hint:", "edit not in effect",
                                                                 "rolled back", "refused", "timed out"))]
            detail += why or outcome.messages[-2:]
        self.site.action_banner.finish(severity, headline, detail if lines is None else lines)
        toast: SeverityLevel = "information" if severity == "ok" else (
            "warning" if severity == "warning" else "error")
        self.pane.notify("\n".join([headline, *outcome.reality]), title=f"{self.name}: {verb}", severity=toast,
                         timeout=8 if severity == "ok" else 15)

    async def _restart_worker(self, plan: RestartPlan | None, gen: int, sides: list[NodeSide]) -> None:
        banner, many, said = self.site.action_banner, len(sides) > 1, list[str]()
        say = self._sayer(said)
        try:
            banner.start(f"restart on {self.name}" + (f" ({len(sides)} nodes)" if many else ""))
            plans = [plan if plan is not None and i == 0 else
                     service.plan_restart(n.name, n.host, n.backend, follow=True) for i, n in enumerate(sides)]
            outs = await service.execute_nodes(
                [service.Node(p, n.backend, say(f"{n.name}: " if many else ""))
                 for p, n in zip(plans, sides, strict=True)],
                clock=self.site.clock, hang_s=self.hang_s, stage=self._stage, say=say(""),
                probe=getattr(self.pane.app, "probe_ready", False))
            out = self.last_outcome = outs[0]
            self.last_code = out.code
            if out.status == "restarted":  # not followed (``D``: the simulation's restart)
                banner.stop()
                self.pane.notify(f"{self.name}: restarted — following the new boot; the log marks it",
                                 title=f"{self.name}: restart")
            else:  # the new boot's outcome, as an apply's
                self._show_outcome(f"restart on {self.name}: {nodes_headline(out)}" if many else
                                   service.outcome_headline(out, "restart", self.name), out, "restart",
                                   outcome_lines(said) if many else None)
        finally:
            self._end(gen)

    # ---- tune (O) -------------------------------------------------------------------------------

    def start_tune(self) -> None:
        """``O``: the tune dialog, then the plan to confirm, then the loop (``kvtui.tune``; several
        nodes: each step edits and restarts every node and follows the merged boot)."""
        self._run(self._tune_worker, "a tune")

    def stop_tune(self) -> bool:
        """``Esc`` while a tune runs: it stops after the step in progress. True when one runs."""
        if self.busy != "a tune" or self.tune_stop is None:
            return False
        if not self.tune_stop.is_set():
            self.tune_stop.set()
            self.pane.notify("the tune stops after the step in progress (ctrl+x interrupts it)",
                             title=f"{self.name}: tune", timeout=6)
        return True

    async def _tune_worker(self, gen: int, sides: list[NodeSide]) -> None:

        head, app, name = sides[0], self.pane.app, self.name
        banner = self.site.action_banner
        try:
            boot = self.site.boot
            now = "no boot seen yet" if boot is None else (
                f"the current boot is {boot.status.value}"
                + (f" with {boot.metrics.max_total_num_tokens:,} tokens" if boot.metrics.max_total_num_tokens else ""))
            req = await app.push_screen_wait(TuneScreen(name, now))
            if req is None:
                self.pane.notify("nothing was changed", title=f"{name}: tune cancelled", timeout=4)
                return
            margin = self.site.calculator.graph_margin_gib
            try:
                cmd, boots = await driver.start_state(head.name, head.host, head.backend, boots=head.boots)
                goal = tp.parse_goal(req.goal, req.requests)
                also = tuple(dict.fromkeys(tp.also_name(a) or a.lstrip("-").replace("_", "-") for a in req.also))
                cur = boots[-1] if boots else None
                planner = tp.Planner(cmd.engine, goal, tp.Bounds(max_boots=req.max_boots), also,
                                     kvcalc.DEFAULT_GRAPH_MARGIN_GIB if margin is None else margin,
                                     driver.running_flags(boots, cmd),
                                     cur is not None and cur.status is BootStatus.READY,
                                     None if cur is None else cur.metrics.max_total_num_tokens,
                                     stored=changes.stored_siblings)
            except (service.ServiceError, BackendError, tp.TuneError) as exc:
                await app.push_screen_wait(NoticeScreen(f"Cannot tune {name}", str(exc)))
                return
            first = planner.next(boots, [])
            plan_text = driver.render_plan(name, planner, first, cur)
            if isinstance(first, tp.Stop):
                await app.push_screen_wait(NoticeScreen(f"Nothing to tune on {name}", plan_text, error=not first.met))
                return
            if not await app.push_screen_wait(ConfirmScreen(f"Tune {name}", plan_text, "Tune")):
                self.pane.notify("nothing was changed", title=f"{name}: tune cancelled", timeout=4)
                return
            self.tune_stop = asyncio.Event()
            banner.start(f"tune on {name}", first.why)
            run = driver.TuneRun(name if len(sides) > 1 else head.name, head.host, head.backend, planner,
                                 list(boots), margin_gib=margin, say=self._progress, step_say=self._progress,
                                 clock=self.site.clock, stop=self.tune_stop, history=self._history(),
                                 nodes=sides if len(sides) > 1 else [], hang_s=self.hang_s)
            result = await driver.tune(run)
            self.last_tune = result
            verdict = "goal met" if result.met else ("stopped" if result.interrupted else "goal not met")
            detail = [driver.TABLE_HEAD, *(driver.table_row(s) for s in result.steps), result.reason]
            if result.rolled_back:
                detail.append(result.rolled_back)
            severity: Severity = "ok" if result.met else ("warning" if result.code in (1, 5) else "failed")
            banner.finish(severity, f"{name}: tune: {verdict}" + (f"; running {result.final}" if result.final else ""),
                          detail)
        finally:
            self.tune_stop = None
            self._end(gen)


def nodes_headline(out: ApplyOutcome) -> str:
    """How a change of several nodes ended (``out``: node 0's outcome), after "apply on r1: "."""
    if out.status in ("error", "refused"):
        return "not done"
    silent = out.probe is not None and not out.probe.ok
    head = changes.NOT_ANSWERING if silent else {0: "ready on every node", 1: "the new boot failed",
                                                 5: "timed out"}.get(out.code, f"exit {out.code}")
    return head + ("; every node rolled back to the previous flags" if out.rolled_back else "")


OUTCOME_WORDS = ("ready on all", "failed", "hang:", "edit not in effect", "argument dump", "timed out", "refused",
                 "1-token", "not serving", "not probed")


def outcome_lines(said: Sequence[str], n: int = 4) -> list[str]:
    """What a change's outcome shows under its headline: the lines that say how it ended (the
    failure, the hang, the dump check), else the last ones."""
    key = [ln for ln in said if any(w in ln for w in OUTCOME_WORDS)]
    return (key or list(said))[-n:]
