"""SGLang log grammar: one line of SGLang output -> a ``ParsedLine`` with typed events.

Covers the formats of SGLang 0.4.10, 0.5.10-0.5.16 and 0.5.23 (``engines.md`` section 1): the
``[YYYY-MM-DD HH:MM:SS(.mmm)( DP0)( PP1)( TP3)( EP0)…]`` prefix, every startup phase line, the
failure lines, tqdm progress bars and the serving lines.

The grammar is stateful per boot: inside one scheduler SGLang runs the target model through
init -> weights -> KV pool -> graph capture and then a speculative draft worker through its own
weights -> KV pool -> capture (newer builds load the draft weights before the target's pool).
A rank's second ``Load weight begin``, and its KV lines after its own target ``Memory pool end``,
belong to the draft (``Model.DRAFT``). ``reset()`` forgets that state (a new boot).

Pure core: no I/O, no textual/asyncssh. Hot path: serving lines (``Decode batch``) are ~90 % of
a long log, so they are recognised with ``str.startswith`` and read with ``str.find``.
"""

from __future__ import annotations

import ast
import re
from datetime import datetime, timedelta
from typing import Final

from kvtui.engines.cli_errors import cli_error, usage_engine
from kvtui.engines.events import (
    BootBoundary,
    BoundaryKind,
    CaptureSizes,
    Engine,
    FailureKind,
    FailureText,
    Flags,
    LogEvent,
    Metric,
    Model,
    ParsedLine,
    Phase,
    PhaseMark,
    Progress,
    Serving,
    VersionHint,
    Warning_,
)
from kvtui.engines.stack import frame_engine, frame_phase

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
_EXC_RE = re.compile(r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s?(.*))?$")
_OOM_TRIED_RE = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) (GiB|MiB|KiB|B)")
_OOM_FREE_RE = re.compile(r"of which (\d+(?:\.\d+)?) (GiB|MiB|KiB|B) (?:is )?free")
_OOM_CAP_RE = re.compile(r"total capac(?:i)?ty of (\d+(?:\.\d+)?) (GiB|MiB|KiB|B)")
_EXIT_CODE_RE = re.compile(r"exit code:? (-?\d+)")
_SGL_VERSION_RE = re.compile(r"\bSGLang [Vv]ersion:? v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)")
_MFS_RE = re.compile(r"mem[-_]fraction[-_]static=(\d+(?:\.\d+)?)")
_ARGS_TOKEN_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[()\[\]{},]")

_UNIT_GIB: Final = {"GiB": 1.0, "MiB": 1.0 / 1024, "KiB": 1.0 / (1024 * 1024), "B": 1.0 / (1 << 30)}

MAX_ARGS_CHARS: Final = 256 * 1024  # an argument dump longer than this is cut before parsing
_MAX_VALUE_CHARS: Final = 8192  # a single value longer than this stays a raw string
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


def _gib(value: str, unit: str) -> float:
    return float(value) * _UNIT_GIB.get(unit, 1.0)


# ---------------------------------------------------------------------------------------------
# Failure text shared by every engine (plain Python / PyTorch / NCCL output)
# ---------------------------------------------------------------------------------------------


def is_oom_text(text: str) -> bool:
    """PyTorch / CUDA out-of-memory wording (engines.md 1.3)."""
    return "OutOfMemoryError" in text or "CUDA out of memory" in text or "CUDA error: out of memory" in text


def oom_metrics(text: str) -> list[Metric]:
    """``Tried to allocate X GiB``, ``of which Y MiB is free``, ``total capacity of Z GiB``."""
    out: list[Metric] = []
    m = _OOM_TRIED_RE.search(text)
    if m:
        out.append(Metric("oom_tried_gib", _gib(m.group(1), m.group(2))))
    m = _OOM_FREE_RE.search(text)
    if m:
        out.append(Metric("oom_free_gib", _gib(m.group(1), m.group(2))))
    m = _OOM_CAP_RE.search(text)
    if m:
        out.append(Metric("oom_capacity_gib", _gib(m.group(1), m.group(2))))
    return out


def _nccl_kind(text: str) -> bool:
    return (
        "NCCL error" in text
        or "NCCL WARN" in text
        or "DistBackendError" in text
        or "Watchdog caught collective operation timeout" in text
        or "ncclUnhandledCudaError" in text
        or "ncclSystemError" in text
        or "ncclInternalError" in text
    )


def exception_line(text: str) -> FailureText | None:
    """A Python exception line (``RuntimeError: …``, ``torch.OutOfMemoryError: …``) as evidence.

    The kind is decided by the text when the text alone decides it, else left to the phase.
    """
    if not text or not (text[0].isalpha() or text[0] == "_"):
        return None
    if not ("Error" in text or "Exception" in text or "Exit" in text or "Interrupt" in text or "Failure" in text):
        return None
    m = _EXC_RE.match(text)
    if m is None:
        return None
    return FailureText(text=text, kind=_text_kind(text), fatal=False, specificity=3)


def _text_kind(text: str) -> FailureKind | None:
    """Kinds the text decides regardless of the phase (engines.md 1.3)."""
    if "Not enough memory" in text and "mem-fraction-static" in text:
        return FailureKind.OOM_KV_ALLOCATE
    if "Loaded weights leave no GPU memory" in text:
        return FailureKind.OOM_KV_ALLOCATE
    if "memory capacity is unbalanced" in text:
        return FailureKind.GPU_BUSY
    if is_oom_text(text):
        return None  # the phase decides (weights / capture / runtime …)
    if _nccl_kind(text):
        return FailureKind.NCCL
    return None


def generic_failure(text: str) -> tuple[LogEvent, ...]:
    """Failure evidence in a line no engine grammar claimed (plain Python/PyTorch/NCCL output)."""
    if not ("rror" in text or "NCCL" in text or "out of memory" in text or "Exception" in text):
        return ()
    ft = exception_line(text)
    if ft is not None:
        if is_oom_text(text):
            return (ft, *oom_metrics(text))
        return (ft,)
    if is_oom_text(text):
        return (FailureText(text=text, kind=None, specificity=2), *oom_metrics(text))
    if _nccl_kind(text):
        return (FailureText(text=text, kind=FailureKind.NCCL, specificity=2),)
    return ()


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


# ---------------------------------------------------------------------------------------------
# Argument dumps: `server_args=ServerArgs(k=v, …)` and `server_args={'k': v, …}`
# ---------------------------------------------------------------------------------------------


_SIMPLE_LITERALS: Final[dict[str, object]] = {"None": None, "True": True, "False": False}
_INT_FULL_RE = re.compile(r"-?\d+")
_FLOAT_FULL_RE = re.compile(r"-?\d+\.\d*(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")


def _literal(value: str) -> object:
    value = value.strip()
    if not value:
        return ""
    if len(value) > _MAX_VALUE_CHARS:
        return value
    # the common shapes without ast (an argument dump has ~250 of them, one per boot)
    if value in _SIMPLE_LITERALS:
        return _SIMPLE_LITERALS[value]
    c = value[0]
    if c == "'" and value[-1] == "'" and len(value) >= 2 and "\\" not in value and "'" not in value[1:-1]:
        return value[1:-1]
    if c.isdigit() or c == "-":
        if _INT_FULL_RE.fullmatch(value):
            return int(value)
        if _FLOAT_FULL_RE.fullmatch(value):
            return float(value)
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def _split_top_level(body: str) -> tuple[list[str], int]:
    """Split at commas outside quotes and brackets. Returns (pieces, index where depth < 0)."""
    pieces: list[str] = []
    depth = 0
    start = 0
    end = len(body)
    for m in _ARGS_TOKEN_RE.finditer(body):
        tok = m.group()
        c = tok[0]
        if c in "'\"":
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                end = m.start()
                break
        elif depth == 0:  # a comma at top level
            pieces.append(body[start : m.start()])
            start = m.end()
    pieces.append(body[start:end])
    return [p for p in (s.strip() for s in pieces) if p], end


def parse_server_args(dump: str) -> dict[str, object]:
    """Parse SGLang's argument dump (the text after ``server_args=``) without ``eval``.

    Values are Python literals where ``ast.literal_eval`` accepts them (numbers, strings,
    ``None``/``True``/``False``, lists, dicts), else the raw text (enum reprs, nested objects).
    A truncated dump yields the keys that were complete.
    """
    dump = dump[:MAX_ARGS_CHARS].strip()
    out: dict[str, object] = {}
    if dump.startswith("{"):
        if len(dump) <= 64 * 1024:
            whole = _literal(dump)
            if isinstance(whole, dict):
                return {str(k): v for k, v in whole.items()}
        pieces, _ = _split_top_level(dump[1:])
        for piece in pieces:
            key, sep, value = piece.partition(":")
            key = key.strip()
            if not sep or len(key) < 2 or key[0] not in "'\"" or key[-1] != key[0]:
                continue
            out[key[1:-1]] = _literal(value)
        return out
    paren = dump.find("(")
    if paren < 0:
        return out
    pieces, _ = _split_top_level(dump[paren + 1 :])
    for piece in pieces:
        key, sep, value = piece.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            continue
        out[key] = _literal(value)
    return out


# ---------------------------------------------------------------------------------------------
# Per-rank state (which model the KV / weight lines belong to)
# ---------------------------------------------------------------------------------------------


class _RankState:
    __slots__ = ("cur_model", "hybrid", "kv_lines", "load_ended", "pool_ended")

    def __init__(self) -> None:
        self.load_ended = False  # a `Load weight end` was seen on this rank
        self.cur_model: Model = TARGET  # the model of the load in progress
        self.pool_ended = False  # the rank's target `Memory pool end` was seen
        self.kv_lines = 0  # target KV pool lines on this rank
        self.hybrid = False  # a sliding-window / hybrid pool: several target KV lines are normal


def _version_key(v: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in v.lstrip(">=~").split("."):
        digits = ""
        for ch in part:
            if ch.isdigit():
                digits += ch
            else:
                break
        out.append(int(digits) if digits else 0)
    return tuple(out)


class SglangGrammar:
    """Stateful (per boot) SGLang line grammar. See the module docstring."""

    engine: Final = Engine.SGLANG

    def __init__(self) -> None:
        self._ranks: dict[str, _RankState] = {}
        self._capture_model: Model = TARGET
        self._capturing = False
        self._load_model: Model = TARGET
        self._draft_load_seen = False
        self._era: str | None = None
        self._stamp_key = ""
        self._stamp_dt: datetime | None = None
        self._tp_of: dict[str, int | None] = {}

    def reset(self) -> None:
        """Forget the per-boot state (a new boot starts)."""
        self._ranks.clear()
        self._capture_model = TARGET
        self._capturing = False
        self._load_model = TARGET
        self._draft_load_seen = False
        self._era = None

    # -----------------------------------------------------------------------------------------
    @staticmethod
    def sniff(text: str) -> bool:
        """Cheap: is this line recognisably SGLang output?"""
        if text.startswith("["):
            return _PREFIX_RE.match(text) is not None
        return (
            "server_args=ServerArgs(" in text
            or text.startswith("Capturing batches (bs=")
            or text.startswith("Capturing num tokens (num_tokens=")
            or (text.startswith("SGLang") and _SGL_VERSION_RE.match(text) is not None)
            or (text.startswith("usage: ") and usage_engine(text) is Engine.SGLANG)
            or (": error: " in text and _cli_error_of(text) is not None)
            or ('File "' in text and frame_engine(text) is Engine.SGLANG)
            or _FRAGMENT_RE.match(text) is not None
        )

    # -----------------------------------------------------------------------------------------
    def _stamp(self, stamp: str, frac: str | None) -> datetime | None:
        if stamp != self._stamp_key:
            try:
                dt = datetime(
                    int(stamp[0:4]), int(stamp[5:7]), int(stamp[8:10]),
                    int(stamp[11:13]), int(stamp[14:16]), int(stamp[17:19]),
                )  # fmt: skip
            except ValueError:
                return None
            self._stamp_key = stamp
            self._stamp_dt = dt
        dt0 = self._stamp_dt
        if frac and dt0 is not None:
            return dt0 + timedelta(microseconds=int(frac.ljust(6, "0")[:6]))
        return dt0

    def _rank_state(self, rank: str | None) -> _RankState:
        key = rank or ""
        st = self._ranks.get(key)
        if st is None:
            if len(self._ranks) >= _MAX_RANK_STATES:
                self._ranks.clear()
            st = self._ranks[key] = _RankState()
        return st

    def parse(self, text: str, ts: datetime | None = None) -> ParsedLine:
        """Read one physical line (ANSI already stripped, no ``\\r``/``\\n`` inside)."""
        rank: str | None = None
        tp: int | None = None
        level: str | None = None
        prefixed = False
        msg = text
        if text.startswith("["):
            m = _PREFIX_RE.match(text)
            if m is not None:
                prefixed = True
                msg = text[m.end() :]
                if ts is None or ts.tzinfo is None:
                    own = self._stamp(m.group(1), m.group(2))
                    if own is not None:
                        ts = own
                tags = m.group(3)
                if tags:
                    rank = tags[1:]
                    tp = self._tp_of.get(rank, -1)
                    if tp == -1:
                        tm = _TP_RE.search(rank)
                        tp = int(tm.group(1)) if tm is not None else None
                        if len(self._tp_of) < 4096:
                            self._tp_of[rank] = tp
                if msg[:1] in ("D", "I", "W", "E", "C") and not msg.startswith("INFO:"):
                    lm = _LEVEL_RE.match(msg)
                    if lm is not None:
                        level = lm.group(1)
                        msg = msg[lm.end() :]
        events = self._classify(msg, rank, prefixed)
        return ParsedLine(
            text=msg,
            ts=ts,
            rank=rank,
            tp=tp,
            level=level,
            engine=Engine.SGLANG if (prefixed or events) else None,
            events=events,
            prefixed=prefixed,
            known=prefixed and not events and msg.startswith(_KNOWN_STARTS),
        )

    # -----------------------------------------------------------------------------------------
    def _classify(self, msg: str, rank: str | None, prefixed: bool) -> tuple[LogEvent, ...]:
        if prefixed:
            c = msg[:1]
            # serving lines first: ~90 % of a long log
            if c == "D" and msg.startswith("Decode batch"):
                return (self._serving(msg),)
            if c == "P" and msg.startswith("Prefill batch"):
                return (self._serving(msg),)
            if c == "I" and msg.startswith("INFO:"):
                return self._uvicorn(msg)
            ev = self._phase_line(msg, rank)
            if ev is not None:
                return ev
            return self._failure_line(msg)
        return self._unprefixed(msg)

    # ---- serving ------------------------------------------------------------------------------
    @staticmethod
    def _serving(msg: str) -> Serving:
        """`Decode batch, #running-req: 12, #token: 9000, token usage: 0.42, …` (0.4.x: `Decode batch.`)."""
        # hybrid models print `full token usage` / `swa token usage`: the first is the full pool's.
        # Each value runs to the next comma (`find` gives -1 for the last one: `% (n + 1)` -> the end).
        i = msg.find("token usage: ")
        usage = _to_float(msg[i + 13 : msg.find(",", i + 13) % (len(msg) + 1)]) if i >= 0 else None
        i = msg.find("#running-req: ")
        running = _to_int(msg[i + 14 : msg.find(",", i + 14) % (len(msg) + 1)]) if i >= 0 else None
        i = msg.find("#queue-req: ")
        queued = _to_int(msg[i + 12 : msg.find(",", i + 12) % (len(msg) + 1)]) if i >= 0 else None
        i = msg.find("gen throughput (token/s): ")
        gen = _to_float(msg[i + 26 : msg.find(",", i + 26) % (len(msg) + 1)]) if i >= 0 else None
        return Serving(token_usage=usage, running_reqs=running, queue_reqs=queued, gen_throughput=gen)

    @staticmethod
    def _uvicorn(msg: str) -> tuple[LogEvent, ...]:
        body = msg[5:].lstrip()
        if body.startswith("Started server process") or body.startswith("Uvicorn running on"):
            return (_pm(Phase.HTTP_UP, TARGET),)
        return ()

    # ---- phase lines --------------------------------------------------------------------------
    def _note_era(self, version: str) -> tuple[LogEvent, ...]:
        if self._era is None or _version_key(version) > _version_key(self._era):
            self._era = version
            return (VersionHint(">=" + version),)
        return ()

    def _phase_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        c = msg[:1]
        if c == "C":
            if msg.startswith("Capture "):
                return self._capture(msg, rank)
            return None
        if c == "L":
            if msg.startswith("Load weight begin"):
                st = self._rank_state(rank)
                model = DRAFT if st.load_ended else TARGET
                st.cur_model = model
                self._load_model = model
                if model is DRAFT:
                    self._draft_load_seen = True
                ev: list[LogEvent] = [_pm(Phase.LOAD_WEIGHTS, model)]
                v = _float_re(_AVAIL_RE, msg)
                if v is not None:
                    ev.append(Metric("avail_before_load_gib", v, model))
                return tuple(ev)
            if msg.startswith("Load weight end"):
                st = self._rank_state(rank)
                model = st.cur_model if not st.load_ended or st.cur_model is DRAFT else DRAFT
                st.load_ended = True
                secs = _float_re(_ELAPSED_RE, msg)
                ev = [PhaseMark(Phase.LOAD_WEIGHTS, model, end=True, seconds=secs)]
                if secs is not None:
                    ev.append(Metric("load_seconds", secs, model))
                v = _float_re(_AVAIL_RE, msg)
                if v is not None:
                    ev.append(Metric("avail_after_load_gib", v, model))
                v = _float_re(_MEMUSE_RE, msg)
                if v is not None:
                    ev.append(Metric("weights_gib", v, model))
                return tuple(ev)
            if msg.startswith("Loaded weights leave no GPU memory"):
                return (*_not_enough(msg), *self._note_era("0.5.18"))
            return None
        if c == "I":
            if msg.startswith("Init torch distributed begin") or msg.startswith("Init parallel begin"):
                st = self._rank_state(rank)
                era = self._note_era("0.5.23") if msg.startswith("Init parallel") else ()
                if st.load_ended:  # the draft worker's own init (newer builds)
                    return era
                return (_pm(Phase.INIT, TARGET), *era)
            if msg.startswith("Init torch distributed ends") or msg.startswith("Init parallel ends"):
                st = self._rank_state(rank)
                model = DRAFT if st.load_ended else TARGET
                secs = _float_re(_ELAPSED_RE, msg)
                ev = []
                if model is TARGET:
                    ev.append(PhaseMark(Phase.INIT, end=True, seconds=secs))
                v = _float_re(_MEMUSE_RE, msg)
                if v is not None:
                    ev.append(Metric("init_mem_usage_gib", v, model))
                return tuple(ev)
            if msg.startswith("Initialize DeepSeekV4TokenToKVPool"):
                return (PhaseMark(Phase.KV_ALLOCATE, self._pool_model(rank)),)
            if msg.startswith("Initialization failed"):
                return (FailureText(msg, None, fatal=True, specificity=2),)
            return None
        if c == "K":
            if msg.startswith("KV Cache is allocated") or msg.startswith("KV Cache VA upper bound"):
                return self._kv_line(msg, rank)
            return None
        if c == "M":
            if msg.startswith("Memory pool end"):
                st = self._rank_state(rank)
                model = DRAFT if st.pool_ended else TARGET
                st.pool_ended = True
                ev = [_pm(Phase.KV_ALLOCATE, model, True)]
                v = _float_re(_AVAIL_RE, msg)
                if v is not None:
                    ev.append(Metric("avail_after_pool_gib", v, model))
                return tuple(ev)
            if msg.startswith("Memory baseline taken"):
                ev = [_pm(Phase.INIT, TARGET, True)]
                v = _float_re(_MEMUSE_RE, msg)
                if v is not None:
                    ev.append(Metric("init_mem_usage_gib", v))
                return (*ev, *self._note_era("0.5.23"))
            if msg.startswith("Mamba Cache is allocated"):
                model = self._pool_model(rank)
                ev = [_pm(Phase.KV_ALLOCATE, model)]
                conv = _num_after(msg, "conv_state size: ")
                ssm = _num_after(msg, "ssm_state size: ")
                if conv is not None or ssm is not None:
                    ev.append(Metric("mamba_cache_gib", (conv or 0.0) + (ssm or 0.0), model))
                n = _int_after(msg, "max_mamba_cache_size: ")
                if n is not None:
                    ev.append(Metric("mamba_cache_size", float(n), model))
                return tuple(ev)
            if msg.startswith("Max running requests is reset"):
                return (Warning_(msg),)
            return None
        if c == "m":
            if msg.startswith("max_total_num_tokens="):
                return self._summary(msg)
            if msg.startswith("max_total_tokens=") and "larger than the profiled value" in msg:
                return (Warning_(msg),)
            if msg.startswith("max_running_requests was reduced"):
                return (Warning_(msg),)
            return None
        if c == "U":
            if msg.startswith("Use sliding window memory pool") or msg.startswith("Use Sliding window memory pool"):
                st = self._rank_state(rank)
                model = self._pool_model(rank)
                if model is TARGET:
                    st.hybrid = True
                ev = [_pm(Phase.KV_ALLOCATE, model)]
                full = _int_after(msg, "full_layer_tokens=")
                swa = _int_after(msg, "swa_layer_tokens=")
                if full is not None:
                    ev.append(Metric("full_tokens", float(full), model))
                if swa is not None:
                    ev.append(Metric("swa_tokens", float(swa), model))
                return tuple(ev)
            if msg.startswith("Using KV cache dtype"):
                return (PhaseMark(Phase.KV_ALLOCATE, self._pool_model(rank)),)
            return None
        if c == "S":
            if msg.startswith("SWAKVPool mem usage"):
                model = self._pool_model(rank)
                ev = [_pm(Phase.KV_ALLOCATE, model)]
                v = _num_after(msg, "mem usage: ")
                if v is not None:
                    ev.append(Metric("swa_kv_gib", v, model))
                n = _int_after(msg, "swa size: ")
                if n is not None:
                    ev.append(Metric("swa_tokens", float(n), model))
                n = _int_after(msg, "full size: ")
                if n is not None:
                    ev.append(Metric("full_tokens", float(n), model))
                return tuple(ev)
            if msg.startswith("Scheduler hit an exception"):
                # the exception text follows; the main process's `Received sigquit` is the fatal line
                return (FailureText(msg, None, fatal=False, specificity=1),)
            if msg.startswith("SIGQUIT received"):
                return (FailureText(msg, None, fatal=True, specificity=0),)
            if msg.startswith("Subprocess ") and "crashed with exit code" in msg:
                return (FailureText(msg, None, fatal=True, specificity=1),)
            if msg.startswith("SGLang") or msg.startswith("SGLANG"):
                return self._version_line(msg)
            if msg.startswith("SWA KV Cache is allocated") or msg.startswith("SWA KV Cache VA upper bound"):
                return self._kv_line(msg, rank)  # 0.5.23 labels a hybrid model's pools `Full` / `SWA`
            return None
        if c == "D":
            if msg.startswith("DSV4 ") or msg.startswith("DSv4 "):
                return self._dsv4(msg, rank)
            if msg.startswith("Disable ") and "CUDA graph" in msg[:40]:
                # `Disable prefill CUDA graph because …` (0.5.1x+): the boot goes on without it
                return (Warning_(msg),)
            if msg.startswith("Draft model loaded"):
                ev = [_pm(Phase.LOAD_WEIGHTS, DRAFT, True)]
                v = _float_re(_MEMUSE_RE, msg)
                if v is not None:
                    ev.append(Metric("weights_gib", v, DRAFT))
                return tuple(ev)
            return None
        if c == "T":
            if msg.startswith("The server is fired up and ready to roll"):
                return (_pm(Phase.READY, TARGET),)
            if msg.startswith("The memory capacity is unbalanced"):
                return (Warning_(msg, FailureKind.GPU_BUSY),)
            return None
        if c == "R":
            if msg.startswith("Received sigquit"):
                return (FailureText(msg, None, fatal=True, specificity=0),)
            if msg.startswith("Rank ") and "died during initialization" in msg:
                code = _EXIT_CODE_RE.search(msg)
                hint = None
                if code is not None and code.group(1) == "-9":
                    hint = (
                        "a scheduler was killed with SIGKILL (-9) during start-up: most likely the host's "
                        "OOM killer (host RAM, not GPU memory) - check `dmesg -T | grep -i oom`"
                    )
                return (FailureText(msg, None, fatal=True, specificity=2, hint=hint),)
            return None
        if c == "s":
            if msg.startswith("server_args="):
                return self._server_args(msg[12:])
            return None
        if c == "P":
            if msg.startswith("Post-capture KV sizing"):
                return self._post_capture(msg, rank)
            return None
        if c == "N":
            if msg.startswith("Not enough memory"):
                return _not_enough(msg)
            return None
        if c == "F" and msg.startswith("Failed to get GPU memory capacity from nvidia-smi"):
            # `… Reported total GPU memory per device (MiB): [124546], using min: 124546 MiB.`
            v = _num_after(msg, "using min: ")
            return (Metric("gpu_total_gib", round(v / 1024, 4)),) if v is not None else (Warning_(msg),)
        # (`Full KV Cache is allocated`, 0.5.23, is the labelled pool line below)
        if c == "A":
            if msg.startswith("Allocating ") and "host memory for hierarchical" in msg:
                # HiCache: the host pool (CPU RAM) behind the GPU KV pool
                v = _num_after(msg, "Allocating ")  # decimal GB here (bytes / 1e9)
                return (Metric("hicache_host_gib", round(v * 1e9 / (1 << 30), 4)),) if v is not None else ()
            return None
        if c == "H":
            if msg.startswith("HiCache auto-sizing") or msg.startswith("HiCache memory headroom"):
                return (Warning_(msg),)
            return None
        # a pool label in front: `{label} KV Cache is allocated. …` (0.5.23)
        if "KV Cache is allocated" in msg:
            return self._kv_line(msg, rank)
        return None

    def _post_capture(self, msg: str, rank: str | None) -> tuple[LogEvent, ...]:
        """0.5.23 post-capture KV sizing: the pool is sized after the graphs (not a failure)."""
        body = msg[len("Post-capture KV sizing: "):]
        if body.startswith("KV cache allocated"):
            return self._kv_line(msg, rank)
        if body.startswith("draft KV cache allocated"):
            ev: list[LogEvent] = [_pm(Phase.KV_ALLOCATE, DRAFT)]
            tokens = _TOKENS_RE.search(msg)
            if tokens is not None:
                ev.append(Metric("kv_tokens", float(tokens.group(1)), DRAFT))
            v = _float_re(_KV_SIZE_RE, msg)
            if v is not None:
                ev.append(Metric("kv_cache_gib", v, DRAFT))
            return tuple(ev)
        if body.startswith("full_layer_tokens="):
            ev = []
            full = _int_after(body, "full_layer_tokens=")
            swa = _int_after(body, "swa_layer_tokens=")
            if full is not None:
                ev.append(Metric("full_tokens", float(full)))
            if swa:
                ev.append(Metric("swa_tokens", float(swa)))
            return tuple(ev)
        return (Warning_(msg),)  # max_running_requests capped, KV-canary workspace, max_bs below …

    def _pool_model(self, rank: str | None) -> Model:
        st = self._ranks.get(rank or "")
        return DRAFT if st is not None and st.pool_ended else TARGET

    def _server_args(self, dump: str) -> tuple[LogEvent, ...]:
        # a new boot: forget the previous boot's per-rank state
        self.reset()
        values = parse_server_args(dump)
        ev: list[LogEvent] = [BootBoundary(BoundaryKind.STARTED, new_args=True), _pm(Phase.LAUNCH, TARGET)]
        ev.append(Flags(values))
        if dump.lstrip().startswith("{"):
            ev.extend(self._note_era("0.5.23"))
        return tuple(ev)

    def _version_line(self, msg: str) -> tuple[LogEvent, ...]:
        m = _SGL_VERSION_RE.search(msg)
        return (VersionHint(m.group(1)),) if m else ()

    def _kv_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...]:
        st = self._rank_state(rank)
        if msg.startswith("Post-capture"):
            # 0.5.23 post-capture sizing: the target's real pool, sized after its graphs (engines.md 2.2)
            model = TARGET
        elif st.pool_ended:
            model = DRAFT
        elif st.kv_lines >= 1 and self._draft_load_seen and not st.hybrid:
            # 0.4.10 prints `Memory pool end` on TP0 only: a second pool with the draft loading
            model = DRAFT
        else:
            model = TARGET
        ev: list[LogEvent] = [_pm(Phase.KV_ALLOCATE, model)]
        tokens = _TOKENS_RE.search(msg)
        m = _K_V_RE.search(msg)
        kv = float(m.group(1)) + float(m.group(2)) if m is not None else _float_re(_KV_SIZE_RE, msg)
        if "upper bound" in msg:  # a virtual reservation, not the pool
            return (*ev, *self._note_era("0.5.23"))
        if model is TARGET:
            st.kv_lines += 1
        if tokens is not None:
            ev.append(Metric("kv_tokens", float(tokens.group(1)), model))
        if kv is not None:
            ev.append(Metric("kv_cache_gib", kv, model))
        if "dtype: " in msg[:40]:
            ev.extend(self._note_era("0.5.13"))
        return tuple(ev)

    def _dsv4(self, msg: str, rank: str | None) -> tuple[LogEvent, ...]:
        model = self._pool_model(rank)
        ev: list[LogEvent] = [_pm(Phase.KV_ALLOCATE, model)]
        body = msg[5:]
        kv = {k: float(v) for k, v in _KEYVAL_RE.findall(body)}
        if body.startswith("memory calculation"):
            if "bytes_per_full_token" in kv:
                ev.append(Metric("dsv4_bytes_per_full_token", kv["bytes_per_full_token"], model))
            avail = kv.get("effective_available_bytes", kv.get("available_bytes"))
            if avail is not None:
                ev.append(Metric("dsv4_available_gib", avail, model))
            if "full_token" in kv:
                ev.append(Metric("dsv4_full_token", kv["full_token"], model))
            for key in ("c128_state_fixed", "swa_fixed", "c128_state_fixed_overhead", "hisparse_fixed_overhead"):
                if key in kv:
                    ev.append(Metric("dsv4_" + key + "_gib", kv[key], model))
        elif body.startswith("pool sizes"):
            if "full" in kv:
                ev.append(Metric("full_tokens", kv["full"], model))
            if "swa" in kv:
                ev.append(Metric("swa_tokens", kv["swa"], model))
        return tuple(ev)

    def _summary(self, msg: str) -> tuple[LogEvent, ...]:
        ev: list[LogEvent] = []
        self._capturing = False
        names = {
            "max_total_num_tokens": "max_total_num_tokens",
            "chunked_prefill_size": "chunked_prefill_size",
            "max_prefill_tokens": "max_prefill_tokens",
            "max_running_requests": "max_running_requests",
            "context_len": "context_len",
            "available_gpu_mem": "available_gpu_mem_gib",
        }
        for key, value in _KEYVAL_RE.findall(msg):
            name = names.get(key)
            if name is not None:
                ev.append(Metric(name, float(value)))
        return tuple(ev)

    def _capture(self, msg: str, rank: str | None) -> tuple[LogEvent, ...]:
        head = msg[:64]
        model = DRAFT if msg.startswith("Capture draft") else TARGET
        if " failed" in head:
            # `Capture cuda graph failed: <exc>` (also inside `Exception: …`)
            return self._capture_failed(msg)
        ev: list[LogEvent] = []
        is_begin = " begin" in head
        is_end = " end" in head
        if is_begin:
            self._capture_model = model
            self._capturing = True
            ev.append(_pm(Phase.GRAPH_CAPTURE, model))
            v = _float_re(_AVAIL_RE, msg)
            if v is not None:
                ev.append(Metric("graph_begin_avail_gib", v, model))
            if "num_tokens_per_req" in msg:
                ev.extend(self._note_era("0.5.16"))
            elif "num_tokens_per_bs" in msg:
                ev.extend(self._note_era("0.5.14"))
        elif is_end:
            self._capturing = False
            secs = _float_re(_ELAPSED_RE, msg)
            ev.append(PhaseMark(Phase.GRAPH_CAPTURE, model, end=True, seconds=secs))
            v = _float_re(_MEMUSE_RE, msg)
            if v is not None:
                ev.append(Metric("graph_mem_gib", v, model))
            v = _float_re(_AVAIL_RE, msg)
            if v is not None:
                ev.append(Metric("avail_after_graph_gib", v, model))
            if "bs=[" in msg:
                ev.extend(self._note_era("0.5.23"))
        else:
            # `Capture cuda graph bs [1, 2, 4, …]` / `Capture cuda graph num tokens […]`
            model = self._capture_model
            ev.append(_pm(Phase.GRAPH_CAPTURE, model))
        if "num tokens" in head or "prefill" in head or "piecewise" in head:
            return tuple(ev)  # token-count lists are not decode batch sizes
        m = _BS_LIST_RE.search(msg)
        if m is not None:
            sizes = [int(x) for x in m.group(1).replace(",", " ").split() if x.isdigit()]
            if sizes:
                ev.append(Metric("capture_bs_max", float(max(sizes)), model))
                ev.append(Metric("capture_bs_count", float(len(sizes)), model))
                ev.append(CaptureSizes(tuple(sizes), model))
        return tuple(ev)

    def _capture_failed(self, msg: str) -> tuple[LogEvent, ...]:
        self._capturing = False
        # the phase decides the kind: an OOM in capture is oom_graph_capture, anything else a crash
        ev: list[LogEvent] = [_inferred(Phase.GRAPH_CAPTURE), FailureText(msg, None, specificity=3)]
        ev.extend(oom_metrics(msg))
        return tuple(ev)

    # ---- failures in prefixed lines -----------------------------------------------------------
    def _failure_line(self, msg: str) -> tuple[LogEvent, ...]:
        if not (
            "rror" in msg
            or "NCCL" in msg
            or "out of memory" in msg
            or "Exception" in msg
            or "Capture" in msg
            or "unbalanced" in msg
        ):
            return self._version_line(msg) if "SGLang" in msg else ()
        if "Capture cuda graph failed" in msg or "CUDA graph failed" in msg:
            return self._capture_failed(msg)
        if "memory capacity is unbalanced" in msg:
            return (Warning_(msg, FailureKind.GPU_BUSY),)
        return generic_failure(msg)

    # ---- lines without the SGLang prefix (tqdm, tracebacks, third-party output) ---------------
    def _unprefixed(self, msg: str) -> tuple[LogEvent, ...]:
        c = msg[:1]
        if (c == " " or c == "F") and 'File "' in msg[:12]:
            # a traceback frame: where on the startup stack it failed (used by fragments only)
            phase = frame_phase(msg)
            return (_inferred(phase),) if phase is not None else ()
        if c == "C":
            if msg.startswith("Capturing batches") or msg.startswith("Capturing num tokens"):
                return self._capture_progress(msg)
        elif c == "L" or c == "M":
            if "shards:" in msg[:40] and (msg.startswith("Loading ") or msg.startswith("Multi-thread loading")):
                m = _PROGRESS_RE.search(msg)
                if m is not None:
                    return (Progress(Phase.LOAD_WEIGHTS, int(m.group(1)), int(m.group(2)), self._load_model, "shards"),)
                return ()
        elif c == "S" and msg.startswith("SGLang"):
            return self._version_line(msg)
        if self._capturing and "%|" in msg and ("it/s]" in msg or "s/it]" in msg):
            # a bare tqdm bar (no description) while a capture runs (0.4.x)
            return self._bare_progress(msg)
        if "Capture cuda graph failed" in msg or "CUDA graph failed" in msg:
            return self._capture_failed(msg)
        if c == "S" and msg.startswith("Scheduler hit an exception"):  # its prefix cut off (a fragment)
            return (FailureText(msg, None, fatal=False, specificity=1),)
        if c == "R" and msg.startswith("Received sigquit from a child"):
            return (FailureText(msg, None, fatal=True, specificity=0),)
        if ": error: " in msg:
            ft = _cli_error_of(msg)
            if ft is not None:
                # argparse refused the command line: a boot that ends before it began
                self.reset()
                return (BootBoundary(BoundaryKind.STARTED, new_args=True), _pm(Phase.LAUNCH, TARGET), ft)
        if "memory capacity is unbalanced" in msg and ("Error" in msg or "Exception" in msg):
            return (FailureText(msg, FailureKind.GPU_BUSY, specificity=3),)
        if ("Not enough memory" in msg and "mem-fraction-static" in msg) or "Loaded weights leave no GPU memory" in msg:
            # the pool sizing step raised: the boot is in kv_allocate
            return _not_enough(msg)
        return generic_failure(msg)

    def _capture_progress(self, msg: str) -> tuple[LogEvent, ...]:
        model = self._capture_model
        ev: list[LogEvent] = [_pm(Phase.GRAPH_CAPTURE, model)]
        m = _PROGRESS_RE.search(msg)
        label = "batches" if msg.startswith("Capturing batches") else "num tokens"
        if m is not None:
            ev.append(Progress(Phase.GRAPH_CAPTURE, int(m.group(1)), int(m.group(2)), model, label))
        b = _TQDM_BS_RE.search(msg)
        if b is not None:
            if label == "batches":
                ev.append(Metric("capture_bs", float(b.group(1)), model))
            ev.append(Metric("capture_avail_gib", float(b.group(2)), model))
        return tuple(ev)

    def _bare_progress(self, msg: str) -> tuple[LogEvent, ...]:
        m = _PROGRESS_RE.search(msg)
        if m is None:
            return ()
        return (Progress(Phase.GRAPH_CAPTURE, int(m.group(1)), int(m.group(2)), self._capture_model, "batches"),)
