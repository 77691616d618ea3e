"""Pure readers of the Kubernetes API's JSON (what ``kubectl get … -o json`` prints), and the log
resume of ``kubectl logs -f --timestamps``. No I/O here: the backend runs the argv of
``kvtui.hosts.kube.kubectl_argv`` and hands the text to these.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from kvtui import fmt
from kvtui.hosts.kube.objects import (
    Container,
    ContainerStateDetail,
    ContainerStatus,
    Controller,
    EnvVar,
    KubeObject,
    Pod,
)

# the waiting reasons that mean the container cannot start as it is (not just "not yet")
_BAD_WAITING = {"ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff", "CreateContainerConfigError",
                "InvalidImageName", "CreateContainerError", "RunContainerError"}


@dataclass(frozen=True, slots=True)
class Termination:
    """How a container ended: ``reason`` (``OOMKilled``, ``Error``, ``Completed``), exit code."""

    reason: str | None
    exit_code: int | None
    started_at: str | None = None
    finished_at: str | None = None

    @property
    def oom_killed(self) -> bool:
        return self.reason == "OOMKilled"

    def words(self) -> str:
        code = f" (exit {self.exit_code})" if self.exit_code is not None else ""
        if self.oom_killed:
            return (f"OOMKilled{code}: the container hit its memory limit — host memory (the pod's "
                    "resources.limits.memory), not GPU memory")
        return f"{self.reason or 'terminated'}{code}"

    def brief(self) -> str:
        """The words in a few: ``OOMKilled (exit 137): host memory, not GPU``."""
        code = f" (exit {self.exit_code})" if self.exit_code is not None else ""
        return f"OOMKilled{code}: host memory, not GPU" if self.oom_killed else self.words()


@dataclass(frozen=True, slots=True)
class PodState:
    """A pod and the server's container in it, as the console shows it beside the boot."""

    name: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    container: str | None
    ready: bool
    state: str  # waiting | running | terminated | unknown
    reason: str | None  # Unschedulable, ContainerCreating, ImagePullBackOff, CrashLoopBackOff, …
    message: str | None
    restarts: int
    last: Termination | None  # the previous container's end (a restart's cause)
    current: Termination | None  # this container's end, when it has ended
    started_at: str | None
    node: str | None

    @property
    def stuck(self) -> bool:
        """Cannot start as it is (unschedulable, image pull, bad config, crash loop)."""
        return self.reason == "Unschedulable" or self.reason in _BAD_WAITING

    def summary(self, *, brief: bool = False) -> str:
        """One line: ``Pending: Unschedulable (0/4 nodes are available: …)``, ``Running, ready``,
        ``Running, not ready (readiness probe)``, ``CrashLoopBackOff, 5 restarts, last: OOMKilled …``;
        ``brief``: the last end in a few words (the console's header)."""
        if self.phase == "Pending" and self.reason == "Unschedulable":
            head = "Pending: unschedulable"
        elif self.state == "waiting" and self.reason:
            head = self.reason if self.phase != "Pending" or self.reason != "ContainerCreating" else "ContainerCreating"
        elif self.state == "running":
            head = "Running, ready" if self.ready else "Running, not ready (readiness probe)"
        elif self.state == "terminated" and self.current is not None:
            head = f"{self.phase}: {self.current.brief() if brief else self.current.words()}"
        else:
            head = self.phase
        parts = [head + (f" ({fmt.one_line(self.message, 200)})" if self.message and self.state != "running" else "")]
        if self.restarts:
            parts.append(f"{self.restarts} restart{'s' if self.restarts != 1 else ''}")
        if self.last is not None:
            parts.append(f"last: {self.last.brief() if brief else self.last.words()}")
        return ", ".join(parts)




def _termination(t: ContainerStateDetail | None) -> Termination | None:
    if not t:
        return None
    code = t.get("exitCode")
    return Termination(t.get("reason"), code if isinstance(code, int) else None, t.get("startedAt"),
                       t.get("finishedAt"))


def pick_container(pod: Pod, container: str | None) -> ContainerStatus | None:
    """The server's container status: the named one, else the default container (annotation
    ``kubectl.kubernetes.io/default-container``), else the first."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    want = container or ((pod.get("metadata") or {}).get("annotations") or {}).get(
        "kubectl.kubernetes.io/default-container")
    if want:
        return next((c for c in statuses if c.get("name") == want), None)
    return statuses[0] if statuses else None


def pod_state(pod: Pod, container: str | None = None) -> PodState:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Unknown")
    cs = pick_container(pod, container)
    reason: str | None = None
    message: str | None = None
    state = "unknown"
    current: Termination | None = None
    started: str | None = None
    ready = False
    restarts = 0
    last: Termination | None = None
    name = container
    if cs is not None:
        name = cs.get("name")
        ready = bool(cs.get("ready"))
        restarts = int(cs.get("restartCount") or 0)
        st = cs.get("state") or {}
        if "waiting" in st:
            state = "waiting"
            reason = (st["waiting"] or {}).get("reason")
            message = (st["waiting"] or {}).get("message")
        elif "running" in st:
            state = "running"
            started = (st["running"] or {}).get("startedAt")
        elif "terminated" in st:
            state = "terminated"
            current = _termination(st["terminated"])
            reason = current.reason if current else None
        last = _termination((cs.get("lastState") or {}).get("terminated"))
    if phase == "Pending" and reason is None:
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason = cond.get("reason") or "Unschedulable"
                message = cond.get("message")
                state = "waiting"
    return PodState(name=str(meta.get("name") or ""), phase=phase, container=name, ready=ready, state=state,
                    reason=reason, message=message, restarts=restarts, last=last, current=current,
                    started_at=started, node=spec.get("nodeName"))



def pod_command(pod: Pod, container: str | None) -> tuple[str, ...]:
    """The container's command line as the pod's spec says (``command`` then ``args``; empty when
    neither is set: the image's entrypoint runs) — the running server's flags when its own
    argument dump is no longer in ``kubectl logs``."""
    for i, c in enumerate((pod.get("spec") or {}).get("containers") or []):
        if (c.get("name") == container) if container is not None else i == 0:
            return (*(str(a) for a in c.get("command") or ()), *(str(a) for a in c.get("args") or ()))
    return ()


# -- which container is the next boot -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerId:
    """One run of the server's container: the pod (its uid: a pod of the same name made again is
    another pod), how many times the kubelet restarted the container, when this run started (the
    kubelet's ``startedAt``, the cluster's clock)."""

    pod: str
    uid: str | None
    restarts: int
    started_at: str | None


def container_id(pod: Pod, container: str | None) -> ContainerId | None:
    cs = pick_container(pod, container)
    if cs is None:
        return None
    meta = pod.get("metadata") or {}
    st = cs.get("state") or {}
    started = (st.get("running") or st.get("terminated") or {}).get("startedAt")
    return ContainerId(str(meta.get("name") or ""), meta.get("uid"), int(cs.get("restartCount") or 0), started)


def _stamp_key(stamp: str | None) -> int:
    got = split_stamp(stamp + " ") if stamp else None
    return -1 if got is None else got[1]


@dataclass(frozen=True, slots=True)
class NextContainer:
    """The container that runs the next boot: its pod, the stamp its boot starts at (lines before
    it are the old boot's) and the restart count from which the log is followed (one less when it
    has already ended and the kubelet restarted it: its log is then the ``--previous`` one)."""

    pod: str
    since: str
    restarts: int


def next_container(pods: Iterable[Pod], container: str | None, old: ContainerId | None) -> NextContainer | None:
    """Among ``pods``, the container run that started after ``old`` (another pod — another uid,
    or another name —, or the same pod's container restarted since), the latest one; None while
    there is none yet (the new pod is Pending, its container is being created, or the old one is
    still the only one — say, terminating and still printing)."""
    best: tuple[int, NextContainer] | None = None
    for pod in pods:
        cid = container_id(pod, container)
        if cid is None:
            continue
        if old is not None:
            same_pod = (cid.uid == old.uid) if (cid.uid or old.uid) else (cid.pod == old.pod)
            if same_pod and cid.restarts <= old.restarts and not (
                    cid.started_at and _stamp_key(cid.started_at) > _stamp_key(old.started_at)):
                continue
        cs = pick_container(pod, container) or {}
        st = cs.get("state") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if "running" in st and cid.started_at:
            since, restarts = cid.started_at, cid.restarts
        elif last.get("startedAt") and cid.restarts > 0 and (
                old is None or _stamp_key(str(last["startedAt"])) > _stamp_key(old.started_at)):
            # it ran, ended and waits to run again (a crash loop) before it was seen running
            since, restarts = str(last["startedAt"]), cid.restarts - 1
        else:
            continue  # not started yet: look again
        key = _stamp_key(since)
        if best is None or key > best[0]:
            best = (key, NextContainer(cid.pod, since, restarts))
    return None if best is None else best[1]


# the labels a controller puts on each revision's pods: a Deployment's next pod differs in them
REVISION_LABELS = ("pod-template-hash", "controller-revision-hash", "statefulset.kubernetes.io/pod-name",
                   "apps.kubernetes.io/pod-index")


def siblings_selector(pod: Pod) -> str | None:
    """An equality selector for the pods of ``pod``'s controller across revisions (its labels
    without the revision's own): where a Deployment's new pod is found after a rollout."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    keep = sorted((k, v) for k, v in labels.items() if k not in REVISION_LABELS)
    return ",".join(f"{k}={v}" for k, v in keep) or None

def selector_of(obj: Controller) -> str | None:
    """A controller's ``spec.selector`` as an equality selector (its ``matchLabels``): the pods it
    owns across its rollouts (a Deployment's does not name ``pod-template-hash``, a ReplicaSet's
    does); None when it has ``matchExpressions`` (not an equality selector) or no labels."""
    sel = (obj.get("spec") or {}).get("selector") or {}
    if not isinstance(sel, Mapping) or sel.get("matchExpressions"):
        return None
    labels = sel.get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None


def deletion_requested(pod: Pod) -> int:
    """The stamp key of the second ``pod``'s deletion was requested: ``deletionTimestamp`` is the
    request *plus* the grace period (``deletionGracePeriodSeconds``; 30 s by default), so the
    controller's replacement, made right away, is created well before it. -1: not being deleted."""
    meta = pod.get("metadata") or {}
    stamp = meta.get("deletionTimestamp")
    if not isinstance(stamp, str) or not stamp:
        return -1
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return -1
    grace = meta.get("deletionGracePeriodSeconds")
    at -= timedelta(seconds=grace if isinstance(grace, int) and grace > 0 else 0)
    return _stamp_key(at.strftime("%Y-%m-%dT%H:%M:%SZ"))


def terminating(pod: Pod) -> bool:
    """The pod's deletion was requested (it is Terminating: SIGTERM sent, the grace period runs)."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _created(pod: Pod) -> int:
    made = _stamp_key((pod.get("metadata") or {}).get("creationTimestamp"))
    if made < 0:
        runs = [(cs.get("state") or {}).get("running") or (cs.get("state") or {}).get("terminated") or {}
                for cs in (pod.get("status") or {}).get("containerStatuses") or []]
        made = max((_stamp_key(r.get("startedAt")) for r in runs), default=-1)
    return made


def pod_end(pod: Pod | None, container: str | None) -> tuple[bool, str]:
    """How the server of a pod that is gone ended, from the pod as last read: (stopped, words).
    A pod is only ever removed by a deletion (SIGTERM, then SIGKILL when the grace period ends):
    a stop, unless its container had already ended otherwise — ``terminated.exitCode`` 0
    (``Completed``: the server shut down cleanly) or, on a pod being deleted, 137 / 143 (killed by
    the signals of its deletion) is a stop; another exit, or ``OOMKilled``, is a crash."""
    cs = pick_container(pod, container) if pod is not None else None
    name = (cs or {}).get("name") or container or "the server's"
    t = _termination(((cs or {}).get("state") or {}).get("terminated"))
    if t is None:
        return True, "deleted"
    grace = ((pod or {}).get("metadata") or {}).get("deletionGracePeriodSeconds")
    if t.exit_code == 0:
        return True, f"deleted; container {name} ended {t.words()} after SIGTERM"
    if pod is not None and terminating(pod) and t.exit_code in (137, 143) and not t.oom_killed:
        within = f"its {grace} s grace period" if isinstance(grace, int) else "its grace period"
        return True, f"deleted; container {name} killed at the end of {within} ({t.words()})"
    return False, f"container {name}: {t.words()}"


def current_pod(pods: Iterable[Pod], kind: str, name: str | None = None) -> Pod | None:
    """The pod a controller runs the server in now (a host named by a pod its controller has
    since replaced: ``KubeBackend`` remembers the controller): among ``pods`` (its selector's),
    those not Terminating — a StatefulSet's under ``name`` only (its other replicas are other
    servers) —, Ready first, then the one created last; None when there is none."""
    best: tuple[bool, int, str, Pod] | None = None
    for pod in pods:
        m = pod.get("metadata") or {}
        if terminating(pod) or (kind == "StatefulSet" and name is not None and m.get("name") != name):
            continue
        cs = (pod.get("status") or {}).get("containerStatuses") or []
        ready = bool(cs) and all(c.get("ready") for c in cs)
        key = (ready, _created(pod), str(m.get("name") or ""), pod)
        if best is None or key[:3] > best[:3]:
            best = key
    return None if best is None else best[3]


def successor(pods: Iterable[Pod], gone: Pod) -> Pod | None:
    """The pod that took the place of ``gone`` (deleted; its controller made another, under
    another name for a Deployment's or a ReplicaSet's pod): among ``pods`` (the controller's, by
    its ``spec.selector``), those owned by a controller of the same kind, other than ``gone``
    (name and uid) — a StatefulSet's only under ``gone``'s own name (its other replicas are other
    servers); created at or after the second ``gone``'s deletion was requested when that was
    seen (``deletion_requested``: not ``deletionTimestamp``, which adds the grace period) —, the
    one created last (``creationTimestamp``, else its containers' latest ``startedAt``); None
    when there is none yet."""
    kind = (controller_of(gone) or ("", ""))[0]
    meta = gone.get("metadata") or {}
    deleted = deletion_requested(gone)
    best: tuple[int, str, Pod] | None = None
    for pod in pods:
        m = pod.get("metadata") or {}
        if m.get("name") == meta.get("name") and m.get("uid") == meta.get("uid"):
            continue
        if (controller_of(pod) or ("", ""))[0] != kind:
            continue
        if kind == "StatefulSet" and m.get("name") != meta.get("name"):
            continue
        if terminating(pod):
            continue  # going too (a rollout's old pod, another replica being deleted)
        made = _stamp_key(m.get("creationTimestamp"))
        if 0 <= made < deleted:
            continue  # there before the pod followed was deleted: another replica
        made = _created(pod)
        key = (made, str(m.get("name") or ""), pod)
        if best is None or key[:2] > best[:2]:
            best = key
    return None if best is None else best[2]


# -- groups: the pods of one server, leader first --------------------------------------------

_ORDINAL_RE = re.compile(r"-(\d+)$")
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
STS_POD_INDEX = "apps.kubernetes.io/pod-index"


def node_order(pods: Iterable[Pod]) -> list[Pod]:
    """The pods of one multi-node server in node-rank order: a LeaderWorkerSet's worker index
    (``0`` = the leader), a StatefulSet's pod index (label, else the name's ``-N``), else by name."""
    return sorted(pods, key=lambda p: (node_rank(p), str((p.get("metadata") or {}).get("name") or "")))


def node_rank(pod: Pod) -> int:
    """The pod's place in its group (``node_order``): the worker / pod index, else the name's
    ``-N``, else last."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    for lab in (LWS_WORKER_INDEX, STS_POD_INDEX):
        v = labels.get(lab)
        if isinstance(v, str) and v.isdigit():
            return int(v)
    m = _ORDINAL_RE.search(str(meta.get("name") or ""))
    return int(m.group(1)) if m else 1 << 30


# -- who owns the pod, and who owns that ----------------------------------------------------


def controller_of(obj: KubeObject) -> tuple[str, str] | None:
    """``(kind, name)`` of the object's controller (``ownerReferences`` with ``controller: true``)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


@dataclass(frozen=True, slots=True)
class Manager:
    """A GitOps / packaging tool that owns an object's spec (it would revert a direct patch)."""

    tool: str  # Helm | Argo CD | Flux
    evidence: str  # the label or annotation that says so
    release: str | None = None


def gitops_manager(obj: KubeObject) -> Manager | None:
    """Helm (``app.kubernetes.io/managed-by: Helm`` or ``meta.helm.sh/release-name``), Argo CD
    (``argocd.argoproj.io/*`` annotations or the ``argocd.argoproj.io/instance`` label), Flux
    (``kustomize.toolkit.fluxcd.io/*`` / ``helm.toolkit.fluxcd.io/*`` labels). Argo CD and Flux
    come first: they also deploy Helm charts, and they are the ones that revert."""
    meta = obj.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    ann: Mapping[str, str] = meta.get("annotations") or {}
    for k, v in [*labels.items(), *ann.items()]:
        if k.startswith("argocd.argoproj.io/"):
            return Manager("Argo CD", f"{k}: {v}", v if k.endswith("/instance") else None)
    for k, v in labels.items():
        if k.startswith(("kustomize.toolkit.fluxcd.io/", "helm.toolkit.fluxcd.io/")):
            return Manager("Flux", f"{k}: {v}", v if k.endswith("/name") else None)
    if labels.get("app.kubernetes.io/managed-by") == "Helm":
        return Manager("Helm", "app.kubernetes.io/managed-by: Helm", ann.get("meta.helm.sh/release-name"))
    if "meta.helm.sh/release-name" in ann:
        return Manager("Helm", f"meta.helm.sh/release-name: {ann['meta.helm.sh/release-name']}",
                       ann["meta.helm.sh/release-name"])
    return None


# the pod templates of each controller kind: where a container's args live
_TEMPLATES: dict[str, tuple[tuple[str, ...], ...]] = {
    "Deployment": (("spec", "template"),),
    "StatefulSet": (("spec", "template"),),
    "LeaderWorkerSet": (("spec", "leaderWorkerTemplate", "leaderTemplate"),
                        ("spec", "leaderWorkerTemplate", "workerTemplate")),
}


@dataclass(frozen=True, slots=True)
class ArgsSite:
    """One place a container's command line lives in a controller: its JSON-patch path and value."""

    path: str
    args: tuple[str, ...]
    command: tuple[str, ...] = field(default_factory=tuple)


def _template_containers(obj: Controller, container: str | None) -> list[tuple[str, Container]]:
    """(JSON-patch path of the container, the container) in every pod template of ``obj``."""
    out: list[tuple[str, Container]] = []
    for path in _TEMPLATES.get(str(obj.get("kind")), ()):
        node: Any = obj
        for k in path:
            node = node.get(k) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            continue
        containers = (cast(Pod, node).get("spec") or {}).get("containers") or []
        for i, c in enumerate(containers):
            if container is None and i > 0:
                break
            if container is not None and c.get("name") != container:
                continue
            out.append(("/" + "/".join([*path, "spec", "containers", str(i)]), c))
    return out


def container_args(obj: Controller, container: str | None) -> list[ArgsSite]:
    """Every pod template's ``args`` of the container (a LeaderWorkerSet has the leader's and the
    workers'); the paths are what a JSON patch replaces."""
    out: list[ArgsSite] = []
    for base, c in _template_containers(obj, container):
        args = tuple(str(a) for a in c.get("args") or ())
        command = tuple(str(a) for a in c.get("command") or ())
        out.append(ArgsSite(base + "/args", args, command))
    return out


# -- the container's environment (``env``: a list of {name, value} or {name, valueFrom}) ------


@dataclass(frozen=True, slots=True)
class EnvSite:
    """One pod template's ``env`` list of the container: its JSON-patch path and entries (as the
    API returns them: ``{"name", "value"}`` or ``{"name", "valueFrom"}``); ``from_sources``: the
    container also reads ``envFrom`` (a ConfigMap / Secret may set a variable too)."""

    path: str
    entries: tuple[EnvVar, ...]
    from_sources: bool = False


def container_env(obj: Controller, container: str | None) -> list[EnvSite]:
    """Every pod template's ``env`` of the container, in ``container_args``' order."""
    return [EnvSite(base + "/env", tuple(e.copy() for e in c.get("env") or ()), bool(c.get("envFrom")))
            for base, c in _template_containers(obj, container)]


def plain_env(entries: Iterable[EnvVar]) -> dict[str, str]:
    """The variables the entries give a value (``valueFrom`` ones are not known here; a later
    entry of the same name wins, as the kubelet does)."""
    out: dict[str, str] = {}
    for e in entries:
        if "valueFrom" in e:
            out.pop(str(e.get("name")), None)
        else:
            out[str(e.get("name"))] = str(e.get("value") or "")
    return out


def _value_from(entry: EnvVar) -> str:
    src = entry.get("valueFrom") or {}
    kind = next(iter(src), "valueFrom")
    ref = src.get(kind) or {}
    what = "/".join(str(ref[k]) for k in ("name", "key", "fieldPath", "resource") if k in ref)
    return f"{kind} {what}".strip()


@dataclass(frozen=True, slots=True)
class EditedEnvEntry:
    """What one environment edit does to an ``env`` list: ``action`` set / add / remove /
    unchanged, the old and new value, and the entry's position (1-based)."""

    name: str
    action: Literal["set", "add", "remove", "unchanged"]
    old: str | None
    new: str | None
    entry: int


def edit_env(site: EnvSite, edits: Iterable[tuple[str, str | None]]) -> tuple[list[EnvVar], list[EditedEnvEntry]]:
    """The env list after ``edits`` ((name, value); value None: remove): a variable set in the
    list gets the new value (every entry of that name), a new one is appended, a removed one
    loses every entry. Raises ``ArgsError`` for what kvtui will not do: replace or remove a
    ``valueFrom`` (a Secret, ConfigMap or field reference: the manifest's business), remove a
    variable the list does not set."""
    out = [e.copy() for e in site.entries]
    changes: list[EditedEnvEntry] = []
    for name, value in edits:
        at = [i for i, e in enumerate(out) if e.get("name") == name]
        ref = next((out[i] for i in at if "valueFrom" in out[i]), None)
        if ref is not None:
            raise ArgsError(f"{name} comes from {_value_from(ref)} (valueFrom) in the container's env: kvtui does not "
                            "replace or remove a reference to a Secret, ConfigMap or field; change the manifest")
        old = plain_env(out[i] for i in at).get(name) if at else None
        if value is None:
            if not at:
                more = (" (its envFrom ConfigMap / Secret, or the image, may still set it)" if site.from_sources
                        else " (the image may still set it)")
                raise ArgsError(f"--unsetenv {name}: {name} is not in the container's env list{more}")
            out = [e for e in out if e.get("name") != name]
            changes.append(EditedEnvEntry(name, "remove", old, None, at[0] + 1))
        elif at:
            if old == value:
                changes.append(EditedEnvEntry(name, "unchanged", old, value, at[-1] + 1))
                continue
            for i in at:
                out[i]["value"] = value
            changes.append(EditedEnvEntry(name, "set", old, value, at[-1] + 1))
        else:
            out.append({"name": name, "value": value})
            changes.append(EditedEnvEntry(name, "add", None, value, len(out)))
    return out, changes


def env_patch_ops(site: EnvSite, entries: Sequence[EnvVar]) -> list[dict[str, object]]:
    """JSON-patch operations that make ``site``'s env list ``entries`` (after a ``test`` that it
    still holds what kvtui read, as for the args)."""
    new = [e.copy() for e in entries]
    if [e.copy() for e in site.entries] == new:
        return []
    if site.entries:
        return [{"op": "test", "path": site.path, "value": [e.copy() for e in site.entries]},
                {"op": "replace", "path": site.path, "value": new}]
    return [{"op": "add", "path": site.path, "value": new}]


def env_values(obj: Controller, container: str | None) -> list[tuple[str, list[EnvVar]]]:
    """(path, entries) of every env site, to compare two reads of an object."""
    return [(s.path, [e.copy() for e in s.entries]) for s in container_env(obj, container)]


def yaml_env(entries: Sequence[EnvVar], indent: int = 0) -> list[str]:
    """``env:`` and the entries as YAML (``- name: X`` / ``value: "…"``; a ``valueFrom`` as JSON,
    which is YAML too)."""
    pad = " " * indent
    out = [f"{pad}env:"]
    for e in entries:
        out.append(f"{pad}- name: {e.get('name')}")
        if "valueFrom" in e:
            out.append(f"{pad}  valueFrom: {json.dumps(e['valueFrom'], sort_keys=True)}")
        else:
            out.append(f"{pad}  value: {json.dumps(str(e.get('value') or ''))}")
    return out


# -- kubectl's errors ------------------------------------------------------------------------------

# a klog line of kubectl's client-go (``E1207 15:00:00.123456   12345 memcache.go:265] "Unhandled
# Error" err=…``): its diagnostics, printed before kubectl's own one-line error
_KLOG_RE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.-]+:\d+\] ")


def kubectl_error(stderr: str) -> str:
    """kubectl's own error from its stderr: the first line that is not client-go's klog output
    (an unreachable cluster prints several ``E… memcache.go:265] "Unhandled Error"`` lines, then
    ``The connection to the server … was refused - did you specify the right host or port?``);
    the first klog line when there is nothing else; "" for none."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return next((ln for ln in lines if not _KLOG_RE.match(ln)), lines[0] if lines else "")


# -- logs: resume after a drop without a repeated line -----------------------------------------

_TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")


def split_stamp(line: str) -> tuple[str, int, str] | None:
    """``2026-12-01T15:30:00.12Z text`` -> (stamp as printed, sort key in ns of the second, text).
    kubelet stamps are RFC 3339 with up to 9 fraction digits (trailing zeros trimmed), so they do
    not sort as text; the key does (zone ``Z`` is what the kubelet prints; others keep their own
    order)."""
    m = _TS_RE.match(line)
    if m is None:
        return None
    frac = int((m.group(2) or "").ljust(9, "0") or 0)
    sec = m.group(1)
    key = int(sec[:4] + sec[5:7] + sec[8:10] + sec[11:13] + sec[14:16] + sec[17:19]) * 1_000_000_000 + frac
    return line[: m.end() - 1], key, line[m.end():]


@dataclass
class LogResume:
    """Where a ``kubectl logs -f --timestamps`` stream got to, so that the next one (after a drop)
    starts there (``since_time``) and repeats nothing: lines stamped before the last one are old;
    at the last stamp, as many copies of a text as were already taken are skipped."""

    last_stamp: str | None = None
    last_key: int = -1
    taken_at_last: Counter[str] = field(default_factory=Counter)
    _skip: Counter[str] = field(default_factory=Counter)

    def since_time(self) -> str | None:
        """``--since-time`` for the next stream (the last stamp: the kubelet may send lines of the
        same second again; ``accept`` drops them)."""
        return self.last_stamp

    def resumed(self) -> None:
        """A new stream starts: at the last stamp, skip what was already taken."""
        self._skip = Counter(self.taken_at_last)

    def accept(self, line: str) -> tuple[str, str] | None:
        """(stamp, text) for a new line, None for one already taken; a line without a stamp (a
        wrapped continuation) is passed as ("", line)."""
        got = split_stamp(line)
        if got is None:
            return "", line
        stamp, key, text = got
        if key < self.last_key:
            return None
        if key == self.last_key:
            if self._skip[text] > 0:
                self._skip[text] -= 1
                return None
            self.taken_at_last[text] += 1
            return stamp, text
        self.last_key = key
        self.last_stamp = stamp
        self.taken_at_last = Counter({text: 1})
        self._skip.clear()
        return stamp, text


# -- the container's command line as text (what kvtui.flags edits) and back ---------------------

_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}


class ArgsError(ValueError):
    """The container's command line cannot be edited as asked (says why and what to do)."""


@dataclass(frozen=True, slots=True)
class ArgsText:
    """One ``ArgsSite`` as the text ``kvtui.flags`` edits (kind ``script``): a shell script run
    with ``sh -c`` is the script itself; an exec-form command line is its words, shell-quoted."""

    site: ArgsSite
    text: str
    shell_at: int | None  # index (in command + args) of the ``sh -c`` script, None: exec form

    @property
    def words(self) -> tuple[str, ...]:
        return (*self.site.command, *self.site.args)


def args_text(site: ArgsSite) -> ArgsText:
    words = (*site.command, *site.args)
    for i in range(1, len(words) - 1):
        if words[i] == "-c" and words[i - 1].rsplit("/", 1)[-1] in _SHELLS:
            return ArgsText(site, words[i + 1], i + 1)
    if not words:
        raise ArgsError("the container has neither command nor args (the image's entrypoint runs): kvtui "
                        "edits the server's flags in the container's args; put the server command there")
    return ArgsText(site, shlex.join(words), None)


def args_values(at: ArgsText, new_text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(command, args) that say ``new_text``: the script replaced in place, or the new words
    split with the command's own words kept as the command (an edit never touches them)."""
    site = at.site
    n_cmd = len(site.command)
    if at.shell_at is not None:
        words = list(at.words)
        words[at.shell_at] = new_text
        return tuple(words[:n_cmd]), tuple(words[n_cmd:])
    try:
        words = shlex.split(new_text)
    except ValueError as exc:
        raise ArgsError(f"the edited command line does not split into words: {exc}") from exc
    if site.args or not site.command:
        if tuple(words[:n_cmd]) != site.command:
            raise ArgsError("the edit would change the container's command (" + shlex.join(site.command) +
                            "); kvtui edits its args only")
        return site.command, tuple(words[n_cmd:])
    return tuple(words), ()  # everything is in command: it is what changes


def patch_ops(site: ArgsSite, command: Sequence[str], args: Sequence[str]) -> list[dict[str, object]]:
    """JSON-patch operations that turn ``site`` into (command, args): each field replaced, after a
    ``test`` that it still holds what kvtui read (the API server refuses the whole patch if not:
    nothing changes behind an edit that was planned on other args)."""
    ops: list[dict[str, object]] = []
    base = site.path.rsplit("/", 1)[0]
    for fld, old, new in (("command", site.command, tuple(command)), ("args", site.args, tuple(args))):
        if old == new:
            continue
        path = f"{base}/{fld}"
        if old:
            ops.append({"op": "test", "path": path, "value": list(old)})
            ops.append({"op": "replace", "path": path, "value": list(new)})
        else:
            ops.append({"op": "add", "path": path, "value": list(new)})
    return ops


def yaml_list(key: str, words: Sequence[str], indent: int) -> list[str]:
    """``key:`` and a YAML block list of ``words`` (JSON strings are YAML strings)."""
    pad = " " * indent
    return [f"{pad}{key}:", *(f"{pad}- {json.dumps(w)}" for w in words)]


def chart_patch(kind: str, name: str, container: str | None, changed: Sequence[tuple[ArgsSite, Sequence[str],
                                                                                         Sequence[str]]]) -> str:
    """What to commit to the chart / repo instead of a direct patch: for every pod template that
    changes, its path and the container's new command / args as YAML."""
    out = [f"# {kind}/{name}: commit this to the chart or repository that renders it"]
    for site, command, args in changed:
        tmpl = site.path.rsplit("/spec/containers/", 1)[0].strip("/").replace("/", ".")
        out.append(f"# {tmpl}.spec.containers[name={container or '(first)'}]")
        if tuple(command) != site.command:
            out.extend(yaml_list("command", command, 0))
        out.extend(yaml_list("args", args, 0))
    return "\n".join(out)


def site_values(obj: Controller, container: str | None) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(path, command, args) of every site, to compare two reads of an object."""
    return [(s.path, s.command, s.args) for s in container_args(obj, container)]
