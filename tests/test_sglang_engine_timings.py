"""SGLang's own phase durations (issue 21, item 6): from 0.5.17 the main process prints, once every
scheduler is ready, ``Engine startup timings (s): load_weight=%.2f, kv_cache_allocation=%.2f,
scheduler_e2e=%.2f, cuda_graph={%s}, tokenizer_e2e=%.2f`` (``entrypoints/engine.py:
_set_startup_time``; the ``cuda_graph`` kinds are ``prefill, decode, target_verify, draft_prefill,
draft_decode, draft_extend``, each the slowest rank's). kvtui reads it as facts, shows each
duration beside its own (replay's text and ``--json``, the console's phase timeline) and keeps it
in the history's document."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from kvtui.boot import Boot
from kvtui.bootlog import read_log
from kvtui.cli import main
from kvtui.engines.events import Fact, Model, Phase
from kvtui.engines.sglang.grammar import SglangGrammar
from kvtui.history.record import boot_doc

FIX = Path(__file__).parent / "fixtures" / "sglang"
BASE = FIX / "sglang-0.5.23-llama70b-fp8-tp4-dictargs-ready.log"
# the line as sglang 0.5.23 prints it (the format string above; values of this fixture's boot)
TIMINGS = ("[2026-06-01 07:01:19] Engine startup timings (s): load_weight=35.41, kv_cache_allocation=0.62, "
           "scheduler_e2e=71.80, cuda_graph={prefill=19.90, decode=14.70, target_verify=0.00, draft_prefill=0.00, "
           "draft_decode=0.00, draft_extend=0.00}, tokenizer_e2e=78.35")
SPEC = ("[2026-05-30 22:08:09] Engine startup timings (s): load_weight=616.34, kv_cache_allocation=6.68, "
        "scheduler_e2e=761.30, cuda_graph={prefill=0.00, decode=0.00, target_verify=13.48, draft_prefill=0.00, "
        "draft_decode=4.26, draft_extend=0.00}, tokenizer_e2e=790.02")


def _with_timings(path: Path) -> Path:
    """The fixture's boot with the timings line where SGLang prints it: before uvicorn's lines."""
    lines = BASE.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if "INFO:     Started server process" in ln)
    path.write_text("\n".join([*lines[:at], TIMINGS, *lines[at:]]) + "\n")
    return path


def _boot(path: Path) -> Boot:
    (boot,), _ = read_log([path.read_bytes()])
    return boot


def test_the_line_s_figures() -> None:
    events = SglangGrammar().parse(SPEC).events
    got = {(e.name, e.model): e.value for e in events}  # type: ignore[attr-defined]
    assert got == {
        (Fact.ENGINE_LOAD_WEIGHT_SECONDS, Model.TARGET): 616.34,
        (Fact.ENGINE_KV_ALLOCATION_SECONDS, Model.TARGET): 6.68,
        (Fact.ENGINE_SCHEDULER_SECONDS, Model.TARGET): 761.30,
        (Fact.ENGINE_STARTUP_SECONDS, Model.TARGET): 790.02,
        (Fact.ENGINE_CUDA_GRAPH_SECONDS, Model.TARGET): 13.48,  # prefill + decode + target_verify
        (Fact.ENGINE_CUDA_GRAPH_SECONDS, Model.DRAFT): 4.26,  # the draft_* kinds
    }
    # no draft: its kinds print 0.00, and no draft figure is made of them
    plain = SglangGrammar().parse(TIMINGS).events
    assert [(e.name, e.model) for e in plain if e.model is Model.DRAFT] == []  # type: ignore[attr-defined]


def test_replay_shows_them_beside_kvtui_s_durations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _with_timings(tmp_path / "boot.log")
    boot = _boot(log)
    spans = {s.name: s for s in boot.phases if s.model is Model.TARGET}
    assert boot.engine_seconds(spans[Phase.LOAD_WEIGHTS]) == 35.41
    assert boot.engine_seconds(spans[Phase.KV_ALLOCATE]) == 0.62
    assert boot.engine_seconds(spans[Phase.GRAPH_CAPTURE]) == pytest.approx(34.60)
    assert boot.engine_seconds(spans[Phase.HTTP_UP]) is None
    assert main(["replay", str(log)]) == 0
    text = capsys.readouterr().out
    rows = {ln.split()[0]: ln for ln in text.splitlines() if ln.startswith("    ") and len(ln.split()) > 1}
    assert rows["load_weights"].endswith("(engine: 35.41s)")
    assert rows["kv_allocate"].endswith("(engine: 0.62s)")
    assert rows["graph_capture"].endswith("(engine: 34.60s)")
    assert "(engine:" not in rows["http_up"]
    assert ("a scheduler's start to ready 71.80s · launch to every scheduler ready 78.35s") in text
    assert main(["replay", str(log), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["boots"]
    assert doc["engine_timings"] == {"load_weight": 35.41, "kv_cache_allocation": 0.62, "cuda_graph": 34.6,
                                     "scheduler_e2e": 71.8, "tokenizer_e2e": 78.35}
    by_name = {p["name"]: p for p in doc["phases"]}
    assert by_name["load_weights"]["engine_seconds"] == 35.41
    assert by_name["load_weights"]["seconds"] is not None  # kvtui's own, from the log's times, beside it
    assert "engine_seconds" not in by_name["http_up"]


def test_a_boot_without_the_line_keeps_its_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(BASE), "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["boots"]
    assert "engine_timings" not in doc
    assert all("engine_seconds" not in p for p in doc["phases"])


def test_the_history_keeps_them(tmp_path: Path) -> None:
    from kvtui.history import open_store
    from kvtui.history.record import boot_key

    boot = _boot(_with_timings(tmp_path / "boot.log"))
    with open_store(tmp_path / "h.sqlite3") as store:
        store.put(boot_doc("gpu-a", boot), boot_key("gpu-a", boot) or "")
        (row,) = store.boots("gpu-a")
    assert row.doc["engine_timings"]["load_weight"] == 35.41
    assert row.doc["facts"]["engine_scheduler_seconds"] == 71.8
    assert {p["name"]: p.get("engine_seconds") for p in row.doc["phases"]}["kv_allocate"] == 0.62


def test_the_console_s_phase_timeline_shows_them(tmp_path: Path) -> None:
    from kvtui.ui.widgets.boot import PhaseTimeline

    boot = _boot(_with_timings(tmp_path / "boot.log"))
    timeline = PhaseTimeline()
    timeline._boot, timeline._now, timeline._eta = boot, datetime.now().astimezone(), None  # what ``show`` sets
    rows = [row.plain for row in timeline._rows()]
    load = next(r for r in rows if "load weights" in r or "load_weights" in r)
    assert load.endswith("engine 35s"), rows
    assert next(r for r in rows if "graph" in r).endswith("engine 35s")
    assert not any("engine" in r for r in rows if "http" in r)
