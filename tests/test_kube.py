"""Kubernetes seams (issue 15, step 6): every kubectl argv (exact), the pod state in words, the
GitOps owners, the args' patch paths, and the log resume, also against a fake ``kubectl`` first on
PATH that serves fixture state in the Kubernetes API's JSON shapes (``tests/kube_support.py``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kube_support import FakeKube

from kvtui import flags as fl
from kvtui.gpu import QUERY_GPU_FIELD_NAMES, parse_query_gpu_csv
from kvtui.hosts.kube import kubectl_argv as K
from kvtui.hosts.kube.state import (
    ArgsError,
    ArgsSite,
    EnvSite,
    LogResume,
    args_text,
    args_values,
    chart_patch,
    container_args,
    container_env,
    controller_of,
    edit_env,
    env_patch_ops,
    gitops_manager,
    node_order,
    patch_ops,
    pod_state,
    split_stamp,
)

FIX = Path(__file__).parent / "fixtures" / "kube"
REF = K.PodRef("prod-eu", "llm", "r1-0", container="sglang")


def _pod(name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((FIX / "pods" / f"{name}.json").read_text())
    return out


def _obj(name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((FIX / "objects" / f"{name}.json").read_text())
    return out


# -- the argv, exactly ----------------------------------------------------------------------------

def test_get_pod_argv() -> None:
    assert K.get_pod(REF, "r1-0") == ["kubectl", "--context", "prod-eu", "--namespace", "llm", "get", "pod", "r1-0",
                                      "--output", "json"]


def test_current_context_is_left_to_kubectl() -> None:
    assert K.get_pod(K.PodRef(None, "llm"), "r1-0")[:4] == ["kubectl", "--namespace", "llm", "get"]


def test_list_pods_argv() -> None:
    ref = K.PodRef("prod-eu", "llm", selector="leaderworkerset.sigs.k8s.io/name=r1")
    assert K.list_pods(ref) == ["kubectl", "--context", "prod-eu", "--namespace", "llm", "get", "pods", "--selector",
                                "leaderworkerset.sigs.k8s.io/name=r1", "--output", "json"]


def test_logs_argv() -> None:
    assert K.logs(REF, "r1-0", follow=True, since_time="2026-12-01T15:30:01.9Z") == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "logs", "r1-0", "--container", "sglang",
        "--timestamps", "--follow", "--since-time", "2026-12-01T15:30:01.9Z"]
    assert K.logs(REF, "r1-0", previous=True) == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "logs", "r1-0", "--container", "sglang",
        "--timestamps", "--previous"]


def test_logs_argv_head_and_tail() -> None:
    assert K.logs(REF, "r1-0", limit_bytes=32 << 20)[-2:] == ["--timestamps", "--limit-bytes=33554432"]
    assert K.logs(REF, "r1-0", follow=True, tail=10_000)[-3:] == ["--timestamps", "--follow", "--tail=10000"]


def test_exec_gpu_query_argv() -> None:
    assert K.exec_gpu_query(REF, "r1-0", ["index", "memory.used"], interval_ms=1000) == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "exec", "r1-0", "--container", "sglang", "--",
        "nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits", "-lms", "1000"]


def test_get_object_patch_and_rollout_argv() -> None:
    assert K.get_object(REF, "Deployment", "r1") == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "get", "Deployment", "r1", "--output", "json"]
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": ["a", "b"]}]
    assert K.patch_json(REF, "Deployment", "r1", patch, dry_run=True) == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "patch", "Deployment", "r1", "--type", "json",
        "--patch", '[{"op":"replace","path":"/spec/template/spec/containers/0/args","value":["a","b"]}]',
        "--dry-run=server", "--output", "json"]
    assert K.rollout_status(REF, "StatefulSet", "r1", timeout_s=600) == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "rollout", "status", "statefulset/r1",
        "--timeout=600s"]
    assert K.patch_json(REF, "StatefulSet", "r1", patch, dry_run=False)[-3:] == [
        '[{"op":"replace","path":"/spec/template/spec/containers/0/args","value":["a","b"]}]', "--output", "json"]
    assert K.rollout_restart(REF, "LeaderWorkerSet", "r1") == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "rollout", "restart", "leaderworkerset/r1"]
    with pytest.raises(K.KubeRefError, match="expected a resource kind"):
        K.rollout_restart(REF, "-x", "r1")


def _site(args: tuple[str, ...], command: tuple[str, ...] = ()) -> ArgsSite:
    return ArgsSite("/spec/template/spec/containers/0/args", args, command)


def test_args_as_text_and_back() -> None:
    # exec form: the words, shell-quoted; the edit comes back as args (the command kept)
    site = _site(("-m", "sglang.launch_server", "--model-path", "/m 1", "--mem-fraction-static", "0.85"),
                 ("python3",))
    at = args_text(site)
    assert at.text == "python3 -m sglang.launch_server --model-path '/m 1' --mem-fraction-static 0.85"
    new = fl.apply_edits(at.text, "script", fl.parse_edit_args(["mem-fraction-static=0.9"], [])).new_text
    assert args_values(at, new) == (("python3",), ("-m", "sglang.launch_server", "--model-path", "/m 1",
                                                   "--mem-fraction-static", "0.9"))
    assert patch_ops(site, *args_values(at, new)) == [
        {"op": "test", "path": "/spec/template/spec/containers/0/args", "value": list(site.args)},
        {"op": "replace", "path": "/spec/template/spec/containers/0/args",
         "value": ["-m", "sglang.launch_server", "--model-path", "/m 1", "--mem-fraction-static", "0.9"]}]
    # everything in command: command changes
    whole = _site((), ("python3", "-m", "sglang.launch_server", "--tp", "8"))
    at = args_text(whole)
    got = args_values(at, at.text + " --mem-fraction-static 0.8")
    assert got == (("python3", "-m", "sglang.launch_server", "--tp", "8", "--mem-fraction-static", "0.8"), ())
    assert [op["path"] for op in patch_ops(whole, *got)] == ["/spec/template/spec/containers/0/command"] * 2
    # sh -c: the script is the text; it is replaced in place
    script = "export NCCL_DEBUG=INFO\nexec python3 -m sglang.launch_server --tp 8 --mem-fraction-static 0.85\n"
    shell = _site((script,), ("/bin/sh", "-c"))
    at = args_text(shell)
    assert at.text == script
    assert args_values(at, script.replace("0.85", "0.8")) == (("/bin/sh", "-c"), (script.replace("0.85", "0.8"),))
    # an edit that would touch the command's own words is refused
    with pytest.raises(ArgsError, match="would change the container's command"):
        args_values(args_text(site), "python3.11 -m sglang.launch_server")
    with pytest.raises(ArgsError, match="neither command nor args"):
        args_text(_site(()))


def test_chart_patch_names_the_template_and_the_new_args() -> None:
    site = _site(("--tp", "8"))
    assert chart_patch("Deployment", "r1", "sglang", [(site, (), ("--tp", "16"))]) == (
        "# Deployment/r1: commit this to the chart or repository that renders it\n"
        "# spec.template.spec.containers[name=sglang]\n"
        'args:\n- "--tp"\n- "16"')


@pytest.mark.parametrize(("text", "selector", "expected"), [
    ("prod-eu/llm/r1-0", None, K.PodRef("prod-eu", "llm", "r1-0")),
    ("/llm/r1-0", None, K.PodRef(None, "llm", "r1-0")),
    ("arn:aws:eks:eu-west-1:123456789012:cluster/gpu/llm/r1-0", None,
     K.PodRef("arn:aws:eks:eu-west-1:123456789012:cluster/gpu", "llm", "r1-0")),
    ("prod-eu/llm", "app=r1", K.PodRef("prod-eu", "llm", selector="app=r1")),
])
def test_parse_target(text: str, selector: str | None, expected: K.PodRef) -> None:
    assert K.parse_target(text, selector=selector) == expected


@pytest.mark.parametrize(("text", "selector", "fragment"), [
    ("llm/r1-0", None, 'expected "CONTEXT/NAMESPACE/POD"'),
    ("ctx/llm/-rf", None, 'expected a pod name (lower-case letters, digits, \'-\' and \'.\'), got "-rf"'),
    ("ctx/LLM/r1-0", None, "expected a namespace name"),
    ("ctx/llm", "--all", 'expected a label selector like "app=sglang,role=leader", got "--all"'),
])
def test_bad_targets_say_what_was_expected(text: str, selector: str | None, fragment: str) -> None:
    with pytest.raises(K.KubeRefError, match=None) as exc:
        K.parse_target(text, selector=selector)
    assert fragment in str(exc.value)


# -- the pod's state in words -------------------------------------------------------------------

@pytest.mark.parametrize(("fixture", "summary", "stuck"), [
    ("pending-unschedulable", "Pending: unschedulable (0/4 nodes are available: 4 Insufficient nvidia.com/gpu. "
     "preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod.)", True),
    ("image-pull-backoff", 'ImagePullBackOff (Back-off pulling image "lmsysorg/sglang:v0.5.10")', True),
    ("container-creating", "ContainerCreating", False),
    ("running-not-ready", "Running, not ready (readiness probe)", False),
    ("running-ready", "Running, ready", False),
    ("crashloop-oomkilled", "CrashLoopBackOff (back-off 5m0s restarting failed container=sglang "
     "pod=r1-0_llm(3f1c)), 5 restarts, last: OOMKilled (exit 137): the container hit its memory limit — host "
     "memory (the pod's resources.limits.memory), not GPU memory", True),
])
def test_pod_state_summary(fixture: str, summary: str, stuck: bool) -> None:
    st = pod_state(_pod(fixture))
    assert st.summary() == summary
    assert st.stuck is stuck
    assert st.container in ("sglang", None)


def test_crash_loop_facts() -> None:
    st = pod_state(_pod("crashloop-oomkilled"), "sglang")
    assert st.restarts == 5
    assert st.last is not None
    assert st.last.oom_killed
    assert st.last.exit_code == 137


def test_leader_first_and_controllers() -> None:
    pods = node_order([_pod("lws-worker-1"), _pod("lws-leader")])
    assert [p["metadata"]["name"] for p in pods] == ["r1-0", "r1-0-1"]
    assert controller_of(_pod("running-ready")) == ("StatefulSet", "r1")


@pytest.mark.parametrize(("fixture", "tool", "evidence", "release"), [
    ("deployment-helm", "Helm", "app.kubernetes.io/managed-by: Helm", "r1"),
    ("deployment-argocd", "Argo CD", "argocd.argoproj.io/tracking-id: llm-serving:apps/Deployment:llm/r1", None),
    ("statefulset-flux", "Flux", "kustomize.toolkit.fluxcd.io/name: llm-serving", "llm-serving"),
])
def test_gitops_managers_are_recognised(fixture: str, tool: str, evidence: str, release: str | None) -> None:
    m = gitops_manager(_obj(fixture))
    assert m is not None
    assert (m.tool, m.evidence, m.release) == (tool, evidence, release)


def test_a_plain_object_has_no_manager() -> None:
    assert gitops_manager(_obj("statefulset-plain")) is None


def test_args_sites() -> None:
    sites = container_args(_obj("leaderworkerset"), "sglang")
    assert [s.path for s in sites] == [
        "/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/args",
        "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/args"]
    assert sites[1].args[-5:] == ("2", "--node-rank", "1", "--dist-init-addr", "$(LWS_LEADER_ADDRESS):5000")
    plain = container_args(_obj("statefulset-plain"), None)
    assert [s.path for s in plain] == ["/spec/template/spec/containers/0/args"]



def test_env_list_edits_and_their_patch_argv() -> None:
    path = "/spec/template/spec/containers/0/env"
    site = EnvSite(path, ({"name": "NCCL_DEBUG", "value": "WARN"},
                          {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}))
    entries, changes = edit_env(site, [("NCCL_DEBUG", "INFO"), ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")])
    assert entries == [{"name": "NCCL_DEBUG", "value": "INFO"}, dict(site.entries[1]),
                       {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]
    assert [(c.name, c.action, c.old, c.new, c.entry) for c in changes] == [
        ("NCCL_DEBUG", "set", "WARN", "INFO", 1),
        ("PYTORCH_CUDA_ALLOC_CONF", "add", None, "expandable_segments:True", 3)]
    ops = env_patch_ops(site, entries)
    assert K.patch_json(REF, "StatefulSet", "r1", ops, dry_run=True) == [
        "kubectl", "--context", "prod-eu", "--namespace", "llm", "patch", "StatefulSet", "r1", "--type", "json",
        "--patch", '[{"op":"test","path":"/spec/template/spec/containers/0/env","value":[{"name":"NCCL_DEBUG",'
        '"value":"WARN"},{"name":"HF_TOKEN","valueFrom":{"secretKeyRef":{"name":"hf","key":"token"}}}]},'
        '{"op":"replace","path":"/spec/template/spec/containers/0/env","value":[{"name":"NCCL_DEBUG","value":"INFO"},'
        '{"name":"HF_TOKEN","valueFrom":{"secretKeyRef":{"name":"hf","key":"token"}}},'
        '{"name":"PYTORCH_CUDA_ALLOC_CONF","value":"expandable_segments:True"}]}]',
        "--dry-run=server", "--output", "json"]
    # removed: every entry of the name; unchanged: no operation
    gone, changes = edit_env(site, [("NCCL_DEBUG", None)])
    assert gone == [dict(site.entries[1])]
    assert changes[0].action == "remove"
    assert env_patch_ops(site, edit_env(site, [("NCCL_DEBUG", "WARN")])[0]) == []
    # a container without env gets the list added (a test on a missing path would fail)
    assert env_patch_ops(EnvSite(path, ()), [{"name": "A", "value": "1"}]) == [
        {"op": "add", "path": path, "value": [{"name": "A", "value": "1"}]}]
    # refused: a valueFrom (the manifest's business), a variable the list does not set
    with pytest.raises(ArgsError, match=r"HF_TOKEN comes from secretKeyRef hf/token \(valueFrom\)"):
        edit_env(site, [("HF_TOKEN", "x")])
    with pytest.raises(ArgsError, match=r"--unsetenv NOPE: NOPE is not in the container's env list \(its envFrom"):
        edit_env(EnvSite(path, (), from_sources=True), [("NOPE", None)])
    # every pod template's env, in the args' order
    assert [s.path for s in container_env(_obj("leaderworkerset"), "sglang")] == [
        "/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/env",
        "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/env"]

# -- the log resume -----------------------------------------------------------------------------

def test_split_stamp_sorts_trimmed_fractions() -> None:
    a = split_stamp("2026-12-01T15:30:01.5Z x")
    b = split_stamp("2026-12-01T15:30:01.45Z y")
    assert a is not None
    assert b is not None
    assert b[1] < a[1]
    assert a[0] == "2026-12-01T15:30:01.5Z"
    assert a[2] == "x"


def test_resume_skips_what_was_taken_even_repeated_lines() -> None:
    r = LogResume()
    first = ["2026-12-01T15:30:00.1Z a", "2026-12-01T15:30:01.5Z c", "2026-12-01T15:30:01.9Z d",
             "2026-12-01T15:30:01.9Z d"]
    got = [r.accept(x) for x in first]
    assert [g[1] for g in got if g] == ["a", "c", "d", "d"]
    assert r.since_time() == "2026-12-01T15:30:01.9Z"
    r.resumed()
    again = ["2026-12-01T15:30:01.5Z c", "2026-12-01T15:30:01.9Z d", "2026-12-01T15:30:01.9Z d",
             "2026-12-01T15:30:01.9Z d", "2026-12-01T15:30:02Z e"]
    assert [g[1] for x in again if (g := r.accept(x))] == ["d", "e"]  # a third d is new


# -- against the fake kubectl -------------------------------------------------------------------

@pytest.fixture
def kube(tmp_path: Path) -> FakeKube:
    return FakeKube.create(tmp_path / "kube")


def _run(kube: FakeKube, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=kube.env(), timeout=30, check=False)


def test_fake_kubectl_serves_pods_and_groups(kube: FakeKube) -> None:
    kube.put_pod(_pod("lws-leader"))
    kube.put_pod(_pod("lws-worker-1"))
    ref = K.PodRef("prod-eu", "llm", selector="leaderworkerset.sigs.k8s.io/name=r1", container="sglang")
    res = _run(kube, K.list_pods(ref))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kind"] == "List"
    assert [p["metadata"]["name"] for p in node_order(doc["items"])] == ["r1-0", "r1-0-1"]
    one = _run(kube, K.get_pod(ref, "r1-0-1"))
    assert pod_state(json.loads(one.stdout), "sglang").summary() == "Running, ready"
    missing = _run(kube, K.get_pod(ref, "r1-9"))
    assert missing.returncode == 1
    assert 'Error from server (NotFound): pods "r1-9" not found' in missing.stderr
    assert kube.calls()[0] == K.list_pods(ref)[1:]


def test_logs_resume_across_a_dropped_follow_without_loss_or_repeat(kube: FakeKube) -> None:
    before = ["2026-12-01T15:30:00.1Z [2026-12-01 15:30:00] server_args=ServerArgs(tp_size=16)",
              "2026-12-01T15:30:01.5Z [2026-12-01 15:30:01 TP0] Init torch distributed begin.",
              "2026-12-01T15:30:01.9Z [2026-12-01 15:30:01 TP1] Init torch distributed begin.",
              "2026-12-01T15:30:01.9Z [2026-12-01 15:30:01 TP1] Init torch distributed begin."]
    after = ["2026-12-01T15:30:01.9Z [2026-12-01 15:30:01 TP1] Init torch distributed begin.",
             "2026-12-01T15:30:02Z [2026-12-01 15:30:02 TP0] Init torch distributed ends."]
    kube.append_log("r1-0", "sglang", before)
    resume = LogResume()
    taken: list[str] = []
    proc = subprocess.Popen(K.logs(REF, "r1-0", follow=True), stdout=subprocess.PIPE, text=True, env=kube.env())
    assert proc.stdout is not None
    for _ in before:
        got = resume.accept(proc.stdout.readline().rstrip("\n"))
        if got:
            taken.append(got[1])
    kube.drop("r1-0", "sglang")  # the stream drops (an API server restart, a network cut)
    assert proc.wait(timeout=10) == 1
    kube.append_log("r1-0", "sglang", after)  # written while nobody followed
    kube.end("r1-0", "sglang")
    argv = K.logs(REF, "r1-0", follow=True, since_time=resume.since_time())
    assert argv[-2:] == ["--since-time", "2026-12-01T15:30:01.9Z"]
    resume.resumed()
    res = _run(kube, argv)
    for line in res.stdout.splitlines():
        got = resume.accept(line)
        if got:
            taken.append(got[1])
    texts = [ln.split(" ", 1)[1] for ln in before + after]
    assert taken == texts  # every line once, in order: the resent second dropped, the new third TP1 line kept


def test_previous_container_log_and_gpu_exec(kube: FakeKube) -> None:
    kube.put_pod(_pod("crashloop-oomkilled"))
    kube.append_log("r1-0", "sglang", ["2026-12-01T15:21:39Z [2026-12-01 15:21:39 TP3] Load weight begin. "
                                        "avail mem=93.41 GB"], previous=True)
    prev = _run(kube, K.logs(REF, "r1-0", previous=True))
    assert prev.returncode == 0
    assert "Load weight begin" in prev.stdout
    none = _run(kube, K.logs(K.PodRef("prod-eu", "llm", container="sglang"), "r1-1", previous=True))
    assert none.returncode == 1
    (kube.state / "gpu.csv").write_text((FIX / "nvidia-smi-query-8gpu.csv").read_text())
    res = _run(kube, K.exec_gpu_query(REF, "r1-0", QUERY_GPU_FIELD_NAMES))
    samples = parse_query_gpu_csv(res.stdout, 0.0)
    assert [s.index for s in samples] == list(range(8))
    assert samples[0].used_mib == 65421


def _raw(kube: FakeKube, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["kubectl", "--namespace", "llm", *argv], capture_output=True, env=kube.env(), timeout=30,
                          check=False)


def test_fake_kubectl_logs_tail_limit_bytes_and_since_time_as_the_kubelet(kube: FakeKube) -> None:
    """Fails on the old fake: it ignored ``--tail`` and ``--limit-bytes`` (the whole log came)."""
    lines = ["2026-12-01T15:00:00.5Z a", "2026-12-01T15:00:01Z bb", "2026-12-01T15:00:01.25Z ccc",
             "2026-12-01T15:00:02.000000001Z dddd", "2026-12-01T15:00:03Z eeeee"]
    kube.append_log("r1-0", "main", lines)
    whole = "".join(ln + "\n" for ln in lines).encode()
    # --tail=N: the last N lines; 0: none; more than there are: all
    assert _raw(kube, "logs", "r1-0", "--timestamps", "--tail=2").stdout == "".join(
        ln + "\n" for ln in lines[-2:]).encode()
    assert _raw(kube, "logs", "r1-0", "--timestamps", "--tail", "0").stdout == b""
    assert _raw(kube, "logs", "r1-0", "--timestamps", "--tail=99").stdout == whole
    # --limit-bytes=N: the first N bytes, stamps included, the last line cut
    assert _raw(kube, "logs", "r1-0", "--timestamps", "--limit-bytes=30").stdout == whole[:30]
    assert _raw(kube, "logs", "r1-0", "--limit-bytes=4").stdout == b"a\nbb"  # the text only: no stamps
    # --since-time: the API's sinceTime is whole seconds: every line of that second comes
    assert _raw(kube, "logs", "r1-0", "--timestamps", "--since-time", "2026-12-01T15:00:01.9Z").stdout == "".join(
        ln + "\n" for ln in lines[1:]).encode()
    # --tail first (the kubelet seeks to the last N lines), then --since-time filters those
    assert _raw(kube, "logs", "r1-0", "--tail=3", "--since-time=2026-12-01T15:00:02Z").stdout == b"dddd\neeeee\n"
    assert _raw(kube, "logs", "r1-0", "--tail=1", "--since-time=2026-12-01T15:00:00Z").stdout == b"eeeee\n"
    # the bytes each run served are counted (what tests/test_kube_uptime.py bounds)
    assert kube.served() > 0
