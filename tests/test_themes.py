"""Theme files: the shipped themes load, broken files give clear messages, the user's folder counts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from textual.color import Color

from kvtui.ui.themes import (
    DEFAULT_THEME,
    KVTUI_VARIABLES,
    ThemeError,
    load_theme_file,
    load_themes,
    theme_dirs,
    theme_variable_defaults,
)

REPO_THEMES = Path(__file__).resolve().parents[1] / "themes"
THEME_FIXTURES = Path(__file__).parent / "fixtures" / "themes"


def test_shipped_themes_load_cleanly() -> None:
    loaded = load_themes([REPO_THEMES])
    assert loaded.problems == []
    names = {t.name for t in loaded.themes}
    assert {"kvtui-dark", "kvtui-light", "kvtui-contrast"} <= names
    assert DEFAULT_THEME in names
    light = next(t for t in loaded.themes if t.name == "kvtui-light")
    assert light.dark is False
    for theme in loaded.themes:
        # every shipped theme names every phase colour explicitly, and each is a real colour
        for var in ("phase-load", "phase-kv", "phase-graph", "phase-ready", "phase-failed"):
            Color.parse(theme.variables[var])


def test_shipped_themes_give_each_phase_a_distinct_colour() -> None:
    for theme in load_themes([REPO_THEMES]).themes:
        phases = [theme.variables[f"phase-{p}"] for p in ("load", "kv", "graph", "ready", "failed")]
        assert len(set(phases)) == len(phases), theme.name


def test_minimal_file_gets_every_kvtui_variable_derived() -> None:
    theme = load_theme_file(THEME_FIXTURES / "minimal.toml")
    defaults = theme_variable_defaults(theme)
    assert set(defaults) == KVTUI_VARIABLES
    for value in defaults.values():
        Color.parse(value)
    # derived from the standard colours: phase-load follows primary
    got, want = Color.parse(defaults["phase-load"]).rgb, Color.parse("#336699").rgb
    assert all(abs(a - b) <= 1 for a, b in zip(got, want, strict=True))


def test_variable_may_reference_a_standard_colour() -> None:
    theme = load_theme_file(THEME_FIXTURES / "refs.toml")
    got, want = Color.parse(theme.variables["phase-kv"]).rgb, Color.parse("#ff8800").rgb
    assert all(abs(a - b) <= 1 for a, b in zip(got, want, strict=True))  # Textual rounds generated shades
    assert theme.variables["footer-background"] == "#101010"  # Textual's own variables pass through


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("bad-colour.toml", "key primary: 'not-a-colour' is not a colour"),
        ("bad-key.toml", "key primaryy: unknown key"),
        ("bad-variable.toml", "variables.phase-loading: unknown kvtui variable (known: phase-compile"),
        ("bad-toml.toml", "is not valid TOML"),
        ("bad-ref.toml", "key variables.phase-kv: '$nope' names no standard colour"),
    ],
)
def test_broken_file_message_names_file_key_and_value(fixture: str, expected: str) -> None:
    path = THEME_FIXTURES / fixture
    with pytest.raises(ThemeError) as info:
        load_theme_file(path)
    message = str(info.value)
    assert message.startswith(f"theme file {path}:")
    assert expected in message


def test_missing_name_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "noname.toml"
    path.write_text('primary = "#123456"\n')
    with pytest.raises(ThemeError, match=r"key name: required key is missing"):
        load_theme_file(path)


def test_load_themes_collects_problems_and_keeps_good_ones() -> None:
    loaded = load_themes([THEME_FIXTURES])
    names = {t.name for t in loaded.themes}
    assert names == {"minimal", "refs"}
    assert len(loaded.problems) == 5
    assert all(p.startswith("theme file ") for p in loaded.problems)


def test_user_themes_come_from_xdg_config_home_and_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user_dir = tmp_path / "cfg" / "kvtui" / "themes"
    user_dir.mkdir(parents=True)
    shutil.copy(THEME_FIXTURES / "minimal.toml", user_dir / "mine.toml")
    (user_dir / "kvtui-dark.toml").write_text('name = "kvtui-dark"\nprimary = "#010203"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    dirs = theme_dirs()
    assert dirs[-1] == user_dir
    assert REPO_THEMES in dirs
    loaded = load_themes()
    by_name = {t.name: t for t in loaded.themes}
    assert "minimal" in by_name
    assert by_name["kvtui-dark"].primary == "#010203"  # the user's file wins
    assert "kvtui-light" in by_name
