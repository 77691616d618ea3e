"""Modal screens: key help, confirm (restart), and the calculator's explanation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class HelpScreen(ModalScreen[None]):
    """Every key of the console, generated from the live binding table (so remaps show)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close", id="help.close"),
    ]

    def __init__(self, rows: Sequence[tuple[str, str, str]], title: str = "Keys") -> None:
        super().__init__()
        self.rows = list(rows)
        self.title_text = title

    def compose(self) -> ComposeResult:
        width = max((len(k) for k, _, _ in self.rows), default=4)
        lines = [
            Content.assemble(
                (f"{key:>{width}}", "$accent bold"), "  ", (f"{desc:<24}", "$foreground"), (bid, "$text-muted")
            )
            for key, desc, bid in self.rows
        ]
        with Vertical(id="help-dialog", classes="dialog"):
            yield Static(Content.styled(self.title_text, "bold"), classes="dialog-title")
            with VerticalScroll():
                yield Static(Content("\n").join(lines), id="help-keys")
            yield Static(
                Content.styled(
                    "Remap any key in hosts.toml: [keymap] <id> = \"key\"  ·  ctrl+p: command palette  ·  esc closes",
                    "$text-muted",
                ),
                classes="dialog-footer",
            )

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; the dangerous choice is never the default."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,n", "answer(False)", "Cancel", id="confirm.cancel"),
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
    ]

    def __init__(self, title: str, body: str, confirm_label: str = "Restart") -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Static(Content.styled(self.title_text, "bold"), classes="dialog-title")
            yield Static(self.body, id="confirm-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel", variant="default")
                yield Button(f"{self.confirm_label} (y)", id="confirm", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")


class ExplainScreen(ModalScreen[None]):
    """The calculator's working: the formula with the numbers put in."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,x,q", "dismiss", "Close", id="explain.close"),
    ]

    def __init__(self, lines: Sequence[str], reasons: Sequence[str], verdict: str | None) -> None:
        super().__init__()
        self.lines = list(lines)
        self.reasons = list(reasons)
        self.verdict = verdict

    def compose(self) -> ComposeResult:
        body: list[Content] = [Content.styled(line, "$foreground") for line in self.lines]
        if self.reasons:
            body.append(Content(""))
            body.extend(Content.styled(f"• {r}", "$text-muted") for r in self.reasons)
        title = "How the prediction is made"
        if self.verdict:
            title += f" — verdict {self.verdict}"
        with Vertical(id="explain-dialog", classes="dialog"):
            yield Static(Content.styled(title, "bold"), classes="dialog-title")
            with VerticalScroll():
                yield Static(Content("\n").join(body), id="explain-body")
            yield Static(Content.styled("esc or x closes", "$text-muted"), classes="dialog-footer")

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
