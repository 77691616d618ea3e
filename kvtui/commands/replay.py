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
import io
import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import BinaryIO, Protocol, TextIO

from kvtui import fmt
from kvtui.boot import Boot, BootStatus, BootTracker, PhaseSpan
from kvtui.engines.events import Engine, Fact
from kvtui.engines.parse import LineParser, Prefilter, parse_chunks, wrap_widths
from kvtui.engines.shapes import detect_shape, iter_records
from kvtui.engines.text import MAX_LINE_CHARS
from kvtui.engines.unknown import UnrecognisedShape

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INPUT = 3
CHUNK_BYTES = 4 << 20
PARALLEL_MIN_BYTES = 16 << 20  # smaller files are not worth a second process
_HEAD_BYTES = 64 * 1024
_PREROLL_BYTES = 1 << 20  # the second half's prefilter first reads this much of the first half

# the flags worth a line in the human summary, in this order (engine names)
_KEY_FLAGS: dict[Engine, tuple[str, ...]] = {
    Engine.SGLANG: (
        "model_path",
        "mem_fraction_static",
        "tp_size",
        "dp_size",
        "pp_size",
        "ep_size",
        "context_length",
        "max_running_requests",
        "max_total_tokens",
        "chunked_prefill_size",
        "cuda_graph_max_bs",
        "page_size",
        "kv_cache_dtype",
        "speculative_algorithm",
    ),
    Engine.VLLM: (
        "model",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "kv_cache_dtype",
        "block_size",
        "enforce_eager",
    ),
}


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class InputError(Exception):
    """The input cannot be read (exit 3)."""


def _open(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    try:
        f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{path}: is a directory, expected a log file") from exc
    except PermissionError as exc:
        raise InputError(f"{path}: permission denied") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror or exc})") from exc
    return f


_TEXT_CONTROLS = frozenset(b"\t\n\r\x0c\x08\x1b")


def check_text(head: bytes, name: str) -> None:
    """Raise ``InputError`` when the start of an input is binary data, not a text log: a NUL byte,
    or more than a tenth of control bytes / bytes that are not UTF-8 text (logs are text; a
    journal in ``-o export`` or a core dump is not)."""
    sample = head[:65536]
    if not sample:
        return
    nul = sample.find(b"\x00")
    if nul >= 0:
        raise InputError(f"{name}: binary data, not a text log (a NUL byte at offset {nul:,})")
    controls = sum(1 for b in sample if b < 0x20 and b not in _TEXT_CONTROLS)
    bad = sample.decode("utf-8", errors="replace").count("\ufffd")
    if controls + bad > len(sample) // 10:
        raise InputError(f"{name}: binary data, not a text log ({controls + bad:,} of the first "
                         f"{len(sample):,} bytes are neither text nor UTF-8)")


def read_chunks(stream: Readable, name: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The stream in chunks; gzip input is decompressed on the fly. Binary data (``check_text``)
    raises ``InputError`` before the first chunk."""
    try:
        head = stream.read(chunk_bytes)
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    if head[:2] == b"\x1f\x8b":
        gz = gzip.GzipFile(fileobj=_Prepend(head, stream), mode="rb")
        stream = gz
        try:
            head = gz.read(chunk_bytes)
        except (OSError, EOFError) as exc:
            raise InputError(f"{name}: damaged gzip data ({exc})") from exc
    check_text(head, name)
    while head:
        yield head
        try:
            head = stream.read(chunk_bytes)
        except (OSError, EOFError) as exc:
            raise InputError(f"{name}: read failed ({exc})") from exc


class _Prepend(io.RawIOBase):
    """A stream whose first bytes were already read (to sniff gzip)."""

    def __init__(self, first: bytes, rest: Readable) -> None:
        self._first = first
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._first:
            n = min(len(b), len(self._first))
            b[:n] = self._first[:n]
            self._first = self._first[n:]
            return n
        data = self._rest.read(len(b))
        n = len(data)
        b[:n] = data
        return n


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
    stream = _open(path)
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
            tracker = BootTracker(engine_hint, max_boots=None)
            parser = LineParser(engine_hint, clock=clock)
            parser.prime(iter_records(head[: cut + 1], shape, now=clock))  # a collector's prefix
            feed = tracker.feed
            for parsed in parse_chunks(
                read_chunks(_Limited(stream, boundary), path), engine_hint, parser=parser, clock=clock, shape=shape
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
    tracker.finish()
    if unrecognised is not None:
        unrecognised.extend(tracker.all_unrecognised())
    return tracker.boots, shape


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


class _Limited(io.RawIOBase):
    """The first ``limit`` bytes of a stream."""

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self._stream = stream
        self._left = limit

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if size is None or size < 0 else min(size, self._left)
        data = self._stream.read(n)
        self._left -= len(data)
        return data

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def analyse(
    chunks: Iterator[bytes],
    engine_hint: Engine | None = None,
    *,
    clock: Callable[[], datetime] | None = None,
    unrecognised: list[UnrecognisedShape] | None = None,
) -> tuple[list[Boot], str | None]:
    """Run a whole log through the parser and the tracker: (boots, detected input shape).

    ``clock`` gives "now" for the year of year-less stamps (vLLM, journalctl ``short``) when the
    log itself does not say it (default: the current time). ``unrecognised``, when given, receives
    the startup lines no rule recognised, one entry per shape (``first_line``: the position among
    the lines read, 0-based; ``locate_lines`` turns it into the file's line number)."""
    tracker = BootTracker(engine_hint, max_boots=None)
    shape: list[str] = []
    feed = tracker.feed
    parser = LineParser(engine_hint, clock=clock)
    for parsed in parse_chunks(chunks, engine_hint, parser=parser, shape_out=shape, clock=clock):
        feed(parsed)
    tracker.finish()
    if unrecognised is not None:
        unrecognised.extend(tracker.all_unrecognised())
    return tracker.boots, (shape[0] if shape else None)


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


def _dur(seconds: float | None) -> str:
    return "" if seconds is None else fmt.duration(seconds)


def _when(dt: datetime | None) -> str:
    if dt is None:
        return "—"
    text = dt.strftime("%Y-%m-%d %H:%M:%S")
    if dt.utcoffset() is not None:
        text += dt.strftime("%z")
    return text


_gib = fmt.gib
_n = fmt.tokens


def _ranks(ranks: list[str]) -> str:
    if not ranks:
        return "1 process"
    if len(ranks) <= 4:
        return ", ".join(ranks)
    return f"{len(ranks)} ranks ({ranks[0]} … {ranks[-1]})"


def _phase_row(span: PhaseSpan, failed_phase: bool) -> str:
    dur = _dur(span.seconds) if span.end is not None else ("" if span.name.value == "ready" else "running")
    prog = ""
    if span.progress_total:
        prog = f"  {span.progress_done}/{span.progress_total}"
    mark = "  ✗" if failed_phase else ""
    return f"    {span.name.value:<14} {span.model.value:<7} {_when(span.start):<25} {dur:>9}{prog}{mark}"


def render_boot(boot: Boot, index: int, total: int) -> list[str]:
    out: list[str] = []
    version = boot.version_hint or "version not printed"
    status = boot.status.value.upper()
    where = f" in {boot.failure.phase.value}" if boot.failure is not None and boot.failure.phase else ""
    out.append(f"Boot {index} of {total} · {boot.engine.value} ({version}) · {status}{where} · {_ranks(boot.ranks)}")
    if boot.phases:
        out.append(f"    {'phase':<14} {'model':<7} {'start':<25} {'duration':>9}")
        last_failed = boot.failure.phase if boot.failure is not None else None
        for i, span in enumerate(boot.phases):
            is_last_of_phase = span.name is last_failed and all(s.name is not last_failed for s in boot.phases[i + 1 :])
            out.append(_phase_row(span, boot.status is BootStatus.FAILED and is_last_of_phase))
    m = boot.metrics
    out.append("  Figures (per rank; free = free GPU memory, the minimum over ranks)")
    kv = []
    if m.max_total_num_tokens is not None:
        kv.append(f"{m.max_total_num_tokens:,} tokens")
    if m.kv_cache_gib is not None:
        kv.append(_gib(m.kv_cache_gib))
    if m.cell_bytes is not None:
        kv.append(f"≈{m.cell_bytes:,} B/token (printed KV size ÷ tokens)")
    if kv:
        out.append(f"    {'KV pool':<16} {' · '.join(kv)}")
    mem = []
    if m.avail_before_load_gib is not None:
        mem.append(f"free before weights {_gib(m.avail_before_load_gib)}")
    if m.weights_gib is not None:
        mem.append(f"weights {_gib(m.weights_gib)}")
    if m.avail_after_load_gib is not None:
        mem.append(f"free after weights {_gib(m.avail_after_load_gib)}")
    if m.avail_after_pool_gib is not None:
        mem.append(f"free after pool {_gib(m.avail_after_pool_gib)}")
    if mem:
        out.append(f"    {'memory':<16} {' · '.join(mem)}")
    graphs = []
    if m.graph_mem_gib is not None:
        graphs.append(_gib(m.graph_mem_gib))
    if m.available_gpu_mem_gib is not None:
        graphs.append(f"free after start-up {_gib(m.available_gpu_mem_gib)}")
    if graphs:
        out.append(f"    {'CUDA graphs':<16} {' · '.join(graphs)}")
    limits = []
    if m.context_len is not None:
        limits.append(f"context {m.context_len:,} tokens")
    if m.max_running_requests is not None:
        limits.append(f"max running {m.max_running_requests:,}")
    if m.max_concurrency is not None:
        limits.append(f"{fmt.capacity(m.max_concurrency)} full-context requests fit")
    if limits:
        out.append(f"    {'limits':<16} {' · '.join(limits)}")
    if boot.draft_facts:
        d = boot.draft_facts
        parts = []
        if Fact.WEIGHTS_GIB in d:
            parts.append(f"weights {_gib(d[Fact.WEIGHTS_GIB])}")
        if Fact.KV_CACHE_GIB in d:
            parts.append(f"KV {_gib(d[Fact.KV_CACHE_GIB])}")
        if Fact.GRAPH_MEM_GIB in d:
            parts.append(f"graphs {_gib(d[Fact.GRAPH_MEM_GIB])}")
        if parts:
            out.append(f"    {'draft model':<16} {' · '.join(parts)}")
    live = boot.live
    if live.token_usage is not None or live.running_reqs is not None:
        usage = f"{live.token_usage:.0%}" if live.token_usage is not None else "—"
        out.append(
            f"    {'serving':<16} KV usage {usage} · running {_fmt(live.running_reqs)} · queued {_fmt(live.queue_reqs)}"
        )
    flags = [
        f"{k}={boot.flags[k]}" for k in _KEY_FLAGS.get(boot.engine, ()) if k in boot.flags and boot.flags[k] is not None
    ]
    if flags:
        out.append(f"    {'flags':<16} {' '.join(flags)}")
    for w in boot.warnings[:3]:
        out.append(f"    warning: {_clip(w, 200)}")
    if boot.failure is not None:
        f = boot.failure
        ph = f" in {f.phase.value}" if f.phase is not None else ""
        out.append(f"  Failure: {f.kind.value}{ph}")
        out.append(f"    {_clip(f.message, 400)}")
        out.append(f"    hint: {f.hint}")
    return out


def _fmt(v: object) -> str:
    return "—" if v is None else f"{v}"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def render(boots: list[Boot], source: str, shape: str | None) -> str:
    lines = [f"{source}: {len(boots)} boot{'s' if len(boots) != 1 else ''} (input: {shape or 'empty'})"]
    for i, boot in enumerate(boots, 1):
        lines.append("")
        lines.extend(render_boot(boot, i, len(boots)))
    return "\n".join(lines) + "\n"


def no_boot_found(source: str) -> str:
    """The one sentence for readable text that holds no boot (``replay``, ``calc --log``)."""
    return f"no SGLang or vLLM boot found in {source} (the text holds no engine start line kvtui recognises)"


def to_json(boots: list[Boot], source: str, unrecognised: list[UnrecognisedShape] | None = None) -> dict[str, object]:
    return {
        "source": source,
        "boots": [b.to_json() for b in boots],
        "unrecognised": [u.to_json() for u in (unrecognised or [])],
    }


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
    from kvtui.history.bundle import read_member

    return read_member(path, "log.txt")


def _record(boots: list[Boot], host: str, source: str, err: TextIO) -> None:
    """``--record HOST``: the log's boots go into the history as boots of HOST (once each)."""
    from kvtui.history import open_store, record_boot, recordable

    kept = [b for b in boots if recordable(b)]
    with open_store() as store:
        problems = [p for b in kept if (p := record_boot(host, b, source=f"replay:{source}", store=store))]
    if problems:
        print(f"kvtui replay: --record: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                                           else ""), file=err)
    print(f"kvtui replay: recorded {len(kept) - len(problems)} of {len(boots)} boot{'s' if len(boots) != 1 else ''} "
          f"as boots of {host} in {store.path}", file=err)


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    paths: list[str] = [args.path] if isinstance(args.path, str) else list(args.path)
    if len(paths) > 1:
        return _run_nodes(paths, args, out, err)
    path = paths[0]
    unrecognised: list[UnrecognisedShape] = []
    try:
        bundled = _bundle_log(path)
        if bundled is not None:  # a kvtui bundle: its log
            boots, shape = analyse(iter([bundled]), unrecognised=unrecognised)
            path_shape = path
        else:
            boots, shape = analyse_path(path, unrecognised=unrecognised)
            path_shape = ""
    except InputError as exc:
        print(f"kvtui replay: {exc}", file=err)
        return EXIT_INPUT
    if not path_shape:
        locate_lines(path, unrecognised)
    unrecognised.sort(key=lambda u: u.first_line)
    source = "-" if path == "-" else path
    if getattr(args, "record", None):
        _record(boots, str(args.record), source, err)
    if getattr(args, "json", False):
        json.dump(to_json(boots, source, unrecognised), out, indent=2, ensure_ascii=False)
        out.write("\n")
    elif getattr(args, "unknown", False):
        out.write(render_unknown(unrecognised, source))
    else:
        out.write(render(boots, source, shape))
        if unrecognised:
            n = sum(u.count for u in unrecognised)
            out.write(f"\n? {n} unrecognised startup line{'s' if n != 1 else ''} ({len(unrecognised)} shapes): "
                      "--unknown lists them\n")
    if not boots:  # readable text without a boot: an answer (zero boots), not unreadable input
        print(f"kvtui replay: {no_boot_found(source)}", file=err)
        return EXIT_OK
    return EXIT_FAILED if boots[-1].status is BootStatus.FAILED else EXIT_OK


def _run_nodes(paths: list[str], args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Several nodes' logs: every start of the deployment as one merged boot (``kvtui.nodes``)."""
    from kvtui.commands import replay_nodes as R
    from kvtui.nodes import merge_logs

    if paths.count("-") > 1:
        print("kvtui replay: '-' (standard input) can be given once", file=err)
        return 2
    names = R.node_names(paths)
    per_node: list[tuple[str, list[Boot]]] = []
    for name, path in zip(names, paths, strict=True):
        try:
            boots, _shape = analyse_path(path)
        except InputError as exc:
            print(f"kvtui replay: {exc}", file=err)
            return EXIT_INPUT
        if not boots:
            print(f"kvtui replay: {no_boot_found(path)}", file=err)
        per_node.append((name, boots))
    if not per_node[0][1]:
        print(f"kvtui replay: the first log ({paths[0]}) holds no boot: nothing to merge the others with", file=err)
        return EXIT_OK
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
