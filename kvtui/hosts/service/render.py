"""The operator's words for plans and outcomes: the plan as text, the prediction, one headline
per outcome, and the prediction compared with the boot that followed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtui import fmt
from kvtui.boot import Boot, BootStatus
from kvtui.hosts.service.model import ApplyOutcome, ApplyPlan

if TYPE_CHECKING:
    from kvtui.kvcalc import Prediction

_STATUS_WORDS = {
    "written": "written",
    "ready": "applied; the new boot is ready",
    "failed": "the new boot failed",
    "not_in_effect": "edit not in effect",
    "timeout": "timed out waiting for the new boot",
    "unchanged": "nothing to do",
    "error": "not applied",
    "refused": "refused",
    "restarted": "restarted; a new boot starts",
    "rolling": "written; the controller rolls the pod out (not followed)",
}


def outcome_headline(outcome: ApplyOutcome, action: str, name: str) -> str:
    """One line for the operator: ``demo: applied; the new boot is ready`` (CLI and console)."""
    status = _STATUS_WORDS.get(outcome.status, outcome.status)
    if action == "rollback":
        status = {"ready": "rolled back; the boot is ready", "written": "rolled back (not restarted)",
                  "rolling": "rolled back; the controller rolls the pod out (not followed)",
                  "error": "not rolled back"}.get(outcome.status, status)
    elif action == "restart":
        status = {"ready": "restarted; the new boot is ready", "error": "not restarted"}.get(outcome.status, status)
    if outcome.rolled_back:
        status += "; rolled back to the previous flags"
        last = next((m for m in reversed(outcome.messages) if m.startswith("rolled back")), None)
        if last:
            status += f" ({last[len('rolled back: '):]})"
    return f"{name}: {status}"


def render_prediction(p: Prediction) -> list[str]:
    lines = [f"Prediction: verdict {p.verdict} (confidence {p.confidence}, basis {p.model.basis})"]
    bits = [f"{fmt.tokens(p.tokens)} tokens"]
    if p.kv_cache_gib is not None:
        bits.append(f"KV {fmt.gib(p.kv_cache_gib)} per rank")
    if p.graph_headroom_gib is not None:
        bits.append(f"graph headroom {fmt.signed_gib(p.graph_headroom_gib)}")
    lines.append("  " + ", ".join(bits))
    if p.max_safe_fraction is not None:
        lines.append(f"  largest safe fraction: {fmt.safe_max(p.max_safe_fraction)}")
    lines.extend(f"  - {r}" for r in p.reasons)
    return lines


def render_plan(plan: ApplyPlan) -> str:
    """The human view of a plan: file, diff, commands, prediction, refusals."""
    out: list[str] = []
    src = plan.source
    what = "roll back" if plan.action == "rollback" else "edit"
    out.append(f"{plan.name}: {what} {src.path} ({src.kind}"
               + (f" of {src.unit}" if src.unit and src.kind == "unit" else "") + ")")
    out.extend(f"  {v}" for v in src.via)
    if plan.action == "rollback":
        out.append(f"  restore {plan.backup_path}")
    out.extend(f"  {c.describe()}" for c in plan.changes)
    out.extend(f"  warning: {w}" for w in plan.warnings)
    out.append("")
    out.append(plan.diff.rstrip("\n") if plan.diff else "(no change: the file already says this)")
    out.append("")
    if plan.changed:
        out.append("Commands:")
        for i, st in enumerate(plan.steps, 1):
            out.append(f"  {i}. {st.title}")
            if st.command:
                lines = st.command.splitlines() or [""]
                out.append(f"     $ {lines[0]}")
                out.extend(f"       {ln}" for ln in lines[1:])
        out.append("")
    if plan.prediction is not None:
        out.extend(render_prediction(plan.prediction))
    if plan.prediction_note:
        out.append(f"Prediction: {plan.prediction_note}")
    for r in plan.refusals:
        forced = " (overridden by --force)" if r.forceable and plan.force else (
            " (--force overrides)" if r.forceable else "")
        out.append(f"REFUSED: {r.reason}{forced}")
    return "\n".join(out).rstrip("\n") + "\n"


def reality(plan: ApplyPlan, boot: Boot) -> list[str]:
    """The prediction compared with the boot that followed (tokens, and whether the verdict held)."""
    p = plan.prediction
    if p is None:
        return []
    out: list[str] = []
    actual = boot.metrics.max_total_num_tokens
    if actual is not None and p.tokens:
        err = (actual - p.tokens) / p.tokens * 100 if p.tokens else 0.0
        out.append(f"Prediction vs reality: predicted {p.tokens:,} tokens, the boot sized {actual:,} ({err:+.2f} %)")
    elif actual is None:
        out.append(f"Prediction vs reality: predicted {p.tokens:,} tokens; the boot did not size its pool")
    fails = boot.status is BootStatus.FAILED
    predicted_fail = str(p.verdict) in ("oom_risk", "no_fit")
    held = fails == predicted_fail
    out.append(f"Verdict {p.verdict}: {'held' if held else 'did not hold'} (the boot {boot.status.value})")
    return out
