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
from pathlib import Path

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
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) != target:
                    continue
                info = dict(line.split(":", 1) for line in (proc / "fdinfo" / fd.name).read_text().splitlines()
                            if ":" in line)
                if int(info["flags"].strip(), 8) & os.O_ACCMODE == os.O_RDONLY:
                    pid = int(proc.name)
                    out[pid] = max(out.get(pid, 0), int(info["pos"].strip()))
        except (OSError, KeyError, ValueError):
            continue  # gone meanwhile, or not readable
    return out


def _size(path: Path) -> int:
    return path.stat().st_size


async def followers_read(path: Path, offset: int | None = None, count: int = 1,
                         timeout: float = FOLLOW_TIMEOUT) -> None:
    """Wait until ``count`` processes read ``path`` up to byte ``offset`` (by default its size
    now: they follow from its end)."""
    if offset is None:
        offset = _size(path)
    deadline = time.monotonic() + timeout
    while sum(pos >= offset for pos in log_readers(path).values()) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} reader(s) of {path} did not reach byte {offset} within {timeout:.0f} s: "
                                 f"{log_readers(path)}")
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
