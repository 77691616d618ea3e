"""A real Prometheus (Debian's ``prometheus``) scraping simulated exporters on loopback, for the fleet
tests (issue 26).

- ``Exporters``: one asyncio loop in a thread serving many ``/metrics`` endpoints, each bound to its
  own loopback address (127.0.0.x) and port, each a callable that returns the text (or ``None``:
  answer 500, the target is down). The texts use the names and HELP lines the real exporters print:
  vLLM 0.32.0 and SGLang 0.5.10 as in tests/fixtures/serving/*.metrics (captured from the released
  wheels, docs/serving-metrics.md), DCGM as dcgm-exporter's ``etc/default-counters.csv`` (the same
  HELP lines as tests/fixtures/kube/dcgm/).
- ``Prometheus``: the server on 127.0.0.1:PORT with a generated config (1 s scrapes) and a temporary
  TSDB; ``wait`` polls its API for a condition (no fixed sleeps).

Skipped where ``prometheus`` is missing, except with ``KVTUI_REQUIRE_PROMETHEUS=1`` (CI) where it fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

PROMETHEUS = shutil.which("prometheus")
REQUIRED = os.environ.get("KVTUI_REQUIRE_PROMETHEUS") == "1"


def need_prometheus() -> str:
    if PROMETHEUS is None:
        if REQUIRED:
            pytest.fail("KVTUI_REQUIRE_PROMETHEUS=1 but prometheus is not installed (apt-get install prometheus)")
        pytest.skip("prometheus is not installed (Debian: apt-get install prometheus)")
    return PROMETHEUS


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


Text = Callable[[], str | None]


class Exporters:
    """Many loopback ``/metrics`` endpoints served by one asyncio loop in one thread."""

    MAX_REQUEST = 16 * 1024

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="exporters", daemon=True)
        self.thread.start()
        self.servers: list[asyncio.Server] = []

    def add(self, host: str, port: int, text: Text) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"\r\n\r\n")
                body = text()
                if body is None:
                    data, status = b"down\n", "500 Internal Server Error"
                else:
                    data, status = body.encode(), "200 OK"
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n"
                             f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
                await writer.drain()
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                pass
            finally:
                writer.close()

        async def start() -> asyncio.Server:
            return await asyncio.start_server(handle, host, port, limit=self.MAX_REQUEST)

        self.servers.append(asyncio.run_coroutine_threadsafe(start(), self.loop).result(10))
        return f"{host}:{port}"

    def close(self) -> None:
        async def stop() -> None:
            for s in self.servers:
                s.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


# --- metric texts, real names and HELP lines ----------------------------------------------------------


def vllm_text(model: str, *, running: int = 2, waiting: int = 0, kv: float = 0.4, preemptions: float = 0,
              start: float = 1.7e9, ttft_fast: int = 10) -> str:
    m = f'model_name="{model}",engine="0"'
    return (
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
        "# TYPE process_start_time_seconds gauge\n"
        f"process_start_time_seconds {start}\n"
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{m}}} {running}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{m}}} {waiting}\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{m}}} {kv}\n"
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        f"vllm:num_preemptions_total{{{m}}} {preemptions}\n"
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        f'vllm:time_to_first_token_seconds_bucket{{{m},le="0.1"}} {ttft_fast}\n'
        f'vllm:time_to_first_token_seconds_bucket{{{m},le="1.0"}} {ttft_fast}\n'
        f'vllm:time_to_first_token_seconds_bucket{{{m},le="+Inf"}} {ttft_fast}\n'
        f"vllm:time_to_first_token_seconds_count{{{m}}} {ttft_fast}\n"
        f"vllm:time_to_first_token_seconds_sum{{{m}}} {ttft_fast * 0.05}\n"
    )


def sglang_text(model: str, *, running: int = 3, queued: int = 0, usage: float = 0.5, retracted: float = 0,
                start: float = 1.7e9, tp: int = 2) -> str:
    out = [
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
        "# TYPE process_start_time_seconds gauge",
        f"process_start_time_seconds {start}",
    ]
    for name, help_, kind, value in (
        ("sglang:num_running_reqs", "The number of running requests.", "gauge", running),
        ("sglang:token_usage", "The token usage.", "gauge", usage),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "gauge", queued),
        ("sglang:num_retracted_requests_total", "Total number of retracted requests.", "counter", retracted),
    ):
        out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        out += [f'{name}{{engine_type="unified",model_name="{model}",pp_rank="0",tp_rank="{r}"}} {value}'
                for r in range(tp)]
    return "\n".join(out) + "\n"


DCGM_HELP = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
}


def dcgm_text(hostname: str, gpus: int = 8, *, used: float = 70000, total: float = 81559, util: float = 90,
              temp: float = 60, xid: int = 0) -> str:
    values = {"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_FREE": total - used, "DCGM_FI_DEV_FB_USED": used,
              "DCGM_FI_DEV_GPU_TEMP": temp, "DCGM_FI_DEV_XID_ERRORS": xid}
    out: list[str] = []
    for name, help_ in DCGM_HELP.items():
        out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        for g in range(gpus):
            v = values[name] + (g if name == "DCGM_FI_DEV_GPU_TEMP" else 0)
            out.append(f'{name}{{gpu="{g}",UUID="GPU-{hostname}-{g}",device="nvidia{g}",'
                       f'modelName="NVIDIA H100 80GB HBM3",Hostname="{hostname}",'
                       f'DCGM_FI_DRIVER_VERSION="550.54.15"}} {v}')
    return "\n".join(out) + "\n"


class Prometheus:
    """A real Prometheus on 127.0.0.1 scraping ``jobs`` (job name -> targets) every ``interval``."""

    def __init__(self, tmp: Path, jobs: dict[str, list[str]], interval: str = "1s") -> None:
        binary = need_prometheus()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = ["global:", f"  scrape_interval: {interval}", f"  scrape_timeout: {interval}", "scrape_configs:"]
        for job, targets in jobs.items():
            cfg += [f"  - job_name: {job}", "    static_configs:", f"      - targets: {json.dumps(targets)}"]
        (tmp / "prometheus.yml").write_text("\n".join(cfg) + "\n")
        self.log = (tmp / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.wait(lambda: self._ready(), 60, "Prometheus ready")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited {self.proc.returncode}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as r:
            result: list[dict[str, Any]] = json.load(r)["data"]["result"]
            return result

    def value(self, expr: str) -> float:
        res = self.query(expr)
        return float(res[0]["value"][1]) if res else 0.0

    @staticmethod
    def wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()
