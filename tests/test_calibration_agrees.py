"""Issue 22 #5: ``tune --dry-run`` ignored the history calibration that ``calc --host`` and the
console's ``O`` use (337,090 vs 337,095 tokens). The planner takes the same stored siblings since
8bfe34e (a unit test in tests/test_tune.py); here the three readers of one demo host — the CLI's
tune plan, ``calc --host`` and the console's ``O`` plan — agree to the token, on a host whose
history holds a boot at another fraction (a two-point calibration), and speak of the same boot
(its number in the history, issue 22 #2)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from test_ui_helpers import FakeClock, demo_app, run_clock, wait_for

from kvtui.boot import BootStatus
from kvtui.cli import main
from kvtui.ui.screens import ConfirmScreen, TuneScreen

SPEED = 600.0
HOSTS = f"[hosts.demo]\ndemo = true\ndemo_speed = {SPEED}\n"
PLAN = re.compile(r"first candidate: (\d\.\d+) → ([\d,]+) tokens predicted")


async def cli(*argv: str) -> int:
    """``kvtui ARGV`` (its own event loop, in a thread: the test's loop runs the console)."""
    return await asyncio.to_thread(main, list(argv))


async def _seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """The demo's boot at 0.85 (recorded by ``wait``), then a restart at 0.80 (``apply``)."""
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert await cli("--hosts", str(hosts), "wait", "demo", "--timeout", "60") == 0
    code = await cli("--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.80", "--restart", "--yes",
                     "--timeout", "60")
    err = capsys.readouterr().err
    assert code == 0, err
    # apply says the new boot's number, the name every view gives it (issue 22 #2)
    assert re.search(r"kvtui apply: demo: the new boot is boot #\d+ in the history", err), err
    return hosts, err


async def test_tune_dry_run_calc_host_and_the_consoles_O_agree_to_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts, applied = await _seed(tmp_path, capsys)
    # 1. kvtui tune --dry-run: the plan's first candidate
    assert await cli("--hosts", str(hosts), "tune", "demo", "--goal", "max-tokens", "--dry-run") == 0
    out = capsys.readouterr().out
    m = PLAN.search(out)
    assert m, out
    fraction, tokens = m.group(1), int(m.group(2).replace(",", ""))
    # 2. kvtui calc --host at that fraction: the same tokens, calibrated on two boots (one stored)
    assert await cli("--hosts", str(hosts), "calc", "--host", "demo", "--set", f"mem-fraction-static={fraction}",
                     "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["predicted"]["max_total_num_tokens"] == tokens
    assert doc["calibration"]["from_history"] == 1
    assert doc["basis"] == "two-point"
    assert await cli("--hosts", str(hosts), "history", "demo", "--json") == 0
    newest = json.loads(capsys.readouterr().out)["boots"][0]
    assert doc["boot"] == newest["id"]  # the boot calc and tune stood on, by its number in the history
    assert newest["flags"]["mem_fraction_static"] == 0.8
    assert f"the new boot is boot #{newest['id']} in the history" in applied

    # 3. the console's O on the same host (its clock after the CLI's boot is ready)
    clock = FakeClock(time.time() + 5.0)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 40)) as pilot:
        pane = app.main_screen.active_pane
        await run_clock(pilot, app, clock, until=lambda: pane.boot is not None
                        and pane.boot.status is BootStatus.READY, limit=60)
        await pilot.press("O")
        await wait_for(pilot, lambda: isinstance(app.screen, TuneScreen) and app.screen.focused is not None
                       and app.screen.focused.id == "tune-goal")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=30)
        screen: Any = app.screen
        body = str(screen.body)
        got = PLAN.search(body)
        assert got, body
        assert (got.group(1), int(got.group(2).replace(",", ""))) == (fraction, tokens)
        await pilot.press("n")
