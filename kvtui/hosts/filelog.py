"""A local log file of a server that may have been up for days: where its current boot starts
however far back, what the file follower reads, and the search of what it skipped.

``plan_current_boot`` (blocking: run it in a thread) decides, in time that does not grow with
the server's uptime beyond one backward byte search:

- the boot's start: the last server-start line (``commands.SERVER_START_PATTERNS``), searched
  backwards in ``SCAN_CHUNK`` pieces read with ``pread`` (newest first, stopping at the first piece
  with one), confirmed by the engine parser and boot tracker on a window around it (the
  monitor's own notion of a boot, as ``boot_start_offset``);
- the startup part, read whole: from the start through the ready line (SGLang ``The server is
  fired up``, else ``Application startup complete``) plus ``READY_MARGIN_LINES``, or through the
  end when the boot never got ready, at most ``STARTUP_CAP`` bytes;
- the recent tail: the last ``tail_bytes`` (whole lines) before now, followed from there on;
- one ``Gap`` between them (``gap_record``: its lines counted with ``bytes.count`` over the range
  in 8 MiB pieces, off the event loop, after the startup part was handed out);
- when the file holds no start: the rotated copies (``FILE.1``, ``FILE.1.gz``, ``FILE.2.gz``,
  logrotate's ``dateext`` ``FILE-20260601[.gz]``), newest first — the startup part is read from
  that copy (``gzip`` for .gz), the gaps name its path; when the start is gone everywhere and the
  server serves (serving lines in the tail, or its process runs), ``start_missing_record`` and
  ``command_record`` (``/proc/PID/cmdline``) before the tail.

``grep_argv``/``GrepReader`` serve ``LocalBackend.search_log``: GNU grep over a byte range (its
stdin positioned at the range's start), matches with their context and byte-offset cursors.
"""

from __future__ import annotations

import contextlib
import gzip
import mmap
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Final

from kvtui.boot.model import BootStatus
from kvtui.bootlog import BootLog
from kvtui.engines.events import BootBoundary, Engine, LogRecord, ParsedLine
from kvtui.engines.parse import LineParser, parse_chunks
from kvtui.engines.shapes import RecordSplitter
from kvtui.engines.source_records import command_record, gap_record, gap_where, start_missing_record
from kvtui.hosts.shellcmd import READY_PATTERNS, SERVER_START_PATTERNS

SCAN_CHUNK: Final = 8 << 20  # the backward search's piece (one rfind per start pattern)
TAIL_BYTES: Final = 2 << 20  # the recent tail read before following
STARTUP_CAP: Final = 32 << 20  # the startup part read whole, at most
READY_MARGIN_LINES: Final = 300  # lines after the ready line that still belong to the startup part
READY_MARGIN_BYTES: Final = 256 << 10
VERIFY_WINDOW: Final = 256 << 10  # bytes either side of a start candidate the tracker reads
MAX_CANDIDATES: Final = 64  # start-pattern lines the tracker may reject before the search gives up
MAX_SIBLINGS: Final = 8  # rotated copies looked at, newest first
HEAD_BYTES: Final = 4096  # a file's first bytes: a copytruncate copy begins with them
COUNT_CHUNK: Final = 8 << 20
READY_LINES: Final = tuple(p.encode() for p in READY_PATTERNS)  # SGLang's own first


def _literal(pattern: str) -> bytes:
    """``server_args=ServerArgs\\(`` -> ``b"server_args=ServerArgs("`` (the patterns are ERE text
    for grep on SSH hosts; here they are searched as bytes)."""
    return re.sub(r"\\(.)", r"\1", pattern).encode()


START_LITERALS: Final = tuple(_literal(p) for p in SERVER_START_PATTERNS)
# the patterns searched for a host's engine (one pass over the file each): SGLang's is its own;
# vLLM's first line is not always its version line (0.32 prints a banner, then non-default args)
ENGINE_LITERALS: Final = {
    "sglang": tuple(p for p in START_LITERALS if p.startswith(b"server_args")),
    "vllm": tuple(p for p in START_LITERALS if not p.startswith(b"server_args")),
    "auto": START_LITERALS,
}
_OVERLAP: Final = max(len(p) for p in START_LITERALS)


# ---------------------------------------------------------------------------------------------
# The tracker's notion of a boot start (also the local follower's, and kept importable there)
# ---------------------------------------------------------------------------------------------


def make_splitter(base_offset: int, shape: str | None = None) -> RecordSplitter:
    """Bytes of a log file -> records whose cursor is the byte offset after each line: the input
    shape (raw, journalctl short*/json, docker) detected by ``kvtui.engines.shapes``."""
    return RecordSplitter(shape, base_offset=base_offset)


def boot_start_offset(data: bytes, base: int = 0, *, engine: str = "auto") -> int | None:
    """The absolute offset of the last server start in ``data`` (which starts at ``base``, at a
    line start), decided by the engine parser and boot tracker (the monitor's own notion of a
    boot); None when no boot starts in ``data``."""
    fast = _fast_boot_start(data, engine)
    if fast is not None:
        return None if fast < 0 else base + fast
    splitter = make_splitter(base)
    records = splitter.feed(data) + splitter.flush()
    starts = boot_starts(records, engine)
    if not starts:
        return None
    i = starts[-1]
    return int(records[i - 1].cursor or base) if i > 0 else base


def _fast_boot_start(data: bytes, engine: str) -> int | None:
    """The engine core's replay path (lines that cannot change a boot skipped: ~10x faster on
    serving-heavy logs) -> the offset in ``data`` of the line that opens the last boot; -1 when
    none does; None when the shape has no byte cursors."""
    hint = None if engine == "auto" else Engine(engine)
    reader = BootLog(hint)
    last: LogRecord | None = None
    for parsed in parse_chunks((data,), hint, parser=reader.parser):
        if reader.feed_parsed(parsed):
            last = parsed.record
    if last is None:
        return -1
    if last.cursor is None or not last.cursor.isdigit():
        return None  # e.g. journald JSON: cursors are journald's, not offsets
    end = int(last.cursor)
    return data.rfind(b"\n", 0, max(end - 1, 0)) + 1


def boot_starts(records: Sequence[LogRecord], engine: str) -> list[int]:
    """Indices of the records that open a boot (the tracker's decision)."""
    reader = BootLog(None if engine == "auto" else Engine(engine))
    return [i for i, rec in enumerate(records) if reader.feed(rec)]


def serves(data: bytes, engine: str) -> bool:
    """Whether the lines in ``data`` show a server serving (the tracker's last boot is ready)."""
    hint = None if engine == "auto" else Engine(engine)
    reader = BootLog(hint)
    for parsed in parse_chunks((data,), hint, parser=reader.parser):
        reader.feed_parsed(parsed)
    cur = reader.current
    return cur is not None and cur.status is BootStatus.READY


# ---------------------------------------------------------------------------------------------
# A file's bytes by offset (plain: pread; .gz: the decompressed stream)
# ---------------------------------------------------------------------------------------------


class Source:
    """One log file's bytes as they were when opened (a plain file's size is fixed then), read by
    offset with ``pread`` (the backward search maps one piece at a time: the pages it touched do
    not stay in kvtui's memory); a ``.gz`` file decompressed as a stream (its size known once scanned)."""

    def __init__(self, path: Path, fh: BinaryIO | None = None) -> None:
        self.path = path
        self.gz = path.name.endswith(".gz")
        self._own = fh is None
        self._fh: BinaryIO = fh if fh is not None else open(path, "rb")  # noqa: SIM115 - closed by close()
        self._fd = self._fh.fileno()
        self._gzf: gzip.GzipFile | None = None
        self._gz_starts: list[int] = []
        self.size: int | None = None
        self.newlines: int | None = None  # a scanned .gz copy's line count
        self.last_bytes = b""  # a scanned .gz copy's last 64 KiB
        if self.gz:
            self._gzf = gzip.GzipFile(fileobj=self._fh, mode="rb")
        else:
            self.size = os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._gzf is not None:
            self._gzf.close()
        if self._own:
            self._fh.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, a: int, b: int) -> bytes:
        """Bytes [a, b) (fewer at the end)."""
        if b <= a:
            return b""
        if self._gzf is not None:
            self._gzf.seek(a)
            return self._gzf.read(b - a)
        b = min(b, self.size or 0)
        return os.pread(self._fd, b - a, a) if b > a else b""

    def chunks(self, a: int, b: int | None, size: int = COUNT_CHUNK) -> Iterator[bytes]:
        """Bytes [a, b) (``b`` None: to the end) in pieces of at most ``size``."""
        if self._gzf is None:
            end = (self.size or 0) if b is None else min(b, self.size or 0)
            for lo in range(a, end, size):
                yield self.read(lo, min(end, lo + size))
            return
        self._gzf.seek(a)
        pos = a
        while b is None or pos < b:
            piece = self._gzf.read(size if b is None else min(size, b - pos))
            if not piece:
                break
            pos += len(piece)
            yield piece

    def scan(self) -> None:
        """A .gz file: decompress it once, noting its size and where start patterns occur."""
        if self._gzf is None or self.size is not None:
            return
        pos = 0
        prev = b""
        found: set[int] = set()
        newlines = 0
        last = b""
        for piece in self.chunks(0, None, SCAN_CHUNK):
            newlines += piece.count(b"\n")
            last = piece[-(64 << 10) :] if len(piece) >= 64 << 10 else (last + piece)[-(64 << 10) :]
            buf = prev + piece
            base = pos - len(prev)
            for pat in START_LITERALS:
                i = buf.find(pat)
                while i >= 0:
                    found.add(base + i)
                    i = buf.find(pat, i + 1)
            pos += len(piece)
            prev = buf[-_OVERLAP:]
        self._gz_starts = sorted(found)[-MAX_CANDIDATES:]
        self.size = pos
        self.newlines = newlines
        self.last_bytes = last

    def find(self, sub: bytes, a: int, b: int) -> int:
        """The offset of the first ``sub`` in [a, b), -1 when none (read in 1 MiB pieces)."""
        step = max(1 << 20, 2 * len(sub))
        lo = a
        while lo < b:
            hi = min(b, lo + step)
            i = self.read(lo, min(b, hi + len(sub) - 1)).find(sub)
            if i >= 0:
                return lo + i
            lo = hi
        return -1

    def rfind(self, sub: bytes, a: int, b: int) -> int:
        """The offset of the last ``sub`` in [a, b), -1 when none (read in 1 MiB pieces)."""
        step = max(1 << 20, 2 * len(sub))
        hi = b
        while hi > a:
            lo = max(a, hi - step)
            i = self.read(lo, min(b, hi + len(sub) - 1)).rfind(sub)
            if i >= 0:
                return lo + i
            hi = lo
        return -1

    def line_start(self, at: int) -> int:
        """The offset of the first byte of the line holding ``at`` (looked for 1 MiB back)."""
        lo = max(0, at - (1 << 20))
        i = self.rfind(b"\n", lo, at)
        return i + 1 if i >= 0 else lo

    def next_line_start(self, at: int) -> int:
        """``at`` when a line starts there, else the start of the next line (the size when none)."""
        size = self.size or 0
        if at <= 0:
            return 0
        if at >= size:
            return size
        i = self.find(b"\n", at - 1, size)
        return i + 1 if i >= 0 else size

    def last_candidate(self, below: int, patterns: Sequence[bytes] = START_LITERALS) -> int | None:
        """The offset of the last occurrence of one of ``patterns`` before ``below``:
        ``SCAN_CHUNK`` pieces read newest first, one ``rfind`` per pattern each, stopping at the
        first hit (a .gz copy: every start pattern, noted in one decompressing pass)."""
        if self.gz:
            self.scan()
            older = [c for c in self._gz_starts if c < below]
            return older[-1] if older else None
        size = self.size or 0
        hi = min(below, size)
        while hi > 0:
            lo = max(0, hi - SCAN_CHUNK)
            # one piece mapped at a time (no copy; unmapped after, so its pages leave kvtui's RSS)
            off = lo - lo % mmap.ALLOCATIONGRANULARITY
            with mmap.mmap(self._fd, min(size, hi + _OVERLAP) - off, offset=off, access=mmap.ACCESS_READ) as mm:
                best = -1
                for pat in patterns:  # a match that starts in [lo, below)
                    i = mm.rfind(pat, lo - off, min(len(mm), below - off - 1 + len(pat)))
                    if i > best:
                        best = i
            if best >= 0:
                return off + best
            hi = lo
        return None


# ---------------------------------------------------------------------------------------------
# Rotated copies
# ---------------------------------------------------------------------------------------------

_ROTATED: Final = r"(?:\.(?P<n>\d+)|-(?P<d>\d[\d-]*))(?:\.gz)?|\.gz"


def rotated_siblings(path: Path) -> list[Path]:
    """``path``'s rotated copies beside it, newest first: logrotate's ``FILE.1``, ``FILE.1.gz``,
    ``FILE.2.gz`` …, ``dateext``'s ``FILE-20260601[.gz]`` (by modification time; the number, then
    the date breaks a tie)."""
    rx = re.compile(re.escape(path.name) + "(?:" + _ROTATED + ")$")
    found: list[tuple[float, int, str, Path]] = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    for entry in entries:
        m = rx.fullmatch(entry.name)
        if m is None:
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        if not entry.is_file():
            continue
        n = int(m.group("n")) if m.group("n") else 0
        found.append((-st.st_mtime, n, "".join(chr(255 - ord(c)) for c in (m.group("d") or "")), Path(entry.path)))
    found.sort()
    return [p for *_, p in found]


def copy_rest(path: Path, pos: int, head: bytes) -> Iterator[bytes]:
    """The bytes of ``path``'s newest rotated copy from ``pos`` on, when that copy is ``path`` as
    it was before a ``copytruncate`` (at least ``pos`` bytes, beginning with ``head``); nothing
    when no copy is."""
    if not head:
        return
    for sib in rotated_siblings(path)[:3]:
        try:
            src = Source(sib)
        except OSError:
            continue
        with src:
            if src.read(0, len(head)) != head:
                continue
            if src.gz:
                src.scan()
            if (src.size or 0) < pos:
                continue
            yield from src.chunks(pos, None, 256 << 10)
            return


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Part:
    """Bytes [start, end) of ``path`` read whole (``cursors``: the records keep their byte
    offsets, the followed file's own; a rotated copy's records carry none)."""

    path: Path
    start: int
    end: int
    cursors: bool = True


@dataclass(frozen=True, slots=True)
class Gap:
    """Lines of ``path`` not read: bytes [start, end) (``end`` None: to the copy's end); ``named``:
    the gap's ``where`` names the path (a rotated copy, not the host's ``log_file``)."""

    path: Path
    start: int
    end: int | None
    named: bool = False
    # known from the .gz copy's decompressing scan (not decompressed again): its lines, its end
    # (the last 64 KiB before ``end``)
    lines: int | None = None
    last: bytes = b""


@dataclass(slots=True)
class BootPlan:
    """What the follower hands out before following ``path`` from ``follow_from``: ``steps`` in
    order (parts read whole, gaps counted when reached, kvtui's own records); ``fh`` the file as
    it was planned (its inode), open; ``note`` a line for the host's status."""

    steps: list[Part | Gap | LogRecord] = field(default_factory=list)
    follow_from: int = 0
    fh: BinaryIO | None = None
    note: str = ""


def _start_in(src: Source, engine: str) -> int | None:
    """The current boot's start in ``src``: the last start-pattern line the tracker agrees opens
    a boot, searched backwards; None when there is none."""
    src.scan()  # a .gz copy: its size and its start lines, in one pass
    patterns = ENGINE_LITERALS.get(engine, START_LITERALS)
    below = src.size or 0
    for _ in range(MAX_CANDIDATES):
        cand = src.last_candidate(below, patterns)
        if cand is None:
            return None
        ls = src.line_start(cand)
        found = _confirm(src, cand, ls, engine)
        if found is not None:
            return found
        below = ls
    return None


def _confirm(src: Source, cand: int, ls: int, engine: str) -> int | None:
    """The boot start the tracker reads near the candidate at ``cand`` (its line at ``ls``), from
    ``VERIFY_WINDOW`` bytes either side; None when the candidate is not one (a line that merely
    quotes a start pattern: the last boot there opened on a serving line, or on the window's
    first engine line, not on a boot boundary)."""
    size = src.size or 0
    wlo = max(0, ls - VERIFY_WINDOW)
    if wlo > 0:
        wlo = src.next_line_start(wlo)
    whi = min(size, cand + VERIFY_WINDOW)
    data = src.read(wlo, whi)
    if whi < size:  # whole lines, the candidate's included
        cut = data.rfind(b"\n")
        if cut >= cand - wlo:
            data = data[: cut + 1]
    hint = None if engine == "auto" else Engine(engine)
    reader = BootLog(hint)
    opened: ParsedLine | None = None
    for parsed in parse_chunks((data,), hint, parser=reader.parser):
        if reader.feed_parsed(parsed):
            opened = parsed
    if opened is None or opened.record is None:
        return None
    cursor = opened.record.cursor
    if cursor is None or not cursor.isdigit():  # no byte cursors (journald JSON): the tracker's word
        return boot_start_offset(data, wlo, engine=engine)
    end = int(cursor) - wlo
    off = wlo + data.rfind(b"\n", 0, max(end - 1, 0)) + 1
    if any(type(e) is BootBoundary for e in opened.events):
        return off
    line = data[off - wlo : end]
    return off if any(p in line for p in START_LITERALS) else None


def startup_end(src: Source, start: int) -> int:
    """Where the startup part that begins at ``start`` ends (a line start): past the ready line
    and ``READY_MARGIN_LINES``; the end when the boot never got ready; capped."""
    size = src.size or 0
    lim = min(size, start + STARTUP_CAP)
    if src.gz:
        data = src.read(start, lim)
        base = start

        def find(sub: bytes, a: int, b: int) -> int:
            i = data.find(sub, a - base, b - base)
            return base + i if i >= 0 else -1
    else:
        find = src.find
    ready = -1
    for pat in READY_LINES:
        ready = find(pat, start, lim)
        if ready >= 0:
            break
    if ready < 0:
        if lim >= size:
            return size
        i = src.rfind(b"\n", start, lim)
        return i + 1 if i >= start else lim
    nl = find(b"\n", ready, lim)
    if nl < 0:
        return lim
    end = nl + 1
    stop = min(lim, end + READY_MARGIN_BYTES)
    for _ in range(READY_MARGIN_LINES):
        nl = find(b"\n", end, stop)
        if nl < 0:
            break
        end = nl + 1
    return end


def first_timestamp(src: Source, engine: str) -> datetime | None:
    data = src.read(0, 64 << 10)
    return _line_ts(data[: data.find(b"\n") + 1] if b"\n" in data else data, engine)


def _line_ts(line: bytes, engine: str, shape: str | None = None) -> datetime | None:
    """The time of one log line (its wrapper's stamp, else the engine's), None when it has none."""
    if not line.strip():
        return None
    splitter = make_splitter(0, shape)
    parser = LineParser(None if engine == "auto" else Engine(engine))
    for rec in splitter.feed(line if line.endswith(b"\n") else line + b"\n"):
        if rec.ts is not None:
            return rec.ts
        for parsed in parser.feed(rec):
            if parsed.ts is not None:
                return parsed.ts
    return None


def count_lines(src: Source, a: int, b: int | None) -> tuple[int, int]:
    """(newlines in [a, b), the end reached) — ``bytes.count`` over 8 MiB pieces."""
    n = 0
    end = a
    for piece in src.chunks(a, b):
        n += piece.count(b"\n")
        end += len(piece)
    return n, end


def gap_of(gap: Gap, engine: str, shape: str | None = None) -> LogRecord | None:
    """The ``gap_record`` of ``gap``: its lines counted, its first and last lines' times."""
    try:
        src = Source(gap.path)
    except OSError:
        return None
    with src:
        if gap.lines is not None and gap.end is not None:
            lines, end = gap.lines, gap.end
        else:
            lines, end = count_lines(src, gap.start, gap.end)
        if end <= gap.start:
            return None
        head = src.read(gap.start, min(end, gap.start + (64 << 10)))
        first_ts = _line_ts(head[: head.find(b"\n") + 1] if b"\n" in head else head, engine, shape)
        tail = gap.last[-(end - gap.start) :] if gap.last else src.read(max(gap.start, end - (64 << 10)), end)
        cut = tail.rstrip(b"\n").rfind(b"\n")
        last_ts = _line_ts(tail[cut + 1 :], engine, shape)
    where = gap_where(bytes=f"{gap.start}-{end}", path=str(gap.path) if gap.named else None)
    return gap_record(lines, where, first_ts, last_ts)


def plan_current_boot(
    path: Path, *, engine: str = "auto", tail_bytes: int = TAIL_BYTES,
    running: Callable[[], tuple[list[str], int] | None] = lambda: None,
) -> BootPlan:
    """Where to read ``path``'s current boot from (see the module docstring). Blocking."""
    plan = BootPlan()
    try:
        fh: BinaryIO | None = open(path, "rb")  # noqa: SIM115 - handed to the follower
    except FileNotFoundError:
        fh = None
    except OSError:
        return plan  # the follower says why it cannot read it
    plan.fh = fh
    src = Source(path, fh) if fh is not None else None
    try:
        size = src.size or 0 if src is not None else 0
        tail_from = src.next_line_start(size - tail_bytes) if src is not None and size > tail_bytes else 0
        start = _start_in(src, engine) if src is not None and size else None
        if start is not None and src is not None:
            end = startup_end(src, start)
            if tail_from <= end:
                plan.follow_from = start  # no gap: read on from the start
                return plan
            plan.steps = [Part(path, start, end), Gap(path, end, tail_from)]
            plan.follow_from = tail_from
            return plan
        sibs = rotated_siblings(path)[:MAX_SIBLINGS]
        oldest_ts: datetime | None = None
        for k, sib in enumerate(sibs):
            try:
                with Source(sib) as s2:
                    found = _start_in(s2, engine)
                    if found is None:
                        oldest_ts = first_timestamp(s2, engine) or oldest_ts
                        continue
                    end = startup_end(s2, found)
                    steps: list[Part | Gap | LogRecord] = [Part(sib, found, end, cursors=False)]
                    if end < (s2.size or 0):
                        lines = None if s2.newlines is None else s2.newlines - s2.read(0, end).count(b"\n")
                        steps.append(Gap(sib, end, s2.size, named=True, lines=lines, last=s2.last_bytes))
            except (OSError, EOFError, gzip.BadGzipFile):
                continue
            steps += [Gap(newer, 0, None, named=True) for newer in reversed(sibs[:k])]
            if tail_from > 0:
                steps.append(Gap(path, 0, tail_from))
            plan.steps = steps
            plan.follow_from = tail_from
            plan.note = f"the boot's start is in {sib.name}"
            return plan
        plan.follow_from = tail_from
        if src is None or size == 0:
            return plan  # nothing yet: the start comes when it is written
        if oldest_ts is None and not sibs:
            oldest_ts = first_timestamp(src, engine)
        where = f"{path.name} or its rotated copies" if sibs else path.name
        plan.note = f"no server start in {where}"
        gap: list[Part | Gap | LogRecord] = [Gap(path, 0, tail_from)] if tail_from > 0 else []
        if not serves(src.read(tail_from, size), engine):
            plan.steps = gap  # not serving (yet): the tracker opens the boot its lines say
            return plan
        proc = running()  # the log says it serves: whose command line
        reason = f"rotated before {oldest_ts:%Y-%m-%d %H:%M}" if oldest_ts is not None else f"not in {where}"
        plan.steps = [start_missing_record(reason)]
        if proc is not None:
            plan.steps.append(command_record(proc[0], proc[1]))
        plan.steps += gap
        return plan
    finally:
        if src is not None:
            src.close()  # ``fh`` stays open for the follower


# ---------------------------------------------------------------------------------------------
# The running server's command line
# ---------------------------------------------------------------------------------------------


def proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a] if raw else []


def engine_command(pids: Sequence[int], pattern: str) -> tuple[list[str], int] | None:
    """The first of ``pids`` whose command line matches the engine ``pattern``: (argv, pid)."""
    rx = re.compile(pattern)
    for pid in pids:
        argv = proc_cmdline(pid)
        if argv and rx.search(" ".join(argv)):
            return argv, pid
    return None


def engine_roots(pattern: str) -> list[int]:
    """PIDs on this machine whose command line matches ``pattern`` and whose parent's does not
    (the server, not its workers), oldest first."""
    rx = re.compile(pattern)
    procs: dict[int, tuple[int, int]] = {}  # pid -> (ppid, start ticks)
    for d in os.scandir("/proc"):
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        argv = proc_cmdline(pid)
        if not argv or not rx.search(" ".join(argv)):
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            procs[pid] = (int(fields[1]), int(fields[19]))
    roots = [p for p, (pp, _t) in procs.items() if pp not in procs]
    return sorted(roots, key=lambda p: procs[p][1])


# ---------------------------------------------------------------------------------------------
# Search (grep over a byte range)
# ---------------------------------------------------------------------------------------------

_GREP_LINE: Final = re.compile(rb"^(\d+)([:-])(\d+)[:-]")


def grep_argv(pattern: str, *, regex: bool, ignore_case: bool, context: int, limit: int | None) -> list[str]:
    argv = ["grep", "-a", "-b", "-n", "-E" if regex else "-F"]
    if ignore_case:
        argv.append("-i")
    if limit is not None:
        argv += ["-m", str(int(limit))]
    if context > 0:
        argv += ["-C", str(int(context))]
    return [*argv, "-e", pattern]


@dataclass(slots=True)
class GrepLine:
    """One line grep printed: ``match`` (else context), its line number and byte offset in the
    input grep read, its bytes (no newline)."""

    match: bool
    line_no: int
    offset: int
    text: bytes


def parse_grep_line(raw: bytes) -> GrepLine | None:
    """``N:OFF:text`` (a match) or ``N-OFF-text`` (context) -> a ``GrepLine``; None for ``--``."""
    m = _GREP_LINE.match(raw)
    if m is None:
        return None
    return GrepLine(m.group(2) == b":", int(m.group(1)), int(m.group(3)), raw[m.end() :])


def grep_record(line: GrepLine, base: int, pattern: str, *, ignore_case: bool) -> LogRecord:
    """A grep line -> the record the follower would have made of it (wrapper removed), its cursor
    the absolute byte offset after it (``base`` + grep's offset + the line + its newline)."""
    cursor = base + line.offset + len(line.text) + 1
    records = make_splitter(cursor - len(line.text) - 1).feed(line.text + b"\n")
    if not records:
        return LogRecord(text="", cursor=str(cursor))
    pick = records[-1]
    if len(records) > 1:  # a \r-redrawn line: the piece that holds the match
        want = pattern.casefold() if ignore_case else pattern
        for rec in records:
            if want in (rec.text.casefold() if ignore_case else rec.text):
                pick = rec
                break
    return LogRecord(pick.text, pick.ts, str(cursor), pick.source, pick.pid, pick.ident)


__all__ = [
    "BootPlan",
    "Gap",
    "Part",
    "Source",
    "boot_start_offset",
    "boot_starts",
    "copy_rest",
    "count_lines",
    "engine_command",
    "engine_roots",
    "gap_of",
    "grep_argv",
    "make_splitter",
    "plan_current_boot",
    "rotated_siblings",
    "startup_end",
]
