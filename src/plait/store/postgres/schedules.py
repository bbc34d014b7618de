"""Schedules on PostgreSQL: stored schedules, their due ticks, and firing a tick (its
runs started and its next tick moved in one statement).
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.store.postgres.codec import new_run_value, schedule_row
from plait.store.postgres.part import Part
from plait.store.rows import NewRun, ScheduleAsRead, ScheduleRow


class Schedules(Part):
    """Schedules and their ticks."""

    async def put_schedule(
        self, row: ScheduleRow, as_read: ScheduleAsRead | None = None
    ) -> bool | None:
        params = (
            row.name,
            row.workflow,
            row.definition,
            row.status,
            row.source,
            row.owner,
            row.next_tick,
            self._now(),
        )
        if as_read is not None:
            written: bool | None = await self._call(
                "fetchval", self._q["put_schedule_as_read"], *params, as_read.found, as_read.owner
            )
            return written
        changed = await self._call("fetchval", self._q["put_schedule"], *params)
        return changed is not None

    async def get_schedules(self, name: str | None = None) -> list[ScheduleRow]:
        rows = await self._call("fetch", self._q["get_schedules"], name, read=True)
        return [schedule_row(r) for r in rows]

    async def due_schedules(self, now: float, limit: int) -> list[ScheduleRow]:
        rows = await self._call("fetch", self._q["due_schedules"], now, limit, read=True)
        return [schedule_row(r) for r in rows]

    async def next_schedule_tick(self) -> float | None:
        due = await self._call("fetchval", self._q["next_schedule_tick"], read=True)
        return float(due) if due is not None else None

    async def fire_schedule(
        self,
        name: str,
        expected: float | None,
        next_tick: float | None,
        runs: Sequence[NewRun],
        skip_if_live: bool,
    ) -> list[str] | None:
        started = await self._call(
            "fetchval",
            self._q["fire_schedule"],
            name,
            expected,
            next_tick,
            [new_run_value(n) for n in runs],
            skip_if_live,
            self._now(),
        )
        if started is None:
            return None
        if started:
            self._listener.publish("work", "")
        return list(started)

    async def set_schedule_status(
        self, name: str, status: str, next_tick: float | None
    ) -> ScheduleRow | None:
        rec = await self._call(
            "fetchrow", self._q["set_schedule_status"], name, status, next_tick, self._now()
        )
        return None if rec is None else schedule_row(rec)

    async def delete_schedule(self, name: str) -> bool:
        return await self._call("fetchval", self._q["delete_schedule"], name) is not None
