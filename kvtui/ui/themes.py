"""Theme files: ``themes/*.toml`` -> Textual ``Theme`` objects.

A theme file holds the fields of Textual's ``Theme`` plus a ``[variables]`` table for kvtui's
own colours (phase, severity, GPU, log, verdict and diff colours). Every kvtui variable left out is
derived from the standard colours (:func:`variable_defaults`), so a file with only ``name`` and
``primary`` is a complete theme. A ``[variables]`` value may name a standard colour as
``"$accent"``.

Themes are searched in (later wins on a name clash):

1. the installed package (``kvtui/themes``, shipped inside the wheel),
2. a source checkout's top-level ``themes/`` folder,
3. ``$XDG_CONFIG_HOME/kvtui/themes/`` (the user's own).

A broken file never stops the app: it is reported (file, key, value, what was expected) and
skipped; the app then falls back to :data:`DEFAULT_THEME`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from textual.color import Color, ColorParseError
from textual.theme import BUILTIN_THEMES, Theme

from kvtui.config import state_dir

DEFAULT_THEME = "kvtui-dark"

# kvtui's own variables and the standard colour each one defaults to.
_DERIVED: dict[str, str] = {
    "phase-launch": "foreground-muted",
    "phase-init": "secondary",
    "phase-load": "primary",
    "phase-compile": "secondary",
    "phase-kv": "accent",
    "phase-graph": "warning",
    "phase-http": "success",
    "phase-ready": "success",
    "phase-failed": "error",
    "severity-error": "error",
    "severity-warning": "warning",
    "severity-info": "primary",
    "gpu-used": "primary",
    "gpu-free": "panel",
    "gpu-foreign": "warning",
    "gpu-stale": "foreground-disabled",
    "log-match": "accent-muted",
    "log-mark": "secondary",
    "log-marker": "accent",
    "verdict-ok": "success",
    "verdict-tight": "warning",
    "verdict-oom-risk": "error",
    "verdict-no-fit": "error",
    "diff-add": "success",
    "diff-remove": "error",
    "diff-hunk": "accent",
}
KVTUI_VARIABLES: frozenset[str] = frozenset(_DERIVED)
_RESERVED_PREFIXES = ("phase-", "severity-", "gpu-", "log-", "verdict-", "diff-")


class ThemeError(Exception):
    """A theme file could not be used; ``str()`` names the file, key, value and expectation."""


@dataclass(frozen=True, slots=True)
class LoadedThemes:
    themes: list[Theme]
    problems: list[str]


def _colour(value: str) -> str:
    try:
        Color.parse(value)
    except ColorParseError:
        raise ValueError(
            f"{value!r} is not a colour (expected '#rrggbb', 'rgb(r, g, b)', 'hsl(…)' or a colour name)"
        ) from None
    return value


class ThemeFile(BaseModel):
    """The schema of one ``themes/*.toml`` file."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    primary: str
    secondary: str | None = None
    accent: str | None = None
    warning: str | None = None
    error: str | None = None
    success: str | None = None
    foreground: str | None = None
    background: str | None = None
    surface: str | None = None
    panel: str | None = None
    boost: str | None = None
    dark: bool = True
    luminosity_spread: float = Field(default=0.15, ge=0.0, le=1.0)
    text_alpha: float = Field(default=0.95, ge=0.0, le=1.0)
    variables: dict[str, str] = Field(default_factory=dict)

    @field_validator(
        "primary", "secondary", "accent", "warning", "error", "success", "foreground", "background", "surface",
        "panel", "boost",
    )
    @classmethod
    def _check_colour(cls, value: str | None) -> str | None:
        return None if value is None else _colour(value)

    @field_validator("variables")
    @classmethod
    def _check_variables(cls, variables: dict[str, str]) -> dict[str, str]:
        for key, value in variables.items():
            if key in KVTUI_VARIABLES:
                if not value.startswith("$"):
                    try:
                        _colour(value)
                    except ValueError as exc:
                        raise ValueError(f"variables.{key}: {exc}") from None
            elif key.startswith(_RESERVED_PREFIXES):
                known = ", ".join(sorted(k for k in KVTUI_VARIABLES if k.startswith(key.split("-")[0] + "-")))
                raise ValueError(f"variables.{key}: unknown kvtui variable (known: {known})")
        return variables


def _format_validation(path: Path, exc: ValidationError) -> str:
    parts: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(file)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (expected Theme fields: name, primary, secondary, accent, warning, error, " \
                  "success, foreground, background, surface, panel, boost, dark, luminosity_spread, " \
                  "text_alpha, and a [variables] table)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif "input" in err and err["type"] not in ("value_error",):
            msg = f"{err['input']!r}: {msg}"
        parts.append(f"key {loc}: {msg}")
    return f"theme file {path}: " + "; ".join(parts)


def _resolve_references(variables: Mapping[str, str], base: Mapping[str, str], path: Path) -> dict[str, str]:
    resolved: dict[str, str] = {}
    for key, value in variables.items():
        if value.startswith("$"):
            ref = value[1:]
            if ref not in base:
                raise ThemeError(
                    f"theme file {path}: key variables.{key}: {value!r} names no standard colour "
                    f"(expected e.g. $primary, $accent, $warning, $error, $success, $panel)"
                )
            resolved[key] = base[ref]
        else:
            resolved[key] = value
    return resolved


def load_theme_file(path: Path) -> Theme:
    """Read and validate one theme file. Raises :class:`ThemeError` with a user-facing message."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ThemeError(f"theme file {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ThemeError(f"theme file {path}: is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ThemeError(f"theme file {path}: is not valid TOML ({exc})") from None
    try:
        spec = ThemeFile.model_validate(data)
    except ValidationError as exc:
        raise ThemeError(_format_validation(path, exc)) from None
    fields = spec.model_dump(exclude={"variables"})
    base = Theme(**fields).to_color_system().generate()
    variables = _resolve_references(spec.variables, base, path)
    return Theme(**fields, variables=variables)


def theme_dirs() -> list[Path]:
    """Folders searched for ``*.toml`` themes, lowest precedence first (existing ones only)."""
    candidates: list[Path] = []
    try:
        packaged = resources.files("kvtui") / "themes"
        candidates.append(Path(str(packaged)))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - kvtui is always importable here
        pass
    candidates.append(Path(__file__).resolve().parents[2] / "themes")
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    candidates.append(Path(config_home) / "kvtui" / "themes")
    seen: set[Path] = set()
    result: list[Path] = []
    for folder in candidates:
        try:
            key = folder.resolve()
        except OSError:
            continue
        if key in seen or not folder.is_dir():
            continue
        seen.add(key)
        result.append(folder)
    return result


def load_themes(dirs: Iterable[Path] | None = None) -> LoadedThemes:
    """Load every theme in ``dirs`` (default: :func:`theme_dirs`); collect problems, never raise."""
    themes: dict[str, Theme] = {}
    problems: list[str] = []
    for folder in theme_dirs() if dirs is None else dirs:
        try:
            files = sorted(folder.glob("*.toml"))
        except OSError as exc:
            problems.append(f"theme folder {folder}: cannot be listed ({exc})")
            continue
        for path in files:
            try:
                theme = load_theme_file(path)
            except ThemeError as exc:
                problems.append(str(exc))
                continue
            themes[theme.name] = theme
    return LoadedThemes(themes=list(themes.values()), problems=problems)


def variable_defaults(base: Mapping[str, str]) -> dict[str, str]:
    """kvtui's variables derived from a generated colour system (``ColorSystem.generate()``)."""
    return {name: base.get(source, base.get("primary", "#808080")) for name, source in _DERIVED.items()}


def theme_variable_defaults(theme: Theme) -> dict[str, str]:
    """kvtui's variables for ``theme`` (its own ``variables`` still take precedence in Textual)."""
    return variable_defaults(theme.to_color_system().generate())


def rgb(value: str, fallback: tuple[int, int, int] = (128, 128, 128)) -> tuple[int, int, int]:
    """A theme variable as an ``(r, g, b)`` tuple (for plotext); ``fallback`` when unparsable."""
    try:
        return Color.parse(value).rgb
    except ColorParseError:
        return fallback


def usable_theme(theme: Theme) -> bool:
    """Whether kvtui draws correctly in ``theme``. An ANSI theme (Textual's ``ansi-dark``,
    ``ansi-light``) leaves colours to the terminal's 16: kvtui's bars draw their empty cells in the
    foreground at 10 % opacity, which an ANSI colour cannot blend — empty cells looked full."""
    return not theme.ansi and not theme.name.startswith("ansi")


def accepted_theme_names(loaded: LoadedThemes | None = None) -> list[str]:
    """Every name ``[ui] theme`` may take: the themes the console offers (kvtui's theme files and
    Textual's built-ins). The console checks ``[ui] theme`` against it at start, and
    ``kvtui hosts --check`` up front: change what the console offers here, and both follow."""
    loaded = load_themes() if loaded is None else loaded
    builtins = {name for name, theme in BUILTIN_THEMES.items() if usable_theme(theme)}  # not the ANSI ones
    return sorted(builtins | {t.name for t in loaded.themes})


# ---------------------------------------------------------------------------------------------
# The theme last chosen (``T``, the palette), remembered across runs
# ---------------------------------------------------------------------------------------------

UI_STATE_FILE = "ui.json"  # in the state dir (``kvtui.config.state_dir``, next to the history)


def ui_state_path() -> Path:
    return state_dir() / UI_STATE_FILE


def remembered_theme(path: Path | None = None) -> str | None:
    """The theme the user last chose in the console; None when none was remembered or the file
    cannot be read (never raises: a broken file is as good as none)."""
    try:
        data = json.loads((path or ui_state_path()).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    theme = data.get("theme") if isinstance(data, dict) else None
    return theme if isinstance(theme, str) and theme else None


def remember_theme(name: str, path: Path | None = None) -> str | None:
    """Write ``name`` as the theme to start with next time (atomically: a temporary file renamed
    over the old one, so a crash leaves the old choice or the new one). Other keys of the file are
    kept. Returns what went wrong, or None."""
    target = path or ui_state_path()
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data["theme"] = name
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{UI_STATE_FILE}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
                f.write("\n")
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        return f"cannot remember the theme in {target}: {exc.strerror or exc}"
    return None
