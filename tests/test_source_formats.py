"""Every startup line of the engines' released source (tests/source_formats.py) is recognised with
its meaning: the phase it starts or ends, its figures, the failure kind it decides."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from kvtui.boot import BootTracker
from kvtui.engines.events import (
    BootBoundary,
    BoundaryKind,
    CaptureSizes,
    Engine,
    FailureText,
    Flags,
    LogRecord,
    Metric,
    PhaseMark,
    Progress,
    VersionHint,
    Warning_,
)
from kvtui.engines.parse import LineParser
from tests.source_formats import ROWS, Row


def clock() -> datetime:
    return datetime(2026, 12, 1)


def read(row: Row) -> tuple[list[Any], Any]:
    parser = LineParser(Engine(row.engine), clock=clock)
    lines = parser.feed(LogRecord(row.example))
    assert len(lines) == 1, lines
    return list(lines[0].events), lines[0]


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.engine}-{r.version}-{i}" for i, r in enumerate(ROWS)])
def test_every_source_format_is_recognised(row: Row) -> None:
    events, line = read(row)
    assert events, f"not recognised: {row.example}"
    want = row.meaning
    marks = [e for e in events if isinstance(e, PhaseMark)]
    model = want.get("model", "target")
    if "start" in want:
        assert any(m.phase.value == want["start"] and not m.end and m.model.value == model for m in marks), marks
    if "end" in want:
        assert any(m.phase.value == want["end"] and m.end and m.model.value == model for m in marks), marks
    metrics = {e.name: e.value for e in events if isinstance(e, Metric)}
    for name, value in want.get("metrics", {}).items():
        assert name in metrics, f"{name} missing: {metrics}"
        assert metrics[name] == pytest.approx(value, abs=0.006), name
    for name in want.get("no_metrics", ()):
        assert name not in metrics, name
    failures = [e for e in events if isinstance(e, FailureText)]
    if "failure" in want:
        assert failures, events
        if want["failure"] == "evidence":
            assert all(f.kind is None for f in failures)
        else:
            assert any(f.kind is not None and f.kind.value == want["failure"] for f in failures), failures
    if want.get("no_failure"):
        assert not failures
    if "fatal" in want:
        assert any(f.fatal for f in failures) is want["fatal"]
    flags: dict[str, object] = {}
    for e in events:
        if isinstance(e, Flags):
            flags.update(e.values)
    for k, v in want.get("flags", {}).items():
        assert flags.get(k) == v, (k, flags)
    if want.get("warning"):
        assert any(isinstance(e, Warning_) for e in events)
    if want.get("boundary"):
        assert any(isinstance(e, BootBoundary) and e.kind is BoundaryKind.STARTED for e in events)
    if "version" in want:
        assert VersionHint(want["version"]) in events
    if "progress" in want:
        done, total = want["progress"]
        assert any(isinstance(e, Progress) and (e.done, e.total) == (done, total) for e in events)
    if "capture_sizes" in want:
        assert any(isinstance(e, CaptureSizes) and list(e.sizes) == want["capture_sizes"] for e in events)
    if "rank" in want:
        assert line.rank == want["rank"]
    if "tp" in want:
        assert line.tp == want["tp"]


def test_the_table_covers_the_versions_the_issue_lists() -> None:
    versions = {(r.engine, r.version) for r in ROWS}
    for v in ("0.4.10.post2", "0.5.0rc2", "0.5.6", "0.5.10", "0.5.23"):
        assert ("sglang", v) in versions
    for v in ("0.6.6.post1", "0.8.5", "0.10.2", "0.15.1", "0.33.0"):
        assert ("vllm", v) in versions


def test_a_failure_line_alone_is_a_failed_boot_of_its_kind() -> None:
    for row in ROWS:
        kind = row.meaning.get("failure")
        if kind in (None, "evidence"):
            continue
        tracker = BootTracker()
        parser = LineParser(clock=clock)
        for p in parser.feed(LogRecord(row.example)):
            tracker.feed(p)
        tracker.finish()
        assert tracker.boots, row.example
        boot = tracker.boots[-1]
        assert boot.engine.value == row.engine, row.example
        assert boot.failure is not None
        assert boot.failure.kind.value == kind, row.example
