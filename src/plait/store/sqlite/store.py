"""The embedded store: one SQLite file in WAL mode.

Each method is one function run in a transaction of the file's connections
(``writer.Connections``: one write connection with group commit, and readers); the row
changes several methods share are in ``apply``, and the statements themselves are named
queries in ``sql/sqlite/queries.sql``. The methods are grouped by concern, one class per
file: ``commit`` (a pass's writes), ``runs`` (creating and reading runs, loading passes),
``leases``, ``jobs`` (queued steps), ``queues`` (admission), ``schedules``, ``actions``
(from outside a pass), ``requests`` (requests with a reply) and ``versions``;
``SQLiteStore`` is all of them, opened, migrated and closed here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3

from plait.clock import SYSTEM_CLOCK, Clock
from plait.notify import Notifier
from plait.store import redact
from plait.store.migrations import migrations
from plait.store.sqlite.actions import Actions
from plait.store.sqlite.brakes import Brakes
from plait.store.sqlite.caller import CallerTransactions
from plait.store.sqlite.commit import Commits
from plait.store.sqlite.jobs import Jobs
from plait.store.sqlite.leases import Leases
from plait.store.sqlite.limits import Limits
from plait.store.sqlite.queues import Queues
from plait.store.sqlite.requests import Requests
from plait.store.sqlite.runs import Runs
from plait.store.sqlite.schedules import Schedules
from plait.store.sqlite.streams import Streams
from plait.store.sqlite.versions import Versions
from plait.store.sqlite.wake import WakeChannel
from plait.store.sqlite.writer import SQL, Connections, while_locked

log = logging.getLogger("plait.store.sqlite")

_MIGRATIONS = migrations("sqlite")
#: the schema version this code writes (a version-1 file is migrated when opened)
SCHEMA_VERSION = _MIGRATIONS.latest


class SQLiteStore(
    Commits,
    Runs,
    Leases,
    Jobs,
    Queues,
    Schedules,
    Actions,
    Requests,
    Streams,
    Versions,
    Brakes,
    Limits,
    CallerTransactions,
):
    """A store in one SQLite file (or in memory, for tests)."""

    def __init__(
        self,
        url: str,
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
        watch_interval: float = 0.05,
    ):
        if watch_interval <= 0:
            raise ValueError(f"invalid watch_interval: {watch_interval!r} (must be > 0)")
        self.url = url
        #: how often an idle process looks for other processes' commits: the safety net
        #: under the wake-up sockets (``wake``), which tell it at once
        self.watch_interval = float(watch_interval)
        self._wake: WakeChannel | None = None
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

    async def attach_notifier(self, notifier: Notifier, interval: float | None = None) -> None:
        """Wake this process when another process commits to the same file.

        SQLite has no LISTEN/NOTIFY. The processes of one file tell each other through
        datagram sockets (``wake``) what they publish after a commit; under that, the
        writer watches the file's data version (see ``Connections.watch``), every
        ``interval`` seconds while idle (``watch_interval`` unless told).
        """
        if self.memory:
            return
        loop = asyncio.get_running_loop()
        if self._wake is None:
            wake = WakeChannel(self.path)
            if wake.attach(notifier):
                self._wake = wake
                notifier.remote = wake.publish
        self._db.watch(
            lambda: loop.call_soon_threadsafe(notifier.everything_changed),
            self.watch_interval if interval is None else interval,
        )

    async def close(self) -> None:
        if self._wake is not None:
            self._wake.close()
            self._wake = None
        await self._db.close()


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


__all__ = ["SCHEMA_VERSION", "SQLiteStore"]
