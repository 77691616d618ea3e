"""GPU readings belong to a boot only while its log says it was starting: a reader that joins a
boot that is already up replays its log first, and the readings it takes meanwhile (now, after the
boot's end) are not the boot's peaks. The monitor tells the recorder its newest line's time
(``BootRecorder.log_time``); a reading newer than that is held until the log reaches it (the boot
was still starting: kept) or the boot ends before it (dropped)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from history_support import BASE, T0, boots_of, gen
from sshd_support import fake_ssh_server
from test_ssh_fake import FakeHost, backend, wait_until

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Phase
from kvtui.gpu import GpuSample
from kvtui.history import BootRecorder, open_store
from kvtui.history.recorder import LOG_CLOCK_SLACK_S, GpuReading
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.updates import MonitorUpdate

TOTAL = 81559.0


def _lines() -> list[str]:
    lines, _ = gen.sglang_boot(gen.LLAMA70B, gen.H100, replace(BASE, mem_fraction_static=0.85), start=T0)
    return lines


def _starting(lines: list[str]) -> tuple[Boot, int]:
    """The boot as a reader sees it halfway (weights loading), and how many lines that took."""
    k = next(i for i, ln in enumerate(lines) if "Load weight begin" in ln) + 1
    (boot,) = boots_of(lines[:k])
    assert boot.status is BootStatus.STARTING
    return boot, k


def _ready_at(boot: Boot) -> float:
    start = next(s.start for s in boot.phases if s.name is Phase.READY)
    assert start is not None
    return start.timestamp()


def _reading(ts: float, used: float) -> list[GpuSample]:
    return [GpuSample(0, used, TOTAL, ts=ts), GpuSample(1, used + 10, TOTAL, ts=ts)]


def _doc(db: Path) -> dict[str, object]:
    with open_store(db) as store:
        (row,) = store.boots("box")
    return row.doc


def test_readings_after_the_boot_s_end_are_not_its_own(tmp_path: Path) -> None:
    """Joining a boot that is already up: every reading is newer than the replayed log."""
    db = tmp_path / "h.sqlite3"
    lines = _lines()
    half, _ = _starting(lines)
    (ready,) = boots_of(lines)
    t_ready = _ready_at(ready)
    assert half.started_at is not None
    rec = BootRecorder("box", db)
    rec.gpus(_reading(t_ready + 3600, 70000))  # now: an hour after the boot was ready
    rec.log_time(half.started_at.timestamp() + 1)
    rec.observe(0, half)
    rec.gpus(_reading(t_ready + 3601, 71000))
    rec.log_time(t_ready - 5)  # the replay has not reached the ready line yet
    rec.gpus(_reading(t_ready + 3602, 72000))
    rec.log_time(t_ready)
    rec.observe(0, ready)
    rec.gpus(_reading(t_ready + 3603, 73000))
    assert rec.flush()
    rec.close()
    doc = _doc(db)
    assert doc["status"] == "ready"
    assert doc["peak_used_mib"] == {}
    assert doc["gpu_free_at_start_mib"] == {}
    assert doc["gpu_samples"] is None


def test_a_live_boot_keeps_its_readings_up_to_ready_and_no_later(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite3"
    lines = _lines()
    half, _ = _starting(lines)
    (ready,) = boots_of(lines)
    assert half.started_at is not None
    t0, t_ready = half.started_at.timestamp(), _ready_at(ready)
    rec = BootRecorder("box", db)
    rec.gpus(_reading(t0, 1000))  # the reading before the boot's first line: free memory at start
    rec.log_time(t0 + 1)
    rec.observe(0, half)
    late = t0 + 1 + LOG_CLOCK_SLACK_S + 4
    assert t_ready - 1 > late + 1 + LOG_CLOCK_SLACK_S  # the boot of boots_gen: 73 s to ready
    rec.gpus(_reading(t0 + 5, 15000))  # within the clocks' slack of the newest line: taken
    rec.gpus(_reading(late, 20000))  # the log is silent for a while: held ...
    rec.log_time(late + 1)  # ... until a line shows the boot was still starting then
    rec.gpus(_reading(t_ready - 1, 60000))  # just before ready, the log not there yet: held
    rec.log_time(t_ready)
    rec.observe(0, ready)  # ready: what was held up to the ready line is the boot's
    rec.gpus(_reading(t_ready + 30, 79000))  # serving: not the boot's
    assert rec.flush()
    rec.close()
    doc = _doc(db)
    assert doc["peak_used_mib"] == {"0": 60000.0, "1": 60010.0}
    assert doc["gpu_free_at_start_mib"] == {"0": TOTAL - 1000, "1": TOTAL - 1010}
    samples = doc["gpu_samples"]
    assert isinstance(samples, dict)
    assert samples["ts"] == [round(t0, 3), round(t0 + 5, 3), round(late, 3), round(t_ready - 1, 3)]


def test_a_source_without_times_keeps_every_reading_while_starting(tmp_path: Path) -> None:
    """No timestamps in the log (``log_time(None)``): nothing to compare, as before."""
    db = tmp_path / "h.sqlite3"
    lines = _lines()
    half, _ = _starting(lines)
    (ready,) = boots_of(lines)
    rec = BootRecorder("box", db)
    rec.log_time(None)
    rec.observe(0, half)
    rec.gpus(_reading(10**10, 5000))
    rec.observe(0, ready)
    rec.gpus(_reading(10**10 + 1, 9000))
    assert rec.flush()
    rec.close()
    assert _doc(db)["peak_used_mib"] == {"0": 5000.0, "1": 5010.0}


class _Counting(BootRecorder):
    readings = 0

    def gpus(self, samples: Sequence[GpuReading]) -> None:
        self.readings += 1
        super().gpus(samples)


async def test_the_monitor_joining_a_past_boot_stores_no_reading_of_now(tmp_path: Path) -> None:
    """Over SSH (an in-process asyncssh server): the journal holds the first half of a boot from
    May; the monitor reads it and takes several GPU readings while that boot is still starting
    in its tracker; then the rest of the boot arrives. The readings are now, months after the
    boot's lines: none is stored as the boot's."""
    db = tmp_path / "h.sqlite3"
    host = FakeHost(n=0)
    lines = _lines()
    _, k = _starting(lines)

    def ignore(_: Sequence[MonitorUpdate]) -> None:
        pass

    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        for ln in lines[:k]:
            host.add(ln)
        rec = _Counting("box", db)
        mon = HostMonitor("box", backend(srv), history=rec,
                          options=MonitorOptions(state_dir=tmp_path / "state", gpu_interval=0.05))
        task = asyncio.create_task(mon.run(ignore))
        await wait_until(lambda: bool(mon.boots) and mon.boots[-1].phase is Phase.LOAD_WEIGHTS, timeout=30)
        seen = rec.readings
        await wait_until(lambda: rec.readings >= seen + 3, timeout=30)  # readings while it is starting
        assert mon.boots[-1].status is BootStatus.STARTING
        for ln in lines[k:]:
            host.add(ln)
        await wait_until(lambda: mon.boots[-1].status is BootStatus.READY, timeout=30)
        await mon.close()
        await asyncio.wait_for(task, 10)
        assert rec.flush()
        rec.close()
    doc = _doc(db)
    assert doc["status"] == "ready"
    assert doc["peak_used_mib"] == {}
    assert doc["gpu_samples"] is None
