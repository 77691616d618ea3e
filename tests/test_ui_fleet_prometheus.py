"""The console's fleet screen against a real Prometheus (Debian's ``prometheus``, tests/prom_support.py)
scraping a small simulated fleet on loopback: 12 instances (vLLM and SGLang texts with the real names
and HELP lines, a DCGM exporter of 8 GPUs each), one down and one preempting. Read as ``kvtui
connect`` with no HOST reads it (the hosts file's ``[prometheus]``): trouble first, sort, filter,
drill-in to a configured host and to the instance view (``query_range``), and a Prometheus that is
unreachable, answers 401 or times out: the banner, and no row shown as healthy."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_ui_helpers import screen_text, wait_for
from textual.pilot import Pilot

from kvtui.config import PrometheusConfig, load_config
from kvtui.hosts.factory import make_backend
from kvtui.ui.app import KvtuiApp, MainScreen
from kvtui.ui.fleet.screen import FleetScreen, InstanceScreen, PromFleetSource
from tests.prom_support import Exporters, Prometheus, dcgm_text, free_port, need_prometheus, sglang_text, vllm_text

N = 12
DOWN, PREEMPTING, CONFIGURED, UNKNOWN = 2, 6, 4, 8


def addr(i: int) -> str:
    return f"127.0.1.{i + 2}"


@dataclass
class Fleet:
    prom: Prometheus
    port: int
    tmp: Path

    def instance(self, i: int) -> str:
        return f"{addr(i)}:{self.port}"

    def hosts_file(self, extra: str = "", url: str | None = None) -> Path:
        path = self.tmp / "hosts.toml"
        path.write_text(f'[prometheus]\nurl = "{url or self.prom.url}"\ntimeout = 20\n{extra}')
        return path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    need_prometheus()
    tmp = tmp_path_factory.mktemp("fleetui")
    ex = Exporters()
    port, dcgm_port = free_port(addr(0)), free_port(addr(0))
    scrapes = {"down": 0, "busy": 0}
    lock = threading.Lock()
    jobs: dict[str, list[str]] = {"vllm": [], "sglang": [], "dcgm": []}
    try:
        for i in range(N):
            if i == DOWN:
                def text() -> str | None:
                    with lock:
                        scrapes["down"] += 1
                        return vllm_text("org/down") if scrapes["down"] <= 2 else None
            elif i == PREEMPTING:
                def text() -> str | None:
                    with lock:
                        scrapes["busy"] += 1
                        return vllm_text("org/busy", running=40, waiting=3, kv=0.9, preemptions=5 * scrapes["busy"])
            elif i % 2 == 0:
                def text(i: int = i) -> str | None:
                    return vllm_text(f"org/model-{i}", kv=0.1 + i / 100)
            else:
                def text(i: int = i) -> str | None:
                    return sglang_text(f"org/model-{i}", queued=i)
            jobs["vllm" if i % 2 == 0 else "sglang"].append(ex.add(addr(i), port, text))

            def gpus(i: int = i) -> str | None:
                return dcgm_text(f"gpu-{i:02d}", 8, used=50000 + 100 * i)

            jobs["dcgm"].append(ex.add(addr(i), dcgm_port, gpus))
        prom = Prometheus(tmp, jobs)
        try:
            down, busy = f"{addr(DOWN)}:{port}", f"{addr(PREEMPTING)}:{port}"
            prom.wait(lambda: prom.value("count(up)") == 2 * N, 90, "every target scraped")
            prom.wait(lambda: prom.value(f'max_over_time(up{{instance="{down}"}}[1h])') == 1
                      and prom.value(f'count(up{{instance="{down}"}} == 0)') == 1, 90, "one instance down")
            prom.wait(lambda: prom.value(f'rate(vllm:num_preemptions_total{{instance="{busy}"}}[5m])') > 0,
                      90, "preemptions")
            yield Fleet(prom, port, tmp)
        finally:
            prom.close()
    finally:
        ex.close()


def console(hosts_file: Path) -> KvtuiApp:
    """What ``kvtui connect`` with no HOST runs (the hosts file's [prometheus])."""
    app = KvtuiApp([], backend_factory=make_backend, config=load_config(str(hosts_file)))
    app.animation_level = "none"
    return app


async def first_read(pilot: Pilot[Any], app: KvtuiApp, reads: int = 1) -> FleetScreen:
    screen = app.screen
    assert isinstance(screen, FleetScreen)
    await wait_for(pilot, lambda: screen.reads >= reads, timeout=60)
    await pilot.pause()
    return screen


async def test_trouble_first_sort_and_filter(fleet: Fleet) -> None:
    app = console(fleet.hosts_file())
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await first_read(pilot, app)
        assert screen.problem is None
        rows = screen.table.rows
        assert len(rows) == N
        assert [r.instance for r in rows[:2]] == [fleet.instance(DOWN), fleet.instance(PREEMPTING)]
        assert rows[0].trouble == ["down"]
        assert rows[1].trouble[0].startswith("preempting ")
        assert all(not r.trouble for r in rows[2:])
        text = screen_text(app)
        assert f"{fleet.prom.url} · {N} instances, 2 in trouble · read " in text
        source = screen.source
        assert isinstance(source, PromFleetSource)
        before = source.poller._slow_at
        assert before > 0  # the first read asked every column, the slow ones kept for a minute
        again = await asyncio.to_thread(source.rows)
        assert source.poller._slow_at == before  # a read within the minute asks only the fast columns
        assert [r.instance for r in again[:2]] == [fleet.instance(DOWN), fleet.instance(PREEMPTING)]
        assert {r.engine for r in again} == {"vllm", "sglang"}  # engines from the kept slow columns
        while screen.sort_key != "queued":
            await pilot.press("s")
        queued = [r.queued for r in screen.table.rows[2:]]
        assert queued == sorted(queued, reverse=True)  # the SGLang queues 11, 9, 7… first
        assert queued[0] == 11
        await pilot.press("S")
        queued = [r.queued for r in screen.table.rows[2:]]
        assert queued == sorted(queued)
        await pilot.press("slash", *"sglang")
        assert len(screen.table.rows) == N // 2
        assert {r.engine for r in screen.table.rows} == {"sglang"}
        await pilot.press("escape")
        assert len(screen.table.rows) == N


async def test_drill_in_to_a_configured_host_and_to_the_instance_view(fleet: Fleet) -> None:
    hosts = fleet.hosts_file(f'[hosts.gpu-four]\ndemo = true\nprometheus_instance = "{fleet.instance(CONFIGURED)}"\n')
    app = console(hosts)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await first_read(pilot, app)
        # an instance no host serves: its last hour from query_range, and the lines to paste
        await pilot.press("slash", *addr(UNKNOWN), "enter")
        assert [r.instance for r in screen.table.rows] == [fleet.instance(UNKNOWN)]
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, InstanceScreen))
        view = app.screen
        assert isinstance(view, InstanceScreen)
        await wait_for(pilot, lambda: view.history is not None or view.problem is not None, timeout=60)
        assert view.problem is None
        assert view.history is not None
        kv = view.history.series["kv"]
        assert kv
        assert kv[-1][1] == pytest.approx(18.0)  # vllm:kv_cache_usage_perc 0.18, in %
        assert view.history.series["gpu_mem"][-1][1] == pytest.approx((50000 + 100 * UNKNOWN) / 1024)
        assert view.history.series["queued"][-1][1] == 0
        assert f'prometheus_instance = "{fleet.instance(UNKNOWN)}"' in screen_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        # the configured one: its console
        await pilot.press("escape", "slash", *addr(CONFIGURED), "enter")
        assert [r.instance for r in screen.table.rows] == [fleet.instance(CONFIGURED)]
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        host = app.screen
        assert isinstance(host, MainScreen)
        assert host.host_names == ["gpu-four"]
        await pilot.press("F")
        await wait_for(pilot, lambda: app.screen is screen)


async def test_unreachable_then_stale_no_row_healthy(fleet: Fleet) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    app = console(fleet.hosts_file(url=dead))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await first_read(pilot, app)
        text = screen_text(app)
        assert f"✖ cannot reach Prometheus at {dead}: Connection refused" in text
        assert screen.table.rows == []
    # read once, then Prometheus goes away: the rows stay, greyed, stale, none "up"
    app = console(fleet.hosts_file())
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await first_read(pilot, app)
        assert screen.problem is None
        source = screen.source
        assert isinstance(source, PromFleetSource)
        source.cfg = PrometheusConfig(url=dead)
        await pilot.press("r")
        await wait_for(pilot, lambda: screen.problem is not None, timeout=60)
        await pilot.pause()
        text = screen_text(app)
        assert "cannot reach Prometheus" in text
        assert "STALE, read " in text
        table = screen.table
        assert table.stale is not None
        assert table.stale.startswith("stale ")
        assert len(table.rows) == N
        lines = [line for line in text.splitlines() if line.startswith("127.0.1.")]
        assert len(lines) == N
        assert all(" stale " in line and not line.rstrip(" ▇▁").endswith(" up") for line in lines)


class _Unauthorized(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"Unauthorized\n"
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


async def test_401_and_a_timeout_say_so(fleet: Fleet) -> None:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections (the kernel's backlog), never answers
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        app = console(fleet.hosts_file(url=url))
        async with app.run_test(size=(120, 36)) as pilot:
            screen = await first_read(pilot, app)
            assert f"Prometheus at {url} answered 401 Unauthorized: it needs credentials" in screen_text(app)
            assert screen.table.rows == []
        quiet = f"http://127.0.0.1:{silent.getsockname()[1]}"
        path = fleet.hosts_file(url=quiet)
        path.write_text(path.read_text().replace("timeout = 20", "timeout = 1"))
        app = console(path)
        async with app.run_test(size=(120, 36)) as pilot:
            screen = await first_read(pilot, app)
            assert f"Prometheus at {quiet}: no answer within 1 s ([prometheus] timeout)" in screen_text(app)
            assert screen.table.rows == []
    finally:
        srv.shutdown()
        srv.server_close()
        silent.close()
