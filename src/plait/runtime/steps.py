"""The step state machine: every way a step's status can change, written once.

An attempt begins, ends (succeeded, failed with a retry or for good, cut short), a child
run settles its parent's step, a timer fires, an event is consumed. Inline passes, the
step worker and the graph replay all call these functions, so a step records the same
rows whichever path ran it. Each function changes the step row it is given and returns
the writes that record the change; it never touches a database, so the rules can be read
(and tested) here alone. Stores receive the resulting rows, limits and error records as
data and only move them.

Statuses: ``pending`` (created, no attempt yet) -> ``running`` (an attempt in flight) ->
``succeeded`` | ``failed``; ``scheduled`` waits for a timer (sleep, retry back-off, event
timeout) or for the step queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from plait import errors, ids, serde
from plait.retry import RetryPolicy
from plait.runtime.attempt import Outcome
from plait.store.base import (
    ClearTimer,
    ConsumeEvent,
    EnqueueJob,
    FinishAttempt,
    GuardStep,
    Op,
    PutStep,
    SetTimer,
    SetValue,
    StartAttempt,
    StepEnd,
    StepRow,
)

#: attempts of one step cut short by a dying worker before the step is failed: a body
#: that kills its worker every time must not take every worker down forever
MAX_INTERRUPTIONS = 10


# -- error records ------------------------------------------------------------------------


def _text(record: dict[str, Any]) -> str:
    """A record as stored: ``serde.dumps`` is None only for None, never for a dict."""
    return cast(str, serde.dumps(record))


def control_error(message: str, code: str) -> str:
    """The stored error of a run that plait stopped on purpose (suspend, cancel, a
    version conflict), typed after its code."""
    return _text({"message": message, "type": code.title().replace("_", ""), "code": code})


def interrupted_error(key: str, times: int = MAX_INTERRUPTIONS) -> str:
    return _text(
        {
            "message": f"step {key!r} was interrupted {times} times "
            "(its worker died while running it each time)",
            "type": "StepInterrupted",
            "code": errors.STEP_INTERRUPTED,
        }
    )


def cancelled_error() -> str:
    return _text(
        {"message": "cancelled", "type": "CancelledError", "code": errors.WORKFLOW_CANCELLED}
    )


def run_cancelled_error(reason: str | None) -> str:
    """The error of a run cancelled by a user (and of its cancelled children)."""
    return _text(
        {"message": reason or "cancelled", "type": "Cancel", "code": errors.WORKFLOW_CANCELLED}
    )


def event_timeout_error(name: str) -> str:
    return _text(
        {
            "message": f"no event {name!r} before the timeout",
            "type": "EventTimeout",
            "code": errors.EVENT_TIMEOUT,
        }
    )


def missing_function_message(function: str, where: str) -> str:
    return (
        f"function {function!r} ({where}) is not registered in this deployment; "
        "deploy it and resume the run"
    )


def child_step_end(
    child_id: str | None, status: str, output: str | None, error: str | None
) -> StepEnd:
    """How a parent's step ends when its child run ends ``status``. A child that did not
    complete fails the step with the child's code. ``child_id`` is None when one record
    serves every run a cancel ends (the step row still names its child)."""
    if status == "completed":
        return StepEnd("succeeded", output, None)
    child_error: dict[str, Any] = serde.loads(error) or {}
    message = child_error.get("message", status)
    record = {
        "message": f"child run {child_id} {status}: {message}"
        if child_id
        else f"child run {status}: {message}",
        "type": "ChildRunError",
        "code": child_error.get("code") or errors.CHILD_FAILED,
    }
    if child_id:
        record["child_run_id"] = child_id
    return StepEnd("failed", None, serde.dumps(record))


# -- attempts -----------------------------------------------------------------------------


def begin(step: StepRow, worker: str | None, now: float) -> tuple[list[Op], bool]:
    """Start the step's next attempt. Returns the writes and whether the body may run.

    A step found ``running`` lost its attempt with a process that died: that attempt ends
    ``interrupted``. Interruptions use no retry budget, but after ``MAX_INTERRUPTIONS``
    of them the step fails instead of starting again.
    """
    ops: list[Op] = []
    if step.status == "running":
        interrupted = step.attempts - step.failures
        step.updated_at = now
        if interrupted >= MAX_INTERRUPTIONS:
            step.status, step.wake_at = "failed", None
            step.error = interrupted_error(step.key, interrupted)
            ops.append(FinishAttempt(step, step.attempts, "interrupted", None, step.error))
            return ops, False
        ops.append(FinishAttempt(step, step.attempts, "interrupted"))
    elif step.status == "scheduled" and not step.queued:
        ops.append(ClearTimer(step.key))
    step.attempts += 1
    step.status, step.wake_at, step.updated_at = "running", None, now
    ops.append(StartAttempt(step, step.attempts, worker))
    return ops, True


def settle(step: StepRow, outcome: Outcome, now: float) -> list[Op]:
    """End the running attempt with what its body did: succeeded, failed with a retry
    (a durable timer, or the queue for a queued step), or failed for good."""
    attempt = step.attempts
    step.updated_at = now
    if outcome.ok:
        step.status, step.output, step.error = "succeeded", outcome.output, None
        return [FinishAttempt(step, attempt, "succeeded", outcome.output)]
    error = serde.dumps(outcome.error)
    step.failures += 1
    step.error = error
    spent = step.failures - step.retried_failures
    if outcome.retryable and spent <= step.retries:
        delay = RetryPolicy(step.retries, step.retry_delay).delay_after(spent)
        step.status, step.wake_at = "scheduled", now + delay
        ops: list[Op] = [FinishAttempt(step, attempt, "failed", None, error)]
        if step.queued:
            ops.append(EnqueueJob(step.key, step.function or "", step.wake_at))
        elif delay > 0:
            ops.append(SetTimer(step.key, "retry", step.wake_at))
        return ops
    step.status = "failed"
    return [FinishAttempt(step, attempt, "failed", None, error)]


def interrupt(step: StepRow, now: float, *, cancelled: bool) -> list[Op]:
    """End the running attempt because its task was cancelled. A user's cancel fails the
    step; a shutdown leaves it to run again (same invocation id, next attempt) wherever
    the run continues: a queued step goes straight back on the queue."""
    attempt = step.attempts
    step.updated_at = now
    if cancelled:
        step.status, step.error = "failed", cancelled_error()
        return [FinishAttempt(step, attempt, "cancelled", None, step.error)]
    if step.queued:
        step.status, step.wake_at = "scheduled", now
        return [
            FinishAttempt(step, attempt, "interrupted"),
            EnqueueJob(step.key, step.function or "", now),
        ]
    step.status = "pending"
    return [FinishAttempt(step, attempt, "interrupted")]


def enqueue(step: StepRow, now: float) -> list[Op]:
    """Hand a pending queued step to the step queue."""
    step.status, step.updated_at = "scheduled", now
    return [_put(step), EnqueueJob(step.key, step.function or "", now)]


# -- child runs ---------------------------------------------------------------------------


def begin_child(step: StepRow, worker: str | None, now: float) -> list[Op]:
    """The step's attempt is a child run; the child's end settles it (``child_step_end``
    is what the store writes then)."""
    step.attempts += 1
    step.child_run_id = ids.child_run_id(step.invocation_id, step.attempts)
    step.status, step.updated_at = "running", now
    return [StartAttempt(step, step.attempts, worker)]


def open_suspend(step: StepRow, worker: str | None, now: float) -> list[Op]:
    """A suspend's one attempt: it stays open (``pending``) until a resume closes it."""
    step.attempts, step.updated_at = 1, now
    return [StartAttempt(step, 1, worker)]


# -- a run that goes on again ------------------------------------------------------------


def resume_suspend(step: StepRow, now: float) -> list[Op]:
    """An open suspend is released: its attempt succeeds with when it was resumed."""
    opened = serde.loads(step.input)
    fields = cast(dict[str, Any], opened) if isinstance(opened, dict) else {}
    output = {**fields, "resumed_at": now}
    step.status, step.output, step.updated_at = "succeeded", serde.dumps(output), now
    return [FinishAttempt(step, step.attempts, "succeeded", step.output)]


def reopen_failed(step: StepRow, now: float) -> list[Op]:
    """A step that failed for good gets a fresh retry budget when its run is retried (its
    earlier failures still count as failures, not as interruptions). Its new outcome is
    one the workflow has not seen. An event wait that timed out waits again, with its
    timeout."""
    step.retried_failures = step.failures
    step.error, step.delivered, step.updated_at = None, None, now
    if step.kind == "event":
        return wait_event(step, step.timeout, now)
    step.status, step.wake_at = "pending", None
    return [_put(step)]


def requeue(step: StepRow, now: float) -> list[Op]:
    """A queued step of a failed run lost its job when the run ended; retried, it goes
    back on the queue, its cut-off attempt (if any) ending ``interrupted``."""
    ops: list[Op] = []
    if step.status == "running":
        step.status, step.updated_at = "scheduled", now
        ops.append(FinishAttempt(step, step.attempts, "interrupted"))
    ops.append(EnqueueJob(step.key, step.function or "", max(now, step.wake_at or now)))
    return ops


def resume_ops(recorded: Iterable[StepRow], now: float, reason: str | None = None) -> list[Op]:
    """What ``resume`` writes: every open suspend is released, or with ``reason`` only
    the suspends of that reason (``ValueError`` naming the open ones if there is none)."""
    opened = [s for s in recorded if s.kind == "suspend" and s.status == "pending"]
    chosen = opened if reason is None else [s for s in opened if _reason(s) == reason]
    if reason is not None and not chosen:
        names = ", ".join(repr(_reason(s)) for s in opened) or "none"
        raise ValueError(f"no open suspend {reason!r} (open suspends: {names})")
    return [op for step in chosen for op in resume_suspend(step, now)]


def _reason(step: StepRow) -> str | None:
    opened = serde.loads(step.input)
    return cast(dict[str, Any], opened).get("reason") if isinstance(opened, dict) else None


def retry_ops(recorded: Iterable[StepRow], now: float) -> list[Op]:
    """What ``retry`` writes: failed steps start over, queued steps in flight get their
    jobs back."""
    ops: list[Op] = []
    for step in recorded:
        if step.status == "failed":
            ops += reopen_failed(step, now)
        elif step.queued and step.status in ("scheduled", "running"):
            ops += requeue(step, now)
    return ops


# -- timers and events --------------------------------------------------------------------


def schedule_sleep(step: StepRow, seconds: float, now: float) -> list[Op]:
    """A new sleep step: a durable timer, or done at once for a sleep of no length."""
    step.wake_at = now + seconds
    if seconds <= 0:
        step.status = "succeeded"
        return [_put(step)]
    step.status = "scheduled"
    return [_put(step), SetTimer(step.key, "sleep", step.wake_at)]


def fire_timer(step: StepRow, now: float) -> list[Op] | None:
    """The writes of a sleep whose time has come, or None while it has not."""
    if step.wake_at is None or step.wake_at > now:
        return None
    step.status, step.updated_at = "succeeded", now
    return [_put(step), ClearTimer(step.key)]


def wait_event(step: StepRow, timeout: float | None, now: float) -> list[Op]:
    """A new event step, with a durable timer for its timeout (kept on the step, so a
    retried run waits again as long)."""
    step.status, step.timeout = "scheduled", timeout
    if timeout is None:
        return [_put(step)]
    step.wake_at = now + timeout
    return [_put(step), SetTimer(step.key, "event_timeout", step.wake_at)]


def consume_event(step: StepRow, event_id: int, payload: str | None, now: float) -> list[Op]:
    """The event step succeeds with the payload; the event is marked as taken by it."""
    step.status, step.output, step.updated_at = "succeeded", payload, now
    ops: list[Op] = [_put(step), ConsumeEvent(event_id, step.key)]
    if step.wake_at is not None:
        ops.append(ClearTimer(step.key))
    return ops


def time_out_event(step: StepRow, name: str, now: float) -> list[Op] | None:
    """The writes of an event wait whose timeout passed, or None while it has not."""
    if step.wake_at is None or step.wake_at > now:
        return None
    step.status, step.error, step.updated_at = "failed", event_timeout_error(name), now
    return [_put(step), ClearTimer(step.key)]


def record_value(step: StepRow, value: Any, now: float) -> list[Op]:
    """A value recorded once (``wf.now()``, ``wf.uuid()``) and replayed ever after."""
    step.status, step.output, step.updated_at = "succeeded", serde.dumps(value), now
    return [_put(step)]


def publish_value(step: StepRow, key: str, value: str | None, now: float) -> list[Op]:
    """``wf.set_value``: recorded as a step on first reach (so a replay publishes
    nothing again, and never puts an older value back), and published with it."""
    step.status, step.output, step.updated_at = "succeeded", value, now
    return [_put(step), SetValue(key, value)]


# -- approval gates -----------------------------------------------------------------------
#
# A gate's one attempt stays open (the step ``pending``) until a decision or its deadline
# closes it; the deadline is the step's ``wake_at`` and a durable timer. Every close is
# guarded: it is written only if the gate is still open in the database, so a decision
# and an expiry racing each other end with exactly one of them.


def open_gate(step: StepRow, worker: str | None, expires_at: float | None, now: float) -> list[Op]:
    """A gate reached for the first time: its attempt opens, its deadline is a timer."""
    step.attempts, step.wake_at, step.updated_at = 1, expires_at, now
    ops: list[Op] = [StartAttempt(step, 1, worker)]
    if expires_at is not None:
        ops.append(SetTimer(step.key, "approval", expires_at))
    return ops


def decide_gate(step: StepRow, output: str | None, now: float) -> list[Op]:
    """The gate closes with a decision (``output``: its data, who, when)."""
    ops: list[Op] = [GuardStep(step.key, "pending")]
    step.status, step.output, step.error, step.updated_at = "succeeded", output, None, now
    ops.append(FinishAttempt(step, step.attempts, "succeeded", output))
    if step.wake_at is not None:
        ops.append(ClearTimer(step.key))
    return ops


def expire_gate(step: StepRow, now: float) -> list[Op] | None:
    """The writes of a gate whose deadline passed with no decision, or None while it
    has not."""
    if step.wake_at is None or step.wake_at > now:
        return None
    output = serde.dumps({"expired": True, "expired_at": now})
    ops: list[Op] = [GuardStep(step.key, "pending")]
    step.status, step.output, step.updated_at = "succeeded", output, now
    ops += [FinishAttempt(step, step.attempts, "succeeded", output), ClearTimer(step.key)]
    return ops


def reopen_gate(step: StepRow, worker: str | None, now: float) -> list[Op]:
    """A decision accepted on arrival failed the workflow's own schema when the run read
    it: the gate opens again (a new attempt), with its deadline if that is still ahead."""
    step.attempts += 1
    step.status, step.output, step.updated_at = "pending", None, now
    ops: list[Op] = [StartAttempt(step, step.attempts, worker)]
    if step.wake_at is not None and step.wake_at > now:
        ops.append(SetTimer(step.key, "approval", step.wake_at))
    return ops


def _put(step: StepRow) -> Op:
    return PutStep(step)
