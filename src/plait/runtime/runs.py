"""The run state machine: every way a run's status can change, written once.

::

    from                          to                     written by
    (a new run)                   queued | running       initial_status
    running, when a pass ends it  completed              completed
                                  failed                 failed, failed_record,
                                                         failed_control, raised
                                  cancelled              cancelled, raised
                                  suspended              suspended
                                  (or it stays running)  pass_status
    queued | running | suspended  cancelled              cancel (a user's), replaced
                                                         (a fork made with replace)
    queued                        running                ADMITTED (the worker's admission)
    suspended                     running                resume
    failed                        running | queued       retry (queued: a run of a queue)

A run ``queued`` waits for admission by its queue or for its start time; the worker's
admission moves it to ``ADMITTED``. Each function here returns the record or the ops a
transition writes and never touches a database, so the rules can be read (and tested)
here alone; the stores receive them as data and only move rows. What a transition does
to the run's steps is the step state machine's (``runtime.steps``): an end takes the
live child runs with it (``end_ops``), a cancel cuts short the steps in flight
(``steps.CANCEL_CUT``), a resume releases suspends and a retry reopens failed steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Literal, cast

from plait import errors, serde
from plait.errors import Cancel, StepError
from plait.runtime import steps
from plait.runtime.control_flow import PauseSignal, SuspendSignal, Unwind
from plait.statuses import TERMINAL, RunStatusName
from plait.store.ops import CancelChildren, CancelCut, EndRun, Op, StepEnd
from plait.store.rows import PassSnapshot, RunRow, StepRow

#: the ends that take the run's live child runs with them (a cancel does so itself)
TAKES_CHILDREN: frozenset[str] = frozenset({"completed", "failed"})


# -- start --------------------------------------------------------------------------------


def initial_status(waits_for_admission: bool) -> RunStatusName:
    """A new run's status: ``queued`` while it waits for admission by its queue (or
    for its start time), else ``running`` at once."""
    return "queued" if waits_for_admission else "running"


#: a queued run's status once its queue admits it (the worker's admission)
ADMITTED: RunStatusName = "running"


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


def cancelled(message: str) -> EndRun:
    """The workflow cancelled its own run (it raised ``plait.Cancel``): its live child
    runs end with it, and its steps still in flight are cut short (``steps.CANCEL_CUT``)."""
    error = control_error(message, errors.WORKFLOW_CANCELLED)
    return EndRun("cancelled", error=error, cut=steps.CANCEL_CUT)


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
    also says how its parent's waiting step ends; a run that fails or completes while a
    child run it started is still live takes that child with it (``children_left``)."""
    if end.status in TERMINAL and run.parent_run_id and end.parent is None:
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


def cancel(reason: str | None) -> RunCancel:
    """A user cancels the run (``Engine.cancel``), with ``reason`` as its message."""
    error = steps.run_cancelled_error(reason)
    return RunCancel(error, steps.child_step_end(None, "cancelled", None, error))


#: the statuses a user's cancel ends a run from
CANCELLABLE: frozenset[RunStatusName] = frozenset({"queued", "running", "suspended"})


def replaced(fork_id: str) -> EndRun:
    """A fork made with ``replace`` ends its live source as a user's cancel does, with a
    reason naming the fork, in the transaction that makes the fork."""
    cut = cancel(f"replaced by fork {fork_id}")
    return EndRun(cut.status, None, cut.error, cut.parent, cut.cut)


# -- a run that goes on again -------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Reopen:
    """A run that goes on again: from ``from_status`` to the status ``status`` gives the
    run as read, with the writes ``ops`` makes of it (steps released or reopened, timers
    and jobs given back). Written only if nothing woke the run since it was read."""

    action: Literal["resume", "retry"]
    from_status: RunStatusName
    ops: Callable[[PassSnapshot, float], list[Op]]

    def status(self, run: RunRow) -> RunStatusName:
        """``running``; a retried run of a queue is ``queued``: it gave its slot back
        when it failed, and waits for admission again."""
        return initial_status(self.action == "retry" and run.queue is not None)


def resume(reason: str | None = None) -> Reopen:
    """A suspended run continues: every open suspend is released, or with ``reason``
    only those of that reason (``steps.resume_ops``)."""

    def ops(snapshot: PassSnapshot, now: float) -> list[Op]:
        return steps.resume_ops(snapshot.steps.values(), now, reason)

    return Reopen("resume", "suspended", ops)


def retry() -> Reopen:
    """A failed run goes on from its failed steps (``steps.retry_ops``: those the
    workflow did not go on from start over; timers and jobs come back)."""

    def ops(snapshot: PassSnapshot, now: float) -> list[Op]:
        recorded = snapshot.steps.values()
        return steps.retry_ops(recorded, now, snapshot.run.error, after_cap=steps.MAX_AFTER)

    return Reopen("retry", "failed", ops)


def _text(record: dict[str, Any]) -> str:
    """A record as stored: ``serde.dumps`` is None only for None, never for a dict."""
    return cast(str, serde.dumps(record))
