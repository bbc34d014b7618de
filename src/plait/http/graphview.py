"""Every run drawn as a graph, as inline SVG with a small layered layout.

A graph workflow is drawn from its definition, each node coloured by its state in the run.
A code workflow has no definition to draw, so its steps are drawn from what each was
reached after (``Step.reached_after``): sequential steps one below the other, steps
started together (``asyncio.gather``) side by side below the step they followed. Steps
that came after the same several steps are joined to them through one junction point
rather than every step to every step, so a drawing grows linearly with the steps (two
gathers of 300 would otherwise draw 90,000 edges). Runs recorded before steps kept that
are drawn as before, from when each step ran.

The layout is computed here in Python rather than in the browser so it is tested like the
rest of the server, and the page stays free of JavaScript libraries.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote

from plait.durations import format_duration
from plait.records import Run, Step, StepAttempt

log = logging.getLogger("plait.http")

NODE_W = 176
NODE_H = 48
GAP_X = 28
GAP_Y = 44
PAD = 12
#: room on the right for edges that go back up (loops) or along a row
LOOP_PAD = 48
LABEL_CHARS = 22
DETAIL_CHARS = 27

STATE_OF_STEP = {
    "succeeded": "succeeded",
    "failed": "failed",
    "running": "running",
    "pending": "waiting",
    "scheduled": "waiting",
}
STATE_TEXT = {
    "succeeded": "succeeded",
    "failed": "failed",
    "running": "running",
    "waiting": "waiting",
    "not_reached": "not reached",
}


@dataclasses.dataclass
class ViewNode:
    id: str
    label: str
    detail: str
    state: str
    href: str | None = None
    title: str = ""
    layer: int = 0
    x: float = 0.0
    y: float = 0.0


@dataclasses.dataclass
class ViewEdge:
    source: str
    target: str
    kind: str = "next"
    label: str | None = None
    taken: bool = True


# -- public entry point -----------------------------------------------------------------------
def draw_run(
    run: Run, steps: Sequence[Step], history: Sequence[StepAttempt], definition: Any = None
) -> dict[str, Any]:
    """The drawing of one run: ``svg`` markup plus the laid-out ``nodes`` and ``edges``."""
    kind = "steps"
    nodes: list[ViewNode] = []
    edges: list[ViewEdge] = []
    if definition is not None:
        try:
            nodes, edges = graph_view(definition, steps, history)
            kind = "graph"
        except Exception:  # a graph object of another shape must not break the run page
            log.exception("cannot draw graph %r; drawing its steps instead", run.workflow)
            nodes, edges = [], []
    if kind == "steps":
        nodes, edges = steps_view(steps, history)
    width, height = layout(nodes, edges)
    return {
        "kind": kind,
        "width": width,
        "height": height,
        "svg": render_svg(nodes, edges, width, height, f"{run.workflow} run {run.id}"),
        "nodes": [
            {
                "id": n.id,
                "label": n.label,
                "state": n.state,
                "layer": n.layer,
                "x": n.x,
                "y": n.y,
            }
            for n in nodes
        ],
        "edges": [dataclasses.asdict(e) for e in edges],
    }


# -- code workflows: the recorded steps ----------------------------------------------------
def step_times(step: Step, attempts: Sequence[StepAttempt]) -> tuple[datetime, datetime | None]:
    """(start, end) of a step; end None while it is still going."""
    if attempts:
        start = min(a.started_at for a in attempts)
        finished = [a.finished_at for a in attempts]
        if step.status in ("succeeded", "failed") and all(f is not None for f in finished):
            return start, max(f for f in finished if f is not None)
        return start, None
    if step.status in ("succeeded", "failed"):
        return step.created_at, step.updated_at
    return step.created_at, None


def step_label(step: Step) -> str:
    """``__suspend:review`` reads better as ``suspend: review``."""
    name = step.name
    if name.startswith("__") and ":" in name:
        prefix, _, rest = name[2:].partition(":")
        return f"{prefix}: {rest}"
    return name


def steps_view(
    steps: Sequence[Step], history: Sequence[StepAttempt]
) -> tuple[list[ViewNode], list[ViewEdge]]:
    by_key: dict[str, list[StepAttempt]] = {}
    for attempt in history:
        by_key.setdefault(attempt.key, []).append(attempt)
    if steps and all(s.reached_after is not None for s in steps):
        return _reached_view(steps, by_key)
    return _timed_view(steps, by_key)


def _reached_view(
    steps: Sequence[Step], by_key: dict[str, list[StepAttempt]]
) -> tuple[list[ViewNode], list[ViewEdge]]:
    """Each step below the steps it was reached after (as the run recorded them): a
    chain for sequential code, one row for a gather. Steps that came after the same
    several steps are joined to them through one junction point (``a + b`` edges)."""
    keys = {s.key for s in steps}
    nodes: list[ViewNode] = []
    edges: list[ViewEdge] = []
    groups: dict[tuple[str, ...], list[str]] = {}
    for step in steps:
        start, end = step_times(step, by_key.get(step.key, []))
        nodes.append(_step_node(step, start, end, 0))
        before = tuple(k for k in step.reached_after or () if k in keys and k != step.key)
        if step.kind == "on_error":
            edges += [ViewEdge(k, step.key, "on_error") for k in before]
        elif len(before) > 1:
            groups.setdefault(before, []).append(step.key)
        else:
            edges += [ViewEdge(k, step.key, "next") for k in before]
    for n, (before, after) in enumerate(groups.items()):
        if len(after) == 1:
            edges += [ViewEdge(k, after[0], "next") for k in before]
            continue
        hub = ViewNode(id=f"~join-{n}", label="", detail="", state=JUNCTION)
        nodes.append(hub)
        edges += [ViewEdge(k, hub.id, "next") for k in before]
        edges += [ViewEdge(hub.id, k, "next") for k in after]
    layers = longest_path_layers([n.id for n in nodes], [(e.source, e.target) for e in edges])
    for node in nodes:
        node.layer = layers[node.id]
    return nodes, edges


def _timed_view(
    steps: Sequence[Step], by_key: dict[str, list[StepAttempt]]
) -> tuple[list[ViewNode], list[ViewEdge]]:
    """Runs recorded before steps kept what they were reached after: rows guessed from
    when each step ran."""
    nodes: list[ViewNode] = []
    layer = -1
    row_end: datetime | None = None  # earliest end in the current row; None = still going
    for step in steps:
        start, end = step_times(step, by_key.get(step.key, []))
        # A step that started before some step of the row had ended cannot have depended
        # on all of them: it goes beside them.
        if layer >= 0 and (row_end is None or start < row_end):
            if row_end is None or (end is not None and end < row_end):
                row_end = end
        else:
            layer += 1
            row_end = end
        nodes.append(_step_node(step, start, end, layer))
    return _join_rows(nodes)


def _step_node(step: Step, start: datetime, end: datetime | None, layer: int) -> ViewNode:
    what = step.function or step.kind
    parts = [what if step.kind in ("do", "node") else f"{step.kind} {step.function or ''}"]
    if end is not None:
        parts.append(format_duration((end - start).total_seconds()))
    if step.attempts > 1:
        parts.append(f"{step.attempts} tries")
    state = STATE_OF_STEP.get(str(step.status), str(step.status))
    href = f"./{quote(step.child_run_id, safe='')}" if step.child_run_id else None
    return ViewNode(
        id=step.key,
        label=step_label(step),
        detail=" · ".join(p.strip() for p in parts if p.strip()),
        state=state,
        href=href or f"#step-{quote(step.key, safe=URI_COMPONENT_SAFE)}",
        title=f"{step.key}: {STATE_TEXT.get(state, state)}",
        layer=layer,
    )


#: the state of a junction point between two rows of parallel steps
JUNCTION = "junction"


def _join_rows(nodes: Sequence[ViewNode]) -> tuple[list[ViewNode], list[ViewEdge]]:
    """Edges from each row to the next: straight when either row has one step, else
    through a junction node in a row of its own (``a + b`` edges, not ``a * b``)."""
    rows: dict[int, list[ViewNode]] = {}
    for node in nodes:
        rows.setdefault(node.layer, []).append(node)
    out_nodes: list[ViewNode] = []
    edges: list[ViewEdge] = []
    shift = 0
    order = sorted(rows)
    for index, layer in enumerate(order):
        row = rows[layer]
        for node in row:
            node.layer = layer + shift
        out_nodes += row
        if index + 1 == len(order):
            break
        lower = rows[order[index + 1]]
        if len(row) == 1 or len(lower) == 1:
            edges += [ViewEdge(a.id, b.id, "next") for a in row for b in lower]
            continue
        shift += 1
        hub = ViewNode(
            id=f"~join-{index}", label="", detail="", state=JUNCTION, layer=layer + shift
        )
        out_nodes.append(hub)
        edges += [ViewEdge(a.id, hub.id, "next") for a in row]
        edges += [ViewEdge(hub.id, b.id, "next") for b in lower]
    return out_nodes, edges


# -- graph workflows: the definition ---------------------------------------------------------
def node_of(step: Step, node_ids: Iterable[str]) -> str | None:
    """Which graph node a step belongs to (loops and ``for_each`` give one node many steps)."""
    ids = set(node_ids)
    explicit = getattr(step, "node_id", None)
    if isinstance(explicit, str) and explicit in ids:
        return explicit
    if step.key in ids:
        return step.key
    for sep in ("#", "[", ":", "/"):
        head = step.key.split(sep, 1)[0]
        if head in ids:
            return head
    return None


def _aggregate(states: list[str]) -> str:
    """One colour for a node run several times (loops): running while any instance runs,
    else the latest instance's state."""
    if not states:
        return "not_reached"
    if "running" in states:
        return "running"
    return states[-1]


def graph_view(
    graph: Any, steps: Sequence[Step], history: Sequence[StepAttempt]
) -> tuple[list[ViewNode], list[ViewEdge]]:
    node_ids = list(graph.nodes)
    per_node: dict[str, list[Step]] = {nid: [] for nid in node_ids}
    for step in steps:
        nid = node_of(step, node_ids)
        if nid is not None and step.kind != "item":
            per_node[nid].append(step)
    edges = [
        ViewEdge(e.source, e.target, e.kind, e.label)
        for e in graph.edges
        if e.source in per_node and e.target in per_node
    ]
    forward = [e for e in edges if not graph.is_back_edge(e.source, e.target)]
    layers = longest_path_layers(node_ids, [(e.source, e.target) for e in forward])
    nodes: list[ViewNode] = []
    for nid in node_ids:
        node = graph.nodes[nid]
        mine = per_node[nid]
        state = _aggregate([STATE_OF_STEP.get(str(s.status), "waiting") for s in mine])
        parts = [getattr(node, "function", None) or ""]
        if getattr(node, "for_each", None) is not None:
            parts.append("for each")
        if len(mine) > 1:
            parts.append(f"{len(mine)} runs")
        elif mine and mine[0].attempts > 1:
            parts.append(f"{mine[0].attempts} tries")
        href = None
        if mine:
            child = next((s.child_run_id for s in mine if s.child_run_id), None)
            href = (
                f"./{quote(child, safe='')}"
                if child
                else f"#step-{quote(mine[0].key, safe=URI_COMPONENT_SAFE)}"
            )
        nodes.append(
            ViewNode(
                id=nid,
                label=nid,
                detail=" · ".join(p for p in parts if p),
                state=state,
                href=href,
                title=f"{nid}: {STATE_TEXT.get(state, state)}",
                layer=layers[nid],
            )
        )
    reached = {n.id for n in nodes if n.state != "not_reached"}
    for edge in edges:
        edge.taken = edge.source in reached and edge.target in reached
    return nodes, edges


def longest_path_layers(
    node_ids: Sequence[str], edges: Sequence[tuple[str, str]]
) -> dict[str, int]:
    """Layer of each node: the longest path to it over ``edges`` (which must be acyclic;
    back edges are left out by the caller)."""
    preds: dict[str, list[str]] = {nid: [] for nid in node_ids}
    succs: dict[str, list[str]] = {nid: [] for nid in node_ids}
    for source, target in edges:
        if source != target:
            preds[target].append(source)
            succs[source].append(target)
    indegree = {nid: len(preds[nid]) for nid in node_ids}
    layer = dict.fromkeys(node_ids, 0)
    ready = [nid for nid in node_ids if indegree[nid] == 0]
    seen = 0
    while ready:
        nid = ready.pop(0)
        seen += 1
        for nxt in succs[nid]:
            layer[nxt] = max(layer[nxt], layer[nid] + 1)
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    if seen < len(node_ids):  # a cycle slipped through: keep those nodes at their best guess
        log.debug("graph layout: %d nodes on a cycle", len(node_ids) - seen)
    return layer


# -- layout and drawing ---------------------------------------------------------------------
def layout(nodes: Sequence[ViewNode], edges: Sequence[ViewEdge]) -> tuple[int, int]:
    """Rows top to bottom; within a row, nodes sorted by where their parents are (one
    barycentre sweep) and centred. Sets ``x``/``y`` and returns (width, height)."""
    if not nodes:
        return 2 * PAD + NODE_W, 2 * PAD + NODE_H
    rows: dict[int, list[ViewNode]] = {}
    for node in nodes:
        rows.setdefault(node.layer, []).append(node)
    ranks = sorted(rows)
    widest = max(len(r) for r in rows.values())
    inner = widest * NODE_W + (widest - 1) * GAP_X
    parents: dict[str, list[str]] = {}
    for e in edges:
        parents.setdefault(e.target, []).append(e.source)
    centre: dict[str, float] = {}
    layer_of = {n.id: n.layer for n in nodes}
    for index, rank in enumerate(ranks):
        row = rows[rank]
        if index:
            keys = {
                n.id: (_barycentre(n, rank, parents, centre, layer_of), i)
                for i, n in enumerate(row)
            }
            # the default binds this row's keys (mypy cannot type a lambda's default)
            row.sort(key=lambda n, keys=keys: keys[n.id])  # type: ignore[misc]
        row_width = len(row) * NODE_W + (len(row) - 1) * GAP_X
        x0 = PAD + (inner - row_width) / 2
        for i, node in enumerate(row):
            node.x = x0 + i * (NODE_W + GAP_X)
            node.y = PAD + index * (NODE_H + GAP_Y)
            centre[node.id] = node.x + NODE_W / 2
    loops = any(_is_upward(e, layer_of) for e in edges)
    width = int(2 * PAD + inner + (LOOP_PAD if loops else 0))
    height = int(2 * PAD + len(ranks) * NODE_H + (len(ranks) - 1) * GAP_Y)
    return width, height


def _barycentre(
    node: ViewNode,
    rank: int,
    parents: dict[str, list[str]],
    centre: dict[str, float],
    layer_of: dict[str, int],
) -> float:
    """Mean x of a node's parents in rows above; nodes without any keep their place last."""
    xs = [
        centre[p] for p in parents.get(node.id, []) if p in centre and layer_of.get(p, rank) < rank
    ]
    return sum(xs) / len(xs) if xs else float("inf")


def _is_upward(edge: ViewEdge, layer_of: dict[str, int]) -> bool:
    return layer_of.get(edge.target, 0) <= layer_of.get(edge.source, 0)


def _edge_path(a: ViewNode, b: ViewNode) -> tuple[str, float, float]:
    """SVG path from ``a`` to ``b`` and where its label goes."""
    if b.layer > a.layer:
        x1, y1 = a.x + NODE_W / 2, a.y + (NODE_H / 2 if a.state == JUNCTION else NODE_H)
        x2, y2 = b.x + NODE_W / 2, b.y + (NODE_H / 2 if b.state == JUNCTION else 0)
        bend = max(18.0, (y2 - y1) / 2)
        d = (
            f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} "
            f"{x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}"
        )
        return d, (x1 + x2) / 2, (y1 + y2) / 2
    # Up or along a row: leave and enter on the right, bulging into the loop margin.
    x1, y1 = a.x + NODE_W, a.y + NODE_H / 2
    x2, y2 = b.x + NODE_W, b.y + NODE_H / 2
    out = max(x1, x2) + LOOP_PAD - 8
    if a is b:
        y1, y2 = a.y + NODE_H * 0.3, a.y + NODE_H * 0.7
    d = f"M{x1:.1f},{y1:.1f} C{out:.1f},{y1:.1f} {out:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
    return d, out - 6, (y1 + y2) / 2


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_svg(
    nodes: Sequence[ViewNode], edges: Sequence[ViewEdge], width: int, height: int, title: str
) -> str:
    by_id = {n.id: n for n in nodes}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="run-graph" viewBox="0 0 {width} {height}"'
        f' width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
        "<defs>",
        '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"'
        ' markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" class="arrow"/></marker>',
        '<marker id="arrow-error" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"'
        ' markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" class="arrow-error"/>'
        "</marker>",
        "</defs>",
        '<g class="edges">',
    ]
    if not nodes:
        y = PAD + NODE_H / 2
        out.append(f'</g><text x="{PAD}" y="{y:.0f}" class="empty">no steps yet</text></svg>')
        return "".join(out)
    for e in edges:
        a, b = by_id.get(e.source), by_id.get(e.target)
        if a is None or b is None:
            continue
        d, lx, ly = _edge_path(a, b)
        classes = ["edge", f"e-{e.kind}", "taken" if e.taken else "untaken"]
        marker = "arrow-error" if e.kind == "on_error" else "arrow"
        end = "" if b.state == JUNCTION else f' marker-end="url(#{marker})"'
        out.append(f'<path d="{d}" class="{" ".join(classes)}"{end}/>')
        if e.label:
            out.append(
                f'<text x="{lx:.1f}" y="{ly + 4:.1f}" class="edge-label" text-anchor="middle">'
                f"{escape(_clip(e.label, 14))}</text>"
            )
    out.append('</g><g class="nodes">')
    for n in nodes:
        if n.state == JUNCTION:
            cx, cy = n.x + NODE_W / 2, n.y + NODE_H / 2
            out.append(f'<circle class="junction" cx="{cx:.1f}" cy="{cy:.1f}" r="4"/>')
            continue
        inner = (
            f'<g class="node n-{escape(n.state)}" transform="translate({n.x:.1f},{n.y:.1f})"'
            f' data-node="{escape(n.id)}" data-state="{escape(n.state)}">'
            f"<title>{escape(n.title or n.id)}</title>"
            f'<rect width="{NODE_W}" height="{NODE_H}" rx="8"/>'
            f'<rect class="bar" width="5" height="{NODE_H}" rx="2"/>'
            f'<text x="14" y="20" class="label">{escape(_clip(n.label, LABEL_CHARS))}</text>'
            f'<text x="14" y="37" class="detail">{escape(_clip(n.detail, DETAIL_CHARS))}</text>'
            "</g>"
        )
        if n.href:
            out.append(f'<a href="{escape(n.href)}">{inner}</a>')
        else:
            out.append(inner)
    out.append("</g></svg>")
    return "".join(out)


#: characters that JavaScript's encodeURIComponent leaves alone, so fragment links built
#: here match the element ids the dashboard builds in the browser
URI_COMPONENT_SAFE = "-_.!~*'()"
