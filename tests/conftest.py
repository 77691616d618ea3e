"""Hermetic test environment: no user config, state or hosts file leaks into a test."""

from __future__ import annotations

import difflib
import gc
import html
import pickle
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

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


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fake kubectl first on PATH, over its own state under tmp_path (tests/kube_support.py)."""
    from kube_support import FakeKube

    k = FakeKube.create(tmp_path / "kube")
    monkeypatch.setenv("PATH", k.env()["PATH"])
    return k



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
    if hasattr(session.config, "workerinput"):
        _collect_before_finishing()  # the controller has every report too: it keeps the times
        return
    cache = getattr(session.config, "cache", None)
    if cache is None or not _RUN_SECONDS:
        return
    seconds = cache.get(DURATIONS_KEY, {}) or {}
    seconds.update({module: round(t, 2) for module, t in _RUN_SECONDS.items()})
    cache.set(DURATIONS_KEY, seconds)


# ---- a worker collects its garbage before it says it has finished ------------------------------
# Once a worker has sent "workerfinished" (after its pytest_sessionfinish), the controller ends it
# and execnet gives the worker's remaining work 5 s, then sends the worker a SIGINT
# (execnet/gateway_base.py, WorkerGateway._terminate_execution). That remaining work is pytest's
# unraisable-exception cleanup: five full gc.collect() passes over the worker's whole heap (~0.5 s
# of CPU each after a module of console tests; 1.7 s of wall time each at load 12). The SIGINT
# landed in hypothesis' gc callback and came out as a PytestUnraisableExceptionWarning
# (KeyboardInterrupt) in a CI log; traced with EXECNET_DEBUG=1: "execution ongoing after 5 secs
# ... sending ourselves a SIGINT" for both workers of a three-module run at load 9. So the worker
# collects here, before it reports (the controller waits for that without a limit; garbage whose
# finalizer fails is still reported by pytest's cleanup), then freezes what is left, so the five
# passes after it only walk what was made since.


def _collect_before_finishing(passes: int = 5) -> None:
    for _ in range(passes):
        if not gc.collect():
            break
    gc.freeze()


# ---- a failed snapshot says which cells changed, in the test's own report -------------------------
# CI keeps only its printed output (no snapshot_report.html): the rows of the expected and the
# actual screenshot that differ are added to the failure report as text.

_SVG_TEXT = re.compile(r'<text[^>]*?x="([\d.]+)"[^>]*?y="([\d.]+)"[^>]*>(.*?)</text>', re.S)


def svg_rows(svg: str) -> list[str]:
    """The screen's rows as text, from a Textual SVG screenshot."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for m in _SVG_TEXT.finditer(svg):
        rows.setdefault(float(m.group(2)), []).append((float(m.group(1)), html.unescape(m.group(3))))
    return ["".join(t for _x, t in sorted(cells)).replace("\xa0", " ").rstrip() for _y, cells in sorted(rows.items())]


def snapshot_text_diff(expected_svg: str, actual_svg: str) -> str:
    lines = difflib.unified_diff(svg_rows(expected_svg), svg_rows(actual_svg), "expected", "actual",
                                 lineterm="", n=1)
    return "\n".join(lines) or "(the rows' text is the same: the difference is in colours or styles)"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if call.when == "call" and report.failed and "snap_compare" in getattr(item, "fixturenames", ()):
        try:
            from pytest_textual_snapshot import node_to_report_path

            data = pickle.loads(node_to_report_path(item).read_bytes())
            passed, expected_svg, actual_svg = data[0], str(data[1]), str(data[2])
            if not passed:
                report.sections.append(("snapshot: rows that differ", snapshot_text_diff(expected_svg, actual_svg)))
        except Exception as exc:  # the report must never fail because of this
            report.sections.append(("snapshot: rows that differ", f"(not available: {exc!r})"))
    return report
