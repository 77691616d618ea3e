"""``QuietStatic`` lives in ``kvtui.ui.perf`` with the console's other performance machinery;
this name stays importable from here."""

from kvtui.ui.perf import QuietStatic

__all__ = ["QuietStatic"]
