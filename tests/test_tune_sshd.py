"""``kvtui tune`` over a real OpenSSH sshd on 127.0.0.1 with the service tests' stand-ins (a fake
``systemctl`` whose hooks load the unit and start a fake engine; the engine prints a real boot's
lines, and dies in CUDA-graph capture when ``--mem-fraction-static`` > 0.95): a step that fails in
capture steps down and the tune ends ready; a connection dropped mid-tune leaves a state that
``kvtui rollback`` restores."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvtui.audit import read_entries
from kvtui.cli import main
from kvtui.flags import get_flag

sys.path.insert(0, str(Path(__file__).parent))
from sshd_support import CutProxy, requires_sshd
from test_service_sshd import Host, Unit, base, make_unit, root_host  # the module's sshd and stand-ins

pytestmark = [pytest.mark.sshd, requires_sshd]
__all__ = ["base", "root_host"]


def _running(h: Host, u: Unit, fraction: str = "0.85") -> None:
    """The server's current boot (ready), for the calculator."""
    with u.log.open("ab") as fh:
        subprocess.run([str(h.engine_dir / "python3"), "-m", "sglang.launch_server", "--model-path",
                        "/models/Llama-3.1-8B", "--tp", "1", "--mem-fraction-static", fraction], stdout=fh, check=True)


def _hosts(h: Host, u: Unit, tmp_path: Path, port: int | None = None) -> Path:
    s = h.sshd
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(textwrap.dedent(f"""\
        [hosts.gpu]
        ssh = "{s.target}"
        port = {port or s.port}
        identity_file = "{s.client_key}"
        known_hosts = "{s.known_hosts}"
        unit = "{u.name}.service"
        log_file = "{u.log}"
        probe = false
        """))
    return hosts


def test_a_capture_oom_step_steps_down_and_ends_ready(root_host: Host, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import json

    u = make_unit(root_host, "kvt-t1", dropin=False)
    _running(root_host, u)
    hosts = _hosts(root_host, u, tmp_path)
    code = main(["--hosts", str(hosts), "tune", "gpu", "--goal", "max-tokens", "--yes", "--json", "--max-boots", "4",
                 "--timeout", "60"])
    out, err = capsys.readouterr()
    result = json.loads(out[out.index("{"):])
    steps = result["steps"]
    outcomes = [(s["fraction"], s["outcome"], s["failure"]) for s in steps]
    died = [i for i, s in enumerate(steps) if s["failure"] == "oom_graph_capture"]
    assert died, (outcomes, err)
    i = died[0]
    assert steps[i]["fraction"] > 0.95  # the stand-in dies above 0.95
    # after the capture OOM the next candidate is below the fraction that died
    after = steps[i + 1:]
    if after:
        assert after[0]["fraction"] < steps[i]["fraction"], outcomes
    final = float(str(get_flag(u.fragment.read_text(), "unit", "mem-fraction-static")))
    assert final <= 0.95, (outcomes, err)
    assert result["final"] is not None, err
    if steps[-1]["outcome"] != "ready":
        assert "rolled back to the last ready configuration" in str(result["rolled_back"]), err
    assert code == 0, (outcomes, err)
    # 0.91 (the calculator's safe maximum, rounded down) ready; 0.99 dies in capture; the trail
    # says 0.949, which boots, and caps the fraction: the tune stops there, ready
    assert [o[1] for o in outcomes] == ["ready", "failed", "ready"], outcomes
    assert final == steps[-1]["fraction"]
    assert read_entries()[-1]["action"] == "tune"
    assert read_entries()[-1]["outcome"] == "met"


async def test_a_connection_dropped_mid_tune_leaves_a_state_rollback_restores(
        root_host: Host, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtui.hosts.ssh import SshBackend
    from kvtui.tune import Bounds, Goal, Planner, driver

    u = make_unit(root_host, "kvt-t2", dropin=False)
    _running(root_host, u)
    proxy = await CutProxy(root_host.sshd.port).start()
    root_host.sshd.trust_port(proxy.port)
    cfg = root_host.sshd.host_config(port=proxy.port, unit=f"{u.name}.service", log_file=str(u.log),
                                     probe=False)  # the stand-in engine serves no HTTP
    b = SshBackend("gpu", cfg, ssh_config=[], connect_timeout=5.0)
    try:
        await b.start()
        cmd, boots = await driver.start_state("gpu", cfg, b)
        assert boots, "the running boot is read over ssh"
        planner = Planner(cmd.engine, Goal("max-tokens"), Bounds(max_boots=4), start=boots[-1].flags,
                          start_ready=True, start_tokens=boots[-1].metrics.max_total_num_tokens)
        said: list[str] = []
        restarts = 0

        def say(msg: str) -> None:
            nonlocal restarts
            said.append(msg)
            if "restarting the unit" in msg or msg.strip().startswith("systemctl restart"):
                restarts += 1
                if restarts == 2:  # the network goes away right before the second step's restart
                    proxy.refuse = True
                    proxy.cut()

        run = driver.TuneRun("gpu", cfg, b, planner, list(boots), timeout=30, say=say)
        result = await driver.tune(run)
    finally:
        await b.close()
        proxy.refuse = False
        await proxy.close()
    assert result.code == 3, said
    assert not result.met
    assert [s.outcome for s in result.steps] == ["ready", "error"], said
    second = result.steps[-1]
    assert second.backup is not None
    assert any("kvtui rollback gpu --restart` restores them" in m for m in said)
    written = get_flag(u.fragment.read_text(), "unit", "mem-fraction-static")
    assert written == f"{second.candidate.fraction:g}"  # the new flags are written, not restarted
    # the network is back: `kvtui rollback` restores the last ready configuration (step 1's)
    hosts = _hosts(root_host, u, tmp_path)
    argv = ["--hosts", str(hosts), "rollback", "gpu", "--restart", "--yes", "--timeout", "60"]
    assert await asyncio.to_thread(main, argv) == 0
    restored, backup_text = await asyncio.to_thread(u.fragment.read_text), await asyncio.to_thread(
        Path(second.backup).read_text)
    assert backup_text == restored
    assert get_flag(restored, "unit", "mem-fraction-static") == f"{result.steps[0].candidate.fraction:g}"
    assert read_entries()[-1]["action"] == "rollback"
