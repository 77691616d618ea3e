"""``calibrate(boot)``: the engine's calibration."""

from __future__ import annotations

from collections.abc import Sequence

from kvtui.boot import Boot
from kvtui.engines.events import Engine
from kvtui.kvcalc.model import CalcError, MemoryModel
from kvtui.kvcalc.sglang import _calibrate_sglang
from kvtui.kvcalc.vllm import _calibrate_vllm


def calibrate(boot: Boot, *, gpu_mem_gib: float | None = None, others: Sequence[Boot] = ()) -> MemoryModel:
    """Build the memory model of ``boot``'s deployment from what its log printed.

    ``others``: earlier boots of the same setup in the same log (two-point slope).
    Raises ``CalcError`` when the boot never sized its pool, saying what is missing.
    """
    if boot.engine is Engine.VLLM:
        return _calibrate_vllm(boot, gpu_mem_gib=gpu_mem_gib, others=others)
    if boot.engine is not Engine.SGLANG:
        raise CalcError("the boot's engine was not recognised (neither SGLang nor vLLM lines)", "input")
    return _calibrate_sglang(boot, gpu_mem_gib=gpu_mem_gib, others=others)
