"""``kvtui watch`` and ``kvtui fleet`` against the real vLLM CPU server (issues 24, 26): the tiny
Llama with a KV cache of 20 blocks of 128 tokens (``--kv-cache-memory-bytes 2621440``), a bounded
burst of concurrent completions from the test (loopback, a fixed count, a time limit), and ``kvtui
watch --json`` on a ``local`` host (the server's log file; ``/metrics`` read directly on 127.0.0.1)
in a subprocess: every sample comes from ``/metrics``, the pool is the engine's own 2,560 tokens,
and the burst shows in the engine's own counters over the whole burst (every request,
preemptions: the pool ran out, seconds of queue time), which no sampling can miss. Then ``wait
--serving`` reads a first sample of the same server.

The fleet (issue 26), on the same server (one boot for both): Debian's ``prometheus``
(tests/prom_support.py: 127.0.0.1, a generated config, a temporary TSDB, 1 s scrapes) scrapes its
``/metrics`` and a simulated DCGM exporter of 8 GPUs on the same address. A burst runs while
``kvtui fleet --json`` reads Prometheus: the instance is up, engine vllm, its model, KV pool (2,560
tokens), usage and peak, running and queued — all from the engine's own metrics — and the 8 GPUs
joined by its address. vLLM's ``/metrics`` carries no version (README "The fleet"): the row says
"unknown", and Python's ``python_info{version=…}`` is not taken for it.

The server's process group is ended after (``SIGKILL``)."""

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
from engine_support import Burst, one_burst_at_a_time, require_engine, watch_a_burst, write_model
from prom_support import Exporters, Prometheus, dcgm_text, need_prometheus
from sshd_support import free_port

pytestmark = [pytest.mark.engine, pytest.mark.xdist_group("engine")]

BOOT_TIMEOUT = 300  # seconds for one boot on a loaded 2-core machine (about 40 s when idle)
BURST = 32  # requests of 160 + 800 tokens: the 20-block pool holds about 2 of them, so the queue lasts
# ~20 s here; with 24 x 400 tokens (~8 s) the CI machine, its CPUs taken by the server, read its first sample
# of the burst only when the queue had drained
READY_LINE = "Application startup complete."
INTERVAL = 3  # seconds between watch's samples (as test_vllm_loop.py: it waits 2 x this for /metrics)
BURST_TIMEOUT = 180  # seconds for the burst to finish (about 20 s here when idle)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, Path]]:
    """(the hosts.toml of a local host ``box`` reading the server's log, the port, the model dir)."""
    py = require_engine()
    work = tmp_path_factory.mktemp("vllm-serving")
    model = write_model(work)
    port = free_port()
    log = work / "server.log"
    env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="2")
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--load-format", "dummy",
             "--skip-tokenizer-init", "--enforce-eager", "--max-model-len", "1024", "--max-num-seqs", "16",
             "--host", "127.0.0.1", "--port", str(port), "--kv-cache-memory-bytes", "2621440"],
            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=work, env=env)
    hosts = work / "hosts.toml"
    hosts.write_text(f'[hosts.box]\nlocal = true\nlog_file = "{log}"\n')
    try:
        t0 = time.monotonic()
        while READY_LINE not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() - t0 < BOOT_TIMEOUT, "the server was not ready in time"
            time.sleep(0.5)
        print(f"vllm serving: ready after {time.monotonic() - t0:.1f} s")
        yield hosts, port, model
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def _kvtui(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvtui", *argv], capture_output=True, text=True, timeout=timeout,
                          check=False)


def _watch_the_burst(hosts: Path, port: int, model: Path) -> tuple[list[dict[str, object]], str]:
    """``kvtui watch box --json`` over the whole burst (``watch_a_burst``)."""
    return watch_a_burst(["watch", "box", "--hosts", str(hosts), "--json", "--interval", str(INTERVAL), "--timeout",
                          "120"], env=dict(os.environ, XDG_STATE_HOME=str(hosts.parent / "state")), cwd=None,
                         port=port, model=str(model), count=BURST, burst_timeout=BURST_TIMEOUT)


def test_watch_reads_the_burst_from_the_real_metrics(server: tuple[Path, int, Path]) -> None:
    hosts, port, model = server
    docs, err = _watch_the_burst(hosts, port, model)
    # one before the burst, at least one in it, two after: the burst (~17 s) holds 3-5 of watch's samples
    # when it has the machine's CPUs to itself (engine_support.one_burst_at_a_time); beside another
    # worker's burst /metrics answered after watch's 6 s and none fell inside
    assert len(docs) >= 4, err
    # every sample from /metrics (INTERVAL: watch waits 2 x 3 s for an answer; at 0.5 s a server
    # busy with the burst on a loaded machine did not answer, and a sample from the log starts the
    # window over)
    assert {d["source"] for d in docs} == {"metrics"}, err
    assert {d["engine"] for d in docs} == {"vllm"}
    assert {d["pool_tokens"] for d in docs} == {2560}  # 20 blocks of 128 tokens, as the engine says
    ev = docs[-1]["diagnosis"]["evidence"]  # type: ignore[index]
    # the evidence no sampling can miss (the gauges "waiting" and KV usage are read every 3 s, and
    # a sample may fall between the queue's moments): vLLM's own counters over the whole burst
    assert ev["requests"] == BURST, ev  # every request of the burst, counted by the engine
    assert ev["preemptions"] > 0, ev  # the 20-block pool ran out (vLLM preempts only then)
    assert ev["queue_p95"] >= 1.0, ev  # the burst queued behind the small pool (--max-num-seqs 16 < 32, too)
    assert docs[-1]["preemptions_per_min"] is not None
    assert ev["running_cap"] == 16  # --max-num-seqs, from the argument dump
    print("vllm serving: " + "; ".join(f"KV {d['kv_usage']}, {d['running']} running, {d['waiting']} waiting, "
                                       f"{d['diagnosis']['limit']}" for d in docs))  # type: ignore[index]
    print(f"vllm serving: evidence {ev}")


def test_wait_serving_reads_a_first_sample(server: tuple[Path, int, Path]) -> None:
    hosts, _, _ = server
    res = _kvtui("wait", "box", "--hosts", str(hosts), "--serving", "--json", "--timeout", "120", timeout=200)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["probe"]["ok"] is True
    assert doc["serving"]["source"] == "metrics"
    assert doc["serving"]["pool_tokens"] == 2560


# -- kvtui fleet: a real Prometheus scraping the same server ----------------------------------------


@dataclass
class Served:
    prom: Prometheus
    port: int
    model: Path
    hosts: Path


@pytest.fixture(scope="module")
def served(server: tuple[Path, int, Path]) -> Iterator[Served]:
    """Prometheus scraping the server and a simulated DCGM exporter of 8 GPUs on its address."""
    need_prometheus()
    hosts, port, model = server
    ex = Exporters()
    try:
        dcgm = ex.add("127.0.0.1", free_port(), lambda: dcgm_text("cpu-box", 8, used=1234, temp=41))
        prom = Prometheus(hosts.parent, {"vllm": [f"127.0.0.1:{port}"], "dcgm": [dcgm]})
        try:
            prom.wait(lambda: prom.value('count(up{job="vllm"} == 1) + count(up{job="dcgm"} == 1)') == 2, 120,
                      "the server and the exporter scraped")
            prom.wait(lambda: prom.value("count(vllm:num_requests_running)") >= 1, 60, "vLLM's metrics")
            fleet_hosts = hosts.parent / "fleet-hosts.toml"
            fleet_hosts.write_text(f'[prometheus]\nurl = "{prom.url}"\ntimeout = 30\n')
            yield Served(prom, port, model, fleet_hosts)
        finally:
            prom.close()
    finally:
        ex.close()


def _fleet(hosts: Path) -> dict[str, object]:
    res = subprocess.run([sys.executable, "-m", "kvtui", "fleet", "--hosts", str(hosts), "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_fleet_shows_the_real_server_serving_a_burst(served: Served) -> None:
    with one_burst_at_a_time():  # not beside another worker's burst (engine_support)
        t0 = time.monotonic()
        load = Burst(served.port, str(served.model), BURST)
        try:
            # Prometheus has scraped the burst: requests running and queued behind the 20-block pool
            served.prom.wait(lambda: served.prom.value("sum(vllm:num_requests_running)") > 0
                             and served.prom.value("sum(vllm:num_requests_waiting)") > 0, 120, "the burst scraped")
            t1 = time.monotonic()
            doc = _fleet(served.hosts)
            t2 = time.monotonic()
        finally:
            load.cancel()  # the fleet has read it: the rest of the burst would be served to nobody
        print(f"vllm fleet: the burst scraped after {t1 - t0:.1f} s, kvtui fleet read it in {t2 - t1:.1f} s, "
              f"its cancel took {time.monotonic() - t2:.1f} s")
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
