"""``HostMonitor``: one host's streams -> ingest (spool, ``BootLog``) -> the window and the
publisher; the pollers (GPUs, PIDs) and the connection beside them. Imports no textual."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kvtui.boot import Boot, BootTracker
from kvtui.bootlog import BootLog
from kvtui.config import state_dir
from kvtui.engines.events import ParsedLine
from kvtui.gpu import GpuSample
from kvtui.hosts.backend import ConnStatus, HostBackend
from kvtui.lazy import lazy_module
from kvtui.monitor.connection import Connection
from kvtui.monitor.gaps import Gaps
from kvtui.monitor.ingest import Ingest
from kvtui.monitor.options import DEFAULT_OPTIONS, MonitorHost, MonitorOptions, Sink, engine_hint_for
from kvtui.monitor.pollers import GpuPollers
from kvtui.monitor.publisher import Publisher
from kvtui.monitor.window import LogWindow
from kvtui.spool import Spool
from kvtui.updates import ConnUpdate, GapMark, GpuUpdate, HostMatch, LogLine

if TYPE_CHECKING:
    from kvtui.history import BootRecorder
    from kvtui.history import ident as history_ident
else:
    history_ident = lazy_module("kvtui.history.ident")  # lazy: (pydantic) `import kvtui.monitor` +43 ms CPU

CLOSE_GRACE: Final = 0.2  # seconds the streams get to end by themselves after close()


def _default_state_dir() -> Path:
    return state_dir()


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a finished future's exception as seen (it is raised where it matters, in run())."""
    if not fut.cancelled():
        fut.exception()


class HostMonitor:
    """Runs one host: streams -> spool -> ``BootLog`` (parser -> tracker); GPU history;
    connection state. Publishes batched ``MonitorUpdate``s to one sink. How it runs is its
    ``MonitorOptions`` (``options``); ``history`` records its boots (``kvtui.history``).

    Made of: ``ingest`` (records -> spool -> ``BootLog``; ``kvtui.monitor.ingest``), ``window``
    (the newest lines and those pending; ``.window``), ``publisher`` (the typed batches to the
    sink, their pace, the history; ``.publisher``), ``pollers`` (GPUs, PIDs; ``.pollers``),
    ``connection`` (state, notes, retries; ``.connection``) and ``gap_log`` (gaps of unread lines; ``.gaps``).

    - Every record reaches the on-disk ``spool`` before any view sees it; the in-memory window
      (``recent``) is bounded by ``log_window``.
    - ``run(sink)``: the sink gets a list of updates at most every ``flush_interval`` (≥ 50 ms):
      ``ConnUpdate``s (each change), one ``LogBatch`` (the lines since the last flush; when more
      than ``log_window`` arrived, only the newest ``log_window`` — the older ones are in the
      spool, and a view keeps no more than its window anyway: ``lines[0].seq`` shows the gap),
      ``BootState``s (one per boot that changed, ``new_boot=True`` the first time a boot index is
      published; a restart also puts a ``style="marker"`` line in the log; a boot whose only
      change is its live serving figures at most every ``serving_interval`` seconds), and the latest
      ``GpuUpdate`` (``foreign`` = processes on the server's GPUs that are not the server's).
    - Lines that cannot change a boot are spooled and shown without being parsed
      (``BootLog.plan``; ``live_prefilter=False`` parses every line: the same spool, boots, view).
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

    def __init__(self, name: str, backend: HostBackend, *, host: MonitorHost | None = None,
                 history: BootRecorder | None = None, options: MonitorOptions = DEFAULT_OPTIONS) -> None:
        self.name = name
        self.backend = backend
        self.host = host
        self.options = options
        self.clock = options.clock
        self.began = options.began if options.began is not None else time.monotonic()
        # records -> boots: the one reader (``BootLog``), its live prefilter included
        self.reader = BootLog(engine_hint_for(host), live_prefilter=options.live_prefilter)
        source = f"{host.kind}:{host.source_label}" if host is not None else type(backend).__name__
        root = options.state_dir if options.state_dir is not None else _default_state_dir()
        self.spool: Spool = (
            Spool.resume(root, name, source=source) if options.resume else Spool.create(root, name, source=source)
        )
        # the boot history (``kvtui.history``): each boot's document is written off the loop
        self.history = history
        if history is not None and not history.source:
            history.source = source
        self._closed = asyncio.Event()
        self.window = LogWindow(options.log_window, asyncio.Event())
        self.connection = Connection(backend, retry_start=options.retry_start, publish=self._conn_changed,
                                     closed=self._closed)
        self.pollers = GpuPollers(name, backend, options, history=history, publish=self._gpu_changed,
                                  retry_after=self.connection.retry_after, closed=self._closed)
        self.publisher = Publisher(name, self.window, self.reader.tracker, self.spool, options, history=history,
                                   poll=self.connection.poll, on_new_boot=self.pollers.pids_now.set)
        self.gap_log = Gaps(backend, host.kind if host is not None else type(backend).__name__)
        self.ingest = Ingest(name, self.reader, self.spool, self.window, self.publisher, self.gap_log)
        self._replayed = False
        self._resume = options.resume

    def _conn_changed(self, update: ConnUpdate) -> None:
        self.publisher.conn_changed(update)

    def _gpu_changed(self, update: GpuUpdate) -> None:
        self.publisher.gpu_changed(update)

    # -- what the views read ------------------------------------------------------------------

    @property
    def tracker(self) -> BootTracker:
        return self.reader.tracker

    @property
    def boots(self) -> list[Boot]:
        return self.reader.boots

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def gaps(self) -> list[GapMark]:
        """The gaps of lines the follower did not read (their marker rows' seqs, oldest first)."""
        return self.gap_log.marks

    @property
    def status(self) -> ConnStatus:
        return self.connection.status

    @property
    def notes(self) -> deque[str]:
        return self.connection.notes

    @property
    def notes_seen(self) -> int:
        return self.connection.notes_seen

    @property
    def latest_gpus(self) -> tuple[GpuSample, ...]:
        return self.pollers.latest_gpus

    @property
    def server_pids(self) -> frozenset[int]:
        return self.pollers.server_pids

    @property
    def recent(self) -> deque[LogLine]:
        """The newest ``log_window`` display lines (the rest is in the spool)."""
        return self.window.recent

    @property
    def lines_seen(self) -> int:
        """Lines ingested by this monitor (spool length minus a resumed part)."""
        return self.window.lines_seen

    @property
    def ingest_errors(self) -> int:
        return self.ingest.ingest_errors

    @property
    def published(self) -> int:
        """Sink calls so far: a view counting the batches it applied knows it is current."""
        return self.publisher.published

    @property
    def flush_interval(self) -> float:
        return self.publisher.flush_interval

    @property
    def serving_interval(self) -> float:
        return self.publisher.serving_interval

    @property
    def on_parsed(self) -> Callable[[ParsedLine], None] | None:
        """Called with every parsed line (``kvtui watch``'s log fold)."""
        return self.ingest.on_parsed

    @on_parsed.setter
    def on_parsed(self, fn: Callable[[ParsedLine], None] | None) -> None:
        self.ingest.on_parsed = fn

    @property
    def step_budget(self) -> float:
        """Seconds of ingest between two yields to the event loop."""
        return self.ingest.step_budget

    @step_budget.setter
    def step_budget(self, seconds: float) -> None:
        self.ingest.step_budget = seconds

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
        if isinstance(recorded, int) and index == len(self.reader.boots) - 1:
            return recorded
        return None

    def boot_label(self, index: int | None) -> str:
        """``boot #13`` (the history's number), else ``boot 2 of this log`` (the place of the boot
        in the log this monitor read: a number that cannot be taken for the history's)."""
        return history_ident.label(self.boot_number(index), None if index is None else index + 1)

    def gpu_history(self, index: int) -> Sequence[tuple[float, float]]:
        """(ts, used_mib) samples of GPU ``index``, oldest first, at most ``gpu_history``."""
        return self.pollers.history_of(index)

    def set_pace(self, *, flush_interval: float, serving_interval: float) -> None:
        """How often the sink hears of lines (``flush_interval``, at least 50 ms) and of serving-only
        boot changes (``serving_interval``) from now on: a view that is not on screen needs fewer
        batches. A shorter flush interval takes effect at once (what is pending is flushed)."""
        self.publisher.set_pace(flush_interval=flush_interval, serving_interval=serving_interval)

    @property
    def pending(self) -> bool:
        """Whether something taken in (lines, a boot change, a GPU reading, a status) is not yet
        handed to the sink, or a new boot's server PIDs are still to be read; the flush loop hands
        it over within ``flush_interval`` (a serving-only boot change within ``serving_interval``).
        With ``published``, a test on a frozen clock knows when the view holds everything the host
        produced up to now."""
        return self.publisher.pending or (self.pollers.pids_now.is_set() and not self._closed.is_set())

    # -- a server up for days: its gaps, searched on the host ------------------------------------

    def gap_search_unavailable(self) -> str | None:
        """Why the host cannot search the lines its follower did not read (None: it can)."""
        return self.gap_log.unavailable()

    async def search_gap(
        self, gap: GapMark, pattern: str, *, regex: bool = False, ignore_case: bool = True, context: int = 2,
        limit: int = 200, newest: bool = False, after: HostMatch | None = None,
    ) -> list[HostMatch]:
        """The lines of ``gap`` that match ``pattern``, searched on the host
        (``SearchableLog.search_log``: only the matches and their context come back), oldest
        first; ``after`` a match of an earlier page (the search goes on after it). Raises
        ``GapSearchError`` (its text says why) when the host cannot search them."""
        return await self.gap_log.search(gap, pattern, regex=regex, ignore_case=ignore_case, context=context,
                                      limit=limit, newest=newest, after=after)

    # -- running -------------------------------------------------------------------------------

    async def run(self, sink: Sink) -> None:
        """Run until ``close()`` (or a non-retryable connection failure); see the class doc."""
        pub = self.publisher
        pub.sink = sink
        flusher = asyncio.create_task(pub.flush_loop(), name=f"monitor-flush:{self.name}")
        try:
            if self._resume and not self._replayed:
                self._replayed = True
                await self.ingest.replay()
            if not await self.connection.start():
                return
            await self._run_streams()
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            self.connection.poll()
            if pub.sink is not None:
                pub.flush(final=True)
            if not self.spool.closed:
                with contextlib.suppress(Exception):
                    self.spool.flush()

    async def _run_streams(self) -> None:
        tasks = [
            asyncio.create_task(self.ingest.follow(self.backend, self.options.start, self.began, self.connection,
                                                   self._closed, after_cursor=self.spool.last_cursor if self._resume
                                                   else None), name=f"monitor-log:{self.name}"),
            asyncio.create_task(self.pollers.gpu_loop(), name=f"monitor-gpu:{self.name}"),
            asyncio.create_task(self.pollers.pids_loop(), name=f"monitor-pids:{self.name}"),
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
        self.window.dirty.set()
        self.pollers.pids_now.set()
        if self.options.owns_backend:
            with contextlib.suppress(Exception):
                await self.backend.close()
        self.spool.close()
        if self.history is not None:
            self.publisher.observe_boots()
            await asyncio.to_thread(self.history.close)


__all__ = ["CLOSE_GRACE", "HostMonitor"]
