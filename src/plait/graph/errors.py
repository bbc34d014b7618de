"""Errors of graph workflows, in a module of their own so the engine can import them
without importing the graph machinery (and without an import cycle)."""

from __future__ import annotations

from collections.abc import Iterable

from plait.errors import PlaitError


class GraphValidationError(PlaitError, ValueError):
    """A graph definition with problems; all of them at once, so one edit can fix them all.

    ``problems`` are complete sentences, each naming the node and the bad thing, in the
    order they were found (definition order of the nodes).
    """

    def __init__(self, graph_name: str, problems: Iterable[str]) -> None:
        self.graph_name = graph_name
        self.problems: list[str] = list(problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = "".join(f"\n  - {p}" for p in self.problems)
        super().__init__(f"graph {graph_name!r} is invalid ({count} {noun}):{lines}")

    def __reduce__(self) -> tuple[type[GraphValidationError], tuple[str, list[str]]]:
        return (type(self), (self.graph_name, self.problems))


class GraphValueError(PlaitError, ValueError):
    """A value that cannot be resolved while a run goes on: most often a ``$ref`` to a node
    that did not run (an untaken branch), which must never turn silently into ``None``.

    ``node`` is who asked (a node id, or ``"output"`` for the graph's output) and
    ``missing`` the node that did not run, when that is the cause.
    """

    def __init__(self, message: str, *, node: str | None = None, missing: str | None = None):
        super().__init__(message)
        self.node = node
        self.missing = missing

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_value_error, (str(self), self.node, self.missing))


def _rebuild_value_error(message: str, node: str | None, missing: str | None) -> GraphValueError:
    return GraphValueError(message, node=node, missing=missing)
