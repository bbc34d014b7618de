"""What every store promises: the ``Store`` protocol, what the engine asks of a database
in the engine's own words, and ``LeaseKeeper``.

The engine never builds SQL. An orchestrator pass collects the writes it needs as small
operation objects (``store.ops``) and hands them to ``Store.commit`` as one batch; the store
turns the batch into one transaction (and may group several batches into one commit).
Every batch from a pass is fenced by the run lease, so a worker that lost its lease cannot
write over the worker that took the run over. What the store reads comes back as the rows
of ``store.rows``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from plait.clock import Clock
from plait.notify import Notifier
from plait.records import Run, RunSummary, Step, StepAttempt, StreamEntry
from plait.statuses import RequestStatusName, RunStatusName, StepStatusName
from plait.store.ops import Batch, CancelChildren, CancelCut, EndRun, Op, StepEnd
from plait.store.rows import (
    ANY_SCOPE,
    Brake,
    ClaimScope,
    DecisionRow,
    GateRow,
    KeyDepth,
    Lease,
    LeaseRenewal,
    NewRun,
    PassSnapshot,
    Pending,
    PruneBatch,
    QueueDepth,
    QueueKeyDepth,
    QueueLimits,
    RequestRow,
    RunFilter,
    ScheduleAsRead,
    ScheduleRow,
    Spend,
    SpendTotal,
    StepJob,
    StoredQueueLimits,
    StreamWrite,
    Version,
    WorkerRow,
)


class LeaseKeeper(Protocol):
    """Renews a worker's leases from a thread of its own, with a connection of its own,
    while the worker's event loop is blocked (``worker.Worker``). Made and used in one
    thread."""

    def renew(self, owner: str, lease_seconds: float, holding: Sequence[str]) -> None: ...
    def close(self) -> None: ...


class LimitsStore(Protocol):
    """Queue limits kept in the database for every process, and the spend that budgets
    count (``Store`` has these too)."""

    async def put_queue_limits(self, queues: Sequence[QueueLimits], app: str) -> None:
        """Store each queue's limits (not its ``functions``) as ``app`` declares them,
        replacing what was stored for that queue."""
        ...

    async def list_queue_limits(self) -> list[StoredQueueLimits]:
        """Every stored queue's limits, by name."""
        ...

    async def record_spend(self, spend: Sequence[Spend]) -> None:
        """Record what step attempts reported spent, at the clock's time."""
        ...

    async def spend_totals(
        self, budgets: Sequence[tuple[str, str, float, bool]]
    ) -> list[SpendTotal]:
        """For each (queue, unit, since, per key): the spend recorded after ``since``,
        summed per key when ``per key`` (else over the queue: key None)."""
        ...

    async def prune_spend(self, queue: str, before: float) -> None:
        """Forget the spend of ``queue`` recorded at or before ``before``."""
        ...

    async def queue_key_depths(self) -> list[KeyDepth]:
        """Per queue and key with live runs: how many wait, how many hold a slot."""
        ...


class CallerTransactionStore(Protocol):
    """Runs written in a transaction the caller holds (``Store`` has this too)."""

    async def create_run_in(self, connection: object, new: NewRun) -> tuple[str, str, bool]:
        """``create_run`` on ``connection``, the caller's own connection to this store's
        database (``sqlite3`` on SQLite, asyncpg on PostgreSQL), inside its open
        transaction: nothing is committed here; the caller's commit makes the run (and
        wakes the workers), its rollback leaves none. Returns the run's id (the live
        run's that holds ``new.dedup``), its workflow, and whether it was made here.
        ``TypeError`` for a connection of another kind, ``ValueError`` for one to another
        database or with no open transaction."""
        ...


class FleetStore(Protocol):
    """Brakes (paused workflows and queues) and the worker registry: what operators set
    and read across every process (``Store`` has these too)."""

    async def pause(
        self, kind: str, name: str, status: RunStatusName, from_status: RunStatusName
    ) -> list[str]:
        """Pause workflow or queue ``name`` (``kind``: ``workflow`` or ``queue``) for
        every process: no claim takes its runs from now on, and those of its runs that
        are ``from_status`` with no live lease become ``status`` (``park_braked``).
        Returns the runs that moved. Pausing it again changes nothing."""
        ...

    async def unpause(
        self, kind: str, name: str, status: RunStatusName, paused: RunStatusName
    ) -> list[str]:
        """Resume workflow or queue ``name``: every run ``paused`` that no other brake
        holds becomes ``status``, due at once. Returns them."""
        ...

    async def park_braked(self, status: RunStatusName, from_status: RunStatusName) -> list[str]:
        """Runs ``from_status`` of a paused workflow or queue that no live lease holds
        (a pass that held one ended, or its worker died) become ``status``."""
        ...

    async def list_brakes(self) -> list[Brake]:
        """The paused workflows and queues."""
        ...

    async def put_worker(self, row: WorkerRow) -> None:
        """Record a worker, or its heartbeat (``seen_at``) when it is recorded."""
        ...

    async def list_workers(self, seen_since: float) -> list[WorkerRow]:
        """Workers seen at ``seen_since`` or later, oldest first."""
        ...

    async def forget_workers(self, seen_before: float) -> None:
        """Delete the records of workers last seen before ``seen_before``."""
        ...


class Store(LimitsStore, CallerTransactionStore, FleetStore, Protocol):
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
    async def create_run(self, new: NewRun) -> tuple[Run, bool]:
        """Create ``new`` and return it with True; or, with False, the run with its id,
        the live run holding its ``dedup`` key, or (``new.debounce_key``) the run of its
        workflow, debounce key and owner still waiting for its start time, which takes
        ``new``'s input and start and merges ``new``'s tags into its own
        (``NewRun.debounce_key``). Atomic across processes: one
        run holds a dedup key, one run waits per debounce key."""
        ...

    async def replace_run(self, new: NewRun, end: EndRun) -> tuple[Run, bool, list[str]]:
        """Create ``new``; a live run holding its ``dedup`` key, if it is of ``new``'s
        owner, first ends as ``end`` says (a cancel's, as ``cancel_run`` ends a run), in
        the same transaction. The run with ``new``'s id, if one exists, is returned as
        it is (nothing ends), and so is a holder of another owner. Returns the run,
        whether this call created it, and every run the cancel moved."""
        ...

    async def create_runs(self, news: Sequence[NewRun]) -> list[tuple[Run, bool]]:
        """Each of ``news`` created as ``create_run`` creates it alone, in order, all in
        one transaction: a later one sees the earlier ones (an id or a de-duplication key
        given twice gives the first's run). All or none: ``RunIdTakenError`` if an id is
        held by a run of another workflow, and then nothing is written."""
        ...

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

    async def count_by_status(self, where: RunFilter) -> dict[str, int]:
        """How many runs ``where`` matches in each status (a status none has is left
        out); ``where``'s page (``limit``, ``offset``) pages the statuses."""
        ...

    async def get_steps(self, run_id: str) -> list[Step]: ...
    async def waiting_steps(
        self, run_ids: Sequence[str], kinds: Sequence[str], statuses: Sequence[str]
    ) -> list[Step]:
        """The steps of ``run_ids`` of one of ``kinds`` in one of ``statuses``, in run
        and step order, in one read: what a page of runs waits on."""
        ...

    async def get_history(self, run_id: str) -> list[StepAttempt]: ...
    async def get_children(self, run_id: str) -> list[Run]: ...

    # orchestrator passes
    async def load_pass(self, run_id: str) -> PassSnapshot | None: ...
    async def list_passes(
        self, statuses: Sequence[str], kind: str, workflow: str | None, after: str, limit: int
    ) -> list[PassSnapshot]:
        """What a pass reads (as ``load_pass``) of up to ``limit`` runs of ``kind`` in one
        of ``statuses`` (of ``workflow`` only, when given) whose ids come after ``after``,
        in id order: a dry pass over many runs (``Engine.check``) reads them a page at a
        time, and a page goes on where the last ended however runs moved meanwhile. A
        plain read: it takes no lease and writes nothing."""
        ...

    async def claim_run(
        self, run_id: str, owner: str, lease_seconds: float, scope: ClaimScope = ANY_SCOPE
    ) -> bool:
        """Lease the running run ``run_id`` to ``owner`` if no live lease holds it, it
        is in ``scope`` and neither its workflow nor its queue is paused."""
        ...

    async def claim_due_runs(
        self, owner: str, lease_seconds: float, limit: int, scope: ClaimScope = ANY_SCOPE
    ) -> list[str]:
        """Lease up to ``limit`` due running runs of ``scope`` to ``owner``, soonest due
        first, leaving out those of a paused workflow or queue."""
        ...

    async def claim_due_passes(
        self, owner: str, lease_seconds: float, limit: int, scope: ClaimScope = ANY_SCOPE
    ) -> list[PassSnapshot]:
        """``claim_due_runs``, returning what ``load_pass`` reads of each run it took, read
        after the claim: a worker told of a new run starts its pass without another round
        trip."""
        ...

    def starting_pass(self, run_id: str) -> None:
        """A pass of ``run_id`` starts from what ``claim_due_passes`` read: the store
        forgets what it kept of the run's earlier passes, as ``load_pass`` does (not at the
        claim: an earlier pass of this process may still be finishing)."""
        ...

    async def commit(self, batch: Batch) -> bool:
        """Write the batch in one transaction; with ``release_wakeups_seen``, give the run back and
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
    ) -> LeaseRenewal:
        """Extend the leases ``owner`` holds on the runs in ``holding`` (those it drives:
        a worker knows them, and the store need not look leases up) and on its jobs.
        Says which runs ended meanwhile among those it holds and those whose queued steps
        it is running (``stepping``), which runs of ``holding`` are no longer its own,
        and which jobs it holds: work whose lease is gone must stop, and start nothing."""
        ...

    def lease_keeper(self) -> LeaseKeeper | None:
        """A keeper for the calling thread, or None where no other process can see the
        leases (a memory database)."""
        ...

    async def leases_of(self, worker_id: str, owner: str) -> list[Lease]: ...
    async def expire_leases(self, leases: Sequence[Lease]) -> int: ...
    async def release_leases(self, owner: str, run_ids: Sequence[str]) -> int:
        """Give back what a stopping ``owner`` still holds: the runs among ``run_ids``
        (due at once) and all its jobs (back on their queue). Work cancelled before it
        began releases nothing itself, and would otherwise wait out its lease. Returns
        how many leases were given back."""
        ...

    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int: ...
    async def next_due(
        self, functions: Sequence[str] | None = None, scope: ClaimScope = ANY_SCOPE
    ) -> float | None:
        """When the next pass of a run ``claim_due_runs`` would take with ``scope`` is
        due (``functions`` None), or the next job of ``functions``."""
        ...

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
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        functions: Sequence[str],
        queues: Sequence[str] = (),
    ) -> list[StepJob]:
        """Lease up to ``limit`` due jobs of ``functions`` whose run is running; each
        comes with its step's row and its run's workflow, read in the same statement.
        ``queues[i]`` is the queue of ``functions[i]``: while it is paused, no job of
        that function is leased (a function given no queue here is held by no brake of
        its own)."""
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

    async def lost_jobs(self, owner: str, jobs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Of the jobs (run id, step key) whose attempts ``owner`` is running, those it no
        longer holds: the run's pass cancelled the step (``CancelJob``), the run ended, or
        the job's lease ran out and another worker took it. Their bodies must stop: their
        ends would be refused."""
        ...

    # actions from outside a pass
    async def wake(self, run_id: str, at: float | None = None) -> None: ...
    async def cancel_run(
        self, run_id: str, status: RunStatusName, error: str, parent: StepEnd, cut: CancelCut
    ) -> list[str]:
        """End a live run (queued, running, suspended, paused or needs_attention)
        ``status`` (a cancel's) with ``error``, and its live descendants with it; each
        ended run's waiting parent step ends as ``parent`` says, and its steps in flight
        as ``cut`` says. Returns every run that moved. ``RunNotFoundError`` /
        ``RunStateError`` when the run is missing or ended."""
        ...

    async def time_out_run(
        self,
        run_id: str,
        status: RunStatusName,
        error: str,
        parent: StepEnd,
        cut: CancelCut,
        children: CancelChildren,
    ) -> list[str]:
        """End a live run past its deadline as ``cancel_run`` ends it (``status``,
        ``error``, ``parent``, ``cut``), except that its live child runs (and theirs) end
        as ``children`` says. Returns every run that moved: none when the run is gone, has
        ended, or its deadline is still to come (another process timed it out first)."""
        ...

    async def due_deadlines(self, now: float, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` live runs whose deadline is at or before ``now``, each with its
        deadline, soonest first, leaving out a child whose live parent is past its deadline too (the
        parent's time-out ends it)."""
        ...

    async def next_deadline(self) -> float | None:
        """The earliest deadline of a live run (None: no live run has one)."""
        ...

    async def reopen_run(
        self,
        run_id: str,
        from_status: str,
        status: RunStatusName,
        deadline_at: float | None,
        wakeups_seen: int,
        ops: Sequence[Op],
    ) -> Run | None:
        """A suspended, failed or needs_attention run goes on (``resume``, ``retry``):
        write ``ops`` (the steps the caller reopened) and make the run ``status``, with
        ``deadline_at`` (its deadline from now on, ``runs.Reopen.deadline``), and due
        now, if it is still ``from_status`` with ``wakeups_seen`` wake-ups. None when it
        changed since the caller read it; ``RunNotFoundError`` / ``RunStateError`` as for
        cancel."""
        ...

    async def send_event(
        self, run_id: str, name: str, payload: str | None, dedup: str | None = None
    ) -> bool:
        """Store the event for the run; True if the run waits for ``name`` right now
        (else it is kept for a later wait, which may never come). With ``dedup``, a key
        the run took already (its event held or consumed) stores nothing and answers
        False, whatever the run's status now; two senders racing with one key store one
        event (a unique index decides)."""
        ...

    # requests
    async def send_request(
        self,
        run_id: str,
        name: str,
        data: str | None,
        status: RequestStatusName,
        refusal: str | None,
        deadline: float,
        live: Sequence[RunStatusName],
    ) -> int:
        """Store a request for the run, ``status`` (with ``refusal`` for one refused on
        arrival), waiting until ``deadline``, and wake the run; returns its id. Requests
        get increasing ids in the order they commit (the order a workflow takes them).
        ``RunNotFoundError``; ``RunStateError`` unless the run is one of ``live``."""
        ...

    async def get_request(self, request_id: int) -> RequestRow | None: ...
    async def withdraw_request(
        self, request_id: int, from_status: RequestStatusName, status: RequestStatusName
    ) -> bool:
        """Move the request to ``status`` if it is still ``from_status``, in one
        conditional write (a pass taking it writes the same way: one of them wins)."""
        ...

    # queues
    async def admit_runs(
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        queues: Sequence[QueueLimits],
        status: RunStatusName,
        scope: ClaimScope = ANY_SCOPE,
        held: Sequence[tuple[str, str | None]] = (),
    ) -> list[str]:
        """Admit up to ``limit`` due ``queued`` runs of ``scope``, highest priority
        first, within the limits of ``queues`` (a queue not given has none), and lease them
        to ``owner``, in one conditional write: they are ``status`` (an admitted run's) and
        this worker's to drive. A run of a paused workflow or queue waits, and so does a
        run of a queue in ``held`` ((queue, None)) or of its key there ((queue, key))."""
        ...

    async def next_queued(self) -> float | None:
        """When the earliest queued run may start (it may still wait for a slot)."""
        ...

    async def claim_queue_jobs(
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        queues: Sequence[QueueLimits],
        held: Sequence[tuple[str, str | None]] = (),
    ) -> list[StepJob]:
        """``claim_step_jobs`` for the functions of limited ``queues``: a job holds a slot
        of its function's queue while its lease runs. A job of a queue in ``held`` (or of
        a run whose key is held there) waits, as for ``admit_runs``."""
        ...

    async def queue_depths(self) -> list[QueueDepth]: ...

    async def queue_keys(self, queue: str) -> list[QueueKeyDepth]:
        """Per key of ``queue`` with runs waiting or holding a slot: how many of each,
        and how far ahead of the queue's clock a fair queue has served the key."""
        ...

    # schedules
    async def put_schedule(
        self, row: ScheduleRow, as_read: ScheduleAsRead | None = None
    ) -> bool | None:
        """Insert the schedule, or replace its workflow, definition and next tick if its
        definition changed (its status and last run are kept). True if anything changed.
        With ``as_read``, only as one write over the schedule as the caller read it
        (none of that name, or one of that owner): None, writing nothing, when another is
        stored now, so two callers deciding on one read cannot both store."""
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
        its deadline (the step's ``wake_at``); else it is stored refused. A refused
        decision is stored without its payload (who, when and why stay), and not at all
        once its gate holds ``decision.refused_cap`` refused ones, counted in the same
        transaction. A held or accepted decision wakes the run. Returns ``accepted``,
        ``held``, ``refused``, ``closed`` or ``expired``. ``RunNotFoundError``;
        ``RunStateError`` when a held decision finds the run ended."""
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

    # streams
    async def append_stream(
        self, run_id: str, writes: Sequence[StreamWrite], live: Sequence[RunStatusName]
    ) -> int:
        """Append ``writes`` (step attempts' entries, in order) as ``data`` entries at
        their streams' next offsets, in one transaction, if the run is one of ``live``;
        an entry of an attempt already reset (a late flush of a process that lost it) is
        left out. Returns how many were written. A workflow's own entries ride with its
        pass's batch (``AppendStream``); a failed or interrupted attempt's ``reset`` and a
        run's ``end`` are written by the store in the transaction that ends them."""
        ...

    async def read_stream(
        self, run_id: str, stream: str, after: int, limit: int, settled: StepStatusName | None
    ) -> list[StreamEntry]:
        """Up to ``limit`` entries of the stream with offsets above ``after``, in order.
        With ``settled`` (the status of a step whose latest attempt succeeded), only the
        workflow's own entries, the ends, and the entries of attempts that succeeded."""
        ...

    async def stream_names(self, run_id: str) -> list[str]:
        """The streams the run has written to, by name."""
        ...

    async def run_marks(self, run_id: str) -> tuple[Any, ...] | None:
        """A few numbers and times that change whenever the run, its steps, values,
        decisions, children or streams change (None: no such run), read without reading any of
        them: a follower reads the run again only when these moved."""
        ...

    async def fork_run(
        self,
        new: NewRun,
        forked_from: str,
        ops: Sequence[Op],
        from_statuses: Sequence[str],
        replace: EndRun | None = None,
    ) -> tuple[Run, list[str]]:
        """Create run ``new`` recording ``forked_from``, with ``ops`` (the steps it
        keeps) written in the same transaction, if the source is in one of
        ``from_statuses`` then (``RunNotFoundError`` / ``RunStateError`` if not, with
        nothing written). With ``replace`` (a cancel's end, as ``cancel_run`` takes it)
        a source that is queued, running or suspended ends as a cancel ends it, in the
        same transaction. Returns the fork and the runs the cancel moved (the source and
        its live descendants). ``RunIdTakenError`` if the id exists."""
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
