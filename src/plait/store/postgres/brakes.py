"""Brakes and the worker registry on PostgreSQL: pausing and resuming a workflow or a
queue for every process, and the workers that record themselves while they work.
"""

from __future__ import annotations

import json

from plait.statuses import RunStatusName
from plait.store.postgres.part import Part
from plait.store.rows import Brake, WorkerRow


class Brakes(Part):
    """Pause, resume, and who works the database."""

    async def pause(
        self, kind: str, name: str, status: RunStatusName, from_status: RunStatusName
    ) -> list[str]:
        now = self._now()
        await self._call("execute", self._q["put_brake"], kind, name, now)
        return await self.park_braked(status, from_status)

    async def unpause(
        self, kind: str, name: str, status: RunStatusName, paused: RunStatusName
    ) -> list[str]:
        await self._call("execute", self._q["delete_brake"], kind, name)
        rows = await self._call("fetch", self._q["release_unbraked"], status, paused, self._now())
        released = [r[0] for r in rows]
        if released:
            self._listener.publish("work", "")
        return released

    async def park_braked(self, status: RunStatusName, from_status: RunStatusName) -> list[str]:
        rows = await self._call("fetch", self._q["park_braked"], status, from_status, self._now())
        return [r[0] for r in rows]

    async def list_brakes(self) -> list[Brake]:
        rows = await self._call("fetch", self._q["list_brakes"], read=True)
        return [Brake(r[0], r[1], float(r[2])) for r in rows]

    async def put_worker(self, row: WorkerRow) -> None:
        await self._call(
            "execute",
            self._q["put_worker"],
            row.id,
            row.host,
            row.pid,
            row.app,
            row.version,
            None if row.queues is None else json.dumps(list(row.queues)),
            json.dumps(list(row.workflows)),
            row.started_at,
            row.seen_at,
        )

    async def list_workers(self, seen_since: float) -> list[WorkerRow]:
        rows = await self._call("fetch", self._q["list_workers"], seen_since, read=True)
        return [
            WorkerRow(
                r[0],
                r[1],
                int(r[2]),
                r[3],
                r[4],
                None if r[5] is None else tuple(json.loads(r[5])),
                tuple(json.loads(r[6])),
                float(r[7]),
                float(r[8]),
            )
            for r in rows
        ]

    async def forget_workers(self, seen_before: float) -> None:
        await self._call("execute", self._q["forget_workers"], seen_before)
