"""Every shell command kvtui runs on a host, built in one place with ``shlex.quote``.

Commands are POSIX ``sh`` strings (the login shell of an SSH session, or ``sh -c`` locally).
Config values (units, paths, containers, cursors) only ever reach the shell as single quoted
words, so quotes, ``;``, ``$()``, backticks or newlines in them are data, never commands. The only
strings that run as given are the operator's own ``start_command`` / ``stop_command``.

**Followers die with their channel.** OpenSSH does not deliver SSH "signal" requests for root
logins (style.md §7) and closing a channel without a PTY leaves a quiet ``journalctl -f`` running
forever. Every long-lived command (``journalctl -f``, ``tail -F``, ``nvidia-smi -lms``, ``docker
logs -f``) is therefore wrapped by ``guard()``: a small ``sh`` script that runs the follower in the
background and a watcher that blocks reading the channel's stdin; when the channel closes (quit,
disconnect, network cut seen by sshd) stdin reaches EOF and the watcher kills the follower. When
the follower exits by itself, the wrapper exits with its status and takes the watcher down.
"""

from __future__ import annotations

import shlex

# ---------------------------------------------------------------------------------------------
# Quoting helpers
# ---------------------------------------------------------------------------------------------

q = shlex.quote


def qpath(path: str) -> str:
    """Quote a remote path; a leading ``~/`` stays the login's home (``"$HOME"/'rest'``)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + q(path[2:])
    return q(path)


def sudo_prefix(sudo: bool) -> str:
    """``sudo -n`` (never prompts: a missing sudoers rule fails fast instead of hanging)."""
    return "sudo -n " if sudo else ""


def sh_c(script: str) -> str:
    """Run ``script`` with ``sh`` whatever the login shell is."""
    return "sh -c " + q(script)


# ---------------------------------------------------------------------------------------------
# The follower guard
# ---------------------------------------------------------------------------------------------

GUARD_MARK = "# kvtui-guard"
_GUARD = """{prelude}exec 3<&0
{cmd} </dev/null &
p=$!
( while read -r _ <&3; do :; done; kill -TERM "$p" 2>/dev/null ) >/dev/null 2>&1 &
w=$!
exec 3<&-
wait "$p"; r=$?
kill "$w" 2>/dev/null
exit "$r" """ + GUARD_MARK


def guard(command: str, prelude: str = "") -> str:
    """Wrap a long-lived ``command`` (one simple command, so ``$!`` is its PID) so it dies when
    the channel's stdin closes. ``prelude`` (sh lines) runs first, e.g. to emit control lines."""
    if prelude and not prelude.endswith("\n"):
        prelude += "\n"
    return sh_c(_GUARD.format(prelude=prelude, cmd=command))


def unwrap_guard(command: str) -> str:
    """The follower inside a ``guard()`` string (for fakes and tests); else ``command``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if len(words) == 3 and words[:2] == ["sh", "-c"] and words[2].endswith(GUARD_MARK):
        body = words[2]
        end = body.find(" </dev/null &\np=$!")
        start = body.rfind("exec 3<&0\n", 0, end) if end >= 0 else -1
        if start >= 0:  # the command may span lines (``guard(sh_c(script))``)
            return body[start + len("exec 3<&0\n") : end]
    if len(words) == 3 and words[:2] == ["sh", "-c"]:
        return words[2]
    return command


# In-band control lines of the file follower start with NUL (a text log never holds one).
CONTROL_PREFIX = b"\x00kvtui:"


def _self_safe(pattern: str) -> str:
    """An extended regex that matches what ``pattern`` matches but not its own text (``pgrep -f``
    would otherwise find the shell that runs it): ``\\.`` → ``[.]``, a space → ``[ ]``."""
    return pattern.replace("\\.", "[.]").replace(" ", "[ ]")
