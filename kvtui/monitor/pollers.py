"""The monitor's pollers: the host's GPU readings (a stream, with each GPU's history) and the
server's PIDs (read every ``pids_interval``, and at once for a new boot), which together say
which processes on the server's GPUs are foreign."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kvtui.gpu import GpuProcess, GpuSample
from kvtui.hosts.backend import BackendError, HostBackend
from kvtui.monitor.connection import close_quietly
from kvtui.monitor.options import MonitorOptions
from kvtui.retry import Backoff, doubling
from kvtui.updates import GpuUpdate

if TYPE_CHECKING:
    from kvtui.history import BootRecorder

log = logging.getLogger("kvtui.monitor")


class GpuPollers:
    """The GPU stream and the PIDs poll of one monitor; readings go to ``publish``; ``retry_after``
    waits out a failed stream (False: give up); ``closed`` ends both loops."""

    def __init__(self, name: str, backend: HostBackend, options: MonitorOptions, *, history: BootRecorder | None,
                 publish: Callable[[GpuUpdate], None], retry_after: Callable[[Backoff], Awaitable[bool]],
                 closed: asyncio.Event) -> None:
        self.name = name
        self.backend = backend
        self.history = history
        self.clock = options.clock
        self.gpu_interval = options.gpu_interval
        self.pids_interval = options.pids_interval
        self.publish = publish
        self.retry_after = retry_after
        self.closed = closed
        self.latest_gpus: tuple[GpuSample, ...] = ()
        self.foreign: tuple[GpuProcess, ...] = ()
        self.server_pids: frozenset[int] = frozenset()
        self.pids_now = asyncio.Event()  # read the server's PIDs now (a new boot)
        self._procs: list[GpuProcess] = []
        self._hist: dict[int, deque[tuple[float, float]]] = {}
        self._hist_len = max(1, options.gpu_history)

    def history_of(self, index: int) -> Sequence[tuple[float, float]]:
        """(ts, used_mib) samples of GPU ``index``, oldest first, at most ``gpu_history``."""
        return tuple(self._hist.get(index, ()))

    async def gpu_loop(self) -> None:
        pace = doubling(1.0)
        while not self.closed.is_set():
            it: AsyncIterator[list[GpuSample]] | None = None
            try:
                it = self.backend.gpu_stream(self.gpu_interval)
                async for samples in it:
                    pace.reset()
                    self.on_gpu(samples)
            except BackendError as exc:
                if self.closed.is_set():
                    return
                log.info("%s: GPU stream: %s", self.name, exc)
                if self.latest_gpus and not all(s.stale for s in self.latest_gpus):
                    self.on_gpu([replace(s, stale=True) for s in self.latest_gpus], record=False)
                if not await self.retry_after(pace):
                    return
                continue
            finally:
                await close_quietly(it)
            return  # the stream ended: no GPU data on this host (status says why), or closed

    def on_gpu(self, samples: Sequence[GpuSample], *, record: bool = True) -> None:
        self.latest_gpus = tuple(samples)
        if record and self.history is not None:
            self.history.gpus(samples)
        if record:
            now = self.clock()
            for s in samples:
                hist = self._hist.get(s.index)
                if hist is None:
                    hist = self._hist[s.index] = deque(maxlen=self._hist_len)
                hist.append((s.ts or now, s.used_mib))
        self.foreign = self._foreign()
        self.publish(GpuUpdate(self.latest_gpus, self.foreign))

    def _foreign(self) -> tuple[GpuProcess, ...]:
        pids = self.server_pids
        if not pids:
            return ()  # unknown server PIDs: nothing can be called foreign
        gpus = {s.index for s in self.latest_gpus}
        procs: list[GpuProcess] = [p for s in self.latest_gpus for p in s.processes]
        if not procs:
            procs = self._procs
        return tuple(p for p in procs if p.pid not in pids and (p.gpu_index is None or p.gpu_index in gpus))

    async def pids_loop(self) -> None:
        while not self.closed.is_set():
            try:
                pids = await self.backend.server_pids()
                procs: list[GpuProcess] = []
                if not any(s.processes for s in self.latest_gpus):
                    procs = await self.backend.gpu_processes()
            except BackendError as exc:
                log.info("%s: server PIDs / GPU processes: %s", self.name, exc)
            else:
                self.server_pids = frozenset(pids)
                self._procs = procs
                foreign = self._foreign()
                if foreign != self.foreign and self.latest_gpus:
                    self.foreign = foreign
                    self.publish(GpuUpdate(self.latest_gpus, foreign))
            self.pids_now.clear()
            try:
                async with asyncio.timeout(self.pids_interval):
                    await self.pids_now.wait()
            except TimeoutError:
                pass


__all__ = ["GpuPollers"]
