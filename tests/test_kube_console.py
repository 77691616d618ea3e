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
from kvtui.hosts.kube.kubectl_argv import PodRef
from kvtui.monitor import MonitorOptions
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
                   monitor_options=MonitorOptions(gpu_interval=0.1, flush_interval=0.05))
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


async def test_the_gpu_panel_says_why_dcgm_readings_are_stale(kube: FakeKube, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A kube host on a DCGM exporter: the stale mark in the GPU panel says why — another node's
    exporter answered, the exporter cannot be reached — and goes when readings come again."""
    from kvtui.kube_ref import parse_service_url
    from kvtui.ui.gpu.widgets import GpuBars, GpuNote

    url = "http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics"
    proxy = parse_service_url(url).proxy_path()
    kube.put_pod(_pod("running-ready"))
    kube.put_raw(proxy, (FIX / "kube" / "dcgm" / "exporter-3x-h100-podmap.txt").read_text())
    monkeypatch.setattr("kvtui.hosts.kube.backend.DCGM_MIN_S", 0.05)
    host = parse_config(f'[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\ngpu_metrics_url = "{url}"\n',
                        tmp_path / "h.toml").host("r1")

    def factory(name: str, cfg: Any) -> KubeBackend:
        return KubeBackend(name, PodRef("prod-eu", "llm", "r1-0", container="sglang"), retry_s=0.05, pod_poll_s=0,
                           gpu_metrics_url=url)

    app = KvtuiApp([HostSpec("r1", host)], backend_factory=factory,
                   monitor_options=MonitorOptions(gpu_interval=0.05, flush_interval=0.05))
    app.animation_level = "none"
    async with app.run_test(size=(200, 40)) as pilot:
        bars, note = app.query_one(GpuBars), app.query_one(GpuNote)

        def shown() -> str:
            return plain(note) if note.has_class("-shown") else ""

        await wait_for(pilot, lambda: len(bars.samples) == 4 and not any(s.stale for s in bars.samples), timeout=20)
        assert shown() == ""
        kube.put_raw(proxy, (FIX / "kube" / "dcgm" / "exporter-3x-h100-other-node.txt").read_text())
        await wait_for(pilot, lambda: "another node's" in shown(), timeout=20)
        assert shown() == "stale: another node's DCGM exporter answered (gpu-node-9; the pod runs on gpu-node-3)"
        assert all(s.stale for s in bars.samples)
        kube.put_raw(proxy, None)
        await wait_for(pilot, lambda: "unreachable" in shown(), timeout=20)
        assert shown().startswith("stale: DCGM exporter unreachable: Error from server (ServiceUnavailable): no "
                                  "endpoints available")
        kube.put_raw(proxy, (FIX / "kube" / "dcgm" / "exporter-3x-h100-podmap.txt").read_text())
        await wait_for(pilot, lambda: shown() == "" and not any(s.stale for s in bars.samples), timeout=20)
        pane = app.main_screen.active_pane
        assert pane is not None
        assert pane.monitor is not None
        await pane.monitor.close()


async def test_the_deployment_console_shows_each_pods_state(kube: FakeKube, tmp_path: Path) -> None:
    """A deployment of two kube pods (an LWS leader and its worker): each node's console (a tab per
    node) carries its pod's state in its header as its backend reads it, and follows it (the
    worker's container OOM-killed and crash-looping); ``#`` goes from the leader's to the worker's."""
    for fixture in ("lws-leader", "lws-worker-1"):
        pod = _pod(fixture)
        kube.put_pod(pod)
    kube.append_log("r1-0-1", "sglang", ["2026-12-01T15:00:00.000Z [2026-12-01 15:00:00] worker starting"])
    cfg = parse_config('[hosts.leader]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n'
                       '[hosts.worker]\nkube = "prod-eu/llm/r1-0-1"\ncontainer = "sglang"\n'
                       '[deployments.r1]\nnodes = ["leader", "worker"]\n', tmp_path / "h.toml")
    pods = {"leader": "r1-0", "worker": "r1-0-1"}

    def factory(name: str, host: Any) -> KubeBackend:
        return KubeBackend(name, PodRef("prod-eu", "llm", pods[name], container="sglang"), retry_s=0.05,
                           pod_poll_s=0.1)

    app = KvtuiApp([HostSpec(n, cfg.host(n)) for n in ("leader", "worker")], backend_factory=factory, config=cfg,
                   deployments=["r1"])
    app.animation_level = "none"
    async with app.run_test(size=(200, 40)) as pilot:
        leader, worker = app.main_screen.panes
        assert leader.group is worker.group is not None

        def head(pane: Any) -> str:
            return plain(pane.query_one(HostBar))

        await wait_for(pilot, lambda: "pod r1-0: Running, ready" in head(leader), timeout=30)
        await pilot.press("number_sign")
        await wait_for(pilot, lambda: app.main_screen.active_pane is worker, timeout=10)
        await wait_for(pilot, lambda: "pod r1-0-1: Running" in head(worker), timeout=30)
        crashed = _pod("lws-worker-1")
        st = crashed["status"]["containerStatuses"][0]
        st["restartCount"], st["ready"] = 3, False
        st["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}
        st["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
        kube.put_pod(crashed)
        await wait_for(pilot, lambda: "CrashLoopBackOff" in head(worker), timeout=30)
        assert ("pod r1-0-1: CrashLoopBackOff (back-off 40s restarting failed container), 3 restarts, last: OOMKilled "
                "(exit 137): host memory, not GPU") in (worker.status.detail if worker.status else "")
        assert leader.status is not None
        assert "pod r1-0: Running, ready" in (leader.status.detail or "")
        for pane in (leader, worker):  # closed here, not by the app's teardown: the backends reap kubectl
            assert pane.monitor is not None
            await pane.monitor.close()
