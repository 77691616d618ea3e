"""The one retry pace of kvtui: capped exponential backoff, with jitter where many clients may
retry at once (SSH reconnects) and without it where the pace is the operator's to read (the
monitor's streams)."""

from __future__ import annotations

import asyncio
import random


class Backoff:
    """Capped exponential backoff with jitter: attempt ``n`` waits ``min(cap, initial * 2**n)``
    scaled by a random factor in ``[1 - jitter, 1]``; the first attempt after a reset waits
    ``first`` (0: reconnect at once after a drop)."""

    def __init__(self, initial: float = 0.5, cap: float = 30.0, *, first: float = 0.0, jitter: float = 0.5,
                 rng: random.Random | None = None) -> None:
        self.initial, self.cap, self.first, self.jitter = initial, cap, first, jitter
        self.rng = rng or random.Random()
        self.attempt = 0

    def next(self) -> float:
        n = self.attempt
        self.attempt += 1
        if n == 0:
            return self.first
        base = min(self.cap, self.initial * (2.0 ** (n - 1)))
        return base * (1.0 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.attempt = 0


def doubling(first: float, cap: float = 30.0) -> Backoff:
    """Waits of ``first``, then twice as long each time, at most ``cap``, no jitter (the
    monitor's pace: 0.5, 1, 2, … 30 s); ``reset()`` after a success."""
    return Backoff(initial=2 * first, cap=cap, first=first, jitter=0.0)


async def sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` unless ``stop`` is set first (a close ends a retry's wait at once); True
    when ``stop`` was set."""
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        return False
    return True
