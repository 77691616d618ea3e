"""SGLang serving under load on the sshd fake host (issue 24, "Real parts"): a real OpenSSH sshd on
127.0.0.1 whose host runs the simulated SGLang server (``tests/sglang_sim.py``, started over SSH),
which prints a real-format boot, then — under the load this test sends it (real HTTP requests on
loopback, a fixed number of workers, a request cap and a time limit) — ``Decode batch`` lines and
``KV cache pool is full. Retract requests. #retracted_reqs: …`` warnings to its log (a file, or a
systemd unit's journal: a real journal file that ``journalctl`` reads on the host), and with
``--enable-metrics`` serves ``sglang:*`` on ``/metrics``. ``kvtui watch HOST --json`` and ``kvtui
wait HOST --serving`` read it over real SSH: from the log when metrics are off (the error names the
URL), from ``/metrics`` through the SSH port forward when they are on, and say "pool full"."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import (
    REAL_JOURNALCTL,
    FakeTools,
    JournalWriter,
    SshdInstance,
    free_port,
    requires_sshd,
    start_sshd,
)

from kvtui.cli import main
from kvtui.commands.watch import watch

pytestmark = [pytest.mark.sshd, requires_sshd]

SIM = Path(__file__).parent / "sglang_sim.py"
STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"  # systemd's "unit is starting" MESSAGE_ID
POOL = 8192  # tokens: 48 running requests of 64 + 192 tokens would need 12,288
WORKERS = 64  # requests in flight at once
MAX_REQUESTS = 3000  # the load's bound in requests …
LOAD_LIMIT_S = 90.0  # … and in time
START_LIMIT_S = 60.0
FULL_PEAK = 0.95  # the peak KV usage of a pool-full window


@pytest.fixture(scope="module")
def unit_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshdInstance, FakeTools]]:
    """An sshd whose sessions find the fake ``systemctl`` / ``nvidia-smi`` first and a ``journalctl``
    that reads the unit's real journal file."""
    tools = FakeTools.create(tmp_path_factory.mktemp("host"))
    tools.set_gpus((Path(__file__).parent / "fixtures" / "nvidia-smi-query-8gpu.csv").read_text())
    inst = start_sshd(tmp_path_factory.mktemp("sshd-unit"), user="root", path_prefix=tools.bin_dir,
                      extra_env={"KVTUI_FAKE_STATE": str(tools.state)})
    inst.assert_fake_path()
    yield inst, tools
    inst.stop()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdInstance]:
    work = tmp_path_factory.mktemp("sshd")
    inst = start_sshd(work, user="root")
    yield inst
    inst.stop()
    shutil.rmtree(work, ignore_errors=True)


@dataclass
class SimHost:
    """The simulated server on the sshd host, its log (a file, or a unit's journal) and the
    hosts.toml that reaches it."""

    port: int
    hosts: Path
    pid_file: Path
    log: Path | None = None  # the log file (else the journal)
    journal: Path | None = None

    def text(self) -> str:
        if self.journal is not None:
            res = subprocess.run([REAL_JOURNALCTL, f"--directory={self.journal.parent}", "-o", "cat", "-q"],
                                 capture_output=True, text=True, timeout=30, check=False)
            return res.stdout
        assert self.log is not None
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, text: str, limit: float = START_LIMIT_S) -> None:
        deadline = time.monotonic() + limit
        while text not in self.text():
            assert time.monotonic() < deadline, f"{text!r} not in the log: {self.text()[-2000:]}"
            time.sleep(0.1)

    def stop(self) -> None:
        try:
            os.kill(int(self.pid_file.read_text().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


def _argv(port: int, pid: Path, *flags: str) -> list[str]:
    return [sys.executable, str(SIM), "--model-path", "/models/tiny-llama", "--port", str(port),
            "--max-total-tokens", str(POOL), "--max-running-requests", "48", "--decode-log-interval", "5",
            "--step-ms", "10",
            "--pid-file", str(pid), *flags]


def _host_table(sshd: SshdInstance, where: str) -> str:
    return (f'[hosts.gpu]\nssh = "{sshd.target}"\nport = {sshd.port}\nidentity_file = "{sshd.client_key}"\n'
            f'known_hosts = "{sshd.known_hosts}"\n{where}\nengine = "sglang"\n')


def _start(sshd: SshdInstance, tmp_path: Path, *flags: str) -> SimHost:
    """The server started over SSH as a host would run it, its output appended to a log file."""
    port = free_port()
    log, pid = tmp_path / "server.log", tmp_path / "server.pid"
    cmd = f"setsid nohup {shlex.join(_argv(port, pid, *flags))} >> {shlex.quote(str(log))} 2>&1 < /dev/null &"
    res = sshd.run(cmd)
    assert res.returncode == 0, res.stderr
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(_host_table(sshd, f'log_file = "{log}"'))
    sim = SimHost(port, hosts, pid, log=log)
    sim.wait_for("The server is fired up and ready to roll!")
    return sim


def _start_unit(sshd: SshdInstance, tools: FakeTools, tmp_path: Path, *flags: str) -> SimHost:
    """The server as a systemd unit's process: systemd's "Starting" line, then the server's lines in
    the unit's journal (a real journal file, ``journalctl --directory`` reads it on the host)."""
    port = free_port()
    unit, inv = f"sglang-{uuid.uuid4().hex[:8]}.service", uuid.uuid4().hex
    writer = JournalWriter(tools.journal_dir / unit).start()
    (tools.bin_dir / "journalctl").write_text(
        f"#!/bin/sh\nexec {REAL_JOURNALCTL} --directory={writer.directory} \"$@\"\n")
    tools.set_unit(unit, InvocationID=inv, LoadState="loaded", ActiveState="active")
    writer.write(f"Starting {unit} - SGLang...", _PID=1, SYSLOG_IDENTIFIER="systemd", UNIT=unit, INVOCATION_ID=inv,
                 MESSAGE_ID=STARTING)
    writer.close()
    pid = tmp_path / "server.pid"
    argv = _argv(port, pid, "--journal", str(writer.path), "--unit", unit, "--invocation-id", inv, *flags)
    res = sshd.run(f"setsid nohup {shlex.join(argv)} > /dev/null 2>&1 < /dev/null &")
    assert res.returncode == 0, res.stderr
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(_host_table(sshd, f'unit = "{unit}"'))
    sim = SimHost(port, hosts, pid, journal=writer.path)
    sim.wait_for("The server is fired up and ready to roll!")
    return sim


@pytest.fixture
def start_sim(sshd: SshdInstance, unit_host: tuple[SshdInstance, FakeTools], tmp_path: Path) -> Iterator[Any]:
    started: list[SimHost] = []

    def start(*flags: str, log: str = "file") -> SimHost:
        if log == "journal":
            sim = _start_unit(unit_host[0], unit_host[1], tmp_path, *flags)
        else:
            sim = _start(sshd, tmp_path, *flags)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@dataclass
class Load:
    """``WORKERS`` threads posting ``/generate`` (64 prompt tokens, 192 new, ``ignore_eos``) to the
    server on loopback until ``stop()``, at most ``MAX_REQUESTS`` requests or ``LOAD_LIMIT_S``."""

    port: int
    answered: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pool: ThreadPoolExecutor | None = None
    _sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _worker(self) -> None:
        deadline = time.monotonic() + LOAD_LIMIT_S
        body = json.dumps({"input_ids": list(range(1, 65)),
                           "sampling_params": {"max_new_tokens": 192, "ignore_eos": True}}).encode()
        while not self._stop.is_set() and time.monotonic() < deadline:
            with self._lock:
                if self._sent >= MAX_REQUESTS:
                    return
                self._sent += 1
            req = urllib.request.Request(f"http://127.0.0.1:{self.port}/generate", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=LOAD_LIMIT_S) as r:
                    status = r.status
            except OSError:
                status = 0
            with self._lock:
                self.answered.append(status)

    def __enter__(self) -> Load:
        self._pool = ThreadPoolExecutor(WORKERS)
        for _ in range(WORKERS):
            self._pool.submit(self._worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._pool is not None
        self._pool.shutdown(wait=True)


def _args(sim: SimHost, **more: Any) -> argparse.Namespace:
    base: dict[str, Any] = {"host": "gpu", "hosts": str(sim.hosts), "json": True, "interval": 1.0, "count": 6,
                            "timeout": 60.0}
    base.update(more)
    return argparse.Namespace(**base)


async def _watch(sim: SimHost, **more: Any) -> tuple[list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    code = await watch(_args(sim, **more), stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    return [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def _is_pool_full(doc: dict[str, Any]) -> bool:
    """Pool full, and a first token came in the window (the TTFT histogram's delta)."""
    return bool(doc["retractions_per_min"]) and doc["diagnosis"]["limit"] == "pool full" and (
        doc["ttft_p95"] is not None)


async def _watch_until_pool_full(sim: SimHost, *, most: int = 80, interval: float = 0.3) -> tuple[
        list[dict[str, Any]], str]:
    """``watch --json`` until a sample's window says "pool full" and its peak usage is a full
    pool's (then it is interrupted, as an operator's Ctrl-C would), at most ``most`` samples: a
    scrape lands anywhere in the load's cycle (the pool fills, requests are retracted, usage falls
    by up to 20 decode steps of the running requests — 48 × 20 of 8,192 tokens, to ~0.88 — and
    fills again; the gauge is set every 5 steps), so one pool-full window may hold only scrapes of
    the cycle's low part (CI under load: the second scrape said pool full at a peak of 0.94); the
    window keeps the fullest scrape and the retractions counted between two scrapes."""
    out, err = io.StringIO(), io.StringIO()
    task = asyncio.create_task(watch(_args(sim, count=most, interval=interval), stdout=out, stderr=err))
    docs: list[dict[str, Any]] = []
    while not task.done():
        docs = [json.loads(line) for line in out.getvalue().split("\n")[:-1]]
        if docs and _is_pool_full(docs[-1]) and (docs[-1]["peak_kv_usage"] or 0.0) >= FULL_PEAK:
            task.cancel()
            break
        await asyncio.sleep(0.1)
    with contextlib.suppress(asyncio.CancelledError):
        code = await task
        assert code == 0, err.getvalue()
    return [json.loads(line) for line in out.getvalue().split("\n")[:-1]], err.getvalue()


def _pool_full(doc: dict[str, Any]) -> None:
    assert doc["retractions_per_min"] > 0, doc
    assert doc["diagnosis"]["limit"] == "pool full", doc["diagnosis"]
    assert doc["diagnosis"]["evidence"]["retractions"] > 0
    assert doc["peak_kv_usage"] >= FULL_PEAK
    assert doc["waiting"] is not None


@pytest.mark.parametrize("log", ["file", "journal"])
async def test_watch_under_load_from_the_log_when_metrics_are_off(start_sim: Any, log: str) -> None:
    sim = start_sim(log=log)
    with Load(sim.port) as load:
        sim.wait_for("KV cache pool is full. Retract requests. #retracted_reqs: ")
        docs, err = await _watch(sim, count=3)
    assert load.answered
    assert set(load.answered) == {200}  # retracted requests are served all the same
    assert len(docs) == 3
    for d in docs:
        assert d["host"] == "gpu"
        assert d["source"] == "log"
        assert d["dialect"] == "sglang-log"
        assert f"GET http://127.0.0.1:{sim.port}/metrics on gpu (through an SSH port forward) answered 404" in (
            d["metrics_error"])
        assert d["pool_tokens"] == POOL  # the boot's own max_total_num_tokens (a serving line has no pool)
    _pool_full(docs[-1])
    assert "reading the log's serving lines instead" in err
    text = sim.text()
    assert "Decode batch, #running-req: " in text
    assert ", #queue-req: " in text


async def test_watch_under_load_from_metrics_when_they_are_on(start_sim: Any) -> None:
    sim = start_sim("--enable-metrics")
    with Load(sim.port) as load:
        docs, err = await _watch_until_pool_full(sim)
    assert set(load.answered) == {200}
    assert len(docs) >= 2  # the first scrape is the counters' baseline
    for d in docs:
        assert d["source"] == "metrics"
        assert d["dialect"] == "sglang-0.5"
        assert d["metrics_error"] is None
        assert d["pool_tokens"] == POOL
    _pool_full(docs[-1])
    # the window's peak is the fullest pool one of its scrapes read (the gauge, as served)
    assert docs[-1]["peak_kv_usage"] == max(d["kv_usage"] for d in docs), [d["kv_usage"] for d in docs]
    assert docs[-1]["ttft_p95"] is not None  # the histograms, only on /metrics
    assert "reading the server's /metrics" in err


def test_wait_serving_over_ssh_diagnoses_pool_full(start_sim: Any, capsys: pytest.CaptureFixture[str]) -> None:
    sim = start_sim()
    with Load(sim.port):
        sim.wait_for("KV cache pool is full. Retract requests. #retracted_reqs: ")
        code = main(["wait", "gpu", "--hosts", str(sim.hosts), "--serving", "--json", "--timeout", "60"])
        sim.stop()  # the load's requests in flight end at once
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "ready"
    assert doc["probe"]["ok"] is True  # the readiness probe's 1-token request, answered by the simulated server
    serving = doc["serving"]
    assert serving["source"] == "log"
    assert "answered 404" in serving["metrics_error"]
    _pool_full(serving)
    evidence = serving["diagnosis"]["evidence"]
    assert evidence["pool_tokens"] == POOL
    assert evidence["peak_tokens"] >= 0.95 * POOL  # the observed demand, for tune --goal tokens=observed
    assert "kvtui wait: gpu: serving: " in err
    assert "! pool full" in err
