"""One host's console: it owns the host's monitor (an async worker living exactly as long as the
pane) and hands each widget the data it renders."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar, cast

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from kvtui.boot import Boot, BootStatus
from kvtui.config import CalcConfig, HostConfig, UiConfig
from kvtui.engines.events import Engine, FailureKind
from kvtui.engines.orphans import hint_text
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.history import boot_doc, recorder_for
from kvtui.history.diff import since_last_good
from kvtui.history.eta import BootEta, estimate, past_boots, slow_reason
from kvtui.history.eta import clock as eta_clock
from kvtui.hosts import service
from kvtui.hosts.backend import BackendError, ConnState, ConnStatus, HostBackend
from kvtui.hosts.orphans import host_orphans
from kvtui.hosts.probe import boot_port, can_probe, mark_not_serving, probe, served_model
from kvtui.lazy import lazy_module
from kvtui.monitor import BootState, ConnUpdate, GpuUpdate, HostMonitor, LogBatch, MonitorOptions, MonitorUpdate
from kvtui.ui import formatting as fmt
from kvtui.ui.calc.panel import CalculatorPanel
from kvtui.ui.changes.action import ActionBanner
from kvtui.ui.changes.controller import ChangeController, ChangeNode, demo_target
from kvtui.ui.deployment import DeploymentStrip
from kvtui.ui.gpu.widgets import (
    ForeignWarning,
    GpuBars,
    GpuHeader,
    GpuHistoryPlot,
    GpuNote,
    GpuSummary,
    PhaseBand,
    ProcessTable,
    boot_origin,
    phase_bands,
    short_gpu_name,
)
from kvtui.ui.history.changed import ChangedStrip
from kvtui.ui.log.panel import LogPanel
from kvtui.ui.log.view import LogView
from kvtui.ui.serving.panel import ServingSampler
from kvtui.ui.serving.widgets import KvTimeline, ServingBanner, ServingRow
from kvtui.ui.stall import StallDetector
from kvtui.ui.widgets.banner import Banner
from kvtui.ui.widgets.boot import BootFigures, FailureBanner, KvUsage, PhaseTimeline, ProbeLine, StallNotice
from kvtui.ui.widgets.host import ConnBanner, FleetRow, HostBar, HostInfo
from kvtui.updates import LinePart

if TYPE_CHECKING:
    from kvtui import changes
    from kvtui.history.doc import BootDoc
    from kvtui.hosts.probe import ProbeResult
    from kvtui.ui.deployment import DeploymentGroup
else:
    changes = lazy_module("kvtui.changes")  # lazy: imports kvcalc (test_ui_startup): +65 ms CPU

Clock = Callable[[], float]
BackendFactory = Callable[[str, HostConfig], HostBackend]
W = TypeVar("W", bound=Widget)
HIDDEN_FLUSH_INTERVAL = 0.25  # seconds between a hidden pane's batches (``pace_hidden``)
HIDDEN_SERVING_INTERVAL = 1.0  # seconds between its serving-only boot changes


def offline_text(status: ConnStatus | None) -> str | None:
    """The connection's state in a few words while the host is not reached (None: connected)."""
    if status is None:
        return "◌ connecting"
    if status.state is ConnState.CONNECTED:
        return None
    if status.state is ConnState.RECONNECTING:
        wait = f" in {max(0, round(status.retry_in))}s" if status.retry_in is not None else ""
        return f"◌ not reached · reconnecting{wait}"
    if status.state is ConnState.CONNECTING:
        return "◌ connecting"
    if status.state is ConnState.CLOSED:
        return "○ connection closed"
    return f"✖ not reached: {status.state.value}"


@dataclass(frozen=True, slots=True)
class HostSpec:
    """A host to open: its name and its configuration."""

    name: str
    config: HostConfig


def host_info(spec: HostSpec, readonly: bool) -> HostInfo:
    cfg = spec.config
    if cfg.demo:
        source = "unit (simulated)"
    elif cfg.unit:
        source = f"unit {cfg.unit}"
    elif cfg.log_file:
        source = f"log {cfg.log_file}"
    elif cfg.container:
        source = f"container {cfg.container}"
    else:
        source = "?"
    gpus = ",".join(str(g) for g in cfg.gpus) if cfg.gpus else ""
    return HostInfo(
        name=spec.name,
        kind=cfg.kind,
        target=demo_target(cfg.demo_speed) if cfg.demo else cfg.target,
        source=source,
        readonly=readonly or cfg.readonly,
        gpus=gpus,
    )


class Panel(Vertical):
    """A bordered panel with a title; focusable panels take part in the tab cycle. Any panel can
    be zoomed to the whole screen (``z``)."""

    ALLOW_MAXIMIZE = True


class GpuPanel(Panel, can_focus=True):
    """The GPU panel (focusable so ``tab`` can land on it)."""

    def on_resize(self) -> None:
        for pane in self.ancestors:
            if isinstance(pane, HostPane):
                pane.gpu_subtitle()
                return


class HostPane(Vertical):
    """The whole console of one host (its host-changing actions: ``changes``, a ``ChangeController``;
    its serving view's sampler: ``serving``, a ``ServingSampler``)."""

    class Updates(Message):
        """A batch of monitor updates (the monitor flushes at most every ~50 ms)."""

        def __init__(self, updates: Sequence[MonitorUpdate]) -> None:
            super().__init__()
            self.updates = updates

    class Connected(Message):
        """The host's backend exists (the actions it allows can be known)."""

    class Summary(Message):
        """The host's one-line state changed (for the fleet summary)."""

        def __init__(self, row: FleetRow) -> None:
            super().__init__()
            self.row = row

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, HostPane.Summary) and message.row.name == self.row.name

    def __init__(
        self,
        spec: HostSpec,
        *,
        backend_factory: BackendFactory,
        clock: Clock,
        ui: UiConfig,
        calc: CalcConfig,
        readonly: bool = False,
        monitor_options: MonitorOptions | None = None,
        record_history: bool = True,
        shown: bool = True,
        pace_hidden: bool = False,
        id: str | None = None,
    ) -> None:
        """``monitor_options``: how its ``HostMonitor`` runs (the pane sets ``log_window`` and
        ``clock``; tests shorten the intervals); ``record_history``: the monitor records the boots
        it sees in the history (issue 13; not a bundle's). ``shown``: whether the pane starts on
        screen (False for a host whose tab is not the first); ``set_shown`` follows the tabs from
        there. ``pace_hidden`` (a console of many hosts): while hidden, the monitor hands over
        batches at most every ``HIDDEN_FLUSH_INTERVAL`` and serving-only boot changes at most every
        ``HIDDEN_SERVING_INTERVAL`` seconds (nothing is drawn from them; 31 hidden hosts serving
        made ~120 batches a second)."""
        super().__init__(id=id, classes="host-pane")
        self.pace_hidden = pace_hidden
        self._pace_base: tuple[float, float] | None = None  # the monitor's own (flush, serving)
        self._widgets: dict[type[Widget], Widget] = {}
        self._boot_panel: Widget | None = None
        self._shown = shown
        self._stale = False  # data changed while hidden: the widgets catch up when shown
        self.monitor_options = monitor_options or MonitorOptions()
        self.record_history = record_history
        self.spec = spec
        self.host_name = spec.name
        self.readonly = readonly or spec.config.readonly
        self.info = host_info(spec, self.readonly)
        self._backend_factory = backend_factory
        self.clock = clock
        self.ui_config = ui
        self.calc_config = calc
        self.backend: HostBackend | None = None
        self.monitor: HostMonitor | None = None
        self.status: ConnStatus | None = None
        self._status_at: float = 0.0  # clock time the status arrived (for the retry countdown)
        self.boot: Boot | None = None
        self.boot_index: int | None = None
        self.eta_history: list[BootDoc] = []  # the host's stored boots (phase ETAs)
        self.boots: list[Boot] = []
        self.samples: tuple[GpuSample, ...] = ()
        self.foreign: tuple[GpuProcess, ...] = ()
        self.stall = StallDetector(ui.stall_seconds)
        self.error: str | None = None
        self._basis_for: Boot | None = None  # the start-missing boot whose calibration was looked up
        # a gpu_busy boot whose host was asked for orphaned engine processes, and what they are
        self._orphans_for: Boot | None = None
        self._orphans_hint: str | None = None
        self.lines_received = 0
        self.batches_applied = 0  # monitor batches taken in (``up_to_date`` compares it)
        self._summary_posted: tuple[object, ...] | None = None  # the fleet row's state last posted
        self._history_said: str | None = None  # the history recorder's problem last shown (a toast)
        self._show_processes = False
        self.offline: str | None = None  # the connection's state while the host is not reached
        self.probes: dict[int, ProbeResult | None] = {}  # boot index -> the readiness probe (None: asking)
        self.changes = ChangeController(self, self, spec.name, on_demo_speed=self._show_demo_speed)  # a/u/R/D/O/ctrl+x
        self.serving = ServingSampler(self)  # the serving view (issue 24)
        # a node of a deployment (kvtui.ui.deployment): its strip, and ``changes`` is the group's
        self.group: DeploymentGroup | None = None

    # ---- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield HostBar(self.info)
        if self.group is not None:
            yield DeploymentStrip()  # the deployment's state (a node of one)
        yield ChangedStrip()  # what this boot does differently from the last good one
        yield ConnBanner()
        yield FailureBanner()
        yield StallNotice()
        yield ActionBanner()
        yield ServingBanner()  # the serving view's diagnosis, with the calculator's answer (K applies it)
        # The log takes the width left over (kvtui.tcss sizes the rest by terminal size): the boot
        # and its figures above it, the GPUs and the calculator in a column on the right. Narrow,
        # that column goes and its panels open zoomed (tab, c, p, z); short, the timeline and the
        # figures collapse to a few summary lines.
        with Horizontal(id="body"):
            with Vertical(id="center"):
                with Horizontal(id="top"):
                    with Panel(id="boot-panel", classes="panel"):
                        yield PhaseTimeline()
                        yield ProbeLine()
                        yield KvUsage()
                        yield ServingRow()  # the serving view (issue 24): the /metrics figures
                    with Panel(id="figures-panel", classes="panel"):
                        yield GpuSummary()
                        yield BootFigures()
                with Panel(id="log-panel", classes="panel"):
                    yield LogPanel(window=self.ui_config.log_lines)
            with Vertical(id="side"):
                with GpuPanel(id="gpu-panel", classes="panel"):
                    yield GpuHeader()
                    yield GpuBars()
                    yield GpuNote()
                    yield ForeignWarning()
                    yield GpuHistoryPlot()
                    yield KvTimeline()
                    yield ProcessTable()
                with Panel(id="calc-panel", classes="panel"):
                    yield CalculatorPanel(graph_margin_gib=self.calc_config.graph_margin_gib)

    def on_mount(self) -> None:
        self.query_one("#gpu-panel").border_title = "GPU memory"
        self.query_one("#boot-panel").border_title = "Boot"
        self.query_one("#log-panel").border_title = "Log"
        self.query_one("#figures-panel").border_title = "Figures"
        self.query_one("#calc-panel").border_title = "Calculator"
        self.calculator.leave_to = lambda: self.log_view
        self.set_banners_expanded(bool(getattr(self.screen, "banners_expanded", False)))  # one line each
        # the screen's one 1 s timer ticks every pane (``tick_row``). The monitor starts once the
        # first frame is out: its first batch (parser, GPU plot, calculator) is ~0.3 s of work
        # that used to hold the whole layout back
        self.call_after_refresh(self.run_monitor)

    # ---- widgets ------------------------------------------------------------------------------

    def _one(self, kind: type[W]) -> W:
        """The pane's (only) widget of ``kind``, found once: a batch touches a dozen of them and
        a query walks the pane's ~100 widgets each time."""
        widget = self._widgets.get(kind)
        if widget is None or not widget.is_attached:
            widget = self._widgets[kind] = self.query_one(kind)
        return cast(W, widget)

    @property
    def log_panel(self) -> LogPanel:
        return self._one(LogPanel)

    @property
    def log_view(self) -> LogView:
        return self._one(LogView)

    @property
    def calculator(self) -> CalculatorPanel:
        return self._one(CalculatorPanel)

    @property
    def action_banner(self) -> ActionBanner:
        return self._one(ActionBanner)

    @property
    def busy(self) -> str | None:
        """The host-changing action running ("an apply", …), else None."""
        return self.changes.busy

    def change_nodes(self) -> list[ChangeNode]:
        """The host as the one node of a change (``ChangeSite``); [] until connected."""
        boots = list(self.monitor.tracker.boots) if self.monitor is not None else []
        return [] if self.backend is None else [ChangeNode(self.host_name, self.spec.config, self.backend, boots)]

    def can_restart(self) -> bool | None:
        """False: hidden (readonly); None: shown but unavailable; True: available."""
        if self.readonly:
            return False
        return None if service.restart_unavailable(self.host_name, self.spec.config, self.backend) else True

    def _show_demo_speed(self, speed: float) -> None:
        self.info = replace(self.info, target=demo_target(speed))
        self.query_one(HostBar).info = self.info
        self.query_one(HostBar).refresh()

    @property
    def deployment_strip(self) -> DeploymentStrip | None:
        if self.group is None or not self.is_attached:
            return None
        try:
            return self._one(DeploymentStrip)
        except NoMatches:  # unmounted
            return None

    def calibration(self) -> tuple[Boot | None, list[Boot]]:
        """What the calculator is calibrated from: the boot and its host's boots; a deployment's node,
        the merged boot (P = min over every rank of every node)."""
        merged = self.group.merged_boot if self.group is not None else None
        return (merged, [merged]) if merged is not None else (self.boot, self.boots)

    @property
    def gpu_plot(self) -> GpuHistoryPlot:
        return self._one(GpuHistoryPlot)

    # ---- terminal size ------------------------------------------------------------------------------

    def set_compact(self, compact: bool) -> None:
        """A short terminal: the timeline and the figures say it in a few lines."""
        self._one(PhaseTimeline).set_compact(compact)
        self._one(BootFigures).set_compact(compact)
        self._one(KvUsage).set_compact(compact)  # no sparkline

    def set_banners_expanded(self, expanded: bool) -> None:
        """``b``: the banners in full, or one line each."""
        for banner in self.query(Banner):
            banner.set_expanded(expanded)
        if (strip := self.deployment_strip) is not None:
            strip.set_expanded(expanded)  # a deployment's: every row of its notes

    # ---- on screen or not -----------------------------------------------------------------------

    @property
    def shown(self) -> bool:
        """Whether the pane is on screen (its host's tab is the active one)."""
        return self._shown

    def set_shown(self, shown: bool) -> None:
        """The screen shows this pane (``True``) or another host's. A hidden pane keeps taking in
        its host's data — the log's lines, the boots, the GPU readings and history, the KV usage,
        the stall clock, the fleet summary's row — but touches no widget: with many hosts, hidden
        panes re-styling and re-laying out the screen made every key slow. Shown again, it brings
        every widget up to date before the next frame."""
        if shown == self._shown:
            return
        self._shown = shown
        self._pace_monitor()
        if self.is_attached:
            self.log_view.hold(not shown)
        if shown and self._stale:
            self._stale = False
            self._catch_up()
        if self.is_attached:
            self.serving.shown_changed(shown)

    def _pace_monitor(self) -> None:
        monitor, base = self.monitor, self._pace_base
        if monitor is None or base is None:
            return
        flush, serving = base
        if self.pace_hidden and not self._shown:
            flush, serving = max(flush, HIDDEN_FLUSH_INTERVAL), max(serving, HIDDEN_SERVING_INTERVAL)
        monitor.set_pace(flush_interval=flush, serving_interval=serving)

    @property
    def needs_warm_up(self) -> bool:
        """Hidden, with a boot whose engine the calculator has no flag fields for yet."""
        boot = self.boot
        return (
            not self._shown
            and boot is not None
            and boot.engine is not Engine.UNKNOWN
            and self.is_attached
            and self.calculator.engine != boot.engine
        )

    def warm_up(self) -> bool:
        """Hidden: build the calculator's flag fields for the boot's engine now (the screen
        calls this for one hidden pane at a time, in the background). Mounting ~30 fields was
        the costliest part of showing a host for the first time (~100 ms here, in the key's
        way); shown later, the pane only brings them up to date. True when it did."""
        if not self.needs_warm_up:
            return False
        self.calculator.set_boot(*self.calibration())
        return True

    def _catch_up(self) -> None:
        """Render what a hidden pane kept: the same widget calls its updates would have made."""
        if self.samples or self.foreign:
            self._one(GpuBars).show(self.samples, self.foreign)
            self._one(GpuSummary).show(self.samples)
            self._one(GpuNote).show(self.samples, self.gpu_note())
            self._one(ForeignWarning).show(self.foreign)
            self.gpu_subtitle()
        if self.boot is not None:
            self._render_boot()
        self._refresh_live(self.clock())

    def panels(self) -> list[Widget]:
        """Focus targets for ``tab``, in order: GPUs, log, calculator."""
        return [self.query_one(GpuPanel), self.log_view, self.calculator]

    # ---- the monitor worker -------------------------------------------------------------------

    @work(exclusive=True, group="monitor", exit_on_error=False, description="host monitor")
    async def run_monitor(self) -> None:
        try:
            backend = self._backend_factory(self.host_name, self.spec.config)
        except (BackendError, OSError, ValueError) as exc:
            self._fatal(str(exc))
            return
        self.backend = backend
        self.post_message(self.Connected())
        history = None
        if self.record_history:  # the console records every boot it sees (issue 13)
            history = recorder_for(self.host_name, getattr(getattr(self.app, "config", None), "history", None))
        options = replace(self.monitor_options, log_window=self.ui_config.log_lines, clock=self.clock)
        monitor = HostMonitor(self.host_name, backend, host=self.spec.config, history=history, options=options)
        self.monitor = monitor
        self.serving.attach(monitor)
        self._pace_base = (monitor.flush_interval, monitor.serving_interval)
        self._pace_monitor()
        self.log_view.source = monitor.spool
        self.log_view.host_log = monitor
        try:
            await monitor.run(self._sink)
        except (BackendError, OSError) as exc:
            self._fatal(str(exc))
        finally:
            await monitor.close()

    @work(exclusive=True, group="eta-history", exit_on_error=False, description="boot history")
    async def load_eta_history(self) -> None:
        """The host's stored boots (read off the loop), for the phase ETAs of ``_refresh_live``."""
        self.eta_history = await asyncio.to_thread(past_boots, self.host_name)

    def _eta(self, boot: Boot | None, now_dt: datetime) -> BootEta | None:
        """The running boot's ETA when the history has boots to base it on (none: nothing shown)."""
        if boot is None or boot.status is not BootStatus.STARTING or not self.eta_history:
            return None
        got = estimate(boot, self.eta_history, now_dt, host=self.host_name)
        return got if got.current is not None or got.remaining is not None else None

    def _changed_since_good(self, boot: Boot | None) -> list[str]:
        """A failed boot: what changed since the last ready boot of its model (the history)."""
        if boot is None or boot.status is not BootStatus.FAILED or not self.eta_history:
            return []
        got = since_last_good(self.eta_history, boot_doc(self.host_name, boot))
        return got[1] if got is not None else []

    def _sink(self, updates: Sequence[MonitorUpdate]) -> None:
        self.post_message(self.Updates(tuple(updates)))

    def _fatal(self, message: str) -> None:
        self.error = message
        self.status = ConnStatus(ConnState.FAILED, detail=message)
        self.query_one(HostBar).show(self.status, self.boot, None, None)
        self.query_one(ConnBanner).show(self.status)
        self.notify(message, title=f"{self.host_name}: cannot monitor", severity="error", timeout=10)
        self._post_summary()

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        """A worker that dies of an unexpected error says so instead of vanishing."""
        worker = event.worker
        if worker.state is not WorkerState.ERROR or worker.node is not self:
            return
        event.stop()
        error = worker.error
        message = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
        if worker.group == "monitor":
            self._fatal(f"the monitor stopped: {message}")
        else:
            self.notify(message, title=f"{self.host_name}: {worker.description or worker.group}", severity="error")

    # ---- updates in -----------------------------------------------------------------------------

    @on(Updates)
    def _on_updates(self, event: Updates) -> None:
        event.stop()
        self.batches_applied += 1
        self.apply_updates(event.updates)

    @property
    def up_to_date(self) -> bool:
        """Whether the pane shows everything its monitor took in: nothing is waiting to be
        published and every published batch is applied. On a frozen clock, once the backend has
        nothing newer either, the screen is a function of the clock (tests wait for this)."""
        monitor = self.monitor
        return (monitor is not None and not monitor.pending and self.batches_applied == monitor.published
                and self.serving.caught_up)

    def apply_updates(self, updates: Sequence[MonitorUpdate]) -> None:
        now = self.clock()
        if self.group is not None:
            self.group.feed(self, updates)
        self.serving.wake()
        parts: list[LinePart] = []
        count = 0
        boot_state: BootState | None = None
        gpu: GpuUpdate | None = None
        new_boot = False
        conn_changed = False
        for update in updates:
            if isinstance(update, LogBatch):
                parts.extend(update.parts)  # LogLines are built for the rows the view draws
                count += len(update)
            elif isinstance(update, BootState):
                boot_state = update
                new_boot = new_boot or update.new_boot
            elif isinstance(update, GpuUpdate):
                gpu = update
                self.gpu_plot.add(update.samples)  # the history is data: kept while hidden too
            elif isinstance(update, ConnUpdate):
                self.status = update.status
                self._status_at = now
                conn_changed = True
        shown = self._shown
        if new_boot:  # before its lines: they are the new boot's (its stall clock starts here)
            self.stall.reset(now)
        if count:
            self.lines_received += count
            view = self.log_view
            if view.held == shown:
                view.hold(not shown)
            view.append(parts)  # held (hidden): the lines only, no row/scroll/repaint work
            self.stall.log_parts(parts, now)  # progress: lines that are not a known wait line
        if gpu is not None:
            self.samples, self.foreign = gpu.samples, gpu.foreign
            self.stall.gpu_activity(gpu.samples, now)
            if shown:
                self._one(GpuBars).show(gpu.samples, gpu.foreign)
                self._one(GpuSummary).show(gpu.samples)
                self._one(GpuNote).show(gpu.samples, self.gpu_note())
                self._one(ForeignWarning).show(gpu.foreign)
                self.gpu_subtitle()
            else:
                self._stale = True
        if boot_state is not None:
            kv = self._one(KvUsage)
            if new_boot:
                kv.history.clear()
                self.load_eta_history()  # the boots before this one, for its phase ETAs
            self.boot = boot_state.boot
            self.boot_index = boot_state.index
            if self.monitor is not None:
                self.boots = list(self.monitor.tracker.boots)
            # the usage sparkline keeps a point per second of the host's time: fed while hidden too
            kv.show(self.boot, self.clock())
            self._maybe_probe()
            self.serving.maybe_sample()
            if shown:
                self._render_boot()
            else:
                self._stale = True
        if boot_state is not None or conn_changed:
            # the fleet summary hears of a new state (connection, boot, phase, failure) at once;
            # figures that change all the time (KV usage, phase clock) wait for the screen's 1 s
            # tick, which repaints every host's row at once (with many hosts, a repaint per host
            # per serving update made most of the console's frames)
            summary = self._summary_key()
            post = summary != self._summary_posted
            self._summary_posted = summary
            if shown:
                self._refresh_live(now, post=post)
            else:
                self._stale = True
                if post:
                    self._post_summary(self.current_elapsed(now))

    def gpu_note(self) -> str | None:
        """What the backend says of its GPU readings (``gpu_note``: a kube host's DCGM exporter —
        why they are stale), None for a backend that says nothing."""
        note = getattr(self.backend, "gpu_note", None)
        return note if isinstance(note, str) and note else None

    def gpu_subtitle(self) -> None:
        if not self.samples:
            return
        used = sum(s.used_gib for s in self.samples)
        total = sum(s.total_gib for s in self.samples)
        name = short_gpu_name(self.samples[0].name) if self.samples[0].name else ""
        label = f"{len(self.samples)} × {name}" if name else f"{len(self.samples)} GPUs"
        panel = self._one(GpuPanel)
        if self.offline is not None:
            return  # the panel says the host is not reached
        room = (panel.size.width or 42) - 6  # the border's corners and the spaces around the subtitle
        subtitle = f"{label} · {used:,.0f}/{total:,.0f} GiB"
        if len(subtitle) > room:  # the name before the sum: the sum is on the bars and the plot
            subtitle = label if len(label) <= room else f"{len(self.samples)} × {name[: max(1, room - 6)]}…"
        if panel.border_subtitle != subtitle:
            panel.border_subtitle = subtitle

    def _render_boot(self) -> None:
        """The boot's widgets (the KV usage is fed by ``apply_updates``, shown or not)."""
        boot = self.boot
        self._one(BootFigures).show(boot)
        self._show_probe()
        previous = self.boots[-2] if len(self.boots) >= 2 and self.boots[-1] is boot else None
        self._one(FailureBanner).show(boot, previous, self._changed_since_good(boot), self._orphans_of(boot, previous))
        calc = self.calculator
        if boot is not None and boot.start_missing is not None:
            if self.samples:  # the GPU memory from the GPU source (no boot line says it)
                calc.gpu_mem_gib = max(s.total_mib for s in self.samples) / 1024.0
            if not calc.basis_looked_up and self._basis_for is not boot:
                self._basis_for = boot
                self._look_up_basis(boot)
        calc.set_boot(*self.calibration())
        self.gpu_plot.set_bands(self._bands(), self._origin())

    @work(exclusive=True, group="serving-basis", exit_on_error=False, description="calculator history")
    async def _look_up_basis(self, boot: Boot) -> None:
        """A boot whose start is not in the log: the history's boot of this host with the same
        flags calibrates the calculator (read off the event loop); without one, the model's
        config.json read on the host, anchored at the pool estimated from serving lines."""
        try:
            basis = await asyncio.to_thread(changes.serving_basis, boot, self.host_name)
        except Exception:
            basis = None
        if self.boot is not boot:
            return
        self.calculator.set_stored_basis(basis)
        if basis is not None:
            return
        backend = self.backend
        try:
            got = (changes.ServingConfig(why="the host is not connected") if backend is None
                   else await changes.serving_config(backend, boot, read_gpu=False))
        except Exception as exc:  # a backend that fails in its own way: said, never raised into the UI
            got = changes.ServingConfig(why=f"cannot read the model's config.json: {exc}")
        if self.boot is boot:
            self.calculator.set_serving_config(got)

    def _bands(self) -> list[PhaseBand]:
        return phase_bands(self.boots[-4:])

    def _origin(self) -> float | None:
        return boot_origin(self.boot)

    def _now(self, now: float) -> datetime:
        return datetime.fromtimestamp(now)

    def current_elapsed(self, now: float) -> float | None:
        boot = self.boot
        if boot is None or boot.status is not BootStatus.STARTING:
            return None
        target = [s for s in boot.phases if s.model.value == "target"]
        if not target or target[-1].start is None:
            return None
        return fmt.seconds_between(target[-1].start, self._now(now))

    def _refresh_live(self, now: float, *, post: bool = True) -> FleetRow:
        now_dt = self._now(now)
        boot = self.boot
        eta = self._eta(boot, now_dt)
        self._one(PhaseTimeline).show(boot, now_dt, eta)
        elapsed = self.current_elapsed(now)
        # the boot's name: its number in the history ("boot #13"), the same in every view and after a
        # reconnect; else its place in the log this console read ("boot 2 of this log")
        number = None if self.boot_index is None or self.monitor is None else self.monitor.boot_label(self.boot_index)
        status = self.live_status(now)
        known = None
        if boot is not None and boot.version_hint is None:  # a boot that has not told it yet: the last one's
            known = next((b.version_hint for b in reversed(self.boots)
                          if b is not boot and b.engine is boot.engine and b.version_hint), None)
        up = self.up_through()
        self._one(HostBar).show(status, boot, elapsed, number, known, up=up is not None)
        self._one(ConnBanner).show(status)
        if boot is not None:
            start = boot.started_at or (boot.phases[0].start if boot.phases else None)
            end = boot.ended_at if boot.status is not BootStatus.STARTING else now_dt
            total = fmt.seconds_between(start, end)
            label = {"starting": "booting", "ready": "ready after", "failed": "failed after",
                     "stopped": "stopped after"}[boot.status.value]
            if boot.status is BootStatus.READY:
                ready = next((s for s in boot.phases if s.name.value == "ready"), None)
                total = fmt.seconds_between(start, ready.start if ready else end)
            subtitle = f"{label} {fmt.duration(total)}"
            if boot.start_missing is not None:  # its start is not in the log: no boot time to give
                subtitle = f"{boot.status.value if boot.status is not BootStatus.READY else 'serving'}"
                subtitle += " · its start is not in the log"
            if eta is not None and eta.remaining is not None:
                subtitle += f" · ready in ~{eta_clock(eta.remaining)}"
            slow = slow_reason(eta, self.stall.stall(boot, now))  # past 3× the median, or no progress
            if slow is not None:
                subtitle += f" · {slow}"
            if up is not None:  # a deployment's node: its own boot never says ready
                subtitle = f"up · its ranks serve through {up}"
            panel = self._boot_panel
            if panel is None:
                panel = self._boot_panel = self.query_one("#boot-panel")
            if self.offline is None and panel.border_subtitle != subtitle:
                panel.border_subtitle = subtitle
        self._show_connection(status)
        stall = self.stall.stall(boot, now) if up is None else None
        self._one(StallNotice).show(boot.phase if boot else None, stall.seconds if stall else None, stall)
        row = self.summary_row(elapsed)
        if post:
            self.post_message(self.Summary(row))
        return row

    PANEL_IDS = ("#gpu-panel", "#boot-panel", "#log-panel", "#figures-panel", "#calc-panel")

    def _show_connection(self, status: ConnStatus | None) -> None:
        """Every panel says when the host is not reached (an unreachable host looked alive:
        "● following", "collecting GPU memory samples…", only the header said otherwise): the
        panels' borders turn to the warning colour with the state as their subtitle, the log's
        status line and the empty GPU plot and timeline say it too."""
        self.log_view.set_recorded(status is not None and status.recorded)
        offline = offline_text(status)
        was = self.offline
        self.offline = offline
        if offline == was:
            return
        for panel_id in self.PANEL_IDS:
            panel = self.query_one(panel_id)
            panel.set_class(offline is not None, "-offline")
            if offline is not None:
                panel.border_subtitle = offline
            elif panel_id in ("#log-panel", "#figures-panel", "#calc-panel"):
                panel.border_subtitle = ""
        self.log_view.set_offline(offline)
        self.gpu_plot.offline = offline
        self.gpu_plot.refresh()
        self._one(PhaseTimeline).set_offline(offline)
        if offline is None:  # back: the panels' own subtitles
            self.gpu_subtitle()
            self._boot_panel = None
            if self.boot is not None:
                self._refresh_live(self.clock(), post=False)

    def live_status(self, now: float) -> ConnStatus | None:
        """The connection status with "reconnecting in Ns" counted down to ``now``."""
        status = self.status
        if status is not None and status.state is ConnState.RECONNECTING and status.retry_in is not None:
            return replace(status, retry_in=max(0.0, status.retry_in - (now - self._status_at)))
        return status

    def tick(self) -> None:
        """Tick the current phase's clock and the stall detector, and tell the fleet summary."""
        self.post_message(self.Summary(self.tick_row()))

    def tick_row(self) -> FleetRow:
        """What the screen's 1 s timer calls for every pane: shown, the phase clock, the stall
        detector and the header tick; hidden, nothing is rendered (the stall detector is
        checked when shown). Returns the fleet summary's row, which the screen hands over for
        all hosts at once (one repaint a second, not one per host)."""
        now = self.clock()
        self._say_history_problem()
        if self._shown and self.is_attached:
            return self._refresh_live(now, post=False)
        return self.summary_row(self.current_elapsed(now))

    def _say_history_problem(self) -> None:
        """The boot history's problem (a file locked by another kvtui: "will retry — N boots
        waiting"; corrupt, read-only), said as a toast when it appears or changes, and once more
        when the boots that waited for the lock are written (the recorder logs it too, but a log
        line never reaches the screen)."""
        recorder = getattr(self.monitor, "history", None)
        problem: str | None = getattr(recorder, "problem", None)
        before = self._history_said
        if problem == before:
            return
        self._history_said = problem
        title = f"{self.host_name}: history"
        if problem:
            self.notify(problem, title=title, severity="warning", timeout=10)
        elif before is not None and "will retry" in before:
            self.notify("the boots that waited for the locked file are written", title=title, timeout=5)

    def _summary_key(self) -> tuple[object, ...]:
        """What makes a fleet-summary row say something new (not a figure that moves)."""
        status, boot = self.status, self.boot
        return (
            None if status is None else (status.state, status.detail, status.fingerprint, status.strict_host_key),
            self.boot_index,
            self.up_through(),
            None if boot is None else (boot.status, boot.phase, boot.failure.kind if boot.failure else None,
                                       boot.engine, boot.metrics.max_total_num_tokens),
        )

    def summary_row(self, elapsed: float | None = None) -> FleetRow:
        return FleetRow(self.host_name, self.status, self.boot, elapsed, readonly=self.readonly,
                        up=self.up_through() is not None)

    def up_through(self) -> str | None:
        """A deployment's node serving through node 0: node 0's label (``DeploymentGroup.up_through``)."""
        return self.group.up_through(self) if self.group is not None else None

    def _post_summary(self, elapsed: float | None = None) -> None:
        self.post_message(self.Summary(self.summary_row(elapsed)))

    # ---- actions the screen delegates ---------------------------------------------------------------

    def toggle_processes(self) -> bool:
        self._show_processes = not self._show_processes
        self.query_one(ProcessTable).set_class(self._show_processes, "-shown")
        # a class, not the plot's display: set inline, it outlived the table and showed the plot
        # where the terminal's size hides it (120x36: ``p p`` added a plot and took the
        # calculator's rows, issue 22 #14)
        self.query_one(GpuPanel).set_class(self._show_processes, "-processes")
        if self._show_processes:
            self.query_one(ProcessTable).show(self._known_processes(), set())
            self.poll_processes()
        else:
            self.workers.cancel_group(self, "processes")
        return self._show_processes

    def _known_processes(self) -> list[GpuProcess]:
        procs: list[GpuProcess] = []
        for s in self.samples:
            procs.extend(
                p if p.gpu_index is not None else GpuProcess(p.pid, p.used_mib, s.index, p.gpu_uuid, p.name)
                for p in s.processes
            )
        return procs

    @work(exclusive=True, group="processes", exit_on_error=False, description="GPU processes")
    async def poll_processes(self) -> None:
        while self._show_processes:
            backend = self.backend
            if backend is not None:
                try:
                    processes = await backend.gpu_processes()
                    pids = await backend.server_pids()
                    orphans = await host_orphans(backend, processes, pids)  # issue 24
                except (BackendError, OSError) as exc:
                    self.notify(str(exc), title="GPU processes", severity="warning")
                    return
                gpus = {s.index for s in self.samples}
                shown = [p for p in processes if p.gpu_index is None or not gpus or p.gpu_index in gpus]
                self.query_one(ProcessTable).show(shown, pids, orphans)
            await asyncio.sleep(2.0)

    def _orphans_of(self, boot: Boot | None, previous: Boot | None) -> str | None:
        """The gpu_busy failure's orphaned engine processes (issue 24): asked once per failed boot."""
        failed = boot if boot is not None and boot.failure is not None else previous
        if failed is None or failed.failure is None or failed.failure.kind is not FailureKind.GPU_BUSY:
            return None
        if self._orphans_for is not failed and self.backend is not None:
            self._orphans_for, self._orphans_hint = failed, None
            self._ask_orphans(failed)
        return self._orphans_hint

    @work(group="orphans", exit_on_error=False, description="orphaned engine processes")
    async def _ask_orphans(self, failed: Boot) -> None:
        backend = self.backend
        if backend is None:
            return
        found = await host_orphans(backend)
        if found and self._orphans_for is failed:
            self._orphans_hint = hint_text(found)
            self._render_boot()

    # ---- proving "ready" with a real request ----------------------------------------------------

    def _maybe_probe(self) -> None:
        """Once per ready boot: ask the server for one token (``kvtui.hosts.probe``) when the
        console probes (``kvtui connect``), the host does (``probe``), and the boot names its port."""
        boot, idx = self.boot, self.boot_index
        if boot is None or idx is None or idx in self.probes or boot.status is not BootStatus.READY:
            return
        if not getattr(self.app, "probe_ready", False) or not getattr(self.spec.config, "probe", True):
            return
        port = boot_port(boot.flags)
        if port is None or self.backend is None or not can_probe(self.backend):
            return
        self.probes[idx] = None
        model = getattr(self.spec.config, "probe_model", None) or served_model(boot.flags)
        self._probe_worker(idx, port, model)

    @work(group="probe", exit_on_error=False, description="probe")
    async def _probe_worker(self, idx: int, port: int, model: str | None) -> None:
        backend = self.backend
        if backend is None:
            return
        boot = self.boot  # the ready boot asked about (another may replace it meanwhile)
        self._show_probe()
        res = self.probes[idx] = await probe(backend, port, model=model)
        if not res.ok and boot is not None and boot.status is BootStatus.READY:
            self._not_serving(boot, res)
        self._show_probe()

    def _not_serving(self, boot: Boot, res: ProbeResult) -> None:
        """The log said ready but the server did not answer: the boot is failed, ``not_serving``,
        as ``kvtui wait`` marks it — the failure banner, the status line and the fleet row say so."""
        mark_not_serving(boot, res)
        if boot is not self.boot:
            return
        self._summary_posted = self._summary_key()
        if self._shown:
            self._render_boot()
            self._refresh_live(self.clock(), post=True)
        else:
            self._stale = True
            self._post_summary(self.current_elapsed(self.clock()))

    def _show_probe(self) -> None:
        idx = self.boot_index
        line = self._one(ProbeLine)
        if idx is None or idx not in self.probes:
            line.show(None)
            return
        res = self.probes[idx]
        if res is None:
            line.show("asking the server for one token…", None)
        else:
            line.show(res.headline(), res.ok)
