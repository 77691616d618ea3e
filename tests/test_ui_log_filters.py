"""Issue 22 #7: filters that hide noise — ``&!Decode`` (out-filters), regular expressions
(``&Prefill|Capture``), several filters at once (lnav's in/out filters) shown as chips with the
count of hidden lines, in memory and over the whole spool."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from test_ui_helpers import Harness, wait_for

from kvtui.logfilter import FilterSet, LineFilter
from kvtui.monitor import LogLine
from kvtui.spool import Spool
from kvtui.ui.log.model import ViewMode
from kvtui.ui.log.panel import LogPanel, LogStatus
from kvtui.ui.log.view import LogView

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def serving_lines(count: int, *, start: int = 0) -> list[LogLine]:
    """A serving SGLang: 8 of 10 lines are "Decode batch", the rest prefill / capture / errors."""
    out = []
    for seq in range(start, start + count):
        rank = f"TP{seq % 4}"
        k = seq % 10
        if k == 3:
            body = f"Prefill batch. #new-seq: 1, #new-token: {seq}"
        elif k == 7:
            body = f"Capture cuda graph end. Time elapsed: {seq} s"
        else:
            body = f"Decode batch. #running-req: {k}, #token: {seq}, gen throughput (token/s): 1234.5"
        text = f"[2026-05-01 12:00:00 {rank}] {body}"
        out.append(LogLine(seq=seq, text=text, ts=T0 + timedelta(seconds=seq), rank=rank, boot=0))
    return out


def status_text(panel: LogPanel) -> str:
    return panel.query_one(LogStatus).state.plain


def view_mode(view: LogView) -> ViewMode:
    return view.mode


# ---- the filter model (pure) ------------------------------------------------------------------


def _f(raw: str) -> LineFilter:
    flt = LineFilter.parse(raw)
    assert flt is not None
    return flt


def _m(fs: FilterSet, text: str, rank: str | None = None) -> bool:
    return fs.matches_text(text, rank)


def test_negation_regex_and_in_out_sets() -> None:
    out = LineFilter.parse("!Decode")
    assert out is not None
    assert out.negate
    assert not out.regex
    assert out.text == "Decode"
    assert out.chip == "-Decode"
    fs = FilterSet((out,))
    assert not _m(fs, "Decode batch. #running-req: 3")
    assert _m(fs, "Prefill batch. #new-seq: 1")
    rx = LineFilter.parse("Prefill|Capture")
    assert rx is not None
    assert rx.regex
    assert not rx.negate
    assert rx.chip == "+Prefill|Capture"
    both = FilterSet((rx, out))
    assert _m(both, "Prefill batch")
    assert _m(both, "Capture cuda graph end")
    assert not _m(both, "Decode batch")
    assert not _m(both, "Decode batch during Prefill")  # an out-filter wins
    # several in-filters: a line is shown if it matches any of them (lnav)
    ranks = FilterSet((_f("TP3"), _f("error")))
    assert _m(ranks, "x", "TP3")
    assert _m(ranks, "an ERROR here", "TP1")
    assert not _m(ranks, "x", "TP1")
    # a rank out-filter
    no_tp0 = FilterSet((_f("!TP0"),))
    assert not _m(no_tp0, "x", "TP0")
    assert _m(no_tp0, "x", "TP1")
    assert _m(no_tp0, "x", None)


def test_smart_case_and_what_makes_a_regex() -> None:
    plain = LineFilter.parse("avail mem=12.5")
    assert plain is not None
    assert not plain.regex
    assert FilterSet((plain,)).matches_text("AVAIL MEM=12.5 GB", None)
    assert not FilterSet((plain,)).matches_text("avail mem=1245", None)
    upper = LineFilter.parse("Decode|prefill")
    assert upper is not None
    assert upper.regex
    assert not upper.ignore_case
    assert not FilterSet((upper,)).matches_text("decode batch", None)
    lower = LineFilter.parse(r"decode\S*|prefill")
    assert lower is not None
    assert lower.ignore_case
    assert FilterSet((lower,)).matches_text("DECODE batch", None)
    bad = LineFilter.parse("(bs=")
    assert bad is not None
    assert not bad.regex
    assert "plain text" in bad.note
    assert FilterSet((bad,)).matches_text("Capturing batches (bs=8 avail_mem=1 GB)", None)
    assert LineFilter.parse("!") is None
    assert LineFilter.parse("  ") is None


def test_set_adds_drops_and_one_spool_expression() -> None:
    a, b = LineFilter.parse("Prefill|Capture"), LineFilter.parse("!Decode")
    assert a is not None
    assert b is not None
    fs = FilterSet().added(a).added(b).added(a)
    assert fs.filters == (a, b)
    assert fs.without_last().filters == (a,)
    assert fs.raw == "&Prefill|Capture &!Decode"
    rx = fs.spool_regex()
    assert rx is not None
    texts = ["Prefill batch", "Decode batch", "Capture end", "other", "prefill (lower case)"]
    assert [t for t in texts if re.search(rx, t)] == [t for t in texts if fs.matches_text(t, None)]
    assert FilterSet((LineFilter.parse("TP3"),)).spool_regex() is None  # type: ignore[arg-type]
    assert FilterSet((LineFilter.parse("TP3"),)).rank == "TP3"  # type: ignore[arg-type]


# ---- the view ---------------------------------------------------------------------------------


async def test_out_filter_hides_decode_lines_and_counts_them() -> None:
    """``&!Decode`` matched 0 lines on main (it looked for the text "!Decode")."""
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(120, 20)) as pilot:
        view = panel.view
        view.append(serving_lines(200))
        view.set_filter("!Decode")
        await pilot.pause()
        assert view_mode(view) is ViewMode.FILTER
        assert len(view.lines) == 40
        assert not any("Decode" in ln.text for ln in view.lines)
        assert view.filter_hidden == 160
        await wait_for(pilot, lambda: "160 hidden" in status_text(panel))
        assert "[-Decode]" in status_text(panel)
        # new lines keep being filtered, and counted
        view.append(serving_lines(10, start=200))
        assert len(view.lines) == 42
        assert view.filter_hidden == 168
        await wait_for(pilot, lambda: "168 hidden" in status_text(panel))


async def test_filters_add_up_as_chips_then_drop_and_clear() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(160, 20)) as pilot:
        view = panel.view
        view.append(serving_lines(200))
        await pilot.pause()
        # typed in the find bar: & adds a filter each time
        for typed in ("Prefill|Capture", "!TP0"):
            panel.open_find("filter")
            await pilot.pause()
            await pilot.press(*typed, "enter")
            await pilot.pause()
        assert view.line_filter is not None
        assert [f.raw for f in view.line_filter.filters] == ["Prefill|Capture", "!TP0"]
        assert view.lines
        assert all(("Prefill" in ln.text or "Capture" in ln.text) and ln.rank != "TP0" for ln in view.lines)
        shown = len(view.lines)
        assert view.filter_hidden == 200 - shown
        await wait_for(pilot, lambda: "[+Prefill|Capture] [-TP0]" in status_text(panel))
        # & - drops the newest filter
        view.set_filter("-")
        assert view.line_filter is not None
        assert len(view.line_filter) == 1
        assert len(view.lines) == 40
        assert "dropped &!TP0" in view.message
        # & with nothing clears them all
        view.set_filter("")
        assert view.line_filter is None
        assert view_mode(view) is ViewMode.LIVE
        assert len(view.lines) == 200
        await wait_for(pilot, lambda: "hidden" not in status_text(panel))


async def test_filter_set_reaches_the_whole_spool(tmp_path: Path) -> None:
    spool = Spool.create(tmp_path / "state", "demo")
    lines = [spool.append(ln.text, boot=0, ts=ln.ts, rank=ln.rank, style=ln.style) for ln in serving_lines(3000)]
    spool.flush()
    panel = LogPanel(window=200, source=spool)
    async with Harness(panel).run_test(size=(120, 20)) as pilot:
        view = panel.view
        view.append(lines)
        await pilot.pause()
        assert view.lines[0].seq == 2800
        # negation + regex: one expression over the whole spool
        view.set_filter("Prefill|Capture")
        view.set_filter("!Decode")
        await wait_for(pilot, lambda: "in the whole log" in view.message)
        assert len(view.lines) == 200  # the newest window of 600 matches
        assert view.lines[-1].seq == 2997
        assert all("Decode" not in ln.text for ln in view.lines)
        assert view.filter_hidden == (2999 - view.lines[0].seq + 1) - 200
        # a rank with a text: read back from the spool and tested with the set
        view.set_filter("")
        view.set_filter("!Decode")
        view.set_filter("!TP3")
        await wait_for(pilot, lambda: "in the whole log" in view.message)
        assert view.lines
        assert all("Decode" not in ln.text and ln.rank != "TP3" for ln in view.lines)
        assert view.lines[0].seq < 2800  # lines only the spool had
        assert len(view.lines) == 200
    spool.close()


async def test_a_held_view_counts_hidden_lines_and_says_so_when_shown() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(120, 20)) as pilot:
        view = panel.view
        view.append(serving_lines(100))
        view.set_filter("!Decode")
        await wait_for(pilot, lambda: "80 hidden" in status_text(panel))
        view.hold(True)
        view.append([ln for ln in serving_lines(10, start=100) if "Decode" in ln.text])  # all hidden
        assert view.filter_hidden == 88
        view.hold(False)
        await wait_for(pilot, lambda: "88 hidden" in status_text(panel))
