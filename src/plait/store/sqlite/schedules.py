"""Schedules on SQLite: stored schedules, their due ticks, and firing a tick (its runs
started and its next tick moved in one transaction).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from plait.store.rows import NewRun, ScheduleAsRead, ScheduleRow
from plait.store.sqlite import apply
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL


class Schedules(Part):
    """Schedules and their ticks."""

    async def put_schedule(
        self, row: ScheduleRow, as_read: ScheduleAsRead | None = None
    ) -> bool | None:
        def go(conn: sqlite3.Connection) -> bool | None:
            if as_read is not None:
                # the read and the write share the writer's transaction: nothing comes
                # between them
                found = conn.execute(SQL["schedule_owner"], (row.name,)).fetchone()
                if found is not None and not (as_read.found and found[0] == as_read.owner):
                    return None
            cur = conn.execute(SQL["put_schedule"], _schedule_params(row))
            return cur.rowcount > 0

        return await self._write(go)

    async def get_schedules(self, name: str | None = None) -> list[ScheduleRow]:
        def go(conn: sqlite3.Connection) -> list[ScheduleRow]:
            return [ScheduleRow(*r) for r in conn.execute(SQL["get_schedules"], (name, name))]

        return await self._read(go)

    async def due_schedules(self, now: float, limit: int) -> list[ScheduleRow]:
        def go(conn: sqlite3.Connection) -> list[ScheduleRow]:
            return [ScheduleRow(*r) for r in conn.execute(SQL["due_schedules"], (now, limit))]

        return await self._read_here(go)

    async def next_schedule_tick(self) -> float | None:
        def go(conn: sqlite3.Connection) -> float | None:
            tick: float | None = conn.execute(SQL["next_schedule_tick"]).fetchone()[0]
            return tick

        return await self._read_here(go)

    async def fire_schedule(
        self,
        name: str,
        expected: float | None,
        next_tick: float | None,
        runs: Sequence[NewRun],
        skip_if_live: bool,
    ) -> list[str] | None:
        def go(conn: sqlite3.Connection) -> list[str] | None:
            now = self._now()
            found = conn.execute(SQL["schedule_for_fire"], {"name": name}).fetchone()
            if found is None:
                return None
            status, current, going_on, last_status = found
            live = False
            if expected is not None:
                if status != "active" or current != expected:
                    return None
                # paused: a running run a brake holds, which goes on once let go
                live = skip_if_live and last_status in ("queued", "running", "paused")
            started: list[str] = []
            last_tick = None
            for new in runs:
                if live:
                    break
                if apply.insert_run(conn, apply.braked_start(conn, new), now) is not None:
                    started.append(new.id)
                    last_tick = new.scheduled_at
                    live = skip_if_live and expected is not None
            moved = current if expected is None else next_tick
            # the last run is the one its chain goes on as: the next look follows no
            # continue as new it followed here
            last = started[-1] if started else going_on
            conn.execute(SQL["fired_schedule"], (moved, last_tick, last, now, name))
            return started

        return await self._write(go)

    async def set_schedule_status(
        self, name: str, status: str, next_tick: float | None
    ) -> ScheduleRow | None:
        def go(conn: sqlite3.Connection) -> ScheduleRow | None:
            cur = conn.execute(SQL["set_schedule_status"], (status, next_tick, self._now(), name))
            if cur.rowcount == 0:
                return None
            return ScheduleRow(*conn.execute(SQL["get_schedules"], (name, name)).fetchone())

        return await self._write(go)

    async def delete_schedule(self, name: str) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            return conn.execute(SQL["delete_schedule"], (name,)).rowcount > 0

        return await self._write(go)


def _schedule_params(row: ScheduleRow) -> tuple[object, ...]:
    return (
        row.name,
        row.workflow,
        row.definition,
        row.status,
        row.source,
        row.owner,
        row.next_tick,
        row.last_tick,
        row.last_run_id,
        row.created_at,
        row.updated_at,
    )
