"""systemd: ``systemctl show``, verbs, daemon-reload, restart; a unit's environment (what the hang
diagnosis of a deployment reads from a node's unit)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from kvtui.hosts.shellcmd.base import q, sudo_prefix

_PROP_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def systemctl_show(unit: str, props: Iterable[str], *, sudo: bool = False) -> str:
    """``systemctl show -p A -p B UNIT`` (``A=…`` lines)."""
    plist = list(props)
    for p in plist:
        if not _PROP_RE.match(p):
            raise ValueError(f"not a systemd property name: {p!r}")
    ps = " ".join(f"-p {p}" for p in plist)
    return f"{sudo_prefix(sudo)}systemctl show {ps} {q(unit)}"


def systemctl(verb: str, unit: str | None = None, *, sudo: bool = False) -> str:
    """``systemctl daemon-reload`` / ``restart UNIT`` / ``start`` / ``stop`` / ``is-active`` …"""
    if verb not in ("daemon-reload", "restart", "start", "stop", "is-active", "reset-failed", "cat", "status"):
        raise ValueError(f"unsupported systemctl verb {verb!r}")
    if verb == "daemon-reload":
        return f"{sudo_prefix(sudo)}systemctl daemon-reload"
    if unit is None:
        raise ValueError(f"systemctl {verb} needs a unit")
    extra = " --no-pager" if verb in ("cat", "status") else ""
    return f"{sudo_prefix(sudo)}systemctl {verb}{extra} {q(unit)}"


def daemon_reload(*, sudo: bool = False) -> str:
    return systemctl("daemon-reload", sudo=sudo)


def restart_unit(unit: str, *, sudo: bool = False) -> str:
    return systemctl("restart", unit, sudo=sudo)



def unit_environment(unit: str, *, sudo: bool = False) -> str:
    """The unit's ``Environment=`` assignments on one line (``A=1 "B=x y"``), for the NCCL_* /
    GLOO_* settings a deployment's nodes must agree on."""
    return f"{sudo_prefix(sudo)}systemctl show -p Environment --value {q(unit)}"


def parse_environment(text: str) -> dict[str, str]:
    """``systemctl show -p Environment --value`` output -> {name: value} (systemd quotes an
    assignment that holds spaces); a line that does not split is skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        for w in words:
            key, sep, value = w.partition("=")
            if sep and key:
                out[key] = value
    return out
