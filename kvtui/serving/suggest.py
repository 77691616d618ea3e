"""The edit that answers a "pool full" diagnosis where the pool is given in bytes (vLLM's CPU
backend: ``--kv-cache-memory-bytes``, ``VLLM_CPU_KVCACHE_SPACE``), sized from the evidence with
no memory model: ``kvtui watch --json``'s ``diagnosis.suggest`` and its human line (issue 24).

The pool is sized so that no request is preempted: every request the engine runs at once — those
seen at once (the window's most running + most waiting), at most the boot's cap on running
requests (``--max-num-seqs``) — at its longest (``--max-model-len``; vLLM's
``kv_cache_max_concurrency`` gives it where the boot's arguments do not), in whole blocks, plus
the one block vLLM keeps aside. The bytes a token takes are the pool's own: its bytes (the flag,
or the variable's GiB) over its tokens (``vllm:cache_config_info``). A pool sized by a memory
fraction (a GPU) is the calculator's to size (``kvtui.ui.serving.widgets.suggest``): none here.
Pure core.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from kvtui.serving.diagnose import Diagnosis, Limit
from kvtui.serving.sample import CacheInfo

KV_BYTES_FLAG = "--kv-cache-memory-bytes"
CPU_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"
GIB = 1 << 30
RESERVED_BLOCKS = 1  # vLLM's null block: a pool of N blocks holds N - 1 of requests


@dataclass(frozen=True, slots=True)
class PoolSuggestion:
    """``knob`` (as written: ``--kv-cache-memory-bytes``, ``VLLM_CPU_KVCACHE_SPACE``) set to
    ``value``; the pool from ``tokens_before`` to ``tokens_after``; ``why`` the sizing in words."""

    knob: str
    value: str
    tokens_before: int
    tokens_after: int
    why: str

    @property
    def env(self) -> bool:
        return not self.knob.startswith("--")

    def edit(self) -> str:
        """``--set kv-cache-memory-bytes=V`` / ``--setenv VLLM_CPU_KVCACHE_SPACE=V`` (apply's form)."""
        if self.env:
            return f"--setenv {self.knob}={self.value}"
        return f"--set {self.knob.removeprefix('--')}={self.value}"

    def apply_command(self, host: str) -> str:
        """The command that makes the edit and restarts: ``kvtui apply HOST --set …=V --restart``."""
        return f"kvtui apply {shlex.quote(host)} {self.edit()} --restart"

    def answer(self, host: str) -> str:
        """The phrase ``Diagnosis.line`` says instead of the bare knob."""
        return (f"at {self.knob} {self.value} the pool grows from {self.tokens_before:,} to "
                f"{self.tokens_after:,} tokens: {self.apply_command(host)}")

    def to_json(self, host: str) -> dict[str, object]:
        return {"flag": self.knob, "scope": "env" if self.env else "flag", "value": self.value,
                "pool_tokens": self.tokens_before, "pool_tokens_after": self.tokens_after, "why": self.why,
                "apply": self.apply_command(host)}


def _int(v: object) -> int | None:
    try:
        n = int(float(str(v)))
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def max_model_len(flags: Mapping[str, object], cache: CacheInfo | None) -> int | None:
    """The longest request: the boot's ``max_model_len``, else the pool over vLLM's
    ``kv_cache_max_concurrency`` (the pool's tokens / max-model-len)."""
    given = _int(flags.get("max_model_len"))
    if given is not None:
        return given
    if cache is not None and cache.pool_tokens and cache.max_concurrency:
        return round(cache.pool_tokens / cache.max_concurrency)
    return None


def size_pool(
    diag: Diagnosis,
    cache: CacheInfo | None,
    flags: Mapping[str, object],
    pool_env: Mapping[str, str | None],
) -> PoolSuggestion | None:
    """The pool that holds every request the engine runs at once at its longest (the module's
    doc), for the first of the diagnosis' knobs when it is a pool given in bytes; None when the
    pool is not full, the knob is a fraction, or a figure is missing (the cap, the length, the
    pool's bytes or blocks). ``flags``: the boot's arguments (underscores); ``pool_env``: its
    pool-sizing environment (``kvtui.knobs.pool_env``)."""
    if diag.limit is not Limit.POOL or not diag.knobs or cache is None:
        return None
    knob = diag.knobs[0].name
    blocks, block = cache.num_blocks, cache.block_size
    if knob not in (KV_BYTES_FLAG, CPU_KV_SPACE) or not blocks or not block:
        return None
    if knob == KV_BYTES_FLAG:
        pool_bytes = _int(flags.get("kv_cache_memory_bytes"))
    else:
        try:
            pool_bytes = round(float(str(pool_env.get(CPU_KV_SPACE))) * GIB)
        except ValueError:
            pool_bytes = None
    length = max_model_len(flags, cache)
    e = diag.evidence
    seen = (e.max_running or 0) + (e.max_waiting or 0)
    cap = e.running_cap
    at_once = min(cap, seen) if cap is not None and seen else cap or seen or None
    if pool_bytes is None or length is None or at_once is None:
        return None
    per_block = pool_bytes / blocks
    need_blocks = at_once * math.ceil(length / block) + RESERVED_BLOCKS
    before = blocks * block
    reason = (f"{at_once} requests at once ({'the --max-num-seqs cap' if at_once == cap else 'as many as seen'}) "
              f"x {length:,} tokens (--max-model-len) = {need_blocks:,} blocks of {block} tokens")
    if knob == KV_BYTES_FLAG:
        value = math.ceil(need_blocks * per_block)
        if value <= pool_bytes:
            return None
        return PoolSuggestion(knob, str(value), before, need_blocks * block,
                              reason + f", {per_block / block:,.0f} bytes a token")
    gib = max(math.ceil(need_blocks * per_block / GIB), math.floor(pool_bytes / GIB) + 1)
    after = math.floor(gib * GIB / per_block) * block
    return PoolSuggestion(knob, str(gib), before, after, reason + f": {gib} GiB, in whole GiB")
