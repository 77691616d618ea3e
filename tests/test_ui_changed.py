"""The "what changed" strip (kvtui/ui/history/changed.py): after a restart, one line under the
header says what the new boot does differently from the last good one — the history's diff."""

from __future__ import annotations

from typing import Any

from test_ui_app import SIZE, SPEED, pane_of, ready_demo, status_of
from test_ui_helpers import demo_app, plain, run_clock, set_demo_fraction

from kvtui.boot import BootStatus
from kvtui.history import diff as hdiff
from kvtui.ui.history.changed import ChangedStrip, changed_line, changes


def _doc(status: str = "ready", *, started: str = "2026-05-01T10:00:00", **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "status": status, "started_at": started, "engine": "sglang", "version_hint": "0.5.14",
        "flags": {"model_path": "/models/x", "tp_size": 8, "mem_fraction_static": 0.88},
        "env": {"SGLANG_X": None}, "avail_before_load_gib": {"TP0": 94.1, "TP1": 94.2},
    }
    doc.update(over)
    return doc


def test_the_line_names_flags_env_free_memory_and_version() -> None:
    base = _doc()
    boot = _doc("starting", started="2026-05-01T11:00:00", version_hint="0.5.15",
                flags={"model_path": "/models/x", "tp_size": 8, "mem_fraction_static": 0.93,
                       "enable_mixed_chunk": True},
                env={"SGLANG_X": "1"}, avail_before_load_gib={"TP0": 91.0, "TP1": 94.2})
    got = changed_line([(13, boot), (12, base), (11, _doc(started="2026-05-01T09:00:00"))], boot)
    assert got is not None
    assert got[0] == 12  # the boot itself (stored, matched by its start) is skipped
    assert ", ".join(got[1]) == ("mem-fraction-static 0.88→0.93, +enable-mixed-chunk, env +SGLANG_X=1, "
                                 "free before load 94.1→91.0 GiB, sglang 0.5.14→0.5.15")
    # nothing differs: no item (the strip hides); a few hundredths less free memory is noise
    same = _doc("starting", started="2026-05-01T11:00:00", avail_before_load_gib={"TP0": 94.05, "TP1": 94.2})
    assert changes(hdiff.diff(base, same)) == []
    # no earlier ready boot of the model: nothing to compare with
    assert changed_line([(1, _doc("failed"))], boot) is None


async def test_after_a_restart_the_strip_says_what_changed_since_the_last_good_boot() -> None:
    clock = ready_demo()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        strip = pane.query_one(ChangedStrip)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
        assert strip.line is None  # the first boot: no earlier good one in the history
        assert not strip.display or not strip.has_class("-shown")
        set_demo_fraction("demo", 0.88, clock, speed=SPEED)  # edited and restarted behind the console's back
        await run_clock(pilot, app, clock, until=lambda: (pane.boot_index or 0) >= 1 and strip.line is not None,
                        step=0.1, limit=60)
        assert strip.line == "vs last good boot #1: mem-fraction-static 0.85→0.88"
        assert strip.has_class("-shown")
        assert plain(strip) == strip.line
        # the strip sits right under the host's header
        assert strip.region.y == 1
