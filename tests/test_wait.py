"""``kvtui wait``: the demo host boots to ready (0); a too-high fraction dies in capture (1,
``oom_graph_capture``); ``--timeout`` (5); ``--follow-restarts`` through automatic restarts;
``--next``; a local log file; configuration errors (3); usage (2)."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kvtui.cli import build_parser, main
from kvtui.commands.wait import wait_for_boot
from kvtui.config import load_config
from kvtui.monitor import HostMonitor
from kvtui.sim.backend import DemoBackend

FIXTURES = Path(__file__).parent / "fixtures"
FAST = 300.0  # demo_speed: a whole Kimi boot in about 1 s of wall time


def hosts_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "hosts.toml"  # the test's cwd: found as ./hosts.toml
    path.write_text(body)
    return path


def demo_hosts(tmp_path: Path, speed: float = FAST) -> None:
    hosts_file(tmp_path, f"[hosts.demo]\ndemo = true\ndemo_speed = {speed}\n")


class FakeClock:
    """The demo host's and the monitor's time, moved by the test (nothing depends on how fast
    the machine is: a boot's lines exist once the clock has passed them)."""

    def __init__(self, t: float = 1_780_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def demo_backend(clock: Callable[[], float] | None = None) -> DemoBackend:
    return DemoBackend("demo", load_config().host("demo"), clock=clock)


def set_fraction(
    fraction: str, *, restart_sec: int | None = None, restart: bool = True, clock: Callable[[], float] | None = None
) -> None:
    """Edit the demo unit through DemoBackend's service methods (as ``kvtui apply`` will)."""
    b = demo_backend(clock)
    unit = b.read_unit()
    import re

    unit = re.sub(r"--mem-fraction-static \S+", f"--mem-fraction-static {fraction}", unit)
    if restart_sec is not None:
        unit = re.sub(r"RestartSec=\S+", f"RestartSec={restart_sec}", unit)
    b.write_unit(unit)
    b.daemon_reload()
    if restart:
        b.restart()


def newest_number(host: str = "demo") -> int:
    """The number (``#N``) of the host's newest boot in the history."""
    from kvtui.history import open_store

    with open_store() as store:
        rows = store.boots(host, limit=1)
    assert rows, f"no boot of {host} in the history"
    return rows[0].id


def test_wait_demo_ready_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo_hosts(tmp_path)
    assert main(["wait", "demo", "--timeout", "60"]) == 0
    out, err = capsys.readouterr()
    assert "READY" in out
    assert "KV pool" in out
    phases = [ln.split("] ", 1)[1] for ln in err.splitlines() if ln.startswith("[")]
    assert phases[:3] == ["launch", "init", "load weights"]  # the phases as a person reads them (issue 22 #15)
    assert phases[-1] == "ready"
    assert phases.index("KV allocate") < phases.index("graph capture") < phases.index("ready")
    assert f"boot #{newest_number()} is ready" in err  # the history's number (issue 22 #2)


def test_wait_demo_too_high_fraction_exits_1_with_capture_oom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo_hosts(tmp_path)
    set_fraction("0.99")
    assert main(["wait", "demo", "--json", "--timeout", "60"]) == 1
    out, err = capsys.readouterr()
    boot = json.loads(out)
    assert boot["status"] == "failed"
    assert boot["failure"]["kind"] == "oom_graph_capture"
    assert boot["failure"]["phase"] == "graph_capture"
    assert boot["flags"]["mem_fraction_static"] == 0.99
    assert "failed in graph capture: oom_graph_capture" in err
    assert "CUDA out of memory" in err
    assert "hint:" in err


class Cue:
    """A ``--timeout`` timer that expires when the test says so (not after real seconds)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await self.event.wait()


async def test_wait_timeout_exits_5_with_the_boot_as_far_as_it_got(tmp_path: Path) -> None:
    demo_hosts(tmp_path, speed=1.0)  # a real-time boot: minutes
    clock = FakeClock()
    boot = demo_backend(clock).boot_script()
    assert boot is not None
    clock.t += 60  # loading its weights
    cue = Cue()
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(_run_wait(["demo", "--timeout", "0.7", "--json"], out, err, clock=clock, timer=cue))
    await _until(lambda: "load weights" in err.getvalue())  # the boot was seen ...
    assert not task.done()
    cue.event.set()  # ... then the time is up
    assert await asyncio.wait_for(task, 30) == 5
    assert cue.asked == [0.7]
    assert f"timed out after 0.7 s: boot #{newest_number()} still in load weights" in err.getvalue()
    assert json.loads(out.getvalue())["status"] == "starting"  # the boot as far as it got


def test_wait_timeout_exits_5_on_the_real_clock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo_hosts(tmp_path, speed=1.0)  # a real-time boot: minutes
    assert main(["wait", "demo", "--timeout", "0.3"]) == 5
    assert "timed out after 0.3 s" in capsys.readouterr().err


async def _run_wait(
    argv: list[str],
    stdout: io.StringIO,
    stderr: io.StringIO,
    *,
    clock: Callable[[], float] | None = None,
    timer: Callable[[float], Awaitable[object]] | None = None,
) -> int:
    args = build_parser().parse_args(["wait", *argv])
    return await wait_for_boot(args, stdout=stdout, stderr=stderr, clock=clock, timer=timer)


async def _until(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.02)


async def test_follow_restarts_waits_through_a_failed_boot(tmp_path: Path) -> None:
    demo_hosts(tmp_path)
    clock = FakeClock()
    set_fraction("0.99", restart_sec=300, clock=clock)  # Restart=on-failure, 1 s (of the clock) after
    clock.t += 0.1  # the first boot's processes are gone: the restarted one runs
    assert demo_backend(clock).current_boot() == 1
    failed = demo_backend(clock).boot_script()
    assert failed is not None
    assert failed.outcome == "failed"
    clock.t = failed.end_t + 0.01  # the failure is in the journal; the automatic restart is 1 s away
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(
        _run_wait(["demo", "--follow-restarts", "--timeout", "60", "--json"], out, err, clock=clock)
    )
    await _until(lambda: "waiting for an automatic restart" in err.getvalue())
    assert not task.done()
    # the operator fixes the flag; the automatic restart picks up the reloaded unit
    set_fraction("0.85", restart=False, clock=clock)
    clock.t += 1.0
    again = demo_backend(clock).boot_script()
    assert again is not None
    assert again.start > failed.end_t
    clock.t = again.end_t + 0.01
    code = await asyncio.wait_for(task, 60)
    text = err.getvalue()
    assert code == 0, text
    assert "oom_graph_capture" in text
    assert f"boot #{newest_number()} started" in text  # the restart's boot, by its number in the history
    boot = json.loads(out.getvalue())
    assert boot["status"] == "ready"
    assert boot["flags"]["mem_fraction_static"] == 0.85


async def test_without_follow_restarts_a_failure_ends_the_wait(tmp_path: Path) -> None:
    demo_hosts(tmp_path)
    set_fraction("0.70")  # too low: the pool does not fit
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.wait_for(_run_wait(["demo", "--json"], out, err), 60)
    assert code == 1
    assert json.loads(out.getvalue())["failure"]["kind"] == "oom_kv_allocate"


async def test_next_waits_for_the_next_boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    demo_hosts(tmp_path)
    clock = FakeClock()
    first = demo_backend(clock).boot_script()  # the demo boot starts now ...
    assert first is not None
    clock.t = first.end_t + 30  # ... and is ready and serving
    # when the wait's follower has taken its place in the journal (LogStart.NEXT_BOOT: after now)
    placed = asyncio.Event()
    collected: list[str] = []
    start_position, collect = DemoBackend._start_position, DemoBackend._collect

    def spy_start(self: DemoBackend, *a: Any) -> tuple[int, int, bool]:
        placed.set()
        return start_position(self, *a)

    def spy_collect(self: DemoBackend, *a: Any) -> Any:
        got = collect(self, *a)
        collected.extend(r.text for r in got[0])
        return got

    monkeypatch.setattr(DemoBackend, "_start_position", spy_start)
    monkeypatch.setattr(DemoBackend, "_collect", spy_collect)
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(_run_wait(["demo", "--next", "--timeout", "60"], out, err, clock=clock))
    await asyncio.wait_for(placed.wait(), 30)
    clock.t += 30  # the ready boot keeps serving: lines the wait reads and must not count
    await _until(lambda: any("Decode batch" in t for t in collected))
    await asyncio.sleep(0.3)  # a flush or two: time for a wrong exit (its absence is not timing)
    assert not task.done()  # the ready boot does not count: --next waits for a new one
    assert "fired up and ready" not in collected  # only what came after the wait began
    set_fraction("0.99", clock=clock)  # a restart with a fraction that dies in capture
    clock.t += 0.1  # the ready boot's processes are gone: the restarted one runs
    assert demo_backend(clock).current_boot() == 1
    second = demo_backend(clock).boot_script()
    assert second is not None
    assert second.start > first.start
    clock.t = second.end_t + 0.01
    code = await asyncio.wait_for(task, 60)
    assert code == 1, err.getvalue()
    assert f"boot #{newest_number()} started" in err.getvalue()
    assert "oom_graph_capture" in out.getvalue()


def test_wait_on_a_local_log_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    shutil.copy(FIXTURES / "sglang-0.5.10-llama70b-tp4-ready.journal", log)  # journalctl short-iso
    hosts_file(tmp_path, f'[hosts.box]\nlocal = true\nlog_file = "{log}"\n')
    assert main(["wait", "box", "--json", "--timeout", "30", "--no-probe"]) == 0  # a log, no server behind it
    out, _err = capsys.readouterr()
    boot = json.loads(out)
    assert boot["status"] == "ready"
    assert boot["metrics"]["max_total_num_tokens"] > 0


def test_config_errors_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hosts", str(tmp_path / "missing.toml"), "wait", "demo"]) == 3
    assert "hosts file not found" in capsys.readouterr().err
    hosts_file(tmp_path, "[hosts.gpu-a]\nlocal = true\nunit = 'x.service'\nbogus_key = 1\n")
    assert main(["wait", "gpu-a"]) == 3
    err = capsys.readouterr().err
    assert "bogus_key" in err
    assert "Traceback" not in err
    hosts_file(tmp_path, "[hosts.gpu-a]\nlocal = true\nunit = 'x.service'\n")
    assert main(["wait", "gpu-b"]) == 3
    assert "unknown host 'gpu-b'" in capsys.readouterr().err


def test_bad_timeout_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(host="demo", timeout=0.0, next=False, follow_restarts=False, json=False, hosts=None)
    from kvtui.commands.wait import run

    assert run(args) == 2
    assert "--timeout must be a positive number" in capsys.readouterr().err


def test_unreachable_ssh_host_exits_3_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("asyncssh")
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on (bound: nobody can take it meanwhile)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        known = tmp_path / "known_hosts"
        known.write_text("")
        hosts_file(
            tmp_path,
            f'[hosts.gpu-a]\nssh = "root@127.0.0.1"\nport = {port}\nknown_hosts = "{known}"\nunit = "sglang.service"\n',
        )
        import time

        t0 = time.monotonic()
        assert main(["wait", "gpu-a", "--timeout", "30"]) == 3
        assert time.monotonic() - t0 < 15
    err = capsys.readouterr().err
    assert "gpu-a" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# --timeout holds on every path
# ---------------------------------------------------------------------------------------------


async def test_a_boot_stopped_before_ready_then_nothing_times_out(tmp_path: Path) -> None:
    """The reported case: "boot 1 stopped before it was ready; waiting for the next boot", and
    no next boot comes: the wait ends with 5 when its time is up."""
    demo_hosts(tmp_path, speed=1.0)
    clock = FakeClock()
    demo_backend(clock).current_boot()
    clock.t += 30  # loading weights
    cue = Cue()
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(_run_wait(["demo", "--timeout", "10", "--json"], out, err, clock=clock, timer=cue))
    await _until(lambda: "load weights" in err.getvalue())
    demo_backend(clock).stop()  # an operator stops it; nothing restarts
    clock.t += 5
    await _until(lambda: "stopped before it was ready; waiting for the next boot" in err.getvalue())
    assert not task.done()
    cue.event.set()
    assert await asyncio.wait_for(task, 30) == 5
    assert f"timed out after 10 s: boot #{newest_number()} still stopped" in err.getvalue()
    assert json.loads(out.getvalue())["status"] == "stopped"


async def test_a_host_that_will_not_close_does_not_hold_the_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the time is up, closing is bounded: a backend whose close() never returns and a log
    stream that ignores its cancellation (for a while) are left behind; the wait returns 5."""
    import kvtui.commands.wait as wait_mod

    monkeypatch.setattr(wait_mod, "CLOSE_LIMIT", 0.2)
    demo_hosts(tmp_path)
    clock = FakeClock()
    demo_backend(clock).current_boot()
    loop = asyncio.get_running_loop()
    stubborn_until = loop.time() + 30.0  # set once the wait is over
    release = asyncio.Event()

    async def never_closes(self: DemoBackend) -> None:
        await asyncio.Event().wait()

    async def stubborn_log(self: DemoBackend, *a: Any, **kw: Any) -> Any:
        yield [rec for rec in self.read_lines()]
        while True:
            try:
                await release.wait()
                return
            except asyncio.CancelledError:
                if loop.time() > stubborn_until:
                    raise

    monkeypatch.setattr(DemoBackend, "close", never_closes)
    monkeypatch.setattr(DemoBackend, "follow_log", stubborn_log)
    cue = Cue()
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(_run_wait(["demo", "--timeout", "5"], out, err, clock=clock, timer=cue))
    await _until(lambda: "launch" in err.getvalue())
    cue.event.set()
    assert await asyncio.wait_for(task, 20) == 5  # without the bound: never
    assert "timed out after 5 s" in err.getvalue()
    release.set()  # let the stubborn stream end before the test's loop closes


def test_a_blocked_event_loop_still_exits_5_at_the_hard_deadline(tmp_path: Path) -> None:
    """A synchronous call that blocks the event loop (a stuck lock, a hung read): the timer can
    not fire, the hard deadline (SIGALRM in the main thread) still ends the wait with 5."""
    import subprocess
    import sys
    import time

    demo_hosts(tmp_path)
    script = (
        "import sys, time\n"
        "import kvtui.commands.wait as w\n"
        "from kvtui.sim.backend import DemoBackend\n"
        "from kvtui.cli import main\n"
        "w.HARD_GRACE = 1.0\n"
        "DemoBackend._collect = lambda self, *a: time.sleep(120)\n"
        "sys.exit(main(['wait', 'demo', '--timeout', '0.5']))\n"
    )
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90, cwd=tmp_path)
    took = time.monotonic() - t0
    assert res.returncode == 5, res.stderr
    assert "timed out after 0.5 s: demo did not answer in time" in res.stderr
    assert "Traceback" not in res.stderr
    assert took < 60  # the blocking call alone would take 120 s


def test_the_hard_deadline_is_disarmed_after_the_wait(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import signal

    before = signal.getsignal(signal.SIGALRM)
    demo_hosts(tmp_path)
    assert main(["wait", "demo", "--timeout", "60"]) == 0
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert "is ready" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# the rest of issue 4's "Done means" for kvtui wait
# ---------------------------------------------------------------------------------------------


def test_default_timeout_is_1800_s() -> None:
    args = build_parser().parse_args(["wait", "demo"])
    assert args.timeout == 1800.0
    assert (args.next, args.follow_restarts, args.json) == (False, False, False)


def test_json_is_the_boot_object_of_replay_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` prints the boot object ``kvtui replay --json`` gives for the same journal."""
    demo_hosts(tmp_path)
    assert main(["wait", "demo", "--json", "--timeout", "60"]) == 0
    waited = json.loads(capsys.readouterr().out)
    # the same boot's journal, as `journalctl -o json` would write it, through kvtui replay
    b = demo_backend()
    journal = tmp_path / "boot.json"
    with journal.open("w") as fh:
        for r in b.read_lines(limit=100_000):
            if r.ts is None:
                continue
            fh.write(json.dumps({"__CURSOR": r.cursor, "__REALTIME_TIMESTAMP": str(int(r.ts.timestamp() * 1e6)),
                                 "_PID": str(r.pid), "SYSLOG_IDENTIFIER": r.ident, "MESSAGE": r.text}) + "\n")
            if "fired up and ready" in r.text:
                break
    assert main(["replay", str(journal), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)["boots"][-1]
    # token_usage is the latest serving line's figure: on a loaded machine the wait may read a
    # decode line of the ready boot in the batch that carried the ready line (the demo's clock runs
    # on); the replayed journal stops at the ready line. Every other field is the same boot.
    waited["metrics"].pop("token_usage")
    replayed["metrics"].pop("token_usage")
    assert waited.pop("probe")["ok"] is True  # the demo's server answered the 1-token request
    # the wait's object names the boot by its number in the history (a replay of a file has none)
    assert waited.pop("boot") == newest_number()
    assert isinstance(waited.pop("boot_key"), str)
    assert replayed == waited


def test_apply_a_fraction_too_high_then_wait_exits_1_with_capture_oom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's fraction set too high by ``kvtui apply`` (forced past the calculator's
    refusal): ``kvtui wait demo`` then exits 1 with ``oom_graph_capture``."""
    demo_hosts(tmp_path)
    code = main(["apply", "demo", "--set", "mem-fraction-static=0.99", "--restart", "--yes", "--force",
                 "--timeout", "60"])
    assert code == 1, capsys.readouterr().err
    capsys.readouterr()
    assert main(["wait", "demo", "--json", "--timeout", "60"]) == 1
    out, err = capsys.readouterr()
    boot = json.loads(out)
    assert boot["failure"]["kind"] == "oom_graph_capture"
    assert boot["flags"]["mem_fraction_static"] == 0.99
    assert "failed in graph capture: oom_graph_capture" in err


async def test_next_without_a_restart_times_out_saying_no_new_boot_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10, item 14: `wait demo-b --next --timeout 4` with nothing restarting printed "boot 1
    still starting" and a STARTING boot that was the tail of the one already serving."""
    from kvtui.commands import wait as wait_mod

    monitors: list[HostMonitor] = []

    class Seen(HostMonitor):  # the real monitor, remembered so the test can see what it has read
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            monitors.append(self)

    monkeypatch.setattr(wait_mod, "HostMonitor", Seen)
    demo_hosts(tmp_path)
    clock = FakeClock()
    first = demo_backend(clock).boot_script()
    assert first is not None
    clock.t = first.end_t + 30  # ready and serving
    cue = Cue()
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(_run_wait(["demo", "--next", "--timeout", "4", "--json"], out, err, clock=clock,
                                         timer=cue))
    await _until(lambda: bool(cue.asked))  # the wait is following
    clock.t += 30  # the serving boot goes on: decode lines, no restart
    await _until(lambda: bool(monitors and monitors[0].tracker.boots))  # it has read them (no fixed sleep)
    cue.event.set()
    assert await asyncio.wait_for(task, 30) == 5
    text = err.getvalue()
    assert "timed out after 4 s: no new boot started (the running server went on; nothing restarted it)" in text
    assert "still starting" not in text
    assert "boot 1" not in text
    assert out.getvalue() == ""  # no boot object: the running server's tail is not "the next boot"


async def test_wait_prints_a_heartbeat_with_the_phase_and_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond: a CI log is never silent for minutes: a heartbeat on stderr, with the phase and its
    progress, whenever nothing else was printed for HEARTBEAT_S (9 s; shortened here)."""
    import time

    from kvtui.commands import wait as wait_mod

    monkeypatch.setattr(wait_mod, "HEARTBEAT_S", 0.1)
    demo_hosts(tmp_path, speed=1.0)
    clock = FakeClock()
    assert demo_backend(clock).boot_script() is not None
    clock.t += 60  # loading its weights, and the clock stands still: no new line will come

    class Stamped(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []

        def write(self, text: str) -> int:
            self.times.append(time.monotonic())
            return super().write(text)

    cue = Cue()
    out, err = io.StringIO(), Stamped()
    task = asyncio.create_task(_run_wait(["demo", "--timeout", "60"], out, err, clock=clock, timer=cue))
    await _until(lambda: err.getvalue().count(" in load weights ") >= 4)
    cue.event.set()
    assert await asyncio.wait_for(task, 30) == 5
    beats = [ln for ln in err.getvalue().splitlines() if ln.startswith("… still waiting after")]
    # a beat before the first line was read says so (a loaded machine: the 0.1 s beat can come first)
    while beats and beats[0].endswith(": no server log line yet"):
        beats.pop(0)
    # (a beat before the boot's first write to the history names it by its place in the log)
    assert all(re.search(r"boot (#1|1 of this log) in load weights \d+/64 shards; no ETA: no earlier ready boot of "
                         r"\S+ on demo in the history$", b) for b in beats), beats
    gaps = [b - a for a, b in zip(err.times, err.times[1:], strict=False)]
    assert max(gaps) < 0.1 + 2.0  # the interval, and room for a loaded machine (without: the whole wait)


async def test_apply_restart_prints_a_heartbeat_that_stays_out_of_the_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvtui import fmt
    from kvtui.audit import read_entries
    from kvtui.commands.apply import apply_main

    monkeypatch.setattr(fmt, "HEARTBEAT_S", 0.1)
    demo_hosts(tmp_path, speed=1.0)
    clock = FakeClock()
    assert demo_backend(clock).boot_script() is not None
    clock.t += 3600  # ready; the restarted boot will stay where the standing clock has it
    args = build_parser().parse_args(["apply", "demo", "--set", "cuda-graph-max-bs=32", "--yes", "--restart",
                                      "--timeout", "1.5"])
    out, err = io.StringIO(), io.StringIO()
    code = await apply_main(args, stdout=out, stderr=err, stdin=io.StringIO(), clock=clock)
    assert code == 5
    beats = [ln for ln in err.getvalue().splitlines() if ln.startswith("… still waiting after")]
    assert len(beats) >= 3, err.getvalue()
    assert all("the new boot is in" in b or "no new boot has started yet" in b for b in beats)
    detail = read_entries()[-1]["detail"]
    assert isinstance(detail, list)
    assert not any("still waiting" in str(d) for d in detail)


def test_a_boot_the_history_could_not_write_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The history file stays locked by another process for the whole wait: the boot waits in the
    recorder, and the wait ends saying it was not written (never silent); exit code unchanged."""
    from history_support import locked

    from kvtui.history import default_path, open_store

    demo_hosts(tmp_path)
    path = default_path()
    open_store(path).close()
    with locked(path):
        assert main(["wait", "demo", "--timeout", "60"]) == 0
    err = capsys.readouterr().err
    note = next((ln for ln in err.splitlines() if ln.startswith("kvtui wait: demo: note: ")), "")
    assert " not written to the history (history: " in note, err
    assert "locked by another kvtui" in note, err
    with open_store(readonly=True) as store:
        assert store.count("demo") == 0
    assert main(["wait", "demo", "--timeout", "60"]) == 0  # the lock gone: recorded, nothing said
    assert "not written" not in capsys.readouterr().err
    with open_store(readonly=True) as store:
        assert store.count("demo") == 1
