"""SGLang's argument dump: ``server_args=ServerArgs(k=v, …)`` and (0.5.23) ``server_args={'k': v, …}``,
read without ``eval``; a truncated dump yields the keys that were complete.

Pure core.
"""

from __future__ import annotations

import ast
import re
from typing import Final

_MAX_VALUE_CHARS: Final = 8192  # a single value longer than this stays a raw string
MAX_ARGS_CHARS: Final = 256 * 1024  # an argument dump longer than this is cut before parsing
_ARGS_TOKEN_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[()\[\]{},]")
_SIMPLE_LITERALS: Final[dict[str, object]] = {"None": None, "True": True, "False": False}
_INT_FULL_RE = re.compile(r"-?\d+")
_FLOAT_FULL_RE = re.compile(r"-?\d+\.\d*(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")


def _literal(value: str) -> object:
    value = value.strip()
    if not value:
        return ""
    if len(value) > _MAX_VALUE_CHARS:
        return value
    # the common shapes without ast (an argument dump has ~250 of them, one per boot)
    if value in _SIMPLE_LITERALS:
        return _SIMPLE_LITERALS[value]
    c = value[0]
    if c == "'" and value[-1] == "'" and len(value) >= 2 and "\\" not in value and "'" not in value[1:-1]:
        return value[1:-1]
    if c.isdigit() or c == "-":
        if _INT_FULL_RE.fullmatch(value):
            return int(value)
        if _FLOAT_FULL_RE.fullmatch(value):
            return float(value)
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def _split_top_level(body: str) -> tuple[list[str], int]:
    """Split at commas outside quotes and brackets. Returns (pieces, index where depth < 0)."""
    pieces: list[str] = []
    depth = 0
    start = 0
    end = len(body)
    for m in _ARGS_TOKEN_RE.finditer(body):
        tok = m.group()
        c = tok[0]
        if c in "'\"":
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                end = m.start()
                break
        elif depth == 0:  # a comma at top level
            pieces.append(body[start : m.start()])
            start = m.end()
    pieces.append(body[start:end])
    return [p for p in (s.strip() for s in pieces) if p], end


def parse_server_args(dump: str) -> dict[str, object]:
    """Parse SGLang's argument dump (the text after ``server_args=``) without ``eval``.

    Values are Python literals where ``ast.literal_eval`` accepts them (numbers, strings,
    ``None``/``True``/``False``, lists, dicts), else the raw text (enum reprs, nested objects).
    A truncated dump yields the keys that were complete.
    """
    dump = dump[:MAX_ARGS_CHARS].strip()
    out: dict[str, object] = {}
    if dump.startswith("{"):
        if len(dump) <= 64 * 1024:
            whole = _literal(dump)
            if isinstance(whole, dict):
                return {str(k): v for k, v in whole.items()}
        pieces, _ = _split_top_level(dump[1:])
        for piece in pieces:
            key, sep, value = piece.partition(":")
            key = key.strip()
            if not sep or len(key) < 2 or key[0] not in "'\"" or key[-1] != key[0]:
                continue
            out[key[1:-1]] = _literal(value)
        return out
    paren = dump.find("(")
    if paren < 0:
        return out
    pieces, _ = _split_top_level(dump[paren + 1 :])
    for piece in pieces:
        key, sep, value = piece.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            continue
        out[key] = _literal(value)
    return out
