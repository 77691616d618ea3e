"""The local backend's processes: children that die with kvtui (``PR_SET_PDEATHSIG``) and are
stopped with a grace period, what a pid file names (alive, its age), and a unit's PIDs (its main
PID, its cgroup's, their descendants) read from /proc and /sys/fs/cgroup."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from kvtui.liveness import proc_age, proc_state, read_pid


def pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


PREEXEC: Callable[[], None] | None = pdeathsig if sys.platform.startswith("linux") else None


async def stop_process(proc: asyncio.subprocess.Process, grace: float = 2.0) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        async with asyncio.timeout(grace):
            await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def pid_reading(pid_file: Path) -> tuple[int | None, bool, float | None]:
    """(the pid the file names, whether that process runs — a zombie does not —, its age in s)."""
    try:
        pid = read_pid(pid_file.read_text(errors="replace")[:64])
    except OSError:
        return None, False, None
    if pid is None:
        return None, False, None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
        uptime = Path("/proc/uptime").read_text()
    except OSError:
        return pid, False, None
    state = proc_state(stat)
    return pid, state is not None and state not in ("Z", "X", "x"), proc_age(stat, uptime, _CLOCK_TICKS)


def pids_of(main_pid: str, cgroup: str) -> set[int]:
    pids: set[int] = set()
    if main_pid.strip().isdigit() and int(main_pid) > 0:
        pids.add(int(main_pid))
    if cgroup.startswith("/"):
        root = Path("/sys/fs/cgroup") / cgroup.lstrip("/")
        for procs in _walk(root, "cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in procs.read_text().split() if x.isdigit())
    if pids:
        pids |= descendants(pids)
    return pids


def _walk(root: Path, name: str) -> Iterable[Path]:
    if not root.is_dir():
        return []
    return (Path(d) / name for d, _, files in os.walk(root) if name in files)


def descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    out: set[int] = set()
    todo = list(roots)
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out
