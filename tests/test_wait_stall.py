"""``kvtui wait`` with the console's stall detector: a local file host whose vLLM log, cut in
load_weights, then only repeats the shared-memory broadcast wait. The heartbeat names the stall
once ``[ui] stall_seconds`` pass without progress; ``--stall-timeout`` ends the wait with exit 5
saying what the engine kept printing. All waits are bounded polls on what the wait printed."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from pathlib import Path

import pytest
from test_wait import Cue, FakeClock, _until

from kvtui.cli import build_parser
from kvtui.commands import wait as wait_mod
from kvtui.commands.wait import wait_for_boot

FIXTURES = Path(__file__).parent / "fixtures"
SHM = ("(EngineCore_DP0 pid=4188) INFO 03-10 14:0{m}:28 [shm_broadcast.py:542] No available shared memory broadcast "
       "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
       "time-consuming work (e.g. compilation, weight/kv cache quantization).")


def _host(tmp_path: Path, stall_seconds: int = 60) -> Path:
    source = (FIXTURES / "vllm" / "vllm-0.33-qwen3-32b-tp4-ready.log").read_text().splitlines()
    cut = next(i for i, t in enumerate(source) if "Starting to load model" in t) + 2
    log = tmp_path / "server.log"
    log.write_text("\n".join(source[:cut]) + "\n")
    (tmp_path / "hosts.toml").write_text(
        f'[ui]\nstall_seconds = {stall_seconds}\n\n[hosts.box]\nlocal = true\nlog_file = "{log}"\n')
    return log


def _append(log: Path, *lines: str) -> None:
    with log.open("a") as fh:
        fh.write("".join(ln + "\n" for ln in lines))


async def _start(tmp_path: Path, *argv: str) -> tuple[Path, FakeClock, Cue, io.StringIO, io.StringIO,
                                                     asyncio.Task[int]]:
    """A wait on the local host ``box`` (its log cut in load_weights), once its phase is printed."""
    log = _host(tmp_path)
    clock, cue = FakeClock(), Cue()
    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(["wait", "box", "--no-probe", *argv])
    task = asyncio.create_task(wait_for_boot(args, stdout=out, stderr=err, clock=clock, timer=cue))
    await _until(lambda: "load weights" in err.getvalue())
    return log, clock, cue, out, err, task


async def test_stall_timeout_ends_the_wait_with_exit_5_naming_the_repeated_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wait_mod, "HEARTBEAT_S", 0.05)
    log, clock, _cue, out, err, task = await _start(tmp_path, "--stall-timeout", "180", "--json")
    for m in (1, 2):  # a minute, then the wait line: the heartbeat names the stall once it is 60 s old
        clock.t += 60
        _append(log, SHM.format(m=m))
        await _until(lambda m=m: f"printed 'No available shared memory broadcast block' {m}× in {m}m 00s"
                     in err.getvalue())
    assert not task.done()  # 2 min without progress: under --stall-timeout
    beat = next(ln for ln in err.getvalue().splitlines() if "2× in 2m 00s" in ln)
    assert beat.startswith("… still waiting after ")
    assert ("boot #1 in load weights; stuck: vLLM has printed 'No available shared memory broadcast block' 2× in "
            "2m 00s — a rank has not joined (multi-node) or is hung") in beat
    _append(log, SHM.format(m=3))  # its own time says 3 min since the last progress line
    assert await asyncio.wait_for(task, 30) == 5
    said = err.getvalue()
    assert ("kvtui wait: no progress for 3m 00s (--stall-timeout 180 s): boot #1 still in load weights: stuck: vLLM "
            "has printed 'No available shared memory broadcast block' 3× in 3m 00s") in said
    boot = json.loads(out.getvalue())  # the boot as far as it got
    assert boot["status"] == "starting"
    assert boot["phase"] == "load_weights"


async def test_without_stall_timeout_the_wait_goes_on_and_progress_clears_the_stall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wait_mod, "HEARTBEAT_S", 0.05)
    log, clock, cue, _out, err, task = await _start(tmp_path)
    clock.t += 600
    _append(log, *(SHM.format(m=m) for m in range(1, 10)))
    await _until(lambda: "9× in 10m 00s" in err.getvalue())
    assert not task.done()  # default: no stall timeout, the wait goes on
    n = len(err.getvalue())
    _append(log, "(Worker_TP0 pid=4250) INFO 03-10 14:10:50 [default_loader.py:430] Loading weights took 21.43 "
                 "seconds")
    # the heartbeat stops naming the stall once the progress line is read
    await _until(lambda: any(ln.startswith("… still waiting") and "stuck" not in ln
                             for ln in err.getvalue()[n:].splitlines()))
    cue.event.set()
    assert await asyncio.wait_for(task, 30) == 5
    assert "timed out after 1800 s" in err.getvalue()


def test_a_bad_stall_timeout_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _host(tmp_path)
    args = argparse.Namespace(host="box", timeout=60.0, stall_timeout=0.0, next=False, follow_restarts=False,
                              json=False, hosts=None)
    assert wait_mod.run(args) == 2
    assert "--stall-timeout must be a positive number of seconds, got 0" in capsys.readouterr().err


def test_stall_timeout_on_the_stalled_two_node_demo_exits_5_naming_each_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15's hang on the demo (node 1 never reaches distributed init, node 0 waits there): no
    node makes progress, so ``--stall-timeout`` ends the wait (exit 5) before ``--timeout``."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    node = 'demo = true\ndemo_model = "deepseek-r1-2node"\ndemo_speed = 500\ndemo_stall_node = 1\n'
    (tmp_path / "hosts.toml").write_text(
        f'[hosts.r1-a]\n{node}\n[hosts.r1-b]\n{node}demo_node = 1\n\n'
        '[deployments.r1]\nnodes = ["r1-a", "r1-b"]\nhang_seconds = 600\n')
    args = build_parser().parse_args(["wait", "r1", "--timeout", "120", "--stall-timeout", "2", "--json"])
    assert wait_mod.run(args) == 5
    cap = capsys.readouterr()
    said = next(ln for ln in cap.err.splitlines() if "no progress on any node" in ln)
    assert said.startswith("kvtui wait: r1: no progress on any node for ")
    assert "(--stall-timeout 2 s): node 0 (r1-a): " in said
    assert "; node 1 (r1-b): " in said
    assert "timed out after 120 s" not in cap.err
    assert json.loads(cap.out)["status"] == "starting"
