"""What the engines do by rule when a flag is not given (engines.md §2.3–2.6)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvtui.kvcalc.arith import GIB

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


def _dtype_bytes(name: str, model_bytes: float) -> float:
    b = KV_DTYPE_BYTES.get(name.lower()) if name else None
    return model_bytes if b is None else b


def _model_dtype_bytes(flags: Mapping[str, object]) -> float:
    d = str(flags.get("dtype") or "auto").lower()
    if d in ("float32", "fp32"):
        return 4.0
    return 2.0


def extend_capture_bs(bs: Sequence[int], max_bs: int) -> list[int]:
    """SGLang-like capture list up to ``max_bs``: 1, 2, 4, 8, then steps of 8 (16 above 256)."""
    out = [b for b in sorted(set(bs)) if b <= max_bs]
    base = [1, 2, 4, 8, *list(range(16, 257, 8)), *list(range(272, 513, 16)), *list(range(544, 4097, 32))]
    top = max(out) if out else 0
    out.extend(b for b in base if top < b <= max_bs)
    if max_bs > 0 and (not out or max(out) < max_bs):
        out.append(max_bs)
    return sorted(set(out))


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
) -> float:
    """SGLang 0.5.10's default ``--mem-fraction-static`` for a card of ``gpu_gib``."""
    tier_chunk, tier_bs = _sglang_tier(gpu_gib, tp)
    chunk = tier_chunk if chunk is None or chunk <= 0 else chunk
    max_bs = tier_bs if max_bs is None else max_bs
    gpu_mib = gpu_gib * 1024
    reserved = 512 + max(chunk, 2048) * 1.5 + max_bs * 2 + tp / 8 * 1024
    if gpu_gib > 60:
        reserved = max(reserved, 10240)
    if speculative:
        reserved += 4096
    return round((gpu_mib - reserved) / gpu_mib, 3)
