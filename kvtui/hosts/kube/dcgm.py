"""GPU memory from a DCGM exporter's Prometheus text (``dcgm-exporter``: the usual GPU metrics
source in a cluster), read with ``prometheus_client``'s maintained text-format parser (as
``kvtui.serving.prom`` reads the engines'). Pure: the backend fetches the text through ``kubectl get --raw`` on the
service proxy (``kvtui.kube_ref.ServiceUrl``) and hands it here.

The metrics read: ``DCGM_FI_DEV_FB_USED`` and ``DCGM_FI_DEV_FB_FREE`` (frame buffer, MiB; total =
used + free, as the exporter has no total by default), ``DCGM_FI_DEV_GPU_UTIL`` (%),
``DCGM_FI_DEV_GPU_TEMP`` (°C), ``DCGM_FI_DEV_POWER_USAGE`` (W), per ``gpu`` label (the node's
index), with ``UUID`` and ``modelName`` when the exporter says them. Lines of a MIG instance
(``GPU_I_ID``) are left out: the GPU's own line is the whole card.

Which GPUs are the server's: a DaemonSet exporter serves every GPU of its node, and a service
proxy reaches one exporter of the service — maybe another node's. With the exporter's pod mapping
on (labels ``namespace`` / ``pod`` / ``container`` on the GPUs a pod holds), only the server pod's
GPUs are taken, numbered as the container sees them (0… in the node's order); an answer that
names other pods but not ours is another node's (no sample). Without the mapping every GPU of the
answer is taken (``Reading.filtered`` False: the caller says so).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from kvtui.gpu import GpuSample

_FIELDS = {
    "DCGM_FI_DEV_FB_USED": "used",
    "DCGM_FI_DEV_FB_FREE": "free",
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_GPU_TEMP": "temp",
    "DCGM_FI_DEV_POWER_USAGE": "power",
}
# the most text read from one answer: 8 GPUs × dcgm-exporter's default counters is ~40 KiB
MAX_TEXT_CHARS = 8 * 1024 * 1024

Labelled = tuple[str, dict[str, str], float]  # (sample name, labels, value)


def _samples(text: str) -> Iterator[Labelled]:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield s.name, s.labels, float(s.value)


def read_samples(text: str) -> list[Labelled]:
    """Every sample of an exposition text, read by ``prometheus_client``'s maintained parser (escaped
    label values, timestamps, exemplars, NaN / ±Inf, ``# EOF``). A line that parser refuses is left
    out and the others kept (the whole text is parsed at once; only a text with such a line is read
    again line by line)."""
    text = text[:MAX_TEXT_CHARS]
    try:
        return list(_samples(text))
    except (ValueError, IndexError, KeyError, TypeError):  # the parser's errors on a malformed line
        pass
    out: list[Labelled] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            out.extend(_samples(line + "\n"))
        except (ValueError, IndexError, KeyError, TypeError):
            continue
    return out


@dataclass
class _Gpu:
    index: int
    values: dict[str, float] = field(default_factory=dict)
    uuid: str | None = None
    model: str = ""
    pod: tuple[str, str] | None = None  # (namespace, pod) from the exporter's pod mapping


@dataclass(frozen=True, slots=True)
class Reading:
    """The server's GPUs in one exporter answer; ``filtered``: chosen by the pod mapping (else
    every GPU the answer names); ``other_node``: the answer names other pods' GPUs only."""

    samples: list[GpuSample]
    filtered: bool
    other_node: bool = False
    hosts: frozenset[str] = frozenset()  # the exporter's node(s): its ``Hostname`` labels
    fb_series: bool = True  # the answer has DCGM_FI_DEV_FB_USED / FB_FREE series at all


def parse_dcgm(text: str, ts: float, *, namespace: str | None = None, pod: str | None = None) -> Reading:
    """The GPUs of one ``/metrics`` answer as ``GpuSample``s (MiB), those of ``namespace``/``pod``
    when the exporter maps GPUs to pods. A GPU without both FB_USED and FB_FREE is left out."""
    gpus: dict[int, _Gpu] = {}
    hosts: set[str] = set()
    for name, labels, value in read_samples(text):
        if name not in _FIELDS or "GPU_I_ID" in labels or not labels.get("gpu", "").isdigit():
            continue
        if not math.isfinite(value):
            continue
        g = gpus.setdefault(int(labels["gpu"]), _Gpu(int(labels["gpu"])))
        g.values[_FIELDS[name]] = value
        g.uuid = labels.get("UUID") or g.uuid
        g.model = labels.get("modelName") or g.model
        if labels.get("Hostname"):
            hosts.add(labels["Hostname"])
        if labels.get("pod"):
            g.pod = (labels.get("namespace", ""), labels["pod"])
    ordered = [gpus[i] for i in sorted(gpus) if {"used", "free"} <= gpus[i].values.keys()]
    mapped = any(g.pod is not None for g in ordered)
    filtered = mapped and pod is not None
    chosen = [g for g in ordered if g.pod == (namespace or "", pod)] if filtered else ordered
    samples = [_sample(i if filtered else g.index, g, ts) for i, g in enumerate(chosen)]
    return Reading(samples, filtered, other_node=filtered and not chosen, hosts=frozenset(hosts),
                   fb_series=bool(ordered))


def stale_reason(reading: Reading | None, error: str, *, namespace: str | None, pod: str | None,
                 node: str | None) -> str:
    """Why the exporter's answer gave no sample of the server's GPUs (the GPU panel's stale mark
    says it): the exporter could not be reached (``error``: kubectl's words), another node's
    exporter answered (its ``Hostname`` is not the pod's node), the exporter maps no GPU to this
    pod (on the pod's node, or a node unknown), or it has no frame-buffer series at all."""
    if reading is None:
        return f"DCGM exporter unreachable: {error}" if error else "DCGM exporter unreachable"
    if not reading.fb_series:
        return "the DCGM exporter's answer has no DCGM_FI_DEV_FB_USED/FREE series"
    where = ", ".join(sorted(reading.hosts))
    if node and reading.hosts and node not in reading.hosts:
        return f"another node's DCGM exporter answered ({where}; the pod runs on {node})"
    on = f" on {where}" if where else ""
    return f"no DCGM series for pod {namespace or ''}/{pod or ''}: the exporter{on} maps its GPUs to other pods"


def _sample(index: int, g: _Gpu, ts: float) -> GpuSample:
    v = g.values
    return GpuSample(index=index, used_mib=v["used"], total_mib=v["used"] + v["free"], util=v.get("util"), ts=ts,
                     uuid=g.uuid, name=g.model, temperature_c=v.get("temp"), power_w=v.get("power"))
