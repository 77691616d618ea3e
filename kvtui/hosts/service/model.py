"""The service's records: what a plan says (``ApplyPlan``, ``RestartPlan``), what an execution did
(``ApplyOutcome``), where the flags live (``FlagSource``), and the two contracts the service
speaks to: ``HostOps`` (how one kind of host is read, written and restarted — every backend
offers one) and the ``Calculator`` / ``BootReader`` its caller passes in (``kvtui.changes`` wires
the calculator and the monitor's reader; the service imports neither)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from kvtui import envedit as ev
from kvtui import flags as fl
from kvtui.boot import Boot
from kvtui.engines.events import Engine
from kvtui.exits import EXIT_INPUT
from kvtui.hosts.backend import HostBackend
from kvtui.hosts.probe import DEFAULT_PROBE_TIMEOUT_S, ProbeResult

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.kvcalc import Prediction

BACKUP_MARK = ".kvtui-"
PRE_ROLLBACK = ".pre-rollback"
DEFAULT_STOP_WAIT_S = 180.0  # how long the old server may take to release its GPU memory
FOLLOW_SETTLE_S = 1.0  # let the log follower reach the end before the restart is issued
CMD_TIMEOUT_S = 60.0

ProgressFn = Callable[[str], None]
RestartHow = Literal["demo", "unit", "commands"]


class ServiceError(Exception):
    """An apply/rollback that cannot go on; ``str()`` says what happened and what state the
    host is in; ``code`` is the CLI exit code."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class FlagSource:
    """Where the server's flags live. ``kind``: unit (a unit file or drop-in) or script."""

    kind: fl.Kind
    path: str
    text: str
    sha256: str
    unit: str | None = None
    demo: bool = False
    via: tuple[str, ...] = ()  # how it was found, for the operator
    files: tuple[str, ...] = ()  # every unit file consulted (fragment, drop-ins)


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    forceable: bool  # --force overrides it (a verdict); a readonly host or container never


@dataclass(frozen=True, slots=True)
class PlanStep:
    title: str
    command: str | None = None  # the exact shell command (None: a demo step, or a wait)


class _Refusable:
    """What an apply plan and a restart plan share: their refusals, and ``force`` overriding the forceable ones."""

    __slots__ = ()
    refusals: list[Refusal]
    force: bool

    @property
    def blocking(self) -> list[Refusal]:
        """The refusals that stop this plan (a forceable one only without ``force``)."""
        return [r for r in self.refusals if not (r.forceable and self.force)]

    @property
    def refused(self) -> bool:
        return bool(self.blocking)


@dataclass(slots=True)
class ApplyPlan(_Refusable):
    """What an apply (or a rollback) will do. Built by ``plan_apply`` / ``plan_rollback``."""

    name: str
    host: HostConfig
    action: Literal["apply", "rollback"]
    source: FlagSource
    engine: Engine
    edits: list[fl.Edit]
    new_text: str
    changes: list[fl.EditedLine]
    warnings: list[str]
    diff: str
    backup_path: str  # apply: where the backup goes; rollback: the backup restored
    steps: list[PlanStep]
    cmd: dict[str, str]  # the command strings execute() runs (the same ones shown in steps)
    refusals: list[Refusal] = field(default_factory=list)
    prediction: Prediction | None = None
    prediction_note: str | None = None  # why there is no prediction, or a caveat
    calibration: Boot | None = None
    force: bool = False
    restart: bool = False
    rollback_on_failure: bool = False
    timeout: float = 1800.0
    pre_rollback_path: str | None = None  # rollback: where the current file is saved first
    env_edits: list[ev.EnvEdit] = field(default_factory=list)  # environment edits (--setenv / --unsetenv)
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S  # the readiness probe after a ready restart
    # the environment edits change what the host keeps apart from the text (a kube container's
    # ``env`` list: ``HostOps.edit_steps`` sets it)
    env_changed: bool = False

    @property
    def changed(self) -> bool:
        return self.new_text != self.source.text or self.env_changed

    @property
    def verdict(self) -> str | None:
        return None if self.prediction is None else str(self.prediction.verdict)

    @property
    def saved_copy(self) -> str:
        """Where the file as it is now is saved: the backup (apply) or the pre-rollback copy."""
        return self.pre_rollback_path if self.action == "rollback" and self.pre_rollback_path else self.backup_path

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.name,
            "action": self.action,
            "file": self.source.path,
            "kind": self.source.kind,
            "unit": self.source.unit,
            "engine": self.engine.value,
            "edits": [str(e) for e in self.edits],
            "env": [str(e) for e in self.env_edits],
            "changes": [c.describe() for c in self.changes],
            "diff": self.diff,
            "backup": self.backup_path,
            "commands": [{"title": s.title, "command": s.command} for s in self.steps],
            "prediction": None if self.prediction is None else self.prediction.to_json(),
            "prediction_note": self.prediction_note,
            "refusals": [r.reason for r in self.blocking],
            "warnings": list(self.warnings),
        }


@dataclass(slots=True)
class ApplyOutcome:
    """What ``execute`` did. ``code``: the CLI exit code (DESIGN)."""

    code: int
    status: str  # unchanged | written | ready | failed | refused | restored | timeout | error
    messages: list[str] = field(default_factory=list)
    backup_path: str | None = None
    boot: Boot | None = None
    rolled_back: bool = False
    reality: list[str] = field(default_factory=list)  # prediction vs reality lines
    probe: ProbeResult | None = None  # the readiness probe of the new boot (None: not probed)

    def render(self) -> str:
        return "\n".join([*self.messages, *self.reality]) + "\n"


@dataclass(slots=True)
class RestartPlan(_Refusable):
    """What a plain restart will do. Built by ``plan_restart``; carried out by ``restart``."""

    name: str
    host: HostConfig
    how: RestartHow | None  # None: kvtui cannot restart this host (see refusals)
    steps: list[PlanStep]
    cmd: dict[str, str]
    unit: str | None = None
    refusals: list[Refusal] = field(default_factory=list)
    follow: bool = False
    timeout: float = 1800.0
    force: bool = False  # a forceable refusal (orphaned engine processes) does not stop it

    def render(self) -> str:
        out = [f"{self.name}: restart the server"]
        for i, st in enumerate(self.steps, 1):
            out.append(f"  {i}. {st.title}")
            if st.command:
                out.append(f"     $ {st.command}")
        out.extend(f"REFUSED: {r.reason}" for r in self.refusals)
        return "\n".join(out) + "\n"


# the new boot -> its ETA for a heartbeat (``kvtui.history.eta``, passed in by the caller: the
# service imports no history), or None when there is none to say
EtaFn = Callable[[Boot], str | None]


class Say:
    """Progress lines: kept (for the outcome and the audit) and passed on. ``heartbeat`` gets
    "still waiting" lines: shown, never kept in the log or the audit; ``eta`` adds the new boot's
    ETA to them."""

    def __init__(self, progress: ProgressFn | None, heartbeat: ProgressFn | None = None,
                 eta: EtaFn | None = None) -> None:
        self.log: list[str] = []
        self._progress = progress
        self.heartbeat = heartbeat
        self.eta = eta

    def __call__(self, msg: str) -> None:
        self.log.append(msg)
        if self._progress is not None:
            self._progress(msg)


@dataclass(slots=True)
class Run:
    """One execution of a plan on a host: the plan, the host's operations, what was said, and
    the injected time (a clock, a sleep) and waits."""

    plan: ApplyPlan
    ops: HostOps
    say: Say
    clock: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    stop_wait_s: float = DEFAULT_STOP_WAIT_S
    settle_s: float | None = None


@dataclass(frozen=True, slots=True)
class RestartCall:
    """A restart to issue (an apply's, or the console's ``R``): how, the planned commands, the
    unit, and the injected time."""

    how: RestartHow
    cmd: Mapping[str, str]
    unit: str | None
    say: ProgressFn
    timeout: float
    sleep: Callable[[float], Awaitable[None]]
    clock: Callable[[], float]
    stop_wait_s: float
    beat: ProgressFn | None = None
    # the old server's PIDs the stop_command stopped (filled by issue_restart, read by the boot
    # follower: their exit is the restart, not the new boot dying)
    stopped: set[int] = field(default_factory=set)


class HostOps(Protocol):
    """How the guarded service reads, backs up, writes and restarts on one kind of host; every
    backend offers one (``HostBackend.service_ops``): ``kvtui.hosts.service.shell.ShellOps`` for
    hosts that run shell commands (SSH, local), ``kvtui.sim.ops.DemoOps`` for the
    simulated host. The service's flow (plan, execute, follow, audit) is the same for every host;
    what differs is here, each with its own words for the operator."""

    @property
    def backend(self) -> HostBackend: ...

    @property
    def readonly(self) -> bool:
        """The backend itself refuses changes (a readonly demo host)."""
        ...

    @property
    def login(self) -> str | None:
        """Who kvtui acts as there, for the audit log (None: the configured login, if any)."""
        ...

    @property
    def settle_s(self) -> float:
        """How long a new log follower needs to reach the log's end before a restart."""
        ...

    async def locate(self, name: str, host: HostConfig) -> FlagSource:
        """Find the file that holds the flags the server will run with, and read it."""
        ...

    async def list_backups(self, host: HostConfig, source: FlagSource) -> list[str]:
        """kvtui's backups of the source file, oldest first (pre-rollback copies excluded)."""
        ...

    def taken_names(self, source: FlagSource) -> list[str]:
        """Backup names a new backup must not take, when the host knows them cheaply."""
        ...

    async def read_copy(self, host: HostConfig, path: str) -> str:
        """A backup's text (for a rollback)."""
        ...

    async def copy_sha256(self, host: HostConfig, path: str) -> str:
        """A backup's sha256 ("" when it cannot be read)."""
        ...

    def edit_steps(self, plan: ApplyPlan) -> tuple[list[PlanStep], dict[str, str]]:
        """The steps an execution of ``plan`` takes and the commands it runs (may add refusals)."""
        ...

    async def write(self, run: Run, saved: str) -> None:
        """Check the file is unchanged, back it up to ``saved``, write the new text, check it
        (and what the service manager loaded). Raises ``ServiceError`` (restored when needed)."""
        ...

    async def restore(self, run: Run, saved: str, why: str) -> None:
        """Put the saved copy back after a failed check; raises ``ServiceError`` if it fails."""
        ...

    def restart_unavailable(self, name: str, host: HostConfig) -> str | None:
        """Why kvtui cannot restart this host's server (None: it can)."""
        ...

    def restart_plan(self, plan: RestartPlan) -> None:
        """Fill a restartable plan's ``how``, ``steps`` and ``cmd``."""
        ...

    def restart_how(self, cmd: Mapping[str, str]) -> RestartHow:
        """How an apply's planned commands restart the server."""
        ...

    async def issue_restart(self, call: RestartCall) -> None:
        """The restart itself. Raises ``ServiceError``."""
        ...

    async def process_env(self, run: Run) -> list[str]:
        """Check the new server process runs with the plan's environment edits (problems)."""
        ...


@dataclass(frozen=True, slots=True)
class Forecast:
    """The calculator's answer: its prediction and the boot it was calibrated from."""

    prediction: Prediction
    boot: Boot


EditsFor = Callable[[Boot], Mapping[str, object]]


class Calculator(Protocol):
    """The calculator as the service asks it: calibrate from ``boots`` (the last that sized its
    pool, as ``kvtui calc`` picks it), predict for ``edits(boot)``; a ``str`` says why there is
    no prediction. ``kvtui.changes.calculate`` is ``kvtui.kvcalc``'s."""

    def __call__(self, boots: Sequence[Boot], edits: EditsFor, graph_margin_gib: float | None) -> Forecast | str: ...


class BootReader(Protocol):
    """The host's boots as its log shows them now (``kvtui.monitor.read_boots``); raises
    ``BackendError`` or ``TimeoutError``."""

    def __call__(
        self, backend: HostBackend, host: HostConfig, engine: Engine, timeout: float
    ) -> Awaitable[list[Boot]]: ...
