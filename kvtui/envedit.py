"""Environment edits: set or remove an environment variable the server starts with, inside a
systemd unit (``Environment=`` lines, or the ``env NAME=…`` words of ``ExecStart=``) or a launch
script (``export NAME=…`` / ``NAME=…`` lines before the server command, or ``NAME=… exec …``
prefixes on it) — byte-exact like flag edits (pure core, no I/O).

Why: the knob is sometimes a variable, not a flag: ``VLLM_CPU_KVCACHE_SPACE`` (vLLM's CPU KV
pool), ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (which the CUDA OOM text itself
recommends), ``NCCL_*``, ``SGLANG_*`` / ``VLLM_*`` switches.

- ``--setenv NAME=VALUE`` replaces only the value bytes of the assignment the server sees (its
  quoting kept); a variable the file does not set gets a line of its own: ``Environment=NAME=VALUE``
  after the unit's last ``Environment=`` line (else right before ``ExecStart=``), ``export
  NAME=VALUE`` right before the script's server command, in that line's indentation.
- ``--unsetenv NAME`` removes every assignment of it that reaches the server (its word, or its
  line when it is alone there); a variable the file does not set is an error that says where else
  it may come from.
- Values are plain (letters, digits and ``. _ , : / = + @ -``), as for flags: nothing the shell or
  systemd would interpret.

``effective_env(text, kind)`` is what the server gets from the file; ``check_env`` re-reads a
written file; ``parse_environment_property`` reads ``systemctl show -p Environment``;
``check_environment`` compares a process's environment (``/proc/PID/environ``) with the edits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from kvtui.flags import EditedLine, FlagError, Kind, ServerCommand, Word, parse_command
from kvtui.flags.layout import _line_bounds
from kvtui.flags.lexer import _Lexer, _line_at, _line_no
from kvtui.flags.locate import _EXEC_RE, _SECTION_RE, _script_statements, _service_key_lines
from kvtui.flags.values import _META_NAMES, _SAFE_VALUE

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_VALUE_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_ENV_KEY_RE = re.compile(r"[ \t]*Environment[ \t]*=[ \t]*")
_ENVFILE_KEY_RE = re.compile(r"[ \t]*EnvironmentFile[ \t]*=")

Where = Literal["environment", "execstart", "export", "assign", "prefix"]


class EnvError(FlagError):
    """An environment edit kvtui will not make; ``str()`` is the user-facing message."""


@dataclass(frozen=True, slots=True)
class EnvEdit:
    """Set ``name`` to ``value``, or remove it (``value`` None)."""

    name: str
    value: str | None

    def __str__(self) -> str:
        return f"--unsetenv {self.name}" if self.value is None else f"--setenv {self.name}={self.value}"


def _check_name(name: str, what: str) -> str:
    name = name.strip()
    if not _NAME_RE.fullmatch(name):
        raise EnvError(f"{what}: expected a variable name (letters, digits and _, not starting with a digit), "
                       f"e.g. VLLM_CPU_KVCACHE_SPACE")
    return name


def _check_value(name: str, value: str) -> str:
    if value == "":
        raise EnvError(f"--setenv {name}=: empty value; give one, or remove the variable (--unsetenv {name})")
    if _SAFE_VALUE.fullmatch(value):
        return value
    bad = next(c for c in value if not _SAFE_VALUE.fullmatch(c))
    what = _META_NAMES.get(bad, f"{bad!r}")
    raise EnvError(
        f"--setenv {name}={value!r}: the value contains {what}, which the shell or systemd would interpret; "
        "kvtui writes only plain values (letters, digits and . _ , : / = + @ -)"
    )


def parse_env_args(sets: Sequence[str] = (), unsets: Sequence[str] = ()) -> list[EnvEdit]:
    """``--setenv NAME=VALUE`` / ``--unsetenv NAME`` -> edits (names and values checked)."""
    edits: list[EnvEdit] = []
    seen: dict[str, str] = {}
    for s in sets:
        name, eq, value = s.partition("=")
        if not eq:
            raise EnvError(f"--setenv {s!r}: expected NAME=VALUE (e.g. VLLM_CPU_KVCACHE_SPACE=2)")
        name = _check_name(name, f"--setenv {s!r}")
        edits.append(EnvEdit(name, _check_value(name, value)))
    for u in unsets:
        edits.append(EnvEdit(_check_name(u, f"--unsetenv {u!r}"), None))
    for e in edits:
        if e.name in seen:
            raise EnvError(f"{seen[e.name]} and {e} change the same variable; give it once")
        seen[e.name] = str(e)
    return edits


# =============================================================================================
# Finding the assignments
# =============================================================================================


@dataclass(frozen=True, slots=True)
class Assignment:
    """One ``NAME=VALUE`` the server's environment gets from the file. ``vstart``/``vend``: the
    value's bytes in the text (inside its quotes); ``plain``: those bytes are the value itself (no
    escapes), so they can be replaced; ``line_span``: the logical line to drop when this word is
    alone on it (None: it shares its line with other words)."""

    name: str
    value: str
    where: Where
    word: Word
    vstart: int
    vend: int
    plain: bool
    line_span: tuple[int, int] | None
    dynamic: bool
    group_span: tuple[int, int] | None = None  # the line of the statement when it holds nothing else
    group_size: int = 1  # the assignment words of that statement


@dataclass(frozen=True, slots=True)
class Unset:
    """A removal in the file's order: a script's ``unset NAME``, or (``name`` None) an empty
    ``Environment=`` that resets a unit's list."""

    name: str | None


_Item = Assignment | Unset


def _value_span(text: str, w: Word, kind: Kind) -> tuple[str, str, int, int, bool] | None:
    """(name, value, vstart, vend, plain) of a word ``NAME=VALUE`` (quoted as a whole, or its
    value quoted, or plain); None when the word is no assignment."""
    m = _ASSIGN_VALUE_RE.fullmatch(w.value)
    if m is None:
        return None
    name, value = m.group(1), m.group(2)
    raw = w.raw
    if w.fully_quoted and len(raw) >= 2:
        inner_start = w.start + 1
        inner = raw[1:-1]
        eq = inner.find("=")
        if eq < 0 or inner[:eq] != name:
            return None
        vstart, vend = inner_start + eq + 1, w.end - 1
    else:
        eq = raw.find("=")
        if eq < 0 or raw[:eq] != name:
            return None
        vstart, vend = w.start + eq + 1, w.end
        rv = raw[eq + 1 :]
        if len(rv) >= 2 and rv[0] in "\"'" and rv[-1] == rv[0] and rv[0] not in rv[1:-1]:
            vstart, vend = vstart + 1, vend - 1
    plain = text[vstart:vend] == value
    return name, value, vstart, vend, plain


def _unit_env_lines(text: str) -> list[tuple[int, int, int, list[Word]]]:
    """(line start, value start, logical end, words) of each ``Environment=`` in ``[Service]``."""
    return [
        (pos, vstart, end, [it for it in items if isinstance(it, Word)])
        for pos, vstart, items, end in _service_key_lines(text, _ENV_KEY_RE)
    ]


def _section_lines(text: str, section: str) -> list[tuple[int, str]]:
    """(line start, line) of the non-comment lines of a unit section (continuations included)."""
    out: list[tuple[int, str]] = []
    cur = ""
    pos = 0
    n = len(text)
    while pos < n:
        line_end, line = _line_at(text, pos)
        sec = _SECTION_RE.match(line)
        if sec is not None:
            cur = sec.group(1).strip()
        elif cur == section and line.strip() and line.strip()[0] not in "#;":
            out.append((pos, line))
        pos = line_end + 1
    return out


def _unit_assignments(text: str) -> list[_Item]:
    """Every assignment of the unit in systemd's order (an empty ``Environment=`` resets the
    list). The ``ExecStart=`` command's own ``env NAME=…`` words come last (they override
    ``Environment=``)."""
    out: list[_Item] = []
    for line_start, _vstart, end, words in _unit_env_lines(text):
        if not words:
            out.append(Unset(None))
            continue
        line = (line_start, min(end + 1, len(text)))
        out.extend(_assigned(text, "unit", words, "environment", line if len(words) == 1 else None, line, len(words)))
    out.extend(_command_prefix(text, "unit"))
    return out


def _command_prefix(text: str, kind: Kind) -> list[Assignment]:
    """The server command's own ``NAME=…`` words before its entry (``env X=1 python …``, ``X=1 exec …``)."""
    try:
        cmd = parse_command(text, kind)
    except FlagError:
        return []
    return list(_assigned(text, kind, cmd.words[: cmd.args_start], "execstart" if kind == "unit" else "prefix"))


def _assigned(text: str, kind: Kind, words: Iterable[Word], where: Where, span: tuple[int, int] | None = None,
              group: tuple[int, int] | None = None, size: int = 1) -> Iterator[Assignment]:
    """The words of one statement that are assignments (``span``: the line to drop when a word is
    alone on it; ``group``, ``size``: the statement's line when it holds nothing else, and its
    assignment words; see ``Assignment``)."""
    for w in words:
        got = _value_span(text, w, kind)
        if got is not None:
            name, value, vs, ve, plain = got
            yield Assignment(name, value, where, w, vs, ve, plain, span, w.dynamic, group, size)


def _script_assignments(text: str, cmd: ServerCommand) -> list[_Item]:
    """The assignments before the server command that reach it (``export NAME=…``; ``NAME=…`` on a
    line of its own, which reaches it when the variable is exported, e.g. by systemd; ``unset
    NAME``), then the command's own prefixes."""
    out: list[_Item] = []
    for line_start, end, words, alone in _script_statements(text):
        if words[0].start >= cmd.start:
            break
        first = words[0].value
        if first in ("export", "declare", "typeset") and len(words) > 1:
            cands = [w for w in words[1:] if not w.value.startswith("-")]
            where: Where = "export"
        elif all(_ASSIGN_VALUE_RE.fullmatch(w.value) for w in words):
            cands, where = list(words), "assign"
        elif first == "unset":
            out.extend(Unset(w.value) for w in words[1:] if _NAME_RE.fullmatch(w.value))
            continue
        else:
            continue
        single = alone and len(cands) == 1 and (where == "assign" or len(words) == 2)
        line = (line_start, min(end + 1, len(text)))
        whole = alone and len(words) == len(cands) + (1 if where == "export" else 0)
        out.extend(_assigned(text, "script", cands, where, line if single else None, line if whole else None,
                             len(cands)))
    out.extend(_command_prefix(text, "script"))
    return out


def assignments(text: str, kind: Kind) -> list[Assignment]:
    """Every assignment that reaches the server, in the order they apply (later ones win)."""
    return [a for a in _raw(text, kind) if isinstance(a, Assignment)]


def _raw(text: str, kind: Kind) -> list[_Item]:
    if kind == "unit":
        return _unit_assignments(text)
    cmd = parse_command(text, "script")
    return _script_assignments(text, cmd)


def _replay(items: list[_Item]) -> dict[str, Assignment]:
    env: dict[str, Assignment] = {}
    for a in items:
        if isinstance(a, Unset):
            if a.name is None:
                env.clear()
            else:
                env.pop(a.name, None)
        else:
            env[a.name] = a
    return env


def effective_env(text: str, kind: Kind) -> dict[str, str]:
    """The variables the file gives the server (the last assignment of each wins; an empty
    ``Environment=`` resets the unit's list; a script's ``unset NAME`` removes one)."""
    return {k: a.value for k, a in _replay(_raw(text, kind)).items()}


def assignment_line(text: str, kind: Kind, name: str) -> int:
    """The 1-based line of the assignment of ``name`` the server gets (0 when the file sets none)."""
    try:
        a = _effective(text, kind, name)
    except FlagError:
        return 0
    return 0 if a is None else _line_no(text, a.word.start)


def _effective(text: str, kind: Kind, name: str) -> Assignment | None:
    """The assignment of ``name`` the server gets (None: the file does not set it)."""
    return _replay(_raw(text, kind)).get(name)


# =============================================================================================
# Editing
# =============================================================================================


@dataclass(frozen=True, slots=True)
class EnvResult:
    new_text: str
    changes: tuple[EditedLine, ...]
    warnings: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return any(c.action != "unchanged" for c in self.changes)


def apply_env_edits(text: str, kind: Kind, edits: Iterable[EnvEdit]) -> EnvResult:
    """Apply environment edits; only the bytes of the edited assignments change (a new variable
    is one inserted line; a removed one, its word or its line). Raises ``EnvError``."""
    changes: list[EditedLine] = []
    warnings: list[str] = []
    parse_command(text, kind)  # NoServerCommand / FlagError when there is no server command
    for e in edits:
        text, change = _apply_one(text, kind, e)
        changes.append(change)
    if kind == "unit" and any(_ENVFILE_KEY_RE.match(ln) for _s, ln in _section_lines(text, "Service")):
        warnings.append("the unit also reads an EnvironmentFile=: a variable set there is overridden by "
                        "Environment= only if it comes later; systemd's view is checked after the reload")
    return EnvResult(text, tuple(changes), tuple(warnings))


def _label(name: str) -> str:
    return f"env {name}"


def _apply_one(text: str, kind: Kind, e: EnvEdit) -> tuple[str, EditedLine]:
    cur = _effective(text, kind, e.name)
    if e.value is None:
        return _remove_all(text, kind, e.name, cur)
    value = _check_value(e.name, e.value)
    if cur is not None:
        line = _line_no(text, cur.vstart)
        if cur.value == value:
            return text, EditedLine(_label(e.name), "unchanged", cur.value, value, line)
        if not cur.plain:
            raise EnvError(
                f"line {line}: {e.name} is written with escapes or quotes inside its value ({cur.word.raw}); kvtui "
                "replaces only plain values — edit that line by hand"
            )
        note = f"replaced the expansion {cur.value}" if cur.dynamic else ""
        new = text[: cur.vstart] + value + text[cur.vend :]
        return new, EditedLine(_label(e.name), "set", cur.value, value, line, note)
    at, line_text = _insertion(text, kind, e.name, value)
    new = text[:at] + line_text + text[at:]
    return new, EditedLine(_label(e.name), "add", None, value, _line_no(new, at))


def _insertion(text: str, kind: Kind, name: str, value: str) -> tuple[int, str]:
    """(offset, line) of a new assignment: its own line, in the neighbours' place and indentation."""
    if kind == "unit":
        lines = _unit_env_lines(text)
        if lines:
            _ls, _vs, end, _w = lines[-1]
            at = min(end + 1, len(text))
            prefix = "" if end < len(text) else "\n"
            return at, f"{prefix}Environment={name}={value}\n"
        for pos, line in _section_lines(text, "Service"):
            if _EXEC_RE.match(line):
                return pos, f"Environment={name}={value}\n"
        raise EnvError("no [Service] section with ExecStart= to add Environment= to")
    cmd = parse_command(text, "script")
    ls, _le = _line_bounds(text, cmd.start)
    lead = re.match(r"[ \t]*", text[ls:])
    return ls, f"{lead.group(0) if lead else ''}export {name}={value}\n"


def _remove_all(text: str, kind: Kind, name: str, cur: Assignment | None) -> tuple[str, EditedLine]:
    found = [a for a in assignments(text, kind) if a.name == name]
    if cur is None or not found:
        where = ("the unit file (an Environment= of another unit file, a drop-in, an EnvironmentFile= or "
                 "systemd's own environment may still set it)" if kind == "unit"
                 else "the script before its server command (the environment it is started with may still set it)")
        raise EnvError(f"--unsetenv {name}: {name} is not set in {where}")
    line = _line_no(text, found[0].word.start)
    # a statement whose every assignment goes (``Environment=A=1 A=2``) goes as a line: an empty
    # ``Environment=`` would reset the unit's list, a bare ``export`` print every variable
    whole: set[tuple[int, int]] = set()
    for a in found:
        if a.group_span is not None and sum(b.group_span == a.group_span for b in found) == a.group_size:
            whole.add(a.group_span)
    cuts: list[tuple[int, Assignment | None, tuple[int, int] | None]] = [(s_, None, (s_, e_)) for s_, e_ in whole]
    cuts += [(a.word.start, a, None) for a in found if a.group_span not in whole]
    for _pos, one, span in sorted(cuts, key=lambda c: c[0], reverse=True):
        if span is not None:
            text = text[: span[0]] + text[span[1] :]
        elif one is not None:
            text = _remove(text, kind, one)
    extra = f"; removed {len(found)} assignments" if len(found) > 1 else ""
    return text, EditedLine(_label(name), "remove", cur.value, None, line, extra.lstrip("; "))


def _remove(text: str, kind: Kind, a: Assignment) -> str:
    if a.line_span is not None:
        s, e = a.line_span
        return text[:s] + text[e:]
    w = a.word
    ls, le = _line_bounds(text, w.start)
    # ``export A=1 NAME=2`` -> ``export A=1``; a lone ``export NAME=2`` among other commands: refuse
    if (kind == "script" and a.where == "export" and text[ls:w.start].rstrip(" \t").endswith("export")
            and _next_word_is_op(text, w.end, le)):
        raise EnvError(
            f"line {_line_no(text, w.start)}: {a.name} is exported on a line with other commands; kvtui "
            "removes it only from a line of its own or from an export of several variables"
        )
    j = w.end
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < le and text[j] not in "\\\r\n;&|":
        return text[: w.start] + text[j:]  # the word and the blanks after it
    i = w.start
    while i > ls and text[i - 1] in " \t":
        i -= 1
    return text[:i] + text[w.end :]


def _next_word_is_op(text: str, pos: int, le: int) -> bool:
    rest = text[pos:le].lstrip(" \t")
    return rest == "" or rest[0] in ";&|"


# =============================================================================================
# Verification
# =============================================================================================


def check_env(text: str, kind: Kind, edits: Iterable[EnvEdit]) -> list[str]:
    """Re-read a written unit/script: problems with the environment edits (empty = all there)."""
    try:
        env = effective_env(text, kind)
    except FlagError as exc:
        return [f"the written file no longer parses: {exc}"]
    return check_environment(env, edits, what="the file")


def check_environment(env: Mapping[str, str], edits: Iterable[EnvEdit], *, what: str = "the server") -> list[str]:
    """Problems: each edit ``env`` (a process's or systemd's environment) does not carry."""
    problems: list[str] = []
    for e in edits:
        have = env.get(e.name)
        if e.value is None:
            if have is not None:
                problems.append(f"{what} still has {e.name}={have}")
        elif have != e.value:
            problems.append(f"{what} has {e.name}={have}" if have is not None else f"{what} has no {e.name}")
            problems[-1] += f", expected {e.value}"
    return problems


def env_between(old_text: str, new_text: str, kind: Kind) -> list[EnvEdit]:
    """The edits that turn ``old_text``'s environment into ``new_text``'s (to verify a rollback)."""
    try:
        old, new = effective_env(old_text, kind), effective_env(new_text, kind)
    except FlagError:
        return []
    out = [EnvEdit(k, v) for k, v in new.items() if old.get(k) != v]
    out.extend(EnvEdit(k, None) for k in old if k not in new)
    return out


def parse_environment_property(show_output: str) -> dict[str, str]:
    """``systemctl show -p Environment`` (``Environment=A=1 "B=x y"``) -> {name: value}."""
    env: dict[str, str] = {}
    for line in show_output.splitlines():
        if not line.startswith("Environment="):
            continue
        rest = line[len("Environment=") :]
        lex = _Lexer(rest + "\n", "unit")
        try:
            items, _end = lex.logical_line(0)
        except FlagError:
            continue
        for it in items:
            if isinstance(it, Word):
                m = _ASSIGN_VALUE_RE.fullmatch(it.value)
                if m is not None:
                    env[m.group(1)] = m.group(2)
    return env


def parse_environ(data: str) -> dict[str, str]:
    """``/proc/PID/environ`` (NUL-separated ``NAME=VALUE``) -> {name: value}."""
    env: dict[str, str] = {}
    for item in data.split("\0"):
        name, eq, value = item.partition("=")
        if eq and _NAME_RE.fullmatch(name):
            env[name] = value
    return env


__all__ = [
    "Assignment",
    "EnvEdit",
    "EnvError",
    "EnvResult",
    "Unset",
    "apply_env_edits",
    "assignment_line",
    "assignments",
    "check_env",
    "check_environment",
    "effective_env",
    "env_between",
    "parse_env_args",
    "parse_environ",
    "parse_environment_property",
]
