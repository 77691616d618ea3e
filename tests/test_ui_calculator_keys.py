"""The calculator never fights the operator (issue 22 #11, and #14's 80x24 part): Enter commits
and re-selects; ``c`` in a numeric field re-selects instead of appending (``0.90c0.95``);
``tab`` from the log lands on the panel, not in a field that eats ``z``; ``esc`` restores the
last valid value; ``ctrl+r`` resets every field to the running boot's flags; an invalid value
names the field and keeps the last valid prediction; the field being edited is scrolled into
view at 80x24. The real app on a demo host, keys as a user types them."""

from __future__ import annotations

from typing import Any

from test_ui_helpers import FakeClock, burst, demo_app, run_clock, start_demo, wait_for
from textual.widget import Widget

from kvtui.boot import BootStatus
from kvtui.ui.app import KvtuiApp
from kvtui.ui.calc.panel import CalculatorPanel
from kvtui.ui.host_pane import HostPane

SPEED = 40.0
READY_AFTER = 12.0
SIZE = (130, 38)


def ready_clock() -> FakeClock:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(READY_AFTER)
    return clock


async def ready_app(pilot: Any, app: KvtuiApp, clock: FakeClock) -> HostPane:
    pane = app.main_screen.active_pane
    assert pane is not None
    await run_clock(pilot, app, clock, until=lambda: pane.boot is not None and pane.boot.status is BootStatus.READY,
                    limit=60)
    await wait_for(pilot, lambda: pane.calculator.result is not None)
    return pane


def focused_of(app: KvtuiApp) -> Widget | None:
    return app.focused


def edits_of(calc: CalculatorPanel) -> object:
    result = calc.result
    return None if result is None else result["edits"]


def index_of(calc: CalculatorPanel, flag: str) -> int:
    return next(i for i, f in enumerate(calc.fields) if f.flag == flag)


async def test_enter_commits_the_value_and_selects_it_so_typing_replaces_it() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        await pilot.press("c", *"0.95", "enter")
        assert edits_of(calc) == {"mem_fraction_static": 0.95}  # committed now, not after the debounce
        assert calc.selected
        await pilot.press(*"0.9", "enter")
        assert calc.fields[0].value == "0.9"  # replaced (it was "0.950.9")
        assert edits_of(calc) == {"mem_fraction_static": 0.9}


async def test_c_in_a_numeric_field_reselects_the_value_instead_of_typing_it() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        await pilot.press("c", *"0.90", "c", *"0.95")
        assert calc.fields[0].value == "0.95"  # it was "0.90c0.95"
        assert focused_of(app) is calc
        assert calc.editing == 0
        # in a burst too (a fast typist): the keys keep their order
        await burst(pilot, "c", *"0.80", "c", *"0.88", "enter")
        assert calc.fields[0].value == "0.88"
        assert edits_of(calc) == {"mem_fraction_static": 0.88}


async def test_numeric_fields_take_numbers_and_unset_words_not_other_letters() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        ctx = index_of(calc, "context_length")
        await pilot.press("c", *(["down"] * ctx))
        assert calc.editing == ctx
        # a letter that cannot be part of a number or an unset word is not typed: a hint says why
        await pilot.press(*"8192", "x")
        assert calc.fields[ctx].value == "8192"
        assert any("context-length" in line and "number" in line for line in calc.plain_lines())
        # "unset" (and none) are typed on purpose: a flag can be unset
        await pilot.press("ctrl+a", "ctrl+k", *"unset", "enter")
        assert calc.fields[ctx].value == "unset"
        assert edits_of(calc) == {"context_length": None}
        # a text field takes letters, c included
        dtype = index_of(calc, "kv_cache_dtype")
        await pilot.press(*(["down"] * ((dtype - ctx) % len(calc.fields))))
        assert calc.editing == dtype
        await pilot.press(*"fp8_e4m3", "c")
        assert calc.fields[dtype].value == "fp8_e4m3c"


async def test_tab_from_the_log_lands_on_the_panel_and_z_still_zooms() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        assert focused_of(app) is pane.log_view
        before = [f.value for f in calc.fields]
        await pilot.press("tab")
        assert focused_of(app) is calc
        assert calc.editing is None  # the panel, not a field: one-letter keys are the console's
        await pilot.press("z")
        assert app.main_screen.maximized is pane.query_one("#calc-panel")
        assert [f.value for f in calc.fields] == before
        shown = {b.binding.description for b in app.screen.active_bindings.values() if b.binding.show}
        assert "Edit flag" in shown  # the footer says what Enter does here
        assert "Use value" not in shown
        await pilot.press("z")
        assert app.main_screen.maximized is None
        # Enter (or c) from the panel edits its current field, the value selected
        await pilot.press("enter")
        assert calc.editing == 0
        assert calc.selected
        await pilot.press(*"0.9")
        assert calc.fields[0].value == "0.9"


async def test_escape_restores_the_last_valid_value_and_leaves() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        await pilot.press("c", *"0.95", "enter", *"1.5", "enter")
        # invalid: a message naming the field and what it expects; the prediction keeps 0.95
        assert calc.fields[0].invalid
        assert calc.error is not None
        assert "mem-fraction-static" in calc.error
        assert "between 0 and 1" in calc.error
        assert edits_of(calc) == {"mem_fraction_static": 0.95}
        shown = " ".join(line.strip() for line in calc.plain_lines())  # the message wraps
        assert "mem-fraction-static 1.5: expected a fraction between 0 and 1" in shown
        await pilot.press("escape")
        assert focused_of(app) is pane.log_view
        assert calc.fields[0].value == "0.95"
        assert not calc.fields[0].invalid
        assert calc.error is None
        assert edits_of(calc) == {"mem_fraction_static": 0.95}


async def test_ctrl_r_resets_every_field_to_the_running_boots_flags() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        observed = [f.observed for f in calc.fields]
        await pilot.press("c", *"0.95", "down", "ctrl+a", "ctrl+k", *"8", "enter")
        assert calc.fields[0].edited
        assert calc.fields[1].edited
        await pilot.press("ctrl+r")
        assert [f.value for f in calc.fields] == observed
        assert calc.edits() == ([], [])
        assert edits_of(calc) == {}
        assert any("running boot" in n.message for n in app._notifications)
        # from the panel without a field too
        await pilot.press("escape", "c", *"0.9", "escape", "tab")
        assert focused_of(app) is calc
        assert calc.editing is None
        await pilot.press("ctrl+r")
        assert [f.value for f in calc.fields] == observed


async def test_at_80x24_the_field_being_edited_is_scrolled_into_view() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        panel = pane.query_one("#calc-panel")

        def field_shown(index: int) -> bool:
            line = calc._field_lines.get(index)
            if line is None:
                return False
            y = calc.region.y + calc.styles.padding.top + line
            visible = panel.content_region  # the panel's inside, on screen
            return visible.y <= y < visible.bottom

        await pilot.press("c")
        await wait_for(pilot, lambda: app.main_screen.maximized is panel)
        await wait_for(pilot, lambda: field_shown(0))
        for index in range(1, len(calc.fields)):
            await pilot.press("down")
            assert calc.editing == index
            await wait_for(pilot, lambda index=index: field_shown(index), timeout=10)  # type: ignore[misc]
        await pilot.press("down")  # round to the first
        await wait_for(pilot, lambda: field_shown(0), timeout=10)
        # left on the last field with the panel scrolled to its end, then opened again with c
        await pilot.press("up")
        await wait_for(pilot, lambda: field_shown(len(calc.fields) - 1), timeout=10)
        panel.scroll_end(animate=False, immediate=True)  # read the reasons at its end
        await wait_for(pilot, lambda: not field_shown(0) and panel.scroll_y > 0)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.main_screen.maximized is None)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.main_screen.maximized is panel)
        await wait_for(pilot, lambda: field_shown(0), timeout=10)
        assert panel.scroll_y == 0  # from its top: the model line above the first flag shows too
