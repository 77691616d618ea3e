"""The console as a newcomer meets it (issue 10): every defect found, each with the check that
would have caught it. The real app on real demo hosts, an injected clock, keys as a user types
them — one at a time (``pilot.press``) or in one burst (``burst``: a paste, a fast typist)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ui_helpers import (
    T_START,
    FakeClock,
    Harness,
    burst,
    demo_app,
    gpu_samples,
    log_lines,
    ready_boot,
    run_clock,
    screen_text,
    start_demo,
    wait_for,
)
from textual.containers import VerticalScroll

from kvtui.boot import Boot, BootStatus
from kvtui.commands.replay import analyse, read_chunks
from kvtui.engines.events import Phase
from kvtui.ui.app import KvtuiApp, MainScreen
from kvtui.ui.calc.panel import CalculatorPanel, edit_window, elide
from kvtui.ui.gpu.widgets import GpuHistoryPlot, PhaseBand, short_gpu_name
from kvtui.ui.host_pane import HostPane
from kvtui.ui.log.panel import FindBar, LogPanel, LogStatus
from kvtui.ui.log.view import LogView
from kvtui.ui.screens import ConfirmScreen

SPEED = 40.0
READY_AFTER = 12.0


FIXTURES = Path(__file__).parent / "fixtures"


def journal_boot() -> Boot:
    """A real SGLang boot (Llama 70B, TP4, ready): the calculator calibrates on it."""
    name = "sglang-0.5.10-llama70b-tp4-ready.journal"
    with (FIXTURES / name).open("rb") as f:
        boots, _shape = analyse(read_chunks(f, name))
    return boots[-1]


def ready_clock(*hosts: str) -> FakeClock:
    clock = FakeClock()
    for name in hosts or ("demo",):
        start_demo(name, clock, SPEED)
    clock.advance(READY_AFTER)
    return clock


def pane_of(app: KvtuiApp) -> HostPane:
    pane = app.main_screen.active_pane
    assert pane is not None
    return pane


async def ready_app(pilot: Any, app: KvtuiApp, clock: FakeClock) -> HostPane:
    pane = pane_of(app)
    await run_clock(pilot, app, clock, until=lambda: pane.boot is not None and pane.boot.status is BootStatus.READY,
                    limit=60)
    await wait_for(pilot, lambda: pane.calculator.result is not None)
    return pane


# --------------------------------------------------------------------------------------------
# 1. a figure is shown whole or visibly elided, never silently cut
# --------------------------------------------------------------------------------------------


def test_elide_and_the_edit_window_never_cut_silently() -> None:
    assert elide("200000", 6) == "200000"
    assert elide("200000", 5) == "2000…"
    assert elide("fp8_e4m3", 8) == "fp8_e4m3"
    # the editor's window follows the cursor; a cut side shows …
    assert edit_window("200000", 6, 8) == ("200000", 0, 6)
    text, start, col = edit_window("1234567890", 10, 6)
    assert text.startswith("…")
    assert col == 5
    assert start > 0
    text, start, col = edit_window("1234567890", 0, 6)
    assert text.endswith("…")
    assert col == 0
    assert start == 0
    text, start, col = edit_window("1234567890", 5, 6)
    assert "…" in text
    assert 0 < col < 6


@pytest.mark.parametrize("width", [24, 30, 36, 44])
async def test_calculator_shows_each_value_whole_or_elided_at_every_width(width: int) -> None:
    """A panel with a scrollbar (too short for its rows) at each width: ``200000`` and ``fp8_e4m3``
    whole, or cut with a visible ``…`` — never ``20000``."""
    boot = journal_boot()
    boot.flags.update({"context_length": 200000, "kv_cache_dtype": "fp8_e4m3"})
    calc = CalculatorPanel()
    scroll = VerticalScroll(calc)
    scroll.styles.width = width
    scroll.styles.height = 12  # shorter than the panel: a scrollbar
    async with Harness(scroll).run_test(size=(80, 24)) as pilot:
        calc.set_boot(boot, [boot])
        await pilot.pause()
        assert calc.size.width < width  # the scrollbar took a column
        lines = calc.plain_lines()
        row = next(line for line in lines if line.startswith("context-"))
        assert "200000" in row or (row.rstrip().endswith("…") and "20000" not in row.replace("…", ""))
        dtype = next(line for line in lines if line.startswith("kv-cache"))
        assert "fp8_e4m3" in dtype or dtype.rstrip().endswith("…")
        if width >= 30:  # room for the value: whole
            assert "200000" in row
            assert "fp8_e4m3" in dtype
        for line in lines:  # nothing wider than the panel: nothing left for the terminal to cut
            assert len(line) <= calc.size.width


async def test_calculator_result_values_are_whole_and_labels_give_way() -> None:
    boot = journal_boot()
    calc = CalculatorPanel()
    calc.styles.width = 24
    async with Harness(calc).run_test(size=(80, 40)) as pilot:
        calc.set_boot(boot, [boot])
        await pilot.pause()
        assert calc.result is not None
        tokens = f"{calc.result['predicted']['max_total_num_tokens']:,}"
        lines = calc.plain_lines()
        assert any(line.rstrip().endswith(tokens) for line in lines)  # KV tokens, whole
        assert all(len(line) <= calc.size.width for line in lines)


# --------------------------------------------------------------------------------------------
# 3. keys typed in a burst all land where they were meant to
# --------------------------------------------------------------------------------------------


async def test_a_burst_into_the_calculator_lands_in_the_field() -> None:
    """``c``, ctrl+a, ctrl+k, ``0.90``, Enter in one burst (a paste, a fast typist): the fraction
    is 0.90 — it used to stay 0.85 (the keys went to the log) or end "unset"."""
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        await burst(pilot, "c", "ctrl+a", "ctrl+k", "0", ".", "9", "0", "enter")
        assert calc.fields[0].value == "0.90"
        await wait_for(pilot, lambda: calc.result is not None and calc.result["edits"] == {"mem_fraction_static": 0.9})
        # and a burst that leaves the field: what follows Esc is a key of the console again
        await burst(pilot, "escape", "t")
        assert app.focused is pane.log_view
        assert pane.log_view.timestamps
        assert calc.fields[0].value == "0.90"


async def test_an_invalid_value_is_drawn_as_typed_and_flagged() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        await pilot.press("c", *"1.5", "enter")
        assert calc.error is not None
        assert calc.fields[0].invalid
        row = next(line for line in calc.plain_lines() if line.startswith("mem-fraction-static"))
        assert "1.5" in row  # not an empty field
        assert "1.5" in screen_text(app)


async def test_the_footer_shows_the_editing_keys_while_a_flag_is_edited() -> None:
    """While a field has the keys, the footer offers what works there (Enter, Esc) and not the
    one-letter keys that are typed into it (``x``, ``/``)."""
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await ready_app(pilot, app, clock)
        calc = pane.calculator
        shown = {b.binding.description for b in app.screen.active_bindings.values() if b.binding.show}
        assert {"Explain", "Search"} <= shown
        await pilot.press("c")
        await pilot.pause()
        active = app.screen.active_bindings
        shown = {b.binding.description for b in active.values() if b.binding.show}
        assert "Explain" not in shown
        assert "Search" not in shown
        assert "Quit" not in shown
        assert {"Use value", "Leave field"} <= shown
        footer = screen_text(app).splitlines()[-1]
        assert "Use value" in footer
        assert "Explain" not in footer
        # x and / are not run (nor typed: the fraction takes a number, or unset)
        await pilot.press("ctrl+a", "ctrl+k", "x", "slash")
        assert calc.fields[0].value == ""
        assert isinstance(app.screen, MainScreen)  # no explain dialog
        assert not pane.log_panel.query_one(FindBar).is_open
        await pilot.press("escape")
        for _ in range(250):  # the footer is redrawn on the next refresh after the focus moved
            footer = screen_text(app).splitlines()[-1]
            if "Explain" in footer:
                break
            await pilot.pause(0.02)
        assert "Explain" in footer


# --------------------------------------------------------------------------------------------
# 2. what is typed into the find bar is seen; the footer names what Enter does
# --------------------------------------------------------------------------------------------


async def test_the_find_bar_shows_what_is_typed_over_the_status_line() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await ready_app(pilot, app, clock)
        await burst(pilot, "slash", *"Load weight")
        bar = pane.log_panel.query_one(FindBar)
        assert bar.is_open
        assert not pane.log_panel.query_one(LogStatus).display or not bar.region.overlaps(
            pane.log_panel.query_one(LogStatus).region)
        text = screen_text(app)
        assert "/ Load weight" in text or "/Load weight" in text.replace(" ", "")
        footer = text.splitlines()[-1]
        assert "Search" in footer
        assert "Filter" not in footer
        await pilot.press("escape")
        await burst(pilot, "ampersand", *"TP3")
        text = screen_text(app)
        assert "& TP3" in text or "&TP3" in text.replace(" ", "")
        footer = text.splitlines()[-1]
        assert "Filter" in footer
        assert "Search" not in footer


async def test_a_search_typed_in_a_burst_finds_and_n_goes_on() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await ready_app(pilot, app, clock)
        view: LogView = pane.log_view
        await burst(pilot, "slash", *"weight", "enter")
        assert view.search_query is not None
        assert view.search_query.text == "weight"
        await wait_for(pilot, lambda: view.cursor is not None)
        first = view.cursor
        assert first is not None
        await burst(pilot, "n")  # on in the search's direction: newer
        await wait_for(pilot, lambda: view.cursor is not None and view.cursor > first)
        assert app.focused is view


# --------------------------------------------------------------------------------------------
# 15. small text bugs
# --------------------------------------------------------------------------------------------


async def test_the_restart_question_names_the_boot_state_once() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        await ready_app(pilot, app, clock)
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)
        assert "the current boot is ready" in app.screen.body
        assert "ready in ready" not in app.screen.body


async def test_r_follows_the_new_boot_to_its_outcome_in_the_banner() -> None:
    """A host's ``R`` is a restart of one node (``service.execute_nodes`` of a restart plan): like ``a`` it follows the
    new boot and ends with its outcome in the action banner (it used to stop at "restarted")."""
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await ready_app(pilot, app, clock)
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)
        assert "follow the new boot until it is ready or failed" in app.screen.body
        await pilot.press("y")
        await wait_for(pilot, lambda: pane.busy == "a restart" or pane.changes.last_code is not None)
        await run_clock(pilot, app, clock, until=lambda: pane.busy is None, step=0.5, limit=120)
        assert pane.changes.last_code == 0, pane.action_banner.detail
        assert pane.action_banner.headline == "demo: restarted; the new boot is ready"
        assert pane.boot_index == 1


async def test_an_error_jump_replaces_the_last_miss_in_the_status_line() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(120))  # errors at 50 (and none after 100)
        await pilot.pause()
        assert not view.next_error(True)  # from the bottom: no next error
        assert view.message == "no next error in view"
        assert view.next_error(False)  # E: the error at seq 50
        assert view.cursor == 50
        assert "no next error" not in view.message
        assert "51" in view.message  # the line it went to


async def test_a_narrow_status_line_keeps_what_happened() -> None:
    """``no match`` is what the status line must show, not the search text it is about."""
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(44, 12)) as pilot:
        view = panel.view
        view.append(log_lines(20))
        await pilot.pause()
        view.set_search("Load weight begin and then some more words")
        view.finder.find(forward=True)
        await pilot.pause()
        status = panel.query_one(LogStatus)
        shown = screen_text(pilot.app)
        assert "no match for" in view.message
        assert "no match for" in shown
        assert status.size.width - 2 < len(view.message) + 20  # it did not fit whole: the key words came first


async def test_wrapped_lines_keep_their_left_padding() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(40, 20)) as pilot:
        view = panel.view
        # long enough to wrap with timestamps too (the engine's own stamp is then taken off the text)
        view.append([dataclasses.replace(ln, text=ln.text + ", decode batch #token: 3456") for ln in log_lines(3)])
        view.wrap = True
        await pilot.pause()
        view.scroll_to(y=0, animate=False, immediate=True)
        rows = [view.render_line(y).text for y in range(view.virtual_size.height)]
        assert rows[0].startswith(" [2026")  # the gutter
        continuation = rows[1]  # past the gutter, two cells right of the line's text (issue 22 #9)
        assert continuation.startswith("   ")
        assert not continuation.startswith("    ")
        assert continuation.strip()
        # timestamps widen the indent past the time column
        view.timestamps = True
        await pilot.pause()
        view.scroll_to(y=0, animate=False, immediate=True)
        rows = [view.render_line(y).text for y in range(view.virtual_size.height)]
        assert rows[1].startswith(" " * 16)
        assert rows[1][16] != " "
        # every line's text, unwrapped again, is whole
        joined = "".join(r[1:] if i == 0 else r[16:] for i, r in enumerate(rows[:3]))
        assert "scheduler tick 0" in joined.rstrip() or "scheduler tick" in joined


# --------------------------------------------------------------------------------------------
# 7. the GPU percentage is labelled; KV usage on a fixed 0-100 % scale
# --------------------------------------------------------------------------------------------


async def test_the_gpu_rows_say_which_figure_is_utilisation() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = await ready_app(pilot, app, clock)
        gpu = pane.query_one("#gpu-panel")
        rows = [line[gpu.region.x: gpu.region.right] for line in screen_text(app).splitlines()]
        head = next(i for i, line in enumerate(rows) if "util" in line)
        assert "used" in rows[head]
        assert "%" in rows[head + 1]  # the first GPU's row, under the heads


async def test_kv_usage_history_is_drawn_on_a_fixed_scale() -> None:
    """Ten per cent of the pool is a low bar, not a full one in the colour of a full pool."""
    from kvtui.ui.widgets.boot import KvUsage

    usage = KvUsage()
    async with Harness(usage).run_test(size=(40, 8)) as pilot:
        for t in range(20):  # rising to 10 %: the series' own maximum is 10 %
            usage.show(ready_boot(usage=0.005 * (t + 1)), float(t))
        await pilot.pause()
        spark = usage.region.y + 1  # under the gauge
        rows = screen_text(pilot.app).splitlines()[spark: spark + 2]
        assert len(rows) == 2
        assert not rows[0].strip()  # nothing in the upper half at 10 %
        assert rows[1].strip()  # a low bar in the lower one
        assert "█" not in rows[1]
        for t in range(20, 60):
            usage.show(ready_boot(usage=1.0), float(t))
        await pilot.pause()
        rows = screen_text(pilot.app).splitlines()[spark: spark + 2]
        assert "█" in rows[0]  # a full pool is full height


# --------------------------------------------------------------------------------------------
# 17. the plot's axes, the GPU name, themes, the palette
# --------------------------------------------------------------------------------------------


async def test_the_plot_axes_carry_units_and_one_clock_across_a_restart() -> None:
    plot = GpuHistoryPlot()
    async with Harness(plot).run_test(size=(50, 14)) as pilot:
        await pilot.pause()
        for t in range(400):
            plot.add(gpu_samples(5.0 + (t % 200) * 0.4, ts=T_START + t))
        # a restart 324 s in: the new boot's bands start there (the old one's stay)
        plot.set_bands([PhaseBand(T_START, Phase.LOAD_WEIGHTS), PhaseBand(T_START + 324, Phase.LAUNCH)],
                       T_START + 324)
        plot.redraw_if_needed()
        await pilot.pause()
        text = screen_text(pilot.app)
        assert "96G" in text
        assert "48G" in text
        assert "0G" in text  # a unit on every tick
        assert "-5m" not in text  # not a boot-relative axis running negative
        assert "03:06:40" in text  # the wall-clock time of the first reading (TZ=UTC)
        assert "03:13:19" in text  # and of the last


def test_gpu_names_keep_the_words_that_tell_gpus_apart() -> None:
    assert short_gpu_name("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "RTX PRO 6000 Blackwell"
    assert short_gpu_name("NVIDIA H100 80GB HBM3") == "H100 80GB HBM3"
    assert short_gpu_name("NVIDIA GeForce RTX 4090") == "RTX 4090"


@pytest.mark.parametrize("size", [(160, 48), (240, 64)])
async def test_the_gpu_name_is_not_cut(size: tuple[int, int]) -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=size) as pilot:
        pane = await ready_app(pilot, app, clock)
        await pilot.pause()
        subtitle = str(pane.query_one("#gpu-panel").border_subtitle)
        assert "RTX PRO 6000 Blackwell" in subtitle
        assert "…" not in subtitle
        assert subtitle in screen_text(app)  # on screen whole, not cut by the border


async def test_only_themes_that_draw_kvtui_correctly_are_offered() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        await pilot.pause()
        themes = set(app.available_themes)
        assert {"kvtui-dark", "kvtui-light", "kvtui-contrast"} <= themes
        assert "ansi-dark" not in themes
        assert "ansi-light" not in themes
        assert "nord" in themes  # a true-colour built-in draws the bars as kvtui's own do
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Keys" not in titles  # kvtui's "help" (?) lists every key; one list is enough
        assert "Quit" in titles


# --------------------------------------------------------------------------------------------
# 8. a host that cannot be reached does not look alive
# --------------------------------------------------------------------------------------------


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nobody listens on, every connection refused: bound (not listening) for
    the test, so no other process (a test worker's sshd, another run) can take it meanwhile."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


async def test_an_unreachable_ssh_host_says_so_in_every_panel(closed_port: int) -> None:
    """A real SSH backend to a loopback port nobody listens on: it keeps reconnecting. The
    panels used to say "● following" and "collecting GPU memory samples…"."""
    from kvtui.config import HostConfig
    from kvtui.hosts.backend import ConnState
    from kvtui.hosts.factory import make_backend
    from kvtui.ui.host_pane import HostSpec

    spec = HostSpec("gpu-a", HostConfig(ssh="kvtui@127.0.0.1", port=closed_port, unit="sglang"))
    app = KvtuiApp([spec], backend_factory=make_backend)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = pane_of(app)
        await wait_for(pilot, lambda: pane.status is not None and pane.status.state is ConnState.RECONNECTING,
                       timeout=20)
        pane.tick()
        await pilot.pause()
        for panel_id in ("#gpu-panel", "#boot-panel", "#log-panel", "#figures-panel", "#calc-panel"):
            panel = pane.query_one(panel_id)
            assert panel.has_class("-offline"), panel_id
            assert "reconnecting" in str(panel.border_subtitle), panel_id
        text = screen_text(app)
        assert "● following" not in text
        assert "collecting GPU memory samples" not in text
        assert "no GPU readings: ◌ not reached" in text
        assert "no log yet: ◌ not reached" in text
        status = pane.log_panel.query_one(LogStatus)
        status_line = text.splitlines()[status.region.y]
        assert "not reached" in status_line


# --------------------------------------------------------------------------------------------
# 16. every terminal size
# --------------------------------------------------------------------------------------------

SIZES = [(80, 24), (120, 36), (160, 48), (240, 64)]


@pytest.mark.parametrize("size", SIZES)
async def test_the_layout_gives_the_log_the_width_and_keeps_the_boot_state(size: tuple[int, int]) -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    width, _height = size
    async with app.run_test(size=size) as pilot:
        pane = await ready_app(pilot, app, clock)
        await pilot.pause()
        text = screen_text(app).splitlines()
        assert "✔ ready" in text[0]  # the header keeps the boot's state at every size
        # its number in the history (issue 22 #2), once the recorder has written the boot (a thread)
        await wait_for(pilot, lambda: "boot #1" in screen_text(app).splitlines()[0])
        log = pane.query_one("#log-panel")
        assert log.region.width >= {80: 78, 120: 78, 160: 110, 240: 180}[width]
        # the boot's phases are told in full lines, not 16 cells ("Loading safete…")
        boot = pane.query_one("#boot-panel")
        assert boot.region.width >= 44
        assert "launch" in "\n".join(text)
        # what is not laid out is one key away
        if width < 110:
            assert not pane.query_one("#side").display
            assert "× GPU" in "\n".join(text)  # the GPU summary line instead of the panel
        else:
            assert pane.query_one("#calc-panel").region.height >= 8
            assert pane.calculator.verdict is not None
            calc_rows = [ln[pane.calculator.region.x: pane.calculator.region.right] for ln in text]
            assert any("200000" in row for row in calc_rows)  # context-length, whole


async def test_at_80x24_the_calculator_and_gpus_open_zoomed_and_z_zooms_any_panel() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await ready_app(pilot, app, clock)
        screen = app.main_screen
        calc_panel = pane.query_one("#calc-panel")
        await burst(pilot, "c", "ctrl+a", "ctrl+k", "0", ".", "9")
        assert screen.maximized is calc_panel
        assert pane.calculator.fields[0].value == "0.9"
        text = screen_text(app)
        assert "mem-fraction-static  0.9" in text
        assert "verdict" in text
        await burst(pilot, "escape")
        assert screen.maximized is None
        assert app.focused is pane.log_view
        await burst(pilot, "shift+tab")  # the GPU panel, the one before the log
        assert screen.maximized is pane.query_one("#gpu-panel")
        assert "used/total util" in screen_text(app)
        await burst(pilot, "tab")  # back to the log: the layout again
        assert screen.maximized is None
        assert app.focused is pane.log_view
        await burst(pilot, "z")
        assert screen.maximized is pane.query_one("#log-panel")
        top = screen_text(app).splitlines()
        assert top[0].lstrip().startswith("demo")  # the host's header stays (issue 22 #13)
        assert top[1].startswith("╭─ Log")
        await burst(pilot, "z")
        assert screen.maximized is None


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
async def test_help_fits_the_screen_scrolls_from_the_keyboard_and_lists_the_new_keys(size: tuple[int, int]) -> None:
    from kvtui.ui.screens import HelpScreen

    clock = ready_clock("demo-a", "demo-b")  # two hosts: the host keys are offered too
    app = demo_app(clock, speed=SPEED, hosts=("demo-a", "demo-b"))
    async with app.run_test(size=size) as pilot:
        await ready_app(pilot, app, clock)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        dialog = app.screen.query_one("#help-dialog")
        assert dialog.region.y >= 0
        assert dialog.region.bottom <= size[1]
        ids = {bid for _, _, bid in app.screen.rows}
        assert {"zoom", "host.next", "host.previous", "host.1", "theme.next", "log.down", "log.top",
                "log.bottom", "log.half_down", "mark.next", "demo.speed"} <= ids
        for _ in range(12):
            await pilot.press("pagedown")
        await pilot.pause()
        text = screen_text(app)
        assert "log.end" in text or "Follow" in text  # the last keys can be reached
        body = app.screen.query_one("DialogBody")
        assert body.scroll_y > 0 or body.max_scroll_y == 0


async def test_the_apply_dialog_shows_the_diff_and_every_step_at_120x36_with_the_keys_on_its_body(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    import tempfile

    from textual.widgets import Button

    from kvtui.ui.screens import ApplyScreen

    state = tempfile.mkdtemp(prefix="kv")  # a path as long as a real unit's (pytest's own is twice that)
    monkeypatch.setenv("XDG_STATE_HOME", state)
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(120, 36)) as pilot:
        await ready_app(pilot, app, clock)
        await pilot.press("c", *"0.88", "enter", "escape")
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen))
        await pilot.pause()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ApplyScreen)
        assert not isinstance(app.focused, Button)  # not Cancel: the keys scroll the body
        text = screen_text(app)
        assert "-    --mem-fraction-static 0.85" in text
        assert "+    --mem-fraction-static 0.88" in text
        for i in range(1, len(screen.plan.steps) + 1):
            assert f" {i}. " in text
        assert "restart the unit and follow the new boot" in text
        assert "OK" in text
        assert "Apply (y)" in text
    shutil.rmtree(state, ignore_errors=True)


async def test_the_banner_after_an_apply_shows_the_whole_backup_path_at_80_columns() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await ready_app(pilot, app, clock)
        path = "/var/lib/kvtui/hosts/gpu-a/etc/systemd/system/sglang-k26.service.kvtui-20261201T120000.123456Z"
        pane.action_banner.finish("ok", "applied on demo: the new boot is ready", [f"backup: {path}"])
        await pilot.pause()
        assert "b: details" in screen_text(app)  # one line until b
        assert path not in screen_text(app).replace(" ", "")
        await pilot.press("b")
        await pilot.pause()
        text = "".join(line.strip(" │▎▊▌█▐") for line in screen_text(app).splitlines())
        assert path in text.replace(" ", "")


# --------------------------------------------------------------------------------------------
# Beyond: long actions never lock the console
# --------------------------------------------------------------------------------------------


async def _apply_running(pilot: Any, app: KvtuiApp, clock: FakeClock) -> HostPane:
    from kvtui.ui.screens import ApplyScreen

    pane = await ready_app(pilot, app, clock)
    await pilot.press("c", *"0.88", "enter", "escape")
    await pilot.press("a")
    await wait_for(pilot, lambda: isinstance(app.screen, ApplyScreen))
    await pilot.press("y")
    # the clock stands still: the new boot never gets ready, the apply keeps following it
    await wait_for(pilot, lambda: pane.changes.restart_issued)
    assert pane.busy == "an apply"
    return pane


async def test_a_running_apply_goes_on_in_the_background_and_ctrl_x_stops_it() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await _apply_running(pilot, app, clock)
        banner = pane.action_banner
        assert banner.shown
        assert "ctrl+x" in banner.build().plain
        footer = screen_text(app).splitlines()[-1]
        assert "Cancel change" in footer
        await pilot.press("escape")  # out of sight: the apply goes on
        assert not banner.shown
        assert pane.busy == "an apply"
        await pilot.press("t")  # the console is not locked
        assert pane.log_view.timestamps
        await pilot.press("ctrl+x")
        assert pane.busy is None
        assert banner.shown
        assert "no longer followed" in banner.build().plain
        await wait_for(pilot, lambda: not [w for w in app.workers if w.group == "service" and w.is_running])
        assert pane.busy is None  # the cancelled worker's end did not take the host back


async def test_r_during_a_running_apply_asks_and_restarts() -> None:
    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await _apply_running(pilot, app, clock)
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)  # asks; it used to refuse
        assert "an apply is running" in app.screen.body.lower()
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "Restart the server" in app.screen.body)
        await pilot.press("y")
        await wait_for(pilot, lambda: pane.busy == "a restart" or pane.changes.last_outcome is not None)


# --------------------------------------------------------------------------------------------
# Beyond: the first run is fast; the keys of less / vim / k9s
# --------------------------------------------------------------------------------------------


def test_the_demo_is_ready_in_under_a_minute_by_default_keeping_its_proportions() -> None:
    from kvtui.config import Config, HostConfig
    from kvtui.sim.backend import DemoBackend

    default = Config().host("demo")
    assert default.demo_speed == 8.0
    clock = FakeClock()
    fast = DemoBackend("demo", default, clock=clock)
    fast.read_unit()
    script = fast.boot_script()
    assert script is not None
    assert script.outcome == "ready"
    assert script.end_t - T_START < 60  # ready in under a minute of wall-clock time
    real = DemoBackend("demo-real", HostConfig(demo=True, demo_speed=1.0), clock=FakeClock())
    real.read_unit()
    slow = real.boot_script()
    assert slow is not None
    assert abs((slow.end_t - T_START) / (script.end_t - T_START) - 8.0) < 0.05  # the same boot, 8 times slower


async def test_the_header_says_the_demo_speed_and_d_switches_to_real_time() -> None:
    from kvtui.ui.widgets.host import HostBar

    clock = ready_clock()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await ready_app(pilot, app, clock)
        assert "demo ×40" in pane.query_one(HostBar).left().plain
        await pilot.press("D")
        await wait_for(pilot, lambda: pane.busy is None and pane.changes.last_outcome is not None)
        assert "demo ×1 real time" in pane.query_one(HostBar).left().plain
        backend = pane.backend
        assert backend is not None
        assert getattr(backend, "speed", None) == 1.0
        await run_clock(pilot, app, clock, until=lambda: (pane.boot_index or 0) >= 1, limit=10)


async def test_host_keys_switch_tabs_and_t_cycles_kvtui_themes() -> None:
    clock = ready_clock("demo-a", "demo-b", "demo-c")
    app = demo_app(clock, speed=SPEED, hosts=("demo-a", "demo-b", "demo-c"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready_app(pilot, app, clock)
        screen = app.main_screen

        def active() -> str:
            pane = screen.active_pane
            assert pane is not None
            return pane.host_name

        await pilot.press("3")
        assert active() == "demo-c"
        await pilot.press("right_square_bracket")
        assert active() == "demo-a"  # round the end
        await pilot.press("left_square_bracket")
        assert active() == "demo-c"
        await pilot.press("1")
        assert active() == "demo-a"
        assert app.theme == "kvtui-dark"
        await pilot.press("T")
        assert app.theme != "kvtui-dark"
        assert app.theme.startswith("kvtui-")


async def test_the_log_moves_like_less_and_jumps_between_marks() -> None:
    panel = LogPanel(window=1000)
    async with Harness(panel).run_test(size=(100, 20)) as pilot:
        view = panel.view
        view.append(log_lines(300))
        await pilot.pause()
        view.focus()
        await pilot.pause()
        bottom = view.scroll_y
        await pilot.press("k")  # the cursor, made on the last line on screen, moves; nothing scrolls
        assert view.cursor == 299
        assert view.scroll_y == bottom
        assert not view.follow  # moving up pauses, as scrolling does
        await pilot.press("k", "j")
        assert view.cursor == 299
        assert view.scroll_y == bottom
        await pilot.press("ctrl+u")
        assert view.scroll_y < bottom - 3
        await pilot.press("ctrl+d")
        assert view.scroll_y == bottom
        await pilot.press("g")
        assert view.scroll_y == 0
        await pilot.press("G")
        assert view.follow
        assert view.scroll_y == view.max_scroll_y
        # marks: m on two lines, ' and " go round them
        view.set_cursor(100)
        view.toggle_mark()
        view.set_cursor(200)
        view.toggle_mark()
        await pilot.press("apostrophe")
        assert view.cursor == 100  # after 200: round to the first
        await pilot.press("apostrophe")
        assert view.cursor == 200
        await pilot.press("quotation_mark")
        assert view.cursor == 100
        assert "mark on line 101" in view.message


def test_the_readme_key_table_lists_every_key() -> None:
    """Every key of the console (the screen's and the log's) is in the README's key table."""
    from textual.binding import Binding
    from textual.keys import key_to_character

    from kvtui.ui.bindings import MAIN_BINDINGS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## The console"): readme.index("## hosts.toml")]
    bindings = [b for b in [*MAIN_BINDINGS, *LogView.BINDINGS] if isinstance(b, Binding) and b.id]
    missing = []
    for binding in bindings:
        key = binding.key.split(",")[0]
        if key.isdigit():
            shown = "`1`–`9`"
        elif key == "escape":
            shown = "`esc`"
        elif key == "shift+tab":
            continue  # the other way round of tab
        elif key in ("tab", "slash", "backslash"):
            shown = {"tab": "`tab`", "slash": "`/`", "backslash": "`\\`"}[key]  # (Textual names no character)
        else:
            char = key_to_character(key) if len(key) > 1 else key
            shown = f"`{char or key}`"
        if shown not in section:
            missing.append(f"{binding.id} ({shown})")
    assert not missing, missing


async def test_every_new_key_is_remappable_in_keymap() -> None:
    """Remapped in [keymap] by id, a key moves (and no id is reported unknown)."""
    from kvtui.config import Config

    clock = ready_clock()
    config = Config(keymap={"zoom": "Z", "log.down": "ctrl+n", "theme.next": "f7"})
    app = demo_app(clock, speed=SPEED, config=config)
    async with app.run_test(size=(130, 38)) as pilot:
        pane = await ready_app(pilot, app, clock)
        assert not app._keymap_problems(config.keymap)
        await pilot.press("Z")
        assert app.main_screen.maximized is not None
        await pilot.press("Z")
        assert app.main_screen.maximized is None
        view = pane.log_view
        view.scroll_to(y=0, animate=False, immediate=True)
        await pilot.pause()
        await pilot.press("ctrl+n")  # log.down: the cursor, made on the top line on screen
        assert view.cursor == view.lines[0].seq
        await pilot.press("f7")
        assert app.theme != "kvtui-dark"
