"""Memory (issue 7, benchmark 4): resident memory after 1 M log lines through the monitor, and over
an hour (then a second one) of simulated 8-GPU sampling — it must stay flat.

Each part runs in a fresh interpreter (RSS from /proc/self/status, after a garbage collection):

* lines: the pinned raw log (bench/gen_log.py, 8 ranks, 90 % serving lines) read by the SSH file
  follower's bulk path and ingested by a ``HostMonitor`` (live prefilter, parser, tracker,
  spool on disk, window of 5,000 lines, updates flushed to a sink every 20,000 lines), 1 M
  lines (``--quick``: 300 k); RSS before, every quarter, after. Baseline: the same interpreter
  with kvtui imported and nothing ingested.
* GPUs: 8 GPU samples per simulated second (clock injected: two simulated hours in seconds)
  through ``HostMonitor._on_gpu`` with a busy demo-like history (3,600 samples per GPU kept);
  RSS at every simulated 15 minutes; flat means the second hour adds < 1 MB.

Budget: < 200 MB; flat over the hour.

    .venv/bin/python bench/bench_memory.py [--lines 1000000]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from common import ROOT, Row, loadavg, standalone_main

BUDGET_MB = 200.0

# each measurement runs in a fresh interpreter: this prelude, then its own script
_PRELUDE = r"""
import gc, json, sys, tempfile
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])

def rss():
    gc.collect()
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
"""

_LINES = _PRELUDE + r"""
from kvtui.hosts.ssh.followers import _FileFollower
from kvtui.hosts.backend import LogStart
from kvtui.monitor import HostMonitor, MonitorOptions
log, n_expected = Path(sys.argv[2]), int(sys.argv[3])
out = {"start": rss()}
backend = SimpleNamespace(name="mem", host=SimpleNamespace(log_file=str(log), unit="u", sudo=False, pid_file=None,
                                                             start_command=None, stop_command=None), scan_window=1)
mon = HostMonitor("mem", backend, options=MonitorOptions(state_dir=Path(tempfile.mkdtemp()), log_window=5000))
mon.publisher.sink = lambda updates: None
follower = _FileFollower(backend, LogStart.CURRENT_BOOT, "0")
marks, seen = [], 0
with log.open("rb") as f:
    while chunk := f.read(1 << 18):
        block = follower.feed_block(chunk)
        mon.ingest.range(block, mon.ingest.plan(block), 0, len(block))
        seen += len(block)
        if seen // 20000 != (seen - len(block)) // 20000:
            mon.publisher.flush()
        if len(marks) < 4 and seen >= (len(marks) + 1) * n_expected // 4:
            marks.append(rss())
mon.publisher.flush(final=True)
out["marks"] = marks
out["end"] = rss()
out["lines"] = mon.lines_seen
out["spool_index_kib"] = mon.spool.index_bytes() / 1024
print(json.dumps(out))
"""

_GPUS = _PRELUDE + r"""
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.monitor import HostMonitor, MonitorOptions
now = [1_777_000_000.0]
backend = SimpleNamespace(name="gpu")
mon = HostMonitor("gpu", backend, options=MonitorOptions(state_dir=Path(tempfile.mkdtemp()), clock=lambda: now[0]))
mon.publisher.sink = lambda updates: None
marks = {}
for second in range(2 * 3600 + 1):
    t = now[0] = 1_777_000_000.0 + second
    samples = [
        GpuSample(index=i, used_mib=60000 + (second * 7 + i * 13) % 9000, total_mib=143771, util=(second + i) % 100,
                  ts=t, processes=(GpuProcess(pid=7000 + i, used_mib=59000, name="python3", gpu_index=i),))
        for i in range(8)
    ]
    mon.pollers.on_gpu(samples)
    if second % 20 == 0:
        mon.publisher.flush()
    if second % 900 == 0:
        marks[second // 60] = rss()
print(json.dumps({"marks": marks, "history": len(mon.gpu_history(0))}))
"""


def _py(script: str, *args: str) -> dict[str, object]:
    res = subprocess.run([sys.executable, "-c", script, str(ROOT), *args], capture_output=True, text=True, check=True)
    out: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def run(quick: bool, workdir: Path, *, lines: int | None = None) -> list[Row]:
    from gen_log import write

    n = lines or (300_000 if quick else 1_000_000)
    work = workdir / "memory"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench-raw.log"
    count = write(log, "raw", n)
    load0 = loadavg()
    a = _py(_LINES, str(log), str(count))
    g = _py(_GPUS)
    end = float(a["end"])  # type: ignore[arg-type]
    start = float(a["start"])  # type: ignore[arg-type]
    marks = [f"{float(m):.0f}" for m in a["marks"]]  # type: ignore[attr-defined]
    gm = {int(k): float(v) for k, v in g["marks"].items()}  # type: ignore[attr-defined]
    hour1, hour2 = gm[60] - gm[0], gm[120] - gm[60]
    index_kib = float(a["spool_index_kib"])  # type: ignore[arg-type]
    flat = hour2 < 1.0
    return [
        Row("4 memory", f"RSS after {count / 1e6:.1f} M lines", end, "MB", start, "kvtui imported", "< 200 MB",
            end < BUDGET_MB, f"RSS by quarter {' / '.join(marks)} MB; spool index {index_kib:.0f} KiB (the lines "
            f"are on disk); load {load0}"),
        Row("4 memory", "RSS over 2 h of 8-GPU sampling", gm[120], "MB", gm[0], "at 0 min",
            "< 200 MB, flat", gm[120] < BUDGET_MB and flat,
            f"+{hour1:.1f} MB in hour 1 (history fills: {g['history']} samples/GPU kept), +{hour2:.1f} MB in hour 2; "
            f"every 15 min: {' '.join(f'{gm[k]:.0f}' for k in sorted(gm))} MB"),
    ]


def main() -> int:
    return standalone_main("memory", run, __doc__, lines=(int, None))


if __name__ == "__main__":
    raise SystemExit(main())
