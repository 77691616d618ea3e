"""``kvtui replay a.log b.log …`` (and ``wait`` on a deployment): how a deployment's merged boot is
shown. ``replay`` reads the files and merges them (``kvtui.boot.deployment``); this module only renders.

Each file is read as ``replay`` reads one (any shape, gzip, the same exit 3 for unreadable input);
node names are the files' names, node ranks come from each log's own ``--node-rank`` (else the
order given). Every start of the deployment is shown as one boot (the merged phases, ranks and
figures, as for one host), then the nodes side by side: each node's phases, which node set each
figure, and the findings (flags that differ between the nodes, a different rendezvous in a
configured deployment). Logs that cannot be one deployment's nodes (``kvtui.boot.deployment.apart``) are not
merged: ``replay`` reports each on its own. Exit 1 when the last start failed on any node."""

from __future__ import annotations

import os
from datetime import datetime

from kvtui.boot.deployment import FIGURE_LABELS, DeploymentBoot, node_state
from kvtui.engines.events import PHASE_RANK, Phase

# the figures shown with the node that set them, in this order
_FIGURES = FIGURE_LABELS


def node_names(paths: list[str]) -> list[str]:
    """The files' names without their directories (``-`` is ``stdin``), made unique."""
    out: list[str] = []
    for p in paths:
        base = "stdin" if p == "-" else os.path.basename(p.rstrip("/")) or p
        name, n = base, 2
        while name in out:
            name, n = f"{base}#{n}", n + 1
        out.append(name)
    return out


def _when(dt: datetime | None) -> str:
    return "—" if dt is None else dt.strftime("%Y-%m-%d %H:%M:%S") + (dt.strftime("%z") if dt.utcoffset() else "")


def render_deployment(dep: DeploymentBoot, boot_lines: list[str], index: int, total: int) -> list[str]:
    """``boot_lines``: the merged boot as ``replay`` renders one boot (``render_boot``); then the
    nodes side by side, which node set each figure, and the findings."""
    lines = list(boot_lines)
    lines[0] = lines[0].replace(f"Boot {index} of {total}", f"Boot {index} of {total} · {len(dep.nodes)} nodes", 1)
    lines.append("  Nodes")
    for n in dep.nodes:
        b = n.boot
        if b is None:
            lines.append(f"    {n.label():<24} no boot of this start in its log")
            continue
        state = node_state(dep, n)
        ranks = f"{b.ranks[0]}…{b.ranks[-1]}" if len(b.ranks) > 1 else (b.ranks[0] if b.ranks else "1 process")
        lines.append(f"    {n.label()}: {state} · {ranks} · started {_when(b.started_at)}")
    phases = [p for p in Phase if any(n.span(p) is not None for n in dep.nodes)]
    if phases:
        head = "    " + f"{'phase ends':<16}" + "".join(f"{'node ' + str(n.node_rank):>12}" for n in dep.nodes)
        lines.append(head)
        for p in sorted(phases, key=lambda p: PHASE_RANK[p]):
            cells = []
            for n in dep.nodes:
                s = n.span(p)
                if s is None:
                    cells.append("—")
                elif s.end is None:
                    cells.append("running" if p is not Phase.READY else "ready")
                else:
                    cells.append(s.end.strftime("%H:%M:%S"))
            lines.append("    " + f"{p.value:<16}" + "".join(f"{c:>12}" for c in cells))
    for key, label in _FIGURES:
        v = dep.boot.facts.get(key)
        who = dep.setter(key)
        if v is not None and who is not None:
            lines.append(f"    {label:<20} {v:.2f} GiB set by {who.label()}")
    if dep.failed_node is not None:
        lines.append(f"    failed first on {dep.node(dep.failed_node).label()}")
    for f in dep.findings:
        lines.append(f"  ! {f}")
    return lines


def header(names: list[str], starts: int) -> str:
    return f"{len(names)} nodes ({', '.join(names)}): {starts} start{'s' if starts != 1 else ''}"
