"""The memory model: what a calibration (or a config) produces, the errors and the verdicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from kvtui import fmt
from kvtui.engines.events import Engine
from kvtui.knobs import fraction_flag
from kvtui.kvcalc.arith import MIB_PER_GIB

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



def activation_allowance_gib(chunked_prefill_size: int | None) -> float:
    """Runtime activation allowance for one prefill chunk (GiB per rank)."""
    chunk = DEFAULT_CHUNK if chunked_prefill_size is None or chunked_prefill_size <= 0 else chunked_prefill_size
    if chunked_prefill_size is not None and chunked_prefill_size < 0:
        chunk = 16384  # chunking disabled: a whole prompt at once; assume a long one
    return chunk * ACTIVATION_MIB_PER_TOKEN / MIB_PER_GIB


# ---------------------------------------------------------------------------------------------
# Errors, verdicts
# ---------------------------------------------------------------------------------------------


ErrorKind = Literal["usage", "input"]


class CalcError(ValueError):
    """User-facing problem: bad flag/value, a boot that never sized its pool, missing inputs.

    ``kind``: "usage" (a bad edit or option) or "input" (the log / config lacks what is needed).
    """

    def __init__(self, message: str, kind: ErrorKind = "usage") -> None:
        super().__init__(message)
        self.kind = kind


class Verdict(StrEnum):
    OK = "ok"
    TIGHT = "tight"
    OOM_RISK = "oom_risk"
    NO_FIT = "no_fit"


VERDICT_RANK: dict[Verdict, int] = {Verdict.OK: 0, Verdict.TIGHT: 1, Verdict.OOM_RISK: 2, Verdict.NO_FIT: 3}


class Basis(StrEnum):
    """What a model stands on."""

    CALIBRATED = "calibrated"  # one boot's own figures
    TWO_POINT = "two-point"  # two boots of one setup at different fractions: the slope measured
    LEAST_SQUARES = "least-squares"  # three or more boots of one setup: the slope fitted through all
    CONFIG = "config"  # a config.json: no boot yet, every figure an estimate
    # a config.json placed at a running server's pool estimated from its serving lines (its start
    # is not in the log): the weights and overhead solved from that point, the slope from the card
    CONFIG_ESTIMATE = "config+estimate"


class Confidence(StrEnum):
    HIGH = "high"
    LOW = "low"  # something the calculator could not check or does not model: treat as an estimate


class GraphSource(StrEnum):
    """Where a capture need comes from."""

    OBSERVED = "observed"  # the boot finished capture: measured
    CAPTURE_OOM = "capture-oom"  # the boot died in capture: what it had used plus what it asked for
    ESTIMATED = "estimated"  # not shown: SGLang's own reserve
    DISABLED = "disabled"  # --disable-cuda-graph
    OTHER_BOOT = "other-boot"  # measured on a sibling boot of the same setup


@dataclass(frozen=True, slots=True)
class GraphModel:
    """What capture needs from the memory left after the pools, and how it scales with the
    captured batch sizes: ``need(bs) = fixed + Σ (per_graph + per_bs·bs)``."""

    need_gib: float  # at the observed batch-size list
    bs: tuple[int, ...] = ()
    per_graph_gib: float = 0.0
    per_bs_gib: float = 0.0
    fixed_gib: float = 0.0
    source: GraphSource = GraphSource.OBSERVED
    note: str = ""

    def cost(self, bs: Sequence[int]) -> float:
        return sum(self.per_graph_gib + self.per_bs_gib * b for b in bs)

    def need_for(self, bs: Sequence[int] | None) -> float:
        if bs is None or not self.bs:
            return self.need_gib
        return self.fixed_gib + self.cost(bs)


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
    basis: Basis
    confidence: Confidence
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
    calibration_boots: int = 1  # boots whose (fraction, tokens) placed the slope (two-point: 2; least-squares: ≥3)
    # the pool-sizing environment the calibrating boot ran with, as its log shows it (knobs.pool_env:
    # VLLM_CPU_KVCACHE_SPACE on vLLM, None when not set; empty for SGLang and a config model)
    pool_env: Mapping[str, str | None] = field(default_factory=dict)
    # basis config+estimate: the pool the model is placed at (tokens estimated from serving lines)
    # and its ± (None: unknown)
    anchor_tokens: int | None = None
    anchor_err: int | None = None

    @property
    def page_flag(self) -> str:
        """The engine's name of the page: ``page_size`` (SGLang) / ``block_size`` (vLLM)."""
        return "block_size" if self.engine is Engine.VLLM else "page_size"

    def observed_flags(self) -> dict[str, object]:
        """The modelled flags as this model has them: the fraction (at the 3 decimals shown) and
        the page. A flag the boot's argument dump does not carry reads its value here."""
        return {fraction_flag(self.engine): fmt.round_near(self.fraction, 3), self.page_flag: self.page_size}


@dataclass(frozen=True, slots=True)
class Sizing:
    """The core of every model: where the deployment sits on its fraction line and what a token
    costs. ``model()`` is the base a calibration (or a config) adds what it found to."""

    basis: Basis
    fraction: float
    tokens: int
    tokens_raw: float
    page_size: int
    cell_bytes: int
    sizing_cell_bytes: int
    slope_gib: float | None

    def model(self, engine: Engine, notes: Notes, flags: Mapping[str, object]) -> MemoryModel:
        return MemoryModel(
            engine=engine,
            basis=self.basis,
            confidence=notes.confidence,
            fraction=self.fraction,
            tokens=self.tokens,
            tokens_raw=self.tokens_raw,
            page_size=self.page_size,
            cell_bytes=self.cell_bytes,
            sizing_cell_bytes=self.sizing_cell_bytes,
            slope_gib=self.slope_gib,
            reasons=tuple(notes.reasons),
            explain=tuple(notes.explain),
            flags=dict(flags),
        )


@dataclass(slots=True)
class Notes:
    """What a calibration says as it goes: reasons (shown with the verdict), explain lines (the
    formulas with the numbers in), and whether anything lowered the confidence."""

    reasons: list[str] = field(default_factory=list)
    explain: list[str] = field(default_factory=list)
    confidence: Confidence = Confidence.HIGH

    def low(self, reason: str) -> None:
        self.confidence = Confidence.LOW
        self.reasons.append(reason)
