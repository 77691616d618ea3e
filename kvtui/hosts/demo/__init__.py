"""DemoBackend: a simulated 8-GPU host running an inference server under a systemd-style unit.

Everything a real host offers the monitor and the service layer, without a GPU or a network:

* a unit file (``Description=``, ``Environment=``, ``ExecStart=`` with the engine's flags,
  ``Restart=``, ``RestartSec=``) and a small JSON state, kept in
  ``$XDG_STATE_HOME/kvtui/demo/NAME/`` — an edit or restart made by one kvtui process is seen by
  the next (reads and writes take a file lock; writes are atomic);
* a journal: every boot's lines (``kvtui.hosts.demo_models`` simulates the engine), systemd's
  own lines (``Started …``, ``Stopping …``, ``Main process exited …``, ``Failed with result …``,
  ``Scheduled restart job …``), journald-like cursors (``follow_log(after_cursor=…)`` resumes
  exactly), ``LogStart.CURRENT_BOOT`` / ``NEXT_BOOT``;
* per-GPU memory, utilization, temperature and power following the boot's phases, the
  server's processes and PIDs, and optionally a stale foreign process on one GPU;
* the service methods ``kvtui.hosts.service`` drives (through ``DemoOps``, ``ops.py``): ``read_unit`` / ``write_unit`` /
  ``daemon_reload`` (the flags a restart uses are read at reload, like systemd) /
  ``effective_execstart`` (what ``systemctl show -p ExecStart`` says) / ``restart`` / ``stop``.

Time model: the state holds *epochs* — each explicit (re)start records its start time, the unit
as loaded, the seed and the speed. A boot is a pure function of those and the clock; a failed
boot under ``Restart=on-failure`` is followed by automatic restarts every ``RestartSec``
(compressed by the speed), computed, not stored. ``demo_speed`` compresses simulated time
(printed timestamps and ``elapsed=`` figures are the compressed, wall-clock ones).

The demo host runs no shell commands: ``run()`` answers exit 127, except the read of a model's
``config.json`` (``commands.model_config``), answered from the simulated model's geometry.

Modules: ``backend`` (``DemoBackend``), ``unit`` (unit files), ``state`` (epochs), ``timeline`` (boots as
lines), ``ops`` (the guarded service's operations here); the engines are ``kvtui.hosts.demo_models``.
"""

from __future__ import annotations

from kvtui.hosts.demo.backend import DemoBackend, resolve_preset
from kvtui.hosts.demo.state import DemoError, DemoState, Epoch
from kvtui.hosts.demo.unit import UnitInfo, parse_timespan, parse_unit
from kvtui.hosts.demo_models import PRESETS, SimLine

__all__ = [
    "PRESETS",
    "DemoBackend",
    "DemoError",
    "DemoState",
    "Epoch",
    "SimLine",
    "UnitInfo",
    "parse_timespan",
    "parse_unit",
    "resolve_preset",
]
