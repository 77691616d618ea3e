"""The log view's live window: its lines as the monitor's parts (``LogLine``s and ``LineRun``s,
see ``kvtui.updates.LogBatch``), each ``LogLine`` of a run built the first time it is read — a
row drawn, a search or filter pass, an error jump — and then kept. A storm's lines mostly pass
through the window unseen: building a ``LogLine`` for each was ~20 % of the ingest at ~50k
lines/s (bench/README.md)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from kvtui.updates import LinePart, LogLine


class LineWindow(Sequence[LogLine]):
    """A sequence of ``LogLine``s kept as parts: ``extend`` takes parts (a ``LogLine`` is one),
    ``del window[:n]`` drops the oldest ``n`` lines, indexing and iteration build what they read."""

    __slots__ = ("_built", "_len", "_off", "_parts", "_starts")

    def __init__(self, parts: Iterable[LinePart] = ()) -> None:
        self._parts: list[LinePart] = []
        self._built: list[list[LogLine | None] | None] = []  # per run: the lines built so far
        self._starts: list[int] = []  # where each part starts, counted from the first part ever kept
        self._off = 0  # lines dropped from the front of the first part
        self._len = 0
        self.extend(parts)

    def __len__(self) -> int:
        return self._len

    def extend(self, parts: Iterable[LinePart]) -> None:
        end = self._starts[-1] + _size(self._parts[-1]) if self._parts else 0
        for p in parts:
            n = _size(p)
            if not n:
                continue
            self._parts.append(p)
            self._built.append(None)
            self._starts.append(end)
            end += n
            self._len += n

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
