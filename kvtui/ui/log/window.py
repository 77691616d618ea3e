"""The log view's live window: its lines as the monitor's parts (``LogLine``s and ``LineRun``s,
see ``kvtui.updates.LogBatch``), each ``LogLine`` of a run built the first time it is read — a
row drawn, a search or filter pass, an error jump — and then kept. A storm's lines mostly pass
through the window unseen: building a ``LogLine`` for each was ~20 % of the ingest at ~50k
lines/s (bench/README.md)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from kvtui.progress_bars import BarRows, may_be_bar, redrawn_text
from kvtui.updates import LinePart, LineRun, LogLine, make_line


class LineWindow(Sequence[LogLine]):
    """A sequence of ``LogLine``s kept as parts: ``extend`` takes parts (a ``LogLine`` is one),
    ``del window[:n]`` drops the oldest ``n`` lines, indexing and iteration build what they read."""

    __slots__ = ("_built", "_end", "_len", "_off", "_parts", "_starts")

    def __init__(self, parts: Iterable[LinePart] = ()) -> None:
        self._parts: list[LinePart] = []
        self._built: list[list[LogLine | None] | None] = []  # per run: the lines built so far
        self._starts: list[int] = []  # where each part starts, counted from the first part ever kept
        self._off = 0  # lines dropped from the front of the first part
        self._len = 0
        self._end = 0  # the number of the next line added (counted from the first line ever kept)
        self.extend(parts)

    def __len__(self) -> int:
        return self._len

    def extend(self, parts: Iterable[LinePart]) -> None:
        end = self._end
        for p in parts:
            n = _size(p)
            if not n:
                continue
            self._parts.append(p)
            self._built.append(None)
            self._starts.append(end)
            end += n
            self._len += n
        self._end = end

    def text_lengths(self, last: int) -> int:
        """The longest text among the newest ``last`` lines (0 if none), building no line."""
        best = 0
        need = min(last, self._len)
        for j in range(len(self._parts) - 1, -1, -1):
            if need <= 0:
                break
            p = self._parts[j]
            if isinstance(p, LogLine):
                best = max(best, len(p.text))
                need -= 1
                continue
            texts = p.texts
            lo = max(len(texts) - need, self._off - self._starts[j], 0)
            if lo < len(texts):
                best = max(best, max(map(len, texts[lo:])))
            need -= len(texts) - lo
        return best

    def _line(self, j: int, k: int) -> LogLine:
        p = self._parts[j]
        if isinstance(p, LogLine):
            return p
        built = self._built[j]
        if built is None:
            built = self._built[j] = [None] * len(p.texts)
        line = built[k]
        if line is None:
            line = built[k] = p.line(k)
        return line

    @overload
    def __getitem__(self, index: int) -> LogLine: ...

    @overload
    def __getitem__(self, index: slice) -> list[LogLine]: ...

    def __getitem__(self, index: int | slice) -> LogLine | list[LogLine]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("LineWindow index out of range")
        a = self._starts[0] + self._off + index if self._starts else index
        j = bisect_right(self._starts, a) - 1
        return self._line(j, a - self._starts[j])

    def __iter__(self) -> Iterator[LogLine]:
        if not self._parts:
            return
        first = self._starts[0] + self._off
        for j, p in enumerate(self._parts):
            lo = max(first - self._starts[j], 0)
            for k in range(lo, _size(p)):
                yield self._line(j, k)

    def __delitem__(self, index: slice) -> None:
        """``del window[:n]``: the oldest ``n`` lines go (only that form is supported)."""
        if not isinstance(index, slice) or index.start not in (None, 0) or index.step not in (None, 1):
            raise TypeError("LineWindow supports del window[:n] only")
        n = min(max(index.stop if index.stop is not None else self._len, 0), self._len)
        if n <= 0:
            return
        self._len -= n
        if not self._len:
            self._parts.clear()
            self._built.clear()
            self._starts.clear()
            self._off = 0
            return
        a = self._starts[0] + self._off + n  # the new first line
        j = bisect_right(self._starts, a) - 1
        if j > 0:
            del self._parts[:j]
            del self._built[:j]
            del self._starts[:j]
        self._off = a - self._starts[0]


def _size(part: LinePart) -> int:
    return 1 if isinstance(part, LogLine) else len(part.texts)


class BarWindow(LineWindow):
    """A ``LineWindow`` of rows where a progress bar's consecutive redraws are one row that is
    redrawn in place (``kvtui.progress_bars.BarRows``), its text led by how many draws it stands
    for. A run of lines with no bar in it (a storm's serving lines) is kept as it came, at
    the cost of one substring search over its joined texts."""

    __slots__ = ("_bars",)

    def __init__(self) -> None:
        super().__init__()
        self._bars = BarRows()

    def feed(self, parts: Iterable[LinePart]) -> tuple[int, int]:
        """Add lines (oldest first): (the rows added, the longest text of a row redrawn in place,
        0 if none)."""
        bars = self._bars
        bars.forget_before(self.first_row)
        out: list[LinePart] = []
        row = self._end  # the number the next row gets
        added = 0
        redrawn = 0

        def flush() -> None:
            nonlocal added
            if out:
                n = sum(map(_size, out))
                self.extend(out)
                added += n
                out.clear()

        def redraw(placed: tuple[int, int], line: LogLine) -> None:
            """``line`` is a bar's next draw: it redraws the bar's row in place (or, that row
            gone, is a row of its own)."""
            nonlocal row, redrawn
            flush()
            if (n := self._redraw(placed, line)) < 0:
                out.append(line)
                row += 1
            redrawn = max(redrawn, n)

        for p in parts:
            if isinstance(p, LogLine):
                placed = bars.place(p.text, p.rank, row) if may_be_bar(p.text) else None
                if placed is None:
                    bars.other_lines()
                if placed is None or placed[1] == 1:
                    out.append(p)
                    row += 1
                else:
                    redraw(placed, p)
                continue
            texts = p.texts
            if not texts:
                continue
            if not may_be_bar("\n".join(texts)):
                bars.other_lines()
                out.append(p)
                row += len(texts)
                continue
            start = 0  # the first line of the run not yet placed
            for k, text in enumerate(texts):
                if not may_be_bar(text):
                    bars.other_lines()
                    continue
                placed = bars.place(text, p.ranks[k], row + (k - start))
                if placed is None:
                    continue  # no bar after all: stays in the run
                if k > start:
                    out.append(_slice(p, start, k))
                    row += k - start
                line = p.line(k)
                start = k + 1
                if placed[1] == 1:
                    out.append(line)
                    row += 1
                else:
                    redraw(placed, line)
            if start < len(texts):
                out.append(_slice(p, start, len(texts)) if start else p)
                row += len(texts) - start
        flush()
        return added, redrawn

    def _redraw(self, placed: tuple[int, int], line: LogLine) -> int:
        """``line`` redraws the bar on row ``placed[0]``: it takes that row; its text's length, or
        -1 when the row is not kept (never: rows dropped before a feed are forgotten then) and the
        caller adds it as a row."""
        row, draws = placed
        shown = make_line(line.seq, redrawn_text(line.text, draws), line.ts, line.rank, line.boot, line.style)
        return len(shown.text) if self.replace(row, shown) else -1

    @property
    def first_row(self) -> int:
        """The number of the oldest row kept (rows are numbered from 0 as they are added)."""
        return self._starts[0] + self._off if self._starts else self._end

    def replace(self, row: int, line: LogLine) -> bool:
        """Put ``line`` on row ``row`` (a row added as a ``LogLine``); False when it is not kept."""
        if not self._starts or not self.first_row <= row < self._end:
            return False
        j = bisect_right(self._starts, row) - 1
        if self._starts[j] != row or not isinstance(self._parts[j], LogLine):
            return False
        self._parts[j] = line
        return True


def _slice(run: LineRun, a: int, b: int) -> LineRun:
    return LineRun(run.first + a, run.boot, run.texts[a:b], run.ts[a:b], run.ranks[a:b], run.styles[a:b])
