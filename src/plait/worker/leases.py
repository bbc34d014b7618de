"""The lease loop: renewing the leases of work in hand, and stopping work whose run ended.

A lease is renewed every quarter of its length while this process drives the run or runs
one of its jobs; a renewal that finds a run gone (cancelled, or ended by another process)
stops its work here (``cancel_local``), and so does one that finds a job gone (its
workflow cancelled the step). The loop also beats the ``StallGuard``'s heart, so
a blocked event loop is noticed, reads the brakes (``worker.brakes``), records this
worker's heartbeat (``worker.registry``), and now and then sweeps runs that no one is
driving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")


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
                gone = await self.store.renew_leases(
                    self.owner, self.lease, self.holding(), stepping
                )
            except Exception:
                log.exception("renewing leases failed")
                continue
            if gone:
                self.cancel_local(gone)
            if self.attempting:
                await self._stop_lost_jobs()

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

    def cancel_local(self, run_ids: list[str] | set[str]) -> None:
        """Stop in-process work of cancelled runs right away."""
        self.cancelled.update(run_ids)
        for run_id in run_ids:
            task = self.driving.get(run_id)
            if task is not None:
                task.cancel()
            for (rid, _key), step_task in list(self.stepping.items()):
                if rid == run_id:
                    step_task.cancel()
