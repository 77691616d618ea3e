"""Drilling into one fleet row (the console's fleet screen, issue 26): which hosts.toml host serves
it (``host_for``: an explicit ``prometheus_instance`` key, else an SSH host whose address is the
instance's), and, for an instance no host names, its last hour from ``query_range``
(``fetch_history``: KV usage, running / queued, generated tokens per second, GPU memory) and the
hosts.toml lines to paste (``hosts_hint``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from kvtui.config import HostConfig, SshHost
from kvtui.fleet.client import PromClient, Series
from kvtui.fleet.rows import FleetRow, host_of

HISTORY_S = 3600.0  # the instance view's span: the last hour
HISTORY_POINTS = 240  # points per series (a 15 s step over the hour; Prometheus allows 11,000)


def host_for(instance: str, hosts: Mapping[str, HostConfig]) -> str | None:
    """The hosts.toml host that serves ``instance`` (a row's ``instance`` label): one whose
    ``prometheus_instance`` is that label (or its address, any port), else an SSH host whose
    address is the instance's; None when no host does."""
    addr = host_of(instance)
    for name, host in hosts.items():
        if host.prometheus_instance is not None and host.prometheus_instance in (instance, addr):
            return name
    for name, host in hosts.items():
        if host.prometheus_instance is None and isinstance(host, SshHost) and host.ssh_host == addr:
            return name
    return None


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def history_queries(row: FleetRow) -> dict[str, str]:
    """One range query per plotted series of ``row``'s instance (its job and instance labels)."""
    target = f'job="{_label(row.job)}",instance="{_label(row.instance)}"'
    if row.engine == "vllm":
        kv = f"max(vllm:kv_cache_usage_perc{{{target}}} or vllm:gpu_cache_usage_perc{{{target}}})"
        running = f"sum(max by (engine) (vllm:num_requests_running{{{target}}}))"
        queued = f"sum(max by (engine) (vllm:num_requests_waiting{{{target}}}))"
        tokens = f"sum(rate(vllm:generation_tokens_total{{{target}}}[1m]))"
    else:
        kv = f"max(sglang:token_usage{{{target}}})"
        running = f"sum(max by (dp_rank) (sglang:num_running_reqs{{{target}}}))"
        queued = f"sum(max by (dp_rank) (sglang:num_queue_reqs{{{target}}}))"
        tokens = f"sum(max by (dp_rank) (sglang:gen_throughput{{{target}}}))"
    # the DCGM exporter on the instance's address (any port); a raw `…` string: the regex's escapes as they are
    gpu_host = f"instance=~`{re.escape(row.host).replace('`', '')}(:[0-9]+)?`"
    return {
        "kv": f"100 * {kv}",
        "running": running,
        "queued": queued,
        "tokens": tokens,
        "gpu_mem": f"max(DCGM_FI_DEV_FB_USED{{{gpu_host}}}) / 1024",
    }


@dataclass(frozen=True)
class InstanceHistory:
    """An instance's last hour: per series (``history_queries``' names) its (unix time, value) points
    (empty: Prometheus has none), and the span read."""

    start: float
    end: float
    series: dict[str, list[tuple[float, float]]]


def fetch_history(client: PromClient, row: FleetRow, now: float | None = None,
                  span: float = HISTORY_S) -> InstanceHistory:
    """The last ``span`` seconds of ``row``'s series, one range query each (``PromError`` if any
    could not be read)."""
    end = time.time() if now is None else now
    start = end - span
    step = max(1.0, span / HISTORY_POINTS)
    out: dict[str, list[tuple[float, float]]] = {}
    for name, expr in history_queries(row).items():
        got: list[Series] = client.query_range(expr, start, end, step)
        out[name] = [p for s in got[:1] for p in s.points]
    return InstanceHistory(start, end, out)


def hosts_hint(row: FleetRow, name: str | None = None) -> str:
    """The hosts.toml lines that make ``row`` a host of the console (Enter then opens its pane)."""
    base = name or re.sub(r"[^A-Za-z0-9_-]+", "-", row.host).strip("-") or "server"
    if not base[0].isalpha():
        base = f"h-{base}"
    engine = row.engine
    return (f'[hosts.{base}]\n'
            f'ssh = "USER@{row.host}"\n'
            f'unit = "{engine}.service"        # or log_file = / container =: what kvtui follows\n'
            f'engine = "{engine}"\n'
            f'prometheus_instance = "{row.instance}"')
