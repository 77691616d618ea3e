"""``fast_new``: the constructor of a frozen, slotted dataclass without its generated ``__init__``
(which sets each field through ``object.__setattr__``: ~3x the cost per object). It takes every
field, positionally or by name, in the fields' order, and sets them through the slots' own
setters — for the hot paths that build one object per log line (``LogRecord`` in
``kvtui.engines.shapes``, ``LogLine`` in ``kvtui.updates``). No defaults, no ``__post_init__``.

Pure core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def fast_new(cls: type[T]) -> Callable[..., T]:
    """``new(f1, f2, …)`` building ``cls`` as ``cls(f1, f2, …)`` does, generated (as
    ``dataclasses`` generates ``__init__``) so that each field is one direct setter call."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]  # a dataclass, said the caller
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    env.update({f"_set_{n}": cls.__dict__[n].__set__ for n in names})
    body = "".join(f"    _set_{n}(o, {n})\n" for n in names)
    exec(f"def new({', '.join(names)}):\n    o = _new(_cls)\n{body}    return o\n", env)
    made: Callable[..., T] = env["new"]
    made.__qualname__ = made.__name__ = f"new_{cls.__name__}"
    return made
