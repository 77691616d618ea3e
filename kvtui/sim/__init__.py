"""The simulation: the demo host (a simulated 8-GPU host running an inference server under a
systemd-style unit) and the engine models behind it, with one preset table.

It lives beside ``kvtui.hosts``, not inside it: ``DemoBackend`` (``backend``) implements the
``kvtui.hosts.backend.HostBackend`` protocol and the guarded service's operations (``ops``), so
this package imports the host layer's public types; the host layer reaches it only through
``kvtui.hosts.factory``. It never imports ``kvtui.kvcalc`` (the calculator is tested against it),
textual or asyncssh (import-linter contracts and tests/test_import_hygiene.py check it).

This ``__init__`` imports nothing: ``kvtui.config`` checks ``demo_model`` / ``demo_engine`` with
``kvtui.sim.presets`` (pure), and that must not load the simulator.

**The demo host** — everything a real host offers the monitor and the service layer, without a
GPU or a network:

* a unit file (``Description=``, ``Environment=``, ``ExecStart=`` with the engine's flags,
  ``Restart=``, ``RestartSec=``) and a small JSON state, kept in
  ``$XDG_STATE_HOME/kvtui/demo/NAME/`` — an edit or restart made by one kvtui process is seen by
  the next (reads and writes take a file lock; writes are atomic);
* a journal: every boot's lines (the engine models below), systemd's own lines (``Started …``,
  ``Stopping …``, ``Main process exited …``, ``Failed with result …``, ``Scheduled restart job …``),
  journald-like cursors (``follow_log(after_cursor=…)`` resumes exactly), ``LogStart.CURRENT_BOOT`` /
  ``NEXT_BOOT``;
* per-GPU memory, utilization, temperature and power following the boot's phases, the
  server's processes and PIDs, and optionally a stale foreign process on one GPU;
* the service methods ``kvtui.hosts.service`` drives (through ``DemoOps``, ``ops``): ``read_unit`` /
  ``write_unit`` / ``daemon_reload`` (the flags a restart uses are read at reload, like systemd) /
  ``effective_execstart`` (what ``systemctl show -p ExecStart`` says) / ``restart`` / ``stop``.

Time model: the state holds *epochs* — each explicit (re)start records its start time, the unit
as loaded, the seed and the speed. A boot is a pure function of those and the clock; a failed
boot under ``Restart=on-failure`` is followed by automatic restarts every ``RestartSec``
(compressed by the speed), computed, not stored. ``demo_speed`` compresses simulated time
(printed timestamps and ``elapsed=`` figures are the compressed, wall-clock ones).

The demo host runs no shell commands: ``run()`` answers exit 127, except the read of a model's
``config.json`` (``commands.model_config``), answered from the simulated model's geometry.

**The engine models** — a boot is a **pure function** of its inputs (the unit's argv and
environment, the preset, the GPU, the seed, the boot number, the start time and the speed):
``simulate_boot`` returns a ``BootScript`` — every line the engine prints with its time, the
per-GPU memory the server holds over time, and how the boot ends (ready, or the process exits).
The timeline turns scripts into a systemd-style journal with cursors.

The figures follow the engine's own sizing (``engines.md`` §2, written here independently):

* P = free memory after distributed init (min over ranks), A = free after the weights (min);
* rest = A − P·(1 − f); tokens = floor(int(rest·2^30) / cell), capped, page-aligned;
  tokens ≤ 0 → ``Not enough memory. Please try to increase --mem-fraction-static.``;
* each rank allocates ``N + page`` rows of ``cell`` bytes; the request table
  ``max_running_requests × (context_len + 4) × 4`` bytes, CUDA graphs and a draft model come out of
  the P·(1 − f) headroom; a capture that needs more than is free dies with the CUDA OOM text.

Log lines use SGLang 0.5.x format strings (0.5.10 or 0.5.14 capture lines, by preset).

``vllm serve …`` in the unit runs the vLLM 0.11 (V1 engine) simulation instead (engines.md §3):
``kv = total·u − (weights + activation peak + non-torch)``, blocks of ``block_size·cell`` bytes,
with the engine's own failures: free memory below ``u·total`` at start (a stale process),
``No available memory for the cache blocks``, and ``To serve at least one request …``.

Modules:

* ``presets`` — the one preset table: the GPU, the models, the deployments (``PRESETS``), their
  names and how ``demo_model`` resolves to one (pure; ``kvtui.config`` uses it);
* the demo host: ``backend`` (``DemoBackend``), ``unit`` (unit files), ``state`` (epochs),
  ``timeline`` (boots as journal lines), ``ops`` (the guarded service's operations here), ``http``
  (the simulated server's port);
* the engine models: ``script`` (what a simulation returns and the machinery that writes it),
  ``sglang`` and ``vllm`` (the two engines), ``serving`` (after ready), ``metrics`` (the server's
  ``/metrics``), ``simulate`` (``simulate_boot``: the engine the ExecStart runs).
"""
