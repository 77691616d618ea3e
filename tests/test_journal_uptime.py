"""A unit up for days, read through its journal in constant time (issue 21), over the real sshd.

The journal is real (written by ``systemd-journal-remote`` from export format, read by the real
``journalctl --directory``): an SGLang boot (a real log, tests/fixtures/real/01-…) followed by 1M
serving entries, built once per session (~10 s of CPU) in a tmp dir. The fake ``systemctl`` answers
``InvocationID`` / ``MainPID``; ``journalctl`` is a wrapper of the real one on the directory this
test names (``STATE/journal.dir``).

- the boot is ready with its figures, the 1M entries are one gap record (``Boot.skipped_lines``,
  its ``where`` between two cursors), the tail's last entry is there, the spool stays < 20 MB
  (kvtui before issue 21 copied every entry since the start: ~280 MB, 17–22 s);
- a journal whose head was vacuumed (the invocation's first entry is a serving line, nothing older):
  the boot serves (``start_missing``) with flags from the running process's command line
  (``MainPID``'s ``/proc/PID/cmdline``; kvtui before issue 21 read the invocation from its first
  entry: a boot with no start, no flags);
- ``search_log`` finds a line of the gap on the host (``journalctl --grep`` between the cursors).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshd_support import (
    JOURNAL_REMOTE,
    REAL_JOURNALCTL,
    CutProxy,
    FakeTools,
    JournalWriter,
    SshdInstance,
    requires_journal_remote,
    requires_sshd,
    skip_or_fail,
    start_sshd,
    wait_no_processes,
)

from kvtui.boot.model import BootStatus
from kvtui.bootlog import BootLog
from kvtui.config import LocalHost
from kvtui.engines.events import Fact, LogRecord
from kvtui.engines.source_records import gap_range
from kvtui.hosts.backend import LogStart, aclose_iter
from kvtui.hosts.journal import JournalUptime
from kvtui.hosts.local import LocalBackend
from kvtui.hosts.shellcmd import CONTROL_PREFIX
from kvtui.hosts.ssh import SshBackend
from kvtui.retry import Backoff
from kvtui.spool import Spool

pytestmark = [pytest.mark.sshd, requires_sshd, requires_journal_remote]

FIXTURES = Path(__file__).parent / "fixtures"
BOOT_LOG = FIXTURES / "real" / "01-sglang-llama32-3b-tp1-hicache-ready.log"
UNIT = "sglang.service"
INV = "b" * 32
T0_US = 1_783_576_800_000_000  # 2026-07-09 06:00 UTC
SERVING = 1_000_000
LAST = "Decode batch, #running-req: 1, #token: 4242, token usage: 0.17, cuda graph: True, " \
       "gen throughput (token/s): 99.0, #queue-req: 0 LAST-ENTRY"
GAP_MARK = "GAP-NEEDLE"  # one line in the middle of the gap, for search_log
_COMMON = "_BOOT_ID=0123456789abcdef0123456789abcdef\n"
_SVC = _COMMON + f"_PID=4242\nSYSLOG_IDENTIFIER=python3\n_SYSTEMD_UNIT={UNIT}\n_SYSTEMD_INVOCATION_ID={INV}\n"
_MANAGER = _COMMON + "_PID=1\nSYSLOG_IDENTIFIER=systemd\n_SYSTEMD_UNIT=init.scope\n"


def _build_journal(directory: Path, *, serving: int, head: bool) -> Path:
    """A journal directory: (with ``head``) an older entry, the manager's Starting line and the
    real boot; then ``serving`` serving lines of the same invocation (a block of 1000 distinct
    lines repeated; ``GAP_MARK`` in the middle), the last one ``LAST``. Export format is written
    in pieces straight into ``systemd-journal-remote``'s stdin (no big file)."""
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([str(JOURNAL_REMOTE), "--compress=no", "--seal=no",
                             f"--output={directory / 'remote.journal'}", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    seq = 0
    parts: list[str] = []

    def entry(fields: str, msg: str) -> None:
        nonlocal seq
        seq += 1
        parts.append(f"__REALTIME_TIMESTAMP={T0_US + seq * 1000}\n__MONOTONIC_TIMESTAMP={seq * 1000}\n"
                     f"{fields}MESSAGE={msg}\n\n")

    if head:
        entry(_MANAGER, "Reached target multi-user.target - Multi-User System.")
        entry(_MANAGER + f"UNIT={UNIT}\nMESSAGE_ID=7d4958e842da4a758f6c1cdc7b36dcc5\nINVOCATION_ID={INV}\n",
              f"Starting {UNIT} - SGLang...")
        for line in BOOT_LOG.read_text().splitlines():
            if line.strip():
                entry(_SVC, line)
    block = [f"[2026-07-09 07:00:00] Decode batch, #running-req: 3, #token: {1000 + i}, token usage: 0.04, "
             f"cuda graph: True, gen throughput (token/s): 412.1, #queue-req: 0" for i in range(1000)]
    for i in range(serving - 1):
        entry(_SVC, GAP_MARK + " " + block[0] if i == serving // 2 else block[i % 1000])
        if len(parts) >= 20_000:
            proc.stdin.write("".join(parts).encode())
            parts.clear()
    entry(_SVC, "[2026-07-09 08:00:00] " + LAST)
    proc.stdin.write("".join(parts).encode())
    proc.stdin.close()
    err = proc.stderr.read() if proc.stderr else b""
    if proc.wait(timeout=600) != 0:
        raise RuntimeError(f"systemd-journal-remote failed: {err.decode(errors='replace')}")
    for p in directory.iterdir():
        p.chmod(0o644)
    return directory


@pytest.fixture(scope="session")
def big_journal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The 1M-entry journal, once per session (deleted after)."""
    if not JOURNAL_REMOTE.exists():
        skip_or_fail(f"{JOURNAL_REMOTE} is not installed")
    d = _build_journal(tmp_path_factory.mktemp("journal1m") / "j", serving=SERVING, head=True)
    yield d
    for p in d.iterdir():
        p.unlink()


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> FakeTools:
    t = FakeTools.create(tmp_path_factory.mktemp("gpuhost"))
    jc = t.bin_dir / "journalctl"  # the real journalctl on the directory the test names
    jc.write_text(f'#!/bin/sh\nexec {shlex.quote(REAL_JOURNALCTL)} --directory="$(cat {t.state}/journal.dir)" "$@"\n')
    jc.chmod(0o755)
    return t


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory, tools: FakeTools) -> Iterator[SshdInstance]:
    inst = start_sshd(tmp_path_factory.mktemp("sshd"), user="root", path_prefix=tools.bin_dir,
                      extra_env={"KVTUI_FAKE_STATE": str(tools.state)})
    inst.assert_fake_path()
    yield inst
    inst.stop()


def use_journal(tools: FakeTools, directory: Path, **unit: str | int) -> None:
    (tools.state / "journal.dir").write_text(str(directory))
    tools.set_unit(UNIT, InvocationID=INV, **unit)


def make_backend(sshd: SshdInstance, port: int | None = None) -> SshBackend:
    return SshBackend("gpu-test", sshd.host_config(port=port, unit=UNIT), ssh_config=[], connect_timeout=5,
                      keepalive_interval=2, backoff=Backoff(initial=0.05, cap=0.5, rng=random.Random(7)),
                      options={"agent_path": None})


def make_local(tools: FakeTools, journal: Path) -> LocalBackend:
    """This machine's backend on the same journal (the real journalctl) and fake systemctl."""
    return LocalBackend("local", LocalHost(local=True, unit=UNIT),
                        journalctl=(REAL_JOURNALCTL, f"--directory={journal}"),
                        systemctl=(str(tools.bin_dir / "systemctl"),))


class Reader:
    """What the console's monitor does with the stream: every record into a spool and a BootLog."""

    def __init__(self, spool_dir: Path) -> None:
        self.log = BootLog()
        self.spool = Spool(spool_dir, host="gpu-test")
        self.records: list[LogRecord] = []
        self.t0 = time.monotonic()
        self.first_s: float | None = None
        self.ready_s: float | None = None
        self.last_s: float | None = None
        self.text_bytes = 0  # what the spool got, roughly (a test gives up past SPOOL_BUDGET)

    def feed(self, batch: list[LogRecord]) -> None:
        if self.first_s is None:
            self.first_s = time.monotonic() - self.t0
        for rec in batch:
            self.text_bytes += len(rec.text) + 40
            self.spool.append(rec.text, boot=0, ts=rec.ts, cursor=rec.cursor, ident=rec.ident)
            self.log.feed(rec)
            if self.last_s is None and LAST in rec.text:
                self.last_s = time.monotonic() - self.t0
        self.records.extend(r for r in batch if r.ident == "kvtui")
        boot = self.log.current
        if (self.ready_s is None and boot is not None and boot.status is BootStatus.READY
                and Fact.MAX_TOTAL_NUM_TOKENS in boot.facts):
            self.ready_s = time.monotonic() - self.t0

    def spool_bytes(self) -> int:
        self.spool.flush()
        return sum(p.stat().st_size for p in self.spool.directory.rglob("*") if p.is_file())


SPOOL_BUDGET = 20_000_000


async def read_until(backend: SshBackend | LocalBackend, reader: Reader, done: Any, timeout: float = 60.0) -> None:
    """Follow the current boot until ``done(reader)``, or until the spool outgrows its budget
    (kvtui before issue 21 copied the whole uptime: the test's assertions then say what is
    wrong, instead of a timeout; so they do after ``timeout`` seconds)."""
    gen = backend.follow_log(LogStart.CURRENT_BOOT)
    try:
        async with asyncio.timeout(timeout):
            async for batch in gen:
                reader.feed(batch)
                if done(reader) or reader.text_bytes > SPOOL_BUDGET:
                    return
    except TimeoutError:
        pass  # the caller's assertions say what did not come
    finally:
        await aclose_iter(gen)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


async def test_boot_followed_by_1m_entries_is_ready_with_figures_a_gap_and_the_tail(
    sshd: SshdInstance, tools: FakeTools, big_journal: Path, tmp_path: Path
) -> None:
    """Fails before issue 21: kvtui read all 1M entries from the boot's start (no gap record;
    ~280 MB of spool: the read stops at 20 MB). Also: ``-o json`` without ``--all`` made SGLang's
    9.7 kB ``server_args`` line null (no flags)."""
    use_journal(tools, big_journal, MainPID=0)
    backend = make_backend(sshd)
    await backend.start()
    reader = Reader(tmp_path / "spool")
    cpu0 = _cpu()
    try:
        await read_until(backend, reader, lambda r: r.last_s is not None)
    finally:
        await backend.close()
    cpu = _cpu() - cpu0
    boot = reader.log.current
    assert boot is not None
    assert boot.status is BootStatus.READY
    assert boot.start_missing is None
    gaps = [r for r in reader.records if "lines not read" in r.text]
    assert len(gaps) == 1, gaps
    where = gap_range(gaps[0].text.partition("[")[2].partition("]")[0])
    assert set(where) == {"after", "before"}, where
    assert boot.skipped_lines == 0  # 990k lines: not counted (it would cost seconds), "some"
    assert "some lines not read" in gaps[0].text
    assert reader.last_s is not None
    assert boot.facts[Fact.MAX_TOTAL_NUM_TOKENS] == 25169
    assert boot.flags.get("mem_fraction_static") == 0.2  # SGLang's server_args line (> 4096 bytes: --all)
    size = reader.spool_bytes()
    print(f"\n1M entries over SSH: first batch {reader.first_s:.2f} s, ready with figures {reader.ready_s:.2f} s, "
          f"tail's last entry {reader.last_s:.2f} s, spool {size / 1e6:.1f} MB, test-process CPU {cpu:.1f} s")
    assert size < SPOOL_BUDGET
    assert reader.ready_s is not None
    assert reader.last_s is not None


async def test_gap_of_a_few_thousand_lines_is_counted(sshd: SshdInstance, tools: FakeTools, tmp_path: Path) -> None:
    """A gap small enough to count cheaply carries its count (``Boot.skipped_lines``). Fails
    before issue 21: no gap, every line read."""
    d = _build_journal(tmp_path / "j", serving=14_000, head=True)
    use_journal(tools, d, MainPID=0)
    backend = make_backend(sshd)
    await backend.start()
    reader = Reader(tmp_path / "spool")
    try:
        await read_until(backend, reader, lambda r: r.last_s is not None)
    finally:
        await backend.close()
    boot = reader.log.current
    assert boot is not None
    assert boot.status is BootStatus.READY
    n_boot = sum(1 for line in BOOT_LOG.read_text().splitlines() if line.strip())
    # after the boot's ready line: 300 entries of margin, the gap, the last 10 000 entries
    ready_at = next(i for i, line in enumerate(x for x in BOOT_LOG.read_text().splitlines() if x.strip())
                    if "fired up" in line)
    assert ready_at == n_boot - 1
    assert boot.skipped_lines == 14_000 - 300 - 10_000
    texts = [r.text for r in reader.records]
    assert any(f"{14_000 - 300 - 10_000} lines not read" in t for t in texts), texts


async def test_cuts_while_reading_resume_without_a_repeat_or_a_second_gap(
    sshd: SshdInstance, tools: FakeTools, tmp_path: Path
) -> None:
    """The connection is cut as the first records come (during the startup part, the gap or the
    tail: whichever the chunking gives) and again once the tail is in; entries written meanwhile
    come once. Every record once, in order, one gap. Fails before issue 21: no gap (every entry
    read)."""
    d = _build_journal(tmp_path / "j", serving=14_000, head=True)
    use_journal(tools, d, MainPID=0)
    proxy = await CutProxy(sshd.port).start()
    sshd.trust_port(proxy.port)
    backend = make_backend(sshd, port=proxy.port)
    await backend.start()
    reader = Reader(tmp_path / "spool")
    seen: list[LogRecord] = []
    gen = backend.follow_log(LogStart.CURRENT_BOOT)
    writer = JournalWriter(d).start()
    try:
        async with asyncio.timeout(60):
            batch = await anext(gen)
            proxy.cut()
            reader.feed(batch)
            seen += batch
            while reader.last_s is None:
                batch = await anext(gen)
                reader.feed(batch)
                seen += batch
            proxy.cut()
            for i in range(3):
                writer.write(f"after the cut {i}", _SYSTEMD_UNIT=UNIT, _SYSTEMD_INVOCATION_ID=INV, _PID=4242)
            writer.flush()
            while not any(r.text == "after the cut 2" for r in seen):
                batch = await anext(gen)
                reader.feed(batch)
                seen += batch
    finally:
        await aclose_iter(gen)
        await backend.close()
        await proxy.close()
    assert proxy.cuts >= 2
    # nothing left running on the host: neither the followers of the cut connections nor the last
    assert await wait_no_processes(str(d), names=("journalctl", "awk", "head"), timeout=10) == []
    gaps = [r.text for r in seen if "lines not read" in r.text]
    assert len(gaps) == 1, gaps
    assert gaps[0].startswith("kvtui: 3700 lines not read ["), gaps
    cursors = [r.cursor for r in seen if r.cursor]
    assert len(cursors) == len(set(cursors))  # none twice
    n_boot = sum(1 for line in BOOT_LOG.read_text().splitlines() if line.strip())
    assert len(cursors) == 1 + n_boot + 300 + 10_000 + 3  # the manager's line, the boot, margin, tail, new
    assert [r.text for r in seen[-3:]] == [f"after the cut {i}" for i in range(3)]


def _uptime_run(script: str) -> tuple[list[bytes], list[str]]:
    """Runs a ``journal_uptime`` script until its gap line: the JSON lines before it and its
    control lines (the tail's ``-f`` after it is stopped)."""
    proc = subprocess.Popen(["timeout", "60", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    entries: list[bytes] = []
    controls: list[str] = []
    try:
        for line in proc.stdout:
            if line.startswith(CONTROL_PREFIX):
                controls.append(line[len(CONTROL_PREFIX):].decode().strip())
                if controls[-1].startswith("gap "):
                    break
            else:
                entries.append(line)
    finally:
        proc.kill()
        proc.wait()
    return entries, controls


@pytest.mark.parametrize("cut", ["4 entries after uvicorn's ready line", "the whole part, not its end"])
def test_a_startup_part_resumed_after_a_cut_reads_what_one_read_does(tmp_path: Path, cut: str) -> None:
    """The startup part cut and resumed (``JournalUptime.saw`` then ``command`` after the last
    cursor delivered) reads exactly the rest of what one uncut read gives, and the same gap.
    Before: cut between SGLang's two ready lines (uvicorn's, then its own) the resumed part owed
    the margin less the entries after uvicorn's line (the CI flake: 4 entries short, a gap of
    3,704, not 3,700); cut once the whole part was delivered (its control line not) it read one
    entry more."""
    d = _build_journal(tmp_path / "j", serving=11_000, head=True)
    jc = f"{REAL_JOURNALCTL} --directory={d}"
    first = subprocess.run([*shlex.split(jc), "-u", UNIT, "-o", "json", "-q", "--no-pager"],
                           capture_output=True, check=True, timeout=60).stdout.splitlines()[0]
    start = json.loads(first)["__CURSOR"]
    whole, controls = _uptime_run(JournalUptime().command(UNIT, start, None, journalctl=jc))
    gap = controls[-1]
    assert "lines=700 " in gap, controls  # 11,000 serving lines: the margin 300, the tail 10,000
    texts = [json.loads(e)["MESSAGE"] for e in whole]
    uvicorn = next(i for i, t in enumerate(texts) if "Application startup complete" in t)
    assert any("fired up and ready to roll" in t for t in texts[uvicorn + 5:])
    k = uvicorn + 5 if cut.startswith("4 entries") else len(whole)
    plan = JournalUptime()
    for i in range(0, k, 16):  # delivered in chunks, as the follower sees them
        plan.saw(texts[i:min(k, i + 16)], sum(len(e) for e in whole[i:min(k, i + 16)]))
    last = json.loads(whole[k - 1])["__CURSOR"]
    rest, controls2 = _uptime_run(plan.command(UNIT, start, last, journalctl=jc))
    assert [json.loads(e)["__CURSOR"] for e in rest] == [json.loads(e)["__CURSOR"] for e in whole[k:]]
    assert controls2[-1] == gap


def test_a_startup_part_resumed_with_nothing_after_the_cut_follows_from_there(tmp_path: Path) -> None:
    """A boot whose journal ends inside its startup part (one entry after the ready line), cut once every entry was
    delivered: the resumed script ends the part at the resume's cursor and follows from there
    (the next entry written comes). Before: the part read nothing, said ``cursor=0`` and
    followed after cursor ``0`` (journalctl refused it: the stream ended)."""
    d = _build_journal(tmp_path / "j", serving=0, head=True)
    jc = f"{REAL_JOURNALCTL} --directory={d}"
    lines = subprocess.run([*shlex.split(jc), "-u", UNIT, "-o", "json", "-q", "--no-pager"],
                           capture_output=True, check=True, timeout=60).stdout.splitlines()
    whole = [json.loads(e) for e in lines]
    plan = JournalUptime()
    plan.saw([e["MESSAGE"] for e in whole], sum(len(e) + 1 for e in lines))
    last = whole[-1]["__CURSOR"]
    proc = subprocess.Popen(["timeout", "60", "sh", "-c", plan.command(UNIT, whole[0]["__CURSOR"], last,
                                                                       journalctl=jc)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        control = proc.stdout.readline()
        assert control.startswith(CONTROL_PREFIX + b"startup stop=0 cursor=" + last.encode() + b" "), control
        writer = JournalWriter(d).start()
        writer.write("after the cut", _SYSTEMD_UNIT=UNIT, _SYSTEMD_INVOCATION_ID=INV, _PID=4242)
        writer.flush()
        assert json.loads(proc.stdout.readline())["MESSAGE"] == "after the cut"
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def sglang_process(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process whose command line is an SGLang server's (``python3 -m
    sglang.launch_server …``: a stand-in package that sleeps)."""
    pkg = tmp_path / "py" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text("import time\ntime.sleep(120)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.2-3B", "--tp", "2",
         "--mem-fraction-static", "0.83", "--context-length", "35000", "--port", "30000"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "py")},
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def test_vacuumed_start_serves_with_flags_from_the_running_process(
    sshd: SshdInstance, tools: FakeTools, tmp_path: Path, sglang_process: subprocess.Popen[bytes]
) -> None:
    """The journal was vacuumed inside the invocation: its first entry is a serving line, nothing
    older. Fails before issue 21: read from that first entry, the boot only "begins while it
    serves" (the tracker's guess; nobody said the start was vacuumed) and has no flags (nobody
    read the process's command line)."""
    d = _build_journal(tmp_path / "j", serving=30_000, head=False)
    use_journal(tools, d, MainPID=sglang_process.pid)
    backend = make_backend(sshd)
    await backend.start()
    reader = Reader(tmp_path / "spool")
    try:
        await read_until(backend, reader, lambda r: r.last_s is not None)
    finally:
        await backend.close()
    boot = reader.log.current
    assert boot is not None
    assert boot.status is BootStatus.READY
    assert boot.start_missing is not None
    assert "vacuumed before" in boot.start_missing, boot.start_missing
    assert boot.flags_from == "process"
    assert any("0.83" in str(v) for v in boot.flags.values()), boot.flags
    texts = [r.text for r in reader.records]
    assert any(t.startswith(f"kvtui: the running server's command line (pid {sglang_process.pid}): ")
               and "sglang.launch_server" in t for t in texts), texts
    # the tail only: not the 30 000 entries
    assert reader.log.parser is not None
    assert reader.spool_bytes() < 5_000_000


async def test_search_log_finds_a_line_of_the_gap_on_the_host(
    sshd: SshdInstance, tools: FakeTools, big_journal: Path, tmp_path: Path
) -> None:
    """``search_log`` over the gap between its two cursors (``journalctl --grep`` on the host).
    Fails before issue 21: no gap to search, and the backend has no journal search."""
    use_journal(tools, big_journal, MainPID=0)
    backend = make_backend(sshd)
    await backend.start()
    reader = Reader(tmp_path / "spool")
    try:
        await read_until(backend, reader, lambda r: any("lines not read" in x.text for x in r.records))
        gaps = [x for x in reader.records if "lines not read" in x.text]
        assert gaps, "no gap record"
        gap = gaps[0]
        where = gap.text.partition("[")[2].partition("]")[0]
        t0 = time.monotonic()
        found = await backend.search_log(GAP_MARK.lower(), where, limit=5)
        took = time.monotonic() - t0
        newest = await backend.search_log("#token: 1999,", where, limit=2, newest=True, ignore_case=False)
    finally:
        await backend.close()
    print(f"\nsearch of a 990k-entry gap over SSH: {took:.2f} s")
    assert [m.record.text.split("] ", 1)[0] for m in found] == [GAP_MARK + " [2026-07-09 07:00:00"]
    assert found[0].record.cursor
    assert found[0].record.source == "journal"
    assert len(newest) == 2
    assert all("#token: 1999," in m.record.text for m in newest)
    assert newest[0].record.ts is not None
    assert newest[1].record.ts is not None
    assert newest[0].record.ts < newest[1].record.ts  # oldest first
    # (a pattern that matches nothing scans the whole gap on the host: ~4 s of journalctl here, left out)



async def test_local_boot_followed_by_1m_entries_reads_startup_gap_and_tail(
    tools: FakeTools, big_journal: Path, tmp_path: Path
) -> None:
    """The local backend, same journal. Fails before issue 21: no gap record, and the tail's last
    entry never came (``journalctl -f --cursor`` without ``--no-tail`` printed 10 entries of the
    boot's start, then only new ones)."""
    use_journal(tools, big_journal, MainPID=0)
    backend = make_local(tools, big_journal)
    await backend.start()
    reader = Reader(tmp_path / "spool")
    try:
        await read_until(backend, reader, lambda r: r.last_s is not None, timeout=30)
    finally:
        await backend.close()
    assert [r.text.split(" [", 1)[0] for r in reader.records] == ["kvtui: some lines not read"]
    assert reader.last_s is not None
    boot = reader.log.current
    assert boot is not None
    assert boot.status is BootStatus.READY
    assert boot.facts[Fact.MAX_TOTAL_NUM_TOKENS] == 25169
    assert boot.flags.get("mem_fraction_static") == 0.2  # SGLang's server_args line (> 4096 bytes: --all)
    size = reader.spool_bytes()
    print(f"\n1M entries, local: ready with figures {reader.ready_s:.2f} s, tail's last entry {reader.last_s:.2f} s, "
          f"spool {size / 1e6:.1f} MB")
    assert size < SPOOL_BUDGET


async def test_local_search_log_finds_a_line_of_the_gap(tools: FakeTools, big_journal: Path, tmp_path: Path) -> None:
    """The local backend's ``search_log`` over the gap. Fails before issue 21: no gap, no search."""
    use_journal(tools, big_journal, MainPID=0)
    backend = make_local(tools, big_journal)
    await backend.start()
    reader = Reader(tmp_path / "spool")
    try:
        await read_until(backend, reader, lambda r: any("lines not read" in x.text for x in r.records), timeout=30)
        gaps = [x for x in reader.records if "lines not read" in x.text]
        assert gaps, "no gap record"
        where = gaps[0].text.partition("[")[2].partition("]")[0]
        found = await backend.search_log(GAP_MARK, where, limit=5, newest=True)
    finally:
        await backend.close()
    assert [m.record.text.split("] ", 1)[0] for m in found] == [GAP_MARK + " [2026-07-09 07:00:00"]


async def test_local_vacuumed_start_serves_with_flags_from_the_running_process(
    tools: FakeTools, tmp_path: Path, sglang_process: subprocess.Popen[bytes]
) -> None:
    """The local backend on a journal whose head was vacuumed. Fails before issue 21: nothing
    said the start was vacuumed (the tracker's own "begins while it serves"), no flags from the
    process (and the tail never came, as above)."""
    d = _build_journal(tmp_path / "j", serving=12_000, head=False)
    use_journal(tools, d, MainPID=sglang_process.pid)
    backend = make_local(tools, d)
    await backend.start()
    reader = Reader(tmp_path / "spool")
    try:
        await read_until(backend, reader, lambda r: r.last_s is not None, timeout=30)
    finally:
        await backend.close()
    boot = reader.log.current
    assert boot is not None
    assert boot.status is BootStatus.READY
    assert boot.start_missing is not None
    assert "vacuumed before" in boot.start_missing
    assert boot.flags_from == "process"
    assert any("0.83" in str(v) for v in boot.flags.values()), boot.flags
