"""The KV-pool calculator, calibrated from the boot's own log (pure core: no I/O, no UI).

``calibrate(boot)`` reads what the engine printed about itself and builds a ``MemoryModel``;
``predict(model, edits)`` says what an edited set of flags will give: tokens, KV GiB per rank,
memory left after the pool, headroom against the CUDA-graph capture, the request table, how many
full-context requests fit, and a verdict (``ok`` / ``tight`` / ``oom_risk`` / ``no_fit``), with
``explain`` lines that put the numbers into the formulas.

SGLang (``/work/shared/reference/engines.md`` §2, §4, §6)::

    rest(f)   = A − P·(1 − f)                      GiB; P free before the weights, A after them
    N(f)      = floor_page(rest(f)·2^30 / cell_sizer), then min(--max-total-tokens)
    pool_end  = A − (N + page)·cell_alloc − req_to_token − draft pool      (what capture starts with)

One boot fixes P, A, f, N and the allocated cell (``KV size / (N + page)``); the identity
``floor_page(rest·2^30/cell) == N`` is checked within the rounding of the printed GiB figures.
When it fails, the sizing cell the engine really used is searched among the known explanations
(DSA fp8 before 0.5.17 sized with 576+132 B/layer but allocated 656+132; EAGLE/DFlash targets
inflate the sizing cell by the draft's share; newer builds load the draft's weights before
sizing; ``--max-total-tokens`` caps; DeepSeek-V4 prints its own ``bytes_per_full_token``). If none
explains the numbers, the model says ``confidence: low`` and uses the empirical cell.

vLLM (§3.3, §6.6)::

    kv(u') = kv(u) + total·(u' − u);  tokens = floor(kv·2^30 / bytes_per_block)·block_size

Two boots of one deployment at different fractions give the slope (tokens per unit of fraction,
or vLLM's device total) directly: ``basis: two-point``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kvtui import fmt
from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine, FailureKind

GIB = float(1 << 30)
MIB_PER_GIB = 1024.0

# ---------------------------------------------------------------------------------------------
# Margins
# ---------------------------------------------------------------------------------------------

DEFAULT_GRAPH_MARGIN_GIB = 1.0
"""Fixed allowance (GiB per rank) on top of the measured CUDA-graph capture need.

Why 1 GiB: the capture need we measure (``pool end avail − avail after the last graph``) is the
*settled* footprint; capturing one batch size also needs a transient allocation that is freed
afterwards (the shared 0.4.10 sample died asking for 1.02 GiB with 51 MiB free while its graphs
themselves took ~0.09 GiB each), plus allocator fragmentation and the NCCL / custom-all-reduce
buffers that grow with the first real batch. Below ``need + margin`` the verdict is ``oom_risk``.

On top of it, ``tight`` keeps an *activation* allowance that grows with
``chunked_prefill_size`` (``activation_allowance_gib``): a prefill chunk of C tokens needs
activations that live outside the static pool. SGLang's own default-fraction heuristic reserves
``max(chunk, 2048) × 1.5 MiB`` for the whole non-static part (activations + graphs + workspace,
sized for the largest models); measured activation peaks are ~1/12 of that, so we keep
``ACTIVATION_MIB_PER_TOKEN`` = 0.125 MiB per chunk token (1 GiB at the common 8192).
``[calc] graph_margin_gib`` in hosts.toml overrides the fixed allowance.
"""

ACTIVATION_MIB_PER_TOKEN = 0.125
"""Runtime activation allowance per chunked-prefill token (MiB), see DEFAULT_GRAPH_MARGIN_GIB."""

DEFAULT_CHUNK = 8192  # when neither the boot nor the edits say (SGLang's default for 35–160 GiB cards)

# Rounding of printed figures: every SGLang "X.XX GB" is ±0.005 GiB. The rank-local avail lines are
# read a moment after the engine's MIN all-reduce, so allow a little more for them.
_PRINT_EPS = 0.005
_AVAIL_SLACK = 0.01

_SGLANG_VLM_RESERVES_GIB = (100 / 1024, (100 + 1024) / 1024)  # mm reservation (≈0.5.18+)


def activation_allowance_gib(chunked_prefill_size: int | None) -> float:
    """Runtime activation allowance for one prefill chunk (GiB per rank)."""
    chunk = DEFAULT_CHUNK if chunked_prefill_size is None or chunked_prefill_size <= 0 else chunked_prefill_size
    if chunked_prefill_size is not None and chunked_prefill_size < 0:
        chunk = 16384  # chunking disabled: a whole prompt at once; assume a long one
    return chunk * ACTIVATION_MIB_PER_TOKEN / MIB_PER_GIB


# ---------------------------------------------------------------------------------------------
# Errors, verdicts
# ---------------------------------------------------------------------------------------------


class CalcError(ValueError):
    """User-facing problem: bad flag/value, a boot that never sized its pool, missing inputs.

    ``kind``: "usage" (a bad edit or option) or "input" (the log / config lacks what is needed).
    """

    def __init__(self, message: str, kind: str = "usage") -> None:
        super().__init__(message)
        self.kind = kind


class Verdict(StrEnum):
    OK = "ok"
    TIGHT = "tight"
    OOM_RISK = "oom_risk"
    NO_FIT = "no_fit"


VERDICT_RANK: dict[Verdict, int] = {Verdict.OK: 0, Verdict.TIGHT: 1, Verdict.OOM_RISK: 2, Verdict.NO_FIT: 3}

# ---------------------------------------------------------------------------------------------
# Flags: names, aliases, values
# ---------------------------------------------------------------------------------------------

_FRACTION = {Engine.SGLANG: "mem_fraction_static", Engine.VLLM: "gpu_memory_utilization"}

# concept -> (sglang name, vllm name, extra aliases). Both engines' names are aliases of each other.
_CONCEPTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "fraction": (
        "mem_fraction_static",
        "gpu_memory_utilization",
        ("mem_fraction", "mfs", "gmu", "fraction", "memory_fraction", "gpu_mem_util"),
    ),
    "max_requests": ("max_running_requests", "max_num_seqs", ("max_running_reqs", "max_seqs")),
    "context": ("context_length", "max_model_len", ("context_len", "max_seq_len", "context", "max_context_len")),
    "graph_bs": ("cuda_graph_max_bs", "max_cudagraph_capture_size", ("max_capture_size",)),
    "kv_dtype": ("kv_cache_dtype", "kv_cache_dtype", ("kv_dtype",)),
    "page": ("page_size", "block_size", ()),
    "token_cap": ("max_total_tokens", "num_gpu_blocks_override", ()),
    "chunk": ("chunked_prefill_size", "max_num_batched_tokens", ("chunk_size", "chunked_prefill")),
    "tp": ("tp_size", "tensor_parallel_size", ("tp", "tensor_parallel")),
}


def _norm(name: str) -> str:
    return name.strip().lstrip("-").strip().replace("-", "_").lower()


def _build_aliases() -> dict[Engine, dict[str, str]]:
    out: dict[Engine, dict[str, str]] = {Engine.SGLANG: {}, Engine.VLLM: {}}
    for sg, vl, extra in _CONCEPTS.values():
        for alias in (sg, vl, *extra):
            out[Engine.SGLANG][alias] = sg
            out[Engine.VLLM][alias] = vl
    out[Engine.UNKNOWN] = dict(out[Engine.SGLANG])
    return out


FLAG_ALIASES: dict[Engine, dict[str, str]] = _build_aliases()
# vLLM's CPU backend sizes its KV pool from this environment variable (whole GiB; vllm/platforms/cpu.py:
# kv_cache_memory_bytes = VLLM_CPU_KVCACHE_SPACE × 2^30): the calculator takes it like a flag
# (``--set VLLM_CPU_KVCACHE_SPACE=2``, or an apply's ``--setenv``), and the pool is that many GiB, not a
# fraction of a device.
CPU_KV_SPACE = "vllm_cpu_kvcache_space"
FLAG_ALIASES[Engine.VLLM][CPU_KV_SPACE] = CPU_KV_SPACE
"""Per engine: every accepted spelling (``_`` form, lower case) → the engine's own flag name.
``--mem-fraction-static``, ``mem-fraction-static`` and ``mem_fraction_static`` all normalise to the
same key; the other engine's names are accepted as aliases (``max-model-len`` on SGLang means
``context_length``)."""

EDITABLE_FLAGS: dict[Engine, tuple[str, ...]] = {
    Engine.SGLANG: (
        "mem_fraction_static",
        "max_running_requests",
        "context_length",
        "cuda_graph_max_bs",
        "chunked_prefill_size",
        "kv_cache_dtype",
        "page_size",
        "max_total_tokens",
        "tp_size",
    ),
    Engine.VLLM: (
        "gpu_memory_utilization",
        "max_num_seqs",
        "max_model_len",
        "max_cudagraph_capture_size",
        "max_num_batched_tokens",
        "kv_cache_dtype",
        "block_size",
        "num_gpu_blocks_override",
        "tensor_parallel_size",
    ),
}
EDITABLE_FLAGS[Engine.UNKNOWN] = EDITABLE_FLAGS[Engine.SGLANG]

_CONCEPT_OF: dict[str, str] = {}
for _c, (_sg, _vl, _x) in _CONCEPTS.items():
    _CONCEPT_OF[_sg] = _c
    _CONCEPT_OF[_vl] = _c
_CONCEPT_OF[CPU_KV_SPACE] = "cpu_kv_space"

_FLAG_NAME_RE = re.compile(r"^[a-z][a-z0-9_.]*$")

KV_DTYPE_BYTES: dict[str, float | None] = {
    "auto": None,  # the model dtype
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "float32": 4.0,
    "fp32": 4.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "fp8_ds_mla": 1.0,
    "int8": 1.0,
    "fp4_e2m1": 0.5,
}


def fraction_flag(engine: Engine) -> str:
    """The engine's memory-fraction flag: ``mem_fraction_static`` / ``gpu_memory_utilization``."""
    return _FRACTION.get(engine, _FRACTION[Engine.SGLANG])


def canonical_flag(engine: Engine, name: str) -> str:
    """The engine's own ``_`` name for ``name`` (any alias, with or without dashes).

    Unknown but well-formed names are returned normalised (the calculator accepts them and says it
    cannot model them); malformed names raise ``CalcError``.
    """
    key = _norm(name)
    if not key or not _FLAG_NAME_RE.match(key):
        raise CalcError(f"flag {name!r}: expected a flag name such as mem-fraction-static or max-running-requests")
    table = FLAG_ALIASES.get(engine, FLAG_ALIASES[Engine.SGLANG])
    return table.get(key, key)


def _concept(name: str) -> str | None:
    return _CONCEPT_OF.get(name)


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
    if concept == "cpu_kv_space":
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
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE_WORDS):
        if concept in ("fraction", "kv_dtype", "page", "tp"):
            raise CalcError(f"--set {shown}: expected a value (use --unset {name} to return to the engine default)")
        return None
    if concept == "fraction":
        if isinstance(raw, str) and raw.strip().endswith("%"):
            raise CalcError(f"--set {shown}: expected a fraction between 0 and 1, e.g. 0.85 (not a percentage)")
        try:
            value = _parse_number(raw) if isinstance(raw, str) else float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise CalcError(f"--set {shown}: expected a fraction between 0 and 1, e.g. 0.85") from None
        if not (0.0 < value <= 1.0) or math.isnan(value):
            raise CalcError(f"--set {shown}: expected a fraction between 0 and 1 (exclusive of 0), e.g. 0.85")
        return value
    if concept == "kv_dtype":
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
    if concept == "chunk" and value_i == -1 and engine is not Engine.VLLM:
        return -1  # SGLang: chunked prefill disabled
    if value_i < 1:
        what = "a whole number ≥ 1" + (" (or -1 to disable chunking)" if concept == "chunk" else "")
        raise CalcError(f"--set {shown}: expected {what}")
    if value_i > 1 << 40:
        raise CalcError(f"--set {shown}: expected a realistic value (got {value_i:,})")
    if concept == "page" and value_i & (value_i - 1):
        raise CalcError(f"--set {shown}: expected a power of two (1, 16, 64, 128, 256, …)")
    return value_i


@dataclass(frozen=True, slots=True)
class Edits:
    """Flag edits in the engine's own names. ``values[name] is None`` means ``--unset``."""

    engine: Engine
    values: Mapping[str, object] = field(default_factory=dict)

    @property
    def unmodelled(self) -> tuple[str, ...]:
        return tuple(k for k in self.values
                     if _concept(k) is None or (k == CPU_KV_SPACE and self.engine is not Engine.VLLM))

    def get(self, concept: str) -> tuple[bool, object]:
        """(present, value) for a concept (``fraction``, ``context``, …)."""
        for k, v in self.values.items():
            if _concept(k) == concept:
                return True, v
        return False, None

    def to_json(self) -> dict[str, object]:
        return dict(self.values)


def parse_edits(engine: Engine, sets: Sequence[str], unsets: Sequence[str]) -> Edits:
    """``--set FLAG=VALUE`` / ``--unset FLAG`` → ``Edits`` (raises ``CalcError`` on bad input)."""
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
    return Edits(engine, values)


def edits_from_mapping(engine: Engine, mapping: Mapping[str, object]) -> Edits:
    """Edits given as ``{flag: value}`` (any alias; ``None`` = unset), validated like ``--set``."""
    values: dict[str, object] = {}
    for raw_name, raw_value in mapping.items():
        name = canonical_flag(engine, raw_name)
        values[name] = None if raw_value is None else _parse_value(engine, name, raw_value)
    return Edits(engine, values)


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def floor_page(tokens: float, page: int) -> int:
    """Round a token count down to the page (0 or below stays as the engine would see it)."""
    if tokens <= 0:
        return math.floor(tokens)
    page = max(1, page)
    return int(tokens // page) * page


def _frac(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _as_float(v: object) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def _as_int(v: object) -> int | None:
    fv = _as_float(v)
    if fv is None or math.isnan(fv) or math.isinf(fv):
        return None
    return int(fv)


def _snap_cell(lo: float, hi: float) -> int:
    """The integer cell in [lo, hi] with the most trailing zero bits (cells are products of
    head counts, dims, layers and dtype sizes, so real ones are usually multiples of 64);
    the midpoint when no multiple of 64 lies in the interval."""
    lo_i, hi_i = math.ceil(lo), math.floor(hi)
    mid = round((lo + hi) / 2)
    if hi_i < lo_i:
        return max(1, mid)
    for bit in range(30, 5, -1):
        step = 1 << bit
        first = -(-lo_i // step) * step
        if first <= hi_i:
            cands = list(range(first, hi_i + 1, step))
            return min(cands, key=lambda c: abs(c - mid))
    return max(1, mid)


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    if not v:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", v.strip())
    if not m:
        return None
    return tuple(int(x) for x in m.groups(default="0"))


# ---------------------------------------------------------------------------------------------
# Graph capture model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GraphModel:
    """What capture needs from the memory left after the pools, and how it scales with the
    captured batch sizes: ``need(bs) = fixed + Σ (per_graph + per_bs·bs)``."""

    need_gib: float  # at the observed batch-size list
    bs: tuple[int, ...] = ()
    per_graph_gib: float = 0.0
    per_bs_gib: float = 0.0
    fixed_gib: float = 0.0
    source: str = "observed"  # observed | capture-oom | estimated | disabled | other-boot
    note: str = ""

    def cost(self, bs: Sequence[int]) -> float:
        return sum(self.per_graph_gib + self.per_bs_gib * b for b in bs)

    def need_for(self, bs: Sequence[int] | None) -> float:
        if bs is None or not self.bs:
            return self.need_gib
        return self.fixed_gib + self.cost(bs)


def _fit_graph_costs(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares ``cost = a + b·bs`` with a, b ≥ 0; None when under-determined."""
    pts = [(float(b), c) for b, c in points if c >= 0]
    if len(pts) < 3 or len({b for b, _ in pts}) < 2:
        return None
    n = len(pts)
    sx = sum(b for b, _ in pts)
    sy = sum(c for _, c in pts)
    sxx = sum(b * b for b, _ in pts)
    sxy = sum(b * c for b, c in pts)
    den = n * sxx - sx * sx
    if den <= 0:
        return None
    b = (n * sxy - sx * sy) / den
    a = (sy - b * sx) / n
    if b < 0:
        return max(0.0, sy / n), 0.0
    if a < 0:
        return 0.0, max(0.0, sxy / sxx)
    return a, b


def _split_total(total: float, bs: Sequence[int]) -> tuple[float, float]:
    """Without a trail: half of the graph memory per graph, half in proportion to bs."""
    if not bs:
        return 0.0, 0.0
    return total / (2 * len(bs)), total / (2 * max(1, sum(bs)))


def extend_capture_bs(bs: Sequence[int], max_bs: int) -> list[int]:
    """SGLang-like capture list up to ``max_bs``: 1, 2, 4, 8, then steps of 8 (16 above 256)."""
    out = [b for b in sorted(set(bs)) if b <= max_bs]
    base = [1, 2, 4, 8, *list(range(16, 257, 8)), *list(range(272, 513, 16)), *list(range(544, 4097, 32))]
    top = max(out) if out else 0
    out.extend(b for b in base if top < b <= max_bs)
    if max_bs > 0 and (not out or max(out) < max_bs):
        out.append(max_bs)
    return sorted(set(out))


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdentityCheck:
    """The N-independent identity ``floor_page(rest·2^30/cell_sizer) == N``."""

    ok: bool
    hypothesis: str  # standard | draft-in-cell | dsa-fp8-sizing | capped | dsv4 | unexplained | unchecked
    expected_lo: int | None = None
    expected_hi: int | None = None
    rest_gib: float | None = None
    after_load_gib: float | None = None


@dataclass(frozen=True, slots=True)
class MemoryModel:
    """A deployment's memory, calibrated from a boot (or built from a config).

    Fractions are in the engine's own flag (``fraction_flag(engine)``); GiB are per rank.
    ``slope_gib``: pool budget gained per +1.0 of fraction (SGLang: P, vLLM: the device total);
    None when the boot cannot tell (then only the observed fraction can be predicted).
    """

    engine: Engine
    basis: str  # calibrated | two-point | config
    confidence: str  # high | low
    fraction: float
    tokens: int
    tokens_raw: float  # the unrounded budget in tokens (N ≤ raw < N + page unless capped)
    page_size: int
    cell_bytes: int  # what the pool allocates per token per rank
    sizing_cell_bytes: int  # what the engine divides the budget by
    slope_gib: float | None
    pre_load_gib: float | None = None  # P
    after_load_gib: float | None = None  # A (the one the engine sized from)
    weights_gib: float | None = None
    bias_gib: float = 0.0
    max_total_tokens: int | None = None  # SGLang cap / vLLM num_gpu_blocks_override (tokens)
    kv_cache_gib: float | None = None
    avail_after_pool_gib: float | None = None  # after every KV pool, before capture
    # SGLang: free right after the target's own pools (KV + req_to_token), before anything else is
    # allocated (a draft model's pools come later): below 0 the allocation itself fails
    target_pool_end_gib: float | None = None
    graph: GraphModel | None = None
    graph_mem_gib: float | None = None  # as the engine reported it
    max_running_requests: int | None = None  # the explicit flag, if any
    running_requests: int | None = None  # effective (scheduler summary)
    context_len: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    kv_cache_dtype: str = "auto"
    kv_elem_bytes: float = 2.0
    model_elem_bytes: float = 2.0
    tp: int = 1
    tp_scales_cell: bool = True  # False for MLA/DSA/DSV4 (latent not split by TP)
    draft_cell_bytes: int = 0  # draft KV per token carved from the headroom (separate draft pool)
    req_extra_tokens: int = 4
    gpu_mem_gib: float | None = None  # device total
    free_at_start_gib: float | None = None  # vLLM: free memory when the worker started
    graphs_in_budget: bool = False  # vLLM ≥ 0.21 estimates graphs inside the budget
    speculative: bool = False
    disable_cuda_graph: bool = False
    version_hint: str | None = None
    identity: IdentityCheck | None = None
    observed_verdict_hint: str | None = None  # what the boot did: ready / failed kind
    reasons: tuple[str, ...] = ()
    explain: tuple[str, ...] = ()
    flags: Mapping[str, object] = field(default_factory=dict)
    cpu_mem_gib: float | None = None  # vLLM CPU backend: the node's memory (the pool is VLLM_CPU_KVCACHE_SPACE)


# ---------------------------------------------------------------------------------------------
# Reading a boot
# ---------------------------------------------------------------------------------------------

_TRIED_RE = re.compile(r"Tried to allocate ([\d.]+) ?(GiB|MiB|KiB|B)\b")
_FREE_RE = re.compile(r"of which ([\d.]+) ?(GiB|MiB|KiB|B) is free")
_CAPACITY_RE = re.compile(r"total capac\w* of ([\d.]+) ?(GiB|MiB)")
_FRACTION_IN_TEXT_RE = re.compile(r"mem_fraction_static=([\d.]+)")
_UNIT = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2, "B": 1 / 1024**3}


def _from_text(boot: Boot, regex: re.Pattern[str]) -> float | None:
    texts: list[str] = []
    if boot.failure is not None:
        texts.append(boot.failure.message)
        texts.extend(boot.failure.traceback)
    for t in texts:
        m = regex.search(t)
        if m:
            value = float(m.group(1))
            if m.lastindex and m.lastindex >= 2:
                value *= _UNIT.get(m.group(2), 1.0)
            return value
    return None


def _fact(boot: Boot, name: str, metric: float | int | None = None) -> float | None:
    if metric is not None:
        return float(metric)
    v = boot.facts.get(name)
    return float(v) if v is not None else None


def _min_rank_fact(boot: Boot, name: str) -> float | None:
    vals = [rf[name] for rf in boot.rank_facts.values() if name in rf]
    return min(vals) if vals else None


def _boot_fraction(boot: Boot) -> float | None:
    f = _as_float(boot.flags.get(fraction_flag(boot.engine)))
    if f is None and boot.engine is Engine.SGLANG:
        v = _from_text(boot, _FRACTION_IN_TEXT_RE)
        f = v
    return f


def _boot_tokens(boot: Boot) -> int | None:
    m = boot.metrics
    for v in (
        m.max_total_num_tokens,
        boot.facts.get("max_total_num_tokens"),
        boot.facts.get("dsv4_full_token"),
        boot.facts.get("full_tokens"),
        boot.facts.get("kv_tokens"),
    ):
        if v is not None and v > 0:
            return int(v)
    return None


def sized_pool(boot: Boot) -> bool:
    """Did this boot size its KV pool (so a model can be calibrated from it)?"""
    if boot.engine is Engine.VLLM:
        kv = boot.metrics.kv_cache_gib if boot.metrics.kv_cache_gib is not None else boot.facts.get("kv_cache_gib")
        return (kv is not None and kv > 0 and _boot_tokens(boot) is not None) or (
            boot.facts.get("kv_needed_gib") is not None and kv is not None and kv > 0
        )
    return _boot_tokens(boot) is not None


_DEPLOYMENT_KEYS: dict[Engine, tuple[str, ...]] = {
    Engine.SGLANG: (
        "model_path",
        "tp_size",
        "pp_size",
        "dp_size",
        "kv_cache_dtype",
        "page_size",
        "quantization",
        "speculative_algorithm",
        "speculative_draft_model_path",
        "max_total_tokens",
        "enable_dp_attention",
        "attention_backend",
    ),
    Engine.VLLM: (
        "model",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "kv_cache_dtype",
        "block_size",
        "quantization",
        "max_num_batched_tokens",
        "num_gpu_blocks_override",
        "speculative_config",
    ),
}


def same_deployment(a: Boot, b: Boot) -> bool:
    """Same engine, model and memory-relevant flags (the fraction may differ)."""
    if a.engine is not b.engine:
        return False
    for key in _DEPLOYMENT_KEYS.get(a.engine, ()):
        if key in a.flags and key in b.flags and a.flags[key] != b.flags[key]:
            return False
    ca, cb = a.metrics.cell_bytes, b.metrics.cell_bytes
    return not (ca and cb and abs(ca - cb) > 0.01 * max(ca, cb))


def select_boot(boots: Sequence[Boot], index: int | None = None) -> tuple[Boot, list[Boot]]:
    """The boot to calibrate from, plus the other boots of the same deployment that sized a pool.

    ``index`` is 1-based (``--boot 2`` = the second boot of the log; ``-1`` = the last); by default
    the last boot that sized its pool.
    """
    if not boots:
        raise CalcError(
            "no SGLang or vLLM boot found (the text holds no engine start line kvtui recognises)", "input"
        )
    if index is not None:
        n = len(boots)
        if index == 0 or index > n or index < -n:
            raise CalcError(f"--boot {index}: the log holds {n} boot{'s' if n != 1 else ''} (1–{n})")
        chosen = boots[index - 1] if index > 0 else boots[index]
    else:
        sized = [b for b in boots if sized_pool(b)]
        if not sized:
            last = boots[-1]
            raise CalcError(
                f"no boot in the log sized its KV pool ({len(boots)} boot{'s' if len(boots) != 1 else ''}; "
                f"the last one is {last.status.value}"
                + (
                    f", {last.failure.kind.value} in {last.failure.phase.value if last.failure.phase else '?'}"
                    if last.failure
                    else ""
                )
                + "): nothing to calibrate from; use --model config.json for a config-based estimate",
                "input",
            )
        chosen = sized[-1]
    others = [b for b in boots if b is not chosen and sized_pool(b) and same_deployment(chosen, b)]
    return chosen, others


# ---------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------


def _page_of(boot: Boot, tokens: int | None) -> tuple[int, str | None]:
    page = _as_int(boot.flags.get("page_size"))
    if page and page > 0:
        return page, None
    if boot.facts.get("dsv4_bytes_per_full_token") is not None:
        return 256, "page_size not in the args: DeepSeek-V4 forces 256"
    if tokens and tokens % 64 == 0:
        return (
            64,
            "page_size not in the args: #tokens is a multiple of 64, assuming the forced page of 64 (DSA/FlashMLA)",
        )
    return 1, None


def _dtype_bytes(name: str, model_bytes: float) -> float:
    b = KV_DTYPE_BYTES.get(name.lower()) if name else None
    return model_bytes if b is None else b


def _model_dtype_bytes(flags: Mapping[str, object]) -> float:
    d = str(flags.get("dtype") or "auto").lower()
    if d in ("float32", "fp32"):
        return 4.0
    return 2.0


@dataclass(slots=True)
class _Cal:
    """Scratch state while calibrating one SGLang boot."""

    reasons: list[str] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)
    confidence: str = "high"

    def low(self, reason: str) -> None:
        self.confidence = "low"
        self.reasons.append(reason)


def _interval_tokens(
    rest_lo: float, rest_hi: float, cell_lo: float, cell_hi: float, page: int, cap: int | None
) -> tuple[int, int]:
    lo = floor_page(max(0.0, rest_lo) * GIB / cell_hi, page) if cell_hi > 0 else 0
    hi = floor_page(max(0.0, rest_hi) * GIB / cell_lo, page) if cell_lo > 0 else 0
    if cap is not None:
        lo, hi = min(lo, floor_page(cap, page)), min(hi, floor_page(cap, page))
    return lo, hi


def _graph_model_sglang(boot: Boot, pool_end: float | None, c: _Cal) -> GraphModel | None:
    """Capture need from a boot: measured when capture finished, estimated when it died in it."""
    flags = boot.flags
    if flags.get("disable_cuda_graph") is True:
        return GraphModel(need_gib=0.0, source="disabled", note="CUDA graphs disabled (--disable-cuda-graph)")
    trail = list(boot.capture_trail)
    bs_list = sorted(set(boot.capture_bs)) or sorted({b for b, _ in trail})
    facts, dfacts, m = boot.facts, boot.draft_facts, boot.metrics
    begin = facts.get("graph_begin_avail_gib")
    graph_mem = m.graph_mem_gib if m.graph_mem_gib is not None else facts.get("graph_mem_gib")
    draft_graph = dfacts.get("graph_mem_gib")
    afters = [
        x
        for x in (
            facts.get("avail_after_graph_gib"),
            m.available_gpu_mem_gib,
            facts.get("available_gpu_mem_gib"),
            dfacts.get("avail_after_graph_gib"),
        )
        if x is not None
    ]
    # per-graph costs from the trail (tqdm prints avail *before* each batch size)
    points: list[tuple[int, float]] = []
    for (b0, a0), (_b1, a1) in itertools.pairwise(trail):
        points.append((b0, a0 - a1))
    end_avail = facts.get("avail_after_graph_gib")
    captured_all = boot.failure is None or boot.failure.kind is not FailureKind.OOM_GRAPH_CAPTURE
    if trail and end_avail is not None and captured_all:
        points.append((trail[-1][0], trail[-1][1] - end_avail))
    fit = _fit_graph_costs(points)

    died_in_capture = boot.failure is not None and boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE
    if died_in_capture:
        start = pool_end if pool_end is not None else begin
        tried = facts.get("oom_tried_gib") or _from_text(boot, _TRIED_RE)
        free = facts.get("oom_free_gib")
        if free is None:
            free = _from_text(boot, _FREE_RE)
        if free is None and trail:
            free = trail[-1][1]
        if start is None or free is None:
            c.low("the boot died in CUDA-graph capture but printed no avail figures to size what capture needed")
            return GraphModel(need_gib=max(graph_mem or 0.0, 1.0) * 2, bs=tuple(bs_list), source="capture-oom")
        used = max(0.0, start - free)
        if fit is None and bs_list:
            a, b = _split_total(used, [bb for bb, _ in trail] or bs_list)
        elif fit is None:
            a, b = 0.0, 0.0
        else:
            a, b = fit
        failing_bs = trail[-1][0] if trail else None
        remaining = [bb for bb in bs_list if failing_bs is not None and bb < failing_bs]
        rest_cost = sum(a + b * bb for bb in remaining)
        need = used + (tried or 0.0) + rest_cost
        total_cost = sum(a + b * bb for bb in bs_list)
        note = (
            f"capture died: it had used {used:.2f} GiB (from {start:.2f} down to {free:.2f} GiB free)"
            + (f" when it tried to allocate {tried:.2f} GiB" if tried else "")
            + (f" at bs={failing_bs}" if failing_bs is not None else "")
            + (f"; the {len(remaining)} smaller batch sizes left need ≈ {rest_cost:.2f} GiB more" if remaining else "")
            + f" → capture needs ≈ {need:.2f} GiB"
        )
        c.explain.append(note)
        return GraphModel(
            need_gib=need,
            bs=tuple(bs_list),
            per_graph_gib=a,
            per_bs_gib=b,
            fixed_gib=max(0.0, need - total_cost),
            source="capture-oom",
            note=note,
        )
    if pool_end is not None and afters:
        need = max(0.0, pool_end - min(afters))
        reported = (graph_mem or 0.0) + (draft_graph or 0.0)
        need = max(need, reported)
        total_graph = graph_mem if graph_mem is not None else need
        if fit is None:
            a, b = _split_total(total_graph, bs_list)
        else:
            a, b = fit
        cost_obs = sum(a + b * bb for bb in bs_list)
        if bs_list and cost_obs > 0 and graph_mem:
            scale = graph_mem / cost_obs  # fitted costs re-scaled to the reported total
            a, b, cost_obs = a * scale, b * scale, graph_mem
        note = (
            f"capture needed {need:.2f} GiB: {pool_end:.2f} GiB free after the pools → {min(afters):.2f} GiB "
            f"after the graphs"
            + (f" (graphs {graph_mem:.2f} GiB" if graph_mem is not None else "")
            + (f" + draft graphs {draft_graph:.2f} GiB)" if draft_graph else (")" if graph_mem is not None else ""))
        )
        c.explain.append(note)
        return GraphModel(
            need_gib=need,
            bs=tuple(bs_list),
            per_graph_gib=a,
            per_bs_gib=b,
            fixed_gib=max(0.0, need - cost_obs),
            source="observed",
            note=note,
        )
    if graph_mem is not None:
        a, b = _split_total(graph_mem, bs_list)
        need = graph_mem + (draft_graph or 0.0)
        return GraphModel(
            need_gib=need,
            bs=tuple(bs_list),
            per_graph_gib=a,
            per_bs_gib=b,
            fixed_gib=need - graph_mem,
            source="observed",
        )
    return None


def _estimated_graph(max_bs: int | None, c: _Cal, why: str) -> GraphModel:
    """SGLang's own reserve for graphs (``cuda_graph_max_bs × 2 MiB``) plus a workspace, as a
    stand-in when the log does not show what capture took."""
    mbs = max_bs or 160
    bs = extend_capture_bs([], mbs)
    need = 0.5 + mbs * 2 / MIB_PER_GIB
    a, b = _split_total(need - 0.5, bs)
    c.reasons.append(
        f"{why}: capture need assumed {need:.2f} GiB (0.5 GiB workspace + 2 MiB per batch size up to {mbs})"
    )
    return GraphModel(need_gib=need, bs=tuple(bs), per_graph_gib=a, per_bs_gib=b, fixed_gib=0.5, source="estimated")


def _req_table_gib(mrr: int | None, ctx: int | None, extra: int = 4) -> float:
    if not mrr or not ctx:
        return 0.0
    return mrr * (ctx + extra) * 4 / GIB


def default_running_requests(tokens: int, context_len: int | None) -> int:
    """SGLang's default ``max_running_requests`` (per DP worker): clamp(tokens/ctx·512, 2048, 4096),
    at most tokens//2."""
    if tokens <= 0:
        return 0
    ctx = context_len or 4096
    est = min(max(int(tokens / ctx * 512), 2048), 4096)
    return max(1, min(est, tokens // 2))


def _sglang_tier(gpu_gib: float, tp: int) -> tuple[int, int]:
    """Default (chunked_prefill_size, cuda_graph_max_bs) by GPU memory (SGLang 0.5.10)."""
    if gpu_gib < 20:
        return 2048, 8
    if gpu_gib < 35:
        return 2048, 24 if tp < 4 else 80
    if gpu_gib < 60:
        return 4096, 32 if tp < 4 else 160
    if gpu_gib < 160:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def default_mem_fraction(
    gpu_gib: float,
    tp: int,
    *,
    chunk: int | None = None,
    max_bs: int | None = None,
    speculative: bool = False,
    pp: int = 1,
) -> float:
    """SGLang 0.5.10's default ``--mem-fraction-static`` for a card of ``gpu_gib``."""
    tier_chunk, tier_bs = _sglang_tier(gpu_gib, tp)
    chunk = tier_chunk if chunk is None or chunk <= 0 else chunk
    max_bs = tier_bs if max_bs is None else max_bs
    gpu_mib = gpu_gib * 1024
    reserved = 512 + max(chunk, 2048) * 1.5 + max_bs * 2 + tp * pp / 8 * 1024
    if gpu_gib > 60:
        reserved = max(reserved, 10240)
    if speculative:
        reserved += 4096
    return round((gpu_mib - reserved) / gpu_mib, 3)


def calibrate(boot: Boot, *, gpu_mem_gib: float | None = None, others: Sequence[Boot] = ()) -> MemoryModel:
    """Build the memory model of ``boot``'s deployment from what its log printed.

    ``others``: earlier boots of the same deployment in the same log (two-point slope).
    Raises ``CalcError`` when the boot never sized its pool, saying what is missing.
    """
    if boot.engine is Engine.VLLM:
        return _calibrate_vllm(boot, gpu_mem_gib=gpu_mem_gib, others=others)
    if boot.engine is not Engine.SGLANG:
        raise CalcError("the boot's engine was not recognised (neither SGLang nor vLLM lines)", "input")
    return _calibrate_sglang(boot, gpu_mem_gib=gpu_mem_gib, others=others)


def _never_sized(boot: Boot) -> CalcError:
    what = "no `KV Cache is allocated` / `max_total_num_tokens` / `DSV4 memory calculation` line"
    if boot.failure is not None:
        phase = boot.failure.phase.value if boot.failure.phase else "?"
        what += f"; it failed in {phase} ({boot.failure.kind.value}: {boot.failure.message.strip()[:120]})"
    elif boot.status is BootStatus.STARTING:
        what += f"; it is still starting (last phase: {boot.phase.value if boot.phase else 'launch'})"
    return CalcError(
        f"this boot never sized its KV pool ({what}); calibrate from a boot that reached kv_allocate, "
        "or use --model config.json for a config-based estimate",
        "input",
    )


def _calibrate_sglang(boot: Boot, *, gpu_mem_gib: float | None, others: Sequence[Boot]) -> MemoryModel:
    c = _Cal()
    flags = boot.flags
    m, facts, dfacts = boot.metrics, boot.facts, boot.draft_facts
    f = _boot_fraction(boot)
    if f is None:
        raise CalcError(
            "the boot's argument dump (server_args=…) has no mem_fraction_static: cannot place it on the fraction line",
            "input",
        )
    n = _boot_tokens(boot)
    if n is None:
        raise _never_sized(boot)
    page, page_note = _page_of(boot, n)
    if page_note:
        c.reasons.append(page_note)
    cap = _as_int(flags.get("max_total_tokens"))
    spec = flags.get("speculative_algorithm") not in (None, "None", "", "NONE") or bool(dfacts)
    kv_dtype = str(flags.get("kv_cache_dtype") or "auto")
    model_bytes = _model_dtype_bytes(flags)
    tp = _as_int(flags.get("tp_size")) or 1

    # --- P, A ---------------------------------------------------------------------------------
    p = _fact(boot, "avail_before_load_gib", m.avail_before_load_gib)
    if p is None:
        p = _min_rank_fact(boot, "avail_before_load_gib")
    a_target = _fact(boot, "avail_after_load_gib", m.avail_after_load_gib)
    if a_target is None:
        a_target = _min_rank_fact(boot, "avail_after_load_gib")
    weights = _fact(boot, "weights_gib", m.weights_gib)
    a_draft = dfacts.get("avail_after_load_gib")
    a_candidates: list[tuple[float, str]] = []
    if a_target is not None:
        a_candidates.append((a_target, "target"))
    if a_draft is not None and (a_target is None or a_draft < a_target):
        a_candidates.append((a_draft, "draft"))

    # --- cells --------------------------------------------------------------------------------
    bpft = facts.get("dsv4_bytes_per_full_token")
    kv_gib = m.kv_cache_gib if m.kv_cache_gib is not None else facts.get("kv_cache_gib")
    swa_gib = facts.get("swa_kv_gib")
    if swa_gib is not None and (kv_gib is None or swa_gib > kv_gib):
        kv_gib = swa_gib
    is_dsv4 = bpft is not None
    if is_dsv4:
        assert bpft is not None
        cell_lo, cell_hi = bpft - _PRINT_EPS, bpft + _PRINT_EPS
        cell = round(bpft)
        c.explain.append(f"cell = {bpft:,.2f} B per full token (the engine's `DSV4 memory calculation` line)")
    elif kv_gib is not None and kv_gib > 0:
        rows = n + page
        eps = 2 * _PRINT_EPS  # K + V are two rounded figures
        cell_lo, cell_hi = (kv_gib - eps) * GIB / rows, (kv_gib + eps) * GIB / rows
        cell = _snap_cell(cell_lo, cell_hi)
        direct = kv_gib * GIB / rows
        c.explain.append(
            f"cell = {kv_gib:.2f} GiB × 2^30 / ({n:,} + {page}) ≈ {direct:,.0f} B"
            + (
                f"; the printed GiB are rounded (±{eps:.2f}), so the cell lies in {math.ceil(cell_lo):,}–"
                f"{math.floor(cell_hi):,} B: {cell:,} B per token per rank (the round value in that range)"
                if cell != round(direct)
                else " per token per rank"
            )
            + " (all the layers this rank holds; the pool line is per rank, not per layer)"
        )
    elif m.cell_bytes:
        cell = int(m.cell_bytes)
        cell_lo, cell_hi = cell * 0.9995, cell * 1.0005
    else:
        raise CalcError(
            "the boot printed #tokens but no pool size (`KV Cache is allocated … K size/V size` or `KV size`): "
            "cannot tell the bytes per token",
            "input",
        )
    # draft pool cell (separate pool, carved from the headroom)
    draft_cell = 0
    draft_kv = dfacts.get("kv_cache_gib")
    draft_n = dfacts.get("kv_tokens") or n
    if draft_kv is not None and draft_kv > 0 and draft_n:
        draft_cell = _snap_cell(
            (draft_kv - 2 * _PRINT_EPS) * GIB / (draft_n + page), (draft_kv + 2 * _PRINT_EPS) * GIB / (draft_n + page)
        )

    # --- identity -----------------------------------------------------------------------------
    identity = IdentityCheck(ok=False, hypothesis="unchecked")
    sizer = cell
    bias = 0.0
    a_used = a_target
    rest: float | None = None
    tokens_raw = float(n)

    def rest_bounds(a_val: float, p_val: float) -> tuple[float, float, float]:
        d = _PRINT_EPS + _AVAIL_SLACK
        mid = a_val - p_val * (1 - f)
        return (a_val - d) - (p_val + d) * (1 - f), (a_val + d) - (p_val - d) * (1 - f), mid

    if p is not None and a_candidates:
        matched = False
        tried: list[str] = []
        for a_val, a_src in a_candidates:
            r_lo, r_hi, r_mid = rest_bounds(a_val, p)
            # name, sizer_lo, sizer_hi, sizer, bias, exact allocated cell (0 = keep)
            hyps: list[tuple[str, float, float, float, float, int]] = []
            if is_dsv4:
                hyps.append(("dsv4", cell_lo, cell_hi, float(bpft or cell), 0.0, 0))
            else:
                hyps.append(("standard", cell_lo, cell_hi, float(cell), 0.0, 0))
                if draft_cell:
                    hyps.append(
                        (
                            "draft-in-cell",
                            cell_lo + draft_cell - 1,
                            cell_hi + draft_cell + 1,
                            float(cell + draft_cell),
                            0.0,
                            0,
                        )
                    )
                for per_alloc in (788, 656):
                    layers = round(cell / per_alloc)
                    if layers >= 1 and cell_lo - 1 <= layers * per_alloc <= cell_hi + 1:
                        sz = 708.0 * layers
                        hyps.append((f"dsa-fp8-sizing:{layers}:{per_alloc}", sz, sz, sz, 0.0, layers * per_alloc))
                for r in _SGLANG_VLM_RESERVES_GIB:
                    hyps.append((f"mm-reserve:{r:.3f}", cell_lo, cell_hi, float(cell), r, 0))
            for name, s_lo, s_hi, s_mid, b, exact in hyps:
                lo, hi = _interval_tokens(r_lo - b, r_hi - b, s_lo, s_hi, page, cap)
                tried.append(f"{name} with A={a_val:.2f} ({a_src}): {lo:,}–{hi:,}")
                if lo <= n <= hi:
                    identity = IdentityCheck(True, name, lo, hi, r_mid, a_val)
                    sizer = round(s_mid)
                    bias = b
                    if exact:
                        cell = exact
                    a_used = a_val
                    rest = r_mid
                    matched = True
                    break
            if matched:
                break
        if not matched and is_dsv4:
            avail = facts.get("dsv4_available_gib")
            a_val, a_src = a_candidates[0]
            r_lo, r_hi, r_mid = rest_bounds(a_val, p)
            if avail is not None:
                lo, hi = _interval_tokens(avail - _PRINT_EPS, avail + _PRINT_EPS, cell_lo, cell_hi, page, cap)
                if lo <= n <= hi and avail < r_mid:
                    bias = r_mid - avail
                    identity = IdentityCheck(True, "dsv4-bias", lo, hi, r_mid, a_val)
                    sizer, rest, a_used, matched = round(float(bpft or cell)), r_mid, a_val, True
        if not matched:
            a_val, a_src = a_candidates[0]
            r_lo, r_hi, r_mid = rest_bounds(a_val, p)
            lo, hi = _interval_tokens(r_lo, r_hi, cell_lo, cell_hi, page, cap)
            rest, a_used = r_mid, a_val
            empirical = r_mid * GIB / n if r_mid > 0 else float(cell)
            sizer = max(1, round(empirical))
            identity = IdentityCheck(False, "unexplained", lo, hi, r_mid, a_val)
            c.low(
                f"the log's figures do not follow the sizing formula: rest = {r_mid:.2f} GiB with the allocated cell "
                f"{cell:,} B gives {lo:,}–{hi:,} tokens, the engine made {n:,}; no known quirk explains it "
                f"(memory taken by another process, an env override, an unknown version quirk?): "
                f"using the empirical sizing cell {sizer:,} B"
            )
        name = identity.hypothesis
        if identity.ok:
            if name == "draft-in-cell":
                c.reasons.append(
                    f"sizing cell {sizer:,} B ≠ allocated cell {cell:,} B: the speculative target sizes with the "
                    f"draft's KV share ({draft_cell:,} B/token) included (EAGLE/STANDALONE ≥0.5.14, DFlash)"
                )
            elif name.startswith("dsa-fp8-sizing"):
                _, layers_s, per_s = name.split(":")
                c.explain.append(
                    f"allocated cell = {per_s} × {layers_s} layers = {cell:,} B (DSA fp8 layout: "
                    f"{'656 + 132' if per_s == '788' else '656'} B per layer); sizing cell = 708 × {layers_s} = "
                    f"{sizer:,} B"
                )
                c.reasons.append(
                    f"sizing cell {sizer:,} B ≠ allocated cell {cell:,} B: DSA with fp8 KV before SGLang 0.5.17 "
                    f"sized with (576+132)·{layers_s} B but allocates {per_s}·{layers_s}; the pool is "
                    f"{(cell / sizer - 1) * 100:.1f}% bigger than budgeted and the excess comes out of the headroom"
                )
                name = "dsa-fp8-sizing"
            elif name.startswith("mm-reserve"):
                c.reasons.append(
                    f"a multimodal reservation of {bias:.2f} GiB is taken before sizing (VLM, SGLang ≥0.5.18)"
                )
            elif name == "dsv4-bias":
                c.reasons.append(
                    f"DeepSeek-V4 fixed bias of {bias:.2f} GiB taken before dividing (c128 state per request slot)"
                )
            if a_used is not None and a_target is not None and a_used != a_target:
                c.reasons.append(
                    f"A = {a_used:.2f} GiB is the draft model's `Load weight end` avail: the draft's weights were "
                    "loaded before sizing (SGLang ≥0.5.18)"
                )
            identity = replace(identity, hypothesis=name)
        assert rest is not None
        raw = (rest - bias) * GIB / sizer
        if cap is not None and n >= floor_page(cap, page) and raw > n + page:
            tokens_raw = raw
            c.reasons.append(f"the pool is capped by max_total_tokens={cap:,} (the budget would give {int(raw):,})")
        else:
            tokens_raw = min(max(raw, float(n)), float(n + page - 1)) if identity.ok else float(n) + (page - 1) / 2
        ok_mark = "✓" if identity.ok else "✗"
        c.explain.insert(
            0,
            f"rest = A − P·(1 − f) = {a_used:.2f} − {p:.2f} × (1 − {_frac(f)}) = {rest:.2f} GiB"
            + (f" − {bias:.2f} GiB bias" if bias else ""),
        )
        c.explain.insert(
            0,
            f"P = {p:.2f} GiB free before the weights (min over ranks), A = {a_used:.2f} GiB after them, "
            f"f = {_frac(f)}",
        )
        c.explain.append(
            f"check: floor_page({rest - bias:.2f} GiB × 2^30 / {sizer:,} B, page {page}) = "
            f"{identity.expected_lo:,}–{identity.expected_hi:,} tokens (printed-GiB rounding); the engine made {n:,} "
            f"{ok_mark}"
        )
    else:
        missing = []
        if p is None:
            missing.append("`Load weight begin … avail mem` (P)")
        if not a_candidates:
            missing.append("`Load weight end … avail mem` (A)")
        c.reasons.append(f"the identity cannot be checked: the log lacks {' and '.join(missing)}")
        if p is None and a_target is not None and f < 1:
            budget = n * cell / GIB
            p = (a_target - budget) / (1 - f)
            c.reasons.append(f"P derived from the pool instead: (A − N·cell)/(1 − f) ≈ {p:.2f} GiB (less precise)")
            c.confidence = "low"
        elif p is None and not others:
            c.low("without P (free memory before the weights) the tokens per unit of fraction are unknown")

    slope: float | None = p
    basis = "calibrated"
    # --- two-point ----------------------------------------------------------------------------
    best: tuple[float, Boot, int] | None = None
    for o in others:
        fo, no = _boot_fraction(o), _boot_tokens(o)
        if fo is None or no is None or abs(fo - f) < 1e-6:
            continue
        if best is None or abs(fo - f) > abs(best[0] - f):
            best = (fo, o, no)
    if best is not None:
        fo, o, no = best
        slope_tokens = (n - no) / (f - fo)
        measured = slope_tokens * sizer / GIB
        if slope_tokens > 0:
            if slope is not None and abs(measured - slope) > 0.02 * slope:
                c.reasons.append(
                    f"the two boots' slope ({slope_tokens:,.0f} tokens per 1.0 of fraction) differs from P/cell by "
                    f"{abs(measured / slope - 1) * 100:.1f}%: using the measured one"
                )
            slope = measured
            basis = "two-point"
            c.explain.append(
                f"two-point: {no:,} tokens at f={_frac(fo)} and {n:,} at f={_frac(f)} → "
                f"{slope_tokens * 0.01:,.0f} tokens per +0.01 (slope {measured:.2f} GiB per 1.0 of fraction)"
            )

    # --- pool end, graphs, requests --------------------------------------------------------------
    pool_ends = [
        x
        for x in (m.avail_after_pool_gib, facts.get("avail_after_pool_gib"), dfacts.get("avail_after_pool_gib"))
        if x is not None
    ]
    pool_end = min(pool_ends) if pool_ends else None
    if pool_end is None and a_used is not None:
        pool_end = (
            a_used - (n + page) * cell / GIB - (draft_n + page) * draft_cell / GIB
            if draft_cell
            else a_used - (n + page) * cell / GIB
        )
        c.reasons.append("no `Memory pool end` line: memory after the pool estimated as A − pool")
    target_ends = [x for x in (m.avail_after_pool_gib, facts.get("avail_after_pool_gib")) if x is not None]
    target_end = min(target_ends) if target_ends else (pool_end if not draft_cell else None)
    graph = _graph_model_sglang(boot, pool_end, c)
    cgmb = _as_int(flags.get("cuda_graph_max_bs"))
    if graph is None:
        why = (
            "capture has not finished yet" if boot.status is BootStatus.STARTING else "the log shows no capture memory"
        )
        graph = _estimated_graph(cgmb or (max(boot.capture_bs) if boot.capture_bs else None), c, why)
    # a sibling boot that finished capture measures the need better than an OOM estimate
    if graph.source in ("capture-oom", "estimated"):
        for o in others:
            if o.status is BootStatus.READY:
                og = _graph_model_sglang(o, _pool_end_of(o), _Cal())
                if og is not None and og.source == "observed" and og.bs:
                    graph = replace(og, source="other-boot", note=f"capture need measured on a sibling boot: {og.note}")
                    c.reasons.append(
                        "capture need taken from a sibling boot of the same deployment that finished capture"
                    )
                    break
    mrr_flag = _as_int(flags.get("max_running_requests"))
    mrr_eff = _as_int(m.max_running_requests) or _as_int(facts.get("max_running_requests"))
    ctx = _as_int(m.context_len) or _as_int(facts.get("context_len")) or _as_int(flags.get("context_length"))
    chunk = _as_int(facts.get("chunked_prefill_size")) or _as_int(flags.get("chunked_prefill_size"))
    total_gpu = (
        gpu_mem_gib or facts.get("gpu_total_gib") or facts.get("oom_capacity_gib") or _from_text(boot, _CAPACITY_RE)
    )
    tp_scales = not (is_dsv4 or kv_dtype.startswith("fp8_ds") or _looks_mla(flags, cell, tp))
    if boot.status is BootStatus.READY:
        hint = "ready"
    elif boot.failure is not None:
        hint = boot.failure.kind.value
    else:
        hint = boot.status.value
    if boot.failure is not None and boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE:
        c.reasons.append(f"this boot died in CUDA-graph capture at {fraction_flag(boot.engine)}={_frac(f)}")

    return MemoryModel(
        engine=Engine.SGLANG,
        basis=basis,
        confidence=c.confidence,
        fraction=f,
        tokens=n,
        tokens_raw=tokens_raw,
        page_size=page,
        cell_bytes=cell,
        sizing_cell_bytes=sizer,
        slope_gib=slope,
        pre_load_gib=p,
        after_load_gib=a_used,
        weights_gib=weights,
        bias_gib=bias,
        max_total_tokens=cap,
        kv_cache_gib=kv_gib,
        avail_after_pool_gib=pool_end,
        target_pool_end_gib=target_end,
        graph=graph,
        graph_mem_gib=m.graph_mem_gib if m.graph_mem_gib is not None else facts.get("graph_mem_gib"),
        max_running_requests=mrr_flag,
        running_requests=mrr_eff,
        context_len=ctx,
        chunked_prefill_size=chunk,
        cuda_graph_max_bs=cgmb,
        kv_cache_dtype=kv_dtype,
        kv_elem_bytes=_dtype_bytes(kv_dtype, model_bytes),
        model_elem_bytes=model_bytes,
        tp=tp,
        tp_scales_cell=tp_scales,
        draft_cell_bytes=draft_cell,
        gpu_mem_gib=total_gpu,
        speculative=spec,
        disable_cuda_graph=flags.get("disable_cuda_graph") is True,
        version_hint=boot.version_hint,
        identity=identity,
        observed_verdict_hint=hint,
        reasons=tuple(c.reasons),
        explain=tuple(c.explain),
        flags=dict(flags),
    )


def _pool_end_of(boot: Boot) -> float | None:
    vals = [
        x
        for x in (
            boot.metrics.avail_after_pool_gib,
            boot.facts.get("avail_after_pool_gib"),
            boot.draft_facts.get("avail_after_pool_gib"),
        )
        if x is not None
    ]
    return min(vals) if vals else None


def _looks_mla(flags: Mapping[str, object], cell: int, tp: int) -> bool:
    """MLA latents are not split by TP: (512+64)·L·bytes cells (DeepSeek/Kimi) or DSA's 656/788·L."""
    name = str(flags.get("model_path") or flags.get("model") or "").lower()
    if any(k in name for k in ("deepseek", "kimi", "glm-5", "mla")):
        return True
    return any(cell % per == 0 and 20 <= cell // per <= 128 for per in (576 * 2, 576, 656, 788))


# ---------------------------------------------------------------------------------------------
# vLLM calibration
# ---------------------------------------------------------------------------------------------


def _calibrate_vllm(boot: Boot, *, gpu_mem_gib: float | None, others: Sequence[Boot]) -> MemoryModel:
    c = _Cal()
    flags, m, facts = boot.flags, boot.metrics, boot.facts
    u = _as_float(flags.get("gpu_memory_utilization"))
    if u is None:
        u = 0.9
        c.reasons.append("gpu_memory_utilization not in the non-default args: vLLM's default 0.9")
    kv = m.kv_cache_gib if m.kv_cache_gib is not None else facts.get("kv_cache_gib")
    n = _boot_tokens(boot)
    block = _as_int(flags.get("block_size")) or 16
    ctx = _as_int(m.context_len) or _as_int(facts.get("context_len")) or _as_int(flags.get("max_model_len"))
    if kv is None:
        raise _never_sized(boot)
    if kv <= 0:
        raise CalcError(
            f"this boot had no memory for the KV cache (Available KV cache memory: {kv:.2f} GiB): the weights and "
            "activations already exceed the budget; raise gpu_memory_utilization or use --model for an estimate",
            "input",
        )
    if n is None:
        needed = facts.get("kv_needed_gib")
        if needed is None or not ctx:
            raise _never_sized(boot)
        bpt_f = needed * GIB / ctx
        n_raw = kv * GIB / bpt_f
        n = floor_page(n_raw, block)
        c.reasons.append(
            f"no `GPU KV cache size` line: bytes per token from the error ({needed:.2f} GiB needed for {ctx:,} tokens)"
        )
    # newer builds report max_concurrency·max_model_len, which is not block-aligned
    block_eff = 1 if n % block != 0 else block
    lo = (kv - _PRINT_EPS) * GIB / (n + block_eff)
    hi = (kv + _PRINT_EPS) * GIB / max(1, n)
    bpt = _snap_cell(lo, hi)
    raw = kv * GIB / bpt
    tokens_raw = min(max(raw, float(n)), float(n + block_eff - 1))
    total = gpu_mem_gib or facts.get("gpu_total_gib") or facts.get("oom_capacity_gib")
    basis = "calibrated"
    c.explain.append(f"bytes per token = {kv:.2f} GiB × 2^30 / {n:,} tokens ≈ {bpt:,} B per rank (block {block})")
    # two-point: the device total from two utilizations
    best: tuple[float, float] | None = None
    for o in others:
        uo = _as_float(o.flags.get("gpu_memory_utilization")) or 0.9
        ko = o.metrics.kv_cache_gib if o.metrics.kv_cache_gib is not None else o.facts.get("kv_cache_gib")
        if ko is None or abs(uo - u) < 1e-6:
            continue
        if best is None or abs(uo - u) > abs(best[0] - u):
            best = (uo, ko)
    if best is not None:
        uo, ko = best
        measured = (kv - ko) / (u - uo)
        if measured > 0:
            if total is not None and abs(measured - total) > 0.02 * total:
                c.reasons.append(
                    f"the two boots imply {measured:.2f} GiB per 1.0 of utilization, not the device's {total:.2f} GiB: "
                    "using the measured slope"
                )
            c.explain.append(
                f"two-point: {ko:.2f} GiB KV at u={_frac(uo)} and {kv:.2f} GiB at u={_frac(u)} → "
                f"{measured:.2f} GiB per 1.0 of utilization (the device total)"
            )
            if total is None:
                total = measured
            basis = "two-point"
            slope: float | None = measured
        else:
            slope = total
    else:
        slope = total
    if total is None:
        c.reasons.append(
            "device total unknown (pass --gpu-mem-gib): other utilizations and the graph headroom cannot be sized"
        )
    c.explain.insert(
        0, f"kv(u) = {kv:.2f} GiB at u = {_frac(u)}" + (f"; device total {total:.2f} GiB" if total else "")
    )
    graph_mem = m.graph_mem_gib if m.graph_mem_gib is not None else facts.get("graph_mem_gib")
    graph: GraphModel | None = None
    if graph_mem is not None:
        graph = GraphModel(need_gib=graph_mem, source="observed", note=f"graphs took {graph_mem:.2f} GiB")
    elif boot.failure is not None and boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE:
        if total is not None:
            tried = facts.get("oom_tried_gib") or _from_text(boot, _TRIED_RE) or 0.5
            need = tried + total * (1 - u)
            graph = GraphModel(
                need_gib=need,
                source="capture-oom",
                note=f"capture died: it needed more than the {need - tried:.2f} GiB outside the budget",
            )
            c.explain.append(
                f"capture died at u={_frac(u)}: it needs more than total × (1 − u) = {need - tried:.2f} GiB, plus the "
                f"{tried:.2f} GiB it tried to allocate → ≈ {need:.2f} GiB"
            )
    else:
        graph = GraphModel(need_gib=0.5, source="estimated", note="graph memory not printed")
        c.reasons.append("the log shows no CUDA-graph memory: capture need assumed 0.50 GiB")
    vt = _version_tuple(boot.version_hint)
    in_budget = vt is not None and vt >= (0, 21)
    weights = m.weights_gib if m.weights_gib is not None else facts.get("weights_gib")
    kv_dtype = str(flags.get("kv_cache_dtype") or "auto")
    hint = (
        "ready" if boot.status is BootStatus.READY else (boot.failure.kind.value if boot.failure else boot.status.value)
    )
    return MemoryModel(
        engine=Engine.VLLM,
        basis=basis,
        confidence=c.confidence,
        fraction=u,
        tokens=n,
        tokens_raw=tokens_raw,
        page_size=block_eff,
        cell_bytes=bpt,
        sizing_cell_bytes=bpt,
        slope_gib=slope,
        weights_gib=weights,
        max_total_tokens=(_as_int(flags.get("num_gpu_blocks_override")) or 0) * block or None,
        kv_cache_gib=kv,
        avail_after_pool_gib=total * (1 - u) if total else None,
        graph=graph,
        graph_mem_gib=graph_mem,
        max_running_requests=_as_int(flags.get("max_num_seqs")),
        running_requests=_as_int(flags.get("max_num_seqs")),
        context_len=ctx,
        chunked_prefill_size=_as_int(flags.get("max_num_batched_tokens")),
        cuda_graph_max_bs=_as_int(flags.get("max_cudagraph_capture_size")),
        kv_cache_dtype=kv_dtype,
        kv_elem_bytes=_dtype_bytes(kv_dtype, _model_dtype_bytes(flags)),
        model_elem_bytes=_model_dtype_bytes(flags),
        tp=_as_int(flags.get("tensor_parallel_size")) or 1,
        tp_scales_cell=True,
        gpu_mem_gib=total,
        free_at_start_gib=facts.get("gpu_free_gib"),
        graphs_in_budget=in_budget,
        version_hint=boot.version_hint,
        identity=IdentityCheck(True, "vllm"),
        observed_verdict_hint=hint,
        reasons=tuple(c.reasons),
        explain=tuple(c.explain),
        flags=dict(flags),
        cpu_mem_gib=facts.get("cpu_mem_total_gib"),
    )


# ---------------------------------------------------------------------------------------------
# From a model config.json
# ---------------------------------------------------------------------------------------------


def _cfg_int(cfg: Mapping[str, object], *keys: str) -> int | None:
    for k in keys:
        v = _as_int(cfg.get(k))
        if v is not None:
            return v
    return None


def _config_cell(
    cfg: Mapping[str, object], *, tp: int, kv_bytes: float, swa_ratio: float = 0.8
) -> tuple[int, str, bool]:
    """(cell bytes per token per rank, what kind, scales with tp) from a HF ``config.json``."""
    layers = _cfg_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    if not layers or layers < 1:
        raise CalcError("config.json: num_hidden_layers missing (expected a whole number ≥ 1)", "input")
    kv_lora = _cfg_int(cfg, "kv_lora_rank")
    if kv_lora:
        rope = _cfg_int(cfg, "qk_rope_head_dim") or 64
        index_dim = _cfg_int(cfg, "index_head_dim")
        if index_dim:
            indexer = index_dim + index_dim // 128 * 4
            per = (kv_lora + kv_lora // 128 * 4 + rope * 2) if kv_bytes == 1 else (kv_lora + rope) * kv_bytes
            return round((per + indexer) * layers), "dsa", False
        return round((kv_lora + rope) * layers * kv_bytes), "mla", False
    heads = _cfg_int(cfg, "num_attention_heads", "n_head")
    kv_heads = _cfg_int(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    hidden = _cfg_int(cfg, "hidden_size", "n_embd", "d_model")
    head_dim = _cfg_int(cfg, "head_dim") or (hidden // heads if hidden and heads else None)
    if not kv_heads or not head_dim:
        raise CalcError(
            "config.json: cannot tell the KV geometry (expected num_key_value_heads/num_attention_heads and "
            "head_dim or hidden_size, or kv_lora_rank for MLA)",
            "input",
        )
    v_head = _cfg_int(cfg, "v_head_dim") or head_dim
    heads_rank = max(1, kv_heads // tp)
    per_layer = heads_rank * (head_dim + v_head) * kv_bytes
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        n_swa = sum(1 for t in layer_types if "sliding" in str(t))
        n_full = len(layer_types) - n_swa
        if n_swa and n_full:
            return round(per_layer * n_full + swa_ratio * per_layer * n_swa), "swa", True
    return round(per_layer * layers), "mha", True


def estimate_weights_gib(cfg: Mapping[str, object]) -> float | None:
    """Total weight bytes (GiB, all ranks) from a config: embeddings, attention, MLP/MoE."""
    hidden = _cfg_int(cfg, "hidden_size", "n_embd", "d_model")
    layers = _cfg_int(cfg, "num_hidden_layers", "n_layer")
    vocab = _cfg_int(cfg, "vocab_size")
    if not hidden or not layers or not vocab:
        return None
    heads = _cfg_int(cfg, "num_attention_heads") or 1
    kv_heads = _cfg_int(cfg, "num_key_value_heads") or heads
    head_dim = _cfg_int(cfg, "head_dim") or hidden // heads
    inter = _cfg_int(cfg, "intermediate_size") or 4 * hidden
    attn = hidden * head_dim * (heads * 2 + kv_heads * 2)
    experts = _cfg_int(cfg, "n_routed_experts", "num_local_experts", "num_experts")
    if experts:
        moe_inter = _cfg_int(cfg, "moe_intermediate_size") or inter
        shared = _cfg_int(cfg, "n_shared_experts") or 0
        dense_layers = _cfg_int(cfg, "first_k_dense_replace") or 0
        mlp = (layers - dense_layers) * 3 * hidden * moe_inter * (experts + shared) + dense_layers * 3 * hidden * inter
    else:
        mlp = layers * 3 * hidden * inter
    params = attn * layers + mlp + vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    bytes_per = 2.0
    q = cfg.get("quantization_config")
    if isinstance(q, Mapping):
        bits = _as_int(q.get("bits")) or _as_int(q.get("weight_bits"))
        method = str(q.get("quant_method") or "").lower()
        if bits:
            bytes_per = bits / 8
        elif "fp8" in method or "fp8" in str(q.get("fmt") or ""):
            bytes_per = 1.0
        elif "fp4" in method or "mxfp4" in method:
            bytes_per = 0.55
    elif str(cfg.get("torch_dtype") or "").lower() in ("float32",):
        bytes_per = 4.0
    return params * bytes_per / GIB


def from_config(
    config: Mapping[str, object],
    *,
    gpu_mem_gib: float,
    tp: int,
    weights_gib: float | None = None,
    engine: Engine = Engine.SGLANG,
    flags: Mapping[str, object] | None = None,
) -> MemoryModel:
    """A model of a deployment that has not booted yet, from its ``config.json``.

    ``weights_gib``: per rank (estimated from the config when None, which lowers confidence).
    ``flags``: the engine flags it will run with (engine names or aliases).
    """
    if gpu_mem_gib is None or not gpu_mem_gib > 0:
        raise CalcError(f"--gpu-mem-gib {gpu_mem_gib}: expected the GPU's memory in GiB, e.g. 79.2 for an 80 GB card")
    if tp < 1:
        raise CalcError(f"--tp {tp}: expected a whole number ≥ 1")
    if engine is Engine.UNKNOWN:
        engine = Engine.SGLANG
    cfg: Mapping[str, object] = config
    tc = config.get("text_config")
    if isinstance(tc, Mapping) and ("num_hidden_layers" in tc or "hidden_size" in tc):
        cfg = tc
    given = edits_from_mapping(engine, flags or {})
    c = _Cal()
    c.low("no boot observed yet: P (free memory after init), weights and graph memory are estimates")
    fr_present, fr = given.get("fraction")
    kvd_present, kvd = given.get("kv_dtype")
    kv_dtype = str(kvd) if kvd_present and kvd else "auto"
    model_bytes = 4.0 if str(cfg.get("torch_dtype") or cfg.get("dtype") or "").lower() == "float32" else 2.0
    kv_bytes = _dtype_bytes(kv_dtype, model_bytes)
    _, page_v = given.get("page")
    _, cap_v = given.get("token_cap")
    _, ctx_v = given.get("context")
    _, chunk_v = given.get("chunk")
    _, mrr_v = given.get("max_requests")
    _, gbs_v = given.get("graph_bs")
    cell, kind, tp_scales = _config_cell(cfg, tp=tp, kv_bytes=kv_bytes)
    if kind in ("dsa",):
        page = int(page_v) if isinstance(page_v, int) else 64
    else:
        page = int(page_v) if isinstance(page_v, int) else (16 if engine is Engine.VLLM else 1)
    ctx = int(ctx_v) if isinstance(ctx_v, int) else _cfg_int(cfg, "max_position_embeddings")
    tier_chunk, tier_bs = _sglang_tier(gpu_mem_gib, tp)
    chunk = int(chunk_v) if isinstance(chunk_v, int) else (8192 if engine is Engine.VLLM else tier_chunk)
    max_bs = int(gbs_v) if isinstance(gbs_v, int) else tier_bs
    if weights_gib is None:
        total_w = estimate_weights_gib(cfg)
        if total_w is None:
            raise CalcError(
                "config.json: cannot estimate the weights (hidden_size, num_hidden_layers, vocab_size); "
                "pass --weights-gib",
                "input",
            )
        weights_gib = total_w / tp
        c.reasons.append(f"weights estimated from the config: {weights_gib:.2f} GiB per rank (pass --weights-gib)")
    elif weights_gib < 0:
        raise CalcError(f"--weights-gib {weights_gib}: expected GiB per rank ≥ 0")
    init_overhead = 0.5 + 0.125 * tp
    p = gpu_mem_gib - init_overhead
    a = p - weights_gib
    c.explain.append(
        f"P ≈ {gpu_mem_gib:.2f} GiB − {init_overhead:.2f} GiB (CUDA context, NCCL, TP {tp}) = {p:.2f} GiB; "
        f"A = P − weights {weights_gib:.2f} = {a:.2f} GiB"
    )
    c.explain.append(f"cell = {cell:,} B per token per rank ({kind}, KV {kv_bytes:g} B per element, TP {tp})")
    graph_bs = extend_capture_bs([], max_bs)
    if engine is Engine.VLLM:
        u = float(fr) if fr_present and isinstance(fr, float) else 0.9
        act = activation_allowance_gib(chunk)
        kv = gpu_mem_gib * u - weights_gib - act - 0.5
        raw = max(0.0, kv) * GIB / cell
        n = floor_page(raw, page)
        c.explain.append(
            f"kv = total·u − weights − activations − non-torch = {gpu_mem_gib:.2f} × {_frac(u)} − {weights_gib:.2f} − "
            f"{act:.2f} − 0.50 = {kv:.2f} GiB → {n:,} tokens"
        )
        graph_need = 0.3 + max_bs * 2 / MIB_PER_GIB
        return MemoryModel(
            engine=engine,
            basis="config",
            confidence=c.confidence,
            fraction=u,
            tokens=max(n, 0),
            tokens_raw=max(raw, 0.0) if kv > 0 else kv * GIB / cell,
            page_size=page,
            cell_bytes=cell,
            sizing_cell_bytes=cell,
            slope_gib=gpu_mem_gib,
            weights_gib=weights_gib,
            max_total_tokens=int(cap_v) * page if isinstance(cap_v, int) else None,
            kv_cache_gib=kv,
            avail_after_pool_gib=gpu_mem_gib * (1 - u),
            graph=GraphModel(
                need_gib=graph_need,
                bs=tuple(graph_bs),
                per_graph_gib=0.0,
                per_bs_gib=(graph_need - 0.3) / max(1, sum(graph_bs)),
                fixed_gib=0.3,
                source="estimated",
            ),
            max_running_requests=int(mrr_v) if isinstance(mrr_v, int) else None,
            running_requests=int(mrr_v) if isinstance(mrr_v, int) else 256,
            context_len=ctx,
            chunked_prefill_size=chunk,
            cuda_graph_max_bs=max_bs,
            kv_cache_dtype=kv_dtype,
            kv_elem_bytes=kv_bytes,
            model_elem_bytes=model_bytes,
            tp=tp,
            tp_scales_cell=tp_scales,
            gpu_mem_gib=gpu_mem_gib,
            identity=IdentityCheck(False, "unchecked"),
            reasons=tuple(c.reasons),
            explain=tuple(c.explain),
            flags=dict(given.values),
        )
    if fr_present and isinstance(fr, float):
        f = fr
    else:
        f = default_mem_fraction(gpu_mem_gib, tp, chunk=chunk, max_bs=max_bs)
        c.reasons.append(
            f"mem_fraction_static not given: SGLang's default for a {gpu_mem_gib:.0f} GiB card is {_frac(f)}"
        )
    rest = a - p * (1 - f)
    raw = rest * GIB / cell
    cap = int(cap_v) if isinstance(cap_v, int) else None
    n = floor_page(min(raw, cap) if cap else raw, page)
    c.explain.append(
        f"rest = A − P·(1 − f) = {a:.2f} − {p:.2f} × (1 − {_frac(f)}) = {rest:.2f} GiB → {max(n, 0):,} tokens"
    )
    mrr = int(mrr_v) if isinstance(mrr_v, int) else None
    mrr_eff = mrr or default_running_requests(max(n, 0), ctx)
    req = _req_table_gib(mrr_eff, ctx)
    pool_end = a - max(0, n + page) * cell / GIB - req
    need = 0.5 + max_bs * 2 / MIB_PER_GIB
    gm = GraphModel(
        need_gib=need,
        bs=tuple(graph_bs),
        per_graph_gib=0.0,
        per_bs_gib=(need - 0.5) / max(1, sum(graph_bs)),
        fixed_gib=0.5,
        source="estimated",
    )
    c.reasons.append(f"capture need assumed {need:.2f} GiB (SGLang's own reserve: 2 MiB per batch size up to {max_bs})")
    return MemoryModel(
        engine=Engine.SGLANG,
        basis="config",
        confidence=c.confidence,
        fraction=f,
        tokens=max(n, 0),
        tokens_raw=raw,
        page_size=page,
        cell_bytes=cell,
        sizing_cell_bytes=cell,
        slope_gib=p,
        pre_load_gib=p,
        after_load_gib=a,
        weights_gib=weights_gib,
        max_total_tokens=cap,
        kv_cache_gib=max(0, n + page) * cell / GIB,
        avail_after_pool_gib=pool_end,
        target_pool_end_gib=pool_end,
        graph=gm,
        max_running_requests=mrr,
        running_requests=mrr_eff,
        context_len=ctx,
        chunked_prefill_size=chunk,
        cuda_graph_max_bs=max_bs,
        kv_cache_dtype=kv_dtype,
        kv_elem_bytes=kv_bytes,
        model_elem_bytes=model_bytes,
        tp=tp,
        tp_scales_cell=tp_scales,
        gpu_mem_gib=gpu_mem_gib,
        identity=IdentityCheck(False, "unchecked"),
        reasons=tuple(c.reasons),
        explain=tuple(c.explain),
        flags=dict(given.values),
    )


# ---------------------------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prediction:
    model: MemoryModel
    edits: Edits
    fraction: float
    tokens: int
    kv_cache_gib: float | None
    avail_after_pool_gib: float | None
    graph_need_gib: float | None
    graph_headroom_gib: float | None
    req_to_token_gib: float | None
    full_context_requests: float | None
    tokens_per_0_01: int | None
    min_fraction_for_full_context: float | None
    max_safe_fraction: float | None
    verdict: Verdict
    confidence: str
    reasons: list[str]
    explain: list[str]
    context_len: int | None = None
    running_requests: int | None = None
    full_context: int = 1
    margin_gib: float = DEFAULT_GRAPH_MARGIN_GIB
    activation_gib: float = 0.0

    def to_json(self) -> dict[str, object]:
        mdl = self.model
        ff = fraction_flag(mdl.engine)
        page_key = "block_size" if mdl.engine is Engine.VLLM else "page_size"

        def r(x: float | None, d: int = 3) -> float | None:
            return None if x is None else fmt.round_near(x, d)

        def down(x: float | None) -> float | None:  # a capacity or a largest safe value: never overstated
            return None if x is None else fmt.round_down(x, 3)

        def up(x: float | None) -> float | None:  # a smallest value needed: never understated
            return None if x is None else fmt.round_up(x, 3)

        return {
            "engine": mdl.engine.value,
            "basis": mdl.basis,
            "confidence": self.confidence,
            "observed": {
                ff: r(mdl.fraction),
                "max_total_num_tokens": mdl.tokens,
                "avail_after_pool_gib": r(mdl.avail_after_pool_gib),
                "graph_mem_gib": r(mdl.graph_mem_gib),
                "cell_bytes": mdl.cell_bytes,
                "sizing_cell_bytes": mdl.sizing_cell_bytes,
                page_key: mdl.page_size,
            },
            "edits": self.edits.to_json(),
            "predicted": {
                "max_total_num_tokens": self.tokens,
                "kv_cache_gib": r(self.kv_cache_gib),
                "avail_after_pool_gib": r(self.avail_after_pool_gib),
                "graph_headroom_gib": r(self.graph_headroom_gib),
                "req_to_token_gib": r(self.req_to_token_gib, 4),
                "full_context_requests": down(self.full_context_requests),
                "tokens_per_0_01": self.tokens_per_0_01,
            },
            "min_mem_fraction_for_full_context": up(self.min_fraction_for_full_context),
            "max_safe_fraction": down(self.max_safe_fraction),
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "explain": list(self.explain),
        }


@dataclass(slots=True)
class _Settings:
    fraction: float
    context_len: int | None
    mrr_explicit: int | None
    mrr_unset: bool
    graph_max_bs: int | None
    graph_bs_edited: bool
    kv_dtype: str
    page: int
    cap: int | None
    chunk: int | None
    tp: int
    kv_space_gib: float | None = None  # vLLM CPU: the pool is VLLM_CPU_KVCACHE_SPACE GiB


@dataclass(slots=True)
class _Eval:
    tokens: int
    budget_gib: float
    kv_gib: float
    pool_end: float | None
    need: float | None
    headroom: float | None
    req_gib: float
    mrr: int | None
    full_ctx: float | None
    verdict: Verdict
    reasons: list[str]
    explain: list[str]
    cell_s: float
    cell_a: float
    over_top: bool = False  # too little headroom (or, vLLM, more than was free at start): rises with f


def _resolve(model: MemoryModel, edits: Edits, notes: list[str], lows: list[str]) -> _Settings:
    eng = model.engine
    present, val = edits.get("fraction")
    f = model.fraction
    if present:
        if val is None:
            if eng is Engine.VLLM:
                f = 0.9
            else:
                if model.gpu_mem_gib is None:
                    raise CalcError(
                        f"--unset {fraction_flag(eng)}: SGLang's default depends on the GPU's memory; "
                        "pass --gpu-mem-gib"
                    )
                f = default_mem_fraction(
                    model.gpu_mem_gib,
                    model.tp,
                    chunk=model.chunked_prefill_size,
                    max_bs=model.cuda_graph_max_bs,
                    speculative=model.speculative,
                )
                notes.append(f"{fraction_flag(eng)} unset: SGLang's default for this card is {_frac(f)}")
        else:
            f = float(val)  # type: ignore[arg-type]
    ctx = model.context_len
    p_ctx, v_ctx = edits.get("context")
    if p_ctx:
        if v_ctx is None:
            lows.append("context length unset: the model's default context is not in the log; keeping the current one")
        else:
            ctx = int(v_ctx)  # type: ignore[call-overload]
    p_mrr, v_mrr = edits.get("max_requests")
    mrr_explicit = model.max_running_requests
    mrr_unset = False
    if p_mrr:
        if v_mrr is None:
            mrr_explicit, mrr_unset = None, True
        else:
            mrr_explicit = int(v_mrr)  # type: ignore[call-overload]
    p_gbs, v_gbs = edits.get("graph_bs")
    gbs = model.cuda_graph_max_bs
    if p_gbs:
        gbs = None if v_gbs is None else int(v_gbs)  # type: ignore[call-overload]
        if v_gbs is None and model.gpu_mem_gib is not None:
            gbs = _sglang_tier(model.gpu_mem_gib, model.tp)[1]
    p_dt, v_dt = edits.get("kv_dtype")
    kv_dtype = model.kv_cache_dtype if not p_dt else ("auto" if v_dt is None else str(v_dt))
    p_pg, v_pg = edits.get("page")
    page = model.page_size if not p_pg else (1 if v_pg is None else int(v_pg))  # type: ignore[call-overload]
    if eng is Engine.VLLM and p_pg and v_pg is None:
        page = 16
    p_cap, v_cap = edits.get("token_cap")
    cap = model.max_total_tokens
    if p_cap:
        cap = None if v_cap is None else int(v_cap) * (page if eng is Engine.VLLM else 1)  # type: ignore[call-overload]
    p_ch, v_ch = edits.get("chunk")
    chunk = model.chunked_prefill_size
    if p_ch:
        chunk = None if v_ch is None else int(v_ch)  # type: ignore[call-overload]
    p_tp, v_tp = edits.get("tp")
    tp = model.tp
    if p_tp:
        tp = 1 if v_tp is None else int(v_tp)  # type: ignore[call-overload]
    p_cpu, v_cpu = edits.get("cpu_kv_space") if eng is Engine.VLLM else (False, None)
    if p_cpu and model.cpu_mem_gib is None:
        lows.append("VLLM_CPU_KVCACHE_SPACE sizes only vLLM's CPU backend, and this boot did not run on it: "
                    "its effect is not included")
        p_cpu = False
    if p_cpu and v_cpu is None:
        _parse_value(eng, CPU_KV_SPACE, None)  # says why it cannot be predicted
    kv_space = float(v_cpu) if p_cpu and v_cpu is not None else None  # type: ignore[arg-type]
    return _Settings(f, ctx, mrr_explicit, mrr_unset, gbs, p_gbs, kv_dtype, page, cap, chunk, tp, kv_space)


def _cell_ratio(model: MemoryModel, s: _Settings, lows: list[str]) -> float:
    ratio = 1.0
    if s.kv_dtype != model.kv_cache_dtype:
        new_b = _dtype_bytes(s.kv_dtype, model.model_elem_bytes)
        old_b = model.kv_elem_bytes
        ratio *= new_b / old_b
        identity = model.identity.hypothesis if model.identity else ""
        if (
            identity == "dsa-fp8-sizing"
            or model.kv_cache_dtype.startswith("fp8_ds")
            or s.kv_dtype.startswith("fp4")
            or model.kv_cache_dtype.startswith("fp4")
        ):
            lows.append(
                f"kv_cache_dtype {model.kv_cache_dtype} → {s.kv_dtype}: this cell layout does not scale with the "
                "element size exactly (scales, DSA indexer); estimate"
            )
    if s.tp != model.tp:
        if model.tp_scales_cell:
            ratio *= model.tp / s.tp
        lows.append(
            f"TP {model.tp} → {s.tp}: weights per rank and KV heads per rank are rescaled by the TP ratio "
            "(replicated KV heads, NCCL buffers and P are not modelled); estimate"
        )
    return ratio


def _evaluate(
    model: MemoryModel, s: _Settings, k: int, margin: float, lows: list[str], *, with_explain: bool = True
) -> _Eval:
    eng = model.engine
    reasons: list[str] = []
    explain: list[str] = []
    ratio = _cell_ratio(model, s, [] if not with_explain else lows)
    cell_s = model.sizing_cell_bytes * ratio
    cell_a = model.cell_bytes * ratio
    draft = model.draft_cell_bytes * ratio
    d_weights = 0.0
    if s.tp != model.tp and model.weights_gib:
        d_weights = model.weights_gib * (1 - model.tp / s.tp)  # freed per rank when TP grows
    df = s.fraction - model.fraction
    if abs(df) > 1e-12 and model.slope_gib is None:
        raise CalcError(
            f"cannot predict {fraction_flag(eng)}={_frac(s.fraction)}: "
            + (
                "the device's total memory is unknown (pass --gpu-mem-gib)"
                if eng is Engine.VLLM
                else "the log lacks `Load weight begin … avail mem` (P) and no second boot gives the slope"
            )
        )
    slope = model.slope_gib or 0.0
    budget0 = model.tokens_raw * model.sizing_cell_bytes / GIB
    d_act = 0.0
    if eng is Engine.VLLM and s.chunk != model.chunked_prefill_size:
        # vLLM profiles the activation peak of a max_num_batched_tokens batch inside its budget
        d_act = activation_allowance_gib(s.chunk) - activation_allowance_gib(model.chunked_prefill_size)
        if with_explain:
            lows.append(
                f"max_num_batched_tokens {model.chunked_prefill_size or 'default'} → {s.chunk or 'default'}: the "
                f"profiled activation peak changes by ≈ {d_act:+.2f} GiB (estimate)"
            )
    budget = budget0 + slope * df + d_weights - d_act
    if s.kv_space_gib is not None:  # vLLM CPU: the pool is what VLLM_CPU_KVCACHE_SPACE says
        budget = s.kv_space_gib
        if with_explain:
            explain.append(f"CPU KV pool = VLLM_CPU_KVCACHE_SPACE = {s.kv_space_gib:g} GiB (the fraction does not "
                           f"size it); the observed boot's {budget0:.2f} GiB held {model.tokens:,} tokens")
    raw = budget * GIB / cell_s if cell_s > 0 else 0.0
    capped = s.cap is not None and raw > s.cap
    tokens = floor_page(min(raw, float(s.cap)) if s.cap is not None else raw, s.page)
    tokens = max(tokens, 0) if budget > 0 else 0
    if with_explain and s.kv_space_gib is not None:
        explain.append(f"N = floor_page({budget:.2f} GiB × 2^30 / {cell_s:,.0f} B, page {s.page}) = {tokens:,} tokens")
    elif with_explain:
        sym = "P" if eng is Engine.SGLANG else "total"
        if model.basis == "two-point":
            sym = "slope"
        move = (
            f" + {sym} {slope:.2f} × ({_frac(s.fraction)} − {_frac(model.fraction)})"
            if model.slope_gib is not None
            else ""
        )
        explain.append(
            f"N({_frac(s.fraction)}) = floor_page(({budget0:.2f} GiB{move}"
            + (f" + {d_weights:.2f} GiB weights freed" if d_weights else "")
            + (f" − {d_act:.2f} GiB activations" if d_act else "")
            + f") × 2^30 / {cell_s:,.0f} B, page {s.page}) = {tokens:,} tokens"
            + (f" (capped at {s.cap:,})" if capped else "")
        )
    kv_gib = (tokens + (s.page if eng is Engine.SGLANG else 0)) * cell_a / GIB if tokens > 0 else 0.0
    if eng is Engine.VLLM:
        kv_gib = max(budget, 0.0)
    # --- requests, context --------------------------------------------------------------------
    ctx = s.context_len
    mrr: int | None
    if s.mrr_explicit is not None:
        mrr = s.mrr_explicit
    elif not s.mrr_unset and model.running_requests is not None and tokens == model.tokens and ctx == model.context_len:
        mrr = model.running_requests
    elif eng is Engine.SGLANG:
        mrr = default_running_requests(tokens, ctx)
    else:
        mrr = model.running_requests
    req_gib = _req_table_gib(mrr, ctx, model.req_extra_tokens) if eng is Engine.SGLANG else 0.0
    full_ctx = tokens / ctx if ctx else None
    # --- memory after the pools and capture -------------------------------------------------
    pool_end: float | None = None
    target_end: float | None = None  # SGLang: free right after the target's KV pool and request table
    pools_gib: tuple[float, float] | None = None  # SGLang: (target KV, req_to_token) allocated, GiB
    need: float | None = None
    headroom: float | None = None
    graph_bs: list[int] | None = None
    if model.graph is not None and model.graph.bs:
        limit = min(x for x in (s.graph_max_bs, mrr, 1 << 30) if x)
        base = list(model.graph.bs)
        graph_bs = [b for b in base if b <= limit]
        if s.graph_bs_edited and s.graph_max_bs and s.graph_max_bs > max(base) and limit > max(base):
            graph_bs = extend_capture_bs(base, limit)
            reasons.append(f"graph memory for batch sizes above {max(base)} is extrapolated from the observed ones")
    if model.graph is not None:
        need = 0.0 if model.disable_cuda_graph else model.graph.need_for(graph_bs)
    if eng is Engine.SGLANG:
        if model.avail_after_pool_gib is not None:
            obs_alloc = (model.tokens + model.page_size) * model.cell_bytes / GIB
            obs_draft = (model.tokens + model.page_size) * model.draft_cell_bytes / GIB
            obs_req = _req_table_gib(
                model.running_requests or default_running_requests(model.tokens, model.context_len),
                model.context_len,
                model.req_extra_tokens,
            )
            new_alloc = (tokens + s.page) * cell_a / GIB if tokens > 0 else 0.0
            new_draft = (tokens + s.page) * draft / GIB if tokens > 0 else 0.0
            pool_end = (
                model.avail_after_pool_gib
                - (new_alloc - obs_alloc)
                - (new_draft - obs_draft)
                - (req_gib - obs_req)
                + d_weights
            )
            pools_gib = (new_alloc, req_gib)
            if model.target_pool_end_gib is not None:
                target_end = model.target_pool_end_gib - (new_alloc - obs_alloc) - (req_gib - obs_req) + d_weights
            if with_explain:
                explain.append(
                    f"after the pools = {model.avail_after_pool_gib:.2f} − (KV {new_alloc:.2f} − {obs_alloc:.2f})"
                    + (f" − (draft KV {new_draft:.2f} − {obs_draft:.2f})" if model.draft_cell_bytes else "")
                    + f" − (req_to_token {req_gib:.2f} − {obs_req:.2f})"
                    + (f" + {d_weights:.2f} weights freed" if d_weights else "")
                    + f" = {pool_end:.2f} GiB"
                )
    else:
        total = model.gpu_mem_gib
        if total is not None:
            pool_end = total * (1 - s.fraction)
            if with_explain:
                explain.append(
                    f"outside vLLM's budget = total × (1 − u) = {total:.2f} × {1 - s.fraction:.3f} = {pool_end:.2f} GiB"
                )
    act = activation_allowance_gib(s.chunk)
    if pool_end is not None and need is not None:
        headroom = pool_end if eng is Engine.VLLM and model.graphs_in_budget else pool_end - need
        if with_explain:
            explain.append(
                f"graph headroom = {pool_end:.2f} − capture need {need:.2f}"
                + (f" ({len(graph_bs)} batch sizes up to {max(graph_bs)})" if graph_bs else "")
                + f" = {headroom:.2f} GiB (oom_risk below {margin:.2f}, tight below {margin + act:.2f}: "
                f"margin + activations for a {s.chunk or DEFAULT_CHUNK:,}-token chunk)"
            )
    if with_explain:
        kv_line = f"KV pool = {kv_gib:.2f} GiB per rank"
        if eng is Engine.SGLANG and tokens > 0:
            kv_line = f"KV pool = ({tokens:,} + {s.page}) × {cell_a:,.0f} B = {kv_gib:.2f} GiB per rank"
        explain.append(kv_line)
        if eng is Engine.SGLANG and mrr and ctx:
            explain.append(
                f"req_to_token = {mrr:,} requests × ({ctx:,} + {model.req_extra_tokens}) × 4 B = {req_gib:.3f} GiB "
                f"({req_gib * 1024:,.1f} MiB)"
            )
        if full_ctx is not None:
            explain.append(f"full-context requests = {tokens:,} / {ctx:,} = {fmt.capacity(full_ctx)}")
    # --- verdict ------------------------------------------------------------------------------
    verdict = Verdict.OK
    fname = fraction_flag(eng)
    if budget <= 0 or tokens <= 0:
        verdict = Verdict.NO_FIT
        if eng is Engine.SGLANG:
            reasons.append(
                f"the pool budget is {budget:.2f} GiB at {fname}={_frac(s.fraction)}: SGLang stops with "
                "`Not enough memory. Please try to increase --mem-fraction-static.`"
            )
        else:
            reasons.append(
                f"no memory left for the KV cache at {fname}={_frac(s.fraction)} ({budget:.2f} GiB): vLLM stops "
                "with `No available memory for the cache blocks`"
            )
    elif s.kv_space_gib is not None and model.cpu_mem_gib is not None and s.kv_space_gib > model.cpu_mem_gib:
        verdict = Verdict.NO_FIT
        reasons.append(
            f"VLLM_CPU_KVCACHE_SPACE={s.kv_space_gib:g} GiB is more than the node's {model.cpu_mem_gib:.2f} GiB: vLLM "
            "refuses to start (`Available memory on node … is less than requested memory for kv`)"
        )
    elif eng is Engine.SGLANG and target_end is not None and target_end < 0:
        verdict = Verdict.NO_FIT
        reasons.append(_no_room_for_pools(model, s, target_end, pools_gib, mrr, ctx))
    elif eng is Engine.VLLM and ctx and tokens < ctx:
        verdict = Verdict.NO_FIT
        reasons.append(
            f"one full-context request ({ctx:,} tokens) does not fit in {tokens:,} tokens: vLLM refuses "
            "to start (`To serve at least one request with the model's max seq len …`)"
        )
    elif (
        eng is Engine.VLLM
        and model.free_at_start_gib is not None
        and model.gpu_mem_gib is not None
        and model.gpu_mem_gib * s.fraction > model.free_at_start_gib
    ):
        verdict = Verdict.NO_FIT
        reasons.append(
            f"vLLM wants {model.gpu_mem_gib * s.fraction:.2f} GiB but only {model.free_at_start_gib:.2f} GiB "
            "was free at start (`Free memory on device … is less than desired`)"
        )
    else:
        if headroom is not None and headroom < 0:
            verdict = Verdict.OOM_RISK
            reasons.append(
                f"CUDA-graph capture needs ≈ {fmt.gib(need)} but only {fmt.gib(pool_end)} is free after the pools: "
                "likely death in CUDA-graph capture"
            )
        elif headroom is not None and headroom < margin:
            verdict = Verdict.OOM_RISK
            reasons.append(
                f"only {fmt.gib(headroom)} would be left after capture (needs ≈ {fmt.gib(need)} from "
                f"{fmt.gib(pool_end)}) — below the {fmt.gib(margin)} margin: likely death in CUDA-graph capture"
            )
        elif headroom is not None and headroom < margin + act:
            verdict = Verdict.TIGHT
            reasons.append(
                f"{headroom:.2f} GiB left after capture: it should boot, but with less than the "
                f"{margin + act:.2f} GiB wanted for the margin and a prefill chunk's activations"
            )
        if full_ctx is not None and full_ctx < k:
            if verdict is Verdict.OK:
                verdict = Verdict.TIGHT
            reasons.append(
                f"{tokens:,} tokens hold {fmt.capacity(full_ctx)} full-context requests of {ctx:,} tokens, "
                f"fewer than the {k} wanted"
                + (" (a single one does not fit: it boots, but such a request cannot run)" if full_ctx < 1 else "")
            )
        if (
            headroom is None
            and model.observed_verdict_hint == FailureKind.OOM_GRAPH_CAPTURE.value
            and s.fraction >= model.fraction - 1e-9
        ):
            verdict = Verdict.OOM_RISK
            reasons.append(
                f"the boot died in CUDA-graph capture at {fname}={_frac(model.fraction)} and the headroom cannot be "
                f"sized here: at {_frac(s.fraction)} it would die again"
            )
        if headroom is None and eng is Engine.VLLM and model.gpu_mem_gib is None and s.kv_space_gib is None:
            reasons.append("graph headroom not checked: the device total is unknown (pass --gpu-mem-gib)")
    over_top = (headroom is not None and headroom < margin + act) or (
        eng is Engine.VLLM
        and model.free_at_start_gib is not None
        and model.gpu_mem_gib is not None
        and model.gpu_mem_gib * s.fraction > model.free_at_start_gib
    )
    return _Eval(
        tokens,
        budget,
        kv_gib,
        pool_end,
        need,
        headroom,
        req_gib,
        mrr,
        full_ctx,
        verdict,
        reasons,
        explain,
        cell_s,
        cell_a,
        over_top,
    )


def _no_room_for_pools(
    model: MemoryModel,
    s: _Settings,
    pool_end: float,
    pools_gib: tuple[float, float] | None,
    mrr: int | None,
    ctx: int | None,
) -> str:
    """Why an SGLang setting whose pools outgrow the memory left after the weights cannot boot."""
    fname = fraction_flag(model.engine)
    kv, req = pools_gib if pools_gib is not None else (None, None)
    parts = []
    if kv is not None:
        parts.append(f"the KV pool {fmt.gib(kv)}")
    if req is not None:
        table = f"the request table (req_to_token) {fmt.gib(req)}"
        if mrr and ctx:
            table += f" for {mrr:,} requests × {ctx + model.req_extra_tokens:,} tokens"
        parts.append(table)
    what = " and ".join(parts) if parts else "the pools"
    text = (
        f"the pools need {fmt.gib(-pool_end)} more than the weights leave free at {fname}="
        f"{fmt.fraction(s.fraction)}: {what} cannot all be allocated, so SGLang dies with CUDA out of memory "
        "while allocating them (kv_allocate), before the server starts"
    )
    if req is not None and kv is not None and req > -pool_end and req >= 0.5 * kv:
        text += "; the request table is what outgrows the GPU: lower context-length or max-running-requests"
    elif s.fraction > model.fraction:
        text += f"; lower {fname}"
    given_ctx = model.flags.get("context_length") if model.engine is Engine.SGLANG else None
    if ctx and model.context_len and ctx > model.context_len and given_ctx is None:
        text += (
            f"; and context-length {ctx:,} exceeds the model's own {model.context_len:,}, which SGLang refuses at "
            "start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
    return text


def _grid_search(lo: int, hi: int, good: Callable[[int], bool]) -> int | None:
    """Largest i in [lo, hi] with good(i), assuming good is True then False as i rises."""
    if lo > hi or not good(lo):
        return None
    if good(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if good(mid):
            lo = mid
        else:
            hi = mid
    return lo


def predict(
    model: MemoryModel,
    edits: Edits | Mapping[str, object] | None = None,
    *,
    full_context: int = 1,
    graph_margin_gib: float = DEFAULT_GRAPH_MARGIN_GIB,
) -> Prediction:
    """Predict the pool and the verdict for ``edits`` (engine flag names or aliases)."""
    if edits is None:
        edits = Edits(model.engine, {})
    elif not isinstance(edits, Edits):
        edits = edits_from_mapping(model.engine, edits)
    if full_context < 1:
        raise CalcError(f"--full-context {full_context}: expected a whole number ≥ 1")
    if graph_margin_gib < 0:
        raise CalcError(f"graph_margin_gib {graph_margin_gib}: expected GiB ≥ 0")
    lows: list[str] = []
    notes: list[str] = []
    s = _resolve(model, edits, notes, lows)
    for name in edits.unmodelled:
        lows.append(f"{name} is not modelled by the calculator: its effect on memory is not included")
    ev = _evaluate(model, s, full_context, graph_margin_gib, lows)

    def at(i: int) -> _Eval:
        return _evaluate(model, replace(s, fraction=i / 1000), full_context, graph_margin_gib, [], with_explain=False)

    tokens_per = None
    max_safe = None
    min_fc = None
    can_move = model.slope_gib is not None
    if can_move:
        tokens_per = round((model.slope_gib or 0.0) * 0.01 * GIB / ev.cell_s) if ev.cell_s else None

        def headroom_ok(i: int) -> bool:
            return not at(i).over_top

        top = 1000 if model.engine is Engine.VLLM else 999
        if s.context_len:
            need_tokens = full_context * s.context_len

            def fits(i: int) -> bool:
                return at(i).tokens < need_tokens

            below = _grid_search(1, top, fits)
            if below is None:
                min_fc = 0.001
            elif below < top:
                min_fc = (below + 1) / 1000
        hi_ok = _grid_search(1, top, headroom_ok)
        if hi_ok is not None:
            cand = at(hi_ok)
            max_safe = hi_ok / 1000 if cand.verdict is Verdict.OK else None
    reasons = notes + list(model.reasons) + ev.reasons + lows
    confidence = "low" if (model.confidence == "low" or lows) else "high"
    explain = list(model.explain) + ev.explain
    if tokens_per is not None:
        explain.append(f"tokens per +0.01 of {fraction_flag(model.engine)} = {tokens_per:,}")
    if max_safe is not None:
        explain.append(f"max safe {fraction_flag(model.engine)} (verdict ok) = {fmt.safe_max(max_safe)}")
    elif can_move:
        reasons.append(f"no {fraction_flag(model.engine)} gives an ok verdict with these flags")
    if min_fc is not None:
        explain.append(
            f"min {fraction_flag(model.engine)} for {full_context} full-context request"
            f"{'s' if full_context != 1 else ''} = {fmt.safe_min(min_fc)}"
        )
    return Prediction(
        model=model,
        edits=edits,
        fraction=s.fraction,
        tokens=ev.tokens,
        kv_cache_gib=ev.kv_gib,
        avail_after_pool_gib=ev.pool_end,
        graph_need_gib=ev.need,
        graph_headroom_gib=ev.headroom,
        req_to_token_gib=ev.req_gib if model.engine is Engine.SGLANG else None,
        full_context_requests=ev.full_ctx,
        tokens_per_0_01=tokens_per,
        min_fraction_for_full_context=min_fc,
        max_safe_fraction=max_safe,
        verdict=ev.verdict,
        confidence=confidence,
        reasons=reasons,
        explain=explain,
        context_len=s.context_len,
        running_requests=ev.mrr,
        full_context=full_context,
        margin_gib=graph_margin_gib,
        activation_gib=activation_allowance_gib(s.chunk),
    )
