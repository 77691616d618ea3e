"""kvtui's own records about the source (a gap of unread lines, a start not in the log, the running
process's command line) and what the boot tracker makes of them (issue 21)."""

from __future__ import annotations

from datetime import datetime

from kvtui.boot.model import BootStatus
from kvtui.bootlog import BootLog
from kvtui.engines import source_records as sr
from kvtui.engines.events import LogGap, LogRecord, RunningCommand, StartMissing
from kvtui.engines.exit_record import EXIT_IDENT

DECODE = ("[2026-12-06 05:00:0{s} TP0] Decode batch, #running-req: 12, #token: {n}, token usage: {u}, "
          "cuda graph: True, gen throughput (token/s): 900.10, #queue-req: 0")
ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.6", "--tp", "8",
        "--mem-fraction-static=0.88", "--context-length", "200000", "--trust-remote-code"]


def _boots(records: list[LogRecord]) -> BootLog:
    log = BootLog()
    log.feed_all(records)
    log.finish()
    return log


def test_each_record_reads_back_as_its_event() -> None:
    where = sr.gap_where(bytes="123-247000000", path="/var/log/my server [a].log")
    gap = sr.gap_record(1998700, where, datetime(2026, 12, 4, 10), datetime(2026, 12, 6, 6, 0, 1))
    assert gap.ident == EXIT_IDENT
    assert gap.cursor is None
    ev = sr.parse_source_record(gap.text)
    assert isinstance(ev, LogGap)
    assert ev.lines == 1998700
    assert ev.last_ts == datetime(2026, 12, 6, 6, 0, 1)
    assert sr.gap_range(ev.where) == {"bytes": "123-247000000", "path": "/var/log/my server [a].log"}
    assert sr.parse_source_record(sr.gap_text(None, "after=x")) == LogGap(None, "after=x")
    miss = sr.parse_source_record(sr.start_missing_text("rotated before 2026-06-02 14:33"))
    assert miss == StartMissing("rotated before 2026-06-02 14:33")
    cmd = sr.parse_source_record(sr.command_text([*ARGV, "--chat-template", "a b's"], pid=4242))
    assert cmd == RunningCommand(tuple([*ARGV, "--chat-template", "a b's"]), 4242)
    assert sr.parse_source_record("kvtui: something else") is None


def test_an_engine_line_that_says_the_same_is_not_a_record() -> None:
    log = _boots([LogRecord(sr.start_missing_text("x"))])  # no kvtui ident: a plain line
    assert log.boots == []


def test_a_start_not_in_the_log_is_a_serving_boot_with_the_process_flags_and_an_estimated_pool() -> None:
    log = _boots([
        sr.start_missing_record("rotated before 2026-06-02 14:33"),
        sr.command_record(ARGV, pid=4242),
        LogRecord(DECODE.format(s=0, n=150000, u="0.78")),
        sr.gap_record(5000, sr.gap_where(bytes="10-20")),
        LogRecord(DECODE.format(s=1, n=180000, u="0.94")),
    ])
    [boot] = log.boots
    assert boot.status is BootStatus.READY
    assert boot.start_missing == "rotated before 2026-06-02 14:33"
    assert boot.flags_from == "process"
    assert boot.flags["mem_fraction_static"] == 0.88
    assert boot.flags["tp_size"] == 8
    assert boot.flags["context_length"] == 200000
    assert boot.flags["trust_remote_code"] is True
    assert boot.skipped_lines == 5000
    # 180000 / 0.94 = 191,489; usage is printed to 2 decimals: within ±0.005 / 0.94
    assert boot.live.pool_tokens_est == 191489
    assert boot.live.pool_tokens_err is not None
    assert 900 < boot.live.pool_tokens_err < 1100
    doc = boot.to_json()
    assert doc["start_missing"] == "rotated before 2026-06-02 14:33"
    assert doc["skipped_lines"] == 5000


def test_serving_lines_with_no_start_never_make_a_starting_boot() -> None:
    log = _boots([LogRecord(DECODE.format(s=0, n=1000, u="0.10"))])
    [boot] = log.boots
    assert boot.status is BootStatus.READY
    assert boot.start_missing == "the log begins while it serves"


def test_a_boot_read_from_its_start_keeps_its_own_flags_and_ignores_a_late_start_missing() -> None:
    args = ("[2026-12-06 05:00:00] server_args=ServerArgs(model_path='m', tp_size=2, "
            "mem_fraction_static=0.8)")
    log = _boots([LogRecord(args), sr.start_missing_record("x"), sr.command_record(ARGV)])
    [boot] = log.boots
    assert boot.start_missing is None
    assert boot.flags["mem_fraction_static"] == 0.8
    assert boot.flags_from == "log"
    assert "start_missing" not in boot.to_json()


def test_an_oom_after_serving_lines_with_no_start_is_a_serving_oom() -> None:
    """The last lines of a server that served and then ran out of memory: no phase line, but it
    served — oom_runtime in ready (it was 'unknown', in no phase, once serving lines made a
    serving boot instead of a starting one)."""
    lines = [DECODE.format(s=i, n=20000 + i, u="0.40") for i in range(3)] + [
        "[2026-12-06 05:00:49] Scheduler hit an exception: Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.40 GiB. GPU 0 has a total capacity of "
        "79.11 GiB of which 1.12 GiB is free.",
        "[2026-12-06 05:00:49] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
    ]
    log = _boots([LogRecord(t) for t in lines])
    [boot] = log.boots
    assert boot.status is BootStatus.FAILED
    assert boot.failure is not None
    assert boot.failure.kind.value == "oom_runtime"
    assert boot.failure.phase is not None
    assert boot.failure.phase.value == "ready"
