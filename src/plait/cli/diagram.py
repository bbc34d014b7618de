"""Mermaid diagrams: a graph's definition, or what a code workflow run actually did."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from plait.errors import PlaitError, WorkflowNotFoundError
from plait.graph import node_states, to_mermaid
from plait.graph.mermaid import status_class_defs

if TYPE_CHECKING:
    from plait.engine import Engine
    from plait.records import Run, Step

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


#: steps that are no work of their own: recorded values and patch markers
_UNDRAWN = ("value", "patch")


def steps_mermaid(steps: list[Step]) -> str:
    """The steps a run reached, each after the steps it was reached after: sequential
    code one after another, steps started together (a ``gather``) side by side; error
    handlers hang off their step with a dashed edge."""
    lines = ["graph TD"]
    ids: dict[str, str] = {}
    main = [s for s in steps if s.kind not in (*_UNDRAWN, "on_error")]
    layers: list[list[Step]] = []
    for step in main:
        if layers and _together(layers[-1][0], step):
            layers[-1].append(step)
        else:
            layers.append([step])
    for n, step in enumerate(steps):
        ids[step.key] = f"s{n}_{_UNSAFE.sub('_', step.key)[:30]}"
    for step in steps:
        if step.kind in _UNDRAWN:
            continue
        label = step.key.replace('"', "'")
        if step.function and step.kind != "child":
            label += f"<br/>{step.function}"
        if step.kind == "child":
            lines.append(f'    {ids[step.key]}[["{label}<br/>child run"]]')
        elif step.kind in ("sleep", "suspend", "event"):
            lines.append(f'    {ids[step.key]}(["{label}"])')
        else:
            lines.append(f'    {ids[step.key]}["{label}"]')
    if all(s.reached_after is not None for s in main):
        lines += _reached_edges(steps, ids)
    else:  # recorded before steps kept what they came after: rows from their times
        for before, after in itertools.pairwise(layers):
            for a in before:
                for b in after:
                    lines.append(f"    {ids[a.key]} --> {ids[b.key]}")
    for step in steps:
        if step.kind == "on_error":
            origin = step.key.removesuffix(":on_error")
            if origin in ids:
                lines.append(f"    {ids[origin]} -.->|error| {ids[step.key]}")
    lines.extend(status_class_defs())
    for step in steps:
        if step.kind not in _UNDRAWN:
            lines.append(f"    class {ids[step.key]} {step.status}")
    return "\n".join(lines)


def _reached_edges(steps: list[Step], ids: dict[str, str]) -> list[str]:
    """An edge from each step a step was reached after (through recorded values, which
    are not drawn)."""
    by_key = {s.key: s for s in steps}

    def drawn(key: str, seen: frozenset[str] = frozenset()) -> list[str]:
        found = by_key.get(key)
        if found is None or key in seen:
            return []
        if found.kind not in _UNDRAWN:
            return [key]
        return [k for p in found.reached_after or () for k in drawn(p, seen | {key})]

    lines: list[str] = []
    for step in steps:
        if step.kind in (*_UNDRAWN, "on_error"):
            continue
        before = dict.fromkeys(k for p in step.reached_after or () for k in drawn(p))
        lines += [f"    {ids[k]} --> {ids[step.key]}" for k in before]
    return lines


def _together(first: Step, step: Step) -> bool:
    return abs((step.created_at - first.created_at).total_seconds()) < 0.002


class NothingToDrawError(PlaitError, LookupError):
    """A code workflow is drawn from what one of its runs did, and it has none yet: a
    known name, so not an unknown workflow, and the fix is to start a run."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"workflow {name!r} has no run yet to draw it from: a code workflow is drawn "
            f"from what a run did (start one with plait start APP {name}, or check --database)"
        )
        self.name = name


@dataclass(frozen=True)
class Drawing:
    """A diagram with the run it shows: without ``run_id`` a code workflow is drawn from
    its latest run, and a script needs to know which one that was."""

    name: str
    kind: Literal["graph", "workflow"]
    #: the run drawn (a code workflow) or that coloured the nodes (a graph), else None
    run: Run | None
    mermaid: str


async def draw(engine: Engine, name: str, run_id: str | None = None) -> Drawing:
    """Graph ``name`` (coloured by ``run_id`` if given) or, for a code workflow, the
    steps of ``run_id`` (default: its latest run)."""
    graph = engine.app.graphs.get(name)
    if graph is not None:
        run = None if run_id is None else _of(name, await engine.get_run(run_id))
        states = None if run is None else node_states(await engine.get_steps(run.id))
        return Drawing(name, "graph", run, to_mermaid(graph, states))
    if name not in engine.app.workflows:
        raise WorkflowNotFoundError(name, [*engine.app.workflows, *engine.app.graphs])
    if run_id is None:
        runs = await engine.list_runs(workflow=name, limit=1)
        if not runs:
            raise NothingToDrawError(name)
        run = runs[0]
    else:
        run = _of(name, await engine.get_run(run_id))
    return Drawing(name, "workflow", run, steps_mermaid(await engine.get_steps(run.id)))


def _of(name: str, run: Run) -> Run:
    """The run, if it is one of ``name``: another workflow's steps on this one's diagram
    (or its step states on this graph's nodes) would be a picture of nothing."""
    if run.workflow != name:
        raise ValueError(f"run {run.id!r} is a run of {run.workflow!r}, not of {name!r}")
    return run
