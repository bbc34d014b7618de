"""The clock every durable time is read from: timers, leases, back-offs, ``wf.now()``.

The runtime, the worker and the stores never call ``time.time()`` for a time they store
or compare with a stored one; they ask the ``Clock`` they were given. A real engine gets
``SYSTEM_CLOCK``, whose ``now`` *is* ``time.time`` (no extra call on the hot path) and
whose ``wait`` is a plain ``asyncio.wait_for``. A test engine gets a ``VirtualClock``:
wall time plus an offset that only grows, which ``plait.testing.TestEngine`` moves to
the next timer when nothing else is going on. A worker that waits for a time to come
waits through ``Clock.wait``, so a jump of the virtual clock wakes it at once.

Pacing (lease renewal every quarter lease, poll intervals, a step's own ``timeout``) is
real time on every clock: it measures how long code runs, not when a timer is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime


class Clock:
    """The system clock: seconds since the epoch, as ``time.time()``."""

    #: whether this clock can be moved by hand (``VirtualClock``)
    virtual = False

    def __init__(self) -> None:
        # bound once: reading the clock costs what ``time.time()`` costs
        self.now = time.time

    def datetime(self) -> datetime:
        """The clock's time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.now(), UTC)

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Wait until ``event`` is set or ``timeout`` seconds of this clock have passed;
        whether the event was set."""
        if event.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        return event.is_set()


#: the clock of every engine that is not a test engine
SYSTEM_CLOCK = Clock()


class VirtualClock(Clock):
    """Wall time plus an offset that only moves forward.

    Between jumps it runs at the speed of the wall clock, so leases, retries of a few
    milliseconds and timestamps behave as they do for real. ``move_to`` moves it forward
    and wakes every ``wait`` at once, which then looks again at its own deadline.
    """

    virtual = True

    def __init__(self, start: float | None = None) -> None:
        self._offset = 0.0 if start is None else start - time.time()
        self.now = self._now
        self._moved = asyncio.Event()
        #: how many times the clock was moved (jumps and advances), for tests and logs
        self.moves = 0

    def _now(self) -> float:
        return time.time() + self._offset

    def move_to(self, when: float) -> bool:
        """Move the clock forward to ``when``; False if it is there already (a clock never
        goes back)."""
        ahead = when - self._now()
        if ahead <= 0:
            return False
        self._offset += ahead
        self.moves += 1
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()
        return True

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        deadline = self._now() + timeout
        while not event.is_set():
            left = deadline - self._now()
            if left <= 0:
                return False
            watched = {
                asyncio.ensure_future(event.wait()),
                asyncio.ensure_future(self._moved.wait()),
            }
            try:
                await asyncio.wait(watched, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in watched:
                    task.cancel()
        return True


__all__ = ["SYSTEM_CLOCK", "Clock", "VirtualClock"]
