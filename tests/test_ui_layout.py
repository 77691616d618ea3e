"""Every terminal size during an incident (issue 22 #13, #14): the real console on demo hosts,
driven with Pilot at 120x36 and 80x24, read back from widget regions and the rendered screen.

The incident is the issue's: two hosts; on the first, an apply of an OOM-risk fraction (forced)
whose boot dies in graph capture and is rolled back — the previous boot's failure banner and the
change's banner are up while the rolled-back boot loads its weights."""

from __future__ import annotations

import re
from typing import Any

from test_ui_helpers import FakeClock, demo_app, plain, run_clock, screen_text, start_demo, wait_for
from textual.widgets._footer import FooterKey

from kvtui.boot import BootStatus
from kvtui.ui.app import KvtuiApp
from kvtui.ui.changes.action import ActionBanner
from kvtui.ui.host_pane import HostPane
from kvtui.ui.perf import KeysFooter
from kvtui.ui.screens import ApplyScreen, DialogBody
from kvtui.ui.widgets.boot import FailureBanner, PhaseTimeline
from kvtui.ui.widgets.host import FleetSummary, ZoomHeader

SPEED = 40.0


def _pane(app: KvtuiApp) -> HostPane:
    pane = app.main_screen.active_pane
    assert pane is not None
    return pane


async def _ready(pilot: Any, app: KvtuiApp, clock: FakeClock) -> HostPane:
    pane = _pane(app)
    await run_clock(pilot, app, clock, until=lambda: pane.boot is not None and pane.boot.status is BootStatus.READY,
                    limit=60)
    await wait_for(pilot, lambda: pane.calculator.result is not None)
    return pane


async def _incident(pilot: Any, app: KvtuiApp, clock: FakeClock) -> HostPane:
    """The forced apply of 0.99 on demo-a: its boot fails in graph capture, the rollback's boot
    starts (the previous boot failed; the change is still running)."""
    pane = await _ready(pilot, app, clock)
    await pilot.press("c", *"0.99", "enter", "escape")
    await wait_for(pilot, lambda: pane.calculator.result is not None
                   and pane.calculator.result["edits"] == {"mem_fraction_static": 0.99})
    await pilot.press("a")
    await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen))
    await pilot.press("F", "y")

    def rolling_back() -> bool:
        boots = pane.boots
        return (len(boots) >= 3 and boots[-2].status is BootStatus.FAILED and pane.boot is boots[-1]
                and boots[-1].status is BootStatus.STARTING and bool(boots[-1].phases)
                and (boots[-1].phases[-1].progress_done or 0) > 0)

    await run_clock(pilot, app, clock, until=rolling_back, step=0.25, limit=120)
    await wait_for(pilot, lambda: pane.busy is not None and pane.action_banner.shown)
    app.clear_notifications()
    await pilot.pause()
    return pane


def _half(pane: HostPane) -> bool:
    return pane.log_view.region.height * 2 >= pane.region.height


async def test_an_incident_at_120x36_and_80x24_keeps_the_log_half_the_pane() -> None:
    clock = FakeClock()
    start_demo("demo-a", clock, SPEED)
    start_demo("demo-b", clock, SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED, hosts=("demo-a", "demo-b"))
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await _incident(pilot, app, clock)
        failure, change = pane.query_one(FailureBanner), pane.query_one(ActionBanner)
        fleet = app.main_screen.query_one(FleetSummary)
        await wait_for(pilot, lambda: failure.region.height == 1 and change.region.height == 1)
        # each banner is one line: its most important fact, and the key that shows the rest
        text = plain(failure)
        # the failure, where, and the fraction it died at
        assert text.startswith("✖ PREVIOUS BOOT FAILED: out of memory in CUDA-graph capture at 0.99"), text
        assert text.rstrip().endswith("b: details")
        assert plain(change).startswith("⟳ apply on demo-a")
        assert fleet.region.height == 1  # the hosts on one line (the tabs under it are gone)
        assert "demo-b ✔ ready" in plain(fleet)
        assert "demo-a  demo-b" not in screen_text(app)
        # the log keeps at least half the pane (it had 5 lines)
        assert _half(pane), (pane.log_view.region, pane.region)
        # the shard counter is whole beside the phase's ETA ("0:01 / ~0:06 ━━━ 7…" was cut)
        row = next(r for r in plain(pane.query_one(PhaseTimeline)).splitlines() if "load weights" in r)
        assert re.search(r"\d+/64", row), row
        assert "…" not in row, row

        # b: every banner in full (the message, the hint, the change's steps, a line per host)
        await pilot.press("b")
        await wait_for(pilot, lambda: failure.region.height >= 4 and fleet.region.height == 2)
        assert "Hint:" in plain(failure)
        assert change.region.height >= 2
        await pilot.press("b")
        await wait_for(pilot, lambda: failure.region.height == 1 and fleet.region.height == 1)
        assert _half(pane)

        # z: the log fills the screen under the host's header (which host, its boot's state)
        pane.log_view.focus()
        await pilot.press("z")
        header = app.main_screen.query_one(ZoomHeader)
        await wait_for(pilot, lambda: header.region.height == 1 and app.main_screen.maximized is not None)
        top = screen_text(app).splitlines()[0]
        assert top.lstrip().startswith("demo-a"), top
        assert "load weights" in top, top
        assert pane.log_view.region.y > header.region.y
        # it follows the boot (the screen's 1 s tick mirrors the pane's header)
        await run_clock(pilot, app, clock, seconds=2.0, step=0.5)
        await wait_for(pilot, lambda: screen_text(app).splitlines()[0] != top)
        assert screen_text(app).splitlines()[0].lstrip().startswith("demo-a")
        await pilot.press("z")
        await wait_for(pilot, lambda: app.main_screen.maximized is None and header.region.height == 0)

        # 80x24: the same
        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: app.size == (80, 24) and pane.region.width == 80)
        await pilot.pause()
        assert failure.region.height == 1
        assert change.region.height == 1
        assert fleet.region.height == 1
        assert _half(pane), (pane.log_view.region, pane.region)


def _footer_words(app: KvtuiApp) -> list[tuple[str, str]]:
    footer = app.screen.query_one(KeysFooter)
    return [(k.key_display, k.description) for k in footer.query(FooterKey) if k.description]


async def test_the_footer_is_never_cut_mid_word_and_p_twice_is_the_same_layout() -> None:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = await _ready(pilot, app, clock)
        await pilot.pause()
        panels = ("#gpu-panel", "#calc-panel", "#log-panel", "#boot-panel")

        def layout() -> list[Any]:
            return [pane.query_one(p).region for p in panels] + [pane.gpu_plot.display]

        before = layout()
        await pilot.press("p")
        await pilot.pause()
        await pilot.press("p")
        await wait_for(pilot, lambda: layout() == before)  # a plot appeared and took the calculator's rows

        for size in ((120, 36), (80, 24)):
            await pilot.resize_terminal(*size)
            await wait_for(pilot, lambda size=size: app.size == size)  # type: ignore[misc]
            await pilot.pause()
            await pilot.pause()
            line = screen_text(app).splitlines()[-1]
            words = _footer_words(app)
            assert words
            for key, description in words:  # every key shown is whole ("x Expla▏" at 80)
                assert f"{key} {description}" in line, (key, description, line)
            assert "palette" in line


async def test_80x24_zooms_fit_between_the_header_and_the_footer() -> None:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await _ready(pilot, app, clock)
        footer = app.main_screen.query_one(KeysFooter)
        gpu = pane.query_one("#gpu-panel")
        # tab onto the GPU panel (opened zoomed at 80 columns): no hatched rows around it
        await pilot.press("tab", "tab")
        await wait_for(pilot, lambda: app.main_screen.maximized is gpu)
        await pilot.pause()
        assert "╱" not in screen_text(app)
        assert gpu.region.bottom <= footer.region.y
        assert gpu.region.y == 1  # under the host's header
        # p: the process table too — the panel scrolls inside the screen, the footer is whole
        await pilot.press("p")
        await wait_for(pilot, lambda: pane.query_one("ProcessTable").has_class("-shown"))
        await pilot.pause()
        await pilot.pause()
        assert gpu.region.bottom <= footer.region.y
        assert screen_text(app).splitlines()[-1].startswith(" ? Help")
        assert "╱" not in screen_text(app)


async def test_the_apply_dialog_at_80x24_shows_the_whole_diff() -> None:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(12.0)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await _ready(pilot, app, clock)
        await pilot.press("c", *"0.88", "enter", "escape")
        await wait_for(pilot, lambda: pane.calculator.result is not None
                       and pane.calculator.result["edits"] == {"mem_fraction_static": 0.88})
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen))
        dialog = app.screen
        diff = dialog.query_one("#apply-diff")
        body = dialog.query_one(DialogBody)
        await wait_for(pilot, lambda: diff.region.height > 0)
        await pilot.pause()
        lines = plain(diff).splitlines()
        assert len(lines) >= 5
        assert diff.region.height == len(lines)  # every row of it on screen, not 2
        visible = body.region.intersection(diff.region)
        assert visible == diff.region, (body.region, diff.region)
        text = screen_text(app)
        assert "+    --mem-fraction-static 0.88" in text
        assert "-    --mem-fraction-static 0.85" in text
        # the rest (the file, what runs, the prediction) scrolls, with its scrollbar
        assert body.max_scroll_y > 0
        assert body.show_vertical_scrollbar


async def test_a_collapsed_banner_names_the_key_as_remapped() -> None:
    """[keymap] banners = "ctrl+b": the one-line banner says so (not "b: details")."""
    from types import SimpleNamespace

    from test_ui_helpers import Harness, failed_boot

    banner = FailureBanner()
    app = Harness(banner)
    app.config = SimpleNamespace(keymap={"banners": "ctrl+b"})  # type: ignore[attr-defined]
    async with app.run_test(size=(100, 6)) as pilot:
        banner.set_expanded(False)
        banner.show(failed_boot())
        await pilot.pause()
        text = plain(banner)
        assert text.startswith("✖ BOOT FAILED: out of memory in CUDA-graph capture")
        assert text.rstrip().endswith("ctrl+b: details")
        assert banner.region.height == 1


def test_a_banner_that_fits_beside_its_key_alone_keeps_its_end() -> None:
    """At 80 columns the failure's one line lost its fraction to the hint ('… at 0…  b: details'):
    a head that fits beside the key alone keeps its end, and names the key."""
    from textual.content import Content

    from kvtui.ui.widgets.banner import one_line

    head = Content("✖ PREVIOUS BOOT FAILED: out of memory in CUDA-graph capture at 0.99")
    full = Content("\n").join([head, Content("the message"), Content("Hint: lower it")])
    shown = one_line(full, 74, "b: details", head, short_hint="b").plain
    assert shown.startswith(head.plain), shown
    assert shown.rstrip().endswith("b"), shown
    assert len(shown) <= 74
    roomy = one_line(full, 120, "b: details", head, short_hint="b").plain
    assert roomy.rstrip().endswith("b: details"), roomy
    narrow = one_line(full, 40, "b: details", head, short_hint="b").plain  # too narrow for all: cut, full hint
    assert "…" in narrow, narrow
    assert narrow.rstrip().endswith("b: details"), narrow


def test_every_failure_has_a_short_label_a_person_reads() -> None:
    """The header and the fleet line said the failure's code ('✖ failed: oom_graph_capture') where the
    banner said 'out of memory in CUDA-graph capture': every kind has words of its own that fit a host
    row's 28-cell state column with '✖ failed: '."""
    from kvtui.engines.events import FailureKind
    from kvtui.ui.formatting import failure_short

    for kind in FailureKind:
        said = failure_short(kind, None)
        assert said != kind.value or " " not in kind.value, kind
        assert "_" not in said, said
        assert len(f"✖ failed: {said}") <= 27, said
