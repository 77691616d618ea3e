"""Hermetic test environment: no user config, state or hosts file leaks into a test."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _hermetic_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("KVTUI_HOSTS", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
