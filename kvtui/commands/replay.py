"""``kvtui replay PATH|- [--json] [--unknown]``: analyse a saved SGLang / vLLM log.

Accepts raw engine output, ``journalctl`` short / short-iso / short-precise / cat / json,
``docker logs`` (± ``--timestamps``), gzip-compressed or not. The file is read in chunks, so a
multi-GB journal never sits in memory as one string.

Exit codes: 0 when the last boot is ready, starting or stopped, 1 when it failed, 2 usage,
3 unreadable input. The rule for input, the same in every command that reads a log (``calc --log``
too): input that cannot be read as text (missing, a directory, no permission, a read error, damaged
gzip, binary data) is *unreadable*: exit 3 with the reason. Readable text that holds no SGLang or
vLLM boot (an empty file, a README) is not unreadable: ``replay`` reports zero boots, says so on
stderr and exits 0; a command that needs a boot (``calc``) says the same sentence and exits 3, as
for any input that lacks what the command needs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, BinaryIO, TextIO

from kvtui.boot import Boot, BootStatus
from kvtui.boot.deployment import apart, merge_logs
from kvtui.bootlog import BootLog, read_log
from kvtui.commands import bootview_deployment as R
from kvtui.commands.bootview import render_boot, to_json
from kvtui.commands.logfile import CHUNK_BYTES, InputError, RawView, check_text, no_boot_found, open_log, read_chunks
from kvtui.engines.events import Engine
from kvtui.engines.parse import LineParser, Prefilter, parse_chunks, wrap_widths
from kvtui.engines.shapes import detect_shape, iter_records
from kvtui.engines.text import MAX_LINE_CHARS
from kvtui.engines.unknown import UnrecognisedShape
from kvtui.lazy import lazy_module

if TYPE_CHECKING:
    from kvtui import history
    from kvtui.history import bundle as history_bundle
else:
    history = lazy_module("kvtui.history")  # lazy: --record only: (pydantic) `kvtui replay` +256 ms CPU
    history_bundle = lazy_module("kvtui.history.bundle")  # lazy: a bundle only: as kvtui.history

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INPUT = 3
PARALLEL_MIN_BYTES = 16 << 20  # smaller files are not worth a second process
_HEAD_BYTES = 64 * 1024
_PREROLL_BYTES = 1 << 20  # the second half's prefilter first reads this much of the first half

# re-exported: what callers and tests have imported from here (the shared modules hold them now)
__all__ = [
    "CHUNK_BYTES",
    "InputError",
    "analyse",
    "analyse_path",
    "check_text",
    "no_boot_found",
    "read_chunks",
    "render",
    "render_boot",
    "render_unknown",
    "run",
    "to_json",
]


def analyse_path(
    path: str,
    engine_hint: Engine | None = None,
    *,
    clock: Callable[[], datetime] | None = None,
    parallel_min_bytes: int = PARALLEL_MIN_BYTES,
    unrecognised: list[UnrecognisedShape] | None = None,
) -> tuple[list[Boot], str | None]:
    """A log file (or ``-``): like ``analyse``; a large plain file on Linux is prefiltered on two
    cores (the second half in a forked process), with the same result as one pass. ``unrecognised``
    receives the lines no rule recognised (see ``analyse``)."""
    stream = open_log(path)
    try:
        if stream is sys.stdin.buffer or not sys.platform.startswith("linux") or not stream.seekable():
            return analyse(read_chunks(stream, path), engine_hint, clock=clock, unrecognised=unrecognised)  # pipes
        try:
            size = os.fstat(stream.fileno()).st_size
            head = stream.read(_HEAD_BYTES) if size >= max(parallel_min_bytes, 2 * _HEAD_BYTES) else b""
            stream.seek(0)
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: cannot read ({exc})") from exc
        if not head or head[:2] == b"\x1f\x8b":
            return analyse(read_chunks(stream, path), engine_hint, clock=clock, unrecognised=unrecognised)
        check_text(head, path)
        if wrap_widths(head[: head.rfind(b"\n") + 1]):
            # a hard-wrapped capture: its pieces are joined in one pass
            return analyse(read_chunks(stream, path), engine_hint, clock=clock, unrecognised=unrecognised)
        return _analyse_parallel(stream, path, head, size, engine_hint, clock, unrecognised)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _analyse_parallel(
    stream: BinaryIO,
    path: str,
    head: bytes,
    size: int,
    engine_hint: Engine | None,
    clock: Callable[[], datetime] | None,
    unrecognised: list[UnrecognisedShape] | None = None,
) -> tuple[list[Boot], str | None]:
    cut = head.rfind(b"\n")
    shape = detect_shape(head[: cut + 1] if cut >= 0 else head)
    # does the head name the engine? then the tail's worker may drop HTTP access lines too
    probe = LineParser(engine_hint, clock=clock)
    for rec in iter_records(head[: cut + 1], shape, now=clock):
        probe.feed(rec)
    drop_access = probe.engine is not None
    # this process also parses what both halves keep, so it prefilters the smaller part (2/5)
    stream.seek(size * 2 // 5)
    stream.readline()
    boundary = stream.tell()
    stream.seek(0)
    if boundary >= size:
        return analyse(read_chunks(stream, path), engine_hint, clock=clock, unrecognised=unrecognised)
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryFile(prefix="kvtui-replay-") as spill:
        worker = ctx.Process(target=_worker, args=(path, boundary, drop_access, spill), daemon=True)
        worker.start()
        try:
            log = BootLog(engine_hint, max_boots=None, clock=clock)
            parser = log.parser
            parser.prime(iter_records(head[: cut + 1], shape, now=clock))  # a collector's prefix
            feed = log.tracker.feed
            for parsed in parse_chunks(
                read_chunks(RawView(stream, limit=boundary), path), engine_hint, parser=parser, clock=clock, shape=shape
            ):
                feed(parsed)
            worker.join()
        finally:
            if worker.is_alive():
                worker.terminate()
                worker.join()
        if worker.exitcode != 0:  # the worker could not read its half: do it all here
            stream.seek(0)
            return analyse(read_chunks(stream, path), engine_hint, clock=clock, unrecognised=unrecognised)
        spill.seek(0)
        for parsed in parse_chunks(
            read_chunks(spill, path), engine_hint, parser=parser, all_lines=True, clock=clock, shape=shape
        ):
            feed(parsed)
    log.finish()
    if unrecognised is not None:
        unrecognised.extend(log.unrecognised())
    return log.boots, shape


def _worker(path: str, start: int, drop_access: bool, spill: BinaryIO) -> None:
    try:
        _filter_tail(path, start, drop_access, spill)
    except BaseException:  # the parent redoes this half itself; no traceback on the terminal
        os._exit(1)


def _filter_tail(path: str, start: int, drop_access: bool, spill: BinaryIO) -> None:
    """In a forked process: prefilter ``path`` from ``start`` to its end into ``spill``."""
    prefilter = Prefilter(drop_access=drop_access)
    with open(path, "rb") as f:
        pre = max(0, start - _PREROLL_BYTES)
        f.seek(pre)
        lines = f.read(start - pre).split(b"\n")
        prefilter.preroll(lines[1:-1] if pre > 0 else lines[:-1])
        rest = b""
        while chunk := f.read(CHUNK_BYTES):
            lines = chunk.split(b"\n")
            if rest:
                lines[0] = rest + lines[0]
            rest = lines.pop()
            if len(rest) > MAX_LINE_CHARS * 4:
                lines.append(rest)
                rest = b""
            kept = prefilter.filter(lines)
            if kept:
                spill.write(b"\n".join(kept) + b"\n")
        kept = prefilter.filter([rest]) if rest else []
        kept += prefilter.flush()
        if kept:
            spill.write(b"\n".join(kept) + b"\n")
    spill.flush()


def analyse(
    chunks: Iterator[bytes],
    engine_hint: Engine | None = None,
    *,
    clock: Callable[[], datetime] | None = None,
    unrecognised: list[UnrecognisedShape] | None = None,
) -> tuple[list[Boot], str | None]:
    """Run a whole log through the parser and the tracker: (boots, detected input shape); see
    ``kvtui.bootlog.read_log`` (``locate_lines`` turns an unrecognised line's ``first_line`` into
    the file's line number)."""
    return read_log(chunks, engine_hint, clock=clock, unrecognised=unrecognised)


def locate_lines(path: str, items: list[UnrecognisedShape]) -> None:
    """Each item's ``first_line`` as the file's own (0-based) line: the first line holding its text
    (a plain or gzip file; left as is for stdin or a text the file does not hold verbatim)."""
    if path == "-" or not items:
        return
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            f.seek(0)
            data = gzip.GzipFile(fileobj=f).read() if head == b"\x1f\x8b" else f.read()
    except (OSError, EOFError):
        return
    for item in items:
        for needle in (item.text.encode("utf-8", "replace"), json.dumps(item.text)[1:-1].encode()):
            pos = data.find(needle)
            if pos >= 0:
                item.first_line = data.count(b"\n", 0, pos)
                break


# ---------------------------------------------------------------------------------------------
# Human output
# ---------------------------------------------------------------------------------------------


def render(boots: list[Boot], source: str, shape: str | None) -> str:
    lines = [f"{source}: {len(boots)} boot{'s' if len(boots) != 1 else ''} (input: {shape or 'empty'})"]
    for i, boot in enumerate(boots, 1):
        lines.append("")
        # no history here: the boot's place in this log (``kvtui.history.ident``), never a history number
        lines.extend(render_boot(boot, i, len(boots), title=f"Boot {i} of {len(boots)} in this log"))
    return "\n".join(lines) + "\n"


def render_unknown(unrecognised: list[UnrecognisedShape], source: str) -> str:
    """``--unknown``: the startup lines no rule recognised, by shape (numbers masked as N), with
    how often and where first — what a report about a new engine build needs."""
    n = sum(u.count for u in unrecognised)
    lines = [f"{source}: {n} unrecognised startup line{'s' if n != 1 else ''} in {len(unrecognised)} "
             f"shape{'s' if len(unrecognised) != 1 else ''}"]
    if unrecognised:
        lines.append(f"  {'count':>5}  {'line':>6}  shape (numbers as N)")
        for u in unrecognised:
            lines.append(f"  {u.count:>5}  {u.first_line + 1:>6}  {u.shape}")
    return "\n".join(lines) + "\n"


def _bundle_log(path: str) -> bytes | None:
    """The log inside a kvtui incident bundle (``kvtui bundle``); None: not a bundle."""
    if path == "-" or not (path.endswith((".tar.gz", ".tgz"))):
        return None
    return history_bundle.read_member(path, "log.txt")


def _bundle_notes(path: str) -> list[str]:
    """The notes of a bundle's manifest (what it could not hold, and why)."""
    raw = history_bundle.read_member(path, "manifest.json")
    try:
        notes = json.loads(raw or b"{}").get("notes") or []
    except (ValueError, AttributeError):
        return []
    return [str(n) for n in notes if n]


def _record(boots: list[Boot], host: str, source: str, err: TextIO) -> None:
    """``--record HOST``: the log's boots go into the history as boots of HOST (once each)."""
    kept = [b for b in boots if history.recordable(b)]
    with history.open_store() as store:
        problems = [p for b in kept if (p := history.record_boot(host, b, source=f"replay:{source}", store=store))]
    if problems:
        print(f"kvtui replay: --record: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                                           else ""), file=err)
    print(f"kvtui replay: recorded {len(kept) - len(problems)} of {len(boots)} boot{'s' if len(boots) != 1 else ''} "
          f"as boots of {host} in {store.path}", file=err)


def _read(path: str, unrecognised: list[UnrecognisedShape]) -> tuple[list[Boot], str | None]:
    """One log (a kvtui bundle: its log) -> (boots, input shape); ``unrecognised`` gets its
    unrecognised startup lines, located at the file's own lines and in order. Raises InputError."""
    bundled = _bundle_log(path)
    if bundled is not None:  # a kvtui bundle: its log
        boots, shape = analyse(iter([bundled]), unrecognised=unrecognised)
    else:
        boots, shape = analyse_path(path, unrecognised=unrecognised)
        locate_lines(path, unrecognised)
    unrecognised.sort(key=lambda u: u.first_line)
    return boots, shape


def _report(boots: list[Boot], source: str, shape: str | None, unrecognised: list[UnrecognisedShape],
            args: argparse.Namespace) -> str:
    """One log's text report (``--unknown``: its unrecognised lines)."""
    if getattr(args, "unknown", False):
        return render_unknown(unrecognised, source)
    text = render(boots, source, shape)
    if unrecognised:
        n = sum(u.count for u in unrecognised)
        text += (f"\n? {n} unrecognised startup line{'s' if n != 1 else ''} ({len(unrecognised)} shapes): "
                 "--unknown lists them\n")
    return text


def _exit_code(boots: list[Boot]) -> int:
    return EXIT_FAILED if boots and boots[-1].status is BootStatus.FAILED else EXIT_OK


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    paths: list[str] = [args.path] if isinstance(args.path, str) else list(args.path)
    if len(paths) > 1:
        return _run_nodes(paths, args, out, err)
    path = paths[0]
    unrecognised: list[UnrecognisedShape] = []
    try:
        boots, shape = _read(path, unrecognised)
        if _bundle_log(path) is not None:
            for note in _bundle_notes(path):  # what it left out (lines kvtui never read, …)
                print(f"kvtui replay: bundle note: {note}", file=err)
    except InputError as exc:
        print(f"kvtui replay: {exc}", file=err)
        return EXIT_INPUT
    source = "-" if path == "-" else path
    if getattr(args, "record", None):
        _record(boots, str(args.record), source, err)
    if getattr(args, "json", False):
        json.dump(to_json(boots, source, unrecognised), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(_report(boots, source, shape, unrecognised, args))
    if not boots:  # readable text without a boot: an answer (zero boots), not unreadable input
        print(f"kvtui replay: {no_boot_found(source)}", file=err)
        return EXIT_OK
    return _exit_code(boots)


def _run_nodes(paths: list[str], args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Several logs: the nodes of one deployment — every start as one merged boot
    (``kvtui.boot.deployment``) — when they agree on being one (``boot.deployment.apart``: a server on one node,
    another --nnodes / --node-rank / rendezvous / model, no overlap in time say they are not);
    else each log on its own, as ``replay`` reports one, after the reasons (exit: the worst)."""
    if paths.count("-") > 1:
        print("kvtui replay: '-' (standard input) can be given once", file=err)
        return 2
    names = R.node_names(paths)
    read: list[tuple[list[Boot], str | None, list[UnrecognisedShape]]] = []
    for path in paths:
        unrecognised: list[UnrecognisedShape] = []
        try:
            boots, shape = _read(path, unrecognised)
        except InputError as exc:
            print(f"kvtui replay: {exc}", file=err)
            return EXIT_INPUT
        if not boots:
            print(f"kvtui replay: {no_boot_found(path)}", file=err)
        read.append((boots, shape, unrecognised))
    per_node = [(name, boots) for name, (boots, _, _) in zip(names, read, strict=True)]
    if not per_node[0][1]:
        print(f"kvtui replay: the first log ({paths[0]}) holds no boot: nothing to merge the others with", file=err)
        return EXIT_OK
    reasons = apart(per_node)
    if reasons:
        return _run_apart(paths, read, reasons, args, out)
    deps = merge_logs(per_node)
    if getattr(args, "json", False):
        json.dump({"sources": paths, "nodes": names, "boots": [d.to_json() for d in deps]}, out, indent=2,
                  ensure_ascii=False)
        out.write("\n")
    else:
        lines = [R.header(names, len(deps))]
        for i, d in enumerate(deps, 1):
            lines.append("")
            lines.extend(R.render_deployment(d, render_boot(d.boot, i, len(deps)), i, len(deps)))
        out.write("\n".join(lines) + "\n")
    return EXIT_FAILED if deps and deps[-1].boot.status is BootStatus.FAILED else EXIT_OK


def _run_apart(paths: list[str], read: list[tuple[list[Boot], str | None, list[UnrecognisedShape]]],
               reasons: list[str], args: argparse.Namespace, out: TextIO) -> int:
    """Logs that are not one deployment's nodes: the reasons, then each log as ``replay LOG``
    reports it (``--json``: ``{"sources", "deployment": false, "apart", "files": [...]}``, each
    file's document as ``replay --json LOG`` prints it)."""
    sources = ["-" if p == "-" else p for p in paths]
    if getattr(args, "json", False):
        doc = {"sources": sources, "deployment": False, "apart": reasons,
               "files": [to_json(boots, src, unrec) for src, (boots, _, unrec) in zip(sources, read, strict=True)]}
        json.dump(doc, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        head = [f"{len(paths)} logs, not the nodes of one deployment: each log on its own",
                *(f"  - {r}" for r in reasons)]
        parts = ["\n".join(head) + "\n"]
        parts.extend(_report(boots, src, shape, unrec, args)
                     for src, (boots, shape, unrec) in zip(sources, read, strict=True))
        out.write("\n".join(parts))
    return max(_exit_code(boots) for boots, _, _ in read)
