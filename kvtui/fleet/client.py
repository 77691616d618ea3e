"""A small client for Prometheus's HTTP API (``/api/v1/query``, ``/api/v1/query_range``).

Plain urllib (blocking; callers on an event loop use ``asyncio.to_thread``). Every failure is a
``PromError`` whose message says what to check: unreachable, 401/403 (the credentials), a timeout,
an answer that is not Prometheus's JSON, a query Prometheus refused. Nothing that could not be read
is ever returned as an empty, healthy-looking result.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvtui.config import PrometheusConfig

MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a 1,000-instance fleet's column is well under 1 MiB


class PromError(Exception):
    """Prometheus could not be read; the message names the URL and what to check."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant vector: its labels and value (NaN kept as NaN)."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a range query: its labels and (unix time, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


def _auth_header(cfg: PrometheusConfig) -> str | None:
    if cfg.bearer_token_file:
        path = Path(cfg.bearer_token_file).expanduser()
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise PromError(f"[prometheus] bearer_token_file = \"{cfg.bearer_token_file}\": cannot read it "
                            f"({exc.strerror or exc})") from None
        if not token:
            raise PromError(f"[prometheus] bearer_token_file = \"{cfg.bearer_token_file}\": the file is empty")
        return f"Bearer {token}"
    if cfg.basic_auth_user is not None and cfg.basic_auth_password_env is not None:
        password = os.environ.get(cfg.basic_auth_password_env)
        if password is None:
            raise PromError(f"[prometheus] basic_auth_password_env = \"{cfg.basic_auth_password_env}\": that "
                            "environment variable is not set")
        raw = f"{cfg.basic_auth_user}:{password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")
    return None


class PromClient:
    """Reads one Prometheus. ``query`` / ``query_range`` raise ``PromError``; thread-safe (no state
    beyond the configuration)."""

    def __init__(self, cfg: PrometheusConfig) -> None:
        self.cfg = cfg
        self.url = cfg.url
        self._auth = _auth_header(cfg)
        self._ssl: ssl.SSLContext | None = None
        if cfg.url.startswith("https://"):
            try:
                cafile = str(Path(cfg.ca_file).expanduser()) if cfg.ca_file else None
                self._ssl = ssl.create_default_context(cafile=cafile)
            except (OSError, ssl.SSLError) as exc:
                raise PromError(f"[prometheus] ca_file = \"{cfg.ca_file}\": cannot use it ({exc})") from None

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        req = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "kvtui"})
        if self._auth:
            req.add_header("Authorization", self._auth)
        timeout = self.cfg.timeout
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ssl) as resp:
                body = resp.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            body = exc.read(64 * 1024)
            if exc.code in (401, 403):
                how = ("check bearer_token_file / basic_auth_user in [prometheus]"
                       if self._auth else "it needs credentials: set bearer_token_file or basic auth in [prometheus]")
                raise PromError(f"Prometheus at {self.url} answered {exc.code} {exc.reason}: {how}") from None
            detail = _error_text(body)
            if exc.code in (400, 422) and detail:
                raise PromError(f"Prometheus at {self.url} refused the query: {detail}") from None
            raise PromError(f"Prometheus at {self.url} answered {exc.code} {exc.reason}"
                            + (f": {detail}" if detail else "")) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (TimeoutError, socket.timeout)):
                raise PromError(f"Prometheus at {self.url}: no answer within {timeout:g} s "
                                "([prometheus] timeout)") from None
            if isinstance(reason, ssl.SSLError):
                raise PromError(f"Prometheus at {self.url}: TLS failed ({reason}); check [prometheus] ca_file") \
                    from None
            text = getattr(reason, "strerror", None) or str(reason)
            raise PromError(f"cannot reach Prometheus at {self.url}: {text}") from None
        except TimeoutError:
            raise PromError(f"Prometheus at {self.url}: no answer within {timeout:g} s "
                            "([prometheus] timeout)") from None
        except (OSError, ValueError) as exc:
            raise PromError(f"cannot reach Prometheus at {self.url}: {exc}") from None
        if len(body) > MAX_RESPONSE_BYTES:
            raise PromError(f"Prometheus at {self.url}: the answer is over {MAX_RESPONSE_BYTES >> 20} MiB")
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise PromError(f"Prometheus at {self.url}: the answer is not JSON (is this URL a Prometheus? "
                            f"it began {body[:60]!r})") from None
        if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(doc.get("data"), dict):
            said = doc.get("error") if isinstance(doc, dict) else None
            raise PromError(f"Prometheus at {self.url}: not a successful API answer"
                            + (f": {said}" if said else " (is this URL a Prometheus?)"))
        return doc["data"]

    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """An instant query; the result must be a vector (or a scalar, read as one unlabelled sample)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", params)
        rtype, result = data.get("resultType"), data.get("result")
        try:
            if rtype == "scalar":
                return [Sample({}, float(result[1]))]
            if rtype != "vector" or not isinstance(result, list):
                raise TypeError(rtype)
            return [Sample({str(k): str(v) for k, v in r["metric"].items()}, float(r["value"][1])) for r in result]
        except (TypeError, KeyError, IndexError, ValueError):
            raise PromError(f"Prometheus at {self.url}: unexpected answer to {expr!r} "
                            f"(resultType {rtype!r})") from None

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """A range query (a matrix)."""
        data = self._get("/api/v1/query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                  "step": f"{step:g}"})
        result = data.get("result")
        try:
            if data.get("resultType") != "matrix" or not isinstance(result, list):
                raise TypeError(data.get("resultType"))
            return [Series({str(k): str(v) for k, v in r["metric"].items()},
                           [(float(t), float(v)) for t, v in r["values"]]) for r in result]
        except (TypeError, KeyError, ValueError):
            raise PromError(f"Prometheus at {self.url}: unexpected answer to the range query {expr!r}") from None


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body[:200].decode("utf-8", "replace").strip()
    if isinstance(doc, dict) and doc.get("error"):
        return str(doc["error"])
    return ""
