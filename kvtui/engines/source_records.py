"""kvtui's own log records about the source itself (pure core: no I/O).

A follower of a server that has run for hours or days does not copy its whole log: it reads the
boot's startup part whole, then the recent tail, and says what lies between and what it could not
find. It says so in the stream, as records of its own (``ident`` ``EXIT_IDENT``, text starting
``kvtui: ``), so that the spool, ``replay``, a bundle and every view read the same thing:

- ``gap_record``: ``kvtui: 1998700 lines not read [bytes=123-247000000] (2026-12-04T10:00:00 →
  2026-12-06T06:00:00)`` → ``LogGap`` (the marker row; a search reaches the lines on the host).
- ``start_missing_record``: ``kvtui: the server's start is not in the log (rotated before …)``
  → ``StartMissing`` (the boot is serving, never ``starting``).
- ``command_record``: ``kvtui: the running server's command line (pid 4242): python3 -m …`` →
  ``RunningCommand`` (its flags, when the engine's own dump is gone with the start).

``LineParser`` reads records with that ident back with ``parse_source_record`` (a log line that
merely says so is not one: the ident is never an engine's).
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime
from typing import Final
from urllib.parse import quote, unquote

from kvtui.engines.events import LogEvent, LogGap, LogRecord, RunningCommand, StartMissing
from kvtui.engines.exit_record import EXIT_IDENT

_GAP_RE: Final = re.compile(
    r"^kvtui: (?P<lines>\d+|some) lines? not read \[(?P<where>[^\]]*)\]"
    r"(?: \((?P<first>[0-9T:.+\- ]+|\?) → (?P<last>[0-9T:.+\- ]+|\?)\))?$"
)
_MISSING_PREFIX: Final = "kvtui: the server's start is not in the log"
_MISSING_RE: Final = re.compile(r"^kvtui: the server's start is not in the log(?: \((?P<reason>.*)\))?$")
_COMMAND_RE: Final = re.compile(r"^kvtui: the running server's command line(?: \(pid (?P<pid>\d+)\))?: (?P<argv>.*)$")


def _stamp(ts: datetime | None) -> str:
    return ts.isoformat() if ts is not None else "?"


def _unstamp(text: str | None) -> datetime | None:
    if not text or text == "?":
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _clean(text: str) -> str:
    return " ".join(text.replace("[", "(").replace("]", ")").split())


def gap_text(lines: int | None, where: str, first_ts: datetime | None = None, last_ts: datetime | None = None) -> str:
    count = str(int(lines)) if lines is not None else "some"
    span = f" ({_stamp(first_ts)} → {_stamp(last_ts)})" if first_ts is not None or last_ts is not None else ""
    return f"kvtui: {count} lines not read [{_clean(where)}]{span}"


def gap_record(
    lines: int | None, where: str, first_ts: datetime | None = None, last_ts: datetime | None = None, *,
    source: str = "raw", ts: datetime | None = None,
) -> LogRecord:
    """The record a follower yields where it skipped lines (no cursor: resuming never depends on
    it; ``ts`` the time of the gap's last line when known, so the record sorts where it belongs)."""
    return LogRecord(gap_text(lines, where, first_ts, last_ts), ts if ts is not None else last_ts, None, source, None,
                     EXIT_IDENT)


def start_missing_text(reason: str = "") -> str:
    return _MISSING_PREFIX + (f" ({' '.join(reason.split())})" if reason.strip() else "")


def start_missing_record(reason: str = "", *, source: str = "raw", ts: datetime | None = None) -> LogRecord:
    return LogRecord(start_missing_text(reason), ts, None, source, None, EXIT_IDENT)


def command_text(argv: tuple[str, ...] | list[str], pid: int | None = None) -> str:
    who = f" (pid {int(pid)})" if pid is not None else ""
    return f"kvtui: the running server's command line{who}: {shlex.join(argv)}"


def command_record(argv: tuple[str, ...] | list[str], pid: int | None = None, *, source: str = "raw",
                   ts: datetime | None = None) -> LogRecord:
    return LogRecord(command_text(argv, pid), ts, None, source, None, EXIT_IDENT)


def parse_source_record(text: str) -> LogEvent | None:
    """The event of one of kvtui's own source records, or None when ``text`` is not one."""
    if text.startswith("kvtui: the running"):
        m = _COMMAND_RE.match(text)
        if m is None:
            return None
        try:
            argv = tuple(shlex.split(m.group("argv")))
        except ValueError:
            return None
        pid = int(m.group("pid")) if m.group("pid") else None
        return RunningCommand(argv=argv, pid=pid)
    if text.startswith(_MISSING_PREFIX):
        m = _MISSING_RE.match(text)
        return StartMissing(reason=(m.group("reason") or "") if m is not None else "")
    m = _GAP_RE.match(text)
    if m is None:
        return None
    lines = int(m.group("lines")) if m.group("lines").isdigit() else None
    return LogGap(lines=lines, where=m.group("where"), first_ts=_unstamp(m.group("first")),
                  last_ts=_unstamp(m.group("last")))


def gap_where(**parts: str | int | None) -> str:
    """A ``LogGap.where``: ``key=value`` parts (``bytes``, ``path``, ``after``, ``before``,
    ``since``, ``until``), values percent-quoted (a path may hold spaces or brackets)."""
    return " ".join(f"{k}={quote(str(v), safe='/:-+.,_~@')}" for k, v in parts.items() if v is not None)


def gap_range(where: str) -> dict[str, str]:
    """``where`` of a ``LogGap`` back as its parts (``gap_where``'s inverse)."""
    out: dict[str, str] = {}
    for part in where.split():
        k, sep, v = part.partition("=")
        if sep:
            out[k] = unquote(v)
    return out


__all__ = [
    "command_record",
    "command_text",
    "gap_range",
    "gap_record",
    "gap_text",
    "gap_where",
    "parse_source_record",
    "start_missing_record",
    "start_missing_text",
]
