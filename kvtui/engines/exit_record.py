"""kvtui's own log record for "the server process is gone" (pure core: no I/O).

A host backend that sees the server gone yields ``exit_record(...)`` into the log stream (``ident``
``EXIT_IDENT``, text ``kvtui: the server process exited (pid 123)``); ``LineParser`` reads records
with that ident back into a ``ServerExit`` with ``parse_exit`` (a log line that merely says so is
not one). Why in the stream, and how backends decide a server is gone: ``kvtui.liveness``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

from kvtui.engines.events import LogRecord, ServerExit

EXIT_IDENT: Final = "kvtui"
_EXIT_RE: Final = re.compile(
    r"^kvtui: the server process (?P<what>exited|is not running|stopped)"
    r"(?: \((?:pid (?P<pid>\d+))?(?:, )?(?P<detail>[^()]*)\))?$"
)


def exit_text(pid: int | None, detail: str = "", *, at_start: bool = False, stopped: bool = False) -> str:
    what = "is not running" if at_start else "stopped" if stopped else "exited"
    bits = [f"pid {pid}"] if pid is not None else []
    if detail:
        bits.append(_clean(detail))
    return f"kvtui: the server process {what}" + (f" ({', '.join(bits)})" if bits else "")


def _clean(detail: str) -> str:
    return " ".join(detail.replace("(", "[").replace(")", "]").split())[:200]


def exit_record(
    pid: int | None, detail: str = "", *, at_start: bool = False, ts: datetime | None = None, source: str = "raw"
) -> LogRecord:
    """The record a backend yields when the server process is gone (no cursor: it is not a
    line of the log, so resuming never depends on it)."""
    return LogRecord(exit_text(pid, detail, at_start=at_start), ts, None, source, None, EXIT_IDENT)


def stop_record(detail: str = "", *, ts: datetime | None = None, source: str = "raw") -> LogRecord:
    """The record a backend yields when the server was stopped from outside, not crashed (a kube
    pod deleted: SIGTERM, the grace period; ``kvtui: the server process stopped (…)``): a boot
    it ends is stopped, never failed, and it makes no boot of its own."""
    return LogRecord(exit_text(None, detail, stopped=True), ts, None, source, None, EXIT_IDENT)


def parse_exit(text: str) -> ServerExit | None:
    m = _EXIT_RE.match(text)
    if m is None:
        return None
    pid = int(m.group("pid")) if m.group("pid") else None
    what = m.group("what")
    return ServerExit(pid=pid, detail=m.group("detail") or "", at_start=what == "is not running",
                      stopped=what == "stopped")


__all__ = ["EXIT_IDENT", "exit_record", "exit_text", "parse_exit", "stop_record"]
