"""``kvtui connect HOST [HOST…] [--readonly]``: the live console.

Textual and the hosts layer are imported only here, when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kvtui.exits import EXIT_INPUT, EXIT_OK

if TYPE_CHECKING:
    from kvtui.config import Config


def expand_names(config: Config, names: list[str]) -> list[str]:
    """The hosts to open: a ``[deployments.NAME]`` among other names opens each of its nodes (one
    tab per node, in node-rank order; a deployment alone opens its one pane, ``run``); the same
    host twice opens one tab."""
    out: list[str] = []
    for name in names:
        dep = config.deployment(name)
        out.extend(dep.nodes if dep is not None else [name])
    return list(dict.fromkeys(out))


def run(args: argparse.Namespace) -> int:
    from kvtui.config import ConfigError, load_config

    try:
        config = load_config(args.hosts)
    except ConfigError as exc:
        print(f"kvtui: {exc}", file=sys.stderr)
        return EXIT_INPUT

    dep = config.deployment(args.host[0]) if len(args.host) == 1 else None
    if dep is not None:
        # one deployment: the console with its one pane (GPUs grouped by node, the merged boot and
        # log, the change keys acting on every node)
        from kvtui.hosts.factory import make_backend as _make
        from kvtui.ui.app import KvtuiApp as _App
        from kvtui.ui.deployment_screen import DeploymentSpec

        spec = DeploymentSpec(args.host[0], config.node_hosts(args.host[0]), dep.hang_seconds)
        code = _App([], backend_factory=_make, config=config, readonly=args.readonly, freeze_gc=True,
                    deployment=spec).run()
        return EXIT_OK if code is None else int(code)

    from kvtui.ui.host_pane import HostSpec

    specs: list[HostSpec] = []
    try:
        names = expand_names(config, list(args.host))
        for name in names:
            specs.append(HostSpec(name, config.host(name)))
    except ConfigError as exc:
        print(f"kvtui: {exc}", file=sys.stderr)
        return EXIT_INPUT

    from kvtui.hosts.factory import make_backend
    from kvtui.ui.app import KvtuiApp

    app = KvtuiApp(specs, backend_factory=make_backend, config=config, readonly=args.readonly, freeze_gc=True,
                   probe_ready=True)
    code = app.run()
    return EXIT_OK if code is None else int(code)
