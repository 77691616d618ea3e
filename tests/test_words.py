"""One name, one meaning (issue 23 item 6): DESIGN.md's "Words" names modules and types that exist,
and the names it retired stay retired."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KVTUI = ROOT / "kvtui"


def _words() -> str:
    text = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    m = re.search(r"^## Words\n(.*?)^## ", text, re.S | re.M)
    assert m, "DESIGN.md has no '## Words' section"
    return m.group(1)


def _names() -> list[str]:
    return re.findall(r"`([^`\s]+)`", _words())


def test_words_define_each_word_once() -> None:
    words = re.findall(r"^- \*\*([a-z-]+)\*\*:", _words(), re.M)
    for word in ("command", "edit", "node", "deployment", "change", "update", "knob", "what-if"):
        assert words.count(word) == 1, (word, words)


def test_words_name_modules_that_exist() -> None:
    paths = [n for n in _names() if n.endswith((".py", "/"))]
    assert len(paths) >= 10, paths
    for p in paths:
        assert (KVTUI / p).exists(), f"DESIGN.md's Words names kvtui/{p}, which does not exist"


def test_words_name_types_that_exist() -> None:
    """``pkg.Name`` in the Words (``kvcalc.WhatIf``, ``flags.Edit``, …) is importable as kvtui.pkg.Name."""
    dotted = [n for n in _names() if re.fullmatch(r"[a-z_]+\.[A-Za-z_]+", n) and not n.endswith(".py")]
    assert "kvcalc.WhatIf" in dotted, dotted
    assert "flags.Edit" in dotted, dotted
    for name in dotted:
        module, attr = name.split(".")
        assert hasattr(importlib.import_module(f"kvtui.{module}"), attr), f"kvtui.{name} does not exist"


def _classes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in KVTUI.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("retired", ["Edits", "Change", "EnvChange", "BootUpdate"])
def test_retired_class_names_stay_retired(retired: str) -> None:
    """``Edits`` (the calculator's values: ``WhatIf``), ``Change`` (a file's edited line:
    ``EditedLine``; a change is ``kvtui.changes``'), ``BootUpdate`` (``BootDelta``; an update is what
    the monitor publishes)."""
    assert retired not in _classes()


def test_no_module_says_nodes_for_a_deployment() -> None:
    """A module for N ≥ 1 nodes is named ``deployment`` (never ``nodes`` / ``*_nodes`` /
    ``deployment_*`` beside its package)."""
    modules = sorted(str(p.relative_to(ROOT)) for p in KVTUI.rglob("*.py"))
    bad = [m for m in modules if re.search(r"(^|/|_)nodes\.py$", m) or m == "kvtui/deployment_monitor.py"]
    assert bad == []
    for m in ("kvtui/boot/deployment.py", "kvtui/monitor/deployment.py",
              "kvtui/commands/bootview_deployment.py", "kvtui/kvcalc/whatif.py"):
        assert (ROOT / m) in {ROOT / x for x in modules}, m
