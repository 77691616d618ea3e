"""The recorder keeps a boot whose write met a locked history file and writes it later (issue 13:
a clean-clone CI run saw a 5 s busy wait run out at load, and such a boot used to be dropped).
The lock is held by a second process on a real SQLite file."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from history_support import boots_of, locked, sglang, sglang_lines

from kvtui.boot import BootStatus
from kvtui.history import BootRecorder, open_store, record_boot
from kvtui.history.recorder import KEEP_BOOTS
from kvtui.retry import Backoff


def until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """A bounded poll: the condition the test means, whatever the machine's load."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.02)


def fast_pace() -> Backoff:
    return Backoff(initial=0.05, cap=0.2, first=0.05, jitter=0.0)


def recorder(path: Path, pace: Backoff | None = None) -> BootRecorder:
    return BootRecorder("a", path, busy_timeout=0.2, retry_pace=pace or fast_pace())


def stored(path: Path) -> list[tuple[str, str]]:
    with open_store(path, readonly=True) as store:
        return sorted((b.key, b.status) for b in store.boots("a"))


def test_a_boot_that_met_the_lock_is_written_once_it_is_released(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    open_store(path).close()
    lines = sglang_lines(0.85)
    starting = boots_of(lines[: len(lines) // 2])[0]
    assert starting.status is BootStatus.STARTING
    ready = sglang(0.85)
    second = sglang(0.9, minutes=30)
    rec = recorder(path)
    try:
        with locked(path) as holder:
            rec.observe(0, starting)
            until(lambda: rec.waiting() == 1, "the first boot waits for the lock")
            assert rec.problem is not None
            assert str(path) in rec.problem
            assert "busy (locked by another kvtui); will retry — 1 boot waiting" in rec.problem
            rec.observe(0, ready)  # the same boot, further on, while it waits
            rec.observe(1, second)
            until(lambda: rec.waiting() == 2, "both boots wait for the lock")
            assert "will retry — 2 boots waiting" in (rec.problem or "")
            pace = rec._pace.attempt
            until(lambda: rec._pace.attempt >= pace + 3, "the timer keeps retrying while the lock is held")
            assert rec.waiting() == 2
            assert rec.written == 0
            holder.release()
            until(lambda: rec.waiting() == 0, "the boots are written after the lock is released")
        assert rec.problem is None  # said while waiting, cleared once written
        assert rec.flush()
        rows = stored(path)
        assert len(rows) == 2  # nothing lost, nothing stored twice
        assert [s for _, s in rows] == ["ready", "ready"]  # the newer document of boot 0 won
    finally:
        assert rec.close() == 0


def test_the_next_write_retries_before_the_timer(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    open_store(path).close()
    rec = recorder(path, Backoff(initial=600.0, cap=600.0, first=600.0, jitter=0.0))  # the timer: far away
    try:
        with locked(path):
            rec.observe(0, sglang(0.85))
            until(lambda: rec.waiting() == 1, "the boot waits for the lock")
        rec.observe(1, sglang(0.9, minutes=30))  # lock released; a new boot arrives
        until(lambda: rec.waiting() == 0 and rec.written == 2, "the waiting boot is written with the next")
        assert rec.problem is None
        assert len(stored(path)) == 2
    finally:
        assert rec.close() == 0


def test_a_file_locked_when_the_writer_opens_it_is_opened_again(tmp_path: Path) -> None:
    """A fresh file held by another process before it has a schema: the writer cannot even open it
    for writing (the WAL switch and the schema need the lock); it tries again, then writes."""
    path = tmp_path / "h.sqlite3"
    rec = recorder(path)
    try:
        with locked(path) as holder:
            rec.observe(0, sglang(0.85))
            until(lambda: rec.waiting() == 1, "the boot waits for the lock")
            assert "will retry — 1 boot waiting" in (rec.problem or "")
            holder.release()
            until(lambda: rec.written == 1, "the boot is written after the lock is released")
        assert rec.problem is None
        assert len(stored(path)) == 1
    finally:
        assert rec.close() == 0


def test_close_while_still_locked_says_how_many_boots_were_not_written(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    open_store(path).close()
    rec = recorder(path, Backoff(initial=600.0, cap=600.0, first=600.0, jitter=0.0))
    with locked(path):
        rec.observe(0, sglang(0.85))
        rec.observe(1, sglang(0.9, minutes=30))
        until(lambda: rec.waiting() == 2, "both boots wait for the lock")
        attempts = rec._pace.attempt
        assert rec.close(timeout=0.5) == 2  # tried again at once (not at the 600 s pace), then gave up
        assert rec._pace.attempt > attempts
        assert rec._thread is not None
        assert not rec._thread.is_alive()
        assert "stayed locked by another kvtui: 2 boots were not written" in (rec.problem or "")
    assert stored(path) == []


def test_close_writes_what_waits_once_the_lock_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    open_store(path).close()
    rec = recorder(path, Backoff(initial=600.0, cap=600.0, first=600.0, jitter=0.0))
    with locked(path):
        rec.observe(0, sglang(0.85))
        until(lambda: rec.waiting() == 1, "the boot waits for the lock")
    assert rec.close(timeout=30.0) == 0  # the close retries at once, not at the 600 s pace
    assert rec.problem is None
    assert len(stored(path)) == 1


def test_boots_waiting_are_bounded_newest_kept(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    open_store(path).close()
    boots = [sglang(0.85, minutes=30 * i) for i in range(KEEP_BOOTS + 2)]
    rec = recorder(path, Backoff(initial=600.0, cap=600.0, first=600.0, jitter=0.0))
    try:
        with locked(path) as holder:
            for i, b in enumerate(boots):
                rec.observe(i, b)
            until(lambda: rec.dropped == 2 and rec.waiting() == KEEP_BOOTS, "the oldest two pushed out")
            assert f"will retry — {KEEP_BOOTS} boots waiting (2 older dropped)" in (rec.problem or "")
            holder.release()
        assert rec.close(timeout=30.0) == 2  # the two pushed out were never written, and it says so
        assert "2 boots were not written" in (rec.problem or "")
        starts = {b.started_at for b in boots[2:]}
        with open_store(path, readonly=True) as store:
            got = {r.started_at for r in store.boots("a")}
        assert got == starts
    finally:
        rec.close()


def test_a_file_that_cannot_be_written_is_said_once_and_not_retried(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"this is not a database, just bytes " * 200)
    rec = recorder(path)
    try:
        rec.observe(0, sglang(0.85))
        rec.observe(1, sglang(0.9, minutes=30))
        assert rec.flush(30.0)
        assert rec.waiting() == 0
        assert "not a readable kvtui history database" in (rec.problem or "")
        assert rec.written == 0
    finally:
        assert rec.close() == 0
    assert path.read_bytes().startswith(b"this is not a database")


class Pace(Backoff):
    """The record's pace, short, and telling the test when a try met the lock."""

    def __init__(self) -> None:
        super().__init__(initial=0.05, cap=0.05, first=0.05, jitter=0.0)
        self.waits = 0
        self.waited = threading.Event()

    def next(self) -> float:
        self.waits += 1
        self.waited.set()
        return super().next()


def test_a_one_shot_record_tries_again_after_the_lock(tmp_path: Path) -> None:
    """`apply --restart`'s record (record_boot) of a boot whose first try met the lock: the next
    try, once the lock is gone, stores it, once."""
    path = tmp_path / "h.sqlite3"
    open_store(path).close()
    boot = sglang(0.85)
    pace = Pace()
    result: list[str | None] = []
    with locked(path) as holder, open_store(path, busy_timeout=0.2) as store:
        worker = threading.Thread(target=lambda: result.append(
            record_boot("a", boot, store=store, tries=60, pace=pace)))
        worker.start()
        assert pace.waited.wait(60), "the first try did not meet the lock"
        holder.release()
        worker.join(60)
        assert not worker.is_alive()
    assert result == [None]
    assert len(stored(path)) == 1


def test_a_one_shot_record_gives_up_after_its_tries_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    open_store(path).close()
    pace = Pace()
    with locked(path), open_store(path, busy_timeout=0.1) as store:
        problem = record_boot("a", sglang(0.85), store=store, tries=3, pace=pace)
    assert pace.waits == 2  # three tries, two waits between them
    assert problem is not None
    assert "locked by another process" in problem
    assert problem.endswith("(tried 3 times)")
    assert stored(path) == []
