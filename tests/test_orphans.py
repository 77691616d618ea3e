"""Orphaned engine processes (issue 24): the pure classification from ``ps`` output."""

from __future__ import annotations

from kvtui.engines import orphans as o
from kvtui.gpu import GpuProcess

# vLLM 0.32 CPU after `kill -9` of the API server (4242, started with setsid: the session leader):
# EngineCore and Worker live on under init, in its session; another server's orphan (session 7000)
PS_VLLM_KILLED = """\
      1       0       1  1200 /sbin/init
   4100       1    4100  3000 bash /srv/start-vllm.sh
   4243       1    4242 2980000 VLLM::EngineCore
   4250    4243    4242 150000 VLLM::Worker_TP0
   5000    4100    4100  9000 sleep 100
   7001       1    7000  9000 VLLM::EngineCore
"""

# a healthy vLLM: the API server and its helpers
PS_VLLM_RUNNING = """\
      1       0       1  1200 /sbin/init
   4242       1    4242 400000 /opt/venv/bin/python /opt/venv/bin/vllm serve /models/tiny --port 8000
   4243    4242    4242 2980000 VLLM::EngineCore
   4250    4243    4242 150000 VLLM::Worker_TP0
"""

# SGLang 0.5: launch_server killed; a scheduler per TP rank and the detokenizer left
PS_SGLANG = """\
      1       0       1  1200 /sbin/init
    700       1     699  1200 sglang::scheduler_TP0
    701       1     699  1200 sglang::scheduler_TP1
    702       1     699  1200 sglang::detokenizer
    900       1     900  1200 python3 -m sglang.launch_server --model-path /m --tp 2
    901     900     900  1200 sglang::scheduler_TP0
garbage line
"""


def test_parse_ps_reads_pid_ppid_rss_and_the_title() -> None:
    rows = o.parse_ps(PS_VLLM_KILLED)
    assert [r.pid for r in rows] == [1, 4100, 4243, 4250, 5000, 7001]
    assert rows[2] == o.ProcRow(4243, 1, "VLLM::EngineCore", 2980000, 4242)
    assert len(o.parse_ps(PS_VLLM_KILLED, limit=2)) == 2


def test_vllm_helpers_without_their_api_server_are_orphans_on_a_cpu_host() -> None:
    found = o.find_orphans(o.parse_ps(PS_VLLM_KILLED), server_pids=set(), session=4242)
    assert [(x.pid, x.title, x.engine) for x in found] == [
        (4243, "VLLM::EngineCore", "vllm"), (4250, "VLLM::Worker_TP0", "vllm")]
    assert found[0].holds == "2,910 MiB of RAM"
    assert o.kill_command(found) == "kill 4243 4250; sleep 10; kill -9 4243 4250 2>/dev/null"
    text = o.refusal_text(found)
    assert "PID 4243 (VLLM::EngineCore" in text
    assert "kill 4243 4250" in text
    assert "--force" in text


def test_a_running_server_s_helpers_are_not_orphans() -> None:
    rows = o.parse_ps(PS_VLLM_RUNNING)
    assert o.find_orphans(rows, session=4242) == []  # its server is alive, PIDs unknown
    assert o.find_orphans(rows, server_pids={4242}, session=4242) == []


def test_helpers_under_a_tracked_server_pid_are_not_orphans() -> None:
    rows = [o.ProcRow(10, 1, "bash /srv/run.sh", sid=10), o.ProcRow(11, 10, "VLLM::EngineCore", sid=10)]
    assert o.find_orphans(rows, server_pids={10}, session=10) == []
    assert [x.pid for x in o.find_orphans(rows, server_pids=set(), session=10)] == [11]


def test_on_a_cpu_host_only_the_server_session_s_orphans_count() -> None:
    rows = o.parse_ps(PS_VLLM_KILLED)
    assert [x.pid for x in o.find_orphans(rows, session=7000)] == [7001]  # that server's, not 4242's
    assert o.find_orphans(rows) == []  # no pid file: whose they are is unknown


def test_sglang_schedulers_of_a_dead_launch_server_are_orphans_not_the_live_one_s() -> None:
    found = o.find_orphans(o.parse_ps(PS_SGLANG), session=699)
    assert [(x.pid, x.engine) for x in found] == [(700, "sglang"), (701, "sglang"), (702, "sglang")]


def test_on_a_gpu_host_only_orphans_holding_gpu_memory_count() -> None:
    gpu = [GpuProcess(4243, 30000.0, 0, None, "python"), GpuProcess(4243, 500.0, 1, None, "python")]
    found = o.find_orphans(o.parse_ps(PS_VLLM_KILLED), gpu=gpu)
    assert [x.pid for x in found] == [4243]
    assert found[0].used_mib == 30500.0
    assert found[0].holds == "30,500 MiB of GPU 0"
    assert "end them: kill 4243" in o.hint_text(found)


def test_ordinary_processes_and_servers_are_never_orphans() -> None:
    assert o.helper_engine("python3 train.py") is None
    assert o.helper_engine("VLLM::EngineCore_DP1") == "vllm"
    assert o.helper_engine("MYPREFIX::Worker_TP3_EP3") == "vllm"
    assert o.is_server("/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model m")
    assert not o.is_server("VLLM::EngineCore")
    rows = [o.ProcRow(5, 1, "/usr/bin/python3 -m sglang.launch_server --model-path m", sid=5)]
    assert o.find_orphans(rows, session=5) == []
