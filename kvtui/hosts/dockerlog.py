"""The current run of a container up for days (issue 21), shared by the SSH and local followers:
the head of its log since ``StartedAt`` (``commands.docker_head_script``: through the ready line +
a margin, capped, stopped on the host), ``\\0kvtui:dhead RC``, the last lines (``--tail``), one
gap record between them when the tail begins after the head's end, then ``-f`` on. ``CatchUp``
is that reading's state (where a drop resumes it); ``parse_docker_search`` reads
``commands.docker_search``'s answer."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Final

from kvtui.engines.events import LogRecord
from kvtui.engines.source_records import command_record, gap_record, gap_where, start_missing_record
from kvtui.hosts import shellcmd as C
from kvtui.hosts.backend import LogMatch

_STAMP_RE: Final = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
_START_RE: Final = re.compile("|".join(C.SERVER_START_PATTERNS))
_READY_RE: Final = re.compile("|".join(C.READY_PATTERNS))
SOURCE: Final = "docker"


def fixed_stamp(stamp: str) -> str | None:
    """An RFC 3339 time as ``docker logs --timestamps`` prints it (UTC, 9 fraction digits: such
    stamps sort as strings); None when it is not one."""
    m = _STAMP_RE.match(stamp.strip())
    if m is None:
        return None
    try:
        base = datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) == "Z" else m.group(3)))
    except ValueError:
        return None
    base = base.astimezone(UTC)
    return base.strftime("%Y-%m-%dT%H:%M:%S.") + (m.group(2) or "").ljust(9, "0") + "Z"


def stamp_time(stamp: str) -> datetime | None:
    """A docker stamp as an aware datetime (µs)."""
    fixed = fixed_stamp(stamp)
    if fixed is None:
        return None
    return datetime.fromisoformat(fixed[:19] + "+00:00") + timedelta(microseconds=int(fixed[20:26]))


class CatchUp:
    """Where the catch-up of the container's current run is: ``phase`` ``head`` (reading the
    head), ``tail`` (the head is read: the tail's first line decides the gap), ``follow`` (done).
    ``cap_left``/``ready``/``started`` resume a head cut by a drop where it was."""

    def __init__(self, started_at: str, *, cap: int = C.STARTUP_CAP_BYTES) -> None:
        self.started_at = started_at
        self.phase = "head"
        self.cap_left = cap
        self.ready = -1  # lines after the ready line (-1: not seen yet)
        self.started = False
        self.head_last: str | None = None  # the last head line's stamp
        self.code: int | None = None  # why the head ended (``commands.DOCKER_HEAD_*``)
        self.argv: list[str] = []
        self.note = ""

    def head_line(self, stamp: str, text: str, nbytes: int) -> None:
        """A head line was delivered (``nbytes``: its bytes with the stamp and newline)."""
        self.cap_left -= nbytes
        self.head_last = stamp
        if not self.started and _START_RE.search(text):
            self.started = True
        if self.ready >= 0:
            self.ready += 1
        elif self.started and _READY_RE.search(text):
            self.ready = 0

    def control(self, line: bytes) -> list[LogRecord]:
        """A control line of the head script: ``dcmd`` (the container's command) or ``dhead RC``
        (the head is read: kvtui's start-missing records when RC says so)."""
        if line.startswith(C.DOCKER_CMD_MARK):
            self.argv = _command(line[len(C.DOCKER_CMD_MARK):].decode("utf-8", "replace"))
            return []
        if not line.startswith(C.DOCKER_HEAD_MARK):
            return []
        code = line[len(C.DOCKER_HEAD_MARK):].strip()
        self.code = int(code) if code.isdigit() else None
        self.phase = "tail"
        if self.code == C.DOCKER_HEAD_CAP:
            self.note = (f"the container's log holds no ready line in its first {C.STARTUP_CAP_BYTES >> 20} MiB "
                         "since it started: the rest up to the recent tail is not read")
        if self.code != C.DOCKER_HEAD_MISSING:
            return []
        ts = stamp_time(self.head_last or self.started_at)
        out = [start_missing_record("docker's log of the container begins while it serves (the log driver "
                                    f"rotated its start away); the container started {self.started_at}",
                                    source=SOURCE, ts=ts)]
        if self.argv:
            out.append(command_record(self.argv, None, source=SOURCE, ts=ts))
        self.note = "the server's start is no longer in the container's log: its command line and the recent tail"
        return out

    def tail_first(self, stamp: str) -> list[LogRecord]:
        """The tail's first line: the gap record when it begins after the head's end."""
        self.phase = "follow"
        last = self.head_last or self.started_at
        a, b = fixed_stamp(last), fixed_stamp(stamp)
        if a is None or b is None or b <= a:
            return []  # the tail overlaps the head: nothing was skipped
        return [gap_record(None, gap_where(since=a, until=b), stamp_time(a), stamp_time(b), source=SOURCE)]


def _command(text: str) -> list[str]:
    """``"PATH" ["ARG", …]`` (``docker inspect -f '{{json .Path}} {{json .Args}}'``) -> argv."""
    dec = json.JSONDecoder()
    text = text.strip()
    try:
        path, end = dec.raw_decode(text)
        args, _ = dec.raw_decode(text[end:].lstrip())
    except ValueError:
        return []
    if not isinstance(path, str) or not isinstance(args, list):
        return []
    return [path, *(str(a) for a in args)]


_GREP_RE: Final = re.compile(r"^(\d+)([:-])(\S+) ?(.*)$", re.S)


def parse_docker_search(out: str, *, context: int = 0) -> list[LogMatch]:
    """``commands.docker_search``'s ``grep -n`` lines -> matches, oldest first, each with up to
    ``context`` lines before and after it; a record's cursor is its docker stamp, ``line_no`` its
    line in the gap (1-based)."""
    rows: list[tuple[int, bool, LogRecord]] = []
    for line in out.split("\n"):
        m = _GREP_RE.match(line)
        if m is None:
            continue
        stamp = m.group(3)
        rows.append((int(m.group(1)), m.group(2) == ":", LogRecord(m.group(4), stamp_time(stamp), stamp, SOURCE)))
    by_line = {n: rec for n, _, rec in rows}
    found: list[LogMatch] = []
    for n, hit, rec in rows:
        if hit:
            before = tuple(by_line[k] for k in range(n - context, n) if k in by_line)
            after = tuple(by_line[k] for k in range(n + 1, n + context + 1) if k in by_line)
            found.append(LogMatch(rec, before, after, n))
    return found


# Lines of `docker logs --timestamps` and docker's RFC 3339 stamps (the local follower's).


_DOCKER_TS: Final = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d) ?")


def parse_docker_line(line: str) -> LogRecord:
    """One ``docker logs --timestamps`` line; the cursor is its RFC 3339 timestamp as printed."""
    m = _DOCKER_TS.match(line)
    if not m:
        return LogRecord(text=line, source="docker")
    frac = (m.group(2) or "")[:7].ljust(7, "0") if m.group(2) else ""
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        ts: datetime | None = datetime.fromisoformat(m.group(1) + frac + zone)
    except ValueError:
        ts = None
    stamp = line[: m.end()].rstrip(" ")
    return LogRecord(text=line[m.end() :], ts=ts, cursor=stamp, source="docker")


def docker_key(stamp: str) -> tuple[str, str]:
    """Sortable (seconds, nanoseconds) key of a docker timestamp (always UTC ``Z`` in practice)."""
    m = _DOCKER_TS.match(stamp + " ")
    if not m:
        return (stamp, "")
    return (m.group(1), (m.group(2) or ".").ljust(10, "0"))


def parse_rfc3339(stamp: str) -> datetime | None:
    """Docker's ``2026-03-04T09:12:00.123456789Z`` -> an aware datetime (µs), None if it is not one."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", stamp.strip())
    if m is None:
        return None
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    try:
        return datetime.fromisoformat(f"{m.group(1)}.{frac}{'+00:00' if m.group(3) == 'Z' else m.group(3)}")
    except ValueError:
        return None


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
