"""What ``kvtui wait NAME`` prints once the wait has decided (``kvtui.commands.wait``): the last
lines on stderr (the failure, what changed since the last good boot, "ready after …") and the
boot on stdout, in full (``kvtui replay``'s rendering) or as JSON (``--json``: ``kvtui replay
--json``'s boot object): one node's own boot, named by its number in the history; several nodes'
merged boot with its nodes."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, TextIO

from kvtui import fmt, longrun
from kvtui.boot import Boot
from kvtui.commands.bootview import render_boot
from kvtui.commands.bootview_deployment import render_deployment
from kvtui.exits import EXIT_FAILED, EXIT_OK
from kvtui.history import boot_doc
from kvtui.history.diff import since_last_good
from kvtui.history.record import boot_key

if TYPE_CHECKING:
    from kvtui.commands.wait import Outcome, Waiter


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


def start_json(outcome: Outcome) -> dict[str, object]:
    """The decided start's JSON: one node's boot, as ``kvtui replay --json``; several nodes' merged
    boot with its nodes (``DeploymentBoot.to_json``)."""
    if outcome.dep is not None and len(outcome.dep.nodes) > 1:
        return outcome.dep.to_json()
    return outcome.boot.to_json() if outcome.boot is not None else {}


def report(outcome: Outcome, waiter: Waiter, args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """The last lines (each node's unwritten history, the failure, ready, what changed since the
    last good boot) and the start on stdout. One node: its boot, named by its number in the
    history; several: the merged boot with its nodes (``ready on all N nodes``, the hang's causes)."""
    name: str = args.host
    nodes = waiter.dm.nodes
    for n in nodes:  # (after the close: a boot the history misses is said, never silent)
        note = n.monitor.history.unwritten_note() if n.monitor.history is not None else None
        if note:
            print(f"kvtui wait: {name}: note: " + (f"{n.name}: {note}" if waiter.several else note), file=stderr)
    boot, idx, dep, node = outcome.boot, outcome.index, outcome.dep, nodes[0]
    waiter.say_notes()
    if waiter.several:
        if outcome.code == EXIT_OK:
            print(f"kvtui wait: {name}: ready on all {len(nodes)} nodes", file=stderr)
    elif outcome.code == EXIT_FAILED and dep is not None and idx is not None:
        waiter.say_failure(idx, dep)
        _say_changed(waiter, dep.boot, node.name)
    elif outcome.code == EXIT_OK and boot is not None and idx is not None and boot.start_missing is not None:
        # up since before the log kvtui could read: it serves; say what is known and from where
        print(f"kvtui wait: {name}: {waiter.label(idx)} is {serving_line(boot)}", file=stderr)
    elif outcome.code == EXIT_OK and boot is not None and idx is not None:
        took = boot.phases[-1].start if boot.phases else None
        unread = f" ({longrun.skipped(boot)})" if boot.skipped_lines else ""
        print(f"kvtui wait: {name}: {waiter.label(idx)} is ready"
              + (f" after {fmt.duration(waiter.elapsed(boot, took))}" if took is not None else "") + unread,
              file=stderr)
    if outcome.message:
        print(f"kvtui wait: {outcome.message}", file=stderr)
    if outcome.hang is not None and outcome.code == EXIT_FAILED:
        for c in outcome.hang.causes:
            print(f"  - {c}", file=stderr)
    if boot is None or (dep is None if waiter.several else idx is None):
        return outcome.code
    doc = outcome.snapshot if outcome.snapshot is not None else start_json(outcome)
    if waiter.several:
        assert dep is not None
        text = "\n".join(render_deployment(dep, render_boot(boot, 1, 1), 1, 1)) + "\n"
    else:
        assert idx is not None
        number = node.monitor.boot_number(idx)
        # the boot's identity (``kvtui.history.ident``): its number in the history (null: none)
        doc = {"boot": number, "boot_key": boot_key(node.name, boot) if number is not None else None, **doc}
        text = summary(boot, idx, len(node.monitor.tracker.boots), number, node.name)
    if args.json:
        json.dump(doc, stdout, indent=2, ensure_ascii=False)
        stdout.write("\n")
    else:
        stdout.write(text)
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
