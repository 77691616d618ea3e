"""Incident bundles: ``kvtui bundle`` on the demo host (its log from the spool, the stored boot,
the diff, the replay document), secrets masked, and ``kvtui replay`` of the bundle reproducing the
boot's JSON."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from kvtui.cli import main
from kvtui.history.bundle import MASK, mask_doc, mask_text, read_member

HOSTS = "[hosts.demo]\ndemo = true\ndemo_speed = 400.0\n"
SECRET = "sk-live-0123456789"


def test_secrets_are_masked_in_text_and_documents() -> None:
    assert mask_text(f"--api-key {SECRET} --port 30000") == "--api-key *** --port 30000"
    assert mask_text(f"--api-key={SECRET}") == "--api-key=***"
    assert mask_text(f"server_args=ServerArgs(api_key='{SECRET}', kv_cache_dtype='auto')") == (
        "server_args=ServerArgs(api_key='***', kv_cache_dtype='auto')")
    assert mask_text("Environment=HF_TOKEN=hf_abc NCCL_DEBUG=INFO") == "Environment=HF_TOKEN=*** NCCL_DEBUG=INFO"
    assert mask_text("export DB_PASSWORD=hunter2; echo ok") == "export DB_PASSWORD=***; echo ok"
    plain = "--max-running-requests 64 --kv-cache-dtype fp8 tokenizer_path='/m' token_usage=0.2"
    assert mask_text(plain) == plain
    doc = {"flags": {"api_key": SECRET, "tp_size": 8, "kv_cache_dtype": "auto"},
           "restart": {"edit": [f"--set api-key={SECRET}"]}}
    masked = mask_doc(doc)
    assert masked["flags"] == {"api_key": MASK, "tp_size": 8, "kv_cache_dtype": "auto"}
    assert masked["restart"]["edit"] == ["--set api-key=***"]


def boot_tokens(bundle: Path) -> int:
    return int(json.loads(read_member(bundle, "boot.json") or b"{}")["metrics"]["max_total_num_tokens"])


def _kvtui(hosts: Path, *argv: str) -> int:
    return main(["--hosts", str(hosts), *argv])


@pytest.mark.slow
def test_bundle_of_a_demo_boot_replays_to_the_same_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert _kvtui(hosts, "bundle", "demo") == 3
    assert "no boot of demo in the history" in capsys.readouterr().err
    assert _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.86", "--restart", "--yes") == 0
    assert _kvtui(hosts, "apply", "demo", "--set", f"api-key={SECRET}", "--restart", "--yes") == 0
    capsys.readouterr()
    assert _kvtui(hosts, "bundle", "demo") == 3  # apply keeps no spool: nothing to bundle yet
    assert "its log is not in the spool" in capsys.readouterr().err
    assert _kvtui(hosts, "wait", "demo", "--json") == 0  # follows the current boot, keeping its log
    waited = json.loads(capsys.readouterr().out)
    out = tmp_path / "incident.tar.gz"
    assert _kvtui(hosts, "bundle", "demo", "-o", str(out)) == 0
    err = capsys.readouterr().err
    assert f"→ {out}; open it with: kvtui replay {out} (or kvtui connect --bundle {out})" in err
    with tarfile.open(out) as tar:
        names = tar.getnames()
        blob = b"".join(tar.extractfile(n).read() for n in names)  # type: ignore[union-attr]
    # kvtui wait joined a boot that was ready (or, on a loaded machine, seen starting while its
    # journal was replayed: then the readings it took meanwhile are kept); without them, it says so
    manifest = json.loads(read_member(out, "manifest.json") or b"{}")
    if "gpu.json" not in names:
        assert "note: gpu.json: no GPU readings were kept for this boot" in err
        assert manifest["notes"][0].startswith("gpu.json: no GPU readings")
    assert [n for n in names if n != "gpu.json"] == [
        "manifest.json", "boot.json", "log.txt", "diff.txt", "replay.json", "calc.json", "calc.txt",
        "flags-before.txt", "flags-after.txt"]
    assert SECRET.encode() not in blob  # not in the log, the document, the diff, the replay, the flag files
    assert b"api_key='***'" in blob
    assert manifest["members"] == names[1:]
    # the flag file before the edit (the backup apply took) and as it is now, through the demo backend
    before = (read_member(out, "flags-before.txt") or b"").decode()
    after = (read_member(out, "flags-after.txt") or b"").decode()
    assert "--mem-fraction-static 0.86" in before
    assert "--api-key" not in before
    assert "--api-key ***" in after
    # the calculator's state: its prediction for the boot, with the explain lines
    calc = json.loads(read_member(out, "calc.json") or b"{}")
    assert calc["predicted"]["max_total_num_tokens"] == boot_tokens(out)
    assert any(line.startswith("N(0.86) = floor_page(") for line in calc["explain"])
    assert (read_member(out, "calc.txt") or b"").decode().startswith("kvtui calc · sglang · demo boot #")
    boot = json.loads(read_member(out, "boot.json") or b"{}")
    assert boot["flags"]["api_key"] == MASK
    assert boot["restart"]["outcome"] == "ready"  # the apply's part and the wait's spool: one boot
    assert boot["spool"] is not None
    diff = (read_member(out, "diff.txt") or b"").decode()
    assert "changed  api_key: — → ***" in diff  # None in the dump before
    # kvtui replay opens the bundle: the same boot as the bundle's own replay document and the wait's
    assert _kvtui(hosts, "replay", str(out), "--json") == 0
    replayed = json.loads(capsys.readouterr().out)
    bundled = json.loads(read_member(out, "replay.json") or b"{}")
    assert replayed["boots"] == bundled["boots"]
    assert len(replayed["boots"]) == 1
    b = replayed["boots"][0]
    for key in ("status", "engine", "version_hint", "phases", "metrics", "ranks"):
        assert b[key] == waited[key], key
    assert {k: v for k, v in b["flags"].items() if k != "api_key"} == {
        k: v for k, v in waited["flags"].items() if k != "api_key"}
    assert _kvtui(hosts, "replay", str(out)) == 0
    assert "1 boot" in capsys.readouterr().out


@pytest.mark.slow
def test_bundle_without_boot_is_the_newest_boot_not_an_older_one(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--boot`` left out means the newest boot (the help's promise): when its log is not in the
    spool (apply keeps none) the command says so and names the boot it could bundle, instead of
    bundling an older boot unasked (it bundled #1, the oldest, here)."""
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    assert _kvtui(hosts, "wait", "demo", "--json") == 0  # boot #1, its log kept
    assert _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.86", "--restart", "--yes") == 0  # #2
    capsys.readouterr()
    out = tmp_path / "newest.tar.gz"
    assert _kvtui(hosts, "history", "demo", "--json") == 0
    ids = [b["id"] for b in json.loads(capsys.readouterr().out)["boots"]]
    assert len(ids) == 2
    newest, oldest = ids
    assert _kvtui(hosts, "bundle", "demo", "-o", str(out)) == 3
    err = capsys.readouterr().err
    assert f"demo: #{newest} (the newest): its log is not in the spool" in err
    assert f"#{oldest} (ready) is the newest boot whose log is kept: kvtui bundle demo --boot {oldest}" in err
    assert not out.exists()
    assert _kvtui(hosts, "bundle", "demo", "--boot", str(oldest), "-o", str(out)) == 0
    assert f"demo boot #{oldest} (ready" in capsys.readouterr().err
    # once the newest boot's log is kept (a wait follows it), it is the one bundled
    assert _kvtui(hosts, "wait", "demo", "--json") == 0
    capsys.readouterr()
    assert _kvtui(hosts, "bundle", "demo", "-o", str(out)) == 0
    assert f"demo boot #{newest} (ready" in capsys.readouterr().err
    assert json.loads(read_member(out, "boot.json") or b"{}")["flags"]["mem_fraction_static"] == 0.86


def test_secrets_are_masked_in_a_screenshot() -> None:
    from kvtui.history.bundle import mask_svg

    svg = ('<svg><text class="r1" x="0" y="20" textLength="500">server_args=ServerArgs(api_key=&#x27;'
           f'{SECRET}&#x27;,&#160;port=30000)</text>'
           f'<text class="r2" x="0" y="40">ExecStart=python&#160;-m&#160;sglang&#160;--api-key&#160;{SECRET}'
           '&#160;--tp&#160;8</text><text>HF_TOKEN=hf_abc&#160;NCCL_DEBUG=INFO</text>'
           '<text>tokenizer_path=&#x27;/m&#x27;&#160;token_usage=0.2</text></svg>')
    masked = mask_svg(svg)
    assert SECRET not in masked
    assert "hf_abc" not in masked
    assert "api_key=&#x27;***&#x27;" in masked
    assert "--api-key&#160;***&#160;--tp&#160;8" in masked
    assert "tokenizer_path=&#x27;/m&#x27;&#160;token_usage=0.2" in masked
    assert masked.count("<text") == 4
