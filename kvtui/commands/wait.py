"""``kvtui wait NAME [--timeout S] [--stall-timeout S] [--next] [--follow-restarts] [--json]``.

One wait for a host and a ``[deployments.NAME]`` (issue 23): a host is a deployment of one node.
The nodes' monitors are built once (``config.node_hosts``), run under a ``DeploymentMonitor`` and
driven by one loop (``follow``); a ``View`` decides: ``Waiter`` below for a host (the node's own
boots, as described here), ``kvtui.commands.wait_deployment.DeploymentWaiter`` for a deployment (the
merged boot). The last lines and the boot on stdout: ``kvtui.commands.wait_report``.

Follows the host's current boot (``--next``: the next one to start) until it is ready (exit 0)
or fails (exit 1); ``--follow-restarts`` keeps waiting through automatic restarts until a boot is
ready or the time runs out. A boot stopped by an operator (a manual restart) is not a failure:
the wait goes on with the boot that replaces it. Phase progress goes to stderr
(``[  12.3s] load_weights``, seconds since the boot started), and a heartbeat whenever nothing
else was printed for ``HEARTBEAT_S`` (``… still waiting after 40s: boot 1 in load weights 12/61
shards``), so a CI log is never silent for more than 10 s; then the boot's summary to stdout
(``--json``: the boot object of ``kvtui replay --json``, also on a timeout when a boot was seen).
Exit codes: 0 ready, 1 failed, 3 connection or configuration, 5 timed out.

The stall detector of the console (``kvtui.boot.stall``: progress is a line that is not a known
wait/heartbeat line, or a GPU-memory change) follows the boot too: once no progress came for
``[ui] stall_seconds`` the heartbeat names the stall (``stuck: vLLM has printed 'No available
shared memory broadcast block' 4× in 4m 00s — a rank has not joined (multi-node) or is hung``), and
``--stall-timeout S`` (default off) ends the wait with exit 5 after S seconds without progress.

``--next`` waits for a boot that *starts* after the wait began: the lines of the server already
running (grouped by the tracker into a boot without a launch) are never that boot, and a timeout
without a new boot says so ("no new boot started") instead of reporting the running one.

``--timeout`` holds on every path: the wait itself races a timer; closing the host afterwards is
bounded (a host that does not close, a stream that ignores cancellation are left behind); and in
the main thread a hard deadline (``--timeout`` + ``HARD_GRACE``, SIGALRM) ends a wait whose event
loop is blocked by a synchronous call, still with exit 5.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeVar

from kvtui import fmt
from kvtui.boot import Boot, BootStatus
from kvtui.boot.stall import Stall, StallDetector
from kvtui.commands.wait_deployment import DeploymentWaiter, Result
from kvtui.commands.wait_report import report_deployment, report_host
from kvtui.commands.watch import first_deployment_sample, human_line, sample_json
from kvtui.config import ConfigError, load_config
from kvtui.engines.events import Model, Phase
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE
from kvtui.history import eta, recorder_for
from kvtui.history.eta import past_boots
from kvtui.history.recorder import recordable
from kvtui.hosts.backend import BackendError, ConnState, ConnStatus, LogStart
from kvtui.hosts.factory import make_backend
from kvtui.hosts.probe import DEFAULT_PROBE_TIMEOUT_S, boot_port, can_probe, mark_not_serving, probe, served_model
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode
from kvtui.serving_live import DeploymentServingReader, ServingReader, first_reading
from kvtui.spool import SpoolError
from kvtui.updates import BootState, ConnUpdate, GpuUpdate, LogBatch, MonitorUpdate, columns

if TYPE_CHECKING:
    from kvtui.boot.deployment import DeploymentBoot
    from kvtui.config import HostConfig
    from kvtui.history.doc import BootDoc

_FATAL_STATES = frozenset({ConnState.FAILED, ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED})
CLOSE_LIMIT = 1.5  # seconds for the history's last writes after the wait (its flush, its close)
HARD_GRACE = 5.0  # the hard deadline: --timeout + this, when the event loop itself did not get there
HEARTBEAT_S = fmt.HEARTBEAT_S  # a heartbeat line after this long without output
# a new boot's "started" line waits at most this long (loop clock) for the boot's number in the
# history (``kvtui.history.ident``: the recorder writes it off the loop within milliseconds)
NAME_WAIT_S = 2.0


@dataclass(slots=True)
class Outcome:
    code: int
    boot: Boot | None = None
    index: int | None = None
    message: str = ""
    # the boot's JSON taken when the wait decided (the monitor goes on feeding serving lines into
    # the same Boot until it is closed: the printed object is the boot at its ready/failed moment)
    snapshot: dict[str, object] | None = None


@dataclass(slots=True)
class Waiter:
    """The sink of the monitor: decides when the wait is over, prints progress."""

    monitor: HostMonitor
    err: TextIO
    next_boot: bool
    follow_restarts: bool
    t0: float
    clock: Callable[[], float] = time.monotonic
    done: asyncio.Future[Outcome] | None = None
    following: int | None = None
    base: int = 0  # the first boot followed: the later ones are announced ("boot #14 started")
    first_seen: dict[int, float] = field(default_factory=dict)  # boot index -> clock() when first seen
    printed: dict[int, int] = field(default_factory=dict)  # boot index -> phase spans printed
    noted_end: set[int] = field(default_factory=set)
    last_conn: ConnStatus | None = None
    last_out: float | None = None  # clock() of the last line printed (None: t0)
    history: Sequence[BootDoc] = ()  # the host's stored boots, for the phase ETAs
    now: Callable[[], float] = time.time  # the host's wall clock (the ETA's elapsed time, the stall's)
    # the console's stall detector (on the host's clock): the heartbeat names a stall once it is
    # ``stall_notice_s`` old; ``stall_timeout`` (--stall-timeout, None: off) ends the wait (exit 5)
    stall: StallDetector = field(default_factory=lambda: StallDetector(0.0))
    stall_notice_s: float = 120.0
    stall_timeout: float | None = None
    notes_said: int = 0  # the follower's notes printed so far (``HostMonitor.notes``)

    def __call__(self, updates: Sequence[MonitorUpdate]) -> None:
        if self.done is None or self.done.done():
            return
        self.say_notes()
        boots_changed = False
        now = self.now()
        if any(isinstance(u, BootState) and u.new_boot for u in updates):
            self.stall.reset(now)  # before its lines: they are the new boot's
        for u in updates:
            if isinstance(u, ConnUpdate):
                self._conn(u.status)
            elif isinstance(u, BootState | LogBatch):
                # lines too: a boot's status can change without a BootState (the tracker reports no
                # change when a "Stopping …" line stops a boot that is still starting)
                boots_changed = True
                if isinstance(u, LogBatch):
                    self.stall.feed(list(columns(u.parts)), now)
            elif isinstance(u, GpuUpdate):
                self.stall.gpu(u.samples, now)
        if boots_changed and not self.done.done():
            self._boots()
        if not self.done.done():
            self.check_stall()

    def say_notes(self) -> None:
        """The follower's notes ("no server start in the last N bytes of FILE", a rotation), once
        each, on stderr."""
        m = self.monitor
        new = m.notes_seen - self.notes_said
        if new <= 0:
            return
        self.notes_said = m.notes_seen
        for note in list(m.notes)[-new:]:
            self.say(f"note: {note}")

    # -- stall -------------------------------------------------------------------------------

    def followed(self) -> tuple[int, Boot] | None:
        boots = self.monitor.tracker.boots
        if self.following is None or self.following >= len(boots):
            return None
        return self.following, boots[self.following]

    def current_stall(self, threshold: float) -> Stall | None:
        """The followed boot's stall once ``threshold`` seconds passed without progress."""
        got = self.followed()
        if got is None:
            return None
        return self.stall.stall(got[1], self.now(), threshold)

    def check_stall(self) -> None:
        """``--stall-timeout``: no progress for that long ends the wait (exit 5) with the stall."""
        if self.stall_timeout is None or self.done is None or self.done.done():
            return
        stall = self.current_stall(self.stall_timeout)
        got = self.followed()
        if stall is None or got is None:
            return
        idx, boot = got
        where = f"{self.label(idx)} still {_where(boot)}"
        self._finish(Outcome(EXIT_TIMEOUT, boot, idx, f"no progress for {fmt.duration(stall.seconds)} "
                             f"(--stall-timeout {self.stall_timeout:g} s): {where}: {stall.text()}"))

    async def watch_stall(self, every: float = 1.0) -> None:
        """A silent log sends no update: look at the stall every ``every`` seconds too."""
        while self.done is not None and not self.done.done():
            self.check_stall()
            await asyncio.sleep(every)

    # -- connection ------------------------------------------------------------------------

    def _conn(self, st: ConnStatus) -> None:
        prev, self.last_conn = self.last_conn, st
        if st.state in _FATAL_STATES:
            msg = st.detail or st.state.value
            if st.state is ConnState.HOSTKEY_REFUSED and st.fingerprint and st.fingerprint not in msg:
                msg += f" (offered key {st.fingerprint})"
            self._finish(Outcome(EXIT_INPUT, message=f"{self.monitor.name}: {st.state.value}: {msg}"))
            return
        if st.state is ConnState.RECONNECTING and prev is not None and prev.state is ConnState.CONNECTED:
            retry = f", retrying in {st.retry_in:.0f} s" if st.retry_in else ""
            self.say(f"connection lost{retry}: {st.detail}" if st.detail else f"connection lost{retry}")
        elif st.state is ConnState.CONNECTED and prev is not None and prev.state is ConnState.RECONNECTING:
            self.say("reconnected")

    # -- boots -------------------------------------------------------------------------------

    def _eligible(self, index: int, boot: Boot) -> bool:
        """``--next``: the first boot that really starts after now (not the running server's
        lines, which the tracker groups into an implicit boot without a launch phase)."""
        if not self.next_boot:
            return True
        return index > 0 or any(p.name is Phase.LAUNCH for p in boot.phases)

    def _boots(self) -> None:
        boots = self.monitor.tracker.boots
        if not boots:
            return
        last = len(boots) - 1
        if self.following is None:
            if self.next_boot:
                first = next((i for i, b in enumerate(boots) if self._eligible(i, b)), None)
                if first is None:
                    return
                self.following = first
            else:
                self.following = last
            self.base = self.following
        for i in range(self.following, last + 1):
            boot = boots[i]
            if i != self.following:
                self.following = i
            if self._awaits_number(i, boot):
                return  # its lines (and what follows) once the history has numbered it
            self._progress(i, boot)
            if boot.status is BootStatus.READY:
                self._finish(Outcome(EXIT_OK, boot, i))
                return
            if boot.status is BootStatus.FAILED:
                if not self.follow_restarts:
                    self._finish(Outcome(EXIT_FAILED, boot, i))
                    return
                if i not in self.noted_end:
                    self.noted_end.add(i)
                    self.say_failure(i, boot)
                    self.say("waiting for an automatic restart (--follow-restarts)")
            elif boot.status is BootStatus.STOPPED and i not in self.noted_end:
                self.noted_end.add(i)
                self.say(f"{self.label(i)} stopped before it was ready; waiting for the next boot")

    def _announced(self, index: int) -> bool:
        """Whether boot ``index`` gets a "started" line (a boot after the first one followed)."""
        return index > self.base or self.next_boot

    def _awaits_number(self, index: int, boot: Boot) -> bool:
        """A new boot about to be announced waits (at most ``NAME_WAIT_S``) for its number in the
        history, so that its "started" line names it as every later line does; a timer looks
        again when the time is up (the monitor also publishes the boot again once numbered)."""
        if index in self.printed or not self._announced(index):
            return False
        hist = self.monitor.history
        if hist is None or hist.problem is not None or not recordable(boot):
            return False
        if self.monitor.boot_number(index) is not None:
            return False
        now = self.clock()
        first = self.first_seen.get(index)
        if first is None:
            first = self.first_seen[index] = now
            with contextlib.suppress(RuntimeError):  # (no running loop: a test's direct call)
                asyncio.get_running_loop().call_later(NAME_WAIT_S + 0.05, self._look_again)
        return now - first < NAME_WAIT_S

    def _look_again(self) -> None:
        if self.done is not None and not self.done.done():
            self._boots()

    def elapsed(self, boot: Boot, at: datetime | None) -> float:
        """Seconds from the boot's start to ``at`` (else since the wait began)."""
        start = boot.started_at
        if start is not None and at is not None:
            try:
                return max(0.0, (at - start).total_seconds())
            except TypeError:  # naive vs aware
                pass
        return self.clock() - self.t0

    def _progress(self, index: int, boot: Boot) -> None:
        done = self.printed.get(index)
        if done is None:
            done = self.printed[index] = 0
            self.first_seen.pop(index, None)
            if self._announced(index):
                when = f" at {boot.started_at:%H:%M:%S}" if boot.started_at is not None else ""
                self.say(f"{self.label(index)} started{when}")
        for span in boot.phases[done:]:
            name = fmt.phase_label(span.name) + (" (draft)" if span.model is Model.DRAFT else "")
            self.say(name, self.elapsed(boot, span.start))
        self.printed[index] = len(boot.phases)

    def say_failure(self, index: int, boot: Boot) -> None:
        f = boot.failure
        if f is None:
            self.say(f"{self.label(index)} failed")
            return
        where = f" in {fmt.phase_label(f.phase)}" if f.phase is not None else ""
        self.say(f"failed{where}: {f.kind.value}: {fmt.one_line(f.message, 300)}", self.elapsed(boot, boot.ended_at))
        if f.hint:
            self.say(f"hint: {f.hint}")

    # -- output --------------------------------------------------------------------------------

    def label(self, index: int) -> str:
        """The boot in messages: ``boot #13`` (its number in the history), else ``boot 2 of this
        log`` (``kvtui.history.ident``)."""
        return self.monitor.boot_label(index)

    def say(self, text: str, elapsed: float | None = None) -> None:
        stamp = f"{fmt.stamp(elapsed)} " if elapsed is not None else ""
        print(f"{stamp}{text}", file=self.err, flush=True)
        self.last_out = self.clock()

    # -- heartbeat -----------------------------------------------------------------------------

    def heartbeat_text(self) -> str:
        """Where the wait is: the followed boot's phase and its progress, or what it waits for."""
        waited = fmt.duration(self.clock() - self.t0)
        boots = self.monitor.tracker.boots
        if self.following is not None and self.following < len(boots):
            boot = boots[self.following]
            text = f"… still waiting after {waited}: {self.label(self.following)} {_where(boot)}"
            notice = self.stall_notice_s if self.stall_timeout is None else min(self.stall_notice_s, self.stall_timeout)
            stall = self.stall.stall(boot, self.now(), notice)
            if stall is not None:
                text += "; " + stall.text()
            if boot.status is BootStatus.STARTING and boot.phases:
                text += "; " + self.eta_text(boot)
            return text
        st = self.last_conn
        if st is not None and st.state is not ConnState.CONNECTED:
            return f"… still waiting after {waited}: connection {st.state.value}" + (
                f" ({st.detail})" if st.detail else "")
        if self.next_boot:
            running = " (the running server goes on; nothing has restarted it)" if boots else ""
            return f"… still waiting after {waited}: no new boot has started{running}"
        return f"… still waiting after {waited}: no server log line yet"

    def eta_text(self, boot: Boot) -> str:
        """The boot's ETA from the host's history (``kvtui.history.eta``), or why there is none."""
        now = datetime.fromtimestamp(self.now(), tz=UTC)
        return eta.estimate(boot, self.history, now, host=self.monitor.name).text()

    async def heartbeat(self, every: float) -> None:
        """Print ``heartbeat_text`` whenever nothing was printed for ``every`` seconds."""
        while True:
            last = self.t0 if self.last_out is None else self.last_out
            due = last + every - self.clock()
            if due > 0:
                await asyncio.sleep(due)
                continue
            if self.done is not None and self.done.done():
                return
            self.say(self.heartbeat_text())

    # -- the wait's view (``View``) ---------------------------------------------------------------

    def on_updates(self, node: DeploymentNode, updates: Sequence[MonitorUpdate], dep: DeploymentBoot | None) -> None:
        """The sink of the one node's monitor (through ``DeploymentMonitor``): its own updates."""
        self(updates)

    def beats(self) -> list[Coroutine[Any, Any, None]]:
        """The heartbeat, and with ``--stall-timeout`` the look at a silent log's stall."""
        beats = [self.heartbeat(HEARTBEAT_S)]
        if self.stall_timeout is not None:
            beats.append(self.watch_stall())
        return beats

    def crashed(self, message: str) -> Outcome:
        return Outcome(EXIT_INPUT, message=message)

    async def timed_out(self, timeout: float) -> Outcome:
        """``--timeout`` ran out: the followed boot, where it is (``--next`` with no new boot: so)."""
        monitor = self.monitor
        if self.next_boot and self.following is None:
            # the running server's lines are not the next boot: say that none started
            running = " (the running server went on; nothing restarted it)" if monitor.tracker.boots else ""
            return Outcome(EXIT_TIMEOUT, message=f"timed out after {timeout:g} s: no new boot started{running}")
        if monitor.history is not None:  # the boot's number (its first write may be under way): bounded
            await asyncio.to_thread(monitor.history.flush, CLOSE_LIMIT)
        boots = monitor.tracker.boots
        idx = self.following if self.following is not None else (len(boots) - 1 if boots else None)
        boot = boots[idx] if idx is not None and boots else None
        seen = "no boot seen"
        if boot is not None and idx is not None:
            seen = f"{self.label(idx)} still {_where(boot)}"
        return Outcome(EXIT_TIMEOUT, boot, idx, f"timed out after {timeout:g} s: {seen}")

    def _finish(self, outcome: Outcome) -> None:
        if self.done is not None and not self.done.done():
            if outcome.boot is not None and outcome.snapshot is None:
                outcome.snapshot = outcome.boot.to_json()
            self.done.set_result(outcome)


def _where(boot: Boot) -> str:
    """``in load weights 12/61 shards`` while a boot starts (the phase and its progress), else its
    status and phase (``stopped in load weights``)."""
    if boot.status is BootStatus.STARTING and boot.phases:
        return f"in {fmt.boot_progress(boot)}"
    return boot.status.value + (f" in {fmt.phase_label(boot.phase)}" if boot.phase is not None else "")



R = TypeVar("R")


class View(Protocol[R]):
    """What decides a wait and says its progress: ``Waiter`` (a host: the node's own boots) or
    ``kvtui.commands.wait_deployment.DeploymentWaiter`` (a deployment: the nodes' merged boot). The one
    loop (``follow``) feeds it the deployment monitor's updates and sets ``done`` for it."""

    done: asyncio.Future[R] | None

    def on_updates(self, node: DeploymentNode, updates: Sequence[MonitorUpdate],
                   dep: DeploymentBoot | None) -> None: ...

    def beats(self) -> list[Coroutine[Any, Any, None]]: ...

    def crashed(self, message: str) -> R: ...

    async def timed_out(self, timeout: float) -> R: ...


async def follow(view: View[R], dm: DeploymentMonitor, timeout: float,
                 timer: Callable[[float], Awaitable[object]] | None,
                 ready: Callable[[R, list[asyncio.Task[None]]], Awaitable[R]]) -> R:
    """The one wait, for a host (a deployment of one node) and a deployment: run the nodes'
    monitors into ``view`` until it decides, ``--timeout`` runs out (``timer``) or a node's monitor
    ends; then ``ready`` (the proof of a ready boot, while the monitors still run: the probe, the
    first serving sample); then every node is closed, bounded, and its history closed."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[R] = loop.create_future()
    view.done = done
    tasks = dm.start(view.on_updates)
    expiry = asyncio.ensure_future((timer or asyncio.sleep)(timeout))
    beats = [asyncio.create_task(b) for b in view.beats()]
    try:
        pending: set[asyncio.Future[Any]] = {done, expiry, *tasks}
        finished, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        crashed = next((t for t in tasks if t in finished), None)
        if done in finished:
            result = done.result()
        elif crashed is not None:
            node = dm.nodes[tasks.index(crashed)]
            crash = crashed.exception()
            st = node.monitor.status
            detail = str(crash) if crash is not None else (st.detail or st.state.value)
            result = view.crashed(f"{node.name}: cannot follow the host: {detail}")
        else:
            result = await view.timed_out(timeout)
        result = await ready(result, tasks)
    finally:
        for beat in beats:
            beat.cancel()
        expiry.cancel()
        await dm.close()  # each node bounded (``monitor.deployment.CLOSE_LIMIT``): a host that does not close,
        # a stream that ignores its cancellation must not hold the exit code back
    for n in dm.nodes:
        if n.monitor.history is not None:
            # the monitor's close may have run out of time while the history file was locked: the
            # recorder's own close ends its tries (bounded) and says how many boots it could not write
            await asyncio.to_thread(n.monitor.history.close, CLOSE_LIMIT)
    return result


async def wait_for_boot(
    args: argparse.Namespace,
    *,
    stdout: TextIO,
    stderr: TextIO,
    clock: Callable[[], float] | None = None,
    timer: Callable[[float], Awaitable[object]] | None = None,
) -> int:
    """The wait. ``clock``: the hosts' time (the demo host's, the monitor's); ``timer``: what
    ``--timeout`` waits on (default ``asyncio.sleep``; tests pass an event to time out on cue)."""
    began = time.monotonic()  # --next: a server started from now on is the next boot, however slow the host
    timeout: float = args.timeout
    if not timeout > 0:
        print(f"kvtui wait: --timeout must be a positive number of seconds, got {timeout:g}", file=stderr)
        return EXIT_USAGE
    stall_timeout: float | None = getattr(args, "stall_timeout", None)
    if stall_timeout is not None and not stall_timeout > 0:
        print(f"kvtui wait: --stall-timeout must be a positive number of seconds, got {stall_timeout:g}",
              file=stderr)
        return EXIT_USAGE
    name: str = args.host
    try:
        config = load_config(getattr(args, "hosts", None))
        dep_cfg = config.deployment(name)
        node_hosts = config.node_hosts(name)  # a host: [(name, host)], a deployment of one node
    except ConfigError as exc:
        print(f"kvtui wait: {exc}", file=stderr)
        return EXIT_INPUT
    options = MonitorOptions(
        start=LogStart.NEXT_BOOT if args.next else LogStart.CURRENT_BOOT,
        gpu_interval=5.0,  # the wait does not look at GPUs; keep the host quiet
        log_window=1000,
        clock=clock or time.time,
        retry_start=False,  # an unreachable host is exit 3 at once; later drops are waited out
        began=began,
    )
    nodes: list[DeploymentNode] = []
    try:
        for node_name, host in node_hosts:
            backend = make_backend(node_name, host, clock=clock)
            monitor = HostMonitor(node_name, backend, host=host, history=recorder_for(node_name, config.history),
                                  options=options)
            nodes.append(DeploymentNode(node_name, host, monitor))
    except (BackendError, SpoolError) as exc:
        print(f"kvtui wait: {name}: {exc}", file=stderr)
        return EXIT_INPUT
    if dep_cfg is None:
        dm = DeploymentMonitor(name, nodes, next_boot=bool(args.next))
        return await _wait_host(args, config.ui.stall_seconds, dm, stdout=stdout, stderr=stderr, clock=clock,
                                timer=timer)
    dm = DeploymentMonitor(name, nodes, next_boot=bool(args.next), bound_s=dep_cfg.hang_seconds)
    return await _wait_deployment(args, config.ui.stall_seconds, dm, stdout=stdout, stderr=stderr, clock=clock,
                                  timer=timer)


async def _wait_host(args: argparse.Namespace, stall_notice_s: float, dm: DeploymentMonitor, *, stdout: TextIO,
                     stderr: TextIO, clock: Callable[[], float] | None,
                     timer: Callable[[float], Awaitable[object]] | None) -> int:
    """A host: its one node's boots decide (``Waiter``), numbered by the history; ready is proved
    by the probe, and with ``--serving`` by a first serving sample."""
    node = dm.nodes[0]
    monitor, host = node.monitor, node.host
    serving = None
    if getattr(args, "serving", False):  # before the monitor runs: the log fallback sees the boot's lines
        serving = ServingReader(monitor, clock or time.time)
    loop = asyncio.get_running_loop()
    waiter = Waiter(monitor, stderr, next_boot=bool(args.next), follow_restarts=bool(args.follow_restarts),
                    t0=loop.time(), clock=loop.time)
    waiter.now = clock or time.time
    waiter.stall_notice_s = stall_notice_s
    waiter.stall_timeout = getattr(args, "stall_timeout", None)
    waiter.history = await asyncio.to_thread(past_boots, args.host)
    what = "the next boot" if args.next else "the current boot"
    print(f"kvtui wait: {args.host} ({host.source_label or host.kind}): following {what}", file=stderr)

    async def ready(outcome: Outcome, tasks: list[asyncio.Task[None]]) -> Outcome:
        if outcome.code == EXIT_OK and outcome.boot is not None:
            outcome = await _probe_ready(outcome, monitor, host, args, stderr, args.timeout - (loop.time() - waiter.t0))
        if outcome.code == EXIT_OK and outcome.boot is not None and serving is not None:
            outcome = await _first_serving(outcome, serving, args, stderr, args.timeout - (loop.time() - waiter.t0))
        return outcome

    outcome = await follow(waiter, dm, args.timeout, timer, ready)
    note = monitor.history.unwritten_note() if monitor.history is not None else None
    if note:
        print(f"kvtui wait: {args.host}: note: {note}", file=stderr)
    return report_host(outcome, monitor, args, stdout, stderr, waiter)


async def _wait_deployment(args: argparse.Namespace, stall_notice_s: float, dm: DeploymentMonitor, *,
                           stdout: TextIO, stderr: TextIO, clock: Callable[[], float] | None,
                           timer: Callable[[float], Awaitable[object]] | None) -> int:
    """A ``[deployments.NAME]``: the nodes' merged boot decides (``DeploymentWaiter``); with
    ``--serving`` a first serving sample through the same node monitors."""
    name: str = args.host
    now = clock or time.time
    # before the monitors run: the log fallback sees the boots' lines
    serving = DeploymentServingReader(dm, now) if getattr(args, "serving", False) else None
    loop = asyncio.get_running_loop()
    waiter = DeploymentWaiter(dm, stderr, t0=loop.time(), clock=loop.time)
    waiter.now = dm.wall = now  # the hosts' clock: their lines' stamps say where each node's backlog ends
    waiter.stall_notice_s = stall_notice_s
    waiter.stall_timeout = getattr(args, "stall_timeout", None)
    what = "the next boot" if args.next else "the current boot"
    print(f"kvtui wait: {name} ({len(dm.nodes)} nodes: {', '.join(n.name for n in dm.nodes)}): following {what}",
          file=stderr)

    async def ready(result: Result, tasks: list[asyncio.Task[None]]) -> Result:
        if result.code != EXIT_OK or serving is None:
            return result
        left = max(1.0, float(args.timeout) - (loop.time() - waiter.t0))
        print(f"kvtui wait: {name}: reading a first serving sample", file=stderr, flush=True)
        by_name = [(n.name, t) for n, t in zip(dm.nodes, tasks, strict=True)]
        result.serving_code, result.serving = await first_deployment_sample(name, serving, by_name, left, stderr, now)
        return result

    result = await follow(waiter, dm, args.timeout, timer, ready)
    return report_deployment(result, dm.nodes, args, stdout, stderr)


async def _probe_ready(outcome: Outcome, monitor: HostMonitor, host: HostConfig, args: argparse.Namespace,
                       stderr: TextIO, left: float) -> Outcome:
    """Prove "ready" with a real request (``kvtui.hosts.probe``): on by default when the boot's
    arguments name its port (``--no-probe`` or ``probe = false`` turn it off); a boot that does
    not answer a 1-token request within the time left is failed, kind ``not_serving``."""
    boot = outcome.boot
    assert boot is not None
    wanted = getattr(args, "probe", None)
    if wanted is False or (wanted is None and not getattr(host, "probe", True)):
        return outcome
    port = boot_port(boot.flags)
    if port is None:
        if wanted:
            print(f"kvtui wait: {args.host}: --probe: the boot's arguments name no port; not probed", file=stderr)
        return outcome
    if not can_probe(monitor.backend):
        print(f"kvtui wait: {args.host}: this kind of host cannot reach the server's port yet; "
              "ready on the log's word (not probed)", file=stderr)
        return outcome
    model = getattr(host, "probe_model", None) or served_model(boot.flags)
    print(f"kvtui wait: {args.host}: the log says ready; asking the server on port {port} for one token",
          file=stderr, flush=True)
    res = await probe(monitor.backend, port, model=model, timeout=max(1.0, min(left, DEFAULT_PROBE_TIMEOUT_S)))
    snap = outcome.snapshot if outcome.snapshot is not None else boot.to_json()
    snap["probe"] = res.to_json()
    if res.ok:
        print(f"kvtui wait: {args.host}: ✔ {res.headline()}", file=stderr, flush=True)
        return Outcome(outcome.code, boot, outcome.index, outcome.message, snap)
    mark_not_serving(boot, res)
    failed = boot.to_json()
    failed["probe"] = res.to_json()
    return Outcome(EXIT_FAILED, boot, outcome.index, outcome.message, failed)


async def _first_serving(outcome: Outcome, reader: ServingReader, args: argparse.Namespace, stderr: TextIO,
                         left: float) -> Outcome:
    """``--serving``: after ready, a first serving sample (``kvtui.commands.watch``), on stderr and
    as the JSON's ``serving`` (``kvtui watch --json``'s object); none within the time left: exit 5."""
    boot = outcome.boot
    assert boot is not None
    print(f"kvtui wait: {args.host}: reading a first serving sample", file=stderr, flush=True)
    r = await first_reading(reader, boot, timeout=max(1.0, left))
    snap = outcome.snapshot if outcome.snapshot is not None else boot.to_json()
    if r is None:
        snap["serving"] = None
        why = reader.metrics_error or "and no serving line in the log"
        return Outcome(EXIT_TIMEOUT, boot, outcome.index, f"ready, but no serving sample in {max(1.0, left):.0f} s "
                       f"({why})", snap)
    now = time.time()
    if reader.source == "log":
        print(f"kvtui wait: {args.host}: {reader.metrics_error}; from the log's serving lines", file=stderr)
    print(f"kvtui wait: {args.host}: serving: {human_line(r, now, args.host)}", file=stderr, flush=True)
    snap["serving"] = sample_json(r, args.host, now, reader.metrics_error)
    return Outcome(outcome.code, boot, outcome.index, outcome.message, snap)


class _Overdue(SystemExit):
    """The hard deadline passed: the wait is ended from the SIGALRM handler. A ``SystemExit``, so
    that asyncio lets it out of the task that was running (a blocked, synchronous call) instead of
    storing it as that task's result."""


@contextlib.contextmanager
def _hard_deadline(seconds: float) -> Iterator[None]:
    """Raise ``_Overdue`` in the main thread after ``seconds`` (and every second after, should
    the cleanup block too). Only in the main thread, where signals are delivered; else a no-op."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        raise _Overdue(EXIT_TIMEOUT)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)



def run(
    args: argparse.Namespace,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    clock: Callable[[], float] | None = None,
) -> int:
    err = stderr or sys.stderr
    timeout = float(args.timeout)
    coro = wait_for_boot(args, stdout=stdout or sys.stdout, stderr=err, clock=clock)
    if not timeout > 0:  # a usage error, reported by the wait itself
        return asyncio.run(coro)
    try:
        with _hard_deadline(timeout + HARD_GRACE):
            return asyncio.run(coro)
    except _Overdue:
        with contextlib.suppress(Exception):
            print(
                f"kvtui wait: timed out after {timeout:g} s: {args.host} did not answer in time "
                f"(a call blocked for more than {HARD_GRACE:g} s beyond the timeout)",
                file=err,
                flush=True,
            )
        return EXIT_TIMEOUT
