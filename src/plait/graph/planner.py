"""The graph planner: from what a run has recorded, what to start next and whether it ended.

It is a pure function of (graph, step states, entry nodes), used by inline and queued runs
alike, so both record the same steps. It never runs anything, never waits, and returns
the same plan for the same states in any order, so two orchestrator passes that race
compute the same step keys (the engine inserts them with insert-if-absent).

Rules:

* An entry node starts when it has no state yet.
* A node that succeeded fires its ``next`` (for a branch only the chosen case); a node that
  failed (retries exhausted) fires its ``on_error`` handlers, or fails the plan if it has
  none. The engine hands a handler ``{"error": ..., "input": <failed node input>}``.
* A *forward* ``next`` edge starts its target at most once per run: a target that already
  has a state is not started again.
* A *back-edge* (an edge whose target can reach its source: a loop) and every ``on_error``
  edge start a fresh instance of the target each time they fire, once per firing: the
  first instance of a node is keyed ``node``, later ones ``node#1``, ``node#2``... A firing
  is recognised by the new instance's ``from_key``. Loops end when the graph says so;
  there is no visit cap.
* A join (a node with forward ``next`` edges from several nodes) starts once every one of
  those predecessors that can still run has finished. "Can still run" is reachability
  from what is alive now (nodes in flight, nodes about to start, activated joins): a
  predecessor on an untaken branch, behind a handled failure or before the start node is
  not waited for.
* Nodes start as soon as they are ready; there are no waves.
* A ``for_each`` node is one node here: the engine runs its items and records one state for
  the node, whose output is the list of item outputs.
* The run is complete when nothing is in flight, nothing can start and no failure is
  unhandled. Its output is the graph's resolved ``output``, or else the outputs of the
  nodes that ended it (succeeded with nothing to follow): ``{node_id: output}``, or the
  output itself when only one node ended it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from plait.graph.errors import GraphValueError
from plait.graph.model import Graph
from plait.graph.values import Scope, resolve
from plait.statuses import STEP_IN_FLIGHT, StepStatusName

# the step statuses the planner reads (``plait.statuses``); it never chooses one
PENDING: StepStatusName = "pending"
SCHEDULED: StepStatusName = "scheduled"
RUNNING: StepStatusName = "running"
SUCCEEDED: StepStatusName = "succeeded"
FAILED: StepStatusName = "failed"
IN_FLIGHT = STEP_IN_FLIGHT
STATUSES: tuple[StepStatusName, ...] = (PENDING, SCHEDULED, RUNNING, SUCCEEDED, FAILED)


@dataclass(frozen=True)
class NodeState:
    """One step key the engine recorded for this graph run.

    ``status`` is ``failed`` only once the step's retries are exhausted; a step that will
    be retried is still in flight. ``branch`` is what the node chose with ``ctx.branch``;
    ``from_key`` the step key whose completion started this one.
    """

    key: str
    node_id: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None
    branch: str | None = None
    from_key: str | None = None


@dataclass(frozen=True)
class Start:
    """A node instance the engine must start now. ``kind`` ``"on_error"`` means the node
    runs as an error handler of ``from_key`` and gets ``{"error", "input"}`` as input."""

    node_id: str
    key: str
    from_key: str | None
    kind: Literal["node", "on_error"]


@dataclass(frozen=True)
class Plan:
    """What to do now. ``complete`` and ``failed`` are never both set; ``output`` is only
    meaningful when ``complete``."""

    start: list[Start]
    complete: bool
    failed: NodeState | None
    output: Any


def step_key(node_id: str, ordinal: int) -> str:
    """The step key of the ``ordinal``-th instance of a node (the first one is bare)."""
    return node_id if ordinal == 0 else f"{node_id}#{ordinal}"


def key_ordinal(key: str) -> int:
    """The instance number in a step key: 0 for ``node``, 2 for ``node#2``."""
    _, sep, suffix = key.rpartition("#")
    return int(suffix) if sep and suffix.isdigit() else 0


def node_states(steps: Iterable[Any], graph: Graph | None = None) -> list[NodeState]:
    """``NodeState``s from the engine's step records (``plait.Step`` or anything with
    ``key``, ``status``, ``output``, ``error`` and optionally ``node_id``, ``branch``,
    ``from_key``). The node id is the key without its ``#N`` ordinal (node ids cannot
    contain ``#``). With ``graph``, steps that are not node instances of it (for_each items,
    for instance) are left out, since the planner refuses unknown nodes."""
    states: list[NodeState] = []
    for step in steps:
        key = step.key
        node_id = getattr(step, "node_id", None) or _strip_ordinal(key)
        if graph is not None and node_id not in graph.nodes:
            continue
        states.append(
            NodeState(
                key=key,
                node_id=node_id,
                status=str(getattr(step.status, "value", step.status)),
                output=getattr(step, "output", None),
                error=getattr(step, "error", None),
                branch=getattr(step, "branch", None),
                from_key=getattr(step, "from_key", None),
            )
        )
    return states


def _strip_ordinal(key: str) -> str:
    base, sep, suffix = key.rpartition("#")
    return base if sep and suffix.isdigit() else key


def plan(
    graph: Graph,
    states: Sequence[NodeState],
    entry: Sequence[str],
    *,
    trigger: Any = None,
    state_vars: Mapping[str, Any] | None = None,
) -> Plan:
    """The next plan for a run of ``graph`` started at ``entry`` (its entry nodes, or
    ``[start_node]``). ``trigger`` and ``state_vars`` are only read to resolve the graph's
    ``output`` when the run completes; a reference there to a node that did not run
    raises ``GraphValueError``."""
    for node_id in entry:
        if node_id not in graph.nodes:
            raise ValueError(f"graph {graph.name!r}: entry node {node_id!r} is not a node")
    for s in states:
        if s.node_id not in graph.nodes:
            raise ValueError(
                f"graph {graph.name!r}: a state ({s.key!r}) names unknown node {s.node_id!r}"
            )
    ordered = _canonical(graph, states)
    by_node: dict[str, list[NodeState]] = {}
    for s in ordered:
        by_node.setdefault(s.node_id, []).append(s)

    for s in ordered:
        handlers = [h for h in graph.nodes[s.node_id].on_error if h in graph.nodes]
        if s.status == FAILED and not handlers:
            return Plan(start=[], complete=False, failed=s, output=None)

    fired = {(s.node_id, s.from_key) for s in ordered if s.from_key is not None}
    starting: dict[str, Start] = {}  # first instances (entry or forward edge), by node
    for node_id in sorted(set(entry), key=graph.order.__getitem__):
        if node_id not in by_node:
            starting[node_id] = Start(node_id, node_id, None, "node")

    fresh: list[tuple[str, NodeState, Literal["node", "on_error"]]] = []
    activated: dict[str, list[NodeState]] = {}
    for s in ordered:
        node = graph.nodes[s.node_id]
        kind: Literal["node", "on_error"]
        if s.status == SUCCEEDED:
            targets, kind = node.successors(s.branch, s.output), "node"
        elif s.status == FAILED:
            targets, kind = node.on_error, "on_error"
        else:
            continue
        for target in targets:
            if target not in graph.nodes:
                continue
            if kind == "on_error" or graph.is_back_edge(s.node_id, target):
                if (target, s.key) not in fired:
                    fresh.append((target, s, kind))
            elif target not in by_node:
                activated.setdefault(target, []).append(s)

    alive = _alive(graph, by_node, [*starting, *activated, *(t for t, _, _ in fresh)])
    waiting: list[str] = []
    for target in sorted(activated, key=graph.order.__getitem__):
        if target in starting:
            continue
        preds = graph.forward_predecessors(target)
        if len(preds) > 1 and any(p in alive for p in preds):
            waiting.append(target)
            continue
        starting[target] = Start(target, target, activated[target][0].key, "node")

    in_flight = any(s.status in IN_FLIGHT for s in ordered)
    if waiting and not starting and not fresh and not in_flight:
        # Unreachable by construction (forward edges form a DAG, so the earliest waiting
        # join has no live predecessor); kept so that a flaw can never leave a run hanging.
        for target in waiting:
            starting[target] = Start(target, target, activated[target][0].key, "node")
        waiting = []

    starts = list(starting.values())
    next_ordinal = {
        nid: max(key_ordinal(s.key) for s in instances) + 1 for nid, instances in by_node.items()
    }
    for nid in starting:
        next_ordinal[nid] = max(next_ordinal.get(nid, 0), 1)
    fresh.sort(key=lambda f: (graph.order[f[0]], graph.order[f[1].node_id], _rank(f[1])))
    for target, source, kind in fresh:
        ordinal = next_ordinal.get(target, 0)
        next_ordinal[target] = ordinal + 1
        starts.append(Start(target, step_key(target, ordinal), source.key, kind))
    starts.sort(key=lambda st: (graph.order[st.node_id], key_ordinal(st.key)))

    complete = not starts and not waiting and not in_flight
    output = _run_output(graph, ordered, trigger, state_vars) if complete else None
    return Plan(start=starts, complete=complete, failed=None, output=output)


def _rank(s: NodeState) -> tuple[int, str]:
    return (key_ordinal(s.key), s.key)


def _canonical(graph: Graph, states: Sequence[NodeState]) -> list[NodeState]:
    """States in definition order, then instance order: the plan never depends on the
    order the store returned them in."""
    return sorted(states, key=lambda s: (graph.order[s.node_id], *_rank(s)))


def _alive(graph: Graph, by_node: Mapping[str, list[NodeState]], roots: list[str]) -> set[str]:
    """The nodes that are running or may still run: the roots, nodes in flight, and what
    they can lead to. Past a forward edge into a node that already has a state nothing
    more runs (forward edges start a node once); back-edges and error edges always can."""
    alive: set[str] = set(roots)
    alive.update(nid for nid, inst in by_node.items() if any(s.status in IN_FLIGHT for s in inst))
    stack = list(alive)
    while stack:
        source = stack.pop()
        for target, fresh in graph.transitions(source):
            if target in alive:
                continue
            if fresh or target not in by_node:
                alive.add(target)
                stack.append(target)
    return alive


# -- values for the engine --------------------------------------------------------------


def latest_outputs(graph: Graph, states: Sequence[NodeState]) -> dict[str, Any]:
    """The output of the latest succeeded instance of every node that succeeded."""
    outputs: dict[str, Any] = {}
    for s in _canonical(graph, states):
        if s.status == SUCCEEDED:
            outputs[s.node_id] = s.output  # later instances come later
    return outputs


def node_input(
    graph: Graph,
    node_id: str,
    states: Sequence[NodeState],
    trigger: Any,
    state_vars: Mapping[str, Any] | None,
    item: Any = None,
) -> Any:
    """The input of one node instance (one item of a ``for_each`` node): its ``input``
    resolved against the latest succeeded instance of each node it references. A node
    without ``input`` gets the item in a ``for_each`` node and the run's input otherwise.
    A reference to a node that has not succeeded raises ``GraphValueError``."""
    node = graph.nodes[node_id]
    has_item = node.for_each is not None
    if node.input is None:
        return item if has_item else trigger
    scope = Scope(
        trigger=trigger,
        nodes=latest_outputs(graph, states),
        state=state_vars or {},
        item=item,
        has_item=has_item,
        node=node_id,
    )
    return resolve(node.input, scope)


def for_each_items(
    graph: Graph,
    node_id: str,
    states: Sequence[NodeState],
    trigger: Any,
    state_vars: Mapping[str, Any] | None,
) -> list[Any]:
    """The items a ``for_each`` node runs over; anything but a list is an error, because
    iterating a string or a dict's keys is never what was meant."""
    node = graph.nodes[node_id]
    if node.for_each is None:
        raise ValueError(f"node {node_id!r} has no for_each")
    scope = Scope(
        trigger=trigger,
        nodes=latest_outputs(graph, states),
        state=state_vars or {},
        node=node_id,
    )
    resolved = resolve(node.for_each, scope)
    if not isinstance(resolved, list):
        raise GraphValueError(
            f"node {node_id!r}: for_each must give a list, got {type(resolved).__name__}",
            node=node_id,
        )
    return resolved  # pyright: ignore[reportUnknownVariableType]  # JSON: any list


def _run_output(
    graph: Graph,
    ordered: Sequence[NodeState],
    trigger: Any,
    state_vars: Mapping[str, Any] | None,
) -> Any:
    if graph.output is not None:
        scope = Scope(
            trigger=trigger,
            nodes=latest_outputs(graph, ordered),
            state=state_vars or {},
            where="the graph output",
        )
        return resolve(graph.output, scope)
    ended: dict[str, Any] = {}
    for s in ordered:
        if s.status == SUCCEEDED:
            node = graph.nodes[s.node_id]
            if not [t for t in node.successors(s.branch, s.output) if t in graph.nodes]:
                ended[s.node_id] = s.output
            else:
                ended.pop(s.node_id, None)  # a later instance that went on supersedes
    if not ended:
        return None
    if len(ended) == 1:
        return next(iter(ended.values()))
    return ended
