"""The one place that turns a ``[hosts.NAME]`` table into a backend (each imported lazily, so
``kvtui connect demo`` never loads asyncssh and ``kvtui wait sshhost`` never loads the simulator)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvtui.config import DemoHost, KubeHost, LocalHost
from kvtui.kube_ref import parse_target
from kvtui.lazy import lazy_module

if TYPE_CHECKING:
    from kvtui.config import HostConfig
    from kvtui.hosts import local, ssh
    from kvtui.hosts.backend import HostBackend
    from kvtui.hosts.kube import backend as kube_backend
    from kvtui.sim import backend as sim_backend
else:
    sim_backend = lazy_module("kvtui.sim.backend")  # lazy: one backend kind a host: +236 ms CPU
    kube_backend = lazy_module("kvtui.hosts.kube.backend")  # lazy: as above: +251 ms CPU
    local = lazy_module("kvtui.hosts.local")  # lazy: as above: +267 ms CPU
    ssh = lazy_module("kvtui.hosts.ssh")  # lazy: as above (asyncssh): +360 ms CPU


def make_backend(name: str, host: HostConfig, *, clock: Callable[[], float] | None = None) -> HostBackend:
    """The backend for one configured host (its kind: ``DemoHost``, ``LocalHost``, ``KubeHost``, ``SshHost``).
    ``clock`` (seconds, like ``time.time``) is passed on when given, so tests and the demo host run
    on an injected time."""
    kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
    if isinstance(host, DemoHost):
        return sim_backend.DemoBackend(name, host, **kwargs)
    if isinstance(host, KubeHost):
        ref = parse_target(host.kube, selector=host.selector, container=host.container)
        return kube_backend.KubeBackend(name, ref, gpus=host.gpus, gpu_metrics_url=host.gpu_metrics_url, **kwargs)
    if isinstance(host, LocalHost):
        return local.LocalBackend(name, host, **kwargs)
    return ssh.SshBackend(name, host, **kwargs)
