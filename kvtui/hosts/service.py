"""The one guarded write path to a host: edit the server's flags, back up, write atomically,
verify, restart, follow the new boot, roll back — and audit every change.

Two phases, so a UI can show what will happen before anything does:

``plan_apply(...)`` / ``plan_rollback(...)`` read the *effective* flags (for a unit: the file
whose ``ExecStart=`` systemd runs — the last drop-in that sets it, else the fragment, from
``systemctl show -p FragmentPath -p DropInPaths``; a unit whose ExecStart runs a script: that
script; otherwise the configured ``launch_script``; containers are read-only), make the edit in
memory (``kvtui.flags``: only the edited bytes change), and return an ``ApplyPlan``: the unified
diff, the exact commands that will run, the calculator's prediction and verdict for the new flags
(calibrated from the host's latest boot), and any refusals (readonly host, container, a verdict of
``no_fit`` / ``oom_risk`` unless forced).

``execute(plan, backend, progress)`` then: checks the file still has the hash it had when read
(else refuses: it changed), copies it to ``<file>.kvtui-<UTC time, µs>`` (``backup_name``: names
never collide) and checks the copy, writes the new text atomically (temp file in the same
directory, mode and owner kept, fsync, rename; the remote side verifies the content's hash
before the rename, so a write cut midway never replaces the file), re-reads it and checks every
edited flag (else restores the backup).
For a unit: ``systemctl daemon-reload``, then ``systemctl show -p ExecStart`` must carry the new
values (else restore + reload), then ``systemctl restart``. Without a unit: the configured stop
command, a bounded wait until the old server's PIDs have released their GPU memory, then the
start command detached so it outlives the SSH session. With a restart it follows the new boot
until ready or failed: the boot's own argument dump must carry the edits ("edit not in effect"
otherwise), and prediction is compared with reality. ``rollback_on_failure`` restores the backup
through the same verified path and restarts again. Demo hosts take the same flow through
``DemoBackend``'s service methods (``read_unit``/``write_unit``/``daemon_reload``/
``effective_execstart``/``restart``), backups included, so edits persist in the demo's state.

Every executed change (and every refusal at execution) is appended to the audit log
(``kvtui.audit``). Errors the operator can act on are ``ServiceError`` with an exit code.

From a UI (the console's ``a`` / ``u`` / ``R``, ``kvtui.ui.host_pane``)::

    edits = kvtui.flags.parse_edit_args(sets, unsets)          # or flags.edits_from_mapping(...)
    plan = await plan_apply(name, host, backend, edits, restart=True, boots=monitor.tracker.boots,
                            graph_margin_gib=config.calc.graph_margin_gib)
    show plan.diff, plan.steps, plan.prediction / plan.prediction_note, plan.refusals (plan.refused)
    plan.force = …; plan.rollback_on_failure = …                # what the operator chose
    outcome = await execute(plan, backend, progress=lambda line: ...)   # never raises for the host
    outcome.code / .status / .messages / .reality / .rolled_back / .boot; outcome_headline(...)
    # rollback: plan = await plan_rollback(name, host, backend, restart=True, boots=…); execute(...)
    # restart:  plan = plan_restart(name, host, backend); outcome = await restart(plan, backend, progress)

``plan_restart`` / ``restart`` are the restart an apply ends with (demo ``restart()``, ``systemctl
restart UNIT``, or stop_command + wait for the GPU memory + start_command detached), on their own
and audited (action ``restart``); ``restart_unavailable`` says why a host cannot be restarted.
The host's boots, when the caller has none, are read by ``kvtui.monitor.read_boots`` (the one
reader, shared with ``kvtui calc --host``).

``execute`` follows the new boot on its own log stream (``follow_log(NEXT_BOOT)``), next to the
monitor's; it never blocks the event loop (demo file operations are a few KiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import re
import shlex
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from kvtui import audit, fmt
from kvtui import envedit as ev
from kvtui import flags as fl
from kvtui.boot import Boot, BootStatus
from kvtui.engines.events import Engine
from kvtui.hosts import commands as cmds
from kvtui.hosts.backend import BackendError, CommandResult, HostBackend, LogStart, aclose_iter

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.kvcalc import Prediction

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_REFUSED = 4
EXIT_TIMEOUT = 5

BACKUP_MARK = ".kvtui-"
PRE_ROLLBACK = ".pre-rollback"
DEFAULT_STOP_WAIT_S = 180.0  # how long the old server may take to release its GPU memory
FOLLOW_SETTLE_S = 1.0  # let the log follower reach the end before the restart is issued
CMD_TIMEOUT_S = 60.0

ProgressFn = Callable[[str], None]


class ServiceError(Exception):
    """An apply/rollback that cannot go on; ``str()`` says what happened and what state the
    host is in; ``code`` is the CLI exit code."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.code = code


@runtime_checkable
class DemoService(Protocol):
    """The plain service methods of ``kvtui.hosts.demo.DemoBackend``."""

    @property
    def unit_path(self) -> Path: ...

    def read_unit(self) -> str: ...

    def write_unit(self, text: str) -> None: ...

    def daemon_reload(self) -> None: ...

    def effective_execstart(self) -> str: ...

    def restart(self) -> None: ...

    def stop(self) -> None: ...


# =============================================================================================
# Data
# =============================================================================================


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


@dataclass(slots=True)
class ApplyPlan:
    """What an apply (or a rollback) will do. Built by ``plan_apply`` / ``plan_rollback``."""

    name: str
    host: HostConfig
    action: Literal["apply", "rollback"]
    source: FlagSource
    engine: Engine
    edits: list[fl.Edit]
    new_text: str
    changes: list[fl.Change]
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

    @property
    def changed(self) -> bool:
        return self.new_text != self.source.text

    @property
    def blocking(self) -> list[Refusal]:
        """The refusals that stop this plan (a forceable one only without ``force``)."""
        return [r for r in self.refusals if not (r.forceable and self.force)]

    @property
    def refused(self) -> bool:
        return bool(self.blocking)

    @property
    def verdict(self) -> str | None:
        return None if self.prediction is None else str(self.prediction.verdict)

    def render(self) -> str:
        """The human view: file, diff, commands, prediction, refusals."""
        out: list[str] = []
        what = "roll back" if self.action == "rollback" else "edit"
        out.append(f"{self.name}: {what} {self.source.path} ({self.source.kind}"
                   + (f" of {self.source.unit}" if self.source.unit and self.source.kind == "unit" else "") + ")")
        out.extend(f"  {v}" for v in self.source.via)
        if self.action == "rollback":
            out.append(f"  restore {self.backup_path}")
        for c in self.changes:
            out.append(f"  {c.describe()}")
        for w in self.warnings:
            out.append(f"  warning: {w}")
        out.append("")
        out.append(self.diff.rstrip("\n") if self.diff else "(no change: the file already says this)")
        out.append("")
        if self.changed:
            out.append("Commands:")
            for i, st in enumerate(self.steps, 1):
                out.append(f"  {i}. {st.title}")
                if st.command:
                    lines = st.command.splitlines() or [""]
                    out.append(f"     $ {lines[0]}")
                    out.extend(f"       {ln}" for ln in lines[1:])
            out.append("")
        if self.prediction is not None:
            out.extend(render_prediction(self.prediction))
        if self.prediction_note:
            out.append(f"Prediction: {self.prediction_note}")
        for r in self.refusals:
            forced = " (overridden by --force)" if r.forceable and self.force else (
                " (--force overrides)" if r.forceable else "")
            out.append(f"REFUSED: {r.reason}{forced}")
        return "\n".join(out).rstrip("\n") + "\n"

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

    def render(self) -> str:
        return "\n".join([*self.messages, *self.reality]) + "\n"


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
}


def outcome_headline(outcome: ApplyOutcome, action: str, name: str) -> str:
    """One line for the operator: ``demo: applied; the new boot is ready`` (CLI and console)."""
    status = _STATUS_WORDS.get(outcome.status, outcome.status)
    if action == "rollback":
        status = {"ready": "rolled back; the boot is ready", "written": "rolled back (not restarted)",
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


# =============================================================================================
# Helpers
# =============================================================================================


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_ISSUED: dict[str, int] = {}  # path -> the last backup stamp (µs since the epoch) this process named


def backup_name(path: str, now: float, taken: Iterable[str] = ()) -> str:
    """``<file>.kvtui-<UTC time to the microsecond>`` (``…kvtui-20260501T120000.123456Z``).

    Names never collide: a stamp is never issued twice by one process, even with a clock that
    stands still (two rollbacks within one second failed with a one-second stamp), nor equal to
    a name in ``taken`` (what already exists, when the caller knows); across processes the
    microsecond keeps them apart, and the copy itself never overwrites (``cmds.backup_copy``)."""
    us = round(now * 1_000_000)
    last = _ISSUED.get(path)
    if last is not None and us <= last:
        us = last + 1
    taken_set = {t.removesuffix(PRE_ROLLBACK) for t in taken}
    while True:
        secs, frac = divmod(us, 1_000_000)
        stamp = datetime.fromtimestamp(secs, UTC).strftime("%Y%m%dT%H%M%S") + f".{frac:06d}Z"
        name = f"{path}{BACKUP_MARK}{stamp}"
        if name not in taken_set:
            break
        us += 1
    _ISSUED[path] = us
    return name


def backup_sort_key(name: str) -> tuple[str, str]:
    """Sort backups by time: ``…kvtui-20260501T120000Z`` (older kvtui, whole seconds) before
    ``…kvtui-20260501T120000.000001Z`` of the same second."""
    stamp = name.rpartition(BACKUP_MARK)[2].removesuffix(PRE_ROLLBACK)
    digits = "".join(c for c in stamp if c.isdigit())
    return digits.ljust(20, "0"), name


def unified_diff(old: str, new: str, path: str, new_label: str | None = None) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=path, tofile=new_label or path
        )
    )


def _one_line(text: str, limit: int = 300) -> str:
    t = " ".join(text.split())
    return t if len(t) <= limit else t[: limit - 1] + "…"


async def _run(
    backend: HostBackend, command: str, *, input: bytes | None = None, timeout: float | None = CMD_TIMEOUT_S
) -> CommandResult:
    try:
        return await backend.run(command, input=input, timeout=timeout)
    except BackendError as exc:
        raise ServiceError(f"connection to the host failed: {exc}", EXIT_INPUT) from exc


def _read_local(path: str) -> str:
    """A demo host's file (local, small)."""
    return Path(path).read_text(encoding="utf-8")


def _copy_local(src: str, dest: str) -> bool:
    """Copy a demo host's file keeping its mode and times; False when ``dest`` exists."""
    if Path(dest).exists():
        return False
    shutil.copy2(src, dest)
    return True


def _is_demo(backend: HostBackend) -> bool:
    return isinstance(backend, DemoService) and callable(getattr(backend, "write_unit", None))


def _demo(backend: HostBackend) -> DemoService:
    assert isinstance(backend, DemoService)
    return backend


def _sudo(host: HostConfig) -> bool:
    return bool(getattr(host, "sudo", False))


# =============================================================================================
# Reading the effective flags
# =============================================================================================


async def read_remote_file(backend: HostBackend, path: str, *, sudo: bool = False) -> tuple[str, str]:
    """(text, sha256) of a file on the host, read exactly (the host's own hash must match)."""
    for _attempt in range(2):
        h = await _run(backend, cmds.file_sha256(path, sudo=sudo))
        if not h.ok:
            raise ServiceError(f"cannot read {path}: {_one_line(h.stderr or h.stdout) or f'exit {h.exit_status}'}")
        remote = (h.stdout.split() or [""])[0]
        if not re.fullmatch(r"[0-9a-f]{64}", remote):
            raise ServiceError(f"cannot hash {path}: sha256sum said {_one_line(h.stdout)!r}")
        r = await _run(backend, cmds.read_file(path, sudo=sudo))
        if not r.ok:
            raise ServiceError(f"cannot read {path}: {_one_line(r.stderr) or f'exit {r.exit_status}'}")
        if sha256_text(r.stdout) == remote:
            return r.stdout, remote
    raise ServiceError(
        f"{path} cannot be read exactly (it changed while being read, or holds bytes that are not UTF-8 text); "
        "kvtui edits only files it can write back byte for byte"
    )


def _parse_props(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


async def locate_source(name: str, host: HostConfig, backend: HostBackend) -> FlagSource:
    """Find the file that holds the flags the server will run with, and read it."""
    if _is_demo(backend):
        demo = _demo(backend)
        text = demo.read_unit()
        path = str(demo.unit_path)
        unit = getattr(backend, "unit_name", None)
        return FlagSource("unit", path, text, sha256_text(text), unit=unit if isinstance(unit, str) else None,
                          demo=True, via=("the demo host's unit file",))
    sudo = _sudo(host)
    if host.unit:
        return await _locate_unit(name, host, backend, host.unit, sudo)
    if host.launch_script:
        text, sha = await read_remote_file(backend, host.launch_script, sudo=sudo)
        return FlagSource("script", host.launch_script, text, sha, via=("launch_script in hosts.toml",))
    if host.container:
        raise ServiceError(
            f"host '{name}' runs the server in container {host.container!r}: its flags come from the container's "
            "definition, which kvtui does not edit (containers are read-only); set unit or launch_script to edit",
            EXIT_REFUSED,
        )
    raise ServiceError(
        f"host '{name}': kvtui does not know where the server's flags live; set unit or launch_script in hosts.toml",
        EXIT_INPUT,
    )


async def _locate_unit(name: str, host: HostConfig, backend: HostBackend, unit: str, sudo: bool) -> FlagSource:
    show = await _run(backend, cmds.systemctl_show(unit, ["FragmentPath", "DropInPaths"], sudo=sudo))
    if not show.ok:
        raise ServiceError(f"systemctl show {unit} failed: {_one_line(show.stderr) or f'exit {show.exit_status}'}")
    props = _parse_props(show.stdout)
    frag = props.get("FragmentPath", "")
    drops = props.get("DropInPaths", "").split()
    if not frag:
        raise ServiceError(
            f"systemd has no unit file for {unit!r} (FragmentPath is empty): is the unit name in hosts.toml right?"
        )
    paths = [frag, *drops]
    texts: list[tuple[str, str, str]] = []
    for p in paths:
        text, sha = await read_remote_file(backend, p, sudo=sudo)
        texts.append((p, text, sha))
    try:
        idx = fl.find_effective_execstart([(p, t) for p, t, _ in texts])
    except fl.FlagError as exc:
        raise ServiceError(f"unit {unit}: {exc}") from exc
    path, text, sha = texts[idx]
    via: list[str] = []
    if idx > 0:
        via.append(f"the drop-in {path} overrides ExecStart= of {frag}")
    elif drops:
        via.append(f"ExecStart= is in the fragment (drop-ins {', '.join(drops)} do not set it)")
    if path.startswith(("/usr/lib/", "/lib/")):
        via.append(f"{path} belongs to a package: an upgrade may overwrite this edit (a drop-in survives)")
    try:
        fl.parse_command(text, "unit")
    except fl.NoServerCommand as exc:
        script = host.launch_script or exc.runs
        if not script:
            raise ServiceError(f"{path}: {exc}", EXIT_INPUT) from exc
        stext, ssha = await read_remote_file(backend, script, sudo=sudo)
        how = "launch_script in hosts.toml" if host.launch_script else f"ExecStart= of {path} runs it"
        return FlagSource("script", script, stext, ssha, unit=unit, via=(*via, how), files=tuple(paths))
    except fl.FlagError as exc:
        raise ServiceError(f"{path}: {exc}", EXIT_INPUT) from exc
    return FlagSource("unit", path, text, sha, unit=unit, via=tuple(via), files=tuple(paths))


# =============================================================================================
# Planning
# =============================================================================================


async def plan_apply(
    name: str,
    host: HostConfig,
    backend: HostBackend,
    edits: Sequence[fl.Edit],
    *,
    restart: bool = False,
    force: bool = False,
    rollback_on_failure: bool = False,
    timeout: float = 1800.0,
    graph_margin_gib: float | None = None,
    boot: Boot | None = None,
    boots: Sequence[Boot] | None = None,
    predict: bool = True,
    boots_timeout: float = 20.0,
    clock: Callable[[], float] = time.time,
    env_edits: Sequence[ev.EnvEdit] = (),
) -> ApplyPlan:
    """Read the effective flags, edit them in memory, predict, and say what would run.

    ``env_edits`` set or remove environment variables the server starts with (``kvtui.envedit``);
    an ``Edit`` whose name is an environment variable's (upper case, ``VLLM_CPU_KVCACHE_SPACE``:
    the console's calculator) is one too.

    ``boots`` (the host's boots as a monitor tracked them, the TUI) or ``boot`` (one boot):
    what the calculator calibrates from, as ``kvtui calc`` would (the last boot that sized its
    pool, with its same-deployment siblings); without either they are read from the host
    (bounded by ``boots_timeout``). Raises ``ServiceError`` for an edit kvtui will not make
    (exit 4) or a host it cannot read (exit 3).
    """
    edits, env_edits = split_env_edits(edits, env_edits)
    if not edits and not env_edits:
        raise ServiceError("nothing to apply: give --set FLAG=VALUE, --unset FLAG, --setenv NAME=VALUE or "
                           "--unsetenv NAME", EXIT_USAGE)
    source = await locate_source(name, host, backend)
    new_text, changes, warnings = source.text, [], []
    try:
        if edits:
            result = fl.apply_edits(source.text, source.kind, edits)
            new_text, engine = result.new_text, result.engine
            changes, warnings = list(result.changes), list(result.warnings)
        else:
            cmd = fl.parse_command(source.text, source.kind)
            engine, warnings = cmd.engine, list(cmd.warnings)
        if env_edits:
            env_result = ev.apply_env_edits(new_text, source.kind, env_edits)
            new_text = env_result.new_text
            changes.extend(env_result.changes)
            warnings.extend(env_result.warnings)
    except fl.NoServerCommand as exc:
        raise ServiceError(f"{source.path}: {exc}", EXIT_INPUT) from exc
    except fl.BadValue as exc:  # malformed as given: a usage error, as in `kvtui calc`
        raise ServiceError(str(exc), EXIT_USAGE) from exc
    except fl.FlagError as exc:
        raise ServiceError(f"{source.path}: {exc}", EXIT_REFUSED) from exc
    plan = ApplyPlan(
        name=name,
        host=host,
        action="apply",
        source=source,
        engine=engine,
        edits=list(edits),
        new_text=new_text,
        changes=changes,
        warnings=warnings,
        diff=unified_diff(source.text, new_text, source.path),
        backup_path=backup_name(source.path, clock(), _existing_copies(source)),
        steps=[],
        cmd={},
        force=force,
        restart=restart,
        rollback_on_failure=rollback_on_failure,
        timeout=timeout,
        env_edits=list(env_edits),
    )
    _refuse_readonly(plan, backend)
    _build_steps(plan, backend)
    seen: list[Boot] | None = list(boots) if boots else ([boot] if boot is not None else None)
    if predict and plan.changed:
        seen = await _predict(plan, backend, seen, graph_margin_gib, boots_timeout)
    _refuse_unknown_flags(plan, seen)
    return plan


_ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*")


def split_env_edits(
    edits: Sequence[fl.Edit], env_edits: Sequence[ev.EnvEdit] = ()
) -> tuple[list[fl.Edit], list[ev.EnvEdit]]:
    """Flag edits and environment edits: an ``Edit`` named like an environment variable (upper
    case: ``VLLM_CPU_KVCACHE_SPACE``; also the calculator's ``vllm_cpu_kvcache_space``) is an
    environment edit — no engine flag is spelled so. Raises ``ServiceError`` for a bad value."""
    flags_out: list[fl.Edit] = []
    env_out = list(env_edits)
    for e in edits:
        name = e.flag.strip()
        if _ENV_NAME_RE.fullmatch(name) or name.lower() == "vllm_cpu_kvcache_space":
            if e.value is True or e.value is False:
                raise ServiceError(f"{name} is an environment variable: give a value ({name}=VALUE)", EXIT_USAGE)
            try:
                got = ev.parse_env_args([f"{name.upper()}={e.value}"] if e.value is not None else [],
                                        [name.upper()] if e.value is None else [])
            except ev.EnvError as exc:
                raise ServiceError(str(exc), EXIT_USAGE) from exc
            env_out.extend(got)
        else:
            flags_out.append(e)
    names = [e.name for e in env_out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ServiceError(f"{dup} is given twice; give it once", EXIT_USAGE)
    return flags_out, env_out


def _refuse_unknown_flags(plan: ApplyPlan, boots: Sequence[Boot] | None) -> None:
    """An edit that sets a flag the engine does not accept stops the server at start (argparse:
    ``error: unrecognized arguments``, exit status 2): refused unless forced. Known: kvtui's flag
    table, the flags the file already passes, and the running boot's own argument dump (SGLang
    prints every ServerArgs field, vLLM its non-default ones)."""
    engine = plan.engine if plan.engine in (Engine.SGLANG, Engine.VLLM) else Engine.SGLANG
    try:
        in_file = {o.canonical for o in fl.parse_command(plan.source.text, plan.source.kind).flags}
    except fl.FlagError:
        in_file = set()
    dump: set[str] = set()
    for b in boots or ():
        if b.engine in (engine, Engine.UNKNOWN):
            dump.update(k.replace("_", "-") for k in b.flags)
    eng = "vLLM" if engine is Engine.VLLM else "SGLang"
    for e in plan.edits:
        if e.value is None:
            continue  # removing: refused already when the file has no such flag
        name = e.flag.strip().lstrip("-").lower().replace("_", "-")
        base = name[3:] if engine is Engine.VLLM and name.startswith("no-") else name
        if fl.lookup(engine, name) is not None or {name, base} & (in_file | dump):
            continue
        candidates = sorted(fl.known_names(engine) | in_file | dump)
        near = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
        helper = "vllm serve --help" if engine is Engine.VLLM else "python -m sglang.launch_server --help"
        nearest = ("nearest known flags: " + ", ".join(f"--{n}" for n in near)) if near else (
            f"no known flag is close to it (`{helper}` lists them all)")
        where = " or the running boot's argument dump" if dump else ""
        plan.refusals.append(Refusal(
            f"--{name} is not a flag {eng} accepts (not in kvtui's flag table, the file{where}); {nearest}; "
            f"the engine would refuse it at start (`error: unrecognized arguments: --{name}`, exit status 2): "
            "check the spelling, or pass --force to write it anyway", True))


def _refuse_readonly(plan: ApplyPlan, backend: HostBackend) -> None:
    if plan.host.readonly or bool(getattr(backend, "readonly", False)):
        plan.refusals.append(
            Refusal(f"host '{plan.name}' is readonly (readonly = true): kvtui never edits or restarts it", False)
        )


def _unit_name(plan: ApplyPlan) -> str | None:
    return plan.source.unit or plan.host.unit


def _build_steps(plan: ApplyPlan, backend: HostBackend) -> None:
    src, sudo = plan.source, _sudo(plan.host)
    steps: list[PlanStep] = []
    c: dict[str, str] = {}
    if src.demo:
        if plan.action == "rollback" and plan.pre_rollback_path:
            steps.append(PlanStep(f"save the current unit as {plan.pre_rollback_path}"))
        if plan.action == "apply":
            steps.append(PlanStep(f"back up {src.path} to {plan.backup_path}"))
        steps.append(PlanStep(f"write {src.path} atomically, then re-read it and check the flags"))
        steps.append(PlanStep("daemon-reload, then check the loaded ExecStart carries the new flags"))
        if plan.restart:
            steps.append(PlanStep("restart the unit and follow the new boot"))
        plan.steps, plan.cmd = steps, c
        return
    c["hash"] = cmds.file_sha256(src.path, sudo=sudo)
    save_to = plan.pre_rollback_path if plan.action == "rollback" else plan.backup_path
    assert save_to is not None
    c["backup"] = cmds.backup_copy(src.path, save_to, sudo=sudo)
    c["hash_backup"] = cmds.file_sha256(save_to, sudo=sudo)
    c["write"] = cmds.write_file_atomic(
        src.path, sudo=sudo, expect_sha256=src.sha256, content_sha256=sha256_text(plan.new_text)
    )
    c["read"] = cmds.read_file(src.path, sudo=sudo)
    steps.append(PlanStep(f"check {src.path} is unchanged since it was read (sha256 {src.sha256[:12]}…)", c["hash"]))
    steps.append(PlanStep(f"back up {src.path} to {save_to}", c["backup"]))
    steps.append(PlanStep("check the backup equals the file that was read", c["hash_backup"]))
    steps.append(PlanStep(f"write {src.path} atomically (new text on stdin; its hash is checked before the rename)",
                          c["write"]))
    steps.append(PlanStep(f"re-read {src.path} and check every edited flag", c["read"]))
    unit = _unit_name(plan)
    if unit:
        c["reload"] = cmds.daemon_reload(sudo=sudo)
        c["show"] = cmds.systemctl_show(unit, ["ExecStart"], sudo=sudo)
        steps.append(PlanStep("reload systemd's view of the unit", c["reload"]))
        steps.append(PlanStep("check the ExecStart systemd will run carries the new flags", c["show"]))
        if plan.env_edits and src.kind == "unit":
            c["show_env"] = cmds.systemctl_show(unit, ["Environment"], sudo=sudo)
            steps.append(PlanStep("check the environment systemd will give it carries the new values",
                                  c["show_env"]))
        if plan.restart:
            c["restart"] = cmds.restart_unit(unit, sudo=sudo)
            steps.append(PlanStep(f"restart {unit} and follow the new boot", c["restart"]))
    elif plan.restart:
        if not (plan.host.stop_command and plan.host.start_command):
            plan.refusals.append(Refusal(
                f"host '{plan.name}' has no unit and no start_command/stop_command: kvtui can write the script "
                "but cannot restart the server (drop --restart, or configure both commands)", False))
        else:
            c["stop"] = cmds.shell(plan.host.stop_command)
            c["start"] = cmds.detached(plan.host.start_command, log_file=plan.host.log_file)
            steps.append(PlanStep("stop the server (stop_command)", c["stop"]))
            steps.append(PlanStep(f"wait (at most {DEFAULT_STOP_WAIT_S:.0f} s) until its processes have released "
                                  "their GPU memory"))
            steps.append(PlanStep("start it detached from this session (start_command)", c["start"]))
    if plan.env_edits and plan.restart:
        steps.append(PlanStep("read the new server process's environment (/proc/PID/environ) and check the values"))
    plan.steps, plan.cmd = steps, c


async def _predict(
    plan: ApplyPlan,
    backend: HostBackend,
    known: list[Boot] | None,
    graph_margin_gib: float | None,
    boots_timeout: float,
    *,
    refuse: bool = True,
) -> list[Boot] | None:
    """Attach the calculator's prediction (and a refusal on its verdict); the boots it read (or
    was given), None when none could be read."""
    try:
        from kvtui import kvcalc
    except ImportError:  # pragma: no cover - the calculator ships with the package
        plan.prediction_note = "the calculator is not available in this build"
        return known
    boots: list[Boot]
    if known:
        boots = known
    else:
        from kvtui.monitor import read_boots

        try:
            boots = await read_boots(backend, timeout=boots_timeout, host=plan.host, engine=plan.engine,
                                     first=8.0, start_backend=False)
        except (BackendError, TimeoutError) as exc:
            plan.prediction_note = f"none: cannot read the host's boots ({exc})"
            return None
        if not boots:
            plan.prediction_note = "none: no server boot was found in the host's log to calibrate from"
            return None
    try:
        chosen, others = kvcalc.select_boot(boots, None)
        model = kvcalc.calibrate(chosen, others=others)
        mapping, drift = _prediction_edits(plan, chosen, set(kvcalc.EDITABLE_FLAGS.get(plan.engine, ())))
        margin = kvcalc.DEFAULT_GRAPH_MARGIN_GIB if graph_margin_gib is None else graph_margin_gib
        pred = kvcalc.predict(model, mapping, graph_margin_gib=margin)
        for env in plan.env_edits:
            if not (env.name == CPU_KV_SPACE_ENV and plan.engine is Engine.VLLM):
                pred.reasons.append(f"{env.name} is not modelled by the calculator: its effect on memory is not "
                                    "included")
    except kvcalc.CalcError as exc:
        plan.prediction_note = f"none: {exc}"
        return boots
    plan.prediction = pred
    plan.calibration = chosen
    if drift:
        plan.warnings.append(
            "the running boot used " + ", ".join(drift) + "; the prediction is for what the file will say"
        )
    if refuse and pred.verdict in (kvcalc.Verdict.NO_FIT, kvcalc.Verdict.OOM_RISK):
        why = "; ".join(pred.reasons) if pred.reasons else ""
        safe = (f"; the largest safe fraction is {fmt.safe_max(pred.max_safe_fraction)}"
                if pred.max_safe_fraction is not None else "")
        plan.refusals.append(Refusal(
            f"the calculator predicts {pred.verdict}" + (f": {why}" if why else "") + safe, True))
    return boots


def _prediction_edits(
    plan: ApplyPlan, boot: Boot, modelled: set[str]
) -> tuple[dict[str, object], list[str]]:
    """The calculator's edits: the requested ones, plus every modelled flag whose value in the
    new file differs from what the running boot used (the file may have been edited before)."""
    engine = plan.engine
    mapping: dict[str, object] = {}
    for e in plan.edits:
        key = fl.dest_name(engine, e.flag)
        mapping[key] = e.value
    for env in plan.env_edits:  # the calculator models vLLM's CPU KV pool size
        if env.name == CPU_KV_SPACE_ENV and engine is Engine.VLLM:
            mapping[CPU_KV_SPACE_ENV] = env.value
    drift: list[str] = []
    try:
        cmd = fl.parse_command(plan.new_text, plan.source.kind)
    except fl.FlagError:
        return mapping, drift
    kv = boot.metrics.kv_cache_gib
    if engine is Engine.VLLM and CPU_KV_SPACE_ENV not in mapping and "cpu_mem_total_gib" in boot.facts and kv:
        # vLLM CPU: the file's pool size may differ from the running boot's (edited before)
        space = ev.effective_env(plan.new_text, plan.source.kind).get(CPU_KV_SPACE_ENV)
        if space is not None and space.isdigit() and abs(int(space) - kv) > 0.05:
            mapping[CPU_KV_SPACE_ENV] = space
            drift.append(f"a {kv:g} GiB CPU KV pool (the file says {CPU_KV_SPACE_ENV}={space})")
    for occ in cmd.flags:
        dest = fl.dest_name(engine, occ.canonical)
        if dest not in modelled or dest in mapping or dest not in boot.flags:
            continue
        if isinstance(occ.value, str) and not fl.same_value(boot.flags[dest], occ.value):
            mapping[dest] = occ.value
            drift.append(f"{dest}={boot.flags[dest]!r} (the file says {occ.value})")
    return mapping, drift


# =============================================================================================
# Rollback planning
# =============================================================================================


async def list_backups(host: HostConfig, backend: HostBackend, source: FlagSource) -> list[str]:
    """kvtui's backups of the source file, oldest first (pre-rollback copies excluded)."""
    if source.demo:
        p = Path(source.path)
        names = [str(p.parent / x.name) for x in p.parent.glob(p.name + BACKUP_MARK + "*")]
        return sorted((n for n in names if not n.endswith(PRE_ROLLBACK)), key=backup_sort_key)
    r = await _run(backend, cmds.list_backups(source.path, sudo=_sudo(host)))
    if not r.ok:
        raise ServiceError(f"cannot list the backups of {source.path}: {_one_line(r.stderr)}")
    prefix = source.path + BACKUP_MARK
    found = [ln for ln in r.stdout.splitlines() if ln.startswith(prefix) and not ln.endswith(PRE_ROLLBACK)]
    return sorted(found, key=backup_sort_key)


def _existing_copies(source: FlagSource) -> list[str]:
    """The demo host's backups and pre-rollback copies of the file (local, cheap): names a new
    backup must not take. On a real host the copy command refuses to overwrite instead."""
    if not source.demo:
        return []
    p = Path(source.path)
    return [str(p.parent / x.name) for x in p.parent.glob(p.name + BACKUP_MARK + "*")]


async def plan_rollback(
    name: str,
    host: HostConfig,
    backend: HostBackend,
    *,
    to: str | None = None,
    restart: bool = False,
    timeout: float = 1800.0,
    boots: Sequence[Boot] | None = None,
    graph_margin_gib: float | None = None,
    clock: Callable[[], float] = time.time,
) -> ApplyPlan:
    """Restore the newest backup of the effective flags file (or ``to``) through the same
    verified path; the current file is saved first as ``<backup name>.pre-rollback``.

    With ``boots`` (the TUI's), the calculator's prediction for the restored flags is attached
    (for information: a rollback is never refused on a verdict)."""
    source = await locate_source(name, host, backend)
    backups = await list_backups(host, backend, source)
    if to is not None:
        want = to if "/" in to else str(Path(source.path).parent / to)
        if not want.startswith(source.path + BACKUP_MARK):
            raise ServiceError(
                f"--to {to}: not a kvtui backup of {source.path} (backups are named {source.path}{BACKUP_MARK}<time>)",
                EXIT_USAGE,
            )
        chosen = want
    else:
        if not backups:
            raise ServiceError(f"no kvtui backup of {source.path} to roll back to", EXIT_REFUSED)
        chosen = await _newest_different(host, backend, source, backups)
    if source.demo:
        try:
            btext = _read_local(chosen)
        except OSError as exc:
            raise ServiceError(f"cannot read the backup {chosen}: {exc.strerror or exc}") from exc
    else:
        btext, _ = await read_remote_file(backend, chosen, sudo=_sudo(host))
    try:
        old_cmd = fl.parse_command(source.text, source.kind)
        new_cmd = fl.parse_command(btext, source.kind)
    except fl.FlagError as exc:
        raise ServiceError(f"{chosen}: {exc}", EXIT_INPUT) from exc
    edits = _edits_between(old_cmd, new_cmd)
    changes = _rollback_changes(old_cmd, new_cmd, source.text, btext, edits)
    env_edits = ev.env_between(source.text, btext, source.kind)
    old_env = ev.effective_env(source.text, source.kind) if env_edits else {}
    changes.extend(
        fl.Change(f"env {e.name}", "remove" if e.value is None else ("set" if e.name in old_env else "add"),
                  old_env.get(e.name), e.value,
                  ev.assignment_line(source.text if e.value is None else btext, source.kind, e.name))
        for e in env_edits
    )
    plan = ApplyPlan(
        name=name,
        host=host,
        action="rollback",
        source=source,
        engine=new_cmd.engine,
        edits=edits,
        new_text=btext,
        changes=changes,
        warnings=[],
        diff=unified_diff(source.text, btext, source.path, new_label=chosen),
        backup_path=chosen,
        steps=[],
        cmd={},
        restart=restart,
        timeout=timeout,
        pre_rollback_path=backup_name(source.path, clock(), _existing_copies(source)) + PRE_ROLLBACK,
        env_edits=env_edits,
    )
    _refuse_readonly(plan, backend)
    _build_steps(plan, backend)
    if boots and plan.changed:
        await _predict(plan, backend, list(boots), graph_margin_gib, 0.0, refuse=False)
    return plan


async def _newest_different(host: HostConfig, backend: HostBackend, source: FlagSource, backups: list[str]) -> str:
    """The newest backup whose content differs from the current file (a backup equal to it —
    say, left by an apply that was rolled back already — would roll back to nothing)."""
    for path in reversed(backups[-20:]):
        if source.demo:
            sha = sha256_text(_read_local(path))
        else:
            r = await _run(backend, cmds.file_sha256(path, sudo=_sudo(host)))
            sha = (r.stdout.split() or [""])[0] if r.ok else ""
        if sha != source.sha256:
            return path
    return backups[-1]


def _rollback_changes(
    old: fl.ServerCommand, new: fl.ServerCommand, old_text: str, new_text: str, edits: Sequence[fl.Edit]
) -> list[fl.Change]:
    """What a rollback changes, each with its real line: in the restored text for a flag it sets
    or adds, in the current text for one it removes (was ``(line 0)`` for every one)."""

    def line_of(cmd: fl.ServerCommand, text: str, flag: str) -> int:
        occ = cmd.find(flag)
        return text.count("\n", 0, occ[-1].start) + 1 if occ else cmd.exec_line

    out: list[fl.Change] = []
    for e in edits:
        before, after = old.get(e.flag), new.get(e.flag)
        if e.value is None:
            out.append(fl.Change(f"--{e.flag}", "remove", before, None, line_of(old, old_text, e.flag)))
        else:
            action: Literal["add", "set"] = "add" if before is None else "set"
            out.append(fl.Change(f"--{e.flag}", action, before, after, line_of(new, new_text, e.flag)))
    return out


def _edits_between(old: fl.ServerCommand, new: fl.ServerCommand) -> list[fl.Edit]:
    """The edits that turn ``old``'s flags into ``new``'s (to verify a rollback)."""
    ov, nv = old.values(), new.values()
    out: list[fl.Edit] = []
    for k, v in nv.items():
        if k not in ov or ov[k] != v:
            out.append(fl.Edit(k, v))
    for k in ov:
        if k not in nv:
            out.append(fl.Edit(k, None))
    return out


# =============================================================================================
# Execution
# =============================================================================================


class _Ctx:
    def __init__(
        self, plan: ApplyPlan, backend: HostBackend, progress: ProgressFn | None, heartbeat: ProgressFn | None = None
    ) -> None:
        self.plan = plan
        self.backend = backend
        self._progress = progress
        self.heartbeat = heartbeat  # "still waiting" lines: shown, never kept in the log or the audit
        self.log: list[str] = []

    def say(self, msg: str) -> None:
        self.log.append(msg)
        if self._progress is not None:
            self._progress(msg)


async def execute(
    plan: ApplyPlan,
    backend: HostBackend,
    progress: ProgressFn | None = None,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    stop_wait_s: float = DEFAULT_STOP_WAIT_S,
    settle_s: float | None = None,
    heartbeat: ProgressFn | None = None,
) -> ApplyOutcome:
    """Carry out a plan (see the module docstring). Never raises for a host-side failure: the
    outcome says what happened and in which state the host was left; every attempt is audited.
    ``heartbeat`` gets a line saying where the restart is (the new boot's phase and progress)
    whenever nothing was said for ``fmt.HEARTBEAT_S`` while it waits (the CLI's stderr)."""
    ctx = _Ctx(plan, backend, progress, heartbeat)
    if plan.refused:
        out = ApplyOutcome(EXIT_REFUSED, "refused", [f"refused: {r.reason}" for r in plan.blocking])
        _audit(plan, out, clock)
        return out
    if not plan.changed:
        out = ApplyOutcome(EXIT_OK, "unchanged", [f"{plan.source.path} already says this; nothing to do"])
        if plan.restart:
            out.messages.append("not restarting: nothing changed")
        return out
    try:
        out = await _execute(ctx, clock=clock, sleep=sleep, stop_wait_s=stop_wait_s, settle_s=settle_s)
    except ServiceError as exc:
        out = ApplyOutcome(exc.code, "error", [*ctx.log, str(exc)], backup_path=_saved_copy(plan))
    except asyncio.CancelledError:
        out = ApplyOutcome(130, "error", [*ctx.log, "interrupted"], backup_path=_saved_copy(plan))
        _audit(plan, out, clock)
        raise
    _audit(plan, out, clock)
    return out


def _saved_copy(plan: ApplyPlan) -> str:
    return plan.pre_rollback_path if plan.action == "rollback" and plan.pre_rollback_path else plan.backup_path


async def _execute(
    ctx: _Ctx,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
    stop_wait_s: float,
    settle_s: float | None,
) -> ApplyOutcome:
    plan = ctx.plan
    saved = _saved_copy(plan)
    if plan.source.demo:
        await _write_demo(ctx, saved)
    else:
        await _write_remote(ctx, saved)
    what = "rolled back to " + plan.backup_path if plan.action == "rollback" else "written"
    ctx.say(f"{plan.source.path}: {what}; the previous version is saved as {saved}")
    if not plan.restart:
        hint = "restart the server for it to take effect" if plan.action == "apply" else "restart to use it"
        ctx.say(f"not restarted: {hint}")
        return ApplyOutcome(EXIT_OK, "written", list(ctx.log), backup_path=saved)
    boot, code, status = await _restart_and_follow(ctx, clock=clock, sleep=sleep, stop_wait_s=stop_wait_s,
                                                   settle_s=settle_s)
    out = ApplyOutcome(code, status, list(ctx.log), backup_path=saved, boot=boot)
    if boot is not None and plan.prediction is not None:
        out.reality = _reality(plan, boot)
    if code != EXIT_OK and plan.rollback_on_failure and plan.action == "apply":
        out = await _auto_rollback(ctx, out, clock=clock, sleep=sleep, stop_wait_s=stop_wait_s, settle_s=settle_s)
    return out


# -- writing -----------------------------------------------------------------------------------


async def _write_remote(ctx: _Ctx, saved: str) -> None:
    plan, backend, c = ctx.plan, ctx.backend, ctx.plan.cmd
    src = plan.source
    ctx.say(f"checking {src.path} is unchanged since it was read")
    h = await _run(backend, c["hash"])
    cur = (h.stdout.split() or [""])[0] if h.ok else ""
    if cur != src.sha256:
        detail = "it is gone or unreadable: " + _one_line(h.stderr) if not h.ok else "its hash differs"
        raise ServiceError(
            f"{src.path} changed since it was read ({detail}); nothing was written; plan again to see the new diff",
            EXIT_REFUSED,
        )
    ctx.say(f"backing up to {saved}")
    b = await _run(backend, c["backup"])
    if not b.ok:
        why = "a file by that name exists" if b.exit_status == cmds.EXIT_EXISTS else _one_line(b.stderr)
        raise ServiceError(f"cannot back up {src.path} to {saved}: {why}; nothing was written", EXIT_INPUT)
    hb = await _run(backend, c["hash_backup"])
    if not hb.ok or (hb.stdout.split() or [""])[0] != src.sha256:
        raise ServiceError(
            f"the backup {saved} does not equal the file that was read ({src.path} changed meanwhile?); "
            "nothing was written",
            EXIT_REFUSED,
        )
    ctx.say(f"writing {src.path}")
    w = await _run(backend, c["write"], input=plan.new_text.encode("utf-8"))
    if not w.ok:
        if w.exit_status == cmds.EXIT_CHANGED:
            raise ServiceError(
                f"{src.path} changed between the backup and the write; nothing was written (backup {saved})",
                EXIT_REFUSED,
            )
        if w.exit_status == cmds.EXIT_INCOMPLETE:
            raise ServiceError(
                f"the new text of {src.path} arrived incomplete; the file was not replaced (backup {saved})",
                EXIT_INPUT,
            )
        raise ServiceError(
            f"cannot write {src.path}: {_one_line(w.stderr) or f'exit {w.exit_status}'}; the file is unchanged "
            f"(backup {saved})",
            EXIT_INPUT,
        )
    problems = await _check_written(ctx)
    if problems:
        await _restore(ctx, saved, "the re-read file " + "; ".join(problems))
        raise ServiceError(
            f"{src.path} did not read back as written ({'; '.join(problems)}); restored from {saved}", EXIT_INPUT
        )
    unit = _unit_name(plan)
    if unit:
        await _reload_and_check(ctx, saved)


async def _check_written(ctx: _Ctx) -> list[str]:
    plan = ctx.plan
    r = await _run(ctx.backend, plan.cmd["read"])
    if not r.ok:
        return [f"could not be read: {_one_line(r.stderr)}"]
    problems = fl.check_text(r.stdout, plan.source.kind, plan.edits) + ev.check_env(
        r.stdout, plan.source.kind, plan.env_edits)
    if r.stdout != plan.new_text:
        return problems or ["differs from the text that was sent"]
    return problems


async def _restore(ctx: _Ctx, saved: str, why: str) -> None:
    """Put the saved copy back (after a failed check); best effort, said out loud."""
    plan, backend = ctx.plan, ctx.backend
    ctx.say(f"restoring {plan.source.path} from {saved}: {why}")
    if plan.source.demo:
        _demo(backend).write_unit(_read_local(saved))
        _demo(backend).daemon_reload()
        return
    sudo = _sudo(plan.host)
    try:
        text, _sha = await read_remote_file(backend, saved, sudo=sudo)
        w = await _run(backend, cmds.write_file_atomic(plan.source.path, sudo=sudo,
                                                       content_sha256=sha256_text(text)), input=text.encode())
        if not w.ok:
            raise ServiceError(f"restoring failed: {_one_line(w.stderr)}")
        unit = _unit_name(plan)
        if unit and plan.source.kind == "unit":
            await _run(backend, cmds.daemon_reload(sudo=sudo))
    except ServiceError as exc:
        raise ServiceError(
            f"{why}, and restoring {plan.source.path} from {saved} failed too: {exc}; restore it by hand "
            f"(cp -p {saved} {plan.source.path})",
            EXIT_FAILED,
        ) from exc


async def _reload_and_check(ctx: _Ctx, saved: str) -> None:
    plan, backend = ctx.plan, ctx.backend
    ctx.say("systemctl daemon-reload")
    r = await _run(backend, plan.cmd["reload"])
    if not r.ok:
        await _restore(ctx, saved, f"daemon-reload failed ({_one_line(r.stderr)})")
        raise ServiceError(f"systemctl daemon-reload failed: {_one_line(r.stderr)}; restored from {saved}",
                           EXIT_FAILED)
    if plan.source.kind != "unit":
        return  # the flags live in a script the unit runs: systemd does not see them
    s = await _run(backend, plan.cmd["show"])
    problems = _check_execstart(plan, s.stdout if s.ok else "")
    if plan.env_edits and "show_env" in plan.cmd and not problems:
        e = await _run(backend, plan.cmd["show_env"])
        problems = _check_systemd_env(plan, e.stdout if e.ok else "", s.stdout if s.ok else "")
    if problems:
        await _restore(ctx, saved, "systemd does not run the edited command: " + "; ".join(problems))
        raise ServiceError(
            "after daemon-reload, systemd's ExecStart does not carry the edit (" + "; ".join(problems)
            + f"); another unit file may override it; restored from {saved}",
            EXIT_FAILED,
        )
    ctx.say("systemd's ExecStart carries the new flags" + (" and its environment the new values"
                                                            if plan.env_edits else ""))


def _check_systemd_env(plan: ApplyPlan, show_env: str, show_exec: str) -> list[str]:
    """The environment systemd gives the server: ``Environment=``, overridden by ExecStart's own
    ``env NAME=…`` words."""
    env = ev.parse_environment_property(show_env)
    for argv in fl.parse_systemctl_execstart(show_exec):
        try:
            env.update(fl.parse_argv(argv).env)
        except fl.FlagError:
            continue
        break
    return ev.check_environment(env, plan.env_edits, what="systemd's environment for the unit")


def _check_execstart(plan: ApplyPlan, show_output: str) -> list[str]:
    argvs = fl.parse_systemctl_execstart(show_output)
    if not argvs:
        text = show_output.strip()
        if text.startswith("ExecStart=") and "argv[]=" not in text and text[len("ExecStart="):].strip():
            try:
                argvs = [shlex.split(text[len("ExecStart="):])]
            except ValueError:
                argvs = []
    if not argvs:
        return ["systemctl show -p ExecStart printed no command"]
    for argv in argvs:
        try:
            cmd = fl.parse_argv(argv)
        except fl.FlagError:
            continue
        return fl.check_command(cmd, plan.edits)
    return ["systemd's ExecStart does not start a server"]


async def _write_demo(ctx: _Ctx, saved: str) -> None:
    plan = ctx.plan
    demo = _demo(ctx.backend)
    src = plan.source
    current = demo.read_unit()
    if sha256_text(current) != src.sha256:
        raise ServiceError(f"{src.path} changed since it was read; nothing was written", EXIT_REFUSED)
    ctx.say(f"backing up to {saved}")
    if not _copy_local(src.path, saved):
        raise ServiceError(f"cannot back up {src.path}: {saved} exists; nothing was written", EXIT_INPUT)
    if sha256_text(_read_local(saved)) != src.sha256:
        raise ServiceError(f"the backup {saved} does not equal the file that was read; nothing was written",
                           EXIT_REFUSED)
    ctx.say(f"writing {src.path}")
    try:
        demo.write_unit(plan.new_text)
    except BackendError as exc:
        raise ServiceError(f"cannot write {src.path}: {exc}", EXIT_REFUSED) from exc
    back = demo.read_unit()
    problems = (fl.check_text(back, "unit", plan.edits) + ev.check_env(back, "unit", plan.env_edits)
                if back == plan.new_text else ["differs from what was sent"])
    if problems:
        await _restore(ctx, saved, "; ".join(problems))
        raise ServiceError(f"{src.path} did not read back as written; restored from {saved}", EXIT_INPUT)
    ctx.say("daemon-reload")
    demo.daemon_reload()
    problems = _check_execstart(plan, demo.effective_execstart())
    if problems:
        await _restore(ctx, saved, "; ".join(problems))
        raise ServiceError("the loaded ExecStart does not carry the edit: " + "; ".join(problems), EXIT_FAILED)
    ctx.say("the loaded ExecStart carries the new flags")


# -- restarting and following ------------------------------------------------------------------


async def _restart_and_follow(
    ctx: _Ctx,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
    stop_wait_s: float,
    settle_s: float | None,
) -> tuple[Boot | None, int, str]:
    plan = ctx.plan
    how = _restart_how(plan.source.demo, plan.cmd)
    try:
        follower, boot = await _follow_restart(
            ctx.backend, plan.engine, ctx.say,
            lambda: _issue_restart(ctx.backend, how, plan.cmd, _unit_name(plan), say=ctx.say, timeout=plan.timeout,
                                   sleep=sleep, clock=clock, stop_wait_s=stop_wait_s, beat=ctx.heartbeat),
            timeout=plan.timeout, expect=plan.edits,
            settle=settle_s if settle_s is not None else (0.05 if plan.source.demo else FOLLOW_SETTLE_S),
            heartbeat=ctx.heartbeat,
        )
    except _RestartFailed as exc:
        raise ServiceError(
            f"{exc.error}; the new flags are written (previous version: {_saved_copy(plan)}) but the server was not "
            f"restarted with them: restart it, or run 'kvtui rollback {plan.name}'",
            exc.error.code,
        ) from exc.error
    if boot is None:
        return _timed_out(ctx.say, follower, plan.timeout)
    problems = fl.check_dump(plan.engine, boot.flags, plan.edits) if boot.flags else []
    if not boot.flags:
        ctx.say("note: the new boot printed no argument dump; the edit was checked in systemd/the file only")
    if problems:
        ctx.say("edit not in effect: " + "; ".join(problems))
        return boot, EXIT_FAILED, "not_in_effect"
    if boot.flags:
        ctx.say("the new boot's own argument dump carries the edits")
    if plan.env_edits and boot.status is BootStatus.READY:
        env_problems = await _check_server_env(ctx, boot)
        if env_problems:
            ctx.say("environment not in effect: " + "; ".join(env_problems))
            return boot, EXIT_FAILED, "not_in_effect"
    return _boot_result(ctx.say, boot)


CPU_KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


async def _check_server_env(ctx: _Ctx, boot: Boot) -> list[str]:
    """The new boot runs with the environment edits: where the engine prints the value (vLLM's
    CPU KV pool, ``Explicitly set (X/…) GiB for KV cache``), and in the environment the new server
    process started with (``/proc/PID/environ``, readable by the same user)."""
    plan, backend = ctx.plan, ctx.backend
    problems: list[str] = []
    space = next((e for e in plan.env_edits if e.name == CPU_KV_SPACE_ENV and e.value is not None), None)
    kv = boot.metrics.kv_cache_gib
    if space is not None and space.value is not None and kv is not None and space.value.isdigit():
        if abs(kv - int(space.value)) < 0.05:
            ctx.say(f"the new boot sized its CPU KV pool to {kv:g} GiB, as {CPU_KV_SPACE_ENV}={space.value} says")
        else:
            problems.append(f"the new boot sized its CPU KV pool to {kv:g} GiB, not the {space.value} GiB of "
                            f"{CPU_KV_SPACE_ENV}={space.value}")
    if plan.source.demo:
        ctx.say("note: the demo host runs no processes: the environment was checked in its unit file")
        return problems
    try:
        pids = sorted(await backend.server_pids())
    except BackendError:
        pids = []
    if not pids:
        ctx.say("note: the new server's process is unknown (no unit, container or pid file): its environment "
                "was checked in the file only")
        return problems
    r = await _run(backend, cmds.proc_environ(pids[:16], sudo=_sudo(plan.host)))
    envs = cmds.parse_proc_environ(r.stdout) if r.ok else {}
    if not envs:
        ctx.say(f"note: the environment of the new server process (pid {pids[0]}) is not readable by this login: "
                "it was checked in the file only")
        return problems
    pid = min(envs)  # the server's main process (its workers inherit it)
    found = ev.check_environment(envs[pid], plan.env_edits, what=f"the new server process (pid {pid})")
    if found:
        problems.extend(found)
    else:
        shown = ", ".join(f"{e.name}={e.value}" if e.value is not None else f"no {e.name}" for e in plan.env_edits)
        ctx.say(f"the new server process (pid {pid}) runs with {shown} (/proc/{pid}/environ)")
    return problems


class _RestartFailed(Exception):
    def __init__(self, error: ServiceError) -> None:
        super().__init__(str(error))
        self.error = error


async def _follow_restart(
    backend: HostBackend,
    engine: Engine | None,
    say: ProgressFn,
    trigger: Callable[[], Awaitable[None]],
    *,
    timeout: float,
    expect: Sequence[fl.Edit] = (),
    settle: float,
    heartbeat: ProgressFn | None = None,
) -> tuple[BootFollower, Boot | None]:
    """Start following the log, issue the restart, wait for the new boot to end (None: timed
    out). A failed ``trigger`` raises ``_RestartFailed``."""
    follower = BootFollower(backend, engine, progress=say, heartbeat=heartbeat)
    await follower.start(settle)
    try:
        try:
            follower.mark()
            await trigger()
            follower.triggered()
        except ServiceError as exc:
            raise _RestartFailed(exc) from exc
        boot = await follower.wait(timeout, expect=expect)
    finally:
        await follower.close()
    return follower, boot


def _timed_out(say: ProgressFn, follower: BootFollower, timeout: float) -> tuple[Boot | None, int, str]:
    last = follower.last_phase()
    say(f"timed out after {timeout:g} s waiting for the new boot" + (f" (last phase: {last})" if last
                                                                     else " (no boot seen)"))
    return follower.current(), EXIT_TIMEOUT, "timeout"


def _boot_result(say: ProgressFn, boot: Boot) -> tuple[Boot, int, str]:
    if boot.status is BootStatus.READY:
        say("the new boot is ready")
        return boot, EXIT_OK, "ready"
    fail = boot.failure
    if fail is not None:
        where = f" in {fail.phase.value}" if fail.phase else ""
        say(f"the new boot failed{where}: {fail.kind.value}: {_one_line(fail.message, 200)}")
        if fail.hint:
            say(f"hint: {fail.hint}")
    else:
        say(f"the new boot ended: {boot.status.value}")
    return boot, EXIT_FAILED, "failed"


RestartHow = Literal["demo", "unit", "commands"]


def _restart_how(demo: bool, cmd: dict[str, str]) -> RestartHow:
    if demo:
        return "demo"
    return "unit" if "restart" in cmd else "commands"


async def _issue_restart(
    backend: HostBackend,
    how: RestartHow,
    cmd: dict[str, str],
    unit: str | None,
    *,
    say: ProgressFn,
    timeout: float,
    sleep: Callable[[float], Awaitable[None]],
    clock: Callable[[], float],
    stop_wait_s: float,
    beat: ProgressFn | None = None,
) -> None:
    """The restart itself, the same for an apply and the console's ``R``: the demo host's
    ``restart()``, ``systemctl restart UNIT``, or stop_command, a bounded wait for the old
    server's GPU memory, and start_command detached. Raises ``ServiceError``."""
    if how == "demo":
        say("restarting the unit")
        try:
            _demo(backend).restart()
        except BackendError as exc:
            raise ServiceError(f"restart failed: {exc}", EXIT_FAILED) from exc
        return
    if how == "unit":
        say(f"systemctl restart {unit}")
        r = await _run(backend, cmd["restart"], timeout=max(CMD_TIMEOUT_S, timeout))
        if not r.ok:
            raise ServiceError(f"systemctl restart {unit} failed: {_one_line(r.stderr) or r.exit_status}",
                               EXIT_FAILED)
        return
    old = await _safe_pids(backend)
    say("stopping the server (stop_command)")
    r = await _run(backend, cmd["stop"])
    if not r.ok:
        say(f"stop_command exited {r.exit_status}: {_one_line(r.stderr)}")
    await _wait_gpu_release(backend, say, old, sleep=sleep, clock=clock, limit=stop_wait_s, beat=beat)
    say("starting the server detached (start_command)")
    st = await _run(backend, cmd["start"])
    if not st.ok:
        raise ServiceError(f"start_command failed (exit {st.exit_status}): {_one_line(st.stderr)}", EXIT_FAILED)


async def _safe_pids(backend: HostBackend) -> set[int]:
    try:
        return set(await backend.server_pids())
    except BackendError:
        return set()


async def _wait_gpu_release(
    backend: HostBackend,
    say: ProgressFn,
    old: set[int],
    *,
    sleep: Callable[[float], Awaitable[None]],
    clock: Callable[[], float],
    limit: float,
    beat: ProgressFn | None = None,
) -> None:
    if not old:
        say("the server's PIDs are unknown: not waiting for its GPU memory")
        return
    pids = ", ".join(map(str, sorted(old)))
    say(f"waiting for PIDs {pids} to release their GPU memory")
    began = last = clock()
    deadline = began + limit
    while True:
        try:
            procs = await backend.gpu_processes()
        except BackendError as exc:
            say(f"cannot read GPU processes ({exc}); watching the PIDs only")
            procs = []
        r = await _run(backend, cmds.pids_alive(old))
        alive = {int(x) for x in r.stdout.split() if x.isdigit()} if r.ok else set(old)
        holding = {p.pid for p in procs if p.pid in old} | (old & alive)
        if not holding:
            say("the old server's GPU memory is free")
            return
        if clock() >= deadline:
            raise ServiceError(
                f"the old server (PIDs {', '.join(map(str, sorted(holding)))}) still holds GPU memory after "
                f"{limit:g} s; not starting a second one",
                EXIT_FAILED,
            )
        if beat is not None and clock() - last >= fmt.HEARTBEAT_S:
            last = clock()
            beat(f"… still waiting after {fmt.duration(last - began)}: PIDs "
                 f"{', '.join(map(str, sorted(holding)))} still hold GPU memory (at most {limit:g} s)")
        await sleep(1.0)


class BootFollower:
    """Follows a host's log from *now* and tracks the boots that start from here on."""

    def __init__(
        self,
        backend: HostBackend,
        engine: Engine | None,
        *,
        progress: ProgressFn | None = None,
        heartbeat: ProgressFn | None = None,
    ) -> None:
        from kvtui.boot import BootTracker
        from kvtui.engines.parse import LineParser

        hint = engine if engine in (Engine.SGLANG, Engine.VLLM) else None
        self._backend = backend
        self._parser = LineParser(hint)
        self._tracker = BootTracker(hint, max_boots=16)
        self._progress = progress
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._phase_seen: dict[int, str] = {}
        self._before: set[int] = set()  # boots seen before the restart was issued (ignored)
        self._during: set[int] = set()  # boots that began while it ran (trusted once they end)
        self._marked = False
        self._heartbeat = heartbeat
        self._last_out: float | None = None  # loop time of the last progress line

    async def start(self, settle: float) -> None:
        self._task = asyncio.create_task(self._pump(), name="kvtui-boot-follower")
        await asyncio.sleep(0)
        await asyncio.sleep(settle)

    async def _pump(self) -> None:
        it = self._backend.follow_log(LogStart.NEXT_BOOT)
        try:
            async for batch in it:
                for rec in batch:
                    for parsed in self._parser.feed(rec):
                        self._tracker.feed(parsed)
                self._report()
                self._changed.set()
        except BackendError as exc:
            self._error = exc
            self._changed.set()
        finally:
            await aclose_iter(it)

    def _report(self) -> None:
        if self._progress is None:
            return
        for i, b in enumerate(self._tracker.boots):
            if b.phase is not None and self._phase_seen.get(i) != b.phase.value:
                self._phase_seen[i] = b.phase.value
                self._progress(f"boot: {b.phase.value}")
                self._last_out = asyncio.get_running_loop().time()

    def _beat(self, now: float, since: float) -> None:
        """A heartbeat when nothing was said for ``fmt.HEARTBEAT_S``: the new boot's phase and
        its progress (shards, batches), or that none has started yet."""
        if self._heartbeat is None:
            return
        if self._last_out is None:
            self._last_out = since
        if now - self._last_out < fmt.HEARTBEAT_S:
            return
        self._last_out = now
        boot = self.current()
        where = (f"the new boot is in {fmt.boot_progress(boot)}" if boot is not None and boot.phases
                 else "no new boot has started yet")
        self._heartbeat(f"… still waiting after {fmt.duration(now - since)}: {where}")

    def mark(self) -> None:
        """Call right before issuing the restart: boots seen so far belong to the old server."""
        self._before = {id(b) for b in self._tracker.boots}
        self._marked = True

    def triggered(self) -> None:
        """Call when the restart command returned."""
        self._during = {id(b) for b in self._tracker.boots} - self._before

    def _candidates(self) -> list[Boot]:
        """Boots begun after the mark, except those stopped (by the restart itself, or an
        automatic restart of the old unit that the restart replaced)."""
        return [b for b in self._tracker.boots if id(b) not in self._before and b.status is not BootStatus.STOPPED]

    def current(self) -> Boot | None:
        c = self._candidates()
        return c[-1] if c else None

    def last_phase(self) -> str | None:
        b = self.current()
        return None if b is None or b.phase is None else b.phase.value

    async def wait(self, timeout: float, expect: Iterable[fl.Edit] = ()) -> Boot | None:
        """The first boot that is ready or failed (None on timeout). A boot whose argument dump
        contradicts ``expect`` is returned as soon as its dump is seen."""
        loop = asyncio.get_running_loop()
        since = loop.time()
        deadline = since + timeout
        expect = list(expect)
        while True:
            self._beat(loop.time(), since)
            for b in self._candidates():
                if b.status in (BootStatus.READY, BootStatus.FAILED):
                    return b
                # a boot that began after the restart returned and runs other flags: not in effect
                if id(b) not in self._during and b.flags and expect and fl.check_dump(b.engine, b.flags, expect):
                    return b
            if self._error is not None:
                raise ServiceError(f"lost the host's log while following the new boot: {self._error}", EXIT_INPUT)
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._changed.clear()
            nap = min(left, 1.0)
            if self._heartbeat is not None and self._last_out is not None:  # wake for the next heartbeat
                nap = min(nap, max(0.01, self._last_out + fmt.HEARTBEAT_S - loop.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), nap)

    async def close(self, grace: float = 5.0) -> None:
        """Stop following (bounded: a backend that is slow to let go is left to finish alone)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=grace)


def _reality(plan: ApplyPlan, boot: Boot) -> list[str]:
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


async def _auto_rollback(
    ctx: _Ctx,
    out: ApplyOutcome,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
    stop_wait_s: float,
    settle_s: float | None,
) -> ApplyOutcome:
    plan = ctx.plan
    ctx.say(f"rolling back to {plan.backup_path} (--rollback-on-failure)")
    try:
        rb = await plan_rollback(plan.name, plan.host, ctx.backend, to=plan.backup_path, restart=True,
                                 timeout=plan.timeout, clock=clock)
    except ServiceError as exc:
        out.messages.append(f"rollback could not be planned: {exc}")
        return out
    rb_out = await execute(rb, ctx.backend, ctx.say, clock=clock, sleep=sleep, stop_wait_s=stop_wait_s,
                           settle_s=settle_s, heartbeat=ctx.heartbeat)
    out.rolled_back = rb_out.status in ("ready", "written")
    tail = ("the previous flags are back and the boot is ready" if rb_out.status == "ready"
            else f"the rollback ended {rb_out.status}")
    out.messages = [*ctx.log, f"rolled back: {tail}"]
    if rb_out.status != "ready":
        out.messages.extend(rb_out.messages[-3:])
    out.code = EXIT_FAILED if out.code in (EXIT_OK, EXIT_FAILED) else out.code
    return out


# =============================================================================================
# Restart (the console's R): the same restart an apply ends with, audited
# =============================================================================================


@dataclass(slots=True)
class RestartPlan:
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

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    def render(self) -> str:
        out = [f"{self.name}: restart the server"]
        for i, st in enumerate(self.steps, 1):
            out.append(f"  {i}. {st.title}")
            if st.command:
                out.append(f"     $ {st.command}")
        out.extend(f"REFUSED: {r.reason}" for r in self.refusals)
        return "\n".join(out) + "\n"


def restart_unavailable(name: str, host: HostConfig, backend: HostBackend | None) -> str | None:
    """Why kvtui cannot restart this host's server (None: it can)."""
    if host.readonly or bool(getattr(backend, "readonly", False)):
        return f"host '{name}' is readonly (readonly = true): kvtui never edits or restarts it"
    if host.demo:
        return None if backend is None or _is_demo(backend) else f"host '{name}' is not a demo backend"
    if host.unit or (host.stop_command and host.start_command):
        return None
    if host.container:
        return (f"host '{name}' runs the server in container {host.container!r}: kvtui does not restart containers "
                "(set unit, or start_command and stop_command, in hosts.toml)")
    return f"host '{name}' has no unit and no start_command/stop_command in hosts.toml: kvtui cannot restart it"


def plan_restart(
    name: str, host: HostConfig, backend: HostBackend, *, follow: bool = False, timeout: float = 1800.0
) -> RestartPlan:
    """How this host's server restarts: the demo host's restart, ``systemctl restart UNIT``
    (``sudo -n`` when configured), or stop_command / wait for the GPU memory / start_command
    detached. A host kvtui cannot restart gets a refusal that says why."""
    plan = RestartPlan(name, host, None, [], {}, unit=host.unit, follow=follow, timeout=timeout)
    why = restart_unavailable(name, host, backend)
    if why is not None:
        plan.refusals.append(Refusal(why, False))
        return plan
    sudo = _sudo(host)
    if _is_demo(backend):
        plan.how = "demo"
        plan.steps.append(PlanStep("restart the unit (simulated systemctl restart)"))
    elif host.unit:
        plan.how = "unit"
        plan.cmd["restart"] = cmds.restart_unit(host.unit, sudo=sudo)
        plan.steps.append(PlanStep(f"restart {host.unit}", plan.cmd["restart"]))
    else:
        assert host.stop_command
        assert host.start_command
        plan.how = "commands"
        plan.cmd["stop"] = cmds.shell(host.stop_command)
        plan.cmd["start"] = cmds.detached(host.start_command, log_file=host.log_file)
        plan.steps.append(PlanStep("stop the server (stop_command)", plan.cmd["stop"]))
        plan.steps.append(PlanStep(f"wait (at most {DEFAULT_STOP_WAIT_S:.0f} s) until its processes have released "
                                   "their GPU memory"))
        plan.steps.append(PlanStep("start it detached from this session (start_command)", plan.cmd["start"]))
    if follow:
        plan.steps.append(PlanStep("follow the new boot until it is ready or failed"))
    return plan


class _Say:
    """Progress lines: kept (for the outcome and the audit) and passed on."""

    def __init__(self, progress: ProgressFn | None) -> None:
        self.log: list[str] = []
        self._progress = progress

    def __call__(self, msg: str) -> None:
        self.log.append(msg)
        if self._progress is not None:
            self._progress(msg)


async def restart(
    plan: RestartPlan,
    backend: HostBackend,
    progress: ProgressFn | None = None,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    stop_wait_s: float = DEFAULT_STOP_WAIT_S,
    settle_s: float | None = None,
) -> ApplyOutcome:
    """Restart the server as planned; with ``plan.follow`` wait until the new boot is ready or
    failed. Never raises for the host; every attempt is audited (action ``restart``)."""
    say = _Say(progress)
    if plan.refused or plan.how is None:
        out = ApplyOutcome(EXIT_REFUSED, "refused", [f"refused: {r.reason}" for r in plan.refusals])
        _audit_restart(plan, out, clock)
        return out
    how = plan.how

    async def trigger() -> None:
        await _issue_restart(backend, how, plan.cmd, plan.unit, say=say, timeout=plan.timeout, sleep=sleep,
                             clock=clock, stop_wait_s=stop_wait_s)

    try:
        if plan.follow:
            settle = settle_s if settle_s is not None else (0.05 if how == "demo" else FOLLOW_SETTLE_S)
            follower, boot = await _follow_restart(backend, _engine_of(plan.host), say, trigger,
                                                   timeout=plan.timeout, settle=settle)
            boot, code, status = _timed_out(say, follower, plan.timeout) if boot is None else _boot_result(say, boot)
            out = ApplyOutcome(code, status, list(say.log), boot=boot)
        else:
            await trigger()
            say("restarted: a new boot starts")
            out = ApplyOutcome(EXIT_OK, "restarted", list(say.log))
    except _RestartFailed as exc:
        out = ApplyOutcome(exc.error.code, "error", [*say.log, str(exc.error)])
    except ServiceError as exc:
        out = ApplyOutcome(exc.code, "error", [*say.log, str(exc)])
    except asyncio.CancelledError:
        _audit_restart(plan, ApplyOutcome(130, "error", [*say.log, "interrupted"]), clock)
        raise
    _audit_restart(plan, out, clock)
    return out


def _engine_of(host: HostConfig) -> Engine | None:
    name = host.demo_engine if host.demo else host.engine
    try:
        engine = Engine(name)
    except ValueError:
        return None
    return engine if engine in (Engine.SGLANG, Engine.VLLM) else None


def _audit_restart(plan: RestartPlan, out: ApplyOutcome, clock: Callable[[], float]) -> None:
    entry: dict[str, object] = {
        "host": plan.name,
        "target": _target(plan.host),
        "action": "restart",
        "file": None,
        "unit": plan.unit,
        "login": getattr(plan.host, "ssh_user", None) or ("demo" if plan.how == "demo" else None),
        "how": plan.how,
        "commands": [st.command for st in plan.steps if st.command],
        "outcome": out.status,
        "exit": out.code,
        "detail": out.messages[-6:],
    }
    with contextlib.suppress(OSError):
        audit.append(entry, now=clock())


# =============================================================================================
# Audit
# =============================================================================================


def _audit(plan: ApplyPlan, out: ApplyOutcome, clock: Callable[[], float]) -> None:
    entry: dict[str, object] = {
        "host": plan.name,
        "target": _target(plan.host),
        "action": plan.action,
        "file": plan.source.path,
        "kind": plan.source.kind,
        "unit": plan.source.unit,
        "login": getattr(plan.host, "ssh_user", None) or ("demo" if plan.source.demo else None),
        "edits": [str(e) for e in [*plan.edits, *plan.env_edits]] if plan.action == "apply" else [],
        "diff": plan.diff,
        "backup": _saved_copy(plan),
        "restored_from": plan.backup_path if plan.action == "rollback" else None,
        "restart": plan.restart,
        "forced": bool(plan.force and any(r.forceable for r in plan.refusals)),
        "verdict": plan.verdict,
        "outcome": out.status,
        "exit": out.code,
        "rolled_back": out.rolled_back,
        "detail": out.messages[-6:],
    }
    with contextlib.suppress(OSError):
        audit.append(entry, now=clock())


def _target(host: HostConfig) -> str:
    try:
        return str(host.target)
    except Exception:  # pragma: no cover - a config without the property
        return ""


__all__ = [
    "ApplyOutcome",
    "ApplyPlan",
    "BootFollower",
    "DemoService",
    "FlagSource",
    "PlanStep",
    "Refusal",
    "RestartPlan",
    "ServiceError",
    "execute",
    "list_backups",
    "locate_source",
    "outcome_headline",
    "plan_apply",
    "plan_restart",
    "plan_rollback",
    "read_remote_file",
    "restart",
    "restart_unavailable",
    "unified_diff",
]

