"""The history's document of one boot as a typed, versioned model (issue 23: ``BootDoc``; pure).

The JSON on disk is what ``record.boot_doc`` wrote before this model existed (``Boot.to_json()``,
the ``kvtui replay --json`` boot object, plus the history's own keys: see ``kvtui.history.record``)
and one more key, ``schema_version`` (``DOC_SCHEMA_VERSION``). Reading and writing go through the
model without loss:

- every key a document has is kept, the ones this model does not name too (``extra="allow"``);
- a key a document lacks stays absent when it is written again (dumps are ``exclude_unset``), so
  an old document read and written back is the same JSON;
- numbers keep their kind (an int stays an int), times stay the ISO text they were written as
  (``started`` / ``ended`` parse them).

A document without ``schema_version`` is today's shape (version 1: ``doc_version`` 1, written
since issue 13). One of a version above ``DOC_SCHEMA_VERSION`` (a newer kvtui's) is refused:
``parse`` raises ``DocVersionError`` naming where it came from (the file and row) and the version;
a document that is not a boot document at all raises ``DocError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final, Self

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

DOC_SCHEMA_VERSION: Final = 1  # the boot documents this kvtui writes and reads (``schema_version``)
DOC_VERSION: Final = 1  # ``doc_version``: kept as written since issue 13 (older kvtuis ignore both)
TERMINAL: Final = frozenset({"ready", "failed", "stopped"})
MODEL_FLAGS: Final = ("model_path", "model")
TP_FLAGS: Final = ("tp_size", "tensor_parallel_size")
FRACTION_FLAGS: Final = ("mem_fraction_static", "gpu_memory_utilization")

Num = int | float


class DocError(ValueError):
    """A stored document that cannot be read as a boot document; ``str()`` is user-facing."""


class DocVersionError(DocError):
    """A document written by a newer kvtui (``schema_version`` above ``DOC_SCHEMA_VERSION``)."""

    def __init__(self, where: str, version: int) -> None:
        super().__init__(f"{where}: boot document schema_version {version} is newer than this kvtui reads "
                         f"({DOC_SCHEMA_VERSION}): not read; upgrade kvtui to see it")
        self.where = where
        self.version = version


def num(v: object) -> float | None:
    """A finite number (a number's text too), else None (``True``/``False`` are not numbers)."""
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


def parse_dt(raw: object) -> datetime | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None


def flag_value(flags: Mapping[str, object], names: Sequence[str]) -> object:
    for n in names:
        if n in flags and flags[n] is not None:
            return flags[n]
    return None


def model_tp(flags: Mapping[str, object]) -> tuple[str | None, int | None]:
    """The model and the TP size the flags name (``BootDoc.model`` / ``.tp`` of a live boot's flags)."""
    model = flag_value(flags, MODEL_FLAGS)
    tp = num(flag_value(flags, TP_FLAGS))
    return (str(model) if model is not None else None), (int(tp) if tp is not None else None)


class _Part(BaseModel):
    """A part of a document: unknown keys kept, absent keys left absent (see the module doc)."""

    model_config = ConfigDict(extra="allow", validate_assignment=False)

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = self.model_dump(mode="json", exclude_unset=True)
        return out


class PhaseDoc(_Part):
    name: str
    model: str = "target"
    start: str | None = None
    end: str | None = None
    seconds: Num | None = None
    engine_seconds: Num | None = None


class FailureDoc(_Part):
    kind: str | None = None
    phase: str | None = None
    message: str = ""
    traceback: list[str] = []
    hint: str = ""


class MetricsDoc(_Part):
    """``replay --json``'s ``metrics`` (``BootMetrics``; None: not seen)."""

    max_total_num_tokens: Num | None = None
    kv_cache_gib: Num | None = None
    cell_bytes: Num | None = None
    avail_before_load_gib: Num | None = None
    avail_after_load_gib: Num | None = None
    weights_gib: Num | None = None
    avail_after_pool_gib: Num | None = None
    graph_mem_gib: Num | None = None
    available_gpu_mem_gib: Num | None = None
    context_len: Num | None = None
    max_running_requests: Num | None = None
    max_concurrency: Num | None = None
    token_usage: Num | None = None

    def figures(self) -> int:
        """How many figures were seen (``progress``)."""
        return sum(1 for v in self.to_json().values() if v is not None)


class SpoolDoc(_Part):
    """Where the boot's log lines were spooled: the spool set's directory and the boot's number."""

    set: str | None = None
    boot: int | None = None


class GpuSamplesDoc(_Part):
    """``GpuSeries.to_json``: MiB per GPU (``"0"``, ``"1"``, …) at each reading's time."""

    total_mib: dict[str, Num] = {}
    ts: list[Num] = []
    used_mib: dict[str, list[Num | None]] = {}


class PredictionDoc(_Part):
    """The prediction that preceded a kvtui-driven restart (``changes.restart_record``)."""

    tokens: Num | None = None
    verdict: str | None = None
    confidence: str | None = None
    basis: str | None = None
    fraction: Num | None = None
    kv_cache_gib: Num | None = None
    calibration_boots: Num | None = None


class RestartDoc(_Part):
    """A kvtui-driven restart: the edit, the prediction that preceded it and the outcome."""

    action: str | None = None
    edit: list[str] = []
    restored_from: str | None = None
    backup: str | None = None
    file: str | None = None
    forced: bool | None = None
    prediction: PredictionDoc | None = None
    prediction_note: str | None = None
    outcome: str | None = None
    exit: int | None = None
    rolled_back: bool | None = None


class ServingDoc(_Part):
    """The ``serving`` section (``kvtui.history.serving_figures``): the summary of every watcher's
    part (``sessions``: one per watcher, kept as written)."""

    version: int | None = None
    engine: str | list[str] | None = None
    sources: list[str] = []
    first_at: Num | None = None
    last_at: Num | None = None
    seconds: Num | None = None
    samples: Num | None = None
    watchers: int | None = None
    peak_kv_usage: Num | None = None
    peak_tokens: Num | None = None
    pool_tokens: Num | None = None
    max_running: Num | None = None
    max_waiting: Num | None = None
    preemptions: Num | None = None
    retractions: Num | None = None
    decode_ooms: Num | None = None
    length_refused: Num | None = None
    requests: Num | None = None
    preemptions_per_1k: Num | None = None
    retractions_per_1k: Num | None = None
    preemptions_per_min: Num | None = None
    retractions_per_min: Num | None = None
    ttft_p50: Num | None = None
    ttft_p95: Num | None = None
    queue_p95: Num | None = None
    sessions: dict[str, dict[str, JsonValue]] = {}

    @property
    def has_figures(self) -> bool:
        """Somebody watched it serve (at least one sample): what ``section_of`` returns."""
        return bool(num(self.samples))


class BootDoc(_Part):
    """One boot in the history (see the module doc and ``kvtui.history.record``)."""

    schema_version: int = DOC_SCHEMA_VERSION
    doc_version: int | None = None
    # -- ``Boot.to_json()`` (the ``replay --json`` boot) --
    engine: str | None = None
    version_hint: str | None = None
    status: str = ""
    phase: str | None = None
    phases: list[PhaseDoc] = []
    failure: FailureDoc | None = None
    flags: dict[str, JsonValue] = {}
    metrics: MetricsDoc | None = None
    ranks: list[str] = []
    pool_from: str | None = None
    engine_timings: dict[str, Num] = {}
    nodes: list[dict[str, JsonValue]] | None = None
    start_missing: str | None = None
    flags_from: str | None = None
    skipped_lines: int | None = None
    # -- the history's own --
    host: str = ""
    source: str = ""
    started_at: str | None = None
    ended_at: str | None = None
    facts: dict[str, Num] = {}
    avail_before_load_gib: dict[str, Num] = {}
    capture_bs: list[JsonValue] = []
    peak_used_mib: dict[str, Num] = {}
    gpu_free_at_start_mib: dict[str, Num] = {}
    spool: SpoolDoc | None = None
    gpu_samples: GpuSamplesDoc | None = None
    restart: RestartDoc | None = None
    ray_workers: list[JsonValue] | None = None
    env: dict[str, str | None] | None = None
    unit_env: dict[str, str | None] | None = None
    serving: ServingDoc | None = None

    # -- reading -----------------------------------------------------------------------------------

    @classmethod
    def parse(cls, raw: object, where: str = "boot document") -> Self:
        """A document from its JSON text or its decoded object; ``where`` names it in the errors
        (``"history.sqlite3 row 12"``). Raises ``DocVersionError`` / ``DocError``."""
        data = raw
        if isinstance(raw, str | bytes):
            try:  # the stored text straight into the model (3x faster than json.loads, then validate)
                doc = cls.model_validate_json(raw)
            except ValidationError:
                pass  # not JSON, or not this shape (a newer version's?): said below
            else:
                if doc.schema_version > DOC_SCHEMA_VERSION:
                    raise DocVersionError(where, doc.schema_version)
                return doc
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise DocError(f"{where}: not JSON ({exc})") from None
        if isinstance(data, BootDoc):
            return cls.model_validate(data.to_json())
        if not isinstance(data, Mapping):
            raise DocError(f"{where}: not a boot document (a JSON {type(data).__name__})")
        version = data.get("schema_version", DOC_SCHEMA_VERSION)
        if isinstance(version, bool) or not isinstance(version, int):
            raise DocError(f"{where}: boot document schema_version {version!r} is not a number")
        if version > DOC_SCHEMA_VERSION:
            raise DocVersionError(where, version)
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else None
            loc = ".".join(str(p) for p in first["loc"]) if first else "?"
            why = first["msg"] if first else str(exc)
            raise DocError(f"{where}: not a readable boot document ({loc}: {why})") from None

    @classmethod
    def of(cls, doc: BootDoc | Mapping[str, object], where: str = "boot document") -> BootDoc:
        """``doc`` as a ``BootDoc`` (a decoded JSON object is parsed: ``parse``)."""
        return doc if isinstance(doc, BootDoc) else cls.parse(doc, where)

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON object stored (and ``kvtui history --json``'s boot)."""
        return super().to_json()

    def dumps(self) -> str:
        """The stored text (keys sorted: as the store has always written it)."""
        return json.dumps(self.to_json(), ensure_ascii=False, sort_keys=True)

    def copy_with(self, **changes: object) -> BootDoc:
        """A copy with ``changes`` set (and counted as set: they are written)."""
        data = self.to_json()
        for k, v in changes.items():
            data[k] = v.to_json() if isinstance(v, _Part) else v  # type: ignore[assignment]
        return type(self).model_validate(data)

    # -- derived columns (what lists, filters and the calculator use) ---------------------------------

    @property
    def model(self) -> str | None:
        return model_tp(self.flags)[0]

    @property
    def tp(self) -> int | None:
        return model_tp(self.flags)[1]

    @property
    def fraction(self) -> float | None:
        return num(flag_value(self.flags, FRACTION_FLAGS))

    @property
    def tokens(self) -> int | None:
        v = num(self.metrics.max_total_num_tokens) if self.metrics is not None else None
        return int(v) if v is not None else None

    @property
    def started(self) -> datetime | None:
        return parse_dt(self.started_at)

    @property
    def ended(self) -> datetime | None:
        return parse_dt(self.ended_at)

    @property
    def seconds(self) -> float | None:
        """Start to end (or to the start of ``ready``) in seconds; None while unknown."""
        start, end = self.started, self.ended
        for p in self.phases:
            if p.name == "ready" and p.model == "target":
                end = parse_dt(p.start) or end
        if start is None or end is None:
            return None
        try:
            return max(0.0, (end - start).total_seconds())
        except TypeError:
            return None

    @property
    def deployment(self) -> str:
        """engine | model | TP | version: the boots the calculator may calibrate together."""
        return deployment_key(self.engine, self.model, self.tp, self.version_hint)

    @property
    def failure_kind(self) -> str | None:
        return str(self.failure.kind) if self.failure is not None and self.failure.kind else None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def progress(self) -> tuple[int, int, int]:
        """How far the boot got: (terminal, phases, figures) — compared between two readers'
        documents of the same boot."""
        figures = self.metrics.figures() if self.metrics is not None else 0
        return (1 if self.terminal else 0, len(self.phases), figures)

    @property
    def serving_figures(self) -> ServingDoc | None:
        """The ``serving`` section when it has figures (None: nobody watched it serve)."""
        return self.serving if self.serving is not None and self.serving.has_figures else None


def deployment_key(engine: object, model: str | None, tp: int | None, version: object) -> str:
    return "|".join(str(x) for x in (engine, model, tp, version))
