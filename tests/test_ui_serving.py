"""The console's serving view (issue 24): a ready demo host under a fixed overload
(``demo_load``: more than the pool holds, a queue, retractions in its simulated ``/metrics``) —
the figures row from ``/metrics``, the "pool full" diagnosis with the calculator's answer (the
figures ``kvtui calc`` gives for the same edit), ``K`` to the apply dialog with that edit, and the
KV timeline beside GPU memory. The real app, monitor and calculator; one injected clock."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_ui_helpers import FakeClock, demo_app, plain, run_clock, start_demo, wait_for

from kvtui.boot import BootStatus
from kvtui.cli import main
from kvtui.serving.diagnose import Limit
from kvtui.ui.app import KvtuiApp, MainScreen
from kvtui.ui.host_pane import HostPane
from kvtui.ui.screens import ApplyScreen
from kvtui.ui.serving.widgets import KvTimeline, ServingBanner, ServingRow, serving_text

SPEED = 40.0
SIZE = (130, 38)
OVERLOAD = {"demo_load": 1.2}


def _pane(app: KvtuiApp) -> HostPane:
    pane = app.main_screen.active_pane
    assert pane is not None
    return pane


def _pool_full(pane: HostPane) -> bool:
    d = pane.serving.diagnosis
    return d is not None and d.limit is Limit.POOL and pane.serving.suggestion is not None


async def _incident(pilot: Any, app: KvtuiApp, clock: FakeClock) -> HostPane:
    pane = _pane(app)
    await run_clock(pilot, app, clock, until=lambda: pane.boot is not None and pane.boot.status is BootStatus.READY,
                    limit=60)
    await wait_for(pilot, lambda: pane.calculator.result is not None)
    await run_clock(pilot, app, clock, until=lambda: _pool_full(pane), step=5.0, limit=120)
    await pilot.pause()
    return pane


def _calc_args(tmp_path: Path, pane: HostPane) -> list[str]:
    """``kvtui calc --log`` on the demo host's log as the console read it, ``--json``."""
    backend: Any = pane.backend
    log = tmp_path / "demo.log"
    log.write_text("\n".join(r.text for r in backend.read_lines(limit=100_000)) + "\n")
    return ["calc", "--log", str(log), "--json"]


async def test_the_serving_view_shows_metrics_and_the_pool_full_diagnosis_with_calcs_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fails on main: the console read no /metrics (no serving row, no diagnosis, no KV timeline)."""
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    app = demo_app(clock, speed=SPEED, host_options=OVERLOAD)
    async with app.run_test(size=SIZE) as pilot:
        pane = await _incident(pilot, app, clock)
        assert pane.serving.reader is not None
        assert pane.serving.reader.source == "metrics"
        figures = pane.serving.figures
        assert figures is not None
        assert pane.boot is not None
        # the row: the window's figures from /metrics (the queue, retractions, TTFT, queue time)
        row = pane.query_one(ServingRow)
        assert row.display
        assert row.text == serving_text(figures, pane.boot.engine, "/metrics",
                                        with_usage=pane.boot.live.token_usage is None)
        assert figures.waiting is not None
        assert figures.waiting > 0
        assert f"waiting {figures.waiting}" in row.text
        assert "retractions " in row.text
        assert "TTFT p95 " in row.text
        assert "queue p95 " in row.text
        assert figures.ttft_p95 is not None
        assert figures.retractions_per_min is not None
        assert figures.retractions_per_min > 0
        # the KV timeline under GPU memory
        timeline = pane.query_one(KvTimeline)
        assert timeline.display
        assert len(timeline.points) >= 2
        assert "KV " in plain(timeline)
        # the diagnosis with the calculator's answer
        banner = pane.query_one(ServingBanner)
        assert banner.display
        line = banner.line
        assert line.startswith("pool full: "), line
        m = re.search(r"at mem-fraction-static ([0-9.]+) \(largest safe ([0-9.]+)\) the pool grows from "
                      r"([0-9,]+) to ~([0-9,]+) tokens \(\+([0-9]+) %\)", line)
        assert m is not None, line
        value, safe, base, grown = m.group(1), m.group(2), int(m.group(3).replace(",", "")), \
            int(m.group(4).replace(",", ""))
        assert grown > base
        assert float(value) <= float(safe)  # rounded down from the largest safe fraction, or less
        assert float(value) > float(pane.boot.flags.get("mem_fraction_static", 0) or 0)
        args = _calc_args(tmp_path, pane)
    # … the figures kvtui calc gives for the same edit, on the same log (out of the app: it holds stdout)
    capsys.readouterr()
    assert main(args) == 0
    now = json.loads(capsys.readouterr().out)
    assert main([*args, "--set", f"mem-fraction-static={value}"]) == 0
    edited = json.loads(capsys.readouterr().out)
    assert now["predicted"]["max_total_num_tokens"] == base
    assert edited["predicted"]["max_total_num_tokens"] == grown
    assert f"{now['max_safe_fraction']:g}" == safe
    assert edited["verdict"] in ("ok", "tight")  # the full-context note of this preset, as at 0.85


async def test_K_takes_the_suggested_edit_to_the_apply_dialog() -> None:
    """Fails on main: K was no key of the console."""
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    app = demo_app(clock, speed=SPEED, host_options=OVERLOAD)
    async with app.run_test(size=SIZE) as pilot:
        pane = await _incident(pilot, app, clock)
        s = pane.serving.suggestion
        assert s is not None
        assert s.value is not None
        await pilot.press("K")
        await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen))
        dialog = app.screen
        assert isinstance(dialog, ApplyScreen)
        await pilot.pause()
        diff = plain(dialog.query_one("#apply-diff"))
        assert f"+    --mem-fraction-static {s.value} \\" in diff
        field = next(f for f in pane.calculator.fields if f.flag == "mem_fraction_static")
        assert field.value == s.value
        assert pane.calculator.result is not None
        assert pane.calculator.result["predicted"]["max_total_num_tokens"] == s.tokens  # type: ignore[index]


async def test_K_without_a_full_pool_says_why_and_opens_nothing() -> None:
    """Fails on main: K was no key of the console (nothing said)."""
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = _pane(app)
        await run_clock(pilot, app, clock, until=lambda: pane.boot is not None
                        and pane.boot.status is BootStatus.READY, limit=60)
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert any("no suggested edit" in n.message for n in app._notifications)


@pytest.mark.slow
def test_snapshot_a_serving_incident_pool_full_120x36(snap_compare: Any) -> None:
    """A demo host overloaded (``demo_load = 1.2``): the boot panel's serving row and the "pool
    full" banner with the calculator's answer, the KV timeline under GPU memory. Fails on main:
    none of them existed."""
    from test_ui_helpers import settle

    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    app = demo_app(clock, speed=SPEED, host_options=OVERLOAD)

    async def run_before(pilot: Any) -> None:
        pane = await _incident(pilot, app, clock)
        await run_clock(pilot, app, clock, seconds=30.0, step=5.0)
        assert _pool_full(pane)
        await settle(pilot, app)
        pane.tick()
        pane.gpu_plot.redraw_if_needed()
        app.main_screen.refresh_bindings()
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


# ---- the calculator's answer, pure (kvtui.ui.serving.widgets.suggest) -------------------------

def _model() -> Any:
    from kvtui import kvcalc as kc
    from kvtui.commands.replay import analyse_path

    boots, _ = analyse_path(str(Path(__file__).parent / "fixtures" / "sglang-0.5.10-llama70b-tp4-ready.journal"))
    chosen, others = kc.select_boot(boots)
    return kc.calibrate(chosen, others=others)


def _pool_full_diagnosis(pool: int, peak_usage: float) -> Any:
    from kvtui.engines.events import Engine
    from kvtui.serving.diagnose import Diagnosis, Evidence, pool_knobs

    e = Evidence(seconds=300.0, samples=60, source="metrics", peak_kv_usage=peak_usage, max_running=64,
                 max_waiting=12, preemptions=None, retractions=137.0, decode_ooms=0.0, length_refused=None,
                 requests=900.0, ttft_p50=0.4, ttft_p95=2.0, queue_p95=1.5, running_cap=64, pool_tokens=pool)
    return Diagnosis(Engine.SGLANG, Limit.POOL, e, pool_knobs(Engine.SGLANG))


def test_suggest_takes_the_smaller_of_the_largest_safe_fraction_and_the_observed_demand() -> None:
    """Fails on main: no suggestion existed (the diagnosis named the knob, never a value)."""
    from kvtui import fmt
    from kvtui import kvcalc as kc
    from kvtui.ui.serving.widgets import DEMAND_MARGIN, suggest

    model = _model()
    base = kc.predict(model, {})
    largest = fmt.round_down(base.max_safe_fraction, 2)
    # demand far beyond the pool: the largest safe fraction, rounded down to 0.01
    big = suggest(_pool_full_diagnosis(base.tokens, 1.0 * 3), model, kc.DEFAULT_GRAPH_MARGIN_GIB)
    assert big is not None
    assert big.value == f"{largest:.2f}"
    assert big.safe == fmt.safe_max(base.max_safe_fraction)
    # a demand a little above the pool: the first 0.01 step that holds it with the margin
    small = suggest(_pool_full_diagnosis(base.tokens, 0.97), model, kc.DEFAULT_GRAPH_MARGIN_GIB)
    assert small is not None
    assert small.value is not None
    assert small.tokens is not None
    assert small.tokens >= 0.97 * base.tokens * DEMAND_MARGIN
    assert float(small.value) <= largest
    below = f"{float(small.value) - 0.01:.2f}"
    if float(below) > model.fraction:
        assert kc.predict(model, kc.parse_what_if(model.engine, [f"mem_fraction_static={below}"], [])).tokens \
            < 0.97 * base.tokens * DEMAND_MARGIN
    assert small.answer == (f"at mem-fraction-static {small.value} (largest safe {small.safe}) the pool grows from "
                            f"{base.tokens:,} to ~{small.tokens:,} tokens "
                            f"(+{(small.tokens / base.tokens - 1) * 100:.0f} %)")


def test_suggest_says_when_no_increase_is_safe() -> None:
    """Fails on main: no suggestion existed."""
    from kvtui import kvcalc as kc
    from kvtui.ui.serving.widgets import suggest

    model = _model()
    margin = 30.0  # a graph margin no larger fraction leaves room for
    base = kc.predict(model, {}, graph_margin_gib=margin)
    assert base.max_safe_fraction is None or base.max_safe_fraction < model.fraction + 0.01
    s = suggest(_pool_full_diagnosis(base.tokens, 1.0), model, margin)
    assert s is not None
    assert s.value is None
    assert s.edit is None
    assert "the pool cannot grow safely on these GPUs" in s.answer
    assert "lower max-running-requests / context, or add GPUs" in s.answer


async def test_a_hidden_host_stops_sampling_and_starts_again_when_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Like the pane's other pollers: a host tab hidden for ``HIDDEN_STOP_S`` reads no /metrics;
    shown again, its serving view samples again. Fails on main: no serving sampler existed."""
    import kvtui.ui.serving.panel as sv

    monkeypatch.setattr(sv, "HIDDEN_STOP_S", 0.5)
    clock = FakeClock()
    start_demo("demo-a", clock, SPEED)
    start_demo("demo-b", clock, SPEED)
    app = demo_app(clock, speed=SPEED, hosts=("demo-a", "demo-b"))
    async with app.run_test(size=SIZE) as pilot:
        a, b = app.main_screen.panes
        await run_clock(pilot, app, clock, until=lambda: all(
            p.boot is not None and p.boot.status is BootStatus.READY for p in (a, b)), limit=60)
        await run_clock(pilot, app, clock, until=lambda: a.serving.readings >= 2, step=5.0, limit=60)
        await pilot.pause(0.6)  # b has been hidden longer than HIDDEN_STOP_S
        await run_clock(pilot, app, clock, seconds=10.0, step=5.0)
        await wait_for(pilot, lambda: b.serving.caught_up)
        stopped = b.serving.readings
        await run_clock(pilot, app, clock, seconds=15.0, step=5.0)
        assert b.serving.readings == stopped  # hidden: no sample
        assert not [w for w in app.workers if w.node is b and w.group == "serving" and not w.is_finished]
        assert a.serving.readings >= 4
        await pilot.press("right_square_bracket")  # demo-b shown
        await wait_for(pilot, lambda: app.main_screen.active_pane is b)
        await run_clock(pilot, app, clock, until=lambda: b.serving.readings > stopped, step=5.0, limit=30)
