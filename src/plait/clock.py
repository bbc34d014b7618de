"""The clock every durable time is read from: timers, leases, back-offs, ``wf.now()``.

The runtime, the worker and the stores never call ``time.time()`` for a time they store
or compare with a stored one; they ask the ``Clock`` they were given. A real engine gets
``SYSTEM_CLOCK``, whose ``now`` *is* ``time.time`` (no extra call on the hot path) and
whose ``wait`` is a plain ``asyncio.wait_for``. A test engine gets a ``VirtualClock``,
which stands still until ``plait.testing.TestEngine`` moves it to the next timer (when
nothing else is going on) or by hand. A worker that waits for a time to come
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
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
        # arrives just as the event is set (see plait.notify.wait_event)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
        return event.is_set()


#: the clock of every engine that is not a test engine
SYSTEM_CLOCK = Clock()


def micros(when: float) -> int:
    """A time in whole microseconds: the precision PostgreSQL keeps, so two times are the
    same to a store exactly when they are the same here."""
    return round(when * 1_000_000)


class VirtualClock(Clock):
    """A clock that stands still until it is moved.

    Every time read between two moves is the same, so a test sees exact times: a sleep
    of an hour that starts when the clock is moved to a timer ends exactly an hour later,
    however long the work in between took in real time. ``move_to`` moves it forward and
    wakes every ``wait`` at once, which then looks at its deadline again. Pacing stays
    real: ``wait`` also returns after ``timeout`` real seconds, so a loop that polls
    through it still polls.

    ``move_to`` lands on exactly the time it is given, unrounded. A timer is due when its
    stored wake-up is at or before the clock, and each store decides that on what it
    stores: SQLite keeps the float the runtime wrote (``now + delay``, seldom a whole
    microsecond at today's epoch), PostgreSQL the nearest microsecond. A clock moved to
    the wake-up as the store gave it back is due on either; one rounded to the
    microsecond could stop a fraction of one short of a SQLite timer, which would then
    never fire.
    """

    virtual = True

    def __init__(self, start: float | None = None) -> None:
        self._time = micros(time.time() if start is None else start) / 1_000_000
        self.now = self._now
        self._moved = asyncio.Event()
        #: how many times the clock was moved, for tests and logs
        self.moves = 0

    def _now(self) -> float:
        return self._time

    def move_to(self, when: float) -> bool:
        """Move the clock forward to ``when``; False if it is there already (a clock never
        goes back)."""
        if when <= self._time:
            return False
        self._time = float(when)
        self.moves += 1
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()
        return True

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        deadline = self._time + timeout
        give_up = time.monotonic() + timeout
        while not event.is_set():
            left = give_up - time.monotonic()
            if self._time >= deadline or left <= 0:
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


__all__ = ["SYSTEM_CLOCK", "Clock", "VirtualClock", "micros"]
