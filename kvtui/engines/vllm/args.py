"""vLLM's argument dumps: ``non-default args: {…}`` (a dict repr), V0 ``args: Namespace(…)`` and
the engine-config dump (``k=v, k=v``), read without eval; the config keys kept under the CLI's names.

Pure core.
"""

from __future__ import annotations

import ast

_OPEN = "([{"
_CLOSE = ")]}"


def _split_top(s: str) -> list[str]:
    """Split ``s`` at top-level commas (outside brackets and quotes)."""
    out: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in _OPEN or c == "<":
            depth += 1
        elif c in _CLOSE or c == ">":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            out.append(s[start:i])
            start = i + 1
        i += 1
    out.append(s[start:])
    return [p.strip() for p in out if p.strip()]


def _lit(value: str) -> object:
    """A Python literal when ``value`` is one (``0.9``, ``None``, ``'auto'``, ``[1, 2]``), else the text."""
    v = value.strip()
    if not v:
        return v
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return v


def parse_arg_dict(text: str) -> dict[str, object]:
    """Parse a dict repr (``{'model': 'x', 'tensor_parallel_size': 2}``) without eval.

    Tolerates non-literal values (``<CompilationMode.X: 3>``) and a cut-off tail: each item is
    read on its own and a value that is no literal stays as its text.
    """
    body = text.strip()
    try:
        whole = ast.literal_eval(body)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        return {str(k): v for k, v in whole.items()}
    if body.startswith("{"):
        body = body[1:]
    if body.endswith("}"):
        body = body[:-1]
    out: dict[str, object] = {}
    for item in _split_top(body):
        key, sep, value = item.partition(":")
        if not sep:
            continue
        k = _lit(key)
        if isinstance(k, str) and k:
            out[k] = _lit(value)
    return out


def parse_kv_args(text: str) -> dict[str, object]:
    """Parse ``k=v, k=v`` (a ``Namespace(…)`` body or vLLM's engine-config dump)."""
    body = text.strip()
    if body.startswith("Namespace(") and body.endswith(")"):
        body = body[len("Namespace("):-1]
    out: dict[str, object] = {}
    for item in _split_top(body):
        key, sep, value = item.partition("=")
        key = key.strip()
        if sep and key.isidentifier():
            out[key] = _lit(value)
    return out


# Keys of the engine-config dump worth keeping, under the CLI's names.
_CONFIG_KEYS = {
    "model": "model",
    "max_seq_len": "max_model_len",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "dtype": "dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "enforce_eager": "enforce_eager",
    "enable_prefix_caching": "enable_prefix_caching",
    "served_model_name": "served_model_name",
    "speculative_config": "speculative_config",
}
