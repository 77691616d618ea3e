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



# ---- the order the two workers take the modules in ----------------------------------------------
# `--dist loadfile --no-loadscope-reorder` hands the modules out in collection order: longest first
# keeps a long module from starting last (the run then waits on it alone). The order: the engine
# suite (minutes of real boots) first, then the modules by their time in the last run on this
# checkout (pytest's cache), then by number of tests; a module's own tests keep their order.

DURATIONS_KEY = "kvtui/module-seconds"


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cache = getattr(config, "cache", None)
    seconds: dict[str, float] = (cache.get(DURATIONS_KEY, {}) if cache is not None else {}) or {}
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(_module(item.nodeid), []).append(item)

    def weight(group: list[pytest.Item]) -> tuple[bool, float, int]:
        engine = any(item.get_closest_marker("engine") for item in group)
        return (not engine, -float(seconds.get(_module(group[0].nodeid), 0.0)), -len(group))

    items[:] = [item for group in sorted(by_module.values(), key=weight) for item in group]


_RUN_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _RUN_SECONDS[_module(report.nodeid)] = _RUN_SECONDS.get(_module(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    cache = getattr(session.config, "cache", None)
    if cache is None or hasattr(session.config, "workerinput") or not _RUN_SECONDS:
        return  # a worker: the controller has every report too
    seconds = cache.get(DURATIONS_KEY, {}) or {}
    seconds.update({module: round(t, 2) for module, t in _RUN_SECONDS.items()})
    cache.set(DURATIONS_KEY, seconds)
