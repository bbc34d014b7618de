"""Brakes and the worker registry on SQLite: pausing and resuming a workflow or a queue
for every process, and the workers that record themselves while they work.
"""

from __future__ import annotations

import json
import sqlite3

from plait.statuses import RunStatusName
from plait.store.rows import Brake, WorkerRow
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL


class Brakes(Part):
    """Pause, resume, and who works the database."""

    async def pause(
        self, kind: str, name: str, status: RunStatusName, from_status: RunStatusName
    ) -> list[str]:
        def go(conn: sqlite3.Connection) -> list[str]:
            now = self._now()
            conn.execute(SQL["put_brake"], (kind, name, now))
            return _park(conn, status, from_status, now)

        return await self._write(go)

    async def unpause(
        self, kind: str, name: str, status: RunStatusName, paused: RunStatusName
    ) -> list[str]:
        def go(conn: sqlite3.Connection) -> list[str]:
            now = self._now()
            conn.execute(SQL["delete_brake"], (kind, name))
            params = {"to": status, "paused": paused, "now": now}
            return [r[0] for r in conn.execute(SQL["release_unbraked"], params).fetchall()]

        return await self._write(go)

    async def park_braked(self, status: RunStatusName, from_status: RunStatusName) -> list[str]:
        return await self._write(lambda conn: _park(conn, status, from_status, self._now()))

    async def list_brakes(self) -> list[Brake]:
        def go(conn: sqlite3.Connection) -> list[Brake]:
            return [Brake(*row) for row in conn.execute(SQL["list_brakes"]).fetchall()]

        return await self._read_here(go)

    async def put_worker(self, row: WorkerRow) -> None:
        params = (
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
        await self._write(lambda conn: conn.execute(SQL["put_worker"], params))

    async def list_workers(self, seen_since: float) -> list[WorkerRow]:
        def go(conn: sqlite3.Connection) -> list[WorkerRow]:
            rows = conn.execute(SQL["list_workers"], (seen_since,)).fetchall()
            return [
                WorkerRow(
                    wid,
                    host,
                    int(pid),
                    app,
                    version,
                    None if queues is None else tuple(json.loads(queues)),
                    tuple(json.loads(workflows)),
                    started,
                    seen,
                )
                for wid, host, pid, app, version, queues, workflows, started, seen in rows
            ]

        return await self._read(go)

    async def forget_workers(self, seen_before: float) -> None:
        await self._write(lambda conn: conn.execute(SQL["forget_workers"], (seen_before,)))


def _park(
    conn: sqlite3.Connection, status: RunStatusName, from_status: RunStatusName, now: float
) -> list[str]:
    params = {"paused": status, "from": from_status, "now": now}
    return [r[0] for r in conn.execute(SQL["park_braked"], params).fetchall()]
