"""A module imported on first use, declared at the top of the module that uses it (issue 23).

A function-level ``import`` hides a dependency in a function's body; a start-up lazy instead says
what it loads, once, where a reader (and mypy) looks for dependencies::

    from typing import TYPE_CHECKING

    from kvtui.lazy import lazy_module

    if TYPE_CHECKING:
        from kvtui import kvcalc
    else:
        kvcalc = lazy_module("kvtui.kvcalc")  # lazy: <why, measured>

mypy reads the ``TYPE_CHECKING`` branch (the real module, its names typed); at run time the name is
a proxy that imports the module on its first attribute access and forwards every access to it from
then on (``kvcalc.predict`` is looked up on the real module each time, so a test's monkeypatch of
``kvtui.kvcalc.predict`` is seen as it was by a function-level import). Until that access nothing is
imported and nothing is put in ``sys.modules``. The allowance of these declarations and why each is
lazy: ``tests/test_import_hygiene.py`` (``LAZY_MODULES``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

_own = ModuleType.__getattribute__
_PROXY_ATTRS = frozenset({"__dict__", "__class__", "__name__"})  # what the proxy answers itself before the load


class LazyModule(ModuleType):
    """Stands for the module ``name`` until its first attribute access imports it; from then on it
    forwards every access (``__getattribute__``: one dictionary look-up more than a plain module's
    attribute, not the failed look-up and ``__getattr__`` fallback that cost ~5 µs a time)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        _own(self, "__dict__")["_lazy_module"] = None

    def _load(self) -> ModuleType:
        own: dict[str, Any] = _own(self, "__dict__")
        module: ModuleType | None = own["_lazy_module"]
        if module is None:
            module = importlib.import_module(own["__name__"])
            own["_lazy_module"] = module
        return module

    def __getattribute__(self, attr: str) -> Any:
        module: ModuleType | None = _own(self, "__dict__")["_lazy_module"]
        if module is None:
            if attr in _PROXY_ATTRS:
                return _own(self, attr)
            module = LazyModule._load(self)
        return getattr(module, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(LazyModule._load(self), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(LazyModule._load(self), attr)

    def __dir__(self) -> list[str]:
        return dir(LazyModule._load(self))

    def __repr__(self) -> str:
        own: dict[str, Any] = _own(self, "__dict__")
        state = "loaded" if own["_lazy_module"] is not None else "not loaded yet"
        return f"<lazy module {own['__name__']!r} ({state})>"


def lazy_module(name: str) -> ModuleType:
    """The module ``name`` (absolute, e.g. ``"kvtui.kvcalc"``), imported on its first attribute access."""
    return LazyModule(name)
