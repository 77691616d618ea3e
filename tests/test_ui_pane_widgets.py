"""A host is drawn in few widgets (issue 23 item 7): with 32 hosts, a host switch lays out and
repaints the shown pane's widgets, and ~48 of them made the switch miss its budget (bench 7).
These bounds pin the count; a widget added to the pane should draw something new."""

from __future__ import annotations

from test_ui_helpers import FakeClock, demo_app, run_clock, settle, start_demo, wait_for
from textual.widget import Widget

from kvtui.boot import BootStatus
from kvtui.ui.calc.panel import CalculatorPanel
from kvtui.ui.host_pane import HostPane
from kvtui.ui.log.panel import LogStatus
from kvtui.ui.widgets.boot import KvUsage

SPEED = 40.0
SIZE = (160, 48)  # the whole layout: boot, figures, log, GPU bars and plot, calculator

# the pane's own widgets, the calculator's flag fields aside (they come with the boot's engine):
# before issue 23 item 7, 41 mounted and 26 laid out while serving (the KV gauge, its sparkline
# and the load were three widgets in a fourth; the log's status line two in a third)
MOST_MOUNTED = 36
MOST_LAID_OUT = 22


def pane_widgets(pane: HostPane) -> list[Widget]:
    calc = pane.query_one(CalculatorPanel)
    return [w for w in pane.walk_children() if calc not in w.ancestors]


def laid_out(pane: HostPane, widgets: list[Widget]) -> list[Widget]:
    """Displayed, and every ancestor up to the pane too: what a layout pass arranges."""

    def shown(widget: Widget) -> bool:
        node: Widget | None = widget
        while node is not None and node is not pane:
            if not node.display:
                return False
            node = node.parent if isinstance(node.parent, Widget) else None
        return True

    return [w for w in widgets if shown(w)]


async def test_a_serving_host_pane_is_drawn_in_few_widgets() -> None:
    clock = FakeClock()
    start_demo("demo", clock, SPEED)
    app = demo_app(clock, speed=SPEED)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.main_screen.panes[0]

        def serving() -> bool:
            boot = pane.boot
            return boot is not None and boot.status is BootStatus.READY and boot.live.token_usage is not None

        await run_clock(pilot, app, clock, until=serving, limit=60)
        await run_clock(pilot, app, clock, seconds=3.0)
        await settle(pilot, app)
        kv = pane.query_one(KvUsage)
        await wait_for(pilot, lambda: kv.has_class("-serving"))
        widgets = pane_widgets(pane)
        shown = laid_out(pane, widgets)
        names = sorted(type(w).__name__ for w in widgets)
        assert len(widgets) <= MOST_MOUNTED, names
        assert len(shown) <= MOST_LAID_OUT, sorted(type(w).__name__ for w in shown)
        # what the merged widgets draw is all there: the gauge, two rows of history, the load
        rows = str(kv.render()).splitlines()
        assert len(rows) == 4
        assert "KV usage" in rows[0]
        assert "running" in rows[-1]
        assert kv.region.height == 4
        status = pane.query_one(LogStatus)
        assert "following" in status.state.plain
        assert status.region.height == 1
