"""Seeded boots for the history's tests: real logs from ``boots_gen`` (an independent simulation
of the engines) run through the real parser and tracker."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import boots_gen as gen

from kvtui.boot import Boot
from kvtui.commands.replay import analyse

T0 = datetime(2026, 5, 1, 10, 0, 0)
FIXTURES_DIR = Path(__file__).parent / "fixtures"
BASE = gen.SglangFlags(mem_fraction_static=0.85, tp_size=4, max_running_requests=64)


def boots_of(lines: list[str]) -> list[Boot]:
    boots, _ = analyse(iter(["\n".join(lines).encode() + b"\n"]))
    return boots


def sglang(fraction: float = 0.85, *, minutes: int = 0, seed: int = 0, **flags: object) -> Boot:
    """One SGLang 0.5.10 Llama-70B TP4 boot on H100s at ``fraction``, starting ``minutes`` after T0."""
    f = replace(BASE, mem_fraction_static=fraction, **flags)  # type: ignore[arg-type]
    lines, _ = gen.sglang_boot(gen.LLAMA70B, gen.H100, f, start=T0 + timedelta(minutes=minutes), seed=seed)
    boots = boots_of(lines)
    assert len(boots) == 1
    return boots[0]


_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def sglang_lines(fraction: float = 0.85, *, minutes: int = 0, stretch: float = 1.0, **flags: object) -> list[str]:
    """The log of ``sglang(...)``, its clock slowed ``stretch`` times (every phase takes that much
    longer): boots of one deployment whose phases differ, as a real history's do."""
    f = replace(BASE, mem_fraction_static=fraction, **flags)  # type: ignore[arg-type]
    start = T0 + timedelta(minutes=minutes)
    lines, _ = gen.sglang_boot(gen.LLAMA70B, gen.H100, f, start=start)
    out = []
    for ln in lines:
        m = _STAMP.match(ln)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
            t = start + (t - start) * stretch
            ln = "[" + t.strftime("%Y-%m-%d %H:%M:%S") + ln[m.end():]
        out.append(ln)
    return out


# -- a history file locked by another process ------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # another kvtui in the middle of a write
    print("locked", flush=True)
    sys.stdin.readline()
    db.execute("ROLLBACK")
    db.close()
    print("released", flush=True)
""")


class Holder:
    """A second process holding the file's write lock until ``release``."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line == "locked\n", (line, self.proc.stderr.read() if self.proc.stderr else "")
        self.held = True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "released\n"
        self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0


@contextmanager
def locked(path: Path) -> Iterator[Holder]:
    holder = Holder(path)
    try:
        yield holder
    finally:
        if holder.held:
            holder.release()
