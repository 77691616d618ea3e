"""The on-disk spool: append, read back, search (plain/regex/rank), bounded memory, resume."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kvtui.spool import (
    STRIDE,
    SearchPatternError,
    Spool,
    SpoolError,
    host_dir_name,
    iter_spooled,
    prune_sets,
    rank_matches,
)

TS = datetime(2026, 3, 4, 9, 12, 0, tzinfo=UTC)


def _fill(spool: Spool, n: int, *, boot: int = 0, ranks: int = 4) -> None:
    for i in range(n):
        spool.append(
            f"[2026-03-04 09:12:00 TP{i % ranks}] line {i} Decode batch",
            boot=boot,
            ts=TS,
            rank=f"TP{i % ranks}",
            cursor=f"c{i}",
        )


def test_append_read_roundtrip(tmp_path: Path) -> None:
    with Spool.create(tmp_path, "gpu-a") as sp:
        a = sp.append("hello\tworld", boot=0, ts=TS, rank="TP0", style="phase", cursor="s=1;i=1", ident="python3")
        b = sp.append("no ts", boot=0)
        assert (a.seq, b.seq) == (0, 1)
        assert len(sp) == 2
        got = sp.read(0, 10)
        assert [x.text for x in got] == ["hello\tworld", "no ts"]
        assert got[0].ts == TS
        assert got[0].rank == "TP0"
        assert got[0].style == "phase"
        assert got[1].ts is None
        assert got[1].rank is None
        assert got[1].style == ""
        assert sp.last_cursor == "s=1;i=1"
        # newlines in text never break the one-line-per-record format
        c = sp.append("a\nb\rc", boot=0)
        assert sp.read(c.seq, 1)[0].text == "a b c"
        # a tab or newline in a field cannot shift the columns
        d = sp.append("text\tstays", boot=0, rank="TP\t1", cursor="x\ny")
        got_d = sp.read(d.seq, 1)[0]
        assert (got_d.rank, got_d.text) == ("TP 1", "text\tstays")
        assert sp.last_cursor == "x\ny"  # in memory as given; on disk "x y"
        assert sp.directory.parent.name == "gpu-a"
        assert sp.directory.parent.parent == tmp_path / "spool"


def test_read_ranges_across_blocks_and_boots(tmp_path: Path) -> None:
    with Spool.create(tmp_path, "h") as sp:
        _fill(sp, 100, boot=0)
        sp.append("marker", boot=1, style="marker")
        _fill(sp, 50, boot=1)
        assert len(sp) == 151
        assert len(sp.files()) == 2  # one file per boot
        for start, count in [(0, 1), (31, 3), (32, 1), (95, 10), (99, 3), (100, 1), (140, 100), (150, 5)]:
            got = sp.read(start, count)
            want = list(range(start, min(start + count, 151)))
            assert [x.seq for x in got] == want
        assert sp.read(100, 1)[0].text == "marker"
        assert sp.read(100, 1)[0].boot == 1
        assert sp.read(99, 1)[0].text.endswith("line 99 Decode batch")
        assert sp.read(101, 1)[0].text.endswith("line 0 Decode batch")
        assert sp.read(500, 3) == []
        assert sp.read(0, 0) == []


def test_search_plain_smart_case_rank_and_direction(tmp_path: Path) -> None:
    with Spool.create(tmp_path, "h") as sp:
        _fill(sp, 300)
        sp.append("Capture cuda graph failed: CUDA out of memory", boot=0, rank="TP3", style="error")
        _fill(sp, 10)
        # smart case: lower-case pattern ignores case, upper-case is exact
        assert [x.seq for x in sp.search("cuda out of")] == [300]
        assert [x.seq for x in sp.search("CUDA out of")] == [300]
        assert sp.search("cuda Out of") == []
        hits = sp.search("line 7 ")
        assert [x.seq for x in hits] == [7, 308]
        # rank filter alone (empty pattern) and combined
        tp1 = sp.search("", rank="TP1", limit=10_000)
        assert len(tp1) == 75 + 3
        assert all(x.rank == "TP1" for x in tp1)
        assert [x.seq for x in sp.search("failed", rank="TP3")] == [300]
        assert sp.search("failed", rank="TP2") == []
        # forward from start_seq, reverse from start_seq (newest first), negative = from the end
        fwd = sp.search("decode", start_seq=250, limit=3)
        assert [x.seq for x in fwd] == [250, 251, 252]
        rev = sp.search("decode", start_seq=250, reverse=True, limit=3)
        assert [x.seq for x in rev] == [250, 249, 248]
        last = sp.search("decode", start_seq=-1, reverse=True, limit=2)
        assert [x.seq for x in last] == [310, 309]
        assert [x.seq for x in sp.search("line 0 ", reverse=True, start_seq=-1)] == [301, 0]
        # a match in the ts/rank/cursor fields is not a match
        assert sp.search("c17") == []
        assert sp.search("2026-03-04T09") == []


def test_search_regex(tmp_path: Path) -> None:
    with Spool.create(tmp_path, "h") as sp:
        _fill(sp, 64)
        assert [x.seq for x in sp.search(r"line (1|2)3 ", regex=True)] == [13, 23]
        assert [x.seq for x in sp.search(r"^\[2026.* line 5 ", regex=True)] == [5]
        assert sp.search(r"^line", regex=True) == []  # anchored at the start of the text
        assert len(sp.search(r"(?i)DECODE", regex=True, limit=5)) == 5
        with pytest.raises(SearchPatternError, match="invalid regular expression"):
            sp.search("(unclosed", regex=True)


def test_search_non_ascii(tmp_path: Path) -> None:
    with Spool.create(tmp_path, "h") as sp:
        sp.append("Modèle CHARGÉ", boot=0)
        sp.append("\udcff broken surrogate", boot=0)
        assert [x.seq for x in sp.search("chargé")] == [0]
        assert [x.seq for x in sp.search("broken")] == [1]


def test_rank_matches() -> None:
    assert rank_matches("TP3", "tp3")
    assert rank_matches("DP0 TP1", "TP1")
    assert rank_matches("Worker_TP2", "TP2")
    assert rank_matches("EngineCore_DP0", "enginecore_dp0")
    assert not rank_matches("TP13", "TP1")
    assert not rank_matches(None, "TP1")


def test_bounded_index_memory_and_speed(tmp_path: Path) -> None:
    n = 200_000
    with Spool.create(tmp_path, "big") as sp:
        t0 = time.perf_counter()
        _fill(sp, n, ranks=8)
        append_s = time.perf_counter() - t0
        # the index holds one offset per STRIDE lines, not the lines
        assert sp.index_bytes() <= (n // STRIDE + 1) * 8
        assert sp.index_bytes() < 100_000
        # CPU seconds of this process, not wall time: the bounds catch a search or read that does
        # far too much work, whatever else the machine runs (wall time at load 15 was 2.17 s)
        t0 = time.process_time()
        hits = sp.search("line 199999 ")
        search_s = time.process_time() - t0
        assert [x.seq for x in hits] == [n - 1]
        t0 = time.process_time()
        got = sp.read(123_457, 100)
        read_s = time.process_time() - t0
        assert got[0].text.endswith("line 123457 Decode batch")
        assert len(got) == 100
    print(f"\nspool: append {n / append_s:,.0f}/s, search {n / max(search_s, 1e-9):,.0f} lines/s (CPU), "
          f"read100 {read_s * 1e3:.2f} ms (CPU)")
    assert search_s < 2.0
    assert read_s < 0.05


def test_resume_continues_seq_and_cursor(tmp_path: Path) -> None:
    sp = Spool.create(tmp_path, "h", source="file:/x.log")
    _fill(sp, 70)
    sp.append("boot 1 first", boot=1, cursor="c-b1")
    sp.append("boot 1 second", boot=1)  # no cursor: the last *cursor* is kept
    directory = sp.directory
    sp.close()
    # a torn last line (crash mid-write) is cut on reopen
    with open(sorted(directory.glob("*.log"))[-1], "ab") as fh:
        fh.write(b"\t\t\tpartial-without-newline")
    r = Spool.resume(tmp_path, "h", source="file:/x.log")
    try:
        assert r.directory == directory
        assert len(r) == 72
        assert r.last_cursor == "c-b1"
        assert r.boot == 1
        line = r.append("boot 1 third", boot=1, cursor="c-b1-3")
        assert line.seq == 72
        assert [x.text for x in r.read(70, 5)] == ["boot 1 first", "boot 1 second", "boot 1 third"]
        assert [x.seq for x in r.search("line 69 ")] == [69]
        recs = list(iter_spooled(r, 69))
        want = [(69, 0, "c69"), (70, 1, "c-b1"), (71, 1, None), (72, 1, "c-b1-3")]
        assert [(x.seq, x.boot, x.cursor) for x in recs] == want
    finally:
        r.close()
    # another source -> a new set
    other = Spool.resume(tmp_path, "h", source="unit:sglang")
    try:
        assert other.directory != directory
        assert len(other) == 0
    finally:
        other.close()


def test_a_set_in_use_is_not_resumed_nor_pruned(tmp_path: Path) -> None:
    first = Spool.create(tmp_path, "h", now=1_000_000)
    _fill(first, 5)
    first.flush()
    second = Spool.resume(tmp_path, "h")
    try:
        assert second.directory != first.directory  # the first is held: a new set
        with pytest.raises(SpoolError, match="in use"):
            Spool(first.directory, host="h", _resume=True)
        assert prune_sets(first.directory.parent, keep_sets=0, max_bytes=0) == []
        assert first.directory.exists()
        assert second.directory.exists()
    finally:
        second.close()
        first.close()


def test_prune_keeps_newest_sets(tmp_path: Path) -> None:
    dirs = []
    for i in range(5):
        sp = Spool.create(tmp_path, "h", now=1_000_000 + i * 10)
        _fill(sp, 3)
        sp.close()
        dirs.append(sp.directory)
    newest = Spool.create(tmp_path, "h", now=2_000_000, keep_sets=2)
    newest.close()
    left = sorted(p for p in (tmp_path / "spool" / "h").iterdir())
    assert left == [dirs[3], dirs[4], newest.directory]


def test_unwritable_state_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SpoolError, match="cannot create the spool directory"):
        Spool.create(blocker, "h")


def test_host_dir_name() -> None:
    assert host_dir_name("gpu-a_1") == "gpu-a_1"
    assert host_dir_name("../etc") == "_.._etc"
    assert "/" not in host_dir_name("a/b")
    assert os.sep not in host_dir_name("a/b")


def test_extend_clean_blocks_in_bulk_and_dirty_ones_row_by_row(tmp_path: Path) -> None:
    """``extend`` builds clean blocks in bulk and falls back to cleaning row by row when one field
    holds a tab or a line break: either way the bytes are ``append``'s, and the timestamp cache
    carried from block to block stays right (a fallback after a bulk attempt included)."""
    from datetime import timedelta

    naive = datetime(2026, 3, 4, 9, 12, 0)
    rows: list[tuple[str, datetime | None, str | None, str | None, str | None, str | None]] = []
    for i in range(400):
        ts = None if i % 50 == 7 else (naive + timedelta(seconds=i // 4) if i < 200 else TS + timedelta(microseconds=i))
        rows.append((f"[2026-03-04 09:12:00 TP0] Decode batch {i}\twith a tab", ts, "TP0" if i % 3 else None,
                     "serving" if i % 5 else None, str(1000 + i) if i % 7 else None, "python3" if i >= 300 else None))
    dirty = {
        120: ("line\nbreak", 0),   # a text with a newline
        180: ("cr\rhere", 0),     # a text with a carriage return
        230: ("bad\trank", 2),    # a field with a tab
        260: ("bad\ncursor", 4),  # a field with a newline
        330: ("new\nident", 5),   # an identifier with a newline
    }
    for i, (value, col) in dirty.items():
        r = list(rows[i])
        r[col] = value
        rows[i] = tuple(r)  # type: ignore[assignment]
    a = Spool.create(tmp_path / "a", "h")
    b = Spool.create(tmp_path / "b", "h")
    for text, ts, rank, style, cursor, ident in rows:
        a.append(text, boot=0, ts=ts, rank=rank, style=style or "", cursor=cursor, ident=ident)
    for lo in range(0, 400, 37):
        part = rows[lo : lo + 37]
        b.extend([r[0] for r in part], [r[1] for r in part], [r[2] for r in part], [r[3] for r in part],
                 [r[4] for r in part], [r[5] for r in part] if any(r[5] for r in part) else None, boot=0)
    a.flush()
    b.flush()
    assert [p.read_bytes() for p in a.files()] == [p.read_bytes() for p in b.files()]
    assert a.last_cursor == b.last_cursor == "1398"
    assert a.read(0, 400) == b.read(0, 400)
    assert b.read(120, 1)[0].text == "line break"


def test_append_writes_a_line_as_extend_writes_it(tmp_path: Path) -> None:
    """``append`` is one line of ``extend``: fields with tabs or line breaks and a text with line
    breaks are cleaned the same way, byte for byte."""
    rows = [
        ("plain line", TS, "TP0", "phase", "c1", "python3"),
        ("tab\tin text", None, None, "", None, None),
        ("line\nbreak\r", TS, "TP\t1", "warn", "c\n2", "id\t3"),
    ]
    with Spool.create(tmp_path / "a", "h") as one, Spool.create(tmp_path / "b", "h") as block:
        lines = [one.append(t, boot=0, ts=ts, rank=r, style=st, cursor=c, ident=i) for t, ts, r, st, c, i in rows]
        first = block.extend(*[[row[k] for row in rows] for k in range(6)], boot=0)
        one.flush()
        block.flush()
        assert first == 0
        assert [ln.seq for ln in lines] == [0, 1, 2]
        assert lines[2].text == "line break "
        assert one.read(0, 3) == block.read(0, 3)
        assert one.last_cursor == block.last_cursor == "c\n2"
        (seg_a,) = (p for p in one.directory.iterdir() if p.suffix == ".log")
        (seg_b,) = (p for p in block.directory.iterdir() if p.suffix == ".log")
        assert seg_a.read_bytes() == seg_b.read_bytes()
