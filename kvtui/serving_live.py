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
from dataclasses import dataclass

from kvtui.boot import Boot
from kvtui.engines.events import Engine, ParsedLine
from kvtui.monitor import HostMonitor
from kvtui.serving.diagnose import Device, Diagnosis, Limit, diagnose
from kvtui.serving.logs import LogFold
from kvtui.serving.sample import ServingSample, Source
from kvtui.serving.suggest import PoolSuggestion, size_pool
from kvtui.serving.window import ServingWindow

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

    async def read(self, port: int | None, *, timeout: float = 10.0) -> ServingSample | None:
        """The next sample (added to ``window``): ``/metrics`` first, the log's new serving lines
        when that fails (``metrics_error`` says why); None when neither has anything new."""
        from kvtui.hosts.metrics import MetricsUnavailable, metrics_url, read_metrics
        from kvtui.serving.prom import MetricsError, parse_metrics

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
            self._use("metrics")
            self.window.add(sample)
            return sample
        if not self._pending:
            return None
        self._use("log")
        new = list(self._pending)
        self._pending.clear()
        self.window.extend(new)
        return new[-1]

    def reading(self, sample: ServingSample, boot: Boot | None) -> Reading:
        flags = boot.flags if boot is not None else {}
        given = [k.replace("_", "-") for k, v in flags.items() if v is not None and str(v) not in ("", "None")]
        diag = diagnose(self.window, running_cap=running_cap(flags), device=device_of(flags), flags=given)
        suggestion = None
        if diag.limit is Limit.POOL and boot is not None:
            from kvtui.knobs import pool_env

            suggestion = size_pool(diag, sample.cache, flags, pool_env(boot.engine, flags, boot.facts))
        return Reading(sample, self.window, diag, suggestion)


def boot_port_of(boot: Boot) -> int | None:
    from kvtui.hosts.probe import boot_port

    return boot_port(boot.flags)


async def first_reading(
    reader: ServingReader, boot: Boot, *, timeout: float, every: float = 1.0
) -> Reading | None:
    """``kvtui wait --serving``: the first sample of a ready boot (``/metrics``, else the log), read
    every ``every`` seconds until ``timeout``; None when none came."""
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
