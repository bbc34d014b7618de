"""Where the SQLite store runs its writes: on the event loop's thread while the connection
is free and commits are fast, on the writer thread otherwise, and never by blocking the
loop on another process's write lock."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import plait
from plait.store.rows import NewRun
from plait.store.sqlite import SQLiteStore, leases, writer
from support.polling import eventually


def _app() -> plait.App:
    app = plait.App()

    @app.function
    async def double(n: int) -> int:
        return n * 2

    @app.workflow
    async def twice(wf: plait.Workflow, n: int) -> int:
        return await wf.do("double", double, n)

    return app


def _size(path: Path) -> int:
    """A file's size, read between writes (a stat, too quick to need a thread)."""
    return path.stat().st_size


async def _thread_of_a_write(store: SQLiteStore) -> str:
    return await store._write(lambda conn: threading.current_thread().name)


async def test_a_fast_commit_runs_on_the_loops_thread(tmp_path: Path) -> None:
    async with plait.Engine(_app(), f"sqlite:///{tmp_path / 'a.db'}") as engine:
        assert await engine.run("twice", 4, timeout=10) == 8
        store = engine.store
        assert isinstance(store, SQLiteStore)
        # as after a run of fast fsyncs (a loaded machine's real ones may be slow)
        store._db._commit_time, store._db._slow = 0.0, False
        assert await _thread_of_a_write(store) == threading.current_thread().name


async def test_slow_commits_move_to_the_writer_thread_and_come_back(tmp_path: Path) -> None:
    async with plait.Engine(_app(), f"sqlite:///{tmp_path / 'a.db'}") as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)
        store._db._commit_time, store._db._slow = 1.0, True  # as after a run of slow fsyncs
        assert await _thread_of_a_write(store) == "plait-sqlite-writer"
        assert await engine.run("twice", 5, timeout=10) == 10
        # fast commits pull the moving average down again, and writes come home
        for _ in range(200):
            if not store._db._slow:
                break
            await store._write(lambda conn: conn.execute("SELECT 1").fetchone())
        assert not store._db._slow
        assert await _thread_of_a_write(store) == threading.current_thread().name


async def test_another_process_holding_the_lock_never_blocks_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    async with plait.Engine(_app(), f"sqlite:///{path}") as engine:
        assert await engine.run("twice", 1, timeout=10) == 2
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the file's write lock
        try:
            start = asyncio.ensure_future(engine.start("twice", 21))
            ticks = 0
            while ticks < 20:  # the loop keeps turning while the write waits
                await asyncio.sleep(0.005)
                ticks += 1
            assert not start.done()
        finally:
            other.execute("COMMIT")
            other.close()
        run_id = await asyncio.wait_for(start, 10)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == 42


async def test_a_failing_write_never_undoes_its_batch_neighbours(tmp_path: Path) -> None:
    async with plait.Engine(_app(), f"sqlite:///{tmp_path / 'a.db'}") as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)

        def good(conn: sqlite3.Connection) -> str:
            conn.execute("INSERT INTO plait_state (run_id, name, value) VALUES ('r', 'k', '1')")
            return "kept"

        def bad(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO plait_state (run_id, name, value) VALUES ('r', 'x', '2')")
            raise LookupError("this write fails")

        # submitted in one turn of the loop, so they start out in one transaction
        results = await asyncio.gather(
            store._write(good), store._write(bad), return_exceptions=True
        )
        assert results[0] == "kept"
        assert isinstance(results[1], LookupError)
        rows = await store._read(
            lambda conn: conn.execute("SELECT name FROM plait_state").fetchall()
        )
        assert rows == [("k",)]


async def test_commits_leave_the_log_to_the_writer_thread(tmp_path: Path) -> None:
    """A commit on the loop's thread never copies the log back into the file (SQLite's own
    checkpoint would, with its sync, in whichever commit finds the log long): the write
    connection's automatic checkpoint is off, and the writer thread's checkpoints keep
    the log short. 1,500 commits of 8 KiB each would grow a log that nobody copies back to about
    18 MiB; here it stays under 4 MiB, the most SQLite's own checkpoint would let it
    reach, and every row is in the file."""
    path = tmp_path / "a.db"
    async with plait.Engine(_app(), f"sqlite:///{path}") as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)
        pages = await store._write(
            lambda conn: conn.execute("PRAGMA wal_autocheckpoint").fetchone()
        )
        assert pages == (0,)
        await store._write(lambda conn: conn.execute("CREATE TABLE blobs (b BLOB)"))
        wal = Path(f"{path}-wal")
        biggest = 0
        for n in range(1500):
            await store._write(
                lambda conn: conn.execute("INSERT INTO blobs VALUES (?)", (b"x" * 8192,))
            )
            if n % 50 == 0:
                biggest = max(biggest, _size(wal))
        assert store._db.checkpoints > 0
        assert biggest < 4 * 1024 * 1024, biggest
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (1500,)


async def test_a_succeeded_attempt_runs_no_trigger_program(tmp_path: Path) -> None:
    """SQLite enters a trigger's program (its WHEN clause inside) for every update of a
    column the trigger watches. The stream-reset trigger watches ``attempt_error``, which
    only the end of a failed, interrupted or cancelled attempt sets: the end of a
    succeeded one runs no program (a trace shows a trigger's program as its statement
    traced once more), and a failed attempt's streams are still reset."""
    app = plait.App()

    @app.function(retries=1, retry_delay=0)
    async def talk(words: int, ctx: plait.StepContext) -> str:
        await ctx.stream("tokens").write(f"{words} words, try {ctx.attempt}")
        if ctx.attempt == 1:
            raise RuntimeError("the model hung up")
        return "said"

    @app.workflow
    async def chat(wf: plait.Workflow) -> str:
        first = await wf.do("first", lambda: "plain")
        return first + " " + await wf.do("talk", talk, 2)

    traced: list[str] = []
    async with plait.Engine(app, f"sqlite:///{tmp_path / 'a.db'}") as engine:
        store = engine.store
        assert isinstance(store, SQLiteStore)
        await store._write(lambda conn: conn.set_trace_callback(traced.append))
        run_id = await engine.start("chat", inline=True)
        assert (await engine.wait(run_id, timeout=20)).output == "plain said"
        await store._write(lambda conn: conn.set_trace_callback(None))
        kinds = [e.kind for e in await engine.read_stream(run_id, "tokens")]
    assert kinds == ["data", "reset", "data", "end"]
    # each attempt's end, with how many times in a row it was traced
    ends: list[tuple[str, int]] = []
    for sql in traced:
        if not sql.startswith("UPDATE plait_steps SET status"):
            continue
        if ends and ends[-1][0] == sql:
            ends[-1] = (sql, ends[-1][1] + 1)
        else:
            ends.append((sql, 1))
    assert [("'failed'" in sql, times > 1) for sql, times in ends] == [
        (False, False),  # step "first" succeeded: no trigger program
        (True, True),  # "talk" failed: its streams are reset by the trigger
        (False, False),  # "talk" succeeded on its retry
    ], ends


async def _quiet_loop() -> asyncio.AbstractEventLoop:
    """The running loop once nothing else is ready to run on it."""
    loop = asyncio.get_running_loop()
    for _ in range(100):
        if not loop._ready:  # type: ignore[attr-defined]
            return loop
        await asyncio.sleep(0)
    raise AssertionError("the loop never went quiet")


@pytest.fixture
async def fast_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    """A store on a file whose commits run on the loop's thread (as after a run of fast
    fsyncs: a loaded machine's real ones may be slow)."""
    store = SQLiteStore(f"sqlite:///{tmp_path / 'a.db'}")
    await store.open()
    store._db._commit_time, store._db._slow = 0.0, False
    try:
        yield store
    finally:
        await store.close()


async def test_a_lone_write_runs_at_once_and_a_streak_of_them_gives_the_loop_a_turn(
    fast_store: SQLiteStore,
) -> None:
    """A write with nothing else ready on the loop would commit alone at the next turn: it
    runs at once, and its caller goes on without the loop's two turns (the write's and its
    own wake-up), which a sequential run paid on every step. After ``_STREAK`` of them in
    a row the next one waits for a turn, so quick steps never keep the loop from the rest
    of the process."""
    db = fast_store._db
    await _quiet_loop()
    at_once: list[bool] = []
    for _ in range(writer._STREAK + 1):
        written = db._submit("write", lambda conn: conn.execute("SELECT 1").fetchone()[0])
        at_once.append(written.done())
        assert await written == 1
    assert at_once == [True] * writer._STREAK + [False]
    await _quiet_loop()
    written = db._submit("write", lambda conn: 2)
    assert written.done() and await written == 2  # the turn began a new streak


async def test_a_lone_awaited_write_commits_before_anything_else_runs(
    fast_store: SQLiteStore,
) -> None:
    """``write`` itself takes the lone write's short way: committed on the loop's thread
    before its caller goes on, and before a callback that was not ready when it began."""
    db = fast_store._db
    await _quiet_loop()
    order: list[str] = []

    def put(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO plait_state (run_id, name, value) VALUES ('r', 'k', '1')")
        return threading.current_thread().name

    # due at the loop's next look at its clock: the write's own turn would come after it
    asyncio.get_running_loop().call_later(0, order.append, "other")
    thread = await db.write(put)
    order.append("write")
    await eventually(lambda: "other" in order)
    assert thread == threading.current_thread().name
    assert order == ["write", "other"]
    assert await fast_store._read(lambda c: c.execute("SELECT value FROM plait_state").fetchall())


async def test_a_lone_write_that_fails_leaves_nothing_and_its_caller_gets_the_error(
    fast_store: SQLiteStore,
) -> None:
    """A failed lone write is rolled back and runs again on the writer thread, as a failed
    batch's writes do (one of them may have failed for a lock, which that thread waits
    out); what it raises there reaches the caller."""
    db = fast_store._db
    await _quiet_loop()
    threads: list[str] = []

    def bad(conn: sqlite3.Connection) -> None:
        threads.append(threading.current_thread().name)
        conn.execute("INSERT INTO plait_state (run_id, name, value) VALUES ('r', 'x', '2')")
        raise LookupError("this write fails")

    with pytest.raises(LookupError, match="this write fails"):
        await db.write(bad)
    assert threads[0] == threading.current_thread().name
    assert "plait-sqlite-writer" in threads[1:]
    rows = await fast_store._read(lambda c: c.execute("SELECT * FROM plait_state").fetchall())
    assert rows == []
    assert await db.write(lambda conn: "next") == "next"  # the connection is free again


async def test_a_lone_write_interrupted_runs_once_and_passes_the_interrupt_on(
    fast_store: SQLiteStore,
) -> None:
    """An interrupt of the process inside a write (``SystemExit``, ``KeyboardInterrupt``)
    is no write failure to try again on the writer thread: it is rolled back and raised."""
    db = fast_store._db
    await _quiet_loop()
    calls: list[str] = []

    def interrupted(conn: sqlite3.Connection) -> None:
        calls.append(threading.current_thread().name)
        conn.execute("INSERT INTO plait_state (run_id, name, value) VALUES ('r', 'x', '2')")
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        await db.write(interrupted)
    assert calls == [threading.current_thread().name]
    rows = await fast_store._read(lambda c: c.execute("SELECT * FROM plait_state").fetchall())
    assert rows == []
    assert await db.write(lambda conn: "next") == "next"


def _on_a_full_disk(conn: sqlite3.Connection) -> None:
    """A write the disk has no room for. SQLite ends the whole transaction itself when a
    statement fails with SQLITE_FULL (as with SQLITE_IOERR or SQLITE_NOMEM): nothing is
    left for a ROLLBACK to end. ``max_page_count`` below the file's size is a full disk."""
    limit = conn.execute("PRAGMA max_page_count").fetchone()[0]
    conn.execute("PRAGMA max_page_count = 1")
    try:
        conn.execute(
            "INSERT INTO plait_state (run_id, name, value) VALUES ('r', 'big', ?)",
            ("x" * 200_000,),
        )
    finally:
        conn.execute(f"PRAGMA max_page_count = {limit}")


async def test_a_lone_write_on_a_full_disk_gets_the_disks_error(
    fast_store: SQLiteStore,
) -> None:
    db = fast_store._db
    await _quiet_loop()
    with pytest.raises(sqlite3.OperationalError, match="full"):
        await asyncio.wait_for(db.write(_on_a_full_disk), 10)
    assert await asyncio.wait_for(db.write(lambda conn: "next"), 10) == "next"


async def test_a_batch_on_a_full_disk_settles_every_write(fast_store: SQLiteStore) -> None:
    db = fast_store._db
    await _quiet_loop()

    def good(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO plait_state (run_id, name, value) VALUES ('r', 'k', '1')")
        return "kept"

    # submitted in one turn of the loop: one transaction on the loop's thread
    results = await asyncio.wait_for(
        asyncio.gather(db.write(good), db.write(_on_a_full_disk), return_exceptions=True), 10
    )
    assert results[0] == "kept"
    assert isinstance(results[1], sqlite3.OperationalError), results[1]
    assert "full" in str(results[1])


async def test_a_write_on_a_full_disk_leaves_the_writer_thread_working(
    fast_store: SQLiteStore,
) -> None:
    db = fast_store._db
    with pytest.raises(sqlite3.OperationalError, match="full"):
        await asyncio.wait_for(db.write(_on_a_full_disk, background=True), 10)
    assert await asyncio.wait_for(db.write(lambda conn: "next", background=True), 10) == "next"


async def test_writes_of_tasks_ready_together_still_share_a_commit(
    fast_store: SQLiteStore,
) -> None:
    """A write waits for the loop's turn when another task is ready to run first: that
    task's write joins it, and the two share one commit."""
    db = fast_store._db
    await _quiet_loop()
    before = db.commits

    async def one(n: int) -> int:
        return await db.write(lambda conn: conn.execute("SELECT ?", (n,)).fetchone()[0])

    assert await asyncio.gather(one(1), one(2)) == [1, 2]
    assert db.commits - before == 1


@pytest.mark.parametrize("slow", [False, True])
async def test_a_turns_writes_share_one_commit_when_they_go_to_the_writer_thread(
    fast_store: SQLiteStore, slow: bool
) -> None:
    """Writes ready in one turn of the loop share one commit on the writer thread too
    (the connection taken by a checkpoint, or slow commits): they are handed over
    together, so the writer cannot start on the first while the rest are on their way."""
    db = fast_store._db
    db._slow = slow
    await _quiet_loop()
    before = db.commits
    taken = threading.Event()
    free = threading.Event()

    def hold() -> None:
        with db._conn_lock:
            taken.set()
            free.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait(10)

    async def one(n: int) -> int:
        return await db.write(lambda conn: conn.execute("SELECT ?", (n,)).fetchone()[0])

    # the threads take turns as often as they can: a hand-over one write at a time
    # would have the writer start on the first ones alone
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        writes = asyncio.gather(*(one(n) for n in range(100)))
        await asyncio.sleep(0)  # the turn that hands them over
        free.set()
        results = await writes
    finally:
        sys.setswitchinterval(interval)
    assert results == list(range(100))
    holder.join()
    assert db.commits - before == 1


async def test_a_claim_whose_read_fails_takes_nothing(
    fast_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim reads the passes of the runs it takes in its own transaction: when that
    read fails, the claim is rolled back with it, and the runs are there for the next
    claim (the worker's, without the read) at once, not after their leases run out."""
    store = fast_store
    await store.create_run(NewRun("r1", "wf", "workflow", None, input="{}", status="running"))

    def unreadable(conn: sqlite3.Connection, run_id: str) -> None:
        raise sqlite3.OperationalError("interrupted")

    monkeypatch.setattr(leases, "read_pass", unreadable)
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        await store.claim_due_passes("w1", 60.0, 10)
    assert await store.claim_due_runs("w2", 60.0, 10) == ["r1"]
