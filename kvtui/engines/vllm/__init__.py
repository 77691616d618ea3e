"""vLLM startup-log grammar: one line -> ``ParsedLine`` with typed events. Pure core.

Modules: ``grammar`` (``VllmGrammar``: the prefix, then one handler per message family),
``patterns`` (the regexes, hints and pure helpers over one message), ``args`` (the argument
dumps). The public names are re-exported here.

Covers the V1 engine from 0.8 to 0.33 (process tags, the two-line and the one-line KV capacity
forms, torch.compile, CUDA-graph capture, uvicorn, the serving line, the startup failure lines)
and the V0 engine of 0.6.x (no ``[file:line]`` brackets, ``# GPU blocks``, ``Memory profiling
results``). Source of truth: ``reference/engines.md`` §3; match on the message text, never on
``[file.py:line]`` (it moves between releases).

Line anatomy (0.11; 0.33 puts the tag into the format itself; V0 has no brackets)::

    (Worker_TP0 pid=2350) INFO 08-21 10:02:41 [gpu_model_runner.py:2653] Model loading took …
    ^ process tag(s)       ^level ^year-less stamp ^file:line               ^message

Ray workers nest a second tag: ``(EngineCore_0 pid=1159) (RayWorkerWrapper pid=345, ip=…) …``;
the innermost tag names the process that printed the line. tqdm bars (weight shards, graph
capture) carry no stamp and often no tag, and arrive ``\\r``-joined (the caller splits them).

Notes for the tracker (BootTracker):
- ``Flags`` events are *partial*: merge them into the boot's flags (later keys win). The full
  argument dumps (``non-default args: {…}``, V0 ``args: Namespace(…)``) come with a
  ``BootBoundary(STARTED, new_args=True)``; other lines only add keys not seen before in the
  boot (``max_seq_len`` of the engine config as ``max_model_len``, ``gpu_memory_utilization``
  from the free-memory error, …).
- ``PhaseMark`` starts repeat (every worker, every tqdm redraw) and arrive out of order across
  ranks (Ray forwards worker output late): a start of the current or an earlier phase is no news.
  Figure lines that close a phase (``Model loading took``, ``Graph capturing finished``) also
  carry its start mark, so a fragment without the opening line still gets the phase.
- Timestamps: the engine's own stamp has no year. With a wrapper ``ts`` (journald, docker) the
  year comes from the wrapper, and when the wrapper is offset-aware the stamp is made aware too
  (the engine's UTC offset is inferred from the wrapper, to the quarter hour) and expressed in
  the wrapper's zone, so a boot never mixes naive and aware times. Without a wrapper, the year
  is the clock's (the previous one when the stamp would lie in the future).
"""

from __future__ import annotations

from kvtui.engines.vllm.args import parse_arg_dict, parse_kv_args
from kvtui.engines.vllm.grammar import VllmGrammar
from kvtui.engines.vllm.patterns import VLLM_HINTS

__all__ = ["VLLM_HINTS", "VllmGrammar", "parse_arg_dict", "parse_kv_args"]
