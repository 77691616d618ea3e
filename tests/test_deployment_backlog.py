"""The deployment wait decides only once every node's backlog is read (issue 23, flake23): a
loaded machine read node 1's stop over sshd before node 0's first lines, and the wait named
node 0 "not started" while node 0 was waiting at NCCL init
(tests/test_deployment_sshd.py::test_a_node_whose_unit_was_stopped_fails_the_wait_with_its_name
under CI). Here the same two logs come from in-process backends whose timing the test controls:
node 0's lines come only after node 1's stop was read and the wait had time to decide."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from nodes_gen import at, sglang_node

from kvtui.boot import BootStatus
from kvtui.commands.wait import Outcome, Waiter, follow
from kvtui.config import parse_config
from kvtui.engines.events import LogRecord
from kvtui.exits import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.hosts.backend import BackendError, CommandResult, ConnState, ConnStatus, LogStart
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode
from kvtui.ui.deployment import notes

HOSTS = """
[hosts.a]
ssh = "a.example"
unit = "sglang.service"
engine = "sglang"

[hosts.b]
ssh = "b.example"
unit = "sglang.service"
engine = "sglang"

[deployments.r1]
nodes = ["a", "b"]
"""


class _Node:
    """A host whose log is ``records``, delivered once ``gate`` is set (None: at once), then
    followed until close; its unit cannot be probed."""

    def __init__(self, name: str, records: list[LogRecord], gate: asyncio.Event | None = None) -> None:
        self.name = name
        self.records = records
        self.gate = gate
        self.closed = asyncio.Event()
        self.state = ConnState.CONNECTING

    def status(self) -> ConnStatus:
        return ConnStatus(self.state)

    async def start(self) -> None:
        self.state = ConnState.CONNECTED

    async def close(self) -> None:
        self.state = ConnState.CLOSED
        self.closed.set()

    async def follow_log(self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None, *,
                         began: float | None = None) -> AsyncIterator[list[LogRecord]]:
        if self.gate is not None:
            await self.gate.wait()
        if self.records:
            yield self.records
        await self.closed.wait()

    async def gpu_stream(self, interval_s: float = 1.0) -> AsyncIterator[list[GpuSample]]:
        await self.closed.wait()
        for _ in ():
            yield []

    async def gpu_processes(self) -> list[GpuProcess]:
        return []

    async def server_pids(self) -> set[int]:
        return set()

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        raise BackendError("no unit probe here")


def _records(text: str) -> list[LogRecord]:
    return [LogRecord(text=line, cursor=str(i), source="journal") for i, line in enumerate(text.splitlines())]


def _systemd(text: str) -> LogRecord:
    return LogRecord(text=text, ts=datetime.now().astimezone(), source="journal", ident="systemd")


def _dm(tmp_path: Path, backends: list[_Node]) -> DeploymentMonitor:
    cfg = parse_config(HOSTS, tmp_path / "hosts.toml")
    nodes = []
    for (name, host), backend in zip(cfg.node_hosts("r1"), backends, strict=True):
        mon = HostMonitor(name, backend, host=host,  # type: ignore[arg-type]
                          options=MonitorOptions(start=LogStart.CURRENT_BOOT, gpu_interval=5.0, log_window=1000,
                                                 retry_start=False, state_dir=tmp_path / "state"))
        nodes.append(DeploymentNode(name, host, mon))
    return DeploymentMonitor("r1", nodes, bound_s=180)


async def _node1_stopped(dm: DeploymentMonitor, limit: float = 30.0) -> None:
    """Until node 1's stop was read (polled: the monitor says no event for it)."""
    for _ in range(int(limit / 0.02)):
        boot = dm.current(dm.nodes[1])
        if boot is not None and boot.status is BootStatus.STOPPED:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"node 1's stop not read within {limit:g} s")


async def _ready(result: Outcome) -> Outcome:
    return result


def _node0_held(tmp_path: Path) -> tuple[_Node, DeploymentMonitor]:
    """Node 0 (``a``) stalls before its rendezvous and its log is held back (``gate``); node 1
    (``b``) stalls too, then its unit stops: without node 0's lines, node 0 would look "not started"."""
    start = datetime.now() - timedelta(seconds=30)
    a = _Node("a", [_systemd("Started sglang.service - SGLang."),
                    *_records(at(start, lambda: sglang_node(0, stall_node0=True)))], gate=asyncio.Event())
    b = _Node("b", [_systemd("Started sglang.service - SGLang."),
                    *_records(at(start, lambda: sglang_node(1, stall=True))),
                    _systemd("Stopping sglang.service - SGLang..."), _systemd("Stopped sglang.service - SGLang.")])
    return a, _dm(tmp_path, [a, b])


async def _release(a: _Node, dm: DeploymentMonitor) -> None:
    """Node 0's lines come; return once every node's backlog is read (30 s at most)."""
    assert a.gate is not None
    a.gate.set()
    for _ in range(int(30 / 0.05)):
        if not dm.backlog_pending():
            break
        await asyncio.sleep(0.05)


async def test_the_wait_names_no_node_before_every_nodes_backlog_is_read(tmp_path: Path) -> None:
    a, dm = _node0_held(tmp_path)
    err = io.StringIO()
    loop = asyncio.get_running_loop()
    waiter = Waiter(dm, err, next_boot=False, follow_restarts=False, t0=loop.time(), clock=loop.time)

    async def late_node0() -> None:
        # node 0's lines come after node 1's stop was read and the wait had a second to decide on it
        await _node1_stopped(dm)
        assert waiter.done is not None
        await asyncio.wait({waiter.done}, timeout=1.0)
        assert a.gate is not None
        a.gate.set()

    releasing = asyncio.create_task(late_node0())
    result = await follow(waiter, dm, 60, None, _ready)
    await releasing
    assert result.code == EXIT_FAILED, err.getvalue()
    assert result.message.startswith("r1: hung: node 1 (b) stopped at launch; node 0 (a) waiting"), result.message
    assert "at NCCL init (distributed init)" in result.message
    assert "not started" not in result.message


async def test_a_node_whose_log_never_comes_is_said_at_the_timeout(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 0's log never comes: the wait holds its decision, and its timeout says whose backlog
    was still being read."""
    start = datetime.now() - timedelta(seconds=30)
    a = _Node("a", [], gate=asyncio.Event())
    b = _Node("b", [_systemd("Started sglang.service - SGLang."),
                    *_records(at(start, lambda: sglang_node(1, stall=True))),
                    _systemd("Stopped sglang.service - SGLang.")])
    dm = _dm(tmp_path, [a, b])
    err = io.StringIO()
    loop = asyncio.get_running_loop()
    waiter = Waiter(dm, err, next_boot=False, follow_restarts=False, t0=loop.time(), clock=loop.time)
    expired = asyncio.Event()

    async def timer(_: float) -> None:
        await expired.wait()

    async def expire() -> None:
        await _node1_stopped(dm)
        assert waiter.done is not None
        await asyncio.wait({waiter.done}, timeout=1.0)
        expired.set()

    expiring = asyncio.create_task(expire())
    result = await follow(waiter, dm, 60, timer, _ready)
    await expiring
    assert result.code == EXIT_TIMEOUT, result.message
    assert "a: its backlog still being read" in result.message


async def test_the_deployment_console_names_no_hang_before_every_nodes_backlog_is_read(tmp_path: Path) -> None:
    """The console's deployment strip holds its hang diagnosis by the same rule as the wait: while
    node 0's lines have not come, it says it is reading them instead of naming node 0 "not
    started"; once they came, the diagnosis names the real state."""
    a, dm = _node0_held(tmp_path)
    tasks = dm.start(lambda node, updates, dep: None)
    try:
        await _node1_stopped(dm)
        later = datetime.now().astimezone() + timedelta(hours=1)  # far past the hang bound
        held = notes(dm, None, later).plain
        assert "reading the log so far of node 0 · a" in held, held
        assert "hang:" not in held, held
        assert "not started" not in held, held
        await _release(a, dm)
        said = notes(dm, None, later).plain
        assert "reading the log so far" not in said, said
        assert "hang:" in said, said
        assert "not started" not in said, said
    finally:
        await dm.close()
        for t in tasks:
            t.cancel()


async def test_hang_is_none_while_a_nodes_backlog_is_unread(tmp_path: Path) -> None:
    """The backlog rule lives in ``DeploymentMonitor.hang`` itself (no caller can forget it): while
    node 0's lines have not come, no hang is diagnosed however late it is; once they came, it is."""
    a, dm = _node0_held(tmp_path)
    tasks = dm.start(lambda node, updates, dep: None)
    try:
        await _node1_stopped(dm)
        later = datetime.now().astimezone() + timedelta(hours=1)  # far past the hang bound
        assert "a" in [n.name for n in dm.backlog_pending()]
        assert dm.hang(now=later) is None
        assert dm.hang(now=later, bound_s=0.0) is None
        await _release(a, dm)
        hang = dm.hang(now=later)
        assert hang is not None
        assert hang.summary.startswith("node 1 (b) stopped at launch"), hang.summary
    finally:
        await dm.close()
        for t in tasks:
            t.cancel()


class _Restarted(_Node):
    """A host whose log comes in two parts: ``records`` at once, ``then`` once ``gate`` is set."""

    def __init__(self, name: str, records: list[LogRecord], then: list[LogRecord], gate: asyncio.Event) -> None:
        super().__init__(name, records)
        self.then, self.later = then, gate

    async def follow_log(self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None, *,
                         began: float | None = None) -> AsyncIterator[list[LogRecord]]:
        yield self.records
        await self.later.wait()
        yield self.then
        await self.closed.wait()


def _unit(text: str, ts: datetime) -> LogRecord:
    return LogRecord(text=text, ts=ts.astimezone(), source="journal", ident="systemd")


@pytest.mark.parametrize("follow_restarts", [False, True])
async def test_follow_restarts_waits_through_a_deployments_failed_start(tmp_path: Path, follow_restarts: bool) -> None:
    """One decider: ``--follow-restarts`` works on a deployment as on a host. Node 1 fails its
    start (out of memory); without the flag the wait ends there (exit 1, node 1 named); with it the
    wait says the failure and waits for the next start, which is ready (main: exit 1 either way)."""
    t1 = datetime.now() - timedelta(minutes=30)
    t2 = t1 + timedelta(minutes=15)
    gate = asyncio.Event()
    oom = LogRecord(text="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", source="journal")
    a = _Restarted("a", [_unit("Started sglang.service - SGLang.", t1),
                         *_records(at(t1, lambda: sglang_node(0, stall_node0=True)))],
                   [_unit("Started sglang.service - SGLang.", t2), *_records(at(t2, lambda: sglang_node(0)))], gate)
    exited = t1 + timedelta(seconds=30)
    b = _Restarted("b", [_unit("Started sglang.service - SGLang.", t1),
                         *_records(at(t1, lambda: sglang_node(1, stall=True))), oom,
                         _unit("sglang.service: Main process exited, code=exited, status=1/FAILURE", exited),
                         _unit("sglang.service: Failed with result 'exit-code'.", exited)],
                   [_unit("Started sglang.service - SGLang.", t2), *_records(at(t2, lambda: sglang_node(1)))], gate)
    dm = _dm(tmp_path, [a, b])
    err = io.StringIO()
    loop = asyncio.get_running_loop()
    waiter = Waiter(dm, err, next_boot=False, follow_restarts=follow_restarts, t0=loop.time(), clock=loop.time)

    async def restart() -> None:
        for _ in range(int(60 / 0.05)):
            if "failed on node 1 (b)" in err.getvalue() or (waiter.done is not None and waiter.done.done()):
                break
            await asyncio.sleep(0.05)
        gate.set()

    restarting = asyncio.create_task(restart())
    result = await follow(waiter, dm, 120, None, _ready)
    await restarting
    said = err.getvalue()
    if not follow_restarts:
        assert result.code == EXIT_FAILED, said
        assert result.message.startswith("r1: failed on node 1 (b)"), result.message
        assert "CUDA out of memory" in result.message, result.message
        return
    assert result.code == EXIT_OK, (result.message, said)
    assert "] failed on node 1 (b)" in said, said
    assert "waiting for an automatic restart (--follow-restarts)" in said, said
    assert "boot 2 of this wait started at " in said, said
    assert result.index == 1
