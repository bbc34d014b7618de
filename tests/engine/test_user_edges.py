"""Edges a demanding user reaches: requests whose sender gives up or sends a model, a
paused run taking requests, a step body's task group saying no retry, bulk actions on a
test engine's clock, names shared by a function and a workflow, stream offsets past the
largest, and what a cancelled attempt spent."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import plait
from plait.clock import VirtualClock
from support.counter import Counter
from support.polling import eventually


async def _step(engine: plait.Engine, run_id: str, key: str) -> plait.Step | None:
    return next((s for s in await engine.get_steps(run_id) if s.key == key), None)


def _code(run: plait.Run) -> str | None:
    return None if run.error is None else run.error.get("code")


async def _ended(engine: plait.Engine, run_id: str) -> plait.Run | None:
    run = await engine.get_run(run_id)
    return run if run.status.is_terminal else None


async def _status_is(engine: plait.Engine, run_id: str, wanted: str) -> bool:
    return (await engine.get_run(run_id)).status.value == wanted


async def test_a_request_to_a_paused_run_is_answered_once_it_is_resumed(engine_factory) -> None:
    """A paused run has not ended; ``engine.request`` documents ``RunStateError`` only
    for a run that has ended. Events are accepted by a paused run; requests should
    queue the same way and be answered after the resume."""
    app = plait.App()
    gate = asyncio.Event()

    @app.function
    async def work() -> str:
        await asyncio.wait_for(gate.wait(), 30)
        return "worked"

    @app.function
    async def more() -> str:
        return "more"

    @app.workflow
    async def asks(wf: plait.Workflow) -> str:
        await wf.do("work", "work")
        await wf.do("more", "more")
        req = await wf.wait_for_request("ask")
        await req.reply({"got": req.data})
        return "done"

    async with engine_factory(app, lease_seconds=1.0) as engine:
        run_id = await engine.start("asks")

        async def working() -> bool:
            step = await _step(engine, run_id, "work")
            return step is not None and step.status == "running"

        await eventually(working, what="the first step running")
        await engine.pause_workflow("asks")
        gate.set()
        await eventually(
            lambda: _status_is(engine, run_id, "paused"), timeout=10, what="the run paused"
        )
        sender = asyncio.ensure_future(engine.request(run_id, "ask", 7, timeout=20))
        await asyncio.sleep(0.3)
        await engine.resume_workflow("asks")
        assert await sender == {"got": 7}
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "completed"


async def test_a_non_retryable_error_from_a_task_group_in_a_body_is_not_retried(
    engine_factory,
) -> None:
    """A body that fans out with ``asyncio.TaskGroup`` and one branch raises
    ``NonRetryableError``: the body raises an ``ExceptionGroup`` holding it. The step is
    retried 3 times anyway (with back-off), and its error does not say retryable false."""
    app = plait.App()
    calls = Counter()

    async def branch(n: int) -> None:
        if n == 1:
            raise plait.NonRetryableError("card declined")

    @app.function(retries=3, retry_delay="0s")
    async def fan() -> None:
        calls.hit("fan")
        async with asyncio.TaskGroup() as tg:
            for n in range(3):
                tg.create_task(branch(n))

    @app.workflow
    async def fans(wf: plait.Workflow) -> None:
        await wf.do("fan", "fan")

    async with engine_factory(app) as engine:
        run = await engine.wait(await engine.start("fans"), timeout=20)
        assert run.status == "failed"
        assert calls["fan"] == 1, f"ran {calls['fan']} times"


async def test_a_request_whose_sender_gave_up_is_never_taken(engine_factory) -> None:
    """``asyncio.wait_for(engine.request(...), 0.5)``: the caller gives up (its task is
    cancelled). The request stays ``sent`` until its own 30 s deadline, so the workflow
    takes it later and acts on data whose sender was told it failed (and may send it
    again). A sender that stops waiting, for whatever reason, must withdraw it."""
    app = plait.App()

    @app.workflow
    async def later(wf: plait.Workflow) -> Any:
        await wf.wait_for_event("go")
        try:
            req = await wf.wait_for_request("ask", timeout=1)
        except plait.RequestTimeout:
            return "none"
        await req.reply("done")
        return req.data

    async with engine_factory(app) as engine:
        run_id = await engine.start("later")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(engine.request(run_id, "ask", "charge me", timeout=30), 0.5)
        await asyncio.sleep(0.2)
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=10)
        assert run.output == "none", f"the abandoned request was taken: {run.output!r}"


async def test_a_request_carrying_the_schemas_own_model_is_not_refused(engine_factory) -> None:
    """``engine.request(run_id, "add", Item(sku="a", qty=1))``: the data is stored as JSON
    (``{"sku":"a","qty":1}``), exactly what ``schema=Item`` takes. But while the wait is
    open the engine judges the *Python object* against the JSON Schema, and refuses it
    ("Item(...) is not of type 'object'"); a datetime or a tuple is refused the same way."""
    import datetime as dt

    import pydantic

    class Item(pydantic.BaseModel):
        sku: str
        qty: int

    class Slot(pydantic.BaseModel):
        when: dt.datetime
        tags: list[str]

    app = plait.App()

    @app.workflow
    async def shop(wf: plait.Workflow) -> list[Any]:
        item = await wf.wait_for_request("add", schema=Item)
        await item.reply(item.data.qty)
        slot = await wf.wait_for_request("book", schema=Slot)
        await slot.reply(len(slot.data.tags))
        return [item.data.sku, slot.data.tags]

    async with engine_factory(app) as engine:
        run_id = await engine.start("shop")

        async def waiting(key: str) -> bool:
            step = await _step(engine, run_id, key)
            return step is not None and step.status == "scheduled"

        await eventually(lambda: waiting("__request:add"), what="the wait for add")
        assert await engine.request(run_id, "add", Item(sku="a", qty=1), timeout=10) == 1
        await eventually(lambda: waiting("__request:book"), what="the wait for book")
        when = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        assert await engine.request(run_id, "book", {"when": when, "tags": ("x",)}, timeout=10) == 1
        run = await engine.wait(run_id, timeout=10)
        assert run.output == ["a", ["x"]]


async def test_bulk_actions_find_the_runs_of_a_test_engine_after_its_clock_moved() -> None:
    """Runs are stamped by the engine's clock: a bulk action's "started before now" is
    read from that clock too, or a test engine whose clock moved on matches nothing."""
    from plait.testing import TestEngine

    app = plait.App()

    @app.workflow
    async def held(wf: plait.Workflow) -> str:
        await wf.suspend("hold")
        return "resumed"

    async with TestEngine(app) as env:
        await env.advance("1h")
        run_id = await env.start("held", tags={"batch": "virtual"})
        assert (await env.wait(run_id, timeout=10)).status == "suspended"
        assert await env.match_runs("resume", tags={"batch": "virtual"}) == [run_id]
        assert await env.resume_runs(tags={"batch": "virtual"}) == 1


@pytest.mark.parametrize("order", ["function first", "workflow first"])
def test_a_function_and_a_workflow_under_one_name_are_refused(order: str) -> None:
    """``wf.do(key, "ship")`` would run the function and never the child workflow."""
    app = plait.App()

    def ship_function(data: int) -> int:
        return data

    async def ship_workflow(wf: plait.Workflow, data: int) -> int:
        return data

    if order == "function first":
        app.function(name="ship")(ship_function)
        with pytest.raises(ValueError, match=r"workflow .ship.*a function is already"):
            app.workflow(name="ship")(ship_workflow)
    else:
        app.workflow(name="ship")(ship_workflow)
        with pytest.raises(ValueError, match=r"function .ship.*a workflow is already"):
            app.function(name="ship")(ship_function)


async def test_a_stream_read_after_the_last_possible_offset_is_refused_by_name(
    engine_factory: Any,
) -> None:
    app = plait.App()

    @app.workflow
    async def logged(wf: plait.Workflow) -> str:
        await wf.stream("log").write("first")
        return "done"

    async with engine_factory(app) as engine:
        run_id = await engine.start("logged")
        await engine.wait(run_id, timeout=30)
        last = 2**31 - 1
        assert await engine.read_stream(run_id, "log", after=last) == []
        with pytest.raises(ValueError, match="after must be an offset"):
            await engine.read_stream(run_id, "log", after=2**64)


async def test_what_a_cancelled_attempt_spent_counts_against_its_queues_budget(
    engine_factory: Any,
) -> None:
    """A step that reported what it spent and was then cancelled spent it all the same:
    the queue counts it, and admits nothing new past its budget."""
    app = plait.App()
    app.queue("llm", budget={"tokens": "1000/h"})
    started = asyncio.Event()

    @app.function
    async def think(data: Any, ctx: plait.StepContext) -> Any:
        ctx.spend(tokens=5000)
        started.set()
        await asyncio.sleep(3600)

    @app.workflow(queue="llm")
    async def agent(wf: plait.Workflow, data: Any) -> Any:
        return await wf.do("think", think, data)

    async with engine_factory(app) as engine:
        run_id = await engine.start("agent", 1)
        await asyncio.wait_for(started.wait(), 30)
        await engine.cancel(run_id)
        assert (await engine.wait(run_id, timeout=30)).status == "cancelled"
        (llm,) = [q for q in await engine.queue_depths() if q["queue"] == "llm"]
        assert llm["spent"].get("tokens") == 5000, llm
        assert llm["waiting"] == "budget", llm


async def test_a_fork_of_a_workflow_with_a_timeout_has_a_deadline(engine_factory) -> None:
    """``@app.workflow(timeout="30s")``: every run of it fails RUN_TIMEOUT once 30 s
    pass. A fork (a new run of the same workflow) gets no deadline at all."""
    app = plait.App()

    @app.workflow(timeout="30s")
    async def napper(wf: plait.Workflow) -> str:
        await wf.do("a", lambda: "a")
        await wf.sleep("nap", 3600)
        return "woke"

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("napper")

        async def napping(rid: str) -> bool:
            step = await _step(engine, rid, "nap")
            return step is not None and step.status == "scheduled"

        await eventually(lambda: napping(run_id), what="the source napping")
        await engine.cancel(run_id)
        fork_id = await engine.fork(run_id, from_step="nap")
        await eventually(lambda: napping(fork_id), what="the fork napping")
        fork = await engine.get_run(fork_id)
        assert fork.deadline_at is not None, "the fork has no deadline"
        clock.move_to(clock.now() + 31)
        run = await eventually(
            lambda: _ended(engine, fork_id), timeout=8, what="the fork to time out"
        )
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")


async def test_check_include_ended_survives_a_request_left_by_a_sender_that_died(
    engine_factory,
) -> None:
    """A run waits (suspended in one branch, waiting for a request in the other) and is
    cancelled; the sender of a request died before withdrawing it (a killed HTTP server,
    or a cancelled ``engine.request``), so the request is still ``sent``. ``engine.check(
    include_ended=5)`` replays the cancelled run: the dry pass takes the request, the
    code replies, the reply's step commits at once, and the dry host's AssertionError
    ("a dry pass ... tried to commit a write") escapes ``check`` for every run."""
    app = plait.App()

    @app.workflow
    async def held(wf: plait.Workflow) -> None:
        async def ask() -> None:
            req = await wf.wait_for_request("ask")
            await req.reply("ok")

        await asyncio.gather(wf.suspend("hold"), ask())

    async with engine_factory(app) as engine:
        run_id = await engine.start("held")
        assert (await engine.wait(run_id, timeout=10)).status == "suspended"
        # what a sender leaves behind when its process dies while it waits
        await engine.store.send_request(
            run_id,
            "ask",
            "1",
            "sent",
            None,
            engine.clock.now() + 60,
            ("queued", "running", "suspended"),
        )
        await engine.cancel(run_id)
        results = await engine.check(include_ended=5)
        assert [r.run_id for r in results] == [run_id]


async def test_a_retried_runs_stream_is_followed_past_the_end_of_its_failed_attempt(
    engine_factory: Any,
) -> None:
    """A retried run has not ended: its followers read on past the failed attempt and the
    end it was given, to the retry's entries and the last end. That end keeps its offset
    (a client that read it resumes after it): the retry's entries come after it."""
    app = plait.App()
    down = {"talk": True}

    @app.function(retries=0)
    async def talker(data: str, ctx: plait.StepContext) -> str:
        await ctx.stream("tokens").write(f"try{ctx.attempt}")
        if down["talk"]:
            raise RuntimeError("the model hung up")
        return "said"

    @app.workflow
    async def talk(wf: plait.Workflow) -> str:
        return str(await wf.do("talk", talker, "x"))

    def shape(entries: list[Any]) -> list[tuple[Any, Any, Any]]:
        return [(e.kind, e.value, e.attempt) for e in entries]

    async def follow(**options: Any) -> list[Any]:
        return [e async for e in engine.follow_stream(run_id, "tokens", **options)]

    async with engine_factory(app) as engine:
        run_id = await engine.start("talk")
        assert (await engine.wait(run_id, timeout=30)).status == "failed"
        down["talk"] = False
        await engine.retry(run_id)
        assert (await engine.wait(run_id, timeout=30)).output == "said"
        stored = shape(await engine.read_stream(run_id, "tokens"))
        assert stored == [
            ("data", "try1", 1),
            ("reset", None, 1),
            ("end", None, None),
            ("data", "try2", 2),
            ("end", None, None),
        ]
        entries = await engine.read_stream(run_id, "tokens")
        assert [e.offset for e in entries] == [0, 1, 2, 3, 4]
        followed = [stored[0], stored[1], stored[3], stored[4]]
        assert shape(await asyncio.wait_for(follow(), 20)) == followed
        # a client that had read the first end resumes after it
        assert shape(await asyncio.wait_for(follow(after=2), 20)) == stored[3:]
        settled = await asyncio.wait_for(follow(settled_only=True), 20)
        assert shape(settled) == [("data", "try2", 2), ("end", None, None)]
