"""Retention: deleting ended runs, in batches short enough that live work never waits.

A prune walks the ended top-level runs oldest first, a batch at a time; each batch is one
short transaction that deletes the runs it picked with their child runs and every row of
theirs. A run with a child that has not ended is left alone (its tree is not over), and
so is everything running or suspended. Between batches the store's write lock is free,
so the passes of live runs commit in between: the longest a live commit waits is one
batch. ``Engine.prune`` prunes when asked; a worker given ``retain`` prunes in a loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Literal

from plait.store.contract import Store
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")

#: what a prune deletes unless told otherwise
EndedStatus = Literal["completed", "cancelled", "failed", "continued"]
ENDED: tuple[EndedStatus, ...] = ("completed", "cancelled", "failed", "continued")
#: top-level runs looked at per transaction: small enough that one batch holds SQLite's write lock
#: for a few milliseconds
BATCH = 100


def check_statuses(statuses: Sequence[str]) -> tuple[str, ...]:
    """Only ended runs can be pruned: ``ValueError`` naming any other status."""
    if isinstance(statuses, str):
        statuses = (statuses,)
    chosen = tuple(statuses)
    wrong = [s for s in chosen if s not in ENDED]
    if wrong or not chosen:
        raise ValueError(
            f"prune deletes ended runs only: statuses must be among {', '.join(ENDED)}, "
            f"got {', '.join(map(repr, wrong or chosen)) or 'none'}"
        )
    return chosen


async def prune(
    store: Store, *, cutoff: float, statuses: Sequence[str] = ENDED, batch: int | None = None
) -> int:
    """Delete the ended runs last updated before ``cutoff`` (unix seconds), batch by
    batch; returns how many runs went, child runs included."""
    chosen = check_statuses(statuses)
    size = BATCH if batch is None else batch
    total = 0
    after: tuple[float, str] | None = None
    while True:
        done = await store.prune_batch(chosen, cutoff, after, size)
        total += done.deleted
        if done.cursor is None:
            return total
        after = done.cursor
        await asyncio.sleep(0)  # let the loop's own work in between batches


class Retention(WorkerState):
    """The worker's ``--retain`` loop."""

    async def _retention_loop(self) -> None:
        """Prune ended runs older than ``retain`` now and then: at start, then every tenth
        of the retention (at least a second, at most an hour). Batches are short, so live
        runs never wait for a prune; with several workers, each prunes what it finds."""
        assert self.retain is not None
        every = min(3600.0, max(1.0, self.retain / 10))
        while not self.stopping:
            try:
                pruned = await prune(self.store, cutoff=self.clock.now() - self.retain)
                self.pruned += pruned
                if pruned:
                    log.info("pruned %d ended runs older than %gs", pruned, self.retain)
            except Exception:
                log.exception("pruning ended runs failed; trying again later")
            await asyncio.sleep(every)


__all__ = ["BATCH", "ENDED", "EndedStatus", "Retention", "check_statuses", "prune"]
