"""Mermaid output for graphs, with and without a run's progress."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import SimpleNamespace

from plait.cli.diagram import steps_mermaid
from plait.graph import NodeState, graph_from_dict, to_mermaid
from plait.graph.mermaid import mermaid_ids

ONBOARD = graph_from_dict(
    "onboard",
    {
        "nodes": {
            "create": {"function": "create_user", "next": "welcome"},
            "welcome": {
                "function": "send_email",
                "next": {"vip": "gift", "regular": []},
                "on_error": "alert",
            },
            "gift": "send_gift",
            "alert": "page_oncall",
        }
    },
)


def test_shapes_labels_and_edges() -> None:
    text = to_mermaid(ONBOARD)
    assert text.splitlines() == [
        "graph TD",
        '    n_create(["create<br/>create_user"])',
        '    n_welcome["welcome<br/>send_email"]',
        '    n_gift["gift<br/>send_gift"]',
        '    n_alert["alert<br/>page_oncall"]',
        "    n_create --> n_welcome",
        "    n_welcome -->|vip| n_gift",
        "    n_welcome -.->|error| n_alert",
    ]


def test_parallel_value_branch_and_for_each() -> None:
    graph = graph_from_dict(
        "g",
        {
            "nodes": {
                "a": {"function": "f", "next": ["b", "c"]},
                "b": {
                    "function": "f",
                    "next": {"$branch": "tier", "cases": {"gold": "d"}, "default": "c"},
                },
                "c": {"function": "f", "for_each": {"$ref": "a"}, "mode": "sequential"},
                "d": "f",
            }
        },
    )
    text = to_mermaid(graph)
    assert "    n_a --> n_b" in text and "    n_a --> n_c" in text
    assert "    n_b -->|gold| n_d" in text
    assert "    n_b -->|default| n_c" in text
    assert 'n_c["c<br/>f<br/>for each (sequential)"]' in text


def test_ids_are_sanitised_and_labels_keep_the_real_id() -> None:
    graph = graph_from_dict(
        "g",
        {
            "nodes": {
                "send email!": {"function": "f", "next": ["end", "a_b", "a b"]},
                "end": {"function": 'say "hi" <b>'},
                "a_b": "f",
                "a b": {"function": "f", "next": {"odd|key": "end"}},
            }
        },
    )
    ids = mermaid_ids(graph)
    assert ids == {"send email!": "n_send_email_", "end": "n_end", "a_b": "n_a_b", "a b": "n_a_b_2"}
    for mid in ids.values():
        assert re.fullmatch(r"[A-Za-z0-9_]+", mid)
    text = to_mermaid(graph)
    assert 'n_send_email_(["send email!<br/>f"])' in text
    assert 'n_end["end<br/>say #34;hi#34; #60;b#62;"]' in text
    assert 'n_a_b_2["a b<br/>f"]' in text
    assert '    n_a_b_2 -->|"odd|key"| n_end' in text


def test_states_colour_nodes_by_status() -> None:
    graph = graph_from_dict(
        "g",
        {
            "nodes": {
                "a": {"function": "f", "next": ["b", "c", "d"]},
                "b": {"function": "f", "next": {"again": "b"}},
                "c": "f",
                "d": {"function": "f", "next": "e"},
                "e": "f",
                "f": {"function": "f"},
            },
            "entry": ["a", "f"],
        },
    )
    states = [
        NodeState("a", "a", "succeeded"),
        NodeState("b", "b", "succeeded", branch="again", from_key="a"),
        NodeState("b#1", "b", "failed", from_key="b"),
        NodeState("c", "c", "scheduled", from_key="a"),
        NodeState("d", "d", "pending", from_key="a"),
        NodeState("f", "f", "running"),
    ]
    text = to_mermaid(graph, states)
    lines = text.splitlines()
    for name in ("succeeded", "failed", "running", "pending"):
        assert any(line.startswith(f"    classDef {name} ") for line in lines)
    assert "    class n_a succeeded" in lines
    assert "    class n_b failed" in lines  # the latest instance
    assert "    class n_c,n_f running" in lines
    assert "    class n_d pending" in lines
    assert not any("n_e" in line for line in lines if line.startswith("    class "))
    assert 'n_b["b<br/>f<br/>(2 runs)"]' in text
    assert "classDef" not in to_mermaid(graph)


def test_step_diagrams_colour_statuses_like_graph_diagrams() -> None:
    step = SimpleNamespace(
        key="a",
        kind="do",
        function="f",
        status="scheduled",
        created_at=datetime.now(UTC),
        reached_after=None,
    )
    step_lines = steps_mermaid([step]).splitlines()  # type: ignore[list-item]
    graph_lines = to_mermaid(ONBOARD, [NodeState("create", "create", "running")]).splitlines()
    class_defs = [line for line in graph_lines if line.startswith("    classDef ")]
    assert class_defs == [line for line in step_lines if line.startswith("    classDef ")]
    assert any(line.startswith("    classDef scheduled ") for line in class_defs)
    assert "    class s0_a scheduled" in step_lines


def test_step_diagrams_follow_what_each_step_was_reached_after() -> None:
    at = datetime.now(UTC)  # every step at one instant: times would say "side by side"

    def step(key: str, after: list[str], kind: str = "do") -> SimpleNamespace:
        return SimpleNamespace(
            key=key, kind=kind, function="f", status="succeeded", created_at=at, reached_after=after
        )

    steps = [
        step("a", []),
        step("b", ["a"]),
        step("c", ["a"]),
        step("__now", ["b", "c"], kind="value"),
        step("d", ["__now"]),
    ]
    lines = steps_mermaid(steps).splitlines()  # type: ignore[arg-type]
    edges = {line.strip() for line in lines if "-->" in line}
    assert edges == {"s0_a --> s1_b", "s0_a --> s2_c", "s1_b --> s4_d", "s2_c --> s4_d"}
