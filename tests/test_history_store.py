"""The boot store on a real SQLite file: schema and migration, merging and keys, pruning,
concurrent writers from two processes, corrupt and locked files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from history_support import T0, sglang

from kvtui.config import ConfigError, parse_config
from kvtui.history import SCHEMA_VERSION, HistoryError, Limits, Store, boot_doc, boot_key, open_store
from kvtui.history import record as rec
from kvtui.history.store import MIGRATIONS


def _put(store: Store, host: str, boot: object, **kw: object) -> int:
    key = boot_key(host, boot)  # type: ignore[arg-type]
    assert key is not None
    return store.put(boot_doc(host, boot, **kw), key)  # type: ignore[arg-type]


def test_a_boot_round_trips_with_its_figures(tmp_path: Path) -> None:
    boot = sglang(0.85)
    with open_store(tmp_path / "h.sqlite3") as store:
        assert store.problem is None
        assert store.schema_version == SCHEMA_VERSION
        row = _put(store, "gpu-a", boot, source="ssh:unit x", peaks_mib={0: 70000.0, 1: 71000.0})
        got = store.by_id("gpu-a", row)
    assert got is not None
    doc = got.doc
    assert doc["status"] == "ready"
    assert doc["engine"] == "sglang"
    assert doc["flags"]["mem_fraction_static"] == 0.85
    assert doc["metrics"]["max_total_num_tokens"] == boot.metrics.max_total_num_tokens
    assert [p["name"] for p in doc["phases"]] == [p.name.value for p in boot.phases]
    assert doc["peak_used_mib"] == {"0": 70000.0, "1": 71000.0}
    assert doc["source"] == "ssh:unit x"
    assert len(doc["avail_before_load_gib"]) == 4  # one per rank
    # the calculator's boot comes back from the document
    again = rec.boot_from_doc(doc)
    assert again.metrics == boot.metrics
    assert again.flags == boot.flags
    assert again.facts == boot.facts


def test_the_wal_journal_is_on(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.sqlite3") as store:
        _put(store, "a", sglang())
    db = sqlite3.connect(tmp_path / "h.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def _first_schema_file(path: Path, boot: object) -> None:
    """A history file as kvtui's first schema wrote it, holding ``boot`` of host gpu-a as "k1"."""
    db = sqlite3.connect(path, isolation_level=None)
    MIGRATIONS[0](db)  # the first schema, as kvtui's first history wrote it
    db.execute("PRAGMA user_version = 1")
    doc = boot_doc("gpu-a", boot)  # type: ignore[arg-type]
    db.execute("INSERT INTO boots (key, host, started_at, status, engine, model, doc, updated_at) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               ("k1", "gpu-a", doc["started_at"], "ready", "sglang", "/models/x", json.dumps(doc), 1.0))
    db.close()


def test_a_first_schema_database_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    boot = sglang(0.85)
    _first_schema_file(path, boot)
    with open_store(path) as store:
        assert store.problem is None
        assert store.schema_version == SCHEMA_VERSION == 2
        rows = store.boots("gpu-a")
        assert [r.key for r in rows] == ["k1"]
        assert rows[0].doc["metrics"]["max_total_num_tokens"] == boot.metrics.max_total_num_tokens
    db = sqlite3.connect(path)
    fraction, tokens, ts = db.execute("SELECT fraction, tokens, started_ts FROM boots").fetchone()
    assert fraction == 0.85
    assert tokens == boot.metrics.max_total_num_tokens
    assert ts == pytest.approx(boot.started_at.timestamp())  # type: ignore[union-attr]


def test_a_reader_of_a_first_schema_file_upgrades_it_first(tmp_path: Path) -> None:
    """`kvtui history` (a reader) on a file no writer has opened since kvtui's first schema: its
    queries need the current columns ("no such column: started_ts" before), so it upgrades the
    file as a writer would, then reads it."""
    path = tmp_path / "old.sqlite3"
    boot = sglang(0.85)
    _first_schema_file(path, boot)
    with open_store(path, readonly=True) as store:
        assert store.problem is None
        assert store.readonly
        assert store.schema_version == SCHEMA_VERSION
        assert [r.key for r in store.boots("gpu-a")] == ["k1"]
        assert store.deployment(rec.deployment_of(boot_doc("gpu-a", boot))) != []  # a v2 column


def test_a_first_schema_file_that_cannot_be_upgraded_reads_as_empty_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    _first_schema_file(path, sglang(0.85))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        with open_store(path, readonly=True, busy_timeout=0.2) as store:
            assert "written by an older kvtui (history schema 1" in (store.problem or "")
            assert "could not be upgraded" in (store.problem or "")
            assert "locked by another process" in (store.problem or "")
            assert store.boots("gpu-a") == []  # empty, not "no such column"
            assert store.count() == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with open_store(path, readonly=True) as store:  # the lock gone, the next reader upgrades it
        assert store.problem is None
        assert [r.key for r in store.boots("gpu-a")] == ["k1"]


def test_a_newer_schema_is_read_only_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    with open_store(path) as store:
        _put(store, "a", sglang())
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    db.commit()
    db.close()
    with open_store(path) as store:
        assert store.readonly
        assert "newer kvtui" in (store.problem or "")
        assert len(store.boots("a")) == 1  # still readable
        with pytest.raises(HistoryError, match="newer kvtui"):
            _put(store, "a", sglang(0.9, minutes=30))


def test_a_file_another_kvtui_is_still_creating_reads_as_empty(tmp_path: Path) -> None:
    """A reader that opens the file between its creation and the schema's commit (seen in CI: the
    console's recorder creating it while `kvtui history` read) finds no table yet: empty, no error."""
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")  # the writer's first statement; no table yet
    with open_store(path, readonly=True) as store:
        assert store.problem is None
        assert store.count() == 0
        assert store.count("a") == 0
        assert store.boots("a") == []
    db.close()
    with open_store(path) as store:  # and a writer then creates the schema as usual
        _put(store, "a", sglang())
    with open_store(path, readonly=True) as store:
        assert store.count("a") == 1


def test_the_same_boot_is_stored_once_and_the_further_document_wins(tmp_path: Path) -> None:
    boot = sglang(0.85)
    early = boot_doc("a", boot)
    early["status"] = "starting"
    early["phases"] = early["phases"][:2]
    key = boot_key("a", boot)
    assert key is not None
    with open_store(tmp_path / "h.sqlite3") as store:
        store.put(boot_doc("a", boot, peaks_mib={0: 100.0}), key)
        store.put(dict(early, peak_used_mib={"0": 500.0, "1": 7.0}), key)  # a later reader that saw less
        store.put(boot_doc("a", boot, restart={"edit": ["mem-fraction-static=0.85"]}), key)
        rows = store.boots("a")
    assert len(rows) == 1
    doc = rows[0].doc
    assert doc["status"] == "ready"
    assert len(doc["phases"]) == len(boot.phases)
    assert doc["peak_used_mib"] == {"0": 500.0, "1": 7.0}  # the maximum of both readers
    assert doc["restart"] == {"edit": ["mem-fraction-static=0.85"]}


def test_keys_follow_the_first_line_not_the_reader(tmp_path: Path) -> None:
    a, b = sglang(0.85), sglang(0.85)  # the same log read twice
    assert boot_key("h", a) == boot_key("h", b)
    assert boot_key("h", a) != boot_key("other", a)
    assert boot_key("h", a) != boot_key("h", sglang(0.85, minutes=30))
    a.started_at = None
    assert boot_key("h", a) is None
    assert boot_key("h", a, {"set": "/s/1", "boot": 0}) == boot_key("h", b.__class__(), {"set": "/s/1", "boot": 0})


def test_pruning_by_count_and_age(tmp_path: Path) -> None:
    now = (T0.replace(tzinfo=None)).timestamp() + 40 * 60
    path = tmp_path / "h.sqlite3"
    store = Store(path, limits=Limits(max_age_days=0, max_boots_per_host=3), clock=lambda: now).open()
    for i in range(5):
        _put(store, "a", sglang(round(0.80 + i * 0.01, 2), minutes=i * 5))
    _put(store, "b", sglang(0.85))
    fracs = [r.doc["flags"]["mem_fraction_static"] for r in store.boots("a")]
    assert fracs == [0.84, 0.83, 0.82]  # the newest three, newest first
    assert store.count("b") == 1  # per host
    store.close()
    # by age: boots last written more than 10 minutes ago go when the next one is added
    later = now + 11 * 60
    store = Store(path, limits=Limits(max_age_days=10 / 1440, max_boots_per_host=100), clock=lambda: later).open()
    _put(store, "a", sglang(0.90, minutes=39))
    assert [r.doc["flags"]["mem_fraction_static"] for r in store.boots("a")] == [0.9]
    assert store.count("b") == 1  # another host's boots wait for that host's next boot
    store.close()


def test_history_section_is_validated_like_the_others() -> None:
    cfg = parse_config("[history]\nmax_age_days = 30\nmax_boots_per_host = 50\n")
    assert cfg.history.max_age_days == 30
    assert cfg.history.max_boots_per_host == 50
    assert parse_config("").history.max_boots_per_host == 1000
    with pytest.raises(ConfigError) as err:
        parse_config("[history]\nmax_boots_per_host = 0\nkeep = 3\n", "x.toml")
    text = str(err.value)
    assert "x.toml" in text
    assert "[history] max_boots_per_host" in text
    assert "at least 1" in text
    assert "unknown key 'keep'" in text


def test_a_corrupt_file_is_a_clear_message_and_read_only(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"this is not a database, just bytes " * 200)
    store = open_store(path)
    assert store.readonly
    assert str(path) in (store.problem or "")
    assert "not a readable kvtui history database" in (store.problem or "")
    assert "move the file away" in (store.problem or "")
    with pytest.raises(HistoryError):
        _put(store, "a", sglang())
    assert path.read_bytes().startswith(b"this is not a database")  # left as it was


def test_a_locked_file_is_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    open_store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        store = open_store(path, busy_timeout=0.2)
        with pytest.raises(HistoryError, match="locked by another process"):
            _put(store, "a", sglang())
        assert store.boots("a") == []  # reading still works
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _put(store, "a", sglang())  # and once the lock is gone, writing does
    assert store.count("a") == 1
    store.close()


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, "tests")
    from history_support import sglang
    from kvtui.history import open_store, boot_doc, boot_key
    path, who = sys.argv[1], sys.argv[2]
    # a minute's busy wait: what is tested is that two writers both land, not how fast a loaded
    # disk checkpoints (a CI run at load saw the 5 s default run out: "locked … (waited for it)")
    store = open_store(__import__("pathlib").Path(path), busy_timeout=60.0)
    assert store.problem is None, store.problem
    for i in range(12):
        shared = sglang(round(0.80 + i * 0.005, 3), minutes=i)           # both processes see these boots
        store.put(boot_doc("a", shared), boot_key("a", shared))
        own = sglang(0.85, minutes=100 + i, seed=i)              # each process its own
        store.put(boot_doc("host-" + who, own), boot_key("host-" + who, own))
    store.close()
""")


def test_two_processes_write_at_once(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    repo = Path(__file__).resolve().parent.parent
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), who], cwd=repo,
                              stderr=subprocess.PIPE, text=True) for who in ("1", "2")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with open_store(path) as store:
        assert store.count("a") == 12  # every shared boot once
        assert store.count("host-1") == 12
        assert store.count("host-2") == 12
        assert store.count() == 36


OPENER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, "tests")
    from pathlib import Path
    from history_support import sglang
    from kvtui.history import open_store, boot_doc, boot_key
    path, go, who = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    own = sglang(0.85, minutes=100 + who, seed=who)
    print("ready", flush=True)
    end = time.monotonic() + 120
    while not go.exists():  # all start together: the race is the point
        assert time.monotonic() < end
        time.sleep(0.001)
    store = open_store(path, readonly=who % 2 == 1, busy_timeout=60.0)  # writers and readers at once
    assert store.problem is None, store.problem
    assert [r.key for r in store.boots("gpu-a")] == ["k1"]
    if not store.readonly:
        store.put(boot_doc("host-" + str(who), own), boot_key("host-" + str(who), own))
    store.close()
""")


def test_four_processes_open_a_first_schema_file_at_once(tmp_path: Path) -> None:
    """Two writers and two readers open an old file at the same moment: each either migrates it or
    finds it migrated (the version is read again inside the write lock); none sees "no such
    column", the old row is kept once and each writer's boot lands."""
    path = tmp_path / "old.sqlite3"
    _first_schema_file(path, sglang(0.85))
    go = tmp_path / "go"
    repo = Path(__file__).resolve().parent.parent
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(path), str(go), str(who)], cwd=repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in range(4)]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline() == "ready\n"
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with open_store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert [r.key for r in store.boots("gpu-a")] == ["k1"]
        assert store.count("host-0") == 1
        assert store.count("host-2") == 1
        assert store.count() == 3
