"""``BootRecorder``: what a live reader (the monitor) hands the history, written off the event
loop. The monitor calls ``observe`` when a boot changes and ``gpus`` with each GPU reading (both
cheap, on the loop); a worker thread owns the SQLite connection and writes the newest document of
each boot that changed (coalesced: a burst of changes is one write). A history that cannot be
written (corrupt, read-only, a newer schema) is said once in ``problem`` and never stops the
reader. A file locked by another process for longer than the busy timeout (``HistoryBusy``) loses
nothing: the boots wait (the newest ``KEEP_BOOTS``) and are tried again on the next write, on a
timer (``kvtui.retry.Backoff``: 1 s doubling to 30 s) and on ``close`` (until its timeout);
``problem`` says "will retry — N boots waiting" meanwhile and is cleared once they are written,
and ``close`` returns (and says) how many boots it could not write.

A GPU reading is the starting boot's only once the log has reached its time: the monitor tells
``log_time`` (its newest line's time) on every batch, and a newer reading is held until the log
reaches it or the boot ends first (then it was taken after the boot, e.g. by a reader that joined
a boot already up and is replaying its log: dropped).

The GPUs' free memory at the boot's start (``gpu_free_at_start_mib``) is the most free memory a
reading showed between the boot's first line and the start of its weight loading
(``_before_load``): after a restart the newest reading when the new boot's first line arrives was
often taken while the old server still held its memory, and a reading taken once the weights are
loading shows the new server's own; the old server gone and nothing loaded yet is the most free
memory of that window. A boot without such a reading stores none (no evidence, no warning)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Model, Phase
from kvtui.history import record as rec
from kvtui.history.doc import BootDoc
from kvtui.history.store import DEFAULT_BUSY_S, HistoryBusy, HistoryError, Limits, Store, open_store
from kvtui.retry import Backoff

if TYPE_CHECKING:
    from kvtui.config import HistoryConfig

log = logging.getLogger(__name__)

KEEP_BOOTS = 8  # boots of one reader the recorder keeps state for (a long-lived console: bounded)
# a write that met a locked file is tried again after RETRY_FIRST_S, then twice as long each time
# (with jitter: several kvtui processes may wait for the same lock), at most RETRY_CAP_S apart
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0
RECORD_TRIES = 3  # a one-shot command's record (``record_boot``): tries in all on a locked file
CLOSE_GRACE_S = 1.0  # a close waits this much past its timeout for the write in progress to give up


class GpuReading(Protocol):
    @property
    def ts(self) -> float: ...
    @property
    def index(self) -> int: ...
    @property
    def used_mib(self) -> float: ...
    @property
    def total_mib(self) -> float: ...


_START_PHASES = frozenset({Phase.LAUNCH, Phase.INIT, Phase.LOAD_WEIGHTS})
# a reading this much after the log's newest line still counts as "at" it: GPU readings carry the
# reader's clock, log lines the host's (journald), and the two may disagree by some seconds; a reader
# that joins a boot gone ready less than this before may keep that many seconds of its readings
LOG_CLOCK_SLACK_S = 30.0


def _reading_time(samples: Sequence[GpuReading]) -> float:
    return max((g.ts or 0.0) for g in samples) if samples else 0.0


def _starting_until(boot: Boot) -> float | None:
    """When the boot stopped starting (epoch s): its ``ready`` phase began, or it ended; None
    when its log has no time for it."""
    end = boot.ended_at
    if boot.status is BootStatus.READY:
        end = next((s.start for s in boot.phases if s.name is Phase.READY and s.start is not None), end)
    return end.timestamp() if end is not None else None


def _load_began(boot: Boot) -> float | None:
    """When the target model's weights began loading (epoch s), when its log says so."""
    for s in boot.phases:
        if s.name is Phase.LOAD_WEIGHTS and s.model is Model.TARGET and s.start is not None:
            return s.start.timestamp()
    return None


def _before_load(boot: Boot, when: float | None) -> bool:
    """Whether a reading taken at ``when`` (epoch s; None: unknown) shows the GPUs as the boot
    found them: not before its first line (the old server of a restart may still hold its memory)
    and not after its weights began loading. Without times (a log without timestamps, a reading
    without a time), while the log has not shown the weights loading yet."""
    start = boot.started_at.timestamp() if boot.started_at is not None else None
    if when is None or not when or start is None:
        return not any(s.name is Phase.LOAD_WEIGHTS for s in boot.phases) and boot.status is BootStatus.STARTING
    if when < start:
        return False
    began = _load_began(boot)
    if began is not None:
        return when <= began
    if boot.status is BootStatus.STARTING:
        return True
    end = _starting_until(boot)  # ended before its weights loaded (vLLM's free-memory check, a crash)
    return end is not None and when <= end


def recordable(boot: Boot) -> bool:
    """Whether the history keeps this boot (see ``BootRecorder.observe``)."""
    return bool(boot.flags) or any(p.name in _START_PHASES for p in boot.phases)


def _signature(boot: Boot) -> tuple[object, ...]:
    m = boot.metrics
    return (boot.status, len(boot.phases), boot.phase, boot.failure is not None, len(boot.flags),
            m.max_total_num_tokens, m.kv_cache_gib, m.avail_after_pool_gib, m.graph_mem_gib,
            m.avail_before_load_gib, boot.ended_at)


class BootRecorder:
    """Records one host's boots (see the module doc)."""

    def __init__(self, host: str, store_path: Path | None = None, *, source: str = "",
                 limits: Limits | None = None, busy_timeout: float = DEFAULT_BUSY_S,
                 retry_pace: Backoff | None = None) -> None:
        self.host = host
        self.source = source
        self._path = store_path
        self._limits = limits
        self.problem: str | None = None
        self.written = 0
        self._sigs: dict[int, tuple[object, ...]] = {}
        self._peaks: dict[int, dict[int, float]] = {}
        self._free0: dict[int, dict[int, float]] = {}
        self._series: dict[int, rec.GpuSeries] = {}  # the GPU readings of a starting boot (bounded)
        self._boots: dict[int, Boot] = {}
        self._spools: dict[int, dict[str, object]] = {}
        self._live: int | None = None  # the boot whose GPU peaks are being taken
        self._latest: Sequence[GpuReading] = ()
        # the newest log line's time (epoch s; None: a source without timestamps) and the readings
        # taken after it, not yet the live boot's (see ``log_time``)
        self._log_time: float | None = None
        self._held: list[Sequence[GpuReading]] = []
        self._pending: dict[int, tuple[str, BootDoc]] = {}
        # boots without a timestamp whose spool segment had no line on disk yet: keyed on a later try
        self._unkeyed: dict[int, tuple[str, BootDoc]] = {}
        # boots whose write met a locked file (``HistoryBusy``): tried again on the next write,
        # when ``_retry_at`` comes (backoff: ``retry_pace``), and on close; bounded (KEEP_BOOTS)
        self._retry: dict[int, tuple[str, BootDoc]] = {}
        self._retry_at: float | None = None
        self._pace = retry_pace or Backoff(initial=RETRY_FIRST_S, cap=RETRY_CAP_S, first=RETRY_FIRST_S)
        self._busy_s = busy_timeout
        self._busy_problem: str | None = None
        self.dropped = 0  # boots that waited for the lock and were pushed out by newer ones
        self.unwritten = 0  # set by ``close``: boots it could not write
        self._cond = threading.Condition()
        self._closing = False
        self._deadline: float | None = None  # monotonic: when a close stops trying
        self._writing: set[int] = set()  # the boots whose documents are being written now
        self._thread: threading.Thread | None = None
        # boot index -> the history's number (row id) once written (``number``; bounded: KEEP_BOOTS)
        self._ids: dict[int, int] = {}

    # -- on the reader's loop ----------------------------------------------------------------------

    def observe(self, index: int, boot: Boot, spool: Mapping[str, object] | None = None) -> None:
        """Boot ``index`` of this reader may have changed: queue its document when it did (a boot
        is stored once it shows a start: a launch, init or weight-loading phase, or an argument
        dump; the serving lines of a server that started before the reader are no boot)."""
        if not recordable(boot):
            return
        sig = _signature(boot)
        if self._sigs.get(index) == sig:
            return
        first = index not in self._sigs
        self._sigs[index] = sig
        if first:
            self._forget(index - KEEP_BOOTS)
        self._boots[index] = boot
        if spool:
            self._spools[index] = dict(spool)
        if first and boot.status is BootStatus.STARTING:
            self._live = index
            self._held = []
            self._free0[index] = {}
            self._peaks[index] = {}
            self._series[index] = rec.GpuSeries()
            if self._latest:  # taken before the boot's first line was read: at its start only if its time says so
                self._offer(index, self._latest, timed_only=True)
        elif index == self._live and boot.status is not BootStatus.STARTING:
            self._settle(index, boot)
        self._queue(index)

    def _forget(self, below: int) -> None:
        """Bounded: what the recorder holds of boots older than the newest ``KEEP_BOOTS``."""
        for table in (self._sigs, self._boots, self._spools, self._peaks, self._free0, self._series):
            for i in [i for i in table if i < below]:
                del table[i]
        with self._cond:
            for i in [i for i in self._ids if i < below]:
                del self._ids[i]

    def number(self, index: int) -> int | None:
        """The history's number (``kvtui.history.ident``) of this reader's boot ``index``, once
        its document is written (a few milliseconds after it was first observed); None before,
        and for a boot the history does not keep."""
        with self._cond:
            return self._ids.get(index)

    def numbers(self) -> dict[int, int]:
        """Every boot index -> number known (a copy; the newest ``KEEP_BOOTS``)."""
        with self._cond:
            return dict(self._ids)

    def log_time(self, when: float | None) -> None:
        """The time (epoch seconds) of the newest log line the reader has read, told on every
        batch: a GPU reading is the starting boot's only when its log had reached the reading's
        time. A reader that joins a boot that is already up replays its log first; the readings
        it takes meanwhile are *now*, after the boot's end, and must not count as the boot's:
        they are held until the log reaches their time (kept, the boot was still starting) or
        the boot ends before it (dropped). ``LOG_CLOCK_SLACK_S`` allows for the two clocks."""
        self._log_time = when
        i = self._live
        boot = self._boots.get(i) if i is not None else None
        if i is not None and boot is not None and boot.status is BootStatus.STARTING and when is not None:
            self._release(i, when + LOG_CLOCK_SLACK_S)

    def gpus(self, samples: Sequence[GpuReading]) -> None:
        """A GPU reading: peak memory of the boot that is starting."""
        self._latest = samples
        i = self._live
        if i is None:
            return
        boot = self._boots.get(i)
        if boot is None or boot.status is not BootStatus.STARTING:
            if boot is not None:
                self._settle(i, boot)
            self._live = None
            return
        self._offer(i, samples)

    def _offer(self, i: int, samples: Sequence[GpuReading], *, timed_only: bool = False) -> None:
        """A reading for the starting boot ``i``: taken, or held while it is newer than the log.
        ``timed_only``: a reading of free memory at the start only when the log's and its times
        show it was (``_before_load``), not for want of times."""
        when = self._log_time
        if when is not None and samples and _reading_time(samples) > when + LOG_CLOCK_SLACK_S:
            self._held.append(samples)
            if len(self._held) > rec.GPU_SAMPLES_MAX:  # bounded: a long silence keeps every other one
                self._held = self._held[::2]
            return
        self._release(i, when + LOG_CLOCK_SLACK_S if when is not None else None)
        self._take(i, samples, timed_only=timed_only)

    def _release(self, i: int, until: float | None) -> None:
        """The held readings up to ``until`` (all: None) become boot ``i``'s, in order."""
        if not self._held:
            return
        keep: list[Sequence[GpuReading]] = []
        for r in self._held:
            if until is None or _reading_time(r) <= until:
                self._take(i, r)
            else:
                keep.append(r)
        self._held = keep

    def _settle(self, i: int, boot: Boot) -> None:
        """Boot ``i`` is no longer starting: the held readings up to its end are its own, the rest
        (taken after it ended) are dropped."""
        end = _starting_until(boot)
        if end is not None:
            self._release(i, end + LOG_CLOCK_SLACK_S)
        self._held = []

    def _take(self, i: int, samples: Sequence[GpuReading], *, timed_only: bool = False) -> None:
        peaks = self._peaks.setdefault(i, {})
        for g in samples:
            if g.used_mib > peaks.get(g.index, -1.0):
                peaks[g.index] = g.used_mib
        boot = self._boots.get(i)
        when = _reading_time(samples) or None
        if boot is not None and (not timed_only or (when is not None and boot.started_at is not None)) \
                and _before_load(boot, when):
            free0 = self._free0.setdefault(i, {})
            for g in samples:
                if g.total_mib > 0 and g.total_mib - g.used_mib > free0.get(g.index, -1.0):
                    free0[g.index] = g.total_mib - g.used_mib
        self._series.setdefault(i, rec.GpuSeries()).add(samples)

    def _queue(self, index: int) -> None:
        boot = self._boots[index]
        spool = self._spools.get(index)
        key = rec.boot_key(self.host, boot)
        if key is None:
            if not spool:
                return
            key = ""  # no timestamp: keyed by its first line's place in the source, in the writer
        series = self._series.get(index)
        doc = rec.new_doc(self.host, boot, source=self.source, spool=spool, peaks_mib=self._peaks.get(index),
                           free_at_start_mib=self._free0.get(index),
                           gpu_samples=series.to_json() if series is not None and series else None)
        with self._cond:
            self._pending[index] = (key, doc)
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._work, name=f"kvtui-history:{self.host}", daemon=True)
                self._thread.start()
            self._cond.notify()

    # -- the writer thread ---------------------------------------------------------------------------

    def _work(self) -> None:
        store: Store | None = None
        try:
            while True:
                with self._cond:
                    self._wait_for_work()
                    closing = self._closing
                    batch = dict(self._pending)
                    self._pending.clear()
                    todo = {**self._retry, **self._unkeyed, **batch}  # the newest document of each boot
                    self._unkeyed.clear()
                    self._writing = set(todo)
                busy_s = self._busy_s
                if closing and self._deadline is not None:  # a close waits for the lock only as long as it has
                    busy_s = max(0.05, min(busy_s, self._deadline - time.monotonic()))
                if store is None and todo:
                    store = self._open(busy_s)
                elif store is not None:
                    store.set_busy_timeout(busy_s)
                retry = self._write(store, todo) if store is not None else todo
                with self._cond:
                    self._writing = set()
                    self._retry = retry  # (only this thread changes it: what waited is written or waits on)
                    self._bound_retry()
                    waiting = len(self._retry)
                    self._after_round(waiting)
                    self._cond.notify_all()
                if closing and (not waiting or self._past_deadline()):
                    self._closed_with(waiting)
                    return
        except Exception as exc:  # never let the history take the reader down
            self._note(f"history: {exc}")
            log.exception("history writer failed")
        finally:
            if store is not None:
                store.close()
            with self._cond:
                self._writing = set()
                self._pending.clear()
                self._cond.notify_all()

    def _wait_for_work(self) -> None:
        """(Holding the lock.) Until a document is queued, the retry is due, or a close asks to end."""
        while not self._pending:
            if self._closing and (not self._retry or self._past_deadline()):
                return
            due = self._retry_at
            if self._retry and due is not None:
                left = due - time.monotonic()
                if self._closing and self._deadline is not None:
                    left = min(left, self._deadline - time.monotonic())
                if left <= 0:
                    return
                self._cond.wait(left)
            elif self._unkeyed and self._closing:
                return  # their last try
            else:
                self._cond.wait()

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _open(self, busy_s: float) -> Store | None:
        """The store to write to; None when the file was locked (``HistoryBusy``): opened again
        on the next try. A file that can never be written (corrupt, read-only, newer schema) opens
        read-only with its problem, said once."""
        store = open_store(self._path, limits=self._limits, busy_timeout=busy_s)
        if store.busy:
            store.close()
            return None
        if store.problem:
            self._note(store.problem)
        return store

    def _write(self, store: Store, todo: Mapping[int, tuple[str, BootDoc]]
               ) -> dict[int, tuple[str, BootDoc]]:
        """Write ``todo``'s documents, oldest boot first; those to try again (the file was locked:
        every one from the first that met the lock) are returned."""
        retry: dict[int, tuple[str, BootDoc]] = {}
        for index in sorted(todo):
            key, doc = todo[index]
            if store.readonly:
                continue  # cannot be written (said once, in ``problem``)
            if not key:
                key = rec.position_key(self.host, doc.spool) or ""
                if not key:  # its first line is not on disk yet: the next write tries again
                    with self._cond:
                        self._unkeyed[index] = ("", doc)
                        for old in sorted(self._unkeyed)[:-KEEP_BOOTS]:  # bounded
                            del self._unkeyed[old]
                    continue
            if retry:
                retry[index] = (key, doc)  # the file is locked: do not wait for it once per boot
                continue
            try:
                row_id = store.put(doc, key)
                self.written += 1
                with self._cond:
                    self._ids[index] = row_id
            except HistoryBusy:
                retry[index] = (key, doc)
            except HistoryError as exc:
                self._note(str(exc))
        return retry

    def _bound_retry(self) -> None:
        """(Holding the lock.) Bounded: the newest ``KEEP_BOOTS`` boots waiting are kept."""
        for old in sorted(self._retry)[:-KEEP_BOOTS]:
            del self._retry[old]
            self.dropped += 1

    def _after_round(self, waiting: int) -> None:
        """(Holding the lock.) Say that boots wait for the lock (and schedule the retry), or clear
        that once they are written."""
        if waiting:
            self._retry_at = time.monotonic() + self._pace.next()
            self._busy_problem = self._note(self._waiting_text(waiting))
        else:
            self._pace.reset()
            self._retry_at = None
            if self._busy_problem is not None and self.problem == self._busy_problem:
                self.problem = None
                log.info("history: %s: the boots that waited for the lock are written", self._where())
            self._busy_problem = None

    def _where(self) -> str:
        return str(self._path) if self._path is not None else "the history file"

    def _waiting_text(self, waiting: int) -> str:
        lost = f" ({self.dropped} older dropped)" if self.dropped else ""
        return (f"history: {self._where()} is busy (locked by another kvtui); will retry — "
                f"{waiting} boot{'s' if waiting != 1 else ''} waiting{lost}")

    def _closed_with(self, waiting: int) -> None:
        """The writer ends (closing): say how many boots the lock kept from being written."""
        self.unwritten = waiting + self.dropped
        if self.unwritten:
            self._note(f"history: {self._where()} stayed locked by another kvtui: {self.unwritten} "
                       f"boot{'s were' if self.unwritten != 1 else ' was'} not written")

    def _note(self, problem: str) -> str:
        if self.problem != problem:
            log.warning("%s", problem)
        self.problem = problem
        return problem

    def waiting(self) -> int:
        """How many boots wait to be written because the file was locked."""
        with self._cond:
            return len(self._retry)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued document is written (True), or ``timeout`` seconds (False; also
        while boots wait for a locked file)."""
        with self._cond:
            if self._thread is None:
                return True
            return self._cond.wait_for(lambda: (not self._pending and not self._writing and not self._retry)
                                       or not (self._thread and self._thread.is_alive()), timeout)

    def close(self, timeout: float = 2.0) -> int:
        """Write what is queued and end the writer: boots waiting for a locked file are tried until
        ``timeout`` seconds have passed. The number of boots not written (0: none lost); the
        problem then says how many."""
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + timeout
            if self._retry:
                self._retry_at = time.monotonic()  # boots waiting for the lock: try now, not at the next pace
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout + CLOSE_GRACE_S)  # a write in progress ends at the deadline (busy timeout)
        with self._cond:
            if thread is not None and thread.is_alive():  # still writing (a stalled disk): not known to be written
                # each boot once (a boot being written may have a newer document queued)
                self.unwritten = len(self._retry.keys() | self._pending.keys() | self._writing) + self.dropped
                if self.unwritten:
                    self._note(f"history: a write to {self._where()} was still waiting when kvtui ended — "
                               f"locked by another kvtui, or a slow disk")
            elif thread is None:
                self.unwritten = 0
            return self.unwritten

    def unwritten_note(self) -> str | None:
        """After ``close``: what a command says on stderr when boots could not be written (a boot
        the history misses is said, never silent); None when every boot was written."""
        if not self.unwritten:
            return None
        return (f"{self.unwritten} boot{'s' if self.unwritten != 1 else ''} not written to the history"
                + (f" ({self.problem})" if self.problem else ""))


def record_boot(host: str, boot: Boot, *, restart: Mapping[str, object] | None = None, source: str = "",
                store: Store | None = None, limits: Limits | None = None,
                unit_env: Mapping[str, str] | None = None, tries: int = RECORD_TRIES,
                pace: Backoff | None = None) -> str | None:
    """``record_numbered`` without the number: the problem, else None."""
    return record_numbered(host, boot, restart=restart, source=source, store=store, limits=limits,
                           unit_env=unit_env, tries=tries, pace=pace)[1]


def record_numbered(host: str, boot: Boot, *, restart: Mapping[str, object] | None = None, source: str = "",
                    store: Store | None = None, limits: Limits | None = None,
                    unit_env: Mapping[str, str] | None = None, tries: int = RECORD_TRIES,
                    pace: Backoff | None = None) -> tuple[int | None, str | None]:
    """Record one boot at once (a one-shot command: ``apply --restart``, ``replay --record``,
    ``tune``); the problem (a message) when it could not be, else None. ``unit_env``: the
    environment the unit or script gives the server (``boot_doc``). A file locked past the busy
    timeout (``HistoryBusy``) is tried ``tries`` times in all, ``pace`` apart (1 s, 2 s): a command
    that ends cannot wait for a later write as the recorder does, and its boot (with the
    prediction ledger's entry) is the one most worth keeping. Returns (the boot's number in the
    history, ``kvtui.history.ident``; the problem): (N, None) when recorded."""
    key = rec.boot_key(host, boot)
    if not recordable(boot):
        return None, "the boot shows no start (no launch, no argument dump): not recorded"
    if key is None:
        return None, "the boot has no timestamp to key it by: not recorded"
    doc = rec.new_doc(host, boot, source=source, restart=restart, unit_env=unit_env)
    steps = pace or Backoff(initial=RETRY_FIRST_S, cap=RETRY_CAP_S, first=RETRY_FIRST_S, jitter=0.5)
    own = store is None
    st = store if store is not None else open_store(limits=limits)
    try:
        for attempt in range(1, max(1, tries) + 1):
            try:
                if own and st.busy:  # opened read-only because the file was locked: open it again
                    st.close()
                    st = open_store(limits=limits)
                if st.readonly:
                    if not (own and st.busy):  # a caller's store is not opened again here
                        return None, st.problem or "the history is read-only"
                    raise HistoryBusy(st.problem or f"{st.path}: the history database is locked by another process")
                return st.put(doc, key), None
            except HistoryBusy as exc:
                if attempt >= tries:
                    return None, f"{exc} (tried {attempt} time{'s' if attempt != 1 else ''})"
                time.sleep(steps.next())
            except HistoryError as exc:
                return None, str(exc)
        return None, None  # not reached: the loop returns
    finally:
        if own:
            st.close()


def recorder_for(host: str, config: HistoryConfig | None, *, path: Path | None = None) -> BootRecorder | None:
    """The recorder of a live reader of ``host``, or None when ``[history] record = false``."""
    if config is not None and not config.record:
        return None
    limits = Limits(config.max_age_days, config.max_boots_per_host) if config is not None else None
    return BootRecorder(host, path, limits=limits)
