"""``start(connection=...)``, on every store: the run is written in the caller's open
transaction. Rolled back, there is no run; committed, a worker in another process claims
it, and on PostgreSQL the commit's NOTIFY wakes that worker at once (its poll is 30 s)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import plait
from support import queue_app
from support.ledger import read_ledger
from support.paths import TESTS
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: the worker's poll: a run it claims within seconds was not found by polling
POLL = 30.0

WORKER = """
import asyncio, sys
import plait
from support import queue_app

async def main() -> None:
    async with plait.Engine(queue_app.app, sys.argv[1], poll_interval=float(sys.argv[2])):
        print("worker ready", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


def start_worker(database: str, ledger: Path, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """A worker process of ``queue_app`` polling every ``POLL`` seconds."""
    env = {**os.environ, "CRASH_LEDGER": str(ledger), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, database, str(POLL)],
        cwd=TESTS,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def sqlite_path(database: str) -> str:
    return database.removeprefix("sqlite:///")


def plain_dsn(database: str) -> str:
    """The DSN without plait's own options (asyncpg takes none of them)."""
    return urlunsplit(urlsplit(database)._replace(query=""))


@contextlib.asynccontextmanager
async def transaction(
    database: str,
) -> AsyncIterator[tuple[Any, Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]]:
    """The application's own connection with a transaction open in it (and a write of
    its own in it), and how to commit or roll it back."""
    if database.startswith("sqlite"):
        conn = sqlite3.connect(sqlite_path(database))
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")  # opens the transaction

        async def commit() -> None:
            conn.commit()

        async def rollback() -> None:
            conn.rollback()

        try:
            yield conn, commit, rollback
        finally:
            conn.close()
        return
    import asyncpg

    pg = await asyncpg.connect(plain_dsn(database))
    tr = pg.transaction()
    await tr.start()
    await pg.execute("CREATE TEMP TABLE orders (id integer) ON COMMIT DROP")
    try:
        yield pg, tr.commit, tr.rollback
    finally:
        await pg.close()


async def test_rolled_back_there_is_no_run_committed_another_process_claims_it(
    database: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    log = (tmp_path / "worker.log").open("wb")
    worker = start_worker(database, ledger, log)
    try:
        async with plait.Engine(queue_app.app, database, workers=False) as engine:

            async def worker_live() -> bool:
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                return any(w.live for w in await engine.list_workers())

            await eventually(worker_live, timeout=30, what="the worker process up")

            async with transaction(database) as (conn, _commit, rollback):
                gone = await engine.start("plain", {"n": "gone"}, connection=conn)
                await rollback()
            with pytest.raises(plait.RunNotFoundError):
                await engine.get_run(gone)

            async with transaction(database) as (conn, commit, _rollback):
                kept = await engine.start("plain", {"n": "kept"}, connection=conn)
                # not committed: nobody else sees it yet
                with pytest.raises(plait.RunNotFoundError):
                    await engine.get_run(kept)
                committed = time.time()
                await commit()
            run = await engine.wait(kept, timeout=POLL / 2)
            assert run.status == "completed"
        [start] = [x for x in read_ledger(ledger) if x["event"] == "start"]
        assert start["run_id"] == kept and start["pid"] == worker.pid
        # woken by the commit, not found by a poll (30 s)
        assert start["t"] - committed < 5.0
    finally:
        worker.kill()
        worker.wait()
        log.close()
