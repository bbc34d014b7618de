"""The graph model: loading from dict, JSON, YAML and the builder, normalisation, hashing."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml

from plait.graph import (
    Branch,
    Graph,
    GraphBuilder,
    GraphValidationError,
    Node,
    branch_on,
    graph_from_dict,
    graph_from_json,
    graph_from_yaml,
    load_graph,
    ref,
    template,
)

ONBOARD: dict[str, Any] = {
    "nodes": {
        "create": {
            "function": "create_user",
            "input": {"email": {"$ref": "trigger", "path": "email"}},
            "next": "welcome",
        },
        "welcome": {
            "function": "send_email",
            "input": {
                "to": {"$ref": "create", "path": "email"},
                "subject": {"$template": "Hi ${trigger.name}"},
            },
            "next": {"vip": "gift", "regular": []},
            "on_error": "alert",
            "retries": 2,
            "retry_delay": "1s",
            "timeout": 30,
        },
        "gift": {"function": "send_gift", "input": {"user": {"$ref": "create"}}},
        "alert": {"function": "page_oncall"},
    },
    "output": {"user": {"$ref": "create"}},
}

ONBOARD_YAML = """
nodes:
  create:
    function: create_user
    input:
      email: {$ref: trigger, path: email}
    next: welcome
  welcome:
    function: send_email
    input:
      to: {$ref: create, path: email}
      subject: {$template: "Hi ${trigger.name}"}
    next:
      vip: gift
      regular: []
    on_error: alert
    retries: 2
    retry_delay: 1s
    timeout: 30
  gift:
    function: send_gift
    input:
      user: {$ref: create}
  alert:
    function: page_oncall
output:
  user: {$ref: create}
"""


def built() -> Graph:
    return (
        GraphBuilder("onboard")
        .node("create", "create_user", input={"email": ref("trigger", "email")}, next="welcome")
        .node(
            "welcome",
            "send_email",
            input={"to": ref("create", "email"), "subject": template("Hi ${trigger.name}")},
            next={"vip": "gift", "regular": []},
            on_error="alert",
            retries=2,
            retry_delay="1s",
            timeout=30,
        )
        .node("gift", "send_gift", input={"user": ref("create")})
        .node("alert", "page_oncall")
        .output({"user": ref("create")})
        .build()
    )


def test_dict_json_yaml_and_builder_give_equal_models_and_hashes(tmp_path: Path) -> None:
    json_file = tmp_path / "onboard.json"
    json_file.write_text(json.dumps(ONBOARD))
    yaml_file = tmp_path / "onboard.yaml"
    yaml_file.write_text(ONBOARD_YAML)
    graphs = [
        graph_from_dict("onboard", ONBOARD),
        graph_from_json("onboard", json.dumps(ONBOARD)),
        graph_from_json("onboard", json_file),
        graph_from_json("onboard", str(json_file)),
        graph_from_yaml("onboard", ONBOARD_YAML),
        graph_from_yaml("onboard", yaml_file),
        built(),
        load_graph("onboard", ONBOARD),
        load_graph("onboard", str(yaml_file)),
        load_graph("onboard", json.dumps(ONBOARD)),
    ]
    first = graphs[0]
    for graph in graphs[1:]:
        assert graph == first
        assert graph.content_hash() == first.content_hash()
        assert graph.to_dict() == first.to_dict()


def test_model_fields_are_normalised() -> None:
    graph = graph_from_dict("onboard", ONBOARD)
    assert list(graph.nodes) == ["create", "welcome", "gift", "alert"]
    create, welcome = graph.nodes["create"], graph.nodes["welcome"]
    assert isinstance(create, Node)
    assert create.next == ("welcome",)
    assert welcome.next == Branch({"vip": ("gift",), "regular": ()})
    assert welcome.on_error == ("alert",)
    assert (welcome.retries, welcome.retry_delay, welcome.timeout) == (2, "1s", 30)
    assert graph.nodes["alert"].next is None
    assert graph.nodes["alert"].input is None
    assert graph.entry is None


def test_entry_nodes_are_computed_from_next_and_on_error() -> None:
    graph = graph_from_dict("onboard", ONBOARD)
    assert graph.entry_nodes == ("create",)  # alert is an on_error target, not an entry


def test_explicit_entry_wins() -> None:
    data = copy.deepcopy(ONBOARD)
    data["entry"] = "create"
    graph = graph_from_dict("onboard", data)
    assert graph.entry == ("create",)
    assert graph.entry_nodes == ("create",)
    # an explicit entry is part of the definition, so it changes the hash
    assert graph.content_hash() != graph_from_dict("onboard", ONBOARD).content_hash()


def test_next_forms() -> None:
    graph = graph_from_dict(
        "g",
        {
            "nodes": {
                "a": {"function": "f", "next": ["b", "c", "b"]},
                "b": {"function": "f", "next": []},
                "c": {
                    "function": "f",
                    "next": {"$branch": "tier", "cases": {"vip": "d"}, "default": ["e"]},
                },
                "d": {"function": "f", "next": {"x": ["e"], "y": "e"}},
                "e": "f",  # shorthand: just the function name
            }
        },
    )
    nodes = graph.nodes
    assert nodes["a"].next == ("b", "c")
    assert nodes["b"].next is None
    assert nodes["c"].next == Branch({"vip": ("d",), "default": ("e",)}, path="tier")
    assert nodes["d"].next == Branch({"x": ("e",), "y": ("e",)})
    assert nodes["e"] == Node(id="e", function="f")
    assert nodes["c"].targets == ("d", "e")
    assert nodes["d"].targets == ("e",)


def test_branch_choice() -> None:
    by_key = Branch({"vip": ("gift",), "regular": ()})
    assert by_key.choose("vip", None) == ("gift",)
    assert by_key.choose("regular", None) == ()
    assert by_key.choose(None, None) == ()
    assert by_key.choose("other", None) == ()
    with_default = Branch({"vip": ("gift",), "default": ("mail",)})
    assert with_default.choose("other", None) == ("mail",)
    assert with_default.choose(None, None) == ("mail",)
    by_value = Branch({"vip": ("gift",), "true": ("t",), "3": ("three",)}, path="a.b")
    assert by_value.choose("vip", {"a": {"b": "vip"}}) == ("gift",)
    assert by_value.choose(None, {"a": {"b": True}}) == ("t",)
    assert by_value.choose(None, {"a": {"b": 3}}) == ("three",)
    assert by_value.choose("vip", {"a": {}}) == ()  # ctx.branch does not steer a $branch


def test_yaml_boolean_and_number_cases_become_strings() -> None:
    text = """
nodes:
  a: {function: f, next: {$branch: ok, cases: {true: b, false: c, 3: d}}}
  b: f
  c: f
  d: f
"""
    graph = graph_from_yaml("g", text)
    assert graph.nodes["a"].next == Branch(
        {"true": ("b",), "false": ("c",), "3": ("d",)}, path="ok"
    )


def test_for_each_mode_defaults_to_parallel() -> None:
    each = {"$ref": "a", "path": "items"}
    plain = graph_from_dict(
        "g",
        {"nodes": {"a": {"function": "f", "next": "b"}, "b": {"function": "f", "for_each": each}}},
    )
    explicit = graph_from_dict(
        "g",
        {
            "nodes": {
                "a": {"function": "f", "next": "b"},
                "b": {"function": "f", "for_each": each, "mode": "parallel"},
            }
        },
    )
    assert plain.nodes["b"].mode == "parallel"
    assert plain == explicit
    assert plain.content_hash() == explicit.content_hash()


def test_to_dict_round_trips_and_is_canonical() -> None:
    graph = graph_from_dict("onboard", ONBOARD)
    again = graph_from_dict("onboard", graph.to_dict())
    assert again == graph
    assert again.to_dict() == graph.to_dict()
    canonical = graph.to_dict()
    assert canonical["nodes"]["create"]["next"] == ["welcome"]
    assert canonical["nodes"]["welcome"]["next"] == {"vip": ["gift"], "regular": []}
    assert canonical["nodes"]["welcome"]["on_error"] == ["alert"]
    assert canonical["nodes"]["alert"] == {"function": "page_oncall"}
    assert "entry" not in canonical


def test_content_hash_is_sha256_of_canonical_json() -> None:
    graph = graph_from_dict("onboard", ONBOARD)
    text = json.dumps(graph.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = hashlib.sha256(text.encode()).hexdigest()[:16]
    assert graph.content_hash() == expected
    assert len(expected) == 16


def test_content_hash_ignores_the_name_key_order_and_shorthands() -> None:
    shuffled = {
        "output": ONBOARD["output"],
        "nodes": {nid: dict(reversed(list(n.items()))) for nid, n in ONBOARD["nodes"].items()},
    }
    shuffled["nodes"]["create"]["next"] = ["welcome"]
    shuffled["nodes"]["alert"] = "page_oncall"
    a = graph_from_dict("onboard", ONBOARD)
    b = graph_from_dict("another name", shuffled)
    assert a.content_hash() == b.content_hash()


def test_content_hash_changes_with_the_definition() -> None:
    changed = copy.deepcopy(ONBOARD)
    changed["nodes"]["welcome"]["retries"] = 3
    assert (
        graph_from_dict("onboard", changed).content_hash()
        != graph_from_dict("onboard", ONBOARD).content_hash()
    )


def test_model_does_not_share_mutable_input_with_the_caller() -> None:
    data = copy.deepcopy(ONBOARD)
    graph = graph_from_dict("onboard", data)
    before = graph.content_hash()
    data["nodes"]["create"]["input"]["email"]["path"] = "other"
    assert graph_from_dict("onboard", graph.to_dict()).content_hash() == before
    assert graph.nodes["create"].input["email"]["path"] == "email"


def test_graphs_are_hashable_and_immutable() -> None:
    graph = graph_from_dict("onboard", ONBOARD)
    assert hash(graph) == hash(graph_from_dict("onboard", ONBOARD))
    with pytest.raises(AttributeError):
        graph.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        graph.nodes["x"] = graph.nodes["create"]  # type: ignore[index]


def test_graphs_copy_and_pickle() -> None:
    graph = graph_from_dict("onboard", ONBOARD)
    assert copy.deepcopy(graph) == graph
    assert pickle.loads(pickle.dumps(graph)) == graph
    assert copy.copy(graph) == graph


def test_load_graph_renames_a_graph_and_accepts_a_builder() -> None:
    graph = graph_from_dict("first", ONBOARD)
    renamed = load_graph("second", graph)
    assert renamed.name == "second" and renamed.nodes == graph.nodes
    assert load_graph("first", graph) is graph
    builder = GraphBuilder("x").node("a", "f", next="b").node("b", "g")
    assert load_graph("x", builder) == builder.build()
    with pytest.raises(TypeError):
        load_graph("x", 42)


def test_builder_helpers() -> None:
    graph = (
        GraphBuilder("g")
        .node("a", "f", next=branch_on("tier", {"vip": "b"}, default=["c"]))
        .node("b", "f", input={"x": ref("a", "x", default=None)})
        .node("c", "f")
        .entry("a")
        .build()
    )
    assert graph.nodes["a"].next == Branch({"vip": ("b",), "default": ("c",)}, path="tier")
    assert graph.nodes["b"].input == {"x": {"$ref": "a", "path": "x", "default": None}}
    assert graph.entry == ("a",)


def test_builder_reports_a_duplicate_node_with_other_problems() -> None:
    builder = GraphBuilder("g").node("a", "f", next="b").node("a", "g", next="zz").node("b", "h")
    with pytest.raises(GraphValidationError) as info:
        builder.build()
    problems = info.value.problems
    assert any("defined twice" in p for p in problems)
    assert any("unknown node 'zz'" in p for p in problems)


def test_structural_problems_are_reported_together_with_the_rest() -> None:
    data = {
        "nodes": {
            "a": {"function": 5, "next": 7, "onError": "b", "retries": "two"},
            "b": ["not", "a", "node"],
            "c": {"function": "f", "next": "missing", "input": {"when": {1, 2}}},
        },
        "entries": ["a"],
    }
    with pytest.raises(GraphValidationError) as info:
        graph_from_dict("broken", data)
    problems = info.value.problems
    text = "\n".join(problems)
    assert "node 'a': function must be a string" in text
    assert "node 'a' next must be a node id or a list" in text
    assert "unknown key 'onError' (did you mean 'on_error'?)" in text
    assert "retries must be a whole number" in text
    assert "node 'b' must be a mapping" in text
    assert "set is not JSON data" in text
    assert "unknown top-level key 'entries'" in text
    # and what validate finds in the rest
    assert "node 'c': next points to unknown node 'missing'" in text
    # a bad function is reported once, not again as "has no function"
    assert not any("'a' has no function" in p for p in problems)
    assert info.value.graph_name == "broken"


def test_not_a_mapping() -> None:
    with pytest.raises(GraphValidationError, match="must be a mapping"):
        graph_from_dict("g", ["a"])  # type: ignore[arg-type]
    with pytest.raises(GraphValidationError, match="no 'nodes'"):
        graph_from_dict("g", {})


def test_invalid_json_and_yaml_are_validation_errors() -> None:
    with pytest.raises(GraphValidationError, match="invalid JSON"):
        graph_from_json("g", '{"nodes": ')
    with pytest.raises(GraphValidationError, match="invalid YAML"):
        graph_from_yaml("g", "nodes: [unclosed")


def test_duplicate_keys_in_json_and_yaml_are_problems() -> None:
    text = '{"nodes": {"a": {"function": "f"}, "a": {"function": "g"}}}'
    with pytest.raises(GraphValidationError, match="duplicate key 'a'"):
        graph_from_json("g", text)
    with pytest.raises(GraphValidationError, match=r"duplicate key 'a' .*line 3"):
        graph_from_yaml("g", "nodes:\n  a: {function: f}\n  a: {function: g}\n")


def test_yaml_non_string_branch_key_is_a_problem() -> None:
    with pytest.raises(GraphValidationError, match="branch key True in next must be a string"):
        graph_from_yaml("g", "nodes:\n  a: {function: f, next: {yes: b}}\n  b: f\n")


def test_yaml_values_that_are_not_json_are_problems() -> None:
    with pytest.raises(GraphValidationError, match="date is not JSON data"):
        graph_from_yaml("g", "nodes:\n  a: {function: f, input: {when: 2024-01-01}}\n")


def test_yaml_file_round_trip(tmp_path: Path) -> None:
    graph = graph_from_dict("onboard", ONBOARD)
    path = tmp_path / "g.yml"
    path.write_text(yaml.safe_dump(graph.to_dict()))
    assert graph_from_yaml("onboard", path) == graph


def test_structure_back_edges_and_predecessors() -> None:
    graph = graph_from_dict(
        "loop",
        {
            "nodes": {
                "begin": {"function": "f", "next": "attempt"},
                "attempt": {"function": "f", "next": {"retry": "retry", "done": "finish"}},
                "retry": {"function": "f", "next": "attempt"},
                "finish": {"function": "f"},
                "side": {"function": "f", "next": "finish"},
            }
        },
    )
    assert graph.entry_nodes == ("begin", "side")
    assert not graph.is_back_edge("begin", "attempt")
    assert graph.is_back_edge("retry", "attempt")
    assert graph.is_back_edge("attempt", "retry")
    assert not graph.is_back_edge("attempt", "finish")
    assert graph.forward_predecessors("finish") == ("attempt", "side")
    assert graph.forward_predecessors("attempt") == ("begin",)
    assert graph.ancestors("finish") == {"begin", "attempt", "retry", "side"}
    assert [(e.source, e.target, e.kind, e.label) for e in graph.edges][:3] == [
        ("begin", "attempt", "next", None),
        ("attempt", "retry", "next", "retry"),
        ("attempt", "finish", "next", "done"),
    ]
