"""Where kvtui's files live: the hosts file (``--hosts``, ``$KVTUI_HOSTS``, ``./hosts.toml``,
the XDG config one) and the state directory (``$XDG_STATE_HOME/kvtui``)."""

from __future__ import annotations

import os
from pathlib import Path


def _config_home() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return Path(xdg) if xdg else Path.home() / ".config"


def state_dir() -> Path:
    """``$XDG_STATE_HOME/kvtui`` (default ``~/.local/state/kvtui``). Not created here."""
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "kvtui"


def search_locations() -> list[str]:
    return ["--hosts PATH", "$KVTUI_HOSTS", "./hosts.toml", str(_config_home() / "kvtui" / "hosts.toml")]


def find_hosts_file(explicit: str | None) -> Path | None:
    """The hosts file to read: an explicit ``--hosts`` or ``$KVTUI_HOSTS`` path is returned even if
    missing (loading it then says so); ``./hosts.toml`` and the XDG one only when they exist."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("KVTUI_HOSTS")
    if env:
        return Path(env).expanduser()
    for candidate in (Path("hosts.toml"), _config_home() / "kvtui" / "hosts.toml"):
        if candidate.is_file():
            return candidate
    return None
