"""Environment edits (``apply --setenv NAME=VALUE`` / ``--unsetenv NAME``, issue 16): the same
properties as flag edits (tests/test_flags.py) on generated units and launch scripts — setting a
variable changes only its value's bytes, adding one is a pure insertion of one line, removing one
only cuts bytes — and launch scripts run through the real bash before and after an edit give the
server exactly the environment the parser reads."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.envedit import (
    EnvEdit,
    EnvError,
    apply_env_edits,
    check_env,
    check_environment,
    effective_env,
    env_between,
    parse_env_args,
    parse_environ,
    parse_environment_property,
)
from kvtui.flags import parse_command

NAMES = ["VLLM_CPU_KVCACHE_SPACE", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_DEBUG", "SGLANG_X", "OMP_NUM_THREADS", "HF_HOME"]
VALUE = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._,:/+@-]{0,11}", fullmatch=True)


@dataclass
class GAssign:
    name: str
    value: str
    form: str  # unit: env / env_q / env_vq / exec ; script: export / export_q / plain / prefix
    vstart: int = -1
    vend: int = -1


@dataclass
class EnvShape:
    kind: str
    text: str
    assigns: list[GAssign]
    truth: dict[str, str]  # the effective environment
    plain_names: set[str]  # script: set by a plain NAME=V line (exported by the parent in the bash run)


@st.composite
def env_shapes(draw: st.DrawFn, kind: str | None = None) -> EnvShape:
    kind = kind or draw(st.sampled_from(["unit", "script"]))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=0, max_size=5))  # repeats: set twice
    forms = ["env", "env_q", "env_vq"] if kind == "unit" else ["export", "export_q", "plain"]
    assigns = [GAssign(n, draw(VALUE), draw(st.sampled_from(forms))) for n in names]
    prefix_names = draw(st.lists(st.sampled_from(NAMES), max_size=2, unique=True))
    prefixes = [GAssign(n, draw(VALUE), "exec" if kind == "unit" else "prefix") for n in prefix_names]
    out: list[str] = []
    pos = 0

    def emit(s: str) -> None:
        nonlocal pos
        out.append(s)
        pos += len(s)

    def emit_value(a: GAssign, quote: str = "") -> None:
        emit(quote)
        a.vstart = pos
        emit(a.value)
        a.vend = pos
        emit(quote)

    if kind == "unit":
        emit("[Unit]\nDescription=generated\n\n[Service]\nType=simple\n")
        i = 0
        while i < len(assigns):
            group = assigns[i : i + draw(st.integers(1, 2))]
            i += len(group)
            emit("Environment=")
            for k, a in enumerate(group):
                if k:
                    emit(" ")
                if a.form == "env_q":
                    emit(f'"{a.name}=')
                    emit_value(a)
                    emit('"')
                elif a.form == "env_vq":
                    emit(f"{a.name}=")
                    emit_value(a, '"')
                else:
                    emit(f"{a.name}=")
                    emit_value(a)
            emit("\n")
        emit("ExecStart=" + ("/usr/bin/env " if prefixes else ""))
        for a in prefixes:
            emit(f"{a.name}=")
            emit_value(a)
            emit(" ")
        emit("python3 -m vllm.entrypoints.openai.api_server --model /m \\\n    --max-num-seqs 8\n")
        emit("Restart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n")
    else:
        emit("#!/bin/bash\n# launch\nset -e\n")
        for a in assigns:
            if a.form == "plain":
                emit(f"{a.name}=")
                emit_value(a)
            else:
                emit(f"export {a.name}=")
                emit_value(a, '"' if a.form == "export_q" else "")
            emit("\n")
        emit("cd /\n")
        for a in prefixes:
            emit(f"{a.name}=")
            emit_value(a)
            emit(" ")
        emit(draw(st.sampled_from(["exec ", ""])) + "python3 -m vllm.entrypoints.openai.api_server --model /m \\\n")
        emit("  --max-num-seqs 8\necho done\n")
    text = "".join(out)
    truth: dict[str, str] = {}
    for a in [*assigns, *prefixes]:
        truth[a.name] = a.value
    plain = {a.name for a in assigns if a.form == "plain"}
    return EnvShape(kind, text, [*assigns, *prefixes], truth, plain)


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _effective_assign(shape: EnvShape, name: str) -> GAssign:
    return [a for a in shape.assigns if a.name == name][-1]


def _flags(text: str, kind: str) -> dict[str, str | bool]:
    return parse_command(text, kind).values()  # type: ignore[arg-type]


@PROPS
@given(env_shapes())
def test_prop_parse_reads_the_effective_environment(shape: EnvShape) -> None:
    assert effective_env(shape.text, shape.kind) == shape.truth  # type: ignore[arg-type]


@PROPS
@given(env_shapes(), st.data())
def test_prop_set_existing_changes_only_the_value(shape: EnvShape, data: st.DataObject) -> None:
    if not shape.truth:
        return
    name = data.draw(st.sampled_from(sorted(shape.truth)))
    value = data.draw(VALUE.filter(lambda v: v != shape.truth[name]))
    res = apply_env_edits(shape.text, shape.kind, [EnvEdit(name, value)])  # type: ignore[arg-type]
    a = _effective_assign(shape, name)
    new = res.new_text
    assert new == shape.text[: a.vstart] + value + shape.text[a.vend :]
    assert effective_env(new, shape.kind) == {**shape.truth, name: value}  # type: ignore[arg-type]
    assert _flags(new, shape.kind) == _flags(shape.text, shape.kind)
    assert res.changes[0].action == "set"
    assert check_env(new, shape.kind, [EnvEdit(name, value)]) == []  # type: ignore[arg-type]


@PROPS
@given(env_shapes(), st.data())
def test_prop_add_missing_is_one_inserted_line(shape: EnvShape, data: st.DataObject) -> None:
    missing = [n for n in NAMES if n not in shape.truth]
    if not missing:
        return
    name = data.draw(st.sampled_from(missing))
    value = data.draw(VALUE)
    res = apply_env_edits(shape.text, shape.kind, [EnvEdit(name, value)])  # type: ignore[arg-type]
    old_lines, new_lines = shape.text.splitlines(True), res.new_text.splitlines(True)
    assert len(new_lines) == len(old_lines) + 1
    extra = [i for i in range(len(new_lines)) if new_lines[:i] + new_lines[i + 1 :] == old_lines]
    assert extra, "not a single inserted line"
    line = new_lines[extra[0]]
    if shape.kind == "unit":
        assert line == f"Environment={name}={value}\n"
        # after the last Environment= line, else right before ExecStart=
        assert new_lines[extra[0] + 1].startswith(("ExecStart=", "Environment="))
    else:
        assert line == f"export {name}={value}\n"
        assert "python3 -m vllm" in new_lines[extra[0] + 1] or "=" in new_lines[extra[0] + 1]
    assert effective_env(res.new_text, shape.kind) == {**shape.truth, name: value}  # type: ignore[arg-type]
    assert _flags(res.new_text, shape.kind) == _flags(shape.text, shape.kind)
    assert res.changes[0].action == "add"


@PROPS
@given(env_shapes(), st.data())
def test_prop_unset_only_cuts_bytes(shape: EnvShape, data: st.DataObject) -> None:
    if not shape.truth:
        with pytest.raises(EnvError, match="is not set"):
            apply_env_edits(shape.text, shape.kind, [EnvEdit(NAMES[0], None)])  # type: ignore[arg-type]
        return
    name = data.draw(st.sampled_from(sorted(shape.truth)))
    res = apply_env_edits(shape.text, shape.kind, [EnvEdit(name, None)])  # type: ignore[arg-type]
    assert _is_subsequence_by_cuts(shape.text, res.new_text)
    assert effective_env(res.new_text, shape.kind) == {k: v for k, v in shape.truth.items() if k != name}  # type: ignore[arg-type]
    assert _flags(res.new_text, shape.kind) == _flags(shape.text, shape.kind)
    tail = "\nRestart=on-failure\n" if shape.kind == "unit" else "echo done\n"
    assert tail in res.new_text
    assert "Environment=\n" not in res.new_text  # an empty Environment= would reset the list
    assert check_env(res.new_text, shape.kind, [EnvEdit(name, None)]) == []  # type: ignore[arg-type]


@PROPS
@given(env_shapes(), st.data())
def test_prop_env_between_undoes_an_edit(shape: EnvShape, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(NAMES))
    value = data.draw(VALUE)
    res = apply_env_edits(shape.text, shape.kind, [EnvEdit(name, value)])  # type: ignore[arg-type]
    back = env_between(res.new_text, shape.text, shape.kind)  # type: ignore[arg-type]
    expected = [] if shape.truth.get(name) == value else (
        [EnvEdit(name, shape.truth[name])] if name in shape.truth else [EnvEdit(name, None)])
    assert back == expected


# ---------------------------------------------------------------------------------------------
# the real bash agrees, before and after an edit
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("envbin")
    p = d / "python3"  # the "server": writes the environment it was started with
    p.write_text('#!/bin/sh\nenv -0 > "$ENV_OUT"\n')
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return d


def _server_env(text: str, fake_bin: Path, tmp: Path, parent: dict[str, str]) -> dict[str, str]:
    script = tmp / "launch.sh"
    script.write_text(text)
    out = tmp / "env.out"
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "ENV_OUT": str(out), "HOME": str(tmp), **parent}
    subprocess.run(["bash", str(script)], env=env, check=True, capture_output=True, timeout=10, cwd=tmp)
    got = parse_environ(out.read_text())
    return {k: v for k, v in got.items() if k in NAMES}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(shape=env_shapes(kind="script"), data=st.data())
def test_prop_bash_starts_the_server_with_the_parsed_environment(
    shape: EnvShape, data: st.DataObject, fake_bin: Path, tmp_path: Path
) -> None:
    # a plain NAME=V line reaches the server when NAME is already exported (systemd, a profile)
    parent = {n: "from-parent" for n in shape.plain_names}
    name = data.draw(st.sampled_from(NAMES))
    edit = data.draw(st.sampled_from(["set", "unset"])) if name in shape.truth else "set"
    e = EnvEdit(name, data.draw(VALUE) if edit == "set" else None)
    res = apply_env_edits(shape.text, "script", [e])
    for text in (shape.text, res.new_text):
        seen = _server_env(text, fake_bin, tmp_path, parent)
        parsed = effective_env(text, "script")
        expected = {**{k: v for k, v in parent.items()}, **parsed}
        assert seen == expected


def test_bash_is_here() -> None:
    assert os.path.exists("/bin/bash") or os.path.exists("/usr/bin/bash")


# ---------------------------------------------------------------------------------------------
# examples: arguments, refusals, what systemd and /proc say
# ---------------------------------------------------------------------------------------------


def test_parse_env_args() -> None:
    assert parse_env_args(["VLLM_CPU_KVCACHE_SPACE=2"], ["NCCL_DEBUG"]) == [
        EnvEdit("VLLM_CPU_KVCACHE_SPACE", "2"), EnvEdit("NCCL_DEBUG", None)]
    assert parse_env_args(["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"])[0].value == "expandable_segments:True"
    assert str(EnvEdit("A", "1")) == "--setenv A=1"
    assert str(EnvEdit("A", None)) == "--unsetenv A"


@pytest.mark.parametrize(
    ("sets", "unsets", "message"),
    [
        (["2FAST=1"], [], "expected a variable name"),
        (["A"], [], "expected NAME=VALUE"),
        (["A="], [], "empty value"),
        (["A=$(rm -rf /)"], [], "the shell or systemd would interpret"),
        (["A=x y"], [], "a space"),
        (["A=1"], ["A"], "change the same variable"),
        ([], ["A-B"], "expected a variable name"),
    ],
)
def test_refused_arguments_say_why(sets: list[str], unsets: list[str], message: str) -> None:
    with pytest.raises(EnvError, match=re.escape(message)):
        parse_env_args(sets, unsets)


def test_a_value_with_escapes_is_not_rewritten() -> None:
    unit = '[Service]\nEnvironment="A=x\\ty"\nExecStart=vllm serve /m\n'
    with pytest.raises(EnvError, match="escapes"):
        apply_env_edits(unit, "unit", [EnvEdit("A", "2")])


def test_unset_of_a_variable_from_elsewhere_says_where_else() -> None:
    unit = "[Service]\nEnvironmentFile=/etc/default/vllm\nExecStart=vllm serve /m\n"
    with pytest.raises(EnvError, match="EnvironmentFile"):
        apply_env_edits(unit, "unit", [EnvEdit("A", None)])
    res = apply_env_edits(unit, "unit", [EnvEdit("A", "1")])
    assert res.new_text == "[Service]\nEnvironmentFile=/etc/default/vllm\nEnvironment=A=1\nExecStart=vllm serve /m\n"
    assert any("EnvironmentFile" in w for w in res.warnings)


def test_a_script_unset_line_and_the_value_it_leaves() -> None:
    script = "#!/bin/sh\nexport A=1\nunset A\nexec vllm serve /m\n"
    assert effective_env(script, "script") == {}
    res = apply_env_edits(script, "script", [EnvEdit("A", "2")])
    assert res.new_text == "#!/bin/sh\nexport A=1\nunset A\nexport A=2\nexec vllm serve /m\n"


def test_an_export_among_other_commands_is_not_removed_half() -> None:
    script = "#!/bin/sh\nexport A=1; cd /\nexec vllm serve /m\n"
    with pytest.raises(EnvError, match="other commands"):
        apply_env_edits(script, "script", [EnvEdit("A", None)])
    assert apply_env_edits(script, "script", [EnvEdit("A", "2")]).new_text == script.replace("A=1", "A=2")


def test_systemd_and_proc_views() -> None:
    show = 'Environment=A=1 "B=two words" VLLM_CPU_KVCACHE_SPACE=2\n'
    env = parse_environment_property(show)
    assert env == {"A": "1", "B": "two words", "VLLM_CPU_KVCACHE_SPACE": "2"}
    assert check_environment(env, [EnvEdit("VLLM_CPU_KVCACHE_SPACE", "2"), EnvEdit("C", None)]) == []
    assert check_environment(env, [EnvEdit("A", "3")], what="systemd") == ["systemd has A=1, expected 3"]
    assert check_environment(env, [EnvEdit("A", None)]) == ["the server still has A=1"]
    assert check_environment({}, [EnvEdit("A", "3")]) == ["the server has no A, expected 3"]
    assert parse_environ("A=1\0PATH=/bin\0junk\0") == {"A": "1", "PATH": "/bin"}


def _is_subsequence_by_cuts(old: str, new: str) -> bool:
    it = iter(old)
    return all(ch in it for ch in new)
