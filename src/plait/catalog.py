"""Which definition a run uses: code registered on the App, or a graph stored at run time.

A run records the kind and version of what it started on. Every pass asks the catalog for
that exact definition again, so a deploy that changed a workflow never makes a running
run replay on code it did not start with (unless no other version is left: then the
replay checks that the new code follows the recorded steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plait import errors, serde
from plait.app import App, WorkflowDef
from plait.store.contract import Store

if TYPE_CHECKING:
    from plait.graph import Graph

#: the status of a graph definition recorded from an App's registrations
DEPLOYED = "deployed"


class Catalog:
    """The definitions one process knows: its App's, plus graphs read from the store."""

    def __init__(self, app: App, store: Store) -> None:
        self.app = app
        self.store = store
        self._graphs: dict[tuple[str, str], Graph] = {}

    async def record_versions(self) -> None:
        """Store the versions of this deployment's code workflows (for ``runs list`` and
        for the graphs' version history), and the definition of every graph it
        registers: a run started on a graph the next deploy changes goes on with the
        definition it started on. Those are stored as ``deployed``, not ``active``: a
        graph dropped from the code cannot be started by name from the database."""
        for name, versions in self.app.workflow_versions.items():
            for version in versions:
                await self.store.put_version(name, version, "workflow", None, "active")
        for name, graph in self.app.graphs.items():
            version = graph.content_hash()
            # a name the code ever defined stays trusted code's: no user can take it over
            # once a deploy drops it
            await self.store.claim_graph(name, None)
            if await self.store.get_version(name, version) is None:
                await self.store.put_version(
                    name, version, "graph", graph.canonical_json(), DEPLOYED
                )

    def describe(self, name: str) -> tuple[str, str | None]:
        """(kind, version) a new run of registered code ``name`` records."""
        if name in self.app.workflows:
            return "workflow", self.app.workflows[name].version
        graph = self.app.graphs.get(name)
        if graph is not None:
            return "graph", graph.content_hash()
        raise self.not_found(name)

    async def resolve(self, name: str) -> tuple[str, str | None]:
        """(kind, version) for a new run: registered code first, then active stored graphs."""
        if not isinstance(name, str):
            raise TypeError(f"workflow name must be a string, got {type(name).__name__}")
        if "\x00" in name:
            raise self.not_found(name)
        if self.app.is_runnable(name):
            return self.describe(name)
        version = await self.stored_graph(name)
        if version is not None:
            return "graph", version
        raise self.not_found(name)

    def not_found(self, name: str) -> errors.WorkflowNotFoundError:
        return errors.WorkflowNotFoundError(name, [*self.app.workflows, *self.app.graphs])

    def workflow_for(self, name: str, version: str | None) -> tuple[WorkflowDef | None, bool]:
        """The code a run of ``name`` replays on, and whether it is another version than
        the one the run started on (``foreign``)."""
        wdef = self.app.workflow_version(name, version)
        if wdef is not None:
            return wdef, False
        return self.app.workflows.get(name), True

    async def stored_graph(self, name: str) -> str | None:
        """The active version of a graph registered at run time under ``name``, if any."""
        for stored in await self.store.list_versions(workflow=name, status="active"):
            if stored.kind == "graph":
                return stored.version
        return None

    async def register_graph(
        self, name: str, definition: Any, status: str, registered_by: str | None = None
    ) -> str:
        """Validate and store a graph definition; returns its content hash.

        For a user (``registered_by``), a name the app's code defines is refused, and so
        is a name another user registered first: the first registration claims the name
        (one conditional write, so two users racing for a new name cannot both win).
        Trusted code (``registered_by=None``) may register any name."""
        if status not in ("draft", "active"):
            raise ValueError(f"invalid graph status: {status!r} (use 'draft' or 'active')")
        if not isinstance(name, str) or not name or "\x00" in name:
            raise ValueError(f"invalid graph name: {name!r}")
        from plait.graph import load_graph, validate_or_raise  # graphs only (see plait.graph)

        graph = load_graph(name, definition)
        validate_or_raise(graph)
        version = graph.content_hash()
        text = graph.canonical_json()
        problem = serde.unstorable(text)
        if problem is not None:
            raise ValueError(f"the definition of graph {name!r} cannot be stored: {problem}")
        if registered_by is not None and name in (*self.app.workflows, *self.app.graphs):
            raise errors.GraphOwnerError(name, "is defined by the app's code")
        holder = await self.store.claim_graph(name, registered_by)
        if registered_by is not None and holder != registered_by:
            raise errors.GraphOwnerError(name, "was registered by another user")
        await self.store.put_version(name, version, "graph", text, status, registered_by)
        self._graphs[(name, version)] = graph
        return version

    async def graph_for(self, name: str, version: str | None) -> Graph | None:
        """The graph definition a run started on, even if the graph changed since."""
        graph: Graph | None = self.app.graphs.get(name)
        if graph is not None and (version is None or graph.content_hash() == version):
            return graph
        cached = self._graphs.get((name, version or ""))
        if cached is not None:
            return cached
        if version is None:
            return None
        stored = await self.store.get_version(name, version)
        if stored is None or stored.definition is None:
            return None
        from plait.graph import load_graph  # graphs only (see plait.graph)

        graph = load_graph(name, stored.definition)
        self._graphs[(name, version)] = graph
        return graph
