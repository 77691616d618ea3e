"""kvtui against a real inference engine (issue 16): vLLM's CPU build boots a tiny Llama (no
weights: ``--load-format dummy --skip-tokenizer-init``; 2 layers x 2 KV heads x 64 x bf16 = 1,024
bytes of KV a token) from a launch script whose output goes to a log file, as an operator runs it.
The same server is one ``local`` host and one host reached through a real OpenSSH sshd on
127.0.0.1 (the script-host path over SSH), and every step runs the real ``kvtui`` command in a
subprocess (the console, in process, through Pilot):

1. cold start: ``wait`` exits 0 on both hosts with the tokens the engine printed and the phases
   with their durations; the console follows the same boot to ready and shows the pool;
2. ``apply --set max-num-seqs=16 --restart`` (over SSH): the new boot's own argument dump carries
   it; ``rollback --restart`` (local) brings 8 back;
3. ``calc --set VLLM_CPU_KVCACHE_SPACE=2`` predicts 2,097,152 tokens; ``apply --setenv
   VLLM_CPU_KVCACHE_SPACE=2 --restart`` (over SSH): the pool doubles, as predicted, and the new
   server process runs with the new value;
4. ``--max-model-len`` beyond the pool: the calculator refuses it (``no_fit``: the file's 1 GiB,
   not the running boot's 2 GiB); forced, the engine refuses to start and the boot is ``kv_too_small``;
5. a bad argument (``--max-num-seqs abc``): ``wait --next`` exits 1 with ``bad_args`` naming the
   flag, on both hosts;
6. ``kill -9`` of the engine mid-boot: ``wait --next`` exits 1 (``crash``) within 10 s, both hosts.

The steps share one server and run in this order (each leaves the state the next one needs).
Timings go to stdout (``pytest -s``) and, with ``KVTUI_ENGINE_TIMES=FILE``, to FILE as JSON.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_support import BOOT_TIMEOUT, LocalServer, launch_script, private_env, require_engine
from proc_support import followers_read, group_members
from sshd_support import SshdInstance, free_port, requires_sshd, start_sshd

# one worker runs the whole module, in order (pytest-xdist: --dist loadfile, or loadgroup)
pytestmark = [pytest.mark.engine, pytest.mark.sshd, requires_sshd, pytest.mark.xdist_group("engine")]

TIMES: dict[str, float] = {}


def timed(name: str, seconds: float) -> None:
    TIMES[name] = round(seconds, 2)
    print(f"engine suite: {name}: {seconds:.1f} s")


@dataclass
class Rig(LocalServer):
    """The server's files (``engine_support.LocalServer``), and the two hosts that reach it: ``cpu``
    (local) and ``cpussh`` (the same settings through the test sshd)."""

    sshd: SshdInstance | None = None

    def hosts_toml(self) -> str:
        s = self.sshd
        assert s is not None
        return (super().hosts_toml() + "\n"
                f'[hosts.cpussh]\nssh = "{s.target}"\nport = {s.port}\nidentity_file = "{s.client_key}"\n'
                f'known_hosts = "{s.known_hosts}"\n' + self.host_settings())

    def original_script(self) -> str:
        return launch_script(self.python, self.work, self.port,
                             comment="vLLM on the CPU, as an operator starts it (kvtui's engine suite)")

    def last_args(self) -> dict[str, object]:
        """The latest boot's own argument dump (vLLM's ``non-default args: {…}``)."""
        lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if "non-default args: " in ln]
        assert lines, "no argument dump in the log"
        return dict(ast.literal_eval(lines[-1].split("non-default args: ", 1)[1]))


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    python = require_engine()
    sshd = start_sshd(tmp_path_factory.mktemp("sshd-engine"), user="root")
    work = tmp_path_factory.mktemp("vllm-cpu")
    work.chmod(0o755)
    r = Rig(work=work, python=python, port=free_port(), env=private_env(work), sshd=sshd)
    r.script_text = r.original_script()
    r.write()
    t0 = time.monotonic()
    try:
        yield r
    finally:
        r.stop()
        sshd.stop()
        timed("whole suite (module)", time.monotonic() - t0)
        out = os.environ.get("KVTUI_ENGINE_TIMES")
        if out:
            Path(out).write_text(json.dumps(TIMES, indent=2) + "\n")


def _boot_json(out: str) -> dict[str, object]:
    return json.loads(out)  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------
# 1. cold start: wait (both hosts) and the console follow the same real boot to ready
# ---------------------------------------------------------------------------------------------


async def test_cold_start_wait_and_the_console(rig: Rig) -> None:
    from test_ui_helpers import plain, wait_for

    from kvtui.boot import BootStatus
    from kvtui.config import load_config
    from kvtui.hosts.factory import make_backend
    from kvtui.ui.app import KvtuiApp
    from kvtui.ui.host_pane import HostSpec

    t0 = time.monotonic()
    rig.start()
    waits = [asyncio.create_task(rig.kvtui("wait", host, "--json", "--timeout", str(BOOT_TIMEOUT)))
             for host in ("cpu", "cpussh")]
    cfg = load_config(str(rig.hosts)).host("cpu")
    app = KvtuiApp([HostSpec("cpu", cfg)], backend_factory=lambda name, host: make_backend(name, host))
    async with app.run_test(size=(130, 38)) as pilot:
        pane = app.main_screen.active_pane
        assert pane is not None

        def ready() -> bool:
            return pane.boot is not None and pane.boot.status is BootStatus.READY

        await wait_for(pilot, ready, timeout=BOOT_TIMEOUT, step=0.2)
        # the pool the engine printed, once the pane drew the ready boot (a fixed 0.3 s pause
        # was all a loaded machine had to draw it)
        await wait_for(pilot, lambda: "1,048,576" in plain(pane.query_one("BootFigures")), timeout=60, step=0.2)
        assert "✔ ready" in pane.query_one("HostBar").right().plain  # type: ignore[attr-defined]
    timed("cold start: console saw ready", time.monotonic() - t0)
    for task, host in zip(waits, ("cpu", "cpussh"), strict=True):
        code, out, err, took = await task
        assert code == 0, err
        boot = _boot_json(out)
        assert boot["status"] == "ready"
        assert boot["metrics"]["max_total_num_tokens"] == 1_048_576, (host, out[:3000], err[-3000:])  # type: ignore[index]
        assert boot["metrics"]["kv_cache_gib"] == pytest.approx(1.0)  # type: ignore[index]
        phases = {p["name"]: p["seconds"] for p in boot["phases"]}  # type: ignore[attr-defined]
        assert {"launch", "load_weights", "kv_allocate", "ready"} <= set(phases)
        assert all(isinstance(s, (int, float)) for n, s in phases.items() if n != "ready"), phases
        timed(f"cold start: wait {host} -> ready", took)


# ---------------------------------------------------------------------------------------------
# 2. apply --set over SSH, rollback locally
# ---------------------------------------------------------------------------------------------


async def test_apply_set_then_rollback(rig: Rig) -> None:
    code, out, err, took = await rig.kvtui("apply", "cpussh", "--set", "max-num-seqs=16", "--restart", "--yes",
                                           "--timeout", str(BOOT_TIMEOUT))
    assert code == 0, err
    assert "--max-num-seqs 16" in rig.script.read_text()
    assert "the new boot's own argument dump carries the edits" in err
    assert rig.last_args()["max_num_seqs"] == 16
    assert "applied; the new boot is ready" in out
    timed("apply --set max-num-seqs=16 --restart (ssh)", took)
    code, out, err, took = await rig.kvtui("rollback", "cpu", "--restart", "--yes", "--timeout", str(BOOT_TIMEOUT))
    assert code == 0, err
    assert rig.script.read_text() == rig.original_script()
    assert rig.last_args()["max_num_seqs"] == 8
    timed("rollback --restart (local)", took)


# ---------------------------------------------------------------------------------------------
# 3. calc predicts the doubled pool; apply --setenv doubles it
# ---------------------------------------------------------------------------------------------


async def test_setenv_doubles_the_pool_as_predicted(rig: Rig) -> None:
    code, out, err, _ = await rig.kvtui("calc", "--host", "cpu", "--set", "VLLM_CPU_KVCACHE_SPACE=2", "--json")
    assert code == 0, err
    predicted = json.loads(out)["predicted"]["max_total_num_tokens"]
    assert predicted == 2_097_152
    code, out, err, took = await rig.kvtui("apply", "cpussh", "--setenv", "VLLM_CPU_KVCACHE_SPACE=2", "--restart",
                                           "--yes", "--timeout", str(BOOT_TIMEOUT))
    assert code == 0, err
    assert "-export VLLM_CPU_KVCACHE_SPACE=1\n+export VLLM_CPU_KVCACHE_SPACE=2\n" in out  # the plan's diff
    assert "the new boot sized its CPU KV pool to 2 GiB, as VLLM_CPU_KVCACHE_SPACE=2 says" in err
    pid = rig.server_pid()
    assert f"the new server process (pid {pid}) runs with VLLM_CPU_KVCACHE_SPACE=2 (/proc/{pid}/environ)" in err
    assert "predicted 2,097,152 tokens, the boot sized 2,097,152 (+0.00 %)" in out
    code, out, err, _ = await rig.kvtui("wait", "cpu", "--json", "--timeout", "60")
    assert code == 0, err
    assert _boot_json(out)["metrics"]["max_total_num_tokens"] == 2_097_152  # type: ignore[index]
    timed("apply --setenv VLLM_CPU_KVCACHE_SPACE=2 --restart (ssh)", took)
    # back to 1 GiB in the file (the running server keeps its 2 GiB until the next start)
    code, _out, err, _ = await rig.kvtui("rollback", "cpu", "--yes")
    assert code == 0, err
    assert rig.script.read_text() == rig.original_script()


# ---------------------------------------------------------------------------------------------
# 4. max-model-len beyond the pool: predicted no_fit, and the engine's own refusal
# ---------------------------------------------------------------------------------------------


async def test_max_model_len_beyond_the_pool_is_kv_too_small(rig: Rig) -> None:
    # the calculator (calibrated from the running 2 GiB boot; the file says 1 GiB again) refuses it ...
    code, out, err, _ = await rig.kvtui("apply", "cpu", "--set", "max-model-len=2097152", "--restart", "--yes")
    assert code == 4, err
    assert "no_fit" in out
    assert "To serve at least one request" in out
    assert rig.script.read_text() == rig.original_script()
    # ... and the engine agrees when forced
    code, out, err, took = await rig.kvtui("apply", "cpu", "--set", "max-model-len=2097152", "--restart", "--yes",
                                           "--force", "--timeout", str(BOOT_TIMEOUT))
    try:
        assert code == 1, err
        assert re.search(r"the new boot failed in KV allocate: kv_too_small: .*To serve at least one request", err), err
        assert "Verdict no_fit: held (the boot failed)" in out
        timed("apply --set max-model-len=2097152 --force --restart -> kv_too_small", took)
    finally:
        code, _out, err, _ = await rig.kvtui("rollback", "cpu", "--yes")
        assert code == 0, err
        assert rig.script.read_text() == rig.original_script()
        rig.kill_all()


# ---------------------------------------------------------------------------------------------
# 5. a bad argument: bad_args naming the flag
# ---------------------------------------------------------------------------------------------


async def test_a_bad_argument_is_bad_args_naming_the_flag(rig: Rig) -> None:
    waits = [asyncio.create_task(rig.kvtui("wait", h, "--next", "--json", "--timeout", "120")) for h in ("cpu",
                                                                                                      "cpussh")]
    await followers_read(rig.log, count=2)  # both followers are at the end of the log
    rig.script.write_text(rig.original_script().replace("--max-num-seqs 8", "--max-num-seqs abc"))
    offset = rig.log.stat().st_size
    await asyncio.to_thread(rig.stop)
    t_start = time.monotonic()
    rig.start()
    results = [await w for w in waits]
    t_done = time.monotonic()
    refusal = "api_server.py: error: argument --max-num-seqs: invalid int value: 'abc'"
    assert refusal in rig.log_since(offset)
    for (code, out, err, _took), host in zip(results, ("cpu", "cpussh"), strict=True):
        assert code == 1, f"{host}: {err}"
        failure = _boot_json(out)["failure"]
        assert failure["kind"] == "bad_args", failure  # type: ignore[index]
        assert "--max-num-seqs" in failure["message"]  # type: ignore[index]
        assert "--max-num-seqs" in failure["hint"]  # type: ignore[index]
        assert "bad_args" in err
    timed("bad argument: start -> both waits exit 1 (bad_args)", t_done - t_start)
    assert t_done - t_start < 60
    rig.script.write_text(rig.original_script())


# ---------------------------------------------------------------------------------------------
# 6. kill -9 mid-boot: failed within 10 s
# ---------------------------------------------------------------------------------------------


async def test_kill_9_mid_boot_fails_within_10_s(rig: Rig) -> None:
    await asyncio.to_thread(rig.stop)  # the refused server may still be on its way out
    waits = [asyncio.create_task(rig.kvtui("wait", h, "--next", "--json", "--timeout", str(BOOT_TIMEOUT)))
             for h in ("cpu", "cpussh")]
    offset = rig.log.stat().st_size
    await followers_read(rig.log, offset, count=2)  # both followers are at the end of the log
    rig.start()
    deadline = time.monotonic() + BOOT_TIMEOUT
    while "non-default args: " not in (text := rig.log_since(offset)):  # the engine's first lines: mid-boot
        assert time.monotonic() < deadline, "the engine never started"
        await asyncio.sleep(0.1)
    first = text.index("non-default args: ")
    await followers_read(rig.log, offset + len(text[: text.index("\n", first) + 1].encode()), count=2)  # both have them
    pid = rig.server_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    t_kill = time.monotonic()
    try:
        for task, host in zip(waits, ("cpu", "cpussh"), strict=True):
            code, out, err, _ = await task
            took = time.monotonic() - t_kill
            assert code == 1, err
            failure = _boot_json(out)["failure"]
            assert failure["kind"] == "crash", failure  # type: ignore[index]
            assert f"the server process exited (pid {pid})" in failure["message"]  # type: ignore[index]
            assert took < 10, f"{host}: {took:.1f} s from kill -9 to wait's exit"
            timed(f"kill -9 -> wait {host} exits 1", took)
    finally:
        rig.kill_all()  # the engine's workers outlive a kill -9 of the server


def test_the_suite_left_no_server_behind(rig: Rig) -> None:
    rig.stop()
    pid = rig.server_pid()
    assert pid is not None
    assert group_members(pid) == [], "processes of the server's group are left"
