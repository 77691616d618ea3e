"""A server up for days (issue 21, benchmark 9): connect to a host whose boot is followed by N
serving lines and time until kvtui has that boot ready *with figures*.

The log: one real SGLang boot (``tests/fixtures/sglang-0.5.14-deepseek-v3-tp8-ready.json``, TP8,
DeepSeek-V3, ``max_total_num_tokens=570180``) followed by N serving lines in SGLang 0.5.x's format
(``[stamp TP0] Decode batch. #running-req: …``, ``Prefill batch. #new-seq: …`` — the boot's own
0.5.14 spelling, see ``/work/shared/reference/engines.md`` — and uvicorn access lines
``[stamp] INFO:     127.0.0.1:PORT - "POST /v1/chat/completions HTTP/1.1" 200 OK``), ~120 bytes a
line, four lines a second of the server's clock: 2M lines are ~250 MB and ~6 days of serving.
It is written once per run in the scratch directory (a pool of varied bodies cycled under
advancing stamps: seconds, not minutes).

Cases (N = 10k and 2M; ``--quick``: 10k and 200k):

* ``local file``: a ``local = true`` host with ``log_file``; baseline ``grep -E PATTERN FILE``.
* ``ssh file``: an SSH host with ``log_file`` on the test sshd (``tests/sshd_support.py``, a real
  OpenSSH ``sshd`` on 127.0.0.1); baseline ``ssh HOST grep -E PATTERN FILE`` (OpenSSH client).
* ``ssh journal``: an SSH host with ``unit``: a real journal file written by
  ``systemd-journal-remote`` (``sshd_support.FakeTools``' ``journalctl`` runs the real
  ``journalctl --directory``; the fake ``systemctl`` answers the unit's ``InvocationID``), the
  boot's entries carry ``_SYSTEMD_INVOCATION_ID``; 1M entries (``--quick``: 100k); baseline
  ``ssh HOST 'journalctl -u UNIT | grep -E PATTERN'``.

PATTERN is ``fired up|max_total_num_tokens|Load weight`` (the ready line, the figures, the
weights). kvtui's figure is a whole ``python -m kvtui --hosts H wait HOST --json --timeout T
--no-probe`` process (start-up included; the worktree's code via ``PYTHONPATH``), from its exec
to its exit; it counts only when its JSON boot says ``status: ready`` with the boot's
``max_total_num_tokens`` (570180) — a run that exits without them or times out reports "not
ready" (and is not repeated). Its peak RSS is the process's ``ru_maxrss`` (``os.wait4``); the
spool written is the size of ``$XDG_STATE_HOME/kvtui/spool`` (a fresh state dir per run) at exit.
"kvtui's start-up" is the same wait on a host of the same kind whose log holds the boot alone
(no serving lines): what a wait costs that does not grow with N.

Budget (issue 21): time <= 1.5 x (baseline + kvtui's start-up) for each case; peak RSS < 150 MB;
spool written < 20 MB. Each figure is the median of ``--runs`` (3; ``--quick``: 1).

Then the console on each big case: a ``HostMonitor`` (what ``kvtui connect`` runs) in a fresh
process, timed until the boot is ready with figures and until it has caught up (the log's last
line in its window), with its spool and peak RSS; then the search a `/` makes when the spool has no
match: the host's ``search_log`` over the gap for the Decode line in the gap's middle (budget
< 2 s over SSH). The boot's own start lines are read whole: `/` finds them in the spool.

    .venv/bin/python bench/bench_uptime.py [--quick] [--runs 3] [--lines 2000000] [--timeout 60]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from common import ROOT, Row, loadavg, median, standalone_main

sys.path.insert(0, str(ROOT / "tests"))

BENCH = "9 uptime"
PATTERN = "fired up|max_total_num_tokens|Load weight"
BOOT_FIXTURE = ROOT / "tests" / "fixtures" / "sglang-0.5.14-deepseek-v3-tp8-ready.json"
BOOT_TOKENS = 570180  # the fixture's max_total_num_tokens
TIME_FACTOR = 1.5
RSS_BUDGET_MB = 150.0
SPOOL_BUDGET_MB = 20.0
SEARCH_BUDGET_S = 2.0
UNIT = "sglang-uptime.service"
BOOT_ONLY_UNIT = "sglang-bootonly.service"
STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"  # systemd's "unit is starting" MESSAGE_ID
MB = 1_000_000


# ---------------------------------------------------------------------------------------------
# The data: one real boot, then N serving lines
# ---------------------------------------------------------------------------------------------


def boot_messages() -> list[tuple[int, str]]:
    """(realtime µs, MESSAGE) of the fixture's ready boot, in order."""
    out: list[tuple[int, str]] = []
    for line in BOOT_FIXTURE.read_text().splitlines():
        rec = json.loads(line)
        out.append((int(rec["__REALTIME_TIMESTAMP"]), str(rec["MESSAGE"])))
    return out


def _bodies(rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    """Pools of decode / prefill / access-line bodies (varied numbers), cycled by the writer."""
    decode, prefill, access = [], [], []
    for _ in range(997):
        running = rng.randint(1, 128)
        usage = min(0.99, running / 160 + rng.random() / 20)
        decode.append(f"Decode batch. #running-req: {running}, #token: {int(usage * BOOT_TOKENS)}, token usage: "
                      f"{usage:.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(900, 4000):.2f}, "
                      f"#queue-req: {rng.randint(0, 9)}")
    for _ in range(991):
        running = rng.randint(1, 128)
        usage = min(0.99, running / 160 + rng.random() / 20)
        prefill.append(f"Prefill batch. #new-seq: {rng.randint(1, 8)}, #new-token: {rng.randint(100, 8192)}, "
                       f"#cached-token: {rng.randint(0, 4096)}, token usage: {usage:.2f}, #running-req: {running}, "
                       f"#queue-req: {rng.randint(0, 9)}")
    for _ in range(983):
        access.append(f'INFO:     127.0.0.1:{rng.randint(32768, 60999)} - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    return decode, prefill, access


def serving(n: int, after_us: int, seed: int = 21) -> Iterator[tuple[int, list[str]]]:
    """Blocks of N serving lines after the boot (``after_us``: the boot's last entry): (realtime µs
    of the block's first second, its lines); four lines a second (decode, access, prefill,
    access), SGLang's TP0 tag on the scheduler's lines."""
    decode, prefill, access = _bodies(random.Random(seed))
    # the fixture's stamps are its realtime in UTC: the serving lines' stamps go on from there
    t = datetime(1970, 1, 1) + timedelta(seconds=after_us // 1_000_000 + 1)
    sec_us = (after_us // 1_000_000 + 1) * 1_000_000
    done = 0
    k = 0
    one = timedelta(seconds=1)
    while done < n:
        block: list[str] = []
        first_us = sec_us
        while len(block) < 4096 and done + len(block) < n:
            s = t.strftime("%Y-%m-%d %H:%M:%S")
            block.append(f"[{s} TP0] {decode[k % 997]}")
            block.append(f"[{s}] {access[k % 983]}")
            block.append(f"[{s} TP0] {prefill[k % 991]}")
            block.append(f"[{s}] {access[(k + 491) % 983]}")
            k += 1
            t += one
            sec_us += 1_000_000
        yield first_us, block[: n - done]
        done += min(len(block), n - done)


def write_file(path: Path, n: int, boot: list[tuple[int, str]]) -> None:
    """The raw log: the boot's lines, then ``n`` serving lines."""
    with path.open("w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(m for _, m in boot) + "\n")
        for _us, block in serving(n, boot[-1][0]):
            f.write("\n".join(block) + "\n")


def _export_entry(us: int, msg: str, fields: str) -> str:
    return f"__REALTIME_TIMESTAMP={us}\n__MONOTONIC_TIMESTAMP={us - 1_700_000_000_000_000}\n{fields}MESSAGE={msg}\n\n"


def write_journal(directory: Path, unit: str, n: int, boot: list[tuple[int, str]], journal_remote: Path) -> str:
    """Append ``unit``'s boot (systemd's ``Starting`` line with its ``INVOCATION_ID``, then the
    boot's entries with ``_SYSTEMD_INVOCATION_ID``) and ``n`` serving entries to the real journal
    in ``directory`` (one ``systemd-journal-remote`` run fed export format); returns the
    invocation id."""
    inv = uuid.uuid4().hex
    common = ("_BOOT_ID=0123456789abcdef0123456789abcdef\n_HOSTNAME=h200-x8\nPRIORITY=6\n")
    eng = f"{common}SYSLOG_IDENTIFIER=python3\n_PID=880\n_SYSTEMD_UNIT={unit}\n_SYSTEMD_INVOCATION_ID={inv}\n"
    mgr = f"{common}SYSLOG_IDENTIFIER=systemd\n_PID=1\nUNIT={unit}\nINVOCATION_ID={inv}\nMESSAGE_ID={STARTING}\n"
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([str(journal_remote), f"--output={directory / 'remote.journal'}", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        parts = [_export_entry(boot[0][0] - 1000, f"Starting {unit} - SGLang server...", mgr)]
        parts += [_export_entry(us, m, eng) for us, m in boot]
        proc.stdin.write("".join(parts).encode())
        for first_us, block in serving(n, boot[-1][0]):
            proc.stdin.write("".join(_export_entry(first_us + (i // 4) * 1_000_000 + (i % 4) * 1000, m, eng)
                                     for i, m in enumerate(block)).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    err = proc.stderr.read().decode(errors="replace") if proc.stderr is not None else ""
    if proc.wait() != 0:
        raise RuntimeError(f"systemd-journal-remote failed: {err[-500:]}")
    return inv


# ---------------------------------------------------------------------------------------------
# Measuring: kvtui wait (a whole process) and the baselines
# ---------------------------------------------------------------------------------------------


@dataclass
class WaitRun:
    seconds: float
    code: int
    status: str | None  # the JSON boot's status (None: no boot printed)
    tokens: int | None  # its max_total_num_tokens
    rss_mb: float
    spool_mb: float
    state_mb: float
    stderr_tail: str

    @property
    def ready(self) -> bool:
        """Ready with figures: the boot is ready and its KV pool size is the fixture's."""
        return self.code == 0 and self.status == "ready" and self.tokens == BOOT_TOKENS

    def verdict(self, timeout: float) -> str:
        if self.ready:
            return "ready with figures"
        if self.code == 0 and self.status == "ready":
            return f"ready without figures (max_total_num_tokens {self.tokens})"
        if self.code == 5:
            return f"not ready in {timeout:g} s (boot {self.status or 'not seen'})"
        last = self.stderr_tail.strip().splitlines()[-1:] or [""]
        return f"exit {self.code}, boot {self.status or 'not seen'}: {last[0][:120]}"


def _dir_bytes(path: Path) -> int:
    total = 0
    if path.exists():
        for p in path.rglob("*"):
            with contextlib.suppress(OSError):
                if p.is_file():
                    total += p.stat().st_size
    return total


def kvtui_env(work: Path, state: Path) -> dict[str, str]:
    """kvtui's config and state under ``work`` (never the user's; no agent, no ~/.ssh/config);
    bytecode cached as an installed copy keeps it (see ``ttyapp.isolated_env``)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SSH_AUTH_SOCK", "KVTUI_HOSTS", "PYTHONDONTWRITEBYTECODE")}
    env.update(XDG_STATE_HOME=str(state), XDG_CONFIG_HOME=str(work / "config"), HOME=str(work),
               PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(work / "pycache"))
    return env


def kvtui_wait(hosts: Path, name: str, work: Path, timeout: float) -> WaitRun:
    """One ``kvtui wait NAME --json`` process in a fresh state dir."""
    state = work / f"state-{name}-{time.monotonic_ns()}"
    out_p, err_p = work / "wait.out", work / "wait.err"
    argv = [sys.executable, "-m", "kvtui", "--hosts", str(hosts), "wait", name, "--json",
            "--timeout", f"{timeout:g}", "--no-probe"]
    with out_p.open("wb") as out, err_p.open("wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=kvtui_env(work, state), cwd=work)
        watchdog = threading.Timer(timeout + 60, proc.kill)  # the wait's own hard deadline failed
        watchdog.start()
        try:
            _pid, wstatus, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        dt = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(wstatus)
    status: str | None = None
    tokens: int | None = None
    with contextlib.suppress(ValueError, OSError, AttributeError, TypeError):
        doc = json.loads(out_p.read_text())
        status = doc.get("status")
        tokens = (doc.get("metrics") or {}).get("max_total_num_tokens")
    run = WaitRun(dt, proc.returncode, status, tokens, usage.ru_maxrss * 1024 / MB,
                  _dir_bytes(state / "kvtui" / "spool") / MB, _dir_bytes(state / "kvtui") / MB,
                  err_p.read_text(errors="replace")[-2000:])
    shutil.rmtree(state, ignore_errors=True)
    return run


def timed_output(argv: list[str]) -> float:
    """Seconds for ``argv`` to finish, its output read from a pipe (GNU grep stops at the first
    match when its output is /dev/null)."""
    t0 = time.perf_counter()
    res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=600, check=False)
    dt = time.perf_counter() - t0
    if res.returncode not in (0, 1) or not res.stdout:
        raise RuntimeError(f"baseline {shlex.join(argv)[:200]} failed ({res.returncode}): "
                           f"{res.stderr.decode(errors='replace')[-300:]}")
    return dt


# ---------------------------------------------------------------------------------------------
# The console: a HostMonitor (what `kvtui connect` runs) until caught up, then a search of the gap
# ---------------------------------------------------------------------------------------------


def middle_needle(n: int, boot: list[tuple[int, str]]) -> str:
    """The text that opens the Decode line in the middle of ``n`` serving lines (one a second:
    unique), as the console's `/` would be given it."""
    t = datetime(1970, 1, 1) + timedelta(seconds=boot[-1][0] // 1_000_000 + 1 + (n // 2) // 4)
    return f"[{t.strftime('%Y-%m-%d %H:%M:%S')} TP0] Decode batch"


def last_line(n: int, boot: list[tuple[int, str]]) -> str:
    last = ""
    for _us, block in serving(n, boot[-1][0]):
        last = block[-1]
    return last


@dataclass
class ConsoleRun:
    ready_s: float | None  # ready with figures
    caught_up_s: float | None  # the log's last line in the view
    spool_mb: float
    rss_mb: float
    gap_lines: int
    gaps: int  # gap records (a journal gap over 50k lines is not counted: lines=None)
    search_s: float | None  # the gap searched on the host for a line in its middle
    search_note: str


async def _console_once(name: str, hosts: Path, state: Path, last: str, needle: str, timeout: float) -> ConsoleRun:
    """One HostMonitor over the host, as the console runs it: until ready with figures, until
    caught up (the log's last line in its window), then the host's search of the gap for a line
    in its middle (``search_log``, what `/` calls once the spool has no match)."""
    import resource

    from kvtui.config import load_config
    from kvtui.engines.events import Fact
    from kvtui.hosts.factory import make_backend
    from kvtui.monitor import HostMonitor, MonitorOptions

    host = load_config(str(hosts)).host(name)
    backend = make_backend(name, host)
    mon = HostMonitor(name, backend, options=MonitorOptions(state_dir=state, gpu_interval=5.0, pids_interval=60.0))
    t0 = time.perf_counter()
    task = asyncio.create_task(mon.run(lambda _batch: None))
    ready = caught = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while loop.time() < deadline and (ready is None or caught is None):
            b = mon.boots[-1] if mon.boots else None
            if ready is None and b is not None and b.status.value == "ready" and Fact.MAX_TOTAL_NUM_TOKENS in b.facts:
                ready = time.perf_counter() - t0
            if caught is None:
                recent = mon.recent
                if recent and recent[-1].text.endswith(last[-60:]):
                    caught = time.perf_counter() - t0
            await asyncio.sleep(0.005)
        b = mon.boots[-1] if mon.boots else None
        gap_lines = b.skipped_lines if b is not None else 0
        gaps = len(b.skipped_where) if b is not None else 0
        where = b.skipped_where[0] if b is not None and b.skipped_where else None
        search_s: float | None = None
        note = "no gap to search"
        search = getattr(backend, "search_log", None)
        if where is not None and search is not None:
            t1 = time.perf_counter()
            hits = await asyncio.wait_for(search(needle, where, ignore_case=False, context=2, limit=10), 60)
            search_s = time.perf_counter() - t1
            found = any(needle in h.record.text for h in hits)
            note = f"{len(hits)} hit(s), the middle line {'found' if found else 'NOT found'}"
            if not found:
                search_s = None
        mon.spool.flush()
        spool = sum(p.stat().st_size for p in mon.spool.files() if p.exists()) / MB
    finally:
        await mon.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB
    return ConsoleRun(ready, caught, spool, rss, gap_lines, gaps, search_s, note)


def _console_worker(name: str, hosts: str, state: str, last: str, needle: str, timeout: float,
                    out: Any) -> None:  # pragma: no cover - runs in a child process
    run = asyncio.run(_console_once(name, Path(hosts), Path(state), last, needle, timeout))
    out.put(run)


def console_run(name: str, hosts: Path, work: Path, last: str, needle: str, timeout: float) -> ConsoleRun:
    """``_console_once`` in a fresh process (its own peak RSS), kvtui's config and state under ``work``."""
    import multiprocessing as mp

    state = work / f"console-{name}-{time.monotonic_ns()}"
    env = kvtui_env(work, state)
    old = {k: os.environ.get(k) for k in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "HOME")}
    os.environ.update({k: env[k] for k in old})
    try:
        ctx = mp.get_context("spawn")
        q: Any = ctx.Queue()
        proc = ctx.Process(target=_console_worker, args=(name, str(hosts), str(state), last, needle, timeout, q))
        proc.start()
        got: ConsoleRun = q.get(timeout=timeout + 120)
        proc.join(30)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(state, ignore_errors=True)
    return got


# ---------------------------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    kind: str  # "local file", "ssh file", "ssh journal"
    lines: int
    host: str  # the hosts.toml name with the N lines
    boot_only: str  # the same kind, the boot alone: kvtui's start-up
    baseline: list[str]
    baseline_name: str


def _n(v: int) -> str:
    return f"{v // 1_000_000}M" if v >= 1_000_000 and v % 1_000_000 == 0 else f"{v // 1000}k"


def _reason() -> str | None:
    if not Path("/usr/sbin/sshd").exists():
        return "/usr/sbin/sshd is not installed (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "the test sshd needs root"
    return None


def _toml_ssh(inst: Any, **keys: str) -> str:
    body = (f'ssh = "{inst.target}"\nport = {inst.port}\nidentity_file = "{inst.client_key}"\n'
            f'known_hosts = "{inst.known_hosts}"\nprobe = false\n')
    return body + "".join(f'{k} = "{v}"\n' for k, v in keys.items())


def run(quick: bool, workdir: Path, *, lines: int | None = None, journal: int | None = None,
        runs: int | None = None, timeout: float | None = None) -> list[Row]:
    big = lines or (200_000 if quick else 2_000_000)
    jn = journal or (100_000 if quick else 1_000_000)
    runs = runs or (1 if quick else 3)
    timeout = timeout or (30.0 if quick else 60.0)
    sizes = (10_000, big)
    reason = _reason()
    work = workdir / "uptime"
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)
    boot = boot_messages()
    t0 = time.perf_counter()
    files: dict[int, Path] = {}
    for n in (0, *sizes):
        files[n] = work / f"uptime-{n}.log"
        write_file(files[n], n, boot)
    gen_note = f"{_n(big)} lines {files[big].stat().st_size / MB:.0f} MB written in {time.perf_counter() - t0:.1f} s"
    print(f"bench_uptime: {gen_note}", file=sys.stderr, flush=True)
    hosts = work / "hosts.toml"
    toml = "".join(f'[hosts.local{n}]\nlocal = true\nlog_file = "{files[n]}"\nprobe = false\n\n' for n in files)
    cases = [Case("local file", n, f"local{n}", "local0", ["grep", "-E", PATTERN, str(files[n])], "grep -E")
             for n in sizes]
    inst: Any = None
    journal_dir: Path | None = None
    skipped: list[Row] = []
    try:
        if reason is None:
            from sshd_support import JOURNAL_REMOTE, FakeTools, start_sshd

            tools = FakeTools.create(work / "host")
            inst = start_sshd(work / "sshd", user="root", path_prefix=tools.bin_dir,
                              extra_env={"KVTUI_FAKE_STATE": str(tools.state)})
            toml += "".join(f"[hosts.ssh{n}]\n{_toml_ssh(inst, log_file=str(files[n]))}\n" for n in files)
            cases += [Case("ssh file", n, f"ssh{n}", "ssh0", inst.ssh_argv(f"grep -E {shlex.quote(PATTERN)} "
                                                                            f"{shlex.quote(str(files[n]))}"),
                           "ssh grep -E") for n in sizes]
            if JOURNAL_REMOTE.exists():
                t1 = time.perf_counter()
                journal_dir = tools.journal_dir
                for unit, n in ((BOOT_ONLY_UNIT, 0), (UNIT, jn)):
                    inv = write_journal(journal_dir, unit, n, boot, JOURNAL_REMOTE)
                    tools.set_unit(unit, InvocationID=inv, ActiveState="active", SubState="running")
                jnote = (f"journal of {_n(jn)} entries {_dir_bytes(journal_dir) / MB:.0f} MB written in "
                         f"{time.perf_counter() - t1:.1f} s")
                gen_note += "; " + jnote
                print(f"bench_uptime: {jnote}", file=sys.stderr, flush=True)
                toml += f"[hosts.journal]\n{_toml_ssh(inst, unit=UNIT)}\n"
                toml += f"[hosts.journal0]\n{_toml_ssh(inst, unit=BOOT_ONLY_UNIT)}\n"
                cases.append(Case("ssh journal", jn, "journal", "journal0",
                                  inst.ssh_argv(f"journalctl -u {shlex.quote(UNIT)} | grep -E {shlex.quote(PATTERN)}"),
                                  "ssh journalctl|grep"))
            else:
                skipped.append(Row(BENCH, f"ssh journal {_n(jn)}", None, "s",
                                   note=f"skipped: {JOURNAL_REMOTE} is not installed (systemd-journal-remote)"))
        else:
            skipped += [Row(BENCH, f"ssh {k} {_n(n)}", None, "s", note=f"skipped: {reason}")
                        for k, n in (("file", sizes[0]), ("file", big), ("journal", jn))]
        hosts.write_text(toml)
        return _measure(cases, hosts, work, runs, timeout, inst, files[big], gen_note) + skipped
    finally:
        if inst is not None:
            inst.stop()
        for p in files.values():
            p.unlink(missing_ok=True)
        if journal_dir is not None:
            shutil.rmtree(journal_dir, ignore_errors=True)


def _measure(cases: list[Case], hosts: Path, work: Path, runs: int, timeout: float, inst: Any, big_file: Path,
             gen_note: str) -> list[Row]:
    rows: list[Row] = []
    startup: dict[str, float] = {}
    worst_rss: list[tuple[float, str]] = []
    worst_spool: list[tuple[float, str]] = []
    for case in cases:
        label = f"{case.kind} {_n(case.lines)}"
        print(f"bench_uptime: {label} …", file=sys.stderr, flush=True)
        load0 = loadavg()
        if case.boot_only not in startup:
            # one untimed start first compiles and caches the bytecode this kind of host needs
            # (asyncssh's for SSH hosts), as an installed copy has it
            kvtui_wait(hosts, case.boot_only, work, timeout)
            boots = [kvtui_wait(hosts, case.boot_only, work, timeout) for _ in range(runs)]
            bad = [b for b in boots if not b.ready]
            if bad:
                rows.append(Row(BENCH, f"{case.kind}: start-up", None, "s", met=False,
                                note=f"the boot alone: {bad[0].verdict(timeout)}"))
                continue
            startup[case.boot_only] = median([b.seconds for b in boots])
        base_s: list[float] = []
        got: list[WaitRun] = []
        for _ in range(runs):
            base_s.append(timed_output(case.baseline))
            r = kvtui_wait(hosts, case.host, work, timeout)
            got.append(r)
            if not r.ready:
                break  # not repeated: a timeout would cost the whole --timeout again
        base = median(base_s)
        up = startup[case.boot_only]
        limit = TIME_FACTOR * (base + up)
        rss = max(r.rss_mb for r in got)
        spool = max(r.spool_mb for r in got)
        state = max(r.state_mb for r in got)
        worst_rss.append((rss, label))
        worst_spool.append((spool, label))
        ready = all(r.ready for r in got)
        secs = median([r.seconds for r in got]) if ready else None
        head = (f"median of {len(got)}" if ready
                else f"{got[-1].verdict(timeout)} after {got[-1].seconds:.1f} s (run {len(got)} of {runs})")
        note = (f"{head}; kvtui start-up {up:.2f} s (the boot alone); budget 1.5 x ({base:.2f} + {up:.2f}); "
                f"peak RSS {rss:.0f} MB; spool {spool:.1f} MB (state dir {state:.1f} MB); load {load0}")
        rows.append(Row(BENCH, label, secs, "s", base, case.baseline_name, f"<= {limit:.2f} s",
                        secs is not None and secs <= limit, note))
    if worst_rss:
        rss, where = max(worst_rss)
        rows.append(Row(BENCH, "peak RSS (worst case)", rss, "MB", budget=f"< {RSS_BUDGET_MB:g} MB",
                        met=rss < RSS_BUDGET_MB,
                        note=f"{where}; " + ", ".join(f"{w} {v:.0f}" for v, w in worst_rss)))
        spool, where = max(worst_spool)
        rows.append(Row(BENCH, "spool written (worst case)", spool, "MB", budget=f"< {SPOOL_BUDGET_MB:g} MB",
                        met=spool < SPOOL_BUDGET_MB,
                        note=f"{where}; " + ", ".join(f"{w} {v:.1f}" for v, w in worst_spool) + f"; {gen_note}"))
    rows += _console_rows(cases, hosts, work, runs, timeout)
    return rows


def _gap_words(run: ConsoleRun) -> str:
    what = f"{run.gap_lines:,} lines not read" if run.gap_lines else "lines not read (not counted)"
    return f"{what} ({run.gaps} gap{'s' if run.gaps != 1 else ''})"


def _console_rows(cases: list[Case], hosts: Path, work: Path, runs: int, timeout: float) -> list[Row]:
    """The console (a HostMonitor) on each big case: ready with figures, caught up, spool, RSS,
    and the search of the gap over the host for a line in its middle (budget < 2 s over SSH)."""
    rows: list[Row] = []
    boot = boot_messages()
    big = [c for c in cases if c.lines > 10_000]
    for case in big:
        label = f"console, {case.kind} {_n(case.lines)}"
        print(f"bench_uptime: {label} …", file=sys.stderr, flush=True)
        last, needle = last_line(case.lines, boot), middle_needle(case.lines, boot)
        got = [console_run(case.host, hosts, work, last, needle, timeout) for _ in range(runs)]
        ok = [g for g in got if g.ready_s is not None and g.caught_up_s is not None]
        load0 = loadavg()
        if not ok:
            g = got[-1]
            rows.append(Row(BENCH, label + ": caught up", None, "s", met=False,
                            note=f"ready {g.ready_s}, caught up {g.caught_up_s}; spool {g.spool_mb:.1f} MB"))
            continue
        spool = max(g.spool_mb for g in ok)
        rss = max(g.rss_mb for g in ok)
        rows.append(Row(BENCH, label + ": caught up", median([g.caught_up_s or 0.0 for g in ok]), "s",
                        budget=f"spool < {SPOOL_BUDGET_MB:g} MB, RSS < {RSS_BUDGET_MB:g} MB",
                        met=spool < SPOOL_BUDGET_MB and rss < RSS_BUDGET_MB,
                        note=(f"median of {len(ok)}; ready with figures at "
                              f"{median([g.ready_s or 0.0 for g in ok]):.2f} s; "
                              f"{_gap_words(ok[0])}; spool {spool:.1f} MB; "
                              f"peak RSS {rss:.0f} MB; load {load0}")))
        found = [g.search_s for g in ok if g.search_s is not None]
        secs = median(found) if found else None
        budget = SEARCH_BUDGET_S if case.kind.startswith("ssh") else None
        rows.append(Row(BENCH, label + ": search the gap", secs, "s",
                        budget=f"< {SEARCH_BUDGET_S:g} s" if budget else "-",
                        met=(secs is not None and secs < SEARCH_BUDGET_S) if budget else None,
                        note=f"a line in the gap's middle, on the host; {ok[-1].search_note}"))
    return rows


def main() -> int:
    return standalone_main("uptime", run, __doc__, lines=(int, None), journal=(int, None), runs=(int, None),
                           timeout=(float, None))


if __name__ == "__main__":
    raise SystemExit(main())
