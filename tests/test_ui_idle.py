"""An idle console repaints only what a user can see change (issue 7, budget 5: < 3 % of a core).

The GPU plot of an hour-long flat curve is not rebuilt every second, the GPU bars ignore readings
whose figures are the same; a visible change still shows at the next tick."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from test_ui_helpers import Harness, foreign_process, gpu_samples, ready_boot
from textual.widget import Widget

from kvtui.engines.events import LogRecord, Phase
from kvtui.hosts.backend import LogStart, aclose_iter
from kvtui.sim.backend import DemoBackend
from kvtui.ui.gpu.widgets import GpuBars, GpuHistoryPlot, PhaseBand
from kvtui.ui.widgets.boot import BootFigures

HOUR = 3600.0


def _waiting(plot: GpuHistoryPlot) -> bool:
    """Data changed since the plot last asked for a repaint."""
    return plot._dirty


def _flat_hour(plot: GpuHistoryPlot, used: float = 80.0) -> float:
    """An hour of 1 Hz readings at ``used`` GiB from a boot that started at 0; returns the last ts."""
    for t in range(int(HOUR)):
        plot.add(gpu_samples(used, n=2, ts=float(t)))
    plot.set_bands([PhaseBand(0.0, Phase.LOAD_WEIGHTS), PhaseBand(60.0, Phase.READY)], 0.0)
    return HOUR - 1


async def test_flat_hour_long_curve_repaints_about_once_per_plot_cell_not_every_second() -> None:
    plot = GpuHistoryPlot()
    async with Harness(plot).run_test(size=(50, 14)) as pilot:
        await pilot.pause()
        last = _flat_hour(plot)
        plot._tick()
        await pilot.pause()
        builds = plot.redraws
        assert builds == 1
        ticks_redrawn = 0
        for s in range(1, 121):  # two minutes of 1 Hz readings, same memory
            plot.add(gpu_samples(80.0, n=2, ts=last + s))
            before = _waiting(plot)
            plot._tick()
            ticks_redrawn += before and not _waiting(plot)
            await pilot.pause()
        # 50 columns -> 88 x cells over ~3720 s: one cell is ~42 s, so 2-3 repaints, never 120
        assert 2 <= ticks_redrawn <= 3
        assert plot.redraws == builds + ticks_redrawn
        # a direct call still paints any change at once (what the snapshot tests use)
        plot.add(gpu_samples(80.0, n=2, ts=last + 121))
        assert plot.redraw_if_needed() is True


async def test_a_memory_change_or_new_phase_repaints_at_the_next_tick() -> None:
    plot = GpuHistoryPlot()
    async with Harness(plot).run_test(size=(50, 14)) as pilot:
        await pilot.pause()
        last = _flat_hour(plot)
        plot._tick()
        await pilot.pause()
        plot.add(gpu_samples(80.0, n=2, ts=last + 1))
        plot._tick()
        assert _waiting(plot)  # same memory, a second later: waits
        plot.add(gpu_samples(86.0, n=2, ts=last + 2))  # +6 GiB: the curve moves by rows
        plot._tick()
        assert not _waiting(plot)
        await pilot.pause()
        plot.add(gpu_samples(86.0, n=2, ts=last + 3))
        plot._tick()
        assert _waiting(plot)
        plot.set_bands([*plot.bands, PhaseBand(last + 3, None)], 0.0)  # the boot failed: a band
        plot._tick()
        assert not _waiting(plot)


async def test_a_young_boot_repaints_every_second() -> None:
    plot = GpuHistoryPlot()
    async with Harness(plot).run_test(size=(50, 14)) as pilot:
        await pilot.pause()
        plot.set_bands([PhaseBand(0.0, Phase.LAUNCH)], 0.0)
        redrawn = 0
        for t in range(30):  # 30 s of a boot whose memory does not move yet: the axis does
            plot.add(gpu_samples(2.0, n=2, ts=float(t)))
            before = _waiting(plot)
            plot._tick()
            redrawn += before and not _waiting(plot)
            await pilot.pause()
        assert redrawn == 30


async def test_gpu_bars_repaint_only_when_a_shown_figure_changes() -> None:
    bars = GpuBars()
    async with Harness(bars).run_test(size=(40, 12)) as pilot:
        samples = [replace(s, temperature_c=60.0, power_w=298.0) for s in gpu_samples(80.0, n=4, ts=1000.0)]
        bars.show(samples)
        await pilot.pause()
        shown = bars.repaints
        # a second later: new time, a few watts more (the row shows 10 W steps), the same memory
        # and utilisation
        later = [replace(s, ts=1001.0, power_w=301.5) for s in samples]
        bars.show(later)
        assert bars.repaints == shown
        assert bars.samples[0].ts == 1001.0  # the data is kept all the same
        busier = [replace(s, util=55.0) if s.index == 2 else s for s in later]
        bars.show(busier)
        assert bars.repaints == shown + 1
        await pilot.pause()
        assert "55%" in str(bars.render()).splitlines()[2]
        more = [replace(s, used_mib=s.used_mib + 1.0) for s in busier]
        bars.show(more)
        assert bars.repaints == shown + 2


# ---- the demo host's log follower while its server idles ----------------------------------------


def _ts(record: LogRecord) -> float:
    assert record.ts is not None
    return record.ts.timestamp()


async def _next_batch(it: AsyncIterator[list[LogRecord]], timeout: float = 30.0) -> list[LogRecord]:
    return await asyncio.wait_for(anext(it), timeout)  # a hang guard


async def test_demo_follower_polls_an_idle_server_with_one_stat_until_a_line_is_due(tmp_path: Path) -> None:
    clock = [1_780_000_000.0]
    state = tmp_path / "demo" / "demo"
    b = DemoBackend("demo", clock=lambda: clock[0], state_dir=state, poll_interval=0.002)
    b.current_boot()  # the server starts at the clock's now
    clock[0] += 3600  # an hour later it is ready and serving: a line every few seconds
    it = b.follow_log(LogStart.CURRENT_BOOT)
    try:
        backlog = await _next_batch(it)
        last = _ts(backlog[-1])
        task = asyncio.ensure_future(anext(it))
        # ten idle polls (~20 ms unloaded; counted, not given a fixed 0.1 s a loaded machine can outlast)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while b.idle_polls < 10 and not task.done() and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        assert not task.done()  # no line is due
        assert b.idle_polls >= 10  # polls, each one stat, not a locked re-read of the state
        # the clock reaches the next serving line: it comes at the next poll
        for _ in range(120):
            if task.done():
                break
            clock[0] += 0.5
            await asyncio.sleep(0.01)
        batch = await asyncio.wait_for(task, 30)
        assert batch
        assert _ts(batch[0]) > last
        # another process restarts the server between two lines: seen at once, not at the next line
        task = asyncio.ensure_future(anext(it))
        await asyncio.sleep(0.02)
        assert not task.done()
        other = DemoBackend("demo", clock=lambda: clock[0], state_dir=state)
        other.restart()
        batch = await asyncio.wait_for(task, 30)
        assert batch[0].text == "Stopping SGLang server (Kimi K2.6, TP8)..."
    finally:
        await b.close()
        await aclose_iter(it)


async def test_boot_figures_repaint_only_when_a_figure_changes() -> None:
    figures = BootFigures()
    async with Harness(figures).run_test(size=(40, 12)) as pilot:
        boot = ready_boot()
        figures.show(boot)
        await pilot.pause()
        shown = figures.repaints
        figures.show(ready_boot())  # the same figures, told again with the next serving line
        assert figures.repaints == shown
        other = ready_boot()
        other.metrics.max_total_num_tokens = 123_456
        figures.show(other)
        assert figures.repaints == shown + 1
        await pilot.pause()
        assert "123,456" in str(figures.render())


async def test_gpu_bar_rows_are_the_strips_the_text_renders_to_and_are_kept() -> None:
    bars = GpuBars()
    async with Harness(bars).run_test(size=(44, 12)) as pilot:
        base = gpu_samples(80.0, n=6, ts=1000.0)
        cases = [
            base,
            [replace(s, util=None) if s.index == 1 else s for s in base],
            [replace(s, stale=True) if s.index == 2 else s for s in base],
            [replace(s, used_mib=s.total_mib * 0.99) if s.index == 3 else s for s in base],  # >= 97 %: warning
        ]
        foreign = [foreign_process(4, 6.0)]
        for samples in cases:
            bars.show(samples, foreign)
            await pilot.pause()
            for y in range(len(samples)):
                kept = bars.render_line(y)
                bars._dirty_regions.add(bars.size.region)  # the plain path: render() as text
                plain = Widget.render_line(bars, y)
                assert list(kept) == list(plain), (y, samples[y])
        # a reading that shows what an earlier one showed reuses its strip
        rendered = len(bars._strips)
        bars.show(cases[0], foreign)
        await pilot.pause()
        assert len(bars._strips) == rendered
        assert bars.render_line(0) is bars.render_line(0)
