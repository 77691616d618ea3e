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
import asyncio
import sys
import time
from collections.abc import Callable
from typing import TextIO

from kvtui.cli import EXIT_USAGE


def run(
    args: argparse.Namespace,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
    clock: Callable[[], float] | None = None,
) -> int:
    return asyncio.run(
        rollback_main(args, stdout=stdout or sys.stdout, stderr=stderr or sys.stderr, stdin=stdin or sys.stdin,
                      clock=clock)
    )


async def rollback_main(
    args: argparse.Namespace,
    *,
    stdout: TextIO,
    stderr: TextIO,
    stdin: TextIO,
    clock: Callable[[], float] | None = None,
) -> int:
    from kvtui.commands.apply import confirm_and_execute, open_host
    from kvtui.hosts import service

    if args.timeout is not None and args.timeout <= 0:
        print(f"kvtui rollback: --timeout {args.timeout:g}: expected a number of seconds above 0", file=stderr)
        return EXIT_USAGE
    opened = await open_host(args, stderr, clock)
    if isinstance(opened, int):
        return opened
    name, host, backend, _margin = opened
    try:
        try:
            plan = await service.plan_rollback(
                name, host, backend, to=args.to, restart=bool(args.restart),
                timeout=float(args.timeout), clock=clock or time.time,
            )
        except service.ServiceError as exc:
            print(f"kvtui rollback: {exc}", file=stderr)
            return exc.code
        stdout.write(plan.render())
        stdout.flush()
        return await confirm_and_execute(plan, backend, args, stdout=stdout, stderr=stderr, stdin=stdin,
                                         clock=clock, verb="rollback")
    finally:
        await backend.close()
