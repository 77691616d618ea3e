"""Carrying out a plan: write through the host's ``HostOps`` (check, back up, write, verify),
restart and follow the new boot, check the edits are in effect, roll back on failure when asked,
and audit every attempt — ``execute_nodes`` (an apply, a rollback, or a plain restart: the
console's ``R``) and ``execute``, its one-node case."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from kvtui import audit
from kvtui import flags as fl
from kvtui.boot import Boot, BootStatus
from kvtui.boot.deployment import DeploymentBoot
from kvtui.config import SshHost
from kvtui.engines.events import FailureKind
from kvtui.engines.orphans import hint_text
from kvtui.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED, EXIT_TIMEOUT
from kvtui.fmt import one_line
from kvtui.hosts.backend import HostBackend
from kvtui.hosts.orphans import host_orphans
from kvtui.hosts.probe import (
    DEFAULT_PROBE_TIMEOUT_S,
    ProbeResult,
    boot_port,
    mark_not_serving,
    not_probed_reason,
    probe,
    served_model,
)
from kvtui.hosts.service.follow import (
    FollowSide,
    RestartFailed,
    boot_result,
    follow_restarts,
    timed_out,
)
from kvtui.hosts.service.model import (
    DEFAULT_STOP_WAIT_S,
    ApplyOutcome,
    ApplyPlan,
    EtaFn,
    HostOps,
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


@dataclass(slots=True)
class Node:
    """One node of a change: its plan (an apply's or rollback's, or a plain restart's), its host's
    backend, where its progress lines go."""

    plan: ApplyPlan | RestartPlan
    backend: HostBackend
    progress: ProgressFn | None = None


async def execute(
    plan: ApplyPlan | RestartPlan,
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
    """Carry out a plan (see ``kvtui.hosts.service``; a ``RestartPlan``: restart the server and, with
    ``plan.follow``, follow the new boot): ``execute_nodes`` of one node."""
    outs = await execute_nodes([Node(plan, backend, progress)], clock=clock, sleep=sleep, stop_wait_s=stop_wait_s,
                               settle_s=settle_s, heartbeat=heartbeat, eta=eta)
    return outs[0]


async def execute_nodes(
    nodes: Sequence[Node],
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    stop_wait_s: float = DEFAULT_STOP_WAIT_S,
    settle_s: float | None = None,
    heartbeat: ProgressFn | None = None,
    eta: EtaFn | None = None,
    hang_s: float = 180.0,
    stage: Callable[[str], None] | None = None,
    proceed: Callable[[], bool] | None = None,
    say: ProgressFn | None = None,
    probe: bool = True,
) -> list[ApplyOutcome]:
    """Carry out the plans of N ≥ 1 nodes as one change, all or nothing (a host is the deployment
    of one node: the same steps): a refusal on any node refuses the whole; every file is written
    and verified (a failed write restores the nodes written before it, nothing restarts); with
    ``restart`` every node is restarted (node 0 first) and the nodes' merged new boot followed
    (``follow_restarts``), each node's argument dump and environment checked, node 0's server
    asked for one token; a failure with ``rollback_on_failure`` (node 0's plan) restores and
    restarts every node. Never raises for a host-side failure: each node's outcome says what
    happened and in which state it was left; every attempt is audited, per node. ``heartbeat``
    gets a line saying where node 0's new boot is whenever nothing was said for
    ``fmt.HEARTBEAT_S`` while it waits (the CLI's stderr), with its ETA from ``eta`` (the
    caller's: ``kvtui.history.eta``). ``stage``: as ``follow_restarts`` says, and ``"write"``;
    ``proceed``, asked once every file is written: False restores them and restarts nothing
    (status ``cancelled``: the console's ctrl+x while the files were written). ``say``: where the
    lines about the whole go (the merged boot's end, the dump check, a hang, the rollback; kept in
    node 0's outcome), default node 0's progress. ``probe``: False takes the log's word for ready.
    Plain restarts (``RestartPlan``s, every node's: the console's ``R``) take the same steps
    without the files (``_restart``)."""
    says = [Say(n.progress, heartbeat, eta) for n in nodes]
    whole = says[0]
    if say is not None:
        whole = Say(say, heartbeat, eta)
        whole.log = says[0].log  # kept with node 0's lines
    restarts = [n.plan for n in nodes if isinstance(n.plan, RestartPlan)]
    if restarts:
        return await _restart(nodes, restarts, says, whole, clock=clock, sleep=sleep, stop_wait_s=stop_wait_s,
                              settle_s=settle_s, hang_s=hang_s, stage=stage, probe=probe)
    runs = [Run(p, n.backend.service_ops(), s, clock, sleep, stop_wait_s, settle_s)
            for n, s, p in zip(nodes, says, [n.plan for n in nodes if isinstance(n.plan, ApplyPlan)], strict=True)]
    if any(r.plan.refused for r in runs):
        outs = [ApplyOutcome(EXIT_REFUSED, "refused", [f"refused: {x.reason}" for x in r.plan.blocking]) for r in runs]
        for r, out in zip(runs, outs, strict=True):
            if r.plan.refused:
                _audit(r, out)
        return outs
    if not any(r.plan.changed for r in runs):
        return [_unchanged(r.plan) for r in runs]
    try:
        outs = await _execute(runs, whole, hang_s, stage, proceed, probe)
    except ServiceError as exc:
        outs = [_error(r, exc) for r in runs]
    except asyncio.CancelledError:
        for r in runs:
            if r.plan.changed:
                _audit(r, ApplyOutcome(EXIT_INTERRUPTED, "error", [*r.say.log, "interrupted"],
                                       backup_path=r.plan.saved_copy))
        raise
    for r, out in zip(runs, outs, strict=True):
        if r.plan.changed:
            _audit(r, out)
    return outs


def _unchanged(plan: ApplyPlan) -> ApplyOutcome:
    out = ApplyOutcome(EXIT_OK, "unchanged", [f"{plan.source.path} already says this; nothing to do"])
    if plan.restart:
        out.messages.append("not restarting: nothing changed")
    return out


def _error(r: Run, exc: ServiceError, *more: str) -> ApplyOutcome:
    return ApplyOutcome(exc.code, "error", [*r.say.log, str(exc), *more], backup_path=r.plan.saved_copy)


async def _execute(runs: Sequence[Run], say: Say, hang_s: float, stage: Callable[[str], None] | None,
                   proceed: Callable[[], bool] | None, probe: bool) -> list[ApplyOutcome]:
    head = runs[0]
    plan = head.plan
    if stage is not None:
        stage("write")
    written: list[Run] = []
    for r in runs:
        if not r.plan.changed:
            r.say(f"{r.plan.source.path} already says this")
            continue
        try:
            await _write(r)
        except ServiceError as exc:  # the nodes written before it go back: nothing restarts
            restored = [await _restore(w, f"{r.plan.name} could not be written") for w in reversed(written)]
            tail = [f"not {'applied' if plan.action == 'apply' else 'rolled back'}: {'; '.join(restored)}; "
                    "nothing was restarted"] if restored else []
            return [_error(x, exc, *tail) if x is r else ApplyOutcome(exc.code, "error", [*x.say.log, *tail])
                    for x in runs]
        written.append(r)
    if proceed is not None and not proceed():
        restored = [await _restore(w, "the change was cancelled") for w in reversed(written)]
        return [ApplyOutcome(EXIT_INTERRUPTED, "cancelled", restored or ["no node's file had to be written"])
                for _ in runs]
    if not plan.restart:
        return [_not_restarted(r) for r in runs]
    try:
        boots, code, status = await _restart_and_follow(runs, say, hang_s, stage)
    except ServiceError as exc:
        return [_error(r, exc) for r in runs]
    probed = await _prove_ready(plan.host, head.ops.backend, head.say, boots[0], min(plan.timeout, plan.probe_timeout)
                                ) if probe and status == "ready" and boots[0] is not None else None
    if probed is not None and not probed.ok:
        code, status = EXIT_FAILED, "failed"
    outs = []
    for r, boot in zip(runs, boots, strict=True):
        out = ApplyOutcome(code, status, list(r.say.log), backup_path=r.plan.saved_copy if r in written else None,
                           boot=boot, probe=probed if r is head else None)
        if boot is not None and r.plan.prediction is not None:
            out.reality = reality(r.plan, boot)
        outs.append(out)
    if code != EXIT_OK and plan.rollback_on_failure and plan.action == "apply":
        outs = await _auto_rollback(runs, say, outs, hang_s)
    return outs


async def _write(run: Run) -> None:
    plan, say = run.plan, run.say
    await run.ops.write(run, plan.saved_copy)
    what = "rolled back to " + plan.backup_path if plan.action == "rollback" else "written"
    say(f"{plan.source.path}: {what}; the previous version is saved as {plan.saved_copy}")


async def _restore(run: Run, why: str) -> str:
    """Put a node's file written by this change back (its backup, just made)."""
    saved = run.plan.saved_copy
    try:
        await run.ops.restore(run, saved, why)
    except ServiceError as exc:
        return f"{run.plan.name}: NOT restored ({exc}); its previous file is {saved}"
    return f"{run.plan.name} restored from {saved}"


def _not_restarted(run: Run) -> ApplyOutcome:
    plan, say = run.plan, run.say
    saved = plan.saved_copy if plan.changed else None
    if getattr(run.ops, "restarts_on_write", False):  # kube: the patched template rolls the pod out
        say("not followed: the controller rolls the pod out now (--restart follows the new boot)")
        return ApplyOutcome(EXIT_OK, "rolling", list(say.log), backup_path=saved)
    hint = "restart the server for it to take effect" if plan.action == "apply" else "restart to use it"
    say(f"not restarted: {hint}")
    return ApplyOutcome(EXIT_OK, "written", list(say.log), backup_path=saved)


async def _restart_and_follow(runs: Sequence[Run], say: Say, hang_s: float,
                              stage: Callable[[str], None] | None) -> tuple[list[Boot | None], int, str]:
    plan = runs[0].plan
    calls = [RestartCall(r.ops.restart_how(r.plan.cmd), r.plan.cmd, unit_name(r.plan), r.say, r.plan.timeout,
                         r.sleep, r.clock, r.stop_wait_s, r.say.heartbeat) for r in runs]
    sides = [FollowSide(r.plan.name, r.ops.backend, r.plan.engine, r.say, partial(r.ops.issue_restart, c),
                        r.settle_s if r.settle_s is not None else r.ops.settle_s, c.stopped)
             for r, c in zip(runs, calls, strict=True)]
    many = len(runs) > 1

    async def in_effect(boots: list[Boot | None], dep: DeploymentBoot) -> tuple[int, str] | None:
        problems = []
        for r, b in zip(runs, boots, strict=True):
            wrong = fl.check_dump(r.plan.engine, b.flags, r.plan.edits) if b is not None and b.flags else []
            if b is not None and not b.flags:
                r.say("note: the new boot printed no argument dump; the edit was checked in systemd/the file only")
            if wrong:
                problems.append((f"{r.plan.name}: " if many else "") + "; ".join(wrong))
        if problems:
            say("edit not in effect: " + " | ".join(problems))
            return EXIT_FAILED, "not_in_effect"
        if all(b is not None and b.flags for b in boots):
            say("every node's own argument dump carries the edits" if many
                else "the new boot's own argument dump carries the edits")
        if plan.env_edits and dep.boot.status is BootStatus.READY:
            env_problems = [p for r, b in zip(runs, boots, strict=True) if b is not None
                            for p in await _check_server_env(r, b)]
            if env_problems:
                say("environment not in effect: " + "; ".join(env_problems))
                return EXIT_FAILED, "not_in_effect"
        return None
    try:
        return await _follow(sides, [r.ops for r in runs], say, plan.timeout, hang_s, stage, plan.edits, in_effect)
    except RestartFailed as exc:
        failed = runs[exc.node].plan
        raise ServiceError(
            f"{exc.error}; the new flags are written (previous version: {failed.saved_copy}) but the server was not "
            f"restarted with them: restart it, or run 'kvtui rollback {failed.name}'",
            exc.error.code,
        ) from exc.error


async def _follow(sides: Sequence[FollowSide], ops: Sequence[HostOps], say: Say, timeout: float, hang_s: float,
                  stage: Callable[[str], None] | None, expect: Sequence[fl.Edit] = (),
                  check: Callable[[list[Boot | None], DeploymentBoot], Awaitable[tuple[int, str] | None]] | None = None,
                  ) -> tuple[list[Boot | None], int, str]:
    """Restart the nodes and follow their merged new boot (``follow_restarts``; ``RestartFailed``
    raised): each node's boot, the exit code and the status. ``check``: an apply's edit-in-effect
    checks of the boots (a code and a status when they fail); then a rollout must have settled, and
    a failure for memory others hold names the orphans."""
    followers, got = await follow_restarts(sides, say, timeout=timeout, expect=expect, heartbeat=say.heartbeat,
                                           eta=say.eta, hang_s=hang_s, stage=stage)
    if got is None:
        boot, code, status = timed_out(say, followers[0], timeout)
        return [boot, *(f.current() for f in followers[1:])], code, status
    boots, dep = got
    bad = await check(boots, dep) if check is not None else None
    if bad is not None:
        return boots, *bad
    for s, o, b in zip(sides, ops, boots, strict=True):
        unsettled = await _rollout_settled(o, s.say, b) if b is not None else None
        if unsettled is not None:
            return boots, unsettled[1], unsettled[2]
    many = len(sides) > 1
    if many and dep.boot.status is BootStatus.READY:
        say(f"the deployment is ready on all {len(sides)} nodes")
        code, status = EXIT_OK, "ready"
    elif many and dep.failed_node is not None:
        f = dep.boot.failure
        say(f"the new boot failed on {dep.node(dep.failed_node).label()}"
            + (f": {f.kind.value}: {one_line(f.message, 200)}" if f else ""))
        code, status = EXIT_FAILED, "failed"
    else:
        _, code, status = boot_result(say, dep.boot)
    for s, b in zip(sides, boots, strict=True):
        if b is not None:
            await name_orphans(s.say, s.backend, b)
    return boots, code, status


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


async def _prove_ready(host: HostConfig, backend: HostBackend, say: ProgressFn, boot: Boot,
                       timeout: float) -> ProbeResult | None:
    """The log says ready: ask the server for one token, as ``kvtui wait`` does (``probe = false``
    turns it off; a boot naming no port, or a host that cannot reach it, is ready on the log's
    word). No answer within the timeout: the boot is failed, ``not_serving``."""
    why = not_probed_reason(backend, boot.flags, enabled=getattr(host, "probe", True))
    if why is not None:
        if why.startswith("this kind of host"):
            say(why)
        return None
    port = boot_port(boot.flags)
    assert port is not None
    say(f"the log says ready; asking the server on port {port} for one token")
    res = await probe(backend, port, model=getattr(host, "probe_model", None) or served_model(boot.flags),
                      timeout=max(1.0, timeout))
    if res.ok:
        say(f"✔ {res.headline()}")
        return res
    mark_not_serving(boot, res)
    say(f"✘ {res.headline()}: the new boot is failed (not_serving)")
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


async def _auto_rollback(runs: Sequence[Run], say: Say, outs: list[ApplyOutcome],
                         hang_s: float) -> list[ApplyOutcome]:
    """Every node of the failed change back to its backup and restarted (all or nothing)."""
    head = runs[0]
    plan = head.plan
    say(f"rolling back to {plan.backup_path} (--rollback-on-failure)" if len(runs) == 1 else
        "rolling back every node (--rollback-on-failure)")
    rbs: list[Node] = []
    for r in runs:
        try:
            rb = await plan_rollback(r.plan.name, r.plan.host, r.ops.backend, to=r.plan.backup_path, restart=True,
                                     timeout=r.plan.timeout, clock=r.clock, check_orphans=False)
        except ServiceError as exc:
            for out in outs:
                who = f"{r.plan.name}: " if len(runs) > 1 else ""
                out.messages.append(f"rollback could not be planned: {who}{exc}")
            return outs
        rbs.append(Node(rb, r.ops.backend, r.say))
    rb_outs = await execute_nodes(rbs, clock=head.clock, sleep=head.sleep, stop_wait_s=head.stop_wait_s,
                                  settle_s=head.settle_s, heartbeat=say.heartbeat, eta=say.eta, hang_s=hang_s,
                                  say=say if len(runs) > 1 else None)
    for r, out, rb_out in zip(runs, outs, rb_outs, strict=True):
        out.rolled_back = rb_out.status in ("ready", "written")
        tail = ("the previous flags are back and the boot is ready" if rb_out.status == "ready"
                else f"the rollback ended {rb_out.status}")
        out.messages = [*r.say.log, f"rolled back: {tail}"]
        if rb_out.status != "ready":
            out.messages.extend(rb_out.messages[-3:])
        out.code = EXIT_FAILED if out.code in (EXIT_OK, EXIT_FAILED) else out.code
    return outs


async def _restart(nodes: Sequence[Node], plans: Sequence[RestartPlan], says: Sequence[Say], whole: Say, *,
                   clock: Callable[[], float], sleep: Callable[[float], Awaitable[None]], stop_wait_s: float,
                   settle_s: float | None, hang_s: float, stage: Callable[[str], None] | None,
                   probe: bool) -> list[ApplyOutcome]:
    """Restart N >= 1 nodes as one (``execute_nodes`` of ``RestartPlan``s): a refusal on any node
    refuses the whole (nothing restarts); node 0 is restarted first, the others right after; with
    node 0's ``plan.follow`` the nodes' merged new boot is followed until it is ready or failed (as
    an apply's) and, ready, node 0's server asked for one token. Every node's attempt is audited
    (action ``restart``)."""
    ops = [n.backend.service_ops() for n in nodes]
    for n, p in zip(nodes, plans, strict=True):
        if not p.refused and p.how is not None:
            await refuse_orphans(p.refusals, n.backend)
    if any(p.refused or p.how is None for p in plans):
        outs = [ApplyOutcome(EXIT_REFUSED, "refused", [f"refused: {r.reason}" for r in p.blocking]) for p in plans]
        for p, o, out in zip(plans, ops, outs, strict=True):
            if p.refused or p.how is None:
                _audit_restart(p, out, clock, o.login)
        return outs
    head = plans[0]
    calls = [RestartCall(p.how, p.cmd, p.unit, s, p.timeout, sleep, clock, stop_wait_s)
             for p, s in zip(plans, says, strict=True) if p.how is not None]
    boots: list[Boot | None] = [None] * len(nodes)
    probed: ProbeResult | None = None
    try:
        if head.follow:
            sides = [FollowSide(p.name, n.backend, engine_of(p.host), s, partial(o.issue_restart, c),
                                settle_s if settle_s is not None else o.settle_s, c.stopped)
                     for n, p, s, o, c in zip(nodes, plans, says, ops, calls, strict=True)]
            boots, code, status = await _follow(sides, ops, whole, head.timeout, hang_s, stage)
            if probe and status == "ready" and boots[0] is not None:
                probed = await _prove_ready(head.host, nodes[0].backend, says[0], boots[0],
                                            min(head.timeout, DEFAULT_PROBE_TIMEOUT_S))
                if probed is not None and not probed.ok:
                    code, status = EXIT_FAILED, "failed"
        else:
            for s, o, c in zip(says, ops, calls, strict=True):
                await o.issue_restart(c)
                s("restarted: a new boot starts")
            code, status = EXIT_OK, "restarted"
        outs = [ApplyOutcome(code, status, list(s.log), boot=b, probe=probed if i == 0 else None)
                for i, (s, b) in enumerate(zip(says, boots, strict=True))]
    except (RestartFailed, ServiceError) as exc:
        err = exc.error if isinstance(exc, RestartFailed) else exc
        who = f"{plans[exc.node].name}: " if isinstance(exc, RestartFailed) and len(nodes) > 1 else ""
        outs = [ApplyOutcome(err.code, "error", [*s.log, who + str(err)]) for s in says]
    except asyncio.CancelledError:
        for p, s, o in zip(plans, says, ops, strict=True):
            _audit_restart(p, ApplyOutcome(EXIT_INTERRUPTED, "error", [*s.log, "interrupted"]), clock, o.login)
        raise
    for p, o, out in zip(plans, ops, outs, strict=True):
        _audit_restart(p, out, clock, o.login)
    return outs


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
