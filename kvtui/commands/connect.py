"""``kvtui connect HOST [HOST…] [--readonly]``: the live console.

Textual and the hosts layer are imported only here, when the command runs.
"""

from __future__ import annotations

import argparse
import sys

from kvtui.exits import EXIT_INPUT, EXIT_OK


def run(args: argparse.Namespace) -> int:
    from kvtui.config import ConfigError, load_config

    try:
        config = load_config(args.hosts)
    except ConfigError as exc:
        print(f"kvtui: {exc}", file=sys.stderr)
        return EXIT_INPUT

    from kvtui.ui.host_pane import HostSpec

    specs: list[HostSpec] = []
    for name in dict.fromkeys(args.host):  # the same host twice opens one tab
        try:
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
