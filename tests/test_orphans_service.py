"""Orphaned engine processes (issue 24) on real backends: the local host's ``ps``, and the
restart paths (``apply --restart``, ``rollback --restart``, the service's ``restart``) that
refuse to start a new boot over them unless forced."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvtui.audit import read_entries
from kvtui.cli import main
from kvtui.config import HostConfig, parse_config
from kvtui.flags import get_flag
from kvtui.gpu import GpuProcess
from kvtui.hosts import service
from kvtui.hosts.local import LocalBackend
from kvtui.hosts.orphans import host_orphans
from kvtui.hosts.ssh import SshBackend
from kvtui.sim.backend import DemoBackend

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import requires_sshd, start_sshd

HOSTS = """
[hosts.demo]
demo = true
demo_speed = 400.0

[hosts.v]
demo = true
demo_speed = 400.0
demo_engine = "vllm"
"""

ORPHAN = GpuProcess(31337, 30_000.0, 0, None, "VLLM::EngineCore")


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    p = tmp_path / "hosts.toml"
    p.write_text(HOSTS)
    return p


@pytest.fixture
def orphaned_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every demo host the CLI makes has an orphaned EngineCore of a previous boot on GPU 0."""
    init = DemoBackend.__init__

    def with_orphan(self: DemoBackend, *args: Any, **kw: Any) -> None:
        init(self, *args, **kw)
        self.orphans = [ORPHAN]

    monkeypatch.setattr(DemoBackend, "__init__", with_orphan)


def _fraction(hosts: Path) -> object:
    cfg = parse_config(hosts.read_text(), hosts)
    return get_flag(DemoBackend("demo", cfg.host("demo")).read_unit(), "unit", "mem-fraction-static")


@pytest.mark.usefixtures("orphaned_demo")
def test_apply_restart_is_refused_over_orphans_naming_them(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.88", "--restart", "--yes"])
    _out, err = capsys.readouterr()
    assert code == 4, err
    assert "orphaned engine process of the previous boot" in err
    assert "PID 31337 (VLLM::EngineCore, 30,000 MiB of GPU 0)" in err
    assert "kill 31337; sleep 10; kill -9 31337" in err
    assert "--force" in err
    assert _fraction(hosts) == "0.85"  # nothing written
    assert read_entries()[-1]["outcome"] == "refused"


@pytest.mark.usefixtures("orphaned_demo")
def test_apply_restart_force_starts_over_them(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                 "--force", "--timeout", "60"])
    _out, err = capsys.readouterr()
    assert code == 0, err
    assert _fraction(hosts) == "0.88"


@pytest.mark.usefixtures("orphaned_demo")
def test_rollback_restart_is_refused_and_forceable(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.88", "--yes"]) == 0
    code = main(["--hosts", str(hosts), "rollback", "demo", "--restart", "--yes"])
    _out, err = capsys.readouterr()
    assert code == 4, err
    assert "PID 31337" in err
    assert _fraction(hosts) == "0.88"
    code = main(["--hosts", str(hosts), "rollback", "demo", "--restart", "--yes", "--force", "--timeout", "60"])
    _out, err = capsys.readouterr()
    assert code == 0, err
    assert _fraction(hosts) == "0.85"


def test_a_forced_restart_over_an_orphan_fails_gpu_busy_and_names_it(
    hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = parse_config(hosts.read_text(), hosts)
    demo = DemoBackend("v", cfg.host("v"))
    demo.read_unit()
    demo.set_foreign_process(mib=20480, pid=4243, name="VLLM::EngineCore")
    code = main(["--hosts", str(hosts), "apply", "v", "--set", "max-num-seqs=64", "--restart", "--yes", "--force",
                 "--timeout", "60"])
    _out, err = capsys.readouterr()
    assert code == 1, err
    assert "gpu_busy" in err
    assert "hint: orphaned engine processes of the previous boot hold the memory: PID 4243 (VLLM::EngineCore" in err
    assert "end them: kill 4243; sleep 10; kill -9 4243" in err


async def test_the_service_restart_is_refused_unless_forced() -> None:
    cfg = HostConfig(demo=True, demo_speed=400.0)
    backend = DemoBackend("demo", cfg)
    backend.orphans = [ORPHAN]
    try:
        plan = service.plan_restart("demo", cfg, backend)
        out = await service.execute(plan, backend)
        assert (out.code, out.status) == (service.EXIT_REFUSED, "refused")
        assert any("PID 31337" in m for m in out.messages)
        backend.orphans = []
        plan = service.plan_restart("demo", cfg, backend)
        out = await service.execute(plan, backend)
        assert out.status == "restarted"
        backend.orphans = [ORPHAN]
        plan = service.plan_restart("demo", cfg, backend)
        plan.force = True
        out = await service.execute(plan, backend)
        assert out.status == "restarted"
    finally:
        await backend.close()


@dataclass
class FakeOrphan:
    pid: int
    pid_file: Path  # names its (gone) session leader, as a start_command's `echo $! > FILE` does


@pytest.fixture
def fake_engine_core(tmp_path: Path) -> Iterator[FakeOrphan]:
    """A process titled ``VLLM::EngineCore`` whose session leader (a shell started with setsid,
    the pid file's PID) is gone: what ``ps`` shows of a real one after its API server's
    ``kill -9``."""
    pid_file = tmp_path / "server.pid"
    out = subprocess.run(
        ["setsid", "bash", "-c", f"echo $$ > {pid_file}; "
         "(exec -a VLLM::EngineCore sleep 120) </dev/null >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True, timeout=30,
    )
    pid = int(out.stdout.strip())
    try:
        yield FakeOrphan(pid, pid_file)
    finally:
        os.kill(pid, signal.SIGKILL)


async def test_the_local_host_names_a_real_orphan_from_ps(tmp_path: Path, fake_engine_core: FakeOrphan) -> None:
    fake = fake_engine_core
    other = LocalBackend("other", HostConfig(local=True, log_file=str(tmp_path / "x.log")))
    backend = LocalBackend("box", HostConfig(local=True, log_file=str(tmp_path / "x.log"),
                                             pid_file=str(fake.pid_file)))
    try:
        deadline = time.monotonic() + 30
        found = await host_orphans(backend)
        while fake.pid not in {o.pid for o in found} and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            found = await host_orphans(backend)
        assert await host_orphans(other) == []  # no pid file: the machine's orphans are not its server's
    finally:
        await backend.close()
        await other.close()
    mine = [o for o in found if o.pid == fake.pid]
    assert mine, found
    assert mine[0].title == "VLLM::EngineCore"
    assert mine[0].engine == "vllm"
    assert mine[0].rss_mib is not None


@pytest.mark.sshd
@requires_sshd
async def test_an_ssh_host_names_a_real_orphan_from_ps(tmp_path: Path, fake_engine_core: FakeOrphan) -> None:
    sshd = start_sshd(tmp_path / "sshd", user="root")
    try:
        text = textwrap.dedent(f"""\
            [hosts.box]
            ssh = "{sshd.target}"
            port = {sshd.port}
            identity_file = "{sshd.client_key}"
            known_hosts = "{sshd.known_hosts}"
            log_file = "{tmp_path / "x.log"}"
            pid_file = "{fake_engine_core.pid_file}"
            """)
        cfg = parse_config(text, tmp_path / "hosts.toml").host("box")
        backend = SshBackend("box", cfg)
        try:
            await backend.start()
            found = await host_orphans(backend)
        finally:
            await backend.close()
    finally:
        sshd.stop()
    mine = [o for o in found if o.pid == fake_engine_core.pid]
    assert mine, found
    assert mine[0].title == "VLLM::EngineCore"
