"""Orphaned engine processes on the real vLLM CPU build (issue 24): a ``kill -9`` of the API server
leaves its ``VLLM::EngineCore`` (and any ``VLLM::Worker``) alive, reparented, holding their
memory. kvtui names them on the local host, and ``kvtui apply --restart`` is refused (exit 4, the
PIDs and the command to end them) until they are gone.

Its own server (the shared one of ``test_vllm_cpu`` is not killed here): one boot, loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_support import require_engine, write_model
from proc_support import wait_group_gone
from sshd_support import free_port

pytestmark = [pytest.mark.engine, pytest.mark.xdist_group("engine")]

BOOT_TIMEOUT = 300  # seconds for one boot on a loaded 2-core machine (about 40 s when idle)
EXIT_TIMEOUT = 60


@dataclass
class Server:
    work: Path
    python: Path
    port: int
    env: dict[str, str]

    @property
    def script(self) -> Path:
        return self.work / "launch.sh"

    @property
    def log(self) -> Path:
        return self.work / "server.log"

    @property
    def pid_file(self) -> Path:
        return self.work / "server.pid"

    @property
    def hosts(self) -> Path:
        return self.work / "hosts.toml"

    @property
    def start_command(self) -> str:
        return f"setsid nohup {self.script} >> {self.log} 2>&1 < /dev/null & echo $! > {self.pid_file}"

    def write(self) -> None:
        write_model(self.work)
        self.script.write_text(textwrap.dedent(f"""\
            #!/bin/bash
            export VLLM_CPU_KVCACHE_SPACE=1
            exec {self.python} -m vllm.entrypoints.openai.api_server \\
              --model {self.work / "model"} \\
              --load-format dummy \\
              --skip-tokenizer-init \\
              --enforce-eager \\
              --max-model-len 4096 \\
              --max-num-seqs 8 \\
              --host 127.0.0.1 \\
              --port {self.port}
            """))
        self.script.chmod(0o755)
        self.log.touch()
        self.hosts.write_text(textwrap.dedent(f"""\
            [hosts.cpu]
            local = true
            engine = "vllm"
            log_file = "{self.log}"
            launch_script = "{self.script}"
            start_command = {json.dumps(self.start_command)}
            stop_command = "kill $(cat {self.pid_file})"
            """))

    def start(self) -> None:
        subprocess.run(self.start_command, shell=True, check=True, cwd=self.work)

    def pid(self) -> int:
        return int(self.pid_file.read_text().strip())

    async def kvtui(self, *args: str, timeout: float = BOOT_TIMEOUT + 60) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kvtui", "--hosts", str(self.hosts), *args,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, cwd=self.work,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            out, err = await proc.communicate()
            raise AssertionError(f"kvtui {' '.join(args)} did not end within {timeout} s:\n{err.decode()}") from None
        return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    python = require_engine()
    tmp_path.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "KVTUI_HOSTS")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"), TZ="UTC")
    s = Server(tmp_path, python, free_port(), env)
    s.write()
    try:
        yield s
    finally:
        with contextlib.suppress(OSError, ValueError):
            pgid = s.pid()
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)  # the orphans are still in its process group
            wait_group_gone(pgid, EXIT_TIMEOUT)


async def _orphans(hosts: Path) -> list[object]:
    from kvtui.config import load_config
    from kvtui.hosts.factory import make_backend
    from kvtui.hosts.orphans import host_orphans

    backend = make_backend("cpu", load_config(str(hosts)).host("cpu"))
    try:
        return list(await host_orphans(backend))
    finally:
        await backend.close()


async def test_kill_9_of_the_api_server_leaves_orphans_that_refuse_the_restart(server: Server) -> None:
    from kvtui.engines.orphans import Orphan

    server.start()
    code, out, err = await server.kvtui("wait", "cpu", "--json", "--timeout", str(BOOT_TIMEOUT))
    assert code == 0, err[-3000:]
    assert await _orphans(server.hosts) == []  # the server is alive: its EngineCore is no orphan

    api = server.pid()
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
    code, out, err = await server.kvtui("apply", "cpu", "--set", "max-num-seqs=16", "--restart", "--yes")
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
    code, out, err = await server.kvtui("apply", "cpu", "--set", "max-num-seqs=16", "--restart", "--yes",
                                        "--dry-run")
    assert code == 0, (out, err)
    assert "refused" not in err
