"""``kvtui apply`` / ``kvtui rollback`` end to end on the simulated demo host (real CLI, real
DemoBackend, real calculator and parsers): the issue's "Done means" for the demo host."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from kvtui.audit import read_entries
from kvtui.cli import main
from kvtui.config import parse_config
from kvtui.flags import get_flag
from kvtui.sim.backend import DemoBackend

HOSTS = """
[hosts.demo]
demo = true
demo_speed = 400.0

[hosts.ro]
demo = true
demo_speed = 400.0
readonly = true
"""


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    p = tmp_path / "hosts.toml"
    p.write_text(HOSTS)
    return p


def _demo(hosts: Path, name: str = "demo") -> DemoBackend:
    cfg = parse_config(hosts.read_text(), hosts)
    return DemoBackend(name, cfg.host(name))


def _kvtui(hosts: Path, *argv: str) -> int:
    return main(["--hosts", str(hosts), *argv])


def _fraction(hosts: Path) -> object:
    return get_flag(_demo(hosts).read_unit(), "unit", "mem-fraction-static")


def test_oom_risk_edit_is_refused_with_the_verdict(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _demo(hosts).read_unit()
    code = _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.99", "--restart", "--yes")
    out, err = capsys.readouterr()
    assert code == 4
    assert "verdict oom_risk" in out
    assert "-    --mem-fraction-static 0.85 \\" in out  # the diff is shown
    assert "+    --mem-fraction-static 0.99 \\" in out
    assert "refused: the calculator predicts oom_risk" in err
    assert "largest safe fraction" in err
    assert _demo(hosts).read_unit() == before  # nothing written
    assert not list(_demo(hosts).unit_path.parent.glob("*.kvtui-*"))  # no backup either
    entry = read_entries()[-1]
    assert entry["outcome"] == "refused"
    assert entry["verdict"] == "oom_risk"
    assert entry["host"] == "demo"


def test_forced_edit_dies_in_capture_then_rollback_restores(
    hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _demo(hosts).read_unit()
    code = _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.99", "--restart", "--yes", "--force")
    out, err = capsys.readouterr()
    assert code == 1
    assert "the new boot's own argument dump carries the edits" in err
    assert "failed in graph capture: oom_graph_capture" in err
    assert "Verdict oom_risk: held (the boot failed)" in out
    assert _fraction(hosts) == "0.99"
    backups = sorted(_demo(hosts).unit_path.parent.glob("*.service.kvtui-*"))
    assert len(backups) == 1
    assert backups[0].read_text() == before  # the backup is the old file
    entry = read_entries()[-1]
    assert entry["outcome"] == "failed"
    assert entry["forced"] is True
    assert "+    --mem-fraction-static 0.99 \\" in str(entry["diff"])

    # kvtui rollback brings the previous flags back, through the same verified path
    code = _kvtui(hosts, "rollback", "demo", "--restart", "--yes", "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "rolled back; the boot is ready" in out
    assert _demo(hosts).read_unit() == before
    pre = sorted(_demo(hosts).unit_path.parent.glob("*.pre-rollback"))
    assert len(pre) == 1
    assert get_flag(pre[0].read_text(), "unit", "mem-fraction-static") == "0.99"
    assert read_entries()[-1]["action"] == "rollback"


def test_rollback_on_failure_brings_the_previous_flags_back(
    hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.99", "--restart", "--yes", "--force",
                  "--rollback-on-failure", "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 1  # the edit failed, even though the rollback then succeeded
    assert "failed in graph capture" in err
    assert "rolled back to the previous flags (the previous flags are back and the boot is ready)" in out
    assert _fraction(hosts) == "0.85"
    assert "--mem-fraction-static 0.85" in _demo(hosts).effective_execstart()  # loaded by systemd
    outcomes = [(e["action"], e["outcome"]) for e in read_entries()]
    assert outcomes[-2:] == [("rollback", "ready"), ("apply", "failed")]


def test_safe_edit_is_applied_and_confirmed(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.88", "--set", "max-num-seqs=48",
                  "--restart", "--yes", "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "max-num-seqs is the other engine's name" in out
    assert "applied; the new boot is ready" in out
    assert "Prediction vs reality: predicted" in out
    assert "held (the boot ready)" in out
    unit = _demo(hosts).read_unit()
    assert get_flag(unit, "unit", "mem-fraction-static") == "0.88"
    assert get_flag(unit, "unit", "max-running-requests") == "48"


def test_dry_run_and_no_terminal(hosts: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    before = _demo(hosts).read_unit()
    assert _kvtui(hosts, "apply", "demo", "--set", "cuda-graph-max-bs=32", "--dry-run") == 0
    out, _ = capsys.readouterr()
    assert "+    --cuda-graph-max-bs 32 \\" in out
    assert "Commands:" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a terminal
    assert _kvtui(hosts, "apply", "demo", "--set", "cuda-graph-max-bs=32") == 4
    _, err = capsys.readouterr()
    assert "no terminal to confirm on; pass --yes" in err
    assert _demo(hosts).read_unit() == before
    assert read_entries() == []  # nothing was attempted


def test_refusals_and_usage(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _kvtui(hosts, "apply", "ro", "--set", "cuda-graph-max-bs=32", "--yes") == 4
    _, err = capsys.readouterr()
    assert "readonly" in err
    assert _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=1.5", "--yes") == 2  # usage, as in calc
    _, err = capsys.readouterr()
    assert "must lie in (0, 1)" in err
    assert _kvtui(hosts, "apply", "demo", "--unset", "no-such-flag", "--yes") == 4
    _, err = capsys.readouterr()
    assert "has no --no-such-flag" in err
    assert _kvtui(hosts, "apply", "demo") == 2
    assert _kvtui(hosts, "apply", "nowhere", "--set", "tp=2") == 3
    assert _kvtui(hosts, "rollback", "demo", "--yes") == 4  # no backup yet
    _, err = capsys.readouterr()
    assert "no kvtui backup" in err
    assert _kvtui(hosts, "rollback", "demo", "--to", "/etc/passwd", "--yes") == 2


def test_edit_without_restart_persists_in_demo_state(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _kvtui(hosts, "apply", "demo", "--set", "enable-metrics", "--yes") == 0
    out, err = capsys.readouterr()
    assert "not restarted" in err
    assert "demo: written" in out
    # a new process (a new DemoBackend) sees the edit, loaded by daemon-reload
    demo = _demo(hosts)
    assert get_flag(demo.read_unit(), "unit", "enable-metrics") is True
    assert "--enable-metrics" in demo.effective_execstart()
    entry = read_entries()[-1]
    assert entry["outcome"] == "written"
    assert json.dumps(entry)  # serialisable


LLAMA_JOURNAL = Path(__file__).parent / "fixtures" / "sglang-0.5.10-llama70b-tp4-ready.journal"


@pytest.mark.parametrize(
    "edit",
    ["mem-fraction-static=abc", "mem-fraction-static=1.5", "mem-fraction-static=0", "max-running-requests=-1",
     "cuda-graph-max-bs=x", "mem-fraction-static=0.9;reboot"],
)
def test_a_malformed_value_is_a_usage_error_in_apply_as_in_calc(
    hosts: Path, capsys: pytest.CaptureFixture[str], edit: str
) -> None:
    """Issue 10, item 10: `--set mem-fraction-static=abc` exited 2 from calc but 4 from apply."""
    before = _demo(hosts).read_unit()
    assert _kvtui(hosts, "calc", "--log", str(LLAMA_JOURNAL), "--set", edit) == 2
    capsys.readouterr()
    assert _kvtui(hosts, "apply", "demo", "--set", edit, "--yes") == 2
    out, err = capsys.readouterr()
    assert err.startswith("kvtui apply: --")  # names the flag and the value
    assert out == ""  # no plan: the edit is malformed before anything is planned
    assert _demo(hosts).read_unit() == before
    assert read_entries() == []


def test_an_unknown_flag_is_refused_with_the_nearest_known_ones(
    hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 10, item 9: `apply demo --set foo=1 --yes` wrote the flag and exited 0."""
    before = _demo(hosts).read_unit()
    assert _kvtui(hosts, "apply", "demo", "--set", "foo=1", "--yes") == 4
    out, err = capsys.readouterr()
    assert "kvtui apply: refused: --foo is not a flag SGLang accepts" in err
    assert "unrecognized arguments: --foo" in err
    assert "pass --force to write it anyway" in err
    assert "REFUSED: --foo is not a flag SGLang accepts" in out
    assert _demo(hosts).read_unit() == before
    assert read_entries()[-1]["outcome"] == "refused"
    # a misspelling names the flags it is close to
    assert _kvtui(hosts, "apply", "demo", "--set", "cuda-grahp-max-bs=32", "--yes") == 4
    _, err = capsys.readouterr()
    assert "nearest known flags: --cuda-graph-max-bs" in err
    assert _demo(hosts).read_unit() == before


def test_a_flag_the_running_boot_knows_is_not_refused(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not in kvtui's table, but in the engine's own argument dump of the running boot."""
    from kvtui.engines.events import Engine
    from kvtui.flags import lookup

    assert lookup(Engine.SGLANG, "enable-mixed-chunk") is None  # kvtui's own table does not have it
    assert _kvtui(hosts, "wait", "demo", "--timeout", "60") == 0  # a boot has printed its ServerArgs
    capsys.readouterr()
    assert _kvtui(hosts, "apply", "demo", "--set", "enable-mixed-chunk", "--dry-run") == 0
    out, _ = capsys.readouterr()
    assert "+    --enable-mixed-chunk \\" in out
    assert "REFUSED" not in out


def test_a_forced_unknown_flag_fails_as_bad_args_in_the_engine(
    hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--force writes it; the (simulated) engine's argparse refuses it with exit status 2, and kvtui
    diagnoses the failure (bad_args), not "unknown … exited without a recognised error"."""
    code = _kvtui(hosts, "apply", "demo", "--set", "foo=1", "--yes", "--force", "--restart", "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 1
    assert "(overridden by --force)" in out
    assert "the new boot failed in launch: bad_args: launch_server.py: error: unrecognized arguments: --foo 1" in err
    assert "hint: " in err
    assert "--foo" in err.split("hint: ")[-1]
    journal = _whole_journal(_demo(hosts))
    assert "launch_server.py: error: unrecognized arguments: --foo 1" in journal
    assert "status=2/INVALIDARGUMENT" in journal
    entry = read_entries()[-1]
    assert (entry["outcome"], entry["forced"]) == ("failed", True)


def _whole_journal(demo: DemoBackend) -> str:
    """Every line of the demo host's journal since its first boot (the unit may have restarted
    since: Restart=on-failure)."""
    sid = demo._load().state_id
    for g in range(8):  # from the first boot kept (a cursor past its first line: the rest follows)
        recs = demo.read_lines(after_cursor=f"demo:{sid}:{g}:0", limit=100_000)
        if recs:
            return "\n".join(r.text for r in recs)
    return ""


async def test_the_service_plan_refuses_an_unknown_flag_for_every_caller(hosts: Path) -> None:
    """The refusal lives in the plan (kvtui.hosts.service), so the console's apply refuses too."""
    from kvtui import changes
    from kvtui.flags import parse_edit_args

    cfg = parse_config(HOSTS, hosts)
    backend = DemoBackend("demo", cfg.host("demo"))
    await backend.start()
    try:
        plan = await changes.plan_apply("demo", cfg.host("demo"), backend, parse_edit_args(["foo=1"]))
        assert plan.refused
        assert [r.forceable for r in plan.blocking] == [True]
        assert "--foo is not a flag SGLang accepts" in plan.blocking[0].reason
        plan.force = True
        assert not plan.refused
        # known flags, and flags the file already passes, are not refused
        plan = await changes.plan_apply("demo", cfg.host("demo"), backend, parse_edit_args(["cuda-graph-max-bs=32"]))
        assert not plan.refused
    finally:
        await backend.close()


def _run_cmd(hosts: Path, clock: float, *argv: str) -> int:
    """A command with the clock standing still (as two commands in one second see it)."""
    from kvtui.cli import build_parser
    from kvtui.commands import apply, rollback

    args = build_parser().parse_args(["--hosts", str(hosts), *argv])
    module = apply if args.command == "apply" else rollback
    return module.run(args, clock=lambda: clock)


def test_backup_names_never_collide(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 10, item 13: names had one-second stamps; a second rollback within the second failed
    ("… .pre-rollback exists; nothing was written", exit 3)."""
    t = 1_780_000_000.0
    assert _run_cmd(hosts, t, "apply", "demo", "--set", "cuda-graph-max-bs=32", "--yes") == 0
    assert _run_cmd(hosts, t, "apply", "demo", "--set", "cuda-graph-max-bs=16", "--yes") == 0
    assert _run_cmd(hosts, t, "rollback", "demo", "--yes") == 0
    assert _run_cmd(hosts, t, "rollback", "demo", "--yes") == 0
    _, err = capsys.readouterr()
    assert "exists" not in err
    folder = _demo(hosts).unit_path.parent
    copies = sorted(p.name for p in folder.glob("*.kvtui-*"))
    assert len(copies) == len(set(copies)) == 4  # two backups, two pre-rollback copies
    assert all(re.search(r"\.kvtui-\d{8}T\d{6}\.\d{6}Z", c) for c in copies)
    assert get_flag(_demo(hosts).read_unit(), "unit", "cuda-graph-max-bs") == "64"  # back to the start


def test_backups_sort_by_time_across_name_styles() -> None:
    from kvtui.hosts.service import backup_name, backup_sort_key

    old_style = "/u.service.kvtui-20260501T120000Z"  # written by an earlier kvtui
    names = [
        "/u.service.kvtui-20260501T120000.000002Z",
        "/u.service.kvtui-20260501T115959.999999Z",
        old_style,
        "/u.service.kvtui-20260501T120000.000001Z",
    ]
    assert sorted(names, key=backup_sort_key) == [names[1], old_style, names[3], names[0]]
    a = backup_name("/v.service", 1_780_000_000.0)
    b = backup_name("/v.service", 1_780_000_000.0)  # the clock did not move: still a new name
    c = backup_name("/v.service", 1_770_000_000.0, taken=[])  # nor when it goes back
    assert len({a, b, c}) == 3
    assert sorted([c, b, a], key=backup_sort_key) == [a, b, c]


def test_a_rollback_plan_names_the_real_lines(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 10, item 15: rollback plans said `(line 0)` for every change."""
    assert _kvtui(hosts, "apply", "demo", "--set", "cuda-graph-max-bs=32", "--set", "enable-metrics",
                  "--unset", "max-running-requests", "--yes") == 0
    capsys.readouterr()
    assert _kvtui(hosts, "rollback", "demo", "--yes") == 0
    out, _ = capsys.readouterr()
    assert "(line 0)" not in out
    assert "line 0," not in out
    restored = _demo(hosts).read_unit().splitlines()
    graph = re.search(r"--cuda-graph-max-bs: 32 -> 64 \(line (\d+)\)", out)
    added = re.search(r"--max-running-requests: added 64 \(line (\d+)\)", out)
    assert graph is not None
    assert added is not None
    assert "--cuda-graph-max-bs 64" in restored[int(graph.group(1)) - 1]
    assert "--max-running-requests 64" in restored[int(added.group(1)) - 1]
    assert re.search(r"--enable-metrics: removed \(was on, line \d+\)", out)


def test_apply_and_rollback_restart_prove_ready_with_a_request(
        hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # like `kvtui wait`: the log's ready line is not proof; the demo's server answers one token
    code = _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.88", "--restart", "--yes", "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "the log says ready; asking the server on port 30000 for one token" in err
    assert re.search(r"✔ answered a 1-token request in \d+ ms", err), err
    assert "applied; the new boot is ready" in out
    code = _kvtui(hosts, "rollback", "demo", "--restart", "--yes", "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert re.search(r"✔ answered a 1-token request in \d+ ms", err), err
    assert _fraction(hosts) == "0.85"


def test_a_restart_whose_server_does_not_answer_fails_not_serving(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    # the demo's server answers 404 to a model it does not serve
    hosts.write_text(HOSTS.replace("[hosts.demo]\n", '[hosts.demo]\nprobe_model = "no-such-model"\n', 1))
    code = _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.88", "--restart", "--yes", "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "✘ not serving: /v1/completions: HTTP 404" in err
    assert "the new boot is failed (not_serving)" in err
    assert "applied; the new boot is ready" not in out
    assert [(e["action"], e["outcome"]) for e in read_entries()][-1] == ("apply", "failed")
    # probe = false: ready on the log's word, as before the probe existed
    hosts.write_text(HOSTS.replace("[hosts.demo]\n", "[hosts.demo]\nprobe = false\n", 1))
    code = _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.87", "--restart", "--yes", "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "asking the server" not in err
