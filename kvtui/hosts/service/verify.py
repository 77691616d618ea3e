"""Pure checks of what a host says after a write: the ExecStart systemd loaded carries the edits,
and the environment systemd gives the server carries the environment edits."""

from __future__ import annotations

import shlex

from kvtui import envedit as ev
from kvtui import flags as fl
from kvtui.hosts.service.model import ApplyPlan


def check_systemd_env(plan: ApplyPlan, show_env: str, show_exec: str) -> list[str]:
    """The environment systemd gives the server: ``Environment=``, overridden by ExecStart's own
    ``env NAME=…`` words."""
    env = ev.parse_environment_property(show_env)
    for argv in fl.parse_systemctl_execstart(show_exec):
        try:
            env.update(fl.parse_argv(argv).env)
        except fl.FlagError:
            continue
        break
    return ev.check_environment(env, plan.env_edits, what="systemd's environment for the unit")


def check_execstart(plan: ApplyPlan, show_output: str) -> list[str]:
    """Problems with the ExecStart ``systemctl show -p ExecStart`` printed (none: it carries the
    plan's edits)."""
    argvs = fl.parse_systemctl_execstart(show_output)
    if not argvs:
        text = show_output.strip()
        if text.startswith("ExecStart=") and "argv[]=" not in text and text[len("ExecStart="):].strip():
            try:
                argvs = [shlex.split(text[len("ExecStart="):])]
            except ValueError:
                argvs = []
    if not argvs:
        return ["systemctl show -p ExecStart printed no command"]
    for argv in argvs:
        try:
            cmd = fl.parse_argv(argv)
        except fl.FlagError:
            continue
        return fl.check_command(cmd, plan.edits)
    return ["systemd's ExecStart does not start a server"]


def check_text(plan: ApplyPlan, text: str) -> list[str]:
    """Problems with the file as re-read: every edited flag and environment value as planned."""
    return fl.check_text(text, plan.source.kind, plan.edits) + ev.check_env(text, plan.source.kind, plan.env_edits)
