"""The shared store: PostgreSQL, for many workers on many machines.

Every store method is one SQL statement, so one round trip and one short transaction:
state changes that touch several rows (a pass's batch of writes, ending a run with its
cascade, reopening a run, sending an event, starting a queued attempt) are PL/pgSQL
functions installed by the migrations (``sql/postgres/migrations/``); the statements
themselves are named queries in ``sql/postgres/queries.sql``. No transaction stays open on
the client side, so none is ever held across user code or left behind by a dropped
connection. The functions decide nothing: a step's new status and every error record come
in as ops and ``StepEnd`` values from the runtime, so each rule is written once, in Python,
for every store.

Claims skip the rows other workers have locked (``SKIP LOCKED``): many workers poll the
same queue without queueing behind each other's row locks. A batch of a
pass locks its run row and checks the lease before it writes (the fence).

JSON arrives as encoded text, is stored as ``jsonb`` and comes back as text, so
``store.convert`` works unchanged. The pool and its codecs are in ``pool``, LISTEN/NOTIFY
in ``listen``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from plait.cancel_guard import holding_task, uncancelled
from plait.clock import SYSTEM_CLOCK, Clock
from plait.errors import (
    GateClosedError,
    LeaseLostError,
    RunEndedElsewhereError,
    RunIdTakenError,
    RunNotFoundError,
    RunStateError,
)
from plait.notify import Notifier
from plait.records import Run, RunSummary, Step, StepAttempt
from plait.store import convert, queries
from plait.store.contract import LeaseKeeper
from plait.store.migrations import migrations
from plait.store.ops import (
    Batch,
    CancelChildren,
    ClearTimer,
    ConsumeEvent,
    CreateChildRun,
    EndRun,
    EnqueueJob,
    FinishAttempt,
    GuardStep,
    Op,
    PutStep,
    SetState,
    SetTimer,
    SetValue,
    StartAttempt,
    StepEnd,
    TakeDecision,
    ended_elsewhere,
)
from plait.store.postgres.group import GroupCommit, Together, steps_only
from plait.store.postgres.listen import Listener
from plait.store.postgres.pool import (
    DatabaseUnavailableError,
    Pool,
    describe,
    is_connection_error,
    set_codecs,
    split_url,
)
from plait.store.rows import (
    DecisionRow,
    EventRow,
    GateRow,
    Lease,
    NewRun,
    PassSnapshot,
    Pending,
    PruneBatch,
    QueueDepth,
    QueueLimits,
    RunFilter,
    RunRow,
    ScheduleRow,
    StepJob,
    StepRow,
    Version,
)

log = logging.getLogger("plait.store.postgres")

_MIGRATIONS = migrations("postgres")
#: the newest migration this code knows; the schema_version table says what a database has
SCHEMA_VERSION = _MIGRATIONS.latest

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,56}\Z")

# SQLSTATEs raised by the schema's functions
_LEASE_LOST = "PLT01"
_RUN_NOT_FOUND = "PLT02"
_RUN_STATE = "PLT03"
_GATE_CLOSED = "PLT05"
_RUN_EXISTS = "PLT06"
#: what reopen_run does, by the status it reopens from, for RunStateError
_REOPEN_ACTIONS = {"suspended": "resume", "failed": "retry"}

#: the columns of RunRow read by position (those of schema version 1, idle_sweeps aside)
_RUN_BASE_FIELDS = 18
#: the columns migrations added to runs since, in RunRow's order
_RUN_ADDED_FIELDS = (
    "queue",
    "queue_key",
    "priority",
    "dedup",
    "scheduled_at",
    "admitted_at",
    "forked_from",
    "trace",
)
_STEP_FIELDS = len(dataclasses.fields(StepRow))
#: the most children get_children returns (the newest ones)
_MAX_CHILDREN = 10_000
#: the most step writes one commit_first_attempts takes (a larger batch of first attempts,
#: the starts of a wide gather, goes through commit_steps: its server cost is spread over
#: the batch, and a statement's parameters are limited)
_FIRST_ATTEMPT_ROWS = 16
_WARM_STATEMENTS = (
    "load_passes",
    "select_runs",
    "commit_batch",
    "commit_steps",
    "commit_and_release",
    "commit_group",
    "release_run",
    "claim_due_runs",
)


#: the steps row type's columns after StepRow's fields (the attempt on the row, schema
#: version 13), which the store sends empty: the schema's functions write them
_STEP_ATTEMPT_COLUMNS = (None,) * 5


def _step_value(s: StepRow) -> tuple[Any, ...]:
    """A step as the steps table's row type (columns in StepRow's field order)."""
    return (*convert.step_params(s, flag=bool), *_STEP_ATTEMPT_COLUMNS)


def _new_run_value(n: NewRun) -> tuple[Any, ...]:
    return (
        n.id,
        n.workflow,
        n.kind,
        n.version,
        n.input,
        n.owner,
        n.parent_run_id,
        n.parent_step_key,
        n.start_node,
        n.lease_owner,
        float(n.lease_seconds),
        n.status,
        n.queue,
        n.queue_key,
        n.priority,
        n.dedup,
        n.not_before,
        n.scheduled_at,
        n.trace,
    )


def _step_end_value(end: StepEnd | None) -> tuple[Any, ...] | None:
    return None if end is None else (end.status, end.output, end.error)


def _first_attempt_rows(run_id: str, ops: list[Op], now: float) -> list[Any] | None:
    """The parameters of ``commit_first_attempts`` for a batch it can write (at most
    ``_FIRST_ATTEMPT_ROWS`` step writes of ``run_id`` as ``steps_only`` says, no attempt
    after a first one started), else None: each step as a row of the steps table, its
    attempt columns filled as ``apply_step_ops`` fills them. One pass over the batch,
    since every sequential step comes this way."""
    if not ops or len(ops) > _FIRST_ATTEMPT_ROWS:
        return None
    keys: set[str] = set()
    rows: list[Any] = []
    for op in ops:
        if isinstance(op, StartAttempt):
            if op.attempt > 1:
                return None  # its predecessor moves from the step's row to attempts
            attempt: tuple[Any, ...] = (op.worker, "running", None, now, None)
        elif isinstance(op, FinishAttempt):
            attempt = (None, op.status, op.error, None, now)
        elif isinstance(op, PutStep):
            attempt = _STEP_ATTEMPT_COLUMNS
        else:
            return None
        step = op.step
        if step.run_id != run_id or step.key in keys:
            return None
        keys.add(step.key)
        rows += convert.step_params(step, flag=bool)
        rows += attempt
    return rows


@functools.lru_cache(maxsize=2 * _FIRST_ATTEMPT_ROWS)
def first_attempts_statement(one_row: str, rows: int) -> str:
    """``commit_first_attempts`` (written for one step) for ``rows`` steps: a row of
    parameters for each step after the first, numbered on from the first row's."""
    head, tail = one_row.split("(VALUES (", 1)
    first, rest = tail.split(")) AS u", 1)
    width = first.count("$")
    more = [
        "(" + ", ".join(f"${2 + width * r + c}" for c in range(1, width + 1)) + ")"
        for r in range(1, rows)
    ]
    return f"{head}(VALUES ({first}){''.join(', ' + row for row in more)}) AS u{rest}"


def _filter_args(where: RunFilter) -> tuple[Any, ...]:
    """A run filter as the parameters of list_runs and list_run_summaries, in order."""
    return (
        where.workflow,
        where.status,
        where.version,
        where.owner,
        where.parent_run_id,
        where.visible_to,
        where.limit,
        where.offset,
        where.id_contains,
        where.created_after,
        where.created_before,
        where.top_level,
    )


def _op_value(op: Op) -> tuple[Any, ...]:
    """An op as the schema's ``op`` type: (kind, step, attempt, worker, status, output,
    error, key, purpose, at, function, event_id, run, name, parent)."""
    if isinstance(op, PutStep):
        return ("put_step", _step_value(op.step), *(None,) * 13)
    if isinstance(op, StartAttempt):
        return ("start_attempt", _step_value(op.step), op.attempt, op.worker, *(None,) * 11)
    if isinstance(op, FinishAttempt):
        return (
            "finish_attempt",
            _step_value(op.step),
            op.attempt,
            None,
            op.status,
            op.output,
            op.error,
            *(None,) * 8,
        )
    if isinstance(op, SetTimer):
        return ("set_timer", *(None,) * 6, op.key, op.purpose, op.wake_at, *(None,) * 5)
    if isinstance(op, ClearTimer):
        return ("clear_timer", *(None,) * 6, op.key, *(None,) * 7)
    if isinstance(op, EnqueueJob):
        return (
            "enqueue_job",
            *(None,) * 6,
            op.key,
            None,
            op.available_at,
            op.function,
            *(None,) * 4,
        )
    if isinstance(op, ConsumeEvent):
        return ("consume_event", *(None,) * 6, op.key, *(None,) * 3, op.event_id, *(None,) * 3)
    if isinstance(op, CreateChildRun):
        return ("create_child_run", *(None,) * 11, _new_run_value(op.run), None, None)
    if isinstance(op, SetState):
        # the value rides in the output column (both are jsonb)
        return ("set_state", *(None,) * 4, op.value, *(None,) * 7, op.name, None)
    if isinstance(op, SetValue):
        return ("set_value", *(None,) * 4, op.value, *(None,) * 7, op.key, None)
    if isinstance(op, GuardStep):
        return ("guard_step", None, None, None, op.status, None, None, op.key, *(None,) * 7)
    if isinstance(op, TakeDecision):
        purpose = "take" if op.event_id is not None else "refuse"
        return (
            "take_decision",
            None,
            None,
            None,
            op.outcome,
            None,
            op.reason,
            op.key,
            purpose,
            None,
            None,
            op.event_id,
            None,
            None,
            None,
        )
    if isinstance(op, EndRun):
        return (
            "end_run",
            None,
            None,
            None,
            op.status,
            op.output,
            op.error,
            *(None,) * 7,
            _step_end_value(op.parent),
        )
    if isinstance(op, CancelChildren):
        return ("cancel_children", *(None,) * 5, op.error, *(None,) * 7, _step_end_value(op.parent))
    raise TypeError(f"unknown store operation {op!r}")  # pragma: no cover


def _answered(exc: asyncpg.PostgresError) -> Exception:
    """What a refused commit means to its caller: the schema's own SQLSTATEs as plait's
    errors, anything else as it came."""
    if exc.sqlstate == _LEASE_LOST:
        return LeaseLostError(exc.args[0] if exc.args else str(exc))
    if exc.sqlstate == _GATE_CLOSED:
        return GateClosedError(exc.args[0] if exc.args else str(exc))
    return exc


def _run_row(rec: Any) -> RunRow:
    """A runs row (a composite record) as a RunRow: the columns every version had by
    position, the ones added later by name (migrations append columns in their order)."""
    values = tuple(rec)
    return RunRow(*values[:_RUN_BASE_FIELDS], *[rec[name] for name in _RUN_ADDED_FIELDS])


def _schedule_row(rec: Any) -> ScheduleRow:
    return ScheduleRow(
        rec["name"],
        rec["workflow"],
        rec["definition"],
        rec["status"],
        rec["source"],
        rec["owner"],
        rec["next_tick"],
        rec["last_tick"],
        rec["last_run_id"],
        rec["created_at"],
        rec["updated_at"],
        rec["last_run_status"],
    )


def _queue_arrays(queues: Sequence[QueueLimits]) -> tuple[list[Any], ...]:
    return (
        [q.name for q in queues],
        [q.concurrency for q in queues],
        [q.per_key for q in queues],
        [q.rate for q in queues],
        [q.window for q in queues],
    )


def _step_row(rec: Any) -> StepRow:
    return convert.step_row(tuple(rec)[:_STEP_FIELDS])


def _run(rec: Any) -> Run:
    return convert.run_record(_run_row(rec))


class _RunLock:
    """The writes of one run in this process, one at a time (see ``_in_order``). A plain
    class rather than a generator-based context manager: every commit passes through it."""

    __slots__ = ("_locks", "_run_id", "lock", "users")

    def __init__(self, locks: dict[str, _RunLock], run_id: str) -> None:
        self.lock = asyncio.Lock()
        self.users = 0
        self._locks = locks
        self._run_id = run_id

    def taken(self) -> bool:
        """Whether a write of the run holds or waits for its turn. Not ``lock.locked()``:
        a turn just given back is promised to the write that waited for it, which has not
        taken it yet, and a newcomer would wait behind it unlocked."""
        return self.users > 0

    async def __aenter__(self) -> None:
        self.users += 1
        try:
            await self.lock.acquire()
        except BaseException:
            self._leave()
            raise

    async def __aexit__(self, *_exc: object) -> None:
        self.lock.release()
        self._leave()

    def _leave(self) -> None:
        self.users -= 1
        if not self.users:
            del self._locks[self._run_id]


class PostgresStore:
    """A store in one PostgreSQL schema, shared by any number of processes.

    ``url`` is a ``postgresql://`` DSN; its query string may also carry ``schema``,
    ``min_size`` and ``max_size`` (so a ``plait worker`` configured only by
    ``PLAIT_DATABASE_URL`` can set them); keyword arguments win over the URL.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int | None = None,
        max_size: int | None = None,
        command_timeout: float | None = 60.0,
        connect_timeout: float = 10.0,
        statement_cache_size: int = 100,
        listen: bool = True,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.url = url
        self.clock = clock
        self.dsn, from_url = split_url(url)
        self.schema = schema if schema is not None else from_url.get("schema", "plait")
        if not _SCHEMA_NAME.match(self.schema):
            raise ValueError(
                f"invalid schema name {self.schema!r}: use letters, digits and _ "
                "(at most 57 characters, not starting with a digit)"
            )
        self.min_size = int(min_size if min_size is not None else from_url.get("min_size", 2))
        self.max_size = int(max_size if max_size is not None else from_url.get("max_size", 10))
        if self.min_size < 0 or self.max_size < max(1, self.min_size):
            raise ValueError(
                f"invalid pool size min_size={self.min_size} max_size={self.max_size}"
                " (need 0 <= min_size <= max_size, max_size >= 1)"
            )
        self.command_timeout = command_timeout
        self.connect_timeout = connect_timeout
        self.statement_cache_size = statement_cache_size
        self.listen = listen
        #: the NOTIFY channel of this schema
        self.channel = f"plait_{self.schema}"
        self._ident = f'"{self.schema}"'
        self._q = queries.load("postgres", schema=self._ident)
        self._where = describe(url)
        self._pool = Pool(
            self.dsn,
            where=self._where,
            min_size=self.min_size,
            max_size=self.max_size,
            command_timeout=command_timeout,
            connect_timeout=connect_timeout,
            statement_cache_size=statement_cache_size,
        )
        # Every statement goes through this. Bound once here rather than wrapped in a
        # method: a wrapper would add a coroutine to every statement.
        self._call = self._pool.call
        self._listener = Listener(
            self._pool,
            self.channel,
            notify=self._q["notify"],
            keepalive=self._q["keepalive"],
            enabled=listen,
        )
        #: (run_id, lease owner) of passes whose write failed with an unknown outcome
        self._tainted: set[tuple[str, str]] = set()
        #: per run, the writes of its lease holder in this process, in the order issued
        self._run_locks: dict[str, _RunLock] = {}
        #: the batches of concurrent passes, committed together
        self._group = GroupCommit(
            self._pool, self._q["commit_group"], self._commit_held, _op_value, self._read_clock
        )
        #: runs started at once, created together
        self._starts: Together[NewRun, tuple[Run, bool]] = Together(
            self._create_one, self._create_many
        )
        #: runs read at once (every caller waiting for a run reads it as it ends), read
        #: together: one round trip for many
        self._reads: Together[str, Run | None] = Together(self._get_one, self._get_many)
        #: what passes starting at once read, read together
        self._passes: Together[str, Any] = Together(self._load_one, self._load_many)

    @property
    def commits(self) -> int:
        """Write statements committed (each is one transaction), for the benchmarks."""
        return self._pool.commits

    # -- connections ---------------------------------------------------------------------
    def _read_clock(self) -> float:
        """The clock's time, for parts built once that must follow a clock set later."""
        return self._now()

    @property
    def clock(self) -> Clock:
        """Where every time this store writes or compares with a stored one comes from."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = clock
        self._now = clock.now

    async def open(self) -> None:
        """Create the pool and bring the schema up to date."""
        self._listener.open()
        try:
            await self._pool.open()
            await self._migrate()
            first_attempts = self._q["commit_first_attempts"]
            self._pool.warm(
                [self._q[name] for name in _WARM_STATEMENTS]
                + [first_attempts_statement(first_attempts, rows) for rows in (1, 2)]
            )
        except BaseException as exc:
            self._pool.terminate()
            if is_connection_error(exc):
                raise self._pool.unavailable(exc) from exc
            raise

    async def _migrate(self) -> None:
        """Apply the migrations this database lacks, one transaction, under an advisory
        lock so that processes starting together do not race. An up-to-date schema needs
        no DDL and no lock, so workers can run with plain read/write privileges."""
        q = self._q
        async with self._pool.acquire() as conn:
            if await self._schema_version(conn) == SCHEMA_VERSION:
                return
            async with conn.transaction():
                key = int.from_bytes(
                    hashlib.blake2b(f"plait:{self.schema}".encode(), digest_size=8).digest(),
                    "big",
                    signed=True,
                )
                await conn.execute(q["lock_schema"], key)
                if not await conn.fetchval(q["schema_exists"], self.schema):
                    await conn.execute(q["create_schema"])
                await conn.execute(q["create_schema_version_table"])
                current = await self._schema_version(conn)
                where = f"schema {self.schema!r} at {self._where}"
                channel = "'" + self.channel + "'"
                for migration in _MIGRATIONS.pending(current, where=where):
                    await conn.execute(migration.text(schema=self._ident, channel=channel))
                    await conn.execute(
                        q["record_schema_version"], migration.version, migration.description()
                    )
                    log.info("schema %s: migrated to version %d", self.schema, migration.version)

    async def _schema_version(self, conn: asyncpg.Connection) -> int:
        if await conn.fetchval(self._q["schema_version_table"]) is None:
            return 0
        return int(await conn.fetchval(self._q["schema_version"]))

    async def close(self) -> None:
        await self._starts.close()
        await self._reads.close()
        await self._passes.close()
        await self._group.close()
        await self._listener.close()
        await self._pool.close()

    # -- wake-ups ------------------------------------------------------------------------------
    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up right now (it reconnects by itself)."""
        return self._listener.listening

    async def attach_notifier(self, notifier: Notifier) -> None:
        """LISTEN on this schema's channel and feed what arrives into ``notifier``; what
        the engine publishes is NOTIFY'd to the other processes. Returns once listening
        (or after a few seconds if the server cannot be reached: it keeps trying)."""
        await self._listener.attach(notifier)

    # -- runs ----------------------------------------------------------------------------------
    async def create_run(self, new: NewRun) -> tuple[Run, bool]:
        return await self._starts(new)

    async def _create_one(self, new: NewRun) -> tuple[Run, bool]:
        row = await self._call("fetchrow", self._q["create_run"], _new_run_value(new), self._now())
        return _run(row["run"]), bool(row["created"])

    async def _create_many(self, news: list[NewRun]) -> list[tuple[Run, bool]]:
        rows = await self._call(
            "fetch", self._q["create_runs"], [_new_run_value(n) for n in news], self._now()
        )
        return [(_run(r["run"]), bool(r["created"])) for r in rows]

    async def get_run(self, run_id: str) -> Run | None:
        return await self._reads(run_id)

    async def _get_one(self, run_id: str) -> Run | None:
        rec = await self._call("fetchval", self._q["select_run"], run_id, read=True)
        return _run(rec) if rec is not None else None

    async def _get_many(self, run_ids: list[str]) -> list[Run | None]:
        rows = await self._call("fetch", self._q["select_runs"], run_ids, read=True)
        found = {run.id: run for run in (_run(r["r"]) for r in rows)}
        return [found.get(run_id) for run_id in run_ids]

    async def run_statuses(self, run_ids: Sequence[str]) -> dict[str, str]:
        rows = await self._call("fetch", self._q["run_statuses"], list(run_ids), read=True)
        return {row[0]: row[1] for row in rows}

    async def list_runs(self, where: RunFilter) -> tuple[list[Run], int]:
        row = await self._call("fetchrow", self._q["list_runs"], *_filter_args(where), read=True)
        return [_run(r) for r in row["runs"]], int(row["total"])

    async def list_run_summaries(self, where: RunFilter) -> tuple[list[RunSummary], int]:
        row = await self._call(
            "fetchrow", self._q["list_run_summaries"], *_filter_args(where), read=True
        )
        return [convert.run_summary(tuple(r)) for r in row["runs"]], int(row["total"])

    async def get_children(self, run_id: str) -> list[Run]:
        rows = await self._call("fetch", self._q["get_children"], run_id, _MAX_CHILDREN, read=True)
        return sorted((_run(r["r"]) for r in rows), key=lambda r: r.created_at)

    async def get_steps(self, run_id: str) -> list[Step]:
        rows = await self._call("fetch", self._q["get_steps"], run_id, read=True)
        return [convert.step_record(_step_row(r["s"])) for r in rows]

    async def get_history(self, run_id: str) -> list[StepAttempt]:
        rows = await self._call("fetch", self._q["get_history"], run_id, read=True)
        return [convert.attempt_record(tuple(r)) for r in rows]

    async def count_timers(self, run_id: str) -> int:
        """How many durable timers the run has (sleeps, retry back-offs, event timeouts)."""
        return int(await self._call("fetchval", self._q["count_timers"], run_id, read=True))

    # -- orchestrator passes ----------------------------------------------------------------
    async def load_pass(self, run_id: str) -> PassSnapshot | None:
        row = await self._passes(run_id)
        if row is None:
            return None
        # a new pass of this run starts: an earlier pass's failed write no longer matters
        if self._tainted:
            self._tainted = {t for t in self._tainted if t[0] != run_id}
        steps: dict[str, StepRow] = {}
        for rec in row["steps"]:
            step = _step_row(rec)
            steps[step.key] = step
        events = [EventRow(e["id"], e["name"], e["payload"]) for e in row["events"]]
        state = {s["name"]: s["value"] for s in row["state"]}
        return PassSnapshot(_run_row(row["r"]), steps, events, state)

    async def _load_one(self, run_id: str) -> Any:
        (row,) = await self._load_many([run_id])
        return row

    async def _load_many(self, run_ids: list[str]) -> list[Any]:
        rows = await self._call("fetch", self._q["load_passes"], run_ids, read=True)
        found = {row["id"]: row for row in rows}
        return [found.get(run_id) for run_id in run_ids]

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        now = self._now()
        got = await self._call(
            "fetchval", self._q["claim_run"], run_id, owner, now + lease_seconds, now
        )
        return got is not None

    async def claim_due_runs(self, owner: str, lease_seconds: float, limit: int) -> list[str]:
        now = self._now()
        rows = await self._call(
            "fetch", self._q["claim_due_runs"], owner, now + lease_seconds, now, limit
        )
        return [r["id"] for r in rows]

    async def commit(self, batch: Batch) -> bool:
        """All ops of the batch in one transaction, fenced by the run lease (if it has a
        fence). A caller cancelled while its write is on the way waits for the write's
        end, then the cancel goes on (see ``Outcome``).

        If a fenced write fails with an unknown outcome (the connection broke), the pass
        that sent it cannot know what the database holds, and a later write of the same
        pass (say, recording the run as failed because of that very error) could land
        once the server is back. So the store refuses further writes of that pass: it
        ends as a crashed pass and the run is replayed from what was really committed.
        """
        ops = batch.ops
        if not ops and batch.release_wakeups_seen is None:
            return False
        if batch.fence is None:
            # an action from outside a pass takes no lease and locks nothing first: it
            # goes alone, beside whatever group is in flight
            return await uncancelled(self._commit_unfenced(batch.run_id, ops))
        if self._in_order(batch.run_id).taken():
            # another write of this run goes first: this one must not be lost to a cancel
            # while it waits its turn, before it is handed in
            return await uncancelled(self._commit_fenced(batch, batch.fence, ops))
        # the run's turn is free, so taking it does not wait: from here the only wait is
        # the write's outcome, which a cancel cannot cut short
        return await self._commit_fenced(batch, batch.fence, ops)

    async def _commit_fenced(self, batch: Batch, fence: str, ops: list[Op]) -> bool:
        run_id = batch.run_id
        async with self._in_order(run_id):
            if (run_id, fence) in self._tainted:
                raise DatabaseUnavailableError(
                    f"an earlier write of this pass of run {run_id} failed; "
                    "the run will be replayed"
                )
            due = False
            failure: BaseException | None = None
            task = holding_task()
            if task is not None and self._group.idle():
                # nothing else on its way: the write goes from this task, which notes a
                # cancel meanwhile instead of cutting the write short
                with task.hold_cancel() as held:
                    try:
                        due = await self._group.now(run_id, fence, ops, batch.release_wakeups_seen)
                    except Exception as exc:
                        failure = self._fenced_failure(run_id, fence, exc)
                    except BaseException:  # the process is stopping: the outcome is unknown
                        self._tainted.add((run_id, fence))
                        raise
                cancelled = held.requested
            else:
                done = self._group.submit(run_id, fence, ops, batch.release_wakeups_seen)
                cancelled = False
                try:
                    await done
                except asyncio.CancelledError:
                    # raised once the write ended: this caller was cancelled meanwhile,
                    # unless the write itself was abandoned (the process is stopping)
                    cancelled = not done.cancelled()
                except BaseException:
                    pass  # the write's own failure, read from its outcome below
                try:
                    due = done.result()
                except BaseException as exc:
                    failure = self._fenced_failure(run_id, fence, exc)
            if cancelled:
                raise asyncio.CancelledError()
            if failure is not None:
                raise failure
            return due

    def _fenced_failure(self, run_id: str, fence: str, exc: BaseException) -> BaseException:
        """What a fenced write that failed with ``exc`` raises to its pass."""
        if isinstance(exc, asyncpg.PostgresError):
            # the server answered: the transaction was rolled back, nothing is unknown
            return _answered(exc)
        if not isinstance(exc, LeaseLostError | RunEndedElsewhereError):
            # no answer (connection lost, timeout, abandoned in flight): unknown outcome
            self._tainted.add((run_id, fence))
        return exc

    async def _commit_unfenced(self, run_id: str, ops: list[Op]) -> bool:
        async with self._in_order(run_id):
            try:
                return await self._commit_alone(run_id, None, ops, None)
            except asyncpg.PostgresError as exc:
                raise _answered(exc) from None

    async def _commit_alone(
        self,
        run_id: str,
        fence: str | None,
        ops: list[Op],
        release_wakeups_seen: int | None,
        call: Callable[..., Awaitable[Any]] | None = None,
    ) -> bool:
        """One batch in its own transaction (a group of one, or a group's fallback)."""
        call = call or self._call
        if release_wakeups_seen is None:
            rows = None if fence is None else _first_attempt_rows(run_id, ops, self._now())
            if rows is not None:
                # the path of every sequential step: fenced and written, no loop over ops
                query = first_attempts_statement(self._q["commit_first_attempts"], len(ops))
                ended = await call("fetchval", query, run_id, fence, *rows)
                answer = "lost" if ended is None else "ended" if ended else "done"
            elif fence is not None and steps_only(run_id, ops):
                values = [_op_value(op) for op in ops]
                answer = await call(
                    "fetchval", self._q["commit_steps"], run_id, fence, values, self._now()
                )
            else:
                values = [_op_value(op) for op in ops]
                answer = await call(
                    "fetchval", self._q["commit_batch"], run_id, fence, values, self._now()
                )
            if answer == "lost":
                raise LeaseLostError(f"lost the lease on run {run_id}")
            if answer == "ended" and (error := ended_elsewhere(run_id, ops)) is not None:
                raise error
            return False
        values = [_op_value(op) for op in ops]
        return bool(
            await call(
                "fetchval",
                self._q["commit_and_release"],
                run_id,
                fence,
                values,
                self._now(),
                release_wakeups_seen,
            )
        )

    async def _commit_held(
        self, run_id: str, fence: str | None, ops: list[Op], release_wakeups_seen: int | None
    ) -> bool:
        """``_commit_alone`` on the group commit's own connection (it has one send in
        flight at a time)."""
        return await self._commit_alone(
            run_id, fence, ops, release_wakeups_seen, self._pool.call_held
        )

    async def release_run(self, run_id: str, owner: str, wakeups_seen: int) -> bool:
        async with self._in_order(run_id):
            due = await self._call(
                "fetchval", self._q["release_run"], run_id, owner, wakeups_seen, self._now()
            )
        return bool(due)

    def _in_order(self, run_id: str) -> _RunLock:
        """Apply this process's writes to one run in the order they were issued, as the
        SQLite store's single writer does. Pool connections would otherwise let a later
        write overtake one still in flight: a pass's release of its lease could land before
        its last flush (which would then find the lease gone), and a cancel could return
        before the cancelled step's record lands."""
        entry = self._run_locks.get(run_id)
        if entry is None:
            entry = self._run_locks[run_id] = _RunLock(self._run_locks, run_id)
        return entry

    async def renew_leases(
        self,
        owner: str,
        lease_seconds: float,
        holding: Sequence[str],
        stepping: Sequence[str] = (),
    ) -> set[str]:
        until = self._now() + lease_seconds
        rows = await self._call(
            "fetch", self._q["renew_leases"], owner, until, list(stepping), list(holding)
        )
        return {r["id"] for r in rows}

    def lease_keeper(self) -> LeaseKeeper | None:
        return _LeaseKeeper(
            self.dsn, self._q["renew_leases"], self._pool.connect_timeout, self.clock
        )

    async def leases_of(self, worker_id: str, owner: str) -> list[Lease]:
        """Leases held under ``worker_id`` by other processes than ``owner`` (an earlier
        life of a restarted worker, or a twin still draining)."""
        rows = await self._call("fetch", self._q["leases_of"], f"{worker_id}#", owner, read=True)
        return [Lease(*r) for r in rows]

    async def expire_leases(self, leases: Sequence[Lease]) -> int:
        """Expire the given leases if nobody renewed them since they were read: their
        holder is dead, so its runs and steps are taken over now instead of at expiry."""
        if not leases:
            return 0
        given = list(leases)
        expired = await self._call(
            "fetchval",
            self._q["expire_leases"],
            [lease.kind for lease in given],
            [lease.run_id for lease in given],
            [lease.step_key for lease in given],
            [lease.owner for lease in given],
            [lease.until for lease in given],
            0.0,
        )
        return int(expired)

    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int:
        """Re-drive runs that are ``running`` with nothing that will ever wake them (a
        safety net: state changes and their wake-ups are committed together); each run's
        sweeps back off from ``base`` seconds doubling up to ``cap``."""
        swept = int(
            await self._call("fetchval", self._q["sweep_idle"], self._now(), cap, base, limit)
        )
        if swept:
            self._listener.publish("work", "")
        return swept

    async def next_due(self, functions: Sequence[str] | None = None) -> float | None:
        """When the next run pass (``functions`` None) or job for ``functions`` is due,
        counting a leased one as due when its lease runs out."""
        if functions is None:
            due = await self._call("fetchval", self._q["next_due_runs"], read=True)
        else:
            due = await self._call("fetchval", self._q["next_due_jobs"], list(functions), read=True)
        return float(due) if due is not None else None

    async def job_depths(self) -> dict[str, int]:
        rows = await self._call("fetch", self._q["job_depths"], self._now(), read=True)
        return {r[0]: int(r[1]) for r in rows}

    async def pending(self, functions: Sequence[str]) -> Pending:
        row = await self._call("fetchrow", self._q["pending_work"], list(functions), read=True)
        due, start, tick = row[1], row[2], row[3]
        return Pending(
            int(row[0]),
            float(due) if due is not None else None,
            float(start) if start is not None else None,
            float(tick) if tick is not None else None,
        )

    # -- queued steps ----------------------------------------------------------------------------
    async def claim_step_jobs(
        self, owner: str, lease_seconds: float, limit: int, functions: Sequence[str]
    ) -> list[StepJob]:
        if not functions:
            return []
        now = self._now()
        rows = await self._call(
            "fetch",
            self._q["claim_step_jobs"],
            owner,
            now + lease_seconds,
            now,
            limit,
            list(functions),
        )
        return [self._step_job(r) for r in rows]

    async def begin_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        values = [_op_value(op) for op in ops]
        began = await self._call(
            "fetchval",
            self._q["begin_queued_step"],
            job.run_id,
            job.step_key,
            owner,
            values,
            self._now(),
        )
        return bool(began)

    async def finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        return await uncancelled(self._finish_queued_step(job, owner, ops))

    async def _finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        values = [_op_value(op) for op in ops]
        async with self._in_order(job.run_id):
            done = await self._call(
                "fetchval",
                self._q["finish_queued_step"],
                job.run_id,
                job.step_key,
                owner,
                values,
                self._now(),
            )
        return bool(done)

    async def repair_job(self, job: StepJob, owner: str, function: str) -> None:
        await self._call(
            "execute", self._q["repair_job"], job.run_id, job.step_key, function, owner
        )

    async def drop_job(self, job: StepJob, owner: str) -> None:
        await self._call("execute", self._q["drop_job"], job.run_id, job.step_key, owner)

    # -- actions from outside a pass -------------------------------------------------------------
    async def wake(self, run_id: str, at: float | None = None) -> None:
        now = self._now()
        async with self._in_order(run_id):
            await self._call("execute", self._q["wake"], run_id, now, now if at is None else at)

    async def _action(self, action: str, run_id: str, method: str, query: str, *args: Any) -> Any:
        try:
            async with self._in_order(run_id):
                return await self._call(method, query, run_id, *args)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == _RUN_NOT_FOUND:
                raise RunNotFoundError(run_id) from None
            if exc.sqlstate == _RUN_STATE:
                raise RunStateError(run_id, exc.detail or "unknown", action) from None
            raise

    async def cancel_run(self, run_id: str, error: str, parent: StepEnd) -> list[str]:
        moved = await self._action(
            "cancel",
            run_id,
            "fetchval",
            self._q["cancel_run"],
            error,
            _step_end_value(parent),
            self._now(),
        )
        return list(moved or [])

    async def reopen_run(
        self, run_id: str, from_status: str, wakeups_seen: int, ops: Sequence[Op]
    ) -> Run | None:
        rec = await self._action(
            _REOPEN_ACTIONS.get(from_status, "reopen"),
            run_id,
            "fetchval",
            self._q["reopen_run"],
            from_status,
            wakeups_seen,
            [_op_value(op) for op in ops],
            self._now(),
        )
        return None if rec is None else _run(rec)

    async def send_event(self, run_id: str, name: str, payload: str | None) -> bool:
        sent: bool = await self._action(
            f"send event {name!r} to",
            run_id,
            "fetchval",
            self._q["send_event"],
            name,
            payload,
            self._now(),
        )
        return sent

    # -- queues ----------------------------------------------------------------------------------
    async def admit_runs(
        self, owner: str, lease_seconds: float, limit: int, queues: Sequence[QueueLimits]
    ) -> list[str]:
        now = self._now()
        rows = await self._call(
            "fetch",
            self._q["admit_runs"],
            owner,
            now + lease_seconds,
            now,
            limit,
            *_queue_arrays(queues),
        )
        return [r[0] for r in rows]

    async def next_queued(self) -> float | None:
        due = await self._call("fetchval", self._q["next_queued"], read=True)
        return float(due) if due is not None else None

    async def claim_queue_jobs(
        self, owner: str, lease_seconds: float, limit: int, queues: Sequence[QueueLimits]
    ) -> list[StepJob]:
        names, concurrency, _per_key, rate, window = _queue_arrays(queues)
        functions = [fn for q in queues for fn in q.functions]
        function_queues = [q.name for q in queues for _fn in q.functions]
        now = self._now()
        rows = await self._call(
            "fetch",
            self._q["claim_queue_jobs"],
            owner,
            now + lease_seconds,
            now,
            limit,
            names,
            concurrency,
            rate,
            window,
            functions,
            function_queues,
        )
        return [self._step_job(r) for r in rows]

    @staticmethod
    def _step_job(r: Any) -> StepJob:
        return StepJob(
            r["run_id"],
            r["step_key"],
            r["function"],
            r["deliveries"],
            None if r["s"] is None else _step_row(r["s"]),
            r["workflow"] or "",
            r["trace"],
        )

    async def queue_depths(self) -> list[QueueDepth]:
        rows = await self._call("fetch", self._q["queue_depths"], read=True)
        return [QueueDepth(r[0], int(r[1]), int(r[2])) for r in rows]

    # -- schedules ---------------------------------------------------------------------------------
    async def put_schedule(self, row: ScheduleRow) -> bool:
        changed = await self._call(
            "fetchval",
            self._q["put_schedule"],
            row.name,
            row.workflow,
            row.definition,
            row.status,
            row.source,
            row.owner,
            row.next_tick,
            self._now(),
        )
        return changed is not None

    async def get_schedules(self, name: str | None = None) -> list[ScheduleRow]:
        rows = await self._call("fetch", self._q["get_schedules"], name, read=True)
        return [_schedule_row(r) for r in rows]

    async def due_schedules(self, now: float, limit: int) -> list[ScheduleRow]:
        rows = await self._call("fetch", self._q["due_schedules"], now, limit, read=True)
        return [_schedule_row(r) for r in rows]

    async def next_schedule_tick(self) -> float | None:
        due = await self._call("fetchval", self._q["next_schedule_tick"], read=True)
        return float(due) if due is not None else None

    async def fire_schedule(
        self,
        name: str,
        expected: float | None,
        next_tick: float | None,
        runs: Sequence[NewRun],
        skip_if_live: bool,
    ) -> list[str] | None:
        started = await self._call(
            "fetchval",
            self._q["fire_schedule"],
            name,
            expected,
            next_tick,
            [_new_run_value(n) for n in runs],
            skip_if_live,
            self._now(),
        )
        if started is None:
            return None
        if started:
            self._listener.publish("work", "")
        return list(started)

    async def set_schedule_status(
        self, name: str, status: str, next_tick: float | None
    ) -> ScheduleRow | None:
        rec = await self._call(
            "fetchrow", self._q["set_schedule_status"], name, status, next_tick, self._now()
        )
        return None if rec is None else _schedule_row(rec)

    async def delete_schedule(self, name: str) -> bool:
        return await self._call("fetchval", self._q["delete_schedule"], name) is not None

    # -- approvals, values, forks, retention -----------------------------------------------------
    async def submit_decision(self, run_id: str, decision: DecisionRow, ops: Sequence[Op]) -> str:
        result = await self._action(
            "send a decision to",
            run_id,
            "fetchval",
            self._q["submit_decision"],
            decision.name,
            decision.payload,
            decision.decided_by,
            decision.outcome,
            decision.reason,
            decision.key,
            [_op_value(op) for op in ops],
            decision.if_closed,
            decision.if_expired,
            decision.decided_at,
        )
        return str(result)

    async def get_decisions(self, run_id: str) -> list[dict[str, Any]]:
        rows = await self._call("fetch", self._q["get_decisions"], run_id, read=True)
        return [dict(r) for r in rows]

    async def list_gates(self, status: str | None, limit: int) -> list[GateRow]:
        rows = await self._call("fetch", self._q["list_gates"], status, limit, read=True)
        return [
            GateRow(_step_row(r["s"]), r["workflow"], r["owner"], r["run_status"]) for r in rows
        ]

    async def get_values(self, run_id: str) -> dict[str, str | None]:
        rows = await self._call("fetch", self._q["get_values"], run_id, read=True)
        return {r["key"]: r["value"] for r in rows}

    async def fork_run(self, new: NewRun, forked_from: str, ops: Sequence[Op]) -> Run:
        try:
            rec = await self._call(
                "fetchval",
                self._q["fork_run"],
                _new_run_value(new),
                forked_from,
                [_op_value(op) for op in ops],
                self._now(),
            )
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == _RUN_EXISTS:
                existing = await self.get_run(new.id)
                raise RunIdTakenError(
                    new.id, existing.workflow if existing else "?", new.workflow
                ) from None
            raise
        return _run(rec)

    async def prune_batch(
        self,
        statuses: Sequence[str],
        cutoff: float,
        after: tuple[float, str] | None,
        limit: int,
    ) -> PruneBatch:
        row = await self._call(
            "fetchrow",
            self._q["prune_runs"],
            list(statuses),
            cutoff,
            after[0] if after else None,
            after[1] if after else None,
            limit,
        )
        cursor = None if row["last_id"] is None else (float(row["last_at"]), row["last_id"])
        return PruneBatch(int(row["deleted"] or 0), cursor)

    # -- versions --------------------------------------------------------------------------------
    async def put_version(
        self,
        workflow: str,
        version: str,
        kind: str,
        definition: str | None,
        status: str,
        registered_by: str | None = None,
    ) -> None:
        await self._call(
            "execute",
            self._q["put_version"],
            workflow,
            version,
            kind,
            definition,
            status,
            self._now(),
            registered_by,
        )

    async def claim_graph(self, workflow: str, owner: str | None) -> str | None:
        # two statements, each committed: the second one's fresh snapshot sees a claim
        # that a racing process committed while the first one waited for it
        await self._call("execute", self._q["claim_graph"], workflow, owner, self._now())
        holder: str | None = await self._call(
            "fetchval", self._q["graph_owner"], workflow, read=True
        )
        return holder

    async def get_version(self, workflow: str, version: str) -> Version | None:
        rows = await self._versions(workflow, version, None)
        return rows[0] if rows else None

    async def list_versions(
        self, workflow: str | None = None, status: str | None = None
    ) -> list[Version]:
        return await self._versions(workflow, None, status)

    async def _versions(
        self, workflow: str | None, version: str | None, status: str | None
    ) -> list[Version]:
        rows = await self._call(
            "fetch", self._q["list_versions"], workflow, version, status, read=True
        )
        return [convert.version_record(tuple(r)) for r in rows]


class _LeaseKeeper:
    """Lease renewal on a connection and an event loop of its own, for a thread beside
    a blocked loop (asyncpg connections belong to the loop that opened them)."""

    def __init__(self, dsn: str, statement: str, connect_timeout: float, clock: Clock) -> None:
        self._dsn, self._statement, self._timeout = dsn, statement, connect_timeout
        self._now = clock.now
        self._loop = asyncio.new_event_loop()
        self._conn: asyncpg.Connection | None = None

    def renew(self, owner: str, lease_seconds: float, holding: Sequence[str]) -> None:
        self._loop.run_until_complete(self._renew(owner, lease_seconds, holding))

    async def _renew(self, owner: str, lease_seconds: float, holding: Sequence[str]) -> None:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(self._dsn, timeout=self._timeout)
            await set_codecs(self._conn)
        until = self._now() + lease_seconds
        await self._conn.execute(self._statement, owner, until, [], list(holding))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._conn.close(timeout=2))
        self._loop.close()


__all__ = ["SCHEMA_VERSION", "DatabaseUnavailableError", "PostgresStore"]
