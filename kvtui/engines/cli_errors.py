"""The engines' command-line refusals: argparse's ``usage:`` and ``PROG: error: …`` lines.

The most common failure right after an edit: the server does not start at all because a flag is
misspelt, unknown to this build, or got a value of the wrong type. argparse prints (to stderr,
before anything else of a boot)::

    usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH] …
                            …
    launch_server.py: error: unrecognized arguments: --foo 1

and exits with status 2. ``PROG`` names the engine: ``launch_server.py`` / ``sglang`` /
``python3 -m sglang.launch_server`` (Python 3.14 names ``-m`` modules so) for SGLang,
``api_server.py`` / ``vllm serve`` / ``python3 -m vllm.entrypoints.openai.api_server`` for vLLM.
A line with another program's name is not a server's refusal (a helper script's argparse).

``cli_error(text)`` reads an error line: (engine, ``FailureText`` of kind ``bad_args`` with a hint
that names the flag, the value and what was expected). ``usage_engine(text)`` says whose usage
line a line is. Pure core.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from kvtui.engines.events import Engine, FailureKind, FailureText

__all__ = ["bad_args_hint", "cli_error", "usage_engine"]

_SGLANG_PROG = r"(?:python[\d.]* -m )?sglang(?:\.launch_server)?(?: serve)?|launch_server\.py"
_VLLM_PROG = (
    r"(?:python[\d.]* -m )?vllm(?:\.entrypoints\.openai\.api_server|\.entrypoints\.api_server)?(?: serve)?"
    r"|api_server\.py"
)
_ERROR_RE = re.compile(rf"^(?:({_SGLANG_PROG})|({_VLLM_PROG})): error: (.+)$")
_USAGE_RE = re.compile(rf"^usage: (?:({_SGLANG_PROG})|({_VLLM_PROG}))(?: |$)")

_UNRECOGNIZED_RE = re.compile(r"^unrecognized arguments: (.*)$")
_INVALID_VALUE_RE = re.compile(r"^argument ([^:]+): invalid (.+?) value: (.*)$")
_INVALID_CHOICE_RE = re.compile(r"^argument ([^:]+): invalid choice: (.*?)(?: \(choose from (.*)\))?$")
_EXPECTED_RE = re.compile(r"^argument ([^:]+): (expected .*)$")
_ARGUMENT_RE = re.compile(r"^argument ([^:]+): (.*)$")
_REQUIRED_RE = re.compile(r"^the following arguments are required: (.*)$")
_AMBIGUOUS_RE = re.compile(r"^ambiguous option: (\S+) could match (.*)$")

_ENGINE_NAME: Final = {Engine.SGLANG: "SGLang", Engine.VLLM: "vLLM"}

# What argparse's type name means to an operator (vLLM wraps types in helpers).
_TYPE_WORDS: Final = {
    "float": "a number (e.g. 0.9)",
    "int": "a whole number",
    "human_readable_int": "a whole number (a k/m/g suffix is allowed)",
    "str": "a string",
    "bool": "true or false",
}

# The other engine's spelling of a flag, for an unknown-flag hint.
_OTHER_ENGINE_FLAG: Final = {
    Engine.SGLANG: {
        "--gpu-memory-utilization": "--mem-fraction-static",
        "--max-model-len": "--context-length",
        "--max-num-seqs": "--max-running-requests",
        "--max-num-batched-tokens": "--chunked-prefill-size",
        "--model": "--model-path",
        "--enforce-eager": "--disable-cuda-graph",
    },
    Engine.VLLM: {
        "--mem-fraction-static": "--gpu-memory-utilization",
        "--context-length": "--max-model-len",
        "--max-running-requests": "--max-num-seqs",
        "--model-path": "--model (or the positional model of `vllm serve`)",
        "--tp-size": "--tensor-parallel-size",
        "--tp": "--tensor-parallel-size",
        "--disable-cuda-graph": "--enforce-eager",
        "--cuda-graph-max-bs": "--max-cudagraph-capture-size (or compilation_config)",
    },
}


def usage_engine(text: str) -> Engine | None:
    """The engine whose argparse ``usage:`` line this is, else None."""
    if not text.startswith("usage: "):
        return None
    m = _USAGE_RE.match(text)
    if m is None:
        return None
    return Engine.SGLANG if m.group(1) is not None else Engine.VLLM


def cli_error(text: str) -> tuple[Engine, FailureText] | None:
    """An engine's argparse refusal (``launch_server.py: error: …``) as a fatal ``bad_args``
    failure with its hint, or None for any other line."""
    if ": error: " not in text:
        return None
    m = _ERROR_RE.match(text.rstrip())
    if m is None:
        return None
    engine = Engine.SGLANG if m.group(1) is not None else Engine.VLLM
    hint = bad_args_hint(engine, m.group(3))
    return engine, FailureText(text.rstrip(), FailureKind.BAD_ARGS, fatal=True, specificity=3, hint=hint)


def _flag_name(spec: str) -> str:
    """``--tp-size/--tensor-parallel-size`` -> ``--tp-size``; ``-tp`` stays."""
    return spec.split("/")[0].strip()


def _type_word(name: str) -> str:
    base = name.strip().lstrip("_")
    for key in ("optional_type", "_optional_type"):
        base = base.replace(key, "")
    base = base.strip("_. ") or name
    return _TYPE_WORDS.get(base, _TYPE_WORDS.get(name, f"a valid {base}"))


# argparse's other refusals (after ``unrecognized arguments``) -> the hint's words: (the match, the engine's name)
_DETAIL_WORDS: Final[tuple[tuple[re.Pattern[str], Callable[[re.Match[str], str], str]], ...]] = (
    (_INVALID_VALUE_RE, lambda m, _: f"{_flag_name(m.group(1))} got {m.group(3).strip()}, but it expects "
                                     f"{_type_word(m.group(2))}"),
    (_INVALID_CHOICE_RE, lambda m, _: f"{_flag_name(m.group(1))} does not accept {m.group(2).strip()}"
                                      + (f": choose from {m.group(3)}" if m.group(3) else "")),
    (_EXPECTED_RE, lambda m, _: f"{_flag_name(m.group(1))} {m.group(2)} (a flag without its value?)"),
    (_REQUIRED_RE, lambda m, name: f"{name} needs {m.group(1)}: add it to the command line"),
    (_AMBIGUOUS_RE, lambda m, _: f"{m.group(1)} is an abbreviation of several flags ({m.group(2)}): "
                                 "spell the flag out"),
    (_ARGUMENT_RE, lambda m, _: f"{_flag_name(m.group(1))}: {m.group(2)}"),
)


def bad_args_hint(engine: Engine, detail: str) -> str:
    """The hint for argparse's error ``detail`` (the text after ``PROG: error: ``)."""
    name = _ENGINE_NAME.get(engine, "server")
    head = "the server refused its arguments: "
    m = _UNRECOGNIZED_RE.match(detail)
    if m is not None:
        words = m.group(1).split()
        flags = [w.split("=", 1)[0] for w in words if w.startswith("-") and len(w) > 1]
        if not flags:
            stray = " ".join(words) or "?"
            return (head + f"{stray!r} is not expected here (a value without its flag, or an extra positional "
                    "argument?): check the command line")
        others = _OTHER_ENGINE_FLAG.get(engine, {})
        notes = [f" ({f} is the other engine's flag; {name} uses {others[f]})" for f in flags if f in others]
        if len(flags) == 1:
            text = f"{flags[0]} is not a flag of this {name} build (remove it or check the spelling)"
        else:
            text = f"{', '.join(flags)} are not flags of this {name} build (remove them or check the spelling)"
        return head + text + "".join(notes)
    for pattern, say in _DETAIL_WORDS:
        if (m := pattern.match(detail)) is not None:
            return head + say(m, name)
    return head + detail
