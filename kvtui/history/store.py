"""The boot store: one SQLite file, ``$XDG_STATE_HOME/kvtui/history.sqlite3`` (stdlib ``sqlite3``).

- WAL journal, ``synchronous=NORMAL``, a busy timeout: several kvtui processes (console, ``wait``,
  ``apply``) write at once; every write is one ``BEGIN IMMEDIATE`` transaction that reads the
  stored document of the boot, merges (``record.merge``) and writes it back, so two writers of one
  boot never lose each other's part and never store it twice (``key`` is UNIQUE).
- The schema version is ``PRAGMA user_version``; ``MIGRATIONS[n]`` takes a database from version
  ``n`` to ``n + 1`` (run in one transaction on open). A file from a newer kvtui is opened
  read-only with a message.
- Bounded: when a boot is added, the host's boots last written more than ``max_age_days`` ago
  (a replayed old log counts from when it was recorded) and those beyond the newest
  ``max_boots_per_host`` (by start) are deleted (``[history]`` in hosts.toml).
- Problems never crash a caller: a file that is not a database, cannot be opened or is locked for
  longer than the busy timeout makes ``HistoryError`` (a message naming the file and what to do;
  ``HistoryBusy`` for the lock: worth trying again later); ``open_store`` returns a store that
  says why it is read-only (``problem``, and ``busy`` when only the lock stood in the way) instead
  of raising.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from pydantic import JsonValue

from kvtui.config import state_dir
from kvtui.history import record as rec
from kvtui.history.doc import BootDoc, DocError, DocVersionError

FILE_NAME: Final = "history.sqlite3"
DEFAULT_BUSY_S: Final = 5.0
WAL_RETRY_S: Final = 0.01  # the first pause before the WAL switch is tried again (``Store._wal``)
DEFAULT_MAX_AGE_DAYS: Final = 365.0
DEFAULT_MAX_BOOTS: Final = 1000
REFUSED_MAX: Final = 20  # the rows not read (``Store.refused``) whose messages are kept


class HistoryError(Exception):
    """The history cannot be read or written; ``str()`` is user-facing."""


class HistoryBusy(HistoryError):
    """The file stayed locked by another process (another kvtui writing, a checkpoint on a loaded
    disk) for longer than the busy timeout: nothing is wrong with it, a later try may succeed."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How much history is kept per host (``[history]`` in hosts.toml); 0 days = no age limit."""

    max_age_days: float = DEFAULT_MAX_AGE_DAYS
    max_boots_per_host: int = DEFAULT_MAX_BOOTS


def default_path() -> Path:
    return state_dir() / FILE_NAME


# -- schema ------------------------------------------------------------------------------------

_V1: Final = """
CREATE TABLE boots (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    host TEXT NOT NULL,
    started_at TEXT,
    status TEXT NOT NULL,
    engine TEXT,
    model TEXT,
    doc TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX boots_host ON boots (host, started_at);
"""

_V2_COLUMNS: Final = (
    ("started_ts", "REAL"),
    ("deployment", "TEXT"),
    ("fraction", "REAL"),
    ("tokens", "INTEGER"),
    ("seconds", "REAL"),
    ("failure_kind", "TEXT"),
    ("restarted", "INTEGER NOT NULL DEFAULT 0"),
)


def _derived(doc: BootDoc) -> dict[str, object]:
    """The columns computed from a document (v2)."""
    started = doc.started
    ts: float | None = None
    if started is not None:
        try:
            ts = started.timestamp()
        except (OverflowError, OSError, ValueError):
            ts = None
    return {
        "started_ts": ts,
        "deployment": doc.deployment,
        "fraction": doc.fraction,
        "tokens": doc.tokens,
        "seconds": doc.seconds,
        "failure_kind": doc.failure_kind,
        "restarted": 1 if doc.restart is not None and doc.restart.to_json() else 0,
    }


def _migrate_1_to_2(db: sqlite3.Connection) -> None:
    for name, kind in _V2_COLUMNS:
        db.execute(f"ALTER TABLE boots ADD COLUMN {name} {kind}")
    db.execute("CREATE INDEX boots_host_ts ON boots (host, started_ts)")
    db.execute("CREATE INDEX boots_deployment ON boots (deployment)")
    rows = db.execute("SELECT id, doc FROM boots").fetchall()
    for row_id, raw in rows:
        try:
            doc = BootDoc.parse(raw, f"row {row_id}")
        except DocError:
            continue  # not read (a newer kvtui's, or not a boot document): its columns stay empty
        d = _derived(doc)
        db.execute(
            "UPDATE boots SET " + ", ".join(f"{k} = ?" for k in d) + " WHERE id = ?", (*d.values(), row_id)
        )


def _create_1(db: sqlite3.Connection) -> None:
    for stmt in _V1.split(";"):
        if stmt.strip():
            db.execute(stmt)


# MIGRATIONS[n]: schema version n -> n + 1 (version 0 = an empty file)
MIGRATIONS: Final[tuple[Callable[[sqlite3.Connection], None], ...]] = (_create_1, _migrate_1_to_2)
SCHEMA_VERSION: Final = len(MIGRATIONS)


# -- rows --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredBoot:
    """One stored boot: ``id`` (what ``kvtui history`` shows and ``--diff`` takes) and its document
    (``document``; ``doc``: the same as JSON)."""

    id: int
    key: str
    host: str
    document: BootDoc
    updated_at: float

    def __post_init__(self) -> None:
        doc: object = self.document
        if not isinstance(doc, BootDoc):  # a document's JSON (a test's row): read through the model
            object.__setattr__(self, "document", BootDoc.parse(doc, f"row {self.id}"))

    @property
    def doc(self) -> dict[str, JsonValue]:
        """The document as its JSON object (``kvtui history --json``'s boot, less id and key)."""
        return self.document.to_json()

    @property
    def status(self) -> str:
        return self.document.status

    @property
    def started_at(self) -> datetime | None:
        return self.document.started

    def to_json(self) -> dict[str, JsonValue]:
        return {"id": self.id, "key": self.key, **self.doc}


def _locked(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _describe(exc: sqlite3.Error, path: Path) -> str:
    text = str(exc)
    if _locked(exc):
        return (f"{path}: the history database is locked by another process (waited for it): "
                "nothing was recorded this time; kvtui goes on")
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return (f"{path}: not a readable kvtui history database ({text}): the history is read-only; move the file "
                "away to start a new history")
    if "readonly" in text or "read-only" in text:
        return f"{path}: the history database is read-only ({text})"
    return f"{path}: history database error: {text}"


def _error(exc: sqlite3.Error, path: Path) -> HistoryError:
    """The ``HistoryError`` of an SQLite error: ``HistoryBusy`` when the file stayed locked."""
    return (HistoryBusy if _locked(exc) else HistoryError)(_describe(exc, path))


class Store:
    """The history file (see the module doc). One connection per thread that uses it."""

    def __init__(
        self,
        path: Path,
        *,
        limits: Limits | None = None,
        busy_timeout: float = DEFAULT_BUSY_S,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.limits = limits or Limits()
        self.busy_timeout = busy_timeout
        self.readonly = readonly
        self.problem: str | None = None
        # set by ``open_store``: this read-only store stands in for a writable one because the
        # file was locked when it was opened (``HistoryBusy``): opening it again later may succeed
        self.busy = False
        self.clock = clock
        self._db: sqlite3.Connection | None = None
        self._version = 0
        # the rows a read skipped: a newer kvtui's document (``DocVersionError``) or one that is not
        # a boot document; each message names the file, the row and why (the last ``REFUSED_MAX``)
        self.refused: list[str] = []

    # -- opening ---------------------------------------------------------------------------------

    def open(self, *, upgrade: bool = True) -> Store:
        """Connect and bring the schema up to date (a reader: ``upgrade`` an older one, see
        ``_open_readonly``). Raises ``HistoryError``."""
        try:
            if self.readonly:
                self._open_readonly(upgrade=upgrade)
                return self
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), timeout=self.busy_timeout, check_same_thread=False,
                                 isolation_level=None)
            self._db = db
            self._wal(db)
            db.execute("PRAGMA synchronous=NORMAL")
            self._migrate(db)
        except sqlite3.Error as exc:
            self.close()
            raise _error(exc, self.path) from None
        except OSError as exc:
            self.close()
            raise HistoryError(f"{self.path}: cannot open the history database: {exc.strerror or exc}") from None
        return self

    def _wal(self, db: sqlite3.Connection) -> None:
        """Switch the file to WAL (kept in the file: a no-op once it is). The switch needs the file
        to itself, and SQLite answers "locked" at once, without its busy wait, while another
        process reads it (two kvtuis opening a new or old-schema file at the same moment: seen in a
        test of four): tried again, ``WAL_RETRY_S`` apart and longer each time, for up to the busy
        timeout."""
        end = time.monotonic() + self.busy_timeout
        pause = WAL_RETRY_S
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() + pause > end:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.25)

    def _open_readonly(self, *, upgrade: bool) -> None:
        """A reader's connection (``mode=ro``: a reader never creates the file). A file another
        kvtui is still creating (no schema committed yet) reads as empty rather than "no such
        table"; one of an older schema is upgraded first, as a writer would (its queries need the
        current columns), or read as empty with a ``problem`` when it cannot be (locked, not
        writable)."""
        self._db = None
        if not self.path.exists():
            return
        uri = "file:" + str(self.path.absolute()) + "?mode=ro"
        db = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout, check_same_thread=False, isolation_level=None)
        try:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
        except BaseException:
            db.close()
            raise
        self._version = version
        if version == 0:
            db.close()
            return
        if version < SCHEMA_VERSION:
            db.close()
            reason = "it was not upgraded"
            if upgrade:
                try:
                    writer = Store(self.path, limits=self.limits, busy_timeout=self.busy_timeout, clock=self.clock)
                    writer.open().close()
                except HistoryError as exc:
                    reason = f"it could not be upgraded: {exc}"
                else:
                    self._open_readonly(upgrade=False)
                    return
            self.problem = (f"{self.path}: written by an older kvtui (history schema {version}; this one reads "
                            f"{SCHEMA_VERSION}) and {reason}; it reads as empty until kvtui can write the file")
            return
        self._db = db

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            self.readonly = True
            self._version = version
            self.problem = (f"{self.path}: written by a newer kvtui (history schema {version}; this one knows "
                            f"{SCHEMA_VERSION}): read-only")
            return
        if version < SCHEMA_VERSION:
            with self._write(db):
                version = int(db.execute("PRAGMA user_version").fetchone()[0])  # another process may have
                for step in MIGRATIONS[version:]:
                    step(db)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            version = SCHEMA_VERSION
        self._version = version

    @contextmanager
    def _write(self, db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return self._version

    def set_busy_timeout(self, seconds: float) -> None:
        """How long a write waits for another process's lock from now on (a closing writer
        shortens it to the time it has left)."""
        self.busy_timeout = seconds
        if self._db is not None:
            try:
                self._db.execute(f"PRAGMA busy_timeout = {max(0, int(seconds * 1000))}")
            except sqlite3.Error:
                pass

    # -- writing ---------------------------------------------------------------------------------

    def put(self, doc: BootDoc | Mapping[str, object], key: str) -> int:
        """Store (or merge into) the boot ``key``; the row id. Raises ``HistoryError`` (also when
        the stored document of ``key`` is a newer kvtui's: it is not overwritten)."""
        if self.readonly or self._db is None:
            raise HistoryError(self.problem or f"{self.path}: the history is read-only")
        db = self._db
        try:
            with self._write(db):
                row = db.execute("SELECT id, doc FROM boots WHERE key = ?", (key,)).fetchone()
                old = None
                if row is not None:
                    try:
                        old = BootDoc.parse(row[1], f"{self.path} row {row[0]}")
                    except DocVersionError as exc:
                        raise HistoryError(str(exc)) from None
                    except DocError:
                        old = None
                try:
                    merged = rec.merge(old, doc)
                except DocError as exc:
                    raise HistoryError(str(exc)) from None
                cols: dict[str, object] = {
                    "host": merged.host,
                    "started_at": merged.started_at,
                    "status": merged.status or "starting",
                    "engine": merged.engine,
                    "model": merged.model,
                    "doc": merged.dumps(),
                    "updated_at": self.clock(),
                    **_derived(merged),
                }
                if row is None:
                    cur = db.execute(
                        f"INSERT INTO boots (key, {', '.join(cols)}) VALUES (?{', ?' * len(cols)})",
                        (key, *cols.values()),
                    )
                    row_id = int(cur.lastrowid or 0)
                    self._prune(db, str(cols["host"]))
                else:
                    row_id = int(row[0])
                    db.execute("UPDATE boots SET " + ", ".join(f"{k} = ?" for k in cols) + " WHERE id = ?",
                               (*cols.values(), row_id))
        except sqlite3.Error as exc:
            raise _error(exc, self.path) from None
        return row_id

    def _prune(self, db: sqlite3.Connection, host: str) -> None:
        lim = self.limits
        if lim.max_age_days > 0:
            cutoff = self.clock() - lim.max_age_days * 86400.0
            db.execute("DELETE FROM boots WHERE host = ? AND updated_at < ?", (host, cutoff))
        db.execute(
            "DELETE FROM boots WHERE host = ? AND id NOT IN (SELECT id FROM boots WHERE host = ? "
            "ORDER BY COALESCE(started_ts, updated_at) DESC, id DESC LIMIT ?)",
            (host, host, max(1, lim.max_boots_per_host)),
        )

    # -- reading ---------------------------------------------------------------------------------

    def _rows(self, where: str, params: Sequence[object], limit: int | None) -> list[StoredBoot]:
        if self._db is None:
            return []
        sql = (f"SELECT id, key, host, doc, updated_at FROM boots WHERE {where} "
               "ORDER BY COALESCE(started_ts, updated_at) DESC, id DESC")
        if limit is not None:
            sql += f" LIMIT {max(0, int(limit))}"
        try:
            rows = self._db.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as exc:
            raise _error(exc, self.path) from None
        out: list[StoredBoot] = []
        for row_id, key, host, raw, updated in rows:
            try:
                doc = BootDoc.parse(raw, f"{self.path} row {row_id}")
            except DocVersionError as exc:
                self._refuse(str(exc))
                continue
            except DocError as exc:
                if raw.lstrip().startswith("{"):  # JSON that is not a boot document: said
                    self._refuse(str(exc))
                continue
            out.append(StoredBoot(int(row_id), str(key), str(host), doc, float(updated)))
        return out

    def _refuse(self, message: str) -> None:
        if message not in self.refused:
            self.refused = [*self.refused, message][-REFUSED_MAX:]

    def boots(self, host: str, *, limit: int | None = None) -> list[StoredBoot]:
        """The host's boots, newest first."""
        return self._rows("host = ?", (host,), limit)

    def by_id(self, host: str, row_id: int) -> StoredBoot | None:
        got = self._rows("host = ? AND id = ?", (host, row_id), 1)
        return got[0] if got else None

    def by_key(self, key: str) -> StoredBoot | None:
        got = self._rows("key = ?", (key,), 1)
        return got[0] if got else None

    def get(self, row_id: int) -> StoredBoot | None:
        """The boot with id ``row_id`` (ids are unique over all hosts)."""
        got = self._rows("id = ?", (row_id,), 1)
        return got[0] if got else None

    def by_key_prefix(self, prefix: str) -> list[StoredBoot]:
        """The boots whose key starts with ``prefix`` (at most two: more than one is ambiguous)."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return self._rows("key LIKE ? ESCAPE '\\'", (escaped + "%",), 2)

    def deployment(self, deployment: str, *, limit: int | None = 200) -> list[StoredBoot]:
        """Every host's boots of one deployment (engine | model | TP | version), newest first."""
        return self._rows("deployment = ?", (deployment,), limit)

    def count(self, host: str | None = None) -> int:
        if self._db is None:
            return 0
        try:
            if host is None:
                return int(self._db.execute("SELECT COUNT(*) FROM boots").fetchone()[0])
            return int(self._db.execute("SELECT COUNT(*) FROM boots WHERE host = ?", (host,)).fetchone()[0])
        except sqlite3.Error as exc:
            raise _error(exc, self.path) from None


def open_store(
    path: Path | None = None,
    *,
    limits: Limits | None = None,
    readonly: bool = False,
    busy_timeout: float = DEFAULT_BUSY_S,
) -> Store:
    """The history, opened; never raises: a store that cannot be written is read-only with its
    ``problem`` said (and one that cannot be read at all reads as empty)."""
    p = path if path is not None else default_path()
    store = Store(p, limits=limits, readonly=readonly, busy_timeout=busy_timeout)
    try:
        return store.open()
    except HistoryError as exc:
        problem = str(exc)
        busy = isinstance(exc, HistoryBusy)
    ro = Store(p, limits=limits, readonly=True, busy_timeout=busy_timeout)
    ro.busy = busy
    try:
        ro.open(upgrade=False)  # the writable open has just failed: no second wait to upgrade it
        if ro._db is not None:
            ro._db.execute("SELECT COUNT(*) FROM boots").fetchone()
    except (HistoryError, sqlite3.Error):
        ro.close()
    ro.problem = problem
    return ro
