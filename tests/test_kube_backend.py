"""``KubeBackend`` against the fake ``kubectl`` first on PATH (issue 15, step 6): the log resumed
across a dropped ``kubectl logs -f`` (0 lost, 0 repeated), a CrashLoopBackOff read as a series of
failed boots (the crashed container's tail from ``--previous``, then how it ended: OOMKilled is
host memory), GPU memory via ``exec nvidia-smi``, the pod state beside the boot, and the
refusals of what is not built (shell commands, edits)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
from kube_support import FakeKube, until

from kvtui.boot import BootStatus, BootTracker
from kvtui.engines.parse import LineParser
from kvtui.hosts.backend import BackendError, LogStart
from kvtui.hosts.kube.backend import KubeBackend
from kvtui.hosts.kube.kubectl_argv import PodRef
from kvtui.hosts.service.model import ServiceError

FIX = Path(__file__).parent / "fixtures"
REF = PodRef("prod-eu", "llm", "r1-0", container="sglang")


def _pod(name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((FIX / "kube" / "pods" / f"{name}.json").read_text())
    return out


def _stamped(lines: list[str], minute: int) -> list[str]:
    return [f"2026-12-01T15:{minute:02d}:{i // 1000:02d}.{i % 1000:03d}Z {ln}" for i, ln in enumerate(lines)]


class Reader:
    """Feeds the backend's records to a parser and a tracker, as every reader of a host does."""

    def __init__(self, backend: KubeBackend, start: LogStart = LogStart.CURRENT_BOOT) -> None:
        self.parser = LineParser()
        self.tracker = BootTracker()
        self.texts: list[str] = []
        self.task = asyncio.create_task(self._run(backend, start))

    async def stop(self, backend: KubeBackend) -> None:
        """Close the backend and end the reader: closing ends the log stream (the task returns), or
        the cancel lands first (a cancel that meets a kubectl call the close just killed may be
        absorbed by it: then the stream ends on the close)."""
        await backend.close()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 10)
        assert self.task.done()

    async def _run(self, backend: KubeBackend, start: LogStart) -> None:
        async for batch in backend.follow_log(start):
            for rec in batch:
                self.texts.append(rec.text)
                for parsed in self.parser.feed(rec):
                    self.tracker.feed(parsed)


def _restarted(pod: dict[str, Any], restarts: int, *, running: bool = True) -> dict[str, Any]:
    """``pod`` after its server container was OOM-killed ``restarts`` times (running again, or
    waiting in CrashLoopBackOff)."""
    out = copy.deepcopy(pod)
    st = out["status"]["containerStatuses"][0]
    st["restartCount"] = restarts
    st["ready"] = False
    st["state"] = ({"running": {"startedAt": "2026-12-01T15:05:00Z"}} if running else
                   {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}})
    st["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                      "startedAt": "2026-12-01T15:00:00Z", "finishedAt": "2026-12-01T15:04:59Z"}}
    return out


async def test_crash_loop_is_a_series_of_failed_boots_and_a_drop_loses_nothing(kube: FakeKube) -> None:
    pod = _pod("running-ready")
    kube.put_pod(pod)
    boot_a = (FIX / "nodes" / "sglang-tp16-node0.log").read_text().splitlines()[:20]  # up to the weights
    boot_b = [ln for ln in (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_text().splitlines() if ln]
    a = _stamped(boot_a, 0)
    b = _stamped(boot_b, 5)
    kube.append_log("r1-0", "sglang", a[:12])
    backend = KubeBackend("r1", REF, retry_s=0.05)
    await backend.start()
    assert backend.status().detail == "pod r1-0: Running, ready"
    reader = Reader(backend)
    try:
        await until(lambda: len(reader.texts) == 12, "the first 12 lines")
        kube.drop("r1-0", "sglang")  # the stream drops; the server goes on
        kube.append_log("r1-0", "sglang", a[12:16])
        await until(lambda: len(reader.texts) == 16, "the lines written during the drop")
        # the stream drops again; meanwhile the container prints its last lines and is OOM-killed,
        # and a new container starts (its lines in a new log; the old one is --previous's)
        kube.drop("r1-0", "sglang")
        kube.append_log("r1-0", "sglang", a[16:])
        kube.put_pod(_restarted(pod, 1))
        kube.restart_container("r1-0", "sglang", b)
        await until(lambda: len(reader.tracker.boots) == 2 and reader.tracker.boots[1].status is BootStatus.FAILED,
                    "the second boot to fail")
    finally:
        await reader.stop(backend)
    boots = reader.tracker.boots
    assert [bt.status for bt in boots] == [BootStatus.FAILED, BootStatus.FAILED]
    first = boots[0].failure
    assert first is not None
    assert "container sglang: OOMKilled [exit 137]: the container hit its memory limit — host memory" in first.message
    second = boots[1].failure
    assert second is not None
    assert second.kind.value == "oom_graph_capture"
    # every line of both containers once, in order (the exit record between them is kvtui's own)
    expected = [ln.split(" ", 1)[1] for ln in a + b]
    assert [t for t in reader.texts if not t.startswith("kvtui: ")] == expected
    assert sum(t.startswith("kvtui: the server process exited") for t in reader.texts) == 1
    assert any(c[:4] == ["--context", "prod-eu", "--namespace", "llm"] and "--previous" in c for c in kube.calls())
    assert any("--since-time" in c for c in kube.calls())


async def test_a_restart_seen_late_and_a_new_log_written_late_lose_nothing(kube: FakeKube) -> None:
    """The container ends (its stream ends with it) while the pod still says it has not restarted;
    then the pod waits in CrashLoopBackOff; then a new container runs but prints nothing for a
    while (kubectl: "is waiting to start"): the backend keeps looking and following, and the new
    container's lines, written late, are its next boot — after exactly one exit record."""
    pod = _pod("running-ready")
    kube.put_pod(pod)
    a = _stamped((FIX / "nodes" / "sglang-tp16-node0.log").read_text().splitlines()[:20], 0)
    b = _stamped([ln for ln in (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_text().splitlines() if ln], 5)
    kube.append_log("r1-0", "sglang", a)
    backend = KubeBackend("r1", REF, retry_s=0.05)
    await backend.start()
    reader = Reader(backend)

    def follows() -> int:
        return sum("--follow" in c for c in kube.calls())

    try:
        await until(lambda: len(reader.texts) == 20, "the first container's lines")
        ended = copy.deepcopy(pod)
        st = ended["status"]["containerStatuses"][0]
        st["ready"] = False
        st["state"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                      "startedAt": "2026-12-01T15:00:00Z", "finishedAt": "2026-12-01T15:04:59Z"}}
        kube.put_pod(ended)
        kube.restart_container("r1-0", "sglang")  # its stream ends; no new log yet
        n = follows()
        await until(lambda: sum("get" in c for c in kube.calls()) >= 4, "a few looks at the ended pod")
        kube.put_pod(_restarted(pod, 1, running=False))  # CrashLoopBackOff
        await until(lambda: any(t.startswith("kvtui: the server process exited") for t in reader.texts),
                    "the exit record")
        kube.put_pod(_restarted(pod, 1))  # the new container runs, silent so far
        await until(lambda: follows() >= n + 3, "a few follows of the silent container")
        assert reader.tracker.boots[-1].status is BootStatus.FAILED
        assert len(reader.tracker.boots) == 1
        kube.append_log("r1-0", "sglang", b)  # late
        await until(lambda: len(reader.tracker.boots) == 2 and reader.tracker.boots[1].status is BootStatus.FAILED,
                    "the new container's boot to fail")
    finally:
        await reader.stop(backend)
    assert [t for t in reader.texts if not t.startswith("kvtui: ")] == [ln.split(" ", 1)[1] for ln in a + b]
    assert sum(t.startswith("kvtui: the server process exited") for t in reader.texts) == 1
    exits = [i for i, t in enumerate(reader.texts) if t.startswith("kvtui: ")]
    assert exits == [20]
    failure = reader.tracker.boots[0].failure
    assert failure is not None
    assert "OOMKilled" in failure.message


async def test_a_container_that_restarts_during_the_back_off_ends_its_boot_first(kube: FakeKube) -> None:
    """The container ends; the pod still says so at the backend's next look (terminated, no
    restart yet); during the back-off the new container starts and prints its whole boot at once.
    The pod is read again before the next stream, so the old boot ends (exit record, OOMKilled)
    before the new container's first line — not after it, failing the wrong boot."""
    pod = _pod("running-ready")
    kube.put_pod(pod)
    a = _stamped((FIX / "nodes" / "sglang-tp16-node0.log").read_text().splitlines()[:20], 0)
    b = _stamped([ln for ln in (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_text().splitlines() if ln], 5)
    kube.append_log("r1-0", "sglang", a)
    backend = KubeBackend("r1", REF, retry_s=0.3)
    await backend.start()
    reader = Reader(backend)
    gets = lambda: sum("get" in c for c in kube.calls())  # noqa: E731
    try:
        await until(lambda: len(reader.texts) == 20, "the first container's lines")
        ended = copy.deepcopy(pod)
        st = ended["status"]["containerStatuses"][0]
        st["ready"] = False
        st["state"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                      "startedAt": "2026-12-01T15:00:00Z", "finishedAt": "2026-12-01T15:04:59Z"}}
        kube.put_pod(ended)
        n = gets()
        kube.restart_container("r1-0", "sglang")  # its stream ends; the pod says "terminated"
        await until(lambda: gets() > n, "the look at the ended pod")
        kube.put_pod(_restarted(pod, 1))  # within the back-off: the new container runs …
        kube.restart_container("r1-0", "sglang", b)  # … and has printed its boot
        await until(lambda: len(reader.tracker.boots) == 2 and reader.tracker.boots[1].status is BootStatus.FAILED,
                    "the new container's boot to fail")
    finally:
        await reader.stop(backend)
    texts = reader.texts
    assert [t for t in texts if not t.startswith("kvtui: ")] == [ln.split(" ", 1)[1] for ln in a + b]
    assert [i for i, t in enumerate(texts) if t.startswith("kvtui: ")] == [20]
    first, second = reader.tracker.boots
    assert first.failure is not None
    assert "OOMKilled" in first.failure.message
    assert second.failure is not None
    assert second.failure.kind.value == "oom_graph_capture"


async def test_next_boot_takes_only_new_lines(kube: FakeKube) -> None:
    kube.put_pod(_pod("running-ready"))
    kube.append_log("r1-0", "sglang", _stamped(["[2026-12-01 15:00:00] old line"], 0))
    backend = KubeBackend("r1", REF, retry_s=0.05)
    await backend.start()
    reader = Reader(backend, LogStart.NEXT_BOOT)
    try:
        # the follow itself, not the `kubectl logs --tail=1` that reads where "now" is on the node: a
        # line written between that call and its read would be taken for the running server's last
        # line (a loaded machine did, once)
        await until(lambda: any("logs" in c and "--follow" in c for c in kube.calls()), "kubectl logs --follow")
        now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 2))
        kube.append_log("r1-0", "sglang", [f"{now}.5Z [x] new line"])
        await until(lambda: len(reader.texts) == 1, "the new line")
    finally:
        await reader.stop(backend)
    assert reader.texts == ["[x] new line"]


async def test_gpu_memory_via_exec_and_what_is_refused(kube: FakeKube) -> None:
    kube.put_pod(_pod("crashloop-oomkilled"))
    (kube.state / "gpu.csv").write_text((FIX / "nvidia-smi-query-8gpu.csv").read_text())
    backend = KubeBackend("r1", REF, gpus=[0, 1, 2, 3], retry_s=0.05)
    await backend.start()
    st = backend.pod_state()
    assert st is not None
    it = backend.gpu_stream(0.05)
    try:
        first = await asyncio.wait_for(anext(it), 10)
        second = await asyncio.wait_for(anext(it), 10)
    finally:
        await it.aclose()
        await backend.close()
    assert [s.index for s in first] == [0, 1, 2, 3]
    assert [s.used_mib for s in second] == [65421, 65409, *[s.used_mib for s in second[2:]]]
    assert any(c[c.index("--") + 1:c.index("--") + 2] == ["nvidia-smi"] for c in kube.calls() if "--" in c)
    with pytest.raises(BackendError, match="runs no shell commands"):
        await backend.run("true")
    # no controller above the pod in the fake: kvtui says it cannot edit what it cannot find
    with pytest.raises(ServiceError, match='kubectl get statefulset/r1: Error from server \\(NotFound\\)'):
        await backend.service_ops().locate("r1", None)  # type: ignore[arg-type]


async def test_an_older_nvidia_smi_is_asked_the_fields_it_knows(kube: FakeKube) -> None:
    kube.put_pod(_pod("crashloop-oomkilled"))
    (kube.state / "gpu.csv").write_text((FIX / "nvidia-smi-query-8gpu.csv").read_text())
    (kube.state / "old-driver").touch()  # refuses power.limit / clocks_throttle_reasons.active
    backend = KubeBackend("r1", REF, gpus=[0, 1], retry_s=0.05)
    await backend.start()
    it = backend.gpu_stream(0.05)
    try:
        first = await asyncio.wait_for(anext(it), 10)
    finally:
        await it.aclose()
        await backend.close()
    assert [s.index for s in first] == [0, 1]
    assert (first[0].power_limit_w, first[0].throttle) == (None, None)
    queries = [a for c in kube.calls() for a in c if a.startswith("--query-gpu=")]
    assert "power.limit" in queries[0]
    assert "power.limit" not in queries[-1]


async def test_a_missing_pod_or_kubectl_is_a_clear_error(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = KubeBackend("r1", PodRef("prod-eu", "llm", "r1-9"))
    with pytest.raises(BackendError, match='pods "r1-9" not found'):
        await backend.start()
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BackendError, match="kubectl not found on PATH"):
        await KubeBackend("r1", REF).start()


# -- the kube host kind, end to end through the CLI ----------------------------------------------

def _cli(kube: FakeKube, tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n')
    env = kube.env()
    env.pop("KVTUI_HOSTS", None)
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    res = subprocess.run([sys.executable, "-m", "kvtui", "--hosts", str(hosts), *argv], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=120, check=False, stdin=subprocess.DEVNULL)
    return res.returncode, res.stdout, res.stderr


def test_wait_on_a_kube_host(kube: FakeKube, tmp_path: Path) -> None:
    kube.put_pod(_pod("running-ready"))
    kube.append_log("r1-0", "sglang", _stamped((FIX / "nodes" / "sglang-tp16-node0.log").read_text().splitlines(), 0))
    code, out, err = _cli(kube, tmp_path, "wait", "r1", "--json", "--timeout", "60")
    assert code == 0, err
    assert json.loads(out)["status"] == "ready"
    assert "r1 (pod r1-0, container sglang)" in err
    # ready is also kvtui's one-token probe, through kubectl port-forward to the pod (issue 25)
    assert "not probed" not in err
    assert "r1-0 30000 POST /v1/completions" in kube.forwarded()


def test_wait_on_a_crash_looping_pod_exits_1(kube: FakeKube, tmp_path: Path) -> None:
    kube.put_pod(_pod("crashloop-oomkilled"))
    oom = [ln for ln in (FIX / "sglang-0.4.10-qwen72b-tp2-capture-oom.log").read_text().splitlines() if ln]
    kube.append_log("r1-0", "sglang", _stamped(oom, 0))
    kube.end("r1-0", "sglang")
    code, out, err = _cli(kube, tmp_path, "wait", "r1", "--json", "--timeout", "60")
    assert code == 1, err
    assert json.loads(out)["failure"]["kind"] == "oom_graph_capture"


def test_apply_on_a_bare_pod_is_refused_with_what_to_do(kube: FakeKube, tmp_path: Path) -> None:
    pod = _pod("running-ready")
    del pod["metadata"]["ownerReferences"]
    kube.put_pod(pod)
    code, _out, err = _cli(kube, tmp_path, "apply", "r1", "--set", "mem-fraction-static=0.9", "--yes")
    assert code == 4, err
    assert ("pod r1-0 has no Deployment, StatefulSet or LeaderWorkerSet above it (pod r1-0): a bare pod's args "
            "cannot change; edit its manifest and recreate it") in err


def test_kube_host_keys_are_checked(tmp_path: Path) -> None:
    from kvtui.config import ConfigError, KubeHost, parse_config

    cfg = parse_config('[hosts.r1]\nkube = "/llm"\nselector = "app=r1"\n', tmp_path / "h.toml")
    host = cfg.host("r1")
    assert isinstance(host, KubeHost)
    assert host.source_label == "pods app=r1"
    with pytest.raises(ConfigError) as exc:
        parse_config('[hosts.r1]\nkube = "ctx/llm/r1-0"\nunit = "x"\n[hosts.r2]\nssh = "a"\nunit = "u"\n'
                     'selector = "app=r1"\n[hosts.r3]\nkube = "ctx/llm/R1"\n', tmp_path / "h.toml")
    text = str(exc.value)
    assert '[hosts.r1] unit = "x": not for kube hosts' in text
    assert '[hosts.r2] selector = "app=r1": only for kube hosts' in text
    assert ('[hosts.r3] kube = "ctx/llm/R1": expected a pod name (lower-case letters, digits, \'-\' and \'.\'), '
            'got "R1"') in text


def test_a_deployment_of_two_pods_waits_for_both(kube: FakeKube, tmp_path: Path) -> None:
    """An LWS-style pair (leader r1-0, worker r1-0-1) as a [deployments.NAME] of two kube hosts:
    the merged TP16 boot is ready when both pods' logs say so."""
    import subprocess
    import sys

    for pod_fixture, log in (("lws-leader", "sglang-tp16-node0.log"), ("lws-worker-1", "sglang-tp16-node1.log")):
        pod = _pod(pod_fixture)
        kube.put_pod(pod)
        kube.append_log(pod["metadata"]["name"], "sglang",
                        _stamped((FIX / "nodes" / log).read_text().splitlines(), 0))
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[hosts.leader]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n'
                     '[hosts.worker]\nkube = "prod-eu/llm/r1-0-1"\ncontainer = "sglang"\n'
                     '[deployments.r1]\nnodes = ["leader", "worker"]\n')
    env = kube.env()
    env.pop("KVTUI_HOSTS", None)
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    res = subprocess.run([sys.executable, "-m", "kvtui", "--hosts", str(hosts), "wait", "r1", "--json",
                          "--timeout", "60"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(n["name"], n["node_rank"]) for n in doc["nodes"]] == [("leader", 0), ("worker", 1)]
    assert [r for r in doc["ranks"] if r.startswith("TP")] == [f"TP{i}" for i in range(16)]


def test_a_pod_that_cannot_start_is_named_by_the_hang_diagnosis(kube: FakeKube, tmp_path: Path) -> None:
    """The worker pod of the pair is stuck in ImagePullBackOff (no log at all) while the leader waits
    at distributed init: the wait names the worker and says why its pod does not run."""
    import subprocess
    import sys

    leader = _pod("lws-leader")
    kube.put_pod(leader)
    kube.append_log("r1-0", "sglang", _stamped((FIX / "nodes" / "sglang-tp16-stall-node0.log").read_text()
                                               .splitlines(), 0))
    worker = _pod("image-pull-backoff")
    worker["metadata"]["name"] = "r1-0-1"
    kube.put_pod(worker)
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[hosts.leader]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n'
                     '[hosts.worker]\nkube = "prod-eu/llm/r1-0-1"\ncontainer = "sglang"\n'
                     '[deployments.r1]\nnodes = ["leader", "worker"]\nhang_seconds = 2\n')
    env = kube.env()
    env.pop("KVTUI_HOSTS", None)
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    res = subprocess.run([sys.executable, "-m", "kvtui", "--hosts", str(hosts), "wait", "r1", "--timeout", "60"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert res.returncode == 1, res.stderr
    assert "hung: node 1 (worker) has not started (no boot in its log); node 0 (leader) waiting" in res.stderr
    assert ('  - node 1 (worker): its pod is not running (ImagePullBackOff (Back-off pulling image '
            '"lmsysorg/sglang:v0.5.10"))') in res.stderr
