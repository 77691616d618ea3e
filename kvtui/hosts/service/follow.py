"""Following a restart of N >= 1 nodes (``follow_restarts``): a ``BootFollower`` per node reads
its log from *now* on its own stream (next to the monitor's), the restarts are issued (node 0
first), and the nodes' merged new boot (of one node: its boot) ready or failed, or a node's boot
whose argument dump contradicts the edits, ends the wait; heartbeats say where node 0's is.

The restart is issued only once the follower is *positioned*: its stream knows where the log ends
now, so a fast engine's whole boot cannot be written before the follower's start point (a
follower still locating the end on a loaded machine missed it, and the apply timed out). Backends
that say so (``PositionedLogSource``: SSH, local, demo, kube) are waited for, up to ``POSITION_LIMIT``;
others get the fixed settle time their ``HostOps`` names."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from kvtui import flags as fl
from kvtui import fmt
from kvtui.boot import Boot, BootStatus
from kvtui.boot.deployment import DeploymentBoot, diagnose_hang, merge_boots
from kvtui.bootlog import BootLog
from kvtui.engines.events import Engine
from kvtui.engines.exit_record import EXIT_IDENT, parse_exit
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_TIMEOUT
from kvtui.fmt import one_line
from kvtui.hosts.backend import BackendError, HostBackend, LogStart, PositionedLogSource, aclose_iter
from kvtui.hosts.service.model import EtaFn, ProgressFn, ServiceError

POSITION_LIMIT = 30.0  # seconds a positioning backend is given to locate the log's end


class RestartFailed(Exception):
    def __init__(self, error: ServiceError, node: int = 0) -> None:
        super().__init__(str(error))
        self.error = error
        self.node = node  # the index of the node whose restart failed


@dataclass(slots=True)
class FollowSide:
    """One node's restart to follow: its backend, engine, where its lines go, how long its log
    follower settles, and the restart (``stopped``: the old server's PIDs it stops)."""

    name: str
    backend: HostBackend
    engine: Engine | None
    say: ProgressFn
    trigger: Callable[[], Awaitable[None]]
    settle: float
    stopped: set[int] | None = None


async def follow_restarts(
    sides: Sequence[FollowSide], say: ProgressFn, *, timeout: float, expect: Sequence[fl.Edit] = (),
    heartbeat: ProgressFn | None = None, eta: EtaFn | None = None, hang_s: float = 180.0,
    stage: Callable[[str], None] | None = None,
) -> tuple[list[BootFollower], tuple[list[Boot | None], DeploymentBoot] | None]:
    """Start following every node's log (each positioned before any restart), issue the
    restarts in order (node 0 first: it hosts the rendezvous; the others right after), and wait
    until the nodes' merged new boot (``kvtui.boot.deployment``; of one node: its boot) is ready or
    failed, or a node's argument dump contradicts the edits: each node's new boot and the merged
    one (None: timed out); a hang is said once
    per diagnosis. A failed ``trigger`` raises ``RestartFailed``. ``stage`` hears ``"restart"``
    before the first restart and ``"follow"`` once every restart is issued. Heartbeats (with
    ``eta``) follow node 0's boot."""
    followers = [BootFollower(s.backend, s.engine, progress=s.say, heartbeat=heartbeat if i == 0 else None,
                              stopped=s.stopped, eta=eta) for i, s in enumerate(sides)]
    await asyncio.gather(*(f.start(s.settle) for f, s in zip(followers, sides, strict=True)))
    try:
        for f in followers:
            f.mark()
        if stage is not None:
            stage("restart")
        for i, s in enumerate(sides):
            try:
                await s.trigger()
            except ServiceError as exc:
                raise RestartFailed(exc, i) from exc
        for f in followers:
            f.triggered()
        if stage is not None:
            stage("follow")
        return followers, await _wait(followers, [s.name for s in sides], say, timeout, list(expect), hang_s)
    finally:
        for f in followers:
            await f.close()


async def _wait(followers: Sequence[BootFollower], names: Sequence[str], say: ProgressFn, timeout: float,
                expect: list[fl.Edit], hang_s: float) -> tuple[list[Boot | None], DeploymentBoot] | None:
    loop = asyncio.get_running_loop()
    since = loop.time()
    deadline = since + timeout
    said_hang = ""
    while True:
        followers[0].beat(loop.time(), since)
        picks = [f.settled(expect) for f in followers]
        dep = merge_boots([(n, p or f.current()) for n, f, p in zip(names, followers, picks, strict=True)])
        if dep.boot.status in (BootStatus.READY, BootStatus.FAILED) or any(
                p is not None and p.status not in (BootStatus.READY, BootStatus.FAILED) for p in picks):
            return [p or f.current() for p, f in zip(picks, followers, strict=True)], dep
        for f in followers:
            f.check()
        hang = diagnose_hang(dep, datetime.now().astimezone(), hang_s)
        if hang is not None and hang.summary != said_hang:
            said_hang = hang.summary
            say(f"hang: {hang.summary}")
            for c in hang.causes:
                say(f"  - {c}")
        left = deadline - loop.time()
        if left <= 0:
            return None
        nap = min([left, 1.0, *(f.nap(loop.time()) for f in followers[:1])])
        waits = [asyncio.ensure_future(f.changed()) for f in followers]
        try:
            await asyncio.wait(waits, timeout=nap, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


def timed_out(say: ProgressFn, follower: BootFollower, timeout: float) -> tuple[Boot | None, int, str]:
    last = follower.last_phase()
    say(f"timed out after {timeout:g} s waiting for the new boot" + (f" (last phase: {last})" if last
                                                                     else " (no boot seen)"))
    return follower.current(), EXIT_TIMEOUT, "timeout"


def boot_result(say: ProgressFn, boot: Boot) -> tuple[Boot, int, str]:
    if boot.status is BootStatus.READY:
        say("the new boot is ready")
        return boot, EXIT_OK, "ready"
    fail = boot.failure
    if fail is not None:
        where = f" in {fmt.phase_label(fail.phase)}" if fail.phase else ""
        say(f"the new boot failed{where}: {fail.kind.value}: {one_line(fail.message, 200)}")
        if fail.hint:
            say(f"hint: {fail.hint}")
    else:
        say(f"the new boot ended: {boot.status.value}")
    return boot, EXIT_FAILED, "failed"


class BootFollower:
    """Follows a host's log from *now* and tracks the boots that start from here on."""

    def __init__(
        self,
        backend: HostBackend,
        engine: Engine | None,
        *,
        progress: ProgressFn | None = None,
        heartbeat: ProgressFn | None = None,
        stopped: set[int] | None = None,
        eta: EtaFn | None = None,
    ) -> None:
        hint = engine if engine in (Engine.SGLANG, Engine.VLLM) else None
        # the old server's PIDs (shared with the restart that stops them): a backend's record of
        # their exit is the restart, not the new boot dying — a server started a moment before
        # the follow (the previous restart's) may be taken for the new one by the pid watch
        self._stopped = stopped if stopped is not None else set()
        self._backend = backend
        self._reader = BootLog(hint, max_boots=16)
        self._tracker = self._reader.tracker
        self._progress = progress
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._phase_seen: dict[int, str] = {}
        self._before: set[int] = set()  # boots seen before the restart was issued (ignored)
        self._during: set[int] = set()  # boots that began while it ran (trusted once they end)
        self._marked = False
        self._heartbeat = heartbeat
        self._eta = eta
        self._last_out: float | None = None  # loop time of the last progress line
        self.positioned = asyncio.Event()  # set: every line the host writes from now is followed
        self.positioned_after: float | None = None  # seconds ``start`` waited for it

    async def start(self, settle: float) -> None:
        """Start following; return once positioned (see the module docstring): a backend that
        says so within ``POSITION_LIMIT`` s, else after ``settle`` s. A stream that failed
        meanwhile returns at once (``wait`` raises its error)."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self._task = asyncio.create_task(self._pump(), name="kvtui-boot-follower")
        if not isinstance(self._backend, PositionedLogSource):
            await asyncio.sleep(0)
            await asyncio.sleep(settle)
            self.positioned.set()
            self.positioned_after = loop.time() - t0
            return
        done = asyncio.create_task(self.positioned.wait())
        try:
            await asyncio.wait({done, self._task}, timeout=POSITION_LIMIT, return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()
        self.positioned_after = loop.time() - t0
        if not self.positioned.is_set() and self._error is None and self._progress is not None:
            self._progress(f"the log follower did not find the log's end within {POSITION_LIMIT:g} s: "
                           "restarting anyway (the new boot's first lines may be missed)")

    async def _pump(self) -> None:
        backend = self._backend
        it = (backend.follow_next_boot(self.positioned.set) if isinstance(backend, PositionedLogSource)
              else backend.follow_log(LogStart.NEXT_BOOT))
        try:
            async for batch in it:
                for rec in batch:
                    if rec.ident == EXIT_IDENT and self._stopped:
                        gone = parse_exit(rec.text)
                        if gone is not None and gone.pid in self._stopped:
                            continue
                    self._reader.feed(rec)
                self._report()
                self._changed.set()
        except BackendError as exc:
            self._error = exc
            self._changed.set()
        finally:
            await aclose_iter(it)

    def _report(self) -> None:
        if self._progress is None:
            return
        for i, b in enumerate(self._tracker.boots):
            if b.phase is not None and self._phase_seen.get(i) != b.phase.value:
                self._phase_seen[i] = b.phase.value
                self._progress(f"boot: {fmt.phase_label(b.phase)}")
                self._last_out = asyncio.get_running_loop().time()

    def beat(self, now: float, since: float) -> None:
        """A heartbeat when nothing was said for ``fmt.HEARTBEAT_S``: the new boot's phase and
        its progress (shards, batches), or that none has started yet."""
        if self._heartbeat is None:
            return
        if self._last_out is None:
            self._last_out = since
        if now - self._last_out < fmt.HEARTBEAT_S:
            return
        self._last_out = now
        boot = self.current()
        where = (f"the new boot is in {fmt.boot_progress(boot)}" if boot is not None and boot.phases
                 else "no new boot has started yet")
        if boot is not None and boot.phases and self._eta is not None:
            try:
                eta = self._eta(boot)
            except Exception:  # the caller's estimate never stops the follow
                eta = None
            if eta:
                where += f"; {eta}"
        self._heartbeat(f"… still waiting after {fmt.duration(now - since)}: {where}")

    def mark(self) -> None:
        """Call right before issuing the restart: boots seen so far belong to the old server."""
        self._before = {id(b) for b in self._tracker.boots}
        self._marked = True

    def triggered(self) -> None:
        """Call when the restart command returned."""
        self._during = {id(b) for b in self._tracker.boots} - self._before

    def _candidates(self) -> list[Boot]:
        """Boots begun after the mark, except those stopped (by the restart itself, or an
        automatic restart of the old unit that the restart replaced) and, once positioned, those
        whose start is not in the log: serving lines with no start before them are the old
        server's last ones (vLLM's stats logger prints one more while it shuts down), not the
        new boot, whose start this follower reads."""
        positioned = self.positioned.is_set()
        return [b for b in self._tracker.boots if id(b) not in self._before and b.status is not BootStatus.STOPPED
                and not (positioned and b.start_missing is not None)]

    def current(self) -> Boot | None:
        c = self._candidates()
        return c[-1] if c else None

    def last_phase(self) -> str | None:
        b = self.current()
        return None if b is None or b.phase is None else b.phase.value

    def settled(self, expect: Sequence[fl.Edit] = ()) -> Boot | None:
        """The first new boot that is ready or failed, or that began after the restart returned
        and whose argument dump contradicts ``expect`` (not in effect); None while there is none."""
        for b in self._candidates():
            if b.status in (BootStatus.READY, BootStatus.FAILED):
                return b
            if id(b) not in self._during and b.flags and expect and fl.check_dump(b.engine, b.flags, expect):
                return b
        return None

    def check(self) -> None:
        """Raise when the log stream was lost."""
        if self._error is not None:
            raise ServiceError(f"lost the host's log while following the new boot: {self._error}", EXIT_INPUT)

    def nap(self, now: float) -> float:
        """How long the wait may sleep before this follower's next heartbeat is due."""
        if self._heartbeat is not None and self._last_out is not None:
            return max(0.01, self._last_out + fmt.HEARTBEAT_S - now)
        return 1.0

    async def changed(self) -> None:
        """Return when new lines came (at once when some came since the last call)."""
        await self._changed.wait()
        self._changed.clear()

    async def close(self, grace: float = 5.0) -> None:
        """Stop following (bounded: a backend that is slow to let go is left to finish alone)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=grace)
