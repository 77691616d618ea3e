"""HostMonitor end to end: a real log file followed by LocalBackend (and the demo host when it
exists) -> spool -> parser -> tracker -> batched updates; bounds, GPU history, foreign
processes, connection states, close, resume."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from proc_support import followers_read

from kvtui.boot import BootStatus
from kvtui.config import HostConfig
from kvtui.engines.events import FailureKind, Phase
from kvtui.hosts.backend import ConnState, LogStart
from kvtui.hosts.local import LocalBackend
from kvtui.hosts.nvml import Nvml
from kvtui.monitor import (
    MIN_FLUSH_INTERVAL,
    BootState,
    ConnUpdate,
    GpuUpdate,
    HostMonitor,
    LogBatch,
    MonitorOptions,
    MonitorUpdate,
    read_boots,
)

FIXTURES = Path(__file__).parent / "fixtures"




class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[float, list[MonitorUpdate]]] = []
        # BootState.boot is live state: what each update said, at the time it came
        self.boot_seen: list[tuple[int, bool, Phase | None, BootStatus]] = []

    def __call__(self, updates: Sequence[MonitorUpdate]) -> None:
        self.calls.append((asyncio.get_running_loop().time(), list(updates)))
        for u in updates:
            if isinstance(u, BootState):
                self.boot_seen.append((u.index, u.new_boot, u.boot.phase, u.boot.status))

    def of(self, kind: type[Any]) -> list[Any]:
        return [u for _, us in self.calls for u in us if isinstance(u, kind)]

    @property
    def lines(self) -> list[Any]:
        return [ln for b in self.of(LogBatch) for ln in b.lines]

    async def wait(self, pred: Callable[[Sink], bool], timeout: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not pred(self):
            if loop.time() > end:
                raise AssertionError(f"timed out: {len(self.lines)} lines, {len(self.calls)} calls")
            await asyncio.sleep(0.01)


@asynccontextmanager
async def running(monitor: HostMonitor) -> AsyncIterator[Sink]:
    sink = Sink()
    task = asyncio.create_task(monitor.run(sink))
    try:
        yield sink
    finally:
        await monitor.close()
        await asyncio.wait_for(task, 5.0)


def local_monitor(tmp_path: Path, log: Path, *, nvml: Nvml | None = None, systemctl: tuple[str, ...] = ("false",),
                  unit: str | None = None, **kw: Any) -> HostMonitor:
    host = HostConfig(local=True, log_file=str(log), unit=unit)
    backend = LocalBackend("box", host, poll_interval=0.02, nvml=nvml, systemctl=systemctl)
    return HostMonitor("box", backend, host=host, options=MonitorOptions(state_dir=tmp_path / "state", **kw))


def _write(path: Path, lines: Sequence[str]) -> None:
    with open(path, "a") as fh:
        fh.write("".join(f"{x}\n" for x in lines))


async def test_lines_reach_the_sink_batched_and_spooled(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _write(log, [f"[2026-03-04 09:12:00 TP{i % 2}] serving line {i}" for i in range(300)])
    mon = local_monitor(tmp_path, log, flush_interval=0.01)  # clamped to 50 ms
    assert mon.flush_interval == MIN_FLUSH_INTERVAL
    async with running(mon) as sink:
        await sink.wait(lambda s: len(s.lines) >= 300)
        for k in range(5):  # live appends, a few at a time
            _write(log, [f"live {k}-{j}" for j in range(20)])
            await asyncio.sleep(0.03)
        await sink.wait(lambda s: len(s.lines) >= 400)
        lines = sink.lines
        assert [ln.seq for ln in lines] == list(range(400))
        assert lines[0].text == "[2026-03-04 09:12:00 TP0] serving line 0"
        assert lines[-1].text == "live 4-19"
        batches = sink.of(LogBatch)
        assert len(batches) < 60  # batched, not one update per line
        times = [t for t, us in sink.calls if any(isinstance(u, LogBatch) for u in us)]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= MIN_FLUSH_INTERVAL * 0.9
        # the spool holds everything, on disk
        assert len(mon.spool) == 400
        assert [x.seq for x in mon.spool.search("serving line 7", limit=20)] == [7, *range(70, 80)]
        assert mon.spool.read(399, 1)[0].text == "live 4-19"
        assert mon.spool.directory.is_relative_to(tmp_path / "state" / "spool" / "box")
        # connection state was published
        conns = sink.of(ConnUpdate)
        assert conns
        assert conns[0].status.state == ConnState.CONNECTED


async def test_buffers_stay_bounded(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    n = 20_000
    _write(log, [f"line {i}" for i in range(n)])
    mon = local_monitor(tmp_path, log, log_window=500)
    async with running(mon) as sink:
        await sink.wait(lambda s: bool(s.lines) and s.lines[-1].text == f"line {n - 1}", timeout=30)
        assert max(len(b.lines) for b in sink.of(LogBatch)) <= 500
        assert len(mon.recent) == 500
        assert mon.recent[-1].seq == n - 1
        assert len(mon.spool) == n  # the complete log is on disk
        assert mon.spool.index_bytes() < n  # an offset per 32 lines, not the lines
        # seqs within and across batches only ever increase (gaps = lines left to the spool)
        seqs = [ln.seq for ln in sink.lines]
        assert seqs == sorted(set(seqs))
        assert mon.spool.search("line 123", limit=3)[0].seq == 123


class FakeNvml:
    """NVML answers for a 4-GPU box (this machine has no GPU): GPU 1 holds a foreign process."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.used = 1000

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        self.used += 1
        return SimpleNamespace(used=self.used * 1048576, total=81559 * 1048576)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100"

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        procs = [SimpleNamespace(pid=self.server_pid, usedGpuMemory=70000 * 1048576)]
        if h == 1:
            procs.append(SimpleNamespace(pid=999_999, usedGpuMemory=2048 * 1048576))
        return procs


def fake_systemctl(tmp_path: Path, props: dict[str, str]) -> tuple[str, ...]:
    script = tmp_path / "systemctl"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nprops = {props!r}\nargs = sys.argv[1:]\n"
        "for i, a in enumerate(args):\n"
        "    if a == '-p':\n"
        "        k = args[i + 1]\n"
        "        print(props.get(k, '') if '--value' in args else k + '=' + props.get(k, ''))\n"
    )
    script.chmod(0o755)
    return (str(script),)


async def test_gpu_history_bounded_and_foreign_processes(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text("")
    systemctl = fake_systemctl(tmp_path, {"MainPID": str(os.getpid()), "ControlGroup": ""})
    nvml = Nvml(FakeNvml(os.getpid()))
    mon = local_monitor(tmp_path, log, nvml=nvml, systemctl=systemctl, unit="sglang.service",
                        gpu_interval=0.01, gpu_history=5)
    async with running(mon) as sink:
        await sink.wait(lambda s: len(s.of(GpuUpdate)) >= 3 and any(u.foreign for u in s.of(GpuUpdate)))
        await asyncio.sleep(0.2)
        up = sink.of(GpuUpdate)[-1]
        assert [s.index for s in up.samples] == [0, 1, 2, 3]
        assert [(p.pid, p.gpu_index, p.used_mib) for p in up.foreign] == [(999_999, 1, 2048.0)]
        assert os.getpid() in mon.server_pids
        hist = mon.gpu_history(2)
        assert len(hist) == 5  # bounded
        assert [u for _, u in hist] == sorted(u for _, u in hist)
        assert [s.index for s in mon.latest_gpus] == [0, 1, 2, 3]
        assert mon.gpu_history(7) == ()


async def test_no_gpu_no_crash_and_no_source_is_a_clear_failure(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    _write(log, ["hello"])
    mon = local_monitor(tmp_path, log)
    async with running(mon) as sink:
        await sink.wait(lambda s: len(s.lines) == 1)
        assert "no NVIDIA GPU or driver" in mon.status.detail
        assert sink.of(GpuUpdate) == []
    # a host without a log source cannot be followed: run() returns with FAILED
    host = HostConfig.model_construct(local=True, unit=None, log_file=None, container=None, engine="auto", gpus=None,
                                      demo=False, demo_engine="sglang")
    mon2 = HostMonitor("nosrc", LocalBackend("nosrc", host), host=None,
                       options=MonitorOptions(state_dir=tmp_path / "state"))
    sink2 = Sink()
    await asyncio.wait_for(mon2.run(sink2), 5.0)
    await mon2.close()
    states = [u.status for u in sink2.of(ConnUpdate)]
    assert states[-1].state == ConnState.FAILED
    assert "no log source" in states[-1].detail


async def test_close_ends_run_promptly(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    _write(log, ["a"])
    # promptly = without waiting out any of its intervals: 30 s each here, so the bound below is
    # about what close() waits for, not how fast a loaded machine is (it was < 1 s wall, under
    # the 1 s GPU tick)
    mon = local_monitor(tmp_path, log, gpu_interval=30.0, pids_interval=30.0)
    sink = Sink()
    task = asyncio.create_task(mon.run(sink))
    await sink.wait(lambda s: len(s.lines) == 1)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await mon.close()
    await asyncio.wait_for(task, 30.0)
    assert loop.time() - t0 < 15.0
    assert mon.spool.closed


async def test_resume_continues_without_duplicates(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    _write(log, ["one", "two"])
    mon = local_monitor(tmp_path, log)
    async with running(mon) as sink:
        await sink.wait(lambda s: len(s.lines) == 2)
    first_dir = mon.spool.directory
    _write(log, ["three"])
    mon2 = local_monitor(tmp_path, log, resume=True)
    async with running(mon2) as sink2:
        await sink2.wait(lambda s: len(s.lines) >= 1)
        await asyncio.sleep(0.2)
        assert mon2.spool.directory == first_dir
        assert [(ln.seq, ln.text) for ln in sink2.lines] == [(2, "three")]
        assert [x.text for x in mon2.spool.read(0, 10)] == ["one", "two", "three"]


# ---------------------------------------------------------------------------------------------
# Boots: phases, failure, restart markers (need the engine core)
# ---------------------------------------------------------------------------------------------


async def test_local_file_boot_phases_and_failure(tmp_path: Path) -> None:
    src = (FIXTURES / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_text().splitlines()
    log = tmp_path / "server.log"
    log.write_text("")
    mon = local_monitor(tmp_path, log)
    async with running(mon) as sink:
        # the boot arrives in pieces, like a live server; each piece is handed over before the
        # next is written (a fixed pause between pieces let a loaded machine's monitor read
        # several at once, and a phase that began and ended inside them was never published)
        written = 0
        for i in range(0, len(src), 7):
            piece = src[i : i + 7]
            _write(log, piece)
            written += len([x for x in piece if x.strip()])
            await sink.wait(lambda s, n=written: len(s.lines) >= n and not mon.pending)
        await sink.wait(lambda s: any(b.boot.status == BootStatus.FAILED for b in s.of(BootState)))
        seen = sink.boot_seen
        assert seen[0][1]  # new_boot on the first state of a boot
        assert not any(new for _, new, _, _ in seen[1:])
        phases_seen = [phase for _, _, phase, _ in seen]
        # published as they happened (several flushes), in order
        assert Phase.LOAD_WEIGHTS in phases_seen
        assert phases_seen.index(Phase.LOAD_WEIGHTS) < phases_seen.index(Phase.GRAPH_CAPTURE)
        assert seen[-1][3] == BootStatus.FAILED
        boot = sink.of(BootState)[-1].boot
        assert boot.failure is not None
        assert boot.failure.kind == FailureKind.OOM_GRAPH_CAPTURE
        assert any(ln.style == "error" for ln in sink.lines)
        assert any(ln.style == "phase" for ln in sink.lines)
        assert len(sink.lines) == len([x for x in src if x.strip()])


async def test_restart_publishes_new_boot_and_marker(tmp_path: Path) -> None:
    src = (FIXTURES / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_text().splitlines()
    log = tmp_path / "server.log"
    _write(log, src)
    mon = local_monitor(tmp_path, log)
    async with running(mon) as sink:
        await sink.wait(lambda s: any(b.boot.status == BootStatus.FAILED for b in s.of(BootState)))
        _write(log, src)  # the unit restarts: the same boot again
        await sink.wait(lambda s: any(b.index == 1 for b in s.of(BootState)))
        assert [b.index for b in sink.of(BootState) if b.new_boot] == [0, 1]
        markers = [ln for ln in sink.lines if ln.style == "marker"]
        assert len(markers) == 1
        assert "a new boot started" in markers[0].text
        assert markers[0].boot == 1
        assert len(mon.spool.files()) == 2  # one spool file per boot
        assert mon.spool.search("a new boot started")[0].style == "marker"


async def test_read_boots(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    shutil.copy(FIXTURES / "sglang-0.4.10-qwen72b-tp2-capture-oom.log", log)
    host = HostConfig(local=True, log_file=str(log))
    backend = LocalBackend("box", host, poll_interval=0.02)
    try:
        # idle: how long a quiet stream means "caught up"; it returns at the failure anyway (0.3 s
        # could pass between two reads of the file on a loaded machine: the OOM not read yet)
        boots = await read_boots(backend, timeout=60.0, host=host, idle=5.0)
    finally:
        await backend.close()
    assert len(boots) == 1
    assert boots[0].failure is not None
    assert boots[0].failure.kind == FailureKind.OOM_GRAPH_CAPTURE


async def test_next_boot_mode_skips_the_past(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    _write(log, ["old 1", "old 2"])
    mon = local_monitor(tmp_path, log, start=LogStart.NEXT_BOOT)
    async with running(mon) as sink:
        await followers_read(log)  # positioned at the end (a fixed 0.2 s was not always enough)
        _write(log, ["new 1"])
        await sink.wait(lambda s: len(s.lines) >= 1)
        await asyncio.sleep(0.1)
        assert [ln.text for ln in sink.lines] == ["new 1"]


# ---------------------------------------------------------------------------------------------
# The demo host, end to end (fast demo_speed)
# ---------------------------------------------------------------------------------------------


def _demo(tmp_path: Path, speed: float = 300.0) -> tuple[Any, HostConfig]:
    from kvtui.sim.backend import DemoBackend
    host = HostConfig(demo=True, demo_speed=speed)
    return DemoBackend("demo", host, state_dir=tmp_path / "demo"), host


async def test_demo_boot_to_ready_then_capture_oom_after_a_restart(tmp_path: Path) -> None:
    # ×60 (a boot of ~5 s): at ×300 a loaded machine read the whole boot in two batches, so the
    # phases were published collapsed (2 < 3) — what is checked is that they are published as they come
    backend, host = _demo(tmp_path, speed=60.0)
    backend.set_foreign_process(gpu=3, mib=12288, pid=4242)
    mon = HostMonitor("demo", backend, host=host,
                      options=MonitorOptions(state_dir=tmp_path / "state", gpu_interval=0.05))
    async with running(mon) as sink:
        await sink.wait(lambda s: any(st == BootStatus.READY for *_, st in s.boot_seen), timeout=90)
        seen = list(dict.fromkeys(ph for _, _, ph, _ in sink.boot_seen if ph is not None))
        order = list(Phase)
        assert [order.index(p) for p in seen] == sorted(order.index(p) for p in seen)  # advanced in order
        assert len(seen) >= 3  # published as it went, not only at the end
        assert seen[-1] == Phase.READY
        boot = mon.tracker.current
        assert boot is not None
        names = [p.name for p in boot.phases]
        for ph in (Phase.LOAD_WEIGHTS, Phase.KV_ALLOCATE, Phase.GRAPH_CAPTURE, Phase.READY):
            assert ph in names
        assert boot.metrics.max_total_num_tokens
        # GPU memory of the 8 simulated GPUs, and the stale process flagged as foreign
        await sink.wait(lambda s: any(u.foreign for u in s.of(GpuUpdate)))
        up = [u for u in sink.of(GpuUpdate) if u.foreign][-1]
        assert len(up.samples) == 8
        assert [(p.pid, p.gpu_index) for p in up.foreign] == [(4242, 3)]
        assert len(mon.gpu_history(0)) >= 2
        # the operator raises the fraction too high and restarts: the new boot dies in capture
        unit = backend.read_unit().replace("--mem-fraction-static 0.85", "--mem-fraction-static 0.99")
        backend.write_unit(unit)
        backend.daemon_reload()
        backend.restart()
        await sink.wait(lambda s: any(i == 1 and st == BootStatus.FAILED for i, _, _, st in s.boot_seen), timeout=90)
        failed = mon.tracker.boots[1]
        assert failed.failure is not None
        assert failed.failure.kind == FailureKind.OOM_GRAPH_CAPTURE
        new_boots = [i for i, new, _, _ in sink.boot_seen if new]
        assert new_boots == list(range(len(new_boots)))  # 0, 1, then automatic restarts
        assert new_boots[:2] == [0, 1], [(b.status, b.phase) for b in mon.tracker.boots]
        assert any(ln.style == "marker" and ln.boot == 1 for ln in sink.lines)
        assert mon.tracker.boots[0].status in (BootStatus.STOPPED, BootStatus.READY)
        # lines were batched, never one update per line: lines read together come as one batch
        # (how many batches a boot takes depends on how fast it prints against the flush interval)
        batches = sink.of(LogBatch)
        assert len(batches) < len(sink.lines) / 2
        assert max(len(b) for b in batches) >= 20
        # search reaches the whole spool
        hits = mon.spool.search("CUDA out of memory")
        assert hits
        assert all(h.boot == 1 for h in hits)


async def test_host_boots_for_calc(tmp_path: Path) -> None:
    (tmp_path / "hosts.toml").write_text("[hosts.demo]\ndemo = true\ndemo_speed = 300\n")
    from kvtui.monitor import host_boots

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    # idle 5 s: at x300 a quiet phase of the demo boot is a real pause of ~0.3 s (more when loaded);
    # it returns when the boot is over anyway
    boots = await host_boots("demo", str(tmp_path / "hosts.toml"), timeout=60, idle=5.0)
    assert loop.time() - t0 < 30  # returns when the boot is over, not at the timeout
    assert boots[-1].status == BootStatus.READY
    from kvtui import kvcalc
    model = kvcalc.calibrate(boots[-1])
    assert model is not None
    from kvtui.config import ConfigError

    with pytest.raises(ConfigError, match="unknown host"):
        await host_boots("nope", str(tmp_path / "hosts.toml"))
