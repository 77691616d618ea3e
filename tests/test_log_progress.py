"""Issue 22 #8: a tqdm bar's redraws (every shard, every capture batch) are one row of the log
view that updates in place, with how many draws it stands for; ``P`` shows every redraw; the spool
keeps every line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from test_ui_helpers import Harness, wait_for

from kvtui.monitor import LogLine
from kvtui.progress_bars import BarRows, bar_key
from kvtui.spool import Spool
from kvtui.ui.log.model import ViewMode
from kvtui.ui.log.panel import LogPanel, LogStatus
from kvtui.ui.log.window import BarWindow
from kvtui.updates import LineRun

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def shards(total: int, prefix: str = "") -> list[str]:
    """vLLM's / SGLang's shard bar, its last draw printed twice (as tqdm closes it)."""
    out = [f"{prefix}Loading safetensors checkpoint shards: {100 * i // total:3d}% Completed | {i}/{total} "
           f"[00:{i:02d}<00:17,  2.80s/it]" for i in range(total + 1)]
    return [*out, out[-1]]


def capture(n: int) -> list[str]:
    return [f"Capturing batches (bs={max(1, 256 - 7 * i)} avail_mem={40.0 - i * 0.25:.2f} GB): {100 * i // n:3d}%|"
            f"{'█' * (10 * i // n):<10}| {i}/{n} [00:{i:02d}<00:05, 10.83it/s]" for i in range(n + 1)]


def as_lines(texts: list[str], *, start: int = 0, rank: str | None = None) -> list[LogLine]:
    return [LogLine(seq=start + i, text=t, ts=T0 + timedelta(seconds=start + i), rank=rank, boot=0,
                    style="progress" if "%" in t else "") for i, t in enumerate(texts)]


def as_run(texts: list[str], *, start: int = 0, ranks: list[str | None] | None = None) -> LineRun:
    n = len(texts)
    return LineRun(start, 0, texts, [T0] * n, ranks or [None] * n, [None] * n)


def test_bar_key_names_the_bar_not_its_numbers() -> None:
    a, b = capture(36)[3], capture(36)[30]
    assert bar_key(a, None) is not None
    assert bar_key(a, None) == bar_key(b, None)  # bs and avail_mem change every redraw
    s = shards(61)
    assert bar_key(s[0], None) == bar_key(s[45], None) != bar_key(a, None)
    assert bar_key(s[5], "TP0") != bar_key(s[5], "TP1")  # a rank's bar is its own
    vllm = ("(EngineCore_DP0 pid=996958) Loading safetensors checkpoint shards:  33% Completed | 1/3 "
            "[00:02<00:05,  2.80s/it]")
    assert bar_key(vllm, "DP0") is not None
    # not bars: a log line, and a bar with a log line glued to its end (the line must stay seen)
    assert bar_key("[2026-05-01 12:00:00 TP0] Decode batch. #running-req: 3, token usage: 0.50", "TP0") is None
    assert bar_key("  0%|          | 0/36 [00:00<?, ?it/s][2026-02-09 14:38:28] Attempting to", None) is None


def test_bar_rows_fold_a_run_and_any_other_line_ends_it() -> None:
    rows = BarRows()
    s = shards(3)
    assert rows.place(s[0], "TP0", 0) == (0, 1)
    assert rows.place(s[0], "TP1", 1) == (1, 1)  # another rank's redraws interleave: its own row
    assert rows.place(s[1], "TP0", 2) == (0, 2)
    assert rows.place(s[1], "TP1", 2) == (1, 2)
    assert rows.place("Load weight end. mem usage=12 GB", "TP0", 2) is None
    assert rows.place(s[2], "TP0", 3) == (3, 1)  # after another line: a new row
    # tqdm's first draw, before the bar has its description, is the same bar
    rows.other_lines()
    assert rows.place("  0%|          | 0/12 [00:00<?, ?it/s]", None, 4) == (4, 1)
    assert rows.place(capture(12)[0], None, 5) == (4, 2)
    assert rows.place(capture(12)[1], None, 5) == (4, 3)


def test_bar_window_folds_runs_and_lines_and_keeps_other_lines() -> None:
    w = BarWindow()
    texts = ["[TP0] Load weight begin. avail mem=94.10 GB", *shards(61), "[TP0] Load weight end."]
    # as a run the monitor spooled without parsing, then as parsed lines
    added, redrawn = w.feed([as_run(texts)])
    assert added == 3
    assert redrawn > 0
    assert [ln.text for ln in w] == [texts[0], f"[×63 redraws] {texts[-2]}", texts[-1]]
    assert w[1].seq == 63  # the newest draw's line
    added, _ = w.feed(as_lines(capture(36), start=100))
    assert added == 1
    assert w[-1].text.startswith("[×37 redraws] Capturing batches (bs=4 avail_mem=31.00 GB): 100%|")
    # a run split around bars keeps its other lines, in order
    mixed = ["a", "b", *capture(2), "c"]
    w2 = BarWindow()
    assert w2.feed([as_run(mixed)])[0] == 4
    assert [ln.text for ln in w2][0:2] == ["a", "b"]
    assert [ln.seq for ln in w2] == [0, 1, 4, 5]
    # a storm's run without a bar is kept as it came (no line built)
    w3 = BarWindow()
    run = as_run([f"[TP0] Decode batch. #running-req: {i}" for i in range(1000)])
    assert w3.feed([run]) == (1000, 0)
    assert w3._parts == [run]


def test_bar_window_trimmed_then_fed_starts_the_bar_again() -> None:
    w = BarWindow()
    w.feed(as_lines(shards(3)[:2]))
    del w[:1]  # the bar's row dropped
    w.feed(as_lines(shards(3)[2:3], start=2))
    assert len(w) == 1
    assert "redraws" not in w[0].text


def status_text(panel: LogPanel) -> str:
    return panel.query_one(LogStatus).state.plain


async def test_redraws_show_as_one_row_P_expands_and_the_spool_keeps_them(tmp_path: Path) -> None:
    spool = Spool.create(tmp_path / "state", "demo")
    texts = ["[2026-05-01 12:00:00 TP0] Load weight begin. avail mem=94.10 GB", *shards(30),
             "[2026-05-01 12:00:40 TP0] Capture cuda graph begin.", *capture(36),
             "[2026-05-01 12:01:00 TP0] RuntimeError: CUDA out of memory"]
    lines = [spool.append(ln.text, boot=0, ts=ln.ts, rank=ln.rank, style=ln.style) for ln in as_lines(texts)]
    spool.flush()
    panel = LogPanel(window=500, source=spool)
    async with Harness(panel).run_test(size=(140, 20)) as pilot:
        view = panel.view
        # arriving a few at a time, as a follower reads them
        for i in range(0, len(lines), 7):
            view.append(lines[i:i + 7])
        await pilot.pause()
        assert [ln.text for ln in view.lines] == [texts[0], f"[×32 redraws] {texts[32]}", texts[33],
                                                  f"[×37 redraws] {texts[-2]}", texts[-1]]
        await wait_for(pilot, lambda: any("×37 redraws" in view.render_line(y).text for y in range(20)))
        # the error is on screen with the lines before it, not 30 redraws
        assert "RuntimeError" in view.render_line(4).text
        # P: every redraw
        view.focus()
        await pilot.press("P")
        await wait_for(pilot, lambda: len(view.lines) == len(texts))
        assert view.mode is ViewMode.LIVE
        assert "every redraw" in status_text(panel)
        assert not any("redraws" in ln.text for ln in view.lines)
        await pilot.press("P")
        await wait_for(pilot, lambda: len(view.lines) == 5)
        # the spool keeps every line: the redraws folded in the view are read back from it
        assert [ln.seq for ln in spool.search("15/30")] == [16]
        # a search looks at the rows shown: P first to find a folded redraw in memory
        await pilot.press("P")
        view.set_search("15/30")
        await wait_for(pilot, lambda: view.cursor == 16)
    spool.close()


def test_a_real_capture_oom_log_through_the_monitor_shows_its_failure_not_its_redraws(tmp_path: Path) -> None:
    """SGLang 0.4.10's capture OOM (a real log, tqdm's \\r redraws): through the monitor (live
    prefilter on, its batches' parts as the view gets them), the 7 shard and 13 capture redraws are a row per bar,
    and the failure's lines are the newest rows with the lines that led to it."""
    from types import SimpleNamespace
    from typing import Any

    from kvtui.engines.events import LogRecord
    from kvtui.monitor import HostMonitor, LogBatch, MonitorOptions

    raw = (Path(__file__).parent / "fixtures" / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_text()
    texts = [t for t in raw.replace("\r", "\n").split("\n") if t.strip()]
    backend: Any = SimpleNamespace(name="oom")
    mon = HostMonitor("oom", backend,
                      options=MonitorOptions(state_dir=tmp_path / "oom", log_window=300, live_prefilter=True))
    got: list[Any] = []
    mon.publisher.sink = got.extend
    recs = [LogRecord(t, None, str(i), "file") for i, t in enumerate(texts)]
    for i in range(0, len(recs), 5):
        mon.ingest.records(recs[i:i + 5])
        mon.publisher.flush()
    w = BarWindow()
    lines = 0
    for u in got:
        if isinstance(u, LogBatch):
            w.feed(u.parts)
            lines += len(u)
    rows = [ln.text for ln in w]
    bars = [t for t in rows if "Capturing batches" in t]
    assert len(bars) == 1
    assert bars[0].startswith("[×13 redraws] Capturing batches (bs=64 avail_mem=0.18 GB):  54%")
    shards = [t for t in rows if "checkpoint shards" in t]
    assert shards == ["[×7 redraws] Loading safetensors checkpoint shards: 100% Completed | 30/30 "
                      "[04:00<00:00, 6.0s/it]"]
    assert len(rows) == lines - 18
    # the bar's last state, right above the failure, all of it among the newest 15 rows
    k = rows.index(bars[0])
    assert "Scheduler hit an exception" in rows[k + 1]
    assert k >= len(rows) - 15
    assert any("Capture cuda graph failed" in t for t in rows[-15:])
    mon.spool.close()


async def test_a_filtered_view_folds_bars_too() -> None:
    panel = LogPanel(window=500)
    async with Harness(panel).run_test(size=(140, 20)) as pilot:
        view = panel.view
        decode = [f"[2026-05-01 12:00:00 TP0] Decode batch. #running-req: {i}" for i in range(5)]
        s = shards(10)
        view.append(as_lines([*decode, *s[:5]]))
        view.set_filter("!Decode")
        await pilot.pause()
        assert [ln.text for ln in view.lines] == [f"[×5 redraws] {s[4]}"]
        view.append(as_lines([*s[5:], "[2026-05-01 12:00:09 TP0] Load weight end."], start=10))
        assert [ln.text for ln in view.lines] == [f"[×12 redraws] {s[-1]}",
                                                  "[2026-05-01 12:00:09 TP0] Load weight end."]
        assert view.filter_hidden == 5
        view.toggle_progress()
        await wait_for(pilot, lambda: len(view.lines) == 13)
        assert view.mode is ViewMode.FILTER
