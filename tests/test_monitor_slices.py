"""The monitor under a storm leaves the event loop to the keys: a large chunk is planned and
ingested in slices with a yield between them (the same spool and boots as one pass), and
serving-only boot changes are published at most once a second while batches are storm-sized."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from pathlib import Path

from kvtui.config import HostConfig
from kvtui.engines.events import LogRecord
from kvtui.hosts.backend import RecordBlock
from kvtui.hosts.local import LocalBackend
from kvtui.monitor import SKIPPED_SLICE, STORM_BATCH, STORM_SERVING_INTERVAL, HostMonitor, LogBatch, MonitorOptions

FIXTURES = Path(__file__).parent / "fixtures"


def monitor(tmp_path: Path, name: str, **kw: object) -> HostMonitor:
    log = tmp_path / f"{name}.log"
    log.write_text("")
    host = HostConfig(local=True, log_file=str(log))
    backend = LocalBackend(name, host, poll_interval=0.02, systemctl=("false",))
    return HostMonitor(name, backend, host=host,
                       options=MonitorOptions(state_dir=tmp_path / "state", **kw))  # type: ignore[arg-type]


def storm_records(n: int) -> list[LogRecord]:
    """A ready SGLang boot, then ``n`` serving lines of 8 ranks with an access line now and then
    (what a server in a storm prints)."""
    boot = (FIXTURES / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_text().splitlines()[:40]
    lines = list(boot)
    for k in range(n):
        if k % 50 == 49:
            lines.append(f"[2026-03-04 09:12:{k % 60:02d}] INFO:     127.0.0.1:{40000 + k} - "
                         '"POST /generate HTTP/1.1" 200 OK')
        else:
            u = (k * 7919) % 97
            lines.append(f"[2026-03-04 09:12:{k % 60:02d} TP{k % 8}] Decode batch, #running-req: {u}, "
                         f"#token: {u * 5000}, token usage: {u / 100:.2f}, cuda graph: True, gen throughput (token/s): "
                         f"{1000 + k % 3000}.00, #queue-req: {k % 5}")
    out: list[LogRecord] = []
    offset = 0
    for text in lines:
        offset += len(text) + 1
        out.append(LogRecord(text, None, str(offset), "raw"))
    return out


def spooled(mon: HostMonitor) -> list[tuple[object, ...]]:
    mon.spool.flush()
    return [(ln.seq, ln.text, ln.ts, ln.rank, ln.style, ln.boot) for ln in mon.spool.read(0, len(mon.spool))]


async def test_a_large_chunk_is_ingested_in_slices_that_let_other_tasks_run(tmp_path: Path) -> None:
    records = storm_records(5 * SKIPPED_SLICE + 123)
    whole = monitor(tmp_path, "whole")
    whole.ingest.records(records)  # one synchronous pass over the whole chunk (the reference)

    sliced = monitor(tmp_path, "sliced")
    sliced.step_budget = 0.0  # yield after every slice
    turns: list[int] = []  # how many lines were spooled each time another task got the loop
    done = asyncio.Event()

    async def other_task() -> None:
        while not done.is_set():
            turns.append(len(sliced.spool))
            await asyncio.sleep(0)

    planned: list[int] = []  # the sizes the prefilter planned at once
    plan = sliced.ingest.plan

    def recording_plan(block: RecordBlock) -> object:
        planned.append(len(block))
        return plan(block)

    sliced.ingest.plan = recording_plan  # type: ignore[assignment,method-assign]
    other = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    await sliced.ingest.block(RecordBlock.of(records))
    done.set()
    await other
    # no step planned more than a slice, and the other task ran between slices
    assert max(planned) <= SKIPPED_SLICE
    assert sum(planned) == len(records)
    progress = sorted(set(turns))
    assert len(progress) >= len(records) // SKIPPED_SLICE
    assert max(b - a for a, b in itertools.pairwise(progress)) <= SKIPPED_SLICE
    # ... and the outcome is the one pass's: the same spool rows and the same boots
    assert len(sliced.spool) == len(records)
    assert spooled(sliced) == spooled(whole)
    assert [b.to_json() for b in sliced.tracker.boots] == [b.to_json() for b in whole.tracker.boots]
    for m in (whole, sliced):
        await m.close()


async def test_slices_within_the_step_budget_run_without_a_yield(tmp_path: Path) -> None:
    """The monitor keeps its share of a busy loop: it yields once its step budget is spent, not
    after every slice."""
    records = storm_records(5 * SKIPPED_SLICE)
    mon = monitor(tmp_path, "budget")
    mon.step_budget = 60.0  # far more than this block takes
    turns: list[int] = []
    done = asyncio.Event()

    async def other_task() -> None:
        while not done.is_set():
            turns.append(len(mon.spool))
            await asyncio.sleep(0)

    other = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    mon.ingest.step_started = time.perf_counter()
    await mon.ingest.block(RecordBlock.of(records))
    done.set()
    await other
    assert set(turns) <= {0, len(records)}  # nobody else ran in the middle of the block
    assert len(mon.spool) == len(records)
    await mon.close()


async def test_serving_figures_are_paced_to_once_a_second_in_a_storm(tmp_path: Path) -> None:
    mon = monitor(tmp_path, "pace", serving_interval=0.25)
    try:
        assert mon.publisher.serving_pace() == 0.25
        mon.publisher.batch_lines = STORM_BATCH  # the last batch was storm-sized
        assert mon.publisher.serving_pace() == STORM_SERVING_INTERVAL == 1.0
        mon.publisher.batch_lines = STORM_BATCH - 1
        assert mon.publisher.serving_pace() == 0.25
        slow = monitor(tmp_path, "slow", serving_interval=3.0)
        slow.publisher.batch_lines = STORM_BATCH
        assert slow.publisher.serving_pace() == 3.0  # a longer interval asked for is kept
        await slow.close()
    finally:
        await mon.close()


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError("timed out")
        await asyncio.sleep(0.01)


async def test_a_shorter_pace_flushes_what_is_pending_at_once(tmp_path: Path) -> None:
    log = tmp_path / "paced.log"
    log.write_text("")
    host = HostConfig(local=True, log_file=str(log))
    backend = LocalBackend("paced", host, poll_interval=0.02, systemctl=("false",))
    mon = HostMonitor("paced", backend, host=host,
                      options=MonitorOptions(state_dir=tmp_path / "state", flush_interval=0.05))
    batches: list[int] = []
    task = asyncio.create_task(mon.run(lambda updates: batches.append(
        sum(len(u.lines) for u in updates if isinstance(u, LogBatch)))))
    try:
        loop = asyncio.get_running_loop()
        mon.set_pace(flush_interval=30.0, serving_interval=5.0)
        assert (mon.flush_interval, mon.serving_interval) == (30.0, 5.0)
        with log.open("a") as fh:
            fh.write("".join(f"line {i}\n" for i in range(10)))
        await until(lambda: len(mon.spool) >= 10)
        assert len(mon.spool) == 10  # taken in and spooled at once ...
        await asyncio.sleep(0.3)
        shown = sum(batches)
        assert shown < 10  # ... but not handed over: the flush waits its 30 s
        t0 = loop.time()
        mon.set_pace(flush_interval=0.05, serving_interval=0.25)
        await until(lambda: sum(batches) >= 10)
        assert sum(batches) == 10
        assert loop.time() - t0 < 15.0  # not after the rest of the 30 s (a speed bound of 1 s failed under load)
    finally:
        await mon.close()
        await asyncio.wait_for(task, 5)
