"""The server's main process among its process tree is the tree's root, not the smallest PID
(PIDs wrap around: pid_max is 32768 on many hosts, and a worker started after the wrap has a
smaller number than the server that forked it — the engine suite once read a worker's environment
for the server's)."""

from __future__ import annotations

import os
import subprocess
import sys

from kvtui.hosts import shellcmd as cmds


def test_the_root_of_the_tree_is_the_main_process_even_when_a_worker_has_a_smaller_pid() -> None:
    # server 26144 forked workers 6547 and 6550 after the PIDs wrapped; 6550 forked 6551
    parents = {26144: 1, 6547: 26144, 6550: 26144, 6551: 6550}
    assert cmds.main_process([6547, 6550, 6551, 26144], parents) == 26144
    assert min(parents) != 26144  # what the old rule picked


def test_several_roots_the_one_with_most_descendants_wins() -> None:
    parents = {10: 1, 11: 10, 12: 10, 500: 1}
    assert cmds.main_process([500, 10, 11, 12], parents) == 10
    assert cmds.main_process([], {}) is None
    assert cmds.main_process([7, 8], {}) == 7  # nothing known: the first given


def test_the_command_reads_each_processes_parent_from_proc() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={**os.environ, "KVTUI_TEST_MARK": "child"})
    try:
        out = subprocess.run(["bash", "-c", cmds.proc_environ([os.getpid(), child.pid])], capture_output=True,
                             text=True, check=True, timeout=30).stdout
        parents = cmds.parse_proc_parents(out)
        assert parents[child.pid] == os.getpid()
        assert parents[os.getpid()] == os.getppid()
        envs = cmds.parse_proc_environ(out)
        assert envs[child.pid]["KVTUI_TEST_MARK"] == "child"
        assert cmds.main_process(envs, parents) == os.getpid()
    finally:
        child.kill()
        child.wait()
