"""The console's first frame holds the whole layout (issue 7, budget 6: first full paint < 1.5 s).

A frame is what the screen hands to the terminal (``App._display``); the test records what the
first one held, on the real console over a demo host."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from test_ui_helpers import FakeClock, demo_app, start_demo, wait_for
from textual.screen import Screen
from textual.widgets._footer import FooterKey

from kvtui.ui.app import KeysFooter, MainScreen
from kvtui.ui.log.view import LogView


async def test_the_first_frame_has_the_footers_keys_and_the_log_focused_and_then_the_monitor_starts() -> None:
    clock = FakeClock()
    start_demo("demo", clock)
    app = demo_app(clock)
    first: dict[str, Any] = {}
    display = app._display

    def record(screen: Screen[Any], renderable: Any) -> None:
        if renderable is not None and isinstance(screen, MainScreen) and not first:
            footer = screen.query_one(KeysFooter)
            first["keys"] = [key.description for key in footer.query(FooterKey)]
            first["focused"] = type(screen.focused).__name__ if screen.focused is not None else None
            first["monitors"] = [pane.monitor for pane in screen.panes]
        display(screen, renderable)

    app._display = record
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert first, "no frame was drawn"
        # the keys the footer shows once everything settled were already in the first frame
        assert "Quit" in first["keys"]
        assert "Search" in first["keys"]  # the log's own keys: it had the focus before that frame
        assert first["focused"] == LogView.__name__
        # the host's monitor (parser, first batch, GPU plot, calculator) starts after that frame
        assert first["monitors"] == [None]
        await wait_for(pilot, lambda: app.main_screen.panes[0].monitor is not None)
        settled = [key.description for key in app.main_screen.query_one(KeysFooter).query(FooterKey)]
        assert set(first["keys"]) <= set(settled)


def test_the_console_imports_neither_plotext_nor_the_calculator_before_its_first_frame() -> None:
    """What ``kvtui connect`` imports to build its first frame: plotext (the GPU history plot,
    drawn once readings come) and kvcalc (the calculator, once a boot sized its pool) wait."""
    code = (
        "import sys\n"
        "import kvtui.cli, kvtui.commands.connect\n"
        "from kvtui.hosts.factory import make_backend\n"
        "from kvtui.ui.app import KvtuiApp\n"
        "from kvtui.ui.host_pane import HostPane\n"
        "print(sorted(m for m in ('plotext', 'textual_plotext', 'kvtui.kvcalc') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
