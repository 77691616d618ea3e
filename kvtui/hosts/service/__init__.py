"""The one guarded write path to a host: edit the server's flags, back up, write atomically,
verify, restart, follow the new boot, roll back — and audit every change.

Two phases, so a UI can show what will happen before anything does:

``plan_apply(...)`` / ``plan_rollback(...)`` read the *effective* flags (for a unit: the file
whose ``ExecStart=`` systemd runs — the last drop-in that sets it, else the fragment, from
``systemctl show -p FragmentPath -p DropInPaths``; a unit whose ExecStart runs a script: that
script; otherwise the configured ``launch_script``; containers are read-only), make the edit in
memory (``kvtui.flags``: only the edited bytes change), and return an ``ApplyPlan``: the unified
diff, the exact commands that will run, the calculator's prediction and verdict for the new flags
(calibrated from the host's latest boot), and any refusals (readonly host, container, a verdict of
``no_fit`` / ``oom_risk`` unless forced).

``execute(plan, backend, progress)`` then: checks the file still has the hash it had when read
(else refuses: it changed), copies it to ``<file>.kvtui-<UTC time, µs>`` (``backup_name``: names
never collide) and checks the copy, writes the new text atomically (temp file in the same
directory, mode and owner kept, fsync, rename; the remote side verifies the content's hash
before the rename, so a write cut midway never replaces the file), re-reads it and checks every
edited flag (else restores the backup).
For a unit: ``systemctl daemon-reload``, then ``systemctl show -p ExecStart`` must carry the new
values (else restore + reload), then ``systemctl restart``. Without a unit: the configured stop
command, a bounded wait until the old server's PIDs have released their GPU memory, then the
start command detached so it outlives the SSH session. With a restart it follows the new boot
until ready or failed: the boot's own argument dump must carry the edits ("edit not in effect"
otherwise), and prediction is compared with reality. ``rollback_on_failure`` restores the backup
through the same verified path and restarts again.

The service speaks to a host only through its ``HostOps`` (``backend.service_ops()``): how files
are found, read, backed up, written and checked, and how the server restarts, on that kind of
host — ``ShellOps`` (``kvtui.hosts.service.shell``: every command built by
``kvtui.hosts.shellcmd``, for SSH and local hosts) and ``DemoOps`` (``kvtui.sim.ops``: the
simulated host's unit file and systemd, backups included, so edits persist in the demo's state).
The flow above is the same for every host.

It knows neither the calculator nor the monitor: the prediction comes from a ``Calculator`` and
the host's boots from a ``BootReader`` that the caller passes (``kvtui.changes`` is this module with
kvtui's calculator and ``kvtui.monitor.read_boots`` wired in: the CLI and the console use it).

Every executed change (and every refusal at execution) is appended to the audit log
(``kvtui.audit``). Errors the operator can act on are ``ServiceError`` with an exit code.

From a UI (the console's ``a`` / ``u`` / ``R``, ``kvtui.ui.host_pane``)::

    edits = kvtui.flags.parse_edit_args(sets, unsets)          # or flags.edits_from_mapping(...)
    plan = await changes.plan_apply(name, host, backend, edits, restart=True, boots=monitor.tracker.boots,
                                    graph_margin_gib=config.calc.graph_margin_gib)
    show plan.diff, plan.steps, plan.prediction / plan.prediction_note, plan.refusals (plan.refused)
    plan.force = …; plan.rollback_on_failure = …                # what the operator chose
    outcome = await execute(plan, backend, progress=lambda line: ...)   # never raises for the host
    outcome.code / .status / .messages / .reality / .rolled_back / .boot; outcome_headline(...)
    # rollback: plan = await changes.plan_rollback(name, host, backend, restart=True, boots=…); execute(...)
    # restart:  plan = plan_restart(name, host, backend, follow=True); outcome = await execute(plan, backend, …)

``plan_restart`` plans the restart an apply ends with (demo ``restart()``, ``systemctl restart
UNIT``, or stop_command + wait for the GPU memory + start_command detached) on its own, carried
out by ``execute`` / ``execute_nodes`` as a change without files (N >= 1 nodes, node 0 first; with
``follow=True`` the merged new boot followed and node 0 probed) and audited (action ``restart``);
``restart_unavailable`` says why a host cannot be restarted.

``execute`` follows the new boot on its own log stream (``follow_log(NEXT_BOOT)``), next to the
monitor's; it never blocks the event loop (demo file operations are a few KiB).

Modules: ``model`` (the records and the contracts), ``plan`` (pure: names, diffs, refusals, the
calculator's edits), ``prepare`` (the async planners), ``execute``, ``follow`` (the new boot),
``verify`` (pure checks), ``render`` (the operator's words), ``shell`` (``ShellOps``).
"""

from __future__ import annotations

from kvtui.engines.events import Engine
from kvtui.exits import EXIT_FAILED, EXIT_INPUT, EXIT_OK, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_USAGE
from kvtui.hosts.service.execute import Node, execute, execute_nodes
from kvtui.hosts.service.follow import BootFollower
from kvtui.hosts.service.model import (
    BACKUP_MARK,
    PRE_ROLLBACK,
    ApplyOutcome,
    ApplyPlan,
    BootReader,
    Calculator,
    FlagSource,
    Forecast,
    HostOps,
    PlanStep,
    ProgressFn,
    Refusal,
    RestartPlan,
    ServiceError,
)
from kvtui.hosts.service.plan import backup_name, backup_sort_key, sha256_text, split_env_edits, unified_diff
from kvtui.hosts.service.prepare import (
    list_backups,
    locate_source,
    plan_apply,
    plan_restart,
    plan_rollback,
    read_remote_file,
    restart_unavailable,
)
from kvtui.hosts.service.render import outcome_headline, render_plan, render_prediction
from kvtui.hosts.service.shell import ShellOps
from kvtui.hosts.service.verify import check_systemd_env

_check_systemd_env = check_systemd_env  # the name the environment tests call it by

__all__ = [
    "BACKUP_MARK",
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "PRE_ROLLBACK",
    "ApplyOutcome",
    "ApplyPlan",
    "BootFollower",
    "BootReader",
    "Calculator",
    "Engine",
    "FlagSource",
    "Forecast",
    "HostOps",
    "Node",
    "PlanStep",
    "ProgressFn",
    "Refusal",
    "RestartPlan",
    "ServiceError",
    "ShellOps",
    "backup_name",
    "backup_sort_key",
    "execute",
    "execute_nodes",
    "list_backups",
    "locate_source",
    "outcome_headline",
    "plan_apply",
    "plan_restart",
    "plan_rollback",
    "read_remote_file",
    "render_plan",
    "render_prediction",
    "restart_unavailable",
    "sha256_text",
    "split_env_edits",
    "unified_diff",
]
