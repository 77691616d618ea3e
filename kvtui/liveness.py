"""Liveness of the server process: when a host backend sees the server gone, it says so in the
log stream itself, as one record of kvtui's own (pure core: no I/O).

Why in the stream: every reader of a host's log (the monitor behind the console and ``kvtui
wait``, the apply/restart follower, ``calc --host``) already feeds it through ``LineParser`` ->
``BootTracker``; a record there reaches all of them, in order with the server's last lines, and
lands in the spool (a resumed spool replays it).

- ``exit_record(...)``: the record a backend yields (``ident`` ``EXIT_IDENT``, text ``kvtui: the
  server process exited (pid 123)``); ``parse_exit(text)`` reads it back into a ``ServerExit``
  (``LineParser`` does, for records with that ident only: a log line that merely says so is not one).
  The record's format lives below the parser, in ``kvtui.engines.exit_record``; re-exported here.
- ``PidWatch``: the rule that turns successive readings of the server's pid file (pid, alive?)
  into exits, shared by the local and SSH backends. A server already running when following
  began is watched only when following the current boot; when following the *next* boot
  (``wait --next``, the follower of an apply's restart) the pid the file names at the start is
  the old server, whose end is the restart, not a failure. A pid that appears later and is dead
  (a server that died between two readings) is an exit too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kvtui.engines.events import ServerExit
from kvtui.engines.exit_record import EXIT_IDENT, exit_record, exit_text, parse_exit


@dataclass(slots=True)
class PidWatch:
    """Successive readings of the server's pid file -> exits (see the module docstring).

    ``current_boot``: following the current boot (the pid running now is the server's); else
    following the next boot only (the pid named at the start belongs to the old server)."""

    current_boot: bool = True
    watched: int | str | None = None  # the server's pid (or a container's start time), seen alive
    old: int | str | None = None  # next-boot mode: the one named at the start (not ours)
    reported: int | str | None = None  # the last one whose exit was reported
    first: bool = True

    def observe(self, key: int | str | None, alive: bool, *, fresh: bool = False) -> ServerExit | None:
        """One reading: the pid file names pid ``key`` (None: no file or no number; a container
        is keyed by its start time) and whether that process runs (a zombie does not). ``fresh``:
        that process started after following began (a restart issued before the first reading
        came in), so it is not the old server even when following the next boot. Returns the
        exit to report, if any."""
        first, self.first = self.first, False
        if key is None:
            return None
        pid = key if isinstance(key, int) else None
        if first:
            if not self.current_boot and not fresh:
                self.old = key
                return None
            if not self.current_boot and not alive:
                self.reported = key
                return ServerExit(pid=pid)  # a new server, already dead
            if alive:
                self.watched = key
                return None
            self.reported = key
            return ServerExit(pid=pid, at_start=True)
        if key == self.old:
            return None
        if alive:
            self.watched = key  # a new server replaced the watched one (a restart): not an exit
            return None
        if key == self.reported:
            return None
        self.reported = key
        self.watched = None
        return ServerExit(pid=pid)


# What a process's /proc/PID/stat says: the state letter after the command's closing parenthesis.
def proc_state(stat_text: str) -> str | None:
    """The state letter of a ``/proc/PID/stat`` line (``R``, ``S``, ``Z`` …), None if unreadable."""
    _, sep, rest = stat_text.rpartition(")")
    if not sep:
        return None
    parts = rest.split()
    return parts[0] if parts else None


def proc_age(stat_text: str, uptime_text: str, clock_ticks: int) -> float | None:
    """Seconds since a process started, from its ``/proc/PID/stat`` (field 22, start time in
    clock ticks after boot) and ``/proc/uptime``; None when unreadable."""
    _, sep, rest = stat_text.rpartition(")")
    parts = rest.split()
    try:
        start = int(parts[19]) / max(1, clock_ticks) if sep else None
        up = float(uptime_text.split()[0])
    except (IndexError, ValueError):
        return None
    return None if start is None else max(0.0, up - start)


FRESH_SLACK_S: Final = 1.5  # a process this much younger than the follow (its caller's start) is "started after it"


def read_pid(text: str) -> int | None:
    """The pid a pid file holds (its first line's digits), None when it holds none."""
    first = text.split("\n", 1)[0]
    digits = "".join(c for c in first if c.isdigit())
    if not digits:
        return None
    pid = int(digits)
    return pid if pid > 0 else None


# ``docker inspect -f`` format of a container's state, read by ``parse_docker_state``.
DOCKER_STATE_FORMAT: Final = "{{.State.Running}} {{.State.StartedAt}} {{.State.ExitCode}} {{.State.OOMKilled}}"


def parse_docker_state(text: str) -> tuple[str, bool, str] | None:
    """(the run's start time, running?, a detail for its exit) from ``DOCKER_STATE_FORMAT``'s
    output; None when it is not that (no such container: the inspect failed)."""
    parts = text.strip().split()
    if len(parts) < 2 or parts[0] not in ("true", "false"):
        return None
    running = parts[0] == "true"
    detail = ""
    if not running:
        code = parts[2] if len(parts) > 2 else "?"
        detail = f"container exit code {code}" + (", killed by the OOM killer" if parts[3:4] == ["true"] else "")
    return parts[1], running, detail


__all__ = [
    "DOCKER_STATE_FORMAT",
    "EXIT_IDENT",
    "PidWatch",
    "exit_record",
    "exit_text",
    "parse_docker_state",
    "parse_exit",
    "proc_age",
    "proc_state",
    "read_pid",
]
