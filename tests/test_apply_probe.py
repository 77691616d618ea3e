"""``kvtui apply NAME --restart`` on a ``[deployments.NAME]`` proves "ready" with a real request, as
``apply HOST --restart`` (``--probe``/``--no-probe`` over the host's ``probe``, tested here) and the
deployment console do: once the merged boot is ready, node 0's
server (the one that serves HTTP) is asked for one token (``service.execute_nodes``: a host's probe,
said with node 0's name); no
answer fails the change as ``not_serving`` (exit 1, "ready on every node, but node 0's server does
not answer"); ``--no-probe`` (or node 0's ``probe = false``) takes the log's word.

- the two-node demo (``deepseek-r1-2node``): node 0's simulated server answers; asked for a model
  it does not serve it answers 404;
- two ``local = true`` script hosts whose stand-in engine prints its node's half of a TP16 boot to
  ready and serves no HTTP: nothing listens on the port its arguments name.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_demo_2node import _hosts

from kvtui.cli import main

HERE = Path(__file__).parent


def _kvtui(hosts: Path, *argv: str) -> int:
    return main(["--hosts", str(hosts), *argv])


@pytest.fixture
def demo_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = tmp_path / "hosts.toml"
    path.write_text(_hosts())
    return path


def test_apply_restart_on_the_two_node_demo_asks_node_0_for_one_token(
        demo_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _kvtui(demo_hosts, "apply", "r1", "--set", "mem-fraction-static=0.84", "--restart", "--yes",
                  "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "the deployment is ready on all 2 nodes" in err
    assert "r1-a: the log says ready; asking the server on port 30000 for one token" in err
    assert re.search(r"r1-a: ✔ answered a 1-token request in \d+ ms", err), err
    assert "READY · 16 ranks" in out
    # --no-probe: the log's word, and said
    code = _kvtui(demo_hosts, "rollback", "r1", "--restart", "--yes", "--timeout", "60", "--no-probe")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "asking the server" not in err  # as a host's: said by nothing


def test_a_deployment_whose_node_0_does_not_answer_fails_not_serving(
        demo_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the demo's server answers 404 to a model it does not serve
    demo_hosts.write_text(_hosts().replace('[hosts.r1-a]\n', '[hosts.r1-a]\nprobe_model = "no-such-model"\n', 1))
    code = _kvtui(demo_hosts, "apply", "r1", "--set", "mem-fraction-static=0.84", "--restart", "--yes",
                  "--timeout", "60")
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "the deployment is ready on all 2 nodes" in err
    assert "r1-a: ✘ not serving: /v1/completions: HTTP 404" in err
    assert ("kvtui apply: r1: ready on every node, but node 0's server does not answer: the new boot is failed "
            "(not_serving)") in err
    assert "not_serving" in out  # the merged boot as printed: failed, with the kind
    assert "READY · 16 ranks" not in out
    # --rollback-on-failure acts on it; the rolled-back boot is asked too (and does not answer either)
    code = _kvtui(demo_hosts, "apply", "r1", "--set", "mem-fraction-static=0.83", "--restart", "--yes",
                  "--timeout", "60", "--rollback-on-failure")
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "rolling back every node (--rollback-on-failure)" in err
    assert err.count("r1-a: ✘ not serving: /v1/completions: HTTP 404") == 2, err
    assert "r1: the new boot failed" in out, out  # the rolled-back boot failed too (a host's headline then)
    # --no-probe over probe_model: the log's word
    code = _kvtui(demo_hosts, "apply", "r1", "--set", "mem-fraction-static=0.83", "--restart", "--yes",
                  "--timeout", "60", "--no-probe")
    _out, err = capsys.readouterr()
    assert code == 0, err
    assert "asking the server" not in err


def test_probe_and_no_probe_over_the_hosts_probe_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """One host: ``--no-probe`` takes the log's word over ``probe = true``; ``--probe`` asks over
    ``probe = false`` (the demo's server answers 404 for a model it does not serve)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[hosts.demo]\ndemo = true\ndemo_speed = 400.0\nprobe_model = "no-such-model"\n')
    code = _kvtui(hosts, "apply", "demo", "--set", "mem-fraction-static=0.84", "--restart", "--yes",
                  "--timeout", "60", "--no-probe")
    _out, err = capsys.readouterr()
    assert code == 0, err
    assert "asking the server" not in err
    hosts.write_text('[hosts.demo]\ndemo = true\ndemo_speed = 400.0\nprobe_model = "no-such-model"\n'
                     "probe = false\n")
    code = _kvtui(hosts, "rollback", "demo", "--restart", "--yes", "--timeout", "60", "--probe")
    _out, err = capsys.readouterr()
    assert code == 1, err
    assert "✘ not serving: /v1/completions: HTTP 404" in err


# ---------------------------------------------------------------------------------------------
# two local script hosts: a stand-in engine that says ready and serves nothing
# ---------------------------------------------------------------------------------------------

ENGINE = r'''#!{py}
"""A stand-in SGLang node: prints its node's half of a TP16 boot (tests/nodes_gen.py), stamped from
now, with the --port it was given in its argument dump; then sits (a server that serves nothing)."""
import argparse, sys, time
from datetime import datetime
sys.path.insert(0, {tests!r})
import nodes_gen
args = sys.argv[1:]
if "-m" in args:
    args = args[args.index("-m") + 2:]
p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
p.add_argument("--model-path", "--model", dest="model_path")
p.add_argument("--tp", "--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
p.add_argument("--mem-fraction-static", type=float, default=0.88)
p.add_argument("--nnodes", type=int, default=1)
p.add_argument("--node-rank", type=int, default=0)
p.add_argument("--dist-init-addr")
p.add_argument("--port", type=int, default=30000)
ns = p.parse_args(args)
text = nodes_gen.at(datetime.now(), lambda: nodes_gen.sglang_node(ns.node_rank, mf=ns.mem_fraction_static,
                                                                  addr=ns.dist_init_addr))
for line in text.replace("30000", str(ns.port)).splitlines():
    print(line, flush=True)
time.sleep(600)
'''

LAUNCH = """#!/bin/sh
exec {python} -m sglang.launch_server \\
    --model-path /models/DeepSeek-R1 \\
    --tp 16 \\
    --nnodes 2 \\
    --node-rank {rank} \\
    --dist-init-addr 127.0.0.1:5000 \\
    --mem-fraction-static 0.85 \\
    --port {port}
"""


def free_port() -> int:
    """A loopback port nothing listens on (bound and closed: nothing else is told of it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill(pid_file: Path) -> None:
    try:
        os.killpg(int(pid_file.read_text().strip()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


@pytest.fixture
def silent_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, int]]:
    """hosts.toml of deployment r1 over two local script hosts running the stand-in (ready on both
    nodes already: the previous boot the plans calibrate from), and the port node 0 names."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    port = free_port()
    engine = tmp_path / "bin" / "python3"
    engine.parent.mkdir()
    engine.write_text(ENGINE.format(py=sys.executable, tests=str(HERE)))
    engine.chmod(0o755)
    text, pids = "", []
    for rank in (0, 1):
        d = tmp_path / f"n{rank}"
        d.mkdir()
        launch, log, pid = d / "launch.sh", d / "server.log", d / "server.pid"
        launch.write_text(LAUNCH.format(python=engine, rank=rank, port=port))
        launch.chmod(0o755)
        start = f"setsid nohup {shlex.quote(str(launch))} >> {shlex.quote(str(log))} 2>&1 < /dev/null & echo $! > {pid}"
        text += (f'[hosts.n{rank}]\nlocal = true\nengine = "sglang"\nlog_file = "{log}"\nlaunch_script = "{launch}"\n'
                 f"start_command = {start!r}\nstop_command = {f'kill $(cat {pid})'!r}\n\n")
        subprocess.run(start, shell=True, check=True)
        pids.append((pid, log))
    text += '[deployments.r1]\nnodes = ["n0", "n1"]\n'
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(text)
    try:
        deadline = time.monotonic() + 60
        last = ("The server is fired up", "TP15] Capture cuda graph end")  # each node's last line
        while not all(end in (log.read_text() if log.exists() else "")
                      for end, (_, log) in zip(last, pids, strict=True)):
            assert time.monotonic() < deadline, [log.read_text() for _, log in pids if log.exists()]
            time.sleep(0.05)
        yield hosts, port
    finally:
        for pid, _ in pids:
            _kill(pid)


def test_a_deployment_whose_port_has_no_listener_fails_not_serving(
        silent_nodes: tuple[Path, int], capsys: pytest.CaptureFixture[str]) -> None:
    hosts, port = silent_nodes
    # the probe gets min(--timeout, 60 s): retried while the port refuses, as for a server still starting
    code = _kvtui(hosts, "apply", "r1", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                  "--timeout", "30")
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "the deployment is ready on all 2 nodes" in err
    assert f"n0: the log says ready; asking the server on port {port} for one token" in err
    assert re.search(rf"n0: ✘ not serving: no healthy answer within \d+ s \(.*{port}", err), err
    assert "ready on every node, but node 0's server does not answer: the new boot is failed (not_serving)" in err
    assert "not_serving" in out
    for rank in (0, 1):  # the edit is written (the change failed as not serving; nothing rolled it back)
        assert "--mem-fraction-static 0.88" in (hosts.parent / f"n{rank}" / "launch.sh").read_text()
