"""Reading a boot: the figures the engine printed, which boot to calibrate from."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine, Fact
from kvtui.knobs import Memory, fraction_flag, memory_value, pool_env
from kvtui.kvcalc.arith import _as_float, _as_int
from kvtui.kvcalc.defaults import _dtype_bytes, _model_dtype_bytes
from kvtui.kvcalc.model import CalcError, MemoryModel, Notes, Sizing

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


def _fact(boot: Boot, name: Fact, metric: float | int | None = None) -> float | None:
    if metric is not None:
        return float(metric)
    v = boot.facts.get(name)
    return float(v) if v is not None else None


def _min_rank_fact(boot: Boot, name: Fact) -> float | None:
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
        boot.facts.get(Fact.MAX_TOTAL_NUM_TOKENS),
        boot.facts.get(Fact.DSV4_FULL_TOKEN),
        boot.facts.get(Fact.FULL_TOKENS),
        boot.facts.get(Fact.KV_TOKENS),
    ):
        if v is not None and v > 0:
            return int(v)
    return None


def sized_pool(boot: Boot) -> bool:
    """Did this boot size its KV pool (so a model can be calibrated from it)?"""
    if boot.engine is Engine.VLLM:
        kv = boot.metrics.kv_cache_gib if boot.metrics.kv_cache_gib is not None else boot.facts.get(Fact.KV_CACHE_GIB)
        return (kv is not None and kv > 0 and _boot_tokens(boot) is not None) or (
            boot.facts.get(Fact.KV_NEEDED_GIB) is not None and kv is not None and kv > 0
        )
    return _boot_tokens(boot) is not None


_SETUP_KEYS: dict[Engine, tuple[str, ...]] = {
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


def same_setup(a: Boot, b: Boot) -> bool:
    """The same setup: same engine, model and memory-relevant flags (the fraction may differ) —
    boots that calibrate one model together (not a ``[deployments.NAME]``)."""
    if a.engine is not b.engine:
        return False
    for key in _SETUP_KEYS.get(a.engine, ()):
        if key in a.flags and key in b.flags and a.flags[key] != b.flags[key]:
            return False
    ca, cb = a.metrics.cell_bytes, b.metrics.cell_bytes
    return not (ca and cb and abs(ca - cb) > 0.01 * max(ca, cb))


def select_boot(boots: Sequence[Boot], index: int | None = None) -> tuple[Boot, list[Boot]]:
    """The boot to calibrate from, plus the other boots of the same setup that sized a pool.

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
    others = [b for b in boots if b is not chosen and sized_pool(b) and same_setup(chosen, b)]
    return chosen, others


# ---------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------


def _page_of(boot: Boot, tokens: int | None) -> tuple[int, str | None]:
    page = _as_int(boot.flags.get("page_size"))
    if page and page > 0:
        return page, None
    if boot.facts.get(Fact.DSV4_BYTES_PER_FULL_TOKEN) is not None:
        return 256, "page_size not in the args: DeepSeek-V4 forces 256"
    if tokens and tokens % 64 == 0:
        return (
            64,
            "page_size not in the args: #tokens is a multiple of 64, assuming the forced page of 64 (DSA/FlashMLA)",
        )
    return 1, None


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


def _pool_end_of(boot: Boot) -> float | None:
    vals = [
        x
        for x in (
            boot.metrics.avail_after_pool_gib,
            boot.facts.get(Fact.AVAIL_AFTER_POOL_GIB),
            boot.draft_facts.get(Fact.AVAIL_AFTER_POOL_GIB),
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


def observed_outcome(boot: Boot) -> str:
    """What the boot did: ``ready``, its failure kind, or its status."""
    if boot.status is BootStatus.READY:
        return "ready"
    return boot.failure.kind.value if boot.failure is not None else boot.status.value


def boot_model(boot: Boot, notes: Notes, sizing: Sizing) -> MemoryModel:
    """The model of a calibrated boot with what every engine reads the same way (its flags in the
    engine's names, its graph memory, context, outcome, and the calibration's notes); each
    engine's calibration adds what it found with ``dataclasses.replace``."""
    flags, m, facts, engine = boot.flags, boot.metrics, boot.facts, boot.engine

    def flag(role: Memory) -> object:  # under whichever key the release dumps it (cuda_graph_max_bs_decode)
        return memory_value(engine, role, flags)

    kv_dtype = str(flags.get("kv_cache_dtype") or "auto")
    model_bytes = _model_dtype_bytes(flags)
    return replace(
        sizing.model(engine, notes, flags),
        graph_mem_gib=m.graph_mem_gib if m.graph_mem_gib is not None else facts.get(Fact.GRAPH_MEM_GIB),
        context_len=_as_int(m.context_len) or _as_int(facts.get(Fact.CONTEXT_LEN)) or _as_int(flag(Memory.CONTEXT)),
        cuda_graph_max_bs=_as_int(flag(Memory.GRAPH_BS)),
        kv_cache_dtype=kv_dtype,
        kv_elem_bytes=_dtype_bytes(kv_dtype, model_bytes),
        model_elem_bytes=model_bytes,
        tp=_as_int(flag(Memory.TP)) or 1,
        version_hint=boot.version_hint,
        observed_verdict_hint=observed_outcome(boot),
        pool_env=pool_env(engine, flags, facts),
    )
