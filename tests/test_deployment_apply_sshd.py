"""Issue 15's "Done means" for ``apply`` over a deployment: two fake GPU hosts (each a real
OpenSSH sshd on 127.0.0.1 with its own fake systemctl, unit files, restart hook and fake SGLang
engine, as in the service tests) run the two halves of a TP16 server (``--nnodes 2 --node-rank
0|1``). ``kvtui apply r1 --set mem-fraction-static=0.88 --restart --yes`` edits both units,
restarts both and follows the merged boot to ready; a write that fails on node 1 leaves node 0's
file restored and restarts nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes_gen import sglang_node
from sshd_support import requires_sshd
from test_service_sshd import PY, Host, Unit, _start, make_unit

pytestmark = [pytest.mark.sshd, requires_sshd]
HERE = Path(__file__).parent

ENGINE = r'''#!{py}
"""A stand-in SGLang node: SGLang's argument names incl. --nnodes/--node-rank/--dist-init-addr; prints
its node's half of a TP16 boot (tests/nodes_gen.py) stamped from now."""
import argparse, os, sys, time
from datetime import datetime
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nodes_gen
args = sys.argv[1:]
if "-m" in args:
    args = args[args.index("-m") + 2:]
p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
p.add_argument("--model-path", "--model", dest="model_path")
p.add_argument("--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int, default=1)
p.add_argument("--mem-fraction-static", type=float, default=0.88)
p.add_argument("--nnodes", type=int, default=1)
p.add_argument("--node-rank", type=int, default=0)
p.add_argument("--dist-init-addr")
p.add_argument("--port", type=int, default=30000)
ns = p.parse_args(args)
time.sleep(1.0)  # a real server takes seconds before its first line (imports, CUDA init)
text = nodes_gen.at(datetime.now(), lambda: nodes_gen.sglang_node(ns.node_rank, mf=ns.mem_fraction_static,
                                                                  addr=ns.dist_init_addr))
for line in text.splitlines():
    print(line, flush=True)
    time.sleep(0.002)
'''

FRAGMENT = """\
[Unit]
Description=SGLang TP16 node {rank} (test)

[Service]
Type=simple
ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server \\
    --model-path /models/DeepSeek-R1 \\
    --tp 16 \\
    --nnodes 2 \\
    --node-rank {rank} \\
    --dist-init-addr 127.0.0.1:5000 \\
    --mem-fraction-static 0.85 \\
    --port 30000
Restart=on-failure
"""


@pytest.fixture(scope="module")
def two_hosts() -> Iterator[tuple[Host, Host]]:
    base = Path(tempfile.mkdtemp(prefix="kvtui-dep-", dir="/tmp"))
    base.chmod(0o755)
    hosts = (_start(base, "node0", "root"), _start(base, "node1", "root"))
    for h in hosts:
        engine = h.engine_dir / "python3"
        engine.write_text(ENGINE.format(py=PY))
        engine.chmod(0o755)
        shutil.copy(HERE / "nodes_gen.py", h.engine_dir / "nodes_gen.py")
        (h.engine_dir / "nodes_gen.py").chmod(0o644)
    yield hosts
    for h in hosts:
        h.sshd.stop()
    shutil.rmtree(base, ignore_errors=True)


def _unit(h: Host, rank: int, tag: str) -> Unit:
    u = make_unit(h, f"sglang-{tag}-n{rank}", dropin=False)
    u.fragment.write_text(FRAGMENT.format(rank=rank))
    u.log.write_text(sglang_node(rank))  # the previous boot: what the plan calibrates from
    subprocess.run([str(h.tools.state / "hooks" / "daemon-reload")], check=True)
    return u


def _hosts_file(tmp_path: Path, pairs: list[tuple[Host, Unit]]) -> Path:
    text = ""
    for i, (h, u) in enumerate(pairs):
        s = h.sshd
        text += (f'[hosts.h20-{"ab"[i]}]\nssh = "{s.target}"\nport = {s.port}\nidentity_file = "{s.client_key}"\n'
                 f'known_hosts = "{s.known_hosts}"\nunit = "{u.name}"\nlog_file = "{u.log}"\nengine = "sglang"\n'
                 'probe = false\n\n')  # the stand-in engine serves no HTTP
    text += '[deployments.r1]\nnodes = ["h20-a", "h20-b"]\n'
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    return path


def _apply(tmp_path: Path, hosts: Path, *argv: str, verb: str = "apply") -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "KVTUI_HOSTS")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"), HOME=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "kvtui", "--hosts", str(hosts), verb, "r1", *argv],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180, check=False,
                         stdin=subprocess.DEVNULL)
    return res.returncode, res.stdout, res.stderr


def test_apply_edits_and_restarts_both_nodes_until_the_whole_is_ready(
    tmp_path: Path, two_hosts: tuple[Host, Host]
) -> None:
    a, b = two_hosts
    ua, ub = _unit(a, 0, "ok"), _unit(b, 1, "ok")
    code, out, err = _apply(tmp_path, _hosts_file(tmp_path, [(a, ua), (b, ub)]),
                            "--set", "mem-fraction-static=0.88", "--restart", "--yes", "--timeout", "90")
    assert code == 0, out + err
    for u in (ua, ub):
        assert "--mem-fraction-static 0.88" in u.fragment.read_text()
        assert "--mem-fraction-static 0.85" not in u.fragment.read_text()
    for h, u in ((a, ua), (b, ub)):
        calls = h.tools.systemctl_calls()
        assert any(c.startswith("restart") and u.name in c for c in calls), calls
    assert "r1: the new flags are written and verified on every node" in err
    assert "the deployment is ready on all 2 nodes" in err
    assert "every node's own argument dump carries the edits" in err
    assert "Boot 1 of 1 · 2 nodes · sglang" in out
    assert "16 ranks (TP0 … TP15)" in out
    # and back, as one: every node's newest backup, restarted and followed again
    code, out, err = _apply(tmp_path, _hosts_file(tmp_path, [(a, ua), (b, ub)]), "--restart", "--yes",
                            "--timeout", "90", verb="rollback")
    assert code == 0, out + err
    for u in (ua, ub):
        assert "--mem-fraction-static 0.85" in u.fragment.read_text()
    assert "r1: the backups are restored and verified on every node" in err
    assert "the deployment is ready on all 2 nodes" in err


def test_a_write_failure_on_node_1_restores_node_0_and_restarts_nothing(
    tmp_path: Path, two_hosts: tuple[Host, Host]
) -> None:
    a, b = two_hosts
    ua, ub = _unit(a, 0, "wf"), _unit(b, 1, "wf")
    before = (ua.fragment.read_text(), ub.fragment.read_text())
    calls_before = (len(a.tools.systemctl_calls()), len(b.tools.systemctl_calls()))
    (b.tools.state / "cat.mode").write_text("error")  # node 1's transfer of the new file is cut midway
    try:
        code, out, err = _apply(tmp_path, _hosts_file(tmp_path, [(a, ua), (b, ub)]),
                                "--set", "mem-fraction-static=0.88", "--restart", "--yes", "--timeout", "60")
    finally:
        (b.tools.state / "cat.mode").unlink()
    assert code not in (0, 5), out + err
    assert (ua.fragment.read_text(), ub.fragment.read_text()) == before
    assert f"h20-a restored from {ua.fragment}.kvtui-" in err
    assert "nothing was restarted" in err
    new_calls = a.tools.systemctl_calls()[calls_before[0]:] + b.tools.systemctl_calls()[calls_before[1]:]
    assert not any(c.startswith("restart") for c in new_calls), new_calls
