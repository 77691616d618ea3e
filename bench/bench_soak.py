"""Soak over the real sshd (issue 12, benchmark 8): connection cuts during one long boot, then
reconnect-and-quit cycles.

* cuts: a ``HostMonitor`` on an ``SshBackend`` follows a ``log_file`` host's live boot log
  (``tail -F`` over a real OpenSSH sshd on 127.0.0.1) through ``tests/sshd_support.CutProxy``; a
  writer appends numbered serving lines (the boot head first) the whole time; the proxy cuts the
  connection ``--cuts`` times, each once the backend is back. Then every number written must be in
  the spool exactly once (0 lost, 0 duplicated), exactly one remote ``tail`` may run while it
  follows, and none once the monitor is closed.
* cycles: ``--cycles`` times a new backend and monitor connect, read the log's boot, and quit;
  after each, no remote follower (``tail``) nor guard may be left; this process's RSS is sampled
  (flat: the last tenth against the first tenth of the cycles).

    .venv/bin/python bench/bench_soak.py [--cuts 100] [--cycles 50]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import shutil
import sys
import time
from pathlib import Path

from common import ROOT, Row, loadavg, standalone_main

sys.path.insert(0, str(ROOT / "tests"))

HEAD = ROOT / "tests" / "fixtures" / "sglang" / "sglang-0.5.12-qwen3-32b-tp4-eagle3-ready.log"
_NUM = re.compile(rb"soak#(\d+)")


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _sshd_reason() -> str | None:
    if not Path("/usr/sbin/sshd").exists():
        return "/usr/sbin/sshd is not installed (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "the test sshd needs root"
    return None


def _boot_head() -> bytes:
    """A boot's start (an SGLang server that reaches serving): the head of a fixture up to its
    first serving line."""
    data = HEAD.read_bytes()
    i = data.find(b"Decode batch")
    return data[: data.rfind(b"\n", 0, i) + 1] if i > 0 else data


def _spool_numbers(files: list[Path]) -> list[int]:
    out: list[int] = []
    for p in files:
        with p.open("rb") as f:
            for raw in f:
                m = _NUM.search(raw)
                if m is not None:
                    out.append(int(m.group(1)))
    return out


async def _wait(cond: object, timeout: float, what: str) -> None:
    assert callable(cond)
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.01)


def _backend(inst: object, port: int, log: Path) -> object:
    from sshd_support import SshdInstance

    from kvtui.hosts.ssh import SshBackend
    from kvtui.retry import Backoff

    assert isinstance(inst, SshdInstance)
    return SshBackend("soak", inst.host_config(port=port, log_file=str(log)), ssh_config=[], connect_timeout=5,
                      keepalive_interval=2, backoff=Backoff(initial=0.05, cap=0.5, rng=random.Random(7)),
                      options={"agent_path": None})


async def _cuts(inst: object, work: Path, cuts: int) -> dict[str, float]:
    from sshd_support import CutProxy, SshdInstance, processes_matching, wait_no_processes

    from kvtui.hosts.backend import ConnState, LogStart
    from kvtui.hosts.ssh import SshBackend
    from kvtui.monitor import HostMonitor, MonitorOptions

    assert isinstance(inst, SshdInstance)
    proxy = await CutProxy(inst.port).start()
    inst.trust_port(proxy.port)
    log = work / "soak-boot.log"
    log.write_bytes(_boot_head())
    b = _backend(inst, proxy.port, log)
    assert isinstance(b, SshBackend)
    mon = HostMonitor("soak", b, host=b.host,
                      options=MonitorOptions(state_dir=work / "state", start=LogStart.CURRENT_BOOT))
    task = asyncio.create_task(mon.run(lambda updates: None))
    written = 0
    stop = asyncio.Event()

    async def writer() -> None:  # ~2,000 serving lines a second, in bursts of 20
        nonlocal written
        with log.open("ab") as f:
            while not stop.is_set():
                burst = []
                for _ in range(20):
                    j = written
                    burst.append(f"[2026-03-04 10:{j // 60000 % 60:02d}:{j // 1000 % 60:02d} TP{j % 2}] Decode batch. "
                                 f"#running-req: {j % 50}, #token: {j}, token usage: 0.{j % 100:02d}, "
                                 f"gen throughput (token/s): 1.00, #queue-req: 0, soak#{j}\n".encode())
                    written += 1
                f.write(b"".join(burst))
                f.flush()
                await asyncio.sleep(0.01)

    rss0 = _rss_mb()
    wtask = asyncio.create_task(writer())
    t0 = time.monotonic()
    followers_max = 0
    try:
        for k in range(cuts):
            await _wait(lambda: b.status().state is ConnState.CONNECTED and b.reconnects == k,  # noqa: B023
                        60, f"reconnect {k}")
            await asyncio.sleep(random.uniform(0.05, 0.25))
            proxy.cut()
            if k % 10 == 0:
                followers_max = max(followers_max, len(processes_matching(str(log), ("tail",),
                                                                          exclude=("kvtui-guard",))))
        await _wait(lambda: b.status().state is ConnState.CONNECTED and b.reconnects == cuts, 60, "last reconnect")
        await asyncio.sleep(0.5)
        stop.set()
        await wtask
        size = str(log.stat().st_size)
        await _wait(lambda: mon.spool.last_cursor == size, 120, "the spool catching up")
        dt = time.monotonic() - t0
        await asyncio.sleep(0.3)
        # one follower now (those of the cut connections are gone)
        with contextlib.suppress(RuntimeError):
            await _wait(lambda: len(processes_matching(str(log), ("tail",), exclude=("kvtui-guard",))) == 1, 10,
                        "one follower")
        following = len(processes_matching(str(log), ("tail",), exclude=("kvtui-guard",)))
        rss1 = _rss_mb()
    finally:
        stop.set()
        await mon.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        await proxy.close()
    nums = _spool_numbers(mon.spool.files())
    seen = set(nums)
    left = await wait_no_processes(str(log), ("tail", "kvtui-guard"), timeout=10)
    return {"cuts": cuts, "reconnects": b.reconnects, "written": written,
            "lost": sum(1 for j in range(written) if j not in seen), "duplicated": len(nums) - len(seen),
            "following": following, "followers_max": followers_max, "left": len(left), "seconds": dt,
            "rss0": rss0, "rss1": rss1}


async def _cycles(inst: object, work: Path, cycles: int) -> dict[str, float]:
    from sshd_support import SshdInstance, wait_no_processes

    from kvtui.hosts.backend import LogStart
    from kvtui.hosts.ssh import SshBackend
    from kvtui.monitor import HostMonitor, MonitorOptions

    assert isinstance(inst, SshdInstance)
    log = work / "cycles-boot.log"
    head = _boot_head()
    log.write_bytes(head)
    want = sum(1 for ln in head.split(b"\n") if ln.strip())
    rss: list[float] = []
    left_total = 0
    t0 = time.monotonic()
    for k in range(cycles):
        b = _backend(inst, inst.port, log)
        assert isinstance(b, SshBackend)
        mon = HostMonitor("cycles", b, host=b.host,
                          options=MonitorOptions(state_dir=work / "state-cycles", start=LogStart.CURRENT_BOOT))
        task = asyncio.create_task(mon.run(lambda updates: None))
        try:
            await _wait(lambda: mon.lines_seen >= want, 30, f"cycle {k}: the boot read")  # noqa: B023
        finally:
            await mon.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
        left_total += len(await wait_no_processes(str(log), ("tail", "kvtui-guard"), timeout=10))
        rss.append(_rss_mb())
    tenth = max(1, cycles // 10)
    first, last = sum(rss[:tenth]) / tenth, sum(rss[-tenth:]) / tenth
    return {"cycles": cycles, "left": left_total, "rss_first": first, "rss_last": last,
            "seconds": time.monotonic() - t0}


def run(quick: bool, workdir: Path, *, cuts: int | None = None, cycles: int | None = None) -> list[Row]:
    reason = _sshd_reason()
    name = "8 soak (sshd)"
    if reason is not None:
        return [Row(name, "cuts / cycles", None, "lines", budget="0 lost, 0 duplicated", note=f"skipped: {reason}")]
    from sshd_support import FakeTools, start_sshd

    cuts = cuts or (20 if quick else 100)
    cycles = cycles or (10 if quick else 50)
    work = workdir / "soak"
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)
    tools = FakeTools.create(work / "host")
    inst = start_sshd(work / "sshd", user="root", path_prefix=tools.bin_dir)
    rows: list[Row] = []
    try:
        load0 = loadavg()
        c = asyncio.run(_cuts(inst, work, cuts))
        ok = c["lost"] == 0 and c["duplicated"] == 0 and c["left"] == 0 and c["following"] == 1
        rows.append(Row(name, f"{cuts} cuts in one boot: lost + duplicated", c["lost"] + c["duplicated"], "lines",
                        budget="0, 0 followers left", met=ok,
                        note=(f"{c['written']:,} lines written over {c['seconds']:.0f} s, {c['reconnects']} "
                              f"reconnects, lost {c['lost']}, duplicated {c['duplicated']}; remote tail -F "
                              f"following: {c['following']} (max seen at a cut {c['followers_max']}), left after "
                              f"close: {c['left']}; RSS {c['rss0']:.1f} -> {c['rss1']:.1f} MB; load {load0}")))
        load1 = loadavg()
        y = asyncio.run(_cycles(inst, work, cycles))
        flat = y["rss_last"] - y["rss_first"] < 5.0
        rows.append(Row(name, f"{cycles} connect-read-quit cycles: followers left", y["left"], "processes",
                        budget="0; RSS flat (< 5 MB)", met=y["left"] == 0 and flat,
                        note=(f"RSS first tenth {y['rss_first']:.1f} MB, last tenth {y['rss_last']:.1f} MB, "
                              f"{y['seconds']:.0f} s; load {load1}")))
    finally:
        inst.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main() -> int:
    return standalone_main("soak", run, __doc__, cuts=(int, None), cycles=(int, None))


if __name__ == "__main__":
    raise SystemExit(main())
