"""Static checks of a graph, run when it is registered and before a run is created.

Every check runs and every problem is reported, because a definition that fails one
problem at a time costs one deploy per typo. A function missing from this deployment is not
a problem by default (it may be deployed later, and a run that needs it suspends with
FUNCTION_NOT_FOUND); ``unknown_functions`` lists those separately for a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from difflib import get_close_matches
from typing import Any

from plait.durations import parse_duration
from plait.graph.errors import GraphValidationError
from plait.graph.model import MODES, Branch, Graph
from plait.graph.values import (
    ITEM,
    REF,
    SPECIAL_ROOTS,
    check_syntax,
    is_ref,
    parse_path,
    references,
)


def validate(
    graph: Graph,
    *,
    known_functions: Callable[[str], bool] | None = None,
    start_node: str | None = None,
) -> list[str]:
    """Every problem in ``graph``, in definition order. With ``known_functions``, functions
    it does not know are problems too; with ``start_node``, so is a start node that is
    not an entry node."""
    problems: list[str] = []
    if not graph.nodes:
        problems.append("the graph has no nodes")
    for node_id in graph.nodes:
        problems.extend(_check_node(graph, node_id, known_functions))
    problems.extend(_check_entry(graph))
    problems.extend(_check_reachable(graph))
    if start_node is not None:
        problems.extend(_check_start_node(graph, start_node))
    if graph.output is not None:
        problems.extend(_check_value(graph, None, graph.output, "output", "the output"))
    return list(dict.fromkeys(problems))


def validate_or_raise(
    graph: Graph,
    *,
    known_functions: Callable[[str], bool] | None = None,
    start_node: str | None = None,
) -> None:
    """``validate``, raising ``GraphValidationError`` with every problem if there is any."""
    problems = validate(graph, known_functions=known_functions, start_node=start_node)
    if problems:
        raise GraphValidationError(graph.name, problems)


def unknown_functions(graph: Graph, known: Callable[[str], bool]) -> list[str]:
    """The function names the graph uses that ``known`` does not know, each once, in
    definition order."""
    names = (node.function for node in graph.nodes.values() if node.function)
    return [name for name in dict.fromkeys(names) if not known(name)]


def validate_function(node_id: str, function: Any) -> str | None:
    """The problem with a node's ``function``, if any."""
    if function is None or function == "":
        return (
            f"node {node_id!r} has no function (every node needs a function name, or a "
            "workflow or graph name for a child run)"
        )
    if not isinstance(function, str):
        return f"node {node_id!r}: function must be a string, got {type(function).__name__}"
    return None


# -- per node ---------------------------------------------------------------------------


def _check_node(
    graph: Graph, node_id: str, known_functions: Callable[[str], bool] | None
) -> Iterable[str]:
    node = graph.nodes[node_id]
    where = f"node {node_id!r}"
    if not node_id or not node_id.strip():
        yield "a node id must not be empty"
    elif node_id in SPECIAL_ROOTS or node_id.startswith("$"):
        yield f"{where}: the id is reserved (trigger, $item, $state and ids starting with $)"
    if "#" in node_id:
        yield f"{where}: a node id must not contain '#' (it marks revisits: node#1)"
    if "[" in node_id or "]" in node_id:
        # ``b[0]`` is the key of item 0 of a for_each node ``b``: a node of that id
        # would stand in for the item (its result taken for the item's)
        yield f"{where}: a node id must not contain '[' or ']' (they mark for_each items: node[0])"

    problem = validate_function(node_id, node.function)
    if problem:
        yield problem
    elif known_functions is not None and not known_functions(node.function or ""):
        yield f"{where}: unknown function {node.function!r}"

    yield from _check_next(graph, node_id)
    for target in node.on_error:
        if target == node_id:
            yield f"{where}: on_error names the node itself (a failure would loop forever)"
        elif target not in graph.nodes:
            yield f"{where}: on_error points to unknown node {target!r}{_suggest(graph, target)}"

    if node.retries is not None and node.retries < 0:
        yield f"{where}: retries must be 0 or more, got {node.retries}"
    if node.retry_delay is not None and node.retry_delay != "exponential":
        yield from _check_duration(where, "retry_delay", node.retry_delay, allow_zero=True)
    if node.timeout is not None:
        yield from _check_duration(where, "timeout", node.timeout, allow_zero=False)

    if node.for_each is not None:
        yield from _check_for_each(graph, node_id)
    if node.mode is not None:
        if node.for_each is None:
            yield f"{where}: mode is only meaningful with for_each"
        elif node.mode not in MODES:
            yield f"{where}: mode must be 'parallel' or 'sequential', got {node.mode!r}"
    if node.input is not None:
        yield from _check_value(graph, node_id, node.input, "input", f"{where} input")


def _check_next(graph: Graph, node_id: str) -> Iterable[str]:
    node = graph.nodes[node_id]
    where = f"node {node_id!r}"
    if node.next is None:
        return
    if isinstance(node.next, Branch):
        if node.next.path is not None:
            try:
                parse_path(node.next.path)
            except ValueError as exc:
                yield f"{where}: $branch {exc}"
            if not node.next.cases:
                yield f"{where}: $branch has no cases"
        label = "case" if node.next.path is not None else "branch"
        pairs = [(k, t) for k, ids in node.next.cases.items() for t in ids]
    else:
        label = ""
        pairs = [("", t) for t in node.next]
    for key, target in pairs:
        if target not in graph.nodes:
            edge = f"next ({label} {key!r})" if label else "next"
            yield f"{where}: {edge} points to unknown node {target!r}{_suggest(graph, target)}"


def _check_for_each(graph: Graph, node_id: str) -> Iterable[str]:
    node = graph.nodes[node_id]
    where = f"node {node_id!r}"
    source = node.for_each
    if not is_ref(source):
        yield (
            f"{where}: for_each must be a reference to a list, like "
            f'{{"$ref": "node_id", "path": "items"}}, got {source!r}'
        )
        return
    if source.get(REF) == ITEM:
        yield f"{where}: for_each cannot iterate over $item"
        return
    yield from _check_value(graph, node_id, source, "for_each", f"{where} for_each")


def _check_value(
    graph: Graph, node_id: str | None, value: Any, kind: str, where: str
) -> Iterable[str]:
    yield from check_syntax(value, where)
    uses_item = ITEM in references(value, include_special=True)
    if uses_item and (node_id is None or graph.nodes[node_id].for_each is None or kind != "input"):
        owner = "the output" if node_id is None else f"node {node_id!r} {kind}"
        yield f"{owner} uses $item, which only exists in a for_each node's input"
    ancestors = graph.ancestors(node_id) if node_id is not None else frozenset(graph.nodes)
    required = references(value, required_only=True)
    for ref in sorted(references(value), key=lambda r: graph.order.get(r, len(graph.order))):
        if ref not in graph.nodes:
            yield f"{where} references unknown node {ref!r}{_suggest(graph, ref)}"
        elif ref in required and ref not in ancestors:
            yield (
                f"{where} references node {ref!r}, which can never have run before "
                f"{node_id!r} (no path leads from it; add a 'default' to the $ref if it is "
                "optional)"
            )


def _check_duration(where: str, name: str, value: Any, *, allow_zero: bool) -> Iterable[str]:
    try:
        seconds = parse_duration(value, what=f"{name}")
    except ValueError as exc:
        yield f"{where}: {exc}"
        return
    if not allow_zero and seconds == 0:
        yield f"{where}: {name} must be longer than 0"


# -- whole graph ------------------------------------------------------------------------


def _check_entry(graph: Graph) -> Iterable[str]:
    if graph.entry is not None:
        if not graph.entry:
            yield "entry is empty (leave it out to use the nodes that nothing points to)"
        for node_id in graph.entry:
            if node_id not in graph.nodes:
                yield f"entry names unknown node {node_id!r}{_suggest(graph, node_id)}"
    elif graph.nodes and not graph.entry_nodes:
        yield (
            "the graph has no entry node: every node is the target of a next or on_error "
            "edge (list the entry nodes under 'entry')"
        )


def _check_reachable(graph: Graph) -> Iterable[str]:
    entries = [e for e in graph.entry_nodes if e in graph.nodes]
    if not entries:
        return
    reached = set(entries)
    for entry in entries:
        reached |= graph.reachable_from(entry)
    for node_id in graph.nodes:
        if node_id not in reached:
            yield f"node {node_id!r} can never run: no entry node leads to it"


def _check_start_node(graph: Graph, start_node: str) -> Iterable[str]:
    if start_node not in graph.nodes:
        yield f"start_node {start_node!r} is not a node of the graph{_suggest(graph, start_node)}"
    elif start_node not in graph.entry_nodes:
        entries = ", ".join(repr(e) for e in graph.entry_nodes) or "none"
        yield f"start_node {start_node!r} is not an entry node (entry nodes: {entries})"


def _suggest(graph: Graph, name: str) -> str:
    close = get_close_matches(name, list(graph.nodes), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
