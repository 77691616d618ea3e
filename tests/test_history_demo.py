"""The issue's demo-host walk: five restarts at different fractions through ``kvtui apply
--restart``, then ``kvtui history demo --json`` lists them with their predictions and outcomes,
the calculator calibrates with the remembered boots, and the sixth restart comes with an ETA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtui.cli import main

HOSTS = "[hosts.demo]\ndemo = true\ndemo_speed = 400.0\n"
FRACTIONS = (0.80, 0.83, 0.86, 0.82, 0.88)


@pytest.mark.slow
def test_five_restarts_then_the_ledger_and_an_eta(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    errs: list[str] = []
    for f in FRACTIONS:
        code = main(["--hosts", str(hosts), "apply", "demo", "--set", f"mem-fraction-static={f}", "--restart",
                     "--yes", "--timeout", "120"])
        out, err = capsys.readouterr()
        assert code == 0, err
        errs.append(out + err)  # the plan (with the prediction) on stdout, progress on stderr
    assert "no ETA: no earlier ready boot of /models/Kimi-K2.6 with TP 8 on demo in the history" in errs[0]
    assert "calibrated with" not in errs[0] + errs[1]  # nothing remembered before the current boot yet
    # from the third on, the boots remembered before the current one calibrate the prediction too
    assert "calibrated with 2 boots of this deployment: 1 from the history (fractions 0.8)" in errs[2]
    assert "calibrated with 4 boots of this deployment: 3 from the history (fractions 0.8, 0.83, 0.86)" in errs[4]
    assert "basis least-squares" in errs[4]  # four boots: a line fitted through all of them

    assert main(["--hosts", str(hosts), "history", "demo", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    boots = doc["boots"]
    assert [b["flags"]["mem_fraction_static"] for b in boots] == list(reversed(FRACTIONS))
    for b in boots:
        r = b["restart"]
        assert r["action"] == "apply"
        assert r["outcome"] == "ready"
        assert r["prediction"]["verdict"] in ("ok", "tight")
        assert r["prediction"]["tokens"] > 0
        assert b["status"] == "ready"
        assert b["source"] == "demo:simulated unit"
    assert [b["restart"]["prediction"]["calibration_boots"] for b in reversed(boots)] == [1, 1, 2, 3, 4]
    assert [b["restart"]["edit"] for b in reversed(boots)] == [[f"--set mem-fraction-static={f}"] for f in FRACTIONS]
    ledger = doc["ledger"]
    assert len(ledger["entries"]) == 5
    summary = ledger["summary"]
    assert summary["restarts"] == 5
    assert summary["with_tokens"] == 5
    assert summary["verdicts_held"] == 5
    assert summary["max_abs_error_pct"] < 0.5  # the calculator against the demo's independent simulation
    for e in ledger["entries"]:
        assert e["actual_tokens"] == next(b for b in boots if b["id"] == e["boot"])["metrics"]["max_total_num_tokens"]

    # the sixth restart says how long the boot usually takes, from the five remembered
    code = main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.85", "--restart", "--yes",
                 "--timeout", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "a boot of /models/Kimi-K2.6 on demo is usually ready in ~0:0" in err
    assert "median of 5 boots)" in err
    assert main(["--hosts", str(hosts), "history", "demo"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[-1].startswith("Prediction ledger: 6 restarts; token error mean")
    assert "verdict held 6/6" in table
    # kvtui calc --host calibrates with them too (the current boot is the sixth: five others)
    assert main(["--hosts", str(hosts), "calc", "--host", "demo", "--set", "mem-fraction-static=0.9"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "(+5 boots of this deployment from the history) · basis least-squares · confidence high (6 boots)" in head
    assert main(["--hosts", str(hosts), "calc", "--host", "demo", "--set", "mem-fraction-static=0.9", "--json"]) == 0
    calibration = json.loads(capsys.readouterr().out)["calibration"]  # the same, for scripts
    assert calibration == {"method": "least-squares", "boots": 6, "env": None, "from_log": 0, "from_history": 5}
    # a rollback with a restart says how long the boot usually takes too (issue 22 #15: it predicts
    # nothing, so it said nothing)
    code = main(["--hosts", str(hosts), "rollback", "demo", "--restart", "--yes", "--timeout", "120"])
    _out, err = capsys.readouterr()
    assert code == 0, err
    assert "a boot of /models/Kimi-K2.6 on demo is usually ready in ~0:0" in err
    # tune's steps and closing rollback give their follower the same heartbeat ETA
    import asyncio
    import dataclasses
    import time
    from types import SimpleNamespace

    from kvtui.boot import BootStatus
    from kvtui.history import boot_from_doc, open_store
    from kvtui.tune import driver

    with open_store(readonly=True) as store:
        newest = boot_from_doc(store.boots("demo", limit=1)[0].doc)
    starting = dataclasses.replace(newest, status=BootStatus.STARTING, phase=newest.phases[2].name,
                                   phases=[dataclasses.replace(p) for p in newest.phases[:3]])
    starting.phases[-1].end = None
    eta = asyncio.run(driver._heartbeat_eta(SimpleNamespace(name="demo", nodes=[], clock=time.time)))  # type: ignore[arg-type]
    assert "ready in ~" in (eta(starting) or "")


@pytest.mark.slow
def test_wait_on_a_failed_boot_says_what_changed_since_the_last_good_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.86", "--restart", "--yes",
                 "--timeout", "120"]) == 0
    code = main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.99", "--restart", "--yes",
                 "--force", "--timeout", "120"])
    assert code == 1
    capsys.readouterr()
    assert main(["--hosts", str(hosts), "wait", "demo", "--timeout", "60"]) == 1  # the current boot: failed
    err = capsys.readouterr().err
    assert "failed in graph capture: oom_graph_capture" in err
    assert "since the last good boot (" in err
    assert "  flags: mem_fraction_static 0.86 → 0.99" in err
    assert "kvtui history demo --diff: the whole comparison" in err
    # the demo's unit restarts on failure (Restart=on-failure): the newest boot may be its next
    # one, so the failed boot is named
    assert main(["--hosts", str(hosts), "history", "demo", "--json"]) == 0
    boots = json.loads(capsys.readouterr().out)["boots"]
    failed = next(b["id"] for b in boots if b["status"] == "failed")
    assert main(["--hosts", str(hosts), "history", "demo", "--diff", str(failed)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("failed (oom_graph_capture in graph_capture)")
    assert "changed  mem_fraction_static: 0.86 → 0.99" in out
    with_ids = [ln for ln in out.splitlines() if ln.startswith("#") or "compared with" in ln]
    assert len(with_ids) == 2


@pytest.mark.slow
def test_apply_restart_heartbeat_carries_the_eta(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower of ``apply --restart`` (the service, which imports no history) says the new
    boot's ETA in its heartbeat: the command passes it the estimate as a callable."""
    from kvtui import fmt

    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.83", "--restart",
                 "--yes"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(fmt, "HEARTBEAT_S", 0.02)  # a heartbeat every few lines of the 0.7 s demo boot
    assert main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.84", "--restart",
                 "--yes"]) == 0
    err = capsys.readouterr().err
    beats = [ln for ln in err.splitlines() if ln.startswith("… still waiting after ") and "the new boot is in" in ln]
    assert beats, err
    assert any("(median of 1 boot)" in ln and " / ~0:0" in ln for ln in beats), beats
