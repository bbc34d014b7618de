"""The lease loop: renewing the leases of work in hand, and stopping work whose run ended.

A lease is renewed every quarter of its length while this process drives the run or runs
one of its jobs; a renewal that finds a run gone (cancelled, or ended by another process)
stops its work here (``cancel_local``), and so does one that finds a job gone (its
workflow cancelled the step). The loop also beats the ``StallGuard``'s heart, so
a blocked event loop is noticed, reads the brakes (``worker.brakes``), records this
worker's heartbeat (``worker.registry``), and now and then sweeps runs that no one is
driving.

No step body starts under a lease this process may have lost (``keep_lease``). Each lease
it holds has a deadline on the monotonic clock: the time just before the claim or the
renewal that last confirmed it, plus the lease's length, less a margin. A process frozen
past that deadline (SIGSTOP, a VM paused, a long collection) wakes with its deadlines
behind it, so before the next body it asks the store whether the lease is still its own,
and starts nothing if another worker took it over. A renewal that finds a run's lease
taken stops that run's pass here at once (``lose_runs``), without calling it cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection
from typing import Any

from plait.store.rows import LeaseRenewal
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")

#: the part of a lease not counted on: a request's time on the store's side, and clocks
LEASE_MARGIN = 0.2


class Leases(WorkerState):
    """Keeps the leases of what this process holds."""

    async def _lease_loop(self) -> None:
        every = max(0.05, self.lease / 4)
        next_sweep = time.monotonic() + 5.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.check_leases.wait(), every)
            self.check_leases.clear()
            self.stall_guard.beat()
            # a brake set by another process reaches this one's passes within a quarter
            # of a lease; the heartbeat of the worker registry rides along
            await self.refresh_brakes()
            await self.beat()
            if self.take_work and not self.stopping and time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + 5.0
                try:
                    if await self.store.sweep_idle():
                        self.wake()
                except Exception:
                    log.exception("sweeping idle runs failed")
            if not self.driving and not self.stepping:
                continue
            try:
                stepping = sorted({run_id for run_id, _key in self.stepping})
                held = self.holding()
                since = time.monotonic()
                renewal = await self.store.renew_leases(self.owner, self.lease, held, stepping)
            except Exception:
                log.exception("renewing leases failed")
                continue
            lost = self._renewed(renewal, since, held)
            if renewal.ended:
                self.cancel_local(renewal.ended)
            if lost:
                self.lose_runs(lost)
            if self.attempting:
                await self._stop_lost_jobs()

    # -- the monotonic deadlines of the leases held ----------------------------------------
    def lease_deadline(self, since: float) -> float:
        """The monotonic time until which a lease taken or renewed at ``since`` (the
        monotonic time just before the request) is surely still this process's: its
        length, less a margin for the time the request took on the store's side."""
        return since + self.lease * (1.0 - LEASE_MARGIN)

    def leased(self, run_ids: list[str] | set[str], since: float) -> None:
        """Runs this process just claimed, with a request sent at ``since``."""
        deadline = self.lease_deadline(since)
        for run_id in run_ids:
            self.run_leases[run_id] = deadline

    def jobs_leased(self, keys: list[tuple[str, str]], since: float) -> None:
        """Jobs this process just claimed, with a request sent at ``since``."""
        deadline = self.lease_deadline(since)
        for key in keys:
            self.job_leases[key] = deadline

    def _renewed(self, renewal: LeaseRenewal, since: float, held: list[str]) -> list[str]:
        """Move the deadlines of the leases the renewal (sent at ``since`` for the runs
        ``held``) confirmed, and return the runs whose passes hold a lease it found lost.
        A lease taken after the renewal was sent (its deadline is later) is left as it is:
        the renewal may have seen the run between two passes, released."""
        deadline = self.lease_deadline(since)
        lost: list[str] = []
        for run_id in held:
            current = self.run_leases.get(run_id)
            if current is None or current > deadline:
                continue  # between passes, or claimed again since
            if run_id in renewal.lost:
                lost.append(run_id)
            else:
                self.run_leases[run_id] = deadline
        for key in renewal.jobs:
            current = self.job_leases.get(key)
            if current is not None and current < deadline:
                self.job_leases[key] = deadline
        return lost

    async def keep_lease(self, run_id: str, key: str | None = None) -> bool:
        """Whether the lease on ``run_id`` (on its job ``key``, for a job step) is still
        this process's, judged right before a step body starts. Within its deadline this
        is a look at the monotonic clock; past it (a freeze, a stalled loop) the store is
        asked, which also renews the lease if it is still ours. The last look is on the
        clock, with no await between it and the caller's next line: a freeze while the
        store answered sends it back to the store.

        The brakes are looked at the same way: a copy read more than a lease ago (the
        same freeze, or a loop held up while the stall guard kept the lease) is read
        again, so that the caller, which asks ``braked`` next, starts no body later than
        a lease after a pause committed."""
        leases: dict[Any, float] = self.run_leases if key is None else self.job_leases
        item: Any = run_id if key is None else (run_id, key)
        for _ in range(3):
            deadline = leases.get(item)
            now = time.monotonic()
            if deadline is not None and now < deadline:
                if now - self.brakes_read_at < self.lease:
                    return True
                await self.refresh_brakes()
                continue
            since = time.monotonic()
            holding = [run_id] if key is None else []
            renewal = await self.store.renew_leases(self.owner, self.lease, holding, [])
            gone = run_id in renewal.lost or run_id in renewal.ended
            if gone if key is None else (item not in renewal.jobs):
                leases.pop(item, None)
                log.warning(
                    "run %s%s: the lease ran out while this process was held up and another "
                    "worker has it (or the run ended); starting nothing more of it here",
                    run_id,
                    "" if key is None else f" step {key}",
                )
                return False
            leases[item] = self.lease_deadline(since)
        return False

    def lose_runs(self, run_ids: Collection[str]) -> None:
        """Stop the passes of runs whose leases another worker holds now: their writes
        would be refused, and nothing more of them may start here. Unlike a cancel, the
        run goes on, elsewhere."""
        for run_id in run_ids:
            self.run_leases.pop(run_id, None)
            task = self.driving.get(run_id)
            if task is not None:
                log.warning("run %s: its lease was taken over; stopping its pass here", run_id)
                task.cancel()

    async def _stop_lost_jobs(self) -> None:
        """Cancel the bodies of jobs this process no longer holds: the workflow cancelled
        their steps (its pass deleted the job), or another worker took them. Their ends
        would be refused; a sync body runs on to its end in its thread all the same."""
        asked = dict(self.attempting)
        try:
            lost = await self.store.lost_jobs(self.owner, sorted(asked))
        except Exception:
            log.exception("checking the jobs in hand failed")
            return
        for key in lost:
            # only the attempt asked about: while the store answered, it may have ended
            # and the step's next attempt (same key) begun here, which this worker holds
            task = asked.get(key)
            current = self.attempting.get(key)
            if task is not None and current is not None and current is task:
                del self.attempting[key]
                current.cancel()

    def cancel_local(self, run_ids: Collection[str]) -> None:
        """Stop in-process work of cancelled runs right away."""
        self.cancelled.update(run_ids)
        for run_id in run_ids:
            task = self.driving.get(run_id)
            if task is not None:
                task.cancel()
            for (rid, _key), step_task in list(self.stepping.items()):
                if rid == run_id:
                    step_task.cancel()
