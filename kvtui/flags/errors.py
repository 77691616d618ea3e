"""The errors of kvtui.flags; ``str()`` of each is the user-facing message."""

from __future__ import annotations


class FlagError(ValueError):
    """Bad input or an edit kvtui will not make; ``str()`` is the user-facing message."""


class BadValue(FlagError):
    """An edit malformed as given, whatever the host's file says: a value the engine would refuse
    (not a number, out of range, shell metacharacters), a value for a switch, a switch without its
    value, the same flag twice. A usage error (exit 2) in every command, as in ``kvtui calc``."""


class NoServerCommand(FlagError):
    """The text holds no server command. ``runs`` names the script an ExecStart runs instead
    (``ExecStart=/opt/launch.sh``), so the caller can follow it."""

    def __init__(self, message: str, runs: str | None = None) -> None:
        super().__init__(message)
        self.runs = runs
