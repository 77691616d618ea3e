"""The test helpers that read /proc (tests/proc_support.py) see what they are asked about."""

from __future__ import annotations

import os
from pathlib import Path

from proc_support import log_readers


def test_a_reader_in_this_process_is_seen_past_a_free_descriptor_below_it(tmp_path: Path) -> None:
    """Listing /proc/self/fd opens a descriptor of its own, in the lowest free slot, and closes it
    before its entry is read back: an error on that one entry once hid the whole process — the
    in-process ``kvtui wait`` of the liveness tests, whenever a file closed earlier in the run had
    left a free slot below the follower's descriptor ("reader did not reach byte … within 120 s")."""
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * 100)
    spare = [open(os.devnull, "rb") for _ in range(3)]  # noqa: SIM115 - held open on purpose
    try:
        with open(log, "rb") as follower:
            follower.seek(100)
            spare[0].close()  # a free slot below the follower's descriptor
            assert log_readers(log).get(os.getpid()) == 100
    finally:
        for fh in spare:
            fh.close()
