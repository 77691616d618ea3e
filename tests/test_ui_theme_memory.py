"""The theme chosen with ``T`` (or the palette) is the one the next console starts with; it is
kept in the state dir (``$XDG_STATE_HOME/kvtui/ui.json``, next to the history) and ``--theme``
still wins."""

from __future__ import annotations

import json
import os
from pathlib import Path

from test_ui_helpers import FakeClock, demo_app, wait_for

from kvtui.cli import build_parser
from kvtui.ui.themes import DEFAULT_THEME, remember_theme, remembered_theme

SIZE = (100, 30)


def _state_file() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "kvtui" / "ui.json"


def _saved() -> str | None:
    try:
        return json.loads(_state_file().read_text())["theme"]  # type: ignore[no-any-return]
    except (OSError, ValueError, KeyError):
        return None


async def test_the_theme_chosen_with_T_is_the_next_consoles_and_theme_wins() -> None:
    assert not _state_file().exists()
    clock = FakeClock()
    app = demo_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == DEFAULT_THEME
        await pilot.press("T")
        chosen = app.theme
        assert chosen != DEFAULT_THEME
        await wait_for(pilot, lambda: _saved() == chosen)
    # the next console starts in it
    again = demo_app(clock)
    async with again.run_test(size=SIZE) as pilot:
        assert again.theme == chosen
        await pilot.pause()
    # --theme wins, and is not remembered by being given
    given = demo_app(clock, theme=DEFAULT_THEME)
    async with given.run_test(size=SIZE) as pilot:
        assert given.theme == DEFAULT_THEME
        await pilot.pause()
    assert _saved() == chosen


async def test_a_broken_or_unknown_remembered_theme_is_ignored() -> None:
    state = _state_file()
    state.parent.mkdir(parents=True)
    state.write_text("{not json")
    assert remembered_theme() is None
    clock = FakeClock()
    app = demo_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == DEFAULT_THEME
        await pilot.pause()
    # a theme file since removed: the configured theme, without a warning about the state file
    assert remember_theme("gone-theme") is None
    assert remembered_theme() == "gone-theme"
    app = demo_app(clock)
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == DEFAULT_THEME
        assert not [p for p in app.startup_problems if "gone-theme" in p]
        await pilot.pause()
    # the file is replaced whole (no temporary left behind)
    assert [p.name for p in state.parent.iterdir() if "ui.json" in p.name] == ["ui.json"]


def test_connect_takes_theme() -> None:
    args = build_parser().parse_args(["connect", "demo", "--theme", "kvtui-light"])
    assert args.theme == "kvtui-light"
