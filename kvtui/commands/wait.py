"""``kvtui wait NAME [--timeout S] [--stall-timeout S] [--next] [--follow-restarts] [--json]``.

One wait for a host and a ``[deployments.NAME]`` (issue 23): a host is a deployment of one node.
The nodes' monitors are built once (``config.node_hosts``), run under a ``DeploymentMonitor`` and
driven by one loop (``follow``) into one decider (``Waiter``), which follows the deployment's
starts (``DeploymentMonitor.start_boot``: one node's boots, as they are; several nodes' merged boot
per start, ``kvtui.boot.deployment``). The last lines and the start on stdout:
``kvtui.commands.wait_report``.

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

Several nodes: the whole is ready when the head serves and the others caught up; a phase line
names the nodes not in it yet; a failure is named with its node. A node that holds the others
back is named by the hang diagnosis (``DeploymentMonitor.hang``, bound = the deployment's
``hang_seconds``): at once when its boot stopped, else when it trails the phase another node
reached for longer than the bound; the lagging nodes' hosts are asked what they can see (the
unit's state, its NCCL_*/GLOO_* environment): a lagging node whose unit is not running (or that
stopped) ends the wait with exit 1, else the diagnosis is printed and the wait goes on. No
decision names a node before every node's backlog — its log as it stood when the wait began — is
read (``DeploymentMonitor.names_held``); a node given up on is said with the decision. Each node
has its own stall detector: ``--stall-timeout`` ends the wait once no node made progress.

``--timeout`` holds on every path: the wait itself races a timer; closing the host afterwards is
bounded (a host that does not close, a stream that ignores cancellation are left behind); and in
the main thread a hard deadline (``--timeout`` + ``HARD_GRACE``, SIGALRM) ends a wait whose event
loop is blocked by a synchronous call, still with exit 5.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from kvtui import fmt
from kvtui.boot import Boot, BootStatus
from kvtui.boot.deployment import HEAD_ONLY, DeploymentBoot, Hang, NodeObservation
from kvtui.commands.wait_report import report, start_json
from kvtui.commands.watch import human_line, sample_json
from kvtui.config import ConfigError, load_config
from kvtui.engines.events import Model, Phase
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE
from kvtui.history import eta, recorder_for
from kvtui.history.eta import past_boots
from kvtui.history.recorder import recordable
from kvtui.hosts.backend import BackendError, ConnState, ConnStatus, LogStart
from kvtui.hosts.factory import make_backend
from kvtui.hosts.probe import DEFAULT_PROBE_TIMEOUT_S, mark_not_serving, not_probed_reason, probe, served_model
from kvtui.monitor import HostMonitor, MonitorOptions
from kvtui.monitor.deployment import DeploymentMonitor, DeploymentNode, NodeStalls, probe_nodes
from kvtui.serving_live import DeploymentServingReader, boot_port_of, first_reading
from kvtui.spool import SpoolError
from kvtui.updates import BootState, ConnUpdate, LogBatch, MonitorUpdate

if TYPE_CHECKING:
    from kvtui.history.doc import BootDoc

_FATAL_STATES = frozenset({ConnState.FAILED, ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED})
CLOSE_LIMIT = 1.5  # seconds for the history's last writes after the wait (its flush, its close)
HARD_GRACE = 5.0  # the hard deadline: --timeout + this, when the event loop itself did not get there
HEARTBEAT_S = fmt.HEARTBEAT_S  # a heartbeat line after this long without output
TICK_S = 1.0  # at least this often a quiet wait looks again (a held decision, a silent log's stall)
# a new boot's "started" line waits at most this long (loop clock) for the boot's number in the
# history (``kvtui.history.ident``: the recorder writes it off the loop within milliseconds)
NAME_WAIT_S = 2.0


@dataclass(slots=True)
class Outcome:
    code: int
    boot: Boot | None = None  # the start's boot (merged: ``dep.boot``)
    index: int | None = None  # the start's index (``DeploymentMonitor.start_boot``)
    message: str = ""
    # the boot's JSON taken when the wait decided (the monitor goes on feeding serving lines into
    # the same Boot until it is closed: the printed object is the boot at its ready/failed moment)
    snapshot: dict[str, object] | None = None
    dep: DeploymentBoot | None = None  # the start, its nodes' side (several nodes: the per-node report)
    hang: Hang | None = None  # the hang diagnosis that decided (several nodes)


@dataclass(slots=True)
class Waiter:
    """The one decider of a wait (the deployment monitor's sink): follows the deployment's starts
    (one node: its boots; ``DeploymentMonitor.start_boot``), decides when the wait is over, prints
    progress. What only several nodes have — a node named with a failure or a phase it has not
    reached, each node's stall, the hang diagnosis — comes from the merged state itself."""

    dm: DeploymentMonitor
    err: TextIO
    next_boot: bool
    follow_restarts: bool
    t0: float
    clock: Callable[[], float] = time.monotonic
    done: asyncio.Future[Outcome] | None = None
    following: int | None = None
    base: int = 0  # the first start followed: the later ones are announced ("boot #14 started")
    first_seen: dict[int, float] = field(default_factory=dict)  # start index -> clock() when first seen
    printed: dict[int, set[tuple[Phase, Model]]] = field(default_factory=dict)  # start index -> phases printed
    noted_end: set[int] = field(default_factory=set)
    last_conn: dict[str, ConnStatus] = field(default_factory=dict)  # per node
    last_out: float | None = None  # clock() of the last line printed (None: t0)
    history: Sequence[BootDoc] = ()  # one node's stored boots, for the phase ETAs
    now: Callable[[], float] = time.time  # the hosts' wall clock (the ETA's elapsed time, the stall's)
    # per node the console's stall detector (on the hosts' clock): the heartbeat names a stall once
    # it is ``stall_notice_s`` old; ``stall_timeout`` (--stall-timeout, None: off) ends the wait (exit 5)
    stalls: NodeStalls = field(default_factory=NodeStalls)
    stall_notice_s: float = 120.0
    stall_timeout: float | None = None
    notes_said: dict[str, int] = field(default_factory=dict)  # per node, its follower's notes printed
    hang_said: str | None = None
    probing: asyncio.Task[None] | None = None
    held: bool = False  # a failure not decided yet (``DeploymentMonitor.names_held``): the beat decides it

    @property
    def several(self) -> bool:
        return len(self.dm.nodes) > 1

    def on_updates(self, node: DeploymentNode, updates: Sequence[MonitorUpdate], dep: DeploymentBoot | None) -> None:
        """The deployment monitor's sink: a node's own updates."""
        if self.done is None or self.done.done():
            return
        self.say_notes()
        boots_changed = False
        self.stalls.feed(node.name, updates, self.now())
        for u in updates:
            if isinstance(u, ConnUpdate):
                self._conn(node, u.status)
            elif isinstance(u, BootState | LogBatch):
                # lines too: a boot's status can change without a BootState (the tracker reports no
                # change when a "Stopping …" line stops a boot that is still starting)
                boots_changed = True
        if boots_changed and not self.done.done():
            self._boots()
        if not self.done.done():
            self.check_stall()

    def say_notes(self) -> None:
        """The followers' notes ("no server start in the last N bytes of FILE", a rotation), once
        each, on stderr."""
        for n in self.dm.nodes:
            m = n.monitor
            new = m.notes_seen - self.notes_said.get(n.name, 0)
            if new <= 0:
                continue
            self.notes_said[n.name] = m.notes_seen
            for note in list(m.notes)[-new:]:
                self.say(f"note: {n.name}: {note}" if self.several else f"note: {note}")

    # -- stall -------------------------------------------------------------------------------

    def followed(self) -> tuple[int, DeploymentBoot] | None:
        if self.following is None or self.following >= self.dm.start_count():
            return None
        return self.following, self.dm.start_boot(self.following)

    def check_stall(self) -> None:
        """``--stall-timeout``: no progress on any node still starting for that long ends the wait
        (exit 5), each node's stall named."""
        if self.stall_timeout is None or self.done is None or self.done.done():
            return
        got = self.followed()
        if got is None:
            return
        idx, dep = got
        starting = [(nb, st) for nb, st in self.stalls.stalls(dep, self.now(), self.stall_timeout)
                    if nb.boot is not None and nb.boot.status is BootStatus.STARTING]
        stalls = [st for _, st in starting if st is not None]
        if not starting or len(stalls) < len(starting):
            return
        quiet, limit = fmt.duration(min(st.seconds for st in stalls)), f"(--stall-timeout {self.stall_timeout:g} s)"
        if self.several:
            said = "; ".join(f"{nb.label()}: {st.text()}" for nb, st in starting if st is not None)
            text = f"{self.dm.name}: no progress on any node for {quiet} {limit}: {said}"
        else:
            text = f"no progress for {quiet} {limit}: {self.label(idx)} still {_where(dep.boot)}: {stalls[0].text()}"
        self._finish(Outcome(EXIT_TIMEOUT, dep.boot, idx, text, dep=dep))

    # -- connection ------------------------------------------------------------------------

    def _conn(self, node: DeploymentNode, st: ConnStatus) -> None:
        prev, self.last_conn[node.name] = self.last_conn.get(node.name), st
        if st.state in _FATAL_STATES:
            msg = st.detail or st.state.value
            if st.state is ConnState.HOSTKEY_REFUSED and st.fingerprint and st.fingerprint not in msg:
                msg += f" (offered key {st.fingerprint})"
            self._finish(Outcome(EXIT_INPUT, message=f"{node.name}: {st.state.value}: {msg}"))
            return
        who = f"{node.name}: " if self.several else ""
        if st.state is ConnState.RECONNECTING and prev is not None and prev.state is ConnState.CONNECTED:
            retry = f", retrying in {st.retry_in:.0f} s" if st.retry_in else ""
            self.say(f"{who}connection lost{retry}" + (f": {st.detail}" if st.detail else ""))
        elif st.state is ConnState.CONNECTED and prev is not None and prev.state is ConnState.RECONNECTING:
            self.say(f"{who}reconnected")

    # -- starts ------------------------------------------------------------------------------

    def _eligible(self, index: int, boot: Boot) -> bool:
        """``--next``: the first start that really begins after now (not the running server's
        lines, which the tracker groups into an implicit boot without a launch phase)."""
        if not self.next_boot or self.several:  # (several: the monitor's starts begin after now)
            return True
        return index > 0 or any(p.name is Phase.LAUNCH for p in boot.phases)

    def _boots(self) -> None:
        self.held = False
        count = self.dm.start_count()
        if not count:
            return
        last = count - 1
        if self.following is None:
            if self.next_boot:
                first = next((i for i in range(count) if self._eligible(i, self.dm.start_boot(i).boot)), None)
                if first is None:
                    return
                self.following = first
            else:
                self.following = last
            self.base = self.following
        for i in range(self.following, last + 1):
            dep = self.dm.start_boot(i)
            boot = dep.boot
            self.following = i
            if self._awaits_number(i, boot):
                return  # its lines (and what follows) once the history has numbered it
            self._progress(i, dep)
            if boot.status is BootStatus.READY:
                self._finish(Outcome(EXIT_OK, boot, i, dep=dep))
                return
            if boot.status is BootStatus.FAILED:
                if self.dm.names_held():
                    self.held = True  # the node that failed first may be one whose backlog is unread
                    return  # decided on the beat
                if not self.follow_restarts:
                    self._finish(Outcome(EXIT_FAILED, boot, i, self.failed_text(dep), dep=dep))
                    return
                if i not in self.noted_end:
                    self.noted_end.add(i)
                    self.say_failure(i, dep)
                    self.say("waiting for an automatic restart (--follow-restarts)")
            elif boot.status is BootStatus.STOPPED and i not in self.noted_end and (i < last or not self.several):
                # (the last start of several nodes stopped on a node: the hang diagnosis says which)
                self.noted_end.add(i)
                self.say(f"{self.label(i)} stopped before it was ready; waiting for the next boot")
        self.check_hang()

    def failed_text(self, dep: DeploymentBoot | None) -> str:
        """Several nodes: the failure, named with its node (one node's is said by ``say_failure``)."""
        if not self.several or dep is None:
            return ""
        f = dep.boot.failure
        who = dep.node(dep.failed_node).label() if dep.failed_node is not None else "a node"
        what = f"{f.kind.value}: {fmt.one_line(f.message, 300)}" if f is not None else "failed"
        where = f" in {fmt.phase_label(f.phase)}" if f is not None and f.phase is not None else ""
        return f"{self.dm.name}: failed on {who}{where}: {what}" + self._unread_note()

    def _announced(self, index: int) -> bool:
        """Whether start ``index`` gets a "started" line (a start after the first one followed)."""
        return index > self.base or self.next_boot

    def _awaits_number(self, index: int, boot: Boot) -> bool:
        """One node's new boot about to be announced waits (at most ``NAME_WAIT_S``) for its number
        in the history, so that its "started" line names it as every later line does; a timer looks
        again when the time is up (the monitor also publishes the boot again once numbered)."""
        if self.several or index in self.printed or not self._announced(index):
            return False
        monitor = self.dm.nodes[0].monitor
        hist = monitor.history
        if hist is None or hist.problem is not None or not recordable(boot):
            return False
        if monitor.boot_number(index) is not None:
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

    def _progress(self, index: int, dep: DeploymentBoot) -> None:
        boot = dep.boot
        done = self.printed.get(index)
        if done is None:
            done = self.printed[index] = set()
            self.first_seen.pop(index, None)
            if self._announced(index):
                when = f" at {boot.started_at:%H:%M:%S}" if boot.started_at is not None else ""
                self.say(f"{self.label(index)} started{when}")
        for span in boot.phases:
            if (span.name, span.model) in done:
                continue
            done.add((span.name, span.model))
            late = [n for n in dep.nodes if n.span(span.name, span.model) is None and n.boot is not None
                    and span.name not in HEAD_ONLY]
            note = f" (not yet on {', '.join(n.label() for n in late)})" if late else ""
            name = fmt.phase_label(span.name) + (" (draft)" if span.model is Model.DRAFT else "")
            self.say(name + note, self.elapsed(boot, span.start))

    def say_failure(self, index: int, dep: DeploymentBoot) -> None:
        boot, f = dep.boot, dep.boot.failure
        if f is None:
            self.say(f"{self.label(index)} failed")
            return
        who = f" on {dep.node(dep.failed_node).label()}" if self.several and dep.failed_node is not None else ""
        where = f" in {fmt.phase_label(f.phase)}" if f.phase is not None else ""
        self.say(f"failed{who}{where}: {f.kind.value}: {fmt.one_line(f.message, 300)}",
                 self.elapsed(boot, boot.ended_at))
        if f.hint:
            self.say(f"hint: {f.hint}")

    # -- hang (several nodes) ------------------------------------------------------------------

    def check_hang(self) -> None:
        """A node that holds the others back (``DeploymentMonitor.hang``): its host is asked what it
        can see (its unit, its environment), then the wait decides."""
        if self.probing is None and self.done is not None and not self.done.done() and self.dm.hang() is not None:
            self.probing = asyncio.get_running_loop().create_task(self._probe_and_decide())

    async def _probe_and_decide(self) -> None:
        """A lagging node whose unit is not running (or that stopped) fails the wait with the
        diagnosis; else the diagnosis is said once (again when it changes) and the wait goes on."""
        try:
            probed = await probe_nodes(self.dm.nodes, self.dm.merged())
            hang = self.dm.hang(probed)
            if self.done is None or self.done.done() or hang is None:
                return
            dep = self.dm.merged()
            dead = any(probed.get(r, NodeObservation()).unit_active is False for r in hang.lagging)
            stopped = any((b := dep.node(r).boot) is not None and b.status is BootStatus.STOPPED for r in hang.lagging)
            if dead or stopped:
                self._finish(Outcome(EXIT_FAILED, dep.boot, self.following, f"{self.dm.name}: hung: {hang.summary}"
                                     + self._unread_note(), dep=dep, hang=hang))
                return
            said = re.sub(r"\d+(\.\d+)?", "#", "\n".join(hang.lines()))  # its clocks moved on: not news
            if said != self.hang_said:
                self.hang_said = said
                self.say(f"hang: {hang.summary}")
                for c in hang.causes:
                    self.say(f"  - {c}")
        finally:
            self.probing = None

    def _unread_note(self) -> str:
        """The nodes whose backlog was given up on (``DeploymentMonitor.backlog_pending``), said
        with the decision: what it knows of them is not their whole log."""
        return "".join(f"\n  - {note}" for note in self.dm.backlog_notes())

    # -- output --------------------------------------------------------------------------------

    def label(self, index: int) -> str:
        """The start in messages: one node's ``boot #13`` (its number in the history), else ``boot 2
        of this log`` (``kvtui.history.ident``); several nodes' ``boot 2 of this wait``."""
        return f"boot {index + 1} of this wait" if self.several else self.dm.nodes[0].monitor.boot_label(index)

    def say(self, text: str, elapsed: float | None = None) -> None:
        stamp = f"{fmt.stamp(elapsed)} " if elapsed is not None else ""
        print(f"{stamp}{text}", file=self.err, flush=True)
        self.last_out = self.clock()

    # -- heartbeat -----------------------------------------------------------------------------

    def heartbeat_text(self) -> str:
        """Where the wait is: the followed start's phase and its progress (several nodes: each
        node's), its stall, or what it waits for."""
        waited = fmt.duration(self.clock() - self.t0)
        notice = self.stall_notice_s if self.stall_timeout is None else min(self.stall_notice_s, self.stall_timeout)
        got = self.followed()
        if self.several:
            dep = got[1] if got is not None else self.dm.merged()
            parts = []
            for n, st in self.stalls.stalls(dep, self.now(), notice):
                b = n.boot
                part = f"{n.label()} " + ("no boot yet" if b is None else
                                          f"{b.status.value}" + (f" in {fmt.phase_label(b.phase)}" if b.phase else ""))
                parts.append(part + (f" ({st.text()})" if st is not None else ""))
            return f"… still waiting after {waited}: {'; '.join(parts)}"
        if got is not None:
            idx, dep = got
            boot = dep.boot
            text = f"… still waiting after {waited}: {self.label(idx)} {_where(boot)}"
            stall = self.stalls.stalls(dep, self.now(), notice)[0][1]
            if stall is not None:
                text += "; " + stall.text()
            if boot.status is BootStatus.STARTING and boot.phases:
                text += "; " + self.eta_text(boot)
            return text
        conn = self.last_conn.get(self.dm.nodes[0].name)
        if conn is not None and conn.state is not ConnState.CONNECTED:
            return f"… still waiting after {waited}: connection {conn.state.value}" + (
                f" ({conn.detail})" if conn.detail else "")
        if self.next_boot:
            running = " (the running server goes on; nothing has restarted it)" if self.dm.start_count() else ""
            return f"… still waiting after {waited}: no new boot has started{running}"
        return f"… still waiting after {waited}: no server log line yet"

    def eta_text(self, boot: Boot) -> str:
        """The boot's ETA from the host's history (``kvtui.history.eta``), or why there is none."""
        now = datetime.fromtimestamp(self.now(), tz=UTC)
        return eta.estimate(boot, self.history, now, host=self.dm.nodes[0].name).text()

    async def beat(self) -> None:
        """Print ``heartbeat_text`` whenever nothing was printed for ``HEARTBEAT_S``; at least every
        ``TICK_S`` take a decision held back (a backlog read since), look for a hang and at a silent
        log's stall (time passing is their evidence too)."""
        while self.done is not None and not self.done.done():
            last = self.t0 if self.last_out is None else self.last_out
            due = last + HEARTBEAT_S - self.clock()
            if due > 0:
                await asyncio.sleep(min(due, TICK_S))
                if self.done.done():
                    return
                if self.held:
                    self._boots()
                else:  # (not ``_boots``: a boot's lines are said as the monitor's updates bring them)
                    self.check_hang()
                self.check_stall()
                continue
            self.say(self.heartbeat_text())

    # -- the wait's ends -------------------------------------------------------------------------

    async def timed_out(self, timeout: float) -> Outcome:
        """``--timeout`` ran out: the followed start, where it is (``--next`` with no new boot: so);
        several nodes: where each node is, and the hang diagnosis when a node trails."""
        if self.several:
            dep = self.dm.merged()
            hang = self.dm.hang(bound_s=0.0)
            msg = f"timed out after {timeout:g} s: {self.heartbeat_text().split(': ', 1)[-1]}"
            if hang is not None:
                msg += f"\nkvtui wait: hang: {hang.summary}" + "".join(f"\n  - {c}" for c in hang.causes)
            msg += "".join(f"\n  - {n.name}: its backlog still being read" for n in self.dm.backlog_pending())
            msg += self._unread_note()
            seen = any(n.boot for n in dep.nodes)
            return Outcome(EXIT_TIMEOUT, dep.boot if seen else None, self.following, msg, dep=dep if seen else None,
                           hang=hang)
        monitor = self.dm.nodes[0].monitor
        if self.next_boot and self.following is None:
            # the running server's lines are not the next boot: say that none started
            running = " (the running server went on; nothing restarted it)" if monitor.tracker.boots else ""
            return Outcome(EXIT_TIMEOUT, message=f"timed out after {timeout:g} s: no new boot started{running}")
        if monitor.history is not None:  # the boot's number (its first write may be under way): bounded
            await asyncio.to_thread(monitor.history.flush, CLOSE_LIMIT)
        count = self.dm.start_count()
        idx = self.following if self.following is not None else (count - 1 if count else None)
        if idx is None:
            return Outcome(EXIT_TIMEOUT, message=f"timed out after {timeout:g} s: no boot seen")
        dep = self.dm.start_boot(idx)
        return Outcome(EXIT_TIMEOUT, dep.boot, idx, f"timed out after {timeout:g} s: {self.label(idx)} still "
                       f"{_where(dep.boot)}", dep=dep)

    def _finish(self, outcome: Outcome) -> None:
        if self.done is not None and not self.done.done():
            if outcome.boot is not None and outcome.snapshot is None:
                outcome.snapshot = start_json(outcome)
            self.done.set_result(outcome)


def _where(boot: Boot) -> str:
    """``in load weights 12/61 shards`` while a boot starts (the phase and its progress), else its
    status and phase (``stopped in load weights``)."""
    if boot.status is BootStatus.STARTING and boot.phases:
        return f"in {fmt.boot_progress(boot)}"
    return boot.status.value + (f" in {fmt.phase_label(boot.phase)}" if boot.phase is not None else "")


async def follow(view: Waiter, dm: DeploymentMonitor, timeout: float,
                 timer: Callable[[float], Awaitable[object]] | None,
                 ready: Callable[[Outcome], Awaitable[Outcome]]) -> Outcome:
    """The one wait, for a host (a deployment of one node) and a deployment: run the nodes'
    monitors into ``view`` until it decides, ``--timeout`` runs out (``timer``) or a node's monitor
    ends; then ``ready`` (the proof of a ready boot, while the monitors still run: the probe, the
    first serving sample); then every node is closed, bounded, and its history closed."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Outcome] = loop.create_future()
    view.done = done
    tasks = dm.start(view.on_updates)
    expiry = asyncio.ensure_future((timer or asyncio.sleep)(timeout))
    beat = asyncio.create_task(view.beat())
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
            result = Outcome(EXIT_INPUT, message=f"{node.name}: cannot follow the host: {detail}")
        else:
            result = await view.timed_out(timeout)
        result = await ready(result)
    finally:
        for task in (beat, view.probing):
            if task is not None:
                task.cancel()
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
    dm = DeploymentMonitor(name, nodes, next_boot=bool(args.next))
    if dep_cfg is not None:
        dm.bound_s = dep_cfg.hang_seconds
    now = clock or time.time
    one = dm.nodes[0] if len(dm.nodes) == 1 else None
    # before the monitors run: the log fallback sees the boots' lines (one node: its ServingReader's)
    reader = DeploymentServingReader(dm, now) if getattr(args, "serving", False) else None
    loop = asyncio.get_running_loop()
    waiter = Waiter(dm, stderr, next_boot=bool(args.next), follow_restarts=bool(args.follow_restarts),
                    t0=loop.time(), clock=loop.time)
    waiter.now = dm.wall = now  # the hosts' clock: their lines' stamps say where each node's backlog ends
    waiter.stall_notice_s = config.ui.stall_seconds
    waiter.stall_timeout = stall_timeout
    if one is not None:
        waiter.history = await asyncio.to_thread(past_boots, one.name)
    said = (one.host.source_label or one.host.kind) if one is not None else (
        f"{len(dm.nodes)} nodes: {', '.join(n.name for n in dm.nodes)}")
    what = "the next boot" if args.next else "the current boot"
    print(f"kvtui wait: {name} ({said}): following {what}", file=stderr)

    async def ready(outcome: Outcome) -> Outcome:
        """The proof of a ready start, for N >= 1 nodes: node 0's server answers one token (the
        probe), and with ``--serving`` a first serving sample through the one reader."""
        if outcome.code != EXIT_OK or outcome.boot is None:
            return outcome
        outcome = await _probe_ready(outcome, waiter, args, stderr, args.timeout - (loop.time() - waiter.t0))
        if outcome.code == EXIT_OK and reader is not None:
            outcome = await _first_serving(outcome, reader, waiter.several, args, stderr,
                                           args.timeout - (loop.time() - waiter.t0))
        return outcome

    return report(await follow(waiter, dm, args.timeout, timer, ready), waiter, args, stdout, stderr)


async def _probe_ready(outcome: Outcome, waiter: Waiter, args: argparse.Namespace, stderr: TextIO,
                       left: float) -> Outcome:
    """Prove "ready" with a real request (``kvtui.hosts.probe``) to node 0's server, the one serving
    HTTP, with node 0's host's settings (as ``execute_nodes``): on by default when the boot's
    arguments name its port (``--no-probe`` or ``probe = false`` turn it off); a start whose server
    does not answer a 1-token request within the time left is failed on node 0, kind ``not_serving``."""
    boot, dep = outcome.boot, outcome.dep
    assert boot is not None
    node = next((n for n in waiter.dm.nodes if dep is not None and n.name == dep.head.name), waiter.dm.nodes[0])
    host, wanted = node.host, getattr(args, "probe", None)
    why = not_probed_reason(node.monitor.backend, boot.flags,
                            enabled=wanted if wanted is not None else getattr(host, "probe", True))
    port = boot_port_of(boot)
    if why is not None or port is None:
        if port is None and wanted:
            print(f"kvtui wait: {args.host}: --probe: the boot's arguments name no port; not probed", file=stderr)
        elif why is not None and why.startswith("this kind of host"):
            print(f"kvtui wait: {args.host}: {why}", file=stderr)
        return outcome
    model = getattr(host, "probe_model", None) or served_model(boot.flags)
    who = f"node 0's server ({node.name})" if waiter.several else "the server"
    print(f"kvtui wait: {args.host}: the log says ready; asking {who} on port {port} for one token",
          file=stderr, flush=True)
    res = await probe(node.monitor.backend, port, model=model, timeout=max(1.0, min(left, DEFAULT_PROBE_TIMEOUT_S)))
    snap = outcome.snapshot if outcome.snapshot is not None else start_json(outcome)
    snap["probe"] = res.to_json()
    if res.ok:
        print(f"kvtui wait: {args.host}: ✔ {res.headline()}", file=stderr, flush=True)
        return replace(outcome, snapshot=snap)
    mark_not_serving(boot, res)
    if waiter.several and dep is not None and dep.head.boot is not None:  # failed on node 0: its boot too
        mark_not_serving(dep.head.boot, res)
        dep.failed_node = dep.head.node_rank
    failed = {**start_json(outcome), "probe": res.to_json()}
    return replace(outcome, code=EXIT_FAILED, snapshot=failed, message=waiter.failed_text(dep))


async def _first_serving(outcome: Outcome, reader: DeploymentServingReader, several: bool,
                         args: argparse.Namespace, stderr: TextIO, left: float) -> Outcome:
    """``--serving``: after ready, a first serving sample (node 0's /metrics, else a node's log: ``kvtui
    watch``'s), on stderr and as the JSON's ``serving`` (``kvtui watch --json``'s object; several
    nodes: with ``"deployment"``, its ``host`` the node it came from); none within the time left: exit 5."""
    boot = outcome.boot
    assert boot is not None
    name: str = args.host
    print(f"kvtui wait: {name}: reading a first serving sample", file=stderr, flush=True)
    r = await first_reading(reader, boot, timeout=max(1.0, left))
    snap = outcome.snapshot if outcome.snapshot is not None else start_json(outcome)
    if r is None:
        snap["serving"] = None
        why = reader.metrics_error or "and no serving line in the log"
        return replace(outcome, code=EXIT_TIMEOUT, snapshot=snap,
                       message=f"ready, but no serving sample in {max(1.0, left):.0f} s ({why})")
    now = time.time()
    node = (reader.node or name) if several else name
    if reader.source == "log":
        of = f" of {node}" if several else ""
        print(f"kvtui wait: {name}: {reader.metrics_error}; from the log's serving lines{of}", file=stderr)
    print(f"kvtui wait: {name}: serving: {human_line(r, now, name)}", file=stderr, flush=True)
    doc = sample_json(r, node, now, reader.metrics_error, name)
    if several:
        doc["deployment"] = name
    snap["serving"] = doc
    return replace(outcome, snapshot=snap)


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
