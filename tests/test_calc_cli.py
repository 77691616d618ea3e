"""``kvtui calc`` end to end: the real CLI entry point on real and generated logs.

Exit codes (issue 3): 1 on oom_risk / no_fit, 0 otherwise (also at low confidence), 2 usage,
3 unreadable input. JSON on stdout, errors on stderr.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtui.cli import main

FIX = Path(__file__).parent / "fixtures"
KV = FIX / "kvcalc"
QWEN_OOM = FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log"
LLAMA_JOURNAL = FIX / "sglang-0.5.10-llama70b-tp4-ready.journal"
DSV3_JSON = FIX / "sglang-0.5.14-deepseek-v3-tp8-ready.json"

JSON_KEYS = [
    "engine",
    "basis",
    "confidence",
    "calibration",
    "observed",
    "edits",
    "predicted",
    "min_mem_fraction_for_full_context",
    "max_safe_fraction",
    "verdict",
    "reasons",
    "explain",
]




def calc(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["calc", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def calc_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = calc(capsys, *argv, "--json")
    assert out, err
    data = json.loads(out)
    assert list(data) == JSON_KEYS
    return code, data


# ---------------------------------------------------------------------------------------------
# Verdicts and exit codes
# ---------------------------------------------------------------------------------------------


def test_capture_oom_sample_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = calc(capsys, "--log", str(QWEN_OOM))
    assert code == 1, err
    assert err == ""
    assert "verdict    OOM_RISK" in out
    assert "59,821 tokens" in out  # thousands separators
    assert "KV 9.12 GiB per rank" in out
    assert "1.32 GiB free after the pools" in out
    assert "cell 163,840 B/token/rank" in out
    assert re.search(r"max safe mem_fraction_static \(verdict ok\)\s+0\.9\d+", out)
    assert "rest = A − P·(1 − f) = 10.70 − 78.61 × (1 − 0.98) = 9.13 GiB" in out
    assert "tried to allocate 1.02 GiB at bs=64" in out
    assert "boot 1 of 1 in" in out
    assert "confidence high" in out


def test_capture_oom_sample_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = calc_json(capsys, "--log", str(QWEN_OOM))
    assert code == 1
    assert data["engine"] == "sglang"
    assert data["basis"] == "calibrated"
    assert data["confidence"] == "high"
    assert data["verdict"] == "oom_risk"
    obs = data["observed"]
    assert obs == {
        "mem_fraction_static": 0.98,
        "max_total_num_tokens": 59821,
        "avail_after_pool_gib": 1.32,
        "graph_mem_gib": None,
        "cell_bytes": 163840,
        "sizing_cell_bytes": 163840,
        "page_size": 1,
    }
    safe = data["max_safe_fraction"]
    assert isinstance(safe, float)
    assert 0.9 < safe < 0.98
    # at the max safe fraction the same command says ok and exits 0
    code2, data2 = calc_json(capsys, "--log", str(QWEN_OOM), "--set", f"mem-fraction-static={safe}")
    assert code2 == 0
    assert data2["verdict"] == "ok"
    assert data2["edits"] == {"mem_fraction_static": safe}
    pred = data2["predicted"]
    assert isinstance(pred, dict)
    assert set(pred) == {
        "max_total_num_tokens",
        "kv_cache_gib",
        "avail_after_pool_gib",
        "graph_headroom_gib",
        "req_to_token_gib",
        "full_context_requests",
        "tokens_per_0_01",
    }
    assert pred["graph_headroom_gib"] >= 1.0 + 1.0  # margin + activations for an 8192-token chunk


def test_ready_journal_with_edits_is_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = calc_json(
        capsys, "--log", str(LLAMA_JOURNAL), "--set", "mem-fraction-static=0.9", "--set", "max-num-seqs=64"
    )
    assert code == 0
    assert data["verdict"] == "ok"
    assert data["edits"] == {"mem_fraction_static": 0.9, "max_running_requests": 64}
    pred = data["predicted"]
    assert isinstance(pred, dict)
    assert pred["max_total_num_tokens"] == pytest.approx(432078 + 78.91 * 0.05 * (1 << 30) / 81920, abs=300)
    assert pred["req_to_token_gib"] == pytest.approx(64 * 131076 * 4 / (1 << 30), abs=1e-4)


def test_a_misspelt_flag_is_refused_as_apply_refuses_it(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 22 #12: `calc --set mem-fraction-statc=0.9` said OK and exited 0 (the prediction was
    for the flags as they are); now exit 4 with the nearest flag named, in apply's words."""
    code, out, err = calc(capsys, "--log", str(LLAMA_JOURNAL), "--set", "mem-fraction-statc=0.9")
    assert code == 4
    assert out == ""
    assert "--mem-fraction-statc is not a flag SGLang accepts" in err
    assert "nearest known flags: --mem-fraction-static" in err
    # with --json too, and a flag the running boot's own dump has (not in kvtui's table) is fine
    code, out, err = calc(capsys, "--log", str(LLAMA_JOURNAL), "--set", "mem-fraction-statc=0.9", "--json")
    assert (code, out) == (4, "")
    code, _ = calc_json(capsys, "--log", str(LLAMA_JOURNAL), "--set", "enable-torch-compile",
                        "--set", "schedule-policy=lpm")
    assert code == 0


def test_no_fit_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = calc_json(capsys, "--log", str(LLAMA_JOURNAL), "--set", "mem_fraction_static=0.3")
    assert code == 1
    assert data["verdict"] == "no_fit"
    assert any("Not enough memory" in r for r in data["reasons"])


def test_low_confidence_still_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = calc_json(capsys, "--log", str(KV / "sglang-unexplained-tp4.log"))
    assert code == 0
    assert data["confidence"] == "low"
    code, out, _ = calc(capsys, "--log", str(KV / "sglang-unexplained-tp4.log"))
    assert code == 0
    assert "confidence low: treat the numbers as estimates" in out


def test_full_context_k(capsys: pytest.CaptureFixture[str]) -> None:
    _, one = calc_json(capsys, "--log", str(DSV3_JSON))
    code, four = calc_json(capsys, "--log", str(DSV3_JSON), "--full-context", "4")
    assert one["verdict"] == "ok"
    assert code == 0
    assert four["verdict"] == "tight"  # 570,180 tokens hold 3.48 requests of 163,840
    assert isinstance(four["min_mem_fraction_for_full_context"], float)
    assert four["min_mem_fraction_for_full_context"] > one["min_mem_fraction_for_full_context"]


def test_two_point_from_a_log_with_two_boots(capsys: pytest.CaptureFixture[str]) -> None:
    truth = json.loads((KV / "truth.json").read_text())["sglang-pair-gqa70b-tp4.log"]["boots"]
    code, data = calc_json(
        capsys, "--log", str(KV / "sglang-pair-gqa70b-tp4.log"), "--set", f"mem-fraction-static={truth[0]['fraction']}"
    )
    assert code == 0
    assert data["basis"] == "two-point"
    # the log's other boot placed the slope with the chosen one; none came from the history
    assert data["calibration"] == {"method": "two-point", "boots": 2, "env": None, "from_log": 1, "from_history": 0}
    assert data["predicted"]["max_total_num_tokens"] == pytest.approx(truth[0]["tokens"], rel=0.005)
    code, out, _ = calc(capsys, "--log", str(KV / "sglang-pair-gqa70b-tp4.log"), "--boot", "1")
    assert code == 0
    assert "boot 1 of 2" in out
    assert "basis two-point" in out


def test_vllm_pair_gives_the_device_total(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = calc_json(
        capsys, "--log", str(KV / "vllm-pair-llama8b-tp2.log"), "--set", "gpu-memory-utilization=0.95"
    )
    assert code == 0, data["reasons"]
    assert data["engine"] == "vllm"
    assert data["basis"] == "two-point"
    # a GPU boot: the CPU backend's pool variable was not set (the history keys calibration on it)
    assert data["calibration"] == {"method": "two-point", "boots": 2, "env": None,
                                   "from_log": 1, "from_history": 0}
    assert set(data["observed"]) == {
        "gpu_memory_utilization",
        "max_total_num_tokens",
        "avail_after_pool_gib",
        "graph_mem_gib",
        "cell_bytes",
        "sizing_cell_bytes",
        "block_size",
    }
    assert data["edits"] == {"gpu_memory_utilization": 0.95}


def test_vllm_single_boot_needs_the_device_total_to_move(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = calc(capsys, "--log", str(FIX / "vllm-0.11-llama8b-tp2-ready.log"), "--set", "gmu=0.95")
    assert code == 2
    assert out == ""
    assert "--gpu-mem-gib" in err
    code, data = calc_json(
        capsys, "--log", str(FIX / "vllm-0.11-llama8b-tp2-ready.log"), "--gpu-mem-gib", "79.19", "--set", "gmu=0.95"
    )
    assert code == 0
    assert data["predicted"]["max_total_num_tokens"] > 1005472
    code, data = calc_json(
        capsys,
        "--log",
        str(FIX / "vllm-0.11-llama8b-tp2-ready.log"),
        "--gpu-mem-gib",
        "79.19",
        "--set",
        "max-model-len=2000000",
    )
    assert code == 1
    assert data["verdict"] == "no_fit"


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(QWEN_OOM.read_bytes())))
    code, data = calc_json(capsys, "--log", "-")
    assert code == 1
    assert data["verdict"] == "oom_risk"


# ---------------------------------------------------------------------------------------------
# --model
# ---------------------------------------------------------------------------------------------

LLAMA70B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}


def test_model_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA70B))
    code, data = calc_json(
        capsys,
        "--model",
        str(cfg),
        "--gpu-mem-gib",
        "79.19",
        "--tp",
        "4",
        "--weights-gib",
        "32.85",
        "--set",
        "mem-fraction-static=0.85",
    )
    assert code == 0
    assert data["basis"] == "config"
    assert data["calibration"] == {"method": "config", "boots": 0, "env": None, "from_log": 0, "from_history": 0}
    assert data["confidence"] == "low"
    assert data["observed"]["cell_bytes"] == 81920
    assert data["predicted"]["max_total_num_tokens"] == pytest.approx(439766, rel=0.01)
    code, out, _ = calc(capsys, "--model", str(cfg), "--gpu-mem-gib", "79.19", "--tp", "4", "--engine", "vllm")
    assert code == 0
    assert "vllm" in out
    assert "config" in out
    # a config's figures were never seen: "estimated", not "observed" (issue 22 #5)
    assert any(line.startswith("estimated  gpu_memory_utilization") for line in out.splitlines()), out
    assert not any(line.startswith("observed") for line in out.splitlines())


# ---------------------------------------------------------------------------------------------
# Usage (2) and unreadable input (3)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--log", str(QWEN_OOM), "--set", "mem-fraction-static=1.5"], "expected a fraction between 0 and 1"),
        (["--log", str(QWEN_OOM), "--set", "mem-fraction-static"], "expected FLAG=VALUE"),
        (["--log", str(QWEN_OOM), "--set", "max-running-requests=many"], "expected a whole number"),
        (["--log", str(QWEN_OOM), "--full-context", "0"], "--full-context 0"),
        (["--log", str(QWEN_OOM), "--tp", "4"], "--tp goes with --model"),
        (["--log", str(QWEN_OOM), "--gpu-mem-gib", "-3"], "--gpu-mem-gib -3"),
        (["--log", str(QWEN_OOM), "--boot", "5"], "--boot 5: the log holds 1 boot"),
        (["--model", "config.json", "--tp", "4"], "--model needs --gpu-mem-gib"),
        (["--model", "config.json", "--gpu-mem-gib", "80", "--tp", "2", "--boot", "1"], "--boot goes with --log"),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = calc(capsys, *argv)
    assert code == 2
    assert out == ""
    assert message in err
    assert "Traceback" not in err


def test_argparse_usage_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["calc"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["calc", "--log", "x", "--model", "y"])
    assert exc.value.code == 2


def test_unreadable_inputs_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cases: list[tuple[list[str], str]] = [
        (["--log", str(tmp_path / "missing.log")], "no such file"),
        (["--log", str(tmp_path)], "is a directory"),
        (["--model", str(tmp_path / "missing.json"), "--gpu-mem-gib", "80", "--tp", "1"], "no such file"),
    ]
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{ not json")
    cases.append((["--model", str(bad_json), "--gpu-mem-gib", "80", "--tp", "1"], "not valid JSON (line 1"))
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    cases.append((["--model", str(arr), "--gpu-mem-gib", "80", "--tp", "1"], "expected a JSON object"))
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"hidden_size": 4096}))
    cases.append(
        (
            ["--model", str(partial), "--gpu-mem-gib", "80", "--tp", "1", "--weights-gib", "10"],
            "num_hidden_layers missing",
        )
    )
    for argv, message in cases:
        code, out, err = calc(capsys, *argv)
        assert code == 3, (argv, err)
        assert out == ""
        assert message in err, err
        assert "Traceback" not in err


def test_logs_without_a_sized_pool_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    code, out, err = calc(capsys, "--log", str(empty))
    assert code == 3
    assert out == ""
    assert "no SGLang or vLLM boot found in" in err
    code, out, err = calc(capsys, "--log", str(KV / "sglang-not-enough-memory-tp4.log"))
    assert code == 3
    assert out == ""
    assert "no boot in the log sized its KV pool" in err
    assert "oom_kv_allocate" in err
    code, out, err = calc(capsys, "--log", str(KV / "sglang-not-enough-memory-tp4.log"), "--boot", "1")
    assert code == 3
    assert "never sized its KV pool" in err
    assert "Not enough memory" in err


# ---------------------------------------------------------------------------------------------
# hosts.toml [calc] graph_margin_gib
# ---------------------------------------------------------------------------------------------


def test_graph_margin_from_hosts_toml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _, default = calc_json(capsys, "--log", str(LLAMA_JOURNAL))
    (tmp_path / "hosts.toml").write_text("[calc]\ngraph_margin_gib = 4.0\n")  # cwd is tmp_path (conftest)
    _, wide = calc_json(capsys, "--log", str(LLAMA_JOURNAL))
    assert wide["max_safe_fraction"] < default["max_safe_fraction"]
    assert any("oom_risk below 4.00" in e for e in wide["explain"])
    (tmp_path / "hosts.toml").write_text("[calc]\ngraph_margin = 4.0\n")
    code, out, err = calc(capsys, "--log", str(LLAMA_JOURNAL), "--json")
    assert code == 0
    assert "warning: ignoring" in err
    assert "graph_margin_gib" in err
    assert json.loads(out)["max_safe_fraction"] == default["max_safe_fraction"]
    code = main(["--hosts", str(tmp_path / "hosts.toml"), "calc", "--log", str(LLAMA_JOURNAL)])
    out, err = capsys.readouterr()
    assert code == 3
    assert out == ""
    assert "graph_margin" in err


# --host: calibrate from a live host's log (the simulated demo host; no network)


def test_host_calibrates_from_the_demo_hosts_boot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "hosts.toml").write_text("[hosts.fast]\ndemo = true\ndemo_speed = 600.0\n")
    code, out, err = calc(capsys, "--host", "fast", "--set", "mem-fraction-static=0.9", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["basis"] == "calibrated"
    assert doc["observed"]["mem_fraction_static"] == 0.85
    # the demo's default preset is the brief's Kimi story: 192,406 tokens at 0.85
    assert doc["observed"]["max_total_num_tokens"] == 192_406
    assert doc["predicted"]["max_total_num_tokens"] > 192_406


def test_host_unknown_exits_3_naming_the_known_hosts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "hosts.toml").write_text("[hosts.fast]\ndemo = true\n")
    code, out, err = calc(capsys, "--host", "gpu-a")
    assert code == 3
    assert out == ""
    assert "gpu-a" in err
    assert "fast" in err
