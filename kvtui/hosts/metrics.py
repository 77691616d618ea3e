"""Reading a serving server's ``/metrics`` through its host (issue 24), by the readiness probe's
paths: an SSH host's local port forward, a local host's own loopback port, the demo host's
simulated server (each a ``PortOpener``), a kube host's pod proxy (``kubectl get --raw
/api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics``).

A backend that can offers ``metrics(port, timeout=…)`` (``MetricsSource``): the text, at most
``MAX_METRICS_BYTES``, or ``MetricsUnavailable`` — a ``BackendError`` whose text names the URL and
why: the port does not answer, an HTTP error, or metrics that are off (SGLang without
``--enable-metrics`` answers 404, or — behind a proxy that serves its own — names no ``sglang:*`` /
``vllm:*`` series). The text is parsed by ``kvtui.serving.prom`` (pure core).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kvtui.hosts.backend import BackendError
from kvtui.hosts.probe import HttpError, PortOpener, http_request

MAX_METRICS_BYTES = 4 * 1024 * 1024  # a vLLM server with LoRA or many engines prints ~100 KiB
METRICS_TIMEOUT_S = 10.0
METRICS_OFF_HINT = "metrics are off? SGLang serves them only with --enable-metrics"


class MetricsUnavailable(BackendError):
    """The server's ``/metrics`` could not be read; ``str()`` names the URL and the reason."""


@runtime_checkable
class MetricsSource(Protocol):
    """Optional: a backend that can read the server's ``/metrics`` (on ``127.0.0.1:port`` of its
    host, or the pod's port)."""

    async def metrics(self, port: int, *, timeout: float = METRICS_TIMEOUT_S) -> str: ...


def metrics_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/metrics"


def check_metrics(status: int, body: bytes, where: str) -> str:
    """An answer of ``where`` (``GET http://127.0.0.1:30000/metrics on gpu-1``) → its text, or
    ``MetricsUnavailable`` saying why not."""
    text = body.decode("utf-8", "replace")
    if status == 404:
        raise MetricsUnavailable(f"{where} answered 404 Not Found ({METRICS_OFF_HINT})")
    if status != 200:
        short = " ".join(text.split())[:160]
        raise MetricsUnavailable(f"{where} answered HTTP {status}" + (f": {short}" if short else ""))
    if "sglang:" not in text and "vllm:" not in text:
        raise MetricsUnavailable(f"{where} answered, but with no sglang:* or vllm:* metric ({METRICS_OFF_HINT})")
    return text


async def metrics_via_port(opener: PortOpener, port: int, host: str, *, via: str = "",
                           timeout: float = METRICS_TIMEOUT_S) -> str:
    """``GET /metrics`` on the server's port, opened through ``opener`` (the probe's way there)."""
    where = f"GET {metrics_url(port)} on {host}" + (f" ({via})" if via else "")
    try:
        async with opener.open_port(port) as addr:
            ans = await http_request(addr, "GET", "/metrics", timeout=timeout, max_body=MAX_METRICS_BYTES)
    except HttpError as exc:
        raise MetricsUnavailable(f"{where}: {exc}") from exc
    except MetricsUnavailable:
        raise
    except Exception as exc:  # the forward could not be opened (asyncssh's channel errors, OSError)
        raise MetricsUnavailable(f"{where}: cannot reach the port: {exc}") from exc
    return check_metrics(ans.status, ans.body, where)


async def read_metrics(backend: object, port: int, *, timeout: float = METRICS_TIMEOUT_S) -> str:
    """The server's ``/metrics`` text through ``backend``; ``MetricsUnavailable`` when it cannot."""
    if isinstance(backend, MetricsSource):
        return await backend.metrics(port, timeout=timeout)
    if isinstance(backend, PortOpener):
        return await metrics_via_port(backend, port, getattr(backend, "name", "the host"), timeout=timeout)
    raise MetricsUnavailable(f"{metrics_url(port)}: this kind of host cannot reach the server's port")
