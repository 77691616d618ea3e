"""A host's orphaned engine processes (issue 24): its process listing, the server's PIDs and its
GPU processes, classified by ``kvtui.engines.orphans``.

SSH and local hosts run ``ps -eo pid=,ppid=,sid=,rss=,args=`` (and, for a CPU host's server
session, read the pid file the host tracks); the demo host simulates its listing
(``DemoBackend.process_rows``); kube and bundle hosts have none here (a container's processes end
with it), so they never have orphans.
"""

from __future__ import annotations

import shlex

from kvtui.engines.orphans import PS_COMMAND, Orphan, ProcRow, find_orphans, parse_ps
from kvtui.gpu import GpuProcess
from kvtui.hosts.backend import BackendError, HostBackend
from kvtui.hosts.shellcmd import server_pid_file


async def process_rows(backend: HostBackend) -> list[ProcRow] | None:
    """The host's processes, or None where kvtui does not list them (kube, bundle) or cannot."""
    simulated = getattr(backend, "process_rows", None)
    if simulated is not None:
        rows: list[ProcRow] = await simulated()
        return rows
    if not getattr(backend, "lists_processes", False):  # SSH and local hosts
        return None
    try:
        res = await backend.run(PS_COMMAND, timeout=30)
    except (BackendError, OSError):
        return None
    return parse_ps(res.stdout) if res.ok else None


async def host_orphans(
    backend: HostBackend, gpu: list[GpuProcess] | None = None, servers: set[int] | None = None
) -> list[Orphan]:
    """The orphaned engine processes on this host (empty where it cannot tell). ``gpu`` /
    ``servers``: the GPU processes / the server's PIDs when the caller read them already."""
    rows = await process_rows(backend)
    if not rows:
        return []
    if servers is None:
        try:
            servers = await backend.server_pids()
        except (BackendError, OSError):
            servers = set()
    if gpu is None:
        try:
            gpu = await backend.gpu_processes()
        except (BackendError, OSError):
            gpu = []
    session = None if gpu else await server_session(backend)
    return find_orphans(rows, servers, gpu, session)


async def server_session(backend: HostBackend) -> int | None:
    """The PID the host's pid file names, alive or not (a server started with ``setsid`` leads
    its session: its engine processes keep that session id after it is gone); None without one."""
    host = getattr(backend, "host", None)
    if host is None or not getattr(backend, "lists_processes", False):
        return None
    found = server_pid_file(getattr(host, "pid_file", None), getattr(host, "start_command", None),
                            getattr(host, "stop_command", None))
    if found is None:
        return None
    path = found[0]
    path = "$HOME" + shlex.quote(path[1:]) if path.startswith("~") else shlex.quote(path)
    try:
        res = await backend.run(f"head -c 32 {path}", timeout=30)
    except (BackendError, OSError):
        return None
    text = res.stdout.strip()
    return int(text) if res.ok and text.isdigit() else None
