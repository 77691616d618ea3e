"""Every view shows the same figure the same way (issue 10, items 5 and 6): ``calc``, the
calculator's explain and JSON, the console's calculator panel, ``apply``'s refusal and ``replay``
all format through ``kvtui.fmt`` from the exact value, and limits are rounded toward safety."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_ui_helpers import Harness

from kvtui import kvcalc as kc
from kvtui.cli import main
from kvtui.commands.replay import analyse_path
from kvtui.ui.calc.panel import CalculatorPanel

FIX = Path(__file__).parent / "fixtures"
LLAMA_JOURNAL = FIX / "sglang-0.5.10-llama70b-tp4-ready.journal"
# 432,078 tokens / 218,774 = 1.974997…: the JSON's 3 decimals say 1.975, which a second rounding
# to 2 decimals turned into 1.98 in the panel while explain said 1.97
ODD_CONTEXT = 218774


def _row(text: str, label: str) -> str:
    for line in text.splitlines():
        if line.strip().startswith(label):
            return line
    raise AssertionError(f"no {label!r} row in:\n{text}")


def test_full_context_requests_read_the_same_in_calc_explain_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["calc", "--log", str(LLAMA_JOURNAL), "--set", f"context-length={ODD_CONTEXT}"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "1.97 requests of 218,774 tokens" in _row(out, "full context")
    assert "full-context requests = 432,078 / 218,774 = 1.97" in out  # explain ("how")
    main(["calc", "--log", str(LLAMA_JOURNAL), "--set", f"context-length={ODD_CONTEXT}", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["predicted"]["full_context_requests"] == 1.974  # a capacity, rounded down once


async def test_the_calculator_panel_shows_the_figures_of_calc(capsys: pytest.CaptureFixture[str]) -> None:
    main(["calc", "--log", str(LLAMA_JOURNAL), "--set", f"context-length={ODD_CONTEXT}"])
    calc_out = capsys.readouterr().out
    boots, _ = analyse_path(str(LLAMA_JOURNAL))
    panel = CalculatorPanel(id="calc")
    app = Harness(panel)
    async with app.run_test(size=(80, 40)) as pilot:
        panel.set_boot(boots[-1], boots)
        await pilot.pause()
        field = next(f for f in panel.fields if f.flag == "context_length")
        field.value = str(ODD_CONTEXT)
        panel.recompute()
        await pilot.pause()
        rows = panel.result_rows  # (label, value) as drawn
        shown = {label.plain: value.plain for label, value in rows}
        assert shown["full-context reqs"] == "1.97"
        assert panel.prediction is not None
        assert any(line.endswith("= 1.97") for line in panel.explain_lines() if "full-context" in line)
        # the largest safe fraction and the figures: the ones calc prints
        assert shown["max safe fraction"] == _row(calc_out, "max safe mem_fraction_static").split()[-1]
        assert shown["KV / rank"] in _row(calc_out, "KV pool")
        assert shown["free after pool"] in _row(calc_out, "free after the pools")


def test_the_refusal_names_the_safe_fraction_calc_prints_and_it_is_safe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text("[hosts.demo]\ndemo = true\ndemo_speed = 400.0\n")
    code = main(["--hosts", str(hosts), "apply", "demo", "--set", "mem-fraction-static=0.99", "--yes"])
    out, err = capsys.readouterr()
    assert code == 4
    refused = re.search(r"the largest safe fraction is ([0-9.]+)", err)
    assert refused is not None
    in_plan = re.search(r"largest safe fraction: ([0-9.]+)", out)
    assert in_plan is not None
    assert main(["--hosts", str(hosts), "calc", "--host", "demo"]) == 0
    calc_out, _ = capsys.readouterr()
    in_calc = _row(calc_out, "max safe mem_fraction_static").split()[-1]
    assert refused.group(1) == in_plan.group(1) == in_calc  # one figure, e.g. 0.959 (was 0.96 vs 0.959)
    # the figure shown is itself safe: rounding went down, never up into an unsafe fraction
    boots, _ = analyse_path(str(_demo_journal(tmp_path, hosts, capsys)))
    chosen, others = kc.select_boot(boots)
    model = kc.calibrate(chosen, others=others)
    assert kc.predict(model, {"mem_fraction_static": float(in_calc)}).verdict is kc.Verdict.OK
    assert kc.predict(model, {"mem_fraction_static": float(in_calc) + 0.001}).verdict is not kc.Verdict.OK


def _demo_journal(tmp_path: Path, hosts: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    from kvtui.config import parse_config
    from kvtui.sim.backend import DemoBackend

    cfg = parse_config(hosts.read_text(), hosts)
    b = DemoBackend("demo", cfg.host("demo"))
    path = tmp_path / "demo.log"
    path.write_text("\n".join(r.text for r in b.read_lines(limit=100_000)) + "\n")
    return path


def test_replay_and_calc_label_their_bytes_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    """replay's 81,908 is the printed KV size ÷ tokens, calc's 81,920 the exact cell: both say so."""
    main(["replay", str(LLAMA_JOURNAL)])
    replay_out = capsys.readouterr().out
    assert "≈81,908 B/token (printed KV size ÷ tokens)" in replay_out
    main(["calc", "--log", str(LLAMA_JOURNAL)])
    calc_out = capsys.readouterr().out
    assert "cell 81,920 B/token/rank (exact; the log's rounded KV size ÷ tokens gives ≈81,908)" in calc_out
    assert "≈ 81,908 B" in calc_out  # the derivation in "how" shows both


def test_replay_durations_are_the_consoles(capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui import fmt

    boots, _ = analyse_path(str(LLAMA_JOURNAL))
    main(["replay", str(LLAMA_JOURNAL)])
    out = capsys.readouterr().out
    spans = [s for s in boots[-1].phases if s.seconds is not None and s.end is not None]
    assert spans
    for s in spans:
        assert f" {fmt.duration(s.seconds)}" in out
    assert not re.search(r"\d s\b", out.split("Figures")[0])  # no "4.2 s" beside the console's "4.2s"


def test_full_context_capacity_reads_the_same_in_replay_calc_and_the_boot_panel(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """432,078 / 131,072 = 3.2964…: every view says 3.29 (a capacity rounded down; replay and the
    boot panel said 3.30 from a nearest rounding in the tracker)."""
    from kvtui.ui.widgets.boot import BootFigures

    main(["replay", str(LLAMA_JOURNAL)])
    assert "3.29 full-context requests fit" in capsys.readouterr().out
    main(["calc", "--log", str(LLAMA_JOURNAL)])
    assert "3.29 requests of 131,072 tokens" in _row(capsys.readouterr().out, "full context")
    boots, _ = analyse_path(str(LLAMA_JOURNAL))
    figures = BootFigures()
    figures._boot = boots[-1]  # what show() sets; figures() is the widget's text
    assert ("max concurrency", "3.29×") in figures.figures()
