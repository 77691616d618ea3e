"""BootTracker: boot splitting, phases, failure classification, figure aggregation, bounds."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from kvtui.boot import MAX_TRACEBACK_LINES, MAX_TRAIL, BootStatus, BootTracker, hint_for, rank_sort_key
from kvtui.engines.events import (
    BootBoundary,
    BoundaryKind,
    Engine,
    FailureKind,
    FailureText,
    LogEvent,
    LogRecord,
    Metric,
    Model,
    ParsedLine,
    Phase,
    PhaseMark,
    Progress,
    Serving,
)
from kvtui.engines.parse import LineParser

T0 = datetime(2026, 3, 4, 9, 0, 0)


def feed_text(lines: list[str], tracker: BootTracker | None = None, *, ident: str | None = None) -> BootTracker:
    tracker = tracker or BootTracker()
    parser = LineParser()
    for line in lines:
        for parsed in parser.feed(LogRecord(line, ident=ident)):
            tracker.feed(parsed)
    return tracker


def pl(
    *events: LogEvent, t: float | None = 0.0, rank: str | None = None, text: str = "x", prefixed: bool = True
) -> ParsedLine:
    ts = T0 + timedelta(seconds=t) if t is not None else None
    return ParsedLine(text=text, ts=ts, rank=rank, engine=Engine.SGLANG, events=events, prefixed=prefixed)


# ---- boots ------------------------------------------------------------------------------------------


def test_plain_lines_make_no_boot() -> None:
    tr = BootTracker()
    for i in range(10):
        tr.feed(ParsedLine(text=f"noise {i}"))
    tr.finish()
    assert tr.boots == []
    assert tr.current is None


def test_first_engine_event_starts_a_boot_and_args_attach_to_it() -> None:
    tr = BootTracker()
    upd = tr.feed(pl(PhaseMark(Phase.LAUNCH), t=0))
    assert upd.new_boot
    upd = tr.feed(pl(BootBoundary(BoundaryKind.STARTED, new_args=True), t=1))
    assert not upd.new_boot  # still in launch: the same boot
    assert len(tr.boots) == 1


def test_new_args_after_launch_start_a_new_boot_and_end_the_old_one() -> None:
    tr = feed_text(
        [
            "[2026-03-04 09:00:00] server_args=ServerArgs(tp_size=2)",
            "[2026-03-04 09:00:05 TP0] Init torch distributed begin.",
            "[2026-03-04 09:00:06 TP0] Load weight begin. avail mem=78.00 GB",
            "[2026-03-04 09:01:00] server_args=ServerArgs(tp_size=4)",
        ]
    )
    first, second = tr.boots
    assert first.status is BootStatus.STOPPED  # replaced without an error: stopped
    assert first.phases[-1].end == datetime(2026, 3, 4, 9, 1, 0)
    assert second.flags == {"tp_size": 4}
    assert second.status is BootStatus.STARTING


def test_replaced_boot_that_ended_on_an_exception_is_failed() -> None:
    tr = feed_text(
        [
            "[2026-03-04 09:00:00] server_args=ServerArgs(tp_size=1)",
            "[2026-03-04 09:00:05] Load weight begin. avail mem=78.00 GB",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "[2026-03-04 09:01:00] server_args=ServerArgs(tp_size=1)",
        ]
    )
    first, _second = tr.boots
    assert first.status is BootStatus.FAILED
    assert first.failure is not None
    assert first.failure.kind is FailureKind.OOM_WEIGHTS


def test_finish_fails_a_log_that_ends_on_an_exception_but_not_a_clean_one() -> None:
    tr = feed_text(["[2026-03-04 09:00:05] Load weight begin. avail mem=78.00 GB", "RuntimeError: boom"])
    assert tr.boots[0].status is BootStatus.STARTING
    tr.finish()
    assert tr.boots[0].status is BootStatus.FAILED
    assert tr.boots[0].failure is not None
    assert tr.boots[0].failure.kind is FailureKind.CRASH
    tr = feed_text(["[2026-03-04 09:00:05] Load weight begin. avail mem=78.00 GB"])
    tr.finish()
    assert tr.boots[0].status is BootStatus.STARTING


def test_systemd_lifecycle() -> None:
    lines = [
        ("systemd", "Started sglang.service - SGLang."),
        ("python3", "[2026-03-04 09:00:00] server_args=ServerArgs(mem_fraction_static=0.9)"),
        ("python3", "[2026-03-04 09:00:05 TP0] Load weight begin. avail mem=78.00 GB"),
        ("systemd", "sglang.service: Main process exited, code=killed, status=9/KILL"),
        ("systemd", "sglang.service: Failed with result 'signal'."),
        ("systemd", "sglang.service: Scheduled restart job, restart counter is at 1."),
        ("systemd", "Stopped sglang.service - SGLang."),
        ("systemd", "Started sglang.service - SGLang."),
        ("python3", "[2026-03-04 09:02:00] server_args=ServerArgs(mem_fraction_static=0.8)"),
        ("systemd", "Stopping sglang.service - SGLang..."),
        ("python3", "[2026-03-04 09:02:03] Received sigquit from a child process. It usually means the child failed."),
        ("systemd", "sglang.service: Main process exited, code=exited, status=1/FAILURE"),
        ("systemd", "sglang.service: Deactivated successfully."),
    ]
    tr = BootTracker()
    parser = LineParser()
    for ident, text in lines:
        for p in parser.feed(LogRecord(text, ident=ident)):
            tr.feed(p)
    first, second = tr.boots
    assert first.status is BootStatus.FAILED
    assert first.failure is not None
    assert first.failure.kind is FailureKind.UNKNOWN  # nothing but a SIGKILL exit
    assert "SIGKILL" in first.failure.hint
    assert second.status is BootStatus.STOPPED  # the operator stopped it: its death is no failure
    assert second.failure is None
    assert second.flags["mem_fraction_static"] == 0.8


def test_capture_oom_keeps_its_hint_when_systemd_reports_the_sigkill_after_it() -> None:
    """SGLang kills its own process tree after a scheduler dies; systemd then says status=9/KILL.
    That exit must not replace the capture-OOM diagnosis with an "OOM killer" hint."""
    lines = [
        ("systemd", "Started sglang.service - SGLang."),
        ("python3", "[2026-03-04 09:00:00] server_args=ServerArgs(mem_fraction_static=0.99, cuda_graph_max_bs=64)"),
        ("python3", "[2026-03-04 09:04:00 TP0] Capture cuda graph begin. This can take up to several minutes. "
         "avail mem=1.32 GB"),
        ("python3", "[2026-03-04 09:04:10 TP0] Scheduler hit an exception: Traceback (most recent call last):"),
        ("python3", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total "
         "capacity of 79.25 GiB of which 51.20 MiB is free."),
        ("python3", "[2026-03-04 09:04:10] Received sigquit from a child process. It usually means the child failed."),
        ("systemd", "sglang.service: Main process exited, code=killed, status=9/KILL"),
        ("systemd", "sglang.service: Failed with result 'signal'."),
    ]
    tr = BootTracker()
    parser = LineParser()
    for ident, text in lines:
        for p in parser.feed(LogRecord(text, ident=ident)):
            tr.feed(p)
    (boot,) = tr.boots
    assert boot.failure is not None
    assert boot.failure.kind is FailureKind.OOM_GRAPH_CAPTURE
    assert "SIGKILL" not in boot.failure.hint
    assert "--mem-fraction-static" in boot.failure.hint


def test_a_stop_while_starting_is_reported_to_live_views() -> None:
    """A boot stopped mid-start changes state (stopped, phases closed): feed must say so."""
    tr = BootTracker()
    parser = LineParser()
    upd = None
    for ident, text in [
        ("systemd", "Started sglang.service - SGLang."),
        ("python3", "[2026-03-04 09:00:00] server_args=ServerArgs(mem_fraction_static=0.9)"),
        ("python3", "[2026-03-04 09:00:05 TP0] Load weight begin. avail mem=78.00 GB"),
        ("systemd", "Stopping sglang.service - SGLang..."),
    ]:
        for p in parser.feed(LogRecord(text, ident=ident)):
            upd = tr.feed(p)
    assert upd is not None
    assert upd.phase_changed
    assert tr.boots[-1].status is BootStatus.STOPPED


def test_systemd_lines_without_identifier_only_in_unambiguous_shapes() -> None:
    p = LineParser()
    (started,) = p.feed(LogRecord("Started sglang.service - SGLang server."))
    assert [type(e) for e in started.events] == [BootBoundary]
    (uv,) = p.feed(LogRecord("[2026-03-04 09:00:00] INFO:     Started server process [7001]"))
    assert not any(isinstance(e, BootBoundary) for e in uv.events)
    (other,) = p.feed(LogRecord("Started the thing [with brackets]"))
    assert other.events == ()
    (unit,) = p.feed(LogRecord("sglang.service: Scheduled restart job, restart counter is at 3."))
    assert unit.events == (BootBoundary(BoundaryKind.RESTART_SCHEDULED),)
    # a line from another program is never a boundary, whatever it says
    (fake,) = p.feed(LogRecord("Started sglang.service - SGLang server.", ident="python3"))
    assert fake.events == ()


def test_ready_boot_stays_ready_after_a_stop() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.READY), t=0))
    tr.feed(pl(BootBoundary(BoundaryKind.STOPPING), t=5))
    assert tr.boots[0].status is BootStatus.READY
    assert tr.boots[0].ended_at == T0 + timedelta(seconds=5)


def test_runtime_crash_after_ready_fails_the_boot() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.READY), t=0))
    tr.feed(pl(Serving(token_usage=0.5), t=1))
    tr.feed(pl(FailureText("torch.OutOfMemoryError: CUDA out of memory.", specificity=3), t=2, prefixed=False))
    upd = tr.feed(pl(FailureText("SIGQUIT received.", fatal=True, specificity=0), t=3))
    assert upd.failed
    b = tr.boots[0]
    assert b.status is BootStatus.FAILED
    assert b.failure is not None
    assert b.failure.kind is FailureKind.OOM_RUNTIME
    assert b.failure.phase is Phase.READY


def test_max_boots_bounds_the_list() -> None:
    tr = BootTracker(max_boots=3)
    for i in range(10):
        tr.feed(pl(BootBoundary(BoundaryKind.STARTED), t=i * 10))
        tr.feed(pl(PhaseMark(Phase.READY), t=i * 10 + 1))
    assert len(tr.boots) == 3
    assert tr.boots[-1].phases[0].start == T0 + timedelta(seconds=90)


# ---- phases -------------------------------------------------------------------------------------------


def test_phase_spans_cover_all_ranks_in_any_order() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS), t=10, rank="TP1"))
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS), t=8, rank="TP0"))  # an earlier stamp arrives late
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS, end=True, seconds=50.0), t=60, rank="TP0"))
    tr.feed(pl(PhaseMark(Phase.KV_ALLOCATE), t=61, rank="TP0"))
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS, end=True, seconds=55.0), t=65, rank="TP1"))
    load = tr.boots[0].phases[0]
    assert (load.start, load.end, load.seconds) == (T0 + timedelta(seconds=8), T0 + timedelta(seconds=65), 57.0)
    kv = tr.boots[0].phases[1]
    assert kv.end is None
    assert tr.boots[0].phase is Phase.KV_ALLOCATE


def test_printed_elapsed_fixes_one_second_stamps() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.INIT), t=0))
    tr.feed(pl(PhaseMark(Phase.INIT, end=True, seconds=0.23), t=0))
    assert tr.boots[0].phases[0].seconds == 0.23


def test_a_later_phase_closes_earlier_open_ones() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.LAUNCH), t=0))
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS), t=5))
    tr.feed(pl(PhaseMark(Phase.GRAPH_CAPTURE), t=9))
    launch, load, cap = tr.boots[0].phases
    assert launch.end == T0 + timedelta(seconds=5)
    assert load.end == T0 + timedelta(seconds=9)
    assert cap.end is None


def test_repeated_captures_reopen_the_capture_span() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.GRAPH_CAPTURE), t=0))
    tr.feed(pl(PhaseMark(Phase.GRAPH_CAPTURE, end=True), t=10))
    tr.feed(pl(PhaseMark(Phase.GRAPH_CAPTURE), t=11))  # the decode capture after the prefill one
    cap = tr.boots[0].phases[0]
    assert cap.end is None
    tr.feed(pl(PhaseMark(Phase.GRAPH_CAPTURE, end=True), t=14))
    assert cap.seconds == 14.0


def test_draft_phases_are_separate_entries() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS), t=0))
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS, end=True), t=5))
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS, Model.DRAFT), t=6))
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS, Model.DRAFT, end=True), t=7))
    assert [(p.name, p.model) for p in tr.boots[0].phases] == [
        (Phase.LOAD_WEIGHTS, Model.TARGET),
        (Phase.LOAD_WEIGHTS, Model.DRAFT),
    ]
    assert tr.boots[0].phase is Phase.LOAD_WEIGHTS  # `phase` follows the target only


def test_progress_updates_the_span_and_can_start_it() -> None:
    tr = BootTracker()
    tr.feed(pl(Progress(Phase.LOAD_WEIGHTS, 3, 30), t=None, prefixed=False))
    tr.feed(pl(Progress(Phase.LOAD_WEIGHTS, 30, 30), t=None, prefixed=False))
    span = tr.boots[0].phases[0]
    assert (span.name, span.progress_done, span.progress_total) == (Phase.LOAD_WEIGHTS, 30, 30)


# ---- figures ------------------------------------------------------------------------------------------


def test_metric_aggregation_rules() -> None:
    tr = BootTracker()
    for i, rank in enumerate(["TP2", "TP0", "TP1"]):
        tr.feed(
            pl(
                Metric("avail_before_load_gib", 78.0 + i),
                Metric("weights_gib", 34.0 + i / 10),
                Metric("kv_tokens", 1000.0 + i),
                Metric("kv_cache_gib", 10.0 + i),
                Metric("graph_mem_gib", 1.0 + i / 10),
                Metric("graph_mem_gib", 0.5),
                t=i,
                rank=rank,
            )
        )
    b = tr.boots[0]
    assert b.facts["avail_before_load_gib"] == 78.0  # min over ranks
    assert b.facts["weights_gib"] == pytest.approx(34.2)  # max
    assert b.facts["kv_tokens"] == 1001.0  # TP0's, whatever the order
    assert b.facts["kv_cache_gib"] == 11.0
    assert b.facts["graph_mem_gib"] == pytest.approx(1.7)  # captures add up per rank, max over ranks
    assert b.rank_facts["TP2"]["avail_before_load_gib"] == 78.0
    assert b.metrics.cell_bytes == round(11.0 * 2**30 / (1001 + 1))
    assert b.ranks == ["TP0", "TP1", "TP2"]


def test_ranks_are_listed_in_natural_order() -> None:
    tr = feed_text(
        [
            "[2026-03-04 09:00:00 TP10] Init torch distributed begin.",
            "[2026-03-04 09:00:00 TP2] Init torch distributed begin.",
            "[2026-03-04 09:00:00 TP0] Init torch distributed begin.",
        ]
    )
    assert tr.boots[0].ranks == ["TP0", "TP2", "TP10"]
    assert rank_sort_key("DP1 TP0") > rank_sort_key("DP0 TP7")
    assert rank_sort_key(None) < rank_sort_key("TP0")


def test_draft_figures_never_overwrite_the_target() -> None:
    tr = BootTracker()
    tr.feed(pl(Metric("kv_tokens", 5000.0), Metric("kv_cache_gib", 20.0), rank="TP0"))
    tr.feed(pl(Metric("avail_after_pool_gib", 9.0), rank="TP0"))
    tr.feed(pl(Metric("kv_tokens", 5000.0, Model.DRAFT), Metric("kv_cache_gib", 0.5, Model.DRAFT), rank="TP0"))
    tr.feed(pl(Metric("avail_after_pool_gib", 8.0, Model.DRAFT), rank="TP0"))
    b = tr.boots[0]
    assert b.metrics.kv_cache_gib == 20.0
    assert b.metrics.avail_after_pool_gib == 9.0
    assert b.draft_facts["kv_cache_gib"] == 0.5
    assert b.draft_facts["avail_after_pool_gib"] == 8.0


def test_capture_trail_pairs_bs_and_avail_and_is_bounded() -> None:
    tr = BootTracker()
    for i in range(MAX_TRAIL + 50):
        tr.feed(pl(Metric("capture_bs", float(i)), Metric("capture_avail_gib", 10.0 - i / 1e4), prefixed=False))
        tr.feed(pl(Metric("capture_bs", float(i)), Metric("capture_avail_gib", 10.0 - i / 1e4), prefixed=False))
    trail = tr.boots[0].capture_trail
    assert len(trail) == MAX_TRAIL  # bounded, and redraws of the same point are one entry
    assert trail[1] == (1, pytest.approx(9.9999))


def test_serving_lines_aggregate_over_dp_ranks() -> None:
    tr = BootTracker()
    tr.feed(pl(Serving(0.2, 3, 1, 100.0), rank="DP0 TP0"))
    tr.feed(pl(Serving(0.6, 5, 0, 200.0), rank="DP1 TP1"))
    tr.feed(pl(Serving(0.1, 1, 2, 50.0), rank="DP0 TP0"))
    live = tr.boots[0].live
    assert (live.token_usage, live.running_reqs, live.queue_reqs, live.gen_throughput) == (0.6, 6, 2, 250.0)
    assert tr.boots[0].metrics.token_usage == 0.6


def test_vllm_kv_budget_is_not_summed() -> None:
    tr = BootTracker(engine_hint=Engine.VLLM)
    for _ in range(3):  # repeated per KV group / worker
        tr.feed(pl(Metric("kv_cache_gib", 45.32), rank="Worker_TP0"))
    tr.feed(pl(Metric("max_total_num_tokens", 2640144.0), rank="Worker_TP0"))
    assert tr.boots[0].metrics.kv_cache_gib == pytest.approx(45.32)


# ---- failures -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "kind"),
    [
        (Phase.LOAD_WEIGHTS, FailureKind.OOM_WEIGHTS),
        (Phase.KV_ALLOCATE, FailureKind.OOM_KV_ALLOCATE),
        (Phase.GRAPH_CAPTURE, FailureKind.OOM_GRAPH_CAPTURE),
        (Phase.READY, FailureKind.OOM_RUNTIME),
        (Phase.INIT, FailureKind.GPU_BUSY),
    ],
)
def test_cuda_oom_kind_comes_from_the_phase(phase: Phase, kind: FailureKind) -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(phase), t=0))
    tr.feed(pl(FailureText("torch.OutOfMemoryError: CUDA out of memory.", specificity=3), t=1, prefixed=False))
    tr.feed(pl(FailureText("Received sigquit", fatal=True, specificity=0), t=2))
    f = tr.boots[0].failure
    assert f is not None
    assert (f.kind, f.phase) == (kind, phase)
    assert f.message == "torch.OutOfMemoryError: CUDA out of memory."


def test_text_decided_kind_wins_over_a_later_oom_and_nccl_noise() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.GRAPH_CAPTURE), t=0))
    tr.feed(
        pl(FailureText("RuntimeError: NCCL error: unhandled", FailureKind.NCCL, specificity=3), t=1, prefixed=False)
    )
    tr.feed(pl(FailureText("torch.OutOfMemoryError: CUDA out of memory.", specificity=3), t=1, prefixed=False))
    tr.feed(pl(FailureText("Received sigquit", fatal=True, specificity=0), t=2))
    f = tr.boots[0].failure
    assert f is not None
    assert f.kind is FailureKind.OOM_GRAPH_CAPTURE  # OOM beats the NCCL error other ranks report
    assert f.message.startswith("torch.OutOfMemoryError")


def test_failure_message_is_the_most_specific_line_and_traceback_is_bounded() -> None:
    lines = ["[2026-03-04 09:00:00 TP0] Load weight begin. avail mem=1.00 GB"]
    lines.append("[2026-03-04 09:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):")
    for i in range(200):
        lines.append(f'  File "/x/mod{i}.py", line {i}, in f{i}')
    lines.append("RuntimeError: something specific broke")
    lines.extend(["Possible solutions:", "1. do this", "2. do that"])
    lines.append("[2026-03-04 09:00:02] Received sigquit from a child process. It usually means the child failed.")
    lines.append("after the fatal line")
    tr = feed_text(lines)
    f = tr.boots[0].failure
    assert f is not None
    assert f.kind is FailureKind.CRASH
    assert f.message == "RuntimeError: something specific broke"
    assert len(f.traceback) <= MAX_TRACEBACK_LINES
    assert f.traceback[-3:] == ["Possible solutions:", "1. do this", "2. do that"]
    assert "RuntimeError: something specific broke" in f.traceback
    assert "after the fatal line" not in f.traceback


def test_hints_carry_the_boots_own_numbers() -> None:
    assert "(now 0.93)" in hint_for(FailureKind.OOM_GRAPH_CAPTURE, Engine.SGLANG, {"mem_fraction_static": 0.93}, {})
    assert "--gpu-memory-utilization (now 0.95)" in hint_for(
        FailureKind.OOM_KV_ALLOCATE, Engine.VLLM, {"gpu_memory_utilization": 0.95}, {}
    )
    h = hint_for(FailureKind.KV_TOO_SMALL, Engine.VLLM, {}, {"estimated_max_len": 123456.0})
    assert "lower --max-model-len to at most 123456" in h
    for kind in FailureKind:
        assert hint_for(kind, Engine.SGLANG, {}, {})


def test_engine_specific_hint_from_the_grammar_wins() -> None:
    tr = BootTracker()
    tr.feed(pl(PhaseMark(Phase.LOAD_WEIGHTS), t=0))
    tr.feed(pl(FailureText("Rank 3 scheduler died (exit code: -9)", fatal=True, specificity=2, hint="OOM killer"), t=1))
    f = tr.boots[0].failure
    assert f is not None
    assert f.hint == "OOM killer"


def test_to_json_of_an_empty_boot_has_every_key() -> None:
    tr = BootTracker()
    tr.feed(pl(BootBoundary(BoundaryKind.STARTED), t=0))
    doc = tr.boots[0].to_json()
    assert doc["status"] == "starting"
    assert doc["phases"] == [
        {"name": "launch", "model": "target", "start": T0.isoformat(), "end": None, "seconds": None}
    ]
    assert doc["failure"] is None
    assert all(v is None for v in doc["metrics"].values())  # type: ignore[union-attr]


def test_flags_are_json_safe() -> None:
    import json

    tr = BootTracker()
    from kvtui.engines.events import Flags

    tr.feed(pl(Flags({"a": (1, 2), "b": {3, 1}, "c": float("inf"), "d": b"x", "e": {"k": [None]}}), t=0))
    doc = tr.boots[0].to_json()
    assert json.loads(json.dumps(doc))["flags"] == {
        "a": [1, 2],
        "b": [1, 3],
        "c": "inf",
        "d": "b'x'",
        "e": {"k": [None]},
    }
