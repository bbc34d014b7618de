"""Run deadlines: ``@app.workflow(timeout=)`` and ``engine.start(..., timeout=)`` (start
wins). Once the deadline passes the run fails ``RUN_TIMEOUT`` wherever it is: asleep,
waiting for an event, in a step (whose body is cancelled), queued for admission,
suspended; its live children end cancelled, and a child's deadline is never later than its
parent's. The deadline is stored on the run (``Run.deadline_at``). The process test
(``tests/processes/test_deadline_crash.py``) shows it fires after its worker was killed.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

import plait
from plait.clock import VirtualClock
from support.polling import eventually

#: the engines' lease here (the default): a deadline is kept within one lease
LEASE = 2.0


def _code(run: plait.Run) -> str | None:
    return None if run.error is None else run.error.get("code")


async def _step(engine: plait.Engine, run_id: str, key: str) -> plait.Step | None:
    return next((s for s in await engine.get_steps(run_id) if s.key == key), None)


async def _waiting(engine: plait.Engine, run_id: str, event: str) -> bool:
    """Whether the run waits for ``event`` (its wait's step is scheduled)."""
    step = await _step(engine, run_id, f"__event:{event}")
    return step is not None and step.status == "scheduled"


async def test_a_sleeping_run_fails_run_timeout_within_a_lease_of_its_deadline(
    engine_factory,
) -> None:
    app = plait.App()

    @app.workflow(timeout="2s")
    async def napper(wf: plait.Workflow) -> str:
        await wf.sleep("nap", 3600)
        return "woke"

    async with engine_factory(app) as engine:
        began = time.monotonic()
        run_id = await engine.start("napper")
        run = await engine.wait(run_id, timeout=2 + LEASE + 10)
        took = time.monotonic() - began
        print(f"a 2 s deadline ended the sleeping run after {took:.3f} s")
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")
        assert run.error is not None and "deadline" in run.error["message"]
        assert run.deadline_at is not None
        # counted from the start call, a moment before the row's creation time
        assert abs((run.deadline_at - run.created_at).total_seconds() - 2.0) < 0.5
        assert 2.0 <= took <= 2.0 + LEASE
        nap = await _step(engine, run_id, "nap")
        assert nap is not None and nap.status != "succeeded"


async def test_a_run_waiting_for_an_event_fails_at_its_deadline(engine_factory) -> None:
    app = plait.App()

    @app.workflow(timeout="1h")
    async def listener(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("go")

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("listener")
        await eventually(lambda: _waiting(engine, run_id, "go"), what="the wait for 'go'")
        clock.move_to(clock.now() + 3599)
        assert (await engine.get_run(run_id)).status == "running"
        clock.move_to(clock.now() + 1)
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")
        # an event after the end changes nothing
        with pytest.raises(plait.RunStateError):
            await engine.send_event(run_id, "go", 1)


async def test_a_step_body_running_at_the_deadline_is_cancelled(engine_factory) -> None:
    app = plait.App()
    ledger: list[str] = []
    started = asyncio.Event()

    @app.function(retries=3)
    async def slow(data: Any) -> str:
        ledger.append("started")
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            ledger.append("cancelled")
            raise
        ledger.append("finished")
        return "done"

    @app.workflow(timeout="2s")
    async def busy(wf: plait.Workflow) -> str:
        return await wf.do("slow", slow)

    async with engine_factory(app) as engine:
        began = time.monotonic()
        run_id = await engine.start("busy")
        run = await engine.wait(run_id, timeout=2 + LEASE + 10)
        took = time.monotonic() - began
        print(f"a 2 s deadline ended the run in a step after {took:.3f} s")
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")
        assert took <= 2.0 + LEASE
        await eventually(lambda: "cancelled" in ledger, what="the body's CancelledError")
        assert ledger == ["started", "cancelled"]
        step = await _step(engine, run_id, "slow")
        assert step is not None and step.status == "failed"
        assert step.attempts == 1  # no retry after the deadline
        history = [a for a in await engine.get_history(run_id) if a.key == "slow"]
        assert [a.status for a in history] == ["cancelled"]


async def test_a_run_queued_for_admission_fails_at_its_deadline(engine_factory) -> None:
    app = plait.App()
    app.queue("one", concurrency=1)

    @app.workflow(queue="one")
    async def holder(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("go")

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        first = await engine.start("holder")
        await eventually(lambda: _waiting(engine, first, "go"), what="the first run's wait")
        second = await engine.start("holder", timeout="10m")
        assert (await engine.get_run(second)).status == "queued"
        clock.move_to(clock.now() + 600)
        run = await engine.wait(second, timeout=10)
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")
        # the run holding the slot has no deadline and goes on
        assert (await engine.get_run(first)).status == "running"
        await engine.send_event(first, "go", 7)
        assert (await engine.wait(first, timeout=10)).output == 7


async def test_a_suspended_run_fails_at_its_deadline(engine_factory) -> None:
    app = plait.App()

    @app.workflow(timeout="30s")
    async def paused(wf: plait.Workflow) -> str:
        await wf.suspend("review")
        return "resumed"

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("paused")
        assert (await engine.wait(run_id, timeout=10)).status == "suspended"
        clock.move_to(clock.now() + 30)
        run = await eventually(lambda: _ended(engine, run_id), what="the suspended run to time out")
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")


async def _ended(engine: plait.Engine, run_id: str) -> plait.Run | None:
    run = await engine.get_run(run_id)
    return run if run.status.is_terminal else None


def _family(clock: VirtualClock | None = None) -> plait.App:
    app = plait.App()

    @app.workflow(timeout="1h")  # later than its parent's: it gets the parent's
    async def child(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("never")

    @app.workflow(timeout="20s")
    async def parent(wf: plait.Workflow) -> Any:
        return await wf.do("kid", "child")

    return app


async def test_live_children_end_cancelled_and_never_outlive_the_parent(engine_factory) -> None:
    clock = VirtualClock()
    async with engine_factory(_family(), clock=clock) as engine:
        run_id = await engine.start("parent")
        step = await eventually(lambda: _child_started(engine, run_id), what="the child run")
        child_id = step.child_run_id
        await eventually(lambda: _waiting(engine, child_id, "never"), what="the child's wait")
        parent = await engine.get_run(run_id)
        child = await engine.get_run(child_id)
        assert parent.deadline_at is not None
        assert child.deadline_at == parent.deadline_at
        clock.move_to(clock.now() + 20)
        parent = await engine.wait(run_id, timeout=10)
        assert (parent.status, _code(parent)) == ("failed", "RUN_TIMEOUT")
        child = await engine.wait(child_id, timeout=10)
        assert (child.status, _code(child)) == ("cancelled", "WORKFLOW_CANCELLED")
        assert child.error is not None and run_id in child.error["message"]


async def _child_started(engine: plait.Engine, run_id: str) -> plait.Step | None:
    step = await _step(engine, run_id, "kid")
    return step if step is not None and step.child_run_id else None


async def test_a_child_with_an_earlier_deadline_times_out_alone(engine_factory) -> None:
    app = plait.App()

    @app.workflow(timeout="5s")
    async def quick(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("never")

    @app.workflow(timeout="1h")
    async def patient(wf: plait.Workflow) -> str:
        try:
            await wf.do("kid", "quick")
        except plait.StepError as exc:
            return exc.error["code"]
        return "no timeout"

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("patient")
        step = await eventually(lambda: _child_started(engine, run_id), what="the child run")
        await eventually(lambda: _waiting(engine, step.child_run_id, "never"), what="its wait")
        child = await engine.get_run(step.child_run_id)
        parent = await engine.get_run(run_id)
        assert child.deadline_at is not None and parent.deadline_at is not None
        assert child.deadline_at < parent.deadline_at
        clock.move_to(clock.now() + 5)
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", "RUN_TIMEOUT")
        child = await engine.get_run(step.child_run_id)
        assert (child.status, _code(child)) == ("failed", "RUN_TIMEOUT")


async def test_the_start_timeout_overrides_the_workflow_timeout(engine_factory) -> None:
    app = plait.App()

    @app.workflow(timeout="1h")
    async def job(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("go")

    @app.workflow
    async def unbounded(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("go")

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        default = await engine.get_run(await engine.start("job"))
        given = await engine.get_run(await engine.start("job", timeout=timedelta(minutes=5)))
        seconds = await engine.get_run(await engine.start("job", timeout=90))
        none = await engine.get_run(await engine.start("unbounded"))
        assert default.deadline_at is not None and given.deadline_at is not None
        assert default.deadline_at - default.created_at == timedelta(hours=1)
        assert given.deadline_at - given.created_at == timedelta(minutes=5)
        assert seconds.deadline_at is not None
        assert seconds.deadline_at - seconds.created_at == timedelta(seconds=90)
        assert none.deadline_at is None
        clock.move_to(clock.now() + 300)
        run = await engine.wait(given.id, timeout=10)
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")
        assert (await engine.get_run(default.id)).status == "running"


async def test_a_run_that_ends_first_keeps_its_end(engine_factory) -> None:
    app = plait.App()

    @app.workflow(timeout="1m")
    async def fast(wf: plait.Workflow) -> int:
        return 1

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("fast")
        assert (await engine.wait(run_id, timeout=10)).status == "completed"
        clock.move_to(clock.now() + 120)
        later = await engine.start("fast", timeout="1m")  # the loop looks again
        assert (await engine.wait(later, timeout=10)).status == "completed"
        assert (await engine.get_run(run_id)).status == "completed"


@pytest.mark.parametrize("bad", ["soon", "-2s", 0, -1, True, "0s", [1]])
def test_a_bad_workflow_timeout_is_refused_at_registration(bad: Any) -> None:
    app = plait.App()

    async def flow(wf: plait.Workflow) -> None:
        return None

    with pytest.raises(ValueError, match="invalid timeout of workflow 'flow'"):
        app.workflow(timeout=bad)(flow)
    assert "flow" not in app.workflows


async def test_a_bad_start_timeout_is_refused_and_starts_nothing(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def flow(wf: plait.Workflow) -> None:
        return None

    async with engine_factory(app) as engine:
        for bad in ("an hour", "-1s", 0, object()):
            with pytest.raises(ValueError, match="invalid timeout"):
                await engine.start("flow", timeout=bad)  # type: ignore[arg-type]
        assert await engine.list_runs() == []
