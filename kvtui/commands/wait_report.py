"""What ``kvtui wait NAME`` prints once the wait has decided (``kvtui.commands.wait``): the last
lines on stderr (the failure, what changed since the last good boot, "ready after …") and the
boot on stdout, in full (``kvtui replay``'s rendering) or as JSON (``--json``: ``kvtui replay
--json``'s boot object). ``report_host`` for a host (the node's own boot, named by its number in
the history), ``report_deployment`` for the merged boot of a ``[deployments.NAME]``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from kvtui import fmt, longrun
from kvtui.boot import Boot
from kvtui.commands.bootview import render_boot
from kvtui.commands.bootview_deployment import render_deployment
from kvtui.exits import EXIT_FAILED, EXIT_OK
from kvtui.history import boot_doc
from kvtui.history.diff import since_last_good
from kvtui.history.record import boot_key
from kvtui.monitor.deployment import unwritten

if TYPE_CHECKING:
    from kvtui.commands.wait import Outcome, Waiter
    from kvtui.commands.wait_deployment import Result
    from kvtui.monitor import HostMonitor
    from kvtui.monitor.deployment import DeploymentNode


def summary(boot: Boot, index: int, total: int, number: int | None, host: str) -> str:
    """The boot in full, named ``Boot #13 of HOST`` (as ``kvtui history show``), else by its
    place in the log read (``Boot 2 of 3 in this log``)."""
    title = f"Boot #{number} of {host}" if number is not None else f"Boot {index + 1} of {total} in this log"
    return "\n".join(render_boot(boot, index + 1, total, title=title)) + "\n"


def serving_line(boot: Boot) -> str:
    """``serving — its start is not in the log (…); flags from the process; pool ~191,489 tokens
    (estimated)``: what ``wait`` says of a boot it could not read from its start."""
    parts = [longrun.serving_state(boot) or "serving"]
    if boot.flags_from == "process":
        parts.append("flags from the process" + (f" (pid {boot.process_pid})" if boot.process_pid else ""))
    if boot.live.pool_tokens_est is not None:
        err = boot.live.pool_tokens_err
        parts.append(f"pool ~{boot.live.pool_tokens_est:,} tokens (estimated{f' ±{err:,}' if err else ''})")
    if boot.skipped_lines:
        parts.append(longrun.skipped(boot) or "")
    return "; ".join(p for p in parts if p)


def report_host(
    outcome: Outcome, monitor: HostMonitor, args: argparse.Namespace, stdout: TextIO, stderr: TextIO, waiter: Waiter
) -> int:
    boot, idx = outcome.boot, outcome.index
    waiter.say_notes()
    if outcome.code == EXIT_FAILED and boot is not None and idx is not None:
        waiter.say_failure(idx, boot)
        _say_changed(waiter, boot, args.host)
    elif outcome.code == EXIT_OK and boot is not None and idx is not None and boot.start_missing is not None:
        # up since before the log kvtui could read: it serves; say what is known and from where
        print(f"kvtui wait: {args.host}: {waiter.label(idx)} is {serving_line(boot)}", file=stderr)
    elif outcome.code == EXIT_OK and boot is not None and idx is not None:
        took = boot.phases[-1].start if boot.phases else None
        unread = f" ({longrun.skipped(boot)})" if boot.skipped_lines else ""
        print(f"kvtui wait: {args.host}: {waiter.label(idx)} is ready"
              + (f" after {fmt.duration(waiter.elapsed(boot, took))}" if took is not None else "") + unread,
              file=stderr)
    if outcome.message:
        print(f"kvtui wait: {outcome.message}", file=stderr)
    if boot is not None and idx is not None:
        number = monitor.boot_number(idx)
        if args.json:
            doc = outcome.snapshot if outcome.snapshot is not None else boot.to_json()
            # the boot's identity (``kvtui.history.ident``): its number in the history (null: none)
            doc = {"boot": number, "boot_key": boot_key(args.host, boot) if number is not None else None, **doc}
            json.dump(doc, stdout, indent=2, ensure_ascii=False)
            stdout.write("\n")
        else:
            stdout.write(summary(boot, idx, len(monitor.tracker.boots), number, args.host))
        stdout.flush()
    return outcome.code


def _say_changed(waiter: Waiter, boot: Boot, host: str) -> None:
    """A failed boot: what changed since the last ready boot of its model (the history)."""
    got = since_last_good(waiter.history, boot_doc(host, boot))
    if got is None:
        return
    when = (got[0].started_at or "")[:19].replace("T", " ")
    waiter.say(f"since the last good boot ({when}):")
    for line in got[1]:
        waiter.say(f"  {line}")
    waiter.say(f"  (kvtui history {host} --diff: the whole comparison)")


def report_deployment(result: Result, nodes: Sequence[DeploymentNode], args: argparse.Namespace, stdout: TextIO,
                      stderr: TextIO) -> int:
    """The deployment's last lines (each node's unwritten history, ready on all nodes, the failure
    or hang) and its merged boot; with ``--serving`` the JSON's ``serving`` is the first sample
    (``kvtui watch --json``'s object) and its exit code the wait's."""
    name: str = args.host
    for line in unwritten(nodes):
        print(f"kvtui wait: {name}: note: {line}", file=stderr)
    if result.code == EXIT_OK:
        print(f"kvtui wait: {name}: ready on all {len(nodes)} nodes", file=stderr)
    if result.message:
        print(f"kvtui wait: {result.message}", file=stderr)
    if result.hang is not None and result.code == EXIT_FAILED:
        for c in result.hang.causes:
            print(f"  - {c}", file=stderr)
    if result.dep is not None:
        if args.json:
            doc = result.snapshot or result.dep.to_json()
            if result.serving_code is not None:
                doc["serving"] = result.serving
            json.dump(doc, stdout, indent=2, ensure_ascii=False)
            stdout.write("\n")
        else:
            lines = render_deployment(result.dep, render_boot(result.dep.boot, 1, 1), 1, 1)
            stdout.write("\n".join(lines) + "\n")
        stdout.flush()
    return result.code if result.serving_code is None else result.serving_code
