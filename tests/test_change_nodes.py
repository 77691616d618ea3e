"""Issue 23: one execution path for a change of N >= 1 nodes (``service.execute_nodes``). A host and
a ``[deployments.NAME]`` of one node go through the same steps: ``kvtui apply`` and ``kvtui
rollback`` print the same lines on stdout and stderr (apart from the names, the times and the
backups' names) and end with the same exit codes."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from kvtui.cli import main

HOSTS = """
[hosts.solo]
demo = true
demo_speed = 400.0

[hosts.node-a]
demo = true
demo_speed = 400.0

[deployments.dep-a]
nodes = ["node-a"]
"""


def _same(text: str) -> str:
    """The text with the names, times, durations and boot numbers made alike, without the new
    boot's phase lines and heartbeats (which phases a read of the log catches depends on timing)."""
    text = "".join(ln for ln in text.splitlines(True) if not ln.startswith(("boot: ", "… still waiting")))
    text = re.sub(r"\b(dep-a|node-a|solo)\b", "NAME", text)  # the state directory too
    text = re.sub(r"kvtui-\d{8}T[\d.]+Z", "kvtui-TIME", text)
    text = re.sub(r"\d+(\.\d+)? (ms|s)\b", "N \\2", text)
    return re.sub(r"boot #\d+", "boot #N", text)


def _run(hosts: Path, name: str, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str, str]]:
    monkeypatch.setenv("XDG_STATE_HOME", str(hosts.parent / name))  # its own history: the same calibration
    out: list[tuple[int, str, str]] = []
    for argv in (["apply", name, "--set", "mem-fraction-static=0.84", "--restart", "--yes", "--timeout", "60"],
                 ["rollback", name, "--restart", "--yes", "--timeout", "60"],
                 ["apply", name, "--set", "mem-fraction-static=0.83", "--yes"]):
        code = main(["--hosts", str(hosts), *argv])
        cap = capsys.readouterr()
        out.append((code, _same(cap.out), _same(cap.err)))
    return out


def test_a_host_and_a_one_node_deployment_print_the_same_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(HOSTS)
    host = _run(hosts, "solo", capsys, monkeypatch)
    one = _run(hosts, "dep-a", capsys, monkeypatch)
    assert [c for c, _, _ in host] == [0, 0, 0]
    assert "NAME: applied; the new boot is ready" in host[0][1]
    assert "the new boot's own argument dump carries the edits" in host[0][2]
    for h, o in zip(host, one, strict=True):
        assert o[0] == h[0]
        for a, b in ((h[1], o[1]), (h[2], o[2])):  # stdout, stderr
            assert b == a, "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True)))
