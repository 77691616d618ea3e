"""Multi-node boot logs for the deployment tests (issue 15), written from the engines' format
strings (``/work/shared/reference/engines.md`` §1.2, §3.1-3.2) with hand-chosen numbers.

    .venv/bin/python tests/nodes_gen.py        # re-make tests/fixtures/nodes/*.log

The numbers are chosen so that every aggregated figure has a known node that sets it (the facts
the tests assert were written from this table, before kvtui read the files):

SGLang 0.5.10, DeepSeek-R1 FP8, TP16 over two 8-GPU H20 nodes, ``--nnodes 2``:
- node 0 (h20-a, TP0-7) starts at 10:00:00, node 1 (h20-b, TP8-15) at 10:00:05;
- distributed init: node 0's ranks begin at 10:00:20 and wait for node 1, whose ranks begin at
  10:01:02; all ranks end at 10:01:06 (node 0) / 10:01:07 (node 1) -> the phase spans
  10:00:20-10:01:07;
- weights: node 0 ends at 10:05:30, node 1 (slower disk) at 10:06:10 -> the phase ends 10:06:10;
  free before weights: node 0 93.52-93.59, node 1 93.41 (TP13) -> min 93.41 set by node 1;
- pool: allocated by all ranks at 10:06:30 (it is sized with an all-reduce), 263,104 tokens
  (TP0, node 0), free after pool min 7.95 (TP2, node 0);
- graphs: captured 10:06:35 to 10:07:40 (node 0) / 10:07:42 (node 1), mem usage max 2.31 (TP9, node 1);
- node 0 serves HTTP and prints ready at 10:08:00; node 1 prints nothing after its capture.
Variants: node 1 with ``--mem-fraction-static 0.85`` (node 0 0.88), node 1 with another
``--dist-init-addr``, and a stalled pair (node 1 never starts distributed init).

vLLM 0.11-style lines, TP16 over two nodes with ``--nnodes 2 --node-rank N --master-addr`` (node 1
``--headless``: workers only, global ranks Worker_TP8-15): ready on node 0 at 11:03:30.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).parent / "fixtures" / "nodes"
DAY = datetime(2026, 11, 20, 10, 0, 0)


_base = [DAY]  # the stamps' day and time: live tests write a boot "now" (``at``)


def _t(sec: float) -> datetime:
    return _base[0] + timedelta(seconds=sec)


def at(start: datetime, make: Callable[[], str]) -> str:
    """``make()``'s log with its stamps moved to begin at ``start`` (a boot happening now)."""
    _base[0] = start
    try:
        return make()
    finally:
        _base[0] = DAY


def _sg(sec: float, rank: int | None, text: str) -> tuple[float, str]:
    stamp = _t(sec).strftime("%Y-%m-%d %H:%M:%S")
    tag = f" TP{rank}" if rank is not None else ""
    return sec, f"[{stamp}{tag}] {text}"


def _server_args(node_rank: int, mf: float, addr: str) -> str:
    return ("server_args=ServerArgs(model_path='/models/DeepSeek-R1', tokenizer_path='/models/DeepSeek-R1', "
            "trust_remote_code=True, dtype='auto', kv_cache_dtype='auto', host='0.0.0.0', port=30000, "
            f"mem_fraction_static={mf}, max_running_requests=None, chunked_prefill_size=8192, "
            "max_prefill_tokens=16384, tp_size=16, pp_size=1, page_size=1, context_length=None, "
            f"cuda_graph_max_bs=160, nnodes=2, node_rank={node_rank}, dist_init_addr='{addr}', "
            "disable_cuda_graph=False, log_level='info')")


def sglang_node(node_rank: int, *, mf: float = 0.88, addr: str = "10.0.0.1:5000", stall: bool = False,
                stall_node0: bool = False) -> str:
    base = node_rank * 8
    start = 0.0 if node_rank == 0 else 5.0
    lines = [_sg(start, None, _server_args(node_rank, mf, addr))]
    init_begin = 20.0 if node_rank == 0 else 62.0
    if stall:
        return "\n".join(t for _, t in lines) + "\n"
    for r in range(base, base + 8):
        lines.append(_sg(init_begin, r, "Init torch distributed begin."))
    if stall_node0:
        return "\n".join(t for _, t in sorted(lines, key=lambda x: x[0])) + "\n"
    init_end = 66.0 if node_rank == 0 else 67.0
    load_end = 330.0 if node_rank == 0 else 370.0
    for i, r in enumerate(range(base, base + 8)):
        lines.append(_sg(init_end, r, f"Init torch distributed ends. elapsed={init_end - init_begin:.2f} s, "
                                      "mem usage=0.91 GB"))
        before = 93.41 if r == 13 else (93.52 + i * 0.01 if node_rank == 0 else 93.48 + i * 0.01)
        lines.append(_sg(init_end + 1, r, f"Load weight begin. avail mem={before:.2f} GB"))
        after = before - 41.20
        lines.append(_sg(load_end, r, f"Load weight end. elapsed={load_end - init_end - 1:.2f} s, "
                                      f"type=DeepseekV3ForCausalLM, quant=fp8, avail mem={after:.2f} GB, "
                                      "mem usage=41.20 GB."))
        # the pool is sized with an all-reduce over all 16 ranks: both nodes allocate at 10:06:30
        lines.append(_sg(390, r, "KV Cache is allocated. #tokens: 263104, KV size: 17.24 GB"))
        pool_end = 7.95 if r == 2 else 8.10 + i * 0.01
        lines.append(_sg(390, r, f"Memory pool end. avail mem={pool_end:.2f} GB"))
        lines.append(_sg(395, r, "Capture cuda graph begin. This can take up to several minutes. "
                                 f"avail mem={pool_end - 0.05:.2f} GB"))
    cap_begin = 395
    cap_end = 460.0 if node_rank == 0 else 462.0
    if node_rank == 0:
        lines.append(_sg(cap_begin, 0, "Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, "
                                       "112, 128, 144, 160]"))
    for i, r in enumerate(range(base, base + 8)):
        mem = 2.31 if r == 9 else 2.10 + i * 0.01
        lines.append(_sg(cap_end, r, f"Capture cuda graph end. Time elapsed: {cap_end - cap_begin:.2f} s. "
                                     f"mem usage={mem:.2f} GB. avail mem={8.10 - mem:.2f} GB."))
    if node_rank == 0:
        lines.append(_sg(463, 0, "max_total_num_tokens=263104, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                                 "max_running_requests=2048, context_len=163840, available_gpu_mem=5.79 GB"))
        lines.append(_sg(470, None, "INFO:     Started server process [4100]"))
        lines.append(_sg(470, None, "INFO:     Waiting for application startup."))
        lines.append(_sg(470, None, "INFO:     Application startup complete."))
        lines.append(_sg(470, None, "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"))
        lines.append(_sg(480, None, "The server is fired up and ready to roll!"))
    return "\n".join(t for _, t in sorted(lines, key=lambda x: x[0])) + "\n"


def _vl(sec: float, proc: str, pid: int, text: str, where: str = "core.py:1") -> tuple[float, str]:
    stamp = (_t(sec) + timedelta(hours=1)).strftime("%m-%d %H:%M:%S")
    return sec, f"({proc} pid={pid}) INFO {stamp} [{where}] {text}"


def vllm_node(node_rank: int) -> str:
    lines: list[tuple[float, str]] = []
    args = ("{'model': '/models/DeepSeek-R1', 'tensor_parallel_size': 16, 'gpu_memory_utilization': 0.9, "
            f"'nnodes': 2, 'node_rank': {node_rank}, 'master_addr': '10.0.0.1', 'master_port': 29500"
            + (", 'headless': True" if node_rank else "") + "}")
    if node_rank == 0:
        lines.append(_vl(0, "APIServer", 2211, "vLLM API server version 0.11.0", "api_server.py:1839"))
        lines.append(_vl(0, "APIServer", 2211, f"non-default args: {args}", "utils.py:233"))
    else:
        lines.append(_vl(4, "APIServer", 3100, "vLLM API server version 0.11.0", "api_server.py:1839"))
        lines.append(_vl(4, "APIServer", 3100, f"non-default args: {args}", "utils.py:233"))
    base = node_rank * 8
    for i, r in enumerate(range(base, base + 8)):
        pid = 2350 + r
        p = f"Worker_TP{r}"
        lines.append(_vl(30, p, pid, f"rank {r} in world size 16 is assigned as DP rank 0, PP rank 0, TP rank {r}, "
                                     f"EP rank {r}", "parallel_state.py:1208"))
        lines.append(_vl(31, p, pid, "Starting to load model /models/DeepSeek-R1...", "gpu_model_runner.py:2602"))
        took = 150.0 if node_rank == 0 else 170.0
        lines.append(_vl(31 + took, p, pid, f"Loading weights took {took:.2f} seconds", "default_loader.py:267"))
        lines.append(_vl(32 + took, p, pid, f"Model loading took 41.2051 GiB and {took + 1:.6f} seconds",
                         "gpu_model_runner.py:2653"))
        kv = 36.80 if r == 11 else 37.10 + i * 0.01
        lines.append(_vl(200, p, pid, f"Available KV cache memory: {kv:.2f} GiB", "gpu_worker.py:298"))
        lines.append(_vl(205, p, pid, f"Graph capturing finished in 9 secs, took {1.52 if r == 3 else 1.40:.2f} GiB",
                         "gpu_model_runner.py:3480"))
    if node_rank == 0:
        lines.append(_vl(201, "EngineCore_DP0", 2290, "GPU KV cache size: 2,401,664 tokens", "kv_cache_utils.py:1087"))
        lines.append(_vl(201, "EngineCore_DP0", 2290, "Maximum concurrency for 163,840 tokens per request: 14.66x",
                         "kv_cache_utils.py:1091"))
        lines.append(_vl(206, "EngineCore_DP0", 2290,
                         "init engine (profile, create kv cache, warmup model) took 175.87 seconds"))
        lines.append(_vl(210, "APIServer", 2211, "Starting vLLM API server 0 on http://0.0.0.0:8000",
                         "api_server.py:1912"))
        lines.append((210, "(APIServer pid=2211) INFO:     Started server process [2211]"))
        lines.append((210, "(APIServer pid=2211) INFO:     Waiting for application startup."))
        lines.append((210, "(APIServer pid=2211) INFO:     Application startup complete."))
    return "\n".join(t for _, t in sorted(lines, key=lambda x: x[0])) + "\n"


FILES = {
    "sglang-tp16-node0.log": lambda: sglang_node(0),
    "sglang-tp16-node1.log": lambda: sglang_node(1),
    "sglang-tp16-node1-mf085.log": lambda: sglang_node(1, mf=0.85),
    "sglang-tp16-node1-addr.log": lambda: sglang_node(1, addr="10.0.0.9:5000"),
    "sglang-tp16-stall-node0.log": lambda: sglang_node(0, stall_node0=True),
    "sglang-tp16-stall-node1.log": lambda: sglang_node(1, stall=True),
    "vllm-tp16-node0.log": lambda: vllm_node(0),
    "vllm-tp16-node1.log": lambda: vllm_node(1),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, make in FILES.items():
        (OUT / name).write_text(make())


if __name__ == "__main__":
    main()
