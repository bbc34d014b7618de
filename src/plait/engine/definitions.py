"""Definitions: what a new run of a name records, and graphs registered at run time."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from plait.engine.base import EngineBase
from plait.records import GraphStatus


class DefinitionsMixin(EngineBase):
    """``describe``, ``register_graph``, ``list_graphs`` and ``graph_for``."""

    def describe(self, name: str) -> tuple[str, str | None]:
        """(kind, version) a new run of ``name`` records."""
        return self.catalog.describe(name)

    async def register_graph(
        self,
        name: str,
        definition: Any,
        *,
        status: GraphStatus = "active",
        registered_by: str | None = None,
    ) -> str:
        """Store a graph definition at run time; every process on this database can start
        it once it is ``active``. Returns its content hash (the version runs record).

        ``registered_by`` names the user it is registered for (the HTTP API passes the
        caller): a graph name then belongs to the first user who registered it, and
        nobody else may register versions of it, nor of a name the app's code defines
        (``plait.GraphOwnerError``). Without it the caller is trusted code."""
        return await self.catalog.register_graph(name, definition, status, registered_by)

    async def list_graphs(
        self, status: GraphStatus | Literal["deployed"] | None = None
    ) -> list[dict[str, Any]]:
        """Graphs registered at run time (newest first), with their status and hash."""
        if status not in (None, "draft", "active", "deployed"):
            raise ValueError(f"invalid graph status: {status!r} (use draft, active or deployed)")
        versions = await self.store.list_versions(status=status)
        return [dataclasses.asdict(v) for v in versions if v.kind == "graph"]

    async def graph_for(self, name: str, version: str | None) -> Any:
        """The graph definition a run started on, even if the graph changed since."""
        return await self.catalog.graph_for(name, version)
