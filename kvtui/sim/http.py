"""The demo host's HTTP endpoints: a small in-process server on 127.0.0.1 behind the simulated
server's port, answering as the engine would at that moment of the simulation — the connection
is dropped while no server runs (or on another port than the one its arguments name), ``/health``
and ``/health_generate`` answer 503 until the boot is ready, then 200; ``/v1/models`` lists the
served model; ``/v1/completions`` returns one token; ``/metrics`` the simulated engine's Prometheus
text (``kvtui.sim.metrics``; 404 when the backend serves none, as SGLang without
``--enable-metrics``). Only while ``open_port`` is held."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from kvtui.sim.unit import UnitInfo

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Serving:
    """What the simulated server is doing now: None when no server process runs."""

    ready: bool
    port: int | None
    model: str


def arg_value(argv: tuple[str, ...], *names: str) -> str | None:
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def serving_of(unit: UnitInfo, ready: bool) -> Serving:
    port_s = arg_value(unit.argv, "--port")
    port = int(port_s) if port_s is not None and port_s.isdigit() else None
    model = (arg_value(unit.argv, "--served-model-name") or arg_value(unit.argv, "--model-path", "--model")
             or (unit.argv[2] if len(unit.argv) > 2 and unit.argv[1] == "serve" else "default"))
    return Serving(ready, port, model)


MetricsText = Callable[[], str | None]


def _text(body: str) -> bytes:
    data = body.encode()
    return (f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


def _answer(status: int, doc: object) -> bytes:
    body = json.dumps(doc).encode()
    reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable", 400: "Bad Request"}.get(status, "")
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int,
                  now_serving: Callable[[], Serving | None], metrics: MetricsText | None = None) -> None:
    try:
        s = now_serving()
        if s is None or s.port != port:
            writer.transport.abort()  # nothing listens there: the client sees the connection go
            return
        request = await asyncio.wait_for(reader.readline(), 10)
        method, _, rest = request.decode("latin-1").partition(" ")
        path = rest.split(" ", 1)[0]
        length = 0
        while True:
            line = await asyncio.wait_for(reader.readline(), 10)
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            if k.strip().lower() == "content-length" and v.strip().isdigit():
                length = min(int(v.strip()), 1 << 16)
        body = await reader.readexactly(length) if length else b""
        if method == "GET" and path == "/metrics" and s.ready and metrics is not None:
            text = metrics()
            writer.write(_text(text) if text is not None else _answer(404, {"detail": "Not Found"}))
        else:
            writer.write(_route(method, path, body, s))
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _route(method: str, path: str, body: bytes, s: Serving) -> bytes:
    if path in ("/health", "/health_generate"):
        return _answer(200, {}) if s.ready else _answer(503, {"detail": "server is starting"})
    if not s.ready:
        return _answer(503, {"detail": "server is starting"})
    if method == "GET" and path == "/v1/models":
        return _answer(200, {"object": "list", "data": [{"id": s.model, "object": "model", "owned_by": "sglang"}]})
    if method == "POST" and path == "/v1/completions":
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            return _answer(400, {"error": {"message": "bad JSON"}})
        if not isinstance(req, dict) or req.get("model") != s.model:
            return _answer(404, {"error": {"message": f"The model `{req.get('model') if isinstance(req, dict) else ''}`"
                                                      " does not exist."}})
        return _answer(200, {"id": "cmpl-demo", "object": "text_completion", "model": s.model,
                             "choices": [{"index": 0, "text": " world", "finish_reason": "length"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
    return _answer(404, {"detail": "Not Found"})


@contextlib.asynccontextmanager
async def serve_port(port: int, now_serving: Callable[[], Serving | None],
                     metrics: MetricsText | None = None) -> AsyncIterator[tuple[str, int]]:
    """A loopback server that answers as the simulated server on ``port``; closed on exit.
    ``metrics``: the ``/metrics`` text now (None: 404)."""
    server = await asyncio.start_server(lambda r, w: _handle(r, w, port, now_serving, metrics), LOOPBACK, 0)
    try:
        yield LOOPBACK, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
