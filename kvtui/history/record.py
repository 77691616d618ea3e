"""What the history keeps of one boot: a JSON document built from a ``Boot`` (pure: no I/O),
typed and versioned by ``kvtui.history.doc.BootDoc`` (``new_doc`` builds it; ``boot_doc`` is its JSON).

The document is ``Boot.to_json()`` (the ``kvtui replay --json`` boot object) plus what the
calculator and the diff need beyond it (``facts``, per-rank free memory before load, the capture
batch list, start and end), what the monitor saw around the boot (peak memory per GPU, the GPUs'
free memory when the boot began, the spool location), and for a kvtui-driven restart the edit, the
prediction that preceded it and the outcome (``restart``).

``boot_key`` names a boot independently of who saw it: host + the timestamp of its first line
(every reader of the same log agrees on it: a reconnect, a re-read spool, a second console, the
follower of ``kvtui apply``). A boot without a timestamp is keyed by where its first line sits in
the source (``position_key``: the source's resume cursor of that line — a file's byte offset — and
a hash of its text, read from the reader's spool segment), which every reader of the log agrees on
too; a first line without a cursor falls back to the spool location (the same spool read twice is
still one boot), and a boot with none of these is not stored.

``merge`` combines two documents of one boot: the further-advanced boot wins (terminal status,
then more phases, then more figures), peaks are the maximum of both, ``restart``, ``spool`` and
the GPU readings (``gpu_samples``, bounded: ``GpuSeries``) are kept from whichever has them, and
the serving figures (``serving``: ``kvtui.history.serving``) keep every watcher's part of both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from pydantic import JsonValue

from kvtui import fmt
from kvtui.boot import Boot, BootMetrics, BootStatus, Failure, PhaseSpan
from kvtui.engines.events import METRIC_NAMES, Engine, Fact, FailureKind, Model, Phase
from kvtui.history.doc import (
    DOC_SCHEMA_VERSION,
    DOC_VERSION,
    BootDoc,
    GpuSamplesDoc,
    SpoolDoc,
    deployment_key,
    model_tp,
    num,
    parse_dt,
)
from kvtui.history.serving_figures import merge_serving
from kvtui.knobs import pool_env, pool_env_names


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def boot_key(host: str, boot: Boot, spool: Mapping[str, object] | None = None) -> str | None:
    """The boot's identity in the history (see the module doc); None: it cannot be stored."""
    if boot.started_at is not None:
        ident = f"{host}\0ts\0{boot.started_at.isoformat()}"
    elif spool and spool.get("set") is not None:
        ident = f"{host}\0spool\0{spool.get('set')}\0{spool.get('boot')}"
    else:
        return None
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def position_key(host: str, spool: SpoolDoc | None) -> str | None:
    """The key of a boot without a timestamp (see the module doc), from its spool segment's first
    line; None while the segment has no line on disk yet."""
    path = spool_segment(spool)
    if path is None or spool is None:
        return None
    try:
        with path.open("rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return None
    for raw in head.split(b"\n")[:-1]:  # whole lines only
        cols = raw.decode("utf-8", "replace").split("\t", 5)
        if len(cols) != 6 or cols[2] == "marker":
            continue
        cursor, text = cols[3], cols[5]
        if not cursor:
            ident = f"{host}\0spool\0{spool.set}\0{spool.boot}"
        else:
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            ident = f"{host}\0pos\0{cursor}\0{digest}"
        return hashlib.sha256(ident.encode()).hexdigest()[:32]
    return None


GPU_SAMPLES_MAX: Final = 240  # GPU readings kept per boot (older ones thinned to every other)


class GpuSeries:
    """The GPU readings of one boot, bounded: past ``GPU_SAMPLES_MAX`` every other reading is
    dropped and only every second one after is kept (so a long boot keeps its whole span at a
    coarser step). Stored as ``{"total_mib": {gpu: MiB}, "ts": [...], "used_mib": {gpu: [...]}}``
    (MiB rounded; a GPU missing from a reading: null)."""

    def __init__(self, limit: int = GPU_SAMPLES_MAX) -> None:
        self.limit = max(2, limit)
        self.stride = 1
        self._seen = 0
        self.ts: list[float] = []
        self.used: list[dict[int, float]] = []
        self.total: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, samples: Sequence[Any]) -> None:
        """One reading (``GpuSample``-like: index, used_mib, total_mib, ts)."""
        if not samples:
            return
        self._seen += 1
        if (self._seen - 1) % self.stride:
            return
        self.ts.append(float(max((getattr(g, "ts", 0.0) or 0.0) for g in samples)))
        self.used.append({int(g.index): float(g.used_mib) for g in samples})
        for g in samples:
            if g.total_mib > 0:
                self.total[int(g.index)] = float(g.total_mib)
        if len(self.ts) > self.limit:
            self.ts = self.ts[::2]
            self.used = self.used[::2]
            self.stride *= 2

    def to_json(self) -> dict[str, JsonValue]:
        gpus = sorted({i for u in self.used for i in u})
        return {
            "total_mib": {str(i): round(self.total.get(i, 0.0)) for i in gpus},
            "ts": [round(t, 3) for t in self.ts],
            "used_mib": {str(i): [round(u[i]) if i in u else None for u in self.used] for i in gpus},
        }


def gpu_readings(series: object) -> list[list[tuple[int, float, float, float]]]:
    """A stored series (``GpuSamplesDoc``, or its JSON: a bundle's member) back as readings: per
    reading, (gpu, used MiB, total MiB, ts) per GPU."""
    if isinstance(series, Mapping):
        try:
            series = GpuSamplesDoc.model_validate(dict(series))
        except ValueError:
            return []
    if not isinstance(series, GpuSamplesDoc):
        return []
    ts, used, total = series.ts, series.used_mib, series.total_mib
    out: list[list[tuple[int, float, float, float]]] = []
    for k, t in enumerate(ts):
        reading: list[tuple[int, float, float, float]] = []
        for gpu, values in sorted(used.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
            if k >= len(values):
                continue
            u, tot = num(values[k]), num(total.get(gpu))
            if u is not None and str(gpu).isdigit():
                reading.append((int(gpu), u, tot or 0.0, float(t) if num(t) is not None else 0.0))
        if reading:
            out.append(reading)
    return out


def new_doc(
    host: str,
    boot: Boot,
    *,
    source: str = "",
    spool: Mapping[str, object] | None = None,
    peaks_mib: Mapping[int, float] | None = None,
    free_at_start_mib: Mapping[int, float] | None = None,
    restart: Mapping[str, object] | None = None,
    gpu_samples: Mapping[str, object] | None = None,
    unit_env: Mapping[str, str] | None = None,
) -> BootDoc:
    """The history's document of ``boot`` (see the module doc). ``env``: the pool-sizing
    environment the boot ran with, as its log shows it (``knobs.pool_env``: what the calculator
    compares before it calibrates with a remembered vLLM boot); ``unit_env``: those variables as
    the unit or launch script set them, when the recorder read the file (a kvtui-driven restart)."""
    doc: dict[str, object] = boot.to_json()
    doc["schema_version"] = DOC_SCHEMA_VERSION
    doc["doc_version"] = DOC_VERSION
    doc["host"] = host
    doc["source"] = source
    doc["started_at"] = _iso(boot.started_at)
    doc["ended_at"] = _iso(boot.ended_at)
    doc["facts"] = {k: v for k, v in boot.facts.items() if num(v) is not None}
    doc["avail_before_load_gib"] = {
        rank: rf[Fact.AVAIL_BEFORE_LOAD_GIB] for rank, rf in boot.rank_facts.items() if Fact.AVAIL_BEFORE_LOAD_GIB in rf
    }
    doc["capture_bs"] = list(boot.capture_bs)
    doc["peak_used_mib"] = {str(k): float(v) for k, v in sorted((peaks_mib or {}).items())}
    doc["gpu_free_at_start_mib"] = {str(k): float(v) for k, v in sorted((free_at_start_mib or {}).items())}
    doc["spool"] = dict(spool) if spool else None
    doc["gpu_samples"] = dict(gpu_samples) if gpu_samples else None
    doc["restart"] = dict(restart) if restart else None
    if boot.nodes:  # ``nodes`` (replay --json's) lists ranks per node; this keeps which worker holds which
        doc["ray_workers"] = [[ip, [[w, tp] for w, tp in workers.items()]] for ip, workers in boot.nodes.items()]
    doc["env"] = pool_env(boot.engine, boot.flags, boot.facts)
    if unit_env is not None:
        names = pool_env_names(boot.engine)
        doc["unit_env"] = {n: unit_env.get(n) for n in names}
    return BootDoc.parse(doc, f"the document of {host}'s boot")


def boot_doc(host: str, boot: Boot, **kw: Any) -> dict[str, JsonValue]:
    """``new_doc`` as its JSON object (what ``kvtui history --json`` prints of a boot)."""
    return new_doc(host, boot, **kw).to_json()


def _max_map(a: Mapping[str, float | int], b: Mapping[str, float | int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in (a, b):
        for k, v in m.items():
            f = num(v)
            if f is not None:
                out[str(k)] = max(out.get(str(k), f), f)
    return out


def _series_len(series: GpuSamplesDoc | None) -> int:
    return len(series.ts) if series is not None else 0


def merge(old: BootDoc | Mapping[str, object] | None, new: BootDoc | Mapping[str, object]) -> BootDoc:
    """One boot's document from two readers' (see the module doc)."""
    new = BootDoc.of(new)
    if old is None:
        return new
    old = BootDoc.of(old)
    base, other = (new, old) if new.progress() >= old.progress() else (old, new)
    changes: dict[str, object] = {
        "peak_used_mib": _max_map(old.peak_used_mib, new.peak_used_mib),
        # the most free memory either reader saw before the weights (``BootRecorder``'s rule)
        "gpu_free_at_start_mib": _max_map(old.gpu_free_at_start_mib, new.gpu_free_at_start_mib),
    }
    for key in ("spool", "source", "gpu_samples", "unit_env"):
        mine, theirs = getattr(base, key), getattr(other, key)
        if not _present(mine) and _present(theirs):
            changes[key] = theirs
    if _series_len(other.gpu_samples) > _series_len(base.gpu_samples):
        changes["gpu_samples"] = other.gpu_samples  # the reader that saw more of the boot's readings
    serving = merge_serving(old.serving, new.serving)  # every watcher's part, summed again
    if serving is not None:
        changes["serving"] = serving
    if old.restart is not None or new.restart is not None:
        r: dict[str, JsonValue] = old.restart.to_json() if old.restart is not None else {}
        if new.restart is not None:
            r.update({k: v for k, v in new.restart.to_json().items() if v is not None})
        changes["restart"] = r
    return base.copy_with(**changes)


def _present(v: object) -> bool:
    """A part a document has (``merge``: kept from the other reader when this one lacks it)."""
    if isinstance(v, SpoolDoc | GpuSamplesDoc):
        return bool(v.to_json())
    return bool(v)


# -- columns derived from a document (what lists and filters use: ``BootDoc``'s properties) -----


def deployment_of(doc: BootDoc | Mapping[str, object]) -> str:
    """engine | model | TP | version: the boots the calculator may calibrate together."""
    return BootDoc.of(doc).deployment


def deployment_of_boot(boot: Boot) -> str:
    """``deployment_of`` for a live ``Boot``."""
    return deployment_key(boot.engine.value, *model_tp(boot.flags), boot.version_hint)


# -- back to a Boot (for the calculator) ----------------------------------------------------------


def boot_from_doc(doc: BootDoc | Mapping[str, object]) -> Boot:
    """A ``Boot`` with what the document kept: engine, version, status, phases, failure, flags,
    figures and facts (enough for ``kvcalc.calibrate`` and ``same_setup``)."""
    doc = BootDoc.of(doc)
    try:
        engine = Engine(str(doc.engine))
    except ValueError:
        engine = Engine.UNKNOWN
    try:
        status = BootStatus(str(doc.status))
    except ValueError:
        status = BootStatus.STOPPED
    boot = Boot(engine=engine, version_hint=doc.version_hint, status=status)
    for p in doc.phases:
        try:
            name, model = Phase(p.name), Model(p.model)
        except ValueError:
            continue
        boot.phases.append(PhaseSpan(name, model, parse_dt(p.start), parse_dt(p.end), num(p.seconds)))
    if boot.phases:
        targets = [s for s in boot.phases if s.model is Model.TARGET]
        boot.phase = targets[-1].name if targets else None
    f = doc.failure
    if f is not None:
        try:
            kind = FailureKind(str(f.kind))
        except ValueError:
            kind = FailureKind.UNKNOWN
        try:
            fphase = Phase(str(f.phase)) if f.phase else None
        except ValueError:
            fphase = None
        boot.failure = Failure(kind, fphase, str(f.message or ""), hint=str(f.hint or ""))
    boot.flags = dict(doc.flags)
    if doc.metrics is not None:
        m = BootMetrics()
        figures = doc.metrics.to_json()
        for fld in fields(BootMetrics):
            v = figures.get(fld.name)
            if v is not None:
                setattr(m, fld.name, v)
        boot.metrics = m
    boot.facts = {Fact(k): float(v) for k, v in doc.facts.items() if k in METRIC_NAMES and num(v) is not None}
    for rank, v in doc.avail_before_load_gib.items():
        f2 = num(v)
        if f2 is not None:
            boot.rank_facts.setdefault(str(rank), {})[Fact.AVAIL_BEFORE_LOAD_GIB] = f2
    boot.capture_bs = [x for x in doc.capture_bs if isinstance(x, int) and not isinstance(x, bool)]
    boot.started_at = doc.started
    boot.ended_at = doc.ended
    boot.ranks = list(doc.ranks)
    boot.nodes = ray_workers(doc)
    return boot


def ray_workers(doc: BootDoc | Mapping[str, object]) -> dict[str, dict[str, int | None]]:
    """``Boot.nodes`` of a stored Ray boot: node ip (``""``: the driver's) → worker → its TP rank.
    From ``ray_workers`` when the document has it; a document that has only ``nodes`` (the
    ``replay --json`` list) gives each node's TP ranks to its first workers, in order."""
    doc = BootDoc.of(doc)
    exact = doc.ray_workers
    out: dict[str, dict[str, int | None]] = {}
    if exact is not None:  # [[ip, [[worker, tp], ...]], ...]: lists keep the order first seen
        for entry in exact:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
                continue
            out[str(entry[0])] = {str(pair[0]): (pair[1] if isinstance(pair[1], int) and not isinstance(pair[1], bool)
                                                 else None)
                                  for pair in entry[1] if isinstance(pair, list) and len(pair) == 2}
        return out
    for node in doc.nodes or ():
        ip = node.get("ip")
        raw_procs = node.get("processes")
        raw_ranks = node.get("tp_ranks")
        procs = [str(p) for p in raw_procs] if isinstance(raw_procs, list) else []
        ranks = ([r for r in raw_ranks if isinstance(r, int) and not isinstance(r, bool)]
                 if isinstance(raw_ranks, list) else [])
        workers: dict[str, int | None] = {p: (ranks[i] if i < len(ranks) else None) for i, p in enumerate(procs)}
        out[str(ip) if isinstance(ip, str) and ip else ""] = workers
    return out


def nodes_note(doc: BootDoc | Mapping[str, object]) -> str:
    """A stored Ray boot's nodes in a few words (``2 nodes: TP0 driver · TP1 10.0.0.2``); ``""``
    for any other boot."""
    return fmt.ray_nodes_compact(BootDoc.of(doc).nodes)


def spool_segment(spool: SpoolDoc | Mapping[str, object] | None) -> Path | None:
    """The spool file of a stored boot (``{"set": DIR, "boot": N}``), when it still exists."""
    if isinstance(spool, Mapping):
        try:
            spool = SpoolDoc.model_validate(dict(spool))
        except ValueError:
            return None
    if spool is None or spool.set is None:
        return None
    directory = Path(spool.set)
    boot = spool.boot or 0
    found = sorted(directory.glob(f"*-boot-{boot:04d}.log")) if directory.is_dir() else []
    return found[-1] if found else None
