"""``kvtui tune NAME --goal GOAL [--requests K] [--also KNOB]… [--max-boots N] [--floor F]
[--ceiling F] [--step S] [--yes] [--dry-run] [--timeout S] [--json]``.

Reads the flags file and the host's boots, asks the calculator for the first candidate
(``kvtui.tune.planner``), prints the plan (goal, first candidate, predicted tokens, the boot budget,
what happens on failure) and asks; then runs the loop (``kvtui.tune.driver``) through the guarded
apply path, with a table of steps on stderr. Ctrl-C stops after the step in progress (a second one
interrupts it: the service audits and says where the host was left).

NAME a ``[deployments.NAME]``: every step goes through the controller ``kvtui apply NAME`` uses
(``kvtui.changes``: every node's file, all or nothing, every node restarted, node 0 first, the
merged boot followed and node 0's server asked for a token); the planner reads node 0's flags file
and boots; the closing rollback restores every node (``kvtui.tune.driver``).

``--goal tokens=observed``: ``tokens=N`` with N the observed peak demand of the running boot (else
the newest boot with serving figures: what ``kvtui watch`` or the console recorded in the history)
plus 20 % (``observed_goal``); without figures it says to run ``kvtui watch HOST`` first (exit 3).

Exit codes: 0 the goal is met; 1 not met within the budget (the last ready configuration is left
running, rolled back to when the last step failed); 2 usage; 3 configuration or connection; 4
refused (readonly host, no terminal to confirm on, answered no, a step refused); 5 a boot timed out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from kvtui import kvcalc
from kvtui.boot import Boot, BootStatus
from kvtui.changes import stored_siblings
from kvtui.commands.apply import _ask, close_nodes, deployment_of, history_config, open_host, open_nodes, run_main
from kvtui.config import DEFAULT_HANG_SECONDS
from kvtui.engines.events import Engine
from kvtui.exits import EXIT_INPUT, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from kvtui.history import HistoryError, boot_key, open_store
from kvtui.history import serving_figures as sf
from kvtui.hosts import service
from kvtui.hosts.backend import BackendError
from kvtui.tune import driver
from kvtui.tune.driver import TABLE_HEAD, TuneResult, table_row
from kvtui.tune.planner import Bounds, Planner, Stop, TuneError, also_name, parse_goal

if TYPE_CHECKING:
    from kvtui.changes import NodeSide


OBSERVED = "tokens=observed"
FULL_POOL = 0.95  # a peak KV usage this high: the observed peak is a floor of the demand


def is_observed(goal: str) -> bool:
    return "".join(goal.split()).lower() == OBSERVED


def observed_goal(name: str, cur: object) -> tuple[str, str] | str:
    """``--goal tokens=observed``: ``tokens=N`` from the observed peak demand (tokens the pool held
    at its fullest, ``kvtui watch`` or the console recorded it: ``kvtui.history.serving_figures``)
    of the running boot, else of the newest boot of the host with serving figures, plus
    ``OBSERVED_MARGIN`` (20 %); (the goal, a note saying where it came from), or the message why
    there is none."""
    key = boot_key(name, cur) if isinstance(cur, Boot) else None
    with open_store(readonly=True) as store:
        try:
            rows = store.boots(name, limit=200)
        except HistoryError as exc:
            return f"--goal {OBSERVED}: {exc}"
    mine = [r for r in rows if r.key == key]
    row = next((r for r in [*mine, *rows] if sf.observed_tokens(r.document) is not None), None)
    if row is None:
        return (f"--goal {OBSERVED}: no boot of {name} has serving figures in the history: run kvtui watch {name} "
                "(or keep the console's serving panel open) while the server is under its load, then tune again")
    got = sf.observed_tokens(row.document)
    section = row.document.serving_figures
    assert got is not None
    assert section is not None
    peak, goal = got
    which = "the running boot" if mine and row is mine[0] else "the newest boot with serving figures"
    watched = sf._num(section.seconds)
    note = (f"--goal {OBSERVED}: {which} (#{row.id}) held at most {peak:,} tokens "
            f"(peak KV usage {sf._pct_text(section.peak_kv_usage)}"
            + (f", watched {watched:.0f} s" if watched is not None else "")
            + f") + {sf.OBSERVED_MARGIN:.0%} = tokens={goal:,}")
    usage = sf._num(section.peak_kv_usage)
    if usage is not None and usage >= FULL_POOL:
        note += ("; the pool was full, so the demand was at least that: watch the new boot under the same load "
                 "and tune again if it fills too")
    return f"tokens={goal}", note


def run(args: argparse.Namespace, **streams: Any) -> int:
    """``run_main(tune_main, …)`` (``kvtui.commands.apply``)."""
    return run_main(tune_main, args, **streams)


def make_planner(args: argparse.Namespace, engine: object, start: dict[str, object], start_ready: bool,
                 start_tokens: int | None, margin: float | None) -> Planner:
    """The planner for these options (``TuneError`` for a bad one)."""
    goal = parse_goal(args.goal, args.requests)
    bounds = Bounds(args.floor, args.ceiling, args.step, args.max_boots)
    bounds.check()
    also: list[str] = []
    for raw in args.also or []:
        for name in str(raw).split(","):
            k = also_name(name)
            if k is None:
                raise TuneError(f"--also {name}: expected max-running-requests or cuda-graph-max-bs")
            also.append(k)
    assert isinstance(engine, Engine)

    return Planner(engine, goal, bounds, tuple(dict.fromkeys(also)),
                   kvcalc.DEFAULT_GRAPH_MARGIN_GIB if margin is None else margin,
                   start, start_ready, start_tokens,
                   stored=stored_siblings)  # the history calibrates too, as calc --host and the console


async def tune_main(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO, stdin: TextIO,
                    clock: Callable[[], float] | None = None) -> int:
    def err(msg: str) -> None:
        print(f"kvtui tune: {msg}", file=stderr, flush=True)

    observed = is_observed(args.goal)
    try:
        if observed:
            if args.requests is not None:
                raise TuneError("--requests goes with --goal context=N, not tokens=observed")
        else:
            parse_goal(args.goal, args.requests)
    except TuneError as exc:
        err(str(exc))
        return EXIT_USAGE
    if args.timeout <= 0:
        err(f"--timeout {args.timeout:g}: expected a number of seconds above 0")
        return EXIT_USAGE
    found = deployment_of(args)
    nodes: list[NodeSide] = []
    hang_s = DEFAULT_HANG_SECONDS
    if found is not None:  # a deployment: through the same controller as apply NAME, node 0 read
        opened_nodes = await open_nodes(found[0], args.host, "tune", stderr, clock)
        if isinstance(opened_nodes, int):
            return opened_nodes
        nodes, hang_s = opened_nodes, found[1].hang_seconds
        name = args.host if len(nodes) > 1 else nodes[0].name  # a one-node deployment's tune is its host's
        host, backend, margin = nodes[0].host, nodes[0].backend, found[0].calc.graph_margin_gib
    else:
        opened = await open_host(args, stderr, clock)
        if isinstance(opened, int):
            return opened
        name, host, backend, margin = opened
    try:
        try:
            cmd, boots = await driver.start_state(nodes[0].name if nodes else name, host, backend)
        except (service.ServiceError, BackendError) as exc:
            err(str(exc))
            return getattr(exc, "code", EXIT_INPUT)
        cur = boots[-1] if boots else None
        if observed:
            goal = observed_goal(nodes[0].name if nodes else name, cur)
            if isinstance(goal, str):
                err(goal)
                return EXIT_INPUT
            args.goal, note = goal
            err(note)
        try:
            planner = make_planner(args, cmd.engine, driver.running_flags(boots, cmd),
                                   cur is not None and cur.status is BootStatus.READY,
                                   None if cur is None else cur.metrics.max_total_num_tokens, margin)
        except TuneError as exc:
            err(str(exc))
            return EXIT_USAGE
        ro = next((n.name for n in nodes if n.host.readonly), None) if nodes else (name if host.readonly else None)
        if ro is not None:
            err(f"refused: host '{ro}' is readonly (readonly = true): kvtui never edits or restarts it")
            return EXIT_REFUSED
        first = planner.next(boots, [])
        stdout.write(driver.render_plan(name, planner, first, cur))
        stdout.flush()
        if isinstance(first, Stop):
            result = driver.TuneResult(name, planner.goal.describe(), EXIT_OK if first.met else 1, first.met,
                                       first.reason, final="unchanged")
            if not args.dry_run:
                driver._audit(driver.TuneRun(name, host, backend, planner, boots, clock=clock or time.time), result)
            return _report(args, result, stdout, stderr)
        if args.dry_run:
            err("dry run: nothing was changed")
            return EXIT_OK
        if not args.yes:
            answer = await _ask(stdin, stderr, f"Tune {name} (up to {planner.bounds.max_boots} restarts)? [y/N] ")
            if answer is None:
                err("refused: no terminal to confirm on; pass --yes to tune without asking")
                return EXIT_REFUSED
            if answer not in ("y", "yes"):
                err(f"not tuned (answered {answer or 'no'})")
                return EXIT_REFUSED
        run = driver.TuneRun(name, host, backend, planner, list(boots), timeout=float(args.timeout),
                             margin_gib=margin, say=lambda m: print(m, file=stderr, flush=True),
                             step_say=lambda row: print(row, file=stderr, flush=True), clock=clock or time.time,
                             history=history_config(args), nodes=nodes, hang_s=hang_s)
        print(driver.TABLE_HEAD, file=stderr, flush=True)
        with _stop_on_sigint(run.stop, err):
            result = await driver.tune(run)
        return _report(args, result, stdout, stderr)
    finally:
        await close_nodes(nodes) if nodes else await backend.close()


@contextlib.contextmanager
def _stop_on_sigint(stop: asyncio.Event, err: Callable[[str], None]) -> Iterator[None]:
    """The first Ctrl-C asks the tune to stop after the step in progress; the second interrupts."""
    loop = asyncio.get_running_loop()
    installed = False
    if sys.platform != "win32":
        def first() -> None:
            err("stopping after the step in progress (Ctrl-C again to interrupt it)")
            stop.set()
            loop.remove_signal_handler(signal.SIGINT)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, first)
            installed = True
    try:
        yield None
    finally:
        if installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)


def _report(args: argparse.Namespace, result: object, stdout: TextIO, stderr: TextIO) -> int:
    assert isinstance(result, TuneResult)
    head = "goal met" if result.met else ("interrupted" if result.interrupted else "goal not met")
    print(f"{result.host}: {head}: {result.reason}", file=stderr, flush=True)
    if result.final:
        print(f"{result.host}: running {result.final}" if result.final != "unchanged"
              else f"{result.host}: nothing was changed", file=stderr, flush=True)
    if args.json:
        stdout.write(json.dumps(result.to_json(), indent=1) + "\n")
    else:
        if result.steps:
            stdout.write("\n".join([TABLE_HEAD, *(table_row(s) for s in result.steps)]) + "\n")
        stdout.write(f"{result.host}: {head}" + (f"; {result.rolled_back}" if result.rolled_back else "") + "\n")
    stdout.flush()
    return result.code
