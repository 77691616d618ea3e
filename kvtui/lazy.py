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


class LazyModule(ModuleType):
    """Stands for the module ``name`` until its first attribute access imports it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_module"] = None

    def _load(self) -> ModuleType:
        module: ModuleType | None = self.__dict__["_lazy_module"]
        if module is None:
            module = importlib.import_module(self.__name__)
            self.__dict__["_lazy_module"] = module
        return module

    def __getattr__(self, attr: str) -> Any:  # only for what the proxy itself does not hold
        return getattr(self._load(), attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._load(), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(self._load(), attr)

    def __dir__(self) -> list[str]:
        return dir(self._load())

    def __repr__(self) -> str:
        loaded = self.__dict__["_lazy_module"] is not None
        return f"<lazy module {self.__name__!r} ({'loaded' if loaded else 'not loaded yet'})>"


def lazy_module(name: str) -> ModuleType:
    """The module ``name`` (absolute, e.g. ``"kvtui.kvcalc"``), imported on its first attribute access."""
    return LazyModule(name)
