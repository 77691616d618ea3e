"""``SshBackend``: one asyncssh connection per host (keepalive, strict host keys, capped backoff with
jitter on reconnects), several channels on it: the log followers, the GPU sampler, and the service's
commands (``run``)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import asyncssh

from kvtui import gpu as gpu_mod
from kvtui.config import HostConfig
from kvtui.engines.events import LogRecord
from kvtui.engines.source_records import gap_range
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.hosts import shellcmd as C
from kvtui.hosts.backend import (
    BackendError,
    CommandResult,
    ConnState,
    ConnStatus,
    LogMatch,
    LogStart,
    RecordBlock,
)
from kvtui.hosts.dockerlog import fixed_stamp, parse_docker_search
from kvtui.hosts.journal import search_command, search_matches
from kvtui.hosts.metrics import metrics_via_port
from kvtui.hosts.service.shell import ShellOps
from kvtui.hosts.ssh.followers import (
    MAX_BATCH_RECORDS,
    MAX_QUEUED_BATCHES,
    READ_CHUNK,
    SCAN_WINDOW_BYTES,
    _Closed,
    _decode,
    _DockerFollower,
    _FileFollower,
    _Follower,
    _JournalFollower,
    _merge,
)
from kvtui.retry import Backoff

if TYPE_CHECKING:
    from kvtui.hosts.service.model import HostOps

_DEFAULT: Any = object()


# The ciphers offered, in order, unless ~/.ssh/config says otherwise: AES-GCM first (with the CPU's
# AES instructions it costs asyncssh about 60 % of chacha20-poly1305's CPU per byte, measured here:
# ~3 vs ~5 ms per MB), then asyncssh's defaults (chacha20-poly1305, AES-CTR) for servers without it.
PREFERRED_CIPHERS: Final = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"


_DEFAULT_CIPHERS: Final = tuple(asyncssh.encryption.get_default_encryption_algs())


class _Fatal(Exception):
    """A connection failure that retrying will not fix."""

    def __init__(self, status: ConnStatus) -> None:
        super().__init__(status.detail)
        self.status = status


@dataclass(eq=False)
class _Stream:
    queue: asyncio.Queue[Any]  # log streams: RecordBlock | None; GPU streams: list[GpuSample] | None
    task: asyncio.Task[None] | None = None


class SshBackend:
    """One remote host over SSH (see the module docstring)."""

    lists_processes = True  # ``run(ps …)`` lists the host's processes (``kvtui.hosts.orphans``)

    def __init__(
        self,
        name: str,
        host: HostConfig,
        *,
        known_hosts: Any = _DEFAULT,
        ssh_config: Sequence[str] | None = None,
        clock: Callable[[], float] = time.time,
        connect_timeout: float = 15.0,
        keepalive_interval: float = 15.0,
        keepalive_count_max: int = 3,
        backoff: Backoff | None = None,
        scan_window: int = SCAN_WINDOW_BYTES,
        stale_after: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        if host.kind != "ssh" or not host.ssh:
            raise BackendError(f"{name}: not an ssh host (kind {host.kind})")
        self.name = name
        self.host = host
        self._known_hosts = known_hosts
        self._ssh_config = ssh_config
        self._clock = clock
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self.keepalive_count_max = keepalive_count_max
        self.backoff = backoff or Backoff()
        self.scan_window = scan_window
        self.stale_after = stale_after
        self._extra = dict(options or {})
        self._status = ConnStatus(ConnState.CONNECTING, self.host.target, strict_host_key=host.strict_host_key)
        self._listeners: list[Callable[[ConnStatus], None]] = []
        self._conn: asyncssh.SSHClientConnection | None = None
        self._forwards: set[asyncssh.SSHListener] = set()
        self._generation = 0
        self._changed = asyncio.Event()
        self._supervisor: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self._closed = False
        self._streams: set[_Stream] = set()
        self._procs: set[asyncssh.SSHClientProcess[bytes]] = set()
        self._offered_key: asyncssh.SSHKey | None = None
        self._ciphers_default: bool | None = None
        self._gpu_uuid_index: dict[str, int] = {}
        # the --query-gpu fields asked for: the legacy ones once this nvidia-smi rejected a newer one
        self._gpu_fields = gpu_mod.QUERY_GPU_FIELDS
        self.reconnects = 0
        self.login_user: str | None = None
        self.notes: list[str] = []

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> ConnStatus:
        return self._status

    def add_status_listener(self, callback: Callable[[ConnStatus], None]) -> None:
        """``callback(status)`` on every change (called on the event loop)."""
        self._listeners.append(callback)

    def _set_status(self, state: ConnState, detail: str = "", *, retry_in: float | None = None,
                    fingerprint: str | None = None) -> None:
        st = ConnStatus(state, detail, retry_in, fingerprint, self.host.strict_host_key)
        if st == self._status:
            return
        self._status = st
        for cb in list(self._listeners):
            with contextlib.suppress(Exception):
                cb(st)

    def _note(self, text: str) -> None:
        if text and (not self.notes or self.notes[-1] != text):
            self.notes.append(text)
            del self.notes[:-20]

    # -- connection ------------------------------------------------------------------------------

    def _connect_kwargs(self) -> dict[str, Any]:
        h = self.host
        kw: dict[str, Any] = {
            "connect_timeout": self.connect_timeout,
            "login_timeout": self.connect_timeout,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": self.keepalive_count_max,
        }
        if self._ssh_config is not None:
            kw["config"] = list(self._ssh_config)
        if h.port:
            kw["port"] = h.port
        if h.ssh_user:
            kw["username"] = h.ssh_user
        if h.identity_path:
            kw["client_keys"] = [str(h.identity_path)]
        if not h.strict_host_key:
            kw["known_hosts"] = None  # explicit in hosts.toml and shown in the UI
        elif self._known_hosts is not _DEFAULT:
            kw["known_hosts"] = self._known_hosts
        elif h.known_hosts_path:
            kw["known_hosts"] = str(h.known_hosts_path)
        if "encryption_algs" not in self._extra and self._default_ciphers():
            kw["encryption_algs"] = PREFERRED_CIPHERS
        kw.update(self._extra)
        return kw

    def _default_ciphers(self) -> bool:
        """True when nothing (``~/.ssh/config``'s ``Ciphers``) chose the ciphers for this host:
        then kvtui offers AES-GCM first (see ``PREFERRED_CIPHERS``). Cached per backend."""
        if self._ciphers_default is None:
            kw: dict[str, Any] = {}
            if self._ssh_config is not None:
                kw["config"] = list(self._ssh_config)
            try:
                opts = asyncssh.SSHClientConnectionOptions(host=self.host.ssh_host or "", **kw)
                self._ciphers_default = list(opts.encryption_algs) == list(_DEFAULT_CIPHERS)
            except Exception:  # a broken config is reported by the connection attempt itself
                self._ciphers_default = False
        return self._ciphers_default

    def _known_hosts_file(self) -> Path:
        if isinstance(self._known_hosts, str | Path):
            return Path(self._known_hosts)
        return self.host.known_hosts_path or Path.home() / ".ssh" / "known_hosts"

    async def _connect(self) -> asyncssh.SSHClientConnection:
        host = self.host.ssh_host or ""
        try:
            conn = await asyncssh.connect(host, **self._connect_kwargs())
        except asyncssh.HostKeyNotVerifiable as exc:
            raise _Fatal(await self._hostkey_status(exc)) from exc
        except asyncssh.PermissionDenied as exc:
            raise _Fatal(ConnStatus(
                ConnState.AUTH_FAILED,
                f"{self.host.target}: authentication failed ({exc.reason}); check the user, identity_file "
                "or the agent (ssh-add -l), then retry",
                strict_host_key=self.host.strict_host_key)) from exc
        except (asyncssh.KeyImportError, asyncssh.ConfigParseError, FileNotFoundError, PermissionError,
                ValueError) as exc:
            raise _Fatal(ConnStatus(ConnState.FAILED, f"{self.host.target}: {exc}",
                                    strict_host_key=self.host.strict_host_key)) from exc
        self.login_user = conn.get_extra_info("username")
        return conn

    def _resolved(self) -> tuple[str, int]:
        """The real host name and port after ``~/.ssh/config`` (``HostName``, ``Port``): what
        known_hosts entries are matched against."""
        alias = self.host.ssh_host or ""
        kw: dict[str, Any] = {}
        if self._ssh_config is not None:
            kw["config"] = list(self._ssh_config)
        if self.host.port:
            kw["port"] = self.host.port
        try:
            opts = asyncssh.SSHClientConnectionOptions(host=alias, **kw)
            return str(opts.host or alias), int(opts.port or 22)
        except Exception:  # a broken config is reported by the connection attempt itself
            return alias, self.host.port or 22

    async def _hostkey_status(self, exc: Exception) -> ConnStatus:
        host, port = self._resolved()
        fingerprint: str | None = None
        keytype = "host"
        try:
            kw: dict[str, Any] = {}
            if self._ssh_config is not None:
                kw["config"] = list(self._ssh_config)
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(self.host.ssh_host or host, self.host.port or (), **kw),
                timeout=self.connect_timeout)
            if key is not None:
                self._offered_key = key
                fingerprint = key.get_fingerprint("sha256")
                keytype = key.get_algorithm()
        except (OSError, asyncssh.Error, TimeoutError):
            pass
        kh = self._known_hosts_file()
        changed = False
        try:
            if kh.exists() and self._offered_key is not None:
                known = asyncssh.read_known_hosts(str(kh)).match(host, host, port)[0]
                changed = bool(known) and all(
                    k.public_data != self._offered_key.public_data for k in known)
        except (OSError, ValueError, asyncssh.Error):
            pass
        spec = host if port == 22 else f"[{host}]:{port}"
        fp = fingerprint or "(could not read it)"
        if changed:
            detail = (f"host key for {spec} CHANGED: {kh} has a different key. Offered {keytype} key {fp}. "
                      f"This may be an attack, or the host was reinstalled. If you know why, remove the old "
                      f"entry (ssh-keygen -R '{spec}' -f {kh}) and connect again to trust the new key.")
        else:
            detail = (f"host key for {spec} is not known ({kh}). Offered {keytype} key {fp}. "
                      f"Compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub); "
                      f"to trust it, accept it in kvtui or run: ssh-keyscan -p {port} {host} >> {kh}")
        del exc
        return ConnStatus(ConnState.HOSTKEY_REFUSED, detail, None, fingerprint, self.host.strict_host_key)

    async def trust_host_key(self) -> Path:
        """Append the refused host's offered key to its known_hosts file and connect again. Only
        for an *unknown* key: a changed key must be removed by the operator first."""
        st = self._status
        if st.state is not ConnState.HOSTKEY_REFUSED or self._offered_key is None:
            raise BackendError(f"{self.name}: no refused host key to trust")
        if "CHANGED" in st.detail:
            raise BackendError(f"{self.name}: the host key changed; remove the old entry first ({st.detail})")
        host, port = self._resolved()
        spec = host if port == 22 else f"[{host}]:{port}"
        kh = self._known_hosts_file()
        kh.parent.mkdir(parents=True, exist_ok=True)
        line = f"{spec} {self._offered_key.export_public_key().decode().strip()}\n"
        with kh.open("a") as f:
            f.write(line)
        await self.retry()
        return kh

    async def start(self) -> None:
        """The first connection attempt. Raises ``BackendError`` when it fails: ``status()`` then
        says ``RECONNECTING`` for a network failure (``start()`` may be called again; a stream
        started without it connects by itself, with backoff) or the fatal state (host key,
        authentication, configuration) that only the operator can fix. After a success, drops
        are retried in the background."""
        async with self._start_lock:
            await self._start_locked()

    async def _start_locked(self) -> None:
        if self._is_closed():
            raise BackendError(f"{self.name}: closed")
        if self._supervisor is not None:
            return
        self._set_status(ConnState.CONNECTING, self.host.target)
        try:
            conn = await self._connect()
        except _Fatal as exc:
            self._set_status(exc.status.state, exc.status.detail, fingerprint=exc.status.fingerprint)
            self._wake()
            raise BackendError(exc.status.detail) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            detail = _describe(exc)
            self._set_status(ConnState.RECONNECTING, detail)
            self._wake()
            raise BackendError(f"{self.host.target}: unreachable: {detail}") from None
        self._up(conn)
        self._supervisor = asyncio.create_task(self._supervise(conn))

    async def retry(self) -> None:
        """Try again now (after a refused host key was trusted, credentials fixed, …)."""
        if self._supervisor is not None and not self._supervisor.done():
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        self._supervisor = None
        self.backoff.reset()
        await self.start()

    def _up(self, conn: asyncssh.SSHClientConnection) -> None:
        self._conn = conn
        self._generation += 1
        if self._generation > 1:
            self.reconnects += 1
        self.backoff.reset()
        who = self.login_user or self.host.ssh_user or ""
        peer = conn.get_extra_info("peername")
        port = peer[1] if isinstance(peer, tuple) and len(peer) >= 2 else (self.host.port or 22)
        detail = f"{who}@{self.host.ssh_host}:{port}" if who else f"{self.host.ssh_host}:{port}"
        if who == "root":
            detail += " (as root)"
        self._set_status(ConnState.CONNECTED, detail)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _supervise(self, conn: asyncssh.SSHClientConnection | None) -> None:
        error: BaseException | None = None
        try:
            while not self._is_closed():
                if conn is None:
                    delay = self.backoff.next()
                    if error is not None or delay > 0:
                        self._set_status(ConnState.RECONNECTING, _describe(error), retry_in=delay)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    try:
                        conn = await self._connect()
                    except _Fatal as exc:
                        self._set_status(exc.status.state, exc.status.detail, fingerprint=exc.status.fingerprint)
                        self._wake()
                        return
                    except (OSError, asyncssh.Error, TimeoutError) as exc:
                        error = exc
                        continue
                    self._up(conn)
                await conn.wait_closed()
                if self._is_closed():
                    return
                self._conn = None
                conn = None
                error = ConnectionError("connection lost")
                self._set_status(ConnState.RECONNECTING, "connection lost", retry_in=0.0)
                self._wake()
        except asyncio.CancelledError:
            raise

    def _is_closed(self) -> bool:
        return self._closed

    def _fatal(self) -> bool:
        return self._status.state in (ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED, ConnState.FAILED)

    async def _connection(self, after_generation: int = 0, *, fail_fast: bool = False
                          ) -> tuple[asyncssh.SSHClientConnection, int]:
        """The live connection (newer than ``after_generation``), waiting while reconnecting.
        Streams wait through fatal states too (``retry()`` / ``trust_host_key()`` wake them);
        with ``fail_fast`` a fatal state raises ``BackendError``."""
        while True:
            if self._is_closed():
                raise _Closed
            conn = self._conn
            if conn is not None and self._generation > after_generation and not conn.is_closed():
                return conn, self._generation
            changed = self._changed
            if self._fatal():
                if fail_fast:
                    raise BackendError(self._status.detail)
            elif self._supervisor is None:
                try:
                    await self.start()
                except BackendError:
                    if self._fatal() or self._is_closed():
                        continue
                    if fail_fast:
                        raise
                    delay = self.backoff.next()
                    self._set_status(ConnState.RECONNECTING, self._status.detail, retry_in=delay)
                    if delay > 0:
                        await asyncio.sleep(delay)
                continue
            await changed.wait()

    async def close(self) -> None:
        """Stop every stream and channel, then the connection; the remote followers exit with
        their channels (guard)."""
        if self._is_closed():
            return
        self._closed = True
        for s in list(self._streams):
            if s.task is not None:
                s.task.cancel()
        for proc in list(self._procs):
            proc.close()
        for s in list(self._streams):
            if s.task is not None:
                with contextlib.suppress(BaseException):
                    await s.task
            with contextlib.suppress(asyncio.QueueFull):
                s.queue.put_nowait(None)
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(BaseException):
                await self._supervisor
        for listener in list(self._forwards):  # the probe's port forwards close with the host
            listener.close()
        self._forwards.clear()
        conn = self._conn
        self._conn = None
        if conn is not None:
            conn.close()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(conn.wait_closed(), 5)
        self._set_status(ConnState.CLOSED, "")
        self._wake()

    # -- one-shot commands ----------------------------------------------------------------------

    def service_ops(self) -> HostOps:
        """The guarded service's operations here (``kvtui.hosts.service``)."""
        return ShellOps(self)

    @contextlib.asynccontextmanager
    async def open_port(self, port: int) -> AsyncGenerator[tuple[str, int], None]:
        """A local port forward (``127.0.0.1:<ephemeral>`` here → ``127.0.0.1:port`` on the host)
        over the host's one connection, for the readiness probe; closed on exit, and with the
        backend (``close``): no listener outlives either."""
        conn, _ = await self._connection(fail_fast=True)
        try:
            listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", port)
        except (OSError, asyncssh.Error) as exc:
            raise BackendError(f"cannot forward a local port to 127.0.0.1:{port} on the host: {exc}") from exc
        self._forwards.add(listener)
        try:
            yield "127.0.0.1", listener.get_port()
        finally:
            self._forwards.discard(listener)
            listener.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(listener.wait_closed(), 5)

    async def metrics(self, port: int, *, timeout: float = 10.0) -> str:
        """The server's ``/metrics`` through a port forward like the probe's (``kvtui.hosts.metrics``)."""
        return await metrics_via_port(self, port, self.name, via="through an SSH port forward", timeout=timeout)

    def forwards_open(self) -> int:
        """Local port forwards open now (tests: none may outlive a probe or the backend)."""
        return len(self._forwards)

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        """Run one shell command; waits (up to ``timeout``) while reconnecting."""
        try:
            conn, _ = await asyncio.wait_for(self._connection(fail_fast=True), timeout)
        except TimeoutError:
            raise BackendError(f"{self.name}: not connected ({self._status.state.value}: "
                               f"{self._status.detail})") from None
        except _Closed:
            raise BackendError(f"{self.name}: closed") from None
        try:
            res = await conn.run(command, input=input, timeout=timeout, check=False, encoding=None)
        except asyncssh.TimeoutError as exc:
            raise BackendError(f"{self.name}: timed out after {timeout:g} s: {command[:200]}") from exc
        except (asyncssh.Error, OSError) as exc:
            raise BackendError(f"{self.name}: {_describe(exc)} while running: {command[:200]}") from exc
        status = res.exit_status
        if status is None or status < 0:
            status = _signal_status(res.exit_signal)
        return CommandResult(command, int(status), _as_text(res.stdout), _as_text(res.stderr))

    # -- search --------------------------------------------------------------------------------

    async def _search_journal(self, pattern: str, where: str, *, regex: bool, ignore_case: bool, limit: int,
                              newest: bool) -> list[LogMatch]:
        """``journalctl --grep`` between the gap's cursors; no context (a journal has no cheap
        one: each line around a match would cost a query of its own)."""
        cmd = search_command(self.host.unit or "", pattern, where, regex=regex, ignore_case=ignore_case,
                             limit=limit, newest=newest, sudo=self.host.sudo)
        res = await self.run(cmd, timeout=120)
        if not res.stdout.strip() and res.stderr.strip():
            raise BackendError(f"{self.name}: journalctl --grep: {res.stderr.strip().splitlines()[-1][:300]}")
        return search_matches(res.stdout, where, newest=newest, limit=limit)

    # -- streams ---------------------------------------------------------------------------------

    def _follower(self, start: LogStart, after_cursor: str | None, began: float | None = None) -> _Follower:
        src = self.host.log_source
        if src == "file":
            return _FileFollower(self, start, after_cursor, began)
        if src == "docker":
            return _DockerFollower(self, start, after_cursor, began)
        return _JournalFollower(self, start, after_cursor, began)

    async def follow_log(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None,
        positioned: Callable[[], None] | None = None, *, began: float | None = None,
    ) -> AsyncGenerator[list[LogRecord], None]:
        async for block in self.follow_log_blocks(start, after_cursor, positioned, began=began):
            yield list(block.records())

    def follow_next_boot(self, positioned: Callable[[], None]) -> AsyncGenerator[list[LogRecord], None]:
        """``follow_log(NEXT_BOOT)``; ``positioned()`` once the stream has located the log's end
        (the journal's last cursor, the file's size, the host's clock for a container)."""
        return self.follow_log(LogStart.NEXT_BOOT, positioned=positioned)

    async def follow_log_blocks(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None,
        positioned: Callable[[], None] | None = None, *, began: float | None = None,
    ) -> AsyncGenerator[RecordBlock, None]:
        """``follow_log`` as ``RecordBlock``s (one per chunk read; what is queued is delivered
        together, up to ``MAX_BATCH_RECORDS`` records)."""
        follower = self._follower(start, after_cursor, began)
        stream = _Stream(asyncio.Queue(MAX_QUEUED_BATCHES))
        self._streams.add(stream)
        stream.task = asyncio.create_task(self._pump_log(follower, stream, positioned))
        try:
            while True:
                block = await stream.queue.get()
                if block is None:
                    return
                while len(block) < MAX_BATCH_RECORDS and not stream.queue.empty():
                    more = stream.queue.get_nowait()
                    if more is None:
                        if len(block):
                            yield block
                        return
                    block = _merge(block, more)
                yield block
        finally:
            await self._end_stream(stream)

    async def _end_stream(self, stream: _Stream) -> None:
        """A stream's consumer is gone: forget it, stop its pump and wait for it."""
        self._streams.discard(stream)
        if stream.task is not None and not stream.task.done():
            stream.task.cancel()
            with contextlib.suppress(BaseException):
                await stream.task

    async def _next_connection(self, generation: int) -> tuple[asyncssh.SSHClientConnection, int] | None:
        """A pump's next turn: the live connection newer than ``generation`` (``generation - 1``:
        the same one again), waiting while reconnecting; None once the backend is closed."""
        if self._is_closed():
            return None
        try:
            return await self._connection(generation)
        except _Closed:
            return None

    def _end_pump(self, stream: _Stream) -> None:
        """A pump ends: when the backend was closed, its consumer hears the end of the stream."""
        if self._is_closed():
            with contextlib.suppress(asyncio.QueueFull):
                stream.queue.put_nowait(None)

    async def _pump_log(self, follower: _Follower, stream: _Stream,
                        positioned: Callable[[], None] | None = None) -> None:
        generation = 0
        failures = Backoff(initial=0.5, cap=10.0, first=0.0, rng=self.backoff.rng)
        try:
            while (turn := await self._next_connection(generation)) is not None:
                conn, generation = turn
                lost = False
                try:
                    cmd = await follower.command(conn)
                    if positioned is not None and follower.located:
                        positioned()  # located: what the host writes from here on is delivered
                        positioned = None
                    ok = await self._stream_once(conn, cmd, follower, stream)
                    if ok:
                        failures.reset()
                    if follower.restart and not conn.is_closed() and not self._is_closed():
                        # tail saw the file replaced or truncated: start again at once (the old
                        # file's rest, or copytruncate's copy, is read first)
                        if follower.note:
                            self._note(follower.note)
                            follower.note = ""
                        follower.reset()
                        generation -= 1
                        continue
                    if not conn.is_closed() and not self._is_closed():
                        gone = await follower.ended(conn)
                        if gone:
                            await stream.queue.put(RecordBlock.of(gone))
                except BackendError as exc:
                    self._note(str(exc))
                except (asyncssh.Error, OSError, asyncio.IncompleteReadError) as exc:
                    self._note(_describe(exc))
                    lost = conn.is_closed()
                follower.reset()
                if follower.note:
                    self._note(follower.note)
                    follower.note = ""
                if self._is_closed():
                    break
                if lost or conn.is_closed():
                    continue  # wait for a newer connection
                # the remote command ended by itself on a live connection: retry after a pause
                generation -= 1  # the same connection is fine
                await asyncio.sleep(failures.next() or 0.2)
        finally:
            self._end_pump(stream)

    async def _stream_once(self, conn: asyncssh.SSHClientConnection, cmd: str, follower: _Follower,
                           stream: _Stream) -> bool:
        """Run one follower channel until it ends; True when it delivered something."""
        delivered = False
        async with conn.create_process(cmd, encoding=None) as proc:
            self._procs.add(proc)
            stderr_task = asyncio.create_task(_read_limited(proc.stderr, 4096))
            try:
                while True:
                    chunk = await proc.stdout.read(READ_CHUNK)
                    if not chunk:
                        break
                    block = follower.feed_block(chunk)
                    if block.texts:
                        delivered = True
                        await stream.queue.put(block)
                    if follower.note:
                        self._note(follower.note)
                        follower.note = ""
                    if follower.restart:
                        break
                    await follower.after_feed(conn)
            finally:
                self._procs.discard(proc)
                proc.close()
                err = b""
                with contextlib.suppress(BaseException):
                    err = await asyncio.wait_for(stderr_task, 1.0)
                if err.strip():
                    self._note(f"{self.name}: {_decode(err.strip()[-500:])}")
        return delivered

    # -- searching a gap on the host (``SearchableLog``) ---------------------------------------

    async def search_log(
        self, pattern: str, where: str, *, regex: bool = False, ignore_case: bool = True, context: int = 0,
        limit: int = 100, newest: bool = False,
    ) -> list[LogMatch]:
        """Lines of a ``LogGap`` (``where``) found on the host, with context; see
        ``kvtui.hosts.backend.SearchableLog``. One dispatch per log source."""
        src = self.host.log_source
        if src == "file":
            return await self._search_file(pattern, where, regex=regex, ignore_case=ignore_case, context=context,
                                           limit=limit, newest=newest)
        if src == "docker":
            return await self._search_docker(pattern, where, regex=regex, ignore_case=ignore_case, context=context,
                                             limit=limit, newest=newest)
        return await self._search_journal(pattern, where, regex=regex, ignore_case=ignore_case, limit=limit,
                                          newest=newest)

    async def _search_docker(self, pattern: str, where: str, *, regex: bool, ignore_case: bool, context: int,
                             limit: int, newest: bool) -> list[LogMatch]:
        """``docker logs --since A --until B | grep`` on the host (``commands.docker_search``)."""
        rng = gap_range(where)
        a, b = fixed_stamp(rng.get("since", "")), fixed_stamp(rng.get("until", "")) if rng.get("until") else None
        if a is None or (rng.get("until") and b is None):
            raise BackendError(f"{self.name}: not a time range of a container's log (since=…, until=…): {where!r}")
        res = await self.run(C.docker_search(self.host.container or "", a, b, pattern, regex=regex,
                                             ignore_case=ignore_case, context=context, limit=limit, newest=newest,
                                             sudo=self.host.sudo), timeout=300)
        matches = parse_docker_search(res.stdout, context=context)
        if not matches and (res.exit_status != 0 or res.stderr.strip()):
            raise BackendError(f"{self.name}: search of the container's log failed: "
                               f"{(res.stderr or res.stdout).strip()[:300]}")
        return matches[-limit:] if newest else matches[:limit]

    async def _search_file(self, pattern: str, where: str, *, regex: bool, ignore_case: bool, context: int,
                           limit: int, newest: bool) -> list[LogMatch]:
        """``grep`` over the gap's byte range of the log file (or of the rotated copy ``path``
        names; a ``.gz`` through ``gzip -dc``)."""
        parts = gap_range(where)
        a, sep, b = parts.get("bytes", "").partition("-")
        if not sep or not a.isdigit() or not (b.isdigit() or b == ""):
            raise BackendError(f"{self.name}: not a byte range of a log file: {where!r}")
        start, end = int(a), int(b) if b else None
        path = parts.get("path") or self.host.log_file or ""
        res = await self.run(C.file_search(path, start, end, pattern, gz=path.endswith(".gz"), regex=regex,
                                           ignore_case=ignore_case, context=context, limit=limit, newest=newest),
                             timeout=120)
        if res.exit_status != 0:
            raise BackendError(f"{self.name}: search of {path} failed: {(res.stderr or res.stdout).strip()[:300]}")
        matches = parse_file_search(res.stdout, start, context=context, end=end)
        return matches[-limit:] if newest else matches[:limit]

    async def gpu_stream(self, interval_s: float = 1.0) -> AsyncGenerator[list[GpuSample], None]:
        stale_after = self.stale_after if self.stale_after is not None else max(3 * interval_s, interval_s + 2.0)
        stream = _Stream(asyncio.Queue(64))
        self._streams.add(stream)
        stream.task = asyncio.create_task(self._pump_gpu(interval_s, stream))
        last: list[GpuSample] | None = None
        try:
            while True:
                try:
                    batch = await asyncio.wait_for(stream.queue.get(), stale_after)
                except TimeoutError:
                    if self._is_closed():
                        return
                    if last is not None:
                        yield gpu_mod.mark_stale(last)
                    continue
                if batch is None:
                    return
                last = batch
                yield batch
        finally:
            await self._end_stream(stream)

    def _select(self, samples: list[GpuSample]) -> list[GpuSample]:
        for s in samples:
            if s.uuid:
                self._gpu_uuid_index[s.uuid.upper()] = s.index
        return gpu_mod.select_gpus(samples, self.host.gpus)

    async def _pump_gpu(self, interval_s: float, stream: _Stream) -> None:
        generation = 0
        quick_deaths = 0
        interval_ms = max(50, int(interval_s * 1000))
        try:
            while (turn := await self._next_connection(generation)) is not None:
                conn, generation = turn
                try:
                    # one immediate reading (first paint, and the GPU count for grouping ticks)
                    res = await conn.run(C.nvidia_smi_query_gpu(self._gpu_fields), check=False,
                                         timeout=max(10.0, 5 * interval_s), encoding=None)
                    first = gpu_mod.parse_query_gpu_csv(_as_text(res.stdout), self._clock())
                    if res.exit_status != 0 or not first:
                        msg = _as_text(res.stderr).strip() or _as_text(res.stdout).strip() or "no output"
                        if "not a valid field" in msg and self._gpu_fields != gpu_mod.QUERY_GPU_LEGACY_FIELDS:
                            self._gpu_fields = gpu_mod.QUERY_GPU_LEGACY_FIELDS  # an older driver: ask again
                            generation -= 1
                            continue
                        self._note(f"{self.name}: nvidia-smi: {msg[:300]}")
                        await asyncio.sleep(max(interval_s, 5.0))
                        generation -= 1
                        continue
                    await stream.queue.put(self._select(first))
                    if quick_deaths >= 2:  # the -lms stream keeps dying: sample with one-shots
                        await self._poll_gpu(conn, interval_s, stream)
                    else:
                        t0 = time.monotonic()
                        await self._stream_gpu(conn, interval_ms, len(first), stream)
                        if not conn.is_closed():
                            quick = time.monotonic() - t0 < 3 * interval_s
                            quick_deaths = quick_deaths + 1 if quick else 0
                except (asyncssh.Error, OSError, asyncio.IncompleteReadError) as exc:
                    self._note(_describe(exc))
                if self._is_closed():
                    break
                if not conn.is_closed():
                    generation -= 1
                    await asyncio.sleep(interval_s)
        finally:
            self._end_pump(stream)

    async def _stream_gpu(self, conn: asyncssh.SSHClientConnection, interval_ms: int, count: int,
                          stream: _Stream) -> None:
        ticks = gpu_mod.QueryGpuTicks(expected=count)
        async with conn.create_process(C.nvidia_smi_query_gpu(self._gpu_fields, interval_ms=interval_ms),
                                       encoding=None) as proc:
            self._procs.add(proc)
            buf = b""
            try:
                while True:
                    chunk = await proc.stdout.read(READ_CHUNK)
                    if not chunk:
                        break
                    buf += chunk
                    lines = buf.split(b"\n")
                    buf = lines.pop()[-65536:]
                    now = self._clock()
                    for line in lines:
                        done = ticks.feed(_decode(line), now)
                        if done:
                            await self._put_latest(stream, self._select(done))
            finally:
                self._procs.discard(proc)
                proc.close()

    async def _poll_gpu(self, conn: asyncssh.SSHClientConnection, interval_s: float, stream: _Stream) -> None:
        while not self._is_closed() and not conn.is_closed():
            await asyncio.sleep(interval_s)
            res = await conn.run(C.nvidia_smi_query_gpu(self._gpu_fields), check=False,
                                 timeout=max(10.0, 5 * interval_s), encoding=None)
            samples = gpu_mod.parse_query_gpu_csv(_as_text(res.stdout), self._clock())
            if samples:
                await self._put_latest(stream, self._select(samples))

    async def _put_latest(self, stream: _Stream, batch: list[GpuSample]) -> None:
        """GPU samples are state, not history: a slow consumer gets the newest, not a backlog."""
        while stream.queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                stream.queue.get_nowait()
        await stream.queue.put(batch)

    async def gpu_processes(self) -> list[GpuProcess]:
        res = await self.run(C.nvidia_smi_compute_apps(gpu_mod.QUERY_APPS_FIELDS), timeout=30)
        if not res.ok:
            raise BackendError(f"{self.name}: nvidia-smi --query-compute-apps failed: "
                               f"{(res.stderr or res.stdout).strip()[:300]}")
        procs = gpu_mod.parse_compute_apps_csv(res.stdout)
        if not self._gpu_uuid_index:
            q = await self.run(C.nvidia_smi_query_gpu(("index", "uuid")), timeout=30)
            for line in q.stdout.splitlines():
                num, _, uuid = line.partition(",")
                if num.strip().isdigit() and uuid.strip():
                    self._gpu_uuid_index[uuid.strip().upper()] = int(num)
        out: list[GpuProcess] = []
        wanted = None if self.host.gpus is None else set(self.host.gpus)
        for p in procs:
            idx = p.gpu_index
            if idx is None and p.gpu_uuid:
                idx = self._gpu_uuid_index.get(p.gpu_uuid.upper())
            if wanted is not None and (idx is None or idx not in wanted):
                continue
            out.append(GpuProcess(pid=p.pid, used_mib=p.used_mib, gpu_index=idx, gpu_uuid=p.gpu_uuid, name=p.name))
        return out

    async def server_pids(self) -> set[int]:
        h = self.host
        if h.unit:
            cmd = C.server_pids_unit(h.unit, sudo=h.sudo)
        elif h.container:
            cmd = C.server_pids_container(h.container, sudo=h.sudo)
        else:
            found = C.server_pid_file(h.pid_file, h.start_command, h.stop_command)
            cmd = C.server_pids_pidfile(found[0]) if found else C.server_pids_by_pattern()
        res = await self.run(cmd, timeout=30)
        return C.parse_server_pids(res.stdout)


async def _read_limited(reader: asyncssh.SSHReader[bytes], limit: int) -> bytes:
    """Drain a channel's stderr, keeping the last ``limit`` bytes."""
    kept = b""
    with contextlib.suppress(asyncssh.Error, OSError):
        while True:
            chunk = await reader.read(READ_CHUNK)
            if not chunk:
                break
            kept = (kept + chunk)[-limit:]
    return kept


def _signal_status(exit_signal: object) -> int:
    """A remote process killed by a signal: ``128 + signum`` like a shell; -1 when unknown."""
    if isinstance(exit_signal, tuple) and exit_signal and isinstance(exit_signal[0], str):
        try:
            return 128 + int(signal.Signals["SIG" + exit_signal[0]])
        except KeyError:
            pass
    return -1


def _as_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    if isinstance(exc, asyncssh.DisconnectError):
        return f"disconnected: {exc.reason}" if exc.reason else "disconnected"
    if isinstance(exc, asyncssh.ConnectionLost):
        return "connection lost"
    if isinstance(exc, TimeoutError):
        return "timed out connecting"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__


_GREP_LINE_RE: Final = re.compile(r"^(\d+)([:-])(\d+)[:-](.*)$", re.S)


def parse_file_search(out: str, start: int, *, context: int = 0, end: int | None = None) -> list[LogMatch]:
    """``file_search``'s ``grep -b -n`` lines -> matches, oldest first, each with up to ``context``
    lines before and after it; a record's cursor is the absolute byte offset after its line
    (``start`` + grep's offset + its length + 1), ``line_no`` its line in the range (1-based).
    Lines that begin at or past ``end`` are not the range's (grep read the file to its end)."""
    rows: list[tuple[int, bool, LogRecord]] = []  # (line, is match, record)
    for line in out.split("\n"):
        m = _GREP_LINE_RE.match(line)
        if m is None:
            continue
        text = m.group(4)
        begin = start + int(m.group(3))
        if end is not None and begin >= end:
            continue
        stop = begin + len(text.encode("utf-8", "surrogateescape")) + 1
        rows.append((int(m.group(1)), m.group(2) == ":", LogRecord(_decode(text.encode()), None, str(stop), "file")))
    by_line = {n: rec for n, _, rec in rows}
    out_matches: list[LogMatch] = []
    for n, hit, rec in rows:
        if not hit:
            continue
        before = tuple(by_line[k] for k in range(n - context, n) if k in by_line)
        after = tuple(by_line[k] for k in range(n + 1, n + context + 1) if k in by_line)
        out_matches.append(LogMatch(rec, before, after, n))
    return out_matches
