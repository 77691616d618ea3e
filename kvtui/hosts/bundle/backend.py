"""``BundleBackend``: the read-only host of ``kvtui connect --bundle`` (see the package doc).

- **Log**: the bundle's ``log.txt`` (the spool's lines as ``journalctl -o short-iso-precise``
  writes them: ``TS HOST IDENT: TEXT``) as records with their timestamps and identifiers; the
  cursor is the line number, so ``after_cursor`` resumes exactly. Then the stream waits (a
  recorded boot gets no new lines) until ``close``.
- **GPUs**: ``gpu.json`` (the boot's readings as the history kept them), one list per reading
  with its own time, ``READING_PACE_S`` apart (the plot fills in a few seconds); then the last
  reading stays. No readings: the stream ends (no GPU data).
- **Everything else**: no processes, no PIDs, ``run`` refuses, ``service_ops`` is ``BundleOps``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from kvtui.engines.events import LogRecord
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.history import bundle as hb
from kvtui.history.record import gpu_readings
from kvtui.hosts.backend import BackendError, CommandResult, ConnState, ConnStatus, LogStart
from kvtui.hosts.bundle.ops import BundleOps, read_only_reason

if TYPE_CHECKING:
    from kvtui.hosts.service.model import HostOps

SOURCE: Final = "journal"
BATCH: Final = 500  # records per batch handed to the monitor
# seconds between two recorded GPU readings: a little over the monitor's flush (0.05 s), which
# hands the view only the newest reading of each flush (240 readings: ~15 s to draw the plot)
READING_PACE_S: Final = 0.06
_LINE_RE: Final = re.compile(r"^(\d{4}-\d\d-\d\dT\S+) (\S+) ([^:\s]+): (.*)$")


class BundleError(BackendError):
    """The file is no kvtui bundle, or cannot be read; ``str()`` names it and what to do."""


@dataclass
class Bundle:
    """What ``connect --bundle`` shows of a bundle."""

    path: Path
    host: str
    boot: int | None
    records: list[LogRecord]
    readings: list[list[GpuSample]]
    doc: dict[str, object] = field(default_factory=dict)
    members: dict[str, bytes] = field(default_factory=dict)


def _ts(raw: str) -> datetime | None:
    if re.search(r"[+-]\d{4}$", raw):
        raw = raw[:-2] + ":" + raw[-2:]
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None


def parse_log(text: str) -> list[LogRecord]:
    """The bundle's ``log.txt`` as records (a line not in the journal shape: its text, no time)."""
    out: list[LogRecord] = []
    for n, line in enumerate(text.splitlines(), start=1):
        m = _LINE_RE.match(line)
        ts = _ts(m.group(1)) if m else None
        if m and ts is not None:
            ident = m.group(3)
            out.append(LogRecord(m.group(4), ts, str(n), SOURCE, None, None if ident == "kvtui" else ident))
        else:
            out.append(LogRecord(line, None, str(n), SOURCE))
    return out


def load_bundle(path: str | Path) -> Bundle:
    """Read a bundle (raises ``BundleError`` with the file and what is wrong)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise BundleError(f"{p}: no such file (a bundle is what kvtui bundle HOST or the console's bundle key wrote)")
    members = hb.read_members(p)
    if members is None:
        raise BundleError(f"{p}: not a kvtui bundle (expected a .tar.gz with manifest.json written by kvtui bundle)")
    if "log.txt" not in members:
        raise BundleError(f"{p}: the bundle has no log.txt: nothing to replay")
    try:
        manifest = json.loads(members["manifest.json"])
        doc = json.loads(members.get("boot.json", b"{}"))
        series = json.loads(members["gpu.json"]) if "gpu.json" in members else None
    except ValueError as exc:
        raise BundleError(f"{p}: a member is not valid JSON ({exc})") from exc
    readings = [
        [GpuSample(index=i, used_mib=used, total_mib=total, ts=ts) for i, used, total, ts in reading]
        for reading in gpu_readings(series)
    ]
    boot = manifest.get("boot")
    return Bundle(p, str(manifest.get("host") or p.stem), boot if isinstance(boot, int) else None,
                  parse_log(members["log.txt"].decode("utf-8", "replace")), readings,
                  doc if isinstance(doc, dict) else {}, members)


class BundleBackend:
    """A recorded boot as a host (see the module doc)."""

    recorded = True  # the console offers no change key (a key pressed says why nothing happens)

    def __init__(self, name: str, path: str | Path, *, bundle: Bundle | None = None) -> None:
        self.name = name
        self.path = Path(path)
        self.bundle = bundle
        self._status = ConnStatus(ConnState.CONNECTING)
        self._closed = asyncio.Event()

    def status(self) -> ConnStatus:
        return self._status

    def _load(self) -> Bundle:
        if self.bundle is None:
            try:
                self.bundle = load_bundle(self.path)
            except BundleError as exc:
                self._status = ConnStatus(ConnState.FAILED, str(exc))
                raise
        return self.bundle

    @property
    def recorded_boot(self) -> int | None:
        """The history's number of the boot this bundle holds (its manifest's ``boot``): the name
        the console gives it (``kvtui.history.ident``); None before it is loaded or without one."""
        return self.bundle.boot if self.bundle is not None else None

    async def start(self) -> None:
        b = await asyncio.to_thread(self._load)
        what = f"boot #{b.boot} of {b.host}" if b.boot is not None else f"a boot of {b.host}"
        self._status = ConnStatus(ConnState.CONNECTED, f"recorded: {what} from {self.path.name} (read-only)",
                                  recorded=True)

    async def close(self) -> None:
        self._closed.set()
        self._status = ConnStatus(ConnState.CLOSED)

    async def _until_closed(self) -> None:
        await self._closed.wait()

    async def follow_log(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None, *,
        began: float | None = None,
    ) -> AsyncIterator[list[LogRecord]]:
        bundle = self._load()
        if start is LogStart.NEXT_BOOT and after_cursor is None:
            await self._until_closed()  # a recorded boot has no next one
            return
        first = int(after_cursor) if after_cursor and after_cursor.isdigit() else 0
        records = bundle.records[first:]
        for i in range(0, len(records), BATCH):
            if self._closed.is_set():
                return
            yield records[i : i + BATCH]
            await asyncio.sleep(0)
        await self._until_closed()

    async def gpu_stream(self, interval_s: float = 1.0) -> AsyncIterator[list[GpuSample]]:
        bundle = self._load()
        if not bundle.readings:
            return  # no GPU data kept: the monitor shows none
        for reading in bundle.readings:
            if self._closed.is_set():
                return
            yield reading
            await asyncio.sleep(READING_PACE_S)
        await self._until_closed()

    async def gpu_processes(self) -> list[GpuProcess]:
        return []

    async def server_pids(self) -> set[int]:
        return set()

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        raise BackendError(read_only_reason(self.name, self.path))

    def service_ops(self) -> HostOps:
        return BundleOps(self)
