"""Queued steps: jobs claimed by step workers outside any pass."""

from __future__ import annotations

import json
import time

from plait.store import Store
from plait.store.ops import (
    CancelJob,
    EndRun,
    EnqueueJob,
    FinishAttempt,
    Op,
    PutStep,
    StartAttempt,
)
from plait.store.rows import StepJob, StepRow

from .rows import CUT, T0, error, idle, new_run, plain, step, wakeups, write

#: two step workers of one host (leases_of finds a host's leases by this prefix)
W1, W2 = "host#1", "host#2"


async def _queued(store: Store, run_id: str = "r1", key: str = "q") -> StepRow:
    """A running run with a queued step waiting for a step worker."""
    await new_run(store, run_id)
    row = step(run_id, key, queued=True, status="scheduled", function="fn")
    await write(store, run_id, PutStep(row), EnqueueJob(key, "fn", T0))
    return row


async def _claim(store: Store, owner: str = W1, lease: float = 60.0) -> StepJob:
    (job,) = await store.claim_step_jobs(owner, lease, 10, ["fn"])
    return job


def _started(row: StepRow, owner: str) -> list[Op]:
    """The start of the step's next attempt, as the runtime writes it."""
    began = row.copy()
    began.status, began.attempts = "running", row.attempts + 1
    return [StartAttempt(began, began.attempts, "running", owner)]


# -- claiming ------------------------------------------------------------------------------


async def test_claim_step_jobs_carries_the_step_row(store: Store) -> None:
    row = await _queued(store)
    job = await _claim(store)
    assert (job.run_id, job.step_key, job.function, job.deliveries) == ("r1", "q", "fn", 1)
    assert job.step is not None and plain(job.step) == plain(row)
    assert job.workflow == "wf"


async def test_claim_step_jobs_of_a_job_without_step_has_no_row(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EnqueueJob("ghost", "fn", T0))
    job = await _claim(store)
    assert job.step_key == "ghost" and job.step is None


async def test_claim_step_jobs_leases_each_job_once(store: Store) -> None:
    await _queued(store, "r1")
    await _queued(store, "r2")
    first = await store.claim_step_jobs(W1, 60.0, 1, ["fn"])
    second = await store.claim_step_jobs(W2, 60.0, 10, ["fn"])
    assert len(first) == 1 and len(second) == 1
    assert {first[0].run_id, second[0].run_id} == {"r1", "r2"}
    assert await store.claim_step_jobs("w3", 60.0, 10, ["fn"]) == []
    assert await store.claim_step_jobs("w3", 60.0, 10, []) == []


async def test_claim_step_jobs_counts_deliveries_of_an_expired_lease(store: Store) -> None:
    await _queued(store)
    assert (await _claim(store, W1, lease=-1.0)).deliveries == 1
    assert (await _claim(store, W2)).deliveries == 2


async def test_claim_step_jobs_skips_jobs_not_yet_due(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EnqueueJob("q", "fn", time.time() + 100))
    assert await store.claim_step_jobs(W1, 60.0, 10, ["fn"]) == []


async def test_claim_step_jobs_skips_runs_that_are_not_running(store: Store) -> None:
    await _queued(store, "r1")
    await write(store, "r1", EndRun("suspended", None, error("paused")))
    assert await store.claim_step_jobs(W1, 60.0, 10, ["fn"]) == []
    assert await store.next_due(["fn"]) is None


# -- an attempt's start ----------------------------------------------------------------------


async def test_begin_queued_step_writes_the_start_while_the_job_is_held(store: Store) -> None:
    row = await _queued(store)
    job = await _claim(store)
    assert await store.begin_queued_step(job, W1, _started(row, W1)) is True
    (started,) = await store.get_steps("r1")
    assert (started.status, started.attempts) == ("running", 1)
    (attempt,) = await store.get_history("r1")
    assert (attempt.attempt, attempt.status) == (1, "running")


async def test_begin_queued_step_writes_the_interruption_of_a_lost_attempt(store: Store) -> None:
    row = await _queued(store)
    job = await _claim(store, W1, lease=-1.0)
    assert await store.begin_queued_step(job, W1, _started(row, W1))
    job = await _claim(store, W2)
    assert job.step is not None and (job.step.status, job.step.attempts) == ("running", 1)
    lost = job.step.copy()
    lost.attempts = 2
    ops = [FinishAttempt(job.step, 1, "interrupted"), StartAttempt(lost, 2, "running", W2)]
    assert await store.begin_queued_step(job, W2, ops)
    history = await store.get_history("r1")
    assert [(a.attempt, a.status) for a in history] == [(1, "interrupted"), (2, "running")]


async def test_begin_queued_step_of_a_job_not_held_writes_nothing(store: Store) -> None:
    row = await _queued(store)
    job = await _claim(store, W1, lease=-1.0)
    await _claim(store, W2)  # w1's lease ran out and w2 took the job
    assert await store.begin_queued_step(job, W1, _started(row, W1)) is False
    (untouched,) = await store.get_steps("r1")
    assert (untouched.status, untouched.attempts) == ("scheduled", 0)
    assert await store.get_history("r1") == []


async def test_begin_queued_step_of_a_suspended_run_keeps_the_job(store: Store) -> None:
    row = await _queued(store)
    job = await _claim(store)
    await write(store, "r1", EndRun("suspended", None, error("paused")))
    assert await store.begin_queued_step(job, W1, _started(row, W1)) is False
    (untouched,) = await store.get_steps("r1")
    assert untouched.status == "scheduled"
    assert await store.leases_of("host", "host#other") == []
    # resumed, the job is there to claim at once: its lease was given back
    reopened = await store.reopen_run(
        "r1", "suspended", "running", None, await wakeups(store, "r1"), []
    )
    assert reopened is not None
    assert (await _claim(store, W2)).deliveries == 2


async def test_begin_queued_step_of_an_ended_run_writes_nothing(store: Store) -> None:
    row = await _queued(store)
    job = await _claim(store)
    await write(store, "r1", EndRun("cancelled", None, error("stop"), cut=CUT))
    assert await store.begin_queued_step(job, W1, _started(row, W1)) is False
    (untouched,) = await store.get_steps("r1")
    assert untouched.status == "scheduled"
    assert await store.get_history("r1") == []
    assert await store.next_due(["fn"]) is None


# -- an attempt's end, and jobs that go wrong --------------------------------------------------


async def test_finish_queued_step_writes_the_outcome_drops_the_job_and_wakes(
    store: Store,
) -> None:
    row = await _queued(store)
    job = await _claim(store)
    assert await store.begin_queued_step(job, W1, _started(row, W1))
    await idle(store, "r1")
    seen = await wakeups(store, "r1")
    done = row.copy()
    done.status, done.attempts, done.output = "succeeded", 1, '"ok"'
    assert await store.finish_queued_step(job, W1, [FinishAttempt(done, 1, "succeeded", '"ok"')])
    (finished,) = await store.get_steps("r1")
    assert (finished.status, finished.output) == ("succeeded", "ok")
    (attempt,) = await store.get_history("r1")
    assert (attempt.status, attempt.output) == ("succeeded", "ok")
    assert await wakeups(store, "r1") == seen + 1
    assert await store.claim_due_runs("w9", 60.0, 10) == ["r1"]
    assert await store.next_due(["fn"]) is None


async def test_finish_queued_step_of_a_job_not_held_writes_nothing(store: Store) -> None:
    row = await _queued(store)
    job = await _claim(store, W1, lease=-1.0)
    await _claim(store, W2)
    done = row.copy()
    done.status, done.output = "succeeded", '"late"'
    assert not await store.finish_queued_step(job, W1, [PutStep(done)])
    (untouched,) = await store.get_steps("r1")
    assert (untouched.status, untouched.output) == ("scheduled", None)


async def test_repair_job_requeues_the_job_under_another_function(store: Store) -> None:
    await _queued(store)
    job = await _claim(store)
    await store.repair_job(job, W1, "fn2")
    assert await store.claim_step_jobs(W2, 60.0, 10, ["fn"]) == []
    (repaired,) = await store.claim_step_jobs(W2, 60.0, 10, ["fn2"])
    assert (repaired.step_key, repaired.function) == ("q", "fn2")
    assert repaired.step is not None and repaired.step.function == "fn"


async def test_a_job_another_worker_holds_is_neither_repaired_nor_dropped(
    store: Store,
) -> None:
    await _queued(store)
    job = await _claim(store, lease=-1.0)
    taken = await _claim(store, owner=W2)  # the first lease ran out; another took it
    await store.repair_job(job, W1, "fn2")
    await store.drop_job(job, W1)
    assert taken.function == "fn"
    leases = await store.leases_of("host", "host#other")
    assert [(lease.kind, lease.owner) for lease in leases] == [("job", W2)]
    assert await store.claim_step_jobs(W1, 60.0, 10, ["fn2"]) == []


async def test_drop_job_removes_the_job(store: Store) -> None:
    await _queued(store)
    job = await _claim(store)
    await store.drop_job(job, W1)
    assert await store.next_due(["fn"]) is None
    assert await store.leases_of("host", "host#other") == []
    (still,) = await store.get_steps("r1")
    assert still.status == "scheduled"


# -- a job step its workflow cancelled -----------------------------------------------------


async def _row(store: Store, run_id: str = "r1", key: str = "q") -> StepRow:
    snapshot = await store.load_pass(run_id)
    assert snapshot is not None
    return snapshot.steps[key]


def _cancelled(row: StepRow, delivered: int) -> StepRow:
    """The row the pass writes for a job step its workflow cancelled."""
    cut = row.copy()
    cut.status, cut.error, cut.wake_at, cut.delivered = (
        "failed",
        error("gone", "CANCELLED"),
        None,
        delivered,
    )
    return cut


async def test_cancel_job_takes_an_unclaimed_job_off_the_table(store: Store) -> None:
    row = await _queued(store)
    await write(store, "r1", CancelJob(_cancelled(row, 3), CUT))
    assert await store.claim_step_jobs(W1, 60.0, 10, ["fn"]) == []
    stored = await _row(store)
    assert (stored.status, stored.delivered) == ("failed", 3)
    assert stored.error is not None and json.loads(stored.error)["code"] == "CANCELLED"
    assert await store.get_history("r1") == []  # no attempt began


async def test_cancel_job_closes_a_running_attempt_and_refuses_its_end(store: Store) -> None:
    row = await _queued(store)
    job = await _claim(store)
    assert await store.begin_queued_step(job, W1, _started(row, W1))
    assert await store.lost_jobs(W1, [("r1", "q")]) == set()
    await write(store, "r1", CancelJob(_cancelled(row, 0), CUT))
    assert await store.lost_jobs(W1, [("r1", "q")]) == {("r1", "q")}
    done = row.copy()
    done.status, done.attempts, done.output = "succeeded", 1, '"late"'
    assert not await store.finish_queued_step(job, W1, [FinishAttempt(done, 1, "succeeded")])
    stored = await _row(store)
    assert stored.status == "failed" and stored.output is None
    assert [(a.attempt, a.status) for a in await store.get_history("r1")] == [(1, "cancelled")]


async def test_cancel_job_keeps_the_end_of_a_step_that_ended_first(store: Store) -> None:
    """The step worker's end committed before the pass's cancel: the step keeps it, and
    takes the place in the delivery order the cancel gives it."""
    row = await _queued(store)
    job = await _claim(store)
    assert await store.begin_queued_step(job, W1, _started(row, W1))
    done = row.copy()
    done.status, done.attempts, done.output = "succeeded", 1, '"first"'
    assert await store.finish_queued_step(job, W1, [FinishAttempt(done, 1, "succeeded")])
    await write(store, "r1", CancelJob(_cancelled(row, 5), CUT))
    stored = await _row(store)
    assert (stored.status, json.loads(stored.output or ""), stored.delivered) == (
        "succeeded",
        "first",
        5,
    )
    assert [a.status for a in await store.get_history("r1")] == ["succeeded"]


async def test_lost_jobs_names_the_jobs_an_owner_no_longer_holds(store: Store) -> None:
    await _queued(store, "r1")
    await _claim(store, W1)
    await _queued(store, "r2")
    await _claim(store, W1, lease=-1.0)  # run out: another worker takes it
    assert (await _claim(store, W2)).run_id == "r2"
    asked = [("r1", "q"), ("r2", "q"), ("r3", "gone")]
    assert await store.lost_jobs(W1, asked) == {("r2", "q"), ("r3", "gone")}
    assert await store.lost_jobs(W2, asked) == {("r1", "q"), ("r3", "gone")}
    assert await store.lost_jobs(W1, []) == set()


async def test_release_leases_gives_back_what_a_stopping_owner_holds(store: Store) -> None:
    await _queued(store, "r1")
    job = await _claim(store, W1)
    await new_run(store, "r2")
    await idle(store, "r2")
    assert await store.claim_run("r2", W1, 60.0)
    await new_run(store, "r3")
    assert await store.claim_run("r3", W2, 60.0)  # another owner's lease stays
    # r1's run is not among those named: only its job is given back
    assert await store.release_leases(W1, ["r2", "r3", "gone"]) == 2
    again = await _claim(store, W2)
    assert (again.run_id, again.step_key, again.deliveries) == (job.run_id, job.step_key, 2)
    # r2 is due at once (r1 has been due since it was made)
    assert sorted(await store.claim_due_runs(W2, 60.0, 10)) == ["r1", "r2"]
    assert not await store.claim_run("r3", W1, 60.0)
    assert await store.release_leases(W1, ["r2"]) == 0
