"""A Kubernetes pod reference as hosts.toml spells it (``kube = "CONTEXT/NAMESPACE/POD"``), and the
checks on the names that go into a kubectl argv. Pure core: ``kvtui.config`` validates with it,
``kvtui.hosts.kube.kubectl_argv`` builds the argv with it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# DNS-1123 subdomain (pods, objects) and label (containers, namespaces)
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SELECTOR_RE = re.compile(r"^[A-Za-z0-9_./!=, ()-]+$")


class KubeRefError(ValueError):
    """A pod reference or a name that kvtui will not put in a kubectl argv (the message says what
    was expected)."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """Where the server runs: ``context`` (None: the kubeconfig's current one), ``namespace``, and
    one ``pod`` or the pods a label ``selector`` picks (a StatefulSet / LeaderWorkerSet group);
    ``container`` (None: the pod's only or default container)."""

    context: str | None
    namespace: str
    pod: str | None = None
    selector: str | None = None
    container: str | None = None


def parse_target(text: str, *, selector: str | None = None, container: str | None = None) -> PodRef:
    """``CONTEXT/NAMESPACE/POD`` (or ``CONTEXT/NAMESPACE`` with a ``selector``). Split from the
    right: a context may itself hold ``/`` (EKS: ``arn:aws:eks:…:cluster/NAME``); an empty context
    (``/ns/pod``) means the current one."""
    parts = text.rsplit("/", 1 if selector else 2)
    want = "CONTEXT/NAMESPACE" if selector else "CONTEXT/NAMESPACE/POD"
    if len(parts) != (2 if selector else 3):
        raise KubeRefError(f'expected "{want}" (an empty CONTEXT is the current one), got {json.dumps(text)}')
    context, namespace = parts[0], parts[1]
    pod = None if selector else parts[2]
    check_label(namespace, "namespace")
    if pod is not None:
        check_name(pod, "pod")
    if selector is not None:
        check_selector(selector)
    if container is not None:
        check_label(container, "container")
    if context.startswith("-") or any(c.isspace() for c in context):
        raise KubeRefError(f"expected a kubeconfig context name, got {json.dumps(context)}")
    return PodRef(context or None, namespace, pod, selector, container)


def check_name(name: str, what: str) -> str:
    if not _NAME_RE.match(name):
        raise KubeRefError(f"expected a {what} name (lower-case letters, digits, '-' and '.'), got {json.dumps(name)}")
    return name


def check_label(name: str, what: str) -> str:
    if not _LABEL_RE.match(name):
        raise KubeRefError(f"expected a {what} name (lower-case letters, digits and '-', at most 63), "
                           f"got {json.dumps(name)}")
    return name


def check_selector(selector: str) -> str:
    if not selector.strip() or selector.startswith("-") or not _SELECTOR_RE.match(selector):
        raise KubeRefError(f'expected a label selector like "app=sglang,role=leader", got {json.dumps(selector)}')
    return selector


@dataclass(frozen=True, slots=True)
class ServiceUrl:
    """An in-cluster service URL (``http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics``),
    reached from here through the API server's service proxy, never directly."""

    scheme: str
    service: str
    namespace: str
    port: int
    path: str

    def proxy_path(self) -> str:
        """``/api/v1/namespaces/NS/services/[https:]SERVICE:PORT/proxy/PATH`` (``kubectl get --raw``)."""
        name = f"https:{self.service}:{self.port}" if self.scheme == "https" else f"{self.service}:{self.port}"
        return f"/api/v1/namespaces/{self.namespace}/services/{name}/proxy/{self.path.lstrip('/')}"


_SVC_URL_RE = re.compile(r"^(?P<scheme>https?)://(?P<svc>[a-z0-9-]+)\.(?P<ns>[a-z0-9-]+)"
                         r"(?:\.svc(?:\.[a-z0-9.-]+)?)?(?::(?P<port>\d{1,5}))?(?P<path>/[A-Za-z0-9._~/-]*)?$")


def parse_service_url(text: str) -> ServiceUrl:
    """``http(s)://SERVICE.NAMESPACE[.svc[.cluster.local]][:PORT][/PATH]`` (port 80/443, path
    ``/metrics`` when left out)."""
    m = _SVC_URL_RE.match(text)
    if m is None:
        raise KubeRefError(
            "expected an in-cluster service URL like http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics "
            f"(SERVICE.NAMESPACE; kvtui reaches it through the API server's service proxy), got {json.dumps(text)}")
    scheme = m.group("scheme")
    port = int(m.group("port") or (443 if scheme == "https" else 80))
    if not 0 < port < 65536:
        raise KubeRefError(f"expected a port 1-65535 in {json.dumps(text)}")
    return ServiceUrl(scheme, check_label(m.group("svc"), "service"), check_label(m.group("ns"), "namespace"),
                      port, m.group("path") or "/metrics")
