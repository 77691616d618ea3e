"""The server command in a list of words: its engine, entry point, flags and positionals.

``_command_from_words`` recognises an SGLang or vLLM entry (``-m sglang.launch_server``, ``sglang
serve``, ``vllm serve``, the api_server module or script) and reads the flags after it the way
argparse would (``--k v``, ``--k=v``, switches, vLLM's ``--no-X`` and ``-tp``, ``nargs="+"`` lists);
the last occurrence of a flag wins.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvtui.engines.events import Engine
from kvtui.flags.errors import NoServerCommand
from kvtui.flags.lexer import _ASSIGN_RE, Kind, Word, _line_no
from kvtui.knobs import SHORT_FLAGS, Knob, ValueKind, dash_name, lookup

_SG = Engine.SGLANG
_VL = Engine.VLLM


@dataclass(frozen=True, slots=True)
class FlagOccurrence:
    """One flag as written. ``name``: as spelled, without dashes; ``canonical``: kvtui's spelling
    for the engine; ``value``: the unquoted value, True for a bare switch, False for ``--no-X``."""

    name: str
    canonical: str
    spec: Knob | None
    flag: Word
    values: tuple[Word, ...]
    inline: bool  # --k=v
    value: str | bool

    @property
    def start(self) -> int:
        return self.flag.start

    @property
    def end(self) -> int:
        return self.values[-1].end if self.values else self.flag.end

    @property
    def dynamic_value(self) -> bool:
        """The value comes from a variable (``$FRAC``, ``${FRAC}``, ``$(…)``)."""
        return any(v.dynamic for v in self.values) or (self.inline and self.flag.dynamic)


@dataclass(frozen=True, slots=True)
class ServerCommand:
    """The server command found in a unit or script.

    ``start``/``end``: the command's words span ``text[start:end]``; ``args_start``: the index in
    ``words`` of the first word after the entry (``launch_server`` / ``serve``);
    ``exec_line``: the 1-based line of the ``ExecStart=`` (unit) or the command (script)."""

    kind: Kind
    engine: Engine
    entry: str
    words: tuple[Word, ...]
    args_start: int
    flags: tuple[FlagOccurrence, ...]
    positionals: tuple[Word, ...]
    env: Mapping[str, str]
    start: int
    end: int
    exec_line: int
    warnings: tuple[str, ...] = ()

    def find(self, name: str) -> list[FlagOccurrence]:
        """Every occurrence of a flag, any alias, in order."""
        spec = lookup(self.engine, name)
        if spec is not None:
            return [o for o in self.flags if o.spec is spec]
        n = dash_name(name)
        return [o for o in self.flags if o.spec is None and o.canonical == n]

    def get(self, name: str) -> str | bool | None:
        """The effective value of a flag (the last occurrence wins, as with argparse)."""
        occ = self.find(name)
        if not occ:
            if lookup(self.engine, name) is not None and lookup(self.engine, name) is lookup(self.engine, "model"):
                return self.model
            return None
        return occ[-1].value

    @property
    def model(self) -> str | None:
        occ = [o for o in self.flags if o.spec is not None and o.spec.concept == "model"]
        if occ and isinstance(occ[-1].value, str):
            return occ[-1].value
        if self.engine is _VL and self.positionals and self.entry.endswith("serve"):
            return self.positionals[0].value
        return None

    def values(self) -> dict[str, str | bool]:
        """Every flag's effective value by canonical name (last occurrence wins)."""
        out: dict[str, str | bool] = {}
        for o in self.flags:
            out[o.canonical] = o.value
        return out

    def argv(self) -> list[str]:
        return [w.value for w in self.words]


_MODULES: dict[str, Engine] = {
    "sglang.launch_server": _SG,
    "sglang_router.launch_server": _SG,
    "sglang.srt.server": _SG,
    "vllm.entrypoints.openai.api_server": _VL,
    "vllm.entrypoints.api_server": _VL,
}


def _find_entry(words: Sequence[Word]) -> tuple[Engine, int, str] | None:
    """(engine, index of the first argument word, entry description) or None."""
    for i, w in enumerate(words):
        v = w.value
        if v == "-m" and i + 1 < len(words) and words[i + 1].value in _MODULES:
            mod = words[i + 1].value
            return _MODULES[mod], i + 2, f"-m {mod}"
        base = v.rsplit("/", 1)[-1].lstrip("@-:+!")
        if base in ("sglang", "vllm") and i + 1 < len(words) and words[i + 1].value == "serve":
            return (_SG if base == "sglang" else _VL), i + 2, f"{base} serve"
        if v.endswith(("sglang/launch_server.py", "vllm/entrypoints/openai/api_server.py")):
            return (_SG if "sglang" in v else _VL), i + 1, base
    return None


def _mentions_engine(words: Sequence[Word]) -> bool:
    return any(("sglang" in w.value or "vllm" in w.value) and ("launch_server" in w.value or " serve" in w.value
               or "api_server" in w.value) for w in words)


def _is_flag_word(v: str, engine: Engine) -> bool:
    if v.startswith("--") and len(v) > 2:
        return True
    return v.startswith("-") and len(v) > 1 and not _is_number(v)


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _parse_flags(
    words: Sequence[Word], args_start: int, engine: Engine
) -> tuple[list[FlagOccurrence], list[Word]]:
    flags: list[FlagOccurrence] = []
    positionals: list[Word] = []
    i = args_start
    n = len(words)
    while i < n:
        w = words[i]
        v = w.value
        if v == "--":
            positionals.extend(words[i + 1 :])
            break
        if not _is_flag_word(v, engine) or w.dynamic:
            positionals.append(w)
            i += 1
            continue
        body = v[2:] if v.startswith("--") else v[1:]
        name, eq, inline_val = body.partition("=")
        spec = lookup(engine, name)
        if v.startswith("-") and not v.startswith("--") and dash_name(name) not in SHORT_FLAGS:
            spec = None  # -O3 style: keep as an unknown flag
        negated = (
            spec is not None and engine is _VL and dash_name(name).startswith("no-") and spec.kind is ValueKind.BOOL
            and dash_name(name)[3:] in spec.names.get(_VL, ())
        )
        canonical = spec.written(engine) if spec is not None else dash_name(name)
        if eq:
            value: str | bool = inline_val
            flags.append(FlagOccurrence(name, canonical, spec, w, (), True, value))
            i += 1
            continue
        if spec is not None and spec.kind is ValueKind.BOOL:
            flags.append(FlagOccurrence(name, canonical, spec, w, (), False, not negated))
            i += 1
            continue
        vals: list[Word] = []
        j = i + 1
        if spec is not None and spec.kind is ValueKind.INT_LIST:
            while j < n and not _is_flag_word(words[j].value, engine):
                vals.append(words[j])
                j += 1
        elif j < n and not (_is_flag_word(words[j].value, engine) and not words[j].dynamic):
            vals.append(words[j])
            j += 1
        value = (" ".join(x.value for x in vals) if len(vals) > 1 else vals[0].value) if vals else True
        flags.append(FlagOccurrence(name, canonical, spec, w, tuple(vals), False, value))
        i = j
    return flags, positionals


def _command_from_words(
    text: str, kind: Kind, words: list[Word], exec_line: int, *, env: dict[str, str] | None = None
) -> ServerCommand | None:
    found = _find_entry(words)
    if found is None:
        return None
    engine, args_start, entry = found
    env_out: dict[str, str] = dict(env or {})
    for w in words[: args_start]:
        if _ASSIGN_RE.match(w.value):
            k, _, val = w.value.partition("=")
            env_out[k] = val
    flags, positionals = _parse_flags(words, args_start, engine)
    warnings: list[str] = []
    for p in positionals:
        if p.dynamic:
            warnings.append(
                f"line {_line_no(text, p.start)}: the command also takes arguments from {p.raw}, "
                "which kvtui cannot see; an edit may be overridden there"
            )
    seen: dict[str, FlagOccurrence] = {}
    for o in flags:
        prev = seen.get(o.canonical)
        if prev is not None:
            warnings.append(
                f"--{o.canonical} is given twice (lines {_line_no(text, prev.start)} and "
                f"{_line_no(text, o.start)}); the engine uses the last one"
            )
        seen[o.canonical] = o
    end = words[-1].end
    return ServerCommand(
        kind=kind,
        engine=engine,
        entry=entry,
        words=tuple(words),
        args_start=args_start,
        flags=tuple(flags),
        positionals=tuple(positionals),
        env=env_out,
        start=words[0].start,
        end=end,
        exec_line=exec_line,
        warnings=tuple(warnings),
    )


def parse_argv(argv: Sequence[str]) -> ServerCommand:
    """Parse an argument vector (``systemctl show -p ExecStart``, ``/proc/PID/cmdline``)."""
    words: list[Word] = []
    pos = 0
    for a in argv:
        words.append(Word(a, a, pos, pos + len(a)))
        pos += len(a) + 1
    cmd = _command_from_words(" ".join(argv), "script", words, 1)
    if cmd is None:
        raise NoServerCommand("the command line does not start an SGLang or vLLM server")
    return cmd


_ARGV_RE = re.compile(r"argv\[\]=(.*?) ; (?:ignore_errors|flags)=")


def parse_systemctl_execstart(show_output: str) -> list[list[str]]:
    """The argument vectors in ``systemctl show -p ExecStart`` output
    (``ExecStart={ path=… ; argv[]=… ; ignore_errors=no ; … }``)."""
    out: list[list[str]] = []
    for m in _ARGV_RE.finditer(show_output):
        raw = m.group(1)
        try:
            out.append(shlex.split(raw))
        except ValueError:
            out.append(raw.split())
    return out
