"""Modal screens: key help, confirm (restart), apply/rollback confirm (diff, commands,
prediction, refusals), notices, and the calculator's explanation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Static

from kvtui.ui import formatting as fmt

if TYPE_CHECKING:
    from kvtui.hosts.service import ApplyPlan
    from kvtui.kvcalc import Prediction


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


# ---------------------------------------------------------------------------------------------
# Apply / rollback
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApplyDecision:
    """What the operator confirmed: ``force`` overrides the calculator's refusal (``--force``);
    ``rollback_on_failure`` restores the previous flags if the new boot fails."""

    force: bool
    rollback_on_failure: bool


def diff_content(diff: str) -> Content:
    """A unified diff coloured with the theme's ``$diff-*`` variables."""
    lines: list[Content] = []
    for line in diff.rstrip("\n").splitlines():
        if line.startswith(("+++", "---")):
            lines.append(Content.styled(line, "$text-muted bold"))
        elif line.startswith("@@"):
            lines.append(Content.styled(line, "$diff-hunk"))
        elif line.startswith("+"):
            lines.append(Content.styled(line, "$diff-add bold"))
        elif line.startswith("-"):
            lines.append(Content.styled(line, "$diff-remove"))
        else:
            lines.append(Content.styled(line, "$foreground 80%"))
    return Content("\n").join(lines)


def prediction_content(p: Prediction, note: str | None = None, *, title: str = "Prediction for the new flags"
                       ) -> Content:
    """The calculator's verdict for the new flags: a badge, the figures, the reasons."""
    verdict = str(p.verdict)
    var = fmt.VERDICT_VARIABLE.get(verdict, "text-muted")
    lines: list[Content] = [
        Content.assemble(
            (f"{title}  ", "bold"),
            (f" {verdict.upper().replace('_', ' ')} ", f"bold $background on ${var}"),
            (f"  confidence {p.confidence} · {p.model.basis}", "$text-muted"),
        )
    ]
    now = p.model.tokens
    delta = f" (now {now:,}, {p.tokens - now:+,})" if now and p.tokens != now else ""
    rows: list[tuple[str, str, str]] = [("KV tokens", f"{p.tokens:,}{delta}", "$foreground bold")]
    if p.kv_cache_gib is not None:
        rows.append(("KV per rank", fmt.gib(p.kv_cache_gib), "$foreground"))
    if p.graph_headroom_gib is not None:
        style = "$error bold" if p.graph_headroom_gib < p.margin_gib else "$foreground"
        rows.append(("graph headroom", f"{fmt.signed_gib(p.graph_headroom_gib)} (margin {fmt.gib(p.margin_gib)})",
                     style))
    if p.max_safe_fraction is not None:
        rows.append(("largest safe fraction", fmt.safe_max(p.max_safe_fraction), "$accent bold"))
    for label, value, style in rows:
        lines.append(Content.assemble(("  " + f"{label:<22}", "$text-muted"), (value, style)))
    lines.extend(Content.styled(f"  • {r}", "$text-muted") for r in p.reasons)
    if note:
        lines.append(Content.styled(f"  {note}", "$warning"))
    return Content("\n").join(lines)


class ApplyScreen(ModalScreen[ApplyDecision | None]):
    """Confirm an apply (``a``) or a rollback (``u``): the file and how it was found, the flag
    changes, refusals, the calculator's prediction, the unified diff and the exact commands.
    ``y`` confirms and ``n``/Esc cancels. A refusal by the calculator (``no_fit``/``oom_risk``)
    is overridden only by pressing ``F`` first (the console's ``--force``); a readonly host,
    a container or a host kvtui cannot restart is never overridden. ``r`` toggles the automatic
    rollback if the new boot fails."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,n", "cancel", "Cancel", id="confirm.cancel"),
        Binding("y", "confirm", "Confirm", id="confirm.yes"),
        Binding("F", "force", "Apply anyway", id="apply.force"),
        Binding("r", "toggle_rollback", "Auto-rollback", id="apply.rollback"),
    ]

    def __init__(self, plan: ApplyPlan, *, rollback_default: bool = False, rollback_why: str = "") -> None:
        super().__init__()
        self.plan = plan
        self.force = False
        self.rollback_default = rollback_default
        self.rollback_why = rollback_why

    # ---- state ------------------------------------------------------------------------------

    @property
    def is_apply(self) -> bool:
        return self.plan.action == "apply"

    @property
    def offers_rollback(self) -> bool:
        return self.is_apply and self.plan.restart and self.plan.changed

    @property
    def forceable(self) -> bool:
        return any(r.forceable for r in self.plan.refusals)

    def blocking(self) -> list[str]:
        """Why ``y`` cannot go ahead now (empty: it can)."""
        reasons = [r.reason for r in self.plan.refusals if not (r.forceable and self.force)]
        if not reasons and not self.plan.changed:
            reasons.append(f"{self.plan.source.path} already says this: nothing to change")
        return reasons

    @property
    def rollback_on_failure(self) -> bool:
        if not self.offers_rollback:
            return False
        return self.query_one("#apply-rollback", Checkbox).value

    # ---- layout -----------------------------------------------------------------------------

    def _title(self) -> Content:
        plan = self.plan
        verb = "Apply on" if self.is_apply else "Roll back"
        what = f"{verb} {plan.name}" + (" and restart" if plan.restart and plan.changed else "")
        if self.blocking() and plan.changed:
            return Content.assemble((what, "bold"), ("  —  REFUSED", "$error bold"))
        if self.force:
            return Content.assemble((what, "bold"), ("  —  APPLY ANYWAY (forced)", "$warning bold"))
        return Content.styled(what, "bold")

    def _source(self) -> Content:
        plan, src = self.plan, self.plan.source
        kind = f"{src.kind}" + (f" of {src.unit}" if src.unit and src.kind == "unit" else "")
        head = "restore " + plan.backup_path + " over " if not self.is_apply else "edit "
        lines = [
            Content.assemble((head, "$text-muted"), (src.path, "$foreground bold"), (f"  ({kind})", "$text-muted"))
        ]
        lines.extend(Content.styled(f"  {v}", "$text-muted") for v in src.via)
        for c in plan.changes:
            lines.append(Content.assemble(("  ", ""), (c.describe(), "$accent bold")))
        lines.extend(Content.styled(f"  ⚠ {w}", "$warning") for w in plan.warnings)
        return Content("\n").join(lines)

    def _refusals(self) -> Content:
        lines: list[Content] = []
        for r in self.plan.refusals:
            if r.forceable and self.force:
                lines.append(Content.assemble(("overridden (F): ", "$warning bold"), (r.reason, "$warning")))
            else:
                lines.append(Content.assemble(("✖ refused: ", "$error bold"), (r.reason, "$foreground")))
                lines.append(Content.styled(
                    "  press F to apply anyway (the console's --force), then y" if r.forceable
                    else "  kvtui never overrides this", "$text-muted"))
        if not self.plan.changed:
            lines.append(Content.styled(f"{self.plan.source.path} already says this: nothing to change",
                                        "$warning bold"))
        return Content("\n").join(lines)

    def _commands(self) -> Content:
        lines: list[Content] = []
        for i, st in enumerate(self.plan.steps, 1):
            lines.append(Content.assemble((f"{i:>2}. ", "$text-muted"), (st.title, "$foreground")))
            if st.command:
                for j, cl in enumerate(st.command.splitlines() or [""]):
                    lines.append(Content.assemble(("    $ " if j == 0 else "      ", "$text-muted"),
                                                  (cl, "$accent")))
        return Content("\n").join(lines)

    def _keys(self) -> Content:
        parts: list[tuple[str, str]] = []
        blocked = bool(self.blocking())
        if not blocked:
            parts.append(("y", " apply" if self.is_apply else " roll back"))
        if self.forceable:
            parts.append(("F", " keep the refusal" if self.force else " apply anyway"))
        if self.offers_rollback:
            parts.append(("r", " auto-rollback on/off"))
        parts.append(("n/esc", " cancel"))
        out: list[tuple[str, str] | str] = []
        for i, (key, desc) in enumerate(parts):
            if i:
                out.append(("  ·  ", "$text-muted"))
            out.extend([(key, "$accent bold"), (desc, "$text-muted")])
        return Content.assemble(*out)

    def _confirm_label(self) -> str:
        if not self.is_apply:
            return "Roll back (y)"
        return "Apply anyway (y)" if self.force else "Apply (y)"

    def compose(self) -> ComposeResult:
        plan = self.plan
        with Vertical(id="apply-dialog", classes="dialog"):
            yield Static(self._title(), id="apply-title", classes="dialog-title")
            with VerticalScroll(id="apply-scroll"):
                yield Static(self._source(), id="apply-source")
                yield Static(self._refusals(), id="apply-refusals", classes="apply-section")
                if plan.prediction is not None:
                    title = "Prediction for the new flags" if self.is_apply else "Prediction for the restored flags"
                    yield Static(prediction_content(plan.prediction, plan.prediction_note, title=title),
                                 id="apply-prediction", classes="apply-section")
                elif self.is_apply and plan.prediction_note:
                    yield Static(Content.styled(f"Prediction: {plan.prediction_note}", "$warning"),
                                 id="apply-prediction", classes="apply-section")
                if plan.diff:
                    yield Static(Content.styled("Diff", "bold"), classes="apply-heading")
                    yield Static(diff_content(plan.diff), id="apply-diff")
                if plan.changed and plan.steps:
                    yield Static(Content.styled("What runs", "bold"), classes="apply-heading")
                    yield Static(self._commands(), id="apply-commands")
            if self.offers_rollback:
                yield Checkbox("Roll back automatically if the new boot fails", self.rollback_default,
                               id="apply-rollback")
                yield Static(Content.styled(self.rollback_why, "$text-muted"), id="apply-rollback-why")
            yield Static(self._keys(), id="apply-keys", classes="dialog-footer")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Cancel", id="cancel", variant="default")
                yield Button(self._confirm_label(), id="confirm", variant="error", disabled=bool(self.blocking()))

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()
        self.query_one("#apply-refusals").display = bool(self.plan.refusals) or not self.plan.changed

    def _refresh_state(self) -> None:
        self.query_one("#apply-title", Static).update(self._title())
        self.query_one("#apply-refusals", Static).update(self._refusals())
        self.query_one("#apply-keys", Static).update(self._keys())
        confirm = self.query_one("#confirm", Button)
        confirm.label = self._confirm_label()
        confirm.disabled = bool(self.blocking())

    # ---- actions ----------------------------------------------------------------------------

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_confirm(self) -> None:
        blocking = self.blocking()
        if blocking:
            self.app.bell()
            hint = "press F first to apply anyway" if self.forceable and not self.force else blocking[0]
            self.notify(hint, title="not applied", severity="warning", timeout=5)
            return
        self.dismiss(ApplyDecision(self.force, self.rollback_on_failure))

    def action_force(self) -> None:
        if not self.forceable:
            return
        self.force = not self.force
        self._refresh_state()

    def action_toggle_rollback(self) -> None:
        if self.offers_rollback:
            box = self.query_one("#apply-rollback", Checkbox)
            box.value = not box.value

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "confirm":
            self.action_confirm()
        else:
            self.dismiss(None)


class NoticeScreen(ModalScreen[None]):
    """A message that needs reading (an apply kvtui refuses before it can plan, say)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "close", "Close", id="notice.close"),
    ]

    def __init__(self, title: str, body: str, *, error: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.error = error

    def compose(self) -> ComposeResult:
        with Vertical(id="notice-dialog", classes="dialog -error" if self.error else "dialog"):
            yield Static(Content.styled(self.title_text, "bold"), classes="dialog-title")
            yield Static(Content(self.body), id="notice-body")
            yield Static(Content.styled("esc closes", "$text-muted"), classes="dialog-footer")

    def action_close(self) -> None:
        self.dismiss(None)
