"""The console's fleet screen (``F``, the palette's "fleet: open"; alone with ``kvtui connect`` and no
HOST when hosts.toml has a ``[prometheus]``): every serving instance Prometheus knows of, one line
each in a virtual table (``FleetTable``), rows in trouble first with the reason.

- Read every ``REFRESH_S`` seconds off the event loop (``asyncio.to_thread``: one read is the
  handful of PromQL queries ``kvtui.fleet.rows.fetch_fleet`` makes; a read still running when the
  next is due is not doubled).
- ``s`` cycles the sort column, ``S`` reverses it (trouble first always); ``/`` filters by text as
  you type (host, instance, engine, version, model, state, trouble), ``enter`` keeps the filter,
  ``esc`` clears it; ``r`` reads now.
- Prometheus that cannot be read: a banner with the client's message, and the rows last read (if
  any) greyed with their state ``stale (read HH:MM:SS)`` — nothing is shown as healthy.
- ``enter`` on a row: that server's console when a hosts.toml host serves the instance
  (``kvtui.fleet.drill.host_for``), else ``InstanceScreen``: the instance's last hour plotted and
  the hosts.toml lines to paste.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, Static

from kvtui.fleet.client import PromClient, PromError
from kvtui.fleet.drill import InstanceHistory, fetch_history, host_for, hosts_hint
from kvtui.fleet.rows import SORT_KEYS, FleetPoller, FleetRow, filter_rows, severity, sort_rows
from kvtui.lazy import lazy_module
from kvtui.ui.fleet.table import FleetTable

if TYPE_CHECKING:
    import textual_plotext
    from textual.app import RenderResult
    from textual_plotext import Plot

    from kvtui.config import HostConfig, PrometheusConfig
else:
    textual_plotext = lazy_module("textual_plotext")  # lazy: after the first frame (test_ui_startup): +20 ms CPU

REFRESH_S = 5.0
SORTS = tuple(SORT_KEYS)  # what ``s`` cycles through, in the table's column order


class FleetSource(Protocol):
    """Where the fleet screen reads from (blocking calls, run in a thread; ``PromError`` when the
    source cannot be read)."""

    url: str

    def rows(self) -> list[FleetRow]: ...

    def history(self, row: FleetRow) -> InstanceHistory: ...


class PromFleetSource:
    """The ``[prometheus]`` of hosts.toml (a client per read: a rotated token file is re-read); the
    reads of a screen go through a ``FleetPoller`` (the slow columns once a minute: about half the
    Prometheus CPU of a full refresh at 1,000 instances, bench 10)."""

    def __init__(self, cfg: PrometheusConfig) -> None:
        self.cfg = cfg
        self.url = cfg.url
        self.poller = FleetPoller()

    def rows(self) -> list[FleetRow]:
        return self.poller.fetch(PromClient(self.cfg))

    def history(self, row: FleetRow) -> InstanceHistory:
        return fetch_history(PromClient(self.cfg), row)


def clock_text(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def order(rows: Sequence[FleetRow], key: str, reverse: bool) -> list[FleetRow]:
    """Trouble first (the worst first), then by ``key`` (text A-Z, numbers largest first; ``reverse``
    turns that round, the trouble rows staying on top)."""
    if not reverse:
        return sort_rows(rows, key)
    by_key = sorted(sorted(rows, key=lambda r: (r.host, r.instance)), key=SORT_KEYS[key], reverse=True)
    return sorted(by_key, key=lambda r: (severity(r), -len(r.trouble)))


class StatusLine(Widget):
    """One line of text repainted in place (no layout pass per key, as ``Static.update`` asks)."""

    DEFAULT_CSS = "StatusLine { height: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = ""

    def set_text(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.refresh()

    def render(self) -> RenderResult:
        return Content(self.text)


class FilterInput(Input):
    """The ``/`` field: ``enter`` keeps the filter, ``esc`` clears it (both back to the table)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "screen.filter_clear", "Clear filter", show=False),
        Binding("enter", "screen.filter_done", "Keep filter", show=False),
    ]


class FleetScreen(Screen[None]):
    """See the module doc."""

    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    FleetScreen #fleet-banner {
        display: none; height: auto; max-height: 6; padding: 0 1; background: $error 20%; color: $text;
        border-left: thick $error;
    }
    FleetScreen #fleet-banner.-shown { display: block; }
    FleetScreen #fleet-status { height: 1; padding: 0 1; color: $text-muted; }
    FleetScreen #fleet-filter { display: none; height: 1; border: none; padding: 0 1; }
    FleetScreen #fleet-filter.-shown { display: block; }
    FleetScreen #fleet-keys { height: 1; padding: 0 1; color: $text-muted; background: $panel; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", id="fleet.filter", priority=True),
        Binding("s", "sort", "Sort", id="fleet.sort"),
        Binding("S", "reverse", "Reverse", id="fleet.reverse"),
        Binding("r", "refresh", "Refresh", id="fleet.refresh"),
        Binding("escape", "escape", "Back", id="fleet.back"),
        Binding("F", "close", "Close", show=False, id="fleet.close"),
        Binding("q", "quit_or_close", "Quit", show=False, id="fleet.quit"),
    ]

    def __init__(self, source: FleetSource | None, *, hosts: Mapping[str, HostConfig] | None = None,
                 clock: Callable[[], float] = time.time, standalone: bool = False,
                 config_path: str | None = None, interval: float = REFRESH_S) -> None:
        super().__init__(id="fleet")
        self.source = source
        self.hosts = dict(hosts or {})
        self.clock = clock
        self.standalone = standalone  # the console's only screen (no hosts): esc does not close it
        self.config_path = config_path
        self.interval = interval
        self.all_rows: list[FleetRow] = []
        self.shown: list[FleetRow] = []
        self.read_at: float | None = None  # the clock of the last good read
        self.problem: str | None = None  # why the last read failed
        self.sort_key = "host"
        self.reverse = False
        self.filter_text = ""
        self.reads = 0  # reads finished (good or not), for tests
        self._reading = False
        self._banner_text: str | None = ""

    # ---- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-banner")
        yield StatusLine(id="fleet-status")
        yield FleetTable(id="fleet-table")
        yield FilterInput(placeholder="filter: host, model, engine, state, trouble…", id="fleet-filter")
        close = "[b]q[/] quit" if self.standalone else "[b]F[/] back"
        yield Static(Content.from_markup(
            "[b]enter[/] drill in  [b]j/k g/G[/] move  [b]s[/] sort  [b]S[/] reverse  [b]/[/] filter  "
            f"[b]esc[/] clear  [b]r[/] refresh  {close}"), id="fleet-keys")

    @property
    def table(self) -> FleetTable:
        return self.query_one(FleetTable)

    def on_mount(self) -> None:
        self.table.focus()
        if self.source is None:
            where = self.config_path or "hosts.toml"
            self._banner(f"no [prometheus] in {where}: the fleet screen reads the Prometheus that scrapes your "
                         'servers; add\n  [prometheus]\n  url = "http://prometheus:9090"')
            self._status()
            return
        self._status()
        self.refresh_rows()
        self.set_interval(self.interval, self.refresh_rows, name="fleet-refresh")

    def on_screen_resume(self) -> None:
        if self.read_at is not None and self.clock() - self.read_at >= self.interval:
            self.refresh_rows()

    # ---- reading -----------------------------------------------------------------------------

    def refresh_rows(self) -> None:
        """A read, unless one is running or another screen covers this one (a host's console or an
        instance opened from it: no queries while nobody sees the rows; one when it shows again)."""
        if self.source is None or self._reading or (self.is_attached and self.app.screen is not self):
            return
        self._reading = True
        self._read()

    @work(group="fleet-read", exit_on_error=False)
    async def _read(self) -> None:
        source = self.source
        assert source is not None
        try:
            rows = await asyncio.to_thread(source.rows)
        except PromError as exc:
            self._failed(str(exc))
        except Exception as exc:  # a bug must not leave stale rows looking fresh
            self._failed(f"reading {source.url} failed: {exc!r}")
        else:
            self.all_rows, self.read_at, self.problem = rows, self.clock(), None
            self._banner(None)
            self._fill()
        finally:
            self._reading = False
            self.reads += 1

    def _failed(self, message: str) -> None:
        self.problem = message
        if self.read_at is None:
            self._banner(f"✖ {message}\nNothing is known of the fleet: no row could be read.")
        else:
            self._banner(f"✖ {message}\nThe rows are those read at {clock_text(self.read_at)}, greyed: stale, "
                         "none is known to be healthy now.")
        self._fill()

    def _banner(self, text: str | None) -> None:
        if text == self._banner_text:
            return
        self._banner_text = text
        banner = self.query_one("#fleet-banner", Static)
        banner.set_class(text is not None, "-shown")
        banner.update(Content(text or ""))

    def _fill(self) -> None:
        rows = order(self.all_rows, self.sort_key, self.reverse)
        if self.filter_text:
            rows = filter_rows(rows, self.filter_text)
        self.shown = rows
        stale = None if self.problem is None or self.read_at is None else f"stale {clock_text(self.read_at)}"
        table = self.table
        table.set_sort(self.sort_key, self.reverse)
        table.set_rows(rows, stale=stale)
        self._status()

    def _status(self) -> None:
        url = self.source.url if self.source is not None else "no [prometheus]"
        parts = [url]
        if self.read_at is not None:
            trouble = sum(1 for r in self.all_rows if r.trouble)
            parts.append(f"{len(self.all_rows)} instances, {trouble} in trouble")
            parts.append(("STALE, read " if self.problem else "read ") + clock_text(self.read_at))
        elif self.source is not None and self.problem is None:
            parts.append("reading…")
        parts.append(f"sort {self.sort_key} {'▲' if self.reverse else '▼'}")
        if self.filter_text:
            parts.append(f"/{self.filter_text}: {len(self.shown)} shown")
        self.query_one(StatusLine).set_text(" · ".join(parts))

    # ---- keys --------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # typed into the filter, not taken as keys
        return not (action in ("sort", "reverse", "refresh", "close", "quit_or_close") and self._typing())

    def _typing(self) -> bool:
        return isinstance(self.focused, Input)

    def action_sort(self) -> None:
        self.sort_key = SORTS[(SORTS.index(self.sort_key) + 1) % len(SORTS)]
        self._fill()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._fill()

    def action_refresh(self) -> None:
        self.refresh_rows()

    def action_filter(self) -> None:
        field = self.query_one(FilterInput)
        field.add_class("-shown")
        field.focus()

    @on(Input.Changed, "#fleet-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self._fill()

    def action_filter_done(self) -> None:
        field = self.query_one(FilterInput)
        if not field.value.strip():
            field.remove_class("-shown")
        self.table.focus()

    def action_filter_clear(self) -> None:
        field = self.query_one(FilterInput)
        field.value = ""
        field.remove_class("-shown")
        self.filter_text = ""
        self._fill()
        self.table.focus()

    def action_escape(self) -> None:
        if self.filter_text or self.query_one(FilterInput).has_class("-shown"):
            self.action_filter_clear()
        elif not self.standalone:
            self.action_close()

    def action_close(self) -> None:
        if self.standalone:
            return
        self.app.pop_screen()

    def action_quit_or_close(self) -> None:
        if self.standalone:
            self.app.exit()
        else:
            self.action_close()

    @on(FleetTable.Selected)
    def _selected(self, event: FleetTable.Selected) -> None:
        event.stop()
        row = event.row
        name = host_for(row.instance, self.hosts)
        open_host = getattr(self.app, "open_host", None)
        if name is not None and open_host is not None:
            open_host(name)
            return
        self.app.push_screen(InstanceScreen(row, self.source, clock=self.clock))


# ---- the instance view ---------------------------------------------------------------------------

PLOTS: list[tuple[str, str, str]] = [  # (series, title, unit)
    ("kv", "KV usage", "%"),
    ("queued", "queued requests", ""),
    ("tokens", "generated tokens/s", ""),
    ("gpu_mem", "GPU memory (fullest GPU)", "G"),
]


class SeriesPlot(Widget):
    """One series of the last hour (plotext, built when painted, cached per size and theme)."""

    DEFAULT_CSS = """
    SeriesPlot { width: 1fr; height: 1fr; min-height: 6; border: round $panel-lighten-2; }
    """

    def __init__(self, title: str, unit: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = title
        self.unit = unit
        self.points: list[tuple[float, float]] = []
        self.span: tuple[float, float] = (0.0, 1.0)
        self.message = "reading…"
        self._plot: Plot | None = None
        self._cache_key: tuple[object, ...] | None = None
        self._cache: Text | None = None

    def show(self, points: list[tuple[float, float]], span: tuple[float, float], message: str) -> None:
        self.points, self.span, self.message = points, span, message
        self._cache_key = None
        self.refresh()

    def render(self) -> RenderResult:
        if not self.points:
            return Content.styled(self.message, "$text-muted italic")
        key = (self.size, self.app.theme, len(self.points), self.points[-1])
        if key != self._cache_key or self._cache is None:
            try:
                self._cache = Text.from_ansi(self._build())
            except (ArithmeticError, ValueError, IndexError):  # plotext on degenerate data
                return Content.styled(self.message, "$text-muted italic")
            self._cache_key = key
        return self._cache

    def _build(self) -> str:
        if self._plot is None:
            self._plot = textual_plotext.Plot()
        plt = self._plot
        plt.clear_data()
        plt.clear_figure()
        plt.theme("clear")
        start, end = self.span
        width, height = max(self.size.width, 10), max(self.size.height, 3)
        cells = max(8, width - 6) * 2
        points = self.points
        if len(points) > cells:  # about two points a cell (the braille marker's resolution)
            step = len(points) / cells
            points = [points[min(len(points) - 1, int(i * step))] for i in range(cells)] + [points[-1]]
        xs = [(t - end) / 60 for t, _ in points]
        ys = [v for _, v in points]
        primary = self.app.theme_variables.get("primary", "#4080c0").lstrip("#")
        colour = (int(primary[0:2], 16), int(primary[2:4], 16), int(primary[4:6], 16)) if len(primary) >= 6 \
            else "blue"
        plt.plot(xs, ys, marker="hd", color=colour, fillx=True)
        top = max(max(ys), 1.0) if self.unit != "%" else 100.0
        plt.ylim(0, top)
        lo = (start - end) / 60
        plt.xlim(lo, 0)
        # fixed, well-apart tick labels (plotext shifts crowded labels in a hash-dependent order)
        plt.xticks([lo, lo / 2, 0], [f"{lo:.0f}m", f"{lo / 2:.0f}m", "now"])
        plt.yticks([0, top / 2, top], [f"0{self.unit}", f"{top / 2:.3g}{self.unit}", f"{top:.3g}{self.unit}"])
        plt.axes_color("default")
        plt.canvas_color("default")
        plt.ticks_color("default")
        plt.plotsize(width, height)
        plt._set_size(width, height)
        built: str = plt.build()
        return built


class InstanceScreen(Screen[None]):
    """An instance no hosts.toml host serves: its last hour (KV usage, queue, throughput, GPU memory,
    from ``query_range``) and the hosts.toml lines that would make Enter open its console."""

    DEFAULT_CSS = """
    InstanceScreen { layout: vertical; }
    InstanceScreen #instance-title { height: auto; padding: 0 1; text-style: bold; }
    InstanceScreen #instance-plots { grid-size: 2 2; height: 1fr; }
    InstanceScreen #instance-hint { height: auto; padding: 0 1; border-top: solid $primary; color: $text; }
    InstanceScreen #instance-keys { height: 1; padding: 0 1; color: $text-muted; background: $panel; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Back", id="instance.close"),
        Binding("r", "reload", "Reload", id="instance.reload"),
    ]

    def __init__(self, row: FleetRow, source: FleetSource | None, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(id="fleet-instance")
        self.row = row
        self.source = source
        self.clock = clock
        self.history: InstanceHistory | None = None
        self.problem: str | None = None

    def compose(self) -> ComposeResult:
        r = self.row
        trouble = f"  ✖ {'; '.join(r.trouble)}" if r.trouble else f"  {r.state}"
        yield Static(Content(f"{r.instance}  {r.engine} {r.version}  {r.model}  (job {r.job}){trouble}"),
                     id="instance-title")
        with Grid(id="instance-plots"):
            for name, title, unit in PLOTS:
                yield SeriesPlot(title, unit, id=f"plot-{name}")
        with Vertical(id="instance-hint"):
            yield Static(Content(
                f"No host of hosts.toml serves {r.instance}: add one and enter opens its console here "
                f"(ssh address {r.host}, or prometheus_instance):\n" + hosts_hint(r)), id="instance-hint-text")
        yield Static(Content.from_markup("[b]esc[/] back to the fleet  [b]r[/] read again"), id="instance-keys")

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self._load()

    @work(exclusive=True, group="instance-history", exit_on_error=False)
    async def _load(self) -> None:
        if self.source is None:
            self._show(None, "no [prometheus] to read")
            return
        try:
            hist = await asyncio.to_thread(self.source.history, self.row)
        except PromError as exc:
            self._show(None, f"✖ {exc}")
            return
        self._show(hist, "no samples in the last hour")

    def _show(self, hist: InstanceHistory | None, message: str) -> None:
        self.history = hist
        self.problem = None if hist is not None else message
        for name, _title, _unit in PLOTS:
            plot = self.query_one(f"#plot-{name}", SeriesPlot)
            if hist is None:
                plot.show([], (0.0, 1.0), message)
            else:
                plot.show(hist.series.get(name, []), (hist.start, hist.end), message)

    def action_close(self) -> None:
        self.app.pop_screen()
