# ruff: noqa: E501  (log lines are quoted verbatim)
"""The dispatcher (LineParser, parse_bytes) and properties of the whole pipeline.

* garbage, huge lines and random chunking never raise and never change the answer;
* the prefiltered whole-log path yields the same boots as feeding every line;
* a well-formed multi-rank boot gives the same result whatever the interleaving of its ranks.
"""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.boot import Boot, BootStatus, BootTracker
from kvtui.engines.events import BootBoundary, Engine, LogRecord, Phase, PhaseMark, Serving
from kvtui.engines.parse import LineParser, parse_bytes, parse_chunks
from kvtui.engines.text import MAX_LINE_CHARS

FIX = Path(__file__).parent / "fixtures"
SETTINGS = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])

SAMPLE_LINES = [
    ln
    for name in (
        "sglang-0.4.10-qwen72b-tp2-capture-oom.log",
        "sglang/sglang-0.5.12-qwen3-32b-tp4-eagle3-ready.log",
        "sglang/sglang-0.5.10-deepseek-v3-dp4-attention-ready.log",
        "sglang/fail-0.5.13-runtime-oom.log",
        "real/01-sglang-llama32-3b-tp1-hicache-ready.log",
    )
    for ln in (FIX / name).read_bytes().split(b"\n")
    if ln
]


def boots_of(data: bytes, *, all_lines: bool) -> list[Boot]:
    tracker = BootTracker(max_boots=None)
    for parsed in parse_bytes(data, all_lines=all_lines):
        tracker.feed(parsed)
    tracker.finish()
    return tracker.boots


def summary(boots: list[Boot]) -> list[object]:
    """Everything a boot reports, except where it sits in the stream (line numbers)."""
    return [
        (
            b.to_json(),
            b.facts,
            b.draft_facts,
            b.rank_facts,
            b.capture_trail,
            b.capture_bs,
            b.live,
            b.warnings,
            b.started_at,
            b.ended_at,
        )
        for b in boots
    ]


# ---- the dispatcher ---------------------------------------------------------------------------------


def test_carriage_returns_split_tqdm_redraws() -> None:
    p = LineParser()
    out = p.feed(
        LogRecord(
            "\r  0%|          | 0/8 [00:00<?, ?it/s]\rCapturing batches (bs=32 avail_mem=34.44 GB):   0%|  | 0/8 "
            "[00:00<?, ?it/s]\rCapturing batches (bs=24 avail_mem=34.37 GB):  12%|█▎ | 1/8 [00:00<00:04,  1.73it/s]"
        )
    )
    assert [x.text[:30] for x in out] == [
        "  0%|          | 0/8 [00:00<?,",
        "Capturing batches (bs=32 avail",
        "Capturing batches (bs=24 avail",
    ]


def test_a_log_line_glued_to_a_tqdm_bar_is_two_lines() -> None:
    p = LineParser()
    out = p.feed(
        LogRecord(
            "Capturing batches (bs=32 avail_mem=34.44 GB):   0%|          | 0/8 [00:00<?, ?it/s]"
            "[2026-02-09 14:38:28] Attempting to acquire lock 1275 on /x.lock"
        )
    )
    assert len(out) == 2
    assert out[1].text == "Attempting to acquire lock 1275 on /x.lock"
    assert out[1].prefixed


def test_ansi_is_stripped_and_empty_records_give_nothing() -> None:
    p = LineParser()
    (x,) = p.feed(LogRecord("\x1b[32m[2026-03-04 09:00:00 TP0] Load weight begin. avail mem=1.00 GB\x1b[0m"))
    assert x.text == "Load weight begin. avail mem=1.00 GB"
    assert x.rank == "TP0"
    assert p.feed(LogRecord("")) == []
    assert p.feed(LogRecord("   \r\n")) == []


def test_engine_is_detected_from_the_first_engine_line_and_hint_fixes_it() -> None:
    p = LineParser()
    assert p.engine is None
    p.feed(LogRecord("some banner"))
    assert p.engine is None
    p.feed(LogRecord("[2026-03-04 09:00:00 TP0] Init torch distributed begin."))
    assert p.engine is Engine.SGLANG
    assert LineParser(Engine.SGLANG).engine is Engine.SGLANG


def test_a_vllm_boot_after_an_sglang_boot_switches_the_grammar() -> None:
    p = LineParser()
    p.feed(LogRecord("[2026-03-04 09:00:00] server_args=ServerArgs(tp_size=1)"))
    assert p.engine is Engine.SGLANG
    (x,) = p.feed(LogRecord("INFO 03-04 10:00:00 [api_server.py:1] vLLM API server version 0.11.0"))
    assert p.engine is Engine.VLLM
    assert x.engine is Engine.VLLM
    assert any(isinstance(e, BootBoundary) for e in x.events)


def test_systemd_stop_resets_the_draft_state() -> None:
    p = LineParser()
    p.feed(LogRecord("[2026-01-02 03:04:05] Load weight end. type=X, avail mem=1.00 GB, mem usage=1.00 GB."))
    p.feed(LogRecord("Stopping sglang.service - x...", ident="systemd"))
    (x,) = p.feed(LogRecord("[2026-01-02 03:05:05] Load weight begin. avail mem=1.00 GB"))
    (mark,) = [e for e in x.events if isinstance(e, PhaseMark)]
    assert mark.model.value == "target"


def test_lines_longer_than_the_limit_are_cut_not_dropped() -> None:
    p = LineParser()
    (x,) = p.feed(LogRecord("[2026-03-04 09:00:00] server_args=ServerArgs(a=" + "x" * (MAX_LINE_CHARS + 10) + ")"))
    assert len(x.text) < MAX_LINE_CHARS


def test_parse_chunks_reports_the_shape_and_handles_a_missing_final_newline() -> None:
    shape: list[str] = []
    data = (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_bytes().rstrip(b"\n")
    lines = list(parse_chunks(iter([data[:100], data[100:]]), shape_out=shape))
    assert shape == ["raw"]
    assert lines[-1].text.startswith("Received sigquit")


# ---- properties --------------------------------------------------------------------------------------


@SETTINGS
@given(st.binary(max_size=4096))
def test_random_bytes_never_raise(data: bytes) -> None:
    for all_lines in (True, False):
        boots_of(data, all_lines=all_lines)


@SETTINGS
@given(
    st.lists(
        st.one_of(
            st.sampled_from(SAMPLE_LINES),
            st.binary(max_size=200),
            st.sampled_from([b"\xff\xfe", b"\x1b[31m", b"\r", b"Traceback (most recent call last):"]),
        ),
        max_size=80,
    ),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
)
def test_garbage_mixed_with_engine_lines_gives_the_same_boots_either_way(parts: list[bytes], sep: bytes) -> None:
    data = sep.join(parts)
    assert summary(boots_of(data, all_lines=True)) == summary(boots_of(data, all_lines=False))


@settings(deadline=None, max_examples=8, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=1, max_value=3), st.integers(min_value=0, max_value=2))
def test_huge_lines_do_not_break_the_boot(n_huge: int, where: int) -> None:
    base = (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_bytes().split(b"\n")
    huge = b"[2026-04-01 17:40:11] " + b"x" * (MAX_LINE_CHARS + 4096)
    lines = list(base)
    for i in range(n_huge):
        lines.insert(1 + where * 5 + i, huge)
    data = b"\n".join(lines)
    for all_lines in (True, False):
        (boot,) = boots_of(data, all_lines=all_lines)
        assert boot.status is BootStatus.FAILED
        assert boot.failure is not None
        assert boot.failure.kind.value == "oom_graph_capture"


@settings(deadline=None, max_examples=25)
@given(st.integers(min_value=1, max_value=997))
def test_chunk_boundaries_do_not_matter(size: int) -> None:
    data = (FIX / "sglang" / "journal-short-iso-three-boots.journal").read_bytes()
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    whole = BootTracker(max_boots=None)
    for p in parse_bytes(data):
        whole.feed(p)
    cut = BootTracker(max_boots=None)
    for p in parse_chunks(iter(chunks)):
        cut.feed(p)
    assert summary(whole.boots) == summary(cut.boots)


def _rank_streams(n_ranks: int, serving: int, seed: int) -> tuple[list[str], list[list[str]], list[str]]:
    """A well-formed 0.5.x boot: the main process's head and tail, and one stream per rank."""
    rng = random.Random(seed)

    def st_(s: float) -> str:
        m, sec = divmod(int(s), 60)
        return f"2026-03-04 09:{m:02d}:{sec:02d}"

    head = [f"[{st_(0)}] server_args=ServerArgs(mem_fraction_static=0.85, tp_size={n_ranks}, page_size=1)"]
    streams: list[list[str]] = []
    for r in range(n_ranks):
        j = rng.random()
        t = f"TP{r}"
        s = [
            f"[{st_(5 + j)} {t}] Init torch distributed begin.",
            f"[{st_(8 + j)} {t}] Init torch distributed ends. elapsed=3.{r}0 s, mem usage=0.88 GB",
            f"[{st_(9 + j)} {t}] Load weight begin. avail mem={78.9 + r / 100:.2f} GB",
            f"[{st_(100 + j)} {t}] Load weight end. elapsed=91.00 s, type=X, avail mem={44.8 + r / 100:.2f} GB, mem usage=34.10 GB.",
            f"[{st_(101 + j)} {t}] KV Cache is allocated. #tokens: 432078, K size: 16.48 GB, V size: 16.48 GB",
            f"[{st_(102 + j)} {t}] Memory pool end. avail mem={10.83 + r / 100:.2f} GB",
            f"[{st_(103 + j)} {t}] Capture cuda graph begin. This can take up to several minutes. avail mem={10.8 + r / 100:.2f} GB",
        ]
        if r == 0:
            s.append(f"[{st_(103)} TP0] Capture cuda graph bs [1, 2, 4, 8]")
            for k, bs in enumerate([8, 4, 2, 1]):
                s.append(
                    f"Capturing batches (bs={bs} avail_mem={10.7 - k / 10:.2f} GB): {25 * (k + 1)}%|██| {k + 1}/4 [00:0{k}<00:00]"
                )
        s.append(
            f"[{st_(125 + j)} {t}] Capture cuda graph end. Time elapsed: 22.00 s. mem usage={1.62 + r / 100:.2f} GB. avail mem=9.2{r} GB."
        )
        if r == 0:
            s.append(
                f"[{st_(126)} TP0] max_total_num_tokens=432078, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                "max_running_requests=2048, context_len=131072, available_gpu_mem=9.20 GB"
            )
        streams.append(s)
    tail = [
        f"[{st_(130)}] INFO:     Started server process [7001]",
        f"[{st_(130)}] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        f"[{st_(132)}] The server is fired up and ready to roll!",
    ]
    for i in range(serving):
        tail.append(
            f"[{st_(133 + i)} TP0] Decode batch, #running-req: {i}, #token: {i * 100}, token usage: 0.{i % 10}0, "
            f"cuda graph: True, gen throughput (token/s): {100 + i}.00, #queue-req: 0"
        )
    return head, streams, tail


@SETTINGS
@given(st.integers(min_value=2, max_value=8), st.integers(min_value=0, max_value=30), st.randoms(use_true_random=False))
def test_rank_interleaving_does_not_change_a_well_formed_boot(n_ranks: int, serving: int, rnd: random.Random) -> None:
    head, streams, tail = _rank_streams(n_ranks, serving, seed=n_ranks * 31 + serving)
    canonical = head + [ln for s in streams for ln in s] + tail
    pos = [0] * n_ranks
    shuffled = list(head)
    while any(p < len(s) for p, s in zip(pos, streams, strict=True)):
        r = rnd.choice([i for i in range(n_ranks) if pos[i] < len(streams[i])])
        shuffled.append(streams[r][pos[r]])
        pos[r] += 1
    shuffled += tail
    want = boots_of("\n".join(canonical).encode(), all_lines=True)
    (boot,) = want
    assert boot.status is BootStatus.READY
    assert boot.ranks == [f"TP{r}" for r in range(n_ranks)]
    assert boot.metrics.avail_before_load_gib == 78.9
    for all_lines in (True, False):
        got = boots_of("\n".join(shuffled).encode(), all_lines=all_lines)
        assert summary(got) == summary(want)


def test_prefilter_equivalence_on_every_fixture() -> None:
    files = [
        p
        for p in FIX.rglob("*")
        if p.is_file()  # every log: the engines' own, the input shapes (journal, docker, json), the real ones
        and p.suffix not in (".py", ".md", ".bin", ".csv", ".conf", ".service", ".sh", ".toml", ".gz")
        and not p.name.startswith("expected")
        and not p.name.endswith(".meta.json")
        and not (p.suffix == ".json" and p.parent.name == "real")  # facts, not logs
        and p.parent.name not in ("themes", "kvcalc", "flags", "gpu")
    ]
    assert len(files) > 70
    for path in files:
        data = path.read_bytes()
        assert summary(boots_of(data, all_lines=True)) == summary(boots_of(data, all_lines=False)), path.name


def test_serving_runs_keep_each_ranks_last_values() -> None:
    """The prefilter coalesces serving lines but every rank's latest figures survive."""
    lines = ["[2026-03-04 09:00:00] The server is fired up and ready to roll!"]
    for i in range(200):
        for dp in range(3):
            usage = (i % 50) / 100 + dp / 10
            lines.append(
                f"[2026-03-04 09:00:{i % 60:02d} DP{dp} TP{dp}] Decode batch, #running-req: {i}, #token: 1, "
                f"token usage: {usage:.2f}, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: {dp}"
            )
    data = "\n".join(lines).encode()
    full = boots_of(data, all_lines=True)
    fast = boots_of(data, all_lines=False)
    assert summary(full) == summary(fast)
    assert fast[0].live.queue_reqs == 0 + 1 + 2
    kept = [p for p in parse_bytes(data) if any(isinstance(e, Serving) for e in p.events)]
    assert len(kept) <= 1 + 3  # the run's first line and each rank's last line


def test_progress_redraws_are_coalesced_but_the_trail_is_complete() -> None:
    lines = [
        "[2026-03-04 09:00:00 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.00 GB"
    ]
    for bs in (8, 4, 2, 1):
        for k in range(10):
            lines.append(
                f"Capturing batches (bs={bs} avail_mem={9 - 1 / bs:.2f} GB): {k * 10:3d}%|█| {k}/40 [00:0{k}<00:09]"
            )
    data = "\n".join(lines).encode()
    (boot,) = boots_of(data, all_lines=False)
    assert [b for b, _ in boot.capture_trail] == [8, 4, 2, 1]
    assert summary(boots_of(data, all_lines=True)) == summary([boot])
    assert sum(1 for _ in parse_bytes(data)) <= 1 + 4 * 2


def test_nothing_is_dropped_around_a_failure() -> None:
    """Serving lines inside a traceback window are kept, so the traceback is the same as unfiltered."""
    lines = ["[2026-03-04 09:00:00] The server is fired up and ready to roll!"]
    serving = "[2026-03-04 09:00:01 TP0] Decode batch, #running-req: 1, #token: 1, token usage: 0.10, #queue-req: 0"
    lines += [serving] * 50
    lines += ["[2026-03-04 09:00:02 TP1] Scheduler hit an exception: Traceback (most recent call last):"]
    lines += [serving, '  File "/x.py", line 1, in f', serving, "torch.OutOfMemoryError: CUDA out of memory."]
    lines += [serving] * 5 + ["[2026-03-04 09:00:03] SIGQUIT received. signum=None, frame=None."]
    data = "\n".join(lines).encode()
    full, fast = boots_of(data, all_lines=True), boots_of(data, all_lines=False)
    assert summary(full) == summary(fast)
    assert fast[0].failure is not None
    assert fast[0].failure.kind.value == "oom_runtime"
    assert serving[26:] in fast[0].failure.traceback  # the interleaved serving line stays in the context


def test_phase_marks_of_parse_bytes_are_in_order() -> None:
    data = (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_bytes()
    starts = [
        e.phase for p in parse_bytes(data, all_lines=True) for e in p.events if isinstance(e, PhaseMark) and not e.end
    ]
    firsts = list(dict.fromkeys(starts))
    assert firsts == [Phase.LAUNCH, Phase.INIT, Phase.LOAD_WEIGHTS, Phase.KV_ALLOCATE, Phase.GRAPH_CAPTURE]


# ---- the prefilter on long serving stretches ----------------------------------------------------


_SGL_HEAD = (FIX / "sglang" / "sglang-0.5.10-deepseek-v3-dp4-attention-ready.log").read_bytes().split(b"\n")[:50]
_VLLM_HEAD = (FIX / "vllm" / "vllm-0.33-qwen3-32b-tp4-ready.log").read_bytes().split(b"\n")[:47]


@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["sglang", "vllm"]),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 99)), min_size=1, max_size=120),
    st.integers(1, 400),
)
def test_long_serving_stretches_of_several_ranks_with_access_lines_read_the_same(
    engine: str, steps: list[tuple[int, int]], repeat: int
) -> None:
    """Runs of serving lines of one rank (longer than any batch), interleaved ranks (DP attention,
    several vLLM engines), HTTP access lines inside and between them, a warning now and then: the
    prefiltered path gives the same boots as every line."""
    lines = list(_SGL_HEAD if engine == "sglang" else _VLLM_HEAD)
    t = 0
    for what, n in steps:
        for _ in range(repeat if what == 0 else 1):
            t += 1
            mm, ss = divmod(t % 3600, 60)
            usage = (t * 7 + n) % 100
            if engine == "sglang":
                tag = [" DP0 TP0", " DP1 TP1", " DP2 TP2", " DP3 TP3", " DP0 TP0", ""][what]
                stamp = f"[2026-03-01 10:{mm:02d}:{ss:02d}{tag}]"
                if what == 5:
                    line = f'[2026-03-01 10:{mm:02d}:{ss:02d}] INFO:     127.0.0.1:{4000 + n} - "POST /generate HTTP/1.1" 200 OK'
                elif what == 4 and n % 10 == 0:
                    line = f"{stamp} Prefill batch, #new-seq: 1, #new-token: {n}, #cached-token: 0, token usage: 0.{usage:02d}, #running-req: 1, #queue-req: 0"
                else:
                    line = f"{stamp} Decode batch, #running-req: {n}, #token: {n * 100}, token usage: 0.{usage:02d}, cuda graph: True, gen throughput (token/s): {n}.00, #queue-req: 0"
            else:
                stamp = f"(APIServer pid=4100) INFO 03-10 15:{mm:02d}:{ss:02d} [loggers.py:236]"
                if what >= 4:
                    line = f'(APIServer pid=4100) INFO:     127.0.0.1:{4000 + n} - "POST /v1/completions HTTP/1.1" 200 OK'
                elif what == 3 and n % 7 == 0:
                    line = f"(APIServer pid=4100) WARNING 03-10 15:{mm:02d}:{ss:02d} [serving.py:1] a warning {n}"
                else:
                    line = f"{stamp} Engine 00{what}: Avg prompt throughput: {n}.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: {n} reqs, Waiting: 0 reqs, GPU KV cache usage: {usage}.0%, Prefix cache hit rate: 0.0%"
            lines.append(line.encode())
    data = b"\n".join(lines) + b"\n"
    assert summary(boots_of(data, all_lines=True)) == summary(boots_of(data, all_lines=False))


_KEY_ATOMS = [
    b"[2026-03-01 10:00:01", b" DP1", b" TP0", b" tp0", b" PP0_TP1", b" X", b"9", b" ", b"]", b"] Decode batch",
    b"] Prefill batch", b"Engine 000: ", b"KV cache usage", b" A1", b"[", b":", b"Engine 1", b"  ", b".123", b"TP12",
]


@settings(deadline=None, max_examples=400)
@given(st.lists(st.sampled_from(_KEY_ATOMS), min_size=1, max_size=10))
def test_the_serving_key_without_a_regex_is_the_regexs(atoms: list[bytes]) -> None:
    from kvtui.engines.prefilter import _SERVING_TAG_RE, _serving_key

    ln = b"".join(atoms)
    m = _SERVING_TAG_RE.search(ln)
    want = None if m is None else ((m.group(1), False) if m.group(2) is None else (m.group(2), True))
    assert _serving_key(ln) == want


_KNOWN_KEYS = [b"", b" DP1", b" TP0", b" DP1 TP0", b" TP12", b" A1", b" DP1 TP0 TP0", b" A_B1 TP0"]  # keys it can return
_TAG_ATOMS = [b" DP1", b" TP0", b" X", b" tp0", b" A1", b" ", b" PP0_TP1", b" TP12", b"9"]
_STAMPS = [b"[2026-03-01 10:00:01", b"[2026-03-01 10:00:01.123", b"x", b"", b"Engine 0 ", b"[10:00:0X"]
_ENDS = [b"] Decode batch", b"] Prefill batch", b"]", b"] Prefill batch, 9 DP1] Decode batch", b" Decode batch"]


@settings(deadline=None, max_examples=600)
@given(
    st.sampled_from(_STAMPS),
    st.lists(st.sampled_from(_TAG_ATOMS), max_size=4),
    st.sampled_from(_ENDS),
    st.lists(st.sampled_from(_KEY_ATOMS), max_size=4),
    st.lists(st.sampled_from(_KNOWN_KEYS)),
)
def test_the_serving_key_from_known_keys_is_the_regexs(
    stamp: bytes, tags: list[bytes], end: bytes, tail: list[bytes], known: list[bytes]
) -> None:
    """Rank keys seen before (tried first, so interleaved DP ranks are not read word by word each
    line) give what the regex gives, whichever keys are known: a suffix of the real tag, a key
    of another rank, the key of a line with no tag."""
    from kvtui.engines.prefilter import _SERVING_TAG_RE, _serving_key

    ln = stamp + b"".join(tags) + end + b"".join(tail)
    m = _SERVING_TAG_RE.search(ln)
    want = None if m is None else ((m.group(1), False) if m.group(2) is None else (m.group(2), True))
    assert _serving_key(ln, known) == want


def test_dp_ranks_interleaved_line_by_line_keep_each_ranks_last_line() -> None:
    """Four DP attention ranks taking turns line by line (each line another rank's: the path that
    remembers which rank came next), a rank whose tag ends like another's (`TP0` after `DP1 TP0`)
    and Prefill lines among them: the same boots as every line, and a run keeps its first line
    and each rank's last."""
    from kvtui.engines.parse import Prefilter

    tags = [" DP0 TP0", " DP1 TP1", " DP2 TP2", " DP3 TP3"]
    lines = list(_SGL_HEAD)
    serving: list[bytes] = []
    for k in range(4000):
        tag = " TP0" if k % 97 == 50 else tags[k % 4]
        mm, ss = divmod(k // 4 % 3600, 60)
        kind = "Prefill batch, #new-seq: 1, #new-token: 5," if k % 7 == 0 else "Decode batch, #running-req: 3, #token: 9,"
        serving.append(f"[2026-03-01 10:{mm:02d}:{ss:02d}{tag}] {kind} token usage: 0.{k % 100:02d}, #queue-req: 0".encode())
    data = b"\n".join(lines + serving) + b"\n"
    assert summary(boots_of(data, all_lines=True)) == summary(boots_of(data, all_lines=False))
    pf = Prefilter(drop_access=True)
    kept = pf.filter(serving) + pf.flush()
    last = {}
    for ln in serving:
        last[ln[20 : ln.index(b"]")]] = ln
    assert kept == [serving[0], *sorted(last.values(), key=serving.index)]


def test_redraws_coalesce_unless_a_line_is_glued_to_the_bar() -> None:
    """Text after a bar's end with a space between is the bar's own (coalesced like any redraw); a
    line glued to it (no space: the bar ended without a newline) is parsed, so it is kept."""
    from kvtui.engines.parse import Prefilter

    def bar(k: int, tail: str) -> bytes:
        return f"Capturing batches (bs=8 avail_mem=7.19 GB):  {k:2d}%|████      | {k}/20 [00:0{k % 10}<00:30,  1.10it/s]{tail}".encode()

    spaced = [bar(k, " [worker]") for k in range(1, 9)]
    pf = Prefilter()
    kept = pf.filter(spaced) + pf.flush()
    assert kept == [spaced[0], spaced[-1]]
    glued = [bar(k, "[2026-03-04 09:00:01 TP0] Capture cuda graph end.") for k in range(1, 4)]
    pf = Prefilter()
    assert pf.filter(glued) + pf.flush() == glued


def test_a_rank_seen_once_right_after_the_runs_first_line_keeps_its_figures() -> None:
    def line(s: int, dp: int, queue: int) -> str:
        return (
            f"[2026-03-04 09:00:{s:02d} DP{dp} TP{dp}] Decode batch, #running-req: 1, #token: 1, token usage: 0.{dp}0, "
            f"cuda graph: True, gen throughput (token/s): 10.00, #queue-req: {queue}"
        )

    lines = ["[2026-03-04 09:00:00] The server is fired up and ready to roll!"]
    lines += [line(1, 0, 5), line(2, 1, 7), *(line(3 + i, 0, i) for i in range(20)), line(30, 2, 1)]
    data = "\n".join(lines).encode()
    full, fast = boots_of(data, all_lines=True), boots_of(data, all_lines=False)
    assert summary(full) == summary(fast)
    assert fast[0].live.queue_reqs == 19 + 7 + 1
