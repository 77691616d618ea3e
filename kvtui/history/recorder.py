"""``BootRecorder``: what a live reader (the monitor) hands the history, written off the event
loop. The monitor calls ``observe`` when a boot changes and ``gpus`` with each GPU reading (both
cheap, on the loop); a worker thread owns the SQLite connection and writes the newest document of
each boot that changed (coalesced: a burst of changes is one write). A history that cannot be
written (corrupt, locked, read-only) is said once in ``problem`` and never stops the reader.

A GPU reading is the starting boot's only once the log has reached its time: the monitor tells
``log_time`` (its newest line's time) on every batch, and a newer reading is held until the log
reaches it or the boot ends first (then it was taken after the boot, e.g. by a reader that joined
a boot already up and is replaying its log: dropped)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Phase
from kvtui.history import record as rec
from kvtui.history.store import HistoryError, Limits, Store, open_store

if TYPE_CHECKING:
    from kvtui.config import HistoryConfig

log = logging.getLogger(__name__)

KEEP_BOOTS = 8  # boots of one reader the recorder keeps state for (a long-lived console: bounded)


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
                 limits: Limits | None = None) -> None:
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
        self._pending: dict[int, tuple[str, dict[str, Any]]] = {}
        # boots without a timestamp whose spool segment had no line on disk yet: keyed on a later try
        self._unkeyed: dict[int, tuple[str, dict[str, Any]]] = {}
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False
        self._thread: threading.Thread | None = None

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
            if self._latest:
                self._offer(index, self._latest)
        elif index == self._live and boot.status is not BootStatus.STARTING:
            self._settle(index, boot)
        self._queue(index)

    def _forget(self, below: int) -> None:
        """Bounded: what the recorder holds of boots older than the newest ``KEEP_BOOTS``."""
        for table in (self._sigs, self._boots, self._spools, self._peaks, self._free0, self._series):
            for i in [i for i in table if i < below]:
                del table[i]

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

    def _offer(self, i: int, samples: Sequence[GpuReading]) -> None:
        """A reading for the starting boot ``i``: taken, or held while it is newer than the log."""
        when = self._log_time
        if when is not None and samples and _reading_time(samples) > when + LOG_CLOCK_SLACK_S:
            self._held.append(samples)
            if len(self._held) > rec.GPU_SAMPLES_MAX:  # bounded: a long silence keeps every other one
                self._held = self._held[::2]
            return
        self._release(i, when + LOG_CLOCK_SLACK_S if when is not None else None)
        self._take(i, samples)

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

    def _take(self, i: int, samples: Sequence[GpuReading]) -> None:
        peaks = self._peaks.setdefault(i, {})
        for g in samples:
            if g.used_mib > peaks.get(g.index, -1.0):
                peaks[g.index] = g.used_mib
        free0 = self._free0.setdefault(i, {})
        for g in samples:
            if g.index not in free0 and g.total_mib > 0:
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
        doc = rec.boot_doc(self.host, boot, source=self.source, spool=spool, peaks_mib=self._peaks.get(index),
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
            store = open_store(self._path, limits=self._limits)
            if store.problem:
                self._note(store.problem)
            while True:
                with self._cond:
                    while not self._pending and not self._closing:
                        self._cond.wait()
                    last = not self._pending and self._closing
                    if last and not self._unkeyed:
                        return
                    batch = list(self._pending.items())
                    self._pending.clear()
                    self._busy = True
                for index, (key, doc) in [*self._unkeyed.items(), *batch]:
                    if store.readonly:
                        continue
                    self._unkeyed.pop(index, None)
                    if not key:
                        key = rec.position_key(self.host, doc.get("spool")) or ""
                        if not key:  # its first line is not on disk yet: the next write tries again
                            self._unkeyed[index] = ("", doc)
                            for old in sorted(self._unkeyed)[:-KEEP_BOOTS]:  # bounded
                                del self._unkeyed[old]
                            continue
                    try:
                        store.put(doc, key)
                        self.written += 1
                    except HistoryError as exc:
                        self._note(str(exc))
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                if last:  # closing: the boots still without a key had their last try
                    return
        except Exception as exc:  # never let the history take the reader down
            self._note(f"history: {exc}")
            log.exception("history writer failed")
        finally:
            if store is not None:
                store.close()
            with self._cond:
                self._busy = False
                self._pending.clear()
                self._cond.notify_all()

    def _note(self, problem: str) -> None:
        if self.problem != problem:
            log.warning("%s", problem)
        self.problem = problem

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued document is written (True), or ``timeout`` seconds."""
        with self._cond:
            if self._thread is None:
                return True
            return self._cond.wait_for(lambda: (not self._pending and not self._busy)
                                       or not (self._thread and self._thread.is_alive()), timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued (within ``timeout``) and end the writer."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)


def record_boot(host: str, boot: Boot, *, restart: Mapping[str, object] | None = None, source: str = "",
                store: Store | None = None, limits: Limits | None = None,
                unit_env: Mapping[str, str] | None = None) -> str | None:
    """Record one boot at once (a one-shot command: ``apply --restart``, ``replay --record``);
    the problem (a message) when it could not be, else None. ``unit_env``: the environment the
    unit or script gives the server (``boot_doc``)."""
    key = rec.boot_key(host, boot)
    if not recordable(boot):
        return "the boot shows no start (no launch, no argument dump): not recorded"
    if key is None:
        return "the boot has no timestamp to key it by: not recorded"
    own = store is None
    st = store if store is not None else open_store(limits=limits)
    try:
        if st.readonly:
            return st.problem or "the history is read-only"
        st.put(rec.boot_doc(host, boot, source=source, restart=restart, unit_env=unit_env), key)
        return None
    except HistoryError as exc:
        return str(exc)
    finally:
        if own:
            st.close()


def recorder_for(host: str, config: HistoryConfig | None, *, path: Path | None = None) -> BootRecorder | None:
    """The recorder of a live reader of ``host``, or None when ``[history] record = false``."""
    if config is not None and not config.record:
        return None
    limits = Limits(config.max_age_days, config.max_boots_per_host) if config is not None else None
    return BootRecorder(host, path, limits=limits)
