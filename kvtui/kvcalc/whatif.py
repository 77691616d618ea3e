"""The calculator's what-if values (``WhatIf``): flag names (from kvtui.knobs) and the values to
evaluate, from ``--set``/``--unset`` or a mapping, validated. Not ``kvtui.flags.Edit`` (an edit of
a flags file): the apply path turns a ``WhatIf`` into file edits with ``flags.edits_from_mapping``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvtui.engines.events import Engine
from kvtui.knobs import MEMORY_ALIASES, MEMORY_ROLES, Memory, memory_name, underscore_name
from kvtui.kvcalc.defaults import KV_DTYPE_BYTES
from kvtui.kvcalc.model import CalcError

FLAG_ALIASES = MEMORY_ALIASES
"""Per engine: every accepted spelling (``_`` form, lower case) → the engine's own flag name
(``kvtui.knobs``). ``--mem-fraction-static``, ``mem-fraction-static`` and ``mem_fraction_static``
all normalise to the same key; the other engine's names are accepted as aliases (``max-model-len``
on SGLang means ``context_length``)."""

CPU_KV_SPACE = "vllm_cpu_kvcache_space"
"""vLLM's CPU KV pool size (``VLLM_CPU_KVCACHE_SPACE``), as the calculator names it."""

_FLAG_NAME_RE = re.compile(r"^[a-z][a-z0-9_.]*$")


def canonical_flag(engine: Engine, name: str) -> str:
    """The engine's own ``_`` name for ``name`` (any alias, with or without dashes).

    Unknown but well-formed names are returned normalised (the calculator accepts them and says it
    cannot model them); malformed names raise ``CalcError``.
    """
    key = underscore_name(name)
    if not key or not _FLAG_NAME_RE.match(key):
        raise CalcError(f"flag {name!r}: expected a flag name such as mem-fraction-static or max-running-requests")
    table = FLAG_ALIASES.get(engine, FLAG_ALIASES[Engine.SGLANG])
    return table.get(key, key)


def _concept(name: str) -> Memory | None:
    return MEMORY_ROLES.get(name)


_NONE_WORDS = {"none", "null", "unset", "default"}


def _parse_number(text: str) -> float:
    t = text.strip().replace(",", "").replace("_", "")
    return float(t)


def _parse_value(engine: Engine, name: str, raw: object) -> object:
    """Validate and convert one value for a modelled flag; unknown flags keep the raw value."""
    concept = _concept(name)
    shown = f"{name}={raw}"
    if concept is None:
        return raw
    if concept is Memory.CPU_KV_SPACE:
        return _parse_cpu_kv_space(name, raw)
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE_WORDS):
        if concept in (Memory.FRACTION, Memory.KV_DTYPE, Memory.PAGE, Memory.TP):
            raise CalcError(f"--set {shown}: expected a value (use --unset {name} to return to the engine default)")
        return None
    if concept is Memory.FRACTION:
        if isinstance(raw, str) and raw.strip().endswith("%"):
            raise CalcError(f"--set {shown}: expected a fraction between 0 and 1, e.g. 0.85 (not a percentage)")
        try:
            value = _parse_number(raw) if isinstance(raw, str) else float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise CalcError(f"--set {shown}: expected a fraction between 0 and 1, e.g. 0.85") from None
        if not (0.0 < value <= 1.0) or math.isnan(value):
            raise CalcError(f"--set {shown}: expected a fraction between 0 and 1 (exclusive of 0), e.g. 0.85")
        return value
    if concept is Memory.KV_DTYPE:
        text = str(raw).strip().lower()
        if text not in KV_DTYPE_BYTES:
            allowed = ", ".join(sorted(KV_DTYPE_BYTES))
            raise CalcError(f"--set {shown}: expected one of {allowed}")
        return text
    # integers
    try:
        if isinstance(raw, bool):
            raise TypeError
        if isinstance(raw, int):
            value_i = raw
        else:
            num = _parse_number(str(raw))
            if not num.is_integer():
                raise ValueError
            value_i = int(num)
    except (TypeError, ValueError, OverflowError):
        raise CalcError(f"--set {shown}: expected a whole number") from None
    if concept is Memory.CHUNK and value_i == -1 and engine is not Engine.VLLM:
        return -1  # SGLang: chunked prefill disabled
    if value_i < 1:
        what = "a whole number ≥ 1" + (" (or -1 to disable chunking)" if concept is Memory.CHUNK else "")
        raise CalcError(f"--set {shown}: expected {what}")
    if value_i > 1 << 40:
        raise CalcError(f"--set {shown}: expected a realistic value (got {value_i:,})")
    if concept is Memory.PAGE and value_i & (value_i - 1):
        raise CalcError(f"--set {shown}: expected a power of two (1, 16, 64, 128, 256, …)")
    return value_i


def _parse_cpu_kv_space(name: str, raw: object) -> int:
    shown = f"{name}={raw}"
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE_WORDS):
        raise CalcError(
            f"--unset {name}: without VLLM_CPU_KVCACHE_SPACE vLLM sizes the CPU pool from the memory it finds "
            "free at start, which the log does not say: give a size in GiB (VLLM_CPU_KVCACHE_SPACE=2)"
        )
    try:
        gib = int(str(raw).strip(), 10)  # vLLM reads it with int()
    except ValueError:
        raise CalcError(f"--set {shown}: expected a whole number of GiB (vLLM reads it with int())") from None
    if gib < 0 or gib > 1 << 20:
        raise CalcError(f"--set {shown}: expected a whole number of GiB from 0")
    return gib


@dataclass(frozen=True, slots=True)
class WhatIf:
    """What-if values in the engine's own names. ``values[name] is None`` means ``--unset``."""

    engine: Engine
    values: Mapping[str, object] = field(default_factory=dict)

    @property
    def unmodelled(self) -> tuple[str, ...]:
        """The edited flags the calculator does not model (reported, not predicted): unknown ones,
        and modelled ones this engine does not have (``VLLM_CPU_KVCACHE_SPACE`` on SGLang)."""
        return tuple(k for k in self.values if (role := _concept(k)) is None or memory_name(self.engine, role) is None)

    def get(self, concept: Memory) -> tuple[bool, object]:
        """(present, value) of the edit of a modelled setting (``Memory.FRACTION``, …)."""
        for k, v in self.values.items():
            if _concept(k) == concept:
                return True, v
        return False, None

    def to_json(self) -> dict[str, object]:
        return dict(self.values)


def parse_what_if(engine: Engine, sets: Sequence[str], unsets: Sequence[str]) -> WhatIf:
    """``--set FLAG=VALUE`` / ``--unset FLAG`` → ``WhatIf`` (raises ``CalcError`` on bad input)."""
    values: dict[str, object] = {}
    origin: dict[str, str] = {}
    for item in sets:
        if "=" not in item and _concept(canonical_flag(engine, item)) is None:
            name = canonical_flag(engine, item)  # a bare boolean flag (--set enable-torch-compile)
            if name in origin and origin[name] != f"--set {item}":
                raise CalcError(f"--set {item}: {name} is already given by {origin[name]}; give it once")
            values[name] = True
            origin[name] = f"--set {item}"
            continue
        if "=" not in item:
            raise CalcError(
                f"--set {item!r}: expected FLAG=VALUE, e.g. --set mem-fraction-static=0.88 "
                f"(use --unset {item.strip() or 'FLAG'} to remove a flag)"
            )
        raw_name, raw_value = item.split("=", 1)
        name = canonical_flag(engine, raw_name)
        if not raw_value.strip():
            raise CalcError(f"--set {item!r}: expected a value after '=' (use --unset {raw_name.strip()} to remove it)")
        if name in origin and origin[name] != f"--set {item}":
            raise CalcError(f"--set {item}: {name} is already given by {origin[name]}; give it once")
        values[name] = _parse_value(engine, name, raw_value.strip())
        origin[name] = f"--set {item}"
    for item in unsets:
        name = canonical_flag(engine, item)
        if name in origin and origin[name] != f"--unset {item}":
            raise CalcError(f"--unset {item}: {name} is already given by {origin[name]}; give it once")
        values[name] = None
        origin[name] = f"--unset {item}"
    return WhatIf(engine, values)


def what_if_from_mapping(engine: Engine, mapping: Mapping[str, object]) -> WhatIf:
    """What-if values given as ``{flag: value}`` (any alias; ``None`` = unset), validated like ``--set``."""
    values: dict[str, object] = {}
    for raw_name, raw_value in mapping.items():
        name = canonical_flag(engine, raw_name)
        values[name] = None if raw_value is None else _parse_value(engine, name, raw_value)
    return WhatIf(engine, values)
