"""``kvtui hosts [--check] [--connect]``: list and validate the inventory.

- plain: the hosts table (name, kind, target, what it follows, GPUs, notes) on stdout;
- ``--check``: also offline checks beyond the schema (identity files exist; a disabled host-key
  check is flagged; ``[ui] theme`` names a theme the console offers and every ``[keymap]`` id a
  binding it has, checked with the console's own lists, so nothing the console would reject at
  start passes here) — exit 3 on any problem, every message on stderr; with ``[prometheus]``, also
  reach it and say what it scrapes (targets, DCGM GPUs, vLLM and SGLang instances; ``kvtui.fleet``);
- ``--connect``: also reach every host at once (SSH through ``SshBackend`` with one probe round
  trip: login user, GPUs, the unit / log file / container it follows; demo and local hosts
  through ``kvtui.hosts.factory``), one result line per host; exit 3 when any is unreachable.

A hosts file that does not validate exits 3 with all of its problems.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from kvtui.config import DemoHost, SshHost, format_value, load_config_or_say, search_locations
from kvtui.exits import EXIT_INPUT, EXIT_OK
from kvtui.fleet.client import PromClient, PromError
from kvtui.fleet.rows import fetch_summary
from kvtui.hosts import shellcmd as C
from kvtui.hosts.backend import BackendError, ConnState
from kvtui.hosts.factory import make_backend
from kvtui.hosts.shellcmd import server_pid_file
from kvtui.lazy import lazy_module

if TYPE_CHECKING:
    from kvtui.config import Config, HostConfig
    from kvtui.hosts.backend import HostBackend
    from kvtui.ui import app as ui_app
    from kvtui.ui import themes as ui_themes
else:
    ui_app = lazy_module("kvtui.ui.app")  # lazy: --check only: (textual) `kvtui hosts` +744 ms CPU
    ui_themes = lazy_module("kvtui.ui.themes")  # lazy: --check only: +113 ms CPU

CONNECT_TIMEOUT_S = 20.0


def format_gpus(gpus: Sequence[int] | None) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``0-3,6``; None -> ``all``."""
    if gpus is None:
        return "all"
    parts: list[str] = []
    run: list[int] = []
    for g in sorted(gpus):
        if run and g == run[-1] + 1:
            run.append(g)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [g]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def host_notes(name: str, host: HostConfig, config: Config) -> list[str]:
    notes: list[str] = []
    if host.readonly:
        notes.append("readonly")
    if isinstance(host, DemoHost):
        notes.append(f"{host.demo_engine}, speed {host.demo_speed:g}x")
        if host.demo_model:
            notes.append(host.demo_model)
    else:
        if host.sudo:
            notes.append("sudo")
        if isinstance(host, SshHost) and not host.strict_host_key:
            notes.append("HOST KEY NOT CHECKED")
        if host.engine != "auto":
            notes.append(host.engine)
        if host.start_command:
            notes.append("start/stop commands")
        if host.launch_script:
            notes.append(f"script {host.launch_script}")
    if name == "demo" and "demo" not in config.hosts:
        notes.append("built in")
    return notes


def liveness_source(host: HostConfig) -> str:
    """How kvtui sees that this host's server process is gone (``hosts --check`` says it)."""
    if host.demo:
        return "the simulated unit (systemd's lines)"
    if host.kind == "kube":
        return "the pod's container status: a restart reads the crashed container's log (--previous) and how it ended"
    if host.log_source == "journal":
        return f"systemd's own lines in the journal of {host.unit}"
    if host.log_source == "docker":
        return f"the state of container {host.container} when its log ends"
    found = server_pid_file(host.pid_file, host.start_command, host.stop_command)
    if found is None:
        return ("none: no pid file is known (set pid_file, or a start_command that writes one: "
                "... & echo $! > FILE); a server that dies is seen only by what its log says")
    path, how = found
    where = {"pid_file": "the pid_file key", "start_command": "the pid file start_command writes",
             "stop_command": "the pid file stop_command reads"}[how]
    return f"{where}: {path}"


def render_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)


def offline_problems(config: Config) -> tuple[list[str], list[str]]:
    """(problems, warnings) that the schema cannot see: files on this machine."""
    problems: list[str] = []
    warnings: list[str] = []
    where = str(config.path) if config.path else "hosts.toml"
    for name, host in config.hosts.items():
        if host.kind != "ssh":
            continue
        ident = host.identity_path
        if ident is not None and not ident.is_file():
            problems.append(f"{where}: [hosts.{name}] identity_file = \"{host.identity_file}\": "
                            f"expected an existing private key file ({ident} not found)")
        kh = host.known_hosts_path
        if kh is not None and host.strict_host_key and not kh.exists():
            warnings.append(f"{where}: [hosts.{name}] known_hosts = \"{host.known_hosts}\": {kh} does not exist "
                            "yet; the first connection will show the host key to trust")
        if not host.strict_host_key:
            warnings.append(f"{where}: [hosts.{name}] strict_host_key = false: the host's identity is not "
                            "checked (anyone on the path can pose as it)")
    return problems, warnings


def deployment_warnings(config: Config) -> list[str]:
    """What ``--check`` says about ``[deployments.*]`` beyond the schema (which already refused
    unknown nodes, a host in two roles and mixed engines): nodes that differ where they should
    not (``readonly`` on some nodes only, different GPU selections)."""
    where = str(config.path) if config.path else "hosts.toml"
    out: list[str] = []
    for name in config.deployments:
        nodes = config.node_hosts(name)
        ro = [n for n, h in nodes if h.readonly]
        if ro and len(ro) != len(nodes):
            out.append(f"{where}: [deployments.{name}] nodes: {', '.join(ro)} readonly, the others not: an edit "
                       "of the deployment is refused as a whole")
        gpus = {n: format_gpus(h.gpus) for n, h in nodes}
        if len(set(gpus.values())) > 1:
            said = ", ".join(f"{n} {g}" for n, g in gpus.items())
            out.append(f"{where}: [deployments.{name}] nodes select different GPUs ({said}): the engine "
                       "expects the same GPU count on every node")
    return out


def console_problems(config: Config) -> tuple[list[str], list[str]]:
    """(problems, warnings) the console would report at start: ``[ui] theme`` not among the themes
    it offers, a ``[keymap]`` id it has no binding for (problems); a theme file it cannot use
    (warnings: the console falls back to its default theme)."""
    where = str(config.path) if config.path else "hosts.toml"
    problems: list[str] = []
    loaded = ui_themes.load_themes()
    warnings = [f"{p} (the console reports it and does not offer that theme)" for p in loaded.problems]
    names = ui_themes.accepted_theme_names(loaded)
    theme = config.ui.theme
    if theme not in names:
        close = difflib.get_close_matches(theme, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        problems.append(f"{where}: [ui] theme = {format_value(theme)}: expected one of the themes "
                        f"{', '.join(names)}{hint}")
    ids = ui_app.KvtuiApp.binding_ids()
    for bid, keys in config.keymap.items():
        if bid not in ids:
            close = difflib.get_close_matches(bid, ids, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(f"{where}: [keymap] {bid} = {format_value(keys)}: expected a binding id, one of "
                            f"{', '.join(sorted(ids))}{hint}")
    return problems, warnings


def check_prometheus(config: Config, err: TextIO) -> str | None:
    """``[prometheus]``: reach it once and say what it scrapes; the problem's text when it cannot be read."""
    assert config.prometheus is not None
    try:
        s = fetch_summary(PromClient(config.prometheus))
    except PromError as exc:
        print(f"kvtui hosts: [prometheus] {exc}", file=err)
        return f"[prometheus] {exc}"
    print(f"kvtui hosts: [prometheus] {config.prometheus.url}: {s.targets} scrape target(s), "
          f"{s.dcgm_gpus} DCGM GPU(s), {s.vllm} vLLM and {s.sglang} SGLang instance(s) "
          f"({s.seconds * 1000:.0f} ms)", file=err)
    return None


@dataclass
class ConnectResult:
    name: str
    ok: bool
    summary: str


async def _probe_ssh(backend: HostBackend, host: SshHost) -> str:
    res = await backend.run(C.probe_host(unit=host.unit, log_file=host.log_file, container=host.container,
                                         sudo=host.sudo), timeout=CONNECT_TIMEOUT_S)
    info = C.parse_probe(res.stdout)
    parts = []
    gpus = info.get("gpus", "?")
    parts.append("no nvidia-smi" if gpus == "none" else f"{gpus} GPUs")
    if host.unit:
        load, _, active = info.get("unit", "/").partition("/")
        if load == "not-found" or not load:
            parts.append(f"unit {host.unit} NOT FOUND")
        else:
            parts.append(f"unit {host.unit} {active or '?'}")
        if info.get("journal") == "denied":
            parts.append("journal NOT READABLE (sudo = true, or the systemd-journal group)")
    if host.log_file:
        log = info.get("log", "missing")
        parts.append(f"log {host.log_file} {'(' + log + ' bytes)' if log.isdigit() else log.upper()}")
    if host.container:
        parts.append(f"container {host.container} {info.get('container', 'missing')}")
    return ", ".join(parts)


def _probe_ok(summary: str) -> bool:
    return not any(bad in summary for bad in ("NOT FOUND", "MISSING", "UNREADABLE", "NOT READABLE"))


async def connect_one(name: str, host: HostConfig) -> ConnectResult:
    backend = make_backend(name, host)
    try:
        try:
            await asyncio.wait_for(backend.start(), CONNECT_TIMEOUT_S)
        except BackendError as exc:
            return ConnectResult(name, False, str(exc))
        except TimeoutError:
            return ConnectResult(name, False, f"no answer within {CONNECT_TIMEOUT_S:g} s")
        st = backend.status()
        if st.state is ConnState.RECONNECTING:
            return ConnectResult(name, False, f"unreachable: {st.detail or 'no connection'}")
        if st.state is not ConnState.CONNECTED:
            return ConnectResult(name, False, f"{st.state.value}: {st.detail}".rstrip(": "))
        if isinstance(host, SshHost):
            try:
                summary = await _probe_ssh(backend, host)
            except BackendError as exc:
                return ConnectResult(name, False, f"connected, but the probe failed: {exc}")
            return ConnectResult(name, _probe_ok(summary), f"{st.detail}: {summary}")
        return ConnectResult(name, True, st.detail or st.state.value)
    finally:
        try:
            await asyncio.wait_for(backend.close(), 10)
        except (TimeoutError, BackendError):
            pass


async def connect_all(config: Config, names: list[str]) -> list[ConnectResult]:
    return list(await asyncio.gather(*(connect_one(n, config.host(n)) for n in names)))


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    config = load_config_or_say(getattr(args, "hosts", None), err, who="kvtui hosts")
    if config is None:
        return EXIT_INPUT
    names = config.names()
    rows = [["NAME", "KIND", "TARGET", "FOLLOWS", "GPUS", "NOTES"]]
    for name in names:
        host = config.host(name)
        rows.append([name, host.kind, host.target, host.source_label or "-", format_gpus(host.gpus),
                     ", ".join(host_notes(name, host, config))])
    print(render_table(rows), file=out)
    if config.deployments:
        drows = [["DEPLOYMENT", "NODES (rank: host)", "HANG BOUND"]]
        for dname, dep in config.deployments.items():
            drows.append([dname, ", ".join(f"{i}: {n}" for i, n in enumerate(dep.nodes)), f"{dep.hang_seconds:g} s"])
        print("", file=out)
        print(render_table(drows), file=out)
    if config.path is None:
        print("kvtui hosts: no hosts file found (looked at " + ", ".join(search_locations()) + "); "
              "only the built-in demo host exists", file=err)
    code = EXIT_OK
    if getattr(args, "check", False) or getattr(args, "connect", False):
        problems, warnings = offline_problems(config)
        ui_problems, ui_warnings = console_problems(config)
        problems += ui_problems
        warnings += ui_warnings + deployment_warnings(config)
        for w in warnings:
            print(f"kvtui hosts: warning: {w}", file=err)
        for p in problems:
            print(f"kvtui hosts: {p}", file=err)
        if getattr(args, "check", False):
            for name in names:
                print(f"kvtui hosts: {name}: server liveness: {liveness_source(config.host(name))}", file=err)
        if getattr(args, "check", False) and config.prometheus is not None:
            prom_problem = check_prometheus(config, err)
            if prom_problem:
                problems.append(prom_problem)
        if problems:
            code = EXIT_INPUT
        elif getattr(args, "check", False):
            where = config.path or "defaults"
            deps = f", {len(config.deployments)} deployment(s)" if config.deployments else ""
            built_in = len(names) - len(config.hosts)  # the demo host, unless the file defines it
            extra = f" ({built_in} built in)" if built_in > 0 else ""
            print(f"kvtui hosts: {where}: {len(names)} host(s){extra}{deps} OK", file=err)
    if getattr(args, "connect", False):
        results = asyncio.run(connect_all(config, names))
        width = max(len(r.name) for r in results)
        for r in results:
            print(f"{'ok  ' if r.ok else 'FAIL'}  {r.name.ljust(width)}  {r.summary}", file=out)
        if not all(r.ok for r in results):
            code = EXIT_INPUT
    return code
