"""The pure core must not pull in textual or asyncssh (DESIGN: layers)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CORE = ["kvtui.engines.events", "kvtui.boot", "kvtui.gpu", "kvtui.fmt", "kvtui.engines.sglang", "kvtui.engines.vllm",
        "kvtui.engines.shapes", "kvtui.kvcalc", "kvtui.config", "kvtui.flags", "kvtui.engines.parse", "kvtui.nodes",
        "kvtui.bootlog", "kvtui.config_checks"]
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
