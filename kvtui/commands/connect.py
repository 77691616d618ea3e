"""``kvtui connect HOST [HOST…] [--readonly]``: the live console; ``kvtui connect --bundle FILE``:
the same console over a recorded boot (``kvtui.hosts.bundle``: read-only, nothing recorded).

Textual and the hosts layer are imported here, when the command runs (``kvtui.cli.COMMANDS``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtui.config import ConfigError, LocalHost, load_config_or_say
from kvtui.exits import EXIT_INPUT, EXIT_OK, EXIT_USAGE
from kvtui.hosts.bundle import BundleBackend, BundleError, load_bundle
from kvtui.hosts.factory import make_backend
from kvtui.lazy import lazy_module
from kvtui.ui.app import KvtuiApp
from kvtui.ui.host_pane import HostSpec

if TYPE_CHECKING:
    from kvtui.commands import bundle as console_bundle
    from kvtui.config import Config
else:
    console_bundle = lazy_module("kvtui.commands.bundle")  # lazy: imports kvcalc (test_ui_startup): +62 ms CPU


def expand_names(config: Config, names: list[str]) -> list[str]:
    """The hosts to open: a ``[deployments.NAME]`` opens each of its nodes (one tab per node, in
    node-rank order; ``KvtuiApp``'s ``deployments`` groups them); the same host twice opens one tab."""
    out: list[str] = []
    for name in names:
        dep = config.deployment(name)
        out.extend(dep.nodes if dep is not None else [name])
    return list(dict.fromkeys(out))


def bundle_app(path: str, config: Config, *, readonly: bool = False, **options: Any) -> KvtuiApp:
    """The console over a bundle's recorded boot (raises ``BundleError`` naming the file): one
    pane named after the bundle's host (``HOST-bundle``), its backend the bundle, no history
    recorded, no readiness probe; edits and restarts are refused by the backend with the reason."""
    bundle = load_bundle(path)
    name = f"{bundle.host}-bundle" if re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", bundle.host) else "bundle"
    host = LocalHost(local=True, log_file=str(bundle.path), probe=False)

    def factory(n: str, _host: object, **_kw: object) -> BundleBackend:
        return BundleBackend(n, bundle.path, bundle=bundle)

    async def _recorded(pane: Any, svg: str) -> Path:
        raise ValueError(f"{pane.host_name} is a recorded boot already: its bundle is {bundle.path}")

    return KvtuiApp([HostSpec(name, host)], backend_factory=factory, config=config, readonly=readonly,
                    record_history=False, bundle_writer=_recorded, **options)


def run(args: argparse.Namespace) -> int:
    bundle = getattr(args, "bundle", None)
    if bundle and args.host:
        print("kvtui connect: --bundle FILE opens a recorded boot: give no HOST with it", file=sys.stderr)
        return EXIT_USAGE
    config = load_config_or_say(args.hosts, sys.stderr, who="kvtui")
    if config is None:
        return EXIT_INPUT
    if not bundle and not args.host:
        if config.prometheus is None:
            print("kvtui connect: name a HOST (see kvtui hosts), or --bundle FILE.tar.gz (with a [prometheus] in "
                  "hosts.toml and no HOST: the fleet screen)", file=sys.stderr)
            return EXIT_USAGE
        # no HOST and a [prometheus]: the fleet screen alone (enter opens a host's console over it)
        code = KvtuiApp([], backend_factory=make_backend, config=config, readonly=args.readonly, freeze_gc=True,
                        probe_ready=True, theme=getattr(args, "theme", None)).run()
        return EXIT_OK if code is None else int(code)
    if bundle:
        try:
            app = bundle_app(bundle, config, readonly=args.readonly, freeze_gc=True, theme=getattr(args, "theme", None))
        except BundleError as exc:
            print(f"kvtui connect: {exc}", file=sys.stderr)
            return EXIT_INPUT
        code = app.run()
        return EXIT_OK if code is None else int(code)

    specs: list[HostSpec] = []
    try:
        names = expand_names(config, list(args.host))
        for name in names:
            specs.append(HostSpec(name, config.host(name)))
    except ConfigError as exc:
        print(f"kvtui: {exc}", file=sys.stderr)
        return EXIT_INPUT

    app = KvtuiApp(specs, backend_factory=make_backend, config=config, readonly=args.readonly, freeze_gc=True,
                   probe_ready=True, bundle_writer=console_bundle.write_console_bundle,
                   theme=getattr(args, "theme", None),
                   deployments=[n for n in args.host if config.deployment(n) is not None])
    code = app.run()
    return EXIT_OK if code is None else int(code)
