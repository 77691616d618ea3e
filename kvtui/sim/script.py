"""What a simulation returns (``BootScript``: every line with its time, the memory and utilisation over
time, how the boot ends) and the machinery both engine simulations write it with: ``_Sim`` (lines,
memory keyframes, tqdm bars as journald records them), the engines' small formatting helpers
(torch sizes, tqdm, systemd timespans) and argument parsing."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from kvtui.sim.presets import GIB, MIB, GpuSpec, Preset


@dataclass(frozen=True, slots=True)
class SimLine:
    t: float  # absolute wall-clock seconds
    text: str
    pid: int
    ident: str


@dataclass(frozen=True, slots=True)
class ForeignProcess:
    """A stale process of someone else holding memory on one GPU (the classic restart OOM)."""

    gpu: int
    mib: float
    pid: int = 41877
    name: str = "python3"


@dataclass(frozen=True, slots=True)
class ServingFacts:
    tokens: int
    max_running_requests: int
    context_len: int
    decode_tok_s: float
    tp_pid: int
    engine: str = "sglang"
    tag: str = ""  # SGLang: the rank tag (" TP0"); vLLM: the process tag ("APIServer")
    ms: bool = False  # SGLang's SGLANG_LOG_MS
    interval_s: float = 5.0  # simulated seconds between serving lines
    load: float | None = None  # a fixed offered load (the host's ``demo_load``), else the seeded waves


@dataclass(slots=True)
class BootScript:
    """One boot, fully determined. Times are absolute wall-clock seconds."""

    start: float
    lines: list[SimLine]
    outcome: str  # "ready" | "failed" | "stalled" (a multi-node boot waiting for a node forever)
    end_t: float  # the ready line's time, or the time the main process exits
    exit_code: str = ""  # systemd "code=" of the main process when failed: "killed" | "exited"
    exit_status: str = ""  # systemd "status=": "9/KILL", "2/INVALIDARGUMENT", "1/FAILURE"
    result: str = ""  # systemd "Failed with result '…'": "signal" | "exit-code"
    main_pid: int = 0
    rank_pids: dict[int, int] = field(default_factory=dict)  # physical GPU -> scheduler pid
    aux_pids: tuple[int, ...] = ()  # detokenizer etc. (no GPU memory)
    exe: str = ""
    # physical GPU -> keyframes (t, MiB held by the server on it); piecewise linear
    mem: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    util: list[tuple[float, float]] = field(default_factory=list)  # keyframes (t, util %) while booting
    serving: ServingFacts | None = None
    speed: float = 1.0

    @property
    def duration(self) -> float:
        return self.end_t - self.start

    def mem_at(self, gpu: int, t: float) -> float:
        frames = self.mem.get(gpu)
        if not frames or t < frames[0][0]:
            return 0.0
        return _interp(frames, t)

    def util_at(self, t: float) -> float:
        if not self.util or t < self.util[0][0]:
            return 0.0
        return _interp(self.util, t)


def _interp(frames: Sequence[tuple[float, float]], t: float) -> float:
    i = bisect.bisect_right(frames, t, key=lambda f: f[0])
    if i >= len(frames):
        return frames[-1][1]
    if i == 0:
        return frames[0][1]
    t0, v0 = frames[i - 1]
    t1, v1 = frames[i]
    if t1 <= t0:
        return v1
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


@dataclass(frozen=True, slots=True)
class BootInput:
    argv: tuple[str, ...]  # the ExecStart argv (executable first)
    env: Mapping[str, str]
    preset: Preset
    gpu: GpuSpec
    seed: int
    boot_no: int
    start: float
    speed: float
    foreign: ForeignProcess | None = None
    # a multi-node preset: the node that never reaches distributed init (the others wait there)
    stall_node: int | None = None
    # a multi-node preset: when the last of the other nodes reaches distributed init (clock
    # seconds; ``math.inf``: none is coming, this node waits there) — None: not known (the node
    # runs alone, as if the others were there when it was)
    meet_at: float | None = None


def torch_size(nbytes: float) -> str:
    """``c10::CachingAllocator::format_size``."""
    if nbytes <= 1024:
        return f"{int(nbytes)} bytes"
    if nbytes <= MIB:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= GIB:
        return f"{nbytes / MIB:.2f} MiB"
    return f"{nbytes / GIB:.2f} GiB"


def tqdm_interval(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_rate(n: int, elapsed: float) -> str:
    if n <= 0 or elapsed <= 0:
        return "?it/s"
    rate = n / elapsed
    return f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"


def tqdm_remaining(n: int, total: int, elapsed: float) -> str:
    if n <= 0 or elapsed <= 0:
        return "?"
    return tqdm_interval((total - n) * elapsed / n)


_BAR_CHARS = " ▏▎▍▌▋▊▉█"


def tqdm_bar(frac: float, width: int = 10) -> str:
    nsyms = len(_BAR_CHARS) - 1
    full, part = divmod(int(frac * width * nsyms), nsyms)
    out = _BAR_CHARS[-1] * full
    if full < width:
        out += _BAR_CHARS[part] + _BAR_CHARS[0] * (width - full - 1)
    return out


def _shard_bar(desc: str, k: int, total: int, elapsed: float) -> str:
    """The weight loaders' bar format: ``{desc}: {percentage:3.0f}% Completed | {n}/{total} [...]``."""
    return (
        f"{desc}: {100.0 * k / total:3.0f}% Completed | {k}/{total} "
        f"[{tqdm_interval(elapsed)}<{tqdm_remaining(k, total, elapsed)}, {tqdm_rate(k, elapsed)}]"
    )


def _capture_bar(desc: str, k: int, total: int, elapsed: float) -> str:
    """tqdm's default bar: ``{desc}: {percentage:3.0f}%|{bar}| {n}/{total} [...]`` (no desc: just the bar)."""
    head = f"{desc}: " if desc else ""
    if k == 0:
        return f"{head}  0%|{tqdm_bar(0.0)}| 0/{total} [00:00<?, ?it/s]"
    return (
        f"{head}{100.0 * k / total:3.0f}%|{tqdm_bar(k / total)}| {k}/{total} "
        f"[{tqdm_interval(elapsed)}<{tqdm_remaining(k, total, elapsed)}, {tqdm_rate(k, elapsed)}]"
    )


def systemd_timespan(seconds: float) -> str:
    """systemd's ``format_timespan`` at millisecond accuracy (``Consumed … CPU time``)."""
    ms = round(seconds * 1000)
    parts: list[str] = []
    for unit, size in (("h", 3600_000), ("min", 60_000)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    if ms or not parts:
        sec, milli = divmod(ms, 1000)
        parts.append(f"{sec}.{milli:03d}s".replace(".000s", "s") if milli else f"{sec}s")
    return " ".join(parts)


_BOOL = "bool"


class ArgError(Exception):
    """argparse's complaint: printed to stderr, exit status 2."""


def _parse_options(
    args: Sequence[str], table: Mapping[str, tuple[str, object]], option_names: Mapping[str, str]
) -> dict[str, object]:
    values: dict[str, object] = {}
    unknown: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("--") or tok == "--":
            unknown.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        dest = option_names.get(name)
        if dest is None:
            matches = sorted({d for opt, d in option_names.items() if opt.startswith(name)})
            if len(matches) > 1:
                opts = ", ".join(sorted(o for o, d in option_names.items() if o.startswith(name)))
                raise ArgError(f"ambiguous option: {name} could match {opts}")
            if not matches:
                unknown.append(tok)
                if not eq and i < len(args) and not args[i].startswith("--"):
                    unknown.append(args[i])
                    i += 1
                continue
            dest = matches[0]
        kind = table[dest][0]
        opt = "--" + dest.replace("_", "-")
        if kind == _BOOL:
            if eq:
                raise ArgError(f"argument {opt}: ignored explicit argument {inline!r}")
            values[dest] = True
            continue
        if eq:
            raw = inline
        else:
            if i >= len(args) or (args[i].startswith("--") and len(args[i]) > 2):
                raise ArgError(f"argument {opt}: expected one argument")
            raw = args[i]
            i += 1
        try:
            values[dest] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
        except ValueError:
            raise ArgError(f"argument {opt}: invalid {kind} value: {raw!r}") from None
    if unknown:
        raise ArgError("unrecognized arguments: " + " ".join(unknown))
    return values


def _kv_dtype(arg: object, model_dtype: str) -> tuple[str, int]:
    text = str(arg or "auto")
    if text.startswith("fp8_e5m2"):
        return "torch.float8_e5m2", 1
    if text.startswith("fp8"):
        return "torch.float8_e4m3fn", 1
    if text in ("float16", "half"):
        return "torch.float16", 2
    return f"torch.{model_dtype}", 2


def _site_packages(exe: str) -> str:
    base = exe.rsplit("/bin/", 1)[0] if "/bin/" in exe else "/usr"
    if base in ("/usr", "/usr/local"):
        return "/usr/local/lib/python3.12/dist-packages"
    return f"{base}/lib/python3.12/site-packages"


@dataclass(slots=True)
class _TqdmRun:
    """One tqdm bar on a process's stderr. tqdm writes ``\\r`` + the bar at every redraw and a
    newline only when the bar closes; journald cuts a stream into records at newlines, so the
    whole run is **one** record (``\\r``-joined redraws) that appears when the bar closes — or
    earlier, when another process writes to the same stream meanwhile (journald ends the
    pending line: ``_LINE_BREAK=pid-change``), or when the stream ends (``eof``). A line the
    same process logs meanwhile is glued to the pending redraws (one record)."""

    pid: int
    prefix: str  # what the process's stream wrapper puts at the start of a line (vLLM: "(Worker pid=N) ")
    draws: list[tuple[float, int, str]] = field(default_factory=list)  # (t, seq, bar text)
    closed: tuple[float, int] | None = None  # (t, seq) of the newline


class _Sim:
    """Collects lines and memory keyframes on the simulated time axis (seconds after start)."""

    def __init__(self, inp: BootInput, ms: bool) -> None:
        self.inp = inp
        self.ms = ms
        self.lines: list[tuple[float, int, SimLine]] = []
        self.runs: list[_TqdmRun] = []
        self.mem: dict[int, list[tuple[float, float]]] = {}
        self.util: list[tuple[float, float]] = [(inp.start, 0.0)]
        self.ident = inp.argv[0].rsplit("/", 1)[-1] if inp.argv else "python"
        self._seq = 0

    def at(self, sim_t: float) -> float:
        return self.inp.start + sim_t / self.inp.speed

    def real(self, sim_seconds: float) -> float:
        return sim_seconds / self.inp.speed

    def stamp(self, t: float, tag: str = "") -> str:
        lt = time.localtime(t)
        text = time.strftime("%Y-%m-%d %H:%M:%S", lt)
        if self.ms:
            text += f".{round((t % 1.0) * 1000) % 1000:03d}"
        return f"[{text}{tag}]"

    def emit(self, sim_t: float, text: str, pid: int, *, tag: str | None = "", raw: bool = False) -> None:
        t = self.at(sim_t)
        line = text if raw else f"{self.stamp(t, tag or '')} {text}"
        self._seq += 1
        self.lines.append((t, self._seq, SimLine(t, line, pid, self.ident)))

    def mem_frame(self, gpu: int, sim_t: float, mib: float) -> None:
        """Memory reaches ``mib`` at ``sim_t``, ramping linearly from the previous frame."""
        self.mem.setdefault(gpu, []).append((self.at(sim_t), mib))

    def mem_step(self, gpu: int, sim_t: float, mib: float) -> None:
        """Memory jumps to ``mib`` at ``sim_t`` (it held its previous value until then)."""
        frames = self.mem.setdefault(gpu, [])
        t = self.at(sim_t)
        if frames:
            frames.append((t, frames[-1][1]))
        frames.append((t, mib))

    def util_frame(self, sim_t: float, util: float) -> None:
        self.util.append((self.at(sim_t), util))

    def tqdm(self, pid: int, prefix: str = "") -> _TqdmRun:
        """Open a tqdm bar written by ``pid`` (see ``_TqdmRun``); draw it with ``draw``."""
        run = _TqdmRun(pid, prefix)
        self.runs.append(run)
        return run

    def draw(self, run: _TqdmRun, sim_t: float, text: str) -> None:
        """A redraw of ``run`` at ``sim_t`` (``\\r`` + ``text`` on the process's stderr)."""
        assert run.closed is None, "a closed tqdm bar is not redrawn"
        self._seq += 1
        run.draws.append((self.at(sim_t), self._seq, text))

    def close(self, run: _TqdmRun, sim_t: float, text: str | None = None) -> None:
        """tqdm's ``close()``: a last redraw (``text``, default the last one) and the newline."""
        if text is None and run.draws:
            text = run.draws[-1][2]
        if text is not None:
            self.draw(run, sim_t, text)
        self._seq += 1
        run.closed = (self.at(sim_t), self._seq)

    def sorted_lines(self, eof: float | None = None) -> list[SimLine]:
        """Every journal record in order. ``eof``: when the stream ends (the process tree died):
        a bar still open then becomes a record of its own (``_LINE_BREAK=eof``)."""
        entries = sorted(self.lines, key=lambda x: (x[0], x[1]))
        if not self.runs:
            return [line for _, _, line in entries]
        glued: set[int] = set()  # seq of lines glued to a pending bar (they are in its record)
        extra: list[tuple[float, float, SimLine]] = []
        for run in self.runs:
            if not run.draws:
                continue
            pending: list[str] = []
            di = 0
            first = run.draws[0][:2]
            end = run.closed
            if end is None:
                last_t = run.draws[-1][0] if eof is None else max(eof, run.draws[-1][0])
                end = (last_t, self._seq + 1)

            def record(t: float, order: float, text: str, run: _TqdmRun = run) -> None:
                extra.append((t, order, SimLine(t, run.prefix + text, run.pid, self.ident)))

            for t, seq, line in entries:
                if (t, seq) <= first:
                    continue
                if (t, seq) > end:
                    break
                while di < len(run.draws) and run.draws[di][:2] < (t, seq):
                    pending.append("\r" + run.draws[di][2])
                    di += 1
                if not pending:
                    continue
                if line.pid == run.pid:
                    body = line.text[len(run.prefix):] if line.text.startswith(run.prefix) else line.text
                    glued.add(seq)
                    record(t, seq, "".join(pending) + body)
                else:
                    record(t, seq - 0.5, "".join(pending))  # pid-change: the pending line ends first
                pending = []
            pending += ["\r" + d[2] for d in run.draws[di:]]
            if pending:
                record(end[0], end[1], "".join(pending))
        merged = [(t, float(seq), line) for t, seq, line in entries if seq not in glued] + extra
        return [line for _, _, line in sorted(merged, key=lambda x: (x[0], x[1]))]


_N = TypeVar("_N", int, float)


def _arg_num(args: Mapping[str, object], key: str, default: _N, kind: Callable[[str | float], _N]) -> _N:
    """An argument as a number (``default`` when absent, a switch, or not a number)."""
    v = args.get(key)
    if isinstance(v, bool) or v is None:
        return default
    try:
        return kind(v if isinstance(v, int | float) else str(v))
    except ValueError:
        return default


def _arg_int(args: Mapping[str, object], key: str, default: int) -> int:
    return _arg_num(args, key, default, int)


def _arg_float(args: Mapping[str, object], key: str, default: float) -> float:
    return _arg_num(args, key, default, float)


def _visible_gpus(env: Mapping[str, str], count: int) -> list[int]:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(count))
    out: list[int] = []
    for part in raw.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= count:
            break  # CUDA stops at the first invalid entry
        out.append(int(part))
    return out
