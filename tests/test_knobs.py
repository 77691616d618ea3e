"""kvtui.knobs: one table of server settings, read the same way by the flag editor, the
calculator, the apply path and the console."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvtui import flags, knobs, kvcalc
from kvtui.engines.events import Engine
from kvtui.knobs import Memory, Scope

ENGINES = (Engine.SGLANG, Engine.VLLM)


def test_the_table_imports_no_ui_ssh_or_other_layer() -> None:
    code = "import sys, kvtui.knobs\nprint(sorted(m for m in sys.modules if m.startswith(('textual', 'asyncssh', " \
           "'kvtui.hosts', 'kvtui.ui', 'kvtui.kvcalc', 'kvtui.flags'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("engine", ENGINES)
def test_every_editable_flag_is_one_setting_in_both_layers(engine: Engine) -> None:
    """The calculator's name of a modelled flag is the flag layer's dump key of the same flag, and
    each spelling the flag layer accepts reaches the same calculator name."""
    for name in kvcalc.EDITABLE_FLAGS[engine]:
        role = knobs.MEMORY_ROLES[name]
        assert knobs.memory_name(engine, role) == name
        written = flags.canonical_flag(engine, name)
        assert flags.dest_name(engine, written) == name
        assert kvcalc.canonical_flag(engine, written) == name
        spec = flags.lookup(engine, written)
        if spec is not None:  # in the flag table: every spelling of it, either engine's
            for spelling in (n for names in spec.names.values() for n in names):
                assert kvcalc.canonical_flag(engine, "--" + spelling) == name, spelling


def test_the_fraction_comes_first_and_the_environment_is_not_a_field() -> None:
    for engine in ENGINES:
        assert kvcalc.EDITABLE_FLAGS[engine][0] == knobs.fraction_flag(engine)
    assert "vllm_cpu_kvcache_space" not in kvcalc.EDITABLE_FLAGS[Engine.VLLM]
    assert kvcalc.canonical_flag(Engine.VLLM, "VLLM_CPU_KVCACHE_SPACE") == "vllm_cpu_kvcache_space"


def test_environment_knobs_are_not_flags() -> None:
    env = knobs.env_knob("vllm_cpu_kvcache_space")
    assert env is not None
    assert env.scope is Scope.ENV
    assert env.memory is Memory.CPU_KV_SPACE
    assert env not in flags.SPECS
    assert flags.lookup(Engine.VLLM, "VLLM_CPU_KVCACHE_SPACE") is None
    assert knobs.env_knob("max-num-seqs") is None


def test_shorthands_reach_the_calculator_but_are_never_flags() -> None:
    assert kvcalc.canonical_flag(Engine.SGLANG, "mfs") == "mem_fraction_static"
    assert kvcalc.canonical_flag(Engine.VLLM, "mfs") == "gpu_memory_utilization"
    assert flags.lookup(Engine.SGLANG, "mfs") is None
    assert "mfs" not in flags.known_names(Engine.SGLANG)


def test_calculator_only_knob_stays_out_of_the_flag_table() -> None:
    """vLLM's num-gpu-blocks-override caps the calculator's pool; the flag layer does not list it
    (an SGLang edit of it must stay an unknown flag)."""
    assert kvcalc.canonical_flag(Engine.VLLM, "max-total-tokens") == "num_gpu_blocks_override"
    assert flags.lookup(Engine.SGLANG, "num-gpu-blocks-override") is None
    assert flags.lookup(Engine.VLLM, "num-gpu-blocks-override") is None


@pytest.mark.parametrize(
    ("name", "dashed", "underscored"),
    [("--Mem_Fraction_Static", "mem-fraction-static", "mem_fraction_static"), ("tp", "tp", "tp"),
     ("  --max-model-len ", "max-model-len", "max_model_len")],
)
def test_spellings(name: str, dashed: str, underscored: str) -> None:
    assert knobs.dash_name(name) == dashed
    assert knobs.underscore_name(name) == underscored
