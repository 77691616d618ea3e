"""``kvtui history HOST [--json] [--limit N]`` and ``kvtui history HOST --diff [A] [B]``.

The list: the host's remembered boots, newest first (id, when, outcome, fraction, tokens, time to
ready, failure; for a kvtui-driven restart the prediction next to what the boot did; the serving
figures a watcher recorded — peak KV usage, preemptions or retractions per 1k requests, TTFT p95 —
as a column when any boot has them), then the prediction ledger's summary. ``--json``: ``{"host",
"boots": [stored documents with "id"], "ledger": {"entries", "summary"}}``.

``--diff``: what changed between two boots (``kvtui.history.diff``): ``A`` (default: the newest
boot) against ``B`` (default: the last ready boot of the same model before ``A``); ids as the list
shows them; the serving figures of both side by side when either has them. Exit codes: 0; 2 usage; 3
a bad hosts file, an unreadable history, or no such boot (the message says which ids exist).

``kvtui history NAME`` for a ``[deployments.NAME]``: the deployment's starts (``_deployment``).

``kvtui history show KEY|N [--json]``: one stored boot in full, by its id (``#N`` in the list: ids
are unique over all hosts) or its key (or a unique start of it): the boot as ``replay`` prints it
(phases, figures, nodes, failure), then what the history adds — where it was recorded from, the pool
environment, every GPU's free memory at the start and peak during the boot, the full flag set, and
the kvtui restart that caused it (edit, prediction, outcome). ``--json``: the stored document with
``id`` and ``key``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from kvtui import fmt
from kvtui.commands.bootview import render_boot
from kvtui.config import ConfigError, load_config
from kvtui.exits import EXIT_INPUT, EXIT_OK, EXIT_USAGE
from kvtui.history import HistoryError, Store, StoredBoot, ledger, open_store
from kvtui.history import diff as hdiff
from kvtui.history import record as rec
from kvtui.history import serving_figures as sf
from kvtui.history.deployment import ROW_HEADER, deployment_starts, previous_good, render_diff, start_row
from kvtui.history.doc import num

if TYPE_CHECKING:
    from kvtui.history.doc import BootDoc


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    if args.limit is not None and args.limit < 1:
        print(f"kvtui history: --limit {args.limit}: expected a number of boots, 1 or more", file=err)
        return EXIT_USAGE
    if args.diff is not None and len(args.diff) > 2:
        print(f"kvtui history: --diff takes at most two boot ids (A B), got {len(args.diff)}", file=err)
        return EXIT_USAGE
    ref = getattr(args, "ref", None)
    if args.host == SHOW and ref is not None:
        return _show(ref, args, out, err)
    if ref is not None:
        print(f"kvtui history: unexpected {ref!r} after the host {args.host!r} "
              f"(one boot in full: kvtui history {SHOW} KEY|N)", file=err)
        return EXIT_USAGE
    try:
        config = load_config(getattr(args, "hosts", None))
        if config.deployment(args.host) is not None:  # a [deployments.NAME]: its starts, from its nodes' boots
            return _deployment(args, [n for n, _ in config.node_hosts(args.host)], out, err)
        config.host(args.host)
    except ConfigError as exc:
        if args.host == SHOW:
            print(f"kvtui history {SHOW}: name the boot: its id (#N in kvtui history HOST) or its key", file=err)
            return EXIT_USAGE
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
        _say_refused(store, err)
    return _list(rows, args, out, err, str(store.path))


def _say_refused(store: object, err: TextIO) -> None:
    """The stored documents a read skipped (a newer kvtui's: ``BootDoc``), one line each."""
    for message in getattr(store, "refused", ()):
        print(f"kvtui history: {message}", file=err)


def _list(rows: list, args: argparse.Namespace, out: TextIO, err: TextIO, path: str) -> int:  # type: ignore[type-arg]

    entries = [e for r in rows if (e := ledger.entry(r.document, r.id)) is not None]
    summary = ledger.summarize(entries)
    if args.json:
        doc = {"host": args.host, "boots": [r.to_json() for r in rows],
               "ledger": {"entries": [e.to_json() for e in entries], "summary": summary.to_json()}}
        _write_json(doc, out)
        return EXIT_OK
    if not rows:
        print(f"kvtui history: no boot of {args.host} in the history ({path})", file=err)
        return EXIT_OK

    # the serving figures (``kvtui watch`` / the console recorded them): a column when any boot has them
    served = {r.id: sf.compact(r.document.serving_figures) for r in rows}
    serving_col = any(served.values())
    table: list[tuple[str, ...]] = [("id", "started", "outcome", "fraction", "tokens", "to ready",
                                     *(("serving",) if serving_col else ()), "failure / restart")]
    for r in rows:
        d = r.document
        fail = d.failure
        note = ""
        if fail is not None and fail.kind:
            note = f"{fail.kind}" + (f" in {fail.phase}" if fail.phase else "")
        e = ledger.entry(d, r.id)
        if e is not None:
            pred = f"predicted {fmt.tokens(e.predicted_tokens)} {e.verdict}"
            if e.error_pct is not None:
                pred += f" ({e.error_pct:+.2f} %)"
            note = (note + "; " if note else "") + pred
        elif d.restart is not None:
            note = (note + "; " if note else "") + "kvtui restart"
        if nodes := rec.nodes_note(d):  # a vLLM boot over Ray: its nodes and their TP ranks
            note = (note + "; " if note else "") + nodes
        frac = d.fraction
        table.append((f"#{r.id}", (d.started_at or "")[:19].replace("T", " "), _status(d),
                      f"{frac:g}" if frac is not None else fmt.UNKNOWN, fmt.tokens(d.tokens),
                      fmt.duration(d.seconds) if d.status == "ready" else fmt.UNKNOWN,
                      *((served[r.id] or fmt.UNKNOWN,) if serving_col else ()), note))
    _write_table(table, out, right=(3, 4, 5))  # the figures right-aligned
    if entries:
        out.write(summary.text() + "\n")
    return EXIT_OK


def _write_json(doc: object, out: TextIO) -> None:
    """Every ``--json`` answer of this command: indented, UTF-8 as it is, anything else as text."""
    json.dump(doc, out, indent=2, ensure_ascii=False, default=str)
    out.write("\n")


def _write_table(table: Sequence[Sequence[str]], out: TextIO, *, right: Collection[int] = ()) -> None:
    """A text table: columns padded to their widest cell (those in ``right`` right-aligned), two
    spaces apart; the last column (free text) is not padded."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        cells = [row[i].rjust(w) if i in right else row[i].ljust(w) for i, w in enumerate(widths)]
        out.write("  ".join(cells) + "  " + row[-1] + "\n")


SHOW = "show"


def _deployment(args: argparse.Namespace, nodes: list[str], out: TextIO, err: TextIO) -> int:
    """``kvtui history NAME`` for a ``[deployments.NAME]``: its starts, newest first (each node's
    stored boots grouped by start: ``kvtui.history.deployment``), one row per start as the
    deployment console's ``H`` shows it; ``--json``: the starts with each node's stored document;
    ``--diff [A [B]]``: start A (default: the newest; ``N`` is the start's position in the list,
    1 the newest) against B (default: the last ready start before A), node by node."""
    name = args.host
    with open_store(readonly=True) as store:
        if store.problem:
            print(f"kvtui history: {store.problem}", file=err)
        try:
            per_node = [store.boots(n, limit=1000 if args.diff is not None else max(args.limit or 20, 1) * 4)
                        for n in nodes]
        except HistoryError as exc:
            print(f"kvtui history: {exc}", file=err)
            return EXIT_INPUT
        path = str(store.path)
    starts = deployment_starts(nodes, per_node)
    if args.diff is not None:
        if not starts:
            print(f"kvtui history: no boot of {name}'s nodes ({', '.join(nodes)}) in the history ({path})", file=err)
            return EXIT_INPUT
        for n in args.diff:
            if not 1 <= n <= len(starts):
                print(f"kvtui history: {name} has no start {n}: a deployment's starts are numbered 1 (the newest) "
                      f"to {len(starts)} as kvtui history {name} lists them", file=err)
                return EXIT_INPUT
        cur = starts[args.diff[0] - 1] if args.diff else starts[0]
        base = starts[args.diff[1] - 1] if len(args.diff) == 2 else previous_good(starts, cur)
        if base is None:
            print(f"kvtui history: start {cur.ids} of {name} is the oldest remembered: nothing to compare it with",
                  file=err)
            return EXIT_INPUT
        if args.json:
            doc = {"deployment": name, "start": cur.ids, "base": base.ids, "nodes": [
                {"node": node, "diff": (hdiff.diff(a.document, b.document, base_id=a.id, boot_id=b.id).to_json()
                                        if a is not None and b is not None else None)}
                for node, a, b in zip(nodes, base.members, cur.members, strict=True)]}
            _write_json(doc, out)
        else:
            out.write("\n".join(render_diff(base, cur)) + "\n")
        return EXIT_OK
    starts = starts[:args.limit] if args.limit is not None else starts
    if args.json:
        doc = {"deployment": name, "nodes": nodes, "starts": [
            {"start": i, "ids": s.ids, "status": s.status.value, "nodes_text": s.nodes_text(),
             "boots": [m.to_json() if m is not None else None for m in s.members]}
            for i, s in enumerate(starts, start=1)]}
        _write_json(doc, out)
        return EXIT_OK
    if not starts:
        print(f"kvtui history: no boot of {name}'s nodes ({', '.join(nodes)}) in the history ({path})", file=err)
        return EXIT_OK
    table = [("start", *ROW_HEADER), *((str(i), *start_row(s)) for i, s in enumerate(starts, start=1))]
    _write_table(table, out)
    return EXIT_OK


def _show(ref: str, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``kvtui history show KEY|N``: see the module doc."""
    text = ref.strip().lstrip("#")
    with open_store(readonly=True) as store:
        if store.problem:
            print(f"kvtui history: {store.problem}", file=err)
        try:
            row: StoredBoot | None
            if text.isdigit() and len(text) < 32:  # an id; a key is 32 hex digits
                row = store.get(int(text))
                missing = f"no boot #{text} in the history ({store.path})"
            else:
                rows = store.by_key_prefix(text.lower()) if len(text) >= 6 else []
                if len(rows) > 1:
                    print(f"kvtui history {SHOW}: {ref!r} starts more than one boot's key (#{rows[0].id}, "
                          f"#{rows[1].id}, …): give more of it, or the id", file=err)
                    return EXIT_USAGE
                row = rows[0] if rows else None
                missing = (f"no boot whose key starts with {ref!r} in the history ({store.path})" if len(text) >= 6
                           else f"{ref!r}: expected a boot's id (#N in kvtui history HOST) or its key (6 or more "
                                "of its hex digits)")
        except HistoryError as exc:
            print(f"kvtui history: {exc}", file=err)
            return EXIT_INPUT
        _say_refused(store, err)
    if row is None:
        print(f"kvtui history {SHOW}: {missing}", file=err)
        return EXIT_INPUT if len(text) >= 6 or text.isdigit() else EXIT_USAGE
    if args.json:
        _write_json(row.to_json(), out)
    else:
        out.write("\n".join(render_stored(row)) + "\n")
    return EXIT_OK


def _status(d: BootDoc) -> str:
    """The status as the list has always shown it (``None``: a document without one)."""
    return d.status if "status" in d.model_fields_set else "None"


def _mib_map(raw: Mapping[str, float]) -> dict[str, float]:
    return {str(k): f for k, v in raw.items() if (f := num(v)) is not None}


def render_stored(row: object) -> list[str]:
    """One stored boot in full (``history show``'s text)."""
    assert isinstance(row, StoredBoot)
    d = row.document
    boot = rec.boot_from_doc(d)
    lines = render_boot(boot, 1, 1)
    lines[0] = f"Boot #{row.id} of {row.host}" + lines[0].removeprefix("Boot 1 of 1")
    ended = (d.ended_at or "")[:19].replace("T", " ")
    started = (d.started_at or "")[:19].replace("T", " ")
    lines.insert(1, f"  started {started or fmt.UNKNOWN}" + (f" · ended {ended}" if ended else "")
                 + (f" · to ready {fmt.duration(d.seconds)}" if d.status == "ready" else ""))
    lines.append("  History")
    lines.append(f"    {'key':<16} {row.key}")
    if d.source:
        lines.append(f"    {'recorded from':<16} {d.source}")
    spool = d.spool
    if spool is not None and spool.set is not None:
        seg = rec.spool_segment(spool)
        lines.append(f"    {'log (spool)':<16} {seg if seg is not None else spool.set}")
    for env, label in ((d.env, "pool env"), (d.unit_env, "unit env")):
        if env:
            lines.append(f"    {label:<16} " + " · ".join(f"{k}={'(not set)' if v is None else v}"
                                                    for k, v in sorted(env.items())))
    free0, peaks = _mib_map(d.gpu_free_at_start_mib), _mib_map(d.peak_used_mib)
    if free0 or peaks:
        lines.append("  GPUs (MiB: free when the boot began · peak used during it)")
        for g in sorted({*free0, *peaks}, key=lambda k: (len(k), k)):
            f0, pk = free0.get(g), peaks.get(g)
            lines.append(f"    GPU {g:<12} {'—' if f0 is None else f'{f0:,.0f}':>10} · "
                         f"{'—' if pk is None else f'{pk:,.0f}':>10}")
    samples = rec.gpu_readings(d.gpu_samples)
    if samples:
        lines.append(f"    {len(samples)} readings kept (kvtui bundle {row.host} --boot {row.id}: gpu.json)")
    lines.extend(_serving_lines(d))
    flags = d.flags
    if flags:
        lines.append(f"  Flags ({len(flags)}, as the engine dumped them)")
        lines.extend(_wrap([f"{k}={v}" for k, v in sorted(flags.items()) if v is not None], 96, "    "))
    r = d.restart
    if r is not None:
        lines.append(f"  Restart by kvtui ({r.action or 'restart'})")
        if r.edit:
            lines.append(f"    {'edit':<16} {' '.join(r.edit)}")
        if r.restored_from:
            lines.append(f"    {'restored from':<16} {r.restored_from}")
        for value, label in ((r.file, "file"), (r.backup, "backup")):
            if value:
                lines.append(f"    {label:<16} {value}")
        e = ledger.entry(d, row.id)
        if e is not None:
            pred = (f"{fmt.tokens(e.predicted_tokens)} tokens, {e.verdict}, confidence {e.confidence}"
                    + (f" ({e.calibration_boots} boots)" if e.calibration_boots else ""))
            lines.append(f"    {'predicted':<16} {pred}")
            got = f"{fmt.tokens(e.actual_tokens)} tokens" if e.actual_tokens is not None else "no pool sized"
            if e.error_pct is not None:
                got += f" ({e.error_pct:+.2f} %)"
            if e.verdict_held is not None:
                got += f", verdict {'held' if e.verdict_held else 'missed'}"
            lines.append(f"    {'actual':<16} {got}")
        elif r.prediction_note:
            lines.append(f"    {'prediction':<16} {r.prediction_note}")
        outcome = r.outcome or fmt.UNKNOWN
        if r.exit is not None:
            outcome += f" (exit {r.exit})"
        if r.rolled_back:
            outcome += ", rolled back"
        if r.forced:
            outcome += ", forced"
        lines.append(f"    {'outcome':<16} {outcome}")
    return lines


def _serving_lines(d: BootDoc) -> list[str]:
    """``history show``: the serving figures a watcher recorded (``kvtui.history.serving_figures``)."""
    s = d.serving_figures
    if s is None:
        return []
    first, last = sf.iso(s.first_at), sf.iso(s.last_at)
    out = [f"  Serving (as watched: {s.samples} samples from {first} to {last}, "
           f"{s.watchers} watcher{'s' if s.watchers != 1 else ''})"]
    out += [f"    {label:<28} {value}" for label, _, value in sf.rows(None, s)]
    return out


def _wrap(items: list[str], width: int, indent: str) -> list[str]:
    out: list[str] = []
    line = ""
    for it in items:
        if line and len(indent) + len(line) + 1 + len(it) > width:
            out.append(indent + line)
            line = it
        else:
            line = f"{line} {it}" if line else it
    if line:
        out.append(indent + line)
    return out


def _diff(store: object, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
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
        got = hdiff.last_good([(r.id, r.document) for r in rows], a.document, before=a.id)
        if got is None:
            print(f"kvtui history: no ready boot of the same model before #{a.id} to compare with; "
                  "name two boots: --diff A B", file=err)
            return EXIT_INPUT
        b = by_id[got[0]]
    d = hdiff.diff(b.document, a.document, base_id=b.id, boot_id=a.id)
    if args.json:
        _write_json(d.to_json(), out)
    else:
        out.write("\n".join(hdiff.render(d)) + "\n")
    return EXIT_OK
