"""The admission loop: queued runs let in as their queues' limits allow.

A run started on a queue waits (status ``queued``) until a worker admits it; the admission
leases it to that worker in the same write, and the worker drives it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence

from plait.app import App
from plait.queues import TURN, Queue
from plait.runtime import runs
from plait.store.rows import QueueLimits, StoredQueueLimits
from plait.worker.budgets import budget_holds, prune_spend
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")
#: the least time between two looks of the admission loop for queued runs to admit
ADMIT_GAP = 0.05
#: the most seconds the stored queue limits this worker applies may be old: a changed
#: declaration reaches every worker within about this long
LIMITS_FRESH = 1.0
#: how often (seconds) a worker deletes spend that no budget's window counts any more
SPEND_PRUNE_EVERY = 60.0


def limits_of(queue: Queue, functions: Sequence[str] = ()) -> QueueLimits:
    """A declared queue's limits, flat, as the store stores and applies them."""
    return QueueLimits(
        queue.name,
        queue.concurrency,
        queue.per_key,
        None if queue.rate is None else queue.rate.count,
        None if queue.rate is None else queue.rate.window,
        tuple(functions),
        turn=TURN if queue.fair else None,
        key_costs=queue.key_costs(),
        weights=tuple(sorted(queue.weights.items())),
        budget=tuple((b.unit, float(b.amount), b.window) for b in queue.budget),
        budget_per_key=queue.budget_per_key,
    )


def merge_limits(stored: Sequence[StoredQueueLimits], app: App) -> list[QueueLimits]:
    """The limits of every queue that has any, with the queued functions of ``app`` each
    admits: the limits stored in the database, whether ``app`` declares the queue or not,
    and the app's own for a queue none are stored for."""
    found = {q.limits.name: q.limits for q in stored}
    for queue in app.queues.values():
        found.setdefault(queue.name, limits_of(queue))
    limits: list[QueueLimits] = []
    for name in sorted(found):
        if not found[name].limited:
            continue
        functions = tuple(
            sorted(n for n, f in app.functions.items() if f.queued and f.queue == name)
        )
        limits.append(dataclasses.replace(found[name], functions=functions))
    return limits


class Admission(WorkerState):
    """The queues' limits as the store applies them, and the loop that admits runs."""

    def queue_limits(self) -> list[QueueLimits]:
        """The limits of every queue that has any, with the queued functions of this app
        each admits (``merge_limits``, with the stored limits as last read)."""
        return merge_limits(self.stored_limits, self.catalog.app)

    async def refresh_limits(self, *, force: bool = False) -> None:
        """Read the stored queue limits again when the copy is older than
        ``LIMITS_FRESH`` (or ``force``)."""
        if not force and time.monotonic() < self.limits_read_at + LIMITS_FRESH:
            return
        try:
            self.stored_limits = await self.store.list_queue_limits()
        except Exception:
            log.exception("reading the stored queue limits failed")
            return
        self.limits_read_at = time.monotonic()
        if time.monotonic() >= self.spend_pruned_at + SPEND_PRUNE_EVERY:
            self.spend_pruned_at = time.monotonic()
            try:
                await prune_spend(self.store, self.queue_limits(), self.clock.now())
            except Exception:
                log.exception("pruning spend past its budgets' windows failed")

    async def _admit_loop(self) -> None:
        """Admit queued runs whose start time has come, as the queues' limits allow. The
        admission leases each run to this worker in the same write, so an admitted run
        costs no more writes than a run started without a queue."""
        while not self.stopping:
            self.wake_admissions.clear()
            # what the last look left behind holds only until this look has ended
            self.admission_blocked_at = None
            wait = self.poll_interval
            admitted: list[str] = []
            since = time.monotonic()
            free = max(0, self.concurrency - len(self.driving))
            blocked = None
            try:
                await self.refresh_limits()
                due = await self.store.next_queued()
                now = self.clock.now()
                if due is not None and due <= now and free:
                    since = time.monotonic()
                    limits = self.queue_limits()
                    holds = await budget_holds(self.store, limits, now)
                    self.budget_free_at = holds.free_at
                    admitted = await self.store.admit_runs(
                        self.owner,
                        self.lease,
                        free,
                        limits,
                        runs.ADMITTED,
                        self.claim_scope(),
                        holds.held,
                    )
                    if len(admitted) < free:
                        # what is still due waits for a slot, the rate window or a budget
                        blocked = now
                    if holds.free_at is not None:
                        # a budget's window frees by itself: look again then, not only
                        # when new work comes
                        wait = max(0.001, min(wait, holds.free_at - now + 0.001))
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
