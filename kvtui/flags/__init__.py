"""Server flags inside systemd units and launch scripts: parse, edit, verify (pure core).

kvtui's only write to a host is an edit of the server's flags. This module finds the server
command (``python -m sglang.launch_server …``, ``sglang serve …``, ``vllm serve …``,
``python -m vllm.entrypoints.openai.api_server …``) inside

* a systemd unit or drop-in (``kind="unit"``): the ``ExecStart=`` of ``[Service]`` with ``\\``
  continuations, comment lines inside a continuation, quotes, ``ExecStart=`` reset lines, the
  ``-@:+!`` prefixes, ``/usr/bin/env VAR=… `` assignments;
* a launch script (``kind="script"``): the one shell command line that starts the server, possibly
  after ``exec``/``nohup``/``env``/``VAR=…`` wrappers, with continuations, quotes, redirections,
  pipes and comments;

and edits it so that **only** the changed bytes change: ``--set FLAG=VALUE`` replaces only the
value token (keeping its quoting), a missing flag is added in its neighbours' style (its own
continuation line with the same indentation and ``\\`` column when the flags sit one per line,
inline otherwise; ``--k v`` or ``--k=v`` as the majority does), ``--set FLAG`` sets a boolean flag,
``--unset FLAG`` removes a flag, its value and a line it leaves empty.

Each engine's aliases are known (``--tp`` / ``--tp-size`` / ``--tensor-parallel-size``, …), and
an edit named with the *other* engine's name (``max-num-seqs`` on an SGLang server) maps to the
equivalent flag, with a note. Values the engine would refuse (a fraction outside (0, 1), a negative
count, a non-number) and values with shell or systemd metacharacters are refused with a message
that says why.

No I/O: every function takes text and returns text or data. The parts: ``lexer`` (words with their
exact positions), ``cmdline`` (the server command among words: engine, flags), ``locate`` (that
command in a unit or a script), ``values`` (what the engine would refuse), ``edit`` and ``layout``
(changing only the bytes of the edited flags, in the neighbours' style), ``verify`` (re-reading a
written file, a command line or the engine's argument dump). The flag table itself is
``kvtui.knobs``.
"""

from __future__ import annotations

from kvtui.flags.cmdline import ServerCommand, parse_argv, parse_systemctl_execstart
from kvtui.flags.edit import Edit, EditedLine, apply_edits, edits_from_mapping, parse_edit_args
from kvtui.flags.errors import BadValue, FlagError, NoServerCommand
from kvtui.flags.lexer import Kind, Word
from kvtui.flags.locate import find_effective_execstart, get_flag, parse_command
from kvtui.flags.values import same_value, validate_value
from kvtui.flags.verify import check_command, check_dump, check_text
from kvtui.knobs import SPECS, Knob, ValueKind, dest_name, known_names, lookup, suggest
from kvtui.knobs import written_name as canonical_flag

__all__ = [
    "SPECS",
    "BadValue",
    "Edit",
    "EditedLine",
    "FlagError",
    "Kind",
    "Knob",
    "NoServerCommand",
    "ServerCommand",
    "ValueKind",
    "Word",
    "apply_edits",
    "canonical_flag",
    "check_command",
    "check_dump",
    "check_text",
    "dest_name",
    "edits_from_mapping",
    "find_effective_execstart",
    "get_flag",
    "known_names",
    "lookup",
    "parse_argv",
    "parse_command",
    "parse_edit_args",
    "parse_systemctl_execstart",
    "same_value",
    "suggest",
    "validate_value",
]
