"""GPUs: the ``nvidia-smi`` queries."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kvtui.hosts.shellcmd.base import guard

_FIELD_RE = re.compile(r"^[a-z_.]+$")


def _fields(fields: Sequence[str] | str) -> str:
    if isinstance(fields, str):
        fields = [f.strip() for f in fields.split(",")]
    for f in fields:
        if not _FIELD_RE.match(f):
            raise ValueError(f"not an nvidia-smi field: {f!r}")
    return ",".join(fields)


def nvidia_smi_query_gpu(fields: Sequence[str] | str, *, interval_ms: int | None = None) -> str:
    """``nvidia-smi --query-gpu=… --format=csv,noheader,nounits`` once, or as one long-lived
    stream with ``-lms N`` (guarded)."""
    cmd = f"nvidia-smi --query-gpu={_fields(fields)} --format=csv,noheader,nounits"
    if interval_ms is None:
        return cmd
    return guard(f"{cmd} -lms {max(10, int(interval_ms))}")


def nvidia_smi_compute_apps(fields: Sequence[str] | str) -> str:
    return f"nvidia-smi --query-compute-apps={_fields(fields)} --format=csv,noheader,nounits"
