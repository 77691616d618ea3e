"""One boot identity everywhere (issue 22 #2): the history's row number.

A boot stored in the history has a number, its row id (``kvtui history HOST`` lists it as
``#13``); every view and JSON output names the boot by it: ``boot #13`` in words, ``"boot": 13``
in JSON (plus ``"boot_key"``, the history's key: host + the first line's time, see
``record.boot_key``). The number does not depend on who reads the log: a reconnect, a second
console, ``kvtui wait``, ``calc --host`` and the history all agree on it.

Where no history is available (``replay FILE``, ``[history] record = false``, a history that
cannot be written), the boot is named by its place in the log read: ``boot 2 of this log`` — a
spelling that cannot be taken for a history number. A reader's own per-follow index (the
tracker's) is internal and never shown as a number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtui.boot import Boot
from kvtui.history.record import boot_key

if TYPE_CHECKING:
    from kvtui.history.store import Store


def label(number: int | None, ordinal: int | None = None) -> str:
    """``boot #13`` (the history's number), else ``boot 2 of this log`` (``ordinal``: 1 = the
    first boot of the log read), else ``boot``."""
    if number is not None:
        return f"boot #{number}"
    if ordinal is not None:
        return f"boot {ordinal} of this log"
    return "boot"


def stored_number(host: str, boot: Boot, store: Store) -> int | None:
    """The history's number of ``host``'s ``boot`` when the history has it (by its key)."""
    key = boot_key(host, boot)
    if key is None:
        return None
    got = store.by_key(key)
    return got.id if got is not None and got.host == host else None
