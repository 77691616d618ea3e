"""``WidgetMessage``: a message a widget posts about itself — the widget is the message's
``control``, what ``@on(Message, "#id")`` selectors match."""

from __future__ import annotations

from typing import Generic, TypeVar

from textual.message import Message
from textual.widget import Widget

W = TypeVar("W", bound=Widget)


class WidgetMessage(Message, Generic[W]):
    """A message about ``widget`` (its ``control``)."""

    def __init__(self, widget: W) -> None:
        super().__init__()
        self.widget = widget

    @property
    def control(self) -> W:
        return self.widget
