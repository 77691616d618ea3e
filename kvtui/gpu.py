"""GPU memory samples: parse ``nvidia-smi --query-gpu/--query-compute-apps`` CSV and NVML readings.

Pure core: no I/O here; backends feed text or NVML values in.

The streams this module reads are::

    nvidia-smi --query-gpu=QUERY_GPU_FIELDS --format=csv,noheader,nounits -lms 1000
    nvidia-smi --query-compute-apps=QUERY_APPS_FIELDS --format=csv,noheader,nounits

``QUERY_GPU_FIELDS`` / ``QUERY_APPS_FIELDS`` are the comma-joined strings that go right after
``--query-gpu=`` / ``--query-compute-apps=``; the ``*_FIELD_NAMES`` tuples hold the same names.
Every parser tolerates ``[N/A]``, ``[Not Supported]``, blank lines, headers, stray units
(``65421 MiB``, ``41 %``, ``118.52 W``) and garbage: an unusable line gives ``None``, never an
exception.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

QUERY_GPU_FIELD_NAMES: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks_throttle_reasons.active",
)
QUERY_GPU_FIELDS: str = ",".join(QUERY_GPU_FIELD_NAMES)
# the fields before power.limit and the throttle reasons: what an nvidia-smi that rejects those
# ("not a valid field to query") is asked instead, and what older fakes print; parsed the same
QUERY_GPU_LEGACY_FIELD_NAMES: tuple[str, ...] = QUERY_GPU_FIELD_NAMES[:8]
QUERY_GPU_LEGACY_FIELDS: str = ",".join(QUERY_GPU_LEGACY_FIELD_NAMES)

# clocks throttle (NVML "clocks event") reasons worth a warning, by bit: the power cap and the
# thermal and hardware slowdowns slow the server; idle, application clocks, sync boost and display
# clocks are the GPU's normal states and say nothing
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x04, "power cap"),
    (0x08, "HW slowdown"),
    (0x20, "thermal"),
    (0x40, "HW thermal"),
    (0x80, "power brake"),
)

QUERY_APPS_FIELD_NAMES: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")
QUERY_APPS_FIELDS: str = ",".join(QUERY_APPS_FIELD_NAMES)

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_mib: float
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    name: str = ""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one GPU. ``ts`` is wall-clock seconds (time.time()) of the reading."""

    index: int
    used_mib: float
    total_mib: float
    util: float | None = None
    ts: float = 0.0
    uuid: str | None = None
    name: str = ""
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle: str | None = None  # the active throttle reasons worth a warning ("power cap"), None: none
    processes: tuple[GpuProcess, ...] = field(default_factory=tuple)
    stale: bool = False

    @property
    def used_gib(self) -> float:
        return self.used_mib / 1024.0

    @property
    def total_gib(self) -> float:
        return self.total_mib / 1024.0


# ---------------------------------------------------------------------------------------------
# Field helpers
# ---------------------------------------------------------------------------------------------

_MISSING = frozenset(
    {"", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]", "-"}
)
_UNITS = ("mib", "mb", "w", "%", "c")


def _number(raw: str) -> float | None:
    """A CSV cell as a finite float, tolerating ``[N/A]``-style markers and stray units."""
    text = raw.strip()
    low = text.lower()
    if low in _MISSING:
        return None
    for unit in _UNITS:
        if low.endswith(unit):
            low = low[: -len(unit)].strip()
            break
    try:
        value = float(low)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return value


def _integer(raw: str) -> int | None:
    text = raw.strip()
    if not text.isdigit():
        return None
    return int(text)


def throttle_text(mask: int | None) -> str | None:
    """The warning-worthy reasons in a clocks-throttle bitmask (``THROTTLE_REASONS``), joined
    (``power cap, thermal``); None when none is active or the mask is unknown."""
    if not mask:
        return None
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    return ", ".join(names) or None


def _mask(raw: str) -> int | None:
    """``0x0000000000000004`` (what nvidia-smi prints for ``clocks_throttle_reasons.active``)."""
    text = raw.strip().lower()
    try:
        return int(text, 16) if text.startswith("0x") else int(text) if text.isdigit() else None
    except ValueError:
        return None


def _text(raw: str) -> str | None:
    text = raw.strip()
    return None if text.lower() in _MISSING else text


# ---------------------------------------------------------------------------------------------
# --query-gpu
# ---------------------------------------------------------------------------------------------


def parse_query_gpu_line(line: str, ts: float) -> GpuSample | None:
    """One ``--query-gpu=QUERY_GPU_FIELDS --format=csv,noheader,nounits`` line -> a sample.

    ``None`` for a blank line, a header, or a line without a usable index and memory figures.
    Utilization, temperature and power may be missing (``[N/A]``) and come back as ``None``.
    """
    text = line.strip().strip("\r")
    if not text:
        return None
    cells = [c.strip() for c in text.split(",")]
    full, legacy = len(QUERY_GPU_FIELD_NAMES), len(QUERY_GPU_LEGACY_FIELD_NAMES)
    # the full line or a legacy one (no power limit, no throttle reasons); a GPU name never holds
    # a comma today: tolerate one anyway by re-joining the middle
    n = full if len(cells) >= full else legacy
    if len(cells) > n:
        extra = len(cells) - n
        cells = [*cells[:2], ", ".join(cells[2 : 3 + extra]), *cells[3 + extra :]]
    if len(cells) != n:
        return None
    index = _integer(cells[0])
    used = _number(cells[3])
    total = _number(cells[4])
    if index is None or used is None or total is None or total <= 0 or used < 0:
        return None
    return GpuSample(
        index=index,
        used_mib=used,
        total_mib=total,
        util=_number(cells[5]),
        ts=ts,
        uuid=_text(cells[1]),
        name=_text(cells[2]) or "",
        temperature_c=_number(cells[6]),
        power_w=_number(cells[7]),
        power_limit_w=_number(cells[8]) if n == full else None,
        throttle=throttle_text(_mask(cells[9])) if n == full else None,
    )


def parse_query_gpu_csv(text: str, ts: float) -> list[GpuSample]:
    """Every usable line of a ``--query-gpu`` block (one reading of all GPUs), in input order."""
    out: list[GpuSample] = []
    for line in text.splitlines():
        sample = parse_query_gpu_line(line, ts)
        if sample is not None:
            out.append(sample)
    return out


class QueryGpuTicks:
    """Groups the lines of a long-lived ``nvidia-smi --query-gpu … -lms N`` stream into ticks.

    nvidia-smi prints one line per GPU per interval with no separator. A tick is complete when
    ``expected`` samples arrived (when the GPU count is known), or when an index that is not
    larger than the previous one starts the next tick. ``feed`` returns a completed tick (sorted
    by index) or ``None``; ``flush`` returns what is pending.
    """

    def __init__(self, expected: int | None = None) -> None:
        self.expected = expected
        self._pending: list[GpuSample] = []

    def feed(self, line: str, ts: float) -> list[GpuSample] | None:
        sample = parse_query_gpu_line(line, ts)
        if sample is None:
            return None
        done: list[GpuSample] | None = None
        if self._pending and sample.index <= self._pending[-1].index:
            done = self.flush()
        self._pending.append(sample)
        if done is None and self.expected is not None and len(self._pending) >= self.expected:
            done = self.flush()
        return done

    def flush(self) -> list[GpuSample] | None:
        if not self._pending:
            return None
        out = sorted(self._pending, key=lambda s: s.index)
        self._pending = []
        return out


# ---------------------------------------------------------------------------------------------
# --query-compute-apps
# ---------------------------------------------------------------------------------------------


def parse_compute_apps_line(line: str) -> GpuProcess | None:
    """One ``--query-compute-apps=QUERY_APPS_FIELDS --format=csv,noheader,nounits`` line.

    The process name may itself contain commas (a path); it is everything between the pid and
    the last field. ``used_memory`` of ``[N/A]`` (containers, MIG) gives ``used_mib=0.0``:
    the PID is still worth knowing.
    """
    text = line.strip().strip("\r")
    if not text:
        return None
    cells = [c.strip() for c in text.split(",")]
    if len(cells) < len(QUERY_APPS_FIELD_NAMES):
        return None
    uuid = _text(cells[0])
    pid = _integer(cells[1])
    if uuid is None or pid is None or not uuid.upper().startswith(("GPU-", "MIG-")):
        return None
    used = _number(cells[-1])
    name = ",".join(cells[2:-1]).strip()
    if name.lower() in _MISSING:
        name = ""
    return GpuProcess(pid=pid, used_mib=used if used is not None and used >= 0 else 0.0, gpu_uuid=uuid, name=name)


def parse_compute_apps_csv(text: str) -> list[GpuProcess]:
    out: list[GpuProcess] = []
    for line in text.splitlines():
        proc = parse_compute_apps_line(line)
        if proc is not None:
            out.append(proc)
    return out


# ---------------------------------------------------------------------------------------------
# Joining, filtering, NVML
# ---------------------------------------------------------------------------------------------


def select_gpus(samples: Iterable[GpuSample], gpus: Sequence[int] | None) -> list[GpuSample]:
    """The samples of the configured GPUs (all when ``gpus`` is None), in index order."""
    wanted = None if gpus is None else set(gpus)
    return sorted((s for s in samples if wanted is None or s.index in wanted), key=lambda s: s.index)


def mark_stale(samples: Iterable[GpuSample]) -> list[GpuSample]:
    """The last good samples, flagged ``stale`` (the host is slow or the stream dropped)."""
    return [replace(s, stale=True) for s in samples]


def sample_from_nvml(
    index: int,
    used_bytes: float,
    total_bytes: float,
    ts: float,
    *,
    util_gpu: float | None = None,
    uuid: str | None = None,
    name: str = "",
    temperature_c: float | None = None,
    power_mw: float | None = None,
    power_limit_mw: float | None = None,
    throttle_mask: int | None = None,
    processes: Sequence[GpuProcess] = (),
) -> GpuSample:
    """A sample from NVML readings (``nvmlDeviceGetMemoryInfo`` bytes, utilization %,
    temperature °C, ``nvmlDeviceGetPowerUsage`` / ``nvmlDeviceGetEnforcedPowerLimit``
    milliwatts, ``nvmlDeviceGetCurrentClocksEventReasons`` bitmask). The NVML calls live in the
    local backend; this only converts units."""
    return GpuSample(
        index=index,
        used_mib=used_bytes / MIB,
        total_mib=total_bytes / MIB,
        util=util_gpu,
        ts=ts,
        uuid=uuid,
        name=name,
        temperature_c=temperature_c,
        power_w=None if power_mw is None else power_mw / 1000.0,
        power_limit_w=None if not power_limit_mw else power_limit_mw / 1000.0,
        throttle=throttle_text(throttle_mask),
        processes=tuple(replace(p, gpu_index=index, gpu_uuid=uuid) for p in processes),
    )


def process_from_nvml(
    pid: int, used_bytes: int | None, *, gpu_index: int | None = None, gpu_uuid: str | None = None, name: str = ""
) -> GpuProcess:
    """A process from ``nvmlDeviceGetComputeRunningProcesses`` (``usedGpuMemory`` may be None)."""
    return GpuProcess(
        pid=pid,
        used_mib=0.0 if used_bytes is None else used_bytes / MIB,
        gpu_index=gpu_index,
        gpu_uuid=gpu_uuid,
        name=name,
    )
