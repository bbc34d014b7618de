"""Workflow versions on PostgreSQL: recorded versions, graphs registered at run time and
who owns a graph's name.
"""

from __future__ import annotations

from plait.store import convert
from plait.store.postgres.part import Part
from plait.store.rows import Version


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
        await self._call(
            "execute",
            self._q["put_version"],
            workflow,
            version,
            kind,
            definition,
            status,
            self._now(),
            registered_by,
        )

    async def claim_graph(self, workflow: str, owner: str | None) -> str | None:
        # two statements, each committed: the second one's fresh snapshot sees a claim
        # that a racing process committed while the first one waited for it
        await self._call("execute", self._q["claim_graph"], workflow, owner, self._now())
        holder: str | None = await self._call(
            "fetchval", self._q["graph_owner"], workflow, read=True
        )
        return holder

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
        rows = await self._call(
            "fetch", self._q["list_versions"], workflow, version, status, read=True
        )
        return [convert.version_record(tuple(r)) for r in rows]
