"""A cancel from another process races the work in hand: nothing the cancelled run's
pass or worker started may outlive it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable

import plait
from support.polling import eventually


async def _until(check: Callable[[], Awaitable[bool]], what: str, deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while not await check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_a_pass_cancelled_from_elsewhere_leaves_no_child_or_timer(engine_factory) -> None:
    """The run is cancelled by another engine while its pass runs a step; the pass then
    reaches a child run and a sleep. Neither may be started, and the pass stops there."""
    app = plait.App()
    started, release = asyncio.Event(), asyncio.Event()
    kid_ran: list[str] = []

    @app.function
    async def slow() -> str:
        started.set()
        await asyncio.wait_for(release.wait(), 10)
        return "slow done"

    @app.workflow
    async def kid(wf: plait.Workflow) -> str:
        return await wf.do("side effect", lambda: kid_ran.append("ran") or "kid")

    @app.workflow
    async def parent(wf: plait.Workflow) -> list[str]:
        await wf.do("slow", "slow")
        return await asyncio.gather(wf.do("kid", "kid"), wf.sleep("nap", 3600))

    async with (
        engine_factory(app, worker_id="runner") as runner,
        engine_factory(app, worker_id="canceller", workers=False) as other,
    ):
        run_id = await runner.start("parent")
        await asyncio.wait_for(started.wait(), 10)
        run = await other.cancel(run_id, "stop")
        assert run.status == "cancelled"
        release.set()

        async def pass_ended() -> bool:
            return run_id not in runner.worker.driving

        await _until(pass_ended, "the cancelled pass to end")
        # slow's body returned after the cancel committed: its result is kept if its end
        # commits before this process hears of the cancel, else the cancel's cut stands;
        # either way it is not left running
        assert (await runner.get_steps(run_id))[0].status in ("succeeded", "failed")
        assert await runner.get_children(run_id) == []
        assert await runner.store.next_due() is None
        assert (await runner.get_run(run_id)).status == "cancelled"
    assert kid_ran == []


async def test_a_pass_cancelled_from_elsewhere_starts_no_further_step(engine_factory) -> None:
    """The run is cancelled by another engine while its pass runs a step. The step's
    result is kept, but the step after it never starts: its body (a side effect) must not
    run in a run that already ended, and its pass stops at once instead of at the next
    lease renewal. A step running beside it in a gather is cancelled, not left running.
    A graph's next node is held back the same way, a ``for_each`` node too (it ends with
    the run, its items never start)."""
    app = plait.App()
    started, release = asyncio.Event(), asyncio.Event()
    side_effects: list[str] = []
    held: list[str] = []

    @app.function
    async def slow() -> str:
        started.set()
        await asyncio.wait_for(release.wait(), 10)
        return "slow done"

    @app.function
    async def charge() -> str:
        side_effects.append("charged")
        return "charged"

    @app.function
    async def charge_item(item: int) -> int:
        side_effects.append(f"charged {item}")
        return item

    @app.function
    async def hold() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            held.append("cancelled")
            raise
        return "held"

    @app.workflow
    async def flow(wf: plait.Workflow) -> str:
        await wf.do("slow", "slow")
        return await wf.do("charge", "charge")

    @app.workflow
    async def branches(wf: plait.Workflow) -> list[str]:
        async def then_charge() -> str:
            await wf.do("slow", "slow")
            return await wf.do("charge", "charge")

        return await asyncio.gather(wf.do("hold", "hold"), then_charge())

    app.graph(
        "graph",
        {
            "nodes": {
                "slow": {"function": "slow", "next": "charge"},
                "charge": {"function": "charge"},
            }
        },
    )
    app.graph(
        "each",
        {
            "nodes": {
                "slow": {"function": "slow", "next": "items"},
                "items": {
                    "function": "charge_item",
                    "for_each": {"$ref": "trigger", "path": "items"},
                    "input": {"$ref": "$item"},
                },
            }
        },
    )

    async with (
        engine_factory(app, worker_id="runner", lease_seconds=30.0) as runner,
        engine_factory(app, worker_id="canceller", workers=False) as other,
    ):
        for workflow in ("flow", "branches", "graph", "each"):
            started.clear()
            release.clear()
            run_id = await runner.start(workflow, {"items": [1, 2]} if workflow == "each" else None)
            await asyncio.wait_for(started.wait(), 10)
            assert (await other.cancel(run_id, "stop")).status == "cancelled"
            release.set()

            async def pass_stopped(run_id: str = run_id) -> bool:
                return run_id not in runner.worker.driving

            # far sooner than the 30 s lease renewal that would otherwise notice
            await _until(pass_stopped, f"the pass of {workflow} to stop")
            steps = {s.key: s.status for s in await runner.get_steps(run_id)}
            history = {a.key: a.status for a in await runner.get_history(run_id)}
            assert steps.pop("slow") == "succeeded" and history.pop("slow") == "succeeded"
            if workflow == "branches":
                assert held == ["cancelled"]
                assert history == {"hold": "cancelled"}
            else:
                assert history == {}  # nothing else started (a graph records what it reached)
            assert "running" not in steps.values(), steps
            assert (await runner.get_run(run_id)).status == "cancelled"
    assert side_effects == []


async def test_a_worker_that_stops_after_a_cancel_keeps_what_the_cancel_recorded(
    engine_factory,
) -> None:
    """The run is cancelled elsewhere, and its worker stops cleanly before it notices: the
    stop interrupts the step for another worker to run again, which never happens in an
    ended run. The cancel's record of the step (failed, its attempt cancelled) stays."""
    app = plait.App()
    started = asyncio.Event()

    @app.function
    async def slow() -> str:
        started.set()
        await asyncio.sleep(60)
        return "slow done"

    @app.workflow
    async def flow(wf: plait.Workflow) -> str:
        return await wf.do("slow", "slow")

    async with engine_factory(app, worker_id="canceller", workers=False) as other:
        async with engine_factory(app, worker_id="runner", lease_seconds=30.0) as runner:
            run_id = await runner.start("flow")
            await asyncio.wait_for(started.wait(), 10)
            await other.cancel(run_id, "operator")
        (step,) = await other.get_steps(run_id)
        assert (step.status, step.error and step.error["message"]) == ("failed", "operator")
        assert [a.status for a in await other.get_history(run_id)] == ["cancelled"]


async def test_cancel_from_elsewhere_interrupts_a_queued_step_in_a_worker(engine_factory) -> None:
    app = plait.App()
    started = asyncio.Event()
    stopped: list[str] = []

    @app.function(queued=True)
    async def long_job() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.append("cancelled")
            raise
        return "finished"

    @app.workflow
    async def holder(wf: plait.Workflow) -> str:
        return await wf.do("long", "long_job")

    async with (
        engine_factory(app, worker_id="worker", lease_seconds=1.0) as worker,
        engine_factory(app, worker_id="canceller", workers=False) as other,
    ):
        run_id = await other.start("holder")
        await asyncio.wait_for(started.wait(), 10)
        t0 = time.monotonic()
        await other.cancel(run_id)

        async def body_stopped() -> bool:
            return bool(stopped)

        await _until(body_stopped, "the queued step's body to be cancelled")
        assert time.monotonic() - t0 < 1.0 + 0.5  # within one lease interval

        async def attempt_recorded() -> bool:
            (step,) = await worker.get_steps(run_id)
            return step.status == "failed"

        await _until(attempt_recorded, "the step to record its cancelled attempt")
        history = await worker.get_history(run_id)
        assert [a.status for a in history] == ["cancelled"]


async def test_a_clean_stop_never_loses_a_finished_step(engine_factory, database: str) -> None:
    """Engines closed and reopened while gathers of steps run: a step whose body ran to
    its end keeps its result (a commit cut short by the stop would lose it, and the step
    would run again)."""
    app = plait.App()
    ended: dict[tuple[str, str], int] = {}

    @app.function(retries=0)
    async def work(i: int, ctx: plait.StepContext) -> int:
        await asyncio.sleep(0.005 * (i % 7))
        key = (ctx.run_id, ctx.step_key)
        ended[key] = ended.get(key, 0) + 1
        return i

    @app.workflow
    async def flow(wf: plait.Workflow, n: int) -> int:
        total = 0
        for i in range(n):
            got = await asyncio.gather(*(wf.do("step", "work", i * 3 + j) for j in range(3)))
            total += sum(got)
        return total

    engine = plait.Engine(app, database, poll_interval=0.05)
    await engine.open()
    run_ids = [await engine.start("flow", 8) for _ in range(40)]
    for _ in range(4):
        await _until(_more_ended(ended, sum(ended.values())), "more steps to end")
        await engine.close()
        engine = plait.Engine(app, database, poll_interval=0.05)
        await engine.open()
    try:
        for run_id in run_ids:
            run = await engine.wait(run_id, timeout=60)
            assert run.status == "completed" and run.output == sum(range(24)), run.error
    finally:
        await engine.close()
    twice = {key: n for key, n in ended.items() if n > 1}
    assert len(ended) == 40 * 24 and twice == {}


def _more_ended(ended: dict[tuple[str, str], int], before: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return sum(ended.values()) > before + 30

    return check


async def test_a_sync_body_that_ends_during_a_stop_keeps_its_result(
    engine_factory, database: str
) -> None:
    """A thread cannot be stopped, so a stop waits for it; when it returns, what it did is
    recorded rather than thrown away and done again."""
    app = plait.App()
    started = threading.Event()
    finished: list[str] = []

    @app.function(retries=0)
    def sync_step() -> str:
        started.set()
        time.sleep(0.2)
        finished.append("done")
        return "done"

    @app.workflow
    async def flow(wf: plait.Workflow) -> str:
        return await wf.do("s", "sync_step")

    engine = plait.Engine(app, database)
    await engine.open()
    run_id = await engine.start("flow")
    await asyncio.to_thread(started.wait, 10)
    await engine.close()
    async with engine_factory(app) as again:
        run = await again.wait(run_id, timeout=10)
        history = await again.get_history(run_id)
    assert run.status == "completed" and run.output == "done"
    assert finished == ["done"]
    assert [(a.attempt, a.status) for a in history] == [(1, "succeeded")]


async def test_a_pass_cancelled_twice_records_its_steps_before_it_ends(
    engine_factory, database: str
) -> None:
    """A second cancel on top of the first (a stop while the run's cancel from elsewhere
    is being handled, or asyncio's own shutdown) must not end the pass while the record of
    its steps is still on its way: the engine would close the store under it, and a step
    whose body ran to its end would run again."""
    app = plait.App()
    started, let_go = threading.Event(), threading.Event()
    ran: dict[str, int] = {}

    @app.function(retries=0)
    async def quick() -> str:
        ran["quick"] = ran.get("quick", 0) + 1
        return "quick"

    @app.function(retries=0)
    def slow() -> str:
        started.set()
        let_go.wait(10)
        ran["slow"] = ran.get("slow", 0) + 1
        return "slow"

    @app.workflow
    async def flow(wf: plait.Workflow) -> list[str]:
        return await asyncio.gather(wf.do("q", "quick"), wf.do("s", "slow"))

    engine = plait.Engine(app, database)
    await engine.open()
    try:
        run_id = await engine.start("flow")
        await asyncio.to_thread(started.wait, 10)

        async def quick_ran() -> bool:
            return ran.get("quick") == 1

        await _until(quick_ran, "the quick step to run")
        driving = engine.worker.driving[run_id]
        driving.cancel()
        await asyncio.sleep(0)  # the first cancel is being handled: the pass records
        driving.cancel()
        # a bounded look for something that must not happen: the pass ending while the
        # sync step's thread, and the record of what it did, are still to come
        done, _ = await asyncio.wait([driving], timeout=0.3)
        assert not done
    finally:
        let_go.set()
    await asyncio.wait([driving], timeout=10)
    await engine.close()
    async with engine_factory(app) as again:
        run = await again.wait(run_id, timeout=10)
    assert run.status == "completed" and run.output == ["quick", "slow"], run.error
    assert ran == {"quick": 1, "slow": 1}


def _stubborn_app(started: asyncio.Event, release: asyncio.Event) -> plait.App:
    """A step body that catches the cancels of its task and goes on until ``release``
    (a client library that swallows cancellation does this), then returns."""
    app = plait.App()

    @app.function(retries=0)
    async def stubborn(data: None, ctx: plait.StepContext) -> dict[str, int]:
        started.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        return {"from_attempt": ctx.attempt}

    @app.workflow
    async def job(wf: plait.Workflow) -> dict[str, int]:
        return await wf.do("s", "stubborn")

    return app


async def test_a_body_that_swallows_its_runs_cancel_does_not_write_over_it(engine_factory) -> None:
    """The run is cancelled while its body runs; the body catches the cancel and returns
    later. The attempt stays cancelled: its late result is not written over the cancel
    (it was, with the step ``succeeded`` in a cancelled run)."""
    started, release = asyncio.Event(), asyncio.Event()
    async with engine_factory(_stubborn_app(started, release)) as engine:
        run_id = await engine.start("job")
        await asyncio.wait_for(started.wait(), 10)
        cancelling = asyncio.create_task(engine.cancel(run_id))

        async def cut() -> bool:
            return (await engine.get_run(run_id)).status == "cancelled"

        await eventually(cut, what="the run cancelled")
        release.set()
        await asyncio.wait_for(cancelling, 10)
        await eventually(lambda: run_id not in engine.worker.driving, what="the pass ended")
        history = await engine.get_history(run_id)
        (step,) = await engine.get_steps(run_id)
        run = await engine.get_run(run_id)
    assert run.status == "cancelled"
    assert [(a.attempt, a.status) for a in history] == [(1, "cancelled")]
    assert step.status != "succeeded" and step.output is None


async def test_a_retry_after_a_deadline_a_body_outlived_runs_the_step_again(
    engine_factory,
) -> None:
    """The run's deadline passes while a body that swallows the cancel runs; the body
    returns afterwards. A retry of the run starts a new attempt, and the run's output is
    that attempt's, not the cancelled one's (the retry completed at once with it)."""
    started, release = asyncio.Event(), asyncio.Event()
    async with engine_factory(_stubborn_app(started, release)) as engine:
        run_id = await _past_its_deadline(engine, started)
        release.set()
        await eventually(lambda: run_id not in engine.worker.driving, what="the pass ended")
        assert [(a.attempt, a.status) for a in await engine.get_history(run_id)] == [
            (1, "cancelled")
        ]
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        history = await engine.get_history(run_id)
    assert run.status == "completed" and run.output == {"from_attempt": 2}, (run, history)
    assert [(a.attempt, a.status) for a in history] == [(1, "cancelled"), (2, "succeeded")]


async def test_a_body_whose_task_group_failed_is_no_stopped_body(engine_factory) -> None:
    """On Python 3.11 a task group whose child fails leaves its task counting a cancel
    (``cancelling()``) after the group raised: nobody stopped the step, and its fallback
    result is its result (it was taken for a swallowed stop, and the run failed
    ``WORKFLOW_BLOCKED`` with both steps recorded done)."""
    app = plait.App()
    release = asyncio.Event()

    async def fails() -> None:
        raise ValueError("boom")

    @app.function
    async def quirky(data: None) -> str:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(fails())
                await asyncio.sleep(0)  # the child fails while the group waits
        except ExceptionGroup:
            release.set()
            return "fallback"
        return "no error"

    @app.function
    async def beside(data: None) -> str:
        await asyncio.wait_for(release.wait(), 10)
        return "beside"

    @app.workflow
    async def both(wf: plait.Workflow) -> list[str]:
        return list(await asyncio.gather(wf.do("q", quirky), wf.do("b", beside)))

    async with engine_factory(app) as engine:
        run_id = await engine.start("both")
        run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed" and run.output == ["fallback", "beside"], run.error


async def test_a_retry_waits_for_the_pass_a_swallowed_cancel_kept_going(engine_factory) -> None:
    """Retried at once after its deadline, while its body (which swallows the cancel)
    still runs here: the retry waits for that pass to end, so its last commit does not
    land in the reopened run (the step was cancelled again and the retried run failed)."""
    started, release = asyncio.Event(), asyncio.Event()
    async with engine_factory(_stubborn_app(started, release)) as engine:
        run_id = await _past_its_deadline(engine, started)
        retrying = asyncio.create_task(engine.retry(run_id))
        await asyncio.sleep(0)
        assert not retrying.done()
        release.set()
        await asyncio.wait_for(retrying, 10)
        run = await engine.wait(run_id, timeout=10)
        history = await engine.get_history(run_id)
    assert run.status == "completed" and run.output == {"from_attempt": 2}, (run, history)
    assert [(a.attempt, a.status) for a in history] == [(1, "cancelled"), (2, "succeeded")]


async def _past_its_deadline(engine: plait.Engine, started: asyncio.Event) -> str:
    """A run of ``_stubborn_app`` with a deadline of 0.5 s, once it has failed with it
    while its body still runs."""
    run_id = await engine.start("job", timeout=0.5)
    await asyncio.wait_for(started.wait(), 10)

    async def timed_out() -> bool:
        return (await engine.get_run(run_id)).status == "failed"

    await eventually(timed_out, what="the run's deadline")
    return run_id
