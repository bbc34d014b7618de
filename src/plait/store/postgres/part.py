"""What every part of ``PostgresStore`` works with.

The store's methods are grouped by concern, one class per file (``commit``, ``runs``,
``leases``, ``jobs``, ``queues``, ``schedules``, ``actions``, ``versions``), and
``PostgresStore`` is all of them. ``Part`` declares what its ``__init__`` sets for them
all, holds the clock, and keeps this process's writes to one run in the order they were
issued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from plait.clock import Clock
from plait.store.postgres.listen import Listener
from plait.store.postgres.pool import Pool


class RunLock:
    """The writes of one run in this process, one at a time (see ``_in_order``). A plain
    class rather than a generator-based context manager: every commit passes through it."""

    __slots__ = ("_locks", "_run_id", "lock", "users")

    def __init__(self, locks: dict[str, RunLock], run_id: str) -> None:
        self.lock = asyncio.Lock()
        self.users = 0
        self._locks = locks
        self._run_id = run_id

    def taken(self) -> bool:
        """Whether a write of the run holds or waits for its turn. Not ``lock.locked()``:
        a turn just given back is promised to the write that waited for it, which has not
        taken it yet, and a newcomer would wait behind it unlocked."""
        return self.users > 0

    async def __aenter__(self) -> None:
        self.users += 1
        try:
            await self.lock.acquire()
        except BaseException:
            self._leave()
            raise

    async def __aexit__(self, *_exc: object) -> None:
        self.lock.release()
        self._leave()

    def _leave(self) -> None:
        self.users -= 1
        if not self.users:
            del self._locks[self._run_id]


class Part:
    """The state a part of the store reads, set by ``PostgresStore.__init__``."""

    #: the DSN, without plait's own options
    dsn: str
    #: the named queries, with this store's schema filled in
    _q: Mapping[str, str]
    _pool: Pool
    #: every statement goes through this (``Pool.call``)
    _call: Callable[..., Awaitable[Any]]
    #: the clock's time (``clock``)
    _now: Callable[[], float]
    _listener: Listener
    #: (run_id, lease owner) of passes whose write failed with an unknown outcome
    _tainted: set[tuple[str, str]]
    #: per run, the writes of its lease holder in this process, in the order issued
    _run_locks: dict[str, RunLock]

    def starting_pass(self, run_id: str) -> None:
        if self._tainted:
            # a new pass of this run starts: an earlier pass's failed write no longer matters
            self._tainted = {t for t in self._tainted if t[0] != run_id}

    def _in_order(self, run_id: str) -> RunLock:
        """Apply this process's writes to one run in the order they were issued, as the
        SQLite store's single writer does. Pool connections would otherwise let a later
        write overtake one still in flight: a pass's release of its lease could land before
        its last flush (which would then find the lease gone), and a cancel could return
        before the cancelled step's record lands."""
        entry = self._run_locks.get(run_id)
        if entry is None:
            entry = self._run_locks[run_id] = RunLock(self._run_locks, run_id)
        return entry

    @property
    def clock(self) -> Clock:
        """Where every time this store writes or compares with a stored one comes from."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = clock
        self._now = clock.now
