"""The pure half of planning: backup names, diffs, which edits are environment edits, what is
refused, the calculator's edits, and what a rollback changes. No I/O: every function here works
on texts and records the async planners (``kvtui.hosts.service.prepare``) read from the host."""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from kvtui import envedit as ev
from kvtui import flags as fl
from kvtui.boot import Boot
from kvtui.engines.events import Engine
from kvtui.exits import EXIT_USAGE
from kvtui.hosts.service.model import BACKUP_MARK, PRE_ROLLBACK, ApplyPlan, Refusal, ServiceError
from kvtui.knobs import CPU_KV_SPACE_KNOB, dump_value, env_knob, unknown_flag

if TYPE_CHECKING:
    from kvtui.config import HostConfig

CPU_KV_SPACE_ENV = CPU_KV_SPACE_KNOB.written(Engine.VLLM)  # VLLM_CPU_KVCACHE_SPACE


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
        if _ENV_NAME_RE.fullmatch(name) or env_knob(name) is not None:
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


def refuse_unknown_flags(plan: ApplyPlan, boots: Sequence[Boot] | None) -> None:
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
    for e in plan.edits:
        if e.value is None:
            continue  # removing: refused already when the file has no such flag
        why = unknown_flag(engine, e.flag, in_file, dump)
        if why is not None:
            plan.refusals.append(Refusal(f"{why}: check the spelling, or pass --force to write it anyway", True))


def readonly_reason(name: str, host: HostConfig, backend_readonly: bool) -> str | None:
    if host.readonly or backend_readonly:
        return f"host '{name}' is readonly (readonly = true): kvtui never edits or restarts it"
    return None


def unit_name(plan: ApplyPlan) -> str | None:
    return plan.source.unit or plan.host.unit


def prediction_edits(plan: ApplyPlan, boot: Boot, modelled: set[str]) -> tuple[dict[str, object], list[str]]:
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
        # the running value under whichever key the boot's release dumps it (cuda_graph_max_bs_decode)
        running = dump_value(engine, occ.canonical, boot.flags)
        if dest not in modelled or dest in mapping or running is None:
            continue
        key, value = running
        if isinstance(occ.value, str) and not fl.same_value(value, occ.value):
            mapping[dest] = occ.value
            drift.append(f"{key}={value!r} (the file says {occ.value})")
    return mapping, drift


def running_dump(boots: Sequence[Boot] | None, engine: Engine) -> frozenset[str] | None:
    """The keys of the running boot's argument dump (the newest boot of this engine that printed
    one), None when no boot is known: they say which spelling of a renamed flag the engine takes."""
    for b in reversed(boots or ()):
        if b.flags and b.engine in (engine, Engine.UNKNOWN):
            return frozenset(b.flags)
    return None


def needs_release(source_text: str, kind: fl.Kind, edits: Sequence[fl.Edit]) -> bool:
    """Whether an edit adds a flag that releases spell differently (SGLang 0.5.23's
    ``--cuda-graph-max-bs-decode``): its spelling then comes from the running boot's dump."""
    try:
        cmd = fl.parse_command(source_text, kind)
    except fl.FlagError:
        return False
    for e in edits:
        spec = fl.lookup(cmd.engine, e.flag)
        if e.value is not None and spec is not None and spec.renamed.get(cmd.engine) and not cmd.find(e.flag):
            return True
    return False


def rollback_changes(
    old: fl.ServerCommand, new: fl.ServerCommand, old_text: str, new_text: str, edits: Sequence[fl.Edit]
) -> list[fl.EditedLine]:
    """What a rollback changes, each with its real line: in the restored text for a flag it sets
    or adds, in the current text for one it removes (was ``(line 0)`` for every one)."""

    def line_of(cmd: fl.ServerCommand, text: str, flag: str) -> int:
        occ = cmd.find(flag)
        return text.count("\n", 0, occ[-1].start) + 1 if occ else cmd.exec_line

    out: list[fl.EditedLine] = []
    for e in edits:
        before, after = old.get(e.flag), new.get(e.flag)
        if e.value is None:
            out.append(fl.EditedLine(f"--{e.flag}", "remove", before, None, line_of(old, old_text, e.flag)))
        else:
            action: Literal["add", "set"] = "add" if before is None else "set"
            out.append(fl.EditedLine(f"--{e.flag}", action, before, after, line_of(new, new_text, e.flag)))
    return out


def env_rollback_changes(
    old_text: str, new_text: str, kind: fl.Kind, env_edits: Sequence[ev.EnvEdit]
) -> list[fl.EditedLine]:
    """What a rollback changes in the environment, each with its line."""
    old_env = ev.effective_env(old_text, kind) if env_edits else {}
    return [
        fl.EditedLine(f"env {e.name}", "remove" if e.value is None else ("set" if e.name in old_env else "add"),
                  old_env.get(e.name), e.value,
                  ev.assignment_line(old_text if e.value is None else new_text, kind, e.name))
        for e in env_edits
    ]


def edits_between(old: fl.ServerCommand, new: fl.ServerCommand) -> list[fl.Edit]:
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


def engine_of(host: HostConfig) -> Engine | None:
    try:
        engine = Engine(host.server_engine)
    except ValueError:
        return None
    return engine if engine in (Engine.SGLANG, Engine.VLLM) else None
