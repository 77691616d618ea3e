"""Serving samples of a live host (issue 24): ``ServingReader`` reads a ready server's ``/metrics``
through its host (``kvtui.hosts.metrics``) into a ``ServingWindow``, and falls back to the log's
serving lines (the monitor's parsed lines, ``HostMonitor.on_parsed``, into a ``LogFold``) when the
metrics cannot be read; ``Reading`` is a sample with its window and diagnosis. Used by ``kvtui
watch``, ``kvtui wait --serving`` (and the console's serving panel): beside the monitor, below the
views and commands.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from kvtui.boot import Boot
from kvtui.engines.events import Engine, ParsedLine
from kvtui.hosts.metrics import MetricsUnavailable, metrics_url, read_metrics
from kvtui.hosts.probe import boot_port
from kvtui.knobs import pool_env
from kvtui.monitor import HostMonitor
from kvtui.serving.diagnose import Device, Diagnosis, Limit, diagnose
from kvtui.serving.logs import LogFold
from kvtui.serving.prom import MetricsError, parse_metrics
from kvtui.serving.sample import CacheInfo, ServingSample, Source
from kvtui.serving.suggest import PoolSuggestion, size_pool
from kvtui.serving.window import ServingWindow

if TYPE_CHECKING:
    from kvtui.monitor.deployment import DeploymentMonitor

MAX_PENDING_LOG_SAMPLES = 2048  # log samples kept between two reads (a busy server's 5 min of lines)


def running_cap(flags: Mapping[str, object]) -> int | None:
    """The boot's cap on running requests (SGLang ``max_running_requests``, vLLM ``max_num_seqs``)."""
    for key in ("max_running_requests", "max_num_seqs"):
        try:
            v = int(str(flags.get(key)))
        except (TypeError, ValueError):
            continue
        if v > 0:
            return v
    return None


def device_of(flags: Mapping[str, object]) -> Device:
    return "cpu" if str(flags.get("device", "")).lower() == "cpu" else "gpu"


class LiveServing(Protocol):
    """What ``kvtui watch`` reads: a host's ``ServingReader`` or a ``DeploymentServingReader``."""

    window: ServingWindow
    source: Source | None
    metrics_error: str | None

    def current(self) -> Boot | None: ...

    async def read_current(self, *, timeout: float = 10.0) -> ServingSample | None: ...

    def reading(self, sample: ServingSample, boot: Boot | None) -> Reading: ...

    def recorded_boot(self) -> tuple[str, Boot | None]: ...


@dataclass(frozen=True, slots=True)
class Reading:
    """One sample read, the window after it, the diagnosis of the window, and the edit that answers
    a full pool given in bytes (``kvtui.serving.suggest``; None otherwise)."""

    sample: ServingSample
    window: ServingWindow
    diagnosis: Diagnosis
    suggestion: PoolSuggestion | None = None


class ServingReader:
    """Samples of one host's serving server: its ``/metrics`` when they can be read, else the
    log's serving lines (the monitor's parsed lines through ``HostMonitor.on_parsed`` into a
    ``LogFold``). Attach it before the monitor runs: the fold sees the boot's lines from its start."""

    def __init__(self, monitor: HostMonitor, clock: Callable[[], float] = time.time) -> None:
        self.monitor = monitor
        self.clock = clock
        self.window = ServingWindow()
        self.source: Source | None = None
        self.metrics_error: str | None = None
        self._fold: LogFold | None = None
        self._boots = 0
        self._pending: deque[ServingSample] = deque(maxlen=MAX_PENDING_LOG_SAMPLES)
        monitor.on_parsed = self._parsed

    def _engine(self) -> Engine:
        boots = self.monitor.tracker.boots
        if boots and boots[-1].engine is not Engine.UNKNOWN:
            return boots[-1].engine
        return self.monitor.reader.engine or Engine.UNKNOWN

    def _parsed(self, line: ParsedLine) -> None:
        boots = len(self.monitor.tracker.boots)
        if boots != self._boots:  # a new boot: its counts start again
            self._boots, self._fold = boots, None
            self._pending.clear()
        if not line.events:
            return
        if self._fold is None:
            engine = self._engine()
            if engine is Engine.UNKNOWN:
                return
            self._fold = LogFold(engine)
        s = self._fold.feed(line.events, line.ts.timestamp() if line.ts is not None else self.clock())
        if s is not None:
            self._pending.append(s)

    def _use(self, source: Source) -> None:
        if source != self.source:
            self.window.clear()  # metrics count since the server started, the log since kvtui read it
            self.source = source

    def current(self) -> Boot | None:
        """The host's current boot (the one ``read`` samples while it is ready)."""
        boots = self.monitor.tracker.boots
        return boots[-1] if boots else None

    async def scrape(self, port: int | None, *, timeout: float = 10.0) -> ServingSample | None:
        """One ``/metrics`` sample of the server on ``port`` (not added to ``window``); None when
        it cannot be read (``metrics_error`` says why)."""
        sample: ServingSample | None = None
        if port is None:
            self.metrics_error = "the boot's arguments name no port: its /metrics cannot be found"
        else:
            try:
                text = await read_metrics(self.monitor.backend, port, timeout=timeout)
                sample = parse_metrics(text, self.clock())
                if sample is None:
                    self.metrics_error = f"{metrics_url(port)}: no sglang:* or vllm:* metric"
            except MetricsUnavailable as exc:
                self.metrics_error = str(exc)
            except MetricsError as exc:
                self.metrics_error = f"{metrics_url(port)}: {exc}"
        if sample is not None:
            self.metrics_error = None
        return sample

    def take_log(self) -> list[ServingSample]:
        """The log's serving samples since the last take (at most ``MAX_PENDING_LOG_SAMPLES``), with
        the pool's size from the boot's own lines (``max_total_num_tokens``, vLLM's KV cache size):
        the serving lines print the usage, not the pool."""
        new = list(self._pending)
        self._pending.clear()
        boot = self.current()
        pool = boot.metrics.max_total_num_tokens if boot is not None else None
        if pool:
            new = [s if s.cache is not None else replace(s, cache=CacheInfo(kv_cache_size_tokens=pool)) for s in new]
        return new

    async def read(self, port: int | None, *, timeout: float = 10.0) -> ServingSample | None:
        """The next sample (added to ``window``): ``/metrics`` first, the log's new serving lines
        when that fails (``metrics_error`` says why); None when neither has anything new."""
        sample = await self.scrape(port, timeout=timeout)
        if sample is not None:
            self._use("metrics")
            self.window.add(sample)
            return sample
        if not self._pending:
            return None
        self._use("log")
        new = self.take_log()
        self.window.extend(new)
        return new[-1]

    async def read_current(self, *, timeout: float = 10.0) -> ServingSample | None:
        """``read`` for the current boot's port (``kvtui watch``)."""
        boot = self.current()
        return await self.read(boot_port_of(boot) if boot is not None else None, timeout=timeout)

    def reading(self, sample: ServingSample, boot: Boot | None) -> Reading:
        return reading_of(self.window, sample, boot)

    def recorded_boot(self) -> tuple[str, Boot | None]:
        """The host and boot whose history record gets the serving figures."""
        return self.monitor.name, self.current()


def reading_of(window: ServingWindow, sample: ServingSample, boot: Boot | None) -> Reading:
    """``sample`` with ``window`` and the window's diagnosis under the boot's flags."""
    flags = boot.flags if boot is not None else {}
    given = [k.replace("_", "-") for k, v in flags.items() if v is not None and str(v) not in ("", "None")]
    diag = diagnose(window, running_cap=running_cap(flags), device=device_of(flags), flags=given)
    suggestion = None
    if diag.limit is Limit.POOL and boot is not None:
        suggestion = size_pool(diag, sample.cache, flags, pool_env(boot.engine, flags, boot.facts))
    return Reading(sample, window, diag, suggestion)


def boot_port_of(boot: Boot) -> int | None:
    return boot_port(boot.flags)


async def first_reading(
    reader: DeploymentServingReader, boot: Boot, *, timeout: float, every: float = 1.0
) -> Reading | None:
    """``kvtui wait --serving`` (a host: a deployment of one node): the first sample of a ready
    start (node 0's ``/metrics`` on ``boot``'s port, else a node's log), read every ``every``
    seconds until ``timeout``; None when none came."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left = deadline - loop.time()
        sample = await reader.read(boot_port_of(boot), timeout=max(0.5, min(10.0, left)))
        if sample is not None:
            return reader.reading(sample, boot)
        if deadline - loop.time() <= every:
            return None
        await asyncio.sleep(every)


class DeploymentServingReader:
    """Serving samples of a ``[deployments.NAME]`` (``kvtui watch NAME``) and of every ``kvtui wait
    --serving`` (a host is a deployment of one node: its samples are its ``ServingReader``'s): the
    ``/metrics`` of the node that serves HTTP (the head, node rank 0: vLLM and SGLang multi-node
    serve and export metrics there), else the log's serving lines of the nodes — the head's when it
    prints them, else the first node whose log does (SGLang's ``Decode batch`` lines come from the
    scheduler of attention-TP rank 0). Samples of one node's log only: two nodes' counters do not
    add up into one window. One ``ServingReader`` per node, attached to its monitor before the
    deployment monitor runs."""

    def __init__(self, dm: DeploymentMonitor, clock: Callable[[], float] = time.time) -> None:
        self.dm = dm
        self.clock = clock
        self.readers = {n.name: ServingReader(n.monitor, clock) for n in dm.nodes}
        self.window = ServingWindow()
        self.source: Source | None = None
        self.metrics_error: str | None = None
        self.node: str | None = None  # the node the last sample came from
        self._log_node: str | None = None  # the node whose log lines stand in (kept once chosen)

    def current(self) -> Boot | None:
        """The deployment's merged boot (ready when the head is ready and the others caught up)."""
        if not any(n.monitor.tracker.boots for n in self.dm.nodes):
            return None
        return self.dm.merged().boot

    def head(self) -> tuple[str, Boot | None]:
        """The node that serves HTTP and its boot."""
        dep = self.dm.dep if self.dm.dep is not None else self.dm.merged()
        return dep.head.name, dep.head.boot

    def _use(self, source: Source) -> None:
        if source != self.source:
            self.window.clear()
            self.source = source

    async def read_current(self, *, timeout: float = 10.0) -> ServingSample | None:
        """``read`` for the head's boot's port (``kvtui watch NAME``)."""
        boot = self.head()[1]
        return await self.read(boot_port_of(boot) if boot is not None else None, timeout=timeout)

    async def read(self, port: int | None, *, timeout: float = 10.0) -> ServingSample | None:
        """The next sample (added to ``window``): the head's ``/metrics`` on ``port``, else one
        node's new log samples (``metrics_error`` says why); None when neither has anything new.
        One node: what its ``ServingReader.read`` gives."""
        name = self.head()[0]
        head = self.readers[name]
        sample = await head.scrape(port, timeout=timeout)
        self.metrics_error = head.metrics_error
        if sample is not None:
            self._use("metrics")
            self.node = name
            self.window.add(sample)
            return sample
        order = [self._log_node] if self._log_node is not None else [name, *(n for n in self.readers if n != name)]
        for node in order:
            new = self.readers[node].take_log()
            if new:
                self._use("log")
                self._log_node = self.node = node
                self.window.extend(new)
                return new[-1]
        return None

    def reading(self, sample: ServingSample, boot: Boot | None) -> Reading:
        return reading_of(self.window, sample, boot)

    def recorded_boot(self) -> tuple[str, Boot | None]:
        """The head's host and boot: the deployment's serving figures go into its history record."""
        return self.head()
