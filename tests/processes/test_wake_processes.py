"""A worker process is told of new work by the process that made it, on both stores: a
run started, or an event sent, in one process is taken up by a worker in another within
a fraction of a second, although that worker polls only every 30 s (SQLite: datagram
sockets beside the file; PostgreSQL: LISTEN/NOTIFY)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator

import pytest

import plait
from support import wake_app
from support.paths import SRC, TESTS
from support.polling import eventually

pytestmark = pytest.mark.timeout(120)

#: far under the worker's poll (wake_app.POLL_SECONDS), far over a wake-up on a busy machine
DEADLINE = 2.0
SAMPLES = 5


@contextlib.asynccontextmanager
async def worker_process(database: str) -> AsyncIterator[asyncio.subprocess.Process]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "support.wake_app",
        database,
        cwd=TESTS,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line.strip() == b"ready", line + await proc.stdout.read()
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_a_worker_process_starts_a_new_run_at_once(database: str) -> None:
    async with (
        worker_process(database),
        plait.Engine(wake_app.app, database, workers=False) as engine,
    ):
        for _ in range(SAMPLES):
            began = time.monotonic()
            run_id = await engine.start(wake_app.first_step)
            run = await engine.wait(run_id, timeout=30)
            assert run.status == "completed"
            assert run.output - began < DEADLINE, run.output - began


async def test_a_worker_process_resumes_a_run_at_once_when_an_event_is_sent(
    database: str,
) -> None:
    async with (
        worker_process(database),
        plait.Engine(wake_app.app, database, workers=False) as engine,
    ):
        for _ in range(SAMPLES):
            run_id = await engine.start(wake_app.after_event)

            async def waiting(run_id: str = run_id) -> bool:
                steps = await engine.get_steps(run_id)
                return any(s.kind == "event" and s.status == "scheduled" for s in steps)

            await eventually(waiting, timeout=30, what="the run to wait for its event")
            began = time.monotonic()
            assert await engine.send_event(run_id, "go")
            run = await engine.wait(run_id, timeout=30)
            assert run.status == "completed"
            assert run.output - began < DEADLINE, run.output - began
