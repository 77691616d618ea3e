"""Carrying out a plan: write through the host's ``HostOps`` (check, back up, write, verify),
restart and follow the new boot, check the edits are in effect, roll back on failure when asked,
and audit every attempt — ``execute`` (an apply or rollback) and ``restart`` (the console's ``R``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kvtui import audit
from kvtui import flags as fl
from kvtui.boot import Boot, BootStatus
from kvtui.config import SshHost
from kvtui.engines.events import FailureKind
from kvtui.engines.orphans import hint_text
from kvtui.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED, EXIT_TIMEOUT
from kvtui.hosts.backend import HostBackend
from kvtui.hosts.orphans import host_orphans
from kvtui.hosts.probe import ProbeResult, boot_port, mark_not_serving, not_probed_reason, probe, served_model
from kvtui.hosts.service.follow import RestartFailed, boot_result, follow_restart, timed_out
from kvtui.hosts.service.model import (
    DEFAULT_STOP_WAIT_S,
    ApplyOutcome,
    ApplyPlan,
    EtaFn,
    ProgressFn,
    RestartCall,
    RestartPlan,
    Run,
    Say,
    ServiceError,
)
from kvtui.hosts.service.plan import CPU_KV_SPACE_ENV, engine_of, unit_name
from kvtui.hosts.service.prepare import plan_rollback, refuse_orphans
from kvtui.hosts.service.render import reality

if TYPE_CHECKING:
    from kvtui.config import HostConfig


async def execute(
    plan: ApplyPlan,
    backend: HostBackend,
    progress: ProgressFn | None = None,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    stop_wait_s: float = DEFAULT_STOP_WAIT_S,
    settle_s: float | None = None,
    heartbeat: ProgressFn | None = None,
    eta: EtaFn | None = None,
) -> ApplyOutcome:
    """Carry out a plan (see ``kvtui.hosts.service``). Never raises for a host-side failure: the
    outcome says what happened and in which state the host was left; every attempt is audited.
    ``heartbeat`` gets a line saying where the restart is (the new boot's phase and progress)
    whenever nothing was said for ``fmt.HEARTBEAT_S`` while it waits (the CLI's stderr), with the
    new boot's ETA from ``eta`` (the caller's: ``kvtui.history.eta``) when it has one."""
    run = Run(plan, backend.service_ops(), Say(progress, heartbeat, eta), clock, sleep, stop_wait_s, settle_s)
    if plan.refused:
        out = ApplyOutcome(EXIT_REFUSED, "refused", [f"refused: {r.reason}" for r in plan.blocking])
        _audit(run, out)
        return out
    if not plan.changed:
        out = ApplyOutcome(EXIT_OK, "unchanged", [f"{plan.source.path} already says this; nothing to do"])
        if plan.restart:
            out.messages.append("not restarting: nothing changed")
        return out
    try:
        out = await _execute(run)
    except ServiceError as exc:
        out = ApplyOutcome(exc.code, "error", [*run.say.log, str(exc)], backup_path=plan.saved_copy)
    except asyncio.CancelledError:
        out = ApplyOutcome(EXIT_INTERRUPTED, "error", [*run.say.log, "interrupted"], backup_path=plan.saved_copy)
        _audit(run, out)
        raise
    _audit(run, out)
    return out


async def _execute(run: Run) -> ApplyOutcome:
    plan, say = run.plan, run.say
    saved = plan.saved_copy
    await run.ops.write(run, saved)
    what = "rolled back to " + plan.backup_path if plan.action == "rollback" else "written"
    say(f"{plan.source.path}: {what}; the previous version is saved as {saved}")
    if not plan.restart:
        if getattr(run.ops, "restarts_on_write", False):  # kube: the patched template rolls the pod out
            say("not followed: the controller rolls the pod out now (--restart follows the new boot)")
            return ApplyOutcome(EXIT_OK, "rolling", list(say.log), backup_path=saved)
        hint = "restart the server for it to take effect" if plan.action == "apply" else "restart to use it"
        say(f"not restarted: {hint}")
        return ApplyOutcome(EXIT_OK, "written", list(say.log), backup_path=saved)
    boot, code, status = await _restart_and_follow(run)
    probed = await _prove_ready(run, boot) if status == "ready" and boot is not None else None
    if probed is not None and not probed.ok:
        code, status = EXIT_FAILED, "failed"
    out = ApplyOutcome(code, status, list(say.log), backup_path=saved, boot=boot, probe=probed)
    if boot is not None and plan.prediction is not None:
        out.reality = reality(plan, boot)
    if code != EXIT_OK and plan.rollback_on_failure and plan.action == "apply":
        out = await _auto_rollback(run, out)
    return out


async def _restart_and_follow(run: Run) -> tuple[Boot | None, int, str]:
    plan, ops, say = run.plan, run.ops, run.say
    call = RestartCall(ops.restart_how(plan.cmd), plan.cmd, unit_name(plan), say, plan.timeout, run.sleep, run.clock,
                       run.stop_wait_s, say.heartbeat)
    try:
        follower, boot = await follow_restart(
            ops.backend, plan.engine, say, lambda: ops.issue_restart(call),
            timeout=plan.timeout, expect=plan.edits,
            settle=run.settle_s if run.settle_s is not None else ops.settle_s,
            heartbeat=say.heartbeat, stopped=call.stopped, eta=say.eta,
        )
    except RestartFailed as exc:
        raise ServiceError(
            f"{exc.error}; the new flags are written (previous version: {plan.saved_copy}) but the server was not "
            f"restarted with them: restart it, or run 'kvtui rollback {plan.name}'",
            exc.error.code,
        ) from exc.error
    if boot is None:
        return timed_out(say, follower, plan.timeout)
    problems = fl.check_dump(plan.engine, boot.flags, plan.edits) if boot.flags else []
    if not boot.flags:
        say("note: the new boot printed no argument dump; the edit was checked in systemd/the file only")
    if problems:
        say("edit not in effect: " + "; ".join(problems))
        return boot, EXIT_FAILED, "not_in_effect"
    if boot.flags:
        say("the new boot's own argument dump carries the edits")
    if plan.env_edits and boot.status is BootStatus.READY:
        env_problems = await _check_server_env(run, boot)
        if env_problems:
            say("environment not in effect: " + "; ".join(env_problems))
            return boot, EXIT_FAILED, "not_in_effect"
    unsettled = await _rollout_settled(ops, say, boot)
    result = unsettled or boot_result(say, boot)
    await name_orphans(say, ops.backend, boot)
    return result


async def name_orphans(say: ProgressFn, backend: HostBackend, boot: Boot) -> None:
    """A boot that failed for memory other processes hold (``gpu_busy``): the orphaned engine
    processes of a previous boot among them, with the command to end them (issue 24)."""
    if boot.failure is None or boot.failure.kind is not FailureKind.GPU_BUSY:
        return
    found = await host_orphans(backend)
    if found:
        say(f"hint: {hint_text(found)}")


async def _rollout_settled(ops: object, say: ProgressFn, boot: Boot) -> tuple[Boot, int, str] | None:
    """A host whose restart is a rollout (kube: ``KubeOps.rollout_settled``) is ready only once
    the rollout is complete too, not on the new boot's ready line alone; None when it is (or the
    host has no rollout), else the outcome that says why not."""
    settled = getattr(ops, "rollout_settled", None)
    if boot.status is not BootStatus.READY or settled is None:
        return None
    problem = await settled(say)
    if problem is None:
        return None
    timeout = "timed out" in problem
    say(f"the new boot says ready but the rollout did not complete: {problem}")
    return boot, EXIT_TIMEOUT if timeout else EXIT_FAILED, "timeout" if timeout else "failed"


async def _prove_ready(run: Run, boot: Boot) -> ProbeResult | None:
    """The log says ready: ask the server for one token, as ``kvtui wait`` does (``probe = false``
    turns it off; a boot naming no port, or a host that cannot reach it, is ready on the log's
    word). No answer within the timeout: the boot is failed, ``not_serving``."""
    host = run.plan.host
    why = not_probed_reason(run.ops.backend, boot.flags, enabled=getattr(host, "probe", True))
    if why is not None:
        if why.startswith("this kind of host"):
            run.say(why)
        return None
    port = boot_port(boot.flags)
    assert port is not None
    run.say(f"the log says ready; asking the server on port {port} for one token")
    res = await probe(run.ops.backend, port, model=getattr(host, "probe_model", None) or served_model(boot.flags),
                      timeout=max(1.0, min(run.plan.timeout, run.plan.probe_timeout)))
    if res.ok:
        run.say(f"✔ {res.headline()}")
        return res
    mark_not_serving(boot, res)
    run.say(f"✘ {res.headline()}: the new boot is failed (not_serving)")
    return res


async def _check_server_env(run: Run, boot: Boot) -> list[str]:
    """The new boot runs with the environment edits: where the engine prints the value (vLLM's
    CPU KV pool, ``Explicitly set (X/…) GiB for KV cache``), and in the environment the new server
    process started with (the host's ``process_env``)."""
    plan, say = run.plan, run.say
    problems: list[str] = []
    space = next((e for e in plan.env_edits if e.name == CPU_KV_SPACE_ENV and e.value is not None), None)
    kv = boot.metrics.kv_cache_gib
    if space is not None and space.value is not None and kv is not None and space.value.isdigit():
        if abs(kv - int(space.value)) < 0.05:
            say(f"the new boot sized its CPU KV pool to {kv:g} GiB, as {CPU_KV_SPACE_ENV}={space.value} says")
        else:
            problems.append(f"the new boot sized its CPU KV pool to {kv:g} GiB, not the {space.value} GiB of "
                            f"{CPU_KV_SPACE_ENV}={space.value}")
    problems.extend(await run.ops.process_env(run))
    return problems


async def _auto_rollback(run: Run, out: ApplyOutcome) -> ApplyOutcome:
    plan, say = run.plan, run.say
    say(f"rolling back to {plan.backup_path} (--rollback-on-failure)")
    try:
        rb = await plan_rollback(plan.name, plan.host, run.ops.backend, to=plan.backup_path, restart=True,
                                 timeout=plan.timeout, clock=run.clock, check_orphans=False)
    except ServiceError as exc:
        out.messages.append(f"rollback could not be planned: {exc}")
        return out
    rb_out = await execute(rb, run.ops.backend, say, clock=run.clock, sleep=run.sleep, stop_wait_s=run.stop_wait_s,
                           settle_s=run.settle_s, heartbeat=say.heartbeat, eta=say.eta)
    out.rolled_back = rb_out.status in ("ready", "written")
    tail = ("the previous flags are back and the boot is ready" if rb_out.status == "ready"
            else f"the rollback ended {rb_out.status}")
    out.messages = [*say.log, f"rolled back: {tail}"]
    if rb_out.status != "ready":
        out.messages.extend(rb_out.messages[-3:])
    out.code = EXIT_FAILED if out.code in (EXIT_OK, EXIT_FAILED) else out.code
    return out


async def restart(
    plan: RestartPlan,
    backend: HostBackend,
    progress: ProgressFn | None = None,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    stop_wait_s: float = DEFAULT_STOP_WAIT_S,
    settle_s: float | None = None,
) -> ApplyOutcome:
    """Restart the server as planned; with ``plan.follow`` wait until the new boot is ready or
    failed. Never raises for the host; every attempt is audited (action ``restart``)."""
    say = Say(progress)
    ops = backend.service_ops()
    if not plan.refused and plan.how is not None:
        await refuse_orphans(plan.refusals, backend)
    if plan.refused or plan.how is None:
        out = ApplyOutcome(EXIT_REFUSED, "refused", [f"refused: {r.reason}" for r in plan.blocking])
        _audit_restart(plan, out, clock, ops.login)
        return out
    call = RestartCall(plan.how, plan.cmd, plan.unit, say, plan.timeout, sleep, clock, stop_wait_s)
    try:
        if plan.follow:
            settle = settle_s if settle_s is not None else ops.settle_s
            follower, boot = await follow_restart(backend, engine_of(plan.host), say, lambda: ops.issue_restart(call),
                                                  timeout=plan.timeout, settle=settle, stopped=call.stopped)
            unsettled = await _rollout_settled(ops, say, boot) if boot is not None else None
            boot, code, status = timed_out(say, follower, plan.timeout) if boot is None else (
                unsettled or boot_result(say, boot))
            if boot is not None:
                await name_orphans(say, backend, boot)
            out = ApplyOutcome(code, status, list(say.log), boot=boot)
        else:
            await ops.issue_restart(call)
            say("restarted: a new boot starts")
            out = ApplyOutcome(EXIT_OK, "restarted", list(say.log))
    except RestartFailed as exc:
        out = ApplyOutcome(exc.error.code, "error", [*say.log, str(exc.error)])
    except ServiceError as exc:
        out = ApplyOutcome(exc.code, "error", [*say.log, str(exc)])
    except asyncio.CancelledError:
        _audit_restart(plan, ApplyOutcome(EXIT_INTERRUPTED, "error", [*say.log, "interrupted"]), clock, ops.login)
        raise
    _audit_restart(plan, out, clock, ops.login)
    return out


# -- the audit log -----------------------------------------------------------------------------


def _login(host: HostConfig, ops_login: str | None) -> str | None:
    return (host.ssh_user if isinstance(host, SshHost) else None) or ops_login


def _audit_restart(plan: RestartPlan, out: ApplyOutcome, clock: Callable[[], float], ops_login: str | None) -> None:
    _append({
        "host": plan.name,
        "target": _target(plan.host),
        "action": "restart",
        "file": None,
        "unit": plan.unit,
        "login": _login(plan.host, ops_login if plan.how is not None else None),
        "how": plan.how,
        "commands": [st.command for st in plan.steps if st.command],
        "outcome": out.status,
        "exit": out.code,
        "detail": out.messages[-6:],
    }, clock)


def _audit(run: Run, out: ApplyOutcome) -> None:
    plan = run.plan
    _append({
        "host": plan.name,
        "target": _target(plan.host),
        "action": plan.action,
        "file": plan.source.path,
        "kind": plan.source.kind,
        "unit": plan.source.unit,
        "login": _login(plan.host, run.ops.login),
        "edits": [str(e) for e in [*plan.edits, *plan.env_edits]] if plan.action == "apply" else [],
        "diff": plan.diff,
        "backup": plan.saved_copy,
        "restored_from": plan.backup_path if plan.action == "rollback" else None,
        "restart": plan.restart,
        "forced": bool(plan.force and any(r.forceable for r in plan.refusals)),
        "verdict": plan.verdict,
        "outcome": out.status,
        "exit": out.code,
        "rolled_back": out.rolled_back,
        "detail": out.messages[-6:],
    }, run.clock)


def _append(entry: dict[str, object], clock: Callable[[], float]) -> None:
    with contextlib.suppress(OSError):
        audit.append(entry, now=clock())


def _target(host: HostConfig) -> str:
    try:
        return str(host.target)
    except Exception:  # pragma: no cover - a config without the property
        return ""
