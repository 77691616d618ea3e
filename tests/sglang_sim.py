#!/usr/bin/env python3
"""A simulated SGLang 0.5.10 server for the sshd fake host's serving tests (issue 24): the host runs
it (``setsid nohup python3 sglang_sim.py … >> server.log``); it prints a real-format boot to ready,
then serves HTTP on ``--host``:``--port`` (loopback only) and, under the load the test sends it
(``POST /generate`` or ``/v1/completions``), schedules the requests over a KV pool of
``--max-total-tokens`` tokens as SGLang's scheduler does, and prints what it prints:

* ``Prefill batch, #new-seq: …`` when it admits requests (``observability/scheduler_metrics_mixin.py:389``);
* ``Decode batch, #running-req: N, #token: N, token usage: 0.97, cuda graph: True, gen throughput
  (token/s): …, #queue-req: N`` every ``--decode-log-interval`` decode steps (:608, :657);
* ``KV cache pool is full. Retract requests. #retracted_reqs: N, #new_tokens_gained: N,
  #new_token_ratio: a -> b`` when the running requests' next tokens do not fit in the pool: the
  requests with the fewest output tokens go back to the queue, their KV freed (``managers/
  scheduler.py:2596``; the admission's optimism ``new_token_ratio`` rises, then decays again).

With ``--enable-metrics`` ``GET /metrics`` answers ``sglang:*`` series (0.5.10
``observability/metrics_collector.py``: the gauges set when the decode stats are logged, as SGLang
does; ``sglang:num_retracted_requests_total`` counted at each retraction), else 404 as SGLang does.
The formats are the wheels' (docs/serving-metrics.md cites file:line; tests/fixtures/serving/).

Stdlib and ``prometheus_client`` only; every buffer bounded (the queue: ``MAX_QUEUE`` requests; a
request body: ``MAX_BODY`` bytes). Decode steps take ``--step-ms`` real milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MAX_QUEUE = 4096
MAX_BODY = 1 << 20
# SGLang's global_config: the admission's new-token ratio starts at 0.7 × --schedule-conservativeness,
# decays to 0.14 of that over 600 decode steps; a retraction keeps room for 20 more steps
DEFAULT_INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
QUEUE_BUCKETS = [0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400,
                 500, 600, 700, 800, 900, 1000]


def stamp(tag: str = "") -> str:
    return f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{tag}]"


class Journal:
    """``--journal FILE``: the lines go to a real journal file as journald would store a unit's
    output (``_SYSTEMD_UNIT``, ``_SYSTEMD_INVOCATION_ID``, ``_PID``), appended in batches by
    ``systemd-journal-remote`` from export format (a thread, every ``FLUSH_S``; each run closes the
    file, which wakes ``journalctl -f``), as ``tests/sshd_support.JournalWriter`` writes."""

    FLUSH_S = 0.1
    MAX_PENDING = 1 << 20  # bytes buffered between two flushes (beyond: flushed at once)

    def __init__(self, path: str, unit: str, invocation: str) -> None:
        self.path, self.unit, self.invocation = path, unit, invocation
        where = ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
        self.remote = next((p for p in where if os.path.exists(p)), shutil.which("systemd-journal-remote") or "")
        self.lock = threading.Lock()  # the buffer
        self.flushing = threading.Lock()  # one journal-remote run at a time, in order
        self.pending = bytearray()
        self.last_us = 0
        threading.Thread(target=self._run, daemon=True).start()

    def write(self, message: str, priority: int = 6) -> None:
        now_us = max(int(time.time() * 1_000_000), self.last_us + 1)
        self.last_us = now_us
        fields = {"__REALTIME_TIMESTAMP": now_us, "__MONOTONIC_TIMESTAMP": int(time.monotonic() * 1_000_000),
                  "_BOOT_ID": "0123456789abcdef0123456789abcdef", "_HOSTNAME": "gpu-test",
                  "SYSLOG_IDENTIFIER": "python3", "PRIORITY": priority, "_PID": os.getpid(),
                  "_SYSTEMD_UNIT": self.unit, "_SYSTEMD_INVOCATION_ID": self.invocation}
        entry = "".join(f"{k}={v}\n" for k, v in fields.items()).encode() + b"MESSAGE=" + message.encode() + b"\n\n"
        with self.lock:
            self.pending += entry
            full = len(self.pending) > self.MAX_PENDING
        if full:
            self.flush()

    def flush(self) -> None:
        with self.flushing:
            with self.lock:
                data, self.pending = bytes(self.pending), bytearray()
            if data:
                subprocess.run([self.remote, f"--output={self.path}", "-"], input=data, capture_output=True,
                               timeout=30, check=False)

    def _run(self) -> None:
        while True:
            time.sleep(self.FLUSH_S)
            self.flush()


JOURNAL: Journal | None = None


def say(text: str, tag: str = "") -> None:
    line = f"{stamp(tag)} {text}"
    if JOURNAL is not None:
        JOURNAL.write(line, 4 if text.startswith("KV cache pool is full") else 6)
    else:
        print(line, flush=True)


@dataclass
class Req:
    input_len: int
    max_new: int
    arrived: float
    done: asyncio.Future[int]
    output: int = 0
    admitted: float | None = None
    first_token: float | None = None

    @property
    def held(self) -> int:  # tokens it holds in the pool while running
        return self.input_len + self.output


@dataclass
class Scheduler:
    pool: int
    max_running: int
    step_s: float
    log_every: int
    metrics: Metrics | None
    waiting: deque[Req] = field(default_factory=deque)
    running: list[Req] = field(default_factory=list)
    used: int = 0
    conservativeness: float = 1.0
    ratio: float = 0.0
    steps: int = 0
    generated: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.init_ratio = min(DEFAULT_INIT_NEW_TOKEN_RATIO * self.conservativeness, 1.0)
        self.min_ratio = min(self.init_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay = (self.init_ratio - self.min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.ratio = self.init_ratio

    def submit(self, input_len: int, max_new: int) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if len(self.waiting) >= MAX_QUEUE:
            fut.set_exception(RuntimeError("the queue is full"))
            return fut
        self.waiting.append(Req(input_len, max_new, time.monotonic(), fut))
        self.wake.set()
        return fut

    def _admit(self) -> None:
        reserved = sum(int((r.max_new - r.output) * self.ratio) for r in self.running)
        rem = self.pool - self.used - reserved
        new: list[Req] = []
        while self.waiting and len(self.running) + len(new) < self.max_running:
            r = self.waiting[0]
            need = r.held + int((r.max_new - r.output) * self.ratio)
            if need > rem:
                break
            self.waiting.popleft()
            rem -= need
            new.append(r)
        if not new:
            return
        now = time.monotonic()
        for r in new:
            if r.admitted is None:
                r.admitted = now
                if self.metrics is not None:
                    self.metrics.queue.observe(now - r.arrived)
            self.used += r.held
            self.running.append(r)
        say(f"Prefill batch, #new-seq: {len(new)}, #new-token: {sum(r.held for r in new)}, #cached-token: 0, "
            f"token usage: {self.used / self.pool:.2f}, #running-req: {len(self.running) - len(new)}, "
            f"#queue-req: {len(self.waiting)}, cuda graph: False, input throughput (token/s): "
            f"{sum(r.held for r in new) / self.step_s:.2f}")

    def _retract(self) -> None:
        """The running requests' next tokens do not fit: retract those with the fewest output
        tokens (the longest inputs first among equals) until the rest have room for
        ``RETRACT_DECODE_STEPS`` steps; the new ratio is SGLang's estimate from the rest
        (``(decoded + 20 × running) / their max new tokens``)."""
        self.running.sort(key=lambda r: (r.output, -r.input_len), reverse=True)
        out: list[Req] = []
        while len(self.running) > 1 and self.pool - self.used < len(self.running) * RETRACT_DECODE_STEPS:
            r = self.running.pop()
            self.used -= r.held
            out.append(r)
        gained = sum(r.held for r in out)
        for r in out:
            r.output = 0  # its KV is gone: it runs its prefill again when readmitted
        self.waiting.extendleft(reversed(out))
        decoded = sum(r.output for r in self.running)
        wanted = sum(r.max_new for r in self.running) or 1
        old, self.ratio = self.ratio, min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / wanted)
        if self.metrics is not None:
            self.metrics.retracted.inc(len(out))
            self.metrics.last_retracted.set(len(out))
        say(f"KV cache pool is full. Retract requests. #retracted_reqs: {len(out)}, "
            f"#new_tokens_gained: {gained}, #new_token_ratio: {old:.4f} -> {self.ratio:.4f}")

    def _decode(self) -> None:
        if self.pool - self.used < len(self.running):
            self._retract()
        now = time.monotonic()
        left: list[Req] = []
        for r in self.running:
            r.output += 1
            self.used += 1
            self.generated += 1
            if r.first_token is None:
                r.first_token = now
                if self.metrics is not None:
                    self.metrics.ttft.observe(now - r.arrived)
            if r.output >= r.max_new:
                self.used -= r.held
                if not r.done.done():
                    r.done.set_result(r.output)
                if self.metrics is not None:
                    self.metrics.requests.inc()
            else:
                left.append(r)
        self.running = left
        self.ratio = max(self.min_ratio, self.ratio - self.decay)
        self.steps += 1
        if self.steps % self.log_every == 0:
            self._log_decode()

    def _log_decode(self) -> None:
        usage = self.used / self.pool
        gen = len(self.running) / self.step_s if self.running else 0.0
        say(f"Decode batch, #running-req: {len(self.running)}, #token: {self.used}, token usage: {usage:.2f}, "
            f"cuda graph: True, gen throughput (token/s): {gen:.2f}, #queue-req: {len(self.waiting)}")
        if self.metrics is not None:  # SGLang sets its gauges when it logs the decode stats
            self.metrics.set(len(self.running), self.used, usage, len(self.waiting))

    async def run(self) -> None:
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
            self._admit()
            if self.running:
                self._decode()
            await asyncio.sleep(self.step_s)


class Metrics:
    """SGLang 0.5.10's scheduler metrics (names, help, labels as ``metrics_collector.py``)."""

    def __init__(self, model: str, pool: int) -> None:
        self.registry = r = CollectorRegistry()
        names = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"]
        lb = {"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0",
              "dp_rank": "0"}

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"sglang:{name}", doc, names, registry=r).labels(**lb)

        self.running = gauge("num_running_reqs", "The number of running requests.")
        self.used = gauge("num_used_tokens", "The number of used tokens.")
        self.usage = gauge("token_usage", "The token usage.")
        self.queue_reqs = gauge("num_queue_reqs", "The number of requests in the waiting queue.")
        gauge("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.").set(pool)
        self.last_retracted = gauge("num_retracted_reqs", "The number of retracted requests.")
        self.retracted = Counter("sglang:num_retracted_requests", "Total number of retracted requests.", names,
                                 registry=r).labels(**lb)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              ["model_name"], buckets=TTFT_BUCKETS, registry=r).labels(model_name=model)
        self.queue = Histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", names,
                               buckets=QUEUE_BUCKETS, registry=r).labels(**lb)
        self.requests = Counter("sglang:num_requests", "Number of requests processed.", ["model_name"],
                                registry=r).labels(model_name=model)

    def set(self, running: int, used: int, usage: float, queued: int) -> None:
        self.running.set(running)
        self.used.set(used)
        self.usage.set(round(usage, 2))
        self.queue_reqs.set(queued)

    def text(self) -> bytes:
        return generate_latest(self.registry)


def _answer(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json") -> None:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}.get(status, "X")
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)


def _prompt_len(doc: dict[str, object]) -> int:
    for key in ("input_ids", "prompt", "text"):
        v = doc.get(key)
        if isinstance(v, list):
            return max(1, len(v))
        if isinstance(v, str):
            return max(1, len(v.split()))
    return 1


async def serve(ns: argparse.Namespace, sched: Scheduler) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readline()).decode("latin-1").split()
            length = 0
            while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                k, _, v = h.decode("latin-1").partition(":")
                if k.strip().lower() == "content-length":
                    length = min(int(v.strip()), MAX_BODY)
            body = await reader.readexactly(length) if length else b""
            method, path = (line[0], line[1]) if len(line) >= 2 else ("", "")
            status = 200
            if method == "GET" and path in ("/health", "/health_generate"):
                _answer(writer, 200, b"")
            elif method == "GET" and path == "/metrics":
                if sched.metrics is None:
                    status = 404
                    _answer(writer, 404, b'{"detail":"Not Found"}')
                else:
                    _answer(writer, 200, sched.metrics.text(), "text/plain; version=0.0.4; charset=utf-8")
            elif method == "GET" and path == "/v1/models":
                _answer(writer, 200, json.dumps({"object": "list", "data": [{"id": ns.model_path,
                                                                             "object": "model"}]}).encode())
            elif method == "POST" and path in ("/generate", "/v1/completions"):
                doc = json.loads(body or b"{}")
                params = doc.get("sampling_params") or {}
                max_new = int(params.get("max_new_tokens") or doc.get("max_tokens") or 16)
                n = await sched.submit(_prompt_len(doc), max(1, max_new))
                text = " x" * n
                out = ({"text": text, "meta_info": {"completion_tokens": n}} if path == "/generate" else
                       {"object": "text_completion", "model": ns.model_path,
                        "choices": [{"index": 0, "text": text, "finish_reason": "length"}]})
                _answer(writer, 200, json.dumps(out).encode())
            else:
                status = 404
                _answer(writer, 404, b'{"detail":"Not Found"}')
            peer = writer.get_extra_info("peername") or ("127.0.0.1", 0)
            if path != "/metrics":
                say(f'INFO:     {peer[0]}:{peer[1]} - "{method} {path} HTTP/1.1" {status} '
                    f'{"OK" if status == 200 else "Not Found"}')
            await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError, RuntimeError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, ns.host, ns.port, limit=MAX_BODY)
    async with server:
        await server.serve_forever()


def boot(ns: argparse.Namespace) -> None:
    """The boot's lines, as SGLang 0.5.10 prints them on one GPU (the server's arguments, weights,
    the pool, graphs, ready)."""
    say(f"server_args=ServerArgs(model_path='{ns.model_path}', tokenizer_path='{ns.model_path}', "
        f"tokenizer_mode='auto', load_format='auto', trust_remote_code=False, dtype='auto', kv_cache_dtype='auto', "
        f"host='{ns.host}', port={ns.port}, mem_fraction_static=0.85, "
        f"max_running_requests={ns.max_running_requests}, max_total_tokens={ns.max_total_tokens}, "
        f"chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy='fcfs', tp_size=1, pp_size=1, "
        f"page_size=1, context_length=None, cuda_graph_max_bs=8, disable_cuda_graph=False, "
        f"schedule_conservativeness={ns.schedule_conservativeness}, "
        f"enable_metrics={ns.enable_metrics}, decode_log_interval={ns.decode_log_interval}, log_level='info')")
    say("Init torch distributed begin.", " TP0")
    say("Init torch distributed ends. elapsed=0.21 s, mem usage=0.12 GB", " TP0")
    say("Load weight begin. avail mem=78.91 GB", " TP0")
    say("Load weight end. elapsed=0.40 s, type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=76.41 GB, "
        "mem usage=2.50 GB.", " TP0")
    say("Using KV cache dtype: torch.bfloat16", " TP0")
    kv_gb = ns.max_total_tokens * 131072 / 1e9 / 2
    say(f"KV Cache is allocated. #tokens: {ns.max_total_tokens}, K size: {kv_gb:.2f} GB, V size: {kv_gb:.2f} GB",
        " TP0")
    say("Memory pool end. avail mem=75.10 GB", " TP0")
    say("Capture cuda graph begin. This can take up to several minutes. avail mem=75.10 GB", " TP0")
    say("Capture cuda graph bs [1, 2, 4, 8]", " TP0")
    say("Capture cuda graph end. Time elapsed: 0.30 s. mem usage=0.05 GB. avail mem=75.05 GB.", " TP0")
    say(f"max_total_num_tokens={ns.max_total_tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests={ns.max_running_requests}, context_len=8192, available_gpu_mem=75.05 GB", " TP0")
    say(f"INFO:     Started server process [{os.getpid()}]")
    say("INFO:     Waiting for application startup.")
    say("INFO:     Application startup complete.")
    say(f"INFO:     Uvicorn running on http://{ns.host}:{ns.port} (Press CTRL+C to quit)")


async def main(ns: argparse.Namespace) -> None:
    metrics = Metrics(ns.model_path, ns.max_total_tokens) if ns.enable_metrics else None
    sched = Scheduler(ns.max_total_tokens, ns.max_running_requests, ns.step_ms / 1000, ns.decode_log_interval,
                      metrics, conservativeness=ns.schedule_conservativeness)
    loop_task = asyncio.create_task(sched.run())
    boot(ns)
    server = asyncio.create_task(serve(ns, sched))
    await asyncio.sleep(0.2)
    say("The server is fired up and ready to roll!")
    await asyncio.gather(server, loop_task)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
    p.add_argument("--model-path", "--model", dest="model_path", default="/models/tiny-llama")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--max-total-tokens", type=int, default=8192)
    p.add_argument("--max-running-requests", type=int, default=48)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--schedule-conservativeness", type=float, default=1.0)
    p.add_argument("--step-ms", type=float, default=20.0, help="(simulation) real milliseconds per decode step")
    p.add_argument("--pid-file", help="(simulation) write this process's id here")
    p.add_argument("--journal", help="(simulation) write the lines to this journal file (systemd-journal-remote)")
    p.add_argument("--unit", default="sglang.service", help="(simulation) the unit the journal entries are of")
    p.add_argument("--invocation-id", default="0" * 32, help="(simulation) their _SYSTEMD_INVOCATION_ID")
    ns = p.parse_args(argv)
    if ns.host not in ("127.0.0.1", "localhost", "::1"):
        p.error("the simulated server listens on loopback only")
    return ns


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    if args.journal:
        JOURNAL = Journal(args.journal, args.unit, args.invocation_id)
    asyncio.run(main(args))
