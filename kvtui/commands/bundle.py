"""``kvtui bundle HOST [--boot N] [-o FILE]``: one remembered boot as an incident bundle
(``kvtui.history.bundle``): its log from the spool, the stored document, what changed since the
last good boot, the ``replay --json`` document, the boot's GPU readings, the calculator's state
(prediction, reasons, explain lines), and for a kvtui-applied edit the flag file before (the
backup) and now (read through the host's backend) — secrets masked. The console writes the same
bundle with its calculator's edits and a screenshot (``bundle_for``). ``kvtui replay FILE`` and
``kvtui connect --bundle FILE`` open it.

``--boot N``: the id ``kvtui history`` shows (default: the newest boot; when its log is not in the
spool — ``apply --restart`` keeps none — the command says so and names the newest boot whose log is,
instead of bundling an older boot unasked).
Exit codes: 0 written; 2 usage; 3 a bad hosts file, no such boot, its log not in the spool, or the
file cannot be written."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kvtui import changes, kvcalc, longrun
from kvtui.bootlog import read_log
from kvtui.commands.bootview import to_json
from kvtui.commands.calc import render
from kvtui.config import ConfigError, load_config
from kvtui.exits import EXIT_INPUT, EXIT_OK
from kvtui.history import HistoryError, open_store
from kvtui.history import bundle as hb
from kvtui.history import diff as hdiff
from kvtui.history.record import spool_segment
from kvtui.hosts.factory import make_backend

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.history import StoredBoot
    from kvtui.history.doc import BootDoc, SpoolDoc
    from kvtui.hosts.backend import HostBackend

FLAG_FILES_TIMEOUT_S = 30.0


@dataclass
class Extras:
    """What a bundle carries beyond the log and the stored document."""

    texts: dict[str, str] = field(default_factory=dict)
    docs: dict[str, object] = field(default_factory=dict)  # JSON members (name -> value)
    notes: list[str] = field(default_factory=list)
    svg: str | None = None


def gpu_member(doc: BootDoc, extras: Extras) -> None:
    """``gpu.json``: the boot's GPU readings as the history kept them."""
    series = doc.gpu_samples
    if series is not None and series.ts:
        extras.docs["gpu.json"] = series.to_json()
    else:
        extras.notes.append("gpu.json: no GPU readings were kept for this boot (it was recorded by a command that "
                            "samples none, or by an older kvtui); boot.json has the peaks, if any")


def calc_members(pred: kvcalc.Prediction | None, source: str, extras: Extras, problem: str | None = None) -> None:
    """``calc.json`` (the prediction: figures, verdict, reasons, explain lines) and ``calc.txt``
    (as ``kvtui calc`` prints it)."""
    if pred is None:
        extras.notes.append(f"calc: {problem or 'the calculator had no prediction for this boot'}")
        return
    extras.docs["calc.json"] = pred.to_json()
    extras.texts["calc.txt"] = render(pred, source) + "\n"


def calculate(boots: Sequence[Any], source: str, extras: Extras) -> None:
    """The calculator on the bundle's boot, as ``kvtui calc`` would (no edits), calibrated with the
    history's boots of the deployment too."""
    try:
        chosen, others = kvcalc.select_boot(list(boots), None)
        model = kvcalc.calibrate(chosen, others=[*others, *changes.stored_siblings(chosen, boots)])
        calc_members(kvcalc.predict(model), source, extras)
    except kvcalc.CalcError as exc:
        calc_members(None, source, extras, str(exc))


async def flag_files(backend: HostBackend, name: str, host: HostConfig, doc: BootDoc, extras: Extras) -> None:
    """``flags-before.txt`` (the backup ``kvtui apply`` took before the edit) and
    ``flags-after.txt`` (the flag file as it is now), read through the host's backend, for a boot
    that came from a kvtui apply/rollback."""
    restart = doc.restart
    if restart is None or not (restart.backup or restart.restored_from):
        return
    ops = backend.service_ops()
    before = str(restart.backup or restart.restored_from)
    try:
        extras.texts["flags-before.txt"] = await asyncio.wait_for(ops.read_copy(host, before), FLAG_FILES_TIMEOUT_S)
    except Exception as exc:  # a pruned backup, a host not reached: said in the manifest
        extras.notes.append(f"flags-before.txt: {before}: {exc or type(exc).__name__}")
    try:
        source = await asyncio.wait_for(ops.locate(name, host), FLAG_FILES_TIMEOUT_S)
        extras.texts["flags-after.txt"] = source.text
    except Exception as exc:
        extras.notes.append(f"flags-after.txt: {restart.file or 'the flag file'}: {exc or type(exc).__name__}")


async def _cli_flag_files(name: str, host: HostConfig, doc: BootDoc, extras: Extras) -> None:
    restart = doc.restart
    if restart is None or not (restart.backup or restart.restored_from):
        return
    try:
        backend = make_backend(name, host)
        await asyncio.wait_for(backend.start(), FLAG_FILES_TIMEOUT_S)
    except Exception as exc:
        extras.notes.append(f"flags-before.txt / flags-after.txt: {name} not reached: {exc or type(exc).__name__}")
        return
    try:
        await flag_files(backend, name, host, doc, extras)
    finally:
        await backend.close()


def write(out: Path, host: str, chosen: StoredBoot, rows: Sequence[StoredBoot], lines: list[str],
          extras: Extras, *, boots: Sequence[Any] | None = None) -> None:
    """Write the bundle of ``chosen`` (``rows``: the host's stored boots, for the diff)."""
    replay_boots = boots
    if replay_boots is None:
        replay_boots, _ = read_log(iter(["".join(ln + "\n" for ln in lines).encode()]))
    replay_doc = to_json(list(replay_boots), "log.txt")
    extras.notes.extend(unread_notes(replay_boots))
    good = hdiff.last_good([(r.id, r.document) for r in rows], chosen.document, before=chosen.id)
    diff_lines = (hdiff.render(hdiff.diff(hb.mask_doc(good[1].to_json()), hb.mask_doc(chosen.doc),
                                          base_id=good[0], boot_id=chosen.id))
                  if good is not None else [])  # masked before the diff: a changed secret shows as ***
    hb.write_bundle(out, host=host, boot_id=chosen.id, doc=chosen.document, log_lines=lines, replay_doc=replay_doc,
                    diff_lines=diff_lines, texts=extras.texts, docs=extras.docs, svg=extras.svg, notes=extras.notes)


def unread_notes(boots: Sequence[Any]) -> list[str]:
    """What the bundle's log leaves out because kvtui never read it (a server up for days): the
    serving lines its follower skipped and their range on the host, a start not in the log."""
    out: list[str] = []
    for b in boots:
        if b.skipped_lines or b.skipped_where:
            where = "; ".join(b.skipped_where[:4]) or "range not said"
            out.append(f"log.txt: {longrun.skipped(b)} by kvtui, not in this bundle (on the host: {where})")
        if b.start_missing is not None:
            out.append(f"log.txt: {longrun.serving_state(b)}: its phases and start-up figures are not in this bundle")
    return out


def spool_lines(spool: SpoolDoc | None, host: str = "host") -> list[str] | None:
    """The display lines of a stored boot's spool segment (markers left out); None: not there."""
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
    err = stderr or sys.stderr
    try:
        host_cfg = load_config(getattr(args, "hosts", None)).host(args.host)
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
    if args.boot is not None:
        chosen = next((r for r in rows if r.id == args.boot), None)
        if chosen is None:
            print(f"kvtui bundle: {args.host} has no boot #{args.boot} in the history", file=err)
            return EXIT_INPUT
    else:
        chosen = rows[0]  # the newest (the store lists them newest first), as the help says
    lines = spool_lines(chosen.document.spool, args.host)
    if lines is None:
        kept = next((r for r in rows if r is not chosen and spool_lines(r.document.spool, args.host) is not None),
                    None) if args.boot is None else None
        other = (f"; #{kept.id} ({kept.status}) is the newest boot whose log is kept: kvtui bundle {args.host} "
                 f"--boot {kept.id}") if kept is not None else ""
        newest = " (the newest)" if args.boot is None else ""
        print(f"kvtui bundle: {args.host}: #{chosen.id}{newest}: its log is not in the spool (recorded by a command "
              f"that keeps none, or pruned since); a console or kvtui wait keeps one{other}", file=err)
        return EXIT_INPUT

    boots, _ = read_log(iter(["".join(ln + "\n" for ln in lines).encode()]))
    extras = Extras()
    gpu_member(chosen.document, extras)
    calculate(boots, f"{args.host} boot #{chosen.id} (bundle)", extras)
    asyncio.run(_cli_flag_files(args.host, host_cfg, chosen.document, extras))
    out = Path(args.output) if args.output else Path(f"kvtui-{args.host}-boot{chosen.id}.tar.gz")
    try:
        write(out, args.host, chosen, rows, lines, extras, boots=boots)
    except OSError as exc:
        print(f"kvtui bundle: {out}: cannot write: {exc.strerror or exc}", file=err)
        return EXIT_INPUT
    for note in extras.notes:
        print(f"kvtui bundle: note: {note}", file=err)
    print(f"kvtui bundle: {args.host} boot #{chosen.id} ({chosen.status}, {len(lines)} log lines) → {out}; "
          f"open it with: kvtui replay {out} (or kvtui connect --bundle {out})", file=err)
    (stdout or sys.stdout).write(f"{out}\n")
    return EXIT_OK


# -- the console's bundle key (B): kvtui connect hands the console this writer ----------------------------


def _chosen_row(rows: list[Any], boot: Any, spool_dir: str | None, index: int | None) -> Any:
    """The stored boot the console shows: the same first-line time, else the same spool segment,
    else the newest."""
    started = getattr(boot, "started_at", None)
    if started is not None:
        for r in rows:
            if r.document.started_at == started.isoformat():
                return r
    for r in rows:
        sp = r.document.spool
        if spool_dir is not None and sp is not None and sp.set == spool_dir and sp.boot == index:
            return r
    return rows[0] if rows else None


async def write_console_bundle(pane: Any, svg: str, directory: Path | None = None) -> Path:
    """The console's bundle of the boot it shows (``B``): what ``kvtui bundle`` writes, with the
    calculator's state as the operator left it (their edits) and the screen as an SVG. Raises
    ``ValueError`` with a message for the operator when there is nothing to bundle."""
    host = pane.host_name
    backend = pane.backend
    if getattr(backend, "recorded", False):
        raise ValueError(f"{host} is a recorded boot already: its bundle is {backend.path}")
    monitor = pane.monitor
    recorder = getattr(monitor, "history", None)
    if recorder is not None:
        await asyncio.to_thread(recorder.flush, 5.0)
    elif pane.boot is not None:
        raise ValueError(f"{host}: [history] record = false: no remembered boot to bundle")

    def rows() -> list[Any]:
        with open_store(readonly=True) as store:
            return list(store.boots(host, limit=50))

    try:
        stored = await asyncio.to_thread(rows)
    except HistoryError as exc:
        raise ValueError(str(exc)) from exc
    spool_dir = str(monitor.spool.directory) if monitor is not None else None
    chosen = _chosen_row(stored, pane.boot, spool_dir, pane.boot_index)
    if chosen is None:
        raise ValueError(f"no boot of {host} in the history yet")
    lines = await asyncio.to_thread(spool_lines, chosen.document.spool, host)
    if lines is None:
        raise ValueError(f"{host} boot #{chosen.id}: its log is not in the spool")
    extras = Extras(svg=svg)
    gpu_member(chosen.document, extras)
    pred = pane.calculator.prediction
    if pred is not None:
        calc_members(pred, f"{host} console (calculator as shown)", extras)
    else:
        calc_members(None, host, extras, pane.calculator.error or "the calculator had no prediction yet")
    if backend is not None:
        await flag_files(backend, host, pane.spec.config, chosen.document, extras)
    out = (directory or Path.cwd()) / f"kvtui-{host}-boot{chosen.id}.tar.gz"
    await asyncio.to_thread(write, out, host, chosen, stored, lines, extras)
    return out.resolve()
