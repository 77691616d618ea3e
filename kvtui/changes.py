"""The guarded service as the CLI and the console use it: ``kvtui.hosts.service`` (which speaks
only to the host's ``HostOps`` and knows neither the calculator nor the monitor) with kvtui's
calculator (``kvtui.kvcalc``) and the host's boots (``kvtui.monitor.read_boots``) wired in.

``plan_apply`` / ``plan_rollback`` here predict as ``kvtui calc`` would; every other name is the
service's own (``execute``, ``restart``, ``ServiceError``, ``ApplyPlan``, …)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kvtui import envedit as ev
from kvtui import flags as fl
from kvtui import kvcalc
from kvtui.boot import Boot
from kvtui.engines.events import Engine
from kvtui.hosts import service
from kvtui.hosts.backend import HostBackend
from kvtui.hosts.service import (  # the service's names, as its callers know them
    BACKUP_MARK,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    PRE_ROLLBACK,
    ApplyOutcome,
    ApplyPlan,
    BootFollower,
    BootReader,
    Calculator,
    FlagSource,
    Forecast,
    HostOps,
    PlanStep,
    ProgressFn,
    Refusal,
    RestartPlan,
    ServiceError,
    ShellOps,
    backup_name,
    backup_sort_key,
    execute,
    list_backups,
    locate_source,
    outcome_headline,
    plan_restart,
    read_remote_file,
    render_plan,
    render_prediction,
    restart,
    restart_unavailable,
    sha256_text,
    split_env_edits,
    unified_diff,
)
from kvtui.hosts.service.model import EditsFor
from kvtui.monitor import read_boots

if TYPE_CHECKING:
    from kvtui.config import HostConfig


def calculate(boots: Sequence[Boot], edits: EditsFor, graph_margin_gib: float | None) -> Forecast | str:
    """``kvtui.hosts.service.Calculator`` by ``kvtui.kvcalc``: the boot ``kvtui calc`` would pick
    (the last that sized its pool, with its same-deployment siblings), calibrated, predicted for
    ``edits(boot)`` with the graph-capture margin (default: the calculator's)."""
    try:
        chosen, others = kvcalc.select_boot(boots, None)
        model = kvcalc.calibrate(chosen, others=others)
        mapping = dict(edits(chosen))
        margin = kvcalc.DEFAULT_GRAPH_MARGIN_GIB if graph_margin_gib is None else graph_margin_gib
        return Forecast(kvcalc.predict(model, mapping, graph_margin_gib=margin), chosen)
    except kvcalc.CalcError as exc:
        return str(exc)


async def host_boots(backend: HostBackend, host: HostConfig, engine: Engine, timeout: float) -> list[Boot]:
    """``kvtui.hosts.service.BootReader`` by ``kvtui.monitor.read_boots``: the host's current boot,
    its engine known from the flags file; gives up on a log that says nothing within 8 s."""
    return await read_boots(backend, timeout=timeout, host=host, engine=engine, first=8.0, start_backend=False)


async def plan_apply(
    name: str,
    host: HostConfig,
    backend: HostBackend,
    edits: Sequence[fl.Edit],
    *,
    restart: bool = False,
    force: bool = False,
    rollback_on_failure: bool = False,
    timeout: float = 1800.0,
    graph_margin_gib: float | None = None,
    boot: Boot | None = None,
    boots: Sequence[Boot] | None = None,
    predict: bool = True,
    boots_timeout: float = 20.0,
    clock: Callable[[], float] | None = None,
    env_edits: Sequence[ev.EnvEdit] = (),
) -> ApplyPlan:
    """``kvtui.hosts.service.plan_apply`` with kvtui's calculator and boot reader."""
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    return await service.plan_apply(
        name, host, backend, edits, restart=restart, force=force, rollback_on_failure=rollback_on_failure,
        timeout=timeout, graph_margin_gib=graph_margin_gib, boot=boot, boots=boots, predict=predict,
        boots_timeout=boots_timeout, env_edits=env_edits, calculator=calculate, read_boots=host_boots, **extra,
    )


async def plan_rollback(
    name: str,
    host: HostConfig,
    backend: HostBackend,
    *,
    to: str | None = None,
    restart: bool = False,
    timeout: float = 1800.0,
    boots: Sequence[Boot] | None = None,
    graph_margin_gib: float | None = None,
    clock: Callable[[], float] | None = None,
) -> ApplyPlan:
    """``kvtui.hosts.service.plan_rollback`` with kvtui's calculator."""
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    return await service.plan_rollback(name, host, backend, to=to, restart=restart, timeout=timeout, boots=boots,
                                       graph_margin_gib=graph_margin_gib, calculator=calculate, **extra)


def __getattr__(name: str) -> Any:
    """Any other name of the service (its private helpers too, for tests)."""
    return getattr(service, name)


__all__ = [
    "BACKUP_MARK",
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "PRE_ROLLBACK",
    "ApplyOutcome",
    "ApplyPlan",
    "BootFollower",
    "BootReader",
    "Calculator",
    "Engine",
    "FlagSource",
    "Forecast",
    "HostOps",
    "PlanStep",
    "ProgressFn",
    "Refusal",
    "RestartPlan",
    "ServiceError",
    "ShellOps",
    "backup_name",
    "backup_sort_key",
    "calculate",
    "execute",
    "host_boots",
    "list_backups",
    "locate_source",
    "outcome_headline",
    "plan_apply",
    "plan_restart",
    "plan_rollback",
    "read_remote_file",
    "render_plan",
    "render_prediction",
    "restart",
    "restart_unavailable",
    "sha256_text",
    "split_env_edits",
    "unified_diff",
]
