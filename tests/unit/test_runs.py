"""The run state machine as a table: a run, an event, the status it moves to and the
writes that record it. No database: each case takes microseconds."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest

from plait import errors, serde, statuses
from plait.errors import Cancel, StepError
from plait.runtime import runs, steps
from plait.runtime.control_flow import PauseSignal
from plait.store.ops import EndRun
from plait.store.rows import PassSnapshot

from .rows import T0, run, shape, step


@pytest.mark.parametrize(("waits", "status"), [(True, "queued"), (False, "running")])
def test_a_new_run_is_queued_only_while_it_waits_for_admission(waits: bool, status: str) -> None:
    assert runs.initial_status(waits) == status


#: (case, the end a pass chose, its status, the error's code)
ENDS: list[tuple[str, EndRun, str, str | None]] = [
    ("the workflow returned", runs.completed('"out"'), "completed", None),
    ("a stored error", runs.failed('{"code": "X"}'), "failed", "X"),
    ("an error record", runs.failed_record({"message": "m", "code": "Y"}), "failed", "Y"),
    (
        "plait failed it",
        runs.failed_control("m", errors.WORKFLOW_BLOCKED),
        "failed",
        errors.WORKFLOW_BLOCKED,
    ),
    (
        "it waits for a resume",
        runs.suspended("m", errors.FUNCTION_NOT_FOUND),
        "suspended",
        errors.FUNCTION_NOT_FOUND,
    ),
    (
        "a parked step failed its last attempt",
        runs.needs_attention("s", '{"code": "P"}'),
        "needs_attention",
        "P",
    ),
    ("it cancelled itself", runs.cancelled("enough"), "cancelled", errors.WORKFLOW_CANCELLED),
    ("it raised Cancel", runs.raised(Cancel("enough")), "cancelled", errors.WORKFLOW_CANCELLED),
    ("a step failed it", runs.raised(StepError("s", {"code": "Z"})), "failed", "Z"),
    ("it raised", runs.raised(ValueError("v")), "failed", None),
    ("a pass signal escaped", runs.raised(PauseSignal("s")), "failed", None),
]


@pytest.mark.parametrize(("end", "status", "code"), [c[1:] for c in ENDS], ids=[c[0] for c in ENDS])
def test_a_pass_ends_the_run(end: EndRun, status: str, code: str | None) -> None:
    assert end.status == status
    assert runs.pass_status(end) == status
    record: dict[str, Any] = json.loads(end.error) if end.error else {}
    assert record.get("code") == code


def test_a_step_that_failed_the_run_is_named_in_its_error() -> None:
    end = runs.raised(StepError("charge", {"message": "m", "code": "Z"}))
    assert json.loads(end.error or "")["step"] == "charge"


def test_a_pass_that_ends_nothing_leaves_the_run_running() -> None:
    assert runs.pass_status(None) == "running"


def test_an_admitted_run_runs() -> None:
    assert runs.ADMITTED == "running"


def test_only_a_cancel_ends_a_run_with_a_cut() -> None:
    """A run that cancels itself cuts its steps in flight short as a user's cancel does;
    no other end cuts anything (the stores cascade and cut only when told)."""
    assert runs.cancelled("stop").cut == steps.CANCEL_CUT
    for end in (runs.completed(None), runs.failed(None), runs.suspended("m", "C")):
        assert end.cut is None


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_the_children_left_behind_end_cancelled_and_cut_short(status: str) -> None:
    left = runs.children_left("r", status)
    assert (left.status, left.cut) == ("cancelled", steps.CANCEL_CUT)
    assert left.parent is not None
    assert (left.parent.status, left.parent.failures) == ("failed", 1)


#: (case, end status, a child run's, a running child step, the writes, children ended)
END_OPS: list[tuple[str, str, bool, bool, list[tuple[str, ...]], list[str]]] = [
    ("completed", "completed", False, False, [("EndRun", "completed")], []),
    (
        "completed with a live child",
        "completed",
        False,
        True,
        [("EndRun", "completed"), ("CancelChildren",)],
        ["c1"],
    ),
    (
        "failed with a live child",
        "failed",
        False,
        True,
        [("EndRun", "failed"), ("CancelChildren",)],
        ["c1"],
    ),
    ("suspended with a live child", "suspended", False, True, [("EndRun", "suspended")], []),
    ("cancelled with a live child", "cancelled", False, True, [("EndRun", "cancelled")], []),
    ("a child run completed", "completed", True, False, [("EndRun", "completed")], []),
]


@pytest.mark.parametrize(
    ("status", "is_child", "live_child", "writes", "ended"),
    [c[1:] for c in END_OPS],
    ids=[c[0] for c in END_OPS],
)
def test_an_end_takes_the_runs_live_children_and_settles_its_parents_step(
    status: str, is_child: bool, live_child: bool, writes: Any, ended: list[str]
) -> None:
    row = run(parent_run_id="p" if is_child else None)
    recorded = [step("a", status="succeeded")]
    if live_child:
        recorded.append(step("child", kind="child", status="running", child_run_id="c1"))
    ops, children = runs.end_ops(row, EndRun(status, error='{"message": "m"}'), recorded)
    assert shape(ops) == writes
    assert children == ended
    end = ops[0]
    assert isinstance(end, EndRun)
    assert (end.parent is not None) == (is_child and status in statuses.TERMINAL)


def test_a_users_cancel_ends_the_run_cancelled_and_cuts_its_steps_short() -> None:
    cancel = runs.cancel("no longer needed")
    assert cancel.status == "cancelled"
    assert json.loads(cancel.error)["message"] == "no longer needed"
    assert cancel.parent.status == "failed"
    assert (cancel.cut.step, cancel.cut.attempt) == ("failed", "cancelled")
    assert cancel.cut.open_attempt == steps.OPEN_ATTEMPT == "running"


def snapshot(status: str, *rows: Any) -> PassSnapshot:
    return PassSnapshot(run(status=status), {r.key: r for r in rows}, [], {})


def test_a_resume_moves_a_suspended_run_on_and_releases_its_suspends() -> None:
    reopen = runs.resume()
    assert (reopen.action, reopen.from_status) == ("resume", "suspended")
    assert reopen.status(run(status="suspended")) == "running"
    assert reopen.status(run(status="suspended", queue="q")) == "running"
    opened = step("wait", kind="suspend", attempts=1, input='{"reason": "r"}')
    assert shape(reopen.ops(snapshot("suspended", opened), T0)) == [("FinishAttempt", "succeeded")]
    assert opened.status == "succeeded"


def test_a_resume_for_a_reason_no_suspend_has_is_refused() -> None:
    opened = step("wait", kind="suspend", attempts=1, input='{"reason": "r"}')
    with pytest.raises(ValueError, match="no open suspend 'other'"):
        runs.resume("other").ops(snapshot("suspended", opened), T0)


def test_a_retry_moves_a_failed_run_on_and_reopens_its_failed_step() -> None:
    reopen = runs.retry()
    assert (reopen.action, reopen.from_status) == ("retry", "failed")
    assert reopen.status(run(status="failed")) == "running"
    failed = step("charge", status="failed", failures=1, error='{"message": "m"}')
    kept = step("fetch", status="succeeded")
    assert shape(reopen.ops(snapshot("failed", failed, kept), T0)) == [("PutStep",)]
    assert (failed.status, kept.status) == ("pending", "succeeded")


def test_a_retried_run_of_a_queue_waits_for_admission_again() -> None:
    """It gave its queue's slot back when it failed."""
    assert runs.retry().status(run(status="failed", queue="q")) == "queued"


@pytest.mark.parametrize(
    ("action", "deadline_at", "timeout", "renewed"),
    [
        ("retry", T0 - 1, 30.0, T0 + 30),  # the deadline that failed it is counted again
        ("retry", T0 + 5, 30.0, T0 + 30),  # failed otherwise: a new attempt all the same
        ("resume", T0 + 5, 30.0, T0 + 5),  # before its deadline: a resume keeps it
        ("resume", T0 - 1, 30.0, T0 + 30),  # past it: counted again, as a retry's
        ("retry", None, None, None),  # no deadline, none given
    ],
)
def test_a_reopened_run_with_a_timeout_gets_it_again_once_its_attempt_is_over(
    action: str, deadline_at: float | None, timeout: float | None, renewed: float | None
) -> None:
    reopen = runs.retry() if action == "retry" else runs.resume()
    assert reopen.deadline(run(deadline_at=deadline_at, timeout=timeout), T0) == renewed


def test_a_reopened_child_never_passes_its_live_parents_deadline() -> None:
    child = run(deadline_at=T0 - 1, timeout=30.0)
    assert runs.retry().deadline(child, T0, parent=T0 + 10) == T0 + 10


def test_a_capped_child_stores_the_time_its_parent_left_it_as_its_timeout() -> None:
    assert runs.timeout_of(T0, 60.0, parent=T0 + 20) == 20.0
    assert runs.timeout_of(T0, 10.0, parent=T0 + 20) == 10.0
    assert runs.timeout_of(T0, None, parent=T0 + 20) == 20.0
    assert runs.timeout_of(T0, None) is None
    assert runs.timeout_of(T0, 10.0, parent=T0 - 5) == 0.0  # the parent's passed already


def test_the_status_types_and_enums_name_the_same_values() -> None:
    assert set(get_args(statuses.RunStatusName)) == {s.value for s in statuses.RunStatus}
    assert set(get_args(statuses.StepStatusName)) == {s.value for s in statuses.StepStatus}
    assert statuses.TERMINAL <= statuses.SETTLED <= set(get_args(statuses.RunStatusName))
    assert set(get_args(statuses.StepStatusName)) >= statuses.STEP_IN_FLIGHT
    assert {steps.CANCEL_CUT.attempt} <= set(get_args(statuses.AttemptStatusName))


def test_a_retry_moves_a_parked_run_on_too_and_a_resume_does_not() -> None:
    reopen = runs.retry()
    assert reopen.goes_on_from("needs_attention") and reopen.goes_on_from("failed")
    assert not runs.resume().goes_on_from("needs_attention")
    assert reopen.status(run(status="needs_attention")) == "running"
    assert reopen.status(run(status="needs_attention", queue="q")) == "queued"
    parked = step("charge", status="failed", failures=2, error='{"message": "m"}')
    error = runs.needs_attention("charge", parked.error).error
    ops = reopen.ops(
        PassSnapshot(run(status="needs_attention", error=error), {"charge": parked}, [], {}), T0
    )
    assert shape(ops) == [("PutStep",)]
    assert (parked.status, parked.retried_failures) == ("pending", 2)


def test_a_parked_step_ends_the_pass_needs_attention_naming_it_and_takes_no_children() -> None:
    from plait.runtime.control_flow import ParkSignal, SuspendSignal

    end = runs.waits(ParkSignal("charge", '{"message": "down", "type": "RuntimeError"}'))
    assert end.status == "needs_attention" and end.cut is None
    assert serde.loads(end.error) == {"message": "down", "type": "RuntimeError", "step": "charge"}
    assert runs.waits(SuspendSignal("hold", "WORKFLOW_SUSPENDED")).status == "suspended"
    ops, ended = runs.end_ops(run(parent_run_id="p", parent_step_key="k"), end, [])
    assert ended == [] and len(ops) == 1 and ops[0].parent is None  # the parent keeps waiting
    assert "needs_attention" in runs.CANCELLABLE and "needs_attention" in runs.RETRYABLE
