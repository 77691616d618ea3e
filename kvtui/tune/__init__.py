"""``kvtui tune``: the loop an operator runs by hand — raise the memory fraction, restart, wait,
OOM in capture, lower it — run by kvtui over the one guarded apply path.

``planner`` (pure: goals, bounds, the next candidate from the calculator, when to stop) and
``driver`` (applies each candidate with ``kvtui.changes`` + ``kvtui.hosts.service.execute``,
follows the boot, rolls back to the last ready configuration when the tune ends on a failure,
audits every step). The CLI is ``kvtui.commands.tune``; the console's dialog drives the same
``driver.tune``.
"""

from __future__ import annotations

from kvtui.tune.planner import Bounds, Candidate, Goal, Planner, Stop, Tried, TuneError, parse_goal

__all__ = ["Bounds", "Candidate", "Goal", "Planner", "Stop", "Tried", "TuneError", "parse_goal"]
