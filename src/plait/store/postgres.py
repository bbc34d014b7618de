"""The shared store: PostgreSQL, for many workers on many machines.

Every store method is one SQL statement, so one round trip and one short transaction:
state changes that touch several rows (a pass's batch of writes, ending a run with its
cascade, resuming, retrying, sending an event, taking a queued step) are PL/pgSQL
functions installed by the migration (``sql/postgres_schema.sql``); the statements
themselves are in ``sql/postgres_queries.sql``. No transaction stays open on the client
side, so none is ever held across user code or left behind by a dropped connection.

Claims are ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n)``: many
workers poll the same queue without queueing behind each other's row locks. A batch of a
pass locks its run row and checks the lease before it writes (the fence).

Times cross the store boundary as unix seconds (floats), like the SQLite store, and are
``timestamptz`` in the database: a connection codec converts them, so SQL stays plain and
monitoring queries read real timestamps. JSON arrives as encoded text, is stored as
``jsonb`` and comes back as text, so ``store.convert`` works unchanged.

Wake-ups go over LISTEN/NOTIFY on one channel per schema: the functions NOTIFY in the
transaction that changes or wakes a run, so listeners hear of it the moment it commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import random
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from importlib import resources
from typing import Any

import asyncpg

from plait import serde
from plait.errors import (
    WORKFLOW_CANCELLED,
    LeaseLostError,
    PlaitError,
    RunNotFoundError,
    RunStateError,
    StepFunctionMismatchError,
)
from plait.notify import Notifier
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
    RunRow,
    SetState,
    SetTimer,
    StartAttempt,
    StepJob,
    StepRow,
)

__all__ = ["SCHEMA_VERSION", "DatabaseUnavailableError", "PostgresStore"]

log = logging.getLogger("plait.store.postgres")

#: the newest migration this code knows; the schema_version table says what a database has
SCHEMA_VERSION = 1
#: (version, file under store/sql, description); a new version appends a file here
_MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "postgres_schema.sql", "runs, steps, attempts, jobs, timers, events, state"),
)

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,56}\Z")
_URL_OPTIONS = ("schema", "min_size", "max_size")

# SQLSTATEs raised by the schema's functions
_LEASE_LOST = "PLT01"
_RUN_NOT_FOUND = "PLT02"
_RUN_STATE = "PLT03"
_FUNCTION_MISMATCH = "PLT04"

_RUN_FIELDS = len(dataclasses.fields(RunRow))
_STEP_FIELDS = len(dataclasses.fields(StepRow))
_DEADLOCK_RETRIES = 5
_WARM_STATEMENTS = ("load_pass", "commit_batch", "release_run", "claim_due_runs")
_LISTEN_KEEPALIVE = 10.0
_RECONNECT_MAX_DELAY = 5.0

# timestamptz travels as microseconds since 2000-01-01 UTC; plait speaks unix seconds
_PG_EPOCH_US = 946_684_800_000_000
_PG_INFINITY = 2**63 - 1


class DatabaseUnavailableError(PlaitError, ConnectionError):
    """PostgreSQL could not be reached, or the connection broke during a statement.

    The outcome of a write that fails this way is unknown (it may have committed). Worker
    loops log it and try again; the pool reconnects by itself once the server is back.
    """


def _encode_ts(value: float | datetime) -> tuple[int]:
    if isinstance(value, datetime):
        value = value.timestamp()
    return (round(value * 1_000_000) - _PG_EPOCH_US,)


def _decode_ts(value: tuple[int]) -> float:
    micros = value[0]
    if micros >= _PG_INFINITY:
        return float("inf")
    if micros <= -_PG_INFINITY:
        return float("-inf")
    # one integer addition, then one rounding: the nearest float to the stored microsecond
    return (micros + _PG_EPOCH_US) / 1_000_000


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """The pool's reset on release. asyncpg's default runs a reset query (one more round
    trip per statement); the store never leaves session state behind (no SET, no LISTEN,
    no cursors, only transaction-scoped advisory locks), and an open transaction is still
    rolled back by the pool before this is called."""


def _now() -> float:
    return time.time()


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    """The DSN for asyncpg and the plait options given in its query string (asyncpg would
    send unknown query parameters to the server as settings)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _URL_OPTIONS}
    rest = [(k, v) for k, v in query if k not in _URL_OPTIONS]
    dsn = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(rest)))
    return dsn, ours


def _describe(url: str) -> str:
    """host:port/database for messages, never the password."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path or '/'}"


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(
        exc,
        OSError
        | TimeoutError
        | asyncpg.PostgresConnectionError
        | asyncpg.exceptions.OperatorInterventionError
        | asyncpg.exceptions.InsufficientResourcesError
        # the protocol state machine of a connection the server dropped mid-statement
        | asyncpg.exceptions.InternalClientError,
    ):
        return True
    # a connection that closed, or was detached from its pool proxy as it closed
    return isinstance(exc, asyncpg.InterfaceError) and (
        "closed" in str(exc) or "released back to the pool" in str(exc)
    )


def _load_queries(schema: str) -> dict[str, str]:
    text = resources.files("plait.store").joinpath("sql/postgres_queries.sql").read_text()
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in [*text.splitlines(), "-- name: <end>"]:
        if line.startswith("-- name:"):
            if name is not None:
                queries[name] = "\n".join(lines).strip().replace("@schema@", schema)
            name, lines = line.split(":", 1)[1].strip(), []
        elif name is not None and not line.startswith("--"):
            lines.append(line)
    return queries


def _step_value(s: StepRow) -> tuple[Any, ...]:
    """A step as the steps table's row type (the column order of convert.STEP_COLUMNS)."""
    return convert.step_params(s, flag=bool)


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
    )


def _op_value(op: Op) -> tuple[Any, ...]:
    """An op as the schema's ``op`` type: (kind, step, attempt, worker, status, output,
    error, key, purpose, at, function, event_id, run, name)."""
    if isinstance(op, PutStep):
        return ("put_step", _step_value(op.step), *(None,) * 12)
    if isinstance(op, StartAttempt):
        return ("start_attempt", _step_value(op.step), op.attempt, op.worker, *(None,) * 10)
    if isinstance(op, FinishAttempt):
        return (
            "finish_attempt",
            _step_value(op.step),
            op.attempt,
            None,
            op.status,
            op.output,
            op.error,
            *(None,) * 7,
        )
    if isinstance(op, SetTimer):
        return ("set_timer", *(None,) * 6, op.key, op.purpose, op.wake_at, *(None,) * 4)
    if isinstance(op, ClearTimer):
        return ("clear_timer", *(None,) * 6, op.key, *(None,) * 6)
    if isinstance(op, EnqueueJob):
        return (
            "enqueue_job",
            *(None,) * 6,
            op.key,
            None,
            op.available_at,
            op.function,
            None,
            None,
            None,
        )
    if isinstance(op, ConsumeEvent):
        return ("consume_event", *(None,) * 6, op.key, *(None,) * 3, op.event_id, None, None)
    if isinstance(op, CreateChildRun):
        return ("create_child_run", *(None,) * 11, _new_run_value(op.run), None)
    if isinstance(op, SetState):
        # the value rides in the output column (both are jsonb)
        return ("set_state", *(None,) * 4, op.value, *(None,) * 7, op.name)
    if isinstance(op, EndRun):
        return ("end_run", None, None, None, op.status, op.output, op.error, *(None,) * 7)
    raise TypeError(f"unknown store operation {op!r}")  # pragma: no cover


def _run_row(rec: Any) -> RunRow:
    return RunRow(*tuple(rec)[:_RUN_FIELDS])


def _step_row(rec: Any) -> StepRow:
    return convert.step_row(tuple(rec)[:_STEP_FIELDS])


def _run(rec: Any) -> Run:
    return convert.run_record(_run_row(rec))


class _RunLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


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
    ) -> None:
        self.url = url
        self.dsn, from_url = _split_url(url)
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
        self._q = _load_queries(self._ident)
        self._where = _describe(url)
        self._pool: asyncpg.Pool | None = None
        self._notifier: Notifier | None = None
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._listen_conn: asyncpg.Connection | None = None
        self._outbox: dict[str, None] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        #: (run_id, lease owner) of passes whose write failed with an unknown outcome
        self._tainted: set[tuple[str, str]] = set()
        #: per run, the writes of its lease holder in this process, in the order issued
        self._run_locks: dict[str, _RunLock] = {}
        #: write statements committed (each is one transaction), for the benchmarks
        self.commits = 0
        #: set once the schema exists: new connections then prepare the hot statements
        self._ready = False

    # -- connections ---------------------------------------------------------------------
    async def open(self) -> None:
        """Create the pool and bring the schema up to date."""
        self._closing = False
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                init=self._init_connection,
                reset=_keep_session,
                command_timeout=self.command_timeout,
                timeout=self.connect_timeout,
                statement_cache_size=self.statement_cache_size,
            )
            await self._migrate()
            self._ready = True
        except BaseException as exc:
            if self._pool is not None:
                self._pool.terminate()
                self._pool = None
            if _is_connection_error(exc):
                raise self._unavailable(exc) from exc
            raise

    async def _init_connection(self, conn: asyncpg.Connection) -> None:
        # every connection, including the ones the pool opens after a server restart
        await conn.set_type_codec(
            "timestamptz",
            schema="pg_catalog",
            encoder=_encode_ts,
            decoder=_decode_ts,
            format="tuple",
        )
        if self._ready and self.statement_cache_size:
            # The first use of a statement with the schema's composite types makes asyncpg
            # look the types up (a few ms); do it now rather than in a pass's first commit.
            # (Not without a statement cache: that is for poolers that forbid named ones.)
            for name in _WARM_STATEMENTS:
                await conn.prepare(self._q[name])

    async def _migrate(self) -> None:
        """Apply the migrations this database lacks, one transaction, under an advisory
        lock so that processes starting together do not race. An up-to-date schema needs
        no DDL and no lock, so workers can run with plain read/write privileges."""
        pool = self._require_pool()
        async with pool.acquire() as conn:
            if await self._schema_version(conn) == SCHEMA_VERSION:
                return
            async with conn.transaction():
                key = int.from_bytes(
                    hashlib.blake2b(f"plait:{self.schema}".encode(), digest_size=8).digest(),
                    "big",
                    signed=True,
                )
                await conn.execute("SELECT pg_advisory_xact_lock($1)", key)
                exists = await conn.fetchval(
                    "SELECT 1 FROM pg_namespace WHERE nspname = $1", self.schema
                )
                if not exists:
                    await conn.execute(f"CREATE SCHEMA {self._ident}")
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._ident}.schema_version ("
                    " version integer PRIMARY KEY, description text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
                current = await self._schema_version(conn)
                if current > SCHEMA_VERSION:
                    raise RuntimeError(
                        f"schema {self.schema!r} at {self._where} has version {current}, "
                        f"newer than this plait ({SCHEMA_VERSION}); upgrade plait"
                    )
                channel = "'" + self.channel + "'"
                for version, filename, description in _MIGRATIONS:
                    if version <= current:
                        continue
                    script = resources.files("plait.store").joinpath(f"sql/{filename}")
                    sql = (
                        script.read_text()
                        .replace("@schema@", self._ident)
                        .replace("@channel@", channel)
                    )
                    await conn.execute(sql)
                    await conn.execute(
                        f"INSERT INTO {self._ident}.schema_version (version, description)"
                        " VALUES ($1, $2)",
                        version,
                        description,
                    )
                    log.info("schema %s: migrated to version %d", self.schema, version)

    async def _schema_version(self, conn: asyncpg.Connection) -> int:
        table = await conn.fetchval("SELECT to_regclass($1)", f"{self._ident}.schema_version")
        if table is None:
            return 0
        return int(
            await conn.fetchval(
                f"SELECT coalesce(max(version), 0) FROM {self._ident}.schema_version"
            )
        )

    async def close(self) -> None:
        self._closing = True
        for task in (self._listener, self._flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._listener = self._flusher = None
        if self._notifier is not None and self._notifier.remote == self._publish:
            self._notifier.remote = None
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=10)
            except (TimeoutError, Exception):
                pool.terminate()

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the PostgreSQL store is not open")
        return self._pool

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailableError:
        return DatabaseUnavailableError(
            f"PostgreSQL at {self._where} is unavailable ({type(exc).__name__}: {exc})"
        )

    async def _call(self, method: str, query: str, *args: Any, read: bool = False) -> Any:
        """Run one statement on a pooled connection (its own implicit transaction).

        A deadlock or serialization failure rolled everything back, so the statement is
        simply run again. A broken connection leaves a write's outcome unknown: it is
        reported as DatabaseUnavailableError for the caller's loop to retry, except that
        a read, or a statement that never left, is tried once more at once (the pool
        replaces a connection the server dropped while it was idle)."""
        pool = self._require_pool()
        tries = 0
        while True:
            tries += 1
            try:
                async with pool.acquire() as conn:
                    try:
                        result = await getattr(conn, method)(query, *args)
                        if not read:
                            self.commits += 1
                        return result
                    except BaseException as exc:
                        if _is_connection_error(exc):
                            # never hand a connection in an unknown state back to the pool
                            # (a lost one is already detached: nothing left to do then)
                            with contextlib.suppress(Exception):
                                conn.terminate()
                        raise
            except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                if tries >= _DEADLOCK_RETRIES:
                    raise
                await asyncio.sleep(random.uniform(0.001, 0.01) * tries)
            except Exception as exc:
                if not _is_connection_error(exc):
                    raise
                # A connection the server had just dropped fails before the statement is
                # sent (asyncpg's protocol refuses to start it): safe to retry on another.
                unsent = isinstance(exc, asyncpg.exceptions.InternalClientError)
                if (read or unsent) and tries == 1:
                    continue
                raise self._unavailable(exc) from exc

    # -- wake-ups ------------------------------------------------------------------------------
    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up right now (it reconnects by itself)."""
        conn = self._listen_conn
        return conn is not None and not conn.is_closed()

    async def attach_notifier(self, notifier: Notifier) -> None:
        """LISTEN on this schema's channel and feed what arrives into ``notifier``; what
        the engine publishes is NOTIFY'd to the other processes. Returns once listening
        (or after a few seconds if the server cannot be reached: it keeps trying)."""
        self._notifier = notifier
        notifier.remote = self._publish
        if not self.listen or self._listener is not None:
            return
        self._listening.clear()
        self._listener = asyncio.create_task(self._listen_loop(), name="plait-pg-listen")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), self.connect_timeout)

    async def _listen_loop(self) -> None:
        """One connection outside the pool, kept LISTENing; when it drops, reconnect with
        backoff. Notifications sent while it was away are lost, so after a reconnect every
        loop is kicked to look at the database (the slow poll covers waiting callers)."""
        delay = 0.1
        connected_before = False
        while not self._closing:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.dsn, timeout=self.connect_timeout)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(self.channel, self._on_notify)
                self._listen_conn = conn
                self._listening.set()
                if connected_before and self._notifier is not None:
                    log.info("listening on %s again", self._where)
                    self._everything_changed(self._notifier)
                connected_before, delay = True, 0.1
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), _LISTEN_KEEPALIVE)
                    if not lost.is_set():
                        # a server that vanished without closing the socket shows up here
                        await conn.fetchval("SELECT 1", timeout=_LISTEN_KEEPALIVE)
                if not self._closing:
                    log.warning("LISTEN connection to %s was closed; reconnecting", self._where)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self._closing:
                    log.warning(
                        "LISTEN connection to %s failed (%s: %s); reconnecting in %.1fs",
                        self._where,
                        type(exc).__name__,
                        exc,
                        delay,
                    )
            finally:
                self._listen_conn = None
                if conn is not None:
                    conn.terminate()
            if self._closing:
                return
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(_RECONNECT_MAX_DELAY, delay * 2)

    @staticmethod
    def _everything_changed(notifier: Notifier) -> None:
        """After notifications may have been missed: every loop and every waiter looks."""
        notifier.everything_changed()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        notifier = self._notifier
        if notifier is None:
            return
        if payload == "work":
            notifier.local_work()
        elif payload.startswith("run:"):
            notifier.local_run_changed(payload[4:])

    def _publish(self, kind: str, value: str) -> None:
        """Notifier.remote: NOTIFY what this process published. Calls are gathered and
        sent as one statement by a background task; a lost one is covered by polling."""
        self._outbox["work" if kind == "work" else f"run:{value}"] = None
        if self._pool is not None and (self._flusher is None or self._flusher.done()):
            self._flusher = asyncio.get_running_loop().create_task(self._flush_outbox())

    async def _flush_outbox(self) -> None:
        while self._outbox and not self._closing:
            payloads, self._outbox = list(self._outbox), {}
            try:
                await self._call("execute", self._q["notify"], self.channel, payloads)
            except Exception as exc:
                log.debug("NOTIFY failed (%s); listeners fall back to polling", exc)

    # -- runs ----------------------------------------------------------------------------------
    async def create_run(self, new: NewRun) -> tuple[Run, bool]:
        row = await self._call("fetchrow", self._q["create_run"], _new_run_value(new), _now())
        return _run(row["run"]), bool(row["created"])

    async def get_run(self, run_id: str) -> Run | None:
        rec = await self._call("fetchval", self._q["select_run"], run_id, read=True)
        return _run(rec) if rec is not None else None

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
        where: list[str] = []
        params: list[Any] = []
        if visible_to is not None:
            params.append(visible_to)
            where.append(f"(owner IS NULL OR owner = ${len(params)})")
        for column, value in (
            ("workflow", workflow),
            ("status", status),
            ("version", version),
            ("owner", owner),
            ("parent_run_id", parent_run_id),
        ):
            if value is not None:
                params.append(value)
                where.append(f"{column} = ${len(params)}")
        clause = " AND ".join(where) or "true"
        n = len(params)
        query = (
            f"SELECT (SELECT count(*) FROM {self._ident}.runs WHERE {clause}) AS total,"
            f" ARRAY(SELECT r FROM {self._ident}.runs r WHERE {clause}"
            f" ORDER BY r.created_at DESC, r.id DESC LIMIT ${n + 1} OFFSET ${n + 2}) AS runs"
        )
        row = await self._call("fetchrow", query, *params, limit, offset, read=True)
        return [_run(r) for r in row["runs"]], int(row["total"])

    async def get_children(self, run_id: str) -> list[Run]:
        runs, _ = await self.list_runs(parent_run_id=run_id, limit=10_000)
        return sorted(runs, key=lambda r: r.created_at)

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
        row = await self._call("fetchrow", self._q["load_pass"], run_id, read=True)
        if row is None:
            return None
        # a new pass of this run starts: an earlier pass's failed write no longer matters
        if self._tainted:
            self._tainted = {t for t in self._tainted if t[0] != run_id}
        steps = {}
        for rec in row["steps"]:
            step = _step_row(rec)
            steps[step.key] = step
        events = [EventRow(e["id"], e["name"], e["payload"]) for e in row["events"]]
        state = {s["name"]: s["value"] for s in row["state"]}
        return PassSnapshot(_run_row(row["r"]), steps, events, state)

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        now = _now()
        got = await self._call(
            "fetchval", self._q["claim_run"], run_id, owner, now + lease_seconds, now
        )
        return got is not None

    async def claim_due_runs(self, owner: str, lease_seconds: float, limit: int) -> list[str]:
        now = _now()
        rows = await self._call(
            "fetch", self._q["claim_due_runs"], owner, now + lease_seconds, now, limit
        )
        return [r["id"] for r in rows]

    async def commit(self, batch: Batch) -> bool:
        """All ops of the batch in one transaction, fenced by the run lease.

        If a fenced write fails with an unknown outcome (the connection broke), the pass
        that sent it cannot know what the database holds, and a later write of the same
        pass (say, recording the run as failed because of that very error) could land
        once the server is back. So the store refuses further writes of that pass: it
        ends as a crashed pass and the run is replayed from what was really committed.
        """
        if not batch.ops and batch.release is None:
            return False
        ops = [_op_value(op) for op in batch.ops]
        async with self._in_order(batch.run_id):
            if batch.fence is not None and (batch.run_id, batch.fence) in self._tainted:
                raise DatabaseUnavailableError(
                    f"an earlier write of this pass of run {batch.run_id} failed; "
                    "the run will be replayed"
                )
            try:
                if batch.release is None:
                    await self._call(
                        "execute", self._q["commit_batch"], batch.run_id, batch.fence, ops, _now()
                    )
                    return False
                return bool(
                    await self._call(
                        "fetchval",
                        self._q["commit_and_release"],
                        batch.run_id,
                        batch.fence,
                        ops,
                        _now(),
                        batch.release,
                    )
                )
            except asyncpg.PostgresError as exc:
                # the server answered: the transaction was rolled back, nothing is unknown
                if exc.sqlstate == _LEASE_LOST:
                    raise LeaseLostError(exc.args[0] if exc.args else str(exc)) from None
                raise
            except BaseException:
                # no answer (connection lost, timeout, cancelled in flight): unknown outcome
                if batch.fence is not None:
                    self._tainted.add((batch.run_id, batch.fence))
                raise

    async def release_run(self, run_id: str, owner: str, wakeups_seen: int) -> bool:
        async with self._in_order(run_id):
            due = await self._call(
                "fetchval", self._q["release_run"], run_id, owner, wakeups_seen, _now()
            )
        return bool(due)

    @contextlib.asynccontextmanager
    async def _in_order(self, run_id: str) -> AsyncIterator[None]:
        """Apply this process's writes to one run in the order they were issued, as the
        SQLite store's single writer does. Pool connections would otherwise let a later
        write overtake one still in flight: a pass cancelled twice releases its lease while
        its shielded last flush is running (the flush then finds the lease gone), and a
        cancel returns before the cancelled step's record lands."""
        entry = self._run_locks.get(run_id)
        if entry is None:
            entry = self._run_locks[run_id] = _RunLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if not entry.users:
                del self._run_locks[run_id]

    async def renew_leases(self, owner: str, lease_seconds: float) -> set[str]:
        rows = await self._call("fetch", self._q["renew_leases"], owner, _now() + lease_seconds)
        return {r["id"] for r in rows}

    async def leases_of(self, worker_id: str, owner: str) -> list[tuple[Any, ...]]:
        """Leases held under ``worker_id`` by other processes than ``owner`` (an earlier
        life of a restarted worker, or a twin still draining), as (kind, run_id, step_key,
        lease_owner, lease_until) with kind ``run`` or ``job``."""
        rows = await self._call("fetch", self._q["leases_of"], f"{worker_id}#", owner, read=True)
        return [tuple(r) for r in rows]

    async def expire_leases(self, leases: Sequence[tuple[Any, ...]]) -> int:
        """Expire the given leases if nobody renewed them since they were read: their
        holder is dead, so its runs and steps are taken over now instead of at expiry."""
        if not leases:
            return 0
        kinds, run_ids, keys, owners, untils = (list(col) for col in zip(*leases, strict=True))
        expired = await self._call(
            "fetchval", self._q["expire_leases"], kinds, run_ids, keys, owners, untils, 0.0
        )
        return int(expired)

    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int:
        """Re-drive runs that are ``running`` with nothing that will ever wake them (a
        safety net: state changes and their wake-ups are committed together); each run's
        sweeps back off from ``base`` seconds doubling up to ``cap``."""
        swept = int(await self._call("fetchval", self._q["sweep_idle"], _now(), cap, base, limit))
        if swept:
            self._publish("work", "")
        return swept

    async def next_due(self, functions: Sequence[str] | None = None) -> float | None:
        """When the next run pass (``functions`` None) or job for ``functions`` is due,
        counting a leased one as due when its lease runs out."""
        if functions is None:
            due = await self._call("fetchval", self._q["next_due_runs"], read=True)
        else:
            due = await self._call("fetchval", self._q["next_due_jobs"], list(functions), read=True)
        return float(due) if due is not None else None

    # -- queued steps ----------------------------------------------------------------------------
    async def claim_step_jobs(
        self, owner: str, lease_seconds: float, limit: int, functions: Sequence[str]
    ) -> list[StepJob]:
        if not functions:
            return []
        now = _now()
        rows = await self._call(
            "fetch",
            self._q["claim_step_jobs"],
            owner,
            now + lease_seconds,
            now,
            limit,
            list(functions),
        )
        return [StepJob(r["run_id"], r["step_key"], r["function"], r["deliveries"]) for r in rows]

    async def begin_queued_step(
        self, job: StepJob, owner: str, lease_seconds: float
    ) -> StepRow | None:
        try:
            row = await self._call(
                "fetchrow",
                self._q["begin_queued_step"],
                job.run_id,
                job.step_key,
                job.function,
                owner,
                _now(),
            )
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == _FUNCTION_MISMATCH:
                # rejected: the job goes back under the step's own function
                await self._call("execute", self._q["repair_job"], job.run_id, job.step_key)
                raise StepFunctionMismatchError(exc.args[0] if exc.args else str(exc)) from None
            raise
        if row is None or row["run_id"] is None:
            return None
        return _step_row(row)

    async def finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        values = [_op_value(op) for op in ops]
        async with self._in_order(job.run_id):
            done = await self._call(
                "fetchval",
                self._q["finish_queued_step"],
                job.run_id,
                job.step_key,
                owner,
                values,
                _now(),
            )
        return bool(done)

    async def drop_job(self, job: StepJob) -> None:
        await self._call("execute", self._q["drop_job"], job.run_id, job.step_key)

    # -- actions from outside a pass -------------------------------------------------------------
    async def wake(self, run_id: str, at: float | None = None) -> None:
        now = _now()
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

    async def cancel_run(self, run_id: str, reason: str | None) -> list[str]:
        error = serde.dumps(
            {"message": reason or "cancelled", "type": "Cancel", "code": WORKFLOW_CANCELLED}
        )
        moved = await self._action(
            "cancel", run_id, "fetchval", self._q["cancel_run"], error, _now()
        )
        return list(moved or [])

    async def resume_run(self, run_id: str) -> Run:
        rec = await self._action("resume", run_id, "fetchval", self._q["resume_run"], _now())
        return _run(rec)

    async def retry_run(self, run_id: str) -> Run:
        rec = await self._action("retry", run_id, "fetchval", self._q["retry_run"], _now())
        return _run(rec)

    async def send_event(self, run_id: str, name: str, payload: str | None) -> None:
        await self._action(
            f"send event {name!r} to",
            run_id,
            "execute",
            self._q["send_event"],
            name,
            payload,
            _now(),
        )

    # -- versions --------------------------------------------------------------------------------
    async def put_version(
        self, workflow: str, version: str, kind: str, definition: str | None, status: str
    ) -> None:
        await self._call(
            "execute",
            self._q["put_version"],
            workflow,
            version,
            kind,
            definition,
            status,
            _now(),
        )

    async def get_version(self, workflow: str, version: str) -> dict[str, Any] | None:
        rows = await self._versions(workflow, version, None)
        return rows[0] if rows else None

    async def list_versions(
        self, workflow: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        return await self._versions(workflow, None, status)

    async def _versions(
        self, workflow: str | None, version: str | None, status: str | None
    ) -> list[dict[str, Any]]:
        rows = await self._call(
            "fetch", self._q["list_versions"], workflow, version, status, read=True
        )
        return [
            {
                "workflow": r["workflow"],
                "version": r["version"],
                "kind": r["kind"],
                "definition": json.loads(r["definition"]) if r["definition"] else None,
                "status": r["status"],
                "created_at": convert.ts(r["created_at"]),
                "updated_at": convert.ts(r["updated_at"]),
            }
            for r in rows
        ]
