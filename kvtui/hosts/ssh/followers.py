"""The remote log streams of an SSH host: for each source (the unit's journal, a log file, a container's
log) the command that (re)starts it after the last cursor seen and the state machine that turns its
bytes into records — so a reconnect neither loses nor repeats a line."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

import asyncssh

from kvtui.engines.events import LogRecord
from kvtui.engines.shapes import journal_columns, journal_fields, parse_journal_json
from kvtui.engines.source_records import command_record, gap_record, gap_where, start_missing_record
from kvtui.engines.text import MAX_LINE_CHARS
from kvtui.hosts import shellcmd as C
from kvtui.hosts.backend import BackendError, LogStart, RecordBlock
from kvtui.hosts.dockerlog import CatchUp, parse_docker_ts
from kvtui.hosts.journal import JournalUptime, missing_records, parse_boot_start, parse_main_cmdline, split_controls
from kvtui.liveness import DOCKER_STATE_FORMAT, FRESH_SLACK_S, PidWatch, exit_record, parse_docker_state

if TYPE_CHECKING:
    from kvtui.hosts.ssh.backend import SshBackend

READ_CHUNK: Final = 1 << 18


MAX_QUEUED_BATCHES: Final = 64  # per stream: at most this many chunks (of READ_CHUNK bytes) read ahead


MAX_BATCH_RECORDS: Final = 5000


SCAN_WINDOW_BYTES: Final = C.SCAN_WINDOW_BYTES


JOURNAL_FALLBACK_LINES: Final = 2000  # no InvocationID and no Started line: the last N entries


_PLUS_ONE: Final = (1).__add__


class _Closed(Exception):
    pass


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS]
    return text


_DOCKER_LINE_RE = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ?(.*)$", re.S)


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
    restart: bool = False  # the follower wants its command started again now (``_pump_log``)

    def __init__(self, backend: SshBackend, start: LogStart, after_cursor: str | None,
                 began: float | None = None) -> None:
        self.backend = backend
        self.start = start
        self.after_cursor = after_cursor
        self.located = False
        self._buf = b""
        # when following began (``time.monotonic()``): the caller's, taken before it connected,
        # else now; a server process younger than that (+ ``FRESH_SLACK_S``) started after it
        self.t_follow = began if began is not None else time.monotonic()

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
    """The unit's journal. The current boot of a unit up for days is read in constant time
    (``kvtui.hosts.journal``): its startup part whole, one gap record, the recent tail, then
    ``-f``; a boot whose start was vacuumed from the journal: ``StartMissing`` and the running
    server's command line, then the tail."""

    source = "journal"

    def __init__(self, backend: SshBackend, start: LogStart, after_cursor: str | None,
                 began: float | None = None) -> None:
        super().__init__(backend, start, after_cursor, began)
        self.unit = backend.host.unit or ""
        # where to (re)start: ("after", cursor) | ("cursor", cursor) | ("lines", n) | ("all", None)
        self.resume: tuple[str, str | None] = ("after", after_cursor) if after_cursor else ("all", None)
        self.invocation: str | None = None
        self.plan: JournalUptime | None = None  # the constant-time read of the current boot, until it follows
        self.start_cursor: str | None = None
        self.pending: list[LogRecord] = []  # kvtui's own records to deliver first

    async def command(self, conn: asyncssh.SSHClientConnection) -> str:
        sudo = self.backend.host.sudo
        if not self.located:
            if self.after_cursor is None and self.start is LogStart.CURRENT_BOOT:
                res = await _run_answer(conn, C.journal_boot_start(self.unit, sudo=sudo), timeout=60)
                self.resume = await self._locate(conn, str(res.stdout or ""))
            elif self.after_cursor is None:
                res = await _run_answer(conn, C.journal_last_cursor(self.unit, sudo=sudo), timeout=60)
                rec = parse_journal_json(str(res.stdout or "").strip().split("\n")[-1]) if res.stdout else None
                self.resume = ("after", rec.cursor) if rec and rec.cursor else ("all", None)
            self.located = True
        kind, cur = self.resume
        if self.plan is not None and self.plan.phase != "follow" and self.start_cursor is not None:
            last = cur if kind == "after" else None
            return C.guard(C.sh_c(self.plan.command(self.unit, self.start_cursor, last, sudo=sudo)))
        if kind == "after":
            return C.journal_follow(self.unit, after_cursor=cur, sudo=sudo)
        if kind == "cursor":
            return C.journal_follow(self.unit, cursor=cur, sudo=sudo)
        if kind == "lines":
            return C.journal_follow(self.unit, lines=int(cur or 0), sudo=sudo)
        return C.journal_follow(self.unit, sudo=sudo)

    async def _locate(self, conn: asyncssh.SSHClientConnection, out: str) -> tuple[str, str | None]:
        found = parse_boot_start(out)
        self.invocation = found.invocation
        if found.cursor is None:
            self.note = "current boot not found in the journal (no InvocationID, no Started line): from the last lines"
            return ("lines", str(JOURNAL_FALLBACK_LINES))
        reason = found.start_missing()
        if reason is not None:
            res = await _run_answer(conn, C.journal_main_cmdline(self.unit, sudo=self.backend.host.sudo), timeout=30)
            pid, argv = parse_main_cmdline(str(res.stdout or ""))
            self.pending = missing_records(reason, pid, argv)
            return ("lines", str(C.JOURNAL_TAIL_LINES))
        self.plan = JournalUptime()
        self.start_cursor = found.cursor
        return ("cursor", found.cursor)

    def feed(self, chunk: bytes) -> list[LogRecord]:
        return self.feed_block(chunk).records()

    def feed_block(self, chunk: bytes) -> RecordBlock:
        block = self._feed_plan(chunk) if self.plan is not None else self._feed_json(chunk)
        if self.pending:
            first, self.pending = RecordBlock.of(self.pending), []
            return _merge(first, block) if len(block) else first
        return block

    def _feed_plan(self, chunk: bytes) -> RecordBlock:
        """A chunk of ``journal_uptime``'s output: JSON lines and its control lines."""
        assert self.plan is not None
        data = self._buf + chunk if self._buf else chunk
        if CONTROL_MARK not in data and self.plan.phase == "follow":
            return self._feed_json(chunk)
        self._buf = b""
        parts, rest = split_controls(data)
        out: RecordBlock | None = None
        for part in parts:
            if isinstance(part, str):
                got = RecordBlock.of(self.plan.control(part))
                if self.plan.tail_cursor is not None and self.plan.phase == "follow":
                    self.resume = ("cursor", self.plan.tail_cursor)  # until the tail's first entry comes
            else:
                startup = self.plan.phase == "startup"
                got = self._feed_json(part)
                if startup:
                    self.plan.saw(got.texts, len(part))
            if len(got):
                out = got if out is None else _merge(out, got)
        if rest:
            self._buf = self._buf + rest
        return out if out is not None else RecordBlock([], [], "journal")

    def _feed_json(self, chunk: bytes) -> RecordBlock:
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


_STAMP_RE: Final = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)")
_TAIL_KEEP: Final = 256  # bytes of the followed file kept before the offset (copytruncate's proof)


def _line_time(text: str) -> datetime | None:
    """The time a log line starts with (``[2026-02-09 14:38:46]``, ISO), when it has one."""
    m = _STAMP_RE.search(text)
    if m is None:
        return None
    try:
        return datetime.fromisoformat(f"{m.group(1)} {m.group(2)}")
    except ValueError:
        return None


@dataclass(slots=True)
class _Step:
    """One step of a file follower's plan before it follows the file (issue 21): ``part`` the bytes
    [a, b) of ``path`` read whole, ``gap`` the lines of [a, b) (b None: to the end) counted on the
    host and said as one record, ``mark`` records of kvtui's own said at that place."""

    kind: str
    path: str
    gz: bool = False
    a: int = 0
    b: int | None = None
    records: tuple[LogRecord, ...] = ()


class _FileFollower(_Follower):
    """Byte-exact: every record's cursor is the file offset right after its terminator.

    ``CURRENT_BOOT`` on a log that has grown for days (issue 21): ``file_locate`` finds the last
    server start however far back (in the file, else in its rotated copies), and the follower
    reads a *plan* before following: the startup part whole (start → ready line + a margin), one
    gap record per file range it skips (lines counted on the host), then the recent tail — or,
    when the start is gone everywhere, kvtui's own ``start_missing`` and ``command`` records (the
    running server's ``/proc/PID/cmdline``) before the tail. Lines of a rotated copy carry no
    cursor (their offsets are another file's): resuming never depends on them."""

    source = "file"

    def __init__(self, backend: SshBackend, start: LogStart, after_cursor: str | None,
                 began: float | None = None) -> None:
        super().__init__(backend, start, after_cursor, began)
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
        # the plan read before following (``_apply_locate``); ``step``: the first step not done
        self.plan: list[_Step] = []
        self.step = 0
        self.in_part: int | None = None  # the part being read (resume inside it at ``offset``)
        self.tail_at = 0  # where following the file begins once the plan is read
        self.cursorless = False  # reading a rotated copy: its offsets are not this file's
        # tail said the file was replaced / truncated: the rest of this channel is dropped and the
        # follower starts again (the old file's rest by inode, or copytruncate's copy, first)
        self.restart = False
        self._dropping = False
        self._truncated = False
        self._replaced = False
        self._tail = b""  # the last bytes of the file before ``offset`` (to recognise its copy)
        if after_cursor is not None:
            off = after_cursor.partition(":")[0]
            self.offset = int(off) if off.isdigit() else 0
            self.located = True

    async def command(self, conn: asyncssh.SSHClientConnection) -> str:
        if not self.located:
            if self.start is LogStart.CURRENT_BOOT:
                res = await _run_answer(conn, C.file_locate(self.path, pid_file=self.pid_file,
                                                            recent=self.backend.scan_window), timeout=120)
                self._apply_locate(str(res.stdout or ""))
            else:
                res = await _run_answer(conn, C.file_stat(self.path), timeout=60)
                parts = str(res.stdout or "").split()
                if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    self.inode, self.offset = int(parts[0]), int(parts[1])
                else:
                    self.inode, self.offset = None, 0
            self.located = True
        self._dropping = self.restart = False
        if self.step < len(self.plan):
            steps = [(s.kind, s.path, s.gz, s.a, s.b) for s in self.plan]
            if self.in_part == self.step:  # dropped inside a part: on from where it was
                kind, path, gz, _a, b = steps[self.step]
                steps[self.step] = (kind, path, gz, self.offset, b)
            return C.file_follow(self.path, offset=self.tail_at, inode=self.inode, pid_file=self.pid_file,
                                 plan=steps, plan_from=self.step)
        truncated, self._truncated = self._truncated, False
        copy = None
        if truncated and self._tail and len(self._tail) <= self.offset:
            copy = (len(self._tail), hashlib.md5(self._tail, usedforsecurity=False).hexdigest())
        return C.file_follow(self.path, offset=self.offset, inode=self.inode, pid_file=self.pid_file,
                             truncated=truncated, copy_tail=copy)

    def _apply_locate(self, out: str) -> None:
        """Read ``file_locate``'s answer into where to start: the plan, or (a start whose boot
        reaches the tail) the start itself."""
        lines = out.splitlines()
        if not lines or lines[0].strip() == "missing" or not lines[0].startswith("stat "):
            self.offset, self.inode = 0, None
            self.note = f"{self.path} does not exist yet: waiting for it"
            return
        _, ino, size_s = lines[0].split()[:3]
        self.inode, size = int(ino), int(size_s)
        matches: list[tuple[int, str]] = []
        sibs: list[str] = []
        found_in: tuple[str, bool, int] | None = None
        ready = tail = None
        pid: int | None = None
        since = ""
        argv: list[str] = []
        serves = 0  # serving lines in the recent tail (asked only without a start)
        for line in lines[1:]:
            key, _, rest = line.partition(" ")
            if key == "serves" and rest.strip().isdigit():
                serves = int(rest)
            elif key == "m":
                off, _, text = rest.partition(" ")
                if off.isdigit():
                    matches.append((int(off), text))
            elif key == "sibs":
                sibs = rest.split()
            elif key == "in":
                parts = rest.split()
                if len(parts) == 3 and parts[2].isdigit():
                    found_in = (parts[0], parts[1] == "1", int(parts[2]))
            elif key == "ready" and rest.strip().isdigit():
                ready = int(rest)
            elif key == "tail" and rest.strip().isdigit():
                tail = int(rest)
            elif key == "pid":
                p, _, since = rest.partition(" ")
                pid = int(p) if p.isdigit() else None
                since = " ".join(since.split())
            elif key == "cmd":
                try:
                    raw = base64.b64decode(rest.strip(), validate=False)
                except ValueError:
                    raw = b""
                argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        tail = size if tail is None else min(tail, size)
        name = os.path.basename(self.path) or self.path
        if not matches:
            self._start_missing(name, sibs, tail, pid, since, argv if serves else [], serving=serves > 0)
            return
        start = self._chosen_start(matches)
        end = ready if ready is not None else size
        if found_in is None:
            if end >= tail:  # the boot reaches the tail: read it all from its start, as ever
                self.offset = start
                return
            self.plan = [_Step("part", self.path, False, start, end), _Step("gap", self.path, False, end, tail)]
            self.tail_at = tail
            return
        suffix, gz, sib_size = found_in
        sib = self.path + suffix
        self.plan = [_Step("part", sib, gz, start, min(end, sib_size))]
        if end < sib_size:
            self.plan.append(_Step("gap", sib, gz, end, sib_size))
        newer = sibs[: sibs.index(suffix)] if suffix in sibs else []
        for x in reversed(newer):  # the copies rotated after it, oldest first: whole gaps
            self.plan.append(_Step("gap", self.path + x, x.endswith(".gz"), 0, None))
        if tail > 0:
            self.plan.append(_Step("gap", self.path, False, 0, tail))
        self.tail_at = tail
        self.note = f"the server's start is in {os.path.basename(sib)} (rotated): its startup part was read from there"

    @staticmethod
    def _chosen_start(matches: list[tuple[int, str]]) -> int:
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
        return chosen[0]

    def _start_missing(self, name: str, sibs: list[str], tail: int, pid: int | None, since: str,
                       argv: list[str], *, serving: bool = True) -> None:
        """No start in the file or its rotated copies: with a running server whose recent lines
        serve, say so (the boot serves) and give its command line; then the tail, after one gap for
        what is skipped. A server whose log does not serve yet is starting: its start line is yet
        to be written (the tracker opens the boot when it comes)."""
        where = f"{name} or its rotated copies ({', '.join(name + x for x in sibs)})" if sibs else name
        self.tail_at = tail
        if not serving:
            self.note = f"no server start in {where} yet, and its recent lines do not serve: following"
        elif argv:
            reason = f"not in {where}" + (f"; the server has run since {since}" if since else "")
            self.plan = [_Step("mark", self.path, records=(
                start_missing_record(reason, source="file"), command_record(argv, pid, source="file")))]
            self.note = (f"no server start in {where}: the running server's command line (pid {pid}) "
                         "and the recent tail")
        else:
            self.note = f"no server start in {where} and no running server found: the recent tail"
        if tail > 0:
            self.plan.append(_Step("gap", self.path, False, 0, tail))
        if not self.plan:
            self.offset = tail

    def feed(self, chunk: bytes) -> list[LogRecord]:
        return self.feed_block(chunk).records()

    def feed_block(self, chunk: bytes) -> RecordBlock:
        if self._dropping:  # tail said replaced / truncated: this channel's rest is read again
            return RecordBlock([], [], "file")
        data = self._buf + chunk if self._buf else chunk
        if PID_MARK in data:
            data = self._pid_lines(data)
        block: RecordBlock | None = None
        if not self.skip_partial and b"\r" not in data and b"\x00" not in data and b"tail: " not in data:
            block = self._plain_block(data)
        if block is None:
            block = RecordBlock.of(self._feed_slow(data))
        if (self.pending_exit is not None and self.offset >= self.pending_exit[1] and not self.cursorless
                and self.step >= len(self.plan)):
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

    def _cursor(self, offset: int) -> str | None:
        return None if self.cursorless else str(offset)

    def _keep(self, data: bytes) -> None:
        """``data`` were the file's bytes just before ``offset``: keep the last of them."""
        self._tail = (self._tail + data[-_TAIL_KEEP:])[-_TAIL_KEEP:]

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
                    if self._dropping:
                        self._buf = b""
                        return out
                if self.offset - offset == len(line) + 1:  # all file bytes (no control line, no notice)
                    self._keep(line + b"\n")
                offset = self.offset
                continue
            offset += len(line) + 1  # the fast path: a plain line
            if line:
                out.append(LogRecord(_decode(line), None, self._cursor(offset), "file"))
            self._keep(line + b"\n")
        self.offset = offset
        if b"\r" in rest:  # tqdm redraws: every \r-terminated piece is complete now
            *done, rest = rest.split(b"\r")
            for piece in done:
                self._piece(piece, 1, out)
                self._keep(piece + b"\r")
        if len(rest) > 4 * MAX_LINE_CHARS:  # a runaway line: cut it, keep the stream alive
            self._piece(rest, 0, out)
            self._keep(rest)
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
        self._keep(data[max(0, end + 1 - _TAIL_KEEP) : end + 1])
        if len(text) == len(body) and "" not in lines and max(map(len, lines)) <= MAX_LINE_CHARS:
            # ASCII, no empty line, none to cut (the common case): cursors in C, each the offset
            # after its line's newline
            self.offset = offset + len(body) + 1
            self._buf = data[end + 1 :]
            if self.cursorless:
                return RecordBlock(lines, [None] * len(lines), "file")
            ends = itertools.accumulate(map(_PLUS_ONE, map(len, lines)), initial=offset)
            cursors_c: list[str | None] = list(map(str, itertools.islice(ends, 1, None)))
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
        if self.cursorless:
            cursors = [None] * len(cursors)
        return RecordBlock(texts, cursors, "file")

    def _piece(self, piece: bytes, term: int, out: list[LogRecord]) -> None:
        """One physical piece of the file followed by ``term`` terminator bytes (or a control
        line / tail notice, which are not file bytes)."""
        if CONTROL_MARK in piece:
            before, _, ctl = piece.partition(CONTROL_MARK)
            if before:
                self._piece(before, 0, out)
            self._control(ctl.decode("utf-8", "replace"), out)
            return
        if b"tail: " in piece:
            idx = piece.find(b"tail: ")
            notice = piece[idx:]
            if C.TAIL_NEW_FILE_RE.match(notice) or C.TAIL_TRUNCATED_RE.match(notice) or C.TAIL_OTHER_RE.match(notice):
                if idx > 0:
                    self._piece(piece[:idx], 0, out)
                    self._keep(piece[:idx])
                self._tail_notice(notice)
                return
        self.offset += len(piece) + term
        if self.skip_partial:
            self.skip_partial = False
            return
        if not piece:
            return
        out.append(LogRecord(text=_decode(piece), cursor=self._cursor(self.offset), source="file"))

    def _control(self, ctl: str, out: list[LogRecord]) -> None:
        if ctl.startswith("follow "):
            kv = dict(p.partition("=")[::2] for p in ctl.split()[1:])
            ino, off = kv.get("ino", ""), kv.get("off", "")
            self.inode = int(ino) if ino.isdigit() else None
            if self.cursorless or not off.isdigit() or int(off) != self.offset:
                self._tail = b""
            if off.isdigit():
                self.offset = int(off)
            self.step, self.in_part, self.cursorless = len(self.plan), None, False
        elif ctl.startswith("seg "):
            self._plan_step(ctl.split()[1:], out)
        elif ctl.startswith("gap "):
            self._gap(ctl[4:], out)
        elif ctl.startswith("copied"):
            self.offset, self._tail = 0, b""
            self.note = (f"{self.path} was truncated (copytruncate): the rest of its copy "
                         f"{os.path.basename(self.path)}{ctl[6:].strip()} was read first")
        elif ctl.startswith("rotated-lost"):
            self.offset, self.inode, self._tail = 0, None, b""
            self.note = f"{self.path} was rotated while disconnected and the old file is gone: lines may be missing"
        elif ctl.startswith("rotated"):
            self.offset, self.inode, self._tail = 0, None, b""
            if self._replaced:
                self.note = f"{self.path} was rotated (renamed): the old file's rest was read, then the new file"
            else:
                self.note = f"{self.path} was rotated while disconnected (the old file's rest was read)"
            self._replaced = False
        elif ctl.startswith("truncated"):
            self.offset, self._tail = 0, b""
            self.note = f"{self.path} was truncated: following from its start (no copy of its rest found)"

    def _plan_step(self, parts: list[str], out: list[LogRecord]) -> None:
        """``seg I [off=A]``: step I of the plan begins (a part's bytes follow; a mark's records
        are said here)."""
        if not parts or not parts[0].isdigit() or int(parts[0]) >= len(self.plan):
            return
        i = int(parts[0])
        step = self.plan[i]
        self.step, self._tail = i, b""
        if step.kind == "mark":
            out.extend(step.records)
            self.step, self.in_part = i + 1, None
            return
        off = next((p[4:] for p in parts[1:] if p.startswith("off=")), "")
        self.offset = int(off) if off.isdigit() else step.a
        self.in_part = i
        self.cursorless = step.path != self.path

    def _gap(self, text: str, out: list[LogRecord]) -> None:
        """``gap I LINES END FIRST\\tLAST``: step I's lines were counted on the host: one record."""
        head, _, stamps = text.partition("\t")
        first_text = ""
        parts = head.split(" ", 3)
        if len(parts) >= 3 and all(x.isdigit() for x in parts[:3]):
            first_text = parts[3] if len(parts) > 3 else ""
        else:
            return
        i, n, end = int(parts[0]), int(parts[1]), int(parts[2])
        if i >= len(self.plan):
            return
        step = self.plan[i]
        first_ts, last_ts = _line_time(first_text), _line_time(stamps)
        where = gap_where(bytes=f"{step.a}-{end}", path=step.path if step.path != self.path else None)
        if n > 0:
            out.append(gap_record(n, where, first_ts, last_ts, source="file"))
        self.step, self.in_part = i + 1, None

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
            if self.inode is not None:
                # renamed away (rename-and-create; or gone, then a new file): start again; the
                # prelude reads the old file's rest by its inode from where this stream was (when
                # it is still there), then follows the new file
                self._replaced = True
                self._drop()
                return
            self.want_inode = True
            self.offset, self.inode, self._tail = 0, None, b""
            self.note = f"{self.path} was replaced (rotated): following the new file"
        elif C.TAIL_TRUNCATED_RE.match(notice):
            # copytruncate: start again; the prelude reads the rest of the copy (FILE.1) from
            # where this stream was when that copy is what was followed, then the file from 0
            self._truncated = True
            self._drop()
        else:
            self.note = notice.decode("utf-8", "replace")

    def _drop(self) -> None:
        """The rest of this channel is not read: the follower starts again (``restart``)."""
        self._dropping = self.restart = True
        self._buf = b""


CONTROL_MARK: Final = C.CONTROL_PREFIX


PID_MARK: Final = CONTROL_MARK + b"pid "


class _DockerFollower(_Follower):
    """Cursor ``TS#n``: the RFC 3339 timestamp of the last line and how many lines with exactly
    that timestamp were delivered (docker's ``--since`` is inclusive).

    ``CURRENT_BOOT`` (issue 21): the boot is the container's current run; its log is not read
    whole from ``StartedAt`` but caught up (``kvtui.hosts.dockerlog``): the head through the ready
    line + a margin (stopped on the host), the last ``DOCKER_TAIL_LINES`` lines with one gap record
    before them when they begin after the head, then ``-f`` on. A drop resumes where it was (in
    the head with what is left of it, before the tail's first line with the tail)."""

    source = "docker"

    def __init__(self, backend: SshBackend, start: LogStart, after_cursor: str | None,
                 began: float | None = None) -> None:
        super().__init__(backend, start, after_cursor, began)
        self.container = backend.host.container or ""
        self.since: str | None = None
        self.seen_at_since = 0  # lines at exactly `since` already delivered
        self._skip = 0
        self._ts_key = ""
        self._ts_base: datetime | None = None
        # liveness: ``docker logs -f`` ends when the container stops; its state says how
        self.watch = PidWatch(current_boot=start is LogStart.CURRENT_BOOT or after_cursor is not None)
        self._held: LogRecord | None = None
        self._fresh_after: datetime | None = None
        self.catch: CatchUp | None = None  # the current run caught up (head, gap, tail)
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
                if self.since and parse_docker_ts(self.since) is not None:
                    self.catch = CatchUp(self.since)
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
        catch = self.catch
        if catch is not None and catch.phase == "head" and self.since:
            return C.docker_catch_up(self.container, self.since, cap=catch.cap_left, ready=catch.ready,
                                     started=catch.started, sudo=sudo)
        if catch is not None and catch.phase == "tail":
            return C.docker_catch_up(self.container, None, sudo=sudo)
        return C.docker_logs_follow(self.container, since=self.since, tail=None if self.since else 0,
                                    sudo=sudo)

    def feed(self, chunk: bytes) -> list[LogRecord]:
        out: list[LogRecord] = []
        for line in self._lines(chunk):
            line = line.rstrip(b"\r")
            stamp_b, _, text = line.partition(b" ")
            quick = len(stamp_b) >= 20 and stamp_b[4:5] == b"-" and stamp_b[10:11] == b"T" and (
                stamp_b[-1:] == b"Z" or stamp_b[-1:].isdigit())
            if self.catch is not None and self.catch.phase == "head" and CONTROL_MARK in line:
                # the head script's own lines (after a line cut by the cap: that piece is dropped)
                out.extend(self.catch.control(line[line.index(CONTROL_MARK):]))
                self.note = self.catch.note or self.note
                self.catch.note = ""
                if self.catch.phase == "tail":
                    self._skip = self.seen_at_since  # the tail's lines the head delivered: not again
                continue
            if not quick:
                m = _DOCKER_LINE_RE.match(line)
                if m is None:
                    if line:  # a docker error line (merged stderr) — not a log line of the container
                        self.note = _decode(line)
                    continue
                stamp_b, text = m.group(1), m.group(2)
            stamp = stamp_b.decode("ascii", "replace")
            catch = self.catch
            if catch is not None and catch.phase == "tail":
                out.extend(catch.tail_first(stamp))  # the gap, when the tail begins after the head
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
            rec = LogRecord(text=_decode(text), ts=self._ts(stamp), cursor=f"{stamp}#{self.seen_at_since}",
                            source="docker")
            out.append(rec)
            if catch is not None and catch.phase == "head":
                catch.head_line(stamp, rec.text, len(line) + 1)
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
