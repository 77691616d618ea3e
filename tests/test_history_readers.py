"""The readers over stored boots: ``kvtui history`` (list, JSON, ``--diff`` on the issue's seed
situations), ``replay --record``, phase ETAs from a seeded history (and none without one), the
prediction ledger."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from history_support import FIXTURES_DIR, boots_of, sglang_lines

from kvtui.boot import BootStatus
from kvtui.cli import main
from kvtui.engines.events import Phase
from kvtui.history import eta, ledger, open_store

HOSTS = '[hosts.gpu-a]\nlocal = true\nlog_file = "/var/log/sglang.log"\n'


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    p = tmp_path / "hosts.toml"
    p.write_text(HOSTS)
    return p


def _record(hosts: Path, tmp_path: Path, name: str, lines: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / name
    log.write_text("\n".join(lines) + "\n")
    main(["--hosts", str(hosts), "replay", str(log), "--record", "gpu-a"])
    capsys.readouterr()


def _kvtui(hosts: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["--hosts", str(hosts), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_replay_stores_nothing_without_record(hosts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "a.log"
    log.write_text("\n".join(sglang_lines(0.85)) + "\n")
    assert main(["replay", str(log)]) == 0
    with open_store(readonly=True) as store:
        assert store.count() == 0
    code, _, err = _kvtui(hosts, capsys, "replay", str(log), "--record", "gpu-a")
    assert code == 0
    assert "recorded 1 of 1 boot as boots of gpu-a" in err
    _kvtui(hosts, capsys, "replay", str(log), "--record", "gpu-a")  # the same log again: the same boot
    with open_store(readonly=True) as store:
        assert store.count("gpu-a") == 1


def test_diff_of_a_fraction_and_running_requests_change(hosts: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _record(hosts, tmp_path, "a.log", sglang_lines(0.85, max_running_requests=64), capsys)
    _record(hosts, tmp_path, "b.log", sglang_lines(0.92, minutes=30, max_running_requests=8), capsys)
    code, out, err = _kvtui(hosts, capsys, "history", "gpu-a")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["id", "started", "outcome"]
    assert lines[1].startswith("#2  2026-05-01 10:30:00  ready")  # newest first
    assert "0.92" in lines[1]
    assert lines[2].startswith("#1  2026-05-01 10:00:00  ready")
    code, out, err = _kvtui(hosts, capsys, "history", "gpu-a", "--diff")  # the newest vs the last ready before it
    assert code == 0, err
    assert "#2 2026-05-01 10:30:00 ready" in out
    assert "compared with #1 2026-05-01 10:00:00 ready" in out
    assert "changed  max_running_requests: 64 → 8" in out
    assert "changed  mem_fraction_static: 0.85 → 0.92" in out
    assert "Flags:\n  changed" in out
    assert "model_path" not in out  # the same in both
    tokens = next(ln for ln in out.splitlines() if ln.strip().startswith("tokens"))
    assert tokens.split()[1:3] == ["439,768", "511,443"]  # what the two boots sized, side by side
    code, out, _ = _kvtui(hosts, capsys, "history", "gpu-a", "--diff", "2", "1", "--json")
    doc = json.loads(out)
    assert doc["flags"]["changed"] == {"max_running_requests": [64, 8], "mem_fraction_static": [0.85, 0.92]}
    assert doc["flags"]["added"] == {}
    assert doc["figures"]["max_total_num_tokens"] == [439768, 511443]
    assert doc["phase_seconds"]["load_weights"] == [240.0, 240.0]
    assert set(doc["free_before_load_gib"]) == {"TP0", "TP1", "TP2", "TP3"}


def test_diff_of_a_capture_failure_against_the_last_ready_boot(hosts: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    _record(hosts, tmp_path, "ok.log", sglang_lines(0.85), capsys)
    _record(hosts, tmp_path, "other.log", sglang_lines(0.85, minutes=10, tp_size=8), capsys)  # not the same TP
    _record(hosts, tmp_path, "bad.log", sglang_lines(0.99, minutes=30), capsys)
    code, out, err = _kvtui(hosts, capsys, "history", "gpu-a")
    assert "#3  2026-05-01 10:30:00  failed" in out
    assert "oom_graph_capture in graph_capture" in out
    code, out, err = _kvtui(hosts, capsys, "history", "gpu-a", "--diff")
    assert code == 0, err
    assert out.splitlines()[0] == "#3 2026-05-01 10:30:00 failed (oom_graph_capture in graph_capture)"
    # the last ready boot of the same model: #2 (TP 8) is ready and newer, and is the same model
    assert "compared with #2" in out
    assert "changed  mem_fraction_static: 0.85 → 0.99" in out
    assert "Failure: oom_graph_capture in graph_capture" in out
    assert "hint: CUDA-graph capture ran out of GPU memory" in out
    phases = out[out.index("Phases:"):]
    assert "graph_capture" in phases
    code, out, err = _kvtui(hosts, capsys, "history", "gpu-a", "--diff", "3", "1")
    assert "compared with #1 2026-05-01 10:00:00 ready" in out
    assert "tp_size" not in out


def test_history_usage_and_missing_boots(hosts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _kvtui(hosts, capsys, "history", "gpu-a")
    assert code == 0
    assert "no boot of gpu-a in the history" in err
    code, _, err = _kvtui(hosts, capsys, "history", "nope")
    assert code == 3
    assert "unknown host 'nope'" in err
    code, _, err = _kvtui(hosts, capsys, "history", "gpu-a", "--limit", "0")
    assert code == 2
    _record(hosts, tmp_path, "a.log", sglang_lines(0.85), capsys)
    code, _, err = _kvtui(hosts, capsys, "history", "gpu-a", "--diff", "7")
    assert code == 3
    assert "no boot #7" in err
    assert "#1" in err
    code, _, err = _kvtui(hosts, capsys, "history", "gpu-a", "--diff")
    assert code == 3
    assert "no ready boot of the same model before #1" in err
    code, _, err = _kvtui(hosts, capsys, "history", "gpu-a", "--diff", "1", "2", "3")
    assert code == 2


def test_history_json_and_limit(hosts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i, f in enumerate((0.80, 0.82, 0.84)):
        _record(hosts, tmp_path, f"{i}.log", sglang_lines(f, minutes=10 * i), capsys)
    _, out, _ = _kvtui(hosts, capsys, "history", "gpu-a", "--json", "--limit", "2")
    doc = json.loads(out)
    assert [b["id"] for b in doc["boots"]] == [3, 2]
    b = doc["boots"][0]
    assert b["flags"]["mem_fraction_static"] == 0.84
    assert b["status"] == "ready"
    assert b["source"].startswith("replay:")
    assert [p["name"] for p in b["phases"]][:3] == ["launch", "init", "load_weights"]
    assert b["restart"] is None
    assert doc["ledger"]["summary"]["restarts"] == 0


# -- ETAs ---------------------------------------------------------------------------------------------


STRETCHES = (1.0, 1.1, 0.9, 1.2, 1.05, 0.95)  # six past boots: every phase takes that much longer


def _seed_history(hosts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    for i, k in enumerate(STRETCHES):
        _record(hosts, tmp_path, f"{i}.log", sglang_lines(0.85, minutes=30 * i, stretch=k), capsys)
    with open_store(readonly=True) as store:
        return [r.doc for r in store.boots("gpu-a")]


def _running(stretch: float = 1.0, until: str = "Capture cuda graph begin") -> tuple[object, list[str]]:
    lines = sglang_lines(0.85, minutes=600, stretch=stretch)
    cut = next(i for i, ln in enumerate(lines) if until in ln)
    boots = boots_of(lines[: cut + 1])
    return boots[-1], lines


def test_eta_from_a_seeded_history(hosts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = _seed_history(hosts, tmp_path, capsys)
    boot, _ = _running()
    assert boot.status is BootStatus.STARTING  # type: ignore[attr-defined]
    assert boot.phase is Phase.GRAPH_CAPTURE  # type: ignore[attr-defined]
    start = boot.phases[-1].start  # type: ignore[attr-defined]
    got = eta.estimate(boot, docs, start + timedelta(seconds=5), host="gpu-a")  # type: ignore[arg-type]
    assert got.phase == "graph_capture"
    assert got.current is not None
    # the six boots captured in 11 s × their stretch: median of 9.9 … 13.2 s
    assert got.current.boots == 6
    assert got.current.median == pytest.approx(11 * 1.025, abs=0.6)  # 1-second log stamps
    assert got.current.low == pytest.approx(11 * 0.9, abs=1)
    assert got.current.high == pytest.approx(11 * 1.2, abs=1)
    assert got.remaining is not None
    assert got.remaining == pytest.approx(got.current.median - 5 + 2 * 1.025, abs=1.5)  # + http_up
    text = got.text()
    assert text.startswith("graph capture 0:05 / ~0:1")
    assert "(median of 6 boots)" in text
    assert "slower" not in text
    # a capture past 3× its median
    slow = eta.estimate(boot, docs, start + timedelta(seconds=3.6 * got.current.median), host="gpu-a")  # type: ignore[arg-type]
    assert slow.slow is not None
    assert "slower than usual: 3.6× the median of 6 boots" in slow.text()
    # in weight loading: the rest of the boot is the later phases' medians
    loading, _ = _running(until="Load weight begin")
    s2 = loading.phases[-1].start  # type: ignore[attr-defined]
    e2 = eta.estimate(loading, docs, s2, host="gpu-a")  # type: ignore[arg-type]
    assert e2.phase == "load_weights"
    assert e2.remaining == pytest.approx(1.025 * (240 + 1 + 11 + 2), rel=0.03)


def test_no_eta_without_history(hosts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    boot, _ = _running()
    start = boot.phases[-1].start  # type: ignore[attr-defined]
    got = eta.estimate(boot, [], start, host="gpu-a")  # type: ignore[arg-type]
    assert got.current is None
    assert got.remaining is None
    assert got.text() == "no ETA: no earlier ready boot of /models/Llama-3.1-70B-Instruct on gpu-a in the history"
    docs = _seed_history(hosts, tmp_path, capsys)
    tp8, _ = _running()
    tp8.flags["tp_size"] = 8  # type: ignore[attr-defined]
    got = eta.estimate(tp8, docs, start, host="gpu-a")  # type: ignore[arg-type]
    assert got.current is None
    assert "no ETA: no earlier ready boot of /models/Llama-3.1-70B-Instruct with TP 8" in got.text()


# -- the ledger -----------------------------------------------------------------------------------------


def test_ledger_entries_and_summary() -> None:
    def doc(status: str, tokens: int | None, predicted: int, verdict: str) -> dict[str, object]:
        return {"status": status, "metrics": {"max_total_num_tokens": tokens}, "flags": {"mem_fraction_static": 0.9},
                "restart": {"edit": ["mem-fraction-static=0.9"],
                            "prediction": {"tokens": predicted, "verdict": verdict, "confidence": "high",
                                           "calibration_boots": 2}}}

    entries = [e for d in (doc("ready", 1010, 1000, "ok"), doc("ready", 990, 1000, "tight"),
                           doc("failed", None, 1200, "oom_risk"), doc("failed", 1100, 1100, "ok"),
                           {"status": "ready"}) if (e := ledger.entry(d)) is not None]
    assert len(entries) == 4
    assert [e.error_pct for e in entries] == [pytest.approx(1.0), pytest.approx(-1.0), None, pytest.approx(0.0)]
    assert [e.verdict_held for e in entries] == [True, True, True, False]
    s = ledger.summarize(entries)
    assert s.mean_abs_error_pct == pytest.approx(2 / 3)
    assert s.max_abs_error_pct == pytest.approx(1.0)
    assert (s.verdicts_held, s.verdicts_judged) == (3, 4)
    assert s.text() == ("Prediction ledger: 4 restarts; token error mean 0.67 %, max 1.00 % over 3; "
                        "verdict held 3/4")


def test_fixture_pair_keeps_its_failure_in_the_store(hosts: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    src = FIXTURES_DIR / "kvcalc" / "sglang-pair-qwen72b-capture-oom.log"
    code, _, err = _kvtui(hosts, capsys, "replay", str(src), "--record", "gpu-a")
    assert code == 1  # the last boot failed, as replay says
    assert "recorded 2 of 2 boots" in err
    with open_store(readonly=True) as store:
        rows = store.boots("gpu-a")
    assert [r.status for r in rows] == ["failed", "ready"]
    assert rows[0].doc["failure"]["kind"] == "oom_graph_capture"
    assert rows[0].doc["failure"]["phase"] == "graph_capture"


def test_slower_than_usual_from_the_stall_detectors_silence() -> None:
    est = eta.PhaseEstimate("graph_capture", 65.0, 50.0, 80.0, 6)
    running = eta.BootEta("graph_capture", 30.0, est, 120.0, 6, "")
    assert eta.slow_reason(running) is None  # on time, not silent
    assert eta.slow_reason(running, 300.0) == (
        "slower than usual: silent for 5:00 in graph capture, which takes ~1:05 (median of 6 boots)")
    late = eta.BootEta("graph_capture", 220.0, est, 0.0, 6, "")
    assert eta.slow_reason(late, 300.0) == "slower than usual: 3.4× the median of 6 boots"  # the ratio says more
    assert eta.slow_reason(None, 300.0) is None  # no history: the stall notice alone says it
    assert eta.slow_reason(eta.BootEta("graph_capture", 30.0, None, None, 0, "no ETA"), 300.0) is None


def test_slower_than_usual_is_worded_by_what_the_stall_detector_saw() -> None:
    from kvtui.boot.stall import SHM_BROADCAST, Stall

    est = eta.PhaseEstimate("init", 40.0, 30.0, 50.0, 6)
    running = eta.BootEta("init", 30.0, est, 120.0, 6, "")
    waits = Stall(300.0, Phase.INIT, SHM_BROADCAST, 5)
    assert eta.slow_reason(running, waits) == (
        "slower than usual: no progress for 5:00 in init (only wait lines: 'No available shared memory broadcast "
        "block' 5×), which takes ~0:40 (median of 6 boots)")
    silent = Stall(300.0, Phase.INIT)  # nothing at all came: "silent" is what it saw
    assert eta.slow_reason(running, silent) == (
        "slower than usual: silent for 5:00 in init, which takes ~0:40 (median of 6 boots)")
