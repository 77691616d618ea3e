"""The pure core must not pull in textual or asyncssh (DESIGN: layers)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

KVTUI = Path(__file__).resolve().parent.parent / "kvtui"

CORE = ["kvtui.engines.events", "kvtui.boot", "kvtui.gpu", "kvtui.fmt", "kvtui.engines.sglang", "kvtui.engines.vllm",
        "kvtui.engines.shapes", "kvtui.kvcalc", "kvtui.config", "kvtui.flags", "kvtui.engines.parse",
        "kvtui.boot.deployment", "kvtui.bootlog", "kvtui.config_checks", "kvtui.sim.presets"]
FORBIDDEN = ("textual", "asyncssh", "rich", "kvtui.hosts", "kvtui.ui")


def _check(module: str) -> None:
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} or "
        f"any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"


@pytest.mark.parametrize("module", CORE)
def test_core_imports_no_ui_or_ssh(module: str) -> None:
    _check(module)


def test_cli_help_does_not_import_textual() -> None:
    code = (
        "import sys\n"
        "from kvtui import cli\n"
        "cli.build_parser()\n"
        "print(','.join(m for m in ('textual', 'asyncssh', 'pydantic') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# ---------------------------------------------------------------------------------------------
# The simulation is its own package (issue 23): kvtui/sim/, not inside kvtui/hosts/
# ---------------------------------------------------------------------------------------------

SIM_FORBIDDEN = ("kvtui.kvcalc", "textual", "asyncssh")


def _imported_names(path: Path) -> set[str]:
    """Every module an ``import`` statement of this file names, at any level (a function's lazy
    imports and ``TYPE_CHECKING`` blocks included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_the_host_layer_holds_no_simulation() -> None:
    hosts = KVTUI / "hosts"
    named = sorted(str(p.relative_to(KVTUI)) for p in hosts.rglob("*")
                   if "__pycache__" not in p.parts and ("demo" in p.name or "sim" in p.name))
    assert named == []
    defined = sorted(f"{p.relative_to(KVTUI)}: {n.name}" for p in hosts.rglob("*.py")
                     for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                     if isinstance(n, ast.ClassDef) and n.name.startswith(("Demo", "Sim")))
    assert defined == []
    # one preset table: kvtui/sim/presets.py, and no second one kept equal by a test
    assert not (KVTUI / "demo_presets.py").exists()
    tables = sorted(str(p.relative_to(KVTUI)) for p in KVTUI.rglob("*.py")
                    for n in ast.parse(p.read_text(encoding="utf-8")).body
                    if isinstance(n, (ast.Assign, ast.AnnAssign))
                    and any(isinstance(t, ast.Name) and t.id in {"PRESETS", "PRESET_ENGINES", "PRESET_NODES"}
                            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])))
    assert tables == ["sim/presets.py", "sim/presets.py", "sim/presets.py"]


def test_the_simulation_imports_neither_textual_nor_asyncssh_nor_the_calculator() -> None:
    modules = sorted((KVTUI / "sim").rglob("*.py"))
    assert {p.stem for p in modules} >= {"__init__", "backend", "presets", "sglang", "vllm", "timeline"}
    for path in modules:
        bad = sorted(n for n in _imported_names(path) if any(n == f or n.startswith(f + ".") for f in SIM_FORBIDDEN))
        assert bad == [], f"{path.relative_to(KVTUI)} imports {bad}"
    # and at run time, through everything it imports (the factory with it: `kvtui connect demo`)
    code = (
        "import importlib, pkgutil, sys, kvtui.sim, kvtui.hosts.factory\n"
        "for m in pkgutil.walk_packages(kvtui.sim.__path__, 'kvtui.sim.'):\n"
        "    importlib.import_module(m.name)\n"
        f"bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {SIM_FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == ""


# the host layer's public modules (pyproject.toml's import-linter contract "the views import only the
# host layer's public modules"); this also sees `TYPE_CHECKING` imports, which import-linter skips
HOSTS_PUBLIC = {"kvtui.hosts", "kvtui.hosts.backend", "kvtui.hosts.factory", "kvtui.hosts.service",
                "kvtui.hosts.probe", "kvtui.hosts.orphans"}


def test_the_views_import_only_the_host_layers_public_modules() -> None:
    bad: list[str] = []
    for path in sorted((KVTUI / "ui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from kvtui.hosts import service` names the module service; `from kvtui.hosts.backend
                # import HostBackend` a name in a module
                names = ([f"{node.module}.{a.name}" for a in node.names] if node.module == "kvtui.hosts"
                         else [node.module])
            else:
                continue
            bad += [f"{path.relative_to(KVTUI)}:{node.lineno} {n}" for n in names
                    if n.startswith("kvtui.hosts.") and n not in HOSTS_PUBLIC]
    assert bad == []


# ---------------------------------------------------------------------------------------------
# Imports at module level (issue 23): a function-level import is a hidden dependency, allowed only
# where it is a measured start-up lazy; each module's allowance says why
# ---------------------------------------------------------------------------------------------

UI_KVCALC = ("kvcalc (directly or through kvtui.changes / kvtui.tune) only after the console's first frame "
             "(test_ui_startup); tests/test_ui_structure.py checks each says so")

# module (relative to kvtui/) → (exactly how many function-level imports, why): one hoisted, or one
# more, changes the count here (a stale allowance is not left behind)
FUNCTION_IMPORTS_ALLOWED: dict[str, tuple[int, str]] = {
    "commands/calc.py": (6, "--host only: kvtui.changes, kvtui.history (pydantic) cost `kvtui calc --log` +90 ms CPU"),
    "commands/connect.py": (1, "the bundle writer imports kvtui.kvcalc, which the console must not (test_ui_startup)"),
    "commands/hosts.py": (2, "--check only: the console (textual, kvtui.ui) costs `kvtui hosts` +840 ms CPU"),
    "commands/replay.py": (3, "a bundle or --record only: kvtui.history (pydantic) costs `kvtui replay` +220 ms CPU"),
    "hosts/factory.py": (4, "one backend kind per host: importing all four makes the factory 220 → 910 ms CPU"),
    "hosts/local.py": (1, "pynvml: an optional dependency, absent on a machine without NVML"),
    "monitor/host.py": (1, "kvtui.history (pydantic) +40 ms CPU on `import kvtui.monitor`, which calc imports"),
    "ui/calc/panel.py": (5, UI_KVCALC),
    "ui/changes/controller.py": (8, UI_KVCALC),
    "ui/deployment_screen.py": (3, UI_KVCALC),
    "ui/fleet/screen.py": (1, UI_KVCALC),
    "ui/gpu/widgets.py": (1, "plotext (textual-plotext) only when the GPU plot is first drawn (test_ui_startup)"),
    "ui/host_pane.py": (1, UI_KVCALC),
    "ui/screens.py": (2, UI_KVCALC),
    "ui/serving/widgets.py": (5, UI_KVCALC),
}


def _function_imports(path: Path) -> list[int]:
    """The lines of the ``import`` statements inside a function (a method, a nested function) of
    this file, each once; the module's own and its ``TYPE_CHECKING`` imports are not counted."""
    seen: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            seen.update(sub.lineno for sub in ast.walk(node) if isinstance(sub, (ast.Import, ast.ImportFrom)))
    return sorted(seen)


def test_imports_are_at_module_level_but_for_the_listed_lazies() -> None:
    counts = {str(p.relative_to(KVTUI)): len(n) for p in sorted(KVTUI.rglob("*.py")) if (n := _function_imports(p))}
    allowed = {m: n for m, (n, _) in FUNCTION_IMPORTS_ALLOWED.items()}
    assert counts == allowed, "function-level imports differ from the allowance (hoist, or measure and list the lazy)"
    assert sum(counts.values()) <= 45  # 318 in 49 modules when issue 23 was worked
    assert all(why and why != "TODO" for _, why in FUNCTION_IMPORTS_ALLOWED.values())


def test_each_lazy_says_why() -> None:
    """A lazy import carries ``# lazy: <reason, figure>`` on its line or in the comment just above
    it (kvtui/ui/: tests/test_ui_structure.py)."""
    silent: list[str] = []
    for path in sorted(KVTUI.rglob("*.py")):
        rel = str(path.relative_to(KVTUI))
        if rel.startswith("ui/"):  # tests/test_ui_structure.py checks ui's
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for lineno in _function_imports(path):
            above = lineno - 2
            said = "# lazy" in lines[lineno - 1]
            while not said and above >= 0 and lines[above].strip().startswith("#"):
                said = "# lazy" in lines[above]
                above -= 1
            silent += [] if said else [f"{rel}:{lineno}"]
    assert silent == []


def test_the_command_line_imports_each_command_when_it_runs() -> None:
    """``kvtui.cli.COMMANDS``: the one dispatch table, one module per command the parser knows."""
    code = (
        "import argparse, sys\n"
        "from kvtui import cli\n"
        "sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))\n"
        "print(sorted(sub.choices) == sorted(cli.COMMANDS))\n"
        "print(sorted(m for m in sys.modules if m.startswith('kvtui.commands.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["True", "[]"]
