"""The connections of one SQLite file: one write connection with group commit, and readers.

One connection does every write of a process. Coroutines hand it small functions and await
a future that resolves only after the commit containing their write. Writes made during one
turn of the event loop share one commit (group commit), so many concurrent workflows share
each fsync; a write with nothing else ready on the loop commits at once, with no future.
The commit runs on the loop's own thread while that is cheap, and on a writer thread when
commits are slow or the file is locked (see "the write connection" below).
Reads use their own connections, which WAL lets run beside the writer. Several processes
may share one file; SQLite's lock serialises their writers. The log is copied back into
the file on the writer thread (see "checkpoints" below), never inside a commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from plait.store import queries

T = TypeVar("T")
log = logging.getLogger("plait.store")

SQL = queries.load("sqlite")

# The sqlite3 module binds ints, floats and strings directly but sends ``None`` through its
# adapter lookup, which (finding nothing) raises and discards an AttributeError per value:
# about half a microsecond for each NULL, and a step's writes bind a dozen of them. An
# adapter that hands ``None`` back makes the lookup a hit, and the value still binds as
# NULL. It changes nothing for any other user of sqlite3 in the process.
_NONE: dict[None, None] = {}
sqlite3.register_adapter(type(None), cast("Callable[[None], None]", _NONE.get))
_BEGIN = SQL["begin"]
_BEGIN_IMMEDIATE = SQL["begin_immediate"]
_COMMIT = SQL["commit"]
_ROLLBACK = SQL["rollback"]
_DATA_VERSION = SQL["data_version"]
#: the synchronous pragma takes no parameter: one statement per level, by the names and
#: numbers SQLite accepts
_SYNCHRONOUS = {
    level: SQL[f"synchronous_{name}"]
    for name, levels in (
        ("off", ("0", "OFF")),
        ("normal", ("1", "NORMAL")),
        ("full", ("2", "FULL")),
        ("extra", ("3", "EXTRA")),
    )
    for level in levels
}

_BATCH_LIMIT = 256
_IDLE = object()
#: commits slower than this on average (a slow disk) leave the event loop free: the writer
#: thread runs them
_INLINE_LIMIT = 0.001
#: commits between two checkpoints
_CHECKPOINT_EVERY = 100
#: writes run at once, without a turn of the event loop in between, before the next one
#: waits for a turn (so a run of quick steps does not keep the loop to itself: each is a
#: commit, some 0.2 ms on a real disk)
_STREAK = 16
_CHECKPOINT = object()
#: ``_write_now``'s answer when the write must be queued instead
_NOT_NOW = object()
_Result = tuple[asyncio.Future[Any], asyncio.AbstractEventLoop, Any, BaseException | None]
_Settled = tuple[asyncio.Future[Any], Any, BaseException | None]


class WriteConnection(sqlite3.Connection):
    """The write connection, with a cursor of its own for the statements every step runs
    (its transaction's start and end, the fence, the attempts' writes):
    ``Connection.execute`` makes a new cursor for each statement, and frees it, which
    costs the sqlite3 module more than binding the statement's values. One statement at a
    time runs on ``statements``, each read to its end before the next: a loop over one
    statement's rows that runs others uses ``execute`` (a cursor per statement)
    instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statements = self.cursor()


class Connections:
    """The write connection and the read connections of one file (or of a memory
    database, where the write connection also serves reads)."""

    def __init__(self, url: str, path: str, *, synchronous: str, busy_timeout: float) -> None:
        self.url = url
        self.path = path
        self.memory = path == ":memory:"
        self.busy_timeout = busy_timeout
        try:
            self._synchronous = _SYNCHRONOUS[str(synchronous).strip().upper()]
        except KeyError:
            raise ValueError(
                f"invalid synchronous level {synchronous!r}: use OFF, NORMAL, FULL or EXTRA"
            ) from None
        self._writes: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        #: commits, for the benchmark's "durable writes per step"
        self.commits = 0
        #: set by watch: called (in the writer thread) when another process committed to
        #: the file
        self._on_foreign: Callable[[], Any] | None = None
        self._watch_interval: float | None = None
        #: the write connection's data_version at the last look, and when that was
        self._data_version = 0
        self._looked = 0.0
        #: the write connection; used under _conn_lock by the loop's thread or the writer's
        self._conn: WriteConnection | None = None
        self._conn_lock = threading.Lock()
        #: commits since the last checkpoint was asked for; checkpoints run (for tests)
        self._since_checkpoint = 0
        self.checkpoints = 0
        #: writes gathered on each event loop for the commit that runs at its next turn
        self._gathering: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        #: writes run at once since the loop's last turn
        self._streak = 0
        #: a moving average of commit times; above _INLINE_LIMIT the writer thread commits
        self._commit_time = 0.0
        self._slow = False
        self._closing = False
        #: the loop that opened the store, and its thread: asking asyncio for the running
        #: loop costs a system call (a fork check) on every write
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    @property
    def closed(self) -> bool:
        """No writer thread: never opened, or closed."""
        return self._writer is None

    def connect(self, factory: type[sqlite3.Connection] = sqlite3.Connection) -> sqlite3.Connection:
        """A new connection to the file. Its busy timeout (``timeout``) is how long a
        statement waits for another process's lock."""
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout,
            factory=factory,
        )
        conn.execute(self._synchronous)
        conn.execute(SQL["foreign_keys_off"])
        return conn

    async def open(self, start: Callable[[sqlite3.Connection], None]) -> None:
        """Start the writer thread; ``start`` prepares the file on the write connection
        (journal mode, migrations) before any write runs."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._loop, self._loop_thread = loop, threading.get_ident()
        self._closing = False
        self._writer = threading.Thread(
            target=self._write_loop, args=(start, loop, ready), name="plait-sqlite-writer"
        )
        self._writer.daemon = True
        self._writer.start()
        await ready
        if not self.memory:
            self._readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="plait-read")

    def watch(self, on_foreign: Callable[[], Any], interval: float) -> None:
        """Call ``on_foreign`` (in the writer thread) when another process commits.

        A connection's ``data_version`` pragma changes whenever *another* connection
        commits. The writer checks it on its own connection between batches and while
        idle, so this process's own commits never count and an idle process costs one
        cheap read every ``interval`` seconds.
        """
        self._watch_interval = interval
        self._on_foreign = on_foreign
        # the writer thread may be blocked waiting for a write with no timeout: wake it
        # so it starts watching now, not after the first write that reaches it
        self._writes.put(_IDLE)

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
            conn = cast("WriteConnection", self.connect(WriteConnection))
            start(conn)
            # waits for another process's write lock happen in _begin, never inline
            conn.execute(SQL["busy_timeout_off"])
            if not self.memory:
                conn.execute(SQL["wal_autocheckpoint_off"])
        except BaseException as exc:
            loop.call_soon_threadsafe(_settle, ready, None, exc)
            return
        self._data_version = conn.execute(_DATA_VERSION).fetchone()[0]
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
                checkpoint = item is _CHECKPOINT
                batch = [] if item is _IDLE or checkpoint else _items(item)
                stop = False
                while batch and len(batch) < _BATCH_LIMIT:
                    try:
                        nxt = self._writes.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    if nxt is _CHECKPOINT:
                        checkpoint = True
                    elif nxt is not _IDLE:
                        batch.extend(_items(nxt))
                if checkpoint:
                    with self._conn_lock:
                        self._checkpoint(conn)
                if not batch:
                    # Idle: look for other processes' commits, unless a commit of this
                    # process looked a moment ago. Under load the commits look (see
                    # _commit); the lock is left to them, since holding it here across
                    # the statement would push their batches onto this thread.
                    if time.monotonic() - self._looked < (self._watch_interval or 0.0):
                        continue
                    with self._conn_lock:
                        self._look_for_foreign(conn)
                    continue
                with self._conn_lock:
                    results = self._run_batch(conn, batch, wait=True)
                # one wake-up of each waiting event loop per batch, not one per future
                by_loop: dict[Any, list[_Settled]] = {}
                for fut, loop_, value, error in results or []:
                    by_loop.setdefault(loop_, []).append((fut, value, error))
                for loop_, settled in by_loop.items():
                    loop_.call_soon_threadsafe(_settle_all, settled)
                if stop:
                    break
        finally:
            with self._conn_lock:
                self._conn = None
                conn.close()

    def _begin(self, conn: WriteConnection, wait: bool) -> bool:
        """Take the file's write lock. Without ``wait`` give up at once when another
        process holds it (the caller is the event loop); with it, retry with growing
        pauses until ``busy_timeout``."""
        if wait:
            while_locked(lambda: conn.statements.execute(_BEGIN_IMMEDIATE), self.busy_timeout)
            return True
        try:
            conn.statements.execute(_BEGIN_IMMEDIATE)
        except sqlite3.OperationalError as exc:
            if is_locked(exc):
                return False
            raise
        return True

    def _run_batch(
        self, conn: WriteConnection, batch: list[Any], wait: bool
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
                _rollback(conn)
                if not wait:
                    return None  # the writer thread runs them one by one, waiting for locks
                return results + [self._alone(conn, item) for item in writes]
        try:
            self._commit(conn)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                _rollback(conn)
            pending = [(f, lp, None, exc) for f, lp, _, _ in pending]
        return results + pending

    def _alone(self, conn: WriteConnection, item: Any) -> _Result:
        """One write in a transaction of its own (after its batch failed)."""
        _, fn, fut, loop = item
        try:
            self._begin(conn, wait=True)
            value = fn(conn)
            self._commit(conn)
            return (fut, loop, value, None)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                _rollback(conn)
            return (fut, loop, None, exc)

    def _commit(self, conn: WriteConnection) -> None:
        """Commit, timing it: the disk's sync time decides where the next batch runs."""
        started = time.perf_counter()
        conn.statements.execute(_COMMIT)
        self.commits += 1
        self._since_checkpoint += 1
        if self._since_checkpoint >= _CHECKPOINT_EVERY and not self.memory:
            self._since_checkpoint = 0
            self._writes.put(_CHECKPOINT)
        took = time.perf_counter() - started
        self._commit_time += (took - self._commit_time) * 0.1
        self._slow = self._commit_time > _INLINE_LIMIT
        if self._on_foreign is not None and (
            time.monotonic() - self._looked >= (self._watch_interval or 0.0)
        ):
            # at most one look per interval: a statement per commit would cost a busy
            # process a few per cent of its steps
            self._look_for_foreign(conn)

    # -- checkpoints ----------------------------------------------------------------------
    #
    # SQLite's own checkpoint runs inside the commit that finds the log past 1,000 pages:
    # it copies them into the file and syncs it, tens of milliseconds on a busy disk. On
    # the event loop's thread that stalled every workflow of the process (the p99 of a
    # live run's step during a bulk retry). The write connection turns it off; every
    # ``_CHECKPOINT_EVERY`` commits the writer thread runs one on that same connection,
    # between two transactions. While it does, the loop's writes find the connection taken
    # and queue for the writer thread, which commits them together right after; the loop
    # itself never waits. Being between transactions of the only writer of this process,
    # a checkpoint usually copies the whole log, and the next commit starts it over from
    # its beginning (a checkpoint beside a busy writer would never catch up, and the log
    # would grow without end). A passive one waits for nobody: what another process's
    # reader still uses is copied by a later one.

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute(SQL["wal_checkpoint"]).fetchall()
            self.checkpoints += 1
        except sqlite3.Error as exc:
            log.warning("checkpoint of %s failed (%s); trying again later", self.path, exc)

    def _look_for_foreign(self, conn: sqlite3.Connection) -> None:
        """Tell the notifier if another process committed since the last look (the
        caller holds the write connection). ``data_version`` changes only with other
        connections' commits, so this process's own never count."""
        if self._on_foreign is None:
            return
        self._looked = time.monotonic()
        seen = conn.execute(_DATA_VERSION).fetchone()[0]
        if seen != self._data_version:
            self._data_version = seen
            self._on_foreign()

    def _submit(self, kind: str, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        if self._writer is None or self._closing:
            raise RuntimeError(f"the store {self.url} is closed")
        loop = self._loop
        if loop is None or threading.get_ident() != self._loop_thread or not loop.is_running():
            loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        item = (kind, fn, fut, loop)
        gathering = self._gathering.get(loop)
        if gathering is None:
            self._gathering[loop] = [item]
            if not self._slow and self._alone_now(loop):
                # nothing else is to run before the gathered writes would: they would be
                # this one alone, so it runs now, and its caller goes on without giving
                # the loop two turns (the write's, and its own wake-up)
                self._run_here(loop)
            else:
                # every write submitted before this callback runs shares its commit
                loop.call_soon(self._turn, loop)
        else:
            gathering.append(item)
        return fut

    def _alone_now(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether nothing else waits to run on ``loop``, this turn or the next (asyncio's
        queue of ready callbacks is empty), and the writes run at once since its last turn
        are fewer than ``_STREAK``."""
        ready = getattr(loop, "_ready", None)
        if ready is None or ready or self._streak >= _STREAK:
            return False
        self._streak += 1
        return True

    def _turn(self, loop: asyncio.AbstractEventLoop) -> None:
        """The gathered writes, at a turn of the loop: a new streak may begin after it."""
        self._streak = 0
        self._run_here(loop)

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
            # as one item: the writer thread commits the turn's writes together, however
            # the threads take turns while they are handed over
            self._writes.put(batch)
            return
        _settle_all([(fut, value, exc) for fut, _lp, value, exc in results])

    # -- what the store calls ------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, background: bool = False) -> T:
        """Run ``fn`` in a write transaction; returns once its commit is durable. A
        ``background`` write (a long one, such as a batch of a prune) always runs on the
        writer thread, so it never holds up the event loop, only the next commit."""
        if background:
            if self._writer is None or self._closing:
                raise RuntimeError(f"the store {self.url} is closed")
            return await self._on_writer_thread(fn, asyncio.get_running_loop())
        loop = self._loop
        if (
            loop is not None
            and not self._slow
            and self._conn is not None
            and not self._closing
            and loop not in self._gathering
            and threading.get_ident() == self._loop_thread
            and loop.is_running()
            and self._alone_now(loop)
        ):
            # what ``_submit`` would do for a write alone, without its future, its batch
            # and the settling of both: a sequential step's commit is most writes
            value = self._write_now(fn)
            if value is not _NOT_NOW:
                return cast("T", value)
            return await self._on_writer_thread(fn, loop)
        return await self._submit("write", fn)

    async def _on_writer_thread(
        self, fn: Callable[[sqlite3.Connection], T], loop: asyncio.AbstractEventLoop
    ) -> T:
        """Hand one write to the writer thread; its value once committed there."""
        fut: asyncio.Future[T] = loop.create_future()
        self._writes.put(("write", fn, fut, loop))
        return await fut

    def _write_now(self, fn: Callable[[sqlite3.Connection], T]) -> T | object:
        """Run one write in a transaction of its own on the loop's thread: its value, or
        ``_NOT_NOW`` when it must go to the writer thread instead (the connection is taken
        or the file locked, or ``fn`` failed: there it runs again, waiting for locks, as a
        failed batch does)."""
        if not self._conn_lock.acquire(blocking=False):
            return _NOT_NOW
        try:
            conn = self._conn
            if conn is None:
                raise RuntimeError(f"the store {self.url} is closed")
            if not self._begin(conn, wait=False):
                return _NOT_NOW
            try:
                value = fn(conn)
            except Exception:
                _rollback(conn)
                return _NOT_NOW
            except BaseException:
                _rollback(conn)  # an interrupt of the process: not a write to run again
                raise
            try:
                self._commit(conn)
            except BaseException:
                with contextlib.suppress(Exception):
                    _rollback(conn)
                raise
            return value
        finally:
            self._conn_lock.release()

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a read transaction on a reader thread."""
        if self._readers is None:
            return await self._submit("read", fn)
        if self._writer is None:
            raise RuntimeError(f"the store {self.url} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._in_reader, fn)

    async def read_here(self, fn: Callable[[sqlite3.Connection], T]) -> T:
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
            conn = self.connect()
            self._local.conn = conn
            with self._lock:
                self._reader_conns.append(conn)
        conn.execute(_BEGIN)
        try:
            return fn(conn)
        finally:
            conn.execute(_COMMIT)


def is_locked(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds a lock it needs."""
    return "locked" in str(exc) or "busy" in str(exc)


def while_locked(
    attempt: Callable[[], T],
    timeout: float,
    *,
    first: float = 0.0005,
    most: float = 0.02,
    retrying: Callable[[], None] | None = None,
) -> T:
    """``attempt()``, tried again with growing pauses (``first`` doubling up to ``most``)
    while another connection holds a lock it needs, for up to ``timeout`` seconds; then
    the lock's error. For what SQLite's own busy handler does not wait on."""
    delay, deadline = first, time.monotonic() + timeout
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or time.monotonic() >= deadline:
                raise
        if retrying is not None:
            retrying()
        time.sleep(delay)
        delay = min(delay * 2, most)


def _rollback(conn: sqlite3.Connection) -> None:
    """End the transaction a failed write began, unless SQLite already has: a statement
    failing with SQLITE_FULL, SQLITE_IOERR or SQLITE_NOMEM rolls the whole transaction
    back itself, and a rollback then fails, hiding the error that ended it (and, raised
    where a batch is settled, leaving its callers waiting for ever)."""
    if conn.in_transaction:
        conn.execute(_ROLLBACK)


def _items(item: Any) -> list[Any]:
    """The writes in one item of the writer's queue: a write, or a loop turn's writes
    handed over together (a list)."""
    if isinstance(item, list):
        return list(cast("list[object]", item))
    return [item]


def _settle_all(settled: list[_Settled]) -> None:
    for fut, value, exc in settled:
        _settle(fut, value, exc)


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


__all__ = ["SQL", "Connections", "WriteConnection"]
