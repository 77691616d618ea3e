"""HostMonitor: runs one host's streams -> parser -> BootTracker; GPU history; connection state.

Publishes typed, batched updates for any view (the TUI, ``kvtui wait``).
Not part of the pure core (it drives a ``HostBackend``), but imports no textual.

CONTRACT shared with ``kvtui/ui`` and ``kvtui/commands/wait.py`` — the update types below.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from kvtui.boot import Boot, BootStatus, BootUpdate
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
from kvtui.engines.text import strip_ansi
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.hosts.backend import (
    BackendError,
    BlockLogSource,
    ConnState,
    ConnStatus,
    HostBackend,
    HostNotes,
    LogStart,
    RecordBlock,
    SearchableLog,
    aclose_iter,
)
from kvtui.longrun import gap_of, narrow_after
from kvtui.retry import Backoff, doubling, sleep_unless
from kvtui.updates import (
    BootState,
    ConnUpdate,
    GapMark,
    GapSearchError,
    GpuUpdate,
    HostMatch,
    LinePart,
    LineRun,
    LogBatch,
    LogLine,
    MonitorUpdate,
    expand,
)

if TYPE_CHECKING:
    from kvtui.engines.parse import LivePlan, LivePrefilter
    from kvtui.history import BootRecorder
    from kvtui.spool import Spool

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# The monitor
# ---------------------------------------------------------------------------------------------

CLOSE_GRACE: Final = 0.2  # seconds the streams get to end by themselves after close()
MIN_FLUSH_INTERVAL: Final = 0.05  # log lines reach a view at most every 50 ms
STORM_BATCH: Final = 500  # a batch this large (>= 10,000 lines/s at 50 ms) ...
STORM_FLUSH_INTERVAL: Final = 0.1  # ... makes the next one wait this long
STORM_SERVING_INTERVAL: Final = 1.0  # ... and serving-only boot changes wait at least this long
# records parsed between two yields to the event loop (~6 ms at worst): a key pressed during a
# storm waits for one slice, not for a whole chunk
INGEST_SLICE: Final = 64
_PENDING_BOOT_STATES: Final = 32
_NON_RETRYABLE: Final = frozenset({ConnState.FAILED, ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED})
_ERROR_LEVELS: Final = frozenset({"ERROR", "CRITICAL", "FATAL", "EXCEPTION"})
MARKER_RULE: Final = "────────"
MAX_GAPS: Final = 64  # gaps of unread lines a monitor keeps (a server up for days has one or two)
MAX_NOTES: Final = 20  # the follower's notes kept
SKIPPED_SLICE: Final = 1024  # lines spooled without parsing in one slice (~2-4 ms here)
INGEST_STEP_BUDGET: Final = 0.008  # seconds of slices between two yields to the event loop


def _sub_block(block: RecordBlock, a: int, b: int) -> RecordBlock:
    """Records ``a`` .. ``b - 1`` of ``block``, as a block."""
    return RecordBlock(
        block.texts[a:b], block.cursors[a:b], block.source,
        block.ts[a:b] if block.ts is not None else None,
        block.idents[a:b] if block.idents is not None else None,
        block.pids[a:b] if block.pids is not None else None,
        block._records[a:b] if block._records is not None else None,  # the same records
    )


def _part_len(part: LinePart) -> int:
    return 1 if isinstance(part, LogLine) else len(part.texts)


def _trim(parts: deque[LinePart], n: int, want: int) -> int:
    """Drop whole parts from the front of ``parts`` (``n`` lines) while ``want`` lines remain;
    returns the lines left."""
    while parts:
        k = _part_len(parts[0])
        if n - k < want:
            break
        parts.popleft()
        n -= k
    return n


def _cap(parts: Sequence[LinePart], n: int, want: int) -> list[LinePart]:
    """The newest ``want`` lines of ``parts`` (``n`` lines), the oldest run cut to fit."""
    out = list(parts)
    i = 0
    while i < len(out) and n - _part_len(out[i]) >= want:
        n -= _part_len(out[i])
        i += 1
    del out[:i]
    extra = n - want
    if extra > 0:
        first = out[0]
        assert isinstance(first, LineRun)  # a LogLine is one line: it never needs cutting
        out[0] = first.tail(len(first.texts) - extra)
    return out


class MonitorHost(Protocol):
    """What the monitor reads from a ``kvtui.config.HostConfig`` (structural)."""

    @property
    def server_engine(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def source_label(self) -> str: ...


Sink = Callable[[Sequence[MonitorUpdate]], None]


def engine_hint_for(host: MonitorHost | None) -> Engine | None:
    """The engine a host declares (``engine``; demo hosts: ``demo_engine``); None = detect."""
    if host is None:
        return None
    try:
        engine = Engine(host.server_engine)
    except ValueError:
        return None
    return None if engine is Engine.UNKNOWN else engine


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


def _display_pieces(text: str) -> list[str]:
    """The physical lines of a record as the parser splits them, ANSI stripped."""
    if "\x1b" in text:
        text = strip_ansi(text)
    if "\r" in text or "\n" in text:
        return [p for p in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if p.strip()]
    return [text] if text and not text.isspace() else []


def _changed(upd: BootUpdate) -> bool:
    return (
        upd.new_boot or upd.phase_changed or upd.metrics_changed or upd.failed or upd.ready or upd.serving
    )


async def _close_quietly(it: AsyncIterator[object] | None) -> None:
    """Close a stream's iterator (once it is done with), whatever it raises on the way out."""
    if it is not None:
        with contextlib.suppress(Exception):
            await aclose_iter(it)


def _searchable(backend: object) -> SearchableLog | None:
    """The backend when it can search a gap on the host (``SearchableLog``; looked up on the
    object, not with ``isinstance``: a protocol check is cached per class)."""
    return backend if callable(getattr(backend, "search_log", None)) else None  # type: ignore[return-value]


def _default_state_dir() -> Path:
    from kvtui.config import state_dir

    return state_dir()


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a finished future's exception as seen (it is raised where it matters, in run())."""
    if not fut.cancelled():
        fut.exception()


class HostMonitor:
    """Runs one host: streams -> spool -> ``BootLog`` (parser -> tracker); GPU history;
    connection state. Publishes batched ``MonitorUpdate``s to one sink.

    - Every record reaches the on-disk ``spool`` before any view sees it (also a record the
      parser or tracker rejects); one spool file per boot, so the record is parsed first to know
      its boot. The in-memory window (``recent``) is bounded by ``log_window``.
    - ``run(sink)``: the sink gets a list of updates at most every ``flush_interval`` (≥ 50 ms):
      ``ConnUpdate``s (each change), one ``LogBatch`` (the lines since the last flush; when more
      than ``log_window`` arrived, only the newest ``log_window`` — the older ones are in the
      spool, and a view keeps no more than its window anyway: ``lines[0].seq`` shows the gap),
      ``BootState``s (one per boot that changed, ``new_boot=True`` the first time a boot index is
      published; a restart also puts a ``style="marker"`` line in the log; a boot whose only
      change is its live serving figures at most every ``serving_interval`` seconds), and the latest
      ``GpuUpdate`` (``foreign`` = processes on the server's GPUs that are not the server's).
    - Lines that cannot change a boot (most serving lines, tqdm redraws, HTTP access lines of a
      known SGLang server) are spooled and shown without being parsed (``LivePrefilter``; the
      spool, the boots and the view are the same as when every line is parsed; ``live_prefilter=
      False`` parses every line).
    - Reconnects are the backend's business; a log stream that fails (``BackendError``) is
      reopened after the last cursor seen, so nothing is lost or repeated, with capped backoff.
    - ``run`` returns only when ``close()`` was called, or when the host cannot be reached for
      a reason retrying will not fix (``status`` then says why: host key, auth, configuration);
      with ``retry_start=False`` (one-shot commands) also when the first connection fails.
    - ``resume=True`` continues the newest spool set of this host and source (replaying it into
      the tracker, then following after its last cursor); by default each monitor starts a new
      spool set (see ``kvtui.spool``).
    - ``began`` (``start=NEXT_BOOT``): ``time.monotonic()`` when the caller began following
      (``kvtui wait --next`` takes it before connecting), else when the monitor was made; a
      server started after it is the next boot's however slow the connection is
      (``HostBackend.follow_log``).
    """

    def __init__(
        self,
        name: str,
        backend: HostBackend,
        *,
        host: MonitorHost | None = None,
        state_dir: Path | None = None,
        log_window: int = 5000,
        gpu_history: int = 3600,
        flush_interval: float = 0.05,
        gpu_interval: float = 1.0,
        start: LogStart = LogStart.CURRENT_BOOT,
        clock: Callable[[], float] = time.time,
        resume: bool = False,
        pids_interval: float = 10.0,
        owns_backend: bool = True,
        retry_start: bool = True,
        live_prefilter: bool = True,
        serving_interval: float = 0.25,
        history: BootRecorder | None = None,
        began: float | None = None,
    ) -> None:
        from kvtui.bootlog import BootLog
        from kvtui.engines.parse import LivePrefilter
        from kvtui.spool import Spool

        self.name = name
        self.backend = backend
        self.host = host
        self.clock = clock
        self.log_window = max(1, log_window)
        self.flush_interval = max(MIN_FLUSH_INTERVAL, flush_interval)
        self.gpu_interval = gpu_interval
        self.pids_interval = pids_interval
        self.start_mode = start
        self.began = began if began is not None else time.monotonic()
        self.owns_backend = owns_backend
        self.retry_start = retry_start
        # records -> boots; the live path hands each parsed piece to the tracker itself
        self.reader = BootLog(engine_hint_for(host))
        self.parser = self.reader.parser
        self.tracker = self.reader.tracker
        # lines that cannot change a boot are spooled without being parsed (same spool, same boots)
        self._live: LivePrefilter | None = LivePrefilter() if live_prefilter else None
        source = f"{host.kind}:{host.source_label}" if host is not None else type(backend).__name__
        root = state_dir if state_dir is not None else _default_state_dir()
        self.spool: Spool = (
            Spool.resume(root, name, source=source) if resume else Spool.create(root, name, source=source)
        )
        # the boot history (``kvtui.history``): each boot's document is written off the loop
        self.history = history
        if history is not None and not history.source:
            history.source = source
        self.status: ConnStatus = ConnStatus(ConnState.CONNECTING)
        self.latest_gpus: tuple[GpuSample, ...] = ()
        self.foreign: tuple[GpuProcess, ...] = ()
        self.server_pids: frozenset[int] = frozenset()
        # the window (``recent``) and the lines not yet handed to the sink, as parts: LogLines
        # (parsed lines) and LineRuns (columns of lines spooled without parsing) that become
        # LogLines only where a reader asks for them (a view: the rows it draws); each holds at
        # least the newest ``log_window`` lines, whole parts trimmed from the front
        self._window: deque[LinePart] = deque()
        self._window_n = 0
        self._pending_parts: deque[LinePart] = deque()
        self._pending_n = 0
        self._since_flush = 0  # lines since the last flush (uncapped)
        self._batch_lines = 0  # lines in the last batch flushed (sets the pace in a storm)
        self.lines_seen = 0  # lines ingested by this monitor (spool length minus a resumed part)
        self.ingest_errors = 0
        self._gpu_hist: dict[int, deque[tuple[float, float]]] = {}
        self._gpu_history_len = max(1, gpu_history)
        self._pending_boots: deque[BootState] = deque(maxlen=_PENDING_BOOT_STATES)
        self._pending_conn: list[ConnUpdate] = []
        self._pending_gpu: GpuUpdate | None = None
        self._published_boots = -1  # highest boot index already published
        self._numbers: dict[int, int] = {}  # the history's numbers of the boots, as last published
        self._newest_log_ts: datetime | None = None  # the newest line's time (the history's ``log_time``)
        # a boot whose only change is its live serving figures is published at most every
        # ``serving_interval`` seconds (a server in a storm prints them many times a second)
        self.serving_interval = max(0.0, serving_interval)
        self._serving_due: int | None = None
        self._serving_at = -1e9
        self._stream_note = ""
        # a server up for days: the gaps of lines the follower did not read (their marker rows'
        # seqs, oldest first, bounded) and the follower's own notes ("no server start in the
        # last N bytes", a rotation), the newest shown in the connection status
        self.gaps: list[GapMark] = []
        self.notes: deque[str] = deque(maxlen=MAX_NOTES)
        self.notes_seen = 0  # notes taken from the backend so far (a reader prints the new ones)
        self._dirty = asyncio.Event()
        self._repaced = asyncio.Event()
        self.step_budget = INGEST_STEP_BUDGET  # seconds of ingest between two yields to the loop
        self._step_started = time.perf_counter()
        self._closed = asyncio.Event()
        self._pids_now = asyncio.Event()
        self._procs: list[GpuProcess] = []
        self._sink: Sink | None = None
        self.on_parsed: Callable[[ParsedLine], None] | None = None  # every parsed line (kvtui watch's log fold)
        self._replayed = False
        self._resume = resume
        self.published = 0  # sink calls so far: a view counting the batches it applied knows it is current

    # -- public ------------------------------------------------------------------------------

    def boot_number(self, index: int | None) -> int | None:
        """The history's number of the tracker's boot ``index`` (``kvtui.history.ident``), once
        the recorder has written it (a bundle's boot: the number it was stored under); None
        without a history or before."""
        if index is None:
            return None
        if self.history is not None:
            return self.history.number(index)
        # a recording (``connect --bundle``): the newest boot is the one it holds, by its number
        recorded = getattr(self.backend, "recorded_boot", None)
        if isinstance(recorded, int) and index == len(self.tracker.boots) - 1:
            return recorded
        return None

    def boot_label(self, index: int | None) -> str:
        """``boot #13`` (the history's number), else ``boot 2 of this log`` (the place of the boot
        in the log this monitor read: a number that cannot be taken for the history's)."""
        from kvtui.history.ident import label

        return label(self.boot_number(index), None if index is None else index + 1)

    def gpu_history(self, index: int) -> Sequence[tuple[float, float]]:
        """(ts, used_mib) samples of GPU ``index``, oldest first, at most ``gpu_history``."""
        return tuple(self._gpu_hist.get(index, ()))

    def set_pace(self, *, flush_interval: float, serving_interval: float) -> None:
        """How often the sink hears of lines (``flush_interval``, at least 50 ms) and of serving-only
        boot changes (``serving_interval``) from now on: a view that is not on screen needs fewer
        batches. A shorter flush interval takes effect at once (what is pending is flushed)."""
        flush_interval = max(MIN_FLUSH_INTERVAL, flush_interval)
        shorter = flush_interval < self.flush_interval
        self.flush_interval = flush_interval
        self.serving_interval = max(0.0, serving_interval)
        if shorter:
            self._repaced.set()

    @property
    def boots(self) -> list[Boot]:
        return self.tracker.boots

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def pending(self) -> bool:
        """Whether something taken in (lines, a boot change, a GPU reading, a status) is not yet
        handed to the sink, or a new boot's server PIDs are still to be read; the flush loop hands
        it over within ``flush_interval`` (a serving-only boot change within ``serving_interval``).
        With ``published``, a test on a frozen clock knows when the view holds everything the host
        produced up to now."""
        return bool(
            self._pending_parts
            or self._pending_boots
            or self._pending_conn
            or self._pending_gpu is not None
            or self._serving_due is not None
            or (self._pids_now.is_set() and not self._closed.is_set())
        )

    async def run(self, sink: Sink) -> None:
        """Run until ``close()`` (or a non-retryable connection failure); see the class doc."""
        self._sink = sink
        flusher = asyncio.create_task(self._flush_loop(), name=f"monitor-flush:{self.name}")
        try:
            if self._resume and not self._replayed:
                await self._replay_spool()
            if not await self._start_backend():
                return
            await self._run_streams()
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            self._poll_status()
            if self._sink is not None:
                self._flush(final=True)
            if not self.spool.closed:
                with contextlib.suppress(Exception):
                    self.spool.flush()

    async def _run_streams(self) -> None:
        tasks = [
            asyncio.create_task(self._log_loop(), name=f"monitor-log:{self.name}"),
            asyncio.create_task(self._gpu_loop(), name=f"monitor-gpu:{self.name}"),
            asyncio.create_task(self._pids_loop(), name=f"monitor-pids:{self.name}"),
        ]
        streams: asyncio.Future[list[None]] = asyncio.gather(*tasks)
        # retrieved whatever happens: a teardown that cancels run() while a backend's close still
        # awaits leaves the gather with a CancelledError nobody awaits; logged at garbage collection
        # ("_GatheringFuture exception was never retrieved"), inside pytest's own AST work that made
        # CPython 3.11 fail a run whose tests had all passed
        streams.add_done_callback(_retrieve)
        closer: asyncio.Future[object] = asyncio.ensure_future(self._closed.wait())
        try:
            waiting: set[asyncio.Future[object]] = {streams, closer}  # type: ignore[arg-type]
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if streams in done:
                streams.result()  # a bug in a loop surfaces here
            else:  # closed: the backend ends its streams; a stream still asleep is cancelled
                await asyncio.wait(tasks, timeout=CLOSE_GRACE)
        finally:
            closer.cancel()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(BaseException):
                await streams

    async def close(self) -> None:
        """End every stream (closing the backend when the monitor owns it) and the spool."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._dirty.set()
        self._pids_now.set()
        if self.owns_backend:
            with contextlib.suppress(Exception):
                await self.backend.close()
        self.spool.close()
        if self.history is not None:
            self._observe_boots()
            await asyncio.to_thread(self.history.close)

    # -- connection ----------------------------------------------------------------------------

    def _poll_status(self) -> None:
        try:
            st = self.backend.status()
        except Exception as exc:  # a backend bug must not kill the view
            st = ConnStatus(ConnState.FAILED, f"status unavailable: {exc}")
        self._take_notes()
        note = self._stream_note or (self.notes[-1] if self.notes else "")
        if note and st.state is ConnState.CONNECTED:
            detail = f"{st.detail}; {note}" if st.detail else note
            st = ConnStatus(st.state, detail, st.retry_in, st.fingerprint, st.strict_host_key)
        self._set_status(st)

    def _take_notes(self) -> None:
        """The follower's notes (``HostNotes``: a start not in the scan window, a rotation): taken
        from the backend into ``notes``; the newest joins the connection status."""
        backend = self.backend
        if not isinstance(backend, HostNotes):
            return
        try:
            fresh = list(backend.notes)
            backend.notes.clear()
        except Exception:
            return
        for note in fresh:
            if note and (not self.notes or self.notes[-1] != note):
                self.notes.append(note)
                self.notes_seen += 1

    # -- a server up for days: its gaps, searched on the host ------------------------------------

    def gap_search_unavailable(self) -> str | None:
        """Why the host cannot search the lines its follower did not read (None: it can)."""
        if _searchable(self.backend) is not None:
            return None
        kind = self.host.kind if self.host is not None else type(self.backend).__name__
        return f"a {kind} host has no search of its log"

    def gap_before(self, seq: int) -> GapMark | None:
        """The newest gap whose marker row is at or before ``seq``."""
        found = None
        for g in self.gaps:
            if g.seq > seq:
                break
            found = g
        return found

    def gap_after(self, seq: int) -> GapMark | None:
        """The oldest gap whose marker row is at or after ``seq``."""
        return next((g for g in self.gaps if g.seq >= seq), None)

    async def search_gap(
        self, gap: GapMark, pattern: str, *, regex: bool = False, ignore_case: bool = True, context: int = 2,
        limit: int = 200, newest: bool = False, after: HostMatch | None = None,
    ) -> list[HostMatch]:
        """The lines of ``gap`` that match ``pattern``, searched on the host
        (``SearchableLog.search_log``: only the matches and their context come back), oldest
        first; ``after`` a match of an earlier page (the search goes on after it). Raises
        ``GapSearchError`` (its text says why) when the host cannot search them."""
        backend = _searchable(self.backend)
        if backend is None:
            raise GapSearchError(self.gap_search_unavailable() or "no search")
        where = gap.gap.where
        if after is not None:
            narrowed = narrow_after(where, after.cursor, after.ts)
            if narrowed is None:
                return []
            where = narrowed
        try:
            found = await backend.search_log(pattern, where, regex=regex, ignore_case=ignore_case, context=context,
                                             limit=limit, newest=newest)
        except BackendError as exc:
            raise GapSearchError(str(exc) or type(exc).__name__) from exc
        base = after.line_no if after is not None and after.line_no is not None else 0
        return [
            HostMatch(
                text=strip_ansi(m.record.text) if "\x1b" in m.record.text else m.record.text,
                ts=m.record.ts,
                line_no=(base + m.line_no) if m.line_no is not None else None,
                before=tuple(r.text for r in m.context_before),
                after=tuple(r.text for r in m.context_after),
                cursor=m.record.cursor,
            )
            for m in found
        ]

    def _note_gap(self, seq: int, parsed: ParsedLine) -> None:
        ev = parsed.events[0] if parsed.events else None
        if isinstance(ev, LogGap):
            self.gaps.append(GapMark(seq, ev))
            del self.gaps[:-MAX_GAPS]

    def _set_status(self, st: ConnStatus) -> None:
        if st != self.status:
            self.status = st
            self._pending_conn.append(ConnUpdate(st))
            if len(self._pending_conn) > 16:
                del self._pending_conn[:-16]
            self._dirty.set()

    async def _start_backend(self) -> bool:
        pace = doubling(0.5)
        while not self._closed.is_set():
            try:
                await self.backend.start()
            except BackendError as exc:
                st = self.backend.status()
                detail = str(exc) or st.detail
                if st.state in _NON_RETRYABLE or not self.retry_start:
                    state = st.state if st.state in _NON_RETRYABLE else ConnState.FAILED  # given up
                    self._set_status(ConnStatus(state, detail, None, st.fingerprint, st.strict_host_key))
                    return False
                delay = pace.next()
                self._set_status(ConnStatus(ConnState.RECONNECTING, detail, delay, st.fingerprint, st.strict_host_key))
                if await self._sleep(delay):
                    return False
                continue
            self._poll_status()
            return True
        return False

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless closed first; True when closed."""
        return await sleep_unless(self._closed, seconds)

    async def _retry_after(self, pace: Backoff) -> bool:
        """A stream failed: wait the pace's next delay. False when retrying cannot help (the host
        will not come back: host key, auth, configuration) or the monitor closed meanwhile."""
        if self.backend.status().state in _NON_RETRYABLE:
            return False
        return not await self._sleep(pace.next())

    # -- logs --------------------------------------------------------------------------------------

    async def _log_loop(self) -> None:
        cursor = self.spool.last_cursor if self._resume else None
        pace = doubling(0.5)
        blocks = isinstance(self.backend, BlockLogSource)
        while not self._closed.is_set():
            it: AsyncIterator[list[LogRecord]] | AsyncIterator[RecordBlock] | None = None
            try:
                if blocks:
                    it = self.backend.follow_log_blocks(  # type: ignore[attr-defined]
                        self.start_mode, after_cursor=cursor, began=self.began)
                else:
                    it = self.backend.follow_log(self.start_mode, after_cursor=cursor, began=self.began)
                assert it is not None
                async for batch in it:
                    pace.reset()
                    if self._stream_note:
                        self._stream_note = ""
                        self._poll_status()
                    block = batch if isinstance(batch, RecordBlock) else RecordBlock.of(batch)
                    await self._ingest_block(block)
                    last = block.last_cursor()
                    if last is not None:
                        cursor = last
            except BackendError as exc:
                if self._closed.is_set():
                    return
                self._stream_note = f"log stream: {exc}"
                self._poll_status()
                if not await self._retry_after(pace):
                    return
                continue
            finally:
                await _close_quietly(it)
            if self._closed.is_set():
                return
            # the stream ended without an error (the backend closed): stop following
            return

    async def _ingest_block(self, block: RecordBlock) -> None:
        """Ingest a block in bounded slices (at most ``INGEST_SLICE`` parsed lines or
        ``SKIPPED_SLICE`` spooled ones), yielding to the event loop between them. A large block
        (a storm's chunk: thousands of lines) is planned and ingested ``SKIPPED_SLICE`` lines at
        a time: the prefilter's plan of a whole chunk was one step of ~10-20 ms that a key had
        to wait for (the plan is the same over any batching)."""
        n = len(block)
        if n > SKIPPED_SLICE:
            for a in range(0, n, SKIPPED_SLICE):
                await self._ingest_block(_sub_block(block, a, min(a + SKIPPED_SLICE, n)))
            return
        plan = self._plan(block)
        n = len(block)
        if plan is None:
            for i in range(0, n, INGEST_SLICE):
                self._ingest_range(block, None, i, min(i + INGEST_SLICE, n))
                await self._step_done()
            return
        styles = plan[0]
        a = 0
        while a < n:
            b, parsed = a, 0
            while b < n and parsed < INGEST_SLICE and b - a < SKIPPED_SLICE:
                if styles[b] is None:
                    parsed += 1
                b += 1
            self._ingest_range(block, plan, a, b)
            a = b
            await self._step_done()

    async def _step_done(self) -> None:
        """After a slice: yield to the event loop once ``step_budget`` seconds of ingest ran
        since the last yield. Slices keep each step short (a key waits at most ~a budget);
        the budget keeps the monitor's share of a busy loop (one step per turn of the loop:
        one small slice a turn, while frames take tens of ms, fell behind a 20k lines/s storm)."""
        now = time.perf_counter()
        if now - self._step_started >= self.step_budget:
            await asyncio.sleep(0)
            self._step_started = time.perf_counter()

    def _ingest(self, records: Sequence[LogRecord]) -> None:
        """Parse, spool and track a slice of records (synchronous, bounded work)."""
        block = RecordBlock.of(list(records))
        self._ingest_range(block, self._plan(block), 0, len(block))

    def _plan(self, block: RecordBlock) -> LivePlan | None:
        """Which lines of a block to parse (``LivePrefilter``); None: every line."""
        live = self._live
        if live is None:
            return None
        return live.plan(block.texts, block.ts, block.idents, sglang=self.parser.engine is Engine.SGLANG)

    def _ingest_range(self, block: RecordBlock, plan: LivePlan | None, a: int, b: int) -> None:
        """Records ``a`` .. ``b - 1`` of a block: the lines the plan skips go to the spool and the
        view as the parser would have shown them, in order, one write per run; the others are
        parsed and tracked (``_ingest_record``)."""
        if plan is None:
            for i in range(a, b):
                self._ingest_record(block.record(i))
            return
        styles = plan[0]
        sglang = self.parser.engine is Engine.SGLANG
        start = -1  # first line of a pending run of skipped lines
        for i in range(a, b):
            if styles[i] is not None:
                if start < 0:
                    start = i
                continue
            if start >= 0:
                self._spool_run(block, plan, start, i)
                start = -1
            self._ingest_record(block.record(i))
            if sglang and self.parser.engine is not Engine.SGLANG:
                # another engine's boot began: the rest of the block is parsed line by line
                for j in range(i + 1, len(styles)):
                    styles[j] = None
                sglang = False
        if start >= 0:
            self._spool_run(block, plan, start, b)

    def _spool_run(self, block: RecordBlock, plan: LivePlan, a: int, b: int) -> None:
        boot = max(len(self.tracker.boots) - 1, 0)
        styles, tss, ranks = plan
        texts, ts, rk, st = block.texts[a:b], tss[a:b], ranks[a:b], styles[a:b]
        first = self.spool.extend(texts, ts, rk, st, block.cursors[a:b],
                                  block.idents[a:b] if block.idents is not None else None, boot=boot)
        self._stage(LineRun(first, boot, texts, ts, rk, st), b - a)

    def _stage(self, part: LinePart, n: int) -> None:
        """A part (``n`` lines, just spooled) joins the window and the lines pending for the sink;
        whole parts older than the newest ``log_window`` lines are dropped from both."""
        self.lines_seen += n
        self._since_flush += n
        want = self.log_window
        window, pending = self._window, self._pending_parts
        window.append(part)
        pending.append(part)
        self._window_n += n
        self._pending_n += n
        if self._window_n > 2 * want:
            self._window_n = _trim(window, self._window_n, want)
        if self._pending_n > 2 * want:
            self._pending_n = _trim(pending, self._pending_n, want)
        self._dirty.set()

    @property
    def recent(self) -> deque[LogLine]:
        """The newest ``log_window`` display lines (the rest is in the spool)."""
        return deque(expand(_cap(self._window, self._window_n, self.log_window)), maxlen=self.log_window)

    def _ingest_record(self, rec: LogRecord) -> None:
        """One record through the parser and the tracker into the spool."""
        try:
            parsed = self.parser.feed(rec)
        except Exception:
            self._note_ingest_error("parser", rec)
            parsed = [ParsedLine(text=p, ts=rec.ts, record=rec) for p in _display_pieces(rec.text)]
        if not parsed:
            return
        t = rec.text
        plain = len(parsed) == 1 and "\x1b" not in t and "\r" not in t and "\n" not in t
        pieces = [t] if plain else _display_pieces(t)
        same = len(pieces) == len(parsed)
        last = len(parsed) - 1
        for i, p in enumerate(parsed):
            boots_before = len(self.tracker.boots)
            try:
                upd = self.tracker.feed(p)
            except Exception:
                self._note_ingest_error("tracker", rec)
                upd = BootUpdate()
            if self.on_parsed is not None:
                try:
                    self.on_parsed(p)
                except Exception:
                    self._note_ingest_error("on_parsed", rec)
            nboots = len(self.tracker.boots)
            boot = max(nboots - 1, 0)
            if nboots > boots_before and nboots > 1:
                self._push(self.spool.append(self._marker_text(boot, p), boot=boot, ts=p.ts or rec.ts,
                                             style="marker"))
            text = pieces[i] if same else p.text
            try:
                style = line_style(p)
            except Exception:
                style = ""
            if (p.ts or rec.ts) is not None:
                self._newest_log_ts = p.ts or rec.ts  # the history's reading/boot boundary (``log_time``)
            line = self.spool.append(
                text,
                boot=boot,
                ts=p.ts or rec.ts,
                rank=p.rank,
                style=style,
                cursor=rec.cursor if i == last else None,
                ident=rec.ident,
            )
            self._push(line)
            if style == "gap":
                self._note_gap(line.seq, p)
            if nboots and (_changed(upd) or nboots > boots_before):
                if upd.serving and nboots == boots_before and not (
                    upd.new_boot or upd.phase_changed or upd.metrics_changed or upd.failed or upd.ready
                ):
                    self._serving_due = boot  # published by the flush, at most every serving_interval
                    self._dirty.set()
                else:
                    self._note_boot(boot)

    def _marker_text(self, boot: int, parsed: ParsedLine) -> str:
        when = parsed.ts.strftime(" %Y-%m-%d %H:%M:%S") if parsed.ts is not None else ""
        # no number: the boot's number is the history's, known only once it is written (``boot_label``)
        return f"{MARKER_RULE} a new boot started{when} {MARKER_RULE}"

    def _note_ingest_error(self, where: str, rec: LogRecord) -> None:
        self.ingest_errors += 1
        if self.ingest_errors <= 5:
            log.exception("%s: %s failed on a line (kept in the spool): %.200r", self.name, where, rec.text)

    def _push(self, line: LogLine) -> None:
        self._stage(line, 1)

    def _note_boot(self, index: int) -> None:
        boot = self.tracker.boots[index]
        new = index > self._published_boots
        if new:
            self._published_boots = index
            self._pids_now.set()
        if self._pending_boots and self._pending_boots[-1].index == index:
            prev = self._pending_boots.pop()
            new = new or prev.new_boot
        self._pending_boots.append(BootState(index=index, boot=boot, new_boot=new))
        self._dirty.set()

    async def _replay_spool(self) -> None:
        """A resumed spool: rebuild the tracker from it (in slices, yielding to the loop)."""
        from kvtui.spool import iter_spooled

        self._replayed = True
        batch: list[LogRecord] = []
        for sp in iter_spooled(self.spool):
            if sp.style == "marker":
                continue
            if sp.style == "gap" and (gap := gap_of(sp.text)) is not None:
                self.gaps.append(GapMark(sp.seq, gap))
                del self.gaps[:-MAX_GAPS]
            batch.append(LogRecord(text=sp.text, ts=sp.ts, cursor=sp.cursor, source="spool", ident=sp.ident))
            if len(batch) >= INGEST_SLICE:
                self._replay_records(batch)
                batch = []
                await asyncio.sleep(0)
        self._replay_records(batch)
        if self.tracker.boots:
            self._note_boot(len(self.tracker.boots) - 1)

    def _replay_records(self, records: Sequence[LogRecord]) -> None:
        for rec in records:
            try:
                self.reader.feed(rec)
            except Exception:
                self._note_ingest_error("replay", rec)

    # -- GPUs ----------------------------------------------------------------------------------------

    async def _gpu_loop(self) -> None:
        pace = doubling(1.0)
        while not self._closed.is_set():
            it: AsyncIterator[list[GpuSample]] | None = None
            try:
                it = self.backend.gpu_stream(self.gpu_interval)
                async for samples in it:
                    pace.reset()
                    self._on_gpu(samples)
            except BackendError as exc:
                if self._closed.is_set():
                    return
                log.info("%s: GPU stream: %s", self.name, exc)
                if self.latest_gpus and not all(s.stale for s in self.latest_gpus):
                    from dataclasses import replace

                    self._on_gpu([replace(s, stale=True) for s in self.latest_gpus], record=False)
                if not await self._retry_after(pace):
                    return
                continue
            finally:
                await _close_quietly(it)
            return  # the stream ended: no GPU data on this host (status says why), or closed

    def _on_gpu(self, samples: Sequence[GpuSample], *, record: bool = True) -> None:
        self.latest_gpus = tuple(samples)
        if record and self.history is not None:
            self.history.gpus(samples)
        if record:
            now = self.clock()
            for s in samples:
                hist = self._gpu_hist.get(s.index)
                if hist is None:
                    hist = self._gpu_hist[s.index] = deque(maxlen=self._gpu_history_len)
                hist.append((s.ts or now, s.used_mib))
        self.foreign = self._foreign()
        self._pending_gpu = GpuUpdate(self.latest_gpus, self.foreign)
        self._dirty.set()

    def _foreign(self) -> tuple[GpuProcess, ...]:
        pids = self.server_pids
        if not pids:
            return ()  # unknown server PIDs: nothing can be called foreign
        gpus = {s.index for s in self.latest_gpus}
        procs: list[GpuProcess] = [p for s in self.latest_gpus for p in s.processes]
        if not procs:
            procs = self._procs
        return tuple(p for p in procs if p.pid not in pids and (p.gpu_index is None or p.gpu_index in gpus))

    async def _pids_loop(self) -> None:
        while not self._closed.is_set():
            try:
                pids = await self.backend.server_pids()
                procs: list[GpuProcess] = []
                if not any(s.processes for s in self.latest_gpus):
                    procs = await self.backend.gpu_processes()
            except BackendError as exc:
                log.info("%s: server PIDs / GPU processes: %s", self.name, exc)
            else:
                self.server_pids = frozenset(pids)
                self._procs = procs
                foreign = self._foreign()
                if foreign != self.foreign and self.latest_gpus:
                    self.foreign = foreign
                    self._pending_gpu = GpuUpdate(self.latest_gpus, foreign)
                    self._dirty.set()
            self._pids_now.clear()
            try:
                async with asyncio.timeout(self.pids_interval):
                    await self._pids_now.wait()
            except TimeoutError:
                pass

    # -- publishing ------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last = 0.0
        while True:
            try:
                async with asyncio.timeout(0.25):
                    await self._dirty.wait()
            except TimeoutError:
                pass
            # a storm (a batch of STORM_BATCH lines or more): half as many, twice as large batches;
            # every line still reaches the spool at once, a view only repaints less often
            interval = self.flush_interval if self._batch_lines < STORM_BATCH else max(self.flush_interval,
                                                                                       STORM_FLUSH_INTERVAL)
            wait = interval - (loop.time() - last)
            if wait > 0:
                self._repaced.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._repaced.wait()  # a shorter pace (a view shown) ends the wait
            self._dirty.clear()
            self._poll_status()
            if self._flush():
                last = loop.time()

    def _serving_pace(self) -> float:
        """How long a serving-only boot change waits: ``serving_interval``; in a storm (the last
        batch was ``STORM_BATCH`` lines or more) at least ``STORM_SERVING_INTERVAL`` — the view
        repaints its serving figures (gauge, sparkline, throughput) once a second instead of four
        times, which leaves the event loop to the keys."""
        if self._batch_lines >= STORM_BATCH:
            return max(self.serving_interval, STORM_SERVING_INTERVAL)
        return self.serving_interval

    def _observe_boots(self) -> None:
        """Hand the history the newest two boots (a new boot also ends the one before it; a
        "Stopping …" line changes a status without a boot update); it writes only what changed."""
        hist = self.history
        if hist is None:
            return
        boots = self.tracker.boots
        where = str(self.spool.directory)
        newest = self._newest_log_ts
        try:
            hist.log_time(newest.timestamp() if newest is not None else None)
        except (OverflowError, OSError, ValueError):
            hist.log_time(None)
        for i in range(max(0, len(boots) - 2), len(boots)):
            try:
                hist.observe(i, boots[i], {"set": where, "boot": i})
            except Exception:  # the history never takes the monitor down
                log.exception("%s: history", self.name)
        # the newest boot, once the writer has learnt its number (``boot_number``), is published
        # again: its views name it by the history's number from then on
        numbers = hist.numbers()
        if numbers != self._numbers:
            last = len(boots) - 1
            if last >= 0 and numbers.get(last) != self._numbers.get(last) and last <= self._published_boots:
                self._note_boot(last)
            self._numbers = numbers

    def _flush(self, *, final: bool = False) -> bool:
        self._observe_boots()
        due = self._serving_due
        if due is not None:
            now = time.monotonic()
            if any(b.index == due for b in self._pending_boots):
                self._serving_due = None  # published with the other change
            elif final or now - self._serving_at >= self._serving_pace():
                self._serving_due = None
                self._serving_at = now
                if due < len(self.tracker.boots):
                    self._note_boot(due)
        updates: list[MonitorUpdate] = []
        updates.extend(self._pending_conn)
        self._pending_conn.clear()
        self._batch_lines = self._since_flush
        self._since_flush = 0
        if self._pending_parts:
            updates.append(LogBatch(_cap(self._pending_parts, self._pending_n, self.log_window)))
            self._pending_parts.clear()
            self._pending_n = 0
            with contextlib.suppress(Exception):
                self.spool.flush()
        updates.extend(self._pending_boots)
        self._pending_boots.clear()
        if self._pending_gpu is not None:
            updates.append(self._pending_gpu)
            self._pending_gpu = None
        if not updates or self._sink is None:
            return False
        self.published += 1
        self._sink(updates)
        return True


# ---------------------------------------------------------------------------------------------
# One-shot: the boots of a host (``kvtui calc --host``)
# ---------------------------------------------------------------------------------------------


async def read_boots(
    backend: HostBackend,
    *,
    timeout: float,
    host: MonitorHost | None = None,
    idle: float = 0.5,
    start_backend: bool = True,
    engine: Engine | None = None,
    first: float | None = None,
    close_grace: float = 5.0,
) -> list[Boot]:
    """Follow the host's current boot until it is over (ready, failed or stopped: a serving
    server never goes quiet), until the stream goes quiet for ``idle`` seconds (a stalled or
    stopped server), or ``timeout``; return the tracker's boots. Writes no spool. Starts the backend unless
    told not to; never closes it. Raises ``BackendError`` when the host cannot be reached.

    The one reader of "the host's boots now" (``kvtui calc --host``, the service layer's
    prediction): ``engine`` overrides the host's declared engine (the service knows it from the
    flags file); ``first`` gives up on a log that yields nothing within that many seconds
    (default: ``timeout``); closing the log stream waits at most ``close_grace`` seconds."""
    from kvtui.bootlog import BootLog

    hint = engine if engine in (Engine.SGLANG, Engine.VLLM) else engine_hint_for(host)
    reader = BootLog(hint)
    if start_backend:
        async with asyncio.timeout(timeout):
            await backend.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    it = backend.follow_log(LogStart.CURRENT_BOOT)
    got_any = False
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                wait = min(idle, left) if got_any else (left if first is None else min(first, left))
                async with asyncio.timeout(wait):
                    batch = await anext(it)
            except TimeoutError:
                break  # caught up: the stream went quiet
            except StopAsyncIteration:
                break
            got_any = True
            reader.feed_all(batch)
            cur = reader.current
            if cur is not None and cur.status is not BootStatus.STARTING:
                break  # the current boot is over (ready, failed, stopped): its figures are in
    finally:
        # bounded: a follower slow to let go (a dropped SSH channel) is left to finish alone
        with contextlib.suppress(TimeoutError, BackendError):
            await asyncio.wait_for(aclose_iter(it), close_grace)
    return reader.boots


async def host_boots(
    name: str, hosts: str | None = None, *, timeout: float = 60.0, idle: float = 0.5
) -> list[Boot]:
    """The boots of a configured host as its log shows them now, for ``kvtui calc --host``:
    hosts.toml -> backend -> ``read_boots`` -> close. Raises ``kvtui.config.ConfigError`` (bad
    file, unknown host), ``BackendError`` (unreachable) or ``TimeoutError`` (nothing within
    ``timeout``); the last boot is the host's current one."""
    from kvtui.config import load_config
    from kvtui.hosts.factory import make_backend

    host = load_config(hosts).host(name)
    backend = make_backend(name, host)
    try:
        return await read_boots(backend, timeout=timeout, host=host, idle=idle)
    finally:
        with contextlib.suppress(Exception):
            await backend.close()


__all__ = [  # the update types live in kvtui.updates; re-exported for the views that import them from here
    "CLOSE_GRACE",
    "INGEST_SLICE",
    "INGEST_STEP_BUDGET",
    "MARKER_RULE",
    "MIN_FLUSH_INTERVAL",
    "SKIPPED_SLICE",
    "STORM_BATCH",
    "STORM_FLUSH_INTERVAL",
    "STORM_SERVING_INTERVAL",
    "BootState",
    "ConnUpdate",
    "GpuUpdate",
    "HostMonitor",
    "LogBatch",
    "LogLine",
    "MonitorHost",
    "MonitorUpdate",
    "Sink",
    "engine_hint_for",
    "host_boots",
    "line_style",
    "read_boots",
]
