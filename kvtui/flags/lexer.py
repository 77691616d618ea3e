"""Lexing a unit's ``ExecStart=`` or a shell script into words with their exact positions.

A ``Word`` keeps its raw bytes and where they stand (``[start, end)``), so an edit can replace
exactly the bytes of one value. Unit lines follow systemd's rules (``\\`` continuations with
comment lines inside, C escapes, ``;`` as a command separator); script lines follow the shell's
(quotes, ``$(…)``/``${…}``/backquotes marked dynamic, operators, comments, fd redirections).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from kvtui.flags.errors import FlagError

Kind = Literal["unit", "script"]


@dataclass(frozen=True, slots=True)
class Word:
    """One word of a command: ``raw`` exactly as in the text at ``[start, end)``, ``value``
    after quote removal; ``dynamic`` when it holds a ``$`` expansion or command substitution."""

    raw: str
    value: str
    start: int
    end: int
    dynamic: bool = False

    @property
    def fully_quoted(self) -> str | None:
        """The quote character when the whole word is one quoted string (``"x"``, ``'x'``)."""
        r = self.raw
        if len(r) >= 2 and r[0] in "\"'" and r[-1] == r[0] and r[0] not in r[1:-1]:
            return r[0]
        return None


@dataclass(frozen=True, slots=True)
class _Op:
    text: str
    start: int
    end: int


_Item = Word | _Op
_SHELL_OPS = ("&&", "||", ";;", "|&", ">>", "<<<", "<<-", "<<", ">&", "<&", "&>>", "&>", ">|", "<>", ";", "&", "|",
              "(", ")", "<", ">")
_SHELL_OPS_SORTED = tuple(sorted(_SHELL_OPS, key=len, reverse=True))
_CONTROL_OPS = frozenset({"&&", "||", ";;", "|&", ";", "&", "|", "(", ")"})
_ASSIGN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _line_no(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _line_at(text: str, pos: int) -> tuple[int, str]:
    """The end of the physical line that starts at ``pos`` (its newline, or the text's end), and
    the line."""
    nl = text.find("\n", pos)
    end = len(text) if nl < 0 else nl
    return end, text[pos:end]


def _unit_continuation(text: str, i: int) -> int | None:
    """If ``text[i]`` is a backslash that ends a unit line (trailing blanks allowed), return the
    index just past the newline (and past comment lines inside the continuation)."""
    j = i + 1
    n = len(text)
    while j < n and text[j] in " \t\r":
        j += 1
    if j < n and text[j] != "\n":
        return None
    if j >= n:
        return n
    j += 1
    # systemd ignores comment lines inside a continuation
    while j < n:
        k = j
        while k < n and text[k] in " \t":
            k += 1
        if k < n and text[k] in "#;":
            nl = text.find("\n", k)
            j = n if nl < 0 else nl + 1
            continue
        break
    return j


class _Lexer:
    def __init__(self, text: str, kind: Kind) -> None:
        self.text = text
        self.kind = kind
        self.n = len(text)

    def _err(self, pos: int, what: str) -> FlagError:
        return FlagError(f"line {_line_no(self.text, pos)}: {what}")

    def logical_line(self, pos: int) -> tuple[list[_Item], int]:
        """Lex one logical line starting at ``pos``; return its items and the index of the newline
        that ends it (or ``len(text)``)."""
        text, n, unit = self.text, self.n, self.kind == "unit"
        items: list[_Item] = []
        i = pos
        while i < n:
            c = text[i]
            if c in " \t" or (unit and c == "\r"):
                i += 1
                continue
            if c == "\n":
                return items, i
            if c == "\\":
                if unit:
                    nxt = _unit_continuation(text, i)
                    if nxt is not None:
                        i = nxt
                        continue
                elif i + 1 < n and text[i + 1] == "\n":
                    i += 2
                    continue
            if not unit:
                if c == "#":
                    nl = text.find("\n", i)
                    return items, n if nl < 0 else nl
                op = self._op_at(i)
                if op is not None:
                    items.append(_Op(op, i, i + len(op)))
                    i += len(op)
                    continue
            word, i, op_follows = self._word(i)
            if not unit and op_follows and word.raw.isdigit() and text[i] in "<>":
                # a file-descriptor number glued to a redirection: 2>&1
                op = self._op_at(i) or text[i]
                items.append(_Op(word.raw + op, word.start, i + len(op)))
                i += len(op)
                continue
            if unit and word.raw == ";":
                items.append(_Op(";", word.start, word.end))
                continue
            items.append(word)
        return items, n

    def _op_at(self, i: int) -> str | None:
        for op in _SHELL_OPS_SORTED:
            if self.text.startswith(op, i):
                return op
        return None

    def _word(self, i: int) -> tuple[Word, int, bool]:
        text, n, unit = self.text, self.n, self.kind == "unit"
        start = i
        buf: list[str] = []
        dynamic = False
        while i < n:
            c = text[i]
            if c in " \t\n" or (unit and c == "\r"):
                break
            if c == "\\":
                if unit:
                    if _unit_continuation(text, i) is not None:
                        break
                    if i + 1 < n:
                        buf.append(_c_escape(text[i + 1]))
                        i += 2
                        continue
                    i += 1
                    continue
                if i + 1 < n and text[i + 1] == "\n":
                    break
                if i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                    continue
                i += 1
                continue
            if c == "'" and not unit:
                close = text.find("'", i + 1)
                if close < 0:
                    raise self._err(start, "unterminated ' quote")
                buf.append(text[i + 1 : close])
                i = close + 1
                continue
            if c in "\"'":
                i, content, dyn = self._quoted(i, c)
                buf.append(content)
                dynamic = dynamic or dyn
                continue
            if c == "$" and not unit and i + 1 < n and text[i + 1] == "(":
                end = self._balanced(i + 1, "(", ")")
                buf.append(text[i:end])
                dynamic = True
                i = end
                continue
            if c == "$" and i + 1 < n and text[i + 1] == "{":
                end = self._balanced(i + 1, "{", "}")
                buf.append(text[i:end])
                dynamic = True
                i = end
                continue
            if c == "`" and not unit:
                close = text.find("`", i + 1)
                if close < 0:
                    raise self._err(start, "unterminated ` quote")
                buf.append(text[i : close + 1])
                dynamic = True
                i = close + 1
                continue
            if c == "$" and i + 1 < n and (text[i + 1].isalnum() or text[i + 1] in "_@*#?!$-"):
                dynamic = True
            if not unit and c in ";&|<>()":
                return Word(text[start:i], "".join(buf), start, i, dynamic), i, True
            buf.append(c)
            i += 1
        return Word(text[start:i], "".join(buf), start, i, dynamic), i, False

    def _quoted(self, i: int, q: str) -> tuple[int, str, bool]:
        """A quoted string at ``i``: (index after the closing quote, content, dynamic)."""
        text, n, unit = self.text, self.n, self.kind == "unit"
        j = i + 1
        buf: list[str] = []
        dynamic = False
        while j < n:
            c = text[j]
            if c == q:
                return j + 1, "".join(buf), dynamic
            if c == "\\" and j + 1 < n:
                nxt = text[j + 1]
                if unit:
                    buf.append(_c_escape(nxt))
                    j += 2
                    continue
                if nxt in '"\\$`':
                    buf.append(nxt)
                    j += 2
                    continue
                if nxt == "\n":
                    j += 2
                    continue
            if c == "$" and q == '"' and j + 1 < n and (text[j + 1].isalnum() or text[j + 1] in "_{(@*#?!$-"):
                dynamic = True
            if c == "`" and not unit:
                dynamic = True
            if unit and c == "\n":
                break
            buf.append(c)
            j += 1
        raise self._err(i, f"unterminated {q} quote")

    def _balanced(self, i: int, open_: str, close: str) -> int:
        depth = 0
        j = i
        while j < self.n:
            c = self.text[j]
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise self._err(i, f"unterminated {open_}")


def _c_escape(c: str) -> str:
    return {"n": "\n", "t": "\t", "r": "\r", "s": " "}.get(c, c)
