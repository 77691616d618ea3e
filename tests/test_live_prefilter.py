# ruff: noqa: E501  (log lines are quoted verbatim)
"""The live path's prefilter (``LivePrefilter``), the spool's bulk write (``Spool.extend``) and the
SSH followers' bulk records (``RecordBlock``): fast, and exactly the same result as parsing every line.

* a monitor that skips the lines which cannot change a boot writes the same spool (byte for byte),
  builds the same boots and shows the same window as one that parses every line — over raw and
  journal records, multi-rank runs, millisecond stamps, progress bars, failures, ANSI, ``\\r`` and
  systemd lines, whatever the batch sizes;
* it does skip: a serving run costs two parsed lines per batch;
* ``Spool.extend`` writes what ``append`` writes (and the index finds every line back);
* the followers' blocks hold the records ``feed`` returns.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parse_fuzz import summary

from kvtui.config import HostConfig
from kvtui.engines.events import LogRecord
from kvtui.engines.parse import LivePrefilter
from kvtui.hosts.backend import LogStart, RecordBlock
from kvtui.hosts.ssh import SshBackend
from kvtui.hosts.ssh.followers import _FileFollower, _JournalFollower
from kvtui.monitor import HostMonitor, LogBatch, MonitorOptions
from kvtui.spool import Spool

FIX = Path(__file__).parent / "fixtures"
SETTINGS = settings(deadline=None, max_examples=20, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])


def _serving(t: datetime, tag: str, k: int, frac: str = "", kind: str = "Decode") -> str:
    stamp = t.strftime("%Y-%m-%d %H:%M:%S") + frac
    if kind == "Prefill":
        return (f"[{stamp}{tag}] Prefill batch, #new-seq: 1, #new-token: {100 + k}, #cached-token: 0, "
                f"token usage: {k % 90 / 100:.2f}, #running-req: {k % 7}, #queue-req: {k % 3}")
    return (f"[{stamp}{tag}] Decode batch, #running-req: {k % 9}, #token: {k * 10}, token usage: {k % 97 / 100:.2f}, "
            f"cuda graph: True, gen throughput (token/s): {100 + k % 50}.00, #queue-req: {k % 4}")


def engine_lines(seed: int = 7) -> list[tuple[str | None, str]]:
    """(syslog identifier, line): several boots of several kinds, with long serving runs."""
    rng = random.Random(seed)
    out: list[tuple[str | None, str]] = []

    def fixture(name: str) -> list[str]:
        return [ln for ln in (FIX / name).read_text().splitlines() if ln.strip()]

    t = datetime(2026, 3, 1, 10, 0, 0)
    out.append(("systemd", "Started sglang.service - SGLang server."))
    out += [("python3", ln) for ln in fixture("sglang/sglang-0.5.12-qwen3-32b-tp4-eagle3-ready.log")]
    for k in range(900):  # one rank, whole-second stamps, a Prefill line now and then
        t += timedelta(milliseconds=rng.choice((0, 250, 1000)))
        out.append(("python3", _serving(t, " TP0", k, kind="Prefill" if k % 10 == 0 else "Decode")))
        if k % 37 == 0:  # HTTP access lines in between (untagged, tagged, with a fraction)
            stamp = t.strftime("%Y-%m-%d %H:%M:%S") + ("" if k % 2 else ".250") + ("" if k % 3 else " TP0")
            out.append(("python3", f'[{stamp}] INFO:     127.0.0.1:{40000 + k} - "POST /generate HTTP/1.1" 200 OK'))
    for k in range(400):  # DP attention: ranks interleave, millisecond stamps (`.` and `,`)
        t += timedelta(milliseconds=37)
        frac = f"{'.' if k % 3 else ','}{t.microsecond // 1000:03d}"
        out.append(("python3", _serving(t, f" DP{k % 4} TP{k % 4}", k, frac)))
    for k in range(50):  # untagged main-process serving lines
        out.append(("python3", _serving(t, "", k)))
    out.append(("python3", "\x1b[32m" + _serving(t, " TP0", 1) + "\x1b[0m"))  # ANSI: always parsed
    out.append(("python3", _serving(t, " TP1", 2) + "\rCapturing batches (bs=8 avail_mem=7.19 GB):  50%|█  | 1/2"))
    out.append(("systemd", "Stopping sglang.service - SGLang server..."))
    out.append(("systemd", "Started sglang.service - SGLang server."))
    # a boot that dies in graph capture, with long progress bars before
    boot2 = fixture("sglang-0.4.10-qwen72b-tp2-capture-oom.log")
    cut = next(i for i, ln in enumerate(boot2) if "Capture cuda graph begin" in ln) + 1
    out += [("python3", ln) for ln in boot2[:cut]]
    for bs in (160, 152, 144):
        for k in range(40):
            out.append(("python3", f"Capturing batches (bs={bs} avail_mem=7.{bs % 10}9 GB):  {k * 2:2d}%|████      | {k}/50 [00:{k:02d}<00:30,  1.10it/s]"))
    for k in range(30):
        out.append(("python3", f"Loading safetensors checkpoint shards: {k * 3:3d}% Completed | {k}/30 [00:{k:02d}<00:00,  1.52it/s]"))
    out += [("python3", ln) for ln in boot2[cut:]]
    out.append(("systemd", "sglang.service: Main process exited, code=exited, status=1/FAILURE"))
    # a third boot: serving, then a runtime OOM in the middle of serving lines
    out.append(("systemd", "Started sglang.service - SGLang server."))
    out += [("python3", ln) for ln in fixture("sglang/sglang-0.5.10-deepseek-v3-dp4-attention-ready.log")]
    for k in range(600):
        t += timedelta(seconds=1)
        out.append(("python3", _serving(t, f" DP{k % 2} TP{k % 2}", k)))
        if k == 300:
            out += [("python3", ln) for ln in fixture("sglang/fail-0.5.13-runtime-oom.log")[-12:]]
    out.append(("python3", "garbage \x00 line with NCCL in it"))
    for k in range(200):
        out.append(("python3", _serving(t, " TP0", k)))
    return out


def records(kind: str) -> list[LogRecord]:
    lines = engine_lines()
    if kind == "raw":  # a log file: no wrapper ts, no identifier, systemd lines are not in it
        return [LogRecord(text, None, str(i), "file") for i, (ident, text) in enumerate(lines) if ident != "systemd"]
    t0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    return [LogRecord(text, t0 + timedelta(microseconds=137 * i), f"s=1;i={i:x}", "journal", 7, ident)
            for i, (ident, text) in enumerate(lines)]


def monitor(tmp: Path, name: str, *, live: bool) -> HostMonitor:
    backend: Any = SimpleNamespace(name=name)
    return HostMonitor(name, backend, options=MonitorOptions(state_dir=tmp / name, log_window=300, live_prefilter=live))


def feed(mon: HostMonitor, recs: list[LogRecord], sizes: list[int], *, columns: bool) -> list[Any]:
    """Ingest ``recs`` in batches of the given sizes (cycled); return what the sink got."""
    got: list[Any] = []
    mon.publisher.sink = got.extend
    i = k = 0
    while i < len(recs):
        n = sizes[k % len(sizes)]
        batch = recs[i : i + n]
        if columns:  # a follower's bulk block (records built on demand)
            block = RecordBlock([r.text for r in batch], [r.cursor for r in batch], batch[0].source,
                                [r.ts for r in batch], [r.ident for r in batch], [r.pid for r in batch])
            mon.ingest.range(block, mon.ingest.plan(block), 0, len(block))
        else:
            mon.ingest.records(batch)
        if k % 3 == 0:
            mon.publisher.flush()
        i += n
        k += 1
    mon.publisher.flush()
    return [ln for u in got if isinstance(u, LogBatch) for ln in u.lines]


def same_result(a: HostMonitor, b: HostMonitor) -> None:
    fa, fb = a.spool.files(), b.spool.files()
    assert [p.name for p in fa] == [p.name for p in fb]
    for x, y in zip(fa, fb, strict=True):
        assert x.read_bytes() == y.read_bytes(), x.name
    assert summary(a.tracker.boots) == summary(b.tracker.boots)
    # and what the console shows besides: phase progress (`64/64 shards`), live serving figures
    assert [[(p.name, p.model, p.progress_done, p.progress_total) for p in boot.phases] for boot in a.tracker.boots] \
        == [[(p.name, p.model, p.progress_done, p.progress_total) for p in boot.phases] for boot in b.tracker.boots]
    assert [boot.live for boot in a.tracker.boots] == [boot.live for boot in b.tracker.boots]
    assert list(a.recent) == list(b.recent)
    assert a.lines_seen == b.lines_seen == len(a.spool)
    assert a.spool.last_cursor == b.spool.last_cursor


def test_skipping_lines_changes_nothing_raw_and_journal(tmp_path: Path) -> None:
    for kind in ("raw", "journal"):
        recs = records(kind)
        full = monitor(tmp_path, f"full-{kind}", live=False)
        lines_full = feed(full, recs, [256], columns=False)
        for columns in (False, True):
            fast = monitor(tmp_path, f"fast-{kind}-{columns}", live=True)
            lines_fast = feed(fast, recs, [256], columns=columns)
            same_result(fast, full)
            assert lines_fast == lines_full
        # the boots are the real thing: three of them, the second failed in capture
        boots = full.tracker.boots
        assert len(boots) >= 3
        assert any(b.failure is not None for b in boots)
        assert boots[0].live.token_usage is not None


@SETTINGS
@given(sizes=st.lists(st.integers(1, 700), min_size=1, max_size=6), kind=st.sampled_from(["raw", "journal"]),
       columns=st.booleans())
def test_any_batching_gives_the_same_spool_and_boots(tmp_path_factory: Any, sizes: list[int], kind: str,
                                                     columns: bool) -> None:
    tmp = tmp_path_factory.mktemp("batches")
    recs = records(kind)
    full = monitor(tmp, "full", live=False)
    feed(full, recs, [97], columns=False)
    fast = monitor(tmp, "fast", live=True)
    feed(fast, recs, sizes, columns=columns)
    same_result(fast, full)


def test_a_serving_run_parses_two_lines_per_batch() -> None:
    t = datetime(2026, 3, 1, 10, 0, 0)
    lines = ["[2026-03-01 10:00:00 TP0] The server is fired up and ready to roll!"]
    lines += [_serving(t + timedelta(seconds=k // 4), " TP0", k) for k in range(2000)]
    pf = LivePrefilter()
    styles, tss, ranks = pf.plan(lines, None, None, sglang=True)
    parsed = [i for i, s in enumerate(styles) if s is None]
    assert parsed == [0, 1, 2000]  # the ready line, the run's first and its last
    assert styles[5] == "serving"
    assert ranks[5] == "TP0"
    assert tss[5] == t + timedelta(seconds=1)
    # the next batch goes on with the run: again its first and last only
    styles, _, _ = pf.plan(lines[1:100], None, None, sglang=True)
    assert [i for i, s in enumerate(styles) if s is None] == [0, 98]
    # HTTP access lines are skipped and do not end the run
    access = '[2026-03-01 10:00:09] INFO:     127.0.0.1:4711 - "POST /generate HTTP/1.1" 200 OK'
    styles, tss, ranks = LivePrefilter().plan([lines[1], lines[2], access, lines[3], lines[4]], None, None)
    assert styles == [None, "serving", "", "serving", None]
    assert tss[2] == datetime(2026, 3, 1, 10, 0, 9)
    # before the engine is known to be SGLang nothing is skipped
    assert all(s is None for s in LivePrefilter().plan(lines, None, None, sglang=False)[0])


def test_nothing_is_skipped_near_a_failure() -> None:
    t = datetime(2026, 3, 1, 10, 0, 0)
    lines = [_serving(t, " TP0", k) for k in range(10)]
    lines.append("[2026-03-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):")
    lines += [_serving(t, " TP0", k) for k in range(500)]
    styles, _, _ = LivePrefilter().plan(lines, None, None, sglang=True)
    parsed = {i for i, s in enumerate(styles) if s is None}
    assert set(range(10, 411)) <= parsed  # the trigger line and the 400 after it
    assert 200 not in {i for i, s in enumerate(styles) if s is not None}
    assert styles[450] == "serving"


def test_spool_extend_writes_what_append_writes(tmp_path: Path) -> None:
    rng = random.Random(3)
    a = Spool.create(tmp_path / "a", "h")
    b = Spool.create(tmp_path / "b", "h")
    aware = datetime(2026, 3, 1, tzinfo=UTC)
    rows = []
    for i in range(300):
        text = rng.choice(["plain line", "tab\there", "new\nline", "cr\rhere", "ünïcode ✓", "", "x" * 300])
        ts = rng.choice([None, datetime(2026, 3, 1, 10, 0, i % 60), aware + timedelta(microseconds=i)])
        rank = rng.choice([None, "TP0", "DP1 TP1", "bad\trank"])
        style = rng.choice(["", "serving", "phase", None])
        cursor = rng.choice([None, str(i), f"s=1;i={i}", "tab\tcursor"])
        ident = rng.choice([None, "python3", "new\nident"])
        rows.append((text, ts, rank, style, cursor, ident))
    for i, (text, ts, rank, style, cursor, ident) in enumerate(rows):
        a.append(text, boot=i // 100, ts=ts, rank=rank, style=style or "", cursor=cursor, ident=ident)
    for k in range(0, 300, 100):  # one boot per call, in uneven pieces
        for lo, hi in ((k, k + 7), (k + 7, k + 70), (k + 70, k + 100)):
            part = rows[lo:hi]
            first = b.extend([r[0] for r in part], [r[1] for r in part], [r[2] for r in part],
                             [r[3] for r in part], [r[4] for r in part], [r[5] for r in part], boot=k // 100)
            assert first == lo
    a.flush()
    b.flush()
    assert [p.read_bytes() for p in a.files()] == [p.read_bytes() for p in b.files()]
    assert a.last_cursor == b.last_cursor
    assert len(b) == 300
    assert a.read(0, 300) == b.read(0, 300)
    assert [ln.seq for ln in b.read(137, 50)] == list(range(137, 187))
    assert [ln.seq for ln in b.search("ünïcode")] == [ln.seq for ln in a.search("ünïcode")]
    assert b.index_bytes() == a.index_bytes()


def _backend(**keys: Any) -> SshBackend:
    return SshBackend("x", HostConfig(ssh="h", **keys))


def test_file_follower_blocks_are_its_records() -> None:
    data = (b"plain ascii line\n" * 50 + "ünïcode line ✓\n".encode() * 20 + b"\xff\xfe bad utf-8\n"
            + b"tqdm 1/9\rtqdm 2/9\rtqdm 3/9\n" + b"\x00kvtui:follow ino=9 off=0\n" + b"\n\nafter empties\n"
            + b"x" * 5000 + b"\npartial")
    for step in (1, 7, 64, 4096, len(data)):
        f_rec = _FileFollower(_backend(log_file="/l"), LogStart.CURRENT_BOOT, "0")
        f_blk = _FileFollower(_backend(log_file="/l"), LogStart.CURRENT_BOOT, "0")
        recs: list[LogRecord] = []
        blks: list[LogRecord] = []
        for i in range(0, len(data), step):
            recs += f_rec._feed_slow(f_rec._buf + data[i : i + step])
            blks += f_blk.feed_block(data[i : i + step]).records()
        assert blks == recs, step
        assert f_blk.offset == f_rec.offset
    # the fast path is taken for plain chunks: a column block, no records behind it
    f = _FileFollower(_backend(log_file="/l"), LogStart.CURRENT_BOOT, "0")
    block = f.feed_block("a\nbé\nc\n".encode())
    assert block._records is None
    assert block.texts == ["a", "bé", "c"]
    assert block.cursors == ["2", "6", "8"]  # byte offsets after each line
    assert block.record(1) == LogRecord("bé", None, "6", "file")


def test_journal_follower_blocks_are_its_records() -> None:
    import json

    entries = [
        {"__CURSOR": "c1", "__REALTIME_TIMESTAMP": "1772614800000000", "_PID": "7", "SYSLOG_IDENTIFIER": "python3",
         "MESSAGE": "one"},
        {"__CURSOR": "c2", "__REALTIME_TIMESTAMP": "1772614800000123", "SYSLOG_IDENTIFIER": "python3",
         "MESSAGE": "two\nlines\r\nhere"},
        {"__CURSOR": "c3", "__REALTIME_TIMESTAMP": "1772614801000000", "MESSAGE": [104, 105]},
        {"__CURSOR": "c4", "MESSAGE": "ünï"},
    ]
    good = b"".join(json.dumps(e).encode() + b"\n" for e in entries)
    bad = good + b"not json\n" + b'{"MESSAGE": "broken\n' + json.dumps(entries[0]).encode() + b"\n"
    for data in (good, bad, good + b"\xff\n"):
        j1 = _JournalFollower(_backend(unit="u"), LogStart.CURRENT_BOOT, None)
        j2 = _JournalFollower(_backend(unit="u"), LogStart.CURRENT_BOOT, None)
        got = j1.feed_block(data).records()
        want = j2._feed_lines(data.split(b"\n"))
        assert got == want
        assert j1.resume == j2.resume
    j = _JournalFollower(_backend(unit="u"), LogStart.CURRENT_BOOT, None)
    block = j.feed_block(good)
    assert block._records is None
    assert block.texts == ["one", "two", "lines", "here", "hi", "ünï"]
    assert block.cursors == ["c1", "c2", "c2", "c2", "c3", "c4"]
    assert j.resume == ("after", "c4")


# ---------------------------------------------------------------------------------------------
# Runs of hot serving lines planned in bulk: the same plan as line by line
# ---------------------------------------------------------------------------------------------


def _plans_agree(texts: list[str], tss: list[datetime | None] | None = None,
                 idents: list[str | None] | None = None, sizes: tuple[int, ...] = (100_000,)) -> list[str | None]:
    """Plan ``texts`` in batches of ``sizes`` with and without the bulk path; the plans must be equal
    (styles, timestamps, ranks). Returns the styles."""
    bulk, ref = LivePrefilter(), LivePrefilter(bulk=False)
    out: list[str | None] = []
    i = k = 0
    while i < len(texts):
        n = sizes[k % len(sizes)]
        args = (texts[i : i + n], tss[i : i + n] if tss is not None else None,
                idents[i : i + n] if idents is not None else None)
        got, want = bulk.plan(*args), ref.plan(*args)
        assert got == want, i
        out += got[0]
        i += n
        k += 1
    return out


def test_a_bulk_run_ends_where_the_per_line_hot_path_ends() -> None:
    t = datetime(2026, 3, 1, 10, 0, 0)
    ready = "[2026-03-01 10:00:00 TP0] The server is fired up and ready to roll!"
    run = [_serving(t + timedelta(seconds=k // 3), " TP0", k, kind="Prefill" if k % 10 == 0 else "Decode")
           for k in range(300)]
    breakers = {
        "ansi": "\x1b[32m" + run[5] + "\x1b[0m",
        "ansi-inside": run[5][:60] + "\x1b[0m" + run[5][60:],
        "cr": run[5] + "\rCapturing batches (bs=8 avail_mem=7.19 GB):  50%|█  | 1/2",
        "bad-stamp": run[5].replace("2026-03-01", "2026-13-41"),
        "prefill-naming-decode": run[10] + " TP0] Decode batch",  # a Prefill line with the Decode needle later
        "no-bracket": " " + run[5][1:],
        "other-tag": run[5].replace(" TP0]", " TP1]"),
        "fraction": run[5].replace(" TP0]", ".250 TP0]"),
        "long": run[5] + "x" * 17_000,
        "access": '[2026-03-01 10:00:09] INFO:     127.0.0.1:4711 - "POST /generate HTTP/1.1" 200 OK',
        "error": "[2026-03-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    }
    for name, bad in breakers.items():
        for pos in (1, 2, 63, 64, 65, 150, 299):
            texts = [ready, *run[:pos], bad, *run[pos:]]
            styles = _plans_agree(texts)
            if name == "error":  # nothing is skipped within 400 lines after it
                assert "serving" not in styles[pos + 1 : pos + 300], pos
            else:
                assert styles.count("serving") >= 150, (name, pos)  # the bulk path did run
    # a systemd line inside a journal batch, aware journal stamps (kept) and naive ones (the line's own)
    texts = [ready, *run]
    aware: list[datetime | None] = [datetime(2026, 3, 1, 10, tzinfo=UTC) + timedelta(microseconds=k)
                                    for k in range(len(texts))]
    idents: list[str | None] = ["python3"] * len(texts)
    idents[77] = "systemd"
    _plans_agree(texts, aware, idents)
    mixed: list[datetime | None] = list(aware)
    mixed[40] = None
    mixed[41] = datetime(2026, 3, 1, 9)
    _plans_agree(texts, mixed, idents)
    styles = _plans_agree(texts, [None] * len(texts), None)
    assert [i for i, s in enumerate(styles) if s is None] == [0, 1, len(texts) - 1]


def test_bulk_runs_of_any_length_and_batching_plan_the_same() -> None:
    rng = random.Random(11)
    t = datetime(2026, 3, 1, 10, 0, 0)
    texts = ["[2026-03-01 10:00:00 TP0] The server is fired up and ready to roll!"]
    for k in range(12_000):  # long runs (past the 4096-line windows), ranks switching now and then
        t += timedelta(milliseconds=rng.choice((0, 0, 100, 1000)))
        tag = " TP0" if (k // 3000) % 2 == 0 else " DP1 TP1"
        texts.append(_serving(t, tag, k, kind="Prefill" if rng.random() < 0.1 else "Decode"))
        if rng.random() < 0.002:
            texts.append(f"Capturing batches (bs=8 avail_mem=7.19 GB):  {k % 100:2d}%|█  | 1/2")
    for sizes in ((100_000,), (1, 7, 64, 65, 4097), (2000,)):
        styles = _plans_agree(texts, sizes=sizes)
        assert styles.count("serving") > 11_000
    # a run costs its first and last line: in one batch, the ready line, each progress redraw and
    # the run edges around it, and the edges where the rank tag changes
    styles = _plans_agree(texts)
    bars = sum(1 for x in texts if x.startswith("Capturing"))
    assert sum(1 for s in styles if s is None) <= 3 * bars + 10


# ---------------------------------------------------------------------------------------------
# The journal in bulk: columns decoded with C-level maps, the same as entry by entry
# ---------------------------------------------------------------------------------------------


def test_journal_columns_are_journal_fields() -> None:
    from kvtui.engines.shapes import _FLOAT_EXACT_US, journal_columns, journal_fields

    rng = random.Random(5)
    edges = [0, 1, 999_999, 1_000_000, 500_000, 1_772_614_800_000_000, 1_772_614_800_999_999,
             1_772_614_800_500_000, _FLOAT_EXACT_US - 1, 4_000_000_000_999_999, 2_147_483_647_999_999]
    stamps = edges + [rng.randrange(_FLOAT_EXACT_US) for _ in range(20_000)]
    dicts: list[dict[str, object]] = []
    for i, us in enumerate(stamps):
        o: dict[str, object] = {"MESSAGE": f"line {i}", "__REALTIME_TIMESTAMP": str(us), "_PID": str(7000 + i % 5)}
        if i % 3:
            o["__CURSOR"] = f"s=1;i={i:x}"
        if i % 4:
            o["SYSLOG_IDENTIFIER"] = "python3"
        dicts.append(o)
    objs: list[object] = list(dicts)
    cols = journal_columns(objs)
    assert cols is not None
    want = [journal_fields(o) for o in objs]
    assert [tuple(c[k] for c in cols) for k in range(len(objs))] == want
    assert [t.isoformat() for t in cols[1] if t is not None] == [w[1].isoformat() for w in want
                                                                  if w is not None and w[1] is not None]
    # pids and stamps that are not plain digit strings: still the same answer (per entry)
    odd = [dict(o) for o in dicts[:50]]
    odd[3]["_PID"] = None
    odd[4]["_PID"] = ""
    odd[5]["__REALTIME_TIMESTAMP"] = " 12"
    odd[6].pop("__REALTIME_TIMESTAMP")
    cols = journal_columns(list(odd))
    assert cols is not None
    assert [tuple(c[k] for c in cols) for k in range(len(odd))] == [journal_fields(o) for o in odd]
    # what only the per-entry path handles: None (the caller decodes entry by entry)
    for bad in ({"MESSAGE": [104, 105]}, {"MESSAGE": None}, {"__CURSOR": "c"}, {"MESSAGE": "x", "_PID": 7},
                {"MESSAGE": "x", "__CURSOR": ["a", "b"]}, {"MESSAGE": "x", "__REALTIME_TIMESTAMP": str(_FLOAT_EXACT_US)},
                [1, 2]):
        assert journal_columns([objs[0], bad]) is None, bad
    assert journal_columns([]) == ([], [], [], [], [])


def test_journal_follower_bulk_path_equals_entry_by_entry() -> None:
    import json

    rng = random.Random(9)
    entries = []
    for i in range(3000):
        e: dict[str, object] = {"__CURSOR": f"s=6f1c;i={i:x}", "__REALTIME_TIMESTAMP": str(1772614800000000 + i * 137),
                                "_PID": "7001", "SYSLOG_IDENTIFIER": "python3", "PRIORITY": "6",
                                "MESSAGE": _serving(datetime(2026, 3, 1, 10), " TP0", i)}
        if i % 500 == 7:
            e["MESSAGE"] = "ünïcode ✓ \"quoted\" \\ back\\slash\ttab"
        entries.append(e)
    good = b"".join(json.dumps(e, ensure_ascii=bool(i % 2)).encode() + b"\n" for i, e in enumerate(entries))
    multi = dict(entries[10], MESSAGE="two\nlines")
    for data, fast in ((good, True), (good[:5000] + json.dumps(multi).encode() + b"\n" + good[5000:], False),
                       (good[:5000] + b"\n" + good[5000:], False), (good[:5000] + b"  \n" + good[5000:], False)):
        for step in (1 << 18, 4096, 777, rng.randrange(100, 20_000)):
            j_blk = _JournalFollower(_backend(unit="u"), LogStart.CURRENT_BOOT, None)
            j_ref = _JournalFollower(_backend(unit="u"), LogStart.CURRENT_BOOT, None)
            got: list[LogRecord] = []
            took_fast = 0
            for i in range(0, len(data), step):
                chunk = data[i : i + step]
                probe = _JournalFollower(_backend(unit="u"), LogStart.CURRENT_BOOT, None)
                probe._buf = j_blk._buf
                took_fast += probe._fast_block(chunk) is not None
                got += j_blk.feed_block(chunk).records()
            want = j_ref._feed_lines(data.split(b"\n"))
            assert got == want, (fast, step)
            assert j_blk.resume == j_ref.resume
            if fast:
                assert took_fast >= len(range(0, len(data), step)) - 1


def test_stamps_read_from_a_known_minute_equal_a_full_parse() -> None:
    import re as _re

    def reference(stamp: str) -> datetime | None:
        if _re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stamp) is None:
            return None
        try:
            return datetime.fromisoformat(stamp)
        except ValueError:
            return None

    t = datetime(2024, 2, 28, 23, 58, 30)
    stamps = [(t + timedelta(seconds=k)).strftime("%Y-%m-%d %H:%M:%S") for k in range(0, 200_000, 7)]
    stamps += ["2026-02-28 23:59:59", "2026-02-29 00:00:00", "2026-02-28 23:59:60", "2026-02-28 23:59:61",
               "2026-02-28 23:59:5x", "2026-02-28 23:59:5", "2026-02-28 23:59:٥٥", "2026-02-28 23:59:-1",
               "2026-02-28 23:59: 1", "2026-02-28 24:00:00", "2026-02-28 23:60:00", "2024-12-31 23:59:59"]
    pf = LivePrefilter()
    for s in stamps:
        assert pf._stamp(s) == reference(s), s
        assert pf._stamp(s) == reference(s), s  # cached


def test_file_follower_cursors_in_bulk_are_the_byte_offsets() -> None:
    rng = random.Random(4)
    t = datetime(2026, 3, 1, 10)
    plain = "".join(_serving(t, " TP0", k)[: rng.randrange(5, 170)] + "\n" for k in range(5000)).encode()
    for data in (plain, plain[:9000] + b"\n" + plain[9000:], plain[:7000] + "é\n".encode() + plain[7000:]):
        for step in (65536, 4096, 333):
            f_blk = _FileFollower(_backend(log_file="/l"), LogStart.CURRENT_BOOT, "100")
            f_rec = _FileFollower(_backend(log_file="/l"), LogStart.CURRENT_BOOT, "100")
            got: list[LogRecord] = []
            want: list[LogRecord] = []
            for i in range(0, len(data), step):
                got += f_blk.feed_block(data[i : i + step]).records()
                want += f_rec._feed_slow(f_rec._buf + data[i : i + step])
            assert got == want, step
            assert f_blk.offset == f_rec.offset == 100 + len(data)
    assert [r.cursor for r in got[:2]] == [str(100 + len(want[0].text) + 1),
                                          str(100 + len(want[0].text) + len(want[1].text) + 2)]
