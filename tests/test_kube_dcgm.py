"""GPU memory of a kube host from a DCGM exporter (issue 15): the Prometheus text parser on the
exporter's real shapes (2.x as NVIDIA's docs show it, MIG lines included; 3.x with # HELP/# TYPE,
modelName and the pod mapping), the in-cluster URL as a service-proxy path, and the backend
reading it through ``kubectl get --raw`` against the fake kubectl, stale while it fails.

Facts (written from the fixtures' text before running the parser): the 2.x answer has GPUs 0-7
with FB_USED 4845+i and FB_FREE 35690-i MiB (total 40535 MiB, an A100 40GB), GPU_UTIL 90+i,
GPU_TEMP 55+i, POWER 300.5+i W; its MIG line for GPU 0 (FB_USED 999, GPU_I_ID 13) is not the
card. The 3.x answer maps GPUs 4-7 of gpu-node-3 to pod llm/r1-0 (FB_USED 70004-70007, FREE
11551-11548: 81555 MiB each, an H100 80GB) and GPUs 0-3 to llm/other-0; the other-node answer
maps all 8 to batch/train-7."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kube_support import FakeKube

from kvtui.config import ConfigError, parse_config
from kvtui.hosts.kube import kubectl_argv as K
from kvtui.hosts.kube.backend import KubeBackend
from kvtui.hosts.kube.dcgm import parse_dcgm, stale_reason
from kvtui.kube_ref import KubeRefError, ServiceUrl, parse_service_url

FIX = Path(__file__).parent / "fixtures" / "kube"
URL = "http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics"
PROXY = "/api/v1/namespaces/gpu-operator/services/nvidia-dcgm-exporter:9400/proxy/metrics"


def _text(name: str) -> str:
    return (FIX / "dcgm" / name).read_text()


def test_exporter_2x_every_gpu_of_the_answer() -> None:
    r = parse_dcgm(_text("exporter-2x-a100-8gpu.txt"), 100.0, namespace="llm", pod="r1-0")
    assert not r.filtered  # no pod mapping: every GPU
    assert [s.index for s in r.samples] == list(range(8))
    assert [s.used_mib for s in r.samples] == [4845 + i for i in range(8)]
    assert {s.total_mib for s in r.samples} == {40535}
    assert [s.util for s in r.samples] == [90 + i for i in range(8)]
    assert r.samples[3].temperature_c == 58
    assert r.samples[3].power_w == pytest.approx(303.5)
    assert r.samples[0].uuid == "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
    assert all(s.ts == 100.0 for s in r.samples)


def test_exporter_3x_with_pod_mapping_takes_the_pods_gpus_numbered_as_the_container_sees_them() -> None:
    r = parse_dcgm(_text("exporter-3x-h100-podmap.txt"), 5.0, namespace="llm", pod="r1-0")
    assert r.filtered
    assert not r.other_node
    assert [s.index for s in r.samples] == [0, 1, 2, 3]
    assert [s.used_mib for s in r.samples] == [70004, 70005, 70006, 70007]
    assert {s.total_mib for s in r.samples} == {81555}
    assert {s.name for s in r.samples} == {"NVIDIA H100 80GB HBM3"}
    assert r.samples[0].uuid == "GPU-9a1c4e2f-7b0d-4c55-8e8e-0f43a7c1d2b9e"
    # another pod of the same namespace gets its own four
    other = parse_dcgm(_text("exporter-3x-h100-podmap.txt"), 5.0, namespace="llm", pod="other-0")
    assert [s.used_mib for s in other.samples] == [70000, 70001, 70002, 70003]


def test_an_answer_from_another_nodes_exporter_has_no_gpu_of_ours() -> None:
    r = parse_dcgm(_text("exporter-3x-h100-other-node.txt"), 5.0, namespace="llm", pod="r1-0")
    assert r.samples == []
    assert r.other_node


def test_why_an_answer_has_no_gpu_of_the_pod() -> None:
    """The stale mark's reason: unreachable, another node's exporter (its Hostname is not the pod's
    node), no series for this pod (the exporter on the pod's node maps its GPUs to other pods),
    no frame-buffer series at all."""
    other = parse_dcgm(_text("exporter-3x-h100-other-node.txt"), 5.0, namespace="llm", pod="r1-0")
    assert stale_reason(other, "", namespace="llm", pod="r1-0", node="gpu-node-3") == \
        "another node's DCGM exporter answered (gpu-node-9; the pod runs on gpu-node-3)"
    mine = parse_dcgm(_text("exporter-3x-h100-podmap.txt"), 5.0, namespace="llm", pod="r1-9")
    assert mine.other_node
    assert mine.hosts == {"gpu-node-3"}
    assert stale_reason(mine, "", namespace="llm", pod="r1-9", node="gpu-node-3") == \
        "no DCGM series for pod llm/r1-9: the exporter on gpu-node-3 maps its GPUs to other pods"
    empty = parse_dcgm("# HELP nothing\n", 5.0, namespace="llm", pod="r1-0")
    assert stale_reason(empty, "", namespace="llm", pod="r1-0", node=None) == \
        "the DCGM exporter's answer has no DCGM_FI_DEV_FB_USED/FREE series"
    assert stale_reason(None, "error: You must be logged in to the server (Unauthorized)", namespace="llm",
                        pod="r1-0", node=None) == \
        "DCGM exporter unreachable: error: You must be logged in to the server (Unauthorized)"


def test_prometheus_text_details() -> None:
    text = ("# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
            'DCGM_FI_DEV_FB_USED{gpu="1",modelName="H100 \\"SXM\\"",UUID="GPU-x"} 10 1733061600000\n'
            'DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-x"} 70\n'
            'DCGM_FI_DEV_FB_USED{gpu="2"} NaN\n'
            'DCGM_FI_DEV_FB_FREE{gpu="2"} 5\n'
            'DCGM_FI_DEV_FB_USED{gpu="3"} 1\n'  # no FREE: no total, left out
            "garbage line\n")
    r = parse_dcgm(text, 0.0)
    assert [(s.index, s.used_mib, s.total_mib, s.name) for s in r.samples] == [(1, 10.0, 80.0, 'H100 "SXM"')]


def test_exposition_text_the_hand_parser_misread() -> None:
    """Read by prometheus_client's parser: an exemplar after the value (the hand-written regex took
    the exemplar's value, 1, for the GPU's memory), spaces around the label braces (it dropped the
    line), an escaped quote and a brace inside a label value, a timestamp, +Inf (left out, as NaN),
    OpenMetrics' ``# EOF``; a line the parser refuses is left out and the rest still read."""
    text = ('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 5 # {trace_id="abc"} 1\n'
            'DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a"} 7 1733061600000\n'
            'DCGM_FI_DEV_FB_USED { gpu = "1" , modelName = "H100 \\"x} 9\\"" } 20\n'
            'DCGM_FI_DEV_FB_FREE{gpu="1"} 60\n'
            'DCGM_FI_DEV_FB_USED{gpu="2"} +Inf\n'
            'DCGM_FI_DEV_FB_FREE{gpu="2"} 5\n'
            "# EOF\n")
    r = parse_dcgm(text, 0.0)
    assert [(s.index, s.used_mib, s.total_mib, s.name, s.uuid) for s in r.samples] == [
        (0, 5.0, 12.0, "", "GPU-a"), (1, 20.0, 80.0, 'H100 "x} 9"', None)]
    broken = text.replace("# EOF\n", "") + 'DCGM_FI_DEV_GPU_UTIL{gpu="0" 3\nnot a sample at all\n'
    assert [(s.index, s.used_mib, s.util) for s in parse_dcgm(broken, 0.0).samples] == [(0, 5.0, None), (1, 20.0, None)]


def test_service_url_and_its_proxy_path_argv() -> None:
    assert parse_service_url(URL) == ServiceUrl("http", "nvidia-dcgm-exporter", "gpu-operator", 9400, "/metrics")
    assert parse_service_url(URL).proxy_path() == PROXY
    assert parse_service_url("https://dcgm.monitoring.svc.cluster.local:9400").proxy_path() == \
        "/api/v1/namespaces/monitoring/services/https:dcgm:9400/proxy/metrics"
    assert K.get_raw(K.PodRef("prod-eu", "llm", "r1-0"), PROXY) == [
        "kubectl", "--context", "prod-eu", "get", "--raw", PROXY]
    with pytest.raises(KubeRefError, match="expected an in-cluster service URL"):
        parse_service_url("http://10.0.0.5:9400/metrics")
    with pytest.raises(KubeRefError, match="expected a service proxy path"):
        K.get_raw(K.PodRef(None, "llm", "r1-0"), "/api/v1/secrets")


def test_gpu_metrics_url_is_checked_in_hosts_toml(tmp_path: Path) -> None:
    cfg = parse_config(f'[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ngpu_metrics_url = "{URL}"\n', tmp_path / "h.toml")
    assert cfg.host("r1").gpu_metrics_url == URL  # type: ignore[union-attr]
    with pytest.raises(ConfigError) as exc:
        parse_config('[hosts.r1]\nkube = "prod-eu/llm/r1-0"\ngpu_metrics_url = "http://10.0.0.5:9400/metrics"\n'
                     '[hosts.r2]\nssh = "a"\nunit = "u"\ngpu_metrics_url = "' + URL + '"\n', tmp_path / "h.toml")
    text = str(exc.value)
    assert '[hosts.r1] gpu_metrics_url = "http://10.0.0.5:9400/metrics": expected an in-cluster service URL' in text
    assert f'[hosts.r2] gpu_metrics_url = "{URL}": only for kube hosts' in text


async def test_the_backend_reads_the_exporter_through_the_api_server_and_marks_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    kube = FakeKube.create(tmp_path / "kube")
    monkeypatch.setenv("PATH", kube.env()["PATH"])
    kube.put_pod(json.loads((FIX / "pods" / "running-ready.json").read_text()))
    kube.put_raw(PROXY, _text("exporter-3x-h100-podmap.txt"))
    backend = KubeBackend("r1", K.PodRef("prod-eu", "llm", "r1-0", container="sglang"), gpu_metrics_url=URL,
                          retry_s=0.05, pod_poll_s=0)
    await backend.start()
    monkeypatch.setattr("kvtui.hosts.kube.backend.DCGM_MIN_S", 0.05)
    it = backend.gpu_stream(0.05)
    try:
        first = await asyncio.wait_for(anext(it), 10)
        kube.put_raw(PROXY, _text("exporter-3x-h100-other-node.txt"))  # the service picked another node
        other = await asyncio.wait_for(anext(it), 10)
        note_other = backend.gpu_note
        kube.put_raw(PROXY, None)  # no endpoints
        gone = await asyncio.wait_for(anext(it), 10)
        note_gone = backend.gpu_note
        kube.put_raw(PROXY, _text("exporter-3x-h100-podmap.txt"))
        back = await asyncio.wait_for(anext(it), 10)
    finally:
        await it.aclose()
        await backend.close()
    assert [s.used_mib for s in first] == [70004, 70005, 70006, 70007]
    assert not any(s.stale for s in first)
    assert [s.used_mib for s in other] == [70004, 70005, 70006, 70007]
    assert all(s.stale for s in other)
    assert note_other == "another node's DCGM exporter answered (gpu-node-9; the pod runs on gpu-node-3)"
    assert all(s.stale for s in gone)
    assert note_gone is not None
    assert note_gone.startswith("DCGM exporter unreachable: Error from server (ServiceUnavailable): no endpoints "
                                "available")
    assert not any(s.stale for s in back)
    raw = [c for c in kube.calls() if "--raw" in c]
    assert raw[0] == ["--context", "prod-eu", "get", "--raw", PROXY]
    assert not [c for c in kube.calls() if "exec" in c]  # no nvidia-smi when the exporter is named
