"""Proving "ready" with a real request (issue 14): the probe's three steps against a real HTTP
server on 127.0.0.1 (the demo host's own, and a small stand-in of SGLang's endpoints), ``kvtui
wait``'s verdict (ready only after the 1-token answer; ``not_serving`` when the port never
answers), and the SSH backend's real OpenSSH local port forward, closed after the probe and with
the backend (no leftover listeners). Loopback only."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import shutil
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kvtui.commands.wait import wait_for_boot
from kvtui.config import DemoHost
from kvtui.hosts.probe import HttpError, http_request, probe, probe_address
from kvtui.sim.backend import DemoBackend

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import requires_sshd, start_sshd

FIXTURES = Path(__file__).parent / "fixtures"


class Engine:
    """A stand-in of SGLang's endpoints on 127.0.0.1: 503 for ``warmup`` health checks, then 200;
    ``/v1/models`` and one-token ``/v1/completions``; records what it was asked."""

    def __init__(self, warmup: int = 0, model: str = "llama-70b", completions: int = 200,
                 tokenizer: bool = True) -> None:
        self.warmup = warmup
        self.tokenizer = tokenizer
        self.model = model
        self.completions = completions
        self.asked: list[str] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> Engine:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode()
        method, path = line.split(" ")[:2]
        length = 0
        while (h := await reader.readline()) not in (b"\r\n", b""):
            k, _, v = h.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
        body = json.loads(await reader.readexactly(length)) if length else None
        self.asked.append(f"{method} {path}" + (f" {body}" if body else ""))
        if path == "/health_generate":
            status, doc = (503, {}) if self.warmup > 0 else (200, {})
            self.warmup -= 1
        elif path == "/v1/models":
            status, doc = 200, {"data": [{"id": self.model}]}
        elif path == "/v1/completions" and not self.tokenizer and isinstance(body["prompt"], str):
            # vLLM started with --skip-tokenizer-init (the real-engine suite's server answers so)
            status, doc = 400, {"error": {"message": "Tokenizer not available when `skip_tokenizer_init=True`"}}
        elif path == "/v1/completions":
            status = self.completions
            doc = {"choices": [{"text": "!"}]} if status == 200 else {"error": "boom"}
        else:
            status, doc = 404, {}
        data = json.dumps(doc).encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()


async def test_a_server_without_its_tokenizer_answers_a_token_id_prompt() -> None:
    e = await Engine(tokenizer=False).start()
    try:
        res = await probe_address(("127.0.0.1", e.port), timeout=10, retry_s=0.01)
        assert res.ok, res.error
        assert e.asked[-2].startswith("POST /v1/completions {'model': 'llama-70b', 'prompt': 'Hello'")
        assert e.asked[-1].startswith("POST /v1/completions {'model': 'llama-70b', 'prompt': [1], 'max_tokens': 1")
        assert any("again with a token-id prompt" in s for s in res.steps)
    finally:
        await e.close()


async def test_a_refused_token_id_prompt_is_not_serving() -> None:
    e = await Engine(completions=400).start()
    try:
        res = await probe_address(("127.0.0.1", e.port), timeout=10, retry_s=0.01)
        assert not res.ok
        assert res.error is not None
        assert res.error.startswith("/v1/completions: HTTP 400")
        assert e.asked[-1].startswith("POST /v1/completions {'model': 'llama-70b', 'prompt': [1]")
    finally:
        await e.close()


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    e = await Engine(warmup=2).start()
    yield e
    await e.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_three_steps_and_the_warmup(engine: Engine) -> None:
    res = await probe_address(("127.0.0.1", engine.port), timeout=10, retry_s=0.01)
    assert res.ok, res.error
    assert res.model == "llama-70b"
    assert res.ms is not None
    assert res.headline().startswith("answered a 1-token request in ")
    assert engine.asked[:2] == ["GET /health_generate", "GET /health_generate"]  # 503 while warming up
    assert engine.asked[-2] == "GET /v1/models"
    assert engine.asked[-1].startswith("POST /v1/completions {'model': 'llama-70b', 'prompt': 'Hello', 'max_tokens': 1")


async def test_a_failing_completion_is_not_serving() -> None:
    e = await Engine(completions=500).start()
    try:
        res = await probe_address(("127.0.0.1", e.port), timeout=5, model="other")
    finally:
        await e.close()
    assert not res.ok
    assert res.error is not None
    assert res.error.startswith("/v1/completions: HTTP 500")
    assert "'model': 'other'" in e.asked[-1]  # probe_model overrides the listed name


async def test_a_port_that_never_answers_times_out_with_the_error() -> None:
    res = await probe_address(("127.0.0.1", free_port()), timeout=1.0, retry_s=0.05)
    assert not res.ok
    assert res.error is not None
    assert "no healthy answer within 1 s" in res.error
    assert "Connect call failed" in res.error or "refused" in res.error.lower()


async def test_only_loopback_is_ever_asked() -> None:
    with pytest.raises(HttpError, match="loopback addresses only"):
        await http_request(("10.0.0.1", 80), "GET", "/health")


async def test_the_demo_host_serves_the_endpoints(tmp_path: Path) -> None:
    b = DemoBackend("demo", DemoHost(demo_speed=400.0), state_dir=tmp_path / "demo")
    await b.start()
    try:
        res = await probe(b, 30000, timeout=30)
        assert res.ok, res.error  # ready within the timeout at ×400
        assert res.model == "kimi-k2.6"
        assert res.port == 30000
        wrong = await probe(b, 30001, timeout=0.5)
        assert not wrong.ok  # nothing listens on another port than the server's arguments name
        b.stop()
        # a stopped server answers until its processes are gone (the simulated shutdown: ms at x400)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while b.serving_now() is not None:
            assert loop.time() < deadline, "the stopped demo server's processes never went"
            await asyncio.sleep(0.01)
        stopped = await probe(b, 30000, timeout=0.5)
        assert not stopped.ok
    finally:
        await b.close()


def _wait_args(host: str, **kw: object) -> argparse.Namespace:
    base = {"host": host, "timeout": 20.0, "next": False, "follow_restarts": False, "json": True, "hosts": None,
            "probe": None}
    base.update(kw)
    return argparse.Namespace(**base)


def _local_log(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    text = (FIXTURES / "sglang-0.5.10-llama70b-tp4-ready.journal").read_text()
    log.write_text(text.replace("port=30000", f"port={port}"))
    (tmp_path / "hosts.toml").write_text(f'[hosts.box]\nlocal = true\nlog_file = "{log}"\n')


async def test_wait_is_ready_only_after_the_answer(tmp_path: Path, engine: Engine) -> None:
    _local_log(tmp_path, engine.port)
    out, err = io.StringIO(), io.StringIO()
    code = await wait_for_boot(_wait_args("box"), stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    assert "✔ answered a 1-token request in" in err.getvalue()
    doc = json.loads(out.getvalue())
    assert doc["status"] == "ready"
    assert doc["probe"]["ok"] is True
    assert any(a.startswith("POST /v1/completions") for a in engine.asked)


async def test_wait_fails_not_serving_when_the_port_never_answers(tmp_path: Path) -> None:
    _local_log(tmp_path, free_port())
    out, err = io.StringIO(), io.StringIO()
    # the probe takes the time the wait has left (all of it: the port never answers): 10 s, of which
    # reaching "ready" (a follower's start, on a loaded machine) may take a few; 3 s was not always enough
    code = await wait_for_boot(_wait_args("box", timeout=10.0), stdout=out, stderr=err)
    assert code == 1, err.getvalue()
    doc = json.loads(out.getvalue())
    assert doc["status"] == "failed"
    assert doc["failure"]["kind"] == "not_serving"
    assert "no healthy answer" in doc["failure"]["message"]
    assert "not_serving" in err.getvalue()
    # turned off: the log's word is taken
    (tmp_path / "hosts.toml").write_text((tmp_path / "hosts.toml").read_text() + "probe = false\n")
    out = io.StringIO()
    assert await wait_for_boot(_wait_args("box", timeout=30.0), stdout=out, stderr=io.StringIO()) == 0  # ends at ready
    assert "probe" not in json.loads(out.getvalue())


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@requires_sshd
@pytest.mark.sshd
async def test_a_real_openssh_port_forward_and_no_leftover_listener(tmp_path: Path, engine: Engine) -> None:
    from kvtui.hosts.ssh import SshBackend

    sshd = start_sshd(tmp_path / "sshd", user="root")
    b = SshBackend("gpu", sshd.host_config(unit="x.service"), ssh_config=[], connect_timeout=5.0)
    try:
        await b.start()
        res = await probe(b, engine.port, timeout=10)  # through the forward to 127.0.0.1:port on the host
        assert res.ok, res.error
        assert res.port == engine.port
        assert b.forwards_open() == 0  # closed after the probe
        # a forward held open closes with the backend (the console closing its host)
        cm = b.open_port(engine.port)
        addr = await cm.__aenter__()
        assert addr[1] != engine.port
        assert (await http_request(addr, "GET", "/v1/models")).status == 200
        assert b.forwards_open() == 1
        await b.close()
        assert b.forwards_open() == 0
        await asyncio.sleep(0)
        assert _refused(addr[1])
        await cm.__aexit__(None, None, None)
    finally:
        await b.close()
        sshd.stop()
        shutil.rmtree(tmp_path / "sshd", ignore_errors=True)
