"""One-shot: the boots of a host as its log shows them now (``kvtui calc --host``, the service
layer's prediction), through ``BootLog``; no spool, no view."""

from __future__ import annotations

import asyncio
import contextlib

from kvtui.boot import Boot, BootStatus
from kvtui.bootlog import BootLog
from kvtui.config import load_config
from kvtui.engines.events import Engine
from kvtui.hosts.backend import BackendError, HostBackend, LogStart, aclose_iter
from kvtui.hosts.factory import make_backend
from kvtui.monitor.options import MonitorHost, engine_hint_for


async def read_boots(
    backend: HostBackend,
    *,
    timeout: float,
    host: MonitorHost | None = None,
    idle: float = 0.5,
    start_backend: bool = True,
    engine: Engine | None = None,
    first: float | None = None,
) -> list[Boot]:
    """Follow the host's current boot until it is over (ready, failed or stopped: a serving
    server never goes quiet), until the stream goes quiet for ``idle`` seconds (a stalled or
    stopped server), or ``timeout``; return the tracker's boots. Writes no spool. Starts the backend unless
    told not to; never closes it. Raises ``BackendError`` when the host cannot be reached.

    The one reader of "the host's boots now" (``kvtui calc --host``, the service layer's
    prediction): ``engine`` overrides the host's declared engine (the service knows it from the
    flags file); ``first`` gives up on a log that yields nothing within that many seconds
    (default: ``timeout``); closing the log stream waits at most 5 seconds."""
    hint = engine if engine in (Engine.SGLANG, Engine.VLLM) else engine_hint_for(host)
    reader = BootLog(hint)
    if start_backend:
        async with asyncio.timeout(timeout):
            await backend.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    it = backend.follow_log(LogStart.CURRENT_BOOT)
    got_any = False
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                wait = min(idle, left) if got_any else (left if first is None else min(first, left))
                async with asyncio.timeout(wait):
                    batch = await anext(it)
            except TimeoutError:
                break  # caught up: the stream went quiet
            except StopAsyncIteration:
                break
            got_any = True
            reader.feed_all(batch)
            cur = reader.current
            if cur is not None and cur.status is not BootStatus.STARTING:
                break  # the current boot is over (ready, failed, stopped): its figures are in
    finally:
        # bounded: a follower slow to let go (a dropped SSH channel) is left to finish alone
        with contextlib.suppress(TimeoutError, BackendError):
            await asyncio.wait_for(aclose_iter(it), 5.0)
    return reader.boots


async def host_boots(
    name: str, hosts: str | None = None, *, timeout: float = 60.0, idle: float = 0.5
) -> list[Boot]:
    """The boots of a configured host as its log shows them now, for ``kvtui calc --host``:
    hosts.toml -> backend -> ``read_boots`` -> close. Raises ``kvtui.config.ConfigError`` (bad
    file, unknown host), ``BackendError`` (unreachable) or ``TimeoutError`` (nothing within
    ``timeout``); the last boot is the host's current one."""
    host = load_config(hosts).host(name)
    backend = make_backend(name, host)
    try:
        return await read_boots(backend, timeout=timeout, host=host, idle=idle)
    finally:
        with contextlib.suppress(Exception):
            await backend.close()


__all__ = ["host_boots", "read_boots"]
