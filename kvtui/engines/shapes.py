"""Input shapes: what wraps an engine's lines on the way to us -> one ``LogRecord`` per physical line.

Shapes (``SHAPES``):

- ``raw``           the engine's own output (a log file, ``kubectl logs``, ``docker logs`` without
                    ``--timestamps``, a pipe);
- ``short``         ``journalctl`` default: ``Mar 04 09:12:00 host ident[pid]: msg`` (no year: the
                    injected clock's year, the year before when that would lie in the future);
- ``short-precise`` the same with ``.123456`` microseconds;
- ``short-iso``     ``2026-03-04T09:12:00+0000 host ident[pid]: msg`` (offset with or without a
                    colon, fractional seconds allowed: also covers ``short-iso-precise``);
- ``cat``           ``journalctl -o cat``: messages only (detected when systemd's own unit lines
                    show; otherwise indistinguishable from raw);
- ``json``          ``journalctl -o json``: one object per line; ``MESSAGE`` a string, an array of
                    byte values, or null; ``__CURSOR``, ``__REALTIME_TIMESTAMP`` (µs, UTC),
                    ``SYSLOG_IDENTIFIER``, ``_PID``;
- ``docker``        ``docker logs`` without timestamps (= raw, labelled docker);
- ``docker-ts``     ``docker logs --timestamps``: an RFC 3339 nano prefix, ``…123456789Z msg``.

Rules shared by every shape: split on ``\\n`` and on ``\\r`` (tqdm redraws; a wrapped line's
metadata is copied to each ``\\r`` piece), drop empty pieces, cut lines longer than 1 MiB (the
rest of that line is dropped, the line is not), decode bad UTF-8 with replacement, and never
raise on garbage: a line that does not fit its shape becomes a record with the text as is.

``cursor`` is the journal's ``__CURSOR`` for json, else the byte offset just past the line in
the stream (feed ``base_offset`` to continue a file from an offset): resuming there yields the
next line.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from kvtui.engines.events import LogRecord
from kvtui.fastnew import fast_new

__all__ = [
    "MAX_LINE_BYTES",
    "SHAPES",
    "RecordSplitter",
    "detect_shape",
    "iter_records",
    "parse_journal_json",
]

SHAPES: tuple[str, ...] = ("raw", "short", "short-iso", "short-precise", "cat", "json", "docker", "docker-ts")
MAX_LINE_BYTES = 1 << 20  # longer lines are cut to this, not dropped
HEAD_BYTES = 64 * 1024  # how much of the start detect_shape looks at
_HEAD_LINES = 200

_SOURCE = {
    "raw": "raw",
    "short": "journal",
    "short-iso": "journal",
    "short-precise": "journal",
    "cat": "journal",
    "json": "journal",
    "docker": "docker",
    "docker-ts": "docker",
}
# Shapes where a bare "\r" ends a record as soon as it arrives (no wrapper to wait for).
_CR_TERMINATES = frozenset({"raw", "cat", "docker"})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FLOAT_EXACT_US = 4_102_444_800_000_000  # 2100-01-01 in µs
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}

# --------------------------------------------------------------------------------------------
# Fast LogRecord construction (the frozen dataclass __init__ costs ~3x more per record)
# --------------------------------------------------------------------------------------------
_rec: Callable[[str, datetime | None, str | None, str, int | None, str | None], LogRecord] = fast_new(LogRecord)


# --------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------
_IDENT = r"[^\s:\[\]]+(?:\[\d+\])?:(?: |$)"
_SHORT_ISO_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d) \S+ " + _IDENT)
_SHORT_PRECISE_RE = re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d\.\d{1,9} \S+ " + _IDENT)
_SHORT_RE = re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ " + _IDENT)
_DOCKER_TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) ")
_JOURNAL_META_RE = re.compile(r"-- (?:Boot |Logs begin|Journal begins|No entries|Reboot|.*--$)")
_SYSTEMD_UNIT_RE = re.compile(
    r"(?:Started|Starting|Stopping|Stopped|Finished) .*\.(?:service|scope)\b"
    r"|\S+\.service: (?:Main process exited|Failed with result|Deactivated successfully|Scheduled restart job"
    r"|Consumed )"
)
_ORDER = ("json", "short-iso", "short-precise", "short", "docker-ts")
# the stamped shapes a line's first character leaves, tried in this order
_BY_DIGIT = ((_SHORT_ISO_RE, "short-iso"), (_DOCKER_TS_RE, "docker-ts"))
_BY_UPPER = ((_SHORT_PRECISE_RE, "short-precise"), (_SHORT_RE, "short"))


def _line_shape(line: str) -> str | None:
    if line.startswith("{"):
        return "json" if parse_journal_json(line) is not None else None
    c = line[:1]
    for regex, shape in _BY_DIGIT if c.isdigit() else _BY_UPPER if c.isupper() else ():
        if regex.match(line):
            return shape
    return None


def _detect(head: bytes, final: bool = True) -> str | None:
    """The shape of ``head``, or None when it holds no informative line yet (and not ``final``)."""
    if not final:
        cut = head.rfind(b"\n")
        head = head[:cut + 1] if cut >= 0 else b""
    text = head[:HEAD_BYTES].decode("utf-8", "replace")
    counts: dict[str, int] = {}
    informative = 0
    unit_lines = 0
    for line in text.split("\n")[:_HEAD_LINES]:
        line = line.rstrip("\r")
        if not line.strip() or _JOURNAL_META_RE.match(line):
            continue
        informative += 1
        shape = _line_shape(line)
        if shape is not None:
            counts[shape] = counts.get(shape, 0) + 1
        elif _SYSTEMD_UNIT_RE.match(line):
            unit_lines += 1
    if informative == 0:
        return "raw" if final else None
    best = max(_ORDER, key=lambda s: (counts.get(s, 0), -_ORDER.index(s)))
    n = counts.get(best, 0)
    if n and n * 4 >= informative:
        return best
    return "cat" if unit_lines else "raw"


def detect_shape(head: bytes) -> str:
    """The shape of a log from its first bytes (up to 64 KiB are looked at): one of ``SHAPES``
    minus ``docker`` (``docker logs`` without timestamps and ``kubectl logs`` are ``raw``)."""
    shape = _detect(head, final=True)
    return shape if shape is not None else "raw"


# --------------------------------------------------------------------------------------------
# journalctl -o json
# --------------------------------------------------------------------------------------------
def _first_str(v: object) -> str | None:
    if isinstance(v, list):  # a field journald saw several times
        v = next((x for x in v if isinstance(x, str | list)), None)
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(b, int) and 0 <= b < 256 for b in v):
        return bytes(v).decode("utf-8", "replace")
    return None


def _int_or_none(v: object) -> int | None:
    s = _first_str(v) if not isinstance(v, int) else str(v)
    if s is None:
        return None
    s = s.strip()
    return int(s) if s.isdigit() and len(s) < 20 else None


_rt_last: tuple[int, datetime] = (-1, _EPOCH)  # the last second converted (entries come in bursts)


def _realtime(v: object) -> datetime | None:
    """journald ``__REALTIME_TIMESTAMP`` (µs since the epoch, a string) -> aware UTC datetime."""
    global _rt_last
    if type(v) is str and v.isdigit() and len(v) <= 16:
        us = int(v)
        if us < _FLOAT_EXACT_US:
            sec, frac = divmod(us, 1_000_000)
            last = _rt_last
            if last[0] == sec:
                return last[1].replace(microsecond=frac)
            base = datetime.fromtimestamp(sec, UTC)
            _rt_last = (sec, base)
            return base.replace(microsecond=frac) if frac else base
    else:
        us_or_none = _int_or_none(v)
        if us_or_none is None:
            return None
        us = us_or_none
    try:
        return _EPOCH + timedelta(microseconds=us)
    except (OverflowError, ValueError):
        return None


def _message(v: object) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        if all(isinstance(b, int) and 0 <= b < 256 for b in v):
            return bytes(v).decode("utf-8", "replace")
        s = _first_str(v)
        return s if s is not None else ""
    return ""  # null: journalctl leaves out fields over its size limit


def parse_journal_json(line: bytes | str) -> LogRecord | None:
    """One ``journalctl -o json`` line -> a LogRecord (``text`` may still hold ``\\n``/``\\r``:
    split it), or None when the line is not a journal JSON object."""
    if isinstance(line, str):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            return None
    else:
        line = bytes(line).strip()
        if not (line.startswith(b"{") and line.endswith(b"}")):
            return None
    return _journal_record(_loads(line))


def _loads(line: bytes | str) -> object:
    try:
        return json.loads(line)
    except UnicodeDecodeError:  # bad UTF-8 in bytes: decode with replacement, then parse
        return _loads(line.decode("utf-8", "replace")) if isinstance(line, bytes) else None
    except (ValueError, RecursionError):
        return None


JournalFields = tuple[str, datetime | None, str | None, int | None, str | None]


def journal_fields(obj: object) -> JournalFields | None:
    """One decoded ``journalctl -o json`` object -> (text, ts, cursor, pid, ident), or None when
    it is no journal entry (the fields of ``LogRecord``; ``text`` may still hold newlines)."""
    if not isinstance(obj, dict) or not ("MESSAGE" in obj or "__CURSOR" in obj or "__REALTIME_TIMESTAMP" in obj):
        return None
    msg = obj.get("MESSAGE")
    cursor = obj.get("__CURSOR")
    ident = obj.get("SYSLOG_IDENTIFIER")
    pid = obj.get("_PID")
    return (
        msg if type(msg) is str else _message(msg),
        _realtime(obj.get("__REALTIME_TIMESTAMP")),
        cursor if type(cursor) is str else _first_str(cursor),
        int(pid) if type(pid) is str and pid.isdigit() and len(pid) < 20 else _int_or_none(pid),
        ident if type(ident) is str else _first_str(ident),
    )


JournalColumns = tuple[list[str], list[datetime | None], list[str | None], list[int | None], list[str | None]]
_NONE_TYPE = type(None)


def journal_columns(objs: list[object]) -> JournalColumns | None:
    """``journal_fields`` of many decoded objects at once, in columns (texts, ts, cursors, pids,
    identifiers), computed with C-level ``map``s — or None when one of them is not the common case
    (not an object, a non-string ``MESSAGE``/cursor/identifier/pid/timestamp, a timestamp past
    2100): then ``journal_fields`` per object gives the same answer. The texts may hold newlines."""
    if not objs:
        return [], [], [], [], []
    if set(map(type, objs)) != {dict}:
        return None
    get: Callable[[object, str], Any] = dict.get  # type: ignore[assignment]
    msgs: list[str] = list(map(get, objs, itertools.repeat("MESSAGE")))
    if set(map(type, msgs)) != {str}:
        return None
    cursors: list[str | None] = list(map(get, objs, itertools.repeat("__CURSOR")))
    idents: list[str | None] = list(map(get, objs, itertools.repeat("SYSLOG_IDENTIFIER")))
    if not set(map(type, cursors)) <= {str, _NONE_TYPE} or not set(map(type, idents)) <= {str, _NONE_TYPE}:
        return None
    raw_pids: list[Any] = list(map(get, objs, itertools.repeat("_PID")))
    pids: list[int | None]
    if set(map(type, raw_pids)) == {str} and all(map(str.isdecimal, raw_pids)) and max(map(len, raw_pids)) < 20:
        pids = list(map(int, raw_pids))
    elif set(map(type, raw_pids)) <= {str, _NONE_TYPE}:
        pids = [_int_or_none(p) for p in raw_pids]
    else:
        return None
    rts: list[Any] = list(map(get, objs, itertools.repeat("__REALTIME_TIMESTAMP")))
    tss: list[datetime | None]
    if set(map(type, rts)) == {str} and all(map(str.isdecimal, rts)) and max(map(len, rts)) <= 16:
        us = list(map(int, rts))
        if max(us) >= _FLOAT_EXACT_US:
            return None
        # µs / 1e6 is within 0.12 µs of the exact value before 2100: fromtimestamp rounds it back
        # to the exact microsecond (a test compares it with ``_realtime`` over the whole range)
        tss = list(map(datetime.fromtimestamp, map(operator.truediv, us, itertools.repeat(1_000_000)),
                       itertools.repeat(UTC)))
    else:
        tss = [_realtime(v) for v in rts]
    return msgs, tss, cursors, pids, idents


def _journal_record(obj: object) -> LogRecord | None:
    f = journal_fields(obj)
    if f is None:
        return None
    return _rec(f[0], f[1], f[2], "journal", f[3], f[4])


# --------------------------------------------------------------------------------------------
# The splitter
# --------------------------------------------------------------------------------------------
def _pieces(text: str) -> list[str]:
    if "\r" in text or "\n" in text:
        return [p for p in re.split(r"\r\n|\r|\n", text) if p]
    return [text] if text else []


# A wrapped line: ts, pid, ident, message, width of the wrapper prefix (0: none to continue).
_Parsed = tuple[datetime | None, int | None, str | None, str, int]


class RecordSplitter:
    """Incremental form of ``iter_records`` for live streams (SSH, ``tail -F``, a socket).

    ``feed(chunk)`` returns the records completed by ``chunk``; a partial last line waits for
    the next chunk (bounded: past 1 MiB its first MiB is emitted and the rest of it dropped);
    ``flush()`` returns the final partial line at the end of the stream. With ``shape=None`` the
    shape is detected from the first complete lines. ``now`` is the clock for year-less
    ``short`` stamps; ``source`` overrides the records' ``source`` label.
    """

    def __init__(self, shape: str | None = None, *, now: Callable[[], datetime] | None = None,
                 source: str | None = None, base_offset: int = 0) -> None:
        if shape is not None and shape not in SHAPES:
            raise ValueError(f"unknown input shape {shape!r}: expected one of {', '.join(SHAPES)}")
        self.shape: str | None = shape
        self._now: Callable[[], datetime] = now or datetime.now
        self._source_override = source
        self._parts: list[bytes] = []  # the partial last line, as it arrived
        self._plen = 0
        self._skip = False  # dropping the tail of an over-long line
        self._offset = base_offset  # stream offset of the first byte of the partial line
        # journald short*: continuation lines of a multi-line message are indented to the message
        self._cont: tuple[datetime | None, int | None, str | None, int] | None = None
        self._ts_key = ""
        self._ts_val: datetime | None = None
        self._ref: datetime | None = None
        self._heads: dict[str, tuple[int | None, str]] = {}

    @property
    def offset(self) -> int:
        """Stream offset of the first byte not yet turned into a record."""
        return self._offset

    def feed(self, chunk: bytes) -> list[LogRecord]:
        return list(self._consume(chunk, final=False))

    def flush(self) -> list[LogRecord]:
        return list(self._consume(b"", final=True))

    # -- bytes -> complete lines ------------------------------------------------------------
    def _consume(self, chunk: bytes, *, final: bool) -> Iterator[LogRecord]:
        if self._skip:
            i = self._terminator(chunk)
            if i < 0:
                self._offset += len(chunk)
                return
            self._offset += i + 1
            chunk = chunk[i + 1:]
            self._skip = False
        if not final and self.shape is not None and self._last_terminator(chunk) < 0:
            # no line ends in this chunk: hold it (linear in the line's length, however it trickles)
            if chunk:
                self._parts.append(bytes(chunk))
                self._plen += len(chunk)
                if self._plen > MAX_LINE_BYTES:
                    rest = b"".join(self._parts)
                    self._parts, self._plen = [], 0
                    yield from self._lines(rest[:MAX_LINE_BYTES], cut_off=len(rest))
                    self._skip = True
            return
        data = b"".join((*self._parts, chunk)) if self._parts else bytes(chunk)
        self._parts, self._plen = [], 0
        if self.shape is None:
            shape = _detect(data, final=final or len(data) >= HEAD_BYTES)
            if shape is None:
                self._parts, self._plen = [data], len(data)
                return
            self.shape = shape
        if final:
            complete, rest = data, b""
        else:
            cut = self._last_terminator(data)
            complete, rest = data[:cut + 1], data[cut + 1:]
        if complete:
            yield from self._lines(complete)
        if len(rest) > MAX_LINE_BYTES:
            yield from self._lines(rest[:MAX_LINE_BYTES], cut_off=len(rest))
            self._skip = True
        elif rest:
            self._parts, self._plen = [rest], len(rest)

    def _terminator(self, data: bytes) -> int:
        i = data.find(b"\n")
        if self.shape in _CR_TERMINATES or self.shape is None:
            j = data.find(b"\r")
            if j >= 0 and (i < 0 or j < i):
                return j
        return i

    def _last_terminator(self, data: bytes) -> int:
        i = data.rfind(b"\n")
        if self.shape in _CR_TERMINATES:
            i = max(i, data.rfind(b"\r"))
        return i

    # -- lines -> records --------------------------------------------------------------------
    def _lines(self, block: bytes, cut_off: int = 0, _generic: bool = False) -> Iterator[LogRecord]:
        """Records for the complete lines in ``block`` (``cut_off``: the block is the first MiB
        of a longer line of that many bytes)."""
        shape = self.shape or "raw"
        source = self._source_override or _SOURCE[shape]
        pos = self._offset
        # the last line of a block may have no terminator (a \r-ended raw block, the final
        # flush): offsets never run past the block
        limit = pos + len(block)
        self._ref = None
        if shape in ("raw", "cat", "docker") and block.isascii():
            # the common case: one decode for the block, char offsets are byte offsets
            text = block.decode("ascii")
            tlines = text.split("\n")
            if text.endswith("\n"):
                tlines.pop()
            has_cr = "\r" in text
            for line in tlines:
                n = len(line)
                end = pos + n + 1
                if n > MAX_LINE_BYTES:
                    line = line[:MAX_LINE_BYTES]
                if has_cr and "\r" in line:
                    start = pos
                    for piece in line.split("\r"):
                        start += len(piece) + 1
                        if piece:
                            yield _rec(piece, None, str(start if start <= limit else limit), source, None, None)
                elif n:
                    yield _rec(line, None, str(end if end <= limit else limit), source, None, None)
                pos = end
            self._offset = self._offset + cut_off if cut_off else min(pos, limit)
            return
        if shape == "short-iso" and not _generic and not cut_off and block.isascii():
            yield from self._short_iso_fast(block, source)
            return
        lines = block.split(b"\n")
        if block.endswith(b"\n"):
            lines.pop()
        if shape in ("raw", "cat", "docker"):
            for raw in lines:
                end = pos + len(raw) + 1
                if len(raw) > MAX_LINE_BYTES:
                    raw = raw[:MAX_LINE_BYTES]
                if b"\r" in raw:
                    start = pos
                    for bpiece in raw.split(b"\r"):
                        start += len(bpiece) + 1
                        if bpiece:
                            yield _rec(bpiece.decode("utf-8", "replace"), None, str(min(start, limit)), source, None,
                                       None)
                elif raw:
                    yield _rec(raw.decode("utf-8", "replace"), None, str(min(end, limit)), source, None, None)
                pos = end
        elif shape == "json":
            # cursors come from the journal; one decode for the block (bad UTF-8 -> U+FFFD, the same
            # as decoding each MESSAGE): json.loads on str skips its own encoding sniffing
            pos = limit
            loads = json.loads
            for line in block.decode("utf-8", "replace").split("\n"):
                if len(line) > MAX_LINE_BYTES:
                    line = line[:MAX_LINE_BYTES]
                stripped = line.strip()
                if not stripped:
                    continue
                rec = None
                if stripped[0] == "{" and stripped[-1] == "}":
                    try:
                        rec = _journal_record(loads(stripped))
                    except (ValueError, RecursionError):
                        rec = None
                if rec is None:
                    for p in _pieces(line):
                        yield _rec(p, None, None, source, None, None)
                    continue
                text = rec.text
                if "\n" in text or "\r" in text:
                    for p in _pieces(text):
                        yield _rec(p, rec.ts, rec.cursor, source, rec.pid, rec.ident)
                elif text or rec.cursor is not None:
                    # keep empty messages that carry a cursor: a resume point must not be lost
                    yield rec if source == "journal" else _rec(text, rec.ts, rec.cursor, source, rec.pid, rec.ident)
        else:
            wrapped = self._wrapped_parser(shape)
            for raw in lines:
                end = pos + len(raw) + 1
                pos = end
                if len(raw) > MAX_LINE_BYTES:
                    raw = raw[:MAX_LINE_BYTES]
                line = raw.decode("utf-8", "replace")
                if not line:
                    continue
                cursor = str(min(end, limit))
                got = wrapped(line)
                if got is None:
                    ts: datetime | None = None
                    pid: int | None = None
                    ident: str | None = None
                    text = line
                    cont = self._cont
                    if cont is not None and line.startswith(" ") and len(line) > cont[3] \
                            and line[:cont[3]].isspace():
                        ts, pid, ident, width = cont
                        text = line[width:]
                else:
                    ts, pid, ident, text, width = got
                    self._cont = (ts, pid, ident, width) if width else None
                if "\r" in text:
                    for p in text.split("\r"):
                        if p:
                            yield _rec(p, ts, cursor, source, pid, ident)
                elif text:
                    yield _rec(text, ts, cursor, source, pid, ident)
        if cut_off:
            pos = self._offset + cut_off  # the dropped tail still counts for offsets
        self._offset = min(pos, limit) if not cut_off else pos

    def _short_iso_fast(self, block: bytes, source: str) -> Iterator[LogRecord]:
        """``short-iso`` over an ASCII block: the common lines inline, the rest (continuations,
        lines that do not fit) through the generic path. Same records as ``_lines``."""
        text = block.decode("ascii")
        tlines = text.split("\n")
        if text.endswith("\n"):
            tlines.pop()
        pos = self._offset
        limit = pos + len(block)
        heads = self._heads
        ts_key, ts_val = self._ts_key, self._ts_val
        cont = self._cont
        for i, line in enumerate(tlines):
            n = len(line)
            end = pos + n + 1
            sp = line.find(" ", 19, 40)
            c = line.find(": ", sp + 1) if sp > 0 else -1
            got = None
            if c >= 0 and n <= MAX_LINE_BYTES and line[10:11] == "T":
                key = line[:sp]
                if key != ts_key:
                    ts_val = self._iso(key)
                    ts_key = key
                head = line[sp + 1:c]
                got = heads.get(head)
                if got is None:
                    got = self._new_head(head)
                if ts_val is None or not got[1]:
                    got = None
            if got is None:
                # the rare line (not this shape, too long, a stamp or head it cannot read): hand the
                # rest of the block to the generic path (it keeps state)
                self._offset = pos
                self._ts_key, self._ts_val = ts_key, ts_val
                self._cont = cont
                rest = "\n".join(tlines[i:]) + ("\n" if text.endswith("\n") else "")
                yield from self._lines(rest.encode("ascii"), _generic=True)
                return
            msg = line[c + 2:]
            cont = (ts_val, got[0], got[1], c + 2)
            cursor = str(end if end <= limit else limit)
            if "\r" in msg:
                for p in msg.split("\r"):
                    if p:
                        yield _rec(p, ts_val, cursor, source, got[0], got[1])
            elif msg:
                yield _rec(msg, ts_val, cursor, source, got[0], got[1])
            pos = end
        self._cont = cont
        self._ts_key, self._ts_val = ts_key, ts_val
        self._offset = min(pos, limit)

    # -- wrappers ----------------------------------------------------------------------------
    def _wrapped_parser(self, shape: str) -> Callable[[str], _Parsed | None]:
        if shape == "docker-ts":
            return self._docker_ts
        if shape == "short-iso":
            return self._short_iso
        return self._short  # short, short-precise

    def _docker_ts(self, line: str, min_stamp: int = 20) -> _Parsed | None:
        """An ISO stamp (at least ``min_stamp`` characters), a space, the text (inline: docker's
        live lines come through here)."""
        sp = line.find(" ")
        if sp < min_stamp or line[4] != "-" or line[10] != "T":
            return None
        ts = self._iso(line[:sp])
        if ts is None:
            return None
        return ts, None, None, line[sp + 1:], 0

    def _short_iso(self, line: str) -> _Parsed | None:
        """A docker-ts line (the stamp may be one character shorter) whose text is a journal head."""
        got = self._docker_ts(line, 19)
        return None if got is None else self._journal_tail(line, len(line) - len(got[3]), got[0])

    def _short(self, line: str) -> _Parsed | None:
        # "Mar 04 09:12:00[.123456] host ident[pid]: msg"
        if len(line) < 16 or line[3] != " " or line[6] != " " or line[9] != ":" or line[12] != ":":
            return None
        sp = line.find(" ", 15)
        if sp < 0:
            return None
        key = line[:sp]
        if key == self._ts_key:
            ts = self._ts_val
        else:
            ts = self._short_ts(key)
            if ts is None:
                return None
            self._ts_key, self._ts_val = key, ts
        return self._journal_tail(line, sp + 1, ts)

    def _journal_tail(self, line: str, h: int, ts: datetime | None) -> _Parsed | None:
        """``host ident[pid]: msg`` from index ``h``."""
        c = line.find(": ", h)
        if c < 0:
            if not line.endswith(":"):
                return None
            c = len(line) - 1
        head = line[h:c]
        got = self._heads.get(head)
        if got is None:
            got = self._new_head(head)
        if not got[1]:
            return None
        return ts, got[0], got[1], line[c + 2:], c + 2

    def _new_head(self, head: str) -> tuple[int | None, str]:
        """``_journal_head`` of a head not seen yet, remembered (at most 4096, then forgotten)."""
        got = _journal_head(head)
        if len(self._heads) > 4096:
            self._heads.clear()
        self._heads[head] = got
        return got

    def _iso(self, s: str) -> datetime | None:
        if s == self._ts_key:
            return self._ts_val
        try:
            ts = _parse_iso_frac(s) if s.endswith("Z") or "." in s or "," in s else datetime.fromisoformat(s)
        except ValueError:
            return None
        self._ts_key, self._ts_val = s, ts
        return ts

    def _short_ts(self, key: str) -> datetime | None:
        mo = _MONTHS.get(key[:3])
        if mo is None:
            return None
        try:
            day = int(key[4:6])
            hh, mm, ss = int(key[7:9]), int(key[10:12]), int(key[13:15])
            us = 0
            if len(key) > 15 and key[15] == ".":
                frac = key[16:]
                us = int((frac + "000000")[:6]) if frac.isdigit() else 0
        except ValueError:
            return None
        if self._ref is None:
            self._ref = self._now().replace(tzinfo=None)
        ref = self._ref
        for year in (ref.year, ref.year - 1):
            try:
                dt = datetime(year, mo, day, hh, mm, ss, us)
            except ValueError:  # Feb 29 in a common year
                continue
            if dt - ref <= timedelta(days=1):
                return dt
        return None


_NOT_A_HEAD: tuple[int | None, str] = (None, "")


def _journal_head(head: str) -> tuple[int | None, str]:
    """``host ident[pid]`` -> (pid, ident); ``_NOT_A_HEAD`` (empty ident) when it is not one."""
    hs = head.find(" ")
    if hs <= 0:
        return _NOT_A_HEAD
    ident = head[hs + 1:]
    if not ident or " " in ident:
        return _NOT_A_HEAD
    pid: int | None = None
    if ident.endswith("]"):
        b = ident.rfind("[")
        num = ident[b + 1:-1]
        if b > 0 and num.isdigit() and len(num) < 20:
            pid = int(num)
            ident = ident[:b]
    return pid, ident


def _parse_iso_frac(s: str) -> datetime:
    """RFC 3339 with up to nanoseconds and ``Z`` (docker), ``,`` decimal mark, offsets ``+hhmm``."""
    s = s.replace(",", ".")
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    dot = s.find(".")
    if dot >= 0:
        end = dot + 1
        while end < len(s) and s[end].isdigit():
            end += 1
        frac = s[dot + 1:end]
        s = s[:dot + 1] + (frac + "000000")[:6] + s[end:]
    return datetime.fromisoformat(s)


# --------------------------------------------------------------------------------------------
# Whole inputs
# --------------------------------------------------------------------------------------------
_BLOCK = 4 << 20  # iter_records works through big inputs a few MiB at a time


def iter_records(data: bytes, shape: str | None = None, *, now: Callable[[], datetime] | None = None,
                 source: str | None = None, base_offset: int = 0) -> Iterator[LogRecord]:
    """One LogRecord per physical line of ``data`` (auto-detecting the shape when ``shape`` is
    None); see the module doc for the rules. Lazy: records are produced block by block."""
    sp = RecordSplitter(shape, now=now, source=source, base_offset=base_offset)
    if sp.shape is None:
        sp.shape = detect_shape(data[:HEAD_BYTES])
    view = memoryview(data)
    for start in range(0, len(data), _BLOCK):
        yield from sp._consume(bytes(view[start:start + _BLOCK]), final=False)
    yield from sp._consume(b"", final=True)
