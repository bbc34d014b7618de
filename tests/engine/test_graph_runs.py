"""Graph runs end to end: every shape runs inline and through the queue, with functions
run in the pass and on the step queue, and must record the same steps every way."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import plait
from plait.graph import GraphValidationError
from support.counter import Counter
from support.paths import ROOT

#: (functions on the step queue, run started inline)
Mode = tuple[bool, bool]
ALL_MODES: list[Mode] = [(False, True), (False, False), (True, True), (True, False)]
#: graphs whose functions use ctx.branch / ctx.set_state run in every mode too
IN_PASS_FUNCTIONS: list[Mode] = ALL_MODES

Build = Callable[[Counter, bool], plait.App]


@dataclasses.dataclass
class Result:
    run: plait.Run
    steps: list[plait.Step]
    counts: dict[str, int]

    @property
    def recorded(self) -> list[tuple[str, str, str, int]]:
        return sorted((s.key, s.kind, str(s.status), s.attempts) for s in self.steps)

    @property
    def keys(self) -> list[str]:
        return [s.key for s in self.steps]

    def step(self, key: str) -> plait.Step:
        return next(s for s in self.steps if s.key == key)


async def run_modes(
    engine_factory: Any,
    build: Build,
    name: str,
    data: Any = None,
    *,
    modes: list[Mode] = ALL_MODES,
) -> dict[Mode, Result]:
    """Run ``name`` once per mode, each on an app built for that mode; how many times
    each function body ran is counted per run."""
    results: dict[Mode, Result] = {}
    for queued in (False, True):
        wanted = [m for m in modes if m[0] == queued]
        if not wanted:
            continue
        counter = Counter()
        app = build(counter, queued)
        async with engine_factory(app) as engine:
            for mode in wanted:
                counter.counts.clear()
                run_id = await engine.start(name, data, inline=mode[1])
                run = await engine.wait(run_id, timeout=20)
                steps = await engine.get_steps(run_id)
                results[mode] = Result(run, steps, dict(counter.counts))
    return results


def same_everywhere(results: dict[Mode, Result]) -> Result:
    """The one result all modes agree on: steps, attempts, statuses, outputs, counts."""
    first_mode, first = next(iter(results.items()))
    for mode, result in results.items():
        assert result.recorded == first.recorded, f"{mode} recorded other steps than {first_mode}"
        assert result.counts == first.counts, f"{mode} ran other bodies than {first_mode}"
        assert result.run.status == first.run.status, mode
        assert result.run.output == first.run.output, mode
    return first


def echo(app: plait.App, counter: Counter, queued: bool, *names: str, **options: Any) -> None:
    """Register functions that count their calls and return ``{"fn": name, "in": data}``."""
    for name in names:

        def body(data: Any, _name: str = name) -> dict[str, Any]:
            counter.hit(_name, data)
            return {"fn": _name, "in": data}

        app.function(name=name, queued=queued, **options)(body)


# -- shapes --------------------------------------------------------------------------------


async def test_linear(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fa", "fb", "fc")
        app.graph(
            "line",
            {
                "nodes": {
                    "a": {
                        "function": "fa",
                        "input": {"x": {"$ref": "trigger", "path": "x"}},
                        "next": "b",
                    },
                    "b": {"function": "fb", "input": {"$ref": "a", "path": "in"}, "next": "c"},
                    "c": {"function": "fc", "input": {"from_b": {"$ref": "b", "path": "in.x"}}},
                },
                "output": {"c": {"$ref": "c"}},
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "line", {"x": 7}))
    assert result.run.status == "completed"
    assert result.keys == ["a", "b", "c"]
    assert result.run.output == {"c": {"fn": "fc", "in": {"from_b": 7}}}
    assert result.counts == {"fa": 1, "fb": 1, "fc": 1}
    assert all(s.kind == "node" and s.attempts == 1 for s in result.steps)
    assert [s.function for s in result.steps] == ["fa", "fb", "fc"]


async def test_parallel_fan_out_and_join(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        finished: set[str] = set()
        echo(app, counter, queued, "start")

        for name in ("left", "right"):

            def side(data: Any, _name: str = name) -> str:
                counter.hit(_name)
                finished.add(_name)
                return _name

            app.function(name=name, queued=queued)(side)

        @app.function(queued=queued)
        def join(data: Any) -> list[str]:
            counter.hit("join")
            return sorted(finished)  # what had finished when the join started

        app.graph(
            "fan",
            {
                "nodes": {
                    "a": {"function": "start", "next": ["b", "c"]},
                    "b": {"function": "left", "next": "d"},
                    "c": {"function": "right", "next": "d"},
                    "d": {"function": "join", "input": {"l": {"$ref": "b"}}},
                }
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "fan", {}))
    assert result.run.status == "completed"
    assert sorted(result.keys) == ["a", "b", "c", "d"]
    assert result.run.output == ["left", "right"]  # the join saw both sides done
    assert result.counts == {"start": 1, "left": 1, "right": 1, "join": 1}


async def test_branch_whose_untaken_side_has_nodes(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fb", "fc", "fd", "fe")

        @app.function(queued=queued)
        def choose(data: dict, ctx: plait.StepContext) -> str:
            counter.hit("choose")
            ctx.branch(data["side"])
            return data["side"]

        app.graph(
            "fork",
            {
                "nodes": {
                    "a": {"function": "choose", "next": {"left": "b", "right": ["c", "d"]}},
                    "b": {"function": "fb"},
                    "c": {"function": "fc", "next": "e"},
                    "d": {"function": "fd"},
                    "e": {"function": "fe"},
                }
            },
        )
        return app

    left = same_everywhere(
        await run_modes(engine_factory, build, "fork", {"side": "left"}, modes=IN_PASS_FUNCTIONS)
    )
    assert left.run.status == "completed"
    assert left.keys == ["a", "b"]
    assert left.counts == {"choose": 1, "fb": 1}
    right = same_everywhere(
        await run_modes(engine_factory, build, "fork", {"side": "right"}, modes=IN_PASS_FUNCTIONS)
    )
    assert right.run.status == "completed"
    assert sorted(right.keys) == ["a", "c", "d", "e"]
    # no case matches and there is no default: nothing follows, the run still completes
    none = same_everywhere(
        await run_modes(engine_factory, build, "fork", {"side": "up"}, modes=IN_PASS_FUNCTIONS)
    )
    assert none.run.status == "completed" and none.keys == ["a"] and none.run.output == "up"


async def test_branch_on_an_output_value_in_every_mode(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fyes", "fno", "fafter")

        @app.function(queued=queued)
        def check(data: dict) -> dict:
            counter.hit("check")
            return {"ok": data["n"] > 2}

        app.graph(
            "value_fork",
            {
                "nodes": {
                    "check": {
                        "function": "check",
                        "next": {"$branch": "ok", "cases": {"true": "yes", "false": "no"}},
                    },
                    "yes": {"function": "fyes", "next": "after"},
                    "no": {"function": "fno", "next": "after"},
                    "after": {"function": "fafter", "input": "done"},
                }
            },
        )
        return app

    high = same_everywhere(await run_modes(engine_factory, build, "value_fork", {"n": 5}))
    assert high.keys == ["check", "yes", "after"] and high.run.status == "completed"
    low = same_everywhere(await run_modes(engine_factory, build, "value_fork", {"n": 1}))
    assert low.keys == ["check", "no", "after"]
    assert low.counts == {"check": 1, "fno": 1, "fafter": 1}


async def test_join_after_a_branch_waits_only_for_the_taken_side(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fb", "fc", "fd")

        @app.function(queued=queued)
        def route(data: dict) -> dict:
            counter.hit("route")
            return data

        app.graph(
            "rejoin",
            {
                "nodes": {
                    "a": {
                        "function": "route",
                        "next": {"$branch": "way", "cases": {"x": "b", "y": "c"}},
                    },
                    "b": {"function": "fb", "next": "d"},
                    "c": {"function": "fc", "next": "d"},
                    "d": {
                        "function": "fd",
                        "input": {
                            "b": {"$ref": "b", "path": "fn", "default": None},
                            "c": {"$ref": "c", "path": "fn", "default": None},
                        },
                    },
                }
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "rejoin", {"way": "x"}))
    assert result.run.status == "completed"
    assert result.keys == ["a", "b", "d"]
    assert result.run.output == {"fn": "fd", "in": {"b": "fb", "c": None}}
    assert result.counts == {"route": 1, "fb": 1, "fd": 1}


async def test_ref_to_a_node_that_did_not_run_fails_the_run_clearly(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "route", "fb", "fc", "fd")
        app.graph(
            "bad_ref",
            {
                "nodes": {
                    "a": {
                        "function": "route",
                        "next": {"$branch": "in.way", "cases": {"x": "b", "y": "c"}},
                    },
                    "b": {"function": "fb", "next": "d"},
                    "c": {"function": "fc", "next": "d"},
                    "d": {"function": "fd", "input": {"c": {"$ref": "c"}}},
                }
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "bad_ref", {"way": "x"}))
    assert result.run.status == "failed"
    error = result.run.error
    assert error["type"] == "GraphValueError"
    assert "'d'" in error["message"] and "'c'" in error["message"]
    assert error["node"] == "d" and error["missing"] == "c"
    assert result.counts == {"route": 1, "fb": 1}
    assert "d" not in result.keys


async def test_diamond_join_starts_once_with_two_engines_working(engine_factory) -> None:
    """Two engines with worker loops on one database race for every pass and every
    queued step of many diamond runs; each join still starts exactly once."""
    counter = Counter()

    def build() -> plait.App:
        app = plait.App()
        echo(app, counter, True, "fa", "fb", "fc", "fd")
        app.graph(
            "diamond",
            {
                "nodes": {
                    "a": {"function": "fa", "next": ["b", "c"]},
                    "b": {"function": "fb", "next": "d"},
                    "c": {"function": "fc", "next": "d"},
                    "d": {"function": "fd", "input": [{"$ref": "b"}, {"$ref": "c"}]},
                }
            },
        )
        return app

    runs = 20
    async with engine_factory(build()) as one, engine_factory(build()) as two:
        ids = [await (one, two)[n % 2].start("diamond", n) for n in range(runs)]
        for run_id in ids:
            run = await one.wait(run_id, timeout=30)
            assert run.status == "completed"
            steps = await one.get_steps(run_id)
            assert sorted((s.key, s.attempts) for s in steps) == [
                ("a", 1),
                ("b", 1),
                ("c", 1),
                ("d", 1),
            ]
    assert counter.counts == {"fa": runs, "fb": runs, "fc": runs, "fd": runs}


# -- failures ------------------------------------------------------------------------------


def _on_error_app(counter: Counter, queued: bool) -> plait.App:
    app = plait.App()
    echo(app, counter, queued, "fa", "fafter")

    @app.function(queued=queued, retries=0)
    def risky(data: dict) -> str:
        counter.hit("risky")
        if data["fail"]:
            raise RuntimeError("risky broke")
        return "fine"

    @app.function(queued=queued)
    def handle(failure: dict) -> dict:
        counter.hit("handle", failure)
        return {"handled": failure["error"]["message"], "input": failure["input"]}

    app.graph(
        "guarded",
        {
            "nodes": {
                "a": {"function": "fa", "next": "b"},
                "b": {
                    "function": "risky",
                    "input": {"fail": {"$ref": "trigger", "path": "fail"}},
                    "on_error": "h",
                },
                "h": {"function": "handle", "next": "after"},
                "after": {"function": "fafter", "input": {"$ref": "h", "path": "handled"}},
            }
        },
    )
    return app


async def test_on_error_not_taken_never_runs_the_handler(engine_factory) -> None:
    result = same_everywhere(
        await run_modes(engine_factory, _on_error_app, "guarded", {"fail": False})
    )
    assert result.run.status == "completed"
    assert result.keys == ["a", "b"]
    assert result.counts == {"fa": 1, "risky": 1}  # not at start, not ever
    assert result.run.output == "fine"


async def test_on_error_taken_continues_along_the_handler(engine_factory) -> None:
    result = same_everywhere(
        await run_modes(engine_factory, _on_error_app, "guarded", {"fail": True})
    )
    assert result.run.status == "completed"
    assert result.keys == ["a", "b", "h", "after"]
    assert result.step("b").status == "failed"
    handler = result.step("h")
    assert handler.input["input"] == {"fail": True}
    assert "risky broke" in handler.input["error"]["message"]
    assert result.run.output == {"fn": "fafter", "in": "risky broke"}
    assert result.counts == {"fa": 1, "risky": 1, "handle": 1, "fafter": 1}


async def test_a_failed_node_without_handler_fails_the_run(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fnever")

        @app.function(queued=queued)
        def broken(data: Any) -> None:
            counter.hit("broken")
            raise ValueError("no such user")

        app.graph(
            "doomed",
            {
                "nodes": {
                    "a": {"function": "broken", "retries": 0, "next": "c"},
                    "c": {"function": "fnever"},
                }
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "doomed", {}))
    assert result.run.status == "failed"
    error = result.run.error
    assert error["code"] == "GRAPH_NODE_FAILED" and error["node"] == "a"
    assert "'a'" in error["message"] and "no such user" in error["message"]
    assert error["cause"]["type"] == "ValueError"
    assert result.counts == {"broken": 1}
    assert result.keys == ["a"]


async def test_node_retries_and_timeout(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fdone")

        @app.function(queued=queued, retries=0)
        def flaky(data: Any, ctx: plait.StepContext) -> int:
            counter.hit("flaky")
            if ctx.attempt < 3:
                raise ConnectionError(f"attempt {ctx.attempt} timed out")
            return ctx.attempt

        @app.function(queued=queued)
        async def hangs(data: Any) -> None:
            counter.hit("hangs")
            await asyncio.Event().wait()  # never set: only the timeout ends it

        app.graph(
            "stubborn",
            {
                "nodes": {
                    # the node's retries win over the function's retries=0
                    "a": {"function": "flaky", "retries": 2, "retry_delay": "20ms", "next": "b"},
                    "b": {
                        "function": "hangs",
                        "timeout": "100ms",
                        "retries": 1,
                        "retry_delay": 0,
                        "on_error": "done",
                    },
                    "done": {"function": "fdone"},
                }
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "stubborn", {}))
    assert result.run.status == "completed"
    assert result.step("a").attempts == 3 and result.step("a").retries == 2
    assert result.step("a").output == 3
    timed_out = result.step("b")
    assert timed_out.status == "failed" and timed_out.attempts == 2
    assert timed_out.error["code"] == "STEP_TIMEOUT"
    assert result.counts == {"flaky": 3, "hangs": 2, "fdone": 1}
    # a handler gets the error and the failed node's input, whatever its own input says
    handled = result.run.output["in"]
    assert handled["error"]["code"] == "STEP_TIMEOUT" and handled["input"] == {}


# -- for_each ------------------------------------------------------------------------------


def _for_each_app(counter: Counter, queued: bool) -> plait.App:
    app = plait.App()
    active = {"now": 0, "max": 0}
    lock = threading.Lock()

    @app.function(queued=queued)
    def double(item: dict) -> int:
        counter.hit("double", item["n"])
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        try:
            return item["n"] * 2
        finally:
            with lock:
                active["now"] -= 1

    @app.function(queued=queued)
    def total(data: dict) -> dict:
        counter.hit("total")
        return {"sum": sum(data["values"]), "at_once": active["max"]}

    for mode in ("parallel", "sequential"):
        app.graph(
            f"each_{mode}",
            {
                "nodes": {
                    "items": {
                        "function": "double",
                        "for_each": {"$ref": "trigger", "path": "numbers"},
                        "mode": mode,
                        "input": {
                            "n": {"$ref": "$item"},
                            "run": {"$ref": "trigger", "path": "tag"},
                        },
                        "next": "total",
                    },
                    "total": {"function": "total", "input": {"values": {"$ref": "items"}}},
                },
                "output": {"items": {"$ref": "items"}, "total": {"$ref": "total", "path": "sum"}},
            },
        )
    return app


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
@pytest.mark.parametrize("count", [0, 1, 50])
async def test_for_each(engine_factory, mode: str, count: int) -> None:
    numbers = list(range(count))
    results = await run_modes(
        engine_factory, _for_each_app, f"each_{mode}", {"numbers": numbers, "tag": "t"}
    )
    result = same_everywhere(results)
    assert result.run.status == "completed"
    assert result.run.output == {"items": [n * 2 for n in numbers], "total": sum(numbers) * 2}
    items = [f"items[{i}]" for i in range(count)]
    assert sorted(result.keys) == sorted(["items", "total", *items])
    assert result.step("items").kind == "node" and result.step("items").input == numbers
    assert all(result.step(k).kind == "item" for k in items)
    assert all(result.step(k).input == {"n": i, "run": "t"} for i, k in enumerate(items))
    assert result.counts == ({"double": count} if count else {}) | {"total": 1}
    if mode == "sequential":
        for r in results.values():
            order = [s.key for s in r.steps if s.kind == "item"]
            assert order == items  # created one after the other, in item order
            assert r.step("total").output["at_once"] <= 1


async def test_for_each_item_failure_fails_the_node(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()

        @app.function(queued=queued, retries=0)
        def picky(n: int) -> int:
            counter.hit("picky", n)
            if n == 2:
                raise ValueError("two is not allowed")
            return n

        app.graph(
            "picky_each",
            {
                "nodes": {
                    "each": {
                        "function": "picky",
                        "for_each": {"$ref": "trigger"},
                        "mode": "sequential",
                    }
                }
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "picky_each", [1, 2, 3]))
    assert result.run.status == "failed"
    assert result.run.error["code"] == "GRAPH_NODE_FAILED"
    assert "item 1 of node 'each' failed: two is not allowed" in result.run.error["message"]
    assert sorted(result.keys) == ["each", "each[0]", "each[1]"]  # sequential: stops there
    assert result.counts == {"picky": 2}


# -- state, output, loops ------------------------------------------------------------------


async def test_state_written_by_twenty_parallel_nodes(engine_factory) -> None:
    width = 20

    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fstart")

        @app.function(queued=queued)
        def mark(data: dict, ctx: plait.StepContext) -> str:
            counter.hit("mark")
            ctx.set_state(f"seen_{data['i']}", data["i"])
            return ctx.node_id or ""

        @app.function(queued=queued)
        def collect(data: dict, ctx: plait.StepContext) -> dict:
            counter.hit("collect")
            return {"input": data["state"], "ctx": ctx.get_state()}

        nodes: dict[str, Any] = {"start": {"function": "fstart", "next": []}}
        for i in range(width):
            nodes["start"]["next"].append(f"w{i}")
            nodes[f"w{i}"] = {"function": "mark", "input": {"i": i}, "next": "collect"}
        nodes["collect"] = {"function": "collect", "input": {"state": {"$ref": "$state"}}}
        app.graph("wide", {"nodes": nodes, "output": {"$ref": "collect"}})
        return app

    result = same_everywhere(
        await run_modes(engine_factory, build, "wide", {}, modes=IN_PASS_FUNCTIONS)
    )
    assert result.run.status == "completed"
    state = result.run.output["input"]
    assert state == {f"seen_{i}": i for i in range(width)}
    assert result.run.output["ctx"] == state  # ctx.get_state() sees the same
    assert all(result.step(f"w{i}").output == f"w{i}" for i in range(width))  # ctx.node_id
    assert result.counts == {"fstart": 1, "mark": width, "collect": 1}


async def test_queued_functions_branch_and_state(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fyes", "fno")

        @app.function(queued=queued)
        def decide(data: dict, ctx: plait.StepContext) -> None:
            counter.hit("decide")
            ctx.set_state("decided_by", ctx.node_id)
            ctx.branch("yes")

        app.graph(
            "decided",
            {
                "nodes": {
                    "d": {"function": "decide", "next": {"yes": "y", "no": "n"}},
                    "y": {"function": "fyes", "input": {"$ref": "$state"}},
                    "n": {"function": "fno"},
                }
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "decided", {}))
    assert result.keys == ["d", "y"]
    assert result.run.output == {"fn": "fyes", "in": {"decided_by": "d"}}


async def test_output_mapping_and_default_output(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fa", "fb", "fc")
        nodes = {
            "a": {"function": "fa", "input": {"email": "ada@example.com"}, "next": ["b", "c"]},
            "b": {"function": "fb", "input": 1},
            "c": {"function": "fc", "input": 2},
        }
        app.graph(
            "mapped",
            {
                "nodes": nodes,
                "output": {
                    "email": {"$ref": "a", "path": "in.email"},
                    "greeting": {"$template": "Hi ${trigger.name}, b said ${b.in}"},
                    "both": [{"$ref": "b", "path": "fn"}, {"$ref": "c", "path": "fn"}],
                    "literal": 42,
                },
            },
        )
        app.graph("unmapped", {"nodes": nodes})
        app.graph("single_end", {"nodes": {"a": {**nodes["a"], "next": "b"}, "b": nodes["b"]}})
        return app

    mapped = same_everywhere(await run_modes(engine_factory, build, "mapped", {"name": "Ada"}))
    assert mapped.run.output == {
        "email": "ada@example.com",
        "greeting": "Hi Ada, b said 1",
        "both": ["fb", "fc"],
        "literal": 42,
    }
    unmapped = same_everywhere(await run_modes(engine_factory, build, "unmapped", {}))
    # without a mapping: the outputs of the nodes that ended the run, by node
    assert unmapped.run.output == {"b": {"fn": "fb", "in": 1}, "c": {"fn": "fc", "in": 2}}
    single = same_everywhere(await run_modes(engine_factory, build, "single_end", {}))
    assert single.run.output == {"fn": "fb", "in": 1}


async def test_a_cycle_visits_a_node_again(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "ffinish")

        @app.function(queued=queued)
        def inc(data: dict) -> dict:
            counter.hit("inc", data["n"])
            return {"n": data["n"] + 1}

        @app.function(queued=queued)
        def check(data: dict) -> dict:
            counter.hit("check")
            return {"n": data["n"], "more": data["n"] < data["limit"]}

        app.graph(
            "loop",
            {
                "nodes": {
                    "inc": {
                        "function": "inc",
                        "input": {"n": {"$ref": "check", "path": "n", "default": 0}},
                        "next": "check",
                    },
                    "check": {
                        "function": "check",
                        "input": {
                            "n": {"$ref": "inc", "path": "n"},
                            "limit": {"$ref": "trigger", "path": "limit"},
                        },
                        "next": {"$branch": "more", "cases": {"true": "inc", "false": "finish"}},
                    },
                    "finish": {"function": "ffinish", "input": {"$ref": "check", "path": "n"}},
                },
                "entry": ["inc"],
            },
        )
        return app

    result = same_everywhere(await run_modes(engine_factory, build, "loop", {"limit": 3}))
    assert result.run.status == "completed"
    assert result.keys == ["inc", "check", "inc#1", "check#1", "inc#2", "check#2", "finish"]
    assert result.run.output == {"fn": "ffinish", "in": 3}
    assert result.counts == {"inc": 3, "check": 3, "ffinish": 1}
    assert result.step("inc#1").input == {"n": 1}


# -- children ------------------------------------------------------------------------------


async def test_a_node_calls_a_child_workflow_and_a_child_graph(engine_factory) -> None:
    def build(counter: Counter, queued: bool) -> plait.App:
        app = plait.App()
        echo(app, counter, queued, "fa", "fleaf")

        @app.workflow
        async def child_flow(wf: plait.Workflow, data: dict) -> dict:
            leaf = await wf.do("leaf", "fleaf", data)
            return {"workflow": leaf}

        app.graph("child_graph", {"nodes": {"only": {"function": "fleaf", "input": "g"}}})
        app.graph(
            "parent",
            {
                "nodes": {
                    "a": {"function": "fa", "input": {"k": 1}, "next": ["w", "g"]},
                    "w": {"function": "child_flow", "input": {"$ref": "a", "path": "in"}},
                    "g": {"function": "child_graph"},
                },
                "output": {"w": {"$ref": "w"}, "g": {"$ref": "g"}},
            },
        )
        return app

    results = await run_modes(engine_factory, build, "parent", {})
    result = same_everywhere(results)
    assert result.run.status == "completed"
    assert result.run.output == {
        "w": {"workflow": {"fn": "fleaf", "in": {"k": 1}}},
        "g": {"fn": "fleaf", "in": "g"},
    }
    assert result.counts == {"fa": 1, "fleaf": 2}
    for r in results.values():
        assert r.step("w").child_run_id and r.step("g").child_run_id
        assert r.step("w").kind == "node" and r.step("w").function == "child_flow"


# -- starting ------------------------------------------------------------------------------


async def test_start_node(engine_factory) -> None:
    counter = Counter()
    app = plait.App()
    echo(app, counter, False, "f1", "f2", "fb")
    app.graph(
        "two_doors",
        {
            "nodes": {
                "front": {"function": "f1", "next": "hall"},
                "back": {"function": "f2", "next": "hall"},
                "hall": {"function": "fb", "input": "in"},
            }
        },
    )
    async with engine_factory(app) as engine:
        with pytest.raises(GraphValidationError, match="not an entry node") as info:
            await engine.start("two_doors", {}, start_node="hall")
        assert "'front'" in str(info.value) and "'back'" in str(info.value)
        with pytest.raises(GraphValidationError, match="not a node"):
            await engine.start("two_doors", {}, start_node="attic")
        assert await engine.list_runs() == []

        for inline in (True, False):
            run_id = await engine.start("two_doors", {}, start_node="back", inline=inline)
            run = await engine.wait(run_id, timeout=20)
            assert run.status == "completed"
            assert [s.key for s in await engine.get_steps(run_id)] == ["back", "hall"]
        assert counter.counts == {"f2": 2, "fb": 2}


async def test_graph_registered_at_run_time(engine_factory) -> None:
    counter = Counter()
    app = plait.App()
    echo(app, counter, False, "fa", "fb", "fc")
    v1 = {"nodes": {"a": {"function": "fa", "next": "b"}, "b": {"function": "late"}}}
    v2 = {"nodes": {"a": {"function": "fa", "next": "c"}, "c": {"function": "fc"}}}
    async with engine_factory(app) as engine:
        draft = await engine.register_graph("runtime", v1, status="draft")
        with pytest.raises(plait.WorkflowNotFoundError):
            await engine.start("runtime", {})
        assert await engine.register_graph("runtime", v1, status="active") == draft
        in_flight = {}
        for inline in (True, False):
            run_id = await engine.start("runtime", {}, inline=inline)
            run = await engine.wait(run_id, timeout=20)
            # "late" is not deployed yet: the run waits for it on v1
            assert run.status == "suspended" and run.error["code"] == "FUNCTION_NOT_FOUND"
            assert run.version == draft
            in_flight[inline] = run_id
        changed = await engine.register_graph("runtime", v2, status="active")
        assert changed != draft
        fresh = await engine.start("runtime", {})
        assert (await engine.wait(fresh, timeout=20)).status == "completed"
        assert [s.key for s in await engine.get_steps(fresh)] == ["a", "c"]

    # another process on the same database: no graph in its app, "late" deployed now
    counter2 = Counter()
    app2 = plait.App()
    echo(app2, counter2, False, "fa", "fb", "fc", "late")
    async with engine_factory(app2) as engine:
        for run_id in in_flight.values():
            await engine.resume(run_id)
            run = await engine.wait(run_id, timeout=20)
            assert run.status == "completed" and run.version == draft
            assert [s.key for s in await engine.get_steps(run_id)] == ["a", "b"]
        assert counter2.counts == {"late": 2}
        started_elsewhere = await engine.start("runtime", {}, inline=True)
        run = await engine.wait(started_elsewhere, timeout=20)
        assert run.status == "completed" and run.version == changed


async def test_missing_function_suspends_then_resume_completes(engine_factory) -> None:
    counter = Counter()
    app = plait.App()
    echo(app, counter, False, "fa")
    app.graph(
        "needs_late",
        {
            "nodes": {
                "a": {"function": "fa", "next": "b"},
                "b": {"function": "late", "input": {"$ref": "a", "path": "fn"}},
            }
        },
    )
    async with engine_factory(app) as engine:
        run_ids = [await engine.start("needs_late", {}, inline=inline) for inline in (True, False)]
        for run_id in run_ids:
            run = await engine.wait(run_id, timeout=20)
            assert run.status == "suspended"
            assert run.error["code"] == "FUNCTION_NOT_FOUND"
            assert "'late'" in run.error["message"] and "'b'" in run.error["message"]
            step = {s.key: s for s in await engine.get_steps(run_id)}["b"]
            assert step.status == "pending" and step.function == "late"

        @app.function(name="late")
        def late(data: str) -> str:
            counter.hit("late")
            return data.upper()

        for run_id in run_ids:
            await engine.resume(run_id)
            run = await engine.wait(run_id, timeout=20)
            assert run.status == "completed" and run.output == "FA"
        assert counter.counts == {"fa": 2, "late": 2}


def test_cli_prints_the_mermaid_of_a_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from plait.cli import cli

    monkeypatch.chdir(ROOT)
    database = f"sqlite:///{tmp_path / 'cli.db'}"
    result = CliRunner().invoke(
        cli, ["graph", "examples.onboarding:app", "onboard", "--database", database]
    )
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.startswith("graph TD")
    assert 'n_create(["create<br/>create_user"])' in text  # the entry node, as a stadium
    assert "n_welcome -->|vip| n_gift" in text
    assert "n_welcome -.->|error| n_alert" in text
    bad = CliRunner().invoke(
        cli, ["graph", "examples.onboarding:app", "nothing", "--database", database]
    )
    assert bad.exit_code != 0


async def test_onboarding_example_runs(engine_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from examples.onboarding import app

    async with engine_factory(app) as engine:
        ada = await engine.run(
            "onboard",
            {"email": "ada@example.com", "name": "Ada", "vip": True, "tags": ["a", "b"]},
            timeout=20,
        )
        assert ada["gift"]["gift"] == "mug" and ada["alert"] is None
        assert ada["topics"] == [f"{ada['user']} follows a", f"{ada['user']} follows b"]
        bob = await engine.run("onboard", {"email": "nope", "name": "Bob", "tags": []}, timeout=20)
        assert bob["welcome"] is None and bob["alert"]["paged"] is True
