"""The deployment's view of ``kvtui wait NAME`` (a ``[deployments.NAME]``): ``DeploymentWaiter``,
which the one wait loop (``kvtui.commands.wait.follow``) feeds, as it feeds a host's ``Waiter``.

Each node is followed by its own ``HostMonitor`` (its own connection, spool and tracker); after
every batch the nodes' current boots are merged (``kvtui.boot.deployment.merge_boots``) and the merged
boot decides, as ``wait`` does for one host: 0 when the whole is ready (the head node serves),
1 when a node failed (its failure, named with the node), 5 at ``--timeout``, 3 when a node
cannot be reached. Progress goes to stderr as the merged phases start.

A node that holds the others back is named by the hang diagnosis (``kvtui.boot.deployment.diagnose_hang``,
bound = the deployment's ``hang_seconds``): at once when its boot stopped, else when it trails
the phase another node reached for longer than the bound. kvtui then asks the lagging nodes'
hosts what it can see (the unit's state with the same probe as ``hosts --connect``; every
unit's NCCL_*/GLOO_* environment): a lagging node whose unit is not running ends the wait with
exit 1 and the diagnosis; otherwise the diagnosis is printed once and the wait goes on (exit 5
at the timeout, with the diagnosis).

No decision names a node (a failure, a hang) before every node's backlog — its log as it stood
when the wait began — is read (``DeploymentMonitor.backlog_pending``): a node whose lines have not
come yet would be said "not started" while it waits at NCCL init. A node given up on
(``BACKLOG_LIMIT_S``) is said with the decision. Ready needs no such wait (the head serves and the
others caught up: evidence that cannot come early).

Each node has the console's stall detector (``kvtui.boot.stall``): the heartbeat names a node's
stall once ``[ui] stall_seconds`` passed without progress on it, and ``--stall-timeout S`` ends the
wait with exit 5 once no node made progress for S seconds (each node's stall named).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

from kvtui import fmt
from kvtui.boot import BootStatus
from kvtui.boot.deployment import DeploymentBoot, Hang, NodeBoot, NodeObservation, diagnose_hang
from kvtui.boot.stall import Stall
from kvtui.engines.events import Phase
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_TIMEOUT
from kvtui.hosts.backend import ConnState
from kvtui.monitor.deployment import (
    DeploymentMonitor,
    DeploymentNode,
    NodeStalls,
    probe_nodes,
)
from kvtui.updates import ConnUpdate, MonitorUpdate

_FATAL = frozenset({ConnState.FAILED, ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED})
HEARTBEAT_S = fmt.HEARTBEAT_S
HANG_CHECK_S = 1.0  # how often a quiet deployment is checked for a node that trails too long



@dataclass(slots=True)
class Result:
    code: int
    dep: DeploymentBoot | None = None
    message: str = ""
    hang: Hang | None = None
    snapshot: dict[str, object] | None = None
    # ``--serving``: after ready, the first serving sample's exit code and JSON (None: none came)
    serving_code: int | None = None
    serving: dict[str, object] | None = None


@dataclass(slots=True)
class DeploymentWaiter:
    """What ``wait`` decides from the deployment monitor's merged boots (ready, failed, hung) and
    says on stderr while it waits."""

    dm: DeploymentMonitor
    err: TextIO
    t0: float
    clock: Callable[[], float] = time.monotonic
    done: asyncio.Future[Result] | None = None
    printed: set[tuple[str, str]] = field(default_factory=set)
    last_out: float | None = None
    hang_said: str | None = None
    probing: bool = False
    dep: DeploymentBoot | None = None
    # per node (by name) the console's stall detector, on the hosts' clock (``now``)
    stalls: NodeStalls = field(default_factory=NodeStalls)
    stall_notice_s: float = 120.0
    stall_timeout: float | None = None
    now: Callable[[], float] = time.time

    def on_updates(self, node: DeploymentNode, updates: Sequence[MonitorUpdate], dep: DeploymentBoot | None) -> None:
        """The deployment monitor's sink."""
        if self.done is None or self.done.done():
            return
        for u in updates:
            if isinstance(u, ConnUpdate) and u.status.state in _FATAL:
                st = u.status
                msg = f"{node.name}: {st.state.value}: {st.detail or ''}".rstrip(": ")
                self._finish(Result(EXIT_INPUT, message=msg))
                return
        self.stalls.feed(node.name, updates, self.now())
        if dep is not None:
            self.evaluate(dep)
        self.check_stall(dep)

    # -- stall ---------------------------------------------------------------------------------

    def node_stalls(self, dep: DeploymentBoot, threshold: float) -> list[tuple[NodeBoot, Stall | None]]:
        """Each node with its stall once ``threshold`` seconds passed without progress on it."""
        return self.stalls.stalls(dep, self.now(), threshold)

    def check_stall(self, dep: DeploymentBoot | None = None) -> None:
        """``--stall-timeout``: no node made progress for that long (every node still starting is
        stalled) → exit 5, each node's stall named."""
        if self.stall_timeout is None or self.done is None or self.done.done():
            return
        dep = dep or self.dm.merged()
        if dep.boot.status is not BootStatus.STARTING:
            return
        starting = [(nb, st) for nb, st in self.node_stalls(dep, self.stall_timeout)
                    if nb.boot is not None and nb.boot.status is BootStatus.STARTING]
        if not starting or any(st is None for _, st in starting):
            return
        said = "; ".join(f"{nb.label()}: {st.text()}" for nb, st in starting if st is not None)
        quiet = min(st.seconds for _, st in starting if st is not None)
        self._finish(Result(EXIT_TIMEOUT, dep, f"{self.dm.name}: no progress on any node for {fmt.duration(quiet)} "
                                               f"(--stall-timeout {self.stall_timeout:g} s): {said}"))

    def evaluate(self, dep: DeploymentBoot | None = None) -> None:
        if self.done is None or self.done.done():
            return
        dep = self.dep = dep or self.dm.merged()
        self._progress(dep)
        status = dep.boot.status
        if status is BootStatus.READY:
            self._finish(Result(EXIT_OK, dep))
            return
        if self.dm.backlog_pending():
            return  # a node whose backlog is not read yet would be said "not started": decided on the heartbeat
        if status is BootStatus.FAILED:
            f = dep.boot.failure
            who = dep.node(dep.failed_node).label() if dep.failed_node is not None else "a node"
            what = f"{f.kind.value}: {fmt.one_line(f.message, 300)}" if f is not None else "failed"
            where = f" in {fmt.phase_label(f.phase)}" if f is not None and f.phase is not None else ""
            self._finish(Result(EXIT_FAILED, dep, f"{self.dm.name}: failed on {who}{where}: {what}"
                                + self._unread_note()))
            return
        self.check_hang(dep)

    def check_hang(self, dep: DeploymentBoot | None = None) -> None:
        dep = dep or self.dm.merged()
        hang = diagnose_hang(dep, datetime.now().astimezone(), self.dm.bound_s, self.dm.observed())
        if hang is not None and not self.probing:
            self.probing = True
            asyncio.get_running_loop().create_task(self._probe_and_decide(dep))

    async def _probe_and_decide(self, dep: DeploymentBoot) -> None:
        try:
            probed = await probe_nodes(self.dm.nodes, dep)
            if self.done is None or self.done.done():
                return
            dep = self.dep = self.dm.merged()
            hang = diagnose_hang(dep, datetime.now().astimezone(), self.dm.bound_s, self.dm.observed(probed))
            if hang is None:
                return
            text = "\n".join(hang.lines())
            dead = any(probed.get(r, NodeObservation()).unit_active is False for r in hang.lagging)
            stopped = any(dep.node(r).boot is not None and dep.node(r).boot.status is BootStatus.STOPPED  # type: ignore[union-attr]
                          for r in hang.lagging)
            if dead or stopped:
                self._finish(Result(EXIT_FAILED, dep, f"{self.dm.name}: hung: {hang.summary}" + self._unread_note(),
                                    hang))
                return
            said = re.sub(r"\d+(\.\d+)?", "#", text)  # the same diagnosis with its clocks moved on is not news
            if said != self.hang_said:
                self.hang_said = said
                self._say(f"hang: {hang.summary}")
                for c in hang.causes:
                    self._say(f"  - {c}")
        finally:
            self.probing = False

    def _unread_note(self) -> str:
        """The nodes whose backlog was given up on (``DeploymentMonitor.backlog_pending``), said
        with the decision: what it knows of them is not their whole log."""
        return "".join(f"\n  - {note}" for note in self.dm.backlog_notes())

    def _progress(self, dep: DeploymentBoot) -> None:
        for span in dep.boot.phases:
            key = (span.name.value, span.model.value)
            if key in self.printed:
                continue
            self.printed.add(key)
            late = [n for n in dep.nodes if n.span(span.name, span.model) is None and n.boot is not None
                    and span.name not in (Phase.HTTP_UP, Phase.READY)]
            note = f" (not yet on {', '.join(n.label() for n in late)})" if late else ""
            self._say(f"{fmt.phase_label(span.name)}{note}", self.clock() - self.t0)

    def heartbeat_text(self) -> str:
        waited = fmt.duration(self.clock() - self.t0)
        dep = self.dep or self.dm.merged()
        parts = []
        notice = self.stall_notice_s if self.stall_timeout is None else min(self.stall_notice_s, self.stall_timeout)
        for n, stall in self.node_stalls(dep, notice):
            b = n.boot
            part = f"{n.label()} " + ("no boot yet" if b is None else
                                      f"{b.status.value}" + (f" in {fmt.phase_label(b.phase)}" if b.phase else ""))
            parts.append(part + (f" ({stall.text()})" if stall is not None else ""))
        return f"… still waiting after {waited}: {'; '.join(parts)}"

    async def heartbeat(self) -> None:
        while self.done is not None and not self.done.done():
            await asyncio.sleep(HANG_CHECK_S)
            if self.done.done():
                return
            self.evaluate()  # a decision held back until every node's backlog was read is taken here
            self.check_stall()
            if self.done.done():
                return
            last = self.t0 if self.last_out is None else self.last_out
            if self.clock() - last >= HEARTBEAT_S:
                self._say(self.heartbeat_text())

    # -- the wait's view (``kvtui.commands.wait.View``) -----------------------------------------

    def beats(self) -> list[Coroutine[Any, Any, None]]:
        return [self.heartbeat()]

    def crashed(self, message: str) -> Result:
        return Result(EXIT_INPUT, message=message)

    async def timed_out(self, timeout: float) -> Result:
        """``--timeout`` ran out: where each node is, and the hang diagnosis when a node trails."""
        dep = self.dm.merged()
        hang = diagnose_hang(dep, datetime.now().astimezone(), 0.0, self.dm.observed())
        msg = f"timed out after {timeout:g} s: {self.heartbeat_text().split(': ', 1)[-1]}"
        if hang is not None:
            msg += f"\nkvtui wait: hang: {hang.summary}" + "".join(f"\n  - {c}" for c in hang.causes)
        msg += "".join(f"\n  - {n.name}: its backlog still being read" for n in self.dm.backlog_pending())
        msg += self._unread_note()
        return Result(EXIT_TIMEOUT, dep if any(n.boot for n in dep.nodes) else None, msg, hang)

    def _say(self, text: str, elapsed: float | None = None) -> None:
        stamp = f"{fmt.stamp(elapsed)} " if elapsed is not None else ""
        print(f"{stamp}{text}", file=self.err, flush=True)
        self.last_out = self.clock()

    def _finish(self, result: Result) -> None:
        if self.done is not None and not self.done.done():
            if result.dep is not None:
                result.snapshot = result.dep.to_json()
            self.done.set_result(result)
