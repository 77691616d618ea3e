"""``DemoBackend``: the simulated host behind the ``HostBackend`` protocol — the journal with cursors,
the GPUs, the server's PIDs, and the unit file, ``daemon_reload``, ``restart``, ``stop``, ``kill``
the service drives through ``DemoOps``."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import math
import os
import random
import re
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from kvtui.config import DemoHost
from kvtui.config import state_dir as _state_root
from kvtui.engines.events import LogRecord
from kvtui.engines.orphans import ProcRow
from kvtui.engines.source_records import command_record, gap_range, gap_record, gap_where, start_missing_record
from kvtui.gpu import GpuProcess, GpuSample
from kvtui.hosts import shellcmd
from kvtui.hosts.backend import BackendError, CommandResult, ConnState, ConnStatus, LogMatch, LogStart
from kvtui.hosts.metrics import metrics_via_port
from kvtui.sim.http import Serving, serve_port, serving_of
from kvtui.sim.metrics import DemoMetrics
from kvtui.sim.ops import DemoOps
from kvtui.sim.presets import MODELS, PRESETS, GpuSpec, Preset, PresetError, resolve_preset_name
from kvtui.sim.script import BootInput, BootScript, ForeignProcess
from kvtui.sim.serving import serving_load
from kvtui.sim.simulate import simulate_arrival
from kvtui.sim.state import MAX_EPOCHS, DemoError, DemoState, Epoch, ForeignDoc, _atomic_write
from kvtui.sim.timeline import BACKLOG_SERVING_LINES, BootView, Line, _Timeline
from kvtui.sim.unit import UnitInfo, _sd_time, _systemd_quote, parse_unit

if TYPE_CHECKING:
    from kvtui.hosts.service.model import HostOps

MAX_BATCH = 2000
POWER_CAP_SHARE = 0.97  # a simulated GPU drawing this share of its power limit is held at its power cap


DEMO_START_MISSING_UPTIME_H: Final = 48.0


class DemoBackend:
    """A simulated GPU host (see the module docstring). Implements ``HostBackend``."""

    serve_metrics: bool = True  # the simulated server's /metrics (off: 404, as SGLang without --enable-metrics)

    def __init__(
        self,
        name: str = "demo",
        host: DemoHost | None = None,
        *,
        clock: Callable[[], float] | None = None,
        speed: float | None = None,
        seed: int | None = None,
        engine: str | None = None,
        model: str | None = None,
        gpus: Sequence[int] | None = None,
        readonly: bool | None = None,
        state_dir: Path | None = None,
        gpu: GpuSpec | None = None,
        poll_interval: float = 0.1,
    ) -> None:
        self.name = name
        self.clock: Callable[[], float] = clock or time.time
        cfg = host if host is not None else DemoHost()
        self.speed = float(speed if speed is not None else cfg.demo_speed)
        if not self.speed > 0:
            raise DemoError(f"demo host '{name}': demo_speed must be > 0, got {self.speed}")
        self.seed = int(seed if seed is not None else cfg.demo_seed)
        self.engine = str(engine or cfg.demo_engine)
        try:
            self.model_key = resolve_preset_name(
                model if model is not None else cfg.demo_model, self.engine
            )
        except PresetError as exc:
            raise DemoError(f"demo host '{name}': {exc}") from None
        sel = gpus if gpus is not None else cfg.gpus
        self.gpu = gpu or GpuSpec()
        self.gpus: tuple[int, ...] | None = None if sel is None else tuple(sorted(set(sel)))
        if self.gpus is not None:
            bad = [g for g in self.gpus if not 0 <= g < self.gpu.count]
            if bad:
                raise DemoError(
                    f"demo host '{name}': gpus {bad} do not exist (the demo host has GPUs 0-{self.gpu.count - 1})"
                )
        self.readonly = bool(readonly if readonly is not None else cfg.readonly)
        if state_dir is None:
            state_dir = _state_root() / "demo" / name
        self.state_dir = state_dir
        self.poll_interval = poll_interval
        self._metrics: tuple[tuple[int, int, float], DemoMetrics] | None = None  # the boot's /metrics totals
        self.idle_polls = 0  # follower polls answered by one stat (nothing due yet), for tests
        self._collected_due: tuple[float | None, tuple[int, int] | None] = (None, None)
        self.preset: Preset = PRESETS[self.model_key]
        # a multi-node preset: which node this host is (its unit's --node-rank) and the node whose
        # boot the simulation stalls before distributed init (the others then wait there)
        self.node = int(cfg.demo_node or 0)
        self.stall_node: int | None = cfg.demo_stall_node
        # a server up for days (issue 21): its start this long before the state is created, and
        # whether that start is gone from the simulated log (rotated away)
        self.start_missing = bool(cfg.demo_start_missing)
        # a start rotated away is days old: without demo_uptime_h the simulated server has served
        # DEMO_START_MISSING_UPTIME_H already (else its HTTP side would still be "starting" while
        # its log says it serves)
        uptime_h = cfg.demo_uptime_h or (DEMO_START_MISSING_UPTIME_H if self.start_missing else None)
        self.uptime_s = float(uptime_h) * 3600.0 if uptime_h else 0.0
        self.load: float | None = cfg.demo_load  # a fixed offered load (issue 24's incident), else the waves
        self._status = ConnStatus(ConnState.CONNECTING, "simulated host")
        self._closed = False
        # simulated orphaned engine helpers of a previous boot (issue 24): their GPU memory and
        # title (``name``), under init; empty unless a test or a preset sets them
        self.orphans: list[GpuProcess] = []
        self._wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._state: DemoState | None = None
        self._state_sig: tuple[int, int] | None = None
        self._units: dict[str, UnitInfo] = {}
        self._scripts: OrderedDict[tuple[str, int, int, float | None], BootScript] = OrderedDict()
        self._views: OrderedDict[tuple[object, int], BootView] = OrderedDict()
        self._uuids: dict[int, str] = {}
        # a multi-node preset: the other nodes (found at the rendezvous, see ``peer_timelines``)
        self._registered = False
        self._peers: dict[tuple[int, str], DemoBackend] = {}
        self._arrivals: OrderedDict[tuple[str, int], float | None] = OrderedDict()
        self._meets: OrderedDict[object, list[dict[int, float]]] = OrderedDict()

    # -- paths and locking ----------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def unit_name(self) -> str:
        return self._load().unit_name

    @property
    def unit_path(self) -> Path:
        return self.state_dir / self._load().unit_name

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    def unit_cache(self, text: str) -> UnitInfo:
        info = self._units.get(text)
        if info is None:
            info = parse_unit(text)
            if len(self._units) > 32:
                self._units.clear()
            self._units[text] = info
        return info

    # -- state ------------------------------------------------------------------------------------

    def _fresh_state(self, now: float) -> DemoState:
        preset = self.preset
        unit_text = preset.unit_text(self.gpus, node=self.node)
        st = DemoState(
            state_id=secrets.token_hex(4),
            model=self.model_key,
            engine=self.engine,
            seed=self.seed,
            created=now,
            unit_name=preset.unit_name,
            loaded_unit=unit_text,
            epochs=[Epoch(id=0, start=now - self.uptime_s, unit=unit_text, g0=0, seed=self.seed, speed=self.speed)],
        )
        _atomic_write(self.state_dir / st.unit_name, unit_text, 0o644)
        return st

    def _read_state_file(self) -> DemoState | None:
        try:
            text = self.state_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DemoError(f"demo host '{self.name}': cannot read {self.state_path}: {exc}") from exc
        try:
            st = DemoState.from_json(text)
        except (ValueError, TypeError, KeyError):
            return None  # unusable (or an older format): start over
        if st.model != self.model_key or st.engine != self.engine or st.model not in PRESETS:
            return None  # the host was reconfigured: a new simulated server
        return st

    def _sig(self) -> tuple[int, int] | None:
        try:
            s = os.stat(self.state_path)
        except FileNotFoundError:
            return None
        return (s.st_mtime_ns, s.st_size)

    def _load(self) -> DemoState:
        """The current state (re-read when another process changed it; created on first use)."""
        sig = self._sig()
        if self._state is not None and sig == self._state_sig:
            return self._state
        with self._locked(exclusive=False):
            st = self._read_state_file()
            sig = self._sig()
        if st is None:
            with self._locked(exclusive=True):
                st = self._read_state_file()
                if st is None:
                    st = self._fresh_state(self.clock())
                    self._write_state(st)
                sig = self._sig()
        self._state, self._state_sig = st, sig
        self._register()  # a node whose host exists is found at the rendezvous, whoever asks first
        return st

    def _refresh_unlocked(self) -> None:
        """Re-read the state if another process changed it (the caller holds a lock)."""
        sig = self._sig()
        if sig == self._state_sig and self._state is not None:
            return
        st = self._read_state_file()
        if st is not None:
            self._state, self._state_sig = st, self._sig()

    def _write_state(self, st: DemoState) -> None:
        if len(st.epochs) > MAX_EPOCHS:
            st.epochs = st.epochs[-MAX_EPOCHS:]
        _atomic_write(self.state_path, st.to_json() + "\n", 0o644)
        self._state, self._state_sig = st, self._sig()

    @contextlib.contextmanager
    def _mutate(self) -> Iterator[DemoState]:
        if self.readonly:
            raise DemoError(f"demo host '{self.name}' is readonly: no edits or restarts")
        with self._locked(exclusive=True):
            st = self._read_state_file()
            if st is None:
                st = self._fresh_state(self.clock())
            yield st
            self._write_state(st)

    def _timeline(self) -> _Timeline:
        st = self._load()
        return _Timeline(self, st, (st.state_id, self._state_sig, self.peer_sig()))

    # -- HostBackend --------------------------------------------------------------------------------

    def status(self) -> ConnStatus:
        return self._status

    async def start(self) -> None:
        self._load()
        self._closed = False
        self._status = ConnStatus(ConnState.CONNECTED, f"simulated host, speed ×{self.speed:g}")

    async def close(self) -> None:
        self._closed = True
        if self._wake is not None:
            self._wake[1].set()  # wake the streams' sleeps: they see ``_closed`` and end
            self._wake = None
        self._status = ConnStatus(ConnState.CLOSED, "closed")

    def service_ops(self) -> HostOps:
        """The guarded service's operations here (``kvtui.hosts.service``)."""
        # lazy (measured): the service's modules cost ~400 ms to import at load ~10; only an edit needs them

        return DemoOps(self)

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = 60.0) -> CommandResult:
        """The demo runs no shell; it answers only the read of a model's ``config.json``
        (``shellcmd.model_config``) from its simulated models, as the host's files would."""
        model = shellcmd.model_config_request(command)
        if model is not None:
            return self._model_config(command, model)
        return CommandResult(command, 127, "", "demo host runs no shell commands\n")

    def _model_config(self, command: str, model: str) -> CommandResult:
        """``/models/NAME/config.json`` of a simulated model (its geometry, from its ``ModelSpec``)."""
        spec = MODELS.get(model.rstrip("/"))
        path = f"{model.rstrip('/')}/config.json"
        if spec is None:
            return CommandResult(command, 3, f"{shellcmd.MODEL_CONFIG_TRIED}{path}\n", "")
        text = json.dumps(spec.hf_config(), indent=2) + "\n"
        return CommandResult(command, 0, f"{shellcmd.MODEL_CONFIG_FOUND}{path}\n{text}", "")

    def cursor(self, g: int, i: int) -> str:
        return f"demo:{self._load().state_id}:{g}:{i}"

    def _parse_cursor(self, cursor: str) -> tuple[int, int] | None:
        m = re.fullmatch(r"demo:([0-9a-f]+):(\d+):(\d+)", cursor.strip())
        if not m or m.group(1) != self._load().state_id:
            return None
        return int(m.group(2)), int(m.group(3))

    def _record(self, state_id: str, g: int, i: int, ln: Line) -> LogRecord:
        return LogRecord(
            text=ln.text,
            ts=datetime.fromtimestamp(ln.t).astimezone(),
            cursor=f"demo:{state_id}:{g}:{i}",
            source="demo",
            pid=ln.pid,
            ident=ln.ident,
        )

    def _start_position(self, start: LogStart, after_cursor: str | None) -> tuple[int, int, bool]:
        """(boot, line index, trim the serving backlog)."""
        tl = self._timeline()
        now = self.clock()
        if after_cursor:
            pos = self._parse_cursor(after_cursor)
            if pos is not None:
                g, i = pos
                first = tl.first_boot()
                if first is not None and g < first:
                    return first, 0, False  # vacuumed: resume at the oldest boot kept
                return g, i + 1, False
        cur = tl.last_boot(now)
        if cur is None:
            first = tl.first_boot()
            return (first if first is not None else 0), 0, False
        if start == LogStart.NEXT_BOOT:
            v = tl.view(cur, now)
            return cur, (v.first_index_after(now) if v is not None else 0), False
        return cur, 0, True

    def read_lines(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None, limit: int = MAX_BATCH
    ) -> list[LogRecord]:
        """What ``follow_log`` would yield first, synchronously (tests, one-shot readers)."""
        g, i, trim = self._start_position(start, after_cursor)
        out, _ = self._collect(g, i, trim, limit)
        return out

    def _collect(self, g: int, i: int, trim: bool, limit: int) -> tuple[list[LogRecord], tuple[int, int, bool]]:
        out, pos, due, sig = self._collect_due(g, i, trim, limit)
        self._collected_due = (due, sig)  # read by ``follow_log`` right after (no await between)
        return out, pos

    def _collect_due(
        self, g: int, i: int, trim: bool, limit: int
    ) -> tuple[list[LogRecord], tuple[int, int, bool], float | None, tuple[int, int] | None]:
        """``_collect``, plus when the next line is due (clock seconds; None: not known from the
        state alone) and the signature of the state that was read: until the state file changes
        or the clock reaches that time, collecting again would find nothing."""
        self._load()  # creates the state if needed (takes its own locks)
        # Read the state and the clock under the shared lock: a restart by another process (which
        # holds the exclusive lock while it reads its clock and writes) is either fully before
        # ``now`` or fully after it, so no line beyond a stop is ever handed out.
        with self._locked(exclusive=False):
            self._refresh_unlocked()
            now = self.clock()
            st, sig = self._state, self._state_sig
        assert st is not None
        tl = _Timeline(self, st, (st.state_id, sig, self.peer_sig()))  # the state read with ``now``
        out: list[LogRecord] = []
        due: float | None = None
        v = tl.view(g, now)
        while len(out) < limit and v is not None:
            serves = v.ready_t is not None and v.script.serving is not None
            if trim and serves and (i == len(v.pre) or (i == 0 and self.start_missing)):
                assert v.ready_t is not None
                n_now = tl._serving_count(v.ready_t, v.interval, now)
                if v.serving_n is not None:
                    n_now = min(n_now, v.serving_n)
                skip = max(0, n_now - BACKLOG_SERVING_LINES)
                if i == 0:  # the start is gone (rotated away): what the process says, then the tail
                    out.extend(self._start_gone(tl, v, skip))
                elif skip:  # the serving bulk between the startup part and the tail: one gap record
                    out.append(self._gap(tl, v, skip))
                i = len(v.pre) + skip
                trim = False
            ln = tl.line(v, i)
            if ln is None:
                length = v.length()
                if length is not None and i >= length:
                    nxt = tl.view(g + 1, now)
                    if nxt is not None:
                        g, i, trim, v = g + 1, 0, False, nxt
                        continue
                break
            if ln.t > now:
                due = ln.t
                break
            out.append(self._record(tl.state.state_id, g, i, ln))
            i += 1
        return out, (g, i, trim), due, sig

    # -- a server up for days (issue 21) ----------------------------------------------------------

    def _gap(self, tl: _Timeline, v: BootView, skip: int) -> LogRecord:
        """The gap record for serving lines 0 .. ``skip - 1`` of ``v`` (read by ``search_log``)."""
        sid = tl.state.state_id
        first, last = v.serving_t(0), v.serving_t(skip - 1)
        where = gap_where(after=f"demo:{sid}:{v.g}:{len(v.pre) - 1}", before=f"demo:{sid}:{v.g}:{len(v.pre) + skip}")
        return gap_record(skip, where, _local(first), _local(last), source="demo")

    def _start_gone(self, tl: _Timeline, v: BootView, skip: int) -> list[LogRecord]:
        """What the follower says when the boot's start is not in the log: that it is not, then
        the running server's command line (its unit's ExecStart, the main process's pid)."""
        first = v.serving_t(skip) if skip else v.start
        ts = _local(first)
        reason = f"rotated before {ts.strftime('%Y-%m-%d %H:%M')}"
        return [start_missing_record(reason, source="demo", ts=ts),
                command_record(list(v.unit.argv), v.script.main_pid, source="demo", ts=ts)]

    async def search_log(
        self, pattern: str, where: str, *, regex: bool = False, ignore_case: bool = True, context: int = 0,
        limit: int = 100, newest: bool = False,
    ) -> list[LogMatch]:
        """``SearchableLog``: the simulated lines of a gap (``after=`` / ``before=`` cursors of
        one boot) that match, as a host's ``grep`` would find them (in a thread: a long uptime
        has hundreds of thousands of lines)."""
        return await asyncio.to_thread(self._search, pattern, where, regex, ignore_case, max(0, context),
                                       max(1, limit), newest)

    def _search(self, pattern: str, where: str, regex: bool, ignore_case: bool, context: int, limit: int,
                newest: bool) -> list[LogMatch]:
        rng = gap_range(where)
        a = self._parse_cursor(rng.get("after", ""))
        b = self._parse_cursor(rng.get("before", ""))
        if a is None or b is None or a[0] != b[0]:
            raise BackendError(f"demo host '{self.name}': no such range in its log ({where})")
        g, lo, hi = a[0], a[1] + 1, b[1]  # lines lo .. hi - 1
        tl = self._timeline()
        v = tl.view(g, self.clock())
        if v is None:
            raise BackendError(f"demo host '{self.name}': boot {g} is gone from its log")
        flags = re.IGNORECASE if ignore_case else 0
        try:
            rx = re.compile(pattern if regex else re.escape(pattern), flags)
        except re.error as exc:
            raise BackendError(f"not a regular expression: {exc}") from None
        sid = tl.state.state_id

        def rec(i: int) -> LogRecord | None:
            ln = tl.line(v, i)
            return None if ln is None else self._record(sid, g, i, ln)

        hits: list[int] = []
        order = range(hi - 1, lo - 1, -1) if newest else range(lo, hi)
        for i in order:
            ln = tl.line(v, i)
            if ln is not None and rx.search(ln.text):
                hits.append(i)
                if len(hits) >= limit:
                    break
        out: list[LogMatch] = []
        for i in sorted(hits):
            r = rec(i)
            assert r is not None
            before = tuple(x for j in range(max(lo, i - context), i) if (x := rec(j)) is not None)
            after = tuple(x for j in range(i + 1, min(hi, i + 1 + context)) if (x := rec(j)) is not None)
            out.append(LogMatch(r, before, after, i - lo + 1))
        return out

    def follow_next_boot(self, positioned: Callable[[], None]) -> AsyncIterator[list[LogRecord]]:
        """``follow_log(NEXT_BOOT)`` that says when it is positioned (``PositionedLogSource``)."""
        return self.follow_log(LogStart.NEXT_BOOT, positioned=positioned)

    async def follow_log(
        self, start: LogStart = LogStart.CURRENT_BOOT, after_cursor: str | None = None,
        positioned: Callable[[], None] | None = None, *, began: float | None = None,
    ) -> AsyncIterator[list[LogRecord]]:
        # ``began`` is not needed: the simulation knows which boot each line belongs to
        g, i, trim = self._start_position(start, after_cursor)
        if positioned is not None:
            positioned()
        due: float | None = None
        sig: tuple[int, int] | None = None
        psig: object = None
        while not self._closed:
            # an idle server's next line may be seconds away: until then, and while no process
            # changed the state (a restart, an edit), a poll is one stat, not a locked re-read
            if due is not None and self.clock() < due and self._sig() == sig and self.peer_sig() == psig:
                self.idle_polls += 1
                await self._pause(self.poll_interval)
                continue
            psig = self.peer_sig()
            batch, (g, i, trim) = self._collect(g, i, trim, MAX_BATCH)
            due, sig = self._collected_due
            if batch:
                yield batch
                if len(batch) >= MAX_BATCH:
                    await asyncio.sleep(0)
                    continue
            await self._pause(self.poll_interval)

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when ``close()`` is called meanwhile (streams end promptly)."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        if self._wake is None or self._wake[0] is not loop:
            self._wake = (loop, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake[1].wait()

    # -- the other nodes of a multi-node preset ---------------------------------------------------

    @property
    def rendezvous_dir(self) -> Path:
        """Where the nodes of a multi-node preset find each other (beside their state dirs, one
        file per node rank naming its host): the simulated ``--dist-init-addr``."""
        return self.state_dir.parent / ".rendezvous" / self.model_key

    def _register(self) -> None:
        if self._registered or self.preset.nnodes <= 1:
            return
        self._registered = True
        self.rendezvous_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.rendezvous_dir / f"node{self.node}", self.state_dir.name + "\n", 0o644)

    def peer_timelines(self) -> list[tuple[int, _Timeline | None]]:
        """The other nodes' timelines by node rank (None: that node has not started yet)."""
        if self.preset.nnodes <= 1:
            return []
        self._register()
        out: list[tuple[int, _Timeline | None]] = []
        for rank in range(self.preset.nnodes):
            if rank == self.node:
                continue
            try:
                name = (self.rendezvous_dir / f"node{rank}").read_text(encoding="utf-8").strip()
            except OSError:
                out.append((rank, None))
                continue
            peer = self._peers.get((rank, name))
            if peer is None:
                host = DemoHost(demo_model=self.model_key, demo_engine=self.engine,  # type: ignore[arg-type]
                                demo_node=rank, demo_stall_node=self.stall_node, demo_seed=self.seed,
                                demo_speed=self.speed)
                peer = self._peers[(rank, name)] = DemoBackend(name, host, clock=self.clock, gpu=self.gpu,
                                                               state_dir=self.rendezvous_dir.parent.parent / name)
            st = peer.existing_state()
            out.append((rank, None if st is None else _Timeline(peer, st)))
        return out

    def existing_state(self) -> DemoState | None:
        """The state if the host was ever started (never creates it)."""
        if self._sig() is None:
            return None
        try:
            return self._load()
        except DemoError:
            return None

    def peer_sig(self) -> object:
        """What the other nodes' states are now (a change may move this node's rendezvous)."""
        if self.preset.nnodes <= 1:
            return None
        self._register()
        sigs: list[tuple[str, int, int] | None] = []
        for rank in range(self.preset.nnodes):
            if rank != self.node:
                path = self.rendezvous_dir / f"node{rank}"
                try:
                    name = path.read_text(encoding="utf-8").strip()
                    st = os.stat(self.rendezvous_dir.parent.parent / name / "state.json")
                    sigs.append((name, st.st_mtime_ns, st.st_size))
                except OSError:
                    sigs.append(None)
        return tuple(sigs)

    def arrival(self, tl: _Timeline, e: Epoch) -> float | None:
        """When the first boot of epoch ``e`` (of ``tl``'s host) reaches distributed init."""
        key = (tl.state.state_id, e.id)
        if key in self._arrivals:
            return self._arrivals[key]
        unit = tl.unit_of(e)
        arr: float | None = None
        if not unit.error and e.max_boots != 0:
            arr = simulate_arrival(BootInput(
                argv=unit.argv, env=unit.env, preset=tl.preset, gpu=tl.b.gpu, seed=e.seed, boot_no=e.g0,
                start=e.start, speed=e.speed, foreign=ForeignProcess(**e.foreign) if e.foreign else None,
                stall_node=tl.b.stall_node))
        self._arrivals[key] = arr
        while len(self._arrivals) > 256:
            self._arrivals.popitem(last=False)
        return arr

    def meet_at(self, tl: _Timeline, e: Epoch) -> float:
        """When the first boot of this host's epoch ``e`` meets the other nodes at distributed init
        (``math.inf``: no boot of theirs comes for it; it waits there). The nodes' first boots are
        matched in time order: the boots waiting together meet when the last of them arrives,
        unless one of them is stopped before (the next boot of that node takes its place); a boot
        that never arrives (the stalled node) leaves the others waiting for that node's next one."""
        peers = self.peer_timelines()
        key = (tl.state.state_id, tuple((x.id, x.end, x.killed) for x in tl.state.epochs), self.peer_sig())
        meets = self._meets.get(key)
        if meets is None:
            lists: dict[int, list[tuple[float | None, float | None]]] = {}
            for rank, ptl in [(self.node, tl), *peers]:
                lists[rank] = [] if ptl is None else [
                    (self.arrival(ptl, x), x.killed if x.killed is not None else x.end) for x in ptl.state.epochs]
            meets = _meetings([lists[r] for r in sorted(lists)])
            self._meets[key] = meets
            while len(self._meets) > 32:
                self._meets.popitem(last=False)
        mine = meets[sorted([self.node, *(r for r, _ in peers)]).index(self.node)]
        return mine.get(tl.state.epochs.index(e), math.inf)

    # -- GPUs -----------------------------------------------------------------------------------------

    def gpu_uuid(self, index: int) -> str:
        known = self._uuids.get(index)
        if known is None:
            rng = random.Random(f"uuid:{self.seed}:{index}")
            known = self._uuids[index] = "GPU-" + str(uuid.UUID(int=rng.getrandbits(128), version=4))
        return known

    def _selected(self) -> tuple[int, ...]:
        return self.gpus if self.gpus is not None else tuple(range(self.gpu.count))

    def _alive_view(self, tl: _Timeline, now: float) -> BootView | None:
        g = tl.last_boot(now)
        if g is None:
            return None
        v = tl.view(g, now)
        if v is None or (v.death_t is not None and now >= v.death_t):
            return None
        return v

    def samples_at(self, now: float) -> list[GpuSample]:
        """Every selected GPU's reading at ``now`` (what one ``nvidia-smi`` tick would print)."""
        tl = self._timeline()
        v = self._alive_view(tl, now)
        foreign = tl.state.foreign
        load = 0.0
        serving = False
        if v is not None and v.ready_t is not None and now >= v.ready_t:
            serving = True
            load = (serving_load(v.epoch.seed, v.g, (now - v.ready_t) * v.epoch.speed) if self.load is None
                    else min(1.0, self.load))
        out: list[GpuSample] = []
        rng = random.Random(f"gpu-noise:{self.seed}:{int(now * 2)}")
        for idx in self._selected():
            used = float(self.gpu.idle_mib)
            procs: list[GpuProcess] = []
            util = 0.0
            if v is not None and idx in v.script.rank_pids:
                mib = v.script.mem_at(idx, now)
                used += mib
                if mib > 0:
                    procs.append(GpuProcess(v.script.rank_pids[idx], round(mib), idx, self.gpu_uuid(idx), v.script.exe))
                util = 20.0 + 75.0 * load + rng.uniform(-4, 4) if serving else v.script.util_at(now)
            if foreign and foreign.get("gpu") == idx:
                used += float(foreign["mib"])
                procs.append(
                    GpuProcess(
                        int(foreign["pid"]),
                        float(foreign["mib"]),
                        idx,
                        self.gpu_uuid(idx),
                        str(foreign.get("name", "python3")),
                    )
                )
            util = max(0.0, min(100.0, util))
            temp = 31.0 + 4.0 * (int(self.gpu_uuid(idx)[4:12], 16) / 0xFFFFFFFF) + 0.42 * util
            power = min(self.gpu.max_w,
                        self.gpu.idle_w + (self.gpu.max_w - self.gpu.idle_w) * util / 100.0 + rng.uniform(0, 3))
            out.append(
                GpuSample(
                    index=idx,
                    used_mib=float(round(min(used, self.gpu.total_mib))),
                    total_mib=float(self.gpu.total_mib),
                    util=float(round(util)),
                    ts=now,
                    uuid=self.gpu_uuid(idx),
                    name=self.gpu.name,
                    temperature_c=float(round(temp)),
                    power_w=round(power, 2),
                    power_limit_w=self.gpu.max_w,
                    # a GPU near its busiest runs into its power cap now and then
                    throttle="power cap" if power >= POWER_CAP_SHARE * self.gpu.max_w else None,
                    processes=tuple(procs),
                )
            )
        return out

    async def gpu_stream(self, interval_s: float = 1.0) -> AsyncIterator[list[GpuSample]]:
        while not self._closed:
            yield self.samples_at(self.clock())
            await self._pause(interval_s)

    async def gpu_processes(self) -> list[GpuProcess]:
        return [*(p for s in self.samples_at(self.clock()) for p in s.processes), *self.orphans]

    async def process_rows(self) -> list[ProcRow]:
        """The simulated host's process listing (``kvtui.hosts.orphans``): the orphans and the
        stale foreign process (``set_foreign_process``: one named ``VLLM::EngineCore`` is an
        orphan) under init."""
        foreign = self._timeline().state.foreign
        rows = [ProcRow(1, 0, "/sbin/init"), *(ProcRow(p.pid, 1, p.name) for p in self.orphans)]
        if foreign:
            rows.append(ProcRow(int(foreign["pid"]), 1, str(foreign.get("name", "python3"))))
        return rows

    async def server_pids(self) -> set[int]:
        return self.server_pids_at(self.clock())

    def server_pids_at(self, now: float) -> set[int]:
        v = self._alive_view(self._timeline(), now)
        if v is None:
            return set()
        return {v.script.main_pid, *v.script.rank_pids.values(), *v.script.aux_pids}

    # -- the service layer's methods ----------------------------------------------------------------

    def read_unit(self) -> str:
        path = self.unit_path
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = self._load().loaded_unit
            _atomic_write(path, text, 0o644)
            return text

    def write_unit(self, text: str) -> None:
        """Replace the unit file atomically. Takes effect at the next ``daemon_reload``."""
        if self.readonly:
            raise DemoError(f"demo host '{self.name}' is readonly: no edits or restarts")
        self._load()
        _atomic_write(self.unit_path, text, 0o644)

    def needs_reload(self) -> bool:
        """The unit file differs from what was loaded (systemctl's "changed on disk" warning)."""
        return self.read_unit() != self._load().loaded_unit

    def daemon_reload(self) -> None:
        """Load the unit file: the next (re)start — also an automatic one — uses it."""
        text = self.read_unit()
        with self._mutate() as st:
            now = self.clock()
            tl = _Timeline(self, st)
            last = st.epochs[-1]
            if last.start > now and last.end is None:
                last.unit = text  # a queued start execs what is loaded when it runs
            elif text != last.unit and last.end is None:
                # an automatic-restart chain in progress restarts with the newly loaded unit
                n = tl.n_boots(last, now)
                c = tl.cycle(last)
                if n and c is not None:
                    k = n - 1
                    next_start = last.start + (k + 1) * c
                    if next_start > now:
                        last.max_boots = n
                        st.epochs.append(
                            Epoch(
                                id=last.id + 1,
                                start=next_start,
                                unit=text,
                                g0=last.g0 + n,
                                counter0=last.counter0 + n,
                                seed=last.seed,
                                speed=last.speed,
                                foreign=last.foreign,
                            )
                        )
            st.loaded_unit = text

    def effective_execstart(self) -> str:
        """What ``systemctl show -p ExecStart`` prints for the loaded unit."""
        st = self._load()
        info = self.unit_cache(st.loaded_unit)
        argv = " ".join(_systemd_quote(a) for a in info.argv)
        path = info.argv[0] if info.argv else ""
        now = self.clock()
        tl = _Timeline(self, st)
        g = tl.last_boot(now)
        v = tl.view(g, now) if g is not None else None
        start_time, stop_time, pid, code, status = "[n/a]", "[n/a]", 0, "(null)", "0/0"
        if v is not None:
            start_time = f"[{_sd_time(v.start)}]"
            if v.death_t is not None and now >= v.death_t:
                stop_time = f"[{_sd_time(v.death_t)}]"
                if v.script.outcome == "failed" and v.script.end_t <= v.death_t:
                    code, status = v.script.exit_code, v.script.exit_status
                else:
                    code, status = "killed", "15/TERM"
            pid = v.script.main_pid
        return (
            f"ExecStart={{ path={path} ; argv[]={argv} ; ignore_errors=no ; start_time={start_time} ; "
            f"stop_time={stop_time} ; pid={pid} ; code={code} ; status={status} }}"
        )

    def restart(self) -> None:
        """``systemctl restart``: stop the current boot (systemd lines), start a new one now."""
        with self._mutate() as st:
            now = self.clock()
            info = self.unit_cache(st.loaded_unit)
            if info.error:
                raise DemoError(
                    f"Failed to restart {st.unit_name}: Unit {st.unit_name} has a bad unit file setting. ({info.error})"
                )
            delay = self._end_current(st, now)
            last = st.epochs[-1]
            n = _Timeline(self, st).n_boots(last, now)
            st.epochs.append(
                Epoch(
                    id=last.id + 1,
                    start=now + delay,
                    unit=st.loaded_unit,
                    g0=last.g0 + n,
                    seed=self.seed,
                    speed=self.speed,
                    foreign=st.foreign.copy() if st.foreign else None,
                )
            )

    def stop(self) -> None:
        """``systemctl stop``: the current boot stops (systemd lines); nothing restarts."""
        with self._mutate() as st:
            self._end_current(st, self.clock())

    def kill(self) -> None:
        """``kill -9`` of the server's main process: its lines stop, systemd says it was killed
        (``Main process exited, code=killed, status=9/KILL``) and, as with ``Restart=no``,
        nothing restarts it. A server that is not running is left alone."""
        with self._mutate() as st:
            now = self.clock()
            if self._alive_view(_Timeline(self, st), now) is None:
                return
            _end_epochs(st, now, killed=True)

    def _end_current(self, st: DemoState, now: float) -> float:
        """Stop whatever runs or is about to start at ``now``: cancel pending starts (a queued
        restart, an automatic restart after a failure), end the running epoch. Returns the
        seconds until the server's processes are gone (when a new start may begin)."""
        _end_epochs(st, now)
        tl = _Timeline(self, st)
        g = tl.last_boot(now)
        v = tl.view(g, now) if g is not None else None
        if v is None or v.death_t is None or v.death_t <= now:
            return 0.0
        return (v.death_t - now) + 0.2 / v.epoch.speed

    def set_foreign_process(
        self,
        enabled: bool = True,
        *,
        gpu: int | None = None,
        mib: float | None = None,
        pid: int | None = None,
        name: str = "python3",
    ) -> ForeignProcess | None:
        """Put (or, with ``enabled=False``, remove) a stale foreign process holding memory on one
        GPU — the classic cause of an OOM on restart. Unset fields come from the seed (a GPU of
        the server's, 12–24 GiB, a PID). Its memory shows at once; the server feels it from its
        next start. Returns what was set."""
        if not enabled:
            with self._mutate() as st:
                st.foreign = None
            return None
        rng = random.Random(f"foreign:{self.seed}")
        if gpu is None:
            visible = self.unit_cache(self._load().loaded_unit).env.get("CUDA_VISIBLE_DEVICES", "")
            choices = [int(x) for x in visible.split(",") if x.strip().isdigit()] or list(range(self.gpu.count))
            gpu = rng.choice(choices)
        if not 0 <= gpu < self.gpu.count:
            raise DemoError(f"demo host '{self.name}': no GPU {gpu} (it has GPUs 0-{self.gpu.count - 1})")
        proc = ForeignProcess(
            gpu=gpu,
            mib=float(mib if mib is not None else rng.choice((12288, 18432, 24576))),
            pid=pid if pid is not None else rng.randrange(30000, 60000),
            name=name,
        )
        with self._mutate() as st:
            st.foreign = ForeignDoc(gpu=proc.gpu, mib=proc.mib, pid=proc.pid, name=proc.name)
        return proc

    def unit_status(self) -> str:
        """systemd's ``ActiveState (SubState)`` of the unit now."""
        tl = self._timeline()
        now = self.clock()
        g = tl.last_boot(now)
        v = tl.view(g, now) if g is not None else None
        if v is None:
            return "inactive (dead)"
        if v.death_t is None or now < v.death_t:
            if v.tail and v.tail[0].t <= now:
                return "deactivating (stop-sigterm)"
            return "active (running)"
        if v.next_start is not None:
            return "activating (auto-restart)"
        if v.script.outcome == "failed" and not (v.epoch.end is not None and v.epoch.end < v.script.end_t):
            return "failed (failed)"
        return "inactive (dead)"

    def boot_script(self, g: int | None = None) -> BootScript | None:
        """The simulated script of boot ``g`` (default: the newest) — for tests and tooling."""
        tl = self._timeline()
        now = self.clock()
        g = tl.last_boot(now) if g is None else g
        v = tl.view(g, now) if g is not None else None
        return None if v is None else v.script

    def current_boot(self) -> int | None:
        return self._timeline().last_boot(self.clock())

    def open_port(self, port: int) -> AbstractAsyncContextManager[tuple[str, int]]:
        """The simulated server's HTTP endpoints (``kvtui.sim.http``; the readiness probe)."""
        return serve_port(port, self.serving_now, self.metrics_now)

    async def metrics(self, port: int, *, timeout: float = 10.0) -> str:
        """The simulated server's ``/metrics``, over its loopback HTTP server (``kvtui.hosts.metrics``)."""
        # lazy (measured): kvtui.hosts.metrics and the probe's HTTP client cost ~130 ms at load ~10; `watch` only

        return await metrics_via_port(self, port, self.name, timeout=timeout)

    def metrics_now(self) -> str | None:
        """The simulated engine's ``/metrics`` text now (``kvtui.sim.metrics``): None
        while no ready server runs, or with ``serve_metrics`` off (SGLang without --enable-metrics)."""
        if not self.serve_metrics:
            return None
        tl = self._timeline()
        now = self.clock()
        v = self._alive_view(tl, now)
        facts = v.script.serving if v is not None else None
        if v is None or facts is None or v.ready_t is None or now < v.ready_t:
            return None
        n = tl._serving_count(v.ready_t, v.interval, now)
        if v.serving_n is not None:
            n = min(n, v.serving_n)
        key = (v.epoch.seed, v.g, v.start)
        if self._metrics is None or self._metrics[0] != key:
            sim_step = v.interval * v.epoch.speed
            model = self.serving_now()
            self._metrics = (key, DemoMetrics(facts, v.epoch.seed, v.g, sim_step, model.model if model else "default"))
        return self._metrics[1].text(n)

    def serving_now(self) -> Serving | None:
        """What the simulated server answers now: None when no server process runs."""
        now = self.clock()
        v = self._alive_view(self._timeline(), now)
        if v is None:
            return None
        return serving_of(v.unit, v.ready_t is not None and now >= v.ready_t)


def _local(t: float) -> datetime:
    return datetime.fromtimestamp(t).astimezone()


def _end_epochs(st: DemoState, now: float, *, killed: bool = False) -> None:
    """Cancel the starts still to come (a queued restart, an automatic restart after a failure)
    and end the running epoch at ``now`` (``killed``: by SIGKILL)."""
    for e in reversed(st.epochs):
        if e.start > now:
            if e.end is None or e.end > e.start:
                e.end, e.max_boots = e.start, 0
            continue
        if e.end is None or e.end > now:
            e.end = now
            if killed:
                e.killed = now
        break


def _meetings(nodes: list[list[tuple[float | None, float | None]]]) -> list[dict[int, float]]:
    """Each node's epochs (arrival at distributed init or None, end or None), in time order →
    for each node, its epochs that met the others, with the time they met (``meet_at``)."""
    ptr = [0] * len(nodes)
    out: list[dict[int, float]] = [{} for _ in nodes]
    while all(p < len(n) for p, n in zip(ptr, nodes, strict=True)):
        cand = [n[p] for p, n in zip(ptr, nodes, strict=True)]
        never = [i for i, (arr, _) in enumerate(cand) if arr is None]
        if never:
            for i in never:
                ptr[i] += 1
            continue
        meet = max(arr for arr, _ in cand if arr is not None)
        gone = [i for i, (_, end) in enumerate(cand) if end is not None and end <= meet]
        if gone:
            first = min(gone, key=lambda i: cand[i][1] or 0.0)
            ptr[first] += 1
            continue
        for i in range(len(nodes)):
            out[i][ptr[i]] = meet
            ptr[i] += 1
    return out
