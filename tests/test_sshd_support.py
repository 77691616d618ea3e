"""The test infrastructure itself under parallel runs (pytest-xdist, several runs on one machine):
a port taken between ``free_port()`` and sshd's bind is not mistaken for the test's own daemon."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import sshd_support
from sshd_support import PortInUse, requires_sshd, start_sshd

pytestmark = [pytest.mark.sshd, requires_sshd]


def _squatter() -> socket.socket:
    """A listener on a loopback port that answers like an SSH server (another worker's sshd)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


def test_a_port_taken_before_sshd_binds_it_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _squatter() as taken:
        busy = taken.getsockname()[1]
        ports = iter([busy])
        real_free_port = sshd_support.free_port
        monkeypatch.setattr(sshd_support, "free_port", lambda: next(ports, None) or real_free_port())
        inst = start_sshd(tmp_path / "sshd")
        try:
            assert inst.port != busy
            assert f"Bind to port {busy} on 127.0.0.1 failed: Address already in use" in inst.log_text()
            assert f"[127.0.0.1]:{inst.port} " in inst.known_hosts.read_text()
            assert f"Port {inst.port}\n" in inst.config_path.read_text()
            done = inst.run("echo reached")
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "reached"
        finally:
            inst.stop()


def test_a_chosen_port_that_is_taken_fails_clearly(tmp_path: Path) -> None:
    with _squatter() as taken:
        busy = taken.getsockname()[1]
        with pytest.raises(PortInUse, match=f"port {busy} was taken"):
            start_sshd(tmp_path / "sshd", port=busy)
