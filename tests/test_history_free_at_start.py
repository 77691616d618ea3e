"""The GPUs' free memory at a boot's start, and the warning it feeds ("less free memory before load
than the base: another process may hold GPU memory"). After a restart the newest GPU reading when
the new boot's first line arrives was taken while the old server still held its memory: it is not
the new boot's free memory at start (issue 21, item 2). The recorder keeps the most free memory a
reading showed between the boot's first line and its weight loading; the diff warns only on
evidence — the engine's own figure before load when both boots have it, else kvtui's readings —
and only for a drop of ``LESS_FREE_GIB`` (``LESS_FREE_READING_GIB``) or more."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from history_support import BASE, T0, boots_of, gen
from test_ssh_fake import wait_until

from kvtui.boot import BootStatus
from kvtui.config import HostConfig
from kvtui.engines.events import Phase
from kvtui.gpu import GpuSample
from kvtui.history import BootRecorder, open_store
from kvtui.history.diff import LESS_FREE_READING_GIB, diff, less_free, render, summary
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.sim.backend import DemoBackend
from kvtui.updates import MonitorUpdate

TOTAL = 81559.0
WARNING = "less free memory before load than the base"


# -- the diff's rule ------------------------------------------------------------------------------


def _doc(engine: dict[str, float] | None, gpus: dict[str, float]) -> dict[str, Any]:
    return {"status": "ready", "engine": "sglang", "flags": {"mem_fraction_static": 0.85},
            "avail_before_load_gib": engine or {}, "gpu_free_at_start_mib": gpus}


def test_the_engine_s_own_figure_outweighs_a_reading_taken_while_the_old_server_held_memory() -> None:
    """The issue's case: kvtui's reading of the restarted boot (12.37 GiB free) was taken before the
    old server was gone; the engine found 94.7 GiB free, as in the base: no warning."""
    base = _doc({"TP0": 94.71, "TP1": 94.72}, {"0": 95.59 * 1024, "1": 95.59 * 1024})
    boot = _doc({"TP0": 94.70, "TP1": 94.72}, {"0": 12.37 * 1024, "1": 12.40 * 1024})
    d = diff(base, boot)
    assert less_free(d) == []
    assert not any(WARNING in ln for ln in render(d))
    assert not any("less free GPU memory" in ln for ln in summary(d))
    # the table still shows both readings side by side
    assert any(ln.strip().startswith("GPU 0") and "12.37 GiB" in ln for ln in render(d))


def test_the_engine_s_own_figure_dropping_is_evidence() -> None:
    base = _doc({"TP0": 94.71, "TP1": 94.72}, {})
    boot = _doc({"TP0": 82.70, "TP1": 94.72}, {})
    d = diff(base, boot)
    assert less_free(d) == [("rank TP0", 94.71, 82.70)]
    (warning,) = [ln for ln in render(d) if WARNING in ln]
    assert "the engine's own figures" in warning
    assert any("less free GPU memory before load: rank TP0 94.71 GiB → 82.70 GiB" in ln for ln in summary(d))


def test_gpu_readings_count_without_the_engine_s_figure_and_small_moves_do_not() -> None:
    """A vLLM boot prints no free memory before load: kvtui's readings are the evidence, from
    ``LESS_FREE_READING_GIB`` on (a reading taken a moment later in the new server's start differs
    by its CUDA context, ~0.6-1 GiB: not another process)."""
    base = _doc(None, {"0": 95.59 * 1024, "1": 95.59 * 1024})
    small = _doc(None, {"0": 94.92 * 1024, "1": 94.95 * 1024})
    d = diff(base, small)
    assert less_free(d) == []
    assert not any(WARNING in ln for ln in render(d))  # any drop at all used to warn
    big = _doc(None, {"0": 95.59 * 1024, "1": (95.59 - LESS_FREE_READING_GIB - 11) * 1024})
    d = diff(base, big)
    assert [k for k, _, _ in less_free(d)] == ["GPU 1"]
    (warning,) = [ln for ln in render(d) if WARNING in ln]
    assert "kvtui's GPU readings" in warning


# -- the recorder ---------------------------------------------------------------------------------


def _reading(ts: float, used: float) -> list[GpuSample]:
    return [GpuSample(0, used, TOTAL, ts=ts), GpuSample(1, used + 10, TOTAL, ts=ts)]


def test_free_at_start_is_read_after_the_old_server_and_before_the_weights(tmp_path: Path) -> None:
    lines, _ = gen.sglang_boot(gen.LLAMA70B, gen.H100, replace(BASE, mem_fraction_static=0.85), start=T0)
    k = next(i for i, ln in enumerate(lines) if "Load weight begin" in ln)
    (early,) = boots_of(lines[:k])  # the boot before its weights: launch / init
    (loading,) = boots_of(lines[:k + 1])
    (ready,) = boots_of(lines)
    assert early.started_at is not None
    assert early.status is BootStatus.STARTING
    load_at = next(s.start for s in loading.phases if s.name is Phase.LOAD_WEIGHTS)
    assert load_at is not None
    t0, t_load = early.started_at.timestamp(), load_at.timestamp()
    assert t_load - t0 >= 2
    db = tmp_path / "h.sqlite3"
    rec = BootRecorder("box", db)
    rec.gpus(_reading(t0 - 1, 70_000))  # the old server of the restart still holds its memory
    rec.log_time(t0)
    rec.observe(0, early)
    rec.gpus(_reading(t0 + 1, 600))  # the old one gone, the new one has its CUDA context
    rec.log_time(t_load)
    rec.observe(0, loading)
    rec.gpus(_reading(t_load + 1, 20_000))  # the weights are loading
    rec.log_time(t_load + 2)
    rec.observe(0, ready)
    assert rec.flush()
    rec.close()
    with open_store(db) as store:
        (row,) = store.boots("box")
    assert row.doc["gpu_free_at_start_mib"] == {"0": TOTAL - 600, "1": TOTAL - 610}
    assert row.doc["peak_used_mib"] == {"0": 70_000.0, "1": 70_010.0}  # peaks as before: every reading


# -- the demo host, restarted under a live monitor --------------------------------------------------


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _ignore(_: Sequence[MonitorUpdate]) -> None:
    pass


async def test_a_restart_of_the_demo_host_keeps_its_free_memory_and_warns_of_nothing(tmp_path: Path) -> None:
    """The console's path: a HostMonitor with its recorder follows the demo host; GPU readings come
    every ``gpu_interval`` (here: on the test's cue, the clock frozen between them). The newest
    reading when the restarted boot's first line arrives shows the old server's memory; the boot
    stores what the GPUs had free before its weights, and its diff against the first says nothing
    about another process."""
    clock = _Clock(1_780_000_000.0)
    host = HostConfig(demo=True, demo_speed=60.0)
    backend = DemoBackend("demo", host, clock=clock, state_dir=tmp_path / "demo")
    backend.read_unit()  # the first boot starts now
    db = tmp_path / "h.sqlite3"
    rec = BootRecorder("demo", db)
    mon = HostMonitor("demo", backend, host=host, history=rec,
                      options=MonitorOptions(state_dir=tmp_path / "state", gpu_interval=3600.0,
                                             clock=clock))  # one reading at the start, then the test's

    def reading() -> None:
        mon.pollers.on_gpu(backend.samples_at(clock()))

    def boot(i: int) -> Any:
        return mon.boots[i] if len(mon.boots) > i else None

    async def advance_until(cond: Any, step: float = 0.02, limit: float = 30.0) -> None:
        end = clock.t + limit
        while not cond():
            assert clock.t < end, [(b.status, b.phase) for b in mon.boots]
            clock.t += step
            await asyncio.sleep(0.01)
            reading()
            await asyncio.sleep(0.01)

    task = asyncio.create_task(mon.run(_ignore))
    try:
        await advance_until(lambda: boot(0) is not None and boot(0).status is BootStatus.READY, step=0.1)
        reading()
        served = backend.samples_at(clock())
        assert min(s.total_mib - s.used_mib for s in served) < 20 * 1024  # the first server holds its memory
        backend.restart()
        # no reading while the old server goes and the new one starts (a reading every few seconds)
        clock.t += 0.05
        await wait_until(lambda: boot(1) is not None, timeout=30)
        assert boot(1).phase in (Phase.LAUNCH, Phase.INIT, None), boot(1).phase
        await advance_until(lambda: boot(1).status is BootStatus.READY, step=0.02)
        await mon.close()
        await asyncio.wait_for(task, 10)
    finally:
        if not task.done():
            task.cancel()
    assert rec.flush()
    rec.close()
    with open_store(db) as store:
        second, first = store.boots("demo")
    free0, free1 = first.doc["gpu_free_at_start_mib"], second.doc["gpu_free_at_start_mib"]
    assert free1, "a reading before the restarted boot's weights was taken"
    for gpu, mib in free1.items():
        assert mib > 90 * 1024, (gpu, mib)  # not the old server's 12 GiB free
        assert abs(free0[gpu] - mib) < LESS_FREE_READING_GIB * 1024  # at most the new server's context
    d = diff(first.doc, second.doc, base_id=first.id, boot_id=second.id)
    assert less_free(d) == []
    assert not any(WARNING in ln for ln in render(d))


def test_a_version_one_boot_did_not_tell_is_not_a_change() -> None:
    """Issue 22 #5: after a restart the diff said "engine: sglang >=0.5.14 → sglang" — an inferred
    version (from the lines' formats) against none (a boot that printed less) is not an upgrade;
    two printed versions that differ are."""
    base = {**_doc(None, {}), "version_hint": ">=0.5.14"}
    for other in (None, ">=0.5.10"):
        d = diff(base, {**_doc(None, {}), "version_hint": other})
        assert not any(ln.startswith("engine:") for ln in summary(d))
        assert f"Engine: sglang {other or '>=0.5.14'} (the same)" in render(d)
    d = diff({**base, "version_hint": "0.5.10"}, {**_doc(None, {}), "version_hint": "0.5.14"})
    assert "engine: sglang 0.5.10 → sglang 0.5.14" in summary(d)
    assert d.engine_changed()
    assert "Engine: sglang 0.5.10 → sglang 0.5.14" in render(d)


def test_the_header_keeps_the_hosts_version_while_a_new_boot_has_not_told_it() -> None:
    """Issue 22 #5: the header flipped between `sglang >=0.5.14` and `sglang` on every boot."""
    from kvtui.boot import Boot
    from kvtui.engines.events import Engine
    from kvtui.ui.widgets.host import HostBar, HostInfo

    bar = HostBar(HostInfo("demo", "demo", "simulated", "unit (simulated)"))
    bar.show(None, Boot(engine=Engine.SGLANG), None, 2, ">=0.5.14")
    assert "sglang >=0.5.14" in bar.left().plain
    bar.show(None, Boot(engine=Engine.SGLANG, version_hint="0.5.20"), None, 2, ">=0.5.14")
    assert "sglang 0.5.20" in bar.left().plain
