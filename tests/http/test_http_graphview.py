"""The run drawings: step rows for code workflows, layers for graphs, and safe SVG."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.durations import format_duration
from plait.http import graphview
from plait.records import Run, RunStatus, Step, StepAttempt, StepStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def step(key: str, status: str = "succeeded", kind: str = "do", **extra: Any) -> Step:
    fields: dict[str, Any] = {
        "run_id": "r",
        "key": key,
        "name": key,
        "function": "fn",
        "status": StepStatus(status),
        "input": None,
        "output": None,
        "error": None,
        "attempts": 1,
        "retries": 0,
        "invocation_id": "i",
        "child_run_id": None,
        "created_at": T0,
        "updated_at": T0,
        "kind": kind,
    }
    fields.update(extra)
    return Step(**fields)


def attempt(key: str, start: float, end: float | None, status: str = "succeeded") -> StepAttempt:
    return StepAttempt("r", key, 1, status, None, None, at(start), None if end is None else at(end))


def run(kind: str = "workflow") -> Run:
    return Run("r", "wf", RunStatus.RUNNING, None, None, None, T0, T0, None, None, None, kind)


def test_overlapping_steps_share_a_row_and_sequential_ones_do_not() -> None:
    steps = [step("a"), step("b"), step("c"), step("d", status="running")]
    history = [
        attempt("a", 0, 10),
        attempt("b", 10, 30),  # starts when a ends: after it
        attempt("c", 12, 20),  # starts before b ends: beside it
        attempt("d", 30, None, "running"),
    ]
    nodes, edges = graphview.steps_view(steps, history)
    assert [(n.id, n.layer) for n in nodes] == [("a", 0), ("b", 1), ("c", 1), ("d", 2)]
    assert {(e.source, e.target) for e in edges} == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}
    assert nodes[3].state == "running"


def test_steps_without_attempts_use_their_own_times() -> None:
    steps = [
        step("nap", kind="sleep", attempts=0, function=None, created_at=at(0), updated_at=at(50)),
        step("__suspend:review", status="pending", kind="suspend", created_at=at(60)),
    ]
    nodes, _ = graphview.steps_view(steps, [])
    assert [(n.label, n.layer, n.state) for n in nodes] == [
        ("nap", 0, "succeeded"),
        ("suspend: review", 1, "waiting"),
    ]


def test_child_steps_link_to_the_child_run_and_others_to_their_row() -> None:
    nodes, _ = graphview.steps_view(
        [step("kid", kind="child", child_run_id="c/1"), step("fetch#1")], []
    )
    assert nodes[0].href == "./c%2F1"
    assert nodes[1].href == "#step-fetch%231"


def test_layout_centres_rows_and_orders_children_under_their_parents() -> None:
    nodes = [
        graphview.ViewNode("root", "root", "", "succeeded", layer=0),
        graphview.ViewNode("left", "left", "", "succeeded", layer=0),
        graphview.ViewNode("b", "b", "", "succeeded", layer=1),
        graphview.ViewNode("a", "a", "", "succeeded", layer=1),
    ]
    edges = [graphview.ViewEdge("left", "a"), graphview.ViewEdge("root", "b")]
    width, height = graphview.layout(nodes, edges)
    by_id = {n.id: n for n in nodes}
    # b hangs under root (first), a under left (second), whatever order they came in
    assert by_id["b"].x < by_id["a"].x
    assert by_id["root"].y == by_id["left"].y < by_id["a"].y
    assert width == 2 * graphview.PAD + 2 * graphview.NODE_W + graphview.GAP_X
    assert height == 2 * graphview.PAD + 2 * graphview.NODE_H + graphview.GAP_Y


def test_longest_path_layers() -> None:
    layers = graphview.longest_path_layers(
        ["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")]
    )
    assert layers == {"a": 0, "b": 1, "c": 2, "d": 3}


def test_svg_escapes_names_and_marks_states() -> None:
    nodes, edges = graphview.steps_view([step('<b>"x"&'), step("y", status="failed")], [])
    width, height = graphview.layout(nodes, edges)
    svg = graphview.render_svg(nodes, edges, width, height, "t")
    assert "<b>" not in svg
    assert "&lt;b&gt;&quot;x&quot;&amp;" in svg
    assert 'class="node n-failed"' in svg
    assert svg.count("<path d=") == len(edges) + 2  # edges plus the two arrowheads


def test_loop_edges_go_around_the_side() -> None:
    nodes = [
        graphview.ViewNode("poll", "poll", "", "succeeded", layer=0),
        graphview.ViewNode("wait", "wait", "", "running", layer=1),
    ]
    edges = [graphview.ViewEdge("poll", "wait"), graphview.ViewEdge("wait", "poll")]
    width, _ = graphview.layout(nodes, edges)
    assert width == 2 * graphview.PAD + graphview.NODE_W + graphview.LOOP_PAD
    svg = graphview.render_svg(nodes, edges, width, 200, "loop")
    assert svg.count('class="edge e-next taken"') == 2


def test_empty_run_draws_a_placeholder() -> None:
    drawn = graphview.draw_run(run(), [], [], None)
    assert drawn["kind"] == "steps"
    assert "no steps yet" in drawn["svg"]


def test_a_definition_that_cannot_be_drawn_falls_back_to_the_steps() -> None:
    drawn = graphview.draw_run(run("graph"), [step("a")], [], definition=object())
    assert drawn["kind"] == "steps"
    assert [n["id"] for n in drawn["nodes"]] == ["a"]


def test_graph_nodes_take_the_state_of_their_latest_instance() -> None:
    graph_mod = pytest.importorskip("plait.graph")
    graph = graph_mod.load_graph(
        "loop",
        {
            "nodes": {
                "check": {"function": "fn", "next": {"again": "check", "done": "finish"}},
                "finish": {"function": "fn", "for_each": {"$ref": "trigger"}},
                "spare": {"function": "fn"},
            },
            "entry": ["check", "spare"],
        },
    )
    steps = [
        step("check", kind="node"),
        step("check#1", status="failed", kind="node"),
        step("finish", kind="node"),
        step("finish[0]", kind="item"),
    ]
    nodes, edges = graphview.graph_view(graph, steps, [])
    states = {n.id: (n.state, n.layer) for n in nodes}
    assert states == {
        "check": ("failed", 0),
        "finish": ("succeeded", 1),
        "spare": ("not_reached", 0),
    }
    assert ("check", "check") in {(e.source, e.target) for e in edges}


def test_durations_read_like_the_dashboard_timeline() -> None:
    assert [format_duration(s) for s in (0.85, 4.24, 185, 7440)] == [
        "850 ms",
        "4.2 s",
        "3 m 5 s",
        "2 h 4 m",
    ]
    nodes, _ = graphview.steps_view([step("a", updated_at=at(4200))], [])
    assert nodes[0].detail == "fn · 4.2 s"


# -- code runs drawn from what each step was reached after ------------------------------------
def test_sequential_steps_are_drawn_one_below_the_other_even_when_their_times_overlap() -> None:
    # quick steps whose attempts overlap in time (a clock's granularity, a busy machine):
    # the timestamps would put them side by side, the record says one came after the other
    steps = [
        step("a", reached_after=[]),
        step("b", reached_after=["a"]),
        step("c", reached_after=["b"]),
    ]
    history = [attempt("a", 0, 5), attempt("b", 1, 6), attempt("c", 2, 7)]
    nodes, edges = graphview.steps_view(steps, history)
    assert [(n.id, n.layer) for n in nodes] == [("a", 0), ("b", 1), ("c", 2)]
    assert {(e.source, e.target) for e in edges} == {("a", "b"), ("b", "c")}


def test_gathered_steps_are_drawn_side_by_side_even_when_they_ran_one_after_another() -> None:
    steps = [
        step("price", reached_after=[]),
        step("reserve", reached_after=["price"]),
        step("fraud", reached_after=["price"]),
        step("record", reached_after=["reserve", "fraud"]),
        step("record:on_error", kind="on_error", reached_after=["record"]),
    ]
    # the gathered steps ran one after the other (a queue of one): still a gather
    history = [attempt("price", 0, 1), attempt("reserve", 2, 3), attempt("fraud", 4, 5)]
    nodes, edges = graphview.steps_view(steps, history)
    layers = {n.id: n.layer for n in nodes}
    assert layers == {"price": 0, "reserve": 1, "fraud": 1, "record": 2, "record:on_error": 3}
    pairs = {(e.source, e.target, e.kind) for e in edges}
    assert pairs == {
        ("price", "reserve", "next"),
        ("price", "fraud", "next"),
        ("reserve", "record", "next"),
        ("fraud", "record", "next"),
        ("record", "record:on_error", "on_error"),
    }


def test_two_gathers_in_a_row_meet_at_one_junction() -> None:
    first = [step(f"a{i}", reached_after=[]) for i in range(3)]
    second = [step(f"b{i}", reached_after=["a0", "a1", "a2"]) for i in range(3)]
    nodes, edges = graphview.steps_view(first + second, [])
    hubs = [n for n in nodes if n.state == graphview.JUNCTION]
    assert len(hubs) == 1 and len(edges) == 6  # 3 + 3, not 3 * 3
    layers = {n.id: n.layer for n in nodes}
    assert {layers[f"a{i}"] for i in range(3)} == {0}
    assert layers[hubs[0].id] == 1
    assert {layers[f"b{i}"] for i in range(3)} == {2}


def test_a_run_recorded_before_steps_kept_what_they_came_after_is_drawn_from_its_times() -> None:
    # one step without the record (NULL: written before the migration) is enough
    steps = [step("a", reached_after=None), step("b", reached_after=["a"]), step("c")]
    history = [attempt("a", 0, 10), attempt("b", 10, 30), attempt("c", 12, 20)]
    nodes, _ = graphview.steps_view(steps, history)
    assert [(n.id, n.layer) for n in nodes] == [("a", 0), ("b", 1), ("c", 1)]
