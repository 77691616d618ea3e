"""The simulated engines behind the demo host: model presets and the SGLang / vLLM boot simulations.

A boot is a **pure function** of its inputs (the unit's argv and environment, the preset, the
GPU, the seed, the boot number, the start time and the speed): :func:`simulate_boot` returns a
:class:`BootScript` — every line the engine prints with its time, the per-GPU memory the server
holds over time, and how the boot ends (ready, or the process exits). ``kvtui.hosts.demo`` turns
scripts into a systemd-style journal with cursors.

The figures follow the engine's own sizing (``engines.md`` §2, written here independently: this
package must never import ``kvtui.kvcalc``, which is tested against it):

* P = free memory after distributed init (min over ranks), A = free after the weights (min);
* rest = A − P·(1 − f); tokens = floor(int(rest·2^30) / cell), capped, page-aligned;
  tokens ≤ 0 → ``Not enough memory. Please try to increase --mem-fraction-static.``;
* each rank allocates ``N + page`` rows of ``cell`` bytes; the request table
  ``max_running_requests × (context_len + 4) × 4`` bytes, CUDA graphs and a draft model come out of
  the P·(1 − f) headroom; a capture that needs more than is free dies with the CUDA OOM text.

Log lines use SGLang 0.5.x format strings (0.5.10 or 0.5.14 capture lines, by preset).

``vllm serve …`` in the unit runs the vLLM 0.11 (V1 engine) simulation instead (engines.md §3):
``kv = total·u − (weights + activation peak + non-torch)``, blocks of ``block_size·cell`` bytes,
with the engine's own failures: free memory below ``u·total`` at start (a stale process),
``No available memory for the cache blocks``, and ``To serve at least one request …``.


Modules: ``presets`` (GPU, models, deployments), ``script`` (what a simulation returns and the
machinery that writes it), ``sglang`` and ``vllm`` (the two engines), ``serving`` (after ready),
``simulate`` (``simulate_boot``: the engine the ExecStart runs).
"""

from __future__ import annotations

from kvtui.hosts.demo_models.presets import (
    GIB,
    KIMI_K26,
    LLAMA_70B,
    MIB,
    MODELS,
    PRESETS,
    QWEN3_32B,
    QWEN3_32B_EAGLE3,
    GpuSpec,
    ModelSpec,
    Preset,
)
from kvtui.hosts.demo_models.script import (
    ArgError,
    BootInput,
    BootScript,
    ForeignProcess,
    ServingFacts,
    SimLine,
    systemd_timespan,
    torch_size,
    tqdm_bar,
    tqdm_interval,
    tqdm_rate,
    tqdm_remaining,
)
from kvtui.hosts.demo_models.serving import (
    MIN_SERVING_INTERVAL,
    SERVING_INTERVAL_S,
    VLLM_SERVING_INTERVAL_S,
    ServingTick,
    serving_interval,
    serving_load,
    serving_tick,
)
from kvtui.hosts.demo_models.sglang import (
    CAPTURE_FAILED_HELP,
    SGLANG_ARGS,
    default_capture_bs,
    parse_sglang_args,
)
from kvtui.hosts.demo_models.simulate import (
    simulate_arrival,
    simulate_boot,
)
from kvtui.hosts.demo_models.vllm import (
    VLLM_ARGS,
    VLLM_VERSION,
    parse_vllm_args,
)

__all__ = [
    "CAPTURE_FAILED_HELP",
    "GIB",
    "KIMI_K26",
    "LLAMA_70B",
    "MIB",
    "MIN_SERVING_INTERVAL",
    "MODELS",
    "PRESETS",
    "QWEN3_32B",
    "QWEN3_32B_EAGLE3",
    "SERVING_INTERVAL_S",
    "SGLANG_ARGS",
    "VLLM_ARGS",
    "VLLM_SERVING_INTERVAL_S",
    "VLLM_VERSION",
    "ArgError",
    "BootInput",
    "BootScript",
    "ForeignProcess",
    "GpuSpec",
    "ModelSpec",
    "Preset",
    "ServingFacts",
    "ServingTick",
    "SimLine",
    "default_capture_bs",
    "parse_sglang_args",
    "parse_vllm_args",
    "serving_interval",
    "serving_load",
    "serving_tick",
    "simulate_arrival",
    "simulate_boot",
    "systemd_timespan",
    "torch_size",
    "tqdm_bar",
    "tqdm_interval",
    "tqdm_rate",
    "tqdm_remaining",
]
