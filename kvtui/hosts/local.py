"""``LocalBackend``: the ``HostBackend`` for the machine kvtui runs on.

- Log: a log file followed in-process with ``tail -F`` semantics from a byte offset (rotation by
  rename, ``copytruncate`` read from the copy, a file that appears later), the current boot found
  however far back and read as its startup part, one gap, the recent tail
  (``kvtui.hosts.filelog``; ``search_log`` greps a gap);
  or the unit's journal through ``journalctl -u UNIT -o json -f`` with journald cursors,
  the current boot found from the unit's ``InvocationID`` (else a bounded scan back); or
  ``docker logs -f --timestamps``. Resuming after a cursor (``after_cursor``) neither loses nor
  repeats a line: file cursors are byte offsets, journal cursors journald's own, docker cursors
  the line's RFC 3339 timestamp.
- GPU memory through NVML (``kvtui.hosts.nvml``, ``pynvml`` imported lazily). Without a GPU or
  driver the status says so plainly and ``gpu_stream`` yields nothing.
- ``run()`` through an asyncio subprocess (a shell string built by ``kvtui.hosts.shellcmd``).

No orphans (``kvtui.hosts.localproc``): every child (journalctl, docker logs, commands) gets
``PR_SET_PDEATHSIG`` (Linux), so it dies with kvtui even on ``kill -9``; ``close()`` terminates
them and waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shlex
import signal
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kvtui.config import LocalHost
from kvtui.engines.events import LogRecord
from kvtui.engines.shapes import parse_journal_json
from kvtui.engines.source_records import gap_range
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.hosts import shellcmd as C
from kvtui.hosts.backend import BackendError, CommandResult, ConnState, ConnStatus, LogMatch, LogStart
from kvtui.hosts.dockerlog import (
    CatchUp,
    docker_key,
    fixed_stamp,
    parse_docker_line,
    parse_docker_search,
    parse_rfc3339,
)
from kvtui.hosts.filelog import (
    HEAD_BYTES,
    TAIL_BYTES,
    BootPlan,
    Gap,
    Part,
    Source,
    copy_rest,
    engine_command,
    engine_roots,
    gap_of,
    grep_argv,
    make_splitter,
    plan_current_boot,
    proc_cmdline,
)
from kvtui.hosts.filelog import (
    boot_start_offset as boot_start_offset,
)
from kvtui.hosts.filelog import boot_starts as _boot_starts
from kvtui.hosts.journal import (
    BootStart,
    JournalUptime,
    missing_records,
    parse_boot_start,
    parse_main_cmdline,
    search_command,
    search_matches,
)
from kvtui.hosts.localgrep import collect_matches
from kvtui.hosts.localproc import PREEXEC, descendants, pid_reading, pids_of, stop_process
from kvtui.hosts.metrics import metrics_via_port
from kvtui.hosts.nvml import Nvml, nvml_text
from kvtui.hosts.probe import direct
from kvtui.hosts.service.shell import ShellOps
from kvtui.hosts.shellcmd import CONTROL_PREFIX, ENGINE_PROCESS_PATTERN, server_pid_file
from kvtui.liveness import (
    DOCKER_STATE_FORMAT,
    FRESH_SLACK_S,
    PidWatch,
    exit_record,
    parse_docker_state,
)
from kvtui.retry import sleep_unless

if TYPE_CHECKING:
    from kvtui.hosts.service.model import HostOps

MAX_LINE_BYTES: Final = 1 << 20  # longer lines are cut (the rest up to the newline dropped)
READ_CHUNK: Final = 256 << 10  # small enough that splitting one chunk never stalls the event loop
DEFAULT_TAIL_BYTES: Final = TAIL_BYTES  # the recent tail of a log file read before following it
DEFAULT_JOURNAL_SCAN_LINES: Final = 20_000


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _FileState:
    fh: Any = None
    ident: tuple[int, int] | None = None


class LocalBackend:
    """``HostBackend`` for this machine (see the module docstring)."""

    lists_processes = True  # ``run(ps …)`` lists the host's processes (``kvtui.hosts.orphans``)

    def __init__(
        self,
        name: str,
        host: LocalHost,
        *,
        clock: Callable[[], float] = time.time,
        poll_interval: float = 0.1,
        liveness_interval: float = 0.5,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
        journal_scan_lines: int = DEFAULT_JOURNAL_SCAN_LINES,
        nvml: Nvml | None = None,
        journalctl: Sequence[str] = ("journalctl",),
        systemctl: Sequence[str] = ("systemctl",),
        docker: Sequence[str] = ("docker",),
    ) -> None:
        self.name = name
        self.host = host
        self._clock = clock
        self._poll = poll_interval
        self._liveness_interval = liveness_interval

        found = server_pid_file(host.pid_file, host.start_command, host.stop_command)
        self.pid_file: Path | None = Path(found[0]).expanduser() if found else None
        self._tail_bytes = tail_bytes
        self._journal_scan = journal_scan_lines
        self._nvml = nvml or Nvml()
        # ``sudo = true``: journalctl and systemctl run through ``sudo -n`` (never a prompt)
        sudo = ["sudo", "-n"] if host.sudo else []
        self._journalctl = [*sudo, *journalctl]
        self._systemctl = [*sudo, *systemctl]
        self._docker = list(docker)
        self._state = ConnState.CONNECTING
        self._log_detail = ""
        self._log_note = ""  # what the file follower found about the boot's start (kept until replaced)
        self._started = False
        self._closed = asyncio.Event()
        self._procs: set[asyncio.subprocess.Process] = set()
        self._gpu_ok = False

    # -- lifecycle -----------------------------------------------------------------------------

    def status(self) -> ConnStatus:
        parts = [f"local: {self._source_label()}"]
        if self._log_detail:
            parts.append(self._log_detail)
        if self._log_note:
            parts.append(self._log_note)
        if self._started and not self._gpu_ok and self._nvml.error:
            parts.append(self._nvml.error)
        return ConnStatus(self._state, detail="; ".join(parts))

    @property
    def gpu_error(self) -> str | None:
        """Why there is no GPU data (None when NVML works or before ``start``)."""
        return None if self._gpu_ok else self._nvml.error

    def _source_label(self) -> str:
        if self.host.log_file:
            return f"file {self.host.log_file}"
        if self.host.container:
            return f"container {self.host.container}"
        if self.host.unit:
            return f"unit {self.host.unit}"
        return "no log source"

    async def start(self) -> None:
        if self._started:
            return
        if not (self.host.log_file or self.host.container or self.host.unit):
            self._state = ConnState.FAILED
            raise BackendError(f"host '{self.name}': no log source (set unit, log_file or container)")
        self._gpu_ok = await asyncio.to_thread(self._nvml.init)
        self._started = True
        self._state = ConnState.CONNECTED

    async def close(self) -> None:
        self._closed.set()
        procs = list(self._procs)
        await asyncio.gather(*(stop_process(p) for p in procs), return_exceptions=True)
        self._procs.clear()
        if self._gpu_ok:
            await asyncio.to_thread(self._nvml.shutdown)
            self._gpu_ok = False
        self._state = ConnState.CLOSED

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless closed first; True when closed."""
        return await sleep_unless(self._closed, seconds)

    # -- logs ------------------------------------------------------------------------------------

    def follow_log(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None,
        positioned: Callable[[], None] | None = None, *, began: float | None = None,
    ) -> AsyncIterator[list[LogRecord]]:
        """``positioned`` (``NEXT_BOOT``): called once the stream knows where the log ends now —
        the file's size, the journal's last cursor, the clock for a container. ``began``: the
        caller's ``time.monotonic()`` when it began following (``HostBackend.follow_log``)."""
        t_follow = began if began is not None else time.monotonic()
        if self.host.log_file:
            return self._follow_file(Path(self.host.log_file).expanduser(), start, after_cursor, positioned,
                                     t_follow)
        if self.host.container:
            return self._follow_docker(self.host.container, start, after_cursor, positioned, t_follow)
        if self.host.unit:
            return self._follow_journal(self.host.unit, start, after_cursor, positioned)
        raise BackendError(f"host '{self.name}': no log source (set unit, log_file or container)")

    def follow_next_boot(self, positioned: Callable[[], None]) -> AsyncIterator[list[LogRecord]]:
        """``follow_log(NEXT_BOOT)`` that says when it is positioned (``PositionedLogSource``)."""
        return self.follow_log(LogStart.NEXT_BOOT, positioned=positioned)

    def _plan_file(self, path: Path) -> BootPlan:
        """Where the current boot of ``path`` is read from (``kvtui.hosts.filelog``): blocking."""
        return plan_current_boot(path, engine=self.host.engine, tail_bytes=self._tail_bytes,
                                 running=self._server_command)

    def _server_command(self) -> tuple[list[str], int] | None:
        """(argv, pid) of the running server from ``/proc/PID/cmdline``: the pid file's process
        (or the engine process below it, when it is a launch script), else the oldest engine
        process on this machine (``commands.ENGINE_PROCESS_PATTERN``); None when none runs."""
        if self.pid_file is not None:
            pid, alive, _age = pid_reading(self.pid_file)
            if pid is not None and alive:
                below = sorted(descendants({pid}))
                found = engine_command([pid, *below], ENGINE_PROCESS_PATTERN)
                if found is not None:
                    return found
                argv = proc_cmdline(pid)
                return (argv, pid) if argv else None
        return engine_command(engine_roots(ENGINE_PROCESS_PATTERN), ENGINE_PROCESS_PATTERN)

    async def _plan_records(self, plan: BootPlan) -> AsyncIterator[list[LogRecord]]:
        """The plan's steps as records: parts read in ``READ_CHUNK`` pieces off the loop, each gap
        counted off the loop when reached (the startup part is out by then)."""
        shape: str | None = None
        said: list[LogRecord] = []
        for step in plan.steps:
            if isinstance(step, LogRecord):
                said.append(step)
                continue
            if said:
                yield said
                said = []
            if isinstance(step, Gap):
                rec = await asyncio.to_thread(gap_of, step, self.host.engine, shape)
                if rec is not None:
                    yield [rec]
                continue
            assert isinstance(step, Part)
            try:
                src = await asyncio.to_thread(Source, step.path)
            except OSError as exc:
                self._log_note = f"cannot read {step.path}: {exc.strerror or exc}"
                continue
            try:
                splitter = make_splitter(step.start)
                pos = step.start
                while pos < step.end and not self._closed.is_set():
                    data = await asyncio.to_thread(src.read, pos, min(step.end, pos + READ_CHUNK))
                    if not data:
                        break
                    pos += len(data)
                    records = splitter.feed(data) + (splitter.flush() if pos >= step.end else [])
                    if not step.cursors:
                        records = [dataclasses.replace(r, cursor=None) for r in records]
                    if records:
                        yield records
                shape = splitter.shape
            finally:
                await asyncio.to_thread(src.close)
        if said:
            yield said

    async def _follow_file(
        self, path: Path, start: LogStart, after_cursor: str | None, positioned: Callable[[], None] | None,
        t_follow: float,
    ) -> AsyncIterator[list[LogRecord]]:
        """``t_follow``: when following began (monotonic): a server process younger than that
        (+ ``FRESH_SLACK_S``) started after it, so it is the next boot's.

        ``CURRENT_BOOT``: the plan (``kvtui.hosts.filelog.plan_current_boot``) — the startup part
        whole, one gap, the recent tail — then on from the end. A ``copytruncate`` while followed
        (the file shrinks, or its first bytes change) reads the rest of the copy (``FILE.1``, when
        it is this file's copy) from the old offset before the truncated file from 0."""
        plan: BootPlan | None = None
        if after_cursor is not None and after_cursor.strip().isdigit():
            offset = int(after_cursor)
        elif start == LogStart.NEXT_BOOT:
            try:
                offset = os.stat(path).st_size
            except FileNotFoundError:
                offset = 0
        else:
            plan = await asyncio.to_thread(self._plan_file, path)
            offset = plan.follow_from
            self._log_note = plan.note
        if positioned is not None:
            positioned()  # the bytes from ``offset`` on are read, whenever they are written
        st = _FileState()
        pos = offset  # bytes of the current file read so far
        splitter = make_splitter(pos)
        head = b""  # the file's first bytes as read (a copytruncate copy begins with them)
        # liveness: the pid file read at most every ``liveness_interval`` while caught up; a
        # death is reported once the file's bytes written before it are read (its last lines first)
        watch = PidWatch(current_boot=start is LogStart.CURRENT_BOOT or after_cursor is not None)
        next_check = 0.0
        pending_exit: tuple[LogRecord, int] | None = None
        try:
            if plan is not None:
                if plan.fh is not None:
                    st.fh = plan.fh
                    fst = os.fstat(st.fh.fileno())
                    st.ident = (fst.st_dev, fst.st_ino)
                    st.fh.seek(pos)
                    head = await asyncio.to_thread(os.pread, st.fh.fileno(), min(pos, HEAD_BYTES), 0)
                async for batch in self._plan_records(plan):
                    yield batch
            while not self._closed.is_set():
                if st.fh is None:
                    try:
                        st.fh = await asyncio.to_thread(open, path, "rb")
                    except FileNotFoundError:
                        self._log_detail = f"waiting for {path} to appear"
                        if await self._sleep(self._poll):
                            return
                        continue
                    except OSError as exc:
                        self._log_detail = f"cannot read {path}: {exc.strerror or exc}"
                        if await self._sleep(max(self._poll, 1.0)):
                            return
                        continue
                    self._log_detail = ""
                    fst = os.fstat(st.fh.fileno())
                    st.ident = (fst.st_dev, fst.st_ino)
                    if fst.st_size < pos:  # replaced or truncated while we were away
                        pos = 0
                        splitter = make_splitter(0)
                    st.fh.seek(pos)
                    head = await asyncio.to_thread(os.pread, st.fh.fileno(), min(pos, HEAD_BYTES), 0)
                data, same = await asyncio.to_thread(_read_checked, st.fh, head)
                if data:
                    if len(head) < HEAD_BYTES and pos == len(head):
                        head += data[: HEAD_BYTES - len(head)]
                    pos += len(data)
                    records = splitter.feed(data)
                    if records:
                        yield records
                    continue
                # at EOF: rotated (renamed away / replaced)? truncated? else wait
                try:
                    pst = os.stat(path)
                    now_ident: tuple[int, int] | None = (pst.st_dev, pst.st_ino)
                except FileNotFoundError:
                    pst = None
                    now_ident = None
                if now_ident != st.ident:
                    tail = await asyncio.to_thread(st.fh.read)  # written just before the rename
                    records = (splitter.feed(tail) if tail else []) + splitter.flush()
                    st.fh.close()
                    st.fh = None
                    pos = 0
                    splitter = make_splitter(0)
                    head = b""
                    if records:
                        yield records
                    continue
                if pst is not None and (pst.st_size < pos or not same):  # truncated in place (copytruncate)
                    rest = copy_rest(path, pos, head)
                    while (piece := await asyncio.to_thread(next, rest, None)) is not None:
                        records = splitter.feed(piece)
                        if records:
                            yield records
                    records = splitter.flush()
                    pos = 0
                    splitter = make_splitter(0)
                    head = b""
                    st.fh.seek(0)
                    pending_exit = None
                    if records:
                        yield records
                    continue
                if pending_exit is not None and (pst is None or pos >= pending_exit[1]):
                    yield [*splitter.flush(), pending_exit[0]]
                    pending_exit = None
                elif self.pid_file is not None and pending_exit is None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + self._liveness_interval
                    pid, alive, age = pid_reading(self.pid_file)
                    fresh = age is not None and age <= time.monotonic() - t_follow + FRESH_SLACK_S
                    gone = watch.observe(pid, alive, fresh=fresh)
                    if gone is not None:
                        rec = exit_record(gone.pid, at_start=gone.at_start, ts=datetime.now(), source="file")
                        try:
                            size = os.stat(path).st_size
                        except FileNotFoundError:
                            size = 0
                        pending_exit = (rec, size)
                        continue
                if await self._sleep(self._poll):
                    return
        finally:
            if st.fh is not None:
                st.fh.close()

    async def _spawn(self, argv: Sequence[str]) -> asyncio.subprocess.Process:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=PREEXEC,
            )
        except FileNotFoundError as exc:
            raise BackendError(f"cannot run {argv[0]}: not found on this machine") from exc
        except OSError as exc:
            raise BackendError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        self._procs.add(proc)
        return proc

    async def _capture(self, argv: Sequence[str], timeout: float = 30.0) -> tuple[int, bytes, bytes]:
        proc = await self._spawn(argv)
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            await stop_process(proc)
            raise BackendError(f"{argv[0]} did not answer within {timeout:g} s") from None
        finally:
            self._procs.discard(proc)
        return proc.returncode or 0, out, err

    async def _first_line(self, argv: Sequence[str], timeout: float = 30.0) -> bytes:
        proc = await self._spawn(argv)
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                return await proc.stdout.readline()
        except (TimeoutError, ValueError):
            return b""
        finally:
            await stop_process(proc)
            self._procs.discard(proc)

    async def _journal_start_cursor(self, unit: str) -> tuple[str | None, bool]:
        """(cursor of the current boot's first entry, True when found by InvocationID)."""
        try:
            rc, out, _ = await self._capture([*self._systemctl, "show", "-p", "InvocationID", "--value", unit])
        except BackendError:
            rc, out = 1, b""
        inv = out.decode(errors="replace").strip() if rc == 0 else ""
        if re.fullmatch(r"[0-9a-f]{32}", inv):
            # the invocation's first entry (the manager's "Starting …" carries INVOCATION_ID)
            raw = await self._first_line(
                [*self._journalctl, "--no-pager", "-o", "json", f"INVOCATION_ID={inv}", "+",
                 f"_SYSTEMD_INVOCATION_ID={inv}"]
            )
            rec = parse_journal_json(raw) if raw else None
            if rec is not None and rec.cursor:
                return rec.cursor, True
        # bounded scan back over the unit's journal
        rc, out, _ = await self._capture(
            [*self._journalctl, "--no-pager", "-o", "json", "-u", unit, "-n", str(self._journal_scan)]
        )
        records = [r for r in (parse_journal_json(x) for x in out.splitlines()) if r is not None]
        if not records:
            return None, False
        idx = _journal_boot_start(records, self.host.engine)
        return records[idx].cursor, False

    async def _journal_locate(self, unit: str) -> BootStart:
        """``commands.journal_boot_start`` here (this backend's journalctl/systemctl words)."""
        script = C.journal_boot_start(unit, journalctl=shlex.join(self._journalctl),
                                      systemctl=shlex.join(self._systemctl))
        try:
            _, out, _ = await self._capture(["sh", "-c", script])
        except BackendError:
            return BootStart()
        return parse_boot_start(out.decode("utf-8", "replace"))

    async def _search_journal(self, pattern: str, where: str, *, regex: bool, ignore_case: bool, limit: int,
                              newest: bool) -> list[LogMatch]:
        """``journalctl --grep`` between the gap's cursors (no context lines: see the SSH backend)."""
        cmd = search_command(self.host.unit or "", pattern, where, regex=regex, ignore_case=ignore_case, limit=limit,
                             newest=newest, journalctl=shlex.join(self._journalctl))
        _, out, err = await self._capture(["sh", "-c", cmd], timeout=120)
        text = out.decode("utf-8", "replace")
        if not text.strip() and err.strip():
            raise BackendError(f"{self.name}: journalctl --grep: {err.decode('utf-8', 'replace').strip()[-300:]}")
        return search_matches(text, where, newest=newest, limit=limit)

    async def _follow_journal(
        self, unit: str, start: LogStart, after_cursor: str | None, positioned: Callable[[], None] | None = None
    ) -> AsyncIterator[list[LogRecord]]:
        cursor = after_cursor
        inclusive: str | None = None
        every = False  # the unit had no entry when located: every entry from the first is new
        # the current boot of a unit up for days (kvtui.hosts.journal): startup part, gap, tail
        plan: JournalUptime | None = None
        tail: int | None = None  # the start was vacuumed: the last N entries
        jc = shlex.join(self._journalctl)
        if cursor is None and start == LogStart.CURRENT_BOOT:
            found = await self._journal_locate(unit)
            reason = found.start_missing() if found.cursor is not None else None
            if reason is not None:
                _, out, _ = await self._capture(
                    ["sh", "-c", C.journal_main_cmdline(unit, systemctl=shlex.join(self._systemctl))])
                pid, argv = parse_main_cmdline(out)
                yield missing_records(reason, pid, argv)
                tail = C.JOURNAL_TAIL_LINES
            elif found.cursor is not None:
                plan = JournalUptime()
                inclusive = found.cursor
            else:
                inclusive, _ = await self._journal_start_cursor(unit)
        elif cursor is None and positioned is not None:
            # located by the newest entry's cursor (not ``-n 0``, which is "now" only once
            # journalctl runs): a restart issued after ``positioned`` loses no line
            rc, out, _ = await self._capture([*self._journalctl, "--no-pager", "-q", "-o", "json", "-u", unit,
                                              "-n", "1"])
            last = parse_journal_json(out.strip().split(b"\n")[-1]) if rc == 0 and out.strip() else None
            cursor = last.cursor if last is not None else None
            every = cursor is None
        if positioned is not None:
            positioned()
        first = True
        while not self._closed.is_set():
            argv = [*self._journalctl, "--no-pager", "-o", "json", "--all", "-u", unit, "-f"]
            if plan is not None and plan.phase != "follow" and inclusive is not None:
                argv = ["sh", "-c", plan.command(unit, inclusive, cursor, journalctl=jc)]
            elif cursor is not None:
                argv += ["--after-cursor", cursor]
            elif inclusive is not None:
                argv += ["--cursor", inclusive]
            elif tail is not None and first:
                argv += ["-n", str(tail)]
            elif every and first:
                argv += ["-n", "all"]
            elif start == LogStart.NEXT_BOOT or not first:
                argv += ["-n", "0"]
            else:
                argv += ["-n", str(self._journal_scan)]
            first = False
            proc = await self._spawn(argv)
            assert proc.stdout is not None
            partial = b""
            try:
                while True:
                    data = await proc.stdout.read(1 << 16)
                    if not data:
                        break
                    buf = partial + data
                    lines = buf.split(b"\n")
                    partial = lines.pop()
                    if len(partial) > 64 * MAX_LINE_BYTES:  # a broken stream: resync at the next line
                        partial = b""
                    batch = []
                    startup: list[str] = []  # texts of the startup part (plan.saw), and their bytes
                    startup_bytes = 0
                    for raw in lines:
                        if plan is not None and raw.startswith(CONTROL_PREFIX):
                            plan.saw(startup, startup_bytes)
                            startup, startup_bytes = [], 0
                            batch.extend(plan.control(raw[len(CONTROL_PREFIX) :].decode("utf-8", "replace")))
                            if plan.tail_cursor is not None:  # until the tail's first entry comes
                                inclusive, cursor = plan.tail_cursor, None
                            continue
                        rec = parse_journal_json(raw)
                        if rec is None:
                            continue
                        batch.append(rec)
                        if plan is not None and plan.phase == "startup":
                            startup.append(rec.text)
                            startup_bytes += len(raw) + 1
                        if rec.cursor:
                            cursor = rec.cursor
                    if plan is not None and startup:
                        plan.saw(startup, startup_bytes)
                    if batch:
                        self._log_detail = ""
                        yield batch
            finally:
                await stop_process(proc)
                self._procs.discard(proc)
            if self._closed.is_set():
                return
            err = b""
            if proc.stderr is not None:
                with contextlib.suppress(Exception):
                    err = await proc.stderr.read(4096)
            msg = err.decode(errors="replace").strip().splitlines()
            self._log_detail = f"journalctl exited ({proc.returncode}){': ' + msg[-1] if msg else ''}; restarting"
            if await self._sleep(1.0):
                return

    async def _follow_docker(
        self, container: str, start: LogStart, after_cursor: str | None, positioned: Callable[[], None] | None,
        t_follow: float,
    ) -> AsyncIterator[list[LogRecord]]:
        since: str | None = None
        skip_until: str | None = after_cursor
        if after_cursor:
            since = after_cursor
        elif positioned is not None and start == LogStart.NEXT_BOOT:
            since = datetime.now(UTC).isoformat().replace("+00:00", "Z")  # from now, however late docker runs
        elif start == LogStart.CURRENT_BOOT:
            rc, out, err = await self._capture([*self._docker, "inspect", "-f", "{{.State.StartedAt}}", container])
            if rc != 0:
                raise BackendError(
                    f"docker inspect {container}: {err.decode(errors='replace').strip() or 'failed'}"
                )
            since = out.decode().strip() or None
        # liveness: ``docker logs -f`` ends when the container stops; its state says how
        watch = PidWatch(current_boot=start is LogStart.CURRENT_BOOT or after_cursor is not None)
        # a container started since following began is ours
        fresh_after = datetime.now(UTC) - timedelta(seconds=time.monotonic() - t_follow + FRESH_SLACK_S)
        held = await self._docker_state(container, watch, fresh_after)  # already stopped: said when the stream ends
        if positioned is not None:
            positioned()
        # the current run of a container up for days (issue 21): its head through the ready line +
        # a margin, the recent tail with one gap record before it, then -f (``kvtui.hosts.dockerlog``)
        catch = CatchUp(since) if (start == LogStart.CURRENT_BOOT and not after_cursor and since
                                   and fixed_stamp(since)) else None
        while not self._closed.is_set():
            argv = [*self._docker, "logs", "-f", "--timestamps"]
            if catch is not None and catch.phase == "head" and since:
                argv = ["sh", "-c", C.docker_head_script(container, since, cap=catch.cap_left, ready=catch.ready,
                                                         started=catch.started, docker=self._docker)
                        + "exec " + C.docker_tail_follow(container, docker=self._docker)]
            elif catch is not None and catch.phase == "tail":
                argv = ["sh", "-c", "exec " + C.docker_tail_follow(container, docker=self._docker)]
            elif since:
                argv += ["--since", since, container]
            else:
                argv += ["--tail", "0", container]
            proc = await self._spawn(argv)
            # docker logs writes the container's stderr to ours: read both, merged by time order
            assert proc.stdout is not None
            assert proc.stderr is not None
            queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=256)

            async def pump(reader: asyncio.StreamReader, q: asyncio.Queue[bytes | None] = queue) -> None:
                while chunk := await reader.read(1 << 16):
                    await q.put(chunk)
                await q.put(None)

            pumps = [asyncio.create_task(pump(proc.stdout)), asyncio.create_task(pump(proc.stderr))]
            splitters = {0: b""}
            done = 0
            try:
                while done < 2:
                    chunk = await queue.get()
                    if chunk is None:
                        done += 1
                        continue
                    buf = splitters[0] + chunk
                    lines = buf.split(b"\n")
                    splitters[0] = lines.pop()[-MAX_LINE_BYTES:]
                    batch = []
                    for raw in lines:
                        if catch is not None and catch.phase == "head" and C.CONTROL_PREFIX in raw:
                            batch.extend(catch.control(raw[raw.index(C.CONTROL_PREFIX):]))
                            self._log_detail, catch.note = catch.note or self._log_detail, ""
                            continue
                        rec = parse_docker_line(raw.decode("utf-8", "replace").rstrip("\r"))
                        if catch is not None and catch.phase == "tail" and rec.cursor:
                            batch.extend(catch.tail_first(rec.cursor))  # the gap before the tail
                        if skip_until and rec.cursor and docker_key(rec.cursor) <= docker_key(skip_until):
                            continue
                        batch.append(rec)
                        if rec.cursor:
                            since = skip_until = rec.cursor
                            if catch is not None and catch.phase == "head":
                                catch.head_line(rec.cursor, rec.text, len(raw) + 1)
                    if batch:
                        yield batch
            finally:
                for t in pumps:
                    t.cancel()
                await stop_process(proc)
                self._procs.discard(proc)
            if not self._closed.is_set():
                gone, held = held or await self._docker_state(container, watch, fresh_after), None
                if gone is not None:
                    yield [gone]
            if await self._sleep(1.0):
                return

    async def _search_docker(self, container: str, pattern: str, where: str, *, regex: bool, ignore_case: bool,
                             context: int, limit: int, newest: bool) -> list[LogMatch]:
        """``docker logs --since A --until B | grep`` (``commands.docker_search``): only the matches."""
        rng = gap_range(where)
        a, b = fixed_stamp(rng.get("since", "")), fixed_stamp(rng.get("until", "")) if rng.get("until") else None
        if a is None or (rng.get("until") and b is None):
            raise BackendError(f"not a time range of a container's log (since=…, until=…): {where!r}")
        script = C.docker_search_script(container, a, b, pattern, regex=regex, ignore_case=ignore_case,
                                        context=context, limit=limit, newest=newest, docker=self._docker)
        rc, out, err = await self._capture(["sh", "-c", script], timeout=300)
        matches = parse_docker_search(out.decode("utf-8", "replace"), context=context)
        if not matches and (rc != 0 or err.strip()):
            raise BackendError(f"search of the container's log failed: {err.decode(errors='replace').strip()[:300]}")
        return matches[-limit:] if newest else matches[:limit]

    async def _docker_state(self, container: str, watch: PidWatch, fresh_after: datetime) -> LogRecord | None:
        """Read the container's state into ``watch``; the exit record when it stopped (a container
        started after ``fresh_after`` is the new server even when following the next boot)."""
        try:
            rc, out, _ = await self._capture([*self._docker, "inspect", "-f", DOCKER_STATE_FORMAT, container])
        except BackendError:
            return None
        state = parse_docker_state(out.decode(errors="replace")) if rc == 0 else None
        if state is None:
            return None
        started, running, detail = state
        started_at = parse_rfc3339(started)
        gone = watch.observe(started, running, fresh=started_at is not None and started_at >= fresh_after)
        if gone is None:
            return None
        return exit_record(None, detail or f"container {container} stopped", at_start=gone.at_start,
                           ts=datetime.now(UTC), source="docker")

    # -- search (``SearchableLog``) -----------------------------------------------------------------

    async def search_log(
        self, pattern: str, where: str, *, regex: bool = False, ignore_case: bool = True, context: int = 0,
        limit: int = 100, newest: bool = False,
    ) -> list[LogMatch]:
        """Lines of a gap that contain ``pattern`` (``SearchableLog``); a journal's through
        ``_search_journal``, a container's through ``_search_docker``. A file's: GNU grep reads the file
        from the gap's first byte (its stdin positioned there: no copy through a pipe) and stops
        at its limit; a ``.gz`` copy through ``gzip -dc``. Each record's cursor is the absolute
        byte offset after its line; ``line_no`` its line number in the gap (None in a .gz)."""
        parts = gap_range(where)
        if "since" in parts and self.host.container and not self.host.log_file:  # a container's gap: two times
            return await self._search_docker(self.host.container, pattern, where, regex=regex,
                                             ignore_case=ignore_case, context=context, limit=limit, newest=newest)
        if "bytes" not in parts and self.host.unit and not (self.host.log_file or self.host.container):
            return await self._search_journal(pattern, where, regex=regex, ignore_case=ignore_case, limit=limit,
                                              newest=newest)  # a journal's gap: between two cursors
        rng = parts.get("bytes")
        if rng is None:
            raise BackendError(f"host '{self.name}': cannot search {where!r} here (not a byte range of a file)")
        try:
            a, b = (int(x) for x in rng.split("-", 1))
        except ValueError:
            raise BackendError(f"not a byte range: {rng!r}") from None
        named = parts.get("path") or self.host.log_file
        if not named:
            raise BackendError(f"host '{self.name}': no log file to search")
        path = _expand(named)
        limit = max(1, int(limit))
        context = max(0, int(context))
        env = {**os.environ, "LC_ALL": "C"}
        gz = path.name.endswith(".gz")
        argv = grep_argv(pattern, regex=regex, ignore_case=ignore_case, context=context,
                         limit=None if newest or gz else limit)
        procs: list[asyncio.subprocess.Process] = []
        try:
            if gz:
                rfd, wfd = os.pipe()
                try:
                    procs.append(await asyncio.create_subprocess_exec(
                        "gzip", "-dc", "--", str(path), stdin=asyncio.subprocess.DEVNULL, stdout=wfd,
                        stderr=asyncio.subprocess.DEVNULL, preexec_fn=PREEXEC))
                    procs.append(await asyncio.create_subprocess_exec(
                        *argv, stdin=rfd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
                        preexec_fn=PREEXEC))
                finally:
                    os.close(rfd)
                    os.close(wfd)
                base = 0
            else:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError as exc:
                    raise BackendError(f"cannot search {path}: {exc.strerror or exc}") from exc
                try:
                    size = os.fstat(fd).st_size
                    if size < b:
                        raise BackendError(f"{path}: bytes {a}-{b} are gone (the file has {size} bytes now: "
                                           "rotated or truncated since)")
                    os.lseek(fd, a, os.SEEK_SET)
                    procs.append(await asyncio.create_subprocess_exec(
                        *argv, stdin=fd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
                        preexec_fn=PREEXEC))
                finally:
                    os.close(fd)
                base = a
        except FileNotFoundError as exc:
            for p in procs:
                await stop_process(p)
            raise BackendError(f"cannot search {path}: {exc.filename or 'grep/gzip'} not found") from exc
        self._procs.update(procs)
        grep = procs[-1]
        try:
            found = await collect_matches(grep, pattern, base, a, b, ignore_case=ignore_case, context=context,
                                           limit=limit, newest=newest, numbered=not gz,
                                           max_line=MAX_LINE_BYTES)
            stopped_early = False
            try:  # done by itself (EOF, -m): reaped by asyncio, not by a terminate() racing its exit
                async with asyncio.timeout(0.25):
                    await grep.wait()
            except TimeoutError:  # still reading past the range: not needed any more
                stopped_early = True
                await stop_process(grep)
            _out, err = await grep.communicate()  # what is left in its pipes (it has exited): closes them
            rc = grep.returncode
            if rc not in (0, 1) and not stopped_early:
                text = err[-4096:].decode(errors="replace").strip()
                raise BackendError(f"grep: {text or f'exit {rc}'}")
        finally:
            for p in procs:
                await stop_process(p)
                self._procs.discard(p)
        return found

    # -- GPUs ------------------------------------------------------------------------------------

    async def gpu_stream(self, interval_s: float = 1.0) -> AsyncIterator[list[GpuSample]]:
        if not self._started:
            await self.start()
        if not self._gpu_ok:
            return
        wanted = self.host.gpus
        while not self._closed.is_set():
            t0 = time.monotonic()
            try:
                samples = await asyncio.to_thread(self._nvml.sample, wanted, self._clock())
            except Exception as exc:
                raise BackendError(f"NVML: {nvml_text(exc)}") from exc
            yield samples
            if await self._sleep(max(0.0, interval_s - (time.monotonic() - t0))):
                return

    async def gpu_processes(self) -> list[GpuProcess]:
        if not self._gpu_ok:
            return []
        return await asyncio.to_thread(self._nvml.processes, self.host.gpus)

    async def server_pids(self) -> set[int]:
        unit = self.host.unit
        if not unit:
            if self.pid_file is None:
                return set()
            pid, alive, _age = pid_reading(self.pid_file)
            if pid is None or not alive:
                return set()
            return {pid} | await asyncio.to_thread(descendants, {pid})
        try:
            rc, out, _ = await self._capture(
                [*self._systemctl, "show", "-p", "MainPID", "-p", "ControlGroup", unit], timeout=10.0
            )
        except BackendError:
            return set()
        if rc != 0:
            return set()
        props = dict(line.split("=", 1) for line in out.decode(errors="replace").splitlines() if "=" in line)
        return await asyncio.to_thread(pids_of, props.get("MainPID", ""), props.get("ControlGroup", ""))

    # -- commands --------------------------------------------------------------------------------

    def service_ops(self) -> HostOps:
        """The guarded service's operations here (``kvtui.hosts.service``)."""
        return ShellOps(self)

    def open_port(self, port: int) -> contextlib.AbstractAsyncContextManager[tuple[str, int]]:
        """The server's port on this machine's loopback (the readiness probe): nothing to open."""
        return direct(port)

    async def metrics(self, port: int, *, timeout: float = 10.0) -> str:
        """The server's ``/metrics`` on this machine's loopback (``kvtui.hosts.metrics``)."""
        return await metrics_via_port(self, port, self.name, timeout=timeout)

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        try:
            proc = await asyncio.create_subprocess_shell(
                command,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=PREEXEC,
            )
        except OSError as exc:
            raise BackendError(f"cannot run a shell on this machine: {exc.strerror or exc}") from exc
        self._procs.add(proc)
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate(input)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return CommandResult(command, 124, "", f"timed out after {timeout:g} s")
        finally:
            self._procs.discard(proc)
        return CommandResult(
            command, proc.returncode if proc.returncode is not None else -1,
            out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
        )


def _expand(path: str) -> Path:
    return Path(path).expanduser()


def _read_checked(fh: Any, head: bytes) -> tuple[bytes, bool]:
    """The next ``READ_CHUNK`` of ``fh``, and whether the file still begins with ``head`` after
    it was read (False: truncated or replaced in place meanwhile — the bytes are not its own:
    none are returned, the position is left where it was)."""
    data = fh.read(READ_CHUNK)
    if not head or os.pread(fh.fileno(), len(head), 0) == head:
        return data, True
    fh.seek(-len(data), os.SEEK_CUR)  # not consumed
    return b"", False


def _journal_boot_start(records: Sequence[LogRecord], engine: str) -> int:
    """Index of the current boot's first record in a journal window (the tracker's last boot
    start, else the last systemd ``Starting``/``Started`` line, else 0)."""
    starts = _boot_starts(records, engine)
    if starts:
        return starts[-1]
    for i in range(len(records) - 1, -1, -1):
        r = records[i]
        if r.ident == "systemd" and (r.text.startswith("Started ") or r.text.startswith("Starting ")):
            return i
    return 0


