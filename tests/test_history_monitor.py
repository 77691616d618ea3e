"""Recording boots from live readers: the monitor over SSH (an in-process asyncssh server) across
a reconnect mid-boot, a second console on the same host, a resumed spool — one row per boot."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from history_support import BASE, T0, gen
from sshd_support import fake_ssh_server
from test_ssh_fake import FakeHost, backend, wait_until

from kvtui.boot import BootStatus
from kvtui.engines.events import Phase
from kvtui.history import BootRecorder, open_store
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.updates import MonitorUpdate


def _boot_lines(fraction: float, minutes: int) -> list[str]:
    from dataclasses import replace

    lines, _ = gen.sglang_boot(gen.LLAMA70B, gen.H100, replace(BASE, mem_fraction_static=fraction),
                               start=T0.replace(minute=minutes))
    return lines


def _ignore(_: Sequence[MonitorUpdate]) -> None:
    pass


async def _run(mon: HostMonitor) -> asyncio.Task[None]:
    return asyncio.create_task(mon.run(_ignore))


async def test_reconnects_mid_boot_and_two_consoles_store_each_boot_once(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    host = FakeHost(n=0)
    first = _boot_lines(0.85, 0)
    second = _boot_lines(0.88, 30)
    half = next(i for i, ln in enumerate(first) if "Load weight end" in ln or "KV Cache is allocated" in ln)
    async with fake_ssh_server(host.handle, tmp_path / "srv") as srv:
        for ln in first[:half]:
            host.add(ln)
        rec1 = BootRecorder("gpu-a", db)
        mon1 = HostMonitor("gpu-a", backend(srv), history=rec1,
                           options=MonitorOptions(state_dir=tmp_path / "state", gpu_interval=0.05))
        t1 = await _run(mon1)
        await wait_until(lambda: bool(mon1.boots) and mon1.boots[-1].phase is not None
                         and mon1.boots[-1].phase is not Phase.LAUNCH)
        assert mon1.boots[-1].status is BootStatus.STARTING
        srv.drop_connections()  # the connection drops in the middle of the boot
        for ln in first[half:]:
            host.add(ln)
        await wait_until(lambda: mon1.boots[-1].status is BootStatus.READY)
        assert mon1.backend.reconnects >= 1  # type: ignore[attr-defined]
        # one identity (issue 22 #2): the boot's number in the history, kept through the reconnect
        await wait_until(lambda: mon1.boot_number(0) is not None)
        n1 = mon1.boot_number(0)
        assert mon1.boot_label(0) == f"boot #{n1}"
        # a second console on the same host, reading the same boot from its start
        rec2 = BootRecorder("gpu-a", db)
        mon2 = HostMonitor("gpu-a", backend(srv), history=rec2, options=MonitorOptions(state_dir=tmp_path / "state"))
        t2 = await _run(mon2)
        await wait_until(lambda: bool(mon2.boots) and mon2.boots[-1].status is BootStatus.READY)
        await wait_until(lambda: mon2.boot_number(0) is not None)
        assert mon2.boot_label(0) == f"boot #{n1}"  # the second console names it as the first does
        for ln in second:  # a restart: the next boot, seen by both
            host.add(ln)
        await wait_until(lambda: len(mon1.boots) == 2 and mon1.boots[-1].status is BootStatus.READY
                         and len(mon2.boots) == 2 and mon2.boots[-1].status is BootStatus.READY)
        await wait_until(lambda: mon1.boot_number(1) is not None and mon2.boot_number(1) is not None)
        n2 = mon1.boot_number(1)
        assert n2 != n1
        assert mon2.boot_number(1) == n2
        srv.drop_connections()
        await wait_until(lambda: mon1.backend.reconnects >= 2)  # type: ignore[attr-defined]
        assert (mon1.boot_label(0), mon1.boot_label(1)) == (f"boot #{n1}", f"boot #{n2}")
        for mon, task in ((mon1, t1), (mon2, t2)):
            await mon.close()
            await asyncio.wait_for(task, 10)
        assert rec1.problem is None
        assert rec2.problem is None
        assert rec1.written
        assert rec2.written
        # a third reader re-reads the first console's spool
        rec3 = BootRecorder("gpu-a", db)
        mon3 = HostMonitor("gpu-a", backend(srv), history=rec3,
                           options=MonitorOptions(state_dir=tmp_path / "state", resume=True))
        t3 = await _run(mon3)
        await wait_until(lambda: len(mon3.boots) >= 2)
        await wait_until(lambda: mon3.boot_number(1) is not None)
        assert mon3.boot_number(1) == n2  # a resumed spool: the same numbers again
        await mon3.close()
        await asyncio.wait_for(t3, 10)
    with open_store(db) as store:
        rows = store.boots("gpu-a")
    assert len(rows) == 2  # two boots, whoever saw them and however often
    assert [r.id for r in rows] == [n2, n1]  # the numbers the readers showed are the history's
    assert [r.doc["flags"]["mem_fraction_static"] for r in rows] == [0.88, 0.85]
    assert all(r.status == "ready" for r in rows)
    assert [p["name"] for p in rows[1].doc["phases"]][-1] == "ready"
    assert rows[1].doc["spool"]["set"].startswith(str(tmp_path / "state"))
    # peaks: asserted in the console test (tests/test_history_console.py); here only their shape —
    # whether a reading lands while a boot of this fast fake journal is starting is timing
    for r in rows:
        assert all(v > 0 for v in r.doc["peak_used_mib"].values())



def test_a_boot_without_timestamps_is_stored_once_by_two_readers(tmp_path: Path) -> None:
    """A boot whose first line carries no time (a container banner before the engine's lines,
    replayed from the start of the file): two consoles, each with its own spool set, key it by its
    first line's place in the source (the file's byte offset) and text, not by their own spool; the
    same text logged again later (a restart: another offset) is another boot."""
    from history_support import boots_of

    from kvtui.spool import Spool

    text = (Path(__file__).parent / "fixtures/real/37-sglang-0.5.11-gemma4-frozen-kv-mtp-hybrid-ready.log").read_text()
    lines = text.splitlines()
    (boot,) = boots_of(lines)
    assert boot.started_at is None
    assert boot.status is BootStatus.READY
    db = tmp_path / "history.sqlite3"

    def read(base: int) -> Spool:
        """A reader's spool of the boot, whose first line sits at byte ``base`` of the log file."""
        spool = Spool.create(tmp_path / "state" / "spool" / "box", host="box")
        offset = base
        for ln in lines:
            offset += len(ln.encode()) + 1
            spool.append(ln, boot=0, cursor=str(offset))
        return spool

    def record(spool: Spool, *, flush: bool = True) -> BootRecorder:
        rec = BootRecorder("box", db)
        if flush:
            spool.flush()
        rec.observe(0, boot, {"set": str(spool.directory), "boot": 0})
        return rec

    for _ in range(2):  # two consoles
        spool = read(0)
        rec = record(spool)
        assert rec.flush()
        rec.close()
        spool.close()
        assert rec.problem is None
    with open_store(db) as store:
        rows = store.boots("box")
    assert len(rows) == 1
    assert rows[0].status == "ready"
    # a third reader whose spool had not reached the disk when the boot was seen: keyed on close
    spool = read(0)
    rec = record(spool, flush=False)
    spool.close()
    rec.close()
    assert rec.written == 1
    with open_store(db) as store:
        assert len(store.boots("box")) == 1
    # the server restarted and logged the same lines again, further down the file
    spool = read(len(text.encode()))
    rec = record(spool)
    rec.close()
    spool.close()
    with open_store(db) as store:
        assert len(store.boots("box")) == 2
