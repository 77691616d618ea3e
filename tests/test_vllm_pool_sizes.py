"""vLLM pools no line prints in tokens (issue 21, item 5): a V0 boot prints only ``# GPU blocks: N``
(its pool is N × the block size, and kvtui says where the block size came from); a start vLLM
refused (``To serve at least one request with the model's max seq len …``) is calibrated so that
``calc`` never predicts more tokens than vLLM's own "estimated maximum model length" at the same
setting (the real 04 log: 121,840, not the 124,560 of ``needed / max_model_len`` per token)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvtui import kvcalc as kc
from kvtui.boot import Boot
from kvtui.bootlog import read_log
from kvtui.cli import main
from kvtui.engines.events import Fact

REAL = Path(__file__).parent / "fixtures" / "real"
V0 = REAL / "09-vllm-qwen25-32b-tp4-v0-ready.log"
REFUSED = REAL / "04-vllm-laguna-int4-tp1-maxlen-kv-too-small.log"


def _boot(text: str) -> Boot:
    (boot,) = read_log([text.encode()])[0]
    return boot


def test_a_v0_boot_s_pool_is_its_gpu_blocks_times_the_flags_block_size(capsys: pytest.CaptureFixture[str]) -> None:
    boot = _boot(V0.read_text())
    assert boot.facts[Fact.KV_BLOCKS] == 2987
    assert boot.flags["block_size"] == 16
    assert boot.metrics.max_total_num_tokens == 2987 * 16
    assert boot.pool_from == "2,987 GPU blocks × 16 tokens per block (the flags' block_size)"
    # the engine's own check: `Maximum concurrency for 32768 tokens per request: 1.46x`
    assert boot.metrics.max_concurrency == 1.46
    assert round(2987 * 16 / 32768, 2) == 1.46
    assert main(["replay", str(V0), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["boots"]
    assert doc["metrics"]["max_total_num_tokens"] == 47_792
    assert doc["pool_from"] == boot.pool_from
    assert main(["replay", str(V0)]) == 0
    text = capsys.readouterr().out
    assert "KV pool          47,792 tokens · 2,987 GPU blocks × 16 tokens per block (the flags' block_size)" in text


@pytest.mark.parametrize(
    ("arg", "tokens", "whence"),
    [
        ("", 2987 * 16, "block_size not in the flags: vLLM's CUDA default 16"),
        ("block_size=32, ", 2987 * 32, "the flags' block_size"),
    ],
)
def test_the_block_size_comes_from_the_flags_else_vllm_s_cuda_default(arg: str, tokens: int, whence: str) -> None:
    text, n = re.subn(r"block_size=16, ", arg, V0.read_text(), count=1)
    assert n == 1
    boot = _boot(text)
    assert boot.metrics.max_total_num_tokens == tokens
    assert boot.pool_from is not None
    assert boot.pool_from.endswith(f"({whence})")


def test_a_printed_pool_needs_no_blocks() -> None:
    """A V1 boot prints `GPU KV cache size: N tokens`: no ``pool_from``, and ``replay --json``
    keeps its shape (no ``pool_from`` key)."""
    boot = _boot((Path(__file__).parent / "fixtures" / "vllm-0.11-llama8b-tp2-ready.log").read_text())
    assert boot.metrics.max_total_num_tokens
    assert boot.pool_from is None
    assert "pool_from" not in boot.to_json()


def test_calc_on_a_refused_start_predicts_what_vllm_estimated() -> None:
    boot = _boot(REFUSED.read_text())
    assert boot.facts[Fact.ESTIMATED_MAX_LEN] == 121_840
    assert boot.facts[Fact.KV_NEEDED_GIB] == 18.35
    model = kc.calibrate(boot)
    assert model.tokens == 121_840  # was 124,560: 8.72 GiB / (18.35 GiB / 262,144) per token
    pred = kc.predict(model)
    assert pred.tokens == 121_840
    assert pred.verdict is kc.Verdict.NO_FIT
    assert any("121,840" in ln and "does not grow with its length" in ln for ln in pred.explain), pred.explain
    assert model.bias_gib == pytest.approx(0.36, abs=0.01)
    # at another utilization the same line: the full-context request fits where vLLM's error says
    # (18.35 GiB of KV), not where the per-token figure alone would put it
    total = 119.7
    model = kc.calibrate(boot, gpu_mem_gib=total)
    pred = kc.predict(model, {"gpu_memory_utilization": 0.95})
    assert pred.min_fraction_for_full_context == pytest.approx(0.89 + (18.35 - 8.72) / total, abs=0.001)
    assert pred.tokens < 262_144


def test_calc_cli_on_the_refused_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calc", "--log", str(REFUSED), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["observed"]["max_total_num_tokens"] == 121_840
    assert doc["predicted"]["max_total_num_tokens"] == 121_840
    assert doc["predicted"]["kv_cache_gib"] == pytest.approx(8.72, abs=0.005)  # the whole budget, fixed part too
    assert any("vLLM's own estimate" in ln for ln in doc["explain"])
