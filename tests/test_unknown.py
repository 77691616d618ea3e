"""Lines that look like startup information but that no rule recognised (issue 11): ``kvtui replay
PATH --unknown``, the JSON ``"unrecognised"`` list, the console's quiet count and its key.

Every fixture and shared sample is read with its count pinned: what is left unrecognised there is
explained here (the one log with any is a user's patched SGLang build, whose two extra lines carry
nothing kvtui shows)."""

from __future__ import annotations

import gzip
import io
import json
from argparse import Namespace
from pathlib import Path

import pytest
from test_ui_helpers import FakeClock, Harness, demo_app, plain, ready_boot, run_clock, start_demo

from kvtui.boot import BootStatus, BootTracker
from kvtui.commands import replay
from kvtui.engines.events import LogRecord
from kvtui.engines.parse import LineParser
from kvtui.engines.unknown import UnrecognisedShape, looks_like_startup, shape_of
from kvtui.ui.screens import NoticeScreen
from kvtui.ui.widgets.boot import BootFigures

FIX = Path(__file__).parent / "fixtures"

# the only fixture with unrecognised startup lines: a user's SGLang build with NVFP4 KV-cache
# calibration and a Frozen-KV MTP draft (neither line is in a released SGLang; neither carries a
# figure kvtui shows)
EXPECTED_COUNTS = {"real/37-sglang-0.5.11-gemma4-frozen-kv-mtp-hybrid-ready.log": 2}

SGL_HEAD = """\
[2025-12-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1, mem_fraction_static=0.8)
[2025-12-01 10:00:01] Load weight begin. avail mem=79.10 GB
[2025-12-01 10:00:09] Load weight end. type=LlamaForCausalLM, avail mem=63.90 GB, mem usage=15.20 GB.
"""
SGL_TAIL = """\
[2025-12-01 10:00:10] KV Cache is allocated. #tokens: 400000, K size: 24.41 GB, V size: 24.41 GB
[2025-12-01 10:00:10] Memory pool end. avail mem=14.20 GB
[2025-12-01 10:00:20] The server is fired up and ready to roll!
"""
NEW_BUILD = """\
[2025-12-01 10:00:09] Prefix cache warmed: 1200 blocks in 0.8 s
[2025-12-01 10:00:09] Prefix cache warmed: 64 blocks in 0.1 s
[2025-12-01 10:00:10] Reserved 2.50 GB for the expert bank on cuda:0
[2025-12-01 10:00:10] hello from the scheduler
"""


def fixture_logs() -> list[Path]:
    logs = [
        p
        for p in sorted(FIX.rglob("*"))
        if p.is_file()
        and p.suffix not in (".py", ".md", ".bin", ".csv", ".conf", ".service", ".sh", ".toml")
        and not p.name.startswith("expected")
        and not p.name.endswith(".meta.json")
        and not (p.suffix == ".json" and p.parent.name == "real")  # facts, not logs
        and p.parent.name not in ("themes", "kvcalc", "flags", "gpu")
    ]
    return logs  # the shared samples are among them (copied into fixtures/ and fixtures/real/)


def unrecognised_of(path: Path) -> list[UnrecognisedShape]:
    items: list[UnrecognisedShape] = []
    replay.analyse_path(str(path), unrecognised=items)
    return items


def run(path: Path, **flags: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = Namespace(path=str(path), json=flags.get("json", False), unknown=flags.get("unknown", False))
    code = replay.run(args, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


# --- the shape of a line ----------------------------------------------------------------------


def test_shape_masks_numbers_but_not_names() -> None:
    assert shape_of("NVFP4 KV cache 15/35 layers, 3.2 GiB on cuda:0 (TP0), 1,024 tokens at 0x7ffab") == (
        "NVFP4 KV cache N/N layers, N GiB on cuda:N (TP0), N tokens at HEX"
    )
    assert shape_of("a   b\t\tc") == "a b c"
    assert len(shape_of("cache " + "x" * 500)) == 160


@pytest.mark.parametrize(
    ("text", "looks"),
    [
        ("Reserved 2.50 GB for the expert bank", True),
        ("Reserved 512 MiB", True),
        ("Prefix cache warmed", True),
        ("Building the graph pool", True),
        ("Capturing something new", True),
        ("Loading the expert bank", True),
        ("NCCL version 2.27", True),
        ("ValueError: something", False),  # a traceback's last line
        ("Engine core initialization hit an Error in the pool", True),
        ("Frobnicating: 42%|████", True),
        ("hello from the scheduler", False),
        ("  File \"/x/cache.py\", line 3, in f", False),
        ("    indented continuation with cache", False),
        ("", False),
    ],
)
def test_what_looks_like_startup_information(text: str, looks: bool) -> None:
    assert looks_like_startup(text) is looks


# --- the tracker -----------------------------------------------------------------------------


def track(text: str) -> BootTracker:
    tracker = BootTracker()
    parser = LineParser()
    for line in text.splitlines():
        for parsed in parser.feed(LogRecord(line)):
            tracker.feed(parsed)
    tracker.finish()
    return tracker


def test_a_new_builds_lines_are_kept_by_shape_with_counts_and_first_line() -> None:
    tracker = track(SGL_HEAD + NEW_BUILD + SGL_TAIL)
    (boot,) = tracker.boots
    assert boot.status is BootStatus.READY
    assert [(u.shape, u.count, u.first_line) for u in boot.unrecognised] == [
        ("Prefix cache warmed: N blocks in N s", 2, 3),
        ("Reserved N GB for the expert bank on cuda:N", 1, 5),
    ]  # "hello from the scheduler" is not startup information
    assert boot.metrics.max_total_num_tokens == 400000  # the known lines still read


def test_known_lines_serving_lines_and_third_party_output_are_not_listed() -> None:
    serving = "[2025-12-01 10:00:30] Decode batch. #running-req: 3, #token: 900, cache hit rate: 0.00%\n"
    strange_after_ready = "[2025-12-01 10:00:31] Prefix cache warmed: 7 blocks in 0.1 s\n"
    third_party = (
        "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]\n"
        "NCCL INFO cudaDriverVersion 12040\n"
    )
    tracker = track(SGL_HEAD + third_party + SGL_TAIL + serving + strange_after_ready)
    assert tracker.all_unrecognised() == []


def test_lines_before_any_boot_are_the_trackers_own() -> None:
    tracker = track(NEW_BUILD + SGL_HEAD + SGL_TAIL)
    assert [u.shape for u in tracker.unrecognised] == [
        "Prefix cache warmed: N blocks in N s",
        "Reserved N GB for the expert bank on cuda:N",
    ]
    assert tracker.boots[0].unrecognised == []
    assert [u.count for u in tracker.all_unrecognised()] == [2, 1]


def test_the_list_is_bounded() -> None:
    lines = "".join(f"[2025-12-01 10:00:09] cache kind{i} {'x' * (i % 7)}{chr(65 + i % 26)}{i}\n" for i in range(1000))
    tracker = track(SGL_HEAD + lines.replace("kind", "kind_") + SGL_TAIL)
    (boot,) = tracker.boots
    assert len(boot.unrecognised) == 256
    assert boot.status is BootStatus.READY


# --- replay ----------------------------------------------------------------------------------


def test_replay_unknown_lists_shapes_with_count_and_the_files_line_number(tmp_path: Path) -> None:
    log = tmp_path / "new-build.log"
    log.write_text(SGL_HEAD + NEW_BUILD + SGL_TAIL)
    code, out, _ = run(log, unknown=True)
    assert code == 0
    assert out.splitlines() == [
        f"{log}: 3 unrecognised startup lines in 2 shapes",
        "  count    line  shape (numbers as N)",
        "      2       4  Prefix cache warmed: N blocks in N s",
        "      1       6  Reserved N GB for the expert bank on cuda:N",
    ]
    # the usual output ends with the quiet count, pointing at --unknown
    _, human, _ = run(log)
    assert human.rstrip().endswith("? 3 unrecognised startup lines (2 shapes): --unknown lists them")
    # the JSON carries the list
    _, text, _ = run(log, json=True)
    assert json.loads(text)["unrecognised"] == [
        {"shape": "Prefix cache warmed: N blocks in N s", "count": 2, "first_line": 4},
        {"shape": "Reserved N GB for the expert bank on cuda:N", "count": 1, "first_line": 6},
    ]


def test_first_line_is_the_files_line_behind_a_collector_prefix_or_in_a_journal(tmp_path: Path) -> None:
    body = SGL_HEAD + NEW_BUILD + SGL_TAIL
    compose = tmp_path / "compose.log"
    compose.write_text("".join(f"sglang-1  | {line}\n" for line in body.splitlines()))
    gz = tmp_path / "compose.log.gz"
    gz.write_bytes(gzip.compress(("garbage line\n" + compose.read_text()).encode()))
    _, out, _ = run(compose, json=True)
    assert [u["first_line"] for u in json.loads(out)["unrecognised"]] == [4, 6]
    _, out, _ = run(gz, json=True)
    assert [u["first_line"] for u in json.loads(out)["unrecognised"]] == [5, 7]


def test_a_log_without_unrecognised_lines_says_so(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    log.write_text(SGL_HEAD + SGL_TAIL)
    _, out, _ = run(log, unknown=True)
    assert out == f"{log}: 0 unrecognised startup lines in 0 shapes\n"
    _, human, _ = run(log)
    assert "unrecognised" not in human
    _, text, _ = run(log, json=True)
    assert json.loads(text)["unrecognised"] == []


def test_stdin_gets_the_list_with_positions_among_the_lines_read(monkeypatch: pytest.MonkeyPatch) -> None:
    data = (SGL_HEAD + NEW_BUILD + SGL_TAIL).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    out = io.StringIO()
    replay.run(Namespace(path="-", json=True, unknown=False), stdout=out, stderr=io.StringIO())
    assert [u["first_line"] for u in json.loads(out.getvalue())["unrecognised"]] == [4, 6]


def test_cli_takes_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.cli import main as cli_main

    log = tmp_path / "new-build.log"
    log.write_text(SGL_HEAD + NEW_BUILD + SGL_TAIL)
    assert cli_main(["replay", str(log), "--unknown"]) == 0
    assert "Prefix cache warmed: N blocks in N s" in capsys.readouterr().out


@pytest.mark.parametrize("path", fixture_logs(), ids=lambda p: str(p).split("fixtures/")[-1].split("samples/")[-1])
def test_every_fixture_and_sample_has_its_pinned_count(path: Path) -> None:
    """Every startup line of every fixture and shared sample is recognised (or explained above)."""
    key = str(path).split("fixtures/")[-1]
    items = unrecognised_of(path)
    assert sum(u.count for u in items) == EXPECTED_COUNTS.get(key, 0), [u.shape for u in items]


# --- the console -----------------------------------------------------------------------------


async def test_figures_show_the_quiet_count_only_when_there_is_one() -> None:
    figures = BootFigures()
    async with Harness(figures).run_test(size=(50, 14)) as pilot:
        boot = ready_boot()
        figures.show(boot)
        await pilot.pause()
        assert "unrecognised" not in plain(figures)
        boot = ready_boot()
        boot.unrecognised = [UnrecognisedShape("Reserved N GB", 3, 7, "Reserved 2 GB")]
        figures.show(boot)
        await pilot.pause()
        assert "? 3 unrecognised startup lines" in plain(figures)


async def test_the_U_key_lists_the_boots_unrecognised_lines() -> None:
    clock = FakeClock()
    start_demo("demo", clock, 40.0)
    clock.advance(12.0)
    app = demo_app(clock, speed=40.0)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = app.main_screen.active_pane
        assert pane is not None
        await run_clock(pilot, app, clock, until=lambda: pane.boot is not None, limit=30)
        assert pane.boot is not None
        await pilot.press("U")  # nothing to list: a notice says so, no screen opens
        assert not isinstance(app.screen, NoticeScreen)
        pane.boot.unrecognised = [UnrecognisedShape("Reserved N GB for the expert bank", 2, 5, "Reserved 2 GB …")]
        await pilot.press("U")
        assert isinstance(app.screen, NoticeScreen)
        assert "2 unrecognised startup lines" in app.screen.title_text
        assert "Reserved N GB for the expert bank" in app.screen.body
        await pilot.press("escape")
        assert not isinstance(app.screen, NoticeScreen)


# --- lines the corpus left unrecognised, read now --------------------------------------------

VLLM_HEAD = "(EngineCore_DP0 pid=4242) INFO 12-01 10:00:00 [x.py:1] "
SGL_STAMP = "[2025-12-01 10:00:00 TP0] "


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (VLLM_HEAD + "Filesystem type for checkpoints: EXT4. Checkpoint size: 2.08 GiB. Available RAM: 100 GiB.",
         "load_weights"),
        (VLLM_HEAD + "Auto-prefetch is disabled because the filesystem (EXT4) is not a recognized network FS",
         "load_weights"),
        (VLLM_HEAD + "saved AOT compiled function to /root/.cache/vllm/torch_compile_cache/x/rank_0_0/model",
         "compile"),
        (VLLM_HEAD + "Add 3 padding layers, may waste at most 6.25% KV cache memory", "kv_allocate"),
        (VLLM_HEAD + "If out-of-memory error occurs during cudagraph capture, consider decreasing "
         "`gpu_memory_utilization`", "graph_capture"),
        (VLLM_HEAD + "Using [('NCCL', 'nccl')] all-reduce backends", "init"),
        (VLLM_HEAD + "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 4521",
         "kv_blocks=4521"),
        (SGL_STAMP + "Failed to get GPU memory capacity from nvidia-smi, falling back to torch. Reported total GPU "
         "memory per device (MiB): [124546], using min: 124546 MiB.", "gpu_total_gib=121.627"),
    ],
)
def test_lines_the_corpus_left_unrecognised_are_read_now(line: str, want: str) -> None:
    from kvtui.engines.events import Metric, PhaseMark

    parser = LineParser()
    events = [e for p in parser.feed(LogRecord(line)) for e in p.events]
    got = {e.phase.value for e in events if isinstance(e, PhaseMark)}
    got |= {f"{e.name}={e.value:g}" for e in events if isinstance(e, Metric)}
    assert want in got, events


@pytest.mark.parametrize(
    "line",
    [
        VLLM_HEAD + "Route: /v1/chat/completions, Methods: POST",
        VLLM_HEAD + "Encoder cache will be initialized with a budget of 8192 tokens, and profiled with 1 image",
        VLLM_HEAD + "Using fp8 data type to store kv cache. It reduces the GPU memory footprint",
        SGL_STAMP + "Ignore import error when loading sglang.srt.models.glm4v_moe: No module named 'x'",
        SGL_STAMP + "Using FP8 KV cache but no scaling factors provided. Defaulting to scaling factors of 1.0.",
        SGL_STAMP + "CUDA graphs can take additional 2~3GB memory.",
    ],
)
def test_known_lines_without_a_figure_are_not_unrecognised(line: str) -> None:
    parser = LineParser()
    (parsed,) = parser.feed(LogRecord(line))
    assert parsed.known
    assert not parsed.events
