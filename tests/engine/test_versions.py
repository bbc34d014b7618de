"""Deploys that change a workflow while runs are in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import plait
from support.counter import Counter
from support.polling import eventually


def v1_app(counter: Counter) -> plait.App:
    app = plait.App("orders")

    @app.function
    def reserve(data: None) -> str:
        counter.hit("reserve")
        return "reserved"

    @app.function
    def charge(data: None) -> str:
        counter.hit("charge")
        return "charged"

    @app.workflow(version="1")
    async def order(wf: plait.Workflow, data: None) -> list[str]:
        a = await wf.do("reserve", reserve)
        await wf.suspend("review")
        b = await wf.do("charge", charge)
        return [a, b]

    return app


def _deployed_without_v1(counter: Counter) -> plait.App:
    """The app after a deploy that dropped version 1 of ``order`` (the test adds v2)."""
    app = v1_app(counter)
    del app.workflows["order"], app.workflow_versions["order"]
    return app


async def _suspended_run(engine_factory, counter: Counter) -> str:
    async with engine_factory(v1_app(counter)) as engine:
        run_id = await engine.start("order")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "suspended" and run.version == "1"
        return run_id


async def test_compatible_change_replays_on_new_code(engine_factory) -> None:
    counter = Counter()
    run_id = await _suspended_run(engine_factory, counter)
    app = _deployed_without_v1(counter)

    @app.workflow(version="2")
    async def order(wf: plait.Workflow, data: None) -> list[str]:
        a = await wf.do("reserve", "reserve")
        await wf.suspend("review")
        b = await wf.do("charge", "charge")
        c = await wf.do("receipt", lambda: "receipt sent")  # new step after the recorded ones
        return [a, b, c]

    async with engine_factory(app) as engine:
        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed", run.error
        assert run.output == ["reserved", "charged", "receipt sent"]
        assert run.version == "1"  # the run still says which version it started on
        assert counter["reserve"] == 1 and counter["charge"] == 1
        assert [r.id for r in await engine.list_runs(version="1")] == [run_id]
        assert await engine.list_runs(version="2") == []


async def test_divergent_change_stops_with_version_conflict(engine_factory) -> None:
    counter = Counter()
    run_id = await _suspended_run(engine_factory, counter)
    app = _deployed_without_v1(counter)

    @app.workflow(version="2")
    async def order(wf: plait.Workflow, data: None) -> list[str]:
        a = await wf.do("check fraud", lambda: "ok")  # inserted before the recorded steps
        b = await wf.do("reserve", "reserve")
        await wf.suspend("review")
        return [a, b]

    async with engine_factory(app) as engine:
        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "failed"
        assert run.error["code"] == "VERSION_CONFLICT"
        assert "'check fraud'" in run.error["message"] and "'reserve'" in run.error["message"]
        assert counter["reserve"] == 1
        keys = [s.key for s in await engine.get_steps(run_id)]
        assert "check fraud" not in keys


async def test_changed_function_of_a_recorded_step_is_a_conflict(engine_factory) -> None:
    counter = Counter()
    run_id = await _suspended_run(engine_factory, counter)
    app = _deployed_without_v1(counter)

    @app.workflow(version="2")
    async def order(wf: plait.Workflow, data: None) -> list[str]:
        a = await wf.do("reserve", "charge")  # same key, another function
        await wf.suspend("review")
        return [a]

    async with engine_factory(app) as engine:
        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "failed" and run.error["code"] == "VERSION_CONFLICT"
        assert "step 'reserve' was recorded as do 'reserve'" in run.error["message"]
        assert counter["charge"] == 0


async def test_old_version_kept_registered_finishes_on_old_code(engine_factory) -> None:
    counter = Counter()
    run_id = await _suspended_run(engine_factory, counter)
    app = v1_app(counter)  # version "1" stays registered

    @app.workflow(name="order", version="2")
    async def order_v2(wf: plait.Workflow, data: None) -> list[str]:
        await wf.do("something else entirely", lambda: 0)
        return ["v2"]

    assert app.workflows["order"].version == "2"
    assert set(app.workflow_versions["order"]) == {"1", "2"}
    async with engine_factory(app) as engine:
        await engine.resume(run_id)
        old = await engine.wait(run_id, timeout=10)
        assert old.status == "completed" and old.output == ["reserved", "charged"]
        assert await engine.run("order", timeout=10) == ["v2"]
        new = (await engine.list_runs(version="2"))[0]
        assert new.version == "2"


@pytest.mark.parametrize("bad", [3, ""])
def test_version_must_be_a_string(bad: object) -> None:
    app = plait.App()
    with pytest.raises((TypeError, ValueError)):

        @app.workflow(version=bad)  # type: ignore[arg-type]
        async def w(wf: plait.Workflow, data: None) -> None: ...


def _graph_app(second: str) -> plait.App:
    """A graph ``pipeline``: ``first`` (queued, so a run waits for a worker) then
    ``second``; a deploy changes which function the second node calls."""
    app = plait.App("pipes")

    @app.function(queued=True)
    def first(data: None) -> str:
        return "first"

    @app.function
    def old_second(data: None) -> str:
        return "old second"

    @app.function
    def new_second(data: None) -> str:
        return "new second"

    app.graph(
        "pipeline",
        {
            "nodes": {
                "a": {"function": "first", "next": ["b"]},
                "b": {"function": second},
            },
            "output": {"b": {"$ref": "b"}},
        },
    )
    return app


async def test_a_changed_app_graph_leaves_its_in_flight_runs_on_their_definition(
    engine_factory,
) -> None:
    async with engine_factory(_graph_app("old_second"), workers=False) as engine:
        run_id = await engine.start("pipeline")
        started_on = (await engine.get_run(run_id)).version
    async with engine_factory(_graph_app("new_second")) as engine:
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed", run.error
        assert run.output == {"b": "old second"} and run.version == started_on
        fresh = await engine.run("pipeline", timeout=10)
        assert fresh == {"b": "new second"}


def entity_app(counter: Counter, every: int) -> plait.App:
    app = plait.App("loop")

    @app.function(name="work")
    def work(i: int) -> int:
        counter.hit(f"work{i}")  # a side effect: a charge, an e-mail
        return i

    @app.workflow(name="entity")
    async def entity(wf: plait.Workflow, state: dict[str, Any]) -> Any:
        i = state["i"]
        for _ in range(every):  # v1: 3 turns per run; v2: 1
            await wf.do("work", "work", i)
            await wf.wait_for_event("next")
            i += 1
            if i == 3:
                return i
        await wf.continue_as_new({"i": i})

    return app


async def test_a_deploy_that_continues_sooner_than_the_record_is_a_conflict(
    engine_factory: Callable[..., Any],
) -> None:
    """A loop that continued as new every 3 turns now does so every turn: a live run that
    recorded turn 1 would continue there, and its new run would do turn 1's work again.
    The run stops with a VERSION_CONFLICT naming the recorded step, and check says so
    before the deploy."""
    counter = Counter()
    async with engine_factory(entity_app(counter, 3)) as engine:
        run_id = await engine.start("entity", {"i": 0})

        async def at_turn(n: int) -> bool:
            keys = {s.key: s.status for s in await engine.get_steps(run_id)}
            want = "__event:next" if n == 0 else f"__event:next#{n}"
            return want in keys

        await eventually(lambda: at_turn(0))
        await engine.send_event(run_id, "next")
        await eventually(lambda: at_turn(1))  # work(0), next, work(1) done; waits
    assert counter["work1"] == 1
    async with engine_factory(entity_app(counter, 1), workers=False) as engine:
        (res,) = await engine.check()
    assert not res.ok and res.step == "work#1"
    assert res.reason is not None and "continues as new before step 'work#1'" in res.reason
    async with engine_factory(entity_app(counter, 1)) as engine:
        await engine.send_event(run_id, "next")  # the event v1's run waits for

        async def moved() -> plait.Run | None:
            run = await engine.get_run(run_id)
            return run if run.status != "running" else None

        run = await eventually(moved)
        # the run recorded work(1) done; the deploy must not do it a second time
        assert counter["work1"] == 1, (run.status, counter.counts)
        assert run.status == "failed" and run.error["code"] == "VERSION_CONFLICT", run


def branches_app(counter: Counter, version: int) -> plait.App:
    """Two branches of a gather; v2 adds a step at the end of the left one's history
    (allowed alone) and inserts one before a recorded step of the right one (a conflict)."""
    app = plait.App("branches")

    def body(name: str) -> Callable[..., str]:
        def run(*_: Any) -> str:
            counter.hit(name)
            return name

        return run

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def left() -> list[str]:
            out = [await wf.do("l1", body("l1"))]
            if version == 2:
                out.append(await wf.do("l2", body("l2")))
            return out

        async def right() -> list[Any]:
            out: list[Any] = [await wf.do("r1", body("r1"))]
            if version == 2:
                out.append(await wf.do("rx", body("rx")))
            out.append(await wf.do("r2", body("r2")))
            out.append(await wf.wait_for_event("go"))
            return out

        return await asyncio.gather(left(), right())

    return app


async def _waiting_for_go(engine_factory: Any, app: plait.App, after: str) -> str:
    """A run of ``app``'s workflow ``w`` that took ``after`` and waits for its event
    ``go``; the engine is closed."""
    async with engine_factory(app) as engine:
        run_id = await engine.start("w")

        async def waits() -> bool:
            steps = {s.key: s.status for s in await engine.get_steps(run_id)}
            return steps.get("__event:go") == "scheduled" and steps.get(after) == "succeeded"

        await eventually(waits, what=f"the run waiting for its event after {after!r}")
    return str(run_id)


async def _branches_waiting(engine_factory: Any, counter: Counter) -> str:
    """A run of v1 of ``branches_app``, both branches done and waiting for its event."""
    return await _waiting_for_go(engine_factory, branches_app(counter, 1), "r2")


async def test_a_conflict_in_one_branch_starts_no_new_step_in_another(engine_factory) -> None:
    """The pass that finds the conflict hands the recorded outcomes back before it starts
    a step the run never recorded: the left branch's new step waits for the right
    branch's history, which stops the run, and so never runs."""
    counter = Counter()
    run_id = await _branches_waiting(engine_factory, counter)
    async with engine_factory(branches_app(counter, 2)) as engine:
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed" and run.error is not None
        assert run.error["code"] == "VERSION_CONFLICT" and "'rx'" in run.error["message"]
        keys = {s.key for s in await engine.get_steps(run_id)}
    assert counter["l2"] == 0 and counter["rx"] == 0
    assert "l2" not in keys and "rx" not in keys


def _left_grows(counter: Counter, *, keep_r2: bool) -> plait.App:
    """v2 of ``branches_app`` that adds ``l2`` at the end of the left branch (allowed),
    without the inserted ``rx``; without ``keep_r2`` it also drops the right branch's
    recorded ``r2``, whose outcome is then never handed back."""
    app = plait.App("branches")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def left() -> list[str]:
            return [await wf.do("l1", lambda: "l1"), await wf.do("l2", lambda: counter.hit("l2"))]

        async def right() -> list[Any]:
            out = [await wf.do("r1", lambda: "r1")]
            if keep_r2:
                out.append(await wf.do("r2", lambda: "r2"))
            return [*out, await wf.wait_for_event("go")]

        return await asyncio.gather(left(), right())

    return app


async def test_a_new_step_held_for_a_removed_steps_outcome_runs_once(engine_factory) -> None:
    """A held step whose wait can never end (the outcome it waits for belongs to a step
    the new code removed) is let go once nothing else can go on, and not held again: the
    pass does not spin, the check says which step is gone, and the run completes."""
    counter = Counter()
    run_id = await _branches_waiting(engine_factory, counter)
    app = _left_grows(counter, keep_r2=False)
    async with engine_factory(app, workers=False) as checker:
        (result,) = await asyncio.wait_for(checker.check(), 20)
    assert not result.ok and result.step == "r2", result
    assert counter["l2"] == 0
    async with engine_factory(app) as engine:
        await engine.send_event(run_id, "go", "paid")
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed", run.error
    assert run.output == [["l1", 1], ["r1", "paid"]]
    assert counter["l2"] == 1


async def test_a_new_step_of_one_branch_runs_once_the_others_history_is_back(
    engine_factory,
) -> None:
    """Held while the other branch replays, the new step still runs, once, when nothing
    in the record stands against it (v2 without the inserted step)."""
    counter = Counter()
    run_id = await _branches_waiting(engine_factory, counter)
    async with engine_factory(_left_grows(counter, keep_r2=True)) as engine:
        await engine.send_event(run_id, "go", "paid")
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed", run.error
    assert counter["l2"] == 1


@pytest.mark.parametrize(
    ("recorded", "now"),
    [
        ({"flag": True}, {"flag": 1}),
        ({"n": 0}, {"n": False}),
        ({"amount": 1}, {"amount": 1.0}),
        ([True, 2], [1, 2.0]),
        ({"x": 0.0}, {"x": -0.0}),
    ],
)
async def test_an_input_equal_only_in_python_is_another_input(
    engine_factory, recorded: Any, now: Any
) -> None:
    """``True == 1 == 1.0`` in Python, three values in JSON: a step recorded with one and
    reached with another is a conflict, never handed the result computed for the first."""
    counter = Counter()

    def app_of(data: Any) -> plait.App:
        app = plait.App("typed")

        @app.workflow(name="w")
        async def w(wf: plait.Workflow) -> Any:
            got = await wf.do("charge", lambda d: counter.hit("charge") or d, data)
            return [got, await wf.wait_for_event("go")]

        return app

    async with engine_factory(app_of(recorded)) as engine:
        run_id = await engine.start("w")

        async def waits() -> bool:
            return any(s.kind == "event" for s in await engine.get_steps(run_id))

        await eventually(waits, what="the run waiting for its event")
    async with engine_factory(app_of(now)) as engine:
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "failed" and run.error is not None, run.output
    assert run.error["code"] == "VERSION_CONFLICT" and "'charge'" in run.error["message"]
    assert counter["charge"] == 1


def _counted_body(
    counter: Counter, name: str, wait: Callable[[], Awaitable[object]]
) -> Callable[[], Awaitable[str]]:
    """A step body that waits on ``wait()`` and returns ``name``, counting its starts
    (``name``) and the cancels that cut it short (``"<name> cut"``)."""

    async def body() -> str:
        counter.hit(name)
        try:
            await wait()
        except asyncio.CancelledError:
            counter.hit(f"{name} cut")
            raise
        return name

    return body


def _slow_then(counter: Counter, *, new_code: bool) -> plait.App:
    """A run that took ``b``, started ``slow`` in a task of its own, took ``c`` and
    sleeps for a minute (``nap``). The new code cancels ``slow`` once ``c`` is back and
    takes a new value there (``wf.uuid()``), before the recorded ``nap``: a conflict,
    found in the turn in which the workflow cancelled ``slow``."""
    app = plait.App("slow-then")
    slow = _counted_body(counter, "slow", lambda: asyncio.sleep(3600))

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        await wf.do("b", lambda: "b")
        task = asyncio.create_task(wf.do("slow", slow))
        await wf.do("c", lambda: "c")
        if new_code:
            task.cancel()
            wf.uuid()
        await wf.sleep("nap", 60)
        return await task

    return app


async def test_a_conflict_found_as_the_workflow_cancels_a_step_cancels_its_body(
    engine_factory,
) -> None:
    """The turn that finds the conflict also cancelled a running step's task: its body
    is cancelled as any cancelled step's is, and the run fails with the conflict at
    once, instead of its pass waiting for a body that nothing will end. The conflict
    names the recorded step the new one came before (``nap``), not the step that was
    reached in the same pass (``slow``)."""
    counter = Counter()
    async with engine_factory(_slow_then(counter, new_code=False)) as engine:
        run_id = await engine.start("w")

        async def naps() -> bool:
            steps = {s.key: s.status for s in await engine.get_steps(run_id)}
            return steps.get("nap") == "scheduled" and steps.get("slow") == "running"

        await eventually(naps, what="the run asleep beside its slow step")
    assert counter["slow"] == 1
    async with engine_factory(_slow_then(counter, new_code=True)) as engine:
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed" and run.error is not None, run.output
        assert run.error["code"] == "VERSION_CONFLICT", run.error
        assert "'nap'" in run.error["message"] and "'__uuid'" in run.error["message"]
        # the body started again or was cancelled before it could: none runs on
        await eventually(
            lambda: counter["slow cut"] == counter["slow"], what="every body of slow cut short"
        )


def _value_beside(counter: Counter, gate: asyncio.Event, *, new_code: bool) -> plait.App:
    """A run that took ``b`` and then ``s``, whose body waits for ``gate``. The new
    code takes a value (``wf.uuid()``) between calling ``s`` and awaiting it."""
    app = plait.App("value-beside")

    async def body() -> str:
        counter.hit("s")
        await gate.wait()
        return "s"

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        await wf.do("b", lambda: "b")
        step = wf.do("s", body)  # taken here, awaited below
        made = wf.uuid() if new_code else None
        return [await step, made is not None]

    return app


async def test_a_new_value_beside_a_recorded_step_taken_in_the_same_turn_is_no_conflict(
    engine_factory,
) -> None:
    """A recorded step the workflow takes is reached when it is taken, not when the pass
    gets round to it: a new value taken right after it, in the same turn, comes after
    everything the run recorded (``s`` had not ended) and is no conflict."""
    counter = Counter()
    gate = asyncio.Event()
    async with engine_factory(_value_beside(counter, gate, new_code=False)) as engine:
        run_id = await engine.start("w")
        await eventually(lambda: counter["s"] == 1, what="the body of s running")
    gate.set()
    async with engine_factory(_value_beside(counter, gate, new_code=True)) as engine:
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed", run.error
    assert run.output == ["s", True]
    assert counter["s"] == 2  # cut off by the first engine's close, run again


def _gated_beside_event(counter: Counter, gate: asyncio.Event, *, insert: bool) -> plait.App:
    """A gather: the left branch's step ``a1`` waits for ``gate``; the right branch takes
    ``b1`` and waits for the event ``go``. The new code (``insert``) inserts ``bx``
    before the recorded wait: a real conflict."""
    app = plait.App("gated")
    a1 = _counted_body(counter, "a1", gate.wait)

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def left() -> str:
            return await wf.do("a1", a1)

        async def right() -> list[Any]:
            b = await wf.do("b1", lambda: "b1")
            if insert:
                await wf.do("bx", lambda: counter.hit("bx"))
            return [b, await wf.wait_for_event("go")]

        return await asyncio.gather(left(), right())

    return app


async def test_a_conflict_does_not_wait_for_a_body_running_again_beside_it(
    engine_factory,
) -> None:
    """A restart cut ``a1``'s body short; the deploy's pass runs it again, then finds
    the conflict in the other branch. The run fails with it at once: the body is
    interrupted as a shutdown interrupts it, not waited for (it might never end, and
    every restart would run it again on a run known to be broken)."""
    counter = Counter()
    gate = asyncio.Event()
    async with engine_factory(_gated_beside_event(counter, gate, insert=False)) as engine:
        run_id = await engine.start("w")

        async def waits() -> bool:
            steps = {s.key: s.status for s in await engine.get_steps(run_id)}
            return steps.get("__event:go") == "scheduled" and steps.get("a1") == "running"

        await eventually(waits, what="a1 running beside the event wait")
    async with engine_factory(_gated_beside_event(counter, gate, insert=True)) as engine:
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed" and run.error is not None, run.output
        assert run.error["code"] == "VERSION_CONFLICT" and "'bx'" in run.error["message"]
        steps = {s.key: s.status for s in await engine.get_steps(run_id)}
    assert counter["bx"] == 0 and not gate.is_set()
    assert counter["a1 cut"] == counter["a1"]  # every body that started was cut short
    assert steps["a1"] == "pending"  # a retry once the code is fixed runs it again


async def _take(wf: plait.Workflow, kind: str) -> None:
    """One step the workflow takes at once, with no await where a pass could hold it."""
    if kind == "uuid":
        wf.uuid()
    elif kind == "now":
        wf.now()
    elif kind == "set_value":
        await wf.set_value("seen", 1)
    elif kind == "set_tags":
        await wf.set_tags({"seen": "yes"})
    else:
        await wf.stream("seen").write(1)


_TAKEN_AT_ONCE = ["uuid", "now", "set_value", "set_tags", "stream"]
_KEYS = {
    "uuid": "__uuid",
    "now": "__now",
    "set_value": "__value:seen",
    "set_tags": "__tags",
    "stream": "__stream:seen",
}


def _value_added(counter: Counter, kind: str, *, where: str) -> plait.App:
    """v2 of ``branches_app`` that takes ``kind`` either in a gather branch of its own,
    before a new step (``where="branch"``, ahead of the recorded branches: nothing of
    theirs replayed yet), or in the right branch between the recorded ``r1`` and ``r2``
    (``where="inserted"``: a real conflict)."""
    app = plait.App("branches")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def added() -> int:
            await _take(wf, kind)
            return await wf.do("a1", lambda: counter.hit("a1"))

        async def left() -> list[str]:
            return [await wf.do("l1", lambda: "l1")]

        async def right() -> list[Any]:
            out = [await wf.do("r1", lambda: "r1")]
            if where == "inserted":
                await _take(wf, kind)
            out.append(await wf.do("r2", lambda: "r2"))
            return [*out, await wf.wait_for_event("go")]

        if where == "branch":
            return await asyncio.gather(added(), left(), right())
        return await asyncio.gather(left(), right())

    return app


@pytest.mark.parametrize("kind", _TAKEN_AT_ONCE)
async def test_a_value_in_a_branch_a_deploy_adds_is_taken_once_the_history_is_back(
    engine_factory, kind: str
) -> None:
    """A deploy adds a gather branch that takes a value (or publishes one, tags the run,
    writes to a stream) before a new step, while the other branches replay. The value is
    judged where a new ``wf.do`` is: once the recorded outcomes are handed back, when
    nothing in the record stands against it; before that, the record's steps of the
    sibling branches looked like history ahead of it, and the run stopped with a false
    ``VERSION_CONFLICT``."""
    counter = Counter()
    run_id = await _branches_waiting(engine_factory, counter)
    app = _value_added(counter, kind, where="branch")
    async with engine_factory(app, workers=False) as checker:
        (result,) = await asyncio.wait_for(checker.check(), 20)
    assert result.ok, result
    async with engine_factory(app) as engine:
        await engine.send_event(run_id, "go", "paid")
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "completed", run.error
        assert run.output == [1, ["l1"], ["r1", "r2", "paid"]]
        keys = {s.key for s in await engine.get_steps(run_id)}
        assert _KEYS[kind] in keys
        if kind == "set_value":
            assert await engine.get_value(run_id, "seen") == 1
        if kind == "set_tags":
            assert run.tags == {"seen": "yes"}
        if kind == "stream":
            entries = await engine.read_stream(run_id, "seen")
            assert [(e.kind, e.value) for e in entries] == [("data", 1), ("end", None)]
    assert counter["a1"] == 1


@pytest.mark.parametrize("kind", _TAKEN_AT_ONCE)
async def test_a_value_a_deploy_inserts_before_recorded_steps_is_still_a_conflict(
    engine_factory, kind: str
) -> None:
    """Judged later, a value inserted before the run's recorded steps on its own branch
    is still found out, when the branch reaches them: the run stops with a
    ``VERSION_CONFLICT`` naming both, and nothing of the value was written or
    published."""
    counter = Counter()
    run_id = await _branches_waiting(engine_factory, counter)
    app = _value_added(counter, kind, where="inserted")
    async with engine_factory(app, workers=False) as checker:
        (result,) = await asyncio.wait_for(checker.check(), 20)
    assert not result.ok and result.step == _KEYS[kind], result
    async with engine_factory(app) as engine:
        await engine.send_event(run_id, "go", "paid")
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed" and run.error is not None, run.output
        assert run.error["code"] == "VERSION_CONFLICT", run.error
        assert f"'{_KEYS[kind]}'" in run.error["message"], run.error
        assert "'r2'" in run.error["message"], run.error
        keys = {s.key for s in await engine.get_steps(run_id)}
        assert _KEYS[kind] not in keys
        assert await engine.get_values(run_id) == {}
        assert run.tags == {}
        assert await engine.read_stream(run_id, "seen") == []


def _publishes_after_r1(*, insert: bool) -> plait.App:
    """A gather: the left branch takes three steps, the right one takes ``r1``, publishes
    a value and waits for ``go``. The new code (``insert``) takes ``wf.uuid()`` between
    ``r1`` and the recorded publish, while the left branch still replays."""
    app = plait.App("publishes")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def left() -> None:
            for key in ("l1", "l2", "l3"):
                await wf.do(key, lambda: None)

        async def right() -> Any:
            await wf.do("r1", lambda: None)
            if insert:
                wf.uuid()
            await wf.set_value("p", 1)
            return await wf.wait_for_event("go")

        return await asyncio.gather(left(), right())

    return app


async def test_a_value_inserted_before_a_recorded_publish_is_a_conflict(engine_factory) -> None:
    """The recorded step the branch reaches after the value judged later is itself one
    taken at once (a published value): it shows the value out of place just as well."""
    run_id = await _waiting_for_go(engine_factory, _publishes_after_r1(insert=False), "l3")
    app = _publishes_after_r1(insert=True)
    async with engine_factory(app, workers=False) as checker:
        (result,) = await asyncio.wait_for(checker.check(), 20)
    assert not result.ok and result.step == "__uuid", result
    async with engine_factory(app) as engine:
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "failed" and run.error is not None, run.output
    assert run.error["code"] == "VERSION_CONFLICT", run.error
    assert "'__uuid'" in run.error["message"] and "'__value:p'" in run.error["message"]


def _in_place_beside_a_conflict(counter: Counter, kind: str) -> plait.App:
    """v2 of ``branches_app`` that takes ``kind`` at the end of the left branch's
    history (in its place) and inserts ``rx`` before the right branch's recorded ``r2``."""
    app = plait.App("branches")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def left() -> list[str]:
            out = [await wf.do("l1", lambda: "l1")]
            await _take(wf, kind)
            return out

        async def right() -> list[Any]:
            out = [await wf.do("r1", lambda: "r1")]
            out.append(await wf.do("rx", lambda: counter.hit("rx")))
            out.append(await wf.do("r2", lambda: "r2"))
            return [*out, await wf.wait_for_event("go")]

        return await asyncio.gather(left(), right())

    return app


@pytest.mark.parametrize("kind", _TAKEN_AT_ONCE)
async def test_a_value_in_place_beside_a_conflicting_branch_is_not_published(
    engine_factory, kind: str
) -> None:
    """A value the deploy adds in its place, taken while another branch replays, waits
    with the held steps: the other branch's conflict stops the run, and the value is
    never published, as a ``wf.do`` in its place never runs."""
    counter = Counter()
    run_id = await _branches_waiting(engine_factory, counter)
    async with engine_factory(_in_place_beside_a_conflict(counter, kind)) as engine:
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed" and run.error is not None, run.output
        assert run.error["code"] == "VERSION_CONFLICT" and "'rx'" in run.error["message"]
        keys = {s.key for s in await engine.get_steps(run_id)}
        assert _KEYS[kind] not in keys
        assert await engine.get_values(run_id) == {} and run.tags == {}
        assert await engine.read_stream(run_id, "seen") == []
    assert counter["rx"] == 0


def _patched_after_a_value(*, version: int) -> plait.App:
    """``branches_app``'s shape; v2 takes ``wf.uuid()`` (inserted, unguarded) before a
    ``wf.patched`` guard that replaces ``r2``; v3 fixes v2 (the guard alone)."""
    app = plait.App("branches")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def left() -> list[str]:
            return [await wf.do("l1", lambda: "l1")]

        async def right() -> list[Any]:
            out = [await wf.do("r1", lambda: "r1")]
            if version == 2:
                wf.uuid()
            if version > 1 and wf.patched("new-r2"):
                out.append(await wf.do("r2-new", lambda: "r2-new"))
            else:
                out.append(await wf.do("r2", lambda: "r2"))
            return [*out, await wf.wait_for_event("go")]

        return await asyncio.gather(left(), right())

    return app


async def test_a_patch_marker_taken_after_a_value_not_judged_yet_waits_with_it(
    engine_factory,
) -> None:
    """``wf.patched`` right after a value that waits for its judgment: its marker waits
    with the value, which is then found inserted before ``r2``; nothing is written, and
    a retry on the fixed code (the guard alone) keeps to the recorded path."""
    run_id = await _waiting_for_go(engine_factory, _patched_after_a_value(version=1), "r2")
    async with engine_factory(_patched_after_a_value(version=2)) as engine:
        await engine.send_event(run_id, "go", "paid")
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed" and run.error is not None, run.output
        assert run.error["code"] == "VERSION_CONFLICT" and "'__uuid'" in run.error["message"]
        keys = {s.key for s in await engine.get_steps(run_id)}
        assert "__patch:new-r2" not in keys and "__uuid" not in keys
    async with engine_factory(_patched_after_a_value(version=3)) as engine:
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed", run.error
    assert run.output == [["l1"], ["r1", "r2", "paid"]]


def _patched_beside_a_task_with_a_value(*, version: int) -> plait.App:
    """Main makes task ``b`` (``b1``, then the event ``go``) and takes ``m1``, its last
    step. v2 adds a task that only takes ``wf.uuid()``, and ``m2`` under ``wf.patched``
    after ``m1``."""
    app = plait.App("patched-beside")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def b() -> list[Any]:
            return [await wf.do("b1", lambda: "b1"), await wf.wait_for_event("go")]

        async def t() -> None:
            if version == 2:
                wf.uuid()

        other, taking = asyncio.create_task(b()), asyncio.create_task(t())
        out = [await wf.do("m1", lambda: "m1")]
        if version == 2 and wf.patched("p"):
            out.append(await wf.do("m2", lambda: "m2"))
        await taking
        return [out, await other]

    return app


async def test_patched_is_not_swayed_by_a_value_another_task_took(engine_factory) -> None:
    """A task the deploy adds takes a value, not judged yet when it ends; main, which
    its end counts as coming after it, asks ``wf.patched`` where main's own history has
    ended: True, on the first pass as after a restart, and the marker is written once
    the value is found in its place."""
    run_id = await _waiting_for_go(
        engine_factory, _patched_beside_a_task_with_a_value(version=1), "m1"
    )
    async with engine_factory(_patched_beside_a_task_with_a_value(version=2)) as engine:
        await engine.send_event(run_id, "go", "paid")
        run = await engine.wait(run_id, timeout=20)
        keys = {s.key for s in await engine.get_steps(run_id)}
    assert run.status == "completed", run.error
    assert run.output == [["m1", "m2"], ["b1", "paid"]]
    assert {"__patch:p", "__uuid"} <= keys


def _wide_gather(*, insert: bool) -> plait.App:
    """The right branch takes ``r1``, a gather of 40 steps, then ``r2``; the left one
    waits for ``go``. The new code writes to a stream after the gather's first step, in
    its branch: before the recorded ``r2``."""
    app = plait.App("wide")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def child(i: int) -> int:
            got = await wf.do(f"x{i}", lambda: i)
            if insert and i == 0:
                await wf.stream("seen").write(i)
            return got

        async def right() -> list[Any]:
            await wf.do("r1", lambda: "r1")
            total = sum(await asyncio.gather(*(child(i) for i in range(40))))
            return [total, await wf.do("r2", lambda: "r2")]

        return await asyncio.gather(wf.wait_for_event("go"), right())

    return app


async def test_a_value_inserted_in_a_gather_wider_than_a_step_remembers_is_a_conflict(
    engine_factory,
) -> None:
    """A step records the last 32 outcomes it came after, so past a gather of 40 the
    value taken in its first branch is not among those ``r2`` names. What comes after a
    value not judged yet is followed by task, whole: the value is still found inserted
    before ``r2``, and nothing is written to the stream."""
    run_id = await _waiting_for_go(engine_factory, _wide_gather(insert=False), "r2")
    async with engine_factory(_wide_gather(insert=True)) as engine:
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed" and run.error is not None, run.output
        assert run.error["code"] == "VERSION_CONFLICT", run.error
        assert "'__stream:seen'" in run.error["message"] and "'r2'" in run.error["message"]
        assert await engine.read_stream(run_id, "seen") == []


def _takes_the_others_value(kind: str, *, version: int) -> plait.App:
    """Two branches: the left one waits for the event ``go`` after ``l1``, the right one
    takes ``kind`` after ``r1`` (whose body ends after ``l1``'s, so ``l1``'s outcome is
    handed first). v2 adds the same kind of step to the left branch after ``l1``: the
    names of these steps are counted across the run, so it reaches the key the right
    branch recorded (``__uuid``, ``__tags``) before the right branch does."""
    app = plait.App("values")
    l1_done = asyncio.Event()

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        async def l1() -> str:
            l1_done.set()
            return "l1"

        async def r1() -> str:
            await l1_done.wait()
            return "r1"

        async def left() -> Any:
            await wf.do("l1", l1)
            taken = None
            if version == 2:
                if kind == "uuid":
                    taken = str(wf.uuid())
                else:
                    await wf.set_tags({"left": "yes"})
            await wf.wait_for_event("go")
            return taken

        async def right() -> Any:
            await wf.do("r1", r1)
            if kind == "uuid":
                return str(wf.uuid())
            await wf.set_tags({"right": "yes"})
            return None

        return await asyncio.gather(left(), right())

    return app


@pytest.mark.parametrize("kind", ["uuid", "set_tags"])
async def test_a_value_a_deploy_adds_ahead_of_another_branchs_recorded_one_is_a_conflict(
    engine_factory, kind: str
) -> None:
    """The added step would replay the right branch's recorded value (its uuid; its tags,
    so the left branch's were never set), and the right branch would take a new one (a
    uuid that changed between passes): the run stops instead."""
    run_id = await _waiting_for_go(engine_factory, _takes_the_others_value(kind, version=1), "r1")
    async with engine_factory(_takes_the_others_value(kind, version=1)) as engine:
        recorded = [s for s in await engine.get_steps(run_id) if s.key.startswith("__")]
    app = _takes_the_others_value(kind, version=2)
    async with engine_factory(app, workers=False) as checker:
        (result,) = await asyncio.wait_for(checker.check(), 20)
    assert not result.ok, result
    async with engine_factory(app) as engine:
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed" and run.error is not None, (run.output, run.tags)
        assert run.error["code"] == "VERSION_CONFLICT", run.error
        assert f"'{_KEYS[kind]}'" in run.error["message"], run.error
        after = [s for s in await engine.get_steps(run_id) if s.key.startswith("__")]
    assert {s.key for s in after} == {s.key for s in recorded}  # nothing new written
