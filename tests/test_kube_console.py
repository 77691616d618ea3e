"""The pod's state beside the boot in the console's header (issue 15): the real app on a kube host
against the fake ``kubectl`` first on PATH; the backend reads the pod again while the log is
followed, and the header says what it found — readiness, restarts and how the last container
ended (OOMKilled is host memory, not GPU), Pending and why."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from kube_support import FakeKube
from test_ui_helpers import plain, wait_for

from kvtui.config import parse_config
from kvtui.hosts.kube.backend import KubeBackend
from kvtui.hosts.kube.commands import PodRef
from kvtui.ui.app import KvtuiApp
from kvtui.ui.host_pane import HostSpec
from kvtui.ui.widgets.host import HostBar

FIX = Path(__file__).parent / "fixtures"


def _pod(name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((FIX / "kube" / "pods" / f"{name}.json").read_text())
    return out


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    k = FakeKube.create(tmp_path / "kube")
    monkeypatch.setenv("PATH", k.env()["PATH"])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    lines = (FIX / "nodes" / "sglang-tp16-node0.log").read_text().splitlines()[:20]
    k.append_log("r1-0", "sglang", [f"2026-12-01T15:00:00.{i:03d}Z {ln}" for i, ln in enumerate(lines)])
    (k.state / "gpu.csv").write_text((FIX / "nvidia-smi-query-8gpu.csv").read_text())
    return k


async def test_the_header_shows_the_pod_state_as_it_changes(kube: FakeKube, tmp_path: Path) -> None:
    pod = _pod("running-not-ready")
    pod["metadata"]["name"] = "r1-0"
    kube.put_pod(pod)
    host = parse_config('[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n', tmp_path / "h.toml").host("r1")

    def factory(name: str, cfg: Any) -> KubeBackend:
        return KubeBackend(name, PodRef("prod-eu", "llm", "r1-0", container="sglang"), retry_s=0.05, pod_poll_s=0.1)

    app = KvtuiApp([HostSpec("r1", host)], backend_factory=factory,
                   monitor_options={"gpu_interval": 0.1, "flush_interval": 0.05})
    app.animation_level = "none"
    async with app.run_test(size=(200, 40)) as pilot:
        bar = app.query_one(HostBar)

        def header() -> str:
            return plain(bar)

        await wait_for(pilot, lambda: "pod r1-0: Running, not ready (readiness probe)" in header(), timeout=20)
        assert "● connected" in header()
        # the readiness probe starts to pass: no log line says so, the pod watch does
        ready = _pod("running-ready")
        kube.put_pod(ready)
        await wait_for(pilot, lambda: "pod r1-0: Running, ready" in header(), timeout=20)
        # the container was OOM-killed once and runs again
        restarted = copy.deepcopy(ready)
        st = restarted["status"]["containerStatuses"][0]
        st["restartCount"] = 1
        st["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
        kube.put_pod(restarted)
        await wait_for(pilot, lambda: "1 restart, last: OOMKilled (exit 137): host memory, not GPU" in header(),
                       timeout=20)
        # evicted and rescheduled: Pending, and why
        pending = _pod("pending-unschedulable")
        pending["metadata"]["name"] = "r1-0"
        kube.put_pod(pending)
        await wait_for(pilot, lambda: "Pending: unschedulable (0/4 nodes are available" in header(), timeout=20)
        assert "◌ reconnecting" in header()
        # closed here, not by the app's teardown: the backend reaps its kubectl processes
        pane = app.main_screen.active_pane
        assert pane is not None
        assert pane.monitor is not None
        await pane.monitor.close()
