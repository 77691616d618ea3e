"""Seeded boots for the history's tests: real logs from ``boots_gen`` (an independent simulation
of the engines) run through the real parser and tracker."""

from __future__ import annotations

import re
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
