"""The GPU panel shows each GPU's temperature and power draw / limit where the column has room,
and a throttle reason (the power cap, a thermal slowdown) in the warning colour; readings without
them (an older host, a fake) show what they always did."""

from __future__ import annotations

from dataclasses import replace

from test_ui_helpers import FakeClock, Harness, demo_app, gpu_samples, plain, settle, start_demo, wait_for
from textual.containers import Vertical

from kvtui.ui.gpu.widgets import GpuBars, GpuHeader, GpuNote, GpuSummary
from kvtui.ui.host_pane import HostPane

SPEED = 40.0


async def test_the_demo_host_panel_shows_temperature_and_power() -> None:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(14.0)  # ready and serving: the GPUs are warm and drawing power
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        pane = app.main_screen.query_one(HostPane)
        bars = pane.query_one(GpuBars)
        await wait_for(pilot, lambda: bool(bars.samples))
        rows = plain(bars).splitlines()
        assert all("°" in row for row in rows), rows
        # the power draw over the simulated card's 600 W limit
        assert all(row.rstrip().endswith("/600W") for row in rows), rows
        header = plain(pane.query_one(GpuHeader))
        assert "temp" in header
        assert "power" in header


async def test_narrow_rows_keep_the_temperature_and_a_throttle_warns() -> None:
    samples = [replace(s, temperature_c=70.0 + s.index, power_w=412.3, power_limit_w=700.0)
               for s in gpu_samples(80.0, n=4)]
    samples[2] = replace(samples[2], throttle="power cap")
    wide, narrow, note = GpuBars(), GpuBars(), GpuNote()
    summary = GpuSummary()
    app = Harness(Vertical(GpuHeader(), wide, note, classes="w"), Vertical(narrow, classes="n"), summary)
    async with app.run_test(size=(60, 20)) as pilot:
        wide.styles.width = 50
        narrow.styles.width = 33
        wide.show(samples)
        narrow.show(samples)
        note.show(samples, None)
        summary.display = True
        summary.show(samples)
        await pilot.pause()
        rows = plain(wide).splitlines()
        assert rows[0].endswith("70° 410/700W"), rows  # power to 10 W: its noise repaints nothing
        assert "72°" in rows[2]
        # the throttled GPU's temperature is in the warning colour, the others' muted
        styled = wide.render()
        spans = [str(sp.style) for sp in styled.spans if styled.plain[sp.start:sp.end].strip() == "72°"]
        assert spans, styled.spans
        assert "warning" in spans[0], spans
        # a narrower column keeps the temperature, not the power
        narrow_rows = plain(narrow).splitlines()
        assert "70°" in narrow_rows[0], narrow_rows
        assert "W" not in narrow_rows[0], narrow_rows
        # the note says which GPU is held back and why; the one-line summary too
        assert note.has_class("-shown")
        assert plain(note) == "⚠ power cap: GPU 2"
        assert "max · ⚠ power cap · util" in plain(summary)
        # readings without the new fields (an older host): no columns, no note
        old = gpu_samples(80.0, n=4)
        wide.show(old)
        note.show(old, None)
        await pilot.pause()
        assert "°" not in plain(wide)
        assert "W" not in plain(wide)
        assert not note.has_class("-shown")
