"""The fleet without a Prometheus (issue 26): ``[prometheus]`` in hosts.toml, the client's errors
against loopback servers (unreachable, 401, a server that never answers, not JSON), the join of
instances to DCGM GPUs, the trouble reasons and their order, the 120-column table.
The real Prometheus: tests/test_fleet_prometheus.py."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from kvtui.cli import main
from kvtui.commands.fleet import render_table
from kvtui.config import ConfigError, PrometheusConfig, parse_config
from kvtui.fleet.client import PromClient, PromError, Sample
from kvtui.fleet.columns import SORT_COLUMNS
from kvtui.fleet.rows import QUERIES, SORT_KEYS, FleetRow, build_rows, filter_rows, host_of, sort_rows
from tests.prom_support import free_port

# --- [prometheus] ------------------------------------------------------------------------------------


def test_prometheus_section_parses() -> None:
    cfg = parse_config('[prometheus]\nurl = "https://prom.example:9090/"\nbearer_token_file = "~/t"\n'
                       'ca_file = "/etc/ca.pem"\ntimeout = 3\n').prometheus
    assert cfg is not None
    assert cfg.url == "https://prom.example:9090"  # the trailing slash dropped
    assert (cfg.bearer_token_file, cfg.ca_file, cfg.timeout) == ("~/t", "/etc/ca.pem", 3.0)
    assert parse_config("").prometheus is None


@pytest.mark.parametrize(("text", "said"), [
    ('[prometheus]\ntimeout = 2\n', "[prometheus] url: is missing"),
    ('[prometheus]\nurl = "prom:9090"\n', '[prometheus] url = "prom:9090": expected an http:// or https:// URL'),
    ('[prometheus]\nurl = "http://p"\ntimeout = 0\n', "[prometheus] timeout = 0: expected a number above 0"),
    ('[prometheus]\nurl = "http://p"\ntimout = 1\n', "did you mean 'timeout'?"),
    ('[prometheus]\nurl = "http://p"\nbasic_auth_user = "ops"\n',
     "[prometheus] basic_auth_user: expected both basic_auth_user and basic_auth_password_env"),
    ('[prometheus]\nurl = "http://p"\nbasic_auth_user = "ops"\nbasic_auth_password_env = "s3cret!"\n',
     'basic_auth_password_env = "s3cret!": expected the NAME of an environment variable'),
    ('[prometheus]\nurl = "http://p"\nbearer_token_file = "/t"\nbasic_auth_user = "o"\n'
     'basic_auth_password_env = "P"\n', "expected one of bearer_token_file or basic auth, not both"),
    ('prometheus = "http://p"\n', "prometheus = \"http://p\": expected a table [prometheus]"),
])
def test_prometheus_section_errors_name_the_key(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text)
    assert said in str(exc.value)


# --- the client's errors ------------------------------------------------------------------------------


class _Fixed(http.server.BaseHTTPRequestHandler):
    status = 200
    body = b""
    seen_auth: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        type(self).seen_auth.append(self.headers.get("Authorization"))
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(status: int, body: bytes) -> Iterator[tuple[str, list[str | None]]]:
    handler = type("H", (_Fixed,), {"status": status, "body": body, "seen_auth": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler.seen_auth
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def answers_401() -> Iterator[tuple[str, list[str | None]]]:
    yield from _serve(401, b"Unauthorized\n")


@pytest.fixture
def answers_html() -> Iterator[tuple[str, list[str | None]]]:
    yield from _serve(200, b"<html>grafana</html>")


def test_unreachable_says_cannot_reach() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PromError, match=f"cannot reach Prometheus at {url}: .*[Cc]onnection refused"):
        PromClient(PrometheusConfig(url=url, timeout=5)).query("up")


def test_401_names_the_credentials(answers_401: tuple[str, list[str | None]], tmp_path: Path) -> None:
    url, seen = answers_401
    with pytest.raises(PromError, match="answered 401 Unauthorized: it needs credentials"):
        PromClient(PrometheusConfig(url=url)).query("up")
    token = tmp_path / "token"
    token.write_text("abc123\n")
    with pytest.raises(PromError, match="answered 401 Unauthorized: check bearer_token_file"):
        PromClient(PrometheusConfig(url=url, bearer_token_file=str(token))).query("up")
    assert seen[-1] == "Bearer abc123"


def test_basic_auth_from_the_environment(answers_401: tuple[str, list[str | None]],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen = answers_401
    cfg = PrometheusConfig(url=url, basic_auth_user="ops", basic_auth_password_env="KVTUI_TEST_PROM_PW")
    monkeypatch.delenv("KVTUI_TEST_PROM_PW", raising=False)
    with pytest.raises(PromError, match=r"KVTUI_TEST_PROM_PW.*not set"):
        PromClient(cfg)
    monkeypatch.setenv("KVTUI_TEST_PROM_PW", "pw")
    with pytest.raises(PromError, match="401"):
        PromClient(cfg).query("up")
    assert seen[-1] == "Basic b3BzOnB3"  # ops:pw


def test_not_json_is_not_a_prometheus(answers_html: tuple[str, list[str | None]]) -> None:
    url, _ = answers_html
    with pytest.raises(PromError, match="the answer is not JSON"):
        PromClient(PrometheusConfig(url=url)).query("up")


def test_a_server_that_never_answers_times_out() -> None:
    with socket.socket() as s:  # listens, never accepts: connections complete, no answer comes
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(PromError, match=r"no answer within 1 s \(\[prometheus\] timeout\)"):
            PromClient(PrometheusConfig(url=url, timeout=1)).query("up")
        assert time.monotonic() - t0 < 30


def _hosts(tmp_path: Path, url: str, extra: str = "") -> str:
    p = tmp_path / "hosts.toml"
    p.write_text(f'[prometheus]\nurl = "{url}"\ntimeout = 1\n{extra}')
    return str(p)


def test_fleet_exits_3_when_prometheus_cannot_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      answers_401: tuple[str, list[str | None]]) -> None:
    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        for url, said in ((f"http://127.0.0.1:{free_port()}", "cannot reach Prometheus"),
                          (answers_401[0], "answered 401 Unauthorized"),
                          (f"http://127.0.0.1:{silent.getsockname()[1]}", "no answer within 1 s")):
            for extra in ([], ["--problems"], ["--json"]):
                t0 = time.monotonic()
                assert main(["fleet", "--hosts", _hosts(tmp_path, url), *extra]) == 3
                assert time.monotonic() - t0 < 30  # the first failure ends the refresh
                out, err = capsys.readouterr()
                assert out == ""  # nothing shown, healthy or not
                assert said in err
                assert "the fleet's state is unknown" in err


def test_fleet_without_a_prometheus_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "hosts.toml"
    p.write_text("")
    assert main(["fleet", "--hosts", str(p)]) == 3
    assert "no [prometheus] section" in capsys.readouterr().err


def test_hosts_check_reports_an_unreadable_prometheus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hosts", "--check", "--hosts", _hosts(tmp_path, f"http://127.0.0.1:{free_port()}")]) == 3
    assert "[prometheus] cannot reach Prometheus at http://127.0.0.1:" in capsys.readouterr().err


# --- rows --------------------------------------------------------------------------------------------


def S(value: float, **labels: str) -> Sample:
    return Sample(labels, value)


def _columns() -> dict[str, list[Sample]]:
    a = {"job": "vllm", "instance": "10.0.0.1:8000"}
    b = {"job": "sglang", "instance": "gpu-b.example:30000"}
    c = {"job": "vllm", "instance": "10.0.0.3:8000"}
    return {
        "up": [S(1, **a), S(1, **b), S(1, **c)],
        "vllm": [S(1, **a, model_name="meta-llama/Llama-3.1-8B"), S(1, **c, model_name="qwen")],
        "sglang": [S(2, **b, model_name="deepseek-ai/DeepSeek-V3")],
        "uptime": [S(86400, **a), S(30, **b), S(7200, **c)],
        "restarts": [S(0, **a), S(0, **b), S(1, **c)],
        "kv": [S(0.97, **a), S(0.99, **b), S(0.2, **c)],
        "kv_peak": [S(0.99, **a), S(1.0, **b), S(0.5, **c)],
        "running": [S(40, **a), S(8, **b), S(1, **c)],
        "queued": [S(12, **a), S(0, **b), S(0, **c)],
        "preempt": [S(0, **a), S(0, **b), S(0, **c)],
        "ttft_p95": [S(float("nan"), **a), S(0.25, **b)],
        # host a's DCGM exporter (joined by address), host b's by its Hostname label
        "gpus": [S(8, Hostname="node-a", instance="10.0.0.1:9400"), S(4, Hostname="gpu-b.example",
                                                                       instance="10.9.9.9:9400")],
        "mem_used": [S(78000, Hostname="node-a", instance="10.0.0.1:9400")],
        "mem_total": [S(81559, Hostname="node-a", instance="10.0.0.1:9400")],
        "temp": [S(83, Hostname="node-a", instance="10.0.0.1:9400")],
        "xid": [S(79, Hostname="gpu-b.example", instance="10.9.9.9:9400")],
    }


def test_rows_join_gpus_by_address_or_hostname_and_put_trouble_first() -> None:
    rows = build_rows(_columns())
    assert [r.host for r in rows] == ["gpu-b.example", "10.0.0.1", "10.0.0.3"]  # XID before KV full
    b, a, c = rows
    assert a.trouble == ["KV 97% with 12 queued"]
    assert (a.gpus, a.mem_used_max_mib, a.mem_total_mib, a.temp_max_c) == (8, 78000, 81559, 83)
    assert a.ttft_p95_s is None  # NaN (no request in the window) is unknown, not 0
    assert (a.engine, a.model, a.version, a.state) == ("vllm", "meta-llama/Llama-3.1-8B", "unknown", "up")
    assert b.trouble == ["XID 79"]
    assert b.gpus == 4
    assert b.state == "starting"
    assert c.trouble == []
    assert c.state == "restarted 1× in 1 h"


def test_down_restarting_preempting_are_trouble() -> None:
    cols = _columns()
    cols["up"][2] = S(0, job="vllm", instance="10.0.0.3:8000")
    cols["restarts"][1] = S(3, job="sglang", instance="gpu-b.example:30000")
    cols["preempt"][0] = S(4.5, job="vllm", instance="10.0.0.1:8000")
    rows = build_rows(cols)
    by = {r.host: r for r in rows}
    assert by["10.0.0.3"].trouble == ["down"]
    assert by["10.0.0.3"].state == "down"
    assert by["10.0.0.3"].running is None
    assert by["10.0.0.3"].uptime_s is None
    assert by["gpu-b.example"].trouble == ["restarting (3× in 1 h)", "XID 79"]
    assert [r.host for r in rows] == ["10.0.0.3", "gpu-b.example", "10.0.0.1"]
    assert by["10.0.0.1"].trouble == ["KV 97% with 12 queued", "preempting 4.5/min"]
    # sorting keeps trouble first whatever the column
    assert all(r.trouble for r in sort_rows(rows, "uptime"))


def test_sort_and_filter() -> None:
    rows = build_rows({**_columns(), "xid": [], "kv": []})
    assert [r.host for r in rows] == sorted(r.host for r in rows)  # no trouble: by host
    assert [r.host for r in sort_rows(rows, "running")] == ["10.0.0.1", "gpu-b.example", "10.0.0.3"]
    assert next(r.host for r in sort_rows(rows, "uptime")) == "10.0.0.1"
    assert [r.host for r in filter_rows(rows, "DEEPSEEK")] == ["gpu-b.example"]
    assert {r.host for r in filter_rows(rows, "restarted")} == {"10.0.0.3"}


def test_sort_columns_of_the_cli_are_the_rows_keys() -> None:
    assert tuple(SORT_KEYS) == SORT_COLUMNS


def test_one_query_per_column() -> None:
    assert len(QUERIES) <= 20
    for expr in QUERIES.values():  # aggregated for the whole fleet: no host, instance or job named in it
        assert "instance=" not in expr
        assert "Hostname=" not in expr


def test_host_of() -> None:
    assert host_of("10.0.0.5:8000") == "10.0.0.5"
    assert host_of("[fe80::1]:8000") == "fe80::1"
    assert host_of("node-a") == "node-a"


def test_table_fits_120_columns_with_the_reason() -> None:
    cols = _columns()
    cols["up"][2] = S(0, job="vllm", instance="10.0.0.3:8000")
    rows = build_rows(cols)
    rows.append(FleetRow(host="a-very-long-hostname.example.internal", instance="x:1", job="j", engine="sglang",
                         version="0.5.10", model="org/a-model-with-a-very-long-name-indeed", state="up", up=True,
                         restarts_1h=0, trouble=["restarting (12× in 1 h)", "KV 100% with 300 queued", "XID 79"]))
    text = render_table(sort_rows(rows))
    lines = text.splitlines()
    assert all(len(line) <= 120 for line in lines), max(len(line) for line in lines)
    assert lines[0].startswith("HOST")
    assert lines[0].endswith("STATE / TROUBLE")
    assert lines[1].startswith("10.0.0.3 ")
    assert lines[1].endswith(" down")
    assert lines[2].startswith("a-very-long-h… ")
    assert lines[2].endswith("…")
    assert lines[3].startswith("gpu-b.example ")
    assert lines[3].endswith(" XID 79")
    assert lines[4].startswith("10.0.0.1 ")
    assert lines[4].endswith(" KV 97% with 12 queued")
    assert " 76/80 " in lines[4]
    assert "97/99%" in lines[4]
    assert "40/12" in lines[4]


def test_readme_fleet_section_is_true() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## The fleet"):]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    cfg = parse_config(example).prometheus
    assert cfg is not None
    assert cfg.bearer_token_file == "~/.config/kvtui/prom-token"
    header = render_table([]).splitlines()[0]
    assert f"$ kvtui fleet\n{header}\n" in section
    for col in SORT_COLUMNS:
        assert col in section.split("--sort COL", 1)[1].split("--filter TEXT", 1)[0]


class _Counting(PromClient):
    """A client answering from ``_columns()`` by query text, counting what it is asked."""

    def __init__(self) -> None:
        super().__init__(PrometheusConfig(url="http://127.0.0.1:1"))
        self.asked: list[str] = []
        self.by_expr = {expr: _columns().get(name, []) for name, expr in QUERIES.items()}

    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        self.asked.append(expr)
        return self.by_expr[expr]


def test_poller_asks_the_slow_columns_once_a_minute() -> None:
    from kvtui.fleet.rows import SLOW_COLUMNS, FleetPoller

    now = [1000.0]
    poller = FleetPoller(slow_every_s=60, clock=lambda: now[0])
    client = _Counting()
    first = poller.fetch(client)
    assert sorted(client.asked) == sorted(QUERIES.values())  # everything, once
    client.asked.clear()
    now[0] += 5
    again = poller.fetch(client)
    assert sorted(client.asked) == sorted(e for k, e in QUERIES.items() if k not in SLOW_COLUMNS)
    assert len(client.asked) <= len(QUERIES) - 8
    assert again == first  # the slow columns kept: the same rows (engines, GPUs, XID, restarts)
    client.asked.clear()
    now[0] += 56
    poller.fetch(client)
    assert len(client.asked) == len(QUERIES)  # a minute on: all again


def test_kv_pool_from_vllm_labels_and_sglang_gauge() -> None:
    """vLLM says its pool in ``cache_config_info``'s labels, per DP engine (summed); SGLang as
    ``max_total_num_tokens`` (already summed over DP ranks by the query); "None" labels skipped."""
    a = {"job": "vllm", "instance": "10.0.0.1:8000"}
    b = {"job": "sglang", "instance": "gpu-b.example:30000"}
    c = {"job": "vllm", "instance": "10.0.0.3:8000"}
    cols = {**_columns(), "kv_pool": [
        S(1, **a, engine="0", num_gpu_blocks="20", block_size="128"),
        S(1, **a, engine="1", num_gpu_blocks="30", block_size="128"),
        S(384812, **b),
        S(1, **c, engine="0", num_gpu_blocks="None", block_size="16"),
    ]}
    by = {r.host: r for r in build_rows(cols)}
    assert by["10.0.0.1"].kv_pool_tokens == 50 * 128
    assert by["gpu-b.example"].kv_pool_tokens == 384812
    assert by["10.0.0.3"].kv_pool_tokens is None
    assert build_rows(_columns())[0].to_json()["kv_pool_tokens"] is None
