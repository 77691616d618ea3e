"""``SshBackend``: a remote GPU host over one asyncssh connection (several channels on it).

- Connection: ``~/.ssh/config`` aliases and the agent are honoured (``ssh_config=[]`` keeps the
  user's file out, for tests); keepalives on; a connect timeout; strict host keys by default. An
  unknown or changed host key is refused (``ConnState.HOSTKEY_REFUSED``) with the offered key's
  fingerprint and how to trust it; ``trust_host_key()`` adds an *unknown* key on request. Drops are
  retried in the background with capped exponential backoff and jitter; authentication, host-key
  and configuration failures are not retried blindly (``retry()`` tries again on demand).
- ``follow_log``: batches of ``LogRecord``s, resumed after a drop without losing or repeating a
  line — journald cursors (``-o json``: ``__CURSOR``), byte offsets for files (``tail -F``
  semantics, rotation and truncation, in-band control lines), ``TS#n`` for ``docker logs``. Before
  following, the current boot's start is found: the unit's ``InvocationID`` (or its last
  ``Started`` line), a bounded scan back of the file for the last server start, the container's
  ``StartedAt``.
- ``gpu_stream``: one long-lived ``nvidia-smi --query-gpu … -lms N`` channel, filtered to the
  host's ``gpus``; the last good sample is repeated with ``stale=True`` while the host is slow or
  away; falls back to periodic one-shot queries when the stream keeps dying.
- No orphans: every follower runs under ``commands.guard`` and dies when its channel closes, even
  for root logins where sshd ignores signals.

Modules: ``backend`` (``SshBackend``) and ``followers`` (the log streams).
"""

from __future__ import annotations

from kvtui.hosts.ssh.backend import SshBackend
from kvtui.retry import Backoff

__all__ = ["Backoff", "SshBackend"]
