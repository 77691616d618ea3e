"""An out-of-memory after the pools were sized (``oom_runtime``) is worded by when it came: the
warm-up request before ready, the first forward after ready, or while serving (issue 14's known
limit: the hint said "while serving" for the warm-up too)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from kvtui.boot import BootTracker, hint_for
from kvtui.boot.hints import runtime_oom_when
from kvtui.engines.events import Engine, FailureKind, Phase
from kvtui.engines.parse import parse_bytes
from kvtui.ui.formatting import failure_title

NOW = datetime(2026, 4, 18, 18, 1, 0)
# SGLang 0.5.13: ready, three decode batches, then the scheduler's CUDA OOM and SIGQUIT
LOG = (Path(__file__).parent / "fixtures" / "sglang" / "fail-0.5.13-runtime-oom.log").read_text().splitlines()
READY = next(i for i, t in enumerate(LOG) if "fired up and ready" in t)
DEATH = next(i for i, t in enumerate(LOG) if "Scheduler hit an exception" in t)


def _failed(lines: list[str]) -> tuple[str, Phase | None]:
    t = BootTracker()
    for p in parse_bytes("\n".join(lines).encode(), clock=lambda: NOW):
        t.feed(p)
    t.finish()
    boot = t.boots[-1]
    assert boot.failure is not None
    assert boot.failure.kind is FailureKind.OOM_RUNTIME, boot.failure
    return boot.failure.hint or "", boot.failure.phase


def test_the_words_follow_the_phase() -> None:
    assert runtime_oom_when(Phase.HTTP_UP).startswith("at the warm-up request")
    assert runtime_oom_when(Phase.READY, served=False).startswith("at the first forward after ready")
    assert runtime_oom_when(Phase.READY) == "while serving"
    assert runtime_oom_when(None) == "while serving"
    assert "at the warm-up request" in hint_for(FailureKind.OOM_RUNTIME, Engine.VLLM, {}, {}, phase=Phase.HTTP_UP)
    assert "while serving" in hint_for(FailureKind.OOM_RUNTIME, Engine.SGLANG, {}, {})


def test_a_log_that_dies_before_ready_says_warm_up_and_one_that_served_says_serving() -> None:
    hint, phase = _failed(LOG[:READY] + LOG[DEATH:])  # the warm-up request's forward died
    assert phase is Phase.HTTP_UP
    assert "out of GPU memory at the warm-up request" in hint
    assert "while serving" not in hint
    hint, phase = _failed(LOG[: READY + 1] + LOG[DEATH:])  # ready, then no batch before the death
    assert phase is Phase.READY
    assert "at the first forward after ready" in hint
    hint, phase = _failed(LOG)  # three decode batches served
    assert phase is Phase.READY
    assert "out of GPU memory while serving" in hint


def test_the_banner_title_follows_the_phase() -> None:
    assert failure_title(FailureKind.OOM_RUNTIME, Phase.HTTP_UP) == "out of memory at the warm-up request"
    assert failure_title(FailureKind.OOM_RUNTIME, Phase.READY) == "out of memory while serving"
    assert failure_title(FailureKind.NCCL, Phase.INIT) == "NCCL / distributed error"
