"""A server up for days through the commands (issue 21): ``wait`` on a serving boot whose start is
not in the log exits 0 and says so (``--json`` carries the new keys), the follower's notes reach
its stderr, ``replay`` prints what was not read, ``bundle`` says what it left out."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path
from typing import ClassVar

import pytest

from kvtui.cli import main
from kvtui.monitor.connection import Connection

HOSTS = """
[hosts.demo-days]
demo = true
demo_speed = 2.0
demo_uptime_h = 2.0
demo_start_missing = true

[hosts.demo-gone]
demo = true
demo_speed = 2.0
demo_start_missing = true

[hosts.demo-up]
demo = true
demo_speed = 2.0
demo_uptime_h = 2.0
"""


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(HOSTS)
    return path


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_wait_on_a_serving_boot_whose_start_is_missing_is_ready(hosts: Path) -> None:
    """Fails on the old code: the demo had no such host, and wait said 'ready after' a boot it never saw start."""
    code, out, err = _run("--hosts", str(hosts), "wait", "demo-days", "--timeout", "30", "--no-probe")
    assert code == 0, err
    assert "boot #1 is serving — its start is not in the log (rotated before " in err  # its number in the history
    assert "; flags from the process (pid " in err
    assert "; pool ~" in err
    assert " tokens (estimated ±" in err
    assert "Not read whole (a server up for days)" in out
    assert "phases: not in the log" in out
    code, out, err = _run("--hosts", str(hosts), "wait", "demo-days", "--timeout", "30", "--no-probe", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "ready"
    assert doc["start_missing"].startswith("rotated before ")
    assert doc["flags_from"] == "process"
    assert doc["pool_tokens_estimated"]["tokens"] > 100_000


def test_a_server_whose_start_is_gone_answers_the_probe(hosts: Path) -> None:
    """The demo's server whose start is rotated away serves (its HTTP side too), even with no
    demo_uptime_h: the probe got 'HTTP 503 server is starting' for 60 s and wait said not_serving."""
    code, _out, err = _run("--hosts", str(hosts), "wait", "demo-gone", "--timeout", "30")
    assert code == 0, err
    assert "✔ answered a 1-token request" in err
    assert "boot #1 is serving — its start is not in the log" in err


def test_wait_prints_the_followers_notes(hosts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails on the old code: a backend's notes (SshBackend.notes) reached no view."""
    from kvtui.sim.backend import DemoBackend

    monkeypatch.setattr(DemoBackend, "notes", ["no server start in the last 67108864 bytes of /var/log/x.log"],
                        raising=False)
    code, _out, err = _run("--hosts", str(hosts), "wait", "demo-up", "--timeout", "30", "--no-probe")
    assert code == 0, err
    assert "note: no server start in the last 67108864 bytes of /var/log/x.log" in err
    assert "(1,8" in err
    assert " serving lines not read)" in err


def test_calc_on_a_server_whose_start_is_gone_answers_from_its_config_and_estimated_pool(hosts: Path) -> None:
    """Issue 21: with no stored boot of these flags, ``calc --host`` reads the model's config.json on
    the host and places it at the pool the serving lines give. Fails on the old code: exit 3, 'no
    boot in the log sized its KV pool … use --model config.json'."""
    code, out, err = _run("--hosts", str(hosts), "calc", "--host", "demo-gone", "--set", "mem-fraction-static=0.88",
                          "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["basis"] == "config+estimate"
    assert doc["confidence"] == "low"
    est = doc["calibration"]["estimated_pool"]
    assert doc["calibration"]["config"] == "/models/Kimi-K2.6/config.json"
    assert doc["observed"]["max_total_num_tokens"] == est["tokens"]  # the anchor reproduces the estimate
    assert doc["observed"]["mem_fraction_static"] == 0.85
    assert doc["predicted"]["max_total_num_tokens"] > est["tokens"] + 3 * 10_000  # 0.03 of ~94 GiB at 70 KB/token
    assert any(r.startswith("config + estimated pool (") for r in doc["reasons"])
    assert any(x.startswith("anchor: the pool estimated from serving lines") for x in doc["explain"])
    code, out, err = _run("--hosts", str(hosts), "calc", "--host", "demo-gone", "--set", "mem-fraction-static=0.88")
    assert code == 0, err
    assert "config /models/Kimi-K2.6/config.json + estimated pool (±" in out
    assert "basis config+estimate · confidence low" in out


async def test_a_config_that_cannot_be_read_says_the_paths_tried_in_one_line(tmp_path: Path) -> None:
    """The host's model directory has no config.json: the reason names the path tried (a local
    host: the real shell command); a config.json there is read and anchors the model."""
    from kvtui.boot import Boot
    from kvtui.changes import serving_config
    from kvtui.config import LocalHost
    from kvtui.engines.events import Engine
    from kvtui.hosts.local import LocalBackend

    model_dir = tmp_path / "models" / "Llama"
    model_dir.mkdir(parents=True)
    boot = Boot(engine=Engine.SGLANG, start_missing="rotated before 2026-06-02 14:33",
                flags={"model_path": str(model_dir), "tp_size": 4, "mem_fraction_static": 0.85}, flags_from="process")
    boot.live.pool_tokens_est, boot.live.pool_tokens_err = 400_000, 900
    backend = LocalBackend("box", LocalHost(local=True, log_file=str(tmp_path / "x.log")))
    got = await serving_config(backend, boot, gpu_mem_gib=79.19)
    assert got.config is None
    assert got.why == f"{model_dir}: no config.json at {model_dir}/config.json"
    (model_dir / "config.json").write_text(json.dumps({"num_hidden_layers": 80, "num_attention_heads": 64,
                                                       "num_key_value_heads": 8, "hidden_size": 8192}))
    got = await serving_config(backend, boot, gpu_mem_gib=79.19)
    assert got.path == f"{model_dir}/config.json"
    model = got.model(boot)
    assert model.tokens == 400_000
    assert got.said(model) == f"config {model_dir}/config.json + estimated pool (±900)"


def test_monitor_takes_the_notes_into_its_status() -> None:
    class Backend:
        notes: ClassVar[list[str]] = ["a note"]

    m = Connection(Backend(), retry_start=True, publish=lambda _u: None, closed=asyncio.Event())  # type: ignore[arg-type]
    m._take_notes()
    assert list(m.notes) == ["a note"]
    assert m.notes_seen == 1
    assert Backend.notes == []


def test_bundle_says_what_it_left_out_and_replay_says_it_when_opened(hosts: Path, tmp_path: Path) -> None:
    """Fails on the old code: the bundle's manifest said nothing of the lines kvtui never read,
    and replay printed the boot as if read whole."""
    code, _out, err = _run("--hosts", str(hosts), "wait", "demo-up", "--timeout", "30", "--no-probe")
    assert code == 0, err
    out_path = tmp_path / "b.tar.gz"
    code, _out, err = _run("--hosts", str(hosts), "bundle", "demo-up", "-o", str(out_path))
    assert code == 0, err
    with tarfile.open(out_path) as tar:
        fh = tar.extractfile("manifest.json")
        assert fh is not None
        manifest = json.loads(fh.read())
    notes = [n for n in manifest["notes"] if n.startswith("log.txt: ")]
    assert len(notes) == 1
    assert " serving lines not read by kvtui, not in this bundle (on the host: after=demo:" in notes[0]
    code, out, err = _run("replay", str(out_path))
    assert code == 0
    assert "kvtui replay: bundle note: log.txt: " in err
    assert "Not read whole (a server up for days)" in out
    assert "unread range: after=demo:" in out
    code, out, _err = _run("replay", str(out_path), "--json")
    assert json.loads(out)["boots"][0]["skipped_lines"] > 1500


def test_replay_of_a_journal_with_the_records_prints_no_empty_section(tmp_path: Path) -> None:
    """Fails on the old code: replay printed an empty Figures section and no word of the start."""
    from kvtui.engines import source_records as sr

    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8", "--mem-fraction-static", "0.88"]
    decode = ("[2026-12-06 05:00:01 TP0] Decode batch. #running-req: 12, #token: 180000, token usage: 0.94, "
              "cuda graph: True, gen throughput (token/s): 900.10, #queue-req: 0,")
    lines = [
        {"MESSAGE": sr.start_missing_text("rotated before 2026-06-02 14:33"), "SYSLOG_IDENTIFIER": "kvtui",
         "__REALTIME_TIMESTAMP": "1796000000000000"},
        {"MESSAGE": sr.command_text(argv, 4242), "SYSLOG_IDENTIFIER": "kvtui",
         "__REALTIME_TIMESTAMP": "1796000000000001"},
        {"MESSAGE": decode, "SYSLOG_IDENTIFIER": "python3", "__REALTIME_TIMESTAMP": "1796000001000000"},
    ]
    path = tmp_path / "j.json"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out, err = _run("replay", str(path))
    assert code == 0, err
    assert "serving — its start is not in the log (rotated before 2026-06-02 14:33)" in out
    assert "flags from the running process (pid 4242)" in out
    assert "KV pool          ~191,489 tokens (estimated from serving lines)" in out
    assert "  Figures" in out  # the estimate is a figure: the section has one
