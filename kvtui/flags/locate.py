"""Finding the server command in a systemd unit (or drop-in) or a launch script.

A unit: the ``ExecStart=`` lines of ``[Service]`` after the last reset, one server command among
them (``;``-separated commands allowed); an ``ExecStart=`` that runs a script names it
(``NoServerCommand.runs``). A script: the one logical line that starts the server, after
``exec``/``nohup``/``env``/``VAR=…`` wrappers, skipping redirection targets and heredoc bodies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kvtui.flags.cmdline import ServerCommand, _command_from_words, _mentions_engine
from kvtui.flags.errors import FlagError, NoServerCommand
from kvtui.flags.lexer import _ASSIGN_RE, _CONTROL_OPS, Kind, Word, _Item, _Lexer, _line_at, _line_no, _Op

_SECTION_RE = re.compile(r"[ \t]*\[([^\]]+)\][ \t]*\r?$")
_EXEC_RE = re.compile(r"[ \t]*ExecStart[ \t]*=[ \t]*")


@dataclass(frozen=True, slots=True)
class _ExecLine:
    line: int  # 1-based
    items: list[_Item]
    end: int  # the newline that ends the logical line


def _service_key_lines(text: str, key_re: re.Pattern[str]) -> list[tuple[int, int, list[_Item], int]]:
    """(line start, value start, items, end of the logical line) of each line of the ``[Service]``
    section whose key ``key_re`` matches (``ExecStart=``, ``Environment=``), continuations lexed."""
    lex = _Lexer(text, "unit")
    out: list[tuple[int, int, list[_Item], int]] = []
    section = ""
    pos = 0
    n = len(text)
    while pos < n:
        line_end, line = _line_at(text, pos)
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            pos = line_end + 1
            continue
        sec = _SECTION_RE.match(line)
        if sec is not None:
            section = sec.group(1).strip()
            pos = line_end + 1
            continue
        m = key_re.match(line)
        if m is not None and section == "Service":
            vstart = pos + m.end()
            items, end = lex.logical_line(vstart)
            out.append((pos, vstart, items, end))
            pos = end + 1
            continue
        # any other key: skip its continuation lines
        end = _logical_end(text, pos)
        pos = end + 1
    return out


def _unit_exec_lines(text: str) -> list[_ExecLine]:
    """Every ``ExecStart=`` of the ``[Service]`` section, empty ones (resets) included."""
    return [
        _ExecLine(_line_no(text, pos), items, end)
        for pos, _vstart, items, end in _service_key_lines(text, _EXEC_RE)
    ]


def _logical_end(text: str, pos: int) -> int:
    n = len(text)
    while True:
        nl = text.find("\n", pos)
        if nl < 0:
            return n
        line = text[pos:nl].rstrip(" \t\r")
        if not line.endswith("\\"):
            return nl
        pos = nl + 1
        # comment lines inside a continuation are skipped
        while pos < n:
            nl2 = text.find("\n", pos)
            seg = text[pos : (n if nl2 < 0 else nl2)].lstrip(" \t")
            if seg[:1] in ("#", ";") and seg:
                pos = n if nl2 < 0 else nl2 + 1
                continue
            break
        if pos >= n:
            return n


def find_effective_execstart(files: Sequence[tuple[str, str]]) -> int:
    """Which of a unit's files defines the ``ExecStart`` systemd runs.

    ``files``: (path, text) in systemd's load order — the fragment, then the drop-ins as
    ``systemctl show -p DropInPaths`` lists them. An empty ``ExecStart=`` resets the list; the last
    file that sets a command after the last reset wins. Returns its index.
    """
    winner: int | None = None
    for idx, (_path, text) in enumerate(files):
        for ex in _unit_exec_lines(text):
            winner = idx if any(isinstance(it, Word) for it in ex.items) else None
    if winner is None:
        names = ", ".join(p for p, _ in files) or "(no files)"
        raise NoServerCommand(f"no ExecStart= with a command in {names}")
    return winner


def _parse_unit(text: str) -> ServerCommand:
    lines = _unit_exec_lines(text)
    if not lines:
        raise NoServerCommand("no ExecStart= line in the [Service] section")
    # the list after the last reset
    last_reset = max((i for i, ex in enumerate(lines) if not any(isinstance(it, Word) for it in ex.items)), default=-1)
    active = lines[last_reset + 1 :]
    if not active:
        raise NoServerCommand(f"ExecStart= on line {lines[-1].line} is a reset with no command after it")
    found: list[ServerCommand] = []
    runs: str | None = None
    for ex in active:
        words = [it for it in ex.items if isinstance(it, Word)]
        # a lone ';' separates commands in one ExecStart
        groups: list[list[Word]] = [[]]
        for it in ex.items:
            if isinstance(it, _Op):
                groups.append([])
            else:
                groups[-1].append(it)
        for g in groups:
            if not g:
                continue
            cmd = _command_from_words(text, "unit", g, ex.line)
            if cmd is not None:
                found.append(cmd)
            elif _mentions_engine(g) and any(w.value in ("-c", "-lc") for w in g):
                raise FlagError(
                    f"line {ex.line}: the server command is inside a shell string (bash -c \"…\"); kvtui edits "
                    "flags only when they are separate words of ExecStart= or of a launch script"
                )
            elif runs is None and g:
                runs = _script_target(g)
        if not words:
            continue
    if not found:
        msg = "ExecStart= does not start an SGLang or vLLM server"
        if runs:
            msg = (
                f"ExecStart= runs {runs}, not the server itself; kvtui edits the flags there "
                f"(launch_script = {runs!r} in hosts.toml)"
            )
        raise NoServerCommand(msg, runs=runs)
    if len(found) > 1:
        at = ", ".join(str(c.exec_line) for c in found)
        raise FlagError(f"several server commands in ExecStart= (lines {at}); kvtui edits one")
    return found[0]


def _script_target(words: Sequence[Word]) -> str | None:
    """The script an ExecStart runs: ``/opt/launch.sh`` or ``/bin/bash /opt/launch.sh``."""
    vals = [w.value.lstrip("@-:+!") if i == 0 else w.value for i, w in enumerate(words)]
    if not vals:
        return None
    base = vals[0].rsplit("/", 1)[-1]
    if base in ("bash", "sh", "zsh", "dash"):
        rest = [v for v in vals[1:] if not v.startswith("-")]
        return rest[0] if rest and "/" in rest[0] else None
    if base == "env":
        rest = [v for v in vals[1:] if not v.startswith("-") and not _ASSIGN_RE.match(v)]
        return rest[0] if rest and "/" in rest[0] else None
    return vals[0] if "/" in vals[0] else None


# ---------------------------------------------------------------------------------------------
# scripts
# ---------------------------------------------------------------------------------------------


def _script_statements(text: str, problems: list[str] | None = None) -> list[tuple[int, int, list[Word], bool]]:
    """(logical line start, its end, a simple command's words, alone on its line) of each simple
    command of a script: redirection targets and heredoc bodies skipped; a line that does not lex
    is skipped too (its error goes to ``problems``)."""
    lex = _Lexer(text, "script")
    out: list[tuple[int, int, list[Word], bool]] = []
    pos = 0
    n = len(text)
    while pos < n:
        try:
            items, end = lex.logical_line(pos)
        except FlagError as exc:
            if problems is not None:
                problems.append(str(exc))
            nl = text.find("\n", pos)
            pos = n if nl < 0 else nl + 1
            continue
        heredocs: list[tuple[str, bool]] = []
        groups: list[list[Word]] = [[]]
        skip_next = False
        for idx, it in enumerate(items):
            if isinstance(it, _Op):
                if it.text in _CONTROL_OPS:
                    groups.append([])
                elif it.text.lstrip("0123456789") in ("<<", "<<-"):
                    nxt = items[idx + 1] if idx + 1 < len(items) else None
                    if isinstance(nxt, Word):
                        heredocs.append((nxt.value, it.text.endswith("-")))
                    skip_next = True
                else:
                    skip_next = True  # a redirection: its target is not an argument
                continue
            if skip_next:
                skip_next = False
                continue
            groups[-1].append(it)
        simple = [g for g in groups if g]
        alone = len(simple) == 1 and not any(isinstance(it, _Op) for it in items)
        for g in simple:
            out.append((pos, end, g, alone))
        pos = end + 1
        for delim, strip_tabs in heredocs:
            while pos < n:
                nl = text.find("\n", pos)
                body = text[pos : (n if nl < 0 else nl)]
                pos = n if nl < 0 else nl + 1
                if (body.lstrip("\t") if strip_tabs else body) == delim:
                    break
    return out


def _parse_script(text: str) -> ServerCommand:
    problems: list[str] = []
    found: list[ServerCommand] = []
    for _start, _end, words, _alone in _script_statements(text, problems):
        cmd = _command_from_words(text, "script", words, _line_no(text, words[0].start))
        if cmd is not None:
            found.append(cmd)
    if not found:
        msg = "no server command (python -m sglang.launch_server, sglang serve, vllm serve …) in the script"
        if problems:
            msg += "; could not read: " + "; ".join(problems[:3])
        raise NoServerCommand(msg)
    if len(found) > 1:
        at = ", ".join(str(c.exec_line) for c in found)
        raise FlagError(f"the script starts a server on several lines ({at}); kvtui edits a script with one")
    return found[0]


def parse_command(text: str, kind: Kind) -> ServerCommand:
    """Find and parse the server command of a unit (or drop-in) or a launch script.

    Raises ``NoServerCommand`` when there is none (``.runs``: a script the unit runs instead) and
    ``FlagError`` when the command is ambiguous or unreadable.
    """
    if kind == "unit":
        return _parse_unit(text)
    if kind == "script":
        return _parse_script(text)
    raise FlagError(f"unknown kind {kind!r}: expected 'unit' or 'script'")


def get_flag(text: str, kind: Kind, name: str) -> str | bool | None:
    """The effective value of a flag in a unit or script (None when absent)."""
    return parse_command(text, kind).get(name)
