"""The console under a log storm (issue 7): a log view whose window is full keeps showing the
newest lines, its fast line rendering draws exactly what the Rich path draws, and panels that do
not change size update without a layout pass of the screen."""

from __future__ import annotations

from datetime import datetime

from test_ui_helpers import Harness, log_lines, wait_for
from textual.widget import Widget

from kvtui.monitor import LogLine
from kvtui.ui.log.panel import LogPanel
from kvtui.ui.log.view import LogView
from kvtui.ui.perf import QuietStatic


def _row_texts(view: LogView) -> list[str]:
    height = view.scrollable_content_region.height
    return ["".join(seg.text for seg in view.render_line(y)).strip() for y in range(height)]


async def test_a_full_window_that_follows_shows_each_new_batch() -> None:
    panel = LogPanel(window=200)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(200))
        await pilot.pause(0.1)
        repaints = 0
        original = view.refresh

        def counting(*args: object, **kwargs: object) -> Widget:
            nonlocal repaints
            repaints += 1
            return original(*args, **kwargs)  # type: ignore[arg-type]

        view.refresh = counting  # type: ignore[method-assign]
        for start in (200, 300):
            repaints = 0
            view.append(log_lines(100, start=start))  # the window is full: same height, same offset
            assert repaints >= 1  # the rows now show other lines: they are drawn again
            # drawn at the next refresh (a fixed 0.1 s could end before a loaded machine's)
            await wait_for(pilot, lambda s=start: _row_texts(view)[-1].endswith(f"scheduler tick {s + 99}"),
                           timeout=30)
        assert len(view.lines) == 200


def _lines() -> list[LogLine]:
    t = datetime(2026, 5, 1, 12, 0, 0, 123456)
    texts = [
        ("[2026-05-01 12:00:00 TP0] Decode batch, #running-req: 3, token usage: 0.42", "serving"),
        ("[2026-05-01 12:00:00 TP1] Load weight begin. avail mem=94.10 GB", "phase"),
        ("torch.OutOfMemoryError: CUDA out of memory.", "error"),
        ("[2026-05-01 12:00:00] WARNING: something", "warning"),
        ("Capturing batches (bs=8 avail_mem=7.19 GB):  50%|█████     | 1/2", "progress"),
        ("[2026-05-01 12:00:00 DP0 TP0] plain line after a prefix", ""),
        ("[2026-05-01 12:00:00 TP0]", ""),
        ("no prefix at all, wide chars 漢字 and ✓", ""),
        ("tab\tinside", ""),
        ("", ""),
        ("x" * 2500, ""),
    ]
    return [LogLine(seq=i, text=text, ts=t if i % 2 else None, rank=None, boot=0, style=style)
            for i, (text, style) in enumerate(texts)]


async def test_fast_line_strips_are_the_rich_rendering() -> None:
    panel = LogPanel(window=200)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        await pilot.pause()
        styles = view._styles()
        for timestamps in (False, True):
            view.timestamps = timestamps
            view.marks = {1, 4}
            for line in _lines():
                rich = view._line_text(line, styles)
                want = list(rich.render(view.app.console))
                got = view._line_strip(line, styles)
                assert list(got) == want, line.text  # the same segments: the same screen, cell for cell
                assert got.cell_length == rich.cell_len


async def test_a_fixed_size_panel_updates_without_a_layout_pass() -> None:
    quiet = QuietStatic(id="q")
    async with Harness(quiet).run_test(size=(40, 5)) as pilot:
        await pilot.pause()
        calls: list[bool] = []
        original = quiet.refresh

        def spy(*args: object, layout: bool = False, **kwargs: object) -> Widget:
            calls.append(layout)
            return original(*args, layout=layout, **kwargs)  # type: ignore[arg-type]

        quiet.refresh = spy  # type: ignore[method-assign]
        assert quiet.set("a", lambda: "first", layout=False)
        assert not quiet.set("a", lambda: "again")  # same key: nothing at all
        assert quiet.set("b", lambda: "second")
        assert calls == [False, True]
        await pilot.pause()
        assert "second" in str(quiet.render())


def _spy(widget: Widget) -> list[bool]:
    """Record each refresh of ``widget`` as its ``layout`` flag."""
    calls: list[bool] = []
    original = widget.refresh

    def spy(*args: object, layout: bool = False, **kwargs: object) -> Widget:
        calls.append(layout)
        return original(*args, layout=layout, **kwargs)  # type: ignore[arg-type]

    widget.refresh = spy  # type: ignore[method-assign]
    return calls


async def test_panels_told_the_same_state_each_second_do_not_repaint() -> None:
    from datetime import timedelta

    from test_ui_helpers import T0, loading_boot, ready_boot

    from kvtui.hosts.backend import ConnState, ConnStatus
    from kvtui.ui.widgets.boot import PhaseTimeline
    from kvtui.ui.widgets.host import FleetRow, FleetSummary, HostBar, HostInfo

    bar = HostBar(HostInfo("gpu-a", "ssh", "root@gpu-a", "unit sglang"))
    timeline = PhaseTimeline()
    fleet = FleetSummary([f"gpu-{i}" for i in range(4)])
    async with Harness(bar, timeline, fleet).run_test(size=(140, 30)) as pilot:
        up = ConnStatus(ConnState.CONNECTED)
        boot = ready_boot()
        bar.show(up, boot, 60.0, 1)
        timeline.show(boot, T0 + timedelta(minutes=10))
        await pilot.pause()
        bar_calls, timeline_calls, fleet_calls = _spy(bar), _spy(timeline), _spy(fleet)
        for _ in range(3):  # the once-a-second tick with nothing new to show
            bar.show(up, boot, 60.0, 1)
            timeline.show(boot, T0 + timedelta(minutes=10))
        assert bar_calls == []
        assert timeline_calls == []
        bar.show(ConnStatus(ConnState.RECONNECTING, retry_in=2.0), boot, 60.0, 1)  # a change: repainted
        timeline.show(loading_boot(), T0 + timedelta(minutes=10))
        assert bar_calls == [False]
        assert len(timeline_calls) == 1
        # a fleet row's new state: a repaint of the summary, never a layout pass of the screen
        fleet.update_row(FleetRow("gpu-2", up, boot, 61.0))
        fleet.update_row(FleetRow("gpu-2", up, boot, 61.0))
        assert fleet_calls == [False]
        await pilot.pause()
        assert "gpu-2" in str(fleet.render())
