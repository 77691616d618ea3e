"""The edit that answers a full pool given in bytes (``kvtui.serving.suggest``) and how ``kvtui
watch`` says it: ``diagnosis.suggest`` in ``--json`` (with the ``kvtui apply`` command to run),
the sizing in the human line (issue 24, the closed loop)."""

from __future__ import annotations

import shlex

from kvtui.cli import build_parser
from kvtui.commands.watch import human_line, sample_json
from kvtui.engines.events import Engine
from kvtui.serving.diagnose import Diagnosis, Limit, diagnose
from kvtui.serving.sample import CacheInfo, ServingSample
from kvtui.serving.suggest import PoolSuggestion, max_model_len, size_pool
from kvtui.serving.window import ServingWindow
from kvtui.serving_live import Reading

SMALL = CacheInfo(num_blocks=20, block_size=128, kv_cache_size_tokens=2560, max_concurrency=2.5)
FLAGS: dict[str, object] = {"max_model_len": 1024, "max_num_seqs": 16, "kv_cache_memory_bytes": 2621440,
                            "device": "cpu"}


def _window(cache: CacheInfo, *, running: int = 2, waiting: int = 22, usage: float = 0.947) -> ServingWindow:
    w = ServingWindow()
    for i in range(21):  # 20 s of a burst: the pool full, requests waiting and preempted
        w.add(ServingSample(engine=Engine.VLLM, at=float(i), source="metrics", kv_usage=usage if i else 0.0,
                            running=running if i else 0, waiting=waiting if i else 0, preemptions_total=float(3 * i),
                            requests_total=float(i), cache=cache))
    return w


def _diag(w: ServingWindow, flags: dict[str, object], cap: int | None = 16) -> Diagnosis:
    given = [k.replace("_", "-") for k in flags]
    return diagnose(w, running_cap=cap, device="cpu", flags=given)


def test_kv_cache_memory_bytes_sized_for_every_running_request_at_its_longest() -> None:
    d = _diag(_window(SMALL), FLAGS)
    assert d.limit is Limit.POOL
    assert d.knobs[0].name == "--kv-cache-memory-bytes"
    s = size_pool(d, SMALL, FLAGS, {})
    assert s is not None
    # 16 running (the cap: 2 + 22 were seen) x 8 blocks of 128 tokens + vLLM's null block = 129 blocks
    assert (s.knob, s.value) == ("--kv-cache-memory-bytes", str(129 * 128 * 1024))
    assert (s.tokens_before, s.tokens_after) == (2560, 129 * 128)
    assert s.apply_command("box") == "kvtui apply box --set kv-cache-memory-bytes=16908288 --restart"
    assert "16 requests at once (the --max-num-seqs cap) x 1,024 tokens" in s.why
    # fewer seen at once than the cap: as many as seen
    few = size_pool(_diag(_window(SMALL, running=2, waiting=3), FLAGS), SMALL, FLAGS, {})
    assert few is not None
    assert few.value == str((5 * 8 + 1) * 128 * 1024)
    assert "5 requests at once (as many as seen)" in few.why


def test_the_apply_command_parses_as_kvtui_apply() -> None:
    s = PoolSuggestion("--kv-cache-memory-bytes", "16908288", 2560, 16512, "")
    args = build_parser().parse_args(shlex.split(s.apply_command("my box"))[1:])
    assert (args.command, args.host, args.set, args.restart) == ("apply", "my box", ["kv-cache-memory-bytes=16908288"],
                                                                 True)
    env = PoolSuggestion("VLLM_CPU_KVCACHE_SPACE", "3", 1, 2, "")
    args = build_parser().parse_args(shlex.split(env.apply_command("box"))[1:])
    assert args.setenv == ["VLLM_CPU_KVCACHE_SPACE=3"]


def test_cpu_kvcache_space_in_whole_gib() -> None:
    cache = CacheInfo(num_blocks=8192, block_size=128)  # 1 GiB of 1,024-byte tokens
    flags: dict[str, object] = {"max_model_len": 8192, "max_num_seqs": 256, "device": "cpu"}
    d = _diag(_window(cache, running=40, waiting=300, usage=1.0), flags, cap=256)
    assert d.knobs[0].name == "VLLM_CPU_KVCACHE_SPACE"
    s = size_pool(d, cache, flags, {"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert s is not None
    assert s.value == "3"  # 256 x 64 blocks + 1 = 2.00006 GiB: 3 whole GiB
    assert s.tokens_after == 3 * 8192 * 128
    assert s.apply_command("box") == "kvtui apply box --setenv VLLM_CPU_KVCACHE_SPACE=3 --restart"
    assert size_pool(d, cache, flags, {"VLLM_CPU_KVCACHE_SPACE": None}) is None  # the pool's size unknown


def test_no_suggestion_without_a_full_pool_a_byte_knob_or_the_figures() -> None:
    d = _diag(_window(SMALL), FLAGS)
    quiet = ServingWindow()
    quiet.add(ServingSample(engine=Engine.VLLM, at=0.0, source="metrics", kv_usage=0.1, running=1, waiting=0,
                            preemptions_total=0.0, cache=SMALL))
    assert size_pool(_diag(quiet, FLAGS), SMALL, FLAGS, {}) is None
    gpu = diagnose(_window(SMALL), running_cap=16)  # --gpu-memory-utilization: the calculator's to size
    assert size_pool(gpu, SMALL, FLAGS, {}) is None
    assert size_pool(d, None, FLAGS, {}) is None
    no_len = {k: v for k, v in FLAGS.items() if k != "max_model_len"}
    assert max_model_len(no_len, SMALL) == 1024  # 2,560 tokens / a concurrency of 2.5
    assert max_model_len(no_len, CacheInfo(num_blocks=20, block_size=128)) is None
    assert size_pool(d, CacheInfo(num_blocks=20, block_size=128), no_len, {}) is None
    room = CacheInfo(num_blocks=200, block_size=128)  # the pool holds 16 x 1,024 tokens already: no "increase"
    assert size_pool(d, room, {**FLAGS, "kv_cache_memory_bytes": 200 * 128 * 1024}, {}) is None


def test_watch_says_the_suggestion_in_json_and_in_its_line() -> None:
    w = _window(SMALL)
    d = _diag(w, FLAGS)
    s = size_pool(d, SMALL, FLAGS, {})
    latest = w.latest
    assert latest is not None
    r = Reading(latest, w, d, s)
    doc = sample_json(r, "box", 0.0, None)
    diag = doc["diagnosis"]
    assert isinstance(diag, dict)
    assert diag["limit"] == "pool full"
    assert diag["suggest"] == {
        "flag": "--kv-cache-memory-bytes", "scope": "flag", "value": "16908288", "pool_tokens": 2560,
        "pool_tokens_after": 16512, "why": s.why if s is not None else None,
        "apply": "kvtui apply box --set kv-cache-memory-bytes=16908288 --restart"}
    line = human_line(r, 0.0, "box")
    assert ("! pool full: 60 preemptions in 20 s at 95 % usage, 22 waiting; at --kv-cache-memory-bytes 16908288 the "
            "pool grows from 2,560 to 16,512 tokens: kvtui apply box --set kv-cache-memory-bytes=16908288 --restart"
            ) in line
    assert sample_json(Reading(latest, w, d), "box", 0.0, None)["diagnosis"]["suggest"] is None  # type: ignore[index]


def test_the_suggested_flag_is_one_kvtui_knows() -> None:
    from kvtui.flags.edit import apply_edits, parse_edit_args

    script = ("#!/bin/bash\nexec python -m vllm.entrypoints.openai.api_server \\\n  --model /m \\\n"
              "  --kv-cache-memory-bytes 2621440 \\\n  --port 8000\n")
    res = apply_edits(script, "script", parse_edit_args(["kv-cache-memory-bytes=16908288"]))
    assert "--kv-cache-memory-bytes 16908288 \\" in res.new_text
    assert "not a flag kvtui knows" not in res.changes[0].note  # the edit kvtui itself suggests
    res = apply_edits(script, "script", parse_edit_args(["kv-cache-memory-bytes=16M"]))  # vLLM's own k/m/g form
    assert "--kv-cache-memory-bytes 16M \\" in res.new_text
