"""The writes of a pass: small operation values that ``Store.commit`` turns into one
transaction, grouped in a ``Batch`` fenced by the run lease.

Ops are frozen values. The ones that carry a step row carry a copy taken when the op was
made, so what an op writes is fixed at that moment. Their ``__init__`` fills the
instance dict directly: a frozen dataclass's generated one costs twice as much, and a
step makes two of these ops.
"""

from __future__ import annotations

import dataclasses

from plait.errors import RunEndedElsewhereError
from plait.statuses import (
    AttemptStatusName,
    RequestStatusName,
    RunStatusName,
    StepStatusName,
)
from plait.store.rows import NewRun, StepRow


@dataclasses.dataclass(frozen=True, init=False)
class PutStep:
    """Insert the step, or update every mutable column of an existing one."""

    step: StepRow

    def __init__(self, step: StepRow) -> None:
        self.__dict__["step"] = step.copy()


@dataclasses.dataclass(frozen=True, init=False)
class StartAttempt:
    """Record attempt ``attempt`` of a step as begun, its status ``status`` (an open
    attempt's, as the step state machine names it), step row included."""

    step: StepRow
    attempt: int
    status: AttemptStatusName
    worker: str | None = None

    def __init__(
        self, step: StepRow, attempt: int, status: AttemptStatusName, worker: str | None = None
    ) -> None:
        self.__dict__.update(step=step.copy(), attempt=attempt, status=status, worker=worker)


@dataclasses.dataclass(frozen=True, init=False)
class FinishAttempt:
    """Close an attempt and write the step's new state in the same transaction."""

    step: StepRow
    attempt: int
    status: AttemptStatusName  # succeeded | failed | interrupted | cancelled
    output: str | None = None
    error: str | None = None

    def __init__(
        self,
        step: StepRow,
        attempt: int,
        status: AttemptStatusName,
        output: str | None = None,
        error: str | None = None,
    ) -> None:
        self.__dict__.update(
            step=step.copy(), attempt=attempt, status=status, output=output, error=error
        )


@dataclasses.dataclass(frozen=True, slots=True)
class SetTimer:
    key: str
    purpose: str
    wake_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class ClearTimer:
    key: str


@dataclasses.dataclass(frozen=True, slots=True)
class EnqueueJob:
    key: str
    function: str
    available_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeEvent:
    event_id: int
    key: str


@dataclasses.dataclass(frozen=True, slots=True)
class SendEvent:
    """Store event ``name`` for run ``run_id`` (another run, or this one) and wake it, as
    ``engine.send_event`` does, unless that run already took an event of key ``dedup``
    (then nothing is written: a batch applied twice sends once). A run that does not
    exist or has ended (since the pass read it live) takes nothing, and the whole batch
    is refused (``EventNotStoredError``): the pass fails the send instead."""

    run_id: str
    name: str
    payload: str | None
    dedup: str


@dataclasses.dataclass(frozen=True, slots=True)
class CreateChildRun:
    run: NewRun


@dataclasses.dataclass(frozen=True, slots=True)
class SetState:
    name: str
    value: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class SetValue:
    """Publish a value of the run (``wf.set_value``): the last write of a key wins."""

    key: str
    value: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class SetTags:
    """Merge ``tags`` (a JSON object of str to str, ``plait.tags``) into the run's tags
    (``wf.set_tags``): a key given again takes the new value."""

    tags: str


@dataclasses.dataclass(frozen=True, slots=True)
class AppendStream:
    """Append ``value`` (JSON) to the run's stream ``stream``: a write of the workflow
    itself (``wf.stream``), recorded once by its step, in the same transaction. A batch
    committed after its run ended elsewhere leaves it out (the stream has ended)."""

    stream: str
    value: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class GuardStep:
    """Refuse the whole batch (``GateClosedError``) unless the step's stored status is
    still ``status``: a pass closing an approval gate must not overwrite a decision that
    committed since its snapshot was read."""

    key: str
    status: str


@dataclasses.dataclass(frozen=True, slots=True)
class TakeDecision:
    """Record what became of a decision on approval gate ``key``. With ``event_id`` a
    held decision is taken (``GateClosedError`` if another pass took it first); without,
    the gate's accepted decision is changed (its data failed the workflow's schema)."""

    key: str
    outcome: str  # accepted | refused
    reason: str | None = None
    event_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TakeRequest:
    """Request ``request_id`` is taken by the wait ``key``: it moves from
    ``from_status`` to ``status`` in one conditional write, or the whole batch is
    refused (``GateClosedError``) when it is no longer ``from_status`` (its sender
    withdrew it first), and the run is replayed from what is stored."""

    request_id: int
    key: str
    status: RequestStatusName
    from_status: RequestStatusName


@dataclasses.dataclass(frozen=True, slots=True)
class AnswerRequest:
    """Record the answer of request ``request_id``: its ``reply`` (JSON) or its
    ``refusal`` (a JSON record), moving it from ``from_status`` to ``status``. Nothing
    is written when it is no longer ``from_status`` (answered, or withdrawn)."""

    request_id: int
    status: RequestStatusName
    from_status: RequestStatusName
    reply: str | None = None
    refusal: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class StepEnd:
    """How the parent's step of a child run ends when the child ends (decided by
    ``runtime.steps.child_step_end``): ``status`` is ``succeeded`` or ``failed``, and
    ``failures`` the failures it adds to the step's count."""

    status: StepStatusName
    output: str | None = None
    error: str | None = None
    failures: int = dataclasses.field(kw_only=True)


@dataclasses.dataclass(frozen=True, slots=True)
class CancelCut:
    """How a cancel ends the steps of its runs that it cuts short (those in flight, or
    with an attempt still open): the step's status, its open attempt's, and the status
    an open attempt has (``open_attempt``), by which the store finds them."""

    step: StepStatusName
    attempt: AttemptStatusName
    open_attempt: AttemptStatusName


@dataclasses.dataclass(frozen=True, init=False)
class CancelJob:
    """The workflow cancelled a job step: its job goes (a step worker that holds it
    learns so at its next lease renewal, and its end is refused), and the step, if it
    is still in flight in the store, ends as ``cut`` says with the error of ``step``
    (an open attempt is closed). A step that ended before this commit keeps its end.
    Either way the step takes ``step``'s ``delivered``: the workflow reached it here."""

    step: StepRow
    cut: CancelCut

    def __init__(self, step: StepRow, cut: CancelCut) -> None:
        self.__dict__.update(step=step.copy(), cut=cut)


@dataclasses.dataclass(frozen=True, slots=True)
class EndRun:
    """Move the run to ``status``; only from ``running`` (the terminal guard). A terminal
    end of a child run also ends the parent's waiting step as ``parent`` says (only if
    that step still waits for this child) and wakes the parent. With ``cut`` the end is
    a cancel: the run's live child runs end as it does (``CancelChildren``), and its
    steps still in flight as ``cut`` says. With ``successor`` the run continues as new:
    if the end moves the run, that run is created in the same transaction, linked both
    ways (``continued_from`` / ``continued_to``), and takes over the parent's waiting
    step (the step then waits for it)."""

    status: RunStatusName
    output: str | None = None
    error: str | None = None
    parent: StepEnd | None = None
    cut: CancelCut | None = None
    successor: NewRun | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CancelChildren:
    """End the run's live child runs (queued, running or suspended), and theirs, each
    ``status`` with ``error``, their steps in flight cut short as ``cut`` says; the run's
    steps that wait for them end as ``parent`` says. A run that fails or completes
    writes it after its ``EndRun``, so nothing it started goes on without it, as nothing
    goes on after a cancel. With ``step_key`` only the child run of that step of the run
    ends: the workflow cancelled the task awaiting it, and its siblings go on."""

    status: RunStatusName
    error: str | None
    parent: StepEnd | None
    cut: CancelCut
    step_key: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RecordVersion:
    """Record the version of the code the run replays on, if it has none yet: a fork
    made by a process that lacks the workflow's code leaves it to its first pass."""

    version: str


Op = (
    PutStep
    | StartAttempt
    | FinishAttempt
    | SetTimer
    | ClearTimer
    | EnqueueJob
    | ConsumeEvent
    | CreateChildRun
    | SetState
    | EndRun
    | CancelChildren
    | SetValue
    | SetTags
    | AppendStream
    | GuardStep
    | TakeDecision
    | TakeRequest
    | AnswerRequest
    | SendEvent
    | RecordVersion
    | CancelJob
)


@dataclasses.dataclass
class Batch:
    run_id: str
    ops: list[Op]
    #: the lease owner that must still hold the run, or None for unfenced writes
    fence: str | None = None
    #: set on the last batch of a pass: the run's lease is released in the same
    #: transaction, and the value is the run's wake-up count the pass saw (as
    #: ``Store.release_run``'s ``wakeups_seen``: woken since, the run is due again at once;
    #: -1: due again at once whatever happened). None: the pass keeps holding the run
    release_wakeups_seen: int | None = None


def ended_elsewhere(run_id: str, ops: list[Op]) -> RunEndedElsewhereError | None:
    """What a fenced batch committed in a run that ended meanwhile raises: an error
    naming the attempts the store left out, or None when it held no start (then all of
    it was written that had to be)."""
    keys = ", ".join(repr(op.step.key) for op in ops if isinstance(op, StartAttempt))
    if not keys:
        return None
    return RunEndedElsewhereError(
        f"run {run_id} ended while this process held it; not started: {keys}"
    )
