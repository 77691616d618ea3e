"""Issue 22 #5: an ETA at the pace the boot really runs. After ``D`` (the demo switched to real
time) the stored boots were ×8 runs: the console said ``load weights 0:14 / ~0:30 … ready in
~0:19`` while shards took 3.4 s each. The medians are scaled by the boot's own pace (its finished
phases against their medians), and a phase that counts its progress is projected from its rate
when that is far off; "slower than usual" still compares with the stored boots as they were."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from kvtui.boot import Boot, BootStatus, PhaseSpan
from kvtui.engines.events import Engine, Phase
from kvtui.history import eta

FLAGS = {"model_path": "/models/Kimi", "tp_size": 8}
# one boot of the demo at ×8: seconds per phase (load weights: 61 shards at 0.43 s)
FAST = {"launch": 1.0, "init": 2.0, "load_weights": 26.0, "kv_allocate": 1.0, "graph_capture": 5.0, "http_up": 1.0}
T0 = datetime(2026, 12, 1, 12, 0, 0)


def _doc(i: int, scale: float = 1.0) -> dict[str, Any]:
    t = T0 + timedelta(hours=i)
    phases = []
    for name, s in FAST.items():
        phases.append({"name": name, "model": "target", "start": t.isoformat(), "seconds": s * scale,
                       "end": (t + timedelta(seconds=s * scale)).isoformat()})
        t += timedelta(seconds=s * scale)
    phases.append({"name": "ready", "model": "target", "start": t.isoformat(), "end": None, "seconds": None})
    return {"flags": FLAGS, "status": "ready", "started_at": (T0 + timedelta(hours=i)).isoformat(), "phases": phases}


def _running(pace: float, loaded: int, in_phase: float) -> tuple[Boot, datetime]:
    """A boot at ``pace`` × the stored boots' times, ``in_phase`` s into loading its weights with
    ``loaded`` of 61 shards done."""
    start = T0 + timedelta(days=2)
    t = start
    phases = []
    for name in ("launch", "init"):
        s = FAST[name] * pace
        phases.append(PhaseSpan(Phase(name), start=t, end=t + timedelta(seconds=s), seconds=s))
        t += timedelta(seconds=s)
    phases.append(PhaseSpan(Phase.LOAD_WEIGHTS, start=t, progress_done=loaded, progress_total=61))
    boot = Boot(engine=Engine.SGLANG, status=BootStatus.STARTING, phase=Phase.LOAD_WEIGHTS, phases=phases,
                flags=dict(FLAGS), started_at=start)
    return boot, t + timedelta(seconds=in_phase)


HISTORY = [_doc(i) for i in range(6)]


def test_a_boot_at_the_stored_pace_gets_the_medians() -> None:
    boot, now = _running(1.0, 20, 8.5)
    got = eta.estimate(boot, HISTORY, now, host="demo")
    assert got.pace is None
    assert not got.by_rate
    assert got.expected == 26.0
    assert got.remaining == pytest.approx(26 - 8.5 + 1 + 5 + 1)
    assert got.text() == "load weights 0:08 / ~0:26, ready in ~0:24 (median of 6 boots)"


def test_after_d_the_medians_follow_the_boots_real_time_pace() -> None:
    """The reported case: 14 s into the weights at real time (×8 slower than the stored boots),
    4 shards done at 3.4 s each."""
    boot, now = _running(8.0, 4, 14.0)
    got = eta.estimate(boot, HISTORY, now, host="demo")
    assert got.pace == pytest.approx(8.0)
    assert got.by_rate  # 61 shards at 3.5 s: the phase's own rate
    assert got.expected == pytest.approx(14.0 * 61 / 4)
    assert got.remaining == pytest.approx(14.0 * 61 / 4 - 14.0 + 8 * (1 + 5 + 1))
    text = got.text()
    assert text.startswith("load weights 0:14 / ~3:34, ready in ~4:16 (median of 6 boots × 8.0, this boot's pace")
    assert "~0:26" not in text
    assert "~0:30" not in text
    # without progress yet: the medians scaled by the pace
    boot, now = _running(8.0, 0, 1.0)
    got = eta.estimate(boot, HISTORY, now, host="demo")
    assert (got.pace, got.by_rate) == (pytest.approx(8.0), False)
    assert got.expected == pytest.approx(8 * 26.0)
    assert got.remaining == pytest.approx(8 * 26.0 - 1.0 + 8 * 7)


def test_the_other_way_a_faster_boot_and_a_slow_phase() -> None:
    # the boots were recorded at real time, this one runs ×8 fast
    slow_history = [_doc(i, 8.0) for i in range(6)]
    boot, now = _running(1.0, 30, 13.0)
    got = eta.estimate(boot, slow_history, now, host="demo")
    assert got.pace == pytest.approx(1 / 8)
    assert got.remaining is not None
    assert got.remaining < 60
    # finished phases on time, but the weights crawl (a slow disk): the phase's own rate, and
    # "slower than usual" against the stored boots
    boot, now = _running(1.0, 2, 90.0)
    got = eta.estimate(boot, HISTORY, now, host="demo")
    assert got.pace is None
    assert got.by_rate
    assert got.expected == pytest.approx(90.0 * 61 / 2)
    assert got.slow == pytest.approx(90.0 / 26.0)
    assert "slower than usual: 3.5× the median of 6 boots" in got.text()
