"""The log view's window of parts (``LineWindow``): the same lines as a list of ``LogLine``s under
any mix of appends and trims, and no ``LogLine`` built for a line nobody read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.ui.log.window import LineWindow
from kvtui.updates import LinePart, LineRun, LogBatch, LogLine, expand

# an op: ("add", [part sizes: 0 = a single LogLine, n > 0 = a run of n lines]) or ("del", n)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(0, 9), max_size=5)),
        st.tuples(st.just("del"), st.integers(0, 30)),
    ),
    max_size=40,
)


def _parts(sizes: list[int], seq: int) -> tuple[list[LinePart], int]:
    parts: list[LinePart] = []
    for n in sizes:
        if n == 0:
            parts.append(LogLine(seq, f"parsed {seq}", None, "TP0", 0, "phase"))
            seq += 1
        else:
            texts = [f"run line {seq + k}" + ("\r\n" if (seq + k) % 7 == 0 else "") for k in range(n)]
            parts.append(LineRun(seq, 1, texts, [None] * n, ["TP1"] * n, ["serving"] * n))
            seq += n
    return parts, seq


@settings(max_examples=300, deadline=None)
@given(_ops, st.data())
def test_a_window_of_parts_reads_as_the_list_of_its_lines(ops: list[tuple[str, object]], data: st.DataObject) -> None:
    window = LineWindow()
    ref: list[LogLine] = []
    seq = 0
    for op, arg in ops:
        if op == "add":
            assert isinstance(arg, list)
            parts, seq = _parts(arg, seq)
            window.extend(parts)
            ref.extend(expand(parts))
        else:
            assert isinstance(arg, int)
            del window[:arg]
            del ref[:arg]
        assert len(window) == len(ref)
        if ref:
            i = data.draw(st.integers(-len(ref), len(ref) - 1))
            assert window[i] == ref[i]
            last = data.draw(st.integers(0, len(ref) + 2))
            assert window.text_lengths(last) == max((len(ln.text) for ln in ref[-last:]), default=0) * (last > 0)
    assert list(window) == ref
    assert window[-3:] == ref[-3:]


def test_a_run_becomes_log_lines_only_where_read() -> None:
    n = 5000
    run = LineRun(100, 0, [f"serving {k}" for k in range(n)], [None] * n, [None] * n, [None] * n)
    batch = LogBatch([run])
    assert len(batch) == n
    assert (batch.first_seq, batch.last_seq) == (100, 100 + n - 1)
    window = LineWindow(batch.parts)
    rows = [window[i] for i in range(n - 50, n)]  # a screenful at the end, drawn twice
    assert [window[i] for i in range(n - 50, n)] == rows
    assert all(a is b for a, b in zip(rows, [window[i] for i in range(n - 50, n)], strict=True))  # kept
    built = window._built[0]
    assert built is not None
    assert sum(1 for ln in built if ln is not None) == 50
    assert rows[-1].seq == 100 + n - 1
    assert rows[-1].text == f"serving {n - 1}"
    assert rows[-1].style == ""
    assert batch._lines is None  # the batch itself built nothing either
