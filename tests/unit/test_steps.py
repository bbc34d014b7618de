"""The step state machine as a table: a step in some status, an event, the status it
moves to and the writes that record it. No database: each case takes microseconds."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from plait.runtime import steps
from plait.runtime.attempt import Outcome
from plait.store.ops import FinishAttempt, Op, StartAttempt
from plait.store.rows import StepRow

from .rows import T0, shape, step

NOW = T0 + 10
OK = Outcome(ok=True, output='"done"')
BOOM = Outcome(ok=False, error={"message": "boom", "type": "Boom", "code": None})
FINAL = Outcome(ok=False, error={"message": "bad", "type": "Bad", "code": None}, retryable=False)
CANCELLED = steps.cancelled_error()


def begin(s: StepRow) -> list[Op]:
    return steps.begin(s, "w", NOW)[0]


#: (case, the step before, the event, its status after, the writes)
CASES: list[tuple[str, dict[str, Any], Callable[[StepRow], list[Op] | None], str, Any]] = [
    # attempts
    ("begin a new step", {}, begin, "running", [("StartAttempt",)]),
    (
        "begin after a died attempt",
        {"status": "running", "attempts": 1},
        begin,
        "running",
        [("FinishAttempt", "interrupted"), ("StartAttempt",)],
    ),
    (
        "begin after too many died attempts",
        {"status": "running", "attempts": steps.MAX_INTERRUPTIONS},
        begin,
        "failed",
        [("FinishAttempt", "interrupted")],
    ),
    (
        "begin after a retry back-off",
        {"status": "scheduled", "wake_at": T0},
        begin,
        "running",
        [("ClearTimer",), ("StartAttempt",)],
    ),
    (
        "begin a job step from the job table",
        {"status": "scheduled", "queued": True},
        begin,
        "running",
        [("StartAttempt",)],
    ),
    (
        "end an attempt: success",
        {"status": "running", "attempts": 1},
        lambda s: steps.end_attempt(s, OK, NOW),
        "succeeded",
        [("FinishAttempt", "succeeded")],
    ),
    (
        "end an attempt: failure with retries left",
        {"status": "running", "attempts": 1, "retries": 2, "retry_delay": 5.0},
        lambda s: steps.end_attempt(s, BOOM, NOW),
        "scheduled",
        [("FinishAttempt", "failed"), ("SetTimer", "retry")],
    ),
    (
        "end an attempt: failure of a job step with retries left",
        {"status": "running", "attempts": 1, "retries": 2, "queued": True},
        lambda s: steps.end_attempt(s, BOOM, NOW),
        "scheduled",
        [("FinishAttempt", "failed"), ("EnqueueJob",)],
    ),
    (
        "end an attempt: failure with no retry left",
        {"status": "running", "attempts": 1},
        lambda s: steps.end_attempt(s, BOOM, NOW),
        "failed",
        [("FinishAttempt", "failed")],
    ),
    (
        "end an attempt: failure that would only repeat",
        {"status": "running", "attempts": 1, "retries": 3},
        lambda s: steps.end_attempt(s, FINAL, NOW),
        "failed",
        [("FinishAttempt", "failed")],
    ),
    (
        "a cancel of its run cuts an attempt short",
        {"status": "running", "attempts": 1},
        lambda s: steps.interrupt(s, NOW, cancelled=True),
        "failed",
        [("FinishAttempt", "cancelled")],
    ),
    (
        "a shutdown cuts an attempt short",
        {"status": "running", "attempts": 1},
        lambda s: steps.interrupt(s, NOW, cancelled=False),
        "pending",
        [("FinishAttempt", "interrupted")],
    ),
    (
        "a shutdown cuts a job step's attempt short",
        {"status": "running", "attempts": 1, "queued": True},
        lambda s: steps.interrupt(s, NOW, cancelled=False),
        "scheduled",
        [("FinishAttempt", "interrupted"), ("EnqueueJob",)],
    ),
    (
        "a cancel ends a step waiting with no attempt",
        {"status": "running"},
        lambda s: steps.cancel_waiting(s, NOW),
        "failed",
        [("PutStep",)],
    ),
    (
        "a job step goes to the job table",
        {"queued": True},
        lambda s: steps.enqueue(s, NOW),
        "scheduled",
        [("PutStep",), ("EnqueueJob",)],
    ),
    (
        "a child run starts",
        {},
        lambda s: steps.begin_child(s, "w", NOW),
        "running",
        [("StartAttempt",)],
    ),
    # timers and events
    (
        "a sleep of no length",
        {"kind": "sleep"},
        lambda s: steps.schedule_sleep(s, 0, NOW),
        "succeeded",
        [("PutStep",)],
    ),
    (
        "a sleep",
        {"kind": "sleep"},
        lambda s: steps.schedule_sleep(s, 5, NOW),
        "scheduled",
        [("PutStep",), ("SetTimer", "sleep")],
    ),
    (
        "a sleep whose time came",
        {"kind": "sleep", "status": "scheduled", "wake_at": NOW},
        lambda s: steps.fire_timer(s, NOW),
        "succeeded",
        [("PutStep",), ("ClearTimer",)],
    ),
    (
        "a sleep whose time has not come",
        {"kind": "sleep", "status": "scheduled", "wake_at": NOW + 1},
        lambda s: steps.fire_timer(s, NOW),
        "scheduled",
        None,
    ),
    (
        "an event wait",
        {"kind": "event"},
        lambda s: steps.wait_event(s, None, NOW),
        "scheduled",
        [("PutStep",)],
    ),
    (
        "an event wait with a timeout",
        {"kind": "event"},
        lambda s: steps.wait_event(s, 3, NOW),
        "scheduled",
        [("PutStep",), ("SetTimer", "event_timeout")],
    ),
    (
        "an event arrives",
        {"kind": "event", "status": "scheduled", "wake_at": NOW + 3},
        lambda s: steps.consume_event(s, 7, '"x"', NOW),
        "succeeded",
        [("PutStep",), ("ConsumeEvent",), ("ClearTimer",)],
    ),
    (
        "an event wait times out",
        {"kind": "event", "status": "scheduled", "wake_at": NOW},
        lambda s: steps.time_out_event(s, "ev", NOW),
        "failed",
        [("PutStep",), ("ClearTimer",)],
    ),
    (
        "a value is recorded",
        {"kind": "value"},
        lambda s: steps.record_value(s, 1, NOW),
        "succeeded",
        [("PutStep",)],
    ),
    (
        "a value is published",
        {"kind": "set_value"},
        lambda s: steps.publish_value(s, "k", "1", NOW),
        "succeeded",
        [("PutStep",), ("SetValue",)],
    ),
    # gates and suspends
    (
        "a gate opens with a deadline",
        {"kind": "approval"},
        lambda s: steps.open_gate(s, "w", NOW + 60, NOW),
        "pending",
        [("StartAttempt",), ("SetTimer", "approval")],
    ),
    (
        "a gate is decided",
        {"kind": "approval", "attempts": 1, "wake_at": NOW + 60},
        lambda s: steps.decide_gate(s, "{}", NOW),
        "succeeded",
        [("GuardStep", "pending"), ("FinishAttempt", "succeeded"), ("ClearTimer",)],
    ),
    (
        "a gate's deadline passes",
        {"kind": "approval", "attempts": 1, "wake_at": NOW},
        lambda s: steps.expire_gate(s, NOW),
        "succeeded",
        [("GuardStep", "pending"), ("FinishAttempt", "succeeded"), ("ClearTimer",)],
    ),
    (
        "a gate opens again",
        {"kind": "approval", "status": "succeeded", "attempts": 1, "wake_at": NOW + 60},
        lambda s: steps.reopen_gate(s, "w", NOW),
        "pending",
        [("StartAttempt",), ("SetTimer", "approval")],
    ),
    (
        "the workflow cancels a sleep",
        {"kind": "sleep", "status": "scheduled", "wake_at": NOW + 5},
        lambda s: steps.cancel_wait(s, NOW),
        "failed",
        [("PutStep",), ("ClearTimer",)],
    ),
    (
        "the workflow cancels a gate",
        {"kind": "approval", "attempts": 1},
        lambda s: steps.cancel_wait(s, NOW),
        "failed",
        [("GuardStep", "pending"), ("FinishAttempt", "failed"), ("ClearTimer",)],
    ),
    (
        "a suspend opens",
        {"kind": "suspend"},
        lambda s: steps.open_suspend(s, "w", NOW),
        "pending",
        [("StartAttempt",)],
    ),
    (
        "a suspend is resumed",
        {"kind": "suspend", "attempts": 1, "input": '{"reason": "r"}'},
        lambda s: steps.resume_suspend(s, NOW),
        "succeeded",
        [("FinishAttempt", "succeeded")],
    ),
    # a run that goes on again
    (
        "a retry reopens a failed step",
        {"status": "failed", "failures": 1},
        lambda s: steps.reopen_failed(s, NOW),
        "pending",
        [("PutStep",)],
    ),
    (
        "a retry reopens a timed out event wait",
        {"kind": "event", "status": "failed", "timeout": 3.0},
        lambda s: steps.reopen_failed(s, NOW),
        "scheduled",
        [("PutStep",), ("SetTimer", "event_timeout")],
    ),
    (
        "a retry reopens a sleep the workflow cancelled",
        {"kind": "sleep", "status": "failed", "error": CANCELLED, "wake_at": NOW + 5},
        lambda s: steps.reopen_failed(s, NOW),
        "scheduled",
        [("PutStep",), ("SetTimer", "sleep")],
    ),
    (
        "a retry gives a job step in flight its job back",
        {"status": "running", "queued": True, "attempts": 1},
        lambda s: steps.requeue(s, NOW),
        "scheduled",
        [("FinishAttempt", "interrupted"), ("EnqueueJob",)],
    ),
    # for_each nodes
    (
        "a for_each node starts its items",
        {"kind": "node"},
        lambda s: steps.start_items(s, NOW),
        "running",
        [("PutStep",)],
    ),
    (
        "a for_each node running already",
        {"kind": "node", "status": "running"},
        lambda s: steps.start_items(s, NOW),
        "running",
        [],
    ),
    (
        "a for_each item cannot start",
        {"kind": "node", "status": "running"},
        lambda s: steps.refuse_item(s, "n", 1, ValueError("too big"), NOW),
        "failed",
        [("PutStep",)],
    ),
]


@pytest.mark.parametrize(
    ("before", "event", "status", "writes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_step_event_moves_the_step_and_writes_it(
    before: dict[str, Any],
    event: Callable[[StepRow], list[Op] | None],
    status: str,
    writes: Any,
) -> None:
    row = step(**before)
    assert shape(event(row)) == writes
    assert row.status == status


def items(*statuses: str) -> list[StepRow]:
    return [
        step(
            f"n[{i}]",
            kind="item",
            status=s,
            output=f'"{i}"' if s == "succeeded" else None,
            error='{"message": "no"}' if s == "failed" else None,
        )
        for i, s in enumerate(statuses)
    ]


#: (case, the items' statuses, how many items, sequential, the node's status after, writes)
FOR_EACH: list[tuple[str, tuple[str, ...], int, bool, str, Any]] = [
    ("every item succeeded", ("succeeded", "succeeded"), 2, False, "succeeded", [("PutStep",)]),
    ("an item is missing", ("succeeded",), 2, True, "running", None),
    ("an item still runs", ("succeeded", "running"), 2, False, "running", None),
    ("an item failed, another runs", ("failed", "running"), 2, False, "running", None),
    (
        "an item failed, the rest settled",
        ("failed", "succeeded"),
        2,
        False,
        "failed",
        [("PutStep",)],
    ),
    ("an item failed, in sequence", ("failed",), 2, True, "failed", [("PutStep",)]),
    ("no items", (), 0, False, "succeeded", [("PutStep",)]),
]


@pytest.mark.parametrize(
    ("statuses", "count", "sequential", "status", "writes"),
    [c[1:] for c in FOR_EACH],
    ids=[c[0] for c in FOR_EACH],
)
def test_a_for_each_node_settles_from_its_items(
    statuses: tuple[str, ...], count: int, sequential: bool, status: str, writes: Any
) -> None:
    node = step("n", kind="node", status="running")
    assert shape(steps.end_items(node, "n", items(*statuses), count, sequential, NOW)) == writes
    assert node.status == status


def test_a_for_each_node_outputs_its_items_outputs_and_names_the_failed_item() -> None:
    node = step("n", kind="node", status="running")
    steps.end_items(node, "n", items("succeeded", "succeeded"), 2, False, NOW)
    assert json.loads(node.output or "") == ["0", "1"] and node.error is None
    node = step("n", kind="node", status="running")
    steps.end_items(node, "n", items("succeeded", "failed"), 2, False, NOW)
    error = json.loads(node.error or "")
    assert (error["item"], error["step"], error["type"], node.failures) == (
        1,
        "n[1]",
        "ForEachItemFailed",
        1,
    )


@pytest.mark.parametrize(
    ("child", "status", "failures"),
    [("completed", "succeeded", 0), ("failed", "failed", 1), ("cancelled", "failed", 1)],
)
def test_a_child_runs_end_settles_its_parents_step(child: str, status: str, failures: int) -> None:
    end = steps.child_step_end("c", child, '"out"', json.dumps({"message": "m", "code": "X"}))
    assert (end.status, end.failures) == (status, failures)


def test_an_attempt_begins_open() -> None:
    """Every start writes the open attempt's status, the one a cancel's cut looks for."""
    row = step(status="pending")
    ops, runs_body = steps.begin(row, "w1", NOW)
    (start,) = ops
    assert runs_body and isinstance(start, StartAttempt)
    assert start.status == steps.OPEN_ATTEMPT == steps.CANCEL_CUT.open_attempt


def test_a_cancel_cut_is_what_interrupt_writes() -> None:
    row = step(status="running", attempts=1)
    (finish,) = steps.interrupt(row, NOW, cancelled=True)
    assert isinstance(finish, FinishAttempt)
    assert (row.status, finish.status) == (
        steps.CANCEL_CUT.step,
        steps.CANCEL_CUT.attempt,
    )
