"""The console and the history: it records the boots it follows, and a boot that starts after
one it remembers shows its phase ETA (``load weights 0:04 / ~0:09``, ``ready in ~…``)."""

from __future__ import annotations

from test_ui_app import SIZE, SPEED, pane_of, ready_demo, status_of
from test_ui_helpers import demo_app, plain, run_clock, set_demo_fraction, wait_for
from textual.widgets import DataTable

from kvtui.boot import BootStatus
from kvtui.engines.events import Phase
from kvtui.history import open_store
from kvtui.ui.history.screen import HistoryScreen
from kvtui.ui.screens import ConfirmScreen
from kvtui.ui.widgets.boot import FailureBanner, PhaseTimeline


async def test_the_console_records_boots_and_shows_the_eta_of_the_next_one() -> None:
    clock = ready_demo()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
        # the first boot: nothing in the history before it, so no ETA is made up
        assert "ready in ~" not in str(pane.query_one("#boot-panel").border_subtitle)
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await pilot.pause()

        def loading() -> bool:
            b = pane.boot
            return (pane.boot_index or 0) >= 1 and b is not None and b.phase is Phase.LOAD_WEIGHTS \
                and bool(pane.eta_history)

        await run_clock(pilot, app, clock, until=loading, step=0.05, limit=30)
        await run_clock(pilot, app, clock, until=lambda: "ready in ~" in str(
            pane.query_one("#boot-panel").border_subtitle), step=0.05, limit=5)
        rows = plain(pane.query_one(PhaseTimeline)).splitlines()
        current = next(r for r in rows if r.startswith("▶"))
        assert " / ~0:" in current  # elapsed / the median of the remembered boot
        assert "(median of" not in current
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
    with open_store(readonly=True) as store:
        rows_ = store.boots("demo")
    assert [r.status for r in rows_] == ["ready", "ready"]  # both boots, once each
    peaks = rows_[0].doc["peak_used_mib"]  # the second boot's GPU peaks, from the console's samples
    assert len(peaks) == 8
    assert all(v > 60_000 for v in peaks.values())  # the weights and the pool were loaded


async def test_a_failed_boot_says_what_changed_since_the_last_good_one() -> None:
    clock = ready_demo()
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = pane_of(app)
        await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
        set_demo_fraction("demo", 0.99, clock, speed=SPEED)  # edited and restarted behind the console's back
        await run_clock(pilot, app, clock, until=lambda: (pane.boot_index or 0) >= 1
                        and status_of(pane) is BootStatus.FAILED and bool(pane.eta_history), step=0.1, limit=60)
        await pilot.press("b")  # the banner in full (one line until then)
        await pilot.pause()
        text = str(pane.query_one(FailureBanner).render())
        assert "BOOT FAILED in graph capture" in text
        assert "Since the last good boot:" in text
        assert "flags: mem_fraction_static 0.85 → 0.99" in text

        # d: what changed since the last good boot, in the history view
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen)
                       and "compared with" in app.screen.detail_text)  # the clock stands: no restart yet
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        first = screen.detail_text.splitlines()[0]
        assert first.startswith("#2 ")
        assert "failed (oom_graph_capture in graph_capture)" in first
        assert "changed  mem_fraction_static: 0.85 → 0.99" in screen.detail_text
        assert [r.id for r in screen.rows] == [2, 1]
        # l: the end of the failed boot's log, from the spool
        await pilot.press("l")
        await pilot.pause()
        assert "-boot-0001.log (last 200 lines)" in screen.detail_text.splitlines()[0]
        assert "out of memory" in screen.detail_text.lower()
        # j / k / G / g move the list like the log (issue 22 #10: j then d diffed the wrong boot)
        table = screen.query_one(DataTable)
        await pilot.press("j")
        assert table.cursor_row == 1
        await pilot.press("k")
        assert table.cursor_row == 0
        await pilot.press("G")
        assert table.cursor_row == len(screen.rows) - 1
        await pilot.press("g")
        assert table.cursor_row == 0
        # pick two boots: mark the older one (cursor down, space), diff the newer against it
        await pilot.press("j", "space", "k", "d")
        await pilot.pause()
        assert screen.marked == 1
        assert "compared with #1" in screen.detail_text
        assert screen.query_one(DataTable).render_line(2).text.split()[:2] == ["*", "#1"]  # the mark is drawn
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HistoryScreen)
        await pilot.press("H")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen)
                       and "Prediction ledger" in app.screen.detail_text)


async def test_the_console_says_the_history_is_locked_and_when_its_boots_are_written() -> None:
    """The history file is held locked by another process (past the 5 s busy wait) while the
    console records its first boot: a toast says the boot waits ("will retry — 1 boot waiting"),
    and once the lock is gone another says it is written; the boot is stored once."""
    from history_support import locked

    from kvtui.history import default_path

    path = default_path()
    open_store(path).close()
    clock = ready_demo()
    with locked(path) as holder:
        app = demo_app(clock, speed=SPEED)
        async with app.run_test(size=SIZE) as pilot:
            pane = pane_of(app)

            def said(text: str) -> bool:
                return any(text in str(n.message) for n in app._notifications)

            await run_clock(pilot, app, clock, until=lambda: status_of(pane) is BootStatus.READY, limit=60)
            await wait_for(pilot, lambda: said("(locked by another kvtui); will retry — 1 boot waiting"), timeout=60)
            holder.release()
            await wait_for(pilot, lambda: said("the boots that waited for the locked file are written"), timeout=60)
    with open_store(readonly=True) as store:
        assert [r.status for r in store.boots("demo")] == ["ready"]
