"""``DemoOps``: the guarded service on the simulated host. The demo's unit file lives in its state
directory (``DemoBackend.unit_path``); backups are copies beside it, written and read directly (a
few KiB, never blocking the loop for long); ``daemon_reload``, the loaded ExecStart and
``restart`` are the simulation's own. The flow and its checks are the service's, as on a real
host, so edits persist in the demo's state and are seen by the next command."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_REFUSED
from kvtui.hosts.backend import BackendError, HostBackend
from kvtui.hosts.service.model import (
    BACKUP_MARK,
    PRE_ROLLBACK,
    ApplyPlan,
    FlagSource,
    PlanStep,
    RestartCall,
    RestartHow,
    RestartPlan,
    Run,
    ServiceError,
)
from kvtui.hosts.service.plan import backup_sort_key, sha256_text
from kvtui.hosts.service.verify import check_execstart, check_text

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.sim.backend import DemoBackend


def _read_local(path: str) -> str:
    """A demo host's file (local, small)."""
    return Path(path).read_text(encoding="utf-8")


def _copy_local(src: str, dest: str) -> bool:
    """Copy a demo host's file keeping its mode and times; False when ``dest`` exists."""
    if Path(dest).exists():
        return False
    shutil.copy2(src, dest)
    return True


def _copies(source: FlagSource) -> list[str]:
    p = Path(source.path)
    return [str(p.parent / x.name) for x in p.parent.glob(p.name + BACKUP_MARK + "*")]


class DemoOps:
    """The ``HostOps`` of a ``DemoBackend``."""

    login = "demo"
    settle_s = 0.05

    def __init__(self, demo: DemoBackend) -> None:
        self._demo = demo

    @property
    def backend(self) -> HostBackend:
        return self._demo

    @property
    def readonly(self) -> bool:
        return self._demo.readonly

    async def locate(self, name: str, host: HostConfig) -> FlagSource:
        text = self._demo.read_unit()
        return FlagSource("unit", str(self._demo.unit_path), text, sha256_text(text), unit=self._demo.unit_name,
                          demo=True, via=("the demo host's unit file",))

    async def list_backups(self, host: HostConfig, source: FlagSource) -> list[str]:
        return sorted((n for n in _copies(source) if not n.endswith(PRE_ROLLBACK)), key=backup_sort_key)

    def taken_names(self, source: FlagSource) -> list[str]:
        return _copies(source)  # backups and pre-rollback copies (local, cheap)

    async def read_copy(self, host: HostConfig, path: str) -> str:
        try:
            return _read_local(path)
        except OSError as exc:
            raise ServiceError(f"cannot read the backup {path}: {exc.strerror or exc}") from exc

    async def copy_sha256(self, host: HostConfig, path: str) -> str:
        return sha256_text(_read_local(path))

    def edit_steps(self, plan: ApplyPlan) -> tuple[list[PlanStep], dict[str, str]]:
        src = plan.source
        steps: list[PlanStep] = []
        if plan.action == "rollback" and plan.pre_rollback_path:
            steps.append(PlanStep(f"save the current unit as {plan.pre_rollback_path}"))
        if plan.action == "apply":
            steps.append(PlanStep(f"back up {src.path} to {plan.backup_path}"))
        steps.append(PlanStep(f"write {src.path} atomically, then re-read it and check the flags"))
        steps.append(PlanStep("daemon-reload, then check the loaded ExecStart carries the new flags"))
        if plan.restart:
            steps.append(PlanStep("restart the unit and follow the new boot"))
        return steps, {}

    async def write(self, run: Run, saved: str) -> None:
        plan, demo, say = run.plan, self._demo, run.say
        src = plan.source
        current = demo.read_unit()
        if sha256_text(current) != src.sha256:
            raise ServiceError(f"{src.path} changed since it was read; nothing was written", EXIT_REFUSED)
        say(f"backing up to {saved}")
        if not _copy_local(src.path, saved):
            raise ServiceError(f"cannot back up {src.path}: {saved} exists; nothing was written", EXIT_INPUT)
        if sha256_text(_read_local(saved)) != src.sha256:
            raise ServiceError(f"the backup {saved} does not equal the file that was read; nothing was written",
                               EXIT_REFUSED)
        say(f"writing {src.path}")
        try:
            demo.write_unit(plan.new_text)
        except BackendError as exc:
            raise ServiceError(f"cannot write {src.path}: {exc}", EXIT_REFUSED) from exc
        back = demo.read_unit()
        problems = check_text(plan, back) if back == plan.new_text else ["differs from what was sent"]
        if problems:
            await self.restore(run, saved, "; ".join(problems))
            raise ServiceError(f"{src.path} did not read back as written; restored from {saved}", EXIT_INPUT)
        say("daemon-reload")
        demo.daemon_reload()
        problems = check_execstart(plan, demo.effective_execstart())
        if problems:
            await self.restore(run, saved, "; ".join(problems))
            raise ServiceError("the loaded ExecStart does not carry the edit: " + "; ".join(problems), EXIT_FAILED)
        say("the loaded ExecStart carries the new flags")

    async def restore(self, run: Run, saved: str, why: str) -> None:
        run.say(f"restoring {run.plan.source.path} from {saved}: {why}")
        self._demo.write_unit(_read_local(saved))
        self._demo.daemon_reload()

    def restart_unavailable(self, name: str, host: HostConfig) -> str | None:
        return None

    def restart_plan(self, plan: RestartPlan) -> None:
        plan.how = "demo"
        plan.steps.append(PlanStep("restart the unit (simulated systemctl restart)"))

    def restart_how(self, cmd: Mapping[str, str]) -> RestartHow:
        return "demo"

    async def issue_restart(self, call: RestartCall) -> None:
        call.say("restarting the unit")
        try:
            self._demo.restart()
        except BackendError as exc:
            raise ServiceError(f"restart failed: {exc}", EXIT_FAILED) from exc

    async def process_env(self, run: Run) -> list[str]:
        run.say("note: the demo host runs no processes: the environment was checked in its unit file")
        return []
