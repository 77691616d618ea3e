"""The monitor's connection: the backend's state as the views see it (with the follower's notes
and a failed stream's reason), the first connection (retried unless told not to) and the pace of
a stream's retries (and the closing of a stream once done with)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Final

from kvtui.hosts.backend import BackendError, ConnState, ConnStatus, HostBackend, HostNotes, aclose_iter
from kvtui.retry import Backoff, doubling, sleep_unless
from kvtui.updates import ConnUpdate

NON_RETRYABLE: Final = frozenset({ConnState.FAILED, ConnState.HOSTKEY_REFUSED, ConnState.AUTH_FAILED})
MAX_NOTES: Final = 20  # the follower's notes kept


async def close_quietly(it: AsyncIterator[object] | None) -> None:
    """Close a stream's iterator (once it is done with), whatever it raises on the way out."""
    if it is not None:
        with contextlib.suppress(Exception):
            await aclose_iter(it)


class Connection:
    """One monitor's connection state (``status``; each change goes to ``publish``) and the
    follower's notes (``notes``, ``notes_seen``); ``closed`` ends every wait."""

    def __init__(self, backend: HostBackend, *, retry_start: bool, publish: Callable[[ConnUpdate], None],
                 closed: asyncio.Event) -> None:
        self.backend = backend
        self.retry_start = retry_start
        self.publish = publish
        self.closed = closed
        self.status: ConnStatus = ConnStatus(ConnState.CONNECTING)
        self.stream_note = ""  # why the log stream failed (shown until it is back)
        # the follower's own notes ("no server start in the last N bytes", a rotation), the newest
        # shown in the connection status
        self.notes: deque[str] = deque(maxlen=MAX_NOTES)
        self.notes_seen = 0  # notes taken from the backend so far (a reader prints the new ones)

    def poll(self) -> None:
        try:
            st = self.backend.status()
        except Exception as exc:  # a backend bug must not kill the view
            st = ConnStatus(ConnState.FAILED, f"status unavailable: {exc}")
        self._take_notes()
        note = self.stream_note or (self.notes[-1] if self.notes else "")
        if note and st.state is ConnState.CONNECTED:
            detail = f"{st.detail}; {note}" if st.detail else note
            st = ConnStatus(st.state, detail, st.retry_in, st.fingerprint, st.strict_host_key)
        self.set(st)

    def _take_notes(self) -> None:
        """The follower's notes (``HostNotes``: a start not in the scan window, a rotation): taken
        from the backend into ``notes``; the newest joins the connection status."""
        backend = self.backend
        if not isinstance(backend, HostNotes):
            return
        try:
            fresh = list(backend.notes)
            backend.notes.clear()
        except Exception:
            return
        for note in fresh:
            if note and (not self.notes or self.notes[-1] != note):
                self.notes.append(note)
                self.notes_seen += 1

    def set(self, st: ConnStatus) -> None:
        if st != self.status:
            self.status = st
            self.publish(ConnUpdate(st))

    def stream_failed(self, note: str) -> None:
        self.stream_note = note
        self.poll()

    def stream_back(self) -> None:
        if self.stream_note:
            self.stream_note = ""
            self.poll()

    async def start(self) -> bool:
        """Start the backend, retrying with backoff unless the failure will not go away (or
        ``retry_start`` is False); False when it did not start (or the monitor closed)."""
        pace = doubling(0.5)
        while not self.closed.is_set():
            try:
                await self.backend.start()
            except BackendError as exc:
                st = self.backend.status()
                detail = str(exc) or st.detail
                if st.state in NON_RETRYABLE or not self.retry_start:
                    state = st.state if st.state in NON_RETRYABLE else ConnState.FAILED  # given up
                    self.set(ConnStatus(state, detail, None, st.fingerprint, st.strict_host_key))
                    return False
                delay = pace.next()
                self.set(ConnStatus(ConnState.RECONNECTING, detail, delay, st.fingerprint, st.strict_host_key))
                if await self.sleep(delay):
                    return False
                continue
            self.poll()
            return True
        return False

    async def sleep(self, seconds: float) -> bool:
        """Sleep unless closed first; True when closed."""
        return await sleep_unless(self.closed, seconds)

    async def retry_after(self, pace: Backoff) -> bool:
        """A stream failed: wait the pace's next delay. False when retrying cannot help (the host
        will not come back: host key, auth, configuration) or the monitor closed meanwhile."""
        if self.backend.status().state in NON_RETRYABLE:
            return False
        return not await self.sleep(pace.next())


__all__ = ["MAX_NOTES", "NON_RETRYABLE", "Connection", "close_quietly"]
