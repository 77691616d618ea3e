"""Issue 21 for docker hosts (``container = …``), over a real sshd and locally: a container whose
server has served for days.

The container's log (the fake ``docker`` of ``tests/sshd_support.py``, which honours ``--since``,
``--until``, ``--tail``, ``--timestamps`` and ``-f`` as docker's daemon does) holds an earlier
run's lines, then — from ``StartedAt`` — a real SGLang boot (tests/fixtures/real/01-…-ready.log:
``max_total_num_tokens=25169``) and 200k serving lines. kvtui must read the head through the
ready line + a margin (docker stopped on the host by the pipe), say one gap (``since``/``until``),
read the last lines and follow — in a spool of a few MB — and find a serving line of the gap with
``docker logs --since --until | grep`` on the host.

Measured figures are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sshd_support import FakeTools, SshdInstance, requires_sshd, start_sshd, wait_no_processes

from kvtui.boot.model import Boot, BootStatus
from kvtui.config import LocalHost
from kvtui.engines.events import Fact
from kvtui.engines.source_records import gap_range
from kvtui.hosts.backend import HostBackend
from kvtui.hosts.local import LocalBackend
from kvtui.hosts.ssh import Backoff, SshBackend
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.spool import iter_spooled

pytestmark = [pytest.mark.sshd]

FIXTURES = Path(__file__).parent / "fixtures"
# one docker line per line or progress-bar piece (the reader splits at \r too)
_BOOT_LOG = FIXTURES / "real" / "01-sglang-llama32-3b-tp1-hicache-ready.log"
BOOT = [x for x in re.split(r"\r\n|\r|\n", _BOOT_LOG.read_text()) if x]
POOL = 25169
SERVING = 200_000
NEEDLE = "[2026-02-10 03:30:00] WARNING scheduler.py:1234: watchdog: needle-4242 decode step took 3.2 s"
LAST = '[2026-02-10 04:00:00] INFO:     127.0.0.1:50000 - "GET /health HTTP/1.1" 200 OK (the last line)'
STARTED = datetime(2026, 2, 9, 14, 38, 10, 500000, tzinfo=UTC)
CONTAINER = "sglang-srv"


def stamp(t: datetime) -> str:
    """As ``docker logs --timestamps`` prints it."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def serving_lines(n: int) -> list[str]:
    out = []
    usage = 12000 / POOL
    for i in range(n):
        ts = f"[2026-02-10 03:12:{i % 60:02d}]"
        k = i % 4
        if k == 0:
            out.append(f"{ts} Decode batch. #running-req: {i % 30 + 1}, #token: 12000, token usage: {usage:.2f}, "
                       f"cuda graph: True, gen throughput (token/s): 512.{i % 10}, #queue-req: 0")
        elif k == 1:
            out.append(f"{ts} Prefill batch. #new-seq: 1, #new-token: {i % 900 + 10}, #cached-token: 0, "
                       f"token usage: {usage:.2f}, #running-req: 3, #queue-req: 0")
        else:
            out.append(f'{ts} INFO:     127.0.0.1:{16000 + i % 999} - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    return out


def write_container_log(state: Path) -> list[tuple[str, str]]:
    """The container's log (an earlier run, then this run: the boot, the serving lines with the
    needle in the middle, the last line) and its inspect answers; returns this run's (stamp,
    text) lines. The serving block is written over and over with fresh stamps (fast)."""
    earlier = [(stamp(STARTED - timedelta(hours=30, seconds=-i)), text)
               for i, text in enumerate(BOOT[:40])] + [(stamp(STARTED - timedelta(hours=29)), "Killed")]
    t = STARTED + timedelta(milliseconds=1)
    run: list[tuple[str, str]] = []
    for text in BOOT:
        run.append((stamp(t), text))
        t += timedelta(milliseconds=3)
    t = datetime(2026, 2, 10, 3, 0, tzinfo=UTC)
    block = serving_lines(1000)
    for k in range(SERVING // 1000):
        for text in block:
            run.append((stamp(t), text))
            t += timedelta(microseconds=9000)
        if k == SERVING // 2000:
            run.append((stamp(t), NEEDLE))
            t += timedelta(microseconds=9000)
    run.append((stamp(t), LAST))
    with (state / "docker.log").open("w") as f:
        f.writelines(f"{s} {x}\n" for s, x in earlier + run)
    started = STARTED.strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # docker inspect trims the fraction's zeros
    (state / "docker.inspect.StartedAt").write_text(started + "\n")
    (state / "docker.inspect.State").write_text(f"true {started} 0 false\n")
    (state / "docker.inspect.Cmd").write_text('"python3" ["-m","sglang.launch_server","--model-path","x"]\n')
    (state / "docker.calls").write_text("")
    for p in state.iterdir():
        if p.is_file():
            p.chmod(0o666)
    return run


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> FakeTools:
    return FakeTools.create(tmp_path_factory.mktemp("dockerhost"))


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory, tools: FakeTools) -> Iterator[SshdInstance]:
    inst = start_sshd(tmp_path_factory.mktemp("sshd"), user="root", path_prefix=tools.bin_dir,
                      extra_env={"KVTUI_FAKE_STATE": str(tools.state)})
    inst.assert_fake_path()
    yield inst
    inst.stop()


@pytest.fixture
def run_lines(tools: FakeTools) -> Iterator[list[tuple[str, str]]]:
    lines = write_container_log(tools.state)
    yield lines
    (tools.state / "docker.log").unlink(missing_ok=True)


def make_backend(kind: str, tools: FakeTools, request: pytest.FixtureRequest) -> HostBackend:
    if kind == "local":
        return LocalBackend("dk", LocalHost(local=True, container=CONTAINER, engine="sglang"),
                            docker=(str(tools.bin_dir / "docker"),))
    sshd: SshdInstance = request.getfixturevalue("sshd")
    cfg = sshd.host_config(unit=None, container=CONTAINER, engine="sglang")
    return SshBackend("dk", cfg, ssh_config=[], connect_timeout=5, keepalive_interval=2,
                      backoff=Backoff(initial=0.05, cap=0.5, rng=random.Random(7)), options={"agent_path": None})


async def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.01)


def _ignore(_: Sequence[object]) -> None:
    pass


def head_calls(tools: FakeTools) -> list[tuple[str, int]]:
    """The fake docker's ``logs`` calls: (args, bytes it wrote)."""
    out = []
    for line in (tools.state / "docker.calls").read_text().splitlines():
        args, _, n = line.rpartition(" bytes=")
        out.append((args, int(n)))
    return out


# ---------------------------------------------------------------------------------------------
# the fake docker keeps docker's rules
# ---------------------------------------------------------------------------------------------


def test_fake_docker_logs_since_until_tail_as_docker(tmp_path: Path) -> None:
    """Docker's daemon (daemon/logger): ``--since`` inclusive (a line is skipped only Before it),
    ``--until`` inclusive (it stops only After it), ``--tail N`` takes the last N lines first and
    the time filters apply to those; ``--timestamps`` prints RFC3339Nano with 9 digits; --since
    takes any RFC 3339 fraction or zone and unix seconds. Fails on the old fake: no --until, no
    --tail, string comparison of a short --since."""
    tools = FakeTools.create(tmp_path / "t")
    lines = [f"2026-12-01T12:00:0{i}.{j}00000000Z l{i}{j}" for i in range(4) for j in range(3)]
    (tools.state / "docker.log").write_text("".join(x + "\n" for x in lines))
    (tools.state / "docker.inspect.State").write_text("false 2026-12-01T12:00:00Z 0 false\n")
    docker = str(tools.bin_dir / "docker")

    def logs(*args: str) -> list[str]:
        res = subprocess.run([docker, "logs", *args, "c"], capture_output=True, text=True, check=True, timeout=30)
        return res.stdout.splitlines()

    assert logs("-t", "--since", "2026-12-01T12:00:01.1Z", "--until", "2026-12-01T12:00:02.100000000Z") == lines[4:8]
    assert logs("--since", "2026-12-01T13:00:01.100+01:00") == [x.split()[1] for x in lines[4:]]
    assert logs("--since", "1796126402") == [x.split()[1] for x in lines[6:]]  # unix seconds
    assert logs("--tail", "2") == ["l31", "l32"]
    assert logs("--tail", "3", "--since", "2026-12-01T12:00:03.2Z") == ["l32"]
    assert logs("-n", "0") == []
    assert logs("--tail", "all", "--until", "2026-12-01T12:00:00Z") == ["l00"]
    # -f follows what is appended until the container stops
    proc = subprocess.Popen([docker, "logs", "-f", "-t", "--tail", "1", "c"], stdout=subprocess.PIPE, text=True)
    (tools.state / "docker.inspect.State").write_text("true 2026-12-01T12:00:00Z 0 false\n")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().rstrip("\n") == lines[-1]
        with (tools.state / "docker.log").open("a") as f:
            f.write("2026-12-01T12:00:05.000000000Z later\n")
        assert proc.stdout.readline().rstrip("\n") == "2026-12-01T12:00:05.000000000Z later"
        (tools.state / "docker.inspect.State").write_text("false 2026-12-01T12:00:00Z 0 false\n")
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------------------
# a container up for days
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [pytest.param("ssh", marks=requires_sshd), "local"])
async def test_a_container_days_up_is_ready_with_one_gap_and_the_tail(
    kind: str, tools: FakeTools, run_lines: list[tuple[str, str]], tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """Fails before issue 21: the current boot was read whole from StartedAt (every serving line
    into the spool: ~30 MB, no gap; the head's docker call wrote the whole log) — and
    ``search_log`` refused a container (SSH) or did not exist (local)."""
    backend = make_backend(kind, tools, request)
    mon = HostMonitor("dk", backend,
                      options=MonitorOptions(state_dir=tmp_path / "state", gpu_interval=5.0, pids_interval=60.0))
    t0 = time.monotonic()
    task = asyncio.create_task(mon.run(_ignore))

    def boot() -> Boot | None:
        return mon.boots[-1] if mon.boots else None

    def recs() -> list[tuple[str, str | None, str | None]]:
        mon.spool.flush()
        return [(r.text, r.cursor, r.ident) for r in iter_spooled(mon.spool)]

    try:
        await wait_until(lambda: (b := boot()) is not None and b.status is BootStatus.READY
                         and Fact.MAX_TOTAL_NUM_TOKENS in b.facts, 60, "ready with figures")
        t_ready = time.monotonic() - t0
        await wait_until(lambda: any(t == LAST for t, _, _ in recs()), 60, "the tail's last line")
        b = boot()
        assert b is not None
        assert b.facts[Fact.MAX_TOTAL_NUM_TOKENS] == POOL
        assert b.start_missing is None
        assert b.flags.get("model_path") == "meta-llama/Llama-3.2-3B"
        got = recs()
        own = [(i, t) for i, (t, _, ident) in enumerate(got) if ident == "kvtui"]
        assert len(own) == 1, own  # one gap, nothing else of kvtui's own
        i_gap = own[0][0]
        where = b.skipped_where[0]
        rng = gap_range(where)
        # the gap lies between the head's last line and the tail's first, in order
        before, after = got[i_gap - 1], got[i_gap + 1]
        assert before[1] is not None
        assert after[1] is not None
        assert rng["since"] == before[1].partition("#")[0]
        assert rng["until"] == after[1].partition("#")[0]
        stamps = [s for s, _ in run_lines]
        i_since, i_until = stamps.index(rng["since"]), stamps.index(rng["until"])
        head = [t for t, _, ident in got[:i_gap]]
        # from StartedAt (the earlier run is not there) through the head's last line
        assert head[0] == run_lines[0][1]
        assert head[-1] == run_lines[i_since][1]
        assert "Killed" not in head
        assert head.count(BOOT[0]) == 1
        assert any("The server is fired up and ready to roll" in t for t in head)
        assert len(head) - next(i for i, t in enumerate(head) if "fired up" in t) <= 301  # ready + margin
        tail = [t for t, _, _ in got[i_gap + 1:]]
        assert tail == [x for _, x in run_lines[i_until:]]  # the last lines, each once
        assert len(tail) == 10_000
        assert b.skipped_lines == 0  # lines=None: not counted (that would read the uptime)
        spool = sum(p.stat().st_size for p in mon.spool.files() if p.exists())
        assert spool < 5 * 1024 * 1024
        # docker was stopped on the host: the head's call wrote a little of the ~30 MB log
        calls = head_calls(tools)
        head_call = next(n for a, n in calls if "--since" in a and "-f" not in a.split())
        log_bytes = (tools.state / "docker.log").stat().st_size
        assert head_call < 2 * 1024 * 1024 < log_bytes
        # a line written now arrives once
        new = (stamp(datetime(2026, 2, 10, 4, 0, 1, tzinfo=UTC)), "[2026-02-10 04:00:01] a line written now")
        with (tools.state / "docker.log").open("a") as f:
            f.write(f"{new[0]} {new[1]}\n")
        await wait_until(lambda: recs()[-1][0] == new[1], 30, "the new line")
        await asyncio.sleep(0.3)
        assert [t for t, _, _ in recs()].count(new[1]) == 1
        # search the gap on the host: a serving line the follower never read
        t = time.monotonic()
        found = await backend.search_log("needle-4242", where, context=1)  # type: ignore[attr-defined]
        t_search = time.monotonic() - t
        assert [m.record.text for m in found] == [NEEDLE]
        m = found[0]
        assert rng["since"] < (m.record.cursor or "") < rng["until"]
        assert len(m.context_before) == 1
        assert len(m.context_after) == 1
        assert m.context_before[0].text.startswith("[2026-02-10 03:12:")
        # the gap's own edges are not its lines (docker's --since/--until are inclusive)
        edge = await backend.search_log(run_lines[i_since][1][:60], where, limit=5)  # type: ignore[attr-defined]
        assert all(rng["since"] < (x.record.cursor or "") < rng["until"] for x in edge)
        print(f"\n[measure] docker {kind}: ready {t_ready:.2f} s, head call wrote {head_call} B of {log_bytes} B, "
              f"spool {spool} B, search {t_search:.2f} s")
    finally:
        await mon.close()
        await asyncio.wait_for(task, 15)
    assert await wait_no_processes(CONTAINER, ("docker", "kvtui-guard")) == []


@requires_sshd
def test_docker_logs_grep_baseline(tools: FakeTools, run_lines: list[tuple[str, str]],
                                   request: pytest.FixtureRequest) -> None:
    """The baseline a reader pays without kvtui: ``docker logs | grep`` of the run over ssh (the
    whole uptime through the pipe). Printed for the report, asserted only to have worked."""
    sshd: SshdInstance = request.getfixturevalue("sshd")
    t = time.monotonic()
    started = (tools.state / "docker.inspect.StartedAt").read_text().strip()
    res = sshd.run(f"docker logs --timestamps --since {started} {CONTAINER} 2>&1 "
                   "| grep -E 'fired up|max_total_num_tokens'", timeout=120)
    took = time.monotonic() - t
    assert res.returncode == 0
    assert f"max_total_num_tokens={POOL}" in res.stdout
    wrote = head_calls(tools)[-1][1]
    print(f"\n[measure] ssh docker logs | grep: {took:.2f} s, docker wrote {wrote} B")
    assert re.search(r"fired up", res.stdout)


@pytest.mark.parametrize("case", ["rotated", "starting"])
async def test_a_container_whose_start_is_rotated_away_or_still_starting(
    case: str, tools: FakeTools, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """``rotated``: the log driver rotated the start away — the head begins with serving lines:
    the awk stops at the first (docker stopped), the boot is serving with the container's
    command as its flags, then one gap and the tail. ``starting``: the log is the boot's first
    part (no ready line): read whole, no gap (a guard: old code read it whole too). The rotated
    case fails before issue 21: the whole log was read, the start missing only as the tracker's
    'the log begins while it serves', no flags from the container's command."""
    write_container_log(tools.state)
    log = tools.state / "docker.log"
    lines = log.read_text().splitlines(keepends=True)
    i0 = next(i for i, x in enumerate(lines) if BOOT[0] in x and x > stamp(STARTED))
    if case == "rotated":  # this run's boot is gone: its head is serving lines
        i_serv = next(i for i, x in enumerate(lines) if "Decode batch" in x)
        log.write_text("".join(lines[:i0] + lines[i_serv:]))
    else:
        ready = next(i for i, x in enumerate(lines) if "Load weight end" in x)
        log.write_text("".join(lines[:ready]))
    backend = make_backend("local", tools, request)
    mon = HostMonitor("dk", backend,
                      options=MonitorOptions(state_dir=tmp_path / "state", gpu_interval=5.0, pids_interval=60.0))
    task = asyncio.create_task(mon.run(_ignore))
    try:
        def mon_recs() -> list[tuple[str, str | None]]:
            mon.spool.flush()
            return [(r.text, r.ident) for r in iter_spooled(mon.spool)]

        last = log.read_text().splitlines()[-1].partition(" ")[2]
        await wait_until(lambda: any(t == last for t, _ in mon_recs()), 60, "the last line")
        b = mon.boots[-1]
        own = [t for t, ident in mon_recs() if ident == "kvtui"]
        calls = head_calls(tools)
        head_call = next(n for a, n in calls if "--since" in a and "-f" not in a.split())
        if case == "rotated":
            assert b.status is BootStatus.READY
            assert b.start_missing is not None
            assert "rotated" in b.start_missing
            assert b.flags.get("model_path") == "x"
            assert b.flags_from == "process"
            assert len([t for t in own if "lines not read" in t]) == 1
            assert head_call < 2 * 1024 * 1024
        else:
            assert b.status is not BootStatus.READY
            assert own == []
            assert mon_recs()[0][0] == BOOT[0]  # from StartedAt, the earlier run not read
    finally:
        await mon.close()
        await asyncio.wait_for(task, 15)
        log.unlink(missing_ok=True)
