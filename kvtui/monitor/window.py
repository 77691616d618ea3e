"""The monitor's log window: the newest lines in memory (``recent``) and the lines not yet handed to
the sink, both as parts (``LogLine``s: parsed lines; ``LineRun``s: columns of lines spooled without
parsing, which become ``LogLine``s only where a reader asks for them). Each keeps at least the
newest ``size`` lines; whole parts are trimmed from the front (the rest is in the spool)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from kvtui.updates import LinePart, LineRun, LogLine, expand


def part_len(part: LinePart) -> int:
    return 1 if isinstance(part, LogLine) else len(part.texts)


def trim(parts: deque[LinePart], n: int, want: int) -> int:
    """Drop whole parts from the front of ``parts`` (``n`` lines) while ``want`` lines remain;
    returns the lines left."""
    while parts:
        k = part_len(parts[0])
        if n - k < want:
            break
        parts.popleft()
        n -= k
    return n


def cap(parts: Sequence[LinePart], n: int, want: int) -> list[LinePart]:
    """The newest ``want`` lines of ``parts`` (``n`` lines), the oldest run cut to fit."""
    out = list(parts)
    i = 0
    while i < len(out) and n - part_len(out[i]) >= want:
        n -= part_len(out[i])
        i += 1
    del out[:i]
    extra = n - want
    if extra > 0:
        first = out[0]
        assert isinstance(first, LineRun)  # a LogLine is one line: it never needs cutting
        out[0] = first.tail(len(first.texts) - extra)
    return out


class LogWindow:
    """The window and the pending lines of one monitor (``size``: its ``log_window``); ``stage``
    sets ``dirty`` (the publisher's event: something is to be handed over)."""

    __slots__ = ("_pending", "_pending_n", "_window", "_window_n", "dirty", "lines_seen", "since_flush", "size")

    def __init__(self, size: int, dirty: asyncio.Event) -> None:
        self.size = max(1, size)
        self.dirty = dirty
        self._window: deque[LinePart] = deque()
        self._window_n = 0
        self._pending: deque[LinePart] = deque()
        self._pending_n = 0
        self.since_flush = 0  # lines since the last flush (uncapped)
        self.lines_seen = 0  # lines staged by this monitor (spool length minus a resumed part)

    def stage(self, part: LinePart, n: int) -> None:
        """A part (``n`` lines, just spooled) joins the window and the lines pending for the sink;
        whole parts older than the newest ``size`` lines are dropped from both."""
        self.lines_seen += n
        self.since_flush += n
        want = self.size
        window, pending = self._window, self._pending
        window.append(part)
        pending.append(part)
        self._window_n += n
        self._pending_n += n
        if self._window_n > 2 * want:
            self._window_n = trim(window, self._window_n, want)
        if self._pending_n > 2 * want:
            self._pending_n = trim(pending, self._pending_n, want)
        self.dirty.set()

    def push(self, line: LogLine) -> None:
        self.stage(line, 1)

    @property
    def recent(self) -> deque[LogLine]:
        """The newest ``size`` display lines (the rest is in the spool)."""
        return deque(expand(cap(self._window, self._window_n, self.size)), maxlen=self.size)

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def take_pending(self) -> list[LinePart]:
        """The newest ``size`` pending lines (the parts of one ``LogBatch``); none pending after."""
        if not self._pending:
            return []
        parts = cap(self._pending, self._pending_n, self.size)
        self._pending.clear()
        self._pending_n = 0
        return parts


__all__ = ["LogWindow", "cap", "part_len", "trim"]
