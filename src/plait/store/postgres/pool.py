"""The PostgreSQL connections: the pool, its connection set-up, and what errors mean.

Times cross the store boundary as unix seconds (floats), like the SQLite store, and are
``timestamptz`` in the database: a codec (``codec.set_codecs``) installed on every
connection converts them, so SQL stays plain and monitoring queries read real timestamps.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import urllib.parse
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import asyncpg

from plait.cancel_guard import cut_short, take_back
from plait.errors import PlaitError
from plait.store.postgres.codec import set_codecs

#: the plait options a URL's query string may carry (asyncpg would send them to the server)
URL_OPTIONS = ("schema", "min_size", "max_size")
_DEADLOCK_RETRIES = 5


class DatabaseUnavailableError(PlaitError, ConnectionError):
    """PostgreSQL could not be reached, or the connection broke during a statement.

    The outcome of a write that fails this way is unknown (it may have committed). Worker
    loops log it and try again; the pool reconnects by itself once the server is back.
    """


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """The pool's reset on release. asyncpg's default runs a reset query (one more round
    trip per statement); the store never leaves session state behind (no SET, no LISTEN,
    no cursors, only transaction-scoped advisory locks), and an open transaction is still
    rolled back by the pool before this is called."""


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The DSN for asyncpg and the plait options given in its query string (asyncpg would
    send unknown query parameters to the server as settings)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in URL_OPTIONS}
    rest = [(k, v) for k, v in query if k not in URL_OPTIONS]
    dsn = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(rest)))
    return dsn, ours


def describe(url: str) -> str:
    """host:port/database for messages, never the password."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path or '/'}"


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the server is out of reach (rather than that it refused)."""
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


def _usable(conn: Any) -> bool:
    """Whether a kept pool connection is still open and still lent to us: asyncpg takes
    back a pooled connection that closed, and its proxy then refuses every call."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False


class Pool:
    """An asyncpg pool whose every statement is one implicit transaction, retried where
    that is safe and reported as DatabaseUnavailableError where the outcome is unknown."""

    def __init__(
        self,
        dsn: str,
        *,
        where: str,
        min_size: int,
        max_size: int,
        command_timeout: float | None,
        connect_timeout: float,
        statement_cache_size: int,
    ) -> None:
        self.dsn = dsn
        #: host:port/database, for messages
        self.where = where
        self.min_size = min_size
        self.max_size = max_size
        self.command_timeout = command_timeout
        self.connect_timeout = connect_timeout
        self.statement_cache_size = statement_cache_size
        #: write statements committed (each is one transaction), for the benchmarks
        self.commits = 0
        #: the connection ``call_held`` keeps between calls (a proxy of the pool's)
        self._held: Any = None
        #: connections ``call`` took from the pool and keeps between calls, idle now
        self._idle: list[Any] = []
        #: connections taken from the pool and not given back (kept, held or in a call)
        self._out = 0
        #: callers waiting for a connection while all max_size are out: each gets a kept
        #: one, or None (take one from the pool: one was given back)
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        #: hand-backs to the pool under way (the pool finishes a cancelled statement first)
        self._dropping: set[asyncio.Future[Any]] = set()
        self._pool: asyncpg.Pool | None = None
        #: when (event loop time) the call on the held connection started; None between calls
        self._held_since: float | None = None
        #: the task making that call
        self._held_task: asyncio.Task[Any] | None = None
        #: the one timer that watches held calls for command_timeout (see call_held)
        self._watch: asyncio.TimerHandle | None = None
        #: the task whose call on the held connection the watch cut short (it took longer
        #: than command_timeout), until that call has raised
        self._timed_out: asyncio.Task[Any] | None = None
        #: statements each new connection prepares, once the schema exists
        self._warm: tuple[str, ...] = ()

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(
            self.dsn,
            min_size=self.min_size,
            max_size=self.max_size,
            init=self._init_connection,
            reset=_keep_session,
            # each call passes command_timeout itself, but call_held (see there)
            command_timeout=None,
            timeout=self.connect_timeout,
            statement_cache_size=self.statement_cache_size,
        )

    def warm(self, statements: Sequence[str]) -> None:
        """Have every connection opened from now on prepare ``statements``.

        The first use of a statement with the schema's composite types makes asyncpg look
        the types up (a few ms); a new connection does it before it is handed out rather
        than in a pass's first commit. (Not without a statement cache: that is for poolers
        that forbid named statements.)
        """
        self._warm = tuple(statements) if self.statement_cache_size else ()

    async def _init_connection(self, conn: asyncpg.Connection) -> None:
        # every connection, including the ones the pool opens after a server restart
        await set_codecs(conn)
        for statement in self._warm:
            await conn.prepare(statement)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncGenerator[Any, None]:
        """A connection of the pool, as ``async with pool.acquire() as conn``: one the
        calls keep, or a new one, counted with theirs (asyncpg's pool would wait for
        connections the calls never give back to it)."""
        conn = await self._take()
        try:
            yield conn
        except BaseException as exc:
            self._give_back(conn, exc)
            raise
        self._give_back(conn, None)

    def terminate(self) -> None:
        """Drop every connection at once (a failed open)."""
        self._stop_watch()
        self._held = None
        self._idle.clear()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()

    async def close(self) -> None:
        self._stop_watch()
        kept = [*self._idle, *([self._held] if self._held is not None else [])]
        self._idle.clear()
        self._held = None
        for conn in kept:
            if self._pool is not None:
                with contextlib.suppress(Exception):
                    await self._pool.release(conn)
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=10)
            except (TimeoutError, Exception):
                pool.terminate()

    def _require(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the PostgreSQL store is not open")
        return self._pool

    def unavailable(self, exc: BaseException) -> DatabaseUnavailableError:
        return DatabaseUnavailableError(
            f"PostgreSQL at {self.where} is unavailable ({type(exc).__name__}: {exc})"
        )

    async def call(self, method: str, query: str, *args: Any, read: bool = False) -> Any:
        """Run one statement on a pooled connection (its own implicit transaction).

        A deadlock or serialization failure rolled everything back, so the statement is
        simply run again. A broken connection leaves a write's outcome unknown: it is
        reported as DatabaseUnavailableError for the caller's loop to retry, except that
        a read, or a statement that never left, is tried once more at once (the pool
        replaces a connection the server dropped while it was idle).

        A connection that answered is kept for the next call rather than handed back to
        asyncpg's pool: a hand-back costs a task and turns of the event loop, more than
        a short statement's own work. One whose state is unknown after a call (cut off,
        cancelled mid-statement) goes back to the pool, which waits for it to be idle.
        """
        tries = 0
        while True:
            tries += 1
            conn = None
            try:
                conn = await self._take()
                result = await getattr(conn, method)(query, *args, timeout=self.command_timeout)
            except BaseException as exc:
                if conn is not None:
                    self._give_back(conn, exc)
                if not isinstance(exc, Exception):
                    raise
                await self._again_or_raise(exc, tries, read)
                continue
            if not read:
                self.commits += 1
            self._give_back(conn, None)
            return result

    async def _take(self) -> Any:
        """A connection for one call: a kept one, else one from the pool, else (all
        max_size are out) the next one a call gives back."""
        while True:
            conn = self._take_idle()
            if conn is not None:
                return conn
            if self._out < self.max_size:
                self._out += 1
                try:
                    return await self._require().acquire()
                except BaseException:
                    self._out -= 1
                    self._wake_one(None)
                    raise
            waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                conn = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    # woken as we were cancelled: pass on what we were handed
                    handed = waiter.result()
                    if handed is not None:
                        self._keep(handed)
                    else:
                        self._wake_one(None)
                raise
            if conn is not None:
                return conn

    def _take_idle(self) -> Any:
        """A kept connection that is still usable, or None."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            if _usable(conn):
                return conn
            self._forget(conn)
        return None

    def _forget(self, conn: Any) -> None:
        """A kept connection the server ended while it sat here (the pool has taken it
        back): no longer counted as out."""
        self._out -= 1
        with contextlib.suppress(Exception):
            conn.terminate()

    def _give_back(self, conn: Any, exc: BaseException | None) -> None:
        """A connection after its use ended (with ``exc``, or None): kept while it is
        known to be idle (it answered, is still open, and has no transaction left open),
        else handed back to the pool, or ended if it broke."""
        answered = exc is None or isinstance(exc, asyncpg.PostgresError)
        if answered and _usable(conn) and not conn.is_in_transaction():
            self._keep(conn)
        else:
            self._drop_held(conn, broken=exc is not None and is_connection_error(exc))

    def _keep(self, conn: Any) -> None:
        """A connection known to be idle: to a waiting caller, or kept for the next."""
        if not self._wake_one(conn):
            self._idle.append(conn)

    def _wake_one(self, conn: Any) -> bool:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    async def call_held(self, method: str, query: str, *args: Any) -> Any:
        """As ``call`` for a write, on a connection kept from one call to the next.

        For a caller that makes one call at a time (the group commit has one send in
        flight): taking a connection from the pool and giving it back costs more Python
        and more turns of the event loop than the statement's own work (asyncpg hands a
        connection back through a task of its own), and a sequential workflow paid it on
        every step. A connection whose state is unknown after a call (cut off, cancelled
        mid-statement) is not kept; the next call takes a fresh one.

        For the same reason its calls set no timer of their own for command_timeout
        (asyncpg's costs a sequential step more than the rest of the round trip's
        Python): one timer watches them all (``_watch_held``). A call that takes longer
        is cut short as asyncpg's timeout does it (its task is cancelled, so the driver
        asks the server to cancel the statement) and fails as a lost connection: its
        outcome is unknown.
        """
        if self.max_size < 2:  # the pool's only connection stays the pool's
            return await self.call(method, query, *args)
        tries = 0
        while True:
            tries += 1
            conn = self._held
            if conn is not None and not _usable(conn):
                self._forget(conn)
                conn = self._held = None
            try:
                if conn is None:
                    conn = self._held = await self._take()
                self._watch_held()  # the watch looks at this await only
                try:
                    result = await getattr(conn, method)(query, *args)
                finally:
                    self._held_since = self._held_task = None
                self.commits += 1
                return result
            except BaseException as exc:
                if conn is not None and not isinstance(exc, asyncpg.PostgresError):
                    # the server did not answer this statement: the connection is not
                    # known to be idle, so the pool gets it back (or its end)
                    self._drop_held(conn, broken=is_connection_error(exc))
                timed_out, self._timed_out = self._timed_out, None
                if (
                    timed_out is not None
                    and timed_out is asyncio.current_task()
                    and isinstance(exc, asyncio.CancelledError)
                    # the watch's own cancel taken back: none other came (a task that
                    # holds cancels back has them noted apart, and raised once the
                    # write's outcome is known)
                    and take_back(timed_out) == 0
                ):
                    raise self.unavailable(
                        TimeoutError(
                            f"a statement took longer than command_timeout "
                            f"({self.command_timeout:g} s)"
                        )
                    ) from None
                if not isinstance(exc, Exception):
                    raise
                await self._again_or_raise(exc, tries, read=False)

    def _watch_held(self) -> None:
        """Note that a held call starts now, and have the watch look at it once its
        command_timeout is up (one timer, set again only when it goes off)."""
        if self.command_timeout is None:
            return
        loop = asyncio.get_running_loop()
        self._held_since = loop.time()
        self._held_task = asyncio.current_task()
        if self._watch is None:
            self._watch = loop.call_at(self._held_since + self.command_timeout, self._look)

    def _look(self) -> None:
        """The watch went off: cut the held call short if it has run out of time, else
        look again when the call now in flight (if any) runs out."""
        self._watch = None
        since, timeout, task = self._held_since, self.command_timeout, self._held_task
        if since is None or timeout is None or task is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < since + timeout:
            self._watch = loop.call_at(since + timeout, self._look)
        else:
            self._timed_out = task
            cut_short(task)  # the driver then asks the server to cancel the statement

    def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _drop_held(self, conn: Any, *, broken: bool) -> None:
        """Give a connection whose state is unknown back to the pool (or end it), and let
        a waiting caller take a fresh one in its place."""
        if self._held is conn:
            self._held = None
        self._out -= 1
        if broken:
            with contextlib.suppress(Exception):
                conn.terminate()
        elif self._pool is not None:
            # the pool waits for a cancelled statement to end before it lends it again
            dropping = asyncio.ensure_future(self._pool.release(conn))
            self._dropping.add(dropping)
            dropping.add_done_callback(self._dropping.discard)
        self._wake_one(None)

    async def _again_or_raise(self, exc: Exception, tries: int, read: bool) -> None:
        """Return to run the statement again, or raise what the caller should see."""
        if isinstance(exc, asyncpg.DeadlockDetectedError | asyncpg.SerializationError):
            if tries >= _DEADLOCK_RETRIES:
                raise exc
            await asyncio.sleep(random.uniform(0.001, 0.01) * tries)
            return
        if not is_connection_error(exc):
            raise exc
        # A connection the server had just dropped fails before the statement is sent
        # (asyncpg's protocol refuses to start it): safe to retry on another.
        unsent = isinstance(exc, asyncpg.exceptions.InternalClientError)
        if (read or unsent) and tries == 1:
            return
        raise self.unavailable(exc) from exc


__all__ = [
    "URL_OPTIONS",
    "DatabaseUnavailableError",
    "Pool",
    "describe",
    "is_connection_error",
    "split_url",
]
