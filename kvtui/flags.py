"""Server flags inside systemd units and launch scripts: parse, edit, verify (pure core).

kvtui's only write to a host is an edit of the server's flags. This module finds the server
command (``python -m sglang.launch_server …``, ``sglang serve …``, ``vllm serve …``,
``python -m vllm.entrypoints.openai.api_server …``) inside

* a systemd unit or drop-in (``kind="unit"``): the ``ExecStart=`` of ``[Service]`` with ``\\``
  continuations, comment lines inside a continuation, quotes, ``ExecStart=`` reset lines, the
  ``-@:+!`` prefixes, ``/usr/bin/env VAR=… `` assignments;
* a launch script (``kind="script"``): the one shell command line that starts the server, possibly
  after ``exec``/``nohup``/``env``/``VAR=…`` wrappers, with continuations, quotes, redirections,
  pipes and comments;

and edits it so that **only** the changed bytes change: ``--set FLAG=VALUE`` replaces only the
value token (keeping its quoting), a missing flag is added in its neighbours' style (its own
continuation line with the same indentation and ``\\`` column when the flags sit one per line,
inline otherwise; ``--k v`` or ``--k=v`` as the majority does), ``--set FLAG`` sets a boolean flag,
``--unset FLAG`` removes a flag, its value and a line it leaves empty.

Each engine's aliases are known (``--tp`` / ``--tp-size`` / ``--tensor-parallel-size``, …), and
an edit named with the *other* engine's name (``max-num-seqs`` on an SGLang server) maps to the
equivalent flag, with a note. Values the engine would refuse (a fraction outside (0, 1), a negative
count, a non-number) and values with shell or systemd metacharacters are refused with a message
that says why.

No I/O: every function takes text and returns text or data.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from kvtui.engines.events import Engine

Kind = Literal["unit", "script"]
EditValue = str | bool | None  # str: a value; True: a bare boolean flag; False: boolean off; None: unset


class FlagError(ValueError):
    """Bad input or an edit kvtui will not make; ``str()`` is the user-facing message."""


class BadValue(FlagError):
    """An edit malformed as given, whatever the host's file says: a value the engine would refuse
    (not a number, out of range, shell metacharacters), a value for a switch, a switch without its
    value, the same flag twice. A usage error (exit 2) in every command, as in ``kvtui calc``."""


class NoServerCommand(FlagError):
    """The text holds no server command. ``runs`` names the script an ExecStart runs instead
    (``ExecStart=/opt/launch.sh``), so the caller can follow it."""

    def __init__(self, message: str, runs: str | None = None) -> None:
        super().__init__(message)
        self.runs = runs


# =============================================================================================
# What the engines accept
# =============================================================================================


class ValueKind(StrEnum):
    BOOL = "bool"
    FRACTION = "fraction"  # float in (0, 1) (vLLM: (0, 1])
    POS_INT = "pos_int"  # integer > 0
    NONNEG_INT = "nonneg_int"
    NONNEG_FLOAT = "nonneg_float"
    CHUNK = "chunk"  # integer > 0, or -1 (disabled)
    PORT = "port"
    LEN = "len"  # integer > 0; vLLM also accepts 32k / 1m
    INT_LIST = "int_list"  # one or more integers (nargs="+")
    STR = "str"


@dataclass(frozen=True, slots=True)
class FlagSpec:
    """One server setting. ``names[engine]``: the spellings that engine accepts, the first is the
    one kvtui writes; ``dest``: the key in the engine's own argument dump."""

    concept: str
    kind: ValueKind
    names: Mapping[Engine, tuple[str, ...]]
    dests: Mapping[Engine, str]
    choices: tuple[str, ...] = ()
    negatable: frozenset[Engine] = frozenset()  # engines with a --no-FLAG form

    def written(self, engine: Engine) -> str:
        own = self.names.get(engine)
        if own:
            return own[0]
        other = next(iter(self.names.values()))
        return other[0]

    def dest(self, engine: Engine) -> str:
        return self.dests.get(engine) or self.written(engine).replace("-", "_")


_SG = Engine.SGLANG
_VL = Engine.VLLM


def _spec(
    concept: str,
    kind: ValueKind,
    sglang: tuple[str, ...] = (),
    vllm: tuple[str, ...] = (),
    *,
    sg_dest: str | None = None,
    vl_dest: str | None = None,
    choices: tuple[str, ...] = (),
) -> FlagSpec:
    names: dict[Engine, tuple[str, ...]] = {}
    dests: dict[Engine, str] = {}
    if sglang:
        names[_SG] = sglang
        dests[_SG] = sg_dest or sglang[0].replace("-", "_")
    if vllm:
        names[_VL] = vllm
        dests[_VL] = vl_dest or vllm[0].replace("-", "_")
    negatable = frozenset({_VL}) if kind is ValueKind.BOOL and vllm else frozenset()
    return FlagSpec(concept, kind, names, dests, choices, negatable)


_V = ValueKind
SPECS: tuple[FlagSpec, ...] = (
    # memory and sizing (what the calculator models)
    _spec("mem_fraction", _V.FRACTION, ("mem-fraction-static",), ("gpu-memory-utilization",)),
    _spec("max_running", _V.POS_INT, ("max-running-requests",), ("max-num-seqs",)),
    _spec("context_length", _V.LEN, ("context-length",), ("max-model-len",)),
    _spec("cuda_graph_max_bs", _V.POS_INT, ("cuda-graph-max-bs",), ("max-cudagraph-capture-size",)),
    _spec("cuda_graph_bs", _V.INT_LIST, ("cuda-graph-bs",), ("cuda-graph-sizes",)),
    _spec(
        "kv_cache_dtype",
        _V.STR,
        ("kv-cache-dtype",),
        ("kv-cache-dtype",),
        choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "bf16", "bfloat16", "fp4_e2m1"),
    ),
    _spec("page_size", _V.POS_INT, ("page-size",), ("block-size",)),
    _spec("max_total_tokens", _V.POS_INT, ("max-total-tokens",)),
    _spec("chunked_prefill", _V.CHUNK, ("chunked-prefill-size",), ("max-num-batched-tokens",)),
    _spec("max_prefill_tokens", _V.POS_INT, ("max-prefill-tokens",)),
    _spec("swap_space", _V.NONNEG_FLOAT, (), ("swap-space",)),
    _spec("cpu_offload_gb", _V.NONNEG_FLOAT, (), ("cpu-offload-gb",)),
    # parallelism
    _spec(
        "tp",
        _V.POS_INT,
        ("tp-size", "tensor-parallel-size", "tp"),
        ("tensor-parallel-size", "tp"),
        sg_dest="tp_size",
    ),
    _spec(
        "pp",
        _V.POS_INT,
        ("pp-size", "pipeline-parallel-size"),
        ("pipeline-parallel-size", "pp"),
        sg_dest="pp_size",
    ),
    _spec("dp", _V.POS_INT, ("dp-size", "data-parallel-size", "dp"), ("data-parallel-size", "dp"), sg_dest="dp_size"),
    _spec("ep", _V.POS_INT, ("ep-size", "expert-parallel-size", "ep"), (), sg_dest="ep_size"),
    _spec("nnodes", _V.POS_INT, ("nnodes",)),
    _spec("node_rank", _V.NONNEG_INT, ("node-rank",)),
    _spec("dist_init_addr", _V.STR, ("dist-init-addr",)),
    _spec("enable_dp_attention", _V.BOOL, ("enable-dp-attention",)),
    _spec("enable_expert_parallel", _V.BOOL, (), ("enable-expert-parallel",)),
    _spec("distributed_executor_backend", _V.STR, (), ("distributed-executor-backend",)),
    # model
    _spec("model", _V.STR, ("model-path", "model"), ("model",), sg_dest="model_path"),
    _spec("tokenizer", _V.STR, ("tokenizer-path",), ("tokenizer",)),
    _spec("served_model_name", _V.STR, ("served-model-name",), ("served-model-name",)),
    _spec("trust_remote_code", _V.BOOL, ("trust-remote-code",), ("trust-remote-code",)),
    _spec("dtype", _V.STR, ("dtype",), ("dtype",)),
    _spec("quantization", _V.STR, ("quantization",), ("quantization", "q")),
    _spec("load_format", _V.STR, ("load-format",), ("load-format",)),
    _spec("revision", _V.STR, ("revision",), ("revision",)),
    _spec("seed", _V.NONNEG_INT, ("random-seed",), ("seed",)),
    # runtime
    _spec("disable_cuda_graph", _V.BOOL, ("disable-cuda-graph",), ("enforce-eager",)),
    _spec("enable_torch_compile", _V.BOOL, ("enable-torch-compile",)),
    _spec("disable_radix_cache", _V.BOOL, ("disable-radix-cache",)),
    _spec("enable_prefix_caching", _V.BOOL, (), ("enable-prefix-caching",)),
    _spec("enable_chunked_prefill", _V.BOOL, (), ("enable-chunked-prefill",)),
    _spec("enable_hierarchical_cache", _V.BOOL, ("enable-hierarchical-cache",)),
    _spec("enable_metrics", _V.BOOL, ("enable-metrics",)),
    _spec("skip_server_warmup", _V.BOOL, ("skip-server-warmup",)),
    _spec("attention_backend", _V.STR, ("attention-backend",), ()),
    _spec("schedule_conservativeness", _V.NONNEG_FLOAT, ("schedule-conservativeness",)),
    _spec("watchdog_timeout", _V.NONNEG_FLOAT, ("watchdog-timeout",)),
    _spec("max_seq_len_to_capture", _V.POS_INT, (), ("max-seq-len-to-capture",)),
    _spec("speculative_algorithm", _V.STR, ("speculative-algorithm",)),
    _spec("speculative_draft_model_path", _V.STR, ("speculative-draft-model-path",)),
    _spec("speculative_num_steps", _V.POS_INT, ("speculative-num-steps",)),
    _spec("speculative_eagle_topk", _V.POS_INT, ("speculative-eagle-topk",)),
    _spec("speculative_num_draft_tokens", _V.POS_INT, ("speculative-num-draft-tokens",)),
    # serving
    _spec("host", _V.STR, ("host",), ("host",)),
    _spec("port", _V.PORT, ("port",), ("port",)),
    _spec("api_key", _V.STR, ("api-key",), ("api-key",)),
    _spec("log_level", _V.STR, ("log-level",), ("uvicorn-log-level",)),
    _spec("tool_call_parser", _V.STR, ("tool-call-parser",), ("tool-call-parser",)),
    _spec("reasoning_parser", _V.STR, ("reasoning-parser",), ("reasoning-parser",)),
    _spec("enable_auto_tool_choice", _V.BOOL, (), ("enable-auto-tool-choice",)),
)


def _norm(name: str) -> str:
    """``--Mem_Fraction_Static`` -> ``mem-fraction-static``."""
    return name.strip().lstrip("-").lower().replace("_", "-")


def _build_index(engine: Engine) -> dict[str, FlagSpec]:
    index: dict[str, FlagSpec] = {}
    # the other engine's names first, so the engine's own spellings win a clash
    for other in (e for e in (_SG, _VL) if e is not engine):
        for spec in SPECS:
            for n in spec.names.get(other, ()):
                index[n] = spec
    for spec in SPECS:
        for n in spec.names.get(engine, ()):
            index[n] = spec
    return index


_INDEX: dict[Engine, dict[str, FlagSpec]] = {e: _build_index(e) for e in (_SG, _VL)}
_INDEX[Engine.UNKNOWN] = _INDEX[_SG]
_OWN_NAMES: dict[Engine, frozenset[str]] = {
    e: frozenset(n for s in SPECS for n in s.names.get(e, ())) for e in (_SG, _VL)
}
_OWN_NAMES[Engine.UNKNOWN] = _OWN_NAMES[_SG] | _OWN_NAMES[_VL]
# single-dash spellings vLLM accepts (``-tp 4``)
_SHORT = frozenset({"tp", "pp", "dp", "q"})


def lookup(engine: Engine, name: str) -> FlagSpec | None:
    """The setting a flag name means for this engine (any alias, either engine's spelling)."""
    n = _norm(name)
    spec = _INDEX[engine].get(n)
    if spec is None and engine is _VL and n.startswith("no-"):
        s2 = _INDEX[_VL].get(n[3:])
        if s2 is not None and _VL in s2.negatable:
            return s2
    return spec


def canonical_flag(engine: Engine, name: str) -> str:
    """The spelling kvtui writes for this flag on this engine (``tp`` -> ``tp-size`` for SGLang,
    ``tensor-parallel-size`` for vLLM); an unknown flag comes back normalised."""
    spec = lookup(engine, name)
    return spec.written(engine) if spec is not None else _norm(name)


def dest_name(engine: Engine, name: str) -> str:
    """The key of this flag in the engine's own argument dump (``tp`` -> ``tp_size`` / ``tensor_parallel_size``)."""
    spec = lookup(engine, name)
    return spec.dest(engine) if spec is not None else _norm(name).replace("-", "_")


def known_names(engine: Engine) -> frozenset[str]:
    """Every spelling in kvtui's flag table for this engine (its own names, without ``--``)."""
    return _OWN_NAMES[engine]


def suggest(engine: Engine, name: str) -> list[str]:
    """Close known spellings for a flag name kvtui does not know (a typo)."""
    return difflib.get_close_matches(_norm(name), sorted(_OWN_NAMES[engine]), n=3, cutoff=0.75)


# =============================================================================================
# Values
# =============================================================================================

# What a value may contain: it is written into a unit or a shell script as one word, unquoted.
_SAFE_VALUE = re.compile(r"[A-Za-z0-9._,:/=+@-]+")
_META_NAMES = {
    " ": "a space",
    "\t": "a tab",
    "\n": "a newline",
    "$": "'$' (variable expansion)",
    "`": "'`' (command substitution)",
    ";": "';' (command separator)",
    "&": "'&'",
    "|": "'|' (pipe)",
    "<": "'<' (redirection)",
    ">": "'>' (redirection)",
    "(": "'('",
    ")": "')'",
    "'": "a quote",
    '"': "a quote",
    "\\": "a backslash",
    "*": "'*' (glob)",
    "?": "'?' (glob)",
    "[": "'[' (glob)",
    "]": "']' (glob)",
    "{": "'{' (brace expansion)",
    "}": "'}' (brace expansion)",
    "~": "'~' (home expansion)",
    "#": "'#' (comment)",
    "!": "'!' (history expansion)",
    "%": "'%' (a systemd specifier)",
}
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_LEN_RE = re.compile(r"(\d+)([kKmMgG]?)")


def _check_safe(flag: str, value: str) -> None:
    if value == "":
        raise BadValue(f"--{flag}: empty value; give one (--set {flag}=VALUE) or remove the flag (--unset {flag})")
    if _SAFE_VALUE.fullmatch(value):
        return
    bad = next(c for c in value if not _SAFE_VALUE.fullmatch(c))
    what = _META_NAMES.get(bad, f"{bad!r}")
    raise BadValue(
        f"--{flag}={value!r}: the value contains {what}, which the shell or systemd would interpret; "
        "kvtui writes only plain values (letters, digits and . _ , : / = + @ -)"
    )


def validate_value(engine: Engine, spec: FlagSpec | None, flag: str, value: str) -> str:
    """Check a value the way the engine would; return it as it will be written.

    Raises FlagError saying why the engine (or the shell) would refuse it.
    """
    _check_safe(flag, value)
    if spec is None:
        return value
    kind = spec.kind
    eng = "vLLM" if engine is _VL else "SGLang"
    if kind is ValueKind.FRACTION:
        try:
            f = float(value)
        except ValueError:
            raise BadValue(f"--{flag}={value}: not a number; expected a fraction such as 0.85") from None
        upper_ok = engine is _VL and f == 1.0
        if not (math.isfinite(f) and 0.0 < f < 1.0) and not upper_ok:
            rng = "(0, 1]" if engine is _VL else "(0, 1)"
            raise BadValue(
                f"--{flag}={value}: a memory fraction must lie in {rng}; {eng} refuses {value} "
                "(it is the share of GPU memory the server may claim)"
            )
        return value
    if kind in (ValueKind.POS_INT, ValueKind.NONNEG_INT, ValueKind.CHUNK, ValueKind.PORT):
        try:
            n = int(value, 10)
        except ValueError:
            raise BadValue(f"--{flag}={value}: not an integer; expected a whole number") from None
        if kind is ValueKind.POS_INT and n <= 0:
            what = "a negative count" if n < 0 else "zero"
            raise BadValue(f"--{flag}={value}: {what}; {eng} needs a whole number above 0")
        if kind is ValueKind.NONNEG_INT and n < 0:
            raise BadValue(f"--{flag}={value}: a negative count; {eng} needs 0 or more")
        if kind is ValueKind.CHUNK and (n == 0 or n < -1):
            raise BadValue(f"--{flag}={value}: expected a size above 0 (or -1 to disable chunking)")
        if kind is ValueKind.PORT and not 1 <= n <= 65535:
            raise BadValue(f"--{flag}={value}: a TCP port must be 1-65535")
        return value
    if kind is ValueKind.LEN:
        m = _LEN_RE.fullmatch(value)
        if m is None or (m.group(2) and engine is not _VL):
            if value.lstrip("-").isdigit():
                raise BadValue(f"--{flag}={value}: a negative length; {eng} needs a number of tokens above 0")
            raise BadValue(f"--{flag}={value}: expected a number of tokens, such as 131072")
        if int(m.group(1)) <= 0:
            raise BadValue(f"--{flag}={value}: zero; {eng} needs a number of tokens above 0")
        return value
    if kind is ValueKind.NONNEG_FLOAT:
        try:
            x = float(value)
        except ValueError:
            raise BadValue(f"--{flag}={value}: not a number") from None
        if not math.isfinite(x) or x < 0:
            raise BadValue(f"--{flag}={value}: {eng} needs a number of 0 or more")
        return value
    if kind is ValueKind.INT_LIST:
        parts = [p for p in value.split(",") if p]
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise BadValue(f"--{flag}={value}: expected whole numbers separated by commas (1,2,4,8)") from None
        if not nums or any(n <= 0 for n in nums):
            raise BadValue(f"--{flag}={value}: batch sizes must be whole numbers above 0")
        return value
    if kind is ValueKind.BOOL:
        raise BadValue(f"--{flag} is a switch; use --set {flag} to turn it on or --unset {flag} to turn it off")
    return value


# =============================================================================================
# Lexing: words with their exact positions
# =============================================================================================


@dataclass(frozen=True, slots=True)
class Word:
    """One word of a command: ``raw`` exactly as in the text at ``[start, end)``, ``value``
    after quote removal; ``dynamic`` when it holds a ``$`` expansion or command substitution."""

    raw: str
    value: str
    start: int
    end: int
    dynamic: bool = False

    @property
    def fully_quoted(self) -> str | None:
        """The quote character when the whole word is one quoted string (``"x"``, ``'x'``)."""
        r = self.raw
        if len(r) >= 2 and r[0] in "\"'" and r[-1] == r[0] and r[0] not in r[1:-1]:
            return r[0]
        return None


@dataclass(frozen=True, slots=True)
class _Op:
    text: str
    start: int
    end: int


_Item = Word | _Op
_SHELL_OPS = ("&&", "||", ";;", "|&", ">>", "<<<", "<<-", "<<", ">&", "<&", "&>>", "&>", ">|", "<>", ";", "&", "|",
              "(", ")", "<", ">")
_SHELL_OPS_SORTED = tuple(sorted(_SHELL_OPS, key=len, reverse=True))
_CONTROL_OPS = frozenset({"&&", "||", ";;", "|&", ";", "&", "|", "(", ")"})
_ASSIGN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _line_no(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _unit_continuation(text: str, i: int) -> int | None:
    """If ``text[i]`` is a backslash that ends a unit line (trailing blanks allowed), return the
    index just past the newline (and past comment lines inside the continuation)."""
    j = i + 1
    n = len(text)
    while j < n and text[j] in " \t\r":
        j += 1
    if j < n and text[j] != "\n":
        return None
    if j >= n:
        return n
    j += 1
    # systemd ignores comment lines inside a continuation
    while j < n:
        k = j
        while k < n and text[k] in " \t":
            k += 1
        if k < n and text[k] in "#;":
            nl = text.find("\n", k)
            j = n if nl < 0 else nl + 1
            continue
        break
    return j


class _Lexer:
    def __init__(self, text: str, kind: Kind) -> None:
        self.text = text
        self.kind = kind
        self.n = len(text)

    def _err(self, pos: int, what: str) -> FlagError:
        return FlagError(f"line {_line_no(self.text, pos)}: {what}")

    def logical_line(self, pos: int) -> tuple[list[_Item], int]:
        """Lex one logical line starting at ``pos``; return its items and the index of the newline
        that ends it (or ``len(text)``)."""
        text, n, unit = self.text, self.n, self.kind == "unit"
        items: list[_Item] = []
        i = pos
        while i < n:
            c = text[i]
            if c in " \t" or (unit and c == "\r"):
                i += 1
                continue
            if c == "\n":
                return items, i
            if c == "\\":
                if unit:
                    nxt = _unit_continuation(text, i)
                    if nxt is not None:
                        i = nxt
                        continue
                elif i + 1 < n and text[i + 1] == "\n":
                    i += 2
                    continue
            if not unit:
                if c == "#":
                    nl = text.find("\n", i)
                    return items, n if nl < 0 else nl
                op = self._op_at(i)
                if op is not None:
                    items.append(_Op(op, i, i + len(op)))
                    i += len(op)
                    continue
            word, i, op_follows = self._word(i)
            if not unit and op_follows and word.raw.isdigit() and text[i] in "<>":
                # a file-descriptor number glued to a redirection: 2>&1
                op = self._op_at(i) or text[i]
                items.append(_Op(word.raw + op, word.start, i + len(op)))
                i += len(op)
                continue
            if unit and word.raw == ";":
                items.append(_Op(";", word.start, word.end))
                continue
            items.append(word)
        return items, n

    def _op_at(self, i: int) -> str | None:
        for op in _SHELL_OPS_SORTED:
            if self.text.startswith(op, i):
                return op
        return None

    def _word(self, i: int) -> tuple[Word, int, bool]:
        text, n, unit = self.text, self.n, self.kind == "unit"
        start = i
        buf: list[str] = []
        dynamic = False
        while i < n:
            c = text[i]
            if c in " \t\n" or (unit and c == "\r"):
                break
            if c == "\\":
                if unit:
                    if _unit_continuation(text, i) is not None:
                        break
                    if i + 1 < n:
                        buf.append(_c_escape(text[i + 1]))
                        i += 2
                        continue
                    i += 1
                    continue
                if i + 1 < n and text[i + 1] == "\n":
                    break
                if i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                    continue
                i += 1
                continue
            if c == "'" and not unit:
                close = text.find("'", i + 1)
                if close < 0:
                    raise self._err(start, "unterminated ' quote")
                buf.append(text[i + 1 : close])
                i = close + 1
                continue
            if c in "\"'":
                i, content, dyn = self._quoted(i, c)
                buf.append(content)
                dynamic = dynamic or dyn
                continue
            if c == "$" and not unit and i + 1 < n and text[i + 1] == "(":
                end = self._balanced(i + 1, "(", ")")
                buf.append(text[i:end])
                dynamic = True
                i = end
                continue
            if c == "$" and i + 1 < n and text[i + 1] == "{":
                end = self._balanced(i + 1, "{", "}")
                buf.append(text[i:end])
                dynamic = True
                i = end
                continue
            if c == "`" and not unit:
                close = text.find("`", i + 1)
                if close < 0:
                    raise self._err(start, "unterminated ` quote")
                buf.append(text[i : close + 1])
                dynamic = True
                i = close + 1
                continue
            if c == "$" and i + 1 < n and (text[i + 1].isalnum() or text[i + 1] in "_@*#?!$-"):
                dynamic = True
            if not unit and c in ";&|<>()":
                return Word(text[start:i], "".join(buf), start, i, dynamic), i, True
            buf.append(c)
            i += 1
        return Word(text[start:i], "".join(buf), start, i, dynamic), i, False

    def _quoted(self, i: int, q: str) -> tuple[int, str, bool]:
        """A quoted string at ``i``: (index after the closing quote, content, dynamic)."""
        text, n, unit = self.text, self.n, self.kind == "unit"
        j = i + 1
        buf: list[str] = []
        dynamic = False
        while j < n:
            c = text[j]
            if c == q:
                return j + 1, "".join(buf), dynamic
            if c == "\\" and j + 1 < n:
                nxt = text[j + 1]
                if unit:
                    buf.append(_c_escape(nxt))
                    j += 2
                    continue
                if nxt in '"\\$`':
                    buf.append(nxt)
                    j += 2
                    continue
                if nxt == "\n":
                    j += 2
                    continue
            if c == "$" and q == '"' and j + 1 < n and (text[j + 1].isalnum() or text[j + 1] in "_{(@*#?!$-"):
                dynamic = True
            if c == "`" and not unit:
                dynamic = True
            if unit and c == "\n":
                break
            buf.append(c)
            j += 1
        raise self._err(i, f"unterminated {q} quote")

    def _balanced(self, i: int, open_: str, close: str) -> int:
        depth = 0
        j = i
        while j < self.n:
            c = self.text[j]
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise self._err(i, f"unterminated {open_}")


def _c_escape(c: str) -> str:
    return {"n": "\n", "t": "\t", "r": "\r", "s": " "}.get(c, c)


# =============================================================================================
# The parsed command
# =============================================================================================


@dataclass(frozen=True, slots=True)
class FlagOccurrence:
    """One flag as written. ``name``: as spelled, without dashes; ``canonical``: kvtui's spelling
    for the engine; ``value``: the unquoted value, True for a bare switch, False for ``--no-X``."""

    name: str
    canonical: str
    spec: FlagSpec | None
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
        n = _norm(name)
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
        if v.startswith("-") and not v.startswith("--") and _norm(name) not in _SHORT:
            spec = None  # -O3 style: keep as an unknown flag
        negated = (
            spec is not None and engine is _VL and _norm(name).startswith("no-") and spec.kind is ValueKind.BOOL
            and _norm(name)[3:] in spec.names.get(_VL, ())
        )
        canonical = spec.written(engine) if spec is not None else _norm(name)
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


# ---------------------------------------------------------------------------------------------
# units
# ---------------------------------------------------------------------------------------------

_SECTION_RE = re.compile(r"[ \t]*\[([^\]]+)\][ \t]*\r?$")
_EXEC_RE = re.compile(r"[ \t]*ExecStart[ \t]*=[ \t]*")


@dataclass(frozen=True, slots=True)
class _ExecLine:
    line: int  # 1-based
    key_start: int  # where "ExecStart" begins
    value_start: int
    items: list[_Item]
    end: int  # the newline that ends the logical line


def _unit_exec_lines(text: str) -> list[_ExecLine]:
    """Every ``ExecStart=`` of the ``[Service]`` section, empty ones (resets) included."""
    lex = _Lexer(text, "unit")
    out: list[_ExecLine] = []
    section = ""
    pos = 0
    n = len(text)
    while pos < n:
        nl = text.find("\n", pos)
        line_end = n if nl < 0 else nl
        line = text[pos:line_end]
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            pos = line_end + 1
            continue
        sec = _SECTION_RE.match(line)
        if sec is not None:
            section = sec.group(1).strip()
            pos = line_end + 1
            continue
        m = _EXEC_RE.match(line)
        if m is not None and section == "Service":
            vstart = pos + m.end()
            items, end = lex.logical_line(vstart)
            out.append(_ExecLine(_line_no(text, pos), pos, vstart, items, end))
            pos = end + 1
            continue
        # any other key: skip its continuation lines
        end = _logical_end(text, pos)
        pos = end + 1
    return out


def _logical_end(text: str, pos: int) -> int:
    n = len(text)
    while True:
        nl = text.find("\n", pos)
        if nl < 0:
            return n
        line = text[pos:nl].rstrip(" \t\r")
        if not line.endswith("\\"):
            return nl
        pos = nl + 1
        # comment lines inside a continuation are skipped
        while pos < n:
            nl2 = text.find("\n", pos)
            seg = text[pos : (n if nl2 < 0 else nl2)].lstrip(" \t")
            if seg[:1] in ("#", ";") and seg:
                pos = n if nl2 < 0 else nl2 + 1
                continue
            break
        if pos >= n:
            return n


def unit_has_execstart(text: str) -> bool:
    """Whether this unit file (or drop-in) sets ``ExecStart=`` at all (a reset counts)."""
    return bool(_unit_exec_lines(text))


def find_effective_execstart(files: Sequence[tuple[str, str]]) -> int:
    """Which of a unit's files defines the ``ExecStart`` systemd runs.

    ``files``: (path, text) in systemd's load order — the fragment, then the drop-ins as
    ``systemctl show -p DropInPaths`` lists them. An empty ``ExecStart=`` resets the list; the last
    file that sets a command after the last reset wins. Returns its index.
    """
    winner: int | None = None
    for idx, (_path, text) in enumerate(files):
        for ex in _unit_exec_lines(text):
            winner = idx if any(isinstance(it, Word) for it in ex.items) else None
    if winner is None:
        names = ", ".join(p for p, _ in files) or "(no files)"
        raise NoServerCommand(f"no ExecStart= with a command in {names}")
    return winner


def _parse_unit(text: str) -> ServerCommand:
    lines = _unit_exec_lines(text)
    if not lines:
        raise NoServerCommand("no ExecStart= line in the [Service] section")
    # the list after the last reset
    last_reset = max((i for i, ex in enumerate(lines) if not any(isinstance(it, Word) for it in ex.items)), default=-1)
    active = lines[last_reset + 1 :]
    if not active:
        raise NoServerCommand(f"ExecStart= on line {lines[-1].line} is a reset with no command after it")
    found: list[ServerCommand] = []
    runs: str | None = None
    for ex in active:
        words = [it for it in ex.items if isinstance(it, Word)]
        # a lone ';' separates commands in one ExecStart
        groups: list[list[Word]] = [[]]
        for it in ex.items:
            if isinstance(it, _Op):
                groups.append([])
            else:
                groups[-1].append(it)
        for g in groups:
            if not g:
                continue
            cmd = _command_from_words(text, "unit", g, ex.line)
            if cmd is not None:
                found.append(cmd)
            elif _mentions_engine(g) and any(w.value in ("-c", "-lc") for w in g):
                raise FlagError(
                    f"line {ex.line}: the server command is inside a shell string (bash -c \"…\"); kvtui edits "
                    "flags only when they are separate words of ExecStart= or of a launch script"
                )
            elif runs is None and g:
                runs = _script_target(g)
        if not words:
            continue
    if not found:
        msg = "ExecStart= does not start an SGLang or vLLM server"
        if runs:
            msg = (
                f"ExecStart= runs {runs}, not the server itself; kvtui edits the flags there "
                f"(launch_script = {runs!r} in hosts.toml)"
            )
        raise NoServerCommand(msg, runs=runs)
    if len(found) > 1:
        at = ", ".join(str(c.exec_line) for c in found)
        raise FlagError(f"several server commands in ExecStart= (lines {at}); kvtui edits one")
    return found[0]


def _script_target(words: Sequence[Word]) -> str | None:
    """The script an ExecStart runs: ``/opt/launch.sh`` or ``/bin/bash /opt/launch.sh``."""
    vals = [w.value.lstrip("@-:+!") if i == 0 else w.value for i, w in enumerate(words)]
    if not vals:
        return None
    base = vals[0].rsplit("/", 1)[-1]
    if base in ("bash", "sh", "zsh", "dash"):
        rest = [v for v in vals[1:] if not v.startswith("-")]
        return rest[0] if rest and "/" in rest[0] else None
    if base == "env":
        rest = [v for v in vals[1:] if not v.startswith("-") and not _ASSIGN_RE.match(v)]
        return rest[0] if rest and "/" in rest[0] else None
    return vals[0] if "/" in vals[0] else None


# ---------------------------------------------------------------------------------------------
# scripts
# ---------------------------------------------------------------------------------------------


def _parse_script(text: str) -> ServerCommand:
    lex = _Lexer(text, "script")
    found: list[ServerCommand] = []
    problems: list[str] = []
    pos = 0
    n = len(text)
    while pos < n:
        try:
            items, end = lex.logical_line(pos)
        except FlagError as exc:
            problems.append(str(exc))
            nl = text.find("\n", pos)
            pos = n if nl < 0 else nl + 1
            continue
        line = _line_no(text, pos)
        heredocs: list[tuple[str, bool]] = []
        simple: list[Word] = []
        skip_next = False
        for idx, it in enumerate(items):
            if isinstance(it, _Op):
                if it.text in _CONTROL_OPS:
                    _collect(text, simple, line, found)
                    simple = []
                elif it.text.lstrip("0123456789") in ("<<", "<<-"):
                    nxt = items[idx + 1] if idx + 1 < len(items) else None
                    if isinstance(nxt, Word):
                        heredocs.append((nxt.value, it.text.endswith("-")))
                    skip_next = True
                else:
                    skip_next = True  # a redirection: its target is not an argument
                continue
            if skip_next:
                skip_next = False
                continue
            simple.append(it)
        _collect(text, simple, line, found)
        pos = end + 1
        for delim, strip_tabs in heredocs:
            while pos < n:
                nl = text.find("\n", pos)
                body_line = text[pos : (n if nl < 0 else nl)]
                pos = n if nl < 0 else nl + 1
                if (body_line.lstrip("\t") if strip_tabs else body_line) == delim:
                    break
    if not found:
        msg = "no server command (python -m sglang.launch_server, sglang serve, vllm serve …) in the script"
        if problems:
            msg += "; could not read: " + "; ".join(problems[:3])
        raise NoServerCommand(msg)
    if len(found) > 1:
        at = ", ".join(str(c.exec_line) for c in found)
        raise FlagError(f"the script starts a server on several lines ({at}); kvtui edits a script with one")
    cmd = found[0]
    return cmd


def _collect(text: str, simple: list[Word], line: int, found: list[ServerCommand]) -> None:
    if not simple:
        return
    cmd = _command_from_words(text, "script", simple, _line_no(text, simple[0].start))
    if cmd is not None:
        found.append(cmd)


def parse_command(text: str, kind: Kind) -> ServerCommand:
    """Find and parse the server command of a unit (or drop-in) or a launch script.

    Raises ``NoServerCommand`` when there is none (``.runs``: a script the unit runs instead) and
    ``FlagError`` when the command is ambiguous or unreadable.
    """
    if kind == "unit":
        return _parse_unit(text)
    if kind == "script":
        return _parse_script(text)
    raise FlagError(f"unknown kind {kind!r}: expected 'unit' or 'script'")


def get_flag(text: str, kind: Kind, name: str) -> str | bool | None:
    """The effective value of a flag in a unit or script (None when absent)."""
    return parse_command(text, kind).get(name)


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


# =============================================================================================
# Edits
# =============================================================================================


@dataclass(frozen=True, slots=True)
class Edit:
    """One requested change. ``value``: a string to set, True to set a switch, False to turn a
    switch off, None to remove the flag."""

    flag: str
    value: EditValue

    @property
    def unset(self) -> bool:
        return self.value is None

    def __str__(self) -> str:
        if self.value is None:
            return f"--unset {_norm(self.flag)}"
        if self.value is True:
            return f"--set {_norm(self.flag)}"
        if self.value is False:
            return f"--set {_norm(self.flag)}=false"
        return f"--set {_norm(self.flag)}={self.value}"


_FLAG_NAME_RE = re.compile(r"-{0,2}[A-Za-z][A-Za-z0-9_-]*")


def parse_edit_args(sets: Sequence[str] = (), unsets: Sequence[str] = ()) -> list[Edit]:
    """``--set FLAG[=VALUE]`` / ``--unset FLAG`` arguments -> edits (syntax only; values are
    checked against the engine by ``apply_edits``)."""
    edits: list[Edit] = []
    for s in sets:
        name, eq, value = s.partition("=")
        if not _FLAG_NAME_RE.fullmatch(name.strip()):
            raise FlagError(f"--set {s!r}: expected FLAG=VALUE (e.g. mem-fraction-static=0.88) or FLAG for a switch")
        edits.append(Edit(name.strip(), value if eq else True))
    for u in unsets:
        if not _FLAG_NAME_RE.fullmatch(u.strip()):
            raise FlagError(f"--unset {u!r}: expected a flag name (e.g. cuda-graph-max-bs)")
        edits.append(Edit(u.strip(), None))
    return edits


def edits_from_mapping(values: Mapping[str, object]) -> list[Edit]:
    """Edits from a mapping (the calculator's edits): None removes, True/False switch, else a value."""
    out: list[Edit] = []
    for k, v in values.items():
        if v is None or isinstance(v, bool):
            out.append(Edit(k, v))
        elif isinstance(v, float):
            out.append(Edit(k, _fmt_float(v)))
        elif isinstance(v, (list, tuple)):
            out.append(Edit(k, ",".join(str(x) for x in v)))
        else:
            out.append(Edit(k, str(v)))
    return out


def _fmt_float(x: float) -> str:
    s = repr(round(x, 6))
    return s[:-2] if s.endswith(".0") else s


@dataclass(frozen=True, slots=True)
class Change:
    """What an edit did. ``action``: set (value replaced) / add / remove / unchanged."""

    flag: str  # --name as it is (or was) written
    action: Literal["set", "add", "remove", "unchanged"]
    old: str | bool | None
    new: str | bool | None
    line: int  # 1-based, in the new text (for remove: where it was)
    note: str = ""

    def describe(self) -> str:
        def fmt(v: str | bool | None) -> str:
            if v is True:
                return "on"
            if v is False:
                return "off"
            return "(absent)" if v is None else v

        if self.action == "set":
            s = f"{self.flag}: {fmt(self.old)} -> {fmt(self.new)} (line {self.line})"
        elif self.action == "add":
            s = f"{self.flag}: added {fmt(self.new)} (line {self.line})"
        elif self.action == "remove":
            s = f"{self.flag}: removed (was {fmt(self.old)}, line {self.line})"
        else:
            s = f"{self.flag}: already {fmt(self.new)} (line {self.line})"
        return s + (f"; {self.note}" if self.note else "")


@dataclass(frozen=True, slots=True)
class EditResult:
    new_text: str
    changes: tuple[Change, ...]
    warnings: tuple[str, ...]
    command: ServerCommand  # the command parsed from new_text
    engine: Engine

    @property
    def changed(self) -> bool:
        return any(c.action != "unchanged" for c in self.changes)


@dataclass(slots=True)
class _Resolved:
    edit: Edit
    spec: FlagSpec | None
    name: str  # the spelling to write when adding (engine's own)
    value: EditValue  # validated
    notes: list[str] = field(default_factory=list)


def _resolve(engine: Engine, edit: Edit, *, strict: bool = True) -> _Resolved:
    """Resolve an edit's flag name for the engine; ``strict`` also checks the value (an edit to
    make), without it the value is taken as given (a value read back, to compare)."""
    n = _norm(edit.flag)
    if not n:
        raise BadValue("empty flag name")
    spec = lookup(engine, n)
    notes: list[str] = []
    value = edit.value
    if spec is not None and n not in _OWN_NAMES[engine] and not (engine is _VL and n.startswith("no-")):
        eng = "vLLM" if engine is _VL else "SGLang"
        notes.append(f"{n} is the other engine's name; this {eng} server calls it --{spec.written(engine)}")
    if spec is not None and engine is _VL and n.startswith("no-") and spec.kind is ValueKind.BOOL:
        # --set no-enable-prefix-caching == --set enable-prefix-caching=false
        if value is True:
            value = False
        elif value is False:
            value = True
    name = spec.written(engine) if spec is not None else n
    if spec is not None and spec.kind is ValueKind.BOOL:
        if isinstance(value, str):
            low = value.lower()
            if low in _TRUE:
                value = True
            elif low in _FALSE:
                value = False
            elif strict:
                raise BadValue(f"--{name} is a switch; --set {name} turns it on, --unset {name} removes it")
    elif not strict:
        pass
    elif value is True and spec is not None:
        raise BadValue(f"--{name} needs a value: --set {name}=VALUE")
    elif value is False and spec is not None:
        raise BadValue(f"--{name} is not a switch; use --unset {name} to remove it")
    elif isinstance(value, str):
        value = validate_value(engine, spec, name, value)
    if spec is None and value is not None:
        near = suggest(engine, n)
        eng = "vLLM" if engine is _VL else "SGLang"
        hint = f" (did you mean --{near[0]}?)" if near else ""
        notes.append(f"--{n} is not a flag kvtui knows for {eng}{hint}; the engine refuses misspelled flags at start")
    if engine is not _VL and value is False and spec is not None:
        value = None  # an SGLang switch is off when absent
    return _Resolved(edit, spec, name, value, notes)


def apply_edits(text: str, kind: Kind, edits: Iterable[Edit]) -> EditResult:
    """Apply edits to a unit or script; only the bytes of the edited flags change.

    Raises FlagError for a refused value, an unknown ``--unset``, or a command kvtui cannot edit.
    """
    cmd = parse_command(text, kind)
    engine = cmd.engine
    edit_list = list(edits)
    seen: dict[str, Edit] = {}
    resolved: list[_Resolved] = []
    for e in edit_list:
        r = _resolve(engine, e)
        key = r.spec.concept if r.spec is not None else r.name
        if key in seen:
            raise BadValue(f"{seen[key]} and {e} change the same flag (--{r.name}); give it once")
        seen[key] = e
        resolved.append(r)
    changes: list[Change] = []
    warnings: list[str] = list(cmd.warnings)
    for r in resolved:
        text, change = _apply_one(text, kind, r)
        changes.append(change)
    new_cmd = parse_command(text, kind)
    return EditResult(text, tuple(changes), tuple(dict.fromkeys(warnings)), new_cmd, engine)


def _occurrences(cmd: ServerCommand, r: _Resolved) -> list[FlagOccurrence]:
    if r.spec is not None:
        return [o for o in cmd.flags if o.spec is r.spec]
    return [o for o in cmd.flags if o.spec is None and o.canonical == r.name]


def _render_value(old: Word | None, value: str) -> str:
    q = old.fully_quoted if old is not None else None
    return f"{q}{value}{q}" if q else value


def _apply_one(text: str, kind: Kind, r: _Resolved) -> tuple[str, Change]:
    cmd = parse_command(text, kind)
    occ = _occurrences(cmd, r)
    note = "; ".join(r.notes)
    engine = cmd.engine
    value = r.value
    # vLLM's positional model (vllm serve MODEL)
    if (
        not occ
        and r.spec is not None
        and r.spec.concept == "model"
        and engine is _VL
        and cmd.entry.endswith("serve")
        and cmd.positionals
        and isinstance(value, str)
    ):
        w = cmd.positionals[0]
        new_raw = _render_value(w, value)
        new_text = text[: w.start] + new_raw + text[w.end :]
        return new_text, Change("MODEL", "set", w.value, value, _line_no(new_text, w.start), note)
    if value is None:
        if not occ:
            near = suggest(engine, r.name) if r.spec is None else []
            hint = f" (did you mean --{near[0]}?)" if near else ""
            raise FlagError(f"--unset {r.name}: the command has no --{r.name}{hint}")
        # remove every occurrence, last first so offsets stay valid
        for o in reversed(occ):
            text = _remove(text, kind, o)
        first = occ[0]
        old = occ[-1].value
        extra = f"; removed {len(occ)} occurrences" if len(occ) > 1 else ""
        return text, Change(f"--{first.name}", "remove", old, None, _line_no(text, first.start), note + extra)
    if occ:
        o = occ[-1]
        line = _line_no(text, o.start)
        dup = f"given {len(occ)} times; edited the last (the one the engine uses)" if len(occ) > 1 else ""
        note2 = "; ".join(x for x in (note, dup) if x)
        if isinstance(value, bool):
            # a switch
            if o.value is value:
                return text, Change(f"--{o.name}", "unchanged", o.value, value, line, note2)
            if isinstance(o.value, bool):
                # vLLM --X <-> --no-X
                prefix = o.flag.raw[: len(o.flag.raw) - len(o.flag.raw.lstrip("-"))]
                new_flag = f"{prefix}{'' if value else 'no-'}{r.name}"
                new_text = text[: o.flag.start] + new_flag + text[o.flag.end :]
                return new_text, Change(f"--{o.name}", "set", o.value, value, line, note2)
            raise FlagError(f"--{o.name} has a value here ({o.value}); give one: --set {r.name}=VALUE")
        if o.inline:
            raw = o.flag.raw
            eq = raw.find("=")
            if raw.startswith("-") and eq > 0 and '"' not in raw[:eq] and "'" not in raw[:eq]:
                tail = raw[eq + 1 :]
                q = tail[0] if len(tail) >= 2 and tail[0] in "\"'" and tail[-1] == tail[0] else ""
                vstart = o.flag.start + eq + 1
                new_text = text[:vstart] + f"{q}{value}{q}" + text[o.flag.end :]
            else:
                q = o.flag.fully_quoted or ""
                new_text = text[: o.flag.start] + f"{q}{o.flag.value.partition('=')[0]}={value}{q}" + text[o.flag.end :]
        elif o.values:
            v0, v1 = o.values[0], o.values[-1]
            new_raw = _render_value(v0 if len(o.values) == 1 else None, value)
            if r.spec is not None and r.spec.kind is ValueKind.INT_LIST:
                new_raw = value.replace(",", " ")
            new_text = text[: v0.start] + new_raw + text[v1.end :]
        else:
            # a bare flag that now gets a value
            sep = _style(cmd)
            new_text = text[: o.flag.end] + sep + value + text[o.flag.end :]
        old_v = o.value
        if old_v == value:
            return text, Change(f"--{o.name}", "unchanged", old_v, value, line, note2)
        if isinstance(old_v, str) and o.dynamic_value:
            note2 = "; ".join(x for x in (note2, f"replaced the variable {old_v}") if x)
        return new_text, Change(f"--{o.name}", "set", old_v, value, line, note2)
    # add
    if value is False:
        flag_text = f"--no-{r.name}"
    elif value is True:
        flag_text = f"--{r.name}"
    else:
        written = value.replace(",", " ") if r.spec is not None and r.spec.kind is ValueKind.INT_LIST else value
        sep = _style(cmd)
        if sep == "=" and " " in written:
            sep = " "
        flag_text = f"--{r.name}{sep}{written}"
    new_text, line = _insert(text, cmd, flag_text)
    return new_text, Change(f"--{r.name}", "add", None, value, line, note)


def _style(cmd: ServerCommand) -> str:
    """``" "`` or ``"="``: how this command writes valued flags (the majority; a tie -> space)."""
    eq = sum(1 for o in cmd.flags if o.inline)
    sp = sum(1 for o in cmd.flags if o.values)
    return "=" if eq > sp else " "


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    ls = text.rfind("\n", 0, pos) + 1
    le = text.find("\n", pos)
    return ls, (len(text) if le < 0 else le)


def _continuation_at(text: str, pos: int, line_end: int) -> int | None:
    """If ``text[pos:line_end]`` is blanks then a ``\\`` then blanks, the index of the backslash."""
    seg = text[pos:line_end]
    s = seg.rstrip(" \t\r")
    if s.endswith("\\") and not s[:-1].strip(" \t"):
        return pos + len(s) - 1
    return None


def _insert(text: str, cmd: ServerCommand, flag_text: str) -> tuple[str, int]:
    """Insert a new flag in the neighbours' style; return (new text, 1-based line of the flag)."""
    words = cmd.words
    arg_words = words[cmd.args_start :]
    entry_word = words[cmd.args_start - 1]
    multiline = "\n" in text[cmd.start : cmd.end]
    if cmd.flags:
        anchor_end = cmd.flags[-1].end
    else:
        static_pos = [w for w in cmd.positionals if not w.dynamic]
        anchor_end = static_pos[-1].end if static_pos else entry_word.end
    if not multiline:
        new_text = text[:anchor_end] + " " + flag_text + text[anchor_end:]
        return new_text, _line_no(new_text, anchor_end + 1)
    ls, le = _line_bounds(text, anchor_end)
    cont_lines = _continuation_lines(text, cmd)
    indent = _indent_for(text, cmd, arg_words)
    suffix = _suffix_for(text, cont_lines, len(indent) + len(flag_text))
    new_line = indent + flag_text + suffix + "\n"
    # after the anchor's line when it is continued, else before it (it is the command's last line)
    at = le + 1 if _continuation_at(text, anchor_end, le) is not None else ls
    new_text = text[:at] + new_line + text[at:]
    return new_text, _line_no(new_text, at)


def _continuation_lines(text: str, cmd: ServerCommand) -> list[tuple[int, int, int]]:
    """(line start, end of its last word, backslash index) for each continued line of the command."""
    out: list[tuple[int, int, int]] = []
    by_line: dict[int, int] = {}
    for w in cmd.words:
        ls, _ = _line_bounds(text, w.end - 1 if w.end > w.start else w.start)
        by_line[ls] = max(by_line.get(ls, 0), w.end)
    for ls, last_end in by_line.items():
        _, le = _line_bounds(text, last_end)
        bs = _continuation_at(text, last_end, le)
        if bs is not None:
            out.append((ls, last_end, bs))
    return out


def _indent_for(text: str, cmd: ServerCommand, arg_words: Sequence[Word]) -> str:
    """The indentation of the lines that start with a flag (the last such), else of any continuation line."""
    flag_starts = {o.flag.start for o in cmd.flags}
    best: str | None = None
    fallback: str | None = None
    for w in arg_words:
        ls, _ = _line_bounds(text, w.start)
        lead = text[ls : w.start]
        if lead.strip(" \t") == "" and ls > cmd.start:
            if w.start in flag_starts:
                best = lead
            elif fallback is None:
                fallback = lead
    if best is not None:
        return best
    if fallback is not None:
        return fallback
    return "    "


def _suffix_for(text: str, cont: Sequence[tuple[int, int, int]], content_len: int) -> str:
    """The `` \\`` that ends a continued line, copied from the neighbours (column-aligned when they are)."""
    if not cont:
        return " \\"
    # aligned backslashes: several lines (the first, ExecStart= line aside), one column, some
    # padded beyond a single space
    body = list(cont[1:]) if len(cont) > 2 else list(cont)
    cols = [bs - ls for ls, _e, bs in body]
    pads = [bs - e for _ls, e, bs in body]
    if len(body) >= 2 and len(set(cols)) == 1 and max(pads) > 1:
        col = cols[0]
        return " " * max(1, col - content_len) + "\\"
    _ls, e, bs = cont[-1]
    _, le = _line_bounds(text, bs)
    return text[e:le]


def _remove(text: str, kind: Kind, o: FlagOccurrence) -> str:
    """Remove one flag occurrence with its values and the blanks (or the line) it leaves."""
    a, b = o.start, o.end
    ls, le = _line_bounds(text, a)
    lead = text[ls:a]
    after_bs = _continuation_at(text, b, le)
    trailing_blank = text[b:le].strip(" \t\r") == ""
    alone = lead.strip(" \t") == "" and (after_bs is not None or trailing_blank) and not _is_exec_key_line(lead)
    if alone and b <= le:
        if after_bs is not None:
            return text[:ls] + text[le + 1 :] if le < len(text) else text[:ls]
        # the command's last line: drop it and the continuation that led to it
        prev_end = _prev_nonblank(text, ls)
        if prev_end is not None:
            return text[:prev_end] + text[le:]
        return text[:ls] + text[le + 1 :]
    # shares its line with other words
    j = b
    while j < le and text[j] in " \t":
        j += 1
    if j < le and _continuation_at(text, b, le) is None and text[j] not in "\r":
        return text[:a] + text[j:]  # remove the flag and the blanks after it
    i = a
    while i > ls and text[i - 1] in " \t":
        i -= 1
    return text[:i] + text[b:]


def _is_exec_key_line(lead: str) -> bool:
    return "=" in lead


def _prev_nonblank(text: str, line_start: int) -> int | None:
    """The end of the last word before ``line_start`` (skipping the continuation backslash and
    comment lines inside a continuation)."""
    i = line_start - 1  # the newline
    while i > 0:
        ls, le = _line_bounds(text, i - 1 if text[i] == "\n" else i)
        seg = text[ls:le]
        st = seg.lstrip(" \t")
        if st.startswith(("#", ";")) and ls != 0:
            i = ls - 1
            continue
        s = seg.rstrip(" \t\r")
        if s.endswith("\\"):
            s = s[:-1].rstrip(" \t")
        return ls + len(s)
    return None


# =============================================================================================
# Verification
# =============================================================================================


def same_value(actual: object, expected: EditValue) -> bool:
    """Whether a parsed or dumped value equals what an edit asked for (numbers compared as numbers)."""
    if expected is None:
        return actual is None
    if isinstance(expected, bool):
        if isinstance(actual, bool):
            return actual is expected
        if isinstance(actual, str):
            return (actual.lower() in _TRUE) if expected else (actual.lower() in _FALSE)
        return actual is None and not expected
    if actual is None or isinstance(actual, bool):
        return False
    if isinstance(actual, (list, tuple)):
        return [str(x) for x in actual] == [p for p in re.split(r"[,\s]+", expected) if p]
    a = str(actual).strip().strip("'\"")
    e = expected.strip()
    if a == e:
        return True
    try:
        return math.isclose(float(a), float(_expand_len(e)), rel_tol=1e-9, abs_tol=1e-12)
    except ValueError:
        return False


def _expand_len(v: str) -> str:
    m = _LEN_RE.fullmatch(v)
    if m is None or not m.group(2):
        return v
    mult = {"k": 1000, "m": 1000**2, "g": 1000**3}[m.group(2).lower()]
    return str(int(m.group(1)) * mult)


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
        if key not in dump:
            if engine is _VL:
                # vLLM dumps only non-default args: a value equal to the default is not shown
                continue
            problems.append(f"the engine's argument dump has no {key}")
            continue
        if not same_value(dump[key], r.value):
            problems.append(f"the engine runs with {key}={dump[key]!r}, expected {r.value}")
    return problems
