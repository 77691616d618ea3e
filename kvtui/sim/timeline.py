"""Boots as line sequences: an epoch's boots (the first, then automatic restarts under
``Restart=on-failure``), each a ``BootScript`` of the engine simulation plus systemd's own lines
(``Started``, ``Stopping``, ``Main process exited``, ``Failed with result``, ``Scheduled restart
job``), computed from the state and the clock, never stored."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvtui.sim.presets import PRESETS
from kvtui.sim.script import BootInput, BootScript, ForeignProcess, systemd_timespan
from kvtui.sim.serving import serving_interval, serving_tick
from kvtui.sim.simulate import simulate_boot
from kvtui.sim.state import DemoState, Epoch
from kvtui.sim.unit import UnitInfo

if TYPE_CHECKING:
    from kvtui.sim.backend import DemoBackend

BACKLOG_SERVING_LINES = 1000  # CURRENT_BOOT starts with the boot's lines plus at most this many serving lines


STOP_DELAY_S = 1.5  # simulated seconds between "Stopping …" and "Stopped …"


SYSTEMD_PID = 1


def _restarts_after(unit: UnitInfo, script: BootScript) -> bool:
    if script.outcome != "failed":
        return False
    if unit.restart in ("always", "on-failure"):
        return True
    return unit.restart == "on-abnormal" and script.result == "signal"


@dataclass(frozen=True, slots=True)
class Line:
    t: float
    text: str
    pid: int
    ident: str


@dataclass(slots=True)
class BootView:
    """The lines of one boot: ``pre`` (``Started`` + the engine's boot lines, cut at a stop),
    then serving lines (ready boots: one per interval, until a stop; unbounded while running),
    then ``tail`` (systemd's lines when the process ended)."""

    g: int
    epoch: Epoch
    k: int
    start: float
    script: BootScript
    unit: UnitInfo
    unit_name: str
    pre: list[Line]
    tail: list[Line]
    serving_n: int | None  # None: unbounded (ready, still running); 0 when not ready
    interval: float
    ready_t: float | None
    death_t: float | None  # when the server's processes are gone (None: still running)
    next_start: float | None  # the automatic restart that follows, if any

    def length(self) -> int | None:
        if self.serving_n is None:
            return None
        return len(self.pre) + self.serving_n + len(self.tail)

    def serving_t(self, j: int) -> float:
        assert self.ready_t is not None
        return self.ready_t + (j + 1) * self.interval

    def first_index_after(self, t: float) -> int:
        """The index of the first line whose time is > t."""
        i = bisect.bisect_right([ln.t for ln in self.pre], t)
        if i < len(self.pre):
            return i
        ready_t = self.ready_t if self.script.serving is not None else None  # a node that serves no lines
        if ready_t is not None and (self.serving_n is None or self.serving_n > 0):
            j = max(0, int((t - ready_t) / self.interval) - 1)
            while self.serving_t(j) <= t:
                j += 1
            if self.serving_n is None or j < self.serving_n:
                return len(self.pre) + j
        base = len(self.pre) + (self.serving_n or 0)
        return base + bisect.bisect_right([ln.t for ln in self.tail], t)


class _Timeline:
    """Pure computations over a state snapshot: which boots exist, their lines, GPU memory."""

    def __init__(self, backend: DemoBackend, state: DemoState, cache_key: object = None) -> None:
        self.b = backend
        self.state = state
        self.preset = PRESETS[state.model]
        self.cache_key = cache_key  # set when ``state`` is the saved state: views may be cached
        self._meet: dict[int, float] = {}  # epoch id -> when its first boot meets the other nodes

    # -- epochs -------------------------------------------------------------------------------

    def unit_of(self, e: Epoch) -> UnitInfo:
        return self.b.unit_cache(e.unit)

    def script(self, e: Epoch, k: int, start: float) -> BootScript:
        # a multi-node preset: an epoch's first boot waits at distributed init for the other
        # nodes (``DemoBackend.meet_at``); the automatic restarts after it run as if they were there
        meet: float | None = None
        if k == 0 and self.preset.nnodes > 1:
            meet = self._meet.get(e.id)
            if meet is None:
                meet = self._meet[e.id] = self.b.meet_at(self, e)
        key = (self.state.state_id, e.id, k, meet)
        cached = self.b._scripts.get(key)
        if cached is not None:
            self.b._scripts.move_to_end(key)
            return cached
        unit = self.unit_of(e)
        foreign = ForeignProcess(**e.foreign) if e.foreign else None
        script = simulate_boot(
            BootInput(
                argv=unit.argv,
                env=unit.env,
                preset=self.preset,
                gpu=self.b.gpu,
                seed=e.seed,
                boot_no=e.g0 + k,
                start=start,
                speed=e.speed,
                foreign=foreign,
                stall_node=self.b.stall_node,
                meet_at=meet,
            )
        )
        if self.b.load is not None and script.serving is not None:  # demo_load: a fixed offered load
            script.serving = replace(script.serving, load=self.b.load)
        self.b._scripts[key] = script
        while len(self.b._scripts) > 64:
            self.b._scripts.popitem(last=False)
        return script

    def cycle(self, e: Epoch) -> float | None:
        """Seconds between automatic restarts, or None when boot 0 is not restarted."""
        unit = self.unit_of(e)
        if unit.error:
            return None
        s0 = self.script(e, 0, e.start)
        if not _restarts_after(unit, s0):
            return None
        return (s0.end_t - s0.start) + unit.restart_sec / e.speed

    def boot_start(self, e: Epoch, k: int) -> float:
        c = self.cycle(e)
        return e.start if k == 0 or c is None else e.start + k * c

    def n_boots(self, e: Epoch, now: float) -> int:
        """How many boots of this epoch have started by ``now``.

        An epoch cancelled before it started (a pending start — queued, or created by a
        daemon-reload during an automatic-restart chain — that a restart or stop replaced) has
        ``max_boots == 0`` and never has a boot, whatever the clock says: otherwise its boot
        number would collide with the boot that replaced it once ``now`` passes its start."""
        if self.unit_of(e).error or e.start > now or e.max_boots == 0:
            return 0
        c = self.cycle(e)
        if c is None or c <= 0:
            return 1
        limit = now if e.end is None else min(now, e.end)
        n = int((limit - e.start) // c) + 1
        while n > 1 and self.boot_start(e, n - 1) > limit:
            n -= 1
        while self.boot_start(e, n) <= limit and (e.end is None or self.boot_start(e, n) < e.end):
            n += 1
        if e.end is not None:
            while n > 1 and self.boot_start(e, n - 1) >= e.end:
                n -= 1
        if e.max_boots is not None:
            n = min(n, e.max_boots)
        return n

    def locate(self, g: int, now: float) -> tuple[Epoch, int] | None:
        for e in self.state.epochs:
            n = self.n_boots(e, now)
            if e.g0 <= g < e.g0 + n:
                return e, g - e.g0
        return None

    def last_boot(self, now: float) -> int | None:
        """The global number of the newest boot started by ``now``."""
        for e in reversed(self.state.epochs):
            n = self.n_boots(e, now)
            if n:
                return e.g0 + n - 1
        return None

    def first_boot(self) -> int | None:
        for e in self.state.epochs:
            if not self.unit_of(e).error:
                return e.g0
        return None

    # -- one boot's lines ---------------------------------------------------------------------

    def view(self, g: int, now: float) -> BootView | None:
        key = (self.cache_key, g)
        if self.cache_key is not None:
            cached = self.b._views.get(key)
            if cached is not None:
                return cached
        v = self._view(g, now)
        if v is not None and self.cache_key is not None:
            # once a boot exists its lines depend only on the state (not on now)
            self.b._views[key] = v
            while len(self.b._views) > 16:
                self.b._views.popitem(last=False)
        return v

    def _cut(
        self, pre: list[Line], stop: float, ready_t: float | None, interval: float, serves: bool = True
    ) -> tuple[list[Line], float | None, int]:
        """A boot cut at ``stop``: its lines up to then, its ready time if it was ready by then, and
        how many serving lines it printed before (none for a node that serves no lines: counting
        them made its view longer than its lines, and a reader stopped there for good — the node's
        next boot, after a restart, was never read)."""
        pre = [ln for ln in pre if ln.t <= stop]
        if ready_t is not None and ready_t <= stop:
            return pre, ready_t, self._serving_count(ready_t, interval, stop) if serves else 0
        return pre, None, 0

    def _view(self, g: int, now: float) -> BootView | None:
        found = self.locate(g, now)
        if found is None:
            return None
        e, k = found
        unit = self.unit_of(e)
        start = self.boot_start(e, k)
        script = self.script(e, k, start)
        name = self.state.unit_name
        desc = unit.description or name
        sd = "systemd"
        pre = [Line(start, f"Started {desc}.", SYSTEMD_PID, sd)]
        pre += [Line(ln.t, ln.text, ln.pid, ln.ident) for ln in script.lines]
        interval = serving_interval(e.speed, script.serving.interval_s if script.serving else 5.0)
        c = self.cycle(e)
        next_start = None
        if _restarts_after(unit, script) and c is not None:
            next_start = e.start + (k + 1) * c
        stop = e.end if e.end is not None and e.end >= start and (next_start is None or e.end < next_start) else None
        stop_done = None if stop is None else stop + STOP_DELAY_S / e.speed
        cpu = 1.15 * (len(script.rank_pids) + 1)
        tail: list[Line] = []
        ready_t = script.end_t if script.outcome == "ready" else None
        serving_n: int | None = 0
        death_t: float | None = None
        killed = e.killed is not None and stop == e.killed
        if stop is not None and stop_done is not None and (script.outcome != "failed" or stop < script.end_t):
            # SIGKILL or stopped while running: lines up to then, then systemd's lines for a killed main
            # process, or its stop sequence
            pre, ready_t, serving_n = self._cut(pre, stop, ready_t, interval, script.serving is not None)
            death_t = stop if killed else stop_done
            consumed = systemd_timespan((death_t - start) * cpu)
            tail = [
                Line(stop, f"{name}: Main process exited, code=killed, status=9/KILL", SYSTEMD_PID, sd),
                Line(stop, f"{name}: Failed with result 'signal'.", SYSTEMD_PID, sd),
            ] if killed else [
                Line(stop, f"Stopping {desc}...", SYSTEMD_PID, sd),
                Line(stop_done, f"{name}: Deactivated successfully.", SYSTEMD_PID, sd),
                Line(stop_done, f"Stopped {desc}.", SYSTEMD_PID, sd),
            ]
            tail.append(Line(death_t, f"{name}: Consumed {consumed} CPU time.", SYSTEMD_PID, sd))
            next_start = None
        elif script.outcome == "failed":
            f_t = script.end_t
            tail = [
                Line(
                    f_t,
                    f"{name}: Main process exited, code={script.exit_code}, status={script.exit_status}",
                    SYSTEMD_PID,
                    sd,
                ),
                Line(f_t, f"{name}: Failed with result '{script.result}'.", SYSTEMD_PID, sd),
                Line(f_t, f"{name}: Consumed {systemd_timespan((f_t - start) * cpu)} CPU time.", SYSTEMD_PID, sd),
            ]
            death_t = f_t
            if next_start is not None:
                if e.end is not None and e.end < next_start:
                    tail.append(Line(max(e.end, f_t), f"Stopped {desc}.", SYSTEMD_PID, sd))
                    next_start = None
                else:
                    counter = e.counter0 + k + 1
                    tail.append(
                        Line(
                            next_start,
                            f"{name}: Scheduled restart job, restart counter is at {counter}.",
                            SYSTEMD_PID,
                            sd,
                        )
                    )
                    tail.append(Line(next_start, f"Stopped {desc}.", SYSTEMD_PID, sd))
        else:
            serving_n = None  # ready and running
        return BootView(
            g=g,
            epoch=e,
            k=k,
            start=start,
            script=script,
            unit=unit,
            unit_name=name,
            pre=pre,
            tail=tail,
            serving_n=serving_n,
            interval=interval,
            ready_t=ready_t,
            death_t=death_t,
            next_start=next_start,
        )

    @staticmethod
    def _serving_count(ready_t: float, interval: float, stop: float) -> int:
        n = max(0, int((stop - ready_t) / interval))
        while n > 0 and ready_t + n * interval > stop:
            n -= 1
        while ready_t + (n + 1) * interval <= stop:
            n += 1
        return n

    def line(self, v: BootView, i: int) -> Line | None:
        if i < len(v.pre):
            return v.pre[i]
        j = i - len(v.pre)
        if v.ready_t is not None and v.script.serving is not None and (v.serving_n is None or j < v.serving_n):
            return self.serving_line(v, j)
        if v.serving_n is None:
            return None
        j -= v.serving_n
        return v.tail[j] if 0 <= j < len(v.tail) else None

    def serving_line(self, v: BootView, j: int) -> Line:
        facts = v.script.serving
        assert facts is not None
        assert v.ready_t is not None
        t = v.serving_t(j)
        tick = serving_tick(facts, v.epoch.seed, v.g, j, t, (t - v.ready_t) * v.epoch.speed)
        return Line(t, tick.text, tick.pid, v.script.exe.rsplit("/", 1)[-1] or "python")
