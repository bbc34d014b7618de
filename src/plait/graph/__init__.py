"""Graph workflows: declarative nodes and edges instead of code.

The pure half lives here (model, loading, validation, values, the planner, Mermaid); the
engine stores and runs what the planner decides.
"""

from plait.graph.builder import GraphBuilder, branch_on, ref, template
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
from plait.graph.validate import unknown_functions, validate, validate_or_raise
from plait.graph.values import Scope, check_syntax, references, resolve

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
