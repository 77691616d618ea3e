"""``kvtui apply HOST (--set FLAG[=VALUE] | --unset FLAG | --setenv NAME=VALUE | --unsetenv NAME)…
[--restart] [--yes] [--dry-run] [--force] [--rollback-on-failure] [--timeout S]``.

Shows the diff of the server's effective flags file, the exact commands that will run and the
calculator's prediction for the new flags, then (after a confirmation on the terminal, or
``--yes``) applies the edit through the guarded path of ``kvtui.hosts.service``: backup, atomic
write, verify, and with ``--restart`` a restart followed until the new boot is ready or failed.
``--setenv`` / ``--unsetenv`` edit an environment variable the server starts with (a unit's
``Environment=``, a script's ``export``; ``kvtui.envedit``) on the same path; the restarted server
process's own environment (``/proc/PID/environ``) is checked for the new value.

The plan goes to stdout, progress and errors to stderr. Exit codes: 0 applied (and, with
``--restart``, ready — and, when the boot names its port, its server answered a 1-token request:
``--no-probe`` or the host's ``probe = false`` take the log's word); 1 the new boot failed (a
server that does not answer is failed, ``not_serving``) or the edit is not in effect (also when
``--rollback-on-failure`` then brought the previous flags back: the output says so); 2 usage;
3 connection, configuration or a host-side error; 4 refused (readonly host, container, an unsafe
edit, a prediction of ``no_fit``/``oom_risk`` or a flag the engine does not accept without
``--force``, the file changed since it was read, no terminal to confirm on); 5 timed out. A value
malformed as given (``--set mem-fraction-static=abc``) is a usage error, 2, as in ``kvtui calc``.

``kvtui apply NAME …`` where NAME is a ``[deployments.NAME]`` does the same on every node, as one,
all or nothing, on the same path (``service.execute_nodes``: a host is the deployment of one node,
and a deployment of one node prints what its host would):

1. every node's host is opened and its change planned (its effective flags file, its diff, its
   prediction from its own last boot); a refusal on any node refuses the whole (exit 4: nothing is
   written anywhere);
2. one confirmation for all nodes (or ``--yes``), the same gate as a host's (``_gate``);
3. the files are written node by node: every file is verified before any restart. When a node's
   write fails, every node written before it is restored from the backup just made, and the
   command exits with that node's error: no node is left with the new flags, nothing restarts;
4. with ``--restart``: node rank 0 first (it hosts the rendezvous the others connect to; SGLang
   ``--dist-init-addr``, vLLM ``--master-addr``), the others right after, without waiting; the
   nodes' new boots are merged (``kvtui.boot.deployment``) until the whole is ready (0), a node
   failed or a node's dump does not carry the edits (1), or the timeout (5); a hang past the
   deployment's ``hang_seconds`` is said; each node's environment is checked, a node that failed
   for memory other processes hold names its orphans;
5. the merged boot ready: node 0's server is asked for one token (``--no-probe`` or node 0's
   ``probe = false`` take the log's word): no answer fails the change as ``not_serving`` (1).
   A failure with ``--rollback-on-failure`` restores and restarts every node (the rolled-back boot
   is asked the same way).

Exit codes as for a host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from kvtui import changes, envedit
from kvtui import flags as fl
from kvtui.boot.deployment import merge_boots
from kvtui.changes import NOT_ANSWERING, NodeSide
from kvtui.commands.bootview import render_boot
from kvtui.commands.bootview_deployment import render_deployment
from kvtui.config import Config, ConfigError, DeploymentConfig, HistoryConfig, HostConfig, load_config
from kvtui.exits import EXIT_INPUT, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from kvtui.history.eta import expected_text, heartbeat_eta, past_boots
from kvtui.hosts import service
from kvtui.hosts.backend import BackendError, HostBackend
from kvtui.hosts.factory import make_backend

if TYPE_CHECKING:
    from kvtui.hosts.service import ApplyOutcome, ApplyPlan


class CommandMain(Protocol):
    def __call__(
        self,
        args: argparse.Namespace,
        *,
        stdout: TextIO,
        stderr: TextIO,
        stdin: TextIO,
        clock: Callable[[], float] | None = None,
    ) -> Coroutine[Any, Any, int]: ...


DEFAULT_HANG_S = 180.0  # a host's (one node: never a hang between nodes)
PlanMaker = Callable[[str, HostConfig, HostBackend, float | None], Coroutine[Any, Any, "ApplyPlan"]]


def run_main(
    main: CommandMain,
    args: argparse.Namespace,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
    clock: Callable[[], float] | None = None,
) -> int:
    """Run an async command (``apply_main``, ``rollback_main``) on the process's streams."""
    return asyncio.run(
        main(args, stdout=stdout or sys.stdout, stderr=stderr or sys.stderr, stdin=stdin or sys.stdin, clock=clock)
    )


def run(args: argparse.Namespace, **streams: Any) -> int:
    """``run_main(apply_main, …)``: ``stdout``, ``stderr``, ``stdin``, ``clock`` as it takes them."""
    return run_main(apply_main, args, **streams)


async def apply_main(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO, stdin: TextIO,
                     clock: Callable[[], float] | None = None) -> int:
    try:
        edits = fl.parse_edit_args(list(args.set or []), list(args.unset or []))
        env_edits = envedit.parse_env_args(list(getattr(args, "setenv", None) or []),
                                           list(getattr(args, "unsetenv", None) or []))
        edits, env_edits = service.split_env_edits(edits, env_edits)
    except (fl.FlagError, service.ServiceError) as exc:
        print(f"kvtui apply: {exc}", file=stderr)
        return EXIT_USAGE
    if not edits and not env_edits:
        print("kvtui apply: nothing to apply: give --set FLAG[=VALUE], --unset FLAG, --setenv NAME=VALUE or "
              "--unsetenv NAME", file=stderr)
        return EXIT_USAGE
    if args.timeout is not None and args.timeout <= 0:
        print(f"kvtui apply: --timeout {args.timeout:g}: expected a number of seconds above 0", file=stderr)
        return EXIT_USAGE
    if args.rollback_on_failure and not args.restart:
        print("kvtui apply: note: --rollback-on-failure acts only with --restart (nothing is restarted)",
              file=stderr)
    async def make_plan(name: str, host: HostConfig, backend: HostBackend, margin: float | None) -> ApplyPlan:
        return await changes.plan_apply(
            name, host, backend, edits,
            restart=bool(args.restart), force=bool(args.force),
            rollback_on_failure=bool(args.rollback_on_failure), timeout=float(args.timeout),
            graph_margin_gib=margin, clock=clock or time.time, env_edits=env_edits,
        )

    return await plan_and_execute(args, make_plan, verb="apply", stdout=stdout, stderr=stderr, stdin=stdin,
                                  clock=clock)


def deployment_of(args: argparse.Namespace) -> tuple[Config, DeploymentConfig] | None:
    """NAME's ``[deployments.NAME]`` (with the loaded file); None for a host (or a hosts file that
    does not load: the host path reports that)."""
    try:
        config = load_config(getattr(args, "hosts", None))
    except ConfigError:
        return None
    dep = config.deployment(args.host)
    return None if dep is None else (config, dep)


async def plan_and_execute(
    args: argparse.Namespace,
    make_plan: PlanMaker,
    *,
    verb: str,
    stdout: TextIO,
    stderr: TextIO,
    stdin: TextIO,
    clock: Callable[[], float] | None,
) -> int:
    """Open NAME's nodes (a host: one; a ``[deployments.NAME]``: each), make every node's plan
    (``apply`` or ``rollback``), print them, pass the gate (``_gate``: refusal, dry run, nothing to
    do, confirmation) and carry them out as one (``_execute``); the backends are closed whatever
    happens."""
    found = deployment_of(args)
    if found is None:
        opened = await open_host(args, stderr, clock)
        if isinstance(opened, int):
            return opened
        name, host, backend, margin = opened
        nodes, hang_s = [NodeSide(name, host, backend)], DEFAULT_HANG_S
    else:
        config, dep = found
        opened_nodes = await open_nodes(config, args.host, verb, stderr, clock)
        if isinstance(opened_nodes, int):
            return opened_nodes
        name, nodes, margin, hang_s = args.host, opened_nodes, config.calc.graph_margin_gib, dep.hang_seconds
        wanted = getattr(args, "probe", None)  # --probe / --no-probe over node 0's ``probe``
        for n in nodes if wanted is not None else ():
            n.host = n.host.model_copy(update={"probe": bool(wanted)})
    try:
        return await _plan_and_execute(args, name, nodes, make_plan, margin, hang_s, verb=verb, stdout=stdout,
                                       stderr=stderr, stdin=stdin, clock=clock or time.time)
    finally:
        await close_nodes(nodes)


async def _plan_and_execute(
    args: argparse.Namespace, name: str, nodes: list[NodeSide], make_plan: PlanMaker, margin: float | None,
    hang_s: float, *, verb: str, stdout: TextIO, stderr: TextIO, stdin: TextIO, clock: Callable[[], float],
) -> int:
    many = len(nodes) > 1
    planned = await asyncio.gather(*(make_plan(n.name, n.host, n.backend, margin) for n in nodes),
                                   return_exceptions=True)
    for n, p in zip(nodes, planned, strict=True):
        if isinstance(p, service.ServiceError):
            print(f"kvtui {verb}: {f'{name}: {n.name}: ' if many else ''}{p}", file=stderr)
            return p.code
        if isinstance(p, BaseException):
            raise p
        n.plan = p
    plans = [p for p in planned if not isinstance(p, BaseException)]
    for i, (n, plan) in enumerate(zip(nodes, plans, strict=True)):
        if many:
            stdout.write(f"== node {i} of {name}: {n.name} ==\n")
        stdout.write(service.render_plan(plan))
    if many and plans[0].restart:
        stdout.write(f"then: restart every node ({', '.join(n.name for n in nodes)}; node 0 first, the others right "
                     "after) and follow the merged boot until it is ready or failed\n")
    stdout.flush()
    gate = await _gate(args, nodes, name, verb=verb, restart=plans[0].restart, deployment=many, stderr=stderr,
                       stdin=stdin, clock=clock)
    if gate is not None:
        return gate
    return await _execute(name, nodes, plans, args, hang_s, stdout=stdout, stderr=stderr, clock=clock, verb=verb)


async def open_host(
    args: argparse.Namespace, stderr: TextIO, clock: Callable[[], float] | None
) -> int | tuple[str, HostConfig, HostBackend, float | None]:
    """(name, host config, started backend, graph margin) or an exit code (config/connection)."""
    verb = args.command or "apply"
    try:
        config = load_config(getattr(args, "hosts", None))
        host = config.host(args.host)
    except ConfigError as exc:
        print(f"kvtui {verb}: {exc}", file=stderr)
        return EXIT_INPUT
    wanted = getattr(args, "probe", None)  # --probe / --no-probe over the host's ``probe``
    if wanted is not None:
        host = host.model_copy(update={"probe": bool(wanted)})
    try:
        backend = make_backend(args.host, host, clock=clock)
        await backend.start()
    except BackendError as exc:
        print(f"kvtui {verb}: {args.host}: {exc}", file=stderr)
        return EXIT_INPUT
    return args.host, host, backend, config.calc.graph_margin_gib


async def _gate(args: argparse.Namespace, nodes: Sequence[NodeSide], name: str, *, verb: str, restart: bool,
                deployment: bool, stderr: TextIO, stdin: TextIO, clock: Callable[[], float]) -> int | None:
    """What stands between the printed plans and the change, for a host (one node) and for every
    node of a deployment alike: a refusal on any node (audited, unless ``--dry-run``), ``--dry-run``,
    nothing to change, the confirmation (or ``--yes``). The exit code to end with, or None to go on."""

    def say(msg: str) -> None:
        print(msg, file=stderr, flush=True)

    refused = [n for n in nodes if n.plan is not None and n.plan.refused]
    for n in refused:
        assert n.plan is not None
        for r in n.plan.blocking:
            say(f"kvtui {verb}: refused{f' on {n.name}' if deployment else ''}: {r.reason}")
        if not getattr(args, "dry_run", False):
            await service.execute(n.plan, n.backend, clock=clock)  # audits the refusal
    if refused:
        if deployment:
            say(f"kvtui {verb}: {name}: refused as a whole: nothing was written on any node")
        return EXIT_REFUSED
    if getattr(args, "dry_run", False):
        say("dry run: nothing was changed")
        return EXIT_OK
    if not any(n.plan is not None and n.plan.changed for n in nodes):
        path = nodes[0].plan.source.path if nodes[0].plan is not None else name
        say(f"kvtui {verb}: {name}: every node's file already says this; nothing to do" if deployment
            else f"kvtui {verb}: {path} already says this; nothing to do")
        return EXIT_OK
    if args.yes:
        return None
    if deployment:
        prompt = (f"{verb.capitalize()} this on all {len(nodes)} nodes of {name}"
                  + (" and restart them" if restart else "") + "? [y/N] ")
    else:
        prompt = (f"{'Roll back' if verb == 'rollback' else 'Apply'} this on {name}"
                  + (" and restart" if restart else "") + "? [y/N] ")
    answer = await _ask(stdin, stderr, prompt)
    if answer is None:
        say(f"kvtui {verb}: refused: no terminal to confirm on; pass --yes to {verb} without asking")
        return EXIT_REFUSED
    if answer not in ("y", "yes"):
        say(f"kvtui {verb}: not applied (answered {answer or 'no'})")
        return EXIT_REFUSED
    return None


async def _execute(name: str, nodes: Sequence[NodeSide], plans: Sequence[ApplyPlan], args: argparse.Namespace,
                   hang_s: float, *, stdout: TextIO, stderr: TextIO, clock: Callable[[], float], verb: str) -> int:
    """The change of N >= 1 nodes through the service's guarded path, as one (``service.execute_nodes``:
    the files written, and with ``--restart`` every node restarted, the merged boot followed, node
    0's server probed, every node rolled back on failure), each node's boot recorded in the
    history, and summed up. Several nodes' progress lines carry their node's name."""

    def progress(msg: str) -> None:
        print(msg, file=stderr, flush=True)

    many, head = len(nodes) > 1, plans[0]
    eta = None
    if head.restart:  # how long the new boot usually takes (the history), apply and rollback alike
        past = await asyncio.to_thread(past_boots, head.name)
        flags = _eta_flags(head)
        if flags is not None:
            progress(expected_text(past, flags, host=head.name))
        eta = heartbeat_eta(past, head.name, clock)  # the follower's heartbeat says it too
    what = "the backups are restored" if verb == "rollback" else "the new flags are written"

    def stage(step: str) -> None:
        if many and step == "restart":
            progress(f"{name}: {what} and verified on every node")

    outs = await service.execute_nodes(
        [service.Node(p, n.backend, changes.prefixed(progress, n.name) if many else progress)
         for n, p in zip(nodes, plans, strict=True)], clock=clock, heartbeat=progress, eta=eta, hang_s=hang_s,
        stage=stage, say=progress)
    for p, out in zip(plans, outs, strict=True):
        _record(p, out, args, stderr, verb)
    for m in dict.fromkeys(o.messages[-1] if o.messages else o.status for o in outs
                           if o.status in ("error", "refused")):
        print(f"kvtui {verb}: {m}", file=stderr)
    if many and outs[0].status == "written":
        progress(f"{name}: {what} and verified on every node")
    if many and outs[0].probe is not None and not outs[0].probe.ok:
        progress(f"kvtui {verb}: {name}: {NOT_ANSWERING}: the new boot is failed (not_serving)")
    lines = [service.outcome_headline(outs[0], head.action, name)]
    for n, out in zip(nodes, outs, strict=True):
        if out.backup_path and out.status not in ("error", "refused", "unchanged"):
            lines.append(f"  previous version{f' ({n.name})' if many else ''}: {out.backup_path}")
        lines.extend(out.reality)
    if many and any(o.boot is not None for o in outs):
        dep = merge_boots([(n.name, o.boot) for n, o in zip(nodes, outs, strict=True)])
        lines.extend(render_deployment(dep, render_boot(dep.boot, 1, 1), 1, 1))
    stdout.write("\n".join(lines) + "\n")
    stdout.flush()
    return outs[0].code


async def open_nodes(config: Config, name: str, verb: str, stderr: TextIO,
                     clock: Callable[[], float] | None) -> list[NodeSide] | int:
    """Every node of the deployment ``name`` with its backend started (``apply``, ``rollback``,
    ``tune``), or the exit code: refused for pods of one controller (one host's change edits
    every pod template), 3 for a node that cannot be opened (the others closed again)."""
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
    results = await asyncio.gather(*(n.backend.start() for n in nodes), return_exceptions=True)
    for n, r in zip(nodes, results, strict=True):
        if isinstance(r, BaseException):
            print(f"kvtui {verb}: {name}: {n.name}: {r}", file=stderr)
            await close_nodes(nodes)
            return EXIT_INPUT
    return nodes


async def close_nodes(nodes: Sequence[NodeSide]) -> None:
    """Close every node's backend (errors passed over)."""
    for n in nodes:
        with contextlib.suppress(Exception):
            await n.backend.close()


def history_config(args: argparse.Namespace) -> HistoryConfig | None:
    """The hosts file's [history] for recording a restart's boot; None (the defaults) when the
    file cannot be read."""
    try:
        return load_config(getattr(args, "hosts", None)).history
    except ConfigError:
        return None


def _eta_flags(plan: ApplyPlan) -> Mapping[str, object] | None:
    """The flags the restarted server will run with, for its ETA: the prediction's boot's, else the
    written file's (a rollback predicts nothing)."""
    if plan.calibration is not None:
        return plan.calibration.flags
    try:
        cmd = fl.parse_command(plan.new_text, plan.source.kind)
    except (fl.FlagError, ValueError):
        return None
    flags: dict[str, object] = {k.replace("-", "_"): v for k, v in cmd.values().items()}
    if cmd.model is not None:
        flags.setdefault("model_path", cmd.model)
    return flags


def _record(plan: ApplyPlan, outcome: ApplyOutcome, args: argparse.Namespace, stderr: TextIO, verb: str) -> None:
    """The followed boot goes into the history with the edit, the prediction and the outcome."""
    number, problem = changes.record_restart_numbered(plan, outcome, history_config(args))
    if problem:
        print(f"kvtui {verb}: note: the boot is not in the history: {problem}", file=stderr)
    elif number is not None:  # its name in every view from now on (``kvtui.history.ident``)
        print(f"kvtui {verb}: {plan.name}: the new boot is boot #{number} in the history", file=stderr)


async def _ask(stdin: TextIO, stderr: TextIO, prompt: str) -> str | None:
    """The answer (lower case), or None when there is no terminal to ask on."""
    try:
        interactive = stdin.isatty()
    except (AttributeError, ValueError):
        interactive = False
    if not interactive:
        return None
    stderr.write(prompt)
    stderr.flush()
    line = await asyncio.to_thread(stdin.readline)
    if not line:
        return None
    return line.strip().lower()
