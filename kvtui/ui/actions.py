"""Actions that change a host, as the console reaches them.

Restart (``R``, after a confirm) is the same operation ``kvtui apply --restart`` ends with:

- a demo host: its ``restart()`` (the simulated ``systemctl restart``);
- a host with a ``unit``: ``systemctl restart UNIT`` (``sudo -n`` when configured), the command
  built by ``kvtui.hosts.commands`` like every remote command;
- otherwise the configured ``stop_command`` then ``start_command`` (started detached);
- a host with neither (or a container) cannot be restarted from kvtui: the action is shown
  disabled.

Applying flag edits (``a``) and rolling back (``u``) go through ``kvtui.hosts.service`` (diff,
backup, verify, rollback); the console hands the calculator's edits to ``kvtui apply``.
"""

from __future__ import annotations

from kvtui.config import HostConfig
from kvtui.hosts.backend import BackendError, HostBackend

RESTART_TIMEOUT_S = 120.0


class RestartUnavailable(Exception):
    """This host cannot be restarted from the console; ``str()`` says why."""


def _is_demo(backend: HostBackend | None) -> bool:
    from kvtui.hosts.demo import DemoBackend

    return isinstance(backend, DemoBackend)


def restart_available(backend: HostBackend | None, host: HostConfig) -> bool:
    if host.readonly:
        return False
    if host.demo:
        return backend is None or _is_demo(backend)
    return bool(host.unit) or bool(host.start_command and host.stop_command)


async def restart_host(backend: HostBackend | None, host: HostConfig) -> str:
    """Restart the server; returns a one-line confirmation. Raises ``RestartUnavailable`` or
    ``BackendError`` with a user-facing message."""
    if backend is None:
        raise RestartUnavailable("not connected yet")
    name = backend.name
    if host.readonly:
        raise RestartUnavailable(f"{name} is readonly: kvtui never restarts it")
    if _is_demo(backend):
        backend.restart()  # type: ignore[attr-defined]
        return f"{name}: restarted — a new boot starts; the log marks it"
    from kvtui.hosts import commands as cmds

    sudo = host.sudo
    if host.unit:
        command = cmds.restart_unit(host.unit, sudo=sudo)
        result = await backend.run(command, timeout=RESTART_TIMEOUT_S)
        if not result.ok:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise BackendError(
                f"{name}: systemctl restart {host.unit} failed (exit {result.exit_status})"
                + (f": {detail[-1]}" if detail else "")
            )
        return f"{name}: systemctl restart {host.unit} done — following the new boot"
    if host.start_command and host.stop_command:
        stop = await backend.run(cmds.shell(host.stop_command), timeout=RESTART_TIMEOUT_S)
        start = await backend.run(cmds.detached(host.start_command), timeout=RESTART_TIMEOUT_S)
        if not start.ok:
            raise BackendError(f"{name}: start_command failed (exit {start.exit_status}): {start.stderr.strip()}")
        note = "" if stop.ok else f" (stop_command exited {stop.exit_status})"
        return f"{name}: stopped and started again{note} — following the new boot"
    raise RestartUnavailable(
        f"{name} has no unit and no start_command/stop_command in hosts.toml: kvtui cannot restart it"
    )
