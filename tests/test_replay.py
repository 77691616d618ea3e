"""`kvtui replay`: the shared samples, the SGLang fixtures of every version, the pinned JSON shape,
the human output and the exit codes. Figures are checked to the precision the log printed them."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from kvtui.cli import main as cli_main
from kvtui.commands import replay

FIX = Path(__file__).parent / "fixtures"
SGL = FIX / "sglang"

BOOT_KEYS = {"engine", "version_hint", "status", "phase", "phases", "failure", "flags", "metrics", "ranks"}
METRIC_KEYS = {
    "max_total_num_tokens",
    "kv_cache_gib",
    "cell_bytes",
    "avail_before_load_gib",
    "avail_after_load_gib",
    "weights_gib",
    "avail_after_pool_gib",
    "graph_mem_gib",
    "available_gpu_mem_gib",
    "context_len",
    "max_running_requests",
    "max_concurrency",
    "token_usage",
}


def run_replay(path: Path | str, *, as_json: bool = True) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = replay.run(Namespace(path=str(path), json=as_json), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def boots_of(path: Path) -> list[dict[str, object]]:
    _code, out, _ = run_replay(path)
    doc = json.loads(out)
    assert doc["source"] == str(path)
    boots: list[dict[str, object]] = doc["boots"]
    for b in boots:
        assert set(b) == BOOT_KEYS
        assert set(b["metrics"]) == METRIC_KEYS  # type: ignore[arg-type]
    return boots


def phase_names(boot: dict[str, object]) -> list[tuple[str, str]]:
    return [(p["name"], p["model"]) for p in boot["phases"]]  # type: ignore[index, union-attr]


def approx_metrics(boot: dict[str, object], **want: float | int | None) -> None:
    m = boot["metrics"]
    assert isinstance(m, dict)
    for k, v in want.items():
        if isinstance(v, float):
            assert m[k] == pytest.approx(v, abs=0.005), k
        else:
            assert m[k] == v, k


# ---- the shared samples ----------------------------------------------------------------------------


def test_sample_0410_capture_oom() -> None:
    code, out, _ = run_replay(FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log")
    assert code == 1
    (b,) = json.loads(out)["boots"]
    assert (b["engine"], b["status"], b["phase"]) == ("sglang", "failed", "graph_capture")
    assert phase_names(b) == [(p, "target") for p in ("launch", "init", "load_weights", "kv_allocate", "graph_capture")]
    assert b["phases"][0] == {
        "name": "launch",
        "model": "target",
        "start": "2026-04-01T17:40:10",
        "end": "2026-04-01T17:40:16",
        "seconds": 6.0,
    }
    assert b["phases"][2]["seconds"] == 240.0
    f = b["failure"]
    assert f["kind"] == "oom_graph_capture"
    assert f["phase"] == "graph_capture"
    assert f["message"].startswith("Exception: Capture cuda graph failed: torch.OutOfMemoryError: CUDA out of memory.")
    assert f["traceback"][0] == "Scheduler hit an exception: Traceback (most recent call last):"
    assert "Possible solutions:" in f["traceback"]
    assert "--mem-fraction-static (now 0.98)" in f["hint"]
    assert "--cuda-graph-max-bs (now 160)" in f["hint"]
    assert f["hint"].startswith("CUDA-graph capture ran out of GPU memory: lower")
    assert b["flags"]["mem_fraction_static"] == 0.98
    assert b["flags"]["tp_size"] == 2
    assert b["ranks"] == ["TP0", "TP1"]
    approx_metrics(
        b,
        max_total_num_tokens=59821,
        kv_cache_gib=9.12,
        avail_before_load_gib=78.61,
        avail_after_load_gib=10.70,
        weights_gib=67.90,
        avail_after_pool_gib=1.32,
        graph_mem_gib=None,
        available_gpu_mem_gib=None,
        context_len=None,
    )
    # cell = 9.12 GiB / (59,821 + 1 page row): Qwen2.5-72B, 4 KV heads/rank x 128 x 80 layers x 2 x 2 B = 163,840
    assert abs(b["metrics"]["cell_bytes"] - 163840) / 163840 < 0.001


def test_sample_0510_journal_short_iso() -> None:
    code, out, _ = run_replay(FIX / "sglang-0.5.10-llama70b-tp4-ready.journal")
    assert code == 0
    (b,) = json.loads(out)["boots"]
    assert (b["status"], b["phase"]) == ("ready", "ready")
    assert b["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    # journald stamps carry the offset
    assert b["phases"][0]["start"] == "2026-03-04T09:12:00+00:00"
    assert b["phases"][-1]["name"] == "ready"
    assert b["phases"][-1]["end"] is None
    assert b["phases"][-1]["seconds"] is None
    approx_metrics(
        b,
        max_total_num_tokens=432078,
        kv_cache_gib=32.96,
        avail_before_load_gib=78.91,  # min over the ranks' 78.91 .. 78.97
        avail_after_load_gib=44.80,
        weights_gib=34.10,
        avail_after_pool_gib=10.83,
        graph_mem_gib=1.62,
        available_gpu_mem_gib=9.21,
        context_len=131072,
        max_running_requests=2048,
        token_usage=0.0,
    )
    # a capacity, rounded down at 2 decimals (kvtui.fmt's rule): 3.2964… is 3.29, never 3.30
    assert b["metrics"]["max_concurrency"] == 3.29


def test_sample_0514_journal_json_mla() -> None:
    code, out, _ = run_replay(FIX / "sglang-0.5.14-deepseek-v3-tp8-ready.json")
    assert code == 0
    (b,) = json.loads(out)["boots"]
    assert b["status"] == "ready"
    assert b["version_hint"] == ">=0.5.14"
    assert len(b["ranks"]) == 8
    assert b["phases"][0]["start"] == "2026-07-09T06:00:00+00:00"
    approx_metrics(
        b,
        max_total_num_tokens=570180,
        kv_cache_gib=37.32,
        avail_before_load_gib=138.21,
        avail_after_load_gib=53.90,
        avail_after_pool_gib=16.51,
        graph_mem_gib=3.05,
        available_gpu_mem_gib=13.46,
        context_len=163840,
        max_running_requests=128,
    )
    # MLA: (512 + 64) x 61 layers x 2 B = 70,272 B/token, not split by TP
    assert abs(b["metrics"]["cell_bytes"] - 70272) / 70272 < 0.001


def test_year_less_vllm_stamps_take_the_year_from_the_clock() -> None:
    from datetime import datetime

    path = FIX / "vllm-0.11-llama8b-tp2-ready.log"
    with path.open("rb") as f:
        boots, shape = replay.analyse(replay.read_chunks(f, "x"), clock=lambda: datetime(2031, 12, 1, 3, 4, 5))
    assert shape == "raw"
    first = boots[0].phases[0].start
    assert first is not None
    # `INFO 08-21 10:02:03` prints no year: the clock's (a log is never from the future)
    assert (first.year, first.month, first.day) == (2031, 8, 21)


def test_sample_vllm_011() -> None:
    code, out, _ = run_replay(FIX / "vllm-0.11-llama8b-tp2-ready.log")
    assert code == 0
    (b,) = json.loads(out)["boots"]
    assert (b["engine"], b["status"], b["version_hint"]) == ("vllm", "ready", "0.11.0")
    approx_metrics(b, max_total_num_tokens=1005472, kv_cache_gib=61.37, graph_mem_gib=0.62, context_len=131072)
    assert b["metrics"]["max_concurrency"] == pytest.approx(7.67)
    assert b["flags"]["gpu_memory_utilization"] == 0.9


# ---- SGLang fixtures per version --------------------------------------------------------------------


def test_0410_eagle_draft_pool_never_overwrites_the_target() -> None:
    (b,) = boots_of(SGL / "sglang-0.4.10-llama8b-tp2-eagle-ready.log")
    assert b["status"] == "ready"
    assert phase_names(b) == [
        ("launch", "target"),
        ("init", "target"),
        ("load_weights", "target"),
        ("kv_allocate", "target"),
        ("graph_capture", "target"),
        ("load_weights", "draft"),
        ("kv_allocate", "draft"),
        ("graph_capture", "draft"),
        ("http_up", "target"),
        ("ready", "target"),
    ]
    approx_metrics(
        b,
        max_total_num_tokens=963543,
        kv_cache_gib=58.80,
        avail_before_load_gib=78.57,
        avail_after_load_gib=70.60,
        weights_gib=7.97,
        avail_after_pool_gib=11.47,
        graph_mem_gib=0.62,
        available_gpu_mem_gib=7.62,
        max_running_requests=48,
        token_usage=0.07,
    )
    assert b["flags"]["speculative_algorithm"] == "EAGLE"


def test_0512_eagle3_every_rank_prints_its_draft() -> None:
    (b,) = boots_of(SGL / "sglang-0.5.12-qwen3-32b-tp4-eagle3-ready.log")
    approx_metrics(
        b,
        max_total_num_tokens=774307,
        kv_cache_gib=47.26,
        avail_before_load_gib=78.20,
        avail_after_load_gib=62.90,
        avail_after_pool_gib=15.24,
        graph_mem_gib=1.15,  # max over ranks: TP3's 1.15
        cell_bytes=65536,
    )
    assert ("graph_capture", "draft") in phase_names(b)


def test_0515_dsa_fp8_page_64() -> None:
    meta = json.loads((SGL / "sglang-0.5.15-deepseek-v32-dsa-fp8-tp8-ready.meta.json").read_text())
    (b,) = boots_of(SGL / "sglang-0.5.15-deepseek-v32-dsa-fp8-tp8-ready.log")
    assert b["version_hint"] == ">=0.5.14"
    assert b["flags"]["page_size"] == 64
    assert b["flags"]["kv_cache_dtype"] == "fp8_e4m3"
    approx_metrics(
        b, max_total_num_tokens=meta["tokens"], kv_cache_gib=meta["kv_gib"], avail_after_pool_gib=meta["pool_end"]
    )
    # the pool allocates 656 + 132 B/layer x 61 layers (fp8 DSA): KV size / (#tokens + page 64)
    assert abs(b["metrics"]["cell_bytes"] - 788 * 61) / (788 * 61) < 0.001
    # ms stamps
    assert b["phases"][1]["start"] == "2026-04-20T12:00:06.500000"


def test_0523_dict_args_and_new_capture_wording() -> None:
    (b,) = boots_of(SGL / "sglang-0.5.23-llama70b-fp8-tp4-dictargs-ready.log")
    assert b["version_hint"] == ">=0.5.23"
    assert b["flags"]["cuda_graph_max_bs_decode"] == 256
    assert b["flags"]["api_key"] is None
    approx_metrics(
        b,
        max_total_num_tokens=1450172,
        kv_cache_gib=44.26,
        avail_before_load_gib=78.12,
        avail_after_pool_gib=15.40,
        graph_mem_gib=2.16,  # prefill 0.80 + decode 1.36 on TP3
        available_gpu_mem_gib=13.25,
    )
    assert phase_names(b).count(("graph_capture", "target")) == 1


def test_0513_mla_kimi() -> None:
    (b,) = boots_of(SGL / "sglang-0.5.13-kimi-k2-mla-tp8-ready.log")
    approx_metrics(b, max_total_num_tokens=692406, kv_cache_gib=45.31, graph_mem_gib=2.02, context_len=200000)
    assert abs(b["metrics"]["cell_bytes"] - 70272) / 70272 < 0.001


def test_dsv4_has_no_kv_line_but_its_own_figures() -> None:
    (b,) = boots_of(SGL / "sglang-0.5.23-deepseek-v4-flash-tp4-ep4-ready.log")
    assert b["ranks"] == ["TP0 EP0", "TP1 EP1", "TP2 EP2", "TP3 EP3"]
    approx_metrics(b, max_total_num_tokens=50064128, kv_cache_gib=None, cell_bytes=1671, avail_after_pool_gib=52.05)


def test_dp_attention_serving_aggregates_dp_ranks() -> None:
    (b,) = boots_of(SGL / "sglang-0.5.10-deepseek-v3-dp4-attention-ready.log")
    assert b["ranks"] == ["DP0 TP0", "DP1 TP1", "DP2 TP2", "DP3 TP3"]
    approx_metrics(b, token_usage=0.32)  # the fullest DP rank (DP3: 0.30 + 0.02)


@pytest.mark.parametrize(
    ("name", "kind", "phase", "message"),
    [
        ("fail-0.5.10-not-enough-memory.log", "oom_kv_allocate", "kv_allocate", "RuntimeError: Not enough memory."),
        (
            "fail-0.5.2x-weights-leave-no-room.log",
            "oom_kv_allocate",
            "kv_allocate",
            "RuntimeError: Loaded weights leave no",
        ),
        (
            "fail-0.5.23-decode-capture-oom.log",
            "oom_graph_capture",
            "graph_capture",
            "Exception: Capture cuda graph failed",
        ),
        (
            "fail-0.5.23-prefill-capture-oom.log",
            "oom_graph_capture",
            "graph_capture",
            "Exception: Capture prefill CUDA graph",
        ),
        ("fail-0.5.14-weights-oom.log", "oom_weights", "load_weights", "torch.OutOfMemoryError: CUDA out of memory."),
        ("fail-0.5.10-nccl-init.log", "nccl", "init", "RuntimeError: NCCL error: unhandled system error"),
        ("fail-0.5.12-rank-sigkill.log", "crash", "load_weights", "Rank 3 scheduler died during initialization"),
        ("fail-0.5.16-watchdog-crash.log", "crash", "load_weights", "Subprocess scheduler_1 (pid=41733) crashed"),
        ("fail-0.4.10-tp-memory-unbalanced.log", "gpu_busy", "init", "ValueError: The memory capacity is unbalanced"),
        ("fail-0.5.10-warmup.log", "crash", "http_up", "AssertionError: <Response [500]>"),
        ("fail-0.5.13-runtime-oom.log", "oom_runtime", "ready", "torch.OutOfMemoryError: CUDA out of memory."),
    ],
)
def test_failure_fixtures(name: str, kind: str, phase: str, message: str) -> None:
    code, out, _ = run_replay(SGL / name)
    assert code == 1
    (b,) = json.loads(out)["boots"]
    assert b["status"] == "failed"
    f = b["failure"]
    assert (f["kind"], f["phase"]) == (kind, phase)
    assert f["message"].startswith(message)
    assert f["hint"]
    assert 1 <= len(f["traceback"]) <= 40
    assert f["message"] in f["traceback"]
    # the phase it died in is closed at the failure
    assert all(p["end"] is not None for p in b["phases"])


def test_failure_hints_point_the_right_way() -> None:
    def hint(name: str) -> str:
        (b,) = boots_of(SGL / name)
        return str(b["failure"]["hint"])  # type: ignore[index]

    assert "raise --mem-fraction-static (now 0.5)" in hint("fail-0.5.10-not-enough-memory.log")
    assert "lower --mem-fraction-static (now 0.95)" in hint("fail-0.5.23-decode-capture-oom.log")
    assert "dmesg" in hint("fail-0.5.12-rank-sigkill.log")
    assert "free the GPUs" in hint("fail-0.4.10-tp-memory-unbalanced.log")
    assert "NCCL_DEBUG=INFO" in hint("fail-0.5.10-nccl-init.log")
    assert "while serving" in hint("fail-0.5.13-runtime-oom.log")


def test_two_boots_in_a_raw_log() -> None:
    code, out, _ = run_replay(SGL / "two-boots-restart.log")
    assert code == 0  # the last boot is ready
    first, second = json.loads(out)["boots"]
    assert (first["status"], first["failure"]["kind"]) == ("failed", "oom_kv_allocate")
    assert first["flags"]["mem_fraction_static"] == 0.4
    assert (second["status"], second["flags"]["mem_fraction_static"]) == ("ready", 0.85)
    assert second["phases"][0]["start"] == "2026-03-20T10:03:38"


def test_journal_with_systemd_restarts_and_stops() -> None:
    code, out, _ = run_replay(SGL / "journal-short-iso-three-boots.journal")
    assert code == 0  # the last boot was stopped by the operator
    b1, b2, b3 = json.loads(out)["boots"]
    assert (b1["status"], b1["failure"]["kind"]) == ("failed", "oom_graph_capture")
    assert b1["phases"][0]["start"] == "2026-03-21T09:00:01+01:00"  # systemd `Started`: launch begins
    assert b2["status"] == "ready"
    assert b2["failure"] is None
    assert b3["status"] == "stopped"
    assert b3["phase"] == "load_weights"
    assert b3["failure"] is None
    assert b3["phases"][-1]["end"] is not None


# ---- input handling and exit codes -------------------------------------------------------------------


def test_no_boot_is_an_empty_list_a_note_and_exit_0(tmp_path: Path) -> None:
    """Readable text without a boot is an answer (zero boots), not unreadable input."""
    p = tmp_path / "noise.log"
    p.write_bytes("garbage ü\nnot a log line\r\n".encode() * 100)
    code, out, err = run_replay(p)
    assert code == 0
    assert json.loads(out) == {"source": str(p), "boots": [], "unrecognised": []}
    assert "no SGLang or vLLM boot found in" in err


@pytest.mark.parametrize(
    "data",
    [b"\x00\xff\xfe garbage\nnot a log line\r\n" * 100, bytes(range(256)) * 40, b"\x7fELF\x02\x01" + b"\x01" * 5000],
    ids=["nul-and-text", "every-byte", "control-bytes"],
)
@pytest.mark.parametrize("gz", [False, True])
def test_binary_input_is_unreadable_exit_3(tmp_path: Path, data: bytes, gz: bool) -> None:
    """Issue 10, item 10: a binary file is not "no boot found" (exit 0) but unreadable input (3)."""
    p = tmp_path / ("blob.bin.gz" if gz else "blob.bin")
    p.write_bytes(gzip.compress(data) if gz else data)
    code, out, err = run_replay(p)
    assert code == 3
    assert out == ""
    assert f"kvtui replay: {p}: binary data, not a text log" in err


def test_the_readme_is_text_without_a_boot(capsys: pytest.CaptureFixture[str]) -> None:
    readme = Path(__file__).parents[1] / "README.md"
    assert cli_main(["replay", str(readme)]) == 0
    assert "no SGLang or vLLM boot found in" in capsys.readouterr().err
    assert cli_main(["calc", "--log", str(readme)]) == 3  # calc needs a boot: same sentence, exit 3
    assert "no SGLang or vLLM boot found in" in capsys.readouterr().err


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    code, out, err = run_replay(p)
    assert (code, json.loads(out)["boots"]) == (0, [])
    assert "no SGLang or vLLM boot" in err


@pytest.mark.parametrize("bad", ["missing.log", "."])
def test_unreadable_input_exits_3(bad: str, tmp_path: Path) -> None:
    code, out, err = run_replay(tmp_path / bad if bad != "." else tmp_path)
    assert code == 3
    assert out == ""
    assert err.startswith("kvtui replay: ")
    assert str(tmp_path) in err


def test_gzip_input(tmp_path: Path) -> None:
    p = tmp_path / "boot.log.gz"
    p.write_bytes(gzip.compress((FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_bytes()))
    code, out, _ = run_replay(p)
    assert code == 1
    assert json.loads(out)["boots"][0]["failure"]["kind"] == "oom_graph_capture"


def test_small_chunks_give_the_same_answer(tmp_path: Path) -> None:
    path = SGL / "journal-short-iso-three-boots.journal"
    whole, _ = replay.analyse(iter([path.read_bytes()]))
    with path.open("rb") as f:
        chunked, _ = replay.analyse(replay.read_chunks(f, "x", chunk_bytes=97))
    assert [b.to_json() for b in whole] == [b.to_json() for b in chunked]


def _summary(boots: list[object]) -> list[object]:
    return [
        (b.to_json(), b.facts, b.draft_facts, b.rank_facts, b.capture_trail, b.capture_bs, b.live)  # type: ignore[attr-defined]
        for b in boots
    ]


@pytest.mark.parametrize("shape", ["raw", "short", "short-iso", "json"])
def test_two_core_replay_equals_one_pass(shape: str, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    from gen_log import write

    path = tmp_path / f"log-{shape}.log"
    write(path, shape, 30_000)
    seq, seq_shape = replay.analyse(replay.read_chunks(path.open("rb"), "x"))
    par, par_shape = replay.analyse_path(str(path), parallel_min_bytes=0)
    assert par_shape == seq_shape == shape
    assert len(par) == 8
    assert _summary(par) == _summary(seq)


@pytest.mark.parametrize(
    "name",
    [
        "sglang/journal-short-iso-three-boots.journal",
        "sglang/fail-0.5.13-runtime-oom.log",
        "sglang/two-boots-restart.log",
        "real/03-sglang-laguna-int4-tp1-swa-dflash-ready.log",
        "real/06-vllm-gptoss120b-tp4-ray-multinode-ready.log",
        "sglang-0.5.14-deepseek-v3-tp8-ready.json",
    ],
)
def test_two_core_replay_cut_anywhere_equals_one_pass(name: str) -> None:
    path = FIX / name
    seq, _ = replay.analyse(replay.read_chunks(path.open("rb"), "x"))
    par, _ = replay.analyse_path(str(path), parallel_min_bytes=0)
    assert _summary(par) == _summary(seq)


def test_two_core_replay_falls_back_when_the_worker_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(replay, "_filter_tail", broken)
    path = FIX / "sglang" / "journal-short-iso-three-boots.journal"
    par, _ = replay.analyse_path(str(path), parallel_min_bytes=0)
    seq, _ = replay.analyse(replay.read_chunks(path.open("rb"), "x"))
    assert _summary(par) == _summary(seq)


def test_a_fifo_is_read_in_one_pass(tmp_path: Path) -> None:
    import os
    import threading

    fifo = tmp_path / "boot.fifo"
    os.mkfifo(fifo)
    data = (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_bytes()

    def writer() -> None:
        with fifo.open("wb") as f:
            f.write(data)

    t = threading.Thread(target=writer)
    t.start()
    boots, shape = replay.analyse_path(str(fifo), parallel_min_bytes=0)
    t.join(timeout=10)
    assert shape == "raw"
    assert boots[0].failure is not None


def test_stdin_and_the_cli_entry_point() -> None:
    data = (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "kvtui", "replay", "-", "--json"],
        input=data,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["source"] == "-"
    assert doc["boots"][0]["status"] == "failed"


def test_cli_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["replay"])
    assert exc.value.code == 2


def test_human_output() -> None:
    code, out, _ = run_replay(FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log", as_json=False)
    assert code == 1
    assert "Boot 1 of 1 in this log · sglang (version not printed) · FAILED in graph_capture · TP0, TP1" in out
    assert "load_weights   target  2026-04-01 17:40:20          4m 00s  30/30" in out
    assert "59,821 tokens · 9.12 GiB" in out
    assert "free before weights 78.61 GiB · weights 67.90 GiB · free after weights 10.70 GiB" in out
    assert "Failure: oom_graph_capture in graph_capture" in out
    assert "hint: CUDA-graph capture ran out of GPU memory" in out
    code, out, _ = run_replay(SGL / "sglang-0.5.13-kimi-k2-mla-tp8-ready.log", as_json=False)
    assert code == 0
    assert "READY" in out
    assert "8 ranks (TP0 … TP7)" in out
    assert "context 200,000 tokens" in out
    assert "mem_fraction_static=0.85" in out


def test_a_boot_with_no_figures_prints_no_figures_heading() -> None:
    """Issue 22 #15: replay printed an empty `Figures` heading for a boot with none."""
    from kvtui.boot.model import Boot
    from kvtui.commands.bootview import render_boot
    from kvtui.engines.events import Engine

    lines = render_boot(Boot(engine=Engine.VLLM), 1, 1)
    assert not any("Figures" in line for line in lines)
    boot = Boot(engine=Engine.SGLANG, flags={"tp_size": 2})
    lines = render_boot(boot, 1, 1)
    i = next(i for i, line in enumerate(lines) if line.startswith("  Figures"))
    assert "tp_size=2" in lines[i + 1]
