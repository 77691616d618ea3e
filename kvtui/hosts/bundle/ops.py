"""``BundleOps``: the guarded service's view of a recorded boot — it refuses every edit, backup,
rollback and restart with one reason (the console shows it where it offers them; ``EXIT_REFUSED``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from kvtui.exits import EXIT_REFUSED
from kvtui.hosts.service.model import ServiceError

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.hosts.backend import HostBackend
    from kvtui.hosts.service.model import ApplyPlan, FlagSource, PlanStep, RestartCall, RestartHow, RestartPlan, Run



def read_only_reason(name: str, path: Path) -> str:
    return (f"{name} is a recorded boot (bundle {path.name}), read-only: nothing to edit or restart — "
            "apply the change on the live host (kvtui connect HOST)")


class BundleOps:
    def __init__(self, backend: HostBackend) -> None:
        self._backend = backend

    @property
    def backend(self) -> HostBackend:
        return self._backend

    def _reason(self) -> str:
        return read_only_reason(self._backend.name, Path(getattr(self._backend, "path", "bundle")))

    @property
    def readonly(self) -> bool:
        return False  # the reason is restart_unavailable's / locate's own, not "readonly = true"

    @property
    def login(self) -> str | None:
        return None

    @property
    def settle_s(self) -> float:
        return 0.0

    def _refuse(self) -> NoReturn:
        raise ServiceError(self._reason(), EXIT_REFUSED)

    async def locate(self, name: str, host: HostConfig) -> FlagSource:
        self._refuse()

    async def list_backups(self, host: HostConfig, source: FlagSource) -> list[str]:
        self._refuse()

    def taken_names(self, source: FlagSource) -> list[str]:
        return []

    async def read_copy(self, host: HostConfig, path: str) -> str:
        self._refuse()

    async def copy_sha256(self, host: HostConfig, path: str) -> str:
        return ""

    def edit_steps(self, plan: ApplyPlan) -> tuple[list[PlanStep], dict[str, str]]:
        self._refuse()

    async def write(self, run: Run, saved: str) -> None:
        self._refuse()

    async def restore(self, run: Run, saved: str, why: str) -> None:
        self._refuse()

    def restart_unavailable(self, name: str, host: HostConfig) -> str | None:
        return self._reason()

    def restart_plan(self, plan: RestartPlan) -> None:
        self._refuse()

    def restart_how(self, cmd: Mapping[str, str]) -> RestartHow:
        self._refuse()

    async def issue_restart(self, call: RestartCall) -> None:
        self._refuse()

    async def process_env(self, run: Run) -> list[str]:
        return []
