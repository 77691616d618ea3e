"""The monitor: one host's streams -> spool -> ``BootLog`` -> typed, batched updates for any view
(the TUI, ``kvtui wait``). Not part of the pure core (it drives a ``HostBackend``), but imports
no textual.

- ``options``: ``MonitorOptions`` (how a monitor runs), ``MonitorHost``, ``Sink``.
- ``host``: ``HostMonitor``, which composes the pieces below.
- ``ingest``: records -> spool -> ``BootLog`` (the live prefilter is ``BootLog.plan``).
- ``window``: the newest lines in memory and those not yet handed over (``LogWindow``).
- ``publisher``: the typed batches to the sink, their pace (storms), the history (``Publisher``).
- ``pollers``: the GPU stream and the server's PIDs (``GpuPollers``).
- ``connection``: the connection state, the follower's notes, retries (``Connection``).
- ``gaps``: gaps of unread lines and their search on the host (``Gaps``).
- ``oneshot``: ``read_boots`` / ``host_boots`` (a host's boots now, no spool).
- ``deployment``: ``DeploymentMonitor``: one ``HostMonitor`` per node of a deployment (N ≥ 1
  nodes), their boots merged (``kvtui.boot.deployment``).

CONTRACT shared with ``kvtui/ui`` and ``kvtui/commands/wait.py``: the update types, which live in
``kvtui.updates`` and are re-exported here for the views that import them from the monitor.
"""

from kvtui.monitor.host import HostMonitor
from kvtui.monitor.ingest import SKIPPED_SLICE, line_style
from kvtui.monitor.oneshot import host_boots, read_boots
from kvtui.monitor.options import MIN_FLUSH_INTERVAL, MonitorOptions, engine_hint_for
from kvtui.monitor.publisher import STORM_BATCH, STORM_SERVING_INTERVAL
from kvtui.updates import BootState, ConnUpdate, GpuUpdate, LogBatch, LogLine, MonitorUpdate

__all__ = [
    "MIN_FLUSH_INTERVAL",
    "SKIPPED_SLICE",
    "STORM_BATCH",
    "STORM_SERVING_INTERVAL",
    "BootState",
    "ConnUpdate",
    "GpuUpdate",
    "HostMonitor",
    "LogBatch",
    "LogLine",
    "MonitorOptions",
    "MonitorUpdate",
    "engine_hint_for",
    "host_boots",
    "line_style",
    "read_boots",
]
