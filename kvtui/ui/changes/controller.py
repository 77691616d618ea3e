"""The host-changing actions of a host's console (``a`` apply, ``u`` rollback, ``R`` restart,
``D`` demo speed, ``O`` tune, ``ctrl+x`` cancel): ``ChangeController``, owned by ``HostPane``
(``pane.changes``), plans through ``kvtui.changes`` / ``kvtui.tune``, confirms in a dialog, runs
the change in a ``service`` worker of the pane and shows its progress and outcome in the pane's
action banner."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from textual.notifications import SeverityLevel

from kvtui import flags
from kvtui.boot import Boot, BootStatus
from kvtui.config import DEMO_DEFAULT_SPEED
from kvtui.hosts import service
from kvtui.hosts.backend import BackendError
from kvtui.sim.backend import DemoBackend
from kvtui.ui.changes.action import Severity
from kvtui.ui.screens import ApplyScreen, ConfirmScreen, NoticeScreen, TuneScreen
from kvtui.ui.widgets.host import HostBar

if TYPE_CHECKING:
    from kvtui.flags import Edit
    from kvtui.hosts.service import ApplyOutcome, ApplyPlan, Calculator, RestartPlan
    from kvtui.tune.driver import TuneResult
    from kvtui.ui.calc.panel import CalculatorPanel
    from kvtui.ui.host_pane import HostPane


def demo_target(speed: float) -> str:
    """What the header says a demo host is: its speed (``demo ×8``; ``demo ×1 real time``)."""
    return f"demo ×{speed:g}" + (" real time" if speed == 1 else "")


def calculator_edits(calc: CalculatorPanel) -> list[Edit] | str:
    """The flags the user changed in the calculator, as edits of the server's flags file (every
    node's, for a deployment; validated as the calculator validates them), or why there is nothing
    to apply. The host console's ``a`` and the deployment console's ``a`` both use it."""
    from kvtui import kvcalc  # lazy: kvcalc after the first frame (test_ui_startup)

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


class ChangeController:
    """Apply, rollback, restart, demo speed and tune on a pane's host (one at a time: ``busy``).
    It reads the pane's host state (``backend``, ``boot``, ``monitor``, …) and runs its workers on
    the pane (group ``service``)."""

    def __init__(self, pane: HostPane) -> None:
        self.pane = pane
        self.host_name = pane.host_name
        self.busy: str | None = None  # the host-changing action running ("an apply", …)
        self.tune_stop: asyncio.Event | None = None  # set: the running tune stops after its step
        self.last_tune: TuneResult | None = None
        self._busy_gen = 0  # bumped by each change begun or cancelled (see ``_end``)
        self.restart_issued = False  # the running change reached its restart step
        self._written = False  # the running change wrote the flags file
        self.last_outcome: ApplyOutcome | None = None

    # ---- changing the host: a / u / R, through kvtui.hosts.service -------------------------------

    def can_restart(self) -> bool | None:
        """False: hidden (readonly); None: shown but unavailable; True: available."""
        if self.pane.readonly:
            return False
        return None if service.restart_unavailable(self.host_name, self.pane.spec.config, self.pane.backend) else True

    def rollback_default(self) -> tuple[bool, str]:
        """The automatic-rollback toggle's default, and why: on when the running boot is ready
        (the current flags are known to work, so going back restores service), off otherwise
        (going back would restart into flags that have not produced a ready boot)."""
        boot = self.pane.boot
        if boot is not None and boot.status is BootStatus.READY:
            return True, ("on by default: the running boot is ready with the current flags, so going back to "
                          "them restores service")
        state = "no boot seen" if boot is None else f"the current boot is {boot.status.value}"
        return False, (f"off by default: {state}, so the current flags are not known to work (going back "
                       "would restart into them)")

    def _begin(self, what: str) -> int | None:
        """Mark ``what`` as running; its number (its worker hands it to ``_end``), or None when
        another change runs or the host is not reached."""
        if self.busy is not None:
            self.pane.notify(f"{self.busy} in progress on {self.host_name}: wait for it to end, or cancel it (ctrl+x)",
                             severity="warning", timeout=4)
            return None
        if self.pane.backend is None:
            self.pane.notify(f"{self.host_name} is not connected yet", severity="warning", timeout=4)
            return None
        self.busy = what
        self._keys_changed()
        self._busy_gen += 1
        self.restart_issued = False
        self._written = False
        return self._busy_gen

    def _end(self, gen: int) -> None:
        """A worker is done: it no longer holds the host (unless it was cancelled and another
        change began since)."""
        if gen == self._busy_gen:
            self.busy = None
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
        self.pane.action_banner.progress(line)

    def cancel_change(self) -> str | None:
        """``ctrl+x``: stop the running apply, rollback or restart — before its restart step it is
        cancelled (what was written is said); after it, kvtui stops following (the new boot goes on
        and the log shows it). What the banner says, or None when nothing runs."""
        if self.busy is None:
            return None
        what = self.busy.removeprefix("an ").removeprefix("a ")
        if self.restart_issued:
            headline = f"{what} on {self.host_name}: no longer followed"
            detail = ["the restart was issued and goes on on the host; the log and the boot panel show the new boot"]
        elif self._written:
            headline = f"{what} on {self.host_name} cancelled before the restart"
            detail = ["the new flags are written but not running: R restarts into them, u rolls them back"]
        else:
            headline = f"{what} on {self.host_name} cancelled"
            detail = ["nothing was restarted; a write under way either finished whole or left the file as it was "
                      "(written atomically)"]
        self._busy_gen += 1  # the cancelled worker's end no longer frees the host: it is free now
        self.busy = None
        self.pane.workers.cancel_group(self.pane, "service")
        self.pane.action_banner.finish("warning", headline, detail)
        return headline

    def _calculator_for_apply(self) -> Calculator:
        """What predicts the apply's flags: the calculator's own model for a serving boot whose start
        is not in the log (the history's boot of its flags, or its config.json at the estimated
        pool: the log has no pool line to calibrate from), else ``changes.calculate``."""
        from kvtui import changes, kvcalc  # lazy: imports kvcalc (test_ui_startup)

        boot, model = self.pane.boot, self.pane.calculator.model
        if boot is not None and boot.start_missing is not None and model is not None and not kvcalc.sized_pool(boot):
            return changes.calculate_on(model, boot)
        return changes.calculate

    def _known_boots(self) -> list[Boot] | None:
        return list(self.pane.monitor.tracker.boots) if self.pane.monitor is not None else None

    def start_apply(self) -> None:
        """``a``: plan the calculator's edits, confirm, apply and restart."""
        if self.pane.readonly:
            return
        edits = calculator_edits(self.pane.calculator)
        if isinstance(edits, str):
            self.pane.notify(edits, severity="warning", timeout=5)
            return
        gen = self._begin("an apply")
        if gen is not None:
            self.pane.run_worker(self._apply_worker(edits, gen), name="_apply_worker", group="service",
                                 description="apply", exit_on_error=False)

    def start_rollback(self) -> None:
        """``u``: restore the newest backup of the flags file, confirm, restart."""
        gen = None if self.pane.readonly else self._begin("a rollback")
        if gen is not None:
            self.pane.run_worker(self._rollback_worker(gen), name="_rollback_worker", group="service",
                                 description="rollback", exit_on_error=False)

    def toggle_demo_speed(self) -> None:
        """``D``: a demo host's simulation restarts in real time (×1), or at its configured speed
        again (the default speed when real time is what is configured)."""
        backend, cfg = self.pane.backend, self.pane.spec.config
        if not isinstance(backend, DemoBackend) or not cfg.demo or self.pane.readonly:
            return
        if self.busy is not None:
            self.pane.notify(f"{self.busy} in progress on {self.host_name}: the speed can change after it",
                             severity="warning", timeout=4)
            return
        configured = cfg.demo_speed
        fast = configured if configured != 1 else DEMO_DEFAULT_SPEED
        backend.speed = 1.0 if backend.speed != 1 else fast
        self.pane.info = replace(self.pane.info, target=demo_target(backend.speed))
        bar = self.pane.query_one(HostBar)
        bar.info = self.pane.info
        bar.refresh()
        plan = service.plan_restart(self.host_name, self.pane.spec.config, backend)
        if plan.refused:
            self.pane.notify(plan.refusals[0].reason, title="demo speed", severity="warning", timeout=8)
            return
        self.pane.notify(f"{self.host_name}: the simulation restarts at ×{backend.speed:g}"
                         + (" (real time)" if backend.speed == 1 else ""), title="demo speed", timeout=4)
        self.start_restart(plan)

    def start_restart(self, plan: RestartPlan) -> None:
        """``R`` (after its confirm): restart through the service layer."""
        gen = None if self.pane.readonly else self._begin("a restart")
        if gen is not None:
            self.pane.run_worker(self._restart_worker(plan, gen), name="_restart_worker", group="service",
                                 description="restart", exit_on_error=False)

    async def _apply_worker(self, edits: list[Edit], gen: int) -> None:
        from kvtui import changes  # lazy: imports kvcalc (test_ui_startup)

        backend = self.pane.backend
        assert backend is not None
        banner = self.pane.action_banner
        try:
            banner.start(f"apply on {self.host_name}", "reading the server's flags…")
            try:
                plan = await changes.plan_apply(
                    self.host_name, self.pane.spec.config, backend, edits, restart=True, boots=self._known_boots(),
                    graph_margin_gib=self.pane.calc_config.graph_margin_gib, clock=self.pane.clock,
                    calculator=self._calculator_for_apply(),
                )
            except service.ServiceError as exc:
                banner.stop()
                await self.pane.app.push_screen_wait(NoticeScreen(f"Cannot apply on {self.host_name}", str(exc)))
                return
            banner.hide()
            on, why = self.rollback_default()
            decision = await self.pane.app.push_screen_wait(ApplyScreen(plan, rollback_default=on, rollback_why=why))
            if decision is None:
                banner.stop()
                self.pane.notify("nothing was changed", title=f"{self.host_name}: apply cancelled", timeout=4)
                return
            plan.force = decision.force
            plan.rollback_on_failure = decision.rollback_on_failure
            await self._execute(plan)
        finally:
            self._end(gen)

    async def _rollback_worker(self, gen: int) -> None:
        from kvtui import changes  # lazy: imports kvcalc (test_ui_startup)

        backend = self.pane.backend
        assert backend is not None
        banner = self.pane.action_banner
        try:
            banner.start(f"rollback on {self.host_name}", "looking for kvtui's backups…")
            try:
                plan = await changes.plan_rollback(self.host_name, self.pane.spec.config, backend, restart=True,
                                                   boots=self._known_boots(),
                                                   graph_margin_gib=self.pane.calc_config.graph_margin_gib,
                                                   clock=self.pane.clock)
            except service.ServiceError as exc:
                banner.stop()
                await self.pane.app.push_screen_wait(NoticeScreen(f"Cannot roll back {self.host_name}", str(exc)))
                return
            banner.hide()
            decision = await self.pane.app.push_screen_wait(ApplyScreen(plan))
            if decision is None:
                banner.stop()
                self.pane.notify("nothing was changed", title=f"{self.host_name}: rollback cancelled", timeout=4)
                return
            await self._execute(plan)
        finally:
            self._end(gen)

    async def _execute(self, plan: ApplyPlan) -> None:
        backend = self.pane.backend
        assert backend is not None
        verb = "apply" if plan.action == "apply" else "rollback"
        self.pane.action_banner.start(f"{verb} on {self.host_name}")
        outcome = await service.execute(plan, backend, self._progress, clock=self.pane.clock)
        self.last_outcome = outcome
        if plan.restart and outcome.boot is not None:  # the history keeps the edit, prediction and outcome
            from kvtui.changes import record_restart  # lazy: imports kvcalc (test_ui_startup)

            cfg = getattr(getattr(self.pane.app, "config", None), "history", None)
            await asyncio.to_thread(record_restart, plan, outcome, cfg)
        self._show_outcome(service.outcome_headline(outcome, plan.action, plan.name), outcome, verb)

    def _show_outcome(self, headline: str, outcome: ApplyOutcome, verb: str) -> None:
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
        self.pane.action_banner.finish(severity, headline, detail)
        toast: SeverityLevel = "information" if severity == "ok" else (
            "warning" if severity == "warning" else "error")
        self.pane.notify("\n".join([headline, *outcome.reality]), title=f"{self.host_name}: {verb}", severity=toast,
                         timeout=8 if severity == "ok" else 15)

    # ---- tune (O) -------------------------------------------------------------------------------

    def start_tune(self) -> None:
        """``O``: the tune dialog, then the plan to confirm, then the loop (``kvtui.tune``)."""
        gen = None if self.pane.readonly else self._begin("a tune")
        if gen is not None:
            self.pane.run_worker(self._tune_worker(gen), name="_tune_worker", group="service",
                                 description="tune", exit_on_error=False)

    def stop_tune(self) -> bool:
        """``Esc`` while a tune runs: it stops after the step in progress. True when one runs."""
        if self.busy != "a tune" or self.tune_stop is None:
            return False
        if not self.tune_stop.is_set():
            self.tune_stop.set()
            self.pane.notify("the tune stops after the step in progress (ctrl+x interrupts it)",
                             title=f"{self.host_name}: tune", timeout=6)
        return True

    async def _tune_worker(self, gen: int) -> None:
        from kvtui import changes, kvcalc  # lazy: kvcalc after the first frame (test_ui_startup)
        from kvtui.tune import driver  # lazy: imports kvcalc (test_ui_startup)
        from kvtui.tune import planner as tp  # lazy: imports kvcalc (test_ui_startup)

        backend = self.pane.backend
        assert backend is not None
        banner = self.pane.action_banner
        try:
            boot = self.pane.boot
            now = "no boot seen yet" if boot is None else (
                f"the current boot is {boot.status.value}"
                + (f" with {boot.metrics.max_total_num_tokens:,} tokens" if boot.metrics.max_total_num_tokens else ""))
            req = await self.pane.app.push_screen_wait(TuneScreen(self.host_name, now))
            if req is None:
                self.pane.notify("nothing was changed", title=f"{self.host_name}: tune cancelled", timeout=4)
                return
            try:
                cmd, boots = await driver.start_state(self.host_name, self.pane.spec.config, backend,
                                                      boots=self._known_boots())
                goal = tp.parse_goal(req.goal, req.requests)
                also = tuple(dict.fromkeys(tp.also_name(a) or a.lstrip("-").replace("_", "-") for a in req.also))
                cur = boots[-1] if boots else None
                margin = self.pane.calc_config.graph_margin_gib
                planner = tp.Planner(cmd.engine, goal, tp.Bounds(max_boots=req.max_boots), also,
                                     kvcalc.DEFAULT_GRAPH_MARGIN_GIB if margin is None else margin,
                                     driver.running_flags(boots, cmd),
                                     cur is not None and cur.status is BootStatus.READY,
                                     None if cur is None else cur.metrics.max_total_num_tokens,
                                     stored=changes.stored_siblings)
            except (service.ServiceError, BackendError, tp.TuneError) as exc:
                await self.pane.app.push_screen_wait(NoticeScreen(f"Cannot tune {self.host_name}", str(exc)))
                return
            first = planner.next(boots, [])
            plan_text = driver.render_plan(self.host_name, planner, first, cur)
            if isinstance(first, tp.Stop):
                await self.pane.app.push_screen_wait(NoticeScreen(f"Nothing to tune on {self.host_name}", plan_text,
                                                                  error=not first.met))
                return
            if not await self.pane.app.push_screen_wait(ConfirmScreen(f"Tune {self.host_name}", plan_text, "Tune")):
                self.pane.notify("nothing was changed", title=f"{self.host_name}: tune cancelled", timeout=4)
                return
            self.tune_stop = asyncio.Event()
            banner.start(f"tune on {self.host_name}", first.why)
            run = driver.TuneRun(self.host_name, self.pane.spec.config, backend, planner, list(boots),
                                 margin_gib=self.pane.calc_config.graph_margin_gib, say=self._progress,
                                 step_say=self._progress, clock=self.pane.clock, stop=self.tune_stop,
                                 history=getattr(getattr(self.pane.app, "config", None), "history", None))
            result = await driver.tune(run)
            self.last_tune = result
            head = "goal met" if result.met else ("stopped" if result.interrupted else "goal not met")
            detail = [driver.TABLE_HEAD, *(driver.table_row(s) for s in result.steps), result.reason]
            if result.rolled_back:
                detail.append(result.rolled_back)
            severity: Severity = "ok" if result.met else ("warning" if result.code in (1, 5) else "failed")
            banner.finish(severity, f"{self.host_name}: tune: {head}"
                          + (f"; running {result.final}" if result.final else ""), detail)
        finally:
            self.tune_stop = None
            self._end(gen)

    async def _restart_worker(self, plan: RestartPlan, gen: int) -> None:
        backend = self.pane.backend
        assert backend is not None
        try:
            self.pane.action_banner.start(f"restart on {self.host_name}")
            outcome = await service.restart(plan, backend, self._progress, clock=self.pane.clock)
            self.last_outcome = outcome
            if outcome.code == 0:
                self.pane.action_banner.stop()
                self.pane.notify(f"{self.host_name}: restarted — following the new boot; the log marks it",
                                 title=f"{self.host_name}: restart")
            else:
                self._show_outcome(service.outcome_headline(outcome, "restart", self.host_name), outcome, "restart")
        finally:
            self._end(gen)
