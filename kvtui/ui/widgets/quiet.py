"""``QuietStatic``: a ``Static`` that re-renders (and re-lays out) only when what it shows changed.

Live panels are told the state many times a second; rebuilding identical text and running a
layout pass each time is the main cost of a busy console, so each caller passes a cheap key of
what the content depends on, and a builder that runs only when the key changed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from textual.visual import VisualType
from textual.widgets import Static

_UNSET = object()


class QuietStatic(Static):
    def __init__(self, content: VisualType = "", *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(content, id=id, classes=classes)
        self._key: object = _UNSET

    def set(self, key: Hashable, build: Callable[[], VisualType], *, layout: bool = True) -> bool:
        """Show ``build()`` unless ``key`` equals the last one; True when it updated. ``layout=False``
        for a widget whose size the CSS fixes: no layout pass of the whole screen (the costliest
        step of a busy console: ~30 ms each on a small machine), only a repaint."""
        if key == self._key:
            return False
        self._key = key
        self.update(build(), layout=layout)
        return True
