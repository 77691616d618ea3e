"""``service.plan_restart`` / ``service.execute``: the one restart path (the console's ``R``, the
end of an apply) on a demo host, a local unit host (the fake ``systemctl`` first in PATH) and
hosts kvtui must not or cannot restart; every attempt audited."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from kvtui.audit import read_entries
from kvtui.boot import BootStatus
from kvtui.config import HostConfig
from kvtui.hosts import service
from kvtui.hosts.local import LocalBackend
from kvtui.sim.backend import DemoBackend

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import FakeTools


def test_who_can_be_restarted() -> None:
    demo = DemoBackend("demo", HostConfig(demo=True))
    assert service.restart_unavailable("demo", HostConfig(demo=True), demo) is None
    ro = service.restart_unavailable("demo", HostConfig(demo=True, readonly=True), demo)
    assert ro is not None
    assert "readonly" in ro
    box = HostConfig(local=True, log_file="/var/log/x.log")
    why = service.restart_unavailable("box", box, None)
    assert why is not None
    assert "no unit and no start_command/stop_command" in why
    ctr = service.restart_unavailable("gpu", HostConfig(local=True, container="sglang"), None)
    assert ctr is not None
    assert "container 'sglang'" in ctr
    assert service.restart_unavailable("u", HostConfig(local=True, unit="llm.service"), None) is None
    cmds = HostConfig(local=True, log_file="/l", start_command="run.sh", stop_command="pkill -f sglang")
    assert service.restart_unavailable("c", cmds, None) is None


async def test_a_refused_restart_is_audited_and_changes_nothing(tmp_path: Path) -> None:
    cfg = HostConfig(local=True, log_file=str(tmp_path / "x.log"))
    backend = LocalBackend("box", cfg)
    try:
        plan = service.plan_restart("box", cfg, backend)
        assert plan.refused
        assert plan.how is None
        out = await service.execute(plan, backend)
    finally:
        await backend.close()
    assert (out.code, out.status) == (service.EXIT_REFUSED, "refused")
    entry = read_entries()[-1]
    assert (entry["action"], entry["outcome"], entry["host"]) == ("restart", "refused", "box")


async def test_demo_restart_followed_to_ready() -> None:
    clock = [1_777_000_000.0]
    cfg = HostConfig(demo=True, demo_speed=400.0)
    backend = DemoBackend("demo", cfg, clock=lambda: clock[0], poll_interval=0.01)
    backend.read_unit()  # the first boot starts now
    clock[0] += 5.0
    await backend.start()
    try:
        plan = service.plan_restart("demo", cfg, backend, follow=True, timeout=30.0)
        assert plan.how == "demo"
        assert [s.title for s in plan.steps][-1] == "follow the new boot until it is ready or failed"
        seen: list[str] = []

        async def advance() -> None:  # the demo's clock runs while the restart is followed
            while True:
                await asyncio.sleep(0.01)
                clock[0] += 0.25

        ticker = asyncio.create_task(advance())
        try:
            out = await service.execute(plan, backend, seen.append)
        finally:
            ticker.cancel()
    finally:
        await backend.close()
    assert out.status == "ready", out.messages
    assert out.code == 0
    assert out.boot is not None
    assert out.boot.status is BootStatus.READY
    assert seen[0] == "restarting the unit"
    assert "boot: ready" in seen
    assert service.outcome_headline(out, "restart", "demo") == "demo: restarted; the new boot is ready"
    entry = read_entries()[-1]
    assert (entry["action"], entry["how"], entry["outcome"], entry["exit"]) == ("restart", "demo", "ready", 0)


async def test_unit_restart_runs_systemctl_with_sudo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = FakeTools.create(tmp_path / "host")
    monkeypatch.setenv("PATH", f"{tools.bin_dir}:{os.environ['PATH']}")
    sudo = tmp_path / "sudo-bin"
    sudo.mkdir()
    (sudo / "sudo").write_text('#!/bin/sh\n[ "$1" = "-n" ] && shift\nexec "$@"\n')
    (sudo / "sudo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{sudo}:{os.environ['PATH']}")
    log = tmp_path / "llm.log"
    log.write_text("")
    tools.set_unit("llm", FragmentPath=str(tmp_path / "llm.service"))
    cfg = HostConfig(local=True, unit="llm.service", log_file=str(log), sudo=True)
    backend = LocalBackend("box", cfg)
    try:
        plan = service.plan_restart("box", cfg, backend)
        assert plan.how == "unit"
        assert plan.cmd["restart"].startswith("sudo -n ")
        assert "systemctl restart llm.service" in plan.cmd["restart"]
        out = await service.execute(plan, backend)
    finally:
        await backend.close()
    assert (out.code, out.status) == (0, "restarted"), out.messages
    assert any(c.startswith("restart llm.service") for c in tools.systemctl_calls())
    entry = read_entries()[-1]
    assert (entry["action"], entry["how"], entry["unit"]) == ("restart", "unit", "llm.service")
    assert entry["commands"] == [plan.cmd["restart"]]
