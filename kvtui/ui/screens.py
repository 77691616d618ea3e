"""Modal screens: key help, confirm (restart), apply/rollback confirm (diff, commands,
prediction, refusals), notices, and the calculator's explanation."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Static

from kvtui.lazy import lazy_module
from kvtui.ui import formatting as fmt

ResultT = TypeVar("ResultT")

if TYPE_CHECKING:
    from kvtui.hosts.service import ApplyPlan
    from kvtui.kvcalc import Prediction
    from kvtui.tune import planner as tp
else:
    tp = lazy_module("kvtui.tune.planner")  # lazy: imports kvcalc (test_ui_startup): +79 ms CPU


class DialogBody(VerticalScroll):
    """A dialog's scrolling part: focused when the dialog opens, so the keys scroll it (↑/↓,
    j/k, page up/down, home/end) — a dialog taller than the terminal used to need the mouse."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
        Binding("g", "scroll_home", "Top", show=False),
        Binding("G", "scroll_end", "Bottom", show=False),
        Binding("space", "page_down", "Page down", show=False),
    ]


class FittedDialog(ModalScreen[ResultT]):
    """A dialog as tall as its content and never taller than the terminal: its ``DialogBody``
    gets the rows the rest of the dialog leaves, and the keys (the body has focus)."""

    def on_mount(self) -> None:
        for body in self.query(DialogBody):
            self.set_focus(body)
            break
        self.call_after_refresh(self.fit)

    def on_resize(self) -> None:
        self.call_after_refresh(self.fit)

    def fit(self) -> None:
        bodies = list(self.query(DialogBody))
        dialogs = list(self.query(".dialog"))
        if not bodies or not dialogs:
            return
        body, dialog = bodies[0], dialogs[0]
        others = 0
        for child in dialog.children:
            if child is body or not child.display:
                continue
            margin = child.styles.margin
            others += child.outer_size.height + margin.top + margin.bottom
        gutter = dialog.styles.gutter.height
        margin = body.styles.margin
        room = self.size.height - 2 - gutter - others - margin.top - margin.bottom
        room = max(3, room)
        if body.styles.max_height is None or body.styles.max_height.value != room:
            body.styles.max_height = room


class HelpScreen(FittedDialog[None]):
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
            with DialogBody():
                yield Static(Content("\n").join(lines), id="help-keys")
            yield Static(
                Content.styled(
                    "↑↓ j k pgup pgdn scroll  ·  remap any key in hosts.toml: [keymap] <id> = \"key\"  ·  "
                    "ctrl+p: command palette  ·  esc closes",
                    "$text-muted",
                ),
                classes="dialog-footer",
            )

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)


class ConfirmScreen(FittedDialog[bool]):
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
            with DialogBody():
                yield Static(self.body, id="confirm-body")
            with Horizontal(classes="dialog-buttons"):
                yield Static(Content.assemble(("y", "$accent bold"), (f" {self.confirm_label.lower()}  ·  ",
                                                                       "$text-muted"),
                                              ("n/esc", "$accent bold"), (" cancel", "$text-muted")),
                             classes="dialog-keys")
                yield Button("Cancel", id="cancel", variant="default", compact=True)
                yield Button(f"{self.confirm_label} (y)", id="confirm", variant="error", compact=True)

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")


class ExplainScreen(FittedDialog[None]):
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
            with DialogBody():
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


def diff_content(diff: str, *, context: int | None = None) -> Content:
    """A unified diff coloured with the theme's ``$diff-*`` variables (``context``: trimmed to
    that many lines around each change, see ``trim_diff``)."""
    lines: list[Content] = []
    source = trim_diff(diff, context) if context is not None else diff.rstrip("\n").splitlines()
    for line in source:
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


def trim_diff(diff: str, context: int = 1) -> list[str]:
    """``diff``'s hunks with ``context`` lines around each change (the hunk headers rewritten to
    match), its ``---``/``+++`` header left out (the dialog names the file above it): the change is
    what must fit on a 36-row screen."""
    out: list[str] = []
    lines = diff.rstrip("\n").splitlines()
    hunks: list[tuple[int, int, list[str]]] = []
    for line in lines:
        if line.startswith(("---", "+++")):
            continue
        m = re.match(r"@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@", line)
        if m:
            hunks.append((int(m.group(1)), int(m.group(2)), []))
        elif hunks:
            hunks[-1][2].append(line)
        else:
            out.append(line)
    for old, new, body in hunks:
        changed = [i for i, ln in enumerate(body) if ln.startswith(("+", "-"))]
        keep = sorted({j for i in changed for j in range(i - context, i + context + 1) if 0 <= j < len(body)})
        runs: list[list[int]] = []
        for j in keep:
            if runs and j == runs[-1][-1] + 1:
                runs[-1].append(j)
            else:
                runs.append([j])
        for run in runs:
            skipped_old = sum(1 for ln in body[: run[0]] if not ln.startswith("+"))
            skipped_new = sum(1 for ln in body[: run[0]] if not ln.startswith("-"))
            part = [body[j] for j in run]
            n_old = sum(1 for ln in part if not ln.startswith("+"))
            n_new = sum(1 for ln in part if not ln.startswith("-"))
            out.append(f"@@ -{old + skipped_old},{n_old} +{new + skipped_new},{n_new} @@")
            out.extend(part)
    return out


def prediction_summary(p: Prediction) -> Content:
    """The verdict in one line: badge, pool tokens (and the change), graph headroom, the
    largest safe fraction."""
    verdict = str(p.verdict)
    var = fmt.VERDICT_VARIABLE.get(verdict, "text-muted")
    now = p.model.tokens
    delta = f" ({p.tokens - now:+,})" if now and p.tokens != now else ""
    parts: list[tuple[str, str] | str] = [
        (f" {verdict.upper().replace('_', ' ')} ", f"bold $background on ${var}"), "  ",
        (f"{p.tokens:,}", "$foreground bold"), (f" KV tokens{delta}", "$text-muted"),
    ]
    if p.graph_headroom_gib is not None:
        style = "$error bold" if p.graph_headroom_gib < p.margin_gib else "$foreground"
        parts.extend([("  ·  headroom ", "$text-muted"), (fmt.signed_gib(p.graph_headroom_gib), style)])
    if p.max_safe_fraction is not None:
        parts.extend([("  ·  largest safe ", "$text-muted"), (fmt.safe_max(p.max_safe_fraction), "$accent bold")])
    return Content.assemble(*parts)


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


class ApplyScreen(FittedDialog[ApplyDecision | None]):
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
    SHORT_BELOW = 30  # terminal rows under which the diff comes before the file's path

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
        """What changes, whether the calculator agrees (one line), the diff and what runs come
        first — they fit a 120x36 terminal without scrolling; the prediction's details after."""
        plan = self.plan
        with Vertical(id="apply-dialog", classes="dialog"):
            yield Static(self._title(), id="apply-title", classes="dialog-title")
            with DialogBody(id="apply-scroll"):
                # a short terminal (80x24): the verdict and the diff first, so the diff has its
                # rows on screen (below the file's path it got 2, the rest scrolled off); the body
                # scrolls, with its scrollbar, when the whole is taller
                short = self.app.size.height < self.SHORT_BELOW
                if not short:
                    yield Static(self._source(), id="apply-source")
                yield Static(self._refusals(), id="apply-refusals", classes="apply-section")
                if plan.prediction is not None:
                    yield Static(prediction_summary(plan.prediction), id="apply-verdict", classes="apply-section")
                if plan.diff:
                    yield Static(Content.styled("Diff", "bold"), classes="apply-heading")
                    yield Static(diff_content(plan.diff, context=1), id="apply-diff")
                if short:
                    yield Static(self._source(), id="apply-source", classes="apply-section")
                if plan.changed and plan.steps:
                    yield Static(Content.styled("What runs", "bold"), classes="apply-heading")
                    yield Static(self._commands(), id="apply-commands")
                if plan.prediction is not None:
                    title = "Prediction for the new flags" if self.is_apply else "Prediction for the restored flags"
                    yield Static(prediction_content(plan.prediction, plan.prediction_note, title=title),
                                 id="apply-prediction", classes="apply-section")
                elif self.is_apply and plan.prediction_note:
                    yield Static(Content.styled(f"Prediction: {plan.prediction_note}", "$warning"),
                                 id="apply-prediction", classes="apply-section")
            if self.offers_rollback:
                yield Checkbox("Roll back automatically if the new boot fails", self.rollback_default,
                               id="apply-rollback", compact=True)
                yield Static(Content.styled(self.rollback_why, "$text-muted"), id="apply-rollback-why")
            with Horizontal(classes="dialog-buttons"):
                yield Static(self._keys(), id="apply-keys", classes="dialog-keys")
                yield Button("Cancel", id="cancel", variant="default", compact=True)
                yield Button(self._confirm_label(), id="confirm", variant="error", disabled=bool(self.blocking()),
                             compact=True)

    def on_mount(self) -> None:
        super().on_mount()  # the body has the keys (not Cancel: the restart step needed the mouse)
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


class NoticeScreen(FittedDialog[None]):
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
            with DialogBody():
                yield Static(Content(self.body), id="notice-body")
            yield Static(Content.styled("esc closes", "$text-muted"), classes="dialog-footer")

    def action_close(self) -> None:
        self.dismiss(None)


@dataclass(frozen=True, slots=True)
class TuneRequest:
    """What the tune dialog asks for (the CLI's ``--goal``, ``--max-boots``, ``--also``)."""

    goal: str
    max_boots: int
    also: tuple[str, ...] = ()
    requests: int | None = None


class TuneScreen(FittedDialog[TuneRequest | None]):
    """``O``: tune the host — the goal (``max-tokens``, ``context=N``, ``tokens=N``), the boot
    budget, and the extra knobs it may move (none unless named). Enter starts (after the plan is
    shown and confirmed), Esc cancels. While a tune runs, Esc stops it after the step in progress."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="tune.cancel"),
    ]

    def __init__(self, host: str, now: str) -> None:
        super().__init__()
        self.host = host
        self.now = now

    def compose(self) -> ComposeResult:
        rules = (
            "Each step is an apply with restart on the one guarded path: diff, backup, verify, restart, "
            "follow the new boot, check the edit is in effect, then ask the server for one token.\n"
            "A capture OOM recalibrates from the boot's capture trail and steps down; a pool that does not fit "
            "steps up; the tune stops at the first ready boot that meets the goal, or when the budget is spent; "
            "ending on a failed boot rolls back to the last ready configuration.\n"
            "Esc stops the tune after the step in progress; ctrl+x interrupts that step."
        )
        with Vertical(id="tune-dialog", classes="dialog"):
            yield Static(Content.styled(f"Tune {self.host}", "bold"), classes="dialog-title")
            with DialogBody():
                yield Static(self.now, id="tune-now")
                yield Static(Content.styled(rules, "$text-muted"), id="tune-rules")
                yield Static("goal: max-tokens | context=N | context=N×K | tokens=N", classes="dialog-label")
                yield Input("max-tokens", id="tune-goal")
                yield Static("boot budget (restarts at most)", classes="dialog-label")
                yield Input("6", id="tune-max-boots", restrict=r"[0-9]*")
                yield Static("also move (max-running-requests, cuda-graph-max-bs; blank: the fraction only)",
                             classes="dialog-label")
                yield Input("", id="tune-also")
                yield Static("", id="tune-error")
            with Horizontal(classes="dialog-buttons"):
                yield Static(Content.assemble(("enter", "$accent bold"), (" plan  ·  ", "$text-muted"),
                                              ("esc", "$accent bold"), (" cancel", "$text-muted")),
                             classes="dialog-keys")
                yield Button("Cancel", id="cancel", variant="default", compact=True)
                yield Button("Plan (enter)", id="confirm", variant="primary", compact=True)

    def on_mount(self) -> None:
        # after the dialog's own mount handler (Textual runs it too), which focuses the body
        self.call_after_refresh(self._focus_goal)

    def _focus_goal(self) -> None:
        self.set_focus(self.query_one("#tune-goal", Input))

    def request(self) -> TuneRequest | str:
        """The request, or what is wrong with it."""
        goal = self.query_one("#tune-goal", Input).value.strip()
        requests = None
        m = re.fullmatch(r"context=([0-9_,]+)\s*[x×*]\s*([0-9]+)", goal)
        if m:
            goal, requests = f"context={m.group(1)}", int(m.group(2))
        try:
            tp.parse_goal(goal, requests)
        except tp.TuneError as exc:
            return str(exc)
        boots_text = self.query_one("#tune-max-boots", Input).value.strip() or "6"
        if not boots_text.isdigit() or int(boots_text) < 1:
            return f"boot budget {boots_text!r}: expected a whole number ≥ 1"
        also = tuple(a.strip() for a in self.query_one("#tune-also", Input).value.split(",") if a.strip())
        for a in also:
            if tp.also_name(a) is None:
                return f"also {a!r}: expected max-running-requests or cuda-graph-max-bs"
        return TuneRequest(goal, int(boots_text), also, requests)

    def _submit(self) -> None:
        got = self.request()
        if isinstance(got, str):
            self.query_one("#tune-error", Static).update(Content.styled(got, "$error"))
            return
        self.dismiss(got)

    def on_input_submitted(self) -> None:
        self._submit()

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm":
            self._submit()
        else:
            self.dismiss(None)
