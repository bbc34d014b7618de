"""Actions from outside a pass: wake, cancel, reopen (resume, retry), events, versions."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from plait.errors import (
    EventNotStoredError,
    RunEndedElsewhereError,
    RunNotFoundError,
    RunStateError,
)
from plait.records import Run
from plait.store import Store
from plait.store.ops import (
    Batch,
    CreateChildRun,
    EndRun,
    EnqueueJob,
    FinishAttempt,
    Op,
    PutStep,
    SendEvent,
    SetTimer,
    StartAttempt,
    StepEnd,
)
from plait.store.rows import NewRun

from .rows import CUT, T0, error, idle, new_run, step, wake_at, wakeups, write

CANCELLED = error("stop it", "WORKFLOW_CANCELLED")
CHILD_CANCELLED = StepEnd(
    "failed", None, error("child run cancelled: stop it", "WORKFLOW_CANCELLED"), failures=1
)


# -- wake ------------------------------------------------------------------------------------


async def test_wake_makes_a_running_run_due_and_counts_the_wake_up(store: Store) -> None:
    await new_run(store, "r1")
    await idle(store, "r1")
    seen = await wakeups(store, "r1")
    await store.wake("r1")
    assert await wakeups(store, "r1") == seen + 1
    assert await store.claim_due_runs("w1", 60.0, 10) == ["r1"]


async def test_wake_at_a_time_keeps_an_earlier_wake_up(store: Store) -> None:
    await new_run(store, "r1")
    await idle(store, "r1")
    at = time.time() + 100
    await store.wake("r1", at)
    assert await wake_at(store, "r1") == pytest.approx(at, abs=1e-5)
    await store.wake("r1", at + 50)
    assert await wake_at(store, "r1") == pytest.approx(at, abs=1e-5)
    await store.wake("r1", at - 50)
    assert await wake_at(store, "r1") == pytest.approx(at - 50, abs=1e-5)


async def test_wake_leaves_a_run_that_is_not_running(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EndRun("completed"))
    seen = await wakeups(store, "r1")
    await store.wake("r1")
    await store.wake("nope")
    assert await wakeups(store, "r1") == seen and await wake_at(store, "r1") is None


# -- cancel ----------------------------------------------------------------------------------


async def test_cancel_run_ends_a_running_run(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EnqueueJob("q", "fn", T0))
    assert await store.cancel_run("r1", "cancelled", CANCELLED, CHILD_CANCELLED, CUT) == ["r1"]
    run = await store.get_run("r1")
    assert run is not None and (run.status, run.output) == ("cancelled", None)
    assert run.error == json.loads(CANCELLED)
    assert await store.claim_step_jobs("w1", 60.0, 10, ["fn"]) == []
    assert not await store.claim_run("r1", "w1", 60.0)


async def test_cancel_run_ends_a_suspended_run(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EndRun("suspended", None, error("paused")))
    assert await store.cancel_run("r1", "cancelled", CANCELLED, CHILD_CANCELLED, CUT) == ["r1"]
    run = await store.get_run("r1")
    assert run is not None and run.status == "cancelled"


async def _family(store: Store) -> None:
    """p -> a (running) -> a1 (running); p -> b (suspended); p -> c (completed); each
    parent's step waits for its child."""

    async def child(parent: str, child_id: str) -> None:
        waiting = step(parent, child_id, kind="child", function=None, status="running")
        waiting.attempts, waiting.child_run_id = 1, child_id
        new = NewRun(
            child_id,
            "child",
            "workflow",
            None,
            "{}",
            parent_run_id=parent,
            parent_step_key=child_id,
            status="running",
        )
        await write(store, parent, StartAttempt(waiting, 1, "running", "w1"), CreateChildRun(new))

    await new_run(store, "p")
    await child("p", "a")
    await child("a", "a1")
    await child("p", "b")
    await child("p", "c")
    await write(store, "b", EndRun("suspended", None, error("paused")))
    await write(
        store, "c", EndRun("completed", '"done"', None, StepEnd("succeeded", '"done"', failures=0))
    )


async def test_cancel_run_cascades_to_live_descendants(store: Store) -> None:
    await _family(store)
    moved = await store.cancel_run("p", "cancelled", CANCELLED, CHILD_CANCELLED, CUT)
    assert moved[0] == "p" and sorted(moved) == ["a", "a1", "b", "p"]
    assert moved.index("a") < moved.index("a1")
    for run_id in ("p", "a", "a1", "b"):
        run = await store.get_run(run_id)
        assert run is not None and run.status == "cancelled"
        assert run.error == json.loads(CANCELLED)
    done = await store.get_run("c")
    assert done is not None and (done.status, done.output) == ("completed", "done")


async def test_cancel_run_settles_each_waiting_parent_step(store: Store) -> None:
    await _family(store)
    await store.cancel_run("p", "cancelled", CANCELLED, CHILD_CANCELLED, CUT)
    expected = json.loads(CHILD_CANCELLED.error or "")
    steps = {s.key: s for s in await store.get_steps("p")}
    assert {k: (s.status, s.error) for k, s in steps.items()} == {
        "a": ("failed", expected),
        "b": ("failed", expected),
        "c": ("succeeded", None),
    }
    (a1,) = await store.get_steps("a")
    assert (a1.status, a1.error) == ("failed", expected)
    attempts = {(a.key, a.status) for a in await store.get_history("p")}
    assert attempts == {("a", "failed"), ("b", "failed"), ("c", "succeeded")}


async def test_cancelling_a_child_settles_and_wakes_its_running_parent(store: Store) -> None:
    await _family(store)
    await idle(store, "p")
    seen = await wakeups(store, "p")
    assert await store.cancel_run("a", "cancelled", CANCELLED, CHILD_CANCELLED, CUT) == ["a", "a1"]
    parent = await store.get_run("p")
    assert parent is not None and parent.status == "running"
    steps = {s.key: s.status for s in await store.get_steps("p")}
    assert steps == {"a": "failed", "b": "running", "c": "succeeded"}
    assert await wakeups(store, "p") == seen + 1
    assert await store.claim_due_runs("w2", 60.0, 10) == ["p"]


async def test_cancel_run_of_an_unknown_run_raises_not_found(store: Store) -> None:
    with pytest.raises(RunNotFoundError):
        await store.cancel_run("nope", "cancelled", CANCELLED, CHILD_CANCELLED, CUT)


async def test_cancel_run_of_an_ended_run_raises_state_error(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EndRun("completed", '"x"'))
    with pytest.raises(RunStateError) as caught:
        await store.cancel_run("r1", "cancelled", CANCELLED, CHILD_CANCELLED, CUT)
    assert (caught.value.status, caught.value.action) == ("completed", "cancel")
    run = await store.get_run("r1")
    assert run is not None and (run.status, run.output) == ("completed", "x")


# -- reopen ----------------------------------------------------------------------------------


async def _suspended(store: Store) -> None:
    """r1 suspended at its open suspend step 'pause'."""
    await new_run(store, "r1")
    pause = step("r1", "pause", kind="suspend", function=None, input='{"why": "check"}')
    pause.attempts = 1
    await write(
        store,
        "r1",
        StartAttempt(pause, 1, "running", "w1"),
        EndRun("suspended", None, error("paused", "WORKFLOW_SUSPENDED")),
    )


def _resumed_pause() -> FinishAttempt:
    pause = step("r1", "pause", kind="suspend", function=None, input='{"why": "check"}')
    pause.attempts, pause.status = 1, "succeeded"
    pause.output = '{"why": "check", "resumed_at": 1}'
    return FinishAttempt(pause, 1, "succeeded", pause.output)


async def test_reopen_run_resumes_a_suspended_run(store: Store) -> None:
    await _suspended(store)
    seen = await wakeups(store, "r1")
    run = await store.reopen_run("r1", "suspended", "running", None, seen, [_resumed_pause()])
    assert run is not None and (run.id, run.status, run.error, run.output) == (
        "r1",
        "running",
        None,
        None,
    )
    assert await store.get_run("r1") == run
    (pause,) = await store.get_steps("r1")
    assert (pause.status, pause.output) == ("succeeded", {"why": "check", "resumed_at": 1})
    (attempt,) = await store.get_history("r1")
    assert attempt.status == "succeeded" and attempt.finished_at is not None
    assert await wakeups(store, "r1") == seen + 1
    assert await store.claim_due_runs("w1", 60.0, 10) == ["r1"]


async def test_reopen_run_retries_a_failed_run(store: Store) -> None:
    await new_run(store, "r1")
    broken = step("r1", "q", queued=True, status="failed", attempts=2, failures=2)
    broken.error = error("boom")
    await write(store, "r1", PutStep(broken), EndRun("failed", None, error("run failed")))
    again = broken.copy()
    again.status, again.failures, again.updated_at = "scheduled", 0, T0 + 1
    ops = [PutStep(again), EnqueueJob("q", "fn", T0)]
    run = await store.reopen_run("r1", "failed", "running", None, await wakeups(store, "r1"), ops)
    assert run is not None and (run.status, run.error, run.output) == ("running", None, None)
    (reopened,) = await store.get_steps("r1")
    assert (reopened.status, reopened.attempts) == ("scheduled", 2)
    (job,) = await store.claim_step_jobs("w1", 60.0, 10, ["fn"])
    assert job.step is not None and job.step.failures == 0
    assert await store.claim_due_runs("w1", 60.0, 10) == ["r1"]


async def test_reopen_run_writes_the_deadline_it_is_given(store: Store) -> None:
    await new_run(store, "r1", deadline_at=T0 + 2, timeout=2.0)
    await write(store, "r1", EndRun("failed", None, error("RUN_TIMEOUT")))
    run = await store.reopen_run("r1", "failed", "running", T0 + 50, await wakeups(store, "r1"), [])
    assert run is not None and run.deadline_at is not None
    assert (run.deadline_at.timestamp(), run.timeout) == (T0 + 50, 2.0)
    assert await store.get_run("r1") == run
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    assert (snapshot.run.deadline_at, snapshot.run.timeout) == (T0 + 50, 2.0)


async def test_reopen_run_with_stale_wakeups_writes_nothing(store: Store) -> None:
    await _suspended(store)
    stale = await wakeups(store, "r1") - 1
    assert (
        await store.reopen_run("r1", "suspended", "running", None, stale, [_resumed_pause()])
        is None
    )
    run = await store.get_run("r1")
    assert run is not None and run.status == "suspended"
    (pause,) = await store.get_steps("r1")
    assert (pause.status, pause.output) == ("pending", None)


async def test_reopen_run_from_the_wrong_status_raises_state_error(store: Store) -> None:
    await _suspended(store)
    seen = await wakeups(store, "r1")
    with pytest.raises(RunStateError) as caught:
        await store.reopen_run("r1", "failed", "running", None, seen, [_resumed_pause()])
    assert (caught.value.status, caught.value.action) == ("suspended", "retry")
    (pause,) = await store.get_steps("r1")
    assert pause.status == "pending"
    await new_run(store, "r2")
    with pytest.raises(RunStateError) as caught:
        await store.reopen_run("r2", "suspended", "running", None, await wakeups(store, "r2"), [])
    assert (caught.value.status, caught.value.action) == ("running", "resume")


async def test_reopen_run_of_an_unknown_run_raises_not_found(store: Store) -> None:
    with pytest.raises(RunNotFoundError):
        await store.reopen_run("nope", "suspended", "running", None, 0, [])


# -- events ----------------------------------------------------------------------------------


async def test_send_event_stores_it_and_wakes_a_running_run(store: Store) -> None:
    await new_run(store, "r1")
    await idle(store, "r1")
    seen = await wakeups(store, "r1")
    await store.send_event("r1", "paid", '{"amount": 5}')
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    assert [(e.name, json.loads(e.payload or "")) for e in snapshot.events] == [
        ("paid", {"amount": 5})
    ]
    assert snapshot.run.wakeups == seen + 1
    assert await store.claim_due_runs("w1", 60.0, 10) == ["r1"]


async def test_send_event_says_whether_the_run_waits_for_it(store: Store) -> None:
    await new_run(store, "r1")
    wait = step("r1", "__event:paid", kind="event", function=None, status="scheduled")
    wait.input = '{"event": "paid"}'
    await write(store, "r1", PutStep(wait))
    assert await store.send_event("r1", "paid", None) is True
    assert await store.send_event("r1", "refunded", None) is False
    wait.status = "failed"  # timed out
    await write(store, "r1", PutStep(wait))
    assert await store.send_event("r1", "paid", None) is False


async def _events(store: Store, run_id: str) -> list[tuple[str, str | None]]:
    snapshot = await store.load_pass(run_id)
    assert snapshot is not None
    return [(e.name, e.payload) for e in snapshot.events]


async def test_send_event_with_a_key_the_run_took_stores_nothing(store: Store) -> None:
    await new_run(store, "r1")
    await idle(store, "r1")
    seen = await wakeups(store, "r1")
    await store.send_event("r1", "paid", "1", "k1")
    assert await store.send_event("r1", "paid", "2", "k1") is False
    assert await wakeups(store, "r1") == seen + 1  # the duplicate woke nothing
    await store.send_event("r1", "paid", "3", "k2")
    await store.send_event("r1", "paid", "4")
    await store.send_event("r1", "paid", "5")
    assert await _events(store, "r1") == [("paid", p) for p in ("1", "3", "4", "5")]
    # a key the run took answers False whatever became of the run; a new one cannot go in
    await write(store, "r1", EndRun("completed", "null"))
    assert await store.send_event("r1", "paid", "2", "k1") is False
    with pytest.raises(RunStateError):
        await store.send_event("r1", "paid", "2", "k3")
    with pytest.raises(RunNotFoundError):
        await store.send_event("nope", "paid", "2", "k1")


async def test_senders_racing_with_one_key_store_one_event(store: Store) -> None:
    await new_run(store, "r1")
    for turn in range(5):
        await asyncio.gather(
            *(store.send_event("r1", "go", str(turn), f"key-{turn}") for _ in range(8))
        )
    assert await _events(store, "r1") == [("go", str(turn)) for turn in range(5)]


async def test_a_passs_send_is_written_with_its_commit_once(store: Store) -> None:
    """``SendEvent`` in a pass's batch: the event and the step land together, a batch
    applied twice (its answer lost) sends once, and a send to a run that ended (or never
    was) refuses the whole batch: nothing of it is written."""
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    await new_run(store, "r2")
    await idle(store, "r2")
    seen = await wakeups(store, "r2")
    sent = step("r1", "__send:go", kind="send_event", function=None, status="succeeded")
    batch = [PutStep(sent), SendEvent("r2", "go", '"x"', sent.invocation_id)]
    for _ in range(2):
        await store.commit(Batch("r1", list(batch), fence="w1"))
    assert await _events(store, "r2") == [("go", '"x"')]
    assert await wakeups(store, "r2") == seen + 1
    assert await store.claim_due_runs("w2", 60.0, 10) == ["r2"]
    await write(store, "r2", EndRun("completed", "null"))
    late = step("r1", "__send:go#1", kind="send_event", function=None, status="succeeded")
    for target in ("r2", "nope"):
        with pytest.raises(EventNotStoredError, match=target):
            await store.commit(
                Batch("r1", [PutStep(late), SendEvent(target, "go", "1", "a")], fence="w1")
            )
    assert await _events(store, "r2") == [("go", '"x"')]
    assert await store.load_pass("nope") is None
    assert [s.key for s in await store.get_steps("r1")] == ["__send:go"]


async def test_runs_sending_to_each_other_at_once_both_commit(store: Store) -> None:
    """Two passes sending to each other lock the same two runs: neither waits for the
    other for ever."""
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    await new_run(store, "r2", lease_owner="w2", lease_seconds=60.0)
    for turn in range(10):
        await asyncio.gather(
            store.commit(Batch("r1", [SendEvent("r2", "go", str(turn), f"a{turn}")], fence="w1")),
            store.commit(Batch("r2", [SendEvent("r1", "go", str(turn), f"b{turn}")], fence="w2")),
        )
    for run_id in ("r1", "r2"):
        assert await _events(store, run_id) == [("go", str(turn)) for turn in range(10)]


async def test_send_event_to_a_suspended_run_keeps_it_for_later(store: Store) -> None:
    await _suspended(store)
    await store.send_event("r1", "go", None)
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.run.status == "suspended"
    assert [(e.name, e.payload) for e in snapshot.events] == [("go", None)]


async def test_send_event_to_an_ended_or_unknown_run_raises(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", EndRun("completed"))
    with pytest.raises(RunStateError) as caught:
        await store.send_event("r1", "late", None)
    assert caught.value.status == "completed"
    with pytest.raises(RunNotFoundError):
        await store.send_event("nope", "late", None)
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.events == []


# -- versions --------------------------------------------------------------------------------


async def test_put_version_then_get_version(store: Store) -> None:
    definition = json.dumps({"nodes": {"a": {"function": "fn"}}})
    await store.put_version("flow", "v1", "graph", definition, "active")
    got = await store.get_version("flow", "v1")
    assert got is not None
    assert {
        k: getattr(got, k) for k in ("workflow", "version", "kind", "definition", "status")
    } == {
        "workflow": "flow",
        "version": "v1",
        "kind": "graph",
        "definition": {"nodes": {"a": {"function": "fn"}}},
        "status": "active",
    }
    assert got.created_at <= got.updated_at
    assert await store.get_version("flow", "v2") is None
    assert await store.get_version("other", "v1") is None


async def test_put_version_again_changes_only_its_status(store: Store) -> None:
    await store.put_version("code", "v1", "workflow", None, "active")
    await store.put_version("code", "v1", "graph", '{"x": 1}', "retired")
    got = await store.get_version("code", "v1")
    assert got is not None
    assert (got.kind, got.definition, got.status) == ("workflow", None, "retired")


async def test_a_version_records_who_registered_it_and_keeps_it(store: Store) -> None:
    await store.put_version("g", "v1", "graph", '{"a": 1}', "active", "ann")
    await store.put_version("g", "v1", "graph", '{"a": 1}', "draft", None)
    got = await store.get_version("g", "v1")
    assert got is not None and (got.status, got.registered_by) == ("draft", "ann")
    await store.put_version("g", "v2", "graph", '{"a": 2}', "draft", "ann")
    first = await store.get_version("g", "v1")
    assert first is not None and first.status == "draft"  # another version never moves it
    assert (await store.list_versions("g"))[0].registered_by == "ann"


async def test_the_first_claim_of_a_graph_name_wins(store: Store) -> None:
    assert await store.claim_graph("g", "ann") == "ann"
    assert await store.claim_graph("g", "bob") == "ann"
    assert await store.claim_graph("g", None) == "ann"
    assert await store.claim_graph("trusted", None) is None
    assert await store.claim_graph("trusted", "bob") is None
    claims = await asyncio.gather(*(store.claim_graph("raced", f"u{i}") for i in range(8)))
    assert len(set(claims)) == 1 and claims[0] in {f"u{i}" for i in range(8)}


async def test_list_versions_filters_and_puts_the_latest_first(store: Store) -> None:
    await store.put_version("a", "v1", "workflow", None, "active")
    await store.put_version("a", "v2", "workflow", None, "retired")
    await store.put_version("b", "v1", "workflow", None, "active")
    assert [(v.workflow, v.version) for v in await store.list_versions()] == [
        ("b", "v1"),
        ("a", "v2"),
        ("a", "v1"),
    ]
    assert [v.version for v in await store.list_versions("a")] == ["v2", "v1"]
    assert [v.workflow for v in await store.list_versions(status="active")] == ["b", "a"]
    assert [v.version for v in await store.list_versions("a", "retired")] == ["v2"]
    assert await store.list_versions("nope") == []


async def test_a_pass_that_commits_after_its_run_was_cancelled_starts_nothing(
    store: Store,
) -> None:
    """The pass still holds the lease when another process cancels the run: its steps'
    records land, but no child run, timer or job outlives the cancel."""
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    assert await store.cancel_run("r1", "cancelled", CANCELLED, CHILD_CANCELLED, CUT) == ["r1"]
    child = NewRun(
        "kid",
        "wf",
        "workflow",
        None,
        "{}",
        parent_run_id="r1",
        parent_step_key="k",
        status="running",
    )
    ops = [
        PutStep(step("r1", "k", status="running")),
        CreateChildRun(child),
        SetTimer("t", "sleep", time.time() + 100),
        EnqueueJob("q", "fn", T0),
    ]
    await store.commit(Batch("r1", ops, fence="w1", release_wakeups_seen=0))
    assert await store.get_children("r1") == []
    assert await store.get_run("kid") is None
    assert await store.next_due() is None and await store.next_due(["fn"]) is None
    assert await store.claim_step_jobs("w1", 60.0, 10, ["fn"]) == []
    assert [s.key for s in await store.get_steps("r1")] == ["k"]


async def _other_runs_starting(store: Store) -> list[Coroutine[Any, Any, bool]]:
    """The commits of two other runs' first steps (runs r2 and r3, leased by w1), to be
    sent at the same time as a batch under test: where the store groups commits, the
    three share one."""
    commits = []
    for other in ("r2", "r3"):
        await new_run(store, other, lease_owner="w1", lease_seconds=60.0)
        start = StartAttempt(step(other, "x", status="running", attempts=1), 1, "running", "w1")
        commits.append(store.commit(Batch(other, [start], fence="w1")))
    return commits


@pytest.mark.parametrize("path", ["first attempts", "step writes", "any ops", "grouped"])
async def test_a_pass_that_commits_after_its_run_was_cancelled_starts_no_attempt(
    store: Store, path: str
) -> None:
    """The same pass goes on to its next step: the end of the step it ran is kept, the
    next step's start is not written, and the commit says why
    (``RunEndedElsewhereError``), so the pass never runs that step's body in a run that
    already ended. Each ``path`` is a shape of batch a store may commit its own way."""
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    ran = step("r1", "a", status="running", attempts=1)
    await store.commit(Batch("r1", [StartAttempt(ran, 1, "running", "w1")], fence="w1"))
    assert await store.cancel_run("r1", "cancelled", CANCELLED, CHILD_CANCELLED, CUT) == ["r1"]
    ran.status, ran.output = "succeeded", '"done"'
    nxt = step("r1", "b", status="running", attempts=1)
    ops: list[Op] = [
        FinishAttempt(ran, 1, "succeeded", ran.output),
        StartAttempt(nxt, 1, "running", "w1"),
    ]
    if path == "step writes":
        retried = step("r1", "c", status="running", attempts=2)
        ops.append(StartAttempt(retried, 2, "running", "w1"))  # not a first attempt
    elif path == "any ops":
        ops.append(SetTimer("t", "sleep", time.time() + 100))
    batch = Batch("r1", ops, fence="w1")
    with pytest.raises(RunEndedElsewhereError, match="r1"):
        if path == "grouped":
            others = await _other_runs_starting(store)
            outcomes = await asyncio.gather(*others, store.commit(batch), return_exceptions=True)
            assert outcomes[:2] == [False, False]
            assert isinstance(outcomes[2], BaseException)
            raise outcomes[2]
        await store.commit(batch)
    steps = {s.key: (s.status, s.attempts) for s in await store.get_steps("r1")}
    assert steps == {"a": ("succeeded", 1)}
    assert [(a.key, a.status) for a in await store.get_history("r1")] == [("a", "succeeded")]
    if path == "any ops":
        assert await store.next_due() is None  # nor its timer
    # the pass's last batch (its unwinding) still lands, and gives the run back
    await store.commit(Batch("r1", [PutStep(ran)], fence="w1", release_wakeups_seen=0))
    snapshot = await store.load_pass("r1")
    assert snapshot is not None and snapshot.run.status == "cancelled"
    assert snapshot.run.lease_owner is None


async def test_a_cancel_closes_the_attempts_no_pass_will_end(store: Store) -> None:
    """The worker running a step died (its lease still on the run, or on the step's job)
    and the run is cancelled: nothing will replay it, so the cancel itself ends every
    attempt still open, and every step still running, in the run and in the children it
    cancels. None stays running."""
    await new_run(store, "r1", lease_owner="dead", lease_seconds=60.0)
    inline = step("r1", "inline", status="running", attempts=2)
    queued = step("r1", "queued", status="running", attempts=1, queued=True)
    done = step("r1", "done", status="succeeded", attempts=1, output='"ok"')
    waiting = step("r1", "each", kind="node", status="running")  # for_each, on its items
    kid = step("r1", "kid", kind="child", status="running", attempts=1, child_run_id="c1")
    await store.commit(
        Batch(
            "r1",
            [
                StartAttempt(inline, 2, "running", "dead"),
                StartAttempt(queued, 1, "running", "dead"),
                PutStep(done),
                PutStep(waiting),
                StartAttempt(kid, 1, "running", "dead"),
            ],
            fence="dead",
        )
    )
    await new_run(store, "c1", parent_run_id="r1", parent_step_key="kid")
    deep = step("c1", "deep", status="running", attempts=1)
    await store.commit(Batch("c1", [StartAttempt(deep, 1, "running", "dead")]))
    assert await store.cancel_run("r1", "cancelled", CANCELLED, CHILD_CANCELLED, CUT) == [
        "r1",
        "c1",
    ]
    steps = [s for r in ("r1", "c1") for s in await store.get_steps(r)]
    ended = {(s.run_id, s.key): (s.status, s.error) for s in steps}
    cancelled = json.loads(CANCELLED)
    assert ended == {
        ("r1", "inline"): ("failed", cancelled),
        ("r1", "queued"): ("failed", cancelled),
        ("r1", "done"): ("succeeded", None),
        ("r1", "each"): ("failed", cancelled),
        ("r1", "kid"): (CHILD_CANCELLED.status, json.loads(CHILD_CANCELLED.error or "null")),
        ("c1", "deep"): ("failed", cancelled),
    }
    attempts = [a for r in ("r1", "c1") for a in await store.get_history(r)]
    history = {(a.key, a.attempt): a.status for a in attempts}
    assert history == {
        ("inline", 2): "cancelled",
        ("queued", 1): "cancelled",
        ("kid", 1): CHILD_CANCELLED.status,
        ("deep", 1): "cancelled",
    }
    assert all(a.finished_at is not None for a in attempts)


@pytest.mark.parametrize("path", ["first attempts", "any ops", "grouped"])
async def test_a_stop_after_a_cancel_leaves_the_cancels_record(store: Store, path: str) -> None:
    """The run's worker stops after a cancel elsewhere, before it noticed: its pass writes
    the step's attempt as interrupted, for the step to run again elsewhere. An ended run
    never runs again, so that write is left out and the cancel's record stays."""
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    row = step("r1", "a", status="running", attempts=1, queued=path == "any ops")
    await store.commit(Batch("r1", [StartAttempt(row, 1, "running", "w1")], fence="w1"))
    assert await store.cancel_run("r1", "cancelled", CANCELLED, CHILD_CANCELLED, CUT) == ["r1"]
    row.status = "pending"
    ops: list[Op] = [FinishAttempt(row, 1, "interrupted")]
    if path == "any ops":
        ops.append(EnqueueJob("a", "fn", T0))
    batch = Batch("r1", ops, fence="w1")
    if path == "grouped":
        others = await _other_runs_starting(store)
        assert await asyncio.gather(*others, store.commit(batch)) == [False] * 3
    else:
        assert await store.commit(batch) is False
    (kept,) = await store.get_steps("r1")
    assert (kept.status, kept.error) == ("failed", json.loads(CANCELLED))
    assert [a.status for a in await store.get_history("r1")] == ["cancelled"]
    assert await store.claim_step_jobs("w1", 60.0, 10, ["fn"]) == []


async def test_reopens_made_at_once_each_get_their_own_answer(store: Store) -> None:
    """A bulk retry reopens runs side by side, and a store may write reopens made at once
    in one transaction (PostgreSQL does): each caller still hears what reopening its run
    alone would have said. A run read before a wake is not written; a run in another
    status is refused, and so is the same run retried twice at once, but once; the
    others go on."""
    for run_id in ("a", "b", "c", "d", "twice", "stale", "running"):
        await new_run(store, run_id)
        if run_id != "running":
            await write(store, run_id, EndRun("failed", None, error("boom")))
    seen = {run_id: await wakeups(store, run_id) for run_id in ("a", "b", "c", "d", "twice")}
    seen["stale"] = await wakeups(store, "stale") - 1
    seen["running"] = 0

    async def reopen_all(run_ids: list[str]) -> list[Any]:
        calls = (store.reopen_run(r, "failed", "running", None, seen[r], []) for r in run_ids)
        return await asyncio.gather(*calls, return_exceptions=True)

    first = await reopen_all(["a", "b", "stale", "c"])
    assert [(r.id, r.status) if isinstance(r, Run) else r for r in first] == [
        ("a", "running"),
        ("b", "running"),
        None,
        ("c", "running"),
    ]
    second = await reopen_all(["d", "running", "twice", "twice"])
    assert isinstance(second[0], Run) and second[0].id == "d"
    assert isinstance(second[1], RunStateError)
    assert sorted(type(a).__name__ for a in second[2:]) == ["Run", "RunStateError"]
    runs = {r: await store.get_run(r) for r in ("a", "b", "c", "d", "twice", "stale")}
    assert {r: run.status if run else None for r, run in runs.items()} == {
        "a": "running",
        "b": "running",
        "c": "running",
        "d": "running",
        "twice": "running",
        "stale": "failed",
    }
    assert await wakeups(store, "twice") == seen["twice"] + 1
