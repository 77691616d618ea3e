"""The one place that turns a ``[hosts.NAME]`` table into a backend (each imported lazily, so
``kvtui connect demo`` never loads asyncssh and ``kvtui wait sshhost`` never loads the simulator)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvtui.hosts.backend import BackendError, HostBackend

if TYPE_CHECKING:
    from kvtui.config import HostConfig


def backend_kind(host: HostConfig) -> str:
    """``"demo"``, ``"local"`` or ``"ssh"`` (config validation guarantees exactly one)."""
    if getattr(host, "demo", False):
        return "demo"
    if getattr(host, "local", False):
        return "local"
    if getattr(host, "ssh", None):
        return "ssh"
    raise BackendError("host has none of ssh, local = true, demo = true")


def make_backend(name: str, host: HostConfig, *, clock: Callable[[], float] | None = None) -> HostBackend:
    """The backend for one configured host. ``clock`` (seconds, like ``time.time``) is passed on
    when given, so tests and the demo host run on an injected time."""
    try:
        kind = backend_kind(host)
    except BackendError as exc:
        raise BackendError(f"host '{name}': {exc}") from None
    kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
    if kind == "demo":
        from kvtui.hosts.demo import DemoBackend

        return DemoBackend(name, host, **kwargs)
    if kind == "local":
        from kvtui.hosts.local import LocalBackend

        return LocalBackend(name, host, **kwargs)
    from kvtui.hosts.ssh import SshBackend

    return SshBackend(name, host, **kwargs)
