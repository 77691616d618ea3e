"""Orphaned engine processes: a process of a previous boot that lives on without its server.

Pure core: the host's process listing (``PS_COMMAND``: ``ps -eo pid=,ppid=,sid=,rss=,args=``,
parsed by ``parse_ps``) and the server's PIDs go in, the orphans come out (``find_orphans``).

The engines name their helper processes with ``setproctitle`` (so ``ps`` shows the title, not
the python command line):

- vLLM 0.32 (``vllm/utils/system_utils.py``: ``f"{VLLM_PROCESS_NAME_PREFIX}::{name}"``, prefix
  ``VLLM``): ``VLLM::EngineCore`` (``EngineCore_DP<r>`` with data parallelism),
  ``VLLM::Worker`` (``Worker_TP<r>``/``_DCP<r>``/``_EP<r>``), ``VLLM::DPCoordinator``,
  ``VLLM::APIServer_<i>`` (several API servers). The API server ``vllm serve …`` keeps its
  command line. After a ``kill -9`` of the API server its EngineCore and Workers live on
  (reparented to init), holding their memory, and the next start fails with "Free memory on
  device …".
- SGLang 0.5.x: ``sglang::scheduler`` (``sglang::scheduler_TP<r>…``), ``sglang::detokenizer``,
  ``sglang::data_parallel_controller``, ``sglang::detokenizer_coordinator``,
  ``sglang::semi_pd_standalone_scheduler``; the server is ``python -m sglang.launch_server …``
  (or ``sglang serve``).

An *orphan* is such a helper whose chain of parents reaches neither a server PID the host tracks
(unit, pid file, container) nor a live engine server process: its server is gone. It must also be
this host's server's: on a host with GPU processes listed, it holds memory on the server's GPUs
(the others stop nothing); on a CPU host it is in the session of the server the pid file names
(``setsid`` in the start command: the session id is that PID, dead or alive) — another server's
orphans on a shared CPU machine are not this one's, and a CPU host without a pid file has none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kvtui.gpu import GpuProcess

PS_MAX_ROWS = 20_000  # a bound on the listing read (a host has far fewer processes)
ARGS_MAX = 400  # the command line kept per process
# what a host runs to list its processes (procps and busybox ps both take -o with these names),
# bounded on the host: each line cut, the number of lines capped
PS_COMMAND = f"ps -eo pid=,ppid=,sid=,rss=,args= | cut -c1-{ARGS_MAX + 40} | head -n {PS_MAX_ROWS}"
KILL_GRACE_S = 10  # seconds between the polite kill and kill -9 in the advice

_HELPER = re.compile(
    r"^(?:(?P<vllm>[A-Za-z0-9_.-]+)::(?:EngineCore|Worker|DPCoordinator|APIServer)\w*"
    r"|sglang::(?:scheduler|detokenizer|data_parallel_controller|semi_pd_standalone_scheduler)\w*)"
)
_SERVER = re.compile(
    r"(?:^|[\s/])(?:vllm\s+serve\b|-m\s+vllm\.entrypoints\.|vllm\.entrypoints\.openai\.api_server"
    r"|-m\s+sglang\.launch_server\b|sglang\.launch_server|sglang\s+serve\b)"
)


@dataclass(frozen=True, slots=True)
class ProcRow:
    """One process of the host's listing."""

    pid: int
    ppid: int
    args: str
    rss_kib: int | None = None
    sid: int | None = None  # the session id


@dataclass(frozen=True, slots=True)
class Orphan:
    """An engine helper process whose server is gone."""

    pid: int
    ppid: int
    title: str
    engine: str  # "vllm" / "sglang"
    used_mib: float | None = None  # GPU memory held (None: not on a listed GPU)
    rss_mib: float | None = None
    gpu_index: int | None = None

    @property
    def holds(self) -> str:
        """What it holds, for a line: ``1,234 MiB of GPU 0`` / ``2,910 MiB of RAM``."""
        if self.used_mib is not None:
            where = f" of GPU {self.gpu_index}" if self.gpu_index is not None else " of GPU memory"
            return f"{self.used_mib:,.0f} MiB{where}"
        if self.rss_mib is not None:
            return f"{self.rss_mib:,.0f} MiB of RAM"
        return "memory"


def parse_ps(text: str, limit: int = PS_MAX_ROWS) -> list[ProcRow]:
    """``ps -eo pid=,ppid=,sid=,rss=,args=`` lines; unusable lines are skipped, at most ``limit`` rows."""
    out: list[ProcRow] = []
    for line in text.splitlines():
        parts = line.split(None, 4)
        if len(parts) < 4 or not all(p.isdigit() for p in parts[:2]):
            continue
        sid = int(parts[2]) if parts[2].isdigit() else None
        rss = int(parts[3]) if parts[3].isdigit() else None
        args = parts[4] if len(parts) > 4 else ""
        out.append(ProcRow(int(parts[0]), int(parts[1]), args.strip()[:ARGS_MAX], rss, sid))
        if len(out) >= limit:
            break
    return out


def helper_engine(args: str) -> str | None:
    """``vllm`` / ``sglang`` when this command line is an engine helper's process title."""
    m = _HELPER.match(args.strip())
    if m is None:
        return None
    return "vllm" if m.group("vllm") is not None else "sglang"


def is_server(args: str) -> bool:
    """This command line is an engine's server (``vllm serve``, ``sglang.launch_server``)."""
    return helper_engine(args) is None and _SERVER.search(args) is not None


def find_orphans(
    rows: Sequence[ProcRow], server_pids: Iterable[int] = (), gpu: Sequence[GpuProcess] = (),
    session: int | None = None,
) -> list[Orphan]:
    """This host's server's engine helpers in ``rows`` whose server is gone, by PID.
    ``server_pids``: the server's PIDs the host tracks (may be empty: unknown, or no server);
    ``gpu``: the processes holding memory on the server's GPUs (empty on a CPU host);
    ``session``: on a CPU host, the server's session (the pid file's PID); None: no orphans there."""
    by_pid = {r.pid: r for r in rows}
    servers = set(server_pids)
    on_gpu: dict[int, GpuProcess] = {}
    for p in gpu:
        held = on_gpu.get(p.pid)
        on_gpu[p.pid] = p if held is None else GpuProcess(p.pid, held.used_mib + p.used_mib, held.gpu_index,
                                                           held.gpu_uuid, held.name)
    out: list[Orphan] = []
    for row in sorted(rows, key=lambda r: r.pid):
        engine = helper_engine(row.args)
        if engine is None or row.pid in servers or not _orphaned(row, by_pid, servers):
            continue
        g = on_gpu.get(row.pid)
        if (gpu and g is None) or (not gpu and (session is None or row.sid != session)):
            continue
        out.append(Orphan(
            pid=row.pid, ppid=row.ppid, title=row.args.split()[0] if row.args else "", engine=engine,
            used_mib=None if g is None else g.used_mib,
            rss_mib=None if row.rss_kib is None else row.rss_kib / 1024.0,
            gpu_index=None if g is None else g.gpu_index,
        ))
    return out


def _orphaned(row: ProcRow, by_pid: Mapping[int, ProcRow], servers: set[int]) -> bool:
    """Climb the parents: a tracked server PID or a live engine server above → not an orphan;
    the first parent that is neither an engine helper nor a server (init, a shell, a subreaper,
    or gone) → an orphan."""
    seen: set[int] = set()
    cur = row
    while cur.pid not in seen and len(seen) < 64:
        seen.add(cur.pid)
        parent = by_pid.get(cur.ppid)
        if cur.ppid in servers:
            return False
        if parent is None:
            return True
        if is_server(parent.args):
            return False
        if helper_engine(parent.args) is None:
            return True
        cur = parent
    return True


def pids_text(orphans: Sequence[Orphan]) -> str:
    return " ".join(str(o.pid) for o in orphans)


def kill_command(orphans: Sequence[Orphan]) -> str:
    """The command that ends them: ``kill PID …`` then ``kill -9`` after a grace."""
    pids = pids_text(orphans)
    return f"kill {pids}; sleep {KILL_GRACE_S}; kill -9 {pids} 2>/dev/null"


def describe(orphans: Sequence[Orphan]) -> str:
    """``PID 812 (VLLM::EngineCore, 2,910 MiB of RAM), PID 905 (VLLM::Worker, …)``."""
    return ", ".join(f"PID {o.pid} ({o.title}, {o.holds})" for o in orphans)


def refusal_text(orphans: Sequence[Orphan]) -> str:
    """Why a restart is refused over them, with the command to end them."""
    n = len(orphans)
    return (f"{n} orphaned engine process{'es' if n != 1 else ''} of the previous boot still hold"
            f"{'s' if n == 1 else ''} memory: {describe(orphans)}; a new boot would fail for the memory. "
            f"End them first ({kill_command(orphans)}), or pass --force")


def hint_text(orphans: Sequence[Orphan]) -> str:
    """The gpu_busy failure hint's line naming them."""
    return (f"orphaned engine processes of the previous boot hold the memory: {describe(orphans)} — "
            f"end them: {kill_command(orphans)}")
