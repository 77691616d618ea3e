"""Parser throughput: `kvtui replay`'s pipeline vs `grep -E '<phase patterns>'` (issue 7, benchmark 1).

Generates the pinned multi-rank log (bench/gen_log.py: 8 ranks, ~150-byte lines, 2 % phase/figure
lines, 8 % tqdm, 90 % serving) in the raw, short, short-iso and json shapes, and a `short` journal
of a service that mostly serves (short-serving: boots of 20,000 lines, 98 % serving lines), under a
temporary directory, then times, over each file:

* kvtui: the whole ``kvtui replay`` pipeline in-process (chunked read -> shape detection ->
  prefilter, the second half on a second core -> records -> LineParser -> BootTracker -> boots),
  best of ``--runs``, as wall-clock
  lines/s and as lines per CPU-second of the process (the latter is what other work on a shared
  machine cannot take away; the load average is printed with the table);
* grep: ``grep -E '<the phase patterns>' FILE`` printing the matching lines into a pipe (what an
  operator would reach for), best of runs.

Budget: >= 300k lines/s raw, short (journalctl's default, year-less stamps), short-iso and
short-serving, >= 150k lines/s json.

    .venv/bin/python bench/bench_parser.py [--lines 1000000] [--runs 2] [--full] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, loadavg, median
from gen_log import BOOT_LINES, SHAPES, write

from kvtui.bootlog import read_log
from kvtui.commands.logfile import read_chunks
from kvtui.commands.replay import analyse_path

PHASE_PATTERNS = (
    "server_args=|Init torch distributed|Load weight (begin|end)|KV Cache is allocated|Memory pool end|"
    "Capture .*graph|max_total_num_tokens=|Uvicorn running|fired up and ready|Traceback|Error|out of memory|"
    "Started |Stopping "
)
BUDGET = {"raw": 300_000, "short": 300_000, "short-iso": 300_000, "json": 150_000, "short-serving": 300_000,
          "short-dp4": 300_000}
# (row name, input shape, lines per boot): the pinned log in every shape, and the default
# `journalctl -u UNIT` output (short) of a service that mostly serves (boots of 20,000 lines: 98 %
# serving lines, long runs of them, as a journal of a server up for days is), and the same journal
# of 4 SGLang DP attention ranks interleaved line by line (short-dp4: no two neighbours share a rank)
CASES: tuple[tuple[str, str, int, int], ...] = (
    *((shape, shape, BOOT_LINES, 0) for shape in SHAPES),
    ("short-serving", "short", 20_000, 0),
    ("short-dp4", "short", 20_000, 4),
)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the replay's second-core worker)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def time_kvtui(path: Path, *, full: bool = False) -> tuple[float, int, str, float]:
    """(wall seconds, boots, last boot's status, CPU seconds incl. the forked worker)."""
    c0 = _cpu()
    t0 = time.perf_counter()
    with path.open("rb") as f:
        if full:
            boots, _shape = read_log(read_chunks(f, str(path)), all_lines=True)
        else:
            boots, _shape = analyse_path(str(path))
    dt = time.perf_counter() - t0
    last = boots[-1].status.value if boots else "-"
    return dt, len(boots), last, _cpu() - c0


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def time_grep(path: Path) -> float:
    grep = shutil.which("grep") or "grep"
    t0 = time.perf_counter()
    # stdout must not be /dev/null: GNU grep then stops at the first match (it behaves like -q)
    subprocess.run([grep, "-E", PHASE_PATTERNS, str(path)], stdout=subprocess.PIPE, check=False)
    return time.perf_counter() - t0


def run(quick: bool, workdir: Path, *, lines: int | None = None, runs: int | None = None) -> list[Row]:
    """Benchmark 1 for the suite (``python -m bench``): one row per shape, median of ``runs``."""
    n = lines or (300_000 if quick else 1_000_000)
    runs = runs or (2 if quick else 3)
    work = workdir / "parser"
    work.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    for name, shape, boot_lines, dp in CASES:
        path = work / f"bench-{name}.log"
        if not path.exists():
            write(path, shape, n, boot_lines=boot_lines, dp=dp)
        count = sum(1 for _ in path.open("rb"))
        load0 = loadavg()
        k = [time_kvtui(path) for _ in range(runs)]
        g = [time_grep(path) for _ in range(runs)]
        wall = median([x[0] for x in k])
        cpu = median([x[3] for x in k])
        rate = count / wall
        rows.append(Row(
            "1 parser (replay)", name, rate, "lines/s", count / median(g), "grep -E", f">= {BUDGET[name] // 1000}k",
            rate >= BUDGET[name],
            f"{count:,} lines, {k[0][1]} boots, {count / cpu:,.0f} lines per CPU-second, load {load0}",
        ))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description="kvtui parser throughput vs grep -E")
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--full", action="store_true", help="also time the unfiltered path (every line parsed)")
    ap.add_argument("--keep", type=Path, help="write the logs here and keep them")
    ap.add_argument("--cases", default=",".join(c[0] for c in CASES), help="comma-separated rows to run")
    a = ap.parse_args()
    load_before = _loadavg()
    tmp = Path(tempfile.mkdtemp(prefix="kvtui-bench-")) if a.keep is None else a.keep
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    ok = True
    try:
        for name, shape, boot_lines, dp in (c for c in CASES if c[0] in a.cases.split(",")):
            path = tmp / f"bench-{name}.log"
            if not path.exists():
                write(path, shape, a.lines, boot_lines=boot_lines, dp=dp)
            n = sum(1 for _ in path.open("rb"))
            size = path.stat().st_size
            best = min(time_kvtui(path) for _ in range(a.runs))
            g = min(time_grep(path) for _ in range(a.runs))
            rate = n / best[0]
            cpu = best[3]
            row = [name, f"{n:,}", f"{size / n:.0f}", f"{rate:,.0f}", f"{n / cpu:,.0f}", f"{n / g:,.0f}"]
            row += [f"{g / best[0]:.3f}", f"{best[1]}"]
            if a.full:
                full = min(time_kvtui(path, full=True) for _ in range(a.runs))
                row.append(f"{n / full[0]:,.0f}")
            meets = rate >= BUDGET[name]
            ok &= meets
            row.append(f">= {BUDGET[name] // 1000}k: {'met' if meets else 'MISSED'}")
            rows.append(row)
    finally:
        if a.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    head = ["shape", "lines", "B/line", "kvtui lines/s", "kvtui lines/CPU-s", "grep -E lines/s", "kvtui/grep", "boots"]
    if a.full:
        head.append("unfiltered lines/s")
    head.append("budget")
    load = _loadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load_before} before / {load} after (other work competes)")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
