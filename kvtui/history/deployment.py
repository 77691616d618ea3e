"""A ``[deployments.NAME]``'s remembered boots (pure): each node's stored boots (the console records
them under the node's host name) grouped by start — one row per start of the deployment, its node
boots side by side — and the diff of two such starts, node by node.

The grouping is the one ``kvtui replay a.log b.log`` uses (``kvtui.boot.deployment.pair_boots``: a node's boot
belongs to node 0's boot that started nearest to it and overlaps it); a boot of another node that
pairs with none of node 0's (a node restarted alone) is a start of its own, node 0 missing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from kvtui import fmt
from kvtui.boot import Boot, BootStatus
from kvtui.boot.deployment import DeploymentBoot, began_at, merge_boots, pair_boots
from kvtui.history import diff as hdiff
from kvtui.history import record as rec
from kvtui.history.doc import BootDoc
from kvtui.history.store import StoredBoot


@dataclass(frozen=True, slots=True)
class DeploymentStart:
    """One start of a deployment: per node (in node order) its stored boot, or None when that
    node has none of this start; ``merged``: the nodes' boots merged (``kvtui.boot.deployment``)."""

    nodes: tuple[str, ...]
    members: tuple[StoredBoot | None, ...]
    merged: DeploymentBoot

    @property
    def key(self) -> str:
        """The row's key: its node boots' ids (``12+13``; ``-`` for a node without one)."""
        return "+".join(str(m.id) if m is not None else "-" for m in self.members)

    @property
    def ids(self) -> str:
        """``#12 · #13`` (``—`` for a node without a boot of this start)."""
        return " · ".join(f"#{m.id}" if m is not None else "—" for m in self.members)

    @property
    def status(self) -> BootStatus:
        return self.merged.boot.status

    def head(self) -> BootDoc | None:
        """Node 0's document, else the first node's that has one."""
        return next((m.document for m in self.members if m is not None), None)

    def nodes_text(self) -> str:
        """``n0 ready · n1 up`` (the merged log's node column names; ``up``: a node whose ranks
        serve through node 0 once the whole is ready — ``up, stopped`` once a restart ended it; a
        failure with its kind; ``n1 —``: not in this start)."""
        parts = []
        dep = self.merged
        for i, (m, nb) in enumerate(zip(self.members, dep.nodes, strict=True)):
            if m is None or nb.boot is None:
                parts.append(f"n{i} —")
                continue
            b = nb.boot
            if dep.boot.status is BootStatus.READY and nb is not dep.head and b.status in (BootStatus.STARTING,
                                                                                          BootStatus.STOPPED):
                parts.append(f"n{i} up" + (", stopped" if b.status is BootStatus.STOPPED else ""))
                continue
            kind = m.document.failure_kind
            parts.append(f"n{i} {b.status.value}" + (f" ({kind})" if kind else ""))
        return " · ".join(parts)


ROW_HEADER: tuple[str, ...] = ("boots", "started", "outcome", "nodes", "tokens", "to ready", "fraction")


def start_row(start: DeploymentStart) -> tuple[str, ...]:
    """One start's cells under ``ROW_HEADER`` (the console's ``H`` table and ``kvtui history NAME``):
    its node boots' ids, when it started (node 0's document), the merged outcome, each node's state,
    the merged pool's tokens, time to ready (ready starts only) and the fraction."""
    head = start.head() or BootDoc()
    boot = start.merged.boot
    frac = head.fraction
    ready = boot.status is BootStatus.READY
    return (start.ids, (head.started_at or "")[:19].replace("T", " "), boot.status.value,
            start.nodes_text(), fmt.tokens(boot.metrics.max_total_num_tokens),
            fmt.duration(head.seconds) if ready else fmt.UNKNOWN,
            f"{frac:g}" if frac is not None else fmt.UNKNOWN)


def _order(t: datetime) -> float:
    try:
        return t.timestamp()
    except (OverflowError, OSError, ValueError):
        return 0.0


def deployment_starts(nodes: Sequence[str], per_node: Sequence[Sequence[StoredBoot]]) -> list[DeploymentStart]:
    """The deployment's starts, newest first, from each node's stored boots (``per_node``, in node
    order, each newest first as ``Store.boots`` gives them)."""
    names = tuple(nodes)
    boots: list[list[Boot]] = []
    stored: dict[int, StoredBoot] = {}
    for rows in per_node:
        mine = []
        for r in reversed(rows):  # oldest first, as pair_boots reads a log
            b = rec.boot_from_doc(r.document)
            stored[id(b)] = r
            mine.append(b)
        boots.append(mine)
    groups: list[list[Boot | None]] = pair_boots(boots) if boots else []
    used = {id(b) for g in groups for b in g if b is not None}
    for i, mine in enumerate(boots[1:], start=1):  # a node's boot of no start of node 0's
        for b in mine:
            if id(b) not in used:
                groups.append([b if j == i else None for j in range(len(names))])
                used.add(id(b))

    def when(g: list[Boot | None]) -> tuple[float, int]:
        times = [_order(t) for b in g if b is not None and (t := began_at(b)) is not None]
        return (min(times) if times else 0.0, max(stored[id(b)].id for b in g if b is not None))

    groups.sort(key=when, reverse=True)
    return [DeploymentStart(names, tuple(stored[id(b)] if b is not None else None for b in g),
                            merge_boots(list(zip(names, g, strict=True)))) for g in groups]


def previous_good(starts: Sequence[DeploymentStart], current: DeploymentStart) -> DeploymentStart | None:
    """The newest ready start older than ``current`` (``starts`` newest first), else the one just
    before it; None when ``current`` is the oldest."""
    older = list(starts[starts.index(current) + 1:]) if current in starts else []
    return next((s for s in older if s.status is BootStatus.READY), older[0] if older else None)


def render_diff(base: DeploymentStart, cur: DeploymentStart) -> list[str]:
    """What changed from ``base`` to ``cur``, node by node (``kvtui.history.diff`` of each node's
    two boots), as text lines."""
    out = [f"start {cur.ids} compared with start {base.ids} ({cur.status.value} ← {base.status.value})"]
    for i, name in enumerate(cur.nodes):
        a = base.members[i] if i < len(base.members) else None
        b = cur.members[i]
        out.append("")
        out.append(f"== node {i} ({name}) ==")
        if a is None or b is None:
            which = "either start" if a is None and b is None else ("the base" if a is None else "this start")
            out.append(f"  no boot of {name} in {which}: nothing to compare")
            continue
        out.extend(hdiff.render(hdiff.diff(a.document, b.document, base_id=a.id, boot_id=b.id)))
    return out


__all__ = ["ROW_HEADER", "DeploymentStart", "deployment_starts", "previous_good", "render_diff", "start_row"]
