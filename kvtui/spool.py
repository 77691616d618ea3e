"""The spool: the complete log of one host, on disk, read back on demand.

Layout (``state_dir`` is ``$XDG_STATE_HOME/kvtui``)::

    state_dir/spool/HOST/                  one directory per host
        20260304-091200-4242/              one *set* per monitor session (UTC start time, pid)
            meta.json                      {"host", "source", "created"}
            lock                           flock()ed while a process writes the set
            0000-boot-0000.log             one file per boot (segment index, tracker boot index)
            0001-boot-0001.log

Each line of a segment file is one display line (UTF-8)::

    ts \\t rank \\t style \\t cursor \\t ident \\t text \\n

``ts`` is ISO 8601 (empty when unknown), ``cursor`` the source's resume token of the record the
line came from (empty on synthetic lines such as boot markers), ``text`` the line as displayed
(ANSI stripped, the engine's prefix kept; it may contain tabs, never a newline).

Memory stays bounded: only every ``STRIDE``-th line start offset is kept, in an ``array`` per
segment (a quarter of a byte per line); ``read`` and ``search`` read the lines back from disk.

Sessions: every ``Spool.create`` starts a new set, so a session's ``seq`` numbers start at 0 and
never mix with another process's lines; ``Spool.resume`` reopens the newest set of the same host
and source that no other process holds (the monitor then replays it and follows the source after
``last_cursor``, so nothing is read twice). Old sets are pruned when a set is created: at most
``keep_sets`` per host and ``max_bytes`` in total, never a set another process holds.

Thread safety: ``read``/``search`` may run in a worker thread (``asyncio.to_thread``) while the
event loop appends; a lock guards the index and the writer's buffer.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import shutil
import threading
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final

from kvtui.engines.events import LineStyle, line_style_of
from kvtui.updates import LogLine

STRIDE: Final = 32  # one offset kept per STRIDE lines
_CHUNK_LINES: Final = 4096  # lines read per chunk when scanning (a multiple of STRIDE)
_LOAD_CHUNK: Final = 8 << 20  # bytes read per step when reopening a set
_NAME_RE: Final = re.compile(r"[^A-Za-z0-9_.-]")
_SEGMENT_RE: Final = re.compile(r"^(\d{4,})-boot-(\d{4,})\.log$")
_FIELD_BAD: Final = str.maketrans({"\t": " ", "\n": " ", "\r": " "})
_TEXT_BAD: Final = str.maketrans({"\n": " ", "\r": " "})

DEFAULT_KEEP_SETS: Final = 8
DEFAULT_MAX_BYTES: Final = 2 << 30  # 2 GiB of old sets per host


class SpoolError(OSError):
    """The spool directory cannot be used; ``str()`` is user-facing."""


class SearchPatternError(ValueError):
    """A search pattern is not a valid regular expression; ``str()`` is user-facing."""


def host_dir_name(host: str) -> str:
    """A host name made safe as one path component."""
    safe = _NAME_RE.sub("_", host) or "_"
    return "_" + safe if safe.startswith(".") else safe


def rank_matches(rank: str | None, wanted: str) -> bool:
    """``wanted`` names this rank: equal (case-insensitive), or one of its parts (``TP1`` in
    ``DP0 TP1``, ``TP2`` in ``Worker_TP2``)."""
    if rank is None:
        return False
    r = rank.casefold()
    w = wanted.strip().casefold()
    if not w:
        return True
    if r == w:
        return True
    return w in re.split(r"[\s_]+", r)


@dataclass(slots=True)
class _Segment:
    path: Path
    boot: int
    first_seq: int
    count: int = 0
    size: int = 0
    blocks: array[int] = field(default_factory=lambda: array("Q"))


def _smart_case(pattern: str) -> int:
    return 0 if any(c.isupper() for c in pattern) else re.IGNORECASE


def _parse_ts(raw: str) -> datetime | None:
    if not raw:
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None


def _clean_row(ts_s: str, text: str, rank: str | None, style: str | None, cursor: str | None,
               ident: str | None) -> str:
    """One spool row whose fields hold no tab or line break and whose text no line break."""
    if "\n" in text or "\r" in text:
        text = text.translate(_TEXT_BAD)
    fields = (ts_s, rank or "", style or "", cursor or "", ident or "")
    return "\t".join(f.translate(_FIELD_BAD) for f in fields) + "\t" + text + "\n"


class Spool:
    """The complete log of one host session on disk (see the module docstring)."""

    def __init__(self, directory: Path, *, host: str, source: str = "", _resume: bool = False) -> None:
        self.directory = directory
        self.host = host
        self.source = source
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._writer: IO[bytes] | None = None
        self._count = 0
        self._last_cursor: str | None = None
        self._closed = False
        self._last_ts: datetime | None = None
        self._last_ts_s = ""
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._lockfile = open(directory / "lock", "a+b")  # noqa: SIM115 - held for the set's life
        except OSError as exc:
            raise SpoolError(f"cannot create the spool directory {directory}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(self._lockfile.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lockfile.close()
            raise SpoolError(f"the spool {directory} is in use by another kvtui process") from exc
        if _resume:
            self._load_existing()
        else:
            meta = {"host": host, "source": source, "created": datetime.now(UTC).isoformat()}
            _atomic_write(directory / "meta.json", json.dumps(meta).encode())

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        state_dir: Path,
        host: str,
        *,
        source: str = "",
        keep_sets: int = DEFAULT_KEEP_SETS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        now: float | None = None,
    ) -> Spool:
        """Start a new set for ``host`` under ``state_dir/spool/HOST/`` (pruning old sets)."""
        host_dir = state_dir / "spool" / host_dir_name(host)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
        base = f"{stamp}-{os.getpid()}"
        directory = host_dir / base
        for n in itertools.count(1):
            if not directory.exists():
                break
            directory = host_dir / f"{base}-{n}"
        spool = cls(directory, host=host, source=source)
        prune_sets(host_dir, keep_sets=keep_sets, max_bytes=max_bytes, exclude=directory)
        return spool

    @classmethod
    def resume(cls, state_dir: Path, host: str, *, source: str = "") -> Spool:
        """Reopen the newest set of ``host`` with the same ``source`` that no other process holds;
        start a new set (``create``) when there is none."""
        host_dir = state_dir / "spool" / host_dir_name(host)
        if host_dir.is_dir():
            for d in sorted((p for p in host_dir.iterdir() if p.is_dir()), reverse=True):
                try:
                    meta = json.loads((d / "meta.json").read_text())
                except (OSError, ValueError):
                    continue
                if not isinstance(meta, dict) or meta.get("source", "") != source:
                    continue
                try:
                    return cls(d, host=host, source=source, _resume=True)
                except SpoolError:
                    continue  # held by another process
        return cls.create(state_dir, host, source=source)

    def _load_existing(self) -> None:
        files = sorted(p for p in self.directory.iterdir() if _SEGMENT_RE.match(p.name))
        seq = 0
        for path in files:
            m = _SEGMENT_RE.match(path.name)
            assert m is not None
            seg = _Segment(path=path, boot=int(m.group(2)), first_seq=seq)
            offset = 0
            carry = b""
            with open(path, "rb") as fh:
                while chunk := fh.read(_LOAD_CHUNK):
                    buf = carry + chunk
                    last_nl = buf.rfind(b"\n")
                    if last_nl < 0:
                        carry = buf
                        continue
                    complete, carry = buf[: last_nl + 1], buf[last_nl + 1 :]
                    pieces = complete[:-1].split(b"\n")
                    starts = itertools.accumulate((len(p) + 1 for p in pieces), initial=0)
                    first_i = (-seg.count) % STRIDE
                    seg.blocks.extend(offset + s for s in itertools.islice(starts, first_i, len(pieces), STRIDE))
                    seg.count += len(pieces)
                    offset += len(complete)
                    cursor = _last_cursor_in(complete)
                    if cursor is not None:
                        self._last_cursor = cursor
            if carry:  # a torn last line (a crash mid-write): cut it
                with open(path, "r+b") as fh:
                    fh.truncate(offset)
            seg.size = offset
            seq += seg.count
            self._segments.append(seg)
        self._count = seq

    # -- writing ----------------------------------------------------------------------------

    @property
    def boot(self) -> int | None:
        """The tracker boot index of the segment being written (None before the first line)."""
        return self._segments[-1].boot if self._segments else None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def last_cursor(self) -> str | None:
        """The cursor of the newest record written (resume the source after it)."""
        return self._last_cursor

    def append(
        self,
        text: str,
        *,
        boot: int,
        ts: datetime | None = None,
        rank: str | None = None,
        style: LineStyle = "",
        cursor: str | None = None,
        ident: str | None = None,
    ) -> LogLine:
        """Append one display line (a new segment file starts when ``boot`` changes); returns it
        with its ``seq``. Buffered: ``flush()`` (or any read) pushes it to the OS. One line of
        ``extend``: written exactly as a block's line is."""
        seq = self.extend([text], [ts], [rank], [style], [cursor], [ident], boot=boot)
        clean = text.translate(_TEXT_BAD) if ("\n" in text or "\r" in text) else text
        return LogLine(seq=seq, text=clean, ts=ts, rank=rank, boot=boot, style=style)

    def extend(
        self,
        texts: Sequence[str],
        ts: Sequence[datetime | None],
        ranks: Sequence[str | None],
        styles: Sequence[str | None],
        cursors: Sequence[str | None],
        idents: Sequence[str | None] | None,
        *,
        boot: int,
    ) -> int:
        """Append several display lines of one boot in one write, given in columns (line ``i`` is
        ``texts[i]`` with ``ts[i]``, ``ranks[i]``, …; ``idents`` None: none has one; ``append`` is
        one line of it). Returns the ``seq`` of the first line.

        The rows are built in bulk and checked once over the whole block; when one of them needs
        cleaning (a tab or a line break in a field, a line break in a text), built again one by
        one, each cleaned."""
        if not texts:
            return self._count
        isos = self._iso(ts)
        if idents is None:
            parts = [f"{i}\t{r or ''}\t{s or ''}\t{c or ''}\t\t{x}\n"
                     for i, r, s, c, x in zip(isos, ranks, styles, cursors, texts, strict=False)]
        else:
            parts = [f"{i}\t{r or ''}\t{s or ''}\t{c or ''}\t{d or ''}\t{x}\n"
                     for i, r, s, c, d, x in zip(isos, ranks, styles, cursors, idents, texts, strict=False)]
        blob = "".join(parts)
        n = len(parts)
        # every row holds its 5 separators, its one newline, and the texts' own tabs: nothing else
        if blob.count("\n") != n or "\r" in blob or blob.count("\t") != 5 * n + "".join(texts).count("\t"):
            ids = idents if idents is not None else itertools.repeat(None)
            parts = [_clean_row(*row) for row in zip(isos, texts, ranks, styles, cursors, ids, strict=False)]
            blob = "".join(parts)
        last_cursor: str | None = None
        for cursor in reversed(cursors):
            if cursor:
                last_cursor = cursor
                break
        raw = blob.encode("utf-8", "replace")
        with self._lock:
            if self._closed:
                raise SpoolError(f"the spool {self.directory} is closed")
            seg = self._segments[-1] if self._segments else None
            if seg is None or seg.boot != boot:
                seg = self._start_segment(boot)
            elif self._writer is None:  # resumed: continue the last segment
                self._writer = self._open_writer(seg.path)
            first_k = (-seg.count) % STRIDE  # the first row that starts a block
            if first_k < n:
                # ASCII (the common case): characters are bytes; else measure each row's bytes
                sizes = map(len, parts) if len(raw) == len(blob) else (
                    len(x.encode("utf-8", "replace")) for x in parts)
                starts = itertools.accumulate(sizes, initial=seg.size)
                seg.blocks.extend(itertools.islice(starts, first_k, n, STRIDE))
            assert self._writer is not None
            try:
                self._writer.write(raw)
            except OSError as exc:
                raise SpoolError(f"cannot write the spool {seg.path}: {exc.strerror or exc}") from exc
            seg.size += len(raw)
            seg.count += n
            seq = self._count
            self._count += n
            if last_cursor is not None:
                self._last_cursor = last_cursor
        return seq

    def _iso(self, ts: Sequence[datetime | None]) -> list[str]:
        """The ISO strings of a column of timestamps (consecutive equal ones formatted once)."""
        last_ts, last_s = self._last_ts, self._last_ts_s
        out: list[str] = []
        add = out.append
        for t in ts:
            if t is last_ts:
                add(last_s)
            elif t is None:
                add("")
            elif t == last_ts:
                last_ts = t
                add(last_s)
            else:
                last_s = t.isoformat()
                last_ts = t
                add(last_s)
        self._last_ts, self._last_ts_s = last_ts, last_s
        return out

    def _start_segment(self, boot: int) -> _Segment:
        if self._writer is not None:
            self._writer.close()
        index = len(self._segments)
        path = self.directory / f"{index:04d}-boot-{max(boot, 0):04d}.log"
        self._writer = self._open_writer(path)
        seg = _Segment(path=path, boot=boot, first_seq=self._count, size=path.stat().st_size)
        self._segments.append(seg)
        return seg

    @staticmethod
    def _open_writer(path: Path) -> IO[bytes]:
        try:
            return open(path, "ab", buffering=256 * 1024)
        except OSError as exc:
            raise SpoolError(f"cannot write the spool {path}: {exc.strerror or exc}") from exc

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._writer is not None and not self._writer.closed:
            try:
                self._writer.flush()
            except OSError as exc:
                raise SpoolError(f"cannot write the spool {self.directory}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                with contextlib.suppress(OSError):
                    self._writer.close()
            with contextlib.suppress(OSError):
                fcntl.flock(self._lockfile.fileno(), fcntl.LOCK_UN)
                self._lockfile.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def _snapshot(self) -> tuple[list[_Segment], list[int], list[int]]:
        """Segments with their (count, size) frozen, after flushing the writer."""
        with self._lock:
            self._flush_locked()
            segs = list(self._segments)
            return segs, [s.count for s in segs], [s.size for s in segs]

    def read(self, start_seq: int, count: int) -> list[LogLine]:
        """Lines ``start_seq`` .. ``start_seq + count - 1`` (clipped to what exists)."""
        if count <= 0:
            return []
        out: list[LogLine] = []
        for _, lines, seg, first in self._chunks(max(start_seq, 0), reverse=False, stop=start_seq + count):
            for i, raw in enumerate(lines):
                out.append(_decode(raw, first + i, seg.boot))
                if len(out) >= count:
                    return out
        return out

    def search(
        self,
        pattern: str,
        *,
        regex: bool = False,
        rank: str | None = None,
        start_seq: int = 0,
        reverse: bool = False,
        limit: int = 1000,
    ) -> list[LogLine]:
        """Lines whose text matches ``pattern`` (and whose rank is ``rank`` when given).

        Plain patterns are substrings, case-insensitive unless they contain an upper-case letter
        (smart case); ``regex=True`` takes a Python regular expression as is (use ``(?i)``).
        An empty pattern matches every line (a pure rank filter). Forward: lines with
        ``seq >= start_seq`` in order; ``reverse``: lines with ``seq <= start_seq``, newest
        first. A negative ``start_seq`` counts from the end (-1 = the last line).
        Raises ``SearchPatternError`` for an invalid regular expression.
        """
        if limit <= 0:
            return []
        n = len(self)
        if start_seq < 0:
            start_seq += n
            if start_seq < 0:
                if reverse:
                    return []
                start_seq = 0
        if regex:
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                raise SearchPatternError(f"invalid regular expression {pattern!r}: {exc}") from exc
            prefilter: re.Pattern[bytes] | None = None
        else:
            rx = re.compile(re.escape(pattern), _smart_case(pattern))
            prefilter = re.compile(re.escape(pattern.encode("utf-8")), _smart_case(pattern)) if pattern else None
            if prefilter is not None and not pattern.isascii() and _smart_case(pattern):
                prefilter = None  # bytes regexes fold ASCII only: no prefilter for non-ASCII text
        rank_b = rank.strip().encode("utf-8").lower() if rank and rank.strip() else None
        out: list[LogLine] = []
        for blob, lines, seg, first in self._chunks(start_seq, reverse=reverse):
            if prefilter is not None and prefilter.search(blob) is None:
                continue
            if rank_b is not None and rank_b not in blob.lower():
                continue
            indices = range(len(lines) - 1, -1, -1) if reverse else range(len(lines))
            for i in indices:
                raw = lines[i]
                if prefilter is not None and prefilter.search(raw) is None:
                    continue
                line = _decode(raw, first + i, seg.boot)
                if rank is not None and rank.strip() and not rank_matches(line.rank, rank):
                    continue
                if pattern and rx.search(line.text) is None:
                    continue
                out.append(line)
                if len(out) >= limit:
                    return out
        return out

    def _chunks(
        self, start_seq: int, *, reverse: bool, stop: int | None = None
    ) -> Iterator[tuple[bytes, list[bytes], _Segment, int]]:
        """Chunks of raw lines, aligned to blocks: (blob, lines, segment, seq of lines[0]).

        Forward: lines ``start_seq`` .. ``stop - 1`` (or the end); reverse: from the chunk holding
        ``start_seq`` down to line 0 (lines after ``start_seq`` trimmed from the first chunk)."""
        segs, counts, sizes = self._snapshot()
        total = sum(counts)
        if total == 0 or start_seq >= total:
            if not reverse or total == 0:
                return
            start_seq = total - 1
        end_seq = total if stop is None else min(stop, total)
        order = range(len(segs) - 1, -1, -1) if reverse else range(len(segs))
        for si in order:
            seg, count, size = segs[si], counts[si], sizes[si]
            if count == 0:
                continue
            seg_first, seg_last = seg.first_seq, seg.first_seq + count - 1
            if reverse and seg_first > start_seq:
                continue
            if not reverse and (seg_last < start_seq or seg_first >= end_seq):
                continue
            with open(seg.path, "rb") as fh:
                nblocks = (count + STRIDE - 1) // STRIDE
                step = _CHUNK_LINES // STRIDE
                if reverse:
                    hi_block = (min(start_seq, seg_last) - seg_first) // STRIDE
                    starts = range(hi_block - (hi_block % step), -1, -step)
                else:
                    lo_block = (max(start_seq, seg_first) - seg_first) // STRIDE
                    starts = range(lo_block, nblocks, step)
                for b0 in starts:
                    b1 = min(b0 + step, nblocks)
                    if reverse:
                        b1 = min(b1, hi_block + 1)
                    off0 = seg.blocks[b0]
                    off1 = seg.blocks[b1] if b1 < nblocks else size
                    fh.seek(off0)
                    blob = fh.read(off1 - off0)
                    lines = blob.split(b"\n")
                    if lines and lines[-1] == b"":
                        lines.pop()
                    first = seg_first + b0 * STRIDE
                    lines = lines[: count - b0 * STRIDE]
                    lo = max(start_seq, first) if not reverse else first
                    hi = min(start_seq + 1, first + len(lines)) if reverse else min(end_seq, first + len(lines))
                    if lo >= hi:
                        if not reverse and first >= end_seq:
                            return
                        continue
                    if lo > first or hi < first + len(lines):
                        lines = lines[lo - first : hi - first]
                        blob = b"\n".join(lines)
                    yield blob, lines, seg, lo
                    if not reverse and hi >= end_seq:
                        return

    # -- introspection (tests, the status line) --------------------------------------------

    def files(self) -> list[Path]:
        with self._lock:
            return [s.path for s in self._segments]

    def index_bytes(self) -> int:
        """Memory held by the offset index."""
        with self._lock:
            return sum(s.blocks.buffer_info()[1] * s.blocks.itemsize for s in self._segments)


def _decode(raw: bytes, seq: int, boot: int) -> LogLine:
    parts = raw.decode("utf-8", "replace").split("\t", 5)
    if len(parts) < 6:  # not written by this module: show it as is
        return LogLine(seq=seq, text=raw.decode("utf-8", "replace"), ts=None, rank=None, boot=boot)
    ts, rank, style, _cursor, _ident, text = parts
    return LogLine(seq=seq, text=text, ts=_parse_ts(ts), rank=rank or None, boot=boot, style=line_style_of(style))


@dataclass(frozen=True, slots=True)
class SpooledRecord:
    """One spooled line with the fields a replay needs (``Spool.replay``)."""

    seq: int
    boot: int
    text: str
    ts: datetime | None
    rank: str | None
    style: str
    cursor: str | None
    ident: str | None


def iter_spooled(spool: Spool, start_seq: int = 0) -> Iterator[SpooledRecord]:
    """Every spooled line from ``start_seq`` with cursor and ident (for a resumed monitor)."""
    for _, lines, seg, first in spool._chunks(start_seq, reverse=False):
        for i, raw in enumerate(lines):
            parts = raw.decode("utf-8", "replace").split("\t", 5)
            if len(parts) < 6:
                continue
            ts, rank, style, cursor, ident, text = parts
            yield SpooledRecord(
                seq=first + i,
                boot=seg.boot,
                text=text,
                ts=_parse_ts(ts),
                rank=rank or None,
                style=style,
                cursor=cursor or None,
                ident=ident or None,
            )


def _last_cursor_in(data: bytes) -> str | None:
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        parts = data[start:end].split(b"\t", 5)
        if len(parts) == 6 and parts[3]:
            return parts[3].decode("utf-8", "replace")
        end = start
    return None


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _set_in_use(directory: Path) -> bool:
    try:
        fh = open(directory / "lock", "a+b")  # noqa: SIM115
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False


def _dir_bytes(directory: Path) -> int:
    total = 0
    for p in directory.iterdir():
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


def prune_sets(host_dir: Path, *, keep_sets: int, max_bytes: int, exclude: Path | None = None) -> list[Path]:
    """Delete the oldest sets of a host beyond ``keep_sets`` sets or ``max_bytes`` bytes; a set
    that another process holds is never deleted. Returns the deleted directories."""
    if not host_dir.is_dir():
        return []
    sets = sorted((p for p in host_dir.iterdir() if p.is_dir() and p != exclude), reverse=True)
    deleted: list[Path] = []
    kept = 0
    total = 0
    for d in sets:
        size = _dir_bytes(d)
        if kept < keep_sets and total + size <= max_bytes:
            kept += 1
            total += size
            continue
        if _set_in_use(d):
            continue
        shutil.rmtree(d, ignore_errors=True)
        deleted.append(d)
    return deleted
