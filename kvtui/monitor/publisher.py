"""The monitor's publisher: what the monitor took in (lines from the ``LogWindow``, boot changes,
GPU readings, connection states) handed to one sink as a list of typed updates at most every
``flush_interval`` (a storm: less often), a boot whose only change is its serving figures at most
every ``serving_interval``; and each boot handed to the history (``kvtui.history``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Final

from kvtui.boot import BootTracker
from kvtui.monitor.options import MIN_FLUSH_INTERVAL, MonitorOptions, Sink
from kvtui.monitor.window import LogWindow
from kvtui.updates import BootState, ConnUpdate, GpuUpdate, LogBatch, MonitorUpdate

if TYPE_CHECKING:
    from kvtui.history import BootRecorder
    from kvtui.spool import Spool

log = logging.getLogger("kvtui.monitor")

STORM_BATCH: Final = 500  # a batch this large (>= 10,000 lines/s at 50 ms) ...
STORM_FLUSH_INTERVAL: Final = 0.1  # ... makes the next one wait this long
STORM_SERVING_INTERVAL: Final = 1.0  # ... and serving-only boot changes wait at least this long
PENDING_BOOT_STATES: Final = 32
PENDING_CONN: Final = 16


class Publisher:
    """Pending updates and the flush loop of one monitor. ``poll`` runs before each flush (the
    connection's status); ``on_new_boot`` when a boot index is published the first time (its
    server PIDs are read at once)."""

    def __init__(self, name: str, window: LogWindow, tracker: BootTracker, spool: Spool, options: MonitorOptions,
                 *, history: BootRecorder | None, poll: Callable[[], None], on_new_boot: Callable[[], None]) -> None:
        self.name = name
        self.window = window
        self.tracker = tracker
        self.spool = spool
        self.history = history
        self.poll = poll
        self.on_new_boot = on_new_boot
        self.dirty = window.dirty
        self.flush_interval = options.flush_every
        # a boot whose only change is its live serving figures is published at most every
        # ``serving_interval`` seconds (a server in a storm prints them many times a second)
        self.serving_interval = max(0.0, options.serving_interval)
        self.serving_due: int | None = None
        self._serving_at = -1e9
        self.batch_lines = 0  # lines in the last batch flushed (sets the pace in a storm)
        self.boots: deque[BootState] = deque(maxlen=PENDING_BOOT_STATES)
        self.conn: list[ConnUpdate] = []
        self.gpu: GpuUpdate | None = None
        self._published_boots = -1  # highest boot index already published
        self._numbers: dict[int, int] = {}  # the history's numbers of the boots, as last published
        self.newest_log_ts: datetime | None = None  # the newest line's time (the history's ``log_time``)
        self._repaced = asyncio.Event()
        self.sink: Sink | None = None
        self.published = 0  # sink calls so far: a view counting the batches it applied knows it is current

    @property
    def pending(self) -> bool:
        return bool(self.window.has_pending or self.boots or self.conn or self.gpu is not None
                    or self.serving_due is not None)

    def set_pace(self, *, flush_interval: float, serving_interval: float) -> None:
        """See ``HostMonitor.set_pace``."""
        flush_interval = max(MIN_FLUSH_INTERVAL, flush_interval)
        shorter = flush_interval < self.flush_interval
        self.flush_interval = flush_interval
        self.serving_interval = max(0.0, serving_interval)
        if shorter:
            self._repaced.set()

    def conn_changed(self, update: ConnUpdate) -> None:
        self.conn.append(update)
        if len(self.conn) > PENDING_CONN:
            del self.conn[:-PENDING_CONN]
        self.dirty.set()

    def gpu_changed(self, update: GpuUpdate) -> None:
        self.gpu = update
        self.dirty.set()

    def serving_changed(self, index: int) -> None:
        """Boot ``index`` changed only its serving figures: published by the flush, at most every
        ``serving_interval``."""
        self.serving_due = index
        self.dirty.set()

    def note_boot(self, index: int) -> None:
        boot = self.tracker.boots[index]
        new = index > self._published_boots
        if new:
            self._published_boots = index
            self.on_new_boot()
        if self.boots and self.boots[-1].index == index:
            prev = self.boots.pop()
            new = new or prev.new_boot
        self.boots.append(BootState(index=index, boot=boot, new_boot=new))
        self.dirty.set()

    async def flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last = 0.0
        while True:
            try:
                async with asyncio.timeout(0.25):
                    await self.dirty.wait()
            except TimeoutError:
                pass
            # a storm (a batch of STORM_BATCH lines or more): half as many, twice as large batches;
            # every line still reaches the spool at once, a view only repaints less often
            interval = self.flush_interval if self.batch_lines < STORM_BATCH else max(self.flush_interval,
                                                                                      STORM_FLUSH_INTERVAL)
            wait = interval - (loop.time() - last)
            if wait > 0:
                self._repaced.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._repaced.wait()  # a shorter pace (a view shown) ends the wait
            self.dirty.clear()
            self.poll()
            if self.flush():
                last = loop.time()

    def serving_pace(self) -> float:
        """How long a serving-only boot change waits: ``serving_interval``; in a storm (the last
        batch was ``STORM_BATCH`` lines or more) at least ``STORM_SERVING_INTERVAL`` — the view
        repaints its serving figures (gauge, sparkline, throughput) once a second instead of four
        times, which leaves the event loop to the keys."""
        if self.batch_lines >= STORM_BATCH:
            return max(self.serving_interval, STORM_SERVING_INTERVAL)
        return self.serving_interval

    def observe_boots(self) -> None:
        """Hand the history the newest two boots (a new boot also ends the one before it; a
        "Stopping …" line changes a status without a boot update); it writes only what changed."""
        hist = self.history
        if hist is None:
            return
        boots = self.tracker.boots
        where = str(self.spool.directory)
        newest = self.newest_log_ts
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
                self.note_boot(last)
            self._numbers = numbers

    def flush(self, *, final: bool = False) -> bool:
        """Hand what is pending to the sink (one call); False when nothing was (or no sink)."""
        self.observe_boots()
        due = self.serving_due
        if due is not None:
            now = time.monotonic()
            if any(b.index == due for b in self.boots):
                self.serving_due = None  # published with the other change
            elif final or now - self._serving_at >= self.serving_pace():
                self.serving_due = None
                self._serving_at = now
                if due < len(self.tracker.boots):
                    self.note_boot(due)
        updates: list[MonitorUpdate] = []
        updates.extend(self.conn)
        self.conn.clear()
        window = self.window
        self.batch_lines = window.since_flush
        window.since_flush = 0
        parts = window.take_pending()
        if parts:
            updates.append(LogBatch(parts))
            with contextlib.suppress(Exception):
                self.spool.flush()
        updates.extend(self.boots)
        self.boots.clear()
        if self.gpu is not None:
            updates.append(self.gpu)
            self.gpu = None
        if not updates or self.sink is None:
            return False
        self.published += 1
        self.sink(updates)
        return True


__all__ = ["PENDING_BOOT_STATES", "STORM_BATCH", "STORM_FLUSH_INTERVAL", "STORM_SERVING_INTERVAL", "Publisher"]
