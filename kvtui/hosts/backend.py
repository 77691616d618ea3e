"""The ``HostBackend`` protocol: what every host (SSH, local, demo) offers the monitor and service.

CONTRACT shared by ``ssh.py``, ``local.py``, ``demo.py``, ``monitor.py`` and ``service.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from kvtui.engines.events import LogRecord
from kvtui.gpu import GpuProcess, GpuSample


class ConnState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    HOSTKEY_REFUSED = "host key refused"
    AUTH_FAILED = "authentication failed"
    FAILED = "failed"  # a configuration or other non-retryable error
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ConnStatus:
    state: ConnState
    detail: str = ""
    retry_in: float | None = None  # seconds until the next attempt, while reconnecting
    fingerprint: str | None = None  # the offered host key's fingerprint when refused
    strict_host_key: bool = True


class LogStart(StrEnum):
    CURRENT_BOOT = "current"  # scan back (bounded) to the current boot's start, then follow
    NEXT_BOOT = "next"  # only lines after now (wait --next)


@dataclass(frozen=True, slots=True)
class CommandResult:
    command: str
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class BackendError(Exception):
    """A host could not be reached or a command could not run; ``str()`` is user-facing."""


@runtime_checkable
class HostBackend(Protocol):
    """One host. Streams survive reconnects internally: ``follow_log`` never yields a line twice
    and never skips one (journald cursors / file byte offsets), ``gpu_stream`` keeps the last good
    sample (marked ``stale``) when the host is slow."""

    name: str

    def status(self) -> ConnStatus: ...

    async def start(self) -> None:
        """Connect (the first attempt); later drops are retried in the background."""

    async def close(self) -> None:
        """Stop every stream; no remote follower may outlive this."""

    def follow_log(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None
    ) -> AsyncIterator[list[LogRecord]]:
        """Batches of records, oldest first, forever (until close)."""
        ...

    def gpu_stream(self, interval_s: float = 1.0) -> AsyncIterator[list[GpuSample]]:
        """One list per sampling tick: the server's GPUs (config ``gpus``), in index order."""
        ...

    async def gpu_processes(self) -> list[GpuProcess]: ...

    async def server_pids(self) -> set[int]:
        """PIDs of the server (unit cgroup / MainPID and children / pidfile); empty if unknown."""
        ...

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        """Run one shell command (built by ``kvtui.hosts.commands``) on the host."""
        ...


async def aclose_iter(it: AsyncIterator[object]) -> None:
    """Close an async generator if it is one (helper for cleanup paths)."""
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()
