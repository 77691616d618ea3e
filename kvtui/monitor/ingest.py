"""The monitor's ingest: records -> spool -> ``BootLog`` (the one reader "records -> boots").

Every record reaches the on-disk spool before any view sees it (also one the parser or tracker
rejects); one spool file per boot, so a record is parsed first to know its boot. Lines that
cannot change a boot (``BootLog.plan``: most serving lines, tqdm redraws, HTTP access lines of a
known SGLang server) are spooled and shown without being parsed; the others go through
``BootLog.parse`` and ``BootLog.track`` piece by piece. Work is done in bounded slices, yielding to
the event loop every ``step_budget`` seconds. ``follow`` reads the host's log stream into it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Final

from kvtui.boot import BootDelta
from kvtui.bootlog import BootLog, display_pieces
from kvtui.engines.events import (
    BootBoundary,
    BoundaryKind,
    Engine,
    FailureText,
    LineStyle,
    LogGap,
    LogRecord,
    ParsedLine,
    PhaseMark,
    Progress,
    ServerExit,
    Serving,
    StartMissing,
    Warning_,
)
from kvtui.hosts.backend import BackendError, BlockLogSource, HostBackend, LogStart, RecordBlock
from kvtui.longrun import gap_of
from kvtui.monitor.connection import Connection, close_quietly
from kvtui.monitor.gaps import Gaps
from kvtui.monitor.publisher import Publisher
from kvtui.monitor.window import LogWindow
from kvtui.retry import doubling
from kvtui.spool import iter_spooled
from kvtui.updates import GapMark, LineRun

if TYPE_CHECKING:
    from kvtui.engines.parse import LivePlan
    from kvtui.spool import Spool

log = logging.getLogger("kvtui.monitor")

# records parsed between two yields to the event loop (~6 ms at worst): a key pressed during a
# storm waits for one slice, not for a whole chunk
INGEST_SLICE: Final = 64
SKIPPED_SLICE: Final = 1024  # lines spooled without parsing in one slice (~2-4 ms here)
INGEST_STEP_BUDGET: Final = 0.008  # seconds of slices between two yields to the event loop
MARKER_RULE: Final = "────────"
_ERROR_LEVELS: Final = frozenset({"ERROR", "CRITICAL", "FATAL", "EXCEPTION"})


def line_style(parsed: ParsedLine) -> LineStyle:
    """The display style of a parsed line: error > phase > warning > progress > serving."""
    level = parsed.level
    phase = warning = progress = serving = False
    for ev in parsed.events:
        if isinstance(ev, FailureText | ServerExit):
            return "error"
        if isinstance(ev, LogGap):
            return "gap"  # kvtui's own record of lines not read: a marker row (kvtui.longrun)
        if isinstance(ev, StartMissing):
            return "warning"
        if isinstance(ev, PhaseMark):
            phase = phase or not ev.inferred  # a traceback frame's phase is no phase line
        elif isinstance(ev, BootBoundary):
            phase = phase or ev.kind is BoundaryKind.STARTED
        elif isinstance(ev, Warning_):
            warning = True
        elif isinstance(ev, Progress):
            progress = True
        elif isinstance(ev, Serving):
            serving = True
    if level is not None and level.upper() in _ERROR_LEVELS:
        return "error"
    if phase:
        return "phase"
    if warning or (level is not None and level.upper().startswith("WARN")):
        return "warning"
    if progress:
        return "progress"
    if serving:
        return "serving"
    return ""


def sub_block(block: RecordBlock, a: int, b: int) -> RecordBlock:
    """Records ``a`` .. ``b - 1`` of ``block``, as a block."""
    return RecordBlock(
        block.texts[a:b], block.cursors[a:b], block.source,
        block.ts[a:b] if block.ts is not None else None,
        block.idents[a:b] if block.idents is not None else None,
        block.pids[a:b] if block.pids is not None else None,
        block._records[a:b] if block._records is not None else None,  # the same records
    )


def _changed(upd: BootDelta) -> bool:
    return (
        upd.new_boot or upd.phase_changed or upd.metrics_changed or upd.failed or upd.ready or upd.serving
    )


class Ingest:
    """Records of one monitor into its ``spool``, its ``reader`` (``BootLog``) and its ``window``;
    boot changes go to the ``publisher``, gaps of unread lines to ``gaps``."""

    def __init__(self, name: str, reader: BootLog, spool: Spool, window: LogWindow, publisher: Publisher,
                 gaps: Gaps) -> None:
        self.name = name
        self.reader = reader
        self.spool = spool
        self.window = window
        self.publisher = publisher
        self.gaps = gaps
        self.ingest_errors = 0
        self.on_parsed: Callable[[ParsedLine], None] | None = None  # every parsed line (kvtui watch's log fold)
        self.step_budget = INGEST_STEP_BUDGET  # seconds of ingest between two yields to the loop
        self.step_started = time.perf_counter()

    async def follow(self, backend: HostBackend, start: LogStart, began: float, conn: Connection,
                     closed: asyncio.Event, *, after_cursor: str | None) -> None:
        """Follow the host's log (in blocks when the backend yields them), each batch through
        ``block``; a stream that fails is reopened after the last cursor seen (nothing lost or
        repeated) at ``conn``'s pace; ends with the stream, or when ``closed``."""
        cursor = after_cursor
        pace = doubling(0.5)
        blocks = isinstance(backend, BlockLogSource)
        while not closed.is_set():
            it: AsyncIterator[list[LogRecord]] | AsyncIterator[RecordBlock] | None = None
            try:
                if blocks:
                    it = backend.follow_log_blocks(  # type: ignore[attr-defined]
                        start, after_cursor=cursor, began=began)
                else:
                    it = backend.follow_log(start, after_cursor=cursor, began=began)
                assert it is not None
                async for batch in it:
                    pace.reset()
                    conn.stream_back()
                    block = batch if isinstance(batch, RecordBlock) else RecordBlock.of(batch)
                    await self.block(block)
                    last = block.last_cursor()
                    if last is not None:
                        cursor = last
            except BackendError as exc:
                if closed.is_set():
                    return
                conn.stream_failed(f"log stream: {exc}")
                if not await conn.retry_after(pace):
                    return
                continue
            finally:
                await close_quietly(it)
            # the stream ended without an error (the backend closed), or closed: stop following
            return

    async def block(self, block: RecordBlock) -> None:
        """Ingest a block in bounded slices (at most ``INGEST_SLICE`` parsed lines or
        ``SKIPPED_SLICE`` spooled ones), yielding to the event loop between them. A large block
        (a storm's chunk: thousands of lines) is planned and ingested ``SKIPPED_SLICE`` lines at
        a time: the prefilter's plan of a whole chunk was one step of ~10-20 ms that a key had
        to wait for (the plan is the same over any batching)."""
        n = len(block)
        if n > SKIPPED_SLICE:
            for a in range(0, n, SKIPPED_SLICE):
                await self.block(sub_block(block, a, min(a + SKIPPED_SLICE, n)))
            return
        plan = self.plan(block)
        if plan is None:
            for i in range(0, n, INGEST_SLICE):
                self.range(block, None, i, min(i + INGEST_SLICE, n))
                await self.step_done()
            return
        styles = plan[0]
        a = 0
        while a < n:
            b, parsed = a, 0
            while b < n and parsed < INGEST_SLICE and b - a < SKIPPED_SLICE:
                if styles[b] is None:
                    parsed += 1
                b += 1
            self.range(block, plan, a, b)
            a = b
            await self.step_done()

    async def step_done(self) -> None:
        """After a slice: yield to the event loop once ``step_budget`` seconds of ingest ran
        since the last yield. Slices keep each step short (a key waits at most ~a budget);
        the budget keeps the monitor's share of a busy loop (one step per turn of the loop:
        one small slice a turn, while frames take tens of ms, fell behind a 20k lines/s storm)."""
        now = time.perf_counter()
        if now - self.step_started >= self.step_budget:
            await asyncio.sleep(0)
            self.step_started = time.perf_counter()

    def records(self, records: Sequence[LogRecord]) -> None:
        """Parse, spool and track a slice of records (synchronous, bounded work)."""
        block = RecordBlock.of(list(records))
        self.range(block, self.plan(block), 0, len(block))

    def plan(self, block: RecordBlock) -> LivePlan | None:
        """Which lines of a block to parse (``BootLog.plan``); None: every line."""
        return self.reader.plan(block.texts, block.ts, block.idents)

    def range(self, block: RecordBlock, plan: LivePlan | None, a: int, b: int) -> None:
        """Records ``a`` .. ``b - 1`` of a block: the lines the plan skips go to the spool and the
        view as the parser would have shown them, in order, one write per run; the others are
        parsed and tracked (``record``)."""
        if plan is None:
            for i in range(a, b):
                self.record(block.record(i))
            return
        styles = plan[0]
        reader = self.reader
        sglang = reader.engine is Engine.SGLANG
        start = -1  # first line of a pending run of skipped lines
        for i in range(a, b):
            if styles[i] is not None:
                if start < 0:
                    start = i
                continue
            if start >= 0:
                self._spool_run(block, plan, start, i)
                start = -1
            self.record(block.record(i))
            if sglang and reader.engine is not Engine.SGLANG:
                # another engine's boot began: the rest of the block is parsed line by line
                for j in range(i + 1, len(styles)):
                    styles[j] = None
                sglang = False
        if start >= 0:
            self._spool_run(block, plan, start, b)

    def _spool_run(self, block: RecordBlock, plan: LivePlan, a: int, b: int) -> None:
        boot = max(len(self.reader.boots) - 1, 0)
        styles, tss, ranks = plan
        texts, ts, rk, st = block.texts[a:b], tss[a:b], ranks[a:b], styles[a:b]
        first = self.spool.extend(texts, ts, rk, st, block.cursors[a:b],
                                  block.idents[a:b] if block.idents is not None else None, boot=boot)
        self.window.stage(LineRun(first, boot, texts, ts, rk, st), b - a)

    def record(self, rec: LogRecord) -> None:
        """One record through the parser and the tracker (``BootLog``) into the spool."""
        reader = self.reader
        parsed = reader.parse(rec, self._error)
        if not parsed:
            return
        t = rec.text
        plain = len(parsed) == 1 and "\x1b" not in t and "\r" not in t and "\n" not in t
        pieces = [t] if plain else display_pieces(t)
        same = len(pieces) == len(parsed)
        last = len(parsed) - 1
        boots = reader.boots
        spool, push, pub = self.spool, self.window.push, self.publisher
        for i, p in enumerate(parsed):
            boots_before = len(boots)
            upd = reader.track(p, rec, self._error)
            if self.on_parsed is not None:
                try:
                    self.on_parsed(p)
                except Exception:
                    self._error("on_parsed", rec)
            boots = reader.boots  # the tracker may hold a new list once it drops old boots
            nboots = len(boots)
            boot = max(nboots - 1, 0)
            ts = p.ts or rec.ts
            if nboots > boots_before and nboots > 1:
                push(spool.append(self.marker_text(p), boot=boot, ts=ts, style="marker"))
            text = pieces[i] if same else p.text
            try:
                style = line_style(p)
            except Exception:
                style = ""
            if ts is not None:
                pub.newest_log_ts = ts  # the history's reading/boot boundary (``log_time``)
            line = spool.append(text, boot=boot, ts=ts, rank=p.rank, style=style,
                                cursor=rec.cursor if i == last else None, ident=rec.ident)
            push(line)
            if style == "gap":
                self.gaps.note(line.seq, p)
            if nboots and (_changed(upd) or nboots > boots_before):
                if upd.serving and nboots == boots_before and not (
                    upd.new_boot or upd.phase_changed or upd.metrics_changed or upd.failed or upd.ready
                ):
                    pub.serving_changed(boot)  # published by the flush, at most every serving_interval
                else:
                    pub.note_boot(boot)

    @staticmethod
    def marker_text(parsed: ParsedLine) -> str:
        when = parsed.ts.strftime(" %Y-%m-%d %H:%M:%S") if parsed.ts is not None else ""
        # no number: the boot's number is the history's, known only once it is written (``boot_label``)
        return f"{MARKER_RULE} a new boot started{when} {MARKER_RULE}"

    def _error(self, where: str, rec: LogRecord) -> None:
        self.ingest_errors += 1
        if self.ingest_errors <= 5:
            log.exception("%s: %s failed on a line (kept in the spool): %.200r", self.name, where, rec.text)

    async def replay(self) -> None:
        """A resumed spool: rebuild the tracker from it (in slices, yielding to the loop)."""
        batch: list[LogRecord] = []
        for sp in iter_spooled(self.spool):
            if sp.style == "marker":
                continue
            if sp.style == "gap" and (gap := gap_of(sp.text)) is not None:
                self.gaps.add(GapMark(sp.seq, gap))
            batch.append(LogRecord(text=sp.text, ts=sp.ts, cursor=sp.cursor, source="spool", ident=sp.ident))
            if len(batch) >= INGEST_SLICE:
                self._replay_records(batch)
                batch = []
                await asyncio.sleep(0)
        self._replay_records(batch)
        if self.reader.boots:
            self.publisher.note_boot(len(self.reader.boots) - 1)

    def _replay_records(self, records: Sequence[LogRecord]) -> None:
        for rec in records:
            try:
                self.reader.feed(rec)
            except Exception:
                self._error("replay", rec)


__all__ = ["INGEST_SLICE", "INGEST_STEP_BUDGET", "MARKER_RULE", "SKIPPED_SLICE", "Ingest", "line_style", "sub_block"]
