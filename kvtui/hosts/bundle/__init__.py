"""A recorded boot as a host: ``kvtui connect --bundle FILE.tar.gz`` (``BundleBackend``).

The bundle (``kvtui.history.bundle``) is read once: its log replays as the host's journal, its
GPU readings as the host's GPU stream; nothing runs and nothing changes (``BundleOps`` refuses
every edit and restart with the reason)."""

from __future__ import annotations

from kvtui.hosts.bundle.backend import BundleBackend, BundleError, load_bundle

__all__ = ["BundleBackend", "BundleError", "load_bundle"]
