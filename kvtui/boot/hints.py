"""What to tell the operator about a failure: ``hint_for`` (a one-line hint in the right direction
for each failure kind, with the boot's own flags and figures), the failure kind a CUDA OOM gets
from the phase it happened in, and ``exit_diagnosis`` (a server process gone without an error
the engine printed: an argparse refusal in its last lines, or a crash).

Pure core.
"""

from __future__ import annotations

import re
from typing import Final

from kvtui.engines.events import Engine, Fact, FailureKind, Phase
from kvtui.knobs import lookup, underscore_name

_DEFAULT_OOM_PHASE_KIND: Final = {
    Phase.LOAD_WEIGHTS: FailureKind.OOM_WEIGHTS,
    Phase.COMPILE: FailureKind.OOM_KV_ALLOCATE,
    Phase.KV_ALLOCATE: FailureKind.OOM_KV_ALLOCATE,
    Phase.GRAPH_CAPTURE: FailureKind.OOM_GRAPH_CAPTURE,
    Phase.HTTP_UP: FailureKind.OOM_RUNTIME,
    Phase.READY: FailureKind.OOM_RUNTIME,
}


def _is_oom(text: str) -> bool:
    return "OutOfMemoryError" in text or "CUDA out of memory" in text or "CUDA error: out of memory" in text




def runtime_oom_when(phase: Phase | None, served: bool = True) -> str:
    """When an out-of-memory after the pools were sized came, in words: before the server said
    ready (``http_up``: the warm-up request, the first forward, which allocates what the captured
    graphs do not hold), after ready but before any batch was logged, or while serving."""
    if phase is not None and phase is not Phase.READY:
        return "at the warm-up request (the first forward, before the server said ready)"
    if not served:
        return "at the first forward after ready (before any batch was logged)"
    return "while serving"


_FLAG_RE: Final = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
_DUMP_WORD_RE: Final = re.compile(r"(?<![\w.-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w-])")
_KEBAB_WORD_RE: Final = re.compile(r"(?<![\w.-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![\w-])")


def flags_named(engine: Engine, text: str, flags: dict[str, object]) -> list[str]:
    """The server flags a refusal's message names, as the command line spells them, in the order
    it names them, each with the boot's value when its argument dump has it (``--max-num-seqs
    (now 256)``): ``--flag`` spellings, and snake_case words that are a flag kvtui knows or a key
    of the dump (``max_num_batched_tokens``), or a flag kvtui knows without its dashes
    (``kv-cache-dtype``). pydantic's ``[type=…, input_value=…]`` tail, which
    repeats every field, is left out."""
    text = text.split(" [type=", 1)[0]
    found: dict[str, str] = {}  # underscore name -> the flag as written
    hits = [(m.start(), m.group(0), True) for m in _FLAG_RE.finditer(text)]
    hits += [(m.start(), m.group(0), False) for m in _DUMP_WORD_RE.finditer(text)]
    hits += [(m.start(), m.group(0), False) for m in _KEBAB_WORD_RE.finditer(text)]
    for _, word, dashed in sorted(hits):
        knob = lookup(engine, word)
        if not dashed and knob is None and underscore_name(word) not in flags:
            continue
        flag = "--" + (knob.written(engine, flags) if knob is not None else word.lstrip("-").replace("_", "-"))
        key = underscore_name(flag)
        if key in found:
            continue
        got = knob.in_dump(engine, flags) if knob is not None else None
        value = got[1] if got is not None else flags.get(underscore_name(word))
        found[key] = f"{flag} (now {value})" if value is not None else flag
        if len(found) >= 6:
            break
    return list(found.values())


def hint_for(kind: FailureKind, engine: Engine, flags: dict[str, object], facts: dict[Fact, float], *,
             phase: Phase | None = None, served: bool = True, message: str | None = None) -> str:
    """A one-line hint in the right direction for a failure kind, with the boot's own numbers.
    ``phase`` (where the failure came) and ``served`` (a serving batch was logged before it) word
    ``oom_runtime`` by when it came: the warm-up request, the first forward after ready, serving.
    ``message`` (the failure's text): a ``bad_args`` refusal of the configuration names the flags
    it names."""
    vllm = engine is Engine.VLLM
    if vllm:
        util = flags.get("gpu_memory_utilization")
        frac = f"--gpu-memory-utilization (now {util})" if util is not None else "--gpu-memory-utilization"
    else:
        mfs = flags.get("mem_fraction_static")
        frac = f"--mem-fraction-static (now {mfs})" if mfs is not None else "--mem-fraction-static"
    if kind is FailureKind.OOM_GRAPH_CAPTURE:
        if vllm:
            return (
                f"CUDA-graph capture ran out of GPU memory: lower {frac}, capture fewer sizes "
                "(--max-num-seqs / --cuda-graph-sizes), or run with --enforce-eager"
            )
        # in the boot's own release's spelling (SGLang 0.5.23: --cuda-graph-max-bs-decode)
        graph_bs = lookup(Engine.SGLANG, "cuda-graph-max-bs")
        assert graph_bs is not None
        bs_flag = graph_bs.written(Engine.SGLANG, flags)
        got = graph_bs.in_dump(Engine.SGLANG, flags)
        bs = None if got is None else got[1]
        bs_txt = f"--{bs_flag} (now {bs})" if bs is not None else f"--{bs_flag}"
        return (
            f"CUDA-graph capture ran out of GPU memory: lower {frac} to leave more headroom, "
            f"or lower {bs_txt} / --max-running-requests so fewer graphs are captured"
        )
    if kind is FailureKind.OOM_KV_ALLOCATE:
        if vllm:
            return (
                f"no GPU memory left for the KV cache: raise {frac}, lower --max-model-len / "
                "--max-num-batched-tokens, or use more GPUs (--tensor-parallel-size)"
            )
        return (
            f"the KV pool does not fit in the static budget left after the weights: raise {frac}, "
            "or use more GPUs (--tp) / a quantized checkpoint"
        )
    if kind is FailureKind.KV_TOO_SMALL:
        est = facts.get(Fact.ESTIMATED_MAX_LEN)
        if vllm:
            cap = f" to at most {int(est)}" if est is not None else ""
            return f"the KV cache cannot hold one full-length request: lower --max-model-len{cap}, or raise {frac}"
        return f"the KV pool cannot hold one full-context request: lower --context-length, or raise {frac}"
    if kind is FailureKind.OOM_WEIGHTS:
        return (
            "the weights do not fit in free GPU memory: use more GPUs (tensor parallelism), a quantized "
            "checkpoint, or free the GPUs (other processes may hold memory)"
        )
    if kind is FailureKind.OOM_RUNTIME:
        when = runtime_oom_when(phase, served)
        if vllm:
            return f"out of GPU memory {when}: lower {frac} or --max-num-batched-tokens / --max-num-seqs"
        return (
            f"out of GPU memory {when}: lower {frac} (more headroom for activations) or "
            "--chunked-prefill-size / --max-running-requests"
        )
    if kind is FailureKind.GPU_BUSY:
        return (
            "GPU memory is held by other processes at start: free the GPUs (a stale server? `nvidia-smi` "
            "lists the PIDs) before starting"
        )
    if kind is FailureKind.NCCL:
        return (
            "multi-GPU communication (NCCL) failed: rerun with NCCL_DEBUG=INFO, check that every GPU is "
            "healthy and visible, the P2P/NVLink/IB settings, and whether another rank died first"
        )
    if kind is FailureKind.BAD_ARGS:
        named = flags_named(engine, message, flags) if message else []
        if named:
            return (
                f"the server refused its configuration, naming {', '.join(named)}: change "
                f"{'it' if len(named) == 1 else 'them'} as the message says in the unit or launch script, or "
                "restore the previous flags with `kvtui rollback HOST`"
            )
        return (
            "the server refused its arguments: fix what the error names (a flag, or flags that do not go "
            "together) in the unit or launch script, or restore the previous flags with `kvtui rollback HOST`"
        )
    if kind is FailureKind.CRASH:
        return "a server process died: the message is the exception it died with; the traceback shows where"
    if kind is FailureKind.NOT_SERVING:
        return (
            "the log says ready but the server does not answer a 1-token request: check the port and "
            "--host it listens on, the served model name (probe_model), and the server's log after ready"
        )
    return "the server exited without a recognised error: read the last lines of the log"


EXIT_CONTEXT_LINES: Final = 12
_ARGPARSE_ERROR_RE: Final = re.compile(r"^(?:\S+(?: \S+)?): error: (?:argument |unrecognized arguments|the following "
                                      r"arguments are required|ambiguous option|invalid choice)")
_EXIT_HINT: Final = (
    "the server process exited without an error the engine printed: the last lines are above; a "
    "kill -9, the kernel's OOM killer (dmesg -T | grep -i oom) or a crash in native code leaves no message"
)


def exit_diagnosis(recent: list[str], text: str) -> tuple[FailureKind, str, str]:
    """(kind, message, hint) for a server process gone with no recognised failure (``text``: the
    exit record's): ``bad_args`` when its last lines are an argparse refusal (``PROG: error:
    argument …``), else ``crash`` with "the server process exited (pid …)"."""
    what = text.removeprefix("kvtui: ").replace(" is not running", " exited", 1)
    for line in reversed(recent[-EXIT_CONTEXT_LINES:]):
        if _ARGPARSE_ERROR_RE.match(line.strip()):
            hint = ("the server refused its command line (" + line.strip() + "): fix that flag in the unit or "
                    "launch script, or restore the previous flags with `kvtui rollback HOST`")
            return FailureKind.BAD_ARGS, line.strip(), hint
    return FailureKind.CRASH, what, _EXIT_HINT
