"""What changed between two stored boots (pure): flags added, removed and changed, the engine's
version, the figures side by side (tokens, KV GiB, free after the pool, graph memory, weights),
the phase durations, and the GPUs' free memory before the weights loaded (per rank, from the log;
per GPU, from kvtui's readings before the weights loaded), and the serving figures of each (peak KV
usage, preemptions / retractions per 1k requests, TTFT p95: did the edit fix the incident). Another
process holding memory is the classic cause of a boot that stopped fitting, said only on evidence (``less_free``).

``base`` is the boot that worked (or the older one), ``boot`` the one to explain: every pair
reads "base → boot"."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from pydantic import JsonValue

from kvtui import fmt
from kvtui.history import record as rec
from kvtui.history import serving_figures as sf
from kvtui.history.doc import BootDoc, FailureDoc, ServingDoc, num

Doc = BootDoc | Mapping[str, object]  # a stored document, or its JSON (``BootDoc.of``)

# figures compared, in order: (metrics key, label, kind)
FIGURES: Final = (
    ("max_total_num_tokens", "tokens", "tokens"),
    ("kv_cache_gib", "KV per rank", "gib"),
    ("weights_gib", "weights per rank", "gib"),
    ("avail_before_load_gib", "free before load", "gib"),
    ("avail_after_load_gib", "free after weights", "gib"),
    ("avail_after_pool_gib", "free after pool", "gib"),
    ("graph_mem_gib", "graph memory", "gib"),
    ("max_running_requests", "max running requests", "int"),
    ("context_len", "context length", "int"),
)
# less free memory before load than the base by this much (GiB) is worth a warning: the engine's
# own figure (``LESS_FREE_GIB``) moves by a few hundredths between two boots of the same server;
# kvtui's GPU readings (``LESS_FREE_READING_GIB``) also by the new server's CUDA context and NCCL
# buffers (0.5-2 GiB), there or not depending on when in its start the reading was taken
LESS_FREE_GIB: Final = 1.0
LESS_FREE_READING_GIB: Final = 2.0
# flags that differ between any two boots and say nothing about them
NOISE_FLAGS: Final = frozenset({"random_seed", "seed"})


@dataclass(slots=True)
class BootDiff:
    base_id: int | None
    boot_id: int | None
    base: BootDoc
    boot: BootDoc
    added: dict[str, object] = field(default_factory=dict)
    removed: dict[str, object] = field(default_factory=dict)
    changed: dict[str, tuple[object, object]] = field(default_factory=dict)
    version: tuple[object, object] = (None, None)
    engine: tuple[object, object] = (None, None)
    figures: dict[str, tuple[object, object]] = field(default_factory=dict)
    phases: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    free_before_load_gib: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    gpu_free_at_start_mib: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    # the pool-sizing environment that differs (``env``: VLLM_CPU_KVCACHE_SPACE), None = not set
    env: dict[str, tuple[object, object]] = field(default_factory=dict)
    # a Ray boot's nodes and their TP ranks (``record.nodes_note``), when they differ
    nodes: tuple[str, str] | None = None
    # the serving figures of each boot (``serving_figures``: its document's section, without the
    # watchers' parts), None for a boot nobody watched serve
    serving: tuple[ServingDoc | None, ServingDoc | None] = (None, None)

    def engine_changed(self) -> bool:
        """Another engine, or another version both boots printed. A version kvtui inferred from
        the lines' formats (``>=0.5.14``) or none (a boot that died before the telling lines) is
        not evidence of a change: how much a boot printed decides it, not the server (the diff
        said "sglang >=0.5.14 → sglang" after every early failure)."""
        if self.engine[0] != self.engine[1]:
            return True
        va, vb = self.version
        if not va or not vb or str(va).startswith(">=") or str(vb).startswith(">="):
            return False
        return va != vb

    def to_json(self) -> dict[str, object]:
        return {
            "base": self.base_id,
            "boot": self.boot_id,
            "base_status": self.base.to_json().get("status"),
            "boot_status": self.boot.to_json().get("status"),
            "flags": {"added": self.added, "removed": self.removed,
                      "changed": {k: list(v) for k, v in self.changed.items()}},
            "engine": list(self.engine),
            "version_hint": list(self.version),
            "figures": {k: list(v) for k, v in self.figures.items()},
            "phase_seconds": {k: list(v) for k, v in self.phases.items()},
            "free_before_load_gib": {k: list(v) for k, v in self.free_before_load_gib.items()},
            "gpu_free_at_start_mib": {k: list(v) for k, v in self.gpu_free_at_start_mib.items()},
            "env": {k: list(v) for k, v in self.env.items()},
            "nodes": list(self.nodes) if self.nodes is not None else None,
            "serving": ({"base": _serving_json(self.serving[0]), "boot": _serving_json(self.serving[1]),
                         "headline": sf.headline(*self.serving)} if self.serving != (None, None) else None),
            "failure": self.boot.to_json().get("failure"),
        }


def _same(a: object, b: object) -> bool:
    fa, fb = num(a), num(b)
    if fa is not None and fb is not None and not isinstance(a, str) and not isinstance(b, str):
        return abs(fa - fb) <= 1e-9 * max(1.0, abs(fa))
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _phase_seconds(doc: BootDoc) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for p in doc.phases:
        name = p.name + (" (draft)" if p.model == "draft" else "")
        out[name] = num(p.seconds)
    return out


def _pairs(a: Mapping[str, object], b: Mapping[str, object]) -> dict[str, tuple[float | None, float | None]]:
    keys = list(dict.fromkeys([*a.keys(), *b.keys()]))
    return {k: (num(a.get(k)), num(b.get(k))) for k in keys}


def diff(base: Doc, boot: Doc, *, base_id: int | None = None, boot_id: int | None = None) -> BootDiff:
    """``base`` → ``boot`` (see the module doc)."""
    base, boot = BootDoc.of(base), BootDoc.of(boot)
    d = BootDiff(base_id, boot_id, base, boot)
    fa: Mapping[str, object] = base.flags
    fb: Mapping[str, object] = boot.flags
    for k in sorted(set(fa) | set(fb)):
        if k in NOISE_FLAGS:
            continue
        if k not in fa:
            d.added[k] = fb[k]
        elif k not in fb:
            d.removed[k] = fa[k]
        elif not _same(fa[k], fb[k]):
            d.changed[k] = (fa[k], fb[k])
    d.engine = (base.engine, boot.engine)
    d.version = (base.version_hint, boot.version_hint)
    ma: Mapping[str, object] = base.metrics.to_json() if base.metrics is not None else {}
    mb: Mapping[str, object] = boot.metrics.to_json() if boot.metrics is not None else {}
    for key, _, _ in FIGURES:
        d.figures[key] = (ma.get(key), mb.get(key))
    pa, pb = _phase_seconds(base), _phase_seconds(boot)
    d.phases = {k: (pa.get(k), pb.get(k)) for k in dict.fromkeys([*pa, *pb])}
    d.free_before_load_gib = _pairs(base.avail_before_load_gib, boot.avail_before_load_gib)
    d.gpu_free_at_start_mib = _pairs(base.gpu_free_at_start_mib, boot.gpu_free_at_start_mib)
    ea, eb = base.env, boot.env
    if ea is not None and eb is not None:  # both stored it (older documents have none)
        for k in dict.fromkeys([*ea, *eb]):
            x, y = ea.get(k), eb.get(k)
            if not (x is None and y is None) and (x is None or y is None or not _same(_num_or(x), _num_or(y))):
                d.env[k] = (x, y)
    na, nb = rec.nodes_note(base), rec.nodes_note(boot)
    if na != nb:
        d.nodes = (na, nb)
    d.serving = (base.serving_figures, boot.serving_figures)
    return d


def _serving_json(s: ServingDoc | None) -> dict[str, JsonValue] | None:
    """A section without the watchers' parts (``history --diff --json``)."""
    return {k: v for k, v in s.to_json().items() if k != "sessions"} if s is not None else None


def less_free(d: BootDiff) -> list[tuple[str, float, float]]:
    """The evidence that another process held GPU memory when ``boot`` started: (where, base GiB,
    boot GiB) of each rank (GPU) with at least ``LESS_FREE_GIB`` (``LESS_FREE_READING_GIB``) less
    free memory before load.
    The engine's own figure (SGLang's ``Load weight begin. avail mem=``, per rank) is the evidence
    when both boots have it: it is what the engine found, while kvtui's GPU readings are taken at
    an instant of its own (a reading before the old server of a restart was gone, or one after
    the weights began loading, says nothing about a third process). The readings count only when
    the engine printed no such figure (vLLM, an older log)."""
    engine = [(f"rank {k}", x, y) for k, (x, y) in d.free_before_load_gib.items() if x is not None and y is not None]
    if engine:
        return [(k, x, y) for k, x, y in engine if x - y >= LESS_FREE_GIB]
    return [(f"GPU {k}", x / 1024, y / 1024) for k, (x, y) in d.gpu_free_at_start_mib.items()
            if x is not None and y is not None and (x - y) / 1024 >= LESS_FREE_READING_GIB]


def _num_or(v: object) -> object:
    """``"2"`` and ``"2.0"`` are one value of a variable."""
    f = num(v)
    return f if f is not None else v


def _v(value: object, kind: str = "") -> str:
    if value is None:
        return fmt.UNKNOWN
    if kind == "tokens" and isinstance(value, int | float):
        return fmt.tokens(value)
    if kind == "gib" and isinstance(value, int | float):
        return fmt.gib(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _delta(a: object, b: object, kind: str) -> str:
    fa, fb = num(a), num(b)
    if fa is None or fb is None or _same(fa, fb):
        return ""
    if kind == "tokens":
        return f"  ({fmt.signed_tokens(fb - fa)})"
    if kind == "gib":
        return f"  ({fmt.signed_gib(fb - fa)})"
    return f"  ({fb - fa:+g})"


def _phase_delta(a: float | None, b: float | None) -> str:
    """``  (+1m 05s)`` when the two durations differ at the precision shown."""
    if a is None or b is None or fmt.duration(a) == fmt.duration(b):
        return ""
    return f"  ({'+' if b >= a else '-'}{fmt.duration(abs(b - a))})"


def _failure(doc: BootDoc) -> FailureDoc | None:
    return doc.failure if doc.failure is not None and doc.failure.kind else None


def _label(doc: BootDoc, row_id: int | None) -> str:
    started = (doc.started_at or "")[:19].replace("T", " ")
    status = doc.status or "?"
    if (f := _failure(doc)) is not None:
        status += f" ({f.kind}" + (f" in {f.phase}" if f.phase else "") + ")"
    who = f"#{row_id}" if row_id is not None else "boot"
    return f"{who} {started} {status}".strip()


def render(d: BootDiff) -> list[str]:
    """The diff as text lines (``kvtui history --diff``; the failure banner's detail)."""
    a, b = d.base_id, d.boot_id
    ha, hb = (f"#{a}" if a is not None else "base"), (f"#{b}" if b is not None else "boot")
    out = [f"{_label(d.boot, b)}", f"  compared with {_label(d.base, a)}", ""]
    if d.added or d.removed or d.changed:
        out.append("Flags:")
        for k, (x, y) in d.changed.items():
            out.append(f"  changed  {k}: {_v(x)} → {_v(y)}")
        for k, v in d.added.items():
            out.append(f"  added    {k} = {_v(v)}")
        for k, v in d.removed.items():
            out.append(f"  removed  {k} (was {_v(v)})")
    else:
        out.append("Flags: the same")
    for k, (x, y) in d.env.items():
        out.append(f"Environment: {k} {_unset(x)} → {_unset(y)}")
    if d.nodes is not None:
        out.append(f"Ray nodes: {d.nodes[0] or 'none'} → {d.nodes[1] or 'none'}")
    ea, eb = d.engine
    va, vb = d.version
    if d.engine_changed():
        out.append(f"Engine: {ea} {va or ''} → {eb} {vb or ''}".rstrip())
    else:
        out.append(f"Engine: {eb} {vb or va or ''} (the same)".rstrip())
    rows: list[tuple[str, str, str, str]] = []
    for key, label, kind in FIGURES:
        x, y = d.figures.get(key, (None, None))
        if x is None and y is None:
            continue
        rows.append((label, _v(x, kind), _v(y, kind), _delta(x, y, kind)))
    if rows:
        out.append("")
        out.extend(_table("Figures", ha, hb, rows))
    prow = [(k, fmt.duration(x), fmt.duration(y), _phase_delta(x, y)) for k, (x, y) in d.phases.items()
            if x is not None or y is not None]
    if prow:
        out.append("")
        out.extend(_table("Phases", ha, hb, prow))
    free = [(f"rank {k}", _v(x, "gib"), _v(y, "gib"), _delta(x, y, "gib")) for k, (x, y) in
            sorted(d.free_before_load_gib.items(), key=lambda kv: _rank_key(kv[0]))]
    free += [(f"GPU {k}", fmt.gib(x / 1024) if x is not None else fmt.UNKNOWN,
              fmt.gib(y / 1024) if y is not None else fmt.UNKNOWN,
              _delta(x / 1024 if x is not None else None, y / 1024 if y is not None else None, "gib"))
             for k, (x, y) in sorted(d.gpu_free_at_start_mib.items(), key=lambda kv: _rank_key(kv[0]))]
    if free:
        out.append("")
        out.extend(_table("GPU free memory before load", ha, hb, free))
        drops = less_free(d)
        if drops:
            whose = "the engine's own figures" if drops[0][0].startswith("rank") else "kvtui's GPU readings"
            out.append(f"  less free memory before load than the base ({whose}): another process may hold "
                       "GPU memory")
    if d.serving != (None, None):
        out.append("")
        out.extend(_table("Serving (as watched)", ha, hb, [(lb, x, y, "") for lb, x, y in sf.rows(*d.serving)]))
        out.append(f"  {sf.headline(*d.serving)}")
        if None in d.serving:
            who = ha if d.serving[0] is None else hb
            out.append(f"  {who}: no serving figures (kvtui watch or the console records them while it serves)")
    if (f := _failure(d.boot)) is not None:
        out.append("")
        out.append(f"Failure: {f.kind}" + (f" in {f.phase}" if f.phase else "") + f": {f.message[:200]}")
        if f.hint:
            out.append(f"  hint: {f.hint}")
    return out


def _unset(v: object) -> str:
    return "(not set)" if v is None else str(v)


def _rank_key(k: str) -> tuple[int, str]:
    digits = "".join(c for c in k if c.isdigit())
    return (int(digits) if digits else -1, k)


def _table(title: str, ha: str, hb: str, rows: Sequence[tuple[str, str, str, str]]) -> list[str]:
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(ha), *(len(r[1]) for r in rows))
    w2 = max(len(hb), *(len(r[2]) for r in rows))
    out = [f"{title + ':':<{w0 + 2}}  {ha:>{w1}}  {hb:>{w2}}"]
    out += [f"  {r[0]:<{w0}}  {r[1]:>{w1}}  {r[2]:>{w2}}{r[3]}" for r in rows]
    return out


def last_good(boots: Sequence[tuple[int, Doc]], boot: Doc, before: int | None = None) -> tuple[int, BootDoc] | None:
    """The newest ready boot of the same model (older than ``boot``: after it in the newest-first
    list ``boots`` of (id, document)); None when there is none."""
    model = BootDoc.of(boot).model
    seen = before is None
    for row_id, raw in boots:
        if not seen:
            seen = row_id == before
            continue
        if raw is boot or row_id == before:
            continue
        doc = BootDoc.of(raw)
        if doc.status == "ready" and doc.model == model:
            return row_id, doc
    return None


def summary(d: BootDiff, *, limit: int = 6) -> list[str]:
    """What changed, in a few short lines (the failure banner, ``wait`` on a failure): the flags,
    the engine's version, and ranks or GPUs that had markedly less free memory before load
    (``less_free``)."""
    parts: list[str] = [f"{k} {_v(x)} → {_v(y)}" for k, (x, y) in d.changed.items()]
    parts += [f"+{k}={_v(v)}" for k, v in d.added.items()]
    parts += [f"-{k}" for k in d.removed]
    lines: list[str] = []
    if parts:
        shown = parts[:limit]
        lines.append("flags: " + ", ".join(shown) + (f" (+{len(parts) - limit} more)" if len(parts) > limit else ""))
    else:
        lines.append("flags: the same")
    if d.env:
        lines.append("environment: " + ", ".join(f"{k} {_unset(x)} → {_unset(y)}" for k, (x, y) in d.env.items()))
    if d.engine_changed():
        lines.append(f"engine: {d.engine[0]} {d.version[0] or ''} → {d.engine[1]} {d.version[1] or ''}".rstrip())
    drops = less_free(d)
    if drops:
        shown_d = ", ".join(f"{k} {fmt.gib(x)} → {fmt.gib(y)}" for k, x, y in drops[:4])
        lines.append(f"less free GPU memory before load: {shown_d}" + (" …" if len(drops) > 4 else "")
                     + " (another process holding memory?)")
    return lines


def since_last_good(history: Sequence[Doc], boot: Doc) -> tuple[BootDoc, list[str]] | None:
    """The last ready boot of ``boot``'s model in ``history`` (newest first) and the summary of
    what changed since; None when there is none."""
    got = last_good([(i, d) for i, d in enumerate(history)], boot)
    if got is None:
        return None
    return got[1], summary(diff(got[1], boot))
