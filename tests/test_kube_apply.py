"""Kube apply (issue 15): the edit goes into the owning controller's container args — a JSON patch
planned with a server-side dry run (the plan's diff), the previous args saved (rollback restores
them), the rollout followed and the new pod's boot checked like a restart's; objects that Helm,
Argo CD or Flux manage are refused unless ``--force``, with the change to commit to the chart.
Against the fake ``kubectl`` first on PATH (tests/kube_support.py)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kube_support import FakeKube

FIX = Path(__file__).parent / "fixtures"
NODE0 = (FIX / "nodes" / "sglang-tp16-node0.log").read_text().splitlines()


def _json(path: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(path.read_text())
    return out


def _boot(fraction: str) -> list[str]:
    """The fake engine's boot with its argument dump saying ``mem_fraction_static=fraction``."""
    return [ln.replace("mem_fraction_static=0.88", f"mem_fraction_static={fraction}") for ln in NODE0]


def _stamped(lines: list[str]) -> list[str]:
    return [f"2026-12-01T15:00:00.{i:03d}Z {ln}" for i, ln in enumerate(lines)]


@pytest.fixture
def kube(tmp_path: Path) -> FakeKube:
    k = FakeKube.create(tmp_path / "kube")
    k.put_pod(_json(FIX / "kube" / "pods" / "running-ready.json"))
    k.append_log("r1-0", "sglang", _stamped(_boot("0.85")))
    return k


def _cli(kube: FakeKube, tmp_path: Path, *argv: str, hosts: str | None = None) -> tuple[int, str, str]:
    path = tmp_path / "hosts.toml"
    path.write_text(hosts or '[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n')
    env = kube.env()
    env.pop("KVTUI_HOSTS", None)
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    res = subprocess.run([sys.executable, "-m", "kvtui", "--hosts", str(path), *argv], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=180, check=False, stdin=subprocess.DEVNULL)
    return res.returncode, res.stdout, res.stderr


def _rolled_pod() -> dict[str, Any]:
    pod = copy.deepcopy(_json(FIX / "kube" / "pods" / "running-ready.json"))
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-12-01T16:00:00Z"}}
    return pod


def _calls(kube: FakeKube, verb: str) -> list[list[str]]:
    return [c for c in kube.calls() if verb in c[:6]]


def _sts_args(kube: FakeKube, name: str = "r1", kind: str = "statefulset") -> list[list[str]]:
    obj = _json(kube.state / "objects" / kind / f"{name}.json")
    from kvtui.hosts.kube.state import container_args

    return [list(s.args) for s in container_args(obj, "sglang")]


def test_apply_patches_the_statefulset_follows_the_rollout_and_rollback_restores(kube: FakeKube,
                                                                                   tmp_path: Path) -> None:
    kube.put_object(_json(FIX / "kube" / "objects" / "statefulset-plain.json"))
    before = _sts_args(kube)
    kube.on_rollout("StatefulSet", "r1", _rolled_pod(), "sglang", _boot("0.88"))
    code, out, err = _cli(kube, tmp_path, "apply", "r1", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                          "--timeout", "60")
    assert code == 0, err
    # the plan's diff is the server-side dry run's answer
    assert ("--- statefulset/r1 /spec/template/spec/containers/0 (now)\n"
            "+++ statefulset/r1 /spec/template/spec/containers/0 (server-side dry run)") in out
    assert '-- "0.85"\n+- "0.88"' in out
    assert "r1: applied; the new boot is ready" in out
    assert "the new boot's own argument dump carries the edits" in err
    patches = _calls(kube, "patch")
    assert [("--dry-run=server" in c) for c in patches] == [True, False]  # dry run first, then the patch
    assert patches[1][:6] == ["--context", "prod-eu", "--namespace", "llm", "patch", "StatefulSet"]
    ops = json.loads(patches[1][patches[1].index("--patch") + 1])
    assert [op["op"] for op in ops] == ["test", "replace"]
    assert ops[0]["value"] == before[0]
    assert _sts_args(kube) == [[*before[0][:-1], "0.88"]]
    assert any(c[4:7] == ["rollout", "status", "statefulset/r1"] for c in kube.calls())
    # the backup: the previous args, in the state directory
    backups = list((tmp_path / "state" / "kvtui" / "kube-backups").iterdir())
    assert len(backups) == 1
    saved = _json(backups[0])
    assert saved["object"] == "StatefulSet/r1"
    assert saved["sites"] == [{"path": "/spec/template/spec/containers/0/args", "command": [], "args": before[0],
                              "env": []}]
    # rollback: those args back, the rollout and the new pod's boot followed again
    kube.on_rollout("StatefulSet", "r1", _rolled_pod(), "sglang", _boot("0.85"))
    code, out, err = _cli(kube, tmp_path, "rollback", "r1", "--restart", "--yes", "--timeout", "60")
    assert code == 0, err
    assert _sts_args(kube) == before
    assert "r1: rolled back; the boot is ready" in out
    # the args as they were before the rollback are kept too (a pre-rollback copy)
    assert len(list((tmp_path / "state" / "kvtui" / "kube-backups").iterdir())) == 2


def test_an_edit_the_new_pod_does_not_run_is_not_in_effect(kube: FakeKube, tmp_path: Path) -> None:
    kube.put_object(_json(FIX / "kube" / "objects" / "statefulset-plain.json"))
    kube.on_rollout("StatefulSet", "r1", _rolled_pod(), "sglang", _boot("0.85"))  # the old value again
    code, _out, err = _cli(kube, tmp_path, "apply", "r1", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                           "--timeout", "60")
    assert code == 1, err
    assert "edit not in effect: " in err
    assert "0.85" in err


def _deployment_pod(kube: FakeKube, fixture: str) -> None:
    """The pod belongs to ReplicaSet r1-5d8f, which belongs to Deployment r1 (from ``fixture``)."""
    pod = _json(FIX / "kube" / "pods" / "running-ready.json")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r1-5d8f",
                                           "uid": "u1", "controller": True}]
    kube.put_pod(pod)
    kube.put_object({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                     "metadata": {"name": "r1-5d8f", "namespace": "llm",
                                  "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "r1",
                                                       "uid": "u2", "controller": True}]}})
    kube.put_object(_json(FIX / "kube" / "objects" / fixture))


@pytest.mark.parametrize(("fixture", "kind", "words"), [
    ("deployment-argocd.json", "deployment", "Deployment/r1 is managed by Argo CD (argocd.argoproj.io/tracking-id"),
    ("deployment-helm.json", "deployment", "Deployment/r1 is managed by Helm (release r1) "
                                           "(app.kubernetes.io/managed-by: Helm)"),
    ("statefulset-flux.json", "statefulset", "StatefulSet/r1 is managed by Flux (release llm-serving) "
                                             "(kustomize.toolkit.fluxcd.io/name: llm-serving)"),
])
def test_a_gitops_managed_object_is_refused_with_the_change_to_commit(kube: FakeKube, tmp_path: Path, fixture: str,
                                                                      kind: str, words: str) -> None:
    if kind == "deployment":
        _deployment_pod(kube, fixture)
    else:
        kube.put_object(_json(FIX / "kube" / "objects" / fixture))
    before = _sts_args(kube, kind=kind)
    code, _out, err = _cli(kube, tmp_path, "apply", "r1", "--set", "mem-fraction-static=0.88", "--restart", "--yes",
                           "--timeout", "60")
    assert code == 4, err
    assert words in err
    assert "would put the old args back at its next sync, silently" in err
    # the change to commit instead: the template's path and the new args as YAML
    assert "# spec.template.spec.containers[name=sglang]\nargs:\n- \"python3\"" in err
    assert '- "--mem-fraction-static"\n- "0.88"' in err
    assert _sts_args(kube, kind=kind) == before
    assert not [c for c in _calls(kube, "patch") if "--dry-run=server" not in c]


def test_force_patches_a_managed_object_and_without_restart_says_it_rolls_anyway(kube: FakeKube,
                                                                                   tmp_path: Path) -> None:
    _deployment_pod(kube, "deployment-argocd.json")
    code, out, err = _cli(kube, tmp_path, "apply", "r1", "--set", "mem-fraction-static=0.88", "--yes", "--force")
    assert code == 0, err
    assert "Deployment/r1 rolls the pod out as soon as it is patched (without --restart kvtui does not follow it)" \
        in out
    assert _sts_args(kube, kind="deployment")[0][-1] == "0.88"
    assert "r1: written" in out


def test_both_templates_of_a_leaderworkerset_get_the_edit(kube: FakeKube, tmp_path: Path) -> None:
    """The leader pod belongs to StatefulSet r1, which belongs to LeaderWorkerSet r1: its leader and
    worker templates both change (each keeps its own --node-rank)."""
    kube.put_pod(_json(FIX / "kube" / "pods" / "lws-leader.json"))
    kube.put_object({"apiVersion": "apps/v1", "kind": "StatefulSet",
                     "metadata": {"name": "r1", "namespace": "llm",
                                  "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                                       "kind": "LeaderWorkerSet", "name": "r1", "uid": "u3",
                                                       "controller": True}]},
                     "spec": {"template": {"spec": {"containers": [{"name": "sglang", "args": ["stale"]}]}}}})
    kube.put_object(_json(FIX / "kube" / "objects" / "leaderworkerset.json"))
    code, out, err = _cli(kube, tmp_path, "apply", "r1", "--set", "mem-fraction-static=0.88", "--yes")
    assert code == 0, err
    args = _sts_args(kube, kind="leaderworkerset")
    assert [a[a.index("--mem-fraction-static") + 1] for a in args] == ["0.88", "0.88"]
    assert [a[a.index("--node-rank") + 1] for a in args] == ["0", "1"]
    assert "--- leaderworkerset/r1 /spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0 (now)" in out
    assert "+++ leaderworkerset/r1 /spec/leaderWorkerTemplate/workerTemplate/spec/containers/0 (server-side dry run)" \
        in out
    assert out.count('-- "0.85"\n+- "0.88"') == 2
    assert "(2 pod templates;" in out


def test_an_admission_refusal_at_the_dry_run_refuses_the_plan(kube: FakeKube, tmp_path: Path) -> None:
    kube.put_object(_json(FIX / "kube" / "objects" / "statefulset-plain.json"))
    (kube.state / "refuse-patch").write_text('Error from server (Forbidden): admission webhook "policy.example" '
                                             "denied the request: args are frozen in prod")
    code, _out, err = _cli(kube, tmp_path, "apply", "r1", "--set", "mem-fraction-static=0.88", "--yes", "--force")
    assert code == 4, err
    assert ("refused: the API server refused the patch (server-side dry run): Error from server (Forbidden): "
            'admission webhook "policy.example" denied the request') in err


async def test_args_changed_between_plan_and_write_are_refused(kube: FakeKube, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtui import changes
    from kvtui.config import parse_config
    from kvtui.flags import parse_edit_args
    from kvtui.hosts import service
    from kvtui.hosts.factory import make_backend

    monkeypatch.setenv("PATH", kube.env()["PATH"])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = kube.put_object(_json(FIX / "kube" / "objects" / "statefulset-plain.json"))
    host = parse_config('[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n', tmp_path / "h.toml").host("r1")
    backend = make_backend("r1", host)
    await backend.start()
    try:
        plan = await changes.plan_apply("r1", host, backend, parse_edit_args(["mem-fraction-static=0.88"], []),
                                        predict=False)
        assert not plan.refused
        obj = json.loads(path.read_text())
        obj["spec"]["template"]["spec"]["containers"][0]["args"][-1] = "0.9"  # someone else's edit
        path.write_text(json.dumps(obj))
        out = await service.execute(plan, backend)
    finally:
        await backend.close()
    assert out.code == 4
    assert "its args or env changed since they were read; nothing was written" in out.messages[-1]
    assert json.loads(path.read_text())["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "0.9"
    assert not [c for c in kube.calls() if "patch" in c and "--dry-run=server" not in c]


def test_a_deployment_of_pods_is_applied_through_one_of_its_hosts(kube: FakeKube, tmp_path: Path) -> None:
    hosts = ('[hosts.leader]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n'
             '[hosts.worker]\nkube = "prod-eu/llm/r1-0-1"\ncontainer = "sglang"\n'
             '[deployments.r1]\nnodes = ["leader", "worker"]\n')
    code, _out, err = _cli(kube, tmp_path, "apply", "r1", "--set", "mem-fraction-static=0.88", "--yes", hosts=hosts)
    assert code == 4, err
    assert ("r1: its nodes are pods of one controller: run 'kvtui apply leader' (it edits every pod template of the "
            "controller, workers included)") in err
    assert not _calls(kube, "patch")


async def test_a_plain_restart_is_a_rollout_restart_followed_to_the_new_boot(kube: FakeKube, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtui.config import parse_config
    from kvtui.hosts import service
    from kvtui.hosts.factory import make_backend

    monkeypatch.setenv("PATH", kube.env()["PATH"])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    kube.put_object(_json(FIX / "kube" / "objects" / "statefulset-plain.json"))
    kube.on_rollout("StatefulSet", "r1", _rolled_pod(), "sglang", _boot("0.85"))
    host = parse_config('[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ncontainer = "sglang"\n', tmp_path / "h.toml").host("r1")
    backend = make_backend("r1", host)
    await backend.start()
    try:
        plan = service.plan_restart("r1", host, backend, follow=True, timeout=60)
        assert not plan.refused
        out = await service.execute(plan, backend)
    finally:
        await backend.close()
    assert out.status == "ready", out.messages
    assert "StatefulSet/r1: rollout restarted" in out.messages
    assert any(c[4:7] == ["rollout", "restart", "statefulset/r1"] for c in kube.calls())


def _with_env(kube: FakeKube, fixture: str = "statefulset-plain.json") -> list[dict[str, Any]]:
    """The StatefulSet's container with an env list: a plain value and a Secret reference."""
    obj = _json(FIX / "kube" / "objects" / fixture)
    env = [{"name": "NCCL_DEBUG", "value": "WARN"},
           {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = env
    kube.put_object(obj)
    return env


def _sts_env(kube: FakeKube, kind: str = "statefulset") -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = _json(kube.state / "objects" / kind / "r1.json")["spec"]["template"]["spec"][
        "containers"][0].get("env") or []
    return env


def test_setenv_patches_the_container_env_checks_the_new_pod_and_rollback_restores_it(kube: FakeKube,
                                                                                      tmp_path: Path) -> None:
    before = _with_env(kube)
    args = _sts_args(kube)
    kube.on_rollout("StatefulSet", "r1", _rolled_pod(), "sglang", _boot("0.85"))
    code, out, err = _cli(kube, tmp_path, "apply", "r1", "--setenv", "NCCL_DEBUG=INFO", "--setenv",
                          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "--restart", "--yes", "--timeout", "60")
    assert code == 0, err
    # the plan: both changes listed, the dry run's diff shows the env list
    assert "env NCCL_DEBUG: WARN -> INFO" in out
    assert "env PYTORCH_CUDA_ALLOC_CONF: added expandable_segments:True" in out
    assert '-  value: "WARN"\n+  value: "INFO"\n' in out
    assert '+- name: PYTORCH_CUDA_ALLOC_CONF\n+  value: "expandable_segments:True"\n' in out
    assert "patched; the API server stored the new env" in err + out
    # one JSON patch: the env list tested as read, then replaced; the args untouched
    patch = next(c for c in _calls(kube, "patch") if "--dry-run=server" not in c)
    ops = json.loads(patch[patch.index("--patch") + 1])
    assert [(op["op"], op["path"]) for op in ops] == [("test", "/spec/template/spec/containers/0/env"),
                                                      ("replace", "/spec/template/spec/containers/0/env")]
    assert _sts_env(kube) == [{"name": "NCCL_DEBUG", "value": "INFO"}, before[1],
                              {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]
    assert _sts_args(kube) == args
    # the new pod (made from the template) runs with them
    assert ("pod r1-0 runs with the env edits: --setenv NCCL_DEBUG=INFO, --setenv "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") in out + err
    assert "r1: applied; the new boot is ready" in out
    saved = _json(next((tmp_path / "state" / "kvtui" / "kube-backups").iterdir()))
    assert saved["sites"][0]["env"] == before
    # rollback: the env list as it was, checked on the new pod again
    kube.on_rollout("StatefulSet", "r1", _rolled_pod(), "sglang", _boot("0.85"))
    code, out, err = _cli(kube, tmp_path, "rollback", "r1", "--restart", "--yes", "--timeout", "60")
    assert code == 0, err
    assert _sts_env(kube) == before
    assert "pod r1-0 runs with the env edits: --setenv NCCL_DEBUG=WARN, --unsetenv PYTORCH_CUDA_ALLOC_CONF" \
        in out + err
    assert "r1: rolled back; the boot is ready" in out


def test_unsetenv_and_the_env_edits_kvtui_refuses(kube: FakeKube, tmp_path: Path) -> None:
    before = _with_env(kube)
    code, out, err = _cli(kube, tmp_path, "apply", "r1", "--unsetenv", "NCCL_DEBUG", "--yes")
    assert code == 0, err
    assert "env NCCL_DEBUG: removed (was WARN, line 1); in the container's env list" in out
    assert _sts_env(kube) == [before[1]]
    for argv, words in [
        (["--setenv", "HF_TOKEN=hf_x"], "HF_TOKEN comes from secretKeyRef hf/token (valueFrom) in the container's env"),
        (["--unsetenv", "NOPE"], "--unsetenv NOPE: NOPE is not in the container's env list (the image may still set "
                                 "it)"),
    ]:
        calls = len(_calls(kube, "patch"))
        code, _out, err = _cli(kube, tmp_path, "apply", "r1", *argv, "--yes")
        assert code == 4, err
        assert words in err
        assert len(_calls(kube, "patch")) == calls  # not even a dry run


def test_a_script_that_sets_the_variable_itself_is_refused(kube: FakeKube, tmp_path: Path) -> None:
    obj = _json(FIX / "kube" / "objects" / "statefulset-plain.json")
    c = obj["spec"]["template"]["spec"]["containers"][0]
    c["command"], c["args"] = ["/bin/sh", "-c"], [
        "export NCCL_DEBUG=WARN\nexec " + " ".join(c["args"]) + "\n"]
    kube.put_object(obj)
    code, _out, err = _cli(kube, tmp_path, "apply", "r1", "--setenv", "NCCL_DEBUG=INFO", "--yes")
    assert code == 4, err
    assert "the container's command line assigns NCCL_DEBUG itself (NCCL_DEBUG=WARN), which overrides its env list" \
        in err


def test_a_gitops_managed_object_gets_the_env_to_commit(kube: FakeKube, tmp_path: Path) -> None:
    obj = _json(FIX / "kube" / "objects" / "statefulset-flux.json")
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "NCCL_DEBUG", "value": "WARN"}]
    kube.put_object(obj)
    code, _out, err = _cli(kube, tmp_path, "apply", "r1", "--setenv", "NCCL_DEBUG=INFO", "--yes")
    assert code == 4, err
    assert "Flux would put the old env back at its next sync, silently" in err
    assert ("# spec.template.spec.containers[name=sglang]\nenv:\n- name: NCCL_DEBUG\n  value: \"INFO\"") in err
    assert _sts_env(kube) == [{"name": "NCCL_DEBUG", "value": "WARN"}]


def test_setenv_on_a_leaderworkerset_edits_both_templates(kube: FakeKube, tmp_path: Path) -> None:
    kube.put_pod(_json(FIX / "kube" / "pods" / "lws-leader.json"))
    kube.put_object({"apiVersion": "apps/v1", "kind": "StatefulSet",
                     "metadata": {"name": "r1", "namespace": "llm",
                                  "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                                       "kind": "LeaderWorkerSet", "name": "r1", "uid": "u3",
                                                       "controller": True}]},
                     "spec": {"template": {"spec": {"containers": [{"name": "sglang", "args": ["stale"]}]}}}})
    kube.put_object(_json(FIX / "kube" / "objects" / "leaderworkerset.json"))
    code, out, err = _cli(kube, tmp_path, "apply", "r1", "--setenv", "NCCL_IB_DISABLE=1", "--yes")
    assert code == 0, err
    spec = _json(kube.state / "objects" / "leaderworkerset" / "r1.json")["spec"]["leaderWorkerTemplate"]
    for tmpl in ("leaderTemplate", "workerTemplate"):
        env = spec[tmpl]["spec"]["containers"][0]["env"]
        assert {"name": "NCCL_IB_DISABLE", "value": "1"} in env
    assert out.count("+- name: NCCL_IB_DISABLE\n+  value: \"1\"") == 2
