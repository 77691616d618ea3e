"""One module per CLI command, each exposing ``run(args: argparse.Namespace) -> int``.

Imported lazily by ``kvtui.cli`` so ``kvtui --help`` stays fast.
"""
