"""The schedule loop: the runs of due schedule ticks, one per tick however many workers look."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from plait import ids, schedules, serde
from plait import tags as tag_rules
from plait.runtime import runs
from plait.store.rows import NewRun, ScheduleRow
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")


def spec_of(row: ScheduleRow) -> schedules.ScheduleSpec:
    """A stored schedule's definition as a ``ScheduleSpec``."""
    data = serde.loads(row.definition) if isinstance(row.definition, str) else row.definition
    return schedules.ScheduleSpec(
        name=row.name,
        workflow=row.workflow,
        input=data.get("input"),
        cron=data.get("cron"),
        every=data.get("every"),
        timezone=data.get("timezone", "UTC"),
        overlap=data.get("overlap", "skip"),
        catchup=float(data.get("catchup", 0.0)),
        queue=data.get("queue"),
    )


class Ticks(WorkerState):
    """Fires due schedule ticks: ``scheduled_run`` is the run of one tick."""

    async def _schedule_loop(self) -> None:
        """Start the runs of due schedule ticks. Every worker runs this loop; a tick's run
        id is the same in all of them and the schedule's next tick moves by a compare and
        set, so each tick starts one run however many workers look at it."""
        batch = 100
        while not self.stopping:
            self.wake_schedules.clear()
            wait = self.poll_interval
            try:
                now = self.clock.now()
                due = await self.store.due_schedules(now, batch)
                fired = 0
                for row in due:
                    fired += await self._fire(row, now)
                upcoming = await self.store.next_schedule_tick()
                if upcoming is not None:
                    wait = max(0.0, min(wait, upcoming - self.clock.now() + 0.001))
                if fired and len(due) == batch:
                    wait = 0.0
                elif due and not fired:
                    # due, but not startable here: leave it to a process that can
                    wait = self.poll_interval
            except Exception:
                log.exception("starting scheduled runs failed; retrying")
            if wait > 0:
                await self.clock.wait(self.wake_schedules, wait)
            else:
                await asyncio.sleep(0)

    async def _fire(self, row: ScheduleRow, now: float) -> int:
        """Start the due ticks of one schedule; how many looks it took (0: none here)."""
        if row.next_tick is None:
            return 0
        spec = spec_of(row)
        try:
            kind, version = await self.catalog.resolve(spec.workflow)
        except Exception:
            if row.name not in self._unknown_schedules:
                self._unknown_schedules.add(row.name)
                log.warning(
                    "schedule %s: workflow %r is not in this app; another worker may start it",
                    row.name,
                    spec.workflow,
                )
            return 0
        ticks, next_tick = schedules.due_ticks(spec, row.next_tick, now)
        runs = [
            self.scheduled_run(
                spec.name,
                spec.workflow,
                spec.input,
                kind,
                version,
                tick,
                row.owner,
                stored_queue=spec.queue,
            )
            for tick in ticks
        ]
        started = await self.store.fire_schedule(
            row.name, row.next_tick, next_tick, runs, spec.overlap == "skip"
        )
        log_starts = self.log_runs or (self.telemetry is not None and self.telemetry.log_work)
        for run_id in started or ():
            if log_starts:
                log.info("schedule %s started run %s", row.name, run_id)
            self.notifier.run_changed(run_id, settled=False)
        if started:
            self.wake()
        return 1

    def scheduled_run(
        self,
        name: str,
        workflow: str,
        data: Any,
        kind: str,
        version: str | None,
        tick: float,
        owner: str | None,
        *,
        stored_queue: str | None = None,
    ) -> NewRun:
        """The run of one tick of schedule ``name``: its id names the schedule and the
        tick; a workflow declared with a queue is admitted through it.

        The queue is the workflow's as this process registers it; a process that does
        not register the workflow (the command line, an engine of another app) uses
        ``stored_queue``, the queue the schedule recorded when it was stored
        (``ScheduleSpec.queue``), so the run never skips its queue for want of code."""
        wdef = self.catalog.app.workflows.get(workflow)
        queue = wdef.queue if wdef is not None else stored_queue
        timeout = None if wdef is None else wdef.timeout
        return NewRun(
            id=schedules.run_id_for(name, tick),
            workflow=workflow,
            kind=kind,
            version=version,
            # not checked against this process's limits again: they were when the schedule
            # was made, and a definition PostgreSQL stored as jsonb (before schema 6) may
            # spell a number longer than it came (1e300 as 301 digits), so a second measure
            # could refuse what was accepted
            input=serde.dumps(data, what=f"the input of schedule {name!r}"),
            # a schedule without an owner (declared in code, or made by trusted code)
            # starts runs of no user: the schedule's own owner keeps them from the users
            # who may not operate it
            owner=owner if owner is not None else ids.schedule_owner(name),
            status=runs.initial_status(queue is not None),
            held_status=runs.BRAKED_START,  # a paused workflow's tick waits queued
            queue=queue,
            scheduled_at=tick,
            deadline_at=runs.deadline(self.clock.now(), timeout),
            timeout=timeout,
            tags=None if wdef is None else tag_rules.dumps(wdef.tags),
        )
