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
all or nothing (``kvtui.changes``: a host is the deployment of one node), in this order:

1. every node's host is opened and its edit planned (``changes.plan_nodes``, no restart: the
   effective flags file of each node, its diff, its prediction from its own last boot); a refusal
   on any node refuses the whole (exit 4: nothing is written anywhere);
2. one confirmation for all nodes (or ``--yes``), the same gate as a host's (``_gate``);
3. the files are written node by node through the guarded path (``changes.write_nodes``): every
   file is verified before any restart. When a node's write fails, every node written before it is
   restored from the backup just made (verified the same way), and the command exits with that
   node's error: no node is left with the new flags, nothing restarts;
4. with ``--restart``: ``changes.restart_and_follow``: node rank 0 first (it hosts the rendezvous
   the others connect to; SGLang ``--dist-init-addr``, vLLM ``--master-addr``), the others right
   after, without waiting; the nodes' new boots are merged (``kvtui.boot.deployment``) until the whole is
   ready (0), a node failed (1; ``--rollback-on-failure`` then restores and restarts every node),
   a node holds the others back past the deployment's ``hang_seconds`` with its unit gone (1), or
   the timeout (5);
5. the merged boot ready: node 0's server is asked for one token (``changes.probe_head``;
   ``--no-probe`` or node 0's ``probe = false`` take the log's word): no answer within
   ``min(--timeout, 60 s)`` fails the change as ``not_serving`` (1; ``--rollback-on-failure`` then
   acts, and the rolled-back boot is asked the same way).

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
from kvtui.changes import NOT_ANSWERING, NodeSide
from kvtui.commands.bootview import render_boot
from kvtui.commands.bootview_deployment import render_deployment
from kvtui.config import Config, ConfigError, DeploymentConfig, HistoryConfig, HostConfig, load_config
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from kvtui.history.eta import expected_text, heartbeat_eta, past_boots
from kvtui.hosts import service
from kvtui.hosts.backend import BackendError, HostBackend
from kvtui.hosts.factory import make_backend
from kvtui.hosts.probe import DEFAULT_PROBE_TIMEOUT_S

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
    found = deployment_of(args)
    if found is not None:
        return await apply_deployment(args, *found, edits, env_edits, stdout=stdout, stderr=stderr, stdin=stdin,
                                      clock=clock)

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
    """Open the host, make the plan (``apply`` or ``rollback``), print it, pass the gate (``_gate``:
    refusal, dry run, nothing to do, confirmation) and execute it; the backend is closed whatever
    happens."""
    opened = await open_host(args, stderr, clock)
    if isinstance(opened, int):
        return opened
    name, host, backend, margin = opened
    try:
        try:
            plan = await make_plan(name, host, backend, margin)
        except service.ServiceError as exc:
            print(f"kvtui {verb}: {exc}", file=stderr)
            return exc.code
        stdout.write(service.render_plan(plan))
        stdout.flush()
        side = NodeSide(plan.name, host, backend, plan=plan)
        gate = await _gate(args, [side], plan.name, verb=verb, restart=plan.restart, deployment=False,
                           stderr=stderr, stdin=stdin, clock=clock or time.time)
        if gate is not None:
            return gate
        return await _execute(plan, backend, args, stdout=stdout, stderr=stderr, clock=clock, verb=verb)
    finally:
        await backend.close()


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


async def _execute(plan: ApplyPlan, backend: HostBackend, args: argparse.Namespace, *, stdout: TextIO,
                   stderr: TextIO, clock: Callable[[], float] | None, verb: str) -> int:
    """One host's change through the service's guarded path (write, and with ``--restart`` the
    restart followed, probed, rolled back on failure), recorded in the history and summed up."""

    def progress(msg: str) -> None:
        print(msg, file=stderr, flush=True)

    eta = None
    if plan.restart:  # how long the new boot usually takes (the history), apply and rollback alike
        past = await asyncio.to_thread(past_boots, plan.name)
        flags = _eta_flags(plan)
        if flags is not None:
            progress(expected_text(past, flags, host=plan.name))
        eta = heartbeat_eta(past, plan.name, clock or time.time)  # the follower's heartbeat says it too

    outcome = await service.execute(plan, backend, progress, clock=clock or time.time, heartbeat=progress, eta=eta)
    _record(plan, outcome, args, stderr, verb)
    if outcome.status in ("error", "refused"):
        print(f"kvtui {verb}: {outcome.messages[-1] if outcome.messages else outcome.status}", file=stderr)
    summary = _summary(outcome, plan)
    if summary:
        stdout.write(summary)
        stdout.flush()
    return outcome.code


async def apply_deployment(
    args: argparse.Namespace, config: Config, dep_cfg: DeploymentConfig, edits: Sequence[fl.Edit],
    env_edits: Sequence[envedit.EnvEdit], *, stdout: TextIO, stderr: TextIO, stdin: TextIO,
    clock: Callable[[], float] | None = None, verb: str = "apply",
) -> int:
    """Every node of a deployment changed as one (the module docstring); ``verb`` "rollback":
    every node's newest backup instead of an edit (``edits`` empty), on the same path."""
    name: str = args.host
    opened = await open_nodes(config, name, verb, stderr, clock)
    if isinstance(opened, int):
        return opened
    try:
        return await _apply_nodes(args, config, dep_cfg, opened, edits, env_edits, stdout=stdout, stderr=stderr,
                                  stdin=stdin, clock=clock or time.time, verb=verb)
    finally:
        await close_nodes(opened)


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
    """End every node's follower and close its backend (errors passed over)."""
    for n in nodes:
        if n.follower is not None:
            with contextlib.suppress(Exception):
                await n.follower.close()
        with contextlib.suppress(Exception):
            await n.backend.close()


async def _apply_nodes(
    args: argparse.Namespace, config: Config, dep_cfg: DeploymentConfig, nodes: list[NodeSide],
    edits: Sequence[fl.Edit], env_edits: Sequence[envedit.EnvEdit], *, stdout: TextIO, stderr: TextIO,
    stdin: TextIO, clock: Callable[[], float], verb: str = "apply",
) -> int:
    name: str = args.host
    timeout = float(args.timeout)

    def say(msg: str) -> None:
        print(msg, file=stderr, flush=True)

    # 1. plan every node at once (no restart in the node plans: the deployment restarts as one)
    errors = await changes.plan_nodes(nodes, edits, verb=verb, force=bool(getattr(args, "force", False)),
                                      timeout=timeout, graph_margin_gib=config.calc.graph_margin_gib, clock=clock,
                                      env_edits=env_edits)
    for n, exc in errors:
        if isinstance(exc, service.ServiceError):
            say(f"kvtui {verb}: {name}: {n.name}: {exc}")
            return exc.code
        raise exc
    for i, n in enumerate(nodes):
        assert n.plan is not None
        stdout.write(f"== node {i} of {name}: {n.name} ==\n")
        stdout.write(service.render_plan(n.plan))
    if args.restart:
        order = ", ".join(f"{n.name}" for n in nodes)
        stdout.write(f"then: restart every node ({order}; node 0 first, the others right after) and follow "
                     "the merged boot until it is ready or failed\n")
    stdout.flush()
    gate = await _gate(args, nodes, name, verb=verb, restart=bool(args.restart), deployment=True, stderr=stderr,
                       stdin=stdin, clock=clock)
    if gate is not None:
        return gate

    # 2. write and verify every file; a failure restores the nodes already written
    wrote = await changes.write_nodes(nodes, say, verb=verb, clock=clock)
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
    def note(msg: str) -> None:
        say(f"kvtui {verb}: {msg}")

    probe_on, probe_s = getattr(args, "probe", None), min(timeout, DEFAULT_PROBE_TIMEOUT_S)
    code, dep, res = await changes.restart_nodes(nodes, dep_cfg.hang_seconds, timeout, clock, say, edits,
                                                 config.history, note=note, probe_on=probe_on, probe_timeout=probe_s)
    if res is not None and not res.ok:
        say(f"kvtui {verb}: {name}: {NOT_ANSWERING}: the new boot is failed (not_serving)")
    if dep is not None:
        stdout.write("\n".join(render_deployment(dep, render_boot(dep.boot, 1, 1), 1, 1)) + "\n")
        stdout.flush()
    if code != EXIT_OK and verb == "apply" and getattr(args, "rollback_on_failure", False):
        say(f"rolling back every node of {name} (--rollback-on-failure)")
        restored = await changes.restore(written, clock, say)
        say(f"{name}: " + "; ".join(restored))
        rc, _, _ = await changes.restart_nodes(nodes, dep_cfg.hang_seconds, timeout, clock, say, (), config.history,
                                               note=note, probe_on=probe_on, probe_timeout=probe_s)
        say(f"{name}: rolled back: the previous flags " + ("are back and the boot is ready" if rc == EXIT_OK
                                                          else f"are back; the boot ended with exit {rc}"))
        return EXIT_FAILED if code in (EXIT_OK, EXIT_FAILED) else code
    return code


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


def _summary(outcome: ApplyOutcome, plan: ApplyPlan) -> str:
    lines = [service.outcome_headline(outcome, plan.action, plan.name)]
    if outcome.backup_path and outcome.status not in ("error", "refused", "unchanged"):
        lines.append(f"  previous version: {outcome.backup_path}")
    lines.extend(outcome.reality)
    return "\n".join(lines) + "\n"


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
