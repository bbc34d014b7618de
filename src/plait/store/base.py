"""The store seam: what the engine asks of a database, in the engine's own words.

The engine never builds SQL. An orchestrator pass collects the writes it needs as small
operation objects and hands them to ``Store.commit`` as one batch; the store turns the batch
into one transaction (and may group several batches into one commit). Every batch from a
pass is fenced by the run lease, so a worker that lost its lease cannot write over the
worker that took the run over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

from plait.clock import Clock
from plait.errors import RunEndedElsewhereError
from plait.notify import Notifier
from plait.records import Run, RunSummary, Step, StepAttempt


@dataclasses.dataclass(frozen=True, slots=True)
class NewRun:
    id: str
    workflow: str
    kind: str
    version: str | None
    input: str | None
    owner: str | None = None
    parent_run_id: str | None = None
    parent_step_key: str | None = None
    start_node: str | None = None
    #: set for inline starts: the run is created already leased to this process
    lease_owner: str | None = None
    lease_seconds: float = 0.0
    #: ``queued`` for a run that waits for admission or for its start time
    status: str = "running"
    queue: str | None = None
    queue_key: str | None = None
    priority: int = 0
    #: a live run with this key is returned instead of creating another
    dedup: str | None = None
    #: the earliest start (unix seconds) of a queued run; None: now
    not_before: float | None = None
    #: the schedule tick this run was started for
    scheduled_at: float | None = None
    #: the starter's trace context (JSON), with tracing on (``plait.tracing``)
    trace: str | None = None


@dataclasses.dataclass
class RunRow:
    """A run as the orchestrator sees it (JSON columns still encoded)."""

    id: str
    workflow: str
    kind: str
    version: str | None
    status: str
    input: str | None
    output: str | None
    error: str | None
    parent_run_id: str | None
    parent_step_key: str | None
    owner: str | None
    start_node: str | None
    created_at: float
    updated_at: float
    wake_at: float | None
    wakeups: int
    lease_owner: str | None
    lease_until: float | None
    queue: str | None = None
    queue_key: str | None = None
    priority: int = 0
    dedup: str | None = None
    scheduled_at: float | None = None
    admitted_at: float | None = None
    #: the run this one was forked from (``Engine.fork``)
    forked_from: str | None = None
    #: the trace context the run was started in (JSON), or None when not traced
    trace: str | None = None


@dataclasses.dataclass
class StepRow:
    """A step as the runtime sees it (JSON columns still encoded). Mutable: the state
    machine (``runtime.steps``) changes it in place and records each change as ops."""

    run_id: str
    key: str
    seq: int
    name: str
    kind: str
    function: str | None
    status: str
    input: str | None
    output: str | None
    error: str | None
    attempts: int
    failures: int
    retries: int
    retry_delay: float | None
    timeout: float | None
    invocation_id: str
    child_run_id: str | None
    branch: str | None
    from_key: str | None
    queued: bool
    wake_at: float | None
    created_at: float
    updated_at: float
    #: when the workflow saw this step's outcome, counted per run; replay hands outcomes
    #: back in this order (``runtime.replay``)
    delivered: int | None = None
    #: failures spent before the run's last ``retry``: the retry budget counts the ones
    #: after it, the interruption count (attempts that neither failed nor succeeded) all
    retried_failures: int = 0
    #: the steps whose outcomes the calling task of the workflow had received when it
    #: reached this one (JSON list of keys): what it came after, for drawing the run.
    #: None: recorded before schema version 8 (SQLite) / 10 (PostgreSQL), or a graph step
    reached_after: str | None = None

    def copy(self) -> StepRow:
        """The row as it is now: an op keeps its own copy, so a later change to the step
        never alters what an earlier op writes."""
        new = object.__new__(StepRow)
        new.__dict__ = self.__dict__.copy()
        return new


@dataclasses.dataclass
class EventRow:
    id: int
    name: str
    payload: str | None


@dataclasses.dataclass
class PassSnapshot:
    """Everything one orchestrator pass reads, in one round trip."""

    run: RunRow
    steps: dict[str, StepRow]
    events: list[EventRow]
    state: dict[str, str | None]


# -- the writes of a pass ------------------------------------------------------------------
#
# Ops are frozen values. The ones that carry a step row carry a copy taken when the op was
# made, so what an op writes is fixed at that moment. Their ``__init__`` fills the
# instance dict directly: a frozen dataclass's generated one costs twice as much, and a
# step makes two of these ops.


@dataclasses.dataclass(frozen=True, init=False)
class PutStep:
    """Insert the step, or update every mutable column of an existing one."""

    step: StepRow

    def __init__(self, step: StepRow) -> None:
        self.__dict__["step"] = step.copy()


@dataclasses.dataclass(frozen=True, init=False)
class StartAttempt:
    """Record attempt ``attempt`` of a step as running (step row included)."""

    step: StepRow
    attempt: int
    worker: str | None = None

    def __init__(self, step: StepRow, attempt: int, worker: str | None = None) -> None:
        self.__dict__.update(step=step.copy(), attempt=attempt, worker=worker)


@dataclasses.dataclass(frozen=True, init=False)
class FinishAttempt:
    """Close an attempt and write the step's new state in the same transaction."""

    step: StepRow
    attempt: int
    status: str  # succeeded | failed | interrupted | cancelled
    output: str | None = None
    error: str | None = None

    def __init__(
        self,
        step: StepRow,
        attempt: int,
        status: str,
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
class StepEnd:
    """How the parent's step of a child run ends when the child ends (decided by
    ``runtime.steps.child_step_end``): ``status`` is ``succeeded`` or ``failed``."""

    status: str
    output: str | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class EndRun:
    """Move the run to ``status``; only from ``running`` (the terminal guard). A terminal
    end of a child run also ends the parent's waiting step as ``parent`` says (only if
    that step still waits for this child) and wakes the parent."""

    status: str
    output: str | None = None
    error: str | None = None
    parent: StepEnd | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CancelChildren:
    """Cancel the run's live child runs (queued, running or suspended), and theirs, each
    ended with ``error``; the run's steps that wait for them end as ``parent`` says. A
    run that fails or completes writes it after its ``EndRun``, so nothing it started
    goes on without it, as nothing goes on after a cancel."""

    error: str | None
    parent: StepEnd | None


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
    | GuardStep
    | TakeDecision
)


@dataclasses.dataclass
class Batch:
    run_id: str
    ops: list[Op]
    #: the lease owner that must still hold the run, or None for unfenced writes
    fence: str | None = None
    #: the last batch of a pass: release the lease in the same transaction; the value is
    #: the run's wake-up count the pass saw (-1: due again at once)
    release: int | None = None


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


@dataclasses.dataclass(frozen=True)
class StepJob:
    """A claimed delivery of a queued step, with the step's row as the claim read it."""

    run_id: str
    step_key: str
    function: str
    deliveries: int
    step: StepRow | None = None
    #: the workflow of the step's run (what ``ctx.workflow`` tells the body)
    workflow: str = ""
    #: the trace context stored with the step's run (``plait.tracing``)
    trace: str | None = None


@dataclasses.dataclass(frozen=True)
class QueueLimits:
    """The limits of one queue as a claim receives them (``plait.queues.Queue``, flat):
    the database stores rows, the process that claims says what the limits are.
    ``functions`` are the queued functions whose steps are admitted through the queue."""

    name: str
    concurrency: int | None = None
    per_key: int | None = None
    rate: int | None = None
    #: the rate's sliding window in seconds
    window: float | None = None
    functions: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class QueueDepth:
    """How many runs of a queue wait and how many hold a slot (``queue`` None: runs
    delayed without a queue)."""

    queue: str | None
    queued: int
    active: int


@dataclasses.dataclass
class ScheduleRow:
    """A stored schedule; ``definition`` is ``ScheduleSpec.definition()`` (JSON text)."""

    name: str
    workflow: str
    definition: str
    status: str
    source: str
    owner: str | None
    next_tick: float | None
    last_tick: float | None
    last_run_id: str | None
    created_at: float
    updated_at: float
    #: the status of the last run, read with the schedule (None: no run, or pruned)
    last_run_status: str | None = None


@dataclasses.dataclass(frozen=True)
class RunFilter:
    """Which runs ``Store.list_runs`` returns, newest first. A field left None matches
    every run, so one statement serves every combination of filters."""

    workflow: str | None = None
    status: str | None = None
    version: str | None = None
    owner: str | None = None
    parent_run_id: str | None = None
    #: runs this principal may see: its own and the ones without an owner
    visible_to: str | None = None
    #: runs whose id holds this text (any case)
    id_contains: str | None = None
    #: runs created at or after / before this time (seconds since the epoch)
    created_after: float | None = None
    created_before: float | None = None
    #: only runs that are no other run's child
    top_level: bool = False
    limit: int = 50
    offset: int = 0


@dataclasses.dataclass(frozen=True)
class DecisionRow:
    """A decision on approval gate ``name`` sent from outside a pass (``Engine.approve``),
    and what the caller decided of it: ``held`` (no gate of that name is open yet: the
    pass judges it when the run reaches one), ``refused`` (``reason`` says why), or
    ``accepted`` for the open gate ``key`` (``Store.submit_decision`` writes it only
    while that gate is open and before its deadline)."""

    name: str
    #: the JSON envelope the pass reads: data, decided_by, decided_at
    payload: str
    decided_by: str | None
    decided_at: float
    outcome: str  # held | accepted | refused
    reason: str | None = None
    key: str | None = None
    #: the reasons stored when an accepted decision finds its gate closed or past its
    #: deadline (the store only tells which)
    if_closed: str | None = None
    if_expired: str | None = None


@dataclasses.dataclass(frozen=True)
class GateRow:
    """An approval gate as ``Store.list_gates`` reads it: the step and its run."""

    step: StepRow
    workflow: str
    owner: str | None
    run_status: str


@dataclasses.dataclass(frozen=True)
class PruneBatch:
    """What one batch of a prune did: the runs it deleted (children included), and the
    cursor (updated_at, id) of the last top-level run it looked at, or None when there
    is nothing left to look at."""

    deleted: int
    cursor: tuple[float, str] | None


@dataclasses.dataclass(frozen=True)
class Version:
    """A stored version of a workflow: code versions are recorded as deployed, graphs
    registered at run time keep their definition (parsed JSON) with it."""

    workflow: str
    version: str
    kind: str
    definition: Any
    status: str
    created_at: datetime
    updated_at: datetime
    #: the user who registered it (None: the app's code or trusted code)
    registered_by: str | None = None


@dataclasses.dataclass(frozen=True)
class Pending:
    """What a database holds for its workers, as ``Store.pending`` reads it in one
    statement: a virtual clock may jump only when nothing is held (``leases`` 0) and
    nothing is due before ``next_due``."""

    #: runs and queued steps under a lease right now (work in flight)
    leases: int
    #: the earliest time a running run's wake-up or a job of the given functions is due;
    #: None when nothing waits on a time
    next_due: float | None
    #: the earliest start time of a queued run (a delay, ``start_at``, or a run waiting
    #: for admission since then); None when no run is queued
    next_start: float | None = None
    #: the next tick of an active schedule; None when no schedule is active
    next_tick: float | None = None


@dataclasses.dataclass(frozen=True)
class Lease:
    """A lease as read by ``Store.leases_of``: expiring it needs the exact values read,
    so a lease its holder renewed since then is left alone."""

    kind: Literal["run", "job"]
    run_id: str
    #: the queued step's key for a job; empty for a run
    step_key: str
    owner: str
    until: float


class LeaseKeeper(Protocol):
    """Renews a worker's leases from a thread of its own, with a connection of its own,
    while the worker's event loop is blocked (``worker.Worker``). Made and used in one
    thread."""

    def renew(self, owner: str, lease_seconds: float, holding: Sequence[str]) -> None: ...
    def close(self) -> None: ...


class Store(Protocol):
    """What every store offers. The contract suite (``tests/store/``) is what this
    protocol means in practice: a store that passes it is a store."""

    url: str

    @property
    def clock(self) -> Clock:
        """Where the store reads the time it writes and compares (``plait.clock``)."""
        ...

    @clock.setter
    def clock(self, clock: Clock) -> None: ...

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def attach_notifier(self, notifier: Notifier) -> None:
        """Tell ``notifier`` of changes other processes commit (and, where the store has
        a channel, send what this process publishes to them)."""
        ...

    # runs and their records
    async def create_run(self, new: NewRun) -> tuple[Run, bool]: ...
    async def get_run(self, run_id: str) -> Run | None: ...
    async def run_statuses(self, run_ids: Sequence[str]) -> dict[str, str]:
        """The status of each of ``run_ids`` that exists, in one read: one look for
        every caller waiting on a run, instead of one each."""
        ...

    async def list_runs(self, where: RunFilter) -> tuple[list[Run], int]:
        """The page of runs ``where`` asks for, newest first, and how many match."""
        ...

    async def list_run_summaries(self, where: RunFilter) -> tuple[list[RunSummary], int]:
        """As ``list_runs``, without reading any run's input, output or error."""
        ...

    async def get_steps(self, run_id: str) -> list[Step]: ...
    async def get_history(self, run_id: str) -> list[StepAttempt]: ...
    async def get_children(self, run_id: str) -> list[Run]: ...

    # orchestrator passes
    async def load_pass(self, run_id: str) -> PassSnapshot | None: ...
    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool: ...
    async def claim_due_runs(self, owner: str, lease_seconds: float, limit: int) -> list[str]: ...
    async def commit(self, batch: Batch) -> bool:
        """Write the batch in one transaction; with ``release``, give the run back and
        say whether it is due again at once. A fenced batch raises ``LeaseLostError``
        (nothing written) when its fence no longer holds the run. In a run that ended
        meanwhile (cancelled elsewhere) it writes the step records only: none of the
        work it would start (child runs, timers, jobs, attempts), no interruption (a
        step left to run again), and it raises ``RunEndedElsewhereError`` when it left
        out an attempt's start and releases nothing."""
        ...

    async def release_run(self, run_id: str, owner: str, wakeups_seen: int) -> bool: ...
    async def renew_leases(
        self,
        owner: str,
        lease_seconds: float,
        holding: Sequence[str],
        stepping: Sequence[str] = (),
    ) -> set[str]:
        """Extend the leases ``owner`` holds on the runs in ``holding`` (those it drives:
        a worker knows them, and the store need not look leases up) and on its jobs.
        Returns the runs that ended meanwhile among those it holds and those whose queued
        steps it is running (``stepping``): their work in this process must stop."""
        ...

    def lease_keeper(self) -> LeaseKeeper | None:
        """A keeper for the calling thread, or None where no other process can see the
        leases (a memory database)."""
        ...

    async def leases_of(self, worker_id: str, owner: str) -> list[Lease]: ...
    async def expire_leases(self, leases: Sequence[Lease]) -> int: ...
    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int: ...
    async def next_due(self, functions: Sequence[str] | None = None) -> float | None: ...
    async def job_depths(self) -> dict[str, int]:
        """Queued steps a worker could claim now, per function: due (not in a retry's
        back-off), of running runs, held by no live lease (a dead worker's expired one
        counts: the step waits for a worker again)."""
        ...

    async def pending(self, functions: Sequence[str]) -> Pending:
        """Leases held on running runs and their jobs, when the next run or job of
        ``functions`` falls due, the earliest start of a queued run and the next tick of an
        active schedule, in one read (a test engine's virtual clock jumps by it)."""
        ...

    # queued steps
    async def claim_step_jobs(
        self, owner: str, lease_seconds: float, limit: int, functions: Sequence[str]
    ) -> list[StepJob]:
        """Lease up to ``limit`` due jobs of ``functions`` whose run is running; each
        comes with its step's row and its run's workflow, read in the same statement."""
        ...

    async def begin_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        """Write the start of a queued attempt (``ops``) if ``owner`` still holds the job
        and the run is running. A suspended run's job is released for its resume; the
        job of a run that ended (or is gone) is deleted. False when nothing was written."""
        ...

    async def finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        """If ``owner`` still holds the job: delete it, write ``ops`` and wake the run."""
        ...

    async def repair_job(self, job: StepJob, owner: str, function: str) -> None:
        """Put a job that names the wrong function back on the queue under ``function``
        (if ``owner`` still holds it)."""
        ...

    async def drop_job(self, job: StepJob, owner: str) -> None:
        """Delete a job whose step no longer waits for it, if ``owner`` still holds it (a
        job enqueued again since is someone else's business)."""
        ...

    # actions from outside a pass
    async def wake(self, run_id: str, at: float | None = None) -> None: ...
    async def cancel_run(self, run_id: str, error: str, parent: StepEnd) -> list[str]:
        """End a running or suspended run ``cancelled`` with ``error``, and its running or
        suspended descendants with it; each ended run's waiting parent step ends as
        ``parent`` says. Returns every run that moved. ``RunNotFoundError`` /
        ``RunStateError`` when the run is missing or not running or suspended."""
        ...

    async def reopen_run(
        self, run_id: str, from_status: str, wakeups_seen: int, ops: Sequence[Op]
    ) -> Run | None:
        """A suspended or failed run goes on (``resume``, ``retry``): write ``ops`` (the
        steps the caller reopened) and make the run ``running`` and due now, if it is
        still ``from_status`` with ``wakeups_seen`` wake-ups. None when it changed since
        the caller read it; ``RunNotFoundError`` / ``RunStateError`` as for cancel."""
        ...

    async def send_event(self, run_id: str, name: str, payload: str | None) -> bool:
        """Store the event for the run; True if the run waits for ``name`` right now
        (else it is kept for a later wait, which may never come)."""
        ...

    # queues
    async def admit_runs(
        self, owner: str, lease_seconds: float, limit: int, queues: Sequence[QueueLimits]
    ) -> list[str]:
        """Admit up to ``limit`` due ``queued`` runs, highest priority first, within the
        limits of ``queues`` (a queue not given has none), and lease them to ``owner``,
        in one conditional write: they are ``running`` and this worker's to drive."""
        ...

    async def next_queued(self) -> float | None:
        """When the earliest queued run may start (it may still wait for a slot)."""
        ...

    async def claim_queue_jobs(
        self, owner: str, lease_seconds: float, limit: int, queues: Sequence[QueueLimits]
    ) -> list[StepJob]:
        """``claim_step_jobs`` for the functions of limited ``queues``: a job holds a slot
        of its function's queue while its lease runs."""
        ...

    async def queue_depths(self) -> list[QueueDepth]: ...

    # schedules
    async def put_schedule(self, row: ScheduleRow) -> bool:
        """Insert the schedule, or replace its workflow, definition and next tick if its
        definition changed (its status and last run are kept). True if anything changed."""
        ...

    async def get_schedules(self, name: str | None = None) -> list[ScheduleRow]: ...
    async def due_schedules(self, now: float, limit: int) -> list[ScheduleRow]: ...
    async def next_schedule_tick(self) -> float | None: ...
    async def fire_schedule(
        self,
        name: str,
        expected: float | None,
        next_tick: float | None,
        runs: Sequence[NewRun],
        skip_if_live: bool,
    ) -> list[str] | None:
        """Start ``runs`` (a schedule's due ticks, oldest first) and move its next tick
        to ``next_tick``, if it is still active with next tick ``expected``; with
        ``skip_if_live``, none starts while its last run is queued or running, and at
        most one starts. ``expected`` None: a manual trigger (no tick moves, overlap is
        ignored). None when another process changed the schedule first."""
        ...

    async def set_schedule_status(
        self, name: str, status: str, next_tick: float | None
    ) -> ScheduleRow | None: ...
    async def delete_schedule(self, name: str) -> bool: ...

    # approvals, values, forks, retention
    async def submit_decision(self, run_id: str, decision: DecisionRow, ops: Sequence[Op]) -> str:
        """Store a decision and, when it is ``accepted``, write ``ops`` (the gate's
        close) if gate ``decision.key`` is still ``pending`` and ``decided_at`` is before
        its deadline (the step's ``wake_at``); else it is stored refused. A held or
        accepted decision wakes the run. Returns ``accepted``, ``held``, ``refused``,
        ``closed`` or ``expired``. ``RunNotFoundError``; ``RunStateError`` when a held
        decision finds the run ended."""
        ...

    async def get_decisions(self, run_id: str) -> list[dict[str, Any]]:
        """Every decision sent to the run's gates, oldest first, as plain dicts (id,
        name, payload, decided_by, decided_at, outcome, reason, judged_at, key)."""
        ...

    async def list_gates(self, status: str | None, limit: int) -> list[GateRow]:
        """Approval gates of runs that are running or suspended (``status``: the step's
        status, ``pending`` for open gates; None: any), oldest first."""
        ...

    async def get_values(self, run_id: str) -> dict[str, str | None]:
        """The run's published values (JSON text) by key."""
        ...

    async def fork_run(self, new: NewRun, forked_from: str, ops: Sequence[Op]) -> Run:
        """Create run ``new`` recording ``forked_from``, with ``ops`` (the steps it
        keeps) written in the same transaction. ``RunIdTakenError`` if the id exists."""
        ...

    async def prune_batch(
        self,
        statuses: Sequence[str],
        cutoff: float,
        after: tuple[float, str] | None,
        limit: int,
    ) -> PruneBatch:
        """Delete up to ``limit`` ended top-level runs in ``statuses`` last updated
        before ``cutoff`` (after the ``after`` cursor), each with its child runs and
        every row of theirs, in one short transaction. A run with a child that has not
        ended is skipped."""
        ...

    # workflow versions and run-time graphs
    async def put_version(
        self,
        workflow: str,
        version: str,
        kind: str,
        definition: str | None,
        status: str,
        registered_by: str | None = None,
    ) -> None:
        """Insert a version, or set the status of the stored one (never anything else of
        it, and never another version's)."""
        ...

    async def claim_graph(self, workflow: str, owner: str | None) -> str | None:
        """Record ``owner`` as the owner of graph name ``workflow`` unless the name has
        one already (one conditional write); returns the owner on record after it."""
        ...

    async def get_version(self, workflow: str, version: str) -> Version | None: ...
    async def list_versions(
        self, workflow: str | None = None, status: str | None = None
    ) -> list[Version]:
        """Newest first."""
        ...
