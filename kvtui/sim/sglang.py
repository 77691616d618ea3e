"""The SGLang 0.5.x boot, simulated: its argument parser, the resolved server arguments, distributed
init, weights, the KV pool (``rest = A - P*(1 - f)``), CUDA graph capture, a draft model, and the
engine's own failures and texts."""

from __future__ import annotations

import math
import random
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from kvtui.sim.presets import GIB, MODELS, QWEN3_32B_EAGLE3, ModelSpec
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

# dest name -> (type, default). Order = the order of ServerArgs fields in the engine's dump.
SGLANG_ARGS: dict[str, tuple[str, object]] = {
    "model_path": ("str", None),
    "tokenizer_path": ("str", None),
    "tokenizer_mode": ("str", "auto"),
    "skip_tokenizer_init": (_BOOL, False),
    "load_format": ("str", "auto"),
    "trust_remote_code": (_BOOL, False),
    "context_length": ("int", None),
    "is_embedding": (_BOOL, False),
    "revision": ("str", None),
    "host": ("str", "127.0.0.1"),
    "port": ("int", 30000),
    "skip_server_warmup": (_BOOL, False),
    "dtype": ("str", "auto"),
    "quantization": ("str", None),
    "kv_cache_dtype": ("str", "auto"),
    "mem_fraction_static": ("float", None),
    "max_running_requests": ("int", None),
    "max_queued_requests": ("int", None),
    "max_total_tokens": ("int", None),
    "chunked_prefill_size": ("int", None),
    "max_prefill_tokens": ("int", 16384),
    "schedule_policy": ("str", "fcfs"),
    "schedule_conservativeness": ("float", 1.0),
    "page_size": ("int", None),
    "device": ("str", "cuda"),
    "tp_size": ("int", 1),
    "pp_size": ("int", 1),
    "stream_interval": ("int", 1),
    "random_seed": ("int", None),
    "watchdog_timeout": ("float", 300.0),
    "log_level": ("str", "info"),
    "log_requests": (_BOOL, False),
    "api_key": ("str", None),
    "served_model_name": ("str", None),
    "reasoning_parser": ("str", None),
    "tool_call_parser": ("str", None),
    "dp_size": ("int", 1),
    "nnodes": ("int", 1),
    "node_rank": ("int", 0),
    "dist_init_addr": ("str", None),
    "load_balance_method": ("str", "round_robin"),
    "attention_backend": ("str", None),
    "speculative_algorithm": ("str", None),
    "speculative_draft_model_path": ("str", None),
    "speculative_num_steps": ("int", None),
    "speculative_eagle_topk": ("int", None),
    "speculative_num_draft_tokens": ("int", None),
    "ep_size": ("int", 1),
    "enable_dp_attention": (_BOOL, False),
    "disable_radix_cache": (_BOOL, False),
    "cuda_graph_max_bs": ("int", None),
    "disable_cuda_graph": (_BOOL, False),
    "enable_torch_compile": (_BOOL, False),
    "enable_mixed_chunk": (_BOOL, False),
    "enable_metrics": (_BOOL, False),
}


_NODE_ARGS = ("nnodes", "node_rank", "dist_init_addr")  # dumped only by a multi-node server


_ALIASES: dict[str, str] = {
    "tp": "tp_size",
    "tensor_parallel_size": "tp_size",
    "dp": "dp_size",
    "data_parallel_size": "dp_size",
    "pp": "pp_size",
    "pipeline_parallel_size": "pp_size",
    "ep": "ep_size",
    "expert_parallel_size": "ep_size",
    "model": "model_path",
}


_OPTION_NAMES: dict[str, str] = {"--" + k.replace("_", "-"): k for k in SGLANG_ARGS} | {
    "--" + k.replace("_", "-"): v for k, v in _ALIASES.items()
}


def parse_sglang_args(args: Sequence[str]) -> dict[str, object]:
    """The engine's argparse: ``--k v`` / ``--k=v``, unique-prefix abbreviations, typed values."""
    values = _parse_options(args, SGLANG_ARGS, _OPTION_NAMES)
    if "model_path" not in values:
        raise ArgError("the following arguments are required: --model-path")
    return values


CAPTURE_FAILED_HELP = (
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
    "3. disable torch compile by not using --enable-torch-compile",
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
)


def default_capture_bs(max_bs: int) -> list[int]:
    """SGLang's batch sizes to capture, ascending, up to ``max_bs``."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 1025, 16)]
    return [b for b in sizes if b <= max_bs]


class _SglangBoot:
    """One SGLang boot. ``run`` goes through the phases in order (arguments, resolved server
    arguments and ranks, distributed init, weights, KV pool, CUDA graphs, the draft model, ready);
    each phase leaves what later ones need on the instance (``args``, ``model``, ``tp``, ``ranks``,
    ``phys``, ``tag``, ``pid``, ``free0`` (P before the context), ``p_r`` (P), ``a_r`` (A),
    ``avail``, ``tokens``, ``mrr``, …) and returns the time it ended, or the failed boot's script."""

    def __init__(self, inp: BootInput) -> None:
        self.inp = inp
        ms = inp.env.get("SGLANG_LOG_MS", "0").strip().lower() in ("1", "true", "yes")
        self.sim = _Sim(inp, ms)
        rng = random.Random(f"pids:{inp.seed}:{inp.boot_no}")
        self.main_pid = rng.randrange(2000, 60000)
        self.graphs_gib: dict[int, float] = {}  # per rank: what the captured graphs hold (private pools)
        self.exe = inp.argv[0] if inp.argv else "python"
        self.site = _site_packages(self.exe)
        self.jit = random.Random(f"timing:{inp.seed}:{shlex.join(inp.argv)}")
        self.rank_pids: dict[int, int] = {}
        self.aux_pids: tuple[int, ...] = ()

    # -- helpers ------------------------------------------------------------------------------

    def _fail(self, sim_t: float, *, code: str, status: str, result: str) -> BootScript:
        for gpu in list(self.sim.mem):
            self.sim.mem_frame(gpu, sim_t, self.sim.mem[gpu][-1][1])
            self.sim.mem_frame(gpu, sim_t, 0.0)
        self.sim.util_frame(sim_t, 0.0)
        return self._script("failed", sim_t, eof=True, exit_code=code, exit_status=status, result=result)

    def _script(self, outcome: str, sim_t: float, *, eof: bool = False, **more: Any) -> BootScript:
        """The boot's script as it ends at ``sim_t`` with ``outcome`` (``more``: the exit, the
        serving facts); ``eof``: the process tree is gone, pending bars end there."""
        sim = self.sim
        lines = sim.sorted_lines(eof=sim.at(sim_t)) if eof else sim.sorted_lines()
        return BootScript(
            start=self.inp.start, lines=lines, outcome=outcome, end_t=sim.at(sim_t), main_pid=self.main_pid,
            rank_pids=self.rank_pids, aux_pids=self.aux_pids, exe=self.exe, mem=sim.mem, util=sim.util,
            speed=self.inp.speed, **more,
        )

    def _traceback(self, frames: Sequence[tuple[str, int, str, str]]) -> list[str]:
        out = ["Traceback (most recent call last):"]
        for path, lineno, func, code in frames:
            out.append(f'  File "{self.site}/sglang/{path}", line {lineno}, in {func}')
            out.append(f"    {code}")
        return out

    def _scheduler_frames(self) -> list[tuple[str, int, str, str]]:
        return [
            ("srt/managers/scheduler.py", 3061, "run_scheduler_process", "scheduler = Scheduler("),
            ("srt/managers/scheduler.py", 362, "__init__", "self.init_model_worker()"),
            ("srt/managers/scheduler.py", 518, "init_model_worker", "self.init_tp_model_worker()"),
            (
                "srt/managers/scheduler.py",
                476,
                "init_tp_model_worker",
                "self.tp_worker = TpModelWorker(**worker_kwargs)",
            ),
            ("srt/managers/tp_worker.py", 247, "__init__", "self._init_model_runner()"),
            ("srt/managers/tp_worker.py", 330, "_init_model_runner", "self._model_runner = ModelRunner("),
            ("srt/model_executor/model_runner.py", 412, "__init__", "self.initialize(pre_model_load_memory)"),
        ]

    def _die(self, sim_t: float, rank_tag: str, pid: int, lines: Sequence[str], *,
             sigquit: str = "Received sigquit from a child process. It usually means the child failed.") -> BootScript:
        """A scheduler raised: its traceback, the main process's SIGQUIT line (the launch phase's
        handler by default; the running phase's is ``TokenizerManager``'s), the process tree killed."""
        first, *rest = lines
        self.sim.emit(sim_t, f"Scheduler hit an exception: {first}", pid, tag=rank_tag)
        for i, text in enumerate(rest):
            self.sim.emit(sim_t + 0.0001 * (i + 1), text, pid, raw=True)
        t = sim_t + 0.35
        self.sim.emit(t, sigquit, self.main_pid)
        return self._fail(t + 0.25, code="killed", status="9/KILL", result="signal")

    # -- the boot -------------------------------------------------------------------------------

    def run(self) -> BootScript:
        """The boot, phase by phase; a phase that fails returns the failed boot's script."""
        args = self._args()
        if isinstance(args, BootScript):
            return args
        t = self._resolve(args)
        if isinstance(t, BootScript):
            return t
        if self.inp.stall_node is not None and self.nnodes > 1:
            return self._stalled(t)
        t = self._distributed_init(t)
        if isinstance(t, BootScript):
            return t  # waiting at distributed init for a node that is not coming
        t = self._load_weights(t)
        t = self._kv_pool(t)
        if isinstance(t, BootScript):
            return t
        t = self._graphs(t, "target")
        if isinstance(t, BootScript):
            return t
        if self.draft is not None:
            t = self._draft(t, self.draft)
            if isinstance(t, BootScript):
                return t
        return self._ready(t)

    def _args(self) -> dict[str, object] | BootScript:
        """``python -m sglang.launch_server ARGS``, parsed as the engine's argparse would."""
        argv = list(self.inp.argv)
        sim = self.sim
        if len(argv) < 3 or argv[1] != "-m" or argv[2] not in ("sglang.launch_server", "sglang.srt.server"):
            text = f"{self.exe}: No module named {argv[2] if len(argv) > 2 else 'sglang'}"
            sim.emit(0.3, text, self.main_pid, raw=True)
            return self._fail(0.35, code="exited", status="1/FAILURE", result="exit-code")
        try:
            return parse_sglang_args(argv[3:])
        except ArgError as exc:
            sim.emit(
                1.6,
                "usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH] [...]",
                self.main_pid,
                raw=True,
            )
            sim.emit(1.6001, f"launch_server.py: error: {exc}", self.main_pid, raw=True)
            return self._fail(1.65, code="exited", status="2/INVALIDARGUMENT", result="exit-code")

    def _resolve(self, args: dict[str, object]) -> float | BootScript:
        """The resolved server arguments (``ServerArgs.__post_init__``), printed; the ranks and their
        GPUs. Returns the time of the ``server_args=`` line."""
        inp, sim, gpu = self.inp, self.sim, self.inp.gpu
        self.args = args
        self.new_fmt = inp.preset.version >= "0.5.14"
        model_path = str(args["model_path"])
        model = self.model = MODELS.get(model_path.rstrip("/"), inp.preset.model)
        tp = self.tp = _arg_int(args, "tp_size", 1)
        visible = _visible_gpus(inp.env, gpu.count)
        spec = self.spec = args.get("speculative_algorithm")
        self.draft = None
        if spec:
            draft_path = str(args.get("speculative_draft_model_path") or "")
            self.draft = MODELS.get(draft_path.rstrip("/")) or QWEN3_32B_EAGLE3
        chunk = self.chunk = _arg_int(args, "chunked_prefill_size", 8192)
        max_bs = self.max_bs = _arg_int(args, "cuda_graph_max_bs", 256 if tp < 4 else 512)
        if "mem_fraction_static" in args:
            frac = _arg_float(args, "mem_fraction_static", 0.0)
        else:
            reserved = 512 + max(chunk, 2048) * 1.5 + max_bs * 2 + tp / 8 * 1024
            if gpu.total_mib > 60 * 1024:
                reserved = max(reserved, 10240)
            if spec:
                reserved += 4096
            frac = round((gpu.total_mib - reserved) / gpu.total_mib, 3)
        self.frac = frac
        page = self.page = max(1, _arg_int(args, "page_size", 1))
        self.kv_torch, self.kv_bytes = _kv_dtype(args.get("kv_cache_dtype"), model.dtype)
        rseed = args.get("random_seed")
        if rseed is None:
            rseed = random.Random(f"rseed:{inp.seed}:{inp.boot_no}").randrange(1, 2**30)
        resolved = self.resolved = dict(args)
        resolved.update(
            tokenizer_path=args.get("tokenizer_path") or model_path,
            served_model_name=args.get("served_model_name") or model_path,
            mem_fraction_static=frac,
            chunked_prefill_size=chunk,
            cuda_graph_max_bs=max_bs,
            page_size=page,
            random_seed=rseed,
        )
        if spec:
            resolved.setdefault("speculative_num_steps", 3)
            resolved.setdefault("speculative_eagle_topk", 1)
            resolved.setdefault("speculative_num_draft_tokens", 4)
        nnodes = self.nnodes = max(1, _arg_int(args, "nnodes", 1))
        node = self.node = _arg_int(args, "node_rank", 0)
        shown = {k: d for k, (_, d) in SGLANG_ARGS.items() if nnodes > 1 or k not in _NODE_ARGS}
        dump = ", ".join(f"{k}={resolved.get(k, d)!r}" for k, d in shown.items())
        t = 3.6 + self.jit.uniform(0.0, 0.8)
        sim.emit(t, f"server_args=ServerArgs({dump})", self.main_pid)
        local = tp // nnodes  # this node's ranks: global ranks node*local … node*local+local-1
        if local > len(visible) or local < 1:
            tb = [
                *self._traceback(self._scheduler_frames()[:1]),
                "RuntimeError: CUDA error: invalid device ordinal",
                "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                "below might be incorrect.",
                "",
            ]
            return self._die(t + 2.0, " TP0" if tp > 1 else "", self.main_pid + 2, tb)
        ranks = self.ranks = list(range(local))
        self.phys = {r: visible[r] for r in ranks}
        self.rank_pids = {self.phys[r]: self.main_pid + 2 + r for r in ranks}
        self.aux_pids = (self.main_pid + 2 + local,)
        self.tag = {r: (f" TP{node * local + r}" if tp > 1 else "") for r in ranks}
        self.pid = {r: self.main_pid + 2 + r for r in ranks}
        # the same cards every boot: per-GPU constants (each node of a deployment has its own cards)
        hw = random.Random(f"hw:{inp.seed}" + (f":node{node}" if nnodes > 1 else ""))
        self.ctx_gib = {g: 0.86 + 0.04 * hw.random() for g in range(gpu.count)}
        for r in ranks:
            sim.mem_frame(self.phys[r], 0.0, 0.0)
        return t

    def _distributed_init(self, t: float) -> float | BootScript:
        """P1: every rank's CUDA context; the memory each sees free (``P``), a warning when they differ."""
        inp, sim, jit, gpu = self.inp, self.sim, self.jit, self.inp.gpu
        ranks, phys, tag, pid, ctx_gib = self.ranks, self.phys, self.tag, self.pid, self.ctx_gib
        t0 = t + 3.2 + jit.uniform(0.0, 0.6)
        free0: dict[int, float] = {}
        p_r: dict[int, float] = {}
        self.free0, self.p_r = free0, p_r
        for r in ranks:
            g = phys[r]
            foreign = inp.foreign.mib / 1024.0 if inp.foreign and inp.foreign.gpu == g else 0.0
            free0[r] = gpu.total_gib - gpu.idle_mib / 1024.0 - foreign
            p_r[r] = free0[r] - ctx_gib[g]
            sim.emit(t0 + 0.03 * r, "Init torch distributed begin.", pid[r], tag=tag[r])
            sim.mem_frame(g, t0 + 0.03 * r, 0.0)
        t1 = t0 + 3.3
        if inp.meet_at is not None and self.nnodes > 1:
            # NCCL init ends once every node is there: until the last one arrives, this one waits
            if inp.meet_at == math.inf:
                return self._waiting(t0)
            t1 = max(t1, (inp.meet_at - inp.start) * inp.speed + 0.6)
        big_p = self.big_p = min(p_r.values())
        for r in ranks:
            el = 3.2 + 0.4 * jit.random()
            sim.emit(
                t1 + 0.04 * r,
                f"Init torch distributed ends. elapsed={self.sim.real(el):.2f} s, mem usage={ctx_gib[phys[r]]:.2f} GB",
                pid[r],
                tag=tag[r],
            )
            sim.mem_frame(phys[r], t1 + 0.04 * r, ctx_gib[phys[r]] * 1024)
            if self.tp > 1 and big_p < p_r[r] * 0.9:
                sim.emit(
                    t1 + 0.04 * r + 0.001,
                    "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                    f"min_per_gpu_memory={big_p}, local_gpu_memory={p_r[r]}, "
                    f"local_gpu_memory * 0.9={p_r[r] * 0.9}",
                    pid[r],
                    tag=tag[r],
                )
        sim.util_frame(t1, 2.0)
        return t1

    def _load_weights(self, t1: float) -> float:
        """P2: the target's weights, shard by shard; the memory left after them (``A``)."""
        sim, model, tp = self.sim, self.model, self.tp
        ranks, phys, tag, pid, ctx_gib, p_r = self.ranks, self.phys, self.tag, self.pid, self.ctx_gib, self.p_r
        t2 = t1 + 0.5
        w_r = model.weights_gib / tp + model.replicated_gib
        for r in ranks:
            sim.emit(t2 + 0.03 * r, f"Load weight begin. avail mem={p_r[r]:.2f} GB", pid[r], tag=tag[r])
        for r in ranks:
            sim.mem_frame(phys[r], t2 + 0.4, ctx_gib[phys[r]] * 1024)
        load_s = model.load_seconds * (8 / max(tp, 1)) ** 0.35
        t_load_end = self._shards(t2 + 0.4, load_s, model.shards, ranks, phys, ctx_gib, w_r, pid[0])
        a_r = self.a_r = {r: p_r[r] - w_r for r in ranks}
        quant = f"quant={model.quant}, " if model.quant else ""
        for r in ranks:
            sim.emit(
                t_load_end + 0.05 * r,
                f"Load weight end. elapsed={self.sim.real(t_load_end - t2):.2f} s, type={model.arch}, "
                f"{quant}avail mem={a_r[r]:.2f} GB, mem usage={w_r:.2f} GB.",
                pid[r],
                tag=tag[r],
            )
        return t_load_end

    def _pool_tokens(self, t3: float) -> int:
        """``rest = A - P*(1 - f)``, in cells, capped by ``max_total_tokens``, page-aligned."""
        sim, model, args, ranks, tag, pid = self.sim, self.model, self.args, self.ranks, self.tag, self.pid
        big_a = min(self.a_r.values())
        cell = self.cell = model.cell_bytes(self.tp, self.kv_bytes)
        sizing_cell = float(cell)
        if self.draft is not None and self.new_fmt:
            sizing_cell = cell * (1 + self.draft.layers / model.layers)
        rest = big_a - self.big_p * (1 - self.frac)
        tokens = int(int(rest * GIB) // sizing_cell) if rest > 0 else math.floor(rest * GIB / sizing_cell)
        cap = _arg_int(args, "max_total_tokens", 0) if "max_total_tokens" in args else None
        if cap is not None and tokens > 0:
            if cap > tokens:
                for r in ranks:
                    sim.emit(
                        t3 + 0.01 * r,
                        f"max_total_tokens={cap} is larger than the profiled value {tokens}. "
                        "Use the profiled value instead.",
                        pid[r],
                        tag=tag[r],
                    )
            tokens = min(tokens, cap)
        return tokens // self.page * self.page

    def _kv_pool(self, t_load_end: float) -> float | BootScript:
        """P3: the KV pool and the request table; a pool that cannot fit is the engine's refusal or
        torch's OOM."""
        sim, model, args, tp, page = self.sim, self.model, self.args, self.tp, self.page
        ranks, phys, tag, pid, free0, a_r = self.ranks, self.phys, self.tag, self.pid, self.free0, self.a_r
        self.context_len = context_len = _arg_int(args, "context_length", model.max_context)
        t3 = t_load_end + 0.05 * tp + 0.3
        tokens = self.tokens = self._pool_tokens(t3)
        cell = self.cell
        sim.emit(t3 + 0.05, f"Using KV cache dtype: {self.kv_torch}", pid[0], tag=tag[0])
        if tokens <= 0:
            tb = [
                *self._traceback(
                    [
                        *self._scheduler_frames(),
                        ("srt/model_executor/model_runner.py", 611, "initialize", "self.init_memory_pool("),
                        (
                            "srt/model_executor/model_runner_kv_cache_mixin.py",
                            402,
                            "init_memory_pool",
                            "self.max_total_num_tokens = self.profile_max_num_token(total_gpu_memory)",
                        ),
                        ("srt/model_executor/pool_configurator.py", 118, "calculate_pool_sizes", "raise RuntimeError("),
                    ]
                ),
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={self.frac}",
                "",
            ]
            return self._die(t3 + 0.3, tag[0], pid[0], tb)
        if "max_running_requests" in args:
            mrr = _arg_int(args, "max_running_requests", 1)
        else:
            mrr = min(max(int(tokens / context_len * 512), 2048), 4096)
        mrr = self.mrr = max(1, min(mrr, max(tokens // 2, 1)))
        self.draft_tokens = _arg_int(self.resolved, "speculative_num_draft_tokens", 0) if self.spec else 0
        req_table_gib = (mrr + 1) * (context_len + 4 + self.draft_tokens) * 4 / GIB
        kv_gib = (tokens + page) * cell / GIB
        misc_gib = 16 / 1024
        avail = self.avail = {r: a_r[r] - kv_gib - req_table_gib - misc_gib for r in ranks}
        t4 = t3 + 0.4
        short = min(ranks, key=lambda r: avail[r])
        if avail[short] < 0:  # the pools do not fit in what the weights left: torch cannot allocate them
            return self._pool_oom(t4, short, model, tokens, page, cell, req_table_gib, a_r, phys, tag, pid)
        for r in ranks:
            sim.emit(t4 + 0.02 * r, self._kv_line(model, tokens, page, cell, self.kv_torch, tp, self.new_fmt), pid[r],
                     tag=tag[r])
            sim.mem_step(phys[r], t4 + 0.02 * r, (free0[r] - (a_r[r] - kv_gib)) * 1024)
        t5 = t4 + 0.5
        for r in ranks:
            sim.emit(t5 + 0.02 * r, f"Memory pool end. avail mem={avail[r]:.2f} GB", pid[r], tag=tag[r])
            sim.mem_step(phys[r], t5 + 0.02 * r, (free0[r] - avail[r]) * 1024)
        return t5 + 1.5 + 0.02 * tp

    def _graphs(self, t_cap: float, who: str) -> float | BootScript:
        """P4: CUDA graph capture for the target (``verify`` with a draft) or the draft model; the
        time after it (``t_cap`` when nothing is captured)."""
        capture_bs = [b for b in default_capture_bs(self.max_bs) if b <= self.mrr]
        if bool(self.args.get("disable_cuda_graph")) or not capture_bs:
            return t_cap
        if who == "target":
            role, ntok, model = ("verify", self.draft_tokens, self.model) if self.spec else ("decode", 1, self.model)
        else:
            assert self.draft is not None
            role, ntok, model = "decode", 1, self.draft
        return self._capture(t_cap, who, role, ntok, model, capture_bs, self.ranks, self.phys, self.free0, self.avail,
                             self.tag, self.pid, self.new_fmt)

    def _draft(self, t_cap: float, draft: ModelSpec) -> float | BootScript:
        """The draft model (EAGLE): its own load, pool and capture."""
        sim, tp, tokens, page = self.sim, self.tp, self.tokens, self.page
        ranks, phys, tag, pid, free0, avail = self.ranks, self.phys, self.tag, self.pid, self.free0, self.avail
        t_d = t_cap + 0.8
        wd = draft.weights_gib / tp + draft.replicated_gib
        for r in ranks:
            sim.emit(t_d + 0.02 * r, f"Load weight begin. avail mem={avail[r]:.2f} GB", pid[r], tag=tag[r])
        base = {r: free0[r] - avail[r] for r in ranks}
        t_de = self._shards(t_d + 0.3, draft.load_seconds, draft.shards, ranks, phys, None, wd, pid[0], base)
        for r in ranks:
            avail[r] -= wd
            sim.emit(
                t_de + 0.02 * r,
                f"Load weight end. elapsed={self.sim.real(t_de - t_d):.2f} s, type={draft.arch}, "
                f"avail mem={avail[r]:.2f} GB, mem usage={wd:.2f} GB.",
                pid[r],
                tag=tag[r],
            )
        dcell = draft.cell_bytes(tp, self.kv_bytes)
        dkv_gib = (tokens + page) * dcell / GIB
        t_dk = t_de + 0.3 + 0.02 * tp
        for r in ranks:
            avail[r] -= dkv_gib
            sim.emit(
                t_dk + 0.02 * r,
                self._kv_line(draft, tokens, page, dcell, self.kv_torch, tp, self.new_fmt),
                pid[r],
                tag=tag[r],
            )
            sim.mem_step(phys[r], t_dk + 0.02 * r, (free0[r] - avail[r]) * 1024)
        t_dp = t_dk + 0.2 + 0.02 * tp
        for r in ranks:
            sim.emit(t_dp + 0.02 * r, f"Memory pool end. avail mem={avail[r]:.2f} GB", pid[r], tag=tag[r])
        return self._graphs(t_dp + 0.5 + 0.02 * tp, "draft")

    def _waiting(self, t0: float) -> BootScript:
        """A node whose ranks began distributed init and wait there for a node that is not coming
        (its contexts held): the script ends at ``t0``, alive, printing nothing more."""
        sim = self.sim
        for r in self.ranks:
            sim.mem_frame(self.phys[r], t0 + 0.03 * r, self.ctx_gib[self.phys[r]] * 1024)
        sim.util_frame(t0, 0.0)
        return self._script("stalled", t0)

    def arrival(self) -> float | None:
        """When this boot's ranks reach distributed init (clock seconds), or None when they never
        do (a bad argument, the stalled node): what the other nodes wait for."""
        args = self._args()
        if isinstance(args, BootScript):
            return None
        t = self._resolve(args)
        if isinstance(t, BootScript) or (self.inp.stall_node is not None and self.node == self.inp.stall_node):
            return None
        return self.sim.at(t + 3.2 + self.jit.uniform(0.0, 0.6))

    def _stalled(self, t: float) -> BootScript:
        """A multi-node boot with a node that never arrives (``BootInput.stall_node``): that node
        prints its arguments and nothing more; the others begin distributed init and wait there."""
        sim = self.sim
        if self.node != self.inp.stall_node:
            t0 = t + 3.2 + self.jit.uniform(0.0, 0.6)
            for r in self.ranks:
                sim.emit(t0 + 0.03 * r, "Init torch distributed begin.", self.pid[r], tag=self.tag[r])
                sim.mem_frame(self.phys[r], t0 + 0.03 * r, self.ctx_gib[self.phys[r]] * 1024)
            t = t0
        sim.util_frame(t, 0.0)
        return self._script("stalled", t)

    def _ready(self, t_cap: float) -> BootScript:
        """P5 summary, P6 HTTP, P7 ready (after a warmup request unless skipped). A node of rank
        > 0 of a multi-node deployment serves no HTTP: it prints nothing after its capture."""
        sim, jit, args = self.sim, self.jit, self.args
        ranks, phys, tag, pid, free0, avail = self.ranks, self.phys, self.tag, self.pid, self.free0, self.avail
        if self.node > 0:
            for r in ranks:
                sim.mem_frame(phys[r], t_cap, (free0[r] - avail[r]) * 1024)
            return self._script("ready", t_cap)
        tokens, mrr, context_len = self.tokens, self.mrr, self.context_len
        t6 = t_cap + 0.6
        sim.util_frame(t6, 0.0)
        max_prefill = _arg_int(args, "max_prefill_tokens", 16384)
        sim.emit(
            t6,
            f"max_total_num_tokens={tokens}, chunked_prefill_size={self.chunk}, max_prefill_tokens={max_prefill}, "
            f"max_running_requests={mrr}, context_len={context_len}, available_gpu_mem={avail[0]:.2f} GB",
            pid[0],
            tag=tag[0],
        )
        host = str(args.get("host") or "127.0.0.1")
        port = _arg_int(args, "port", 30000)
        t7 = t6 + 1.1
        m = self.main_pid
        sim.emit(t7, f"INFO:     Started server process [{m}]", m)
        sim.emit(t7 + 0.001, "INFO:     Waiting for application startup.", m)
        sim.emit(t7 + 0.002, "INFO:     Application startup complete.", m)
        sim.emit(t7 + 0.003, f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", m)
        t8 = t7 + 1.0
        if not args.get("skip_server_warmup"):
            cport = 40000 + jit.randrange(20000)
            sim.emit(t8, f'INFO:     127.0.0.1:{cport} - "GET /get_model_info HTTP/1.1" 200 OK', m)
            sim.emit(
                t8 + 0.3,
                "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0,",
                pid[0],
                tag=tag[0],
            )
            short = [r for r in ranks if avail[r] < self.model.first_forward_gib]
            if short:
                return self._warmup_oom(t8 + 0.5, min(short, key=lambda x: (avail[x], x)))
            sim.util_frame(t8 + 0.3, 15.0)
            sim.emit(t8 + 1.0, f'INFO:     127.0.0.1:{cport + 14} - "POST /generate HTTP/1.1" 200 OK', m)
            sim.util_frame(t8 + 1.05, 0.0)
            t8 += 1.1
        sim.emit(t8, "The server is fired up and ready to roll!", m)
        for r in ranks:
            sim.mem_frame(phys[r], t8, (free0[r] - avail[r]) * 1024)
        serving = ServingFacts(tokens, mrr, context_len, self.model.decode_tok_s, pid[0], "sglang", tag[0], sim.ms)
        return self._script("ready", t8, serving=serving)

    # -- pieces ---------------------------------------------------------------------------------

    def _kv_line(self, model: ModelSpec, tokens: int, page: int, cell: int, dtype: str, tp: int, new_fmt: bool) -> str:
        rows = tokens + page
        dt = f"dtype: {dtype}, " if new_fmt else ""
        if model.attention == "mla":
            return f"KV Cache is allocated. {dt}#tokens: {tokens}, KV size: {rows * cell / GIB:.2f} GB"
        heads = max(1, model.kv_heads // tp)
        kv_bytes = cell // (heads * (model.head_dim + model.v_head_dim) * model.layers)
        k = rows * heads * model.head_dim * model.layers * kv_bytes / GIB
        v = rows * heads * model.v_head_dim * model.layers * kv_bytes / GIB
        return f"KV Cache is allocated. {dt}#tokens: {tokens}, K size: {k:.2f} GB, V size: {v:.2f} GB"

    def _shards(
        self,
        t: float,
        seconds: float,
        shards: int,
        ranks: Sequence[int],
        phys: Mapping[int, int],
        ctx_gib: Mapping[int, float] | None,
        w_r: float,
        pid0: int,
        base_gib: Mapping[int, float] | None = None,
    ) -> float:
        """tqdm shard progress (TP0's process, no prefix) with memory ramping on every rank."""
        sim, jit = self.sim, self.jit
        weights = [0.7 + 0.6 * jit.random() for _ in range(shards)]
        scale = seconds / sum(weights)
        desc = "Loading safetensors checkpoint shards"
        # the loader's bar format ends with "\\n": every redraw is a record of its own ("\\r" first);
        # close() redraws the final state and writes one more newline (an empty record)
        sim.emit(t, f"\r{desc}:   0% Completed | 0/{shards} [00:00<?, ?it/s]", pid0, raw=True)
        done_t = t
        for k in range(1, shards + 1):
            done_t += weights[k - 1] * scale
            el = sim.real(done_t - t)
            sim.emit(done_t, "\r" + _shard_bar(desc, k, shards, el), pid0, raw=True)
            for r in ranks:
                base = ctx_gib[phys[r]] if ctx_gib is not None else (base_gib or {}).get(r, 0.0)
                sim.mem_frame(phys[r], done_t, (base + w_r * k / shards) * 1024)
        close_t = done_t + 0.01
        sim.emit(close_t, "\r" + _shard_bar(desc, shards, shards, sim.real(close_t - t)), pid0, raw=True)
        sim.emit(close_t, "", pid0, raw=True)
        sim.util_frame(t, 4.0)
        sim.util_frame(done_t, 4.0)
        return done_t + 0.3

    def _capture(
        self,
        t: float,
        who: str,
        role: str,
        ntok: int,
        model: ModelSpec,
        capture_bs: Sequence[int],
        ranks: Sequence[int],
        phys: Mapping[int, int],
        free0: Mapping[int, float],
        avail: dict[int, float],
        tag: Mapping[int, str],
        pid: Mapping[int, int],
        new_fmt: bool,
    ) -> float | BootScript:
        sim, inp = self.sim, self.inp
        bs_list = ", ".join(str(b) for b in capture_bs)
        word = "cuda graph" if who == "target" else "draft cuda graph"
        begin_avail = dict(avail)
        for r in ranks:
            if new_fmt:
                text = (
                    f"Capture {who} {role} CUDA graph begin. backend=full, num_tokens_per_bs={ntok}, "
                    f"bs=[{bs_list}], avail mem={avail[r]:.2f} GB"
                )
            else:
                text = f"Capture {word} begin. This can take up to several minutes. avail mem={avail[r]:.2f} GB"
            sim.emit(t + 0.01 * r, text, pid[r], tag=tag[r])
        if not new_fmt and who == "target" and self.node == 0:
            sim.emit(t + 0.005, f"Capture cuda graph bs [{bs_list}]", pid[0], tag=tag[0])
        sim.util_frame(t, 35.0)
        order = sorted(capture_bs, reverse=True)
        total = len(order)
        desc_t = t + 0.05 + 0.01 * len(ranks)
        start_t = desc_t
        used = dict.fromkeys(ranks, 0.0)
        # TP0's tqdm over the batch sizes: the bar, then per size set_description (before the
        # capture) and the update (after it); all of it one journal record (see ``_TqdmRun``)
        bar = sim.tqdm(pid[0])
        sim.draw(bar, desc_t, _capture_bar("", 0, total, 0.0))
        desc = ""
        for k, bs in enumerate(order):
            el = sim.real(desc_t - start_t)
            desc = f"Capturing batches (bs={bs} avail_mem={avail[0]:.2f} GB)"
            sim.draw(bar, desc_t, _capture_bar(desc, k, total, el))
            need = model.graph_per_graph_gib + model.graph_per_bs_gib * bs
            if k == 0:
                need += model.graph_pool_per_bs_gib * bs
            # the rank with the least free memory fails first
            short = [r for r in ranks if avail[r] - need < 0.02]
            if short:
                r = min(short, key=lambda x: (avail[x], x))
                oom_t = desc_t + 0.4
                if r == 0:  # TP0's own exception leaves the loop: tqdm closes before the traceback
                    sim.close(bar, oom_t, _capture_bar(desc, k, total, sim.real(oom_t - start_t)))
                # another rank's traceback ends TP0's pending bar line (journald: pid-change)
                return self._capture_oom(oom_t, r, need, model, phys, free0, avail, used, tag, pid)
            dur = model.capture_seconds_per_graph * (0.55 + 0.45 * bs / order[0]) * (0.9 + 0.2 * self.jit.random())
            desc_t += dur
            for r in ranks:
                avail[r] -= need
                used[r] += need
                sim.mem_step(phys[r], desc_t, (free0[r] - avail[r]) * 1024)
            sim.draw(bar, desc_t, _capture_bar(desc, k + 1, total, sim.real(desc_t - start_t)))
        sim.close(bar, desc_t + 0.001, _capture_bar(desc, total, total, sim.real(desc_t + 0.001 - start_t)))
        t_end = desc_t + 0.2
        for r in ranks:
            mem_use = begin_avail[r] - avail[r]
            if new_fmt:
                text = (
                    f"Capture {who} {role} CUDA graph end. elapsed={sim.real(t_end - t):.2f} s, "
                    f"mem usage={mem_use:.2f} GB, avail mem={avail[r]:.2f} GB."
                )
            else:
                text = (
                    f"Capture {word} end. Time elapsed: {sim.real(t_end - t):.2f} s. "
                    f"mem usage={mem_use:.2f} GB. avail mem={avail[r]:.2f} GB."
                )
            sim.emit(t_end + 0.02 * r, text, pid[r], tag=tag[r])
        sim.util_frame(t_end, 0.0)
        for r in ranks:
            self.graphs_gib[r] = self.graphs_gib.get(r, 0.0) + used[r]
        _ = inp
        return t_end + 0.02 * len(ranks)

    def _warmup_oom(self, t: float, r: int) -> BootScript:
        """The warm-up request's first forward finds less free than it needs on rank ``r``: the
        scheduler's traceback from its event loop, then the running-phase SIGQUIT line (SGLang
        0.5.x ``TokenizerManager``'s handler) and the process tree killed."""
        need = self.model.first_forward_gib * (0.55 + 0.2 * self.jit.random())
        oom = self._torch_oom(r, need, self.avail[r], self.phys, self.graphs_gib.get(r, 0.0))
        tb = [
            *self._traceback(
                [
                    ("srt/managers/scheduler.py", 6231, "run_scheduler_process", "scheduler.event_loop_overlap()"),
                    ("srt/managers/scheduler.py", 2109, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
                    ("srt/managers/scheduler.py", 4801, "run_batch",
                     "batch_result = self.tp_worker.forward_batch_generation("),
                    ("srt/managers/tp_worker.py", 675, "forward_batch_generation", "out = self.model_runner.forward("),
                    ("srt/model_executor/model_runner.py", 1840, "forward", "output = self._forward_raw("),
                ]
            ),
            f"torch.OutOfMemoryError: {oom}",
            "",
        ]
        return self._die(t, self.tag[r], self.pid[r], tb,
                         sigquit="SIGQUIT received. signum=None, frame=None. It usually means one child failed.")

    def _torch_oom(self, r: int, need_gib: float, free_gib: float, phys: Mapping[int, int], private_gib: float) -> str:
        """torch's CUDA out-of-memory text for rank ``r`` asking for ``need_gib`` with ``free_gib`` free."""
        inp = self.inp
        g = phys[r]
        total = inp.gpu.total_gib
        free = max(free_gib, 0.0)
        foreign_gib = inp.foreign.mib / 1024.0 if inp.foreign and inp.foreign.gpu == g else 0.0
        own = total - free - foreign_gib - inp.gpu.idle_mib / 1024.0
        reserved_unalloc = 0.12 + 0.2 * self.jit.random()
        allocated = max(own - 0.55 - reserved_unalloc, 0.0)
        local = phys[r] if "CUDA_VISIBLE_DEVICES" not in inp.env else r
        procs = ""
        if inp.foreign is not None and foreign_gib:
            procs = f"Process {inp.foreign.pid} has {torch_size(foreign_gib * GIB)} memory in use. "
        return (
            f"CUDA out of memory. Tried to allocate {torch_size(need_gib * GIB)}. GPU {local} has a total capacity of "
            f"{torch_size(total * GIB)} of which {torch_size(free * GIB)} is free. {procs}Including non-PyTorch "
            f"memory, this process has {torch_size(own * GIB)} memory in use. Of the allocated memory "
            f"{torch_size(allocated * GIB)} is allocated by PyTorch, with {torch_size(private_gib * GIB)} "
            f"allocated in private pools (e.g., CUDA Graphs), and {torch_size(reserved_unalloc * GIB)} is reserved "
            "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )

    def _pool_oom(
        self,
        t: float,
        r: int,
        model: ModelSpec,
        tokens: int,
        page: int,
        cell: int,
        req_table_gib: float,
        a_r: Mapping[int, float],
        phys: Mapping[int, int],
        tag: Mapping[int, str],
        pid: Mapping[int, int],
    ) -> BootScript:
        """The request table, then the KV buffers, layer by layer, do not fit: torch's OOM in
        ``init_memory_pool`` (the engine sized the pool from a budget the allocations outgrow)."""
        frames = [
            *self._scheduler_frames(),
            ("srt/model_executor/model_runner.py", 611, "initialize", "self.init_memory_pool("),
        ]
        if a_r[r] < req_table_gib:
            need, free = req_table_gib, a_r[r]
            frames += [
                ("srt/model_executor/model_runner_kv_cache_mixin.py", 455, "init_memory_pool",
                 "self.req_to_token_pool = ReqToTokenPool("),
                ("srt/mem_cache/memory_pool.py", 98, "__init__", "self.req_to_token = torch.zeros("),
            ]
        else:
            buffers = model.layers * (1 if model.attention == "mla" else 2)  # K and V per layer (MLA: one)
            need = (tokens + page) * cell / buffers / GIB
            left = a_r[r] - req_table_gib
            free = left - need * math.floor(left / need) if need > 0 else left
            pool = "MLATokenToKVPool" if model.attention == "mla" else "MHATokenToKVPool"
            frames += [
                ("srt/model_executor/model_runner_kv_cache_mixin.py", 502, "init_memory_pool",
                 f"self.token_to_kv_pool = {pool}("),
                ("srt/mem_cache/memory_pool.py", 640, "__init__", "self._create_buffers()"),
                ("srt/mem_cache/memory_pool.py", 671, "_create_buffers", "torch.zeros("),
            ]
        oom = self._torch_oom(r, need, free, phys, 0.0)
        tb = [*self._traceback(frames), f"torch.OutOfMemoryError: {oom}", ""]
        return self._die(t, tag[r], pid[r], tb)

    def _capture_oom(
        self,
        t: float,
        r: int,
        need: float,
        model: ModelSpec,
        phys: Mapping[int, int],
        free0: Mapping[int, float],
        avail: Mapping[int, float],
        used_graphs: Mapping[int, float],
        tag: Mapping[int, str],
        pid: Mapping[int, int],
    ) -> BootScript:
        oom = self._torch_oom(r, need, avail[r], phys, used_graphs[r])
        inner = self._traceback(
            [
                ("srt/model_executor/cuda_graph_runner.py", 391, "__init__", "self.capture()"),
                ("srt/model_executor/cuda_graph_runner.py", 503, "capture", ") = self.capture_one_batch_size("),
                ("srt/model_executor/cuda_graph_runner.py", 654, "capture_one_batch_size", "run_once()"),
                (
                    "srt/model_executor/cuda_graph_runner.py",
                    641,
                    "run_once",
                    "logits_output_or_pp_proxy_tensors = forward(",
                ),
            ]
        )
        outer = self._traceback(
            [
                *self._scheduler_frames(),
                ("srt/model_executor/model_runner.py", 640, "initialize", "self.init_device_graphs()"),
                (
                    "srt/model_executor/model_runner.py",
                    1875,
                    "init_device_graphs",
                    "self.graph_runner = graph_runners[self.device](self)",
                ),
                ("srt/model_executor/cuda_graph_runner.py", 393, "__init__", "raise Exception("),
            ]
        )
        tb = [
            *inner,
            f"torch.OutOfMemoryError: {oom}",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            *outer,
            f"Exception: Capture cuda graph failed: {oom}",
            *CAPTURE_FAILED_HELP,
            "",
        ]
        _ = model, free0
        return self._die(t, tag[r], pid[r], tb)
