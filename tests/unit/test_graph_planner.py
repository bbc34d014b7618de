"""The graph planner: what starts, when a run completes or fails, joins, branches, loops."""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from plait.graph import (
    Graph,
    GraphValueError,
    NodeState,
    Plan,
    Start,
    for_each_items,
    graph_from_dict,
    key_ordinal,
    latest_outputs,
    node_input,
    node_states,
    plan,
    step_key,
)


def g(nodes: dict[str, Any], **extra: Any) -> Graph:
    return graph_from_dict("g", {"nodes": nodes, **extra})


class Run:
    """A tiny stand-in for the engine: records states the way it would."""

    def __init__(self, graph: Graph, entry: list[str] | None = None, trigger: Any = None):
        self.graph = graph
        self.entry = list(entry if entry is not None else graph.entry_nodes)
        self.trigger = trigger
        self.states: dict[str, NodeState] = {}
        self.order: list[str] = []

    def plan(self) -> Plan:
        return plan(self.graph, list(self.states.values()), self.entry, trigger=self.trigger)

    def step(self) -> Plan:
        """Plan, and record every start as pending (one orchestrator pass)."""
        result = self.plan()
        for start in result.start:
            assert start.key not in self.states, f"{start.key} started twice"
            self.states[start.key] = NodeState(
                start.key, start.node_id, "pending", from_key=start.from_key
            )
            self.order.append(start.key)
        return result

    def started(self, result: Plan) -> list[str]:
        return [s.key for s in result.start]

    def finish(self, key: str, output: Any = None, branch: str | None = None) -> None:
        self.states[key] = replace(
            self.states[key], status="succeeded", output=output, branch=branch
        )

    def fail(self, key: str, message: str = "boom") -> None:
        self.states[key] = replace(self.states[key], status="failed", error={"message": message})

    def set(self, key: str, status: str) -> None:
        self.states[key] = replace(self.states[key], status=status)

    def drive(
        self, behave: Callable[[str, str], tuple[str, Any, str | None]], limit: int = 100
    ) -> Plan:
        """Run to the end: every pass starts what the plan says, then completes the
        oldest pending step with ``behave(node_id, key) -> ("ok"|"fail", output, branch)``."""
        for _ in range(limit):
            result = self.step()
            if result.complete or result.failed:
                return result
            pending = [k for k in self.order if self.states[k].status == "pending"]
            assert pending, "stuck: nothing in flight and the plan is not complete"
            key = pending[0]
            outcome, output, branch = behave(self.states[key].node_id, key)
            if outcome == "ok":
                self.finish(key, output, branch)
            else:
                self.fail(key)
        raise AssertionError("did not finish")


def ok(output: Any = None, branch: str | None = None) -> tuple[str, Any, str | None]:
    return ("ok", output, branch)


def test_linear() -> None:
    run = Run(
        g({"a": {"function": "f", "next": "b"}, "b": {"function": "f", "next": "c"}, "c": "f"})
    )
    first = run.step()
    assert first.start == [Start("a", "a", None, "node")]
    assert not first.complete and first.failed is None
    assert run.step().start == []  # a is still pending: nothing new, not complete
    assert not run.plan().complete
    run.finish("a", 1)
    assert run.step().start == [Start("b", "b", "a", "node")]
    run.finish("b", 2)
    assert run.started(run.step()) == ["c"]
    run.finish("c", {"done": True})
    final = run.step()
    assert final.complete and final.start == [] and final.failed is None
    assert final.output == {"done": True}  # the only node that ended the run


def test_in_flight_statuses_block_completion() -> None:
    run = Run(g({"a": "f"}))
    run.step()
    for status in ("pending", "scheduled", "running"):
        run.set("a", status)
        result = run.plan()
        assert not result.complete and result.failed is None and result.start == []


def test_parallel_fan_out_then_join_waits_for_both() -> None:
    run = Run(
        g(
            {
                "a": {"function": "f", "next": ["b", "c"]},
                "b": {"function": "f", "next": "d"},
                "c": {"function": "f", "next": "d"},
                "d": "f",
            }
        )
    )
    run.step()
    run.finish("a")
    assert run.started(run.step()) == ["b", "c"]
    run.finish("b")
    assert run.step().start == []  # c is still running: d waits
    run.set("c", "running")
    assert run.step().start == []
    run.finish("c")
    assert run.step().start == [Start("d", "d", "b", "node")]
    run.finish("d", "D")
    final = run.step()
    assert final.complete and final.output == "D"


def test_nodes_start_as_soon_as_they_are_ready_no_waves() -> None:
    run = Run(
        g(
            {
                "a": {"function": "f", "next": ["fast", "slow"]},
                "fast": {"function": "f", "next": "after_fast"},
                "slow": "f",
                "after_fast": "f",
            }
        )
    )
    run.step()
    run.finish("a")
    run.step()
    run.finish("fast")
    run.set("slow", "running")
    assert run.started(run.step()) == ["after_fast"]


def test_diamond_join_fires_once() -> None:
    graph = g(
        {
            "top": {"function": "f", "next": ["left", "right"]},
            "left": {"function": "f", "next": "bottom"},
            "right": {"function": "f", "next": "bottom"},
            "bottom": "f",
        }
    )
    run = Run(graph)
    result = run.drive(lambda node, key: ok(node))
    assert result.complete
    assert run.order == ["top", "left", "right", "bottom"]
    assert run.states["bottom"].from_key == "left"
    # both predecessors done at once: still one start, and replanning adds nothing
    run2 = Run(graph)
    run2.step()
    run2.finish("top")
    run2.step()
    run2.finish("left")
    run2.finish("right")
    assert run2.plan().start == run2.plan().start == [Start("bottom", "bottom", "left", "node")]
    run2.step()
    assert run2.step().start == []


def test_branch_with_nodes_on_the_untaken_side_completes() -> None:
    graph = g(
        {
            "check": {"function": "f", "next": {"vip": "gift", "regular": ["mail", "log"]}},
            "gift": {"function": "f", "next": "thanks"},
            "mail": {"function": "f", "next": "thanks"},
            "log": "f",
            "thanks": "f",
        }
    )
    run = Run(graph)
    result = run.drive(lambda node, key: ok(node, "vip" if node == "check" else None))
    assert result.complete
    assert run.order == ["check", "gift", "thanks"]  # thanks did not wait for mail
    assert result.output == "thanks"


def test_branch_without_a_choice_follows_nothing_or_default() -> None:
    plain = Run(g({"a": {"function": "f", "next": {"x": "b"}}, "b": "f"}))
    result = plain.drive(lambda node, key: ok(node))
    assert result.complete and plain.order == ["a"] and result.output == "a"

    with_default = Run(
        g({"a": {"function": "f", "next": {"x": "b", "default": "c"}}, "b": "f", "c": "f"})
    )
    result = with_default.drive(lambda node, key: ok(node, "unknown-key"))
    assert result.complete and with_default.order == ["a", "c"]


def test_branch_on_an_output_value() -> None:
    graph = g(
        {
            "a": {
                "function": "f",
                "next": {"$branch": "tier", "cases": {"vip": "b", "true": "t"}, "default": "c"},
            },
            "b": "f",
            "c": "f",
            "t": "f",
        }
    )
    for output, expected in (({"tier": "vip"}, "b"), ({"tier": True}, "t"), ({}, "c")):
        run = Run(graph)
        run.drive(lambda node, key, output=output: ok(output if node == "a" else node))
        assert run.order == ["a", expected]


def test_a_join_waits_for_a_predecessor_on_an_undecided_branch() -> None:
    graph = g(
        {
            "start": {"function": "f", "next": ["a", "router"]},
            "router": {"function": "f", "next": {"x": "maybe", "y": []}},
            "a": {"function": "f", "next": "join"},
            "maybe": {"function": "f", "next": "join"},
            "join": "f",
        }
    )
    run = Run(graph)
    run.step()
    run.finish("start")
    run.step()
    run.finish("a")
    run.set("router", "running")
    assert run.step().start == []  # router may still choose x, which leads to maybe
    run.finish("router", branch="y")
    assert run.started(run.step()) == ["join"]  # maybe can no longer run


def test_on_error_handler_only_runs_on_failure_and_the_run_continues_along_it() -> None:
    graph = g(
        {
            "charge": {"function": "f", "next": "ship", "on_error": "refund"},
            "ship": {"function": "f", "next": "notify"},
            "refund": {"function": "f", "next": "notify"},
            "notify": "f",
        }
    )
    assert graph.entry_nodes == ("charge",)

    happy = Run(graph)
    result = happy.drive(lambda node, key: ok(node))
    assert result.complete and happy.order == ["charge", "ship", "notify"]

    sad = Run(graph)
    sad.step()
    sad.fail("charge")
    handler = sad.step()
    assert handler.start == [Start("refund", "refund", "charge", "on_error")]
    assert not handler.complete and handler.failed is None
    sad.finish("refund", "refunded")
    assert sad.step().start == [Start("notify", "notify", "refund", "node")]
    sad.finish("notify", "sent")
    final = sad.step()
    assert final.complete and final.failed is None and final.output == "sent"


def test_a_failure_without_on_error_fails_the_plan() -> None:
    run = Run(g({"a": {"function": "f", "next": ["b", "c"]}, "b": "f", "c": "f"}))
    run.step()
    run.finish("a")
    run.step()
    run.fail("b", "card declined")
    run.set("c", "running")
    result = run.step()
    assert result.failed == run.states["b"]
    assert result.failed.error == {"message": "card declined"}
    assert result.start == [] and not result.complete and result.output is None


def test_a_failing_handler_fails_the_plan() -> None:
    run = Run(g({"a": {"function": "f", "on_error": "h"}, "h": "f"}))
    run.step()
    run.fail("a")
    run.step()
    run.fail("h")
    assert run.plan().failed == run.states["h"]


def test_every_failure_gets_its_own_handler_instance() -> None:
    graph = g(
        {
            "s": {"function": "f", "next": ["a", "b"]},
            "a": {"function": "f", "on_error": "alert"},
            "b": {"function": "f", "on_error": "alert"},
            "alert": "f",
        }
    )
    run = Run(graph)
    run.step()
    run.finish("s")
    run.step()
    run.fail("a")
    run.fail("b")
    assert run.step().start == [
        Start("alert", "alert", "a", "on_error"),
        Start("alert", "alert#1", "b", "on_error"),
    ]
    assert run.step().start == []


def test_a_join_does_not_wait_behind_a_handled_failure() -> None:
    graph = g(
        {
            "s": {"function": "f", "next": ["a", "b"]},
            "a": {"function": "f", "next": "join"},
            "b": {"function": "f", "next": "join", "on_error": "log"},
            "log": "f",
            "join": "f",
        }
    )
    run = Run(graph)
    run.step()
    run.finish("s")
    run.step()
    run.finish("a")
    run.fail("b")
    assert run.started(run.step()) == ["log", "join"]  # definition order
    run.finish("join", "J")
    run.finish("log", "L")
    final = run.step()
    assert final.complete and final.output == {"log": "L", "join": "J"}


def test_the_cycle_loops_with_fresh_instances_and_a_from_key_chain() -> None:
    graph = g(
        {
            "begin": {"function": "f", "next": "attempt"},
            "attempt": {"function": "f", "next": {"retry": "retry", "done": "finish"}},
            "retry": {"function": "f", "next": "attempt"},
            "finish": "f",
        }
    )
    visits = {"attempt": 0}

    def behave(node: str, key: str) -> tuple[str, Any, str | None]:
        if node == "attempt":
            visits["attempt"] += 1
            return ok(visits["attempt"], "retry" if visits["attempt"] <= 2 else "done")
        return ok(key)

    run = Run(graph)
    result = run.drive(behave)
    assert result.complete
    assert run.order == ["begin", "attempt", "retry", "attempt#1", "retry#1", "attempt#2", "finish"]
    chain = {key: run.states[key].from_key for key in run.order}
    assert chain == {
        "begin": None,
        "attempt": "begin",
        "retry": "attempt",
        "attempt#1": "retry",
        "retry#1": "attempt#1",
        "attempt#2": "retry#1",
        "finish": "attempt#2",
    }
    assert result.output == "finish"
    # inputs read the latest instance
    assert latest_outputs(graph, list(run.states.values()))["attempt"] == 3


def test_a_back_edge_fires_once_per_firing() -> None:
    run = Run(
        g(
            {
                "s": {"function": "f", "next": "poll"},
                "poll": {"function": "f", "next": {"again": "poll"}},
            }
        )
    )
    run.step()
    run.finish("s")
    run.step()
    run.finish("poll", branch="again")
    assert run.step().start == [Start("poll", "poll#1", "poll", "node")]
    assert run.step().start == []  # already fired
    run.finish("poll#1", branch="again")
    assert run.step().start == [Start("poll", "poll#2", "poll#1", "node")]
    run.finish("poll#2")
    assert run.step().complete


def test_the_plan_does_not_depend_on_the_order_of_states() -> None:
    graph = g(
        {
            "s": {"function": "f", "next": ["a", "b", "c"]},
            "a": {"function": "f", "next": ["loop", "j"]},
            "b": {"function": "f", "next": ["loop", "j"]},
            "c": {"function": "f", "on_error": "h"},
            "loop": {"function": "f", "next": {"again": "a"}},
            "j": "f",
            "h": "f",
        }
    )
    states = [
        NodeState("s", "s", "succeeded"),
        NodeState("a", "a", "succeeded", from_key="s"),
        NodeState("b", "b", "succeeded", from_key="s"),
        NodeState("c", "c", "failed", from_key="s"),
    ]
    expected = plan(graph, states, ["s"])
    # b -> loop is a forward edge (first instance), a -> loop closes a cycle (a fresh
    # one); j waits while the loop may still lead back to a.
    assert expected.start == [
        Start("loop", "loop", "b", "node"),
        Start("loop", "loop#1", "a", "node"),
        Start("h", "h", "c", "on_error"),
    ]
    for seed in range(20):
        shuffled = states[:]
        random.Random(seed).shuffle(shuffled)
        assert plan(graph, shuffled, ["s"]) == expected


def test_start_node_skips_other_entries_and_completes() -> None:
    graph = g(
        {
            "web": {"function": "f", "next": "join"},
            "api": {"function": "f", "next": "join"},
            "join": "f",
        }
    )
    run = Run(graph, entry=["api"])
    result = run.drive(lambda node, key: ok(node))
    assert result.complete and run.order == ["api", "join"]


def test_all_entries_start_at_once() -> None:
    run = Run(g({"a": "f", "b": "f", "c": {"function": "f", "next": "d"}, "d": "f"}))
    assert run.started(run.step()) == ["a", "b", "c"]


def test_graph_output_is_resolved_at_completion() -> None:
    graph = g(
        {"create": {"function": "f", "next": "mail"}, "mail": "f"},
        output={"user": {"$ref": "create", "path": "id"}, "who": {"$ref": "trigger", "path": "n"}},
    )
    run = Run(graph, trigger={"n": "Ada"})
    result = run.drive(lambda node, key: ok({"id": 7} if node == "create" else None))
    assert result.output == {"user": 7, "who": "Ada"}


def test_output_referencing_an_untaken_branch_raises_unless_defaulted() -> None:
    nodes = {"a": {"function": "f", "next": {"x": "b"}}, "b": "f"}
    run = Run(g(nodes, output={"b": {"$ref": "b"}}))
    run.step()
    run.finish("a")
    with pytest.raises(GraphValueError, match="the graph output references node 'b'"):
        run.plan()
    run = Run(g(nodes, output={"b": {"$ref": "b", "default": "skipped"}}))
    result = run.drive(lambda node, key: ok(node))
    assert result.output == {"b": "skipped"}


def test_state_for_an_unknown_node_is_refused() -> None:
    graph = g({"a": "f"})
    with pytest.raises(ValueError, match="unknown node 'zz'"):
        plan(graph, [NodeState("zz", "zz", "succeeded")], ["a"])
    with pytest.raises(ValueError, match="entry node 'zz'"):
        plan(graph, [], ["zz"])


def test_for_each_node_is_one_node_to_the_planner() -> None:
    graph = g(
        {
            "list": {"function": "f", "next": "each"},
            "each": {
                "function": "f",
                "for_each": {"$ref": "list", "path": "items"},
                "mode": "sequential",
                "input": {"n": {"$ref": "$item"}, "user": {"$ref": "trigger", "path": "u"}},
                "next": "sum",
            },
            "sum": {"function": "f", "input": {"all": {"$ref": "each"}}},
        }
    )
    run = Run(graph, trigger={"u": "ada"})
    run.step()
    run.finish("list", {"items": [1, 2]})
    assert run.started(run.step()) == ["each"]
    states = list(run.states.values())
    items = for_each_items(graph, "each", states, run.trigger, {})
    assert items == [1, 2]
    assert [node_input(graph, "each", states, run.trigger, {}, item=i) for i in items] == [
        {"n": 1, "user": "ada"},
        {"n": 2, "user": "ada"},
    ]
    run.finish("each", [10, 20])
    assert run.started(run.step()) == ["sum"]
    assert node_input(graph, "sum", list(run.states.values()), run.trigger, {}) == {"all": [10, 20]}


def test_for_each_source_must_be_a_list() -> None:
    graph = g(
        {"a": {"function": "f", "next": "b"}, "b": {"function": "f", "for_each": {"$ref": "a"}}}
    )
    states = [NodeState("a", "a", "succeeded", output={"not": "a list"})]
    with pytest.raises(GraphValueError, match="for_each must give a list, got dict"):
        for_each_items(graph, "b", states, None, {})


def test_node_input_rules() -> None:
    graph = g(
        {
            "a": {"function": "f", "next": {"x": "b", "y": "c"}},
            "b": {"function": "f", "next": "d"},
            "c": {"function": "f", "next": "d"},
            "d": {
                "function": "f",
                "input": {
                    "from_b": {"$ref": "b", "path": "v"},
                    "count": {"$ref": "$state", "path": "count"},
                    "msg": {"$template": "${trigger.name}: ${b}"},
                },
            },
            "e": {"function": "f", "input": {"c": {"$ref": "c"}}},
        },
        entry=["a"],
    )
    states = [
        NodeState("a", "a", "succeeded", branch="x"),
        NodeState("b", "b", "succeeded", output={"v": 1}, from_key="a"),
    ]
    trigger = {"name": "Ada"}
    assert node_input(graph, "a", states, trigger, None) == trigger  # no input: the trigger
    assert node_input(graph, "d", states, trigger, {"count": 4}) == {
        "from_b": 1,
        "count": 4,
        "msg": 'Ada: {"v":1}',
    }
    with pytest.raises(GraphValueError) as info:
        node_input(graph, "e", states, trigger, None)
    assert "node 'e' references node 'c'" in str(info.value)
    assert (info.value.node, info.value.missing) == ("e", "c")
    failed = [*states, NodeState("c", "c", "failed")]
    with pytest.raises(GraphValueError, match="'c'"):
        node_input(graph, "e", failed, trigger, None)


def test_node_states_from_step_records() -> None:
    graph = g(
        {
            "a": {"function": "f", "next": "each"},
            "each": {"function": "f", "for_each": {"$ref": "a"}},
        }
    )

    class Status(enum.Enum):
        OK = "succeeded"

    steps = [
        SimpleNamespace(key="a", status=Status.OK, output=[1], error=None),
        SimpleNamespace(key="each[0]", status="succeeded", output=1, error=None),
        SimpleNamespace(key="each", status="running", output=None, error=None, from_key="a"),
        SimpleNamespace(key="a#2", status="failed", output=None, error={"m": 1}, branch="x"),
    ]
    assert node_states(steps, graph) == [
        NodeState("a", "a", "succeeded", output=[1]),
        NodeState("each", "each", "running", from_key="a"),
        NodeState("a#2", "a", "failed", error={"m": 1}, branch="x"),
    ]
    assert [s.node_id for s in node_states(steps)] == ["a", "each[0]", "each", "a"]


def test_step_keys() -> None:
    assert step_key("a", 0) == "a" and step_key("a", 2) == "a#2"
    assert key_ordinal("a") == 0 and key_ordinal("a#3") == 3


def test_enders_output_keeps_only_instances_that_did_not_go_on() -> None:
    graph = g(
        {
            "s": {"function": "f", "next": "poll"},
            "poll": {"function": "f", "next": {"again": "poll"}},
        }
    )
    visits = {"n": 0}

    def behave(node: str, key: str) -> tuple[str, Any, str | None]:
        if node == "poll":
            visits["n"] += 1
            return ok(visits["n"], "again" if visits["n"] < 3 else None)
        return ok(None)

    run = Run(graph)
    result = run.drive(behave)
    assert run.order == ["s", "poll", "poll#1", "poll#2"]
    assert result.output == 3


def random_graph(rng: random.Random, size: int) -> Graph:
    """A random DAG mixing lists, branch maps and on_error handlers."""
    ids = [f"n{i}" for i in range(size)]
    nodes: dict[str, Any] = {}
    for i, nid in enumerate(ids):
        later = ids[i + 1 :]
        node: dict[str, Any] = {"function": "f"}
        if later and rng.random() < 0.8:
            picks = rng.sample(later, k=min(len(later), rng.randint(1, 3)))
            if rng.random() < 0.4:
                node["next"] = {"x": picks[:1], "y": picks[1:]}
            else:
                node["next"] = picks
        if later and rng.random() < 0.3:
            node["on_error"] = rng.choice(later)
        nodes[nid] = node
    return graph_from_dict("random", {"nodes": nodes})


@pytest.mark.parametrize("seed", range(60))
def test_random_graphs_always_finish_and_respect_joins(seed: int) -> None:
    rng = random.Random(seed)
    graph = random_graph(rng, rng.randint(2, 12))
    run = Run(graph)
    for _ in range(200):
        states = list(run.states.values())
        result = run.plan()
        shuffled = states[:]
        rng.shuffle(shuffled)
        assert plan(graph, shuffled, run.entry) == result  # order of states is irrelevant
        for start in result.start:
            preds = graph.forward_predecessors(start.node_id)
            if start.kind == "node" and len(preds) > 1:
                in_flight = {s.node_id for s in states if s.status in ("pending", "running")}
                assert not in_flight & set(preds), (start, in_flight)
        run.step()
        if result.complete or result.failed:
            break
        pending = [k for k in run.order if run.states[k].status == "pending"]
        assert pending, "stuck"
        key = rng.choice(pending)
        if rng.random() < 0.15:
            run.fail(key)
        else:
            run.finish(key, key, rng.choice(["x", "y"]))
    else:
        raise AssertionError("did not finish")
    assert len(run.order) == len(set(run.order))
    if result.complete:
        for s in run.states.values():
            assert s.status == "succeeded" or graph.nodes[s.node_id].on_error
    else:
        assert result.failed is not None and not graph.nodes[result.failed.node_id].on_error
