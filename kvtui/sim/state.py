"""The demo host's persistent state (``state.json`` beside the unit file): the *epochs* — each explicit
(re)start with its time, the unit as loaded, the seed and the speed — and the atomic writes."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypedDict

from kvtui.hosts.backend import BackendError

STATE_FORMAT = 1


MAX_EPOCHS = 32  # older epochs (and their boots) are forgotten, like a vacuumed journal


class DemoError(BackendError):
    """A demo-host operation was refused or its state is unusable; ``str()`` is user-facing."""


class ForeignDoc(TypedDict):
    """A foreign process as the state file keeps it (``kvtui.sim.script.ForeignProcess``'s fields)."""

    gpu: int
    mib: float
    pid: int
    name: str


@dataclass(slots=True)
class Epoch:
    """One explicit start of the unit (and the automatic restarts that follow it)."""

    id: int
    start: float
    unit: str  # the unit as loaded when this epoch started
    g0: int  # global boot number of its first boot
    counter0: int = 0  # systemd restart counter at its first boot
    end: float | None = None  # explicit stop / restart time
    max_boots: int | None = None  # cut short by a daemon-reload during an automatic-restart chain
    seed: int = 0
    speed: float = 1.0
    foreign: ForeignDoc | None = None
    killed: float | None = None  # ``kill()``: the server got SIGKILL then (the epoch ends with it)


@dataclass(slots=True)
class DemoState:
    state_id: str
    model: str
    engine: str
    seed: int
    created: float
    unit_name: str
    loaded_unit: str
    epochs: list[Epoch]
    foreign: ForeignDoc | None = None
    format: int = STATE_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DemoState:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT:
            raise ValueError("unknown state format")
        epochs = [Epoch(**e) for e in raw.pop("epochs")]
        return cls(epochs=epochs, **raw)


def _atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Temp file in the same directory, fsync, rename: readers see the old or the new file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
