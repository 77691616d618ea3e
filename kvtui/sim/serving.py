"""Serving after ready: one record per tick, a pure function of (seed, boot, tick)."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from kvtui.sim.script import ServingFacts

SERVING_INTERVAL_S = 5.0  # simulated seconds between SGLang serving lines


VLLM_SERVING_INTERVAL_S = 10.0  # vLLM logs its stats every 10 s


MIN_SERVING_INTERVAL = 0.1  # real seconds, whatever the speed


def serving_interval(speed: float, sim_interval: float = SERVING_INTERVAL_S) -> float:
    return max(sim_interval / speed, MIN_SERVING_INTERVAL)


def serving_load(seed: int, boot_no: int, sim_t: float) -> float:
    """Offered load in [0, 1] at ``sim_t`` simulated seconds after ready: smooth, seeded."""
    rng = random.Random(f"load:{seed}:{boot_no}")
    p1, p2, p3 = (rng.uniform(0, 2 * math.pi) for _ in range(3))
    x = 0.5 + 0.28 * math.sin(2 * math.pi * sim_t / 900 + p1) + 0.14 * math.sin(2 * math.pi * sim_t / 130 + p2)
    x += 0.06 * math.sin(2 * math.pi * sim_t / 23 + p3)
    ramp = min(1.0, sim_t / 60.0)  # traffic arrives after ready
    return max(0.0, min(1.0, x * ramp))


@dataclass(frozen=True, slots=True)
class ServingTick:
    text: str
    pid: int
    load: float


@dataclass(frozen=True, slots=True)
class TickFigures:
    """The simulated server's state at serving tick ``j``: what its serving line prints and what
    its ``/metrics`` reads (``kvtui.sim.metrics``)."""

    load: float
    running: int
    usage: float
    used: int
    queue: int
    gen: float


def tick_figures(
    facts: ServingFacts, seed: int, boot_no: int, j: int, sim_t: float
) -> tuple[TickFigures, random.Random]:
    """Tick ``j``'s figures, ``sim_t`` simulated seconds after ready, and the tick's generator
    (the serving line draws the rest of its text from it)."""
    load = serving_load(seed, boot_no, sim_t) if facts.load is None else facts.load
    rng = random.Random(f"tick:{seed}:{boot_no}:{j}")
    running = min(facts.max_running_requests, round(load * facts.max_running_requests * 0.9))
    # the pool fills with the running requests' contexts (plus the prefix cache), never quite full
    usage = min(0.96, max(0.0, 0.04 + 0.86 * load + rng.uniform(-0.03, 0.03))) if running else 0.0
    used = int(usage * facts.tokens)
    queue = max(0, int((load - 0.85) * facts.max_running_requests * 2)) if load > 0.85 else 0
    per_req = facts.decode_tok_s * (1.0 - 0.45 * min(1.0, running / max(facts.max_running_requests, 1)))
    gen = running * per_req * (0.92 + 0.16 * rng.random())
    return TickFigures(load, running, usage, used, queue, gen), rng


def serving_tick(facts: ServingFacts, seed: int, boot_no: int, j: int, t: float, sim_t: float) -> ServingTick:
    """Serving line ``j`` of a boot, printed at ``t``, ``sim_t`` simulated seconds after ready."""
    f, rng = tick_figures(facts, seed, boot_no, j, sim_t)
    load, running, usage, used, queue, gen = f.load, f.running, f.usage, f.used, f.queue, f.gen
    if facts.engine == "vllm":
        prompt = gen * (0.3 + 1.2 * rng.random()) if running else 0.0
        text = (
            f"({facts.tag} pid={facts.tp_pid}) INFO {_vllm_stamp(t)} [loggers.py:127] Engine 000: "
            f"Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
            f"Running: {running} reqs, Waiting: {queue} reqs, GPU KV cache usage: {100 * usage:.1f}%, "
            f"Prefix cache hit rate: {100 * (0.2 + 0.5 * rng.random()) if running else 0.0:.1f}%"
        )
        return ServingTick(text, facts.tp_pid, load)
    stamp = _sglang_stamp(t, facts.tag, facts.ms)
    if running and rng.random() < 0.15:
        new_seq = 1 + rng.randrange(4)
        new_tok = new_seq * (200 + rng.randrange(6000))
        cached = int(new_tok * rng.random() * 0.6)
        text = (
            f"Prefill batch. #new-seq: {new_seq}, #new-token: {new_tok}, #cached-token: {cached}, "
            f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue},"
        )
        return ServingTick(f"{stamp} {text}", facts.tp_pid, load)
    text = (
        f"Decode batch. #running-req: {running}, #token: {used}, token usage: {usage:.2f}, cuda graph: True, "
        f"gen throughput (token/s): {gen:.2f}, #queue-req: {queue},"
    )
    return ServingTick(f"{stamp} {text}", facts.tp_pid, load)


def _sglang_stamp(t: float, tag: str, ms: bool) -> str:
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    if ms:
        text += f".{round((t % 1.0) * 1000) % 1000:03d}"
    return f"[{text}{tag}]"


def _vllm_stamp(t: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(t))
