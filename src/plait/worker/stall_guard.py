"""Leases kept alive while a worker's event loop is blocked.

Leases are renewed by a coroutine. A step body that blocks the event loop (``time.sleep``
or a blocking client inside ``async def``) stops that coroutine too, and a loop blocked
for longer than the lease looks exactly like a dead worker: another process takes the
run over, starts the step again, and the two ping-pong until the step is given up as
interrupted. A thread beside the loop watches its heartbeat; when the loop has missed
half a lease, the thread renews the leases itself (on a connection of its own) and says
in the log which loop is stalled. A loop blocked for longer than ``limit`` is treated as
hung: the thread stops renewing and the leases run out, so the work is taken over.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from plait.store.contract import LeaseKeeper, Store

log = logging.getLogger("plait.worker")

#: a loop blocked this long is hung, not busy: its leases are let go
STALL_LIMIT = 600.0


class StallGuard:
    """One thread per worker; ``beat`` is called by the worker's lease loop."""

    def __init__(
        self,
        store: Store,
        owner: str,
        lease_seconds: float,
        holding: Callable[[], list[str]],
        *,
        limit: float = STALL_LIMIT,
    ) -> None:
        self.store = store
        self.owner = owner
        #: the runs whose leases the worker holds, read from this thread: ``list(dict)``
        #: copies the worker's dict under the GIL, which its stalled loop is not changing
        self.holding = holding
        self.lease = lease_seconds
        self.limit = limit
        self._beat = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: leases renewed by the thread, for tests and the log
        self.renewals = 0

    def beat(self) -> None:
        self._beat = time.monotonic()

    def start(self) -> None:
        self._beat = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="plait-stall-guard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        keeper: LeaseKeeper | None = None
        every = max(0.05, self.lease / 4)
        stalled_since: float | None = None
        try:
            while not self._stop.wait(every):
                stalled = time.monotonic() - self._beat
                if stalled < self.lease / 2:
                    if stalled_since is not None:
                        log.info(
                            "event loop of %s was blocked for %.1f s",
                            self.owner,
                            self._beat - stalled_since,
                        )
                        stalled_since = None
                    continue
                if stalled_since is None:
                    stalled_since = self._beat
                    log.warning(
                        "event loop of %s has been blocked for %.1f s; the stall guard keeps "
                        "its leases (does a step block inside async code?)",
                        self.owner,
                        stalled,
                    )
                if stalled > self.limit:
                    continue  # hung: let the leases run out
                try:
                    if keeper is None:
                        keeper = self.store.lease_keeper()
                        if keeper is None:
                            return  # no other process can see these leases
                    keeper.renew(self.owner, self.lease, self.holding())
                    self.renewals += 1
                except Exception:
                    log.exception("the stall guard could not renew the leases")
        finally:
            if keeper is not None:
                with contextlib.suppress(Exception):
                    keeper.close()
