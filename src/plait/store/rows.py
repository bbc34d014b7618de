"""The rows the store reads and hands back, in the engine's words (JSON columns still
encoded as text): a run, its steps and events as a pass reads them, a claimed job, queue
limits and depths, schedules, decisions, gates, versions, leases, and what a prune did.
The store only moves these; what they mean is decided above it.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, Literal

from plait.statuses import RunStatusName


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
    #: the status it starts in (``runtime.runs.initial_status``): ``queued`` for a run
    #: that waits for admission or for its start time
    status: RunStatusName = dataclasses.field(kw_only=True)
    #: the status a start that would run at once waits in instead when a brake holds its
    #: workflow or queue, read in the start's own transaction
    #: (``runtime.runs.BRAKED_START``); None: the store does not look at the brakes
    held_status: RunStatusName | None = None
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
    #: when the run must have ended (unix seconds, ``runs.deadline``); None: never
    deadline_at: float | None = None
    #: the seconds from its start to ``deadline_at`` (``runs.timeout_of``); None: no deadline
    timeout: float | None = None
    #: its tags (``plait.tags.dumps``: sorted JSON), or None for none
    tags: str | None = None
    #: a debounced start's key: while a run of the workflow with this key (and owner) waits
    #: for its start time, that run takes this input and ``tags`` (merged into its own)
    #: and starts at ``not_before`` (never past its ``debounce_until``) instead of this
    #: one being created; None: not debounced
    debounce_key: str | None = None
    #: the latest start (unix seconds) a later debounced start may give the run this start
    #: creates (the start plus ``debounce_max``); None: no limit
    debounce_until: float | None = None


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
    #: the run this one continues (its workflow called ``wf.continue_as_new``)
    continued_from: str | None = None
    #: the run that continues this one (set as this one ends ``continued``)
    continued_to: str | None = None
    #: when the run must have ended (unix seconds); None: no deadline
    deadline_at: float | None = None
    #: the seconds its deadline was counted from its start with (a retry counts them again)
    timeout: float | None = None
    #: its tags (JSON, ``plait.tags``), or None for none
    tags: str | None = None


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
    """An event (or a gate's decision) sent to a run and not taken yet; ``created_at``
    (unix seconds) is when it arrived."""

    id: int
    name: str
    payload: str | None
    created_at: float


@dataclasses.dataclass
class RequestRow:
    """A request sent to a run (``Engine.request``), and what became of it: ``status``
    is a ``RequestStatusName``; ``taken_by`` the key of the wait that took it; ``reply``
    (JSON) or ``refusal`` (a JSON record) its answer; ``deadline`` when its sender stops
    waiting (unix seconds)."""

    id: int
    run_id: str
    name: str
    data: str | None
    status: str
    taken_by: str | None
    reply: str | None
    refusal: str | None
    created_at: float
    deadline: float


@dataclasses.dataclass
class PassSnapshot:
    """Everything one orchestrator pass reads, in one round trip."""

    run: RunRow
    steps: dict[str, StepRow]
    events: list[EventRow]
    state: dict[str, str | None]
    #: the requests sent to the run and not taken yet, oldest first
    requests: list[RequestRow] = dataclasses.field(default_factory=list)  # pyright: ignore[reportUnknownVariableType]


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
    #: the queue of the step's run (None: started on no queue)
    queue: str | None = None


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
    #: a fair queue's admissions take keys in turn: what one admission costs a key in
    #: virtual time (None: the queue is not fair), and the keys whose weights give
    #: theirs another cost (key, cost). The waiting run whose key has spent the least
    #: comes first; the database keeps what each key has spent.
    turn: int | None = None
    key_costs: tuple[tuple[str, int], ...] = ()
    #: the weights (key, weight) those costs come from, as declared: a cost is rounded
    #: (``plait.queues.TURN // weight``), so weights near ``MAX_WEIGHT`` share costs and
    #: cannot be read back from them. Shown, never stored (a row stays readable by every
    #: plait of a rolling deploy) nor compared (the costs are what admission uses)
    weights: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False)
    #: spend budgets: (unit, amount, window in seconds)
    budget: tuple[tuple[str, float, float], ...] = ()
    budget_per_key: bool = False

    @property
    def limited(self) -> bool:
        """Whether anything holds the queue's runs back (``Queue.limited``, flat): a
        queue without limits admits every run at once and needs no admission."""
        return (
            self.concurrency is not None
            or self.per_key is not None
            or self.rate is not None
            or self.turn is not None
            or bool(self.budget)
        )


@dataclasses.dataclass(frozen=True)
class StoredQueueLimits:
    """A queue's limits as stored (``functions`` empty: which functions a queue admits is
    each process's app's), the app whose engine stored them and when."""

    limits: QueueLimits
    app: str
    updated_at: float


@dataclasses.dataclass(frozen=True)
class Spend:
    """What one step attempt reported spent (``ctx.spend``), counted against ``queue``
    (None: its run's queue) and its run's key, for the queue's budgets."""

    queue: str | None
    unit: str
    amount: float
    run_id: str
    step_key: str
    attempt: int


@dataclasses.dataclass(frozen=True)
class KeyDepth:
    """How many runs of one key of a queue wait and how many hold a slot."""

    queue: str
    key: str
    queued: int
    active: int


@dataclasses.dataclass(frozen=True)
class SpendTotal:
    """Spend of one unit in a queue (and a key, for budgets per key) since a time, and
    when its oldest entry then was (the window frees from there)."""

    queue: str
    key: str | None
    unit: str
    amount: float
    oldest: float


@dataclasses.dataclass(frozen=True)
class ClaimScope:
    """Which runs a worker claims (drives, admits): those of ``workflows`` (None: any),
    and, with ``graphs``, of any graph stored at run time (their definitions are data
    every process can run); in one of ``queues`` (None: any; a run started on no queue
    is in ``plait.queues.DEFAULT_QUEUE``). A worker passes what its app registers, so it
    never claims a run whose code it lacks."""

    workflows: tuple[str, ...] | None = None
    graphs: bool = True
    queues: tuple[str, ...] | None = None


#: every run: what a caller that names no scope claims
ANY_SCOPE = ClaimScope()


@dataclasses.dataclass(frozen=True)
class Brake:
    """A paused workflow (``kind`` ``workflow``) or queue (``queue``), since
    ``paused_at``: no process claims its runs until it is resumed."""

    kind: str
    name: str
    paused_at: float


@dataclasses.dataclass(frozen=True)
class WorkerRow:
    """A worker process as it recorded itself (``plait_workers``); ``seen_at`` is its
    last heartbeat. ``queues`` None: every queue."""

    id: str
    host: str
    pid: int
    app: str
    version: str
    queues: tuple[str, ...] | None
    workflows: tuple[str, ...]
    started_at: float
    seen_at: float


@dataclasses.dataclass(frozen=True)
class QueueDepth:
    """How many runs of a queue wait and how many hold a slot (``queue`` None: runs
    delayed without a queue)."""

    queue: str | None
    queued: int
    active: int


@dataclasses.dataclass(frozen=True)
class QueueKeyDepth:
    """How many runs of one key of a queue wait and how many hold a slot (``key`` None:
    runs without a key), and in a fair queue how far ahead of the queue's clock the key
    has been served (``ahead``, in virtual time; None: the key has no turn kept)."""

    key: str | None
    queued: int
    active: int
    ahead: int | None = None


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


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleAsRead:
    """The stored schedule a caller decided on, for ``put_schedule`` to store over it
    only if it is still so: none of the name (``found`` False), or one owned by
    ``owner`` (None: a schedule of no owner)."""

    found: bool
    owner: str | None = None


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
    #: with ``visible_to``, also the runs of schedules without an owner (owner
    #: ``schedule:<name>``, ``ids.schedule_owner``): a holder of the ``schedules`` scope
    visible_schedule_runs: bool = False
    #: runs whose id holds this text (any case)
    id_contains: str | None = None
    #: runs created at or after / before this time (seconds since the epoch)
    created_after: float | None = None
    created_before: float | None = None
    #: only runs that are no other run's child
    top_level: bool = False
    #: leave out the runs another run continues (``wf.continue_as_new``): of each chain,
    #: only its last run
    hide_continued: bool = False
    #: runs of this queue
    queue: str | None = None
    #: runs that carry every one of these (key, value) pairs (``plait.tags``)
    tags: tuple[tuple[str, str], ...] | None = None
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
    #: a refused decision is not stored once its gate (``key``; none reached: ``""``)
    #: holds this many refused ones (None: no cap); the store counts them in the
    #: transaction that stores it, so concurrent senders cannot pass the cap
    refused_cap: int | None = None


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
    #: the earliest deadline of a live run; None when no live run has one
    next_deadline: float | None = None


@dataclasses.dataclass(frozen=True)
class LeaseRenewal:
    """What a renewal of a worker's leases found (``Store.renew_leases``)."""

    #: runs that ended meanwhile among those it holds (cancelled from elsewhere) and
    #: among those whose queued steps it runs: their work in this process must stop
    ended: frozenset[str] = frozenset()
    #: runs among those it holds whose lease is no longer its own (it ran out and another
    #: worker took it, or was given up): nothing more of them may start here
    lost: frozenset[str] = frozenset()
    #: the jobs (run id, step key) it holds, their leases renewed
    jobs: frozenset[tuple[str, str]] = frozenset()


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


@dataclasses.dataclass(frozen=True, slots=True)
class StreamWrite:
    """A ``data`` entry a step attempt's body wrote (``ctx.stream``), waiting to be
    appended: its stream, its value (JSON text), and the step and attempt that wrote it."""

    stream: str
    value: str | None
    step_key: str
    attempt: int
