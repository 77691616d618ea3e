"""Running the operator's own commands (``start_command``, ``stop_command``)."""

from __future__ import annotations

from kvtui.hosts.shellcmd.base import q, qpath, sh_c


def detached(command: str, log_file: str | None = None) -> str:
    """Start ``command`` (the operator's ``start_command``) so it outlives the SSH session: new
    session (``setsid``), ``nohup``, stdin from /dev/null, output appended to ``log_file`` (else
    /dev/null) unless the command redirects it itself. Prints the PID of the started shell."""
    out = qpath(log_file) if log_file else "/dev/null"
    return f"nohup setsid sh -c {q(command)} </dev/null >>{out} 2>&1 & echo $!"


def shell(command: str) -> str:
    """The operator's ``stop_command`` (or any configured command) as written, under ``sh``."""
    return sh_c(command)
