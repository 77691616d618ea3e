"""The console's stall notice on a vLLM engine that only repeats the shared-memory broadcast wait
(issue 15's multi-node hang as node 0 shows it): every 60 s a line, yet no progress — the notice
appears after [ui] stall_seconds and says what the engine keeps printing."""

from __future__ import annotations

from pathlib import Path

from test_ui_helpers import FakeClock, wait_for

from kvtui.config import Config, HostConfig, UiConfig
from kvtui.engines.events import Phase
from kvtui.monitor import MonitorOptions
from kvtui.ui.app import KvtuiApp
from kvtui.ui.host_pane import HostPane, HostSpec
from kvtui.ui.widgets.boot import StallNotice

SIZE = (130, 38)
SHM = ("(EngineCore_DP0 pid=4188) INFO 03-10 14:0{m}:28 [shm_broadcast.py:542] No available shared memory broadcast "
       "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
       "time-consuming work (e.g. compilation, weight/kv cache quantization).")


async def test_a_vllm_log_that_only_repeats_the_shm_wait_raises_the_stall_notice(tmp_path: Path,
                                                                                 fixtures: Path) -> None:
    source = (fixtures / "vllm" / "vllm-0.33-qwen3-32b-tp4-ready.log").read_text().splitlines()
    cut = next(i for i, t in enumerate(source) if "Starting to load model" in t) + 2
    log = tmp_path / "server.log"
    log.write_text("\n".join(source[:cut]) + "\n")
    clock = FakeClock()
    from kvtui.hosts.factory import make_backend

    spec = HostSpec("box", HostConfig(local=True, log_file=str(log)))
    app = KvtuiApp(
        [spec],
        backend_factory=lambda name, host: make_backend(name, host, clock=clock),
        config=Config(ui=UiConfig(stall_seconds=120)),
        clock=clock,
        monitor_options=MonitorOptions(gpu_interval=0.05, flush_interval=0.05),
    )
    async with app.run_test(size=SIZE) as pilot:
        pane = app.main_screen.query_one(HostPane)
        await wait_for(pilot, lambda: pane.boot is not None and pane.boot.phase is Phase.LOAD_WEIGHTS
                       and pane.lines_received >= cut)
        notice = pane.query_one(StallNotice)
        for m in range(1, 5):  # a wait line a minute, nothing else: each one arrives, none is progress
            clock.advance(60)
            seen = pane.lines_received
            with log.open("a") as fh:
                fh.write(SHM.format(m=m) + "\n")
            await wait_for(pilot, lambda seen=seen: pane.lines_received > seen)
            pane.tick()
            await pilot.pause()
            assert notice.has_class("-stalled") == (m >= 2), m
        text = str(notice.render())
        assert "stuck in load weights for 4m 00s" in text
        assert "vLLM has printed 'No available shared memory broadcast block' 4×" in text
        assert "a rank has not joined (multi-node) or is hung" in text
        # a line that is progress ends it
        seen = pane.lines_received
        with log.open("a") as fh:
            fh.write(source[cut] + "\n")
        await wait_for(pilot, lambda: pane.lines_received > seen)
        pane.tick()
        await pilot.pause()
        assert not notice.has_class("-stalled")
