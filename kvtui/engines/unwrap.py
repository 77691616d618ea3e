"""Hard-wrapped captures: a terminal's scrollback or ``tmux capture-pane`` cuts lines at a fixed width.

``wrap_widths(head)`` finds the widths a capture cuts its lines at (from the first 64 KiB of the
log); ``Unwrapper`` joins the pieces back into one line each before they are parsed
(``parse_chunks`` does this for the raw, cat and docker shapes).

Pure core: no I/O; no textual/asyncssh.
"""

from __future__ import annotations

import re

from kvtui.engines.text import strip_ansi

_MIN_WRAP = 60
# a line that starts a record of its own (an engine prefix or a timestamp), never a continuation
_RECORD_START_RE = re.compile(
    rb"[\[(]|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[ :]|\d{4}-\d\d-\d\d|[A-Z][a-z]{2} [ \d]\d "
)


def _columns(line: bytes) -> int:
    text = line.decode("utf-8", "replace")
    if "\x1b" in text:
        text = strip_ansi(text)
    return len(text.rstrip("\r"))


_LEADING_ANSI_RE = re.compile(rb"(?:\x1b\[[0-9;?]*[A-Za-z])+")


def _starts_record(line: bytes) -> bool:
    """Does the line start a record of its own (colours before its prefix allowed)?"""
    if line[:1] == b"\x1b":
        m = _LEADING_ANSI_RE.match(line)
        if m is not None:
            line = line[m.end() :]
    return _RECORD_START_RE.match(line) is not None


def _is_bar(line: bytes) -> bool:
    return b"%|" in line or b"% Completed |" in line


def _signature(line: bytes) -> bytes:
    """How a line starts (ANSI stripped, digits masked): records of one log share a few of these."""
    if b"\x1b" in line[:40]:
        line = strip_ansi(line[:80].decode("utf-8", "replace")).encode()
    return bytes(48 if 48 <= c <= 57 else c for c in line[:12])


def wrap_widths(head: bytes) -> frozenset[int]:
    """The columns a hard-wrapped capture cuts its lines at (``…Graph capturing finished in 11`` /
    `` secs, took 1.00 GiB``; a capture can change width midway), or an empty set when the log is
    not wrapped. A width counts when lines of exactly that width are a spike in the log's widths
    (more than twice as many as of any width within 2 columns) and, mostly, are followed by a line that
    starts the way no common record of the log starts (a cut-off piece: ``took 7.12 GiB …``,
    ``ds``, ``e/vllm/…``) nor the way the cut line itself starts (eight rank lines of one width
    under a collector prefix are eight records, not pieces), at least 3 different ones."""
    lines = head.split(b"\n")[:-1]
    if len(lines) < 8:
        return frozenset()
    sigs = [_signature(ln) for ln in lines]
    counts: dict[bytes, int] = {}
    for sg in sigs:
        counts[sg] = counts.get(sg, 0) + 1
    by_width: dict[int, list[int]] = {}
    for i, ln in enumerate(lines[:-1]):
        if len(ln) >= _MIN_WRAP:
            by_width.setdefault(_columns(ln), []).append(i)
    out: set[int] = set()
    for width, at in by_width.items():
        if width < _MIN_WRAP or len(at) < 4:
            continue
        near = max(len(by_width.get(width + d, ())) for d in (-2, -1, 1, 2))
        if len(at) < 2 * near + 2:
            continue  # no spike: lines of about this width are just common here, not cut
        # how records of this log start: the starts of lines that do not follow a line of this width
        after: dict[bytes, int] = {}
        for i in at:
            after[sigs[i + 1]] = after.get(sigs[i + 1], 0) + 1
        others = len(lines) - len(at)
        common = {
            sg for sg, n in counts.items() if (n - after.get(sg, 0)) * 20 >= others and n - after.get(sg, 0) >= 3
        }
        cont = [
            lines[i]
            for i in at
            if lines[i + 1].strip()
            and sigs[i + 1] not in common
            and sigs[i + 1] != sigs[i]  # starts as the line before it does: a record of its own, not a piece
            and not _starts_record(lines[i + 1])
            and not _is_bar(lines[i])
            and not _is_bar(lines[i + 1])
            and not lines[i][:1].isspace()
        ]
        if len(set(cont)) >= 3 and len(cont) * 5 >= len(at) * 3:
            out.add(width)
    return frozenset(out) if len(out) <= 4 else frozenset()  # a capture has a width or a few


class Unwrapper:
    """Joins the pieces of hard-wrapped lines (see ``wrap_widths``) back into one line each. A line
    of exactly a wrap width is continued by the next one unless that one starts a record."""

    def __init__(self, widths: frozenset[int]) -> None:
        self.widths = widths
        self._least = min(widths)
        self._held: bytes | None = None

    def feed(self, lines: list[bytes]) -> list[bytes]:
        out: list[bytes] = []
        held = self._held
        widths = self.widths
        least = self._least
        for ln in lines:
            if held is not None:
                if ln and not _starts_record(ln) and not _is_bar(ln):
                    cols = _columns(ln)
                    joined = held.rstrip(b"\r") + ln
                    if cols in widths:  # the piece is a full row itself: the line goes on
                        held = joined
                    else:
                        out.append(joined)
                        held = None
                    continue
                out.append(held)
                held = None
            if len(ln) >= least and not _is_bar(ln) and _columns(ln) in widths:
                held = ln
            else:
                out.append(ln)
        self._held = held
        return out

    def flush(self) -> list[bytes]:
        held, self._held = self._held, None
        return [held] if held is not None else []
