"""The monitor as a package (issue 23, item 2): ``MonitorOptions`` (typed, checked), the package's
layout (one idea per module, each well under 400 lines, plain re-exports), ingest through
``BootLog`` only, and a host's monitor against a one-node deployment's on the same log (item 1)."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import kvtui.monitor
from kvtui.boot import BootStatus
from kvtui.boot.deployment import DeploymentBoot
from kvtui.bootlog import read_log
from kvtui.config import HostConfig
from kvtui.hosts.backend import LogStart
from kvtui.hosts.local import LocalBackend
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode
from kvtui.updates import BootState, LogBatch, MonitorUpdate, expand

PACKAGE = Path(kvtui.monitor.__file__).parent
FIXTURES = Path(__file__).parent / "fixtures"


# -- MonitorOptions ----------------------------------------------------------------------------


def test_options_default_to_the_consoles_values_and_are_frozen() -> None:
    opts = MonitorOptions()
    assert (opts.log_window, opts.gpu_history, opts.flush_interval, opts.gpu_interval, opts.pids_interval,
            opts.serving_interval) == (5000, 3600, 0.05, 1.0, 10.0, 0.25)
    assert (opts.start, opts.live_prefilter, opts.retry_start, opts.resume) == (LogStart.CURRENT_BOOT, True, True,
                                                                               False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.log_window = 10  # type: ignore[misc]
    assert dataclasses.replace(opts, log_window=10).log_window == 10
    assert MonitorOptions(flush_interval=0.01).flush_every == 0.05  # below 50 ms counts as 50 ms


@pytest.mark.parametrize(("field", "value", "says"), [
    ("log_window", 0, "MonitorOptions.log_window must be a whole number of lines/samples >= 1, not 0"),
    ("log_window", 2.5, "MonitorOptions.log_window must be a whole number"),
    ("gpu_history", -1, "MonitorOptions.gpu_history must be a whole number"),
    ("flush_interval", 0, "MonitorOptions.flush_interval must be a finite number of seconds > 0, not 0"),
    ("gpu_interval", -1.0, "MonitorOptions.gpu_interval must be a finite number of seconds > 0, not -1.0"),
    ("pids_interval", float("inf"), "MonitorOptions.pids_interval must be a finite number of seconds > 0"),
    ("serving_interval", -0.1, "MonitorOptions.serving_interval must be a finite number of seconds >= 0"),
    ("gpu_interval", float("nan"), "MonitorOptions.gpu_interval must be a finite number"),
    ("start", "current", "MonitorOptions.start must be a LogStart, not 'current'"),
])
def test_options_reject_a_bad_value_naming_the_field(field: str, value: object, says: str) -> None:
    with pytest.raises(ValueError, match="^" + says.replace(".", r"\.").replace("(", r"\(")):
        MonitorOptions(**{field: value})  # type: ignore[arg-type]


def test_options_are_keyword_only_and_serving_interval_may_be_zero() -> None:
    with pytest.raises(TypeError):
        MonitorOptions(5000)  # type: ignore[misc]
    assert MonitorOptions(serving_interval=0).serving_interval == 0


def test_the_console_and_the_node_monitors_take_options_not_a_mapping() -> None:
    """No ``Mapping[str, Any]`` of monitor keywords crosses a module boundary any more."""
    from kvtui.monitor.deployment import node_monitor
    from kvtui.ui.app import KvtuiApp, MainScreen
    from kvtui.ui.host_pane import HostPane

    for fn in (HostPane.__init__, MainScreen.__init__, KvtuiApp.__init__):
        assert inspect.signature(fn).parameters["monitor_options"].annotation == "MonitorOptions | None"
    params = inspect.signature(node_monitor).parameters
    assert params["options"].annotation == "MonitorOptions | None"
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    params = inspect.signature(HostMonitor.__init__).parameters
    assert set(params) == {"self", "name", "backend", "host", "history", "options"}


# -- the package's layout ----------------------------------------------------------------------


def _modules() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(PACKAGE.glob("*.py"))}


def test_the_monitor_is_a_package_of_small_modules_one_idea_each() -> None:
    modules = _modules()
    assert set(modules) >= {"__init__", "options", "host", "ingest", "window", "publisher", "pollers"}
    sizes = {name: text.count("\n") for name, text in modules.items()}
    assert max(sizes.values()) < 400, sizes
    assert not (PACKAGE.parent / "monitor.py").exists()


def test_the_package_re_exports_its_public_names_with_plain_imports() -> None:
    tree = ast.parse(_modules()["__init__"])
    # no module-level __getattr__ (a lazy re-export hides where a name comes from)
    assert not any(isinstance(n, ast.FunctionDef) for n in tree.body)
    for name in kvtui.monitor.__all__:
        assert hasattr(kvtui.monitor, name), name
    for name in ("HostMonitor", "MonitorOptions", "read_boots", "host_boots", "LogBatch", "BootState", "LogLine",
                 "STORM_BATCH", "SKIPPED_SLICE", "line_style", "engine_hint_for"):
        assert name in kvtui.monitor.__all__, name


def test_ingest_reads_records_through_bootlog_only() -> None:
    """The monitor feeds no parser or tracker of its own: ``BootLog`` is the one path (plan, parse,
    track; feed for a resumed spool)."""
    for name, text in _modules().items():
        for banned in (".parser.feed", ".tracker.feed", "LivePrefilter(", "LineParser(", "BootTracker("):
            assert banned not in text, f"kvtui/monitor/{name}.py: {banned}"


# -- a host is a deployment of one node ----------------------------------------------------------


async def _until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


def _monitor(tmp_path: Path, name: str, log: Path) -> tuple[HostConfig, HostMonitor]:
    host = HostConfig(local=True, log_file=str(log))
    backend = LocalBackend(name, host, poll_interval=0.02, systemctl=("false",))
    options = MonitorOptions(state_dir=tmp_path / "state", start=LogStart.CURRENT_BOOT, gpu_interval=30.0)
    return host, HostMonitor(name, backend, host=host, options=options)


def _content(updates: Sequence[MonitorUpdate]) -> tuple[list[tuple[int, str, str]], list[tuple[int, bool]]]:
    """The lines (seq, text, style) and the boot states (index, new) of a run's updates, whatever
    their batching."""
    lines = [(ln.seq, ln.text, ln.style) for u in updates if isinstance(u, LogBatch) for ln in expand(u.parts)]
    states = [(u.index, u.new_boot) for u in updates if isinstance(u, BootState)]
    return lines, states


@pytest.mark.parametrize("fixture", ["vllm/fail-0.11-kv-too-small.log", "vllm/vllm-0.33-qwen3-32b-tp4-ready.log"])
async def test_a_host_and_a_one_node_deployment_see_the_same_boots_and_updates(tmp_path: Path, fixture: str) -> None:
    log = tmp_path / "server.log"
    shutil.copy(FIXTURES / fixture, log)
    end = str(log.stat().st_size)  # a local file's cursor: the byte after the line
    _, alone = _monitor(tmp_path / "host", "box", log)
    host, node_mon = _monitor(tmp_path / "node", "box", log)
    dm = DeploymentMonitor("box", [DeploymentNode("box", host, node_mon)])
    got_host: list[MonitorUpdate] = []
    got_node: list[MonitorUpdate] = []
    merged: list[DeploymentBoot] = []

    def node_sink(_node: DeploymentNode, updates: Sequence[MonitorUpdate], dep: DeploymentBoot | None) -> None:
        got_node.extend(updates)
        if dep is not None:
            merged.append(dep)

    task = asyncio.create_task(alone.run(got_host.extend))
    dm.start(node_sink)
    try:
        for mon in (alone, node_mon):
            await _until(lambda m=mon: m.spool.last_cursor == end and bool(m.boots)  # type: ignore[misc]
                         and m.boots[-1].status is not BootStatus.STARTING and not m.pending)
    finally:
        await alone.close()
        await task
        await dm.close()
    assert [b.to_json() for b in node_mon.boots] == [b.to_json() for b in alone.boots]
    assert _content(got_node) == _content(got_host)
    assert _content(got_host)[0]  # the log was read
    # the merge of one node is the identity: the deployment's boot is the node's own
    assert merged[-1].boot is node_mon.boots[-1]
    assert merged[-1].boot.to_json() == alone.boots[-1].to_json()
    assert merged[-1].findings == []


def test_the_merge_of_one_node_is_its_boot() -> None:
    from kvtui.boot.deployment import merge_boots

    log = (FIXTURES / "vllm/fail-0.11-kv-too-small.log").read_text().splitlines(keepends=True)
    boots, _ = read_log([line.encode() for line in log])
    boot = boots[-1]
    before = boot.to_json()
    dep = merge_boots([("box", boot)])
    assert dep.boot is boot
    assert boot.to_json() == before  # nothing added (no "box: " warnings, no renamed ranks)
    assert [n.name for n in dep.nodes] == ["box"]
