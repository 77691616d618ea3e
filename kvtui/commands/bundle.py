"""``kvtui bundle HOST [--boot N] [-o FILE]``: one remembered boot as an incident bundle
(``kvtui.history.bundle``): its log from the spool, the stored document, what changed since the
last good boot and the ``replay --json`` document, secrets masked. ``kvtui replay FILE`` opens it.

``--boot N``: the id ``kvtui history`` shows (default: the newest boot whose log is in the spool).
Exit codes: 0 written; 2 usage; 3 a bad hosts file, no such boot, its log not in the spool, or the
file cannot be written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from kvtui.exits import EXIT_INPUT, EXIT_OK


def spool_lines(spool: object, host: str = "host") -> list[str] | None:
    """The display lines of a stored boot's spool segment (markers left out); None: not there."""
    from kvtui.history.record import spool_segment

    path = spool_segment(spool)
    if path is None:
        return None
    out: list[str] = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        cols = raw.split("\t", 5)
        if len(cols) == 6 and cols[2] != "marker":
            out.append(_journal_line(cols[0], cols[4], cols[5], host))
    return out


def _journal_line(ts: str, ident: str, text: str, host: str) -> str:
    """A spooled line as ``journalctl -o short-iso-precise`` prints it, so that a replay of the
    bundle reads the same timestamps the live reader had (the engine's own are coarser)."""
    if not ts:
        return text
    if ts.endswith("+00:00"):
        ts = ts[:-6] + "+0000"
    return f"{ts} {host} {ident or 'kvtui'}: {text}"


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    from kvtui.bootlog import read_log
    from kvtui.commands.bootview import to_json
    from kvtui.config import ConfigError, load_config
    from kvtui.history import HistoryError, open_store
    from kvtui.history import bundle as hb
    from kvtui.history import diff as hdiff

    err = stderr or sys.stderr
    try:
        load_config(getattr(args, "hosts", None)).host(args.host)
    except ConfigError as exc:
        print(f"kvtui bundle: {exc}", file=err)
        return EXIT_INPUT
    with open_store(readonly=True) as store:
        try:
            rows = store.boots(args.host, limit=1000)
        except HistoryError as exc:
            print(f"kvtui bundle: {exc}", file=err)
            return EXIT_INPUT
    if not rows:
        print(f"kvtui bundle: no boot of {args.host} in the history ({store.path})", file=err)
        return EXIT_INPUT
    chosen: Any = None
    lines: list[str] | None = None
    if args.boot is not None:
        chosen = next((r for r in rows if r.id == args.boot), None)
        if chosen is None:
            print(f"kvtui bundle: {args.host} has no boot #{args.boot} in the history", file=err)
            return EXIT_INPUT
        lines = spool_lines(chosen.doc.get("spool"), args.host)
    else:
        for r in rows:
            lines = spool_lines(r.doc.get("spool"), args.host)
            if lines is not None:
                chosen = r
                break
    if chosen is None or lines is None:
        what = f"#{chosen.id}" if chosen is not None else "no boot"
        print(f"kvtui bundle: {args.host}: {what}: its log is not in the spool (recorded by a command that keeps "
              "none, or pruned since); a console or kvtui wait keeps one", file=err)
        return EXIT_INPUT
    boots, _ = read_log(iter(["".join(ln + "\n" for ln in lines).encode()]))
    replay_doc = to_json(boots, "log.txt")
    good = hdiff.last_good([(r.id, r.doc) for r in rows], chosen.doc, before=chosen.id)
    diff_lines = (hdiff.render(hdiff.diff(hb.mask_doc(dict(good[1])), hb.mask_doc(dict(chosen.doc)),
                                          base_id=good[0], boot_id=chosen.id))
                  if good is not None else [])  # masked before the diff: a changed secret shows as ***
    out = Path(args.output) if args.output else Path(f"kvtui-{args.host}-boot{chosen.id}.tar.gz")
    try:
        hb.write_bundle(out, host=args.host, boot_id=chosen.id, doc=chosen.doc, log_lines=lines,
                        replay_doc=replay_doc, diff_lines=diff_lines)
    except OSError as exc:
        print(f"kvtui bundle: {out}: cannot write: {exc.strerror or exc}", file=err)
        return EXIT_INPUT
    print(f"kvtui bundle: {args.host} boot #{chosen.id} ({chosen.status}, {len(lines)} log lines) → {out}; "
          f"open it with: kvtui replay {out}", file=err)
    (stdout or sys.stdout).write(f"{out}\n")
    return EXIT_OK
