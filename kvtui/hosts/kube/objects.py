"""The Kubernetes API's JSON documents kvtui reads (what ``kubectl get … -o json`` prints), and the
backup file a kube apply writes, as ``TypedDict``s: the keys kvtui reads, nothing checked at run
time (a document is the parsed JSON as it is; the readers of ``kvtui.hosts.kube.state`` still
treat every key as possibly absent and every value as possibly odd).

Pure core: no I/O.
"""

from __future__ import annotations

from typing import Required, TypedDict


class EnvVar(TypedDict, total=False):
    """One entry of a container's ``env``: ``{name, value}`` or ``{name, valueFrom}``."""

    name: Required[str]
    value: str
    # {"secretKeyRef": {"name", "key"}} / {"configMapKeyRef": …} / {"fieldRef": {"fieldPath"}} / …
    valueFrom: dict[str, dict[str, object]]


class Container(TypedDict, total=False):
    name: str
    command: list[str]
    args: list[str]
    env: list[EnvVar]
    envFrom: list[dict[str, object]]


class OwnerReference(TypedDict, total=False):
    kind: str
    name: str
    controller: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int


class ContainerStateDetail(TypedDict, total=False):
    """``waiting`` / ``running`` / ``terminated`` of a container's state."""

    reason: str
    message: str
    exitCode: int
    startedAt: str
    finishedAt: str


# a container's ``state`` / ``lastState``: "waiting", "running" or "terminated" -> its detail
ContainerState = dict[str, ContainerStateDetail]


class ContainerStatus(TypedDict, total=False):
    name: str
    ready: bool
    restartCount: int
    state: ContainerState
    lastState: ContainerState


class PodCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str


class PodSpec(TypedDict, total=False):
    containers: list[Container]
    nodeName: str


class PodStatus(TypedDict, total=False):
    phase: str
    conditions: list[PodCondition]
    containerStatuses: list[ContainerStatus]


class LabelSelector(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[dict[str, object]]


class KubeObject(TypedDict, total=False):
    """What every object has: its kind and its metadata (``ownerReferences``, labels …)."""

    kind: str
    metadata: ObjectMeta


class Pod(KubeObject, total=False):
    spec: PodSpec
    status: PodStatus


class ControllerSpec(TypedDict, total=False):
    """A Deployment's, StatefulSet's or LeaderWorkerSet's spec: its selector and pod template(s)."""

    selector: LabelSelector
    template: Pod  # a pod template: a pod's metadata and spec
    leaderWorkerTemplate: dict[str, Pod]  # leaderTemplate, workerTemplate


class Controller(KubeObject, total=False):
    spec: ControllerSpec


class BackupSite(TypedDict, total=False):
    """One pod template's command line and env list as a backup saved them (no ``env`` in a backup
    written before env was saved)."""

    path: Required[str]
    command: Required[list[str]]
    args: Required[list[str]]
    env: list[EnvVar]


class Backup(TypedDict):
    """A kube apply's backup file (``kvtui.hosts.kube.ops.backup_file``): what the controller's
    templates held before the patch, and the args text the plan was made on."""

    object: str  # KIND/NAME
    context: str | None
    namespace: str
    container: str | None
    saved_at: float
    text: str
    sites: list[BackupSite]
