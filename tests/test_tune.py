"""``kvtui tune`` (issue 14): the pure planner against the demo's independent engine simulation,
and the CLI end to end on the demo host (real DemoBackend, real calculator, the one guarded
apply path): the issue's "Done means" for the demo host."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from kvtui.audit import read_entries
from kvtui.boot import Boot, BootTracker
from kvtui.cli import main
from kvtui.config import parse_config
from kvtui.engines import parse
from kvtui.engines.events import Engine
from kvtui.flags import get_flag
from kvtui.sim.backend import DemoBackend
from kvtui.sim.presets import PRESETS, GpuSpec
from kvtui.sim.script import BootInput
from kvtui.sim.simulate import simulate_boot
from kvtui.tune.planner import Bounds, Candidate, Goal, Planner, Stop, Tried, TuneError, parse_goal


def sim_boot(fraction: float, mrr: int | None = None, key: str = "kimi-k2.6") -> Boot:
    """One boot of the demo's engine simulation (it never imports the calculator)."""
    preset = PRESETS[key]
    argv = [preset.exe, "-m", preset.module]
    for flag in preset.flags:
        argv += shlex.split(flag)
    argv[argv.index("--mem-fraction-static") + 1] = f"{fraction:g}"
    if mrr is not None:
        argv[argv.index("--max-running-requests") + 1] = str(mrr)
    script = simulate_boot(BootInput(
        argv=tuple(argv), env={"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in preset.gpus)}, preset=preset,
        gpu=GpuSpec(), seed=0, boot_no=1, start=1.7e9, speed=1.0))
    tracker = BootTracker()
    for parsed in parse.parse_bytes("\n".join(line.text for line in script.lines).encode()):
        tracker.feed(parsed)
    return tracker.boots[-1]


def largest_sim_boot() -> float:
    """The largest fraction (0.001 grid) the simulation boots with the Kimi preset: searched here,
    by booting it, not by any formula."""
    lo, hi = 850, 999
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if sim_boot(mid / 1000).status.value == "ready":
            lo = mid
        else:
            hi = mid
    return lo / 1000


def run_planner(planner: Planner, start: Boot) -> tuple[list[Tried], Stop]:
    boots, tried = [start], []
    while True:
        c = planner.next(boots, tried)
        if isinstance(c, Stop):
            return tried, c
        mrr = dict(c.extra).get("max-running-requests")
        b = sim_boot(c.fraction, mrr)
        t = Tried(c, b.status.value, b)
        planner.learn(t)
        tried.append(t)
        boots.append(b)


def kimi_planner(goal: Goal, *, also: tuple[str, ...] = (), bounds: Bounds | None = None) -> tuple[Planner, Boot]:
    start = sim_boot(0.85)
    return Planner(Engine.SGLANG, goal, bounds or Bounds(), also, start=start.flags, start_ready=True,
                   start_tokens=start.metrics.max_total_num_tokens), start


def test_max_tokens_reaches_the_margin_edge_in_two_boots() -> None:
    planner, start = kimi_planner(Goal("max-tokens"))
    tried, stop = run_planner(planner, start)
    assert stop.met, stop.reason
    assert len(tried) <= 2  # the calibration is high-confidence
    assert all(t.ready for t in tried)
    assert tried[0].candidate.fraction == 0.95  # max_safe_fraction 0.959, rounded down to the step
    limit = largest_sim_boot()
    final = tried[-1].candidate.fraction
    assert final < limit
    # the 1 GiB graph margin is 0.0104 of fraction on this host, and the simulation's warm-up
    # request needs 0.5 GiB after the capture (first_forward_gib): the edge is within 0.01
    assert limit - final <= 0.01 + 1e-9, (final, limit)
    assert tried[-1].tokens is not None
    assert tried[-1].tokens > 360_000


def test_capture_oom_steps_down_by_what_the_trail_says() -> None:
    planner, start = kimi_planner(Goal("max-tokens"))
    dead = sim_boot(0.99)
    assert dead.failure is not None
    assert dead.failure.kind.value == "oom_graph_capture"
    t = Tried(Candidate(0.99), "failed", dead)
    planner.learn(t)
    c = planner.next([start, dead], [t])
    assert isinstance(c, Candidate)
    assert c.fraction < 0.99
    assert "by the failed capture's trail" in c.why
    # calibrated from the dead boot alone: not the sibling's graph figure, which would say 0.985
    assert c.fraction <= 0.975
    assert sim_boot(c.fraction).status.value == "ready"


def test_a_warm_up_oom_caps_the_fraction_below_it() -> None:
    planner, start = kimi_planner(Goal("max-tokens"))
    dead = sim_boot(0.976)
    assert dead.failure is not None
    assert dead.failure.kind.value == "oom_runtime"
    t = Tried(Candidate(0.976), "failed", dead)
    planner.learn(t)
    assert planner.hi == pytest.approx(0.975)
    c = planner.next([start, dead], [t])
    assert isinstance(c, Candidate)
    assert c.fraction <= 0.975
    assert sim_boot(c.fraction).status.value == "ready"


def test_a_pool_that_did_not_fit_steps_up() -> None:
    planner, _start = kimi_planner(Goal("max-tokens"))
    t = Tried(Candidate(0.6), "failed", None)
    planner.learn(t)  # no boot: bounds unchanged
    assert planner.lo == 0.5
    dead = sim_boot(0.5)
    assert dead.failure is not None
    assert dead.failure.kind.value == "oom_kv_allocate"
    planner.learn(Tried(Candidate(0.5), "failed", dead))
    assert planner.lo == pytest.approx(0.51)


def test_context_goal_takes_the_smallest_fraction_that_holds_it() -> None:
    planner, start = kimi_planner(parse_goal("context=200000", 1), also=("max-running-requests",))
    tried, stop = run_planner(planner, start)
    assert stop.met, stop.reason
    assert len(tried) == 1
    assert tried[0].tokens is not None
    assert tried[0].tokens >= 200_000
    assert tried[0].candidate.fraction == pytest.approx(0.86)


def test_extra_knob_moves_only_when_the_fraction_cannot() -> None:
    # 380,000 tokens: the simulation's largest pool at max-running-requests 64 is 380,503 (0.98),
    # beyond the graph margin; fewer running requests capture fewer graphs and free the memory
    goal = parse_goal("tokens=372000")
    planner, start = kimi_planner(goal)
    _, stop = run_planner(planner, start)
    assert not stop.met
    assert "--also max-running-requests" in stop.reason
    planner, start = kimi_planner(goal, also=("max-running-requests",))
    tried, stop = run_planner(planner, start)
    assert stop.met, stop.reason
    extra = dict(tried[-1].candidate.extra)
    assert extra["max-running-requests"] < 64
    assert tried[-1].tokens is not None
    assert tried[-1].tokens >= 372_000


def test_goals_and_bounds_are_checked() -> None:
    assert parse_goal("max-tokens") == Goal("max-tokens")
    assert parse_goal("context=200_000", 2).tokens_needed == 400_000
    assert parse_goal("tokens=1,000").n == 1000
    for bad, req in (("biggest", None), ("context=", None), ("tokens=5", 2), ("max-tokens", 1), ("context=9", 0)):
        with pytest.raises(TuneError):
            parse_goal(bad, req)
    for b in (Bounds(0.9, 0.8), Bounds(step=0), Bounds(max_boots=0), Bounds(0.5, 1.2)):
        with pytest.raises(TuneError):
            b.check()


def test_the_planners_searches_are_the_calculators() -> None:
    # planner._largest / _smallest reuse kvcalc.grid_search: checked against a brute force over
    # every threshold of a monotone test on a small grid, the edges included
    from kvtui import kvcalc
    from kvtui.tune import planner as pl

    assert pl._largest(0, 0, lambda i: True) == kvcalc.grid_search(0, 0, lambda i: True) == 0
    for lo, hi in ((0, 9), (850, 999), (5, 5), (7, 3)):
        for cut in range(lo - 1, hi + 2):
            below = [i for i in range(lo, hi + 1) if i <= cut]
            above = [i for i in range(lo, hi + 1) if i >= cut]
            assert pl._largest(lo, hi, lambda i, c=cut: i <= c) == (max(below) if below else None)
            assert pl._smallest(lo, hi, lambda i, c=cut: i >= c) == (min(above) if above else None)


# -- the CLI on the demo host ---------------------------------------------------------------------

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


def _unit(hosts: Path, name: str = "demo") -> str:
    cfg = parse_config(hosts.read_text(), hosts)
    return DemoBackend(name, cfg.host(name)).read_unit()


def _kvtui(hosts: Path, *argv: str) -> int:
    return main(["--hosts", str(hosts), *argv])


def test_cli_max_tokens_on_the_demo(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _kvtui(hosts, "tune", "demo", "--goal", "max-tokens", "--yes", "--json")
    out, err = capsys.readouterr()
    assert code == 0, err
    plan, _, js = out.partition("{")
    assert "first candidate: 0.950" in plan
    assert "budget: at most 6 boots" in plan
    result = json.loads("{" + js)
    assert result["met"] is True
    steps = result["steps"]
    assert [s["outcome"] for s in steps] == ["ready", "ready"]
    final = steps[-1]["fraction"]
    assert get_flag(_unit(hosts), "unit", "mem-fraction-static") == f"{final:g}"
    assert largest_sim_boot() - final <= 0.01 + 1e-9
    assert steps[-1]["actual_tokens"] == steps[-1]["predicted_tokens"] or abs(
        steps[-1]["actual_tokens"] - steps[-1]["predicted_tokens"]) < 100
    assert all(s["boot_seconds"] is not None for s in steps)
    assert all(s["probe"].startswith("answered a 1-token request in ") for s in steps)  # ready = answered
    assert "step  setting" in err
    assert "the new boot is ready" in err
    entries = read_entries()
    assert [(e["action"], e["outcome"]) for e in entries[-3:]] == [("apply", "ready"), ("apply", "ready"),
                                                                    ("tune", "met")]
    assert len(entries[-1]["steps"]) == 2  # type: ignore[arg-type]
    # each step's boot is in the history with its prediction and outcome (the ledger), as apply's
    assert _kvtui(hosts, "history", "demo", "--json") == 0
    stored = json.loads(capsys.readouterr().out)["boots"]
    tuned = [b for b in stored if (b.get("restart") or {}).get("action") == "apply"]
    assert len(tuned) == 2
    by_fraction = {round(float(b["restart"]["prediction"]["fraction"]), 3): b for b in tuned}
    assert set(by_fraction) == {round(float(s["fraction"]), 3) for s in steps}
    assert all(b["restart"]["outcome"] == "ready" for b in tuned)


def test_cli_context_goal_and_an_impossible_goal(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _kvtui(hosts, "tune", "demo", "--goal", "context=200000", "--requests", "1", "--also",
                  "max-running-requests", "--yes")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "goal met" in out
    assert get_flag(_unit(hosts), "unit", "mem-fraction-static") == "0.86"
    before = _unit(hosts)
    code = _kvtui(hosts, "tune", "demo", "--goal", "tokens=5000000", "--yes")
    out, err = capsys.readouterr()
    assert code == 1
    assert "goal not met" in out
    assert "5,000,000" in err
    assert _unit(hosts) == before  # the last good state is in place
    assert read_entries()[-1]["outcome"] == "not_met"


def test_cli_dry_run_refusals_and_usage(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _unit(hosts)
    assert _kvtui(hosts, "tune", "demo", "--goal", "max-tokens", "--dry-run") == 0
    out, err = capsys.readouterr()
    assert "first candidate" in out
    assert "dry run" in err
    assert _kvtui(hosts, "tune", "demo", "--goal", "max-tokens") == 4  # no terminal to confirm on
    assert "pass --yes" in capsys.readouterr().err
    assert _kvtui(hosts, "tune", "ro", "--goal", "max-tokens", "--yes") == 4
    assert "readonly" in capsys.readouterr().err
    assert _kvtui(hosts, "tune", "demo", "--goal", "biggest", "--yes") == 2
    assert "expected max-tokens, context=N or tokens=N" in capsys.readouterr().err
    assert _kvtui(hosts, "tune", "demo", "--goal", "max-tokens", "--also", "tp", "--yes") == 2
    assert "--also tp" in capsys.readouterr().err
    assert _unit(hosts) == before


def test_a_step_that_does_not_answer_fails_and_the_tune_rolls_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    # the demo's server answers 404 to a model it does not serve
    hosts.write_text(HOSTS.replace("[hosts.demo]\n", '[hosts.demo]\nprobe_model = "no-such-model"\n'))
    before = _unit(hosts)
    code = _kvtui(hosts, "tune", "demo", "--goal", "max-tokens", "--yes", "--json", "--max-boots", "2")
    out, err = capsys.readouterr()
    assert code == 1, err
    result = json.loads(out[out.index("{"):])
    assert [(s["outcome"], s["failure"]) for s in result["steps"]] == [("failed", "not_serving")] * 2
    assert "/v1/completions: HTTP 404" in result["steps"][0]["probe"]
    # the rollback restores the configuration before the tune (the last ready one) and, like every
    # restart through the service, asks it for one token: the same wrong model name gets no answer
    # there either, and the tune says the rollback ended failed instead of claiming it ready
    assert "ended failed" in result["rolled_back"]
    assert _unit(hosts) == before
    assert err.count("/v1/completions: HTTP 404") >= 3
    assert "boot budget is spent" in result["reason"]


async def test_a_stop_request_ends_the_tune_after_the_step_in_progress(hosts: Path) -> None:
    from kvtui.config import load_config
    from kvtui.hosts.factory import make_backend
    from kvtui.tune import driver

    cfg = load_config(str(hosts)).host("demo")
    b = make_backend("demo", cfg)
    await b.start()
    try:
        cmd, boots = await driver.start_state("demo", cfg, b)
        planner = Planner(cmd.engine, Goal("max-tokens"), Bounds(), start=boots[-1].flags, start_ready=True)
        run = driver.TuneRun("demo", cfg, b, planner, list(boots), timeout=60)

        def say(msg: str) -> None:
            if msg.startswith("step 1:"):
                run.stop.set()  # Ctrl-C / Esc while step 1 runs

        run.say = say
        result = await driver.tune(run)
    finally:
        await b.close()
    assert result.interrupted
    assert [s.outcome for s in result.steps] == ["ready"]  # step 1 finished, nothing after it
    assert result.reason == "stopped by the operator after the step in progress"
    assert result.final == "0.950"
    assert not result.met
    assert get_flag(_unit(hosts), "unit", "mem-fraction-static") == "0.95"


def test_the_planner_calibrates_with_the_history_as_calc_host_does() -> None:
    """Issue 22 #5: `tune --dry-run` ignored the history calibration that `calc --host` and the
    console use (337,090 vs 337,095): the planner now takes the stored boots of the chosen boot's
    deployment (injected: ``changes.stored_siblings``) as more calibration points."""
    from kvtui import kvcalc
    from kvtui.bootlog import read_log

    path = Path(__file__).parent / "fixtures" / "kvcalc" / "sglang-pair-gqa70b-tp4.log"
    boots, _ = read_log([path.read_bytes()])
    sized = [b for b in boots if kvcalc.sized_pool(b)]
    assert len(sized) == 2
    older, newer = sized
    alone = Planner(Engine.SGLANG, Goal("max-tokens"), Bounds()).model([newer])
    told = Planner(Engine.SGLANG, Goal("max-tokens"), Bounds(), stored=lambda chosen, seen: [older]).model([newer])
    assert str(alone.basis) == "calibrated"
    assert str(told.basis) == "two-point"
    assert told.calibration_boots == 2
    both = kvcalc.calibrate(newer, others=[older])  # what calc --host makes of the same two boots
    assert kvcalc.predict(told, {"mem_fraction_static": 0.9}).tokens == kvcalc.predict(
        both, {"mem_fraction_static": 0.9}).tokens
