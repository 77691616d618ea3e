"""The KV-pool calculator, calibrated from the boot's own log (pure core: no I/O, no UI).

``calibrate(boot)`` reads what the engine printed about itself and builds a ``MemoryModel``;
``predict(model, what_if)`` says what a set of flag values (a ``WhatIf``) will give: tokens, KV GiB per rank,
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

Two boots of one setup (``same_setup``) at different fractions give the slope (tokens per unit of fraction,
or vLLM's device total) directly: ``basis: two-point``.

The parts: ``model`` (the MemoryModel, its graph model, errors, verdicts), ``whatif`` (the what-if flag
values in the engine's names, from ``kvtui.knobs``), ``boots`` (what a boot printed; which boot to use),
``sglang`` / ``vllm`` (calibration), ``graphs`` (what capture needs), ``config`` (a model from a
``config.json``), ``serving`` (a running server whose start is not in the log: its config
anchored at the pool its serving lines give), ``verdict`` (one setting evaluated), ``predict`` (the
prediction and its safe fractions), ``defaults`` (the engines' rules for unset flags), ``arith``
(small arithmetic).
"""

from __future__ import annotations

from kvtui.engines.events import Engine
from kvtui.knobs import EDITABLE_FLAGS, fraction_flag
from kvtui.kvcalc.arith import GIB, floor_page
from kvtui.kvcalc.boots import same_setup, select_boot, sized_pool
from kvtui.kvcalc.calibrate import calibrate
from kvtui.kvcalc.config import from_config
from kvtui.kvcalc.defaults import default_mem_fraction
from kvtui.kvcalc.model import (
    DEFAULT_GRAPH_MARGIN_GIB,
    VERDICT_RANK,
    Basis,
    CalcError,
    GraphSource,
    MemoryModel,
    Verdict,
    activation_allowance_gib,
)
from kvtui.kvcalc.predict import HistoryCalibration, Prediction, grid_search, predict
from kvtui.kvcalc.serving import model_path, serving_model
from kvtui.kvcalc.whatif import FLAG_ALIASES, WhatIf, canonical_flag, parse_what_if

__all__ = [
    "DEFAULT_GRAPH_MARGIN_GIB",
    "EDITABLE_FLAGS",
    "FLAG_ALIASES",
    "GIB",
    "VERDICT_RANK",
    "Basis",
    "CalcError",
    "Engine",
    "GraphSource",
    "HistoryCalibration",
    "MemoryModel",
    "Prediction",
    "Verdict",
    "WhatIf",
    "activation_allowance_gib",
    "calibrate",
    "canonical_flag",
    "default_mem_fraction",
    "floor_page",
    "fraction_flag",
    "from_config",
    "grid_search",
    "model_path",
    "parse_what_if",
    "predict",
    "same_setup",
    "select_boot",
    "serving_model",
    "sized_pool",
]
