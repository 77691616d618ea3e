"""``ShellOps``: the guarded service on a host that runs shell commands (SSH, local). Every
command is built by ``kvtui.hosts.shellcmd`` and shown in the plan before it runs: the file is
found through ``systemctl show`` (the drop-in that sets ExecStart, else the fragment; a script it
runs), read with its hash checked on the host, copied aside, written atomically (the host checks
the content's hash before the rename), re-read, reloaded into systemd and checked there; the
server is restarted with ``systemctl restart`` or stop_command / a wait for its GPU memory /
start_command detached."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kvtui import envedit as ev
from kvtui import flags as fl
from kvtui import fmt
from kvtui.config import ServerHost
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_REFUSED
from kvtui.fmt import one_line
from kvtui.hosts import shellcmd as cmds
from kvtui.hosts.backend import BackendError, CommandResult, HostBackend
from kvtui.hosts.service.model import (
    BACKUP_MARK,
    CMD_TIMEOUT_S,
    DEFAULT_STOP_WAIT_S,
    FOLLOW_SETTLE_S,
    PRE_ROLLBACK,
    ApplyPlan,
    FlagSource,
    PlanStep,
    Refusal,
    RestartCall,
    RestartHow,
    RestartPlan,
    Run,
    ServiceError,
)
from kvtui.hosts.service.plan import backup_sort_key, sha256_text, unit_name
from kvtui.hosts.service.verify import check_execstart, check_systemd_env, check_text

if TYPE_CHECKING:
    from kvtui.config import HostConfig


def _server(host: HostConfig) -> ServerHost:
    """The host as a server host (SSH or local): the only kind shell commands change."""
    if not isinstance(host, ServerHost):
        raise ServiceError(f"a {host.kind} host is not changed through shell commands", EXIT_REFUSED)
    return host


def _sudo(host: HostConfig) -> bool:
    return isinstance(host, ServerHost) and host.sudo


def _parse_props(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def _first_word(r: CommandResult) -> str:
    return (r.stdout.split() or [""])[0]


class ShellOps:
    """The ``HostOps`` of a backend that runs shell commands (``run``)."""

    readonly = False
    login: str | None = None
    settle_s = FOLLOW_SETTLE_S

    def __init__(self, backend: HostBackend) -> None:
        self._backend = backend

    @property
    def backend(self) -> HostBackend:
        return self._backend

    async def _run(self, command: str, *, input: bytes | None = None,
                   timeout: float | None = CMD_TIMEOUT_S) -> CommandResult:
        try:
            return await self._backend.run(command, input=input, timeout=timeout)
        except BackendError as exc:
            raise ServiceError(f"connection to the host failed: {exc}", EXIT_INPUT) from exc

    # -- reading ---------------------------------------------------------------------------------

    async def read_file(self, path: str, *, sudo: bool = False) -> tuple[str, str]:
        """(text, sha256) of a file on the host, read exactly (the host's own hash must match)."""
        for _attempt in range(2):
            h = await self._run(cmds.file_sha256(path, sudo=sudo))
            if not h.ok:
                raise ServiceError(f"cannot read {path}: {one_line(h.stderr or h.stdout) or f'exit {h.exit_status}'}")
            remote = _first_word(h)
            if not re.fullmatch(r"[0-9a-f]{64}", remote):
                raise ServiceError(f"cannot hash {path}: sha256sum said {one_line(h.stdout)!r}")
            r = await self._run(cmds.read_file(path, sudo=sudo))
            if not r.ok:
                raise ServiceError(f"cannot read {path}: {one_line(r.stderr) or f'exit {r.exit_status}'}")
            if sha256_text(r.stdout) == remote:
                return r.stdout, remote
        raise ServiceError(
            f"{path} cannot be read exactly (it changed while being read, or holds bytes that are not UTF-8 text); "
            "kvtui edits only files it can write back byte for byte"
        )

    async def locate(self, name: str, config: HostConfig) -> FlagSource:
        host = _server(config)
        sudo = host.sudo
        if host.unit:
            return await self._locate_unit(host, host.unit, sudo)
        if host.launch_script:
            text, sha = await self.read_file(host.launch_script, sudo=sudo)
            return FlagSource("script", host.launch_script, text, sha, via=("launch_script in hosts.toml",))
        if host.container:
            raise ServiceError(
                f"host '{name}' runs the server in container {host.container!r}: its flags come from the container's "
                "definition, which kvtui does not edit (containers are read-only); set unit or launch_script to edit",
                EXIT_REFUSED,
            )
        raise ServiceError(
            f"host '{name}': kvtui does not know where the server's flags live; set unit or launch_script in "
            "hosts.toml",
            EXIT_INPUT,
        )

    async def _locate_unit(self, host: ServerHost, unit: str, sudo: bool) -> FlagSource:
        show = await self._run(cmds.systemctl_show(unit, ["FragmentPath", "DropInPaths"], sudo=sudo))
        if not show.ok:
            raise ServiceError(f"systemctl show {unit} failed: {one_line(show.stderr) or f'exit {show.exit_status}'}")
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
            text, sha = await self.read_file(p, sudo=sudo)
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
            stext, ssha = await self.read_file(script, sudo=sudo)
            how = "launch_script in hosts.toml" if host.launch_script else f"ExecStart= of {path} runs it"
            return FlagSource("script", script, stext, ssha, unit=unit, via=(*via, how), files=tuple(paths))
        except fl.FlagError as exc:
            raise ServiceError(f"{path}: {exc}", EXIT_INPUT) from exc
        return FlagSource("unit", path, text, sha, unit=unit, via=tuple(via), files=tuple(paths))

    async def list_backups(self, host: HostConfig, source: FlagSource) -> list[str]:
        r = await self._run(cmds.list_backups(source.path, sudo=_sudo(host)))
        if not r.ok:
            raise ServiceError(f"cannot list the backups of {source.path}: {one_line(r.stderr)}")
        prefix = source.path + BACKUP_MARK
        found = [ln for ln in r.stdout.splitlines() if ln.startswith(prefix) and not ln.endswith(PRE_ROLLBACK)]
        return sorted(found, key=backup_sort_key)

    def taken_names(self, source: FlagSource) -> list[str]:
        return []  # the copy command refuses to overwrite instead

    async def read_copy(self, host: HostConfig, path: str) -> str:
        text, _ = await self.read_file(path, sudo=_sudo(host))
        return text

    async def copy_sha256(self, host: HostConfig, path: str) -> str:
        r = await self._run(cmds.file_sha256(path, sudo=_sudo(host)))
        return _first_word(r) if r.ok else ""

    # -- the plan's steps --------------------------------------------------------------------------

    def edit_steps(self, plan: ApplyPlan) -> tuple[list[PlanStep], dict[str, str]]:
        src, sudo = plan.source, _sudo(plan.host)
        steps: list[PlanStep] = []
        c: dict[str, str] = {}
        c["hash"] = cmds.file_sha256(src.path, sudo=sudo)
        save_to = plan.pre_rollback_path if plan.action == "rollback" else plan.backup_path
        assert save_to is not None
        c["backup"] = cmds.backup_copy(src.path, save_to, sudo=sudo)
        c["hash_backup"] = cmds.file_sha256(save_to, sudo=sudo)
        c["write"] = cmds.write_file_atomic(
            src.path, sudo=sudo, expect_sha256=src.sha256, content_sha256=sha256_text(plan.new_text)
        )
        c["read"] = cmds.read_file(src.path, sudo=sudo)
        steps.append(PlanStep(f"check {src.path} is unchanged since it was read (sha256 {src.sha256[:12]}…)",
                              c["hash"]))
        steps.append(PlanStep(f"back up {src.path} to {save_to}", c["backup"]))
        steps.append(PlanStep("check the backup equals the file that was read", c["hash_backup"]))
        steps.append(PlanStep(f"write {src.path} atomically (new text on stdin; its hash is checked before the "
                              "rename)", c["write"]))
        steps.append(PlanStep(f"re-read {src.path} and check every edited flag", c["read"]))
        unit = unit_name(plan)
        if unit:
            self._unit_steps(plan, unit, steps, c)
        elif plan.restart:
            self._command_steps(plan, steps, c)
        if plan.env_edits and plan.restart:
            steps.append(PlanStep("read the new server process's environment (/proc/PID/environ) and check the "
                                  "values"))
        return steps, c

    @staticmethod
    def _unit_steps(plan: ApplyPlan, unit: str, steps: list[PlanStep], c: dict[str, str]) -> None:
        sudo = _sudo(plan.host)
        c["reload"] = cmds.daemon_reload(sudo=sudo)
        c["show"] = cmds.systemctl_show(unit, ["ExecStart"], sudo=sudo)
        steps.append(PlanStep("reload systemd's view of the unit", c["reload"]))
        steps.append(PlanStep("check the ExecStart systemd will run carries the new flags", c["show"]))
        if plan.env_edits and plan.source.kind == "unit":
            c["show_env"] = cmds.systemctl_show(unit, ["Environment"], sudo=sudo)
            steps.append(PlanStep("check the environment systemd will give it carries the new values",
                                  c["show_env"]))
        if plan.restart:
            c["restart"] = cmds.restart_unit(unit, sudo=sudo)
            steps.append(PlanStep(f"restart {unit} and follow the new boot", c["restart"]))

    @staticmethod
    def _command_steps(plan: ApplyPlan, steps: list[PlanStep], c: dict[str, str]) -> None:
        host = _server(plan.host)
        if not (host.stop_command and host.start_command):
            plan.refusals.append(Refusal(
                f"host '{plan.name}' has no unit and no start_command/stop_command: kvtui can write the script "
                "but cannot restart the server (drop --restart, or configure both commands)", False))
            return
        steps.extend(_stop_start_steps(host, c))

    # -- writing -----------------------------------------------------------------------------------

    async def write(self, run: Run, saved: str) -> None:
        plan, c, say = run.plan, run.plan.cmd, run.say
        src = plan.source
        say(f"checking {src.path} is unchanged since it was read")
        h = await self._run(c["hash"])
        cur = _first_word(h) if h.ok else ""
        if cur != src.sha256:
            detail = "it is gone or unreadable: " + one_line(h.stderr) if not h.ok else "its hash differs"
            raise ServiceError(
                f"{src.path} changed since it was read ({detail}); nothing was written; plan again to see the new "
                "diff",
                EXIT_REFUSED,
            )
        say(f"backing up to {saved}")
        b = await self._run(c["backup"])
        if not b.ok:
            why = "a file by that name exists" if b.exit_status == cmds.EXIT_EXISTS else one_line(b.stderr)
            raise ServiceError(f"cannot back up {src.path} to {saved}: {why}; nothing was written", EXIT_INPUT)
        hb = await self._run(c["hash_backup"])
        if not hb.ok or _first_word(hb) != src.sha256:
            raise ServiceError(
                f"the backup {saved} does not equal the file that was read ({src.path} changed meanwhile?); "
                "nothing was written",
                EXIT_REFUSED,
            )
        say(f"writing {src.path}")
        w = await self._run(c["write"], input=plan.new_text.encode("utf-8"))
        if not w.ok:
            raise _write_error(src.path, saved, w)
        problems = await self._check_written(run)
        if problems:
            await self.restore(run, saved, "the re-read file " + "; ".join(problems))
            raise ServiceError(
                f"{src.path} did not read back as written ({'; '.join(problems)}); restored from {saved}", EXIT_INPUT
            )
        if unit_name(plan):
            await self._reload_and_check(run, saved)

    async def _check_written(self, run: Run) -> list[str]:
        plan = run.plan
        r = await self._run(plan.cmd["read"])
        if not r.ok:
            return [f"could not be read: {one_line(r.stderr)}"]
        problems = check_text(plan, r.stdout)
        if r.stdout != plan.new_text:
            return problems or ["differs from the text that was sent"]
        return problems

    async def restore(self, run: Run, saved: str, why: str) -> None:
        plan = run.plan
        run.say(f"restoring {plan.source.path} from {saved}: {why}")
        sudo = _sudo(plan.host)
        try:
            text, _sha = await self.read_file(saved, sudo=sudo)
            w = await self._run(cmds.write_file_atomic(plan.source.path, sudo=sudo,
                                                       content_sha256=sha256_text(text)), input=text.encode())
            if not w.ok:
                raise ServiceError(f"restoring failed: {one_line(w.stderr)}")
            if unit_name(plan) and plan.source.kind == "unit":
                await self._run(cmds.daemon_reload(sudo=sudo))
        except ServiceError as exc:
            raise ServiceError(
                f"{why}, and restoring {plan.source.path} from {saved} failed too: {exc}; restore it by hand "
                f"(cp -p {saved} {plan.source.path})",
                EXIT_FAILED,
            ) from exc

    async def _reload_and_check(self, run: Run, saved: str) -> None:
        plan, say = run.plan, run.say
        say("systemctl daemon-reload")
        r = await self._run(plan.cmd["reload"])
        if not r.ok:
            await self.restore(run, saved, f"daemon-reload failed ({one_line(r.stderr)})")
            raise ServiceError(f"systemctl daemon-reload failed: {one_line(r.stderr)}; restored from {saved}",
                               EXIT_FAILED)
        if plan.source.kind != "unit":
            return  # the flags live in a script the unit runs: systemd does not see them
        s = await self._run(plan.cmd["show"])
        problems = check_execstart(plan, s.stdout if s.ok else "")
        if plan.env_edits and "show_env" in plan.cmd and not problems:
            e = await self._run(plan.cmd["show_env"])
            problems = check_systemd_env(plan, e.stdout if e.ok else "", s.stdout if s.ok else "")
        if problems:
            await self.restore(run, saved, "systemd does not run the edited command: " + "; ".join(problems))
            raise ServiceError(
                "after daemon-reload, systemd's ExecStart does not carry the edit (" + "; ".join(problems)
                + f"); another unit file may override it; restored from {saved}",
                EXIT_FAILED,
            )
        say("systemd's ExecStart carries the new flags" + (" and its environment the new values"
                                                            if plan.env_edits else ""))

    # -- restarting --------------------------------------------------------------------------------

    def restart_unavailable(self, name: str, host: HostConfig) -> str | None:
        if not isinstance(host, ServerHost):
            return f"host '{name}' is not a demo backend"
        return config_restart_unavailable(name, host)

    def restart_plan(self, plan: RestartPlan) -> None:
        host = _server(plan.host)
        if host.unit:
            plan.how = "unit"
            plan.cmd["restart"] = cmds.restart_unit(host.unit, sudo=host.sudo)
            plan.steps.append(PlanStep(f"restart {host.unit}", plan.cmd["restart"]))
        else:
            plan.how = "commands"
            plan.steps.extend(_stop_start_steps(host, plan.cmd))

    def restart_how(self, cmd: Mapping[str, str]) -> RestartHow:
        return "unit" if "restart" in cmd else "commands"

    async def issue_restart(self, call: RestartCall) -> None:
        """``systemctl restart UNIT``, or stop_command, a bounded wait for the old server's GPU
        memory, and start_command detached. Raises ``ServiceError``."""
        say, cmd = call.say, call.cmd
        if call.how == "unit":
            say(f"systemctl restart {call.unit}")
            r = await self._run(cmd["restart"], timeout=max(CMD_TIMEOUT_S, call.timeout))
            if not r.ok:
                raise ServiceError(f"systemctl restart {call.unit} failed: {one_line(r.stderr) or r.exit_status}",
                                   EXIT_FAILED)
            return
        old = await self._safe_pids()
        call.stopped.update(old)
        say("stopping the server (stop_command)")
        r = await self._run(cmd["stop"])
        if not r.ok:
            say(f"stop_command exited {r.exit_status}: {one_line(r.stderr)}")
        await self._wait_gpu_release(call, old)
        say("starting the server detached (start_command)")
        st = await self._run(cmd["start"])
        if not st.ok:
            raise ServiceError(f"start_command failed (exit {st.exit_status}): {one_line(st.stderr)}", EXIT_FAILED)

    async def _safe_pids(self) -> set[int]:
        try:
            return set(await self._backend.server_pids())
        except BackendError:
            return set()

    async def _wait_gpu_release(self, call: RestartCall, old: set[int]) -> None:
        say, clock, limit = call.say, call.clock, call.stop_wait_s
        if not old:
            say("the server's PIDs are unknown: not waiting for its GPU memory")
            return
        pids = ", ".join(map(str, sorted(old)))
        say(f"waiting for PIDs {pids} to release their GPU memory")
        began = last = clock()
        deadline = began + limit
        while True:
            try:
                procs = await self._backend.gpu_processes()
            except BackendError as exc:
                say(f"cannot read GPU processes ({exc}); watching the PIDs only")
                procs = []
            r = await self._run(cmds.pids_alive(old))
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
            if call.beat is not None and clock() - last >= fmt.HEARTBEAT_S:
                last = clock()
                call.beat(f"… still waiting after {fmt.duration(last - began)}: PIDs "
                          f"{', '.join(map(str, sorted(holding)))} still hold GPU memory (at most {limit:g} s)")
            await call.sleep(1.0)

    async def process_env(self, run: Run) -> list[str]:
        """The environment the new server process started with (``/proc/PID/environ``, readable by
        the same user)."""
        plan, say = run.plan, run.say
        try:
            pids = sorted(await self._backend.server_pids())
        except BackendError:
            pids = []
        if not pids:
            say("note: the new server's process is unknown (no unit, container or pid file): its environment "
                "was checked in the file only")
            return []
        r = await self._run(cmds.proc_environ(pids[:64], sudo=_sudo(plan.host)))
        envs = cmds.parse_proc_environ(r.stdout) if r.ok else {}
        if not envs:
            say(f"note: the environment of the new server process (pid {pids[0]}) is not readable by this login: "
                "it was checked in the file only")
            return []
        # the server's main process (its workers inherit its environment): the root of the tree
        pid = cmds.main_process(envs, cmds.parse_proc_parents(r.stdout)) or min(envs)
        found = ev.check_environment(envs[pid], plan.env_edits, what=f"the new server process (pid {pid})")
        if not found:
            shown = ", ".join(f"{e.name}={e.value}" if e.value is not None else f"no {e.name}"
                              for e in plan.env_edits)
            say(f"the new server process (pid {pid}) runs with {shown} (/proc/{pid}/environ)")
        return found


def _write_error(path: str, saved: str, w: CommandResult) -> ServiceError:
    if w.exit_status == cmds.EXIT_CHANGED:
        return ServiceError(
            f"{path} changed between the backup and the write; nothing was written (backup {saved})", EXIT_REFUSED)
    if w.exit_status == cmds.EXIT_INCOMPLETE:
        return ServiceError(
            f"the new text of {path} arrived incomplete; the file was not replaced (backup {saved})", EXIT_INPUT)
    return ServiceError(
        f"cannot write {path}: {one_line(w.stderr) or f'exit {w.exit_status}'}; the file is unchanged (backup "
        f"{saved})",
        EXIT_INPUT,
    )


def _stop_start_steps(host: ServerHost, c: dict[str, str]) -> list[PlanStep]:
    """stop_command, the wait for the GPU memory, start_command detached (both commands set)."""
    assert host.stop_command
    assert host.start_command
    c["stop"] = cmds.shell(host.stop_command)
    c["start"] = cmds.detached(host.start_command, log_file=host.log_file)
    return [
        PlanStep("stop the server (stop_command)", c["stop"]),
        PlanStep(f"wait (at most {DEFAULT_STOP_WAIT_S:.0f} s) until its processes have released their GPU memory"),
        PlanStep("start it detached from this session (start_command)", c["start"]),
    ]


def config_restart_unavailable(name: str, host: ServerHost) -> str | None:
    """Why kvtui cannot restart this server host's server, from its configuration."""
    if host.unit or (host.stop_command and host.start_command):
        return None
    if host.container:
        return (f"host '{name}' runs the server in container {host.container!r}: kvtui does not restart containers "
                "(set unit, or start_command and stop_command, in hosts.toml)")
    return f"host '{name}' has no unit and no start_command/stop_command in hosts.toml: kvtui cannot restart it"
