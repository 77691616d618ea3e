"""The audit log: one JSON line per change kvtui made (or tried to make) to a host.

``$XDG_STATE_HOME/kvtui/audit.jsonl`` — host, file, diff, the local user and the remote login,
time (UTC), the edits, the backup, the prediction's verdict, and the outcome. Lines are appended
with ``O_APPEND`` and fsynced, so concurrent kvtui processes never interleave or lose an entry and
a crash leaves whole lines only. Read it with ``jq`` or ``read_entries()``.

The file grows by one line per apply/rollback (a few KiB with its diff); it is never rewritten.
"""

from __future__ import annotations

import getpass
import json
import os
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from kvtui.config import state_dir

AUDIT_FILE = "audit.jsonl"
MAX_DIFF_CHARS = 64 * 1024  # a larger diff is cut (the backup holds the whole old file)


def audit_path() -> Path:
    return state_dir() / AUDIT_FILE


def local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return f"uid {os.getuid()}"


def append(entry: Mapping[str, object], *, now: float | None = None, path: Path | None = None) -> Path:
    """Append one entry (``time`` and ``user`` are filled in when missing); return the file."""
    target = path or audit_path()
    record: dict[str, object] = {
        "time": datetime.fromtimestamp(now if now is not None else datetime.now(UTC).timestamp(), UTC).isoformat(
            timespec="seconds"
        ),
        "user": local_user(),
    }
    record.update(entry)
    diff = record.get("diff")
    if isinstance(diff, str) and len(diff) > MAX_DIFF_CHARS:
        record["diff"] = diff[:MAX_DIFF_CHARS] + f"\n… ({len(diff) - MAX_DIFF_CHARS} more characters cut)\n"
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return target


def read_entries(limit: int = 1000, *, path: Path | None = None) -> list[dict[str, object]]:
    """The newest ``limit`` entries, oldest first (a torn or foreign line is skipped)."""
    target = path or audit_path()
    out: deque[dict[str, object]] = deque(maxlen=max(1, limit))
    try:
        with target.open("rb") as fh:
            for raw in fh:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    except FileNotFoundError:
        return []
    return list(out)
