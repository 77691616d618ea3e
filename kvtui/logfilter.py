"""The log's ``&`` filters (pure: no textual, no I/O): a :class:`FilterSet` of "in" filters (show
only lines that match one of them) and "out" filters (``!text``: hide lines that match), as lnav
does — a line is shown if it matches any in-filter (when there is one) and no out-filter.

A filter's text is one of:

* a rank: ``TP3``, ``DP0 TP1``, ``Worker_TP2`` (the line's parsed rank, as before);
* a regular expression when it holds a regex metacharacter — ``|``, ``(``, ``)``, ``[``, ``\\``,
  ``^``, ``$``, ``*``, ``+``, ``?``, ``{`` (``.`` alone does not count: ``mem=12.5`` is text).
  A text that is not a valid expression (``(bs=``) is taken as plain text, and says so;
* plain text otherwise.

Both are smart case: case-insensitive unless the text has an upper-case letter (a regex escape
such as ``\\S`` does not count).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class Line(Protocol):
    """What a filter reads of a line (``kvtui.updates.LogLine`` is one)."""

    @property
    def text(self) -> str: ...

    @property
    def rank(self) -> str | None: ...

_RANK_TOKEN = r"(?:DP|TP|PP|EP|CP)\d+"
_RANK_RE = re.compile(rf"^(?:[A-Za-z]+_)?{_RANK_TOKEN}(?:\s+(?:[A-Za-z]+_)?{_RANK_TOKEN})*$", re.IGNORECASE)
_SPLIT_RANK = re.compile(r"[\s_]+")
_REGEX_HINT = re.compile(r"[|()\[\]\\^$*+?{]")
_ESCAPE = re.compile(r"\\.")


def rank_tokens(rank: str) -> set[str]:
    return {t.upper() for t in _SPLIT_RANK.split(rank) if t}


def is_rank(text: str) -> bool:
    return _RANK_RE.match(text) is not None


def smart_ignore_case(text: str, *, regex: bool = False) -> bool:
    """No upper-case letter (outside a regex's escapes): the match ignores case."""
    if regex:
        text = _ESCAPE.sub("", text)
    return text == text.lower()


@dataclass(frozen=True, slots=True)
class LineFilter:
    """One ``&`` filter: ``raw`` as typed (``!Decode``, ``Prefill|Capture``, ``TP3``)."""

    raw: str
    rank: str | None = None  # a rank filter
    text: str = ""  # a text filter's text (without the ``!``)
    negate: bool = False  # an out-filter: hides the lines it matches
    regex: bool = False  # ``text`` is a regular expression
    note: str = ""  # why the text was taken as plain text (an invalid expression)

    @classmethod
    def parse(cls, raw: str) -> LineFilter | None:
        raw = raw.strip()
        negate = raw.startswith("!")
        body = raw[1:].strip() if negate else raw
        if not body:
            return None
        if is_rank(body):
            return cls(raw=raw, rank=body, negate=negate)
        note = ""
        regex = _REGEX_HINT.search(body) is not None
        if regex:
            try:
                re.compile(body)
            except re.error as exc:
                regex, note = False, f"not a valid regular expression ({exc}): taken as plain text"
        return cls(raw=raw, text=body, negate=negate, regex=regex, note=note)

    @property
    def ignore_case(self) -> bool:
        return smart_ignore_case(self.text, regex=self.regex)

    @property
    def pattern(self) -> str:
        """The text filter as a Python regular expression (smart case inside it)."""
        body = self.text if self.regex else re.escape(self.text)
        return f"(?i:{body})" if self.ignore_case else f"(?:{body})"

    def compiled(self) -> re.Pattern[str]:
        return _compiled(self.pattern)

    def hits(self, text: str, rank: str | None) -> bool:
        """Whether the line is one this filter names (``negate`` not applied)."""
        if self.rank is not None:
            if rank is None:
                return False
            return rank_tokens(self.rank) <= rank_tokens(rank) or self.rank.upper() == rank.upper()
        return self.compiled().search(text) is not None

    @property
    def chip(self) -> str:
        """``+Prefill|Capture`` / ``-Decode`` / ``+TP3`` (the status line's chips)."""
        return f"{'-' if self.negate else '+'}{self.rank if self.rank is not None else self.text}"


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    rx = _CACHE.get(pattern)
    if rx is None:
        if len(_CACHE) > 256:
            _CACHE.clear()
        rx = _CACHE[pattern] = re.compile(pattern)
    return rx


@dataclass(frozen=True, slots=True)
class FilterSet:
    """The active filters, oldest first (lnav's in/out filters)."""

    filters: tuple[LineFilter, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.filters)

    def __len__(self) -> int:
        return len(self.filters)

    @property
    def ins(self) -> tuple[LineFilter, ...]:
        return tuple(f for f in self.filters if not f.negate)

    @property
    def outs(self) -> tuple[LineFilter, ...]:
        return tuple(f for f in self.filters if f.negate)

    def added(self, flt: LineFilter) -> FilterSet:
        """With ``flt`` (the same filter twice is one)."""
        if flt in self.filters:
            return self
        return FilterSet((*self.filters, flt))

    def without_last(self) -> FilterSet:
        return FilterSet(self.filters[:-1])

    def matches(self, line: Line) -> bool:
        """Whether ``line`` is shown."""
        return self.matches_text(line.text, line.rank)

    def matches_text(self, text: str, rank: str | None) -> bool:
        """Shown: it matches an in-filter (when there is one) and no out-filter."""
        ins_seen = False
        ins_hit = False
        for f in self.filters:
            if f.negate:
                if f.hits(text, rank):
                    return False
            elif not ins_hit:
                ins_seen = True
                ins_hit = f.hits(text, rank)
        return ins_hit or not ins_seen

    def filter(self, lines: Iterable[tuple[str, str | None]]) -> list[int]:
        """The indices of the ``(text, rank)`` pairs that pass."""
        return [i for i, (text, rank) in enumerate(lines) if self.matches_text(text, rank)]

    @property
    def raw(self) -> str:
        return " ".join(f"&{f.raw}" for f in self.filters)

    @property
    def chips(self) -> list[str]:
        return [f.chip for f in self.filters]

    @property
    def rank(self) -> str | None:
        """The rank when the set is that one rank filter (a search's spool read narrows by it)."""
        if len(self.filters) == 1 and self.filters[0].rank is not None and not self.filters[0].negate:
            return self.filters[0].rank
        return None

    @property
    def has_rank(self) -> bool:
        return any(f.rank is not None for f in self.filters)

    def spool_regex(self) -> str | None:
        """One Python regular expression a line's text matches exactly when the set's text filters
        pass it (for a spool search); None when the set has a rank filter (the text does not say)."""
        if self.has_rank or not self.filters:
            return None
        ins = "|".join(f.pattern for f in self.ins)
        outs = "|".join(f.pattern for f in self.outs)
        head = f"(?=.*?(?:{ins}))" if ins else ""
        tail = f"(?!.*?(?:{outs}))" if outs else ""
        return f"^{head}{tail}"

    @property
    def notes(self) -> list[str]:
        return [f"&{f.raw}: {f.note}" for f in self.filters if f.note]
