"""Start-up (issue 7, benchmark 6): ``kvtui --help`` wall time, and ``kvtui connect demo`` time to
the first full paint.

* ``--help``: the console script run N times (median), next to the bare interpreter
  (``python -c pass``, the floor any Python CLI pays). Budget < 0.3 s.
* first full paint: ``kvtui connect demo`` on a 160x48 pseudo-terminal, from the exec to the end
  of the first frame that holds the whole layout (the demo host's name, the GPU, log and
  calculator panels and the footer's keys), with config and state in a scratch directory.
  Budget < 1.5 s. The time until the host's GPU bars show data is reported too. Python's
  bytecode is cached as on a user's machine: one untimed start first compiles it (its time, the
  first start after an install, is in the notes).

    .venv/bin/python bench/bench_startup.py [--runs 5]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from common import Row, loadavg, median, standalone_main
from ttyapp import TtyApp, isolated_env, kvtui_argv

PAINT_NEEDLES = (b"demo", b"GPU", b"Log", b"Calculator", b"Quit")


def _wall(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def _first_paint(work: Path, env: dict[str, str], cpu: list[float] | None = None) -> tuple[float | None, float | None]:
    """Seconds to the first full paint and to the GPU bars' data; ``cpu`` gets the process's CPU
    seconds when the paint was seen (what a loaded machine's wall clock blurs)."""
    app = TtyApp(kvtui_argv("connect", "demo"), env, cwd=work)
    try:
        paint = app.wait_for_frame_with(PAINT_NEEDLES, timeout=30)
        if paint is not None and cpu is not None:
            cpu.append(app.cpu_seconds())
        data = app.wait_for_frame_with((*PAINT_NEEDLES, b"/96G"), timeout=15) if paint is not None else None
    finally:
        app.close()
    return paint, data


def run(quick: bool, workdir: Path, *, runs: int | None = None) -> list[Row]:
    runs = runs or (3 if quick else 7)
    work = workdir / "startup"
    work.mkdir(parents=True, exist_ok=True)
    env = isolated_env(work)
    load0 = loadavg()
    _wall(kvtui_argv("--help"), env)  # warm the page cache and the bytecode
    helps = [_wall(kvtui_argv("--help"), env) for _ in range(runs)]
    floor = [_wall([sys.executable, "-c", "pass"], env) for _ in range(runs)]
    cold, _ = _first_paint(work, env)  # compiles and caches the console's bytecode
    paints: list[float] = []
    datas: list[float] = []
    cpus: list[float] = []
    for _ in range(max(1, runs // 2)):
        paint, data = _first_paint(work, env, cpus)
        if paint is not None:
            paints.append(paint)
        if data is not None:
            datas.append(data)
    help_s = median(helps)
    paint_s = median(paints) if paints else None
    return [
        Row("6 start-up", "kvtui --help", help_s, "s", median(floor), "python -c pass", "< 0.3 s", help_s < 0.3,
            f"median of {runs}, load {load0}"),
        Row("6 start-up", "connect demo: first full paint", paint_s, "s", budget="< 1.5 s",
            met=paint_s is not None and paint_s < 1.5,
            note=((f"median of {len(paints)} on a 160x48 pty ({median(cpus):.2f} s of CPU by then); the demo's GPU "
                   f"bars filled after "
                   f"{median(datas):.2f} s" if datas else f"median of {len(paints)}; no GPU data within 15 s after it")
                  + (f"; first start (bytecode compiled) {cold:.2f} s" if cold is not None else "")
                  + f"; load {loadavg()}")
            if paints else "no full paint within 30 s"),
    ]


def main() -> int:
    return standalone_main("startup", run, __doc__, runs=(int, None))


if __name__ == "__main__":
    raise SystemExit(main())
