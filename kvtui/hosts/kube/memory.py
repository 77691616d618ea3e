"""A kube host's controller remembered across runs (state_dir()/kube-hosts/, one small JSON file
per context/namespace/pod): the kind, name and selector of what owns the pod, so a pod replaced
while kvtui was not running is found again by its controller's selector."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from kvtui.config import state_dir
from kvtui.hosts.kube import kubectl_argv as K


def _memory_path(ref: K.PodRef) -> Path:
    key = f"{ref.context or '(current)'}/{ref.namespace}/{ref.pod}"
    return state_dir() / "kube-hosts" / (key.replace("%", "%25").replace("/", "%2F").replace(":", "%3A") + ".json")


def remember_controller(ref: K.PodRef, kind: str, name: str, selector: str) -> None:
    path = _memory_path(ref)
    doc = {"kind": kind, "name": name, "selector": selector}
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()) == doc:
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{id(doc)}")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def recall_controller(ref: K.PodRef) -> tuple[str, str, str] | None:
    try:
        doc = json.loads(_memory_path(ref).read_text())
        kind, name, sel = str(doc["kind"]), str(doc["name"]), K.check_selector(str(doc["selector"]))
    except (OSError, ValueError, KeyError, TypeError, K.KubeRefError):
        return None
    return kind, name, sel
