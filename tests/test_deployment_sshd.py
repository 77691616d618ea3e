"""Issue 15's "Done means" for ``wait`` over a deployment: two fake GPU hosts, each a real OpenSSH
sshd on 127.0.0.1 with its own fake systemctl, its own unit and its own journal (written with
systemd-journal-remote, as the service tests do), run the two halves of a TP16 boot. ``kvtui
wait NAME`` (the real CLI, in a subprocess) exits 0 when both are ready, and 1 with the hang
diagnosis naming node 1 when node 1's unit is stopped or never started; 5 at its timeout when
node 1 is up but silent (the diagnosis names it then too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from nodes_gen import at, sglang_node
from sshd_support import FakeTools, JournalWriter, SshdInstance, requires_sshd, start_sshd

pytestmark = [pytest.mark.sshd, requires_sshd]
FIXTURES = Path(__file__).parent / "fixtures"
STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"  # systemd's "unit is starting" MESSAGE_ID


class FakeNode:
    """One GPU host: an sshd whose sessions find the fake tools first, a unit, a journal."""

    def __init__(self, root: Path) -> None:
        self.tools = FakeTools.create(root / "tools")
        self.tools.set_gpus((FIXTURES / "nvidia-smi-query-8gpu.csv").read_text())
        self.sshd: SshdInstance = start_sshd(root / "sshd", user="root", path_prefix=self.tools.bin_dir,
                                             extra_env={"KVTUI_FAKE_STATE": str(self.tools.state)})
        self.sshd.assert_fake_path()
        self.unit = ""
        self.inv = ""
        self.writer: JournalWriter | None = None

    def new_unit(self, *, active: str = "active", env: str = "") -> None:
        self.unit = f"sglang-{uuid.uuid4().hex[:8]}.service"
        self.inv = uuid.uuid4().hex
        self.writer = JournalWriter(self.tools.journal_dir / self.unit).start()
        (self.tools.bin_dir / "journalctl").write_text(
            f"#!/bin/sh\nexec /usr/bin/journalctl --directory={self.writer.directory} \"$@\"\n")
        self.tools.set_unit(self.unit, InvocationID=self.inv, LoadState="loaded", ActiveState=active,
                            Environment=env)

    def systemd(self, text: str, **extra: str) -> None:
        assert self.writer is not None
        self.writer.write(text, _PID=1, SYSLOG_IDENTIFIER="systemd", UNIT=self.unit, INVOCATION_ID=self.inv, **extra)
        self.writer.flush()

    def log(self, text: str) -> None:
        assert self.writer is not None
        for line in text.splitlines():
            self.writer.write(line, _SYSTEMD_UNIT=self.unit, _PID=880, _SYSTEMD_INVOCATION_ID=self.inv)
        self.writer.flush()

    def host_table(self, name: str) -> str:
        s = self.sshd
        return (f"[hosts.{name}]\nssh = \"{s.target}\"\nport = {s.port}\nidentity_file = \"{s.client_key}\"\n"
                f"known_hosts = \"{s.known_hosts}\"\nunit = \"{self.unit}\"\nengine = \"sglang\"\n\n")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeNode, FakeNode]]:
    a = FakeNode(tmp_path_factory.mktemp("node-a"))
    b = FakeNode(tmp_path_factory.mktemp("node-b"))
    yield a, b
    a.sshd.stop()
    b.sshd.stop()


def _hosts(tmp_path: Path, a: FakeNode, b: FakeNode, hang_seconds: float = 180) -> Path:
    path = tmp_path / "hosts.toml"
    # a journal, no server behind node 0: not probed (the probe of node 0: test_wait_one_path.py)
    path.write_text(a.host_table("h20-a").replace("\n\n", "\nprobe = false\n\n") + b.host_table("h20-b")
                    + f'[deployments.r1]\nnodes = ["h20-a", "h20-b"]\nhang_seconds = {hang_seconds}\n')
    return path


def _wait(tmp_path: Path, hosts: Path, *argv: str, limit: float = 90) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "KVTUI_HOSTS")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"), HOME=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "kvtui", "--hosts", str(hosts), "wait", "r1", *argv],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=limit, check=False)
    return res.returncode, res.stdout, res.stderr


def _start(node: FakeNode) -> None:
    node.systemd(f"Started {node.unit} - SGLang.", MESSAGE_ID="39f53479d3a045ac8e11786248231fbf")


def test_wait_on_two_nodes_is_ready_when_both_are(tmp_path: Path, nodes: tuple[FakeNode, FakeNode]) -> None:
    a, b = nodes
    a.new_unit()
    b.new_unit()
    start = datetime.now() - timedelta(minutes=9)
    _start(a)
    _start(b)
    a.log(at(start, lambda: sglang_node(0)))
    b.log(at(start, lambda: sglang_node(1)))
    code, out, err = _wait(tmp_path, _hosts(tmp_path, a, b), "--json", "--timeout", "60")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "ready"
    assert [r for r in doc["ranks"] if r.startswith("TP")] == [f"TP{i}" for i in range(16)]
    assert [(n["name"], n["node_rank"]) for n in doc["nodes"]] == [("h20-a", 0), ("h20-b", 1)]
    assert doc["figure_nodes"]["avail_before_load_gib"] == 1
    assert "r1: ready on all 2 nodes" in err


def test_a_node_whose_unit_was_stopped_fails_the_wait_with_its_name(
    tmp_path: Path, nodes: tuple[FakeNode, FakeNode]
) -> None:
    a, b = nodes
    a.new_unit()
    b.new_unit(active="inactive")
    start = datetime.now() - timedelta(seconds=30)
    _start(a)
    _start(b)
    a.log(at(start, lambda: sglang_node(0, stall_node0=True)))  # waits at NCCL init
    b.log(at(start, lambda: sglang_node(1, stall=True)))  # its arguments, then nothing
    b.systemd(f"Stopping {b.unit} - SGLang...")
    b.systemd(f"Stopped {b.unit} - SGLang.")
    code, out, err = _wait(tmp_path, _hosts(tmp_path, a, b), "--timeout", "60")
    assert code == 1, err
    assert "  - node 1 (h20-b): its unit is not running (inactive)" in err
    # no decision before both backlogs are read (a loaded machine once read node 1's stop before
    # node 0's first lines: "node 0 has not started"; tests/test_deployment_backlog.py)
    assert "kvtui wait: r1: hung: node 1 (h20-b) stopped at launch; node 0 (h20-a) waiting" in err
    assert "at NCCL init (distributed init)" in err
    assert "Boot 1 of 1 · 2 nodes" in out


def test_a_node_that_never_started_is_named_once_the_bound_passes(
    tmp_path: Path, nodes: tuple[FakeNode, FakeNode]
) -> None:
    a, b = nodes
    a.new_unit(env="NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0")
    b.new_unit(active="failed", env="NCCL_SOCKET_IFNAME=ib0 GLOO_SOCKET_IFNAME=eth0")
    _start(a)
    a.log(at(datetime.now() - timedelta(seconds=20), lambda: sglang_node(0, stall_node0=True)))
    code, _out, err = _wait(tmp_path, _hosts(tmp_path, a, b, hang_seconds=2), "--timeout", "60")
    assert code == 1, err
    assert "hung: node 1 (h20-b) has not started (no boot in its log); node 0 (h20-a) waiting" in err
    assert "  - node 1 (h20-b): its unit is not running (failed)" in err
    assert ("  - NCCL_SOCKET_IFNAME differs between the nodes' units: node 0 (h20-a) eth0, node 1 (h20-b) ib0"
            in err)


def test_a_silent_node_with_a_running_unit_times_out_with_5_and_the_diagnosis(
    tmp_path: Path, nodes: tuple[FakeNode, FakeNode]
) -> None:
    a, b = nodes
    a.new_unit()
    b.new_unit()
    start = datetime.now() - timedelta(seconds=20)
    _start(a)
    _start(b)
    a.log(at(start, lambda: sglang_node(0, stall_node0=True)))
    b.log(at(start, lambda: sglang_node(1, stall=True)))
    # the timeout leaves room for both nodes' logs to be read on a loaded machine (at load 14 a
    # 6 s timeout came before node 1's journal was: then the diagnosis says its log is unread)
    code, _out, err = _wait(tmp_path, _hosts(tmp_path, a, b, hang_seconds=1), "--timeout", "15")
    assert code == 5, err
    assert "hang: node 1 (h20-b) has not started distributed init (it is at launch); node 0 (h20-a) waiting" in err
