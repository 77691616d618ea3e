"""The one place that turns a ``[hosts.NAME]`` table into a backend (each imported lazily, so
``kvtui connect demo`` never loads asyncssh and ``kvtui wait sshhost`` never loads the simulator)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvtui.config import DemoHost, KubeHost, LocalHost
from kvtui.kube_ref import parse_target

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.hosts.backend import HostBackend


def make_backend(name: str, host: HostConfig, *, clock: Callable[[], float] | None = None) -> HostBackend:
    """The backend for one configured host (its kind: ``DemoHost``, ``LocalHost``, ``KubeHost``, ``SshHost``).
    ``clock`` (seconds, like ``time.time``) is passed on when given, so tests and the demo host run
    on an injected time."""
    kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
    if isinstance(host, DemoHost):
        from kvtui.sim.backend import DemoBackend  # lazy: the host's kind only; all four: 220 → 910 ms CPU

        return DemoBackend(name, host, **kwargs)
    if isinstance(host, KubeHost):
        from kvtui.hosts.kube.backend import KubeBackend  # lazy: as above

        ref = parse_target(host.kube, selector=host.selector, container=host.container)
        return KubeBackend(name, ref, gpus=host.gpus, gpu_metrics_url=host.gpu_metrics_url, **kwargs)
    if isinstance(host, LocalHost):
        from kvtui.hosts.local import LocalBackend  # lazy: as above

        return LocalBackend(name, host, **kwargs)
    from kvtui.hosts.ssh import SshBackend  # lazy: as above (asyncssh alone ~150 ms)

    return SshBackend(name, host, **kwargs)
