"""The embedded store: one SQLite file in WAL mode.

Each method is one function run in a transaction of the file's connections
(``writer.Connections``: one write connection with group commit, and readers); the row
changes several methods share are in ``apply``, and the statements themselves are named
queries in ``sql/sqlite/queries.sql``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
from collections.abc import Sequence
from typing import Any

from plait.clock import SYSTEM_CLOCK, Clock, micros
from plait.errors import LeaseLostError, RunIdTakenError
from plait.notify import Notifier
from plait.records import TERMINAL, Run, RunSummary, Step, StepAttempt
from plait.store import convert, redact
from plait.store.contract import LeaseKeeper
from plait.store.migrations import migrations
from plait.store.ops import Batch, EndRun, Op, StepEnd, ended_elsewhere
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
    ScheduleRow,
    StepJob,
    Version,
)
from plait.store.sqlite import apply
from plait.store.sqlite.writer import SQL, Connections, while_locked

log = logging.getLogger("plait.store.sqlite")

#: the most children get_children returns (the newest ones)
MAX_CHILDREN = 10_000
_MIGRATIONS = migrations("sqlite")
#: the schema version this code writes (a version-1 file is migrated when opened)
SCHEMA_VERSION = _MIGRATIONS.latest

_SELECT_RUN = SQL["select_run"]
#: each filter's condition (a field of RunFilter: a condition on its named parameter)
_RUN_FILTERS = dict(line.split(": ", 1) for line in SQL["run_filters"].splitlines() if ": " in line)
_LISTING = {
    "count_runs": SQL["count_runs"],
    "list_runs": SQL["list_runs"],
    "list_run_summaries": SQL["list_run_summaries"],
}
#: listing statements by name and the filters they hold, made once per combination
_LISTINGS: dict[tuple[str, tuple[str, ...]], str] = {}


def listing(name: str, where: RunFilter) -> tuple[str, dict[str, Any]]:
    """A listing statement (``count_runs``, ``list_runs``, ``list_run_summaries``) holding
    the conditions of the filters ``where`` gives, and its parameters."""
    params = dict(vars(where))
    for bound in ("created_after", "created_before"):
        if params[bound] is not None:
            params[bound] = _microsecond_edge(params[bound])
    given = tuple(f for f in _RUN_FILTERS if params[f] not in (None, False))
    sql = _LISTINGS.get((name, given))
    if sql is None:
        conditions = "".join(f"{_RUN_FILTERS[f]} AND " for f in given)
        sql = _LISTINGS[(name, given)] = _LISTING[name].replace("/*filters*/ ", conditions)
    return sql, params


def _microsecond_edge(when: float) -> float:
    """The stored time at which ``when``'s microsecond begins.

    SQLite keeps a time as the clock's float, a run shows it as a datetime rounded to the
    microsecond (PostgreSQL keeps only microseconds). A bound taken from a run's own
    ``created_at`` must hold that run on the side the user meant, so the store compares
    as PostgreSQL does: at microsecond precision, times that round alike are equal.
    """
    return (micros(when) - 0.5) / 1_000_000


#: a held decision waits in a run that has not ended; any other is kept for every run
_LIVE = ("queued", "running", "suspended")
_ANY_STATUS = (*_LIVE, "completed", "failed", "cancelled")
_DECISION_FIELDS = (
    "id",
    "name",
    "payload",
    "decided_by",
    "decided_at",
    "outcome",
    "reason",
    "judged_at",
    "key",
)
#: what a pruned run leaves in each table, the run row itself last
_PRUNED = (
    SQL["prune_attempts"],
    SQL["prune_steps"],
    SQL["prune_events"],
    SQL["prune_timers"],
    SQL["prune_jobs"],
    SQL["prune_state"],
    SQL["prune_values"],
    SQL["prune_runs"],
)
_RUN_LEASE_OWNER = SQL["run_lease_owner"]
_JOB_HELD = SQL["job_held"]
_CLAIMED_STEP = SQL["claimed_step"]


class SQLiteStore:
    """A store in one SQLite file (or in memory, for tests)."""

    def __init__(
        self,
        url: str,
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.url = url
        self.clock = clock
        self.path = _path_from_url(url)
        self.memory = self.path == ":memory:"
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._db = Connections(url, self.path, synchronous=synchronous, busy_timeout=busy_timeout)
        # The methods below run their functions through these. Bound once here rather
        # than wrapped in methods: a wrapper would add a coroutine to every statement.
        self._write = self._db.write
        self._read = self._db.read
        self._read_here = self._db.read_here

    @property
    def clock(self) -> Clock:
        """Where every time this store writes or compares with a stored one comes from."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = clock
        self._now = clock.now

    @property
    def commits(self) -> int:
        """Transactions committed, for the benchmark's "durable writes per step"."""
        return self._db.commits

    async def open(self) -> None:
        if not self.memory:
            _check_folder(self.path)
        await self._db.open(self._prepare)

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """The first thing the write connection does: WAL, so readers never wait for the
        writer, and the schema brought up to date.

        Processes that open a new file together race for it: one of them may be told the
        file is locked at once, without SQLite's busy handler (a switch of journal mode
        needs the file to itself). Both steps are safe to repeat, so the open tries again
        until the busy timeout rather than failing a worker that started beside another.
        """
        while_locked(
            lambda: self._prepare_once(conn),
            self.busy_timeout,
            first=0.005,
            most=0.2,
            retrying=lambda: log.info(
                "%s is locked by another process opening it; trying again", self.path
            ),
        )

    def _prepare_once(self, conn: sqlite3.Connection) -> None:
        if not self.memory:
            mode = conn.execute(SQL["journal_mode_wal"]).fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"could not switch {self.path} to WAL (got {mode})")
        self._migrate(conn)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Run the scripts this file lacks in one transaction under the file's write lock,
        so processes that open a file together migrate it once."""
        conn.execute(SQL["begin_immediate"])
        try:
            conn.execute(SQL["create_schema_table"])
            row = conn.execute(SQL["schema_version"]).fetchone()
            pending = _MIGRATIONS.pending(row[0] if row else 0, where=f"database {self.path}")
            for migration in pending:
                for statement in _statements(migration.text()):
                    conn.execute(statement)
            if pending:
                conn.execute(SQL["set_schema_version"], (pending[-1].version,))
            conn.execute(SQL["commit"])
        except BaseException:
            conn.execute(SQL["rollback"])
            raise

    async def attach_notifier(self, notifier: Notifier, interval: float = 0.05) -> None:
        """Wake this process when another process commits to the same file.

        SQLite has no LISTEN/NOTIFY; the writer watches the file's data version instead
        (see ``Connections.watch``), every ``interval`` seconds while idle.
        """
        if self.memory:
            return
        loop = asyncio.get_running_loop()
        self._db.watch(lambda: loop.call_soon_threadsafe(notifier.everything_changed), interval)

    async def close(self) -> None:
        await self._db.close()

    # -- runs --------------------------------------------------------------------------------
    async def create_run(self, new: NewRun) -> tuple[Run, bool]:
        def go(conn: sqlite3.Connection) -> tuple[Run, bool]:
            created = apply.insert_run(conn, new, self._now())
            row = conn.execute(_SELECT_RUN, (new.id,)).fetchone()
            if row is None:
                # the de-duplication key belongs to a live run: that run is the answer
                live = conn.execute(SQL["live_dedup_run"], (new.dedup,)).fetchone()
                row = conn.execute(_SELECT_RUN, (live[0],)).fetchone()
            return convert.run_record(convert.run_row(row)), created

        return await self._write(go)

    async def get_run(self, run_id: str) -> Run | None:
        def go(conn: sqlite3.Connection) -> Run | None:
            row = conn.execute(_SELECT_RUN, (run_id,)).fetchone()
            return convert.run_record(convert.run_row(row)) if row else None

        return await self._read_here(go)

    async def run_statuses(self, run_ids: Sequence[str]) -> dict[str, str]:
        ids = json.dumps(list(run_ids))

        def go(conn: sqlite3.Connection) -> dict[str, str]:
            return dict(conn.execute(SQL["run_statuses"], (ids,)).fetchall())

        return await self._read_here(go)

    async def list_runs(self, where: RunFilter) -> tuple[list[Run], int]:
        def go(conn: sqlite3.Connection) -> tuple[list[Run], int]:
            total = conn.execute(*listing("count_runs", where)).fetchone()[0]
            rows = conn.execute(*listing("list_runs", where)).fetchall()
            return [convert.run_record(convert.run_row(r)) for r in rows], total

        return await self._read(go)

    async def list_run_summaries(self, where: RunFilter) -> tuple[list[RunSummary], int]:
        def go(conn: sqlite3.Connection) -> tuple[list[RunSummary], int]:
            total = conn.execute(*listing("count_runs", where)).fetchone()[0]
            rows = conn.execute(*listing("list_run_summaries", where)).fetchall()
            return [convert.run_summary(r) for r in rows], total

        return await self._read(go)

    async def get_children(self, run_id: str) -> list[Run]:
        def go(conn: sqlite3.Connection) -> list[Run]:
            rows = conn.execute(SQL["get_children"], (run_id, MAX_CHILDREN)).fetchall()
            return [convert.run_record(convert.run_row(r)) for r in rows]

        return sorted(await self._read(go), key=lambda r: r.created_at)

    async def get_steps(self, run_id: str) -> list[Step]:
        def go(conn: sqlite3.Connection) -> list[Step]:
            rows = conn.execute(SQL["get_steps"], (run_id,)).fetchall()
            return [convert.step_record(convert.step_row(r)) for r in rows]

        return await self._read(go)

    async def get_history(self, run_id: str) -> list[StepAttempt]:
        def go(conn: sqlite3.Connection) -> list[StepAttempt]:
            rows = conn.execute(SQL["get_history"], (run_id, run_id)).fetchall()
            return [convert.attempt_record(r) for r in rows]

        return await self._read(go)

    # -- orchestrator passes ------------------------------------------------------------------
    async def load_pass(self, run_id: str) -> PassSnapshot | None:
        def go(conn: sqlite3.Connection) -> PassSnapshot | None:
            row = conn.execute(_SELECT_RUN, (run_id,)).fetchone()
            if row is None:
                return None
            steps = {r[1]: convert.step_row(r) for r in conn.execute(SQL["pass_steps"], (run_id,))}
            events = [EventRow(*r) for r in conn.execute(SQL["pass_events"], (run_id,))]
            state = dict(conn.execute(SQL["pass_state"], (run_id,)))
            return PassSnapshot(convert.run_row(row), steps, events, state)

        return await self._read_here(go)

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            now = self._now()
            cur = conn.execute(SQL["claim_run"], (owner, now + lease_seconds, run_id, now))
            return cur.rowcount == 1

        return await self._write(go)

    async def claim_due_runs(self, owner: str, lease_seconds: float, limit: int) -> list[str]:
        def go(conn: sqlite3.Connection) -> list[str]:
            now = self._now()
            rows = conn.execute(
                SQL["claim_due_runs"], (owner, now + lease_seconds, now, now, limit)
            ).fetchall()
            return [r[0] for r in rows]

        return await self._write(go)

    async def commit(self, batch: Batch) -> bool:
        def go(conn: sqlite3.Connection) -> bool | None:
            """True or False: due again at once; None: the run had ended, and only its
            step records were written."""
            ended = False
            ops = batch.ops
            if batch.fence is not None:
                row = conn.execute(_RUN_LEASE_OWNER, (batch.run_id,)).fetchone()
                if row is None or row[0] != batch.fence:
                    raise LeaseLostError(f"lost the lease on run {batch.run_id}")
                if row[1] in TERMINAL:
                    ops, ended = apply.records_only(batch.ops), True
            now = self._now()
            apply.apply_ops(conn, batch.run_id, ops, now)
            if batch.release_wakeups_seen is None or batch.fence is None:
                return None if ended else False
            return apply.release(conn, batch.run_id, batch.fence, batch.release_wakeups_seen, now)

        due = await self._write(go)
        if due is None:
            error = ended_elsewhere(batch.run_id, batch.ops)
            if error is not None:
                raise error
            return False
        return due

    async def release_run(self, run_id: str, owner: str, wakeups_seen: int) -> bool:
        return await self._write(
            lambda conn: apply.release(conn, run_id, owner, wakeups_seen, self._now())
        )

    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int:
        """Re-drive runs that are ``running`` with nothing that will ever wake them (no
        lease, no timer, no job). A state change and the wake-up it needs are written in
        one transaction, so this is a safety net; each run's sweeps back off (30 s
        doubling to 10 min) so a wedged run can never flood the queue."""

        def go(conn: sqlite3.Connection) -> int:
            now = self._now()
            rows = conn.execute(SQL["sweep_idle"], (now, now, cap, base, limit)).fetchall()
            if rows:
                conn.execute(SQL["touch_runs"], (now, json.dumps([r[0] for r in rows])))
            return len(rows)

        return await self._write(go)

    async def leases_of(self, worker_id: str, owner: str) -> list[Lease]:
        """Leases held under ``worker_id`` by other processes than ``owner`` (an earlier
        life of a restarted worker, or a twin still draining)."""
        prefix = f"{worker_id}#"

        def go(conn: sqlite3.Connection) -> list[Lease]:
            rows = conn.execute(
                SQL["leases_of"], (len(prefix), prefix, owner, len(prefix), prefix, owner)
            ).fetchall()
            return [Lease(*r) for r in rows]

        return await self._read(go)

    async def expire_leases(self, leases: Sequence[Lease]) -> int:
        """Expire the given leases if nobody renewed them since they were read: their
        holder is dead, so its runs and steps are taken over now instead of at expiry."""
        given = list(leases)

        def go(conn: sqlite3.Connection) -> int:
            done = 0
            for lease in given:
                if lease.kind == "run":
                    cur = conn.execute(
                        SQL["expire_run_lease"], (lease.run_id, lease.owner, lease.until)
                    )
                else:
                    cur = conn.execute(
                        SQL["expire_job_lease"],
                        (lease.run_id, lease.step_key, lease.owner, lease.until),
                    )
                done += cur.rowcount
            return done

        return await self._write(go)

    async def renew_leases(
        self,
        owner: str,
        lease_seconds: float,
        holding: Sequence[str],
        stepping: Sequence[str] = (),
    ) -> set[str]:
        def go(conn: sqlite3.Connection) -> set[str]:
            held = json.dumps(list(holding))
            apply.renew_leases(conn, owner, self._now() + lease_seconds, held)
            ids = json.dumps(list(stepping))
            rows = conn.execute(SQL["ended_leased_runs"], (owner, held, ids)).fetchall()
            return {r[0] for r in rows}

        return await self._write(go)

    def lease_keeper(self) -> LeaseKeeper | None:
        if self.memory:
            return None
        return _LeaseKeeper(self.path, self.busy_timeout, self.clock)

    async def next_due(self, functions: Sequence[str] | None = None) -> float | None:
        """When the next run pass (``functions`` None) or job for ``functions`` is due,
        counting a leased one as due when its lease runs out."""
        params: tuple[str, ...]
        if functions is None:
            sql, params = SQL["next_due_runs"], ()
        else:
            sql, params = SQL["next_due_jobs"], (json.dumps(list(functions)),)

        def go(conn: sqlite3.Connection) -> float | None:
            row = conn.execute(sql, params).fetchone()
            return row[0] if row else None

        return await self._read_here(go)

    async def job_depths(self) -> dict[str, int]:
        params = {"now": self._now()}

        def go(conn: sqlite3.Connection) -> dict[str, int]:
            return {f: int(n) for f, n in conn.execute(SQL["job_depths"], params)}

        return await self._read(go)

    async def pending(self, functions: Sequence[str]) -> Pending:
        params = (json.dumps(list(functions)),)

        def go(conn: sqlite3.Connection) -> Pending:
            row = conn.execute(SQL["pending_work"], params).fetchone()
            leases, runs_due, jobs_due, next_start, next_tick = row
            due = [t for t in (runs_due, jobs_due) if t is not None]
            return Pending(int(leases), min(due) if due else None, next_start, next_tick)

        return await self._read_here(go)

    # -- queued steps -----------------------------------------------------------------------
    async def claim_step_jobs(
        self, owner: str, lease_seconds: float, limit: int, functions: Sequence[str]
    ) -> list[StepJob]:
        names = json.dumps(list(functions))

        def go(conn: sqlite3.Connection) -> list[StepJob]:
            now = self._now()
            rows = conn.execute(
                SQL["claim_step_jobs"], (owner, now + lease_seconds, now, now, names, limit)
            ).fetchall()
            return [self._claimed(conn, *row) for row in rows]

        return await self._write(go)

    @staticmethod
    def _claimed(
        conn: sqlite3.Connection, run_id: str, key: str, function: str, deliveries: int
    ) -> StepJob:
        """A claimed job with its step's row and its run's workflow and trace, read in the
        claim's transaction."""
        found = conn.execute(_CLAIMED_STEP, (run_id, key)).fetchone()
        step = convert.step_row(found[:-2]) if found else None
        workflow, trace = (found[-2], found[-1]) if found else ("", None)
        return StepJob(run_id, key, function, deliveries, step, workflow, trace)

    async def begin_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            held = conn.execute(_JOB_HELD, (job.run_id, job.step_key, owner)).fetchone()
            if held is None:
                return False
            status = conn.execute(SQL["run_status"], (job.run_id,)).fetchone()
            if status is not None and status[0] == "suspended":
                # keep the job for when the run is resumed; claims skip suspended runs
                conn.execute(SQL["unlease_job"], (job.run_id, job.step_key))
                return False
            if status is None or status[0] != "running":
                apply.delete_job(conn, job.run_id, job.step_key)
                return False
            apply.apply_ops(conn, job.run_id, ops, self._now())
            return True

        return await self._write(go)

    async def finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            now = self._now()
            held = conn.execute(_JOB_HELD, (job.run_id, job.step_key, owner)).fetchone()
            if held is None:
                return False
            apply.delete_job(conn, job.run_id, job.step_key)
            apply.apply_ops(conn, job.run_id, ops, now)
            apply.wake(conn, job.run_id, now, now)
            return True

        return await self._write(go)

    async def repair_job(self, job: StepJob, owner: str, function: str) -> None:
        params = (function, job.run_id, job.step_key, owner)
        await self._write(lambda conn: conn.execute(SQL["repoint_job"], params))

    async def drop_job(self, job: StepJob, owner: str) -> None:
        params = (job.run_id, job.step_key, owner)
        await self._write(lambda conn: conn.execute(SQL["drop_held_job"], params))

    # -- actions from outside a pass ------------------------------------------------------------
    async def wake(self, run_id: str, at: float | None = None) -> None:
        def go(conn: sqlite3.Connection) -> None:
            now = self._now()
            apply.wake(conn, run_id, now, now if at is None else at)

        await self._write(go)

    async def cancel_run(self, run_id: str, error: str, parent: StepEnd) -> list[str]:
        end = EndRun("cancelled", None, error, parent)

        def go(conn: sqlite3.Connection) -> list[str]:
            apply.require_status(conn, run_id, ("running", "suspended", "queued"), "cancel")
            return apply.end_run(conn, run_id, end, self._now(), from_suspended=True)

        return await self._write(go)

    async def reopen_run(
        self, run_id: str, from_status: str, wakeups_seen: int, ops: Sequence[Op]
    ) -> Run | None:
        action = "resume" if from_status == "suspended" else "retry"

        def go(conn: sqlite3.Connection) -> Run | None:
            now = self._now()
            apply.require_status(conn, run_id, (from_status,), action)
            cur = conn.execute(SQL["reopen_run"], (now, now, run_id, from_status, wakeups_seen))
            if cur.rowcount == 0:
                return None  # woken since it was read: the caller reads it again
            apply.apply_ops(conn, run_id, ops, now)
            return apply.load_run(conn, run_id)

        return await self._write(go)

    async def send_event(self, run_id: str, name: str, payload: str | None) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            now = self._now()
            apply.require_status(
                conn, run_id, ("running", "suspended", "queued"), f"send event {name!r} to"
            )
            conn.execute(SQL["insert_event"], (run_id, name, payload, now))
            apply.wake(conn, run_id, now, now)
            return bool(conn.execute(SQL["waits_for_event"], (run_id, name)).fetchone()[0])

        return await self._write(go)

    # -- queues ---------------------------------------------------------------------------
    async def admit_runs(
        self, owner: str, lease_seconds: float, limit: int, queues: Sequence[QueueLimits]
    ) -> list[str]:
        conf = json.dumps([_queue_conf(q) for q in queues])
        rated = {q.name: q.window for q in queues if q.rate is not None}

        def go(conn: sqlite3.Connection) -> list[str]:
            now = self._now()
            params = {
                "queues": conf,
                "now": now,
                "limit": limit,
                "owner": owner,
                "until": now + lease_seconds,
            }
            rows = conn.execute(SQL["admit_runs"], params).fetchall()
            _log_admissions(conn, [queue for _id, queue in rows], rated, now)
            return [run_id for run_id, _queue in rows]

        return await self._write(go)

    async def next_queued(self) -> float | None:
        def go(conn: sqlite3.Connection) -> float | None:
            due: float | None = conn.execute(SQL["next_queued"]).fetchone()[0]
            return due

        return await self._read_here(go)

    async def claim_queue_jobs(
        self, owner: str, lease_seconds: float, limit: int, queues: Sequence[QueueLimits]
    ) -> list[StepJob]:
        conf = json.dumps([{**_queue_conf(q), "functions": list(q.functions)} for q in queues])
        queue_of = {fn: q.name for q in queues for fn in q.functions}
        rated = {q.name: q.window for q in queues if q.rate is not None}

        def go(conn: sqlite3.Connection) -> list[StepJob]:
            now = self._now()
            params = {
                "queues": conf,
                "now": now,
                "limit": limit,
                "owner": owner,
                "until": now + lease_seconds,
            }
            rows = conn.execute(SQL["claim_queue_jobs"], params).fetchall()
            _log_admissions(conn, [queue_of[r[2]] for r in rows], rated, now)
            return [self._claimed(conn, *row) for row in rows]

        return await self._write(go)

    async def queue_depths(self) -> list[QueueDepth]:
        def go(conn: sqlite3.Connection) -> list[QueueDepth]:
            rows = conn.execute(SQL["queue_depths"]).fetchall()
            return [QueueDepth(q, int(queued or 0), int(active or 0)) for q, queued, active in rows]

        return await self._read(go)

    # -- schedules ------------------------------------------------------------------------
    async def put_schedule(self, row: ScheduleRow) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(SQL["put_schedule"], _schedule_params(row))
            return cur.rowcount > 0

        return await self._write(go)

    async def get_schedules(self, name: str | None = None) -> list[ScheduleRow]:
        def go(conn: sqlite3.Connection) -> list[ScheduleRow]:
            return [ScheduleRow(*r) for r in conn.execute(SQL["get_schedules"], (name, name))]

        return await self._read(go)

    async def due_schedules(self, now: float, limit: int) -> list[ScheduleRow]:
        def go(conn: sqlite3.Connection) -> list[ScheduleRow]:
            return [ScheduleRow(*r) for r in conn.execute(SQL["due_schedules"], (now, limit))]

        return await self._read_here(go)

    async def next_schedule_tick(self) -> float | None:
        def go(conn: sqlite3.Connection) -> float | None:
            tick: float | None = conn.execute(SQL["next_schedule_tick"]).fetchone()[0]
            return tick

        return await self._read_here(go)

    async def fire_schedule(
        self,
        name: str,
        expected: float | None,
        next_tick: float | None,
        runs: Sequence[NewRun],
        skip_if_live: bool,
    ) -> list[str] | None:
        def go(conn: sqlite3.Connection) -> list[str] | None:
            now = self._now()
            found = conn.execute(SQL["schedule_for_fire"], (name,)).fetchone()
            if found is None:
                return None
            status, current, last_status = found
            live = False
            if expected is not None:
                if status != "active" or current != expected:
                    return None
                live = skip_if_live and last_status in ("queued", "running")
            started: list[str] = []
            last_tick = None
            for new in runs:
                if live:
                    break
                if apply.insert_run(conn, new, now):
                    started.append(new.id)
                    last_tick = new.scheduled_at
                    live = skip_if_live and expected is not None
            moved = current if expected is None else next_tick
            last = started[-1] if started else None
            conn.execute(SQL["fired_schedule"], (moved, last_tick, last, now, name))
            return started

        return await self._write(go)

    async def set_schedule_status(
        self, name: str, status: str, next_tick: float | None
    ) -> ScheduleRow | None:
        def go(conn: sqlite3.Connection) -> ScheduleRow | None:
            cur = conn.execute(SQL["set_schedule_status"], (status, next_tick, self._now(), name))
            if cur.rowcount == 0:
                return None
            return ScheduleRow(*conn.execute(SQL["get_schedules"], (name, name)).fetchone())

        return await self._write(go)

    async def delete_schedule(self, name: str) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            return conn.execute(SQL["delete_schedule"], (name,)).rowcount > 0

        return await self._write(go)

    # -- approvals, values, forks, retention ---------------------------------------------------
    async def submit_decision(self, run_id: str, decision: DecisionRow, ops: Sequence[Op]) -> str:
        def go(conn: sqlite3.Connection) -> str:
            now = decision.decided_at
            result, reason, consumed = decision.outcome, decision.reason, decision.key
            if result == "held":
                apply.require_status(conn, run_id, _LIVE, "send a decision to")
                consumed = None
            else:
                apply.require_status(conn, run_id, _ANY_STATUS, "send a decision to")
                consumed = consumed or ""
            if result == "accepted":
                row = conn.execute(SQL["step_status"], (run_id, decision.key)).fetchone()
                if row is None or row[0] != "pending":
                    result, reason = "closed", decision.if_closed
                elif row[1] is not None and now >= row[1]:
                    result, reason = "expired", decision.if_expired
                else:
                    apply.apply_ops(conn, run_id, ops, now)
            outcome = "refused" if result in ("closed", "expired") else result
            conn.execute(
                SQL["insert_decision"],
                (
                    run_id,
                    "__approval:" + decision.name,
                    decision.payload,
                    now,
                    consumed,
                    decision.decided_by,
                    outcome,
                    reason,
                    None if result == "held" else now,
                ),
            )
            if result in ("accepted", "held"):
                apply.wake(conn, run_id, now, now)
            return result

        return await self._write(go)

    async def get_decisions(self, run_id: str) -> list[dict[str, Any]]:
        def go(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(SQL["get_decisions"], (run_id,)).fetchall()
            return [dict(zip(_DECISION_FIELDS, r, strict=True)) for r in rows]

        return await self._read(go)

    async def list_gates(self, status: str | None, limit: int) -> list[GateRow]:
        params = {"status": status, "limit": limit}

        def go(conn: sqlite3.Connection) -> list[GateRow]:
            rows = conn.execute(SQL["list_gates"], params).fetchall()
            return [GateRow(convert.step_row(r[:-3]), r[-3], r[-2], r[-1]) for r in rows]

        return await self._read(go)

    async def get_values(self, run_id: str) -> dict[str, str | None]:
        def go(conn: sqlite3.Connection) -> dict[str, str | None]:
            return dict(conn.execute(SQL["get_values"], (run_id,)).fetchall())

        return await self._read_here(go)

    async def fork_run(self, new: NewRun, forked_from: str, ops: Sequence[Op]) -> Run:
        def go(conn: sqlite3.Connection) -> Run:
            now = self._now()
            if not apply.insert_run(conn, new, now):
                existing = apply.load_run(conn, new.id)
                raise RunIdTakenError(new.id, existing.workflow, new.workflow)
            conn.execute(SQL["set_forked_from"], (forked_from, new.id))
            apply.apply_ops(conn, new.id, ops, now)
            return apply.load_run(conn, new.id)

        return await self._write(go)

    async def prune_batch(
        self,
        statuses: Sequence[str],
        cutoff: float,
        after: tuple[float, str] | None,
        limit: int,
    ) -> PruneBatch:
        params = {
            "statuses": json.dumps(list(statuses)),
            "cutoff": cutoff,
            "after_at": after[0] if after else float("-inf"),
            "after_id": after[1] if after else "",
            "limit": limit,
        }

        def go(conn: sqlite3.Connection) -> PruneBatch:
            roots = conn.execute(SQL["prune_roots"], params).fetchall()
            if not roots:
                return PruneBatch(0, None)
            cursor = (roots[-1][1], roots[-1][0])
            doomed = [
                r[0] for r in conn.execute(SQL["prune_trees"], (json.dumps([r[0] for r in roots]),))
            ]
            if doomed:
                ids = json.dumps(doomed)
                for statement in _PRUNED:
                    conn.execute(statement, (ids,))
            return PruneBatch(len(doomed), cursor)

        # off the event loop's thread: a batch must never block the loop, only take its
        # turn at the write lock
        return await self._db.write(go, background=True)

    # -- versions ---------------------------------------------------------------------------
    async def put_version(
        self,
        workflow: str,
        version: str,
        kind: str,
        definition: str | None,
        status: str,
        registered_by: str | None = None,
    ) -> None:
        def go(conn: sqlite3.Connection) -> None:
            now = self._now()
            conn.execute(
                SQL["put_version"],
                (workflow, version, kind, definition, status, now, now, registered_by),
            )

        await self._write(go)

    async def claim_graph(self, workflow: str, owner: str | None) -> str | None:
        def go(conn: sqlite3.Connection) -> str | None:
            conn.execute(SQL["claim_graph"], (workflow, owner, self._now()))
            holder: str | None = conn.execute(SQL["graph_owner"], (workflow,)).fetchone()[0]
            return holder

        return await self._write(go)

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
        params = {"workflow": workflow, "version": version, "status": status}

        def go(conn: sqlite3.Connection) -> list[Version]:
            rows = conn.execute(SQL["list_versions"], params).fetchall()
            return [convert.version_record(r) for r in rows]

        return await self._read(go)


def _queue_conf(q: QueueLimits) -> dict[str, object]:
    return {
        "name": q.name,
        "concurrency": q.concurrency,
        "per_key": q.per_key,
        "rate": q.rate,
        "window": q.window,
    }


def _log_admissions(
    conn: sqlite3.Connection, queues: list[str | None], rated: dict[str, float | None], now: float
) -> None:
    """Record the admissions of queues with a rate, and forget those out of their window."""
    counted = [q for q in queues if q is not None and q in rated]
    for queue in counted:
        conn.execute(SQL["log_admission"], (queue, now))
    for queue in set(counted):
        conn.execute(SQL["prune_admissions"], (queue, now - (rated[queue] or 0.0)))


def _schedule_params(row: ScheduleRow) -> tuple[object, ...]:
    return (
        row.name,
        row.workflow,
        row.definition,
        row.status,
        row.source,
        row.owner,
        row.next_tick,
        row.last_tick,
        row.last_run_id,
        row.created_at,
        row.updated_at,
    )


def _statements(script: str) -> list[str]:
    """A migration script's statements: SQLite runs one per call. Comments are dropped
    first (a script's comments never hold a semicolon); a semicolon ends a statement only
    where SQLite says it does (a trigger's body holds statements of its own)."""
    text = "\n".join(line.split("--")[0] for line in script.splitlines())
    found: list[str] = []
    pending = ""
    for piece in text.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip("; \n\t"):
                found.append(pending)
            pending = ""
    return found


def _check_folder(path: str) -> None:
    """A file in a folder that does not exist is an error naming both: sqlite3 would say
    only "unable to open database file"."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"cannot open the SQLite database {path}: the folder {folder} does not exist"
        )


def _path_from_url(url: str) -> str:
    for prefix in ("sqlite:///", "sqlite://"):
        if url.startswith(prefix):
            path = url[len(prefix) :]
            return path or ":memory:"
    raise ValueError(f"not a sqlite URL: {redact(url)!r} (expected sqlite:///path/to/file.db)")


class _LeaseKeeper:
    """Lease renewal on a connection of its own, for a thread beside a blocked loop."""

    def __init__(self, path: str, busy_timeout: float, clock: Clock) -> None:
        self._conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
        self._now = clock.now

    def renew(self, owner: str, lease_seconds: float, holding: Sequence[str]) -> None:
        conn = self._conn
        conn.execute(SQL["begin_immediate"])
        try:
            held = json.dumps(list(holding))
            apply.renew_leases(conn, owner, self._now() + lease_seconds, held)
        except BaseException:
            conn.execute(SQL["rollback"])
            raise
        conn.execute(SQL["commit"])

    def close(self) -> None:
        self._conn.close()


__all__ = ["SCHEMA_VERSION", "SQLiteStore"]
