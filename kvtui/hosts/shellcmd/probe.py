"""Reachability probe (``kvtui hosts --connect``)."""

from __future__ import annotations

from kvtui.hosts.shellcmd.base import q, qpath, sh_c, sudo_prefix


def probe_host(*, unit: str | None = None, log_file: str | None = None, container: str | None = None,
               sudo: bool = False) -> str:
    """One round trip that prints ``key=value`` lines: ``user``, ``gpus`` (count, or ``none``
    without nvidia-smi), and for what the host follows: ``unit=LoadState/ActiveState`` and
    ``journal=ok|denied``, ``log=<size>|missing|unreadable``, ``container=<status>|missing``."""
    sp = sudo_prefix(sudo)
    lines = [
        'echo "user=$(id -un)"',
        'if command -v nvidia-smi >/dev/null 2>&1; then '
        'echo "gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)"; '
        "else echo gpus=none; fi",
    ]
    if unit:
        u = q(unit)
        lines.append(f'echo "unit=$({sp}systemctl show -p LoadState --value {u} 2>/dev/null)/'
                     f'$({sp}systemctl show -p ActiveState --value {u} 2>/dev/null)"')
        lines.append(f"m=$({sp}journalctl -u {u} -n 1 -q --no-pager 2>&1 >/dev/null); "
                     'case "$m" in *ermission*|*nsufficient*|*sudo*) echo journal=denied ;; *) echo journal=ok ;; esac')
    if log_file:
        f = qpath(log_file)
        lines.append(f'if [ -r {f} ]; then echo "log=$(stat -L -c %s -- {f})"; elif [ -e {f} ]; '
                     "then echo log=unreadable; else echo log=missing; fi")
    if container:
        lines.append(f"s=$({sp}docker inspect -f '{{{{.State.Status}}}}' {q(container)} 2>/dev/null) "
                     '&& echo "container=$s" || echo container=missing')
    lines.append("exit 0")
    return sh_c("\n".join(lines))


def parse_probe(output: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isidentifier():
            out[key] = value.strip()
    return out
