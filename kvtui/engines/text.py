"""Small text helpers shared by the grammars and input shapes (pure, hot path: keep them fast)."""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves), OSC sequences, and lone ESC-x pairs.
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")

MAX_LINE_CHARS = 1 << 20  # lines up to 1 MiB are accepted; longer ones are cut


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (cheap when there are none)."""
    if "\x1b" not in text:
        return text
    return _ANSI_RE.sub("", text)


def split_physical(text: str) -> list[str]:
    """Split on ``\\n`` and ``\\r`` (tqdm redraws), dropping empty pieces."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [s for s in text.split("\n") if s]


def version_key(v: str) -> tuple[int, ...]:
    """A version (``0.5.23``, ``>=0.5.13``, ``0.10.1.1rc2``) as numbers to compare: each dotted
    part's leading digits (0 when none)."""
    out: list[int] = []
    for part in v.lstrip(">=~").split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        out.append(int(digits) if digits else 0)
    return tuple(out)
