"""A child run's end settles the parent's step that waits for it, as the runtime decided
(``EndRun.parent``), and wakes the parent."""

from __future__ import annotations

import json

from plait.store import Store
from plait.store.ops import CancelChildren, CreateChildRun, EndRun, PutStep, StartAttempt, StepEnd
from plait.store.rows import NewRun

from .rows import CUT, error, idle, new_run, step, wake_at, wakeups, write

CHILD_ERROR = error("child run c1 failed: no", "CHILD_FAILED")


async def _parent_waiting(store: Store, child_id: str = "c1") -> None:
    """Run p whose step 'spawn' runs child ``child_id``; p is idle (not due)."""
    await new_run(store, "p")
    waiting = step("p", "spawn", kind="child", function=None, status="running", attempts=1)
    waiting.child_run_id = child_id
    child = NewRun(
        child_id,
        "child",
        "workflow",
        None,
        "{}",
        parent_run_id="p",
        parent_step_key="spawn",
        status="running",
    )
    await write(store, "p", StartAttempt(waiting, 1, "running", "w1"), CreateChildRun(child))
    await idle(store, "p")


async def test_a_completed_child_settles_the_waiting_step(store: Store) -> None:
    await _parent_waiting(store)
    seen = await wakeups(store, "p")
    await write(
        store, "c1", EndRun("completed", '{"v": 5}', None, StepEnd("succeeded", "5", failures=0))
    )
    (settled,) = await store.get_steps("p")
    assert (settled.status, settled.output, settled.error, settled.attempts) == (
        "succeeded",
        5,
        None,
        1,
    )
    (attempt,) = await store.get_history("p")
    assert (attempt.status, attempt.output, attempt.error) == ("succeeded", 5, None)
    assert attempt.finished_at is not None
    child = await store.get_run("c1")
    assert child is not None and (child.status, child.output) == ("completed", {"v": 5})
    assert await wakeups(store, "p") == seen + 1
    assert await store.claim_due_runs("w2", 60.0, 10) == ["p"]


async def test_a_failed_child_fails_the_waiting_step_with_the_given_error(store: Store) -> None:
    await _parent_waiting(store)
    seen = await wakeups(store, "p")
    end = StepEnd("failed", None, CHILD_ERROR, failures=1)
    await write(store, "c1", EndRun("failed", None, error("no"), end))
    snapshot = await store.load_pass("p")
    assert snapshot is not None
    settled = snapshot.steps["spawn"]
    assert (settled.status, settled.output, settled.failures) == ("failed", None, 1)
    assert settled.error is not None and json.loads(settled.error) == json.loads(CHILD_ERROR)
    (attempt,) = await store.get_history("p")
    assert (attempt.status, attempt.output) == ("failed", None)
    assert attempt.error == json.loads(CHILD_ERROR)
    assert snapshot.run.wakeups == seen + 1 and snapshot.run.wake_at is not None


async def test_an_end_without_parent_settles_nothing(store: Store) -> None:
    await _parent_waiting(store)
    seen = await wakeups(store, "p")
    await write(store, "c1", EndRun("completed", '"x"'))
    (waiting,) = await store.get_steps("p")
    assert (waiting.status, waiting.output) == ("running", None)
    (attempt,) = await store.get_history("p")
    assert attempt.status == "running"
    assert await wakeups(store, "p") == seen and await wake_at(store, "p") is None


async def test_a_step_that_waits_for_another_child_is_left_alone(store: Store) -> None:
    await _parent_waiting(store, child_id="c2")
    await new_run(store, "c1", parent_run_id="p", parent_step_key="spawn")
    seen = await wakeups(store, "p")
    await write(
        store, "c1", EndRun("completed", '"x"', None, StepEnd("succeeded", '"x"', failures=0))
    )
    (waiting,) = await store.get_steps("p")
    assert (waiting.status, waiting.child_run_id) == ("running", "c2")
    assert await wakeups(store, "p") == seen


async def test_a_step_that_no_longer_runs_is_left_alone(store: Store) -> None:
    await _parent_waiting(store)
    given_up = step("p", "spawn", kind="child", function=None, status="failed", attempts=1)
    given_up.child_run_id, given_up.error = "c1", error("cancelled", "WORKFLOW_CANCELLED")
    await write(store, "p", PutStep(given_up))
    seen = await wakeups(store, "p")
    await write(
        store, "c1", EndRun("completed", '"x"', None, StepEnd("succeeded", '"x"', failures=0))
    )
    (settled,) = await store.get_steps("p")
    assert (settled.status, settled.output, settled.error) == (
        "failed",
        None,
        json.loads(given_up.error),
    )
    assert await wakeups(store, "p") == seen


async def test_a_suspended_child_settles_nothing(store: Store) -> None:
    await _parent_waiting(store)
    seen = await wakeups(store, "p")
    end = StepEnd("failed", None, CHILD_ERROR, failures=1)
    await write(store, "c1", EndRun("suspended", None, error("paused"), end))
    (waiting,) = await store.get_steps("p")
    assert waiting.status == "running"
    assert await wakeups(store, "p") == seen


async def test_a_parent_that_ended_is_settled_but_not_woken(store: Store) -> None:
    await _parent_waiting(store)
    await write(store, "p", EndRun("failed", None, error("gave up")))
    await write(
        store, "c1", EndRun("completed", '"x"', None, StepEnd("succeeded", '"x"', failures=0))
    )
    (settled,) = await store.get_steps("p")
    assert settled.status == "succeeded"
    parent = await store.get_run("p")
    assert parent is not None and parent.status == "failed"
    assert await wake_at(store, "p") is None


def _child(run_id: str, parent: str, step_key: str, status: str = "running") -> NewRun:
    """A child run ``parent``'s step ``step_key`` started."""
    return NewRun(
        run_id,
        "child",
        "workflow",
        None,
        "{}",
        parent_run_id=parent,
        parent_step_key=step_key,
        status=status,  # type: ignore[arg-type]
    )


async def test_cancel_children_ends_the_live_children_as_it_says(store: Store) -> None:
    """The runtime writes it after the end of a run that leaves a child live: the child
    and its own live child end cancelled with the error given, the run's step for it as
    ``parent`` says, and a child that already ended is left as it is."""
    await _parent_waiting(store)
    await write(store, "c1", CreateChildRun(_child("g1", "c1", "deeper")))
    await write(store, "p", CreateChildRun(_child("c0", "p", "before")))
    await write(store, "c0", EndRun("completed", '"done"'))
    cancel_error = error("parent run p failed", "WORKFLOW_CANCELLED")
    step_error = error("child run cancelled: parent run p failed", "WORKFLOW_CANCELLED")
    await write(
        store,
        "p",
        EndRun("failed", None, error("gave up")),
        CancelChildren(
            "cancelled", cancel_error, StepEnd("failed", None, step_error, failures=1), CUT
        ),
    )
    for child_id in ("c1", "g1"):
        child = await store.get_run(child_id)
        assert child is not None and child.status == "cancelled"
        assert child.error == json.loads(cancel_error)
    done = await store.get_run("c0")
    assert done is not None and done.status == "completed"
    (settled,) = await store.get_steps("p")
    assert (settled.status, settled.error) == ("failed", json.loads(step_error))
    await write(
        store, "c1", EndRun("completed", '"x"', None, StepEnd("succeeded", '"x"', failures=0))
    )
    assert (await store.get_steps("p"))[0].status == "failed"
    assert await wake_at(store, "p") is None


async def test_cancel_children_of_one_step_leaves_the_other_children_running(
    store: Store,
) -> None:
    """The workflow cancelled the task awaiting one child run's step (``step_key``):
    that child and its own children end cancelled; a sibling child of another step of
    the same run goes on."""
    await _parent_waiting(store)
    await write(store, "c1", CreateChildRun(_child("g1", "c1", "deeper")))
    await write(store, "p", CreateChildRun(_child("c2", "p", "other", "suspended")))
    cancel_error = error("parent run p cancelled the task awaiting its step", "WORKFLOW_CANCELLED")
    await write(store, "p", CancelChildren("cancelled", cancel_error, None, CUT, step_key="spawn"))
    for child_id in ("c1", "g1"):
        child = await store.get_run(child_id)
        assert child is not None and child.status == "cancelled"
        assert child.error == json.loads(cancel_error)
    other = await store.get_run("c2")
    assert other is not None and other.status == "suspended"
    (waiting,) = await store.get_steps("p")
    assert waiting.status == "running"  # no parent end given: the runtime records the step
