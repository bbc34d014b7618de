"""What every part of ``SQLiteStore`` works with.

The store's methods are grouped by concern, one class per file (``commit``, ``runs``,
``leases``, ``jobs``, ``queues``, ``schedules``, ``actions``, ``versions``), and
``SQLiteStore`` is all of them. ``Part`` declares what its ``__init__`` sets for them all
and holds the clock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Protocol, TypeVar

from plait.clock import Clock
from plait.store.sqlite.writer import Connections

T = TypeVar("T")


class Transaction(Protocol):
    """Runs a function in a transaction of the file's connections and returns what it
    returned (``Connections.write``, ``read``, ``read_here``)."""

    async def __call__(self, fn: Callable[[sqlite3.Connection], T], /) -> T: ...


class Part:
    """The state a part of the store reads, set by ``SQLiteStore.__init__``."""

    #: the file's path, or ``:memory:``
    path: str
    memory: bool
    busy_timeout: float
    _db: Connections
    #: a function in a write transaction (group commit), on the writer's thread
    _write: Transaction
    #: a function in a read transaction, on a reader's thread
    _read: Transaction
    #: a short read on the event loop's own thread
    _read_here: Transaction
    #: the clock's time (``clock``)
    _now: Callable[[], float]

    @property
    def clock(self) -> Clock:
        """Where every time this store writes or compares with a stored one comes from."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = clock
        self._now = clock.now
