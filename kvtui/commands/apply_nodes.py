"""``kvtui apply NAME …`` where NAME is a ``[deployments.NAME]``: the same edit on every node, as one.

All or nothing, in this order:

1. every node's host is opened and its edit planned (``kvtui.changes.plan_apply``, no restart:
   the effective flags file of each node, its diff, its prediction from its own last boot); a
   refusal on any node refuses the whole (exit 4: nothing is written anywhere);
2. one confirmation for all nodes (or ``--yes``);
3. the files are written node by node through the guarded path (backup, atomic write, re-read and
   check; for a unit, daemon-reload and ``systemctl show`` must carry the new flags): every file
   is verified before any restart. When a node's write fails, every node written before it is
   restored from the backup just made (``plan_rollback(to=…)``, verified the same way), and the
   command exits with that node's error: no node is left with the new flags, nothing restarts;
4. with ``--restart``: one follower per node starts (``BootFollower``, from *now*), then each
   node restarts, node rank 0 first (it hosts the rendezvous the others connect to; SGLang
   ``--dist-init-addr``, vLLM ``--master-addr``), the others right after, without waiting (they
   must meet at distributed init); the nodes' new boots are merged (``kvtui.nodes``) until the
   whole is ready (0), a node failed (1; ``--rollback-on-failure`` then restores and restarts
   every node), a node holds the others back past the deployment's ``hang_seconds`` with its
   unit gone (1), or the timeout (5);
5. the merged boot ready: node 0's server (the one that serves HTTP) is asked for one token
   (``deployment_changes.probe_head``, as the deployment console does and as ``apply HOST
   --restart`` asks its host's server; ``--no-probe`` or node 0's ``probe = false`` take the
   log's word): no answer within ``min(--timeout, 60 s)`` fails the change as ``not_serving`` (1;
   ``--rollback-on-failure`` then acts, and the rolled-back boot is asked the same way).

Exit codes as ``apply``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TextIO

from kvtui.deployment_changes import (
    NOT_ANSWERING,
    NodeSide,
    plan_nodes,
    probe_head,
    record_nodes,
    restart_and_follow,
    restore,
    write_nodes,
)
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_REFUSED
from kvtui.hosts.probe import DEFAULT_PROBE_TIMEOUT_S

if TYPE_CHECKING:
    from kvtui import envedit
    from kvtui import flags as fl
    from kvtui.config import Config, DeploymentConfig
    from kvtui.nodes import DeploymentBoot

Ask = Callable[[TextIO, TextIO, str], Awaitable[str | None]]


async def apply_deployment(
    args: argparse.Namespace, config: Config, dep_cfg: DeploymentConfig, edits: Sequence[fl.Edit],
    env_edits: Sequence[envedit.EnvEdit], *, stdout: TextIO, stderr: TextIO, stdin: TextIO, ask: Ask,
    clock: Callable[[], float] | None = None, verb: str = "apply",
) -> int:
    """``verb`` "rollback": every node's newest backup instead of an edit (``edits`` empty), on the
    same all-or-nothing path."""
    from kvtui.hosts.backend import BackendError
    from kvtui.hosts.factory import make_backend

    name: str = args.host
    kube = [n for n, h in config.node_hosts(name) if h.kind == "kube"]
    if kube:
        # the pods of one server share their controller (a LeaderWorkerSet's leader and worker
        # templates are one object): one host's apply edits every template, once
        print(f"kvtui {verb}: {name}: its nodes are pods of one controller: run 'kvtui {verb} {kube[0]}' (it "
              f"edits every pod template of the controller, workers included)", file=stderr)
        return EXIT_REFUSED
    nodes: list[NodeSide] = []
    for node_name, host in config.node_hosts(name):
        try:
            nodes.append(NodeSide(node_name, host, make_backend(node_name, host, clock=clock)))
        except BackendError as exc:
            print(f"kvtui {verb}: {name}: {node_name}: {exc}", file=stderr)
            return EXIT_INPUT
    try:
        results = await asyncio.gather(*(n.backend.start() for n in nodes), return_exceptions=True)
        for n, r in zip(nodes, results, strict=True):
            if isinstance(r, BaseException):
                print(f"kvtui {verb}: {name}: {n.name}: {r}", file=stderr)
                return EXIT_INPUT
        return await _apply(args, config, dep_cfg, nodes, edits, env_edits, stdout=stdout, stderr=stderr,
                            stdin=stdin, ask=ask, clock=clock or time.time, verb=verb)
    finally:
        for n in nodes:
            if n.follower is not None:
                with contextlib.suppress(Exception):
                    await n.follower.close()
            with contextlib.suppress(Exception):
                await n.backend.close()


async def _apply(
    args: argparse.Namespace, config: Config, dep_cfg: DeploymentConfig, nodes: list[NodeSide],
    edits: Sequence[fl.Edit], env_edits: Sequence[envedit.EnvEdit], *, stdout: TextIO, stderr: TextIO,
    stdin: TextIO, ask: Ask, clock: Callable[[], float], verb: str = "apply",
) -> int:
    from kvtui.hosts import service

    name: str = args.host
    timeout = float(args.timeout)

    def say(msg: str) -> None:
        print(msg, file=stderr, flush=True)

    # 1. plan every node at once (no restart in the node plans: the deployment restarts as one)
    errors = await plan_nodes(nodes, edits, verb=verb, force=bool(getattr(args, "force", False)), timeout=timeout,
                              graph_margin_gib=config.calc.graph_margin_gib, clock=clock, env_edits=env_edits)
    for n, exc in errors:
        if isinstance(exc, service.ServiceError):
            say(f"kvtui {verb}: {name}: {n.name}: {exc}")
            return exc.code
        raise exc
    plans = [n.plan for n in nodes if n.plan is not None]
    for i, n in enumerate(nodes):
        assert n.plan is not None
        stdout.write(f"== node {i} of {name}: {n.name} ==\n")
        stdout.write(service.render_plan(n.plan))
    if args.restart:
        order = ", ".join(f"{n.name}" for n in nodes)
        stdout.write(f"then: restart every node ({order}; node 0 first, the others right after) and follow "
                     "the merged boot until it is ready or failed\n")
    stdout.flush()
    refused = [n for n in nodes if n.plan is not None and n.plan.refused]
    if refused:
        for n in refused:
            assert n.plan is not None
            for r in n.plan.blocking:
                say(f"kvtui {verb}: refused on {n.name}: {r.reason}")
            if not getattr(args, "dry_run", False):
                await service.execute(n.plan, n.backend, clock=clock)  # audits the refusal
        say(f"kvtui {verb}: {name}: refused as a whole: nothing was written on any node")
        return EXIT_REFUSED
    if getattr(args, "dry_run", False):
        say("dry run: nothing was changed")
        return EXIT_OK
    if not any(p.changed for p in plans):
        say(f"kvtui {verb}: {name}: every node's file already says this; nothing to do")
        return EXIT_OK
    if not args.yes:
        answer = await ask(stdin, stderr, f"{verb.capitalize()} this on all {len(nodes)} nodes of {name}"
                            + (" and restart them" if args.restart else "") + "? [y/N] ")
        if answer is None:
            say(f"kvtui {verb}: refused: no terminal to confirm on; pass --yes to {verb} without asking")
            return EXIT_REFUSED
        if answer not in ("y", "yes"):
            say(f"kvtui {verb}: not applied (answered {answer or 'no'})")
            return EXIT_REFUSED

    # 2. write and verify every file; a failure restores the nodes already written
    wrote = await write_nodes(nodes, say, verb=verb, clock=clock)
    if wrote.code is not None:
        for m in wrote.messages:
            say(f"kvtui {verb}: {name}: {m}")
        return wrote.code
    written = wrote.written
    what = "the backups are restored" if verb == "rollback" else "the new flags are written"
    say(f"{name}: {what} and verified on every node")
    if not args.restart:
        say(f"not restarted: restart the deployment for it to take effect (kvtui {verb} {name} … --restart)")
        return EXIT_OK

    # 3. restart all (node 0 first) and follow the merged boot; 4. ask node 0's server for a token
    code, dep = await restart_and_follow(nodes, dep_cfg.hang_seconds, timeout, clock, say, edits)
    if not await _answers(args, code, dep, nodes, say, timeout):
        say(f"kvtui {verb}: {name}: {NOT_ANSWERING}: the new boot is failed (not_serving)")
        code = EXIT_FAILED
    await _record(nodes, code, config, say, verb)
    if dep is not None:
        from kvtui.commands.bootview import render_boot
        from kvtui.commands.replay_nodes import render_deployment

        stdout.write("\n".join(render_deployment(dep, render_boot(dep.boot, 1, 1), 1, 1)) + "\n")
        stdout.flush()
    if code != EXIT_OK and verb == "apply" and getattr(args, "rollback_on_failure", False):
        say(f"rolling back every node of {name} (--rollback-on-failure)")
        restored = await restore(written, clock, say)
        say(f"{name}: " + "; ".join(restored))
        rc, back = await restart_and_follow(nodes, dep_cfg.hang_seconds, timeout, clock, say, ())
        if not await _answers(args, rc, back, nodes, say, timeout):
            rc = EXIT_FAILED
        await _record(nodes, rc, config, say, verb)
        say(f"{name}: rolled back: the previous flags " + ("are back and the boot is ready" if rc == EXIT_OK
                                                          else f"are back; the boot ended with exit {rc}"))
        return EXIT_FAILED if code in (EXIT_OK, EXIT_FAILED) else code
    return code


async def _record(nodes: Sequence[NodeSide], code: int, config: Config, say: Callable[[str], None], verb: str) -> None:
    """Each node's new boot into the history (``record_nodes``); what could not be is said."""
    for problem in await record_nodes(nodes, code, config.history):
        say(f"kvtui {verb}: note: the boot is not in the history: {problem}")


async def _answers(args: argparse.Namespace, code: int, dep: DeploymentBoot | None, nodes: Sequence[NodeSide],
                   say: Callable[[str], None], timeout: float) -> bool:
    """False when the merged boot is ready but node 0's server did not answer a 1-token request
    (``probe_head``: within ``min(timeout, 60 s)``, as a host's apply); True otherwise (not ready,
    not asked)."""
    if code != EXIT_OK or dep is None:
        return True
    res = await probe_head(dep, nodes, say, enabled=getattr(args, "probe", None),
                           timeout=min(timeout, DEFAULT_PROBE_TIMEOUT_S))
    return res is None or res.ok
