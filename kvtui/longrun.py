"""How every view words a server up for days (pure core: no I/O, no textual).

A follower of a long-running server reads the boot's startup part, then the recent tail, and says
what lies between (``LogGap``) or that the start is gone (``StartMissing``, the flags then from the
process: ``RunningCommand``) — see ``kvtui.engines.source_records``. The console's log, boot panel
and calculator, ``wait``, ``replay`` and ``bundle`` all say it with these functions, so it reads
the same everywhere:

* the gap row: ``1,998,700 serving lines not read (2 d 3 h) — / searches them on the host``;
* a boot whose start is missing: ``serving — its start is not in the log (rotated before …)``;
* its flags: ``flags from the running process (pid 4242)``;
* its pool: ``pool ~191,489 tokens (estimated from serving lines ±1,018)``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final

from kvtui import fmt
from kvtui.engines.events import LogGap
from kvtui.engines.source_records import gap_range, gap_where, parse_source_record

if TYPE_CHECKING:
    from kvtui.boot import Boot

GAP_SEARCH_HINT: Final = "/ searches them on the host"


def long_span(seconds: float | None) -> str:
    """A long elapsed time in its two largest units: ``2 d 3 h``, ``5 h 12 m``, ``4 m`` (``—``
    when unknown); shorter than a minute in seconds."""
    if seconds is None or seconds != seconds:
        return fmt.UNKNOWN
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} m" if minutes else f"{hours} h"
    return f"{minutes} m"


def gap_of(text: str) -> LogGap | None:
    """The gap a spooled line of kvtui's own (style ``gap``) stands for; None when it is not one."""
    ev = parse_source_record(text)
    return ev if isinstance(ev, LogGap) else None


def gap_span(gap: LogGap) -> float | None:
    if gap.first_ts is None or gap.last_ts is None:
        return None
    try:
        return (gap.last_ts - gap.first_ts).total_seconds()
    except TypeError:  # a naive and a zoned stamp
        return None


def gap_count(lines: int | None) -> str:
    """``1,998,700 serving lines`` (``serving lines``: not counted)."""
    if lines is None:
        return "serving lines (not counted)"
    return f"{lines:,} serving line{'s' if lines != 1 else ''}"


def gap_label(gap: LogGap, *, hint: bool = True) -> str:
    """The marker row of a gap: ``1,998,700 serving lines not read (2 d 3 h) — / searches them on
    the host`` (the span when both ends' times are known)."""
    span = gap_span(gap)
    when = f" ({long_span(span)})" if span is not None else ""
    return f"{gap_count(gap.lines)} not read{when}" + (f" — {GAP_SEARCH_HINT}" if hint else "")


def narrow_after(where: str, cursor: str | None, ts: datetime | None = None) -> str | None:
    """``where`` (a ``LogGap``'s range) from just after a line of it found by an earlier search
    (its ``cursor``: a file's byte offset after the line, a journald cursor; or its time for a
    ``since``/``until`` range): where the next page of a search starts. None when the line says
    nothing that narrows the range."""
    parts = gap_range(where)
    if "bytes" in parts and cursor is not None and cursor.isdigit():
        _, _, end = parts["bytes"].partition("-")
        parts["bytes"] = f"{int(cursor)}-{end}"
    elif "after" in parts and cursor:
        parts["after"] = cursor
    elif "since" in parts and ts is not None:
        parts["since"] = ts.isoformat()
    else:
        return None
    return gap_where(**parts)


def gap_text_label(text: str, *, hint: bool = True) -> str:
    """``gap_label`` of a spooled gap line's text (the text itself when it is not one)."""
    gap = gap_of(text)
    return gap_label(gap, hint=hint) if gap is not None else text


def serving_state(boot: Boot) -> str | None:
    """``serving — its start is not in the log (REASON)`` for a boot whose start kvtui could not
    read; None for a boot read from its start."""
    if boot.start_missing is None:
        return None
    reason = boot.start_missing.strip()
    return "serving — its start is not in the log" + (f" ({reason})" if reason else "")


def flags_source(boot: Boot) -> str | None:
    """``flags from the running process (pid 4242)`` when the flags came from the process's
    command line; None when they are the engine's own dump (or there are none)."""
    if boot.flags_from != "process":
        return None
    pid = boot.process_pid
    return "flags from the running process" + (f" (pid {pid})" if pid is not None else "")


def estimated_pool(boot: Boot) -> str | None:
    """``pool ~191,489 tokens (estimated from serving lines ±1,018)`` when the pool is only known
    from serving lines (the boot's own pool line is not in the log)."""
    est = boot.live.pool_tokens_est
    if est is None:
        return None
    err = boot.live.pool_tokens_err
    pm = f" ±{err:,}" if err is not None else ""
    return f"pool ~{est:,} tokens (estimated from serving lines{pm})"


def skipped(boot: Boot) -> str | None:
    """``1,998,700 serving lines not read`` (their ranges are in ``boot.skipped_where``)."""
    if not boot.skipped_lines and not boot.skipped_where:
        return None
    return f"{gap_count(boot.skipped_lines or None)} not read"


def summary(boot: Boot) -> list[str]:
    """Every line of the above that applies to ``boot``, in reading order."""
    out = [serving_state(boot), flags_source(boot), estimated_pool(boot), skipped(boot)]
    return [x for x in out if x]


__all__ = [
    "GAP_SEARCH_HINT",
    "estimated_pool",
    "flags_source",
    "gap_count",
    "gap_label",
    "gap_of",
    "gap_span",
    "gap_text_label",
    "long_span",
    "narrow_after",
    "serving_state",
    "skipped",
    "summary",
]
