"""The demo host's preset *names* and how ``demo_model`` resolves to one.

Pure (no I/O, no imports beyond the standard library): ``kvtui.config`` checks ``demo_model`` /
``demo_engine`` with it at configuration time, and the demo host (``kvtui.hosts.demo``) resolves
its preset with the same function, so a hosts file that loads is a demo host that starts. The
simulated deployments themselves (``kvtui.hosts.demo_models.PRESETS``) must have exactly these
keys and engines; a test checks it.
"""

from __future__ import annotations

from collections.abc import Mapping

# preset key -> the engine it simulates, in the order presets are listed to users
PRESET_ENGINES: Mapping[str, str] = {
    "kimi-k2.6": "sglang",
    "llama-70b": "sglang",
    "qwen3-32b-eagle3": "sglang",
    "vllm-llama-70b": "vllm",
    "deepseek-r1-2node": "sglang",
}
# presets that span several simulated hosts (``[deployments.NAME]`` of demo hosts, one per node:
# ``demo_node`` says which node a host is, ``demo_stall_node`` which node never reaches distributed init)
PRESET_NODES: Mapping[str, int] = {"deepseek-r1-2node": 2}
DEMO_ENGINES: tuple[str, ...] = ("sglang", "vllm")
DEMO_GPU_COUNT = 8  # the simulated host's GPUs: 0 … 7
DEFAULT_PRESET = "kimi-k2.6"
DEFAULT_PRESETS: Mapping[str, str] = {"sglang": "kimi-k2.6", "vllm": "vllm-llama-70b"}


class PresetError(ValueError):
    """``demo_model`` / ``demo_engine`` name no simulated deployment. ``str()`` is the whole
    message; ``problem`` what is wrong and ``expected`` what would do, for a caller that words
    it its own way (the hosts-file checker)."""

    def __init__(self, problem: str, expected: str) -> None:
        super().__init__(f"{problem}; {expected}")
        self.problem = problem
        self.expected = expected


def preset_list(engine: str | None = None) -> str:
    """``kimi-k2.6 (sglang), llama-70b (sglang), …`` — the presets (of one engine, when given)."""
    return ", ".join(f"{k} ({e})" for k, e in PRESET_ENGINES.items() if engine is None or e == engine)


def resolve_preset_name(name: str | None, engine: str = "sglang") -> str:
    """The preset key ``demo_model`` names for a ``demo_engine``: a key (case-insensitive) or a
    unique prefix of one; without a name, the engine's default preset. Raises ``PresetError``
    for an unknown engine, an unknown or ambiguous name, or a preset of the other engine."""
    if engine not in DEMO_ENGINES:
        raise PresetError(f"demo_engine '{engine}' is not simulated", f"expected one of: {', '.join(DEMO_ENGINES)}")
    if name is None or not name.strip():
        return DEFAULT_PRESETS.get(engine, DEFAULT_PRESET)
    key = name.strip().lower()
    if key not in PRESET_ENGINES:
        matches = [k for k in PRESET_ENGINES if k.startswith(key)]
        if len(matches) != 1:
            why = f"matches {' and '.join(matches)}" if matches else "is not a demo preset"
            raise PresetError(
                f"demo_model '{name}' {why}", f"expected one of (a name or a unique prefix): {preset_list()}"
            )
        key = matches[0]
    if PRESET_ENGINES[key] != engine:
        raise PresetError(
            f"demo_model '{name}' is the {PRESET_ENGINES[key]} preset {key} but demo_engine is '{engine}'",
            f"expected a {engine} preset: {preset_list(engine)}",
        )
    return key


__all__ = [
    "DEFAULT_PRESET",
    "DEFAULT_PRESETS",
    "DEMO_ENGINES",
    "DEMO_GPU_COUNT",
    "PRESET_ENGINES",
    "PRESET_NODES",
    "PresetError",
    "preset_list",
    "resolve_preset_name",
]
