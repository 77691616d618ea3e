"""``fast_new``: the one fast constructor of the frozen dataclasses built once per log line."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from kvtui.engines.events import LogRecord
from kvtui.engines.shapes import _rec
from kvtui.fastnew import fast_new
from kvtui.updates import LogLine, make_line

TS = datetime(2026, 3, 4, 9, 12, 0, tzinfo=UTC)


def test_the_log_lines_and_records_are_built_as_their_dataclasses_build_them() -> None:
    assert make_line(7, "text", TS, "TP3", 2, "phase") == LogLine(7, "text", TS, "TP3", 2, "phase")
    assert _rec("t", TS, "c=1", "journal", 42, "python3") == LogRecord("t", TS, "c=1", "journal", 42, "python3")
    assert make_line.__name__ == "new_LogLine"


def test_every_field_in_order_by_position_or_name_and_nothing_else() -> None:
    @dataclass(frozen=True, slots=True)
    class P:
        a: int
        b: str = "default"

    new_p = fast_new(P)
    assert new_p(1, "x") == P(1, "x")
    assert new_p(b="y", a=2) == P(2, "y")
    with pytest.raises(TypeError):
        new_p(1)  # no defaults: every field is given
    with pytest.raises(AttributeError):
        new_p(1, "x").a = 3  # type: ignore[misc]  # still frozen
