"""Run deadlines: ``@app.workflow(timeout=)`` and ``engine.start(..., timeout=)`` (start
wins). Once the deadline passes the run fails ``RUN_TIMEOUT`` wherever it is: asleep,
waiting for an event, in a step (whose body is cancelled), queued for admission,
suspended, paused by a brake, parked; its live children end cancelled, and a child's
deadline is never later than its parent's. The deadline is stored on the run
(``Run.deadline_at``), with its timeout (``Run.timeout``), which a retry (or a resume past
the deadline, or a continue as new) counts again from then. The process test
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


async def test_a_parked_run_fails_at_its_deadline(engine_factory) -> None:
    """A run parked ``needs_attention`` waits for a person as a suspended one does; its
    deadline runs out all the same."""
    app = plait.App()

    @app.function(retries=0, on_exhausted="park")
    def down() -> None:
        raise RuntimeError("down")

    @app.workflow(timeout="30s")
    async def parks(wf: plait.Workflow) -> str:
        await wf.do("down", "down")
        return "done"

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("parks")
        assert (await engine.wait(run_id, timeout=10)).status == "needs_attention"
        clock.move_to(clock.now() + 31)
        run = await eventually(lambda: _ended(engine, run_id), what="the parked run to time out")
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")


async def test_a_paused_run_fails_at_its_deadline(engine_factory) -> None:
    """A run a brake stopped ``paused`` has not ended: past its deadline it fails as a
    queued run of the same paused workflow does."""
    app = plait.App()
    gate = asyncio.Event()

    @app.function
    async def work() -> str:
        await asyncio.wait_for(gate.wait(), 30)
        return "worked"

    @app.workflow(timeout="30s")
    async def braked(wf: plait.Workflow) -> str:
        await wf.do("work", "work")
        await wf.do("more", lambda: "more")
        return "done"

    async def working(run_id: str) -> bool:
        step = await _step(engine, run_id, "work")
        return step is not None and step.status == "running"

    async def paused(run_id: str) -> bool:
        return (await engine.get_run(run_id)).status == "paused"

    clock = VirtualClock()
    async with engine_factory(app, clock=clock, lease_seconds=1.0) as engine:
        run_id = await engine.start("braked")
        await eventually(lambda: working(run_id), what="the first step running")
        await engine.pause_workflow("braked")
        gate.set()
        await eventually(lambda: paused(run_id), timeout=10, what="the run paused")
        queued = await engine.start("braked")  # a new run of the paused workflow waits queued
        clock.move_to(clock.now() + 31)
        other = await eventually(lambda: _ended(engine, queued), what="the queued run to time out")
        assert (other.status, _code(other)) == ("failed", "RUN_TIMEOUT")
        run = await eventually(lambda: _ended(engine, run_id), what="the paused run to time out")
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")
        more = await _step(engine, run_id, "more")
        assert more is None or more.attempts == 0  # its next step never started


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
        # capped by its parent's deadline: its timeout is the time the parent left it
        assert (parent.timeout, child.timeout) == (20.0, pytest.approx(20.0))
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
        assert (child.timeout, parent.timeout) == (5.0, 3600.0)
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


async def test_a_retried_timed_out_run_gets_its_timeout_again_from_the_retry(
    engine_factory,
) -> None:
    app = plait.App()

    @app.workflow(timeout="2s")
    async def listener(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("go")

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("listener")
        await eventually(lambda: _waiting(engine, run_id, "go"), what="the wait for 'go'")
        clock.move_to(clock.now() + 2)
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, _code(run), run.timeout) == ("failed", "RUN_TIMEOUT", 2.0)
        clock.move_to(clock.now() + 100)
        retried_at = clock.now()
        run = await engine.retry(run_id)
        assert run.status == "running" and run.deadline_at is not None
        assert run.deadline_at.timestamp() == pytest.approx(retried_at + 2, abs=1e-3)
        assert run.timeout == 2.0
        stored = await engine.get_run(run_id)
        assert (stored.deadline_at, stored.timeout) == (run.deadline_at, 2.0)
        # its work fits in the fresh deadline now: the event comes a second after the retry
        await eventually(lambda: _waiting(engine, run_id, "go"), what="the wait again")
        clock.move_to(retried_at + 1)
        await engine.send_event(run_id, "go", "in time")
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", "in time")


async def test_a_resume_before_the_deadline_keeps_it(engine_factory) -> None:
    app = plait.App()

    @app.workflow(timeout="30s")
    async def paused(wf: plait.Workflow) -> Any:
        await wf.suspend("review")
        return await wf.wait_for_event("go")

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("paused")
        suspended = await engine.wait(run_id, timeout=10)
        assert suspended.status == "suspended" and suspended.deadline_at is not None
        clock.move_to(clock.now() + 10)
        run = await engine.resume(run_id)
        assert (run.status, run.deadline_at, run.timeout) == (
            "running",
            suspended.deadline_at,
            30.0,
        )
        await eventually(lambda: _waiting(engine, run_id, "go"), what="the wait for 'go'")
        # the first deadline still holds: 20 s after the resume, not 30
        clock.move_to(clock.now() + 20)
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, _code(run)) == ("failed", "RUN_TIMEOUT")
        assert run.deadline_at == suspended.deadline_at


async def _moved_on(engine: plait.Engine, run_id: str) -> str | None:
    """The run that continued ``run_id`` once it continued as new (None: not yet)."""
    run = await engine.get_run(run_id)
    assert run.status not in ("failed", "cancelled"), run.error
    return run.continued_to if run.status == "continued" else None


async def test_a_loop_that_continues_as_new_outlives_its_first_runs_deadline(
    engine_factory,
) -> None:
    """Each run of a chain gets the timeout from its start: a run every 20 s with a 30 s
    timeout goes on for ever, where one deadline for the chain would fail it."""
    app = plait.App()

    @app.workflow(timeout="30s")
    async def looper(wf: plait.Workflow, n: int) -> int:
        await wf.sleep("tick", 20)
        if n < 3:
            await wf.continue_as_new(n + 1)
        return n

    async def ticking(run_id: str) -> bool:
        step = await _step(engine, run_id, "tick")
        return step is not None and step.status == "scheduled"

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        first = current = await engine.start("looper", 0)
        for _ in range(3):
            await eventually(lambda rid=current: ticking(rid), what="the run sleeping")
            clock.move_to(clock.now() + 20)
            continued_at = clock.now()
            current = await eventually(lambda rid=current: _moved_on(engine, rid), what="a new run")
            run = await engine.get_run(current)
            assert run.timeout == 30.0 and run.deadline_at is not None
            assert run.deadline_at.timestamp() == pytest.approx(continued_at + 30, abs=1e-3)
        await eventually(lambda: ticking(current), what="the last run sleeping")
        clock.move_to(clock.now() + 20)
        last = await engine.wait(first, timeout=10)
        assert (last.status, last.output) == ("completed", 3), last.error


async def test_a_child_that_continues_as_new_keeps_within_its_parents_deadline(
    engine_factory,
) -> None:
    """A child's new run gets its timeout again from the continue, but never a deadline
    later than its parent's."""
    app = plait.App()

    @app.workflow(timeout="20s")
    async def kid(wf: plait.Workflow, n: int) -> Any:
        await wf.sleep("tick", 15)
        if n < 2:
            await wf.continue_as_new(n + 1)
        return await wf.wait_for_event("never")

    @app.workflow(timeout="40s")
    async def elder(wf: plait.Workflow) -> Any:
        return await wf.do("kid", "kid", 0)

    async def ticking(run_id: str) -> bool:
        step = await _step(engine, run_id, "tick")
        return step is not None and step.status == "scheduled"

    clock = VirtualClock()
    async with engine_factory(app, clock=clock) as engine:
        run_id = await engine.start("elder")
        parent = await engine.get_run(run_id)
        assert parent.deadline_at is not None
        step = await eventually(lambda: _child_started(engine, run_id), what="the child run")
        child_id = step.child_run_id
        await eventually(lambda: ticking(child_id), what="the child sleeping")
        clock.move_to(clock.now() + 15)
        continued_at = clock.now()
        successor = await eventually(lambda: _moved_on(engine, child_id), what="a new run")
        # its own 20 s from the continue, within the parent's 40 s
        run = await engine.get_run(successor)
        assert run.deadline_at is not None
        assert run.deadline_at.timestamp() == pytest.approx(continued_at + 20, abs=1e-3)
        await eventually(lambda: ticking(successor), what="the new child sleeping")
        clock.move_to(clock.now() + 15)
        last = await eventually(lambda: _moved_on(engine, successor), what="the last run")
        # 20 s from this continue would pass the parent's deadline: it gets the parent's
        run = await engine.get_run(last)
        assert run.deadline_at == parent.deadline_at
        clock.move_to(parent.deadline_at.timestamp())
        parent = await engine.wait(run_id, timeout=10)
        assert (parent.status, _code(parent)) == ("failed", "RUN_TIMEOUT")
        assert (await engine.get_run(last)).status.is_terminal


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
