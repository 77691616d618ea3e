"""Every ``kubectl`` command kvtui runs, as an argv list (run without a shell: nothing to quote).

``kubectl`` runs on the operator's machine with their kubeconfig: ``--context`` picks one of
their contexts (none: their current one), ``--namespace`` the pod's namespace. Names are checked
before they reach an argv (a pod named ``-x`` must not become an option).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from kvtui.kube_ref import KubeRefError, PodRef, check_label, check_name, check_selector, parse_target

KUBECTL = "kubectl"
_FIELD_RE = re.compile(r"^[a-z_.]+$")
_KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9.]*$")

__all__ = ["KUBECTL", "KubeRefError", "PodRef", "check_label", "check_name", "check_selector", "exec_gpu_query",
           "get_object", "get_pod", "get_raw", "list_pods", "logs", "parse_target", "patch_json", "port_forward",
           "rollout_restart", "rollout_status"]


def _base(ref: PodRef) -> list[str]:
    out = [KUBECTL]
    if ref.context:
        out += ["--context", ref.context]
    return [*out, "--namespace", ref.namespace]


def get_pod(ref: PodRef, pod: str) -> list[str]:
    """One pod as JSON (its state, owner, containers)."""
    return [*_base(ref), "get", "pod", check_name(pod, "pod"), "--output", "json"]


def list_pods(ref: PodRef, selector: str | None = None) -> list[str]:
    """The pods ``selector`` (default ``ref.selector``) picks, as a JSON ``List``."""
    sel = selector or ref.selector
    if not sel:
        raise KubeRefError("list_pods needs a selector")
    return [*_base(ref), "get", "pods", "--selector", check_selector(sel), "--output", "json"]


def get_object(ref: PodRef, kind: str, name: str) -> list[str]:
    """Any namespaced object as JSON (the pod's controller: ReplicaSet, Deployment, StatefulSet,
    LeaderWorkerSet)."""
    if not _KIND_RE.match(kind):
        raise KubeRefError(f"expected a resource kind like Deployment, got {json.dumps(kind)}")
    return [*_base(ref), "get", kind, check_name(name, kind), "--output", "json"]


def logs(ref: PodRef, pod: str, *, follow: bool = False, since_time: str | None = None,
         previous: bool = False, tail: int | None = None, limit_bytes: int | None = None) -> list[str]:
    """The container's log with the kubelet's RFC 3339 timestamps (``LogResume`` reads them);
    ``follow``: stream it; ``since_time``: from that stamp on (a resume; the API takes whole
    seconds, so that second's lines come again); ``previous``: the log of the container that ran
    before the current one (the one that crashed); ``tail``: the last N lines only (the kubelet
    seeks there first, then applies ``since_time``); ``limit_bytes``: at most N bytes, counted
    from the first line sent (the log's head, stamps included; the last line may be cut)."""
    out = [*_base(ref), "logs", check_name(pod, "pod")]
    if ref.container:
        out += ["--container", ref.container]
    out.append("--timestamps")
    if follow:
        out.append("--follow")
    if since_time:
        out += ["--since-time", since_time]
    if tail is not None:
        out.append(f"--tail={max(0, int(tail))}")
    if limit_bytes is not None:
        out.append(f"--limit-bytes={max(1, int(limit_bytes))}")
    if previous:
        out.append("--previous")
    return out


def exec_gpu_query(ref: PodRef, pod: str, fields: Sequence[str], *, interval_ms: int | None = None) -> list[str]:
    """``nvidia-smi --query-gpu=…`` inside the container (once, or a stream every ``interval_ms``)."""
    for f in fields:
        if not _FIELD_RE.match(f):
            raise KubeRefError(f"not an nvidia-smi field: {f!r}")
    out = [*_base(ref), "exec", check_name(pod, "pod")]
    if ref.container:
        out += ["--container", ref.container]
    out += ["--", "nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    if interval_ms is not None:
        out += ["-lms", str(max(10, int(interval_ms)))]
    return out


def patch_json(ref: PodRef, kind: str, name: str, patch: Sequence[dict[str, object]], *, dry_run: bool) -> list[str]:
    """A JSON patch of the controller (the container's args); ``dry_run``: server-side, the API
    server validates and returns the result without storing it (the diff kvtui shows first)."""
    if not _KIND_RE.match(kind):
        raise KubeRefError(f"expected a resource kind like Deployment, got {json.dumps(kind)}")
    out = [*_base(ref), "patch", kind, check_name(name, kind), "--type", "json",
           "--patch", json.dumps(list(patch), separators=(",", ":"))]
    if dry_run:
        out.append("--dry-run=server")
    return [*out, "--output", "json"]


def rollout_status(ref: PodRef, kind: str, name: str, *, timeout_s: int) -> list[str]:
    """Wait for the controller's rollout (``kind`` Deployment / StatefulSet)."""
    if not _KIND_RE.match(kind):
        raise KubeRefError(f"expected a resource kind like Deployment, got {json.dumps(kind)}")
    return [*_base(ref), "rollout", "status", f"{kind.lower()}/{check_name(name, kind)}",
            f"--timeout={max(1, int(timeout_s))}s"]


def rollout_restart(ref: PodRef, kind: str, name: str) -> list[str]:
    """A new rollout of the controller with its template unchanged (the console's restart)."""
    if not _KIND_RE.match(kind):
        raise KubeRefError(f"expected a resource kind like Deployment, got {json.dumps(kind)}")
    return [*_base(ref), "rollout", "restart", f"{kind.lower()}/{check_name(name, kind)}"]


def port_forward(ref: PodRef, pod: str, port: int) -> list[str]:
    """A local port (the kernel picks it; kubectl prints ``Forwarding from 127.0.0.1:N -> PORT``)
    that reaches ``port`` in the pod through the API server, on the loopback address only: the
    readiness probe's one-token request (``kvtui.hosts.probe``)."""
    if not 0 < int(port) < 65536:
        raise KubeRefError(f"not a port: {port}")
    return [*_base(ref), "port-forward", f"pod/{check_name(pod, 'pod')}", f":{int(port)}", "--address", "127.0.0.1"]


_RAW_RE = re.compile(r"^/api/v1/namespaces/[a-z0-9-]+/(services/(https:)?[a-z0-9-]+|pods/[a-z0-9.-]+):\d+"
                     r"/proxy/[A-Za-z0-9._~/-]*$")


def pod_proxy_path(ref: PodRef, pod: str, port: int, path: str) -> str:
    """``/api/v1/namespaces/NS/pods/POD:PORT/proxy/PATH``: a pod's port through the API server."""
    return f"/api/v1/namespaces/{ref.namespace}/pods/{pod}:{int(port)}/proxy/{path.lstrip('/')}"


def get_raw(ref: PodRef, path: str) -> list[str]:
    """``kubectl get --raw PATH``: an in-cluster service through the API server's service proxy
    (``kube_ref.ServiceUrl.proxy_path``: the DCGM exporter's /metrics), or a pod's port through its
    pod proxy (``pod_proxy_path``: the server's own /metrics)."""
    if not _RAW_RE.match(path):
        raise KubeRefError(f"expected a service proxy path, got {json.dumps(path)}")
    out = [KUBECTL]
    if ref.context:
        out += ["--context", ref.context]
    return [*out, "get", "--raw", path]
