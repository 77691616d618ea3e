"""Issue 21 over a real sshd: an SSH ``log_file`` host whose server has been up for days.

A real SGLang boot (tests/fixtures/real/01-…-ready.log: ``max_total_num_tokens=25169``) followed
by 10k or 2M serving lines (SGLang Decode/Prefill lines and uvicorn access lines, ~120 bytes; the
250 MB file is a 1000-line block written over and over). kvtui must read the boot's startup part,
say one gap of exactly the lines it skipped, read the recent tail and follow — in a spool of a few
MB — find a start in a rotated copy (plain or .gz), say a start that is gone (the flags then come
from the running process), lose and repeat no line through a copytruncate or a rename while it
follows, and search the gap on the host.

Measured figures are printed (``pytest -s -m sshd``) and written to ``$KVTUI_MEASURE_FILE``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sshd_support import (
    CutProxy,
    FakeTools,
    SshdInstance,
    processes_matching,
    requires_sshd,
    start_sshd,
    wait_no_processes,
)

import kvtui
from kvtui.boot.model import Boot, BootStatus
from kvtui.engines.events import Fact, LogRecord
from kvtui.engines.source_records import gap_range, gap_where
from kvtui.hosts.backend import BackendError, LogStart
from kvtui.hosts.ssh import Backoff, SshBackend
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.spool import iter_spooled

pytestmark = [pytest.mark.sshd, requires_sshd]

FIXTURES = Path(__file__).parent / "fixtures"
BOOT = (FIXTURES / "real" / "01-sglang-llama32-3b-tp1-hicache-ready.log").read_bytes()
BOOT_START = BOOT.index(b"[2026-02-09 14:38:13] server_args=ServerArgs(")  # 3 warning lines come first
POOL = 25169  # the fixture's max_total_num_tokens
LAST = b"[2026-02-10 04:00:00] INFO:     127.0.0.1:50000 - \"GET /health HTTP/1.1\" 200 OK (the last line)\n"
NEEDLE = b"[2026-02-10 03:30:00] WARNING scheduler.py:1234: watchdog: needle-4242 decode step took 3.2 s\n"
MEASURED: dict[str, Any] = {}


def _record(key: str, value: Any) -> None:
    MEASURED[key] = value
    print(f"\n[measure] {key} = {value}")
    out = os.environ.get("KVTUI_MEASURE_FILE")
    if out:
        Path(out).write_text(json.dumps(MEASURED, indent=2, sort_keys=True))


def serving_block(n: int = 1000, tokens: int = 12000) -> bytes:
    """``n`` serving lines of a busy SGLang server (~120 bytes each): Decode (``#token``/``token
    usage``: the pool is ``tokens / usage`` ≈ 25000), Prefill, uvicorn access lines."""
    out = []
    usage = tokens / POOL
    for i in range(n):
        ts = f"[2026-02-10 03:12:{i % 60:02d}]"
        k = i % 4
        if k == 0:
            out.append(f"{ts} Decode batch. #running-req: {i % 30 + 1}, #token: {tokens}, token usage: {usage:.2f}, "
                       f"cuda graph: True, gen throughput (token/s): 512.{i % 10}, #queue-req: 0\n")
        elif k == 1:
            out.append(f"{ts} Prefill batch. #new-seq: 1, #new-token: {i % 900 + 10}, #cached-token: 0, "
                       f"token usage: {usage:.2f}, #running-req: 3, #queue-req: 0\n")
        else:
            out.append(f'{ts} INFO:     127.0.0.1:{16000 + i % 999} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
    return "".join(out).encode()


def write_log(path: Path, head: bytes, lines: int, *, needle_at: int | None = None, last: bytes = LAST) -> None:
    """``head`` then ``lines`` serving lines (a block repeated; the needle after ``needle_at``
    lines) then ``last``."""
    block = serving_block()
    with path.open("wb") as f:
        f.write(head)
        for k in range(lines // 1000):
            f.write(block)
            if needle_at is not None and (k + 1) * 1000 == needle_at:
                f.write(NEEDLE)
        f.write(last)


def count_lines(path: Path, a: int = 0, b: int | None = None) -> int:
    """Newlines in the bytes [a, b) of ``path``, read in chunks (never the whole file at once)."""
    n = 0
    with path.open("rb") as f:
        f.seek(a)
        left = (b if b is not None else path.stat().st_size) - a
        while left > 0:
            chunk = f.read(min(left, 1 << 22))
            if not chunk:
                break
            n += chunk.count(b"\n")
            left -= len(chunk)
    return n


def pieces(path: Path, a: int, b: int) -> list[str]:
    """The records a reader makes of the bytes [a, b) (small ranges): one per line or ``\\r`` piece."""
    with path.open("rb") as fh:
        fh.seek(a)
        data = fh.read(b - a)
    return [x.decode() for x in re.split(rb"\r\n|\r|\n", data) if x]


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> FakeTools:
    return FakeTools.create(tmp_path_factory.mktemp("uphost"))


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory, tools: FakeTools) -> Iterator[SshdInstance]:
    inst = start_sshd(tmp_path_factory.mktemp("sshd"), user="root", path_prefix=tools.bin_dir,
                      extra_env={"KVTUI_FAKE_STATE": str(tools.state)})
    inst.assert_fake_path()
    yield inst
    inst.stop()


@pytest.fixture(scope="module")
def big_log(tools: FakeTools) -> Iterator[Path]:
    """The boot then 2M serving lines (~240 MB) with a needle in the middle; deleted after."""
    d = tools.root / f"big-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    path = d / "sglang.log"
    write_log(path, BOOT, 2_000_000, needle_at=1_000_000)
    yield path
    shutil.rmtree(d, ignore_errors=True)


def make_backend(sshd: SshdInstance, port: int | None = None, **keys: Any) -> SshBackend:
    keys.setdefault("unit", None)
    return SshBackend("uptime", sshd.host_config(port=port, **keys), ssh_config=[], connect_timeout=5,
                      keepalive_interval=2, backoff=Backoff(initial=0.05, cap=0.5, rng=random.Random(7)),
                      options={"agent_path": None})


async def wait_until(cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.01)


def _ignore(_: Sequence[object]) -> None:
    pass


class Followed:
    """A ``HostMonitor`` over the sshd following one log file."""

    def __init__(self, sshd: SshdInstance, state: Path, **keys: Any) -> None:
        self.backend = make_backend(sshd, **keys)
        self.mon = HostMonitor("uptime", self.backend,
                               options=MonitorOptions(state_dir=state, gpu_interval=5.0, pids_interval=60.0))
        self.t0 = time.monotonic()
        self.task = asyncio.create_task(self.mon.run(_ignore))

    def boot(self) -> Boot | None:
        return self.mon.boots[-1] if self.mon.boots else None

    def texts(self) -> list[str]:
        self.mon.spool.flush()
        return [r.text for r in iter_spooled(self.mon.spool)]

    def records(self) -> list[tuple[str, str | None, str | None]]:
        self.mon.spool.flush()
        return [(r.text, r.cursor, r.ident) for r in iter_spooled(self.mon.spool)]

    def spool_bytes(self) -> int:
        self.mon.spool.flush()
        return sum(p.stat().st_size for p in self.mon.spool.files() if p.exists())

    async def until(self, cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        try:
            await wait_until(cond, timeout, what)
        except AssertionError as exc:
            b = self.boot()
            raise AssertionError(f"{exc}: boot {b.to_json() if b else None}; notes {list(self.mon.notes)}") from None

    async def close(self) -> None:
        await self.mon.close()
        await asyncio.wait_for(self.task, 15)


def _ready_with_figures(f: Followed) -> bool:
    b = f.boot()
    return b is not None and b.status is BootStatus.READY and Fact.MAX_TOTAL_NUM_TOKENS in b.facts


def _own(records: list[tuple[str, str | None, str | None]]) -> list[str]:
    return [t for t, _, ident in records if ident == "kvtui"]


@pytest.mark.parametrize("lines", [10_000, 2_000_000], ids=["10k", "2M"])
async def test_a_boot_days_old_is_ready_with_figures_one_exact_gap_and_the_tail(
    sshd: SshdInstance, tools: FakeTools, tmp_path: Path, lines: int, request: pytest.FixtureRequest
) -> None:
    """Fails before issue 21: at 2M lines the start is past the 64 MiB scan window ('starting',
    no figure, a spool of 64 MiB); at 10k the whole file is copied and no gap is said."""
    if lines == 2_000_000:
        log: Path = request.getfixturevalue("big_log")
    else:
        d = tools.root / f"small-{uuid.uuid4().hex[:8]}"
        d.mkdir()
        log = d / "sglang.log"
        write_log(log, BOOT, lines)
    size = log.stat().st_size
    f = Followed(sshd, tmp_path / "state", log_file=str(log))
    try:
        await f.until(lambda: _ready_with_figures(f), "ready with figures")
        t_ready = time.monotonic() - f.t0
        await f.until(lambda: bool(f.mon.spool.last_cursor) and int(f.mon.spool.last_cursor or 0) == size,
                      "the tail's last line")
        b = f.boot()
        assert b is not None
        assert b.status is BootStatus.READY
        assert b.start_missing is None
        assert b.facts[Fact.MAX_TOTAL_NUM_TOKENS] == POOL
        assert b.flags.get("model_path") == "meta-llama/Llama-3.2-3B"  # from the log's own dump
        recs = f.records()
        own = _own(recs)
        assert len(own) == 1
        assert own[0].startswith("kvtui: ")
        assert " lines not read [bytes=" in own[0]
        assert re.search(r"\(2026-02-10T03:12:\d\d → 2026-02-10T03:12:\d\d\)$", own[0])  # first/last line times
        where = b.skipped_where[0]
        a, _, z = gap_range(where)["bytes"].partition("-")
        gap_a, gap_b = int(a), int(z)
        # exact: the gap's lines are those of its byte range, every other line after the start
        # is in the spool once, in order, and the tail reaches the file's last line
        assert b.skipped_lines == count_lines(log, gap_a, gap_b)
        file_lines = [(t, c) for t, c, ident in recs if ident != "kvtui"]
        startup = [t for t, c in file_lines if int(c or 0) <= gap_a]
        assert len(startup) >= count_lines(log, BOOT_START, gap_a)  # (progress bars are split at \r)
        assert [t for t, c in file_lines if int(c or 0) > gap_a] == pieces(log, gap_b, size)
        assert file_lines[0][0].startswith("[2026-02-09 14:38:13] server_args=ServerArgs(")
        assert file_lines[-1][0] == LAST.decode().rstrip("\n")
        cursors = [int(c) for _, c in file_lines if c]
        assert cursors == sorted(cursors)
        assert any(c == str(gap_a) for _, c in file_lines)  # the startup part ends where the gap begins
        assert size - gap_b <= 1024 * 1024 + 200  # the recent tail: ~1 MiB
        # the gap sits between the startup part and the tail, in order
        i_gap = next(i for i, r in enumerate(recs) if r[2] == "kvtui")
        assert int(recs[i_gap - 1][1] or 0) == gap_a
        assert int(recs[i_gap + 1][1] or 0) > gap_b
        spool = f.spool_bytes()
        assert spool < 20 * 1024 * 1024
        # following goes on as ever
        with log.open("ab") as fh:
            fh.write(b"[2026-02-10 04:00:01] a line written now\n")
        await f.until(lambda: f.texts()[-1] == "[2026-02-10 04:00:01] a line written now", "the new line")
        _record(f"uptime_file_{lines}_ready_s", round(t_ready, 3))
        _record(f"uptime_file_{lines}_spool_bytes", spool)
        _record(f"uptime_file_{lines}_skipped_lines", b.skipped_lines)
    finally:
        await f.close()
        if lines != 2_000_000:
            shutil.rmtree(log.parent, ignore_errors=True)
    assert await wait_no_processes(str(log), ("tail", "kvtui-guard")) == []


def test_kvtui_wait_on_the_2m_file_against_a_grep_over_ssh(sshd: SshdInstance, big_log: Path,
                                                           tmp_path: Path) -> None:
    """``kvtui wait`` (a fresh process: its start-up, connect, locate, read) on the 2M-line file
    is ready with figures within 1.5 × (a bare ``ssh host grep`` of the file + the same ``kvtui
    wait`` on the boot alone, i.e. kvtui's start-up); its peak RSS and spool are small. Fails
    before issue 21: the start was past the scan window ('the log begins while it serves', no
    figure)."""
    t = time.monotonic()
    res = sshd.run(f"grep -E 'fired up|max_total_num_tokens|Load weight' {big_log}", timeout=60)
    t_grep = time.monotonic() - t
    assert res.returncode == 0
    assert "max_total_num_tokens=25169" in res.stdout
    small = tmp_path / "boot-only.log"
    small.write_bytes(BOOT)

    def wait(log: Path, state: str) -> tuple[float, dict[str, Any], int | None]:
        hosts = tmp_path / f"hosts-{state}.toml"
        s = sshd
        hosts.write_text(f'[hosts.box]\nssh = "{s.target}"\nport = {s.port}\nidentity_file = "{s.client_key}"\n'
                         f'known_hosts = "{s.known_hosts}"\nlog_file = "{log}"\nengine = "sglang"\nprobe = false\n')
        env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "KVTUI_HOSTS")}
        env.update(XDG_STATE_HOME=str(tmp_path / state), XDG_CONFIG_HOME=str(tmp_path / "config"),
                   HOME=str(tmp_path), PYTHONPATH=str(Path(kvtui.__file__).resolve().parents[1]))  # this tree's
        timer = ["/usr/bin/time", "-f", "KVTUI_MAXRSS_KB=%M"] if Path("/usr/bin/time").exists() else []
        t = time.monotonic()
        out = subprocess.run([*timer, sys.executable, "-m", "kvtui", "--hosts", str(hosts), "wait", "box", "--json",
                              "--timeout", "60"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=90,
                             check=False)
        took = time.monotonic() - t
        assert out.returncode == 0, out.stderr
        rss = re.search(r"KVTUI_MAXRSS_KB=(\d+)", out.stderr)
        return took, json.loads(out.stdout), int(rss.group(1)) if rss else None

    t_small, doc, _ = wait(small, "state-small")
    assert doc["metrics"]["max_total_num_tokens"] == POOL
    t_wait, doc, rss_kb = wait(big_log, "state")
    assert doc["status"] == "ready"
    assert doc["metrics"]["max_total_num_tokens"] == POOL, doc
    assert "start_missing" not in doc
    spool = sum(p.stat().st_size for p in (tmp_path / "state").rglob("*") if p.is_file())
    _record("uptime_2m_ssh_grep_s", round(t_grep, 3))
    _record("uptime_2m_kvtui_wait_s", round(t_wait, 3))
    _record("uptime_boot_only_kvtui_wait_s", round(t_small, 3))
    _record("uptime_2m_kvtui_wait_peak_rss_mib", round(rss_kb / 1024, 1) if rss_kb else None)
    _record("uptime_2m_kvtui_wait_state_bytes", spool)
    assert spool < 20 * 1024 * 1024
    assert rss_kb is None or rss_kb < 150 * 1024
    assert t_wait < 1.5 * (t_grep + t_small) + 1.0  # (+1 s: the shared machine's load varies)


async def test_a_cut_after_the_gap_says_no_second_gap_and_loses_nothing(sshd: SshdInstance, tools: FakeTools) -> None:
    """The connection drops twice once the tail is followed: the follower goes on from its byte
    offset (no startup part again, no second gap) and every line written meanwhile arrives once.
    Fails before issue 21: no gap was said at all (the whole file was copied)."""
    d = tools.root / f"cut-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    log = d / "sglang.log"
    write_log(log, BOOT, 20_000)
    proxy = await CutProxy(sshd.port).start()
    sshd.trust_port(proxy.port)
    b = make_backend(sshd, port=proxy.port, log_file=str(log))
    got: list[LogRecord] = []

    async def collect(it: AsyncIterator[list[LogRecord]]) -> None:
        async for batch in it:
            got.extend(batch)

    task = asyncio.create_task(collect(b.follow_log(LogStart.CURRENT_BOOT)))
    try:
        await wait_until(lambda: bool(got) and got[-1].cursor == str(log.stat().st_size), 60, "the tail")
        for k in range(2):
            proxy.cut()
            with log.open("ab") as fh:
                fh.write(b"".join(b"[2026-02-10 05:00:00] after cut %d line %d\n" % (k, i) for i in range(50)))
            await wait_until(lambda: got[-1].cursor == str(log.stat().st_size), 60, "the lines after a cut")
        gaps = [r.text for r in got if r.ident == "kvtui"]
        assert len(gaps) == 1
        assert b.reconnects == 2
        after = [r.text for r in got if "after cut" in r.text]
        assert after == [f"[2026-02-10 05:00:00] after cut {k} line {i}" for k in range(2) for i in range(50)]
        assert sum(1 for r in got if "server_args=ServerArgs(" in r.text) == 1
    finally:
        task.cancel()
        with __import__("contextlib").suppress(asyncio.CancelledError):
            await task
        await b.close()
        await proxy.close()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("gz", [False, True], ids=["FILE.1", "FILE.1.gz"])
async def test_a_boot_that_started_in_the_rotated_copy(sshd: SshdInstance, tools: FakeTools, tmp_path: Path,
                                                       gz: bool) -> None:
    """Fails before issue 21: the current file holds no start, so the boot had no figure (a
    serving boot from the tail, or 'starting')."""
    d = tools.root / f"rot-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    log = d / "sglang.log"
    write_log(d / "old.log", BOOT, 5000, last=b"[2026-02-10 01:00:00] rotated here\n")
    rot = d / ("sglang.log.1.gz" if gz else "sglang.log.1")
    if gz:
        with gzip.open(rot, "wb", compresslevel=1) as g:
            g.write((d / "old.log").read_bytes())
        (d / "old.log").unlink()
    else:
        (d / "old.log").rename(rot)
    (d / "sglang.log.2.gz").write_bytes(gzip.compress(b"[2026-01-01 00:00:00] an older rotation\n"))
    os.utime(d / "sglang.log.2.gz", (time.time() - 7200, time.time() - 7200))
    os.utime(rot, (time.time() - 3600, time.time() - 3600))
    write_log(log, b"", 20_000)
    f = Followed(sshd, tmp_path / "state", log_file=str(log))
    try:
        await f.until(lambda: _ready_with_figures(f), "ready with figures")
        await f.until(lambda: f.mon.spool.last_cursor == str(log.stat().st_size), "the tail's last line")
        b = f.boot()
        assert b is not None
        assert b.facts[Fact.MAX_TOTAL_NUM_TOKENS] == POOL
        assert b.start_missing is None
        recs = f.records()
        own = _own(recs)
        assert len(own) == 2
        wheres = [gap_range(w) for w in b.skipped_where]
        assert wheres[0]["path"] == str(rot)
        assert "path" not in wheres[1]
        a1, _, z1 = wheres[1]["bytes"].partition("-")
        assert int(a1) == 0
        rot_text = gzip.decompress(rot.read_bytes()) if gz else rot.read_bytes()
        a0, _, z0 = wheres[0]["bytes"].partition("-")
        assert int(z0) == len(rot_text)
        assert b.skipped_lines == rot_text[int(a0):].count(b"\n") + count_lines(log, 0, int(z1))
        # the copy's lines carry no cursor (their offsets are another file's); the tail's do
        file_lines = [(t, c) for t, c, ident in recs if ident != "kvtui"]
        assert file_lines[0][0].startswith("[2026-02-09 14:38:13] server_args=ServerArgs(")
        assert all(c is None for t, c in file_lines[: rot_text[BOOT_START:int(a0)].count(b"\n")])
        assert file_lines[-1] == (LAST.decode().rstrip("\n"), str(log.stat().st_size))
        size = log.stat().st_size
        assert [t for t, c in file_lines if c is not None] == pieces(log, int(z1), size)
        assert len([c for _, c in file_lines if c is None]) >= rot_text[BOOT_START:int(a0)].count(b"\n")
        assert any("sglang.log.1" in n and "rotated" in n for n in f.mon.notes)  # the monitor took them (HostNotes)
        # the rotated copy's gap is searched on the host (gzip -dc for the .gz)
        found = await f.backend.search_log("ROTATED HERE", b.skipped_where[0], context=1)
        assert [(m.record.text, m.record.cursor) for m in found] == [
            ("[2026-02-10 01:00:00] rotated here", str(len(rot_text)))]
        assert [r.text[-20:] for r in found[0].context_before] == [rot_text.split(b"\n")[-3][-20:].decode()]
    finally:
        await f.close()
        shutil.rmtree(d, ignore_errors=True)


FAKE_SERVER = """import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(600)
"""


async def test_a_start_gone_everywhere_serves_with_flags_from_the_process(
    sshd: SshdInstance, tools: FakeTools, tmp_path: Path
) -> None:
    """Fails before issue 21: no start in the log meant no flags at all (and no word of why)."""
    d = tools.root / f"gone-{uuid.uuid4().hex[:8]}"
    (d / "pkg" / "sglang").mkdir(parents=True)
    (d / "pkg" / "sglang" / "__init__.py").write_text("")
    (d / "pkg" / "sglang" / "launch_server.py").write_text(FAKE_SERVER)
    log = d / "sglang.log"
    write_log(log, b"", 20_000)
    (d / "sglang.log.1.gz").write_bytes(gzip.compress(serving_block(2000)))
    pid_file = d / "sglang.pid"
    server = subprocess.Popen(  # noqa: ASYNC220 (a long-running process, not waited for here)
        [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/llama-3.2-3b", "--tp", "1",
         "--mem-fraction-static", "0.88", "--port", "30000"],
        env={**os.environ, "PYTHONPATH": str(d / "pkg")}, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file.write_text(f"{server.pid}\n")
    f = Followed(sshd, tmp_path / "state", log_file=str(log), pid_file=str(pid_file))
    try:
        await f.until(lambda: (b := f.boot()) is not None and b.flags_from == "process"
                      and b.live.pool_tokens_est is not None
                      and f.mon.spool.last_cursor == str(log.stat().st_size), "flags from the process")
        b = f.boot()
        assert b is not None
        assert b.status is BootStatus.READY
        assert b.start_missing is not None
        assert "not in sglang.log or its rotated copies (sglang.log.1.gz)" in b.start_missing
        assert "the server has run since" in b.start_missing
        assert b.flags["mem_fraction_static"] == 0.88
        assert b.flags["model_path"] == "/models/llama-3.2-3b"
        assert b.live.pool_tokens_err is not None
        assert abs(b.live.pool_tokens_est - POOL) <= b.live.pool_tokens_err
        assert b.skipped_lines == count_lines(log, 0, int(gap_range(b.skipped_where[0])["bytes"].split("-")[1]))
        own = _own(f.records())
        assert own[0].startswith("kvtui: the server's start is not in the log (")
        assert own[1].startswith(f"kvtui: the running server's command line (pid {server.pid}): ")
        assert any("no server start in sglang.log" in n for n in f.mon.notes)  # the monitor took them (HostNotes)
    finally:
        await f.close()
        server.terminate()
        server.wait(10)
        shutil.rmtree(d, ignore_errors=True)


class Writer:
    """Appends numbered lines to a log; ``paused()`` holds it while the log is rotated."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = 0
        self.lock = threading.Lock()

    def write(self, count: int) -> None:
        with self.lock, self.path.open("ab") as f:
            f.write(b"".join(b"[2026-02-10 05:00:00] numbered line %08d\n" % (self.n + i) for i in range(count)))
            self.n += count


def _numbers(texts: list[str]) -> list[int]:
    return [int(t.rsplit(" ", 1)[1]) for t in texts if "numbered line" in t]


async def test_copytruncate_and_rename_while_following_lose_and_repeat_nothing(
    sshd: SshdInstance, tools: FakeTools
) -> None:
    """Lines the follower had not read yet when logrotate rotated the file. Its ``tail`` is
    stopped (SIGSTOP) while lines are written and the file is rotated, so it cannot have read
    them. Fails before issue 21: after tail's 'file truncated' the follower went on from the
    new file's start, and the lines written before the copy were lost."""
    d = tools.root / f"ct-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    log = d / "sglang.log"
    log.write_bytes(BOOT)
    w = Writer(log)
    w.write(100)
    b = make_backend(sshd, log_file=str(log))
    got: list[LogRecord] = []

    async def collect(it: AsyncIterator[list[LogRecord]]) -> None:
        async for batch in it:
            got.extend(batch)

    task = asyncio.create_task(collect(b.follow_log(LogStart.CURRENT_BOOT)))

    def tails() -> list[int]:
        hits = [line.split(None, 3) for line in processes_matching(str(log), ("tail",), exclude=("kvtui-guard",))]
        return [int(h[0]) for h in hits if len(h) == 4 and h[3].startswith("tail ")]

    async def stopped_tail() -> int:
        await wait_until(lambda: _numbers([r.text for r in got])[-1:] == [w.n - 1] and len(tails()) == 1, 30,
                         "caught up")
        pid = tails()[0]
        os.kill(pid, signal.SIGSTOP)
        return pid

    try:
        # copytruncate: written while tail is stopped, copied to FILE.1, truncated, written again
        pid = await stopped_tail()
        w.write(500)
        with w.lock:
            shutil.copyfile(log, d / "sglang.log.1")
            os.truncate(log, 0)
        w.write(50)
        os.kill(pid, signal.SIGCONT)
        await wait_until(lambda: len(_numbers([r.text for r in got])) >= w.n, 30, "every line after copytruncate")
        # rename and create: written while tail is stopped, renamed, a new file, written again
        w.write(100)
        pid = await stopped_tail()
        w.write(500)
        with w.lock:
            log.rename(d / "sglang.log.2")
            log.write_bytes(b"")
        w.write(50)
        os.kill(pid, signal.SIGCONT)
        await wait_until(lambda: len(_numbers([r.text for r in got])) >= w.n, 30, "every line after the rename")
        await asyncio.sleep(0.5)  # nothing extra may trickle in
        nums = _numbers([r.text for r in got])
        assert nums == list(range(w.n)), (len(nums), w.n, b.notes)
        assert any("copytruncate" in n and "sglang.log.1" in n for n in b.notes)
        assert any("rotated (renamed)" in n for n in b.notes)
        assert got[-1].cursor == str(log.stat().st_size)
    finally:
        task.cancel()
        with __import__("contextlib").suppress(asyncio.CancelledError):
            await task
        await b.close()
        for pid in tails():
            os.kill(pid, signal.SIGCONT)
        shutil.rmtree(d, ignore_errors=True)


async def test_search_log_finds_a_startup_line_and_a_serving_line_on_the_host(
    sshd: SshdInstance, big_log: Path
) -> None:
    """Fails before issue 21: the SSH backend had no ``search_log``."""
    b = make_backend(sshd, log_file=str(big_log))
    size = big_log.stat().st_size  # noqa: ASYNC240
    try:
        await b.start()
        # the gap the follower says for this file (its startup part ends 300 lines after ready)
        t = time.monotonic()
        found = await b.search_log("needle-4242", gap_where(bytes=f"60000-{size - 2_000_000}"), context=2)
        t_serving = time.monotonic() - t
        assert len(found) == 1
        m = found[0]
        with big_log.open("rb") as fh:
            head = fh.read(60000 + 130 * 1_000_000 + 200 * 1000)
        at = head.index(NEEDLE)
        assert m.record.text == NEEDLE.decode().rstrip("\n")
        assert m.record.cursor == str(at + len(NEEDLE))
        assert m.line_no == head[60000:at].count(b"\n") + 1
        assert [r.text for r in m.context_before] == [x.decode() for x in head[:at].split(b"\n")[-3:-1]]
        assert len(m.context_after) == 2
        assert "Decode batch" in m.context_after[0].text
        # a startup line, anywhere in the file (fixed string, case-insensitive)
        t = time.monotonic()
        found = await b.search_log("MAX_TOTAL_NUM_TOKENS=", gap_where(bytes=f"0-{size}"), context=1, limit=5)
        t_start = time.monotonic() - t
        assert [x.record.text[:45] for x in found] == ["[2026-02-09 14:38:30] max_total_num_tokens=25169"[:45]]
        assert int(found[0].record.cursor or 0) == BOOT.index(b"\n", BOOT.index(b"max_total_num_tokens=")) + 1
        # newest first of many: the last matches of the range
        found = await b.search_log(r"#running-req: 3[0-9]?,", gap_where(bytes=f"60000-{size}"), regex=True,
                                   limit=3, newest=True)
        assert len(found) == 3
        assert int(found[-1].record.cursor or 0) > size - 200_000
        _record("uptime_search_serving_s", round(t_serving, 3))
        _record("uptime_search_startup_s", round(t_start, 3))
        if os.getloadavg()[0] < (os.cpu_count() or 1):  # the bound holds on a machine not overloaded
            assert t_serving < 2.0
            assert t_start < 2.0
        # a journal host's gap goes to journalctl --grep (tests/test_journal_uptime.py): cursors that
        # are not the journal's are said, not searched as a byte range
        j = SshBackend("j", sshd.host_config(unit="sglang"), ssh_config=[], options={"agent_path": None})
        with pytest.raises(BackendError, match="journalctl --grep"):
            await j.search_log("x", gap_where(after="a", before="b"))
    finally:
        await b.close()
