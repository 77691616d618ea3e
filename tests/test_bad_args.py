"""``bad_args``: the engines' argparse refusals (an unknown flag, a bad value) are a failed boot of
that engine with a hint that names the flag — even when nothing else of a boot precedes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtui.boot import Boot, BootStatus, Failure, hint_for
from kvtui.commands.replay import analyse
from kvtui.engines.cli_errors import bad_args_hint, cli_error, usage_engine
from kvtui.engines.events import Engine, FailureKind, Phase
from kvtui.ui.formatting import FAILURE_TITLES

FIX = Path(__file__).parent / "fixtures"

SGL_USAGE = [
    "usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]",
    "                        [--host HOST] [--port PORT] [--mem-fraction-static MEM_FRACTION_STATIC]",
]


def replay_lines(lines: list[str]) -> list[Boot]:
    boots, _ = analyse(iter([("\n".join(lines) + "\n").encode()]))
    return boots


def failure_of(boot: Boot) -> Failure:
    assert boot.failure is not None
    return boot.failure


def one_failed(lines: list[str], engine: Engine) -> Failure:
    boots = replay_lines(lines)
    assert len(boots) == 1, boots
    (b,) = boots
    assert b.engine is engine
    assert b.status is BootStatus.FAILED
    assert b.phase is Phase.LAUNCH
    f = failure_of(b)
    assert f.kind is FailureKind.BAD_ARGS
    assert f.phase is Phase.LAUNCH
    return f


def test_sglang_script_host_log_of_only_usage_and_error() -> None:
    f = one_failed([*SGL_USAGE, "launch_server.py: error: unrecognized arguments: --foo 1"], Engine.SGLANG)
    assert f.message == "launch_server.py: error: unrecognized arguments: --foo 1"
    assert f.hint == (
        "the server refused its arguments: --foo is not a flag of this SGLang build (remove it or check the spelling)"
    )


def test_the_error_line_alone_is_a_boot() -> None:
    f = one_failed(["launch_server.py: error: unrecognized arguments: --foo 1"], Engine.SGLANG)
    assert "--foo" in f.hint


def test_vllm_api_server_invalid_float_names_flag_value_and_type() -> None:
    f = one_failed(
        [
            "usage: api_server.py [-h] [--host HOST] [--port PORT] [--gpu-memory-utilization GPU_MEMORY_UTILIZATION]",
            "api_server.py: error: argument --gpu-memory-utilization: invalid float value: 'abc'",
        ],
        Engine.VLLM,
    )
    h = f.hint
    assert "--gpu-memory-utilization" in h
    assert "'abc'" in h
    assert "a number" in h


@pytest.mark.parametrize(
    ("usage", "error", "engine"),
    [
        ("usage: vllm serve [model_tag] [options]", "vllm serve: error: unrecognized arguments: --foo", Engine.VLLM),
        (
            "usage: python3 -m vllm.entrypoints.openai.api_server [-h] [--host HOST]",
            "python3 -m vllm.entrypoints.openai.api_server: error: unrecognized arguments: --foo",
            Engine.VLLM,
        ),
        (
            "usage: python -m sglang.launch_server [-h] --model-path MODEL_PATH",
            "python -m sglang.launch_server: error: unrecognized arguments: --foo",
            Engine.SGLANG,
        ),
        ("usage: sglang serve [-h] --model-path MODEL_PATH", "sglang serve: error: unrecognized arguments: --foo",
         Engine.SGLANG),
    ],
)
def test_program_names_of_both_engines(usage: str, error: str, engine: Engine) -> None:
    assert usage_engine(usage) is engine
    f = one_failed([usage, error], engine)
    assert "--foo is not a flag of this" in f.hint


def test_systemd_journal_unit_exits_with_status_2() -> None:
    lines = [
        "2026-03-04T09:12:00+0000 gpu-a systemd[1]: Started sglang.service - SGLang server.",
        "2026-03-04T09:12:03+0000 gpu-a python3[4242]: " + SGL_USAGE[0],
        "2026-03-04T09:12:03+0000 gpu-a python3[4242]: " + SGL_USAGE[1],
        "2026-03-04T09:12:03+0000 gpu-a python3[4242]: launch_server.py: error: argument --mem-fraction-static: "
        "invalid float value: '0,85'",
        "2026-03-04T09:12:04+0000 gpu-a systemd[1]: sglang.service: Main process exited, code=exited, "
        "status=2/INVALIDARGUMENT",
        "2026-03-04T09:12:04+0000 gpu-a systemd[1]: sglang.service: Failed with result 'exit-code'.",
    ]
    f = one_failed(lines, Engine.SGLANG)
    assert "--mem-fraction-static got '0,85'" in f.hint
    assert f.message.startswith("launch_server.py: error:")


def test_a_refused_restart_after_a_ready_boot_is_a_second_boot() -> None:
    ready = (FIX / "vllm-0.11-llama8b-tp2-ready.log").read_text().splitlines()
    boots = replay_lines([*ready, "usage: vllm serve [model_tag] [options]",
                          "vllm serve: error: argument --max-model-len: invalid human_readable_int value: 'lots'"])
    assert [b.status for b in boots] == [BootStatus.READY, BootStatus.FAILED]
    f = failure_of(boots[1])
    assert f.kind is FailureKind.BAD_ARGS
    assert "--max-model-len got 'lots'" in f.hint
    assert "whole number" in f.hint


def test_engine_switch_sglang_log_then_vllm_refusal() -> None:
    sgl = (FIX / "sglang" / "two-boots-restart.log").read_text().splitlines()
    boots = replay_lines([*sgl, "api_server.py: error: unrecognized arguments: --mem-fraction-static 0.9"])
    last = boots[-1]
    assert last.engine is Engine.VLLM
    assert failure_of(last).kind is FailureKind.BAD_ARGS
    # the other engine's flag gets its translation
    assert "vLLM uses --gpu-memory-utilization" in failure_of(last).hint


@pytest.mark.parametrize(
    ("detail", "want"),
    [
        ("argument --kv-cache-dtype: invalid choice: 'fp9' (choose from 'auto', 'fp8_e5m2', 'fp8_e4m3')",
         "--kv-cache-dtype does not accept 'fp9': choose from 'auto', 'fp8_e5m2', 'fp8_e4m3'"),
        ("the following arguments are required: --model-path", "SGLang needs --model-path"),
        ("argument --tp-size/--tensor-parallel-size: expected one argument", "--tp-size expected one argument"),
        ("argument --tp-size/--tensor-parallel-size: invalid int value: '2.5'",
         "--tp-size got '2.5', but it expects a whole number"),
        ("ambiguous option: --mem could match --mem-fraction-static, --mem-saver", "--mem is an abbreviation"),
        ("unrecognized arguments: 0.9", "'0.9' is not expected here"),
        ("unrecognized arguments: --foo --bar=1", "--foo, --bar are not flags of this SGLang build"),
        ("argument --speculative-config: Value x cannot be converted to <class 'dict'>.",
         "--speculative-config: Value x cannot be converted"),
    ],
)
def test_hints_for_every_argparse_refusal(detail: str, want: str) -> None:
    assert want in bad_args_hint(Engine.SGLANG, detail)


@pytest.mark.parametrize(
    "line",
    [
        "main.py: error: unrecognized arguments: --foo",  # another program's argparse
        "usage: bench_serving.py [-h]",
        "[2026-03-04 09:12:03] launch_server.py is fine: error: no",
        "ValueError: something: error: unrelated",
    ],
)
def test_other_programs_are_not_the_server(line: str) -> None:
    assert cli_error(line) is None
    assert usage_engine(line) is None
    assert replay_lines([line]) == []


def test_the_kind_is_wired_everywhere() -> None:
    assert FailureKind("bad_args") is FailureKind.BAD_ARGS
    assert FAILURE_TITLES.keys() == set(FailureKind)
    for engine in (Engine.SGLANG, Engine.VLLM):
        assert "rollback" in hint_for(FailureKind.BAD_ARGS, engine, {}, {})


def test_replay_json_carries_the_kind(tmp_path: Path) -> None:
    import io
    from argparse import Namespace

    from kvtui.commands import replay

    p = tmp_path / "boot.log"
    p.write_text("\n".join([*SGL_USAGE, "launch_server.py: error: unrecognized arguments: --foo 1"]) + "\n")
    out, err = io.StringIO(), io.StringIO()
    code = replay.run(Namespace(path=str(p), json=True), stdout=out, stderr=err)
    assert code == 1
    (b,) = json.loads(out.getvalue())["boots"]
    assert (b["engine"], b["status"], b["failure"]["kind"], b["failure"]["phase"]) == (
        "sglang", "failed", "bad_args", "launch")
    out = io.StringIO()
    replay.run(Namespace(path=str(p), json=False), stdout=out, stderr=err)
    assert "Failure: bad_args in launch" in out.getvalue()
