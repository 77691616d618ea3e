"""Orphaned engine processes on the real vLLM CPU build (issue 24): a ``kill -9`` of the API server
leaves its ``VLLM::EngineCore`` (and any ``VLLM::Worker``) alive, reparented, holding their
memory. kvtui names them on the local host, and ``kvtui apply --restart`` is refused (exit 4, the
PIDs and the command to end them) until they are gone.

Its own server (the shared one of ``test_vllm_cpu`` is not killed here): one boot, loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_support import BOOT_TIMEOUT, EXIT_TIMEOUT, LocalServer, private_env, require_engine
from proc_support import wait_group_gone
from sshd_support import free_port

pytestmark = [pytest.mark.engine, pytest.mark.xdist_group("engine")]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalServer]:
    python = require_engine()
    tmp_path.chmod(0o755)
    s = LocalServer(tmp_path, python, free_port(), private_env(tmp_path))
    s.write()
    try:
        yield s
    finally:
        s.kill_all()  # the orphans are still in its process group


async def _orphans(hosts: Path) -> list[object]:
    from kvtui.config import load_config
    from kvtui.hosts.factory import make_backend
    from kvtui.hosts.orphans import host_orphans

    backend = make_backend("cpu", load_config(str(hosts)).host("cpu"))
    try:
        return list(await host_orphans(backend))
    finally:
        await backend.close()


async def test_kill_9_of_the_api_server_leaves_orphans_that_refuse_the_restart(server: LocalServer) -> None:
    from kvtui.engines.orphans import Orphan

    server.start()
    code, out, err, _ = await server.kvtui("wait", "cpu", "--json", "--timeout", str(BOOT_TIMEOUT))
    assert code == 0, err[-3000:]
    assert await _orphans(server.hosts) == []  # the server is alive: its EngineCore is no orphan

    api = server.server_pid()
    assert api is not None
    os.kill(api, signal.SIGKILL)
    t0 = time.monotonic()
    found: list[Orphan] = []
    while time.monotonic() - t0 < 60:
        found = [o for o in await _orphans(server.hosts) if isinstance(o, Orphan)]
        if any(o.title.startswith("VLLM::EngineCore") for o in found):
            break
        await asyncio.sleep(0.5)
    titles = sorted(o.title for o in found)
    print(f"orphans after kill -9 of the API server {api}: "
          + ", ".join(f"{o.pid} {o.title} {o.holds}" for o in found))
    assert any(t.startswith("VLLM::EngineCore") for t in titles), found
    assert all(o.engine == "vllm" for o in found)

    before = server.script.read_text()
    code, out, err, _ = await server.kvtui("apply", "cpu", "--set", "max-num-seqs=16", "--restart", "--yes")
    assert code == 4, (out, err)
    engine_core = next(o for o in found if o.title.startswith("VLLM::EngineCore"))
    assert f"PID {engine_core.pid} (VLLM::EngineCore" in err
    assert f"kill {' '.join(str(o.pid) for o in found)}" in err
    assert server.script.read_text() == before  # nothing written

    for o in found:  # the command kvtui names, done here at once
        with contextlib.suppress(ProcessLookupError):
            os.kill(o.pid, signal.SIGKILL)
    await asyncio.to_thread(wait_group_gone, api, EXIT_TIMEOUT)
    assert await _orphans(server.hosts) == []
    code, out, err, _ = await server.kvtui("apply", "cpu", "--set", "max-num-seqs=16", "--restart", "--yes",
                                        "--dry-run")
    assert code == 0, (out, err)
    assert "refused" not in err
