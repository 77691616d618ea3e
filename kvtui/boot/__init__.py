"""Boots: one server start each, built from parsed lines by ``BootTracker``.

Pure core: no textual, no asyncssh, no I/O.

Modules: ``model`` (``Boot`` and its parts, ``to_json``), ``tracker`` (``BootTracker``), ``facts``
(how figures are aggregated over ranks; ``refresh_metrics``), ``hints`` (failure hints and the
exit diagnosis). The public names are re-exported here. ``deployment`` (not re-exported): one
boot across the N ≥ 1 nodes of a deployment (``merge_boots`` → ``DeploymentBoot``).

CONTRACT (other modules rely on these names; change them only together with their users):
- ``Boot`` fields below, ``Boot.to_json()`` (the ``kvtui replay --json`` boot object),
- ``BootTracker.feed(parsed) -> BootDelta``, ``BootTracker.boots``, ``BootTracker.current``,
  ``BootTracker.finish()`` (end of input: a boot that ends on an exception is failed).

How the tracker reads a log:
- **Boots** split at systemd ``Started …`` / ``Stopping …`` / ``Scheduled restart job`` lines,
  at an engine argument dump (SGLang ``server_args=…``, a vLLM banner) once the current boot is
  past launch, and at an argument dump after a finished boot. A boot cut short by a stop is
  ``stopped``; one replaced without a stop is ``failed`` when it ended on an exception, else
  ``stopped``.
- **Phases** are spans over all ranks: start = the first rank's start line, end = the last
  rank's end line (order-independent: min/max of timestamps). A later phase's start closes the
  earlier open ones. A failure or stop closes the running phase; the current phase of a live
  (or ready) boot keeps ``end = None``.
- **Failures** collect evidence (``FailureText``) with the phase each line arrived in. A fatal
  line (``Received sigquit``, ``scheduler died``, a failed systemd exit, vLLM ``EngineCore failed
  to start``) fails the boot; ``finish()`` also fails a boot whose log ends on an exception.
  The kind comes from the text when the text decides it (``Not enough memory`` ->
  ``oom_kv_allocate``, vLLM ``To serve at least one request`` -> ``kv_too_small``, NCCL errors,
  an argparse refusal or a ``ValueError``/``AssertionError`` raised in the engines' argument and
  config checks -> ``bad_args``), else from the phase (a CUDA OOM in capture ->
  ``oom_graph_capture``, in weight loading -> ``oom_weights``, after ready -> ``oom_runtime``), else
  ``crash``; ``unknown`` when nothing but a process exit was seen. A refusal says its own phase:
  ``bad_args`` is ``launch``, ``kv_too_small`` is ``kv_allocate``, whatever phase line came last.
- **Figures** (target model only in ``metrics``/``facts``; the draft's in ``draft_facts``): avail
  and free figures are the minimum over ranks, graph memory the maximum over ranks of each rank's
  summed captures, sizes and counts the TP0 (lowest rank) value. ``kv_cache_gib`` is one rank's
  target pool (K+V, MLA ``KV size``, or the hybrid ``SWAKVPool`` total) and ``cell_bytes`` that
  pool's bytes / (``#tokens`` + page).
"""

from __future__ import annotations

from kvtui.boot.facts import rank_sort_key
from kvtui.boot.hints import hint_for
from kvtui.boot.model import Boot, BootDelta, BootMetrics, BootStatus, Failure, LiveMetrics, PhaseSpan
from kvtui.boot.tracker import (
    MAX_TRACEBACK_LINES,
    MAX_TRAIL,
    BootTracker,
)

__all__ = [
    "MAX_TRACEBACK_LINES",
    "MAX_TRAIL",
    "Boot",
    "BootDelta",
    "BootMetrics",
    "BootStatus",
    "BootTracker",
    "Failure",
    "LiveMetrics",
    "PhaseSpan",
    "hint_for",
    "rank_sort_key",
]
