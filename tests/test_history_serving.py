"""The serving figures of each boot in the history (issue 24, the verify slice): the tally over a
watcher's whole time, the ``serving`` section merged over watchers, its round trip through the
store (an older document without it still reads), ``kvtui watch`` recording it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from history_support import sglang

from kvtui.cli import main
from kvtui.engines.events import Engine
from kvtui.history import Store, boot_doc, boot_key
from kvtui.history.serving import (
    MAX_SESSIONS,
    ServingTally,
    build_section,
    merge_serving,
    observed_tokens,
    record_serving,
    section_of,
)
from kvtui.serving.sample import CacheInfo, Histogram, ServingSample
from kvtui.serving.window import ServingWindow

BOUNDS = (0.1, 0.5, 1.0, 5.0, float("inf"))


def _hist(counts: tuple[float, ...]) -> Histogram:
    cum, out = 0.0, []
    for b, c in zip(BOUNDS, counts, strict=True):
        cum += c
        out.append((b, cum))
    return Histogram(tuple(out), cum, cum * 0.3)


def _s(at: float, *, pre: float, reqs: float, usage: float, ttft: tuple[float, ...] = (0, 0, 0, 0, 0),
       source: str = "metrics", pool: int | None = 1000) -> ServingSample:
    return ServingSample(Engine.VLLM, at, source, kv_usage=usage, running=4, waiting=1, preemptions_total=pre,  # type: ignore[arg-type]
                         requests_total=reqs, ttft=_hist(ttft),
                         cache=CacheInfo(kv_cache_size_tokens=pool) if pool is not None else None)


def test_the_tally_sums_the_whole_watched_time_not_the_window() -> None:
    window = ServingWindow(span_s=20.0)  # a short window: the tally must outlast it
    tally = ServingTally("w1")
    pre, reqs = 100.0, 1000.0  # the server's counters before the watch: not this watch's
    for i in range(13):  # 13 samples 10 s apart: 120 s, the window keeps 20 s
        if i == 6:
            pre, reqs = 0.0, 0.0  # a counter reset (the server restarted its metrics)
        pre += 3
        reqs += 50
        window.add(_s(1000.0 + 10 * i, pre=pre, reqs=reqs, usage=0.5 + 0.03 * i, ttft=(i, 0, 0, 10 * i, 0)))
        tally.follow(window)
    assert tally.samples == 13
    assert tally.seconds == pytest.approx(120.0)
    # 12 steps of 3 (the reset step counts what the new series holds: 3)
    assert tally.counts["preemptions"] == pytest.approx(36.0)
    assert tally.counts["requests"] == pytest.approx(600.0)
    assert tally.peak_kv_usage == pytest.approx(0.86)
    assert tally.peak_tokens == 860
    s = tally.section()
    assert s["preemptions_per_1k"] == pytest.approx(60.0)
    assert s["preemptions_per_min"] == pytest.approx(18.0)
    assert s["ttft_p95"] is not None
    assert 1.0 < s["ttft_p95"] <= 5.0
    assert window.figures().samples < 13  # what the window alone would have said: its last 20 s


def test_a_change_of_source_is_a_gap_and_the_log_takes_the_boots_pool() -> None:
    tally = ServingTally()
    tally.add(_s(0.0, pre=10, reqs=10, usage=0.2))
    tally.add(_s(10.0, pre=12, reqs=20, usage=0.2))
    tally.add(_s(20.0, pre=500, reqs=900, usage=0.9, source="log", pool=None), pool_tokens=2000)
    tally.add(_s(30.0, pre=501, reqs=910, usage=0.3, source="log", pool=None), pool_tokens=2000)
    assert tally.seconds == pytest.approx(20.0)  # 0→10 and 20→30; nothing across the switch
    assert tally.counts["preemptions"] == pytest.approx(3.0)
    assert tally.peak_tokens == 1800


def _part(first: float, last: float, pre: float, reqs: float, peak: float) -> dict[str, object]:
    return {"first_at": first, "last_at": last, "seconds": last - first, "samples": int(last - first) + 1,
            "counts": {"preemptions": pre, "requests": reqs}, "peak_kv_usage": peak, "peak_tokens": round(peak * 100),
            "engine": "vllm", "sources": ["metrics"]}


def test_watchers_that_overlap_count_once_and_those_that_do_not_add_up() -> None:
    s = build_section({
        "a": _part(0, 100, 10, 1000, 0.9),     # the console, watching long
        "b": _part(50, 80, 4, 300, 1.0),      # a watch at the same time: the same requests
        "c": _part(200, 260, 0, 500, 0.4),    # later, alone
    })
    assert s["preemptions"] == 10
    assert s["requests"] == 1500
    assert s["seconds"] == 160
    assert s["preemptions_per_1k"] == pytest.approx(10 * 1000 / 1500)
    assert s["peak_kv_usage"] == 1.0
    assert s["peak_tokens"] == 100
    assert s["watchers"] == 3
    # merging keeps both documents' parts; one watcher's newer part (more samples) replaces its older
    merged = merge_serving({"sessions": {"a": _part(0, 10, 1, 100, 0.5)}}, s)
    assert merged is not None
    assert set(merged["sessions"]) == {"a", "b", "c"}
    assert merged["sessions"]["a"]["last_at"] == 100
    assert merge_serving(None, None) is None
    many = build_section({f"w{i}": _part(1000 * i, 1000 * i + i, 1, 10, 0.5) for i in range(MAX_SESSIONS + 5)})
    assert len(many["sessions"]) == MAX_SESSIONS  # bounded: those that watched longest


def _tally(peak_usage: float, pre_per_step: float, *, session: str = "w", n: int = 5) -> ServingTally:
    t = ServingTally(session)
    for i in range(n):
        t.add(_s(100.0 + 10 * i, pre=pre_per_step * i, reqs=100.0 * i, usage=peak_usage * (i + 1) / 5,
                 ttft=(10 * i, 0, 0, 0, 0)))
    return t


def test_the_section_round_trips_through_the_store_and_survives_the_recorders_writes(tmp_path: Path) -> None:
    boot = sglang(0.85)
    key = boot_key("h", boot)
    assert key is not None
    with Store(tmp_path / "h.sqlite3").open() as store:
        old_doc = boot_doc("h", boot)  # what the monitor's recorder (and an older kvtui) wrote: no section
        row = store.put(old_doc, key)
        assert section_of(store.get(row).doc) is None  # type: ignore[union-attr]
        assert observed_tokens(store.get(row).doc) is None  # type: ignore[union-attr]
        assert record_serving(store, "h", boot, _tally(0.8, 2, session="watch")) == row
        assert record_serving(store, "h", boot, _tally(0.6, 0, session="console", n=4)) == row
        store.put(boot_doc("h", boot), key)  # the recorder writes the boot again: the section stays
        got = store.get(row)
    assert got is not None
    s = section_of(got.doc)
    assert s is not None
    assert set(s["sessions"]) == {"watch", "console"}
    assert s["peak_kv_usage"] == pytest.approx(0.8)
    pool = got.doc["serving"]["pool_tokens"]
    assert s["peak_tokens"] == round(0.8 * pool)
    assert s["preemptions"] == 8  # they overlap: the one that watched longest counts
    assert observed_tokens(got.doc) == (round(0.8 * pool), -(-round(0.8 * pool) * 12 // 10))
    json.dumps(got.doc)  # plain JSON (the infinite bucket bound is stored as null)


def _hosts(tmp_path: Path) -> str:
    path = tmp_path / "hosts.toml"
    path.write_text("[hosts.demo]\ndemo = true\ndemo_speed = 300\n")
    return str(path)


def test_watch_records_the_boots_serving_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = _hosts(tmp_path)
    code = main(["watch", "demo", "--hosts", hosts, "--json", "--count", "4", "--interval", "0.5",
                 "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    last = json.loads(out.splitlines()[-1])
    assert "serving figures recorded in the history (boot #" in err
    assert main(["history", "demo", "--hosts", hosts, "--json"]) == 0
    boots = json.loads(capsys.readouterr()[0])["boots"]
    s = section_of(boots[0])
    assert s is not None, boots[0].keys()
    assert s["samples"] == 4
    assert s["sources"] == ["metrics"]
    assert s["peak_kv_usage"] == pytest.approx(last["peak_kv_usage"])
    assert s["peak_tokens"] == round(s["peak_kv_usage"] * last["pool_tokens"])
    assert s["seconds"] == pytest.approx(last["seconds"], abs=0.01)
    assert s["requests"]
    assert s["requests"] > 0
    assert s["retractions_per_1k"] is not None


# -- history --diff and the list ---------------------------------------------------------------------


def _incident(store: Store, minutes: int, fraction: float, *, pre_per_step: float, peak: float,
              slow: bool) -> int:
    """A boot of ``demo`` watched for 40 s: ``pre_per_step`` preemptions per 1000 requests, TTFT
    mostly in (1, 5] s when ``slow``, else under 0.1 s."""
    boot = sglang(fraction, minutes=minutes)
    t = ServingTally(f"w{minutes}")
    for i in range(5):
        ttft = (0, 0, 0, 20 * i, 0) if slow else (20 * i, 0, 0, 0, 0)
        t.add(_s(100.0 + 10 * i, pre=pre_per_step * i, reqs=1000.0 * i, usage=peak if i == 2 else 0.3, ttft=ttft))
    row = record_serving(store, "demo", boot, t)
    assert row is not None
    return row


def _two_boots() -> tuple[int, int]:
    from kvtui.history import default_path

    with Store(default_path()).open() as store:
        a = _incident(store, 0, 0.85, pre_per_step=137, peak=1.0, slow=True)
        b = _incident(store, 30, 0.92, pre_per_step=0, peak=0.61, slow=False)
        later = sglang(0.9, minutes=60)
        unwatched = store.put(boot_doc("demo", later), boot_key("demo", later) or "")
    assert unwatched not in (a, b)
    return a, b


def test_history_diff_shows_the_serving_figures_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _two_boots()
    assert main(["history", "demo", "--diff", str(b), str(a)]) == 0
    out = capsys.readouterr()[0]
    assert "Serving (as watched):" in out
    assert "preemptions per 1k requests 137 → 0, TTFT p95 " in out
    assert "peak KV usage 100 % → 61 %" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("peak tokens held"))
    assert "1,000" in line
    assert "610" in line
    assert main(["history", "demo", "--diff", str(b), str(a), "--json"]) == 0
    d = json.loads(capsys.readouterr()[0])
    assert d["serving"]["base"]["preemptions_per_1k"] == pytest.approx(137.0)
    assert d["serving"]["boot"]["preemptions_per_1k"] == 0
    assert d["serving"]["base"]["ttft_p95"] > 1.0 > 0.1 >= d["serving"]["boot"]["ttft_p95"]
    assert "sessions" not in d["serving"]["base"]
    # the list: a serving column, the unwatched boot "?"; --json carries the section
    assert main(["history", "demo"]) == 0
    lines = capsys.readouterr()[0].splitlines()
    assert "serving" in lines[0].split()
    row_a = next(ln for ln in lines if ln.startswith(f"#{a} "))
    assert "KV 100% 137/1k preempt p95 " in row_a
    assert main(["history", "demo", "--json"]) == 0
    boots = {x["id"]: x for x in json.loads(capsys.readouterr()[0])["boots"]}
    assert boots[b]["serving"]["peak_kv_usage"] == pytest.approx(0.61)
    assert "serving" not in boots[max(boots)] or boots[max(boots)]["serving"] is None


def test_a_list_without_serving_figures_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.history import default_path

    with Store(default_path()).open() as store:
        store.put(boot_doc("demo", sglang(0.9)), boot_key("demo", sglang(0.9)) or "")
    assert main(["history", "demo"]) == 0
    assert "serving" not in capsys.readouterr()[0].splitlines()[0].split()


def test_watch_then_history_diff_shows_the_watched_boots_figures(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.history import default_path

    hosts = _hosts(tmp_path)
    with Store(default_path()).open() as store:  # an earlier boot of demo, watched in an incident
        old = _incident(store, 0, 0.85, pre_per_step=137, peak=1.0, slow=True)
    assert main(["watch", "demo", "--hosts", hosts, "--count", "3", "--interval", "0.5", "--timeout", "120"]) == 0
    capsys.readouterr()
    with Store(default_path()).open() as store:
        watched = next(r for r in store.boots("demo") if r.id != old)
    assert section_of(watched.doc) is not None
    assert main(["history", "demo", "--hosts", hosts, "--diff", str(watched.id), str(old)]) == 0
    out = capsys.readouterr()[0]
    assert "Serving (as watched):" in out
    assert "peak KV usage 100 % → " in out
    assert "retractions per 1k requests" in out  # the demo is SGLang: its retractions


# -- tune --goal tokens=observed ----------------------------------------------------------------------


def _first_candidate(out: str) -> str:
    return next(ln for ln in out.splitlines() if "first candidate" in ln)


def test_tune_goal_tokens_observed_sizes_from_the_observed_peak(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.history import default_path

    hosts = _hosts(tmp_path)
    assert main(["--hosts", hosts, "tune", "demo", "--goal", "tokens=observed", "--dry-run"]) == 3
    err = capsys.readouterr().err
    assert "no boot of demo has serving figures in the history: run kvtui watch demo" in err
    assert main(["watch", "demo", "--hosts", hosts, "--count", "3", "--interval", "0.5", "--timeout", "120"]) == 0
    capsys.readouterr()
    with Store(default_path()).open() as store:  # the incident: another watcher saw the pool hold 230,000 tokens
        row = store.boots("demo")[0]
        part = {"first_at": 1.0, "last_at": 61.0, "seconds": 60.0, "samples": 13, "peak_kv_usage": 1.0,
                "peak_tokens": 230_000, "counts": {"retractions": 40.0, "requests": 300.0}}
        store.put({**row.doc, "serving": build_section({"incident": part})}, row.key)
    assert main(["--hosts", hosts, "tune", "demo", "--goal", "tokens=observed", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert f"the running boot (#{row.id}) held at most 230,000 tokens" in err
    assert "+ 20% = tokens=276,000; the pool was full, so the demand was at least that" in err
    assert "goal tokens=276,000" in out
    observed = _first_candidate(out)
    assert main(["--hosts", hosts, "tune", "demo", "--goal", "tokens=276000", "--dry-run"]) == 0
    assert _first_candidate(capsys.readouterr().out) == observed  # the calculator's fraction for that pool
    assert main(["--hosts", hosts, "tune", "demo", "--goal", "tokens=observed", "--requests", "2"]) == 2


def test_history_show_lists_the_serving_figures(capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = _two_boots()
    assert main(["history", "show", str(a)]) == 0
    out = capsys.readouterr()[0]
    assert "  Serving (as watched: 5 samples from " in out
    line = next(ln for ln in out.splitlines() if "preemptions per 1k requests" in ln)
    assert line.split()[-1] == "137"


# -- the recording hook ---------------------------------------------------------------------------------


async def test_the_recorder_writes_every_turn_off_the_loop_and_on_close(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import threading

    from kvtui.history.serving import ServingRecorder
    from kvtui.history.store import Store as RealStore

    path = tmp_path / "h.sqlite3"
    now = [0.0]
    rec = ServingRecorder("h", path=path, every=30.0, clock=lambda: now[0])
    writers: list[str] = []
    real_put = RealStore.put

    def put(self: RealStore, doc: dict[str, object], key: str) -> int:
        writers.append(threading.current_thread().name)
        return real_put(self, doc, key)

    monkeypatch.setattr(RealStore, "put", put)
    boot1, boot2 = sglang(0.85), sglang(0.9, minutes=30)
    window = ServingWindow()
    for i in range(4):  # 4 samples 10 s apart: one write when the 30 s turn comes
        window.add(_s(10.0 * i, pre=2.0 * i, reqs=100.0 * i, usage=0.5))
        now[0] = 10.0 * i + 5
        rec.observe(boot1, window)
    for _ in range(1200):  # up to a minute on a loaded machine
        if rec.written:
            break
        await asyncio.sleep(0.05)
    assert rec.written == 1
    assert writers
    assert threading.main_thread().name not in writers  # SQLite never on the loop's thread
    window.add(_s(100.0, pre=0.0, reqs=0.0, usage=0.9))  # the next boot's first sample
    rec.observe(boot2, window)  # a new boot: the previous one's last figures are queued
    assert await rec.close() is None
    assert rec.tally is not None
    assert rec.tally.samples == 1  # the new boot's tally took only its own sample
    with RealStore(path).open() as store:
        first = store.by_key(boot_key("h", boot1) or "")
        second = store.by_key(boot_key("h", boot2) or "")
    assert first is not None
    assert second is not None
    assert section_of(first.doc)["samples"] == 4  # type: ignore[index]
    assert section_of(first.doc)["preemptions"] == 6  # type: ignore[index]
    assert section_of(second.doc)["peak_kv_usage"] == pytest.approx(0.9)  # type: ignore[index]


async def test_a_boot_the_history_cannot_name_is_said(tmp_path: Path) -> None:
    from kvtui.boot import Boot
    from kvtui.history.serving import ServingRecorder

    rec = ServingRecorder("h", path=tmp_path / "h.sqlite3")
    window = ServingWindow()
    window.add(_s(0.0, pre=0, reqs=0, usage=0.2))
    rec.observe(Boot(engine=Engine.SGLANG), window)  # serving lines only: no start, no flags
    problem = await rec.close()
    assert problem is not None
    assert "the boot's start is not in the log read" in problem
    assert rec.written == 0


def test_a_restarts_ledger_entry_carries_the_boots_serving_figures(tmp_path: Path) -> None:
    from kvtui.history import ledger

    boot = sglang(0.92)
    key = boot_key("h", boot)
    assert key is not None
    restart = {"action": "apply", "edit": ["--mem-fraction-static", "0.92"],
               "prediction": {"tokens": 511_443, "verdict": "ok"}}
    with Store(tmp_path / "h.sqlite3").open() as store:
        row = store.put(boot_doc("h", boot, restart=restart), key)
        e = ledger.entry(store.get(row).doc, row)  # type: ignore[union-attr]
        assert e is not None
        assert e.to_json()["serving"] is None  # nobody watched it serve (yet)
        record_serving(store, "h", boot, _tally(0.61, 0))
        e = ledger.entry(store.get(row).doc, row)  # type: ignore[union-attr]
    assert e is not None
    assert e.to_json()["serving"] == {"preemptions_per_1k": 0.0, "retractions_per_1k": None,
                                      "ttft_p95": pytest.approx(0.095), "peak_kv_usage": pytest.approx(0.61)}
