"""``kvtui watch`` against the real vLLM CPU server (issue 24): the tiny Llama with a KV cache of 20
blocks of 128 tokens (``--kv-cache-memory-bytes 2621440``), a bounded burst of concurrent
completions from the test (loopback, a fixed count, a time limit), and ``kvtui watch --json`` on
a ``local`` host (the server's log file; ``/metrics`` read directly on 127.0.0.1) in a subprocess:
every sample comes from ``/metrics``, the pool is the engine's own 2,560 tokens, and the burst
shows as waiting requests at a nearly full pool. Then ``wait --serving`` reads a first sample of
the same server. The server's process group is ended after (``SIGKILL``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_support import burst, require_engine, write_model
from sshd_support import free_port

pytestmark = [pytest.mark.engine, pytest.mark.xdist_group("engine")]

BOOT_TIMEOUT = 300  # seconds for one boot on a loaded 2-core machine (about 40 s when idle)
BURST = 32  # requests of 160 + 800 tokens: the 20-block pool holds about 2 of them, so the queue lasts
# ~20 s here; with 24 x 400 tokens (~8 s) the CI machine, its CPUs taken by the server, read its first sample
# of the burst only when the queue had drained
READY_LINE = "Application startup complete."


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


def test_watch_reads_the_burst_from_the_real_metrics(server: tuple[Path, int, Path]) -> None:
    hosts, port, model = server
    threads: list[threading.Thread] = []
    watch = subprocess.Popen([sys.executable, "-m", "kvtui", "watch", "box", "--hosts", str(hosts), "--json",
                              "--interval", "0.5", "--count", "16", "--timeout", "120"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None
        lines = [watch.stdout.readline()]  # the first sample: watch reads the server; then the burst
        threads = burst(port, str(model), BURST)
        lines += watch.stdout.readlines()
        err = watch.stderr.read() if watch.stderr is not None else ""
        assert watch.wait(timeout=300) == 0, err
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        for t in threads:
            t.join(timeout=300)
    docs = [json.loads(line) for line in lines if line.strip()]
    assert len(docs) == 16, err
    # /metrics, except where the server, its CPUs taken by the burst (and, in CI, by the other test
    # worker), did not answer within watch's wait: then its log's stats line stands in, said so
    metrics = [d for d in docs if d["source"] == "metrics"]
    assert len(metrics) >= 4, err
    assert all("no answer from /metrics" in d["metrics_error"] for d in docs if d["source"] != "metrics"), err
    assert {d["engine"] for d in docs} == {"vllm"}
    assert {d["pool_tokens"] for d in metrics} == {2560}  # 20 blocks of 128 tokens, as the engine says
    assert max(d["waiting"] for d in docs) > 0, docs  # the burst queues behind the small pool
    assert max(d["peak_kv_usage"] for d in docs) >= 0.5
    assert docs[-1]["preemptions_per_min"] is not None
    assert docs[-1]["diagnosis"]["evidence"]["running_cap"] == 16  # --max-num-seqs, from the argument dump
    print("vllm serving: " + "; ".join(f"KV {d['kv_usage']}, {d['running']} running, {d['waiting']} waiting, "
                                       f"{d['diagnosis']['limit']}" for d in docs))


def test_wait_serving_reads_a_first_sample(server: tuple[Path, int, Path]) -> None:
    hosts, _, _ = server
    res = _kvtui("wait", "box", "--hosts", str(hosts), "--serving", "--json", "--timeout", "120", timeout=200)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["probe"]["ok"] is True
    assert doc["serving"]["source"] == "metrics"
    assert doc["serving"]["pool_tokens"] == 2560
