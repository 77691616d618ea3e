"""The stall detector in the core (``kvtui.boot.stall``): progress is a line that is not a known
wait/heartbeat line (or a GPU-memory change), so a vLLM engine that only repeats the shared-memory
broadcast wait is stalled, and the stall says what it keeps printing."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from kvtui.boot import Boot, BootStatus, BootTracker
from kvtui.boot.stall import (
    C10D_CONNECT,
    ENGINE_CORE,
    HEALTH_PROBE,
    PLACEMENT_GROUP,
    RAY_UNSCHEDULABLE,
    SHM_BROADCAST,
    StallDetector,
    wait_line,
)
from kvtui.engines.events import Engine, Phase
from kvtui.engines.parse import parse_bytes
from kvtui.gpu import GpuSample

# vLLM ≥ 0.10 shm_broadcast.py LONG_WAIT_TIME_LOG_MSG (the wording of test_vllm_multinode)
SHM = ("(EngineCore_DP0 pid=4188) INFO 03-10 {t} [shm_broadcast.py:542] No available shared memory broadcast block "
       "found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming "
       "work (e.g. compilation, weight/kv cache quantization).")
SHM_OLD = ("(VllmWorkerProcess pid=9) WARNING 02-02 13:21:32 [shm_broadcast.py:305] No available block found in 60 "
           "second. ")
PROGRESS = ("(Worker_TP0 pid=4250) INFO 03-10 14:00:28 [gpu_model_runner.py:5210] Starting to load model "
            "/models/Qwen3-32B...")
VLLM_LOG = Path(__file__).parent / "fixtures" / "vllm" / "vllm-0.33-qwen3-32b-tp4-ready.log"
YEAR = datetime(2026, 3, 10, 15, 0, 0)


def starting(phase: Phase = Phase.LOAD_WEIGHTS, engine: Engine = Engine.VLLM) -> Boot:
    return Boot(engine=engine, status=BootStatus.STARTING, phase=phase)


def test_the_known_wait_lines_are_told_from_progress() -> None:
    assert wait_line(SHM.format(t="14:01:28")) is SHM_BROADCAST
    assert wait_line(SHM_OLD) is SHM_BROADCAST
    assert wait_line("INFO 03-10 14:01:00 [ray_utils.py:468] Waiting for creating a placement group of specs for "
                     "20 seconds. specs=[{'GPU': 1.0, 'node:10.0.0.1': 0.001}]. Check `ray status`") is PLACEMENT_GROUP
    assert wait_line("(autoscaler +2m10s) Warning: The following resource request cannot be scheduled right now: "
                     "{'GPU': 1.0}. This is likely due to all cluster resources being claimed by actors.") \
        is RAY_UNSCHEDULABLE
    assert wait_line("[W1201 10:00:00.000000 socket.cpp:752] [c10d] The client socket has failed to connect to "
                     "[10.0.0.1]:29500 (errno: 111 - Connection refused).") is C10D_CONNECT
    assert wait_line("(APIServer pid=1) INFO 03-10 14:00:30 [utils.py:1407] Waiting for 1 local, 0 remote core "
                     "engine proc(s) to start.") is ENGINE_CORE
    assert wait_line('[2026-04-18 18:00:15] INFO:     10.0.0.9:52312 - "GET /health HTTP/1.1" 503 Service '
                     "Unavailable") is HEALTH_PROBE
    for progress in (PROGRESS,
                     '[2026-04-18 18:00:15] INFO:     127.0.0.1:52312 - "GET /model_info HTTP/1.1" 200 OK',
                     '[2026-04-18 18:00:16] INFO:     127.0.0.1:52326 - "POST /generate HTTP/1.1" 200 OK',
                     "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
                     "(Worker_TP0 pid=4250) Loading safetensors checkpoint shards:  47% Completed | 8/17"):
        assert wait_line(progress) is None, progress


def test_a_repeated_shm_wait_line_is_not_progress_and_the_stall_names_it() -> None:
    boot = starting()
    det = StallDetector(120)
    det.line(PROGRESS, None, 0.0)
    for k in range(1, 5):  # every 60 s, nothing else
        det.line(SHM.format(t=f"14:0{k}:28"), None, 60.0 * k)
        stall = det.stall(boot, 60.0 * k)
        assert (stall is None) == (k < 2)
    stall = det.stall(boot, 240.0)
    assert stall is not None
    assert stall.seconds == 240.0
    assert (stall.kind, stall.repeats) == (SHM_BROADCAST, 4)
    assert stall.text() == ("stuck: vLLM has printed 'No available shared memory broadcast block' 4× in 4m 00s — "
                            "a rank has not joined (multi-node) or is hung")
    assert det.check(boot, 240.0) == 240.0
    # worded by what it saw, for a deployment's node line and the "slower than usual" note
    assert stall.seen() == "only wait lines: 'No available shared memory broadcast block' 4×"
    assert stall.progress_text() == ("no progress for 4m 00s — it keeps printing 'No available shared memory "
                                     "broadcast block' (4×, nothing else): a rank has not joined (multi-node) or "
                                     "is hung")


def test_real_progress_between_the_waits_is_not_a_stall() -> None:
    boot = starting()
    det = StallDetector(120)
    for k in range(10):  # a wait line, then a line that moves on, every 60 s
        det.line(SHM.format(t="14:01:28"), None, 60.0 * k)
        det.line(PROGRESS, None, 60.0 * k + 1)
        assert det.stall(boot, 60.0 * k + 59) is None
    # in one batch: waits before the last progress line do not count
    det.lines([SHM.format(t="14:01:28"), SHM.format(t="14:02:28"), PROGRESS], None, 1000.0)
    assert det.repeated() is None
    assert det.quiet(1000.0) == 0.0


def test_a_silent_log_is_a_stall_without_a_repeated_line() -> None:
    det = StallDetector(120)
    det.line(PROGRESS, None, 0.0)
    stall = det.stall(starting(engine=Engine.SGLANG), 130.0)
    assert stall is not None
    assert stall.kind is None
    assert stall.text() == "no log line and no GPU-memory change for 2m 10s"
    assert stall.seen() == "no log line and no GPU-memory change"
    assert stall.progress_text() == "no progress for 2m 10s — no log line and no GPU-memory change"


def test_a_backlog_of_waits_is_stalled_at_once_by_the_log_s_own_times() -> None:
    """A console opened on a server stuck for 30 minutes reads the boot in one batch: the log's
    times (last progress line → newest wait line) say how long, not the arrival."""
    t0 = datetime(2026, 3, 10, 14, 0, 28)
    texts = [PROGRESS] + [SHM.format(t="x") for _ in range(30)]
    ts = [t0] + [t0 + timedelta(seconds=60 * (k + 1)) for k in range(30)]
    det = StallDetector(120)
    det.lines(texts, ts, 5000.0)
    stall = det.stall(starting(), 5000.0)
    assert stall is not None
    assert stall.seconds == 1800.0
    assert stall.repeats == 30
    det.line(PROGRESS, t0 + timedelta(seconds=1801), 5001.0)  # it moved on
    assert det.stall(starting(), 5001.0) is None


def test_gpu_memory_moving_is_progress_and_final_states_are_never_stalled() -> None:
    det = StallDetector(120)
    det.line(SHM.format(t="x"), None, 0.0)
    det.gpu([GpuSample(0, 1000.0, 80000.0)], 0.0)
    det.gpu([GpuSample(0, 9000.0, 80000.0)], 100.0)  # weights arriving
    assert det.stall(starting(), 200.0) is None
    assert det.stall(starting(), 220.0) is not None
    for status in (BootStatus.READY, BootStatus.FAILED, BootStatus.STOPPED):
        assert det.stall(Boot(status=status, phase=Phase.LOAD_WEIGHTS), 1e6) is None
    assert StallDetector(0).stall(starting(), 1e6) is None
    assert StallDetector(10).stall(starting(), 1e6) is None  # nothing seen yet: no claim


def _replay(lines: list[str], det: StallDetector) -> tuple[Boot, float]:
    """Feed a log line by line, the detector's clock being each line's own time."""
    tracker = BootTracker()
    now = 0.0
    for parsed in parse_bytes("\n".join(lines).encode(), clock=lambda: YEAR, all_lines=True):
        tracker.feed(parsed)
        if parsed.ts is not None:
            now = parsed.ts.timestamp()
        text = parsed.record.text if parsed.record is not None else parsed.text
        det.line(text, parsed.ts, now)
    return tracker.boots[-1], now


def test_a_real_vllm_boot_replayed_never_stalls_and_the_same_boot_hung_in_loading_does() -> None:
    log = VLLM_LOG.read_text().splitlines()
    ready = next(i for i, t in enumerate(log) if "Application startup complete" in t)
    det = StallDetector(30)  # the whole boot, line by line at its own times: never 30 s without progress
    tracker = BootTracker()
    now = 0.0
    for parsed in parse_bytes("\n".join(log[:ready]).encode(), clock=lambda: YEAR, all_lines=True):
        tracker.feed(parsed)
        now = parsed.ts.timestamp() if parsed.ts is not None else now  # a tqdm bar has no time
        assert det.stall(tracker.boots[-1], now) is None, parsed.text
        det.line(parsed.record.text if parsed.record is not None else parsed.text, parsed.ts, now)
    # the same boot, its workers hung after "Starting to load model": the engine core waits
    cut = next(i for i, t in enumerate(log) if "Starting to load model" in t) + 2
    hung = log[:cut] + [SHM.format(t=f"14:0{k}:28") for k in range(1, 5)]
    det = StallDetector(120)
    boot, now = _replay(hung, det)
    assert boot.status is BootStatus.STARTING
    stall = det.stall(boot, now)
    assert stall is not None
    assert stall.phase is boot.phase
    assert stall.repeats == 4
    assert stall.text().startswith("stuck: vLLM has printed 'No available shared memory broadcast block' 4× in 4m ")


def test_a_batch_of_several_chunks_is_read_as_one_stream() -> None:
    """The console and ``wait`` hand a batch as columns per part: the last progress line may sit in
    an earlier part than the waits after it."""
    t0 = datetime(2026, 3, 10, 14, 0, 28)
    det = StallDetector(120)
    det.feed([([PROGRESS, SHM.format(t="a")], [t0, t0 + timedelta(seconds=60)]),
              ([SHM.format(t="b")], [t0 + timedelta(seconds=120)]),
              ([SHM.format(t="c")], None)], 10.0)
    assert det.repeated() == (SHM_BROADCAST, 3)
    assert det.quiet(10.0) == 120.0  # the log's own times: progress → the newest timed wait
    det.feed([([SHM.format(t="d")], None), ([PROGRESS], [t0 + timedelta(seconds=200)])], 20.0)
    assert det.repeated() is None
    assert det.quiet(20.0) == 0.0
    det.feed([], 30.0)  # nothing: nothing changes
    assert det.quiet(30.0) == 10.0


def test_times_of_two_kinds_are_not_subtracted() -> None:
    """A progress line stamped by a wrapper (with a zone) and a wait line by the engine (naive): no
    log-time span, the arrival clock alone."""
    from datetime import UTC

    det = StallDetector(120)
    det.feed([([PROGRESS, SHM.format(t="a")], [datetime(2026, 3, 10, 14, 0, tzinfo=UTC),
                                                 datetime(2026, 3, 10, 18, 0)])], 10.0)
    assert det.quiet(10.0) == 0.0
    assert det.stall(starting(), 10.0) is None
