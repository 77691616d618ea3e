"""The simulated server's ``/metrics`` (issue 24): Prometheus text as SGLang 0.5 (``sglang:*``) or
vLLM 0.32 (``vllm:*``) exposes it, a pure function of (seed, boot, tick) like the serving lines.

The gauges (KV usage, running, waiting) are those of the newest serving tick — what its serving
line prints (``serving.tick_figures``). The counters and histograms add up every tick since ready:
requests finished (the generation throughput over an average output), retractions (SGLang) or
preemptions (vLLM) at some ticks where the pool is nearly full with a queue, and TTFT / queue-time
observations that grow with the load and the queue. ``DemoMetrics`` keeps the running totals of one
boot and adds only the ticks since its last scrape; its first scrape starts at most
``MAX_TICKS_BACK`` ticks back (the counters then count from there: a counter's start is arbitrary).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from kvtui.sim.script import ServingFacts
from kvtui.sim.serving import TickFigures, tick_figures

MAX_TICKS_BACK = 720  # a first scrape adds at most this many ticks (an hour simulated; ~0.1 s of work)
AVG_OUTPUT_TOKENS = 350.0  # a finished request's output, to turn throughput into requests
BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, math.inf)
# a tick's latencies: fractions of its observations at multiples of its typical latency
_SPREAD = ((0.5, 0.7), (0.4, 1.2), (0.1, 2.5))


@dataclass(slots=True)
class _Hist:
    counts: list[float] = field(default_factory=lambda: [0.0] * len(BUCKETS))
    total: float = 0.0

    def observe(self, n: int, typical: float) -> None:
        """``n`` observations around ``typical`` seconds, spread as ``_SPREAD`` says."""
        left = n
        for i, (frac, mult) in enumerate(_SPREAD):
            k = left if i == len(_SPREAD) - 1 else min(left, round(n * frac))
            left -= k
            if k <= 0:
                continue
            v = typical * mult
            b = next(i for i, bound in enumerate(BUCKETS) if v <= bound)
            self.counts[b] += k
            self.total += k * v

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f"# HELP {name} Histogram of {name.split(':', 1)[1].replace('_', ' ')}.",
               f"# TYPE {name} histogram"]
        cum = 0.0
        for bound, c in zip(BUCKETS, self.counts, strict=True):
            cum += c
            le = "+Inf" if math.isinf(bound) else repr(bound)
            out.append(f'{name}_bucket{{le="{le}",{labels}}} {cum}')
        out.append(f"{name}_count{{{labels}}} {cum}")
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        return out


def _quote(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class DemoMetrics:
    """The ``/metrics`` of one simulated boot. ``sim_step``: simulated seconds per serving tick."""

    def __init__(self, facts: ServingFacts, seed: int, boot_no: int, sim_step: float, model: str) -> None:
        self.facts = facts
        self.seed = seed
        self.boot_no = boot_no
        self.sim_step = sim_step
        self.model = model
        self.ticks = 0  # ticks added so far (0 .. ticks-1)
        self.requests = 0
        self.pushed_out = 0  # retractions (SGLang) or preemptions (vLLM)
        self.ttft = _Hist()
        self.queue = _Hist()

    def figures(self, j: int) -> TickFigures:
        return tick_figures(self.facts, self.seed, self.boot_no, j, (j + 1) * self.sim_step)[0]

    def _add(self, j: int) -> None:
        f = self.figures(j)
        rng = random.Random(f"metrics:{self.seed}:{self.boot_no}:{j}")
        finished = f.gen * self.sim_step / AVG_OUTPUT_TOKENS
        n = int(finished) + (1 if rng.random() < finished - int(finished) else 0)
        self.requests += n
        if f.queue > 0 and f.usage >= 0.8 and rng.random() < 0.5:  # a full pool with a queue
            self.pushed_out += 1 + rng.randrange(4)
        if n:
            waited = f.queue * 0.12 * (0.8 + 0.4 * rng.random())
            self.queue.observe(n, 0.003 + waited)
            self.ttft.observe(n, 0.06 + 0.3 * f.load + waited)

    def advance(self, n_ticks: int) -> None:
        """Add the ticks up to ``n_ticks`` (exclusive); a first call starts ``MAX_TICKS_BACK`` back."""
        if self.ticks == 0:
            self.ticks = max(0, n_ticks - MAX_TICKS_BACK)
        while self.ticks < n_ticks:
            self._add(self.ticks)
            self.ticks += 1

    def text(self, n_ticks: int) -> str:
        """The scrape after ``n_ticks`` serving ticks (0: just ready, nothing served yet)."""
        self.advance(n_ticks)
        f = self.figures(n_ticks - 1) if n_ticks > 0 else TickFigures(0.0, 0, 0.0, 0, 0, 0.0)
        if self.facts.engine == "vllm":
            return self._vllm(f)
        return self._sglang(f)

    def _sglang(self, f: TickFigures) -> str:
        lb = (f'dp_rank="0",engine_type="unified",model_name="{_quote(self.model)}",moe_ep_rank="0",'
              'pp_rank="0",tp_rank="0"')
        out: list[str] = []

        def one(name: str, kind: str, value: float, help_: str) -> None:
            out.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{{{lb}}} {float(value)}"])

        one("sglang:num_running_reqs", "gauge", f.running, "The number of running requests.")
        one("sglang:num_used_tokens", "gauge", f.used, "The number of used tokens.")
        one("sglang:token_usage", "gauge", round(f.usage, 4), "The token usage.")
        one("sglang:gen_throughput", "gauge", round(f.gen, 2), "The generation throughput (token/s).")
        one("sglang:num_queue_reqs", "gauge", f.queue, "The number of requests in the waiting queue.")
        one("sglang:max_total_num_tokens", "gauge", self.facts.tokens, "Maximum total number of tokens in the pool.")
        one("sglang:num_retracted_requests_total", "counter", self.pushed_out, "Total retracted requests.")
        one("sglang:num_requests_total", "counter", self.requests, "Number of requests processed.")
        short = f'model_name="{_quote(self.model)}"'
        out += self.ttft.lines("sglang:time_to_first_token_seconds", short)
        out += self.queue.lines("sglang:queue_time_seconds", short)
        return "\n".join(out) + "\n"

    def _vllm(self, f: TickFigures) -> str:
        lb = f'engine="0",model_name="{_quote(self.model)}"'
        block = 16
        blocks = self.facts.tokens // block
        out = [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{block}",engine="0",kv_cache_size_tokens="{blocks * block}",'
            f'num_gpu_blocks="{blocks}"}} 1.0',
        ]

        def one(name: str, kind: str, value: float, help_: str, extra: str = "") -> None:
            out.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{{{lb}{extra}}} {float(value)}"])

        one("vllm:num_requests_running", "gauge", f.running, "Number of requests in model execution batches.")
        one("vllm:num_requests_waiting", "gauge", f.queue, "Number of requests waiting to be processed.")
        one("vllm:kv_cache_usage_perc", "gauge", round(f.usage, 4), "KV-cache usage. 1 means 100 percent usage.")
        one("vllm:num_preemptions_total", "counter", self.pushed_out, "Cumulative number of preemption.")
        one("vllm:request_success_total", "counter", self.requests, "Count of successfully processed requests.",
            ',finished_reason="length"')
        out += self.ttft.lines("vllm:time_to_first_token_seconds", lb)
        out += self.queue.lines("vllm:request_queue_time_seconds", lb)
        return "\n".join(out) + "\n"
