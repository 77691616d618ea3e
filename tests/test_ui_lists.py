"""Every table moves like the log (issue 22 #10): ``j``/``k`` a row, ``g``/``G`` the first / last,
and a table refilled by its poll keeps the cursor on its row (the GPU processes, ``p``)."""

from __future__ import annotations

from typing import Any

from test_ui_helpers import FakeClock, demo_app, settle, start_demo, wait_for

from kvtui.config import HostConfig
from kvtui.ui.gpu.widgets import ProcessTable
from kvtui.ui.host_pane import HostPane
from kvtui.ui.widgets.table import ListTable

SPEED = 40.0
SIZE = (130, 38)


def _row_key(table: ProcessTable) -> Any:
    return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value


async def test_the_process_table_takes_j_k_g_G_and_keeps_its_row_across_polls() -> None:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    clock.advance(12.0)
    from kvtui.sim.backend import DemoBackend

    DemoBackend("demo", HostConfig(demo=True, demo_speed=SPEED), clock=clock).set_foreign_process(
        gpu=3, mib=2048, pid=4242, name="python3")
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        pane = app.main_screen.query_one(HostPane)
        await pilot.press("p")
        table = pane.query_one(ProcessTable)
        assert isinstance(table, ListTable)
        # p gives the table the keys (j moved the log under it before)
        await wait_for(pilot, lambda: app.focused is table)
        await wait_for(pilot, lambda: table.row_count >= 3)
        await pilot.press("j")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("j", "j", "k")
        assert table.cursor_row == 1
        chosen = _row_key(table)
        # the poll refills the table every 2 s: the cursor stays on the process it was on
        refills = 0
        refill = table.refill

        def counted(rows: Any) -> None:
            nonlocal refills
            refills += 1
            refill(rows)

        table.refill = counted  # type: ignore[method-assign]
        await wait_for(pilot, lambda: refills >= 2)
        assert _row_key(table) == chosen
        # p again: the bars and the plot, and the keys go back to the log
        await pilot.press("p")
        await wait_for(pilot, lambda: app.focused is pane.log_view)
