"""The guarded service as the CLI and the console use it: ``kvtui.hosts.service`` (which speaks
only to the host's ``HostOps`` and knows neither the calculator nor the monitor) with kvtui's
calculator (``kvtui.kvcalc``) and the host's boots (``kvtui.monitor.read_boots``) wired in.

``plan_apply`` / ``plan_rollback`` here predict as ``kvtui calc`` would; every other name is the
service's own (``execute``, ``restart``, ``ServiceError``, ``ApplyPlan``, …: ``__getattr__``)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvtui import kvcalc
from kvtui.boot import Boot
from kvtui.engines.events import Engine
from kvtui.hosts import service
from kvtui.hosts.backend import HostBackend
from kvtui.hosts.service.model import EditsFor, Forecast
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


# the service's planners with the calculator and the boot reader: the same arguments otherwise
plan_apply = functools.partial(service.plan_apply, calculator=calculate, read_boots=host_boots)
plan_rollback = functools.partial(service.plan_rollback, calculator=calculate)


def __getattr__(name: str) -> Any:
    """Any other name of the service (its private helpers too, for tests)."""
    return getattr(service, name)


__all__ = ["calculate", "host_boots", "plan_apply", "plan_rollback"]
