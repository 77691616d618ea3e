"""Input shapes: detection, wrappers (journalctl short/short-iso/short-precise/cat/json, docker
logs with and without --timestamps, raw), splitting, limits, garbage, and the live splitter."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.boot import Boot, BootTracker
from kvtui.engines.events import LogRecord
from kvtui.engines.parse import LineParser
from kvtui.engines.shapes import (
    MAX_LINE_BYTES,
    SHAPES,
    RecordSplitter,
    detect_shape,
    iter_records,
    parse_journal_json,
)
from kvtui.engines.text import split_physical, strip_ansi

FIX = Path(__file__).parent / "fixtures"
SF = FIX / "shapes"
VLLM_RAW = FIX / "vllm-0.11-llama8b-tp2-ready.log"
SGLANG_ISO = FIX / "sglang-0.5.10-llama70b-tp4-ready.journal"
CEST = timezone(timedelta(hours=2))


def clock() -> datetime:
    return datetime(2026, 12, 31, 12, 0, 0)


def recs(path: Path, shape: str | None = None) -> list[LogRecord]:
    return list(iter_records(path.read_bytes(), shape, now=clock))


BAD_UTF8 = " \ufffd\ufffd(bad utf-8)"  # the json renderings add invalid UTF-8 to one entry


def texts(records: list[LogRecord], *, systemd: bool = False) -> list[str]:
    return [strip_ansi(r.text).removesuffix(BAD_UTF8) for r in records if systemd or r.ident != "systemd"]


VLLM_TEXTS = [t for t in split_physical(VLLM_RAW.read_text())]
SGLANG_TEXTS = [ln.split(": ", 1)[1] for ln in SGLANG_ISO.read_text().splitlines()]


def _systemd_free(ts: list[str]) -> list[str]:
    return [t for t in ts if not (t.startswith(("Started ", "Stopping ")) or ".service: " in t)]


# --------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("vllm.short", "short"),
        ("vllm.short-precise", "short-precise"),
        ("vllm.short-iso", "short-iso"),
        ("vllm.cat", "cat"),
        ("vllm.json", "json"),
        ("vllm.docker-ts", "docker-ts"),
        ("sglang.short", "short"),
        ("sglang.short-precise", "short-precise"),
        ("sglang.short-iso-colon", "short-iso"),
        ("sglang.cat", "cat"),
        ("sglang.json", "json"),
        ("sglang.docker-ts", "docker-ts"),
        ("multiline.short", "short"),
        ("tqdm-cr.log", "raw"),
        ("garbage.bin", "raw"),
    ],
)
def test_detect_shape(name: str, shape: str) -> None:
    assert detect_shape((SF / name).read_bytes()) == shape


def test_detect_shape_of_the_shared_samples_and_edge_cases() -> None:
    assert detect_shape(SGLANG_ISO.read_bytes()) == "short-iso"  # +0000, no colon
    assert detect_shape(VLLM_RAW.read_bytes()) == "raw"
    assert detect_shape((FIX / "sglang-0.5.14-deepseek-v3-tp8-ready.json").read_bytes()) == "json"
    for real in (FIX / "real").glob("*.log"):  # kubectl / file captures: raw
        assert detect_shape(real.read_bytes()) == "raw", real.name
    assert detect_shape(b"") == "raw"
    assert detect_shape(b"-- No entries --\n") == "raw"
    # journal meta lines do not vote; a mostly-journal head with a few odd lines still is one
    head = b"-- Logs begin at Mon 2026-03-02 --\n" + b"garbage\n" + SGLANG_ISO.read_bytes()[:4000]
    assert detect_shape(head) == "short-iso"
    # a JSON-logging app is not journald json
    assert detect_shape(b'{"level": "info", "msg": "x"}\n' * 5) == "raw"
    # RFC 3339 stamps followed by journald's host ident[pid]: are short-iso, even with µs
    assert detect_shape(b"2026-03-04T09:12:00.123456+00:00 h python3[1]: x\n") == "short-iso"
    assert detect_shape(b"2026-03-04T09:12:00.123456789Z x\n") == "docker-ts"
    assert set(SHAPES) == {"raw", "short", "short-iso", "short-precise", "cat", "json", "docker", "docker-ts"}


# --------------------------------------------------------------------------------------------
# Every rendering carries the same lines as the source
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["vllm.short", "vllm.short-precise", "vllm.short-iso", "vllm.json",
                                  "vllm.docker-ts", "vllm.cat"])
def test_vllm_renderings_carry_the_raw_lines(name: str) -> None:
    got = texts(recs(SF / name))
    if name.endswith(".cat"):
        got = _systemd_free(got)
    # the renderings joined the two PIECEWISE bars with \r (one journal entry): split again
    assert got[:24] == VLLM_TEXTS[:24]
    assert [t for t in got if "mixed prefill-decode" in t] == [
        t.split(") ", 1)[1] if i else t
        for i, t in enumerate(x for x in VLLM_TEXTS if "mixed prefill-decode" in x)
    ]
    assert got[-1] == VLLM_TEXTS[-1]
    assert len(got) == len(VLLM_TEXTS)


@pytest.mark.parametrize("name", ["sglang.short", "sglang.short-precise", "sglang.short-iso-colon", "sglang.json",
                                  "sglang.docker-ts", "sglang.cat"])
def test_sglang_renderings_carry_the_journal_lines(name: str) -> None:
    got = texts(recs(SF / name))
    if name.endswith(".cat"):
        got = _systemd_free(got)
    assert got == SGLANG_TEXTS


def test_short_iso_wrapper() -> None:
    rs = recs(SGLANG_ISO)
    assert rs[1] == LogRecord("[2026-03-04 09:12:06 TP0] Init torch distributed begin.",
                              datetime(2026, 3, 4, 9, 12, 6, tzinfo=UTC), str(len(SGLANG_ISO.read_text()
                                                                                  .splitlines(True)[0])
                                                                              + len(SGLANG_ISO.read_text()
                                                                                    .splitlines(True)[1])),
                              "journal", 7003, "python3")
    colon = recs(SF / "vllm.short-iso")
    assert colon[0].ident == "systemd"
    assert colon[0].pid == 1
    assert colon[1].ts == datetime(2026, 8, 21, 10, 2, 3, tzinfo=CEST)
    assert colon[1].ts is not None
    assert colon[1].ts.utcoffset() == timedelta(hours=2)


def test_short_and_short_precise_wrappers_take_the_year_from_the_clock() -> None:
    s = recs(SF / "vllm.short")
    assert s[1].ts == datetime(2026, 8, 21, 10, 2, 3)  # naive local: short carries no zone
    assert (s[1].ident, s[1].pid, s[1].source) == ("vllm", 2211, "journal")
    p = recs(SF / "vllm.short-precise")
    assert p[1].ts == datetime(2026, 8, 21, 10, 2, 3, 1000)
    # a clock in early January: an August line is last year's
    jan = list(iter_records((SF / "vllm.short").read_bytes(), now=lambda: datetime(2027, 1, 2)))
    assert jan[1].ts == datetime(2026, 8, 21, 10, 2, 3)
    # a clock in the same year but before the stamp (a mis-set clock) also keeps it in the past
    early = list(iter_records((SF / "vllm.short").read_bytes(), now=lambda: datetime(2027, 8, 20)))
    assert early[1].ts == datetime(2026, 8, 21, 10, 2, 3)


def test_journal_json_records() -> None:
    rs = recs(SF / "vllm.json")
    first = rs[1]
    assert first.cursor is not None
    assert first.cursor.startswith("s=5e1f0c;i=2;")
    assert first.ts == datetime(2026, 8, 21, 8, 2, 3, 1000, tzinfo=UTC)  # exact µs, UTC
    assert (first.ident, first.pid, first.source) == ("vllm", 2211, "journal")
    assert first.text.startswith("\x1b[1;36m(APIServer pid=2211)\x1b[0;0m INFO")  # MESSAGE was a byte array
    bad = [r for r in rs if "(bad utf-8)" in r.text]
    assert len(bad) == 1
    assert "\ufffd\ufffd(bad utf-8)" in bad[0].text
    # the \r-joined capture bars: one entry, two records, same wrapper
    cap = [r for r in rs if "mixed prefill-decode" in r.text]
    assert len(cap) == 2
    assert cap[0].cursor == cap[1].cursor
    assert cap[0].ts == cap[1].ts
    # the SGLang json sample (shared): cursors unique and in order
    srs = recs(FIX / "sglang-0.5.14-deepseek-v3-tp8-ready.json")
    cursors = [r.cursor for r in srs]
    assert len(set(cursors)) == len(cursors) == 95


def test_parse_journal_json() -> None:
    line = ('{ "__CURSOR" : "s=1;i=2", "__REALTIME_TIMESTAMP" : "1783576800123456", "SYSLOG_IDENTIFIER" : '
            '"python3", "_PID" : "880", "MESSAGE" : [104, 105, 255] }')
    for form in (line, line.encode()):
        r = parse_journal_json(form)
        assert r == LogRecord("hi\ufffd", datetime(2026, 7, 9, 6, 0, 0, 123456, tzinfo=UTC), "s=1;i=2", "journal",
                              880, "python3")
    # null MESSAGE (journalctl omits fields over its size limit), repeated fields, odd values
    r = parse_journal_json('{"__CURSOR": "c", "MESSAGE": null, "SYSLOG_IDENTIFIER": ["a", "b"], "_PID": "x"}')
    assert r == LogRecord("", None, "c", "journal", None, "a")
    r = parse_journal_json('{"MESSAGE": "m", "__REALTIME_TIMESTAMP": "99999999999999999999"}')
    assert r is not None
    assert r.ts is None
    assert parse_journal_json('{"level": "info"}') is None  # JSON, but not journald's
    assert parse_journal_json("not json") is None
    assert parse_journal_json("{ broken") is None
    assert parse_journal_json("[1, 2]") is None
    # invalid UTF-8 inside the JSON text itself (not as a byte array): decoded with replacement
    assert parse_journal_json(b'{"MESSAGE": "ok \xff"}') == LogRecord("ok \ufffd", source="journal")


def test_json_stream_with_garbage_lines() -> None:
    data = (b'{"MESSAGE": "one", "__CURSOR": "c1"}\n'
            b"this is not json\n"
            b'{"MESSAGE": "two\\nlines", "__CURSOR": "c2"}\n'
            b"\n"
            b'{"__CURSOR": "c3", "MESSAGE": ""}\n'
            b'{"MESSAGE": "cut')
    rs = list(iter_records(data, "json"))
    assert [(r.text, r.cursor) for r in rs] == [("one", "c1"), ("this is not json", None), ("two", "c2"),
                                                ("lines", "c2"), ("", "c3"), ('{"MESSAGE": "cut', None)]


def test_docker_ts_wrapper() -> None:
    rs = recs(SF / "vllm.docker-ts")
    assert rs[0].ts == datetime(2026, 8, 21, 8, 2, 3, 1000, tzinfo=UTC)  # ns truncated to µs
    assert (rs[0].source, rs[0].ident, rs[0].pid) == ("docker", None, None)
    assert rs[0].text.startswith("(APIServer pid=2211) INFO 08-21 10:02:03")
    # docker logs without --timestamps: raw, labelled docker when asked for
    d = list(iter_records(VLLM_RAW.read_bytes(), "docker"))
    assert [r.text for r in d] == VLLM_TEXTS
    assert {r.source for r in d} == {"docker"}


def test_cat_is_message_only() -> None:
    rs = recs(SF / "vllm.cat")
    assert rs[0] == LogRecord("Started vllm.service - vLLM OpenAI server.", None, rs[0].cursor, "journal")
    assert all(r.ts is None and r.pid is None for r in rs)


def test_journal_short_continuation_lines_keep_the_entry() -> None:
    rs = recs(SF / "multiline.short")
    assert rs[0].text == "-- Boot 7d2e9a11c0de4f5b8a6e2b1c3d4e5f60 --"
    entry = rs[1:5]
    assert [r.text for r in entry] == [
        "[2026-03-04 09:15:00] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/scheduler.py", line 2570, in run_scheduler_process',
        "    scheduler = Scheduler(server_args)",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ]
    assert {(r.ts, r.pid, r.ident) for r in entry} == {(datetime(2026, 3, 4, 9, 15), 7001, "python3")}
    assert (rs[-1].ident, rs[-1].pid) == ("systemd", 1)


def test_short_iso_continuations_and_odd_lines_at_every_chunk_boundary() -> None:
    # the fast ASCII path hands over to the generic one mid-block; every cut must give the same
    pre = "2026-03-04T09:15:00+0000 h100-a python3[7001]: "
    data = (
        f"{pre}[2026-03-04 09:15:00] Scheduler hit an exception: Traceback (most recent call last):\n"
        f"{' ' * len(pre)}  File \"/sgl/scheduler.py\", line 2570, in run\n"
        f"{' ' * len(pre)}RuntimeError: Not enough memory.\n"
        "2026-03-04T09:15:01+0000 h100-a python3[7000]: caf\u00e9 \u2713\n"
        "stray line\n"
        "2026-03-04T09:15:02+0000 h100-a systemd[1]: sglang.service: Main process exited, code=exited\n"
    ).encode()
    want = list(iter_records(data, "short-iso"))
    assert [(r.text, r.pid) for r in want] == [
        ("[2026-03-04 09:15:00] Scheduler hit an exception: Traceback (most recent call last):", 7001),
        ('  File "/sgl/scheduler.py", line 2570, in run', 7001),
        ("RuntimeError: Not enough memory.", 7001),
        ("caf\u00e9 \u2713", 7000),
        ("stray line", None),
        ("sglang.service: Main process exited, code=exited", 1),
    ]
    for cut in range(1, len(data)):
        sp = RecordSplitter("short-iso")
        assert sp.feed(data[:cut]) + sp.feed(data[cut:]) + sp.flush() == want, cut


def test_lines_that_do_not_fit_the_shape_are_kept_as_text() -> None:
    data = (b"2026-03-04T09:12:00+0000 h python3[1]: fine\n"
            b"2026-13-45T99:99:99+0000 h python3[1]: bad stamp\n"
            b"no wrapper at all\n"
            b"2026-03-04T09:12:01+0000 h python3[x]: odd pid\n")
    rs = list(iter_records(data, "short-iso"))
    assert [(r.text, r.ts is not None, r.ident, r.pid) for r in rs] == [
        ("fine", True, "python3", 1),
        ("2026-13-45T99:99:99+0000 h python3[1]: bad stamp", False, None, None),
        ("no wrapper at all", False, None, None),
        ("odd pid", True, "python3[x]", None),
    ]


# --------------------------------------------------------------------------------------------
# \r, limits, garbage
# --------------------------------------------------------------------------------------------
def test_carriage_returns_split_physical_lines() -> None:
    rs = recs(SF / "tqdm-cr.log")
    bars = [r.text for r in rs if r.text.startswith("Capturing batches")]
    assert len(bars) == 10
    assert bars[0].startswith("Capturing batches (bs=64 avail_mem=40.00 GB)")
    assert rs[-1].text.endswith("avail mem=37.51 GB.")  # \r\n: no empty record
    assert all(r.text for r in rs)
    # each \r piece has its own resume offset, increasing
    offs = [int(r.cursor or 0) for r in rs]
    assert offs == sorted(offs)
    assert len(set(offs)) == len(offs)


def test_two_mib_line_is_cut_to_one_mib_not_dropped() -> None:
    data = gzip.decompress((SF / "long-line-2mib.log.gz").read_bytes())
    for rs in (list(iter_records(data)), _chunked(data, 64 * 1024), _chunked(data, 4096)):
        assert len(rs) == 3
        assert len(rs[1].text.encode()) == MAX_LINE_BYTES
        assert rs[1].text.startswith("(APIServer pid=2211) INFO 08-21 10:02:03 [utils.py:233] non-default args:")
        assert rs[2].text == "(APIServer pid=2211) INFO 08-21 10:02:11 [model.py:1510] Using max model len 131072"
        assert rs[2].cursor == str(len(data))


def test_long_partial_line_is_emitted_once_it_passes_the_bound() -> None:
    sp = RecordSplitter("raw")
    assert sp.feed(b"x" * (MAX_LINE_BYTES - 1)) == []
    out = sp.feed(b"yy")  # now over 1 MiB with no newline: its first MiB comes out at once
    assert len(out) == 1
    assert len(out[0].text) == MAX_LINE_BYTES
    assert sp.feed(b"z" * 5000) == []  # the rest of that line is dropped...
    assert [r.text for r in sp.feed(b"tail\nnext\n")] == ["next"]  # ...up to its end
    assert sp.flush() == []


def test_garbage_never_raises() -> None:
    data = (SF / "garbage.bin").read_bytes()
    for shape in (None, *SHAPES):
        rs = list(iter_records(data, shape))
        assert rs
        assert all(r.text for r in rs)
        assert all("\n" not in r.text and "\r" not in r.text for r in rs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000), st.sampled_from([None, *SHAPES]))
def test_random_bytes_never_raise(data: bytes, shape: str | None) -> None:
    rs = list(iter_records(data, shape, now=clock))
    for r in rs:
        assert r.text
        assert "\n" not in r.text
        assert "\r" not in r.text


def test_unknown_shape_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown input shape 'syslog'"):
        RecordSplitter("syslog")


# --------------------------------------------------------------------------------------------
# The live splitter
# --------------------------------------------------------------------------------------------
def _chunked(data: bytes, size: int, shape: str | None = None) -> list[LogRecord]:
    sp = RecordSplitter(shape, now=clock)
    out: list[LogRecord] = []
    for i in range(0, len(data), size):
        out += sp.feed(data[i:i + size])
    return out + sp.flush()


ALL_FIXTURES = sorted(p.name for p in SF.iterdir() if p.suffix not in (".py", ".gz"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_FIXTURES), st.lists(st.integers(min_value=1, max_value=9000), min_size=1, max_size=40))
def test_splitter_matches_whole_input_for_any_chunking(name: str, cuts: list[int]) -> None:
    data = (SF / name).read_bytes()
    shape = detect_shape(data)
    whole = list(iter_records(data, shape, now=clock))
    sp = RecordSplitter(shape, now=clock)
    got: list[LogRecord] = []
    pos = 0
    for c in cuts:
        got += sp.feed(data[pos:pos + c])
        pos += c
    got += sp.feed(data[pos:])
    got += sp.flush()
    assert got == whole


def test_splitter_detects_the_shape_from_the_first_complete_lines() -> None:
    data = SGLANG_ISO.read_bytes()
    sp = RecordSplitter(now=clock)
    assert sp.feed(data[:30]) == []  # no complete line yet: wait
    assert sp.shape is None
    out = sp.feed(data[30:data.index(b"\n") + 10])
    assert sp.shape == "short-iso"
    assert out[0].ident == "python3"
    meta = RecordSplitter(now=clock)
    assert meta.feed(b"-- Journal begins at Mon 2026-03-02 --\n") == []  # nothing to vote on yet
    assert meta.feed(data) != []
    assert meta.shape == "short-iso"


def test_raw_splitter_emits_tqdm_redraws_as_they_arrive() -> None:
    sp = RecordSplitter("raw")
    assert [r.text for r in sp.feed(b"Capturing batches (bs=8): 10%|#\rCaptur")] == ["Capturing batches (bs=8): 10%|#"]
    assert [r.text for r in sp.feed(b"ing batches (bs=4): 20%|##\r")] == ["Capturing batches (bs=4): 20%|##"]
    assert sp.feed(b"\n") == []  # the \r\n pair ends nothing new
    wrapped = RecordSplitter("short-iso")  # journald entries end at \n only
    assert wrapped.feed(b"2026-03-04T09:12:00+0000 h p[1]: a\rb") == []
    assert [r.text for r in wrapped.feed(b"\n")] == ["a", "b"]


def test_raw_cursors_are_resume_offsets() -> None:
    data = VLLM_RAW.read_bytes()
    rs = list(iter_records(data))
    k = 17
    resume = int(rs[k].cursor or 0)
    assert data[resume - 1:resume] == b"\n"
    rest = list(iter_records(data[resume:], "raw", base_offset=resume))
    assert rest == rs[k + 1:]
    sp = RecordSplitter("raw", base_offset=100)
    sp.feed(b"abc\nde")
    assert sp.offset == 104  # the partial "de" is not consumed yet


# --------------------------------------------------------------------------------------------
# End to end: every rendering replays to the same boot (shapes -> LineParser -> BootTracker)
# --------------------------------------------------------------------------------------------
def _boot(records: list[LogRecord]) -> Boot:
    parser = LineParser()
    tracker = BootTracker()
    for r in records:
        for p in parser.feed(r):
            tracker.feed(p)
    boots = [b for b in tracker.boots if b.phases]
    assert len(boots) == 1
    return boots[0]


def _essence(b: Boot) -> dict[str, object]:
    j = b.to_json()
    phases = j["phases"]
    assert isinstance(phases, list)
    return {"engine": j["engine"], "status": j["status"], "phase": j["phase"], "metrics": j["metrics"],
            "flags": j["flags"], "phases": [p["name"] for p in phases]}


@pytest.mark.parametrize("family", ["vllm", "sglang"])
def test_every_rendering_replays_to_the_same_boot(family: str) -> None:
    source = VLLM_RAW if family == "vllm" else SGLANG_ISO
    want = _essence(_boot(recs(source)))
    assert want["status"] == "ready"
    names = sorted(p.name for p in SF.glob(f"{family}.*"))
    assert len(names) == 6
    for name in names:
        assert _essence(_boot(recs(SF / name))) == want, name


def test_journal_renderings_agree_on_the_instants() -> None:
    # json (UTC wrapper), short-iso (+02:00 wrapper) and docker (UTC, ns) of the same vLLM boot:
    # the year-less engine stamps, lined up with each wrapper, give the same instants
    starts = {}
    for name in ("vllm.json", "vllm.short-iso", "vllm.docker-ts"):
        b = _boot(recs(SF / name))
        # phases that start on an unstamped line (a tqdm bar) take the wrapper's stamp: compare
        # at the engine's resolution, the second
        starts[name] = [(p.name, p.start.replace(microsecond=0) if p.start else None) for p in b.phases]
        assert all(s is not None and s.tzinfo is not None for _, s in starts[name])
    assert starts["vllm.json"] == starts["vllm.short-iso"]
    # docker has no systemd `Started` line to open the boot a second earlier: launch differs
    assert starts["vllm.docker-ts"][1:] == starts["vllm.short-iso"][1:]
    first = starts["vllm.short-iso"][1][1]  # init: EngineCore's "Waiting for init message"
    assert first == datetime(2026, 8, 21, 10, 2, 19, tzinfo=CEST)
    assert first is not None
    assert first.utcoffset() == timedelta(hours=2)  # in the source's zone
    raw = _boot(recs(VLLM_RAW))
    assert raw.phases[0].start == datetime(2026, 8, 21, 10, 2, 3)  # naive without a wrapper


def test_year_from_the_journal_wrapper_not_the_clock() -> None:
    # short-iso of 2026 read with a clock in 2031: vLLM's year-less stamps follow the wrapper
    data = (SF / "vllm.short-iso").read_bytes()
    parser = LineParser()
    tracker = BootTracker()
    for r in iter_records(data, now=lambda: datetime(2031, 1, 1)):
        for p in parser.feed(r):
            tracker.feed(p)
    b = next(b for b in tracker.boots if b.phases)
    assert b.phases[0].start is not None
    assert b.phases[0].start.year == 2026


def test_json_fixture_is_valid_journal_json() -> None:
    for line in (SF / "vllm.json").read_bytes().splitlines():
        obj = json.loads(line)
        assert {"__CURSOR", "__REALTIME_TIMESTAMP", "MESSAGE", "_PID", "SYSLOG_IDENTIFIER"} <= set(obj)
    arrays = [json.loads(ln) for ln in (SF / "vllm.json").read_bytes().splitlines()]
    assert sum(isinstance(o["MESSAGE"], list) for o in arrays) > 30  # ANSI and \r lines are byte arrays
