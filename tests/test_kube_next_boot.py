"""The next boot on a kube host is the next *container* (k20, issue 15's leftovers): the one after
the container that ran when the restart was marked — another pod (uid; a Deployment's new pod is
found by its controller's labels) or the same pod's container restarted — read from its own
``startedAt``. The old pod's lines never count, however late it prints: a terminating pod's
shutdown lines, a rolling update's old pod still serving after the new one started. The follow is
positioned at once (``PositionedLogSource.follow_next_boot``): no settle time before a restart.
Against the fake ``kubectl`` first on PATH (tests/kube_support.py)."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kube_support import FakeKube, until

from kvtui.hosts.backend import PositionedLogSource
from kvtui.hosts.kube import kubectl_argv as K
from kvtui.hosts.kube.backend import KubeBackend
from kvtui.hosts.kube.state import ContainerId, NextContainer, container_id, next_container, siblings_selector

FIX = Path(__file__).parent / "fixtures"
REF = K.PodRef("prod-eu", "llm", "r1-0", container="sglang")
NODE0 = (FIX / "nodes" / "sglang-tp16-node0.log").read_text().splitlines()


def _pod(name: str = "running-ready") -> dict[str, Any]:
    out: dict[str, Any] = json.loads((FIX / "kube" / "pods" / f"{name}.json").read_text())
    return out


def _now(offset: float = 0.0) -> str:
    t = time.time() + offset
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"


class NextBoot:
    """``follow_next_boot`` in a task: the texts it yields, and when it said it is positioned."""

    def __init__(self, backend: KubeBackend) -> None:
        self.texts: list[str] = []
        self.positioned = asyncio.Event()
        self.task = asyncio.create_task(self._run(backend))

    async def _run(self, backend: KubeBackend) -> None:
        async for batch in backend.follow_next_boot(self.positioned.set):
            self.texts.extend(r.text for r in batch)

    async def stop(self, backend: KubeBackend) -> None:
        await backend.close()
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=10)
        assert self.task.done()


async def _kubectl(kube: FakeKube, *argv: str) -> None:
    proc = await asyncio.create_subprocess_exec("kubectl", "--namespace", "llm", *argv, env=kube.env(),
                                                stdout=asyncio.subprocess.DEVNULL)
    assert await proc.wait() == 0


def _gets(kube: FakeKube, pod: str) -> int:
    return sum(1 for c in kube.calls() if c[4:7] == ["get", "pod", pod])


# -- which container is next (pure) ---------------------------------------------------------------

def _status(pod: dict[str, Any], *, uid: str, restarts: int = 0, state: dict[str, Any] | None = None,
            last: dict[str, Any] | None = None, name: str | None = None) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["metadata"]["uid"] = uid
    if name:
        out["metadata"]["name"] = name
    cs = out["status"]["containerStatuses"][0]
    cs["restartCount"] = restarts
    cs["state"] = state or {"running": {"startedAt": "2026-12-01T15:02:10Z"}}
    cs["lastState"] = {"terminated": last} if last else {}
    return out


def test_the_next_container_is_another_pod_or_a_restart_that_has_started() -> None:
    old_pod = _status(_pod(), uid="u-old")
    old = container_id(old_pod, "sglang")
    assert old == ContainerId("r1-0", "u-old", 0, "2026-12-01T15:02:10Z")
    # the old container alone (say, terminating and still printing): none yet
    assert next_container([old_pod], "sglang", old) is None
    # the new pod is being created: none yet
    creating = _status(_pod(), uid="u-new", state={"waiting": {"reason": "ContainerCreating"}})
    assert next_container([old_pod, creating], "sglang", old) is None
    # a rolling update: the old pod still runs beside the new one; the new one is next, from its start
    new = _status(_pod(), uid="u-new", name="r1-7c4b-bbbbb", state={"running": {"startedAt": "2026-12-01T16:00:01Z"}})
    assert next_container([old_pod, new], "sglang", old) == NextContainer("r1-7c4b-bbbbb", "2026-12-01T16:00:01Z", 0)
    # the same pod's container restarted (a crash, an OOM kill)
    again = _status(_pod(), uid="u-old", restarts=1, state={"running": {"startedAt": "2026-12-01T15:09:00Z"}})
    assert next_container([again], "sglang", old) == NextContainer("r1-0", "2026-12-01T15:09:00Z", 1)
    # the new pod's first container crashed before it was seen running: its log is --previous's
    looped = _status(_pod(), uid="u-new", restarts=1, state={"waiting": {"reason": "CrashLoopBackOff"}},
                     last={"reason": "Error", "exitCode": 1, "startedAt": "2026-12-01T16:00:01Z",
                           "finishedAt": "2026-12-01T16:00:30Z"})
    assert next_container([old_pod, looped], "sglang", old) == NextContainer("r1-0", "2026-12-01T16:00:01Z", 0)
    # no pod read before (nothing known): whatever runs now
    assert next_container([old_pod], "sglang", None) == NextContainer("r1-0", "2026-12-01T15:02:10Z", 0)


def test_a_deployments_next_pod_is_found_by_its_labels_without_the_revision() -> None:
    pod = _pod()
    pod["metadata"]["labels"] = {"app": "r1", "pod-template-hash": "5d8f", "tier": "llm"}
    assert siblings_selector(pod) == "app=r1,tier=llm"
    assert K.list_pods(REF, siblings_selector(pod)) == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "get", "pods", "--selector", "app=r1,tier=llm",
        "--output", "json"]


# -- against the fake kubectl ---------------------------------------------------------------------

async def test_a_terminating_pods_late_lines_are_not_the_new_boot(kube: FakeKube) -> None:
    """StatefulSet: the old pod r1-0 prints its shutdown after the restart was marked (stamped
    after it), then the new r1-0 (a new uid) starts: only the new container's lines come."""
    kube.put_pod(_status(_pod(), uid="u-old"))
    kube.append_log("r1-0", "sglang", [f"2026-12-01T15:02:11.{i:03d}Z {ln}" for i, ln in enumerate(NODE0[:10])])
    backend = KubeBackend("r1", REF, retry_s=0.05)
    await backend.start()
    assert isinstance(backend, PositionedLogSource)
    await backend.refresh()
    backend.mark_next_boot(time.time())
    follow = NextBoot(backend)
    try:
        await asyncio.wait_for(follow.positioned.wait(), 10)
        kube.append_log("r1-0", "sglang", [f"{_now()} [2026-12-01 16:00:00] Received sigterm, shutting down",
                                           f"{_now(0.001)} [2026-12-01 16:00:00] Traceback (most recent call last):"])
        seen = _gets(kube, "r1-0")
        await until(lambda: _gets(kube, "r1-0") >= seen + 3, "the follower to look at the pod again", timeout=30.0)
        new_log = NODE0[:40]
        kube.on_rollout("StatefulSet", "r1", _pod(), "sglang", new_log)
        await _kubectl(kube, "rollout", "restart", "statefulset/r1")
        await until(lambda: len(follow.texts) >= len(new_log), "the new container's boot", timeout=30.0)
    finally:
        await follow.stop(backend)
    assert follow.texts == new_log
    assert not any(c[4:6] == ["logs", "r1-0"] and "--previous" in c for c in kube.calls())


async def test_a_rolling_updates_old_pod_printing_after_the_new_one_started(kube: FakeKube) -> None:
    """Deployment: the host names the old pod r1-5d8f-aaaaa; the rollout makes r1-7c4b-bbbbb and
    the old pod keeps serving (and printing) after the new one started. The new pod is found by
    the Deployment's labels and followed from its start; none of the old pod's lines come."""
    old = _status(_pod(), uid="u-old", name="r1-5d8f-aaaaa")
    old["metadata"]["labels"] = {"app": "r1", "pod-template-hash": "5d8f"}
    old["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r1-5d8f",
                                           "uid": "rs1", "controller": True}]
    kube.put_pod(old)
    kube.append_log("r1-5d8f-aaaaa", "sglang", [f"2026-12-01T15:02:11.{i:03d}Z {ln}" for i, ln in enumerate(NODE0)])
    ref = K.PodRef("prod-eu", "llm", "r1-5d8f-aaaaa", container="sglang")
    backend = KubeBackend("r1", ref, retry_s=0.05)
    await backend.start()
    await backend.refresh()
    backend.mark_next_boot(time.time())
    follow = NextBoot(backend)
    try:
        await asyncio.wait_for(follow.positioned.wait(), 10)
        new = copy.deepcopy(old)
        new["metadata"]["name"] = "r1-7c4b-bbbbb"
        new["metadata"]["labels"] = {"app": "r1", "pod-template-hash": "7c4b"}
        new_log = NODE0[:30]
        kube.on_rollout("Deployment", "r1", new, "sglang", new_log)
        await _kubectl(kube, "rollout", "restart", "deployment/r1")
        # the old pod serves on, stamped after the new container started
        late = [f"{_now(1 + i / 1000)} [2026-12-01 16:00:02] Decode batch. #running-req: 3, #token: {i}"
                for i in range(5)]
        kube.append_log("r1-5d8f-aaaaa", "sglang", late)
        await until(lambda: len(follow.texts) >= len(new_log), "the new pod's boot", timeout=30.0)
        more = [f"{_now(2)} [2026-12-01 16:00:03] Prefill batch. #new-seq: 1"]
        kube.append_log("r1-7c4b-bbbbb", "sglang", more)
        await until(lambda: len(follow.texts) >= len(new_log) + 1, "the new pod's next line", timeout=30.0)
    finally:
        await follow.stop(backend)
    assert follow.texts == [*new_log, more[0].split(" ", 1)[1]]
    assert any(c[4:9] == ["get", "pods", "--selector", "app=r1", "--output"] for c in kube.calls())
    assert backend.pod_state() is not None
    assert backend.pod_state().name == "r1-7c4b-bbbbb"  # type: ignore[union-attr]


def test_apply_on_a_deployment_pod_follows_the_new_pod_while_the_old_one_prints(kube: FakeKube,
                                                                                 tmp_path: Path) -> None:
    """``kvtui apply`` end to end: the Deployment's new pod boots with the edit while the old pod
    keeps printing its old boot's serving lines; the apply follows the new pod to ready."""
    old = _status(_pod(), uid="u-old", name="r1-5d8f-aaaaa")
    old["metadata"]["labels"] = {"app": "r1", "pod-template-hash": "5d8f"}
    old["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r1-5d8f",
                                           "uid": "rs1", "controller": True}]
    kube.put_pod(old)
    boot85 = [ln.replace("mem_fraction_static=0.88", "mem_fraction_static=0.85") for ln in NODE0]
    kube.append_log("r1-5d8f-aaaaa", "sglang", [f"2026-12-01T15:02:11.{i:03d}Z {ln}" for i, ln in enumerate(boot85)])
    kube.put_object({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                     "metadata": {"name": "r1-5d8f", "namespace": "llm",
                                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "r1",
                                                       "uid": "d1", "controller": True}]}})
    dep = json.loads((FIX / "kube" / "objects" / "statefulset-plain.json").read_text())
    dep["kind"] = "Deployment"
    kube.put_object(dep)
    new = copy.deepcopy(old)
    new["metadata"]["name"] = "r1-7c4b-bbbbb"
    new["metadata"]["labels"] = {"app": "r1", "pod-template-hash": "7c4b"}
    kube.on_rollout("Deployment", "r1", new, "sglang", NODE0)
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[hosts.r1]\nkube = "prod-eu/llm/r1-5d8f-aaaaa"\ncontainer = "sglang"\n')
    env = kube.env()
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.Popen([sys.executable, "-m", "kvtui", "--hosts", str(hosts), "apply", "r1", "--set",
                             "mem-fraction-static=0.88", "--restart", "--yes", "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            stdin=subprocess.DEVNULL)
    # the old pod prints its old boot's argument dump again while the new pod boots (say, a
    # supervisor restarted its server): stamped after the new container started
    deadline = time.monotonic() + 60
    new_log = kube.log_path("r1-7c4b-bbbbb", "sglang")
    while not new_log.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    kube.append_log("r1-5d8f-aaaaa", "sglang", [f"{_now(1 + i / 1000)} {ln}" for i, ln in enumerate(boot85[:25])])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "r1: applied; the new boot is ready" in out
    assert "the new boot's own argument dump carries the edits" in err


async def test_a_restart_waits_for_no_settle_time(kube: FakeKube, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The console's restart (``kubectl rollout restart``) with a settle time of 10 minutes: the
    follower is positioned at once (it knows the container running now), so the restart is issued
    without waiting it, and the new pod's boot is followed to ready."""
    from kvtui.config import parse_config
    from kvtui.hosts import service
    from kvtui.hosts.factory import make_backend

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    kube.put_pod(_status(_pod(), uid="u-old"))
    kube.append_log("r1-0", "sglang", [f"2026-12-01T15:02:11.{i:03d}Z {ln}" for i, ln in enumerate(NODE0)])
    kube.put_object(json.loads((FIX / "kube" / "objects" / "statefulset-plain.json").read_text()))
    kube.on_rollout("StatefulSet", "r1", _pod(), "sglang", NODE0)
    host = parse_config('[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n', tmp_path / "h.toml").host("r1")
    backend = make_backend("r1", host)
    await backend.start()
    try:
        plan = service.plan_restart("r1", host, backend, follow=True, timeout=60)
        out = await asyncio.wait_for(service.execute(plan, backend, settle_s=600), 120)
    finally:
        await backend.close()
    assert out.status == "ready", out.messages
    assert "StatefulSet/r1: rollout restarted" in out.messages
