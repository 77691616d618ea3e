"""The one core reader "records -> boots" (``kvtui.bootlog``): what every reader of a log shares."""

from __future__ import annotations

from pathlib import Path

from kvtui.boot import BootStatus
from kvtui.bootlog import BootLog, read_log
from kvtui.engines.events import Engine
from kvtui.engines.shapes import detect_shape, iter_records

FIX = Path(__file__).parent / "fixtures"
TWO_BOOTS = FIX / "sglang" / "two-boots-restart.log"  # server_args on lines 1 and 28 (read from the file)


def test_feed_says_which_records_open_a_boot() -> None:
    data = TWO_BOOTS.read_bytes()
    log = BootLog()
    opened = [i for i, rec in enumerate(iter_records(data, detect_shape(data))) if log.feed(rec)]
    assert opened == [0, 27]  # the two server_args lines
    assert log.engine is Engine.SGLANG
    assert [b.status for b in log.boots] == [BootStatus.FAILED, BootStatus.READY]
    assert log.current is log.boots[-1]


def test_read_log_is_the_same_as_feeding_every_record_in_any_chunking() -> None:
    data = TWO_BOOTS.read_bytes()
    log = BootLog(max_boots=None)
    log.feed_all(iter_records(data, detect_shape(data)))
    log.finish()
    whole = [b.to_json() for b in log.boots]
    for size in (7, 1000, len(data)):
        boots, shape = read_log(data[i:i + size] for i in range(0, len(data), size))
        assert shape == "raw"
        assert [b.to_json() for b in boots] == whole
        every, _ = read_log(iter([data]), all_lines=True)
        assert [b.to_json() for b in every] == whole


def test_feed_parsed_counts_boots_like_feed() -> None:
    data = TWO_BOOTS.read_bytes()
    a, b = BootLog(), BootLog()
    opened_a = [i for i, rec in enumerate(iter_records(data, "raw")) if a.feed(rec)]
    opened_b = [i for i, rec in enumerate(iter_records(data, "raw"))
                if any([b.feed_parsed(p) for p in b.parser.feed(rec)])]
    assert opened_a == opened_b == [0, 27]
