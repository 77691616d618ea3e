"""``DeploymentMonitor``: one ``HostMonitor`` per node of a ``[deployments.NAME]`` and the merged boot
(``kvtui.boot.deployment.merge_boots``) published after every batch that changed a node's log or boot.

The monitor layer's piece for deployments (issue 15): ``kvtui wait NAME`` (``commands/wait``)
and the console's deployment pane both read a deployment through it. It owns the node monitors
(``start`` runs them, ``close`` ends them), remembers per node when its last line arrived and its
connection state, and answers the hang diagnosis (``kvtui.boot.deployment.diagnose_hang``) from what it saw.

A sink gets ``(node, updates, merged)``: the node's own updates, unchanged (GPU readings, log
batches, connection state, …), and the deployment's merged boot when that batch changed it (a log
batch or a boot event), else None.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from kvtui.boot import Boot, BootStatus
from kvtui.boot.deployment import (
    DeploymentBoot,
    Hang,
    NodeBoot,
    NodeObservation,
    current_start,
    diagnose_hang,
    merge_boots,
)
from kvtui.boot.stall import Stall, StallDetector
from kvtui.engines.events import Phase
from kvtui.history import recorder_for
from kvtui.hosts import shellcmd as C
from kvtui.hosts.backend import BackendError, ConnState, ConnStatus
from kvtui.monitor.host import HostMonitor
from kvtui.monitor.options import MonitorOptions
from kvtui.updates import BootState, ConnUpdate, GpuUpdate, LogBatch, MonitorUpdate, columns

if TYPE_CHECKING:
    from kvtui.config import HistoryConfig, HostConfig
    from kvtui.hosts.backend import HostBackend

CLOSE_LIMIT = 1.5  # seconds a node monitor is given to close before its task is cancelled
PROBE_TIMEOUT = 15.0  # seconds a node's unit/environment probe may take
# a node's backlog (its log as it stood when the monitor started) is read once a line stamped
# after that start came, or once its stream, having delivered, stayed quiet this long
BACKLOG_QUIET_S = 1.5
BACKLOG_LIMIT_S = 30.0  # seconds after which a node whose backlog is not read is said so, not waited for
MAX_STARTS = 16  # the starts of several nodes kept (``start_boot``): a wait follows the newest


@dataclass(slots=True)
class DeploymentNode:
    """One node as the deployment monitor sees it (``index``: its position in ``nodes``)."""

    name: str
    host: HostConfig
    monitor: HostMonitor
    index: int = 0
    last_line_at: datetime | None = None
    status: ConnStatus | None = None  # the node's connection state, as its monitor last said
    last_batch_at: float | None = None  # ``time.monotonic()`` when its last log batch came
    # its backlog: None while kvtui still reads it, "" once read, else why it is not ("not read within 30 s")
    backlog: str | None = None


DeploymentSink = Callable[[DeploymentNode, Sequence[MonitorUpdate], DeploymentBoot | None], None]


class DeploymentMonitor:
    """The nodes' monitors and their merged boot (see the module docstring). ``next_boot``: a node's
    current boot is the newest one that began after the monitor started (``wait --next``)."""

    def __init__(self, name: str, nodes: Sequence[DeploymentNode], *, next_boot: bool = False,
                 bound_s: float = 180.0) -> None:
        self.name = name
        self.nodes = list(nodes)
        for i, n in enumerate(self.nodes):
            n.index = i
        self.next_boot = next_boot
        self.bound_s = bound_s
        self.dep: DeploymentBoot | None = None  # the last merged boot published
        self._tasks: list[asyncio.Task[None]] = []
        self.mono: Callable[[], float] = time.monotonic  # the backlog's clock (quiet, limit)
        self.wall: Callable[[], float] = time.time  # the hosts' clock (their lines' stamps)
        self.started_mono: float | None = None  # when ``start`` ran
        self.started_at: datetime | None = None  # the same, on the wall clock: where each node's backlog ends
        # several nodes: each start's last merge, oldest first, and its node boots (listed order)
        self._starts: deque[tuple[tuple[Boot | None, ...], DeploymentBoot]] = deque(maxlen=MAX_STARTS)
        self._dropped = 0  # the starts no longer kept

    # -- reading ----------------------------------------------------------------------------------

    def current(self, node: DeploymentNode) -> Boot | None:
        """The node's boot the deployment is made of now."""
        boots = node.monitor.tracker.boots
        if not boots:
            return None
        if self.next_boot:
            eligible = [b for i, b in enumerate(boots) if i > 0 or any(p.name is Phase.LAUNCH for p in b.phases)]
            return eligible[-1] if eligible else None
        return boots[-1]

    def merged(self) -> DeploymentBoot:
        """The nodes' current boots merged, now (also kept as ``dep``): the newest start's, paired by
        time (``boot.deployment.current_start``: a node restarted alone is not merged with the others' older
        boots; they are named as not in this start)."""
        kept, earlier = current_start([self.current(n) for n in self.nodes])
        self.dep = merge_boots([(n.name, b) for n, b in zip(self.nodes, kept, strict=True)], earlier)
        key = tuple(kept)
        if any(b is not None for b in key):
            last = self._starts[-1][0] if self._starts else None
            if last is not None and all(old is None or old is new for old, new in zip(last, key, strict=True)):
                self._starts[-1] = (key, self.dep)  # the same start, further on
            else:  # a node's boot of the last start was replaced: a new start
                if len(self._starts) == self._starts.maxlen:
                    self._dropped += 1
                self._starts.append((key, self.dep))
        return self.dep

    def start_count(self) -> int:
        """How many starts the deployment had since the monitor started (``start_boot``)."""
        if len(self.nodes) == 1:
            return len(self.nodes[0].monitor.tracker.boots)
        return self._dropped + len(self._starts)

    def start_boot(self, index: int) -> DeploymentBoot:
        """Start ``index`` (0: the first seen): one node's is its boot ``index``, as it is (the merge
        of one node is its boot); several nodes' is the last merge of that start (``merged``: a start
        ends when a node's boot of it is replaced by a newer one — a restart)."""
        if len(self.nodes) == 1:
            n = self.nodes[0]
            boot = n.monitor.tracker.boots[index]
            return DeploymentBoot(boot, [NodeBoot(n.name, 0, 0, boot)])
        return self._starts[max(index - self._dropped, 0)][1]

    def observed(self, extra: dict[int, NodeObservation] | None = None) -> dict[int, NodeObservation]:
        """What the hang diagnosis knows of each node (by node rank): its last line's time, plus
        ``extra`` (a probe's unit state and environment)."""
        out: dict[int, NodeObservation] = {}
        ranks = {n.name: n.node_rank for n in self.dep.nodes} if self.dep is not None else {}
        for n in self.nodes:
            rank = ranks.get(n.name, n.index)
            base = (extra or {}).get(rank)
            out[rank] = NodeObservation(
                unit_active=base.unit_active if base else None,
                unit_state=base.unit_state if base else None,
                last_line_at=n.last_line_at,
                env=base.env if base else None,
                what=base.what if base else "unit",
                unread=self._unread(n),
            )
        return out

    @staticmethod
    def _unread(n: DeploymentNode) -> str | None:
        """Why the node's log is not read yet (no line came and its connection is not up), or None."""
        if n.last_line_at is not None or (n.status is not None and n.status.state is ConnState.CONNECTED):
            return None
        if n.status is None:
            return "connecting"
        return n.status.state.value + (f": {n.status.detail}" if n.status.detail else "")

    def hang(self, extra: dict[int, NodeObservation] | None = None, *, bound_s: float | None = None,
             now: datetime | None = None) -> Hang | None:
        """The hang diagnosis of the merged boot now (``bound_s``: default the deployment's); None
        for one node (it holds no other back) and while a node's backlog is unread (``backlog_pending``:
        that node would be said "not started")."""
        if len(self.nodes) < 2 or self.backlog_pending():
            return None
        dep = self.merged()
        return diagnose_hang(dep, now or datetime.now().astimezone(), self.bound_s if bound_s is None else bound_s,
                             self.observed(extra))

    def node_rank(self, node: DeploymentNode) -> int:
        """The node's rank (its own ``--node-rank`` when its boot printed one, else its position)."""
        if self.dep is not None:
            for nb in self.dep.nodes:
                if nb.name == node.name:
                    return nb.node_rank
        return node.index

    # -- the backlogs ----------------------------------------------------------------------------

    def backlog_pending(self) -> list[DeploymentNode]:
        """The nodes whose backlog (their log as it stood when ``start`` ran) kvtui is still
        reading: no decision that names a node (a hang, a failure) is taken before each node's is
        read — a node not read yet would be said "not started". A node's backlog is read once a
        line stamped at or after the start came (its log's order: everything before it came
        first), or once its stream, having delivered, stayed quiet ``BACKLOG_QUIET_S``; a node
        that delivers nothing is given up on after ``BACKLOG_LIMIT_S`` (``backlog`` says so)."""
        now = self.mono()
        began = self.started_mono if self.started_mono is not None else now
        pending = []
        for n in self.nodes:
            if n.backlog is not None:
                continue
            if n.last_batch_at is not None and now - n.last_batch_at >= BACKLOG_QUIET_S:
                n.backlog = ""
            elif now - began >= BACKLOG_LIMIT_S:
                n.backlog = f"its log not read within {BACKLOG_LIMIT_S:g} s" + (
                    "" if n.last_batch_at is None else " (still reading its backlog)")
            else:
                pending.append(n)
        return pending

    def names_held(self) -> bool:
        """Whether a decision that names a node (a hang, the node that failed) must wait: several
        nodes, and one's backlog is not read yet (``backlog_pending``)."""
        return len(self.nodes) > 1 and bool(self.backlog_pending())

    def backlog_notes(self) -> list[str]:
        """Per node whose backlog was given up on, why (said with a decision)."""
        return [f"{n.name}: {n.backlog}" for n in self.nodes if n.backlog]

    def _batch(self, node: DeploymentNode, batch: LogBatch) -> None:
        node.last_batch_at = self.mono()
        if node.backlog is not None or self.started_at is None:
            return
        for _, stamps in columns(batch.parts):
            for ts in reversed(stamps):
                if ts is not None:
                    if ts.astimezone() >= self.started_at:
                        node.backlog = ""
                    break
            if node.backlog == "":
                return

    # -- running ----------------------------------------------------------------------------------

    def take(self, node: DeploymentNode, updates: Sequence[MonitorUpdate]) -> bool:
        """What the deployment tracks of a node's updates (its connection state, its last line, its
        backlog); True when they changed its log or boot. ``start``'s sink calls it; a console whose
        panes run the node monitors feeds it their updates (``begin`` instead of ``start``)."""
        changed = False
        for u in updates:
            if isinstance(u, ConnUpdate):
                node.status = u.status
            elif isinstance(u, LogBatch):
                node.last_line_at = datetime.now().astimezone()
                self._batch(node, u)
                changed = True
            elif isinstance(u, BootState):
                changed = True
        return changed

    def _sink(self, node: DeploymentNode, sink: DeploymentSink) -> Callable[[Sequence[MonitorUpdate]], None]:
        def on_updates(updates: Sequence[MonitorUpdate]) -> None:
            sink(node, updates, self.merged() if self.take(node, updates) else None)

        return on_updates

    def begin(self) -> None:
        """Where each node's backlog ends is now (``backlog_pending``)."""
        self.started_mono = self.mono()
        self.started_at = datetime.fromtimestamp(self.wall()).astimezone()

    def start(self, sink: DeploymentSink) -> list[asyncio.Task[None]]:
        """Run every node's monitor (one task per node, in node order); their updates go to ``sink``.
        Where each node's backlog ends is now (``begin``)."""
        self.begin()
        self._tasks = [asyncio.create_task(n.monitor.run(self._sink(n, sink))) for n in self.nodes]
        return list(self._tasks)

    async def close(self) -> None:
        """Close every node's monitor (each within ``CLOSE_LIMIT``, then its task is cancelled)."""
        tasks: list[asyncio.Task[None] | None] = list(self._tasks) or [None] * len(self.nodes)
        await asyncio.gather(*(_close(n.monitor, t) for n, t in zip(self.nodes, tasks, strict=True)))


def node_monitor(node_name: str, backend: HostBackend, host: HostConfig, history: HistoryConfig | None,
                 options: MonitorOptions | None = None) -> HostMonitor:
    """A node's ``HostMonitor`` (the console's, ``kvtui wait NAME``'s), run with ``options`` (the
    same ``MonitorOptions`` a host's monitor takes): its boots are recorded in the history under
    the node's host name (``kvtui.history.recorder_for``; none when ``[history] record = false``)."""
    return HostMonitor(node_name, backend, host=host, history=recorder_for(node_name, history),
                       options=options or MonitorOptions())


def unwritten(nodes: Sequence[DeploymentNode]) -> list[str]:
    """After ``close``: per node whose recorder could not write every boot, what it says (the
    command prints it on stderr: a boot the history misses is said, never silent)."""
    out = []
    for n in nodes:
        rec = n.monitor.history
        note = rec.unwritten_note() if rec is not None else None
        if note:
            out.append(f"{n.name}: {note}")
    return out


class NodeStalls:
    """One stall detector (``kvtui.boot.stall``) per node, fed each node's updates as they come (a
    node's new boot restarts its clock; its lines that are not known wait lines and its GPU memory
    moving are progress): the console's deployment pane and ``kvtui wait NAME`` ask it which nodes
    made no progress for a while. ``now``: the caller's clock."""

    def __init__(self) -> None:
        self.detectors: dict[str, StallDetector] = {}

    def feed(self, node: str, updates: Sequence[MonitorUpdate], now: float) -> None:
        det = self.detectors.get(node)
        if det is None:
            det = self.detectors[node] = StallDetector(0.0)
        if any(isinstance(u, BootState) and u.new_boot for u in updates):
            det.reset(now)  # before its lines: they are the new boot's
        for u in updates:
            if isinstance(u, LogBatch):
                det.feed(list(columns(u.parts)), now)
            elif isinstance(u, GpuUpdate):
                det.gpu(u.samples, now)

    def stalls(self, dep: DeploymentBoot, now: float, threshold: float) -> list[tuple[NodeBoot, Stall | None]]:
        """Each node of the merged boot with its stall, once ``threshold`` seconds passed without
        progress on it while its boot and the deployment's are starting (else None: a node of a
        ready deployment whose own log ends at its graph capture — its ranks serve through node 0
        — is up, not stalled)."""
        out: list[tuple[NodeBoot, Stall | None]] = []
        starting = dep.boot.status is BootStatus.STARTING
        for nb in dep.nodes:
            det = self.detectors.get(nb.name)
            out.append((nb, det.stall(nb.boot, now, threshold) if det is not None and starting else None))
        return out


async def _close(monitor: HostMonitor, task: asyncio.Task[None] | None) -> None:
    with contextlib.suppress(TimeoutError, Exception):
        async with asyncio.timeout(CLOSE_LIMIT):
            await monitor.close()
    if task is None:
        return
    _, still = await asyncio.wait({task}, timeout=CLOSE_LIMIT)
    if still:
        task.cancel()
        await asyncio.wait({task}, timeout=CLOSE_LIMIT)
    if not still or task.done():
        with contextlib.suppress(BaseException):
            task.result()


async def probe_nodes(nodes: Sequence[DeploymentNode], dep: DeploymentBoot) -> dict[int, NodeObservation]:
    """Each node's unit state and NCCL_*/GLOO_* environment, asked of its host at once (nodes
    without a unit, or that do not answer, stay unknown; a kube node's pod state is read again).
    What ``kvtui wait NAME`` and the console's hang diagnosis add to the log's evidence."""
    ranks = {n.name: n.node_rank for n in dep.nodes}

    async def one(node: DeploymentNode) -> tuple[int, NodeObservation]:
        rank = ranks.get(node.name, 0)
        if node.host.kind == "kube":  # the pod's state, read again (KubeBackend.refresh)
            refresh = getattr(node.monitor.backend, "refresh", None)
            if refresh is None:
                return rank, NodeObservation(what="pod")
            try:
                st = await refresh()
            except BackendError:
                return rank, NodeObservation(what="pod")
            return rank, NodeObservation(unit_active=st.state == "running", unit_state=st.summary(), what="pod")
        unit = getattr(node.host, "unit", None)
        if not unit or node.host.demo:
            return rank, NodeObservation()
        sudo = bool(getattr(node.host, "sudo", False))
        try:
            res = await node.monitor.backend.run(C.probe_host(unit=unit, sudo=sudo), timeout=PROBE_TIMEOUT)
            info = C.parse_probe(res.stdout)
            env_res = await node.monitor.backend.run(C.unit_environment(unit, sudo=sudo), timeout=PROBE_TIMEOUT)
            env = C.parse_environment(env_res.stdout)
        except (BackendError, TimeoutError):
            return rank, NodeObservation()
        load, _, active = info.get("unit", "/").partition("/")
        state = f"{load} {active}".strip() if load == "not-found" else (active or None)
        return rank, NodeObservation(unit_active=active in ("active", "activating", "reloading") if active else None,
                                     unit_state=state, env=env)

    return dict(await asyncio.gather(*(one(n) for n in nodes)))


__all__ = ["BACKLOG_LIMIT_S", "BACKLOG_QUIET_S", "CLOSE_LIMIT", "MAX_STARTS", "PROBE_TIMEOUT", "DeploymentMonitor",
           "DeploymentNode", "DeploymentSink", "NodeStalls", "node_monitor", "probe_nodes", "unwritten"]
