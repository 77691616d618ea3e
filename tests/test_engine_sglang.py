# ruff: noqa: E501  (log lines are quoted verbatim)
"""The SGLang grammar, line by line (engines.md section 1), per version and line shape."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

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
from kvtui.engines.sglang import SglangGrammar, parse_server_args

T = Model.TARGET
D = Model.DRAFT


def parse(line: str, g: SglangGrammar | None = None) -> ParsedLine:
    return (g or SglangGrammar()).parse(line)


def metrics(p: ParsedLine) -> dict[str, float]:
    return {e.name: e.value for e in p.events if isinstance(e, Metric)}


def marks(p: ParsedLine) -> list[tuple[Phase, Model, bool]]:
    return [(e.phase, e.model, e.end) for e in p.events if isinstance(e, PhaseMark)]


def of(p: ParsedLine, kind: type[LogEvent]) -> list[LogEvent]:  # type: ignore[valid-type]
    return [e for e in p.events if isinstance(e, kind)]


# ---- the prefix ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "rank", "tp", "ts"),
    [
        (
            "[2026-05-30 22:08:09] The server is fired up and ready to roll!",
            None,
            None,
            datetime(2026, 5, 30, 22, 8, 9),
        ),
        ("[2026-05-30 22:08:02 TP4] Memory pool end. avail mem=11.87 GB", "TP4", 4, datetime(2026, 5, 30, 22, 8, 2)),
        ("[2025-10-06 20:05:22 DP0 TP1] Memory pool end. avail mem=1.00 GB", "DP0 TP1", 1, None),
        ("[2025-10-06 20:05:22 PP1 TP3] Memory pool end. avail mem=1.00 GB", "PP1 TP3", 3, None),  # 0.5.x
        ("[2025-10-06 20:05:22 TP3 PP1] Memory pool end. avail mem=1.00 GB", "TP3 PP1", 3, None),  # 0.4.x
        ("[2025-10-06 20:05:22 TP0 EP0] Memory pool end. avail mem=1.00 GB", "TP0 EP0", 0, None),
        (
            "[2025-10-06 20:05:22 DP1 ATTN_CP1 MOE_DP2 TP5 EP5] Memory pool end. avail mem=1.00 GB",
            "DP1 ATTN_CP1 MOE_DP2 TP5 EP5",
            5,
            None,
        ),
        (
            "[2026-05-30 22:08:02.345 TP2] Memory pool end. avail mem=11.87 GB",  # SGLANG_LOG_MS
            "TP2",
            2,
            datetime(2026, 5, 30, 22, 8, 2, 345000),
        ),
    ],
)
def test_rank_prefix(line: str, rank: str | None, tp: int | None, ts: datetime | None) -> None:
    p = parse(line)
    assert p.rank == rank
    assert p.tp == tp
    assert p.prefixed
    assert p.engine is Engine.SGLANG
    assert p.text.startswith(("Memory pool end", "The server"))
    if ts is not None:
        assert p.ts == ts


def test_wrapper_timestamp_with_an_offset_wins_over_the_naive_engine_stamp() -> None:
    wrapper = datetime(2026, 3, 4, 9, 12, 0, 123456, tzinfo=UTC)
    p = SglangGrammar().parse("[2026-03-04 09:12:00 TP0] Init torch distributed begin.", wrapper)
    assert p.ts == wrapper
    naive = datetime(2026, 3, 4, 9, 12, 0)
    p = SglangGrammar().parse("[2026-03-04 09:12:05 TP0] Init torch distributed begin.", naive)
    assert p.ts == datetime(2026, 3, 4, 9, 12, 5)  # the engine's own stamp beats a naive wrapper


def test_level_prefix_of_debug_builds_is_read_and_stripped() -> None:
    p = parse("[2026-02-09 14:38:13] WARNING server_args.py:1929: Mooncake storage backend does not support it")
    assert p.level == "WARNING"
    assert p.text.startswith("Mooncake")


def test_sniff() -> None:
    g = SglangGrammar()
    assert g.sniff("[2026-05-30 22:08:02 TP4] anything")
    assert g.sniff("Capturing batches (bs=1 avail_mem=38.07 GB): 100%|████| 52/52 [00:04<00:00, 10.83it/s]")
    assert g.sniff("SGLang Version 0.5.11+05fb6a52")
    assert not g.sniff("(APIServer pid=1) INFO 05-14 00:04:17 [api_server.py:1] vLLM API server version 0.11.0")
    assert not g.sniff("INFO 05-14 00:04:17 [gpu_worker.py:460] Available KV cache memory: 15.72 GiB")
    assert not g.sniff("random text [2026-05-30] not a prefix")


# ---- phase lines ---------------------------------------------------------------------------------


def test_server_args_dataclass_repr() -> None:
    p = parse(
        "[2026-04-01 17:40:10] server_args=ServerArgs(model_path='/m/Qwen, 72B', tokenizer_mode='auto', "
        "mem_fraction_static=0.85, max_running_requests=64, context_length=200000, tp_size=8, page_size=1, "
        "cuda_graph_max_bs=64, json_model_override_args='{}', lora_paths=None, enable_dp_attention=False, "
        "cuda_graph_bs=[1, 2, 4], kv_cache_dtype='auto', attention_backend=<AttentionBackend.FA3: 'fa3'>)"
    )
    (b,) = of(p, BootBoundary)
    assert isinstance(b, BootBoundary)
    assert b.kind is BoundaryKind.STARTED
    assert b.new_args
    assert marks(p) == [(Phase.LAUNCH, T, False)]
    (f,) = of(p, Flags)
    assert isinstance(f, Flags)
    v = f.values
    assert v["model_path"] == "/m/Qwen, 72B"
    assert v["mem_fraction_static"] == 0.85
    assert v["max_running_requests"] == 64
    assert v["context_length"] == 200000
    assert v["tp_size"] == 8
    assert v["cuda_graph_max_bs"] == 64
    assert v["json_model_override_args"] == "{}"
    assert v["lora_paths"] is None
    assert v["enable_dp_attention"] is False
    assert v["cuda_graph_bs"] == [1, 2, 4]
    assert v["attention_backend"] == "<AttentionBackend.FA3: 'fa3'>"  # not a literal: kept as text


def test_server_args_dict_form_0523() -> None:
    p = parse(
        "[2026-06-01 07:00:00] server_args={'model_path': '/models/x', 'mem_fraction_static': 0.86, "
        "'tp_size': 4, 'page_size': 1, 'api_key': None}"
    )
    (f,) = of(p, Flags)
    assert isinstance(f, Flags)
    assert f.values == {
        "model_path": "/models/x",
        "mem_fraction_static": 0.86,
        "tp_size": 4,
        "page_size": 1,
        "api_key": None,
    }
    assert any(isinstance(e, VersionHint) and e.version == ">=0.5.23" for e in p.events)


def test_server_args_dict_with_non_literal_values_and_truncation() -> None:
    v = parse_server_args("{'a': 1, 'b': <Enum.X: 2>, 'c': 'x, y', 'd': [1, 2]}")
    assert v == {"a": 1, "b": "<Enum.X: 2>", "c": "x, y", "d": [1, 2]}
    v = parse_server_args("ServerArgs(model_path='/m', mem_fraction_static=0.9, tp_size=8, context_len")
    assert v == {"model_path": "/m", "mem_fraction_static": 0.9, "tp_size": 8}
    assert parse_server_args("garbage") == {}
    assert parse_server_args("ServerArgs(" + "(" * 5000) == {}


@pytest.mark.parametrize(
    ("line", "want_marks", "want_metrics"),
    [
        # P1 distributed init, 0.4.10 / 0.5.10-0.5.16 / 0.5.23
        ("[t TP0] Init torch distributed begin.", [(Phase.INIT, T, False)], {}),
        (
            "[t TP0] Init torch distributed ends. mem usage=0.88 GB",
            [(Phase.INIT, T, True)],
            {"init_mem_usage_gib": 0.88},
        ),
        (
            "[t TP0] Init torch distributed ends. elapsed=3.23 s, mem usage=0.88 GB",
            [(Phase.INIT, T, True)],
            {"init_mem_usage_gib": 0.88},
        ),
        ("[t TP0] Init parallel begin.", [(Phase.INIT, T, False)], {}),
        ("[t TP0] Init parallel ends. elapsed=2.31 s", [(Phase.INIT, T, True)], {}),
        ("[t TP0] Memory baseline taken. mem usage=0.95 GB", [(Phase.INIT, T, True)], {"init_mem_usage_gib": 0.95}),
        # P2 weights
        (
            "[t TP0] Load weight begin. avail mem=78.61 GB",
            [(Phase.LOAD_WEIGHTS, T, False)],
            {"avail_before_load_gib": 78.61},
        ),
        (
            "[t TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=10.70 GB, mem usage=67.90 GB.",
            [(Phase.LOAD_WEIGHTS, T, True)],
            {"avail_after_load_gib": 10.70, "weights_gib": 67.90},
        ),
        (
            "[t TP0] Load weight end. elapsed=300.25 s, type=DeepseekV32ForCausalLM, quant=fp8, fmt=e4m3, "
            "avail mem=53.80 GB, mem usage=84.10 GB.",
            [(Phase.LOAD_WEIGHTS, T, True)],
            {"avail_after_load_gib": 53.80, "weights_gib": 84.10, "load_seconds": 300.25},
        ),
        # P3 KV pool, MHA <=0.5.12 / >=0.5.13, MLA/DSA with and without dtype, label (0.5.23)
        ("[t TP0] Using KV cache dtype: torch.bfloat16", [(Phase.KV_ALLOCATE, T, False)], {}),
        (
            "[t TP5] KV Cache is allocated. #tokens: 2795207, K size: 53.31 GB, V size: 53.31 GB",
            [(Phase.KV_ALLOCATE, T, False)],
            {"kv_tokens": 2795207, "kv_cache_gib": 106.62},
        ),
        (
            "[t TP10] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 387968, K size: 5.92 GB, V size: 5.92 GB",
            [(Phase.KV_ALLOCATE, T, False)],
            {"kv_tokens": 387968, "kv_cache_gib": 11.84},
        ),
        (
            "[t TP0] KV Cache is allocated. #tokens: 570180, KV size: 37.32 GB",
            [(Phase.KV_ALLOCATE, T, False)],
            {"kv_tokens": 570180, "kv_cache_gib": 37.32},
        ),
        (
            "[t TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 926144, KV size: 41.46 GB",
            [(Phase.KV_ALLOCATE, T, False)],
            {"kv_tokens": 926144, "kv_cache_gib": 41.46},
        ),
        (
            "[t TP0] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB",
            [(Phase.KV_ALLOCATE, T, False)],
            {"kv_tokens": 1000, "kv_cache_gib": 2.0},
        ),
        (
            "[t TP0] KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.",
            [(Phase.KV_ALLOCATE, T, False)],
            {"kv_cache_gib": 54.26},
        ),
        ("[t TP0] KV Cache VA upper bound. #tokens: 900000, KV size: 60.00 GB", [(Phase.KV_ALLOCATE, T, False)], {}),
        (
            "[t TP0] Use sliding window memory pool. full_layer_tokens=185897, swa_layer_tokens=148717",
            [(Phase.KV_ALLOCATE, T, False)],
            {"full_tokens": 185897, "swa_tokens": 148717},
        ),
        (
            "[t TP0] Use Sliding window memory pool. full_layer_tokens=100, swa_layer_tokens=80",  # 0.4.10 spelling
            [(Phase.KV_ALLOCATE, T, False)],
            {"full_tokens": 100, "swa_tokens": 80},
        ),
        (
            "[t TP0] Use sliding window memory pool (all SWA). swa_layer_tokens=300000",
            [(Phase.KV_ALLOCATE, T, False)],
            {"swa_tokens": 300000},
        ),
        (
            "[t TP0] SWAKVPool mem usage: 28.93 GB, swa size: 148717, full size: 185897",
            [(Phase.KV_ALLOCATE, T, False)],
            {"swa_kv_gib": 28.93, "swa_tokens": 148717, "full_tokens": 185897},
        ),
        (
            "[t TP0] Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: 0.09GB, ssm_state size: 6.46GB",
            [(Phase.KV_ALLOCATE, T, False)],
            {"mamba_cache_size": 48, "mamba_cache_gib": 6.55},
        ),
        (
            "[t TP0 EP0] DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=8.84 GB, "
            "c128_state_fixed=0.00 GB, swa_fixed=0.30 GB, full_token=5491200",
            [(Phase.KV_ALLOCATE, T, False)],
            {
                "dsv4_bytes_per_full_token": 1670.75,
                "dsv4_available_gib": 8.84,
                "dsv4_full_token": 5491200,
                "dsv4_c128_state_fixed_gib": 0.0,
                "dsv4_swa_fixed_gib": 0.30,
            },
        ),
        (
            "[t TP0] DSv4 memory calculation: bytes_per_full_token=15955.85, available_bytes=19.58 GB, full_token=1317632",
            [(Phase.KV_ALLOCATE, T, False)],
            {"dsv4_bytes_per_full_token": 15955.85, "dsv4_available_gib": 19.58, "dsv4_full_token": 1317632},
        ),
        (
            "[t TP0] DSV4 pool sizes: full=5491200, swa=13312, c4=1372800, c128=42900, c4_state=1664, c128_state=0",
            [(Phase.KV_ALLOCATE, T, False)],
            {"full_tokens": 5491200, "swa_tokens": 13312},
        ),
        (
            "[t TP0] Initialize DeepSeekV4TokenToKVPool with max_num_reqs=4 swa_size=13312 c4_size=749952",
            [(Phase.KV_ALLOCATE, T, False)],
            {},
        ),
        (
            "[t TP0] Memory pool end. avail mem=11.87 GB",
            [(Phase.KV_ALLOCATE, T, True)],
            {"avail_after_pool_gib": 11.87},
        ),
        # P5 summary (TP0), with and without available_gpu_mem (older builds)
        (
            "[t TP0] max_total_num_tokens=432078, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            "max_running_requests=2048, context_len=131072, available_gpu_mem=9.21 GB",
            [],
            {
                "max_total_num_tokens": 432078,
                "chunked_prefill_size": 8192,
                "max_prefill_tokens": 16384,
                "max_running_requests": 2048,
                "context_len": 131072,
                "available_gpu_mem_gib": 9.21,
            },
        ),
        (
            "[t TP0] max_total_num_tokens=444500, max_prefill_tokens=16384, max_running_requests=2049, context_len=131072",
            [],
            {
                "max_total_num_tokens": 444500,
                "max_prefill_tokens": 16384,
                "max_running_requests": 2049,
                "context_len": 131072,
            },
        ),
        # P6 / P7
        ("[t] INFO:     Started server process [7001]", [(Phase.HTTP_UP, T, False)], {}),
        (
            "[t] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
            [(Phase.HTTP_UP, T, False)],
            {},
        ),
        ("[t] INFO:     Application startup complete.", [], {}),
        ('[t] INFO:     127.0.0.1:52312 - "GET /get_model_info HTTP/1.1" 200 OK', [], {}),
        ("[t] The server is fired up and ready to roll!", [(Phase.READY, T, False)], {}),
    ],
)
def test_phase_lines(line: str, want_marks: list[tuple[Phase, Model, bool]], want_metrics: dict[str, float]) -> None:
    p = parse(line.replace("[t", "[2026-01-02 03:04:05"))
    assert marks(p) == want_marks
    got = metrics(p)
    assert set(got) >= set(want_metrics)
    for k, v in want_metrics.items():
        assert got[k] == pytest.approx(v), k


@pytest.mark.parametrize(
    ("line", "model", "end", "seconds", "want"),
    [
        # old wording (<=0.5.13), 0.4.x without figures, 0.5.14-0.5.16 and 0.5.23 wording, piecewise, draft
        (
            "Capture cuda graph begin. This can take up to several minutes. avail mem=11.82 GB",
            T,
            False,
            None,
            {"graph_begin_avail_gib": 11.82},
        ),
        ("Capture cuda graph begin. This can take up to several minutes.", T, False, None, {}),
        (
            "Capture cuda graph end. Time elapsed: 5.38 s. mem usage=0.60 GB. avail mem=23.56 GB.",
            T,
            True,
            5.38,
            {"graph_mem_gib": 0.60, "avail_after_graph_gib": 23.56},
        ),
        ("Capture cuda graph end. Time elapsed: 6.57 s", T, True, 6.57, {}),
        (
            "Capture target decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs=[1, 2, 4, 8], avail mem=16.51 GB",
            T,
            False,
            None,
            {"graph_begin_avail_gib": 16.51, "capture_bs_max": 8, "capture_bs_count": 4},
        ),
        (
            "Capture target decode CUDA graph end. elapsed=52.00 s, mem usage=3.05 GB, avail mem=13.46 GB.",
            T,
            True,
            52.0,
            {"graph_mem_gib": 3.05, "avail_after_graph_gib": 13.46},
        ),
        (
            "Capture target decode CUDA graph end. elapsed=14.70 s, mem usage=1.30 GB, avail mem=13.28 GB, bs=[1, 2, 256].",
            T,
            True,
            14.7,
            {"graph_mem_gib": 1.30, "capture_bs_max": 256, "capture_bs_count": 3},
        ),
        (
            "Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 8192], avail mem=12.52 GB",
            T,
            False,
            None,
            {"graph_begin_avail_gib": 12.52},
        ),
        ("Capture piecewise CUDA graph begin. avail mem=20.00 GB", T, False, None, {"graph_begin_avail_gib": 20.0}),
        (
            "Capture piecewise CUDA graph end. Time elapsed: 9.00 s. mem usage=0.90 GB. avail mem=19.10 GB.",
            T,
            True,
            9.0,
            {"graph_mem_gib": 0.90},
        ),
        (
            "Capture draft cuda graph begin. This can take up to several minutes. avail mem=7.95 GB",
            D,
            False,
            None,
            {"graph_begin_avail_gib": 7.95},
        ),
        (
            "Capture draft extend cuda graph begin (step 1). This can take up to several minutes. avail mem=7.74 GB",
            D,
            False,
            None,
            {},
        ),
        ("Capture draft extend CUDA graph begin. step=1, avail mem=7.74 GB", D, False, None, {}),
        (
            "Capture draft verify CUDA graph end. elapsed=0.77 s, mem usage=0.45 GB, avail mem=6.22 GB.",
            D,
            True,
            0.77,
            {"graph_mem_gib": 0.45},
        ),
    ],
)
def test_capture_lines(line: str, model: Model, end: bool, seconds: float | None, want: dict[str, float]) -> None:
    p = parse("[2026-01-02 03:04:05 TP0] " + line)
    (mark,) = of(p, PhaseMark)
    assert isinstance(mark, PhaseMark)
    assert (mark.phase, mark.model, mark.end, mark.seconds) == (Phase.GRAPH_CAPTURE, model, end, seconds)
    got = {k: v for k, v in metrics(p).items()}
    for k, v in want.items():
        assert got[k] == pytest.approx(v), k
    if "num_tokens=[" in line:
        assert "capture_bs_max" not in got  # token counts are not batch sizes


def test_capture_bs_list_and_tqdm_progress() -> None:
    g = SglangGrammar()
    g.parse(
        "[2026-01-02 03:04:05 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.32 GB"
    )
    p = g.parse("[2026-01-02 03:04:05 TP0] Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32]")
    (sizes,) = of(p, CaptureSizes)
    assert isinstance(sizes, CaptureSizes)
    assert sizes.sizes == (1, 2, 4, 8, 12, 16, 24, 32)
    p = g.parse("Capturing batches (bs=160 avail_mem=1.23 GB):   4%|          | 1/24 [00:01<00:00,  1.10it/s]")
    assert not p.prefixed
    assert p.engine is Engine.SGLANG
    (prog,) = of(p, Progress)
    assert isinstance(prog, Progress)
    assert (prog.phase, prog.done, prog.total) == (Phase.GRAPH_CAPTURE, 1, 24)
    assert metrics(p) == {"capture_bs": 160, "capture_avail_gib": 1.23}
    p = g.parse(
        "Capturing num tokens (num_tokens=8192 avail_mem=12.06 GB):   2%|▏         | 1/58 [01:54<1:48:53, 114.62s/it]"
    )
    assert metrics(p) == {"capture_avail_gib": 12.06}
    # a bare tqdm bar while a capture runs (0.4.x prints no description)
    p = g.parse("100%|██████████| 23/23 [00:06<00:00,  3.51it/s]")
    (prog,) = of(p, Progress)
    assert isinstance(prog, Progress)
    assert (prog.done, prog.total) == (23, 23)


def test_weight_shard_progress() -> None:
    g = SglangGrammar()
    for line, done, total in [
        ("Loading safetensors checkpoint shards:  50% Completed | 15/30 [02:00<00:00, 6.0s/it]", 15, 30),
        ("Multi-thread loading shards:   7% Completed | 1/15 [00:29<06:47, 29.12s/it]", 1, 15),
        ("Loading pt checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.31it/s]", 4, 4),
    ]:
        (prog,) = of(g.parse(line), Progress)
        assert isinstance(prog, Progress)
        assert (prog.phase, prog.done, prog.total) == (Phase.LOAD_WEIGHTS, done, total)


# ---- serving -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "usage", "running", "queued", "gen"),
    [
        (
            "Decode batch. #running-req: 1, #token: 20, token usage: 0.05, gen throughput (token/s): 5.50, #queue-req: 0",
            0.05,
            1,
            0,
            5.5,
        ),
        (
            "Decode batch, #running-req: 12, #token: 9000, token usage: 0.42, cuda graph: True, "
            "gen throughput (token/s): 810.21, #queue-req: 3",
            0.42,
            12,
            3,
            810.21,
        ),
        (
            "Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0,",
            0.0,
            0,
            0,
            None,
        ),
        (
            "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, full token usage: 0.31, swa token usage: 0.02, "
            "#running-req: 0, #queue-req: 5, #pending-token: 0, cuda graph: True, input throughput (token/s): 1.81",
            0.31,  # hybrid: the full pool's usage
            0,
            5,
            None,
        ),
    ],
)
def test_serving_lines(line: str, usage: float, running: int, queued: int, gen: float | None) -> None:
    p = parse("[2026-01-02 03:04:05 TP0] " + line)
    (s,) = p.events
    assert isinstance(s, Serving)
    assert s.token_usage == pytest.approx(usage)
    assert (s.running_reqs, s.queue_reqs) == (running, queued)
    assert s.gen_throughput == (pytest.approx(gen) if gen is not None else None)


# ---- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind", "fatal", "specificity"),
    [
        ("[t TP0] Scheduler hit an exception: Traceback (most recent call last):", None, False, 1),
        ("[t] Received sigquit from a child process. It usually means the child failed.", None, True, 0),
        ("[t] SIGQUIT received. signum=None, frame=None. It usually means one child failed.", None, True, 0),
        (
            "[t] Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common "
            "cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
            None,
            True,
            2,
        ),
        (
            "[t] Subprocess scheduler_1 (pid=41733) crashed with exit code -11. Triggering SIGQUIT for cleanup...",
            None,
            True,
            1,
        ),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            FailureKind.OOM_KV_ALLOCATE,
            False,
            3,
        ),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5",
            FailureKind.OOM_KV_ALLOCATE,
            False,
            3,
        ),
        (
            "RuntimeError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.6. Raise "
            "--mem-fraction-static above 0.726 (minimum viable = 1 - available/pre = 0.7262). If using speculative "
            "decoding, draft weights are now counted.",
            FailureKind.OOM_KV_ALLOCATE,
            False,
            3,
        ),
        ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 GiB.", None, False, 3),
        ("Exception: Capture prefill CUDA graph failed: torch.OutOfMemoryError: CUDA out of memory.", None, False, 3),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "94.97 GiB of which 1.12 GiB is free.",
            None,
            False,
            3,
        ),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory. GPU 0 has a total capacty of 79.2 GiB", None, False, 3),
        ("RuntimeError: CUDA error: out of memory", None, False, 3),
        (
            "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            FailureKind.NCCL,
            False,
            3,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
            FailureKind.NCCL,
            False,
            3,
        ),
        (
            "[t TP3] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
            FailureKind.NCCL,
            False,
            2,
        ),
        (
            "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
            FailureKind.GPU_BUSY,
            False,
            3,
        ),
        ("[t] Initialization failed. warmup error: Traceback (most recent call last):", None, True, 2),
        ("AssertionError: <Response [500]>", None, False, 3),
        ("KeyError: 'model.layers.0.mlp'", None, False, 3),
    ],
)
def test_failure_lines(line: str, kind: FailureKind | None, fatal: bool, specificity: int) -> None:
    p = parse(line.replace("[t", "[2026-01-02 03:04:05"))
    fts = of(p, FailureText)
    assert len(fts) == 1, p.events
    ft = fts[0]
    assert isinstance(ft, FailureText)
    assert (ft.kind, ft.fatal, ft.specificity) == (kind, fatal, specificity)
    assert ft.text == p.text


def test_oom_figures_are_read() -> None:
    p = parse(
        "Exception: Capture cuda graph failed: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. "
        "GPU 0 has a total capacity of 79.25 GiB of which 51.20 MiB is free."
    )
    m = metrics(p)
    assert m["oom_tried_gib"] == pytest.approx(1.02)
    assert m["oom_capacity_gib"] == pytest.approx(79.25)
    assert m["oom_free_gib"] == pytest.approx(51.20 / 1024)


def test_rank_killed_with_sigkill_carries_the_oom_killer_hint() -> None:
    p = parse(
        "[2026-01-02 03:04:05] Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a "
        "common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."
    )
    (ft,) = of(p, FailureText)
    assert isinstance(ft, FailureText)
    assert ft.hint is not None
    assert "OOM killer" in ft.hint


@pytest.mark.parametrize(
    "line",
    [
        "[2026-01-02 03:04:05] max_total_tokens=999999 is larger than the profiled value 432078. Use the profiled value instead.",
        "[2026-01-02 03:04:05] max_running_requests was reduced from the requested 4096 to 2048 (per dp worker) due to the available KV cache capacity.",
        "[2026-01-02 03:04:05 TP1] The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min=70.1, max=78.9",
    ],
)
def test_warnings(line: str) -> None:
    p = parse(line)
    (w,) = p.events
    assert isinstance(w, Warning_)
    assert "unbalanced" not in line or w.kind is FailureKind.GPU_BUSY


def test_plain_lines_have_no_events() -> None:
    for line in [
        "[2026-02-09 14:38:21] Attempting to acquire lock 1275 on ./models/x.lock",
        "[2026-02-09 14:38:20] world_size=1 rank=0 local_rank=0 distributed_init_method=tcp://127.0.0.1:30476 backend=nccl",
        "[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0",
        '  File "/usr/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2903, in run_scheduler_process',
        "    scheduler = Scheduler(",
        "ERROR: This container was built for NVIDIA Driver Release 595.58 or later, but",
        "",
    ]:
        assert parse(line).events == (), line


# ---- the draft model ---------------------------------------------------------------------------


def test_draft_lines_are_tagged_draft_per_rank() -> None:
    g = SglangGrammar()
    seq = [
        ("[t TP0] Load weight begin. avail mem=78.00 GB", (Phase.LOAD_WEIGHTS, T, False)),
        ("[t TP1] Load weight begin. avail mem=78.00 GB", (Phase.LOAD_WEIGHTS, T, False)),
        (
            "[t TP0] Load weight end. elapsed=1 s, type=X, avail mem=60.00 GB, mem usage=18.00 GB.",
            (Phase.LOAD_WEIGHTS, T, True),
        ),
        (
            "[t TP0] KV Cache is allocated. #tokens: 100, K size: 1.00 GB, V size: 1.00 GB",
            (Phase.KV_ALLOCATE, T, False),
        ),
        ("[t TP0] Memory pool end. avail mem=40.00 GB", (Phase.KV_ALLOCATE, T, True)),
        # TP1 is slower: its first load end is still the target's
        (
            "[t TP1] Load weight end. elapsed=1 s, type=X, avail mem=60.00 GB, mem usage=18.00 GB.",
            (Phase.LOAD_WEIGHTS, T, True),
        ),
        ("[t TP0] Load weight begin. avail mem=38.00 GB", (Phase.LOAD_WEIGHTS, D, False)),
        (
            "[t TP0] Load weight end. elapsed=1 s, type=Eagle, avail mem=37.00 GB, mem usage=1.00 GB.",
            (Phase.LOAD_WEIGHTS, D, True),
        ),
        (
            "[t TP0] KV Cache is allocated. #tokens: 100, K size: 0.05 GB, V size: 0.05 GB",
            (Phase.KV_ALLOCATE, D, False),
        ),
        (
            "[t TP1] KV Cache is allocated. #tokens: 100, K size: 1.00 GB, V size: 1.00 GB",
            (Phase.KV_ALLOCATE, T, False),
        ),
        ("[t TP0] Memory pool end. avail mem=36.00 GB", (Phase.KV_ALLOCATE, D, True)),
        ("[t TP0] Draft model loaded. type=X, mem usage=2.21 GB", (Phase.LOAD_WEIGHTS, D, True)),
    ]
    for line, want in seq:
        p = g.parse(line.replace("[t", "[2026-01-02 03:04:05"))
        assert marks(p)[0] == want, line
        assert all(isinstance(e, PhaseMark) or e.model is want[1] for e in p.events if isinstance(e, Metric)), line


def test_0410_draft_pool_on_a_rank_without_pool_end_lines() -> None:
    """0.4.10 prints `Memory pool end` on TP0 only; TP1's second KV line is the draft's."""
    g = SglangGrammar()
    for line in [
        "[2026-01-02 03:04:05 TP0] Load weight begin. avail mem=78.57 GB",
        "[2026-01-02 03:04:05 TP0] Load weight end. type=L, dtype=torch.bfloat16, avail mem=70.60 GB, mem usage=7.97 GB.",
        "[2026-01-02 03:04:05 TP0] KV Cache is allocated. #tokens: 963543, K size: 29.40 GB, V size: 29.40 GB",
        "[2026-01-02 03:04:05 TP1] KV Cache is allocated. #tokens: 963543, K size: 29.40 GB, V size: 29.40 GB",
        "[2026-01-02 03:04:05 TP0] Memory pool end. avail mem=11.47 GB",
        "[2026-01-02 03:04:05 TP0] Load weight begin. avail mem=10.78 GB",
    ]:
        g.parse(line)
    p = g.parse("[2026-01-02 03:04:05 TP1] KV Cache is allocated. #tokens: 963543, K size: 0.92 GB, V size: 0.92 GB")
    assert marks(p) == [(Phase.KV_ALLOCATE, D, False)]


def test_reset_and_a_new_args_dump_forget_the_draft_state() -> None:
    g = SglangGrammar()
    g.parse("[2026-01-02 03:04:05] Load weight end. type=X, avail mem=1.00 GB, mem usage=1.00 GB.")
    assert marks(g.parse("[2026-01-02 03:04:05] Load weight begin. avail mem=1.00 GB"))[0][1] is D
    g.parse("[2026-01-02 03:04:06] server_args=ServerArgs(tp_size=1)")
    assert marks(g.parse("[2026-01-02 03:04:07] Load weight begin. avail mem=1.00 GB"))[0][1] is T


def test_post_capture_kv_sizing_is_the_targets_pool() -> None:
    g = SglangGrammar()
    g.parse("[2026-01-02 03:04:05 TP0] KV Cache VA upper bound. #tokens: 900000, KV size: 60.00 GB")
    g.parse("[2026-01-02 03:04:05 TP0] Memory pool end. avail mem=20.00 GB")
    g.parse(
        "[2026-01-02 03:04:06 TP0] Capture target decode CUDA graph end. elapsed=5.00 s, mem usage=1.00 GB, avail mem=19.00 GB."
    )
    p = g.parse(
        "[2026-01-02 03:04:07 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 812345, "
        "KV size: 54.20 GB, avail mem=2.10 GB"
    )
    assert marks(p) == [(Phase.KV_ALLOCATE, T, False)]
    assert metrics(p) == {"kv_tokens": 812345, "kv_cache_gib": 54.20}


def test_version_hints() -> None:
    g = SglangGrammar()
    (v,) = of(g.parse("SGLang Version 0.5.11+05fb6a52"), VersionHint)
    assert isinstance(v, VersionHint)
    assert v.version == "0.5.11"
    p = g.parse(
        "[2026-01-02 03:04:05 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1, K size: 1.00 GB, V size: 1.00 GB"
    )
    assert [e.version for e in of(p, VersionHint)] == [">=0.5.13"]  # type: ignore[attr-defined]
    p = g.parse(
        "[2026-01-02 03:04:05 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=1.00 GB"
    )
    assert [e.version for e in of(p, VersionHint)] == [">=0.5.16"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("title", "rank"),
    [
        ("sglang::scheduler_DP0_PP1_TP2_EP0", "DP0 PP1 TP2 EP0"),  # 0.5.23 managers/scheduler.py
        ("sglang::scheduler_TP3", "TP3"),
        ("sglang::scheduler_DP1_ATTN_CP0_MOE_DP1_TP1", "DP1 ATTN_CP0 MOE_DP1 TP1"),
        ("sglang::scheduler", ""),
        ("  sglang::scheduler_TP0  ", "TP0"),
        ("sglang::detokenizer", None),
        ("sglang::data_parallel_controller", None),
        ("/usr/bin/python3", None),
        ("sglang::scheduler_TPX", None),
    ],
)
def test_a_schedulers_process_title_gives_its_rank_label(title: str, rank: str | None) -> None:
    from kvtui.engines.sglang import rank_of_process_title

    assert rank_of_process_title(title) == rank
