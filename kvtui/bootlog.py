"""The one core reader "records -> boots": a ``LineParser`` feeding a ``BootTracker``.

Pure core (no textual, no asyncssh, no I/O). Every reader of a log goes through it: the monitor
(live: ``plan``, ``parse``, ``track``; a resumed spool's replay: ``feed``; ``read_boots``), the
restart follower (``kvtui.hosts.service.follow``), the local backend's scan back to the last
server start (``kvtui.hosts.local``) and ``kvtui replay`` / ``calc --log`` (``read_log``, over
byte chunks, with the prefilter of ``parse_chunks``).

- ``BootLog.feed(record)``: one record through the parser and the tracker; True when a boot
  began on it (the tracker holds one more boot than before).
- ``BootLog.feed_parsed(line)``: one line already parsed (``parse_chunks`` yields them).
- ``BootLog.plan(texts, ts, idents)``: a live batch's lines that cannot change a boot (the live
  prefilter, when the log was made with ``live_prefilter=True``); ``BootLog.parse(record)`` then
  ``BootLog.track(piece)``: a record piece by piece, for a reader that spools and shows each piece
  (the monitor).
- ``read_log(chunks)``: a whole saved log -> (boots, the detected input shape).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from kvtui.boot import Boot, BootDelta, BootTracker
from kvtui.engines.events import Engine, LogRecord, ParsedLine
from kvtui.engines.parse import LineParser, LivePlan, LivePrefilter, parse_chunks
from kvtui.engines.text import strip_ansi
from kvtui.engines.unknown import UnrecognisedShape

ErrorSink = Callable[[str, LogRecord], None]
"""Told where (``"parser"``, ``"tracker"``) a record could not be read; the record is kept."""


def display_pieces(text: str) -> list[str]:
    """The physical lines of a record as the parser splits them, ANSI stripped."""
    if "\x1b" in text:
        text = strip_ansi(text)
    if "\r" in text or "\n" in text:
        return [p for p in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if p.strip()]
    return [text] if text and not text.isspace() else []


class BootLog:
    """A parser and a tracker wired together (views read ``tracker.boots``; the monitor spools and
    shows each parsed piece between ``parse`` and ``track``).

    ``engine`` fixes the engine (None: detected from the log); ``max_boots`` bounds the boots
    kept (None keeps all, as ``replay`` does); ``clock`` gives "now" for year-less stamps."""

    __slots__ = ("live", "parser", "tracker")

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        max_boots: int | None = 1000,
        clock: Callable[[], datetime] | None = None,
        live_prefilter: bool = False,
    ) -> None:
        self.parser = LineParser(engine, clock=clock)
        self.tracker = BootTracker(engine, max_boots=max_boots)
        # a live reader's prefilter (``plan``): lines that cannot change a boot are not parsed
        self.live: LivePrefilter | None = LivePrefilter() if live_prefilter else None

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

    def plan(
        self, texts: Sequence[str], ts: Sequence[datetime | None] | None, idents: Sequence[str | None] | None,
    ) -> LivePlan | None:
        """Which lines of a live batch (in columns) to parse: for a line that cannot change a boot,
        the style, timestamp and rank the parser would give it (``LivePrefilter.plan``); None: parse
        every line (a log made without ``live_prefilter``)."""
        live = self.live
        if live is None:
            return None
        return live.plan(texts, ts, idents, sglang=self.parser.engine is Engine.SGLANG)

    def parse(self, rec: LogRecord, on_error: ErrorSink) -> list[ParsedLine]:
        """One record through the parser, its pieces not tracked yet (``track`` each: a live reader
        spools and shows a piece before the next is tracked). A parser that fails on the record
        gives its display pieces unparsed, told to ``on_error``, never raised."""
        try:
            return self.parser.feed(rec)
        except Exception:
            on_error("parser", rec)
            return [ParsedLine(text=p, ts=rec.ts, record=rec) for p in display_pieces(rec.text)]

    def track(self, parsed: ParsedLine, rec: LogRecord, on_error: ErrorSink) -> BootDelta:
        """One piece of ``rec`` (from ``parse``) through the tracker; a tracker that fails on it
        gives an empty update, told to ``on_error``, never raised."""
        try:
            return self.tracker.feed(parsed)
        except Exception:
            on_error("tracker", rec)
            return BootDelta()

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
