"""``kvtui history show KEY|N``: one stored boot in full (text and --json), on a real history file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from history_support import sglang

from kvtui.cli import main
from kvtui.history import boot_doc, boot_key, open_store

HOSTS = '[hosts.gpu-a]\nlocal = true\nlog_file = "/var/log/sglang.log"\n'


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    p = tmp_path / "hosts.toml"
    p.write_text(HOSTS)
    return p


def _kvtui(hosts: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["--hosts", str(hosts), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _seed() -> tuple[int, str, int]:
    """Two boots of gpu-a: a plain one, then a kvtui restart at 0.88 with its prediction and GPU
    readings. (id of the restart, its key, its actual tokens)."""
    plain, restarted = sglang(0.85), sglang(0.88, minutes=30)
    tokens = restarted.metrics.max_total_num_tokens
    assert tokens is not None
    restart = {
        "action": "apply", "edit": ["--set mem-fraction-static=0.88"], "restored_from": None,
        "backup": "/etc/systemd/system/sglang.service.kvtui-bak", "file": "/etc/systemd/system/sglang.service",
        "forced": False, "prediction_note": None, "outcome": "ready", "exit": 0, "rolled_back": False,
        "prediction": {"tokens": tokens - 1000, "verdict": "ok", "confidence": "high", "basis": "two-point",
                       "fraction": 0.88, "kv_cache_gib": 60.0, "calibration_boots": 2},
    }
    key = boot_key("gpu-a", restarted)
    assert key is not None
    with open_store() as store:
        store.put(boot_doc("gpu-a", plain, source="replay:x.log"), boot_key("gpu-a", plain) or "")
        row = store.put(boot_doc("gpu-a", restarted, source="local:/var/log/sglang.log", restart=restart,
                                 peaks_mib={0: 70_123.0, 1: 71_000.0}, free_at_start_mib={0: 80_500.0, 1: 80_400.0}),
                        key)
    return row, key, tokens


def test_show_prints_one_boot_in_full(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row, key, tokens = _seed()
    code, out, err = _kvtui(hosts, capsys, "history", "show", str(row))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"Boot #{row} of gpu-a · sglang")
    assert "READY" in lines[0]
    assert any(ln.split()[:1] == ["load_weights"] for ln in lines)  # the phases
    assert f"{tokens:,} tokens" in out  # the figures
    assert f"    key              {key}" in lines
    assert "    recorded from    local:/var/log/sglang.log" in lines
    assert "  GPUs (MiB: free when the boot began · peak used during it)" in lines
    gpu0 = next(ln for ln in lines if ln.startswith("    GPU 0"))
    assert "80,500" in gpu0
    assert "70,123" in gpu0
    assert any(ln.startswith("  Flags (") for ln in lines)
    assert "mem_fraction_static=0.88" in out
    assert "  Restart by kvtui (apply)" in lines
    assert "    edit             --set mem-fraction-static=0.88" in lines
    assert f"    predicted        {tokens - 1000:,} tokens, ok, confidence high (2 boots)" in lines
    pct = 1000 / (tokens - 1000) * 100
    assert f"    actual           {tokens:,} tokens (+{pct:.2f} %), verdict held" in lines
    assert "    outcome          ready (exit 0)" in lines
    # by "#N", and by a start of the key: the same boot
    assert _kvtui(hosts, capsys, "history", "show", f"#{row}")[1] == out
    assert _kvtui(hosts, capsys, "history", "show", key[:8])[1] == out


def test_show_json_is_the_stored_document(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row, key, _ = _seed()
    code, out, _ = _kvtui(hosts, capsys, "history", "show", key, "--json")
    assert code == 0
    doc = json.loads(out)
    with open_store(readonly=True) as store:
        stored = store.get(row)
    assert stored is not None
    assert doc == json.loads(json.dumps(stored.to_json(), default=str))
    assert doc["id"] == row
    assert doc["key"] == key
    assert doc["restart"]["prediction"]["calibration_boots"] == 2
    assert doc["peak_used_mib"] == {"0": 70_123.0, "1": 71_000.0}


def test_show_usage_and_missing_boots(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _seed()
    code, _, err = _kvtui(hosts, capsys, "history", "show", "99")
    assert code == 3
    assert "no boot #99 in the history" in err
    code, _, err = _kvtui(hosts, capsys, "history", "show", "ffffffffff")
    assert code == 3
    assert "no boot whose key starts with 'ffffffffff'" in err
    code, _, err = _kvtui(hosts, capsys, "history", "show", "abc")
    assert code == 2
    assert "expected a boot's id" in err
    code, _, err = _kvtui(hosts, capsys, "history", "show")
    assert code == 2
    assert "name the boot" in err
    code, _, err = _kvtui(hosts, capsys, "history", "gpu-a", "2")
    assert code == 2
    assert "kvtui history show KEY|N" in err
