"""kvtui's command line. Keep imports here light: ``kvtui --help`` must start in well under 0.3 s.

Each command lives in ``kvtui/commands/<name>.py`` as ``run(args) -> int`` and is imported only
when that command runs.

Exit codes (every command): ``kvtui.exits``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kvtui import __version__
from kvtui.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from kvtui.fleet.columns import SORT_COLUMNS

# argparse exits 2 on usage errors, which is already kvtui's usage code (EXIT_USAGE).


def _add_calc_edits(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        dest="set",
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        help="edit a flag (engine names and aliases: mem-fraction-static, tp, max-model-len, …)",
    )
    p.add_argument("--unset", dest="unset", action="append", default=[], metavar="FLAG", help="remove a flag")


def _add_tune(sub: argparse._SubParsersAction[argparse.ArgumentParser],
              common: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tune", parents=common,
                       help="find the largest memory fraction that boots (or meets a goal), one safe step at a time")
    p.add_argument("host", metavar="HOST", help="a [hosts.NAME] of hosts.toml ('demo' always exists)")
    p.add_argument("--goal", required=True, metavar="GOAL",
                   help="max-tokens | context=N | tokens=N | tokens=observed (the peak demand kvtui watch "
                        "recorded, +20 %%)")
    p.add_argument("--requests", type=int, metavar="K", help="with context=N: K requests of N tokens (default 1)")
    p.add_argument("--also", action="append", default=[], metavar="KNOB",
                   help="also move max-running-requests / cuda-graph-max-bs (only those named)")
    p.add_argument("--max-boots", type=int, default=6, metavar="N", help="at most N boots (default 6)")
    p.add_argument("--floor", type=float, default=0.5, metavar="F", help="never below this fraction (default 0.5)")
    p.add_argument("--ceiling", type=float, default=0.99, metavar="F", help="never above this fraction (default 0.99)")
    p.add_argument("--step", type=float, default=0.01, metavar="S",
                   help="the grid of first candidates and of steps up after a pool that did not fit (default 0.01)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S", help="per boot (default 1800)")
    p.add_argument("--json", action="store_true", help="the result as JSON on stdout")


def _add_fleet(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               common: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fleet", parents=common,
                       help="every vLLM / SGLang instance and its GPUs, from the [prometheus] of hosts.toml")
    p.add_argument("--json", action="store_true", help="print the rows as JSON on stdout")
    p.add_argument("--problems", action="store_true",
                   help="exit 1 when any instance is in trouble (down, restarting, KV full with a queue, "
                        "preempting, XID errors), 0 otherwise; 3 when Prometheus cannot be read")
    p.add_argument("--sort", choices=SORT_COLUMNS, default="host", metavar="COL",
                   help="order within trouble / healthy rows: " + ", ".join(SORT_COLUMNS)
                        + " (text A-Z, numbers largest first; default host)")
    p.add_argument("--filter", metavar="TEXT", default=None,
                   help="only rows whose host, instance, engine, version, model, state or trouble contain TEXT")


HOST_HELP = "a [hosts.NAME] or [deployments.NAME] of hosts.toml ('demo' always exists)"
HOSTS_HELP = "hosts.toml (default: $KVTUI_HOSTS, ./hosts.toml, $XDG_CONFIG_HOME/kvtui/hosts.toml)"


def _global_options() -> argparse.ArgumentParser:
    """The global options, also accepted after the command (``kvtui hosts --check --hosts x.toml``).
    Their default is SUPPRESS, so a command that does not repeat one keeps the value given before it."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--hosts", metavar="PATH", default=argparse.SUPPRESS, help=HOSTS_HELP)
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtui",
        description=(
            "Watch SGLang / vLLM servers boot on GPU hosts, predict their KV pool, "
            "and apply flag edits safely."
        ),
        epilog="Exit codes: 0 ok, 1 failed, 2 usage, 3 connection/config/input, 4 refused, 5 timed out.",
    )
    parser.add_argument("--hosts", metavar="PATH", help=HOSTS_HELP + "; accepted before or after the command")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = [_global_options()]

    p = sub.add_parser("connect", parents=common, help="live console for one or more hosts ('demo' always exists)")
    p.add_argument("host", nargs="*", metavar="HOST",
                   help="hosts to watch, one tab each (a deployment: one console of its nodes); 'demo' always exists")
    p.add_argument("--readonly", action="store_true", help="hide every action that changes a host")
    p.add_argument("--bundle", metavar="FILE.tar.gz",
                   help="open an incident bundle offline: a read-only console over the recorded boot")
    p.add_argument("--theme", metavar="NAME",
                   help="colour theme for this run (default: the one last chosen with T, else [ui] theme)")

    p = sub.add_parser("wait", parents=common, help="follow a boot until it is ready (0) or fails (1)")
    p.add_argument("host", metavar="HOST", help=HOST_HELP)
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S", help="give up after S seconds (exit 5)")
    p.add_argument("--stall-timeout", type=float, default=None, metavar="S",
                   help="give up after S seconds without progress (exit 5; a repeated wait line is not "
                        "progress); default: off")
    p.add_argument("--next", action="store_true", help="wait for the next boot to start, not the current one")
    p.add_argument(
        "--follow-restarts", action="store_true", help="keep waiting through automatic restarts until one is ready"
    )
    p.add_argument("--json", action="store_true", help="print the boot as JSON on stdout")
    p.add_argument("--probe", action=argparse.BooleanOptionalAction, default=None,
                   help="after ready, ask the server for one token (default: on when the port is known)")

    p.add_argument("--serving", action="store_true",
                   help="once ready, also read a first serving sample (/metrics, else the log) and print it")

    p = sub.add_parser("watch", parents=common,
                       help="a serving server's KV pressure from its /metrics (or its log): one line per sample")
    p.add_argument("host", metavar="HOST", help="a [hosts.NAME] of hosts.toml ('demo' always exists), or a "
                   "[deployments.NAME] (node 0's /metrics, else the nodes' logs)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per sample: the window's figures and the diagnosis (README: kvtui watch)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S", help="seconds between samples (default 5)")
    p.add_argument("--count", type=int, default=None, metavar="N",
                   help="stop after N samples (exit 0); default: until interrupted")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="give up when no sample could be read for S seconds, waiting for the server to be "
                        "ready included (exit 5; default 1800)")

    p = sub.add_parser(
        "replay",
        parents=common,
        help="analyse a saved log (raw, journalctl short/short-iso/short-precise/cat/json, docker logs)",
    )
    p.add_argument("path", metavar="PATH|-", nargs="+",
                   help="a log; several: the nodes of one deployment, in node-rank order, merged into one boot")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON on stdout")
    p.add_argument(
        "--unknown", action="store_true", help="list the startup lines no rule recognised, by shape (for a report)"
    )
    p.add_argument("--record", metavar="HOST", help="also store the log's boots in the history, as boots of HOST")

    p = sub.add_parser("calc", parents=common, help="predict the KV pool for edited flags")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--log", metavar="PATH", help="calibrate from a saved log")
    src.add_argument("--host", metavar="HOST", help="calibrate from the host's latest boot")
    src.add_argument("--model", metavar="CONFIG.json", help="no boot yet: size from a model config.json")
    p.add_argument("--boot", type=int, metavar="N", help="which boot of the log (default: last that sized its pool)")
    p.add_argument("--gpu-mem-gib", type=float, metavar="G", help="GPU memory per device in GiB")
    p.add_argument("--tp", type=int, metavar="N", help="tensor-parallel size (with --model)")
    p.add_argument("--weights-gib", type=float, metavar="W", help="weights per rank in GiB (with --model)")
    p.add_argument("--engine", choices=["sglang", "vllm"], help="engine (with --model; default sglang)")
    _add_calc_edits(p)
    p.add_argument(
        "--full-context", type=int, default=1, metavar="K", help="full-context requests that must fit (default 1)"
    )
    p.add_argument("--json", action="store_true", help="print the prediction as JSON on stdout")

    p = sub.add_parser("apply", parents=common, help="edit the server's flags and (optionally) restart, safely")
    p.add_argument("host", metavar="HOST", help=HOST_HELP)
    p.add_argument(
        "--set", dest="set", action="append", default=[], metavar="FLAG[=VALUE]", help="set a flag (bare: boolean)"
    )
    p.add_argument("--unset", dest="unset", action="append", default=[], metavar="FLAG", help="remove a flag")
    p.add_argument("--setenv", dest="setenv", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable the server starts with (unit Environment=, script export)")
    p.add_argument("--unsetenv", dest="unsetenv", action="append", default=[], metavar="NAME",
                   help="remove an environment variable the unit or script sets")
    p.add_argument("--restart", action="store_true", help="restart and wait for the new boot")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="show the diff and commands, change nothing")
    p.add_argument(
        "--force",
        action="store_true",
        help="apply even when the prediction says it will fail, or a flag is unknown to the engine",
    )
    p.add_argument("--rollback-on-failure", action="store_true", help="restore the previous flags if the boot fails")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="with --restart: give up waiting for the boot after S seconds (exit 5; default 1800)")
    p.add_argument("--probe", action=argparse.BooleanOptionalAction, default=None,
                   help="with --restart: once ready, ask the server for one token (default: the host's probe, on)")

    p = sub.add_parser("rollback", parents=common, help="restore the newest (or a named) backup of the server's flags")
    p.add_argument("host", metavar="HOST", help=HOST_HELP)
    p.add_argument("--to", metavar="BACKUP", help="the backup file to restore (default: the newest)")
    p.add_argument("--restart", action="store_true", help="restart and wait for the restored boot")
    p.add_argument("--force", action="store_true",
                   help="with --restart: restart even over orphaned engine processes of the previous boot")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S",
                   help="with --restart: give up waiting for the boot after S seconds (exit 5; default 1800)")
    p.add_argument("--probe", action=argparse.BooleanOptionalAction, default=None,
                   help="with --restart: once ready, ask the server for one token (default: the host's probe, on)")

    _add_tune(sub, common)

    p = sub.add_parser("history", parents=common, help="the boots kvtui remembers of a host (a deployment: its "
                       "starts); --diff: what changed",
                       usage="%(prog)s HOST [--json] [--limit N] [--diff [A [B]]] | show KEY|N [--json]")
    p.add_argument("host", metavar="HOST", help=HOST_HELP)
    p.add_argument("ref", nargs="?", metavar="KEY|N", help="after `show`: one stored boot in full (its id or key)")
    p.add_argument("--json", action="store_true", help="print the stored boots (or the diff) as JSON on stdout")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="list the newest N boots (default 20)")
    p.add_argument("--diff", nargs="*", type=int, metavar="ID",
                   help="compare boot A (default: the newest) with B (default: the last ready boot of its model)")

    p = sub.add_parser("bundle", parents=common, help="one remembered boot as an incident bundle (.tar.gz)")
    p.add_argument("host", metavar="HOST", help="a host of hosts.toml whose boots kvtui remembers")
    p.add_argument("--boot", type=int, metavar="N", help="the boot's id in kvtui history (default: the newest)")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it (default: kvtui-HOST-bootN.tar.gz)")

    _add_fleet(sub, common)

    p = sub.add_parser("hosts", parents=common, help="list and validate the inventory")
    p.add_argument("--check", action="store_true",
                   help="validate and exit 3 on problems; with [prometheus], also reach it and count what it scrapes")
    p.add_argument("--connect", action="store_true", help="also reach each host")
    return parser


def _subparser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            chosen: argparse.ArgumentParser = action.choices[command]
            return chosen
    return None


# The one start-up lazy of the command line: each command's module (``run(args) -> int``), imported
# only when it runs. Each imports what it needs at module level: importing them all costs ~0.9 s
# (textual, asyncssh, pydantic, the calculator; python -X importtime) where ``kvtui --help`` takes 0.08 s.
COMMANDS: dict[str, str] = {name: f"kvtui.commands.{name}" for name in (
    "connect", "wait", "watch", "replay", "calc", "apply", "rollback", "tune", "history", "bundle", "fleet", "hosts")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, with its usage (not kvtui's top-level one)
        chosen = _subparser(parser, getattr(args, "command", None))
        (chosen or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.version:
        print(f"kvtui {__version__}")
        return EXIT_OK
    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(COMMANDS[args.command])  # lazy: the one command that runs (below)
    try:
        code: int = module.run(args)
    except KeyboardInterrupt:
        print("kvtui: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    return code


if __name__ == "__main__":
    raise SystemExit(main())
