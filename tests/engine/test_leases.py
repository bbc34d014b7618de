"""Leases between engines on one database: twins, restarts, suspended and failed runs."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

import pytest

import plait
from plait.runtime.ledger import Ledger
from plait.runtime.steps import MAX_INTERRUPTIONS
from plait.store.ops import Batch, StartAttempt
from support.counter import Counter
from support.polling import eventually


def _slow_app(counter: Counter, log: list[tuple[str, float, float]], seconds: float) -> plait.App:
    app = plait.App()

    @app.function(retries=0)
    async def slow(data: None, ctx: plait.StepContext) -> int:
        counter.hit("slow", ctx.attempt)
        start = time.monotonic()
        await asyncio.sleep(seconds)
        log.append((f"attempt {ctx.attempt}", start, time.monotonic()))
        return ctx.attempt

    @app.workflow
    async def flow(wf: plait.Workflow, data: None) -> int:
        return await wf.do("long", slow)

    return app


async def test_a_live_twin_with_the_same_worker_id_keeps_its_run(engine_factory) -> None:
    """A deploy may start the new worker before the old one has drained; they share a
    worker id but not a lease, so the step never runs twice at once."""
    counter = Counter()
    log: list[tuple[str, float, float]] = []
    app = _slow_app(counter, log, 1.5)
    async with engine_factory(app, worker_id="host-1", lease_seconds=1.0) as old:
        run_id = await old.start("flow")
        await eventually(lambda: _attempts(old, run_id), what="the first attempt")
        async with engine_factory(app, worker_id="host-1", lease_seconds=1.0) as new:
            await old.close(drain=5.0)
            run = await new.wait(run_id, timeout=15)
            history = await _history(new, run_id)
    assert run.status == "completed" and run.output == 1
    assert counter["slow"] == 1
    assert [(a.attempt, a.status) for a in history] == [(1, "succeeded")]


async def test_a_restart_under_the_same_worker_id_takes_over_at_once(engine_factory) -> None:
    counter = Counter()
    log: list[tuple[str, float, float]] = []
    app = _slow_app(counter, log, 0.2)
    async with engine_factory(app, workers=False) as starter:
        run_id = await starter.start("flow")
        # a worker that died holding the run: its lease is far in the future
        claimed = await starter.store.claim_run(run_id, "host-2#dead", 60.0)
        assert claimed
        began = time.monotonic()
        async with engine_factory(app, worker_id="host-2", lease_seconds=2.0) as restarted:
            run = await restarted.wait(run_id, timeout=10)
        took = time.monotonic() - began
    assert run.status == "completed"
    assert took < 5.0  # long before the 60 s lease would have run out


async def test_a_suspended_run_keeps_its_queued_step(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(queued=True)
    def work(data: None) -> str:
        counter.hit("work")
        return "worked"

    @app.workflow
    async def flow(wf: plait.Workflow, data: None) -> list[str]:
        return await asyncio.gather(wf.do("work", work), wf.do("needs", "not_deployed_yet"))

    async with engine_factory(app, workers=False) as starter:
        run_id = await starter.start("flow", inline=True)
        run = await starter.wait(run_id, timeout=10)
        assert run.status == "suspended" and run.error["code"] == "FUNCTION_NOT_FOUND"
        steps = {s.key: s for s in await starter.get_steps(run_id)}
        assert steps["work"].status == "scheduled"
        # the job survives while the run is suspended, and no worker may take it
        assert await starter.store.claim_step_jobs("probe#1", 5.0, 10, ["work"]) == []
        assert await starter.store.next_due(["work"]) is None
        async with engine_factory(app) as worker:

            @app.function(name="not_deployed_yet")
            def late(data: None) -> str:
                return "late"

            await worker.resume(run_id)
            run = await worker.wait(run_id, timeout=10)
    assert run.status == "completed" and run.output == ["worked", "late"]
    assert counter["work"] == 1


async def test_retry_requeues_queued_steps_of_a_failed_run(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(queued=True, retries=5, retry_delay="300ms")
    def slowly_flaky(data: None, ctx: plait.StepContext) -> str:
        counter.hit("flaky", ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("not yet")
        return "eventually"

    @app.function(retries=0)
    def broken(data: None) -> None:
        counter.hit("broken")
        if counter["broken"] == 1:
            raise RuntimeError("broken once")

    @app.workflow
    async def flow(wf: plait.Workflow, data: None) -> list[object]:
        return await asyncio.gather(wf.do("flaky", slowly_flaky), wf.do("broken", broken))

    async with engine_factory(app) as engine:
        run_id = await engine.start("flow")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "failed"  # while "flaky" waits for its retry
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
    assert run.status == "completed", run.error
    assert run.output == ["eventually", None]


async def _attempts(engine: plait.Engine, run_id: str) -> bool:
    return bool(await engine.store.get_history(run_id))


async def _history(engine: plait.Engine, run_id: str) -> list[plait.StepAttempt]:
    return await engine.store.get_history(run_id)


@pytest.fixture(autouse=True)
def _only_sqlite_for_twins(request: pytest.FixtureRequest) -> None:
    """The PostgreSQL store gets the same lease tokens; run there too once it has them."""
    store = request.getfixturevalue("database")
    if store.startswith("postgres"):
        from plait.store.postgres import PostgresStore

        if not hasattr(PostgresStore, "leases_of"):
            pytest.skip("PostgreSQL store without per-process lease tokens")


async def test_a_job_naming_another_function_is_rejected(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(queued=True)
    def charge_card(data: None) -> str:
        counter.hit("charge")
        return "charged"

    @app.function(queued=True)
    def delete_everything(data: None) -> None:
        counter.hit("delete")

    @app.workflow
    async def pay(wf: plait.Workflow, data: None) -> str:
        return await wf.do("charge", charge_card)

    async with engine_factory(app, workers=False) as starter:
        run_id = await starter.start("pay", inline=True)
        await eventually(lambda: _job_ready(starter), what="the queued job")
        (job,) = await starter.store.claim_step_jobs("probe#1", 5.0, 1, ["charge_card"])
        forged = dataclasses.replace(job, function="delete_everything")
        with pytest.raises(plait.StepFunctionMismatchError, match="'delete_everything'"):
            await starter.worker.begin_job(forged, "probe#1")
        steps = await starter.get_steps(run_id)
        assert steps[0].status == "scheduled" and steps[0].attempts == 0
        async with engine_factory(app) as worker:
            run = await worker.wait(run_id, timeout=10)
    assert run.status == "completed" and run.output == "charged"
    assert counter["delete"] == 0 and counter["charge"] == 1


async def _job_ready(engine: plait.Engine) -> bool:
    return await engine.store.next_due(["charge_card"]) is not None


async def test_a_step_that_kills_its_worker_every_time_is_failed(engine_factory) -> None:
    """A poison step is given up after MAX_INTERRUPTIONS interrupted attempts instead of
    taking every worker down forever."""
    app = plait.App()

    @app.workflow
    async def poison(wf: plait.Workflow, data: None) -> None:
        await wf.do("deadly", lambda: None)

    async with engine_factory(app, workers=False) as engine:
        run_id = await engine.start("poison")
        store = engine.store
        for n in range(1, MAX_INTERRUPTIONS + 1):
            # a worker claims the run, starts the attempt and dies (its lease expires)
            assert await store.claim_run(run_id, f"doomed#{n}", 0.001)
            snapshot = await store.load_pass(run_id)
            step = snapshot.steps.get("deadly")
            if step is None:
                ledger = Ledger(engine.worker, snapshot, f"doomed#{n}")
                step = ledger.new_step("deadly", "deadly", "do")
            step.attempts = n
            step.status = "running"
            await store.commit(
                Batch(run_id, [StartAttempt(step, n, "running")], fence=f"doomed#{n}")
            )
            await eventually(lambda: _lease_expired(store, run_id), what="the lease to expire")
        async with engine_factory(app) as worker:
            run = await worker.wait(run_id, timeout=10)
    assert run.status == "failed"
    assert run.error["code"] == "STEP_INTERRUPTED"
    assert f"interrupted {MAX_INTERRUPTIONS} times" in run.error["message"]


async def _lease_expired(store, run_id: str) -> bool:
    snapshot = await store.load_pass(run_id)
    return snapshot.run.lease_until is not None and snapshot.run.lease_until < time.time()


async def test_a_queued_step_that_kills_its_worker_every_time_is_failed(engine_factory) -> None:
    app = plait.App()

    @app.function(queued=True)
    def deadly(data: None) -> None: ...

    @app.workflow
    async def poison(wf: plait.Workflow, data: None) -> None:
        await wf.do("deadly", deadly)

    async with engine_factory(app, workers=False) as engine:
        run_id = await engine.start("poison", inline=True)
        store = engine.store
        await eventually(lambda: _queued(store), what="the queued job")
        for n in range(1, MAX_INTERRUPTIONS + 2):
            # a worker takes the job, starts the body and dies (its lease expires)
            jobs = await eventually(
                lambda n=n: store.claim_step_jobs(f"doomed#{n}", 0.05, 1, ["deadly"]),
                what=f"delivery {n}",
            )
            step = await engine.worker.begin_job(jobs[0], f"doomed#{n}")
            if n <= MAX_INTERRUPTIONS:
                assert step is not None and step.attempts == n
            else:
                assert step is None  # given up instead of delivered again
        async with engine_factory(app) as worker:
            run = await worker.wait(run_id, timeout=10)
    assert run.status == "failed" and run.error["code"] == "STEP_INTERRUPTED"


async def _queued(store) -> bool:
    return await store.next_due(["deadly"]) is not None


async def test_a_dead_process_on_this_machine_is_taken_over_without_waiting(
    engine_factory,
) -> None:
    import os
    import socket

    counter = Counter()
    app = _slow_app(counter, [], 0.01)
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    async with engine_factory(app, workers=False) as starter:
        run_id = await starter.start("flow")
        owner = f"host-3#{socket.gethostname()}:{gone.pid}:0000"
        assert await starter.store.claim_run(run_id, owner, 60.0)
        began = time.monotonic()
        # with 8 s leases, waiting for a missed renewal would take 2.45 s
        async with engine_factory(app, worker_id="host-3", lease_seconds=8.0) as restarted:
            run = await restarted.wait(run_id, timeout=10)
        took = time.monotonic() - began
    assert run.status == "completed"
    assert took < 1.5, took
    assert os.getpid() != gone.pid


async def test_a_renewal_that_finds_the_lease_given_back_by_the_pass_stops_nothing(
    engine_factory, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal sent while a pass's last commit gives the lease back finds the run
    released. That is the pass's own release, not a takeover: the pass ends normally and
    the run ends once, with no warning of a lost lease."""
    app = plait.App()

    @app.workflow
    async def quick(wf: plait.Workflow, data: None) -> str:
        return await wf.do("one", lambda: "done")

    async with engine_factory(app, lease_seconds=30.0) as engine:
        worker = engine.worker
        store_renew = worker.store.renew_leases
        store_commit = worker.commit
        renewed = asyncio.Event()
        raced: list[str] = []

        async def renew_leases(*args: Any, **kwargs: Any) -> Any:
            renewal = await store_renew(*args, **kwargs)
            renewed.set()
            return renewal

        async def commit(batch: Batch) -> bool:
            again = await store_commit(batch)
            if batch.release_wakeups_seen is not None:
                # the run is released now; a renewal that still holds it runs here
                raced.append(batch.run_id)
                renewed.clear()
                worker.check_leases.set()
                await renewed.wait()
            return again

        worker.store.renew_leases = renew_leases  # type: ignore[method-assign]
        worker.commit = commit
        with caplog.at_level(logging.WARNING, logger="plait.worker"):
            run_id = await engine.start("quick")
            run = await engine.wait(run_id, timeout=10)
            await eventually(lambda: not worker.driving, what="the pass to end")
    assert run.status == "completed" and run.output == "done"
    assert raced and set(raced) == {run_id}
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warned if "taken over" in w], warned
