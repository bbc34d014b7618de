"""Schedules at run time: store the app's, create, list, pause, resume, trigger and
delete them. What a schedule is (ticks, overlap, catch-up) is ``plait.schedules``'s; the
worker fires the ticks."""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Any, Literal

from plait import schedules
from plait.engine.base import EngineBase
from plait.errors import (
    ScheduleChangedError,
    ScheduleNotFoundError,
    WorkflowNotFoundError,
)
from plait.ids import check_name
from plait.records import Schedule
from plait.store import convert
from plait.store.rows import ScheduleAsRead, ScheduleRow
from plait.worker import spec_of

#: the milliseconds a schedule trigger tries, from now on, for a run id not yet taken
_TRIGGER_TRIES = 100


class SchedulesMixin(EngineBase):
    """``Engine.create_schedule``, ``list_schedules``, ``get_schedule``,
    ``pause_schedule``, ``resume_schedule``, ``trigger_schedule`` and
    ``delete_schedule``."""

    async def _store_app_schedules(self) -> None:
        """Store the schedules this app declares; an unchanged one is left as it is (its
        status, next tick and last run), a changed one gets its new definition."""
        for spec in self.app.schedules.values():
            await self._put_schedule(spec, "app", None)

    async def _put_schedule(
        self,
        spec: schedules.ScheduleSpec,
        source: str,
        owner: str | None,
        as_read: ScheduleAsRead | None = None,
    ) -> bool:
        """Store a schedule with the queue its workflow is registered with here (both
        callers resolved the workflow first), so a process without the workflow's code
        starts a tick's run through that queue too; with ``as_read``, only over the
        schedule as the caller read it (``ScheduleChangedError`` otherwise)."""
        wdef = self.app.workflows.get(spec.workflow)
        spec = dataclasses.replace(spec, queue=None if wdef is None else wdef.queue)
        now = self.clock.now()
        row = ScheduleRow(
            name=spec.name,
            workflow=spec.workflow,
            definition=spec.definition(),
            status="active",
            source=source,
            owner=owner,
            next_tick=spec.next_tick(now),
            last_tick=None,
            last_run_id=None,
            created_at=now,
            updated_at=now,
        )
        changed = await self.store.put_schedule(row, as_read)
        if changed is None:
            raise ScheduleChangedError(spec.name)
        if changed and self._worker is not None:
            self._worker.wake_schedules.set()
        return changed

    async def create_schedule(
        self,
        name: str,
        *,
        workflow: str,
        cron: str | None = None,
        every: float | str | timedelta | None = None,
        input: Any = None,
        timezone: str = "UTC",
        overlap: str = "skip",
        catchup: float | str | timedelta = "0s",
        owner: str | None = None,
        replaces: Schedule | Literal[True] | None = True,
    ) -> Schedule:
        """Store a schedule at run time; every worker on the database fires it. A schedule
        of that name gets the new definition (its paused or active status is kept). An
        input over this engine's limits is refused before anything is stored
        (``PayloadTooLargeError``, ``PayloadTooDeepError``).

        ``replaces`` is for a caller that decides by what is stored (whose schedule it
        may store over, as the HTTP API does): ``None`` stores only if no schedule of
        that name exists, a ``Schedule`` it read only over one that still has that
        schedule's owner. Checked and written as one, so of two callers that decided on
        one read only one stores; the other gets ``ScheduleChangedError``, and reads
        again. ``True`` (the default) replaces whatever is stored."""
        spec = schedules.make_spec(
            name,
            workflow=workflow,
            input=input,
            cron=cron,
            every=every,
            timezone=timezone,
            overlap=overlap,
            catchup=catchup,
            limits=self.limits,
        )
        await self.catalog.resolve(spec.workflow)
        if owner is not None and not isinstance(owner, str):
            raise TypeError(f"owner must be a string, got {type(owner).__name__}")
        as_read = None
        if replaces is None:
            as_read = ScheduleAsRead(False)
        elif replaces is not True:
            if not isinstance(replaces, Schedule):
                raise TypeError(
                    f"replaces must be a Schedule, None or True, got {type(replaces).__name__}"
                )
            if replaces.name != spec.name:
                raise ValueError(
                    f"replaces is schedule {replaces.name!r}, not the {spec.name!r} stored"
                )
            as_read = ScheduleAsRead(True, replaces.owner)
        await self._put_schedule(spec, "api", owner, as_read)
        return await self.get_schedule(spec.name)

    async def list_schedules(self) -> list[Schedule]:
        """Every stored schedule, by name, with its next tick and its last run."""
        return [convert.schedule_record(r) for r in await self.store.get_schedules()]

    async def get_schedule(self, name: str) -> Schedule:
        rows = await self.store.get_schedules(self._schedule_name(name))
        if not rows:
            raise ScheduleNotFoundError(name)
        return convert.schedule_record(rows[0])

    async def pause_schedule(self, name: str) -> Schedule:
        """No tick starts until ``resume_schedule``; ticks that pass meanwhile never do."""
        await self.get_schedule(name)
        row = await self.store.set_schedule_status(name, "paused", None)
        if row is None:
            raise ScheduleNotFoundError(name)
        return convert.schedule_record(row)

    async def resume_schedule(self, name: str) -> Schedule:
        """Fire again from the next tick after now (ticks missed while paused are not
        caught up)."""
        current = await self.get_schedule(name)
        spec = schedules.make_spec(
            current.name,
            workflow=current.workflow,
            input=current.input,
            cron=current.cron,
            every=current.every,
            timezone=current.timezone,
            overlap=current.overlap,
            catchup=current.catchup,
        )
        row = await self.store.set_schedule_status(name, "active", spec.next_tick(self.clock.now()))
        if row is None:
            raise ScheduleNotFoundError(name)
        self.worker.wake_schedules.set()
        return convert.schedule_record(row)

    async def trigger_schedule(self, name: str) -> str:
        """Start the schedule's workflow now, whatever its status and overlap policy; the
        run counts as its last run. Returns the run id. The run goes through the
        workflow's queue even from a process that lacks the workflow's code (the command
        line): the schedule stored the queue with its definition."""
        rows = await self.store.get_schedules(self._schedule_name(name))
        if not rows:
            raise ScheduleNotFoundError(name)
        current = spec_of(rows[0])
        kind, version = await self._describe_stored(current.workflow)
        # A run id names the moment to the millisecond: a trigger that finds its id taken
        # (another trigger in the same millisecond, or a tick at that very moment) takes
        # the next millisecond, so every trigger starts a run of its own.
        moment = math.floor(self.clock.now() * 1000)
        for later in range(_TRIGGER_TRIES):
            run = self.worker.scheduled_run(
                current.name,
                current.workflow,
                current.input,
                kind,
                version,
                (moment + later) / 1000,
                rows[0].owner,
                stored_queue=current.queue,
            )
            started = await self.store.fire_schedule(name, None, None, [run], False)
            if started is None:
                raise ScheduleNotFoundError(name)
            if started:
                self.notifier.publish_work()
                return started[0]
        raise RuntimeError(
            f"schedule {name!r}: the runs of the {_TRIGGER_TRIES} milliseconds from "
            f"{schedules.run_id_for(name, moment / 1000)} exist already"
        )

    async def _describe_stored(self, workflow: str) -> tuple[str, str | None]:
        """(kind, version) of a new run of ``workflow``: this app's, or, for a process
        that does not load the app (the command line), the version its deployment
        recorded last."""
        try:
            return await self.catalog.resolve(workflow)
        except WorkflowNotFoundError:
            recorded = await self.store.list_versions(workflow=workflow)
            if not recorded:
                raise
            return recorded[0].kind, recorded[0].version

    async def delete_schedule(self, name: str) -> None:
        """Remove the schedule; its runs are left alone. A schedule declared with
        ``app.schedule`` is stored again when a process that declares it opens."""
        if not await self.store.delete_schedule(self._schedule_name(name)):
            raise ScheduleNotFoundError(name)

    @staticmethod
    def _schedule_name(name: object) -> str:
        """A name to look a schedule up by, checked against the rule names are stored by: one no
        schedule can have is refused here, naming it, before a store sees text it may not
        take (PostgreSQL has no NUL character)."""
        return check_name(name, "schedule name", limit=schedules.MAX_NAME)
