"""What a Python traceback frame says about a boot: whose code it is and which phase it was in.

A user often pastes only the end of a failed boot — a traceback and the exception, no argument
dump, no banner. The engine is then plain from the module paths of the frames
(``…/sglang/srt/…``, ``…/vllm/v1/…``, ``…/vllm/engine/…``) and the phase from the functions on the
stack: distributed / NCCL init -> init; model loading -> load_weights; memory profiling and KV-cache
allocation -> kv_allocate; graph capture and warm-up -> graph_capture; the serving loop -> ready.
The grammars turn such a frame into an *inferred* ``PhaseMark``, which the tracker uses only while a
boot has no phase line of its own (a fragment); the deepest frame's phase wins (frames come
outermost first, and a boot's phase never moves back).

Pure core, no I/O.
"""

from __future__ import annotations

import re
from typing import Final

from kvtui.engines.events import Engine, Phase

__all__ = ["config_exception", "frame_config", "frame_engine", "frame_phase", "is_frame"]

FRAME_RE: Final = re.compile(r'\s*File "([^"]*)", line \d+, in ([\w.<>]+)')

# function name -> phase (both engines; names from their released source)
_FUNC_PHASE: Final[dict[str, Phase]] = {
    # distributed / device init
    **dict.fromkeys(
        (
            "init_device", "init_distributed_environment", "init_torch_distributed", "initialize_model_parallel",
            "ensure_model_parallel_initialized", "init_process_group", "init_worker_distributed_environment",
            "request_memory", "init_world_group", "init_model_parallel_group", "measure_pre_model_load_memory",
            "init_parallel", "_init_distributed",
        ),
        Phase.INIT,
    ),
    # weights
    **dict.fromkeys(
        (
            "load_model", "load_weights", "_load_weights", "load_weights_and_postprocess", "get_model",
            "initialize_model", "_initialize_model", "create_weights", "process_weights_after_loading",
            "_get_weights_iterator", "safetensors_weights_iterator", "load_weights_from_checkpoint",
            "init_draft_worker", "maybe_init_draft_worker",
        ),
        Phase.LOAD_WEIGHTS,
    ),
    # memory profiling, KV-cache sizing and allocation
    **dict.fromkeys(
        (
            "profile_run", "determine_available_memory", "determine_num_available_blocks", "_dummy_run",
            "initialize_kv_cache", "_initialize_kv_caches", "initialize_kv_cache_tensors", "_allocate_kv_cache_tensors",
            "get_kv_cache_config", "get_kv_cache_configs", "check_enough_kv_cache_memory",
            "_check_enough_kv_cache_memory", "init_memory_pool", "profile_max_num_token", "init_cache_engine",
            "_create_buffers", "_allocate_kv_cache", "allocate_kv_cache", "init_kv_cache", "config_from_budget",
            "_profile_available_bytes", "resolve_max_num_reqs", "_init_cache",
        ),
        Phase.KV_ALLOCATE,
    ),
    # graph capture and warm-up (vLLM warms its sampler after capturing)
    **dict.fromkeys(
        (
            "capture_model", "capture", "capture_one_batch_size", "init_device_graphs", "init_cuda_graphs",
            "_capture_cudagraphs", "compile_or_warm_up_model", "_dummy_sampler_run", "capture_cuda_graphs",
            "capture_decode_graph", "capture_prefill_graph", "_capture_one_stream", "warmup_model",
            "capture_begin", "capture_end",
        ),
        Phase.GRAPH_CAPTURE,
    ),
    # the serving loop
    **dict.fromkeys(
        (
            "event_loop_normal", "event_loop_overlap", "event_loop_pp", "run_batch", "process_batch_result",
            "forward_batch_generation", "run_busy_loop", "_process_engine_step", "step_with_batch_queue",
            "event_loop_overlap_disagg_decode", "event_loop_normal_disagg_prefill",
        ),
        Phase.READY,
    ),
}
# path fragments, for frames whose function name says little (`__init__`, `forward`)
_PATH_PHASE: Final = (
    ("cuda_graph_runner", Phase.GRAPH_CAPTURE),
    ("torch/cuda/graphs.py", Phase.GRAPH_CAPTURE),
    ("cudagraph", Phase.GRAPH_CAPTURE),
    ("/model_loader/", Phase.LOAD_WEIGHTS),
    ("pynccl", Phase.INIT),
    ("/parallel_state.py", Phase.INIT),
)


# where the engines check their arguments and build their configuration, before anything starts:
# SGLang's ServerArgs (``__post_init__``, its ``_handle_*`` steps, ``check_server_args``), vLLM's
# EngineArgs (``create_engine_config``) and its config classes (``vllm/config/``, one
# ``vllm/config.py`` before 0.10: ``ModelConfig``, ``SchedulerConfig``, ``VllmConfig`` …)
_CONFIG_PATHS: Final = ("sglang/srt/server_args.py", "vllm/engine/arg_utils.py", "vllm/config/", "vllm/config.py")
# the exceptions a refused configuration raises (vLLM's pydantic config classes wrap a ValueError
# in a ValidationError: ``pydantic_core._pydantic_core.ValidationError: 1 validation error for …``)
_CONFIG_EXC_RE: Final = re.compile(r"^(?:[\w.]*\.)?(?:ValueError|AssertionError|ValidationError)(?::|$)")


# ServerArgs' own checks (its module also holds helpers other processes call at run time)
_SGLANG_CHECKS: Final = ("__post_init__", "from_cli_args", "prepare_server_args", "_handle_", "check_", "_check_",
                         "validate", "_validate")


def frame_config(text: str) -> bool:
    """Whether a traceback frame is in an engine's argument / configuration checks."""
    m = FRAME_RE.match(text)
    if m is None:
        return False
    path = m.group(1).replace("\\", "/")
    frag = next((f for f in _CONFIG_PATHS if f"/{f}" in path or path.startswith(f)), None)
    if frag is None:
        return False
    return not frag.startswith("sglang/") or m.group(2).rsplit(".", 1)[-1].startswith(_SGLANG_CHECKS)


# pydantic naming the config class it refused: the text alone says it (vLLM's config classes)
_CONFIG_CLASS_RE: Final = re.compile(r"^(?:[\w.]*\.)?ValidationError: \d+ validation errors? for \w*Config\b")


def config_exception(text: str, *, alone: bool = False) -> bool:
    """Whether an exception line is of a kind a refused configuration raises (``ValueError``,
    ``AssertionError``, pydantic's ``ValidationError``); ``alone``: whether the line says so by
    itself, without the frames above it (pydantic's ``… validation error for SchedulerConfig``)."""
    return (_CONFIG_CLASS_RE if alone else _CONFIG_EXC_RE).match(text) is not None


def is_frame(text: str) -> bool:
    return 'File "' in text and FRAME_RE.match(text) is not None


def frame_engine(text: str) -> Engine | None:
    """The engine whose code a traceback frame is in (by its module path), else None."""
    m = FRAME_RE.match(text)
    if m is None:
        return None
    path = m.group(1)
    if "/sglang/" in path or path.startswith("sglang/"):
        return Engine.SGLANG
    if "/vllm/" in path or path.startswith("vllm/"):
        return Engine.VLLM
    return None


def frame_phase(text: str) -> Phase | None:
    """The phase a frame of an engine's startup stack implies, or None."""
    m = FRAME_RE.match(text)
    if m is None:
        return None
    func = m.group(2).rsplit(".", 1)[-1]
    phase = _FUNC_PHASE.get(func)
    if phase is not None:
        return phase
    path = m.group(1)
    for frag, ph in _PATH_PHASE:
        if frag in path:
            return ph
    return None
