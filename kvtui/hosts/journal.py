"""A unit's current boot in constant time, whatever its uptime (issue 21): the parts shared by the
SSH and the local journal followers.

The boot's start is found by its ``_SYSTEMD_INVOCATION_ID`` (``commands.journal_boot_start``);
``commands.journal_uptime`` then reads, in one ``sh`` script on the host, the startup part whole
(through the ready line plus a margin, capped), one gap, the recent tail, and follows (``-f``)
from there. ``JournalUptime`` holds where that read is — so a reconnect resumes it without
re-reading a part or yielding the gap twice — and turns the script's control lines into kvtui's
own records (``gap_record``). When the invocation's head is gone from the journal (vacuumed),
``start_missing`` says so and the running server's command line stands in for its start
(``start_missing_record`` + ``command_record``), then the tail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from kvtui.engines.events import LogRecord
from kvtui.engines.shapes import parse_journal_json
from kvtui.engines.source_records import command_record, gap_range, gap_record, gap_where, start_missing_record
from kvtui.hosts import shellcmd as C
from kvtui.hosts.backend import BackendError, LogMatch

_START_RES: Final = tuple(re.compile(p) for p in C.SERVER_START_PATTERNS)
_READY_RE: Final = re.compile(C.JOURNAL_READY_RE)
_MANAGER_START_IDS: Final = frozenset({C.MESSAGE_ID_UNIT_STARTING, C.MESSAGE_ID_UNIT_STARTED})


def epoch_us(ts: str | None) -> datetime | None:
    """A journald ``__REALTIME_TIMESTAMP`` (µs since the epoch) as an aware UTC datetime."""
    if not ts or not ts.isdigit():
        return None
    sec, us = divmod(int(ts), 1_000_000)
    try:
        return datetime.fromtimestamp(sec, UTC).replace(microsecond=us)
    except (OverflowError, OSError, ValueError):
        return None


def cursor_time_us(cursor: str) -> int | None:
    """The realtime (µs) a journald cursor holds (its ``t=`` part, hex), or None."""
    for part in cursor.split(";"):
        if part.startswith("t="):
            try:
                return int(part[2:], 16)
            except ValueError:
                return None
    return None


@dataclass
class BootStart:
    """``commands.journal_boot_start``'s answer."""

    invocation: str | None = None
    cursor: str | None = None  # the start (inclusive); None: not found
    head: list[LogRecord] = field(default_factory=list)  # the invocation's first entries
    head_ids: list[str] = field(default_factory=list)  # their MESSAGE_IDs
    older: bool | None = None  # the journal holds entries older than the invocation's first

    def start_missing(self) -> str | None:
        """Why the boot's start is not in the journal (its head was vacuumed), or None. Said only
        when sure: the journal begins inside the invocation and the head holds no start (the
        manager's Starting/Started line, an engine's start line)."""
        if self.older is not False or not self.head:
            return None
        if any(i in _MANAGER_START_IDS for i in self.head_ids):
            return None
        if any(p.search(r.text) for r in self.head for p in _START_RES):
            return None
        first = self.head[0].ts
        when = f" before {first.astimezone().strftime('%Y-%m-%d %H:%M')}" if first is not None else ""
        return f"the journal no longer holds its start (vacuumed{when})"


def parse_boot_start(out: str) -> BootStart:
    found = BootStart()
    for line in out.splitlines():
        if line.startswith("invocation="):
            found.invocation = line.partition("=")[2].strip() or None
        elif line.startswith("older="):
            found.older = line.partition("=")[2].strip() == "yes"
        elif line.startswith("{"):
            rec = parse_journal_json(line)
            if rec is None:
                continue
            if found.cursor is None and rec.cursor:
                found.cursor = rec.cursor
            found.head.append(rec)
            m = re.search(r'"MESSAGE_ID":"([0-9a-f]{32})"', line)
            found.head_ids.append(m.group(1) if m else "")
    return found


def parse_main_cmdline(out: bytes | str) -> tuple[int | None, list[str]]:
    """``commands.journal_main_cmdline``'s answer: (MainPID, its argv)."""
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else out
    first, _, rest = text.partition("\n")
    pid_s = first.partition("=")[2].strip() if first.startswith("pid=") else ""
    pid = int(pid_s) if pid_s.isdigit() and int(pid_s) > 0 else None
    argv = [a for a in rest.split("\0") if a] if pid is not None else []
    return pid, argv


def missing_records(reason: str, pid: int | None, argv: list[str], source: str = "journal") -> list[LogRecord]:
    out = [start_missing_record(reason, source=source)]
    if argv:
        out.append(command_record(argv, pid, source=source))
    return out


@dataclass
class JournalUptime:
    """Where ``commands.journal_uptime``'s read of a boot is: ``startup`` (the startup part is
    being read: ``ready``, ``after_ready``, ``read_bytes`` so far), ``tail`` (read, the gap and the
    tail next: ``done`` = (C1, its time, the next entry's time)) or ``follow`` (plain ``-f`` after
    the last cursor)."""

    phase: str = "startup"
    ready: bool = False
    after_ready: int = 0
    read_bytes: int = 0
    done: tuple[str, str, str] | None = None
    # the gap's end: the tail starts here (inclusive) — a drop before its first entry came resumes
    # here, not after the startup part (which would read the whole gap)
    tail_cursor: str | None = None

    def command(self, unit: str, start_cursor: str, last_cursor: str | None, *, journalctl: str | None = None,
                sudo: bool = False) -> str:
        """The script that goes on from here (``last_cursor``: the newest entry delivered)."""
        if self.phase == "tail" and self.done is not None:
            return C.journal_uptime(unit, startup_done=self.done, journalctl=journalctl, sudo=sudo)
        if last_cursor is None:
            return C.journal_uptime(unit, cursor=start_cursor, journalctl=journalctl, sudo=sudo)
        return C.journal_uptime(unit, after_cursor=last_cursor, after_ts=cursor_time_us(last_cursor),
                                ready=self.ready, after_ready=self.after_ready,
                                read_bytes=self.read_bytes, journalctl=journalctl, sudo=sudo)

    def saw(self, texts: list[str], nbytes: int) -> None:
        """Records of the startup part were delivered (``nbytes`` of JSON)."""
        if self.phase != "startup":
            return
        self.read_bytes += nbytes
        if self.ready:
            self.after_ready += len(texts)
        for i in range(len(texts) - 1, -1, -1):  # the last ready line counts (SGLang: uvicorn's, then its own)
            if _READY_RE.search(texts[i]):
                self.ready = True
                self.after_ready = len(texts) - i - 1
                return

    def control(self, line: str) -> list[LogRecord]:
        """A control line of the script (``CONTROL_PREFIX`` stripped): the records it stands for."""
        word, _, rest = line.partition(" ")
        kv = dict(p.partition("=")[::2] for p in rest.split())
        if word == "startup":
            if kv.get("stop") == "1" and kv.get("cursor", "-") != "-":
                self.phase = "tail"
                self.done = (kv["cursor"], kv.get("ts", "-"), kv.get("next", "-"))
            else:
                self.phase = "follow"
            return []
        if word == "gap":
            self.phase = "follow"
            self.tail_cursor = kv.get("before")
            n = kv.get("lines", "-")
            where = gap_where(after=kv.get("after"), before=kv.get("before"))
            return [gap_record(int(n) if n.isdigit() else None, where, epoch_us(kv.get("first")),
                               epoch_us(kv.get("last")), source="journal")]
        return []


def search_command(unit: str, pattern: str, where: str, *, regex: bool = False, ignore_case: bool = True,
                   limit: int = 100, newest: bool = False, journalctl: str | None = None,
                   sudo: bool = False) -> str:
    """The ``journalctl --grep`` of a journal gap (``LogGap.where``: ``after=C1 before=C2``):
    entries after C1 (``--after-cursor``; newest first: ``--since`` C1's time, ``-r``) through
    the last one before C2 (``--until`` C2's time minus 1 µs). A fixed string is escaped for
    PCRE2 (journalctl's ``--grep``)."""
    parts = gap_range(where)
    after, before = parts.get("after"), parts.get("before")
    if after is None and before is None:
        raise BackendError(f"not a journal gap: [{where}]")
    until = cursor_time_us(before) if before else None
    since = cursor_time_us(after) if after else None
    return C.journal_search(unit, pattern if regex else re.escape(pattern), after_cursor=after,
                            since_us=since, until_us=until - 1 if until is not None else None,
                            ignore_case=ignore_case, newest=newest, limit=limit, journalctl=journalctl, sudo=sudo)


def search_matches(out: str, where: str, *, newest: bool = False, limit: int = 100) -> list[LogMatch]:
    """``search_command``'s output as ``LogMatch``es, oldest first (the gap's bounds themselves
    left out: entries of the same microsecond as a bound)."""
    parts = gap_range(where)
    bounds = {parts.get("after"), parts.get("before")} - {None}
    recs = [r for r in (parse_journal_json(line) for line in out.splitlines()) if r is not None]
    recs = [r for r in recs if r.cursor not in bounds]
    if newest:
        recs.reverse()
    return [LogMatch(record=r) for r in (recs[-limit:] if newest else recs[:limit])]


def split_controls(data: bytes) -> tuple[list[bytes | str], bytes]:
    """``data`` cut at the script's control lines: JSON byte runs (whole lines) and control
    texts (``str``), in order; plus an incomplete control line to keep for the next chunk."""
    parts: list[bytes | str] = []
    pos = 0
    mark = C.CONTROL_PREFIX
    while True:
        i = data.find(mark, pos)
        if i < 0:
            parts.append(data[pos:])
            return parts, b""
        j = data.find(b"\n", i)
        if j < 0:
            parts.append(data[pos:i])
            return parts, data[i:]
        parts.append(data[pos:i])
        parts.append(data[i + len(mark) : j].decode("utf-8", "replace"))
        pos = j + 1


__all__ = [
    "BootStart",
    "JournalUptime",
    "cursor_time_us",
    "epoch_us",
    "missing_records",
    "parse_boot_start",
    "parse_main_cmdline",
    "search_command",
    "search_matches",
    "split_controls",
]
