"""kvtui's benchmark suite (issue 7): one command runs every benchmark and prints one table.

    .venv/bin/python -m bench            # the full suite (~12 minutes on 2 cores)
    .venv/bin/python -m bench --quick    # shorter runs (~4 minutes)
    .venv/bin/python -m bench --only 2,3 # some benchmarks
    .venv/bin/python -m bench --markdown bench/results.md   # also write the table there

1 parser (``kvtui replay`` vs ``grep -E``), 2 end-to-end ingest over SSH (a real sshd on 127.0.0.1;
vs ``ssh … cat | grep -E``), 3 the console under a 20,000 lines/s storm, 4 memory, 5 idle CPU,
6 start-up, 7 many hosts, 8 soak over a cutting proxy, 9 a server up for days (time to its boot ready with
figures), 10 the fleet (a real Prometheus holding 1,000 instances × 8 GPUs). Each row: kvtui's figure,
the baseline measured in the same run, their ratio, the budget and whether it was met; the machine
and its load average are printed with the table (the machine is shared: the load average says how
much other work competed). Exit status 1 when a budget was missed. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, loadavg, machine, table

BENCHMARKS = {
    1: "bench_parser",
    2: "bench_ingest",
    3: "bench_storm",
    4: "bench_memory",
    5: "bench_idle",
    6: "bench_startup",
    7: "bench_hosts",
    8: "bench_soak",
    9: "bench_uptime",
    10: "bench_fleet",
}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs (fewer lines, seconds and repeats)")
    ap.add_argument("--only", default="", help="comma-separated benchmark numbers (default: all)")
    ap.add_argument("--markdown", type=Path, help="also write the machine line and the table to this file")
    a = ap.parse_args()
    wanted = [int(x) for x in a.only.split(",") if x.strip()] or list(BENCHMARKS)
    unknown = [n for n in wanted if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark number(s) {unknown}: expected 1-{max(BENCHMARKS)}")
    work = Path(tempfile.mkdtemp(prefix="kvtui-bench-"))
    rows: list[Row] = []
    started = time.perf_counter()
    load_before = loadavg()
    try:
        for n in wanted:
            name = BENCHMARKS[n]
            t0 = time.perf_counter()
            print(f"[{n}] {name} …", file=sys.stderr, flush=True)
            try:
                module = importlib.import_module(name)
                got: list[Row] = module.run(a.quick, work)
            except Exception as exc:  # one broken benchmark must not hide the others
                traceback.print_exc()
                got = [Row(f"{n} {name}", "error", None, "", met=False, note=f"{type(exc).__name__}: {exc}")]
            rows.extend(got)
            print(f"[{n}] done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    head = (f"machine: {machine()}; load average {load_before} before / {loadavg()} after; "
            f"{'quick' if a.quick else 'full'} run in {time.perf_counter() - started:.0f} s")
    out = f"{head}\n\n{table(rows)}"
    print(out)
    if a.markdown is not None:
        a.markdown.write_text(out + "\n")
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
