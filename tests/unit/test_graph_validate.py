"""Validation of graph definitions: every problem, all at once."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import plait
from plait.graph import (
    Graph,
    GraphValidationError,
    graph_from_dict,
    unknown_functions,
    validate,
    validate_or_raise,
)

GOOD: dict[str, Any] = {
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
        },
        "gift": {"function": "send_gift", "input": {"user": {"$ref": "create"}}},
        "alert": {"function": "page_oncall"},
    },
    "output": {"user": {"$ref": "create"}},
}


def graph(data: dict[str, Any], name: str = "g") -> Graph:
    return graph_from_dict(name, data)


def test_a_good_graph_has_no_problems() -> None:
    assert validate(graph(GOOD)) == []
    validate_or_raise(graph(GOOD))


def test_every_problem_is_reported_at_once() -> None:
    bad = graph(
        {
            "nodes": {
                "start": {
                    "function": "f",
                    "input": {"x": {"$ref": "ghost"}, "t": {"$template": "Hi ${trigger.name"}},
                    "next": ["middle", "nowhere"],
                    "on_error": "handler_typo",
                },
                "middle": {
                    "input": {"p": {"$ref": "start", "path": "a..b"}, "i": {"$ref": "$item"}},
                    "next": {"yes": "end", "no": "nope"},
                },
                "each": {"function": "f", "for_each": ["not", "a", "ref"], "mode": "sideways"},
                "end": {"function": "g", "mode": "parallel", "retries": -1, "timeout": "soon"},
            },
            "output": {"r": {"$ref": "missing_node"}},
        }
    )
    problems = validate(bad)
    expected = [
        "node 'start' input references unknown node 'ghost'",
        "node 'start' input.t: template",
        "node 'start': next points to unknown node 'nowhere'",
        "node 'start': on_error points to unknown node 'handler_typo'",
        "node 'middle' has no function",
        "node 'middle' input.p: path 'a..b' has an empty segment",
        "node 'middle' input uses $item",
        "node 'middle': next (branch 'no') points to unknown node 'nope'",
        "node 'each': for_each must be a reference to a list",
        "node 'each': mode must be 'parallel' or 'sequential'",
        "node 'end': retries must be 0 or more",
        "node 'end': invalid timeout",
        "node 'end': mode is only meaningful with for_each",
        "the output references unknown node 'missing_node'",
    ]
    for text in expected:
        assert any(text in p for p in problems), (text, problems)
    with pytest.raises(GraphValidationError) as info:
        validate_or_raise(bad)
    err = info.value
    assert err.graph_name == "g"
    assert err.problems == problems
    message = str(err)
    assert f"({len(problems)} problems)" in message
    for p in problems:
        assert p in message


def test_did_you_mean() -> None:
    data = {"nodes": {"a": {"function": "f", "next": "welcom"}, "welcome": {"function": "f"}}}
    (problem,) = validate(graph(data))
    assert "unknown node 'welcom' (did you mean 'welcome'?)" in problem


def test_no_entry_node() -> None:
    data = {"nodes": {"a": {"function": "f", "next": "b"}, "b": {"function": "f", "next": "a"}}}
    problems = validate(graph(data))
    assert problems == [problems[0]]
    assert "no entry node" in problems[0]


def test_explicit_entry_problems() -> None:
    data = dict(GOOD, entry=["create", "creat"])
    assert any("entry names unknown node 'creat'" in p for p in validate(graph(data)))
    empty = dict(GOOD, entry=[])
    assert any("entry is empty" in p for p in validate(graph(empty)))


def test_a_node_no_entry_leads_to_is_a_problem() -> None:
    data = {
        "nodes": {"a": {"function": "f", "next": "b"}, "b": {"function": "f"}, "c": "f"},
        "entry": ["a"],
    }
    assert validate(graph(data)) == ["node 'c' can never run: no entry node leads to it"]


def test_start_node_must_be_an_entry_node() -> None:
    g = graph(GOOD)
    assert validate(g, start_node="create") == []
    (problem,) = validate(g, start_node="gift")
    assert "start_node 'gift' is not an entry node (entry nodes: 'create')" in problem
    (problem,) = validate(g, start_node="gfit")
    assert "start_node 'gfit' is not a node" in problem
    with pytest.raises(GraphValidationError):
        validate_or_raise(g, start_node="alert")


def test_on_error_handlers_are_not_entry_nodes() -> None:
    assert graph(GOOD).entry_nodes == ("create",)


def test_unknown_functions_are_not_problems_by_default() -> None:
    g = graph(GOOD)
    known = {"create_user", "send_email"}.__contains__
    assert validate(g) == []
    assert unknown_functions(g, known) == ["send_gift", "page_oncall"]
    problems = validate(g, known_functions=known)
    assert problems == [
        "node 'gift': unknown function 'send_gift'",
        "node 'alert': unknown function 'page_oncall'",
    ]


def test_reserved_and_malformed_node_ids() -> None:
    data = {
        "nodes": {
            "trigger": {"function": "f", "next": "a#1"},
            "a#1": {"function": "f", "next": "$x"},
            "$x": {"function": "f", "next": "b[0]"},
            "b[0]": {"function": "f"},
        }
    }
    text = "\n".join(validate(graph(data)))
    assert "node 'trigger': the id is reserved" in text
    assert "node 'a#1': a node id must not contain '#'" in text
    assert "node '$x': the id is reserved" in text
    # the key of item 0 of a for_each node b: it would take that item's result
    assert "node 'b[0]': a node id must not contain '[' or ']'" in text


def test_references_must_be_to_nodes_that_can_have_run() -> None:
    data = {
        "nodes": {
            "a": {"function": "f", "next": ["b", "c"]},
            "b": {"function": "f", "input": {"sibling": {"$ref": "c"}}},
            "c": {"function": "f", "input": {"maybe": {"$ref": "b", "default": None}}},
        }
    }
    (problem,) = validate(graph(data))
    assert "node 'b' input references node 'c', which can never have run before 'b'" in problem


def test_self_reference_only_inside_a_loop() -> None:
    straight = {"nodes": {"a": {"function": "f", "input": {"x": {"$ref": "a"}}}}}
    assert any("references node 'a'" in p for p in validate(graph(straight)))
    looping = {
        "nodes": {
            "start": {"function": "f", "next": "poll"},
            "poll": {
                "function": "f",
                "input": {"last": {"$ref": "poll", "default": None}},
                "next": {"again": "poll"},
            },
        }
    }
    assert validate(graph(looping)) == []


def test_for_each_rules() -> None:
    data = {
        "nodes": {
            "list": {"function": "f", "next": ["each", "each2", "each3"]},
            "each": {
                "function": "f",
                "for_each": {"$ref": "list", "path": "items"},
                "mode": "sequential",
                "input": {"x": {"$ref": "$item", "path": "x"}},
            },
            "each2": {"function": "f", "for_each": {"$template": "${list}"}},
            "each3": {"function": "f", "for_each": {"$ref": "$item"}},
        }
    }
    problems = validate(graph(data))
    assert len(problems) == 2
    assert "node 'each2': for_each must be a reference" in problems[0]
    assert "node 'each3': for_each cannot iterate over $item" in problems[1]


def test_item_in_the_output_is_a_problem() -> None:
    data = {"nodes": {"a": "f"}, "output": {"x": {"$ref": "$item"}}}
    assert validate(graph(data)) == [
        "the output uses $item, which only exists in a for_each node's input"
    ]


def test_bad_durations_and_on_error_to_itself() -> None:
    data = {
        "nodes": {
            "a": {
                "function": "f",
                "retry_delay": "soonish",
                "timeout": 0,
                "on_error": "a",
                "next": "b",
            },
            "b": {"function": "f", "retry_delay": "exponential", "timeout": "1m30s"},
        },
        "entry": "a",
    }
    problems = validate(graph(data))
    assert len(problems) == 3
    assert "node 'a': on_error names the node itself" in problems[0]
    assert "node 'a': invalid retry_delay" in problems[1]
    assert "node 'a': timeout must be longer than 0" in problems[2]


def test_branch_path_syntax() -> None:
    data = {"nodes": {"a": {"function": "f", "next": {"$branch": "x..y", "cases": {"v": []}}}}}
    (problem,) = validate(graph(data))
    assert "node 'a': $branch path 'x..y' has an empty segment" in problem


def test_empty_graph() -> None:
    assert validate(graph({"nodes": {}})) == ["the graph has no nodes"]


def test_error_pickles_and_is_the_public_class() -> None:
    err = GraphValidationError("g", ["a", "b"])
    again = pickle.loads(pickle.dumps(err))
    assert again.problems == ["a", "b"] and again.graph_name == "g"
    assert str(again) == str(err)
    assert isinstance(err, ValueError)
    public = getattr(plait, "GraphValidationError", GraphValidationError)
    assert public is GraphValidationError
