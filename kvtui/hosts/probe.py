"""Proving "ready" with a real request: after the engine says ready, ask the server itself.

``probe(backend, port, …)`` opens the server's port through the backend (``PortOpener``: a local
port forward over the host's SSH connection, the port itself on this machine, the demo host's own
in-process server) — always the loopback address of the server's host, never another address —
and then, over plain HTTP/1.1 on asyncio streams (non-blocking, every read bounded):

1. ``GET /health_generate`` (SGLang: runs a 1-token generation), ``/health`` when that is not
   there (vLLM, older builds): retried while the port refuses or answers 503, until the timeout;
2. ``GET /v1/models``: 200, and the served model's name (``data[0].id``) unless one was given;
3. ``POST /v1/completions`` with that model, ``max_tokens`` 1: 200 with a choice.

The boot is ready once step 3 answers (``answered a 1-token request in 84 ms``); a server that
does not within the timeout is ``not_serving`` with the last HTTP error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from kvtui.boot import Boot, BootStatus, Failure, hint_for
from kvtui.engines.events import FailureKind, Phase

LOOPBACK = "127.0.0.1"
MAX_BODY = 1 << 20  # bytes of a response kept: the probe's answers are small
DEFAULT_PROBE_TIMEOUT_S = 60.0
RETRY_S = 0.5
REQUEST_TIMEOUT_S = 30.0


@runtime_checkable
class PortOpener(Protocol):
    """A backend that can reach the server's port: ``open_port(port)`` yields a loopback address
    on this machine that reaches ``127.0.0.1:port`` on the server's host, and closes it after."""

    def open_port(self, port: int) -> AbstractAsyncContextManager[tuple[str, int]]: ...


class HttpError(Exception):
    """A request that did not get an answer (refused, reset, timed out, not HTTP)."""


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    body: bytes

    def json(self) -> object:
        try:
            return json.loads(self.body.decode("utf-8", "replace"))
        except ValueError:
            return None

    def short(self) -> str:
        text = " ".join(self.body.decode("utf-8", "replace").split())
        return f"HTTP {self.status}" + (f": {text[:160]}" if text else "")


async def http_request(addr: tuple[str, int], method: str, path: str, body: Mapping[str, object] | None = None,
                       *, timeout: float = REQUEST_TIMEOUT_S, max_body: int = MAX_BODY) -> HttpAnswer:
    """One HTTP/1.1 request (``Connection: close``) to a loopback address; at most ``max_body``
    bytes of the answer are read."""
    host, port = addr
    if host != LOOPBACK:
        raise HttpError(f"refusing to probe {host}: the probe speaks to loopback addresses only")
    payload = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kvtui-probe\r\n"
            "Accept: application/json\r\nConnection: close\r\n")
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(head.encode() + b"\r\n" + payload)
                await writer.drain()
                return await _read_answer(reader, max_body)
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
    except TimeoutError as exc:
        raise HttpError(f"no answer from {path} within {timeout:g} s") from exc
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        raise HttpError(f"{path}: {exc.__class__.__name__}: {exc}".rstrip(": ")) from exc


async def _read_answer(reader: asyncio.StreamReader, max_body: int = MAX_BODY) -> HttpAnswer:
    status_line = await reader.readline()
    if not status_line:
        raise ValueError("the connection closed without an answer (nothing listens on that port?)")
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {status_line[:60]!r}")
    status = int(parts[1])
    length: int | None = None
    chunked = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        key = name.strip().lower()
        if key == "content-length" and value.strip().isdigit():
            length = int(value.strip())
        elif key == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        body = bytearray()
        while len(body) < max_body:
            size_line = await reader.readline()
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            if size > max_body - len(body):  # the bound: keep what fits, read no further
                body += await reader.readexactly(max_body - len(body))
                break
            body += await reader.readexactly(size)
            await reader.readline()
        return HttpAnswer(status, bytes(body[:max_body]))
    if length is not None:
        return HttpAnswer(status, await reader.readexactly(min(length, max_body)))
    rest = bytearray()  # no length: until the server closes (``read`` returns what has arrived so far)
    while len(rest) < max_body:
        got = await reader.read(max_body - len(rest))
        if not got:
            break
        rest += got
    return HttpAnswer(status, bytes(rest))


@dataclass(slots=True)
class ProbeResult:
    """What the probe found: ``ok`` once a 1-token completion answered; ``ms`` its latency."""

    ok: bool
    ms: float | None = None
    model: str | None = None
    error: str | None = None
    port: int | None = None
    steps: list[str] = field(default_factory=list)

    def headline(self) -> str:
        if self.ok and self.ms is not None:
            return f"answered a 1-token request in {self.ms:.0f} ms"
        return f"not serving: {self.error or 'no answer'}"

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "ms": None if self.ms is None else round(self.ms, 1), "model": self.model,
                "error": self.error, "port": self.port, "steps": list(self.steps)}


async def probe_address(addr: tuple[str, int], *, model: str | None = None, timeout: float = DEFAULT_PROBE_TIMEOUT_S,
                        clock: Callable[[], float] = time.monotonic, retry_s: float = RETRY_S) -> ProbeResult:
    """The three steps against ``addr`` (a loopback address), within ``timeout``."""
    out = ProbeResult(False, port=addr[1])
    deadline = clock() + timeout
    last = "no answer"

    def left() -> float:
        return deadline - clock()

    # 1. health: retried while the port refuses or the server is still starting
    health: str | None = None
    while health is None:
        for path in ("/health_generate", "/health"):
            try:
                ans = await http_request(addr, "GET", path, timeout=max(0.1, min(REQUEST_TIMEOUT_S, left())))
            except HttpError as exc:
                last = str(exc)
                break
            if ans.status == 200:
                health = path
                break
            last = f"{path}: {ans.short()}"
            if ans.status != 404:
                break
        if health is None:
            if left() <= retry_s:
                out.error = f"no healthy answer within {timeout:g} s ({last})"
                return out
            await asyncio.sleep(retry_s)
    out.steps.append(f"{health}: 200")
    # 2. the served model
    try:
        ans = await http_request(addr, "GET", "/v1/models", timeout=max(0.1, min(REQUEST_TIMEOUT_S, left())))
    except HttpError as exc:
        out.error = str(exc)
        return out
    if ans.status != 200:
        out.error = f"/v1/models: {ans.short()}"
        return out
    name = model or _first_model(ans.json())
    out.steps.append(f"/v1/models: 200 ({name or 'no model listed'})")
    if name is None:
        out.error = "/v1/models lists no model; set probe_model for this host"
        return out
    out.model = name
    # 3. one token: a text prompt; refused with 400 (a server started without its tokenizer,
    # --skip-tokenizer-init: "Tokenizer not available"), once more with a prompt of one token id,
    # which both engines take without a tokenizer
    prompts: tuple[str | list[int], ...] = ("Hello", [1])
    for prompt in prompts:  # ``ans`` ends as the last answer (the /v1/models one is replaced)
        t0 = time.perf_counter()
        try:
            ans = await http_request(addr, "POST", "/v1/completions",
                                     {"model": name, "prompt": prompt, "max_tokens": 1, "temperature": 0},
                                     timeout=max(0.1, min(REQUEST_TIMEOUT_S, left())))
        except HttpError as exc:
            out.error = str(exc)
            return out
        if ans.status != 400:
            break
        if isinstance(prompt, str):
            out.steps.append(f"/v1/completions (text prompt): {ans.short()}; again with a token-id prompt")
    ms = (time.perf_counter() - t0) * 1000
    doc = ans.json()
    if ans.status != 200 or not (isinstance(doc, dict) and doc.get("choices")):
        out.error = f"/v1/completions: {ans.short()}"
        return out
    out.steps.append(f"/v1/completions: 200 in {ms:.0f} ms")
    out.ok, out.ms = True, ms
    return out


def _first_model(doc: object) -> str | None:
    if isinstance(doc, dict):
        data = doc.get("data")
        if isinstance(data, list) and data and isinstance(data[0], dict):
            mid = data[0].get("id")
            return str(mid) if mid else None
    return None


def can_probe(backend: object) -> bool:
    """Whether this backend can reach a server's port at all (a kube host through ``kubectl
    port-forward``): a backend that cannot is not probed — its boots are ready on the log's word, and callers say so."""
    return isinstance(backend, PortOpener)


async def probe(backend: object, port: int, *, model: str | None = None,
                timeout: float = DEFAULT_PROBE_TIMEOUT_S) -> ProbeResult:
    """Open the server's port through the backend, probe it, close it (always)."""
    if not isinstance(backend, PortOpener):
        return ProbeResult(False, port=port, error="this host cannot reach the server's port")
    try:
        async with backend.open_port(port) as addr:
            res = await probe_address(addr, model=model, timeout=timeout)
            res.port = port
            return res
    except HttpError as exc:
        return ProbeResult(False, port=port, error=str(exc))
    except OSError as exc:
        return ProbeResult(False, port=port, error=f"cannot open a forward to port {port}: {exc}")
    except Exception as exc:  # asyncssh's channel errors: the forward could not be opened
        return ProbeResult(False, port=port, error=f"cannot open a forward to port {port}: {exc}")


def boot_port(flags: Mapping[str, object]) -> int | None:
    """The server's port from its argument dump (``port``), None when it does not say."""
    v = flags.get("port")
    try:
        p = int(str(v))
    except (TypeError, ValueError):
        return None
    return p if 0 < p < 65536 else None


def served_model(flags: Mapping[str, object]) -> str | None:
    """The model name the server answers to, from its argument dump (None: ask /v1/models)."""
    v = flags.get("served_model_name")
    if isinstance(v, list | tuple):
        v = v[0] if v else None
    return str(v) if v not in (None, "", "None") else None


@contextlib.asynccontextmanager
async def direct(port: int) -> AsyncIterator[tuple[str, int]]:
    """This machine's own port (a local host): nothing to open or close."""
    yield LOOPBACK, port


def not_probed_reason(backend: object, flags: Mapping[str, object], *, enabled: bool = True) -> str | None:
    """Why a ready boot is not probed (None: it is): turned off, no port in its arguments, or a
    backend that cannot reach the port (its boot is then ready on the log's word)."""
    if not enabled:
        return "probe = false"
    if boot_port(flags) is None:
        return "the boot's arguments name no port"
    if not can_probe(backend):
        return "this kind of host cannot reach the server's port yet; ready on the log's word (not probed)"
    return None


def mark_not_serving(boot: Boot, res: ProbeResult) -> None:
    """The log said ready but the server did not answer: the boot is failed, kind ``not_serving``,
    with the HTTP error (``kvtui wait``, ``apply``/``rollback --restart``, the tune, the console)."""
    boot.status = BootStatus.FAILED
    boot.failure = Failure(FailureKind.NOT_SERVING, Phase.READY, res.error or "no answer",
                           hint=hint_for(FailureKind.NOT_SERVING, boot.engine, boot.flags, boot.facts))
