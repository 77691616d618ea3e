"""The console's key bindings: the main screen's table (ids are what users remap in hosts.toml
[keymap]) and the ids of the keys that widgets, dialogs and the fleet screen bind, all remappable."""

from __future__ import annotations

from textual.binding import Binding, BindingType

# The main screen's bindings. Ids are what users remap in hosts.toml [keymap].
MAIN_BINDINGS: list[BindingType] = [
    Binding("question_mark", "help", "Help", id="help", tooltip="every key, with its id for [keymap]"),
    Binding("q", "quit", "Quit", id="quit"),
    Binding("ctrl+x", "cancel_change", "Cancel change", id="change.cancel",
            tooltip="cancel the running apply/rollback/restart (after its restart step: stop following it)"),
    Binding("slash", "search", "Search", id="search", tooltip="search the whole log (smart case)", priority=True),
    Binding("backslash", "search(False)", "Search backwards", show=False, id="search.backward",
            tooltip="search the whole log backwards from the cursor (n goes on backwards)", priority=True),
    Binding("n", "find(True)", "Next match", show=False, id="search.next"),
    Binding("N", "find(False)", "Previous match", show=False, id="search.previous"),
    Binding("ampersand", "filter", "Filter", id="filter",
            tooltip="add a filter: text, !text hides, a|b regex, rank TP3; &- drops the last, empty clears",
            priority=True),
    Binding("f", "follow", "Follow", id="follow", tooltip="follow the newest lines, or pause"),
    Binding("e", "error(True)", "Next error", show=False, id="error.next"),
    Binding("E", "error(False)", "Previous error", show=False, id="error.previous"),
    Binding("t", "timestamps", "Timestamps", show=False, id="timestamps"),
    Binding("w", "wrap", "Wrap", show=False, id="wrap"),
    Binding("m", "mark", "Mark line", show=False, id="mark"),
    Binding("y", "copy_line", "Copy line", show=False, id="copy.line",
            tooltip="copy the cursor line to the clipboard (OSC 52)"),
    Binding("Y", "copy_boot", "Copy boot summary", show=False, id="copy.boot",
            tooltip="copy the boot panel's phases and figures to the clipboard (OSC 52)"),
    Binding("c", "calculator", "Calculator", id="calculator", tooltip="edit flags, see the next boot's KV pool",
            priority=True),
    Binding("x", "explain", "Explain", id="explain", tooltip="how the prediction is computed"),
    Binding("p", "processes", "Processes", id="processes", tooltip="per-process GPU memory"),
    Binding("U", "unrecognised", "Unrecognised lines", show=False, id="unrecognised",
            tooltip="the boot's startup lines no rule recognised, by shape"),
    Binding("R", "restart", "Restart", id="restart", tooltip="restart the server (asks first)"),
    Binding("a", "apply", "Apply", id="apply", tooltip="apply the calculator's edits and restart (asks first)"),
    Binding("K", "serving_apply", "Apply the KV suggestion", show=False, id="serving.apply",
            tooltip="serving, pool full: the calculator set to the diagnosis' suggested edit, then apply (asks first)"),
    Binding("O", "tune", "Tune", show=False, id="tune",
            tooltip="find the largest fraction that boots, or meet a goal, one safe restart at a time (asks first)"),
    Binding("u", "rollback", "Rollback", show=False, id="rollback",
            tooltip="restore the flags file's newest backup and restart (asks first)"),
    Binding("z", "zoom", "Zoom", show=False, id="zoom", tooltip="the focused panel fills the screen; again, back"),
    Binding("b", "banners", "Banners", show=False, id="banners",
            tooltip="the banners (a failed boot, a change, the hosts) in full; again, one line each"),
    Binding("H", "history", "History", show=False, id="history",
            tooltip="the boots kvtui remembers of this host; pick two to diff"),
    Binding("B", "bundle", "Bundle", show=False, id="bundle",
            tooltip="write the boot's incident bundle (.tar.gz: log, GPUs, calculator, flags, screenshot)"),
    Binding("d", "history(True)", "What changed", show=False, id="diff",
            tooltip="what changed since the last good boot"),
    Binding("F", "fleet", "Fleet screen", show=False, id="fleet",
            tooltip="every serving instance of the fleet, read from [prometheus] (issue 26)"),
    Binding("tab", "panel(1)", "Next panel", show=False, id="panel.next", priority=True),
    Binding("shift+tab", "panel(-1)", "Previous panel", show=False, id="panel.previous", priority=True),
    Binding("escape", "escape", "Leave field", show=False, id="escape"),
    Binding("right_square_bracket", "host(1)", "Next host", show=False, id="host.next"),
    Binding("left_square_bracket", "host(-1)", "Previous host", show=False, id="host.previous"),
    Binding("number_sign", "next_node", "Next node", show=False, id="node.filter",
            tooltip="a deployment's node: the next node's console (its tab)"),
    *[Binding(str(n), f"host_number({n})", f"Host {n}", show=False, id=f"host.{n}") for n in range(1, 10)],
    Binding("T", "next_theme", "Next theme", show=False, id="theme.next", tooltip="cycle kvtui's colour themes"),
    Binding("D", "demo_speed", "Demo speed", show=False, id="demo.speed",
            tooltip="a demo host: restart its simulation in real time, or at its speed again"),
]

# The keys that move focus (c, /, &, tab) are priority bindings: they run as the app takes the key,
# so the keys typed right after them in a burst go where focus went (kvtui/ui/keys.py).

# Ids of bindings owned by widgets and dialogs (also remappable).
WIDGET_BINDING_IDS = (
    "log.end", "find.close", "find.search", "find.filter", "calc.enter", "calc.leave", "calc.up", "calc.down",
    "calc.edit", "calc.select", "calc.reset",
    "help.close", "confirm.cancel", "confirm.yes", "explain.close",
    "log.down", "log.up", "log.top", "log.bottom", "log.half_down", "log.half_up", "mark.next", "mark.previous",
    "apply.force", "apply.rollback", "notice.close",
)

# Ids of the fleet screen's keys (kvtui.ui.fleet.screen, kvtui.ui.fleet.table).
FLEET_BINDING_IDS = ("fleet.open", "fleet.filter", "fleet.sort", "fleet.reverse", "fleet.refresh", "fleet.back",
                     "fleet.close", "fleet.quit", "instance.close", "instance.reload")
