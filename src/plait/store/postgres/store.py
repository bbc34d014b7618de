"""The shared store: PostgreSQL, for many workers on many machines.

Every store method is one SQL statement, so one round trip and one short transaction:
state changes that touch several rows (a pass's batch of writes, ending a run with its
cascade, reopening a run, sending an event, starting a queued attempt) are PL/pgSQL
functions (``sql/postgres/functions/``, applied when the store opens); the statements
themselves are named queries in ``sql/postgres/queries.sql``. No transaction stays open on
the client side, so none is ever held across user code or left behind by a dropped
connection. The functions decide nothing: a step's new status and every error record come
in as ops and ``StepEnd`` values from the runtime, so each rule is written once, in Python,
for every store.

Claims skip the rows other workers have locked (``SKIP LOCKED``): many workers poll the
same queue without queueing behind each other's row locks. A batch of a
pass locks its run row and checks the lease before it writes (the fence).

The methods are grouped by concern, one class per file: ``commit`` (a pass's writes),
``runs`` (creating and reading runs, loading passes), ``leases``, ``jobs`` (queued steps),
``queues`` (admission), ``schedules``, ``actions`` (from outside a pass), ``requests``
(requests with a reply, actions too) and ``versions``; ``PostgresStore`` is all of them,
opened, migrated and closed here. Values cross to and from PostgreSQL through ``codec``;
the pool is in ``pool``, LISTEN/NOTIFY in ``listen``.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

import asyncpg

from plait.clock import SYSTEM_CLOCK, Clock
from plait.notify import Notifier
from plait.records import Run
from plait.store import queries
from plait.store.migrations import functions, migrations
from plait.store.postgres.actions import Reopening
from plait.store.postgres.brakes import Brakes
from plait.store.postgres.caller import CallerTransactions
from plait.store.postgres.commit import Commits, first_attempts_statement, op_value
from plait.store.postgres.group import GroupCommit, Together
from plait.store.postgres.jobs import Jobs
from plait.store.postgres.leases import Leases
from plait.store.postgres.limits import Limits
from plait.store.postgres.listen import Listener
from plait.store.postgres.part import RunLock
from plait.store.postgres.pool import (
    DatabaseUnavailableError,
    Pool,
    describe,
    is_connection_error,
    split_url,
)
from plait.store.postgres.queues import Queues
from plait.store.postgres.requests import Requests
from plait.store.postgres.runs import Runs
from plait.store.postgres.schedules import Schedules
from plait.store.postgres.streams import Streams
from plait.store.postgres.versions import Versions
from plait.store.rows import NewRun

log = logging.getLogger("plait.store.postgres")

_MIGRATIONS = migrations("postgres")
#: the newest migration this code knows; the schema_version table says what a database has
SCHEMA_VERSION = _MIGRATIONS.latest
#: the functions (sql/postgres/functions/); the functions_version table says which a
#: database has
_FUNCTIONS = functions()

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,56}\Z")

_WARM_STATEMENTS = (
    "load_passes",
    "select_runs",
    "commit_batch",
    "commit_steps",
    "commit_and_release",
    "commit_group",
    "release_run",
    "claim_due_runs",
    "claim_due_passes",
)


class PostgresStore(
    Commits,
    Runs,
    Leases,
    Jobs,
    Queues,
    Schedules,
    Requests,
    Streams,
    Versions,
    Brakes,
    Limits,
    CallerTransactions,
):
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
        self._run_locks: dict[str, RunLock] = {}
        #: the batches of concurrent passes, committed together
        self._group = GroupCommit(
            self._pool, self._q["commit_group"], self._commit_held, op_value, self._read_clock
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
        #: reopens made at once (the lanes of a bulk retry), written together
        self._reopens: Together[Reopening, Run | None] = Together(
            self._reopen_one, self._reopen_many
        )

    @property
    def commits(self) -> int:
        """Write statements committed (each is one transaction), for the benchmarks."""
        return self._pool.commits

    # -- connections ---------------------------------------------------------------------
    def _read_clock(self) -> float:
        """The clock's time, for parts built once that must follow a clock set later."""
        return self._now()

    async def open(self) -> None:
        """Create the pool and bring the schema up to date."""
        self._listener.open()
        try:
            await self._pool.open()
            await self._migrate()
            first_attempts = self._q["commit_first_attempts"]
            consuming = self._q["commit_first_attempts_consuming"]
            self._pool.warm(
                [self._q[name] for name in _WARM_STATEMENTS]
                + [first_attempts_statement(first_attempts, rows) for rows in (1, 2)]
                # the step after a wait for an event: the wait's step and the next one
                + [first_attempts_statement(consuming, 2)]
            )
        except BaseException as exc:
            self._pool.terminate()
            if is_connection_error(exc):
                raise self._pool.unavailable(exc) from exc
            raise

    async def _migrate(self) -> None:
        """Apply the migrations this database lacks, then the functions if the ones it has
        are not this plait's, in one transaction, under an advisory lock so that processes
        starting together do not race. An up-to-date schema needs no DDL and no lock, so
        workers can run with plain read/write privileges."""
        q = self._q
        where = f"schema {self.schema!r} at {self._where}"
        async with self._pool.acquire() as conn:
            if await self._schema_version(conn) == SCHEMA_VERSION and not _FUNCTIONS.needed(
                await self._functions_version(conn), where=where
            ):
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
                await conn.execute(q["create_functions_version_table"])
                current = await self._schema_version(conn)
                channel = "'" + self.channel + "'"
                for migration in _MIGRATIONS.pending(current, where=where):
                    await conn.execute(migration.text(schema=self._ident, channel=channel))
                    await conn.execute(
                        q["record_schema_version"], migration.version, migration.description()
                    )
                    log.info("schema %s: migrated to version %d", self.schema, migration.version)
                if _FUNCTIONS.needed(await self._functions_version(conn), where=where):
                    names = list(_FUNCTIONS.names)
                    for drop in await conn.fetch(q["functions_to_drop"], self.schema, names):
                        await conn.execute(drop[0])
                    await conn.execute(_FUNCTIONS.text(schema=self._ident, channel=channel))
                    await conn.execute(
                        q["record_functions_version"], _FUNCTIONS.version, _FUNCTIONS.digest
                    )
                    log.info("schema %s: functions version %d", self.schema, _FUNCTIONS.version)

    async def _schema_version(self, conn: asyncpg.Connection) -> int:
        if await conn.fetchval(self._q["schema_version_table"]) is None:
            return 0
        return int(await conn.fetchval(self._q["schema_version"]))

    async def _functions_version(self, conn: asyncpg.Connection) -> tuple[int, str] | None:
        """The version and digest of the functions the database has; None: none yet."""
        if await conn.fetchval(self._q["functions_version_table"]) is None:
            return None
        row = await conn.fetchrow(self._q["functions_version"])
        return None if row is None else (int(row[0]), str(row[1]))

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


__all__ = ["SCHEMA_VERSION", "DatabaseUnavailableError", "PostgresStore"]
