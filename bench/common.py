"""Shared pieces of the benchmark suite: result rows, the table, load average, medians.

Every benchmark module exposes ``run(quick: bool, workdir: Path) -> list[Row]``; ``python -m bench``
runs them all and prints one table. A row carries kvtui's figure, the baseline's figure measured
in the same run (when the benchmark has one), their ratio, the budget and whether it was met.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for _p in (str(ROOT), str(BENCH)):
    if _p not in sys.path:
        sys.path.insert(0, _p)


@dataclass
class Row:
    bench: str  # "1 parser", "2 ssh ingest", …
    case: str  # "raw", "p95 keystroke", …
    kvtui: float | None
    unit: str  # "lines/s", "ms", "MB", "%", "s"
    baseline: float | None = None
    baseline_name: str = ""
    budget: str = ""  # ">= 300k", "< 100 ms"
    met: bool | None = None  # None: no budget / not measured
    note: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.kvtui is None or not self.baseline:
            return None
        return self.kvtui / self.baseline


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "lines/s":
        return f"{v:,.0f}"
    if unit in ("ms", "s"):
        return f"{v:.3f}" if v < 1 and unit == "s" else f"{v:.1f}"
    if unit in ("MB", "%"):
        return f"{v:.1f}"
    return f"{v:g}"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on the sorted values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM, Python {sys.version.split()[0]}"


def table(rows: Sequence[Row]) -> str:
    head = ["benchmark", "case", "kvtui", "baseline", "ratio", "budget", "verdict", "notes"]
    body: list[list[str]] = []
    for r in rows:
        base = "-"
        if r.baseline is not None:
            base = f"{fmt_value(r.baseline, r.unit)} ({r.baseline_name})" if r.baseline_name else fmt_value(
                r.baseline, r.unit)
        ratio = r.ratio
        verdict = "-" if r.met is None else ("met" if r.met else "MISSED")
        body.append([
            r.bench, r.case, f"{fmt_value(r.kvtui, r.unit)} {r.unit}", base,
            "-" if ratio is None else f"{ratio:.2f}", r.budget or "-", verdict, r.note,
        ])
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for b in body:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) + " |")
    return "\n".join(out)


def run_standalone(name: str, run: Callable[..., list[Row]], quick: bool, **options: object) -> int:
    """A benchmark run as a script (``bench/bench_NAME.py``): in a scratch directory removed
    afterwards, its rows printed as the table; exit 0 when no budget was missed."""
    work = Path(tempfile.mkdtemp(prefix=f"kvtui-bench-{name}-"))
    try:
        rows = run(quick, work, **options)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    return 0 if all(r.met is not False for r in rows) else 1


def standalone_main(name: str, run: Callable[..., list[Row]], doc: str | None, **options: tuple[type, object]) -> int:
    """``main()`` of ``bench/bench_NAME.py``: one ``--KEY`` per keyword (its type and default), then
    ``--quick``; the parsed options go to ``run_standalone``."""
    ap = argparse.ArgumentParser(description=(doc or name).splitlines()[0])
    for key, (kind, default) in options.items():
        ap.add_argument(f"--{key}", type=kind, default=default)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    return run_standalone(name, run, a.quick, **{key: getattr(a, key) for key in options})


def spooled_lines(spool_files: Sequence[Path]) -> tuple[int, int]:
    """(log lines, marker lines) written to a spool set."""
    lines = markers = 0
    for p in spool_files:
        with p.open("rb") as f:
            for raw in f:
                parts = raw.split(b"\t", 3)
                if len(parts) >= 3 and parts[2] == b"marker":
                    markers += 1
                else:
                    lines += 1
    return lines, markers


def watch_frames(app: Any, frames: list[float], drawn: asyncio.Event) -> None:
    """From now on, the time of every frame the Textual ``app`` draws goes into ``frames`` (and
    sets ``drawn``): a keystroke's latency ends at the first frame after its action ran."""
    original = app._display

    def display(screen: Any, renderable: Any) -> None:
        if renderable is not None:
            frames.append(time.perf_counter())
            drawn.set()
        original(screen, renderable)

    app._display = display


def send_key(app: Any, key: str) -> None:
    """``key`` into the Textual ``app`` the way ``Pilot.press`` sends it (``/``: the slash key)."""
    from textual import events  # lazy: the suite's other benchmarks import no Textual

    event = events.Key({"/": "slash"}.get(key, key), key if len(key) == 1 else None)
    event.set_sender(app)
    assert app._driver is not None
    app._driver.send_message(event)


async def frame_after_action(acted: asyncio.Event, drawn: asyncio.Event, frames: list[float], at: list[float],
                             timeout: float = 2.0) -> None:
    """Until the action a key triggers has run (``acted``, see ``noting``) and a frame is drawn after it
    (``watch_frames``), or ``timeout`` seconds: the caller reads the key's first frame from ``frames``."""
    try:
        async with asyncio.timeout(timeout):
            await acted.wait()
            while not (frames and frames[-1] >= at[-1]):
                drawn.clear()
                await drawn.wait()
    except TimeoutError:
        pass


def noting(action: Callable[..., None], at: list[float], acted: asyncio.Event) -> Callable[..., None]:
    """``action``, noting when it runs (into ``at``) and setting ``acted`` first."""

    def run(*args: Any) -> None:
        at.append(time.perf_counter())
        acted.set()
        action(*args)

    return run
