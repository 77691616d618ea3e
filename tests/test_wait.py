"""``kvtui wait``: the demo host boots to ready (0); a too-high fraction dies in capture (1,
``oom_graph_capture``); ``--timeout`` (5); ``--follow-restarts`` through automatic restarts;
``--next``; a local log file; configuration errors (3); usage (2)."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtui.cli import build_parser, main
from kvtui.config import load_config

pytest.importorskip("kvtui.hosts.demo", reason="the demo host (task E1) is not in this tree yet")
pytest.importorskip("kvtui.engines.parse", reason="the engine parser (task A) is not in this tree yet")

from kvtui.commands.wait import wait_for_boot
from kvtui.hosts.demo import DemoBackend

FIXTURES = Path(__file__).parent / "fixtures"
FAST = 300.0  # demo_speed: a whole Kimi boot in about 1 s of wall time


def hosts_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "hosts.toml"  # the test's cwd: found as ./hosts.toml
    path.write_text(body)
    return path


def demo_hosts(tmp_path: Path, speed: float = FAST) -> None:
    hosts_file(tmp_path, f"[hosts.demo]\ndemo = true\ndemo_speed = {speed}\n")


def demo_backend() -> DemoBackend:
    return DemoBackend("demo", load_config().host("demo"))


def set_fraction(fraction: str, *, restart_sec: int | None = None, restart: bool = True) -> None:
    """Edit the demo unit through DemoBackend's service methods (as ``kvtui apply`` will)."""
    b = demo_backend()
    unit = b.read_unit()
    import re

    unit = re.sub(r"--mem-fraction-static \S+", f"--mem-fraction-static {fraction}", unit)
    if restart_sec is not None:
        unit = re.sub(r"RestartSec=\S+", f"RestartSec={restart_sec}", unit)
    b.write_unit(unit)
    b.daemon_reload()
    if restart:
        b.restart()


def test_wait_demo_ready_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo_hosts(tmp_path)
    assert main(["wait", "demo", "--timeout", "60"]) == 0
    out, err = capsys.readouterr()
    assert "READY" in out
    assert "KV pool" in out
    phases = [ln.split("] ", 1)[1] for ln in err.splitlines() if ln.startswith("[")]
    assert phases[:3] == ["launch", "init", "load_weights"]
    assert phases[-1] == "ready"
    assert phases.index("kv_allocate") < phases.index("graph_capture") < phases.index("ready")
    assert "boot 1 is ready" in err


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
    assert "failed in graph_capture: oom_graph_capture" in err
    assert "CUDA out of memory" in err
    assert "hint:" in err


def test_wait_timeout_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo_hosts(tmp_path, speed=1.0)  # a real-time boot: minutes
    assert main(["wait", "demo", "--timeout", "0.7", "--json"]) == 5
    out, err = capsys.readouterr()
    assert "timed out after 0.7 s" in err
    assert json.loads(out)["status"] == "starting"  # the boot as far as it got


async def _run_wait(argv: list[str], stdout: io.StringIO, stderr: io.StringIO) -> int:
    args = build_parser().parse_args(["wait", *argv])
    return await wait_for_boot(args, stdout=stdout, stderr=stderr)


async def _until(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.02)


async def test_follow_restarts_waits_through_a_failed_boot(tmp_path: Path) -> None:
    demo_hosts(tmp_path)
    set_fraction("0.99", restart_sec=300)  # Restart=on-failure, after 1 s of wall time
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(_run_wait(["demo", "--follow-restarts", "--timeout", "60", "--json"], out, err))
    await _until(lambda: "waiting for an automatic restart" in err.getvalue())
    # the operator fixes the flag; the automatic restart picks up the reloaded unit
    set_fraction("0.85", restart=False)
    code = await asyncio.wait_for(task, 60)
    text = err.getvalue()
    assert code == 0, text
    assert "oom_graph_capture" in text
    assert "boot 2 started" in text
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


async def test_next_waits_for_the_next_boot(tmp_path: Path) -> None:
    demo_hosts(tmp_path)
    demo_backend().read_unit()  # the demo boot starts now and is ready after ~3 s
    await asyncio.sleep(1.5)
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(_run_wait(["demo", "--next", "--timeout", "60"], out, err))
    await asyncio.sleep(0.5)
    assert not task.done()  # the ready boot does not count: --next waits for a new one
    set_fraction("0.99")  # a restart with a fraction that dies in capture
    code = await asyncio.wait_for(task, 60)
    assert code == 1, err.getvalue()
    assert "boot 1 started" in err.getvalue()
    assert "oom_graph_capture" in out.getvalue()


def test_wait_on_a_local_log_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    shutil.copy(FIXTURES / "sglang-0.5.10-llama70b-tp4-ready.journal", log)  # journalctl short-iso
    hosts_file(tmp_path, f'[hosts.box]\nlocal = true\nlog_file = "{log}"\n')
    assert main(["wait", "box", "--json", "--timeout", "30"]) == 0
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

    with socket.socket() as s:  # a loopback port nobody listens on
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
