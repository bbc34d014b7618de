"""The run state machine: every way a run's status can change, written once.

::

    from                          to                     written by
    (a new run)                   queued | running       initial_status
    (a start a brake holds)       queued                 BRAKED_START
    running, when a pass ends it  completed              completed
                                  failed                 failed, failed_record,
                                                         failed_control, raised
                                  cancelled              cancelled, raised
                                  continued              continued (and a new run:
                                                         queued | running)
                                  suspended              suspended
                                  needs_attention        needs_attention (a step that
                                                         parks failed its last attempt)
                                  (or it stays running)  pass_status
    queued | running | suspended  cancelled              cancel (a user's), replaced
                                                         (a fork made with replace)
    any live status               failed                 timed_out (its deadline passed)
    queued                        running                ADMITTED (the worker's admission)
    suspended                     running                resume
    running (no pass holds it)    paused                 PAUSED (its workflow's or
                                                         queue's brake)
    paused                        running                RELEASED (no brake holds it)
    failed | needs_attention      running | queued       retry (queued: a run of a queue)
    needs_attention               cancelled              cancel

A run ``queued`` waits for admission by its queue or for its start time; the worker's
admission moves it to ``ADMITTED``. A brake (``Engine.pause_workflow``, ``pause_queue``)
stops a running run between two steps: the pass that holds it starts no new attempt
(``braked``) and gives it back, and it becomes ``PAUSED`` with no pass holding it; a
new run of a paused workflow starts ``queued`` (``initial_status``) and waits there.
Each function here returns the record or the ops a transition writes and never touches
a database, so the rules can be read (and tested) here alone; the stores receive them
as data and only move rows. What a transition does to the run's steps is the step
state machine's (``runtime.steps``): an end takes the live child runs with it
(``end_ops``), a cancel cuts short the steps in flight (``steps.CANCEL_CUT``), a resume
releases suspends and a retry reopens failed steps.

A run ``needs_attention`` is not ended: a parent waiting on it keeps waiting, its
de-duplication key stays taken, and its live child runs go on. No pass holds it and it
gives its queue slot back (a retried one waits for admission again, as a retried failed
run does); its timers and jobs go as a failed run's do, and a retry gives them back.

A run that continues as new (``wf.continue_as_new``) ends ``continued`` and starts its
successor in the same commit (``continued``): one chain never has two live runs, nor
none, whatever crashes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Literal, cast

from plait import errors, serde
from plait import tags as tag_rules
from plait.app import WorkflowDef
from plait.errors import Cancel, StepError
from plait.runtime import steps
from plait.runtime.control_flow import ParkSignal, PauseSignal, SuspendSignal, Unwind
from plait.statuses import TERMINAL, RunStatusName
from plait.store.ops import CancelChildren, CancelCut, EndRun, Op, StepEnd
from plait.store.rows import NewRun, PassSnapshot, RunRow, StepRow

#: the ends that take the run's live child runs with them (a cancel does so itself)
TAKES_CHILDREN: frozenset[str] = frozenset({"completed", "failed", "continued"})
#: the end of a run whose successor goes on in its place: a parent's step that waits for
#: the run waits for the successor, and is not settled
CONTINUED: RunStatusName = "continued"


# -- start --------------------------------------------------------------------------------


def initial_status(waits_for_admission: bool) -> RunStatusName:
    """A new run's status: ``queued`` while it waits for admission by its queue (or
    for its start time), else ``running`` at once."""
    return "queued" if waits_for_admission else "running"


#: a queued run's status once its queue admits it (the worker's admission)
ADMITTED: RunStatusName = "running"


def inherited_tags(parent: str | None, wdef: WorkflowDef | None) -> str | None:
    """A child run's tags (stored JSON): its workflow's own (``@app.workflow(tags=)``)
    with its parent's ``parent`` merged over them; the parent's alone if the two make
    more than ``plait.tags.MAX_TAGS``."""
    own = {} if wdef is None else dict(wdef.tags)
    merged = tag_rules.merge(own, tag_rules.loads(parent))
    if len(merged) > tag_rules.MAX_TAGS:
        return parent
    return tag_rules.dumps(merged)


# -- brakes -------------------------------------------------------------------------------

#: the status a brake stops a run from (no pass holds it) ...
BRAKED_FROM: RunStatusName = "running"
#: ... the status it waits in: not ended, and no worker claims it ...
PAUSED: RunStatusName = "paused"
#: ... the status a start that would run at once waits in while a brake holds its
#: workflow or queue (the store reads the brakes in the start's own transaction) ...
BRAKED_START: RunStatusName = "queued"
#: ... and the status it goes on in once no brake holds it (due at once: its next pass
#: replays what it did and starts the step it stopped before)
RELEASED: RunStatusName = "running"


# -- the end of a pass --------------------------------------------------------------------


def control_error(message: str, code: str) -> str:
    """The stored error of a run that plait stopped on purpose (suspend, cancel, a
    version conflict), typed after its code."""
    return _text({"message": message, "type": code.title().replace("_", ""), "code": code})


def completed(output: str | None) -> EndRun:
    """The workflow returned ``output`` (stored JSON)."""
    return EndRun("completed", output=output)


def failed(error: str | None) -> EndRun:
    """The run failed with ``error``, a stored error record."""
    return EndRun("failed", error=error)


def failed_record(record: dict[str, Any]) -> EndRun:
    """The run failed with the error ``record``."""
    return EndRun("failed", error=serde.dumps(record))


def failed_control(message: str, code: str) -> EndRun:
    """plait failed the run on purpose (a version conflict, a workflow blocked on
    something that is not a step)."""
    return EndRun("failed", error=control_error(message, code))


def suspended(message: str, code: str) -> EndRun:
    """The run waits for a resume (``wf.suspend``, a missing function or workflow, a
    version conflict the pass met)."""
    return EndRun("suspended", error=control_error(message, code))


#: the status of a run whose parked step waits for a retry or a cancel
NEEDS_ATTENTION: RunStatusName = "needs_attention"


def needs_attention(key: str, error: str | None) -> EndRun:
    """Step ``key``, which parks on exhausted retries, failed its last attempt with
    ``error``: the run waits ``needs_attention`` with the step's error, naming the step
    (so a retry reopens it, ``steps.reopened``)."""
    record: dict[str, Any] = serde.loads(error) or {}
    return EndRun(NEEDS_ATTENTION, error=_text({**record, "step": key}))


def waits(sig: SuspendSignal) -> EndRun:
    """How a pass that ``sig`` stopped ends the run: ``needs_attention`` for a parked
    step (``ParkSignal``), ``suspended`` for any other suspend."""
    if isinstance(sig, ParkSignal):
        return needs_attention(sig.key, sig.error)
    return suspended(sig.message, sig.code)


def cancelled(message: str) -> EndRun:
    """The workflow cancelled its own run (it raised ``plait.Cancel``): its live child
    runs end with it, and its steps still in flight are cut short (``steps.CANCEL_CUT``)."""
    error = control_error(message, errors.WORKFLOW_CANCELLED)
    return EndRun("cancelled", error=error, cut=steps.CANCEL_CUT)


def continued(run: RunRow, new_id: str, input: str | None, version: str | None) -> EndRun:
    """The workflow continued as new with ``input`` (stored JSON): the run ends
    ``continued`` and run ``new_id`` of the same workflow starts on ``version`` (the code
    deployed now) in the same commit. The new run keeps what the old one was started
    with: owner, queue, queue key, priority, de-duplication key (one live run per key
    holds across the chain), trace, timeout and its parent's link (the parent's step
    waits for the new run). A run its queue admitted waits for admission again, as a
    start does (it gave its slot back as it ended); a child that runs beside a parent of
    its queue without admission (``drive.Driver.child``) goes on at once, as it started.
    It carries the run's tags. Its deadline here is the ended run's; the pass gives it
    its own before it commits (``continued_deadline``)."""
    successor = NewRun(
        id=new_id,
        workflow=run.workflow,
        kind=run.kind,
        version=version,
        input=input,
        owner=run.owner,
        parent_run_id=run.parent_run_id,
        parent_step_key=run.parent_step_key,
        status=initial_status(run.queue is not None and run.admitted_at is not None),
        queue=run.queue,
        queue_key=run.queue_key,
        priority=run.priority,
        dedup=run.dedup,
        trace=run.trace,
        deadline_at=run.deadline_at,
        timeout=run.timeout,
        tags=run.tags,
    )
    return EndRun(CONTINUED, successor=successor)


def continued_deadline(run: RunRow, now: float, parent: float | None = None) -> float | None:
    """The deadline of the run that continues ``run`` as new at ``now``. A deadline bounds
    one run, not the chain: a loop that continues as new every N turns must run for ever,
    so a run with a timeout gives its successor that timeout again from now, as a retry
    does, never later than ``parent``, the deadline of the live parent of a child run. A
    run with no timeout of its own passes on what it has (none, or its parent's)."""
    if run.timeout is None:
        return run.deadline_at
    return deadline(now, run.timeout, parent)


def raised(exc: BaseException) -> EndRun:
    """How the run ends when its workflow raised ``exc``: cancelled for ``Cancel``,
    failed naming the step for a step's failure, failed with the error otherwise. One
    of plait's own pass signals that escaped the workflow's code is a failure too."""
    if isinstance(exc, Cancel):
        return cancelled(exc.reason)
    if isinstance(exc, StepError):
        return failed(serde.dumps({**exc.error, "step": exc.step_key}))
    if isinstance(exc, SuspendSignal | PauseSignal | Unwind):
        exc = RuntimeError(f"workflow code raised plait's internal {exc!r}")
    return failed_record(serde.error_record(exc))


def pass_status(end: EndRun | None) -> RunStatusName:
    """The run's status after a pass: its end's, or ``running`` when it waits."""
    return end.status if end is not None else "running"


def end_ops(run: RunRow, end: EndRun, recorded: Iterable[StepRow]) -> tuple[list[Op], list[str]]:
    """The writes of a pass's end, and the live child runs it ends. A child run's end
    also says how its parent's waiting step ends (but a continued one's: its successor
    is waited for); a run that fails, completes or continues while a child run it
    started is still live takes that child with it (``children_left``)."""
    settles_parent = end.status in TERMINAL and end.status != CONTINUED
    if settles_parent and run.parent_run_id and end.parent is None:
        parent = steps.child_step_end(run.id, end.status, end.output, end.error)
        end = dataclasses.replace(end, parent=parent)
    ops: list[Op] = [end]
    ended: list[str] = []
    if end.status in TAKES_CHILDREN:
        ended = [
            s.child_run_id for s in recorded if s.status == "running" and s.child_run_id is not None
        ]
        if ended:
            ops.append(children_left(run.id, end.status))
    return ops, ended


def children_left(run_id: str, status: str) -> CancelChildren:
    """How the live child runs of a run that ends ``status`` (failed or completed) end:
    cancelled, since nothing waits for their outcome any more, and each would go on
    doing work no one collects (a queued one would still take its queue's slot). The
    run's step for each fails with the cancel's code, so a retry of the run starts the
    child anew."""
    message = f"parent run {run_id} {status}"
    error = _text({"message": message, "type": "Cancel", "code": errors.WORKFLOW_CANCELLED})
    parent = steps.child_step_end(None, "cancelled", None, error)
    return CancelChildren("cancelled", error, parent, steps.CANCEL_CUT)


# -- a user's cancel ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RunCancel:
    """What a user's cancel writes. The run and its live child runs (queued, running or
    suspended, and theirs) end ``cancelled`` with ``error``; the parent's step of each
    ends as ``parent`` says; the steps each cut short and their open attempts end as
    ``cut`` says (``steps.CANCEL_CUT``, as ``steps.interrupt`` ends one a pass sees)."""

    error: str
    parent: StepEnd
    cut: CancelCut = steps.CANCEL_CUT
    status: RunStatusName = "cancelled"


def check_reason(reason: object) -> str | None:
    """A cancel's ``reason`` as its run's error message: text or None, else ``TypeError``
    naming it (a number or a dict stored as a message would reach every reader that
    takes messages for text)."""
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"reason must be a string or None, got {type(reason).__name__} {reason!r}")
    return reason


def cancel(reason: str | None) -> RunCancel:
    """A user cancels the run (``Engine.cancel``), with ``reason`` as its message."""
    error = steps.run_cancelled_error(check_reason(reason))
    return RunCancel(error, steps.child_step_end(None, "cancelled", None, error))


#: the statuses a user's cancel ends a run from
CANCELLABLE: frozenset[RunStatusName] = frozenset(
    {"queued", "running", "suspended", "paused", "needs_attention"}
)
#: the statuses a retry goes on from
RETRYABLE: frozenset[RunStatusName] = frozenset({"failed", "needs_attention"})


def replaced(fork_id: str) -> EndRun:
    """A fork made with ``replace`` ends its live source as a user's cancel does, with a
    reason naming the fork, in the transaction that makes the fork."""
    cut = cancel(f"replaced by fork {fork_id}")
    return EndRun(cut.status, None, cut.error, cut.parent, cut.cut)


def replaced_by_start(run_id: str, dedup: str) -> EndRun:
    """A start with ``dedup_policy="replace"`` ends the live run holding its dedup key as
    a user's cancel does, with a reason naming the run that replaces it, in the
    transaction that creates that run."""
    cut = cancel(f"replaced by run {run_id} (a start with dedup key {dedup!r})")
    return EndRun(cut.status, None, cut.error, cut.parent, cut.cut)


# -- a deadline ---------------------------------------------------------------------------


def deadline(now: float, timeout: float | None, parent: float | None = None) -> float | None:
    """When a run started at ``now`` with ``timeout`` seconds (None: none of its own) must
    have ended: never later than its parent's deadline ``parent``, which a child with a
    later deadline, or none, takes instead."""
    own = None if timeout is None else now + timeout
    if parent is None:
        return own
    return parent if own is None else min(own, parent)


def timeout_of(now: float, timeout: float | None, parent: float | None = None) -> float | None:
    """The seconds from ``now`` to the deadline ``deadline`` gives a run started then
    (None: none), stored beside it so that a retry can count them again: ``timeout``
    itself, or, for a child whose parent's deadline comes first, the time left to that
    (the child's effective timeout, never below zero)."""
    if parent is None or (timeout is not None and now + timeout <= parent):
        return timeout
    return max(0.0, parent - now)


def deadline_error(deadline_at: float) -> str:
    """The error of a run whose deadline passed, naming the deadline."""
    when = datetime.fromtimestamp(deadline_at, UTC).isoformat()
    message = f"the run did not end before its deadline {when}"
    return _text({"message": message, "type": "RunTimeout", "code": errors.RUN_TIMEOUT})


@dataclasses.dataclass(frozen=True, slots=True)
class RunTimeout:
    """What a run's deadline writes, wherever the run is (queued, running, suspended,
    paused or parked ``needs_attention``): the run ends ``failed`` with ``error`` (code
    ``RUN_TIMEOUT``) as a cancel ends it, its steps in flight cut short (``cut``: a
    running attempt is cancelled) and its parent's step ending as ``parent`` says; its
    live child runs end ``cancelled`` as ``children`` says, as a user's cancel would end
    them."""

    error: str
    parent: StepEnd
    children: CancelChildren
    cut: CancelCut = steps.CANCEL_CUT
    status: RunStatusName = "failed"


def timed_out(run_id: str, deadline_at: float) -> RunTimeout:
    """Run ``run_id``'s deadline ``deadline_at`` passed before it ended."""
    error = deadline_error(deadline_at)
    message = f"parent run {run_id} did not end before its deadline"
    child_error = _text({"message": message, "type": "Cancel", "code": errors.WORKFLOW_CANCELLED})
    children = CancelChildren(
        "cancelled",
        child_error,
        steps.child_step_end(None, "cancelled", None, child_error),
        steps.CANCEL_CUT,
    )
    return RunTimeout(error, steps.child_step_end(run_id, "failed", None, error), children)


# -- a run that goes on again -------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Reopen:
    """A run that goes on again: from ``from_status`` (or another of ``from_statuses``)
    to the status ``status`` gives the run as read, with the writes ``ops`` makes of it
    (steps released or reopened, timers and jobs given back). Written only if nothing
    woke the run since it was read."""

    action: Literal["resume", "retry"]
    from_status: RunStatusName
    ops: Callable[[PassSnapshot, float], list[Op]]
    #: every status it goes on from (None: ``from_status`` alone)
    from_statuses: frozenset[RunStatusName] | None = None

    def goes_on_from(self, status: str) -> bool:
        """Whether a run ``status`` (as stored) goes on by this reopen."""
        return status in (self.from_statuses or {self.from_status})

    def status(self, run: RunRow) -> RunStatusName:
        """``running``; a retried run of a queue is ``queued``: it gave its slot back
        when it failed, and waits for admission again."""
        return initial_status(self.action == "retry" and run.queue is not None)

    def deadline(self, run: RunRow, now: float, parent: float | None = None) -> float | None:
        """The run's deadline once it goes on at ``now``. Its deadline was for the attempt
        that ended: a retry is a new attempt of the whole run, so a run with a timeout
        gets a fresh deadline, its timeout from now (else the deadline that failed it
        would fail it again at once). A resume is not a new attempt: the deadline stays,
        unless it has passed already (the run was resumed before the deadline loop ended
        it), which is counted again from now as a retry's. Never later than ``parent``,
        the deadline of the live parent of a child run."""
        if run.timeout is None:
            return run.deadline_at
        passed = run.deadline_at is not None and run.deadline_at <= now
        if self.action == "resume" and not passed:
            return run.deadline_at
        return deadline(now, run.timeout, parent)


def resume(reason: str | None = None) -> Reopen:
    """A suspended run continues: every open suspend is released, or with ``reason``
    only those of that reason (``steps.resume_ops``)."""

    def ops(snapshot: PassSnapshot, now: float) -> list[Op]:
        return steps.resume_ops(snapshot.steps.values(), now, reason)

    return Reopen("resume", "suspended", ops)


def retry() -> Reopen:
    """A failed run goes on from its failed steps (``steps.retry_ops``: those the
    workflow did not go on from start over; timers and jobs come back); so does a run
    ``needs_attention``, whose parked step gets a fresh retry budget."""

    def ops(snapshot: PassSnapshot, now: float) -> list[Op]:
        recorded = snapshot.steps.values()
        return steps.retry_ops(recorded, now, snapshot.run.error, after_cap=steps.MAX_AFTER)

    return Reopen("retry", "failed", ops, RETRYABLE)


def _text(record: dict[str, Any]) -> str:
    """A record as stored: ``serde.dumps`` is None only for None, never for a dict."""
    return cast(str, serde.dumps(record))
