"""Verification: does a written file, a command line or the engine's own argument dump carry the edits?"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kvtui.engines.events import Engine
from kvtui.flags.cmdline import ServerCommand
from kvtui.flags.edit import Edit, _occurrences, _resolve
from kvtui.flags.errors import FlagError
from kvtui.flags.lexer import Kind
from kvtui.flags.locate import parse_command
from kvtui.flags.values import same_value

_VL = Engine.VLLM


def check_command(cmd: ServerCommand, edits: Iterable[Edit]) -> list[str]:
    """Problems: each edit whose value the command does not carry (empty list = all applied)."""
    problems: list[str] = []
    for e in edits:
        try:
            r = _resolve(cmd.engine, e, strict=False)
        except FlagError as exc:
            problems.append(str(exc))
            continue
        occ = _occurrences(cmd, r)
        actual: str | bool | None = occ[-1].value if occ else None
        if not occ and r.spec is not None and r.spec.concept == "model":
            actual = cmd.model
        if r.value is None:
            if occ:
                problems.append(f"--{r.name} is still present ({actual})")
            continue
        if not same_value(actual, r.value):
            shown = "absent" if actual is None else ("on" if actual is True else "off" if actual is False else actual)
            want = "on" if r.value is True else "off" if r.value is False else r.value
            problems.append(f"--{r.name} is {shown}, expected {want}")
    return problems


def check_text(text: str, kind: Kind, edits: Iterable[Edit]) -> list[str]:
    """Re-read a written unit/script: problems with the edits (empty = every edit is there)."""
    try:
        cmd = parse_command(text, kind)
    except FlagError as exc:
        return [f"the written file no longer parses: {exc}"]
    return check_command(cmd, edits)


def check_dump(engine: Engine, dump: Mapping[str, object], edits: Iterable[Edit]) -> list[str]:
    """Compare the engine's own argument dump (``Boot.flags``: SGLang ``server_args``, vLLM
    ``non-default args``) with the edits. Removals are not checked (the dump shows a default)."""
    problems: list[str] = []
    for e in edits:
        if e.value is None:
            continue
        try:
            r = _resolve(engine, e, strict=False)
        except FlagError as exc:
            problems.append(str(exc))
            continue
        if r.value is None:
            continue
        key = r.spec.dest(engine) if r.spec is not None else r.name.replace("-", "_")
        # under whichever key this release dumps it (SGLang 0.5.23: cuda_graph_max_bs_decode)
        got = r.spec.in_dump(engine, dump) if r.spec is not None else ((key, dump[key]) if key in dump else None)
        if got is None:
            if engine is _VL:
                # vLLM dumps only non-default args: a value equal to the default is not shown
                continue
            problems.append(f"the engine's argument dump has no {key}")
            continue
        key, running = got
        if not same_value(running, r.value):
            problems.append(f"the engine runs with {key}={running!r}, expected {r.value}")
    return problems
