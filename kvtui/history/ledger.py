"""The prediction ledger (pure): for every kvtui-driven restart in the history, what the
calculator predicted before it (tokens, verdict, confidence, how many boots calibrated it) and
what the boot then did (and, when a watcher recorded them, its serving figures); and the error
over all of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from kvtui.history import serving_figures as sf
from kvtui.history.doc import BootDoc, num


@dataclass(frozen=True, slots=True)
class Entry:
    boot_id: int | None
    started_at: str | None
    edit: list[str]
    fraction: float | None
    predicted_tokens: int | None
    actual_tokens: int | None
    verdict: str | None
    confidence: str | None
    calibration_boots: int | None
    status: str
    verdict_held: bool | None
    # the boot's serving figures, when a watcher recorded them (``serving_figures.HEADLINE``: did
    # the edit fix the incident)
    serving: Mapping[str, JsonValue] | None = None

    @property
    def error_pct(self) -> float | None:
        p, a = self.predicted_tokens, self.actual_tokens
        if p is None or a is None or p <= 0:
            return None
        return (a - p) / p * 100.0

    def to_json(self) -> dict[str, object]:
        return {
            "boot": self.boot_id, "started_at": self.started_at, "edit": self.edit, "fraction": self.fraction,
            "predicted_tokens": self.predicted_tokens, "actual_tokens": self.actual_tokens,
            "error_pct": None if self.error_pct is None else round(self.error_pct, 4),
            "verdict": self.verdict, "confidence": self.confidence, "calibration_boots": self.calibration_boots,
            "status": self.status, "verdict_held": self.verdict_held, "serving": self.serving,
        }


def entry(doc: BootDoc | Mapping[str, object], boot_id: int | None = None) -> Entry | None:
    """The ledger entry of a stored boot; None when kvtui did not restart it with a prediction."""
    doc = BootDoc.of(doc)
    r = doc.restart
    if r is None or r.prediction is None:
        return None
    p = r.prediction
    status = doc.status
    verdict = p.verdict
    held: bool | None = None
    if verdict is not None and status in ("ready", "failed"):
        held = (status == "failed") == (verdict in ("oom_risk", "no_fit"))
    tokens, cal = num(p.tokens), num(p.calibration_boots)
    return Entry(boot_id, doc.started_at, list(r.edit), doc.fraction, int(tokens) if tokens is not None else None,
                 doc.tokens, verdict, p.confidence, int(cal) if cal is not None else None, status, held, _serving(doc))


def _serving(doc: BootDoc) -> dict[str, JsonValue] | None:
    s = doc.serving_figures
    return {k: getattr(s, k) for k in sf.HEADLINE} if s is not None else None


@dataclass(frozen=True, slots=True)
class Summary:
    restarts: int
    with_tokens: int
    mean_abs_error_pct: float | None
    max_abs_error_pct: float | None
    verdicts_held: int
    verdicts_judged: int

    def to_json(self) -> dict[str, object]:
        return {
            "restarts": self.restarts, "with_tokens": self.with_tokens,
            "mean_abs_error_pct": None if self.mean_abs_error_pct is None else round(self.mean_abs_error_pct, 4),
            "max_abs_error_pct": None if self.max_abs_error_pct is None else round(self.max_abs_error_pct, 4),
            "verdicts_held": self.verdicts_held, "verdicts_judged": self.verdicts_judged,
        }

    def text(self) -> str:
        if not self.restarts:
            return "Prediction ledger: no kvtui-driven restart with a prediction yet"
        err = (f"token error mean {self.mean_abs_error_pct:.2f} %, max {self.max_abs_error_pct:.2f} % "
               f"over {self.with_tokens}" if self.mean_abs_error_pct is not None and self.max_abs_error_pct is not None
               else "no boot sized its pool")
        return (f"Prediction ledger: {self.restarts} restart{'s' if self.restarts != 1 else ''}; {err}; "
                f"verdict held {self.verdicts_held}/{self.verdicts_judged}")


def summarize(entries: Sequence[Entry]) -> Summary:
    errs = [abs(e) for x in entries if (e := x.error_pct) is not None]
    judged = [x for x in entries if x.verdict_held is not None]
    return Summary(len(entries), len(errs), sum(errs) / len(errs) if errs else None, max(errs) if errs else None,
                   sum(1 for x in judged if x.verdict_held), len(judged))
