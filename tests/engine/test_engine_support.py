"""The engine suite's own helpers that need no engine: ``one_burst_at_a_time`` keeps two xdist
workers' bursts apart (two vLLM CPU servers serving a burst each on two cores starved each
other's ``/metrics``: ``test_vllm_serving`` read no sample inside its burst); ``Burst.cancel``
ends a burst's requests by closing their connections (vLLM aborts a completion whose client left)."""

from __future__ import annotations

import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from engine_support import Burst, one_burst_at_a_time

HOLDER = """
import sys
sys.path.insert(0, sys.argv[1])
from engine_support import Burst, one_burst_at_a_time
with one_burst_at_a_time():
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


def test_a_second_burst_waits_for_the_first_workers_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    run = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", run)
    here = str(Path(__file__).resolve().parent)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, here], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline() == "holding\n"  # the other worker's burst runs
        with pytest.raises(AssertionError, match="another worker's burst held"), one_burst_at_a_time(timeout=1.0):
            pass
        holder.stdin.close()  # its burst ends
        assert holder.wait(timeout=60) == 0
        with one_burst_at_a_time(timeout=60):
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        (Path(tempfile.gettempdir()) / f"kvtui-engine-burst-{run}.lock").unlink(missing_ok=True)


def test_without_xdist_there_is_nothing_to_wait_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    with one_burst_at_a_time(timeout=0.0):
        pass


class _Silent(socketserver.ThreadingTCPServer):
    """Reads each request and never answers, until the client goes away (a server busy with the
    burst); counts the connections and the clients that left."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Hold)
        self.lock = threading.Lock()
        self.accepted = 0
        self.left = 0


class _Hold(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _Silent)
        with server.lock:
            server.accepted += 1
        conn: socket.socket = self.request
        conn.settimeout(60)
        try:
            while conn.recv(65536):  # the request, then nothing until the client closes
                pass
        except OSError:
            pass
        with server.lock:
            server.left += 1


def _until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_cancelled_burst_ends_its_requests_and_leaves_the_server() -> None:
    server = _Silent()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        load = Burst(server.server_address[1], "model", 4, timeout=120)
        _until(lambda: server.accepted == 4, 60, "the burst's 4 requests did not connect")
        assert not load.join(0.2)  # no answer: they would wait out their 120 s
        t0 = time.monotonic()
        load.cancel(timeout=30)
        assert not load.alive()
        assert time.monotonic() - t0 < 30
        _until(lambda: server.left == 4, 30, "the server did not see the 4 clients leave")  # vLLM aborts them then
    finally:
        server.shutdown()
        server.server_close()
