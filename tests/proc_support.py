"""Events about processes on this machine, for tests that would otherwise sleep and hope: who reads
a log file and how far (``/proc/PID/fd`` and ``fdinfo``), and a process group's end (pidfds).

A follower of a log file — ``kvtui wait`` on a local host, ``tail -F`` on a host reached over SSH
(the test sshd runs on this machine) — holds the file open for reading; the server only appends to
it. ``wait --next`` takes the file's size as the next boot's start when it begins to follow: a test
that starts the next server must wait until the follower reads at the end of the file, however
long a loaded machine takes to start Python or connect over SSH.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FOLLOW_TIMEOUT = 120.0  # real seconds for a follower to start (Python, SSH) on a loaded machine


def log_readers(path: Path) -> dict[int, int]:
    """{pid: bytes read} of the processes that hold ``path`` open for reading (the file
    position of their descriptor; the largest where a process has several)."""
    target = str(path)
    out: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue  # gone meanwhile, or not ours to read
        for fd in fds:
            # one descriptor at a time: one closed between the listing and its readlink (a busy
            # process, such as this test's own, opens and closes files all the time) must not
            # hide the process's other descriptors
            try:
                if os.readlink(fd) != target:
                    continue
                info = dict(line.split(":", 1) for line in (proc / "fdinfo" / fd.name).read_text().splitlines()
                            if ":" in line)
                if int(info["flags"].strip(), 8) & os.O_ACCMODE == os.O_RDONLY:
                    pid = int(proc.name)
                    out[pid] = max(out.get(pid, 0), int(info["pos"].strip()))
            except (OSError, KeyError, ValueError):
                continue  # closed meanwhile, or not readable
    return out


def _size(path: Path) -> int:
    return path.stat().st_size


async def followers_read(path: Path, offset: int | None = None, count: int = 1,
                         timeout: float = FOLLOW_TIMEOUT, *, task: asyncio.Future[Any] | None = None,
                         said: Callable[[], str] | None = None) -> None:
    """Wait until ``count`` processes read ``path`` up to byte ``offset`` (by default its size
    now: they follow from its end). ``task``: the follower's own task (an in-process ``kvtui
    wait``): when it ends first, nothing will ever read there — fail at once with what it
    ``said`` instead of waiting out the timeout."""
    if offset is None:
        offset = _size(path)
    deadline = time.monotonic() + timeout
    while sum(pos >= offset for pos in log_readers(path).values()) < count:
        if task is not None and task.done():
            raise AssertionError(f"the follower ended before it read {path} to byte {offset}: "
                                 f"{task.result() if not task.cancelled() and task.exception() is None else task}"
                                 f"\n{said() if said is not None else ''}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} reader(s) of {path} did not reach byte {offset} within {timeout:.0f} s "
                                 f"(size now {_size(path)}): {log_readers(path)}"
                                 f"\n{said() if said is not None else ''}")
        await asyncio.sleep(0.05)


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) of process group ``pgid``."""
    out: list[int] = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            out.append(int(d.name))
    return out


def wait_group_gone(pgid: int, timeout: float) -> None:
    """Wait until process group ``pgid`` has no live process (each member's exit is an event on
    its pidfd), or ``timeout`` seconds pass (the caller asserts what is left). A SIGKILLed process
    lives on while the kernel frees its memory: a while, for a large one on a loaded machine."""
    deadline = time.monotonic() + timeout
    while (members := group_members(pgid)) and (left := deadline - time.monotonic()) > 0:
        fds: list[int] = []
        try:
            for member in members:
                with contextlib.suppress(OSError):  # already gone
                    fds.append(os.pidfd_open(member))
            if fds:
                poller = select.poll()
                for fd in fds:
                    poller.register(fd, select.POLLIN)
                poller.poll(min(left, 1.0) * 1000)  # one exits (a zombie leaves the list: scan again)
        finally:
            for fd in fds:
                os.close(fd)
