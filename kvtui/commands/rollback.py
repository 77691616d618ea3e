"""``kvtui rollback HOST [--to BACKUP] [--restart] [--yes] [--timeout S]``.

Restores the newest kvtui backup of the server's effective flags file (or ``--to BACKUP``)
through the same verified path as ``kvtui apply``: the current file is saved first
(``…​.pre-rollback``), the backup is written atomically and checked, systemd reloaded and its
ExecStart checked, and with ``--restart`` the server restarted and followed.

Exit codes as ``kvtui apply``: 0 restored (ready), 1 the boot failed, 2 usage, 3 connection or
configuration, 4 refused (readonly host, no backup, no terminal to confirm on), 5 timed out.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from kvtui import changes
from kvtui.commands.apply import plan_and_execute, run_main
from kvtui.config import ConfigError, HostConfig, load_config
from kvtui.exits import EXIT_USAGE
from kvtui.hosts.backend import HostBackend

if TYPE_CHECKING:
    from kvtui.hosts.service import ApplyPlan


def run(args: argparse.Namespace, **streams: Any) -> int:
    """``run_main(rollback_main, …)`` (``kvtui.commands.apply``)."""
    return run_main(rollback_main, args, **streams)


async def rollback_main(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO, stdin: TextIO,
                        clock: Callable[[], float] | None = None) -> int:
    if args.timeout is not None and args.timeout <= 0:
        print(f"kvtui rollback: --timeout {args.timeout:g}: expected a number of seconds above 0", file=stderr)
        return EXIT_USAGE
    try:
        config = load_config(getattr(args, "hosts", None))
        dep = config.deployment(args.host)
    except ConfigError:
        dep = None  # the host path reports the file's problems
    if dep is not None and args.to:  # a deployment: every node's newest backup, all or nothing
        print(f"kvtui rollback: --to names one file; {args.host} is a deployment of {len(dep.nodes)} nodes: "
              "roll back each node's newest backup without --to, or one node by its host name", file=stderr)
        return EXIT_USAGE

    async def make_plan(
        name: str, host: HostConfig, backend: HostBackend, _margin: float | None
    ) -> ApplyPlan:
        return await changes.plan_rollback(
            name, host, backend, to=args.to, restart=bool(args.restart),
            timeout=float(args.timeout), clock=clock or time.time, force=bool(getattr(args, "force", False)),
        )

    return await plan_and_execute(args, make_plan, verb="rollback", stdout=stdout, stderr=stderr, stdin=stdin,
                                  clock=clock)
