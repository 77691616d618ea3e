"""Kube hosts through a whole rollout (issue 25), against the fake ``kubectl`` whose cluster follows
Kubernetes' rules (tests/kube_support.py, ``sim/``): a deleted pod is Terminating until its
container answers SIGTERM (or the grace period ends) and its ``deletionTimestamp`` is the request
*plus* the grace period; a ReplicaSet makes the replacement at once; a Deployment's rollout surges
one pod (the new one Ready before the old one is deleted); ``rollout status`` waits with kubectl's
texts and exit codes.

- a host followed through ``kubectl delete pod`` finds the replacement (by the controller's
  ``spec.selector``, created after the deletion was *requested*), and the old boot is stopped,
  not a crash: its container's ``terminated`` state says it shut down (exit 0 after SIGTERM);
- a host named by a Deployment's pod keeps working after a rollout replaced that pod (``rollback``
  in a later kvtui: the controller remembered, its current pod followed);
- ``apply --restart`` is ready only once the rollout is complete (``rollout status`` awaited)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kube_support import FakeKube

from kvtui.boot import BootStatus
from kvtui.bootlog import BootLog
from kvtui.engines.events import LogRecord
from kvtui.hosts.kube import kubectl_argv as K
from kvtui.hosts.kube.backend import KubeBackend

FIX = Path(__file__).parent / "fixtures"
NODE0 = (FIX / "nodes" / "sglang-tp16-node0.log").read_text().splitlines()
# uvicorn's lines when the server is sent SIGTERM and shuts down cleanly (exit 0)
SHUTDOWN = ["[2026-12-01 15:30:00] INFO:     Shutting down", "[2026-12-01 15:30:00] INFO:     Waiting for application "
            "shutdown.", "[2026-12-01 15:30:00] INFO:     Application shutdown complete.",
            "[2026-12-01 15:30:00] INFO:     Finished server process [4100]"]
OLD = "sglang-dsv4-5d8f7c9b6-x2k9q"
# how long a pod whose container ended stays before it is removed, in the tests that assert how
# its container ended: kvtui reads that from the pod as last read (``pod_end``), one ``kubectl get``
# after the log stream ended — which took longer than the default 0.3 s on a loaded machine (the
# pod already gone: "deleted", the container's end unknown, as on a real cluster that fast)
FINALIZE_READ_S = 5.0


def _json(path: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(path.read_text())
    return out


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"


def _boot(fraction: str) -> list[str]:
    return [ln.replace("mem_fraction_static=0.88", f"mem_fraction_static={fraction}") for ln in NODE0]


def _dep_pod(name: str, hash_: str = "5d8f7c9b6", chart: str = "sglang-0.3.1") -> dict[str, Any]:
    pod = _json(FIX / "kube" / "pods" / "running-ready.json")
    pod["metadata"].update(name=name, uid=f"uid-{name}", creationTimestamp="2026-12-01T15:00:00Z",
                           labels={"app": "sglang-dsv4", "pod-template-hash": hash_, "helm.sh/chart": chart},
                           ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                                             "name": f"sglang-dsv4-{hash_}", "uid": f"rs-{hash_}"}])
    pod["spec"]["containers"] = pod["spec"]["containers"][:1]
    pod["status"]["containerStatuses"] = pod["status"]["containerStatuses"][:1]
    return pod


def _deployment(kube: FakeKube, hash_: str = "5d8f7c9b6") -> None:
    """The Deployment ``sglang-dsv4`` (Helm-labelled pods, one replica) and its ReplicaSet."""
    pod = _dep_pod(OLD, hash_)
    dep = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "sglang-dsv4", "namespace": "llm", "uid": "dep-1", "generation": 1},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "sglang-dsv4"}},
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                    "template": {"metadata": {"labels": {"app": "sglang-dsv4"}},
                                 "spec": {"containers": [copy.deepcopy(pod["spec"]["containers"][0])]}}}}
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": f"sglang-dsv4-{hash_}", "namespace": "llm", "uid": f"rs-{hash_}",
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "sglang-dsv4",
                                            "uid": "dep-1", "controller": True}]},
          "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "sglang-dsv4", "pod-template-hash": hash_}}}}
    kube.put_object(dep)
    kube.put_object(rs)
    kube.put_pod(pod)
    t0 = time.time() - 120
    kube.append_log(OLD, "sglang", [f"{_stamp(t0 + i / 1000)} {ln}" for i, ln in enumerate(_boot("0.85"))])


def _cli(kube: FakeKube, tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    path = tmp_path / "hosts.toml"
    path.write_text(f'[hosts.dsv4]\nkube = "prod-eu/llm/{OLD}"\ncontainer = "sglang"\n')
    env = kube.env()
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    return subprocess.Popen([sys.executable, "-m", "kvtui", "--hosts", str(path), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)


def _run(kube: FakeKube, tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    proc = _cli(kube, tmp_path, *argv)
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out, err


def _poll(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _following(kube: FakeKube, pod: str) -> bool:
    return any("logs" in c and pod in c and "--follow" in c for c in kube.calls())


def test_wait_next_across_kubectl_delete_pod_finds_the_replacement_and_the_old_boot_stopped(
        kube: FakeKube, tmp_path: Path) -> None:
    """``wait --next``, then the operator's ``kubectl delete pod``: the ReplicaSet's replacement is
    created right away (its creationTimestamp long before the old pod's deletionTimestamp, which
    adds the 30 s grace); the old server shuts down cleanly on SIGTERM (exit 0, Completed). The
    wait ends at the new pod's ready boot, and nothing calls the old one's end a crash."""
    _deployment(kube)
    kube.on_sigterm(OLD, "sglang", SHUTDOWN, after=0.3, exit_code=0)
    new = "sglang-dsv4-5d8f7c9b6-7hq4z"
    kube.on_delete(OLD, _dep_pod(new), "sglang", _boot("0.85"))
    proc = _cli(kube, tmp_path, "wait", "dsv4", "--next", "--timeout", "90")
    try:
        _poll(lambda: _following(kube, OLD), "the wait to follow the pod")
        res = kube.kubectl("delete", "pod", OLD)  # waits until the pod is gone, as kubectl does
        assert res.returncode == 0, res.stderr
        assert res.stdout == f'pod "{OLD}" deleted\n'
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "crash" not in out + err
    assert "waiting for ReplicaSet" not in err
    # the replacement was found by the Deployment's selector
    assert any(c[4:8] == ["get", "pods", "--selector", "app=sglang-dsv4"] for c in kube.calls())


async def test_a_deleted_pod_that_shuts_down_cleanly_is_a_stopped_boot(kube: FakeKube) -> None:
    """The console's follow of the current boot: the pod deleted, its server prints uvicorn's
    shutdown and exits 0 — the boot is stopped (Completed, exit 0), the replacement's boot next."""
    _deployment(kube)
    kube.finalize_after(FINALIZE_READ_S)
    kube.on_sigterm(OLD, "sglang", SHUTDOWN, after=0.3, exit_code=0)
    new = "sglang-dsv4-5d8f7c9b6-7hq4z"
    kube.on_delete(OLD, _dep_pod(new), "sglang", _boot("0.85")[:40])
    backend = KubeBackend("dsv4", K.PodRef("prod-eu", "llm", OLD, container="sglang"), retry_s=0.05, pod_poll_s=0)
    records = await _follow_through(kube, backend, lambda: kube.kubectl("delete", "pod", OLD, "--wait=false"),
                                    len(NODE0) + len(SHUTDOWN) + 1 + 40)
    texts = [r.text for r in records]
    gone = texts[len(NODE0) + len(SHUTDOWN)]
    assert gone.startswith(f"kvtui: the server process stopped (pod {OLD} is gone; following {new}"), gone
    assert "Completed [exit 0] after SIGTERM" in gone
    log = BootLog()
    for r in records:
        log.feed(r)
    assert [b.status for b in log.tracker.boots] == [BootStatus.STOPPED, BootStatus.STARTING]
    assert log.tracker.boots[0].failure is None


async def test_a_statefulset_pod_made_again_after_its_deletion_is_stopped_not_crashed(kube: FakeKube) -> None:
    """A StatefulSet's pod: made again under its own name once the old one is gone (never
    before); the old server ignored SIGTERM and was killed when the grace period ended (137)."""
    pod = _json(FIX / "kube" / "pods" / "running-ready.json")
    pod["metadata"]["uid"] = "uid-old"
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    kube.put_pod(pod)
    kube.finalize_after(FINALIZE_READ_S)
    t0 = time.time() - 120
    kube.append_log("r1-0", "sglang", [f"{_stamp(t0 + i / 1000)} {ln}" for i, ln in enumerate(NODE0)])
    kube.on_delete("r1-0", copy.deepcopy(pod), "sglang", NODE0[:30])
    backend = KubeBackend("r1", K.PodRef("prod-eu", "llm", "r1-0", container="sglang"), retry_s=0.05, pod_poll_s=0)
    records = await _follow_through(kube, backend, lambda: kube.kubectl("delete", "pod", "r1-0", "--wait=false"),
                                    len(NODE0) + 1 + 30)
    texts = [r.text for r in records]
    assert texts[len(NODE0)].startswith("kvtui: the server process stopped (pod r1-0 is gone; following r1-0")
    assert "killed at the end of its 1 s grace period [Error [exit 137]]" in texts[len(NODE0)]
    assert texts[len(NODE0) + 1:] == NODE0[:30]
    log = BootLog()
    for r in records:
        log.feed(r)
    assert [b.status for b in log.tracker.boots] == [BootStatus.STOPPED, BootStatus.STARTING]


async def _follow_through(kube: FakeKube, backend: KubeBackend, act: Any, want: int) -> list[LogRecord]:
    import asyncio

    from kube_support import until

    from kvtui.hosts.backend import LogStart

    records: list[LogRecord] = []

    async def run() -> None:
        async for batch in backend.follow_log(LogStart.CURRENT_BOOT):
            records.extend(batch)

    await backend.start()
    task = asyncio.create_task(run())
    try:
        await until(lambda: len(records) >= len(NODE0), "the old pod's boot", timeout=60.0)
        res = await asyncio.to_thread(act)
        assert res.returncode == 0, res.stderr
        await until(lambda: len(records) >= want, "the new pod's boot", timeout=60.0)
    finally:
        await backend.close()
        task.cancel()
        await asyncio.wait({task}, timeout=10)
    return records


@pytest.fixture(autouse=True)
def _quick_finalize(kube: FakeKube) -> None:
    kube.finalize_after(0.3)


def _dep_args(kube: FakeKube) -> list[str]:
    obj = _json(kube.state / "objects" / "deployment" / "sglang-dsv4.json")
    return [str(a) for a in obj["spec"]["template"]["spec"]["containers"][0]["args"]]


def test_rollback_by_the_pod_name_after_the_apply_rollout_replaced_that_pod(kube: FakeKube, tmp_path: Path) -> None:
    """The host names a Deployment's pod; ``apply --restart`` rolls it out (a new pod, another
    name); ``rollback`` in a later kvtui still finds the server: the controller was remembered and
    its current pod is the one followed."""
    _deployment(kube)
    kube.on_sigterm(OLD, "sglang", SHUTDOWN, after=0.2)
    before = _dep_args(kube)
    new1 = "sglang-dsv4-6c7d8e9f0-abcde"
    kube.on_rollout("Deployment", "sglang-dsv4", _dep_pod(new1, "6c7d8e9f0"), "sglang", _boot("0.88"),
                    surge=True, ready_after=0.5)
    code, out, err = _run(kube, tmp_path, "apply", "dsv4", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                          "--timeout", "90", "--no-probe")
    assert code == 0, err
    assert _dep_args(kube)[-1] == "0.88"
    # (the fake cluster moves on when kubectl is run)
    _poll(lambda: kube.kubectl("get", "pod", OLD).returncode != 0, "the old pod to be gone")
    kube.on_sigterm(new1, "sglang", SHUTDOWN, after=0.2)
    new2 = "sglang-dsv4-5d8f7c9b6-q8w7e"
    kube.on_rollout("Deployment", "sglang-dsv4", _dep_pod(new2), "sglang", _boot("0.85"), surge=True, ready_after=0.5)
    code, out, err = _run(kube, tmp_path, "rollback", "dsv4", "--restart", "--yes", "--timeout", "90", "--no-probe")
    assert code == 0, err
    assert "NotFound" not in err
    assert "dsv4: rolled back; the boot is ready" in out
    assert _dep_args(kube) == before


def test_apply_restart_is_ready_only_once_the_rollout_is_complete(kube: FakeKube, tmp_path: Path) -> None:
    """The new pod's log says ready at once, its readiness probe passes 3 s later, and only then
    is the old pod deleted and the rollout complete: ``apply --restart`` waits for it (``kubectl
    rollout status``, kubectl's own words) before it says the new boot is ready. The new pod has
    a new chart label too: the Deployment's selector finds it, not the old pod's labels."""
    _deployment(kube)
    kube.on_sigterm(OLD, "sglang", SHUTDOWN, after=0.2)
    new = "sglang-dsv4-6c7d8e9f0-abcde"
    # the new pod's readiness passes only once the apply said it waits for the rollout (a fixed
    # 3 s was sometimes over before a loaded machine had read the new boot's ready line)
    kube.on_rollout("Deployment", "sglang-dsv4", _dep_pod(new, "6c7d8e9f0", chart="sglang-0.3.2"), "sglang",
                    _boot("0.88"), surge=True, ready_after=10_000.0)
    proc = _cli(kube, tmp_path, "apply", "dsv4", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                "--timeout", "90", "--no-probe")
    watchdog = threading.Timer(180, proc.kill)
    watchdog.start()
    try:
        assert proc.stderr is not None
        assert proc.stdout is not None
        said: list[str] = []
        for line in proc.stderr:
            said.append(line)
            if "waiting for the rollout to complete" in line:
                assert kube.pod(OLD) is not None  # not complete yet: the old pod still serves
                kube.ready_now(new)
        out, code = proc.stdout.read(), proc.wait()
    finally:
        watchdog.cancel()
        proc.kill()
    err = "".join(said)
    assert code == 0, err
    assert "dsv4: applied; the new boot is ready" in out
    done = err.index('rollout: deployment "sglang-dsv4" successfully rolled out')
    assert done < err.index("the new boot is ready")
    assert "waiting for the rollout to complete" in err


def test_apply_restart_whose_rollout_never_completes_is_not_ready(kube: FakeKube, tmp_path: Path) -> None:
    """The new pod's log says ready but its readiness probe never passes: the rollout does not
    complete within the timeout (``error: timed out waiting for the condition``, exit 1 of
    ``kubectl rollout status``), and the apply says so instead of "ready"."""
    _deployment(kube)
    new = "sglang-dsv4-6c7d8e9f0-abcde"
    kube.on_rollout("Deployment", "sglang-dsv4", _dep_pod(new, "6c7d8e9f0"), "sglang", _boot("0.88"), surge=True,
                    ready_after=10_000.0)
    code, out, err = _run(kube, tmp_path, "apply", "dsv4", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                          "--timeout", "20", "--no-probe")
    assert code == 5, (out, err)
    assert "the new boot is ready" not in out + err
    assert ("the new boot says ready but the rollout did not complete: error: timed out waiting for the "
            "condition") in err
    assert kube.pod(OLD) is not None  # maxUnavailable 0: the old pod still serves


# -- item 5: kubectl's own error, the node's clock, what an apply without --restart does ----------


def test_an_unreachable_cluster_is_said_in_kubectls_own_words(kube: FakeKube, tmp_path: Path) -> None:
    _deployment(kube)
    (kube.state / "unreachable").write_text("10.0.0.1:6443")
    code, _out, err = _run(kube, tmp_path, "wait", "dsv4", "--timeout", "30")
    assert code == 3, err
    assert "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?" in err
    assert "memcache.go" not in err


async def test_the_next_boot_starts_at_the_nodes_clock_not_this_machines(kube: FakeKube) -> None:
    """The node's clock is an hour behind this machine's: the next boot's lines (stamped by the
    kubelet) are still the next boot's — ``--since-time`` is the container's last stamp."""
    import asyncio

    from kube_support import until

    from kvtui.hosts.backend import LogStart

    _deployment(kube)
    node = time.time() - 3600
    kube.put_pod(_dep_pod(OLD))
    kube.log_path(OLD, "sglang").write_text("".join(f"{_stamp(node - 60 + i / 1000)} {ln}\n"
                                                     for i, ln in enumerate(NODE0)))
    backend = KubeBackend("dsv4", K.PodRef("prod-eu", "llm", OLD, container="sglang"), retry_s=0.05, pod_poll_s=0)
    await backend.start()
    texts: list[str] = []

    async def run() -> None:
        async for batch in backend.follow_log(LogStart.NEXT_BOOT):
            texts.extend(r.text for r in batch)

    task = asyncio.create_task(run())
    try:
        await until(lambda: _following(kube, OLD), "the follow")
        kube.append_log(OLD, "sglang", [f"{_stamp(node + 1 + i / 1000)} {ln}" for i, ln in enumerate(NODE0[:5])])
        await until(lambda: len(texts) >= 5, "the new lines", timeout=30.0)
    finally:
        await backend.close()
        task.cancel()
        await asyncio.wait({task}, timeout=10)
    assert texts == NODE0[:5]


def test_apply_and_rollback_without_restart_say_the_pod_rolls_out(kube: FakeKube, tmp_path: Path) -> None:
    _deployment(kube)
    code, out, err = _run(kube, tmp_path, "apply", "dsv4", "--set", "mem-fraction-static=0.88", "--yes")
    assert code == 0, err
    assert "restart the server for it to take effect" not in out + err
    assert "dsv4: written; the controller rolls the pod out (not followed)" in out
    code, out, err = _run(kube, tmp_path, "rollback", "dsv4", "--yes")
    assert code == 0, err
    assert "restart to use it" not in out + err
    assert "dsv4: rolled back; the controller rolls the pod out (not followed)" in out


def test_apply_restart_asks_the_new_pod_for_one_token_through_a_port_forward(kube: FakeKube, tmp_path: Path) -> None:
    """Ready on a kube host is also kvtui's one-token probe, as on SSH hosts: through ``kubectl
    port-forward`` to the new pod (loopback only); a new pod whose server does not answer is a
    failed boot (not_serving)."""
    _deployment(kube)
    new = "sglang-dsv4-6c7d8e9f0-abcde"
    kube.serve(new, "deepseek-r1")
    kube.on_rollout("Deployment", "sglang-dsv4", _dep_pod(new, "6c7d8e9f0"), "sglang", _boot("0.88"), surge=True,
                    ready_after=0.5)
    code, out, err = _run(kube, tmp_path, "apply", "dsv4", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                          "--timeout", "90")
    assert code == 0, err
    assert "answered a 1-token request" in err
    assert f"{new} 30000 POST /v1/completions" in kube.forwarded()
    assert any(c[4:] == ["port-forward", f"pod/{new}", ":30000", "--address", "127.0.0.1"] for c in kube.calls())
    # the rollback's new pod does not answer: the boot is failed, not ready
    new2 = "sglang-dsv4-5d8f7c9b6-q8w7e"
    kube.serve(new2, None)
    kube.on_rollout("Deployment", "sglang-dsv4", _dep_pod(new2), "sglang", _boot("0.85"), surge=True, ready_after=0.5)
    code, out, err = _run(kube, tmp_path, "rollback", "dsv4", "--restart", "--yes", "--timeout", "20")
    assert code == 1, err
    assert "not_serving" in out + err


# -- the pure parts ---------------------------------------------------------------------------------


def test_deletion_request_end_of_a_pod_and_kubectls_error_line() -> None:
    from kvtui.hosts.kube.state import deletion_requested, kubectl_error, pod_end, split_stamp, successor

    gone = _dep_pod(OLD)
    gone["metadata"].update(deletionTimestamp="2026-12-01T15:30:30Z", deletionGracePeriodSeconds=30)
    got = split_stamp("2026-12-01T15:30:00Z x")
    assert got is not None
    assert deletion_requested(gone) == got[1]
    made = _dep_pod("sglang-dsv4-5d8f7c9b6-7hq4z")
    made["metadata"]["creationTimestamp"] = "2026-12-01T15:30:00Z"  # the request's second
    other = _dep_pod("sglang-dsv4-5d8f7c9b6-older")
    other["metadata"]["creationTimestamp"] = "2026-12-01T15:29:59Z"  # another replica, made before
    assert successor([gone, other, made], gone) is made
    # how it ended: the container's terminated state decides
    cs = gone["status"]["containerStatuses"][0]
    assert pod_end(gone, "sglang") == (True, "deleted")
    cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    assert pod_end(gone, "sglang") == (True, "deleted; container sglang ended Completed (exit 0) after SIGTERM")
    cs["state"] = {"terminated": {"exitCode": 137, "reason": "Error"}}
    assert pod_end(gone, "sglang")[0]
    cs["state"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    assert not pod_end(gone, "sglang")[0]
    cs["state"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    assert pod_end(gone, "sglang") == (False, "container sglang: Error (exit 1)")
    err = ('E1207 15:00:00.123456   12345 memcache.go:265] "Unhandled Error" err="couldn\'t get current server API '
           'group list"\nThe connection to the server 10.0.0.1:6443 was refused - did you specify the right host or '
           'port?\n')
    assert kubectl_error(err).startswith("The connection to the server 10.0.0.1:6443 was refused")
    assert kubectl_error('Error from server (NotFound): pods "x" not found\n') == \
        'Error from server (NotFound): pods "x" not found'


def test_a_stop_record_stops_an_open_boot_and_makes_none_of_idle_lines() -> None:
    from kvtui.engines.exit_record import stop_record

    log = BootLog()  # a next-boot follower: the old server's shutdown, then its pod is gone
    for ln in SHUTDOWN:
        log.feed(LogRecord(ln, None, None, "kube"))
    log.feed(stop_record("pod x is gone; following y, which its controller made in its place; deleted"))
    assert log.tracker.boots == []
    log = BootLog()  # a boot still loading when its pod was deleted: stopped, not a crash
    for ln in NODE0[:10]:
        log.feed(LogRecord(ln, None, None, "kube"))
    log.feed(stop_record("pod x is gone; deleted"))
    assert [(b.status, b.failure) for b in log.tracker.boots] == [(BootStatus.STOPPED, None)]
