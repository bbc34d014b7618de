"""Cancelling a step by cancelling the task that awaits it: ``task.cancel()``, a failing
task group sibling, the loser of ``asyncio.wait`` that the workflow then cancels.

The step's attempt is cancelled wherever it runs (its body gets ``CancelledError``), it
is recorded ``cancelled`` (the step fails ``CANCELLED``, no retry, no ``on_error``), a
step cancelled before it started never starts, and the run goes on at once: it never
waits for a body that ignores the cancel, whose late outcome is thrown away."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import plait
from plait import errors
from support.polling import eventually

#: the lease of these tests' engines: a step worker looks at its jobs every quarter of it
LEASE = 1.0
#: how long the deadline of the race sleeps
DEADLINE = 0.3
#: room for a loaded machine on top of what the contract promises
SLACK = 0.5


async def _run(engine: plait.Engine, workflow: str) -> plait.Run:
    return await engine.wait(await engine.start(workflow), timeout=20)


def _race_app(lines: list[tuple[str, float]], *, queued: bool = False) -> plait.App:
    """``race``: a slow step against a 0.3 s durable sleep; the loser is cancelled."""
    app = plait.App()

    @app.function(queued=queued)
    async def slow() -> str:
        lines.append(("started", time.monotonic()))
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            lines.append(("cancelled", time.monotonic()))
            raise
        lines.append(("finished", time.monotonic()))
        return "slow"

    @app.workflow
    async def race(wf: plait.Workflow) -> str:
        step = asyncio.create_task(wf.do("slow", "slow"))
        deadline = asyncio.create_task(wf.sleep("deadline", DEADLINE))
        done, pending = await asyncio.wait([step, deadline], return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return "step" if step in done else "deadline"

    return app


async def _check_race(engine: plait.Engine, lines: list[tuple[str, float]]) -> None:
    started = time.monotonic()
    run_id = await engine.start("race")
    run = await engine.wait(run_id, timeout=20)
    took = time.monotonic() - started
    assert (run.status, run.output) == ("completed", "deadline")
    # the run ends when the deadline does, not when the step would have
    assert took < DEADLINE + LEASE / 4 + SLACK, took
    # the loser's body was cancelled within a lease renewal of the deadline
    cancelled = await eventually(
        lambda: next((t for what, t in lines if what == "cancelled"), None),
        what=lambda: f"the body's cancel (lines: {lines})",
    )
    assert cancelled - started < DEADLINE + LEASE / 4 + SLACK, cancelled - started
    print(f"a {DEADLINE} s deadline won the race: run ended after {took:.3f} s, the loser's body")
    print(f"cancelled after {cancelled - started:.3f} s (lease {LEASE} s)")
    assert "finished" not in [what for what, _ in lines]
    steps = {s.key: s for s in await engine.get_steps(run_id)}
    assert steps["slow"].status == "failed"
    assert steps["slow"].error is not None
    assert steps["slow"].error["code"] == errors.CANCELLED
    assert steps["deadline"].status == "succeeded"
    history = [(a.key, a.status) for a in await engine.get_history(run_id)]
    assert ("slow", "cancelled") in history
    assert [a for a in history if a[0] == "slow"] == [("slow", "cancelled")]


async def test_the_loser_of_a_deadline_race_is_cancelled_inline(engine_factory: Any) -> None:
    """An inline step's body runs in the pass when the deadline comes due: the pass fires
    the sleep itself, the workflow cancels the step, its body gets ``CancelledError``."""
    lines: list[tuple[str, float]] = []
    async with engine_factory(_race_app(lines), lease_seconds=LEASE) as engine:
        await _check_race(engine, lines)


async def test_the_loser_of_a_deadline_race_is_cancelled_as_a_job(engine_factory: Any) -> None:
    """A job step run by this process's step worker loses its job to the cancel, and
    its body is cancelled by the next lease check."""
    lines: list[tuple[str, float]] = []
    async with engine_factory(_race_app(lines, queued=True), lease_seconds=LEASE) as engine:
        await _check_race(engine, lines)
        assert await engine.store.next_due(["slow"]) is None  # its job is gone


async def test_a_step_cancelled_before_it_started_never_starts(engine_factory: Any) -> None:
    """Cancelled in the turn that made it, by ``task.cancel()`` or by a task group
    whose sibling fails at once: no body runs, nothing is recorded."""
    app = plait.App()
    ran: list[str] = []

    @app.function
    async def effect(name: str) -> str:
        ran.append(name)
        return name

    @app.function(queued=True)
    async def queued_effect(name: str) -> str:
        ran.append(name)
        return name

    @app.workflow
    async def early(wf: plait.Workflow) -> str:
        task = asyncio.create_task(wf.do("never", "effect", "never"))
        job = asyncio.create_task(wf.do("never job", "queued_effect", "never job"))
        task.cancel()
        job.cancel()
        for waited in (task, job):
            with contextlib.suppress(asyncio.CancelledError):
                await waited
        return await wf.do("after", "effect", "after")

    async def boom() -> None:
        raise ValueError("sibling failed")

    @app.workflow
    async def group(wf: plait.Workflow) -> str:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(wf.do("in group", "effect", "in group"))
                tg.create_task(boom())
        except* ValueError:
            pass
        return await wf.do("after", "effect", "after")

    async with engine_factory(app, lease_seconds=LEASE) as engine:
        for workflow, never in (("early", {"never", "never job"}), ("group", {"in group"})):
            ran.clear()
            run = await _run(engine, workflow)
            assert (run.status, run.output) == ("completed", "after")
            assert ran == ["after"]
            steps = await engine.get_steps(run.id)
            assert [s.key for s in steps] == ["after"]
            assert not never & {a.key for a in await engine.get_history(run.id)}


async def test_a_failing_task_group_sibling_cancels_a_running_step(engine_factory: Any) -> None:
    """A step of a task group runs while its sibling step fails: the group cancels it,
    its body gets ``CancelledError``, and the run fails with the sibling's error at once
    (no ``on_error`` for the cancelled step)."""
    app = plait.App()
    lines: list[str] = []
    handled: list[Any] = []

    @app.function
    async def slow() -> str:
        lines.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            lines.append("cancelled")
            raise
        return "slow"

    @app.function
    async def failing() -> None:
        await asyncio.sleep(0.05)
        raise plait.NonRetryableError("declined")

    @app.function
    def compensate(data: Any) -> None:
        handled.append(data)

    @app.workflow
    async def group(wf: plait.Workflow) -> str:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(wf.do("slow", "slow", on_error="compensate"))
            tg.create_task(wf.do("failing", "failing"))
        return "done"

    async with engine_factory(app, lease_seconds=LEASE) as engine:
        started = time.monotonic()
        run_id = await engine.start("group")
        run = await engine.wait(run_id, timeout=20)
        assert time.monotonic() - started < 5
        assert run.status == "failed"
        assert run.error is not None and run.error["step"] == "failing"
        await eventually(lambda: "cancelled" in lines, what="the body's cancel")
        steps = {s.key: s for s in await engine.get_steps(run_id)}
        assert steps["slow"].status == "failed"
        assert steps["slow"].error is not None
        assert steps["slow"].error["code"] == errors.CANCELLED
        assert "slow:on_error" not in steps and handled == []
        history = [(a.key, a.status) for a in await engine.get_history(run_id)]
        assert ("slow", "cancelled") in history


async def test_a_run_replays_with_a_cancelled_step_after_a_restart(engine_factory: Any) -> None:
    """The cancelled step stays in the run's history; a new engine replays the run (the
    workflow cancels the step again at the same point) and finishes it without running
    the body again."""
    lines: list[tuple[str, float]] = []

    def app_() -> plait.App:
        app = _race_app(lines)

        @app.workflow
        async def then_wait(wf: plait.Workflow) -> list[str]:
            step = asyncio.create_task(wf.do("slow", "slow"))
            deadline = asyncio.create_task(wf.sleep("deadline", DEADLINE))
            await asyncio.wait([step, deadline], return_when=asyncio.FIRST_COMPLETED)
            step.cancel()
            outcome = "cancelled"
            try:
                await step
                outcome = "finished"
            except asyncio.CancelledError:
                pass
            go = await wf.wait_for_event("go")
            return [outcome, go]

        return app

    async with engine_factory(app_(), lease_seconds=LEASE) as engine:
        run_id = await engine.start("then_wait")

        async def cancelled() -> bool:
            return any(a.status == "cancelled" for a in await engine.get_history(run_id))

        await eventually(cancelled, what="the step's cancel")
        before = await engine.get_history(run_id)
    starts = len([what for what, _ in lines if what == "started"])
    async with engine_factory(app_(), lease_seconds=LEASE) as engine:
        await engine.send_event(run_id, "go", "went")
        run = await engine.wait(run_id, timeout=20)
        assert (run.status, run.output) == ("completed", ["cancelled", "went"])
        after = await engine.get_history(run_id)
        assert [(a.key, a.attempt, a.status) for a in after if a.key == "slow"] == [
            (a.key, a.attempt, a.status) for a in before if a.key == "slow"
        ]
    assert len([what for what, _ in lines if what == "started"]) == starts == 1


async def test_a_sync_body_runs_on_and_its_late_outcome_is_discarded(
    engine_factory: Any,
) -> None:
    """A sync body cannot be interrupted: the run goes on without it, and what it returns
    when its thread ends is not written over the cancelled record."""
    app = plait.App()
    release = threading.Event()
    returned = threading.Event()

    @app.function
    def blocking() -> str:
        release.wait(20)
        returned.set()
        return "late"

    @app.workflow
    async def race(wf: plait.Workflow) -> str:
        step = asyncio.create_task(wf.do("blocking", "blocking"))
        deadline = asyncio.create_task(wf.sleep("deadline", DEADLINE))
        done, pending = await asyncio.wait([step, deadline], return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return "step" if step in done else "deadline"

    async with engine_factory(app, lease_seconds=LEASE) as engine:
        started = time.monotonic()
        run_id = await engine.start("race")
        run = await engine.wait(run_id, timeout=20)
        assert (run.status, run.output) == ("completed", "deadline")
        assert time.monotonic() - started < DEADLINE + LEASE / 4 + SLACK
        assert not returned.is_set()
        release.set()
        await eventually(returned.is_set, what="the thread's return")
        await asyncio.sleep(0)  # the body's task hands its outcome on now, if anywhere
        steps = {s.key: s for s in await engine.get_steps(run_id)}
        assert steps["blocking"].status == "failed"
        assert steps["blocking"].error is not None
        assert steps["blocking"].error["code"] == errors.CANCELLED
        assert [a.status for a in await engine.get_history(run_id) if a.key == "blocking"] == [
            "cancelled"
        ]


async def test_a_body_that_ignores_the_cancel_is_not_waited_for(engine_factory: Any) -> None:
    """A body that catches ``CancelledError`` and goes on: the run goes on at once, and
    the body's late result is thrown away."""
    app = plait.App()
    release = asyncio.Event()
    ended: list[str] = []

    @app.function
    async def stubborn() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await release.wait()  # goes on regardless
        ended.append("returned")
        return "late"

    @app.workflow
    async def cancel_it(wf: plait.Workflow) -> str:
        task = asyncio.create_task(wf.do("stubborn", "stubborn"))
        await wf.sleep("a moment", 0.1)
        task.cancel()
        return "went on"

    async with engine_factory(app, lease_seconds=LEASE) as engine:
        run = await _run(engine, "cancel_it")
        assert (run.status, run.output) == ("completed", "went on")
        release.set()
        await eventually(lambda: ended, what="the body's return")
        await asyncio.sleep(0.05)
        step = next(s for s in await engine.get_steps(run.id) if s.key == "stubborn")
        assert step.status == "failed" and step.output is None


async def test_a_step_nobody_awaits_still_runs(engine_factory: Any) -> None:
    """Only a cancel stops a step: one whose task nobody awaits runs to its end, and the
    run waits for it."""
    app = plait.App()
    ran: list[str] = []

    @app.function
    async def effect() -> str:
        await asyncio.sleep(0.2)
        ran.append("effect")
        return "effect"

    @app.workflow
    async def fire_and_forget(wf: plait.Workflow) -> str:
        asyncio.create_task(wf.do("effect", "effect"))  # noqa: RUF006 - on purpose
        return "returned"

    async with engine_factory(app, lease_seconds=LEASE) as engine:
        run = await _run(engine, "fire_and_forget")
        assert (run.status, run.output) == ("completed", "returned")
        assert ran == ["effect"]
        step = (await engine.get_steps(run.id))[0]
        assert step.status == "succeeded"


async def test_the_cancelled_loser_of_a_race_that_is_a_child_run_lets_the_run_end(
    engine_factory: Any,
) -> None:
    """A child workflow is a step (``wf.do("kid", "child")``): cancelled as the loser of
    a race, the child run is cancelled with its own children, and the parent goes on at
    once, instead of waiting for a child that never ends."""
    app = plait.App()

    @app.workflow
    async def grandchild(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("never")

    @app.workflow
    async def child(wf: plait.Workflow) -> Any:
        return await wf.do("grand", "grandchild")

    @app.workflow
    async def race(wf: plait.Workflow) -> str:
        step = asyncio.create_task(wf.do("kid", "child"))
        deadline = asyncio.create_task(wf.sleep("deadline", DEADLINE))
        done, pending = await asyncio.wait([step, deadline], return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await wf.sleep("after", 0.05)  # the next pass replays the cancel
        return "step" if step in done else "deadline"

    async with engine_factory(app, lease_seconds=LEASE) as engine:
        run_id = await engine.start("race")
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", "deadline")
        (kid,) = await engine.get_children(run_id)
        assert kid.status == "cancelled"
        assert kid.error is not None and kid.error["code"] == errors.WORKFLOW_CANCELLED
        (grand,) = await engine.get_children(kid.id)
        assert grand.status == "cancelled"
        step = next(s for s in await engine.get_steps(run_id) if s.key == "kid")
        assert step.status == "failed"
        assert step.error is not None and step.error["code"] == errors.CANCELLED
        history = [(a.key, a.status) for a in await engine.get_history(run_id)]
        assert [a for a in history if a[0] == "kid"] == [("kid", "cancelled")]
