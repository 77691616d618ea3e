"""The console's ``a`` (apply the calculator's edits + restart), ``u`` (roll back) and ``R``
(restart), end to end through ``kvtui.hosts.service``: the real app on a demo host (its unit file
and state on disk), the real monitor and calculator, one injected clock, keys pressed with Pilot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_ui_helpers import FakeClock, demo_app, plain, run_clock, screen_text, settle, start_demo, wait_for
from textual.widgets import Button, Checkbox
from textual.widgets._footer import FooterKey

from kvtui.audit import read_entries
from kvtui.boot import BootStatus
from kvtui.config import HostConfig
from kvtui.engines.events import FailureKind
from kvtui.flags import get_flag
from kvtui.sim.backend import DemoBackend
from kvtui.ui.app import KvtuiApp, MainScreen
from kvtui.ui.host_pane import HostPane
from kvtui.ui.palette import main_screen_commands
from kvtui.ui.screens import ApplyScreen, ConfirmScreen, HelpScreen, NoticeScreen

SPEED = 40.0
SIZE = (130, 38)


def _demo() -> DemoBackend:
    """The demo host's state as another kvtui process would read it."""
    return DemoBackend("demo", HostConfig(demo=True, demo_speed=SPEED))


def _fraction() -> object:
    return get_flag(_demo().read_unit(), "unit", "mem-fraction-static")


def _backups() -> list[Path]:
    unit = _demo().unit_path
    return sorted(p for p in unit.parent.glob(unit.name + ".kvtui-*") if not p.name.endswith(".pre-rollback"))


def _pane(app: KvtuiApp) -> HostPane:
    pane = app.main_screen.active_pane
    assert pane is not None
    return pane


def _status(pane: HostPane) -> BootStatus | None:
    return pane.boot.status if pane.boot is not None else None


def _screen(app: KvtuiApp) -> Any:
    return app.screen


def _messages(app: KvtuiApp) -> list[str]:
    return [n.message for n in app._notifications]


async def _ready_console(pilot: Any, app: KvtuiApp, clock: FakeClock) -> HostPane:
    pane = _pane(app)
    await run_clock(pilot, app, clock, until=lambda: _status(pane) is BootStatus.READY, limit=60)
    await wait_for(pilot, lambda: pane.calculator.result is not None)
    return pane


async def _edit_fraction(pilot: Any, pane: HostPane, value: str) -> None:
    await pilot.press("c", *value, "enter", "escape")
    await wait_for(pilot, lambda: pane.calculator.result is not None
                   and pane.calculator.result["edits"] == {"mem_fraction_static": float(value)})


async def _open_dialog(pilot: Any, app: KvtuiApp, key: str = "a") -> ApplyScreen:
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen))
    screen = app.screen
    assert isinstance(screen, ApplyScreen)
    await pilot.pause()
    return screen


async def _until_outcome(pilot: Any, app: KvtuiApp, clock: FakeClock, pane: HostPane, before: object) -> Any:
    await run_clock(pilot, app, clock, until=lambda: pane.changes.last_outcome is not before and pane.busy is None,
                    limit=120)
    return pane.changes.last_outcome


def _checked(box: Checkbox) -> bool:
    return box.value  # a call: the type checker must not narrow a value that changes under it


def _text(screen: ApplyScreen, selector: str) -> str:
    return plain(screen.query_one(selector))


async def test_apply_a_safe_fraction_from_the_calculator_then_roll_it_back() -> None:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = await _ready_console(pilot, app, clock)
        original = _demo().read_unit()
        # a without an edit says so and opens nothing
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert any("no edits to apply" in m for m in _messages(app))

        # edit the fraction to a safe value: the dialog shows the diff, the commands, the verdict
        await _edit_fraction(pilot, pane, "0.88")
        panel_tokens = pane.calculator.result["predicted"]["max_total_num_tokens"] if pane.calculator.result else None
        dialog = await _open_dialog(pilot, app)
        assert dialog.plan.action == "apply"
        assert dialog.plan.restart
        diff = _text(dialog, "#apply-diff")
        assert "-    --mem-fraction-static 0.85 \\" in diff
        assert "+    --mem-fraction-static 0.88 \\" in diff
        assert "--mem-fraction-static: 0.85 -> 0.88" in _text(dialog, "#apply-source")
        prediction = _text(dialog, "#apply-prediction")
        assert " OK " in prediction
        assert dialog.plan.verdict == pane.calculator.verdict == "ok"
        assert dialog.plan.prediction is not None
        assert dialog.plan.prediction.tokens == panel_tokens  # the same prediction as the panel's
        assert f"{panel_tokens:,}" in prediction
        commands = _text(dialog, "#apply-commands")
        assert "back up" in commands
        assert "restart the unit and follow the new boot" in commands
        assert not dialog.plan.refusals
        assert not dialog.query_one("#confirm", Button).disabled
        # while its dialog asks, nothing runs yet: no ^x Cancel change (issue 22 #3)
        assert app.main_screen.check_action("cancel_change", ()) is False
        # the automatic rollback defaults to on (the running boot is ready) and says why
        assert dialog.query_one("#apply-rollback", Checkbox).value is True
        assert "on by default: the running boot is ready" in _text(dialog, "#apply-rollback-why")
        assert _fraction() == "0.85"  # nothing written before y

        before = pane.changes.last_outcome
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        # q while it runs asks first (quitting would stop following it and the automatic rollback)
        assert pane.busy == "an apply"
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        assert "An apply on demo is still running" in str(_screen(app).body)
        await pilot.press("n")
        assert isinstance(app.screen, MainScreen)
        await pilot.press("ctrl+q")  # Textual's own quit key asks the same question
        assert isinstance(app.screen, ConfirmScreen)
        assert "An apply on demo is still running" in str(_screen(app).body)
        await pilot.press("n")
        assert isinstance(app.screen, MainScreen)
        assert app.is_running
        assert app.main_screen.check_action("cancel_change", ()) is True  # offered while it runs
        outcome = await _until_outcome(pilot, app, clock, pane, before)
        assert outcome.status == "ready", outcome.messages
        assert outcome.code == 0
        # the change is over: the footer no longer offers to cancel it (it stayed, and did nothing)
        await wait_for(pilot, lambda: pane.busy is None)
        await pilot.pause()
        assert app.main_screen.check_action("cancel_change", ()) is False
        assert "Cancel change" not in screen_text(app).splitlines()[-1]
        # the unit file (the demo's state on disk) has the new value; the backup is the old file
        assert _fraction() == "0.88"
        assert "--mem-fraction-static 0.88" in _demo().effective_execstart()
        backups = _backups()
        assert len(backups) == 1
        assert backups[0].read_text() == original
        # the pane followed the new boot to ready, with the predicted pool size
        await run_clock(pilot, app, clock, until=lambda: (pane.boot_index or 0) >= 1
                        and _status(pane) is BootStatus.READY, limit=30)
        assert pane.boot is not None
        assert pane.boot.flags["mem_fraction_static"] == 0.88
        actual = pane.boot.metrics.max_total_num_tokens
        assert actual is not None
        assert panel_tokens is not None
        assert abs(actual - panel_tokens) / actual < 0.005
        banner = pane.action_banner.full.plain  # in full (b; one line on screen until then)
        assert "demo: applied; the new boot is ready" in banner
        assert f"predicted {panel_tokens:,} tokens, the boot sized {actual:,}" in banner
        assert pane.action_banner.has_class("-ok")
        assert not pane.calculator.fields[0].edited  # the field now matches the running boot
        assert pane.log_view.follow  # the log followed the restart
        entry = read_entries()[-1]
        assert (entry["action"], entry["outcome"], entry["verdict"]) == ("apply", "ready", "ok")
        # esc hides the outcome banner
        await pilot.press("escape")
        assert not pane.action_banner.shown

        # u: back to the backup, through the same verified path, after a confirm with the diff
        dialog = await _open_dialog(pilot, app, "u")
        assert dialog.plan.action == "rollback"
        assert dialog.plan.backup_path == str(backups[0])
        diff = _text(dialog, "#apply-diff")
        assert "-    --mem-fraction-static 0.88 \\" in diff
        assert "+    --mem-fraction-static 0.85 \\" in diff
        assert not dialog.query("#apply-rollback")  # no automatic rollback of a rollback
        # the calculator's word on the restored flags (information only: a rollback is not refused)
        assert dialog.plan.verdict in ("ok", "tight")
        assert dialog.plan.prediction is not None
        assert dialog.plan.prediction.fraction == 0.85
        assert not dialog.plan.refusals
        assert "Prediction for the restored flags" in _text(dialog, "#apply-prediction")
        assert "Roll back" in str(dialog.query_one("#confirm", Button).label)
        before = pane.changes.last_outcome
        await pilot.press("y")
        outcome = await _until_outcome(pilot, app, clock, pane, before)
        assert outcome.status == "ready", outcome.messages
        assert _demo().read_unit() == original
        saved = sorted(_demo().unit_path.parent.glob("*.pre-rollback"))
        assert len(saved) == 1
        assert get_flag(saved[0].read_text(), "unit", "mem-fraction-static") == "0.88"
        await run_clock(pilot, app, clock, until=lambda: (pane.boot_index or 0) >= 2
                        and _status(pane) is BootStatus.READY, limit=30)
        assert pane.boot is not None
        assert pane.boot.flags["mem_fraction_static"] == 0.85
        assert "rolled back; the boot is ready" in plain(pane.action_banner)
        assert read_entries()[-1]["action"] == "rollback"


async def test_an_oom_risk_fraction_is_refused_unless_forced_and_rolled_back_when_the_boot_fails() -> None:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = await _ready_console(pilot, app, clock)
        original = _demo().read_unit()
        await _edit_fraction(pilot, pane, "0.99")
        assert pane.calculator.verdict == "oom_risk"
        dialog = await _open_dialog(pilot, app)
        assert dialog.plan.verdict == "oom_risk"
        refusal = _text(dialog, "#apply-refusals")
        assert "refused: the calculator predicts oom_risk" in refusal
        assert "largest safe fraction" in refusal
        assert "press F to apply anyway" in refusal
        assert "REFUSED" in _text(dialog, "#apply-title")
        assert dialog.query_one("#confirm", Button).disabled
        # y does nothing while refused: nothing is written, no backup is made
        await pilot.press("y")
        await pilot.pause()
        assert _screen(app) is dialog
        assert _demo().read_unit() == original
        assert _backups() == []
        titles: list[str] = []  # every notification's title as posted (a 4 s one may expire under load)
        notify = app.notify

        def recording_notify(message: str, **kw: Any) -> None:
            titles.append(str(kw.get("title") or ""))
            notify(message, **kw)

        app.notify = recording_notify  # type: ignore[method-assign]
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen) and pane.busy is None)
        assert any("apply cancelled" in t for t in titles)
        app.notify = notify  # type: ignore[method-assign]
        assert _demo().read_unit() == original
        assert read_entries() == []  # nothing was attempted

        # F (the console's --force) then y: applied anyway; r toggles the automatic rollback
        dialog = await _open_dialog(pilot, app)
        await pilot.press("F")
        assert dialog.force
        assert "APPLY ANYWAY" in _text(dialog, "#apply-title")
        assert "overridden (F)" in _text(dialog, "#apply-refusals")
        assert not dialog.query_one("#confirm", Button).disabled
        box = dialog.query_one("#apply-rollback", Checkbox)
        assert _checked(box)
        await pilot.press("r")
        assert not _checked(box)
        await pilot.press("r")
        assert _checked(box)
        before = pane.changes.last_outcome
        await pilot.press("y")
        outcome = await _until_outcome(pilot, app, clock, pane, before)
        # the new boot died in graph capture; the previous flags came back and booted to ready
        assert outcome.status == "failed"
        assert outcome.code == 1
        assert outcome.rolled_back
        failed = [b for b in pane.boots if b.status is BootStatus.FAILED]
        assert failed
        assert failed[-1].failure is not None
        assert failed[-1].failure.kind is FailureKind.OOM_GRAPH_CAPTURE
        assert failed[-1].flags["mem_fraction_static"] == 0.99
        assert _fraction() == "0.85"
        assert "--mem-fraction-static 0.85" in _demo().effective_execstart()
        await run_clock(pilot, app, clock, until=lambda: _status(pane) is BootStatus.READY, limit=30)
        assert pane.boot is not None
        assert pane.boot.flags["mem_fraction_static"] == 0.85
        banner = pane.action_banner.full.plain  # in full (b; one line on screen until then)
        assert "rolled back to the previous flags (the previous flags are back and the boot is ready)" in banner
        assert "Verdict oom_risk: held (the boot failed)" in banner
        assert pane.action_banner.has_class("-warning")
        outcomes = [(e["action"], e["outcome"]) for e in read_entries()]
        assert outcomes[-2:] == [("rollback", "ready"), ("apply", "failed")]
        assert read_entries()[-1]["forced"] is True


def _footer_actions(app: KvtuiApp) -> set[str]:
    return {key.action for key in app.screen.query(FooterKey)}


@pytest.mark.parametrize(
    ("readonly", "host_options"),
    [(False, None), (True, None), (False, {"readonly": True})],
    ids=["writable", "--readonly", "readonly-host"],
)
async def test_apply_rollback_and_restart_are_offered_and_hidden_on_readonly_hosts(
    readonly: bool, host_options: dict[str, Any] | None
) -> None:
    clock = FakeClock()
    app = demo_app(clock, speed=SPEED, readonly=readonly, host_options=host_options)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.main_screen
        hidden = readonly or bool(host_options)
        screen.refresh_bindings()
        await wait_for(pilot, lambda: "help" in _footer_actions(app))  # the footer has been drawn
        footer = _footer_actions(app)
        titles = [t for t, _, _ in main_screen_commands(screen)]
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_ids = {bid for _, _, bid in app.screen.rows}
        await pilot.press("escape")
        if hidden:
            assert not {"apply", "restart"} & footer, footer
            assert not {"apply", "rollback", "restart"} & help_ids
            assert not [t for t in titles if t.startswith("server:")]
            for key in ("a", "u", "R"):
                await pilot.press(key)
                await pilot.pause()
                assert isinstance(app.screen, MainScreen), key
            assert _pane(app).busy is None
        else:
            assert {"apply", "restart"} <= footer, footer
            assert {"apply", "rollback", "restart"} <= help_ids
            assert {"server: apply", "server: rollback", "server: restart"} <= set(titles)
            # u with no backup yet: a notice that says so, nothing changes
            await pilot.press("u")
            await wait_for(pilot, lambda: isinstance(app.screen, NoticeScreen))
            assert "no kvtui backup" in _screen(app).body
            await pilot.press("escape")
            await wait_for(pilot, lambda: _pane(app).busy is None)
            assert isinstance(app.screen, MainScreen)
        # with nothing running, q (and Textual's ctrl+q) quits at once
        await pilot.press("ctrl+q" if readonly else "q")
        await wait_for(pilot, lambda: app.return_code is not None)
