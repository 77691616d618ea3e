"""LocalBackend on this machine: a real file followed through append / rotate / truncate (no
loss, no repeat), cursors, the boot scan-back, a real journald journal (written by
systemd-journal-remote, read by the real journalctl), NVML without a GPU, and ``run``."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvtui.config import HostConfig
from kvtui.engines.events import LogRecord
from kvtui.hosts.backend import BackendError, ConnState, HostBackend, LogStart
from kvtui.hosts.local import LocalBackend, boot_start_offset
from kvtui.hosts.nvml import NO_GPU_PREFIX, Nvml

POLL = 0.02
SGLANG_ARGS = "[2026-03-04 09:12:00] server_args=ServerArgs(model_path='/m', tp_size=2, mem_fraction_static=0.85)"


def _host(**kw: Any) -> HostConfig:
    return HostConfig(local=True, **kw)


class Collector:
    """Runs ``follow_log`` in a task and keeps every record."""

    def __init__(self, it: AsyncIterator[list[LogRecord]]) -> None:
        self.records: list[LogRecord] = []
        self.batches = 0
        self._it = it
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for batch in self._it:
            self.batches += 1
            self.records.extend(batch)

    @property
    def texts(self) -> list[str]:
        return [r.text for r in self.records]

    async def wait(self, pred: Callable[[list[str]], bool], timeout: float = 30.0) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not pred(self.texts):
            if self.task.done():
                self.task.result()
                raise AssertionError(f"stream ended early: {self.texts[-5:]}")
            if loop.time() > end:
                raise AssertionError(f"timed out; got {len(self.texts)} lines, last {self.texts[-3:]}")
            await asyncio.sleep(0.01)


async def until(pred: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait for a condition (not for a time): the machine may be slow, the outcome is the same."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def read_pos(path: Path) -> int | None:
    """How far this process's open file on ``path`` has been read (its offset in
    /proc/self/fdinfo): the follower's position, observed without asking it."""
    best: int | None = None
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != str(path):
                continue
            with open(f"/proc/self/fdinfo/{fd}") as fh:
                pos = int(next(ln for ln in fh if ln.startswith("pos:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        best = pos if best is None else max(best, pos)
    return best


def _size(path: Path) -> int:
    return path.stat().st_size


async def read_to_end(path: Path) -> None:
    """Until the follower has read everything ``path`` holds now (a partial line too)."""
    size = _size(path)
    await until(lambda: read_pos(path) == size, f"the follower to read {path.name} to byte {size}")


@asynccontextmanager
async def backend(host: HostConfig, **kw: Any) -> AsyncIterator[LocalBackend]:
    b = LocalBackend("local", host, poll_interval=POLL, **kw)
    await b.start()
    try:
        yield b
    finally:
        await b.close()


def _append(path: Path, *lines: str, end: str = "\n") -> None:
    with open(path, "a") as fh:
        fh.write("".join(line + end for line in lines))


async def test_is_a_host_backend(tmp_path: Path) -> None:
    b = LocalBackend("l", _host(log_file=str(tmp_path / "x.log")))
    assert isinstance(b, HostBackend)


async def test_file_current_boot_then_append_rotate_truncate_no_loss_no_repeat(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    _append(log, "old boot noise", SGLANG_ARGS.replace("09:12", "08:00"), "[2026-03-04 08:00:01 TP0] old line")
    _append(log, SGLANG_ARGS, "[2026-03-04 09:12:01 TP0] Init torch distributed begin.")
    async with backend(_host(log_file=str(log))) as b:
        c = Collector(b.follow_log(LogStart.CURRENT_BOOT))
        await c.wait(lambda t: len(t) >= 2)
        assert c.texts == [SGLANG_ARGS, "[2026-03-04 09:12:01 TP0] Init torch distributed begin."]
        expected = list(c.texts)

        # appends, including a line written in two parts and a tqdm \r redraw
        _append(log, "a1", "a2")
        _append(log, "half-", end="")
        await read_to_end(log)  # the follower holds "half-" without its newline ...
        assert "half-" not in c.texts  # ... and hands out no half line
        _append(log, "line")
        _append(log, "Capturing batches 10%\rCapturing batches 50%", end="\r\n")
        expected += ["a1", "a2", "half-line", "Capturing batches 10%", "Capturing batches 50%"]
        await c.wait(lambda t: len(t) >= len(expected))

        # rotation by rename: the tail of the old file, then the new file from its start
        _append(log, "before-rotate")
        os.rename(log, tmp_path / "server.log.1")
        _append(tmp_path / "server.log.1", "written-to-old-after-rename")
        _append(log, "r1", "r2")
        expected += ["before-rotate", "written-to-old-after-rename", "r1", "r2"]
        await c.wait(lambda t: len(t) >= len(expected))

        # truncation in place (copytruncate), noticed before new lines come
        await read_to_end(log)
        log.write_text("")
        await until(lambda: read_pos(log) == 0, "the follower to notice the truncation")
        _append(log, "t1")
        expected += ["t1"]
        await c.wait(lambda t: len(t) >= len(expected))

        # the file disappears, then comes back
        os.unlink(log)
        await until(lambda: "waiting for" in b.status().detail, "the follower to notice the file is gone")
        _append(log, "back")
        expected += ["back"]
        await c.wait(lambda t: len(t) >= len(expected))
        # a last line as a sync point: once it is in, anything repeated or reordered before it is too
        _append(log, "sync")
        await c.wait(lambda t: t[-1:] == ["sync"])
        assert c.texts == [*expected, "sync"]  # nothing lost, nothing repeated, in order
        assert all(r.cursor and r.cursor.isdigit() for r in c.records)  # byte offsets
    await asyncio.wait_for(c.task, 10.0)  # close() ends the stream


async def test_file_cursor_resume_and_next_boot(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    _append(log, SGLANG_ARGS, "l1", "l2")
    async with backend(_host(log_file=str(log))) as b:
        c = Collector(b.follow_log())
        await c.wait(lambda t: len(t) == 3)
        cursor = c.records[1].cursor
        assert cursor == str(len((SGLANG_ARGS + "\nl1\n").encode()))
    _append(log, "l3")
    async with backend(_host(log_file=str(log))) as b:
        c = Collector(b.follow_log(after_cursor=cursor))
        await c.wait(lambda t: len(t) == 2)
        assert c.texts == ["l2", "l3"]
        n = Collector(b.follow_log(LogStart.NEXT_BOOT))
        await until(lambda: sum(1 for fd in os.listdir("/proc/self/fd") if _is(fd, log)) >= 2,
                    "the NEXT_BOOT follower to open the file at its end")
        await read_to_end(log)
        _append(log, "l4")
        await n.wait(lambda t: t == ["l4"])
        await c.wait(lambda t: t[-1] == "l4")


async def test_file_waits_for_a_missing_file_and_cuts_huge_lines(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    async with backend(_host(log_file=str(log))) as b:
        c = Collector(b.follow_log())
        await until(lambda: f"waiting for {log} to appear" in b.status().detail, "the waiting status")
        assert b.status().state == ConnState.CONNECTED
        huge = "x" * (3 << 20)
        _append(log, "first", huge, "after")
        await c.wait(lambda t: len(t) >= 3, timeout=10)
        assert c.texts[0] == "first"
        assert len(c.texts[1]) == 1 << 20
        assert c.texts[2] == "after"
        assert len(c.texts) == 3


def test_boot_start_offset_finds_the_last_server_start() -> None:
    data = (
        "noise\n" + SGLANG_ARGS + "\n[TP0] a\n[TP0] Load weight begin\n" + SGLANG_ARGS + "\nlast\n"
    ).encode()
    off = boot_start_offset(data, 100)
    assert off is not None
    assert data[off - 100 :].startswith(SGLANG_ARGS.encode() + b"\nlast")
    assert boot_start_offset(b"just\nnoise\n", 0) is None


async def test_start_beyond_the_tail_is_found_then_one_gap_then_the_tail(tmp_path: Path) -> None:
    """The start lies far before the recent tail (``tail_bytes``): the startup part (through the
    ready line and its margin) whole, one gap record with the exact count, then the tail."""
    from kvtui.engines.events import LogGap
    from kvtui.engines.source_records import gap_range, parse_source_record
    from kvtui.hosts.filelog import READY_MARGIN_LINES

    log = tmp_path / "big.log"
    ready = "[2026-03-04 09:13:00] The server is fired up and ready to roll!"
    _append(log, "old noise", SGLANG_ARGS, ready, *[f"serving line {i}" for i in range(5000)])
    async with backend(_host(log_file=str(log)), tail_bytes=2000) as b:
        c = Collector(b.follow_log())
        await c.wait(lambda t: bool(t) and t[-1] == "serving line 4999")
        assert c.texts[:2] == [SGLANG_ARGS, ready]
        k = 2 + READY_MARGIN_LINES
        assert c.texts[2:k] == [f"serving line {i}" for i in range(READY_MARGIN_LINES)]
        gap = parse_source_record(c.texts[k])
        assert isinstance(gap, LogGap)
        assert c.records[k].cursor is None
        tail = c.texts[k + 1 :]
        assert 50 < len(tail) < 200
        assert tail == [f"serving line {i}" for i in range(5000 - len(tail), 5000)]
        assert gap.lines == 5000 - READY_MARGIN_LINES - len(tail)
        lo, hi = (int(x) for x in gap_range(gap.where)["bytes"].split("-"))
        assert log.read_bytes()[lo:hi].count(b"\n") == gap.lines
        assert c.records[k - 1].cursor == str(lo)
        assert c.records[k + 1].cursor == str(hi + len(tail[0]) + 1)


# ---------------------------------------------------------------------------------------------
# journald: a real journal file (systemd-journal-remote), the real journalctl
# ---------------------------------------------------------------------------------------------

JOURNAL_REMOTE = next(
    (p for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote") if Path(p).exists()),
    None,
)
needs_journal = pytest.mark.skipif(
    JOURNAL_REMOTE is None or shutil.which("journalctl") is None, reason="systemd-journal-remote/journalctl missing"
)
BOOT_ID = "0123456789abcdef0123456789abcdef"


class Journal:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.n = 0
        directory.mkdir()

    def write(self, *entries: tuple[str, dict[str, str]]) -> None:
        out = []
        for msg, extra in entries:
            self.n += 1
            fields = {
                "__REALTIME_TIMESTAMP": str(1783576800000000 + self.n * 1000),
                "__MONOTONIC_TIMESTAMP": str(1000 + self.n),
                "_BOOT_ID": BOOT_ID,
                "_HOSTNAME": "gpu-a",
                "MESSAGE": msg,
                **extra,
            }
            out.append("".join(f"{k}={v}\n" for k, v in fields.items()) + "\n")
        src = self.dir.parent / f"in-{self.n}.export"
        src.write_text("".join(out))
        assert JOURNAL_REMOTE is not None
        import subprocess

        subprocess.run([JOURNAL_REMOTE, "-o", str(self.dir / "remote.journal"), str(src)], check=True,
                       capture_output=True)


def manager(msg: str, inv: str) -> tuple[str, dict[str, str]]:
    return msg, {"SYSLOG_IDENTIFIER": "systemd", "_PID": "1", "UNIT": "sglang.service", "INVOCATION_ID": inv}


def service(msg: str, inv: str, pid: int = 4242) -> tuple[str, dict[str, str]]:
    return msg, {
        "SYSLOG_IDENTIFIER": "python3",
        "_PID": str(pid),
        "_SYSTEMD_UNIT": "sglang.service",
        "_SYSTEMD_INVOCATION_ID": inv,
    }


def fake_systemctl(tmp_path: Path, props: dict[str, str]) -> tuple[str, ...]:
    """A stand-in for ``systemctl show -p A [-p B] [--value] UNIT`` (the real one needs a running
    systemd)."""
    script = tmp_path / "systemctl"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"props = {props!r}\n"
        "args = sys.argv[1:]\n"
        "want = [args[i + 1] for i, a in enumerate(args) if a == '-p']\n"
        "for k in want:\n"
        "    print(props.get(k, '') if '--value' in args else k + '=' + props.get(k, ''))\n"
    )
    script.chmod(0o755)
    return (str(script),)


@needs_journal
async def test_journal_current_boot_by_invocation_id_and_cursor_resume(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal")
    inv1, inv2 = "a" * 32, "b" * 32
    j.write(
        manager("Starting sglang.service...", inv1),
        service(SGLANG_ARGS, inv1),
        service("old boot line", inv1),
        manager("Stopping sglang.service...", inv1),
        manager("Starting sglang.service...", inv2),
        service(SGLANG_ARGS, inv2, 5000),
        service("[2026-03-04 09:12:01 TP0] Init torch distributed begin.", inv2, 5000),
    )
    journalctl = ("journalctl", f"--directory={j.dir}")
    host = _host(unit="sglang.service")
    async with backend(host, journalctl=journalctl, systemctl=fake_systemctl(tmp_path, {"InvocationID": inv2})) as b:
        c = Collector(b.follow_log(LogStart.CURRENT_BOOT))
        await c.wait(lambda t: len(t) >= 3)
        assert c.texts == [
            "Starting sglang.service...",
            SGLANG_ARGS,
            "[2026-03-04 09:12:01 TP0] Init torch distributed begin.",
        ]
        r = c.records[1]
        assert r.source == "journal"
        assert r.ident == "python3"
        assert r.pid == 5000
        assert r.cursor is not None
        assert r.cursor.startswith("s=")
        assert r.ts is not None
        # live: entries appended to the journal reach the follower
        j.write(service("[TP0] Load weight begin. avail mem=78.00 GB", inv2, 5000))
        await c.wait(lambda t: len(t) >= 4, timeout=10)
        cursor = c.records[-1].cursor
    j.write(service("after restart of kvtui", inv2, 5000))
    async with backend(host, journalctl=journalctl, systemctl=fake_systemctl(tmp_path, {})) as b:
        c2 = Collector(b.follow_log(after_cursor=cursor))
        await c2.wait(lambda t: len(t) >= 1)
        j.write(service("sync", inv2, 5000))  # a sync point: a repeat would come before it
        await c2.wait(lambda t: t[-1:] == ["sync"])
        assert c2.texts == ["after restart of kvtui", "sync"]


@needs_journal
async def test_journal_scan_back_without_invocation_id(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal")
    inv1, inv2 = "c" * 32, "d" * 32
    j.write(
        manager("Started sglang.service.", inv1),
        service("first boot", inv1),
        manager("Started sglang.service.", inv2),
        service("second boot", inv2),
    )
    async with backend(
        _host(unit="sglang.service"),
        journalctl=("journalctl", f"--directory={j.dir}"),
        systemctl=("false",),
    ) as b:
        c = Collector(b.follow_log())
        await c.wait(lambda t: len(t) >= 2)
        j.write(service("sync", inv2))  # a sync point: an extra line would come before it
        await c.wait(lambda t: t[-1:] == ["sync"])
        assert c.texts == ["Started sglang.service.", "second boot", "sync"]


# ---------------------------------------------------------------------------------------------
# GPUs: NVML
# ---------------------------------------------------------------------------------------------


async def test_no_gpu_is_said_plainly(tmp_path: Path) -> None:
    nvml = Nvml()
    if nvml.init():  # pragma: no cover - a machine with a driver
        nvml.shutdown()
        pytest.skip("this machine has an NVIDIA driver")
    async with backend(_host(log_file=str(tmp_path / "x.log"))) as b:
        st = b.status()
        assert st.state == ConnState.CONNECTED
        assert NO_GPU_PREFIX in st.detail
        assert b.gpu_error is not None
        got = [s async for s in b.gpu_stream(0.01)]
        assert got == []
        assert await b.gpu_processes() == []


class _FakeNvml:
    """The NVML functions LocalBackend calls, answering like an 8-GPU box (no GPU here)."""

    def __init__(self) -> None:
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 8

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=(1000 + h) * 1048576, total=97887 * 1048576)

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-{h}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=50)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        raise RuntimeError("Not Supported")

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 350_000

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=512 * 1048576)] if h == 2 else []


class _NewerNvml(_FakeNvml):
    """A driver with the power limit and the clocks event reasons (GPU 3 at its power cap)."""

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 0x4 if h == 3 else 0x1


async def test_nvml_power_limit_and_throttle_reasons(tmp_path: Path) -> None:
    async with backend(_host(log_file=str(tmp_path / "x.log"), gpus=[2, 3]), nvml=Nvml(_NewerNvml()),
                       clock=lambda: 42.0) as b:
        it = b.gpu_stream(0.01)
        samples = await it.__anext__()
        await it.aclose()
        assert [(s.power_w, s.power_limit_w, s.throttle) for s in samples] == [
            (350.0, 700.0, None), (350.0, 700.0, "power cap")]


async def test_nvml_readings_filtered_to_the_servers_gpus(tmp_path: Path) -> None:
    fake = _FakeNvml()
    async with backend(_host(log_file=str(tmp_path / "x.log"), gpus=[2, 3]), nvml=Nvml(fake), clock=lambda: 42.0) as b:
        assert NO_GPU_PREFIX not in b.status().detail
        it = b.gpu_stream(0.01)
        samples = await it.__anext__()
        await it.aclose()
        assert [s.index for s in samples] == [2, 3]
        s2 = samples[0]
        assert (s2.used_mib, s2.total_mib, s2.util, s2.ts) == (1002.0, 97887.0, 50.0, 42.0)
        assert s2.temperature_c is None  # not supported -> None, not a crash
        assert s2.power_w == 350.0
        assert (s2.power_limit_w, s2.throttle) == (None, None)  # an older pynvml: not shown
        assert s2.uuid == "GPU-2"
        assert [(p.pid, p.used_mib, p.gpu_index) for p in s2.processes] == [(os.getpid(), 512.0, 2)]
        procs = await b.gpu_processes()
        assert [p.pid for p in procs] == [os.getpid()]
        assert procs[0].name  # /proc/PID/comm of this process


# ---------------------------------------------------------------------------------------------
# run(), server_pids(), configuration errors
# ---------------------------------------------------------------------------------------------


async def test_run_commands(tmp_path: Path) -> None:
    async with backend(_host(log_file=str(tmp_path / "x.log"))) as b:
        r = await b.run("echo out; echo err >&2; exit 3")
        assert (r.exit_status, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
        r = await b.run("cat", input=b"fed")
        assert r.ok
        assert r.stdout == "fed"
        r = await b.run("sleep 5", timeout=0.2)
        assert r.exit_status == 124
        assert "timed out" in r.stderr


async def test_server_pids_from_the_unit(tmp_path: Path) -> None:
    child = await asyncio.create_subprocess_exec("sleep", "30")
    try:
        systemctl = fake_systemctl(tmp_path, {"MainPID": str(os.getpid()), "ControlGroup": "/no/such/cgroup"})
        async with backend(_host(unit="sglang.service"), systemctl=systemctl) as b:
            pids = await b.server_pids()
            assert os.getpid() in pids
            assert child.pid in pids  # children of MainPID
        async with backend(_host(log_file=str(tmp_path / "x.log"))) as b:
            assert await b.server_pids() == set()
    finally:
        child.kill()
        await child.wait()


async def test_missing_tool_is_a_backend_error(tmp_path: Path) -> None:
    async with backend(_host(unit="x.service"), journalctl=("/nonexistent/journalctl",), systemctl=("false",)) as b:
        with pytest.raises(BackendError, match="not found"):
            async for _ in b.follow_log():
                pass


@needs_journal
async def test_close_leaves_no_child_running(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal")
    j.write(service("one line", "e" * 32))
    b = LocalBackend("l", _host(unit="sglang.service"), journalctl=("journalctl", f"--directory={j.dir}"),
                     systemctl=("false",))
    await b.start()
    c = Collector(b.follow_log(LogStart.NEXT_BOOT))
    await until(lambda: bool(b._procs), "journalctl -f to be running")
    procs = list(b._procs)
    await b.close()
    await asyncio.wait_for(c.task, 10.0)
    assert all(p.returncode is not None for p in procs)


@needs_journal
async def test_followers_die_with_a_killed_kvtui(tmp_path: Path) -> None:
    """kill -9 of the kvtui process leaves no journalctl -f behind (PR_SET_PDEATHSIG)."""
    j = Journal(tmp_path / "journal")
    j.write(service("one line", "f" * 32))
    script = f"""
import asyncio, sys
from kvtui.config import HostConfig
from kvtui.hosts.local import LocalBackend
from kvtui.hosts.backend import LogStart

async def main():
    b = LocalBackend("l", HostConfig(local=True, unit="sglang.service"),
                     journalctl=("journalctl", "--directory={j.dir}"), systemctl=("false",))
    await b.start()
    it = b.follow_log(LogStart.NEXT_BOOT)
    task = asyncio.ensure_future(it.__anext__())
    while not b._procs:
        await asyncio.sleep(0.02)
    print(next(iter(b._procs)).pid, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    follower = int(line)
    assert _alive(follower)
    proc.kill()
    await proc.wait()
    await until(lambda: not _alive(follower), "journalctl -f to die with kvtui (it outlived it)")


def _is(fd: str, path: Path) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == str(path)
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_sudo_hosts_run_journalctl_through_sudo_n(tmp_path: Path) -> None:
    b = LocalBackend("l", _host(unit="x.service", sudo=True), journalctl=("journalctl",), systemctl=("systemctl",))
    assert b._journalctl[:3] == ["sudo", "-n", "journalctl"]
    assert b._systemctl[:3] == ["sudo", "-n", "systemctl"]
    plain = LocalBackend("l", _host(unit="x.service"))
    assert plain._journalctl == ["journalctl"]
    if shutil.which("sudo") is None:  # the error names what is missing
        await b.start()
        try:
            with pytest.raises(BackendError, match="sudo"):
                async for _ in b.follow_log(LogStart.NEXT_BOOT):
                    pass
        finally:
            await b.close()
