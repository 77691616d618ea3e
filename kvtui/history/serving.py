"""Writing a boot's serving figures into the history (issue 24): ``record_serving`` (one write,
blocking) and ``ServingRecorder`` (a live watcher's hook: every ``RECORD_EVERY_S`` and at its end,
off the event loop). The figures themselves, the section and its merging:
``kvtui.history.serving_figures``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from kvtui.boot import Boot
from kvtui.history import record as rec
from kvtui.history.doc import BootDoc
from kvtui.history.recorder import recordable
from kvtui.history.serving_figures import (
    MAX_SESSIONS,
    OBSERVED_MARGIN,
    RECORD_EVERY_S,
    SERVING_VERSION,
    ServingTally,
    build_section,
    merge_serving,
    observed_tokens,
    section_of,
    summary,
)
from kvtui.history.store import HistoryError, Limits, Store, open_store
from kvtui.serving.window import ServingWindow

__all__ = [
    "MAX_SESSIONS",
    "OBSERVED_MARGIN",
    "RECORD_EVERY_S",
    "SERVING_VERSION",
    "ServingRecorder",
    "ServingTally",
    "build_section",
    "merge_serving",
    "observed_tokens",
    "record_serving",
    "section_of",
    "serving_doc",
    "summary",
]


# -- writing ---------------------------------------------------------------------------------------


def serving_doc(host: str, boot: Boot, tally: ServingTally) -> tuple[str, BootDoc] | None:
    """The key and document ``record_serving`` writes: the boot's own document (as the recorder
    would write it) with this watcher's ``serving`` section; None when the history cannot keep the
    boot (no start seen, no timestamp: ``BootRecorder.observe``'s rule) or nothing was sampled."""
    if not tally.samples or not recordable(boot):
        return None
    key = rec.boot_key(host, boot)
    if key is None:
        return None
    doc = rec.new_doc(host, boot, source="kvtui watch")
    return key, doc.copy_with(serving=tally.section())


def record_serving(store: Store, host: str, boot: Boot, tally: ServingTally) -> int | None:
    """Write ``tally`` into the boot's document (merged with what is stored: other watchers' parts
    stay); the boot's id in the history, None when it cannot be kept (``serving_doc``). Blocking
    (SQLite): call it off the event loop (``asyncio.to_thread``). Raises ``HistoryError``."""
    got = serving_doc(host, boot, tally)
    if got is None:
        return None
    key, doc = got
    return store.put(doc, key)


class ServingRecorder:
    """A live watcher's recording hook (``kvtui watch``; the console's serving panel may use it as
    is): ``observe`` after each sample (on the event loop: it follows the window and, every
    ``every`` seconds, writes the tally in a worker thread — one write at a time, the loop never
    waits for SQLite); ``close`` writes the last figures. A new boot (another key) writes the
    previous boot's tally and starts a new one. A write that fails (a locked file, a read-only
    history) is said in ``problem`` and tried again at the next turn: the tally holds sums, a
    later write carries everything."""

    def __init__(self, host: str, *, path: Path | None = None, limits: Limits | None = None,
                 every: float = RECORD_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.path = path
        self.limits = limits
        self.every = every
        self.clock = clock
        self.problem: str | None = None
        self.written = 0
        self.boot_id: int | None = None  # the boot's number in the history, once written
        self.tally: ServingTally | None = None
        self._key: str | None = None
        self._boot: Boot | None = None
        self._due = clock() + every
        self._task: asyncio.Task[None] | None = None
        self._queue: dict[str, BootDoc] = {}

    def observe(self, boot: Boot, window: ServingWindow) -> None:
        key = rec.boot_key(self.host, boot)
        pool = boot.metrics.max_total_num_tokens
        if key != self._key or self.tally is None:
            fresh = ServingTally()
            if self.tally is not None and self._boot is not None:
                self._start(self._boot, self.tally)  # the previous boot's last figures
                if window.latest is not None:  # the window's older samples are the previous boot's
                    fresh.add(window.latest, pool_tokens=pool)
            self.tally, self._key = fresh, key
            self._due = self.clock() + self.every
        self._boot = boot
        self.tally.follow(window, pool_tokens=pool)
        if self.clock() >= self._due:
            self._due = self.clock() + self.every
            self._start(boot, self.tally)

    def _start(self, boot: Boot, tally: ServingTally) -> None:
        got = serving_doc(self.host, boot, tally)  # built on the loop: the boot is the loop's
        if got is None:
            if tally.samples:
                self.problem = ("the boot's start is not in the log read (no launch line, no argument dump, or no "
                                "timestamp): the history cannot name the boot")
            return
        key, doc = got
        self._queue[key] = doc  # a newer document of a boot replaces the one not yet written
        while len(self._queue) > 4:  # bounded: boots that came and went faster than the writes
            self._queue.pop(next(iter(self._queue)))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._drain))

    def _drain(self) -> None:
        """In a worker thread: write the queued documents (``dict.popitem`` is atomic)."""
        while self._queue:
            try:
                key, doc = self._queue.popitem()
            except KeyError:
                return
            store = open_store(self.path, limits=self.limits)
            try:
                if store.readonly:
                    self.problem = store.problem or f"{store.path}: the history is read-only"
                    continue
                self.boot_id = store.put(doc, key)
                self.written += 1
                self.problem = None
            except HistoryError as exc:
                self.problem = str(exc)
            finally:
                store.close()

    async def close(self, timeout: float = 5.0) -> str | None:
        """Write the last figures (waiting at most ``timeout`` s); the problem, else None."""
        try:
            async with asyncio.timeout(timeout):
                if self._task is not None:
                    await asyncio.shield(self._task)
                if self.tally is not None and self._boot is not None:
                    self._start(self._boot, self.tally)
                    while self._task is not None and not self._task.done():
                        await asyncio.shield(self._task)
                        if self._queue:  # queued while the last drain was finishing
                            self._task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._drain))
        except TimeoutError:
            self.problem = self.problem or f"the history write took longer than {timeout:g} s: not recorded"
        return self.problem
