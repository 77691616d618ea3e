"""``kvtui watch HOST|DEPLOYMENT [--json] [--interval S] [--count N] [--timeout S]``: a serving
server's KV pressure, one line per sample (issue 24).

While the host's current boot is ready, every ``--interval`` seconds (default 5) the server's
``/metrics`` is read through the host (``kvtui.hosts.metrics``: the probe's port forward, the local
port, the demo's simulated server, a kube pod's proxy) into a ``ServingWindow``
(``kvtui.serving``); when it cannot be read (SGLang without ``--enable-metrics``, a host that
cannot reach the port) the log's serving lines stand in — SGLang's ``Decode batch`` lines and
retraction warnings, vLLM's periodic stats — as the monitor parses them (``ServingReader``). Each
sample says its source; a change of source is said on stderr (with the reason metrics failed) and
starts the window over (the two count from different origins).

A line: ``14:52:03 metrics  KV 87.0% (peak 96.0%)  running 45 / waiting 3  retractions 2.4/min
TTFT p95 0.41 s`` and, when a limit bites, the diagnosis (``kvtui.serving.diagnose``). ``--json``:
one object per line (``sample_json``; README "kvtui watch").

A ``[deployments.NAME]``: while the merged boot is ready, the ``/metrics`` of the node that serves
HTTP (node 0, the head), else the log's serving lines of the nodes (``DeploymentServingReader``);
``--json`` adds ``"deployment"``, ``host`` is the node the sample came from. ``kvtui wait NAME
--serving`` reads a first sample through the same reader (``kvtui.serving_live.first_reading``).

The boot's serving figures over the whole watched time (peak KV usage and tokens held,
preemptions / retractions and requests, TTFT and queue-time histograms) are written into its
history document every 30 s and at the end (``kvtui.history.serving``; off with ``[history]
record = false``), for ``kvtui history --diff`` and ``tune --goal tokens=observed``.

Exit codes (``kvtui.exits``, as ``kvtui wait``): 0 after ``--count`` samples; 1 the boot failed
(a stopped server is waited for: a restart goes on being watched); 2 usage; 3 connection or
configuration; 5 no sample for ``--timeout`` seconds (waiting for the boot to be ready included);
130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from kvtui.boot import BootStatus
from kvtui.config import ConfigError, HistoryConfig, load_config
from kvtui.engines.events import Engine
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE
from kvtui.history.serving import ServingRecorder
from kvtui.history.store import Limits
from kvtui.hosts.backend import BackendError, ConnState, LogStart
from kvtui.hosts.factory import make_backend
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode, DeploymentSink
from kvtui.serving.diagnose import Limit
from kvtui.serving.sample import Source
from kvtui.serving_live import DeploymentServingReader, LiveServing, Reading, ServingReader
from kvtui.spool import SpoolError
from kvtui.updates import ConnUpdate, MonitorUpdate

if TYPE_CHECKING:
    from kvtui.config import Config

MIN_INTERVAL_S = 0.1  # a scrape costs the server a little: no faster than this
_FATAL = frozenset({ConnState.FAILED, ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED})


METRICS_WAIT_S = 5.0  # the least time /metrics is given before the log's serving lines stand in

def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def _num(v: int | None) -> str:
    return "—" if v is None else str(v)


def human_line(r: Reading, now: float, host: str = "HOST") -> str:
    """``14:52:03 metrics  KV 87.0% (peak 96.0%)  running 45 / waiting 3  retractions 2.4/min  TTFT p95 0.41 s``."""
    f = r.window.figures()
    s = r.sample
    vllm = s.engine is Engine.VLLM
    what, rate = ("preemptions", f.preemptions_per_min) if vllm else ("retractions", f.retractions_per_min)
    parts = [datetime.fromtimestamp(now).strftime("%H:%M:%S"), f"{s.source:<7}",
             f"KV {_pct(f.kv_usage)} (peak {_pct(f.peak_kv_usage)})",
             f"running {_num(f.running)} / waiting {_num(f.waiting)}",
             f"{what} " + ("—" if rate is None else f"{rate:.1f}/min"),
             "TTFT p95 " + ("—" if f.ttft_p95 is None else f"{f.ttft_p95:.2f} s")]
    line = "  ".join(parts)
    if r.diagnosis.limit is not Limit.NONE:
        line += f"  ! {r.diagnosis.line(r.suggestion.answer(host) if r.suggestion is not None else None)}"
    return line


def sample_json(r: Reading, host: str, now: float, metrics_error: str | None,
                target: str | None = None) -> dict[str, object]:
    """The ``--json`` object (README "kvtui watch"); ``target``: what the suggestion's ``apply``
    names (a deployment's name; default ``host``)."""
    s = r.sample
    return {
        "host": host,
        "time": datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
        "source": s.source,
        "engine": s.engine.value,
        "dialect": s.dialect,
        **r.window.figures().to_json(),
        "pool_tokens": s.cache.pool_tokens if s.cache is not None else None,
        "diagnosis": {**r.diagnosis.to_json(),
                      "suggest": r.suggestion.to_json(target or host) if r.suggestion is not None else None},
        "metrics_error": metrics_error,
    }


def _positive(name: str, v: float | None, stderr: TextIO) -> bool:
    if v is not None and not v > 0:
        print(f"kvtui watch: {name} must be a positive number, got {v:g}", file=stderr)
        return False
    return True


async def watch(args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO,
                clock: Callable[[], float] | None = None) -> int:
    interval, timeout, count = float(args.interval), float(args.timeout), args.count
    if not (_positive("--interval", interval, stderr) and _positive("--timeout", timeout, stderr)
            and _positive("--count", count, stderr)):
        return EXIT_USAGE
    if interval < MIN_INTERVAL_S:
        print(f"kvtui watch: --interval must be at least {MIN_INTERVAL_S:g} s, got {interval:g}", file=stderr)
        return EXIT_USAGE
    try:
        config = load_config(getattr(args, "hosts", None))
        if config.deployment(args.host) is not None:
            return await _watch_deployment(args, config, stdout=stdout, stderr=stderr, clock=clock)
        host = config.host(args.host)
    except ConfigError as exc:
        print(f"kvtui watch: {exc}", file=stderr)
        return EXIT_INPUT
    now = clock or time.time
    try:
        backend = make_backend(args.host, host, clock=clock)
        monitor = HostMonitor(args.host, backend, host=host, options=_watch_options(now))
    except (BackendError, SpoolError) as exc:
        print(f"kvtui watch: {args.host}: {exc}", file=stderr)
        return EXIT_INPUT
    reader = ServingReader(monitor, now)
    recorder = _recorder(args.host, config.history)
    fatal: list[str] = []

    def sink(updates: Sequence[MonitorUpdate]) -> None:
        for u in updates:
            if isinstance(u, ConnUpdate) and u.status.state in _FATAL:
                fatal.append(f"{u.status.state.value}: {u.status.detail}".rstrip(": "))

    loop = asyncio.get_running_loop()
    task = asyncio.create_task(monitor.run(sink))
    print(f"kvtui watch: {args.host} ({host.source_label or host.kind}): waiting for a ready server", file=stderr,
          flush=True)
    try:
        return await _loop(args.host, reader, [(args.host, task)], fatal, interval=interval, timeout=timeout,
                           count=count, emit=_printer(args.host, reader, bool(args.json), stdout, None), stderr=stderr,
                           now=now, loop=loop, recorder=recorder)
    finally:
        if recorder is not None:
            await _close_recorder(args.host, recorder, stderr)
        with contextlib.suppress(TimeoutError, Exception):
            async with asyncio.timeout(1.5):
                await monitor.close()
        task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 1.5)


Emit = Callable[[Reading, float], None]


def _printer(name: str, reader: LiveServing, json_out: bool, stdout: TextIO, deployment: str | None) -> Emit:
    """A sample → one line on ``stdout`` (``--json``: ``sample_json``, plus ``"deployment"``)."""

    def emit(r: Reading, t: float) -> None:
        if json_out:
            doc = sample_json(r, _sample_host(name, reader), t, reader.metrics_error, name)
            if deployment is not None:
                doc["deployment"] = deployment
            stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
        else:
            stdout.write(human_line(r, t, name) + "\n")
        stdout.flush()

    return emit


def _watch_options(now: Callable[[], float]) -> MonitorOptions:
    """A watching monitor: from the current boot, GPUs read seldom, a short log window, one try."""
    return MonitorOptions(start=LogStart.CURRENT_BOOT, gpu_interval=30.0, log_window=200, clock=now,
                          retry_start=False)


def _sample_host(name: str, reader: LiveServing) -> str:
    """The host a sample came from: for a deployment the node's (the head's /metrics, or the node
    whose log stood in)."""
    return reader.node or name if isinstance(reader, DeploymentServingReader) else name


async def _watch_deployment(args: argparse.Namespace, config: Config, *, stdout: TextIO, stderr: TextIO,
                            clock: Callable[[], float] | None) -> int:
    """``kvtui watch NAME`` of a ``[deployments.NAME]``: the head node's /metrics, else the nodes'
    log lines (``DeploymentServingReader``), while the merged boot is ready."""
    interval, timeout = float(args.interval), float(args.timeout)
    name: str = args.host
    now = clock or time.time
    opened = _open_deployment(name, config, clock, stderr, "kvtui watch")
    if opened is None:
        return EXIT_INPUT
    dm, reader = opened
    head = dm.nodes[0].name
    recorder = _recorder(head, config.history)
    fatal: list[str] = []
    print(f"kvtui watch: {name} ({len(dm.nodes)} nodes: {', '.join(n.name for n in dm.nodes)}): waiting for a "
          f"ready server (metrics from the node that serves HTTP)", file=stderr, flush=True)
    tasks = dm.start(_deployment_sink(fatal))
    try:
        return await _loop(name, reader, [(n.name, t) for n, t in zip(dm.nodes, tasks, strict=True)], fatal,
                           interval=interval, timeout=timeout, count=args.count,
                           emit=_printer(name, reader, bool(args.json), stdout, name), stderr=stderr, now=now,
                           loop=asyncio.get_running_loop(), recorder=recorder)
    finally:
        if recorder is not None:
            await _close_recorder(head, recorder, stderr)
        await dm.close()


def _open_deployment(name: str, config: Config, clock: Callable[[], float] | None, stderr: TextIO,
                     prog: str) -> tuple[DeploymentMonitor, DeploymentServingReader] | None:
    """The deployment's node monitors (each from its current boot, GPUs read seldom) and a serving
    reader attached to them (before they run: the log fallback sees each boot's lines)."""
    now = clock or time.time
    nodes: list[DeploymentNode] = []
    try:
        for node_name, host in config.node_hosts(name):
            backend = make_backend(node_name, host, clock=clock)
            monitor = HostMonitor(node_name, backend, host=host, options=_watch_options(now))
            nodes.append(DeploymentNode(node_name, host, monitor))
    except (BackendError, SpoolError, ConfigError) as exc:
        print(f"{prog}: {name}: {exc}", file=stderr)
        return None
    dm = DeploymentMonitor(name, nodes)
    return dm, DeploymentServingReader(dm, now)


def _deployment_sink(fatal: list[str]) -> DeploymentSink:
    def sink(node: DeploymentNode, updates: Sequence[MonitorUpdate], _dep: object) -> None:
        for u in updates:
            if isinstance(u, ConnUpdate) and u.status.state in _FATAL:
                fatal.append(f"{node.name}: {u.status.state.value}: {u.status.detail}".rstrip(": "))

    return sink


def _recorder(host: str, config: HistoryConfig) -> ServingRecorder | None:
    """The boot's serving figures go to the history (``kvtui.history.serving``) unless
    ``[history] record = false``."""
    if not config.record:
        return None
    return ServingRecorder(host, limits=Limits(config.max_age_days, config.max_boots_per_host))


async def _close_recorder(name: str, recorder: ServingRecorder, stderr: TextIO) -> None:
    problem = await recorder.close()
    if problem:
        print(f"kvtui watch: {name}: the serving figures were not recorded: {problem}", file=stderr)
    elif recorder.boot_id is not None:
        print(f"kvtui watch: {name}: serving figures recorded in the history (boot #{recorder.boot_id}; "
              f"kvtui history {name} --diff)", file=stderr)


async def _loop(name: str, reader: LiveServing, tasks: Sequence[tuple[str, asyncio.Task[None]]],
                fatal: list[str], *, interval: float, timeout: float, count: int | None, emit: Emit,
                stderr: TextIO, now: Callable[[], float], loop: asyncio.AbstractEventLoop,
                recorder: ServingRecorder | None = None, prog: str = "kvtui watch",
                say_source: bool = True) -> int:
    printed = 0
    last = loop.time()  # the last sample (or the start)
    said_source: tuple[Source | None, str | None] = (None, None)
    while count is None or printed < count:
        if fatal:
            print(f"{prog}: {name}: {fatal[-1]}", file=stderr)
            return EXIT_INPUT
        ended = next(((n, t) for n, t in tasks if t.done()), None)
        if ended is not None:
            node, task = ended
            exc = None if task.cancelled() else task.exception()
            print(f"{prog}: {node}: cannot follow the host: {exc or 'the monitor ended'}", file=stderr)
            return EXIT_INPUT
        boot = reader.current()
        pause = min(interval, 0.5)
        if boot is not None and boot.status is BootStatus.FAILED:
            why = f": {boot.failure.kind.value}: {boot.failure.message}" if boot.failure is not None else ""
            print(f"{prog}: {name}: the server's boot failed{why}", file=stderr)
            return EXIT_FAILED
        if boot is not None and boot.status is BootStatus.READY:
            # a busy server answers /metrics late (the real vLLM under a burst: > 1 s on CI): wait up
            # to METRICS_WAIT_S before its log stands in, whatever the interval
            sample = await reader.read_current(timeout=max(METRICS_WAIT_S, min(10.0, interval * 2)))
            source = (reader.source, reader.metrics_error)
            if sample is not None and source != said_source and say_source:
                where = _sample_host(name, reader)
                of = f" of {where}" if where != name else ""
                if reader.source == "log":
                    print(f"{prog}: {name}: {reader.metrics_error}; reading the log's serving lines{of} instead",
                          file=stderr, flush=True)
                else:
                    print(f"{prog}: {name}: reading the server's /metrics{of}", file=stderr, flush=True)
                said_source = source
            if sample is not None:
                r = reader.reading(sample, boot)
                if recorder is not None:
                    _, recorded = reader.recorded_boot()
                    if recorded is not None:
                        recorder.observe(recorded, reader.window)
                emit(r, now())
                printed += 1
                last = loop.time()
                if count is not None and printed >= count:
                    break
            pause = interval
        if loop.time() - last > timeout:
            why = reader.metrics_error or "the server is not ready"
            print(f"{prog}: {name}: timed out: no sample for {timeout:g} s ({why})", file=stderr)
            return EXIT_TIMEOUT
        await asyncio.sleep(pause)
    return EXIT_OK


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None,
        clock: Callable[[], float] | None = None) -> int:
    return asyncio.run(watch(args, stdout=stdout or sys.stdout, stderr=stderr or sys.stderr, clock=clock))
