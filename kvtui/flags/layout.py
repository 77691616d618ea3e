"""Where the bytes of an added or removed flag go: the neighbours' style, kept.

A flag added to a command written one flag per line gets a line of its own with the same
indentation and the same ``\\`` column (aligned when the neighbours are); inline otherwise. A
removed flag takes its blanks with it, and its line when it was alone there (with the continuation
that led to it when it was the command's last line).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtui.flags.cmdline import FlagOccurrence, ServerCommand
from kvtui.flags.lexer import Kind, Word, _line_no


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    ls = text.rfind("\n", 0, pos) + 1
    le = text.find("\n", pos)
    return ls, (len(text) if le < 0 else le)


def _continuation_at(text: str, pos: int, line_end: int) -> int | None:
    """If ``text[pos:line_end]`` is blanks then a ``\\`` then blanks, the index of the backslash."""
    seg = text[pos:line_end]
    s = seg.rstrip(" \t\r")
    if s.endswith("\\") and not s[:-1].strip(" \t"):
        return pos + len(s) - 1
    return None


def _insert(text: str, cmd: ServerCommand, flag_text: str) -> tuple[str, int]:
    """Insert a new flag in the neighbours' style; return (new text, 1-based line of the flag)."""
    words = cmd.words
    arg_words = words[cmd.args_start :]
    entry_word = words[cmd.args_start - 1]
    multiline = "\n" in text[cmd.start : cmd.end]
    if cmd.flags:
        anchor_end = cmd.flags[-1].end
    else:
        static_pos = [w for w in cmd.positionals if not w.dynamic]
        anchor_end = static_pos[-1].end if static_pos else entry_word.end
    if not multiline:
        new_text = text[:anchor_end] + " " + flag_text + text[anchor_end:]
        return new_text, _line_no(new_text, anchor_end + 1)
    ls, le = _line_bounds(text, anchor_end)
    cont_lines = _continuation_lines(text, cmd)
    indent = _indent_for(text, cmd, arg_words)
    suffix = _suffix_for(text, cont_lines, len(indent) + len(flag_text))
    new_line = indent + flag_text + suffix + "\n"
    # after the anchor's line when it is continued, else before it (it is the command's last line)
    at = le + 1 if _continuation_at(text, anchor_end, le) is not None else ls
    new_text = text[:at] + new_line + text[at:]
    return new_text, _line_no(new_text, at)


def _continuation_lines(text: str, cmd: ServerCommand) -> list[tuple[int, int, int]]:
    """(line start, end of its last word, backslash index) for each continued line of the command."""
    out: list[tuple[int, int, int]] = []
    by_line: dict[int, int] = {}
    for w in cmd.words:
        ls, _ = _line_bounds(text, w.end - 1 if w.end > w.start else w.start)
        by_line[ls] = max(by_line.get(ls, 0), w.end)
    for ls, last_end in by_line.items():
        _, le = _line_bounds(text, last_end)
        bs = _continuation_at(text, last_end, le)
        if bs is not None:
            out.append((ls, last_end, bs))
    return out


def _indent_for(text: str, cmd: ServerCommand, arg_words: Sequence[Word]) -> str:
    """The indentation of the lines that start with a flag (the last such), else of any continuation line."""
    flag_starts = {o.flag.start for o in cmd.flags}
    best: str | None = None
    fallback: str | None = None
    for w in arg_words:
        ls, _ = _line_bounds(text, w.start)
        lead = text[ls : w.start]
        if lead.strip(" \t") == "" and ls > cmd.start:
            if w.start in flag_starts:
                best = lead
            elif fallback is None:
                fallback = lead
    if best is not None:
        return best
    if fallback is not None:
        return fallback
    return "    "


def _suffix_for(text: str, cont: Sequence[tuple[int, int, int]], content_len: int) -> str:
    """The `` \\`` that ends a continued line, copied from the neighbours (column-aligned when they are)."""
    if not cont:
        return " \\"
    # aligned backslashes: several lines (the first, ExecStart= line aside), one column, some
    # padded beyond a single space
    body = list(cont[1:]) if len(cont) > 2 else list(cont)
    cols = [bs - ls for ls, _e, bs in body]
    pads = [bs - e for _ls, e, bs in body]
    if len(body) >= 2 and len(set(cols)) == 1 and max(pads) > 1:
        col = cols[0]
        return " " * max(1, col - content_len) + "\\"
    _ls, e, bs = cont[-1]
    _, le = _line_bounds(text, bs)
    return text[e:le]


def _remove(text: str, kind: Kind, o: FlagOccurrence) -> str:
    """Remove one flag occurrence with its values and the blanks (or the line) it leaves."""
    a, b = o.start, o.end
    ls, le = _line_bounds(text, a)
    lead = text[ls:a]
    after_bs = _continuation_at(text, b, le)
    trailing_blank = text[b:le].strip(" \t\r") == ""
    alone = lead.strip(" \t") == "" and (after_bs is not None or trailing_blank) and not _is_exec_key_line(lead)
    if alone and b <= le:
        if after_bs is not None:
            return text[:ls] + text[le + 1 :] if le < len(text) else text[:ls]
        # the command's last line: drop it and the continuation that led to it
        prev_end = _prev_nonblank(text, ls)
        if prev_end is not None:
            return text[:prev_end] + text[le:]
        return text[:ls] + text[le + 1 :]
    # shares its line with other words
    j = b
    while j < le and text[j] in " \t":
        j += 1
    if j < le and _continuation_at(text, b, le) is None and text[j] not in "\r":
        return text[:a] + text[j:]  # remove the flag and the blanks after it
    i = a
    while i > ls and text[i - 1] in " \t":
        i -= 1
    return text[:i] + text[b:]


def _is_exec_key_line(lead: str) -> bool:
    return "=" in lead


def _prev_nonblank(text: str, line_start: int) -> int | None:
    """The end of the last word before ``line_start`` (skipping the continuation backslash and
    comment lines inside a continuation)."""
    i = line_start - 1  # the newline
    while i > 0:
        ls, le = _line_bounds(text, i - 1 if text[i] == "\n" else i)
        seg = text[ls:le]
        st = seg.lstrip(" \t")
        if st.startswith(("#", ";")) and ls != 0:
            i = ls - 1
            continue
        s = seg.rstrip(" \t\r")
        if s.endswith("\\"):
            s = s[:-1].rstrip(" \t")
        return ls + len(s)
    return None
