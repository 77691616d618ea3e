"""The console's fleet screen (issue 26) over a fixed fleet (tests/fleet_ui_support.py: rows built as
``build_rows`` builds them, nothing from the wall clock): ``F`` and the palette open it, the virtual
table's keys, sort (``s``/``S``), filter (``/``, ``esc``), a Prometheus that cannot be read (banner,
rows stale, none healthy), drill-in (a hosts.toml host's console, else the instance view), the
``prometheus_instance`` key; and snapshots at 120x36 and 160x48. The same behaviours against a real
Prometheus: tests/test_ui_fleet_prometheus.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fleet_ui_support import DOWN, FIXED_NOW, KV_FULL, PREEMPTING, RESTARTING, XID, FixedSource, synthetic_row
from test_ui_helpers import FakeClock, demo_app, screen_text, wait_for
from textual.pilot import Pilot

from kvtui.config import Config, ConfigError, parse_config
from kvtui.fleet.drill import host_for, hosts_hint
from kvtui.hosts.factory import make_backend
from kvtui.ui.app import KvtuiApp, MainScreen
from kvtui.ui.fleet.screen import FleetScreen, InstanceScreen, SeriesPlot
from kvtui.ui.fleet.table import FleetTable

SnapCompare = Callable[..., bool]
TROUBLE_HOSTS = [synthetic_row(i).host for i in (DOWN, RESTARTING, XID, KV_FULL, PREEMPTING)]


def fleet_app(source: FixedSource | None, config: Config | None = None) -> KvtuiApp:
    app = KvtuiApp([], backend_factory=make_backend, config=config or Config(), fleet_source=source,
                   clock=lambda: FIXED_NOW)
    app.animation_level = "none"
    return app


async def read(pilot: Pilot[Any], screen: FleetScreen, reads: int = 1) -> None:
    await wait_for(pilot, lambda: screen.reads >= reads)
    await pilot.pause()


def last_cells(app: KvtuiApp) -> list[str]:
    """The state / trouble cell of each table line on screen."""
    text = screen_text(app).splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("HOST"))
    col = text[start].index("STATE / TROUBLE")
    width = app.screen.query_one(FleetTable).scrollable_content_region.width
    return [line[col:width].strip() for line in text[start + 1:] if line[:1].isdigit()]


# ---- opening it ------------------------------------------------------------------------------------


async def test_F_opens_the_fleet_screen_from_a_console_and_F_closes_it() -> None:
    app = demo_app(FakeClock())
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.main_screen.active_pane is not None)
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen))
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        # no [prometheus]: it says what to add, and shows no row
        assert "no [prometheus]" in screen_text(app)
        assert 'url = "http://prometheus:9090"' in screen_text(app)
        assert screen.table.rows == []
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))


async def test_the_palette_offers_the_fleet_screen() -> None:
    from kvtui.ui.palette import main_screen_commands

    app = demo_app(FakeClock())
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.main_screen.active_pane is not None)
        commands = {title: run for title, _help, run in main_screen_commands(app.main_screen)}
        assert "fleet: fleet screen" in commands
        commands["fleet: fleet screen"]()
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen))


def test_a_console_without_hosts_needs_a_prometheus() -> None:
    with pytest.raises(ValueError, match=r"\[prometheus\]"):
        KvtuiApp([], backend_factory=make_backend, config=Config())
    config = parse_config('[prometheus]\nurl = "http://127.0.0.1:1"\n')
    app = KvtuiApp([], backend_factory=make_backend, config=config)
    assert app.fleet_only


def test_connect_without_a_host_says_the_fleet_screen_needs_a_prometheus(capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.cli import main

    assert main(["connect"]) == 2
    assert "with a [prometheus] in hosts.toml and no HOST: the fleet screen" in capsys.readouterr().err


async def test_the_fleet_keys_are_remappable_in_keymap() -> None:
    from kvtui.ui.fleet.screen import InstanceScreen as _Instance
    from kvtui.ui.fleet.table import FleetTable as _Table

    ids = {b.id for cls in (FleetScreen, _Table, _Instance) for b in cls.BINDINGS if hasattr(b, "id") and b.id}
    assert ids <= set(KvtuiApp.binding_ids())
    config = Config(keymap={"fleet.sort": "o"})
    app = fleet_app(FixedSource(20), config)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        assert not app._keymap_problems(config.keymap)
        await pilot.press("o")
        assert screen.sort_key == "engine"


# ---- the table -------------------------------------------------------------------------------------


async def test_a_thousand_rows_trouble_first_and_the_movement_keys() -> None:
    source = FixedSource(1000)
    app = fleet_app(source)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        table = screen.table
        assert len(table.rows) == 1000
        assert [r.host for r in table.rows[:5]] == TROUBLE_HOSTS
        cells = last_cells(app)
        assert cells[0] == "down"
        assert cells[1].startswith("restarting (4× in 1 h)")
        assert cells[4].startswith("preempting 12.5/min")
        assert len(cells) == 36 - 4  # the status line, the header, the keys: only the lines on screen
        await pilot.press("j", "j", "k")
        assert table.cursor == 1
        await pilot.press("G")
        assert table.cursor == 999
        assert table.scroll_y == 1000 + 1 - table.size.height
        await pilot.press("g")
        assert table.cursor == 0
        assert table.scroll_y == 0
        await pilot.press("pagedown")
        assert table.cursor == table.size.height - 1
        # a refresh keeps the cursor on its instance
        await pilot.press("j")
        at = table.current
        await pilot.press("r")
        await read(pilot, screen, 2)
        assert table.current == at


async def test_a_click_moves_the_cursor_a_double_click_drills_in() -> None:
    app = fleet_app(FixedSource(100))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        table = screen.table
        await pilot.click(FleetTable, offset=(5, 4))  # the header, then rows 0, 1, 2, 3
        assert table.cursor == 3
        await pilot.click(FleetTable, offset=(5, 6), times=2)
        assert table.cursor == 5
        await wait_for(pilot, lambda: isinstance(app.screen, InstanceScreen))
        view = app.screen
        assert isinstance(view, InstanceScreen)
        assert view.row == table.rows[5]


async def test_sort_cycles_and_reverses_with_trouble_first() -> None:
    app = fleet_app(FixedSource(300))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        assert screen.sort_key == "host"
        keys = [screen.sort_key]
        for _ in range(3):
            await pilot.press("s")
            keys.append(screen.sort_key)
        assert keys == ["host", "engine", "version", "model"]
        while screen.sort_key != "kv":
            await pilot.press("s")
        rows = screen.table.rows
        assert [r.host for r in rows[:5]] == TROUBLE_HOSTS  # trouble first, whatever the column
        healthy = [r.kv_usage for r in rows[5:] if r.kv_usage is not None]
        assert healthy == sorted(healthy, reverse=True)  # largest first
        assert "KV/PEAK▼" in screen_text(app)
        await pilot.press("S")
        rows = screen.table.rows
        assert [r.host for r in rows[:5]] == TROUBLE_HOSTS
        healthy = [r.kv_usage for r in rows[5:] if r.kv_usage is not None]
        assert healthy == sorted(healthy)
        assert "KV/PEAK▲" in screen_text(app)
        assert "sort kv ▲" in screen_text(app)


async def test_filter_as_you_type_enter_keeps_it_esc_clears_it() -> None:
    app = fleet_app(FixedSource(400))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        await pilot.press("slash", *"gemma")
        assert screen.filter_text == "gemma"
        assert len(screen.table.rows) == 100
        assert all(r.model == "org/gemma-27b" for r in screen.table.rows)
        await pilot.press("enter")
        assert isinstance(app.focused, FleetTable)
        await pilot.press("j", "s")  # the table's keys again, the filter kept
        assert screen.table.cursor == 1
        assert screen.sort_key == "engine"
        assert len(screen.table.rows) == 100
        assert "/gemma: 100 shown" in screen_text(app)
        await pilot.press("slash", "backspace", "backspace", "backspace", "backspace", "backspace", *"retract")
        assert screen.filter_text == "retract"
        assert screen.table.rows == []  # a vLLM fleet's trouble says preempting
        await pilot.press("escape")
        assert screen.filter_text == ""
        assert len(screen.table.rows) == 400
        assert isinstance(app.focused, FleetTable)
        await pilot.press("escape")  # nothing to clear, and the console's only screen: it stays
        assert app.screen is screen


async def test_prometheus_unreadable_banner_and_no_row_looks_healthy() -> None:
    source = FixedSource(200)
    source.fail = "cannot reach Prometheus at http://prometheus.example:9090: Connection refused"
    app = fleet_app(source)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        text = screen_text(app)
        assert "✖ cannot reach Prometheus at http://prometheus.example:9090: Connection refused" in text
        assert "Nothing is known of the fleet" in text
        assert screen.table.rows == []
        source.fail = None
        await pilot.press("r")
        await wait_for(pilot, lambda: screen.problem is None)  # (the 5 s timer may read first: either will do)
        await pilot.pause()
        assert "✖" not in screen_text(app)
        assert "up" in last_cells(app)
        source.fail = "Prometheus at http://prometheus.example:9090: no answer within 10 s ([prometheus] timeout)"
        await pilot.press("r")
        await wait_for(pilot, lambda: screen.problem is not None)
        await pilot.pause()
        text = screen_text(app)
        assert "no answer within 10 s" in text
        assert "The rows are those read at 05:46:40, greyed: stale" in text
        cells = last_cells(app)
        assert cells
        assert all(c.startswith("stale 05:46:40") for c in cells)
        assert not any(c == "up" for c in cells)
        assert cells[0] == "stale 05:46:40: down"
        assert "STALE, read 05:46:40" in text


# ---- drill-in ----------------------------------------------------------------------------------------


def test_host_for_by_address_or_prometheus_instance() -> None:
    config = parse_config(
        '[hosts.a]\nssh = "ops@10.0.0.1"\nunit = "vllm"\n'
        '[hosts.b]\nssh = "ops@node-b.internal"\nunit = "sglang"\nprometheus_instance = "10.0.0.2:30000"\n'
        '[hosts.c]\ndemo = true\nprometheus_instance = "10.0.0.3"\n')
    assert host_for("10.0.0.1:8000", config.hosts) == "a"
    assert host_for("10.0.0.2:30000", config.hosts) == "b"
    assert host_for("10.0.0.2:8000", config.hosts) is None  # another port: another server
    assert host_for("10.0.0.3:8000", config.hosts) == "c"  # an address alone: any port
    assert host_for("10.9.9.9:8000", config.hosts) is None
    with pytest.raises(ConfigError, match=r'prometheus_instance = "http://x:1/metrics": expected the "instance" '
                                          r"label Prometheus gives"):
        parse_config('[hosts.a]\ndemo = true\nprometheus_instance = "http://x:1/metrics"\n')


async def test_enter_on_a_configured_host_opens_its_console_and_F_comes_back() -> None:
    row = synthetic_row(40)
    config = parse_config(f'[hosts.gpu-a]\ndemo = true\ndemo_speed = 20\nprometheus_instance = "{row.instance}"\n')
    app = fleet_app(FixedSource(100), config)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        await pilot.press("slash", *row.host, "enter")
        assert screen.table.current == row
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        host = app.screen
        assert isinstance(host, MainScreen)
        assert host.host_names == ["gpu-a"]
        await wait_for(pilot, lambda: host.active_pane is not None and host.active_pane.monitor is not None)
        await pilot.press("F")
        await wait_for(pilot, lambda: app.screen is screen)


async def test_enter_on_a_host_of_this_console_shows_its_tab() -> None:
    row = synthetic_row(40)
    config = parse_config(f'[hosts.b]\ndemo = true\nprometheus_instance = "{row.instance}"\n')
    app = demo_app(FakeClock(), hosts=("a", "b"), config=config)
    app.fleet_source = FixedSource(100)
    async with app.run_test(size=(120, 36)) as pilot:
        main = app.main_screen
        await wait_for(pilot, lambda: main.active_pane is not None)
        assert main.active_pane is not None
        assert main.active_pane.host_name == "a"
        await pilot.press("F")
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen))
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        await pilot.press("slash", *row.instance, "enter", "enter")
        await wait_for(pilot, lambda: app.screen is main)
        await wait_for(pilot, lambda: main.active_pane is not None and main.active_pane.host_name == "b")


async def test_enter_on_an_unknown_instance_opens_its_last_hour_and_the_hint() -> None:
    app = fleet_app(FixedSource(50))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        row = screen.table.current
        assert row is not None
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, InstanceScreen))
        view = app.screen
        assert isinstance(view, InstanceScreen)
        await wait_for(pilot, lambda: view.history is not None)
        await pilot.pause()
        plots = list(view.query(SeriesPlot))
        assert [p.border_title for p in plots] == ["KV usage", "queued requests", "generated tokens/s",
                                                   "GPU memory (fullest GPU)"]
        assert all(len(p.points) == 241 for p in plots)
        text = screen_text(app)
        assert f'prometheus_instance = "{row.instance}"' in text
        assert all(line in text for line in hosts_hint(row).splitlines())
        source = screen.source
        assert isinstance(source, FixedSource)
        reads = source.reads
        screen.refresh_rows()  # the 5 s timer's call: nobody sees the rows, no query
        await pilot.pause()
        assert source.reads == reads
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)


# ---- snapshots -----------------------------------------------------------------------------------------


def _snap(source: FixedSource, keys: tuple[str, ...] = ()) -> tuple[KvtuiApp, Callable[[Pilot[Any]], Any]]:
    app = fleet_app(source)

    async def run_before(pilot: Pilot[Any]) -> None:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        if keys:
            await pilot.press(*keys)
        await pilot.pause()

    return app, run_before


def test_snapshot_fleet_120x36(snap_compare: SnapCompare) -> None:
    app, run_before = _snap(FixedSource(200))
    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_snapshot_fleet_160x48_sorted_by_kv_cursor_down(snap_compare: SnapCompare) -> None:
    app, run_before = _snap(FixedSource(1000), ("s",) * 9 + ("j", "j", "j", "j", "j", "j"))
    assert snap_compare(app, terminal_size=(160, 48), run_before=run_before)


def test_snapshot_fleet_stale_120x36(snap_compare: SnapCompare) -> None:
    source = FixedSource(200)
    app = fleet_app(source)

    async def run_before(pilot: Pilot[Any]) -> None:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await read(pilot, screen)
        source.fail = "Prometheus at http://prometheus.example:9090 answered 401 Unauthorized: it needs credentials"
        await pilot.press("r")
        await wait_for(pilot, lambda: screen.problem is not None)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_snapshot_instance_view_160x48(snap_compare: SnapCompare) -> None:
    app, run_before = _snap(FixedSource(50), ("j", "enter"))

    async def then(pilot: Pilot[Any]) -> None:
        await run_before(pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.history is not None)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 48), run_before=then)
