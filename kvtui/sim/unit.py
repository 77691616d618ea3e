"""The demo host's unit files: systemd's syntax as far as the simulation needs it (logical lines,
``Environment=``, ``ExecStart=``, ``Restart=``, ``RestartSec=`` timespans) and the two ways systemd
prints a command and a time (``systemctl show -p ExecStart``)."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UnitInfo:
    description: str
    argv: tuple[str, ...]
    env: dict[str, str]
    restart: str
    restart_sec: float
    error: str | None = None  # why systemd would refuse to start it


_TIMESPAN_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0}


def parse_timespan(text: str) -> float | None:
    """systemd time spans: ``10``, ``10s``, ``500ms``, ``1min 30s``."""
    text = text.strip()
    if not text:
        return None
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    total = 0.0
    pos = 0
    for m in re.finditer(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)", text):
        if m.start() != pos or m.group(2) not in _TIMESPAN_UNITS:
            return None
        total += float(m.group(1)) * _TIMESPAN_UNITS[m.group(2)]
        pos = m.end()
    return total if pos == len(text) else None


def _logical_lines(text: str) -> Iterator[str]:
    """Unit-file lines with ``\\`` continuations joined and comments dropped (also inside a
    continuation, as systemd does)."""
    buf: str | None = None
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith(("#", ";")):
            continue
        if buf is None and not stripped:
            continue
        if raw.rstrip().endswith("\\"):
            buf = (buf or "") + raw.rstrip()[:-1] + " "
            continue
        yield (buf or "") + raw
        buf = None
    if buf is not None:
        yield buf


def parse_unit(text: str) -> UnitInfo:
    section = ""
    description = ""
    exec_starts: list[str] = []
    env: dict[str, str] = {}
    restart = "no"
    restart_sec = 0.1
    svc_type = "simple"
    error: str | None = None
    for line in _logical_lines(text):
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1]
            continue
        key, eq, value = s.partition("=")
        if not eq:
            continue
        key, value = key.strip(), value.strip()
        if section == "Unit" and key == "Description":
            description = value
        elif section == "Service":
            if key == "ExecStart":
                if value:
                    exec_starts.append(value)
                else:
                    exec_starts.clear()
            elif key == "Environment":
                try:
                    for assignment in shlex.split(value):
                        k, e, v = assignment.partition("=")
                        if e and k:
                            env[k] = v
                except ValueError:
                    error = f"Invalid environment assignment, ignoring: {value}"
            elif key == "Restart":
                restart = value
            elif key == "RestartSec":
                span = parse_timespan(value)
                if span is not None:
                    restart_sec = max(span, 0.0)
            elif key == "Type":
                svc_type = value
    argv: tuple[str, ...] = ()
    if not exec_starts:
        error = "Service has no ExecStart=, ExecStop=, or SuccessAction=. Refusing."
    elif len(exec_starts) > 1 and svc_type != "oneshot":
        error = (
            "Service has more than one ExecStart= setting, which is only allowed for Type=oneshot services. Refusing."
        )
    else:
        cmd = exec_starts[0].lstrip("-@:+!")
        try:
            argv = tuple(shlex.split(cmd))
        except ValueError:
            error = f"Invalid ExecStart= line, unbalanced quotes: {exec_starts[0]}"
        if argv and not argv[0].startswith("/"):
            error = error or f"Neither a valid executable name nor an absolute path: {argv[0]}"
    return UnitInfo(description, argv, env, restart, restart_sec, error)


def _systemd_quote(arg: str) -> str:
    if arg and not re.search(r"[\s\"'\\]", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sd_time(t: float) -> str:
    return time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(t))
