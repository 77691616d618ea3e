"""The local log search's grep run: ``grep -b -n -C`` output read from the process as it comes,
turned into the matches in a byte range with their context lines."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

from kvtui.engines.events import LogRecord
from kvtui.hosts.backend import LogMatch
from kvtui.hosts.filelog import GrepLine, grep_record, parse_grep_line


async def collect_matches(
    proc: asyncio.subprocess.Process, pattern: str, base: int, a: int, b: int, *, ignore_case: bool, context: int,
    limit: int, newest: bool, numbered: bool, max_line: int,
) -> list[LogMatch]:
    """grep's output (``-b -n``, ``-C``) -> matches in [a, b) with their context: the first
    ``limit`` (returns as soon as they are complete), or the last ``limit`` with ``newest``; a line
    longer than ``max_line`` bytes is cut."""
    assert proc.stdout is not None
    found: deque[tuple[LogRecord, list[LogRecord], list[LogRecord], int | None]] = deque(
        maxlen=limit if newest else None)
    before: list[LogRecord] = []
    after_open = False
    partial = b""
    while True:
        data = await proc.stdout.read(1 << 16)
        if not data:
            break
        lines = (partial + data).split(b"\n")
        partial = lines.pop()
        if len(partial) > 2 * max_line:
            partial = partial[: 2 * max_line]
        for raw in lines:
            line: GrepLine | None = parse_grep_line(raw)
            if line is None:  # "--": the next lines are not next to the last match
                before, after_open = [], False
                continue
            at = base + line.offset
            if at >= b:
                return _matches(found)
            if at < a:
                continue
            if len(line.text) > max_line:
                line.text = line.text[:max_line]
            rec = grep_record(line, base, pattern, ignore_case=ignore_case)
            if line.match:
                if not newest and len(found) >= limit:
                    return _matches(found)
                found.append((rec, before[-context:] if context else [], [], line.line_no if numbered else None))
                before, after_open = [], True
                continue
            if after_open and found and len(found[-1][2]) < context:
                found[-1][2].append(rec)
            before.append(rec)
            if len(before) > context:
                del before[0]
        if not newest and len(found) >= limit and (not context or len(found[-1][2]) >= context):
            return _matches(found)
    return _matches(found)


def _matches(found: Iterable[tuple[LogRecord, list[LogRecord], list[LogRecord], int | None]]) -> list[LogMatch]:
    return [LogMatch(rec, tuple(bef), tuple(aft), n) for rec, bef, aft, n in found]
