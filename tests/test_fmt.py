"""kvtui.fmt: the one formatting module and its rounding rule (issue 10, items 5 and 6)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtui import fmt
from kvtui.ui import formatting as ui_fmt


def test_safe_limits_round_toward_the_safe_side() -> None:
    # the largest safe fraction 0.959 is never shown as 0.96 (0.96 itself is not safe)
    assert fmt.safe_max(0.959) == "0.959"
    assert fmt.safe_max(0.959, 2) == "0.95"
    assert fmt.safe_max(0.9) == "0.90"
    # the smallest fraction needed is never shown below what is needed
    assert fmt.safe_min(0.5581) == "0.559"
    assert fmt.safe_min(0.559, 2) == "0.56"
    # a capacity is never overstated: 1.9749 requests is 1.97, not 1.98
    assert fmt.capacity(1.97496) == "1.97"
    assert fmt.capacity(3.2999999) == "3.29"
    assert fmt.capacity(None) == "—"


def test_grid_values_survive_directed_rounding() -> None:
    # i / 1000 fractions are on the 3-decimal grid: rounding down must not take 0.001 off them
    for i in range(1, 1000):
        assert fmt.round_down(i / 1000, 3) == i / 1000
        assert fmt.round_up(i / 1000, 3) == i / 1000


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_directed_rounding_brackets_the_value(x: float) -> None:
    lo, hi = fmt.round_down(x, 2), fmt.round_up(x, 2)
    assert lo <= x <= hi
    assert hi - lo <= 0.01 + 1e-9 * max(1.0, x)
    # rounding down twice at a coarser precision is rounding down once (no double-rounding drift)
    assert fmt.round_down(fmt.round_down(x, 3), 2) == lo


def test_figures_round_once_to_nearest() -> None:
    assert fmt.gib(10.825) == f"{10.825:,.2f} GiB"
    assert fmt.gib(-0.32) == "-0.32 GiB"
    assert fmt.gib(7617.56) == "7,617.56 GiB"
    assert fmt.signed_gib(2.3) == "+2.30 GiB"
    assert fmt.tokens(432078) == "432,078"
    assert fmt.signed_tokens(144800) == "+144,800"
    assert fmt.percent(0.042) == "4.2%"
    assert fmt.fraction(0.85) == "0.85"
    assert fmt.fraction(0.875) == "0.875"
    assert fmt.fraction(0.8) == "0.80"
    assert fmt.mib(1.0) == "1,024.0 MiB"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "—"),
        (math.nan, "—"),
        (0.0, "0.0s"),
        (4.2, "4.2s"),
        (9.94, "9.9s"),
        (9.96, "10s"),
        (12.4, "12s"),
        (59.4, "59s"),
        (59.6, "1m 00s"),
        (185, "3m 05s"),
        (3599.6, "1h 00m"),
        (3720, "1h 02m"),
        (-3, "0.0s"),
    ],
)
def test_one_duration_style(seconds: float | None, text: str) -> None:
    assert fmt.duration(seconds) == text


def test_the_console_formats_with_the_same_functions() -> None:
    """kvtui.ui.formatting re-exports kvtui.fmt: no second implementation to drift."""
    for name in ("duration", "tokens", "gib", "signed_gib", "percent", "fraction", "safe_max", "capacity"):
        assert getattr(ui_fmt, name) is getattr(fmt, name)


def test_wait_stamp() -> None:
    assert fmt.stamp(12.34) == "[  12.3s]"
    assert fmt.stamp(-1) == "[   0.0s]"


def test_every_place_a_safe_limit_is_drawn_rounds_it_down() -> None:
    """Issue 22 #1: the apply/rollback dialogs drew `largest safe 0.96` beside the prediction's
    `largest safe fraction 0.959` (an f-string `:.2f` rounds half up: 0.96 is TIGHT). Every view
    draws a safe limit through fmt.safe_max / safe_min / capacity; no module formats one itself."""
    import dataclasses
    import re
    from pathlib import Path

    from kvtui import kvcalc
    from kvtui.bootlog import read_log
    from kvtui.hosts.service.render import render_prediction
    from kvtui.ui.screens import prediction_summary

    root = Path(fmt.__file__).parent
    limit_fmt = re.compile(r"\{[^{}]*(?:max_safe|min_fraction|safe|full_context_requests)[^{}:]*:\.\d+f\}")
    offenders = [f"{p.relative_to(root)}:{n}: {line.strip()}"
                 for p in sorted(root.rglob("*.py")) if p.name != "fmt.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if limit_fmt.search(line)]
    assert offenders == []

    fixture = Path(__file__).parent / "fixtures" / "sglang-0.5.10-llama70b-tp4-ready.journal"
    boot = read_log([fixture.read_bytes()])[0][-1]
    pred = kvcalc.predict(kvcalc.calibrate(boot), {"mem_fraction_static": 0.9})
    pred = dataclasses.replace(pred, max_safe_fraction=0.9596)
    assert "largest safe 0.959" in prediction_summary(pred).plain
    assert "  largest safe fraction: 0.959" in render_prediction(pred)


def test_cut_and_one_line_are_the_one_ellipsis_every_view_uses() -> None:
    assert fmt.cut("abcdef", 6) == "abcdef"
    assert fmt.cut("abcdefg", 6) == "abcde…"
    assert fmt.cut("abc", 0) == "…"
    assert fmt.one_line("a\n  b\tc", 300) == "a b c"
    assert fmt.one_line("x " * 200, 10) == "x x x x x…"
    assert fmt.one_line("y" * 301) == "y" * 299 + "…"
