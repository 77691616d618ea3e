"""The history's typed document (issue 23: ``BootDoc``): today's documents read without loss, a
newer kvtui's are refused with a message naming the file, the row and the version, and what the
recorder writes reads back as written; the calculator's calibration is a typed result."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from history_support import sglang
from test_ui_app import SIZE, SPEED, ready_demo
from test_ui_helpers import demo_app, wait_for

from kvtui import kvcalc
from kvtui.changes import calculate, restart_record
from kvtui.cli import main
from kvtui.history import (
    DOC_SCHEMA_VERSION,
    BootDoc,
    DocVersionError,
    HistoryError,
    Store,
    boot_key,
    open_store,
)
from kvtui.history import record as rec
from kvtui.history.store import default_path
from kvtui.ui.history.screen import HistoryScreen

# what kvtui wrote before the model existed (``boot_doc`` of main at issue 23: a Ray vLLM boot with
# every part the history keeps: spool, peaks, GPU readings, a restart with its prediction, serving)
OLD = Path(__file__).parent / "fixtures" / "history" / "boot-doc-v1-today.json"
HOSTS = '[hosts.gpu-a]\nlocal = true\nlog_file = "/var/log/vllm.log"\n'


def _old() -> dict[str, object]:
    raw = json.loads(OLD.read_text())
    assert isinstance(raw, dict)
    return raw


def _same_json(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _put_raw(store: Store, key: str, raw: dict[str, object], host: str = "gpu-a") -> int:
    """A row of ``host`` whose stored text is ``raw`` as it is (what another kvtui wrote)."""
    row = store.put(rec.boot_doc(host, sglang(0.85)), key)
    db = sqlite3.connect(str(store.path))
    with db:
        db.execute("UPDATE boots SET doc = ? WHERE id = ?", (json.dumps(raw, sort_keys=True), row))
    db.close()
    return row


def test_a_document_of_today_reads_into_the_model_without_loss() -> None:
    raw = _old()
    assert "schema_version" not in raw  # today's shape: version 1 by default
    doc = BootDoc.parse(raw, "boot-doc-v1-today.json")
    assert doc.schema_version == 1 == DOC_SCHEMA_VERSION
    assert doc.host == "gpu-a"
    assert doc.engine == "vllm"
    assert doc.status == "ready"
    assert doc.model is not None
    assert doc.tp == 4
    assert doc.tokens is not None
    assert doc.tokens > 0
    assert doc.seconds is not None
    assert doc.seconds > 0
    assert doc.deployment == rec.deployment_of(raw)
    assert doc.spool is not None
    assert doc.spool.set == "/var/spool/kvtui/gpu-a"
    assert doc.spool.boot == 3
    assert doc.gpu_samples is not None
    assert len(doc.gpu_samples.ts) == 3
    assert doc.restart is not None
    assert doc.restart.prediction is not None
    assert doc.restart.prediction.calibration_boots == 2
    assert doc.restart.edit == ["gpu-memory-utilization=0.92"]
    s = doc.serving_figures
    assert s is not None
    assert s.samples == 61
    assert s.peak_tokens == 97000
    assert "sess-1" in s.sessions
    assert rec.ray_workers(doc)  # the Ray nodes' workers
    assert doc.unit_env == {"VLLM_CPU_KVCACHE_SPACE": "4"}
    # without loss: the same JSON back, no key added (not even the version), no number's kind changed
    assert _same_json(doc.to_json(), raw)
    # an unknown key (a later kvtui's part this one does not know) is kept too
    more = BootDoc.parse({**raw, "later_part": {"x": [1, 2.5, None]}})
    assert more.to_json()["later_part"] == {"x": [1, 2.5, None]}


def test_a_stored_document_of_today_lists_and_prints_as_before(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    raw = _old()
    with open_store() as store:
        row = _put_raw(store, "old-key", raw)
        got = store.get(row)
    assert got is not None
    assert _same_json(got.doc, raw)
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert main(["--hosts", str(hosts), "history", "gpu-a", "--json"]) == 0
    out, err = capsys.readouterr()
    boots = json.loads(out)["boots"]
    assert _same_json(boots[0], {"id": row, "key": "old-key", **raw}), err  # ``history --json``: unchanged
    assert main(["--hosts", str(hosts), "history", "gpu-a"]) == 0
    out, _ = capsys.readouterr()
    assert f"#{row}" in out
    assert "ready" in out
    assert "predicted" in out


def test_a_document_of_a_newer_schema_is_refused_with_the_file_row_and_version(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    future = {**_old(), "schema_version": 99}
    with pytest.raises(DocVersionError) as exc:
        BootDoc.parse(future, "somewhere row 7")
    assert "somewhere row 7" in str(exc.value)
    assert "schema_version 99" in str(exc.value)
    assert exc.value.version == 99
    with open_store() as store:
        row = _put_raw(store, "future-key", future)
        keep = store.put(rec.boot_doc("gpu-a", sglang(0.9, minutes=60)), "a-current-boot")
        rows = store.boots("gpu-a")
        assert [r.id for r in rows] == [keep]  # the newer kvtui's row is not read
        assert len(store.refused) == 1
        said = store.refused[0]
        assert str(store.path) in said
        assert f"row {row}" in said
        assert "schema_version 99" in said
        with pytest.raises(HistoryError, match="schema_version 99"):  # and never overwritten
            store.put(rec.boot_doc("gpu-a", sglang(0.85)), "future-key")
    db = sqlite3.connect(str(default_path()))
    stored = json.loads(db.execute("SELECT doc FROM boots WHERE id = ?", (row,)).fetchone()[0])
    db.close()
    assert stored["schema_version"] == 99
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert main(["--hosts", str(hosts), "history", "gpu-a"]) == 0
    out, err = capsys.readouterr()
    assert f"#{keep}" in out
    assert f"row {row}: boot document schema_version 99 is newer than this kvtui reads (1)" in err


async def test_the_console_history_view_says_which_row_a_newer_kvtui_wrote() -> None:
    with open_store() as store:
        row = _put_raw(store, "future-key", {**_old(), "host": "demo", "schema_version": 99}, host="demo")
    app = demo_app(ready_demo(), speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("H")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen)
                       and "schema_version 99" in app.screen.detail_text)
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        assert f"row {row}: boot document schema_version 99 is newer than this kvtui reads" in screen.detail_text
        assert row not in [r.id for r in screen.rows]


def test_what_the_recorder_writes_reads_back_as_written() -> None:
    boot = sglang(0.88, minutes=30)
    key = boot_key("gpu-a", boot)
    assert key is not None
    series = rec.GpuSeries()
    series.add([SimpleNamespace(index=0, used_mib=1234.0, total_mib=81559.0, ts=1.5)])
    written = rec.new_doc("gpu-a", boot, source="local:/x.log", spool={"set": "/s", "boot": 1},
                          peaks_mib={0: 7.5}, free_at_start_mib={0: 80_000.0}, gpu_samples=series.to_json(),
                          restart={"action": "apply", "edit": ["a=1"], "prediction": {"tokens": 5, "verdict": "ok"}},
                          unit_env={})
    with open_store() as store:
        row = store.put(written, key)
        got = store.get(row)
    assert got is not None
    assert got.document == written
    assert _same_json(got.doc, written.to_json())
    assert got.doc["schema_version"] == DOC_SCHEMA_VERSION  # written with its version
    assert got.doc["doc_version"] == 1  # and as before
    again = BootDoc.parse(json.dumps(got.doc))
    assert again == written
    assert rec.merge(written, written) == written  # a merge with itself changes nothing


def test_the_calibration_is_a_typed_result_and_the_restart_record_reads_it() -> None:
    plain = sglang(0.85)
    pred = kvcalc.predict(kvcalc.calibrate(plain))
    assert pred.calibrated is None
    cal = kvcalc.HistoryCalibration(4, 3, (0.8, 0.83))
    assert cal.note() == "calibrated with 4 boots of this deployment: 3 from the history (fractions 0.8, 0.83)"
    # the reasons' text is for people: the record reads the typed result, not the words
    typed = SimpleNamespace(
        prediction=kvcalc.Prediction(**{**{f: getattr(pred, f) for f in pred.__dataclass_fields__},
                                        "calibrated": cal, "reasons": ["calibrated with many boots"]}),
        action="apply", edits=[], env_edits=[], backup_path="/b", saved_copy="/b",
        source=SimpleNamespace(path="/f"), force=False, refusals=[], prediction_note=None)
    outcome = SimpleNamespace(status="ready", code=0, rolled_back=False)
    got = restart_record(typed, outcome)  # type: ignore[arg-type]
    assert got["prediction"]["calibration_boots"] == 4  # type: ignore[index]
    typed.prediction = pred
    assert restart_record(typed, outcome)["prediction"]["calibration_boots"] == 1  # type: ignore[arg-type,index]
    # the calculator fills it when the history calibrated the prediction
    with open_store() as store:
        for i, frac in enumerate((0.8, 0.83)):
            b = sglang(frac, minutes=10 * (i + 1))
            store.put(rec.boot_doc("gpu-b", b), boot_key("gpu-b", b) or "")
    forecast = calculate([plain], lambda _b: {}, None)
    assert not isinstance(forecast, str)
    assert forecast.prediction.calibrated == kvcalc.HistoryCalibration(3, 2, (0.8, 0.83))
    assert forecast.prediction.calibrated.note() in forecast.prediction.reasons
