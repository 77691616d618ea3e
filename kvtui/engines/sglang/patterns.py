"""What SGLang's lines look like: the ``[stamp( DP0)( TP3)…]`` prefix and message regexes, the
number readers, the phase marks built once, the lines known to carry nothing, and the pieces of
failure lines only SGLang prints (``Not enough memory …``, its argparse refusal).

Pure core.
"""

from __future__ import annotations

import re
from typing import Final

from kvtui.engines.cli_errors import cli_error
from kvtui.engines.events import (
    Engine,
    Fact,
    FailureKind,
    FailureText,
    Flags,
    LogEvent,
    Metric,
    Model,
    Phase,
    PhaseMark,
)

TARGET: Final = Model.TARGET
DRAFT: Final = Model.DRAFT

# Events are frozen dataclasses: the marks without a printed duration are shared constants.
_PM_CACHE: Final = {(ph, mo, end): PhaseMark(ph, mo, end) for ph in Phase for mo in Model for end in (False, True)}


def _pm(phase: Phase, model: Model = TARGET, end: bool = False) -> PhaseMark:
    return _PM_CACHE[(phase, model, end)]


# ---------------------------------------------------------------------------------------------
# Regular expressions (compiled once)
# ---------------------------------------------------------------------------------------------

# `[2026-05-30 22:08:02.123 DP0 PP1 TP4]` — SGLang's logging prefix (engines.md 1.1).
_PREFIX_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]*\d+)*)\] ?")
_TP_RE = re.compile(r"\bTP(\d+)\b")
# a scheduler's process title (0.5.x, setproctitle): `sglang::scheduler_DP0_PP1_TP2_EP0`
_PROC_TITLE_RE = re.compile(r"\s*sglang::scheduler((?:_(?:ATTN_CP|MOE_DP|DP|PP|TP|EP)\d+)*)\s*")
_PROC_TAG_RE = re.compile(r"_((?:ATTN_CP|MOE_DP|DP|PP|TP|EP)\d+)")


def rank_of_process_title(title: str) -> str | None:
    """The rank label an SGLang scheduler's log lines carry (``DP0 PP1 TP2 EP0``, as in
    ``[… DP0 PP1 TP2 EP0] …``) from its process title (``sglang::scheduler_DP0_PP1_TP2_EP0``, what
    ``nvidia-smi`` and ``ps`` show for it): ties a GPU process to its rank. ``""`` for a
    single-rank scheduler (``sglang::scheduler``), None for any other process."""
    m = _PROC_TITLE_RE.fullmatch(title)
    if m is None:
        return None
    return " ".join(_PROC_TAG_RE.findall(m.group(1)))
# Some builds/configs print `LEVEL file.py:123: ` after the bracket.
_LEVEL_RE = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w./-]+\.py:\d+: ")
_NUM_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_INT_RE = re.compile(r"-?\d+")
_AVAIL_RE = re.compile(r"avail[ _]mem=(-?\d+(?:\.\d+)?) ?GB")
_MEMUSE_RE = re.compile(r"mem usage=(-?\d+(?:\.\d+)?) ?GB")
_ELAPSED_RE = re.compile(r"(?:elapsed=|Time elapsed: )(\d+(?:\.\d+)?) ?s")
_BS_LIST_RE = re.compile(r"\bbs(?:=| )\[([\d,\s]*)\]")
_KEYVAL_RE = re.compile(r"([A-Za-z_][\w]*)=(-?\d+(?:\.\d+)?)")
_TOKENS_RE = re.compile(r"#tokens: (-?\d+)")
_K_V_RE = re.compile(r"\bK size: (-?\d+(?:\.\d+)?) ?GB, V size: (-?\d+(?:\.\d+)?) ?GB")
_KV_SIZE_RE = re.compile(r"\bKV size: (-?\d+(?:\.\d+)?) ?GB")
_PROGRESS_RE = re.compile(r"(\d+)/(\d+) \[")
_TQDM_BS_RE = re.compile(r"\((?:bs|num_tokens)=(\d+) avail_mem=(-?\d+(?:\.\d+)?) ?GB\)")
_EXIT_CODE_RE = re.compile(r"exit code:? (-?\d+)")
_SGL_VERSION_RE = re.compile(r"\bSGLang [Vv]ersion:? v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)")
_MFS_RE = re.compile(r"mem[-_]fraction[-_]static=(\d+(?:\.\d+)?)")

_UNIT_GIB: Final = {"GiB": 1.0, "MiB": 1.0 / 1024, "KiB": 1.0 / (1024 * 1024), "B": 1.0 / (1 << 30)}

_MAX_RANK_STATES: Final = 1024


def _num_after(text: str, key: str) -> float | None:
    """The number right after ``key`` in ``text`` (first occurrence), or None."""
    i = text.find(key)
    if i < 0:
        return None
    m = _NUM_RE.match(text, i + len(key))
    if m is None:
        return None
    try:
        return float(m.group())
    except ValueError:  # pragma: no cover - the regex only matches valid floats
        return None


def _int_after(text: str, key: str) -> int | None:
    i = text.find(key)
    if i < 0:
        return None
    m = _INT_RE.match(text, i + len(key))
    return int(m.group()) if m else None


def _to_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        v = float(value.rstrip(",% "))
    except ValueError:
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _to_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.rstrip(", "))
    except ValueError:
        return None


def _float_re(rx: re.Pattern[str], text: str) -> float | None:
    m = rx.search(text)
    return float(m.group(1)) if m else None


def _figure(rx: re.Pattern[str], text: str, name: Fact, model: Model = Model.TARGET) -> list[Metric]:
    """``[Metric(name, value, model)]`` when ``rx`` finds the figure in ``text``, else ``[]``."""
    v = _float_re(rx, text)
    return [] if v is None else [Metric(name, v, model)]


def _gib(value: str, unit: str) -> float:
    return float(value) * _UNIT_GIB.get(unit, 1.0)



# SGLang lines read from its source that carry nothing kvtui needs (not "unrecognised startup lines")
_KNOWN_STARTS: Final = (
    "Ignore import error when loading",  # optional model modules at import
    "CUDA graphs can take additional",  # piecewise-graph memory advice
    "Restoring add_bos_token",
    "FP4 (E2M1) KV Cache might lead",
    "Using FP8 KV cache but no scaling factors",
    "Tree cache initialized",
    "Found local HF snapshot",
    "Failed to load generation config",
    "DFLASH draft greedy head folded",
    "Attempting to acquire lock",  # filelock (kernel JIT caches) at debug level
    "Attempting to release lock",
    "Lock ",
    "Mooncake Configuration loaded",
    "Loading chat template",
    "Finish: obj=",  # --log-requests
    "Using default chat sampling params",
    "Cache flushed successfully",
)

# SGLang failure texts that identify the engine in a fragment without any SGLang prefix
_FRAGMENT_RE: Final = re.compile(
    r"(?:[\w.]+(?:Error|Exception): )?(?:Not enough memory\. Please try to increase --mem-fraction-static"
    r"|Loaded weights leave no GPU memory|Capture cuda graph failed|Scheduler hit an exception"
    r"|Received sigquit from a child|Rank \d+ scheduler died during initialization)"
)
_INFERRED: Final = {ph: PhaseMark(ph, inferred=True) for ph in Phase}


def _inferred(phase: Phase) -> PhaseMark:
    return _INFERRED[phase]


def _not_enough(msg: str) -> tuple[LogEvent, ...]:
    """`Not enough memory. Please try to increase --mem-fraction-static.` (0.5.x: `Current value:
    mem_fraction_static=X`; ≥0.5.18: `Loaded weights leave no GPU memory … under
    --mem-fraction-static=X`): the fraction from the message when the argument dump is missing."""
    ev: list[LogEvent] = [_pm(Phase.KV_ALLOCATE, TARGET), FailureText(msg, FailureKind.OOM_KV_ALLOCATE, specificity=3)]
    m = _MFS_RE.search(msg)
    if m is not None:
        ev.append(Flags({"mem_fraction_static": float(m.group(1))}))
    return tuple(ev)


def _cli_error_of(text: str) -> FailureText | None:
    """SGLang's own argparse refusal (``launch_server.py: error: …``), else None."""
    got = cli_error(text)
    return got[1] if got is not None and got[0] is Engine.SGLANG else None

# ``Engine startup timings (s): load_weight=%.2f, …, cuda_graph={%s}, tokenizer_e2e=%.2f``
# (``entrypoints/engine.py``, ≥ 0.5.17): the ``cuda_graph={…}`` group, and one ``name=seconds`` field
_ENGINE_GRAPHS_RE: Final = re.compile(r"cuda_graph=\{([^}]*)\}")
_ENGINE_FIELD_RE: Final = re.compile(r"\b(\w+)=(\d+(?:\.\d+)?)\b")
