"""Small arithmetic on the engines' figures: page rounding, tolerant number reading, the round cell in an interval."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

GIB = float(1 << 30)
MIB_PER_GIB = 1024.0

# Rounding of printed figures: every SGLang "X.XX GB" is ±0.005 GiB. The rank-local avail lines are
# read a moment after the engine's MIN all-reduce, so allow a little more for them.
_PRINT_EPS = 0.005
_AVAIL_SLACK = 0.01


def floor_page(tokens: float, page: int) -> int:
    """Round a token count down to the page (0 or below stays as the engine would see it)."""
    if tokens <= 0:
        return math.floor(tokens)
    page = max(1, page)
    return int(tokens // page) * page


def _frac(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _as_float(v: object) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def _as_int(v: object) -> int | None:
    fv = _as_float(v)
    if fv is None or math.isnan(fv) or math.isinf(fv):
        return None
    return int(fv)


def _snap_cell(lo: float, hi: float) -> int:
    """The integer cell in [lo, hi] with the most trailing zero bits (cells are products of
    head counts, dims, layers and dtype sizes, so real ones are usually multiples of 64);
    the midpoint when no multiple of 64 lies in the interval."""
    lo_i, hi_i = math.ceil(lo), math.floor(hi)
    mid = round((lo + hi) / 2)
    if hi_i < lo_i:
        return max(1, mid)
    for bit in range(30, 5, -1):
        step = 1 << bit
        first = -(-lo_i // step) * step
        if first <= hi_i:
            cands = list(range(first, hi_i + 1, step))
            return min(cands, key=lambda c: abs(c - mid))
    return max(1, mid)


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    if not v:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", v.strip())
    if not m:
        return None
    return tuple(int(x) for x in m.groups(default="0"))


@dataclass(frozen=True, slots=True)
class LineFit:
    """The slope that calibration boots measure on a flag's line (x: the flag's value): two boots
    give a two-point slope (``residual`` None), three or more a least-squares line through all of
    them (``residual``: its largest, ``shown``: the distinct x, at most 8, for the explain line)."""

    slope: float
    residual: float | None
    shown: str


def fit_line(points: Sequence[tuple[float, float]]) -> LineFit | None:
    """The slope through ``points`` (the boot being calibrated first), or None without two distinct x."""
    xs = sorted({round(x, 6) for x, _ in points})
    if len(xs) < 2:
        return None
    shown = ", ".join(_frac(x) for x in xs[:8]) + ("…" if len(xs) > 8 else "")
    if len(points) == 2:
        (x0, y0), (x1, y1) = points
        return LineFit((y0 - y1) / (x0 - x1), None, shown)
    slope, resid = least_squares(points)
    return LineFit(slope, resid, shown)


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares slope of ``points`` (x, y) and the largest absolute residual of the fitted
    line (at least two distinct x)."""
    k = len(points)
    mx = sum(x for x, _ in points) / k
    my = sum(y for _, y in points) / k
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    resid = max(abs(y - (my + slope * (x - mx))) for x, y in points)
    return slope, resid
