"""tqdm progress bars in a log (pure: no textual, no I/O): which lines are a bar's redraws, and
which bar (:func:`bar_key`), and :class:`BarRows`, which folds the redraws of a bar that arrive
one after another into the row of its first one — the log view shows one row per bar that
updates in place (``Loading safetensors checkpoint shards: 45% Completed | 27/61 […]``,
``Capturing batches (bs=160 avail_mem=…): 100%|…| 36/36 […]``) instead of a redraw per shard or
capture batch. Every rank's redraws of the same bar, interleaved, keep a row each; any other line
ends the run (the next redraw starts a new row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# the whole line is a bar: description, percent, the bar or "Completed", n/total, [times]; text
# glued after the closing bracket (a log line written on the bar's row) makes it no bar
_BAR = re.compile(r"^(?P<desc>.*?)\s*(?P<pct>\d{1,3})%(?:\|[^|]*\|| Completed \|)\s*\d+/\d+\s*\[[^\]]*\]\s*$")
_HINT = re.compile(r"%(?:\|| Completed \|)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def may_be_bar(text: str) -> bool:
    """A quick test a bar passes: a storm's lines (or a run of them, joined) are looked at no
    further when it fails — a search for one character (memchr: ~2 µs for 1,000 serving lines;
    neither SGLang's nor vLLM's serving lines have a ``|``), then for the bar's own marks."""
    return "|" in text and _HINT.search(text) is not None


def bar_key(text: str, rank: str | None) -> str | None:
    """The bar ``text`` is a redraw of — its rank and description with the numbers taken out
    (``Capturing batches (bs=# avail_mem=# GB):``, the batch size changes every redraw) — or None
    when the line is no bar."""
    if not may_be_bar(text):
        return None
    m = _BAR.match(text)
    if m is None:
        return None
    return f"{rank or ''}\x00{_NUMBER.sub('#', m['desc'])}"


@dataclass(slots=True)
class _Bar:
    row: int  # the row the bar is drawn on (a number that only grows, see ``BarRows``)
    draws: int  # the redraws folded into it, its first one included


class BarRows:
    """Folds consecutive redraws of a bar into one row. Rows are numbered by the caller, in the
    order they are added, from 0, never reused (a row dropped from the front keeps its number).
    ``place`` says, for each new line, whether it is a new row or a redraw of a bar drawn on an
    earlier row (and how many draws that row now stands for)."""

    __slots__ = ("_bars",)

    def __init__(self) -> None:
        self._bars: dict[str, _Bar] = {}  # the bars of the current run of redraws

    def place(self, text: str, rank: str | None, row: int) -> tuple[int, int] | None:
        """A line that would be row ``row``: None when it is no bar; else (the bar's row, its
        draws): ``(row, 1)`` a bar's first draw (the caller adds the row), an earlier row and more
        draws when it redraws a bar of the current run (the caller puts it on that row)."""
        key = bar_key(text, rank)
        if key is None:
            if self._bars:
                self._bars.clear()
            return None
        bar = self._bars.get(key)
        if bar is None:
            blank = f"{rank or ''}\x00"
            bar = self._bars.pop(blank, None) if key != blank else None
            if bar is None:
                self._bars[key] = _Bar(row, 1)
                return row, 1
            self._bars[key] = bar  # tqdm's first draw has no description yet: the same bar
        bar.draws += 1
        return bar.row, bar.draws

    def other_lines(self) -> None:
        """Lines that are no bar (known without reading them) arrived: the run of redraws ends."""
        if self._bars:
            self._bars.clear()

    def forget_before(self, row: int) -> None:
        """Rows before ``row`` were dropped: a bar drawn there starts again on a new row."""
        if self._bars and any(b.row < row for b in self._bars.values()):
            self._bars = {k: b for k, b in self._bars.items() if b.row >= row}


def redrawn_text(text: str, draws: int) -> str:
    """A folded row's text: how many draws it stands for first (where a narrow log shows it),
    then the newest draw."""
    return f"[×{draws} redraws] {text}"
