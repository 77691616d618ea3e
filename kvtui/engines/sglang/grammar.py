"""``SglangGrammar``: one SGLang line -> ``ParsedLine`` (see the package docstring).

``parse`` reads the prefix; ``_classify`` sends serving lines (``Decode batch``, ~90 % of a long
log) to ``_serving`` first, then the startup lines to ``_phase_line``, then what is left to
``_failure_line``; unprefixed lines (tqdm bars, tracebacks) go to ``_unprefixed``. Per-rank state
(``_RankState``) decides whether a weight or KV line belongs to the target or the draft model.

Pure core.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

from kvtui.engines.cli_errors import usage_engine
from kvtui.engines.events import (
    BootBoundary,
    BoundaryKind,
    CaptureSizes,
    Engine,
    Fact,
    FailureKind,
    FailureText,
    Flags,
    KvPressure,
    LogEvent,
    Metric,
    Model,
    ParsedLine,
    Phase,
    PhaseMark,
    PressureKind,
    Progress,
    Serving,
    VersionHint,
    Warning_,
)
from kvtui.engines.sglang.args import parse_server_args
from kvtui.engines.sglang.failures import generic_failure, oom_metrics
from kvtui.engines.sglang.patterns import (
    _AVAIL_RE,
    _BS_LIST_RE,
    _ELAPSED_RE,
    _ENGINE_FIELD_RE,
    _ENGINE_GRAPHS_RE,
    _EXIT_CODE_RE,
    _FRAGMENT_RE,
    _K_V_RE,
    _KEYVAL_RE,
    _KNOWN_STARTS,
    _KV_SIZE_RE,
    _LEVEL_RE,
    _MAX_RANK_STATES,
    _MEMUSE_RE,
    _PREFIX_RE,
    _PROGRESS_RE,
    _SGL_VERSION_RE,
    _TOKENS_RE,
    _TP_RE,
    _TQDM_BS_RE,
    DRAFT,
    TARGET,
    _cli_error_of,
    _figure,
    _float_re,
    _inferred,
    _int_after,
    _not_enough,
    _num_after,
    _pm,
    _to_float,
    _to_int,
)
from kvtui.engines.stack import config_exception, frame_config, frame_engine, frame_phase
from kvtui.engines.text import version_key


def _retraction(msg: str) -> KvPressure:
    """`KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 1536,
    #new_token_ratio: 0.7000 -> 0.5500` (0.4.x: no `#new_tokens_gained`; < 0.4: `Decode out of memory
    happened. #retracted_reqs: …`). ``count`` the retracted requests (1 when the line has no figure)."""
    i = msg.find("#retracted_reqs: ")
    n = _to_int(msg[i + 17 : msg.find(",", i + 17) % (len(msg) + 1)]) if i >= 0 else None
    i = msg.find("#new_token_ratio: ")
    detail = "new_token_ratio " + msg[i + 18 :].strip() if i >= 0 else ""
    return KvPressure(PressureKind.RETRACTED, n if n is not None else 1, detail)


# ---------------------------------------------------------------------------------------------
# Per-rank state (which model the KV / weight lines belong to)
# ---------------------------------------------------------------------------------------------


# `DSV4 memory calculation: … c128_state_fixed=X GB …`: the fixed parts of the pool, by key
_DSV4_FIXED: Final = (
    ("c128_state_fixed", Fact.DSV4_C128_STATE_FIXED_GIB),
    ("swa_fixed", Fact.DSV4_SWA_FIXED_GIB),
    ("c128_state_fixed_overhead", Fact.DSV4_C128_STATE_FIXED_OVERHEAD_GIB),
    ("hisparse_fixed_overhead", Fact.DSV4_HISPARSE_FIXED_OVERHEAD_GIB),
)
# the scheduler summary `max_total_num_tokens=…, chunked_prefill_size=…, …`: the figures it names
_SUMMARY_FACTS: Final = {
    "max_total_num_tokens": Fact.MAX_TOTAL_NUM_TOKENS,
    "chunked_prefill_size": Fact.CHUNKED_PREFILL_SIZE,
    "max_prefill_tokens": Fact.MAX_PREFILL_TOKENS,
    "max_running_requests": Fact.MAX_RUNNING_REQUESTS,
    "context_len": Fact.CONTEXT_LEN,
    "available_gpu_mem": Fact.AVAILABLE_GPU_MEM_GIB,
}


class _RankState:
    __slots__ = ("cur_model", "hybrid", "kv_lines", "load_ended", "pool_ended")

    def __init__(self) -> None:
        self.load_ended = False  # a `Load weight end` was seen on this rank
        self.cur_model: Model = TARGET  # the model of the load in progress
        self.pool_ended = False  # the rank's target `Memory pool end` was seen
        self.kv_lines = 0  # target KV pool lines on this rank
        self.hybrid = False  # a sliding-window / hybrid pool: several target KV lines are normal


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
        self._config_frame = False  # the traceback's deepest SGLang frame so far is in ServerArgs' checks

    def reset(self) -> None:
        """Forget the per-boot state (a new boot starts)."""
        self._config_frame = False
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
            if c == "K" and msg.startswith("KV cache pool is full. Retract requests."):
                return (_retraction(msg),)
            if c == "D" and msg.startswith("Decode out of memory"):
                if msg.startswith("Decode out of memory happened."):  # < 0.4: the same retraction
                    return (_retraction(msg),)
                # `Decode out of memory. Try to lower your batch size.` (0.4+): the scheduler fails
                return (KvPressure(PressureKind.DECODE_OOM, 1, msg), *self._failure_line(msg))
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
        i = msg.find("#token: ")  # Decode only (Prefill prints `#new-token`)
        tokens = _to_int(msg[i + 8 : msg.find(",", i + 8) % (len(msg) + 1)]) if i >= 0 else None
        return Serving(token_usage=usage, running_reqs=running, queue_reqs=queued, gen_throughput=gen, tokens=tokens)

    @staticmethod
    def _uvicorn(msg: str) -> tuple[LogEvent, ...]:
        body = msg[5:].lstrip()
        if body.startswith("Started server process") or body.startswith("Uvicorn running on"):
            return (_pm(Phase.HTTP_UP, TARGET),)
        return ()

    # ---- phase lines --------------------------------------------------------------------------
    def _note_era(self, version: str) -> tuple[LogEvent, ...]:
        if self._era is None or version_key(version) > version_key(self._era):
            self._era = version
            return (VersionHint(">=" + version),)
        return ()

    def _phase_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """The events of a prefixed startup line; None when no phase rule knows it (the failure
        rules read it next). The first letter picks the reader (``_PHASE_LINES``, one per family
        of lines); a line no reader is kept for may still be a labelled pool line."""
        reader = _PHASE_LINES.get(msg[:1])
        if reader is not None:
            return reader(self, msg, rank)
        return self._labelled_kv(msg, rank)

    def _labelled_kv(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """A pool label in front: ``{label} KV Cache is allocated. …`` (0.5.23; ``Full …``)."""
        if "KV Cache is allocated" in msg:
            return self._kv_line(msg, rank)
        return None

    def _load_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Load weight begin/end`` (a rank's second load is the draft's); ``Loaded weights leave
        no GPU memory`` (≥ 0.5.18's pool failure)."""
        if msg.startswith("Load weight begin"):
            st = self._rank_state(rank)
            model = DRAFT if st.load_ended else TARGET
            st.cur_model = model
            self._load_model = model
            if model is DRAFT:
                self._draft_load_seen = True
            ev: list[LogEvent] = [_pm(Phase.LOAD_WEIGHTS, model)]
            ev += _figure(_AVAIL_RE, msg, Fact.AVAIL_BEFORE_LOAD_GIB, model)
            return tuple(ev)
        if msg.startswith("Load weight end"):
            st = self._rank_state(rank)
            model = st.cur_model if not st.load_ended or st.cur_model is DRAFT else DRAFT
            st.load_ended = True
            secs = _float_re(_ELAPSED_RE, msg)
            ev = [PhaseMark(Phase.LOAD_WEIGHTS, model, end=True, seconds=secs)]
            if secs is not None:
                ev.append(Metric(Fact.LOAD_SECONDS, secs, model))
            ev += _figure(_AVAIL_RE, msg, Fact.AVAIL_AFTER_LOAD_GIB, model)
            ev += _figure(_MEMUSE_RE, msg, Fact.WEIGHTS_GIB, model)
            return tuple(ev)
        if msg.startswith("Loaded weights leave no GPU memory"):
            return (*_not_enough(msg), *self._note_era("0.5.18"))
        return None

    def _init_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Init torch distributed begin/ends`` (0.5.23: ``Init parallel …``), the DSV4 pool's
        ``Initialize …``, ``Initialization failed``."""
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
            ev: list[LogEvent] = []
            if model is TARGET:
                ev.append(PhaseMark(Phase.INIT, end=True, seconds=secs))
            ev += _figure(_MEMUSE_RE, msg, Fact.INIT_MEM_USAGE_GIB, model)
            return tuple(ev)
        if msg.startswith("Initialize DeepSeekV4TokenToKVPool"):
            return (PhaseMark(Phase.KV_ALLOCATE, self._pool_model(rank)),)
        if msg.startswith("Initialization failed"):
            return (FailureText(msg, None, fatal=True, specificity=2),)
        return None

    def _memory_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Memory pool end`` (a rank's second is the draft's), ``Memory baseline taken`` (0.5.23),
        ``Mamba Cache is allocated``, ``Max running requests is reset``."""
        if msg.startswith("Memory pool end"):
            st = self._rank_state(rank)
            model = DRAFT if st.pool_ended else TARGET
            st.pool_ended = True
            ev: list[LogEvent] = [_pm(Phase.KV_ALLOCATE, model, True)]
            ev += _figure(_AVAIL_RE, msg, Fact.AVAIL_AFTER_POOL_GIB, model)
            return tuple(ev)
        if msg.startswith("Memory baseline taken"):
            ev = [_pm(Phase.INIT, TARGET, True)]
            ev += _figure(_MEMUSE_RE, msg, Fact.INIT_MEM_USAGE_GIB)
            return (*ev, *self._note_era("0.5.23"))
        if msg.startswith("Mamba Cache is allocated"):
            model = self._pool_model(rank)
            ev = [_pm(Phase.KV_ALLOCATE, model)]
            conv = _num_after(msg, "conv_state size: ")
            ssm = _num_after(msg, "ssm_state size: ")
            if conv is not None or ssm is not None:
                ev.append(Metric(Fact.MAMBA_CACHE_GIB, (conv or 0.0) + (ssm or 0.0), model))
            n = _int_after(msg, "max_mamba_cache_size: ")
            if n is not None:
                ev.append(Metric(Fact.MAMBA_CACHE_SIZE, float(n), model))
            return tuple(ev)
        if msg.startswith("Max running requests is reset"):
            return (Warning_(msg),)
        return None

    def _max_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """The pool summary ``max_total_num_tokens=…, …`` and the ``max_…`` warnings."""
        if msg.startswith("max_total_num_tokens="):
            return self._summary(msg)
        if msg.startswith("max_total_tokens=") and "larger than the profiled value" in msg:
            return (Warning_(msg),)
        if msg.startswith("max_running_requests was reduced"):
            return (Warning_(msg),)
        return None

    def _use_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Use sliding window memory pool`` (a hybrid target pool), ``Using KV cache dtype``."""
        if msg.startswith("Use sliding window memory pool") or msg.startswith("Use Sliding window memory pool"):
            st = self._rank_state(rank)
            model = self._pool_model(rank)
            if model is TARGET:
                st.hybrid = True
            ev: list[LogEvent] = [_pm(Phase.KV_ALLOCATE, model)]
            full = _int_after(msg, "full_layer_tokens=")
            swa = _int_after(msg, "swa_layer_tokens=")
            if full is not None:
                ev.append(Metric(Fact.FULL_TOKENS, float(full), model))
            if swa is not None:
                ev.append(Metric(Fact.SWA_TOKENS, float(swa), model))
            return tuple(ev)
        if msg.startswith("Using KV cache dtype"):
            return (PhaseMark(Phase.KV_ALLOCATE, self._pool_model(rank)),)
        return None

    def _s_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``SWAKVPool mem usage`` / ``SWA KV Cache …`` (hybrid pools), the scheduler's failure
        lines (``Scheduler hit an exception``, ``SIGQUIT received``, ``Subprocess … crashed``) and
        the version line."""
        if msg.startswith("SWAKVPool mem usage"):
            model = self._pool_model(rank)
            ev: list[LogEvent] = [_pm(Phase.KV_ALLOCATE, model)]
            v = _num_after(msg, "mem usage: ")
            if v is not None:
                ev.append(Metric(Fact.SWA_KV_GIB, v, model))
            n = _int_after(msg, "swa size: ")
            if n is not None:
                ev.append(Metric(Fact.SWA_TOKENS, float(n), model))
            n = _int_after(msg, "full size: ")
            if n is not None:
                ev.append(Metric(Fact.FULL_TOKENS, float(n), model))
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

    def _d_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``DSV4 …`` pool sizing, ``Disable … CUDA graph`` (a warning), ``Draft model loaded``."""
        if msg.startswith("DSV4 ") or msg.startswith("DSv4 "):
            return self._dsv4(msg, rank)
        if msg.startswith("Disable ") and "CUDA graph" in msg[:40]:
            # `Disable prefill CUDA graph because …` (0.5.1x+): the boot goes on without it
            return (Warning_(msg),)
        if msg.startswith("Draft model loaded"):
            ev: list[LogEvent] = [_pm(Phase.LOAD_WEIGHTS, DRAFT, True)]
            ev += _figure(_MEMUSE_RE, msg, Fact.WEIGHTS_GIB, DRAFT)
            return tuple(ev)
        return None

    def _t_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``The server is fired up and ready to roll``; ``The memory capacity is unbalanced``."""
        if msg.startswith("The server is fired up and ready to roll"):
            return (_pm(Phase.READY, TARGET),)
        if msg.startswith("The memory capacity is unbalanced"):
            return (Warning_(msg, FailureKind.GPU_BUSY),)
        return None

    def _r_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Received sigquit`` and ``Rank N scheduler died during initialization`` (fatal)."""
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

    def _n_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Not enough memory. Please try to increase --mem-fraction-static`` (the pool failed)."""
        if msg.startswith("Not enough memory"):
            return _not_enough(msg)
        return None

    def _f_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Failed to get GPU memory capacity from nvidia-smi … using min: N MiB`` (the GPU's
        total); else perhaps a labelled pool line (``Full KV Cache is allocated``, 0.5.23)."""
        if msg.startswith("Failed to get GPU memory capacity from nvidia-smi"):
            # `… Reported total GPU memory per device (MiB): [124546], using min: 124546 MiB.`
            v = _num_after(msg, "using min: ")
            return (Metric(Fact.GPU_TOTAL_GIB, round(v / 1024, 4)),) if v is not None else (Warning_(msg),)
        return self._labelled_kv(msg, rank)

    def _a_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Allocating N GB host memory for hierarchical caching`` (HiCache's CPU pool)."""
        if msg.startswith("Allocating ") and "host memory for hierarchical" in msg:
            # HiCache: the host pool (CPU RAM) behind the GPU KV pool
            v = _num_after(msg, "Allocating ")  # decimal GB here (bytes / 1e9)
            return (Metric(Fact.HICACHE_HOST_GIB, round(v * 1e9 / (1 << 30), 4)),) if v is not None else ()
        return None

    def _h_line(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """HiCache's sizing notes (warnings)."""
        if msg.startswith("HiCache auto-sizing") or msg.startswith("HiCache memory headroom"):
            return (Warning_(msg),)
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
                ev.append(Metric(Fact.KV_TOKENS, float(tokens.group(1)), DRAFT))
            ev += _figure(_KV_SIZE_RE, msg, Fact.KV_CACHE_GIB, DRAFT)
            return tuple(ev)
        if body.startswith("full_layer_tokens="):
            ev = []
            full = _int_after(body, "full_layer_tokens=")
            swa = _int_after(body, "swa_layer_tokens=")
            if full is not None:
                ev.append(Metric(Fact.FULL_TOKENS, float(full)))
            if swa:
                ev.append(Metric(Fact.SWA_TOKENS, float(swa)))
            return tuple(ev)
        return (Warning_(msg),)  # max_running_requests capped, KV-canary workspace, max_bs below …

    def _pool_model(self, rank: str | None) -> Model:
        st = self._ranks.get(rank or "")
        return DRAFT if st is not None and st.pool_ended else TARGET

    def _server_args(self, msg: str, rank: str | None) -> tuple[LogEvent, ...]:
        """``server_args=…``: a new boot."""
        dump = msg[12:]
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
            ev.append(Metric(Fact.KV_TOKENS, float(tokens.group(1)), model))
        if kv is not None:
            ev.append(Metric(Fact.KV_CACHE_GIB, kv, model))
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
                ev.append(Metric(Fact.DSV4_BYTES_PER_FULL_TOKEN, kv["bytes_per_full_token"], model))
            avail = kv.get("effective_available_bytes", kv.get("available_bytes"))
            if avail is not None:
                ev.append(Metric(Fact.DSV4_AVAILABLE_GIB, avail, model))
            if "full_token" in kv:
                ev.append(Metric(Fact.DSV4_FULL_TOKEN, kv["full_token"], model))
            for key, fact in _DSV4_FIXED:
                if key in kv:
                    ev.append(Metric(fact, kv[key], model))
        elif body.startswith("pool sizes"):
            if "full" in kv:
                ev.append(Metric(Fact.FULL_TOKENS, kv["full"], model))
            if "swa" in kv:
                ev.append(Metric(Fact.SWA_TOKENS, kv["swa"], model))
        return tuple(ev)

    def _summary(self, msg: str) -> tuple[LogEvent, ...]:
        ev: list[LogEvent] = []
        self._capturing = False
        for key, value in _KEYVAL_RE.findall(msg):
            name = _SUMMARY_FACTS.get(key)
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
            ev += _figure(_AVAIL_RE, msg, Fact.GRAPH_BEGIN_AVAIL_GIB, model)
            if "num_tokens_per_req" in msg:
                ev.extend(self._note_era("0.5.16"))
            elif "num_tokens_per_bs" in msg:
                ev.extend(self._note_era("0.5.14"))
        elif is_end:
            self._capturing = False
            secs = _float_re(_ELAPSED_RE, msg)
            ev.append(PhaseMark(Phase.GRAPH_CAPTURE, model, end=True, seconds=secs))
            ev += _figure(_MEMUSE_RE, msg, Fact.GRAPH_MEM_GIB, model)
            ev += _figure(_AVAIL_RE, msg, Fact.AVAIL_AFTER_GRAPH_GIB, model)
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
                ev.append(Metric(Fact.CAPTURE_BS_MAX, float(max(sizes)), model))
                ev.append(Metric(Fact.CAPTURE_BS_COUNT, float(len(sizes)), model))
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
        if "context length" in msg and ("model's context length" in msg or "model's maximum context length" in msg):
            # tokenizer_manager's length check: `The input (N tokens) is longer than the model's context
            # length (M tokens).` / `Requested token count … exceeds the model's (maximum) context length`
            return (KvPressure(PressureKind.LENGTH_REFUSED, 1, msg),)
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
            if frame_engine(msg) is not None:
                self._config_frame = frame_config(msg)
            phase = frame_phase(msg)
            return (_inferred(phase),) if phase is not None else ()
        if self._config_frame and config_exception(msg):
            # ServerArgs refused the configuration: a boot that ends before it began (SGLang checks
            # its arguments before it prints them)
            self.reset()
            return (BootBoundary(BoundaryKind.STARTED, new_args=True), _pm(Phase.LAUNCH, TARGET),
                    FailureText(msg, FailureKind.BAD_ARGS, fatal=True, specificity=3))
        if c == "T" and msg.startswith("Traceback (most recent call last)"):
            self._config_frame = False
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
                ev.append(Metric(Fact.CAPTURE_BS, float(b.group(1)), model))
            ev.append(Metric(Fact.CAPTURE_AVAIL_GIB, float(b.group(2)), model))
        return tuple(ev)

    def _engine_timings(self, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        """``Engine startup timings (s): load_weight=%.2f, kv_cache_allocation=%.2f,
        scheduler_e2e=%.2f, cuda_graph={prefill=%.2f, …, draft_extend=%.2f}, tokenizer_e2e=%.2f``
        (``entrypoints/engine.py: _set_startup_time``, ≥ 0.5.17): SGLang's own phase durations, the
        slowest scheduler rank's. The graph kinds named ``draft_*`` are the draft model's."""
        graphs = _ENGINE_GRAPHS_RE.search(msg)
        rest = msg if graphs is None else msg[: graphs.start()] + msg[graphs.end() :]
        fields = dict(_ENGINE_FIELD_RE.findall(rest))
        ev: list[LogEvent] = [Metric(fact, float(fields[key])) for key, fact in _ENGINE_TIMINGS if key in fields]
        if graphs is not None:
            sums = {TARGET: 0.0, DRAFT: 0.0}
            seen: set[Model] = set()
            for name, value in _ENGINE_FIELD_RE.findall(graphs.group(1)):
                model = DRAFT if name.startswith("draft_") else TARGET
                sums[model] += float(value)
                seen.add(model)
            # a server without a draft prints its draft_* kinds as 0.00: no draft figure then
            ev += [Metric(Fact.ENGINE_CUDA_GRAPH_SECONDS, round(sums[m], 2), m) for m in (TARGET, DRAFT)
                   if m in seen and (m is TARGET or sums[m] > 0)]
        return tuple(ev) if ev else None

    def _bare_progress(self, msg: str) -> tuple[LogEvent, ...]:
        m = _PROGRESS_RE.search(msg)
        if m is None:
            return ()
        return (Progress(Phase.GRAPH_CAPTURE, int(m.group(1)), int(m.group(2)), self._capture_model, "batches"),)


_PhaseReader = Callable[[SglangGrammar, str, str | None], tuple[LogEvent, ...] | None]

# ``Engine startup timings (s): …`` (``SglangGrammar._engine_timings``): its fields and their facts
_ENGINE_TIMINGS: Final = (
    ("load_weight", Fact.ENGINE_LOAD_WEIGHT_SECONDS),
    ("kv_cache_allocation", Fact.ENGINE_KV_ALLOCATION_SECONDS),
    ("scheduler_e2e", Fact.ENGINE_SCHEDULER_SECONDS),
    ("tokenizer_e2e", Fact.ENGINE_STARTUP_SECONDS),
)


def _only(prefixes: tuple[str, ...], reader: _PhaseReader) -> _PhaseReader:
    """The reader of a family of one line shape: ``reader`` for a line that starts with one of
    ``prefixes``, None (no phase line) for any other line of that first letter."""

    def read(g: SglangGrammar, msg: str, rank: str | None) -> tuple[LogEvent, ...] | None:
        return reader(g, msg, rank) if msg.startswith(prefixes) else None

    return read


# the reader of a prefixed startup line, by its first letter (``SglangGrammar._phase_line``)
_PHASE_LINES: Final[dict[str, _PhaseReader]] = {
    "C": _only(("Capture ",), SglangGrammar._capture),
    "L": SglangGrammar._load_line,
    "I": SglangGrammar._init_line,
    "K": _only(("KV Cache is allocated", "KV Cache VA upper bound"), SglangGrammar._kv_line),
    "M": SglangGrammar._memory_line,
    "m": SglangGrammar._max_line,
    "U": SglangGrammar._use_line,
    "S": SglangGrammar._s_line,
    "D": SglangGrammar._d_line,
    "T": SglangGrammar._t_line,
    "R": SglangGrammar._r_line,
    "s": _only(("server_args=",), SglangGrammar._server_args),
    "P": _only(("Post-capture KV sizing",), SglangGrammar._post_capture),
    "N": SglangGrammar._n_line,
    "F": SglangGrammar._f_line,
    "A": SglangGrammar._a_line,
    "H": SglangGrammar._h_line,
    "E": _only(("Engine startup timings",), SglangGrammar._engine_timings),
}
