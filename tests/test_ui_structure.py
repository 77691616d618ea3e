"""The console's package holds its shape (issue 23): features in their own packages, composition
instead of mixins, imports at module level except the documented start-up lazies."""

from __future__ import annotations

import ast
from pathlib import Path

import kvtui.ui
from kvtui.ui.changes.controller import ChangeController
from kvtui.ui.host_pane import HostPane
from kvtui.ui.serving.panel import ServingSampler

UI = Path(kvtui.ui.__file__).parent
# what may wait until the console's first frame (tests/test_ui_startup.py): kvcalc and what imports it
# (kvtui.changes, kvtui.tune), and plotext
LAZY = ("kvtui.kvcalc", "kvtui.changes", "kvtui.tune", "textual_plotext")


def _function_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found: dict[int, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    names = [f"{node.module}.{a.name}" for a in node.names]
                    found[node.lineno] = (node.module or "") if node.module != "kvtui" else names[0]
                elif isinstance(node, ast.Import):
                    found[node.lineno] = node.names[0].name
    return sorted(found.items())


def test_every_function_level_import_in_the_ui_is_a_documented_start_up_lazy() -> None:
    wrong = []
    for path in sorted(UI.rglob("*.py")):
        lines = path.read_text().splitlines()
        for lineno, module in _function_imports(path):
            if not module.startswith(LAZY) or "# lazy: " not in lines[lineno - 1]:
                wrong.append(f"{path.relative_to(UI)}:{lineno} {module}")
    assert wrong == []


def test_the_host_pane_composes_its_change_controller_and_serving_sampler_instead_of_mixing_them_in() -> None:
    assert HostPane.__bases__ == (kvtui.ui.host_pane.Vertical,)
    assert not issubclass(ChangeController, kvtui.ui.host_pane.Widget)
    assert not issubclass(ServingSampler, kvtui.ui.host_pane.Widget)
    assert not [p for p in UI.rglob("*.py") if "_Base = " in p.read_text()]


def test_the_ui_is_grouped_by_feature() -> None:
    for feature in ("log", "gpu", "calc", "history", "changes", "fleet", "serving"):
        assert (UI / feature / "__init__.py").is_file(), feature
    assert {p.name for p in (UI / "widgets").glob("*.py")} <= {
        "__init__.py", "banner.py", "boot.py", "host.py", "quiet.py", "table.py"}


def test_the_log_view_is_split_by_idea_into_modules_under_1000_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (UI / "log").glob("*.py")}
    assert {"view.py", "model.py", "search.py", "filtering.py", "panel.py", "window.py"} <= set(sizes)
    assert max(sizes.values()) < 1000, sizes
