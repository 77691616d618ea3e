"""Every server setting kvtui knows, in one table: the flag vocabulary (pure core, no I/O).

A ``Knob`` is one setting of an inference server: its spellings per engine (the first is the one
kvtui writes), the key it has in the engine's own argument dump (``dest``: SGLang's
``server_args``, vLLM's ``non-default args``), its value type and range (``ValueKind``), and what it
changes in the calculator's memory model (``Memory``), if anything. Every layer reads its names
from here:

* ``kvtui.flags`` parses and edits the flags of ``Scope.FLAG`` knobs in units and launch scripts
  (``lookup``, ``written_name``, ``dest_name``, ``known_names``: ``--tp`` is ``--tp-size`` on
  SGLang, ``--tensor-parallel-size`` on vLLM);
* ``kvtui.kvcalc`` (``calc --set``, the console's calculator) names each modelled setting by its
  dump key (``memory_name``: ``mem_fraction_static`` / ``gpu_memory_utilization``) and accepts
  every spelling of it, the other engine's and a few short ones (``mfs``, ``gmu``, ``tp``) as
  aliases (``MEMORY_ALIASES``);
* the apply path refuses a flag that no table knows (``kvtui.hosts.service``);
* ``Scope.ENV`` knobs are environment variables the server reads (``VLLM_CPU_KVCACHE_SPACE``),
  edited by ``kvtui.envedit``.

Two spellings are derived from any name the user types: ``dash_name`` (``--Mem_Fraction`` →
``mem-fraction``, how flags are written) and ``underscore_name`` (→ ``mem_fraction``, how the
calculator and the dumps name them).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from kvtui.engines.events import Engine, Fact

_SG = Engine.SGLANG
_VL = Engine.VLLM


class ValueKind(StrEnum):
    """What a value must look like (``kvtui.flags.validate_value`` words the refusals)."""

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


class Memory(StrEnum):
    """What a knob changes in the calculator's memory model (``kvtui.kvcalc``), in the order the
    calculator panel lists the editable ones."""

    FRACTION = "fraction"  # the static memory fraction / GPU memory utilization
    MAX_REQUESTS = "max_requests"  # request slots: the req_to_token table, the captured batch sizes
    CONTEXT = "context"  # the request table's width, full-context requests
    GRAPH_BS = "graph_bs"  # the largest captured CUDA-graph batch size
    CHUNK = "chunk"  # the prefill chunk: activations outside the pool
    KV_DTYPE = "kv_dtype"  # bytes per KV element: the cell
    PAGE = "page"  # token rounding of the pool
    TOKEN_CAP = "token_cap"  # an explicit cap on the pool's tokens (vLLM: in blocks)
    TP = "tp"  # KV heads and weights per rank
    CPU_KV_SPACE = "cpu_kv_space"  # vLLM's CPU backend: the pool is this many GiB


class Scope(StrEnum):
    """Where a knob is set, and so which layer edits it."""

    FLAG = "flag"  # a command-line flag: kvtui.flags parses, validates and edits it
    ENV = "env"  # an environment variable the server reads: kvtui.envedit edits it
    # a flag only the calculator models: kvtui.flags does not list it yet (treated as an unknown
    # flag there, which is what the edit and refusal paths have always done with it)
    CALC = "calc"


@dataclass(frozen=True, slots=True)
class Spelling:
    """A newer release's spelling of a knob: its flag and its argument-dump key. A running boot
    whose dump has ``dest`` was started by a release that takes ``flag`` (SGLang 0.5.23 split
    ``--cuda-graph-max-bs`` into ``--cuda-graph-max-bs-decode`` / ``-prefill``, and argparse's
    prefix matching makes the old spelling ambiguous there: a usage error at start)."""

    flag: str
    dest: str
    since: str  # the release that introduced it (for notes)


@dataclass(frozen=True, slots=True)
class Knob:
    """One server setting. ``names[engine]``: the spellings that engine accepts, the first is the
    one kvtui writes; ``dests[engine]``: its key in the engine's own argument dump;
    ``shorthands``: kvtui's own short names for a modelled knob (``mfs``), accepted by the
    calculator only, never written into a file."""

    concept: str
    kind: ValueKind
    names: Mapping[Engine, tuple[str, ...]]
    dests: Mapping[Engine, str]
    choices: tuple[str, ...] = ()
    negatable: frozenset[Engine] = frozenset()  # engines with a --no-FLAG form
    memory: Memory | None = None
    shorthands: tuple[str, ...] = ()
    scope: Scope = Scope.FLAG
    renamed: Mapping[Engine, tuple[Spelling, ...]] = field(default_factory=dict)  # newer releases' spellings

    def written(self, engine: Engine, dump: Collection[str] | None = None) -> str:
        """The spelling kvtui writes: the engine's first, or, when the running boot's argument
        dump (its keys, ``dump``) shows a newer release's spelling, that one."""
        spelling = self.spelling_for(engine, dump)
        if spelling is not None:
            return spelling.flag
        own = self.names.get(engine)
        if own:
            return own[0]
        other = next(iter(self.names.values()))
        return other[0]

    def spelling_for(self, engine: Engine, dump: Collection[str] | None) -> Spelling | None:
        """The newer release's spelling the argument dump's keys show, None for the first one."""
        if not dump:
            return None
        return next((s for s in self.renamed.get(engine, ()) if s.dest in dump), None)

    def dest(self, engine: Engine) -> str:
        """Its key in the engine's argument dump (the first spelling's; the calculator's name)."""
        return self.dests.get(engine) or self.written(engine).replace("-", "_")

    def dump_keys(self, engine: Engine) -> tuple[str, ...]:
        """Every key it may have in the engine's argument dump, the first spelling's first."""
        return (self.dest(engine), *(s.dest for s in self.renamed.get(engine, ())))

    def in_dump(self, engine: Engine, dump: Mapping[str, object]) -> tuple[str, object] | None:
        """(key, value) of this knob in an argument dump, whichever spelling's key it has (one
        with a value before one that is None); None when the dump has none of them."""
        present = [(k, dump[k]) for k in self.dump_keys(engine) if k in dump]
        return next((kv for kv in present if kv[1] is not None), present[0] if present else None)


def _knob(
    concept: str,
    kind: ValueKind,
    sglang: tuple[str, ...] = (),
    vllm: tuple[str, ...] = (),
    *,
    sg_dest: str | None = None,
    vl_dest: str | None = None,
    choices: tuple[str, ...] = (),
    memory: Memory | None = None,
    shorthands: tuple[str, ...] = (),
    scope: Scope = Scope.FLAG,
    sg_renamed: tuple[Spelling, ...] = (),
) -> Knob:
    names: dict[Engine, tuple[str, ...]] = {}
    dests: dict[Engine, str] = {}
    if sglang:
        names[_SG] = (*sglang, *(r.flag for r in sg_renamed))
        dests[_SG] = sg_dest or sglang[0].replace("-", "_")
    if vllm:
        names[_VL] = vllm
        dests[_VL] = vl_dest or vllm[0].replace("-", "_")
    negatable = frozenset({_VL}) if kind is ValueKind.BOOL and vllm else frozenset()
    renamed = {_SG: sg_renamed} if sg_renamed else {}
    return Knob(concept, kind, names, dests, choices, negatable, memory, shorthands, scope, renamed)


_SG_0523 = "SGLang 0.5.23"


_V = ValueKind
_M = Memory
SPECS: tuple[Knob, ...] = (
    # memory and sizing (what the calculator models)
    _knob("mem_fraction", _V.FRACTION, ("mem-fraction-static",), ("gpu-memory-utilization",), memory=_M.FRACTION,
          shorthands=("mem_fraction", "mfs", "gmu", "fraction", "memory_fraction", "gpu_mem_util")),
    _knob("max_running", _V.POS_INT, ("max-running-requests",), ("max-num-seqs",), memory=_M.MAX_REQUESTS,
          shorthands=("max_running_reqs", "max_seqs")),
    _knob("context_length", _V.LEN, ("context-length",), ("max-model-len",), memory=_M.CONTEXT,
          shorthands=("context_len", "max_seq_len", "context", "max_context_len")),
    # SGLang 0.5.23: the decode graphs' --cuda-graph-max-bs-decode / --cuda-graph-bs-decode (the
    # old spellings are ambiguous there: -prefill is a second, different setting)
    _knob("cuda_graph_max_bs", _V.POS_INT, ("cuda-graph-max-bs",), ("max-cudagraph-capture-size",),
          memory=_M.GRAPH_BS, shorthands=("max_capture_size",),
          sg_renamed=(Spelling("cuda-graph-max-bs-decode", "cuda_graph_max_bs_decode", _SG_0523),)),
    _knob("cuda_graph_bs", _V.INT_LIST, ("cuda-graph-bs",), ("cuda-graph-sizes",),
          sg_renamed=(Spelling("cuda-graph-bs-decode", "cuda_graph_bs_decode", _SG_0523),)),
    _knob(
        "kv_cache_dtype",
        _V.STR,
        ("kv-cache-dtype",),
        ("kv-cache-dtype",),
        choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "bf16", "bfloat16", "fp4_e2m1"),
        memory=_M.KV_DTYPE,
        shorthands=("kv_dtype",),
    ),
    _knob("page_size", _V.POS_INT, ("page-size",), ("block-size",), memory=_M.PAGE),
    _knob("max_total_tokens", _V.POS_INT, ("max-total-tokens",), memory=_M.TOKEN_CAP),
    _knob("chunked_prefill", _V.CHUNK, ("chunked-prefill-size",), ("max-num-batched-tokens",), memory=_M.CHUNK,
          shorthands=("chunk_size", "chunked_prefill")),
    _knob("max_prefill_tokens", _V.POS_INT, ("max-prefill-tokens",)),
    _knob("swap_space", _V.NONNEG_FLOAT, (), ("swap-space",)),
    # vLLM: the pool in bytes, whatever the utilization (k/m/g/t and Ki/Mi/Gi accepted: kept as written)
    _knob("kv_cache_memory_bytes", _V.STR, (), ("kv-cache-memory-bytes",)),
    _knob("cpu_offload_gb", _V.NONNEG_FLOAT, (), ("cpu-offload-gb",)),
    # parallelism
    _knob(
        "tp",
        _V.POS_INT,
        ("tp-size", "tensor-parallel-size", "tp"),
        ("tensor-parallel-size", "tp"),
        sg_dest="tp_size",
        memory=_M.TP,
        shorthands=("tensor_parallel",),
    ),
    _knob(
        "pp",
        _V.POS_INT,
        ("pp-size", "pipeline-parallel-size"),
        ("pipeline-parallel-size", "pp"),
        sg_dest="pp_size",
    ),
    _knob("dp", _V.POS_INT, ("dp-size", "data-parallel-size", "dp"), ("data-parallel-size", "dp"), sg_dest="dp_size"),
    _knob("ep", _V.POS_INT, ("ep-size", "expert-parallel-size", "ep"), (), sg_dest="ep_size"),
    _knob("nnodes", _V.POS_INT, ("nnodes",)),
    _knob("node_rank", _V.NONNEG_INT, ("node-rank",)),
    _knob("dist_init_addr", _V.STR, ("dist-init-addr",)),
    _knob("enable_dp_attention", _V.BOOL, ("enable-dp-attention",)),
    _knob("enable_expert_parallel", _V.BOOL, (), ("enable-expert-parallel",)),
    _knob("distributed_executor_backend", _V.STR, (), ("distributed-executor-backend",)),
    # model
    _knob("model", _V.STR, ("model-path", "model"), ("model",), sg_dest="model_path"),
    _knob("tokenizer", _V.STR, ("tokenizer-path",), ("tokenizer",)),
    _knob("served_model_name", _V.STR, ("served-model-name",), ("served-model-name",)),
    _knob("trust_remote_code", _V.BOOL, ("trust-remote-code",), ("trust-remote-code",)),
    _knob("dtype", _V.STR, ("dtype",), ("dtype",)),
    _knob("quantization", _V.STR, ("quantization",), ("quantization", "q")),
    _knob("load_format", _V.STR, ("load-format",), ("load-format",)),
    _knob("revision", _V.STR, ("revision",), ("revision",)),
    _knob("seed", _V.NONNEG_INT, ("random-seed",), ("seed",)),
    # runtime
    _knob("disable_cuda_graph", _V.BOOL, ("disable-cuda-graph",), ("enforce-eager",)),
    _knob("enable_torch_compile", _V.BOOL, ("enable-torch-compile",)),
    _knob("disable_radix_cache", _V.BOOL, ("disable-radix-cache",)),
    _knob("enable_prefix_caching", _V.BOOL, (), ("enable-prefix-caching",)),
    _knob("enable_chunked_prefill", _V.BOOL, (), ("enable-chunked-prefill",)),
    _knob("enable_hierarchical_cache", _V.BOOL, ("enable-hierarchical-cache",)),
    _knob("enable_metrics", _V.BOOL, ("enable-metrics",)),
    _knob("skip_server_warmup", _V.BOOL, ("skip-server-warmup",)),
    _knob("attention_backend", _V.STR, ("attention-backend",), ()),
    _knob("schedule_conservativeness", _V.NONNEG_FLOAT, ("schedule-conservativeness",)),
    _knob("watchdog_timeout", _V.NONNEG_FLOAT, ("watchdog-timeout",)),
    _knob("max_seq_len_to_capture", _V.POS_INT, (), ("max-seq-len-to-capture",)),
    _knob("speculative_algorithm", _V.STR, ("speculative-algorithm",)),
    _knob("speculative_draft_model_path", _V.STR, ("speculative-draft-model-path",)),
    _knob("speculative_num_steps", _V.POS_INT, ("speculative-num-steps",)),
    _knob("speculative_eagle_topk", _V.POS_INT, ("speculative-eagle-topk",)),
    _knob("speculative_num_draft_tokens", _V.POS_INT, ("speculative-num-draft-tokens",)),
    # serving
    _knob("host", _V.STR, ("host",), ("host",)),
    _knob("port", _V.PORT, ("port",), ("port",)),
    _knob("api_key", _V.STR, ("api-key",), ("api-key",)),
    _knob("log_level", _V.STR, ("log-level",), ("uvicorn-log-level",)),
    _knob("tool_call_parser", _V.STR, ("tool-call-parser",), ("tool-call-parser",)),
    _knob("reasoning_parser", _V.STR, ("reasoning-parser",), ("reasoning-parser",)),
    _knob("enable_auto_tool_choice", _V.BOOL, (), ("enable-auto-tool-choice",)),
)
"""The server flags kvtui.flags parses, validates and edits (``Scope.FLAG``)."""

CPU_KV_SPACE_KNOB = _knob("cpu_kv_space", _V.NONNEG_INT, (), ("VLLM_CPU_KVCACHE_SPACE",),
                          vl_dest="vllm_cpu_kvcache_space", memory=_M.CPU_KV_SPACE, scope=Scope.ENV)
"""vLLM's CPU backend sizes its KV pool from this variable (whole GiB; vllm/platforms/cpu.py:
kv_cache_memory_bytes = VLLM_CPU_KVCACHE_SPACE × 2^30): the calculator takes it like a flag
(``--set VLLM_CPU_KVCACHE_SPACE=2``, or an apply's ``--setenv``); the pool is that many GiB."""

OTHER_KNOBS: tuple[Knob, ...] = (
    # vLLM caps its pool in blocks; the calculator turns it into tokens with the block size
    _knob("num_gpu_blocks_override", _V.POS_INT, (), ("num-gpu-blocks-override",), memory=_M.TOKEN_CAP,
          scope=Scope.CALC),
    CPU_KV_SPACE_KNOB,
)
"""Knobs outside the flag table: calculator-only flags and environment variables."""

KNOBS: tuple[Knob, ...] = SPECS + OTHER_KNOBS

# ---------------------------------------------------------------------------------------------
# Spellings
# ---------------------------------------------------------------------------------------------


def dash_name(name: str) -> str:
    """``--Mem_Fraction_Static`` -> ``mem-fraction-static`` (how a flag is written)."""
    return name.strip().lstrip("-").lower().replace("_", "-")


def underscore_name(name: str) -> str:
    """``--Mem-Fraction-Static`` -> ``mem_fraction_static`` (how the calculator and the engines'
    argument dumps name a setting)."""
    return name.strip().lstrip("-").strip().replace("-", "_").lower()


# ---------------------------------------------------------------------------------------------
# Flags (Scope.FLAG): what kvtui.flags reads and writes
# ---------------------------------------------------------------------------------------------


def _build_index(engine: Engine) -> dict[str, Knob]:
    index: dict[str, Knob] = {}
    # the other engine's names first, so the engine's own spellings win a clash
    for other in (e for e in (_SG, _VL) if e is not engine):
        for spec in SPECS:
            for n in spec.names.get(other, ()):
                index[n] = spec
    for spec in SPECS:
        for n in spec.names.get(engine, ()):
            index[n] = spec
    return index


_INDEX: dict[Engine, dict[str, Knob]] = {e: _build_index(e) for e in (_SG, _VL)}
_INDEX[Engine.UNKNOWN] = _INDEX[_SG]
_OWN_NAMES: dict[Engine, frozenset[str]] = {
    e: frozenset(n for s in SPECS for n in s.names.get(e, ())) for e in (_SG, _VL)
}
_OWN_NAMES[Engine.UNKNOWN] = _OWN_NAMES[_SG] | _OWN_NAMES[_VL]
SHORT_FLAGS = frozenset({"tp", "pp", "dp", "q"})
"""Single-dash spellings vLLM accepts (``-tp 4``)."""


def lookup(engine: Engine, name: str) -> Knob | None:
    """The flag a name means for this engine (any alias, either engine's spelling)."""
    n = dash_name(name)
    spec = _INDEX[engine].get(n)
    if spec is None and engine is _VL and n.startswith("no-"):
        s2 = _INDEX[_VL].get(n[3:])
        if s2 is not None and _VL in s2.negatable:
            return s2
    return spec


def written_name(engine: Engine, name: str, dump: Collection[str] | None = None) -> str:
    """The spelling kvtui writes for this flag on this engine (``tp`` -> ``tp-size`` for SGLang,
    ``tensor-parallel-size`` for vLLM; with the running boot's argument-dump keys ``dump``, the
    spelling that release takes: ``cuda-graph-max-bs-decode`` on SGLang 0.5.23); an unknown flag
    comes back normalised."""
    spec = lookup(engine, name)
    return spec.written(engine, dump) if spec is not None else dash_name(name)


def dest_name(engine: Engine, name: str) -> str:
    """The key of this flag in the engine's own argument dump (``tp`` -> ``tp_size`` / ``tensor_parallel_size``)."""
    spec = lookup(engine, name)
    return spec.dest(engine) if spec is not None else dash_name(name).replace("-", "_")


def dump_value(engine: Engine, name: str, dump: Mapping[str, object]) -> tuple[str, object] | None:
    """(key, value) of a flag in an engine's argument dump, under whichever key that release
    gives it (``cuda_graph_max_bs`` or SGLang 0.5.23's ``cuda_graph_max_bs_decode``); None when
    the dump lacks it."""
    spec = lookup(engine, name)
    if spec is None:
        key = underscore_name(name)
        return (key, dump[key]) if key in dump else None
    return spec.in_dump(engine, dump)


def known_names(engine: Engine) -> frozenset[str]:
    """Every spelling in kvtui's flag table for this engine (its own names, without ``--``)."""
    return _OWN_NAMES[engine]


def suggest(engine: Engine, name: str) -> list[str]:
    """Close known spellings for a flag name kvtui does not know (a typo)."""
    return difflib.get_close_matches(dash_name(name), sorted(_OWN_NAMES[engine]), n=3, cutoff=0.75)


def unknown_flag(
    engine: Engine, name: str, in_file: Collection[str] | None = None, dump: Collection[str] = (),
) -> str | None:
    """Why the engine would refuse ``--name`` at start (argparse: ``error: unrecognized
    arguments``, exit status 2), or None when it is a flag it accepts: one in kvtui's flag table,
    one the flags file already passes (``in_file``; None: no file was read), or one in the running boot's argument dump
    (``dump``: SGLang prints every ServerArgs field, vLLM its non-default ones). The one wording
    for ``apply``, ``calc`` and the console's calculator."""
    if engine not in (Engine.SGLANG, Engine.VLLM):
        engine = Engine.SGLANG
    n = dash_name(name)
    base = n[3:] if engine is Engine.VLLM and n.startswith("no-") else n
    known = {dash_name(k) for k in in_file or ()} | {dash_name(k) for k in dump}
    if lookup(engine, n) is not None or {n, base} & known:
        return None
    near = difflib.get_close_matches(n, sorted(known_names(engine) | known), n=3, cutoff=0.6)
    helper = "vllm serve --help" if engine is Engine.VLLM else "python -m sglang.launch_server --help"
    nearest = ("nearest known flags: " + ", ".join(f"--{x}" for x in near)) if near else (
        f"no known flag is close to it (`{helper}` lists them all)")
    eng = "vLLM" if engine is Engine.VLLM else "SGLang"
    places = "kvtui's flag table" + (", the file" if in_file is not None else "") + (
        " or the running boot's argument dump" if dump else "")
    return (f"--{n} is not a flag {eng} accepts (not in {places}); {nearest}; "
            f"the engine would refuse it at start (`error: unrecognized arguments: --{n}`, exit status 2)")


def env_knob(name: str) -> Knob | None:
    """The environment variable a name means (any case: the calculator spells it in lower case)."""
    wanted = name.strip().upper()
    return next((k for k in OTHER_KNOBS if k.scope is Scope.ENV and wanted in _all_names(k)), None)


def pool_env_names(engine: Engine) -> tuple[str, ...]:
    """The environment variables that size this engine's KV pool, as the calculator reads them
    (``Scope.ENV`` knobs with a memory role: ``VLLM_CPU_KVCACHE_SPACE`` on vLLM; none on SGLang)."""
    return tuple(k.written(engine) for k in OTHER_KNOBS
                 if k.scope is Scope.ENV and k.memory is not None and engine in k.names)


def pool_env(engine: Engine, flags: Mapping[str, object], facts: Mapping[Fact, float]) -> dict[str, str | None]:
    """The pool-sizing environment a boot ran with, as its own log shows it (``pool_env_names``;
    None: not set). vLLM's CPU backend says `Explicitly set (X/…) GiB for KV cache` when the pool
    was given (``VLLM_CPU_KVCACHE_SPACE=X``, unless ``--kv-cache-memory-bytes`` gave it) and `Auto
    set …` when not; a GPU boot does not read it. The history stores this with each boot, and a
    remembered vLLM boot calibrates the calculator only beside a boot with the same."""
    names = pool_env_names(engine)
    out: dict[str, str | None] = dict.fromkeys(names)
    if CPU_KV_SPACE_KNOB.written(_VL) in out and flags.get("kv_cache_memory_bytes") is None:
        space = facts.get(Fact.CPU_KV_SPACE_GIB)
        if space is not None:
            out[CPU_KV_SPACE_KNOB.written(_VL)] = f"{float(space):g}"
    return out


def _all_names(knob: Knob) -> set[str]:
    return {n for names in knob.names.values() for n in names}


# ---------------------------------------------------------------------------------------------
# The memory model's settings: what kvtui.kvcalc names and accepts
# ---------------------------------------------------------------------------------------------


def _memory_knobs(engine: Engine) -> dict[Memory, Knob]:
    out: dict[Memory, Knob] = {}
    for knob in KNOBS:
        if knob.memory is not None and engine in knob.names:
            out.setdefault(knob.memory, knob)
    return out


_MEMORY_KNOBS: dict[Engine, dict[Memory, Knob]] = {e: _memory_knobs(e) for e in (_SG, _VL)}


def memory_name(engine: Engine, role: Memory) -> str | None:
    """The calculator's name of a modelled setting on this engine: its argument-dump key
    (``Memory.FRACTION`` -> ``mem_fraction_static`` / ``gpu_memory_utilization``); None when the
    engine has no such setting (SGLang has no ``VLLM_CPU_KVCACHE_SPACE``)."""
    table = _MEMORY_KNOBS.get(engine, _MEMORY_KNOBS[_SG])
    knob = table.get(role)
    return None if knob is None else knob.dest(engine)


def memory_value(engine: Engine, role: Memory, dump: Mapping[str, object]) -> object:
    """A modelled setting's value in a boot's argument dump, under whichever key that release
    gives it (SGLang 0.5.23's ``cuda_graph_max_bs_decode`` for ``Memory.GRAPH_BS``); None when
    absent."""
    table = _MEMORY_KNOBS.get(engine, _MEMORY_KNOBS[_SG])
    knob = table.get(role)
    got = None if knob is None else knob.in_dump(engine if engine in knob.names else _SG, dump)
    return None if got is None else got[1]


def _memory_aliases(engine: Engine) -> dict[str, str]:
    out: dict[str, str] = {}
    for role in Memory:
        own = memory_name(engine, role)
        if own is None:
            continue
        for knob in (k for k in KNOBS if k.memory is role):
            spellings = [*knob.dests.values(), *(n for ns in knob.names.values() for n in ns), *knob.shorthands,
                         *(r.dest for rs in knob.renamed.values() for r in rs)]
            for alias in spellings:
                out[underscore_name(alias)] = own
    return out


MEMORY_ALIASES: dict[Engine, dict[str, str]] = {e: _memory_aliases(e) for e in (_SG, _VL)}
MEMORY_ALIASES[Engine.UNKNOWN] = dict(MEMORY_ALIASES[_SG])
"""Per engine: every accepted spelling of a modelled setting (``_`` form, lower case) → the
engine's own name for it. The other engine's names are aliases too (``max_model_len`` on SGLang
means ``context_length``)."""

MEMORY_ROLES: dict[str, Memory] = {
    knob.dest(e): knob.memory for knob in KNOBS if knob.memory is not None for e in knob.names
}
"""The calculator's name of a modelled setting (either engine's) → what it changes."""


def _editable(engine: Engine) -> tuple[str, ...]:
    table = _MEMORY_KNOBS[engine]
    return tuple(table[r].dest(engine) for r in Memory if r in table and table[r].scope is not Scope.ENV)


EDITABLE_FLAGS: dict[Engine, tuple[str, ...]] = {e: _editable(e) for e in (_SG, _VL)}
EDITABLE_FLAGS[Engine.UNKNOWN] = EDITABLE_FLAGS[_SG]
"""The modelled flags the calculator panel offers, the memory fraction first."""


def fraction_flag(engine: Engine) -> str:
    """The engine's memory-fraction flag: ``mem_fraction_static`` / ``gpu_memory_utilization``."""
    name = memory_name(engine if engine is _VL else _SG, Memory.FRACTION)
    assert name is not None
    return name

