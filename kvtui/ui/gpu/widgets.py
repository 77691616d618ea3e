"""The GPU panel: per-GPU memory bars, the memory history plot with phase bands, per-process
memory, and the warning about memory held by processes that are not the server's."""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import RenderResult
from textual.content import Content
from textual.geometry import Size
from textual.strip import Strip
from textual.timer import Timer
from textual.visual import Visual
from textual.widget import Widget

from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Phase
from kvtui.engines.orphans import KILL_GRACE_S, Orphan
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.lazy import lazy_module
from kvtui.ui import formatting as fmt
from kvtui.ui.perf import QuietStatic
from kvtui.ui.themes import rgb
from kvtui.ui.widgets.banner import Notice
from kvtui.ui.widgets.table import ListTable

if TYPE_CHECKING:
    import textual_plotext
    from textual_plotext import Plot
else:
    textual_plotext = lazy_module("textual_plotext")  # lazy: after the first frame (test_ui_startup): +20 ms CPU


ROW_STRIPS = 256  # GPU bar rows kept rendered (8 GPUs x the few utilisation values each wanders over)


def _foreign_by_gpu(foreign: Sequence[GpuProcess]) -> dict[int, float]:
    held: dict[int, float] = {}
    for proc in foreign:
        if proc.gpu_index is not None:
            held[proc.gpu_index] = held.get(proc.gpu_index, 0.0) + proc.used_mib
    return held


def clock_tick(epoch_seconds: float, span: float) -> str:
    """A plot x-axis label: the wall-clock time (local, like the log's timestamps), to the second
    for spans under an hour. One clock for every boot the plot shows (a boot-relative axis ran
    from ``-5m 24s`` to ``7.3s`` after a restart)."""
    return time.strftime("%H:%M:%S" if span < 3600 else "%H:%M", time.localtime(epoch_seconds))


_NAME_DROP = ("NVIDIA ", "GeForce ", "Tesla ")
_NAME_TAIL = (" Server Edition", " Workstation Edition", " Max-Q Workstation Edition", " Edition")


def short_gpu_name(name: str) -> str:
    """``NVIDIA RTX PRO 6000 Blackwell Server Edition`` -> ``RTX PRO 6000 Blackwell``: the words
    that tell GPUs apart (the vendor and the edition do not)."""
    short = name.strip()
    for word in _NAME_DROP:
        if short.startswith(word):
            short = short[len(word):]
    for tail in _NAME_TAIL:
        if short.endswith(tail):
            short = short[: -len(tail)]
            break
    return short or name


# the GPU rows' temperature and power columns, shown when the row has room for them beside a bar
# of at least BAR_MIN cells (a narrow column shows the temperature alone, or neither)
TEMP_CELLS = 5  # "  71°"
POWER_CELLS = 9  # " 410/600W"
BAR_MIN = 8
FIXED_CELLS = 3 + 9 + 5  # "nn " + " 65.4/96G" + "  51%"
POWER_STEP_W = 10  # power is shown to 10 W: a reading's few watts of noise repaint nothing


def thermal_columns(width: int, samples: Sequence[GpuSample]) -> tuple[bool, bool]:
    """(temperature, power) columns in GPU rows ``width`` cells wide: each when a reading has it
    and the row keeps a bar of ``BAR_MIN`` cells (power only beside the temperature)."""
    temp = any(s.temperature_c is not None for s in samples) and width >= FIXED_CELLS + TEMP_CELLS + BAR_MIN
    power = (temp and any(s.power_w is not None for s in samples)
             and width >= FIXED_CELLS + TEMP_CELLS + POWER_CELLS + BAR_MIN)
    return temp, power


def _watts(value: float | None) -> int | None:
    return None if value is None else int(round(value / POWER_STEP_W) * POWER_STEP_W)


def throttled(samples: Sequence[GpuSample]) -> list[tuple[str, list[int]]]:
    """The active throttle reasons and the GPUs each holds back (``[("power cap", [2, 5])]``)."""
    by_reason: dict[str, list[int]] = {}
    for s in samples:
        if s.throttle and not s.stale:
            for reason in s.throttle.split(", "):
                by_reason.setdefault(reason, []).append(s.index)
    return list(by_reason.items())


def throttle_line(samples: Sequence[GpuSample]) -> str | None:
    """``⚠ power cap: GPU 2, 5`` (each reason and its GPUs); None when no GPU is throttled."""
    reasons = throttled(samples)
    if not reasons:
        return None
    return "⚠ " + "; ".join(f"{r}: GPU {', '.join(map(str, gpus))}" for r, gpus in reasons)


class GpuSummary(QuietStatic):
    """The GPUs in one line, for a terminal too narrow for the GPU panel: how many, the fullest
    one's memory, an active throttle reason, the mean utilisation (``8× GPU 83.2/96G max · util
    74%``; ``… max · ⚠ power cap · util 97%``)."""

    DEFAULT_CSS = """
    GpuSummary {
        height: 1;
        padding: 0 1;
        display: none;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def show(self, samples: Sequence[GpuSample]) -> None:
        if not samples:
            self.set(None, lambda: Content.styled("no GPU readings yet", "$text-muted italic"))
            return
        fullest = max(samples, key=lambda s: s.used_mib / max(s.total_mib, 1.0))
        utils = [s.util for s in samples if s.util is not None]
        util = round(sum(utils) / len(utils)) if utils else None
        reasons = [r for r, _ in throttled(samples)]
        key = (len(samples), round(fullest.used_gib, 1), round(fullest.total_gib), util,
               any(s.stale for s in samples), tuple(reasons))
        self.set(key, lambda: self._content(samples, fullest, util, reasons))

    @staticmethod
    def _content(samples: Sequence[GpuSample], fullest: GpuSample, util: int | None,
                 reasons: Sequence[str] = ()) -> Content:
        high = fullest.used_mib / max(fullest.total_mib, 1.0) >= 0.97
        parts: list[tuple[str, str] | str] = [
            (f"{len(samples)}× GPU ", "$text-muted"),
            (f"{fullest.used_gib:.1f}/{fullest.total_gib:.0f}G", "$warning bold" if high else "$foreground bold"),
            (" max", "$text-muted"),
        ]
        if reasons:  # before the utilisation: the line is cut at the panel's edge
            parts.append((" · ⚠ " + ", ".join(reasons), "$warning bold"))
        if util is not None:
            parts.extend([" · ", ("util ", "$text-muted"), (f"{util}%", "$foreground")])
        if any(s.stale for s in samples):
            parts.append((" · stale", "$warning"))
        return Content.assemble(*parts)


class GpuHeader(Widget):
    """The GPU rows' column heads: which figure is memory and which is utilisation (``51%`` next
    to ``83.2/96G`` read as memory percent)."""

    DEFAULT_CSS = """
    GpuHeader {
        height: 1;
        padding: 0 1;
        color: $text-muted;
        text-wrap: nowrap;
        text-overflow: clip;
    }
    """

    def render(self) -> Content:
        width = self.size.width or 34
        left = " # memory"
        right = f"{'used/total':>10}{'util':>5}"
        bars = next(iter(self.parent.query(GpuBars)), None) if self.parent is not None else None
        temp, power = thermal_columns(width, bars.samples) if bars is not None else (False, False)
        right += f"{'temp':>{TEMP_CELLS}}" if temp else ""
        right += f"{'power':>{POWER_CELLS}}" if power else ""
        gap = width - len(left) - len(right)
        if gap < 1:
            return Content.styled(right.rjust(width), "$text-muted")
        return Content.styled(left + " " * gap + right, "$text-muted")


class GpuBars(Widget):
    """One row per server GPU: used/total as a bar (the server's part and any foreign part)."""

    DEFAULT_CSS = """
    GpuBars {
        height: auto;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: clip;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.samples: tuple[GpuSample, ...] = ()
        self.foreign: tuple[GpuProcess, ...] = ()
        self._shown: tuple[object, ...] | None = None
        self._strips: OrderedDict[tuple[object, ...], Strip] = OrderedDict()  # row strips, LRU
        self.repaints = 0  # refreshes asked for, for tests and the curious

    @staticmethod
    def _key(samples: Sequence[GpuSample], foreign: Sequence[GpuProcess]) -> tuple[object, ...]:
        """Everything a row shows: a new reading with the same figures (its time changes every
        second, its power by a few watts) repaints nothing."""
        held = _foreign_by_gpu(foreign)
        return tuple((s.index, *GpuBars._shown_figures(s), held.get(s.index, 0.0)) for s in samples)

    @staticmethod
    def _shown_figures(s: GpuSample) -> tuple[object, ...]:
        """What a row shows of a reading, at the precision it shows it (whole degrees, 10 W)."""
        return (s.used_mib, s.total_mib, None if s.util is None else round(s.util), s.stale,
                None if s.temperature_c is None else round(s.temperature_c), _watts(s.power_w),
                _watts(s.power_limit_w), s.throttle)

    def show(self, samples: Sequence[GpuSample], foreign: Sequence[GpuProcess] = ()) -> None:
        samples = tuple(samples)
        foreign = tuple(foreign)
        key = self._key(samples, foreign)
        self.samples, self.foreign = samples, foreign
        if key == self._shown:
            return
        layout = self._shown is None or len(key) != len(self._shown)
        self._shown = key
        self.repaints += 1
        self.refresh(layout=layout)
        if self.parent is not None:  # the column heads follow the columns (temperature, power)
            for header in self.parent.query(GpuHeader):
                header.refresh()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self.samples))

    def _row(self, s: GpuSample, held: Mapping[int, float], width: int,
             columns: tuple[bool, bool] = (False, False)) -> Content:
        total = max(s.total_mib, 1.0)
        figures = f" {s.used_gib:5.1f}/{s.total_gib:.0f}G"
        util = "" if s.util is None else f"{s.util:4.0f}%"
        temp_col, power_col = columns
        temp = ""
        if temp_col:
            temp = " " * TEMP_CELLS if s.temperature_c is None else f"{s.temperature_c:{TEMP_CELLS - 1}.0f}°"
        power = ""
        if power_col:
            watts, limit = _watts(s.power_w), _watts(s.power_limit_w)
            text = "" if watts is None else (f"{watts}/{limit}W" if limit else f"{watts}W")
            power = f"{text:>{POWER_CELLS}}"
        bar_width = max(4, width - 3 - len(figures) - len(util) - len(temp) - len(power))
        foreign_mib = min(held.get(s.index, 0.0), s.used_mib)
        used_cells = round(min(1.0, s.used_mib / total) * bar_width)
        foreign_cells = min(used_cells, math.ceil(foreign_mib / total * bar_width)) if foreign_mib else 0
        server_cells = used_cells - foreign_cells
        free_cells = bar_width - used_cells
        high = s.used_mib / total >= 0.97
        used_style = "$gpu-stale" if s.stale else ("$warning" if high else "$gpu-used")
        return Content.assemble(
            (f"{s.index:>2} ", "$text-muted"),
            ("█" * server_cells, used_style),
            ("█" * foreign_cells, "$gpu-foreign"),
            ("█" * free_cells, "$foreground 10%"),
            (figures, "$gpu-stale" if s.stale else "$foreground"),
            (util, "$text-muted"),
            (temp, "$warning bold" if s.throttle and not s.stale else "$text-muted"),
            (power, "$text-muted"),
        )

    def render(self) -> Content:
        if not self.samples:
            return Content.styled("no GPU readings yet", "$text-muted italic")
        held = _foreign_by_gpu(self.foreign)
        width = self.size.width or 34
        columns = thermal_columns(width, self.samples)
        return Content("\n").join([self._row(s, held, width, columns) for s in self.samples])

    def render_line(self, y: int) -> Strip:
        """A row's strip, kept by what the row shows, the width and the theme: a serving GPU's
        utilisation wanders over a few values, and rendering all eight rows' styled text anew
        each second was most of an idle console's frame. The same strip ``render`` would give
        (``Visual.to_strips`` of the row); a text selection takes the plain path."""
        width = self.size.width
        samples = self.samples
        if not samples or not width or y >= len(samples) or self.text_selection is not None:
            return super().render_line(y)
        held = _foreign_by_gpu(self.foreign)
        s = samples[y]
        columns = thermal_columns(width, samples)
        key = (y, s.index, *self._shown_figures(s), held.get(s.index, 0.0), width, columns, self.app.theme,
               self.visual_style)
        strip = self._strips.get(key)
        if strip is None:  # rendered at its line: the segments carry their (x, y) offsets
            row = Content("\n" * y) + self._row(s, held, width, columns)
            strip = Visual.to_strips(self, row, width, y + 1, self.visual_style)[y]
            self._strips[key] = strip
            if len(self._strips) > ROW_STRIPS:
                self._strips.popitem(last=False)
        else:
            self._strips.move_to_end(key)
        return strip


class GpuNote(Notice):
    """Why the GPU readings are stale, or what to know about them, as the host's backend says it
    (a kube host on a DCGM exporter: "stale: another node's DCGM exporter answered (…)", "stale:
    DCGM exporter unreachable: …", "stale: no DCGM series for pod …"), and the GPUs whose clocks
    are throttled (``⚠ power cap: GPU 2, 5``). Hidden when there is none."""

    def show(self, samples: Sequence[GpuSample], note: str | None) -> None:
        stale = any(s.stale for s in samples)
        throttle = throttle_line(samples)
        self.show_when((note, stale, throttle) if note or throttle else None,
                       lambda: self._content(note, stale, throttle))

    @staticmethod
    def _content(note: str | None, stale: bool, throttle: str | None = None) -> Content:
        """The backend's note, and the GPUs whose clocks are held back and why (``⚠ power cap:
        GPU 2, 5``: the temperature of each is in the warning colour in its row)."""
        lines: list[Content] = []
        if throttle:
            lines.append(Content.styled(throttle, "$warning"))
        if note and stale:
            lines.append(Content.assemble(("stale: ", "$warning bold"), (note, "$warning")))
        elif note:
            lines.append(Content.styled(note, "$text-muted"))
        return Content("\n").join(lines)


class ForeignWarning(QuietStatic):
    """Memory on the server's GPUs held by other processes (a stale one is a classic restart OOM)."""

    DEFAULT_CSS = """
    ForeignWarning {
        display: none;
        height: auto;
        padding: 0 1;
        color: $foreground;
        background: $warning-muted;
        &.-shown { display: block; }
    }
    """

    def show(self, foreign: Sequence[GpuProcess]) -> None:
        self.set_class(bool(foreign), "-shown")
        self.set(tuple(foreign), lambda: self._content(foreign))

    def _content(self, foreign: Sequence[GpuProcess]) -> Content:
        if not foreign:
            return Content("")
        lines = [Content.styled("⚠ memory held by processes that are not the server's", "$warning bold")]
        for proc in list(foreign)[:3]:
            where = f"GPU {proc.gpu_index}" if proc.gpu_index is not None else "GPU ?"
            name = f" {proc.name}" if proc.name else ""
            lines.append(Content(f"  {where}: {proc.used_mib / 1024:.1f} GiB, PID {proc.pid}{name}"))
        if len(foreign) > 3:
            lines.append(Content.styled(f"  and {len(foreign) - 3} more (p)", "$text-muted"))
        return Content("\n").join(lines)


@dataclass(frozen=True, slots=True)
class PhaseBand:
    """A boot phase as a time band: from ``start`` (epoch seconds) until the next band."""

    start: float
    phase: Phase | None  # None = failed


def phase_bands(boots: Sequence[Boot]) -> list[PhaseBand]:
    """The bands of the boots' target phases (a failure ends its boot's with a failed band)."""
    bands: list[PhaseBand] = []
    for boot in boots:
        for span in boot.phases:
            if span.model.value == "target" and span.start is not None:
                bands.append(PhaseBand(fmt.epoch(span.start), span.name))
        if boot.status is BootStatus.FAILED and boot.ended_at is not None:
            bands.append(PhaseBand(fmt.epoch(boot.ended_at), None))
    bands.sort(key=lambda b: b.start)
    return bands


def boot_origin(boot: Boot | None) -> float | None:
    """Where a plot's time axis starts: the boot's start (its first phase's when it has none)."""
    if boot is None:
        return None
    start = boot.started_at or (boot.phases[0].start if boot.phases else None)
    return fmt.epoch(start) if start is not None else None


class GpuHistoryPlot(Widget):
    """Memory over time (the busiest server GPU), each stretch coloured by the boot phase it
    belongs to, drawn with plotext (imported when the first figure is built, not at start-up).

    The figure is a function of the data (points, bands, origin), the size and the theme, built
    when the plot is painted: the 1 s timer only decides *when* a change is painted, never what a
    painted figure shows (a figure filled at a timer tick and painted later, or at another size,
    would show the data of that tick).

    The timer repaints only what a user can see change: a new phase band, a reading that moves the
    curve by at least half a row's resolution, or enough time for the x axis to move by one plot
    cell (its span over its cells: every second in a boot's first minutes, about every 50 s an
    hour in). An idle server's flat curve an hour long is not rebuilt every second; its axis
    labels are then at most one cell's time old. ``redraw_if_needed`` repaints any change."""

    DEFAULT_CSS = """
    GpuHistoryPlot {
        width: 1fr;
        height: 1fr;
        min-height: 6;
    }
    """

    def __init__(self, *, history: int = 3600, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.points: deque[tuple[float, float]] = deque(maxlen=history)
        self.total_gib: float = 0.0
        self.bands: tuple[PhaseBand, ...] = ()
        self.origin: float | None = None
        self._plot: Plot | None = None
        self._dirty = True  # data changed since the last repaint was asked for
        self._visible = True  # a change since then that shows at once (new bands, a moved curve)
        self._drawn: tuple[float, float] | None = None  # the newest point at the last repaint
        self._version = 0  # bumped on every change of the data the figure is built from
        self._cache_key: tuple[object, ...] | None = None
        self._cache: Text | None = None
        self.redraws = 0  # plot builds, for tests and the curious
        self.offline: str | None = None  # the host is not reached (said instead of "collecting…")
        self.redraw_timer: Timer | None = None  # the 1 s repaint timer (a test that paints by hand pauses it)

    @property
    def plt(self) -> Plot:
        """The plotext figure (plotext is imported on first use: ~0.1 s kept out of start-up)."""
        if self._plot is None:
            self._plot = textual_plotext.Plot()
            self._plot.theme("clear")
        return self._plot

    def on_mount(self) -> None:
        self.redraw_timer = self.set_interval(1.0, self._tick, name="gpu-plot-redraw")
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: object) -> None:
        self._changed(visible=True)
        self.redraw_if_needed()

    def _changed(self, *, visible: bool = False) -> None:
        self._dirty = True
        self._visible = self._visible or visible
        self._version += 1

    def add(self, samples: Sequence[GpuSample]) -> None:
        fresh = [s for s in samples if not s.stale]
        if not fresh:
            return
        self.add_point(max(s.ts for s in fresh), max(s.used_gib for s in fresh), max(s.total_gib for s in fresh))

    def add_point(self, ts: float, used: float, total: float) -> None:
        """One point of the curve: ``used`` GiB of ``total`` at ``ts`` (a host's busiest GPU, as
        ``add`` reads it; the deployment console's sum over its nodes' GPUs)."""
        if self.points and ts <= self.points[-1][0]:
            return
        self.points.append((ts, used))
        moved = total != self.total_gib or self._drawn is None or abs(used - self._drawn[1]) >= self._y_step()
        self.total_gib = total
        self._changed(visible=moved)

    def _y_step(self) -> float:
        """Half the curve's vertical resolution (GiB): plotext's ``hd`` marker draws two dots a row."""
        top = max(self.total_gib, 1.0)
        return top / (4 * max(1, self.size.height or 10))

    def set_bands(self, bands: Sequence[PhaseBand], origin: float | None) -> None:
        bands = tuple(bands)
        if bands != self.bands or origin != self.origin:
            self.bands, self.origin = bands, origin
            self._changed(visible=True)

    def _due(self) -> bool:
        """Whether the timer should repaint: a visible change, or the x axis moved a cell."""
        if not self._dirty:
            return False
        if self._visible or self._drawn is None or not self.points:
            return True
        first, last = self.points[0][0], self.points[-1][0]
        lo = min(first, self.origin if self.origin is not None else first)
        cells = max(8, (self.size.width or 40) - 6) * 2
        return last - self._drawn[0] >= max(1.0, (last - lo) / cells) - 1e-6

    def _tick(self) -> None:
        if self._due():
            self.redraw_if_needed()

    def redraw_if_needed(self) -> bool:
        """Repaint (the figure is rebuilt from the current data) if the data changed since the
        last repaint and the plot is on screen; True when it did."""
        if not self._dirty or not self.display or not self.is_on_screen:
            return False
        self._dirty = False
        self._visible = False
        self._drawn = self.points[-1] if self.points else None
        self.refresh()
        return True

    def _phase_colour(self, phase: Phase | None) -> tuple[int, int, int]:
        variables = self.app.theme_variables
        name = "phase-failed" if phase is None else fmt.PHASE_VARIABLE[phase]
        return rgb(variables.get(name, variables.get("primary", "#808080")))

    def _fill(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.theme("clear")
        points = list(self.points)
        if self.bands:  # from the first boot the plot knows of (readings before it are idle memory)
            first = self.bands[0].start
            points = [p for p in points if p[0] >= first] or points[-1:]
        if not points:
            return
        cells = max(8, (self.size.width or 40) - 6) * 2
        if len(points) > cells:
            step = len(points) / cells
            points = [points[min(len(points) - 1, int(i * step))] for i in range(cells)] + [points[-1]]
        origin = self.origin if self.origin is not None else points[0][0]
        bands = self.bands or (PhaseBand(points[0][0], Phase.LAUNCH),)
        band_starts = [b.start for b in bands]
        segments: list[tuple[Phase | None, list[float], list[float]]] = []
        for ts, used in points:
            idx = 0
            for i, start in enumerate(band_starts):
                if ts >= start:
                    idx = i
            phase = bands[idx].phase
            x = ts - origin
            if not segments or segments[-1][0] != phase:
                if segments:  # join the stretches so the area has no gaps
                    segments[-1][1].append(x)
                    segments[-1][2].append(used)
                segments.append((phase, [], []))
            segments[-1][1].append(x)
            segments[-1][2].append(used)
        for phase, xs, ys in segments:
            plt.plot(xs, ys, marker="hd", color=self._phase_colour(phase), fillx=True)
        top = max(self.total_gib, max(p[1] for p in points), 1.0)
        plt.ylim(0, top)
        lo = min(0.0, points[0][0] - origin)  # from the boot's start, or the first reading before it
        hi = max(lo + 1.0, points[-1][0] - origin)
        plt.xlim(lo, hi)
        # three 8-cell clock labels only where they are well apart: plotext shifts crowded labels
        # in an order that follows Python's string hashing (a different picture each run)
        ticks = [lo, (lo + hi) / 2, hi] if (self.size.width or 40) >= 44 else [lo, hi]
        span = hi - lo
        plt.xticks(ticks, [clock_tick(origin + t, span) for t in ticks])
        plt.yticks([0, top / 2, top], [f"{0:.0f}G", f"{top / 2:.0f}G", f"{top:.0f}G"])  # a unit on every tick
        muted = rgb(self.app.theme_variables.get("foreground-muted", "#808080"))
        plt.ticks_color(muted)
        plt.axes_color("default")
        plt.canvas_color("default")

    def render(self) -> RenderResult:
        key = (self.size, self._version, self.app.theme)
        if key != self._cache_key or self._cache is None:
            if not self.points:
                if self.offline is not None:
                    return Content.styled(f"no GPU readings: {self.offline}", "$warning italic")
                return Content.styled("collecting GPU memory samples…", "$text-muted italic")
            try:
                self._fill()
                self._cache = Text.from_ansi(self._build())
            except (ArithmeticError, ValueError, IndexError):  # plotext on degenerate data
                return Content.styled("collecting GPU memory samples…", "$text-muted italic")
            self._cache_key = key
            self.redraws += 1
        return self._cache

    def _build(self) -> str:
        self.plt.plotsize(self.size.width, self.size.height)
        self.plt._set_size(self.size.width, self.size.height)
        built: str = self.plt.build()
        return built


class ProcessTable(ListTable[str | Text]):
    """Per-process GPU memory on the server's GPUs; the server's own processes marked. Refilled
    every poll with the cursor kept on its process (``ListTable.refill``)."""

    DEFAULT_CSS = """
    ProcessTable {
        height: 1fr;
        display: none;
        &.-shown { display: block; }
    }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.add_columns("GPU", "PID", "MiB", "owner", "process")

    def show(self, processes: Sequence[GpuProcess], server_pids: set[int], orphans: Sequence[Orphan] = ()) -> None:
        """``orphans`` (``kvtui.hosts.orphans``): engine processes of a previous boot whose server is
        gone, marked ``ORPHAN`` in the warning colour with the command that ends them; on a CPU host
        (no GPU process) they get rows of their own, their RAM in the MiB column."""
        rows = sorted(processes, key=lambda p: (p.gpu_index if p.gpu_index is not None else -1, -p.used_mib))
        by_pid = {o.pid: o for o in orphans}
        listed = {p.pid for p in rows}
        colour = self.app.theme_variables.get("warning", "yellow") if self.is_attached else "yellow"
        warn = f"bold {colour}"

        def owner(pid: int) -> Text:
            if pid in by_pid:
                return Text("ORPHAN", style=warn)
            return Text("server", style="") if pid in server_pids else Text("OTHER", style="bold")

        def name(pid: int, default: str) -> str | Text:
            o = by_pid.get(pid)
            if o is None:
                return default
            return Text(f"{o.title}: orphan of the previous boot — end it: kill {o.pid} "
                        f"(kill -9 {o.pid} after {KILL_GRACE_S} s)", style=colour)

        gpu_rows = [
            (f"{proc.gpu_index}:{proc.pid}", (
                "?" if proc.gpu_index is None else str(proc.gpu_index),
                str(proc.pid),
                f"{proc.used_mib:,.0f}",
                owner(proc.pid),
                name(proc.pid, proc.name),
            ))
            for proc in rows
        ]
        ram_rows = [
            (f"-:{o.pid}", ("-", str(o.pid), "" if o.rss_mib is None else f"{o.rss_mib:,.0f}", owner(o.pid),
                            name(o.pid, o.title)))
            for o in orphans if o.pid not in listed
        ]
        self.refill([*gpu_rows, *ram_rows])
