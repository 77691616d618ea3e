"""The line dispatcher: records off the wire -> engine grammars -> ``ParsedLine``s.

``LineParser.feed(record)`` splits a record on ``\\r``/``\\n`` (tqdm redraws), strips ANSI,
recognises the systemd manager's own lines (``Started …``, ``Stopping …``, ``Main process
exited …``) as ``BootBoundary`` events, auto-detects the engine from the first lines that sniff
as SGLang or vLLM, and hands every line to that engine's grammar.

``parse_bytes(data)`` / ``parse_chunks(chunks)`` run a whole saved log through input-shape
detection (``kvtui.engines.shapes``), the unwrapping of hard-wrapped captures
(``kvtui.engines.unwrap``) and the parser. By default a ``Prefilter`` (``kvtui.engines.prefilter``)
first skips, on the raw bytes, what cannot change a boot — a run of serving lines keeps its first
line and each rank's last one, a run of redraws of one progress bar its first and last, HTTP access
lines go once the engine is known, nothing goes near a failure — which is what makes ``kvtui
replay`` fast on multi-GB logs; ``all_lines=True`` yields every line. The boots a
``BootTracker`` builds are the same either way (a property test checks it). The live path
(``LineParser.feed`` per record) sees every line.

Pure core: no I/O beyond the bytes it is given; no textual/asyncssh.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Final, Protocol

from kvtui.engines.collector import PrefixLayer
from kvtui.engines.events import (
    BootBoundary,
    BoundaryKind,
    Engine,
    FailureText,
    LogEvent,
    LogRecord,
    ParsedLine,
)
from kvtui.engines.exit_record import EXIT_IDENT, parse_exit
from kvtui.engines.prefilter import LivePlan, LivePrefilter, Prefilter
from kvtui.engines.sglang import SglangGrammar
from kvtui.engines.shapes import detect_shape, iter_records
from kvtui.engines.source_records import parse_source_record
from kvtui.engines.text import MAX_LINE_CHARS, strip_ansi
from kvtui.engines.unwrap import Unwrapper, wrap_widths
from kvtui.engines.vllm import VllmGrammar

# re-exported: the prefilters and the unwrapper were part of this module
__all__ = [
    "Grammar",
    "LineParser",
    "LivePlan",
    "LivePrefilter",
    "Prefilter",
    "Unwrapper",
    "parse_bytes",
    "parse_chunks",
    "systemd_events",
    "wrap_widths",
]


class Grammar(Protocol):
    """What an engine grammar offers (``SglangGrammar``, ``VllmGrammar``)."""

    @property
    def engine(self) -> Engine: ...

    def sniff(self, text: str) -> bool: ...

    def parse(self, text: str, ts: datetime | None = None) -> ParsedLine: ...

    def reset(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# systemd manager lines (`journalctl -u UNIT` interleaves them with the service's output)
# ---------------------------------------------------------------------------------------------

# Without a syslog identifier (``journalctl -o cat``) only unambiguous shapes are accepted.
_SYSTEMD_PLAIN_RE = re.compile(r"^(?:Started|Stopping|Stopped) [^\[\]]{1,300}?\.(?:\.\.)?$")
_SYSTEMD_UNIT_RE = re.compile(
    r"^[\w@.:\\-]+\.service: (?:Main process exited|Failed with result|Scheduled restart job|Deactivated successfully)"
)
_EXIT_OK_RE = re.compile(r"code=exited, status=0/SUCCESS")
# A tqdm bar with a log line glued to its end (no newline in between), e.g.
# `Capturing batches (…): 0%|  | 0/8 [00:00<?, ?it/s][2026-02-09 14:38:28] Attempting …`.
_GLUED_STAMP_RE = re.compile(r"(?<=\])\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
# the end of a tqdm bar: `[00:04<00:00, 10.83it/s]`, `[00:00<?, ?it/s]`, `[01:02<3:04:05,  2.57s/it]`
_BAR_END_RE = re.compile(r"\[(?:\d+:)?\d\d:\d\d<(?:(?:\d+:)?\d\d:\d\d|\?), *(?:\d+(?:\.\d+)?|\?) ?(?:it/s|s/it)\]")


def systemd_events(text: str) -> tuple[LogEvent, ...]:
    """The ``BootBoundary`` (and, for a failed exit, ``FailureText``) of a systemd manager line."""
    if text.startswith("Started "):
        return (BootBoundary(BoundaryKind.STARTED),)
    if text.startswith("Stopping ") or text.startswith("Stopped "):
        return (BootBoundary(BoundaryKind.STOPPING),)
    if "Scheduled restart job" in text:
        return (BootBoundary(BoundaryKind.RESTART_SCHEDULED),)
    if "Deactivated successfully" in text:
        return (BootBoundary(BoundaryKind.STOPPING),)
    if "Main process exited" in text:
        if _EXIT_OK_RE.search(text):
            return (BootBoundary(BoundaryKind.PROCESS_EXITED),)
        return _exit_failed(text, "status=9/KILL")
    if "Failed with result" in text:
        return _exit_failed(text, "'oom-kill'")
    return ()


# what a failed exit line holds -> the hint it gets
_EXIT_HINTS: Final = {
    "status=9/KILL":
        "the server was killed with SIGKILL: the host's OOM killer (dmesg -T | grep -i oom) or an operator",
    "'oom-kill'": "the kernel's OOM killer ended the service (host RAM, not GPU memory): check dmesg -T | grep -i oom",
}


def _exit_failed(text: str, sign: str) -> tuple[LogEvent, ...]:
    """The unit's process ended badly: a boundary and a fatal failure text, hinted where ``sign`` is in it."""
    return (
        BootBoundary(BoundaryKind.PROCESS_EXITED),
        FailureText(text, None, fatal=True, specificity=0, hint=_EXIT_HINTS[sign] if sign in text else None),
    )


def _is_plain_systemd(text: str) -> bool:
    c = text[:1]
    if c == "S" and (text.startswith("Started ") or text.startswith("Stopping ") or text.startswith("Stopped ")):
        return "server process" not in text and _SYSTEMD_PLAIN_RE.match(text) is not None
    return ".service: " in text and _SYSTEMD_UNIT_RE.match(text) is not None


# ---------------------------------------------------------------------------------------------
# LineParser
# ---------------------------------------------------------------------------------------------


class LineParser:
    """Records -> parsed lines, for one stream (one host's journal or one file).

    ``engine_hint`` fixes the engine; otherwise the first line that sniffs as SGLang or vLLM
    decides, and a later boot of the other engine (its argument dump / banner) switches over.
    """

    def __init__(self, engine_hint: Engine | None = None, *, clock: Callable[[], datetime] | None = None) -> None:
        self._sglang = SglangGrammar()
        self._vllm = VllmGrammar(clock=clock)  # the year of vLLM's year-less stamps when no wrapper has one
        self._grammars: list[Grammar] = [self._sglang, self._vllm]
        self.engine_hint = engine_hint
        self._grammar: Grammar | None = None
        self._prefixes = PrefixLayer(clock)  # a log collector's prefix before the engine's lines
        self._record_ts: datetime | None = None  # the timestamp of the record being fed
        if engine_hint is Engine.SGLANG:
            self._grammar = self._sglang
        elif engine_hint is Engine.VLLM:
            self._grammar = self._vllm

    @property
    def engine(self) -> Engine | None:
        """The engine detected (or hinted) so far; None before any engine line."""
        return self._grammar.engine if self._grammar is not None else None

    def reset(self) -> None:
        """A boot boundary: every grammar forgets its per-boot state."""
        for g in self._grammars:
            g.reset()

    def prime(self, records: Iterable[LogRecord], limit: int = 4000) -> None:
        """Learn a collector's prefix from the head of a saved log before parsing it, so that the
        lines before the first one that reveals it (a banner, a warning) lose it too."""
        layer = self._prefixes
        n = 0
        for rec in records:
            text = strip_ansi(rec.text) if "\x1b" in rec.text else rec.text
            for piece in text.replace("\r", "\n").split("\n") if ("\r" in text or "\n" in text) else (text,):
                if not piece or (layer.learned and layer.cut(piece) is not None):
                    continue
                if _is_plain_systemd(piece) or any(g.sniff(piece) for g in self._grammars):
                    continue
                layer.find(piece)
                n += 1
                if n >= limit:
                    return

    def feed(self, record: LogRecord) -> list[ParsedLine]:
        """One record -> its lines (a record may hold several ``\\r``-joined tqdm redraws)."""
        text = record.text
        if "\x1b" in text:
            text = strip_ansi(text)
        if "\r" in text or "\n" in text:
            out: list[ParsedLine] = []
            self._record_ts = record.ts
            for piece in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
                if piece.strip():
                    self._feed_piece(piece, record, out)
            self._record_ts = None
            return out
        if not text or text.isspace():
            return []
        out = []
        self._record_ts = record.ts
        self._feed_piece(text, record, out)
        self._record_ts = None
        return out

    def _feed_piece(self, piece: str, record: LogRecord, out: list[ParsedLine]) -> None:
        if len(piece) > MAX_LINE_CHARS:
            piece = piece[:MAX_LINE_CHARS]
        if "it/s]" in piece or "s/it]" in piece:
            # lines glued to the end of a progress bar that ended without a newline of its own
            # (`…| 0/67 [00:00<?, ?it/s](EngineCore_DP0 pid=7) INFO … Graph capturing finished …`)
            pos = 0
            for bar in _BAR_END_RE.finditer(piece):
                end = bar.end()
                if end < len(piece) and not piece[end].isspace():  # glued: no space between
                    self._emit(piece[pos:end], record, out)
                    pos = end
            if pos:
                piece = piece[pos:]
        if "][20" in piece and not piece.startswith("["):
            m = _GLUED_STAMP_RE.search(piece)
            if m is not None and "|" in piece[: m.start()]:
                self._emit(piece[: m.start()], record, out)
                piece = piece[m.start() :]
        self._emit(piece, record, out)

    def _emit(self, text: str, record: LogRecord, out: list[ParsedLine]) -> None:
        """One line: a learned collector prefix comes off first; a line the engines do not read
        from its start is searched for the engine line inside it (``PrefixLayer``)."""
        ts = self._record_ts  # the record's, or the collector's from an earlier piece of the record
        layer = self._prefixes
        stripped = layer.cut(text) if layer.learned else None
        if stripped is not None:
            text, pts = stripped
            if not text or text.isspace():
                return  # the collector's prefix and nothing else
            if pts is not None and ts is None:
                ts = self._record_ts = pts
        parsed = self._parse(text, record, ts)
        if stripped is None and not parsed.prefixed:
            found = layer.find(text, heads_only=parsed.engine is not None)
            if found is not None:
                rest, pts = found
                if pts is not None and ts is None:
                    ts = self._record_ts = pts
                inner = self._parse(rest, record, ts)
                if inner.engine is not None or inner.prefixed:
                    parsed = inner
        out.append(parsed)

    def _parse(self, text: str, record: LogRecord, ts: datetime | None) -> ParsedLine:
        ident = record.ident
        if ident == EXIT_IDENT:  # the backend saw the server process gone (kvtui.liveness)
            gone = parse_exit(text)
            if gone is not None:
                return ParsedLine(text=text, ts=record.ts, events=(gone,), record=record, prefixed=True)
            said = parse_source_record(text)  # a gap, a start not in the log, the process's command
            if said is not None:
                return ParsedLine(text=text, ts=record.ts, events=(said,), record=record, prefixed=True, known=True)
        if ident == "systemd" or (ident is None and _is_plain_systemd(text)):
            events = systemd_events(text)
            if events:
                kind = events[0].kind if isinstance(events[0], BootBoundary) else None
                if kind is BoundaryKind.STARTED or kind is BoundaryKind.STOPPING:
                    self.reset()
            return ParsedLine(text=text, ts=ts, events=events, record=record, prefixed=True)
        grammar = self._grammar
        if grammar is None:
            for g in self._grammars:
                if g.sniff(text):
                    grammar = self._grammar = g
                    break
            else:
                return ParsedLine(text=text, ts=ts, record=record)
        parsed = grammar.parse(text, ts)
        if parsed.engine is None and self.engine_hint is None:
            parsed = self._maybe_switch(grammar, text, ts, parsed)
        parsed.record = record
        if not parsed.prefixed and parsed.level is not None:
            parsed.prefixed = True
        return parsed

    def _maybe_switch(self, current: Grammar, text: str, ts: datetime | None, parsed: ParsedLine) -> ParsedLine:
        """A line the current engine does not claim: a new boot of the other engine?"""
        for g in self._grammars:
            if g is current or not g.sniff(text):
                continue
            other = g.parse(text, ts)
            for ev in other.events:
                if isinstance(ev, BootBoundary) and ev.kind is BoundaryKind.STARTED:
                    self._grammar = g
                    current.reset()
                    return other
        return parsed


# ---------------------------------------------------------------------------------------------
# Whole logs: shapes -> prefilter -> LineParser
# ---------------------------------------------------------------------------------------------

_HEAD_BYTES = 64 * 1024



RecordsFn = Callable[[bytes, str], Iterable[LogRecord]]


def parse_chunks(
    chunks: Iterable[bytes],
    engine_hint: Engine | None = None,
    *,
    all_lines: bool = False,
    parser: LineParser | None = None,
    shape_out: list[str] | None = None,
    clock: Callable[[], datetime] | None = None,
    shape: str | None = None,
) -> Iterator[ParsedLine]:
    """A whole log, given as byte chunks cut anywhere, -> parsed lines in order.

    The input shape (raw, journalctl short/short-iso/short-precise/cat/json, docker logs) is
    detected from the first 64 KiB. Unless ``all_lines``, lines that cannot change a boot are
    skipped (see the module docstring); the boots a ``BootTracker`` builds are the same either
    way. ``shape_out``, when given, receives the detected shape. ``clock`` gives "now" for the year
    of year-less stamps (journalctl ``short``, vLLM) when nothing in the log says it. ``shape``
    skips the detection (a part of a log whose head was already seen).
    """

    def records(data: bytes, shape: str) -> Iterable[LogRecord]:
        return iter_records(data, shape, now=clock)

    parser = parser if parser is not None else LineParser(engine_hint, clock=clock)
    prefilter = None if all_lines else Prefilter(parser)
    if shape is not None and shape_out is not None:
        shape_out.append(shape)
    unwrap: Unwrapper | None = None
    rest = b""  # the partial last line of the chunks so far (all of the head until the shape is known)
    for chunk in chunks:
        if not chunk:
            continue
        if shape is None:
            rest = rest + chunk if rest else chunk
            if len(rest) < _HEAD_BYTES:
                continue
            shape = detect_shape(rest[:_HEAD_BYTES])
            if shape_out is not None:
                shape_out.append(shape)
            head = rest[:_HEAD_BYTES]
            parser.prime(records(head[: head.rfind(b"\n") + 1], shape))
            widths = wrap_widths(head) if shape in ("raw", "cat", "docker") else frozenset()
            unwrap = Unwrapper(widths) if widths else None
            lines = rest.split(b"\n")
        else:
            lines = chunk.split(b"\n")  # no copy of the chunk: the carried partial line joins its first piece
            if rest:
                lines[0] = rest + lines[0]
        rest = lines.pop()
        if len(rest) > MAX_LINE_CHARS * 4:  # a runaway line without a newline: hand it over, it gets cut
            lines.append(rest)
            rest = b""
        if unwrap is not None:
            lines = unwrap.feed(lines)
        if lines:
            yield from _parse_lines(lines, shape, parser, prefilter, records)
    if shape is None:
        if not rest:
            return
        shape = detect_shape(rest[:_HEAD_BYTES])
        if shape_out is not None:
            shape_out.append(shape)
        parser.prime(records(rest[:_HEAD_BYTES], shape))
        widths = wrap_widths(rest[:_HEAD_BYTES] + b"\n") if shape in ("raw", "cat", "docker") else frozenset()
        unwrap = Unwrapper(widths) if widths else None
    last = rest.split(b"\n") if rest else []
    if unwrap is not None:
        last = unwrap.feed(last) + unwrap.flush()
    if last:
        yield from _parse_lines(last, shape, parser, prefilter, records)
    if prefilter is not None:
        kept = prefilter.flush()
        if kept:
            yield from _parse_lines(kept, shape, parser, None, records)


def _parse_lines(
    lines: list[bytes], shape: str, parser: LineParser, prefilter: Prefilter | None, records: RecordsFn
) -> Iterator[ParsedLine]:
    if prefilter is not None:
        lines = prefilter.filter(lines)
        if not lines:
            return
    for rec in records(b"\n".join(lines), shape):
        yield from parser.feed(rec)


def parse_bytes(
    data: bytes,
    engine_hint: Engine | None = None,
    *,
    all_lines: bool = False,
    clock: Callable[[], datetime] | None = None,
) -> Iterator[ParsedLine]:
    """A whole saved log (any supported shape) -> parsed lines. See ``parse_chunks``."""
    return parse_chunks((data,), engine_hint, all_lines=all_lines, clock=clock)
