"""``KubeOps``: the guarded service's view of a kube host — for now, one that says why kvtui
neither edits nor restarts a pod (the console shows that reason where it offers apply and
restart; ``apply`` exits 4 with it). The next step replaces ``locate`` / ``write`` /
``issue_restart`` with a patch of the controller's container args (``state.container_args``,
``commands.patch_json`` with a server-side dry run first, ``commands.rollout_status``), refusing
objects that Helm / Argo CD / Flux manage (``state.gitops_manager``) unless forced."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

from kvtui.exits import EXIT_REFUSED
from kvtui.hosts.service.model import ServiceError

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.hosts.backend import HostBackend
    from kvtui.hosts.service.model import ApplyPlan, FlagSource, PlanStep, RestartCall, RestartHow, RestartPlan, Run


def not_built(name: str) -> str:
    return (f"{name}: editing or restarting a kube host is not built yet: change the args of the pod's controller "
            "(its Deployment / StatefulSet / LeaderWorkerSet, or the chart that renders it) and let it roll out")


class KubeOps:
    def __init__(self, backend: HostBackend) -> None:
        self._backend = backend

    @property
    def backend(self) -> HostBackend:
        return self._backend

    @property
    def readonly(self) -> bool:
        return False  # not "readonly = true": the reason is restart_unavailable's / locate's own

    @property
    def login(self) -> str | None:
        return None

    @property
    def settle_s(self) -> float:
        return 0.5

    def _refuse(self) -> NoReturn:
        raise ServiceError(not_built(self._backend.name), EXIT_REFUSED)

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
        return not_built(name)

    def restart_plan(self, plan: RestartPlan) -> None:
        self._refuse()

    def restart_how(self, cmd: Mapping[str, str]) -> RestartHow:
        self._refuse()

    async def issue_restart(self, call: RestartCall) -> None:
        self._refuse()

    async def process_env(self, run: Run) -> list[str]:
        return []
