"""``kvtui history HOST [--json] [--limit N]`` and ``kvtui history HOST --diff [A] [B]``.

The list: the host's remembered boots, newest first (id, when, outcome, fraction, tokens, time to
ready, failure; for a kvtui-driven restart the prediction next to what the boot did), then the
prediction ledger's summary. ``--json``: ``{"host", "boots": [stored documents with "id"],
"ledger": {"entries", "summary"}}``.

``--diff``: what changed between two boots (``kvtui.history.diff``): ``A`` (default: the newest
boot) against ``B`` (default: the last ready boot of the same model before ``A``); ids as the
list shows them. Exit codes: 0; 2 usage; 3 a bad hosts file, an unreadable history, or no such
boot (the message says which ids exist).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from kvtui import fmt
from kvtui.exits import EXIT_INPUT, EXIT_OK, EXIT_USAGE


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    from kvtui.config import ConfigError, load_config
    from kvtui.history import HistoryError, open_store

    out = stdout or sys.stdout
    err = stderr or sys.stderr
    if args.limit is not None and args.limit < 1:
        print(f"kvtui history: --limit {args.limit}: expected a number of boots, 1 or more", file=err)
        return EXIT_USAGE
    if args.diff is not None and len(args.diff) > 2:
        print(f"kvtui history: --diff takes at most two boot ids (A B), got {len(args.diff)}", file=err)
        return EXIT_USAGE
    try:
        config = load_config(getattr(args, "hosts", None))
        config.host(args.host)
    except ConfigError as exc:
        print(f"kvtui history: {exc}", file=err)
        return EXIT_INPUT
    with open_store(readonly=True) as store:
        if store.problem:
            print(f"kvtui history: {store.problem}", file=err)
        try:
            if args.diff is not None:
                return _diff(store, args, out, err)
            rows = store.boots(args.host, limit=args.limit)
        except HistoryError as exc:
            print(f"kvtui history: {exc}", file=err)
            return EXIT_INPUT
    return _list(rows, args, out, err, str(store.path))


def _list(rows: list, args: argparse.Namespace, out: TextIO, err: TextIO, path: str) -> int:  # type: ignore[type-arg]
    from kvtui.history import ledger
    from kvtui.history import record as rec

    entries = [e for r in rows if (e := ledger.entry(r.doc, r.id)) is not None]
    summary = ledger.summarize(entries)
    if args.json:
        doc = {"host": args.host, "boots": [r.to_json() for r in rows],
               "ledger": {"entries": [e.to_json() for e in entries], "summary": summary.to_json()}}
        json.dump(doc, out, indent=2, ensure_ascii=False, default=str)
        out.write("\n")
        return EXIT_OK
    if not rows:
        print(f"kvtui history: no boot of {args.host} in the history ({path})", file=err)
        return EXIT_OK
    table: list[tuple[str, ...]] = [("id", "started", "outcome", "fraction", "tokens", "to ready", "failure / restart")]
    for r in rows:
        d = r.doc
        fail = d.get("failure")
        note = ""
        if isinstance(fail, dict) and fail.get("kind"):
            note = f"{fail.get('kind')}" + (f" in {fail.get('phase')}" if fail.get("phase") else "")
        e = ledger.entry(d, r.id)
        if e is not None:
            pred = f"predicted {fmt.tokens(e.predicted_tokens)} {e.verdict}"
            if e.error_pct is not None:
                pred += f" ({e.error_pct:+.2f} %)"
            note = (note + "; " if note else "") + pred
        elif isinstance(d.get("restart"), dict):
            note = (note + "; " if note else "") + "kvtui restart"
        if nodes := rec.nodes_note(d):  # a vLLM boot over Ray: its nodes and their TP ranks
            note = (note + "; " if note else "") + nodes
        frac = rec.fraction_of(d)
        table.append((f"#{r.id}", str(d.get("started_at") or "")[:19].replace("T", " "), str(d.get("status")),
                      f"{frac:g}" if frac is not None else fmt.UNKNOWN, fmt.tokens(rec.tokens_of(d)),
                      fmt.duration(rec.seconds_of(d)) if d.get("status") == "ready" else fmt.UNKNOWN, note))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        cells = [row[i].ljust(widths[i]) if i in (1, 2) or i == 0 else row[i].rjust(widths[i])
                 for i in range(len(widths))]
        out.write("  ".join(cells) + "  " + row[-1] + "\n")
    if entries:
        out.write(summary.text() + "\n")
    return EXIT_OK


def _diff(store: object, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from kvtui.history import Store
    from kvtui.history import diff as hdiff

    assert isinstance(store, Store)
    rows = store.boots(args.host, limit=1000)
    if not rows:
        print(f"kvtui history: no boot of {args.host} in the history ({store.path})", file=err)
        return EXIT_INPUT
    by_id = {r.id: r for r in rows}
    ids = list(args.diff)
    for i in ids:
        if i not in by_id:
            known = ", ".join(f"#{r.id}" for r in rows[:12]) + (" …" if len(rows) > 12 else "")
            print(f"kvtui history: {args.host} has no boot #{i} in the history (newest: {known})", file=err)
            return EXIT_INPUT
    a = by_id[ids[0]] if ids else rows[0]
    if len(ids) == 2:
        b = by_id[ids[1]]
    else:
        got = hdiff.last_good([(r.id, r.doc) for r in rows], a.doc, before=a.id)
        if got is None:
            print(f"kvtui history: no ready boot of the same model before #{a.id} to compare with; "
                  "name two boots: --diff A B", file=err)
            return EXIT_INPUT
        b = by_id[got[0]]
    d = hdiff.diff(b.doc, a.doc, base_id=b.id, boot_id=a.id)
    if args.json:
        json.dump(d.to_json(), out, indent=2, ensure_ascii=False, default=str)
        out.write("\n")
    else:
        out.write("\n".join(hdiff.render(d)) + "\n")
    return EXIT_OK
