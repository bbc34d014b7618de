"""Queued runs and schedules at the store: admission within limits, de-duplication keys,
delayed starts, and a schedule's compare-and-set, on every store."""

from __future__ import annotations

import asyncio
import time

import pytest

from plait.store import Store
from plait.store.ops import EndRun
from plait.store.rows import NewRun, QueueLimits, ScheduleRow, StepJob
from support.polling import eventually

from .rows import CUT, write


def queued(run_id: str, **fields: object) -> NewRun:
    fields.setdefault("status", "queued")
    return NewRun(run_id, "wf", "workflow", None, "null", **fields)  # type: ignore[arg-type]


async def end(store: Store, run_id: str) -> None:
    await write(store, run_id, EndRun("completed", "null"))


async def test_a_queued_run_waits_for_admission(store: Store) -> None:
    run, created = await store.create_run(queued("r1", queue="q"))
    assert created and run.status == "queued" and run.queue == "q"
    # not a pass: the ordinary claim leaves queued runs alone
    assert await store.claim_due_runs("w1", 60.0, 10) == []
    assert await store.next_queued() is not None
    assert await store.admit_runs("w1", 60.0, 10, [], "running") == ["r1"]
    after = await store.get_run("r1")
    assert after is not None and after.status == "running" and after.admitted_at is not None
    # admitted and leased in one write: nobody else may take it
    assert not await store.claim_run("r1", "w2", 60.0)
    assert await store.next_queued() is None


async def test_admission_holds_concurrency_until_runs_end(store: Store) -> None:
    for n in range(5):
        await store.create_run(queued(f"r{n}", queue="q"))
    limits = [QueueLimits("q", concurrency=2)]
    first = await store.admit_runs("w1", 60.0, 10, limits, "running")
    assert first == ["r0", "r1"]
    assert await store.admit_runs("w2", 60.0, 10, limits, "running") == []
    await end(store, "r0")
    assert await store.admit_runs("w2", 60.0, 10, limits, "running") == ["r2"]
    # a queue the claimer does not limit admits everything
    assert sorted(await store.admit_runs("w3", 60.0, 10, [], "running")) == ["r3", "r4"]


async def test_per_key_admits_other_keys_past_a_busy_one(store: Store) -> None:
    for n, key in enumerate(["a", "a", "a", "b", "c"]):
        await store.create_run(queued(f"r{n}", queue="q", queue_key=key))
    limits = [QueueLimits("q", concurrency=3, per_key=1)]
    assert await store.admit_runs("w1", 60.0, 10, limits, "running") == ["r0", "r3", "r4"]
    assert await store.admit_runs("w1", 60.0, 10, limits, "running") == []
    await end(store, "r0")
    assert await store.admit_runs("w1", 60.0, 10, limits, "running") == ["r1"]


async def test_higher_priority_first_then_start_order(store: Store) -> None:
    for run_id, priority in [("low", 0), ("high", 9), ("mid", 5), ("high2", 9)]:
        await store.create_run(queued(run_id, queue="q", priority=priority))
        await asyncio.sleep(0.002)
    limits = [QueueLimits("q", concurrency=1)]
    order = []
    for _ in range(4):
        (admitted,) = await store.admit_runs("w1", 60.0, 10, limits, "running")
        order.append(admitted)
        await end(store, admitted)
    assert order == ["high", "high2", "mid", "low"]


async def test_rate_admits_at_most_n_per_window(store: Store) -> None:
    for n in range(5):
        await store.create_run(queued(f"r{n}", queue="q"))
    limits = [QueueLimits("q", rate=2, window=0.5)]
    assert len(await store.admit_runs("w1", 60.0, 10, limits, "running")) == 2
    assert await store.admit_runs("w1", 60.0, 10, limits, "running") == []
    await asyncio.sleep(0.55)
    assert len(await store.admit_runs("w1", 60.0, 10, limits, "running")) == 2


async def test_a_delayed_run_is_not_admitted_early(store: Store) -> None:
    at = time.time() + 0.4
    run, _ = await store.create_run(queued("r1", not_before=at))
    assert run.status == "queued" and run.start_at is not None
    assert abs(run.start_at.timestamp() - at) < 0.01
    assert await store.admit_runs("w1", 60.0, 10, [], "running") == []
    due = await store.next_queued()
    assert due is not None and abs(due - at) < 0.01
    await asyncio.sleep(max(0.0, at - time.time()) + 0.02)
    assert await store.admit_runs("w1", 60.0, 10, [], "running") == ["r1"]


async def test_dedup_returns_the_live_run_and_frees_when_it_ends(store: Store) -> None:
    _, created = await store.create_run(queued("r1", dedup="k"))
    assert created
    again, created = await store.create_run(queued("r2", dedup="k"))
    assert not created and again.id == "r1"
    assert await store.get_run("r2") is None
    await store.admit_runs("w1", 60.0, 10, [], "running")
    await end(store, "r1")
    third, created = await store.create_run(queued("r3", dedup="k"))
    assert created and third.id == "r3"


async def test_a_queued_run_can_be_cancelled(store: Store) -> None:
    await store.create_run(queued("r1", queue="q"))
    from plait.store.ops import StepEnd

    moved = await store.cancel_run(
        "r1", "cancelled", '{"message": "no"}', StepEnd("failed", failures=1), CUT
    )
    assert moved == ["r1"]
    run = await store.get_run("r1")
    assert run is not None and run.status == "cancelled"
    assert await store.admit_runs("w1", 60.0, 10, [], "running") == []


async def test_limited_step_jobs_hold_a_slot_while_leased(store: Store) -> None:
    from plait.store.ops import EnqueueJob, PutStep

    from .rows import step

    await store.create_run(NewRun("r1", "wf", "workflow", None, "null", status="running"))
    ops = []
    for n in range(3):
        ops += [
            PutStep(step("r1", f"s{n}", status="scheduled", queued=True, function="mail")),
            EnqueueJob(f"s{n}", "mail", 0.0),
        ]
    await write(store, "r1", *ops)
    limits = [QueueLimits("emails", concurrency=1, functions=("mail",))]
    jobs = await store.claim_queue_jobs("w1", 0.3, 10, limits)
    assert [j.step_key for j in jobs] == ["s0"]
    assert isinstance(jobs[0], StepJob) and jobs[0].step is not None
    assert await store.claim_queue_jobs("w2", 0.3, 10, limits) == []
    # the holder died: its lease runs out and the slot is free again
    await asyncio.sleep(0.35)
    again = await store.claim_queue_jobs("w2", 60.0, 10, limits)
    assert [j.step_key for j in again] == ["s0"]


def schedule_row(name: str, next_tick: float) -> ScheduleRow:
    now = time.time()
    return ScheduleRow(
        name, "wf", '{"every": 1.0}', "active", "api", None, next_tick, None, None, now, now
    )


async def test_a_schedule_tick_fires_once(store: Store) -> None:
    await store.put_schedule(schedule_row("s", 100.0))
    runs = [
        NewRun("schedule:s:a", "wf", "workflow", None, "null", scheduled_at=100.0, status="running")
    ]
    assert await store.fire_schedule("s", 100.0, 101.0, runs, True) == ["schedule:s:a"]
    # a second worker that read the same next tick loses the compare-and-set
    assert await store.fire_schedule("s", 100.0, 101.0, runs, True) is None
    (row,) = await store.get_schedules("s")
    assert (row.next_tick, row.last_tick, row.last_run_id) == (101.0, 100.0, "schedule:s:a")
    assert row.last_run_status == "running"
    run = await store.get_run("schedule:s:a")
    assert run is not None and run.scheduled_at is not None


@pytest.mark.parametrize("skip", [True, False])
async def test_overlap_skip_starts_nothing_while_the_last_run_lives(
    store: Store, skip: bool
) -> None:
    await store.put_schedule(schedule_row("s", 1.0))
    first = [NewRun("s1", "wf", "workflow", None, "null", scheduled_at=1.0, status="running")]
    assert await store.fire_schedule("s", 1.0, 2.0, first, skip) == ["s1"]
    more = [
        NewRun(f"s{n}", "wf", "workflow", None, "null", scheduled_at=float(n), status="running")
        for n in (2, 3)
    ]
    started = await store.fire_schedule("s", 2.0, 4.0, more, skip)
    assert started == ([] if skip else ["s2", "s3"])
    (row,) = await store.get_schedules("s")
    assert row.next_tick == 4.0


async def test_put_schedule_keeps_status_unless_the_definition_changes(store: Store) -> None:
    assert await store.put_schedule(schedule_row("s", 10.0))
    assert not await store.put_schedule(schedule_row("s", 20.0))
    paused = await store.set_schedule_status("s", "paused", None)
    assert paused is not None and paused.status == "paused"
    changed = schedule_row("s", 30.0)
    changed.definition = '{"every": 2.0}'
    assert await store.put_schedule(changed)
    (row,) = await store.get_schedules("s")
    assert (row.status, row.next_tick) == ("paused", 30.0)
    assert await store.due_schedules(1e12, 10) == []
    assert await store.delete_schedule("s")
    assert not await store.delete_schedule("s")
    assert await store.get_schedules() == []


async def test_a_retried_run_of_a_queue_takes_the_status_it_is_handed(store: Store) -> None:
    """The runtime says a retried run of a queue waits for admission again; the store
    writes that status, and admission then moves it to the status admission is handed."""
    await store.create_run(queued("r1", queue="q"))
    assert await store.admit_runs("w1", 60.0, 10, [], "running") == ["r1"]
    await write(store, "r1", EndRun("failed", None, '{"message": "no"}'))
    failed = await store.load_pass("r1")
    assert failed is not None and failed.run.status == "failed"
    run = await store.reopen_run("r1", "failed", "queued", None, failed.run.wakeups, [])
    assert run is not None and run.status == "queued"
    assert await store.claim_due_runs("w2", 60.0, 10) == []
    assert await store.admit_runs("w2", 60.0, 10, [], "running") == ["r1"]
    admitted = await store.get_run("r1")
    assert admitted is not None and admitted.status == "running"


@pytest.mark.parametrize("before", [None, "pending"], ids=["new-step", "pending-step"])
async def test_a_limited_job_claimed_while_its_step_commits_comes_with_its_step(
    store: Store, database: str, before: str | None
) -> None:
    """A claim of a limited queue's jobs waits for the queue's lock inside the database.
    A job and its step committed while it waits are claimed together: the job must not
    come without its step, or with the step as it was before (``pending``), which a
    worker reads as a step that no longer waits for it and drops the job, so the step
    would wait for ever."""
    if not database.startswith("postgres"):
        pytest.skip("the claim's statement and its function's statements: PostgreSQL")
    import asyncpg

    from plait.store.ops import EnqueueJob, PutStep

    from .rows import step

    await store.create_run(NewRun("r1", "wf", "workflow", None, "null", status="running"))
    if before is not None:  # the step was written before: the job's commit moves it on
        await write(store, "r1", PutStep(step("r1", "s0", status=before, function="mail")))
    limits = [QueueLimits("emails", concurrency=1, functions=("mail",))]
    holder = await asyncpg.connect(database)
    try:
        held = holder.transaction()
        await held.start()
        await holder.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            f"{store.channel}:queue:emails",  # type: ignore[attr-defined]
        )
        claim = asyncio.create_task(store.claim_queue_jobs("w1", 60.0, 10, limits))

        async def waiting() -> bool:
            return bool(
                await holder.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory'"
                )
            )

        await eventually(waiting, what="the claim to wait for the queue's lock")
        step_row = step("r1", "s0", status="scheduled", queued=True, function="mail")
        await write(store, "r1", PutStep(step_row), EnqueueJob("s0", "mail", 0.0))
        await held.commit()
        jobs = await asyncio.wait_for(claim, 10)
    finally:
        await holder.close()
    assert [j.step_key for j in jobs] == ["s0"]
    assert jobs[0].step is not None and jobs[0].step.status == "scheduled"
    assert jobs[0].workflow == "wf"
