"""The step state machine: every way a step's status can change, written once.

An attempt begins, ends (succeeded, failed with a retry or for good, cut short), a child
run ends its parent's step, a timer fires, an event is consumed. Inline passes, the
step worker and the graph replay all call these functions, so a step records the same
rows whichever path ran it. Each function changes the step row it is given and returns
the writes that record the change; it never touches a database, so the rules can be read
(and tested) here alone. Stores receive the resulting rows, limits and error records as
data and only move them.

Statuses: ``pending`` (created, no attempt yet) -> ``running`` (an attempt in flight) ->
``succeeded`` | ``failed``; ``scheduled`` waits for a timer (sleep, retry back-off, event
timeout) or for its job (a job step).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from plait import errors, ids, request, serde
from plait.retry import RetryPolicy
from plait.runtime.attempt import Outcome
from plait.statuses import STEP_IN_FLIGHT, AttemptStatusName, StepStatusName
from plait.store.ops import (
    AnswerRequest,
    AppendStream,
    CancelChildren,
    CancelCut,
    CancelJob,
    ClearTimer,
    ConsumeEvent,
    EnqueueJob,
    FinishAttempt,
    GuardStep,
    Op,
    PutStep,
    SendEvent,
    SetTags,
    SetTimer,
    SetValue,
    StartAttempt,
    StepEnd,
    TakeRequest,
)
from plait.store.rows import StepRow

#: a step reached for the first time, before anything ran (``Ledger.new_step``)
NEW_STATUS: StepStatusName = "pending"

#: attempts of one step cut short by a dying worker before the step is failed: a body
#: that kills its worker every time must not take every worker down forever
MAX_INTERRUPTIONS = 10

#: the key suffix of a step's compensation step (``Driver.compensate``)
ON_ERROR = ":on_error"

#: steps that only wait, with no body of their own: one the workflow cancels is over
WAITS = frozenset({"sleep", "event", "approval", "request"})

#: step kind of a wait for a request (``wf.wait_for_request``), and of its answer
REQUEST_KIND = "request"
ANSWER_KIND = "reply"

#: the most steps a step records it was reached after (the last ones of a wider gather;
#: ``reopened`` reads a full list knowing it may miss some)
MAX_AFTER = 32

#: step kind of a patch marker (``wf.patched``): the run took the patched path there
PATCH_KIND = "patch"

#: step kind of an event sent to a run (``wf.send_event``)
SEND_KIND = "send_event"

#: step kind of a graph node instance
NODE_KIND = "node"
#: step kind of one item of a ``for_each`` node instance
ITEM_KIND = "item"
#: the kinds of steps a graph run takes (one run as a job needs the graph's attempt hook)
GRAPH_STEP_KINDS = frozenset({NODE_KIND, ITEM_KIND})


#: an attempt begun and not ended yet (``StartAttempt``'s status)
OPEN_ATTEMPT: AttemptStatusName = "running"

#: a cancelled run's steps in flight fail, and their open attempts end ``cancelled``
#: (``interrupt``, ``cancel_waiting``; for the attempts no pass will see, ``runs.cancel``)
CANCEL_CUT = CancelCut(step="failed", attempt="cancelled", open_attempt=OPEN_ATTEMPT)


# -- error records ------------------------------------------------------------------------


def _text(record: dict[str, Any]) -> str:
    """A record as stored: ``serde.dumps`` is None only for None, never for a dict."""
    return cast(str, serde.dumps(record))


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


def step_cancelled_error() -> str:
    """The error of a step whose task the workflow cancelled."""
    return _text(
        {
            "message": "the workflow cancelled the task awaiting this step",
            "type": "CancelledError",
            "code": errors.CANCELLED,
            "retryable": False,
        }
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
        return StepEnd("succeeded", output, None, failures=0)
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
    return StepEnd("failed", None, serde.dumps(record), failures=1)


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
    ops.append(StartAttempt(step, step.attempts, OPEN_ATTEMPT, worker))
    return ops, True


def end_attempt(step: StepRow, outcome: Outcome, now: float) -> list[Op]:
    """End the running attempt with what its body did: succeeded, failed with a retry
    (a durable timer, or the job table for a job step), or failed for good (no retries
    left, or an error that says ``"retryable": false``)."""
    attempt = step.attempts
    step.updated_at = now
    if outcome.ok:
        step.status, step.output, step.error = "succeeded", outcome.output, None
        return [FinishAttempt(step, attempt, "succeeded", outcome.output)]
    error = serde.dumps(outcome.error)
    step.failures += 1
    step.error = error
    spent = step.failures - step.retried_failures
    if retryable(outcome) and spent <= step.retries:
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


def retryable(outcome: Outcome) -> bool:
    """Whether a failed attempt may be tried again: not when its error record says
    ``"retryable": false`` (a ``NonRetryableError``, a class in ``no_retry_on``, input
    that does not validate), whichever process ran the body."""
    record = outcome.error or {}
    return outcome.retryable and record.get("retryable") is not False


def retryable_error(error: str | None) -> bool:
    """Whether a step's stored error leaves room for another attempt: not when it says
    ``"retryable": false`` (see ``retryable``)."""
    if error is None or '"retryable"' not in error:
        return True
    record = serde.loads(error)
    return not (isinstance(record, dict) and cast(dict[str, Any], record).get("retryable") is False)


def ended_at(step: StepRow) -> float:
    """When an ended step's outcome came about: a sleep, or a wait whose timeout passed,
    when its time came (the pass that sees it may come much later, after a restart);
    any other step when its row ended."""
    if step.kind in WAITS and step.wake_at is not None:
        return min(step.wake_at, step.updated_at)
    return step.updated_at


def interrupt(step: StepRow, now: float, *, cancelled: bool) -> list[Op]:
    """End the running attempt because its task was cancelled. A user's cancel fails the
    step; a shutdown leaves it to run again (same invocation id, next attempt) wherever
    the run continues: a job step goes straight back on the job table."""
    attempt = step.attempts
    step.updated_at = now
    if cancelled:
        step.status, step.error = CANCEL_CUT.step, cancelled_error()
        return [FinishAttempt(step, attempt, CANCEL_CUT.attempt, None, step.error)]
    if step.queued:
        step.status, step.wake_at = "scheduled", now
        return [
            FinishAttempt(step, attempt, "interrupted"),
            EnqueueJob(step.key, step.function or "", now),
        ]
    step.status = "pending"
    return [FinishAttempt(step, attempt, "interrupted")]


def cancel_step(step: StepRow, now: float) -> list[Op]:
    """The workflow cancelled the task awaiting a step with a body (``task.cancel()``, a
    failing task group sibling, a loser of ``asyncio.wait``): the step fails ``CANCELLED``
    for good, with no retry and no ``on_error``. Its running attempt ends ``cancelled``;
    a retry's back-off timer goes; a job step's job goes (``CancelJob``: a step worker
    may be running it, so the store ends the step only while it is still in flight)."""
    step.updated_at = now
    step.error = step_cancelled_error()
    was, step.wake_at = step.status, None
    step.status = CANCEL_CUT.step
    if step.queued:
        return [CancelJob(step, CANCEL_CUT)]
    if was == "running":
        return [FinishAttempt(step, step.attempts, CANCEL_CUT.attempt, None, step.error)]
    if was == "scheduled":
        return [_put(step), ClearTimer(step.key)]
    return [_put(step)]


def cancelled_by_workflow(step: StepRow) -> bool:
    """A step recorded failed because the workflow cancelled the task awaiting it
    (``cancel_step``): a replay hands the workflow no error for it (it cancels the task
    again at the same point) and runs no ``on_error`` handler."""
    if step.status != "failed" or step.error is None or errors.CANCELLED not in step.error:
        return False
    record = serde.loads(step.error)
    return isinstance(record, dict) and (
        cast(dict[str, Any], record).get("code") == errors.CANCELLED
    )


def while_running(step: StepRow) -> Op:
    """A guard that lets a step worker's record of its attempt's cancel through only
    while the step still runs in the store: one that ended meanwhile (its workflow
    cancelled it, its run's cancel closed it) keeps the end it has."""
    return GuardStep(step.key, "running")


def cancel_waiting(step: StepRow, now: float) -> list[Op]:
    """End a step in flight that has no attempt of its own (a ``for_each`` node waiting
    for its items) because a user cancelled its run: it fails, as a step whose attempt
    the cancel cut short does (``interrupt``)."""
    step.status, step.error, step.updated_at = CANCEL_CUT.step, cancelled_error(), now
    return [PutStep(step)]


def enqueue(step: StepRow, now: float) -> list[Op]:
    """Hand a pending job step to the job table."""
    step.status, step.updated_at = "scheduled", now
    return [_put(step), EnqueueJob(step.key, step.function or "", now)]


# -- child runs ---------------------------------------------------------------------------


def begin_child(step: StepRow, worker: str | None, now: float) -> list[Op]:
    """The step's attempt is a child run; the child's end ends it (``child_step_end``
    is what the store writes then)."""
    step.attempts += 1
    step.child_run_id = ids.child_run_id(step.invocation_id, step.attempts)
    step.status, step.updated_at = "running", now
    return [StartAttempt(step, step.attempts, OPEN_ATTEMPT, worker)]


def cancel_child(step: StepRow, run_id: str, now: float) -> list[Op]:
    """The workflow cancelled the task awaiting a child run's step (the loser of a race,
    a failing task group sibling): the step fails ``CANCELLED`` as ``cancel_step`` ends
    one with a body, and in the same commit its child run is cancelled, with its own
    children, wherever it runs: nothing waits for its outcome any more, and left alive
    it would go on doing work no one collects (the parent would wait for it too)."""
    step.updated_at = now
    step.error = step_cancelled_error()
    step.status, step.wake_at = CANCEL_CUT.step, None
    message = f"parent run {run_id} cancelled the task awaiting its step {step.key!r}"
    error = _text({"message": message, "type": "Cancel", "code": errors.WORKFLOW_CANCELLED})
    return [
        FinishAttempt(step, step.attempts, CANCEL_CUT.attempt, None, step.error),
        CancelChildren("cancelled", error, None, CANCEL_CUT, step_key=step.key),
    ]


def open_suspend(step: StepRow, worker: str | None, now: float) -> list[Op]:
    """A suspend's one attempt: it stays open (``pending``) until a resume closes it."""
    step.attempts, step.updated_at = 1, now
    return [StartAttempt(step, 1, OPEN_ATTEMPT, worker)]


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
    timeout. A wait the workflow cancelled (a sleep, an event wait or an approval,
    recorded ``cancelled`` when its run ended) waits again until its own ``wake_at``,
    with its timer: the replay cancels it again where the workflow did, but where a
    reopened step changes the race (the call that beat a deadline by failing is slow
    now) the deadline must still be there."""
    cancelled = cancelled_wait(step)
    step.retried_failures = step.failures
    step.error, step.delivered, step.updated_at = None, None, now
    if cancelled:
        step.status = "pending" if step.kind == "approval" else "scheduled"
        return [_put(step), *rearm_timer(step)]
    if step.kind == "event":
        return wait_event(step, step.timeout, now)
    if step.kind == REQUEST_KIND:
        return wait_request(step, step.timeout, now)
    step.status, step.wake_at = "pending", None
    return [_put(step)]


def requeue(step: StepRow, now: float) -> list[Op]:
    """A job step of a failed run lost its job when the run ended; retried, it goes
    back on the job table, its cut-off attempt (if any) ending ``interrupted``."""
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


def retry_ops(
    recorded: Iterable[StepRow],
    now: float,
    run_error: str | None = None,
    *,
    after_cap: int | None = None,
) -> list[Op]:
    """What ``retry`` writes: the failed steps the workflow did not go on from start over
    (``reopened``), every step still waiting on a durable timer gets it back, and job
    steps in flight get their jobs back.

    Ending the failed run deleted its timers and jobs, so a step that was waiting when a
    sibling failed the run (a sleep, an event's timeout, a retry back-off, an approval's
    deadline) would otherwise never wake: its timer is armed again at the step's stored
    ``wake_at`` (a time already past fires at once). ``run_error`` is the failed run's
    stored error and ``after_cap`` the most keys a step's ``reached_after`` holds (see
    ``reopened``)."""
    rows = list(recorded)
    again = reopened(rows, run_error, after_cap=after_cap)
    ops: list[Op] = []
    for step in rows:
        if step.status == "failed":
            if step.key in again:
                ops += reopen_failed(step, now)
        elif step.queued and step.status in ("scheduled", "running"):
            ops += requeue(step, now)
        else:
            ops += rearm_timer(step)
    return ops


def reopened(
    recorded: Iterable[StepRow], run_error: str | None = None, *, after_cap: int | None = None
) -> set[str]:
    """The keys of the failed steps a retry reopens: those the workflow did not go on
    from. A failure the workflow received and then reached another step after (it
    caught it, or gathered it with ``return_exceptions=True``) was handled: the steps
    recorded after it depend on it having failed, so it stays failed and replays as the
    same error, and its body never runs again (a caught charge is not charged twice).
    Any step counts, a recorded value (``wf.now()``, ``wf.set_value``) too: a new
    outcome would take the workflow down another path past a record of this one.

    * A code workflow's step records in ``reached_after`` the outcomes its task had
      received when it reached it; a failed step named there was handled. Its own
      compensation step ``<key>:on_error`` names it too, but is no sign the workflow
      went on: plait runs it before the workflow sees the failure.
    * A graph's error edge starts a node step whose ``from_key`` is the failed node
      step (the same kind); the items of a failed ``for_each`` node name it too, but are
      of another kind. A failure an error edge took was handled.
    * The step the run's error names (``"step"``) failed the run: it is always reopened,
      even when the workflow reached a step after it (logged it, then raised it again).
    * A step's compensation step and a ``for_each`` node's items go with their step:
      reopened if it is, kept failed if it is kept.
    * ``reached_after`` keeps only the newest ``after_cap`` keys (the rest of a wide
      gather is dropped), so a handled failure may be missing from it. When a list is
      full, a failure the workflow received (``delivered``) before the newest outcome in
      that list counts as handled as well: running a handled step twice repeats its
      effects, while a failure wrongly kept still fails the run again on retry, which
      the step named in its error always escapes.
    * A failure the workflow caught without reaching any step afterwards leaves no
      trace of that and is reopened like one it let through; nothing recorded depends on
      its outcome, so the replay stays consistent whatever the new attempt gives.
    * A step the workflow cancelled (``cancelled_by_workflow``) is kept as it is: the
      replay cancels it again where it was. Unless the workflow received the failure
      the run's error names before the cancel (``cut_by``): a task group's sibling that
      a failure cancelled, replayed as that cancel, would fail the retried run again.
    """
    rows = {step.key: step for step in recorded}
    # a step the workflow cancelled is cancelled again where it was: it stays as it is
    failed = {
        key
        for key, step in rows.items()
        if step.status == "failed" and not cancelled_by_workflow(step)
    }
    if not failed:
        return set()
    handled: set[str] = set()
    for step in rows.values():
        if step.from_key in failed and rows[step.from_key].kind == step.kind:
            handled.add(step.from_key)
        if step.reached_after is None:
            continue
        after: list[str] = serde.loads(step.reached_after) or []
        handled.update(k for k in after if k in failed and step.key != f"{k}{ON_ERROR}")
        if after_cap is not None and len(after) >= after_cap:
            seen = [rows[k].delivered for k in after if k in rows]
            newest = max((d for d in seen if d is not None), default=None)
            if newest is not None:
                handled.update(
                    k
                    for k in failed
                    if k != step.key and (d := rows[k].delivered) is not None and d < newest
                )
    named = _named_step(run_error)
    if named is not None:
        handled.discard(named)
    for key in failed:
        owner = _owner(rows[key], rows)
        if owner is not None and owner in failed:
            if owner in handled:
                handled.add(key)
            else:
                handled.discard(key)
    again = failed - handled
    return again | cut_by(rows.values(), rows[named] if named in again else None)


def cut_by(recorded: Iterable[StepRow], failure: StepRow | None) -> set[str]:
    """The keys of the steps the workflow cancelled after it received ``failure``, the
    reopened step that failed the run (its error names it): that failure is what
    cancelled them (a task group's sibling, with a cleanup step in a ``finally`` or not;
    the other side of a race it lost by failing), and once it runs again nothing cancels
    them. Received is read from the order the outcomes reached the workflow
    (``delivered``), which no clock skews; by time for rows without it. A cancel that
    came before it stays (the loser of a race the workflow went on from), and so does one
    after another failure, one the workflow caught, say."""
    if failure is None:
        return set()

    def after(step: StepRow) -> bool:
        if step.delivered is not None and failure.delivered is not None:
            return step.delivered > failure.delivered
        return step.updated_at >= failure.updated_at

    return {step.key for step in recorded if cancelled_by_workflow(step) and after(step)}


def cancelled_wait(step: StepRow) -> bool:
    """A wait recorded failed ``cancelled``: the workflow cancelled it. It was
    waiting, not failing."""
    if step.kind not in WAITS or step.status != "failed":
        return False
    record = serde.loads(step.error)
    return isinstance(record, dict) and (
        cast(dict[str, Any], record).get("code") == errors.WORKFLOW_CANCELLED
    )


def _named_step(run_error: str | None) -> str | None:
    """The step a run's stored error names as the one that failed it, if any."""
    record = serde.loads(run_error)
    if not isinstance(record, dict):
        return None
    named = cast(dict[str, Any], record).get("step")
    return named if isinstance(named, str) else None


def _owner(step: StepRow, rows: dict[str, StepRow]) -> str | None:
    """The step a step belongs to: a compensation step's step, a ``for_each`` item's
    node (its ``from_key``, of another kind), else None."""
    if step.key.endswith(ON_ERROR):
        return step.key.removesuffix(ON_ERROR)
    start = rows.get(step.from_key) if step.from_key is not None else None
    if start is not None and start.kind != step.kind:
        return start.key
    return None


def rearm_timer(step: StepRow) -> list[Op]:
    """The durable timer a step that waits on one needs again (its run ended, which
    deleted its timers, and goes on now): a sleep, an event wait with a timeout, a
    retry back-off of a step run in the pass, an approval with a deadline; at the
    step's ``wake_at``. Nothing for any other step."""
    if step.wake_at is None or step.queued:
        return []
    if step.kind == "approval":
        if step.status != "pending":
            return []
        return [SetTimer(step.key, "approval", step.wake_at)]
    if step.status != "scheduled":
        return []
    purpose = {"sleep": "sleep", "event": "event_timeout", REQUEST_KIND: "request_timeout"}.get(
        step.kind, "retry"
    )
    return [SetTimer(step.key, purpose, step.wake_at)]


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


def _open_wait(step: StepRow, timeout: float | None, now: float, timer: str) -> list[Op]:
    """A new wait (an event's, a request's), with a durable timer of kind ``timer`` for
    its timeout (kept on the step, so a retried run waits again as long)."""
    step.status, step.timeout = "scheduled", timeout
    if timeout is None:
        return [_put(step)]
    step.wake_at = now + timeout
    return [_put(step), SetTimer(step.key, timer, step.wake_at)]


def _time_out(step: StepRow, error: str, now: float) -> list[Op] | None:
    """The writes of a wait whose timeout passed (it fails with ``error``), or None while
    it has not."""
    if step.wake_at is None or step.wake_at > now:
        return None
    step.status, step.error, step.updated_at = "failed", error, now
    return [_put(step), ClearTimer(step.key)]


def wait_event(step: StepRow, timeout: float | None, now: float) -> list[Op]:
    """A new event step, with a durable timer for its timeout (kept on the step, so a
    retried run waits again as long)."""
    return _open_wait(step, timeout, now, "event_timeout")


def consume_event(step: StepRow, event_id: int, payload: str | None, now: float) -> list[Op]:
    """The event step succeeds with the payload; the event is marked as taken by it."""
    step.status, step.output, step.updated_at = "succeeded", payload, now
    ops: list[Op] = [_put(step), ConsumeEvent(event_id, step.key)]
    if step.wake_at is not None:
        ops.append(ClearTimer(step.key))
    return ops


def time_out_event(step: StepRow, name: str, now: float) -> list[Op] | None:
    """The writes of an event wait whose timeout passed, or None while it has not."""
    return _time_out(step, event_timeout_error(name), now)


# -- requests -----------------------------------------------------------------------------
#
# A wait for a request is a step like an event wait: ``scheduled`` until it takes a
# request (it succeeds with the request's id and data) or its timeout passes (it fails).
# Its answer is a step of its own, recorded once with the request's answer.


def request_timeout_error(name: str) -> str:
    return _text(
        {
            "message": f"no request {name!r} before the timeout",
            "type": "RequestTimeout",
            "code": errors.REQUEST_TIMEOUT,
        }
    )


def wait_request(step: StepRow, timeout: float | None, now: float) -> list[Op]:
    """A new wait for a request, with a durable timer for its timeout (kept on the step,
    so a retried run waits again as long)."""
    return _open_wait(step, timeout, now, "request_timeout")


def take_request(step: StepRow, request_id: int, data: str | None, now: float) -> list[Op]:
    """The wait succeeds with the request (its id and data), which is taken by it in one
    conditional write: a request its sender withdrew first refuses the whole batch."""
    output = f'{{"id":{int(request_id)},"data":{data if data is not None else "null"}}}'
    step.status, step.output, step.updated_at = "succeeded", output, now
    ops: list[Op] = [_put(step), TakeRequest(request_id, step.key, request.TAKEN, request.SENT)]
    if step.wake_at is not None:
        ops.append(ClearTimer(step.key))
    return ops


def refuse_sent_request(request_id: int, refusal: str) -> list[Op]:
    """A request whose data does not fit the wait's schema is refused, never taken (no
    write if its sender withdrew it first)."""
    return [AnswerRequest(request_id, request.REFUSED, request.SENT, refusal=refusal)]


def time_out_request(step: StepRow, name: str, now: float) -> list[Op] | None:
    """The writes of a wait for a request whose timeout passed, or None while it has not."""
    return _time_out(step, request_timeout_error(name), now)


def answer_request(
    step: StepRow, request_id: int, reply: str | None, refusal: str | None, now: float
) -> list[Op]:
    """The answer step of a taken request: it succeeds with the reply (or with the
    refusal's reason), and the request is answered in the same write."""
    if refusal is None:
        step.output = reply
        answer = AnswerRequest(request_id, request.REPLIED, request.TAKEN, reply=reply)
    else:
        record: dict[str, Any] = serde.loads(refusal) or {}
        reason = record.get("message")
        step.output = serde.dumps({"refused": reason})
        answer = AnswerRequest(request_id, request.REFUSED, request.TAKEN, refusal=refusal)
    step.status, step.updated_at = "succeeded", now
    return [_put(step), answer]


def record_value(step: StepRow, value: Any, now: float) -> list[Op]:
    """A value recorded once (``wf.now()``, ``wf.uuid()``) and replayed ever after."""
    step.status, step.output, step.updated_at = "succeeded", serde.dumps(value), now
    return [_put(step)]


def mark_patch(step: StepRow, now: float) -> list[Op]:
    """``wf.patched`` on ground the run's history has not passed: recorded once, so
    every replay takes the patched path again."""
    step.status, step.updated_at = "succeeded", now
    return [_put(step)]


def publish_value(step: StepRow, key: str, value: str | None, now: float) -> list[Op]:
    """``wf.set_value``: recorded as a step on first reach (so a replay publishes
    nothing again, and never puts an older value back), and published with it."""
    step.status, step.output, step.updated_at = "succeeded", value, now
    return [_put(step), SetValue(key, value)]


def record_tags(step: StepRow, tags: str, now: float) -> list[Op]:
    """``wf.set_tags``: recorded as a step on first reach (so a replay merges nothing
    again, and never puts an older value of a key back), with the tags merged into the
    run's in the same commit."""
    step.status, step.updated_at = "succeeded", now
    return [_put(step), SetTags(tags)]


def write_stream(step: StepRow, stream: str, value: str | None, now: float) -> list[Op]:
    """``wf.stream(name).write``: recorded as a step on first reach (so a replay writes
    nothing again), and appended to the stream with it."""
    step.status, step.output, step.updated_at = "succeeded", value, now
    return [_put(step), AppendStream(stream, value)]


def send_event(step: StepRow, run_id: str, name: str, payload: str | None, now: float) -> list[Op]:
    """``wf.send_event``: the step succeeds with the event stored for ``run_id``, both in
    one commit, so a crash leaves both or neither. The event's de-duplication key is the
    step's invocation id, in plait's own space of keys (no sender may give one there): a
    commit applied twice (its answer lost) still sends once."""
    step.status, step.output, step.updated_at = "succeeded", None, now
    dedup = f"{ids.SEND_DEDUP_PREFIX}{step.invocation_id}"
    return [_put(step), SendEvent(run_id, name, payload, dedup)]


def refuse_send(step: StepRow, message: str, now: float) -> list[Op]:
    """``wf.send_event`` to a run that does not exist, has ended, or that this run may not
    send to: the step fails at once (no attempt would change that), with ``message``."""
    step.status, step.updated_at = "failed", now
    step.failures += 1
    step.error = _text(
        {
            "message": message,
            "type": "EventNotSent",
            "code": errors.EVENT_NOT_SENT,
            "retryable": False,
        }
    )
    return [_put(step)]


# -- for_each nodes -----------------------------------------------------------------------
#
# A graph's ``for_each`` node instance has no attempt of its own: it runs its items, one
# ``item`` step each, and its status follows theirs.


def item_key(node_key: str, index: int) -> str:
    """The step key of item ``index`` of the ``for_each`` node instance ``node_key``."""
    return f"{node_key}[{index}]"


def start_items(step: StepRow, now: float) -> list[Op]:
    """A ``for_each`` node instance starts its items: it runs until they end."""
    if step.status != "pending":
        return []
    step.status, step.updated_at = "running", now
    return [_put(step)]


def refuse_item(step: StepRow, node_id: str, index: int, exc: Exception, now: float) -> list[Op]:
    """The node fails when an item's input breaks the engine's limits: that item
    cannot start, and every later attempt would build the same input. The node's own
    input (the items) is stored, so its ``on_error`` handlers run as for an item that
    failed."""
    error = _text(
        {
            "message": f"item {index} of node {node_id!r} cannot start: {exc}",
            "type": type(exc).__name__,
            "code": getattr(exc, "code", None),
            "item": index,
            "step": item_key(step.key, index),
        }
    )
    return _fail_node(step, error, now)


def end_items(
    step: StepRow, node_id: str, items: list[StepRow], count: int, sequential: bool, now: float
) -> list[Op] | None:
    """The writes that end a ``for_each`` node instance from its ``count`` items (the
    ``items`` recorded so far, in order), or None while it waits for them. It fails once
    an item failed (in parallel mode only after the other items ended, so none is left
    running) and succeeds once every item succeeded: its output is the list of the
    items' outputs."""
    failed = next((i for i, s in enumerate(items) if s.status == "failed"), None)
    busy = any(s.status in STEP_IN_FLIGHT for s in items)
    if failed is not None and (sequential or not busy):
        cause: dict[str, Any] = serde.loads(items[failed].error) or {}
        error = _text(
            {
                "message": f"item {failed} of node {node_id!r} failed: "
                f"{cause.get('message', 'unknown error')}",
                "type": "ForEachItemFailed",
                "code": cause.get("code"),
                "item": failed,
                "step": item_key(step.key, failed),
            }
        )
        return _fail_node(step, error, now)
    if len(items) == count and all(s.status == "succeeded" for s in items):
        step.status = "succeeded"
        step.error = None
        # the outputs are stored JSON already: join them instead of re-encoding
        step.output = "[" + ",".join(s.output or "null" for s in items) + "]"
        step.updated_at = now
        return [_put(step)]
    return None


def _fail_node(step: StepRow, error: str, now: float) -> list[Op]:
    step.status = "failed"
    step.failures += 1
    step.error = error
    step.updated_at = now
    return [_put(step)]


# -- approval gates -----------------------------------------------------------------------
#
# A gate's one attempt stays open (the step ``pending``) until a decision or its deadline
# closes it; the deadline is the step's ``wake_at`` and a durable timer. Every close is
# guarded: it is written only if the gate is still open in the database, so a decision
# and an expiry racing each other end with exactly one of them.


def open_gate(step: StepRow, worker: str | None, expires_at: float | None, now: float) -> list[Op]:
    """A gate reached for the first time: its attempt opens, its deadline is a timer."""
    step.attempts, step.wake_at, step.updated_at = 1, expires_at, now
    ops: list[Op] = [StartAttempt(step, 1, OPEN_ATTEMPT, worker)]
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


def cancel_wait(step: StepRow, now: float) -> list[Op]:
    """A wait the workflow cancelled (a sleep, an event wait, a gate) ends failed
    ``cancelled`` and its timer goes. A gate's attempt closes with it, only while the
    gate is still open: a decision committed first wins (the pass is then replayed)."""
    step.status, step.error, step.updated_at = "failed", cancelled_error(), now
    if step.kind != "approval":
        return [_put(step), ClearTimer(step.key)]
    return [
        GuardStep(step.key, "pending"),
        FinishAttempt(step, step.attempts, "failed", error=step.error),
        ClearTimer(step.key),
    ]


def reopen_gate(step: StepRow, worker: str | None, now: float) -> list[Op]:
    """A decision accepted on arrival failed the workflow's own schema when the run read
    it: the gate opens again (a new attempt), with its deadline if that is still ahead."""
    step.attempts += 1
    step.status, step.output, step.updated_at = "pending", None, now
    ops: list[Op] = [StartAttempt(step, step.attempts, OPEN_ATTEMPT, worker)]
    if step.wake_at is not None and step.wake_at > now:
        ops.append(SetTimer(step.key, "approval", step.wake_at))
    return ops


def _put(step: StepRow) -> Op:
    return PutStep(step)
