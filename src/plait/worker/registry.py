"""The worker registry: a worker that takes work records itself (``plait_workers``) as it
starts and with its heartbeat, and deletes its record as it stops. ``Engine.list_workers``,
``plait workers`` and ``GET /api/workers`` read it; a run whose workflow no live worker
registers says so (``Engine.waiting_on``).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from importlib import metadata

from plait.store.rows import WorkerRow
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")

#: seconds between two heartbeats of a worker's record
BEAT = 2.0
#: a worker whose last heartbeat is older than this many beats (and a lease) is not live
LIVE_BEATS = 3
#: records of workers not seen for this long are deleted (by any worker's heartbeat)
FORGET_AFTER = 24 * 3600.0


@functools.cache
def plait_version() -> str:
    """The installed plait's version, read once: the package metadata is parsed anew on
    every read, and a heartbeat every two seconds would pay for it each time (the code
    this process runs does not change with the files on disk anyway)."""
    try:
        return metadata.version("plait")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def live_after(now: float, lease: float) -> float:
    """The oldest heartbeat of a live worker at ``now``."""
    return now - (BEAT * LIVE_BEATS + lease)


class Registry(WorkerState):
    """A worker's own record."""

    def worker_row(self, seen_at: float) -> WorkerRow:
        scope = self.claim_scope()
        return WorkerRow(
            id=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            app=self.catalog.app.name,
            version=plait_version(),
            queues=self.only_queues,
            workflows=scope.workflows or (),
            started_at=self.started_at,
            seen_at=seen_at,
        )

    async def beat(self, *, force: bool = False) -> None:
        """Record this worker's heartbeat, once per ``BEAT`` (``force``: now)."""
        if not self.take_work:
            return
        now = time.monotonic()
        if not force and now < self.next_beat:
            return
        self.next_beat = now + BEAT
        try:
            at = self.clock.now()
            await self.store.put_worker(self.worker_row(at))
            if force:
                await self.store.forget_workers(at - FORGET_AFTER)
        except Exception:
            log.warning("recording this worker's heartbeat failed; retrying")
