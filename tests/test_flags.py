"""kvtui.flags: parse and edit server flags in units and launch scripts.

Example tests pin the exact bytes on the shared samples; property tests generate many unit and
script shapes and check that edit -> parse returns the new value, that every byte outside the
edited flag is unchanged, and that aliases resolve; a bash check runs edited scripts through the
real shell to prove the engine would receive what the parser says.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.engines.events import Engine
from kvtui.flags import (
    SPECS,
    Edit,
    FlagError,
    NoServerCommand,
    ValueKind,
    apply_edits,
    canonical_flag,
    check_dump,
    check_text,
    dest_name,
    edits_from_mapping,
    find_effective_execstart,
    get_flag,
    parse_argv,
    parse_command,
    parse_edit_args,
    parse_systemctl_execstart,
)

FIX = Path(__file__).parent / "fixtures"
K26 = (FIX / "sglang-k26.service").read_text()
DSV4 = (FIX / "launch-dsv4.sh").read_text()
FLAGS = FIX / "flags"


def edit(text: str, kind: str, sets: list[str] = [], unsets: list[str] = []) -> str:  # noqa: B006
    return apply_edits(text, kind, parse_edit_args(sets, unsets)).new_text  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# the shared samples, byte for byte
# ---------------------------------------------------------------------------------------------


def test_k26_unit_parses_every_flag() -> None:
    cmd = parse_command(K26, "unit")
    assert cmd.engine is Engine.SGLANG
    assert cmd.entry == "-m sglang.launch_server"
    assert cmd.values() == {
        "model-path": "/models/Kimi-K2.6",
        "served-model-name": "kimi-k2.6",
        "tp-size": "8",
        "trust-remote-code": True,
        "context-length": "200000",
        "mem-fraction-static": "0.85",
        "max-running-requests": "64",
        "cuda-graph-max-bs": "64",
        "host": "0.0.0.0",
        "port": "30000",
    }
    assert cmd.exec_line == 12


def test_set_changes_only_the_value_token() -> None:
    new = edit(K26, "unit", ["mem-fraction-static=0.88"])
    assert new == K26.replace("--mem-fraction-static 0.85", "--mem-fraction-static 0.88")
    assert get_flag(new, "unit", "mem_fraction_static") == "0.88"


@pytest.mark.parametrize("alias", ["tp", "tp-size", "tensor-parallel-size", "--tp", "tp_size", "TP"])
def test_tp_aliases_find_the_flag_however_spelled(alias: str) -> None:
    new = edit(K26, "unit", [f"{alias}=4"])
    assert new == K26.replace("--tp 8", "--tp 4")


def test_other_engines_name_maps_with_a_note() -> None:
    res = apply_edits(K26, "unit", parse_edit_args(["max-num-seqs=32"]))
    assert res.new_text == K26.replace("--max-running-requests 64", "--max-running-requests 32")
    assert "--max-running-requests" in res.changes[0].note


def test_missing_flag_gets_its_own_continuation_line() -> None:
    new = edit(K26, "unit", ["chunked-prefill-size=8192"])
    assert new == K26.replace(
        "    --host 0.0.0.0 --port 30000", "    --chunked-prefill-size 8192 \\\n    --host 0.0.0.0 --port 30000"
    )


def test_boolean_set_and_unset() -> None:
    on = edit(K26, "unit", ["enable-metrics"])
    assert "    --enable-metrics \\\n" in on
    assert get_flag(on, "unit", "enable-metrics") is True
    off = edit(K26, "unit", [], ["trust-remote-code"])
    assert off == K26.replace("    --trust-remote-code \\\n", "")
    # a switch that is already on stays byte-identical
    res = apply_edits(K26, "unit", parse_edit_args(["trust-remote-code"]))
    assert res.new_text == K26
    assert res.changes[0].action == "unchanged"
    assert not res.changed


def test_unset_from_a_shared_last_line_and_the_whole_last_line() -> None:
    assert edit(K26, "unit", [], ["host"]) == K26.replace("--host 0.0.0.0 --port", "--port")
    assert edit(K26, "unit", [], ["port"]) == K26.replace(" --port 30000", "")
    both = edit(K26, "unit", [], ["host", "port"])
    # the emptied last line and the continuation that led to it are gone; the unit still parses
    assert both == K26.replace(" \\\n    --host 0.0.0.0 --port 30000", "")
    assert parse_command(both, "unit").get("cuda-graph-max-bs") == "64"


def test_dsv4_script_keeps_its_mixed_style() -> None:
    new = edit(DSV4, "script", ["mem-fraction-static=0.72", "max-running-requests=16"])
    assert "--mem-fraction-static=0.72 \\\n" in new  # the =-form is kept where it was used
    assert "  --max-running-requests 16 \\\n  --host 0.0.0.0 --port 30000\n" in new  # majority: space
    cmd = parse_command(new, "script")
    assert cmd.get("mem-fraction-static") == "0.72"
    assert cmd.get("max-running-requests") == "16"
    unset = edit(DSV4, "script", [], ["trust-remote-code"])
    assert unset == DSV4.replace("--tp 4 --trust-remote-code", "--tp 4")


def test_inline_flags_on_one_line_are_added_inline() -> None:
    text = (FLAGS / "launch-vllm.sh").read_text()
    res = apply_edits(text, "script", parse_edit_args(["max-model-len=8192"]))
    assert res.new_text == text.replace(
        "--enable-prefix-caching \"$@\"", "--enable-prefix-caching --max-model-len 8192 \"$@\""
    )
    assert any('"$@"' in w for w in res.warnings)


def test_vllm_script_short_alias_negatable_switch_and_eq_style() -> None:
    text = (FLAGS / "launch-vllm.sh").read_text()
    cmd = parse_command(text, "script")
    assert cmd.engine is Engine.VLLM
    assert cmd.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert cmd.get("tensor-parallel-size") == "2"  # -tp 2
    assert cmd.get("max-num-seqs") == "128"
    new = edit(text, "script", ["tp=4", "max-running-requests=64", "enable-prefix-caching=false"])
    assert "-tp 4 " in new
    assert "--max-num-seqs=64 " in new
    assert "--no-enable-prefix-caching " in new
    # the heredoc and the commented-out old command were not taken for the server command
    assert "don't edit: vllm serve" in new
    assert "# python -m vllm" in new


def test_vllm_unit_aligned_backslashes_and_positional_model() -> None:
    text = (FLAGS / "vllm-serve.service").read_text()
    cmd = parse_command(text, "unit")
    assert cmd.engine is Engine.VLLM
    assert cmd.model == "/models/Qwen3-32B"
    assert cmd.get("enable-prefix-caching") is False
    new = edit(text, "unit", ["max-num-seqs=64"])
    added = [ln for ln in new.splitlines() if "--max-num-seqs" in ln]
    old_col = text.splitlines()[6].index("\\")
    assert added == ["                 --max-num-seqs 64" + " " * (old_col - 34) + "\\"]
    assert added[0].index("\\") == old_col  # the \ column is kept
    assert edit(text, "unit", ["model=/models/Qwen3-8B"]) == text.replace("/models/Qwen3-32B", "/models/Qwen3-8B")


def test_dropin_with_reset_and_comment_inside_continuation() -> None:
    text = (FLAGS / "override-execstart.conf").read_text()
    cmd = parse_command(text, "unit")
    assert cmd.get("mem-fraction-static") == "0.80"
    assert cmd.get("port") == "30000"
    new = edit(text, "unit", ["mem-fraction-static=0.82"], ["port"])
    assert new == text.replace("0.80 \\\n    --port 30000", "0.82")
    assert "# lowered after the capture OOM" in new


def test_effective_execstart_file() -> None:
    drop = (FLAGS / "override-execstart.conf").read_text()
    env = (FLAGS / "env-only.conf").read_text()
    assert find_effective_execstart([("frag", K26), ("a.conf", env)]) == 0
    assert find_effective_execstart([("frag", K26), ("10.conf", drop), ("20.conf", env)]) == 1
    reset_only = "[Service]\nExecStart=\n"
    with pytest.raises(NoServerCommand):
        find_effective_execstart([("frag", K26), ("x.conf", reset_only)])


def test_unit_running_a_script_names_it() -> None:
    unit = "[Service]\nExecStart=/bin/bash /opt/run/launch.sh --verbose\n"
    with pytest.raises(NoServerCommand) as exc:
        parse_command(unit, "unit")
    assert exc.value.runs == "/opt/run/launch.sh"
    assert "launch_script" in str(exc.value)
    shell = '[Service]\nExecStart=/bin/bash -c "exec python -m sglang.launch_server --tp 8"\n'
    with pytest.raises(FlagError, match="inside a shell string"):
        parse_command(shell, "unit")


def test_quotes_env_prefixes_and_duplicates_in_units() -> None:
    unit = (
        "[Service]\n"
        "ExecStart=-/usr/bin/env NCCL_DEBUG=WARN /opt/py/bin/python3 -m sglang.launch_server "
        '--served-model-name "kimi k2" "--mem-fraction-static=0.8" --tp-size 4 --tp 8\n'
    )
    cmd = parse_command(unit, "unit")
    assert cmd.env == {"NCCL_DEBUG": "WARN"}
    assert cmd.get("served-model-name") == "kimi k2"
    assert cmd.get("tp") == "8"  # last one wins
    assert any("given twice" in w for w in cmd.warnings)
    new = edit(unit, "unit", ["mem-fraction-static=0.83", "served-model-name=kimi-k2", "tp=2"])
    assert '"--mem-fraction-static=0.83"' in new
    assert '--served-model-name "kimi-k2"' in new  # the quoting is kept
    assert "--tp-size 4 --tp 2" in new  # the effective (last) one is edited
    gone = edit(unit, "unit", [], ["tp"])
    assert "--tp" not in gone
    assert get_flag(gone, "unit", "tp") is None


def test_script_redirections_pipes_and_exec() -> None:
    script = (
        "#!/bin/sh\n"
        "exec sglang serve --model-path /m --port 30000 2>&1 | tee -a /var/log/s.log # keep\n"
    )
    cmd = parse_command(script, "script")
    assert cmd.entry == "sglang serve"
    assert cmd.get("port") == "30000"
    new = edit(script, "script", ["mem-fraction-static=0.8"])
    assert new == script.replace("--port 30000 2>&1", "--port 30000 --mem-fraction-static 0.8 2>&1")


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["mem-fraction-static=1.2"], r"must lie in \(0, 1\)"),
        (["mem-fraction-static=0"], r"must lie in \(0, 1\)"),
        (["mem-fraction-static=abc"], "not a number"),
        (["max-running-requests=-4"], "negative count"),
        (["tp=0"], "zero"),
        (["context-length=-1"], "negative length"),
        (["cuda-graph-max-bs=1.5"], "not an integer"),
        (["port=70000"], "1-65535"),
        (["served-model-name=a;reboot"], r"';' \(command separator\)"),
        (["served-model-name=$(id)"], r"'\$' \(variable expansion\)"),
        (["served-model-name=a b"], "a space"),
        (["served-model-name=`id`"], "command substitution"),
        (["served-model-name="], "empty value"),
        (["mem-fraction-static"], "needs a value"),
        (["trust-remote-code=maybe"], "is a switch"),
        (["tp=2", "tp-size=4"], "change the same flag"),
    ],
)
def test_refused_values_say_why(sets: list[str], message: str) -> None:
    with pytest.raises(FlagError, match=message):
        edit(K26, "unit", sets)


def test_vllm_accepts_utilization_one_and_len_suffix() -> None:
    text = (FLAGS / "vllm-serve.service").read_text()
    assert get_flag(edit(text, "unit", ["gpu-memory-utilization=1.0"]), "unit", "gpu-memory-utilization") == "1.0"
    assert get_flag(edit(text, "unit", ["max-model-len=32k"]), "unit", "context-length") == "32k"
    with pytest.raises(FlagError, match="number of tokens"):
        edit(K26, "unit", ["context-length=32k"])  # SGLang wants a plain integer


def test_unset_of_an_absent_flag_is_an_error_with_a_suggestion() -> None:
    with pytest.raises(FlagError, match="did you mean --mem-fraction-static"):
        edit(K26, "unit", [], ["mem-fraction-statc"])
    res = apply_edits(K26, "unit", parse_edit_args(["mem-fracton-static=0.8"]))
    assert "did you mean --mem-fraction-static" in res.changes[0].note


def test_no_server_command_and_ambiguity() -> None:
    with pytest.raises(NoServerCommand):
        parse_command("#!/bin/sh\necho hi\n", "script")
    two = "python -m sglang.launch_server --tp 1\nvllm serve m --tp 2\n"
    with pytest.raises(FlagError, match="several lines"):
        parse_command(two, "script")
    with pytest.raises(FlagError, match="unterminated"):
        parse_command('[Service]\nExecStart=/x -m sglang.launch_server --a "b\n', "unit")


def test_systemctl_show_and_argv() -> None:
    show = (
        "ExecStart={ path=/opt/sglang/venv/bin/python ; argv[]=/opt/sglang/venv/bin/python -m sglang.launch_server "
        "--tp 8 --mem-fraction-static 0.9 ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; "
        "code=(null) ; status=0/0 }\n"
    )
    argvs = parse_systemctl_execstart(show)
    assert argvs == [["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--tp", "8",
                      "--mem-fraction-static", "0.9"]]
    cmd = parse_argv(argvs[0])
    assert cmd.get("mem-fraction-static") == "0.9"


def test_check_text_and_dump() -> None:
    edits = parse_edit_args(["mem-fraction-static=0.9", "tp=4", "enable-metrics"], ["port"])
    new = edit(K26, "unit", ["mem-fraction-static=0.9", "tp=4", "enable-metrics"], ["port"])
    assert check_text(new, "unit", edits) == []
    problems = check_text(K26, "unit", edits)
    assert "--mem-fraction-static is 0.85, expected 0.9" in problems
    assert "--port is still present (30000)" in problems
    dump = {"mem_fraction_static": 0.9, "tp_size": 4, "enable_metrics": True, "port": 30000}
    assert check_dump(Engine.SGLANG, dump, edits) == []
    stale = {"mem_fraction_static": 0.85, "tp_size": 4, "enable_metrics": True}
    assert check_dump(Engine.SGLANG, stale, edits) == [
        "the engine runs with mem_fraction_static=0.85, expected 0.9"
    ]
    assert check_dump(Engine.VLLM, {"gpu_memory_utilization": 0.9},
                      parse_edit_args(["mem-fraction-static=0.9"])) == []


def test_checks_compare_values_read_back_without_refusing_them() -> None:
    # a rollback verifies values it read from a backup: a quoted value with a space is compared,
    # not refused as an edit would be
    unit = '[Service]\nExecStart=/x -m sglang.launch_server --served-model-name "kimi k2" --tp 8\n'
    assert check_text(unit, "unit", [Edit("served-model-name", "kimi k2"), Edit("tp", "8")]) == []
    assert check_text(unit, "unit", [Edit("served-model-name", "kimi")]) == [
        "--served-model-name is kimi k2, expected kimi"
    ]
    assert check_dump(Engine.SGLANG, {"served_model_name": "kimi k2"}, [Edit("served-model-name", "kimi k2")]) == []


def test_names_and_mapping_edits() -> None:
    assert canonical_flag(Engine.SGLANG, "--tensor-parallel-size") == "tp-size"
    assert canonical_flag(Engine.VLLM, "tp") == "tensor-parallel-size"
    assert canonical_flag(Engine.VLLM, "max_running_requests") == "max-num-seqs"
    assert dest_name(Engine.SGLANG, "tp") == "tp_size"
    assert dest_name(Engine.VLLM, "context-length") == "max_model_len"
    edits = edits_from_mapping({"mem_fraction_static": 0.8799999999, "cuda_graph_max_bs": 32, "port": None})
    assert edits == [Edit("mem_fraction_static", "0.88"), Edit("cuda_graph_max_bs", "32"), Edit("port", None)]


# ---------------------------------------------------------------------------------------------
# property tests: generated unit and script shapes
# ---------------------------------------------------------------------------------------------

_LIST_FREE = [s for s in SPECS if s.kind is not ValueKind.INT_LIST]
_STR_VALUE = st.from_regex(r"[a-z/][a-z0-9_./:-]{0,14}", fullmatch=True)


def _value_for(kind: ValueKind) -> st.SearchStrategy[str]:
    if kind is ValueKind.FRACTION:
        return st.integers(1, 99).map(lambda n: f"0.{n:02d}")
    if kind in (ValueKind.POS_INT, ValueKind.LEN):
        return st.integers(1, 2_000_000).map(str)
    if kind is ValueKind.NONNEG_INT:
        return st.integers(0, 5000).map(str)
    if kind is ValueKind.CHUNK:
        return st.one_of(st.just("-1"), st.integers(1, 65536).map(str))
    if kind is ValueKind.PORT:
        return st.integers(1, 65535).map(str)
    if kind is ValueKind.NONNEG_FLOAT:
        return st.integers(0, 300).map(lambda n: f"{n / 10:g}")
    return _STR_VALUE


@dataclass
class GFlag:
    key: str  # concept (known) or name (unknown)
    spelling: str
    value: str | None  # None: a switch
    style: str  # " " or "="
    quote: str  # "" or '"' (or "'" in scripts)
    vstart: int = -1
    vend: int = -1


@dataclass
class Shape:
    indent: str
    text: str
    kind: str
    engine: Engine
    flags: list[GFlag]
    truth: dict[str, str | bool]  # key -> effective value
    entry_positional: bool


ENTRIES = {
    Engine.SGLANG: ["python3 -m sglang.launch_server", "/opt/venv/bin/python -m sglang.launch_server",
                    "sglang serve"],
    Engine.VLLM: ["vllm serve /models/m", "python -m vllm.entrypoints.openai.api_server"],
}


@st.composite
def shapes(draw: st.DrawFn, kind: str | None = None) -> Shape:
    kind = kind or draw(st.sampled_from(["unit", "script"]))
    engine = draw(st.sampled_from([Engine.SGLANG, Engine.VLLM]))
    entry = draw(st.sampled_from(ENTRIES[engine]))
    positional = entry.startswith("vllm serve")
    pool = [s for s in _LIST_FREE if engine in s.names and not (positional and s.concept == "model")]
    specs = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=8, unique_by=lambda s: s.concept))
    unknown = draw(st.lists(st.from_regex(r"x-[a-z]{3,8}", fullmatch=True), max_size=2, unique=True))
    flags: list[GFlag] = []
    for s in specs:
        spelling = draw(st.sampled_from(s.names[engine]))
        spelling = "-" + spelling if engine is Engine.VLLM and spelling in ("tp", "pp", "dp", "q") else "--" + spelling
        if s.kind is ValueKind.BOOL:
            flags.append(GFlag(s.concept, spelling, None, " ", ""))
            continue
        value = draw(_value_for(s.kind))
        style = draw(st.sampled_from([" ", "="]))
        quote = draw(st.sampled_from(["", '"'] + (["'"] if kind == "script" else [])))
        flags.append(GFlag(s.concept, spelling, value, style, quote))
    for name in unknown:
        flags.append(GFlag(name, "--" + name, draw(_STR_VALUE), draw(st.sampled_from([" ", "="])), ""))
    flags = list(draw(st.permutations(flags)))
    # one flag given twice (the earlier copy with another value)
    valued = [f for f in flags if f.value is not None]
    make_dup: bool = draw(st.booleans())
    if valued and make_dup:
        f = draw(st.sampled_from(valued))
        v = f.value or ""
        dup = GFlag(f.key, f.spelling, v + "9" if v[-1:].isdigit() else v + "x", f.style, "")
        if _valid_dup(dup, engine):
            flags.insert(0, dup)
    # layout: how many flags on the entry line, then a group size per continuation line
    on_entry = draw(st.integers(0, len(flags)))
    groups: list[int] = []
    rest = len(flags) - on_entry
    while rest > 0:
        g = draw(st.integers(1, min(3, rest)))
        groups.append(g)
        rest -= g
    indent = draw(st.sampled_from(["  ", "    ", "\t", "        "]))
    cont = draw(st.sampled_from([" \\", "  \\", "\t\\"]))
    comments = kind == "unit" and draw(st.booleans())

    if kind == "unit":
        head = "[Unit]\nDescription=generated\n\n[Service]\nEnvironment=A=1\n"
        prefix = draw(st.sampled_from(["", "-", "/usr/bin/env X=1 "]))
        head += "ExecStart=" + prefix
        tail_suffix = ""
        tail = "\nRestart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n"
    else:
        head = "#!/bin/bash\n# launch\nexport A=1\n"
        head += draw(st.sampled_from(["", "exec ", "CUDA_VISIBLE_DEVICES=0,1 exec ", "nohup env B=2 "]))
        tail_suffix = draw(st.sampled_from(["", ' "$@"', " >> gen.log 2>&1"]))
        tail = "\necho done\n"

    out = [head, entry]
    pos = len(head) + len(entry)

    def emit(s: str) -> None:
        nonlocal pos
        out.append(s)
        pos += len(s)

    def emit_flag(f: GFlag) -> None:
        emit(f.spelling)
        if f.value is None:
            return
        emit(f.style)
        f.vstart = pos
        emit(f"{f.quote}{f.value}{f.quote}")
        f.vend = pos

    idx = 0
    for _ in range(on_entry):
        emit(" ")
        emit_flag(flags[idx])
        idx += 1
    for g in groups:
        emit(cont + "\n")
        if comments and draw(st.booleans()):
            emit("# a comment inside the continuation\n")
        emit(indent)
        for k in range(g):
            if k:
                emit(" ")
            emit_flag(flags[idx])
            idx += 1
    emit(tail_suffix)
    emit(tail)
    text = "".join(out)
    truth: dict[str, str | bool] = {}
    for f in flags:
        truth[f.key] = True if f.value is None else f.value
    return Shape(indent, text, kind, engine, flags, truth, positional)


def _valid_dup(f: GFlag, engine: Engine) -> bool:
    from kvtui.flags import lookup, validate_value

    spec = lookup(engine, f.key) if not f.key.startswith("x-") else None
    try:
        validate_value(engine, spec, f.key, f.value or "")
    except FlagError:
        return False
    return True


def _key(engine: Engine, occ_spec_concept: str | None, canonical: str) -> str:
    return occ_spec_concept if occ_spec_concept is not None else canonical


def _parsed_truth(text: str, kind: str) -> dict[str, str | bool]:
    cmd = parse_command(text, kind)  # type: ignore[arg-type]
    out: dict[str, str | bool] = {}
    for o in cmd.flags:
        out[_key(cmd.engine, o.spec.concept if o.spec else None, o.canonical)] = o.value
    return out


def _alias_for(engine: Engine, key: str, draw: Callable[[st.SearchStrategy[str]], str]) -> str:
    spec = next((s for s in SPECS if s.concept == key), None)
    if spec is None:
        return key
    names = [n for names in spec.names.values() for n in names]
    name = draw(st.sampled_from(names))
    return draw(st.sampled_from([name, name.replace("-", "_"), "--" + name]))


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(shapes())
def test_prop_parse_finds_every_generated_flag(shape: Shape) -> None:
    assert _parsed_truth(shape.text, shape.kind) == shape.truth
    cmd = parse_command(shape.text, shape.kind)  # type: ignore[arg-type]
    assert cmd.engine is shape.engine


@PROPS
@given(shapes(), st.data())
def test_prop_set_existing_changes_only_the_value(shape: Shape, data: st.DataObject) -> None:
    valued = [f for f in shape.flags if f.value is not None]
    if not valued:
        return
    target = data.draw(st.sampled_from(valued))
    last = [f for f in shape.flags if f.key == target.key][-1]
    spec = next((s for s in SPECS if s.concept == target.key), None)
    new_value = data.draw(_value_for(spec.kind if spec else ValueKind.STR))
    name = _alias_for(shape.engine, target.key, data.draw)
    res = apply_edits(shape.text, shape.kind, [Edit(name, new_value)])  # type: ignore[arg-type]
    new = res.new_text
    # every byte outside the last occurrence's value is unchanged
    assert new.startswith(shape.text[: last.vstart])
    assert new.endswith(shape.text[last.vend :])
    middle = new[last.vstart : len(new) - (len(shape.text) - last.vend)]
    assert middle == f"{last.quote}{new_value}{last.quote}"
    expected = dict(shape.truth)
    expected[target.key] = new_value
    assert _parsed_truth(new, shape.kind) == expected


@PROPS
@given(shapes(), st.data())
def test_prop_add_missing_is_a_pure_insertion_in_the_neighbours_style(shape: Shape, data: st.DataObject) -> None:
    present = set(shape.truth)
    pool = [s for s in _LIST_FREE if shape.engine in s.names and s.concept not in present
            and s.concept != "model"]
    spec = data.draw(st.sampled_from(pool))
    value: str | bool = True if spec.kind is ValueKind.BOOL else data.draw(_value_for(spec.kind))
    name = _alias_for(shape.engine, spec.concept, data.draw)
    res = apply_edits(shape.text, shape.kind, [Edit(name, value)])  # type: ignore[arg-type]
    old, new = shape.text, res.new_text
    assert res.changes[0].action == "add"
    old_lines, new_lines = old.splitlines(True), new.splitlines(True)
    if len(new_lines) == len(old_lines) + 1:
        # a continuation line of its own, in the neighbours' indentation
        extra = [i for i in range(len(new_lines)) if new_lines[:i] + new_lines[i + 1 :] == old_lines]
        assert extra, "not a single inserted line"
        line = new_lines[extra[0]]
        assert re.fullmatch(r"[ \t]*--[a-z-]+([ =]\S+)?[ \t]*\\\n", line), line
        lead = line[: len(line) - len(line.lstrip(" \t"))]
        assert lead in (shape_indent(shape), "    ")
    else:
        # inline: one " --flag[ value]" inserted right after a word of the command
        assert len(new_lines) == len(old_lines)
        assert _insertion_somewhere(old, new)
        ins = _the_insertion(old, new)
        assert re.fullmatch(r" --[a-z-]+([ =]\S+)?", ins) or re.fullmatch(r"--[a-z-]+([ =]\S+)? ", ins), ins
    expected = dict(shape.truth)
    expected[spec.concept] = value
    assert _parsed_truth(new, shape.kind) == expected


@PROPS
@given(shapes(), st.data())
def test_prop_unset_removes_only_that_flag(shape: Shape, data: st.DataObject) -> None:
    if not shape.truth:
        return
    key = data.draw(st.sampled_from(sorted(shape.truth)))
    name = _alias_for(shape.engine, key, data.draw)
    res = apply_edits(shape.text, shape.kind, [Edit(name, None)])  # type: ignore[arg-type]
    expected = {k: v for k, v in shape.truth.items() if k != key}
    assert _parsed_truth(res.new_text, shape.kind) == expected
    # only deletions: the new text is the old one with pieces cut out
    assert _is_subsequence_by_cuts(shape.text, res.new_text)
    # the unit/script around the command is intact
    tail = "\nRestart=on-failure\n" if shape.kind == "unit" else "\necho done\n"
    assert tail in res.new_text


@PROPS
@given(shapes(), st.data())
def test_prop_switch_on_and_off(shape: Shape, data: st.DataObject) -> None:
    pool = [s for s in _LIST_FREE if shape.engine in s.names and s.kind is ValueKind.BOOL]
    spec = data.draw(st.sampled_from(pool))
    on = apply_edits(shape.text, shape.kind, [Edit(spec.written(shape.engine), True)])  # type: ignore[arg-type]
    assert get_flag(on.new_text, shape.kind, spec.written(shape.engine)) is True  # type: ignore[arg-type]
    off = apply_edits(on.new_text, shape.kind, [Edit(spec.written(shape.engine), False)])  # type: ignore[arg-type]
    got = get_flag(off.new_text, shape.kind, spec.written(shape.engine))  # type: ignore[arg-type]
    assert got is (False if shape.engine is Engine.VLLM else None)
    rest = {k: v for k, v in shape.truth.items() if k != spec.concept}
    after = {k: v for k, v in _parsed_truth(off.new_text, shape.kind).items() if k != spec.concept}
    assert after == rest


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not 0 < x < 1))
def test_prop_fractions_outside_0_1_are_refused(x: float) -> None:
    with pytest.raises(FlagError):
        edit(K26, "unit", [f"mem-fraction-static={x!r}"])


@settings(max_examples=100, deadline=None)
@given(st.integers(max_value=-1))
def test_prop_negative_counts_are_refused(n: int) -> None:
    for flag in ("max-running-requests", "cuda-graph-max-bs", "tp", "page-size", "max-total-tokens"):
        with pytest.raises(FlagError):
            edit(K26, "unit", [f"{flag}={n}"])


@settings(max_examples=150, deadline=None)
@given(st.text(min_size=1, max_size=12).filter(lambda s: re.search(r"[^A-Za-z0-9._,:/=+@-]", s) is not None))
def test_prop_metacharacters_are_refused(value: str) -> None:
    with pytest.raises(FlagError):
        apply_edits(K26, "unit", [Edit("served-model-name", value)])


# ---------------------------------------------------------------------------------------------
# the real shell agrees with the parser, before and after edits
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fakebin")
    for name in ("python", "python3", "sglang", "vllm"):
        p = d / name
        p.write_text('#!/bin/sh\nprintf "%s\\0" "$0" "$@" > "$ARGV_OUT"\n')
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return d


def _run_script(text: str, fake_bin: Path, tmp: Path) -> list[str]:
    script = tmp / "launch.sh"
    # the generated prefixes use /opt/venv/bin/python: point it at the fake
    script.write_text(text.replace("/opt/venv/bin/python", "python").replace("exec ", ""))
    out = tmp / "argv.json"
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "ARGV_OUT": str(out), "HOME": str(tmp)}
    subprocess.run(["bash", str(script)], env=env, check=True, capture_output=True, timeout=10, cwd=tmp)
    argv = out.read_text().split("\0")[:-1]
    return argv[1:]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(shape=shapes(kind="script"), data=st.data())
def test_prop_bash_runs_the_engine_with_the_parsed_arguments(
    shape: Shape, data: st.DataObject, fake_bin: Path, tmp_path: Path
) -> None:
    sets = []
    for f in shape.flags[:2]:
        if f.value is not None:
            spec = next((s for s in SPECS if s.concept == f.key), None)
            sets.append(Edit(f.key, data.draw(_value_for(spec.kind if spec else ValueKind.STR))))
            break
    sets.append(Edit("enable-metrics" if shape.engine is Engine.SGLANG else "enforce-eager", True))
    res = apply_edits(shape.text, "script", sets)
    for text in (shape.text, res.new_text):
        cmd = parse_command(text, "script")
        argv = _run_script(text, fake_bin, tmp_path)
        # what bash passed after the entry equals what the parser read
        real_args = argv[argv.index(cmd.words[cmd.args_start - 1].value) + 1 :]
        assert real_args == [w.value for w in cmd.words[cmd.args_start :] if not w.dynamic]  # "$@" is empty


def test_bash_check_runs_on_this_machine() -> None:
    assert os.path.exists("/bin/bash") or os.path.exists("/usr/bin/bash")


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def shape_indent(shape: Shape) -> str:
    return shape.indent


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _insertion_somewhere(old: str, new: str) -> bool:
    k = len(new) - len(old)
    return any(new[:i] + new[i + k :] == old for i in range(len(new) - k + 1))


def _the_insertion(old: str, new: str) -> str:
    k = len(new) - len(old)
    p = _common_prefix(old, new)
    # the insertion may start a little before the first difference (same leading chars)
    for i in range(p, -1, -1):
        if new[:i] + new[i + k :] == old:
            return new[i : i + k]
    raise AssertionError("not a single insertion")


def _is_subsequence_by_cuts(old: str, new: str) -> bool:
    it = iter(old)
    return all(ch in it for ch in new)
