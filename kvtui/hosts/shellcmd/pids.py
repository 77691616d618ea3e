"""Server processes: the PIDs of a unit, a pid file, a container or a pattern; /proc reads."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kvtui.hosts.shellcmd.base import _self_safe, q, qpath, sh_c, sudo_prefix

PS_MARK = "--ps--"
# Engine entry points, for hosts with neither unit, pidfile nor container.
ENGINE_PROCESS_PATTERN = r"sglang\.launch_server|sglang serve|vllm serve|vllm\.entrypoints"


def server_pids_unit(unit: str, *, sudo: bool = False) -> str:
    """Prints ``MainPID=N``, ``cgroup=PID`` lines (every process in the unit's cgroup, v2 or v1),
    then ``--ps--`` and ``PID PPID`` for every process (to add MainPID's descendants)."""
    sp = sudo_prefix(sudo)
    u = q(unit)
    script = f"""{sp}systemctl show -p MainPID {u} 2>/dev/null
cg=$({sp}systemctl show -p ControlGroup --value {u} 2>/dev/null)
if [ -n "$cg" ]; then
  for base in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do
    if [ -d "$base$cg" ]; then
      find "$base$cg" -name cgroup.procs -exec cat {{}} + 2>/dev/null | sed 's/^/cgroup=/'; break
    fi
  done
fi
echo {PS_MARK}
ps -e -o pid=,ppid="""
    return sh_c(script)


def server_pids_pidfile(pidfile: str) -> str:
    """Prints ``MainPID=N`` from a pidfile, then ``--ps--`` and the process table."""
    script = f"""p=$(head -n 1 -- {qpath(pidfile)} 2>/dev/null | tr -cd 0-9)
[ -n "$p" ] && echo "MainPID=$p"
echo {PS_MARK}
ps -e -o pid=,ppid="""
    return sh_c(script)


def server_pids_container(container: str, *, sudo: bool = False) -> str:
    script = f"""p=$({sudo_prefix(sudo)}docker inspect -f '{{{{.State.Pid}}}}' {q(container)} 2>/dev/null)
[ -n "$p" ] && echo "MainPID=$p"
echo {PS_MARK}
ps -e -o pid=,ppid="""
    return sh_c(script)


def server_pids_by_pattern(pattern: str = ENGINE_PROCESS_PATTERN) -> str:
    script = f"""for p in $(pgrep -f {q(_self_safe(pattern))} 2>/dev/null); do echo "MainPID=$p"; done
echo {PS_MARK}
ps -e -o pid=,ppid="""
    return sh_c(script)


def pids_alive(pids: Iterable[int]) -> str:
    """Prints those of ``pids`` that are still running (a zombie, already dead but not reaped,
    does not count), one per line."""
    plist = " ".join(str(int(p)) for p in pids if int(p) > 0)
    script = f"""for p in {plist}; do
  s=$(ps -o stat= -p "$p" 2>/dev/null)
  case "$s" in ''|Z*) ;; *) echo "$p" ;; esac
done
exit 0"""
    return sh_c(script)


def proc_environ(pids: Iterable[int], *, sudo: bool = False) -> str:
    """Prints ``--pid N--``, ``--ppid P--`` (its parent, from ``/proc/N/stat``, readable by anyone)
    then the environment each process started with (``/proc/N/environ``, one ``NAME=VALUE`` a
    line), or ``--unreadable--``; ``parse_proc_environ`` and ``parse_proc_parents`` read it."""
    plist = " ".join(str(int(p)) for p in pids if int(p) > 0)
    script = f"""for p in {plist}; do
  echo "--pid $p--"
  pp=$(sed 's/.*) //' /proc/"$p"/stat 2>/dev/null | cut -d' ' -f2)
  [ -n "$pp" ] && echo "--ppid $pp--"
  {sudo_prefix(sudo)}cat /proc/"$p"/environ 2>/dev/null | tr '\\000' '\\n' || echo "--unreadable--"
done
exit 0"""
    return sh_c(script)


def parse_proc_environ(output: str) -> dict[int, dict[str, str]]:
    """{pid: {name: value}} from ``proc_environ``'s output (pids whose environment was unreadable
    or empty are left out)."""
    out: dict[int, dict[str, str]] = {}
    pid: int | None = None
    for line in output.splitlines():
        if line.startswith("--pid ") and line.endswith("--") and line[6:-2].isdigit():
            pid = int(line[6:-2])
            continue
        if pid is None or line == "--unreadable--":
            continue
        name, eq, value = line.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            out.setdefault(pid, {})[name] = value
    return out


def parse_proc_parents(output: str) -> dict[int, int]:
    """{pid: parent pid} from ``proc_environ``'s output."""
    out: dict[int, int] = {}
    pid: int | None = None
    for line in output.splitlines():
        if line.startswith("--pid ") and line.endswith("--") and line[6:-2].isdigit():
            pid = int(line[6:-2])
        elif pid is not None and line.startswith("--ppid ") and line.endswith("--") and line[7:-2].isdigit():
            out[pid] = int(line[7:-2])
    return out


def main_process(pids: Iterable[int], parents: Mapping[int, int]) -> int | None:
    """The server's main process among ``pids`` (a unit's, a container's or a pid file's process
    tree): the one whose parent is not in the set — not the smallest number, which PID wrap-around
    makes any process of the tree. Several roots: the one with most descendants in the set, then
    the first given; None for no pids."""
    ordered = list(dict.fromkeys(pids))
    if not ordered:
        return None
    inside = set(ordered)
    roots = [p for p in ordered if parents.get(p) not in inside]
    if not roots:
        return ordered[0]

    def descendants(root: int) -> int:
        n = 0
        for p in ordered:
            seen: set[int] = set()
            q = parents.get(p)
            while q is not None and q in inside and q not in seen:
                if q == root:
                    n += 1
                    break
                seen.add(q)
                q = parents.get(q)
        return n

    return max(roots, key=lambda r: (descendants(r), -ordered.index(r)))


_PIDFILE_RES = (
    re.compile(r"\$!\s*>>?\s*(\"[^\"]+\"|'[^']+'|[^\s;&|]+)"),  # … & echo $! > /run/x.pid
    re.compile(r"\$\(\s*cat\s+(\"[^\"]+\"|'[^']+'|[^\s)]+)\s*\)"),  # kill $(cat /run/x.pid)
    re.compile(r"`\s*cat\s+(\"[^\"]+\"|'[^']+'|[^\s`]+)\s*`"),
)


def pidfile_from_commands(start_command: str | None, stop_command: str | None) -> str | None:
    """The pidfile a ``start_command`` writes (``echo $! > F``) or a ``stop_command`` reads
    (``kill $(cat F)``), if either says; None otherwise."""
    for text in (start_command, stop_command):
        if not text:
            continue
        for rx in _PIDFILE_RES:
            m = rx.search(text)
            if m:
                return m.group(1).strip("'\"")
    return None


def server_pid_file(pid_file: str | None, start_command: str | None, stop_command: str | None
                    ) -> tuple[str, str] | None:
    """(path, where it comes from) of the server's pid file, for liveness and its PIDs: the
    ``pid_file`` key, else the file ``start_command`` writes (``echo $! > F``) or ``stop_command``
    reads; None when neither says (or the path holds a variable kvtui cannot resolve)."""
    if pid_file:
        return pid_file, "pid_file"
    found = pidfile_from_commands(start_command, stop_command)
    if not found or "$" in found or "`" in found:
        return None
    how = "start_command" if start_command and pidfile_from_commands(start_command, None) else "stop_command"
    return found, how


def parse_server_pids(output: str) -> set[int]:
    """The server's PIDs from one of the ``server_pids_*`` outputs: main PIDs, every cgroup
    member, and the descendants of all of them."""
    roots: set[int] = set()
    children: dict[int, list[int]] = {}
    in_ps = False
    for line in output.splitlines():
        line = line.strip()
        if line == PS_MARK:
            in_ps = True
            continue
        if in_ps:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                children.setdefault(int(parts[1]), []).append(int(parts[0]))
            continue
        key, _, val = line.partition("=")
        if key in ("MainPID", "cgroup") and val.strip().isdigit() and int(val) > 0:
            roots.add(int(val))
    out: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in out:
            continue
        out.add(pid)
        stack.extend(children.get(pid, ()))
    return out
