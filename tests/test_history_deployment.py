"""A deployment's remembered starts (``kvtui.history.deployment``): each node's stored boots grouped
by start (``boot.deployment.pair_boots``, as ``replay a.log b.log``), a node restarted alone as a start of its
own, the previous good start, and the diff of two starts node by node."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from kvtui.boot import BootStatus
from kvtui.history.deployment import deployment_starts, previous_good, render_diff
from kvtui.history.store import StoredBoot

T0 = datetime(2026, 12, 1, 10, 0, 0).astimezone()


def _boot(row: int, host: str, start: datetime, status: str = "ready", frac: float = 0.88) -> StoredBoot:
    def at(s: float) -> str:
        return (start + timedelta(seconds=s)).isoformat()

    phases: list[dict[str, Any]] = [{"name": "launch", "start": at(0), "end": at(5)},
                                    {"name": "init", "start": at(5), "end": at(10)}]
    doc: dict[str, Any] = {"host": host, "engine": "sglang", "status": status, "started_at": at(0),
                           "flags": {"model_path": "/models/R1", "tp_size": 16, "mem_fraction_static": frac},
                           "phases": phases, "metrics": {"max_total_num_tokens": 100_000}}
    if status == "ready":
        phases.append({"name": "ready", "start": at(60), "end": None})
    else:
        doc["ended_at"] = at(60)
        doc["failure"] = {"kind": "oom_kv_allocate", "phase": "kv_allocate", "message": "out of memory"}
    return StoredBoot(row, f"k{row}", host, doc, 0.0)


def test_node_boots_group_by_start_newest_first() -> None:
    hour = timedelta(hours=1)
    a = [_boot(1, "a", T0), _boot(3, "a", T0 + hour, frac=0.85), _boot(5, "a", T0 + 2 * hour, "failed")]
    b = [_boot(2, "b", T0 + timedelta(seconds=2)), _boot(4, "b", T0 + hour + timedelta(seconds=1), frac=0.85),
         _boot(6, "b", T0 + 2.5 * hour)]  # node 1 restarted alone, after node 0's failed boot was over
    starts = deployment_starts(["a", "b"], [list(reversed(a)), list(reversed(b))])  # the store: newest first
    assert [s.ids for s in starts] == ["— · #6", "#5 · —", "#3 · #4", "#1 · #2"]
    assert [s.status for s in starts[2:]] == [BootStatus.READY, BootStatus.READY]
    assert starts[1].status is BootStatus.FAILED
    assert starts[1].nodes_text() == "n0 failed (oom_kv_allocate) · n1 —"
    assert starts[2].nodes_text() == "n0 ready · n1 ready"
    assert len({s.key for s in starts}) == 4
    # the previous good start: the newest ready one before it (a failed start is skipped)
    assert previous_good(starts, starts[0]) is starts[2]
    assert previous_good(starts, starts[2]) is starts[3]
    assert previous_good(starts, starts[3]) is None
    text = "\n".join(render_diff(starts[3], starts[2]))
    assert "start #3 · #4 compared with start #1 · #2 (ready ← ready)" in text
    assert "== node 0 (a) ==" in text
    assert "== node 1 (b) ==" in text
    assert text.count("changed  mem_fraction_static: 0.88 → 0.85") == 2  # each node's own diff
    lone = "\n".join(render_diff(starts[2], starts[0]))
    assert "no boot of a in this start: nothing to compare" in lone


def test_no_boots_no_starts() -> None:
    assert deployment_starts(["a", "b"], [[], []]) == []
