"""Brakes through the Engine, on every store: a paused workflow's or queue's running run
stops after the step it is in and waits ``paused``, a new run waits ``queued``, and a
resume goes on where each stopped with no step run twice; a paused run can be cancelled;
bad names are refused by name. (Real worker processes: tests/processes/test_pool_workers.py.)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import pytest

import plait
from support.polling import eventually


def make_app() -> tuple[plait.App, Counter[str], dict[str, asyncio.Event]]:
    app = plait.App("brakes")
    app.queue("slow", concurrency=4)
    ran: Counter[str] = Counter()
    gates: dict[str, asyncio.Event] = {}

    @app.function(name="work")
    async def work(data: dict[str, Any], ctx: plait.StepContext) -> str:
        ran[f"{ctx.run_id}/{ctx.step_key}"] += 1
        gate = gates.get(ctx.step_key)
        if gate is not None:
            await asyncio.wait_for(gate.wait(), 30)
        return ctx.step_key

    async def three(wf: plait.Workflow, data: Any = None) -> list[str]:
        return [await wf.do(f"s{i}", work, {}) for i in range(3)]

    app.workflow(name="three")(three)
    app.workflow(name="three_slow", queue="slow")(three)
    return app, ran, gates


async def status(engine: plait.Engine, run_id: str) -> str:
    return (await engine.get_run(run_id)).status.value


async def test_a_paused_workflow_stops_after_its_step_and_resumes(
    engine_factory: Any,
) -> None:
    app, ran, gates = make_app()
    gates["s0"] = asyncio.Event()
    async with engine_factory(app, lease_seconds=1.0) as engine:
        first = await engine.start("three")
        await eventually(lambda: ran[f"{first}/s0"] == 1, what="the first step running")
        await engine.pause_workflow("three")
        gates["s0"].set()  # the step it is in ends; the next one must not start
        await eventually(lambda: _is(engine, first, "paused"), timeout=10, what="the run paused")
        assert ran[f"{first}/s1"] == 0
        assert (await engine.waiting_on(first)) == plait.WaitingOn(
            "paused_workflow", "three", "workflow 'three' is paused"
        )
        later = await engine.start("three")
        assert await status(engine, later) == "queued"  # accepted, and waits
        paused = await engine.list_paused()
        assert [(p["kind"], p["name"]) for p in paused] == [("workflow", "three")]
        await asyncio.sleep(0.3)  # the workers poll meanwhile: nothing of it may start
        assert ran[f"{first}/s1"] == 0 and ran[f"{later}/s0"] == 0

        resumed = await engine.resume_workflow("three")
        assert resumed == [first]
        for run_id in (first, later):
            run = await engine.wait(run_id, timeout=20)
            assert run.status == "completed" and run.output == ["s0", "s1", "s2"]
        assert await engine.list_paused() == []
    assert set(ran.values()) == {1}  # no step ran twice
    assert len(ran) == 6


async def _is(engine: plait.Engine, run_id: str, wanted: str) -> bool:
    return await status(engine, run_id) == wanted


async def test_a_paused_queue_holds_new_runs_queued_and_running_ones_paused(
    engine_factory: Any,
) -> None:
    app, ran, gates = make_app()
    gates["s1"] = asyncio.Event()
    async with engine_factory(app, lease_seconds=1.0) as engine:
        running = await engine.start("three_slow")
        await eventually(lambda: ran[f"{running}/s1"] == 1, what="the second step running")
        await engine.pause_queue("slow")
        waiting = await engine.start("three_slow")
        gates["s1"].set()
        await eventually(lambda: _is(engine, running, "paused"), timeout=10, what="paused")
        assert await status(engine, waiting) == "queued"
        why = await engine.waiting_on(waiting)
        assert why is not None and why.kind == "paused_queue" and why.name == "slow"
        # a paused run holds its queue slot and can be cancelled
        depth = next(d for d in await engine.queue_depths() if d["queue"] == "slow")
        assert depth["active"] == 1 and depth["queued"] == 1
        await engine.cancel(waiting)
        assert await status(engine, waiting) == "cancelled"
        await engine.resume_queue("slow")
        run = await engine.wait(running, timeout=20)
        assert run.status == "completed"
    assert ran[f"{running}/s1"] == 1 and ran[f"{running}/s2"] == 1
    assert ran[f"{waiting}/s0"] == 0


async def test_a_paused_run_can_be_cancelled(engine_factory: Any) -> None:
    app, ran, gates = make_app()
    gates["s0"] = asyncio.Event()
    async with engine_factory(app, lease_seconds=1.0) as engine:
        run_id = await engine.start("three")
        await eventually(lambda: ran[f"{run_id}/s0"] == 1, what="the first step running")
        await engine.pause_workflow("three")
        gates["s0"].set()
        await eventually(lambda: _is(engine, run_id, "paused"), timeout=10, what="paused")
        await engine.cancel(run_id, reason="not needed")
        assert await status(engine, run_id) == "cancelled"
        await engine.resume_workflow("three")
        assert await status(engine, run_id) == "cancelled"


async def test_bad_names_are_refused_by_name(engine_factory: Any) -> None:
    app, _ran, _gates = make_app()
    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowNotFoundError, match="nope"):
            await engine.pause_workflow("nope")
        with pytest.raises(ValueError, match="queue"):
            await engine.pause_queue("")
        assert await engine.list_paused() == []


async def test_pausing_the_default_queue_holds_the_runs_started_on_no_queue(
    engine_factory: Any,
) -> None:
    """``default`` is the queue of the runs started on no queue (``plait worker --queues
    default``): pausing it holds them as pausing a named queue holds its runs, and holds
    no run of a named queue."""
    app, ran, gates = make_app()
    gates["s0"] = asyncio.Event()
    async with engine_factory(app, lease_seconds=1.0) as engine:
        running = await engine.start("three")
        await eventually(lambda: ran[f"{running}/s0"] == 1, what="the first step running")
        await engine.pause_queue("default")
        assert [(p["kind"], p["name"]) for p in await engine.list_paused()] == [
            ("queue", "default")
        ]
        waiting = await engine.start("three")
        assert await status(engine, waiting) == "queued"
        gates["s0"].set()
        await eventually(lambda: _is(engine, running, "paused"), timeout=10, what="paused")
        assert ran[f"{running}/s1"] == 0 and ran[f"{waiting}/s0"] == 0
        assert (await engine.waiting_on(waiting)) == plait.WaitingOn(
            "paused_queue", "default", "queue 'default' is paused"
        )
        elsewhere = await engine.start("three_slow")  # a named queue's run goes on
        assert (await engine.wait(elsewhere, timeout=20)).status == "completed"

        assert await engine.resume_queue("default") == [running]
        for run_id in (running, waiting):
            assert (await engine.wait(run_id, timeout=20)).status == "completed"
    assert ran[f"{running}/s0"] == 1 and ran[f"{running}/s1"] == 1


async def test_a_brake_set_by_another_process_holds_an_inline_start(
    engine_factory: Any,
) -> None:
    """Brakes are obeyed by every process the moment they are stored: a start in a process
    that has not read the brake yet (it reads them every quarter of a lease) is accepted
    and waits ``queued``, even inline; its steps run once the brake is released."""
    app, ran, _gates = make_app()
    async with (
        engine_factory(app) as other,
        engine_factory(app, lease_seconds=20.0) as here,
    ):
        await other.pause_workflow("three")
        run_id = await here.start("three", inline=True)
        assert await status(here, run_id) == "queued"
        why = await here.waiting_on(run_id)
        assert why is not None and why.kind == "paused_workflow"
        assert ran[f"{run_id}/s0"] == 0
        await other.resume_workflow("three")
        run = await here.wait(run_id, timeout=20)
        assert run.status == "completed" and run.output == ["s0", "s1", "s2"]
    assert [ran[f"{run_id}/s{i}"] for i in range(3)] == [1, 1, 1]


async def test_a_brake_set_by_another_process_makes_a_new_run_wait_queued(
    engine_factory: Any,
) -> None:
    """The same for a run started to be worked by any process, and for a paused queue:
    the start's own commit sees the brake."""
    app, ran, _gates = make_app()
    async with (
        engine_factory(app) as other,
        engine_factory(app, lease_seconds=20.0) as here,
    ):
        await other.pause_workflow("three")
        await other.pause_queue("slow")
        braked = await here.start("three")
        in_queue = await here.start("three_slow")
        many = await here.start_many("three", [None, None])
        for run_id in (braked, in_queue, *many):
            assert await status(here, run_id) == "queued", run_id
        await other.resume_workflow("three")
        await other.resume_queue("slow")
        for run_id in (braked, in_queue, *many):
            assert (await here.wait(run_id, timeout=20)).status == "completed"
    assert len(ran) == 12 and set(ran.values()) == {1}


async def test_a_scheduled_run_of_a_paused_workflow_waits_queued(engine_factory: Any) -> None:
    """A tick of a paused workflow's schedule is a new run: it waits ``queued`` from the
    start (the tick reads the brakes in its own transaction), and runs once resumed."""
    app, ran, _gates = make_app()
    async with engine_factory(app) as engine:
        await engine.pause_workflow("three")
        await engine.create_schedule("beat", workflow="three", every="1s")

        async def ticked() -> list[plait.Run]:
            return await engine.list_runs(workflow="three", limit=10)

        (first, *_) = await eventually(ticked, timeout=15, what="a tick's run")
        assert first.status == "queued"
        await engine.pause_schedule("beat")
        assert {r.status for r in await ticked()} == {"queued"}
        await engine.resume_workflow("three")
        assert (await engine.wait(first.id, timeout=30)).status == "completed"
        assert ran[f"{first.id}/s0"] == 1


async def test_a_pause_made_while_the_loop_was_held_up_holds_the_next_step(
    engine_factory: Any, database: str
) -> None:
    """A step body holds the worker's event loop (a ``time.sleep`` in an ``async def``)
    while another process pauses the workflow, and for longer than a lease after: the
    worker's copy of the brakes is older than a lease when the next step would start. It
    reads them again before that body starts, and the run stops there (it started the
    next step 3.5 leases after the pause: the copy is read with the lease renewals, which
    the held-up loop did not run, and the lease itself was kept by the stall guard)."""
    app = plait.App("held")
    ran: Counter[str] = Counter()
    paused = threading.Event()

    def pause_from_elsewhere() -> None:
        async def pause() -> None:
            async with plait.Engine(app, database, workers=False) as other:
                await other.pause_workflow("two")

        asyncio.run(pause())
        paused.set()

    @app.function(name="hold")
    async def hold(data: None, ctx: plait.StepContext) -> str:
        ran[ctx.step_key] += 1
        if ctx.step_key == "s0" and ctx.attempt == 1:
            threading.Thread(target=pause_from_elsewhere).start()
            assert paused.wait(20)
            time.sleep(1.5)  # noqa: ASYNC251  (the loop held up past a lease after the pause)
        return ctx.step_key

    @app.workflow(name="two")
    async def two(wf: plait.Workflow) -> list[str]:
        return [await wf.do("s0", hold), await wf.do("s1", hold)]

    async with engine_factory(app, lease_seconds=1.0) as engine:
        run_id = await engine.start("two")
        await eventually(lambda: _is(engine, run_id, "paused"), timeout=20, what="the run paused")
        assert ran == {"s0": 1}
        await engine.resume_workflow("two")
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed" and run.output == ["s0", "s1"]
    assert ran == {"s0": 1, "s1": 1}


async def test_a_paused_queue_holds_the_steps_of_its_functions(engine_factory: Any) -> None:
    """``@app.function(queue="emails")`` is a step admitted through queue ``emails``:
    pausing the queue holds those steps in a run of any queue (it held only runs started
    on the queue, and its functions' steps went on), and its resume lets them go."""
    app = plait.App("emails")
    sent: list[int] = []

    @app.function(queue="emails")
    async def send(n: int) -> int:
        sent.append(n)
        return n

    @app.workflow(name="notify")
    async def notify(wf: plait.Workflow) -> list[int]:
        return [await wf.do(f"send {n}", send, n) for n in range(3)]

    async with engine_factory(app) as engine:
        await engine.pause_queue("emails")
        run_id = await engine.start("notify")

        async def enqueued() -> bool:
            steps = await engine.get_steps(run_id)
            return [s.key for s in steps] == ["send 0"]

        await eventually(enqueued, what="the first step on the job table")
        await asyncio.sleep(0.5)  # the worker polls meanwhile: the step may not start
        assert sent == []
        assert await engine.waiting_on(run_id) == plait.WaitingOn(
            "paused_queue",
            "emails",
            "step 'send 0' is admitted through queue 'emails', which is paused",
        )
        await engine.resume_queue("emails")
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed" and run.output == [0, 1, 2]
    assert sent == [0, 1, 2]
