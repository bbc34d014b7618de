"""Processes opening one new SQLite file at once: none of them fails for the race."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

import pytest

import plait
from support.polling import eventually

app = plait.App("open-race")


@app.workflow
async def nothing(wf: plait.Workflow, data: None) -> int:
    return 1


async def test_an_open_waits_for_another_process_holding_the_new_files_write_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the write lock of a file still in rollback-journal mode (it
    is creating it). Switching to WAL needs the file to itself, and SQLite reports the
    lock at once instead of waiting (the two would deadlock): the open tries again and
    succeeds once the other is done, instead of failing the worker."""
    path = tmp_path / "plait.db"
    holding, release = threading.Event(), threading.Event()

    def other_process() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("CREATE TABLE elsewhere (x)")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO elsewhere VALUES (1)")
        holding.set()
        release.wait(30)
        conn.execute("COMMIT")
        conn.close()

    holder = threading.Thread(target=other_process)
    holder.start()
    try:
        assert holding.wait(10)
        caplog.set_level(logging.INFO, logger="plait.store.sqlite")
        opening = asyncio.ensure_future(_open_and_run(path))

        async def retrying() -> bool:
            if opening.done():  # it must not end (fail) while the lock is held
                raise AssertionError(f"the open ended: {opening.exception()!r}")
            return "trying again" in caplog.text

        await eventually(retrying, what="the open to try again")
        release.set()
        assert await asyncio.wait_for(opening, 30) == 1
    finally:
        release.set()
        holder.join()


async def _open_and_run(path: Path) -> int:
    async with plait.Engine(app, f"sqlite:///{path}") as engine:
        return int(await engine.run("nothing", timeout=10))
