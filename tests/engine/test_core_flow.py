"""Durable waits, children, parallel steps, cancellation and the engine's actions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import plait
from support.counter import Counter
from support.polling import eventually


async def _step(engine: plait.Engine, run_id: str, key: str) -> plait.Step | None:
    return next((s for s in await engine.get_steps(run_id) if s.key == key), None)


async def test_two_suspends_each_pause_once(engine_factory) -> None:
    app = plait.App()
    between = asyncio.Event()  # holds the run between its gates, so the duplicate
    # resume below always finds it running (not already at the second gate)

    @app.function
    async def hold(data: None) -> None:
        await between.wait()

    @app.workflow
    async def gates(wf: plait.Workflow, data: None) -> dict:
        await wf.suspend("Building")
        await wf.do("hold", hold, None)
        await wf.suspend("Awaiting approval")
        return {"ok": True}

    async with engine_factory(app) as engine:
        run_id = await engine.start("gates")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "suspended"
        assert run.error == {
            "message": "Building",
            "type": "WorkflowSuspended",
            "code": "WORKFLOW_SUSPENDED",
        }
        with pytest.raises(plait.WorkflowSuspendedError):
            await engine.run("gates", run_id=run_id, timeout=10)
        await engine.resume(run_id)
        with pytest.raises(plait.RunStateError, match="cannot resume"):
            await engine.resume(run_id)  # a duplicate wake-up does not pass the next gate
        between.set()
        run = await eventually(
            lambda: _status(engine, run_id, "suspended"), what="the second suspend"
        )
        assert run.error["message"] == "Awaiting approval"
        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == {"ok": True} and run.error is None
        keys = [s.key for s in await engine.get_steps(run_id)]
        assert keys == ["__suspend:Building", "hold", "__suspend:Awaiting approval"]


async def _status(engine: plait.Engine, run_id: str, status: str) -> plait.Run | None:
    run = await engine.get_run(run_id)
    if run.status == status and (status != "suspended" or run.error):
        return run
    return None


async def test_event_sent_before_the_wait_is_kept(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def approval(wf: plait.Workflow, data: None) -> dict:
        await wf.suspend("hold")
        decision = await wf.wait_for_event("decision")
        second = await wf.wait_for_event("decision")
        return {"first": decision, "second": second}

    async with engine_factory(app) as engine:
        run_id = await engine.start("approval")
        assert (await engine.wait(run_id, timeout=10)).status == "suspended"
        await engine.send_event(run_id, "decision", {"approved": True})
        await engine.send_event(run_id, "decision", {"approved": False})
        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.output == {"first": {"approved": True}, "second": {"approved": False}}
        assert [s.key for s in await engine.get_steps(run_id)] == [
            "__suspend:hold",
            "__event:decision",
            "__event:decision#1",
        ]


async def test_event_delivered_to_a_waiting_run_and_timeout(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def waits(wf: plait.Workflow, timeout: float) -> object:
        try:
            return await wf.wait_for_event("ping", timeout=timeout)
        except plait.EventTimeout:
            return "timed out"

    async with engine_factory(app) as engine:
        run_id = await engine.start("waits", 30)
        await eventually(lambda: _step(engine, run_id, "__event:ping"), what="the wait")
        await engine.send_event(run_id, "ping", [1, 2])
        assert (await engine.wait(run_id, timeout=10)).output == [1, 2]
        assert await engine.run("waits", 0.1, timeout=10) == "timed out"
        with pytest.raises(plait.RunStateError):
            await engine.send_event(run_id, "ping", 3)  # the run is finished
        with pytest.raises(plait.RunNotFoundError):
            await engine.send_event("no-such-run", "ping")


async def test_send_event_says_whether_the_run_was_waiting(engine_factory) -> None:
    """An event sent after its wait timed out is kept, but the sender is told that
    nobody was waiting for it."""
    app = plait.App()

    @app.workflow
    async def waits(wf: plait.Workflow, timeout: float) -> object:
        try:
            return await wf.wait_for_event("ping", timeout=timeout)
        except plait.EventTimeout:
            await wf.wait_for_event("never")
            return "unreachable"

    async with engine_factory(app) as engine:
        run_id = await engine.start("waits", 30)
        await eventually(lambda: _step(engine, run_id, "__event:ping"), what="the wait")
        assert await engine.send_event(run_id, "ping", 1) is True
        assert (await engine.wait(run_id, timeout=10)).output == 1

        late = await engine.start("waits", 0.05)
        await eventually(lambda: _step(engine, late, "__event:never"), what="the timeout")
        assert await engine.send_event(late, "ping", 2) is False


async def test_now_and_uuid_are_stable_across_replays(engine_factory) -> None:
    app = plait.App()
    seen: list[tuple[str, str]] = []

    @app.workflow
    async def stamps(wf: plait.Workflow, data: None) -> list[str]:
        now, uid = wf.now(), wf.uuid()
        seen.append((now.isoformat(), uid))
        await wf.sleep("nap", 0.05)
        return [now.isoformat(), uid]

    async with engine_factory(app) as engine:
        out = await engine.run("stamps", timeout=10)
        assert len(seen) == 2 and seen[0] == seen[1] == tuple(out)


async def test_child_workflow_once_per_parent_step(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.workflow
    async def child(wf: plait.Workflow, data: dict) -> dict:
        counter.hit("child")
        await wf.sleep("settle", 0.05)
        if data.get("fail"):
            raise RuntimeError("child broke")
        return {"y": data["x"] + 1}

    @app.workflow
    async def parent(wf: plait.Workflow, data: dict) -> dict:
        got = await wf.do("child", "child", data)
        await wf.sleep("after", 0.05)
        return got

    async with engine_factory(app) as engine:
        run_id = await engine.start("parent", {"x": 1}, owner="u1")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == {"y": 2}
        (kids) = await engine.get_children(run_id)
        assert len(kids) == 1
        kid = kids[0]
        assert kid.parent_run_id == run_id and kid.owner == "u1" and kid.status == "completed"
        step = await _step(engine, run_id, "child")
        assert step.child_run_id == kid.id and step.function == "child"
        assert step.kind == "child" and step.output == {"y": 2}
        assert counter["child"] == 2  # two passes of one child run (before and after its sleep)

        failing = await engine.start("parent", {"x": 1, "fail": True})
        run = await engine.wait(failing, timeout=10)
        assert run.status == "failed"
        assert "child broke" in run.error["message"]
        assert len(await engine.get_children(failing)) == 1


async def test_retrying_a_parent_whose_child_failed_starts_a_new_child(engine_factory) -> None:
    """As docs/concepts.md says: the retried parent step runs a new child run from its
    first step; the failed child stays as it ended."""
    broken = {"yes": True}
    counter = Counter()
    app = plait.App()

    @app.function
    def prepare(n: int) -> int:
        counter.hit("prepare")
        return n

    @app.function(retries=0)
    def finish(n: int) -> int:
        if broken["yes"]:
            raise RuntimeError("not yet")
        return n + 1

    @app.workflow
    async def child(wf: plait.Workflow, n: int) -> int:
        return await wf.do("finish", finish, await wf.do("prepare", prepare, n))

    @app.workflow
    async def parent(wf: plait.Workflow, n: int) -> int:
        return await wf.do("child", "child", n)

    async with engine_factory(app) as engine:
        run_id = await engine.start("parent", 1)
        assert (await engine.wait(run_id, timeout=10)).status == "failed"
        broken["yes"] = False
        await engine.retry(run_id)
        assert (await engine.wait(run_id, timeout=10)).output == 2
        first, second = sorted(await engine.get_children(run_id), key=lambda r: r.created_at)
        assert (first.status, second.status) == ("failed", "completed")
        assert (await _step(engine, run_id, "child")).child_run_id == second.id
    assert counter["prepare"] == 2


async def test_gather_with_a_flaky_step_and_a_fast_sibling(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(retries=3, retry_delay="200ms")
    def flaky(data: None, ctx: plait.StepContext) -> str:
        counter.hit("flaky", ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("transient")
        return "flaky ok"

    @app.function
    def fast(data: None) -> str:
        counter.hit("fast")
        return "fast ok"

    @app.function(queued=True, retries=3, retry_delay="200ms")
    def qflaky(data: None, ctx: plait.StepContext) -> str:
        counter.hit("qflaky", ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("transient")
        return "qflaky ok"

    @app.function(queued=True)
    def qfast(data: None) -> str:
        counter.hit("qfast")
        return "qfast ok"

    @app.workflow
    async def fan(wf: plait.Workflow, queued: bool) -> list[str]:
        if queued:
            return await asyncio.gather(wf.do("flaky", qflaky), wf.do("fast", qfast))
        return await asyncio.gather(wf.do("flaky", flaky), wf.do("fast", fast))

    async with engine_factory(app) as engine:
        for queued, prefix in ((False, ""), (True, "q")):
            run_id = await engine.start("fan", queued)
            run = await engine.wait(run_id, timeout=10)
            assert run.status == "completed", run.error
            assert run.output == [f"{prefix}flaky ok", f"{prefix}fast ok"]
            assert counter[f"{prefix}flaky"] == 2 and counter[f"{prefix}fast"] == 1
            steps = {s.key: s for s in await engine.get_steps(run_id)}
            assert steps["flaky"].attempts == 2 and steps["fast"].attempts == 1


async def test_gather_replays_deterministically_in_every_mode(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function
    async def slow_double(n: int) -> int:
        counter.hit("double", n)
        await asyncio.sleep(0.01 * (5 - n))  # later calls finish first
        return n * 2

    @app.function(queued=True)
    async def q_double(n: int) -> int:
        counter.hit("q", n)
        await asyncio.sleep(0.01 * (5 - n))
        return n * 2

    @app.workflow
    async def par(wf: plait.Workflow, queued: bool) -> list[int]:
        fn = q_double if queued else slow_double
        first = await asyncio.gather(*(wf.do("double", fn, n) for n in range(5)))
        await wf.sleep("nap", 0.02)
        second = await asyncio.gather(*(wf.do("double", fn, n) for n in range(5)))
        return first + second

    async with engine_factory(app) as engine:
        for queued in (False, True):
            for inline in (False, True):
                counter.counts.clear()
                run_id = await engine.start("par", queued, inline=inline)
                run = await engine.wait(run_id, timeout=10)
                assert run.output == [0, 2, 4, 6, 8] * 2
                keys = [s.key for s in await engine.get_steps(run_id)]
                assert keys[:5] == ["double", "double#1", "double#2", "double#3", "double#4"]
                assert keys[6:] == [f"double#{i}" for i in range(5, 10)]
                assert sum(counter.counts.values()) == 10


async def _until_cancelled(started: asyncio.Event, counter: Counter) -> None:
    """A step body that says it started, then runs until it is cancelled (counted)."""
    started.set()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        counter.hit("cancelled")
        raise


async def test_cancel_cascades_cancels_steps_and_disarms_timers(engine_factory) -> None:
    started = asyncio.Event()
    counter = Counter()
    app = plait.App()

    @app.function
    async def long_step(data: None) -> None:
        await _until_cancelled(started, counter)

    @app.workflow
    async def sleeper(wf: plait.Workflow, data: None) -> None:
        await wf.sleep("long nap", "1h")

    @app.workflow
    async def parent(wf: plait.Workflow, data: None) -> None:
        await asyncio.gather(wf.do("kid", "sleeper"), wf.do("work", long_step))

    async with engine_factory(app) as engine:
        run_id = await engine.start("parent")
        await asyncio.wait_for(started.wait(), 10)
        kids = await eventually(lambda: engine.get_children(run_id), what="the child run")
        await eventually(lambda: _step(engine, kids[0].id, "long nap"), what="the child's sleep")
        run = await engine.cancel(run_id, "customer left")
        assert run.status == "cancelled"
        assert run.error["code"] == "WORKFLOW_CANCELLED"
        assert run.error["message"] == "customer left"
        kid = await engine.get_run(kids[0].id)
        assert kid.status == "cancelled"
        await eventually(lambda: _counted(counter, "cancelled"), what="the step to be cancelled")
        with pytest.raises(plait.RunStateError):
            await engine.cancel(run_id)
        with pytest.raises(plait.RunStateError):
            await engine.resume(run_id)
        timers = await _timers(engine, kid.id)
        assert timers == 0
        work = await _step(engine, run_id, "work")
        assert work.status == "failed"


async def test_a_run_that_fails_cancels_the_child_runs_it_leaves(engine_factory) -> None:
    """A run that ends leaves nothing of its own running, as a cancel leaves nothing: a
    child still waiting (and its own child, and that one's timer) when a sibling step
    fails the run is cancelled with it, and the parent's step says why."""
    app = plait.App()

    @app.function(retries=0)
    async def boom(data: None) -> None:
        raise RuntimeError("boom")

    @app.workflow
    async def sleeper(wf: plait.Workflow, data: None) -> None:
        await wf.sleep("long nap", "1h")

    @app.workflow
    async def waiter(wf: plait.Workflow, data: None) -> None:
        await asyncio.gather(wf.do("grandkid", "sleeper"), wf.wait_for_event("never"))

    @app.workflow
    async def parent(wf: plait.Workflow, data: None) -> None:
        async def fail_later() -> None:
            await wf.wait_for_event("go")
            await wf.do("bad", boom)

        await asyncio.gather(wf.do("kid", "waiter"), fail_later())

    async with engine_factory(app) as engine:
        run_id = await engine.start("parent")
        kids = await eventually(lambda: engine.get_children(run_id), what="the child run")
        grandkids = await eventually(
            lambda: engine.get_children(kids[0].id), what="the grandchild run"
        )
        await eventually(
            lambda: _step(engine, grandkids[0].id, "long nap"), what="the grandchild's sleep"
        )
        assert (await engine.get_run(kids[0].id)).status == "running"
        assert await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "failed" and run.error["step"] == "bad"
        for child_id in (kids[0].id, grandkids[0].id):
            child = await engine.get_run(child_id)
            assert child.status == "cancelled"
            assert child.error["code"] == "WORKFLOW_CANCELLED"
            assert child.error["message"] == f"parent run {run_id} failed"
        assert await _timers(engine, grandkids[0].id) == 0
        kid_step = await _step(engine, run_id, "kid")
        assert kid_step.status == "failed"
        assert kid_step.error["code"] == "WORKFLOW_CANCELLED"
        assert f"parent run {run_id} failed" in kid_step.error["message"]
        with pytest.raises(plait.RunStateError, match="it is cancelled"):
            await engine.send_event(kids[0].id, "never")


async def test_a_run_that_fails_interrupts_its_childs_running_step(engine_factory) -> None:
    """The child is in the middle of a step body when a sibling fails the parent: the
    process that ended the parent stops the body at once, as a cancel does, rather than
    at its next look at its leases (a long lease here makes that look far off), so the
    child takes no further step in a run that is over."""
    started = asyncio.Event()
    counter = Counter()
    app = plait.App()

    @app.function(retries=0)
    async def boom(data: None) -> None:
        await asyncio.wait_for(started.wait(), 10)
        raise RuntimeError("boom")

    @app.function
    async def long_step(data: None) -> None:
        await _until_cancelled(started, counter)

    @app.workflow
    async def kid(wf: plait.Workflow, data: None) -> None:
        await wf.do("long", long_step)
        await wf.do("next", lambda: counter.hit("next"))

    @app.workflow
    async def parent(wf: plait.Workflow, data: None) -> None:
        await asyncio.gather(wf.do("kid", "kid"), wf.do("bad", boom))

    async with engine_factory(app, lease_seconds=120) as engine:
        run_id = await engine.start("parent")
        assert (await engine.wait(run_id, timeout=10)).status == "failed"
        (child,) = await engine.get_children(run_id)
        await eventually(lambda: _counted(counter, "cancelled"), what="the child's step")
        child = await engine.wait(child.id, timeout=10)
        assert child.status == "cancelled"
        assert child.error["message"] == f"parent run {run_id} failed"

        async def settled() -> list[plait.Step] | None:
            steps = await engine.get_steps(child.id)
            return steps if all(s.status != "running" for s in steps) else None

        steps = await eventually(settled, what="the child's steps to settle")
        assert [(s.key, s.status) for s in steps] == [("long", "failed")]
    assert counter["next"] == 0


async def _counted(counter: Counter, name: str) -> bool:
    return counter[name] > 0


async def _timers(engine: plait.Engine, run_id: str) -> int:
    store = engine.store
    if hasattr(store, "_read"):
        return await store._read(
            lambda c: c.execute(
                "SELECT count(*) FROM plait_timers WHERE run_id = ?", (run_id,)
            ).fetchone()[0]
        )
    return await store.count_timers(run_id)


async def test_cancel_from_inside(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def quits(wf: plait.Workflow, data: None) -> None:
        await wf.do("one", lambda: 1)
        raise plait.Cancel("nothing to do")

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowCancelledError, match="nothing to do") as info:
            await engine.run("quits", timeout=10)
        assert info.value.run.error["code"] == "WORKFLOW_CANCELLED"


async def test_resume_with_a_reason_releases_only_that_suspend(engine_factory) -> None:
    """A deploy that fixes a missing function must not also pass a human's gate."""
    counter = Counter()
    app = plait.App()

    @app.workflow
    async def gated(wf: plait.Workflow, data: None) -> str:
        await asyncio.gather(wf.suspend("manager approval"), wf.do("x", "late_function"))
        return "done"

    @app.workflow
    async def two_gates(wf: plait.Workflow, data: None) -> str:
        await asyncio.gather(wf.suspend("manager approval"), wf.suspend("legal"))
        return "done"

    async with engine_factory(app) as engine:
        run_id = await engine.start("gated")
        assert (await engine.wait(run_id, timeout=10)).status == "suspended"

        @app.function(name="late_function")
        def late(data: None) -> str:
            counter.hit("late")
            return "late"

        with pytest.raises(ValueError, match=r"'deploy'.*'manager approval'"):
            await engine.resume(run_id, "deploy")
        await engine.resume(run_id, "manager approval")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and counter["late"] == 1

        second = await engine.start("two_gates")
        assert (await engine.wait(second, timeout=10)).status == "suspended"
        with pytest.raises(TypeError, match="reason"):
            await engine.resume(second, 7)  # type: ignore[arg-type]
        await engine.resume(second, "legal")
        run = await eventually(
            lambda: _settled_again(engine, second), what="the run to suspend again"
        )
        assert run.status == "suspended" and run.error["message"] == "manager approval"
        legal = await _step(engine, second, "__suspend:legal")
        manager = await _step(engine, second, "__suspend:manager approval")
        assert (legal.status, manager.status) == ("succeeded", "pending")


async def _settled_again(engine: plait.Engine, run_id: str) -> plait.Run | None:
    """The run once it stopped again after a resume made it running."""
    steps = await engine.get_steps(run_id)
    run = await engine.get_run(run_id)
    released = any(s.kind == "suspend" and s.status == "succeeded" for s in steps)
    return run if released and run.status != "running" else None


async def test_missing_function_suspends_then_resumes(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function
    def first(data: None) -> int:
        counter.hit("first")
        return 1

    @app.workflow
    async def needs(wf: plait.Workflow, data: None) -> int:
        a = await wf.do("first", first)
        b = await wf.do("second", "late_function", {"a": a})
        return a + b

    async with engine_factory(app) as engine:
        run_id = await engine.start("needs")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "suspended"
        assert run.error["code"] == "FUNCTION_NOT_FOUND"
        assert "'late_function'" in run.error["message"] and "'second'" in run.error["message"]
        step = await _step(engine, run_id, "second")
        assert step.status == "pending" and step.function == "late_function"

        @app.function(name="late_function")
        def late(data: dict) -> int:
            counter.hit("late")
            return data["a"] + 1

        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == 3
        assert counter["first"] == 1 and counter["late"] == 1


@pytest.mark.parametrize("queued", [False, True])
async def test_a_function_deployed_after_it_was_missing_runs_with_its_own_options(
    engine_factory, queued: bool
) -> None:
    """Registered with retries=0, it runs once, not with the defaults the step got while
    the function was missing; registered queued, it goes through the step queue."""
    counter = Counter()
    app = plait.App()

    @app.workflow
    async def needs(wf: plait.Workflow, data: None) -> int:
        return await wf.do("late", "late_function")

    async with engine_factory(app) as engine:
        run_id = await engine.start("needs")
        assert (await engine.wait(run_id, timeout=10)).status == "suspended"

        @app.function(name="late_function", queued=queued, retries=0)
        def late(data: None, ctx: plait.StepContext) -> int:
            counter.hit("late", ctx.workflow)
            raise RuntimeError("fails once, for good")

        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=10)
        step = await _step(engine, run_id, "late")
    assert run.status == "failed"
    assert counter["late"] == 1
    assert step.retries == 0 and step.attempts == 1


async def test_inline_children_nested_deeper_than_the_concurrency_finish(
    engine_factory,
) -> None:
    """Without worker loops an inline run drives its children itself; a parent waiting
    for its child must not hold the slot the child needs."""
    app = plait.App()

    @app.workflow
    async def nest(wf: plait.Workflow, depth: int) -> int:
        if depth == 0:
            return await wf.do("leaf", lambda: 0)
        return 1 + await wf.do("child", "nest", depth - 1)

    async with engine_factory(app, workers=False, concurrency=2) as engine:
        run_id = await engine.start("nest", 4, inline=True)
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed" and run.output == 4


async def test_retry_a_failed_run_keeps_succeeded_steps(engine_factory) -> None:
    counter = Counter()
    state = {"broken": True}
    app = plait.App()

    @app.function
    def before(data: None) -> str:
        counter.hit("before")
        return "b"

    @app.function(retries=0)
    def fragile(data: None) -> str:
        counter.hit("fragile")
        if state["broken"]:
            raise RuntimeError("dependency down")
        return "f"

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> str:
        return await wf.do("before", before) + await wf.do("fragile", fragile)

    async with engine_factory(app) as engine:
        run_id = await engine.start("w")
        assert (await engine.wait(run_id, timeout=10)).status == "failed"
        with pytest.raises(plait.RunStateError):
            await engine.resume(run_id)
        state["broken"] = False
        assert (await engine.retry(run_id)).status == "running"
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == "bf"
        assert counter["before"] == 1 and counter["fragile"] == 2
        step = await _step(engine, run_id, "fragile")
        assert step.attempts == 2
        assert [a.status for a in await engine.get_history(run_id)][-2:] == ["failed", "succeeded"]


async def test_retry_after_an_event_timeout_waits_again_with_its_timeout(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def waits(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("go", timeout=0.2)

    async with engine_factory(app) as engine:
        run_id = await engine.start("waits")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "failed" and run.error and run.error["code"] == "EVENT_TIMEOUT"
        # retried and left alone, it times out again rather than wait for ever
        assert (await engine.retry(run_id)).status == "running"
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "failed" and run.error and run.error["code"] == "EVENT_TIMEOUT"
        # retried and sent the event, it goes on
        await engine.retry(run_id)
        await engine.send_event(run_id, "go", {"ok": 1})
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == {"ok": 1}


async def test_run_id_is_an_idempotency_key(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.workflow
    async def once(wf: plait.Workflow, data: int) -> int:
        return await wf.do("count", lambda: counter.hit("once"))

    async with engine_factory(app) as engine:
        first = await engine.start("once", 1, run_id="order-42")
        second = await engine.start("once", 2, run_id="order-42")
        assert first == second == "order-42"
        run = await engine.wait("order-42", timeout=10)
        assert run.input == 1 and run.output == 1
        assert len(await engine.list_runs()) == 1 and counter["once"] == 1


async def test_a_run_id_taken_by_another_workflow_is_refused(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def once(wf: plait.Workflow, data: None) -> int:
        return 1

    @app.workflow
    async def other(wf: plait.Workflow, data: None) -> int:
        return 2

    async with engine_factory(app) as engine:
        await engine.start("once", run_id="order-7")
        with pytest.raises(plait.RunIdTakenError, match=r"'order-7'.*'once'"):
            await engine.start("other", run_id="order-7")
        run = await engine.wait("order-7", timeout=10)
        assert run.workflow == "once" and run.output == 1
        assert len(await engine.list_runs()) == 1


async def test_inline_runs_on_an_engine_without_workers(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> str:
        await wf.sleep("nap", 0.05)
        return await wf.do("x", lambda: "done")

    async with engine_factory(app, workers=False) as engine:
        assert await engine.run("w", inline=True, timeout=10) == "done"
        queued = await engine.start("w")
        with pytest.raises(TimeoutError):
            await engine.wait(queued, timeout=0.3)  # nobody works the queue in this process
        async with engine_factory(app) as worker:
            assert (await worker.wait(queued, timeout=10)).output == "done"


async def test_messages_for_finished_runs_are_no_ops(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> int:
        return await wf.do("x", lambda: counter.hit("x"))

    async with engine_factory(app) as engine:
        run_id = await engine.start("w")
        await engine.wait(run_id, timeout=10)
        await engine.store.wake(run_id)
        assert not await engine.store.claim_run(run_id, "someone", 5)
        assert await engine.store.claim_due_runs("someone", 5, 10) == []
        run = await engine.get_run(run_id)
        assert run.status == "completed" and counter["x"] == 1


async def test_list_and_read_runs(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def a(wf: plait.Workflow, data: int) -> int:
        return data

    @app.workflow
    async def b(wf: plait.Workflow, data: int) -> int:
        raise ValueError("b fails")

    async with engine_factory(app) as engine:
        ids = [await engine.start("a", i) for i in range(3)] + [await engine.start("b", 9)]
        for run_id in ids:
            await engine.wait(run_id, timeout=10)
        assert [r.id for r in await engine.list_runs()] == ids[::-1]
        assert [r.id for r in await engine.list_runs(workflow="a", limit=2)] == ids[2:0:-1]
        assert [r.id for r in await engine.list_runs(workflow="a", offset=2)] == ids[:1]
        assert [r.id for r in await engine.list_runs(status="failed")] == ids[3:]
        with pytest.raises(ValueError, match="invalid status filter"):
            await engine.list_runs(status="done")
        with pytest.raises(plait.RunNotFoundError):
            await engine.get_run("missing")
        with pytest.raises(plait.RunNotFoundError):
            await engine.get_steps("missing")
        record = (await engine.get_run(ids[3])).to_dict()
        assert record["status"] == "failed" and record["error"]["type"] == "ValueError"
        assert isinstance(record["created_at"], str)


async def test_steps_run_even_when_not_awaited(engine_factory) -> None:
    """A step starts when it is called: one the workflow never awaits still runs, and the
    pass waits for it, even when the workflow returns in the same turn of the loop."""
    app = plait.App()
    ran = Counter()

    @app.function
    async def note(name: str) -> str:
        await asyncio.sleep(0.01)
        ran.hit(name)
        return name

    @app.workflow
    async def forgetful(wf: plait.Workflow, data: None) -> str:
        first = await wf.do("first", note, "first")
        wf.do("last", note, "last")  # never awaited, on purpose
        return first

    async with engine_factory(app) as engine:
        run_id = await engine.start("forgetful")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == "first"
        steps = {s.key: s.status for s in await engine.get_steps(run_id)}
        assert steps == {"first": "succeeded", "last": "succeeded"}
        assert ran.counts == {"first": 1, "last": 1}


async def test_new_run_ids_are_time_ordered_uuids(engine_factory) -> None:
    import uuid

    app = plait.App()

    @app.workflow
    async def empty(wf: plait.Workflow, data: None) -> None:
        return None

    async with engine_factory(app) as engine:
        ids = [await engine.start("empty") for _ in range(3)]
        assert all(uuid.UUID(i).version == 7 for i in ids)
        stamps = [uuid.UUID(i).int >> 80 for i in ids]  # the millisecond each was made
        assert stamps == sorted(stamps)


async def test_a_step_awaited_twice_gives_its_outcome_again(engine_factory) -> None:
    app = plait.App()

    @app.function
    async def one(n: int) -> int:
        return n + 1

    @app.function
    async def broken(n: int) -> int:
        raise ValueError("no")

    @app.workflow
    async def twice(wf: plait.Workflow, data: None) -> list:
        call = wf.do("one", one, 1)
        first = await call
        bad = wf.do("broken", broken, 1, retries=0)
        errors = []
        for _ in range(2):
            try:
                await bad
            except plait.StepError as exc:
                errors.append(exc.step_key)
        return [first, await call, errors]

    async with engine_factory(app) as engine:
        assert await engine.run("twice", timeout=10) == [2, 2, ["broken", "broken"]]


async def test_run_with_a_bad_timeout_starts_nothing(engine_factory) -> None:
    app = plait.App()
    ran: list[int] = []

    @app.workflow
    async def once(wf: plait.Workflow, data: None) -> int:
        return await wf.do("mark", lambda: ran.append(1) or 1)

    async with engine_factory(app) as engine:
        with pytest.raises(ValueError, match="timeout"):
            await engine.run("once", timeout="soon", inline=True)
        assert await engine.list_runs() == []
        # and a good one still runs it, to its end, once
        assert await engine.run("once", timeout="10s", inline=True) == 1
    assert ran == [1]


@pytest.mark.parametrize(
    ("options", "named"),
    [({"owner": ""}, "owner"), ({"owner": "a\x00b"}, "owner"), ({"inline": "yes"}, "inline")],
)
async def test_a_start_with_a_bad_owner_or_inline_stores_nothing(
    engine_factory, options: dict[str, Any], named: str
) -> None:
    """An empty owner would read as "nobody" in one check and as a user in another; an
    ``inline`` that is not a bool is a typo, not a wish."""
    app = plait.App()

    @app.workflow
    async def once(wf: plait.Workflow, data: None) -> int:
        return 1

    async with engine_factory(app) as engine:
        with pytest.raises((TypeError, ValueError), match=named):
            await engine.start("once", **options)
        with pytest.raises((TypeError, ValueError), match=named):
            await engine.start_many("once", [None, None], **options)
        assert await engine.list_runs() == []
