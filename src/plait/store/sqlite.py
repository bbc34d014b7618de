"""The embedded store: one SQLite file in WAL mode.

One connection does every write of a process. Coroutines hand it small functions and await
a future that resolves only after the commit containing their write. Writes made during one
turn of the event loop share one commit (group commit), so many concurrent workflows share
each fsync. The commit runs on the loop's own thread while that is cheap, and on a writer
thread when commits are slow or the file is locked (see "the write connection" below).
Reads use their own connections, which WAL lets run beside the writer. Several processes
may share one file; SQLite's lock serialises their writers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, TypeVar

from plait import serde
from plait.errors import (
    STEP_INTERRUPTED,
    WORKFLOW_CANCELLED,
    LeaseLostError,
    RunNotFoundError,
    RunStateError,
    StepFunctionMismatchError,
)
from plait.records import Run, Step, StepAttempt
from plait.store import convert
from plait.store.base import (
    Batch,
    ClearTimer,
    ConsumeEvent,
    CreateChildRun,
    EndRun,
    EnqueueJob,
    EventRow,
    FinishAttempt,
    NewRun,
    Op,
    PassSnapshot,
    PutStep,
    SetState,
    SetTimer,
    StartAttempt,
    StepJob,
    StepRow,
)

T = TypeVar("T")
#: queued attempts cut short by dying workers before the step is failed (as in passes)
MAX_INTERRUPTIONS = 10
SCHEMA_VERSION = 2
#: the script that brings a database to each version
_MIGRATIONS = {1: "sqlite_schema.sql", 2: "sqlite_v2.sql"}
_BATCH_LIMIT = 256
_IDLE = object()
#: commits slower than this on average (a slow disk) leave the event loop free: the writer
#: thread runs them
_INLINE_LIMIT = 0.001
_Result = tuple[asyncio.Future[Any], asyncio.AbstractEventLoop, Any, BaseException | None]
_Settled = tuple[asyncio.Future[Any], Any, BaseException | None]

#: what writing a step row again changes (its identity and first-reach order stay)
_STEP_CHANGES = """
    kind = excluded.kind, function = excluded.function, status = excluded.status,
    input = excluded.input, output = excluded.output, error = excluded.error,
    attempts = excluded.attempts, failures = excluded.failures, retries = excluded.retries,
    retry_delay = excluded.retry_delay, timeout = excluded.timeout,
    child_run_id = excluded.child_run_id, branch = excluded.branch,
    queued = excluded.queued, wake_at = excluded.wake_at, updated_at = excluded.updated_at"""
_UPSERT_STEP = f"""
INSERT INTO plait_steps ({convert.STEP_COLUMNS})
VALUES ({", ".join("?" * 23)})
ON CONFLICT (run_id, key) DO UPDATE SET {_STEP_CHANGES}
"""
#: a step's new attempt: the step row, with the attempt on it (schema version 2)
_START_STEP = f"""
INSERT INTO plait_steps ({convert.STEP_COLUMNS}, worker, attempt_status, attempt_error,
    attempt_started, attempt_finished)
VALUES ({", ".join("?" * 23)}, ?, 'running', NULL, ?, NULL)
ON CONFLICT (run_id, key) DO UPDATE SET {_STEP_CHANGES},
    worker = excluded.worker, attempt_status = 'running', attempt_error = NULL,
    attempt_started = excluded.attempt_started, attempt_finished = NULL
"""
#: the attempt on a step row moves to plait_attempts when the next one starts
_ARCHIVE_ATTEMPT = """
INSERT INTO plait_attempts (run_id, key, attempt, status, output, error, worker, started_at,
    finished_at)
SELECT run_id, key, ?, attempt_status, CASE WHEN attempt_status = 'succeeded' THEN output END,
    attempt_error, worker, attempt_started, attempt_finished
FROM plait_steps WHERE run_id = ? AND key = ? AND attempt_status IS NOT NULL
ON CONFLICT (run_id, key, attempt) DO UPDATE SET status = excluded.status,
    output = excluded.output, error = excluded.error, worker = excluded.worker,
    started_at = excluded.started_at, finished_at = excluded.finished_at
"""
_INSERT_RUN = """
INSERT INTO plait_runs (id, workflow, kind, version, status, input, parent_run_id,
    parent_step_key, owner, start_node, created_at, updated_at, wake_at, wakeups,
    lease_owner, lease_until)
VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)
ON CONFLICT (id) DO NOTHING
"""
_SELECT_RUN = f"SELECT {convert.RUN_COLUMNS} FROM plait_runs WHERE id = ?"
_WAKE = """
UPDATE plait_runs SET wakeups = wakeups + 1, updated_at = ?, idle_sweeps = 0,
    wake_at = CASE WHEN wake_at IS NULL OR wake_at > ? THEN ? ELSE wake_at END
WHERE id = ? AND status = 'running'
"""


def _now() -> float:
    return time.time()


class SQLiteStore:
    """A store in one SQLite file (or in memory, for tests)."""

    def __init__(self, url: str, *, synchronous: str = "FULL", busy_timeout: float = 30.0):
        self.url = url
        self.path = _path_from_url(url)
        self.memory = self.path == ":memory:"
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._writes: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        #: commits and statements, for the benchmark's "durable writes per step"
        self.commits = 0
        #: set by attach_notifier: called (in the writer thread) when another process
        #: committed to the file
        self._on_foreign: Callable[[], Any] | None = None
        self._watch_interval: float | None = None
        #: the write connection; used under _conn_lock by the loop's thread or the writer's
        self._conn: sqlite3.Connection | None = None
        self._conn_lock = threading.Lock()
        #: writes gathered on each event loop for the commit that runs at its next turn
        self._gathering: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        #: a moving average of COMMIT times; above _INLINE_LIMIT the writer thread commits
        self._commit_time = 0.0
        self._slow = False
        self._closing = False
        #: the loop that opened the store, and its thread: asking asyncio for the running
        #: loop costs a system call (a fork check) on every write
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    # -- connections ---------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        conn.execute("PRAGMA foreign_keys = OFF")
        return conn

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._loop, self._loop_thread = loop, threading.get_ident()
        self._closing = False

        def start(conn: sqlite3.Connection) -> None:
            if not self.memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise RuntimeError(f"could not switch {self.path} to WAL (got {mode})")
            self._migrate(conn)

        self._writer = threading.Thread(
            target=self._write_loop, args=(start, loop, ready), name="plait-sqlite-writer"
        )
        self._writer.daemon = True
        self._writer.start()
        await ready
        if not self.memory:
            self._readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="plait-read")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS plait_schema (id INTEGER PRIMARY KEY CHECK (id = 1),"
                " version INTEGER NOT NULL)"
            )
            row = conn.execute("SELECT version FROM plait_schema").fetchone()
            current = row[0] if row else 0
            if current > SCHEMA_VERSION:
                raise RuntimeError(
                    f"database {self.path} has schema version {current}, newer than this plait"
                    f" ({SCHEMA_VERSION}); upgrade plait"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                script = resources.files("plait.store").joinpath(f"sql/{_MIGRATIONS[version]}")
                text = "\n".join(line.split("--")[0] for line in script.read_text().splitlines())
                for statement in text.split(";"):
                    if statement.strip():
                        conn.execute(statement)
            if current < SCHEMA_VERSION:
                conn.execute(
                    "INSERT INTO plait_schema (id, version) VALUES (1, ?) "
                    "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                    (SCHEMA_VERSION,),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def attach_notifier(self, notifier: Any, interval: float = 0.05) -> None:
        """Wake this process when another process commits to the same file.

        SQLite has no LISTEN/NOTIFY, but ``PRAGMA data_version`` on a connection changes
        whenever *another* connection commits. The writer checks it on its own connection
        between batches and while idle, so this process's own commits never count and an
        idle process costs one cheap read every ``interval`` seconds.
        """
        if self.memory:
            return
        loop = asyncio.get_running_loop()
        self._watch_interval = interval
        self._on_foreign = lambda: loop.call_soon_threadsafe(notifier.everything_changed)

    async def close(self) -> None:
        self._closing = True
        if self._writer is not None:
            self._writes.put(None)
            await asyncio.to_thread(self._writer.join)
            self._writer = None
        if self._readers is not None:
            self._readers.shutdown(wait=True)
            self._readers = None
        with self._lock:
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()

    # -- the write connection ------------------------------------------------------------
    #
    # One connection does every write. A batch of writes runs on the event loop's own
    # thread when the connection is free and commits are fast: a hop to another thread
    # and back costs about as much as a fast commit, and a sequential workflow pays it on
    # every step. When the connection is busy, commits are slow (a slow disk), or another
    # process holds the file's write lock, batches go to the writer thread instead, which
    # gathers everything queued meanwhile into its next commit (group commit).

    def _write_loop(
        self,
        start: Callable[[sqlite3.Connection], None],
        loop: asyncio.AbstractEventLoop,
        ready: asyncio.Future[None],
    ) -> None:
        try:
            conn = self._connect()
            start(conn)
            # waits for another process's write lock happen in _begin, never inline
            conn.execute("PRAGMA busy_timeout = 0")
        except BaseException as exc:
            loop.call_soon_threadsafe(_settle, ready, None, exc)
            return
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        self._conn = conn
        loop.call_soon_threadsafe(_settle, ready, None, None)
        try:
            while True:
                try:
                    item = self._writes.get(timeout=self._watch_interval)
                except queue.Empty:
                    item = _IDLE
                if item is None:
                    break
                batch = [] if item is _IDLE else [item]
                stop = False
                while batch and len(batch) < _BATCH_LIMIT:
                    try:
                        nxt = self._writes.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    batch.append(nxt)
                with self._conn_lock:
                    if self._on_foreign is not None:
                        seen = conn.execute("PRAGMA data_version").fetchone()[0]
                        if seen != version:
                            version = seen
                            self._on_foreign()
                    results = self._run_batch(conn, batch, wait=True) if batch else []
                # one wake-up of each waiting event loop per batch, not one per future
                by_loop: dict[Any, list[_Settled]] = {}
                for fut, loop_, value, exc in results or []:
                    by_loop.setdefault(loop_, []).append((fut, value, exc))
                for loop_, settled in by_loop.items():
                    loop_.call_soon_threadsafe(_settle_all, settled)
                if stop:
                    break
        finally:
            with self._conn_lock:
                self._conn = None
                conn.close()

    def _begin(self, conn: sqlite3.Connection, wait: bool) -> bool:
        """Take the file's write lock. Without ``wait`` give up at once when another
        process holds it (the caller is the event loop); with it, retry with growing
        pauses until ``busy_timeout``."""
        delay, deadline = 0.0005, time.monotonic() + self.busy_timeout
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return True
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if not wait:
                    return False
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.02)

    def _run_batch(
        self, conn: sqlite3.Connection, batch: list[Any], wait: bool
    ) -> list[_Result] | None:
        """Run a batch in one transaction; None if ``wait`` is off and the file is locked."""
        writes = [b for b in batch if b[0] == "write"]
        results: list[_Result] = []
        for kind, fn, fut, loop in batch:
            if kind == "read":
                try:
                    results.append((fut, loop, fn(conn), None))
                except BaseException as exc:
                    results.append((fut, loop, None, exc))
        if not writes:
            return results
        try:
            if not self._begin(conn, wait):
                return None
        except BaseException as exc:
            return results + [(fut, loop, None, exc) for _, _fn, fut, loop in writes]
        pending: list[_Result] = []
        # Optimistic: the whole batch in one transaction without savepoints. If any item
        # fails (rare: a lost lease, an action on a run in the wrong status), the batch is
        # rolled back and every item runs again in its own transaction, so one item's
        # failure never undoes another's write.
        for _, fn, fut, loop in writes:
            try:
                pending.append((fut, loop, fn(conn), None))
            except BaseException:
                conn.execute("ROLLBACK")
                if not wait:
                    return None  # the writer thread runs them one by one, waiting for locks
                return results + [self._alone(conn, item) for item in writes]
        try:
            self._commit(conn)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            pending = [(f, lp, None, exc) for f, lp, _, _ in pending]
        return results + pending

    def _alone(self, conn: sqlite3.Connection, item: Any) -> _Result:
        """One write in a transaction of its own (after its batch failed)."""
        _, fn, fut, loop = item
        try:
            self._begin(conn, wait=True)
            value = fn(conn)
            self._commit(conn)
            return (fut, loop, value, None)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            return (fut, loop, None, exc)

    def _commit(self, conn: sqlite3.Connection) -> None:
        """COMMIT, timing it: the disk's sync time decides where the next batch runs."""
        started = time.perf_counter()
        conn.execute("COMMIT")
        self.commits += 1
        took = time.perf_counter() - started
        self._commit_time += (took - self._commit_time) * 0.1
        self._slow = self._commit_time > _INLINE_LIMIT

    def _submit(self, kind: str, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        if self._writer is None or self._closing:
            raise RuntimeError(f"the store {self.url} is closed")
        loop = self._loop
        if loop is None or threading.get_ident() != self._loop_thread or not loop.is_running():
            loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        item = (kind, fn, fut, loop)
        if self._slow:
            self._writes.put(item)
            return fut
        gathering = self._gathering.get(loop)
        if gathering is None:
            # every write submitted before this callback runs shares its commit
            self._gathering[loop] = [item]
            loop.call_soon(self._run_here, loop)
        else:
            gathering.append(item)
        return fut

    def _run_here(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the writes gathered on ``loop`` on its own thread, or hand them over."""
        batch = self._gathering.pop(loop)
        conn = self._conn
        if conn is None or self._closing:
            closed = RuntimeError(f"the store {self.url} is closed")
            _settle_all([(fut, None, closed) for _, _fn, fut, _lp in batch])
            return
        results = None
        if not self._slow and self._conn_lock.acquire(blocking=False):
            try:
                if self._conn is not None:
                    results = self._run_batch(conn, batch, wait=False)
            finally:
                self._conn_lock.release()
        if results is None:
            for item in batch:
                self._writes.put(item)
            return
        _settle_all([(fut, value, exc) for fut, _lp, value, exc in results])

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._submit("write", fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._readers is None:
            return await self._submit("read", fn)
        if self._writer is None:
            raise RuntimeError(f"the store {self.url} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._in_reader, fn)

    async def _read_here(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A small read (one run, one pass's snapshot) on the caller's own thread: a hop to
        a reader thread and back costs more than the read, and a snapshot is followed by a
        replay that keeps the loop busy far longer than reading it did."""
        if self._readers is None:
            return await self._submit("read", fn)
        if self._writer is None:
            raise RuntimeError(f"the store {self.url} is closed")
        return self._in_reader(fn)

    def _in_reader(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._reader_conns.append(conn)
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    # -- runs --------------------------------------------------------------------------------
    async def create_run(self, new: NewRun) -> tuple[Run, bool]:
        def go(conn: sqlite3.Connection) -> tuple[Run, bool]:
            created = _insert_run(conn, new, _now())
            row = conn.execute(_SELECT_RUN, (new.id,)).fetchone()
            return convert.run_record(convert.run_row(row)), created

        return await self._write(go)

    async def get_run(self, run_id: str) -> Run | None:
        def go(conn: sqlite3.Connection) -> Run | None:
            row = conn.execute(_SELECT_RUN, (run_id,)).fetchone()
            return convert.run_record(convert.run_row(row)) if row else None

        return await self._read_here(go)

    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        version: str | None = None,
        owner: str | None = None,
        parent_run_id: str | None = None,
        visible_to: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[Run], int]:
        where, params = [], []
        if visible_to is not None:
            where.append("(owner IS NULL OR owner = ?)")
            params.append(visible_to)
        for column, value in (
            ("workflow", workflow),
            ("status", status),
            ("version", version),
            ("owner", owner),
            ("parent_run_id", parent_run_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        clause = f"WHERE {' AND '.join(where)}" if where else ""

        def go(conn: sqlite3.Connection) -> tuple[list[Run], int]:
            total = conn.execute(f"SELECT count(*) FROM plait_runs {clause}", params).fetchone()[0]
            rows = conn.execute(
                f"SELECT {convert.RUN_COLUMNS} FROM plait_runs {clause} "
                "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
                [*params, limit, offset],
            ).fetchall()
            return [convert.run_record(convert.run_row(r)) for r in rows], total

        return await self._read(go)

    async def get_children(self, run_id: str) -> list[Run]:
        runs, _ = await self.list_runs(parent_run_id=run_id, limit=10_000)
        return sorted(runs, key=lambda r: r.created_at)

    async def get_steps(self, run_id: str) -> list[Step]:
        def go(conn: sqlite3.Connection) -> list[Step]:
            rows = conn.execute(
                f"SELECT {convert.STEP_COLUMNS} FROM plait_steps WHERE run_id = ? ORDER BY seq",
                (run_id,),
            ).fetchall()
            return [convert.step_record(convert.step_row(r)) for r in rows]

        return await self._read(go)

    async def get_history(self, run_id: str) -> list[StepAttempt]:
        def go(conn: sqlite3.Connection) -> list[StepAttempt]:
            rows = conn.execute(
                f"SELECT {convert.ATTEMPT_COLUMNS} FROM plait_attempts WHERE run_id = ?"
                " UNION ALL SELECT run_id, key, attempts, attempt_status,"
                " CASE WHEN attempt_status = 'succeeded' THEN output END, attempt_error,"
                " attempt_started, attempt_finished FROM plait_steps"
                " WHERE run_id = ? AND attempt_status IS NOT NULL ORDER BY 7, 3",
                (run_id, run_id),
            ).fetchall()
            return [convert.attempt_record(r) for r in rows]

        return await self._read(go)

    # -- orchestrator passes ------------------------------------------------------------------
    async def load_pass(self, run_id: str) -> PassSnapshot | None:
        def go(conn: sqlite3.Connection) -> PassSnapshot | None:
            row = conn.execute(_SELECT_RUN, (run_id,)).fetchone()
            if row is None:
                return None
            steps = {
                r[1]: convert.step_row(r)
                for r in conn.execute(
                    f"SELECT {convert.STEP_COLUMNS} FROM plait_steps WHERE run_id = ?",
                    (run_id,),
                )
            }
            events = [
                EventRow(*r)
                for r in conn.execute(
                    "SELECT id, name, payload FROM plait_events "
                    "WHERE run_id = ? AND consumed_by IS NULL ORDER BY id",
                    (run_id,),
                )
            ]
            state = dict(
                conn.execute("SELECT name, value FROM plait_state WHERE run_id = ?", (run_id,))
            )
            return PassSnapshot(convert.run_row(row), steps, events, state)

        return await self._read_here(go)

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            now = _now()
            cur = conn.execute(
                "UPDATE plait_runs SET lease_owner = ?, lease_until = ? WHERE id = ? "
                "AND status = 'running' AND (lease_owner IS NULL OR lease_until < ?)",
                (owner, now + lease_seconds, run_id, now),
            )
            return cur.rowcount == 1

        return await self._write(go)

    async def claim_due_runs(self, owner: str, lease_seconds: float, limit: int) -> list[str]:
        def go(conn: sqlite3.Connection) -> list[str]:
            now = _now()
            rows = conn.execute(
                "UPDATE plait_runs SET lease_owner = ?, lease_until = ? WHERE id IN ("
                " SELECT id FROM plait_runs WHERE wake_at <= ? AND status = 'running'"
                " AND (lease_owner IS NULL OR lease_until < ?) ORDER BY wake_at LIMIT ?"
                ") RETURNING id",
                (owner, now + lease_seconds, now, now, limit),
            ).fetchall()
            return [r[0] for r in rows]

        return await self._write(go)

    async def commit(self, batch: Batch) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            if batch.fence is not None:
                row = conn.execute(
                    "SELECT lease_owner FROM plait_runs WHERE id = ?", (batch.run_id,)
                ).fetchone()
                if row is None or row[0] != batch.fence:
                    raise LeaseLostError(f"lost the lease on run {batch.run_id}")
            now = _now()
            _apply(conn, batch.run_id, batch.ops, now)
            if batch.release is None or batch.fence is None:
                return False
            return _release(conn, batch.run_id, batch.fence, batch.release, now)

        return await self._write(go)

    async def release_run(self, run_id: str, owner: str, wakeups_seen: int) -> bool:
        return await self._write(lambda conn: _release(conn, run_id, owner, wakeups_seen, _now()))

    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int:
        """Re-drive runs that are ``running`` with nothing that will ever wake them (no
        lease, no timer, no job). A state change and the wake-up it needs are written in
        one transaction, so this is a safety net; each run's sweeps back off (30 s
        doubling to 10 min) so a wedged run can never flood the queue."""

        def go(conn: sqlite3.Connection) -> int:
            now = _now()
            rows = conn.execute(
                "UPDATE plait_runs SET wake_at = ?, idle_sweeps = idle_sweeps + 1 WHERE id IN ("
                " SELECT r.id FROM plait_runs r WHERE r.status = 'running'"
                " AND r.wake_at IS NULL AND r.lease_owner IS NULL"
                " AND r.updated_at < ? - min(?, ? * (1 << min(r.idle_sweeps, 20)))"
                " AND NOT EXISTS (SELECT 1 FROM plait_timers t WHERE t.run_id = r.id)"
                " AND NOT EXISTS (SELECT 1 FROM plait_jobs j WHERE j.run_id = r.id)"
                " LIMIT ?) RETURNING id",
                (now, now, cap, base, limit),
            ).fetchall()
            if rows:
                marks = ",".join("?" * len(rows))
                conn.execute(
                    f"UPDATE plait_runs SET updated_at = ? WHERE id IN ({marks})",
                    (now, *[r[0] for r in rows]),
                )
            return len(rows)

        return await self._write(go)

    async def leases_of(self, worker_id: str, owner: str) -> list[tuple[Any, ...]]:
        """Leases held under ``worker_id`` by other processes than ``owner`` (an earlier
        life of a restarted worker, or a twin still draining)."""
        prefix = f"{worker_id}#"

        def go(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT 'run', id, '', lease_owner, lease_until FROM plait_runs"
                " WHERE substr(lease_owner, 1, ?) = ? AND lease_owner != ?"
                " UNION ALL SELECT 'job', run_id, step_key, lease_owner, lease_until"
                " FROM plait_jobs WHERE substr(lease_owner, 1, ?) = ? AND lease_owner != ?",
                (len(prefix), prefix, owner, len(prefix), prefix, owner),
            ).fetchall()

        return await self._read(go)

    async def expire_leases(self, leases: Sequence[tuple[Any, ...]]) -> int:
        """Expire the given leases if nobody renewed them since they were read: their
        holder is dead, so its runs and steps are taken over now instead of at expiry."""

        def go(conn: sqlite3.Connection) -> int:
            done = 0
            for kind, run_id, key, owner, until in leases:
                if kind == "run":
                    cur = conn.execute(
                        "UPDATE plait_runs SET lease_until = 0 WHERE id = ? AND lease_owner = ?"
                        " AND lease_until = ?",
                        (run_id, owner, until),
                    )
                else:
                    cur = conn.execute(
                        "UPDATE plait_jobs SET lease_until = 0 WHERE run_id = ? AND step_key = ?"
                        " AND lease_owner = ? AND lease_until = ?",
                        (run_id, key, owner, until),
                    )
                done += cur.rowcount
            return done

        return await self._write(go)

    async def renew_leases(self, owner: str, lease_seconds: float) -> set[str]:
        def go(conn: sqlite3.Connection) -> set[str]:
            until = _now() + lease_seconds
            conn.execute(
                "UPDATE plait_runs SET lease_until = ? WHERE lease_owner = ?", (until, owner)
            )
            conn.execute(
                "UPDATE plait_jobs SET lease_until = ? WHERE lease_owner = ?", (until, owner)
            )
            rows = conn.execute(
                "SELECT id FROM plait_runs WHERE lease_owner = ? AND status != 'running'",
                (owner,),
            ).fetchall()
            return {r[0] for r in rows}

        return await self._write(go)

    async def next_due(self, functions: Sequence[str] | None = None) -> float | None:
        """When the next run pass (``functions`` None) or job for ``functions`` is due,
        counting a leased one as due when its lease runs out."""
        if functions is None:
            sql = (
                "SELECT min(CASE WHEN lease_owner IS NULL THEN wake_at"
                " ELSE max(wake_at, lease_until) END) FROM plait_runs"
                " WHERE wake_at IS NOT NULL AND status = 'running'"
            )
            params: tuple[Any, ...] = ()
        else:
            sql = (
                "SELECT min(CASE WHEN lease_owner IS NULL THEN available_at"
                " ELSE max(available_at, lease_until) END) FROM plait_jobs"
                f" WHERE function IN ({','.join('?' * len(functions))})"
                " AND EXISTS (SELECT 1 FROM plait_runs r WHERE r.id = plait_jobs.run_id"
                " AND r.status = 'running')"
            )
            params = tuple(functions)

        def go(conn: sqlite3.Connection) -> float | None:
            row = conn.execute(sql, params).fetchone()
            return row[0] if row else None

        return await self._read_here(go)

    # -- queued steps -----------------------------------------------------------------------
    async def claim_step_jobs(
        self, owner: str, lease_seconds: float, limit: int, functions: Sequence[str]
    ) -> list[StepJob]:
        marks = ",".join("?" * len(functions))

        def go(conn: sqlite3.Connection) -> list[StepJob]:
            now = _now()
            rows = conn.execute(
                "UPDATE plait_jobs SET lease_owner = ?, lease_until = ?,"
                " deliveries = deliveries + 1 WHERE rowid IN ("
                " SELECT rowid FROM plait_jobs WHERE available_at <= ?"
                f" AND (lease_owner IS NULL OR lease_until < ?) AND function IN ({marks})"
                " AND EXISTS (SELECT 1 FROM plait_runs r WHERE r.id = plait_jobs.run_id"
                " AND r.status = 'running')"
                " ORDER BY available_at LIMIT ?"
                ") RETURNING run_id, step_key, function, deliveries",
                (owner, now + lease_seconds, now, now, *functions, limit),
            ).fetchall()
            return [StepJob(*r) for r in rows]

        return await self._write(go)

    async def begin_queued_step(
        self, job: StepJob, owner: str, lease_seconds: float
    ) -> StepRow | None:
        result = await self._write(lambda conn: self._begin_queued_step(conn, job, owner))
        if isinstance(result, StepFunctionMismatchError):
            raise result
        return result

    def _begin_queued_step(
        self, conn: sqlite3.Connection, job: StepJob, owner: str
    ) -> StepRow | StepFunctionMismatchError | None:
        now = _now()
        held = conn.execute(
            "SELECT 1 FROM plait_jobs WHERE run_id = ? AND step_key = ? AND lease_owner = ?",
            (job.run_id, job.step_key, owner),
        ).fetchone()
        if held is None:
            return None
        row = conn.execute(
            f"SELECT {convert.STEP_COLUMNS} FROM plait_steps WHERE run_id = ? AND key = ?",
            (job.run_id, job.step_key),
        ).fetchone()
        status = conn.execute(
            "SELECT status FROM plait_runs WHERE id = ?", (job.run_id,)
        ).fetchone()
        step = convert.step_row(row) if row else None
        if status is not None and status[0] == "suspended":
            # keep the job for when the run is resumed; claims skip suspended runs
            conn.execute(
                "UPDATE plait_jobs SET lease_owner = NULL, lease_until = NULL"
                " WHERE run_id = ? AND step_key = ?",
                (job.run_id, job.step_key),
            )
            return None
        if step is None or status is None or status[0] != "running":
            _delete_job(conn, job.run_id, job.step_key)
            return None
        if step.function != job.function:
            # Rejected without running anything: the job goes back under the function the
            # step was created with. Returning (not raising) keeps that repair committed.
            conn.execute(
                "UPDATE plait_jobs SET function = ?, lease_owner = NULL, lease_until = NULL"
                " WHERE run_id = ? AND step_key = ?",
                (step.function, job.run_id, job.step_key),
            )
            return StepFunctionMismatchError(
                f"job for step {job.step_key!r} of run {job.run_id} names function "
                f"{job.function!r}, but the step was created with {step.function!r}"
            )
        if step.status == "running":
            # The previous holder's lease ran out while it ran this step: that attempt
            # was interrupted and this delivery takes over with the next attempt.
            _close_attempt(conn, step, "interrupted", None, now)
            interrupted = step.attempts - step.failures
            if interrupted >= MAX_INTERRUPTIONS:
                # a body that kills its worker every time is given up, not retried forever
                step.status, step.updated_at = "failed", now
                step.error = serde.dumps(
                    {
                        "message": f"step {step.key!r} was interrupted {interrupted} times "
                        "(its worker died while running it each time)",
                        "type": "StepInterrupted",
                        "code": STEP_INTERRUPTED,
                    }
                )
                conn.execute(_UPSERT_STEP, convert.step_params(step))
                _delete_job(conn, job.run_id, job.step_key)
                conn.execute(_WAKE, (now, now, now, job.run_id))
                return None
        elif step.status != "scheduled":
            _delete_job(conn, job.run_id, job.step_key)
            return None
        step.attempts += 1
        step.status = "running"
        step.wake_at = None
        step.updated_at = now
        _start_attempt(conn, step, step.attempts, owner, now)
        return step

    async def finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            now = _now()
            held = conn.execute(
                "SELECT 1 FROM plait_jobs WHERE run_id = ? AND step_key = ? AND lease_owner = ?",
                (job.run_id, job.step_key, owner),
            ).fetchone()
            if held is None:
                return False
            _delete_job(conn, job.run_id, job.step_key)
            _apply(conn, job.run_id, ops, now)
            conn.execute(_WAKE, (now, now, now, job.run_id))
            return True

        return await self._write(go)

    async def drop_job(self, job: StepJob) -> None:
        await self._write(lambda conn: _delete_job(conn, job.run_id, job.step_key))

    # -- actions from outside a pass ------------------------------------------------------------
    async def wake(self, run_id: str, at: float | None = None) -> None:
        def go(conn: sqlite3.Connection) -> None:
            now = _now()
            when = now if at is None else at
            conn.execute(_WAKE, (now, when, when, run_id))

        await self._write(go)

    async def cancel_run(self, run_id: str, reason: str | None) -> list[str]:
        def go(conn: sqlite3.Connection) -> list[str]:
            _require_status(conn, run_id, ("running", "suspended"), "cancel")
            error = serde.dumps(
                {"message": reason or "cancelled", "type": "Cancel", "code": WORKFLOW_CANCELLED}
            )
            return _end_run(
                conn, run_id, "cancelled", None, error, _now(), {"running", "suspended"}
            )

        return await self._write(go)

    async def resume_run(self, run_id: str) -> Run:
        def go(conn: sqlite3.Connection) -> Run:
            now = _now()
            _require_status(conn, run_id, ("suspended",), "resume")
            opened = conn.execute(
                f"SELECT {convert.STEP_COLUMNS} FROM plait_steps WHERE run_id = ?"
                " AND kind = 'suspend' AND status = 'pending'",
                (run_id,),
            ).fetchall()
            for r in opened:
                step = convert.step_row(r)
                output = serde.loads(step.input) or {}
                output["resumed_at"] = now
                step.status = "succeeded"
                step.output = serde.dumps(output)
                step.updated_at = now
                conn.execute(_UPSERT_STEP, convert.step_params(step))
                _close_attempt(conn, step, "succeeded", None, now)
            _requeue(conn, run_id, now)
            conn.execute(
                "UPDATE plait_runs SET status = 'running', error = NULL, updated_at = ?,"
                " wake_at = ?, wakeups = wakeups + 1 WHERE id = ?",
                (now, now, run_id),
            )
            return _load_run(conn, run_id)

        return await self._write(go)

    async def retry_run(self, run_id: str) -> Run:
        def go(conn: sqlite3.Connection) -> Run:
            now = _now()
            _require_status(conn, run_id, ("failed",), "retry")
            conn.execute(
                "UPDATE plait_steps SET status = 'pending', failures = 0, wake_at = NULL,"
                " updated_at = ? WHERE run_id = ? AND status = 'failed'",
                (now, run_id),
            )
            _requeue(conn, run_id, now)
            conn.execute(
                "UPDATE plait_runs SET status = 'running', error = NULL, output = NULL,"
                " updated_at = ?, wake_at = ?, wakeups = wakeups + 1 WHERE id = ?",
                (now, now, run_id),
            )
            return _load_run(conn, run_id)

        return await self._write(go)

    async def send_event(self, run_id: str, name: str, payload: str | None) -> None:
        def go(conn: sqlite3.Connection) -> None:
            now = _now()
            _require_status(conn, run_id, ("running", "suspended"), f"send event {name!r} to")
            conn.execute(
                "INSERT INTO plait_events (run_id, name, payload, created_at) VALUES (?, ?, ?, ?)",
                (run_id, name, payload, now),
            )
            conn.execute(_WAKE, (now, now, now, run_id))

        await self._write(go)

    # -- versions ---------------------------------------------------------------------------
    async def put_version(
        self, workflow: str, version: str, kind: str, definition: str | None, status: str
    ) -> None:
        def go(conn: sqlite3.Connection) -> None:
            now = _now()
            conn.execute(
                "INSERT INTO plait_workflow_versions (workflow, version, kind, definition, status,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (workflow, version) DO UPDATE SET status = excluded.status,"
                " updated_at = excluded.updated_at",
                (workflow, version, kind, definition, status, now, now),
            )

        await self._write(go)

    async def get_version(self, workflow: str, version: str) -> dict[str, Any] | None:
        rows = await self._versions("workflow = ? AND version = ?", (workflow, version))
        return rows[0] if rows else None

    async def list_versions(
        self, workflow: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        where, params = ["1 = 1"], []
        if workflow is not None:
            where.append("workflow = ?")
            params.append(workflow)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        return await self._versions(" AND ".join(where), tuple(params))

    async def _versions(self, where: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        def go(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                "SELECT workflow, version, kind, definition, status, created_at, updated_at"
                f" FROM plait_workflow_versions WHERE {where}"
                " ORDER BY updated_at DESC, version",
                params,
            ).fetchall()
            return [
                {
                    "workflow": r[0],
                    "version": r[1],
                    "kind": r[2],
                    "definition": json.loads(r[3]) if r[3] else None,
                    "status": r[4],
                    "created_at": convert.ts(r[5]),
                    "updated_at": convert.ts(r[6]),
                }
                for r in rows
            ]

        return await self._read(go)


# -- statements shared by the operations above -------------------------------------------------


def _settle_all(settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for fut, value, exc in settled:
        _settle(fut, value, exc)


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def _path_from_url(url: str) -> str:
    for prefix in ("sqlite:///", "sqlite://"):
        if url.startswith(prefix):
            path = url[len(prefix) :]
            return path or ":memory:"
    raise ValueError(f"not a sqlite URL: {url!r} (expected sqlite:///path/to/file.db)")


def _insert_run(conn: sqlite3.Connection, new: NewRun, now: float) -> bool:
    lease_until = now + new.lease_seconds if new.lease_owner else None
    cur = conn.execute(
        _INSERT_RUN,
        (
            new.id,
            new.workflow,
            new.kind,
            new.version,
            new.input,
            new.parent_run_id,
            new.parent_step_key,
            new.owner,
            new.start_node,
            now,
            now,
            now,
            new.lease_owner,
            lease_until,
        ),
    )
    return cur.rowcount == 1


def _requeue(conn: sqlite3.Connection, run_id: str, now: float) -> None:
    """Give queued steps of a run that goes on again the jobs they lost when it stopped
    (a failed run's jobs are deleted; a worker's result for a gone job is dropped)."""
    orphans = conn.execute(
        f"SELECT {convert.STEP_COLUMNS} FROM plait_steps s WHERE s.run_id = ? AND s.queued = 1"
        " AND s.status IN ('scheduled', 'running') AND NOT EXISTS (SELECT 1 FROM plait_jobs j"
        " WHERE j.run_id = s.run_id AND j.step_key = s.key)",
        (run_id,),
    ).fetchall()
    for row in orphans:
        step = convert.step_row(row)
        if step.status == "running":
            _close_attempt(conn, step, "interrupted", None, now)
            step.status, step.updated_at = "scheduled", now
            conn.execute(_UPSERT_STEP, convert.step_params(step))
        conn.execute(
            "INSERT INTO plait_jobs (run_id, step_key, function, available_at, created_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, step_key) DO NOTHING",
            (run_id, step.key, step.function, max(now, step.wake_at or now), now),
        )


def _release(conn: sqlite3.Connection, run_id: str, owner: str, seen: int, now: float) -> bool:
    """Give the run back: due again at once if someone woke it during the pass (its
    wake-up count moved from ``seen``), else when its earliest timer fires."""
    row = conn.execute(
        "UPDATE plait_runs SET lease_owner = NULL, lease_until = NULL, wake_at = CASE"
        " WHEN status != 'running' THEN NULL"
        " WHEN wakeups != ? THEN ?"
        " ELSE (SELECT min(wake_at) FROM plait_timers WHERE run_id = plait_runs.id) END"
        " WHERE id = ? AND lease_owner = ? RETURNING wake_at",
        (seen, now, run_id, owner),
    ).fetchone()
    return row is not None and row[0] is not None and row[0] <= now


def _require_status(
    conn: sqlite3.Connection, run_id: str, allowed: tuple[str, ...], action: str
) -> None:
    row = conn.execute("SELECT status FROM plait_runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise RunNotFoundError(run_id)
    if row[0] not in allowed:
        raise RunStateError(run_id, row[0], action)


def _load_run(conn: sqlite3.Connection, run_id: str) -> Run:
    return convert.run_record(convert.run_row(conn.execute(_SELECT_RUN, (run_id,)).fetchone()))


def _delete_job(conn: sqlite3.Connection, run_id: str, key: str) -> None:
    conn.execute("DELETE FROM plait_jobs WHERE run_id = ? AND step_key = ?", (run_id, key))


def _finish_attempt(
    conn: sqlite3.Connection, s: StepRow, status: str, error: str | None, now: float
) -> None:
    """An attempt's end: the step's columns it changes and the attempt on the row, in one
    statement. The row exists since the attempt's start was committed (the full upsert is
    the fallback, so nothing is lost if it does not)."""
    cur = conn.execute(
        "UPDATE plait_steps SET status = ?, output = ?, error = ?, attempts = ?, failures = ?,"
        " wake_at = ?, branch = ?, child_run_id = ?, updated_at = ?,"
        " attempt_status = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END,"
        " attempt_error = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END,"
        " attempt_finished = CASE WHEN attempt_status IS NULL THEN NULL ELSE ? END"
        " WHERE run_id = ? AND key = ?",
        (
            s.status,
            s.output,
            s.error,
            s.attempts,
            s.failures,
            s.wake_at,
            s.branch,
            s.child_run_id,
            s.updated_at,
            status,
            error,
            now,
            s.run_id,
            s.key,
        ),
    )
    if cur.rowcount == 0:
        conn.execute(_UPSERT_STEP, convert.step_params(s))


def _start_attempt(
    conn: sqlite3.Connection, step: StepRow, attempt: int, worker: str | None, now: float
) -> None:
    """Write the step with attempt ``attempt`` running on its row; the attempt the row
    held until now (if any) moves to plait_attempts first."""
    if attempt > 1:
        conn.execute(_ARCHIVE_ATTEMPT, (attempt - 1, step.run_id, step.key))
    conn.execute(_START_STEP, (*convert.step_params(step), worker, now))


def _close_attempt(
    conn: sqlite3.Connection, step: StepRow, status: str, error: str | None, now: float
) -> None:
    """End the attempt on the step row. A succeeded attempt's output is the step's own
    output, so only the status, error and end time are stored for it."""
    conn.execute(
        "UPDATE plait_steps SET attempt_status = ?, attempt_error = ?, attempt_finished = ?"
        " WHERE run_id = ? AND key = ? AND attempt_status IS NOT NULL",
        (status, error, now, step.run_id, step.key),
    )


def _apply(conn: sqlite3.Connection, run_id: str, ops: Iterable[Op], now: float) -> None:
    for op in ops:
        if isinstance(op, PutStep):
            conn.execute(_UPSERT_STEP, convert.step_params(op.step))
        elif isinstance(op, StartAttempt):
            _start_attempt(conn, op.step, op.attempt, op.worker, now)
        elif isinstance(op, FinishAttempt):
            _finish_attempt(conn, op.step, op.status, op.error, now)
        elif isinstance(op, SetTimer):
            conn.execute(
                "INSERT INTO plait_timers (run_id, step_key, purpose, wake_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (run_id, step_key) DO UPDATE SET purpose = excluded.purpose,"
                " wake_at = excluded.wake_at",
                (run_id, op.key, op.purpose, op.wake_at),
            )
        elif isinstance(op, ClearTimer):
            conn.execute(
                "DELETE FROM plait_timers WHERE run_id = ? AND step_key = ?", (run_id, op.key)
            )
        elif isinstance(op, EnqueueJob):
            conn.execute(
                "INSERT INTO plait_jobs (run_id, step_key, function, available_at, created_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, step_key) DO UPDATE SET"
                " function = excluded.function, available_at = excluded.available_at,"
                " lease_owner = NULL, lease_until = NULL",
                (run_id, op.key, op.function, op.available_at, now),
            )
        elif isinstance(op, ConsumeEvent):
            cur = conn.execute(
                "UPDATE plait_events SET consumed_by = ? WHERE id = ? AND consumed_by IS NULL",
                (op.key, op.event_id),
            )
            if cur.rowcount != 1:
                raise LeaseLostError(f"event {op.event_id} was consumed by another pass")
        elif isinstance(op, CreateChildRun):
            _insert_run(conn, op.run, now)
        elif isinstance(op, SetState):
            conn.execute(
                "INSERT INTO plait_state (run_id, name, value) VALUES (?, ?, ?)"
                " ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value",
                (run_id, op.name, op.value),
            )
        elif isinstance(op, EndRun):
            _end_run(conn, run_id, op.status, op.output, op.error, now, {"running"})
        else:  # pragma: no cover - a new op without a store implementation
            raise TypeError(f"unknown store operation {op!r}")


def _end_run(
    conn: sqlite3.Connection,
    run_id: str,
    status: str,
    output: str | None,
    error: str | None,
    now: float,
    from_statuses: set[str],
) -> list[str]:
    """Move a run to ``status`` if it is in ``from_statuses``; returns every run that moved
    (a cancel cascades to children). A terminal end settles the parent's step."""
    marks = ",".join("?" * len(from_statuses))
    row = conn.execute(
        f"UPDATE plait_runs SET status = ?, output = ?, error = ?, updated_at = ?, wake_at = NULL"
        f" WHERE id = ? AND status IN ({marks}) RETURNING parent_run_id, parent_step_key",
        (status, output, error, now, run_id, *from_statuses),
    ).fetchone()
    if row is None:
        return []
    moved = [run_id]
    if status == "suspended":
        return moved
    conn.execute("DELETE FROM plait_timers WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM plait_jobs WHERE run_id = ?", (run_id,))
    if status == "cancelled":
        children = conn.execute(
            "SELECT id FROM plait_runs WHERE parent_run_id = ?"
            " AND status IN ('running', 'suspended')",
            (run_id,),
        ).fetchall()
        for (child,) in children:
            moved += _end_run(conn, child, status, None, error, now, {"running", "suspended"})
    parent_id, parent_key = row
    if parent_id and parent_key:
        _settle_parent_step(conn, parent_id, parent_key, run_id, status, output, error, now)
    return moved


def _settle_parent_step(
    conn: sqlite3.Connection,
    parent_id: str,
    key: str,
    child_id: str,
    status: str,
    output: str | None,
    error: str | None,
    now: float,
) -> None:
    row = conn.execute(
        f"SELECT {convert.STEP_COLUMNS} FROM plait_steps WHERE run_id = ? AND key = ?",
        (parent_id, key),
    ).fetchone()
    if row is None:
        return
    step = convert.step_row(row)
    if step.child_run_id != child_id or step.status != "running":
        return
    if status == "completed":
        step.status, step.output, step.error = "succeeded", output, None
        outcome = "succeeded"
    else:
        child_error = serde.loads(error) or {}
        message = child_error.get("message", status)
        step.status, step.output = "failed", None
        step.failures += 1
        step.error = serde.dumps(
            {
                "message": f"child run {child_id} {status}: {message}",
                "type": "ChildRunError",
                "code": child_error.get("code") or "CHILD_FAILED",
                "child_run_id": child_id,
            }
        )
        outcome = "failed"
    step.updated_at = now
    conn.execute(_UPSERT_STEP, convert.step_params(step))
    _close_attempt(conn, step, outcome, step.error, now)
    conn.execute(_WAKE, (now, now, now, parent_id))
