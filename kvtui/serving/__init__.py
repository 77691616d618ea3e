"""A serving server's KV pressure, from the engine's own figures (issue 24; pure core, no I/O).

* ``sample``   ``ServingSample`` (one reading: KV usage, running / waiting, cumulative preemption
               and retraction counters, TTFT and queue-time histograms, the cache config) and
               ``Histogram`` (cumulative buckets; quantiles of a window from bucket deltas);
* ``prom``     ``/metrics`` text (vLLM ``vllm:*``, SGLang ``sglang:*``) → a sample, read with
               ``prometheus_client``'s text parser;
* ``logs``     the log-line fallback (vLLM's periodic stats, SGLang's Decode / Prefill lines and
               retraction warnings, as the engine grammars parse them) → samples with the same
               cumulative counters;
* ``window``   ``ServingWindow``: a bounded ring of samples over a few minutes — rates per minute
               (counter resets handled), peak KV usage, TTFT / queue-time p50 / p95, and
               ``ServingFigures`` (all of it: a timeline row, a ``--json`` record, a boot's history);
* ``diagnose`` the KV-pressure diagnosis: which limit bites (the pool, the running-requests cap,
               the context length) with its evidence and the knob to turn. It names the knob and
               never sizes it: the calculator (``kvtui.kvcalc``) answers "to what value".

The engines' strings and metric names, by version: docs/serving-metrics.md.
"""
