"""The outer prefix a log collector adds before the engine's own line, found and removed.

A log reaches kvtui through whatever stack the operator runs, and most stacks put something in
front of every line the engine printed::

    sglang-1  | [2026-03-04 09:12:00 TP0] Load weight begin. …          docker compose logs
    sglang-1  | 2026-03-04T09:12:00.123456789Z [2026-03-04 09:12:00 …    docker compose logs -t
    [pod/sglang-0/server] [2026-03-04 09:12:00 TP0] …                    kubectl logs --prefix
    2026-03-04T09:12:00.123Z (EngineCore_DP0 pid=7) INFO 03-04 …         kubectl/docker --timestamps
    2026-03-04 09:12:00.123	{app="vllm"}	(APIServer pid=1) INFO …     Loki / Grafana export
    (ServeReplica:llm:LLMServer pid=28488) (EngineCore pid=29087) …     ray serve driver
    Mar  4 09:12:00 gpu-a sglang[4242]: [2026-03-04 09:12:00] …          syslog forwarded to a file
    2026-03-04 09:12:00 | [2026-03-04 09:12:00 TP0] …                    a local timestamp and ``|``

No list of collectors is kept here. ``PrefixLayer`` looks, in a line the engines do not recognise
at its start, for the start of a known engine line (an *anchor*: SGLang's ``[YYYY-MM-DD
HH:MM:SS…]``, a vLLM process tag or level head, an argparse refusal, an engine-specific failure
text, an engine traceback frame). What stands before it is that line's prefix; the line is read
from the anchor on. A prefix seen twice in the same *shape* (digits masked, runs of spaces between
words free) before an engine head or an engine traceback frame (less the frame's two-space
indentation) is learned, and every later line that starts with a learned shape loses it too — the
traceback frames, tqdm bars and third-party lines that carry no anchor of their own. When the
prefix holds a timestamp (RFC 3339 / ISO 8601, or a syslog ``Mon DD HH:MM:SS``) it is returned with
the line, so a record without a timestamp of its own gets the collector's (and a year-less or
zone-less engine stamp gets its year and zone from it).

Pure core: no I/O; bounded (a few learned shapes, a bounded table of candidates).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

__all__ = ["ANCHOR_RE", "PrefixLayer", "prefix_timestamp"]

# The start of a line an engine printed (the anchors a collector prefix is learned from).
_HEAD_ANCHORS: Final = (
    # SGLang `[YYYY-MM-DD HH:MM:SS(.mmm)( DP0)( TP3)] `
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?: [A-Z][A-Z_]*\d+)*\] "
    # vLLM process tag `(EngineCore_DP0 pid=7) ` / `(VllmWorker rank=1 pid=9) ` / Ray workers
    r"|\((?:APIServer|ApiServer|EngineCore|Worker|VllmWorker|Ray[A-Za-z]*)\w*(?: rank=\d+)? pid=\d+[,)]"
    # vLLM level head `INFO 03-04 09:12:00 [file.py:12] ` (V0: `INFO 03-04 09:12:00 file.py:12] `)
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w.<>-]+:\d+\] "
    # argparse: `usage: launch_server.py [-h] …`, `api_server.py: error: …`
    r"|usage: (?:launch_server\.py|api_server\.py|vllm serve|sglang serve|python[\d.]* -m (?:sglang|vllm)\S*) "
    r"|(?:launch_server\.py|api_server\.py|vllm serve|sglang serve): error: "
)
# Engine text that also locates the engine line (a fragment has nothing else): read from there,
# but never learned as a prefix (a traceback's indentation varies).
_TEXT_ANCHORS: Final = (
    r"(?<![\w.:])(?:[A-Za-z_][\w.]*(?:Error|Exception): )?(?:Free memory on device|To serve at least one request"
    r"|The model's max seq len \(|No available memory for the cache blocks|Not enough memory\. Please try"
    r"|Loaded weights leave no GPU memory|EngineCore failed to start|Engine core initialization failed)"
    r"|Scheduler hit an exception|Received sigquit from a child|Capture cuda graph failed"
    r"|\s*File \"[^\"]*/(?:sglang|vllm)/"
    r"|Traceback \(most recent call last\)"
)
ANCHOR_RE: Final = re.compile(_HEAD_ANCHORS + "|" + _TEXT_ANCHORS)
_HEAD_RE: Final = re.compile(_HEAD_ANCHORS)

_MAX_PREFIX: Final = 240  # a "prefix" longer than this is the line's own text
_LEARN_AFTER: Final = 2  # sightings of a shape before it is learned
_MAX_SHAPES: Final = 8
_MAX_CANDIDATES: Final = 64

_ISO_RE: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?(?![\d:])"
)
_SYSLOG_RE: Final = re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d)\b")
_MONTHS: Final = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_DIGITS_RE: Final = re.compile(r"\d+")
_SPACES_RE: Final = re.compile(r"(?<=\S) {2,}(?=\S)")


def prefix_timestamp(prefix: str, now: Callable[[], datetime] | None = None) -> datetime | None:
    """The timestamp a collector prefix carries, or None. ISO/RFC 3339 with a zone -> aware."""
    m = _ISO_RE.search(prefix)
    if m is not None:
        try:
            dt = datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)),
                          int(m.group(4)), int(m.group(5)), int(m.group(6)))
        except ValueError:
            return None
        frac = m.group(7)
        if frac:
            dt = dt.replace(microsecond=int(frac[:6].ljust(6, "0")))
        zone = m.group(8)
        if zone:
            if zone == "Z":
                return dt.replace(tzinfo=UTC)
            sign = 1 if zone[0] == "+" else -1
            digits = zone[1:].replace(":", "")
            try:
                off = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4]))
                return dt.replace(tzinfo=timezone(sign * off))
            except ValueError:
                return dt
        return dt
    s = _SYSLOG_RE.search(prefix)
    if s is not None:
        ref = (now or datetime.now)().replace(tzinfo=None)
        for year in (ref.year, ref.year - 1):
            try:
                dt = datetime(year, _MONTHS[s.group(1)], int(s.group(2)),
                              int(s.group(3)), int(s.group(4)), int(s.group(5)))
            except ValueError:
                continue
            if dt - ref <= timedelta(days=1):
                return dt
    return None


def _shape(prefix: str) -> str:
    """A learned prefix as a pattern: digits masked, runs of spaces between words free; its
    trailing separator stays exact (the engine text after it keeps its own indentation)."""
    body = prefix.rstrip(" \t")
    tail = prefix[len(body):]
    parts: list[str] = []
    pos = 0
    for m in _DIGITS_RE.finditer(body):
        parts.append(re.escape(body[pos:m.start()]))
        parts.append(r"\d+")
        pos = m.end()
    parts.append(re.escape(body[pos:]))
    pattern = "".join(parts)
    pattern = re.sub(r"(?:\\ ){2,}", r" +", pattern)  # escaped runs of spaces -> ` +`
    return pattern + re.escape(tail)


class _Shape:
    __slots__ = ("has_ts", "rx")

    def __init__(self, pattern: str, has_ts: bool) -> None:
        self.rx = re.compile(pattern)
        self.has_ts = has_ts


class PrefixLayer:
    """Finds, learns and removes a collector's prefix. See the module docstring.

    ``cut(text)`` -> (text without a learned prefix, the prefix's timestamp) or None when no
    learned prefix starts the line. ``find(text)`` -> the same for a line whose engine text starts
    after position 0 (an anchor), learning the prefix's shape; None when there is no anchor.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock
        self._shapes: list[_Shape] = []
        self._seen: dict[str, int] = {}

    @property
    def learned(self) -> bool:
        return bool(self._shapes)

    def reset(self) -> None:
        """Forget what was learned (a new stream)."""
        self._shapes.clear()
        self._seen.clear()

    def cut(self, text: str) -> tuple[str, datetime | None] | None:
        shapes = self._shapes
        for i, sh in enumerate(shapes):
            m = sh.rx.match(text)
            if m is not None and m.end() > 0:
                if i:  # the shape that matched goes first next time
                    shapes.insert(0, shapes.pop(i))
                pre = text[:m.end()]
                return text[m.end():], (prefix_timestamp(pre, self._clock) if sh.has_ts else None)
        return None

    def find(self, text: str, *, heads_only: bool = False) -> tuple[str, datetime | None] | None:
        """``heads_only``: the line already reads as engine output (a failure text without the
        engine's prefix): only an engine prefix inside it counts, not its words."""
        if len(text) < 2:
            return None
        m = (_HEAD_RE if heads_only else ANCHOR_RE).search(text, 1, _MAX_PREFIX + 512)
        if m is None:
            return None
        k = m.start()
        if k > _MAX_PREFIX:
            return None
        rest = text[k:]
        if m.group(0)[:1].isspace():  # a traceback frame's indentation: read from `File`
            rest = rest.lstrip()
            k = len(text) - len(rest)
        prefix = text[:k]
        ts = prefix_timestamp(prefix, self._clock)
        if _HEAD_RE.match(text, k) is not None:
            self._learn(prefix, ts is not None)
        elif rest.startswith('File "') and prefix.endswith("  "):
            # an engine traceback frame (Python indents it by two): what stands before the two is
            # the collector's prefix — a traceback alone (a refused configuration, a fragment)
            # teaches it too, so its code and exception lines lose it
            self._learn(prefix[:-2], ts is not None)
        return rest, ts

    def _learn(self, prefix: str, has_ts: bool) -> None:
        if not prefix.strip():
            return  # indentation is not a collector's prefix
        pattern = _shape(prefix)
        if any(sh.rx.pattern == pattern for sh in self._shapes):
            return
        n = self._seen.get(pattern, 0) + 1
        if n < _LEARN_AFTER:
            if len(self._seen) >= _MAX_CANDIDATES:
                self._seen.clear()
            self._seen[pattern] = n
            return
        self._seen.pop(pattern, None)
        if len(self._shapes) >= _MAX_SHAPES:
            self._shapes.pop()
        self._shapes.insert(0, _Shape(pattern, has_ts))
