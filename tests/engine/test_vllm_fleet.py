"""``kvtui fleet`` against a real Prometheus scraping the REAL vLLM CPU server (issue 26): Debian's
``prometheus`` (tests/prom_support.py: 127.0.0.1, a generated config, a temporary TSDB, 1 s scrapes)
scrapes the tiny Llama's ``/metrics`` (vLLM 0.32.0's CPU build, a KV cache of 20 blocks of 128 tokens,
``--max-num-seqs 16``) and a simulated DCGM exporter of 8 GPUs on the same address. A bounded burst
(32 completions of 160 + 800 tokens, loopback, as test_vllm_serving.py drives it: the pool holds about
two, so ~20 s of queue) runs while ``kvtui fleet --json`` reads Prometheus: the instance is up,
engine vllm, its model, KV pool (2,560 tokens), usage and peak, running and queued — all from the engine's own metrics —
and the 8 GPUs joined by its address. vLLM's ``/metrics`` carries no version (README "The fleet"):
the row says "unknown", and Python's ``python_info{version=…}`` is not taken for it. The server's
process group is ended after (``SIGKILL``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_support import Burst, one_burst_at_a_time, require_engine, write_model
from prom_support import Exporters, Prometheus, dcgm_text, free_port, need_prometheus

pytestmark = [pytest.mark.engine, pytest.mark.xdist_group("engine")]

BOOT_TIMEOUT = 300  # seconds for one boot on a loaded 2-core machine (about 40 s when idle)
BURST = 32
READY_LINE = "Application startup complete."


@dataclass
class Served:
    prom: Prometheus
    port: int
    model: Path
    hosts: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    py = require_engine()
    need_prometheus()
    work = tmp_path_factory.mktemp("vllm-fleet")
    model = write_model(work)
    port = free_port()
    log = work / "server.log"
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--load-format", "dummy",
             "--skip-tokenizer-init", "--enforce-eager", "--max-model-len", "1024", "--max-num-seqs", "16",
             "--host", "127.0.0.1", "--port", str(port), "--kv-cache-memory-bytes", "2621440"],
            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=work)
    ex = Exporters()
    try:
        dcgm = ex.add("127.0.0.1", free_port(), lambda: dcgm_text("cpu-box", 8, used=1234, temp=41))
        t0 = time.monotonic()
        # Prometheus starts while the server boots (its target is down until then): its start-up
        # and first scrapes are not added to the boot's ~40 s
        prom = Prometheus(work, {"vllm": [f"127.0.0.1:{port}"], "dcgm": [dcgm]})
        try:
            while READY_LINE not in log.read_text(errors="replace"):
                assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
                assert time.monotonic() - t0 < BOOT_TIMEOUT, "the server was not ready in time"
                time.sleep(0.5)
            print(f"vllm fleet: ready after {time.monotonic() - t0:.1f} s")
            prom.wait(lambda: prom.value('count(up{job="vllm"} == 1) + count(up{job="dcgm"} == 1)') == 2, 120,
                      "the server and the exporter scraped")
            prom.wait(lambda: prom.value("count(vllm:num_requests_running)") >= 1, 60, "vLLM's metrics")
            hosts = work / "hosts.toml"
            hosts.write_text(f'[prometheus]\nurl = "{prom.url}"\ntimeout = 30\n')
            yield Served(prom, port, model, hosts)
        finally:
            prom.close()
    finally:
        ex.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def _fleet(hosts: Path) -> dict[str, object]:
    res = subprocess.run([sys.executable, "-m", "kvtui", "fleet", "--hosts", str(hosts), "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_fleet_shows_the_real_server_serving_a_burst(served: Served) -> None:
    with one_burst_at_a_time():  # not beside another worker's burst (engine_support)
        load = Burst(served.port, str(served.model), BURST)
        try:
            # Prometheus has scraped the burst: requests running and queued behind the 20-block pool
            served.prom.wait(lambda: served.prom.value("sum(vllm:num_requests_running)") > 0
                             and served.prom.value("sum(vllm:num_requests_waiting)") > 0, 120, "the burst scraped")
            doc = _fleet(served.hosts)
        finally:
            load.cancel()  # the fleet has read it: the rest of the burst would be served to nobody
    rows = doc["rows"]
    assert isinstance(rows, list)
    assert doc["instances"] == 1, rows
    row = rows[0]
    print(f"vllm fleet: {row}")
    assert row["instance"] == f"127.0.0.1:{served.port}"
    assert row["host"] == "127.0.0.1"
    assert row["engine"] == "vllm"
    assert row["model"] == str(served.model)  # model_name, as the engine labels its series
    assert row["up"] is True
    assert row["state"] in ("up", "starting")  # "starting": its process is under 2 minutes old
    assert row["uptime_s"] > 0
    # "now" is the last scrape when `kvtui fleet` asked, seconds after the wait above saw the burst;
    # on a loaded CI machine the burst can have drained by then (running 0): the hour's peak keeps it
    assert row["running"] >= 0
    assert row["queued"] >= 0
    assert 0 <= row["kv_usage"] <= 1
    assert row["kv_peak_1h"] >= max(row["kv_usage"], 0.5)  # the burst filled the 20-block pool
    assert row["kv_pool_tokens"] == 2560  # 20 blocks of 128 tokens, from vllm:cache_config_info
    assert row["preemptions_per_min"] is not None
    assert row["version"] == "unknown"  # no vLLM metric carries it; python_info's version is Python's
    assert row["gpus"] == 8  # the DCGM exporter on the same address
    assert row["mem_used_max_mib"] == 1234
    assert row["temp_max_c"] == 41 + 7


def test_the_metrics_carry_no_vllm_version(served: Served) -> None:
    """Why the fleet shows no vLLM version: the released wheel's /metrics has no series with the
    engine's version (only python_info's, the interpreter's); it is on GET /version instead."""
    with urllib.request.urlopen(f"http://127.0.0.1:{served.port}/version", timeout=30) as r:
        version = json.load(r)["version"]
    assert version.startswith("0.32")
    with urllib.request.urlopen(f"http://127.0.0.1:{served.port}/metrics", timeout=30) as r:
        text = r.read().decode()
    carrying = [line for line in text.splitlines() if not line.startswith("#") and f'"{version}"' in line]
    assert carrying == []
    assert any(line.startswith("python_info{") for line in text.splitlines())
