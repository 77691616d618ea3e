"""``KvtuiApp``: the live console of ``kvtui connect``.

One ``HostPane`` per host (a tab each when there are several, with a fleet summary above);
the main screen carries every key binding (each with an ``id`` for ``[keymap]``) and hands the
action to the active host's pane.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, messages, on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, TabbedContent, TabPane

from kvtui.boot import BootStatus
from kvtui.config import CalcConfig, Config, UiConfig
from kvtui.hosts.service import plan_restart
from kvtui.monitor import MonitorOptions
from kvtui.ui import formatting as fmt
from kvtui.ui.bindings import FLEET_BINDING_IDS, MAIN_BINDINGS, WIDGET_BINDING_IDS
from kvtui.ui.calc.panel import CalculatorPanel
from kvtui.ui.deployment import DeploymentGroup
from kvtui.ui.fleet.screen import FleetScreen, FleetSource, PromFleetSource
from kvtui.ui.gpu.widgets import ProcessTable
from kvtui.ui.history.deployment import DeploymentHistoryScreen
from kvtui.ui.history.screen import HistoryScreen
from kvtui.ui.host_pane import BackendFactory, Clock, HostPane, HostSpec, Panel
from kvtui.ui.keys import is_printable_key
from kvtui.ui.log.view import LogView
from kvtui.ui.palette import Command, KvtuiCommands, main_screen_commands
from kvtui.ui.perf import GcPacer, KeysFooter
from kvtui.ui.screens import ConfirmScreen, ExplainScreen, HelpScreen, NoticeScreen
from kvtui.ui.themes import (
    DEFAULT_THEME,
    accepted_theme_names,
    load_themes,
    remember_theme,
    remembered_theme,
    theme_variable_defaults,
    usable_theme,
)
from kvtui.ui.widgets.boot import BootFigures, PhaseTimeline
from kvtui.ui.widgets.host import FleetSummary, HostBar, ZoomHeader

# the console's bundle writer (``B``): the pane on screen and its SVG screenshot -> the file written
BundleWriter = Callable[[HostPane, str], Awaitable[Path]]

if TYPE_CHECKING:
    from collections.abc import Mapping

    from textual.theme import Theme

    from kvtui.config import DeploymentConfig

CHANGES_HOST = frozenset({"restart", "apply", "rollback", "serving_apply"})
PACE_HIDDEN_FROM = 5  # hosts in one console from which hidden hosts' monitors flush less often
WARM_UP_QUIET = 2.0  # seconds without input before hidden panes are prepared in the background


class MainScreen(Screen[None]):
    """The console: one pane per host; a deployment's nodes are a group of panes
    (``kvtui.ui.deployment``: its strip on each, one change controller for all)."""

    BINDINGS: ClassVar[list[BindingType]] = MAIN_BINDINGS
    COMMANDS: ClassVar = {KvtuiCommands}
    AUTO_FOCUS = "LogView"  # the log (not the first focusable widget: the find bar's hidden field)
    # kvtui.tcss lays the panels out by these (80x24 narrow+short, 120x36 medium, 160x48 wide,
    # 240x64 xwide)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-medium"), (160, "-wide"), (220, "-xwide")]  # noqa: RUF012
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]  # noqa: RUF012
    SHORT_BELOW = 30
    NARROW_BELOW = 110
    SIDE_PANELS = ("gpu-panel", "calc-panel")  # the right-hand column: not shown when narrow
    # a zoomed panel (z) keeps the active host's header over it (which host, its boot's state)
    ALLOW_IN_MAXIMIZED_VIEW = "Footer, ZoomHeader"

    def __init__(
        self,
        specs: Sequence[HostSpec],
        *,
        backend_factory: BackendFactory,
        clock: Clock,
        ui: UiConfig,
        calc: CalcConfig,
        readonly: bool,
        monitor_options: MonitorOptions | None = None,
        record_history: bool = True,
        screen_id: str = "main",
        deployments: Mapping[str, DeploymentConfig] | None = None,
    ) -> None:
        """``deployments``: the ``[deployments.NAME]`` opened (their nodes among ``specs``); one of
        several nodes is a group of their panes, one of one node its host's pane alone."""
        super().__init__(id=screen_id)  # another id: a host opened from the fleet screen
        self.deployments = dict(deployments or {})
        self.groups: list[DeploymentGroup] = []
        self.monitor_options = monitor_options
        self.record_history = record_history
        self.specs = list(specs)
        self.host_names = [s.name for s in self.specs]
        self._backend_factory = backend_factory
        self._clock = clock
        self._ui = ui
        self._calc = calc
        self.readonly = readonly
        self._panes: list[HostPane] = []
        self._pane_by_name: dict[str, HostPane] = {}
        self._tabs: TabbedContent | None = None
        self._fleet_summary: FleetSummary | None = None
        self.banners_expanded = False  # b: every banner (and the fleet summary) in full

    def _pane(self, spec: HostSpec, *, shown: bool = True) -> HostPane:
        return HostPane(
            spec,
            backend_factory=self._backend_factory,
            clock=self._clock,
            ui=self._ui,
            calc=self._calc,
            readonly=self.readonly,
            monitor_options=self.monitor_options,
            record_history=self.record_history,
            shown=shown,
            pace_hidden=len(self.specs) >= PACE_HIDDEN_FROM,
            id=f"pane-{spec.name}",
        )

    def compose(self) -> ComposeResult:
        yield ZoomHeader()
        panes = [self._pane(spec, shown=i == 0) for i, spec in enumerate(self.specs)]  # the first tab shown
        by_name = {p.host_name: p for p in panes}
        for name, dep in self.deployments.items():
            if len(dep.nodes) > 1 and all(n in by_name for n in dep.nodes):
                self.groups.append(DeploymentGroup(name, [by_name[n] for n in dep.nodes], hang_s=dep.hang_seconds))
        if len(self.specs) > 1:
            yield FleetSummary(self.host_names, expanded=False)
            with TabbedContent(id="hosts"):
                for spec, pane in zip(self.specs, panes, strict=True):
                    with TabPane(spec.name, id=f"host-{spec.name}"):
                        yield pane
        else:
            yield panes[0]
        yield KeysFooter()

    def on_mount(self) -> None:
        try:  # before the first frame, so that the footer's first keys are the log's
            self._focus_log()
        except NoMatches:
            pass
        self.call_after_refresh(self._focus_log)
        # one timer for every host (32 hosts with a timer each made 32 wake-ups and repaints a
        # second, at 32 different moments)
        self.set_interval(1.0, self.tick, name="host-tick")
        if len(self.specs) > 1:
            self.set_interval(0.25, self.warm_up, name="warm-up")

    def warm_up(self) -> bool:
        """A hidden host's calculator fields, built in the background — one pane at a time,
        in tab order, at most four a second, and only when no key came for ``WARM_UP_QUIET``
        seconds — so that showing it for the first time does not mount them in the key's way.
        True when a pane was warmed."""
        app = self.app
        if isinstance(app, KvtuiApp) and time.monotonic() - app.last_input < WARM_UP_QUIET:
            return False
        return any(pane.warm_up() for pane in self.panes)

    def tick(self) -> None:
        """Once a second: each pane ticks (the shown one refreshes its clocks and stall notice),
        and the fleet summary takes every host's row in one repaint."""
        rows = [pane.tick_row() for pane in self.panes]
        for group in self.groups:
            group.tick()
        if len(self.specs) > 1:
            self._fleet().update_rows(rows)
        if self.maximized is not None:
            self._mirror_header()

    def _mirror_header(self) -> None:
        """The zoom's header says what the active host's header says."""
        pane = self.active_pane
        if pane is not None:
            self.query_one(ZoomHeader).mirror(pane.query_one(HostBar))

    def _fleet(self) -> FleetSummary:
        fleet = self._fleet_summary
        if fleet is None or not fleet.is_attached:
            fleet = self._fleet_summary = self.query_one(FleetSummary)
        return fleet

    async def _on_layout(self, message: messages.Layout) -> None:
        """A widget in a hidden host's tab asked for a layout pass of the screen (its size may have
        changed): nothing on screen moves, so there is none — the tab gets one when it is shown
        (Textual has already dropped the arrangements its change made stale). With many hosts
        these passes (~100 ms each here) were most of what made keys slow. Anything else goes on
        to Textual's handler."""
        if len(self.specs) > 1 and any(
            isinstance(node, Widget) and not node.display for node in message.widget.ancestors
        ):
            message.prevent_default()
            message.stop()

    def _focus_log(self) -> None:
        pane = self.active_pane
        if pane is not None and pane.log_view.is_attached:
            self.set_focus(pane.log_view)  # now: keys already typed after this one follow it
            if self.focused is not pane.log_view:  # not focusable yet (before the first layout)
                pane.log_view.focus()

    # ---- which host ------------------------------------------------------------------------

    @property
    def panes(self) -> list[HostPane]:
        # found once: with many hosts a query walks thousands of widgets, and the bindings ask for
        # the active pane on every key
        if len(self._panes) != len(self.specs) or not all(p.is_attached for p in self._panes):
            self._panes = list(self.query(HostPane))
            self._pane_by_name = {p.host_name: p for p in self._panes}
        return list(self._panes)

    @property
    def active_pane(self) -> HostPane | None:
        if len(self.specs) > 1:
            tabs = self._tabs
            if tabs is None or not tabs.is_attached:
                tabs = self._tabs = self.query_one(TabbedContent)
            active = tabs.active
            if not active:
                return None
            self.panes  # noqa: B018 (fills the index)
            pane = self._pane_by_name.get(active.removeprefix("host-"))
            if pane is None:
                raise NoMatches(f"no pane for tab {active!r}")
            return pane
        panes = self.panes
        return panes[0] if panes else None

    @property
    def changeable_pane(self) -> HostPane | None:
        """The active pane if kvtui may edit or restart its host (not a readonly one)."""
        pane = self.active_pane
        return pane if pane is not None and not pane.readonly else None

    def switch_host(self, name: str) -> None:
        if name not in self.host_names or len(self.specs) < 2:
            return
        app = self.app
        if isinstance(app, KvtuiApp):
            app.hold_gc_until_drawn()  # a palette pick or a tab click as much as a key
        self._show_only(name)  # its widgets catch up before the tab's first frame
        self.query_one(TabbedContent).active = f"host-{name}"

    def _show_only(self, name: str) -> None:
        """Tell each pane whether it is on screen (hidden ones keep data only)."""
        for pane in self.panes:
            if pane.host_name != name:
                pane.set_shown(False)
        for pane in self.panes:
            if pane.host_name == name:
                pane.set_shown(True)

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        name = (event.pane.id or "").removeprefix("host-")
        self._show_only(name)  # a tab clicked, or the palette's switch
        self._fleet().set_active(name)
        pane = self.active_pane
        if pane is not None:
            pane.gpu_plot.redraw_if_needed()
            self.call_after_refresh(pane.log_view.focus)
        self.refresh_bindings()

    @on(HostPane.Summary)
    def _summary(self, event: HostPane.Summary) -> None:
        event.stop()
        if len(self.specs) > 1:
            self._fleet().update_row(event.row)

    @on(CalculatorPanel.Computed)
    def _computed(self, event: CalculatorPanel.Computed) -> None:
        event.stop()
        pane = self.active_pane
        if pane is not None and event.panel is not pane.calculator:
            return  # another host's: the keys shown are the active host's
        self.refresh_bindings()  # "explain" is enabled once there is a prediction
        self.call_after_refresh(self.refresh_bindings)

    @on(HostPane.Connected)
    def _connected(self, event: HostPane.Connected) -> None:
        event.stop()
        self.refresh_bindings()  # what the host allows (restart) is known once it is reached

    @on(CalculatorPanel.Left)
    def _left_calculator(self, event: CalculatorPanel.Left) -> None:
        event.stop()
        if self.maximized is not None and self._in_hidden_column(self.maximized):
            self.minimize()
        self._focus_log()

    @on(CalculatorPanel.EditingChanged)
    def _editing_changed(self, event: CalculatorPanel.EditingChanged) -> None:
        event.stop()
        self.refresh_bindings()  # the footer shows the editing keys while a flag is edited

    # ---- bindings ---------------------------------------------------------------------------

    def command_bindings(self) -> list[Binding]:
        return [b for b in MAIN_BINDINGS if isinstance(b, Binding)]

    def palette_commands(self) -> list[Command]:
        """What the command palette (``KvtuiCommands``) offers on this screen."""
        return main_screen_commands(self)

    def typing(self) -> bool:
        """A text field has the keys (the find bar, a calculator flag being edited)."""
        focused = self.focused
        return isinstance(focused, Input) or (isinstance(focused, CalculatorPanel) and focused.editing is not None)

    def _printable_only(self, action: str) -> bool:
        """Every key bound to ``action`` (remaps applied) types a character."""
        keymap = self.app.config.keymap if isinstance(self.app, KvtuiApp) else {}
        keys = [
            key.strip()
            for b in MAIN_BINDINGS
            if isinstance(b, Binding) and b.action.split("(")[0] == action
            for key in (keymap.get(b.id or "", b.key)).split(",")
        ]
        return bool(keys) and all(is_printable_key(k) for k in keys)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        pane = self.active_pane
        if self.app.screen is self and self.typing() and self._printable_only(action):
            return False  # typed into the field (and not offered in the footer meanwhile)
        if action in ("host", "host_number"):
            if len(self.specs) < 2:
                return False  # one host: nothing to switch to
            if action == "host_number" and parameters and int(str(parameters[0])) > len(self.specs):
                return False
        if action == "demo_speed" and (pane is None or not pane.spec.config.demo or pane.readonly):
            return False
        if action == "next_node" and (pane is None or pane.group is None):
            return False  # a deployment's node only
        if action == "cancel_change" and (pane is None or pane.busy is None or self.app.screen is not self):
            return False  # offered (in the footer too) while a change runs, not while its dialog asks
        if action in CHANGES_HOST or action == "tune":
            if pane is None or pane.readonly or getattr(pane.backend, "recorded", False):
                return False  # hidden: readonly hosts and recordings offer nothing that changes them
            if action == "restart":
                return pane.can_restart()
        if action == "explain" and pane is not None and pane.calculator.prediction is None:
            return None
        return True

    def on_key(self, event: events.Key) -> None:
        """A change key on a host that offers none (a recording, a readonly host) says why
        nothing happens instead of nothing at all (its binding is hidden and disabled)."""
        pane = self.active_pane
        if pane is None or self.typing():
            return
        recorded = getattr(pane.backend, "recorded", False)
        if not (recorded or pane.readonly):
            return
        actions = {b.action for b in self._bindings.key_to_bindings.get(event.key, [])}
        if not actions & (CHANGES_HOST | {"tune"}):
            return
        event.stop()
        if recorded:
            self.notify(f"{pane.host_name} is a recorded boot (an incident bundle): nothing to restart, apply or "
                        "roll back here — kvtui connect HOST for the live host", severity="warning")
        else:
            self.notify(f"{pane.host_name} is readonly: kvtui never edits or restarts it", severity="warning")

    # ---- actions ------------------------------------------------------------------------------

    def _view(self) -> LogView | None:
        pane = self.active_pane
        return pane.log_view if pane is not None else None

    def action_quit(self) -> None:
        """Quit; while an apply, rollback or restart is running, ask first (quitting stops
        following it, and with it the automatic rollback)."""
        busy = list({id(p.changes): p.changes for p in self.panes if p.busy is not None}.values())
        if not busy:
            self.app.exit()
            return
        what = "; ".join(f"{c.busy} on {c.name}" for c in busy)
        body = (
            f"{what[0].upper()}{what[1:]} is still running.\n\n"
            "Quitting stops following it: what was written stays, a restart already issued goes on, "
            "and no automatic rollback happens."
        )

        def done(answer: bool | None) -> None:
            if answer:
                self.app.exit()

        self.app.push_screen(ConfirmScreen("Quit while a change is running?", body, confirm_label="Quit"), done)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self.key_rows()))

    def key_rows(self) -> list[tuple[str, str, str]]:
        """(key, description, id) of every binding, with the user's remaps applied."""
        rows: list[tuple[str, str, str]] = []
        seen: set[str] = set()
        for key, active in self.active_bindings.items():
            binding = active.binding
            if binding.id is None or binding.id in seen:
                continue
            if not active.enabled and self.check_action(binding.action.split("(")[0], ()) is False:
                continue
            seen.add(binding.id)
            rows.append((self.app.get_key_display(binding) or key, binding.description, binding.id))
        order = {b.id: i for i, b in enumerate(self.command_bindings())}
        rows.sort(key=lambda r: order.get(r[2], 999))
        return rows

    def action_search(self, forward: bool = True) -> None:
        pane = self.active_pane
        if pane is not None:
            pane.log_panel.open_find("search", forward=forward)

    def action_filter(self) -> None:
        pane = self.active_pane
        if pane is not None:
            pane.log_panel.open_find("filter")

    def action_find(self, forward: bool) -> None:
        view = self._view()
        if view is not None:
            if view.search_query is None:
                self.notify("nothing to repeat: search with / first", severity="warning", timeout=3)
                return
            view.finder.repeat_search(same=forward)  # n: the search's own direction, N: the other

    def action_follow(self) -> None:
        view = self._view()
        if view is not None:
            view.toggle_follow()

    def action_error(self, forward: bool) -> None:
        view = self._view()
        if view is not None:
            view.next_error(forward)

    def action_timestamps(self) -> None:
        view = self._view()
        if view is not None:
            view.timestamps = not view.timestamps

    def action_wrap(self) -> None:
        view = self._view()
        if view is not None:
            view.wrap = not view.wrap

    def action_mark(self) -> None:
        view = self._view()
        if view is not None and view.toggle_mark() is None:
            self.notify("no line to mark yet", severity="warning", timeout=3)

    def action_copy_line(self) -> None:
        view = self._view()
        if view is not None:
            view.copy_line()

    def action_copy_boot(self) -> None:
        """``Y``: the boot panel's summary — its phases and figures, as shown — to the clipboard."""
        pane = self.active_pane
        if pane is None or pane.boot is None:
            self.notify("no boot to copy yet", severity="warning", timeout=3)
            return
        index = pane.boot_index + 1 if pane.boot_index is not None else len(pane.boots)
        head = f"{pane.host_name} · boot {index} · {pane.boot.status.value}"
        text = "\n".join([head, pane.query_one(PhaseTimeline).copy_text(), pane.query_one(BootFigures).copy_text()])
        self.app.copy_to_clipboard(text + "\n")
        self.notify(f"copied boot {index}'s summary ({len(text.splitlines())} lines)", timeout=3)

    def action_calculator(self) -> None:
        pane = self.active_pane
        if pane is None:
            return
        if not pane.calculator.fields:
            self.notify("the calculator needs a boot that sized its KV pool", severity="warning", timeout=4)
            return
        self._bring_into_view(pane.calculator)
        pane.calculator.focus_first()

    def action_explain(self) -> None:
        pane = self.active_pane
        if pane is None:
            return
        calc = pane.calculator
        self.app.push_screen(ExplainScreen(calc.explain_lines(), calc.reason_lines(), calc.verdict))

    def action_processes(self) -> None:
        pane = self.active_pane
        if pane is not None:
            shown = pane.toggle_processes()
            gpu = pane.query_one("#gpu-panel")
            # the table takes the keys while shown (j/k/g/G move it, issue 22 #10), the log after
            (pane.query_one(ProcessTable) if shown else pane.log_view).focus()
            if shown:
                self._bring_into_view(gpu)
            elif self.maximized is gpu and self.narrow:
                self.minimize()

    # ---- terminal size: zoom, panels not shown ------------------------------------------------------

    @property
    def narrow(self) -> bool:
        return self.size.width < self.NARROW_BELOW

    def on_resize(self, event: events.Resize) -> None:
        short = event.size.height < self.SHORT_BELOW
        for pane in self.panes:
            pane.set_compact(short)

    def _panel_of(self, widget: Widget | None) -> Widget | None:
        """The panel ``widget`` is in (itself when it is one)."""
        node: Any = widget
        while node is not None and not isinstance(node, Screen):
            if isinstance(node, Panel):
                return node
            node = node.parent
        return None

    def _in_hidden_column(self, widget: Widget | None) -> bool:
        panel = self._panel_of(widget)
        return panel is not None and self.narrow and panel.id in self.SIDE_PANELS

    def _bring_into_view(self, widget: Widget) -> None:
        """Where ``widget``'s panel is not laid out (the right-hand column of a narrow terminal),
        open it zoomed; back on a panel that is laid out, leave the zoom that was opened so."""
        panel = self._panel_of(widget)
        if panel is None:
            return
        if self._in_hidden_column(panel):
            if self.maximized is not panel:
                self.maximize(panel, container=False)
        elif self.maximized is not None and self._in_hidden_column(self.maximized):
            self.minimize()

    def action_host(self, step: int) -> None:
        """``]`` / ``[``: the next / previous host's tab (round the end)."""
        pane = self.active_pane
        if pane is None or len(self.host_names) < 2:
            return
        index = self.host_names.index(pane.host_name)
        self.switch_host(self.host_names[(index + step) % len(self.host_names)])

    def action_next_node(self) -> None:
        """``#`` on a deployment's node: the next node's console (its tab, round the end)."""
        pane = self.active_pane
        if pane is not None and pane.group is not None:
            self.switch_host(pane.group.next_pane(pane).host_name)

    def action_host_number(self, number: int) -> None:
        """``1``-``9``: the host in that tab."""
        if 1 <= number <= len(self.host_names):
            self.switch_host(self.host_names[number - 1])

    def action_next_theme(self) -> None:
        """``T``: the next of kvtui's themes (the palette offers every theme)."""
        app = self.app
        names = [n for n in getattr(app, "kvtui_themes", []) if n in app.available_themes]
        if not names:
            return
        current = app.theme
        app.theme = names[(names.index(current) + 1) % len(names)] if current in names else names[0]
        self.notify(f"theme {app.theme}", timeout=2)

    def action_demo_speed(self) -> None:
        """``D`` on a demo host: restart its simulation in real time (×1), or at its configured
        speed again — the same restart ``R`` does (logged, marked in the log)."""
        pane = self.active_pane
        if pane is None or not pane.spec.config.demo:
            return
        pane.changes.toggle_demo_speed()

    def action_zoom(self) -> None:
        """``z``: the focused panel fills the screen; again, back to the layout."""
        if self.maximized is not None:
            self.minimize()
            return
        panel = self._panel_of(self.focused)
        if panel is not None:
            self.maximize(panel, container=False)

    def watch_maximized(self, previous: Widget | None, maximized: Widget | None) -> None:
        if maximized is not None:
            self._mirror_header()
        if maximized is None and self._in_hidden_column(self.focused):
            self._focus_log()  # the zoomed panel was one the layout does not show: back to the log
        self.refresh_bindings()

    def action_banners(self) -> None:
        """``b``: every banner in full (the failed boot's message and hint, the change's steps,
        a line per host); again, one line each (issue 22 #13)."""
        self.banners_expanded = expanded = not self.banners_expanded
        for pane in self.panes:
            pane.set_banners_expanded(expanded)
        if len(self.specs) > 1:
            self._fleet().set_expanded(expanded)

    def action_history(self, diff: bool = False) -> None:
        """``H``: the host's remembered boots; ``d``: opened on the newest boot's diff against the
        last good one (issue 13)."""
        pane = self.active_pane
        if pane is not None and pane.group is not None:  # the deployment's starts, node by node
            group = pane.group
            self.app.push_screen(DeploymentHistoryScreen(group.name, group.node_names(), diff_newest=diff))
        elif pane is not None:
            self.app.push_screen(HistoryScreen(pane.host_name, diff_newest=diff))

    def action_fleet(self) -> None:
        """``F``: the fleet screen (``kvtui.ui.fleet.screen``); on a host opened from it, back to it."""
        app = self.app
        if isinstance(app, KvtuiApp):
            app.show_fleet()

    def action_bundle(self) -> None:
        """``B``: the boot's incident bundle (``kvtui.ui.history.screen.write_console_bundle``),
        with a screenshot of the console as it is now; a notification names the file."""
        pane = self.active_pane
        if pane is not None:
            self._write_bundle(pane, self.app.export_screenshot())

    @work(group="bundle", exclusive=True, exit_on_error=False, description="bundle")
    async def _write_bundle(self, pane: HostPane, svg: str) -> None:
        writer = getattr(self.app, "bundle_writer", None)
        if writer is None:
            self.notify("this console writes no bundles (kvtui connect's does; or: kvtui bundle HOST)",
                        title="bundle", severity="warning", timeout=8)
            return
        try:
            path = await writer(pane, svg)
        except (ValueError, OSError) as exc:
            self.notify(str(exc), title="bundle", severity="warning", timeout=8)
            return
        self.notify(f"wrote {path}", title="bundle", timeout=10)

    def action_unrecognised(self) -> None:
        """``U``: the boot's startup lines no rule recognised, by shape (numbers as N), to paste
        into a report about a new engine build."""
        pane = self.active_pane
        boot = pane.boot if pane is not None else None
        if boot is None or not boot.unrecognised:
            self.notify("no unrecognised startup lines in this boot", timeout=3)
            return
        n = sum(u.count for u in boot.unrecognised)
        shown = boot.unrecognised[:30]
        body = "\n".join(f"{u.count:>5}×  {u.shape}" for u in shown)
        if len(boot.unrecognised) > len(shown):
            body += f"\n… {len(boot.unrecognised) - len(shown)} more shapes (kvtui replay LOG --unknown lists all)"
        self.app.push_screen(NoticeScreen(f"{n} unrecognised startup lines (numbers as N)", body, error=False))

    def action_restart(self) -> None:
        """``R``: a confirm that names what will run, then the service layer's restart."""
        pane = self.changeable_pane
        if pane is None:
            return
        if pane.busy is not None:  # ask (it used to refuse): cancel it, or stop following it, and restart
            running = pane.busy
            after = "stops following it (its restart goes on)" if pane.changes.restart_issued else "cancels it first"
            body = (f"{running[0].upper()}{running[1:]} is running on {pane.host_name}.\n\n"
                    f"Restarting now {after}, then restarts the server.")

            def replace_it(answer: bool | None) -> None:
                if answer and pane.busy == running:
                    pane.changes.cancel_change()
                    self.call_after_refresh(self.action_restart)

            self.app.push_screen(ConfirmScreen(f"Restart {pane.host_name} now?", body), replace_it)
            return
        if pane.group is not None:
            pane.group.ask_restart()  # every node, node 0 first
            return
        if pane.backend is None:
            self.notify(f"{pane.host_name} is not connected yet", severity="warning", timeout=4)
            return
        plan = plan_restart(pane.host_name, pane.spec.config, pane.backend, follow=True)
        if plan.refused:
            self.notify(plan.refusals[0].reason, title="restart", severity="warning", timeout=8)
            return
        boot = pane.boot
        state = "no boot seen yet"
        if boot is not None:
            state = f"the current boot is {boot.status.value}"
            if boot.status is not BootStatus.READY and boot.phase is not None:  # not "ready in ready"
                state += f" in {fmt.phase_label(boot.phase)}"
        steps = "\n".join(f"  {st.title}" + (f"\n    $ {st.command}" if st.command else "") for st in plan.steps)
        body = (
            f"Restart the server on {pane.host_name}?\n\n"
            f"It stops now ({state}) and a new boot starts. The log marks the restart.\n\n{steps}"
        )

        def done(answer: bool | None) -> None:
            if answer:
                pane.changes.start_restart(plan)

        self.app.push_screen(ConfirmScreen(f"Restart {pane.host_name}", body), done)

    def _on_changeable(self, act: Callable[[HostPane], object]) -> None:
        """``act`` on the active pane, if kvtui may change its host (``changeable_pane``)."""
        if (pane := self.changeable_pane) is not None:
            act(pane)

    def action_apply(self) -> None:
        self._on_changeable(lambda pane: pane.changes.start_apply())

    def action_serving_apply(self) -> None:
        self._on_changeable(lambda pane: pane.serving.apply_suggestion())

    def action_rollback(self) -> None:
        self._on_changeable(lambda pane: pane.changes.start_rollback())

    def action_tune(self) -> None:
        self._on_changeable(lambda pane: pane.changes.start_tune())

    def action_panel(self, step: int) -> None:
        pane = self.active_pane
        if pane is None:
            return
        panels = pane.panels()
        focused = self.focused
        current = 0
        for i, panel in enumerate(panels):
            if focused is not None and (focused is panel or panel in focused.ancestors):
                current = i
                break
        else:
            current = -1 if step > 0 else 0
        target = panels[(current + step) % len(panels)]
        if isinstance(target, CalculatorPanel) and not target.fields:
            target = panels[(current + 2 * step) % len(panels)]
        self._bring_into_view(target)
        if isinstance(target, CalculatorPanel):
            target.focus_panel()  # not a field: z, x … stay the console's keys (Enter or c edits)
        else:
            self.set_focus(target)

    def action_cancel_change(self) -> None:
        pane = self.active_pane
        if pane is not None and pane.changes.cancel_change() is not None:
            self.refresh_bindings()

    def action_escape(self) -> None:
        if isinstance(self.focused, Input | CalculatorPanel):
            self._focus_log()
            if self.maximized is not None and self._in_hidden_column(self.maximized):
                self.minimize()
            return
        pane = self.active_pane
        if pane is not None and pane.changes.stop_tune():
            return  # a tune stops after the step in progress
        if pane is not None and pane.action_banner.shown:
            # running, it goes on in the background (the banner comes back with the outcome)
            pane.action_banner.hide()


class KvtuiApp(App[int]):
    """The live console."""

    CSS_PATH = "kvtui.tcss"
    TITLE = "kvtui"
    COMMAND_PALETTE_BINDING = "ctrl+p"

    def __init__(
        self,
        specs: Sequence[HostSpec],
        *,
        backend_factory: BackendFactory,
        config: Config | None = None,
        readonly: bool = False,
        clock: Clock = time.time,
        theme: str | None = None,
        monitor_options: MonitorOptions | None = None,
        record_history: bool = True,
        freeze_gc: bool = False,
        probe_ready: bool = False,
        bundle_writer: BundleWriter | None = None,
        fleet_source: FleetSource | None = None,
        deployments: Sequence[str] = (),
    ) -> None:
        """``deployments``: the ``[deployments.NAME]`` whose nodes are among ``specs`` (each of
        several nodes: a group of their panes, ``kvtui.ui.deployment``).
        ``monitor_options``: how each ``HostMonitor`` runs (tests shorten its intervals);
        ``record_history``: the monitors record the boots they see (not a bundle's).
        ``freeze_gc``: once the console is built, its objects leave the garbage collector's scans
        (``kvtui connect``, which runs one console per process, sets it; see ``_freeze_gc``).
        ``probe_ready``: a boot that says ready is asked for one token (``kvtui.hosts.probe``) and
        the boot panel shows the answer (``kvtui connect`` sets it; hosts with ``probe = false``
        are not asked)."""
        self._variable_cache: dict[str, dict[str, str]] = {}  # read by App.__init__ (CSS variables)
        super().__init__()
        self.freeze_gc = freeze_gc
        self.probe_ready = probe_ready
        # ``B``: writes the shown boot's incident bundle (``kvtui.commands.bundle.write_console_bundle``,
        # handed in by ``kvtui connect``: the views import no command)
        self.bundle_writer = bundle_writer
        self.gc_pacer = GcPacer()
        self.last_input = -1e18  # time.monotonic() of the last key, click or scroll
        # ``F``'s rows (``kvtui.ui.fleet.screen``; None: from [prometheus]); without hosts the
        # console is the fleet screen alone (``kvtui connect`` with no HOST and a [prometheus])
        self.fleet_source = fleet_source
        self.fleet_only = not specs
        if self.fleet_only and fleet_source is None and (config is None or config.prometheus is None):
            raise ValueError("KvtuiApp needs at least one host, or a [prometheus] for the fleet screen")
        self.specs = list(specs)
        self.config = config or Config()
        self.deployments = {n: d for n in deployments if (d := self.config.deployment(n)) is not None}
        self.readonly = readonly
        self.clock = clock
        self._backend_factory = backend_factory
        self.monitor_options = monitor_options
        self.record_history = record_history
        loaded = load_themes()
        for t in loaded.themes:
            self.register_theme(t)
        self.kvtui_themes = [t.name for t in loaded.themes]  # what ``T`` cycles through
        for name, builtin in list(self.available_themes.items()):
            if not usable_theme(builtin):
                self.unregister_theme(name)
        self.startup_problems: list[str] = list(loaded.problems)
        accepted = accepted_theme_names(loaded)  # `kvtui hosts --check` checks [ui] theme against the same list
        # ``--theme``, else the one last chosen with ``T`` or the palette (if still offered), else [ui] theme
        remembered = remembered_theme() if theme is None else None
        wanted = theme or (remembered if remembered in accepted else None) or self.config.ui.theme
        if wanted not in accepted:
            fallback = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
            self.startup_problems.append(
                f"theme {wanted!r} is not available (known: {', '.join(accepted)}); "
                f"using {fallback}"
            )
            wanted = fallback
        self.theme = wanted
        self.startup_problems.extend(self._keymap_problems(self.config.keymap))

    # ---- themes and keys ----------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's palette commands, less "Keys" (kvtui's own help, ``?``, lists every key with
        its id for ``[keymap]``; two key lists side by side in the palette was one too many)."""
        for command in super().get_system_commands(screen):
            if command.title != "Keys":
                yield command

    def get_theme_variable_defaults(self) -> dict[str, str]:
        theme = self.current_theme
        cached = self._variable_cache.get(theme.name)
        if cached is None:
            cached = self._variable_cache[theme.name] = theme_variable_defaults(theme)
        return cached

    @staticmethod
    def binding_ids() -> list[str]:
        ids = [b.id for b in MAIN_BINDINGS if isinstance(b, Binding) and b.id]
        return [*ids, *WIDGET_BINDING_IDS, *FLEET_BINDING_IDS]

    def _keymap_problems(self, keymap: dict[str, str]) -> list[str]:
        known = set(self.binding_ids())
        where = f"{self.config.path}" if self.config.path else "hosts.toml"
        return [
            f"{where} [keymap]: unknown binding id {bid!r} (known: {', '.join(sorted(known))})"
            for bid in keymap
            if bid not in known
        ]

    # ---- lifecycle ----------------------------------------------------------------------------

    def get_default_screen(self) -> Screen[None]:
        if self.fleet_only:
            return self.fleet_screen(standalone=True)
        return MainScreen(
            self.specs,
            backend_factory=self._backend_factory,
            clock=self.clock,
            ui=self.config.ui,
            calc=self.config.calc,
            readonly=self.readonly,
            monitor_options=self.monitor_options,
            record_history=self.record_history,
            deployments=self.deployments,
        )

    def on_mount(self) -> None:
        if self.freeze_gc:
            self.call_after_refresh(self._freeze_gc)
        known = set(self.binding_ids())
        keymap = {k: v for k, v in self.config.keymap.items() if k in known}
        if keymap:
            self.set_keymap(keymap)
        for problem in self.startup_problems:
            self.notify(problem, title="kvtui", severity="warning", timeout=15)
        self.theme_changed_signal.subscribe(self, self._remember_theme)

    def _remember_theme(self, theme: Theme) -> None:
        """A theme chosen (``T``, the palette) is the one the next console starts with (written
        off the event loop; ``--theme`` still wins)."""
        self.run_worker(partial(self._write_theme, theme.name), thread=True, group="remember-theme",
                        exclusive=True, exit_on_error=False, description="remember the theme")

    def _write_theme(self, name: str) -> None:
        problem = remember_theme(name)
        if problem is not None:
            self.call_from_thread(self.notify, problem, title="kvtui", severity="warning", timeout=5)

    def _freeze_gc(self) -> None:
        """The console's widgets, styles and caches live as long as the process: move them out of
        the garbage collector's scans. Each full collection otherwise walked all of them — with
        many hosts ~600k objects, a 0.3-0.5 s pause every few seconds (a key waited for it).
        From here on full collections are paced away from keystrokes (``GcPacer``)."""
        self.gc_pacer.start()
        self.set_interval(0.5, self.gc_pacer.tick, name="gc-pacer")

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown, events.MouseScrollDown, events.MouseScrollUp)):
            self.last_input = time.monotonic()
            self.gc_pacer.input_seen()
            self.hold_gc_until_drawn()
        await super().on_event(event)

    def hold_gc_until_drawn(self) -> None:
        """No garbage collection until the next frame is drawn (``GcPacer.hold``; once paced)."""
        if self.gc_pacer.hold():
            self.call_after_refresh(self.gc_pacer.release)

    def on_unmount(self) -> None:
        self.gc_pacer.stop()

    @property
    def main_screen(self) -> MainScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, MainScreen)
        return screen

    async def action_quit(self) -> None:
        """Textual's ``ctrl+q`` (a priority binding of the app): the same question ``q`` asks
        while a change is running; on the question itself, or before the console exists, quit."""
        screen = self.screen_stack[0] if self.screen_stack else None
        if isinstance(screen, MainScreen) and not isinstance(self.screen, ConfirmScreen):
            screen.action_quit()
            return
        self.exit()

    # ---- the fleet screen (issue 26) ---------------------------------------------------------

    def fleet_screen(self, *, standalone: bool = False) -> Screen[None]:
        source = self.fleet_source
        if source is None and self.config.prometheus is not None:
            source = PromFleetSource(self.config.prometheus)
        return FleetScreen(source, hosts=self.config.hosts, clock=self.clock, standalone=standalone,
                           config_path=str(self.config.path) if self.config.path else None)

    def show_fleet(self) -> None:
        """``F``: back to the fleet screen under this one (a host opened from it), else open one."""
        below = [s for s in self.screen_stack[:-1] if isinstance(s, FleetScreen)]
        if below:
            while not isinstance(self.screen, FleetScreen):
                self.pop_screen()
            return
        self.push_screen(self.fleet_screen())

    def open_host(self, name: str) -> None:
        """Drill-in from the fleet screen to the hosts.toml host ``name``: its tab when this console
        shows it, else a console of that one host over the fleet screen (``F`` comes back)."""
        first = self.screen_stack[0] if self.screen_stack else None
        if isinstance(first, MainScreen) and name in first.host_names:
            main: MainScreen = first
            while self.screen is not main:
                self.pop_screen()
            main.switch_host(name)
            return
        spec = HostSpec(name, self.config.host(name))
        screen = MainScreen([spec], backend_factory=self._backend_factory, clock=self.clock, ui=self.config.ui,
                            calc=self.config.calc, readonly=self.readonly, monitor_options=self.monitor_options,
                            record_history=self.record_history,
                            screen_id=f"main-{name}")
        self.push_screen(screen)

    def action_switch_host(self, name: str) -> None:
        self.main_screen.switch_host(name)
