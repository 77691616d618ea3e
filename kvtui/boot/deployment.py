"""One boot across the nodes of a deployment (issue 15): merge, compare, diagnose a hang.

Pure core: no textual, no asyncssh, no I/O. Each node's log goes through its own ``BootTracker``
(a node's restarts, rank tags and failures are its own); this module puts the nodes' boots of
one start side by side and builds:

- the **merged boot** (a ``Boot``, so every reader of a boot reads it): the ranks of all nodes
  (SGLang and vLLM print global ranks: TP0-7 on node 0, TP8-15 on node 1; ranks that collide are
  kept apart as ``N1 TP0``), each phase spanning from the first node's start to the last node's
  end (a phase of the whole ends when its last node ends it: still running while any node that
  started it has not ended it), the figures aggregated by the tracker's rules (``fact_rule``:
  min of free memory, max of graph memory, the lowest rank's sizes) with the node that set each;
- the **node identity** of each node: ``--node-rank`` / ``--nnodes`` / ``--dist-init-addr``
  (vLLM ``--master-addr``/``--master-port``) from its own argument dump, else its position;
- **findings**: flags that differ between nodes ("node 1 (h20-b) runs --mem-fraction-static
  0.85, node 0 (h20-a) 0.88"), node ranks that clash or disagree with the listed order,
  ``--nnodes`` that is not the node count;
- ``diagnose_hang``: a node that has not reached the phase the others reached, within a bound,
  named with the causes kvtui can see;
- **pairing by time** (``same_start``, ``current_start``, ``pair_boots``): a node's boot belongs to
  a start only if it overlaps it — a boot that was past its rendezvous (its distributed init
  ended) or over before another node's boot began met other boots than that one, so a node
  restarted alone is not merged with the other nodes' older boots: the node that was not
  restarted "has not started this boot".

Only node rank 0 serves HTTP (SGLang's other nodes run schedulers only; vLLM's other nodes run
``--headless``): ``http_up`` and ``ready`` are the head's, and the whole is ready when the head is
ready, every other node's log shows the head's last scheduler phase, and no node failed or
stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kvtui import fmt
from kvtui.boot.facts import fact_rule, rank_sort_key, refresh_metrics
from kvtui.boot.model import Boot, BootStatus, PhaseSpan
from kvtui.engines.events import PHASE_RANK, Engine, Fact, Model, Phase

# phases only the head node (node rank 0) reaches
HEAD_ONLY: frozenset[Phase] = frozenset({Phase.HTTP_UP, Phase.READY})
# flags that differ between nodes by design (never a finding)
NODE_LOCAL_FLAGS: frozenset[str] = frozenset({
    "node_rank", "host", "base_gpu_id", "headless", "data_parallel_rank", "data_parallel_start_rank",
    "data_parallel_rank_local", "api_server_count",
})
MAX_FINDINGS = 32
MAX_WARNINGS = 32
# boots of two nodes further apart than this are not one start (``pair_boots``)
PAIR_WINDOW = timedelta(minutes=15)
# how far the nodes' clocks (or a journal's and an engine's stamps) may differ (``same_start``)
CLOCK_SLACK = timedelta(seconds=10)

# what a phase is called in a sentence ("has not started distributed init")
PHASE_WORDS: dict[Phase, str] = {
    Phase.LAUNCH: "launch",
    Phase.INIT: "distributed init",
    Phase.LOAD_WEIGHTS: "weight loading",
    Phase.COMPILE: "compilation",
    Phase.KV_ALLOCATE: "KV pool allocation",
    Phase.GRAPH_CAPTURE: "CUDA graph capture",
    Phase.HTTP_UP: "the HTTP server",
    Phase.READY: "ready",
}
# where a node that sits in a phase waits for the others (the engines' collectives)
WAIT_WORDS: dict[Phase, str] = {
    Phase.INIT: "NCCL init (distributed init)",
    Phase.KV_ALLOCATE: "the pool-size all-reduce",
}


def node_state(dep: DeploymentBoot, n: NodeBoot, phase_word: Callable[[Phase], str] = lambda p: p.value) -> str:
    """How far a node's boot got, in words: ``ready``, ``starting at init``, ``failed``, … and, for a
    node other than node 0 once the whole is ready, ``up (its ranks serve through node 0 (…))``.
    ``phase_word``: how a phase is named (the phase's code, as ``replay`` prints it; the console
    passes its tabs' words)."""
    b = n.boot
    if b is None:
        if n.earlier is not None:
            return "not in this start (its boot is of an earlier one: not restarted)"
        return "no boot of this start in its log"
    where = f" at {phase_word(b.phase)}" if b.phase is not None and b.status is BootStatus.STARTING else ""
    if dep.boot.status is BootStatus.READY and b.status is BootStatus.STARTING and n is not dep.head:
        return f"up (its ranks serve through {dep.head.label()})"
    return f"{b.status.value}{where}"


# the merged figures a deployment names the setting node of, with their labels (replay, the console)
FIGURE_LABELS: tuple[tuple[Fact, str], ...] = (
    (Fact.AVAIL_BEFORE_LOAD_GIB, "free before weights"),
    (Fact.AVAIL_AFTER_LOAD_GIB, "free after weights"),
    (Fact.AVAIL_AFTER_POOL_GIB, "free after pool"),
    (Fact.GRAPH_MEM_GIB, "CUDA graphs"),
    (Fact.AVAILABLE_GPU_MEM_GIB, "free after start-up"),
    (Fact.KV_CACHE_GIB, "KV pool per rank"),
)


@dataclass(slots=True)
class NodeBoot:
    """One node's side of a deployment boot. ``boot`` is None when that node's log holds no boot
    of this start (it never started, or its log is not there)."""

    name: str
    position: int  # where the deployment lists it
    node_rank: int  # from its --node-rank when printed, else the position
    boot: Boot | None
    nnodes: int | None = None
    dist_init_addr: str | None = None
    rank_from_flags: bool = False
    earlier: Boot | None = None  # with ``boot`` None: the node's newest boot, of an earlier start

    def label(self) -> str:
        return f"node {self.node_rank} ({self.name})"

    @property
    def phase(self) -> Phase | None:
        return self.boot.phase if self.boot is not None else None

    def span(self, phase: Phase, model: Model = Model.TARGET) -> PhaseSpan | None:
        if self.boot is None:
            return None
        return next((s for s in self.boot.phases if s.name is phase and s.model is model), None)

    def to_json(self) -> dict[str, object]:
        b = self.boot
        return {
            "name": self.name,
            "position": self.position,
            "node_rank": self.node_rank,
            "nnodes": self.nnodes,
            "dist_init_addr": self.dist_init_addr,
            "status": b.status.value if b is not None else None,
            "phase": b.phase.value if b is not None and b.phase is not None else None,
            "ranks": list(b.ranks) if b is not None else [],
            "phases": [
                {"name": s.name.value, "model": s.model.value, "start": _iso(s.start), "end": _iso(s.end),
                 "seconds": s.seconds if s.end is not None else None}
                for s in (b.phases if b is not None else [])
            ],
        }


@dataclass(slots=True)
class DeploymentBoot:
    """A boot of the whole deployment: ``boot`` (merged), the nodes (by node rank), which node set
    each figure (``figure_node``: fact name -> node rank) and the findings."""

    boot: Boot
    nodes: list[NodeBoot]
    figure_node: dict[Fact, int] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    failed_node: int | None = None  # the node rank whose failure failed the whole

    @property
    def head(self) -> NodeBoot:
        return self.nodes[0]

    def node(self, node_rank: int) -> NodeBoot:
        return next(n for n in self.nodes if n.node_rank == node_rank)

    def setter(self, fact: Fact) -> NodeBoot | None:
        """The node whose value the merged figure ``fact`` is."""
        rank = self.figure_node.get(fact)
        return self.node(rank) if rank is not None else None

    def to_json(self) -> dict[str, object]:
        out = self.boot.to_json()
        out["nodes"] = [n.to_json() for n in self.nodes]
        out["figure_nodes"] = {k: v for k, v in sorted(self.figure_node.items())}
        out["findings"] = list(self.findings)
        out["failed_node"] = self.failed_node
        return out


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def _int_flag(flags: Mapping[str, object], *names: str) -> int | None:
    for n in names:
        v = flags.get(n)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().isdigit():
            return int(v.strip())
    return None


def _dist_addr(flags: Mapping[str, object]) -> str | None:
    v = flags.get("dist_init_addr")
    if isinstance(v, str) and v:
        return v
    addr = flags.get("master_addr")
    if isinstance(addr, str) and addr:
        port = flags.get("master_port")
        return f"{addr}:{port}" if port is not None else addr
    return None


def cli_flag(name: str) -> str:
    """An engine flag name as the command line spells it: ``mem_fraction_static`` ->
    ``--mem-fraction-static``."""
    return "--" + name.replace("_", "-")


def _shown(v: object) -> str:
    if isinstance(v, float) and math.isfinite(v):
        return f"{v:g}"
    return str(v)


def identify(nodes: Sequence[tuple[str, Boot | None]],
             earlier: Sequence[Boot | None] | None = None) -> tuple[list[NodeBoot], list[str]]:
    """Each node's identity (its own --node-rank / --nnodes / --dist-init-addr, else its position),
    sorted by node rank, and the findings about identities. ``earlier``: per node (listed order),
    its newest boot when that is of an earlier start (its node rank is then read from it)."""
    out: list[NodeBoot] = []
    findings: list[str] = []
    for pos, (name, boot) in enumerate(nodes):
        old = earlier[pos] if earlier is not None and pos < len(earlier) and boot is None else None
        flags = boot.flags if boot is not None else (old.flags if old is not None else {})
        rank = _int_flag(flags, "node_rank")
        out.append(NodeBoot(name=name, position=pos, node_rank=rank if rank is not None else pos, boot=boot,
                            nnodes=_int_flag(flags, "nnodes"), dist_init_addr=_dist_addr(flags),
                            rank_from_flags=rank is not None, earlier=old))
    seen: dict[int, NodeBoot] = {}
    clash = False
    for n in out:
        other = seen.get(n.node_rank)
        if other is not None:
            clash = True
            findings.append(f"{n.name} and {other.name} both run --node-rank {n.node_rank}: the deployment "
                            "cannot start (each node needs its own rank)")
        seen[n.node_rank] = n
    if clash:  # keep the listed order: ranks from flags are not usable
        for n in out:
            n.node_rank = n.position
    else:
        for n in out:
            if n.rank_from_flags and n.node_rank != n.position:
                findings.append(f"{n.name} is listed as node {n.position} but runs --node-rank {n.node_rank} "
                                "(kvtui follows the flag; list the hosts in rank order in [deployments])")
        out.sort(key=lambda n: n.node_rank)
    count = len(out)
    for n in out:
        if n.nnodes is not None and n.nnodes != count:
            findings.append(f"{n.label()} runs --nnodes {n.nnodes}, but the deployment lists {count} nodes")
    addrs = {n.dist_init_addr for n in out if n.dist_init_addr is not None}
    if len(addrs) > 1:
        head = out[0]
        for n in out[1:]:
            if n.dist_init_addr is not None and n.dist_init_addr != head.dist_init_addr:
                findings.append(f"{n.label()} runs --dist-init-addr {n.dist_init_addr}, {head.label()} "
                                f"{head.dist_init_addr}: the nodes do not meet at one rendezvous")
    return out, findings


def flag_findings(nodes: Sequence[NodeBoot]) -> list[str]:
    """Flags that differ from the head's (node rank 0): one finding per node and flag."""
    out: list[str] = []
    present = [n for n in nodes if n.boot is not None and n.boot.flags]
    if len(present) < 2:
        return out
    head = present[0]
    assert head.boot is not None
    for n in present[1:]:
        assert n.boot is not None
        keys = [k for k in dict.fromkeys([*head.boot.flags, *n.boot.flags]) if k not in NODE_LOCAL_FLAGS
                and k not in ("nnodes", "dist_init_addr", "master_addr", "master_port")]
        for k in keys:
            a, b = head.boot.flags.get(k), n.boot.flags.get(k)
            if a != b:
                mine = _shown(b) if k in n.boot.flags else "(not set)"
                theirs = _shown(a) if k in head.boot.flags else "(not set)"
                out.append(f"{n.label()} runs {cli_flag(k)} {mine}, {head.label()} {theirs}")
    return out


def _merge_phases(nodes: Sequence[NodeBoot]) -> list[PhaseSpan]:
    keys: dict[tuple[Phase, Model], None] = {}
    for n in nodes:
        if n.boot is not None:
            for s in n.boot.phases:
                keys.setdefault((s.name, s.model))
    spans: list[PhaseSpan] = []
    for phase, model in keys:
        own = [(n, n.span(phase, model)) for n in nodes]
        if phase in HEAD_ONLY:
            own = [(n, s) for n, s in own if n is nodes[0]]
        started = [s for _, s in own if s is not None]
        if not started:
            continue
        starts = [s.start for s in started if s.start is not None]
        merged = PhaseSpan(name=phase, model=model, start=min(starts) if starts else None)
        # ends when its last node ends it: every node that is alive must have ended it
        alive = [s for n, s in own if n.boot is not None]
        if all(s is not None and s.end is not None for s in alive):
            ends = [s.end for s in alive if s is not None and s.end is not None]
            merged.end = max(ends) if ends else None
            if merged.end is not None and merged.start is not None:
                merged.seconds = round(max((merged.end - merged.start).total_seconds(), 0.0), 3)
            else:
                secs = [s.seconds for s in alive if s is not None and s.seconds is not None]
                merged.seconds = max(secs) if secs else None
        done = [s for s in started if s.progress_total]
        if done:
            merged.progress_total = sum(s.progress_total or 0 for s in done)
            merged.progress_done = sum(s.progress_done or 0 for s in done)
        spans.append(merged)
    spans.sort(key=lambda s: (s.start is None, s.start or datetime.min, PHASE_RANK[s.name]))
    return spans


def _merge_facts(nodes: Sequence[NodeBoot], draft: bool) -> tuple[dict[Fact, float], dict[Fact, int]]:
    facts: dict[Fact, float] = {}
    setter: dict[Fact, int] = {}
    for n in nodes:  # node-rank order: "lowest" keeps the first (the lowest rank's) value
        if n.boot is None:
            continue
        own = n.boot.draft_facts if draft else n.boot.facts
        for name, v in own.items():
            old = facts.get(name)
            rule = fact_rule(name)
            if old is None or (rule == "min" and v < old) or (rule == "max" and v > old):
                facts[name] = v
                setter[name] = n.node_rank
    return facts, setter


def _rank_names(nodes: Sequence[NodeBoot]) -> dict[int, dict[str, str]]:
    """Per node, its rank tags as the merged boot names them: global ranks stay as printed; a
    tag another node already printed becomes ``N<node rank> <tag>``."""
    taken: set[str] = set()
    out: dict[int, dict[str, str]] = {}
    for n in nodes:
        names: dict[str, str] = {}
        for r in (n.boot.ranks if n.boot is not None else []):
            names[r] = f"N{n.node_rank} {r}" if r in taken else r
        taken.update(names.values())
        out[n.node_rank] = names
    return out


def merge_boots(nodes: Sequence[tuple[str, Boot | None]],
                earlier: Sequence[Boot | None] | None = None) -> DeploymentBoot:
    """One boot of the deployment from each node's boot of that start (in the listed order);
    ``earlier``: per node, its newest boot when that is not of this start (``current_start``)."""
    if not nodes:
        raise ValueError("a deployment boot needs at least one node")
    ordered, findings = identify(nodes, earlier)
    findings.extend(flag_findings(ordered))
    present = [n for n in ordered if n.boot is not None]
    head = ordered[0]
    merged = Boot()
    merged.engine = next((n.boot.engine for n in present if n.boot is not None and n.boot.engine is not Engine.UNKNOWN),
                         Engine.UNKNOWN)
    merged.version_hint = next((n.boot.version_hint for n in present if n.boot is not None and n.boot.version_hint),
                               None)
    if present:
        src = head.boot if head.boot is not None else present[0].boot
        assert src is not None
        merged.flags = dict(src.flags)
        merged.capture_trail = list(src.capture_trail)
        merged.capture_bs = list(src.capture_bs)
        merged.live = src.live
        merged.first_line = src.first_line
        merged.last_line = src.last_line
    names = _rank_names(ordered)
    ranks: list[str] = []
    for n in present:
        assert n.boot is not None
        ranks.extend(names[n.node_rank][r] for r in n.boot.ranks)
        for r, facts in n.boot.rank_facts.items():
            merged.rank_facts[names[n.node_rank].get(r, r if r != "main" else f"N{n.node_rank} main")] = dict(facts)
        for w in n.boot.warnings:
            if len(merged.warnings) < MAX_WARNINGS:
                merged.warnings.append(f"{n.label()}: {w}")
    merged.ranks = sorted(dict.fromkeys(ranks), key=lambda r: (r.startswith("N"), rank_sort_key(r)))
    merged.phases = _merge_phases(ordered)
    merged.facts, setter = _merge_facts(ordered, draft=False)
    merged.draft_facts, _ = _merge_facts(ordered, draft=True)
    starts = [n.boot.started_at for n in present if n.boot is not None and n.boot.started_at is not None]
    merged.started_at = min(starts) if starts else None
    ends = [n.boot.ended_at for n in present if n.boot is not None]
    merged.ended_at = max(e for e in ends if e is not None) if ends and all(e is not None for e in ends) else None

    failed_node: int | None = None
    failed = [n for n in present if n.boot is not None and n.boot.status is BootStatus.FAILED]
    if failed:
        first = min(failed, key=lambda n: (n.boot.ended_at is None if n.boot else True,
                                           (n.boot.ended_at or datetime.max) if n.boot else datetime.max,
                                           n.node_rank))
        assert first.boot is not None
        merged.status = BootStatus.FAILED
        merged.failure = first.boot.failure
        failed_node = first.node_rank
    elif head.boot is not None and head.boot.status is BootStatus.READY and _others_caught_up(ordered):
        merged.status = BootStatus.READY
    elif any(n.boot is not None and n.boot.status is BootStatus.STOPPED for n in present):
        merged.status = BootStatus.STOPPED
    else:
        merged.status = BootStatus.STARTING
    if merged.status is BootStatus.READY:
        merged.phase = head.phase
    else:
        reached = [n.phase for n in ordered]
        known = [p for p in reached if p is not None and p not in HEAD_ONLY]
        merged.phase = min(known, key=lambda p: PHASE_RANK[p]) if known and None not in reached else None
        if merged.phase is None and head.phase in HEAD_ONLY:
            merged.phase = head.phase
    refresh_metrics(merged)
    if len(ordered) == 1 and head.boot is not None and not findings:
        # a host is a deployment of one node: its merge is the identity (its own boot, unchanged)
        return DeploymentBoot(boot=head.boot, nodes=ordered, figure_node=setter, failed_node=failed_node)
    # the findings travel with the boot: every reader of a boot (calc, the console) shows warnings
    merged.warnings[:0] = [f"deployment: {f}" for f in findings[:MAX_WARNINGS]]
    del merged.warnings[MAX_WARNINGS:]
    return DeploymentBoot(boot=merged, nodes=ordered, figure_node=setter, findings=findings[:MAX_FINDINGS],
                          failed_node=failed_node)


def _top(n: NodeBoot) -> int:
    """The furthest phase a node's own log shows (head-only phases aside; -1: none)."""
    if n.boot is None:
        return -1
    return max((PHASE_RANK[s.name] for s in n.boot.phases if s.name not in HEAD_ONLY), default=-1)


def _others_caught_up(nodes: Sequence[NodeBoot]) -> bool:
    """Every other node's log shows the head's last scheduler phase (the head cannot serve before
    they got there; a log that does not show it yet has not been read that far)."""
    want = _top(nodes[0])
    return all(_top(n) >= want for n in nodes[1:])


def settled_at(b: Boot) -> datetime | None:
    """When a boot was past its rendezvous — its distributed init ended (or a later phase began:
    init was over) — or over (stopped, failed); None when its log does not say (yet)."""
    times: list[datetime] = []
    init = next((s for s in b.phases if s.name is Phase.INIT and s.model is Model.TARGET), None)
    if init is not None and init.end is not None:
        times.append(init.end)
    later = [s.start for s in b.phases if PHASE_RANK[s.name] > PHASE_RANK[Phase.INIT] and s.start is not None]
    if later:
        times.append(min(later))
    if b.ended_at is not None:
        times.append(b.ended_at)
    if not times:
        return None
    ref = times[0]
    return min(_same_clock(t, ref) for t in times)


def same_start(a: Boot, b: Boot) -> bool:
    """Whether two nodes' boots can be of one start of the deployment: neither was past its
    rendezvous or over before the other began (the nodes meet at distributed init, so a boot
    that had met its peers, or ended, before another began met other boots than that one).
    True when the stamps needed are not known."""
    for x, y in ((a, b), (b, a)):
        done = settled_at(x)
        began = began_at(y)
        if done is not None and began is not None and _same_clock(began, done) > done + CLOCK_SLACK:
            return False
    return True


def began_at(b: Boot) -> datetime | None:
    """When a boot began: its start, or its first phase's when that is earlier (the start may come
    from the journal's stamp of the unit's start, the phases from the engine's own)."""
    times = [t for t in (b.started_at, *(s.start for s in b.phases)) if t is not None]
    if not times:
        return None
    return min(_same_clock(t, times[0]) for t in times)


def current_start(boots: Sequence[Boot | None]) -> tuple[list[Boot | None], list[Boot | None]]:
    """The nodes' newest boots (listed order) cut to one start: the start is the newest-started
    of them; a node whose boot is not of it (``same_start``) has none in it. Returns (the boots of
    the start, per node the boot left out as of an earlier start, else None)."""
    timed = [b for b in boots if b is not None and b.started_at is not None]
    if len(timed) < 2:
        return list(boots), [None] * len(boots)
    ref = timed[0].started_at
    assert ref is not None
    newest = max(timed, key=lambda b: _same_clock(b.started_at, ref) if b.started_at is not None else ref)
    kept: list[Boot | None] = []
    left: list[Boot | None] = []
    for b in boots:
        if b is None or b is newest or same_start(b, newest):
            kept.append(b)
            left.append(None)
        else:
            kept.append(None)
            left.append(b)
    return kept, left


def pair_boots(per_node: Sequence[Sequence[Boot]]) -> list[list[Boot | None]]:
    """Group the nodes' boots by start: each boot of node 0 (the anchor) with, from every other
    node, the unused boot that started nearest to it within ``PAIR_WINDOW`` and overlaps it
    (``same_start``; None when none did). Without timestamps, boots pair by their position
    counted from the last."""
    if not per_node:
        return []
    anchor = list(per_node[0])
    groups: list[list[Boot | None]] = [[b] for b in anchor]
    for boots in per_node[1:]:
        used: set[int] = set()
        timed = all(b.started_at is not None for b in anchor) and all(b.started_at is not None for b in boots)
        for gi, a in enumerate(anchor):
            pick: int | None = None
            if timed:
                best: float | None = None
                for j, b in enumerate(boots):
                    if j in used or a.started_at is None or b.started_at is None:
                        continue
                    if (a.started_at.tzinfo is None) != (b.started_at.tzinfo is None) or not same_start(a, b):
                        continue
                    d = abs((b.started_at - a.started_at).total_seconds())
                    if d <= PAIR_WINDOW.total_seconds() and (best is None or d < best):
                        best, pick = d, j
            else:
                j = len(boots) - (len(anchor) - gi)
                pick = j if 0 <= j < len(boots) else None
            if pick is not None:
                used.add(pick)
            groups[gi].append(boots[pick] if pick is not None else None)
    return groups


# a vLLM argument that only a node of several runs with (vLLM prints non-default arguments only)
_VLLM_NODE_FLAGS: tuple[str, ...] = ("master_addr", "data_parallel_address", "headless")
MAX_APART = 32


def multi_node(b: Boot) -> bool | None:
    """Whether a boot's own argument dump says it is one node of several (True), a server on one
    node (False: SGLang ``nnodes=1``; a vLLM dump without ``--nnodes``, ``--master-addr``, the
    data-parallel address or ``--headless``), or does not say (None: no dump in its log)."""
    f = b.flags
    nnodes = _int_flag(f, "nnodes")
    if nnodes is not None:
        return nnodes > 1
    if (_int_flag(f, "node_rank") or 0) > 0 or (_int_flag(f, "data_parallel_start_rank") or 0) > 0:
        return True
    if any(f.get(k) not in (None, False, "") for k in _VLLM_NODE_FLAGS):
        return True
    if "model" in f or "model_path" in f:
        return False
    return None


def _model_name(b: Boot) -> str | None:
    """The served model as its dump names it, without its directory (nodes may keep their copies
    in different places)."""
    v = b.flags.get("model_path", b.flags.get("model"))
    if not isinstance(v, str) or not v.strip():
        return None
    return v.strip().rstrip("/").rsplit("/", 1)[-1] or v.strip()


def _disagree(present: Sequence[tuple[str, Boot]]) -> list[str]:
    """What the boots of one start (name, boot) say against being nodes of one deployment."""
    out: list[str] = []
    engines = {b.engine for _, b in present if b.engine is not Engine.UNKNOWN}
    if len(engines) > 1:
        out.append(", ".join(f"{n} is a {b.engine.value} boot" for n, b in present if b.engine is not Engine.UNKNOWN))
    nnodes = {n: v for n, b in present if (v := _int_flag(b.flags, "nnodes")) is not None}
    if len(set(nnodes.values())) > 1:
        out.append("they run different --nnodes (" + ", ".join(f"{n} {v}" for n, v in nnodes.items()) + ")")
    elif nnodes and len(present) > next(iter(nnodes.values())):
        out.append(f"{len(present)} logs of one start, but they run --nnodes {next(iter(nnodes.values()))}")
    ranks: dict[int, str] = {}
    for n, b in present:
        r = _int_flag(b.flags, "node_rank")
        if r is None:
            continue
        if r in ranks:
            out.append(f"{ranks[r]} and {n} both run --node-rank {r}")
        else:
            ranks[r] = n
    addrs = {n: a for n, b in present if (a := _dist_addr(b.flags)) is not None}
    if len(set(addrs.values())) > 1:
        out.append("they meet at different rendezvous (" + ", ".join(f"{n} {a}" for n, a in addrs.items()) + ")")
    models = {n: m for n, b in present if (m := _model_name(b)) is not None}
    if len(set(models.values())) > 1:
        out.append("they serve different models (" + ", ".join(f"{n} {m}" for n, m in models.items()) + ")")
    return out


def apart(per_node: Sequence[tuple[str, Sequence[Boot]]]) -> list[str]:
    """Why these logs are not the nodes of one deployment (``replay a.log b.log``), or ``[]`` when
    they may be: a log whose boots are servers on one node (``multi_node`` False, none True),
    boots of one start that disagree (engine, ``--nnodes``, ``--node-rank``, rendezvous, model),
    or a log none of whose boots is of one start with a boot of the first (``pair_boots``: they
    do not overlap in time). Logs without a boot say nothing either way."""
    out: list[str] = []
    logs = [(n, list(b)) for n, b in per_node if b]
    single: set[int] = set()
    for i, (n, boots) in enumerate(logs):
        said = [multi_node(b) for b in boots]
        if False in said and True not in said:
            single.add(i)
            nn = next((v for b in boots if (v := _int_flag(b.flags, "nnodes")) is not None), None)
            why = f"--nnodes {nn}" if nn is not None else "its arguments name no other node"
            out.append(f"{n} is a server on one node ({why})")
    if len(logs) >= 2:
        groups = pair_boots([b for _, b in logs])
        names = [n for n, _ in logs]
        met: set[int] = set()
        for g in groups:
            at = [i for i, b in enumerate(g) if b is not None]
            if len(at) < 2:
                continue
            met.update(at)
            # the logs already said to be of one-node servers are left out of the comparison
            present = [(names[i], b) for i, b in enumerate(g) if b is not None and i not in single]
            if len(present) >= 2:
                out.extend(_disagree(present))
        for i, n in enumerate(names[1:], 1):
            if i not in met and i not in single and 0 not in single:
                out.append(f"no boot of {n} is of one start with a boot of {names[0]} (they do not overlap in time)")
    return list(dict.fromkeys(out))[:MAX_APART]


def merge_logs(per_node: Sequence[tuple[str, Sequence[Boot]]]) -> list[DeploymentBoot]:
    """Every start of the deployment from each node's boots (``replay a.log b.log``)."""
    names = [n for n, _ in per_node]
    return [merge_boots(list(zip(names, group, strict=True))) for group in pair_boots([b for _, b in per_node])]


# ---------------------------------------------------------------------------------------------
# Hang diagnosis
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeObservation:
    """What kvtui sees of a node besides its log's boot (None = not known): whether its unit (or
    server process) runs, when its log last said anything, the NCCL_*/GLOO_* settings of its
    unit's environment, and why its log is not read yet (a node still connecting has no boot
    kvtui knows of, which is not "no boot in its log")."""

    unit_active: bool | None = None
    unit_state: str | None = None
    last_line_at: datetime | None = None
    env: Mapping[str, str] | None = None
    what: str = "unit"  # what runs the server there: "unit" (systemd), "pod" (Kubernetes)
    unread: str | None = None  # why kvtui has not read the node's log yet ("connecting", …); None: read


@dataclass(frozen=True, slots=True)
class Hang:
    """A deployment that waits for some of its nodes: ``lagging`` node ranks, ``phase`` the others
    reached, and the sentences."""

    lagging: tuple[int, ...]
    phase: Phase
    summary: str
    causes: tuple[str, ...]

    def lines(self) -> list[str]:
        return [self.summary, *(f"  - {c}" for c in self.causes)]


_ENV_PREFIXES = ("NCCL_", "GLOO_", "TP_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT")


def _reach(n: NodeBoot) -> int:
    """How far a node got (phase order; -1 for no boot)."""
    if n.boot is None or n.boot.phase is None:
        return -1
    return PHASE_RANK[n.boot.phase]


def _same_clock(t: datetime, ref: datetime) -> datetime:
    """``t`` on ``ref``'s kind of clock: a naive stamp is local time (the engines' own stamps)."""
    if (t.tzinfo is None) == (ref.tzinfo is None):
        return t
    if ref.tzinfo is not None:
        return t.astimezone(ref.tzinfo)  # naive -> local -> ref's zone
    return t.astimezone().replace(tzinfo=None)  # aware -> local naive


def diagnose_hang(dep: DeploymentBoot, now: datetime, bound_s: float,
                  observed: Mapping[int, NodeObservation] | None = None) -> Hang | None:
    """The nodes that hold the deployment back, with the causes kvtui can see, or None.

    A node holds it back when it has not reached the phase another node reached at least
    ``bound_s`` ago (head-only phases aside), or at once when its boot stopped (its unit was
    stopped, it was restarted alone) while the others wait. None once the whole is ready or
    failed, and while no node trails for that long."""
    if dep.boot.status in (BootStatus.READY, BootStatus.FAILED) or len(dep.nodes) < 2:
        return None
    observed = observed or {}
    stopped = [n for n in dep.nodes if n.boot is not None and n.boot.status is BootStatus.STOPPED]
    running = [n for n in dep.nodes if n not in stopped]
    cap = PHASE_RANK[Phase.GRAPH_CAPTURE]
    top = max((min(_reach(n), cap) for n in running), default=-1)
    if top < 0 and not stopped:
        return None
    top = max(top, 0)
    phase = next(p for p, r in PHASE_RANK.items() if r == top)
    lagging = [n for n in dep.nodes if n in stopped or _reach(n) < top]
    if not lagging:
        return None
    ahead = [n for n in running if n not in lagging]
    since = [s.start for n in ahead if (s := n.span(phase)) is not None and s.start is not None]
    first = min(since) if since else None
    waiting = max((now - _same_clock(first, now)).total_seconds(), 0.0) if first is not None else 0.0
    if not stopped and waiting < bound_s:
        return None
    parts = []
    for n in lagging:
        ob = observed.get(n.node_rank, NodeObservation())
        if n.boot is None and n.earlier is not None:
            when = f", started {n.earlier.started_at:%H:%M:%S}" if n.earlier.started_at is not None else ""
            parts.append(f"{n.label()} has not started this boot (its newest boot{when}, is of an earlier start: "
                         "the node was not restarted with the others)")
        elif n.boot is None and ob.unread and ob.unit_active is not False:  # (a stopped unit: not started)
            parts.append(f"{n.label()} has no boot kvtui could read (its log is not read yet: {ob.unread})")
        elif n.boot is None:
            parts.append(f"{n.label()} has not started (no boot in its log)")
        elif n in stopped:
            parts.append(f"{n.label()} stopped at {PHASE_WORDS[n.boot.phase] if n.boot.phase else 'launch'}")
        else:
            parts.append(f"{n.label()} has not started {PHASE_WORDS[phase]} "
                         f"(it is at {PHASE_WORDS[n.boot.phase] if n.boot.phase else 'launch'})")
    summary = "; ".join(parts)
    if ahead:
        wait_word = WAIT_WORDS.get(phase, PHASE_WORDS[phase])
        summary += f"; {', '.join(n.label() for n in ahead)} waiting {fmt.duration(waiting)} at {wait_word}"
    causes: list[str] = []
    for n in lagging:
        ob = observed.get(n.node_rank, NodeObservation())
        if ob.unit_active is False:
            causes.append(f"{n.label()}: its {ob.what} is not running"
                          + (f" ({ob.unit_state})" if ob.unit_state else ""))
        if ob.last_line_at is not None:
            silent = (now - _same_clock(ob.last_line_at, now)).total_seconds()
            if silent >= bound_s:
                causes.append(f"{n.label()}: its log has been silent for {fmt.duration(silent)}")
    head = dep.nodes[0]
    for n in dep.nodes[1:]:
        if n.dist_init_addr and head.dist_init_addr and n.dist_init_addr != head.dist_init_addr:
            causes.append(f"{n.label()} runs --dist-init-addr {n.dist_init_addr}, {head.label()} "
                          f"{head.dist_init_addr}")
    causes.extend(env_differences(dep.nodes, observed))
    if not causes:
        causes.append("nothing kvtui can see explains it: check the network between the nodes (the "
                      "rendezvous port, NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME) and the lagging node's own log")
    return Hang(lagging=tuple(n.node_rank for n in lagging), phase=phase, summary=summary,
                causes=tuple(causes))


def env_differences(nodes: Sequence[NodeBoot], observed: Mapping[int, NodeObservation]) -> list[str]:
    """NCCL_* / GLOO_* settings that differ between the nodes' units (nodes whose environment is
    not known are left out)."""
    envs = {n.node_rank: {k: v for k, v in (observed[n.node_rank].env or {}).items() if k.startswith(_ENV_PREFIXES)}
            for n in nodes if n.node_rank in observed and observed[n.node_rank].env is not None}
    if len(envs) < 2:
        return []
    out = []
    keys = sorted({k for e in envs.values() for k in e})
    by_rank = {n.node_rank: n for n in nodes}
    for k in keys:
        vals = {r: e.get(k) for r, e in envs.items()}
        if len(set(vals.values())) > 1:
            said = ", ".join(f"{by_rank[r].label()} {v if v is not None else '(not set)'}" for r, v in vals.items())
            out.append(f"{k} differs between the nodes' units: {said}")
    return out
