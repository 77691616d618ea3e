"""Bundles and the console: ``B`` writes the shown boot's bundle (its log, GPU readings, the
calculator as the operator left it, a screenshot) with a notification naming the file, and
``kvtui connect --bundle`` opens one offline — a read-only console over the recorded boot (log,
GPU plot, phases, calculator) whose host refuses edits and restarts with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_ui_app import SIZE, SPEED, pane_of, ready_demo, status_of
from test_ui_helpers import run_clock, wait_for

from kvtui.boot import BootStatus
from kvtui.cli import main
from kvtui.commands.bundle import write_console_bundle
from kvtui.commands.connect import bundle_app
from kvtui.config import Config
from kvtui.engines.events import Phase
from kvtui.history import open_store
from kvtui.history.bundle import read_member, read_members
from kvtui.ui.gpu.widgets import GpuHistoryPlot
from kvtui.ui.log.panel import LogStatus
from kvtui.ui.log.view import LogView
from kvtui.ui.screens import ConfirmScreen, NoticeScreen
from kvtui.ui.widgets.host import HostBar

from test_ui_helpers import demo_app  # isort: skip


def _messages(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


@pytest.mark.slow
async def test_the_bundle_key_and_connect_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    clock = ready_demo()
    app = demo_app(clock, speed=SPEED)
    app.bundle_writer = write_console_bundle
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
        await pilot.press("R")  # a boot followed from its start: its GPU readings are kept
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await pilot.pause()
        await run_clock(pilot, app, clock, until=lambda: (pane.boot_index or 0) >= 1
                        and status_of(pane) is BootStatus.READY, step=0.2, limit=60)
        await pilot.press("B")
        await wait_for(pilot, lambda: any(m.startswith("wrote ") for m in _messages(app)), timeout=20)
        wrote = next(m for m in _messages(app) if m.startswith("wrote "))
        tokens = pane.boot.metrics.max_total_num_tokens if pane.boot is not None else None
    path = Path(wrote.removeprefix("wrote "))
    assert path == tmp_path / "kvtui-demo-boot2.tar.gz"
    members = read_members(path)
    assert members is not None
    assert {"log.txt", "gpu.json", "calc.json", "calc.txt", "screenshot.svg", "diff.txt"} <= set(members)
    gpu = json.loads(members["gpu.json"])
    assert sorted(gpu["used_mib"], key=int) == [str(i) for i in range(8)]
    assert len(gpu["ts"]) >= 5
    assert max(gpu["used_mib"]["0"]) > 60_000  # the weights and the pool, as the console saw them load
    calc = json.loads(members["calc.json"])
    assert calc["observed"]["max_total_num_tokens"] == tokens
    assert members["calc.txt"].decode().startswith("kvtui calc · sglang · demo console (calculator as shown)")
    assert members["screenshot.svg"].startswith(b"<svg")
    with open_store(readonly=True) as store:
        stored = store.count("demo")

    # kvtui connect --bundle: the recorded boot, offline and read-only
    offline = bundle_app(str(path), Config())
    offline.animation_level = "none"
    async with offline.run_test(size=SIZE) as pilot:
        pane = pane_of(offline)
        assert pane.host_name == "demo-bundle"
        await wait_for(pilot, lambda: status_of(pane) is BootStatus.READY
                       and len(pane.query_one(GpuHistoryPlot).points) >= min(len(gpu["ts"]), 10)
                       and pane.calculator.prediction is not None, timeout=30)
        plot = pane.query_one(GpuHistoryPlot)
        assert plot.points[0][0] == pytest.approx(gpu["ts"][0], abs=0.01)  # the recorded readings, their times
        monitor = pane.monitor
        assert monitor is not None
        await wait_for(pilot, lambda: len(monitor.gpu_history(0)) == len(gpu["ts"]), timeout=30)
        assert [round(u) for _, u in monitor.gpu_history(0)] == gpu["used_mib"]["0"]
        boot = pane.boot
        assert boot is not None
        assert boot.metrics.max_total_num_tokens == tokens
        assert [p.name for p in boot.phases][-1] is Phase.READY
        assert pane.query_one(LogView).source is not None
        assert "recorded: boot #2 of demo from kvtui-demo-boot2.tar.gz (read-only)" in pane.backend.status().detail  # type: ignore[union-attr]
        # a recording says so (issue 22 #4: it looked live): the header, the log's status, no change key
        bar = offline.screen.query_one(HostBar)
        assert "■ recorded" in bar.left().plain
        assert "● connected" not in bar.left().plain
        pane.tick()
        assert bar.right().plain.startswith("boot #2  ")  # the boot by its number in the history (issue 22 #2)
        state = pane.query_one(LogStatus).state.plain
        assert "■ recorded" in state
        assert "following" not in state
        shown = {b.binding.action for b in offline.screen.active_bindings.values()}
        assert not shown & {"restart", "apply", "rollback", "tune"}
        await pilot.press("R")  # hidden, and pressed anyway: it says why nothing happens
        await wait_for(pilot, lambda: any("is a recorded boot (an incident bundle)" in m for m in _messages(offline)),
                       timeout=10)
        # the calculator works on the recorded boot; `a` applies nothing, saying why
        await pilot.press("c", *"0.8", "enter", "escape")
        await wait_for(pilot, lambda: pane.calculator.result is not None
                       and pane.calculator.result["edits"] == {"mem_fraction_static": 0.8})
        before = len(_messages(offline))
        await pilot.press("a")
        await wait_for(pilot, lambda: len(_messages(offline)) > before, timeout=10)
        assert not isinstance(offline.screen, NoticeScreen | ConfirmScreen)
        assert "nothing to restart, apply or roll back here" in _messages(offline)[-1]
        await pilot.press("B")
        await wait_for(pilot, lambda: any("is a recorded boot already" in m for m in _messages(offline)), timeout=10)
    with open_store(readonly=True) as store:
        assert store.count("demo") == stored  # the offline console records nothing
        assert store.count("demo-bundle") == 0
    assert main(["connect", "--bundle", str(tmp_path / "missing.tar.gz")]) == 3
    assert main(["connect", "demo", "--bundle", str(path)]) == 2
    assert read_member(path, "manifest.json") is not None
