"""A fixed fleet for the console's fleet screen (snapshots, key tests, bench/bench_fleet_ui.py): rows
built as ``kvtui.fleet.rows.build_rows`` builds them (their trouble reasons by ``trouble_of``), every
value a function of the index — nothing depends on the wall clock — and a ``FixedSource`` that
hands them out (or fails like an unreachable Prometheus)."""

from __future__ import annotations

from dataclasses import replace

from kvtui.fleet.client import PromError
from kvtui.fleet.drill import InstanceHistory
from kvtui.fleet.rows import FleetRow, sort_rows, trouble_of

FIXED_NOW = 1_765_000_000.0  # 2025-12-06 05:46:40 UTC: the clock the snapshots read at
DOWN, RESTARTING, KV_FULL, PREEMPTING, XID = 3, 11, 17, 23, 29  # the rows in trouble (when n is above)


def synthetic_row(i: int) -> FleetRow:
    vllm = i % 3 != 1
    host = f"10.{i // 62500}.{i // 250 % 250}.{i % 250 + 1}"
    row = FleetRow(
        host=host, instance=f"{host}:{8000 if vllm else 30000}", job="vllm" if vllm else "sglang",
        engine="vllm" if vllm else "sglang", version="0.32.0" if vllm else "0.5.10",
        model=f"org/{('llama-70b', 'qwen-32b', 'mixtral-8x7b', 'gemma-27b')[i % 4]}",
        state="up", up=True, restarts_1h=0, gpus=8, mem_used_max_mib=60000.0 + (i * 37) % 15000,
        mem_total_mib=81559.0, util_pct=float(40 + i * 7 % 60), temp_max_c=float(45 + i * 3 % 40),
        kv_usage=(i * 13 % 90) / 100, kv_peak_1h=min(1.0, (i * 13 % 90 + 8) / 100), running=float(i * 5 % 48),
        queued=0.0, preemptions_per_min=0.0, ttft_p95_s=0.04 + (i % 9) * 0.03, uptime_s=3600.0 * (1 + i % 70),
    )
    if i == DOWN:
        row = replace(row, state="down", up=False, kv_usage=None, running=None, queued=None,
                      preemptions_per_min=None, uptime_s=None)
    elif i == RESTARTING:
        row = replace(row, state="restarted 4× in 1 h", restarts_1h=4, uptime_s=40.0)
    elif i == KV_FULL:
        row = replace(row, kv_usage=0.99, kv_peak_1h=1.0, queued=51.0, running=32.0)
    elif i == PREEMPTING:
        row = replace(row, preemptions_per_min=12.5, kv_usage=0.93, kv_peak_1h=0.97, queued=3.0)
    elif i == XID:
        row = replace(row, xid=79)
    return replace(row, trouble=trouble_of(row))


def synthetic_rows(n: int) -> list[FleetRow]:
    return sort_rows(synthetic_row(i) for i in range(n))


class FixedSource:
    """A ``FleetSource`` over ``synthetic_rows(n)``; ``fail`` set: every read raises it (a
    ``PromError``, as the client says an unreachable Prometheus)."""

    def __init__(self, n: int, url: str = "http://prometheus.example:9090") -> None:
        self.url = url
        self.n = n
        self.fail: str | None = None
        self.reads = 0

    def rows(self) -> list[FleetRow]:
        self.reads += 1
        if self.fail is not None:
            raise PromError(self.fail)
        return synthetic_rows(self.n)

    def history(self, row: FleetRow) -> InstanceHistory:
        start = FIXED_NOW - 3600
        pts = [(start + 15 * k, float(k % 40)) for k in range(241)]
        return InstanceHistory(start, FIXED_NOW, {"kv": pts, "running": pts, "queued": pts, "tokens": pts,
                                                  "gpu_mem": pts})
