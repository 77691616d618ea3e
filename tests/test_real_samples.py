"""The real boots users posted publicly (tests/fixtures/real/) replay to the facts in expected.json.

They are examples of the variety in the wild (SGLang 0.4-0.5.11, vLLM 0.6-0.25, Ray prefixes,
fragments); the rules in the grammars come from the engines' formats, not from these files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtui.boot import Boot, BootStatus
from kvtui.commands.replay import analyse, read_chunks

REAL = Path(__file__).parent / "fixtures" / "real"
# expected.json: the shared samples (INDEX.md); expected-*.json: logs added later, each with its own
# INDEX-*.md (facts written from reading each log, before kvtui ran on it)
EXPECTED: dict[str, dict[str, object]] = {}
for _path in sorted(REAL.glob("expected*.json")):
    EXPECTED.update(json.loads(_path.read_text()))
# the vLLM CPU boots captured here (tests/engine/capture_fixtures.py, INDEX-vllm-cpu.md): more facts
CPU_EXTRA: dict[str, dict[str, object]] = json.loads((REAL / "vllm-cpu-extra.json").read_text())

# expected.json leaves a figure null where INDEX.md calls it ambiguous; kvtui still reports one,
# by its documented rule, and these are the values it must report.
DOCUMENTED = {
    # hybrid SWA + DFlash draft: the SWAKVPool total (INDEX's KV convention for hybrid pools),
    # the target's own `Memory pool end` (the draft's pool comes after it), and the sum of the two
    # target captures (prefill 5.24 + verify 0.60; the draft's 0.45 is in draft_facts).
    "03-sglang-laguna-int4-tp1-swa-dflash-ready.log": {
        "kv_cache_gib": 28.93,
        "avail_after_pool_gib": 17.73,
        "graph_mem_gib": 5.84,
    },
    # vLLM V0 prints its pool only as `# GPU blocks: 2987`: × block_size 16 (its argument dump) —
    # 1.46 full-context requests of 32,768 tokens, as its `Maximum concurrency` line says (issue 21)
    "09-vllm-qwen25-32b-tp4-v0-ready.log": {
        "max_total_num_tokens": 2987 * 16,
    },
}


def _replay(name: str) -> list[Boot]:
    with (REAL / name).open("rb") as f:
        boots, _shape = analyse(read_chunks(f, name))
    return boots


def _facts(boot: Boot) -> dict[str, object]:
    m = boot.metrics
    frac = boot.flags.get("mem_fraction_static", boot.flags.get("gpu_memory_utilization"))
    ctx = m.context_len
    if ctx is None:
        for key in ("context_length", "max_model_len"):
            if isinstance(boot.flags.get(key), int):
                ctx = boot.flags[key]  # type: ignore[assignment]
                break
    return {
        "engine": boot.engine.value,
        "status": boot.status.value,
        "failure_kind": boot.failure.kind.value if boot.failure else None,
        "last_phase": boot.phase.value if boot.phase else None,
        "max_total_num_tokens": m.max_total_num_tokens,
        "kv_cache_gib": m.kv_cache_gib,
        "avail_after_pool_gib": m.avail_after_pool_gib,
        "graph_mem_gib": m.graph_mem_gib,
        "mem_fraction": frac,
        "context_len": ctx,
    }


# Logs whose facts kvtui did not yet yield when they were added (the first run); each leaves this
# set with the fix that makes it pass (strict: a log that passes while listed fails the test).
PENDING: frozenset[str] = frozenset()


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(strict=True)) if n in PENDING else n for n in sorted(EXPECTED)],
)
def test_real_sample_replays_to_expected_facts(name: str) -> None:
    boots = _replay(name)
    assert len(boots) == 1, f"{name}: {len(boots)} boots"
    got = _facts(boots[0])
    want = dict(EXPECTED[name])
    want.update(DOCUMENTED.get(name, {}))
    for key, value in want.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, abs=0.005), f"{name}: {key}"
        else:
            assert got[key] == value, f"{name}: {key} = {got[key]!r}, expected {value!r}"


def test_every_real_sample_is_covered() -> None:
    logs = {p.name for p in REAL.glob("*.log")}
    assert logs == set(EXPECTED)


def test_sglang_hybrid_draft_figures_stay_out_of_the_target() -> None:
    boot = _replay("03-sglang-laguna-int4-tp1-swa-dflash-ready.log")[0]
    assert boot.status is BootStatus.READY
    phases = [(p.name.value, p.model.value) for p in boot.phases]
    assert ("load_weights", "draft") in phases
    assert ("kv_allocate", "draft") in phases
    assert ("graph_capture", "draft") in phases
    # the draft pool has the target's #tokens but a tiny size: never the target's figure
    assert boot.draft_facts["kv_cache_gib"] == pytest.approx(4.26)
    assert boot.draft_facts["kv_tokens"] == 185897
    assert boot.draft_facts["avail_after_pool_gib"] == pytest.approx(13.35)
    assert boot.draft_facts["graph_mem_gib"] == pytest.approx(0.45)
    assert boot.facts["avail_before_load_gib"] == pytest.approx(115.36)  # not the draft's 47.83
    assert boot.facts["weights_gib"] == pytest.approx(67.56)
    # SWAKVPool 28.93 GiB over 185,897 full tokens + 1 page row
    assert boot.metrics.cell_bytes == round(28.93 * 2**30 / 185898)


def test_sglang_failure_23_names_the_exception_and_its_traceback() -> None:
    boot = _replay("23-sglang-gemma4-26b-a4b-tp1-not-enough-memory.log")[0]
    assert boot.failure is not None
    assert boot.failure.message == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    assert boot.failure.traceback[0].startswith("Scheduler hit an exception: Traceback")
    assert boot.failure.traceback[-1] == boot.failure.message
    assert "raise --mem-fraction-static (now 0.38)" in boot.failure.hint
    # the container's driver banner (`ERROR: This container was built for …`) is not the failure
    assert "container" not in boot.failure.message
    assert boot.version_hint == "0.5.11"


def test_sglang_01_glued_tqdm_and_log_lines() -> None:
    boot = _replay("01-sglang-llama32-3b-tp1-hicache-ready.log")[0]
    # `Capturing batches (…)[2026-02-09 14:38:28] Attempting to acquire lock …` is two lines
    assert boot.capture_trail[0] == (32, 34.44)
    assert boot.capture_bs == [1, 2, 4, 8, 12, 16, 24, 32]
    assert boot.metrics.avail_after_load_gib == pytest.approx(37.97)
    assert boot.metrics.avail_after_pool_gib == pytest.approx(34.95)


@pytest.mark.parametrize("name", sorted(CPU_EXTRA))
def test_vllm_cpu_boot_extra_facts(name: str) -> None:
    """The vLLM CPU boots' other facts (vllm-cpu-extra.json)."""
    (boot,) = _replay(name)
    extra = CPU_EXTRA[name]
    names = [p.name.value for p in boot.phases]
    if "version" in extra:
        assert boot.version_hint == extra["version"]
    if "max_num_seqs" in extra:
        assert boot.flags.get("max_num_seqs") == extra["max_num_seqs"]
    if "max_concurrency" in extra:
        assert boot.metrics.max_concurrency == pytest.approx(extra["max_concurrency"])
    for phase in extra.get("phases_include", []):  # type: ignore[attr-defined]
        assert phase in names, names
    for phase in extra.get("phases_exclude", []):  # type: ignore[attr-defined]
        assert phase not in names, names
    if "cell_bytes" in extra:
        assert boot.metrics.cell_bytes == extra["cell_bytes"]
    if "message_starts" in extra:
        assert boot.failure is not None
        assert boot.failure.message.startswith(str(extra["message_starts"])), boot.failure.message
    if "hint_mentions" in extra:
        assert boot.failure is not None
        assert str(extra["hint_mentions"]) in boot.failure.hint
    for key in ("kv_needed_gib", "estimated_max_len"):
        if key in extra:
            assert boot.facts.get(key) == pytest.approx(extra[key])
