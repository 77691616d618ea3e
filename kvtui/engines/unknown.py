"""Lines that look like startup information but that no rule recognised (issue 11).

A user who runs a new engine build sees kvtui miss a figure; ``kvtui replay PATH --unknown`` (and
the console's ``? N unrecognised startup lines``) lists what was not understood, grouped by shape
(numbers masked), so the list can be pasted into a report.

"Looks like startup information": a line the engine's own logger printed (SGLang's stamp, vLLM's
level head) that holds a memory figure (GB/GiB/MiB), the words cache, graph, captur…, load…, NCCL,
Error/Exception, or a percentage bar. Third-party output (a library's warnings and bars, a user's
debug prints), traceback bodies and lines a grammar knows to carry nothing for kvtui (``known``)
are not listed. Pure core.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["UnrecognisedShape", "looks_like_startup", "shape_of"]

_STARTUP_RE: Final = re.compile(
    r"\d(?:\.\d+)? ?(?:GB|GiB|MiB)\b|\b(?:[Cc]ache|[Gg]raph|[Cc]aptur|[Ll]oad)|NCCL|Error|Exception|\d%\|"
)
_HEX_RE: Final = re.compile(r"0x[0-9a-fA-F]+")
_EXC_LINE_RE: Final = re.compile(r"[\w.]+(?:Error|Exception)(?::|$)")
_NUM_RE: Final = re.compile(r"(?<![A-Za-z_\d])\d+(?:[.,]\d+)*")  # not the digits of a name (NVFP4, TP0)
_SPACES_RE: Final = re.compile(r"\s{2,}")
MAX_SHAPE_CHARS: Final = 160


def looks_like_startup(text: str) -> bool:
    """Does a line that no rule recognised look like startup information? (The caller passes only
    lines the engine's own logger printed: third-party output, tracebacks and bars of other tools
    are not the engine's startup lines.)"""
    if not text or text[0].isspace() or text.startswith(('File "', "Traceback (most recent call last)")):
        return False
    if _EXC_LINE_RE.match(text):
        return False  # a traceback's last line (a logged warning's, say): its failure is read, if any
    return _STARTUP_RE.search(text) is not None


def shape_of(text: str) -> str:
    """The line with its numbers masked (``N``, hex ``HEX``), runs of spaces squeezed, cut to a readable size."""
    shape = _NUM_RE.sub("N", _HEX_RE.sub("HEX", text.strip()))
    shape = _SPACES_RE.sub(" ", shape)
    return shape if len(shape) <= MAX_SHAPE_CHARS else shape[: MAX_SHAPE_CHARS - 1] + "…"


@dataclass(slots=True)
class UnrecognisedShape:
    """One shape of unrecognised startup lines: how often, the first line (0-based position in
    the lines the tracker was fed) and its first text as printed."""

    shape: str
    count: int
    first_line: int
    text: str

    def to_json(self) -> dict[str, object]:
        return {"shape": self.shape, "count": self.count, "first_line": self.first_line + 1}
