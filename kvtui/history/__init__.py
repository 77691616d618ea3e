"""The history: every boot kvtui saw, remembered in one SQLite file (issue 13).

Layers: below the monitor, beside the spool; it imports the core (``boot``, ``config``) and
nothing of hosts, monitor, views or commands (an import-linter contract). ``doc`` (``BootDoc``:
the typed, versioned document), ``record`` (documents from boots, keys, merging) and the readers
over stored boots (``eta``, ``diff``, ``ledger``) are pure; ``store`` is the SQLite file; ``recorder`` writes a
live reader's boots off its event loop.
"""

from __future__ import annotations

from kvtui.history.doc import DOC_SCHEMA_VERSION, BootDoc, DocVersionError
from kvtui.history.record import boot_doc, boot_from_doc, boot_key
from kvtui.history.recorder import BootRecorder, record_boot, record_numbered, recordable, recorder_for
from kvtui.history.store import (
    SCHEMA_VERSION,
    HistoryError,
    Limits,
    Store,
    StoredBoot,
    default_path,
    open_store,
)

__all__ = [
    "DOC_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "BootDoc",
    "BootRecorder",
    "DocVersionError",
    "HistoryError",
    "Limits",
    "Store",
    "StoredBoot",
    "boot_doc",
    "boot_from_doc",
    "boot_key",
    "default_path",
    "open_store",
    "record_boot",
    "record_numbered",
    "recordable",
    "recorder_for",
]
