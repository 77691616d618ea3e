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
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from kvtui.exits import EXIT_INPUT, EXIT_OK, EXIT_REFUSED, EXIT_USAGE

if TYPE_CHECKING:
    from kvtui.config import HistoryConfig, HostConfig
    from kvtui.hosts.backend import HostBackend
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


PlanMaker = Callable[[str, "HostConfig", "HostBackend", float | None], Awaitable["ApplyPlan"]]


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


async def apply_main(
    args: argparse.Namespace,
    *,
    stdout: TextIO,
    stderr: TextIO,
    stdin: TextIO,
    clock: Callable[[], float] | None = None,
) -> int:
    from kvtui import changes, envedit, flags
    from kvtui.hosts import service

    try:
        edits = flags.parse_edit_args(list(args.set or []), list(args.unset or []))
        env_edits = envedit.parse_env_args(list(getattr(args, "setenv", None) or []),
                                           list(getattr(args, "unsetenv", None) or []))
        edits, env_edits = service.split_env_edits(edits, env_edits)
    except (flags.FlagError, service.ServiceError) as exc:
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
    deployment = await _deployment_apply(args, edits, env_edits, stdout=stdout, stderr=stderr, stdin=stdin,
                                         clock=clock)
    if deployment is not None:
        return deployment

    async def make_plan(name: str, host: HostConfig, backend: HostBackend, margin: float | None) -> ApplyPlan:
        return await changes.plan_apply(
            name, host, backend, edits,
            restart=bool(args.restart), force=bool(args.force),
            rollback_on_failure=bool(args.rollback_on_failure), timeout=float(args.timeout),
            graph_margin_gib=margin, clock=clock or time.time, env_edits=env_edits,
        )

    return await plan_and_execute(args, make_plan, verb="apply", stdout=stdout, stderr=stderr, stdin=stdin,
                                  clock=clock)


async def _deployment_apply(
    args: argparse.Namespace, edits: Any, env_edits: Any, *, stdout: TextIO, stderr: TextIO, stdin: TextIO,
    clock: Callable[[], float] | None,
) -> int | None:
    """A ``[deployments.NAME]``: the same edit on every node, all or nothing
    (``kvtui.commands.apply_nodes``); None for a host (or a hosts file that does not load: the
    host path reports that)."""
    from kvtui.config import ConfigError, load_config

    try:
        config = load_config(getattr(args, "hosts", None))
    except ConfigError:
        return None
    dep = config.deployment(args.host)
    if dep is None:
        return None
    from kvtui.commands.apply_nodes import apply_deployment

    return await apply_deployment(args, config, dep, edits, env_edits, stdout=stdout, stderr=stderr, stdin=stdin,
                                  ask=_ask, clock=clock)


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
    """Open the host, make the plan (``apply`` or ``rollback``), print it, confirm and execute it;
    the backend is closed whatever happens."""
    from kvtui.hosts import service

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
        return await confirm_and_execute(plan, backend, args, stdout=stdout, stderr=stderr, stdin=stdin,
                                         clock=clock, verb=verb)
    finally:
        await backend.close()


async def open_host(
    args: argparse.Namespace, stderr: TextIO, clock: Callable[[], float] | None
) -> int | tuple[str, HostConfig, HostBackend, float | None]:
    """(name, host config, started backend, graph margin) or an exit code (config/connection)."""
    from kvtui.config import ConfigError, load_config
    from kvtui.hosts.backend import BackendError
    from kvtui.hosts.factory import make_backend

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


async def confirm_and_execute(
    plan: ApplyPlan,
    backend: HostBackend,
    args: argparse.Namespace,
    *,
    stdout: TextIO,
    stderr: TextIO,
    stdin: TextIO,
    clock: Callable[[], float] | None,
    verb: str,
) -> int:
    from kvtui.hosts import service

    if plan.refused:
        for r in plan.blocking:
            print(f"kvtui {verb}: refused: {r.reason}", file=stderr)
        if not getattr(args, "dry_run", False):
            await service.execute(plan, backend, clock=clock or time.time)  # audits the refusal
        return EXIT_REFUSED
    if getattr(args, "dry_run", False):
        print("dry run: nothing was changed", file=stderr)
        return EXIT_OK
    if not plan.changed:
        print(f"kvtui {verb}: {plan.source.path} already says this; nothing to do", file=stderr)
        return EXIT_OK
    if not args.yes:
        answer = await _ask(stdin, stderr, f"{'Roll back' if verb == 'rollback' else 'Apply'} this on {plan.name}"
                            + (" and restart" if plan.restart else "") + "? [y/N] ")
        if answer is None:
            print(f"kvtui {verb}: refused: no terminal to confirm on; pass --yes to {verb} without asking",
                  file=stderr)
            return EXIT_REFUSED
        if answer not in ("y", "yes"):
            print(f"kvtui {verb}: not applied (answered {answer or 'no'})", file=stderr)
            return EXIT_REFUSED

    def progress(msg: str) -> None:
        print(msg, file=stderr, flush=True)

    eta = None
    if plan.restart:  # how long the new boot usually takes (the history), apply and rollback alike
        from kvtui.history.eta import expected_text, heartbeat_eta, past_boots

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


def history_config(args: argparse.Namespace) -> HistoryConfig | None:
    """The hosts file's [history] for recording a restart's boot; None (the defaults) when the
    file cannot be read."""
    from kvtui.config import ConfigError, load_config

    try:
        return load_config(getattr(args, "hosts", None)).history
    except ConfigError:
        return None


def _eta_flags(plan: ApplyPlan) -> Mapping[str, object] | None:
    """The flags the restarted server will run with, for its ETA: the prediction's boot's, else the
    written file's (a rollback predicts nothing)."""
    from kvtui import flags as fl

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
    from kvtui import changes

    number, problem = changes.record_restart_numbered(plan, outcome, history_config(args))
    if problem:
        print(f"kvtui {verb}: note: the boot is not in the history: {problem}", file=stderr)
    elif number is not None:  # its name in every view from now on (``kvtui.history.ident``)
        print(f"kvtui {verb}: {plan.name}: the new boot is boot #{number} in the history", file=stderr)


def _summary(outcome: ApplyOutcome, plan: ApplyPlan) -> str:
    from kvtui.hosts.service import outcome_headline

    lines = [outcome_headline(outcome, plan.action, plan.name)]
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
