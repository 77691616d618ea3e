"""A kube host named by its pod follows the pod that takes its place outside any rollout of
kvtui's (CLOSING4: "a pod-name host keeps asking for the old pod"): the pod is deleted (a drained
node, an eviction, ``kubectl delete pod``) and its controller makes another — under a new name for
a Deployment's pod, under the same name with a new uid for a StatefulSet's. The old boot ends there
(a record of kvtui's own: a ready boot is stopped) and the new pod's whole log is the next boot.
Against the fake ``kubectl`` first on PATH (tests/kube_support.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kube_support import FakeKube, until
from test_kube_next_boot import NODE0, _now, _pod, _status

from kvtui.boot import BootStatus
from kvtui.bootlog import BootLog
from kvtui.engines.events import LogRecord
from kvtui.hosts.backend import ConnState, LogStart
from kvtui.hosts.kube import kubectl_argv as K
from kvtui.hosts.kube.backend import KubeBackend
from kvtui.hosts.kube.state import successor


class Follow:
    """``follow_log(CURRENT_BOOT)`` in a task: the records it yields."""

    def __init__(self, backend: KubeBackend) -> None:
        self.records: list[LogRecord] = []
        self.task = asyncio.create_task(self._run(backend))

    async def _run(self, backend: KubeBackend) -> None:
        async for batch in backend.follow_log(LogStart.CURRENT_BOOT):
            self.records.extend(batch)

    def texts(self) -> list[str]:
        return [r.text for r in self.records]

    async def stop(self, backend: KubeBackend) -> None:
        await backend.close()
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=10)
        assert self.task.done()


def _deployment_pod(name: str, uid: str, hash_: str = "5d8f", started: str = "2026-12-01T15:02:10Z") -> dict[str, Any]:
    pod = _status(_pod(), uid=uid, name=name, state={"running": {"startedAt": started}})
    pod["metadata"]["labels"] = {"app": "r1", "pod-template-hash": hash_}
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"r1-{hash_}",
                                           "uid": "rs1", "controller": True}]
    return pod


def test_the_successor_is_the_controllers_newest_other_pod() -> None:
    gone = _deployment_pod("r1-5d8f-aaaaa", "u-a")
    gone["metadata"]["creationTimestamp"] = "2026-12-01T15:00:00Z"
    other = _deployment_pod("r1-5d8f-bbbbb", "u-b")  # another replica, made before
    other["metadata"]["creationTimestamp"] = "2026-12-01T15:00:01Z"
    made = _deployment_pod("r1-5d8f-ccccc", "u-c")
    made["metadata"]["creationTimestamp"] = "2026-12-01T16:00:00Z"
    bare = copy.deepcopy(made)  # same labels, but no controller of the same kind
    bare["metadata"]["name"], bare["metadata"]["ownerReferences"] = "r1-debug", []
    bare["metadata"]["creationTimestamp"] = "2026-12-01T17:00:00Z"
    assert successor([gone, other, made, bare], gone) is made
    assert successor([gone], gone) is None  # not made yet
    again = copy.deepcopy(gone)  # a StatefulSet's: the same name, another uid
    again["metadata"]["uid"] = "u-a2"
    assert successor([gone, again], gone) is again
    # deletion seen (a terminating pod read before it went): only a pod made since is its successor
    gone["metadata"]["deletionTimestamp"] = "2026-12-01T16:30:00Z"
    assert successor([gone, other, made], gone) is None
    later = copy.deepcopy(made)
    later["metadata"]["creationTimestamp"] = "2026-12-01T16:30:02Z"
    assert successor([gone, other, made, later], gone) is later
    # a StatefulSet's other replicas are other servers: only the pod made again under its name
    sts = _status(_pod(), uid="u-0")
    replica = _status(_pod(), uid="u-1", name="r1-1")
    assert successor([replica], sts) is None
    # no creationTimestamp: the container that started last
    a, b = _deployment_pod("x-1", "u1", started="2026-12-01T15:00:00Z"), _deployment_pod("x-2", "u2")
    assert successor([a, b], gone) is b


async def test_a_deleted_deployment_pod_is_followed_into_its_replacement(kube: FakeKube) -> None:
    old = _deployment_pod("r1-5d8f-aaaaa", "u-old")
    kube.put_pod(old)
    kube.append_log("r1-5d8f-aaaaa", "sglang", [f"2026-12-01T15:02:11.{i:03d}Z {ln}" for i, ln in enumerate(NODE0)])
    ref = K.PodRef("prod-eu", "llm", "r1-5d8f-aaaaa", container="sglang")
    backend = KubeBackend("r1", ref, retry_s=0.05, pod_poll_s=0)
    await backend.start()
    follow = Follow(backend)
    try:
        await until(lambda: len(follow.records) >= len(NODE0), "the old pod's boot", timeout=30.0)
        # the pod is deleted (its container ends, kubectl logs -f with it); nothing in its place yet
        (kube.state / "pods" / "r1-5d8f-aaaaa.json").unlink()
        kube.end("r1-5d8f-aaaaa", "sglang")
        await until(lambda: "waiting for ReplicaSet r1-5d8f to make the pod" in backend.status().detail,
                    "the follower to say it waits for the next pod", timeout=30.0)
        assert backend.status().state is ConnState.RECONNECTING
        # the ReplicaSet makes r1-5d8f-ccccc; its container starts and prints a new boot
        new = _deployment_pod("r1-5d8f-ccccc", "u-new", started=_now()[:19] + "Z")
        new_log = NODE0[:30]
        kube.append_log("r1-5d8f-ccccc", "sglang", [f"{_now(0.5 + i / 1000)} {ln}" for i, ln in enumerate(new_log)])
        kube.put_pod(new)
        await until(lambda: len(follow.records) >= len(NODE0) + 1 + len(new_log), "the new pod's boot",
                    timeout=30.0)
    finally:
        await follow.stop(backend)
    texts = follow.texts()
    assert texts[: len(NODE0)] == NODE0
    assert "pod r1-5d8f-aaaaa is gone; following r1-5d8f-ccccc" in texts[len(NODE0)]
    assert texts[len(NODE0) + 1:] == new_log
    assert backend.pod_state() is not None
    assert backend.pod_state().name == "r1-5d8f-ccccc"  # type: ignore[union-attr]
    # as every reader sees it: the old boot ready then stopped, the new one a boot of its own
    log = BootLog()
    for r in follow.records:
        log.feed(r)
    boots = log.tracker.boots
    assert [b.status for b in boots] == [BootStatus.STOPPED, BootStatus.STARTING]


async def test_a_statefulset_pod_made_again_under_its_name_is_a_new_boot(kube: FakeKube) -> None:
    """Same name, another uid: the old log's stamps say nothing about the new pod's, so its
    whole log is read (not only what is stamped after the old pod's last line)."""
    kube.put_pod(_status(_pod(), uid="u-old"))
    kube.append_log("r1-0", "sglang", [f"{_now(-60 + i / 1000)} {ln}" for i, ln in enumerate(NODE0)])
    backend = KubeBackend("r1", K.PodRef("prod-eu", "llm", "r1-0", container="sglang"), retry_s=0.05, pod_poll_s=0)
    await backend.start()
    follow = Follow(backend)
    try:
        await until(lambda: len(follow.records) >= len(NODE0), "the old pod's boot", timeout=30.0)
        # the new r1-0's first lines are stamped before the old pod's last one (clocks of two nodes)
        new_log = NODE0[:20]
        path = kube.log_path("r1-0", "sglang")
        tmp = path.with_suffix(".new")
        tmp.write_text("".join(f"{_now(-120 + i / 1000)} {ln}\n" for i, ln in enumerate(new_log)))
        kube.put_pod(_status(_pod(), uid="u-new", state={"running": {"startedAt": _now(-120)[:19] + "Z"}}))
        tmp.replace(path)  # the old container's log goes with its pod: its follow ends
        await until(lambda: len(follow.records) >= len(NODE0) + 1 + len(new_log), "the new pod's boot",
                    timeout=30.0)
    finally:
        await follow.stop(backend)
    texts = follow.texts()
    assert "pod r1-0 is gone; following r1-0" in texts[len(NODE0)]
    assert texts[len(NODE0) + 1:] == new_log
