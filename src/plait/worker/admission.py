"""The admission loop: queued runs let in as their queues' limits allow.

A run started on a queue waits (status ``queued``) until a worker admits it; the admission
leases it to that worker in the same write, and the worker drives it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from plait.queues import TURN
from plait.runtime import runs
from plait.store.rows import QueueLimits
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")
#: the least time between two looks of the admission loop for queued runs to admit
ADMIT_GAP = 0.05


class Admission(WorkerState):
    """The queues' limits as the store applies them, and the loop that admits runs."""

    def queue_limits(self) -> list[QueueLimits]:
        """The limits of the app's queues that have any, with the queued functions each
        admits; read each time, like the functions."""
        app = self.catalog.app
        limits: list[QueueLimits] = []
        for queue in sorted(app.queues.values(), key=lambda q: q.name):
            if not queue.limited:
                continue
            functions = tuple(
                sorted(n for n, f in app.functions.items() if f.queued and f.queue == queue.name)
            )
            limits.append(
                QueueLimits(
                    queue.name,
                    queue.concurrency,
                    queue.per_key,
                    None if queue.rate is None else queue.rate.count,
                    None if queue.rate is None else queue.rate.window,
                    functions,
                    TURN if queue.fair else None,
                    queue.key_costs(),
                )
            )
        return limits

    async def _admit_loop(self) -> None:
        """Admit queued runs whose start time has come, as the queues' limits allow. The
        admission leases each run to this worker in the same write, so an admitted run
        costs no more writes than a run started without a queue."""
        while not self.stopping:
            self.wake_admissions.clear()
            wait = self.poll_interval
            admitted: list[str] = []
            since = time.monotonic()
            free = max(0, self.concurrency - len(self.driving))
            blocked = None
            try:
                due = await self.store.next_queued()
                now = self.clock.now()
                if due is not None and due <= now and free:
                    since = time.monotonic()
                    admitted = await self.store.admit_runs(
                        self.owner,
                        self.lease,
                        free,
                        self.queue_limits(),
                        runs.ADMITTED,
                        self.claim_scope(),
                    )
                    if len(admitted) < free:
                        # what is still due waits for a slot or the rate window
                        blocked = now
                elif due is not None:
                    wait = max(0.001, min(wait, due - now + 0.001))
            except Exception:
                log.exception("admitting queued runs failed; retrying")
            self.admission_blocked_at = blocked
            for run_id in admitted:
                self.notifier.run_changed(run_id, settled=False)
                self.drive(run_id, claimed=True, since=since)
            if admitted and len(admitted) == free:
                await asyncio.sleep(0)
                continue
            looked = time.monotonic()
            await self.clock.wait(self.wake_admissions, wait)
            # wake-ups come with every start and every finished job of the database; one
            # look per ADMIT_GAP is enough, and keeps the pool free for passes and leases
            await asyncio.sleep(max(0.0, looked + ADMIT_GAP - time.monotonic()))
