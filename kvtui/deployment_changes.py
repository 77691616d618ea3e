"""Changing a deployment as one: the same edit (or each node's newest backup) on every node, all
or nothing, then every node restarted and the merged boot followed (issue 15).

The steps ``kvtui apply NAME`` / ``kvtui rollback NAME`` (``commands/apply_nodes``) and the
console's deployment pane (``ui/deployment_view``) share; each caller does its own asking and
printing:

1. ``plan_nodes``: every node's change planned at once through the one guarded path
   (``kvtui.changes.plan_apply`` / ``plan_rollback``, no restart in the node plans); the caller
   refuses the whole when any plan is refused;
2. ``write_nodes``: the files written and verified node by node (backup, atomic write, re-read;
   for a unit, daemon-reload and ``systemctl show``): every file is verified before any restart.
   When a node's write fails, every node written before it is restored from the backup just made
   (``restore``) and nothing restarts;
3. ``restart_and_follow``: one ``BootFollower`` per node (positioned before any restart), node
   rank 0 restarted first (it hosts the rendezvous), the others right after without waiting; the
   nodes' new boots merged (``kvtui.nodes``) until the whole is ready, a node failed, or the
   timeout; a hang is said once per diagnosis;
4. ``probe_head``: once the whole is ready, node 0's server (the one that serves HTTP) is asked
   for one token (``kvtui.hosts.probe``); no answer fails the change as ``not_serving``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from kvtui.boot import BootStatus
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_TIMEOUT
from kvtui.nodes import DeploymentBoot, diagnose_hang, merge_boots

if TYPE_CHECKING:
    from kvtui import envedit
    from kvtui import flags as fl
    from kvtui.boot import Boot
    from kvtui.config import HistoryConfig, HostConfig
    from kvtui.hosts.backend import HostBackend
    from kvtui.hosts.probe import ProbeResult
    from kvtui.hosts.service import ApplyOutcome, ApplyPlan, BootFollower

POLL_S = 0.25
NOT_ANSWERING = "ready on every node, but node 0's server does not answer"  # the change's headline then
Say = Callable[[str], None]


def prefixed(say: Say, who: str) -> Say:
    return lambda m: say(f"{who}: {m}")


@dataclass
class NodeSide:
    """One node of a change: its host, its backend (opened by the caller) and what happened."""

    name: str
    host: HostConfig
    backend: HostBackend
    plan: ApplyPlan | None = None
    outcome: ApplyOutcome | None = None
    follower: BootFollower | None = None
    boots: list[Boot] = field(default_factory=list)  # the node's known boots (predictions), if any


@dataclass
class WriteResult:
    """``write_nodes``: ``code`` None when every file is written and verified; else the exit code,
    ``messages`` what went wrong and what was restored."""

    code: int | None
    messages: list[str]
    written: list[NodeSide]


async def plan_nodes(
    nodes: Sequence[NodeSide], edits: Sequence[fl.Edit], *, verb: str = "apply", force: bool = False,
    timeout: float = 600.0, graph_margin_gib: float | None = None, clock: Callable[[], float] = time.time,
    env_edits: Sequence[envedit.EnvEdit] = (),
) -> list[tuple[NodeSide, BaseException]]:
    """Plan every node's change at once (``n.plan``); the nodes whose planning raised, with what."""
    from kvtui import changes

    async def plan(n: NodeSide) -> ApplyPlan:
        if verb == "rollback":
            return await changes.plan_rollback(n.name, n.host, n.backend, restart=False, timeout=timeout,
                                               boots=n.boots or None, clock=clock)
        return await changes.plan_apply(
            n.name, n.host, n.backend, list(edits), restart=False, force=force, timeout=timeout,
            boots=n.boots or None, graph_margin_gib=graph_margin_gib, clock=clock, env_edits=list(env_edits))

    planned = await asyncio.gather(*(plan(n) for n in nodes), return_exceptions=True)
    errors: list[tuple[NodeSide, BaseException]] = []
    for n, p in zip(nodes, planned, strict=True):
        if isinstance(p, BaseException):
            errors.append((n, p))
        else:
            n.plan = p
    return errors


async def write_nodes(nodes: Sequence[NodeSide], say: Say, *, verb: str = "apply",
                      clock: Callable[[], float] = time.time) -> WriteResult:
    """Write and verify every planned node's file, node by node; a failure restores the nodes
    written before it (see the module docstring)."""
    from kvtui.hosts import service

    written: list[NodeSide] = []
    for n in nodes:
        assert n.plan is not None
        if not n.plan.changed:
            say(f"{n.name}: {n.plan.source.path} already says this")
            continue
        out = await service.execute(n.plan, n.backend, prefixed(say, n.name), clock=clock)
        n.outcome = out
        if out.status != "written":
            why = f"{n.name}: " + (out.messages[-1] if out.messages else out.status)
            restored = await restore(written, clock, say)
            tail = "; ".join(restored) if restored else "no other node had been written"
            return WriteResult(out.code if out.code != EXIT_OK else EXIT_INPUT,
                               [why, f"not {'applied' if verb == 'apply' else 'rolled back'}: {tail}; "
                                     "nothing was restarted"], written)
        written.append(n)
    return WriteResult(None, [], written)


async def restore(written: Sequence[NodeSide], clock: Callable[[], float], say: Say) -> list[str]:
    """Put back each written node's previous file (the backup its write just made), newest first."""
    from kvtui import changes
    from kvtui.hosts import service

    said: list[str] = []
    for n in reversed(written):
        backup = n.outcome.backup_path if n.outcome is not None else None
        if not backup:
            said.append(f"{n.name}: NOT restored (no backup path known)")
            continue
        try:
            rb = await changes.plan_rollback(n.name, n.host, n.backend, to=backup, restart=False, clock=clock)
            out = await service.execute(rb, n.backend, prefixed(say, n.name), clock=clock)
        except service.ServiceError as exc:
            said.append(f"{n.name}: NOT restored ({exc}); its previous file is {backup}")
            continue
        if out.status == "written":
            said.append(f"{n.name} restored from {backup}")
        else:
            said.append(f"{n.name}: NOT restored ({out.messages[-1] if out.messages else out.status}); "
                        f"its previous file is {backup}")
    return said


async def restart_and_follow(
    nodes: Sequence[NodeSide], hang_s: float, timeout: float, clock: Callable[[], float], say: Say,
    expect: Sequence[fl.Edit], *, stage: Callable[[str], None] | None = None,
) -> tuple[int, DeploymentBoot | None]:
    """Restart every node (node 0 first) and follow the merged new boot (see the module docstring):
    (exit code, the merged boot when one was followed). ``stage`` hears ``"restart"`` before the
    first restart is issued and ``"follow"`` once every node's restart is (the console's cancel
    waits for it: a deployment is never left half restarted by kvtui)."""
    from kvtui import flags as fl
    from kvtui.hosts import service
    from kvtui.hosts.service import BootFollower
    from kvtui.hosts.service.plan import engine_of

    for n in nodes:
        if n.follower is not None:
            await n.follower.close()
        n.follower = BootFollower(n.backend, engine_of(n.host), progress=prefixed(say, n.name))
    await asyncio.gather(*(n.follower.start(n.backend.service_ops().settle_s) for n in nodes if n.follower))
    for n in nodes:
        assert n.follower is not None
        n.follower.mark()
    if stage is not None:
        stage("restart")
    for n in nodes:  # node 0 first: it hosts the rendezvous
        rp = service.plan_restart(n.name, n.host, n.backend)
        if rp.refused:
            say(f"{n.name}: restart refused: {rp.refusals[0].reason}")
            return EXIT_INPUT, None
        out = await service.restart(rp, n.backend, prefixed(say, n.name), clock=clock)
        if out.status != "restarted":
            say(f"kvtui: {n.name}: restart failed: " + (out.messages[-1] if out.messages else out.status))
            return (out.code if out.code != EXIT_OK else EXIT_INPUT), None
    for n in nodes:
        assert n.follower is not None
        n.follower.triggered()
    if stage is not None:
        stage("follow")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    said_hang = ""
    while True:
        dep = merge_boots([(n.name, n.follower.current() if n.follower else None) for n in nodes])
        if dep.boot.status is BootStatus.READY:
            say(f"the deployment is ready on all {len(nodes)} nodes")
            wrong = [f"{n.label()}: {'; '.join(p)}" for n in dep.nodes if n.boot is not None and n.boot.flags
                     and (p := fl.check_dump(n.boot.engine, n.boot.flags, list(expect)))]
            if wrong:
                say("edit not in effect: " + " | ".join(wrong))
                return EXIT_FAILED, dep
            if expect:
                say("every node's own argument dump carries the edits")
            return EXIT_OK, dep
        if dep.boot.status is BootStatus.FAILED:
            who = dep.node(dep.failed_node).label() if dep.failed_node is not None else "a node"
            f = dep.boot.failure
            say(f"the new boot failed on {who}" + (f": {f.kind.value}: {f.message[:200]}" if f else ""))
            return EXIT_FAILED, dep
        hang = diagnose_hang(dep, datetime.now().astimezone(), hang_s)
        if hang is not None and hang.summary != said_hang:
            said_hang = hang.summary
            say(f"hang: {hang.summary}")
            for c in hang.causes:
                say(f"  - {c}")
        if loop.time() >= deadline:
            say(f"timed out after {timeout:g} s waiting for the new boot on every node")
            return EXIT_TIMEOUT, dep
        await asyncio.sleep(POLL_S)


async def probe_head(dep: DeploymentBoot, nodes: Sequence[NodeSide], say: Say, *, enabled: bool | None = None,
                     timeout: float | None = None) -> ProbeResult | None:
    """The merged boot is ready: ask node 0's server (the one that serves HTTP) for one token,
    as a host's change does (``kvtui.hosts.probe``). ``enabled``: ``--probe``/``--no-probe``;
    None: node 0's host's ``probe`` (``probe_model`` names the model). None when it is not asked
    (turned off, no port in node 0's arguments, a host that cannot reach it: said); an answer
    that is not one fails node 0's boot as ``not_serving``."""
    from kvtui.hosts.probe import (
        DEFAULT_PROBE_TIMEOUT_S,
        boot_port,
        mark_not_serving,
        not_probed_reason,
        probe,
        served_model,
    )

    head = dep.head
    side = next((n for n in nodes if n.name == head.name), None)
    boot = head.boot
    if side is None or boot is None:
        return None
    on = enabled if enabled is not None else getattr(side.host, "probe", True)
    why = not_probed_reason(side.backend, boot.flags, enabled=on)
    if why is not None:
        say(f"{head.label()}: not probed ({'--no-probe' if enabled is False else why})")
        return None
    port = boot_port(boot.flags)
    assert port is not None  # not_probed_reason checked it
    say(f"{head.label()}: asking the server on port {port} for one token…")
    model = getattr(side.host, "probe_model", None) or served_model(boot.flags)
    res = await probe(side.backend, port, model=model,
                      timeout=DEFAULT_PROBE_TIMEOUT_S if timeout is None else max(1.0, timeout))
    say(f"{head.label()}: {res.headline()}")
    if not res.ok:  # node 0's boot and the whole's: failed, by node 0
        mark_not_serving(boot, res)
        if dep.boot is not boot:
            mark_not_serving(dep.boot, res)
        dep.failed_node = head.node_rank
    return res


OUTCOME_OF_EXIT = {EXIT_OK: "ready", EXIT_FAILED: "failed", EXIT_TIMEOUT: "timeout"}


async def record_nodes(nodes: Sequence[NodeSide], code: int, config: HistoryConfig | None) -> list[str]:
    """Record each node's followed boot (after ``restart_and_follow``) in the history under its
    host name, with the change (``kvtui.changes.record_restart``: the node's edit and prediction)
    and the deployment's outcome (``code``); nothing with ``[history] record = false``. What could
    not be recorded, per node (the caller says it)."""
    from kvtui import changes
    from kvtui.hosts.service import ApplyOutcome

    problems: list[str] = []
    for n in nodes:
        boot = n.follower.current() if n.follower is not None else None
        if n.plan is None or boot is None:
            continue
        out = ApplyOutcome(code, OUTCOME_OF_EXIT.get(code, "error"), boot=boot,
                           backup_path=n.outcome.backup_path if n.outcome is not None else None)
        plan = n.plan
        problem = await asyncio.to_thread(changes.record_restart, plan, out, config, restarted=True)
        if problem:
            problems.append(f"{n.name}: {problem}")
    return problems


async def close_followers(nodes: Sequence[NodeSide]) -> None:
    """End every node's follower (bounded)."""
    for n in nodes:
        if n.follower is not None:
            await n.follower.close()
            n.follower = None


__all__ = ["NOT_ANSWERING", "NodeSide", "WriteResult", "close_followers", "plan_nodes", "prefixed", "probe_head",
           "record_nodes", "restart_and_follow", "restore", "write_nodes"]
