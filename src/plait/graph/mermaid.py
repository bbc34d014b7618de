"""Mermaid flowchart text for a graph, optionally coloured by a run's progress.

Node ids are user text, and Mermaid chokes on spaces, punctuation and keywords such as
``end``; so every node gets a generated Mermaid id and keeps its real id in the label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from plait.graph.model import Graph
from plait.graph.planner import FAILED, IN_FLIGHT, PENDING, SUCCEEDED, NodeState, key_ordinal

#: Mermaid style of each step status. Graph diagrams and the step diagrams of code
#: workflows (``plait.cli.diagram``) share it, so a status has one colour in every diagram.
STATUS_STYLES: Mapping[str, str] = MappingProxyType(
    {
        "succeeded": "fill:#d4edda,stroke:#28a745,color:#155724",
        "failed": "fill:#f8d7da,stroke:#dc3545,color:#721c24",
        "running": "fill:#cce5ff,stroke:#007bff,color:#004085",
        "scheduled": "fill:#d1ecf1,stroke:#17a2b8,color:#0c5460",
        "pending": "fill:#e2e3e5,stroke:#6c757d,color:#383d41",
    }
)
_SIMPLE_LABEL = re.compile(r"^[A-Za-z0-9_ .:/-]+$")


def to_mermaid(graph: Graph, states: Sequence[NodeState] | None = None) -> str:
    """``graph TD`` text: entry nodes as stadiums, ``id<br/>function`` labels, branch
    cases on edges, dotted ``error`` edges to handlers; with ``states``, a class per
    node for its latest status (nodes never reached keep the default style)."""
    ids = mermaid_ids(graph)
    entries = set(graph.entry_nodes)
    counts: dict[str, int] = {}
    for s in states or ():
        counts[s.node_id] = counts.get(s.node_id, 0) + 1
    lines = ["graph TD"]
    for node_id, node in graph.nodes.items():
        label = _escape(node_id)
        if node.function:
            label += f"<br/>{_escape(node.function)}"
        if node.for_each is not None:
            label += f"<br/>for each ({_escape(node.mode or 'parallel')})"
        if counts.get(node_id, 0) > 1:
            label += f"<br/>({counts[node_id]} runs)"
        shape = ('(["', '"])') if node_id in entries else ('["', '"]')
        lines.append(f"    {ids[node_id]}{shape[0]}{label}{shape[1]}")
    for edge in graph.edges:
        source, target = ids[edge.source], ids[edge.target]
        if edge.kind == "on_error":
            lines.append(f"    {source} -.->|error| {target}")
        elif edge.label is not None:
            lines.append(f"    {source} -->|{_edge_label(edge.label)}| {target}")
        else:
            lines.append(f"    {source} --> {target}")
    if states is not None:
        lines.extend(_status_lines(graph, ids, states))
    return "\n".join(lines) + "\n"


def mermaid_ids(graph: Graph) -> dict[str, str]:
    """A safe, unique, stable Mermaid id for every node (``n_`` + the id's letters and
    digits, de-duplicated with a counter)."""
    ids: dict[str, str] = {}
    used: set[str] = set()
    for node_id in graph.nodes:
        base = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)
        candidate, n = base, 2
        while candidate in used:
            candidate, n = f"{base}_{n}", n + 1
        used.add(candidate)
        ids[node_id] = candidate
    return ids


def status_class_defs() -> list[str]:
    """A ``classDef`` line per step status, named after the status so a diagram colours a
    node with ``class <id> <status>``."""
    return [f"    classDef {name} {style}" for name, style in STATUS_STYLES.items()]


def _status_lines(graph: Graph, ids: dict[str, str], states: Sequence[NodeState]) -> list[str]:
    latest: dict[str, NodeState] = {}
    busy: set[str] = set()
    for s in states:
        if s.node_id not in graph.nodes:
            continue
        if s.status in IN_FLIGHT and s.status != PENDING:
            busy.add(s.node_id)
        current = latest.get(s.node_id)
        if current is None or key_ordinal(s.key) >= key_ordinal(current.key):
            latest[s.node_id] = s
    groups: dict[str, list[str]] = {"succeeded": [], "failed": [], "running": [], "pending": []}
    for node_id in graph.nodes:
        if node_id not in latest:
            continue
        status = latest[node_id].status
        if node_id in busy or status in IN_FLIGHT - {PENDING}:
            groups["running"].append(ids[node_id])
        elif status == SUCCEEDED:
            groups["succeeded"].append(ids[node_id])
        elif status == FAILED:
            groups["failed"].append(ids[node_id])
        else:
            groups["pending"].append(ids[node_id])
    lines = status_class_defs()
    lines.extend(
        f"    class {','.join(members)} {name}" for name, members in groups.items() if members
    )
    return lines


def _escape(text: str) -> str:
    """Text safe inside a quoted Mermaid label (entity codes for the characters that end
    or confuse one)."""
    out: list[str] = []
    for char in text:
        if char in '"#<>&`':
            out.append(f"#{ord(char)};")
        else:
            out.append(char)
    return "".join(out)


def _edge_label(text: str) -> str:
    if _SIMPLE_LABEL.match(text):
        return text
    return f'"{_escape(text)}"'
