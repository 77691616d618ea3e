"""The guarded write path on a ``local = true`` host (LocalBackend: real ``sh``, real files), with
the same fake ``systemctl`` as the sshd suite first in PATH — fast, and run where no sshd is."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kvtui import changes
from kvtui.config import HostConfig
from kvtui.flags import get_flag, parse_edit_args
from kvtui.hosts import service
from kvtui.hosts.local import LocalBackend

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import FakeTools
from test_service_sshd import DROPIN, ENV_DROPIN, FRAGMENT, RELOAD_HOOK


@pytest.fixture
async def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[LocalBackend, HostConfig, Path]]:
    tools = FakeTools.create(tmp_path / "host")
    hook = tools.state / "hooks" / "daemon-reload"
    hook.write_text(RELOAD_HOOK.format(py=sys.executable, state=str(tools.state)))
    hook.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools.bin_dir}:{os.environ['PATH']}")
    etc = tmp_path / "etc"
    (etc / "llm.service.d").mkdir(parents=True)
    (etc / "llm.service").write_text(FRAGMENT)
    (etc / "llm.service.d" / "10-flags.conf").write_text(DROPIN)
    (etc / "llm.service.d" / "20-env.conf").write_text(ENV_DROPIN)
    log = tmp_path / "llm.log"
    log.write_text("")
    tools.set_unit("llm", FragmentPath=str(etc / "llm.service"),
                   DropInPaths=f"{etc}/llm.service.d/10-flags.conf {etc}/llm.service.d/20-env.conf")
    cfg = HostConfig(local=True, unit="llm.service", log_file=str(log))
    b = LocalBackend("box", cfg)
    yield b, cfg, etc
    await b.close()


async def test_local_apply_then_rollback(host: tuple[LocalBackend, HostConfig, Path]) -> None:
    b, cfg, etc = host
    drop = etc / "llm.service.d" / "10-flags.conf"
    before = drop.read_text()
    plan = await changes.plan_apply("box", cfg, b, parse_edit_args(["max-running-requests=32"], ["port"]),
                                    boots_timeout=1)
    assert plan.source.path == str(drop)
    assert plan.prediction is None
    assert plan.prediction_note is not None  # the log holds no boot: said, not refused
    assert not plan.refused
    out = await service.execute(plan, b)
    assert out.code == 0, out.messages
    new = drop.read_text()
    assert get_flag(new, "unit", "max-running-requests") == "32"
    assert get_flag(new, "unit", "port") is None
    assert "# lowered after a capture OOM" in new
    loaded = etc.parent / "host" / "state" / "units" / "llm.service" / "ExecStart"  # by daemon-reload
    assert "--max-running-requests 32" in _read(loaded)
    rb = await changes.plan_rollback("box", cfg, b)
    assert rb.backup_path == out.backup_path
    assert "-    --max-running-requests 32\n+    --port 30000\n" in rb.diff
    rb_out = await service.execute(rb, b)
    assert rb_out.code == 0, rb_out.messages
    assert drop.read_text() == before
    # a second rollback finds no backup that differs from the file: nothing to do
    again = await changes.plan_rollback("box", cfg, b)
    assert not again.changed


def _read(p: Path) -> str:
    return p.read_text()


async def test_local_readonly_and_container(tmp_path: Path) -> None:
    cfg = HostConfig(local=True, log_file=str(tmp_path / "x.log"), container="sglang")
    b = LocalBackend("box", cfg)
    with pytest.raises(service.ServiceError) as exc:
        await changes.plan_apply("box", cfg, b, parse_edit_args(["tp=2"]))
    assert exc.value.code == 4
    assert "containers are read-only" in str(exc.value)
    await b.close()
