"""Idle cost (issue 7, benchmark 5): CPU % of one core while the console watches a quiet host.

``kvtui connect demo`` runs on a 160x48 pseudo-terminal against the simulated 8-GPU host, whose
server was started an hour earlier: it is ready and idle-serving (a serving line every 5 s), its 8
GPUs are sampled at 1 Hz. After the first paint and a settling time, the process's CPU time
(user + system, from /proc) is measured over 60 s (``--quick``: 20 s). Budget < 3 % of one core
(redraw only what changed and is visible).

    .venv/bin/python bench/bench_idle.py [--seconds 60]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from common import Row, loadavg, standalone_main
from ttyapp import TtyApp, isolated_env, kvtui_argv

BUDGET_PCT = 3.0
SETTLE_S = 8.0

_START_DEMO = (
    "import time\n"
    "from kvtui.config import HostConfig\n"
    "from kvtui.sim.backend import DemoBackend\n"
    "DemoBackend('demo', HostConfig(demo=True), clock=lambda: time.time() - 3600).read_unit()\n"
)


def run(quick: bool, workdir: Path, *, seconds: float | None = None) -> list[Row]:
    secs = seconds or (20.0 if quick else 60.0)
    work = workdir / "idle"
    work.mkdir(parents=True, exist_ok=True)
    env = isolated_env(work)
    subprocess.run([sys.executable, "-c", _START_DEMO], env=env, check=True)  # its server booted an hour ago
    load0 = loadavg()
    app = TtyApp(kvtui_argv("connect", "demo"), env, cwd=work)
    try:
        paint = app.wait_for_frame_with((b"demo", b"Log", b"Quit"), timeout=60)
        if paint is None:
            return [Row("5 idle", "CPU % of one core", None, "%", budget="< 3 %", met=False,
                        note="the console did not paint within 60 s")]
        time.sleep(SETTLE_S)
        c0, t0, n0 = app.cpu_seconds(), time.perf_counter(), len(app.output)
        time.sleep(secs)
        c1, t1, n1 = app.cpu_seconds(), time.perf_counter(), len(app.output)
    finally:
        app.close()
    pct = (c1 - c0) / (t1 - t0) * 100
    return [Row("5 idle", "CPU % of one core", pct, "%", budget="< 3 %", met=pct < BUDGET_PCT,
                note=f"{secs:.0f} s, ready demo host serving (a line / 5 s), 8 GPUs at 1 Hz; "
                     f"{(n1 - n0) / (t1 - t0) / 1024:.1f} KiB/s to the terminal; load {load0}")]


def main() -> int:
    return standalone_main("idle", run, __doc__, seconds=(float, None))


if __name__ == "__main__":
    raise SystemExit(main())
