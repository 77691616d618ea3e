"""What the history keeps of one boot: a JSON document built from a ``Boot`` (pure: no I/O).

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
import math
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from kvtui import fmt
from kvtui.boot import Boot, BootMetrics, BootStatus, Failure, PhaseSpan
from kvtui.engines.events import METRIC_NAMES, Engine, Fact, FailureKind, Model, Phase
from kvtui.history.serving_figures import merge_serving
from kvtui.knobs import pool_env, pool_env_names

DOC_VERSION: Final = 1
TERMINAL: Final = frozenset({"ready", "failed", "stopped"})
MODEL_FLAGS: Final = ("model_path", "model")
TP_FLAGS: Final = ("tp_size", "tensor_parallel_size")
FRACTION_FLAGS: Final = ("mem_fraction_static", "gpu_memory_utilization")

Doc = dict[str, Any]


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def _parse_dt(raw: object) -> datetime | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None


def _num(v: object) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def boot_key(host: str, boot: Boot, spool: Mapping[str, object] | None = None) -> str | None:
    """The boot's identity in the history (see the module doc); None: it cannot be stored."""
    if boot.started_at is not None:
        ident = f"{host}\0ts\0{boot.started_at.isoformat()}"
    elif spool and spool.get("set") is not None:
        ident = f"{host}\0spool\0{spool.get('set')}\0{spool.get('boot')}"
    else:
        return None
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def position_key(host: str, spool: Mapping[str, object] | None) -> str | None:
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
            ident = f"{host}\0spool\0{spool.get('set')}\0{spool.get('boot')}"
        else:
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            ident = f"{host}\0pos\0{cursor}\0{digest}"
        return hashlib.sha256(ident.encode()).hexdigest()[:32]
    return None


def flag_value(flags: Mapping[str, object], names: Sequence[str]) -> object:
    for n in names:
        if n in flags and flags[n] is not None:
            return flags[n]
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

    def to_json(self) -> dict[str, Any]:
        gpus = sorted({i for u in self.used for i in u})
        return {
            "total_mib": {str(i): round(self.total.get(i, 0.0)) for i in gpus},
            "ts": [round(t, 3) for t in self.ts],
            "used_mib": {str(i): [round(u[i]) if i in u else None for u in self.used] for i in gpus},
        }


def gpu_readings(series: object) -> list[list[tuple[int, float, float, float]]]:
    """A stored series back as readings: per reading, (gpu, used MiB, total MiB, ts) per GPU."""
    if not isinstance(series, dict):
        return []
    ts = series.get("ts")
    used = series.get("used_mib")
    total = series.get("total_mib") or {}
    if not isinstance(ts, list) or not isinstance(used, dict) or not isinstance(total, dict):
        return []
    out: list[list[tuple[int, float, float, float]]] = []
    for k, t in enumerate(ts):
        reading: list[tuple[int, float, float, float]] = []
        for gpu, values in sorted(used.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
            if not isinstance(values, list) or k >= len(values):
                continue
            u, tot = _num(values[k]), _num(total.get(gpu))
            if u is not None and str(gpu).isdigit():
                reading.append((int(gpu), u, tot or 0.0, float(t) if _num(t) is not None else 0.0))
        if reading:
            out.append(reading)
    return out


def boot_doc(
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
) -> Doc:
    """The history's document of ``boot`` (see the module doc). ``env``: the pool-sizing
    environment the boot ran with, as its log shows it (``knobs.pool_env``: what the calculator
    compares before it calibrates with a remembered vLLM boot); ``unit_env``: those variables as
    the unit or launch script set them, when the recorder read the file (a kvtui-driven restart)."""
    doc: Doc = boot.to_json()
    doc["doc_version"] = DOC_VERSION
    doc["host"] = host
    doc["source"] = source
    doc["started_at"] = _iso(boot.started_at)
    doc["ended_at"] = _iso(boot.ended_at)
    doc["facts"] = {k: v for k, v in boot.facts.items() if _num(v) is not None}
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
    return doc


def progress(doc: Mapping[str, Any]) -> tuple[int, int, int]:
    """How far a document of a boot got: (terminal, phases, figures) — compared between two
    readers' documents of the same boot."""
    metrics = doc.get("metrics") or {}
    figures = sum(1 for v in metrics.values() if v is not None) if isinstance(metrics, dict) else 0
    return (1 if doc.get("status") in TERMINAL else 0, len(doc.get("phases") or ()), figures)


def _max_map(a: object, b: object) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in (a, b):
        if isinstance(m, dict):
            for k, v in m.items():
                f = _num(v)
                if f is not None:
                    out[str(k)] = max(out.get(str(k), f), f)
    return out


def _series_len(series: object) -> int:
    ts = series.get("ts") if isinstance(series, dict) else None
    return len(ts) if isinstance(ts, list) else 0


def merge(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Doc:
    """One boot's document from two readers' (see the module doc)."""
    if old is None:
        return dict(new)
    base, other = (dict(new), old) if progress(new) >= progress(old) else (dict(old), new)
    base["peak_used_mib"] = _max_map(old.get("peak_used_mib"), new.get("peak_used_mib"))
    # the most free memory either reader saw before the weights (``BootRecorder``'s rule)
    base["gpu_free_at_start_mib"] = _max_map(old.get("gpu_free_at_start_mib"), new.get("gpu_free_at_start_mib"))
    for key in ("spool", "source", "gpu_samples", "unit_env"):
        if not base.get(key) and other.get(key):
            base[key] = other[key]
    if _series_len(other.get("gpu_samples")) > _series_len(base.get("gpu_samples")):
        base["gpu_samples"] = other["gpu_samples"]  # the reader that saw more of the boot's readings
    serving = merge_serving(old.get("serving"), new.get("serving"))  # every watcher's part, summed again
    if serving is not None:
        base["serving"] = serving
    restart_old, restart_new = old.get("restart"), new.get("restart")
    if isinstance(restart_old, dict) or isinstance(restart_new, dict):
        r: dict[str, Any] = dict(restart_old) if isinstance(restart_old, dict) else {}
        if isinstance(restart_new, dict):
            r.update({k: v for k, v in restart_new.items() if v is not None})
        base["restart"] = r
    return base


# -- columns derived from a document (what lists and filters use) ------------------------------


def model_of(doc: Mapping[str, Any]) -> str | None:
    v = flag_value(doc.get("flags") or {}, MODEL_FLAGS)
    return str(v) if v is not None else None


def tp_of(doc: Mapping[str, Any]) -> int | None:
    v = _num(flag_value(doc.get("flags") or {}, TP_FLAGS))
    return int(v) if v is not None else None


def fraction_of(doc: Mapping[str, Any]) -> float | None:
    return _num(flag_value(doc.get("flags") or {}, FRACTION_FLAGS))


def tokens_of(doc: Mapping[str, Any]) -> int | None:
    v = _num((doc.get("metrics") or {}).get("max_total_num_tokens"))
    return int(v) if v is not None else None


def seconds_of(doc: Mapping[str, Any]) -> float | None:
    """Start to end (or to the start of ``ready``) in seconds; None while unknown."""
    start = _parse_dt(doc.get("started_at"))
    end = _parse_dt(doc.get("ended_at"))
    for p in doc.get("phases") or ():
        if p.get("name") == "ready" and p.get("model", "target") == "target":
            end = _parse_dt(p.get("start")) or end
    if start is None or end is None:
        return None
    try:
        return max(0.0, (end - start).total_seconds())
    except TypeError:
        return None


def deployment_of(doc: Mapping[str, Any]) -> str:
    """engine | model | TP | version: the boots the calculator may calibrate together."""
    return "|".join(str(x) for x in (doc.get("engine"), model_of(doc), tp_of(doc), doc.get("version_hint")))


def deployment_of_boot(boot: Boot) -> str:
    """``deployment_of`` for a live ``Boot``."""
    return deployment_of({"engine": boot.engine.value, "flags": boot.flags, "version_hint": boot.version_hint})


def failure_kind_of(doc: Mapping[str, Any]) -> str | None:
    f = doc.get("failure")
    return str(f.get("kind")) if isinstance(f, dict) and f.get("kind") else None


# -- back to a Boot (for the calculator) ----------------------------------------------------------


def boot_from_doc(doc: Mapping[str, Any]) -> Boot:
    """A ``Boot`` with what the document kept: engine, version, status, phases, failure, flags,
    figures and facts (enough for ``kvcalc.calibrate`` and ``same_deployment``)."""
    try:
        engine = Engine(str(doc.get("engine")))
    except ValueError:
        engine = Engine.UNKNOWN
    try:
        status = BootStatus(str(doc.get("status")))
    except ValueError:
        status = BootStatus.STOPPED
    boot = Boot(engine=engine, version_hint=doc.get("version_hint"), status=status)
    for p in doc.get("phases") or ():
        try:
            name, model = Phase(p["name"]), Model(p.get("model", "target"))
        except (KeyError, ValueError):
            continue
        boot.phases.append(PhaseSpan(name, model, _parse_dt(p.get("start")), _parse_dt(p.get("end")),
                                     _num(p.get("seconds"))))
    if boot.phases:
        targets = [s for s in boot.phases if s.model is Model.TARGET]
        boot.phase = targets[-1].name if targets else None
    f = doc.get("failure")
    if isinstance(f, dict):
        try:
            kind = FailureKind(str(f.get("kind")))
        except ValueError:
            kind = FailureKind.UNKNOWN
        try:
            fphase = Phase(str(f.get("phase"))) if f.get("phase") else None
        except ValueError:
            fphase = None
        boot.failure = Failure(kind, fphase, str(f.get("message") or ""), hint=str(f.get("hint") or ""))
    flags = doc.get("flags")
    boot.flags = dict(flags) if isinstance(flags, dict) else {}
    metrics = doc.get("metrics")
    if isinstance(metrics, dict):
        m = BootMetrics()
        for fld in fields(BootMetrics):
            v = metrics.get(fld.name)
            if v is not None:
                setattr(m, fld.name, v)
        boot.metrics = m
    facts = doc.get("facts")
    if isinstance(facts, dict):
        boot.facts = {Fact(k): float(v) for k, v in facts.items() if k in METRIC_NAMES and _num(v) is not None}
    for rank, v in (doc.get("avail_before_load_gib") or {}).items():
        f2 = _num(v)
        if f2 is not None:
            boot.rank_facts.setdefault(str(rank), {})[Fact.AVAIL_BEFORE_LOAD_GIB] = f2
    boot.capture_bs = [int(x) for x in doc.get("capture_bs") or () if isinstance(x, int)]
    boot.started_at = _parse_dt(doc.get("started_at"))
    boot.ended_at = _parse_dt(doc.get("ended_at"))
    boot.ranks = [str(r) for r in doc.get("ranks") or ()]
    boot.nodes = ray_workers(doc)
    return boot


def ray_workers(doc: Mapping[str, Any]) -> dict[str, dict[str, int | None]]:
    """``Boot.nodes`` of a stored Ray boot: node ip (``""``: the driver's) → worker → its TP rank.
    From ``ray_workers`` when the document has it; a document that has only ``nodes`` (the
    ``replay --json`` list) gives each node's TP ranks to its first workers, in order."""
    exact = doc.get("ray_workers")
    out: dict[str, dict[str, int | None]] = {}
    if isinstance(exact, list):  # [[ip, [[worker, tp], ...]], ...]: lists keep the order first seen
        for entry in exact:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
                continue
            out[str(entry[0])] = {str(pair[0]): (pair[1] if isinstance(pair[1], int) and not isinstance(pair[1], bool)
                                                 else None)
                                  for pair in entry[1] if isinstance(pair, list) and len(pair) == 2}
        return out
    for node in doc.get("nodes") or ():
        if not isinstance(node, dict):
            continue
        ip = node.get("ip")
        procs = [str(p) for p in node.get("processes") or ()]
        ranks = [r for r in node.get("tp_ranks") or () if isinstance(r, int) and not isinstance(r, bool)]
        workers: dict[str, int | None] = {p: (ranks[i] if i < len(ranks) else None) for i, p in enumerate(procs)}
        out[str(ip) if isinstance(ip, str) and ip else ""] = workers
    return out


def nodes_note(doc: Mapping[str, Any]) -> str:
    """A stored Ray boot's nodes in a few words (``2 nodes: TP0 driver · TP1 10.0.0.2``); ``""``
    for any other boot."""
    return fmt.ray_nodes_compact(doc.get("nodes"))


def spool_segment(spool: object) -> Path | None:
    """The spool file of a stored boot (``{"set": DIR, "boot": N}``), when it still exists."""
    if not isinstance(spool, dict) or spool.get("set") is None:
        return None
    directory = Path(str(spool["set"]))
    try:
        boot = int(spool.get("boot") or 0)
    except (TypeError, ValueError):
        return None
    found = sorted(directory.glob(f"*-boot-{boot:04d}.log")) if directory.is_dir() else []
    return found[-1] if found else None
