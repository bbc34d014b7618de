"""Workflow versions on SQLite: recorded versions, graphs registered at run time and who
owns a graph's name.
"""

from __future__ import annotations

import sqlite3

from plait.store import convert
from plait.store.rows import Version
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL


class Versions(Part):
    """Stored versions and graph names."""

    async def put_version(
        self,
        workflow: str,
        version: str,
        kind: str,
        definition: str | None,
        status: str,
        registered_by: str | None = None,
    ) -> None:
        def go(conn: sqlite3.Connection) -> None:
            now = self._now()
            conn.execute(
                SQL["put_version"],
                (workflow, version, kind, definition, status, now, now, registered_by),
            )

        await self._write(go)

    async def claim_graph(self, workflow: str, owner: str | None) -> str | None:
        def go(conn: sqlite3.Connection) -> str | None:
            conn.execute(SQL["claim_graph"], (workflow, owner, self._now()))
            holder: str | None = conn.execute(SQL["graph_owner"], (workflow,)).fetchone()[0]
            return holder

        return await self._write(go)

    async def get_version(self, workflow: str, version: str) -> Version | None:
        rows = await self._versions(workflow, version, None)
        return rows[0] if rows else None

    async def list_versions(
        self, workflow: str | None = None, status: str | None = None
    ) -> list[Version]:
        return await self._versions(workflow, None, status)

    async def _versions(
        self, workflow: str | None, version: str | None, status: str | None
    ) -> list[Version]:
        params = {"workflow": workflow, "version": version, "status": status}

        def go(conn: sqlite3.Connection) -> list[Version]:
            rows = conn.execute(SQL["list_versions"], params).fetchall()
            return [convert.version_record(r) for r in rows]

        return await self._read(go)
