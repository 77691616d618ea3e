"""The tune loop's driver: each candidate of the ``Planner`` goes through the one guarded apply
path (``kvtui.changes.plan_apply`` + ``kvtui.hosts.service.execute_nodes``: diff, backup, verify,
restart, follow the new boot, edit-in-effect check); the boot it ends with goes back to the
planner. A tune that ends on a failed boot rolls back to the last ready configuration through
``plan_rollback`` (the backup the step after it made) and says so. A stop request (Ctrl-C,
``Esc``) is honoured between steps, never inside one: the unit is never left half-edited.
Every step is audited by the service (action ``apply``); the tune adds one entry (``tune``).

A deployment (``TuneRun.nodes``) is tuned on the same path as a host and ``kvtui apply NAME``
(``service.execute_nodes``): each candidate planned on every node, refused as a whole, written and
verified node by node, every node restarted (node 0 first), the merged boot followed and node 0's
server asked for a token; the planner learns from node 0's boot; the closing rollback restores
every node's backup of the last ready configuration."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvtui import audit, changes, fmt, kvcalc
from kvtui import flags as fl
from kvtui.boot import Boot, BootStatus
from kvtui.changes import NodeSide
from kvtui.engines.events import FailureKind
from kvtui.exits import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, EXIT_TIMEOUT
from kvtui.history.eta import heartbeat_eta, past_boots
from kvtui.hosts import service
from kvtui.hosts.backend import BackendError, HostBackend
from kvtui.hosts.probe import DEFAULT_PROBE_TIMEOUT_S
from kvtui.knobs import fraction_flag
from kvtui.tune.planner import Candidate, Planner, Stop, Tried, boot_seconds

if TYPE_CHECKING:
    from kvtui.config import HistoryConfig, HostConfig

Say = Callable[[str], None]
Restore = dict[str, str]  # node (the host's name for a host) -> the backup holding the last ready configuration


@dataclass(slots=True)
class TuneStep:
    """One boot of the tune, for the table, ``--json`` and the audit."""

    index: int
    candidate: Candidate
    outcome: str = "pending"
    tokens: int | None = None
    seconds: float | None = None
    failure: str | None = None
    backup: str | None = None
    probe: str | None = None  # what the readiness probe found

    def to_json(self) -> dict[str, object]:
        c = self.candidate
        return {
            "step": self.index,
            "fraction": c.fraction,
            "extra": dict(c.extra),
            "predicted_tokens": c.predicted_tokens,
            "predicted_verdict": c.verdict,
            "actual_tokens": self.tokens,
            "outcome": self.outcome,
            "failure": self.failure,
            "boot_seconds": None if self.seconds is None else round(self.seconds, 1),
            "backup": self.backup,
            "probe": self.probe,
            "why": c.why,
        }


@dataclass(slots=True)
class TuneResult:
    host: str
    goal: str
    code: int
    met: bool
    reason: str
    steps: list[TuneStep] = field(default_factory=list)
    final: str | None = None  # the configuration left running (its label), when known
    rolled_back: str | None = None  # what the closing rollback did, when there was one
    interrupted: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.host,
            "goal": self.goal,
            "met": self.met,
            "exit": self.code,
            "reason": self.reason,
            "final": self.final,
            "rolled_back": self.rolled_back,
            "interrupted": self.interrupted,
            "steps": [s.to_json() for s in self.steps],
        }


TABLE_HEAD = f"{'step':>4}  {'setting':<34} {'predicted':>10} {'actual':>10}  {'outcome':<26} {'boot':>7}"


def table_row(s: TuneStep) -> str:
    pred = fmt.tokens(s.candidate.predicted_tokens) if s.candidate.predicted_tokens is not None else "—"
    act = fmt.tokens(s.tokens) if s.tokens is not None else "—"
    out = s.outcome + (f" ({s.failure})" if s.failure else "")
    secs = fmt.duration(s.seconds) if s.seconds is not None else "—"
    return f"{s.index:>4}  {s.candidate.label():<34} {pred:>10} {act:>10}  {out:<26} {secs:>7}"


@dataclass(slots=True)
class TuneRun:
    """What a tune needs: the host, its planner, the boots so far, and how to talk."""

    name: str
    host: HostConfig
    backend: HostBackend
    planner: Planner
    boots: list[Boot]
    timeout: float = 1800.0
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S
    margin_gib: float | None = None
    say: Say = print
    step_say: Say | None = None  # each finished step's table row (the CLI's stderr, the dialog)
    clock: Callable[[], float] = time.time
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tried: list[Tried] = field(default_factory=list)
    steps: list[TuneStep] = field(default_factory=list)
    history: HistoryConfig | None = None  # [history] of hosts.toml: each step's boot is remembered
    nodes: list[NodeSide] = field(default_factory=list)  # a deployment's nodes (node 0's is name/host/backend)
    hang_s: float = 180.0  # the deployment's hang_seconds


async def _heartbeat_eta(run: TuneRun) -> Callable[[Boot], str | None]:
    """The new boot's ETA for the follower's heartbeat, from the host's stored boots (as
    ``apply --restart`` says it: "… the new boot is in load weights 12/61 shards; load weights
    0:40 / ~4:05, ready in ~4:50"; a deployment's: node 0's, as ``apply NAME`` says it)."""
    name = run.nodes[0].name if run.nodes else run.name
    past = await asyncio.to_thread(past_boots, name)
    return heartbeat_eta(past, name, run.clock)


async def _remember(run: TuneRun, plan: service.ApplyPlan, out: service.ApplyOutcome) -> None:
    """The boot a step (or the closing rollback) followed goes into the boot history with its
    edit, prediction and outcome, as an ``apply --restart``'s does (the prediction ledger)."""
    if out.boot is None:
        return
    problem = await asyncio.to_thread(changes.record_restart, plan, out, run.history)
    if problem:
        run.say(f"note: the boot is not in the history: {problem}")


async def tune(run: TuneRun) -> TuneResult:
    """Run the loop until the planner stops, the budget is spent, a step cannot go on, or a stop
    is requested; end on the last ready configuration."""
    p = run.planner
    restore: Restore | None = None  # the backups holding the last ready configuration
    prev_ready = p.start_ready
    reason = ""
    code: int | None = None
    met = False
    while True:
        if run.stop.is_set():
            reason = "stopped by the operator after the step in progress"
            break
        nxt = p.next(run.boots, run.tried)
        if isinstance(nxt, Stop):
            reason, met = nxt.reason, nxt.met
            break
        step = TuneStep(len(run.steps) + 1, nxt)
        run.steps.append(step)
        run.say(f"step {step.index}: {nxt.label()} — {nxt.why}; predicted "
                f"{fmt.tokens(nxt.predicted_tokens) if nxt.predicted_tokens is not None else '?'} tokens "
                f"(verdict {nxt.verdict})")
        got = await _one_step(run, step)
        if isinstance(got, int):
            code = got
            reason = step.failure or step.outcome
            break
        tried, backup = got
        p.learn(tried)
        run.tried.append(tried)
        if prev_ready and backup:
            restore = backup
        prev_ready = tried.ready
        if run.step_say is not None:
            run.step_say(table_row(step))
        if step.outcome == "timeout":
            code = EXIT_TIMEOUT
            reason = f"the boot at {nxt.label()} did not end within {run.timeout:g} s"
            break
    return await _finish(run, reason, met and prev_ready, code, restore, prev_ready)


async def _one_step(run: TuneRun, step: TuneStep) -> tuple[Tried, Restore | None] | int:
    """Apply one candidate on every node (a host: one) and follow its boot as one change
    (``service.execute_nodes``); an exit code when the tune cannot go on."""
    c = step.candidate
    edits = [fl.Edit(k, v) for k, v in c.edits(run.planner.engine)]
    calib = _calibration_boots(run)
    sides = run.nodes or [NodeSide(run.name, run.host, run.backend)]
    many = len(sides) > 1
    planned = await asyncio.gather(*(changes.plan_apply(
        n.name, n.host, n.backend, edits, restart=True, timeout=run.timeout, graph_margin_gib=run.margin_gib,
        boots=calib, clock=run.clock) for n in sides), return_exceptions=True)
    for n, p in zip(sides, planned, strict=True):
        if isinstance(p, service.ServiceError):
            step.outcome, step.failure = "error", f"{n.name}: {p}" if many else str(p)
            run.say(f"step {step.index}: cannot plan: {step.failure}")
            return p.code
        if isinstance(p, BaseException):
            raise p
        p.probe_timeout = run.probe_timeout
        n.plan = p
    plans = [p for p in planned if not isinstance(p, BaseException)]
    refused = [n for n in sides if n.plan is not None and n.plan.refused]
    if refused:
        return await _refused(run, step, refused, named=many)
    if not any(p.changed for p in plans):
        return _unchanged(run, step)
    outs = await _carry_out(run, sides, plans)
    out = outs[0]
    backups = {n.name: o.backup_path for n, o in zip(sides, outs, strict=True) if o.backup_path}
    step.backup = "; ".join(backups.values()) or None
    step.outcome = out.status
    boot = out.boot  # node 0's: what the planner learns from (another node's failure is the whole's)
    other = next((o.boot.failure for o in outs if o.boot is not None and o.boot.failure is not None), None)
    if boot is not None and boot.failure is None and other is not None and out.status == "failed":
        boot.status, boot.failure = BootStatus.FAILED, other
    if boot is not None:
        run.boots.append(boot)
        step.tokens = boot.metrics.max_total_num_tokens
        step.seconds = boot_seconds(boot)
        if boot.failure is not None:
            step.failure = boot.failure.kind.value
    if out.probe is not None:  # the service asked the server for one token (off with probe = false)
        step.probe = out.probe.headline()
    if out.status == "error":
        step.failure = out.messages[-1] if out.messages else "error"
        run.say(f"step {step.index}: {step.failure}")
        if out.backup_path:
            run.say(f"the previous flags are saved as {step.backup}: `kvtui rollback {run.name} --restart` "
                    "restores them")
        return out.code
    return Tried(c, step.outcome, boot), backups or None


async def _carry_out(run: TuneRun, sides: Sequence[NodeSide],
                     plans: Sequence[service.ApplyPlan]) -> list[service.ApplyOutcome]:
    """Every node's plan carried out as one change (``service.execute_nodes``; several nodes'
    lines carry their node's name), each node's boot remembered."""
    progress, many = _indented(run), len(sides) > 1
    outs = await service.execute_nodes(
        [service.Node(p, n.backend, changes.prefixed(progress, n.name) if many else progress)
         for n, p in zip(sides, plans, strict=True)], clock=run.clock, heartbeat=progress,
        eta=await _heartbeat_eta(run), hang_s=run.hang_s, say=progress)
    for p, o in zip(plans, outs, strict=True):
        await _remember(run, p, o)
    return outs


def _indented(run: TuneRun) -> Say:
    """A step's progress, said indented under the step."""
    return lambda msg: run.say(f"  {msg}")


async def _refused(run: TuneRun, step: TuneStep, sides: Sequence[NodeSide], *, named: bool) -> int:
    """A step whose plan (on a node: ``named``) is refused: said, audited; the tune ends."""
    step.outcome = "refused"
    step.failure = "; ".join(f"{n.name}: {r.reason}" if named else r.reason
                             for n in sides if n.plan is not None for r in n.plan.blocking)
    run.say(f"step {step.index}: refused: {step.failure}")
    for n in sides:
        if n.plan is not None:
            await service.execute(n.plan, n.backend, clock=run.clock)  # audits the refusal
    return EXIT_REFUSED


def _unchanged(run: TuneRun, step: TuneStep) -> tuple[Tried, None]:
    """A candidate every file already says: the running boot is its result."""
    cur = run.boots[-1] if run.boots else None
    step.outcome = "ready" if cur is not None and cur.status is BootStatus.READY else "unchanged"
    step.tokens = None if cur is None else cur.metrics.max_total_num_tokens
    return Tried(step.candidate, step.outcome, cur), None


def _calibration_boots(run: TuneRun) -> list[Boot]:
    """The boots the plan's prediction calibrates from: the planner's choice (a boot that died in
    capture alone), so the plan shows what the planner saw."""
    try:
        chosen, others = kvcalc.select_boot(run.boots)
    except kvcalc.CalcError:  # nothing sized yet: let the service read the host
        return list(run.boots)
    died = chosen.failure is not None and chosen.failure.kind is FailureKind.OOM_GRAPH_CAPTURE
    return [chosen] if died else [*others, chosen]


async def _finish(run: TuneRun, reason: str, met: bool, code: int | None, restore: Restore | None,
                  prev_ready: bool) -> TuneResult:
    """Close the tune: the last step ended ready (met or not), or roll back to the last ready
    configuration; a step that could not go on (``code``) leaves the host as it says."""
    result = TuneResult(run.name, run.planner.goal.describe(), EXIT_OK if met else EXIT_FAILED, met, reason,
                        run.steps, interrupted=run.stop.is_set())
    last = run.steps[-1] if run.steps else None
    if last is None:
        result.final = "unchanged"
    elif last.outcome == "ready":
        result.final = last.candidate.label()
    if code is not None and code != EXIT_TIMEOUT:
        result.code, result.met = code, False
    else:
        if last is not None and not prev_ready:
            await _roll_back(run, result, restore)
        if code == EXIT_TIMEOUT:
            result.code, result.met = EXIT_TIMEOUT, False
    _audit(run, result)
    return result


async def _roll_back(run: TuneRun, result: TuneResult, restore: Restore | None) -> None:
    if not restore:
        result.rolled_back = "nothing to roll back to: no configuration of this tune (nor the one before it) was ready"
        run.say(f"{run.name}: {result.rolled_back}; the host is left as the last step made it")
        return
    shown = "; ".join(restore.values())
    run.say(f"the last step did not end ready: rolling back to the last ready configuration ({shown})")
    sides = run.nodes or [NodeSide(run.name, run.host, run.backend)]
    many = len(sides) > 1
    try:
        rbs = [await changes.plan_rollback(n.name, n.host, n.backend, to=restore[n.name], restart=True,
                                           timeout=run.timeout, clock=run.clock) for n in sides]
    except (service.ServiceError, KeyError) as exc:
        result.rolled_back = f"the rollback could not be planned: {exc}"
        result.code = exc.code if isinstance(exc, service.ServiceError) else EXIT_FAILED
        run.say(result.rolled_back)
        return
    outs = await _carry_out(run, sides, rbs)
    if many and outs[0].status not in ("error", "refused"):
        run.say(f"{run.name}: " + "; ".join(f"{n.name} restored from {restore[n.name]}" for n in sides))
    _rolled_back(run, result, outs[0].status, outs[0].boot, shown)


def _rolled_back(run: TuneRun, result: TuneResult, status: str, boot: Boot | None, shown: str) -> None:
    """What the closing rollback ended with (``status``, its boot), into the result and said."""
    good = status == "ready"
    ready = [t for t in run.tried if t.ready]
    label = ready[-1].candidate.label() if ready else "the configuration before the tune"
    result.rolled_back = (f"rolled back to the last ready configuration ({label}); the boot is ready" if good
                          else f"the rollback to {shown} ended {status}")
    if good:
        result.final = label
        if boot is not None:
            run.boots.append(boot)
    elif result.code == EXIT_OK:
        result.code = EXIT_FAILED
    run.say(result.rolled_back)


def _audit(run: TuneRun, result: TuneResult) -> None:
    entry: dict[str, object] = {
        "host": run.name,
        "action": "tune",
        "goal": result.goal,
        "outcome": "met" if result.met else "not_met",
        "exit": result.code,
        "reason": result.reason,
        "final": result.final,
        "rolled_back": result.rolled_back,
        "steps": [s.to_json() for s in result.steps],
    }
    with contextlib.suppress(OSError):
        audit.append(entry, now=run.clock())


async def start_state(name: str, host: HostConfig, backend: HostBackend, timeout: float = 30.0,
                      boots: Sequence[Boot] | None = None) -> tuple[fl.ServerCommand, list[Boot]]:
    """The flags file as it is and the host's boots (read from its log unless given: the console
    passes its monitor's); ``BackendError`` / ``ServiceError``."""
    source = await service.locate_source(name, host, backend)
    try:
        cmd = fl.parse_command(source.text, source.kind)
    except fl.FlagError as exc:
        raise service.ServiceError(f"{source.path}: {exc}") from exc
    if boots is not None:
        return cmd, list(boots)
    try:
        return cmd, await changes.host_boots(backend, host, cmd.engine, timeout)
    except (BackendError, TimeoutError):
        return cmd, []


def running_flags(boots: Sequence[Boot], cmd: fl.ServerCommand) -> dict[str, object]:
    """The flags the tune starts from: the running boot's argument dump, else the file's."""
    if boots and boots[-1].flags:
        return dict(boots[-1].flags)
    return {k.replace("-", "_"): v for k, v in cmd.values().items()}


def render_plan(name: str, planner: Planner, first: Candidate | Stop, cur: Boot | None) -> str:
    """The plan the operator confirms: the goal, where the host is, the first candidate, what may
    move, the boot budget, what happens on failure (the CLI prints it; the console shows it)."""
    ff = fraction_flag(planner.engine)
    b = planner.bounds
    lines = [f"kvtui tune {name}: goal {planner.goal.describe()}"]
    if cur is not None:
        tok = cur.metrics.max_total_num_tokens
        lines.append(f"  now: {ff} {planner.start.get(ff, '?')}, boot {cur.status.value}"
                     + (f", {fmt.tokens(tok)} tokens" if tok is not None else ""))
    else:
        lines.append("  now: no boot found in the host's log")
    if isinstance(first, Candidate):
        lines.append(f"  first candidate: {first.label()} → {fmt.tokens(first.predicted_tokens or 0)} tokens predicted "
                     f"(verdict {first.verdict}); {first.why}")
    else:
        lines.append(f"  nothing to boot: {first.reason}")
    knobs = ", ".join(planner.also) if planner.also else "none (pass --also to move them)"
    lines += [
        f"  moves: {ff} within [{b.floor:g}, {b.ceiling:g}]; other knobs: {knobs}",
        f"  budget: at most {b.max_boots} boot{'s' if b.max_boots != 1 else ''}; each step is an apply with restart "
        "(diff, backup, verify, restart, follow the boot)",
        "  on failure: a capture OOM recalibrates from the boot's capture trail and steps down; a pool that "
        "does not fit steps up; a tune ending on a failed boot rolls back to the last ready configuration",
    ]
    return "\n".join(lines) + "\n"
