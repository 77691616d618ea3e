"""The console's performance machinery: three pieces that exist only to keep keystrokes fast
with many hosts and busy logs (benchmarks 3, 5 and 7 in bench/; their figures and history are in
bench/README.md). Each changes when work is done, never what is shown.

``QuietStatic``
    A ``Static`` that re-renders, and re-lays out the screen, only when what it shows changed.
    Live panels are told the state many times a second; rebuilding identical text and running a
    layout pass each time was the main cost of a busy console. Callers pass a cheap key of what the
    content depends on and a builder that runs only when the key changed; ``layout=False`` for a
    widget whose size the CSS fixes (a repaint only, no layout pass of the whole screen).

``KeysFooter``
    Textual's footer, rebuilt only when the keys it shows changed. Textual recomposes it (a dozen
    widgets mounted and styled, then a layout pass) on every focus change and binding refresh,
    most of which change nothing it shows; with many hosts that cost more than the key itself.

``GcPacer``
    Full (generation-2) garbage collections paced away from keystrokes. With many hosts Python
    ran one every second or two, each walking every object the console made since start-up; a
    key arriving meanwhile waited for it. The pacer freezes the start-up objects and runs full
    collections when Python would have, but only at a quiet moment (or after a bound). Between a
    key (or a host switch) and the frame that shows it, no collection runs at all (``hold``): the
    frame allocates thousands of strips and segments, and the young-generation collections they
    set off were ~12 % of a host switch with 32 hosts (~60 of generation 0 and ~5 of generation 1).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Hashable
from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.visual import VisualType
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey

_UNSET = object()


class QuietStatic(Static):
    """A ``Static`` updated through ``set(key, build)``: rebuilt only when ``key`` changed."""

    def __init__(self, content: VisualType = "", *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(content, id=id, classes=classes)
        self._key: object = _UNSET

    def set(self, key: Hashable, build: Callable[[], VisualType], *, layout: bool = True) -> bool:
        """Show ``build()`` unless ``key`` equals the last one; True when it updated. ``layout=False``
        for a widget whose size the CSS fixes: no layout pass of the whole screen (the costliest
        step of a busy console), only a repaint."""
        if key == self._key:
            return False
        self._key = key
        self.update(build(), layout=layout)
        return True


class KeysFooter(Footer):
    """Textual's footer, rebuilt only when the keys it shows changed. Textual recomposes it (a
    dozen widgets mounted and styled, then a layout pass of the screen) on every focus change and
    binding refresh, most of which change nothing it shows: with many hosts that cost more than
    the key that caused it."""

    PALETTE_CELLS = 13  # "▏^p palette " docked right

    def __init__(self) -> None:
        super().__init__()
        self._shown_keys: tuple[object, ...] | None = None
        self._recompose_due = False

    def bindings_changed(self, screen: Screen[Any]) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen and not self._recompose_due:
            self._recompose_due = True
            if self._shown_keys is None:  # nothing shown yet: in the first frame, not after it
                self.call_next(self._recompose_if_changed)
            else:
                self.call_after_refresh(self._recompose_if_changed)

    def _keys(self) -> tuple[object, ...]:
        """Everything ``compose`` reads: the same keys give the same footer."""
        app = self.app
        shown = tuple(
            (binding.key, app.get_key_display(binding), binding.description, binding.action, binding.group,
             enabled, tooltip)
            for (_, binding, enabled, tooltip) in self.screen.active_bindings.values()
            if binding.show
        )
        palette = self.screen.active_bindings.get(app.COMMAND_PALETTE_BINDING)
        palette_key = None
        if palette is not None:
            _, binding, enabled, tooltip = palette
            palette_key = (binding.key, app.get_key_display(binding), binding.description, binding.action, enabled,
                           binding.tooltip or tooltip)
        return shown, palette_key, self.show_command_palette, app.ENABLE_COMMAND_PALETTE, self._width()

    def _width(self) -> int:
        return self.size.width or self.app.size.width

    def on_resize(self) -> None:
        if self._shown_keys is not None and self._shown_keys[-1] != self._width() and not self._recompose_due:
            self._recompose_due = True
            self.call_after_refresh(self._recompose_if_changed)

    def compose(self) -> ComposeResult:
        """Textual's keys, as many as fit whole (the bindings' order is their priority): at 80
        columns the last key was cut mid-word ("x Expla▏", issue 22 #14)."""
        room = self._width() - self.PALETTE_CELLS
        for widget in super().compose():
            if isinstance(widget, FooterKey) and not widget.has_class("-command-palette"):
                cells = len(widget.key_display) + 2 + (len(widget.description) + 1 if widget.description else 0)
                if cells > room:
                    room = 0  # the keys after it are lower in priority: not one of them either
                    continue
                room -= cells
            yield widget

    async def _recompose_if_changed(self) -> None:
        self._recompose_due = False
        if not self.is_attached:
            return
        keys = self._keys()
        if keys == self._shown_keys:
            return
        self._shown_keys = keys
        await self.recompose()


class GcPacer:
    """Full (generation-2) garbage collections paced away from keystrokes.

    Python runs a full collection whenever enough objects have survived two younger ones; with
    many hosts that is every second or two, and each walks every object the console made since
    start-up (hundreds of thousands with 32 hosts) — a key that arrives meanwhile waits for it.
    ``start`` freezes what exists (the console's widgets, styles and caches: they live as long as
    the process) and takes full collections off Python's automatic schedule; ``tick`` (called
    about twice a second) runs one when Python would have (``gc.get_count()[2]`` reached the
    threshold), no sooner than ``min_interval`` after the last, and only once no input has come
    for ``quiet`` seconds — or after ``max_interval`` regardless, so memory held by reference
    cycles stays bounded while someone types without pause. Generation 0 and 1 collections stay
    automatic (they are short). ``stop`` puts Python's thresholds back.

    When it froze at start, what survives a paced collection is frozen too (what the console
    built since — hidden hosts' calculators, caches, windows of lines — lives on; the next
    collection walks only what is newer). Reference cycles
    that become garbage while frozen (a closed dialog, a rebuilt field) are reclaimed by a
    thorough collection — everything unfrozen, collected and frozen again — once ``thorough``
    seconds have passed, at the next quiet moment (``max_interval`` does not force that one)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        quiet: float = 2.0,
        min_interval: float = 5.0,
        max_interval: float = 15.0,
        thorough: float = 600.0,
        hold_limit: float = 1.0,
        collect: Callable[[int], int] = gc.collect,
        get_count: Callable[[], tuple[int, int, int]] = gc.get_count,
        freeze: Callable[[], None] = gc.freeze,
        unfreeze: Callable[[], None] = gc.unfreeze,
        disable: Callable[[], None] = gc.disable,
        enable: Callable[[], None] = gc.enable,
    ) -> None:
        self._clock = clock
        self.quiet = quiet
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.thorough = thorough
        self._collect = collect
        self._get_count = get_count
        self._freeze = freeze
        self._unfreeze = unfreeze
        self._disable = disable
        self._enable = enable
        self.hold_limit = hold_limit
        self._held_at: float | None = None  # when ``hold`` stopped collections (None: not held)
        self.holds = 0  # holds taken, for tests and the curious
        self._last_thorough = clock()
        self.thorough_collections = 0  # of ``collections``, those that unfroze everything first
        self._saved: tuple[int, int, int] | None = None
        self._froze = False
        self._gen2_threshold = gc.get_threshold()[2]
        self._last_input = -1e18
        self._last_full = clock()
        self.collections = 0  # full collections this pacer ran

    @property
    def started(self) -> bool:
        return self._saved is not None

    def start(self, *, freeze: bool = True) -> None:
        if self._saved is not None:
            return
        t0, t1, t2 = gc.get_threshold()
        self._saved = (t0, t1, t2)
        self._gen2_threshold = t2
        if freeze:
            self._collect(2)  # nothing unreachable is frozen with the rest
            self._freeze()
            self._froze = True
        gc.set_threshold(t0, t1, 1 << 30)  # no automatic full collection: ``tick`` decides
        self._last_full = self._last_thorough = self._clock()

    def stop(self) -> None:
        self.release()
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
            if self._froze:
                self._unfreeze()  # back in the oldest generation: collected as usual again
                self._froze = False

    def input_seen(self) -> None:
        self._last_input = self._clock()

    @property
    def held(self) -> bool:
        return self._held_at is not None

    def hold(self) -> bool:
        """No collection of any generation until ``release`` (the caller releases once the frame
        that answers a key is drawn; ``tick`` releases a hold older than ``hold_limit`` seconds,
        should that frame never come). Only once started; True when it took the hold."""
        if self._saved is None:
            return False
        if self._held_at is None:
            self._disable()
            self.holds += 1
        self._held_at = self._clock()
        return True

    def release(self) -> None:
        """Collections as usual again (the objects made meanwhile are collected at the next one)."""
        if self._held_at is not None:
            self._held_at = None
            self._enable()

    def tick(self) -> bool:
        """Run a full collection if one is due and the moment is right; whether it ran."""
        if self._held_at is not None and self._clock() - self._held_at >= self.hold_limit:
            self.release()
        if self._saved is None or self._get_count()[2] < self._gen2_threshold:
            return False
        now = self._clock()
        since = now - self._last_full
        if since < self.min_interval:
            return False
        quiet = now - self._last_input >= self.quiet
        if not quiet and since < self.max_interval:
            return False
        thorough = self._froze and quiet and now - self._last_thorough >= self.thorough
        if thorough:
            self._unfreeze()
        self._collect(2)
        if self._froze:
            self._freeze()  # the survivors are long-lived: out of the next scans
        self._last_full = self._clock()
        if thorough:
            self._last_thorough = self._last_full
            self.thorough_collections += 1
        self.collections += 1
        return True
