"""Editing a server command so that only the changed bytes change.

``--set FLAG=VALUE`` replaces only the value token (keeping its quoting), a missing flag is added
in its neighbours' style (``kvtui.flags.layout``), ``--set FLAG`` sets a switch, ``--unset FLAG``
removes a flag, its value and a line it leaves empty. An edit named with the other engine's name
maps to the equivalent flag, with a note; an unknown flag is written as given, with a note.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kvtui.engines.events import Engine
from kvtui.flags.cmdline import FlagOccurrence, ServerCommand
from kvtui.flags.errors import BadValue, FlagError
from kvtui.flags.layout import _insert, _remove
from kvtui.flags.lexer import Kind, Word, _line_no
from kvtui.flags.locate import parse_command
from kvtui.flags.values import _FALSE, _TRUE, EditValue, validate_value
from kvtui.knobs import Knob, ValueKind, dash_name, known_names, lookup, suggest

_VL = Engine.VLLM


@dataclass(frozen=True, slots=True)
class Edit:
    """One requested change. ``value``: a string to set, True to set a switch, False to turn a
    switch off, None to remove the flag."""

    flag: str
    value: EditValue

    @property
    def unset(self) -> bool:
        return self.value is None

    def __str__(self) -> str:
        if self.value is None:
            return f"--unset {dash_name(self.flag)}"
        if self.value is True:
            return f"--set {dash_name(self.flag)}"
        if self.value is False:
            return f"--set {dash_name(self.flag)}=false"
        return f"--set {dash_name(self.flag)}={self.value}"


_FLAG_NAME_RE = re.compile(r"-{0,2}[A-Za-z][A-Za-z0-9_-]*")


def parse_edit_args(sets: Sequence[str] = (), unsets: Sequence[str] = ()) -> list[Edit]:
    """``--set FLAG[=VALUE]`` / ``--unset FLAG`` arguments -> edits (syntax only; values are
    checked against the engine by ``apply_edits``)."""
    edits: list[Edit] = []
    for s in sets:
        name, eq, value = s.partition("=")
        if not _FLAG_NAME_RE.fullmatch(name.strip()):
            raise FlagError(f"--set {s!r}: expected FLAG=VALUE (e.g. mem-fraction-static=0.88) or FLAG for a switch")
        edits.append(Edit(name.strip(), value if eq else True))
    for u in unsets:
        if not _FLAG_NAME_RE.fullmatch(u.strip()):
            raise FlagError(f"--unset {u!r}: expected a flag name (e.g. cuda-graph-max-bs)")
        edits.append(Edit(u.strip(), None))
    return edits


def edits_from_mapping(values: Mapping[str, object]) -> list[Edit]:
    """Edits from a mapping (e.g. the calculator's ``WhatIf.values``): None removes, True/False switch, else a value."""
    out: list[Edit] = []
    for k, v in values.items():
        if v is None or isinstance(v, bool):
            out.append(Edit(k, v))
        elif isinstance(v, float):
            out.append(Edit(k, _fmt_float(v)))
        elif isinstance(v, (list, tuple)):
            out.append(Edit(k, ",".join(str(x) for x in v)))
        else:
            out.append(Edit(k, str(v)))
    return out


def _fmt_float(x: float) -> str:
    s = repr(round(x, 6))
    return s[:-2] if s.endswith(".0") else s


@dataclass(frozen=True, slots=True)
class EditedLine:
    """One flag (or environment variable) of a file as an edit left it — not a ``kvtui.changes``
    change. ``action``: set (value replaced) / add / remove / unchanged."""

    flag: str  # --name as it is (or was) written
    action: Literal["set", "add", "remove", "unchanged"]
    old: str | bool | None
    new: str | bool | None
    line: int  # 1-based, in the new text (for remove: where it was)
    note: str = ""

    def describe(self) -> str:
        def fmt(v: str | bool | None) -> str:
            if v is True:
                return "on"
            if v is False:
                return "off"
            return "(absent)" if v is None else v

        if self.action == "set":
            s = f"{self.flag}: {fmt(self.old)} -> {fmt(self.new)} (line {self.line})"
        elif self.action == "add":
            s = f"{self.flag}: added {fmt(self.new)} (line {self.line})"
        elif self.action == "remove":
            s = f"{self.flag}: removed (was {fmt(self.old)}, line {self.line})"
        else:
            s = f"{self.flag}: already {fmt(self.new)} (line {self.line})"
        return s + (f"; {self.note}" if self.note else "")


@dataclass(frozen=True, slots=True)
class EditResult:
    new_text: str
    changes: tuple[EditedLine, ...]
    warnings: tuple[str, ...]
    command: ServerCommand  # the command parsed from new_text
    engine: Engine

    @property
    def changed(self) -> bool:
        return any(c.action != "unchanged" for c in self.changes)


@dataclass(slots=True)
class _Resolved:
    edit: Edit
    spec: Knob | None
    name: str  # the spelling to write when adding (engine's own)
    value: EditValue  # validated
    notes: list[str] = field(default_factory=list)
    typed: str = ""  # the name as given (dashed)
    dump: Collection[str] | None = None  # the running boot's argument-dump keys, when known


def _resolve(engine: Engine, edit: Edit, *, strict: bool = True, dump: Collection[str] | None = None) -> _Resolved:
    """Resolve an edit's flag name for the engine; ``strict`` also checks the value (an edit to
    make), without it the value is taken as given (a value read back, to compare). ``dump``: the
    running boot's argument-dump keys, which say the spelling a new occurrence gets
    (``_spelling``)."""
    n = dash_name(edit.flag)
    if not n:
        raise BadValue("empty flag name")
    spec = lookup(engine, n)
    notes: list[str] = []
    value = edit.value
    if spec is not None and n not in known_names(engine) and not (engine is _VL and n.startswith("no-")):
        eng = "vLLM" if engine is _VL else "SGLang"
        notes.append(f"{n} is the other engine's name; this {eng} server calls it --{spec.written(engine)}")
    if spec is not None and engine is _VL and n.startswith("no-") and spec.kind is ValueKind.BOOL:
        # --set no-enable-prefix-caching == --set enable-prefix-caching=false
        if value is True:
            value = False
        elif value is False:
            value = True
    name = spec.written(engine) if spec is not None else n
    if spec is not None and spec.kind is ValueKind.BOOL:
        if isinstance(value, str):
            low = value.lower()
            if low in _TRUE:
                value = True
            elif low in _FALSE:
                value = False
            elif strict:
                raise BadValue(f"--{name} is a switch; --set {name} turns it on, --unset {name} removes it")
    elif not strict:
        pass
    elif value is True and spec is not None:
        raise BadValue(f"--{name} needs a value: --set {name}=VALUE")
    elif value is False and spec is not None:
        raise BadValue(f"--{name} is not a switch; use --unset {name} to remove it")
    elif isinstance(value, str):
        value = validate_value(engine, spec, name, value)
    if spec is None and value is not None:
        near = suggest(engine, n)
        eng = "vLLM" if engine is _VL else "SGLang"
        hint = f" (did you mean --{near[0]}?)" if near else ""
        notes.append(f"--{n} is not a flag kvtui knows for {eng}{hint}; the engine refuses misspelled flags at start")
    if engine is not _VL and value is False and spec is not None:
        value = None  # an SGLang switch is off when absent
    return _Resolved(edit, spec, name, value, notes, n, dump)


def _spelling(engine: Engine, r: _Resolved) -> tuple[str, str]:
    """(spelling, note) for a new occurrence of a flag. A knob that newer releases spell
    differently (SGLang 0.5.23's ``--cuda-graph-max-bs-decode``: the old ``--cuda-graph-max-bs``
    is ambiguous there) gets the spelling the running boot's argument dump shows; with no dump
    known, the spelling given when it is a newer one, else kvtui's usual one, and the note says
    so. An occurrence the file has already keeps its own spelling (``_replace_last``)."""
    spec = r.spec
    newer = spec.renamed.get(engine, ()) if spec is not None else ()
    if spec is None or not newer:
        return r.name, ""
    if r.dump:
        got = spec.spelling_for(engine, r.dump)
        if got is None:
            return spec.written(engine), ""
        return got.flag, (f"written --{got.flag}: the running boot's argument dump has {got.dest} "
                          f"({got.since}'s spelling)")
    given = next((s for s in newer if s.flag == r.typed), None)
    if given is not None:
        return given.flag, (f"no running boot's argument dump tells the engine's release: written --{given.flag} as "
                            f"given; releases before {given.since} call it --{spec.written(engine)}")
    later = " / ".join(f"{s.since} and later" for s in newer)
    return r.name, (f"no running boot's argument dump tells the engine's release: written --{r.name}; "
                    f"{later} call it --{newer[0].flag} and refuse --{r.name} as ambiguous")


def _spelling_mismatch(engine: Engine, r: _Resolved, o: FlagOccurrence) -> str:
    """A note when the file spells a flag otherwise than the running boot's release takes it."""
    spec = r.spec
    if spec is None or not r.dump or not spec.renamed.get(engine):
        return ""
    want = spec.written(engine, r.dump)
    if dash_name(o.name) == want:
        return ""
    return (f"the file spells it --{o.name} (edited in place); the running boot's argument dump says this release "
            f"takes --{want}")


def apply_edits(text: str, kind: Kind, edits: Iterable[Edit], *, dump: Collection[str] | None = None) -> EditResult:
    """Apply edits to a unit or script; only the bytes of the edited flags change.

    ``dump``: the keys of the running boot's argument dump, when known: a flag added that newer
    releases spell differently is written in the spelling this release takes (``_spelling``).
    Raises FlagError for a refused value, an unknown ``--unset``, or a command kvtui cannot edit.
    """
    cmd = parse_command(text, kind)
    engine = cmd.engine
    edit_list = list(edits)
    seen: dict[str, Edit] = {}
    resolved: list[_Resolved] = []
    for e in edit_list:
        r = _resolve(engine, e, dump=dump)
        key = r.spec.concept if r.spec is not None else r.name
        if key in seen:
            raise BadValue(f"{seen[key]} and {e} change the same flag (--{r.name}); give it once")
        seen[key] = e
        resolved.append(r)
    changes: list[EditedLine] = []
    warnings: list[str] = list(cmd.warnings)
    for r in resolved:
        text, change = _apply_one(text, kind, r)
        changes.append(change)
    new_cmd = parse_command(text, kind)
    return EditResult(text, tuple(changes), tuple(dict.fromkeys(warnings)), new_cmd, engine)


def _occurrences(cmd: ServerCommand, r: _Resolved) -> list[FlagOccurrence]:
    if r.spec is not None:
        return [o for o in cmd.flags if o.spec is r.spec]
    return [o for o in cmd.flags if o.spec is None and o.canonical == r.name]


def _render_value(old: Word | None, value: str) -> str:
    q = old.fully_quoted if old is not None else None
    return f"{q}{value}{q}" if q else value


def _apply_one(text: str, kind: Kind, r: _Resolved) -> tuple[str, EditedLine]:
    cmd = parse_command(text, kind)
    occ = _occurrences(cmd, r)
    note = "; ".join(r.notes)
    value = r.value
    # vLLM's positional model (vllm serve MODEL)
    if (
        not occ
        and r.spec is not None
        and r.spec.concept == "model"
        and cmd.engine is _VL
        and cmd.entry.endswith("serve")
        and cmd.positionals
        and isinstance(value, str)
    ):
        w = cmd.positionals[0]
        new_raw = _render_value(w, value)
        new_text = text[: w.start] + new_raw + text[w.end :]
        return new_text, EditedLine("MODEL", "set", w.value, value, _line_no(new_text, w.start), note)
    if value is None:
        return _remove_all(text, kind, cmd, r, occ, note)
    if occ:
        return _replace_last(text, cmd, r, occ, value, note)
    return _add(text, cmd, r, value, note)


def _remove_all(
    text: str, kind: Kind, cmd: ServerCommand, r: _Resolved, occ: list[FlagOccurrence], note: str
) -> tuple[str, EditedLine]:
    """``--unset``: every occurrence goes (an absent flag is an error that names the nearest)."""
    if not occ:
        near = suggest(cmd.engine, r.name) if r.spec is None else []
        hint = f" (did you mean --{near[0]}?)" if near else ""
        raise FlagError(f"--unset {r.name}: the command has no --{r.name}{hint}")
    # remove every occurrence, last first so offsets stay valid
    for o in reversed(occ):
        text = _remove(text, kind, o)
    first = occ[0]
    old = occ[-1].value
    extra = f"; removed {len(occ)} occurrences" if len(occ) > 1 else ""
    return text, EditedLine(f"--{first.name}", "remove", old, None, _line_no(text, first.start), note + extra)


def _replace_last(
    text: str, cmd: ServerCommand, r: _Resolved, occ: list[FlagOccurrence], value: str | bool, note: str
) -> tuple[str, EditedLine]:
    """``--set`` of a flag the command has: the last occurrence (the one the engine uses) changes,
    only its value's bytes (a switch: its ``--no-`` prefix)."""
    o = occ[-1]
    line = _line_no(text, o.start)
    dup = f"given {len(occ)} times; edited the last (the one the engine uses)" if len(occ) > 1 else ""
    note2 = "; ".join(x for x in (note, dup, _spelling_mismatch(cmd.engine, r, o)) if x)
    if isinstance(value, bool):
        # a switch
        if o.value is value:
            return text, EditedLine(f"--{o.name}", "unchanged", o.value, value, line, note2)
        if isinstance(o.value, bool):
            # vLLM --X <-> --no-X
            prefix = o.flag.raw[: len(o.flag.raw) - len(o.flag.raw.lstrip("-"))]
            new_flag = f"{prefix}{'' if value else 'no-'}{r.name}"
            new_text = text[: o.flag.start] + new_flag + text[o.flag.end :]
            return new_text, EditedLine(f"--{o.name}", "set", o.value, value, line, note2)
        raise FlagError(f"--{o.name} has a value here ({o.value}); give one: --set {r.name}=VALUE")
    if o.inline:
        raw = o.flag.raw
        eq = raw.find("=")
        if raw.startswith("-") and eq > 0 and '"' not in raw[:eq] and "'" not in raw[:eq]:
            tail = raw[eq + 1 :]
            q = tail[0] if len(tail) >= 2 and tail[0] in "\"'" and tail[-1] == tail[0] else ""
            vstart = o.flag.start + eq + 1
            new_text = text[:vstart] + f"{q}{value}{q}" + text[o.flag.end :]
        else:
            q = o.flag.fully_quoted or ""
            new_text = text[: o.flag.start] + f"{q}{o.flag.value.partition('=')[0]}={value}{q}" + text[o.flag.end :]
    elif o.values:
        v0, v1 = o.values[0], o.values[-1]
        new_raw = _render_value(v0 if len(o.values) == 1 else None, value)
        if r.spec is not None and r.spec.kind is ValueKind.INT_LIST:
            new_raw = value.replace(",", " ")
        new_text = text[: v0.start] + new_raw + text[v1.end :]
    else:
        # a bare flag that now gets a value
        sep = _style(cmd)
        new_text = text[: o.flag.end] + sep + value + text[o.flag.end :]
    old_v = o.value
    if old_v == value:
        return text, EditedLine(f"--{o.name}", "unchanged", old_v, value, line, note2)
    if isinstance(old_v, str) and o.dynamic_value:
        note2 = "; ".join(x for x in (note2, f"replaced the variable {old_v}") if x)
    return new_text, EditedLine(f"--{o.name}", "set", old_v, value, line, note2)


def _add(text: str, cmd: ServerCommand, r: _Resolved, value: str | bool, note: str) -> tuple[str, EditedLine]:
    """``--set`` of a flag the command lacks: added in the neighbours' style (``layout._insert``),
    in the spelling the running boot's release takes (``_spelling``)."""
    name, why = _spelling(cmd.engine, r)
    note = "; ".join(x for x in (note, why) if x)
    if value is False:
        flag_text = f"--no-{name}"
    elif value is True:
        flag_text = f"--{name}"
    else:
        written = value.replace(",", " ") if r.spec is not None and r.spec.kind is ValueKind.INT_LIST else value
        sep = _style(cmd)
        if sep == "=" and " " in written:
            sep = " "
        flag_text = f"--{name}{sep}{written}"
    new_text, line = _insert(text, cmd, flag_text)
    return new_text, EditedLine(f"--{name}", "add", None, value, line, note)


def _style(cmd: ServerCommand) -> str:
    """``" "`` or ``"="``: how this command writes valued flags (the majority; a tie -> space)."""
    eq = sum(1 for o in cmd.flags if o.inline)
    sp = sum(1 for o in cmd.flags if o.values)
    return "=" if eq > sp else " "
