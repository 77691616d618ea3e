"""A running server whose start is not in the log (issue 21): its model from the ``config.json``
it runs, placed at its pool estimated from serving lines (``from_config(observed_tokens=…)``)."""

from __future__ import annotations

from collections.abc import Mapping

from kvtui.boot import Boot
from kvtui.engines.events import Engine
from kvtui.knobs import EDITABLE_FLAGS
from kvtui.kvcalc.arith import _as_int
from kvtui.kvcalc.config import from_config
from kvtui.kvcalc.model import CalcError, MemoryModel

TP_FLAGS = ("tp_size", "tensor_parallel_size")
MODEL_FLAGS = ("model_path", "model")


def model_path(boot: Boot) -> str | None:
    """The model the running server serves, as its flags name it (``--model-path`` / ``--model``:
    a directory on the host or a Hugging Face id); None when the flags do not say."""
    for name in MODEL_FLAGS:
        value = boot.flags.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def serving_model(boot: Boot, config: Mapping[str, object], *, gpu_mem_gib: float | None) -> MemoryModel:
    """The model of a serving boot whose start (and pool line) is not in the log: its config.json,
    its running flags (TP, fraction, context, …) and the GPU's memory, anchored at the pool its
    serving lines give (``Boot.live.pool_tokens_est`` ± ``pool_tokens_err``). ``CalcError``
    ("input") says what is missing."""
    if boot.engine not in (Engine.SGLANG, Engine.VLLM):
        raise CalcError("the engine is not known (no flags from the process)", "input")
    est = boot.live.pool_tokens_est
    if est is None:
        raise CalcError("the pool is not estimated yet (no serving line with its token usage)", "input")
    if gpu_mem_gib is None or not gpu_mem_gib > 0:
        raise CalcError("the GPU's memory is not known yet (no GPU reading)", "input")
    tp = next((v for v in (_as_int(boot.flags.get(n)) for n in TP_FLAGS) if v is not None), 1)
    editable = set(EDITABLE_FLAGS.get(boot.engine, ())) - set(TP_FLAGS)
    flags = {k: v for k, v in boot.flags.items() if k in editable}
    return from_config(config, gpu_mem_gib=gpu_mem_gib, tp=max(1, tp), engine=boot.engine, flags=flags,
                       observed_tokens=est, observed_err=boot.live.pool_tokens_err)
