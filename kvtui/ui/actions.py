"""Actions that change a host, as the console reaches them.

Restart goes through the service layer (``kvtui.hosts.service``) when it exists; until then a
demo host is restarted directly through its own ``restart()`` (it is a simulation: there is no
unit file to guard). Apply/rollback (``a``/``u``) come with the service layer.
"""

from __future__ import annotations

from kvtui.hosts.backend import HostBackend


class RestartUnavailable(Exception):
    """This host cannot be restarted from the console (yet); ``str()`` says why."""


def restart_available(backend: HostBackend | None) -> bool:
    return backend is not None and callable(getattr(backend, "restart", None))


async def restart_host(backend: HostBackend | None) -> str:
    """Restart the server; returns a one-line confirmation."""
    if backend is None:
        raise RestartUnavailable("not connected yet")
    restart = getattr(backend, "restart", None)
    if not callable(restart):
        raise RestartUnavailable(
            f"{backend.name}: restarting from the console needs the service layer; use `kvtui apply --restart`"
        )
    result = restart()
    if hasattr(result, "__await__"):
        await result
    return f"{backend.name}: restart requested — a new boot starts; the log marks it"
