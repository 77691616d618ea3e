"""``VllmGrammar``: one vLLM log line -> ``ParsedLine`` (see the package docstring for the line
anatomy and the notes for the tracker).

``parse`` reads the prefix (process tags, level, year-less stamp, ``[file:line]``), then the
message's first word picks a handler from ``_DISPATCH`` (``_on_<word>``); each handler matches
the regexes of ``kvtui.engines.vllm.patterns`` and returns the line's events.

Pure core.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

from kvtui.engines.cli_errors import usage_engine
from kvtui.engines.events import (
    PHASE_RANK,
    BootBoundary,
    BoundaryKind,
    CaptureSizes,
    Engine,
    Fact,
    FailureKind,
    FailureText,
    Flags,
    LogEvent,
    Metric,
    ParsedLine,
    Phase,
    PhaseMark,
    Progress,
    VersionHint,
    Warning_,
    WorkerNode,
)
from kvtui.engines.stack import config_exception, frame_config, frame_engine, frame_phase
from kvtui.engines.text import strip_ansi
from kvtui.engines.vllm.args import _CONFIG_KEYS, parse_arg_dict, parse_kv_args
from kvtui.engines.vllm.patterns import (
    _ASSIGNED_RE,
    _BANNER_RE,
    _BLOCKS_RE,
    _CACHE_INFO_BLOCKS_RE,
    _CAPTURE_SIZES_RE,
    _CAPTURE_TQDM_RE,
    _COMPILE_TOOK_RE,
    _CONCURRENCY_RE,
    _CONFIG_RE,
    _CPU_KV_RE,
    _DP_IN_NAME,
    _EST_GRAPH_RE,
    _FRAGMENT_RE,
    _FREE_INFO_RE,
    _FREE_MEM_RE,
    _GRAPH_DONE_RE,
    _GRAPH_POOL_RE,
    _HEAD_RE,
    _HINT_PROFILING,
    _HINT_SAMPLER,
    _INFERRED,
    _INIT_COMPILE_RE,
    _INIT_ENGINE_RE,
    _KNOWN_RE,
    _KV_HINT_RE,
    _KV_MEM_RE,
    _KV_SIZE_RE,
    _LOAD_TOOK_RE,
    _LOGO_VERSION_RE,
    _MAX_MODEL_LEN_RE,
    _MIN_REUSE,
    _MODEL_TOOK_RE,
    _NCCL_RE,
    _NONE,
    _OOM_RE,
    _PM,
    _REPEATED_RE,
    _SECS,
    _SHARDS_RE,
    _SHM_WAIT_RE,
    _SNIFF_RE,
    _SNIFF_SHARED,
    _STAMP_SLACK,
    _START,
    _TAG_RE,
    _TOO_SMALL_RE,
    _TP_IN_NAME,
    _UTIL_EQ_RE,
    _UVICORN_LEVELS,
    _V0_PROFILE_KV_RE,
    _V0_PROFILE_TOTAL_RE,
    _V0_TOO_SMALL_RE,
    _V0_WEIGHTS_RE,
    _V08_REST_RE,
    _V08_TOTAL_RE,
    VLLM_HINTS,
    Events,
    _cli_error_of,
    _dated,
    _f,
    _oom_metrics,
    _serving,
    _with_text,
)

# --------------------------------------------------------------------------------------------
# The grammar
# --------------------------------------------------------------------------------------------
_Handler = Callable[["VllmGrammar", str], Events]
_Tag = tuple[str, tuple[str, str | None], int | None]  # rank, (pid, ip) key, tp


class VllmGrammar:
    """Reads one vLLM log line at a time. Stateful per boot; call ``reset()`` between boots.

    ``clock`` gives "now" (naive local time) for the year of year-less stamps when the line has
    no wrapper timestamp; inject it in tests.
    """

    engine = Engine.VLLM

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock: Callable[[], datetime] = clock or datetime.now
        self._tags: dict[str, _Tag] = {}
        self._stamp_key = ""
        self._stamp_wrap: datetime | None = None
        self._stamp_val: datetime | None = None
        self._min_key = "\x00"  # "MM-DD HH:MM" of the minute cached in _min_base
        self._min_wrap: datetime | None = None
        self._min_base: datetime | None = None  # that minute at :00, or None: use the wrapper's ts
        self._offset: timedelta | None = None
        self.reset()

    # -- state ------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget per-boot state (learned worker ranks, flags already seen, phase reached)."""
        self._pid_tp: dict[tuple[str, str | None], int] = {}
        self._flags_seen: dict[str, object] = {}
        self._phase_rank = -1
        self._cur_key: tuple[str, str | None] | None = None
        self._cur_tp: int | None = None
        self._shm_waits: dict[tuple[str, str | None] | None, int] = {}  # process -> its waits in a row
        self._new_workers: list[LogEvent] = []  # Ray workers whose tag was first read on this line
        self._tags.clear()
        self._config_frame = False  # the traceback's deepest vLLM frame so far is in its argument / config checks

    def sniff(self, text: str) -> bool:
        """Cheap: is this line recognisably vLLM (a process tag, or vLLM's level/stamp/file head)?"""
        if "\x1b" in text:
            text = strip_ansi(text)
        m = _SNIFF_RE.match(text)
        if m is None:
            if text.startswith("usage: "):
                return usage_engine(text) is Engine.VLLM
            if 'File "' in text:
                return frame_engine(text) is Engine.VLLM
            if _FRAGMENT_RE.match(text) is not None:
                return True
            return ": error: " in text and _cli_error_of(text) is not None
        if text.startswith("("):
            return True
        rest = text[m.end():]
        return not rest.startswith(_SNIFF_SHARED)

    # -- the line ---------------------------------------------------------------------------
    def parse(self, text: str, ts: datetime | None = None) -> ParsedLine:
        if "\x1b" in text:
            text = strip_ansi(text)
        if text and text[-1] in "\r\n\t ":
            text = text.rstrip()
        rank: str | None = None
        tp: int | None = None
        recognised = False
        self._cur_key = None
        pos = 0
        while text.startswith("(", pos):
            end = text.find(")", pos, pos + 120)
            if end < 0:
                break
            tag = text[pos:end + 1]
            info = self._tags.get(tag)
            if info is None:
                info = self._read_tag(tag)
                if info is None:
                    break
            rank, key, tp = info
            recognised = True
            self._cur_key = key
            if tp is None:
                tp = self._pid_tp.get(key)
            pos = end + 1
            while pos < len(text) and text[pos] == " ":
                pos += 1
        self._cur_tp = tp
        level: str | None = None
        when = ts
        m = _HEAD_RE.match(text, pos)
        if m is not None:
            level = m.group(1)
            recognised = True
            when = self._stamp(m.group(2), ts)
            msg = text[m.end():]
        else:
            msg = text[pos:] if pos else text
            if msg.startswith(_UVICORN_LEVELS):
                c = msg.index(":")
                level = msg[:c]
                msg = msg[c + 1:].lstrip()
        if msg.endswith("cluster]") and "[repeated " in msg:
            msg = _REPEATED_RE.sub("", msg)
        if self._shm_waits and self._cur_key in self._shm_waits and not msg.startswith("No available "):
            del self._shm_waits[self._cur_key]  # the process printed something else: its wait is over
        events = self._classify(msg, level) if msg else _NONE
        if self._cur_tp is not None:
            tp = self._cur_tp
        # positional: several times cheaper than keywords on the hot path (field order is the contract's)
        parsed = ParsedLine(msg, when, rank, tp, level, Engine.VLLM if (recognised or events) else None, events,
                            None, level is not None)
        if not events and level is not None and _KNOWN_RE.match(msg) is not None:
            parsed.known = True
        if self._new_workers:
            parsed.events = (*events, *self._new_workers)
            self._new_workers.clear()
        return parsed

    def _read_tag(self, tag: str) -> _Tag | None:
        m = _TAG_RE.fullmatch(tag)
        if m is None:
            return None
        name, rank_no, pid, ip = m.group(1) or "", m.group(2), m.group(3), m.group(4)
        tp: int | None = None
        key = (pid, ip)  # a worker's TP index may be learned from its "… is assigned as … TP rank N" line
        tp_m = _TP_IN_NAME.search(name)
        if tp_m is not None:
            rank = name
            tp = int(tp_m.group(1))
        elif name in ("APIServer", "EngineCore") or _DP_IN_NAME.search(name) or re.search(r"_\d+$", name):
            rank = name  # one process per name: APIServer, EngineCore, EngineCore_DP0, EngineCore_0, ApiServer_1
        elif rank_no is not None:
            rank = f"{name} rank={rank_no}"
            tp = int(rank_no)
        else:
            # pid-named workers (Worker, VllmWorkerProcess, RayWorkerWrapper, Ray's bare "(pid=…)")
            base = "RayWorkerWrapper" if name in ("", "RayWorkerWrapper") else name
            rank = f"{base} pid={pid}" + (f" ip={ip}" if ip else "")
            if base == "RayWorkerWrapper":
                self._new_workers.append(WorkerNode(ip or None, rank))
        info: _Tag = (rank, key, tp)
        if len(self._tags) > 4096:
            self._tags.clear()
        self._tags[tag] = info
        return info

    # -- time -------------------------------------------------------------------------------
    def _stamp(self, key: str, wrap: datetime | None) -> datetime | None:
        """The line's time from its year-less stamp ``key`` ("MM-DD HH:MM:SS") and the wrapper's."""
        if key == self._stamp_key and wrap is self._stamp_wrap:
            return self._stamp_val
        # the same minute as the last computed stamp (and a wrapper of the same kind, near the one
        # that minute was placed with): only the seconds differ
        mw = self._min_wrap
        if key.startswith(self._min_key) and (
            (wrap is None and mw is None)
            or (wrap is not None and mw is not None and wrap.tzinfo == mw.tzinfo and abs(wrap - mw) < _MIN_REUSE)
        ):
            base = self._min_base
            ss = key[12:14]
            if base is None:
                val = wrap
            elif ss.isdigit() and int(ss) < 62:
                val = base + _SECS[int(ss)]
            else:
                val = wrap
        else:
            val = self._compute_stamp(key, wrap)
            self._min_key = key[:11]
            self._min_wrap = wrap
            ss = key[12:14]
            if val is None or val is wrap or not ss.isdigit():
                self._min_base = None
            else:
                self._min_base = val - _SECS[min(int(ss), 61)]
        self._stamp_key, self._stamp_wrap, self._stamp_val = key, wrap, val
        return val

    def _compute_stamp(self, key: str, wrap: datetime | None) -> datetime | None:
        try:
            mo, d = int(key[0:2]), int(key[3:5])
            hh, mm, ss = int(key[6:8]), int(key[9:11]), int(key[12:14])
        except ValueError:
            return wrap
        if wrap is None:
            return _dated(mo, d, hh, mm, ss, self._clock().replace(tzinfo=None), nearest=False)
        naive = _dated(mo, d, hh, mm, ss, wrap.replace(tzinfo=None), nearest=True)
        if naive is None:
            return wrap
        if wrap.tzinfo is None:
            return naive
        # Infer the engine's UTC offset (quarter hours) from the wrapper; express in its zone.
        wrap_utc = wrap.astimezone(UTC).replace(tzinfo=None)
        if self._offset is not None:
            cand = naive - self._offset
            if abs(cand - wrap_utc) <= _STAMP_SLACK:
                return (cand.replace(tzinfo=UTC)).astimezone(wrap.tzinfo)
        delta = naive - wrap_utc
        quarters = round(delta / timedelta(minutes=15))
        offset = timedelta(minutes=15 * quarters)
        if abs(offset) > timedelta(hours=14) or abs(delta - offset) > _STAMP_SLACK:
            return wrap  # the engine's clock does not match the wrapper's: trust the wrapper
        self._offset = offset
        try:
            return naive.replace(tzinfo=timezone(offset)).astimezone(wrap.tzinfo)
        except ValueError:
            return wrap

    # -- classification ---------------------------------------------------------------------
    def _classify(self, msg: str, level: str | None) -> Events:
        c = msg[:1]
        if (c == " " or c == "F") and 'File "' in msg[:12]:
            # a traceback frame: where on the startup stack it failed (used by fragments only)
            if frame_engine(msg) is not None:
                self._config_frame = frame_config(msg)
            phase = frame_phase(msg)
            return self._note_phase((_INFERRED[phase],)) if phase is not None else _NONE
        if c == "T" and msg.startswith("Traceback (most recent call last)"):
            self._config_frame = False
        elif c == "A" and level is None and msg.rstrip() == "AssertionError" and self._config_frame:
            return self._note_phase(self._config_refused(msg))  # a bare `assert` in a config check
        if c == "[" and "] " in msg[:48]:
            # 0.3x tags a compile message with its model part: `[backbone] Compiling a graph …`
            k = msg.index("] ")
            if msg[1:k].replace("_", "").replace("-", "").isalnum():
                msg = msg[k + 2 :]
        sp = msg.find(" ")
        word = msg if sp < 0 else msg[:sp]
        h = _DISPATCH.get(word)
        if h is None and "=" in word:
            h = _DISPATCH.get(word[:word.index("=") + 1])
        if h is not None:
            ev = h(self, msg)
            if ev:
                return self._note_phase(ev)
        if level is None or level == "ERROR" or level == "CRITICAL":
            if level is None and ": error: " in msg:
                ft = _cli_error_of(msg)
                if ft is not None:
                    # argparse refused the command line: a boot that ends before it began
                    self.reset()
                    return self._note_phase((BootBoundary(BoundaryKind.STARTED, new_args=True), _PM[Phase.LAUNCH], ft))
            if word.endswith(("Error:", "Exception:")) and word[:1].isalpha():
                return self._note_phase(self._on_exception(msg, sp))
            if "out of memory" in msg or "OutOfMemory" in msg or "NCCL" in msg:
                return self._oom_or_nccl(msg, specificity=2)
        elif level == "INFO" and "\u2588" in msg:
            vm = _LOGO_VERSION_RE.search(msg)
            if vm is not None:
                return self._note_phase(self._banner(vm.group(1)))
        return _NONE

    def _note_phase(self, ev: Events) -> Events:
        for e in ev:
            if type(e) is PhaseMark and not e.end:
                r = PHASE_RANK[e.phase]
                if r > self._phase_rank:
                    self._phase_rank = r
        return ev

    def _flags(self, values: dict[str, object], *, only_new: bool) -> Flags | None:
        seen = self._flags_seen
        if only_new:
            values = {k: v for k, v in values.items() if seen.get(k) is None}
        if not values:
            return None
        seen.update(values)
        return Flags(values)

    def _new_boot_marker(self) -> None:
        # A banner / argument dump after the boot got past launch starts a new boot (the tracker
        # applies the same rule to BootBoundary(new_args=True)): forget this boot's state.
        if self._phase_rank > PHASE_RANK[Phase.LAUNCH]:
            self.reset()

    # -- launch -----------------------------------------------------------------------------
    def _banner(self, version: str) -> Events:
        self._new_boot_marker()
        return (VersionHint(version.rstrip(",")), BootBoundary(BoundaryKind.STARTED, new_args=True),
                _PM[Phase.LAUNCH])

    def _on_vllm(self, msg: str) -> Events:
        m = _BANNER_RE.match(msg)
        if m is not None:
            return self._banner(m.group(1))
        if msg.startswith("vLLM is using nccl"):
            return _START[Phase.INIT]
        return _NONE

    def _on_non_default(self, msg: str) -> Events:
        if not msg.startswith("non-default args:"):
            return _NONE
        self._new_boot_marker()
        values = parse_arg_dict(msg[len("non-default args:"):])
        flags = self._flags(values, only_new=False)
        ev: list[LogEvent] = [BootBoundary(BoundaryKind.STARTED, new_args=True), _PM[Phase.LAUNCH]]
        if flags is not None:
            ev.append(flags)
        mml = values.get("max_model_len")
        if isinstance(mml, int) and not isinstance(mml, bool):
            ev.append(Metric(Fact.CONTEXT_LEN, float(mml)))
        return tuple(ev)

    def _on_args(self, msg: str) -> Events:
        if not msg.startswith("args: Namespace("):
            return _NONE
        self._new_boot_marker()
        flags = self._flags(parse_kv_args(msg[len("args: "):]), only_new=False)
        ev: list[LogEvent] = [BootBoundary(BoundaryKind.STARTED, new_args=True), _PM[Phase.LAUNCH]]
        if flags is not None:
            ev.append(flags)
        return tuple(ev)

    def _on_initializing(self, msg: str) -> Events:
        m = _CONFIG_RE.match(msg)
        if m is None:
            return _NONE
        ev: list[LogEvent] = [VersionHint(m.group(1))]
        raw = parse_kv_args(msg[m.end():])
        picked = {_CONFIG_KEYS[k]: v for k, v in raw.items() if k in _CONFIG_KEYS}
        flags = self._flags(picked, only_new=True)
        if flags is not None:
            ev.append(flags)
        msl = raw.get("max_seq_len")
        if isinstance(msl, int) and not isinstance(msl, bool):
            ev.append(Metric(Fact.CONTEXT_LEN, float(msl)))
        cs = _CAPTURE_SIZES_RE.search(msg, m.end())
        if cs is not None:
            sizes = sorted({int(x) for x in cs.group(1).replace(" ", "").split(",") if x.isdigit()})
            if sizes:
                ev.append(CaptureSizes(tuple(sizes)))
        return tuple(ev)

    def _on_using(self, msg: str) -> Events:
        m = _MAX_MODEL_LEN_RE.match(msg)
        if m is not None:
            return (Metric(Fact.CONTEXT_LEN, float(m.group(1))),)
        if msg.startswith("Using [") and "all-reduce backends" in msg:
            return _START[Phase.INIT]
        if msg.startswith("Using cache directory") and "torch.compile" in msg:
            return _START[Phase.COMPILE]
        return _NONE

    # -- init -------------------------------------------------------------------------------
    def _on_world_size(self, msg: str) -> Events:
        if " rank=" in msg and "distributed_init_method" in msg:
            return _START[Phase.INIT]
        return _NONE

    def _on_rank(self, msg: str) -> Events:
        m = _ASSIGNED_RE.match(msg)
        if m is None:
            return _NONE
        tp = int(m.group(3))
        self._cur_tp = tp
        if self._cur_key is not None:
            self._pid_tp[self._cur_key] = tp
        return _START[Phase.INIT]

    def _on_waiting(self, msg: str) -> Events:
        if msg.startswith("Waiting for init message"):
            return _START[Phase.INIT]
        if msg.startswith("Waiting for application startup"):
            return _START[Phase.HTTP_UP]
        return _NONE

    def _on_found(self, msg: str) -> Events:
        return _START[Phase.INIT] if msg.startswith("Found nccl from library") else _NONE

    # -- weights ----------------------------------------------------------------------------
    def _on_starting(self, msg: str) -> Events:
        if msg.startswith("Starting to load model"):
            return _START[Phase.LOAD_WEIGHTS]
        if msg.startswith("Starting torch.compile"):
            return _START[Phase.COMPILE]
        if msg.startswith(("Starting vLLM API server", "Starting vLLM server")):
            return _START[Phase.HTTP_UP]
        return _NONE

    def _on_filesystem(self, msg: str) -> Events:
        # 0.2x, while the weights load: `Filesystem type for checkpoints: EXT4. Checkpoint size: 2.08 GiB. …`
        return _START[Phase.LOAD_WEIGHTS] if msg.startswith("Filesystem type for checkpoints") else _NONE

    def _on_auto(self, msg: str) -> Events:
        return _START[Phase.LOAD_WEIGHTS] if msg.startswith("Auto-prefetch is disabled") else _NONE

    def _on_saved(self, msg: str) -> Events:
        return _START[Phase.COMPILE] if msg.startswith("saved AOT compiled function") else _NONE

    def _on_add(self, msg: str) -> Events:
        # `Add 3 padding layers, may waste at most 6.25% KV cache memory` (hybrid KV sizing)
        return (_PM[Phase.KV_ALLOCATE], Warning_(msg)) if "padding layers" in msg else _NONE

    def _on_if(self, msg: str) -> Events:
        # V0's capture notice continues: `If out-of-memory error occurs during cudagraph capture, …`
        if msg.startswith("If out-of-memory error occurs during cudagraph"):
            return _START[Phase.GRAPH_CAPTURE]
        return _NONE

    def _on_loading(self, msg: str) -> Events:
        m = _SHARDS_RE.match(msg)
        if m is not None:
            return (_PM[Phase.LOAD_WEIGHTS],
                    Progress(Phase.LOAD_WEIGHTS, int(m.group(1)), int(m.group(2)), label="checkpoint shards"))
        m = _LOAD_TOOK_RE.match(msg)
        if m is not None:
            return (Metric(Fact.LOAD_SECONDS, float(m.group(1))),)
        m = _V0_WEIGHTS_RE.match(msg)
        if m is not None:
            return (_PM[Phase.LOAD_WEIGHTS], Metric(Fact.WEIGHTS_GIB, float(m.group(1))),
                    PhaseMark(Phase.LOAD_WEIGHTS, end=True))
        if msg.startswith(("Loading model from scratch", "Loading drafter model")):
            return _START[Phase.LOAD_WEIGHTS]
        return _NONE

    def _on_model(self, msg: str) -> Events:
        m = _MODEL_TOOK_RE.match(msg)
        if m is not None:
            return (_PM[Phase.LOAD_WEIGHTS], Metric(Fact.WEIGHTS_GIB, float(m.group(1))),
                    PhaseMark(Phase.LOAD_WEIGHTS, end=True, seconds=float(m.group(2))))
        return _NONE

    def _on_model_lower(self, msg: str) -> Events:
        # 0.7-0.9: "model weights take X GiB; …; the rest of the memory reserved for KV Cache is Y GiB."
        m = _V08_REST_RE.search(msg)
        if m is not None:
            return (_PM[Phase.KV_ALLOCATE], Metric(Fact.KV_CACHE_GIB, float(m.group(1))))
        return _NONE

    def _on_time(self, msg: str) -> Events:
        return _START[Phase.LOAD_WEIGHTS] if msg.startswith("Time spent downloading weights") else _NONE

    def _on_failed(self, msg: str) -> Events:
        if msg.startswith("Failed to create") and "weights" in msg and _OOM_RE.search(msg):
            return (_PM[Phase.LOAD_WEIGHTS],
                    FailureText(msg, kind=FailureKind.OOM_WEIGHTS, specificity=3,
                                hint=VLLM_HINTS[FailureKind.OOM_WEIGHTS]),
                    *_oom_metrics(msg))
        return _NONE

    # -- compile ----------------------------------------------------------------------------
    def _on_compile_word(self, msg: str) -> Events:
        if msg.startswith(("Dynamo bytecode transform", "Compiling a graph", "Cache the graph",
                           "Directly load the compiled graph", "Directly load AOT")):
            return _START[Phase.COMPILE]
        return _NONE

    def _on_torch_compile(self, msg: str) -> Events:
        m = _COMPILE_TOOK_RE.match(msg)
        if m is not None:
            return (_PM[Phase.COMPILE], Metric(Fact.COMPILE_SECONDS, float(m.group(1))))
        return _NONE

    def _on_warming(self, msg: str) -> Events:
        # the CPU model runner's torch.compile warm-up (v1/worker/cpu_model_runner.py; not with --enforce-eager)
        if msg.startswith("Warming up model for the compilation"):
            return _START[Phase.COMPILE]
        if msg.startswith("Warming up done"):
            return (PhaseMark(Phase.COMPILE, end=True),)
        return _NONE

    def _on_initial(self, msg: str) -> Events:
        return _START[Phase.COMPILE] if msg.startswith("Initial profiling/warmup run") else _NONE

    # -- KV sizing --------------------------------------------------------------------------
    def _on_memory(self, msg: str) -> Events:
        if msg.startswith("Memory profiling results"):
            ev: list[LogEvent] = [_PM[Phase.KV_ALLOCATE]]
            m = _V0_PROFILE_KV_RE.search(msg)
            if m is not None:
                ev.append(Metric(Fact.KV_CACHE_GIB, float(m.group(1))))
            m = _V0_PROFILE_TOTAL_RE.search(msg)
            if m is not None:
                ev.append(Metric(Fact.GPU_TOTAL_GIB, float(m.group(1))))
            m = _UTIL_EQ_RE.search(msg)
            if m is not None:
                flags = self._flags({"gpu_memory_utilization": float(m.group(1))}, only_new=True)
                if flags is not None:
                    ev.append(flags)
            return tuple(ev)
        if msg.startswith("Memory profiling takes"):
            return _START[Phase.KV_ALLOCATE]
        return _NONE

    def _on_the_lower(self, msg: str) -> Events:
        m = _V08_TOTAL_RE.search(msg)
        if m is None:
            return _NONE
        ev: list[LogEvent] = [Metric(Fact.GPU_TOTAL_GIB, float(m.group(1)))]
        flags = self._flags({"gpu_memory_utilization": float(m.group(2))}, only_new=True)
        if flags is not None:
            ev.append(flags)
        return tuple(ev)

    def _on_profiling(self, msg: str) -> Events:
        return _START[Phase.KV_ALLOCATE] if msg.startswith("Profiling CUDA graph memory") else _NONE

    def _on_estimated(self, msg: str) -> Events:
        m = _EST_GRAPH_RE.match(msg)
        if m is not None:
            return (_PM[Phase.KV_ALLOCATE], Metric(Fact.GRAPH_MEM_ESTIMATE_GIB, float(m.group(1))))
        return _NONE

    def _on_cpu_kv(self, msg: str) -> Events:
        m = _CPU_KV_RE.match(msg)
        if m is not None:
            out: Events = (_PM[Phase.KV_ALLOCATE], Metric(Fact.KV_CACHE_GIB, _f(m.group(1))),
                           Metric(Fact.CPU_MEM_TOTAL_GIB, _f(m.group(2))))
            if msg.startswith("Explicitly"):
                out = (*out, Metric(Fact.CPU_KV_SPACE_GIB, _f(m.group(1))))
            return out
        return _NONE

    def _on_available(self, msg: str) -> Events:
        m = _KV_MEM_RE.match(msg)
        if m is not None:
            return (_PM[Phase.KV_ALLOCATE], Metric(Fact.KV_CACHE_GIB, _f(m.group(1))))
        if msg.startswith("Available routes are"):
            return _START[Phase.HTTP_UP]
        return _NONE

    def _on_kv_size(self, msg: str) -> Events:
        m = _KV_SIZE_RE.match(msg)
        if m is None:
            return _NONE
        ev: list[LogEvent] = [_PM[Phase.KV_ALLOCATE]]
        if m.group(2) is None:  # "GPU + host" (hisparse) is not the device pool
            ev.append(Metric(Fact.MAX_TOTAL_NUM_TOKENS, _f(m.group(3))))
        c = _CONCURRENCY_RE.search(msg, m.end())
        if c is not None:
            ev.append(Metric(Fact.CONTEXT_LEN, _f(c.group(1))))
            ev.append(Metric(Fact.MAX_CONCURRENCY, float(c.group(2))))
        return tuple(ev)

    def _on_maximum(self, msg: str) -> Events:
        c = _CONCURRENCY_RE.match(msg)
        if c is None:
            return _NONE
        return (_PM[Phase.KV_ALLOCATE], Metric(Fact.CONTEXT_LEN, _f(c.group(1))),
                Metric(Fact.MAX_CONCURRENCY, float(c.group(2))))

    def _on_hash(self, msg: str) -> Events:
        m = _BLOCKS_RE.match(msg)
        if m is None:
            return _NONE
        return (_PM[Phase.KV_ALLOCATE], Metric(Fact.KV_BLOCKS, float(m.group(2))))

    def _on_overriding(self, msg: str) -> Events:
        return _START[Phase.KV_ALLOCATE] if msg.startswith("Overriding num_gpu_blocks") else _NONE

    def _on_vllm_lower(self, msg: str) -> Events:
        m = _CACHE_INFO_BLOCKS_RE.search(msg)
        if m is not None and msg.startswith("vllm cache_config_info"):
            return (Metric(Fact.KV_BLOCKS, float(m.group(1))),)
        return _NONE

    # -- graphs -----------------------------------------------------------------------------
    def _on_capturing(self, msg: str) -> Events:
        m = _CAPTURE_TQDM_RE.match(msg)
        if m is not None:
            return (_PM[Phase.GRAPH_CAPTURE],
                    Progress(Phase.GRAPH_CAPTURE, int(m.group(2)), int(m.group(3)), label=m.group(1) or ""))
        if msg.startswith(("Capturing the model for CUDA graphs", "Capturing cudagraphs", "Capturing CUDA graph")):
            return _START[Phase.GRAPH_CAPTURE]
        return _NONE

    def _on_graph(self, msg: str) -> Events:
        m = _GRAPH_DONE_RE.match(msg)
        if m is None:
            return _NONE
        # the start mark too: with no tqdm bar in the log (stderr not captured) this is the only
        # evidence that a capture happened
        secs = float(m.group(1))
        if m.group(2) is not None:
            return (_PM[Phase.GRAPH_CAPTURE], Metric(Fact.GRAPH_MEM_GIB, float(m.group(2))),
                    PhaseMark(Phase.GRAPH_CAPTURE, end=True, seconds=secs))
        return (_PM[Phase.GRAPH_CAPTURE], PhaseMark(Phase.GRAPH_CAPTURE, end=True, seconds=secs))

    def _on_init(self, msg: str) -> Events:
        m = _INIT_ENGINE_RE.match(msg)
        if m is None:
            return _NONE
        c = _INIT_COMPILE_RE.search(msg, m.end())
        if c is not None:  # `… took 103.27 s (compilation: 40.45 s)`
            return (
                Metric(Fact.INIT_ENGINE_SECONDS, float(m.group(1))),
                Metric(Fact.COMPILE_SECONDS, float(c.group(1))),
            )
        return (Metric(Fact.INIT_ENGINE_SECONDS, float(m.group(1))),)

    # -- HTTP, ready, serving ---------------------------------------------------------------
    def _on_started(self, msg: str) -> Events:
        return _START[Phase.HTTP_UP] if msg.startswith("Started server process") else _NONE

    def _on_application(self, msg: str) -> Events:
        return _START[Phase.READY] if msg.startswith("Application startup complete") else _NONE

    def _on_engine(self, msg: str) -> Events:
        if "KV cache usage: " in msg:
            return _serving(msg)
        if "vllm cache_config_info" in msg:  # `Engine 000: vllm cache_config_info … num_gpu_blocks is: N`
            return self._on_vllm_lower(msg[msg.index("vllm cache_config_info"):])
        if msg.startswith(("Engine core initialization failed", "Engine process failed to start")):
            return (FailureText(msg, fatal=True, specificity=0),)
        if msg.startswith("Engine core proc") and "died unexpectedly" in msg:
            return (FailureText(msg, fatal=True, specificity=0),)
        return _NONE

    def _on_avg(self, msg: str) -> Events:
        return _serving(msg) if "KV cache usage: " in msg else _NONE

    # -- failures ---------------------------------------------------------------------------
    def _on_enginecore(self, msg: str) -> Events:
        if msg.startswith(("EngineCore failed to start", "EngineCore encountered a fatal error")):
            return (FailureText(msg, fatal=True, specificity=0),)
        return _NONE

    def _on_workerproc(self, msg: str) -> Events:
        if msg.startswith(("WorkerProc failed to start", "WorkerProc initialization failed")):
            return (FailureText(msg, fatal=True, specificity=0),)
        return _NONE

    def _on_free(self, msg: str) -> Events:
        m = _FREE_MEM_RE.search(msg)
        if m is None:
            return self._free_info(msg)
        ev: list[LogEvent] = [
            _INFERRED[Phase.INIT],  # the free-memory check runs in init_device, before any weights
            FailureText(msg, kind=FailureKind.GPU_BUSY, specificity=3, hint=VLLM_HINTS[FailureKind.GPU_BUSY]),
            Metric(Fact.GPU_FREE_GIB, float(m.group(1))),
            Metric(Fact.GPU_TOTAL_GIB, float(m.group(2))),
        ]
        flags = self._flags({"gpu_memory_utilization": float(m.group(3))}, only_new=True)
        if flags is not None:
            ev.append(flags)
        return tuple(ev)

    def _free_info(self, msg: str) -> Events:
        """0.2x-0.3x after the capture: `Free memory on device (F/T GiB) on startup. Desired GPU
        memory utilization is (u, X GiB). Actual usage is … Replace gpu_memory_utilization config
        with `--kv-cache-memory=N` (K GiB) …` — the figures, not a failure."""
        m = _FREE_INFO_RE.match(msg)
        if m is None:
            return _NONE
        ev: list[LogEvent] = [
            Metric(Fact.GPU_FREE_GIB, float(m.group(1))),
            Metric(Fact.GPU_TOTAL_GIB, float(m.group(2))),
        ]
        flags = self._flags({"gpu_memory_utilization": float(m.group(3))}, only_new=True)
        if flags is not None:
            ev.append(flags)
        k = _KV_HINT_RE.search(msg, m.end())
        if k is not None:
            ev.append(Metric(Fact.KV_CACHE_MEMORY_HINT_GIB, float(k.group(1))))
        return tuple(ev)

    def _on_no(self, msg: str) -> Events:
        if msg.startswith("No available memory for the cache blocks"):
            return (_INFERRED[Phase.KV_ALLOCATE], FailureText(msg, kind=FailureKind.OOM_KV_ALLOCATE, specificity=3,
                                hint=VLLM_HINTS[FailureKind.OOM_KV_ALLOCATE]),)
        m = _SHM_WAIT_RE.match(msg)
        if m is not None:
            return self._shm_wait(msg, int(m.group(1)))
        return _NONE

    def _shm_wait(self, msg: str, interval: int) -> Events:
        """A process still waits on the shared-memory broadcast (a hang, or a long compile or
        quantization on some worker): the wait so far is its repeats in a row times the interval;
        the first of a run is also a warning."""
        key = self._cur_key
        n = self._shm_waits.get(key, 0) + 1
        if n == 1 and len(self._shm_waits) >= 4096:
            self._shm_waits.clear()
        self._shm_waits[key] = n
        wait = Metric(Fact.SHM_WAIT_SECONDS, float(n * interval))
        return (Warning_(msg), wait) if n == 1 else (wait,)

    def _on_to(self, msg: str) -> Events:
        if not msg.startswith("To serve at least one request"):
            return _NONE
        ev: list[LogEvent] = []
        m = _TOO_SMALL_RE.search(msg)
        hint = VLLM_HINTS[FailureKind.KV_TOO_SMALL]
        if m is not None:
            ev += [Metric(Fact.CONTEXT_LEN, float(m.group(1))), Metric(Fact.KV_NEEDED_GIB, float(m.group(2))),
                   Metric(Fact.KV_CACHE_GIB, float(m.group(3)))]
            if m.group(4) is not None:
                ev.append(Metric(Fact.ESTIMATED_MAX_LEN, float(m.group(4))))
                hint = (f"--max-model-len {m.group(1)} needs {m.group(2)} GiB of KV cache but {m.group(3)} GiB "
                        f"is available: set --max-model-len to at most {m.group(4)}, or raise "
                        "--gpu-memory-utilization / use more GPUs.")
        return (_INFERRED[Phase.KV_ALLOCATE], FailureText(msg, kind=FailureKind.KV_TOO_SMALL, specificity=3, hint=hint),
                *ev)

    def _on_the(self, msg: str) -> Events:
        m = _V0_TOO_SMALL_RE.match(msg)
        if m is None:
            return _NONE
        hint = (f"--max-model-len {m.group(1)} does not fit the KV cache ({m.group(2)} tokens): set "
                f"--max-model-len to at most {m.group(2)}, or raise --gpu-memory-utilization.")
        return (_INFERRED[Phase.KV_ALLOCATE], FailureText(msg, kind=FailureKind.KV_TOO_SMALL, specificity=3, hint=hint),
                Metric(Fact.CONTEXT_LEN, float(m.group(1))), Metric(Fact.ESTIMATED_MAX_LEN, float(m.group(2))))

    def _on_error(self, msg: str) -> Events:
        if msg.startswith("Error in memory profiling"):
            return (FailureText(msg, kind=FailureKind.GPU_BUSY, specificity=3, hint=_HINT_PROFILING),)
        return _NONE

    def _on_cuda(self, msg: str) -> Events:
        if msg.startswith("CUDA out of memory occurred when warming up sampler"):
            return (FailureText(msg, specificity=3, hint=_HINT_SAMPLER),)
        if msg.startswith("CUDA graph memory profiling is enabled"):
            m = re.search(r"current --gpu-memory-utilization=([\d.]+)", msg)
            if m is not None:
                flags = self._flags({"gpu_memory_utilization": float(m.group(1))}, only_new=True)
                return (flags,) if flags is not None else _NONE
            return _NONE
        if msg.startswith("CUDA graph pool memory"):
            # the same capture as "Graph capturing finished … took X GiB": report only the estimate
            # (graph_mem_gib is summed per rank over captures; it must not count this one twice)
            m = _GRAPH_POOL_RE.match(msg)
            if m is not None:
                return (Metric(Fact.GRAPH_POOL_ACTUAL_GIB, float(m.group(1))),
                        Metric(Fact.GRAPH_MEM_ESTIMATE_GIB, float(m.group(2))))
        return _NONE

    def _on_exception(self, msg: str, sp: int) -> Events:
        """``XError: text``: a known failure line raised as an exception, an OOM, NCCL, or a crash."""
        rest = msg[sp + 1:] if sp > 0 else ""
        if rest:
            rsp = rest.find(" ")
            h = _FAILURE_DISPATCH.get(rest if rsp < 0 else rest[:rsp])
            if h is not None:
                ev = h(self, rest)
                if ev:
                    return tuple(_with_text(e, msg) for e in ev)
        if "out of memory" in msg or "OutOfMemory" in msg or "NCCL" in msg or "DistBackendError" in msg:
            ev = self._oom_or_nccl(msg, specificity=3)
            if ev:
                return ev
        if "See root cause above" in msg or "exception in a background process" in msg:
            return (FailureText(msg, fatal=True, specificity=0),)
        if (self._config_frame and config_exception(msg)) or config_exception(msg, alone=True):
            return self._config_refused(msg)
        return (FailureText(msg, kind=FailureKind.CRASH, specificity=2),)

    def _config_refused(self, msg: str) -> Events:
        """EngineArgs / a config class refused the configuration (a ``ValueError``, an
        ``AssertionError`` or pydantic's ``ValidationError`` raised in its checks): the API server
        exits at launch, before any engine process starts."""
        self._config_frame = False
        return (_INFERRED[Phase.LAUNCH], FailureText(msg, kind=FailureKind.BAD_ARGS, fatal=True, specificity=3))

    def _oom_or_nccl(self, msg: str, *, specificity: int) -> Events:
        if _OOM_RE.search(msg):
            return (FailureText(msg, specificity=specificity), *_oom_metrics(msg))
        m = _NCCL_RE.search(msg)
        if m is not None:
            if m.group(0) == "NCCL WARN" and specificity < 3:
                # NCCL's own warnings (no IB verbs, a slow path) also show in healthy boots
                return (Warning_(msg, kind=FailureKind.NCCL),)
            return (FailureText(msg, kind=FailureKind.NCCL, specificity=specificity,
                                hint=VLLM_HINTS[FailureKind.NCCL]),)
        return _NONE


_DISPATCH: dict[str, _Handler] = {
    "vLLM": VllmGrammar._on_vllm,
    "vllm": VllmGrammar._on_vllm_lower,
    "non-default": VllmGrammar._on_non_default,
    "args:": VllmGrammar._on_args,
    "Initializing": VllmGrammar._on_initializing,
    "Using": VllmGrammar._on_using,
    "world_size=": VllmGrammar._on_world_size,
    "rank": VllmGrammar._on_rank,
    "Waiting": VllmGrammar._on_waiting,
    "Found": VllmGrammar._on_found,
    "Starting": VllmGrammar._on_starting,
    "Loading": VllmGrammar._on_loading,
    "Filesystem": VllmGrammar._on_filesystem,
    "Auto-prefetch": VllmGrammar._on_auto,
    "saved": VllmGrammar._on_saved,
    "Add": VllmGrammar._on_add,
    "If": VllmGrammar._on_if,
    "Model": VllmGrammar._on_model,
    "model": VllmGrammar._on_model_lower,
    "Time": VllmGrammar._on_time,
    "Failed": VllmGrammar._on_failed,
    "Dynamo": VllmGrammar._on_compile_word,
    "Compiling": VllmGrammar._on_compile_word,
    "Cache": VllmGrammar._on_compile_word,
    "Directly": VllmGrammar._on_compile_word,
    "torch.compile": VllmGrammar._on_torch_compile,
    "Initial": VllmGrammar._on_initial,
    "Memory": VllmGrammar._on_memory,
    "the": VllmGrammar._on_the_lower,
    "Profiling": VllmGrammar._on_profiling,
    "Estimated": VllmGrammar._on_estimated,
    "Available": VllmGrammar._on_available,
    "Explicitly": VllmGrammar._on_cpu_kv,
    "Warming": VllmGrammar._on_warming,
    "Auto": VllmGrammar._on_cpu_kv,
    "GPU": VllmGrammar._on_kv_size,
    "CPU": VllmGrammar._on_kv_size,
    "XPU": VllmGrammar._on_kv_size,
    "NPU": VllmGrammar._on_kv_size,
    "TPU": VllmGrammar._on_kv_size,
    "HPU": VllmGrammar._on_kv_size,
    "Maximum": VllmGrammar._on_maximum,
    "#": VllmGrammar._on_hash,
    "Overriding": VllmGrammar._on_overriding,
    "Capturing": VllmGrammar._on_capturing,
    "Graph": VllmGrammar._on_graph,
    "init": VllmGrammar._on_init,
    "Started": VllmGrammar._on_started,
    "Application": VllmGrammar._on_application,
    "Engine": VllmGrammar._on_engine,
    "Avg": VllmGrammar._on_avg,
    "EngineCore": VllmGrammar._on_enginecore,
    "WorkerProc": VllmGrammar._on_workerproc,
    "Free": VllmGrammar._on_free,
    "No": VllmGrammar._on_no,
    "To": VllmGrammar._on_to,
    "The": VllmGrammar._on_the,
    "Error": VllmGrammar._on_error,
    "CUDA": VllmGrammar._on_cuda,
}
# Handlers that can follow an exception name (``ValueError: Free memory on device …``).
_FAILURE_DISPATCH: dict[str, _Handler] = {
    k: _DISPATCH[k] for k in ("Free", "No", "To", "The", "Error", "CUDA", "Engine", "WorkerProc", "EngineCore",
                              "Failed")
}
