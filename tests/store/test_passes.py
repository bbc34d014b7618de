"""What an orchestrator pass does with a store: read a snapshot, hold the run under a
lease, commit its writes as ops, give the run back."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import pytest

from plait.errors import EventNotStoredError, LeaseLostError
from plait.store import Store
from plait.store.ops import (
    Batch,
    ClearTimer,
    ConsumeEvent,
    CreateChildRun,
    EndRun,
    EnqueueJob,
    FinishAttempt,
    PutStep,
    SendEvent,
    SetState,
    SetTimer,
    StartAttempt,
)
from plait.store.rows import ClaimScope, Lease, LeaseRenewal, NewRun

from .rows import CUT, T0, error, idle, new_run, plain, step, wake_at, wakeups, write

# -- the snapshot ----------------------------------------------------------------------------


async def test_load_pass_of_an_unknown_run_is_none(store: Store) -> None:
    assert await store.load_pass("nope") is None


async def test_load_pass_reads_run_steps_events_and_state(store: Store) -> None:
    await new_run(store, "r1", input='{"n": 1}')
    written = step("r1", "a", status="succeeded", output='{"x": [1, 2]}', attempts=1)
    await write(store, "r1", PutStep(written), SetState("count", "3"), SetState("none", None))
    await new_run(store, "r2")
    await write(store, "r2", PutStep(step("r2", "other")), SetState("count", "9"))
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    run = snapshot.run
    assert (run.id, run.workflow, run.status, run.input) == ("r1", "wf", "running", '{"n": 1}')
    assert list(snapshot.steps) == ["a"]
    assert plain(snapshot.steps["a"]) == plain(written)
    assert snapshot.events == []
    assert snapshot.state == {"count": "3", "none": None}


async def test_passes_starting_at_once_each_read_their_own_run(store: Store) -> None:
    """Passes starting at once may share a read (PostgreSQL): each still gets its own
    run's steps, events and state, and an unknown run None."""
    ids = [f"r{i}" for i in range(10)]
    for run_id in ids:
        await new_run(store, run_id)
        await write(store, run_id, PutStep(step(run_id, f"k{run_id}")), SetState("n", run_id[1:]))
        await store.send_event(run_id, "e", f'"{run_id}"')
    wanted = [*ids, "missing", *ids[:3]]
    snapshots = await asyncio.gather(*(store.load_pass(run_id) for run_id in wanted))
    for run_id, snapshot in zip(wanted, snapshots, strict=True):
        if run_id == "missing":
            assert snapshot is None
            continue
        assert snapshot is not None and snapshot.run.id == run_id
        assert list(snapshot.steps) == [f"k{run_id}"]
        assert [e.payload for e in snapshot.events] == [f'"{run_id}"']
        assert snapshot.state == {"n": run_id[1:]}


async def test_list_passes_reads_a_page_of_runs_by_id_with_their_records(store: Store) -> None:
    """A page holds what load_pass reads of each run (steps, unconsumed events, state),
    only runs of the statuses, kind and workflow asked for, in id order after ``after``."""
    for n in range(5):
        run_id = f"r{n}"
        await new_run(store, run_id, status="suspended" if n % 2 else "running")
        await write(store, run_id, PutStep(step(run_id, "a")), SetState("n", str(n)))
        await store.send_event(run_id, "e", f'"{run_id}"')
    await new_run(store, "other", workflow="wf2")
    await new_run(store, "ended")
    await write(store, "ended", EndRun("completed"))
    await store.create_run(NewRun("graph", "wf", "graph", None, "{}", status="running"))
    live = ["running", "suspended"]

    page = await store.list_passes(live, "workflow", "wf", "", 3)
    assert [p.run.id for p in page] == ["r0", "r1", "r2"]
    for snapshot in page:
        expected = await store.load_pass(snapshot.run.id)
        assert expected is not None and snapshot.run == expected.run
        assert {k: plain(v) for k, v in snapshot.steps.items()} == {
            k: plain(v) for k, v in expected.steps.items()
        }
        assert snapshot.events == expected.events and snapshot.state == expected.state
    rest = await store.list_passes(live, "workflow", "wf", "r2", 3)
    assert [p.run.id for p in rest] == ["r3", "r4"]
    assert [p.run.id for p in await store.list_passes(["suspended"], "workflow", None, "", 9)] == [
        "r1",
        "r3",
    ]
    every = await store.list_passes(live, "workflow", None, "", 9)
    assert [p.run.id for p in every] == ["other", "r0", "r1", "r2", "r3", "r4"]
    assert [p.run.id for p in await store.list_passes(live, "graph", None, "", 9)] == ["graph"]


async def test_load_pass_lists_unconsumed_events_in_order(store: Store) -> None:
    await new_run(store, "r1")
    await store.send_event("r1", "paid", '{"amount": 5}')
    await store.send_event("r1", "shipped", None)
    await store.send_event("r1", "paid", '"again"')
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    events = snapshot.events
    assert [(e.name, e.payload) for e in events] == [
        ("paid", '{"amount": 5}'),
        ("shipped", None),
        ("paid", '"again"'),
    ]
    assert events[0].id < events[1].id < events[2].id
    await write(store, "r1", ConsumeEvent(events[1].id, "wait"))
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    assert [e.id for e in snapshot.events] == [events[0].id, events[2].id]


# -- leases --------------------------------------------------------------------------------


async def test_claim_run_takes_a_free_running_run_once(store: Store) -> None:
    await new_run(store, "r1")
    assert await store.claim_run("r1", "w1", 60.0)
    assert not await store.claim_run("r1", "w2", 60.0)
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.run.lease_owner == "w1"
    assert snapshot.run.lease_until is not None and snapshot.run.lease_until > time.time()


async def test_claim_run_takes_over_an_expired_lease(store: Store) -> None:
    await new_run(store, "r1")
    assert await store.claim_run("r1", "w1", -1.0)
    assert await store.claim_run("r1", "w2", 60.0)
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.run.lease_owner == "w2"


async def test_claim_run_refuses_a_run_that_is_not_running(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EndRun("completed"))
    assert not await store.claim_run("r1", "w1", 60.0)
    assert not await store.claim_run("nope", "w1", 60.0)


async def test_claim_due_runs_takes_due_unleased_runs_earliest_first(store: Store) -> None:
    for run_id in ("r1", "r2", "r3", "idle", "held", "done"):
        await new_run(store, run_id)
    await idle(store, "idle")
    assert await store.claim_run("held", "other", 60.0)
    await write(store, "done", EndRun("completed"))
    assert set(await store.claim_due_runs("w1", 60.0, 2)) == {"r1", "r2"}
    assert await store.claim_due_runs("w1", 60.0, 10) == ["r3"]
    assert await store.claim_due_runs("w2", 60.0, 10) == []
    snapshot = await store.load_pass("r3")
    assert snapshot is not None and snapshot.run.lease_owner == "w1"


async def test_claim_due_runs_takes_over_expired_leases(store: Store) -> None:
    await new_run(store, "r1")
    assert await store.claim_due_runs("w1", -1.0, 10) == ["r1"]
    assert await store.claim_due_runs("w2", 60.0, 10) == ["r1"]


async def test_claim_due_passes_returns_what_load_pass_reads_of_each_run_it_took(
    store: Store,
) -> None:
    """A worker told of a new run takes it and its snapshot in one call: each claimed run
    comes back exactly as ``load_pass`` reads it after the claim (leased to the claimer),
    and only the runs ``claim_due_runs`` would have taken are claimed."""
    for run_id in ("r1", "r2", "idle", "held", "done"):
        await new_run(store, run_id)
    await new_run(store, "elsewhere", workflow="not-in-scope")
    await new_run(store, "paused", workflow="braked")
    await write(store, "r1", PutStep(step("r1", "a", status="succeeded", output="[1]")))
    await write(store, "r1", SetState("n", "1"))
    await store.send_event("r1", "paid", '{"amount": 5}')
    await idle(store, "idle")
    assert await store.claim_run("held", "someone", 60.0)
    await write(store, "done", EndRun("completed"))
    await store.pause("workflow", "braked", "paused", "running")
    scope = ClaimScope(("wf", "braked"), False, None)
    taken = await store.claim_due_passes("w1", 60.0, 10, scope)
    assert sorted(s.run.id for s in taken) == ["r1", "r2"]
    for snapshot in taken:
        assert snapshot.run.lease_owner == "w1"
        again = await store.load_pass(snapshot.run.id)
        assert again is not None
        assert plain(snapshot.run) == plain(again.run)
        assert {k: plain(v) for k, v in snapshot.steps.items()} == {
            k: plain(v) for k, v in again.steps.items()
        }
        assert (snapshot.events, snapshot.state) == (again.events, again.state)
        assert snapshot.requests == again.requests
    (first,) = [s for s in taken if s.run.id == "r1"]
    assert list(first.steps) == ["a"] and first.state == {"n": "1"}
    assert [e.name for e in first.events] == ["paid"]
    assert await store.claim_due_passes("w2", 60.0, 10, scope) == []


async def test_claim_due_passes_takes_at_most_its_limit_and_over_expired_leases(
    store: Store,
) -> None:
    for run_id in ("r1", "r2", "r3"):
        await new_run(store, run_id)
    assert len(await store.claim_due_passes("w1", -1.0, 2)) == 2
    taken = await store.claim_due_passes("w2", 60.0, 10)
    assert sorted(s.run.id for s in taken) == ["r1", "r2", "r3"]
    assert {s.run.lease_owner for s in taken} == {"w2"}


async def test_renew_leases_extends_runs_and_jobs_and_names_ended_and_lost_runs(
    store: Store,
) -> None:
    """The runs renewed are those the worker says it holds; a lease it holds on a run it
    no longer drives is left to run out, and another worker takes that run over."""
    for run_id in ("r1", "r2", "r3"):
        await new_run(store, run_id)
    await write(store, "r1", EnqueueJob("q", "fn", T0))
    for run_id in ("r1", "r2", "r3"):
        assert await store.claim_run(run_id, "w1", -1.0)
    assert [j.step_key for j in await store.claim_step_jobs("w1", -1.0, 10, ["fn"])] == ["q"]
    await write(store, "r2", EndRun("cancelled", None, error("stop"), cut=CUT))
    renewal = await store.renew_leases("w1", 60.0, ["r1", "r2"])
    assert renewal == LeaseRenewal(frozenset({"r2"}), frozenset(), frozenset({("r1", "q")}))
    assert not await store.claim_run("r1", "w2", 60.0)
    assert await store.claim_step_jobs("w2", 60.0, 10, ["fn"]) == []
    assert await store.claim_run("r3", "w2", 60.0)
    nobody = await store.renew_leases("nobody", 60.0, ["r1", "r2", "r3"])
    assert nobody == LeaseRenewal(lost=frozenset({"r1", "r2", "r3"}))
    # r3 is w2's now: the renewal says so, and w1 must start nothing more of it
    renewal = await store.renew_leases("w1", 60.0, ["r3"])
    assert renewal == LeaseRenewal(lost=frozenset({"r3"}), jobs=frozenset({("r1", "q")}))
    assert not await store.claim_run("r3", "w3", 60.0)


async def test_leases_of_lists_a_workers_other_lives(store: Store) -> None:
    await new_run(store, "r1")
    await new_run(store, "r2")
    await write(store, "r2", EnqueueJob("q", "fn", T0))
    assert await store.claim_run("r1", "host-1#old", 60.0)
    assert await store.claim_run("r2", "host-1#new", 60.0)
    assert len(await store.claim_step_jobs("host-1#old", 60.0, 10, ["fn"])) == 1
    leases = sorted(await store.leases_of("host-1", "host-1#new"), key=lambda x: x.kind)
    assert [(x.kind, x.run_id, x.step_key, x.owner) for x in leases] == [
        ("job", "r2", "q", "host-1#old"),
        ("run", "r1", "", "host-1#old"),
    ]
    assert all(isinstance(x, Lease) and x.until > time.time() for x in leases)
    assert await store.leases_of("host-2", "host-2#new") == []
    assert await store.leases_of("host", "x") == []  # a prefix of another worker id


async def test_expire_leases_expires_only_leases_as_they_were_read(store: Store) -> None:
    await new_run(store, "r1")
    await new_run(store, "r2")
    await write(store, "r1", EnqueueJob("q", "fn", T0))
    assert await store.claim_run("r1", "host-1#old", 60.0)
    assert await store.claim_run("r2", "host-1#old", 60.0)
    assert len(await store.claim_step_jobs("host-1#old", 60.0, 10, ["fn"])) == 1
    leases = await store.leases_of("host-1", "host-1#new")
    run2 = next(x for x in leases if x.run_id == "r2")
    fresh = [x for x in leases if x is not run2]
    renewed = Lease(run2.kind, run2.run_id, run2.step_key, run2.owner, run2.until - 5.0)
    assert await store.expire_leases([*fresh, renewed]) == 2
    assert await store.expire_leases([]) == 0
    assert await store.claim_run("r1", "host-1#new", 60.0)
    assert [j.step_key for j in await store.claim_step_jobs("host-1#new", 60.0, 10, ["fn"])] == [
        "q"
    ]
    assert not await store.claim_run("r2", "host-1#new", 60.0)


# -- the writes of a pass --------------------------------------------------------------------


async def test_put_step_inserts_then_updates_every_mutable_column(store: Store) -> None:
    await new_run(store, "r1")
    first = step("r1", "a", seq=3, retries=2, retry_delay=1.5, timeout=9.0, branch="left")
    await write(store, "r1", PutStep(first))
    changed = step(
        "r1",
        "a",
        seq=7,
        status="scheduled",
        output='"half"',
        error=error("once"),
        attempts=2,
        failures=1,
        retries=3,
        retry_delay=None,
        timeout=None,
        child_run_id="c1",
        branch="right",
        queued=True,
        wake_at=T0 + 30,
        updated_at=T0 + 10,
        function="fn2",
    )
    await write(store, "r1", PutStep(changed))
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    assert plain(snapshot.steps["a"]) == {**plain(changed), "seq": 3}


async def test_what_a_step_was_reached_after_is_kept_from_its_first_write(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", PutStep(step("r1", "a", reached_after="[]")))
    await write(
        store, "r1", StartAttempt(step("r1", "b", reached_after='["a"]'), 1, "running", "w1")
    )
    await write(store, "r1", PutStep(step("r1", "old")))  # recorded before: NULL
    # later writes of a row read back without it (a claimed job's, say) leave it alone
    await write(store, "r1", PutStep(step("r1", "a", status="succeeded", reached_after=None)))
    await write(store, "r1", StartAttempt(step("r1", "b", attempts=2), 2, "running", "w1"))
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    kept = {k: plain(s)["reached_after"] for k, s in snapshot.steps.items()}
    assert kept == {"a": [], "b": ["a"], "old": None}
    read = {s.key: s.reached_after for s in await store.get_steps("r1")}
    assert read == {"a": [], "b": ["a"], "old": None}


async def test_start_attempt_writes_the_step_and_a_running_attempt(store: Store) -> None:
    await new_run(store, "r1")
    row = step("r1", "a", status="running", attempts=1)
    await write(store, "r1", StartAttempt(row, 1, "running", "w1"))
    (written,) = await store.get_steps("r1")
    assert (written.status, written.attempts) == ("running", 1)
    (attempt,) = await store.get_history("r1")
    assert (attempt.key, attempt.attempt, attempt.status, attempt.finished_at) == (
        "a",
        1,
        "running",
        None,
    )


@pytest.mark.parametrize("together", [True, False], ids=["one batch", "two batches"])
async def test_a_first_attempt_of_a_step_stored_already_starts_on_its_row(
    store: Store, together: bool
) -> None:
    # a step carried as pending by an earlier write (a gather's second branch) is
    # there when its first attempt starts: the start takes the row over, keeping
    # where and when the step was first reached, and the batch's other writes stand
    await new_run(store, "r1")
    pending = step("r1", "b", seq=1, reached_after='["a"]')
    started = step(
        "r1", "b", seq=7, status="running", attempts=1, created_at=T0 + 5, updated_at=T0 + 5
    )
    ops = (PutStep(pending), StartAttempt(started, 1, "running", "w1"))
    if together:
        await write(store, "r1", PutStep(step("r1", "a")), *ops)
    else:
        await write(store, "r1", PutStep(step("r1", "a")), ops[0])
        await write(store, "r1", ops[1])
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    b = plain(snapshot.steps["b"])
    assert (b["seq"], b["created_at"], b["reached_after"]) == (1, T0, ["a"])
    assert (b["status"], b["attempts"], b["updated_at"]) == ("running", 1, T0 + 5)
    assert set(snapshot.steps) == {"a", "b"}
    (attempt,) = await store.get_history("r1")
    assert (attempt.key, attempt.attempt, attempt.status, attempt.worker) == (
        "b",
        1,
        "running",
        "w1",
    )


async def test_finish_attempt_keeps_every_attempt_in_history(store: Store) -> None:
    await new_run(store, "r1")
    row = step("r1", "a", retries=1)
    row.status, row.attempts = "running", 1
    await write(store, "r1", StartAttempt(row, 1, "running", "w1"))
    row.status, row.failures, row.error = "scheduled", 1, error("first")
    await write(store, "r1", FinishAttempt(row, 1, "failed", None, row.error))
    row.status, row.attempts = "running", 2
    await write(store, "r1", StartAttempt(row, 2, "running", "w1"))
    row.status, row.output, row.error = "succeeded", '{"ok": true}', None
    await write(store, "r1", FinishAttempt(row, 2, "succeeded", row.output))
    (written,) = await store.get_steps("r1")
    assert (written.status, written.attempts, written.output, written.error) == (
        "succeeded",
        2,
        {"ok": True},
        None,
    )
    history = await store.get_history("r1")
    assert [(a.attempt, a.status, a.output, a.error) for a in history] == [
        (1, "failed", None, {"message": "first", "type": "Boom", "code": "BOOM"}),
        (2, "succeeded", {"ok": True}, None),
    ]
    assert all(a.finished_at is not None for a in history)
    assert history[0].started_at <= history[1].started_at


async def test_an_interrupted_attempt_is_archived_when_the_next_starts(store: Store) -> None:
    await new_run(store, "r1")
    row = step("r1", "a", status="running", attempts=1)
    await write(store, "r1", StartAttempt(row, 1, "running", "w1"))
    row.attempts = 2
    await write(
        store, "r1", FinishAttempt(row, 1, "interrupted"), StartAttempt(row, 2, "running", "w2")
    )
    history = await store.get_history("r1")
    assert [(a.attempt, a.status) for a in history] == [(1, "interrupted"), (2, "running")]


async def test_set_timer_makes_the_released_run_due_at_the_earliest_timer(store: Store) -> None:
    await new_run(store, "r1")
    assert await store.claim_run("r1", "w1", 60.0)
    soon, later = time.time() + 100, time.time() + 200
    await write(store, "r1", SetTimer("b", "sleep", later), SetTimer("a", "retry", soon))
    assert not await store.release_run("r1", "w1", await wakeups(store, "r1"))
    assert await wake_at(store, "r1") == pytest.approx(soon, abs=1e-5)
    assert await store.next_due() == pytest.approx(soon, abs=1e-5)


async def test_set_timer_again_moves_it_and_clear_timer_removes_it(store: Store) -> None:
    await new_run(store, "r1")
    at = time.time() + 100
    await write(store, "r1", SetTimer("a", "sleep", at), SetTimer("a", "sleep", at + 50))
    await write(store, "r1", SetTimer("b", "sleep", at + 70))
    assert await store.claim_run("r1", "w1", 60.0)
    assert not await store.release_run("r1", "w1", await wakeups(store, "r1"))
    assert await wake_at(store, "r1") == pytest.approx(at + 50, abs=1e-5)
    await write(store, "r1", ClearTimer("a"), ClearTimer("b"), ClearTimer("never-set"))
    assert await store.claim_run("r1", "w1", 60.0)
    assert not await store.release_run("r1", "w1", await wakeups(store, "r1"))
    assert await wake_at(store, "r1") is None


async def test_enqueue_job_queues_the_step_for_its_function(store: Store) -> None:
    await new_run(store, "r1")
    row = step("r1", "q", queued=True, status="scheduled")
    later = time.time() + 100
    await write(
        store, "r1", PutStep(row), EnqueueJob("q", "fn", T0), EnqueueJob("later", "fn", later)
    )
    assert await store.claim_step_jobs("w1", 60.0, 10, ["other"]) == []
    (job,) = await store.claim_step_jobs("w1", 1000.0, 10, ["fn", "other"])
    assert (job.run_id, job.step_key, job.function, job.deliveries) == ("r1", "q", "fn", 1)
    assert await store.next_due(["fn"]) == pytest.approx(later, abs=1e-5)


async def test_enqueue_job_again_requeues_a_held_job(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EnqueueJob("q", "fn", T0))
    assert len(await store.claim_step_jobs("w1", 60.0, 10, ["fn"])) == 1
    await write(store, "r1", EnqueueJob("q", "fn2", T0))
    (job,) = await store.claim_step_jobs("w2", 60.0, 10, ["fn2"])
    assert (job.step_key, job.function) == ("q", "fn2")


async def test_consume_event_twice_fails_and_writes_nothing(store: Store) -> None:
    await new_run(store, "r1")
    await store.send_event("r1", "go", '"x"')
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    (event,) = snapshot.events
    await write(store, "r1", ConsumeEvent(event.id, "first"))
    with pytest.raises(LeaseLostError):
        await write(store, "r1", SetState("after", "1"), ConsumeEvent(event.id, "second"))
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.events == [] and snapshot.state == {}


async def test_a_send_to_a_run_that_ended_refuses_the_whole_batch(store: Store) -> None:
    """A pass read the run it sends to live, and that run ended before the commit: the
    store takes no event and writes nothing of the batch (``EventNotStoredError``), so
    the pass fails the send instead of telling the workflow it was sent. A send that
    was stored before (a batch applied again) is no refusal, whatever became of the run."""
    await new_run(store, "sender", lease_owner="w1", lease_seconds=60.0)
    await new_run(store, "ended")
    await write(store, "ended", EndRun("cancelled"))
    for target in ("ended", "no-such-run"):
        with pytest.raises(EventNotStoredError):
            await store.commit(
                Batch(
                    "sender",
                    [
                        PutStep(step("sender", "a")),
                        SetState("s", "1"),
                        SendEvent(target, "go", '"x"', "__send:1"),
                    ],
                    fence="w1",
                )
            )
    snapshot = await store.load_pass("sender")
    assert snapshot is not None and snapshot.steps == {} and snapshot.state == {}

    await new_run(store, "live")
    batch = Batch("sender", [SetState("s", "2"), SendEvent("live", "go", '"y"', "__send:2")])
    await store.commit(dataclasses.replace(batch, fence="w1"))
    await write(store, "live", EndRun("completed"))
    await store.commit(dataclasses.replace(batch, fence="w1"))  # the same batch again
    snapshot = await store.load_pass("sender")
    assert snapshot is not None and snapshot.state == {"s": "2"}
    live = await store.load_pass("live")
    assert live is not None and [e.payload for e in live.events] == ['"y"']


async def test_create_child_run_creates_a_run_under_its_parent(store: Store) -> None:
    await new_run(store, "p")
    child = NewRun(
        "c1",
        "child",
        "workflow",
        "v3",
        '{"k": 1}',
        owner="ann",
        parent_run_id="p",
        parent_step_key="spawn",
        lease_owner="w1",
        lease_seconds=60.0,
        status="running",
    )
    await write(store, "p", CreateChildRun(child), CreateChildRun(child))
    run = await store.get_run("c1")
    assert run is not None
    assert (run.workflow, run.version, run.status, run.input, run.owner, run.parent_run_id) == (
        "child",
        "v3",
        "running",
        {"k": 1},
        "ann",
        "p",
    )
    assert not await store.claim_run("c1", "w2", 60.0)
    assert [c.id for c in await store.get_children("p")] == ["c1"]


async def test_set_state_writes_and_overwrites_values(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", SetState("a", '"one"'), SetState("b", '{"x": 1}'))
    await write(store, "r1", SetState("a", '"two"'))
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    assert {k: json.loads(v or "") for k, v in snapshot.state.items()} == {
        "a": "two",
        "b": {"x": 1},
    }


async def test_end_run_ends_a_running_run_and_drops_its_timers_and_jobs(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", SetTimer("t", "sleep", time.time() + 100), EnqueueJob("q", "fn", T0))
    await write(store, "r1", EndRun("completed", '{"total": 3}'))
    run = await store.get_run("r1")
    assert run is not None and (run.status, run.output, run.error) == (
        "completed",
        {"total": 3},
        None,
    )
    assert await wake_at(store, "r1") is None
    assert await store.claim_step_jobs("w1", 60.0, 10, ["fn"]) == []
    assert await store.next_due() is None and await store.next_due(["fn"]) is None


async def test_end_run_only_moves_a_running_run(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EndRun("failed", None, error("first")))
    await write(store, "r1", EndRun("completed", '"late"'))
    run = await store.get_run("r1")
    assert run is not None and (run.status, run.output, run.error) == (
        "failed",
        None,
        {"message": "first", "type": "Boom", "code": "BOOM"},
    )


async def test_end_run_suspended_keeps_the_run_for_a_resume(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EndRun("suspended", None, error("paused", "WORKFLOW_SUSPENDED")))
    run = await store.get_run("r1")
    assert run is not None and run.status == "suspended"
    assert run.error == {"message": "paused", "type": "Boom", "code": "WORKFLOW_SUSPENDED"}
    assert not await store.claim_run("r1", "w1", 60.0)


# -- fencing and release -------------------------------------------------------------------


async def test_a_fenced_batch_writes_while_its_owner_holds_the_lease(store: Store) -> None:
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    assert not await store.commit(Batch("r1", [SetState("a", "1")], fence="w1"))
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.state == {"a": "1"}


async def test_a_fenced_batch_without_the_lease_fails_and_writes_nothing(store: Store) -> None:
    await new_run(store, "r1", lease_owner="w1", lease_seconds=-1.0)
    assert await store.claim_run("r1", "w2", 60.0)  # w1's lease ran out: w2 took over
    with pytest.raises(LeaseLostError):
        await store.commit(
            Batch(
                "r1",
                [PutStep(step("r1", "a")), SetState("a", "1"), EndRun("completed")],
                fence="w1",
                release_wakeups_seen=0,
            )
        )
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    assert snapshot.steps == {} and snapshot.state == {}
    assert (snapshot.run.status, snapshot.run.lease_owner) == ("running", "w2")
    with pytest.raises(LeaseLostError):
        await store.commit(Batch("nope", [SetState("a", "1")], fence="w1"))


async def test_step_writes_one_commit_at_a_time_keep_every_attempt(store: Store) -> None:
    """How a sequential run commits: one batch of step writes at a time (an attempt's
    end with the next one's start), each alone in its transaction. A retried step keeps
    its earlier attempt in the history and its latest on its row."""
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    a1 = step("r1", "a", status="running", attempts=1)
    failed = step("r1", "a", status="scheduled", attempts=1, failures=1, wake_at=T0)
    a2 = step("r1", "a", status="running", attempts=2, failures=1)
    done = step("r1", "a", status="succeeded", attempts=2, failures=1, output='"ok"')
    b1 = step("r1", "b", status="running", attempts=1, seq=1)
    for ops in (
        [StartAttempt(a1, 1, "running", "w1")],
        [FinishAttempt(failed, 1, "failed", None, error("boom"))],
        [StartAttempt(a2, 2, "running", "w1")],
        [FinishAttempt(done, 2, "succeeded", '"ok"'), StartAttempt(b1, 1, "running", "w1")],
    ):
        assert await store.commit(Batch("r1", list(ops), fence="w1")) is False
    steps = {s.key: (s.status, s.attempts, s.output) for s in await store.get_steps("r1")}
    assert steps == {"a": ("succeeded", 2, "ok"), "b": ("running", 1, None)}
    history = [(h.key, h.attempt, h.status) for h in await store.get_history("r1")]
    assert history == [("a", 1, "failed"), ("a", 2, "succeeded"), ("b", 1, "running")]


async def test_step_writes_without_the_lease_fail_and_write_nothing(store: Store) -> None:
    await new_run(store, "r1", lease_owner="w1", lease_seconds=-1.0)
    assert await store.claim_run("r1", "w2", 60.0)  # w1's lease ran out: w2 took over
    begun = StartAttempt(step("r1", "a", status="running", attempts=1), 1, "running", "w1")
    with pytest.raises(LeaseLostError):
        await store.commit(Batch("r1", [begun], fence="w1"))
    assert await store.get_steps("r1") == [] and await store.get_history("r1") == []
    with pytest.raises(LeaseLostError):
        await store.commit(Batch("nope", [begun], fence="w1"))


async def test_a_steps_end_without_the_lease_fails_and_writes_nothing(store: Store) -> None:
    """A sequential step's commit (the last step's success, the next one's start) made
    after another worker took the run over: neither is written, whichever writes first."""
    await new_run(store, "r1", lease_owner="w1", lease_seconds=-1.0)
    ran = step("r1", "a", status="running", attempts=1)
    await store.commit(Batch("r1", [StartAttempt(ran, 1, "running", "w1")], fence="w1"))
    assert await store.claim_run("r1", "w2", 60.0)  # w1's lease ran out: w2 took over
    done = dataclasses.replace(ran, status="succeeded", output='"ok"')
    nxt = step("r1", "b", status="running", attempts=1, seq=1)
    ops = [FinishAttempt(done, 1, "succeeded", done.output), StartAttempt(nxt, 1, "running", "w1")]
    for run_id in ("r1", "nope"):
        with pytest.raises(LeaseLostError):
            await store.commit(Batch(run_id, list(ops), fence="w1"))
    assert [(s.key, s.status) for s in await store.get_steps("r1")] == [("a", "running")]
    assert [(a.key, a.status) for a in await store.get_history("r1")] == [("a", "running")]
    await store.commit(Batch("r1", list(ops), fence="w2"))  # the lease's holder writes them
    steps = {s.key: s.status for s in await store.get_steps("r1")}
    assert steps == {"a": "succeeded", "b": "running"}


async def test_a_last_batch_releases_the_lease_in_the_same_commit(store: Store) -> None:
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    seen = await wakeups(store, "r1")
    due = await store.commit(
        Batch("r1", [SetState("a", "1")], fence="w1", release_wakeups_seen=seen)
    )
    assert due is False
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.state == {"a": "1"}
    assert (snapshot.run.lease_owner, snapshot.run.wake_at) == (None, None)
    assert await store.claim_run("r1", "w2", 60.0)


async def test_a_last_batch_released_with_minus_one_is_due_again(store: Store) -> None:
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    assert await store.commit(Batch("r1", [], fence="w1", release_wakeups_seen=-1)) is True
    assert await store.claim_due_runs("w2", 60.0, 10) == ["r1"]


async def test_release_run_is_due_again_if_woken_during_the_pass(store: Store) -> None:
    await new_run(store, "r1")
    assert await store.claim_run("r1", "w1", 60.0)
    seen = await wakeups(store, "r1")
    await store.wake("r1")
    assert await store.release_run("r1", "w1", seen) is True
    assert await store.claim_due_runs("w2", 60.0, 10) == ["r1"]


async def test_release_run_not_woken_waits_for_its_timers(store: Store) -> None:
    await new_run(store, "r1")
    assert await store.claim_run("r1", "w1", 60.0)
    assert await store.release_run("r1", "w1", await wakeups(store, "r1")) is False
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    assert (snapshot.run.lease_owner, snapshot.run.wake_at) == (None, None)


async def test_release_run_by_another_owner_changes_nothing(store: Store) -> None:
    await new_run(store, "r1")
    assert await store.claim_run("r1", "w1", 60.0)
    assert await store.release_run("r1", "w2", -1) is False
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.run.lease_owner == "w1"


# -- safety nets -----------------------------------------------------------------------------


async def test_sweep_idle_makes_runs_nothing_will_wake_due(store: Store) -> None:
    for run_id in ("stuck", "timer", "job", "held"):
        await new_run(store, run_id)
        await idle(store, run_id)
    await write(store, "timer", SetTimer("t", "sleep", time.time() + 100))
    await write(store, "job", EnqueueJob("q", "fn", time.time() + 100))
    assert await store.claim_run("held", "w1", 60.0)
    assert await store.sweep_idle(base=0.0, cap=0.0) == 1
    assert await store.claim_due_runs("w2", 60.0, 10) == ["stuck"]
    assert await store.sweep_idle(base=0.0, cap=0.0) == 0


async def test_sweep_idle_leaves_recently_changed_runs(store: Store) -> None:
    await new_run(store, "r1")
    await idle(store, "r1")
    assert await store.sweep_idle(base=3600.0, cap=3600.0) == 0


async def test_next_due_is_the_earliest_pass_or_job(store: Store) -> None:
    assert await store.next_due() is None
    assert await store.next_due(["fn"]) is None
    await new_run(store, "r1")
    due = await store.next_due()
    assert due is not None and due <= time.time()
    await idle(store, "r1")
    assert await store.next_due() is None
    at = time.time() + 100
    await store.wake("r1", at)
    assert await store.next_due() == pytest.approx(at, abs=1e-5)
    await write(store, "r1", EnqueueJob("q", "fn", at + 5), EnqueueJob("z", "other", at))
    assert await store.next_due(["fn"]) == pytest.approx(at + 5, abs=1e-5)
    assert await store.next_due(["nope"]) is None


async def test_next_due_counts_a_leased_run_when_its_lease_runs_out(store: Store) -> None:
    await new_run(store, "r1")
    assert await store.claim_run("r1", "w1", 100.0)
    due = await store.next_due()
    assert due is not None and due == pytest.approx(time.time() + 100, abs=5)


async def test_a_paused_queue_holds_the_jobs_of_its_functions(store: Store) -> None:
    """A claim leaves a job alone while the queue its function is admitted through is
    paused (``queues[i]`` names the queue of ``functions[i]``), whatever the run's own
    queue; the resume lets it go."""
    await new_run(store, "r1")
    await write(store, "r1", EnqueueJob("q", "fn", T0))
    assert await store.claim_run("r1", "w1", 60.0)
    await store.pause("queue", "emails", "paused", "running")
    assert await store.claim_step_jobs("w1", 60.0, 10, ["fn"], ["emails"]) == []
    await store.unpause("queue", "emails", "running", "paused")
    (job,) = await store.claim_step_jobs("w1", 60.0, 10, ["fn"], ["emails"])
    assert job.step_key == "q"
