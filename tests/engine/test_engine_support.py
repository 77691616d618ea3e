"""The engine suite's own helpers that need no engine: ``one_burst_at_a_time`` keeps two xdist
workers' bursts apart (two vLLM CPU servers serving a burst each on two cores starved each
other's ``/metrics``: ``test_vllm_serving`` read no sample inside its burst)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from engine_support import one_burst_at_a_time

HOLDER = """
import sys
sys.path.insert(0, sys.argv[1])
from engine_support import one_burst_at_a_time
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
