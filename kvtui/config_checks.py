"""Checks of single ``hosts.toml`` values and per-kind host rules that need nothing of the
config's models: ``gpus`` lists (``parse_gpus``), a kube host's target, and a demo host's
``gpus`` / ``demo_model`` / ``demo_node`` against the simulated presets. ``kvtui.config`` uses
them (its field validators and ``host_rule_problems``); the rules return problems as
``(key, expected, value)`` tuples and raise nothing."""

from __future__ import annotations

import re
from collections.abc import Mapping

from kvtui.kube_ref import KubeRefError, parse_service_url, parse_target
from kvtui.sim.presets import DEMO_ENGINES, DEMO_GPU_COUNT, PRESET_NODES, PresetError, resolve_preset_name

_GPU_LIST_RE = re.compile(r"^\s*\d+\s*(?:-\s*\d+\s*)?(?:,\s*\d+\s*(?:-\s*\d+\s*)?)*$")
MAX_GPUS = 1024
_GPUS_EXPECTED = 'expected GPU indices as "0-3", "0,2,4" or a list of integers like [0, 1, 2]'


def parse_gpus(value: object) -> list[int] | None:
    """``"0-3"`` / ``"0,2,4"`` / ``"0-1,6"`` / ``[0, 2]`` / ``None`` -> sorted unique indices.
    Raises ``ValueError`` with the expected form."""
    if value is None:
        return None
    if isinstance(value, str):
        if not _GPU_LIST_RE.match(value):
            raise ValueError(_GPUS_EXPECTED)
        out: list[int] = []
        for part in value.split(","):
            lo, _, hi = part.partition("-")
            a = int(lo)
            b = int(hi) if hi.strip() else a
            if b < a:
                raise ValueError(f'expected a rising range like "0-3", got "{part.strip()}"')
            if b >= MAX_GPUS:
                raise ValueError(f"expected GPU indices below {MAX_GPUS}")
            out.extend(range(a, b + 1))
        values = out
    elif isinstance(value, list):
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError(_GPUS_EXPECTED)
        values = list(value)
    else:
        raise ValueError(_GPUS_EXPECTED)
    if any(v < 0 or v >= MAX_GPUS for v in values):
        raise ValueError(f"expected GPU indices from 0 to {MAX_GPUS - 1}")
    if len(set(values)) != len(values):
        raise ValueError("expected each GPU index once")
    return sorted(values)


def kube_target(v: str) -> str:
    expected = ('expected "CONTEXT/NAMESPACE/POD" (or "CONTEXT/NAMESPACE" with selector = "…"; an empty '
                'CONTEXT is the current one)')
    if not v or any(c.isspace() or ord(c) < 32 for c in v) or v.startswith("-") or v.count("/") < 1:
        raise ValueError(expected)
    return v


def kube_target_problems(given: Mapping[str, object]) -> list[tuple[str | None, str, object]]:
    """``kube`` is CONTEXT/NAMESPACE/POD, or CONTEXT/NAMESPACE with a ``selector`` (names as
    Kubernetes allows them: the same check as the kubectl argv builder's)."""
    target, selector, container = given.get("kube"), given.get("selector"), given.get("container")
    if not isinstance(target, str) or (selector is not None and not isinstance(selector, str)):
        return []
    try:
        kube_target(target)
    except ValueError:
        return []  # the field's own error
    try:
        parse_target(target, selector=selector, container=container if isinstance(container, str) else None)
    except KubeRefError as exc:
        return [("kube", str(exc), target)]
    url = given.get("gpu_metrics_url")
    if isinstance(url, str):
        try:
            parse_service_url(url)
        except KubeRefError as exc:
            return [("gpu_metrics_url", str(exc), url)]
    return []


def demo_gpu_problems(given: Mapping[str, object]) -> list[tuple[str | None, str, object]]:
    """A demo host simulates ``DEMO_GPU_COUNT`` GPUs: ``gpus`` must be among them."""
    raw = given.get("gpus")
    try:
        gpus = parse_gpus(raw)
    except ValueError:
        return []  # the field's own error
    if gpus and max(gpus) >= DEMO_GPU_COUNT:
        return [("gpus", f"expected GPU indices 0-{DEMO_GPU_COUNT - 1} (the demo host has {DEMO_GPU_COUNT} GPUs)",
                 raw)]
    return []


def demo_preset_problems(given: Mapping[str, object]) -> list[tuple[str | None, str, object]]:
    """``demo_model`` must name a simulated deployment of ``demo_engine`` (what the demo host will
    resolve at start). Values of the wrong type are the fields' own errors, not repeated here."""
    model = given.get("demo_model")
    engine = given.get("demo_engine", "sglang")
    if engine not in DEMO_ENGINES or (model is not None and not isinstance(model, str)):
        return []
    if not isinstance(model, str) or not model.strip():
        return _demo_node_problems(given, resolve_preset_name(None, str(engine)))
    try:
        resolve_preset_name(model, str(engine))
    except PresetError as exc:
        # the problem, minus the "demo_model '…'" the message's prefix already shows
        problem = exc.problem.replace(f"demo_model '{model}' ", "", 1)
        if "demo_engine" not in given and problem.endswith(f"demo_engine is '{engine}'"):
            problem += " (the default)"
        return [("demo_model", f"{problem}; {exc.expected}", model)]
    return _demo_node_problems(given, resolve_preset_name(model, str(engine)))


def _demo_node_problems(given: Mapping[str, object], preset: str) -> list[tuple[str | None, str, object]]:
    """``demo_node`` / ``demo_stall_node`` name a node of a multi-node preset (``PRESET_NODES``)."""
    out: list[tuple[str | None, str, object]] = []
    nnodes = PRESET_NODES.get(preset, 1)
    for key in ("demo_node", "demo_stall_node"):
        value = given.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            continue  # absent, or the field's own error
        if nnodes == 1:
            multi = ", ".join(PRESET_NODES)
            out.append((key, f"only for a multi-node demo_model ({multi}); {preset} runs on one host", value))
        elif value >= nnodes:
            out.append((key, f"expected a node of {preset}: 0-{nnodes - 1}", value))
    return out
