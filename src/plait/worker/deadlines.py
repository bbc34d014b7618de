"""The deadline loop: runs past their deadline end ``failed`` / ``RUN_TIMEOUT``.

A run's deadline (``@app.workflow(timeout=)``, ``start(timeout=)``) is stored on its row
(``deadline_at``), so it is a durable timer like a sleep: every worker looks for live runs
past it, whoever drives them and whatever state they are in (queued for admission,
running, waiting, suspended, paused by a brake, parked ``needs_attention``), and however
many processes died since they started. The time-out is written from outside the run's
passes, as a user's cancel is (``runs.timed_out``): a process that drives the run, or
runs one of its steps, stops that work as it stops a cancelled run's (here at once,
elsewhere at its next lease renewal), and the fence of its lease keeps a late outcome
from being written as the run's.
"""

from __future__ import annotations

import asyncio
import logging

from plait.runtime import runs
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")
#: runs timed out in one look before the loop looks again at once
BATCH = 100


class Deadlines(WorkerState):
    """Times out the runs whose deadline passed."""

    def deadline_set(self, deadline_at: float) -> None:
        """A run was started here with a deadline: look again before it passes, rather
        than at the next poll."""
        planned = self.deadline_look_at
        if planned is None or deadline_at < planned:
            self.wake_deadlines.set()

    async def _deadline_loop(self) -> None:
        """Time out due runs, then sleep until the next deadline (or the poll interval,
        for deadlines other processes set)."""
        while not self.stopping:
            self.wake_deadlines.clear()
            wait = self.poll_interval
            try:
                due = await self.store.due_deadlines(self.clock.now(), BATCH)
                moved = 0
                for run_id, deadline_at in due:
                    moved += await self._time_out(run_id, deadline_at)
                upcoming = await self.store.next_deadline()
                if len(due) == BATCH and moved:
                    wait = 0.0
                elif upcoming is not None:
                    left = upcoming - self.clock.now()
                    # one still due that nothing moved is another process's to end: wait
                    # for it a moment rather than spin
                    wait = min(wait, left + 0.001) if left > 0 else min(wait, 0.05)
            except Exception:
                log.exception("timing out runs past their deadline failed; retrying")
            self.deadline_look_at = self.clock.now() + wait
            if wait > 0:
                await self.clock.wait(self.wake_deadlines, wait)
            else:
                await asyncio.sleep(0)

    async def _time_out(self, run_id: str, deadline_at: float) -> int:
        """End run ``run_id`` for its deadline (if no one ended it first) and stop its
        work here; how many runs moved."""
        end = runs.timed_out(run_id, deadline_at)
        moved = await self.store.time_out_run(
            run_id, end.status, end.error, end.parent, end.cut, end.children
        )
        if not moved:
            return 0
        self.cancel_local(moved)
        # a run of a queue frees its slot (or its place in the line); a parent whose
        # child timed out goes on
        self.notifier.publish_work()
        if self.log_runs:
            log.info("run %s passed its deadline: failed RUN_TIMEOUT", run_id)
        telemetry = self.telemetry
        for rid in moved:
            if telemetry is not None:
                ended = await self.store.get_run(rid)
                if ended is not None:
                    telemetry.run_ended(rid, ended.workflow, ended.status.value)
            self.notifier.run_changed(rid, settled=True)
        return len(moved)
