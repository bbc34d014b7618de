"""The graph model: nodes, their edges, and the structure the planner reasons about.

Definitions arrive in several shapes (dict, JSON, YAML, builder); ``plait.graph.load``
turns all of them into these frozen objects, so everything downstream sees one normalised
form, and ``to_dict`` gives that form back as the canonical definition that is hashed.
This module knows nothing of those shapes or of validation: the loaders, the builder and
the checks all build on the model, never the other way round, so the model can be read
without pulling in YAML parsing or the checks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Literal

from plait.graph.values import get_path, to_json_text

MODES = ("parallel", "sequential")
DEFAULT_CASE = "default"
EdgeKind = Literal["next", "on_error"]


@dataclass(frozen=True)
class Branch:
    """A ``next`` that picks one case.

    With ``path`` None the node's function picks the case with ``ctx.branch(key)``;
    otherwise the case is the node's output value at ``path`` (strings as they are, other
    values as compact JSON, so ``true`` and ``3`` match cases ``"true"`` and ``"3"``).
    Either way a case named ``"default"`` is followed when no other case matches; without
    one, nothing follows.
    """

    cases: Mapping[str, tuple[str, ...]]
    path: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cases", MappingProxyType(dict(self.cases)))

    def __hash__(self) -> int:
        return hash((tuple(self.cases.items()), self.path))

    def __reduce__(self) -> tuple[type[Branch], tuple[dict[str, tuple[str, ...]], str | None]]:
        return (type(self), (dict(self.cases), self.path))  # mapping proxies do not pickle

    def case_for(self, branch: str | None, output: Any) -> str | None:
        """The case that a node with this branch choice and output follows, if any."""
        if self.path is None:
            key = branch
        else:
            value = get_path(output, self.path)
            key = value if isinstance(value, str) else to_json_text(value)
        if key is not None and key in self.cases:
            return key
        return DEFAULT_CASE if DEFAULT_CASE in self.cases else None

    def choose(self, branch: str | None, output: Any) -> tuple[str, ...]:
        case = self.case_for(branch, output)
        return () if case is None else self.cases[case]

    @property
    def targets(self) -> tuple[str, ...]:
        return _unique(t for ids in self.cases.values() for t in ids)

    def to_dict(self) -> dict[str, Any]:
        cases = {key: list(ids) for key, ids in self.cases.items()}
        if self.path is None:
            return cases
        return {"$branch": self.path, "cases": cases}


Next = tuple[str, ...] | Branch | None


@dataclass(frozen=True)
class Node:
    """One node: a function (or a workflow/graph name, for a child run) and its edges.

    ``input`` None means "not given": the node then receives the run's input (or, in a
    ``for_each`` node, the item). ``retries``, ``retry_delay`` and ``timeout`` None mean
    "the function's own setting". ``mode`` only matters with ``for_each``.
    """

    id: str
    function: str | None
    input: Any = None
    next: Next = None
    on_error: tuple[str, ...] = ()
    retries: int | None = None
    retry_delay: float | str | None = None
    timeout: float | str | None = None
    for_each: Any = None
    mode: str | None = None

    def __hash__(self) -> int:
        return hash((self.id, self.function))

    @property
    def targets(self) -> tuple[str, ...]:
        """Every node ``next`` may lead to, whatever branch is taken."""
        if self.next is None:
            return ()
        if isinstance(self.next, Branch):
            return self.next.targets
        return self.next

    def successors(self, branch: str | None = None, output: Any = None) -> tuple[str, ...]:
        """The nodes that follow a success with this branch choice and output."""
        if self.next is None:
            return ()
        if isinstance(self.next, Branch):
            return self.next.choose(branch, output)
        return self.next

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.function is not None:
            data["function"] = self.function
        if self.input is not None:
            data["input"] = self.input
        if self.next is not None:
            data["next"] = self.next.to_dict() if isinstance(self.next, Branch) else list(self.next)
        if self.on_error:
            data["on_error"] = list(self.on_error)
        for name in ("retries", "retry_delay", "timeout", "for_each", "mode"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data


@dataclass(frozen=True)
class Edge:
    """One possible transition; ``label`` is the branch case for ``next`` edges of a
    branch (several cases reaching one target give several edges)."""

    source: str
    target: str
    kind: EdgeKind
    label: str | None = None


@dataclass(frozen=True)
class Graph:
    """A validated-or-not graph definition; ``plait.graph.validate`` says which.

    ``entry`` is the explicit entry list (None when the definition let it be computed);
    ``entry_nodes`` is what runs start from either way. ``output`` None means "not given".
    """

    name: str
    nodes: Mapping[str, Node]
    entry: tuple[str, ...] | None = None
    output: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", MappingProxyType(dict(self.nodes)))

    def __hash__(self) -> int:
        return hash((self.name, self.content_hash()))

    def __reduce__(self) -> tuple[type[Graph], tuple[Any, ...]]:
        return (type(self), (self.name, dict(self.nodes), self.entry, self.output))

    # -- canonical form ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The canonical definition: what ``graph_from_dict`` accepts, with every shorthand
        expanded and every unset field left out."""
        data: dict[str, Any] = {"nodes": {nid: node.to_dict() for nid, node in self.nodes.items()}}
        if self.entry is not None:
            data["entry"] = list(self.entry)
        if self.output is not None:
            data["output"] = self.output
        return data

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def content_hash(self) -> str:
        """Identifies the definition (not the name): equal definitions written in any
        supported shape hash alike, so a stored run can be pinned to what it started with."""
        return self._content_hash

    @cached_property
    def _content_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()[:16]

    # -- structure --------------------------------------------------------------------

    @cached_property
    def order(self) -> Mapping[str, int]:
        """Definition order; every list the graph package returns is sorted by it."""
        return MappingProxyType({nid: i for i, nid in enumerate(self.nodes)})

    @cached_property
    def edges(self) -> tuple[Edge, ...]:
        """Every edge to a known node, in definition order."""
        out: list[Edge] = []
        for nid, node in self.nodes.items():
            if isinstance(node.next, Branch):
                for case, ids in node.next.cases.items():
                    out.extend(Edge(nid, t, "next", case) for t in ids if t in self.nodes)
            elif node.next is not None:
                out.extend(Edge(nid, t, "next") for t in node.next if t in self.nodes)
            out.extend(Edge(nid, t, "on_error") for t in node.on_error if t in self.nodes)
        return tuple(out)

    @cached_property
    def entry_nodes(self) -> tuple[str, ...]:
        """The explicit entry list, or the nodes that no ``next`` or ``on_error`` points to
        (so error handlers never run at start)."""
        if self.entry is not None:
            return self.entry
        targeted = {e.target for e in self.edges}
        return tuple(nid for nid in self.nodes if nid not in targeted)

    @cached_property
    def _successor_sets(self) -> Mapping[str, tuple[str, ...]]:
        succ: dict[str, list[str]] = {nid: [] for nid in self.nodes}
        for e in self.edges:
            if e.target not in succ[e.source]:
                succ[e.source].append(e.target)
        return {nid: tuple(ts) for nid, ts in succ.items()}

    @cached_property
    def _reach(self) -> Mapping[str, frozenset[str]]:
        reach: dict[str, frozenset[str]] = {}
        for start in self.nodes:
            seen: set[str] = set()
            stack = list(self._successor_sets[start])
            while stack:
                nid = stack.pop()
                if nid not in seen:
                    seen.add(nid)
                    stack.extend(self._successor_sets[nid])
            reach[start] = frozenset(seen)
        return reach

    def reachable_from(self, node_id: str) -> frozenset[str]:
        """Nodes some path of one or more edges leads to (itself only through a cycle)."""
        return self._reach[node_id]

    def ancestors(self, node_id: str) -> frozenset[str]:
        """Nodes from which some path leads to ``node_id``: the only ones whose output can
        exist when it runs."""
        return frozenset(nid for nid, r in self._reach.items() if node_id in r)

    def is_back_edge(self, source: str, target: str) -> bool:
        """Whether the edge closes a cycle (its target can reach its source). Such an edge
        starts a fresh instance of its target each time it fires."""
        return source == target or source in self._reach.get(target, frozenset())

    @cached_property
    def _forward_predecessors(self) -> Mapping[str, tuple[str, ...]]:
        preds: dict[str, list[str]] = {nid: [] for nid in self.nodes}
        for e in self.edges:
            if (
                e.kind == "next"
                and not self.is_back_edge(e.source, e.target)
                and e.source not in preds[e.target]
            ):
                preds[e.target].append(e.source)
        return {nid: tuple(ps) for nid, ps in preds.items()}

    @cached_property
    def _transitions(self) -> Mapping[str, tuple[tuple[str, bool], ...]]:
        out: dict[str, list[tuple[str, bool]]] = {nid: [] for nid in self.nodes}
        for e in self.edges:
            item = (e.target, e.kind == "on_error" or self.is_back_edge(e.source, e.target))
            if item not in out[e.source]:
                out[e.source].append(item)
        return {nid: tuple(items) for nid, items in out.items()}

    def transitions(self, node_id: str) -> tuple[tuple[str, bool], ...]:
        """``(target, fresh)`` for every edge out of ``node_id``; ``fresh`` edges (loops
        and error handlers) start a new instance each time they fire, the others start
        their target once per run."""
        return self._transitions[node_id]

    def forward_predecessors(self, node_id: str) -> tuple[str, ...]:
        """Nodes with a forward ``next`` edge into ``node_id``: what a join waits for."""
        return self._forward_predecessors[node_id]


def _unique(items: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))
