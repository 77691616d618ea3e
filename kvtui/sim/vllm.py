"""The vLLM 0.11 (V1 engine) boot, simulated: its argument parser, the engine core's profiling run,
the KV cache (``kv = total*u - (weights + activation peak + non-torch)``), CUDA graph capture, and
the engine's own failures and texts."""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Sequence

from kvtui.sim.presets import GIB, MODELS
from kvtui.sim.script import (
    _BOOL,
    ArgError,
    BootInput,
    BootScript,
    ServingFacts,
    _arg_float,
    _arg_int,
    _capture_bar,
    _kv_dtype,
    _parse_options,
    _shard_bar,
    _Sim,
    _site_packages,
    _visible_gpus,
    torch_size,
)
from kvtui.sim.serving import VLLM_SERVING_INTERVAL_S, _vllm_stamp

VLLM_VERSION = "0.11.0"


# dest -> (type, default), in the order vLLM prints its non-default args
VLLM_ARGS: dict[str, tuple[str, object]] = {
    "model_tag": ("str", None),
    "host": ("str", None),
    "port": ("int", 8000),
    "model": ("str", None),
    "trust_remote_code": (_BOOL, False),
    "dtype": ("str", "auto"),
    "seed": ("int", 0),
    "max_model_len": ("int", None),
    "quantization": ("str", None),
    "enforce_eager": (_BOOL, False),
    "served_model_name": ("str", None),
    "pipeline_parallel_size": ("int", 1),
    "tensor_parallel_size": ("int", 1),
    "data_parallel_size": ("int", 1),
    "block_size": ("int", None),
    "gpu_memory_utilization": ("float", 0.9),
    "swap_space": ("float", 4.0),
    "kv_cache_dtype": ("str", "auto"),
    "enable_prefix_caching": (_BOOL, None),
    "max_num_batched_tokens": ("int", None),
    "max_num_seqs": ("int", None),
    "enable_chunked_prefill": (_BOOL, None),
    "disable_log_requests": (_BOOL, False),
}


_VLLM_SHORT = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-dp": "data_parallel_size"}


def parse_vllm_args(args: Sequence[str]) -> dict[str, object]:
    """``vllm serve [model_tag] [options]`` (FlexibleArgumentParser: ``--max_model_len`` works too)."""
    values: dict[str, object] = {}
    rest = list(args)
    if rest and not rest[0].startswith("-"):
        values["model_tag"] = rest.pop(0)
    norm: list[str] = []
    for tok in rest:
        if tok in _VLLM_SHORT:
            norm.append("--" + _VLLM_SHORT[tok].replace("_", "-"))
        elif tok.startswith("--"):
            name, eq, val = tok.partition("=")
            norm.append(name.replace("_", "-") + eq + val)
        else:
            norm.append(tok)
    names = {"--" + k.replace("_", "-"): k for k in VLLM_ARGS if k != "model_tag"}
    parsed = _parse_options(norm, VLLM_ARGS, names)
    values.update(parsed)
    if "model_tag" in values:
        values.setdefault("model", values["model_tag"])
    values.setdefault("model", "Qwen/Qwen3-0.6B")  # vLLM's own default model
    return values


def _vllm_site(exe: str) -> str:
    return _site_packages(exe) + "/vllm"


class _VllmBoot:
    """One vLLM boot. ``run`` goes through the phases in order (arguments, the API server's front
    end, the workers, weights, torch.compile and the memory profile, the KV cache, CUDA graphs,
    ready); each phase leaves what later ones need on the instance (``args``, ``model``, ``tp``,
    ``ranks``, ``phys``, ``wpid``, ``wname``, ``free0``, ``w_r``, ``kv``, ``tokens``, …) and returns
    the time it ended, or the failed boot's script."""

    def __init__(self, inp: BootInput) -> None:
        self.inp = inp
        self.sim = _Sim(inp, ms=False)
        rng = random.Random(f"pids:{inp.seed}:{inp.boot_no}")
        self.main_pid = rng.randrange(2000, 60000)
        self.core_pid = self.main_pid + 79
        self.exe = inp.argv[0]
        self.jit = random.Random(f"timing:{inp.seed}:{shlex.join(inp.argv)}")
        self.rank_pids: dict[int, int] = {}

    def log(self, sim_t: float, proc: str, pid: int, fileinfo: str, msg: str, level: str = "INFO") -> None:
        t = self.sim.at(sim_t)
        self.sim.emit(sim_t, f"({proc} pid={pid}) {level} {_vllm_stamp(t)} [{fileinfo}] {msg}", pid, raw=True)

    def worker_log(self, rank: int, sim_t: float, fileinfo: str, msg: str) -> None:
        """A line of rank ``rank``'s worker process."""
        self.log(sim_t, self.wname[rank], self.wpid[rank], fileinfo, msg)

    def raw(self, sim_t: float, proc: str, pid: int, text: str) -> None:
        self.sim.emit(sim_t, f"({proc} pid={pid}) {text}", pid, raw=True)

    def _script(self, outcome: str, sim_t: float, **kw: object) -> BootScript:
        return BootScript(
            start=self.inp.start,
            lines=self.sim.sorted_lines(eof=self.sim.at(sim_t) if outcome == "failed" else None),
            outcome=outcome,
            end_t=self.sim.at(sim_t),
            main_pid=self.main_pid,
            rank_pids=self.rank_pids,
            aux_pids=(self.core_pid,),
            exe=self.exe,
            mem=self.sim.mem,
            util=self.sim.util,
            speed=self.inp.speed,
            **kw,  # type: ignore[arg-type]
        )

    def _fail(self, sim_t: float, proc: str, pid: int, fileinfo: str, exc_lines: Sequence[str]) -> BootScript:
        """An exception in a worker or the engine core: its ERROR traceback, the engine core's
        failure, the API server's RuntimeError, exit status 1."""
        site = _vllm_site(self.exe)
        frames = [
            (f"{site}/v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
            (f"{site}/v1/engine/core.py", 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
        ]
        tb = ["Traceback (most recent call last):"]
        for path, line, func, code in frames:
            tb += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
        if proc.startswith("Worker"):
            self.log(sim_t, proc, pid, "multiproc_executor.py:597", "WorkerProc failed to start.", "ERROR")
            for i, text in enumerate(["Traceback (most recent call last):", *exc_lines]):
                self.log(sim_t + 0.0001 * (i + 1), proc, pid, "multiproc_executor.py:597", text, "ERROR")
            core_exc = [
                "Exception: WorkerProc initialization failed due to an exception in a background process. "
                "See stack trace for root cause."
            ]
            sim_t += 0.5
        else:
            core_exc = list(exc_lines)
        core = self.core_pid
        self.log(sim_t, "EngineCore_DP0", core, "core.py:708", "EngineCore failed to start.", "ERROR")
        for i, text in enumerate([*tb, *core_exc]):
            self.log(sim_t + 0.0001 * (i + 1), "EngineCore_DP0", core, "core.py:708", text, "ERROR")
        t = sim_t + 0.6
        m = self.main_pid
        api = [
            "Traceback (most recent call last):",
            f'  File "{self.exe}", line 10, in <module>',
            "    sys.exit(main())",
            "             ^^^^^^",
            f'  File "{site}/v1/engine/utils.py", line 853, in wait_for_engine_startup',
            "    raise RuntimeError(",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        ]
        for i, text in enumerate(api):
            self.raw(t + 0.0001 * i, "APIServer", m, text)
        end = t + 1.2
        for gpu in list(self.sim.mem):
            self.sim.mem_step(gpu, end, 0.0)
        self.sim.util_frame(end, 0.0)
        return self._script("failed", end, exit_code="exited", exit_status="1/FAILURE", result="exit-code")

    def run(self) -> BootScript:
        """The boot, phase by phase; a phase that fails returns the failed boot's script."""
        try:
            args = parse_vllm_args(self.inp.argv[2:])
        except ArgError as exc:
            m = self.main_pid
            self.raw(2.0, "APIServer", m, "usage: vllm serve [model_tag] [options]")
            self.raw(2.0001, "APIServer", m, f"vllm serve: error: {exc}")
            return self._script("failed", 2.1, exit_code="exited", exit_status="2/INVALIDARGUMENT", result="exit-code")
        steps: tuple[Callable[[float], float | BootScript], ...] = (
            self._workers, self._load_weights, self._profile, self._kv_cache, self._graphs)
        t = self._front_end(args)
        for step in steps:
            if isinstance(t, BootScript):
                return t
            t = step(t)
        if isinstance(t, BootScript):
            return t
        return self._ready(t)

    def _front_end(self, args: dict[str, object]) -> float | BootScript:
        """The API server: its arguments (a refused ``gpu_memory_utilization``), the model's config,
        then the engine core's start line; a TP wider than the visible GPUs is refused there."""
        inp, jit, m = self.inp, self.jit, self.main_pid
        self.args = args
        model_path = self.model_path = str(args["model"])
        model = self.model = MODELS.get(model_path.rstrip("/"), inp.preset.model)
        tp = self.tp = _arg_int(args, "tensor_parallel_size", 1)
        u = self.u = _arg_float(args, "gpu_memory_utilization", 0.9)
        max_len = self.max_len = _arg_int(args, "max_model_len", model.max_context)
        self.block = _arg_int(args, "block_size", 16)
        self.max_seqs = _arg_int(args, "max_num_seqs", 256)
        batched = self.batched = _arg_int(args, "max_num_batched_tokens", 8192)
        eager = self.eager = bool(args.get("enforce_eager"))
        _, self.kv_bytes = _kv_dtype(args.get("kv_cache_dtype"), model.dtype)
        self.visible = _visible_gpus(inp.env, inp.gpu.count)
        t = 2.4 + jit.uniform(0, 0.6)
        self.log(t, "APIServer", m, "api_server.py:1839", f"vLLM API server version {VLLM_VERSION}")
        ordered = {k: args[k] for k in VLLM_ARGS if k in args}
        self.log(t + 0.01, "APIServer", m, "utils.py:233", f"non-default args: {ordered!r}")
        if not 0 < u <= 1:
            for i, text in enumerate(
                [
                    "Traceback (most recent call last):",
                    f'  File "{self.exe}", line 10, in <module>',
                    "    sys.exit(main())",
                    "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig",
                    "gpu_memory_utilization",
                    f"  Input should be {'less than or equal to 1' if u > 1 else 'greater than 0'} "
                    f"[type={'less_than_equal' if u > 1 else 'greater_than'}, input_value={u}, input_type=float]",
                ]
            ):
                self.raw(t + 1.0 + 0.0001 * i, "APIServer", m, text)
            return self._script("failed", t + 1.2, exit_code="exited", exit_status="1/FAILURE", result="exit-code")
        t += 5.5 + jit.uniform(0, 1.0)
        self.log(t, "APIServer", m, "model.py:547", f"Resolved architecture: {model.arch}")
        self.log(t + 0.01, "APIServer", m, "model.py:1510", f"Using max model len {max_len}")
        self.log(
            t + 0.4,
            "APIServer",
            m,
            "scheduler.py:205",
            f"Chunked prefill is enabled with max_num_batched_tokens={batched}.",
        )
        t += 7.0
        core = self.core_pid
        self.log(t, "EngineCore_DP0", core, "core.py:644", "Waiting for init message from front-end.")
        self.log(
            t + 0.05,
            "EngineCore_DP0",
            core,
            "core.py:77",
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model={model_path!r}, "
            "speculative_config=None, "
            f"tokenizer={model_path!r}, skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
            f"trust_remote_code={bool(args.get('trust_remote_code'))}, dtype=torch.{model.dtype}, "
            f"max_seq_len={max_len}, "
            f"download_dir=None, load_format=auto, tensor_parallel_size={tp}, pipeline_parallel_size=1, "
            f"data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager={eager}, "
            f"kv_cache_dtype={args.get('kv_cache_dtype') or 'auto'}, device_config=cuda, seed=0, "
            f"served_model_name={args.get('served_model_name') or model_path}, enable_prefix_caching=True, "
            "chunked_prefill_enabled=True, pooler_config=None",
        )
        if tp < 1 or tp > len(self.visible):
            return self._fail(
                t + 1.0,
                "EngineCore_DP0",
                core,
                "core.py:708",
                [
                    "ValueError: World size "
                    f"({tp}) is larger than the number of available GPUs ({len(self.visible)}) in this node."
                ],
            )
        return t

    def _workers(self, t: float) -> float | BootScript:
        """The workers (one per TP rank) start; each checks the memory others hold on its GPU
        against ``gpu_memory_utilization``."""
        inp, sim, gpu, m, tp, u = self.inp, self.sim, self.inp.gpu, self.main_pid, self.tp, self.u
        ranks = self.ranks = list(range(tp))
        phys = self.phys = {r: self.visible[r] for r in ranks}
        wpid = self.wpid = {r: m + 150 + r for r in ranks}
        self.rank_pids = {phys[r]: wpid[r] for r in ranks}
        wname = self.wname = {r: f"Worker_TP{r}" if tp > 1 else "EngineCore_DP0" for r in ranks}
        hw = random.Random(f"hw:{inp.seed}")
        ctx_gib = self.ctx_gib = {g: 0.50 + 0.04 * hw.random() for g in range(gpu.count)}
        total = gpu.total_gib
        requested = self.requested = total * u
        t += 8.0 + 0.5 * tp
        free0: dict[int, float] = {}
        self.free0 = free0
        for r in ranks:
            g = phys[r]
            foreign = inp.foreign.mib / 1024.0 if inp.foreign and inp.foreign.gpu == g else 0.0
            free0[r] = total - gpu.idle_mib / 1024.0 - foreign
            sim.mem_frame(g, 0.0, 0.0)
            sim.mem_frame(g, t - 1.0, 0.0)
            sim.mem_frame(g, t + 0.05 * r, ctx_gib[g] * 1024)
            if tp > 1:
                self.worker_log(
                    r,
                    t + 0.05 * r,
                    "parallel_state.py:1208",
                    f"rank {r} in world size {tp} is assigned as DP rank 0, PP rank 0, TP rank {r}, EP rank {r}",
                )
        # the worker's start-up check against memory held by others
        short = [r for r in ranks if free0[r] - ctx_gib[phys[r]] < requested]
        if short:
            r = short[0]
            free = free0[r] - ctx_gib[phys[r]]
            local = r if "CUDA_VISIBLE_DEVICES" in inp.env else phys[r]
            exc_lines = [
                f'  File "{_vllm_site(self.exe)}/v1/worker/gpu_worker.py", line 196, in init_device',
                "    raise ValueError(",
                f"ValueError: Free memory on device cuda:{local} ({free:.2f}/{total:.2f} GiB) on startup is less than "
                f"desired GPU memory utilization ({u}, {requested:.2f} GiB). Decrease GPU memory utilization or "
                "reduce GPU memory used by other processes.",
            ]
            return self._fail(t + 0.3, wname[r], wpid[r], "gpu_worker.py:196", exc_lines)
        return t + 0.6

    def _load_weights(self, t: float) -> float:
        """The weights, shard by shard (worker 0's tqdm bar), every rank's memory ramping."""
        sim, jit, model, tp = self.sim, self.jit, self.model, self.tp
        ranks, phys, wpid, wname, ctx_gib = self.ranks, self.phys, self.wpid, self.wname, self.ctx_gib
        for r in ranks:
            self.worker_log(r, t + 0.02 * r, "gpu_model_runner.py:2602", f"Starting to load model {self.model_path}...")
        self.worker_log(0, t + 0.4, "cuda.py:366", "Using Flash Attention backend on V1 engine.")
        w_r = self.w_r = model.weights_gib / tp + model.replicated_gib
        load_s = model.load_seconds * (8 / max(tp, 1)) ** 0.35
        desc = "Loading safetensors checkpoint shards"
        t_l = t + 0.8
        # the bar format ends with "\\n": one record per redraw, after the stream's line prefix
        self.raw(t_l, wname[0], wpid[0], f"\r{desc}:   0% Completed | 0/{model.shards} [00:00<?, ?it/s]")
        for r in ranks:
            sim.mem_frame(phys[r], t_l, ctx_gib[phys[r]] * 1024)
        weights = [0.7 + 0.6 * jit.random() for _ in range(model.shards)]
        scale = load_s / sum(weights)
        done = t_l
        for k in range(1, model.shards + 1):
            done += weights[k - 1] * scale
            el = sim.real(done - t_l)
            if k % max(1, model.shards // 8) == 0 or k == model.shards:
                self.raw(done, wname[0], wpid[0], "\r" + _shard_bar(desc, k, model.shards, el))
            for r in ranks:
                sim.mem_frame(phys[r], done, (ctx_gib[phys[r]] + w_r * k / model.shards) * 1024)
        # close(): the final state redrawn, then one more newline (a record holding only the prefix)
        self.raw(done, wname[0], wpid[0], "\r" + _shard_bar(desc, model.shards, model.shards, sim.real(done - t_l)))
        self.raw(done, wname[0], wpid[0], "")
        sim.util_frame(t_l, 3.0)
        for r in ranks:
            self.worker_log(
                r,
                done + 0.05 * r,
                "default_loader.py:267",
                f"Loading weights took {sim.real(done - t_l) + 0.02 * r:.2f} seconds",
            )
            self.worker_log(
                r,
                done + 0.3 + 0.05 * r,
                "gpu_model_runner.py:2653",
                f"Model loading took {w_r:.4f} GiB and {sim.real(done - t) + 0.3 + 0.05 * r:.6f} seconds",
            )
        return done + 0.5 + 0.05 * tp

    def _profile(self, t: float) -> float:
        """torch.compile (unless eager) and the memory profile: the activation peak and non-torch
        memory, and what is left for the KV cache."""
        inp, sim, jit, model, tp = self.inp, self.sim, self.jit, self.model, self.tp
        ranks, phys, ctx_gib, w_r = self.ranks, self.phys, self.ctx_gib, self.w_r
        compile_s = 0.0
        if not self.eager:
            h = random.Random(f"cache:{inp.seed}:{self.model_path}").getrandbits(24)
            dyn = 10.0 + 6.0 * jit.random()
            compile_s = dyn + 12.0 + 6.0 * jit.random()
            self.worker_log(
                0,
                t + 0.1,
                "backends.py:548",
                f"Using cache directory: /root/.cache/vllm/torch_compile_cache/{h:06x}/rank_0_0/backbone "
                "for vLLM's torch.compile",
            )
            self.worker_log(0, t + dyn, "backends.py:559", f"Dynamo bytecode transform time: {sim.real(dyn):.2f} s")
            self.worker_log(
                0, t + compile_s, "monitor.py:34", f"torch.compile takes {sim.real(compile_s):.2f} s in total"
            )
            sim.util_frame(t, 60.0)
        peak = model.vllm_peak_gib * self.batched / 8192
        non_torch = self.non_torch = 0.35 + (0.25 if tp > 1 else 0.0)
        t_prof = self.t_prof = t + compile_s + 1.0
        self.compile_s = compile_s
        for r in ranks:
            base = ctx_gib[phys[r]] + w_r
            sim.mem_frame(phys[r], t_prof - 0.8, base * 1024)
            sim.mem_frame(phys[r], t_prof - 0.4, (base + peak + non_torch) * 1024)
            sim.mem_step(phys[r], t_prof, (base + non_torch) * 1024)
        kv = self.kv = self.requested - (w_r + peak + non_torch)
        for r in ranks:
            self.worker_log(r, t_prof + 0.3 + 0.02 * r, "gpu_worker.py:298", f"Available KV cache memory: {kv:.2f} GiB")
        return t_prof + 0.4 + 0.02 * tp

    def _kv_cache(self, t: float) -> float | BootScript:
        """The KV cache in blocks, or the engine's refusal: no memory left for it, or not enough for
        one request of ``max_model_len``."""
        sim, model, core, kv, block, max_len = self.sim, self.model, self.core_pid, self.kv, self.block, self.max_len
        cell = self.cell = model.cell_bytes(self.tp, self.kv_bytes)  # bytes per token per rank, all layers
        site = _vllm_site(self.exe)
        if kv <= 0:
            return self._fail(
                t + 0.2,
                "EngineCore_DP0",
                core,
                "core.py:708",
                [
                    f'  File "{site}/v1/core/kv_cache_utils.py", line 686, in check_enough_kv_cache_memory',
                    "    raise ValueError(",
                    "ValueError: No available memory for the cache blocks. Try increasing "
                    "`gpu_memory_utilization` when initializing the engine.",
                ],
            )
        kv_bytes_avail = int(kv * GIB)
        need = max_len * cell
        if need > kv_bytes_avail:
            est = kv_bytes_avail // cell // block * block
            return self._fail(
                t + 0.2,
                "EngineCore_DP0",
                core,
                "core.py:708",
                [
                    f'  File "{site}/v1/core/kv_cache_utils.py", line 704, in check_enough_kv_cache_memory',
                    "    raise ValueError(",
                    f"ValueError: To serve at least one request with the models's max seq len ({max_len}), "
                    f"({need / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                    f"({kv:.2f} GiB). Based on the available memory, the estimated maximum model length is {est}. "
                    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                    "engine.",
                ],
            )
        num_blocks = kv_bytes_avail // (block * cell)
        tokens = self.tokens = num_blocks * block
        self.log(t + 0.3, "EngineCore_DP0", core, "kv_cache_utils.py:1087", f"GPU KV cache size: {tokens:,} tokens")
        self.log(
            t + 0.31,
            "EngineCore_DP0",
            core,
            "kv_cache_utils.py:1091",
            f"Maximum concurrency for {max_len:,} tokens per request: {tokens / max_len:.2f}x",
        )
        kv_alloc = self.kv_alloc = num_blocks * block * cell / GIB
        phys, ctx_gib, w_r, non_torch = self.phys, self.ctx_gib, self.w_r, self.non_torch
        for r in self.ranks:
            sim.mem_step(phys[r], t + 0.4, (ctx_gib[phys[r]] + w_r + non_torch + kv_alloc) * 1024)
        return t + 0.8

    def _graphs(self, t: float) -> float | BootScript:
        """CUDA graph capture (unless eager): worker 0's PIECEWISE then FULL bars, or the CUDA OOM of
        a capture that needs more than is free."""
        if self.eager:
            return t
        inp, sim, model, site = self.inp, self.sim, self.model, _vllm_site(self.exe)
        ranks, phys, wpid, wname, ctx_gib = self.ranks, self.phys, self.wpid, self.wname, self.ctx_gib
        w_r, non_torch, kv_alloc = self.w_r, self.non_torch, self.kv_alloc
        used = ctx_gib[phys[0]] + w_r + non_torch + kv_alloc
        free = self.free0[0] - used
        g_need = model.vllm_graph_gib
        pw = [b for b in [1, 2, 4, *range(8, 513, 8)] if b <= self.batched]
        fw = [b for b in [1, 2, 4, *range(8, 257, 8)] if b <= self.max_seqs]
        g_s = 0.09 * len(pw) + 0.06 * len(fw)
        sim.util_frame(t, 45.0)
        # worker 0's tqdm bars (one journal record each, see ``_TqdmRun``): PIECEWISE, then FULL
        pdesc = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"
        piece = sim.tqdm(wpid[0], f"({wname[0]} pid={wpid[0]}) ")
        sim.draw(piece, t, _capture_bar(pdesc, 0, len(pw), 0.0))
        if free < g_need:
            k_fail = int(len(pw) * max(free, 0.0) / g_need)
            step = g_s * 0.5 / max(k_fail, 1)
            for k in range(1, k_fail + 1):
                sim.draw(piece, t + step * k, _capture_bar(pdesc, k, len(pw), sim.real(step * k)))
            # the exception leaves the loop: tqdm's close() redraws and ends the line first
            fail_t = t + g_s * 0.5 + 0.2
            sim.close(piece, fail_t - 0.001, _capture_bar(pdesc, k_fail, len(pw), sim.real(g_s * 0.5 + 0.2)))
            oom = (
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {torch_size(g_need / 4 * GIB)}. "
                f"GPU {0 if 'CUDA_VISIBLE_DEVICES' in inp.env else phys[0]} has a total capacity of "
                f"{torch_size(inp.gpu.total_gib * GIB)} of which {torch_size(max(free, 0.0) * GIB)} is free. "
                "Including non-PyTorch "
                f"memory, this process has {torch_size(used * GIB)} memory in use."
            )
            exc_lines = [
                f'  File "{site}/v1/worker/gpu_model_runner.py", line 3442, in capture_model',
                "    self._capture_cudagraphs(",
                oom,
            ]
            return self._fail(t + g_s * 0.5 + 0.2, wname[0], wpid[0], "gpu_model_runner.py:3442", exc_lines)
        p_s = g_s * 0.6
        for k in range(1, len(pw) + 1):
            sim.draw(piece, t + p_s * k / len(pw), _capture_bar(pdesc, k, len(pw), sim.real(p_s * k / len(pw))))
        sim.close(piece, t + p_s + 0.001)
        fdesc = "Capturing CUDA graphs (decode, FULL)"
        full = sim.tqdm(wpid[0], f"({wname[0]} pid={wpid[0]}) ")
        f0 = t + p_s + 0.002
        f_s = g_s - p_s - 0.002
        sim.draw(full, f0, _capture_bar(fdesc, 0, len(fw), 0.0))
        for k in range(1, len(fw) + 1):
            sim.draw(full, f0 + f_s * k / len(fw), _capture_bar(fdesc, k, len(fw), sim.real(f_s * k / len(fw))))
        sim.close(full, t + g_s)
        for r in ranks:
            sim.mem_step(phys[r], t + g_s, (ctx_gib[phys[r]] + w_r + non_torch + kv_alloc + g_need) * 1024)
            self.worker_log(
                r,
                t + g_s + 0.1 + 0.02 * r,
                "gpu_model_runner.py:3480",
                f"Graph capturing finished in {max(1, round(sim.real(g_s)))} secs, took {g_need:.2f} GiB",
            )
        return t + g_s + 0.2 + 0.02 * self.tp

    def _ready(self, t: float) -> BootScript:
        """The engine core's summary, then the API server's routes and startup lines."""
        sim, m, core = self.sim, self.main_pid, self.core_pid
        sim.util_frame(t, 0.0)
        init_s = sim.real(t - (self.t_prof - self.compile_s - 1.0) + 1.0)
        self.log(
            t + 0.1,
            "EngineCore_DP0",
            core,
            "core.py:210",
            f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} seconds",
        )
        t += 1.8
        host = str(self.args.get("host") or "0.0.0.0")
        port = _arg_int(self.args, "port", 8000)
        self.log(t, "APIServer", m, "api_server.py:1634", "Supported_tasks: ['generate']")
        self.log(t + 0.01, "APIServer", m, "api_server.py:1912", f"Starting vLLM API server 0 on http://{host}:{port}")
        self.log(t + 0.02, "APIServer", m, "launcher.py:34", "Available routes are:")
        for i, (route, meth) in enumerate(
            [("/health", "GET"), ("/v1/models", "GET"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST")]
        ):
            self.log(t + 0.02 + 0.001 * i, "APIServer", m, "launcher.py:42", f"Route: {route}, Methods: {meth}")
        self.raw(t + 0.1, "APIServer", m, f"INFO:     Started server process [{m}]")
        self.raw(t + 0.101, "APIServer", m, "INFO:     Waiting for application startup.")
        self.raw(t + 0.102, "APIServer", m, "INFO:     Application startup complete.")
        return self._script(
            "ready",
            t + 0.102,
            serving=ServingFacts(
                self.tokens, self.max_seqs, self.max_len, self.model.decode_tok_s, m, "vllm", "APIServer", False,
                VLLM_SERVING_INTERVAL_S,
            ),
        )
