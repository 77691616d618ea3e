"""``ActionBanner``: what a change to the host (apply, rollback, restart) is doing, step by step,
then how it ended (prediction vs reality, "edit not in effect", rolled back).

It shows only the lines it is given (the service layer's progress and outcome); the newest few
progress lines stay visible while the action runs, bounded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Literal, Protocol

from textual.content import Content

from kvtui.ui.widgets.banner import Banner

Severity = Literal["ok", "warning", "failed"]

_ICON: dict[Severity, tuple[str, str]] = {
    "ok": ("✔", "$success"),
    "warning": ("▲", "$warning"),
    "failed": ("✖", "$error"),
}


class ChangeBanner(Protocol):
    """What a ``ChangeController`` says a change through: an ``ActionBanner``, or a deployment's
    banners as one (``ui.deployment.GroupBanner``: every node pane's)."""

    def start(self, title: str, first: str | None = None) -> None: ...

    def progress(self, line: str) -> None: ...

    def stop(self) -> None: ...

    def finish(self, severity: Severity, headline: str, detail: Sequence[str] = ()) -> None: ...

    def hide(self) -> None: ...


class ActionBanner(Banner):
    """A banner above the panels while a host-changing action runs, and its outcome after."""

    DEFAULT_CSS = """
    ActionBanner {
        display: none;
        height: auto;
        max-height: 12;
        padding: 0 1;
        text-wrap: wrap;  /* a backup path is shown whole, wrapped (it was cut with …) */
        background: $primary-muted;
        border-left: thick $primary;
        &.-shown { display: block; }
        &.-ok { background: $success-muted; border-left: thick $success; }
        &.-warning { background: $warning-muted; border-left: thick $warning; }
        &.-failed { background: $error-muted; border-left: thick $error; }
    }
    """

    RECENT = 3  # progress lines kept on screen under the current step
    DETAIL = 5  # outcome lines at most (each wrapped to the banner's width, never cut)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.title_text = ""
        self.lines: deque[str] = deque(maxlen=self.RECENT + 1)
        self.steps = 0
        self.running = False
        self.outcome: Severity | None = None
        self.headline = ""
        self.detail: list[str] = []

    # ---- state in --------------------------------------------------------------------------

    def start(self, title: str, first: str | None = None) -> None:
        """An action begins: ``title`` (e.g. "apply on demo"), ``first`` its first line."""
        self.title_text = title
        self.lines.clear()
        self.steps = 0
        self.running = True
        self.outcome = None
        self.headline = ""
        self.detail = []
        if first:
            self.lines.append(first)
        self._show()

    def progress(self, line: str) -> None:
        """One progress line of the running action (shown unless the banner was hidden)."""
        self.steps += 1
        self.lines.append(line)
        if self.shown:
            self._show()

    def stop(self) -> None:
        """The action is over without an outcome to show (the dialog was cancelled)."""
        self.running = False
        self.hide()

    def finish(self, severity: Severity, headline: str, detail: Sequence[str] = ()) -> None:
        """The action ended: the headline and a few detail lines stay until hidden."""
        self.running = False
        self.outcome = severity
        self.headline = headline
        self.detail = list(detail)[: self.DETAIL]
        self._show()

    def hide(self) -> None:
        """Out of sight; a running action goes on (and its outcome shows the banner again)."""
        self.outcome = None
        self.remove_class("-shown", "-ok", "-warning", "-failed")
        self.update("")

    @property
    def shown(self) -> bool:
        return self.has_class("-shown")

    # ---- rendering ---------------------------------------------------------------------------

    def _show(self) -> None:
        self.add_class("-shown")
        for sev in ("ok", "warning", "failed"):
            self.set_class(self.outcome == sev, f"-{sev}")
        self.update(self.build())

    def build(self) -> Content:
        if self.outcome is None:
            lines = list(self.lines)
            head = Content.assemble(
                ("⟳ ", "$primary bold"), (self.title_text, "bold"),
                (f"  ·  {lines[-1]}" if lines else "", "$foreground"),
                ("   esc: in the background · ctrl+x: cancel", "$text-muted"),
            )
            rest = [Content.styled(f"   {ln}", "$text-muted") for ln in lines[:-1]]
            return Content("\n").join([head, *rest])
        icon, style = _ICON[self.outcome]
        head = Content.assemble(
            (f"{icon} ", f"{style} bold"), (self.headline, "bold"), ("   esc hides", "$text-muted")
        )
        rest = [Content.styled(f"   {ln}", "$foreground") for ln in self.detail]
        return Content("\n").join([head, *rest])
