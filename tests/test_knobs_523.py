"""SGLang 0.5.23 renamed ``--cuda-graph-max-bs`` / ``--cuda-graph-bs`` to per-phase flags
(``--cuda-graph-max-bs-decode``, ``--cuda-graph-bs-decode``; ``-prefill`` is a second setting) and
argparse's prefix matching makes the old spelling ambiguous there (a usage error at start). The one
flag vocabulary (``kvtui.knobs``) knows both spellings and both dump keys; every layer follows:
calibration reads whichever key the boot dumped, an edit of an occurrence keeps its spelling, a new
occurrence gets the spelling the running boot's release takes, the refusal accepts both.

The 0.5.23 boot is a real log's (``real/03``: ``ServerArgs(… cuda_graph_max_bs_decode=8 …)``),
cut before its capture (``sglang/sglang-0.5.23-laguna-serverargs-before-capture.log``: its first
158 lines), so the capture need is the calculator's estimate from the decode cap."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kvtui import changes, flags, knobs, kvcalc
from kvtui.boot import Boot
from kvtui.cli import main
from kvtui.commands.calc import read_log_boots
from kvtui.config import HostConfig
from kvtui.engines.events import Engine
from kvtui.flags import Edit, apply_edits, check_dump, get_flag, parse_edit_args
from kvtui.hosts import service
from kvtui.hosts.local import LocalBackend
from kvtui.hosts.service.plan import prediction_edits
from kvtui.knobs import Memory
from kvtui.tune.planner import Bounds, Planner, also_name, parse_goal

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import FakeTools
from test_service_sshd import RELOAD_HOOK

FIX = Path(__file__).parent / "fixtures"
SG523 = FIX / "sglang" / "sglang-0.5.23-laguna-serverargs-before-capture.log"
SG523_READY = FIX / "real" / "03-sglang-laguna-int4-tp1-swa-dflash-ready.log"
SG523_CAPTURE_OOM = FIX / "sglang" / "fail-0.5.23-decode-capture-oom.log"
SG512 = FIX / "sglang" / "sglang-0.5.12-qwen3-32b-tp4-eagle3-ready.log"
SG = Engine.SGLANG

UNIT_523 = """\
[Unit]
Description=SGLang 0.5.23 (test)

[Service]
Type=simple
ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server \\
    --model-path poolside/Laguna-S-2.1-INT4 \\
    --tp-size 1 \\
    --mem-fraction-static 0.85 \\
    --cuda-graph-max-bs-decode 8 \\
    --port 30000
Restart=on-failure
"""

UNIT_PLAIN = """\
[Unit]
Description=SGLang (test)

[Service]
Type=simple
ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server \\
    --model-path /models/m \\
    --tp-size 1 \\
    --mem-fraction-static 0.85 \\
    --port 30000
Restart=on-failure
"""


def _boot(path: Path) -> Boot:
    return read_log_boots(str(path))[-1]


# ---------------------------------------------------------------------------------------------
# The vocabulary
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new"), [("cuda-graph-max-bs", "cuda-graph-max-bs-decode"),
                                          ("cuda-graph-bs", "cuda-graph-bs-decode")])
def test_one_knob_knows_both_spellings_and_both_dump_keys(old: str, new: str) -> None:
    knob = knobs.lookup(SG, old)
    assert knob is not None
    assert knobs.lookup(SG, new) is knob
    assert knobs.lookup(SG, "--" + new.replace("-", "_")) is knob
    assert {old, new} <= knobs.known_names(SG)
    assert knob.dump_keys(SG) == (old.replace("-", "_"), new.replace("-", "_"))
    # written: the spelling the running boot's dump shows; kvtui's usual one without a dump
    assert knob.written(SG) == old
    assert knob.written(SG, {new.replace("-", "_"), "tp_size"}) == new
    assert knob.written(SG, {old.replace("-", "_"), "tp_size"}) == old
    assert knobs.written_name(SG, new) == old
    assert knobs.written_name(SG, old, {new.replace("-", "_")}) == new
    # the prefill flags are another setting, not these
    assert knobs.lookup(SG, old + "-prefill") is None


def test_a_dump_is_read_under_whichever_key_it_has() -> None:
    assert knobs.dump_value(SG, "cuda-graph-max-bs", {"cuda_graph_max_bs_decode": 8}) == (
        "cuda_graph_max_bs_decode", 8)
    assert knobs.dump_value(SG, "cuda-graph-max-bs-decode", {"cuda_graph_max_bs": 160}) == ("cuda_graph_max_bs", 160)
    assert knobs.dump_value(SG, "cuda-graph-max-bs", {"tp_size": 1}) is None
    # one key None (the per-phase default), the other set: the value wins
    assert knobs.memory_value(SG, Memory.GRAPH_BS, {"cuda_graph_max_bs": None, "cuda_graph_max_bs_decode": 64}) == 64
    assert knobs.memory_value(Engine.VLLM, Memory.GRAPH_BS, {"max_cudagraph_capture_size": 512}) == 512


def test_the_calculator_takes_both_spellings_as_one_setting() -> None:
    for name in ("cuda-graph-max-bs-decode", "--cuda_graph_max_bs_decode", "cuda-graph-max-bs"):
        assert kvcalc.canonical_flag(SG, name) == "cuda_graph_max_bs"
        assert kvcalc.canonical_flag(Engine.VLLM, name) == "max_cudagraph_capture_size"
    with pytest.raises(kvcalc.CalcError, match="give it once"):
        kvcalc.parse_what_if(SG, ["cuda-graph-max-bs=8", "cuda-graph-max-bs-decode=16"], [])


# ---------------------------------------------------------------------------------------------
# Calibration from a 0.5.23 boot
# ---------------------------------------------------------------------------------------------


def test_a_0523_boot_calibrates_with_its_decode_cap() -> None:
    boot = _boot(SG523)
    assert boot.flags["cuda_graph_max_bs_decode"] == 8  # what the log's ServerArgs line says
    assert "cuda_graph_max_bs" not in boot.flags
    model = kvcalc.calibrate(boot)
    assert model.cuda_graph_max_bs == 8
    # capture has not run: its need is SGLang's reserve up to the decode cap (was: up to 160)
    assert model.graph.source == kvcalc.GraphSource.ESTIMATED
    assert model.graph.bs == (1, 2, 4, 8)
    assert model.graph.need_gib == pytest.approx(0.5 + 8 * 2 / 1024)
    assert kvcalc.calibrate(_boot(SG523_READY)).cuda_graph_max_bs == 8


def test_calc_cli_on_a_0523_boot(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calc", "--log", str(SG523)]) == 0
    out = capsys.readouterr().out
    assert "capture need assumed 0.52 GiB (0.5 GiB workspace + 2 MiB per batch size up to 8)" in out
    got = {}
    for spelling in ("cuda-graph-max-bs-decode", "cuda-graph-max-bs", "cuda_graph_max_bs_decode"):
        main(["calc", "--log", str(SG523_READY), "--set", f"{spelling}=2", "--json"])
        data = json.loads(capsys.readouterr().out)
        assert data["edits"] == {"cuda_graph_max_bs": 2}
        got[spelling] = data["predicted"]
    assert got["cuda-graph-max-bs-decode"] == got["cuda-graph-max-bs"] == got["cuda_graph_max_bs_decode"]
    main(["calc", "--log", str(SG523_READY), "--json"])
    base = json.loads(capsys.readouterr().out)["predicted"]
    assert got["cuda-graph-max-bs"]["graph_headroom_gib"] > base["graph_headroom_gib"]  # fewer graphs


def test_the_capture_oom_hint_names_the_boots_own_spelling() -> None:
    boot = _boot(SG523_CAPTURE_OOM)
    assert boot.failure is not None
    assert "--cuda-graph-max-bs-decode (now 512)" in boot.failure.hint
    assert "--cuda-graph-max-bs " not in boot.failure.hint


# ---------------------------------------------------------------------------------------------
# The flag editor
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["cuda-graph-max-bs", "cuda-graph-max-bs-decode", "--cuda_graph_max_bs_decode"])
def test_an_occurrence_is_edited_in_place_in_its_own_spelling(given: str) -> None:
    res = apply_edits(UNIT_523, "unit", [Edit(given, "16")])
    assert res.new_text == UNIT_523.replace("--cuda-graph-max-bs-decode 8", "--cuda-graph-max-bs-decode 16")
    (change,) = res.changes
    assert (change.flag, change.action, change.old, change.new) == ("--cuda-graph-max-bs-decode", "set", "8", "16")
    assert res.command.get("cuda-graph-max-bs") == "16"
    assert flags.check_text(res.new_text, "unit", [Edit("cuda-graph-max-bs", "16")]) == []
    # with the running boot's dump: no note (the file already spells it as the engine takes it)
    res2 = apply_edits(UNIT_523, "unit", [Edit(given, "16")], dump={"cuda_graph_max_bs_decode"})
    assert res2.new_text == res.new_text
    assert res2.changes[0].note == ""


def test_an_old_spelling_in_a_file_for_0523_is_kept_and_said() -> None:
    old = UNIT_523.replace("--cuda-graph-max-bs-decode 8", "--cuda-graph-max-bs 8")
    res = apply_edits(old, "unit", [Edit("cuda-graph-max-bs", "16")], dump={"cuda_graph_max_bs_decode"})
    assert "--cuda-graph-max-bs 16" in res.new_text
    assert "takes --cuda-graph-max-bs-decode" in res.changes[0].note


def test_unset_removes_either_spelling() -> None:
    res = apply_edits(UNIT_523, "unit", [Edit("cuda-graph-max-bs", None)])
    assert "cuda-graph" not in res.new_text
    assert res.changes[0].action == "remove"


@pytest.mark.parametrize(
    ("dump", "given", "written"),
    [
        ({"cuda_graph_max_bs_decode", "tp_size"}, "cuda-graph-max-bs", "--cuda-graph-max-bs-decode 32"),
        ({"cuda_graph_max_bs_decode", "tp_size"}, "cuda-graph-max-bs-decode", "--cuda-graph-max-bs-decode 32"),
        ({"cuda_graph_max_bs", "tp_size"}, "cuda-graph-max-bs", "--cuda-graph-max-bs 32"),
        ({"cuda_graph_max_bs", "tp_size"}, "cuda-graph-max-bs-decode", "--cuda-graph-max-bs 32"),
        (None, "cuda-graph-max-bs", "--cuda-graph-max-bs 32"),
        (None, "cuda-graph-max-bs-decode", "--cuda-graph-max-bs-decode 32"),
    ],
)
def test_a_new_occurrence_takes_the_running_releases_spelling(
    dump: set[str] | None, given: str, written: str
) -> None:
    res = apply_edits(UNIT_PLAIN, "unit", [Edit(given, "32")], dump=dump)
    assert f"    {written} \\\n" in res.new_text
    assert res.new_text.count("cuda-graph") == 1
    (change,) = res.changes
    assert change.action == "add"
    assert change.flag == written.split()[0]
    if dump is None:
        assert "no running boot's argument dump" in change.note
    if dump is not None and "cuda_graph_max_bs_decode" in dump:
        assert "the running boot's argument dump has cuda_graph_max_bs_decode" in change.note


def test_the_capture_list_follows_too() -> None:
    res = apply_edits(UNIT_PLAIN, "unit", [Edit("cuda-graph-bs", "1,2,4,8")], dump={"cuda_graph_bs_decode"})
    assert "    --cuda-graph-bs-decode 1 2 4 8 \\\n" in res.new_text
    res = apply_edits(UNIT_PLAIN, "unit", [Edit("cuda-graph-bs-decode", "1,2")], dump={"cuda_graph_bs"})
    assert "    --cuda-graph-bs 1 2 \\\n" in res.new_text


def test_the_engines_own_dump_verifies_either_key() -> None:
    edit = [Edit("cuda-graph-max-bs", "16")]
    assert check_dump(SG, {"cuda_graph_max_bs_decode": 16}, edit) == []
    assert check_dump(SG, {"cuda_graph_max_bs_decode": 8}, edit) == [
        "the engine runs with cuda_graph_max_bs_decode=8, expected 16"]
    assert check_dump(SG, {"cuda_graph_max_bs": 16}, [Edit("cuda-graph-max-bs-decode", "16")]) == []
    assert check_dump(SG, {"tp_size": 1}, edit) == ["the engine's argument dump has no cuda_graph_max_bs"]


# ---------------------------------------------------------------------------------------------
# The apply path on a local host (real files, the fake systemctl), its log the boot's
# ---------------------------------------------------------------------------------------------


@pytest.fixture
async def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[LocalBackend, HostConfig, Path,
                                                                                       Path]]:
    tools = FakeTools.create(tmp_path / "host")
    hook = tools.state / "hooks" / "daemon-reload"
    hook.write_text(RELOAD_HOOK.format(py=sys.executable, state=str(tools.state)))
    hook.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools.bin_dir}:{os.environ['PATH']}")
    unit = tmp_path / "etc" / "llm.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(UNIT_PLAIN)
    log = tmp_path / "llm.log"
    log.write_text("")
    tools.set_unit("llm", FragmentPath=str(unit), DropInPaths="")
    cfg = HostConfig(local=True, unit="llm.service", log_file=str(log), engine="sglang")
    b = LocalBackend("box", cfg)
    yield b, cfg, unit, log
    await b.close()


async def test_apply_adds_the_decode_spelling_to_a_0523_server(
    box: tuple[LocalBackend, HostConfig, Path, Path]
) -> None:
    b, cfg, unit, log = box
    log.write_bytes(SG523.read_bytes())
    plan = await changes.plan_apply("box", cfg, b, parse_edit_args(["cuda-graph-max-bs=16"]), boots_timeout=10,
                                    force=True)
    assert "+    --cuda-graph-max-bs-decode 16 \\\n" in plan.diff
    assert "--cuda-graph-max-bs 16" not in plan.new_text
    assert "cuda_graph_max_bs_decode" in plan.changes[0].note
    assert plan.prediction is not None  # calibrated from the same boot the spelling came from
    assert plan.prediction.edits.get(Memory.GRAPH_BS) == (True, 16)
    out = await service.execute(plan, b)
    assert out.code == 0, out.messages
    assert get_flag(unit.read_text(), "unit", "cuda-graph-max-bs-decode") == "16"
    assert "--cuda-graph-max-bs-decode 16" in unit.read_text()


async def test_apply_adds_the_old_spelling_to_an_older_server(
    box: tuple[LocalBackend, HostConfig, Path, Path]
) -> None:
    b, cfg, _unit, log = box
    log.write_bytes(SG512.read_bytes())
    plan = await changes.plan_apply("box", cfg, b, parse_edit_args(["cuda-graph-max-bs-decode=16"]), boots_timeout=10,
                                    force=True)
    assert "+    --cuda-graph-max-bs 16 \\\n" in plan.diff
    assert "decode" not in plan.new_text


async def test_apply_without_a_boot_keeps_the_usual_spelling_and_says_so(
    box: tuple[LocalBackend, HostConfig, Path, Path]
) -> None:
    b, cfg, _unit, _log = box  # the log is empty: no boot to tell the release
    plan = await changes.plan_apply("box", cfg, b, parse_edit_args(["cuda-graph-max-bs=16"]), boots_timeout=2)
    assert "+    --cuda-graph-max-bs 16 \\\n" in plan.diff
    assert "no running boot's argument dump" in plan.changes[0].note
    assert "--cuda-graph-max-bs-decode" in plan.changes[0].note
    assert plan.prediction is None
    assert plan.prediction_note is not None
    assert not plan.refused


async def test_apply_edits_a_0523_unit_in_place_and_does_not_refuse_the_new_spellings(
    box: tuple[LocalBackend, HostConfig, Path, Path]
) -> None:
    b, cfg, unit, _log = box
    unit.write_text(UNIT_523)
    for given in ("cuda-graph-max-bs-decode=4", "cuda-graph-max-bs=4"):
        plan = await changes.plan_apply("box", cfg, b, parse_edit_args([given]), boots_timeout=2)
        assert not plan.refused, plan.blocking
        assert plan.new_text == UNIT_523.replace("--cuda-graph-max-bs-decode 8", "--cuda-graph-max-bs-decode 4")
    unit.write_text(UNIT_PLAIN)
    for given in ("cuda-graph-max-bs-decode=4", "cuda-graph-bs-decode=1,2,4"):
        plan = await changes.plan_apply("box", cfg, b, parse_edit_args([given]), boots_timeout=2)
        assert not plan.refused, plan.blocking
    plan = await changes.plan_apply("box", cfg, b, parse_edit_args(["cuda-graph-max-bs-decoder=4"]), boots_timeout=2)
    assert plan.refused
    assert "nearest known flags: --cuda-graph-max-bs-decode" in plan.blocking[0].reason


def test_drift_is_read_under_the_0523_key() -> None:
    """The file says one decode cap, the running 0.5.23 boot used another: the prediction is for
    the file's (the drift check read ``cuda_graph_max_bs``, absent from a 0.5.23 dump)."""
    from kvtui.hosts.service.model import ApplyPlan, FlagSource

    boot = _boot(SG523)
    text = UNIT_523.replace("--cuda-graph-max-bs-decode 8", "--cuda-graph-max-bs-decode 16")
    src = FlagSource("unit", "/etc/llm.service", text, "x", "llm.service")
    plan = ApplyPlan("box", HostConfig(local=True, unit="llm.service"), "apply", src, SG,
                     [Edit("mem-fraction-static", "0.8")], text, [], [], "", "", [], {})
    mapping, drift = prediction_edits(plan, boot, set(kvcalc.EDITABLE_FLAGS[SG]))
    assert mapping == {"mem_fraction_static": "0.8", "cuda_graph_max_bs": "16"}
    assert drift == ["cuda_graph_max_bs_decode=8 (the file says 16)"]


# ---------------------------------------------------------------------------------------------
# The tune
# ---------------------------------------------------------------------------------------------


def test_tune_also_takes_the_decode_spelling_and_reads_the_0523_cap() -> None:
    assert also_name("cuda-graph-max-bs-decode") == also_name("--cuda_graph_max_bs") == "cuda-graph-max-bs"
    assert also_name("cuda-graph-max-bs-prefill") is None
    boot = _boot(SG523)
    planner = Planner(SG, parse_goal("max-tokens"), Bounds(), ("cuda-graph-max-bs",), 1.0, dict(boot.flags))
    assert planner._current_extras(None) == {"cuda-graph-max-bs": 8}
