"""``kvtui fleet [--json] [--problems] [--sort COL] [--filter TEXT]``: every serving instance of the
fleet, read from ``[prometheus]`` (``kvtui.fleet``), one row each, rows in trouble first with the
reason. Exit 0; with ``--problems`` 1 when any row is in trouble; 3 when the hosts file is wrong,
has no ``[prometheus]``, or Prometheus cannot be read (nothing is shown as healthy then).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from kvtui.config import ConfigError, load_config
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK
from kvtui.fleet.client import PromClient, PromError
from kvtui.fleet.rows import fetch_fleet, filter_rows, sort_rows

if TYPE_CHECKING:
    from kvtui.fleet.rows import FleetRow

WIDTH = 120
# (title, width, right-aligned); the last column takes what is left of WIDTH
COLUMNS: list[tuple[str, int, bool]] = [
    ("HOST", 14, False), ("ENGINE", 11, False), ("MODEL", 12, False), ("GPU", 3, True), ("MEM GiB", 7, True),
    ("UTIL", 4, True), ("TEMP", 4, True), ("KV/PEAK", 8, True), ("RUN/Q", 7, True), ("PRE/m", 5, True),
    ("TTFT95", 6, True), ("UP", 5, True),
]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172800:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


def row_cells(r: FleetRow) -> list[str]:
    mem = "-"
    if r.mem_used_max_mib is not None and r.mem_total_mib is not None:
        mem = f"{r.mem_used_max_mib / 1024:.0f}/{r.mem_total_mib / 1024:.0f}"
    kv = "-"
    if r.kv_usage is not None or r.kv_peak_1h is not None:
        now = _f(None if r.kv_usage is None else r.kv_usage * 100, ".0f")
        kv = f"{now}/{_f(None if r.kv_peak_1h is None else r.kv_peak_1h * 100, '.0f')}%"
    rq = "-" if r.running is None and r.queued is None else f"{_f(r.running, '.0f')}/{_f(r.queued, '.0f')}"
    ttft = "-"
    if r.ttft_p95_s is not None:
        ttft = f"{r.ttft_p95_s * 1000:.0f}ms" if r.ttft_p95_s < 1 else f"{r.ttft_p95_s:.1f}s"
    engine = r.engine if r.version == "unknown" else f"{r.engine} {r.version}"
    return [r.host, engine, r.model.rsplit("/", 1)[-1], _f(None if r.gpus is None else float(r.gpus), ".0f"), mem,
            _f(r.util_pct, ".0f"), _f(r.temp_max_c, ".0f"), kv, rq, _f(r.preemptions_per_min, ".1f"), ttft,
            _duration(r.uptime_s)]


def render_table(rows: list[FleetRow], width: int = WIDTH) -> str:
    used = sum(w for _, w, _ in COLUMNS) + len(COLUMNS)
    last = max(width - used, 8)

    def line(cells: list[str], state: str) -> str:
        parts = [(_cut(c, w).rjust(w) if right else _cut(c, w).ljust(w))
                 for c, (_, w, right) in zip(cells, COLUMNS, strict=True)]
        return (" ".join(parts) + " " + _cut(state, last)).rstrip()

    out = [line([t for t, _, _ in COLUMNS], "STATE / TROUBLE")]
    for r in rows:
        out.append(line(row_cells(r), "; ".join(r.trouble) if r.trouble else r.state))
    return "\n".join(out)


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        config = load_config(getattr(args, "hosts", None))
    except ConfigError as exc:
        print(f"kvtui fleet: {exc}", file=err)
        return EXIT_INPUT
    if config.prometheus is None:
        where = config.path or "no hosts file found"
        print(f"kvtui fleet: {where}: no [prometheus] section: expected one like\n"
              '  [prometheus]\n  url = "http://prometheus:9090"', file=err)
        return EXIT_INPUT
    try:
        rows = fetch_fleet(PromClient(config.prometheus))
    except PromError as exc:
        print(f"kvtui fleet: {exc}; the fleet's state is unknown", file=err)
        return EXIT_INPUT
    total_trouble = sum(1 for r in rows if r.trouble)
    rows = sort_rows(rows, args.sort)
    if args.filter:
        rows = filter_rows(rows, args.filter)
    if args.json:
        json.dump({"prometheus": config.prometheus.url, "instances": len(rows),
                   "in_trouble": sum(1 for r in rows if r.trouble), "rows": [r.to_json() for r in rows]},
                  out, indent=1)
        print(file=out)
    else:
        print(render_table(rows), file=out)
        shown = f"{len(rows)} instance(s)"
        print(f"kvtui fleet: {shown}, {sum(1 for r in rows if r.trouble)} in trouble "
              f"({config.prometheus.url})", file=err)
    if args.problems:
        in_trouble = sum(1 for r in rows if r.trouble) if args.filter else total_trouble
        return EXIT_FAILED if in_trouble else EXIT_OK
    return EXIT_OK
