"""What may be skipped without parsing: the prefilters of ``kvtui replay`` and of the live monitor.

A log is mostly serving lines, redraws of progress bars and HTTP access lines; none of them can
change a boot beyond its latest figures. ``Prefilter`` drops them from the raw bytes of a whole
log (``parse_chunks``, across chunk boundaries: a run of serving lines keeps its first line and each
rank's last one, a run of redraws of one bar its first and last, access lines go once the engine is
known, nothing goes near a failure). ``LivePrefilter`` applies the same rules to one batch of live
records at a time (``HostMonitor``) and says, for each line it skips, the style, timestamp and
rank the SGLang grammar would give it. The boots a ``BootTracker`` builds are the same either way
(property tests in tests/test_parse_fuzz.py and tests/test_live_prefilter.py check it).

Pure core: no I/O; no textual/asyncssh.
"""

from __future__ import annotations

import contextlib
import operator
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from kvtui.engines.events import Engine, LineStyle


class EngineSource(Protocol):
    """What ``Prefilter`` asks of its parser (a ``LineParser``): the engine known so far."""

    @property
    def engine(self) -> Engine | None: ...


_ARM_LINES = 400  # keep every line this far after a line that may belong to a failure
_FAIL_TRIGGERS = (b"rror", b"Traceback", b"xception", b'File "', b"NCCL", b"out of memory", b"ailed", b"SIGQUIT")
_FAIL_TRIGGERS2 = (b"sigquit", b"died", b"crashed", b"Killed", b"killed", b"Main process exited")
# the rank tag of a serving line: SGLang `…:SS[.mmm]( DP1)( TP3)] Decode batch`, vLLM `Engine 000: … KV cache usage`
_SERVING_TAG_RE = re.compile(
    rb"\d((?: [A-Z][A-Z_]*\d+)*)\] (?:Decode|Prefill) batch|(Engine \d+): [^\n]*?KV cache usage"
)


def _is_access_line(line: bytes) -> bool:
    return b"INFO:     " in line and b" HTTP/1." in line and b' - "' in line


def _progress_desc(line: bytes) -> bytes | None:
    """The description of a tqdm redraw (`Capturing batches (bs=8 avail_mem=7.19 GB)`, `Loading …
    shards`), or None when the line is not one we can group safely."""
    if b"\r" in line:
        return None
    k = line.find(b"%|")
    if k < 0:
        k = line.find(b"% Completed |")
        if k < 0:
            return None
    s = line.rfind(b"Capturing ", 0, k)
    if s < 0:
        s = line.rfind(b"shards:", 0, k)
        if s < 0:
            return None
    e = line.find(b"]", k)  # the bar's end: `… 1.10it/s]`
    if 0 <= e < len(line) - 1 and line[e + 1] != 32 and line[e + 1] != 9:
        return None  # a redraw with a line glued to its end (no space between) is no plain redraw
    return line[s : k - 3]


_TAG_WORD_RE = re.compile(rb"[A-Z][A-Z_]*\d+")


def _tag_stop(ln: bytes, k: int) -> bool:
    """Whether reading tag words backwards stops at ``k`` (the word before it is no tag word)."""
    s = ln.rfind(b" ", 0, k)
    return s < 0 or not 65 <= ln[s + 1] <= 90 or _TAG_WORD_RE.fullmatch(ln, s + 1, k) is None


def _serving_key(ln: bytes, known: Iterable[bytes] = ()) -> tuple[bytes, bool] | None:
    """(rank key, is vLLM) of a serving line, None when it is none: what ``_SERVING_TAG_RE``
    says (``group(1)`` or ``group(2)``), without a regex search over the whole line for SGLang's
    lines (the words between the stamp's last digit and ``] Decode batch``, read backwards).

    ``known``: SGLang rank keys this function returned before (``b" DP1 TP1"``), tried first: a key whose bytes end
    where the tag ends, after a digit, with no tag word before it, is what reading the words would
    give, without reading them (a log of DP ranks interleaved line by line changes key each line)."""
    i = ln.find(b"] Decode batch")
    if i < 0:
        i = ln.find(b"] Prefill batch")
    else:
        j = ln.find(b"] Prefill batch", 0, i)
        if j >= 0:
            i = j
    if i > 0 and ln.find(b"Engine ", 0, i) < 0:
        for key in known:
            k = i - len(key)
            if k > 0 and 48 <= ln[k - 1] <= 57 and ln.startswith(key, k) and _tag_stop(ln, k):
                return key, False
        k = i
        while True:  # the tag words, each `[A-Z][A-Z_]*\d+`, back to the stamp's last digit
            s = ln.rfind(b" ", 0, k)
            if s < 0 or not 65 <= ln[s + 1] <= 90 or _TAG_WORD_RE.fullmatch(ln, s + 1, k) is None:
                break
            k = s
        if k > 0 and 48 <= ln[k - 1] <= 57:
            return ln[k:i], False
        # otherwise the regex decides (a tag word after no digit, …)
    m = _SERVING_TAG_RE.search(ln)
    if m is None:
        return None
    return (m.group(1), False) if m.group(2) is None else (m.group(2), True)


_MAX_RUN = 8192  # a run of serving lines is reduced whenever it grows past this
_MAX_KNOWN = 64  # SGLang rank keys a prefilter remembers (forgets them all past this)


def _reduce_run(run: list[bytes], segs: list[tuple[bytes, int]]) -> tuple[list[bytes], list[tuple[bytes, int]]]:
    """A run of serving lines -> its first line plus the last line of every rank, in order (of
    those last lines), with its segments.

    The tracker keeps each rank's latest serving figures; nothing in between can change a boot.
    ``segs`` holds (rank key, index of its first line) for each stretch of one rank in ``run``, as
    the prefilter saw them, so no line is searched again here."""
    if len(run) <= 2:
        return run, segs
    if len(segs) == 1:
        return [run[0], run[-1]], [(segs[0][0], 0)]
    last: dict[bytes, bytes] = {}
    n = len(segs)
    for i in range(n):
        end = segs[i + 1][1] if i + 1 < n else len(run)
        if end >= 2:  # the stretch's last line is not the run's first
            key = segs[i][0]
            last.pop(key, None)
            last[key] = run[end - 1]
    out = [run[0], *last.values()]
    return out, [(segs[0][0], 0), *((key, i + 1) for i, key in enumerate(last))]


_NEVER = b"\x00\x00never\x00\x00"


def _needles(key: bytes, vllm: bool) -> tuple[bytes, bytes]:
    """Substrings that prove a line is a serving line of this rank key (see ``_serving_key``).

    SGLang: ``<tag>] Decode batch`` / ``<tag>] Prefill batch``, found right after the stamp.
    vLLM: ``Engine 00n: Avg prompt throughput`` (the serving line of that engine).
    """
    if not vllm:
        return key + b"] Decode batch", key + b"] Prefill batch"
    return key + b": Avg prompt throughput", _NEVER


class Prefilter:
    """Drops lines that cannot change a boot, across chunk boundaries. See ``parse_chunks``.

    * a run of serving lines keeps its first line and each rank's last line;
    * a run of redraws of one progress bar keeps its first and last redraw;
    * HTTP access lines are dropped once the engine is known (SGLang's and vLLM's uvicorn lines);
    * everything within ``_ARM_LINES`` after a line that may belong to a failure is kept, so the
      traceback the tracker reports is the same as with every line.

    ``filter(lines)`` takes the physical lines (``bytes``, split on ``\\n``) in order and returns
    those to parse; ``flush()`` returns what is still held back at the end. A separate instance may
    filter a later part of the same log (``kvtui replay`` does, on a second core): warm it with
    ``preroll`` on the lines just before its part so it knows whether a failure window is open.
    ``drop_access`` fixes whether HTTP access lines are dropped (default: once ``parser`` knows the
    engine).
    """

    def __init__(self, parser: EngineSource | None = None, *, drop_access: bool | None = None) -> None:
        self._parser = parser
        self._drop_access = drop_access
        self._armed = 0
        self._run: list[bytes] = []  # the pending serving run
        self._segs: list[tuple[bytes, int]] = []  # its stretches of one rank: (key, first index)
        self._key = b""  # the current rank tag (its lines take the hot path)
        self._n1 = _NEVER  # the needles of the current rank tag
        self._n2 = _NEVER
        self._anchor_free = False  # vLLM needles carry the engine index: no stamp anchor needed
        self._desc: bytes | None = None  # the pending progress group
        self._held: bytes | None = None  # its latest redraw, not yet kept
        self._known: dict[bytes, tuple[bytes, bytes]] = {}  # SGLang rank keys seen: their needles
        self._follow: dict[bytes, bytes] = {}  # SGLang rank key -> the known key that came after it last

    def _flush(self, keep: list[bytes]) -> None:
        if self._run:
            keep.extend(_reduce_run(self._run, self._segs)[0])
            self._run = []
            self._segs = []
        if self._held is not None:
            keep.append(self._held)
            self._held = None
        self._desc = None

    def filter(self, lines: list[bytes]) -> list[bytes]:
        keep: list[bytes] = []
        append = keep.append
        armed = self._armed
        run = self._run
        run_append = run.append
        key = self._key
        desc = self._desc
        n1, n2 = self._n1, self._n2
        anchor_free = self._anchor_free
        known = self._known
        follow = self._follow
        drop_access = self._drop_access
        if drop_access is None:
            drop_access = self._parser is not None and self._parser.engine is not None
        for ln in lines:
            if not ln:
                continue  # an empty line is no record at all
            if armed <= 0:
                p = ln.find(n1)
                if p < 0:
                    p = ln.find(n2)
                # a serving line of the current rank (the hot path): the tag must follow the stamp
                # (`…:SS TP0]`, `….mmm TP0]`), so `TP0` never matches `DP1 TP0` nor `` matches `TP10`
                if p >= 4 and (anchor_free or ln[p - 3] == 58 or ln[p - 4] == 46 or ln[p - 4] == 44):
                    if desc is not None:
                        self._flush(keep)
                        desc = None
                        run = self._run
                        run_append = run.append
                    if not run:
                        self._segs.append((key, 0))
                    run_append(ln)
                    continue
                # the rank that followed this one last time (DP attention ranks take turns line by
                # line): the same test as the hot path's, with that rank's needles
                nxt = follow.get(key) if not anchor_free else None
                if nxt is not None:
                    m1, m2 = known[nxt]
                    p = ln.find(m1)
                    if p < 0:
                        p = ln.find(m2)
                    if p >= 4 and (ln[p - 3] == 58 or ln[p - 4] == 46 or ln[p - 4] == 44) and b"%|" not in ln:
                        if desc is not None:
                            self._flush(keep)
                            desc = None
                            run = self._run
                            run_append = run.append
                        key = self._key = nxt
                        self._segs.append((key, len(run)))
                        n1, n2 = self._n1, self._n2 = m1, m2
                        run_append(ln)
                        continue
                if (b" batch" in ln or b"Engine 0" in ln) and b"%|" not in ln:
                    got = _serving_key(ln, known)
                    if got is not None:  # a serving line of another rank (or the first one)
                        if desc is not None:
                            self._flush(keep)
                            desc = None
                            run = self._run
                            run_append = run.append
                        if not anchor_free and not got[1] and key in known:
                            follow[key] = got[0]
                        key = self._key = got[0]
                        self._segs.append((key, len(run)))
                        anchor_free = self._anchor_free = got[1]
                        needles = None if anchor_free else known.get(key)
                        if needles is None:
                            needles = _needles(*got)
                            if not anchor_free:
                                if len(known) >= _MAX_KNOWN:
                                    known.clear()
                                    follow.clear()
                                known[key] = needles
                        n1, n2 = self._n1, self._n2 = needles
                        run_append(ln)
                        continue
                if b"%" in ln:
                    d = _progress_desc(ln)
                    if d is not None:
                        if d == desc:
                            self._held = ln
                            continue
                        self._flush(keep)
                        run = self._run
                        run_append = run.append
                        desc = self._desc = d
                        append(ln)
                        continue
                if drop_access and b"INFO:     " in ln and _is_access_line(ln):
                    continue
            if run or desc is not None:
                self._flush(keep)
                desc = None
                run = self._run
                run_append = run.append
            append(ln)
            if _trigger(ln):
                armed = _ARM_LINES
            else:
                armed -= 1
        if len(run) > _MAX_RUN:
            self._run, self._segs = _reduce_run(run, self._segs)
        self._armed = armed
        return keep

    def flush(self) -> list[bytes]:
        out: list[bytes] = []
        self._flush(out)
        return out

    def preroll(self, lines: list[bytes]) -> None:
        """Run over lines that precede this instance's part of the log, keeping nothing: afterwards
        it knows whether a failure window is still open (``_ARM_LINES`` lines of them suffice)."""
        self.filter(lines)
        self._run = []
        self._segs = []
        self._desc = None
        self._held = None


def _trigger(ln: bytes) -> bool:
    for t in _FAIL_TRIGGERS:
        if t in ln:
            return True
    return any(t in ln for t in _FAIL_TRIGGERS2)


# ---------------------------------------------------------------------------------------------
# The live path: the same rules over records, deciding per batch which lines to parse
# ---------------------------------------------------------------------------------------------

_FAIL_TRIGGERS_S = tuple(t.decode() for t in _FAIL_TRIGGERS + _FAIL_TRIGGERS2)
_SERVING_TAG_S_RE = re.compile(r"\d((?: [A-Z][A-Z_]*\d+)*)\] (?:Decode|Prefill) batch")
_STAMP_S_RE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_PROGRESS_COUNT_RE = re.compile(r"(\d+)/(\d+) \[")  # the SGLang grammar's tqdm count
# an SGLang-prefixed uvicorn access line (`[stamp] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK`)
_ACCESS_S_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]*\d+)*)\] INFO:     ")
_SECONDS = {f"{s:02d}": timedelta(seconds=s) for s in range(60)}  # a valid stamp's seconds
_LIVE_MAX_CHARS = 16 * 1024  # longer lines are always parsed (the parser cuts them)

# What the live prefilter says about a batch of lines: per line the display style the parser would
# give it, or None when the line must be parsed; the timestamp and the rank the parser would give
# it (meaningful where the style is not None).
LivePlan = tuple[list[LineStyle | None], list[datetime | None], list[str | None]]


def _trigger_s(text: str) -> bool:
    return any(t in text for t in _FAIL_TRIGGERS_S)


class LivePrefilter:
    """``Prefilter``'s rules for a live stream (``HostMonitor``): one batch of records at a time,
    nothing held back — the tracker is as current after each batch as if every line was parsed.

    ``plan(texts, ts, idents)`` takes a batch's records in columns (their texts, wrapper
    timestamps and syslog identifiers) and returns a ``LivePlan``: for a line that cannot change
    a boot, the display style, timestamp and rank the SGLang grammar would give it, so that it is
    spooled and shown exactly as if it had been parsed, without being parsed; None for a line to
    parse. Skipped:

    * a run of SGLang serving lines (``[stamp TAG] Decode batch`` / ``Prefill batch``) keeps its
      first line and each rank's last line of the batch;
    * a run of redraws of one tqdm bar (``Capturing batches (…)``, ``Loading … shards``) keeps its
      first and its last redraw of the batch;
    * HTTP access lines (``[stamp] INFO:     … "POST /generate HTTP/1.1" 200``) are not parsed
      (nor do they end a serving run);
    * nothing within ``_ARM_LINES`` lines after a line that may belong to a failure, no line with
      ANSI or ``\\r``/``\\n``, no systemd line, and nothing while the stream's engine is not known
      to be SGLang (``sglang=False``: every line is parsed, the failure window is still tracked).
    """

    def __init__(self, *, bulk: bool = True) -> None:
        self._bulk = bulk  # plan runs of hot serving lines in bulk (False: line by line, the reference)
        self._armed = 0
        self._n1 = _NEVER_S  # the needles of the current serving rank tag
        self._n2 = _NEVER_S
        self._rank: str | None = None
        self._desc: str | None = None  # the current progress bar
        self._stamps: dict[str, datetime | None] = {}
        self._hot: dict[str, datetime] = {}  # see _hot_run
        self._minutes: dict[str, datetime] = {}  # see _stamp

    def _stamp(self, stamp: str) -> datetime | None:
        """``YYYY-MM-DD HH:MM:SS`` -> naive datetime, as the SGLang grammar reads it (cached)."""
        stamps = self._stamps
        try:
            return stamps[stamp]
        except KeyError:
            pass
        dt: datetime | None = None
        minute = self._minutes.get(stamp[:17])  # `YYYY-MM-DD HH:MM:` of a valid stamp -> its :00
        sec = _SECONDS.get(stamp[17:])
        if minute is not None and sec is not None:  # the next second of a minute seen: no parsing
            dt = minute + sec
        elif _STAMP_S_RE.fullmatch(stamp) is not None:
            try:
                dt = datetime.fromisoformat(stamp)
            except ValueError:
                dt = None
            if dt is not None:
                if len(self._minutes) >= 1024:
                    self._minutes.clear()
                self._minutes[stamp[:17]] = dt.replace(second=0)
        if len(stamps) >= 4096:
            stamps.clear()
        stamps[stamp] = dt
        return dt

    def _serving_ts(self, text: str, p: int, ts: datetime | None) -> tuple[bool, datetime | None]:
        """(ok, ts) for a serving line whose rank tag starts at ``p``: the grammar's own stamp
        (``[YYYY-MM-DD HH:MM:SS(.ffffff)``) unless the record's ts carries an offset."""
        if text[0] != "[":
            return False, None
        if p == 20:
            frac = ""
        elif 22 <= p <= 27 and (text[20] == "." or text[20] == ",") and text[21:p].isdecimal():
            frac = text[21:p]
        else:
            return False, None
        own = self._stamp(text[1:20])
        if own is None:
            return False, None
        if ts is not None and ts.tzinfo is not None:
            return True, ts
        if frac:
            return True, own + timedelta(microseconds=int(frac.ljust(6, "0")[:6]))
        return True, own

    def _prefix_ts(self, m: re.Match[str], ts: datetime | None) -> tuple[bool, datetime | None]:
        """(ok, ts) of a line whose SGLang prefix ``m`` matched (groups: stamp, fraction, tags)."""
        own = self._stamp(m.group(1))
        if own is None:
            return False, None
        if ts is not None and ts.tzinfo is not None:
            return True, ts
        frac = m.group(2)
        if frac:
            return True, own + timedelta(microseconds=int(frac.ljust(6, "0")[:6]))
        return True, own

    def _hot_run(
        self,
        texts: Sequence[str],
        out_ts: list[datetime | None],
        no_ts: bool,
        idents: Sequence[str | None] | None,
        a: int,
        n1: str,
        n2: str,
    ) -> int:
        """Plan in bulk the run of hot serving lines that starts at ``a``: the lines the per-line
        hot path would take — ``[YYYY-MM-DD HH:MM:SS TAG] Decode batch`` (or ``Prefill batch`` with
        no ``Decode`` needle anywhere) of the current tag (needles ``n1``, ``n2``), a valid stamp,
        no ANSI, ``\\r`` or ``\\n``, no systemd identifier, not over-long. Sets their timestamps in
        ``out_ts``; returns the index after the run (``a`` when it is empty).

        Over windows of growing size, in C: each line's head (stamp and needle) is looked up in a
        cache of the heads seen (``_hot``); Python sees a head once per second of log, and the
        Prefill lines."""
        n = len(texts)
        cut = operator.itemgetter(slice(0, 20 + len(n1)))
        hot = self._hot  # `[YYYY-MM-DD HH:MM:SS` + n1 -> the stamp's datetime (valid stamps only)
        stamps = self._stamps
        owns_run: list[datetime | None] = []
        j = a
        w = 64
        while j < n:
            window = texts[j : j + w]
            size = len(window)
            heads = list(map(cut, window))
            owns = list(map(hot.get, heads))
            if None in owns:  # Decode lines of a second not seen yet: their stamps are read once each
                added = False
                for head in set(heads).difference(hot):
                    if head[:1] == "[" and head.endswith(n1):
                        own = stamps.get(head[1:20]) or self._stamp(head[1:20])
                        if own is not None:
                            if len(hot) >= 4096:
                                hot.clear()
                            hot[head] = own
                            added = True
                if added:
                    owns = list(map(hot.get, heads))
            k = 0
            while k < size:  # the rest: Prefill lines (no Decode needle anywhere), or the run's end
                try:
                    k = owns.index(None, k)
                except ValueError:
                    k = size
                    break
                t = window[k]
                if t[:1] != "[" or not t.startswith(n2, 20) or n1 in t:
                    break
                own = stamps.get(t[1:20]) or self._stamp(t[1:20])
                if own is None:
                    break
                owns[k] = own
                k += 1
            j += k
            owns_run += owns[:k] if k < size else owns
            if k < size:
                break
            w = min(w * 2, 1024)
        if j <= a:
            return a
        joined = "".join(texts[a:j])
        if "\x1b" in joined or "\r" in joined or "\n" in joined:
            j = next(k for k in range(a, j) if "\x1b" in texts[k] or "\r" in texts[k] or "\n" in texts[k])
        if j > a and idents is not None:
            with contextlib.suppress(ValueError):
                j = idents.index("systemd", a, j)
        if j > a and max(map(len, texts[a:j])) >= _LIVE_MAX_CHARS:
            j = next(k for k in range(a, j) if len(texts[k]) >= _LIVE_MAX_CHARS)
        if j <= a:
            return a
        owns = owns_run[: j - a]
        if no_ts:
            out_ts[a:j] = owns
        else:
            mine = out_ts[a:j]
            if None in mine or not all(map(_TZINFO, mine)):  # naive or missing record stamps: the line's own
                out_ts[a:j] = [t if t is not None and t.tzinfo is not None else o
                               for t, o in zip(mine, owns, strict=True)]
        return j

    def plan(
        self,
        texts: Sequence[str],
        tss: Sequence[datetime | None] | None = None,
        idents: Sequence[str | None] | None = None,
        *,
        sglang: bool = True,
    ) -> LivePlan:
        """See the class docstring."""
        n = len(texts)
        styles: list[LineStyle | None] = [None] * n
        out_ts: list[datetime | None] = list(tss) if tss is not None else [None] * n
        ranks: list[str | None] = [None] * n
        armed = self._armed
        n1, n2 = self._n1, self._n2
        rank = self._rank
        desc = self._desc
        run_first = -1  # index of the current serving run's first line in this batch
        last_of: dict[str | None, int] = {}  # rank -> index of its latest line in the current run
        held = -1  # index of the current progress bar's latest redraw in this batch
        stamps = self._stamps
        skip_to = 0  # lines before this index were planned in bulk (a run of hot serving lines)
        for i, t in enumerate(texts):
            if i < skip_to:
                continue
            if sglang and armed <= 0 and (idents is None or idents[i] != "systemd") and len(t) < _LIVE_MAX_CHARS \
                    and "\x1b" not in t and "\r" not in t and "\n" not in t:
                ok = False
                ts: datetime | None = None
                p = t.find(n1)
                if p < 0:
                    p = t.find(n2)
                if p == 20 and t[0] == "[":  # the hot path: `[YYYY-MM-DD HH:MM:SS TAG] Decode batch`
                    own = stamps.get(t[1:20])
                    if own is not None:
                        ok = True
                        ts = out_ts[i]
                        if ts is None or ts.tzinfo is None:
                            ts = own
                if not ok and p >= 0:
                    ok, ts = self._serving_ts(t, p, out_ts[i])
                if not ok and " batch" in t and "%|" not in t:
                    m = _SERVING_TAG_S_RE.search(t)
                    if m is not None:
                        ok, ts = self._serving_ts(t, m.start(1), out_ts[i])
                        if ok:
                            tag = m.group(1)
                            n1, n2 = tag + "] Decode batch", tag + "] Prefill batch"
                            rank = tag[1:] or None
                if ok:
                    if desc is not None:  # a serving line ends a progress bar
                        held = -1  # its latest redraw stays parsed
                        desc = None
                    if run_first < 0:
                        run_first = i  # the run's first line: parsed
                    else:
                        styles[i] = "serving"
                        out_ts[i] = ts
                        ranks[i] = rank
                    last_of[rank] = i
                    if self._bulk and i + 1 < n and n1 != _NEVER_S and (texts[i + 1].startswith(n1, 20)
                                                         or texts[i + 1].startswith(n2, 20)):
                        skip_to = self._hot_run(texts, out_ts, tss is None, idents, i + 1, n1, n2)
                        if skip_to > i + 1:
                            k = skip_to - i - 1
                            styles[i + 1 : skip_to] = ["serving"] * k
                            ranks[i + 1 : skip_to] = [rank] * k
                            last_of[rank] = skip_to - 1
                    continue
                if "] INFO:     " in t and " HTTP/1." in t and ' - "' in t:
                    m = _ACCESS_S_RE.match(t)
                    if m is not None:
                        ok, ts = self._prefix_ts(m, out_ts[i])
                        body = t[m.end() :]
                        if ok and not (body.startswith("Started server process") or body.startswith("Uvicorn running")):
                            styles[i] = ""  # an HTTP access line: no event, shown plain
                            out_ts[i] = ts
                            ranks[i] = m.group(3)[1:] or None
                            continue  # it neither ends a serving run nor a progress bar
                if "%" in t and t[0] != "[" and "][20" not in t and ".service: " not in t:
                    d, style = _live_progress(t)
                    if d is not None:
                        if run_first >= 0:
                            _end_run(styles, last_of)
                            run_first = -1
                        if d == desc:
                            if held >= 0:
                                styles[held] = style  # a middle redraw: its ts is the record's
                            held = i  # the latest redraw: parsed unless a later one follows
                            continue
                        held = -1
                        desc = d  # a new bar: its first redraw is parsed
                        continue
            # a line to parse: it ends a serving run and a progress bar
            if run_first >= 0:
                _end_run(styles, last_of)
                run_first = -1
            if desc is not None:
                held = -1
                desc = None
            if _trigger_s(t):
                armed = _ARM_LINES
            else:
                armed -= 1
        if run_first >= 0:
            _end_run(styles, last_of)
        self._armed = armed
        self._n1, self._n2, self._rank = n1, n2, rank
        self._desc = desc
        return styles, out_ts, ranks


_NEVER_S = "\x00never\x00"
_TZINFO = operator.attrgetter("tzinfo")


def _end_run(styles: list[LineStyle | None], last_of: dict[str | None, int]) -> None:
    """A serving run ends: each rank's latest line is parsed."""
    for idx in last_of.values():
        styles[idx] = None
    last_of.clear()


def _live_progress(text: str) -> tuple[str | None, LineStyle]:
    """(the bar's description, the display style the SGLang grammar gives its redraws) for an
    unprefixed tqdm redraw whose events do not depend on anything but the line; (None, "")
    otherwise."""
    j = max(text.rfind("it/s]"), text.rfind("s/it]"))
    if j >= 0 and j + 5 < len(text) and not text[j + 5].isspace():
        return None, ""  # a log line glued to the bar's end (no space between): parsed
    k = text.find("%|")
    if k < 0:
        k = text.find("% Completed |")
        if k < 0:
            return None, ""
    if text.startswith("Capturing batches") or text.startswith("Capturing num tokens"):
        style: LineStyle = "phase"  # the grammar marks graph_capture on every redraw
    elif (text.startswith("Loading ") or text.startswith("Multi-thread loading")) and "shards:" in text[:40]:
        if _PROGRESS_COUNT_RE.search(text) is None:
            return None, ""
        style = "progress"
    else:
        return None, ""
    return text[: max(k - 3, 0)], style
