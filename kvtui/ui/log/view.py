"""The log view: a bounded, line-API log view with follow/pause, search and filter over the
whole spool, error jumps, marks, timestamps and wrapping (the panel around it, with its status line
and find bar, is ``kvtui.ui.log.panel``).

``LogView`` keeps at most ``window`` lines in memory. Everything older lives in the host's spool
(``HostMonitor.spool``), which search, filter and history reads reach through :class:`LogSource`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, work
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Offset, Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kvtui.logfilter import FilterSet
from kvtui.longrun import gap_text_label
from kvtui.ui.log.filtering import gaps_unsearchable, next_filters, search_gaps, spool_filter_hits
from kvtui.ui.log.model import (
    HostLog,
    LogSource,
    TextQuery,
    ViewMode,
    gutter_mark,
    longest,
    short,
    with_note,
    without_own_stamp,
    wrapped_rows,
)
from kvtui.ui.log.search import LogSearch
from kvtui.ui.log.window import BarWindow, LineWindow
from kvtui.ui.message import WidgetMessage
from kvtui.updates import LineRun, LogLine, expand

MAX_DISPLAY_CHARS = 2000  # longer lines are cut for display (the spool keeps them whole)
_PLAIN = Style()
CACHED_ROWS = 400
WRAP_HANG = 2  # a wrapped line's continuation rows start this many cells right of its text



class LogView(ScrollView, can_focus=True):
    """A bounded log view (line API). Widgets above it call its methods; it never does I/O
    itself except through its ``source`` in workers."""

    ALLOW_MAXIMIZE = True

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "logview--prefix",
        "logview--timestamp",
        "logview--phase",
        "logview--error",
        "logview--warning",
        "logview--progress",
        "logview--serving",
        "logview--marker",
        "logview--match",
        "logview--cursor",
        "logview--mark",
        "logview--gutter",
    }

    DEFAULT_CSS = """
    LogView {
        background: $surface;
        scrollbar-size-vertical: 1;
        & > .logview--prefix { color: $text-muted; }
        & > .logview--timestamp { color: $text-muted; }
        & > .logview--phase { color: $accent; text-style: bold; }
        & > .logview--error { color: $error; text-style: bold; }
        & > .logview--warning { color: $warning; }
        & > .logview--progress { color: $text-muted; }
        & > .logview--serving { color: $foreground 70%; }
        & > .logview--marker { color: $log-marker; text-style: bold; }
        & > .logview--match { background: $log-match; color: $foreground; text-style: bold; }
        & > .logview--cursor { background: $primary 25%; }
        & > .logview--mark { color: $log-mark; text-style: bold; }
        & > .logview--gutter { color: $log-mark; }
    }
    """

    # less / vim / k9s movement (ids for [keymap]); scrolling up pauses following, G follows again
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("end", "follow_end", "Follow", show=False, id="log.end"),
        Binding("j,down", "lines(1)", "Line down", show=False, id="log.down"),
        Binding("k,up", "lines(-1)", "Line up", show=False, id="log.up"),
        Binding("g", "first_line", "First line", show=False, id="log.top"),
        Binding("G", "follow_end", "Last line, follow", show=False, id="log.bottom"),
        Binding("ctrl+d", "half_page(1)", "Half a page down", show=False, id="log.half_down"),
        Binding("ctrl+u", "half_page(-1)", "Half a page up", show=False, id="log.half_up"),
        Binding("apostrophe", "jump_mark(True)", "Next mark", show=False, id="mark.next"),
        Binding("quotation_mark", "jump_mark(False)", "Previous mark", show=False, id="mark.previous"),
        Binding("P", "toggle_progress", "Progress redraws", show=False, id="log.progress"),
    ]

    follow: reactive[bool] = reactive(True)
    wrap: reactive[bool] = reactive(False)
    timestamps: reactive[bool] = reactive(False)
    pending: reactive[int] = reactive(0)
    mode: reactive[ViewMode] = reactive(ViewMode.LIVE)

    class StatusChanged(WidgetMessage["LogView"]):
        """Follow, mode, filter, search or pending count changed (for the status line)."""

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, LogView.StatusChanged) and message.control is self.control

    def __init__(
        self,
        *,
        window: int = 5000,
        source: LogSource | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        self._row_styles: dict[str, Style] | None = None  # see _styles
        super().__init__(id=id, classes=classes)
        self.window = max(100, window)
        self.source = source
        # the tail: a LogLine of a run is built when first read; every line (``_all``) and as shown,
        # a progress bar's consecutive redraws on one row (``_rows``; ``P`` shows every redraw)
        self._all = LineWindow()
        self._rows = BarWindow()
        self.collapse_progress = True
        self.shown_rows: LineWindow | list[LogLine] = self.live_rows
        self._row_starts: list[int] = []
        self._max_width = 0
        self.cursor: int | None = None  # seq of the current line
        self.marks: set[int] = set()
        self.search_query: TextQuery | None = None
        self.search_forward = True  # ``/`` (n goes on forward) or the backwards search
        self.line_filter: FilterSet | None = None  # the & filters (None: none)
        self.filter_hidden = 0  # lines the filters hide, of those read for the filtered view
        self.message: str = ""  # last search/filter result for the status line
        self.offline: str | None = None  # the host is not reached: what the status line says instead of following
        self.recorded = False  # a recording (an incident bundle): nothing new will come
        # rendered rows: a few screenfuls (each strip carries Textual's own caches, ~15 objects the
        # garbage collector walks; thousands of them per host made its full passes slow)
        self._cache: LRUCache[tuple[object, ...], Strip] = LRUCache(CACHED_ROWS)
        # rows cut at the panel's edge, with their › (the row's strip, what is drawn)
        self._cut_cache: LRUCache[tuple[object, ...], tuple[Strip, Strip]] = LRUCache(CACHED_ROWS)
        self._version = 0
        self._programmatic_scroll = False
        self._end_scheduled = False
        self._frame: tuple[Offset, int, Style, dict[str, Style]] | None = None  # see render_lines
        # while held (its host's tab is hidden) ``append`` keeps the lines and counts what the view
        # would have done with them; ``hold(False)`` does it once (see ``hold``)
        self._held = False
        self._held_added = 0
        self._held_trimmed = 0
        self._held_pending = 0
        # the gaps of a server up for days and their search on the host (set by the host pane)
        self.host_log: HostLog | None = None
        self.finder = LogSearch(self)  # / \ n N: the search, in the lines read and on the host

    # ---- data in ------------------------------------------------------------------------

    @property
    def live_rows(self) -> LineWindow:
        """The live tail as shown: a row per progress bar, or (``P``) every redraw."""
        return self._rows if self.collapse_progress else self._all

    @property
    def lines(self) -> Sequence[LogLine]:
        """The lines currently shown (live tail, history window or filtered)."""
        return self.shown_rows

    @property
    def held(self) -> bool:
        return self._held

    def hold(self, held: bool) -> None:
        """``hold(True)`` while the view is not on screen (its host's tab is hidden): ``append``
        keeps the lines (the same lines in memory, the same filter) but does no row, scroll,
        repaint or status work — a hidden view asking for layout passes made a console of many
        hosts slow. ``hold(False)`` does that work once, with the same outcome as doing it for each
        batch: the rows and width of every line added, following to the end or, paused, the count
        of new lines and the scroll position kept on the same lines."""
        if held == self._held:
            return
        self._held = held
        if held:
            self._cache.clear()  # off screen: nothing to repaint, no rendered rows worth keeping
            self._cut_cache.clear()
            return
        added, trimmed, pending = self._held_added, self._held_trimmed, self._held_pending
        self._held_added = self._held_trimmed = self._held_pending = 0
        if added or trimmed:
            self._after_view_change(added=added, trimmed=trimmed)
        if pending:
            self.pending += pending
            self.post_status()
        elif self.line_filter is not None:  # the hidden count moved while held
            self.post_status()

    def _settle_held(self) -> None:
        """The view is being replaced while held: what was counted for the old one becomes the new
        line count it would have reached (rows and scroll are set anew by the caller)."""
        added, pending = self._held_added, self._held_pending
        self._held_added = self._held_trimmed = self._held_pending = 0
        if self.follow and self.mode not in (ViewMode.HISTORY, ViewMode.HOST):
            added = 0
        if added or pending:
            self.pending += added + pending

    def append(self, lines: Iterable[LogLine | LineRun]) -> None:
        """Add newly arrived lines (oldest first): ``LogLine``s or a ``LogBatch``'s parts (a
        ``LineRun``'s lines are built only when read: a row drawn, a search); keeps at most
        ``window`` in memory."""
        new = list(lines)
        count = sum(1 if isinstance(p, LogLine) else len(p.texts) for p in new)
        if not count:
            return
        self._all.extend(new)
        all_trim = max(0, len(self._all) - self.window)
        if all_trim:
            del self._all[:all_trim]
        rows_added, redrawn = self._rows.feed(new)
        rows_trim = max(0, len(self._rows) - self.window)
        if rows_trim:
            del self._rows[:rows_trim]
        if self.mode is ViewMode.LIVE:
            if not self.collapse_progress:
                self._view_changed(added=count, trimmed=all_trim)
            elif rows_added or rows_trim or redrawn:
                self._widen(redrawn)
                self._view_changed(added=rows_added, trimmed=rows_trim)
        elif self.mode is ViewMode.FILTER and self.line_filter is not None:
            passing = [line for line in expand(new) if self.line_filter.matches(line)]
            if len(passing) < count:
                self.filter_hidden += count - len(passing)
                if not passing and not self._held:  # (held: said when shown again, see ``hold``)
                    self.post_status()
            if passing:
                view = self.shown_rows
                if isinstance(view, BarWindow):  # a row per progress bar here too
                    added, redrawn = view.feed(passing)
                else:
                    view.extend(passing)
                    added, redrawn = len(passing), 0
                trim = max(0, len(view) - self.window)
                if trim:
                    del view[:trim]
                if added or trim or redrawn:
                    self._widen(redrawn)
                    self._view_changed(added=added, trimmed=trim)
        elif self._held:
            self._held_pending += count
        else:  # HISTORY: the tail moves on without us
            self.pending += count
            self.post_status()

    def _widen(self, redrawn: int) -> None:
        """A bar's row was redrawn in place with a text of ``redrawn`` characters: as wide as it."""
        if redrawn:
            extra = 1 + (13 if self.timestamps else 0)
            self._max_width = max(self._max_width, extra + min(redrawn, MAX_DISPLAY_CHARS))

    def _bar_rows(self, lines: list[LogLine]) -> LineWindow | list[LogLine]:
        """``lines`` as the view shows them: a row per progress bar (unless ``P`` shows every redraw)."""
        if not self.collapse_progress:
            return lines
        rows = BarWindow()
        rows.feed(lines)
        return rows

    def _view_changed(self, *, added: int, trimmed: int) -> None:
        if self._held:
            self._held_added += added
            self._held_trimmed += trimmed
        else:
            self._after_view_change(added=added, trimmed=trimmed)

    def _after_view_change(self, *, added: int, trimmed: int) -> None:
        # (held: ``trimmed`` can exceed the lines the rows were built for; all of them went)
        removed_rows = (
            self._row_starts[min(trimmed, len(self._row_starts) - 1)]
            if self.wrap and trimmed and self._row_starts
            else trimmed
        )
        self._rebuild_rows(added)
        if self.follow:
            self.pending = 0
            self._scroll_to_end()
        else:
            self.pending += added
            if removed_rows:
                self._programmatic_scroll = True
                self.scroll_to(y=max(0, self.scroll_y - removed_rows), animate=False, immediate=True)
                self._programmatic_scroll = False
        # always repaint: a full window that follows keeps its height and scroll offset while every
        # row now shows another line (no refresh would leave the view frozen during a storm)
        self.refresh()
        self.post_status()

    def _line_length(self, line: LogLine) -> int:
        if self.timestamps:
            shown = without_own_stamp(line.text) if line.ts is not None else line.text
            return 14 + min(len(shown), MAX_DISPLAY_CHARS)
        return 1 + min(len(line.text), MAX_DISPLAY_CHARS)

    def _rebuild_rows(self, added: int = 2048) -> None:
        view = self.shown_rows
        width = self._max_width
        extra = 1 + (13 if self.timestamps else 0)
        if added > 0 and view:  # new lines are at the end; toggles rescan all
            width = max(width, extra + min(longest(view, added), MAX_DISPLAY_CHARS))
        self._max_width = width
        if self.wrap:
            content = max(10, self.scrollable_content_region.width or self.size.width or 80)
            starts = [0]
            total = 0
            indent = self._wrap_indent(content)
            for line in view:
                one = line.style in ("marker", "gap")
                total += 1 if one else wrapped_rows(self._line_length(line), content, indent)
                starts.append(total)
            self._row_starts = starts
            self._set_virtual_size(Size(content, total))
        else:
            self._row_starts = []
            self._set_virtual_size(Size(width + 1, len(view)))

    def _wrap_indent(self, width: int) -> int:
        """Cells a wrapped line's continuation rows are indented by: past the gutter and the
        timestamp, WRAP_HANG more than the line's text (never more than half the width)."""
        return min(1 + (13 if self.timestamps else 0) + WRAP_HANG, width // 2)

    def _set_virtual_size(self, size: Size) -> None:
        """A log that grew (a new line, timestamps shown) repaints itself and its scrollbars; it
        asks for a layout pass of the screen (``virtual_size`` is a layout reactive: ~40 ms for a
        console here, ~100 ms with many hosts) only when a scrollbar appears or goes, which
        changes the space around it. Textual does the same on a layout pass (``_size_updated``:
        the scrollbars' window and the scroll offsets clamped); before the first layout it is left
        to that."""
        if size == self.virtual_size:
            return
        if not self.container_size:
            self.virtual_size = size
            return
        self.set_reactive(LogView.virtual_size, size)
        self._scroll_update(size)  # a scrollbar shown or hidden here asks for the layout pass

    def _rescan(self) -> None:
        # the widest line, as ``_line_length`` measures it (a key toggling timestamps or wrap
        # pays this over the whole window: one pass in C, not a method call per line)
        view = self.shown_rows
        extra = 1 + (13 if self.timestamps else 0)
        self._max_width = extra + min(MAX_DISPLAY_CHARS, longest(view, len(view))) if view else 0
        self._version += 1
        self._cache.clear()
        self._rebuild_rows(added=0)
        self.refresh()

    def on_resize(self) -> None:
        if self.wrap:
            self._cache.clear()
            self._rebuild_rows()
        if self.follow:
            self._scroll_to_end()

    # ---- scrolling / follow ---------------------------------------------------------------

    def _scroll_to_end(self) -> None:
        self._programmatic_scroll = True
        self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        self._programmatic_scroll = False
        if not self._end_scheduled:  # again once layout has settled (sizes may be stale now)
            self._end_scheduled = True
            self.call_after_refresh(self._settle_end)

    def _settle_end(self) -> None:
        self._end_scheduled = False
        if self.follow:
            self._programmatic_scroll = True
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
            self._programmatic_scroll = False

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._programmatic_scroll:
            return
        if new_value < old_value and self.follow and new_value < self.max_scroll_y:
            # the user scrolled up: pause, count new lines instead (a view that grew taller — a
            # shorter boot panel after a restart — clamps scroll_y down to the end: keep following)
            self.follow = False
        elif (
            not self.follow
            and self.mode not in (ViewMode.HISTORY, ViewMode.HOST)
            and new_value > old_value
            and new_value >= self.max_scroll_y
        ):
            self.follow = True  # scrolled back to the bottom: follow again

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.pending = 0
            if self.mode in (ViewMode.HISTORY, ViewMode.HOST):
                self.finder.host_results = None
                if self.line_filter is not None:
                    self.apply_filters(self.line_filter)
                else:
                    self.show_rows(self.live_rows, ViewMode.LIVE)
            self.cursor = None
            self._version += 1
            self._scroll_to_end()
            self.refresh()
        self.post_status()

    def action_follow_end(self) -> None:
        self.follow = True

    def toggle_follow(self) -> None:
        self.follow = not self.follow

    def watch_wrap(self) -> None:
        self._rescan()
        if self.follow:
            self._scroll_to_end()
        elif self.cursor is not None:
            self._scroll_to_seq(self.cursor)
        self.post_status()

    def watch_timestamps(self) -> None:
        self._rescan()
        if self.follow:
            self._scroll_to_end()
        self.post_status()

    def set_recorded(self, recorded: bool) -> None:
        """The log is a recording (``connect --bundle``): its status says so, never "following"."""
        if recorded != self.recorded:
            self.recorded = recorded
            self.post_status()

    def set_offline(self, offline: str | None) -> None:
        """The host is not reached (``offline`` says how), or reached again (None)."""
        if offline != self.offline:
            self.offline = offline
            self.post_status()

    def post_status(self) -> None:
        if self.is_attached:
            self.post_message(self.StatusChanged(self))

    def show_rows(self, lines: LineWindow | list[LogLine], mode: ViewMode) -> None:
        if self._held:
            self._settle_held()
        self.shown_rows = lines
        self.mode = mode
        self._rescan()

    # ---- positions ------------------------------------------------------------------------

    def index_of(self, seq: int) -> int | None:
        view = self.shown_rows
        i = bisect_left(view, seq, key=lambda line: line.seq)
        return i if i < len(view) and view[i].seq == seq else None

    def _row_of_index(self, index: int) -> int:
        return self._row_starts[index] if self.wrap and self._row_starts else index

    def _index_at_row(self, row: int) -> int:
        if self.wrap and self._row_starts:
            return max(0, bisect_right(self._row_starts, row) - 1)
        return row

    def _scroll_to_seq(self, seq: int) -> None:
        index = self.index_of(seq)
        if index is None:
            return
        row = self._row_of_index(index)
        height = self.scrollable_content_region.height or self.size.height
        self._programmatic_scroll = True
        self.scroll_to(y=max(0, row - height // 2), animate=False, immediate=True)
        self._programmatic_scroll = False

    def current_index(self) -> int | None:
        """Index (in the view) of the current line: the cursor, else the last line on screen."""
        if self.cursor is not None:
            index = self.index_of(self.cursor)
            if index is not None:
                return index
        if not self.shown_rows:
            return None
        height = self.scrollable_content_region.height or self.size.height or 1
        bottom = self._index_at_row(int(self.scroll_y) + height - 1)
        return min(len(self.shown_rows) - 1, bottom)

    def set_cursor(self, seq: int) -> None:
        """Make ``seq`` the current line (stop following) and bring it into view."""
        self.follow = False
        self.cursor = seq
        self._version += 1
        self._scroll_to_seq(seq)
        self.refresh()
        self.post_status()

    # ---- errors, marks ----------------------------------------------------------------------

    def next_error(self, forward: bool = True, *, note: str = "") -> bool:
        """Jump to the next (or previous) error line in the view; False when there is none. A gap
        of lines the follower did not read on the way is searched for error lines on the host."""
        if self.mode is ViewMode.HOST and self.finder.host_results is not None and self.finder.host_results.errors:
            self.finder.find_in_host(forward)
            return True
        view = self.shown_rows
        if not view:
            return False
        start = self.current_index()
        if start is None:
            return False
        if self.cursor is None and not forward:
            start += 1  # from the bottom of the screen, the last line itself counts
        rng = range(start + 1, len(view)) if forward else range(start - 1, -1, -1)
        for i in rng:
            line = view[i]
            if line.style == "gap" and (gap := self.finder.gap_at(line.seq)) is not None:
                unable = self.finder.gap_unsearchable(gap)
                if unable is None:
                    self.finder.search_gap("", False, gap, forward, note=note, errors=True)
                    return True
                note = unable
                continue
            if line.style == "error":
                self.message = with_note(f"error on line {line.seq + 1:,}", note)  # (not the last miss, left standing)
                self.set_cursor(line.seq)
                return True
        self.message = with_note(f"no {'next' if forward else 'previous'} error in view", note)
        self.post_status()
        return False

    def action_lines(self, step: int) -> None:
        """``j``/``k``: the cursor a line down/up (the first press makes it, see ``move_cursor``)."""
        self.move_cursor(step)

    def screen_indices(self) -> tuple[int, int] | None:
        """Indices of the first and last line on screen (None: nothing shown)."""
        view = self.shown_rows
        if not view:
            return None
        height = self.scrollable_content_region.height or self.size.height or 1
        top = min(len(view) - 1, self._index_at_row(int(self.scroll_y)))
        bottom = min(len(view) - 1, self._index_at_row(int(self.scroll_y) + height - 1))
        return top, bottom

    def move_cursor(self, step: int) -> None:
        """Move the cursor ``step`` lines (at once: a held key must not queue animations), scrolling
        only when it leaves the screen. With no cursor (following), the first press makes one on
        the last line on screen (on the first for ``j`` when paused) and pauses following; so does
        a press after a scroll left the cursor off screen."""
        view = self.shown_rows
        if not view:
            return
        index = self.index_of(self.cursor) if self.cursor is not None else None
        shown = self.screen_indices()
        if shown is None:
            return
        if index is None or not shown[0] <= index <= shown[1]:
            # none yet, or left off screen by a scroll (the wheel, a page): from the screen's edge
            index = shown[0] if step > 0 and not self.follow else shown[1]
        else:
            index = max(0, min(len(view) - 1, index + step))
        self.follow = False
        self.cursor = view[index].seq
        self._version += 1
        self._keep_on_screen(index)
        self.refresh()
        self.post_status()

    def _keep_on_screen(self, index: int) -> None:
        """Scroll the least that brings the line at ``index`` (all its rows) on screen."""
        height = self.scrollable_content_region.height or self.size.height or 1
        first = self._row_of_index(index)
        last = (self._row_starts[index + 1] - 1) if self.wrap and index + 1 < len(self._row_starts) else first
        y = int(self.scroll_y)
        if first < y:
            y = first
        elif last >= y + height:
            y = max(first, last - height + 1) if last - first < height else first
        else:
            return
        self._programmatic_scroll = True
        self.scroll_to(y=y, animate=False, immediate=True)
        self._programmatic_scroll = False

    def on_click(self, event: events.Click) -> None:
        """A click puts the cursor on the clicked line (and pauses following)."""
        offset = event.get_content_offset(self)
        view = self.shown_rows
        if offset is None or not view:
            return
        index = self._index_at_row(int(self.scroll_y) + offset.y)
        if index >= len(view):
            return
        self.follow = False
        self.cursor = view[index].seq
        self._version += 1
        self.refresh()
        self.post_status()

    def action_first_line(self) -> None:
        if self.cursor is not None and self.shown_rows:  # the cursor goes along
            self.cursor = self.shown_rows[0].seq
            self._version += 1
            self.refresh()
        self.scroll_to(y=0, animate=False, immediate=True)
        gaps = [line for line in self.shown_rows if line.style == "gap"] if self.host_log is not None else []
        if gaps:  # the first line read is not the log's first line since the boot: say what lies between
            self.message = f"the first line read; {gap_text_label(gaps[0].text, hint=False)} below it (/ searches them)"
            self.post_status()

    def action_half_page(self, step: int) -> None:
        height = self.scrollable_content_region.height or self.size.height or 2
        self.scroll_to(y=max(0, self.scroll_y + step * max(1, height // 2)), animate=False, immediate=True)

    def action_jump_mark(self, forward: bool) -> None:
        self.jump_mark(forward)

    def jump_mark(self, forward: bool = True) -> bool:
        """Go to the next (or previous) marked line in the view, round to the first (last)."""
        in_view = [line.seq for line in self.shown_rows if line.seq in self.marks] if self.marks else []
        if not in_view:
            self.message = "no marked line in view (m marks one)"
            self.post_status()
            return False
        here = self.current_index()
        current = self.shown_rows[here].seq if here is not None else None
        if current is None:
            target = in_view[0] if forward else in_view[-1]
        elif forward:
            target = next((seq for seq in in_view if seq > current), in_view[0])
        else:
            target = next((seq for seq in reversed(in_view) if seq < current), in_view[-1])
        self.message = f"mark on line {target + 1:,} ({in_view.index(target) + 1} of {len(in_view)})"
        self.set_cursor(target)
        return True

    def toggle_mark(self) -> int | None:
        """Mark (or unmark) the cursor line — with no cursor (following), the last line on screen
        (the newest) — drawn in the gutter, and say so in the status line."""
        index = self.current_index()
        if index is None:
            return None
        seq = self.shown_rows[index].seq
        if seq in self.marks:
            self.marks.discard(seq)
            self.message = f"unmarked line {seq + 1:,}"
        else:
            self.marks.add(seq)
            if len(self.marks) > 1000:
                self.marks.discard(min(self.marks))
            n = len(self.marks)
            where = "" if self.cursor is not None else ", the last on screen"
            self.message = f"marked line {seq + 1:,}{where} ({n:,} mark{'s' if n != 1 else ''})"
        self._version += 1
        self.refresh()
        self.post_status()
        return seq

    def copy_line(self) -> str | None:
        """``y``: the cursor line's text to the clipboard (OSC 52) — with no cursor, the newest
        line — and say what was copied."""
        view = self.shown_rows
        index = self.index_of(self.cursor) if self.cursor is not None else None
        if index is None and not view:
            self.message = "no line to copy yet"
            self.post_status()
            return None
        line = view[index] if index is not None else view[-1]
        self.app.copy_to_clipboard(line.text)
        which = f"line {line.seq + 1:,}" if index is not None else f"the newest line ({line.seq + 1:,}; no cursor)"
        self.message = f"copied {which}: {short(line.text, 40)}"
        self.post_status()
        return line.text

    # ---- search (``LogSearch``) ---------------------------------------------------------------

    def set_search(self, text: str, forward: bool = True) -> None:
        """``/`` (``forward``) finds the first match after the cursor (none: from the screen's top),
        ``\\`` the first before it; past the log's end (start) it goes on from the other (``finder``)."""
        if self.mode is ViewMode.HOST:  # a new search starts from the log, not a host search's results
            self.finder.leave_host()
        self.search_query = TextQuery(text) if text else None
        self.search_forward = forward
        self._version += 1
        self._cache.clear()
        self.refresh()
        if self.search_query is not None:
            self.finder.find(forward)
        else:
            self.message = ""
            self.post_status()

    # ---- progress bars --------------------------------------------------------------------

    def action_toggle_progress(self) -> None:
        self.toggle_progress()

    def toggle_progress(self) -> None:
        """``P``: a progress bar's consecutive redraws on one row that updates in place (the
        default), or every redraw as a row of its own (the spool keeps every line either way)."""
        self.collapse_progress = not self.collapse_progress
        self.message = ("a row per progress bar, redrawn in place (P: every redraw)" if self.collapse_progress
                        else "every progress bar redraw shown (P: a row per bar)")
        if self.mode is ViewMode.LIVE:
            self.show_rows(self.live_rows, ViewMode.LIVE)
            if self.follow:
                self._scroll_to_end()
            elif self.cursor is not None:
                self._scroll_to_seq(self.cursor)
        elif self.mode is ViewMode.FILTER and self.line_filter is not None:
            said = self.message
            self.apply_filters(self.line_filter, said)  # the filtered lines again, read anew
            return
        self.post_status()

    # ---- filter -------------------------------------------------------------------------

    def set_filter(self, text: str) -> None:
        """``&`` typed: a text ADDS a filter to the set (``!text`` hides the lines it matches; a
        rank such as ``TP3``; a regular expression when it has ``|``, ``(``… — see
        ``kvtui.logfilter``); ``-`` drops the newest filter; empty text clears them all. Lines
        come from the whole spool when there is one."""
        fs, said = next_filters(self.line_filter or FilterSet(), text)
        if fs is None:  # nothing changes: why
            self.message = said
            self.post_status()
            return
        self.apply_filters(fs, said)

    def apply_filters(self, filters: FilterSet | None, said: str = "") -> None:
        """Show the lines ``filters`` pass (None or an empty set: the live log again)."""
        self.line_filter = filters if filters else None
        self.cursor = None
        self.filter_hidden = 0
        fs = self.line_filter
        if fs is None:
            self.message = said or "filter cleared"
            self.show_rows(self.live_rows, ViewMode.LIVE)
            self.follow = True
            self._scroll_to_end()
            self.post_status()
            return
        in_memory = [line for line in self._all if fs.matches(line)]
        self.filter_hidden = len(self._all) - len(in_memory)
        self.show_rows(self._bar_rows(in_memory), ViewMode.FILTER)
        self.follow = True
        self._scroll_to_end()
        self.message = with_note(f"{len(in_memory):,} lines in memory match {short(fs.raw, 40)}", said)
        self.post_status()
        if self.source is not None:
            self._filter_from_spool(fs, said)

    @work(exclusive=True, group="log-filter", exit_on_error=False)
    async def _filter_from_spool(self, fs: FilterSet, said: str = "") -> None:
        """The newest ``window`` lines of the whole spool that ``fs`` passes (``spool_filter_hits``),
        then its texts in the host's gaps of lines not read (``search_gaps``)."""
        source = self.source
        if source is None:
            return
        window = self.window
        label = short(fs.raw, 40)
        try:
            hits, stopped = await spool_filter_hits(source, fs, window)
        except Exception as exc:  # an expression the spool refused: said, the lines in memory stay
            if self.line_filter is fs:
                self.message = f"the spool could not be searched for {label} ({exc})"
                self.post_status()
            return
        if self.line_filter is not fs:
            return  # replaced meanwhile
        hits = sorted((h for h in hits if fs.matches(h)), key=lambda line: line.seq)
        # keep lines that arrived while we searched (as they came: the view's rows may be folded)
        newest = hits[-1].seq if hits else -1
        fresh: list[LogLine] = []
        for i in range(len(self._all) - 1, -1, -1):
            line = self._all[i]
            if line.seq <= newest:
                break
            if fs.matches(line):
                fresh.append(line)
        hits.extend(reversed(fresh))
        hits = hits[-window:]
        # hidden: the lines of the span read (from the first line searched, or the oldest shown)
        end = max(newest, self._all[-1].seq if self._all else -1)
        start = stopped if stopped >= 0 else (hits[0].seq if hits else end + 1)
        self.filter_hidden = max(0, end - start + 1 - len(hits))
        self.show_rows(self._bar_rows(hits), ViewMode.FILTER)
        if self.follow:
            self._scroll_to_end()
        if stopped > 0:
            scope = f"the newest {end - stopped + 1:,} lines read back"
        else:
            scope = "the whole log" if stopped == 0 else "the whole log (newest shown)"
        host = self.host_log
        if host is None or not host.gaps:
            self.message = with_note(f"{len(hits):,} lines in {scope} match {label}", said)
            self.post_status()
            return
        read = f"{len(hits):,} lines read match {label}{' (newest shown)' if stopped < 0 else ''}"
        unread = sum(g.gap.lines or 0 for g in host.gaps)
        why = gaps_unsearchable(host, fs)
        if why is not None:
            self.message = f"{read}; {unread:,} lines not read: {why}"
            self.post_status()
            return
        self.message = f"{read}; searching {unread:,} lines not read on the host…"
        self.post_status()
        found = await search_gaps(host, fs, unread)
        if self.line_filter is not fs:
            return
        self.message = f"{read}; {found}"
        self.post_status()

    # ---- rendering ------------------------------------------------------------------------

    def _styles(self) -> dict[str, Style]:
        """The component styles, kept until the CSS applied to the view changes (a theme, a class:
        ``notify_style_update``). Textual's own cache of them is cleared by every ``refresh()``,
        and computing the twelve was ~5-20 ms of each frame that follows a batch or a host switch."""
        styles = self._row_styles
        if styles is None:
            get = self.get_component_rich_style
            styles = self._row_styles = {
                name: get(f"logview--{name}", partial=True)
                for name in (
                    "prefix", "timestamp", "phase", "error", "warning", "progress", "serving", "marker", "match",
                    "cursor", "mark", "gutter",
                )
            }
        return styles

    def notify_style_update(self) -> None:
        self._row_styles = None
        super().notify_style_update()

    def _shown_text(self, line: LogLine) -> str:
        """The text a row shows: with timestamps, without the engine's own (the column has it);
        cut at MAX_DISPLAY_CHARS."""
        text = without_own_stamp(line.text) if self.timestamps and line.ts is not None else line.text
        return text if len(text) <= MAX_DISPLAY_CHARS else text[: MAX_DISPLAY_CHARS - 1] + "…"

    def _line_text(self, line: LogLine, styles: dict[str, Style]) -> Text:
        text = self._shown_text(line)
        body = Text(text, no_wrap=True, end="")
        kind = line.style
        if kind in ("phase", "error", "warning", "progress", "serving"):
            body.stylize(styles[kind])
        elif text.startswith("[") and (close := text.find("]", 0, 48)) > 0:
            body.stylize(styles["prefix"], 0, close + 1)
        query = self.search_query
        if query is not None:
            for m in query.compiled().finditer(text):
                if m.end() > m.start():
                    body.stylize(styles["match"], m.start(), m.end())
        head = gutter_mark(line.seq in self.marks, line.seq == self.cursor)
        gutter = Text(head, style=styles["gutter"] if head != " " else Style())
        parts = [gutter]
        if self.timestamps:
            stamp = line.ts.strftime("%H:%M:%S.%f")[:12] if line.ts is not None else ""
            parts.append(Text(f"{stamp:<12} ", style=styles["timestamp"]))
        parts.append(body)
        return Text.assemble(*parts, no_wrap=True, end="")

    def _line_strip(self, line: LogLine, styles: dict[str, Style]) -> Strip:
        """``_line_text(line).render()`` as a strip — the same segments, cut where Rich cuts them
        (at each styled span) — built directly for the common case (printable text, no search
        highlight): a storm brings a new screenful of lines every frame."""
        text = self._shown_text(line)
        if self.search_query is not None or not text or not text.isprintable():
            rich_text = self._line_text(line, styles)
            return Strip(list(rich_text.render(self.app.console)), rich_text.cell_len)
        spans: list[tuple[int, int, Style]] = []  # (start, end, style): only styles Rich keeps (truthy)
        head = gutter_mark(line.seq in self.marks, line.seq == self.cursor)
        if head != " " and styles["gutter"]:
            spans.append((0, 1, styles["gutter"]))
        if self.timestamps:
            stamp = line.ts.strftime("%H:%M:%S.%f")[:12] if line.ts is not None else ""
            stamp = f"{stamp:<12} "
            if styles["timestamp"]:
                spans.append((len(head), len(head) + len(stamp), styles["timestamp"]))
            head += stamp
        start = len(head)
        kind = line.style
        if kind in ("phase", "error", "warning", "progress", "serving"):
            if styles[kind]:
                spans.append((start, start + len(text), styles[kind]))
        elif text.startswith("[") and (close := text.find("]", 0, 48)) > 0 and styles["prefix"]:
            spans.append((start, start + close + 1, styles["prefix"]))
        full = head + text
        if not spans:
            return Strip([Segment(full)], cell_len(full))
        cuts = sorted({0, len(full), *(a for a, _, _ in spans), *(b for _, b, _ in spans)})
        segments: list[Segment] = []
        k = 0
        for a, b in pairwise(cuts):
            while k < len(spans) and spans[k][1] <= a:
                k += 1
            style = spans[k][2] if k < len(spans) and spans[k][0] <= a else _PLAIN
            segments.append(Segment(full[a:b], style))
        return Strip(segments, cell_len(full))

    def render_lines(self, crop: Region) -> list[Strip]:
        # what every row of this frame shares, computed once per frame instead of once per row
        width = self.scrollable_content_region.width or self.size.width
        self._frame = (self.scroll_offset, width, self.rich_style, self._styles())
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def _marker_strip(self, line: LogLine, width: int, styles: dict[str, Style], base: Style) -> Strip:
        said = gap_text_label(line.text) if line.style == "gap" else line.text
        label = f" {said.strip(' ─-')} "
        left = 3
        right = max(0, width - left - len(label))
        text = Text("─" * left + label + "─" * right, style=styles["marker"], no_wrap=True, end="")
        return Strip(list(text.render(self.app.console)), text.cell_len).apply_style(base)

    def render_line(self, y: int) -> Strip:
        frame = self._frame
        if frame is None:
            frame = (self.scroll_offset, self.scrollable_content_region.width or self.size.width, self.rich_style,
                     self._styles())
        (scroll_x, scroll_y), width, base, styles = frame
        row = scroll_y + y
        view = self.shown_rows
        if not view:
            return Strip.blank(width, base)
        index = self._index_at_row(row)
        if index >= len(view):
            return Strip.blank(width, base)
        line = view[index]
        sub_row = row - self._row_starts[index] if self.wrap and self._row_starts else 0
        is_cursor = line.seq == self.cursor
        key = (line.seq, sub_row, width, self._version, is_cursor, line.seq in self.marks, self.wrap)
        row_base = base + styles["cursor"] if is_cursor else base
        strip = self._cache.get(key)
        if strip is None:
            if line.style in ("marker", "gap"):
                strip = self._marker_strip(line, width, styles, row_base) if sub_row == 0 else Strip.blank(0)
            else:
                full = self._line_strip(line, styles)
                if self.wrap:
                    indent = self._wrap_indent(width)
                    step = max(1, width - indent)
                    cuts = [*range(width, full.cell_length, step), full.cell_length]
                    pieces = full.divide(cuts)
                    strip = pieces[sub_row] if sub_row < len(pieces) else Strip.blank(0)
                    if sub_row:  # a continuation row: under the text, not under the gutter
                        strip = Strip.join([Strip.blank(indent, row_base), strip])
                else:
                    strip = full
                strip = strip.apply_style(row_base)
            self._cache[key] = strip
        if self.wrap or line.style in ("marker", "gap"):
            out = strip.crop_extend(0, width, row_base)
        elif strip.cell_length > scroll_x + width > scroll_x + 1:
            # cut at the panel's edge: the last cell says there is more (← → scroll); kept, as
            # crop_extend keeps its own, so a repaint of the same rows builds nothing
            cut = self._cut_cache.get((key, scroll_x))
            if cut is not None and cut[0] is strip:
                out = cut[1]
            else:
                more = Segment("›", row_base + styles["marker"])
                shown = list(Segment.divide(strip, [scroll_x, scroll_x + width - 1]))[1]  # (no strip between)
                out = Strip([*shown, more], width)
                self._cut_cache[(key, scroll_x)] = (strip, out)
        else:
            out = strip.crop_extend(scroll_x, scroll_x + width, row_base)
        return out.apply_offsets(scroll_x, row)
