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

from kvtui import fmt
from kvtui.config import load_config_or_say
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK
from kvtui.fleet.client import PromClient, PromError
from kvtui.fleet.rows import fetch_fleet, filter_rows, row_cells, sort_rows

if TYPE_CHECKING:
    from kvtui.fleet.rows import FleetRow

WIDTH = 120
# (title, width, right-aligned); the last column takes what is left of WIDTH
COLUMNS: list[tuple[str, int, bool]] = [
    ("HOST", 14, False), ("ENGINE", 11, False), ("MODEL", 12, False), ("GPU", 3, True), ("MEM GiB", 7, True),
    ("UTIL", 4, True), ("TEMP", 4, True), ("KV/PEAK", 8, True), ("RUN/Q", 7, True), ("PRE/m", 5, True),
    ("TTFT95", 6, True), ("UP", 5, True),
]


def render_table(rows: list[FleetRow], width: int = WIDTH) -> str:
    used = sum(w for _, w, _ in COLUMNS) + len(COLUMNS)
    last = max(width - used, 8)

    def line(cells: list[str], state: str) -> str:
        parts = [(fmt.cut(c, w).rjust(w) if right else fmt.cut(c, w).ljust(w))
                 for c, (_, w, right) in zip(cells, COLUMNS, strict=True)]
        return (" ".join(parts) + " " + fmt.cut(state, last)).rstrip()

    out = [line([t for t, _, _ in COLUMNS], "STATE / TROUBLE")]
    for r in rows:
        out.append(line(row_cells(r), "; ".join(r.trouble) if r.trouble else r.state))
    return "\n".join(out)


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    config = load_config_or_say(getattr(args, "hosts", None), err, who="kvtui fleet")
    if config is None:
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
