"""The pure core must not pull in textual or asyncssh (DESIGN: layers)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

KVTUI = Path(__file__).resolve().parent.parent / "kvtui"

CORE = ["kvtui.engines.events", "kvtui.boot", "kvtui.gpu", "kvtui.fmt", "kvtui.engines.sglang", "kvtui.engines.vllm",
        "kvtui.engines.shapes", "kvtui.kvcalc", "kvtui.config", "kvtui.flags", "kvtui.engines.parse",
        "kvtui.boot.deployment", "kvtui.bootlog", "kvtui.config_checks", "kvtui.config_paths", "kvtui.sim.presets"]
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

# module (relative to kvtui/) → (exactly how many function-level imports, why): one hoisted, or one
# more, changes the count here (a stale allowance is not left behind)
FUNCTION_IMPORTS_ALLOWED: dict[str, tuple[int, str]] = {
    "hosts/nvml.py": (1, "pynvml: an optional dependency, absent on a machine without NVML"),
}
FUNCTION_IMPORTS_MAX = 20  # issue 23: "function-level imports ≤ 20, each with its reason" (44 before the
# lazy declarations below, 1 after)

# the start-up lazies declared at a module's top (kvtui/lazy.py): (module relative to kvtui/, the
# module it loads late) → why, with the measured cost (median CPU of the import on top of what the
# importer has already loaded, 5 fresh processes; a 2-core machine at load ~7)
AFTER_FIRST_FRAME = "the console imports it after its first frame (test_ui_startup)"
KVCALC = f"{AFTER_FIRST_FRAME}: kvtui.kvcalc +47 ms CPU on top of kvtui.ui.app"
CHANGES = f"{AFTER_FIRST_FRAME}: kvtui.changes imports kvcalc, +65 ms CPU on top of kvtui.ui.app"
TUNE = f"{AFTER_FIRST_FRAME}: kvtui.tune imports kvcalc, +79 ms CPU on top of kvtui.ui.app"
PLOTEXT = f"{AFTER_FIRST_FRAME}: textual_plotext +20 ms CPU on top of kvtui.ui.app"
LAZY_MODULES: dict[tuple[str, str], str] = {
    ("commands/calc.py", "kvtui.changes"): "--host only: kvtui.changes costs `kvtui calc --log` +108 ms CPU",
    ("commands/calc.py", "kvtui.history"): "--host only: kvtui.history (pydantic) costs `kvtui calc --log` +51 ms CPU",
    ("commands/calc.py", "kvtui.history.ident"): "--host only: with kvtui.history (its +51 ms CPU)",
    ("commands/connect.py", "kvtui.commands.bundle"): f"{AFTER_FIRST_FRAME}: imports kvcalc, +62 ms CPU",
    ("commands/hosts.py", "kvtui.ui.app"): "--check only: the console (textual) costs `kvtui hosts` +744 ms CPU",
    ("commands/hosts.py", "kvtui.ui.themes"): "--check only: +113 ms CPU on `kvtui hosts`",
    ("commands/replay.py", "kvtui.history"): "--record only: kvtui.history (pydantic) costs `kvtui replay` +256 ms CPU",
    ("commands/replay.py", "kvtui.history.bundle"): "a bundle only: with kvtui.history (its +256 ms CPU)",
    ("hosts/factory.py", "kvtui.hosts.kube.backend"): "a kube host only: +251 ms CPU on the factory",
    ("hosts/factory.py", "kvtui.hosts.local"): "a local host only: +267 ms CPU on the factory",
    ("hosts/factory.py", "kvtui.hosts.ssh"): "an SSH host only: asyncssh, +360 ms CPU on the factory",
    ("hosts/factory.py", "kvtui.sim.backend"): "a demo host only: +236 ms CPU on the factory (all four: +554 ms)",
    ("monitor/host.py", "kvtui.history.ident"): "kvtui.history (pydantic) +43 ms CPU on `import kvtui.monitor` (calc)",
    ("ui/calc/panel.py", "kvtui.kvcalc"): KVCALC,
    ("ui/changes/controller.py", "kvtui.changes"): CHANGES,
    ("ui/changes/controller.py", "kvtui.kvcalc"): KVCALC,
    ("ui/changes/controller.py", "kvtui.tune.driver"): TUNE,
    ("ui/changes/controller.py", "kvtui.tune.planner"): TUNE,
    ("ui/fleet/screen.py", "textual_plotext"): PLOTEXT,
    ("ui/gpu/widgets.py", "textual_plotext"): PLOTEXT,
    ("ui/host_pane.py", "kvtui.changes"): CHANGES,
    ("ui/screens.py", "kvtui.tune.planner"): TUNE,
    ("ui/serving/widgets.py", "kvtui.kvcalc"): KVCALC,
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
    assert sum(counts.values()) <= FUNCTION_IMPORTS_MAX  # 318 in 49 modules when issue 23 was worked, then 44
    assert all(why and why != "TODO" for _, why in FUNCTION_IMPORTS_ALLOWED.values())


def _bound_by(node: ast.stmt) -> dict[str, str]:
    """name → module, for the modules an import statement binds (``from kvtui import kvcalc``:
    kvcalc → kvtui.kvcalc; ``import textual_plotext``; ``from kvtui.tune import planner as tp``)."""
    if isinstance(node, ast.Import):
        return {a.asname or a.name: a.name for a in node.names if a.asname or "." not in a.name}
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    return {}


def _lazy_declarations(path: Path) -> tuple[dict[str, str], list[str]]:
    """The file's start-up lazies, target module → line, and what is wrong with their form: each is
    ``NAME = lazy_module("T")  # lazy: <why>`` in the ``else`` of the module's ``if TYPE_CHECKING:``,
    whose body imports T as NAME (what mypy and a reader see); no ``lazy_module`` anywhere else."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    found: dict[str, str] = {}
    wrong: list[str] = []
    declared: set[int] = set()
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        typed: dict[str, str] = {}
        for stmt in node.body:
            typed.update(_bound_by(stmt))
        for stmt in node.orelse:
            call = stmt.value if isinstance(stmt, ast.Assign) else None
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "lazy_module"):
                continue
            declared.add(call.lineno)
            target = call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) else None
            name = stmt.targets[0].id if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) else ""
            if not isinstance(target, str) or typed.get(name) != target:
                wrong.append(f"{path.name}:{stmt.lineno} {name} = lazy_module({target!r}) is not typed as that module")
            elif "# lazy: " not in lines[stmt.lineno - 1]:
                wrong.append(f"{path.name}:{stmt.lineno} {target} does not say why it is lazy")
            else:
                found[target] = lines[stmt.lineno - 1].strip()
    wrong += [f"{path.name}:{n.lineno} lazy_module outside a declaration" for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "lazy_module"
              and n.lineno not in declared]
    return found, wrong


def test_the_start_up_lazies_are_declared_typed_at_the_modules_top_and_listed_with_their_cost() -> None:
    declared: dict[tuple[str, str], str] = {}
    wrong: list[str] = []
    for path in sorted(KVTUI.rglob("*.py")):
        if path.name == "lazy.py" and path.parent == KVTUI:
            continue
        found, bad = _lazy_declarations(path)
        declared.update({(str(path.relative_to(KVTUI)), t): line for t, line in found.items()})
        wrong += bad
    assert wrong == []
    assert sorted(declared) == sorted(LAZY_MODULES), "a lazy declaration differs from LAZY_MODULES (stale or unlisted)"
    assert all("ms CPU" in why for why in LAZY_MODULES.values())  # each with its measured cost


LINT_WITH_LAZIES = """
import json, sys
from importlinter import configuration
from importlinter.application import use_cases
from importlinter.application.app_config import settings

configuration.configure()
edges, builder = json.loads(sys.argv[1]), settings.GRAPH_BUILDER


class WithLazies:
    def build(self, **options):
        graph = builder.build(**options)
        for importer, imported, line, text in edges:
            if imported not in graph.modules:  # an external package: its squashed top-level node
                imported = imported.split(".")[0]
                if imported not in graph.modules:
                    graph.add_module(imported, is_squashed=True)
            graph.add_import(importer=importer, imported=imported, line_number=line, line_contents=text)
        return graph


settings.configure(GRAPH_BUILDER=WithLazies())
sys.exit(0 if use_cases.lint_imports(config_filename="pyproject.toml", cache_dir=None, no_logo=True) else 1)
"""


def _lint_with(edges: list[tuple[str, str, int, str]]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LINT_WITH_LAZIES, json.dumps(edges)], cwd=KVTUI.parent,
                          capture_output=True, text=True, timeout=300)


def test_the_layer_contracts_hold_with_each_lazy_declaration_counted_as_the_import_it_is() -> None:
    """import-linter reads ``import`` statements, and a lazy declaration's is in a ``TYPE_CHECKING``
    block, which the contracts skip (pyproject.toml: ``exclude_type_checking_imports``): the
    contracts run again here on the graph with each declaration added as an import."""
    edges: list[tuple[str, str, int, str]] = []
    for path in sorted(KVTUI.rglob("*.py")):
        module = ".".join(path.relative_to(KVTUI.parent).with_suffix("").parts)
        for target, line in _lazy_declarations(path)[0].items():
            lineno = path.read_text(encoding="utf-8").splitlines().index(f"    {line}") + 1
            edges.append((module, target, lineno, line))
    assert len(edges) == len(LAZY_MODULES)
    out = _lint_with(edges)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    # and an edge that breaks a layer is seen (the core importing a view)
    broken = _lint_with([*edges, ("kvtui.kvcalc.predict", "kvtui.ui.app", 1, "x = lazy_module('kvtui.ui.app')")])
    assert broken.returncode == 1
    assert "kvtui.kvcalc.predict -> kvtui.ui.app" in broken.stdout


def test_a_lazy_module_imports_on_first_use_and_reads_the_real_module_each_time() -> None:
    code = (
        "import sys\n"
        "from kvtui.lazy import lazy_module\n"
        "kvcalc = lazy_module('kvtui.kvcalc')\n"
        "print('kvtui.kvcalc' in sys.modules)\n"
        "margin = kvcalc.DEFAULT_GRAPH_MARGIN_GIB\n"
        "real = sys.modules['kvtui.kvcalc']\n"
        "print(margin == real.DEFAULT_GRAPH_MARGIN_GIB)\n"
        "real.DEFAULT_GRAPH_MARGIN_GIB = 99\n"  # as a test's monkeypatch does
        "print(kvcalc.DEFAULT_GRAPH_MARGIN_GIB)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "True", "99"]


def test_no_module_re_exports_through_a_module_level_getattr() -> None:
    assert [str(p.relative_to(KVTUI)) for p in sorted(KVTUI.rglob("*.py"))
            if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
                   for n in ast.parse(p.read_text(encoding="utf-8")).body)] == []


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


MAX_MODULE_LINES = 1000  # issue 23: a module holds one idea; past this it holds several


def test_no_module_is_over_a_thousand_lines() -> None:
    """Split a module that grows past MAX_MODULE_LINES by idea (as hosts/shellcmd/ is), not by size."""
    long = {str(p.relative_to(KVTUI.parent)): n for p in sorted(KVTUI.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}
