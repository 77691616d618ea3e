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


# -- a refused configuration: ServerArgs / EngineArgs / a vLLM config class (issue 21) ------------

SGL_REFUSED = FIX / "sglang" / "fail-0.5.10-serverargs-refused.log"
VLLM_REFUSED = FIX / "vllm" / "fail-0.11-config-refused.log"
PREFIXES = ["sglang-1  | ", "[pod/sglang-0/sglang] "]  # docker compose logs, kubectl logs --prefix


def test_sglang_serverargs_refusal_is_bad_args_at_launch() -> None:
    """ServerArgs.__post_init__ raised (SGLang checks its arguments before it prints them): a boot
    that failed at launch, not a crash of no phase; the hint names the flag the message names."""
    f = one_failed(SGL_REFUSED.read_text().splitlines(), Engine.SGLANG)
    assert f.message == ("ValueError: TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, fp4_e2m1, "
                         "bf16, or auto.")
    assert f.hint is not None
    assert f.hint.startswith("the server refused its configuration, naming --kv-cache-dtype: change it as the "
                             "message says")
    assert "rollback" in f.hint


def test_sglang_serverargs_refusal_after_a_ready_boot_is_a_boot_of_its_own() -> None:
    ready = (FIX / "sglang" / "sglang-0.4.10-llama8b-tp2-eagle-ready.log").read_text().splitlines()
    boots = replay_lines([*ready, *SGL_REFUSED.read_text().splitlines()])
    assert [b.status for b in boots] == [BootStatus.READY, BootStatus.FAILED]  # was: one boot, ready
    f = failure_of(boots[1])
    assert (f.kind, f.phase) == (FailureKind.BAD_ARGS, Phase.LAUNCH)


def test_vllm_config_class_refusal_is_bad_args_at_launch() -> None:
    """EngineArgs.create_engine_config -> SchedulerConfig (a pydantic dataclass) refused the values:
    bad_args in launch, the hint naming the flags of the message (pydantic's repeat of every field
    in `input_value=…` left out), with the boot's value where its dump has one."""
    f = one_failed(VLLM_REFUSED.read_text().splitlines(), Engine.VLLM)
    assert f.message == "pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig"
    assert f.hint is not None
    assert f.hint.startswith("the server refused its configuration, naming --max-num-batched-tokens (now 64), "
                             "--max-num-seqs: change them as the message says")
    # a fragment without the frames: pydantic names the config class, which says it alone
    tail = VLLM_REFUSED.read_text().splitlines()[-3:]
    boots = replay_lines(tail)
    assert [(b.status, failure_of(b).kind, failure_of(b).phase) for b in boots] == [
        (BootStatus.FAILED, FailureKind.BAD_ARGS, Phase.LAUNCH)]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_refusal_under_a_collector_prefix(prefix: str) -> None:
    """A traceback alone teaches the collector's prefix (its engine frames), so the exception line
    is read without it (was: no boot at all)."""
    for path, engine in ((SGL_REFUSED, Engine.SGLANG), (VLLM_REFUSED, Engine.VLLM)):
        f = one_failed([prefix + ln for ln in path.read_text().splitlines()], engine)
        assert f.message.startswith(("ValueError: TensorRT-LLM", "pydantic_core."))


def test_other_value_errors_are_not_a_refused_configuration() -> None:
    """A check outside the engines' argument / config code stays a crash (vLLM 0.20's multimodal
    budget, real log 33); an AssertionError in TpModelWorker is SGLang's pool-size refusal."""
    boots, _ = analyse(iter([(FIX / "real" / "33-vllm-0.20.0-gemma4-26b-a4b-config-refused.log").read_bytes()]))
    assert failure_of(boots[-1]).kind is FailureKind.CRASH
    boots, _ = analyse(iter([(FIX / "sglang" / "fail-0.5.10-pool-too-small.log").read_bytes()]))
    (b,) = boots
    f = failure_of(b)
    assert (b.status, f.kind, f.message) == (BootStatus.FAILED, FailureKind.KV_TOO_SMALL,
                                             "AssertionError: Memory pool size is too small")
    # raised after the graphs were captured, but a refusal of the pool's size: its phase is kv_allocate
    assert b.phase is Phase.GRAPH_CAPTURE
    assert f.phase is Phase.KV_ALLOCATE
    assert f.hint is not None
    assert "raise --mem-fraction-static (now 0.437)" in f.hint


@pytest.mark.parametrize("prefix", ["", *PREFIXES])
def test_a_17_line_capture_oom_fragment_is_a_failed_boot(prefix: str) -> None:
    lines = (FIX / "sglang" / "fragment-0.5.10-capture-oom-17-lines.log").read_text().splitlines()
    assert len(lines) == 17
    boots = replay_lines([prefix + ln for ln in lines])
    assert [(b.status, failure_of(b).kind, failure_of(b).phase) for b in boots] == [
        (BootStatus.FAILED, FailureKind.OOM_GRAPH_CAPTURE, Phase.GRAPH_CAPTURE)]


def test_flags_named() -> None:
    from kvtui.boot.hints import flags_named

    msg = ("Value error, max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (256). "
           "[type=value_error, input_value=ArgsKwargs((), {'max_model_len': 8192}), input_type=ArgsKwargs]")
    assert flags_named(Engine.VLLM, msg, {"max_num_batched_tokens": 64}) == [
        "--max-num-batched-tokens (now 64)", "--max-num-seqs"]
    assert flags_named(Engine.SGLANG, "--linear-attn-decode-backend flashinfer on SM100+ requires "
                                      "--mamba-ssm-dtype bfloat16", {}) == [
        "--linear-attn-decode-backend", "--mamba-ssm-dtype"]
    assert flags_named(Engine.SGLANG, "tp_size must be divisible by number of nodes", {"tp_size": 16}) == [
        "--tp-size (now 16)"]
    assert flags_named(Engine.SGLANG, "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x).", {}) == []
