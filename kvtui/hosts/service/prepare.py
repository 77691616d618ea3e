"""Planning: read the effective flags from the host (through its ``HostOps``), make the edit in
memory, attach the calculator's prediction (the ``Calculator`` and ``BootReader`` the caller
passes), and say what would run — ``plan_apply``, ``plan_rollback``, ``plan_restart``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvtui import envedit as ev
from kvtui import flags as fl
from kvtui import fmt
from kvtui.boot import Boot
from kvtui.config import ServerHost
from kvtui.engines.events import Engine
from kvtui.engines.orphans import refusal_text
from kvtui.exits import EXIT_INPUT, EXIT_REFUSED, EXIT_USAGE
from kvtui.hosts.backend import BackendError, HostBackend
from kvtui.hosts.orphans import host_orphans
from kvtui.hosts.service.model import (
    BACKUP_MARK,
    PRE_ROLLBACK,
    ApplyPlan,
    BootReader,
    Calculator,
    FlagSource,
    HostOps,
    PlanStep,
    Refusal,
    RestartPlan,
    ServiceError,
)
from kvtui.hosts.service.plan import (
    CPU_KV_SPACE_ENV,
    backup_name,
    edits_between,
    env_rollback_changes,
    needs_release,
    prediction_edits,
    readonly_reason,
    refuse_unknown_flags,
    rollback_changes,
    running_dump,
    split_env_edits,
    unified_diff,
)
from kvtui.hosts.service.shell import ShellOps, config_restart_unavailable
from kvtui.knobs import EDITABLE_FLAGS

if TYPE_CHECKING:
    from kvtui.config import HostConfig


async def locate_source(name: str, host: HostConfig, backend: HostBackend) -> FlagSource:
    """Find the file that holds the flags the server will run with, and read it."""
    return await backend.service_ops().locate(name, host)


async def read_remote_file(backend: HostBackend, path: str, *, sudo: bool = False) -> tuple[str, str]:
    """(text, sha256) of a file on a host that runs shell commands, read exactly."""
    return await ShellOps(backend).read_file(path, sudo=sudo)


async def list_backups(host: HostConfig, backend: HostBackend, source: FlagSource) -> list[str]:
    """kvtui's backups of the source file, oldest first (pre-rollback copies excluded)."""
    return await backend.service_ops().list_backups(host, source)


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
    clock: Callable[[], float] = time.time,
    env_edits: Sequence[ev.EnvEdit] = (),
    calculator: Calculator | None = None,
    read_boots: BootReader | None = None,
) -> ApplyPlan:
    """Read the effective flags, edit them in memory, predict, and say what would run.

    ``env_edits`` set or remove environment variables the server starts with (``kvtui.envedit``);
    an ``Edit`` whose name is an environment variable's (upper case, ``VLLM_CPU_KVCACHE_SPACE``:
    the console's calculator) is one too.

    ``boots`` (the host's boots as a monitor tracked them, the TUI) or ``boot`` (one boot):
    what the ``calculator`` calibrates from, as ``kvtui calc`` would (the last boot that sized its
    pool, with its same-deployment siblings); without either they are read from the host with
    ``read_boots`` (bounded by ``boots_timeout``). Without a calculator the plan has no prediction
    (``kvtui.changes.plan_apply`` passes kvtui's). Raises ``ServiceError`` for an edit kvtui will
    not make (exit 4) or a host it cannot read (exit 3).
    """
    edits, env_edits = split_env_edits(edits, env_edits)
    if not edits and not env_edits:
        raise ServiceError("nothing to apply: give --set FLAG=VALUE, --unset FLAG, --setenv NAME=VALUE or "
                           "--unsetenv NAME", EXIT_USAGE)
    ops = backend.service_ops()
    source = await ops.locate(name, host)
    wiring = _Wiring(calculator, read_boots, graph_margin_gib, boots_timeout)
    seen: list[Boot] | str | None = list(boots) if boots else ([boot] if boot is not None else None)
    if seen is None and needs_release(source.text, source.kind, edits):
        # a flag added that releases spell differently: the running boot's dump says which spelling
        seen = await _read_host_boots(host, _engine_hint(source), backend, wiring)
    # a host that keeps the environment apart from the text (kube: the container's env list) edits
    # it in its edit_steps; the text gets the flag edits only
    text_env = () if getattr(ops, "env_apart", False) else env_edits
    new_text, engine, changes, warnings = _edit(
        source, edits, text_env, running_dump(seen if isinstance(seen, list) else None, _engine_hint(source)))
    plan = ApplyPlan(
        name=name,
        host=host,
        action="apply",
        source=source,
        engine=engine,
        edits=list(edits),
        new_text=new_text,
        changes=changes,
        warnings=warnings,
        diff=unified_diff(source.text, new_text, source.path),
        backup_path=backup_name(source.path, clock(), ops.taken_names(source)),
        steps=[],
        cmd={},
        force=force,
        restart=restart,
        rollback_on_failure=rollback_on_failure,
        timeout=timeout,
        env_edits=list(env_edits),
    )
    _refuse_readonly(plan, ops)
    plan.steps, plan.cmd = ops.edit_steps(plan)
    await _preview(plan, ops)
    known: list[Boot] | None = seen if isinstance(seen, list) else None
    if isinstance(seen, str):  # read for the spelling already, and could not be: not read twice
        plan.prediction_note = seen
    elif predict and plan.changed:
        known = await _predict(plan, backend, known, wiring)
    refuse_unknown_flags(plan, known)
    if restart:
        await refuse_orphans(plan.refusals, backend)
    return plan


async def refuse_orphans(refusals: list[Refusal], backend: HostBackend) -> None:
    """A restart over orphaned engine processes of the previous boot (``kvtui.hosts.orphans``)
    would fail for their memory: refused (forceable) with their PIDs and the command to end them."""
    found = await host_orphans(backend)
    if found:
        refusals.append(Refusal(refusal_text(found), True))


async def _preview(plan: ApplyPlan, ops: HostOps) -> None:
    """A host whose API can try the write without storing it (kube: a server-side dry run) puts
    its answer in the plan: the diff as that API would store it, or its refusal."""
    preview = getattr(ops, "preview", None)
    if preview is not None:
        await preview(plan)


def _engine_hint(source: FlagSource) -> Engine:
    """The source command's engine (SGLang when it does not parse: ``_edit`` says why)."""
    try:
        return fl.parse_command(source.text, source.kind).engine
    except fl.FlagError:
        return Engine.SGLANG


def _edit(
    source: FlagSource, edits: Sequence[fl.Edit], env_edits: Sequence[ev.EnvEdit], dump: frozenset[str] | None
) -> tuple[str, Engine, list[fl.EditedLine], list[str]]:
    """The source's new text, its engine, the changes and the warnings (``ServiceError`` when
    kvtui will not make the edit). ``dump``: the running boot's argument-dump keys, when known
    (the spelling of a flag added that releases spell differently)."""
    new_text, changes, warnings = source.text, [], []
    try:
        if edits:
            result = fl.apply_edits(source.text, source.kind, edits, dump=dump)
            new_text, engine = result.new_text, result.engine
            changes, warnings = list(result.changes), list(result.warnings)
        else:
            cmd = fl.parse_command(source.text, source.kind)
            engine, warnings = cmd.engine, list(cmd.warnings)
        if env_edits:
            env_result = ev.apply_env_edits(new_text, source.kind, env_edits)
            new_text = env_result.new_text
            changes.extend(env_result.changes)
            warnings.extend(env_result.warnings)
    except fl.NoServerCommand as exc:
        raise ServiceError(f"{source.path}: {exc}", EXIT_INPUT) from exc
    except fl.BadValue as exc:  # malformed as given: a usage error, as in `kvtui calc`
        raise ServiceError(str(exc), EXIT_USAGE) from exc
    except fl.FlagError as exc:
        raise ServiceError(f"{source.path}: {exc}", EXIT_REFUSED) from exc
    return new_text, engine, changes, warnings


def _refuse_readonly(plan: ApplyPlan, ops: HostOps) -> None:
    why = readonly_reason(plan.name, plan.host, ops.readonly)
    if why is not None:
        plan.refusals.append(Refusal(why, False))


class _Wiring:
    """What the caller passed for the prediction."""

    def __init__(self, calculator: Calculator | None, read_boots: BootReader | None, graph_margin_gib: float | None,
                 boots_timeout: float, *, refuse: bool = True) -> None:
        self.calculator = calculator
        self.read_boots = read_boots
        self.graph_margin_gib = graph_margin_gib
        self.boots_timeout = boots_timeout
        self.refuse = refuse


async def _read_host_boots(host: HostConfig, engine: Engine, backend: HostBackend,
                           wiring: _Wiring) -> list[Boot] | str:
    """The host's boots read from its log, or why there are none (the plan's prediction note)."""
    if wiring.read_boots is None:
        return "none: the host's boots cannot be read here"
    try:
        boots = await wiring.read_boots(backend, host, engine, wiring.boots_timeout)
    except (BackendError, TimeoutError) as exc:
        return f"none: cannot read the host's boots ({exc})"
    if not boots:
        return "none: no server boot was found in the host's log to calibrate from"
    return list(boots)


async def _host_boots(plan: ApplyPlan, backend: HostBackend, wiring: _Wiring) -> list[Boot] | None:
    """The host's boots read from its log (None, with the plan's note saying why, when none)."""
    got = await _read_host_boots(plan.host, plan.engine, backend, wiring)
    if isinstance(got, str):
        plan.prediction_note = got
        return None
    return got


async def _predict(
    plan: ApplyPlan, backend: HostBackend, known: list[Boot] | None, wiring: _Wiring
) -> list[Boot] | None:
    """Attach the calculator's prediction (and a refusal on its verdict); the boots it read (or
    was given), None when none could be read."""
    if wiring.calculator is None:
        plan.prediction_note = "the calculator is not available in this build"
        return known
    boots = known or await _host_boots(plan, backend, wiring)
    if boots is None:
        return None
    drift: list[str] = []
    modelled = set(EDITABLE_FLAGS.get(plan.engine, ()))

    def edits_for(chosen: Boot) -> dict[str, object]:
        mapping, drift[:] = prediction_edits(plan, chosen, modelled)
        return mapping

    got = wiring.calculator(boots, edits_for, wiring.graph_margin_gib)
    if isinstance(got, str):
        plan.prediction_note = f"none: {got}"
        return boots
    pred = got.prediction
    for env in plan.env_edits:
        if not (env.name == CPU_KV_SPACE_ENV and plan.engine is Engine.VLLM):
            pred.reasons.append(f"{env.name} is not modelled by the calculator: its effect on memory is not included")
    plan.prediction = pred
    plan.calibration = got.boot
    if drift:
        plan.warnings.append(
            "the running boot used " + ", ".join(drift) + "; the prediction is for what the file will say"
        )
    if wiring.refuse and str(pred.verdict) in ("no_fit", "oom_risk"):
        why = "; ".join(pred.reasons) if pred.reasons else ""
        safe = (f"; the largest safe fraction is {fmt.safe_max(pred.max_safe_fraction)}"
                if pred.max_safe_fraction is not None else "")
        plan.refusals.append(Refusal(f"the calculator predicts {pred.verdict}" + (f": {why}" if why else "") + safe,
                                     True))
    return boots


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
    clock: Callable[[], float] = time.time,
    calculator: Calculator | None = None,
    force: bool = False,
    check_orphans: bool = True,
) -> ApplyPlan:
    """Restore the newest backup of the effective flags file (or ``to``) through the same
    verified path; the current file is saved first as ``<backup name>.pre-rollback``.

    With ``boots`` (the TUI's) and a ``calculator``, the prediction for the restored flags is
    attached (for information: a rollback is never refused on a verdict). With ``restart``, orphaned
    engine processes refuse it unless ``force`` (``check_orphans=False``: the automatic rollback of a
    failed apply, which checked them before its own restart)."""
    ops = backend.service_ops()
    source = await ops.locate(name, host)
    chosen = await _rollback_target(ops, host, source, to)
    btext = await ops.read_copy(host, chosen)
    try:
        old_cmd = fl.parse_command(source.text, source.kind)
        new_cmd = fl.parse_command(btext, source.kind)
    except fl.FlagError as exc:
        raise ServiceError(f"{chosen}: {exc}", EXIT_INPUT) from exc
    edits = edits_between(old_cmd, new_cmd)
    changes = rollback_changes(old_cmd, new_cmd, source.text, btext, edits)
    env_edits = ev.env_between(source.text, btext, source.kind)
    changes.extend(env_rollback_changes(source.text, btext, source.kind, env_edits))
    plan = ApplyPlan(
        name=name,
        host=host,
        action="rollback",
        source=source,
        engine=new_cmd.engine,
        edits=edits,
        new_text=btext,
        changes=changes,
        warnings=[],
        diff=unified_diff(source.text, btext, source.path, new_label=chosen),
        backup_path=chosen,
        steps=[],
        cmd={},
        restart=restart,
        timeout=timeout,
        pre_rollback_path=backup_name(source.path, clock(), ops.taken_names(source)) + PRE_ROLLBACK,
        env_edits=env_edits,
        force=force,
    )
    _refuse_readonly(plan, ops)
    plan.steps, plan.cmd = ops.edit_steps(plan)
    await _preview(plan, ops)
    if boots and plan.changed:
        await _predict(plan, backend, list(boots), _Wiring(calculator, None, graph_margin_gib, 0.0, refuse=False))
    if restart and check_orphans:
        await refuse_orphans(plan.refusals, backend)
    return plan


async def _rollback_target(ops: HostOps, host: HostConfig, source: FlagSource, to: str | None) -> str:
    """The backup a rollback restores: ``to`` (a kvtui backup of the source), else the newest one
    whose content differs from the current file (a backup equal to it — say, left by an apply
    that was rolled back already — would roll back to nothing)."""
    backups = await ops.list_backups(host, source)
    if to is not None:
        want = to if "/" in to else str(Path(source.path).parent / to)
        if not want.startswith(source.path + BACKUP_MARK):
            raise ServiceError(
                f"--to {to}: not a kvtui backup of {source.path} (backups are named {source.path}{BACKUP_MARK}<time>)",
                EXIT_USAGE,
            )
        return want
    if not backups:
        raise ServiceError(f"no kvtui backup of {source.path} to roll back to", EXIT_REFUSED)
    for path in reversed(backups[-20:]):
        if await ops.copy_sha256(host, path) != source.sha256:
            return path
    return backups[-1]


def restart_unavailable(name: str, host: HostConfig, backend: HostBackend | None) -> str | None:
    """Why kvtui cannot restart this host's server (None: it can)."""
    ops = None if backend is None else backend.service_ops()
    why = readonly_reason(name, host, ops is not None and ops.readonly)
    if why is not None:
        return why
    if ops is not None:
        return ops.restart_unavailable(name, host)
    return config_restart_unavailable(name, host) if isinstance(host, ServerHost) else None


def plan_restart(
    name: str, host: HostConfig, backend: HostBackend, *, follow: bool = False, timeout: float = 1800.0
) -> RestartPlan:
    """How this host's server restarts: the demo host's restart, ``systemctl restart UNIT``
    (``sudo -n`` when configured), or stop_command / wait for the GPU memory / start_command
    detached. A host kvtui cannot restart gets a refusal that says why."""
    plan = RestartPlan(name, host, None, [], {}, unit=host.unit, follow=follow, timeout=timeout)
    why = restart_unavailable(name, host, backend)
    if why is not None:
        plan.refusals.append(Refusal(why, False))
        return plan
    backend.service_ops().restart_plan(plan)
    if follow:
        plan.steps.append(PlanStep("follow the new boot until it is ready or failed"))
    return plan
