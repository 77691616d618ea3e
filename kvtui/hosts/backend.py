"""The ``HostBackend`` protocol: what every host (SSH, local, demo) offers the monitor and service.

CONTRACT shared by ``ssh.py``, ``local.py``, ``demo.py``, ``monitor.py`` and ``service/``: the
monitor reads the streams; the service speaks only to ``service_ops()`` (a ``HostOps``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from kvtui.engines.events import LogRecord
from kvtui.gpu import GpuProcess, GpuSample

if TYPE_CHECKING:
    from kvtui.hosts.service.model import HostOps


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
    recorded: bool = False  # a recording (an incident bundle): nothing new will come, nothing can change


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


@dataclass(slots=True, eq=False)
class RecordBlock:
    """Consecutive records of one log stream, in columns: the bulk form of ``list[LogRecord]``
    (``follow_log_blocks``). Record ``i`` is ``LogRecord(texts[i], ts[i], cursors[i], source,
    pids[i], idents[i])``, a missing column meaning None for every record. The monitor reads a
    block without building a ``LogRecord`` per line (most lines only go to the spool)."""

    texts: list[str]
    cursors: list[str | None]
    source: str = "raw"
    ts: list[datetime | None] | None = None
    idents: list[str | None] | None = None
    pids: list[int | None] | None = None
    _records: list[LogRecord] | None = None  # the records this block was made from, if any

    @classmethod
    def of(cls, records: list[LogRecord]) -> RecordBlock:
        """A block of existing records (kept: ``record(i)`` returns them)."""
        ts = [r.ts for r in records]
        idents = [r.ident for r in records]
        pids = [r.pid for r in records]
        return cls(
            [r.text for r in records], [r.cursor for r in records], records[0].source if records else "raw",
            ts if any(t is not None for t in ts) else None,
            idents if any(i is not None for i in idents) else None,
            pids if any(p is not None for p in pids) else None,
            records,
        )

    def __len__(self) -> int:
        return len(self.texts)

    def record(self, i: int) -> LogRecord:
        if self._records is not None:
            return self._records[i]
        return LogRecord(
            self.texts[i], self.ts[i] if self.ts is not None else None, self.cursors[i], self.source,
            self.pids[i] if self.pids is not None else None, self.idents[i] if self.idents is not None else None,
        )

    def records(self) -> list[LogRecord]:
        if self._records is not None:
            return self._records
        return [self.record(i) for i in range(len(self.texts))]

    def last_cursor(self) -> str | None:
        """The cursor of the newest record that has one."""
        for c in reversed(self.cursors):
            if c:
                return c
        return None


@runtime_checkable
class BlockLogSource(Protocol):
    """Optional: a backend that can deliver its log as ``RecordBlock``s (same records, same order
    and resume semantics as ``follow_log``). The monitor prefers it when a backend offers it."""

    def follow_log_blocks(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None, *,
        began: float | None = None,
    ) -> AsyncIterator[RecordBlock]: ...


@runtime_checkable
class PositionedLogSource(Protocol):
    """Optional: a backend whose ``NEXT_BOOT`` stream says when it is *positioned* — it calls
    ``positioned()`` once it knows where "now" is in the log (a journald cursor, a file's size, the
    host's clock), so that every line written from then on is delivered however late its
    follower process starts. A restart issued after that cannot lose the new boot's first lines
    (``kvtui.hosts.service.follow.BootFollower`` waits for it; a backend without it gets the old
    fixed settle time)."""

    def follow_next_boot(self, positioned: Callable[[], None]) -> AsyncIterator[list[LogRecord]]: ...


@dataclass(frozen=True, slots=True)
class LogMatch:
    """One line a search of a ``LogGap`` found on the host (``SearchableLog.search_log``):
    ``record`` the line (its cursor where the source has one: a file's byte offset after it, a
    journald cursor); ``context`` lines before and after it (``context_before`` /
    ``context_after``), oldest first; ``line_no`` its 1-based line number in the gap when known."""

    record: LogRecord
    context_before: tuple[LogRecord, ...] = ()
    context_after: tuple[LogRecord, ...] = ()
    line_no: int | None = None


@runtime_checkable
class SearchableLog(Protocol):
    """Optional: a backend that can search the lines its follower skipped (a ``LogGap`` of a
    server up for days) on the host itself — ``grep`` over a file's byte range, ``journalctl
    --grep`` between two cursors — bringing back only the matches and their context."""

    async def search_log(
        self, pattern: str, where: str, *, regex: bool = False, ignore_case: bool = True, context: int = 0,
        limit: int = 100, newest: bool = False,
    ) -> list[LogMatch]:
        """Lines of the gap ``where`` (``LogGap.where``, parsed by
        ``kvtui.engines.source_records.gap_range``) that contain ``pattern`` (a fixed string, or an
        extended regular expression with ``regex``), oldest first: the first ``limit`` of them, or
        the last ``limit`` with ``newest``. Raises ``BackendError`` (user-facing text) when the
        host cannot search (the range is gone, a tool is missing)."""
        ...


@runtime_checkable
class HostNotes(Protocol):
    """Optional: a backend whose followers say things about the log beside its lines ("no server
    start in the last N bytes of FILE", "FILE was rotated …"). The monitor takes them (clears the
    list) into ``HostMonitor.notes``: the console's connection status and ``wait``'s stderr."""

    notes: list[str]


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
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None, *,
        began: float | None = None,
    ) -> AsyncIterator[list[LogRecord]]:
        """Batches of records, oldest first, forever (until close).

        ``began`` (``NEXT_BOOT``): the caller's ``time.monotonic()`` when it began following —
        taken before it connected (``kvtui wait --next``). A server process younger than
        ``now - began + FRESH_SLACK_S`` started after that: it is the next boot's, not the old
        server, however long the connection and the follower took to come up. None: when this
        stream's follower starts."""
        ...

    def gpu_stream(self, interval_s: float = 1.0) -> AsyncIterator[list[GpuSample]]:
        """One list per sampling tick: the server's GPUs (config ``gpus``), in index order."""
        ...

    async def gpu_processes(self) -> list[GpuProcess]: ...

    async def server_pids(self) -> set[int]:
        """PIDs of the server (unit cgroup / MainPID and children / pidfile); empty if unknown."""
        ...

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        """Run one shell command (built by ``kvtui.hosts.shellcmd``) on the host."""
        ...

    def service_ops(self) -> HostOps:
        """How the guarded service (``kvtui.hosts.service``) finds, reads, backs up and writes the
        server's flags here, and restarts the server: the one thing the service speaks to."""
        ...


async def aclose_iter(it: AsyncIterator[object]) -> None:
    """Close an async generator if it is one (helper for cleanup paths)."""
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()
