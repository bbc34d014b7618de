"""A small typed builder for people who prefer writing graphs in code.

It only assembles the dict form and hands it to the same loader, so a built graph and the
equivalent dict, JSON or YAML definition are equal and hash alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

from plait.durations import Duration
from plait.graph.checks import validate
from plait.graph.errors import GraphValidationError
from plait.graph.load import graph_from_dict
from plait.graph.model import Graph

NextSpec = str | Sequence[str] | Mapping[str, Any] | None
_NO_DEFAULT: Any = object()


def ref(root: str, path: str | None = None, *, default: Any = _NO_DEFAULT) -> dict[str, Any]:
    """``{"$ref": root, "path": path}``: the value at ``path`` in a node's output (or in
    ``"trigger"``, ``"$item"``, ``"$state"``). With ``default``, a node that did not run
    gives the default instead of an error."""
    value: dict[str, Any] = {"$ref": root}
    if path is not None:
        value["path"] = path
    if default is not _NO_DEFAULT:
        value["default"] = default
    return value


def template(text: str) -> dict[str, Any]:
    """``{"$template": text}``: a string with ``${root.path}`` placeholders."""
    return {"$template": text}


def branch_on(
    path: str,
    cases: Mapping[str, str | Sequence[str]],
    *,
    default: str | Sequence[str] | None = None,
) -> dict[str, Any]:
    """A ``next`` that follows the case equal to the node's output value at ``path``."""
    value: dict[str, Any] = {"$branch": path, "cases": {k: _ids(v) for k, v in cases.items()}}
    if default is not None:
        value["default"] = _ids(default)
    return value


class GraphBuilder:
    """``GraphBuilder("onboard").node("create", "create_user", next="welcome")...build()``.

    Mistakes are collected and reported together by ``build`` as a
    ``GraphValidationError``, like every other way of defining a graph.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._nodes: dict[str, dict[str, Any]] = {}
        self._entry: list[str] | None = None
        self._output: Any = None
        self._problems: list[str] = []

    def node(
        self,
        node_id: str,
        function: str,
        *,
        input: Any = None,
        next: NextSpec = None,
        on_error: str | Sequence[str] | None = None,
        retries: int | None = None,
        retry_delay: Duration | None = None,
        timeout: Duration | None = None,
        for_each: Mapping[str, Any] | None = None,
        mode: Literal["parallel", "sequential"] | None = None,
    ) -> GraphBuilder:
        if node_id in self._nodes:
            self._problems.append(f"node {node_id!r} is defined twice")
        data: dict[str, Any] = {"function": function}
        optional = {
            "input": input,
            "next": _ids(next) if isinstance(next, str | list | tuple) else next,
            "on_error": _ids(on_error) if on_error is not None else None,
            "retries": retries,
            "retry_delay": _seconds(retry_delay),
            "timeout": _seconds(timeout),
            "for_each": for_each,
            "mode": mode,
        }
        data.update({k: v for k, v in optional.items() if v is not None})
        self._nodes[node_id] = data
        return self

    def entry(self, *node_ids: str | Sequence[str]) -> GraphBuilder:
        """Declare entry nodes (instead of "the nodes that nothing points to")."""
        self._entry = self._entry or []
        for item in node_ids:
            self._entry.extend([item] if isinstance(item, str) else item)
        return self

    def output(self, value: Any) -> GraphBuilder:
        """The run's output: a value that may reference node outputs."""
        self._output = value
        return self

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"nodes": {nid: dict(n) for nid, n in self._nodes.items()}}
        if self._entry is not None:
            data["entry"] = list(self._entry)
        if self._output is not None:
            data["output"] = self._output
        return data

    def build(self) -> Graph:
        """The model; builder mistakes and structural problems raise together."""
        try:
            graph = graph_from_dict(self.name, self.to_dict())
        except GraphValidationError as exc:
            if not self._problems:
                raise
            raise GraphValidationError(self.name, self._problems + exc.problems) from None
        if self._problems:
            raise GraphValidationError(self.name, self._problems + validate(graph))
        return graph


def _ids(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _seconds(value: Duration | None) -> float | str | None:
    """A graph definition is JSON: a ``timedelta`` goes in as its seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else value
