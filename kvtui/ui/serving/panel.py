"""The host pane's serving view (issue 24): ``ServingSampler``, owned by ``HostPane``
(``pane.serving``), samples a ready boot's server through ``kvtui.serving_live.ServingReader``
(its ``/metrics``, else the log's serving lines) in a worker every ``interval`` seconds, and
feeds the widgets of ``kvtui.ui.serving.widgets``: the figures row and the diagnosis banner in the
boot panel, the KV timeline in the GPU panel. The diagnosis' calculator answer (``suggest``) is
computed in a thread; ``K`` (``apply_suggestion``) sets the calculator's field to it and opens the
apply dialog.

Like the pane's other pollers, it reads only what it needs: it stops when the boot is no longer
the ready one, and when the pane has been hidden for ``HIDDEN_STOP_S`` (the window then starts
over when the pane is shown again); while hidden for less it keeps sampling without drawing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kvtui.boot import Boot, BootStatus
from kvtui.serving.diagnose import Diagnosis, Limit
from kvtui.serving.window import ServingFigures
from kvtui.serving_live import ServingReader, boot_port_of
from kvtui.ui.serving.widgets import KvTimeline, ServingBanner, ServingRow, Suggestion, serving_text, suggest

if TYPE_CHECKING:
    from kvtui.monitor import HostMonitor
    from kvtui.ui.host_pane import HostPane

SERVING_INTERVAL_S = 5.0  # seconds between two samples of a ready server
HIDDEN_STOP_S = 60.0  # a pane hidden this long stops sampling (shown again: it starts over)
METRICS_TIMEOUT_S = 4.0


class ServingSampler:
    """The serving sampler of a ``HostPane``: it reads the pane's ``boot``, ``boot_index``,
    ``shown`` and ``calculator``, draws into the pane's serving widgets and runs its worker on the
    pane (group ``serving``)."""

    interval = SERVING_INTERVAL_S

    def __init__(self, pane: HostPane) -> None:
        self.pane = pane
        self.reader: ServingReader | None = None
        self.figures: ServingFigures | None = None
        self.diagnosis: Diagnosis | None = None
        self.suggestion: Suggestion | None = None
        self.readings = 0  # samples taken in (tests wait for them)
        self._sampling: int | None = None  # the boot index the worker samples
        self._hidden_since: float | None = None  # the event loop's time the pane was hidden
        self._suggest_key: tuple[object, ...] | None = None
        self._stale = False
        self._at: float | None = None  # the pane's clock at the last sample
        self._wake: asyncio.Event | None = None

    def attach(self, monitor: HostMonitor) -> None:
        """Before the monitor runs: the reader's log fold sees the boot's lines from its start."""
        self.reader = ServingReader(monitor, clock=monitor.clock)

    def shown_changed(self, shown: bool) -> None:
        """The pane was shown or hidden: hidden, the clock to stop by starts; shown, the view
        catches up and sampling starts again when it had stopped."""
        self._hidden_since = None if shown else asyncio.get_running_loop().time()
        if shown:
            if self._stale:
                self._stale = False
                self.draw()
            self.maybe_sample()

    def maybe_sample(self) -> None:
        """Start sampling the boot when it is ready and not sampled yet."""
        boot, idx = self.pane.boot, self.pane.boot_index
        if boot is None or idx is None or boot.status is not BootStatus.READY or self.reader is None:
            return
        if not self.pane.shown and self._hidden_since is None:  # a pane hidden from the start
            self._hidden_since = asyncio.get_running_loop().time()
        if self._sampling == idx or self._hidden_too_long():
            return
        if self._sampling is None or self._sampling != idx:
            self._reset()
        self._sampling = idx
        self._at = None
        self.pane.run_worker(self._serving_worker(idx), name="_serving_worker", group="serving",
                             description="serving metrics", exclusive=True, exit_on_error=False)

    def _hidden_too_long(self) -> bool:
        since = self._hidden_since
        return since is not None and asyncio.get_running_loop().time() - since >= HIDDEN_STOP_S

    def _reset(self) -> None:
        reader = self.reader
        if reader is not None:
            reader.window.clear()
        self.figures = self.diagnosis = self.suggestion = None
        self._suggest_key = None
        self.pane.query_one(KvTimeline).clear()
        self.draw()

    @property
    def caught_up(self) -> bool:
        """The sampler has read the server at the pane's clock (within ``interval``), or
        does not sample: with the clock frozen the view is then a function of it (tests settle on it)."""
        at = self._at
        return self._sampling is None or (at is not None and self._clock() - at < self.interval)

    def sampled_at(self) -> float | None:
        """The pane's clock at the last sample (None: none yet in this boot)."""
        return self._at

    def _clock(self) -> float:
        reader = self.reader
        return reader.clock() if reader is not None else 0.0

    def wake(self) -> None:
        """New data from the monitor (the clock moved): the sampler checks whether a sample is due."""
        event = self._wake
        if event is not None:
            event.set()

    async def _serving_worker(self, idx: int) -> None:
        """A sample each ``interval`` seconds of the pane's clock; between them it waits
        for that time, or for the monitor's next batch (``wake``), whichever comes first."""
        reader = self.reader
        wake = self._wake = asyncio.Event()
        self._at = None
        try:
            while reader is not None:
                boot = self.pane.boot
                if boot is None or self.pane.boot_index != idx or boot.status is not BootStatus.READY:
                    break
                if self._hidden_too_long():
                    break
                now = reader.clock()
                at = self.sampled_at()
                if at is None or now - at >= self.interval or now < at:
                    await self.sample(boot, now)
                    continue
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), timeout=max(0.05, self.interval - (now - at)))
                except TimeoutError:
                    pass
        finally:
            if self._sampling == idx:
                self._sampling = None
            if self.pane.boot is None or self.pane.boot.status is not BootStatus.READY:  # a stop, a restart
                self.figures = self.diagnosis = self.suggestion = None
                if self.pane.is_attached:
                    self.pane.query_one(KvTimeline).clear()
                self.draw()

    async def sample(self, boot: Boot, now: float) -> None:
        """One sample of ``boot``'s server, taken in and drawn (hidden: drawn when shown)."""
        reader = self.reader
        if reader is None:
            return
        sample = await reader.read(boot_port_of(boot), timeout=METRICS_TIMEOUT_S)
        if sample is not None and self.pane.boot is boot:
            reading = reader.reading(sample, boot)
            self.readings += 1
            self.figures = reading.window.figures()
            self.diagnosis = reading.diagnosis
            self.pane.query_one(KvTimeline).add(sample.kv_usage)
            await self._size_suggestion(reading.diagnosis)
            if self.pane.shown:
                self.draw()
            else:
                self._stale = True
        self._at = now

    async def _size_suggestion(self, diag: Diagnosis) -> None:
        """The calculator's answer to a full pool, computed off the event loop when what it
        rests on changed (the calculator's model, the limit, the knob, the observed demand)."""
        calc = self.pane.calculator
        model = calc.model
        if diag.limit is not Limit.POOL or model is None:
            self.suggestion, self._suggest_key = None, None
            return
        key = (id(model), diag.limit, diag.knobs[0].name if diag.knobs else None, diag.evidence.peak_tokens,
               calc.margin_gib)
        if key == self._suggest_key:
            return
        self._suggest_key = key
        self.suggestion = await asyncio.to_thread(suggest, diag, model, calc.margin_gib)

    def draw(self) -> None:
        if not self.pane.is_attached:
            return
        figures, boot = self.figures, self.pane.boot
        reader = self.reader
        row = self.pane.query_one(ServingRow)
        if figures is None or boot is None or reader is None or figures.samples == 0:
            row.show(None)
            self.pane.query_one(ServingBanner).show(None, None)
            self.pane.query_one(KvTimeline).draw()
            return
        source = "/metrics" if reader.source == "metrics" else "log"
        row.show(serving_text(figures, boot.engine, source, with_usage=boot.live.token_usage is None))
        self.pane.query_one(ServingBanner).show(self.diagnosis, self.suggestion)
        self.pane.query_one(KvTimeline).draw()

    def apply_suggestion(self) -> str | None:
        """``K``: the calculator's field set to the suggested value, then the apply dialog (``a``).
        Returns why not (also said as a notification), None when the dialog is on its way."""
        s = self.suggestion
        why: str | None = None
        if s is None:
            why = ("no suggested edit: the serving view has not diagnosed a full KV pool"
                   if self.diagnosis is None or self.diagnosis.limit is not Limit.POOL
                   else "no suggested edit: the calculator cannot size the pool of this boot")
        elif s.value is None:
            why = s.answer
        if why is not None or s is None or s.value is None:
            self.pane.notify(why or "no suggested edit", title="serving", severity="warning", timeout=6)
            return why
        calc = self.pane.calculator
        field = next((f for f in calc.fields if f.flag == s.flag), None)
        if field is None:
            why = f"the calculator has no {s.flag.replace('_', '-')} field for this boot"
            self.pane.notify(why, title="serving", severity="warning", timeout=6)
            return why
        field.value = s.value
        calc.recompute()
        calc.refresh(layout=True)
        self.pane.changes.start_apply()
        return None
