"""The one core reader "records -> boots": a ``LineParser`` feeding a ``BootTracker``.

Pure core (no textual, no asyncssh, no I/O). Every reader of a log goes through it: the monitor
(live and ``read_boots``), the restart follower (``kvtui.hosts.service.follow``), the local
backend's scan back to the last server start (``kvtui.hosts.local``) and ``kvtui replay`` /
``calc --log`` (``read_log``, over byte chunks, with the prefilter of ``parse_chunks``).

- ``BootLog.feed(record)``: one record through the parser and the tracker; True when a boot
  began on it (the tracker holds one more boot than before).
- ``BootLog.feed_parsed(line)``: one line already parsed (``parse_chunks`` yields them).
- ``read_log(chunks)``: a whole saved log -> (boots, the detected input shape).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from kvtui.boot import Boot, BootTracker
from kvtui.engines.events import Engine, LogRecord, ParsedLine
from kvtui.engines.parse import LineParser, parse_chunks
from kvtui.engines.unknown import UnrecognisedShape


class BootLog:
    """A parser and a tracker wired together (``parser`` and ``tracker`` stay reachable: the
    monitor handles each parsed piece itself, and views read ``tracker.boots``).

    ``engine`` fixes the engine (None: detected from the log); ``max_boots`` bounds the boots
    kept (None keeps all, as ``replay`` does); ``clock`` gives "now" for year-less stamps."""

    __slots__ = ("parser", "tracker")

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        max_boots: int | None = 1000,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.parser = LineParser(engine, clock=clock)
        self.tracker = BootTracker(engine, max_boots=max_boots)

    @property
    def boots(self) -> list[Boot]:
        return self.tracker.boots

    @property
    def current(self) -> Boot | None:
        return self.tracker.current

    @property
    def engine(self) -> Engine | None:
        """The engine detected (or hinted) so far; None before any engine line."""
        return self.parser.engine

    def feed(self, rec: LogRecord) -> bool:
        """One record through the parser and the tracker; True when a boot began on it."""
        tracker = self.tracker
        before = len(tracker.boots)
        for parsed in self.parser.feed(rec):
            tracker.feed(parsed)
        return len(tracker.boots) > before

    def feed_all(self, records: Iterable[LogRecord]) -> None:
        for rec in records:
            self.feed(rec)

    def feed_parsed(self, parsed: ParsedLine) -> bool:
        """One line already parsed (by this log's ``parser``); True when a boot began on it."""
        tracker = self.tracker
        before = len(tracker.boots)
        tracker.feed(parsed)
        return len(tracker.boots) > before

    def finish(self) -> None:
        """End of input (a boot whose log ends on an exception is failed)."""
        self.tracker.finish()

    def unrecognised(self) -> list[UnrecognisedShape]:
        """The startup lines no rule recognised, one entry per shape (see ``BootTracker``)."""
        return self.tracker.all_unrecognised()


def read_log(
    chunks: Iterable[bytes],
    engine: Engine | None = None,
    *,
    clock: Callable[[], datetime] | None = None,
    unrecognised: list[UnrecognisedShape] | None = None,
    all_lines: bool = False,
) -> tuple[list[Boot], str | None]:
    """A whole saved log, as byte chunks cut anywhere, -> (every boot, the detected input shape).

    Lines that cannot change a boot are skipped (``parse_chunks``: the boots are the same) unless
    ``all_lines``.
    ``clock`` gives "now" for the year of year-less stamps (vLLM, journalctl ``short``) when the
    log itself does not say it. ``unrecognised``, when given, receives the startup lines no rule
    recognised, one entry per shape (``first_line``: the position among the lines read)."""
    log = BootLog(engine, max_boots=None, clock=clock)
    shape: list[str] = []
    feed = log.tracker.feed
    for parsed in parse_chunks(chunks, engine, all_lines=all_lines, parser=log.parser, shape_out=shape, clock=clock):
        feed(parsed)
    log.finish()
    if unrecognised is not None:
        unrecognised.extend(log.unrecognised())
    return log.boots, (shape[0] if shape else None)
