"""Graph workflows: declarative nodes and edges instead of code.

The pure half lives here (model, loading, validation, values, the planner, Mermaid); the
engine stores and runs what the planner decides.

Each name is imported from its module when it is first asked for: a process that runs
only code workflows never loads the graph machinery (a restart after a crash pays for
what it runs, not for all plait has).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plait.graph.builder import GraphBuilder, branch_on, ref, template
    from plait.graph.checks import unknown_functions, validate, validate_or_raise
    from plait.graph.errors import GraphValidationError, GraphValueError
    from plait.graph.load import graph_from_dict, graph_from_json, graph_from_yaml, load_graph
    from plait.graph.mermaid import to_mermaid
    from plait.graph.model import Branch, Edge, Graph, Node
    from plait.graph.planner import (
        NodeState,
        Plan,
        Start,
        for_each_items,
        key_ordinal,
        latest_outputs,
        node_input,
        node_states,
        plan,
        step_key,
    )
    from plait.graph.values import Scope, check_syntax, references, resolve

#: the module each name comes from
_MODULES = {
    "Branch": "model",
    "Edge": "model",
    "Graph": "model",
    "GraphBuilder": "builder",
    "GraphValidationError": "errors",
    "GraphValueError": "errors",
    "Node": "model",
    "NodeState": "planner",
    "Plan": "planner",
    "Scope": "values",
    "Start": "planner",
    "branch_on": "builder",
    "check_syntax": "values",
    "for_each_items": "planner",
    "graph_from_dict": "load",
    "graph_from_json": "load",
    "graph_from_yaml": "load",
    "key_ordinal": "planner",
    "latest_outputs": "planner",
    "load_graph": "load",
    "node_input": "planner",
    "node_states": "planner",
    "plan": "planner",
    "ref": "builder",
    "references": "values",
    "resolve": "values",
    "step_key": "planner",
    "template": "builder",
    "to_mermaid": "mermaid",
    "unknown_functions": "checks",
    "validate": "checks",
    "validate_or_raise": "checks",
}


__all__ = [
    "Branch",
    "Edge",
    "Graph",
    "GraphBuilder",
    "GraphValidationError",
    "GraphValueError",
    "Node",
    "NodeState",
    "Plan",
    "Scope",
    "Start",
    "branch_on",
    "check_syntax",
    "for_each_items",
    "graph_from_dict",
    "graph_from_json",
    "graph_from_yaml",
    "key_ordinal",
    "latest_outputs",
    "load_graph",
    "node_input",
    "node_states",
    "plan",
    "ref",
    "references",
    "resolve",
    "step_key",
    "template",
    "to_mermaid",
    "unknown_functions",
    "validate",
    "validate_or_raise",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'plait.graph' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"plait.graph.{module}"), name)
    globals()[name] = value  # asked once
    return value
