"""``SshBackend``: a remote GPU host over one asyncssh connection (several channels on it).

- Connection: ``~/.ssh/config`` aliases and the agent are honoured (``ssh_config=[]`` keeps the
  user's file out, for tests); keepalives on; a connect timeout; strict host keys by default. An
  unknown or changed host key is refused (``ConnState.HOSTKEY_REFUSED``) with the offered key's
  fingerprint and how to trust it; ``trust_host_key()`` adds an *unknown* key on request. Drops are
  retried in the background with capped exponential backoff and jitter; authentication, host-key
  and configuration failures are not retried blindly (``retry()`` tries again on demand).
- ``follow_log``: batches of ``LogRecord``s, resumed after a drop without losing or repeating a
  line — journald cursors (``-o json``: ``__CURSOR``), byte offsets for files (``tail -F``
  semantics, rotation and truncation, in-band control lines), ``TS#n`` for ``docker logs``. Before
  following, the current boot's start is found: the unit's ``InvocationID`` (or its last
  ``Started`` line), a bounded scan back of the file for the last server start, the container's
  ``StartedAt``.
- ``gpu_stream``: one long-lived ``nvidia-smi --query-gpu … -lms N`` channel, filtered to the
  host's ``gpus``; the last good sample is repeated with ``stale=True`` while the host is slow or
  away; falls back to periodic one-shot queries when the stream keeps dying.
- No orphans: every follower runs under ``commands.guard`` and dies when its channel closes, even
  for root logins where sshd ignores signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import re
import signal
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import asyncssh

from kvtui import gpu as gpu_mod
from kvtui.config import HostConfig
from kvtui.engines.events import LogRecord
from kvtui.engines.shapes import journal_columns, journal_fields, parse_journal_json
from kvtui.engines.text import MAX_LINE_CHARS
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.hosts import commands as C
from kvtui.hosts.backend import BackendError, CommandResult, ConnState, ConnStatus, LogStart, RecordBlock
from kvtui.liveness import DOCKER_STATE_FORMAT, FRESH_SLACK_S, PidWatch, exit_record, parse_docker_state

READ_CHUNK: Final = 1 << 18
MAX_QUEUED_BATCHES: Final = 64  # per stream: at most this many chunks (of READ_CHUNK bytes) read ahead
MAX_BATCH_RECORDS: Final = 5000
SCAN_WINDOW_BYTES: Final = C.SCAN_WINDOW_BYTES
JOURNAL_FALLBACK_LINES: Final = 2000  # no InvocationID and no Started line: the last N entries

_DEFAULT: Any = object()
_PLUS_ONE: Final = (1).__add__
# The ciphers offered, in order, unless ~/.ssh/config says otherwise: AES-GCM first (with the CPU's
# AES instructions it costs asyncssh about 60 % of chacha20-poly1305's CPU per byte, measured here:
# ~3 vs ~5 ms per MB), then asyncssh's defaults (chacha20-poly1305, AES-CTR) for servers without it.
PREFERRED_CIPHERS: Final = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
_DEFAULT_CIPHERS: Final = tuple(asyncssh.encryption.get_default_encryption_algs())


class Backoff:
    """Capped exponential backoff with jitter: attempt ``n`` waits ``min(cap, initial * 2**n)``
    scaled by a random factor in ``[1 - jitter, 1]``; the first attempt after a reset waits
    ``first`` (0: reconnect at once after a drop)."""

    def __init__(self, initial: float = 0.5, cap: float = 30.0, *, first: float = 0.0, jitter: float = 0.5,
                 rng: random.Random | None = None) -> None:
        self.initial, self.cap, self.first, self.jitter = initial, cap, first, jitter
        self.rng = rng or random.Random()
        self.attempt = 0

    def next(self) -> float:
        n = self.attempt
        self.attempt += 1
        if n == 0:
            return self.first
        base = min(self.cap, self.initial * (2.0 ** (n - 1)))
        return base * (1.0 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.attempt = 0


class _Fatal(Exception):
    """A connection failure that retrying will not fix."""

    def __init__(self, status: ConnStatus) -> None:
        super().__init__(status.detail)
        self.status = status


class _Closed(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Record decoding
# ---------------------------------------------------------------------------------------------


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS]
    return text


_DOCKER_LINE_RE = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ?(.*)$", re.S)


def parse_docker_ts(stamp: str) -> datetime | None:
    """RFC 3339 with nanoseconds (``2026-03-04T09:12:00.123456789Z``) -> aware datetime (µs)."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", stamp)
    if not m:
        return None
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return datetime.fromisoformat(f"{m.group(1)}.{frac}{tz}")
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Followers: the command to (re)start a stream, and the bytes -> records state machine with the
# resume position. ``feed`` only advances the position for complete records; ``reset`` drops a
# partial line when a channel ends (it will be read again after the resume point).
# ---------------------------------------------------------------------------------------------


async def _run_answer(conn: asyncssh.SSHClientConnection, command: str, *, timeout: float) -> Any:
    """Run a command whose answer decides where a stream starts (the current boot's cursor, a
    file's offset, a container's start). A channel that closed without an exit status — the
    connection dropped mid-command — is an error, not an empty answer: the follower locates
    again on the next connection instead of falling back (to the last lines, a whole journal or
    a file's first byte)."""
    res = await conn.run(command, check=False, timeout=timeout)
    if res.exit_status is None and res.exit_signal is None:
        raise asyncssh.ConnectionLost("the connection dropped while locating where the stream starts")
    return res


class _Follower:
    source = "raw"
    note: str = ""  # a user-facing remark (rotation, truncation) for the status line

    def __init__(self, backend: SshBackend, start: LogStart, after_cursor: str | None) -> None:
        self.backend = backend
        self.start = start
        self.after_cursor = after_cursor
        self.located = False
        self._buf = b""

    async def command(self, conn: asyncssh.SSHClientConnection) -> str:
        raise NotImplementedError

    def feed(self, chunk: bytes) -> list[LogRecord]:
        raise NotImplementedError

    def feed_block(self, chunk: bytes) -> RecordBlock:
        """``feed`` as a ``RecordBlock`` (followers with a bulk fast path override this)."""
        return RecordBlock.of(self.feed(chunk))

    def reset(self) -> None:
        self._buf = b""

    async def after_feed(self, conn: asyncssh.SSHClientConnection) -> None:
        """Called after each chunk (on the live connection): a follower may ask the host
        something it needs for resuming."""

    async def ended(self, conn: asyncssh.SSHClientConnection) -> list[LogRecord]:
        """Called when the remote command ended by itself on a live connection: records to
        deliver (a container that stopped: the server's exit)."""
        return []

    def _lines(self, chunk: bytes) -> list[bytes]:
        data = self._buf + chunk
        parts = data.split(b"\n")
        self._buf = parts.pop()
        if len(self._buf) > 4 * MAX_LINE_CHARS:  # a runaway line: cut, keep the stream alive
            parts.append(self._buf)
            self._buf = b""
        return parts


class _JournalFollower(_Follower):
    source = "journal"

    def __init__(self, backend: SshBackend, start: LogStart, after_cursor: str | None) -> None:
        super().__init__(backend, start, after_cursor)
        self.unit = backend.host.unit or ""
        # where to (re)start: ("after", cursor) | ("cursor", cursor) | ("lines", n) | ("all", None)
        self.resume: tuple[str, str | None] = ("after", after_cursor) if after_cursor else ("all", None)
        self.invocation: str | None = None

    async def command(self, conn: asyncssh.SSHClientConnection) -> str:
        sudo = self.backend.host.sudo
        if not self.located:
            if self.after_cursor is None and self.start is LogStart.CURRENT_BOOT:
                res = await _run_answer(conn, C.journal_boot_start(self.unit, sudo=sudo), timeout=60)
                self.resume = self._parse_boot_start(str(res.stdout or ""))
            elif self.after_cursor is None:
                res = await _run_answer(conn, C.journal_last_cursor(self.unit, sudo=sudo), timeout=60)
                rec = parse_journal_json(str(res.stdout or "").strip().split("\n")[-1]) if res.stdout else None
                self.resume = ("after", rec.cursor) if rec and rec.cursor else ("all", None)
            self.located = True
        kind, cur = self.resume
        if kind == "after":
            return C.journal_follow(self.unit, after_cursor=cur, sudo=sudo)
        if kind == "cursor":
            return C.journal_follow(self.unit, cursor=cur, sudo=sudo)
        if kind == "lines":
            return C.journal_follow(self.unit, lines=int(cur or 0), sudo=sudo)
        return C.journal_follow(self.unit, sudo=sudo)

    def _parse_boot_start(self, out: str) -> tuple[str, str | None]:
        for line in out.splitlines():
            if line.startswith("invocation="):
                self.invocation = line.partition("=")[2].strip() or None
            elif line.startswith("{"):
                rec = parse_journal_json(line)
                if rec is not None and rec.cursor:
                    return ("cursor", rec.cursor)
        self.note = "current boot not found in the journal (no InvocationID, no Started line): from the last lines"
        return ("lines", str(JOURNAL_FALLBACK_LINES))

    def feed(self, chunk: bytes) -> list[LogRecord]:
        return self.feed_block(chunk).records()

    def feed_block(self, chunk: bytes) -> RecordBlock:
        fast = self._fast_block(chunk)
        if fast is not None:
            return fast
        lines = self._lines(chunk)
        objs = _json_objects(lines)
        if objs is None:  # not one JSON object per line: line by line
            return RecordBlock.of(self._feed_lines(lines))
        texts: list[str] = []
        tss: list[datetime | None] = []
        cursors: list[str | None] = []
        pids: list[int | None] = []
        idents: list[str | None] = []
        last: str | None = None
        for obj in objs:
            f = journal_fields(obj)
            if f is None:
                continue
            text, ts, cursor, pid, ident = f
            if "\n" in text or "\r" in text:
                # one record per physical line; the pieces of an entry share its cursor and are
                # always delivered together
                for piece in _PHYSICAL_RE.split(text):
                    if piece:
                        texts.append(piece)
                        tss.append(ts)
                        cursors.append(cursor)
                        pids.append(pid)
                        idents.append(ident)
            else:
                texts.append(text)
                tss.append(ts)
                cursors.append(cursor)
                pids.append(pid)
                idents.append(ident)
            if cursor:
                last = cursor
        if last is not None:
            self.resume = ("after", last)
        return RecordBlock(texts, cursors, "journal", tss, idents, pids)

    def _fast_block(self, chunk: bytes) -> RecordBlock | None:
        """The common case in bulk: a chunk of complete ``journalctl -o json`` lines, each exactly
        one object (``{…}`` joined by ``}\\n{``), every entry a plain one (``journal_columns``) with a
        one-line message. Decoded with one ``json.loads`` and C-level column maps; None when the
        chunk is not that (then the general path, which gives the same records)."""
        data = self._buf + chunk if self._buf else chunk
        end = data.rfind(b"\n")
        if end <= 0 or len(data) - end - 1 > 4 * MAX_LINE_CHARS:
            return None
        try:
            text = data[:end].decode("utf-8")
        except UnicodeDecodeError:
            return None
        lines = text.count("\n") + 1
        if text[:1] != "{" or text[-1:] != "}" or text.count("}\n{") != lines - 1:
            return None
        try:
            objs = json.loads("[" + text.replace("}\n{", "},{") + "]")
        except (ValueError, RecursionError):
            return None
        if not isinstance(objs, list) or len(objs) != lines:
            return None
        cols = journal_columns(objs)
        if cols is None:
            return None
        texts, tss, cursors, pids, idents = cols
        joined = "".join(texts)
        if "\n" in joined or "\r" in joined:  # multi-line messages: one record per physical line
            return None
        self._buf = data[end + 1 :]
        for cursor in reversed(cursors):
            if cursor:
                self.resume = ("after", cursor)
                break
        return RecordBlock(texts, cursors, "journal", tss, idents, pids)

    def _feed_lines(self, lines: list[bytes]) -> list[LogRecord]:
        out: list[LogRecord] = []
        for line in lines:
            if not line.strip():
                continue
            rec = parse_journal_json(line)
            if rec is None:
                continue
            if "\n" in rec.text or "\r" in rec.text:
                # one record per physical line; the pieces of an entry share its cursor and are
                # always delivered together
                out.extend(replace(rec, text=p) for p in _PHYSICAL_RE.split(rec.text) if p)
            else:
                out.append(rec)
            if rec.cursor:
                self.resume = ("after", rec.cursor)
        return out


_PHYSICAL_RE = re.compile(r"\r\n|\r|\n")


def _merge(a: RecordBlock, b: RecordBlock) -> RecordBlock:
    """One block of ``a``'s records then ``b``'s."""
    if a._records is not None or b._records is not None or a.source != b.source:
        return RecordBlock.of(a.records() + b.records())
    n, m = len(a.texts), len(b.texts)

    def col(x: list[Any] | None, y: list[Any] | None) -> list[Any] | None:
        if x is None and y is None:
            return None
        return (x if x is not None else [None] * n) + (y if y is not None else [None] * m)

    return RecordBlock(a.texts + b.texts, a.cursors + b.cursors, a.source, col(a.ts, b.ts), col(a.idents, b.idents),
                       col(a.pids, b.pids))


def _json_objects(lines: list[bytes]) -> list[object] | None:
    """The JSON objects of ``journalctl -o json`` lines decoded in one ``json.loads`` (blank lines
    and lines that are no JSON object skipped, as ``parse_journal_json`` would); None when the
    block does not decode that way (a bad line): then decode line by line."""
    kept: list[str] = []
    try:
        text = b"\n".join(lines).decode("utf-8")
    except UnicodeDecodeError:
        return None
    for line in text.split("\n"):
        line = line.strip(" \t\n\r\x0b\x0c")  # what bytes.strip() strips
        if line[:1] == "{" and line[-1:] == "}":
            kept.append(line)
    if not kept:
        return []
    try:
        objs = json.loads("[" + ",".join(kept) + "]")
    except (ValueError, RecursionError):
        return None
    if not isinstance(objs, list) or len(objs) != len(kept):
        return None
    return objs


class _FileFollower(_Follower):
    """Byte-exact: every record's cursor is the file offset right after its terminator."""

    source = "file"

    def __init__(self, backend: SshBackend, start: LogStart, after_cursor: str | None) -> None:
        super().__init__(backend, start, after_cursor)
        self.path = backend.host.log_file or ""
        self.offset = 0  # next byte of the file to read
        self.inode: int | None = None
        self.skip_partial = False  # the scan window began mid-line: drop up to the first newline
        self.want_inode = False  # tail followed a new file: learn its inode (to resume after a drop)
        # liveness: the pid file, watched on the host by the follow command itself (in-band lines)
        found = C.server_pid_file(backend.host.pid_file, backend.host.start_command, backend.host.stop_command)
        self.pid_file = found[0] if found else None
        self.watch = PidWatch(current_boot=start is LogStart.CURRENT_BOOT or after_cursor is not None)
        self.pending_exit: tuple[LogRecord, int] | None = None  # held until the log is read that far
        self.t_follow = time.monotonic()  # a process younger than the follow started after it
        if after_cursor is not None:
            off = after_cursor.partition(":")[0]
            self.offset = int(off) if off.isdigit() else 0
            self.located = True

    async def command(self, conn: asyncssh.SSHClientConnection) -> str:
        if not self.located:
            if self.start is LogStart.CURRENT_BOOT:
                res = await _run_answer(conn, C.file_scan_back(self.path, window=self.backend.scan_window),
                                        timeout=120)
                self._apply_scan(str(res.stdout or ""))
            else:
                res = await _run_answer(conn, C.file_stat(self.path), timeout=60)
                parts = str(res.stdout or "").split()
                if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    self.inode, self.offset = int(parts[0]), int(parts[1])
                else:
                    self.inode, self.offset = None, 0
            self.located = True
        return C.file_follow(self.path, offset=self.offset, inode=self.inode, pid_file=self.pid_file)

    def _apply_scan(self, out: str) -> None:
        lines = out.splitlines()
        if not lines or lines[0].strip() == "missing" or not lines[0].startswith("stat "):
            self.offset, self.inode = 0, None
            self.note = f"{self.path} does not exist yet: waiting for it"
            return
        _, ino, size, start = lines[0].split()[:4]
        self.inode, window_start = int(ino), int(start)
        matches: list[tuple[int, str]] = []
        for line in lines[1:]:
            rel, sep, text = line.partition(":")
            if sep and rel.isdigit():
                matches.append((window_start + int(rel), text))
        if not matches:
            self.offset = window_start
            self.skip_partial = window_start > 0
            if window_start > 0:
                self.note = f"no server start in the last {int(size) - window_start} bytes of {self.path}"
            return
        primary = [re.compile(p) for p in C.PRIMARY_START_PATTERNS]
        chosen = matches[-1]
        if not any(p.search(chosen[1]) for p in primary):
            # vLLM prints its version line right before the args line: start there
            for off, text in reversed(matches[:-1]):
                if chosen[0] - off > 8192:
                    break
                if any(p.search(text) for p in primary):
                    chosen = (off, text)
                    break
        self.offset = chosen[0]

    def feed(self, chunk: bytes) -> list[LogRecord]:
        return self.feed_block(chunk).records()

    def feed_block(self, chunk: bytes) -> RecordBlock:
        data = self._buf + chunk if self._buf else chunk
        if PID_MARK in data:
            data = self._pid_lines(data)
        block: RecordBlock | None = None
        if not self.skip_partial and b"\r" not in data and b"\x00" not in data and b"tail: " not in data:
            block = self._plain_block(data)
        if block is None:
            block = RecordBlock.of(self._feed_slow(data))
        if self.pending_exit is not None and self.offset >= self.pending_exit[1]:
            rec = self.pending_exit[0]
            self.pending_exit = None
            block = _merge(block, RecordBlock.of([rec])) if len(block) else RecordBlock.of([rec])
        return block

    def _pid_lines(self, data: bytes) -> bytes:
        """Take the pid watcher's lines (``\\0kvtui:pid PID STATE size=N``) out of the stream (they
        may land inside a log line tail wrote in pieces) and read them into the watch."""
        out: list[bytes] = []
        pos = 0
        while True:
            i = data.find(PID_MARK, pos)
            if i < 0:
                break
            j = data.find(b"\n", i)
            if j < 0:
                break  # incomplete: kept for the next chunk with what follows
            out.append(data[pos:i])
            self._pid_line(data[i + len(PID_MARK) : j].decode("ascii", "replace"))
            pos = j + 1
        out.append(data[pos:])
        return b"".join(out)

    def _pid_line(self, text: str) -> None:
        parts = text.split()
        if len(parts) < 2:
            return
        pid = int(parts[0]) if parts[0].isdigit() else None
        size = next((int(p[5:]) for p in parts[2:] if p.startswith("size=") and p[5:].isdigit()), 0)
        age = next((int(p[4:]) for p in parts[2:] if p.startswith("age=") and p[4:].lstrip("-").isdigit()), None)
        fresh = age is not None and age <= time.monotonic() - self.t_follow + FRESH_SLACK_S
        gone = self.watch.observe(pid, parts[1] == "alive", fresh=fresh)
        if gone is not None:
            rec = exit_record(gone.pid, at_start=gone.at_start, ts=datetime.now(), source="file")
            self.pending_exit = (rec, size)

    def _feed_slow(self, data: bytes) -> list[LogRecord]:
        lines = data.split(b"\n")
        rest = lines.pop()
        out: list[LogRecord] = []
        offset = self.offset
        for line in lines:
            if self.skip_partial or b"\r" in line or b"\x00" in line or b"tail: " in line:
                self.offset = offset
                pieces = line.split(b"\r")
                for piece in pieces:
                    self._piece(piece, 1, out)
                offset = self.offset
                continue
            offset += len(line) + 1  # the fast path: a plain line
            if line:
                out.append(LogRecord(_decode(line), None, str(offset), "file"))
        self.offset = offset
        if b"\r" in rest:  # tqdm redraws: every \r-terminated piece is complete now
            *done, rest = rest.split(b"\r")
            for piece in done:
                self._piece(piece, 1, out)
        if len(rest) > 4 * MAX_LINE_CHARS:  # a runaway line: cut it, keep the stream alive
            self._piece(rest, 0, out)
            rest = b""
        self._buf = rest
        return out

    def _plain_block(self, data: bytes) -> RecordBlock | None:
        """The records of a chunk of plain UTF-8 lines (no ``\\r``, no control or tail lines: the
        common case) as a block: one decode and one split for the chunk. None when it is not that."""
        end = data.rfind(b"\n")
        if end < 0 or len(data) - end - 1 > 4 * MAX_LINE_CHARS:
            return None
        body = data[:end]
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return None
        lines = text.split("\n")
        offset = self.offset
        if len(text) == len(body) and "" not in lines and max(map(len, lines)) <= MAX_LINE_CHARS:
            # ASCII, no empty line, none to cut (the common case): cursors in C, each the offset
            # after its line's newline
            ends = itertools.accumulate(map(_PLUS_ONE, map(len, lines)), initial=offset)
            cursors_c: list[str | None] = list(map(str, itertools.islice(ends, 1, None)))
            self.offset = offset + len(body) + 1
            self._buf = data[end + 1 :]
            return RecordBlock(lines, cursors_c, "file")
        texts: list[str] = []
        cursors: list[str | None] = []
        add_text, add_cursor = texts.append, cursors.append
        if len(text) == len(body):  # ASCII: characters are bytes
            for line in lines:
                offset += len(line) + 1
                if line:
                    add_text(line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS])
                    add_cursor(str(offset))
        else:
            for line in lines:
                offset += (len(line) if line.isascii() else len(line.encode("utf-8"))) + 1
                if line:
                    add_text(line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS])
                    add_cursor(str(offset))
        self.offset = offset
        self._buf = data[end + 1 :]
        return RecordBlock(texts, cursors, "file")

    def _piece(self, piece: bytes, term: int, out: list[LogRecord]) -> None:
        """One physical piece of the file followed by ``term`` terminator bytes (or a control
        line / tail notice, which are not file bytes)."""
        if CONTROL_MARK in piece:
            before, _, ctl = piece.partition(CONTROL_MARK)
            if before:
                self._piece(before, 0, out)
            self._control(ctl.decode("utf-8", "replace"))
            return
        if b"tail: " in piece:
            idx = piece.find(b"tail: ")
            notice = piece[idx:]
            if C.TAIL_NEW_FILE_RE.match(notice) or C.TAIL_TRUNCATED_RE.match(notice) or C.TAIL_OTHER_RE.match(notice):
                if idx > 0:
                    self._piece(piece[:idx], 0, out)
                self._tail_notice(notice)
                return
        self.offset += len(piece) + term
        if self.skip_partial:
            self.skip_partial = False
            return
        if not piece:
            return
        out.append(LogRecord(text=_decode(piece), cursor=str(self.offset), source="file"))

    def _control(self, ctl: str) -> None:
        if ctl.startswith("follow "):
            kv = dict(p.partition("=")[::2] for p in ctl.split()[1:])
            ino, off = kv.get("ino", ""), kv.get("off", "")
            self.inode = int(ino) if ino.isdigit() else None
            if off.isdigit():
                self.offset = int(off)
        elif ctl.startswith("rotated-lost"):
            self.offset, self.inode = 0, None
            self.note = f"{self.path} was rotated while disconnected and the old file is gone: lines may be missing"
        elif ctl.startswith("rotated"):
            self.offset, self.inode = 0, None
            self.note = f"{self.path} was rotated while disconnected (the old file's rest was read)"
        elif ctl.startswith("truncated"):
            self.offset = 0
            self.note = f"{self.path} was truncated while disconnected"

    async def after_feed(self, conn: asyncssh.SSHClientConnection) -> None:
        if not self.want_inode:
            return
        self.want_inode = False
        try:
            res = await _run_answer(conn, C.file_stat(self.path), timeout=30)
        except BaseException:
            self.want_inode = True  # asked again on the next connection
            raise
        parts = str(res.stdout or "").split()
        # (a truncation since then keeps the inode; two rotations within this round trip would
        # make it wrong, then a resume after a drop may start in the wrong place)
        if len(parts) == 2 and parts[0].isdigit():
            self.inode = int(parts[0])

    def _tail_notice(self, notice: bytes) -> None:
        if C.TAIL_NEW_FILE_RE.match(notice):
            self.want_inode = True
            self.offset, self.inode = 0, None
            self.note = f"{self.path} was replaced (rotated): following the new file"
        elif C.TAIL_TRUNCATED_RE.match(notice):
            self.offset = 0
            self.note = f"{self.path} was truncated: following from its start"
        else:
            self.note = notice.decode("utf-8", "replace")


CONTROL_MARK: Final = C.CONTROL_PREFIX
PID_MARK: Final = CONTROL_MARK + b"pid "


class _DockerFollower(_Follower):
    """Cursor ``TS#n``: the RFC 3339 timestamp of the last line and how many lines with exactly
    that timestamp were delivered (docker's ``--since`` is inclusive)."""

    source = "docker"

    def __init__(self, backend: SshBackend, start: LogStart, after_cursor: str | None) -> None:
        super().__init__(backend, start, after_cursor)
        self.container = backend.host.container or ""
        self.since: str | None = None
        self.seen_at_since = 0  # lines at exactly `since` already delivered
        self._skip = 0
        self._ts_key = ""
        self._ts_base: datetime | None = None
        # liveness: ``docker logs -f`` ends when the container stops; its state says how
        self.watch = PidWatch(current_boot=start is LogStart.CURRENT_BOOT or after_cursor is not None)
        self._held: LogRecord | None = None
        self.t_follow = time.monotonic()
        self._fresh_after: datetime | None = None
        if after_cursor:
            ts, _, n = after_cursor.partition("#")
            self.since, self.seen_at_since = ts, int(n) if n.isdigit() else 0
            self.located = True

    async def ended(self, conn: asyncssh.SSHClientConnection) -> list[LogRecord]:
        rec, self._held = self._held or await self._state(conn), None
        return [rec] if rec is not None else []

    async def _state(self, conn: asyncssh.SSHClientConnection) -> LogRecord | None:
        """Read the container's state into the watch; the exit record when it stopped."""
        res = await conn.run(C.docker_inspect(self.container, DOCKER_STATE_FORMAT, sudo=self.backend.host.sudo),
                             check=False, timeout=60)
        state = parse_docker_state(str(res.stdout or "")) if res.exit_status == 0 else None
        if state is None:
            return None
        started, running, detail = state
        started_at = parse_docker_ts(started)
        fresh = self._fresh_after is not None and started_at is not None and started_at >= self._fresh_after
        gone = self.watch.observe(started, running, fresh=fresh)
        if gone is None:
            return None
        return exit_record(None, detail or f"container {self.container} stopped", at_start=gone.at_start,
                           ts=datetime.now(UTC), source="docker")

    async def command(self, conn: asyncssh.SSHClientConnection) -> str:
        sudo = self.backend.host.sudo
        first = not self.located
        if not self.located:
            if self.start is LogStart.CURRENT_BOOT:
                res = await _run_answer(conn, C.docker_inspect(self.container, "{{.State.StartedAt}}", sudo=sudo),
                                        timeout=60)
                if res.exit_status != 0:
                    raise BackendError(f"docker inspect {self.container}: {str(res.stderr or '').strip()}")
                self.since = str(res.stdout or "").strip() or None
            else:
                res = await _run_answer(conn, C.remote_now_rfc3339(), timeout=60)
                self.since = str(res.stdout or "").strip() or None
                now = parse_docker_ts(self.since) if self.since else None
                if now is not None:  # the host's time when following began: a container started after is ours
                    self._fresh_after = now - timedelta(seconds=time.monotonic() - self.t_follow + FRESH_SLACK_S)
            self.seen_at_since = 0
            self.located = True
        if first and self.watch.first:
            self._held = await self._state(conn)  # already stopped: said after its lines, when the stream ends
        self._skip = self.seen_at_since
        if self.since and parse_docker_ts(self.since) is None:
            self.since = None
        return C.docker_logs_follow(self.container, since=self.since, tail=None if self.since else 0,
                                    sudo=sudo)

    def feed(self, chunk: bytes) -> list[LogRecord]:
        out: list[LogRecord] = []
        for line in self._lines(chunk):
            line = line.rstrip(b"\r")
            stamp_b, _, text = line.partition(b" ")
            quick = len(stamp_b) >= 20 and stamp_b[4:5] == b"-" and stamp_b[10:11] == b"T" and (
                stamp_b[-1:] == b"Z" or stamp_b[-1:].isdigit())
            if not quick:
                m = _DOCKER_LINE_RE.match(line)
                if m is None:
                    if line:  # a docker error line (merged stderr) — not a log line of the container
                        self.note = _decode(line)
                    continue
                stamp_b, text = m.group(1), m.group(2)
            stamp = stamp_b.decode("ascii", "replace")
            if self.since is not None and stamp == self.since and self._skip > 0:
                self._skip -= 1
                continue
            if self.since is not None and stamp < self.since and len(stamp) == len(self.since):
                continue
            if stamp == self.since:
                self.seen_at_since += 1
            else:
                self.since, self.seen_at_since = stamp, 1
            self._skip = 0
            out.append(LogRecord(text=_decode(text), ts=self._ts(stamp),
                                 cursor=f"{stamp}#{self.seen_at_since}", source="docker"))
        return out

    def _ts(self, stamp: str) -> datetime | None:
        """``parse_docker_ts`` with the whole-second part cached (lines come many per second)."""
        sec, rest = stamp[:19], stamp[19:]
        if rest.endswith("Z"):
            tz, frac = "Z", rest[1:-1] if rest.startswith(".") else ""
        else:
            tz, frac = rest[-6:], rest[1:-6] if rest.startswith(".") else ""
        key = sec + tz
        if key != self._ts_key:
            self._ts_key, self._ts_base = key, parse_docker_ts(key)
        if self._ts_base is None or (frac and not frac.isdigit()):
            return parse_docker_ts(stamp)
        return self._ts_base + timedelta(microseconds=int(frac[:6].ljust(6, "0")) if frac else 0)


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Stream:
    queue: asyncio.Queue[Any]  # log streams: RecordBlock | None; GPU streams: list[GpuSample] | None
    task: asyncio.Task[None] | None = None


class SshBackend:
    """One remote host over SSH (see the module docstring)."""

    def __init__(
        self,
        name: str,
        host: HostConfig,
        *,
        known_hosts: Any = _DEFAULT,
        ssh_config: Sequence[str] | None = None,
        clock: Callable[[], float] = time.time,
        connect_timeout: float = 15.0,
        keepalive_interval: float = 15.0,
        keepalive_count_max: int = 3,
        backoff: Backoff | None = None,
        scan_window: int = SCAN_WINDOW_BYTES,
        stale_after: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        if host.kind != "ssh" or not host.ssh:
            raise BackendError(f"{name}: not an ssh host (kind {host.kind})")
        self.name = name
        self.host = host
        self._known_hosts = known_hosts
        self._ssh_config = ssh_config
        self._clock = clock
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self.keepalive_count_max = keepalive_count_max
        self.backoff = backoff or Backoff()
        self.scan_window = scan_window
        self.stale_after = stale_after
        self._extra = dict(options or {})
        self._status = ConnStatus(ConnState.CONNECTING, self.host.target, strict_host_key=host.strict_host_key)
        self._listeners: list[Callable[[ConnStatus], None]] = []
        self._conn: asyncssh.SSHClientConnection | None = None
        self._generation = 0
        self._changed = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self._closed = False
        self._streams: set[_Stream] = set()
        self._procs: set[asyncssh.SSHClientProcess[bytes]] = set()
        self._offered_key: asyncssh.SSHKey | None = None
        self._ciphers_default: bool | None = None
        self._gpu_uuid_index: dict[str, int] = {}
        self.reconnects = 0
        self.last_connect_seconds: float | None = None
        self.login_user: str | None = None
        self.notes: list[str] = []

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> ConnStatus:
        return self._status

    def add_status_listener(self, callback: Callable[[ConnStatus], None]) -> None:
        """``callback(status)`` on every change (called on the event loop)."""
        self._listeners.append(callback)

    def _set_status(self, state: ConnState, detail: str = "", *, retry_in: float | None = None,
                    fingerprint: str | None = None) -> None:
        st = ConnStatus(state, detail, retry_in, fingerprint, self.host.strict_host_key)
        if st == self._status:
            return
        self._status = st
        for cb in list(self._listeners):
            with contextlib.suppress(Exception):
                cb(st)

    def _note(self, text: str) -> None:
        if text and (not self.notes or self.notes[-1] != text):
            self.notes.append(text)
            del self.notes[:-20]

    # -- connection ------------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        h = self.host
        kw: dict[str, Any] = {
            "connect_timeout": self.connect_timeout,
            "login_timeout": self.connect_timeout,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": self.keepalive_count_max,
        }
        if self._ssh_config is not None:
            kw["config"] = list(self._ssh_config)
        if h.port:
            kw["port"] = h.port
        if h.ssh_user:
            kw["username"] = h.ssh_user
        if h.identity_path:
            kw["client_keys"] = [str(h.identity_path)]
        if not h.strict_host_key:
            kw["known_hosts"] = None  # explicit in hosts.toml and shown in the UI
        elif self._known_hosts is not _DEFAULT:
            kw["known_hosts"] = self._known_hosts
        elif h.known_hosts_path:
            kw["known_hosts"] = str(h.known_hosts_path)
        if "encryption_algs" not in self._extra and self._default_ciphers():
            kw["encryption_algs"] = PREFERRED_CIPHERS
        kw.update(self._extra)
        return kw

    def _default_ciphers(self) -> bool:
        """True when nothing (``~/.ssh/config``'s ``Ciphers``) chose the ciphers for this host:
        then kvtui offers AES-GCM first (see ``PREFERRED_CIPHERS``). Cached per backend."""
        if self._ciphers_default is None:
            kw: dict[str, Any] = {}
            if self._ssh_config is not None:
                kw["config"] = list(self._ssh_config)
            try:
                opts = asyncssh.SSHClientConnectionOptions(host=self.host.ssh_host or "", **kw)
                self._ciphers_default = list(opts.encryption_algs) == list(_DEFAULT_CIPHERS)
            except Exception:  # a broken config is reported by the connection attempt itself
                self._ciphers_default = False
        return self._ciphers_default

    def _known_hosts_file(self) -> Path:
        if isinstance(self._known_hosts, str | Path):
            return Path(self._known_hosts)
        return self.host.known_hosts_path or Path.home() / ".ssh" / "known_hosts"

    async def _connect(self) -> asyncssh.SSHClientConnection:
        host = self.host.ssh_host or ""
        t0 = time.monotonic()
        try:
            conn = await asyncssh.connect(host, **self._connect_kwargs())
        except asyncssh.HostKeyNotVerifiable as exc:
            raise _Fatal(await self._hostkey_status(exc)) from exc
        except asyncssh.PermissionDenied as exc:
            raise _Fatal(ConnStatus(
                ConnState.AUTH_FAILED,
                f"{self.host.target}: authentication failed ({exc.reason}); check the user, identity_file "
                "or the agent (ssh-add -l), then retry",
                strict_host_key=self.host.strict_host_key)) from exc
        except (asyncssh.KeyImportError, asyncssh.ConfigParseError, FileNotFoundError, PermissionError,
                ValueError) as exc:
            raise _Fatal(ConnStatus(ConnState.FAILED, f"{self.host.target}: {exc}",
                                    strict_host_key=self.host.strict_host_key)) from exc
        self.last_connect_seconds = time.monotonic() - t0
        self.login_user = conn.get_extra_info("username")
        return conn

    def _resolved(self) -> tuple[str, int]:
        """The real host name and port after ``~/.ssh/config`` (``HostName``, ``Port``): what
        known_hosts entries are matched against."""
        alias = self.host.ssh_host or ""
        kw: dict[str, Any] = {}
        if self._ssh_config is not None:
            kw["config"] = list(self._ssh_config)
        if self.host.port:
            kw["port"] = self.host.port
        try:
            opts = asyncssh.SSHClientConnectionOptions(host=alias, **kw)
            return str(opts.host or alias), int(opts.port or 22)
        except Exception:  # a broken config is reported by the connection attempt itself
            return alias, self.host.port or 22

    async def _hostkey_status(self, exc: Exception) -> ConnStatus:
        host, port = self._resolved()
        fingerprint: str | None = None
        keytype = "host"
        try:
            kw: dict[str, Any] = {}
            if self._ssh_config is not None:
                kw["config"] = list(self._ssh_config)
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(self.host.ssh_host or host, self.host.port or (), **kw),
                timeout=self.connect_timeout)
            if key is not None:
                self._offered_key = key
                fingerprint = key.get_fingerprint("sha256")
                keytype = key.get_algorithm()
        except (OSError, asyncssh.Error, TimeoutError):
            pass
        kh = self._known_hosts_file()
        changed = False
        try:
            if kh.exists() and self._offered_key is not None:
                known = asyncssh.read_known_hosts(str(kh)).match(host, host, port)[0]
                changed = bool(known) and all(
                    k.public_data != self._offered_key.public_data for k in known)
        except (OSError, ValueError, asyncssh.Error):
            pass
        spec = host if port == 22 else f"[{host}]:{port}"
        fp = fingerprint or "(could not read it)"
        if changed:
            detail = (f"host key for {spec} CHANGED: {kh} has a different key. Offered {keytype} key {fp}. "
                      f"This may be an attack, or the host was reinstalled. If you know why, remove the old "
                      f"entry (ssh-keygen -R '{spec}' -f {kh}) and connect again to trust the new key.")
        else:
            detail = (f"host key for {spec} is not known ({kh}). Offered {keytype} key {fp}. "
                      f"Compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub); "
                      f"to trust it, accept it in kvtui or run: ssh-keyscan -p {port} {host} >> {kh}")
        del exc
        return ConnStatus(ConnState.HOSTKEY_REFUSED, detail, None, fingerprint, self.host.strict_host_key)

    async def trust_host_key(self) -> Path:
        """Append the refused host's offered key to its known_hosts file and connect again. Only
        for an *unknown* key: a changed key must be removed by the operator first."""
        st = self._status
        if st.state is not ConnState.HOSTKEY_REFUSED or self._offered_key is None:
            raise BackendError(f"{self.name}: no refused host key to trust")
        if "CHANGED" in st.detail:
            raise BackendError(f"{self.name}: the host key changed; remove the old entry first ({st.detail})")
        host, port = self._resolved()
        spec = host if port == 22 else f"[{host}]:{port}"
        kh = self._known_hosts_file()
        kh.parent.mkdir(parents=True, exist_ok=True)
        line = f"{spec} {self._offered_key.export_public_key().decode().strip()}\n"
        with kh.open("a") as f:
            f.write(line)
        await self.retry()
        return kh

    async def start(self) -> None:
        """The first connection attempt. Raises ``BackendError`` when it fails: ``status()`` then
        says ``RECONNECTING`` for a network failure (``start()`` may be called again; a stream
        started without it connects by itself, with backoff) or the fatal state (host key,
        authentication, configuration) that only the operator can fix. After a success, drops
        are retried in the background."""
        async with self._start_lock:
            await self._start_locked()

    async def _start_locked(self) -> None:
        if self._is_closed():
            raise BackendError(f"{self.name}: closed")
        if self._supervisor is not None:
            return
        self._set_status(ConnState.CONNECTING, self.host.target)
        try:
            conn = await self._connect()
        except _Fatal as exc:
            self._set_status(exc.status.state, exc.status.detail, fingerprint=exc.status.fingerprint)
            self._wake()
            raise BackendError(exc.status.detail) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            detail = _describe(exc)
            self._set_status(ConnState.RECONNECTING, detail)
            self._wake()
            raise BackendError(f"{self.host.target}: unreachable: {detail}") from None
        self._up(conn)
        self._supervisor = asyncio.create_task(self._supervise(conn))

    async def retry(self) -> None:
        """Try again now (after a refused host key was trusted, credentials fixed, …)."""
        if self._supervisor is not None and not self._supervisor.done():
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        self._supervisor = None
        self.backoff.reset()
        await self.start()

    def _up(self, conn: asyncssh.SSHClientConnection) -> None:
        self._conn = conn
        self._generation += 1
        if self._generation > 1:
            self.reconnects += 1
        self.backoff.reset()
        who = self.login_user or self.host.ssh_user or ""
        peer = conn.get_extra_info("peername")
        port = peer[1] if isinstance(peer, tuple) and len(peer) >= 2 else (self.host.port or 22)
        detail = f"{who}@{self.host.ssh_host}:{port}" if who else f"{self.host.ssh_host}:{port}"
        if who == "root":
            detail += " (as root)"
        self._set_status(ConnState.CONNECTED, detail)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _supervise(self, conn: asyncssh.SSHClientConnection | None) -> None:
        error: BaseException | None = None
        try:
            while not self._is_closed():
                if conn is None:
                    delay = self.backoff.next()
                    if error is not None or delay > 0:
                        self._set_status(ConnState.RECONNECTING, _describe(error), retry_in=delay)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    try:
                        conn = await self._connect()
                    except _Fatal as exc:
                        self._set_status(exc.status.state, exc.status.detail, fingerprint=exc.status.fingerprint)
                        self._wake()
                        return
                    except (OSError, asyncssh.Error, TimeoutError) as exc:
                        error = exc
                        continue
                    self._up(conn)
                await conn.wait_closed()
                if self._is_closed():
                    return
                self._conn = None
                conn = None
                error = ConnectionError("connection lost")
                self._set_status(ConnState.RECONNECTING, "connection lost", retry_in=0.0)
                self._wake()
        except asyncio.CancelledError:
            raise

    def _is_closed(self) -> bool:
        return self._closed

    def _fatal(self) -> bool:
        return self._status.state in (ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED, ConnState.FAILED)

    async def _connection(self, after_generation: int = 0, *, fail_fast: bool = False
                          ) -> tuple[asyncssh.SSHClientConnection, int]:
        """The live connection (newer than ``after_generation``), waiting while reconnecting.
        Streams wait through fatal states too (``retry()`` / ``trust_host_key()`` wake them);
        with ``fail_fast`` a fatal state raises ``BackendError``."""
        while True:
            if self._is_closed():
                raise _Closed
            conn = self._conn
            if conn is not None and self._generation > after_generation and not conn.is_closed():
                return conn, self._generation
            changed = self._changed
            if self._fatal():
                if fail_fast:
                    raise BackendError(self._status.detail)
            elif self._supervisor is None:
                try:
                    await self.start()
                except BackendError:
                    if self._fatal() or self._is_closed():
                        continue
                    if fail_fast:
                        raise
                    delay = self.backoff.next()
                    self._set_status(ConnState.RECONNECTING, self._status.detail, retry_in=delay)
                    if delay > 0:
                        await asyncio.sleep(delay)
                continue
            await changed.wait()

    async def close(self) -> None:
        """Stop every stream and channel, then the connection; the remote followers exit with
        their channels (guard)."""
        if self._is_closed():
            return
        self._closed = True
        for s in list(self._streams):
            if s.task is not None:
                s.task.cancel()
        for proc in list(self._procs):
            proc.close()
        for s in list(self._streams):
            if s.task is not None:
                with contextlib.suppress(BaseException):
                    await s.task
            with contextlib.suppress(asyncio.QueueFull):
                s.queue.put_nowait(None)
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(BaseException):
                await self._supervisor
        conn = self._conn
        self._conn = None
        if conn is not None:
            conn.close()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(conn.wait_closed(), 5)
        self._set_status(ConnState.CLOSED, "")
        self._wake()

    # -- one-shot commands ----------------------------------------------------------------------

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        """Run one shell command; waits (up to ``timeout``) while reconnecting."""
        try:
            conn, _ = await asyncio.wait_for(self._connection(fail_fast=True), timeout)
        except TimeoutError:
            raise BackendError(f"{self.name}: not connected ({self._status.state.value}: "
                               f"{self._status.detail})") from None
        except _Closed:
            raise BackendError(f"{self.name}: closed") from None
        try:
            res = await conn.run(command, input=input, timeout=timeout, check=False, encoding=None)
        except asyncssh.TimeoutError as exc:
            raise BackendError(f"{self.name}: timed out after {timeout:g} s: {command[:200]}") from exc
        except (asyncssh.Error, OSError) as exc:
            raise BackendError(f"{self.name}: {_describe(exc)} while running: {command[:200]}") from exc
        status = res.exit_status
        if status is None or status < 0:
            status = _signal_status(res.exit_signal)
        return CommandResult(command, int(status), _as_text(res.stdout), _as_text(res.stderr))

    # -- streams ---------------------------------------------------------------------------------

    def _follower(self, start: LogStart, after_cursor: str | None) -> _Follower:
        src = self.host.log_source
        if src == "file":
            return _FileFollower(self, start, after_cursor)
        if src == "docker":
            return _DockerFollower(self, start, after_cursor)
        return _JournalFollower(self, start, after_cursor)

    async def follow_log(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None
    ) -> AsyncGenerator[list[LogRecord], None]:
        async for block in self.follow_log_blocks(start, after_cursor):
            yield list(block.records())

    async def follow_log_blocks(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None
    ) -> AsyncGenerator[RecordBlock, None]:
        """``follow_log`` as ``RecordBlock``s (one per chunk read; what is queued is delivered
        together, up to ``MAX_BATCH_RECORDS`` records)."""
        follower = self._follower(start, after_cursor)
        stream = _Stream(asyncio.Queue(MAX_QUEUED_BATCHES))
        self._streams.add(stream)
        stream.task = asyncio.create_task(self._pump_log(follower, stream))
        try:
            while True:
                block = await stream.queue.get()
                if block is None:
                    return
                while len(block) < MAX_BATCH_RECORDS and not stream.queue.empty():
                    more = stream.queue.get_nowait()
                    if more is None:
                        if len(block):
                            yield block
                        return
                    block = _merge(block, more)
                yield block
        finally:
            self._streams.discard(stream)
            if stream.task is not None and not stream.task.done():
                stream.task.cancel()
                with contextlib.suppress(BaseException):
                    await stream.task

    async def _pump_log(self, follower: _Follower, stream: _Stream) -> None:
        generation = 0
        failures = Backoff(initial=0.5, cap=10.0, first=0.0, rng=self.backoff.rng)
        try:
            while not self._is_closed():
                try:
                    conn, generation = await self._connection(generation)
                except _Closed:
                    break
                lost = False
                try:
                    cmd = await follower.command(conn)
                    ok = await self._stream_once(conn, cmd, follower, stream)
                    if ok:
                        failures.reset()
                    if not conn.is_closed() and not self._is_closed():
                        gone = await follower.ended(conn)
                        if gone:
                            await stream.queue.put(RecordBlock.of(gone))
                except BackendError as exc:
                    self._note(str(exc))
                except (asyncssh.Error, OSError, asyncio.IncompleteReadError) as exc:
                    self._note(_describe(exc))
                    lost = conn.is_closed()
                follower.reset()
                if follower.note:
                    self._note(follower.note)
                    follower.note = ""
                if self._is_closed():
                    break
                if lost or conn.is_closed():
                    continue  # wait for a newer connection
                # the remote command ended by itself on a live connection: retry after a pause
                generation -= 1  # the same connection is fine
                await asyncio.sleep(failures.next() or 0.2)
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                if self._is_closed():
                    stream.queue.put_nowait(None)

    async def _stream_once(self, conn: asyncssh.SSHClientConnection, cmd: str, follower: _Follower,
                           stream: _Stream) -> bool:
        """Run one follower channel until it ends; True when it delivered something."""
        delivered = False
        async with conn.create_process(cmd, encoding=None) as proc:
            self._procs.add(proc)
            stderr_task = asyncio.create_task(_read_limited(proc.stderr, 4096))
            try:
                while True:
                    chunk = await proc.stdout.read(READ_CHUNK)
                    if not chunk:
                        break
                    block = follower.feed_block(chunk)
                    if block.texts:
                        delivered = True
                        await stream.queue.put(block)
                    await follower.after_feed(conn)
                    if follower.note:
                        self._note(follower.note)
                        follower.note = ""
            finally:
                self._procs.discard(proc)
                proc.close()
                err = b""
                with contextlib.suppress(BaseException):
                    err = await asyncio.wait_for(stderr_task, 1.0)
                if err.strip():
                    self._note(f"{self.name}: {_decode(err.strip()[-500:])}")
        return delivered

    async def gpu_stream(self, interval_s: float = 1.0) -> AsyncGenerator[list[GpuSample], None]:
        stale_after = self.stale_after if self.stale_after is not None else max(3 * interval_s, interval_s + 2.0)
        stream = _Stream(asyncio.Queue(64))
        self._streams.add(stream)
        stream.task = asyncio.create_task(self._pump_gpu(interval_s, stream))
        last: list[GpuSample] | None = None
        try:
            while True:
                try:
                    batch = await asyncio.wait_for(stream.queue.get(), stale_after)
                except TimeoutError:
                    if self._is_closed():
                        return
                    if last is not None:
                        yield gpu_mod.mark_stale(last)
                    continue
                if batch is None:
                    return
                last = batch
                yield batch
        finally:
            self._streams.discard(stream)
            if stream.task is not None and not stream.task.done():
                stream.task.cancel()
                with contextlib.suppress(BaseException):
                    await stream.task

    def _select(self, samples: list[GpuSample]) -> list[GpuSample]:
        for s in samples:
            if s.uuid:
                self._gpu_uuid_index[s.uuid.upper()] = s.index
        return gpu_mod.select_gpus(samples, self.host.gpus)

    async def _pump_gpu(self, interval_s: float, stream: _Stream) -> None:
        generation = 0
        quick_deaths = 0
        interval_ms = max(50, int(interval_s * 1000))
        try:
            while not self._is_closed():
                try:
                    conn, generation = await self._connection(generation)
                except _Closed:
                    break
                try:
                    # one immediate reading (first paint, and the GPU count for grouping ticks)
                    res = await conn.run(C.nvidia_smi_query_gpu(gpu_mod.QUERY_GPU_FIELDS), check=False,
                                         timeout=max(10.0, 5 * interval_s), encoding=None)
                    first = gpu_mod.parse_query_gpu_csv(_as_text(res.stdout), self._clock())
                    if res.exit_status != 0 or not first:
                        msg = _as_text(res.stderr).strip() or _as_text(res.stdout).strip() or "no output"
                        self._note(f"{self.name}: nvidia-smi: {msg[:300]}")
                        await asyncio.sleep(max(interval_s, 5.0))
                        generation -= 1
                        continue
                    await stream.queue.put(self._select(first))
                    if quick_deaths >= 2:  # the -lms stream keeps dying: sample with one-shots
                        await self._poll_gpu(conn, interval_s, stream)
                    else:
                        t0 = time.monotonic()
                        await self._stream_gpu(conn, interval_ms, len(first), stream)
                        if not conn.is_closed():
                            quick = time.monotonic() - t0 < 3 * interval_s
                            quick_deaths = quick_deaths + 1 if quick else 0
                except (asyncssh.Error, OSError, asyncio.IncompleteReadError) as exc:
                    self._note(_describe(exc))
                if self._is_closed():
                    break
                if not conn.is_closed():
                    generation -= 1
                    await asyncio.sleep(interval_s)
        finally:
            if self._is_closed():
                with contextlib.suppress(asyncio.QueueFull):
                    stream.queue.put_nowait(None)

    async def _stream_gpu(self, conn: asyncssh.SSHClientConnection, interval_ms: int, count: int,
                          stream: _Stream) -> None:
        ticks = gpu_mod.QueryGpuTicks(expected=count)
        async with conn.create_process(C.nvidia_smi_query_gpu(gpu_mod.QUERY_GPU_FIELDS, interval_ms=interval_ms),
                                       encoding=None) as proc:
            self._procs.add(proc)
            buf = b""
            try:
                while True:
                    chunk = await proc.stdout.read(READ_CHUNK)
                    if not chunk:
                        break
                    buf += chunk
                    lines = buf.split(b"\n")
                    buf = lines.pop()[-65536:]
                    now = self._clock()
                    for line in lines:
                        done = ticks.feed(_decode(line), now)
                        if done:
                            await self._put_latest(stream, self._select(done))
            finally:
                self._procs.discard(proc)
                proc.close()

    async def _poll_gpu(self, conn: asyncssh.SSHClientConnection, interval_s: float, stream: _Stream) -> None:
        while not self._is_closed() and not conn.is_closed():
            await asyncio.sleep(interval_s)
            res = await conn.run(C.nvidia_smi_query_gpu(gpu_mod.QUERY_GPU_FIELDS), check=False,
                                 timeout=max(10.0, 5 * interval_s), encoding=None)
            samples = gpu_mod.parse_query_gpu_csv(_as_text(res.stdout), self._clock())
            if samples:
                await self._put_latest(stream, self._select(samples))

    async def _put_latest(self, stream: _Stream, batch: list[GpuSample]) -> None:
        """GPU samples are state, not history: a slow consumer gets the newest, not a backlog."""
        while stream.queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                stream.queue.get_nowait()
        await stream.queue.put(batch)

    async def gpu_processes(self) -> list[GpuProcess]:
        res = await self.run(C.nvidia_smi_compute_apps(gpu_mod.QUERY_APPS_FIELDS), timeout=30)
        if not res.ok:
            raise BackendError(f"{self.name}: nvidia-smi --query-compute-apps failed: "
                               f"{(res.stderr or res.stdout).strip()[:300]}")
        procs = gpu_mod.parse_compute_apps_csv(res.stdout)
        if not self._gpu_uuid_index:
            q = await self.run(C.nvidia_smi_query_gpu(("index", "uuid")), timeout=30)
            for line in q.stdout.splitlines():
                num, _, uuid = line.partition(",")
                if num.strip().isdigit() and uuid.strip():
                    self._gpu_uuid_index[uuid.strip().upper()] = int(num)
        out: list[GpuProcess] = []
        wanted = None if self.host.gpus is None else set(self.host.gpus)
        for p in procs:
            idx = p.gpu_index
            if idx is None and p.gpu_uuid:
                idx = self._gpu_uuid_index.get(p.gpu_uuid.upper())
            if wanted is not None and (idx is None or idx not in wanted):
                continue
            out.append(GpuProcess(pid=p.pid, used_mib=p.used_mib, gpu_index=idx, gpu_uuid=p.gpu_uuid, name=p.name))
        return out

    async def server_pids(self) -> set[int]:
        h = self.host
        if h.unit:
            cmd = C.server_pids_unit(h.unit, sudo=h.sudo)
        elif h.container:
            cmd = C.server_pids_container(h.container, sudo=h.sudo)
        else:
            found = C.server_pid_file(h.pid_file, h.start_command, h.stop_command)
            cmd = C.server_pids_pidfile(found[0]) if found else C.server_pids_by_pattern()
        res = await self.run(cmd, timeout=30)
        return C.parse_server_pids(res.stdout)


async def _read_limited(reader: asyncssh.SSHReader[bytes], limit: int) -> bytes:
    """Drain a channel's stderr, keeping the last ``limit`` bytes."""
    kept = b""
    with contextlib.suppress(asyncssh.Error, OSError):
        while True:
            chunk = await reader.read(READ_CHUNK)
            if not chunk:
                break
            kept = (kept + chunk)[-limit:]
    return kept


def _signal_status(exit_signal: object) -> int:
    """A remote process killed by a signal: ``128 + signum`` like a shell; -1 when unknown."""
    if isinstance(exit_signal, tuple) and exit_signal and isinstance(exit_signal[0], str):
        try:
            return 128 + int(signal.Signals["SIG" + exit_signal[0]])
        except KeyError:
            pass
    return -1


def _as_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    if isinstance(exc, asyncssh.DisconnectError):
        return f"disconnected: {exc.reason}" if exc.reason else "disconnected"
    if isinstance(exc, asyncssh.ConnectionLost):
        return "connection lost"
    if isinstance(exc, TimeoutError):
        return "timed out connecting"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__
