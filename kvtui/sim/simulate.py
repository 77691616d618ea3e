"""One boot of the engine a unit's ExecStart runs."""

from __future__ import annotations

from kvtui.sim.script import BootInput, BootScript
from kvtui.sim.sglang import _SglangBoot
from kvtui.sim.vllm import _VllmBoot


def simulate_boot(inp: BootInput) -> BootScript:
    """The whole boot for these inputs (see the module docstring). The ExecStart decides the
    engine, as on a real host: ``vllm serve …`` is vLLM, anything else is tried as SGLang."""
    argv = inp.argv
    if len(argv) >= 2 and argv[0].rsplit("/", 1)[-1] == "vllm" and argv[1] == "serve":
        return _VllmBoot(inp).run()
    return _SglangBoot(inp).run()


def simulate_arrival(inp: BootInput) -> float | None:
    """When the boot's ranks reach distributed init (clock seconds) — what the other nodes of a
    multi-node preset wait for — or None when they never do (SGLang only: the multi-node presets)."""
    argv = inp.argv
    if len(argv) >= 2 and argv[0].rsplit("/", 1)[-1] == "vllm" and argv[1] == "serve":
        return None
    return _SglangBoot(inp).arrival()
