"""Seeded boots for the history's tests: real logs from ``boots_gen`` (an independent simulation
of the engines) run through the real parser and tracker."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import boots_gen as gen

from kvtui.boot import Boot
from kvtui.commands.replay import analyse

T0 = datetime(2026, 5, 1, 10, 0, 0)
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
